// The group limits' figures (issue 29; docs/bench/pg-limits.md), run by scripts/bench-pg-limits.sh.
// One process, NODES ax::pg::Node objects (each its own database sessions), no-op handlers; each
// run in a fresh database so no run inherits another's dead rows.
//
//   ax_pg_limits CONNINFO burn SIDE N NODES   burn-down of N queued no-op tasks; SIDE:
//                                              plain (ungrouped), group (one group, limit 1000),
//                                              group_nolimit (one group, no limit)
//   ax_pg_limits CONNINFO keys N NODES KEYS    N tasks over KEYS keys, limit 1 per key: every start
//                                              and end recorded, the most at once per key printed
//   ax_pg_limits CONNINFO fair N NODES         tenant "big" has N queued; tenant "small" submits
//                                              10 tasks/s meanwhile: the small tasks' waits
// Built against another checkout's headers with -DAX_LIMITS_BASELINE, only `burn plain` exists
// (the ungrouped claim before migration 11, for the cost comparison).
// For experiments, the environment may override the nodes' NodeOptions: AX_BENCH_ACK_DELAY_MS,
// AX_BENCH_ACK_BATCH, AX_BENCH_MAX_BATCH, AX_BENCH_TASKS_PER_WORKER, AX_BENCH_CONNECTIONS,
// AX_BENCH_VACUUM_DEAD_ROWS (unset: the defaults, which every documented figure uses).

#include <algorithm>
#include <atomic>
#include <ax/pg/pg.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <unistd.h>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
std::string g_base;
int g_db_seq = 0;

std::string fresh_db() {
    auto admin = ax::pg::detail::Connection::open(g_base);
    const std::string name =
        "ax_limits_bench_" + std::to_string(getpid()) + "_" + std::to_string(g_db_seq++);
    admin.exec(("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)").c_str());
    admin.exec(("CREATE DATABASE " + name).c_str());
    const std::string conninfo = g_base + " dbname=" + name;
    ax::pg::Client c(conninfo, {.require_schema = false});
    c.migrate();
    return conninfo;
}

void drop_db(const std::string& conninfo) {
    const std::string name = conninfo.substr(conninfo.rfind("dbname=") + 7);
    auto admin = ax::pg::detail::Connection::open(g_base);
    admin.exec(("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)").c_str());
}

double seconds_since(Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
}

long long now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
        .count();
}

/// Runs `nodes` nodes with `handler` for "noop" until `done()`; the seconds it took.
template <class Handler, class Done>
double run_nodes(const std::string& conninfo, int nodes, Handler handler, Done done) {
    std::vector<std::unique_ptr<ax::pg::Node>> ns;
    for (int i = 0; i < nodes; ++i) {
        ax::pg::NodeOptions o;
        o.conninfo = conninfo;
        o.name = "bench-" + std::to_string(i);
        // Knobs for experiments (unset: the defaults, which the documented figures use).
        if (const char* v = std::getenv("AX_BENCH_ACK_DELAY_MS"))
            o.ack_delay = std::chrono::milliseconds(std::atoi(v));
        if (const char* v = std::getenv("AX_BENCH_ACK_BATCH"))
            o.ack_batch = static_cast<std::uint32_t>(std::atoi(v));
        if (const char* v = std::getenv("AX_BENCH_MAX_BATCH"))
            o.max_batch = static_cast<std::uint32_t>(std::atoi(v));
        if (const char* v = std::getenv("AX_BENCH_TASKS_PER_WORKER"))
            o.tasks_per_worker = static_cast<std::uint32_t>(std::atoi(v));
        if (const char* v = std::getenv("AX_BENCH_CONNECTIONS"))
            o.connections = static_cast<std::uint32_t>(std::atoi(v));
        if (const char* v = std::getenv("AX_BENCH_VACUUM_DEAD_ROWS"))
            o.vacuum_dead_rows = static_cast<std::uint32_t>(std::atoi(v));
        ns.push_back(std::make_unique<ax::pg::Node>(o));
        ns.back()->handle("noop", handler);
    }
    const auto t0 = Clock::now();
    for (auto& n : ns)
        n->start();
    while (!done())
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    const double s = seconds_since(t0);
    std::uint64_t claims = 0, empty = 0, trips = 0;
    for (auto& n : ns) {
        n->stop();
        claims += n->stats().claims;
        empty += n->stats().empty_claims;
        trips += n->stats().round_trips;
    }
    // Why a limited burn-down is slower: its claims come back short or empty while the limit is
    // reached (an empty claim holds a node back until news or its floor).
    std::printf("  (%llu claims, %llu empty, %llu round trips)\n",
                static_cast<unsigned long long>(claims), static_cast<unsigned long long>(empty),
                static_cast<unsigned long long>(trips));
    return s;
}

