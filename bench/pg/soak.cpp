// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
//
// The distributed mode's soak (scripts/soak-pg.sh runs it; not part of the test suite): no-op
// tasks flow through node processes at the rate they can burn them down, without a pause, for
// --minutes; every --sample-s the size of each ax table is printed, so a table that keeps growing
// with the tasks finished shows at once. A producer keeps --backlog tasks queued (it counts the
// unfinished ones and bulk-enqueues the difference, as bench/pg's steady state does). The nodes'
// history retention is --retention-s: the history must level off once the first retention
// period has passed, at about rate x retention x slots / (slots - 1).
//
//   ax_pg_soak [--minutes 10] [--retention-s 60] [--nodes 2] [--workers 2] [--backlog 4000]
//              [--sample-s 10] [--keyed-every 0]
//
// --keyed-every N gives every N-th task an idempotency key (0: none), to soak the key table too.
//
//   ax_pg_soak --burndown N [--nodes 1] [--workers 2]
// instead enqueues N no-op tasks first, then starts the nodes and prints the burn-down rate
// (from the first task finished to the last; one JSON line), for before/after comparisons of a
// change on the claim + run + ack path (alternate two builds, as docs/bench/pg-soak.md shows).
// Exit status 0 when every table levelled off. The connection comes from AX_PG_CONNINFO
// (scripts/pg-server.sh sets it). Node processes are this program re-run with --node (one process
// per node, as in production).
#include <algorithm>
#include <atomic>
#include <ax/pg/pg.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
std::map<std::string, std::string> g_opt;

long long num(const std::string& k, long long def) {
    auto it = g_opt.find(k);
    if (it == g_opt.end())
        return def;
    char* end = nullptr;
    const long long v = std::strtoll(it->second.c_str(), &end, 10);
    if (end == it->second.c_str() || *end != '\0' || v < 0) {
        std::fprintf(stderr, "ax_pg_soak: --%s needs a non-negative integer, got '%s'\n", k.c_str(),
                     it->second.c_str());
        std::exit(2);
    }
    return v;
}

std::string conninfo() {
    const char* c = std::getenv("AX_PG_CONNINFO");
    if (c == nullptr || *c == '\0') {
        std::fprintf(stderr, "ax_pg_soak: AX_PG_CONNINFO is not set (run it under "
                             "scripts/pg-server.sh, as scripts/soak-pg.sh does)\n");
        std::exit(2);
    }
    return c;
}

std::atomic<bool> g_stop{false};
void on_term(int) {
    g_stop.store(true);
}

// One node process: runs no-op tasks until SIGTERM, then prints its counts.
int run_node() {
    ax::pg::NodeOptions o;
    o.conninfo = conninfo();
    o.name = "soak-" + std::to_string(getpid());
    o.scheduler.min_workers = o.scheduler.max_workers =
        static_cast<std::uint32_t>(num("workers", 2));
    o.history_retention = std::chrono::milliseconds(num("retention-s", 60) * 1000);
    o.on_event = [](std::string_view e) {
        std::fprintf(stderr, "  [node %d] %.*s\n", getpid(), static_cast<int>(e.size()), e.data());
    };
    std::signal(SIGTERM, on_term);
    ax::pg::Node node(o);
    node.handle("noop", [](ax::pg::Job&) {});
    node.start();
    while (!g_stop.load())
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    node.stop();
    return 0;
}

// Forks one node process per --nodes (this program with --node).
std::vector<pid_t> start_nodes(const char* self) {
    std::vector<pid_t> pids;
    for (long long i = 0; i < num("nodes", 2); ++i) {
        const pid_t pid = fork();
        if (pid == 0) {
            std::vector<std::string> args = {self,
                                             "--node",
                                             "--workers",
                                             std::to_string(num("workers", 2)),
                                             "--retention-s",
                                             std::to_string(num("retention-s", 60))};
            std::vector<char*> av;
            for (auto& a : args)
                av.push_back(a.data());
            av.push_back(nullptr);
            execv(av[0], av.data());
            _exit(127);
        }
        pids.push_back(pid);
    }
    return pids;
}

void stop_nodes(const std::vector<pid_t>& pids) {
    for (pid_t p : pids)
        kill(p, SIGTERM);
    for (pid_t p : pids) {
        int st = 0;
        waitpid(p, &st, 0);
    }
}

const char* g_self = nullptr;

