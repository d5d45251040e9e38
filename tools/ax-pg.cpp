// ax-pg: operator's tool for ax's distributed mode.
//
//   ax-pg [--db CONNINFO] migrate
//   ax-pg [--db CONNINFO] status
//   ax-pg [--db CONNINFO] dead-letters list [LIMIT]
//   ax-pg [--db CONNINFO] dead-letters replay ID...
//   ax-pg [--db CONNINFO] dead-letters discard ID...
//   ax-pg [--db CONNINFO] pause|resume kind KIND | lane high|normal|low
//   ax-pg [--db CONNINFO] pause                          (lists what is paused)
//
// Without --db the connection string comes from $AX_PG_CONNINFO, else libpq's defaults (PGHOST,
// PGPORT, PGDATABASE, ...). Exit status: 0 ok, 1 a database error, 2 bad usage or input.

#include <ax/pg/client.hpp>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

namespace {

int usage() {
    std::fprintf(stderr, "usage: ax-pg [--db CONNINFO] migrate\n"
                         "       ax-pg [--db CONNINFO] status\n"
                         "       ax-pg [--db CONNINFO] dead-letters list [LIMIT]\n"
                         "       ax-pg [--db CONNINFO] dead-letters replay|discard ID...\n"
                         "       ax-pg [--db CONNINFO] pause|resume kind KIND | lane LANE\n"
                         "       ax-pg [--db CONNINFO] pause   (lists what is paused)\n"
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

// --- pause and resume, listing (issue 28)

void print_paused(const std::vector<ax::pg::PauseInfo>& paused) {
    std::printf("paused: %s\n", paused.empty() ? "nothing" : "");
    for (const auto& p : paused)
        std::printf("  %s (%.0f s ago)\n", p.target.text().c_str(), p.age_s);
}

/// `pause|resume kind KIND | lane LANE`, and `pause` alone: what is paused.
int pause_command(const std::string& conninfo, const std::vector<std::string>& args) {
    const bool pause = args[0] == "pause";
    if (pause && args.size() == 1) {
        ax::pg::Client c(conninfo);
        print_paused(c.pauses());
        return 0;
    }
    if (args.size() != 3)
        throw std::invalid_argument(args[0] + ": expected 'kind KIND' or 'lane high|normal|low'");
    const ax::pg::PauseTarget t = ax::pg::PauseTarget::parse(args[1], args[2]);
    ax::pg::Client c(conninfo);
    const bool changed = pause ? c.pause(t) : c.resume(t);
    std::printf("%s: %s\n", t.text().c_str(),
                pause ? (changed ? "paused" : "already paused")
                      : (changed ? "resumed" : "was not paused"));
    return 0;
}

// --- end of pause and resume, listing

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
    print_paused(s.paused);
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
        if (cmd == "pause" || cmd == "resume")
            return pause_command(conninfo, args);
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
        return usage();
    } catch (const std::invalid_argument& e) {
        std::fprintf(stderr, "ax-pg: %s\n", e.what());
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "ax-pg: %s\n", e.what());
        return 1;
    }
}