int burn(const std::string& side, std::size_t n, int nodes) {
    const std::string db = fresh_db();
    ax::pg::Client c(db);
    std::vector<ax::pg::NewTask> ts(n);
    for (auto& t : ts) {
        t.kind = "noop";
#ifndef AX_LIMITS_BASELINE
        if (side != "plain")
            t.group = "g";
#endif
    }
#ifndef AX_LIMITS_BASELINE
    if (side == "group")
        c.set_limit("g", {.max_running = 1000});
    else if (side != "plain" && side != "group_nolimit")
        return std::fprintf(stderr, "ax_pg_limits: unknown side %s\n", side.c_str()), 2;
#else
    if (side != "plain")
        return std::fprintf(stderr, "ax_pg_limits: baseline build: plain only\n"), 2;
#endif
    for (std::size_t i = 0; i < n; i += 10000)
        c.enqueue_many(
            std::span<const ax::pg::NewTask>(ts).subspan(i, std::min<std::size_t>(10000, n - i)));
    std::atomic<std::size_t> done{0};
    const double s = run_nodes(
        db, nodes, [&](ax::pg::Job&) { done.fetch_add(1, std::memory_order_relaxed); },
        [&] { return done.load() >= n; });
    std::printf("burn %-14s %zu tasks, %d nodes: %.2f s, %.0f tasks/s\n", side.c_str(), n, nodes, s,
                static_cast<double>(n) / s);
    std::fflush(stdout);
    drop_db(db);
    return 0;
}

#ifndef AX_LIMITS_BASELINE
int keys(std::size_t n, int nodes, int nkeys) {
    const std::string db = fresh_db();
    ax::pg::Client c(db);
    c.set_limit("g", {.max_running = 1, .per_key = true});
    std::vector<std::string> names(static_cast<std::size_t>(nkeys));
    for (int k = 0; k < nkeys; ++k)
        names[static_cast<std::size_t>(k)] = std::to_string(k);
    std::vector<ax::pg::NewTask> ts(n);
    for (std::size_t i = 0; i < n; ++i) {
        ts[i].kind = "noop";
        ts[i].group = "g";
        ts[i].group_key = names[i % names.size()];
        ts[i].payload = names[i % names.size()];
    }
    for (std::size_t i = 0; i < n; i += 10000)
        c.enqueue_many(
            std::span<const ax::pg::NewTask>(ts).subspan(i, std::min<std::size_t>(10000, n - i)));
    std::mutex m;
    std::vector<std::tuple<int, long long, int>> ev; // key, ns, +1 start / -1 end
    ev.reserve(2 * n);
    std::atomic<std::size_t> done{0};
    const double s = run_nodes(
        db, nodes,
        [&](ax::pg::Job& j) {
            const int k = std::atoi(std::string(j.payload()).c_str());
            {
                std::lock_guard lock(m);
                ev.emplace_back(k, now_ns(), +1);
            }
            // Long enough that two runs of one key at once would overlap in the record.
            std::this_thread::sleep_for(std::chrono::microseconds(200));
            {
                std::lock_guard lock(m);
                ev.emplace_back(k, now_ns(), -1);
            }
            done.fetch_add(1, std::memory_order_relaxed);
        },
        [&] { return done.load() >= n; });
    std::sort(ev.begin(), ev.end());
    std::map<int, int> best;
    int cur = 0, key = -1;
    for (const auto& [k, t, d] : ev) {
        if (k != key)
            cur = 0, key = k;
        cur += d;
        best[k] = std::max(best[k], cur);
    }
    int most = 0;
    for (const auto& [k, b] : best)
        most = std::max(most, b);
    std::printf("keys: %zu tasks over %d keys (limit 1 per key), %d nodes: %.2f s, %.0f tasks/s; "
                "most at once for one key: %d\n",
                n, nkeys, nodes, s, static_cast<double>(n) / s, most);
    std::fflush(stdout);
    drop_db(db);
    return most == 1 ? 0 : 1;
}

