// Cron expressions, TZif time zones and next ticks (include/ax/detail/cron.hpp): no server, no
// real clock — every "now" is an injected UTC instant.

#include <ax/detail/cron.hpp>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

using ax::detail::CronExpr;
using ax::detail::next_tick;
using ax::detail::parse_cron;
using ax::detail::TimeZone;

namespace {

/// "YYYY-MM-DD HH:MM[:SS]" read as UTC.
std::int64_t utc(std::string_view s) {
    auto n = [&](std::size_t at, std::size_t len) {
        return std::stoi(std::string(s.substr(at, len)));
    };
    ax::detail::CivilTime c;
    c.year = n(0, 4);
    c.month = static_cast<unsigned>(n(5, 2));
    c.day = static_cast<unsigned>(n(8, 2));
    c.hour = static_cast<unsigned>(n(11, 2));
    c.minute = static_cast<unsigned>(n(14, 2));
    c.second = s.size() > 16 ? static_cast<unsigned>(n(17, 2)) : 0u;
    return ax::detail::civil_seconds(c);
}

std::string show(std::int64_t u) {
    const ax::detail::CivilTime c = ax::detail::civil_of(u);
    char buf[32];
    std::snprintf(buf, sizeof buf, "%04d-%02u-%02u %02u:%02u:%02u", c.year, c.month, c.day, c.hour,
                  c.minute, c.second);
    return buf;
}

/// The next tick of `expr` in `zone` after UTC `from`, as "YYYY-MM-DD HH:MM:SS" UTC.
std::string next(std::string_view expr, const TimeZone& zone, std::string_view from) {
    const auto t = next_tick(parse_cron(expr), zone, utc(from));
    return t ? show(*t) : "none";
}

std::string next_utc(std::string_view expr, std::string_view from) {
    return next(expr, TimeZone::utc(), from);
}

std::string error_of(std::string_view expr) {
    try {
        (void)parse_cron(expr);
    } catch (const std::invalid_argument& e) {
        return e.what();
    }
    return "accepted";
}

} // namespace

TEST_CASE("cron: fields, lists, ranges, steps and names", "[cron]") {
    const CronExpr e = parse_cron("0,30 9-17/4 */10 JAN-mar,dec MON-FRI");
    CHECK(e.minutes == ((1ull << 0) | (1ull << 30)));
    CHECK(e.hours == ((1u << 9) | (1u << 13) | (1u << 17)));
    CHECK(e.mdays == ((1u << 1) | (1u << 11) | (1u << 21) | (1u << 31)));
    CHECK(e.months == ((1u << 1) | (1u << 2) | (1u << 3) | (1u << 12)));
    CHECK(e.wdays == 0b0111110);
    CHECK(e.mday_star);
    CHECK_FALSE(e.wday_star);
    CHECK(e.seconds == 1);                     // 5 fields: second 0
    CHECK(parse_cron("* * * * 7").wdays == 1); // 7 is Sunday
    CHECK(parse_cron("* * * * 5-7").wdays == 0b1100001);
    CHECK(parse_cron("* * * * *").wdays == 0x7f);
    CHECK(parse_cron("5/20 * * * *").minutes == ((1ull << 5) | (1ull << 25) | (1ull << 45)));
    CHECK(parse_cron("*/20 * * * * *").seconds == ((1ull << 0) | (1ull << 20) | (1ull << 40)));
    CHECK(parse_cron("*/20 * * * * *").has_seconds);
    CHECK(parse_cron("  0  12\t* * sun ").wdays == 1);
}

TEST_CASE("cron: shortcuts expand to their 5-field forms", "[cron]") {
    auto same = [](std::string_view a, std::string_view b) {
        const CronExpr x = parse_cron(a), y = parse_cron(b);
        return x.minutes == y.minutes && x.hours == y.hours && x.mdays == y.mdays &&
               x.months == y.months && x.wdays == y.wdays && x.mday_star == y.mday_star &&
               x.wday_star == y.wday_star;
    };
    CHECK(same("@yearly", "0 0 1 1 *"));
    CHECK(same("@annually", "0 0 1 1 *"));
    CHECK(same("@monthly", "0 0 1 * *"));
    CHECK(same("@weekly", "0 0 * * 0"));
    CHECK(same("@daily", "0 0 * * *"));
    CHECK(same("@midnight", "0 0 * * *"));
    CHECK(same("@hourly", "0 * * * *"));
}