int run_burndown() {
    const auto n = num("burndown", 100000);
    const std::string db = conninfo();
    auto sql = ax::pg::detail::Connection::open(db);
    sql.exec("DROP SCHEMA IF EXISTS ax CASCADE");
    {
        ax::pg::Client client(db, {.require_schema = false});
        client.migrate();
        std::vector<ax::pg::NewTask> tasks(static_cast<std::size_t>(n));
        for (auto& t : tasks)
            t.kind = "noop";
        client.enqueue_many(tasks);
    }
    sql.exec("ANALYZE ax.tasks");
    sql.exec("CHECKPOINT");
    const auto pids = start_nodes(g_self);
    Clock::time_point first{};
    const auto guard = Clock::now() + std::chrono::minutes(10);
    long long left = n;
    while (left > 0 && Clock::now() < guard) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        left = sql.exec("SELECT count(*) FROM ax.tasks").int64(0, 0);
        if (first == Clock::time_point{} && left < n)
            first = Clock::now();
    }
    const double s = std::chrono::duration<double>(Clock::now() - first).count();
    stop_nodes(pids);
    std::printf("{\"burndown\":%lld,\"nodes\":%lld,\"s\":%.3f,\"tasks_per_s\":%.0f}\n",
                static_cast<long long>(n), static_cast<long long>(num("nodes", 2)), s,
                static_cast<double>(n) / s);
    return left == 0 ? 0 : 1;
}

struct Sample {
    double t_s = 0;
    long long finished = 0; // history rows ever written (succeeded)
    double rate = 0;        // tasks/s over the interval
    long long history_rows = 0, keys = 0;
    double tasks_mb = 0, history_mb = 0, dead_mb = 0, keys_mb = 0, other_mb = 0;
    int ring_cur = 0;
    double bound = 0; // history rows / tasks finished in the window the ring may keep
};

} // namespace

