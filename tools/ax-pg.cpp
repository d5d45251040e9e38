// ax-pg: operator's tool for ax's distributed mode.
//
//   ax-pg [--db CONNINFO] migrate
//   ax-pg [--db CONNINFO] status
//   ax-pg [--db CONNINFO] dead-letters list [LIMIT]
//   ax-pg [--db CONNINFO] dead-letters replay ID...
//   ax-pg [--db CONNINFO] dead-letters discard ID...
//   ax-pg [--db CONNINFO] schedules list
//   ax-pg [--db CONNINFO] schedules add NAME CRON KIND [--tz ZONE] [--payload TEXT]
//         [--priority high|normal|low] [--tags a,b] [--max-attempts N] [--timeout-ms N]
//         [--missed skip|run_once] [--grace-s N]
//   ax-pg [--db CONNINFO] schedules remove NAME...
//
// Without --db the connection string comes from $AX_PG_CONNINFO, else libpq's defaults (PGHOST,
// PGPORT, PGDATABASE, ...). Exit status: 0 ok, 1 a database error, 2 bad usage or input.

#include <algorithm>
#include <ax/pg/client.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

namespace {

int usage() {
    std::fprintf(stderr,
                 "usage: ax-pg [--db CONNINFO] migrate\n"
                 "       ax-pg [--db CONNINFO] status\n"
                 "       ax-pg [--db CONNINFO] dead-letters list [LIMIT]\n"
                 "       ax-pg [--db CONNINFO] dead-letters replay|discard ID...\n"
                 "       ax-pg [--db CONNINFO] schedules list\n"
                 "       ax-pg [--db CONNINFO] schedules add NAME CRON KIND [--tz ZONE]\n"
                 "             [--payload TEXT] [--priority high|normal|low] [--tags a,b]\n"
                 "             [--max-attempts N] [--timeout-ms N] [--missed skip|run_once]\n"
                 "             [--grace-s N]\n"
                 "       ax-pg [--db CONNINFO] schedules remove NAME...\n"
                 "CONNINFO defaults to $AX_PG_CONNINFO, else libpq's PG* variables.\n");
    return 2;
}

std::string join(const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v)
        s += (s.empty() ? "" : ",") + x;
    return s;
}

std::int64_t parse_id(const std::string& s) {
    std::size_t used = 0;
    const long long v = std::stoll(s, &used);
    if (used != s.size() || v <= 0)
        throw std::invalid_argument("not a task ID: '" + s + "'");
    return v;
}

void print_status(ax::pg::Client& c) {
    const ax::pg::Status s = c.status();
    const char* lanes[3] = {"high", "normal", "low"};
    std::printf("%-10s %10s %10s %10s\n", "lane", "pending", "scheduled", "claimed");
    for (std::size_t p = 0; p < 3; ++p)
        std::printf("%-10s %10lld %10lld %10lld\n", lanes[p],
                    static_cast<long long>(s.counts.pending[p]),
                    static_cast<long long>(s.counts.scheduled[p]),
                    static_cast<long long>(s.counts.claimed[p]));
    std::printf(
        "dead letters: %lld   history: %lld succeeded, %lld cancelled, %lld discarded\n",
        static_cast<long long>(s.counts.dead_letters), static_cast<long long>(s.counts.succeeded),
        static_cast<long long>(s.counts.cancelled), static_cast<long long>(s.counts.discarded));
    std::printf("oldest pending task: %.1f s\n", s.oldest_pending_age_s);
    std::printf("nodes: %zu\n", s.nodes.size());
    for (const auto& n : s.nodes)
        std::printf("  #%lld %s (%s pid %d) kinds [%s] tags [%s] lease %s %.1f s, %lld batch(es), "
                    "%lld task(s)\n",
                    static_cast<long long>(n.id), n.name.c_str(), n.host.c_str(), n.pid,
                    join(n.kinds).c_str(), join(n.tags).c_str(),
                    n.lease_left_s >= 0 ? "left" : "EXPIRED",
                    n.lease_left_s >= 0 ? n.lease_left_s : -n.lease_left_s,
                    static_cast<long long>(n.batches), static_cast<long long>(n.tasks));
    std::printf("unclaimable by any live node: %lld\n",
                static_cast<long long>(s.unclaimable_total));
    for (const auto& [why, n] : s.unclaimable)
        std::printf("  %lld  %s\n", static_cast<long long>(n), why.c_str());
    std::printf("recovery: %lld batch(es) reclaimed, %lld task(s) reclaimed, %lld checksum "
                "mismatch(es)\n",
                static_cast<long long>(s.reclaimed_batches),
                static_cast<long long>(s.reclaimed_tasks),
                static_cast<long long>(s.checksum_mismatches));
}

// --- recurring schedules

/// "YYYY-MM-DD HH:MM:SS UTC" of UTC seconds `s` ("-" for 0: none).
std::string utc_text(std::int64_t s) {
    if (s == 0)
        return "-";
    const ax::detail::CivilTime c = ax::detail::civil_of(s);
    char buf[40];
    std::snprintf(buf, sizeof buf, "%04d-%02u-%02u %02u:%02u:%02u UTC", c.year, c.month, c.day,
                  c.hour, c.minute, c.second);
    return buf;
}