TEST_CASE("cron: bad expressions name the field and the reason", "[cron]") {
    CHECK_THAT(error_of("61 * * * *"),
               Catch::Contains("minute field '61'") && Catch::Contains("out of range 0..59"));
    CHECK_THAT(error_of("0 24 * * *"), Catch::Contains("hour field '24'"));
    CHECK_THAT(error_of("0 0 0 * *"), Catch::Contains("day-of-month field '0'"));
    CHECK_THAT(error_of("0 0 * 13 *"), Catch::Contains("month field '13'"));
    CHECK_THAT(error_of("0 0 * * 8"), Catch::Contains("day-of-week field '8'"));
    CHECK_THAT(error_of("0 0 * FOO *"), Catch::Contains("unknown name 'FOO'"));
    CHECK_THAT(error_of("*/0 * * * *"), Catch::Contains("step must be at least 1"));
    CHECK_THAT(error_of("0 17-9 * * *"),
               Catch::Contains("hour field") && Catch::Contains("backwards"));
    CHECK_THAT(error_of("0 1,,2 * * *"), Catch::Contains("empty list item"));
    CHECK_THAT(error_of("a * * * *"), Catch::Contains("not a number"));
    CHECK_THAT(error_of("* * * *"), Catch::Contains("has 4 fields"));
    CHECK_THAT(error_of("* * * * * * *"), Catch::Contains("has 7 fields"));
    CHECK_THAT(error_of(""), Catch::Contains("has 0 fields"));
    CHECK_THAT(error_of("@reboot"), Catch::Contains("unknown shortcut"));
    CHECK_THAT(error_of("0 0 30 2 *"), Catch::Contains("never run"));
    CHECK_THAT(error_of("0 0 31 4,6,9,11 *"), Catch::Contains("never run"));
    CHECK(error_of("0 0 29 2 *") == "accepted");   // leap days exist
    CHECK(error_of("0 0 30 2 MON") == "accepted"); // OR rule: Mondays in February
}

TEST_CASE("cron: next tick in UTC with an injected clock", "[cron]") {
    CHECK(next_utc("*/15 * * * *", "2026-12-06 10:07") == "2026-12-06 10:15:00");
    CHECK(next_utc("*/15 * * * *", "2026-12-06 10:15") == "2026-12-06 10:30:00"); // strictly after
    CHECK(next_utc("0 0 * * *", "2026-12-31 23:59:59") == "2027-01-01 00:00:00");
    CHECK(next_utc("@hourly", "2026-12-06 23:30") == "2026-12-07 00:00:00");
    CHECK(next_utc("*/10 * * * * *", "2026-12-06 10:00:05") == "2026-12-06 10:00:10");
    // month ends
    CHECK(next_utc("0 0 31 * *", "2026-04-15 00:00") == "2026-05-31 00:00:00");
    CHECK(next_utc("0 12 30 * *", "2026-01-31 00:00") == "2026-03-30 12:00:00");
    CHECK(next_utc("@monthly", "2026-12-15 00:00") == "2027-01-01 00:00:00");
    // Feb 29: next leap year; 2100 is not one
    CHECK(next_utc("0 0 29 2 *", "2026-03-01 00:00") == "2028-02-29 00:00:00");
    CHECK(next_utc("0 0 29 2 *", "2096-03-01 00:00") == "2104-02-29 00:00:00");
    // day-of-month OR day-of-week when both are restricted (2026-12-06 is a Sunday)
    CHECK(next_utc("0 0 13 * FRI", "2026-12-06 00:00") == "2026-12-11 00:00:00");
    CHECK(next_utc("0 0 13 * FRI", "2026-12-11 00:00") == "2026-12-13 00:00:00");
    // '*'-led day-of-month: both must match (odd days that are Mondays)
    CHECK(next_utc("0 0 */2 * MON", "2026-12-06 00:00") == "2026-12-07 00:00:00");
    CHECK(next_utc("0 0 */2 * MON", "2026-12-07 00:00") == "2026-12-21 00:00:00");
    CHECK(next_utc("0 0 * * MON", "2026-12-06 00:00") == "2026-12-07 00:00:00");
    CHECK(next_utc("0 9 * * 1-5", "2026-12-04 09:00") == "2026-12-07 09:00:00"); // Fri -> Mon
}