int fair(std::size_t n, int nodes) {
    const std::string db = fresh_db();
    ax::pg::Client c(db);
    std::vector<ax::pg::NewTask> ts(n);
    for (auto& t : ts) {
        t.kind = "noop";
        t.group = "tenants";
        t.group_key = "big";
        t.payload = "b";
    }
    for (std::size_t i = 0; i < n; i += 10000)
        c.enqueue_many(
            std::span<const ax::pg::NewTask>(ts).subspan(i, std::min<std::size_t>(10000, n - i)));
    std::mutex m;
    std::map<std::int64_t, long long> enq; // small task id -> enqueue time
    std::vector<double> waits;
    std::atomic<std::size_t> big_done{0};
    std::atomic<bool> stop{false};
    std::thread producer([&] {
        ax::pg::Client p(db);
        ax::pg::NewTask t;
        t.kind = "noop";
        t.group = "tenants";
        t.group_key = "small";
        t.payload = "s";
        auto next = Clock::now();
        while (!stop.load()) {
            const long long at = now_ns();
            const auto id = p.enqueue(t).id;
            {
                std::lock_guard lock(m);
                enq[id] = at;
            }
            next += std::chrono::milliseconds(100);
            std::this_thread::sleep_until(next);
        }
    });
    const double s = run_nodes(
        db, nodes,
        [&](ax::pg::Job& j) {
            if (j.payload() == "s") {
                const long long t = now_ns();
                std::lock_guard lock(m);
                const auto it = enq.find(j.id());
                // The enqueue's answer may come after the start: count that as no wait.
                waits.push_back(it == enq.end() ? 0.0 : static_cast<double>(t - it->second) / 1e9);
            } else {
                big_done.fetch_add(1, std::memory_order_relaxed);
            }
        },
        [&] { return big_done.load() >= n; });
    stop = true;
    producer.join();
    std::sort(waits.begin(), waits.end());
    const auto pct = [&](double q) {
        return waits.empty()
                   ? 0.0
                   : waits[std::min(waits.size() - 1, static_cast<std::size_t>(
                                                          q * static_cast<double>(waits.size())))];
    };
    std::printf("fair: big tenant %zu queued, small tenant 10/s, %d nodes: big done in %.2f s; "
                "small tenant's %zu tasks waited p50 %.3f s, p99 %.3f s, max %.3f s\n",
                n, nodes, s, waits.size(), pct(0.5), pct(0.99), waits.empty() ? 0.0 : waits.back());
    std::fflush(stdout);
    drop_db(db);
    return 0;
}
#endif

} // namespace

int main(int argc, char** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: ax_pg_limits CONNINFO burn SIDE N NODES | keys N NODES KEYS | "
                             "fair N NODES\n");
        return 2;
    }
    g_base = argv[1];
    const std::string mode = argv[2];
    try {
        if (mode == "burn" && argc == 6)
            return burn(argv[3], std::stoul(argv[4]), std::atoi(argv[5]));
#ifndef AX_LIMITS_BASELINE
        if (mode == "keys" && argc == 6)
            return keys(std::stoul(argv[3]), std::atoi(argv[4]), std::atoi(argv[5]));
        if (mode == "fair" && argc == 5)
            return fair(std::stoul(argv[3]), std::atoi(argv[4]));
#endif
    } catch (const std::exception& e) {
        std::fprintf(stderr, "ax_pg_limits: %s\n", e.what());
        return 1;
    }
    std::fprintf(stderr, "ax_pg_limits: bad arguments\n");
    return 2;
}