int schedules_command(ax::pg::Client& c, const std::vector<std::string>& args) {
    const std::string& sub = args[1];
    if (sub == "list" && args.size() == 2) {
        const auto list = c.schedules();
        std::printf("%zu schedule(s)\n", list.size());
        for (const auto& s : list) {
            std::printf("%s  '%s' %s -> kind %s %s, missed %s, grace %lld s\n", s.spec.name.c_str(),
                        s.spec.cron.c_str(), s.spec.time_zone.c_str(), s.spec.kind.c_str(),
                        std::string(ax::to_string(s.spec.priority)).c_str(),
                        std::string(ax::pg::to_string(s.spec.missed)).c_str(),
                        static_cast<long long>(s.spec.grace.count() / 1000));
            std::printf("    next %s, last %s, %lld task(s), %lld missed firing(s)%s%s\n",
                        utc_text(s.next_at_s).c_str(), utc_text(s.last_tick_s).c_str(),
                        static_cast<long long>(s.fired), static_cast<long long>(s.missed),
                        s.error.empty() ? "" : ", ERROR: ", s.error.c_str());
        }
        return 0;
    }
    if (sub == "add" && args.size() >= 5 && args.size() % 2 == 1) {
        ax::pg::ScheduleSpec spec{.name = args[2], .cron = args[3], .kind = args[4]};
        for (std::size_t i = 5; i + 1 < args.size(); i += 2) {
            const std::string &k = args[i], &v = args[i + 1];
            if (k == "--tz")
                spec.time_zone = v;
            else if (k == "--payload")
                spec.payload = v;
            else if (k == "--priority" && (v == "high" || v == "normal" || v == "low"))
                spec.priority = v == "high"  ? ax::Priority::high
                                : v == "low" ? ax::Priority::low
                                             : ax::Priority::normal;
            else if (k == "--tags") {
                spec.tags.clear();
                for (std::size_t p = 0; p <= v.size();) {
                    const std::size_t e = std::min(v.find(',', p), v.size());
                    spec.tags.push_back(v.substr(p, e - p));
                    p = e + 1;
                }
            } else if (k == "--max-attempts")
                spec.max_attempts = static_cast<int>(parse_id(v));
            else if (k == "--timeout-ms")
                spec.timeout = std::chrono::milliseconds(parse_id(v));
            else if (k == "--missed" && (v == "skip" || v == "run_once"))
                spec.missed =
                    v == "skip" ? ax::pg::MissedTicks::skip : ax::pg::MissedTicks::run_once;
            else if (k == "--grace-s")
                spec.grace = std::chrono::seconds(parse_id(v));
            else
                throw std::invalid_argument("schedules add: bad option " + k + " " + v);
        }
        const bool created = c.schedule(spec);
        std::printf("schedule %s %s\n", spec.name.c_str(), created ? "created" : "replaced");
        return 0;
    }
    if (sub == "remove" && args.size() >= 3) {
        int rc = 0;
        for (std::size_t i = 2; i < args.size(); ++i) {
            const bool ok = c.unschedule(args[i]);
            std::printf("schedule %s: %s\n", args[i].c_str(), ok ? "removed" : "no such schedule");
            if (!ok)
                rc = 2;
        }
        return rc;
    }
    return usage();
}

} // namespace

int main(int argc, char** argv) {
    std::vector<std::string> args(argv + 1, argv + argc);
    std::string conninfo;
    if (const char* e = std::getenv("AX_PG_CONNINFO"))
        conninfo = e;
    if (args.size() >= 2 && args[0] == "--db") {
        conninfo = args[1];
        args.erase(args.begin(), args.begin() + 2);
    }
    if (args.empty())
        return usage();
    try {
        const std::string& cmd = args[0];
        if (cmd == "migrate") {
            ax::pg::Client c(conninfo, {.require_schema = false});
            const int v = c.migrate();
            std::printf("ax-pg: schema at version %d\n", v);
            return 0;
        }
        if (cmd == "status") {
            ax::pg::Client c(conninfo);
            print_status(c);
            return 0;
        }
        if (cmd == "dead-letters" && args.size() >= 2) {
            ax::pg::Client c(conninfo);
            const std::string& sub = args[1];
            if (sub == "list") {
                const std::size_t limit =
                    args.size() >= 3 ? static_cast<std::size_t>(parse_id(args[2])) : 1000;
                const auto list = c.dead_letters(limit);
                std::printf("%zu dead letter(s)\n", list.size());
                for (const auto& d : list) {
                    std::printf("#%lld kind %s %s, %d attempt(s), %s, %.0f s ago\n",
                                static_cast<long long>(d.id), d.kind.c_str(),
                                std::string(ax::to_string(d.priority)).c_str(), d.attempts,
                                d.reason.c_str(), d.age_s);
                    for (const auto& e : d.errors)
                        std::printf("    %s\n", e.c_str());
                }
                return 0;
            }
            if ((sub == "replay" || sub == "discard") && args.size() >= 3) {
                int rc = 0;
                for (std::size_t i = 2; i < args.size(); ++i) {
                    const std::int64_t id = parse_id(args[i]);
                    const bool ok =
                        sub == "replay" ? c.replay_dead_letter(id) : c.discard_dead_letter(id);
                    std::printf("#%lld: %s\n", static_cast<long long>(id),
                                ok ? (sub == "replay" ? "replayed" : "discarded")
                                   : "not a dead letter");
                    if (!ok)
                        rc = 2;
                }
                return rc;
            }
        }
        if (cmd == "schedules" && args.size() >= 2) {
            ax::pg::Client c(conninfo);
            return schedules_command(c, args);
        }
        return usage();
    } catch (const std::invalid_argument& e) {
        std::fprintf(stderr, "ax-pg: %s\n", e.what());
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "ax-pg: %s\n", e.what());
        return 1;
    }
}