TEST_CASE("cron: zones load, offsets, bad names", "[cron]") {
    const TimeZone ny = TimeZone::load("America/New_York");
    CHECK(ny.offset_at(utc("2026-07-01 12:00")) == -4 * 3600);
    CHECK(ny.offset_at(utc("2026-12-01 12:00")) == -5 * 3600);
    CHECK(ny.offset_at(utc("2045-07-01 12:00")) == -4 * 3600); // past the file's transitions
    CHECK(TimeZone::load("Asia/Kolkata").offset_at(utc("2026-07-01 12:00")) == 19800);
    CHECK(TimeZone::load("UTC").offset_at(0) == 0);
    auto error = [](std::string_view name) {
        try {
            (void)TimeZone::load(name);
        } catch (const std::invalid_argument& e) {
            return std::string(e.what());
        }
        return std::string("accepted");
    };
    CHECK_THAT(error("Mars/Olympus_Mons"), Catch::Contains("not found"));
    CHECK_THAT(error("../etc/passwd"), Catch::Contains("not an IANA zone name"));
    CHECK_THAT(error("Europe/Berlin;x"), Catch::Contains("not an IANA zone name"));
    CHECK_THAT(error(""), Catch::Contains("not an IANA zone name"));
    CHECK_THROWS_WITH(TimeZone::from_tzif("X", "not a tzif file at all, definitely not one; sure"),
                      Catch::Contains("'X': bad TZif data"));
    CHECK_THROWS_WITH(TimeZone::from_tzif("Y", "TZif2"), Catch::Contains("bad TZif data"));
}

TEST_CASE("cron: DST spring forward runs a skipped time at the transition, once", "[cron]") {
    const TimeZone ny = TimeZone::load("America/New_York"); // 2026-03-08 02:00 EST -> 03:00 EDT
    CHECK(next("30 2 * * *", ny, "2026-03-07 08:00") == "2026-03-08 07:00:00"); // at 03:00 EDT
    CHECK(next("30 2 * * *", ny, "2026-03-08 07:00") == "2026-03-09 06:30:00"); // then 02:30 EDT
    // 02:00 and 02:30 both fall in the gap: one tick at the transition, then 03:30 EDT
    CHECK(next("*/30 * * * *", ny, "2026-03-08 06:45") == "2026-03-08 07:00:00");
    CHECK(next("*/30 * * * *", ny, "2026-03-08 07:00") == "2026-03-08 07:30:00");
    const TimeZone berlin = TimeZone::load("Europe/Berlin"); // 2026-03-29 02:00 CET -> 03:00 CEST
    CHECK(next("30 2 * * *", berlin, "2026-03-28 12:00") == "2026-03-29 01:00:00");
    CHECK(next("30 2 * * *", berlin, "2026-03-29 01:00") == "2026-03-30 00:30:00");
    // past the fat file's last transition (2037): the POSIX footer rule decides
    CHECK(next("30 2 * * *", ny, "2040-03-10 12:00") == "2040-03-11 07:00:00");
    CHECK(next("30 2 * * *", berlin, "2040-03-24 12:00") == "2040-03-25 01:00:00");
}

TEST_CASE("cron: DST fall back runs a repeated time once, hourly schedules twice", "[cron]") {
    const TimeZone ny = TimeZone::load("America/New_York"); // 2026-11-01 02:00 EDT -> 01:00 EST
    CHECK(next("30 1 * * *", ny, "2026-11-01 04:00") == "2026-11-01 05:30:00"); // 01:30 EDT
    CHECK(next("30 1 * * *", ny, "2026-11-01 05:30") == "2026-11-02 06:30:00"); // not 01:30 EST
    // during the second pass a fixed-hour schedule waits for the next day
    CHECK(next("45 1 * * *", ny, "2026-11-01 06:10") == "2026-11-02 06:45:00");
    // hour '*': both passes run, real-time interval kept
    CHECK(next("30 * * * *", ny, "2026-11-01 05:30") == "2026-11-01 06:30:00");
    CHECK(next("30 * * * *", ny, "2026-11-01 06:30") == "2026-11-01 07:30:00");
    CHECK(next("*/20 * * * *", ny, "2026-11-01 05:50") == "2026-11-01 06:00:00");
    const TimeZone berlin = TimeZone::load("Europe/Berlin"); // 2026-10-25 03:00 CEST -> 02:00 CET
    CHECK(next("30 2 * * *", berlin, "2026-10-24 12:00") == "2026-10-25 00:30:00");
    CHECK(next("30 2 * * *", berlin, "2026-10-25 00:30") == "2026-10-26 01:30:00");
    CHECK(next("30 2 * * *", berlin, "2040-10-27 12:00") == "2040-10-28 00:30:00");
    CHECK(next("30 2 * * *", berlin, "2040-10-28 00:30") == "2040-10-29 01:30:00");
    CHECK(next("30 * * * *", berlin, "2040-10-28 00:30") == "2040-10-28 01:30:00");
}