int main(int argc, char** argv) {
    bool node = false;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--node") {
            node = true;
        } else if (a.rfind("--", 0) == 0 && i + 1 < argc) {
            g_opt[a.substr(2)] = argv[++i];
        } else {
            std::fprintf(stderr, "ax_pg_soak: unexpected argument '%s' (see the file's header)\n",
                         a.c_str());
            return 2;
        }
    }
    g_self = argv[0];
    if (node)
        return run_node();
    if (g_opt.count("burndown"))
        return run_burndown();

    const auto minutes = num("minutes", 10), retention_s = num("retention-s", 60);
    const auto backlog = num("backlog", 4000), sample_s = std::max(1LL, num("sample-s", 10)),
               keyed_every = num("keyed-every", 0);
    const std::string db = conninfo();
    {
        auto c = ax::pg::detail::Connection::open(db);
        c.exec("DROP SCHEMA IF EXISTS ax CASCADE");
        ax::pg::Client client(db, {.require_schema = false});
        client.migrate();
    }
    const auto pids = start_nodes(argv[0]);

    // The producer: keep `backlog` tasks unfinished.
    std::atomic<long long> enqueued{0};
    std::thread producer([&] {
        ax::pg::Client client(db);
        auto sql = ax::pg::detail::Connection::open(db);
        std::vector<std::string> keys;
        long long serial = 0;
        while (!g_stop.load()) {
            const long long unfinished = sql.exec("SELECT count(*) FROM ax.tasks").int64(0, 0);
            const long long want = backlog - unfinished;
            if (want < backlog / 4) {
                std::this_thread::sleep_for(std::chrono::milliseconds(20));
                continue;
            }
            std::vector<ax::pg::NewTask> tasks(static_cast<std::size_t>(want));
            keys.resize(tasks.size());
            for (std::size_t i = 0; i < tasks.size(); ++i) {
                tasks[i].kind = "noop";
                ++serial;
                if (keyed_every > 0 && serial % keyed_every == 0) {
                    keys[i] = "soak-" + std::to_string(serial);
                    tasks[i].idempotency_key = keys[i];
                }
            }
            client.enqueue_many(tasks);
            enqueued.fetch_add(want);
        }
    });

    auto sql = ax::pg::detail::Connection::open(db);
    const auto mb = [&](const char* table) {
        return static_cast<double>(
                   sql.exec_params("SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::int8 "
                                   "FROM pg_class c WHERE c.oid = $1::regclass OR c.oid IN "
                                   "(SELECT relid FROM pg_partition_tree($1::regclass))",
                                   {table})
                       .int64(0, 0)) /
               1048576.0;
    };
    std::vector<Sample> samples;
    const auto t0 = Clock::now();
    const auto end = t0 + std::chrono::minutes(minutes);
    long long last_finished = 0;
    auto last_t = t0;
    // The most the ring may keep: the tasks finished in the last retention x 8 / 7 (the slot
    // being filled, up to a slot width) plus a maintenance interval (2 s) for the turn to come.
    const double keep_s = static_cast<double>(retention_s) * 8.0 / 7.0 + 2.0;
    std::printf("| t (s) | tasks/s | history rows | of those finished in the last %.0f s | "
                "ax.tasks MB | ax.history MB | ax.dead_letters MB | ax.idem_keys MB (rows) | "
                "batches+nodes+rings MB | history slot |\n"
                "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
                keep_s);
    std::fflush(stdout);
    for (auto next = t0 + std::chrono::seconds(sample_s); next <= end;
         next += std::chrono::seconds(sample_s)) {
        std::this_thread::sleep_until(next);
        Sample s;
        const auto now = Clock::now();
        s.t_s = std::chrono::duration<double>(now - t0).count();
        // Finished = enqueued - unfinished (the history alone forgets what the ring emptied).
        const long long unfinished = sql.exec("SELECT count(*) FROM ax.tasks").int64(0, 0);
        s.finished = enqueued.load() - unfinished;
        s.rate = static_cast<double>(s.finished - last_finished) /
                 std::chrono::duration<double>(now - last_t).count();
        last_finished = s.finished;
        last_t = now;
        s.history_rows = sql.exec("SELECT count(*) FROM ax.history").int64(0, 0);
        s.keys = sql.exec("SELECT count(*) FROM ax.idem_keys").int64(0, 0);
        s.tasks_mb = mb("ax.tasks");
        s.history_mb = mb("ax.history");
        s.dead_mb = mb("ax.dead_letters");
        s.keys_mb = mb("ax.idem_keys");
        s.other_mb = mb("ax.batches") + mb("ax.nodes") + mb("ax.rings");
        s.ring_cur = static_cast<int>(
            sql.exec("SELECT cur FROM ax.rings WHERE name = 'history'").int64(0, 0));
        // Tasks finished since the sample closest to keep_s ago (from the start if none).
        long long before = 0;
        for (auto& p : samples)
            if (p.t_s <= s.t_s - keep_s)
                before = p.finished;
        const long long window = s.finished - before;
        s.bound =
            window > 0 ? static_cast<double>(s.history_rows) / static_cast<double>(window) : 0.0;
        samples.push_back(s);
        std::printf(
            "| %.0f | %.0f | %lld | %.2f | %.1f | %.1f | %.2f | %.2f (%lld) | %.2f | %d |\n", s.t_s,
            s.rate, s.history_rows, s.bound, s.tasks_mb, s.history_mb, s.dead_mb, s.keys_mb, s.keys,
            s.other_mb, s.ring_cur);
        std::fflush(stdout);
    }
    g_stop.store(true);
    producer.join();
    stop_nodes(pids);

    // The verdict: from 3 retention periods on (minute 3 with the default 1 minute), every
    // table's size within +-20 % of its mean over that span.
    const double from_s = 3.0 * static_cast<double>(retention_s);
    std::vector<const Sample*> tail;
    for (auto& s : samples)
        if (s.t_s >= from_s)
            tail.push_back(&s);
    std::string verdict;
    bool level = !tail.empty();
    double rate_sum = 0;
    const auto check = [&](const char* name, double Sample::*field) {
        if (tail.empty())
            return;
        double sum = 0, lo = 1e300, hi = 0;
        for (auto* s : tail) {
            sum += s->*field;
            lo = std::min(lo, s->*field);
            hi = std::max(hi, s->*field);
        }
        const double mean = sum / static_cast<double>(tail.size());
        const bool ok = mean < 1.0 || (lo >= 0.8 * mean && hi <= 1.2 * mean);
        level = level && ok;
        char line[256];
        std::snprintf(line, sizeof line, "| %s | %.1f | %.1f | %.1f | %s |\n", name, lo, mean, hi,
                      ok ? "level (within +-20 %)" : "NOT level");
        verdict += line;
    };
    check("ax.tasks", &Sample::tasks_mb);
    check("ax.history", &Sample::history_mb);
    check("ax.dead_letters", &Sample::dead_mb);
    check("ax.idem_keys", &Sample::keys_mb);
    double worst = 0;
    for (auto* s : tail) {
        rate_sum += s->rate;
        worst = std::max(worst, s->bound);
    }
    // The history holds only what finished within the window the ring may keep (a sample taken
    // between the 10 s readings can overshoot by a little: the window is read at sample times).
    const bool bounded = worst <= 1.1;
    level = level && bounded;
    char bline[200];
    std::snprintf(bline, sizeof bline,
                  "| ax.history rows / tasks finished in the last %.0f s | | | %.2f (max) | %s |\n",
                  keep_s, worst, bounded ? "bounded by the retention" : "NOT bounded");
    verdict += bline;
    const double rate = tail.empty() ? 0 : rate_sum / static_cast<double>(tail.size());
    std::printf("\nFrom %.0f s on (%zu samples), size in MB:\n\n| table | min | mean | max | "
                "verdict |\n| --- | ---: | ---: | ---: | --- |\n%s\nMean rate %.0f tasks/s; "
                "%lld tasks finished in %lld min. %s\n",
                from_s, tail.size(), verdict.c_str(), rate, last_finished,
                static_cast<long long>(minutes),
                level ? "Every table level." : "Some table is NOT level (or too short a run).");
    return level ? 0 : 1;
}
