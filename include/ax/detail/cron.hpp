// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// Cron expressions, time zones and the next tick, standard library only (used by ax::pg's
// recurring schedules; nothing here knows PostgreSQL).
//   - CronExpr: the standard 5 fields (minute hour day-of-month month day-of-week), or 6 with a
//     leading seconds field; lists, ranges, steps, names (JAN..DEC, SUN..SAT), 7 = Sunday, and
//     the shortcuts @yearly @annually @monthly @weekly @daily @midnight @hourly. When both day
//     fields are restricted (neither starts with '*'), a day matches if EITHER matches (Vixie's
//     OR rule); otherwise both must.
//   - TimeZone: UTC, or an IANA zone read from its TZif file (RFC 8536, versions 1..4, with
//     the POSIX TZ footer for instants past the last listed transition) under $TZDIR or
//     /usr/share/zoneinfo. g++ 12's libstdc++ has no std::chrono::tzdb, hence our own reader.
//   - next_tick(expr, zone, t): the first tick strictly after UTC second t. Ticks are wall-clock
//     times in the zone. DST, as cronie/Vixie cron do it:
//       * a wall-clock time that does not exist (spring forward) runs at the transition instant
//         (several such times collapse into that one instant: one tick);
//       * a wall-clock time that occurs twice (fall back) runs once, at its first occurrence —
//         unless the hour field is '*' (every hour), in which case it runs at both, so that an
//         interval-style schedule (`*/15 * * * *`) keeps its interval in real time.

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ax::detail {

// ---------------------------------------------------------------- civil time helpers

/// Days since 1970-01-01 of a proleptic Gregorian date.
[[nodiscard]] inline std::int64_t days_from_civil(int y, unsigned m, unsigned d) noexcept {
    using namespace std::chrono;
    return sys_days{year{y} / month{m} / day{d}}.time_since_epoch().count();
}

/// A broken-down civil time (what a cron field is matched against).
struct CivilTime {
    int year = 1970;
    unsigned month = 1, day = 1, hour = 0, minute = 0, second = 0;
    unsigned weekday = 4; ///< 0 = Sunday
};

/// Seconds since the epoch of a civil time read as UTC ("local seconds" when it is a wall clock).
[[nodiscard]] inline std::int64_t civil_seconds(const CivilTime& c) noexcept {
    return days_from_civil(c.year, c.month, c.day) * 86400 + c.hour * 3600 + c.minute * 60 +
           c.second;
}

/// civil_seconds' inverse.
[[nodiscard]] inline CivilTime civil_of(std::int64_t s) noexcept {
    using namespace std::chrono;
    std::int64_t days = s / 86400, rem = s % 86400;
    if (rem < 0) {
        rem += 86400;
        --days;
    }
    const sys_days sd{std::chrono::days{days}};
    const year_month_day ymd{sd};
    CivilTime c;
    c.year = static_cast<int>(ymd.year());
    c.month = static_cast<unsigned>(ymd.month());
    c.day = static_cast<unsigned>(ymd.day());
    c.hour = static_cast<unsigned>(rem / 3600);
    c.minute = static_cast<unsigned>(rem / 60 % 60);
    c.second = static_cast<unsigned>(rem % 60);
    c.weekday = weekday{sd}.c_encoding();
    return c;
}

[[nodiscard]] inline unsigned days_in_month(int y, unsigned m) noexcept {
    using namespace std::chrono;
    return static_cast<unsigned>((year{y} / month{m} / last).day());
}

// ---------------------------------------------------------------- cron expressions

/// A parsed cron expression: one bit per allowed value of each field.
struct CronExpr {
    std::uint64_t seconds = 1; ///< bits 0..59 (5-field expressions: second 0 only)
    std::uint64_t minutes = 0; ///< bits 0..59
    std::uint32_t hours = 0;   ///< bits 0..23
    std::uint32_t mdays = 0;   ///< bits 1..31
    std::uint16_t months = 0;  ///< bits 1..12
    std::uint8_t wdays = 0;    ///< bits 0..6, 0 = Sunday
    bool mday_star = false;    ///< day-of-month field starts with '*'
    bool wday_star = false;    ///< day-of-week field starts with '*'
    bool hour_star = false;    ///< hour field is exactly '*' (both fall-back occurrences run)
    bool has_seconds = false;  ///< written with 6 fields

    /// Whether the day (of month `mday`, weekday `wday`) matches, with the OR rule.
    [[nodiscard]] bool day_matches(unsigned mday, unsigned wday) const noexcept {
        const bool dm = (mdays >> mday) & 1u, wm = (wdays >> wday) & 1u;
        return mday_star || wday_star ? dm && wm : dm || wm;
    }
};

namespace cron_detail {

struct Field {
    const char* name;
    unsigned lo, hi;
    const char* const* names; ///< 3-letter names for lo.. (nullptr: none)
};

inline constexpr const char* month_names[] = {"JAN", "FEB", "MAR", "APR", "MAY", "JUN",
                                              "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"};
inline constexpr const char* day_names[] = {"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"};

[[noreturn]] inline void fail(std::string_view expr, const Field& f, std::string_view text,
                              const std::string& why) {
    throw std::invalid_argument("cron expression '" + std::string(expr) + "': " + f.name +
                                " field '" + std::string(text) + "': " + why);
}

inline unsigned number(std::string_view expr, const Field& f, std::string_view field,
                       std::string_view s, bool is_step) {
    if (s.empty())
        fail(expr, f, field, "empty value");
    if (!is_step && f.names != nullptr && s.size() == 3 && !(s[0] >= '0' && s[0] <= '9')) {
        const unsigned count = f.hi == 7 ? 7 : f.hi - f.lo + 1;
        for (unsigned i = 0; i < count; ++i) {
            bool eq = true;
            for (std::size_t k = 0; k < 3; ++k)
                eq = eq && (s[k] & ~0x20) == f.names[i][k];
            if (eq)
                return f.lo + i;
        }
        fail(expr, f, field, "unknown name '" + std::string(s) + "'");
    }
    unsigned v = 0;
    for (char c : s) {
        if (c < '0' || c > '9')
            fail(expr, f, field, "'" + std::string(s) + "' is not a number");
        v = v * 10 + static_cast<unsigned>(c - '0');
        if (v > 1000)
            fail(expr, f, field, "'" + std::string(s) + "' is too large");
    }
    if (is_step) {
        if (v == 0)
            fail(expr, f, field, "step must be at least 1");
        return v;
    }
    if (v < f.lo || v > f.hi)
        fail(expr, f, field,
             "value " + std::to_string(v) + " out of range " + std::to_string(f.lo) + ".." +
                 std::to_string(f.hi));
    return v;
}

/// Bits of one field ("*", "a", "a-b", with "/step"; comma-separated lists).
inline std::uint64_t field_bits(std::string_view expr, const Field& f, std::string_view field) {
    if (field.empty())
        fail(expr, f, field, "empty field");
    std::uint64_t bits = 0;
    std::size_t pos = 0;
    while (pos <= field.size()) {
        const std::size_t comma = std::min(field.find(',', pos), field.size());
        const std::string_view item = field.substr(pos, comma - pos);
        if (item.empty())
            fail(expr, f, field, "empty list item");
        const std::size_t slash = item.find('/');
        const std::string_view range = item.substr(0, slash);
        unsigned step = 1;
        if (slash != std::string_view::npos)
            step = number(expr, f, field, item.substr(slash + 1), true);
        unsigned a = f.lo, b = f.hi;
        if (range == "*") {
            // f.hi is 7 for the weekday field (7 = Sunday), but '*' is 0..6
            if (f.hi == 7)
                b = 6;
        } else {
            const std::size_t dash = range.find('-');
            a = number(expr, f, field, range.substr(0, dash), false);
            if (dash != std::string_view::npos)
                b = number(expr, f, field, range.substr(dash + 1), false);
            else if (slash == std::string_view::npos)
                b = a;
            else if (f.hi == 7)
                b = 6; // "a/step" runs to the field's end
            if (dash != std::string_view::npos && b < a)
                fail(expr, f, field,
                     "range " + std::string(range) + " is backwards (" + std::to_string(a) + " > " +
                         std::to_string(b) + ")");
        }
        for (unsigned v = a; v <= b; v += step)
            bits |= std::uint64_t{1} << (f.hi == 7 && v == 7 ? 0 : v);
        pos = comma + 1;
    }
    return bits;
}

} // namespace cron_detail

/// Parses a cron expression; std::invalid_argument naming the bad field and why.
[[nodiscard]] inline CronExpr parse_cron(std::string_view text) {
    using cron_detail::Field;
    std::string_view s = text;
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
        s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t'))
        s.remove_suffix(1);
    if (!s.empty() && s.front() == '@') {
        static constexpr std::pair<std::string_view, std::string_view> shortcuts[] = {
            {"@yearly", "0 0 1 1 *"}, {"@annually", "0 0 1 1 *"}, {"@monthly", "0 0 1 * *"},
            {"@weekly", "0 0 * * 0"}, {"@daily", "0 0 * * *"},    {"@midnight", "0 0 * * *"},
            {"@hourly", "0 * * * *"}};
        for (const auto& [name, expansion] : shortcuts)
            if (s == name)
                return parse_cron(expansion);
        throw std::invalid_argument(
            "cron expression '" + std::string(text) +
            "': unknown shortcut (known: @yearly @annually @monthly @weekly @daily @midnight "
            "@hourly; @reboot has no meaning for a cluster)");
    }
    std::vector<std::string_view> fields;
    std::size_t pos = 0;
    while (pos < s.size()) {
        const std::size_t end = std::min(s.find_first_of(" \t", pos), s.size());
        fields.push_back(s.substr(pos, end - pos));
        pos = s.find_first_not_of(" \t", end);
        if (pos == std::string_view::npos)
            break;
    }
    if (fields.size() != 5 && fields.size() != 6)
        throw std::invalid_argument(
            "cron expression '" + std::string(text) + "': has " + std::to_string(fields.size()) +
            " fields; expected 5 (minute hour day-of-month month day-of-week), 6 with a leading "
            "seconds field, or an @shortcut");
    static constexpr Field second{"second", 0, 59, nullptr}, minute{"minute", 0, 59, nullptr},
        hour{"hour", 0, 23, nullptr}, mday{"day-of-month", 1, 31, nullptr},
        month{"month", 1, 12, cron_detail::month_names},
        wday{"day-of-week", 0, 7, cron_detail::day_names};
    CronExpr e;
    std::size_t i = 0;
    if (fields.size() == 6) {
        e.has_seconds = true;
        e.seconds = cron_detail::field_bits(text, second, fields[i++]);
    }
    e.minutes = cron_detail::field_bits(text, minute, fields[i]);
    e.hours = static_cast<std::uint32_t>(cron_detail::field_bits(text, hour, fields[i + 1]));
    e.hour_star = fields[i + 1] == "*";
    e.mdays = static_cast<std::uint32_t>(cron_detail::field_bits(text, mday, fields[i + 2]));
    e.mday_star = fields[i + 2].front() == '*';
    e.months = static_cast<std::uint16_t>(cron_detail::field_bits(text, month, fields[i + 3]));
    e.wdays = static_cast<std::uint8_t>(cron_detail::field_bits(text, wday, fields[i + 4]));
    e.wday_star = fields[i + 4].front() == '*';
    // A day-of-month that no chosen month has (30 2 ...) would never run: refuse it now rather
    // than searching forever. (With the OR rule the weekdays still run; with '*' weekdays the
    // days of month alone decide.)
    if (e.wday_star) {
        bool any = false;
        for (unsigned m = 1; m <= 12 && !any; ++m)
            if ((e.months >> m) & 1u)
                for (unsigned d = 1; d <= days_in_month(2000, m) && !any; ++d)
                    any = ((e.mdays >> d) & 1u) != 0 && ((e.wdays & 0x7f) != 0);
        if (!any)
            throw std::invalid_argument("cron expression '" + std::string(text) +
                                        "': day-of-month field '" + std::string(fields[i + 2]) +
                                        "': no chosen month has such a day; it would never run");
    }
    return e;
}

/// The first wall-clock (civil) second >= `from` that matches `e`; nullopt when none within
/// 30 years (cannot happen for an expression parse_cron accepted; a guard, not a limit).
[[nodiscard]] inline std::optional<std::int64_t> next_match(const CronExpr& e, std::int64_t from) {
    CivilTime c = civil_of(from);
    const int last_year = c.year + 30;
    auto set = [&c](int y, unsigned mo, unsigned d, unsigned h, unsigned mi, unsigned s) {
        if (mo > 12) {
            ++y;
            mo = 1;
        }
        if (d > days_in_month(y, mo)) {
            d = 1;
            if (++mo > 12) {
                ++y;
                mo = 1;
            }
        }
        c = civil_of(civil_seconds(CivilTime{y, mo, d, h, mi, s, 0}));
    };
    while (c.year <= last_year) {
        if (!((e.months >> c.month) & 1u)) {
            set(c.year, c.month + 1, 1, 0, 0, 0);
            continue;
        }
        if (!e.day_matches(c.day, c.weekday)) {
            set(c.year, c.month, c.day + 1, 0, 0, 0);
            continue;
        }
        if (!((e.hours >> c.hour) & 1u)) {
            c = civil_of(civil_seconds(c) - c.minute * 60 - c.second + 3600);
            continue;
        }
        if (!((e.minutes >> c.minute) & 1u)) {
            c = civil_of(civil_seconds(c) - c.second + 60);
            continue;
        }
        if (!((e.seconds >> c.second) & 1u)) {
            c = civil_of(civil_seconds(c) + 1);
            continue;
        }
        return civil_seconds(c);
    }
    return std::nullopt;
}

// ---------------------------------------------------------------- time zones

/// A time zone: UTC offsets over time, from a TZif file (or UTC).
class TimeZone {
  public:
    /// UTC (no file read).
    static TimeZone utc() {
        TimeZone z;
        z.name_ = "UTC";
        z.types_.push_back({0, false});
        z.offsets_.push_back(0);
        return z;
    }

    /// "UTC" (also "Etc/UTC", "Z"), or the IANA zone `name` read from $TZDIR, else
    /// /usr/share/zoneinfo. std::invalid_argument for a malformed name, a missing zone (install
    /// tzdata) or a file that is not TZif.
    static TimeZone load(std::string_view name) {
        if (name == "UTC" || name == "Etc/UTC" || name == "Z")
            return utc();
        bool ok = !name.empty() && name.size() <= 128 && name.front() != '/' &&
                  name.find("..") == std::string_view::npos;
        for (char ch : name)
            ok = ok && ((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
                        (ch >= '0' && ch <= '9') || ch == '/' || ch == '_' || ch == '-' ||
                        ch == '+' || ch == '.');
        if (!ok)
            throw std::invalid_argument("time zone '" + std::string(name.substr(0, 60)) +
                                        "': not an IANA zone name (e.g. Europe/Berlin)");
        const char* env = std::getenv("TZDIR");
        const std::string dir = env != nullptr && *env != '\0' ? env : "/usr/share/zoneinfo";
        std::ifstream in(dir + "/" + std::string(name), std::ios::binary);
        if (!in)
            throw std::invalid_argument("time zone '" + std::string(name) + "': not found in " +
                                        dir + " (unknown zone, or tzdata is not installed)");
        const std::string bytes{std::istreambuf_iterator<char>(in),
                                std::istreambuf_iterator<char>()};
        return from_tzif(name, bytes);
    }

    /// Parses TZif `bytes` (RFC 8536) as zone `name`.
    static TimeZone from_tzif(std::string_view name, std::string_view bytes) {
        TimeZone z;
        z.name_ = std::string(name);
        auto bad = [&](const char* why) -> void {
            throw std::invalid_argument("time zone '" + std::string(name) + "': bad TZif data (" +
                                        why + ")");
        };
        std::size_t p = 0;
        auto be = [&](std::size_t at, int n) {
            std::uint64_t v = 0;
            for (int i = 0; i < n; ++i)
                v = v << 8 | static_cast<unsigned char>(bytes[at + static_cast<std::size_t>(i)]);
            return v;
        };
        auto header = [&](std::array<std::uint32_t, 6>& cnt) {
            if (bytes.size() < p + 44 || bytes.substr(p, 4) != "TZif")
                bad("no TZif header");
            for (std::size_t i = 0; i < 6; ++i)
                cnt[i] = static_cast<std::uint32_t>(be(p + 20 + 4 * i, 4));
            p += 44;
        };
        std::array<std::uint32_t, 6> n{}; // isut, isstd, leap, time, type, char
        header(n);
        const char version = bytes[4];
        const int tsize = version >= '2' ? 8 : 4;
        if (version >= '2') {
            p += n[3] * 5u + n[4] * 6u + n[5] + n[2] * 8u + n[0] + n[1];
            header(n);
        }
        const std::size_t need =
            n[3] * (tsize + 1u) + n[4] * 6u + n[5] + n[2] * (tsize + 4u) + n[1] + n[0];
        if (n[4] == 0 || bytes.size() < p + need)
            bad("truncated");
        for (std::uint32_t i = 0; i < n[3]; ++i)
            z.at_.push_back(tsize == 8 ? static_cast<std::int64_t>(be(p + 8 * i, 8))
                                       : static_cast<std::int32_t>(be(p + 4 * i, 4)));
        p += n[3] * static_cast<std::size_t>(tsize);
        for (std::uint32_t i = 0; i < n[3]; ++i) {
            const auto t = static_cast<unsigned char>(bytes[p + i]);
            if (t >= n[4])
                bad("type index out of range");
            z.idx_.push_back(t);
        }
        p += n[3];
        for (std::uint32_t i = 0; i < n[4]; ++i) {
            const auto off = static_cast<std::int32_t>(be(p + 6 * i, 4));
            z.types_.push_back({off, bytes[p + 6 * i + 4] != 0});
            z.offsets_.push_back(off);
        }
        p += need - n[3] * (tsize + 1u);
        if (version >= '2' && p < bytes.size() && bytes[p] == '\n') {
            const std::size_t end = bytes.find('\n', p + 1);
            if (end != std::string_view::npos && end > p + 1)
                z.parse_footer(bytes.substr(p + 1, end - p - 1));
        }
        std::sort(z.offsets_.begin(), z.offsets_.end());
        z.offsets_.erase(std::unique(z.offsets_.begin(), z.offsets_.end()), z.offsets_.end());
        return z;
    }

    [[nodiscard]] const std::string& name() const noexcept { return name_; }

    /// The largest offset minus the smallest the zone ever uses (seconds).
    [[nodiscard]] std::int64_t offset_spread() const noexcept {
        return std::int64_t{offsets_.back()} - offsets_.front();
    }

    /// UTC offset (seconds east) in force at UTC second `u`.
    [[nodiscard]] std::int32_t offset_at(std::int64_t u) const noexcept {
        if (at_.empty() || u < at_.front()) {
            if (at_.empty() && footer_)
                return rule_offset(u);
            return types_.front().off;
        }
        if (u >= at_.back() && footer_)
            return rule_offset(u);
        const auto it = std::upper_bound(at_.begin(), at_.end(), u);
        return types_[idx_[static_cast<std::size_t>(it - at_.begin() - 1)]].off;
    }

    /// The UTC instants whose wall-clock reading is local second `l`: one (the usual case),
    /// two (a repeated time, fall back: earliest first), or none (a skipped time, spring
    /// forward: then `gap_at` is the transition instant, the first instant after the gap).
    struct Resolved {
        int count = 0;
        std::int64_t first = 0, second = 0, gap_at = 0;
    };
    [[nodiscard]] Resolved resolve(std::int64_t l) const {
        Resolved r;
        std::int64_t below = INT64_MIN, above = INT64_MAX; // bracket a gap
        for (const std::int32_t o : offsets_) {
            const std::int64_t u = l - o;
            const std::int64_t seen = u + offset_at(u);
            if (seen == l) {
                if (r.count == 0 || (r.count == 1 && u != r.first)) {
                    (r.count == 0 ? r.first : r.second) = u;
                    ++r.count;
                }
            } else if (seen < l) {
                below = std::max(below, u);
            } else {
                above = std::min(above, u);
            }
        }
        if (r.count == 2 && r.second < r.first)
            std::swap(r.first, r.second);
        if (r.count == 0 && below != INT64_MIN && above != INT64_MAX && below < above) {
            // smallest u in (below, above] whose wall clock is past l: the transition
            while (above - below > 1) {
                const std::int64_t mid = below + (above - below) / 2;
                (mid + offset_at(mid) > l ? above : below) = mid;
            }
            r.gap_at = above;
        } else if (r.count == 0) {
            r.gap_at = l - offsets_.front(); // unreachable for real zones; stays monotone
        }
        return r;
    }

  private:
    struct Type {
        std::int32_t off;
        bool dst;
    };
    /// A POSIX TZ rule date: Jn (julian, no Feb 29), n (zero-based, with Feb 29) or Mm.w.d.
    struct RuleDate {
        char form = 'M';
        int a = 0, b = 0, c = 0;
        std::int32_t time = 7200;
    };
    struct Footer {
        std::int32_t std_off = 0, dst_off = 0;
        bool has_dst = false;
        RuleDate start, end;
    };

    void parse_footer(std::string_view s) {
        std::size_t p = 0;
        bool ok = true;
        auto name = [&] {
            if (p < s.size() && s[p] == '<') {
                const std::size_t e = s.find('>', p);
                ok = ok && e != std::string_view::npos;
                p = ok ? e + 1 : s.size();
            } else {
                const std::size_t b = p;
                while (p < s.size() &&
                       ((s[p] >= 'A' && s[p] <= 'Z') || (s[p] >= 'a' && s[p] <= 'z')))
                    ++p;
                ok = ok && p - b >= 3;
            }
        };
        auto num = [&] {
            int v = 0;
            bool any = false;
            while (p < s.size() && s[p] >= '0' && s[p] <= '9') {
                v = v * 10 + (s[p++] - '0');
                any = true;
            }
            ok = ok && any;
            return v;
        };
        auto hms = [&]() -> std::int32_t { // [+-]h[:m[:s]]
            int sign = 1;
            if (p < s.size() && (s[p] == '+' || s[p] == '-'))
                sign = s[p++] == '-' ? -1 : 1;
            std::int32_t v = num() * 3600;
            if (p < s.size() && s[p] == ':') {
                ++p;
                v += num() * 60;
                if (p < s.size() && s[p] == ':') {
                    ++p;
                    v += num();
                }
            }
            return sign * v;
        };
        auto date = [&](RuleDate& d) {
            if (p < s.size() && s[p] == 'M') {
                ++p;
                d.form = 'M';
                d.a = num();
                ok = ok && p < s.size() && s[p++] == '.';
                d.b = num();
                ok = ok && p < s.size() && s[p++] == '.';
                d.c = num();
            } else if (p < s.size() && s[p] == 'J') {
                ++p;
                d.form = 'J';
                d.a = num();
            } else {
                d.form = 'n';
                d.a = num();
            }
            if (p < s.size() && s[p] == '/') {
                ++p;
                d.time = hms();
            }
        };
        Footer f;
        name();
        f.std_off = -hms();
        if (ok && p < s.size()) {
            f.has_dst = true;
            name();
            f.dst_off = f.std_off + 3600;
            if (p < s.size() && s[p] != ',')
                f.dst_off = -hms();
            ok = ok && p < s.size() && s[p++] == ',';
            if (ok)
                date(f.start);
            ok = ok && p < s.size() && s[p++] == ',';
            if (ok)
                date(f.end);
        }
        if (!ok || p != s.size())
            return; // an unreadable footer: the transitions alone decide (as before it existed)
        footer_ = f;
        offsets_.push_back(f.std_off);
        if (f.has_dst)
            offsets_.push_back(f.dst_off);
    }

    /// Local-standard-time second (from the epoch) at which rule date `d` happens in year `y`.
    static std::int64_t rule_local(const RuleDate& d, int y) {
        std::int64_t day = 0;
        if (d.form == 'J') {
            day = days_from_civil(y, 1, 1) + d.a - 1;
            const bool leap = days_in_month(y, 2) == 29;
            if (leap && d.a >= 60)
                ++day;
        } else if (d.form == 'n') {
            day = days_from_civil(y, 1, 1) + d.a;
        } else {
            const auto m = static_cast<unsigned>(d.a);
            const std::int64_t first = days_from_civil(y, m, 1);
            const auto wd_first = static_cast<int>(((first % 7) + 11) % 7); // 1970-01-01: Thursday
            std::int64_t dd = first + (d.c - wd_first + 7) % 7 + 7 * (d.b - 1);
            while (d.b == 5 && dd >= first + days_in_month(y, m))
                dd -= 7;
            day = dd;
        }
        return day * 86400 + d.time;
    }

    std::int32_t rule_offset(std::int64_t u) const noexcept {
        const Footer& f = *footer_;
        if (!f.has_dst)
            return f.std_off;
        const int y = civil_of(u + f.std_off).year;
        const std::int64_t start = rule_local(f.start, y) - f.std_off; // given in standard time
        const std::int64_t end = rule_local(f.end, y) - f.dst_off;     // given in daylight time
        const bool dst = start < end ? (u >= start && u < end) : !(u >= end && u < start);
        return dst ? f.dst_off : f.std_off;
    }

    std::string name_;
    std::vector<std::int64_t> at_;      // transition instants, ascending
    std::vector<std::uint8_t> idx_;     // their types
    std::vector<Type> types_;           // local time types (type 0: before the first transition)
    std::vector<std::int32_t> offsets_; // every offset the zone uses, ascending, distinct
    std::optional<Footer> footer_;      // the rule past the last transition
};

/// The first tick of `e` in zone `z` strictly after UTC second `t` (module comment: DST rules);
/// nullopt when none within 30 years.
[[nodiscard]] inline std::optional<std::int64_t> next_tick(const CronExpr& e, const TimeZone& z,
                                                           std::int64_t t) {
    // Walk the wall-clock matches from just after t's wall-clock reading, keeping the earliest
    // instant after t. Instants of first occurrences never decrease with the wall clock, so once
    // one is past t and past the best, nothing later can beat it. Only a second occurrence (a
    // fall-back hour, run twice when the hour field is '*') can lie after t with a wall-clock
    // reading before t's: near a transition such schedules start up to the zone's offset
    // spread (at most 3 h) earlier.
    std::int64_t l = t + z.offset_at(t) + 1;
    if (e.hour_star && z.offset_at(t - 86400) != z.offset_at(t + 86400))
        l -= std::min<std::int64_t>(z.offset_spread(), 3 * 3600);
    std::optional<std::int64_t> best;
    for (int guard = 0; guard < 100000; ++guard) {
        const std::optional<std::int64_t> m = next_match(e, l);
        if (!m)
            return best;
        const TimeZone::Resolved r = z.resolve(*m);
        const std::int64_t first = r.count == 0 ? r.gap_at : r.first;
        auto take = [&](std::int64_t u) {
            if (u > t && (!best || u < *best))
                best = u;
        };
        take(first);
        if (r.count == 2 && e.hour_star)
            take(r.second);
        if (best && first > t && first >= *best)
            return best;
        l = *m + 1;
    }
    return best;
}

} // namespace ax::detail

namespace ax::detail {

/// What one firing of a due schedule does (plan_ticks).
struct TickPlan {
    /// Ticks to enqueue now, one task each, ascending (UTC seconds).
    std::vector<std::int64_t> ticks;
    /// The schedule's next tick after this firing (nullopt: it never ticks again).
    std::optional<std::int64_t> next;
    /// Whether ticks were missed (older than the grace when fired).
    bool missed = false;
};

/// Plans the firing of a schedule whose next tick `due` has come, at UTC second `now` (the
/// database's clock, so every node judges alike). Ticks at most `grace_s` old are on time and
/// each gets a task; older ones were missed (no node ran, or all were stuck): with `run_once`
/// they collapse into one task keyed by the first missed tick, `due` — unless an on-time tick
/// runs anyway, which then stands for them —, otherwise they are skipped. At most `max_ticks`
/// on-time ticks per firing (the rest come in the next firing, still on time or missed then).
/// Missed ticks are never enumerated: a schedule down for a year costs one next_tick call.
[[nodiscard]] inline TickPlan plan_ticks(const CronExpr& e, const TimeZone& z, std::int64_t due,
                                         std::int64_t now, std::int64_t grace_s, bool run_once,
                                         std::size_t max_ticks) {
    TickPlan p;
    std::optional<std::int64_t> t = due;
    if (now - due > grace_s) {
        p.missed = true;
        t = next_tick(e, z, now - grace_s - 1); // the first tick still on time (may be > now)
    }
    while (t && *t <= now && p.ticks.size() < max_ticks) {
        p.ticks.push_back(*t);
        t = next_tick(e, z, *t);
    }
    if (p.missed && run_once && p.ticks.empty())
        p.ticks.push_back(due);
    p.next = t;
    return p;
}

} // namespace ax::detail