TEST_CASE("cron: a zone given only by its POSIX footer (slim TZif)", "[cron]") {
    // A version-2 file with no transitions and one type: the footer's rule alone decides.
    auto be32 = [](std::string& s, std::uint32_t v) {
        for (int i = 3; i >= 0; --i)
            s += static_cast<char>((v >> (8 * i)) & 0xff);
    };
    auto block = [&](std::string& s) {
        s += "TZif2";
        s.append(15, '\0');
        for (std::uint32_t c : {0u, 0u, 0u, 0u, 1u, 4u}) // isut isstd leap time type char
            be32(s, c);
        be32(s, static_cast<std::uint32_t>(-5 * 3600));
        s += '\0';
        s += '\0';
        s.append("EST", 4);
    };
    std::string f;
    block(f);
    block(f);
    f += "\nEST5EDT,M3.2.0,M11.1.0\n";
    const TimeZone z = TimeZone::from_tzif("Slim/NY", f);
    CHECK(z.offset_at(utc("2026-07-01 00:00")) == -4 * 3600);
    CHECK(z.offset_at(utc("2026-03-08 06:59:59")) == -5 * 3600);
    CHECK(z.offset_at(utc("2026-03-08 07:00")) == -4 * 3600);
    CHECK(z.offset_at(utc("2026-11-01 05:59:59")) == -4 * 3600);
    CHECK(z.offset_at(utc("2026-11-01 06:00")) == -5 * 3600);
    CHECK(next("30 2 * * *", z, "2026-03-07 08:00") == "2026-03-08 07:00:00");
    CHECK(next("30 1 * * *", z, "2026-11-01 05:30") == "2026-11-02 06:30:00");
    // southern hemisphere: DST spans the new year (Australia/Sydney's rule)
    std::string g;
    block(g);
    block(g);
    g += "\nAEST-10AEDT,M10.1.0,M4.1.0/3\n";
    const TimeZone syd = TimeZone::from_tzif("Slim/Sydney", g);
    CHECK(syd.offset_at(utc("2027-01-15 00:00")) == 11 * 3600);
    CHECK(syd.offset_at(utc("2027-06-15 00:00")) == 10 * 3600);
}

TEST_CASE("cron: planning a due schedule's firing (on time, missed, capped)", "[cron]") {
    const TimeZone z = TimeZone::utc();
    const CronExpr minute = parse_cron("* * * * *");
    // on time: the due tick runs, next is the following minute
    auto p = ax::detail::plan_ticks(minute, z, utc("2026-12-06 10:00"), utc("2026-12-06 10:00:01"),
                                    60, false, 100);
    REQUIRE(p.ticks.size() == 1);
    CHECK(show(p.ticks[0]) == "2026-12-06 10:00:00");
    CHECK(show(*p.next) == "2026-12-06 10:01:00");
    CHECK_FALSE(p.missed);
    // late but within the grace: every tick runs (10:00, 10:01, 10:02)
    p = ax::detail::plan_ticks(minute, z, utc("2026-12-06 10:00"), utc("2026-12-06 10:02:30"), 600,
                               false, 100);
    CHECK(p.ticks.size() == 3);
    CHECK(show(*p.next) == "2026-12-06 10:03:00");
    // all nodes down for 3 hours, grace 60 s: skip runs only the tick still on time (10:00 at
    // 10:00:30); run_once the same (it stands for the missed ones)
    for (const bool once : {false, true}) {
        p = ax::detail::plan_ticks(minute, z, utc("2026-12-06 07:00"), utc("2026-12-06 10:00:30"),
                                   60, once, 100);
        CHECK(p.missed);
        REQUIRE(p.ticks.size() == 1);
        CHECK(show(p.ticks[0]) == "2026-12-06 10:00:00");
        CHECK(show(*p.next) == "2026-12-06 10:01:00");
    }
    // a daily schedule down for 3 days: skip runs nothing; run_once one task, keyed by the first
    // missed tick; both continue tomorrow
    const CronExpr daily = parse_cron("@daily");
    p = ax::detail::plan_ticks(daily, z, utc("2026-12-03 00:00"), utc("2026-12-06 10:00"), 60,
                               false, 100);
    CHECK(p.missed);
    CHECK(p.ticks.empty());
    CHECK(show(*p.next) == "2026-12-07 00:00:00");
    p = ax::detail::plan_ticks(daily, z, utc("2026-12-03 00:00"), utc("2026-12-06 10:00"), 60, true,
                               100);
    REQUIRE(p.ticks.size() == 1);
    CHECK(show(p.ticks[0]) == "2026-12-03 00:00:00");
    CHECK(show(*p.next) == "2026-12-07 00:00:00");
    // the cap: the rest of the on-time ticks come in the next firing
    const CronExpr second = parse_cron("* * * * * *");
    p = ax::detail::plan_ticks(second, z, utc("2026-12-06 10:00"), utc("2026-12-06 10:00:10"), 60,
                               false, 4);
    CHECK(p.ticks.size() == 4);
    CHECK(show(*p.next) == "2026-12-06 10:00:04");
}
