// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
//
// ax's side of the distributed benchmark (bench/pg/bench.mjs drives it): the same roles and
// JSON-lines protocol as peers.mjs, on ax::pg::Client and ax::pg::Node.
//   ax_pg_bench <info|setup|enqueue|node|produce> [--n N] [--batch pid|N] [--lease-s S]
//               [--backlog N] [--total N] [--tick-ms MS] [--id I]
// The connection comes from PGHOST, PGPORT, PGUSER, PGDATABASE. stdout carries protocol lines only.
#include <algorithm>
#include <atomic>
#include <ax/pg/pg.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

std::map<std::string, std::string> g_opt;

std::string opt(const std::string& k, const std::string& def) {
    auto it = g_opt.find(k);
    return it == g_opt.end() ? def : it->second;
}
long long opt_num(const std::string& k, long long def) {
    auto it = g_opt.find(k);
    if (it == g_opt.end())
        return def;
    char* end = nullptr;
    const long long v = std::strtoll(it->second.c_str(), &end, 10);
    if (end == it->second.c_str() || *end != '\0' || v < 0) {
        std::fprintf(stderr, "ax_pg_bench: --%s needs a non-negative integer, got '%s'\n",
                     k.c_str(), it->second.c_str());
        std::exit(2);
    }
    return v;
}

std::string env(const char* name, const char* def) {
    const char* v = std::getenv(name);
    return v != nullptr && *v != '\0' ? v : def;
}
std::string conninfo() {
    return "host=" + env("PGHOST", "127.0.0.1") + " port=" + env("PGPORT", "5432") +
           " user=" + env("PGUSER", "bench") + " dbname=" + env("PGDATABASE", "bench");
}

std::mutex g_out_mutex;
void send(const std::string& json) {
    std::lock_guard lock(g_out_mutex);
    std::fwrite(json.data(), 1, json.size(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
}

// Parent commands: "go" and "stop" on stdin. EOF means the driver died: leave at once.
std::atomic<bool> g_go{false}, g_stop{false};
void read_commands() {
    std::thread([] {
        std::string line;
        while (std::getline(std::cin, line)) {
            if (line == "go")
                g_go.store(true);
            else if (line == "stop")
                g_stop.store(true);
        }
        std::_Exit(3);
    }).detach();
}
void wait_flag(const std::atomic<bool>& f) {
    while (!f.load())
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

// Priorities 3:2:1 (high, normal, low) in a fixed repeating pattern, as peers.mjs does.
ax::Priority prio(std::uint64_t i) {
    static constexpr ax::Priority pattern[6] = {ax::Priority::high,   ax::Priority::high,
                                                ax::Priority::high,   ax::Priority::normal,
                                                ax::Priority::normal, ax::Priority::low};
    return pattern[i % 6];
}

std::string num(double v) {
    char b[64];
    std::snprintf(b, sizeof b, "%.3f", v);
    return b;
}

double pct(std::vector<double> v, double q) {
    if (v.empty())
        return -1;
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size())))];
}

// ------------------------------------------------------------------------------------- roles

int role_info() {
    send(
        R"j({"ev":"info","hot_tables":["ax.tasks"],"other_tables":["ax.history","ax.dead_letters","ax.idem_keys","ax.batches","ax.nodes"],)j"
        R"j("unfinished_sql":"select count(*)::bigint as n from ax.tasks",)j"
        R"j("claimed_ids_sql":"select id::text from ax.tasks where node_id is not null",)j"
        R"j("unfinished_of_sql":"select count(*)::bigint as n from ax.tasks where id = any($1::bigint[])",)j"
        R"j("recovery_note":"batch leases expire after the lease; maintenance (one node; at the earliest lease expiry, else every 2 s) reclaims them"})j");
    return 0;
}

int role_setup() {
    {
        auto c = ax::pg::detail::Connection::open(conninfo());
        c.exec("DROP SCHEMA IF EXISTS ax CASCADE");
    }
    ax::pg::Client client(conninfo(), {.require_schema = false});
    client.migrate();
    send(R"({"ev":"done"})");
    return 0;
}

std::vector<ax::pg::NewTask> make_tasks(std::uint64_t first, std::uint64_t n) {
    std::vector<ax::pg::NewTask> tasks(n);
    for (std::uint64_t i = 0; i < n; ++i) {
        tasks[i].kind = "noop";
        tasks[i].priority = prio(first + i);
    }
    return tasks;
}

int role_enqueue() {
    const auto n = static_cast<std::uint64_t>(opt_num("n", 100000));
    ax::pg::Client client(conninfo());
    read_commands();
    send(R"({"ev":"ready"})");
    wait_flag(g_go);
    // Building the tasks is the caller's cost, so it is inside the timed window.
    const auto t0 = Clock::now();
    const auto tasks = make_tasks(0, n);
    const auto ids = client.enqueue_many(tasks);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (ids.size() != n) {
        std::fprintf(stderr, "ax_pg_bench: enqueue_many returned %zu IDs for %llu tasks\n",
                     ids.size(), static_cast<unsigned long long>(n));
        return 1;
    }
    send(R"({"ev":"done","n":)" + std::to_string(n) + R"(,"s":)" + num(s) + R"(,"batch":)" +
         std::to_string(n) + "}");
    wait_flag(g_stop);
    send(R"({"ev":"stats","round_trips":1,"batch":)" + std::to_string(n) + "}");
    return 0;
}

// Claim round trips, when the library offers the observation hook (see
// /work/coord/pgbench-findings.md): recorded from the driver thread.
std::mutex g_rtt_mutex;
std::vector<double> g_rtt_us;
std::atomic<std::uint64_t> g_claim_rows{0}, g_claim_calls{0};

template <class O> bool hook_claims(O& o) {
    if constexpr (requires { o.on_claim = [](std::uint32_t, std::chrono::nanoseconds) {}; }) {
        g_rtt_us.reserve(1 << 20);
        o.on_claim = [](std::uint32_t rows, std::chrono::nanoseconds rt) {
            g_claim_rows.fetch_add(rows, std::memory_order_relaxed);
            g_claim_calls.fetch_add(1, std::memory_order_relaxed);
            std::lock_guard lock(g_rtt_mutex);
            g_rtt_us.push_back(static_cast<double>(rt.count()) / 1000.0);
        };
        return true;
    } else {
        return false;
    }
}
template <class O> bool set_fixed_batch(O& o, std::uint32_t n) {
    if constexpr (requires { o.fixed_batch = n; }) {
        o.fixed_batch = n;
        return true;
    } else {
        return false;
    }
}
template <class S> long long round_trips_of(const S& s) {
    if constexpr (requires { s.round_trips; })
        return static_cast<long long>(s.round_trips);
    else
        return -1;
}

int role_node() {
    const std::string batch = opt("batch", "pid");
    const auto lease_s = opt_num("lease-s", 30);
    ax::pg::NodeOptions o;
    o.conninfo = conninfo();
    o.name = "bench-" + opt("id", "0") + ":" + std::to_string(getpid());
    o.lease = std::chrono::milliseconds(lease_s * 1000);
    o.on_event = [](std::string_view e) {
        std::fprintf(stderr, "ax node: %.*s\n", static_cast<int>(e.size()), e.data());
    };
    std::uint32_t fixed = 0;
    if (batch != "pid") {
        fixed = static_cast<std::uint32_t>(opt_num("batch", 0));
        if (fixed == 0) {
            std::fprintf(stderr, "ax_pg_bench: --batch pid|N\n");
            return 2;
        }
        // The local buffer holds two batches, so a refill at the low watermark asks for one
        // whole batch.
        o.max_batch = fixed;
        o.target_depth = 2 * fixed;
        o.tasks_per_worker =
            std::max<std::uint32_t>(o.tasks_per_worker, (2 * fixed + o.scheduler.max_workers - 1) /
                                                            o.scheduler.max_workers);
        if (!set_fixed_batch(o, fixed))
            std::fprintf(stderr,
                         "ax_pg_bench: NodeOptions has no fixed_batch: batch %u is max_batch "
                         "(the PID saturates there)\n",
                         fixed);
    }
    // --connections N: the node's links (NodeOptions::connections; default: the library's).
    if (const auto links = opt_num("connections", 0); links > 0)
        o.connections = static_cast<std::uint32_t>(links);
    const bool rtt = hook_claims(o);
    std::atomic<std::uint64_t> done{0};
    std::atomic<std::int64_t> first_ns{-1};
    Clock::time_point go_at{};
    ax::pg::Node node(o);
    node.handle("noop", [&](ax::pg::Job&) {
        if (done.fetch_add(1, std::memory_order_relaxed) == 0)
            first_ns.store(
                std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - go_at).count());
    });
    read_commands();
    send(R"({"ev":"ready"})");
    wait_flag(g_go);
    go_at = Clock::now();
    node.start();
    while (!g_stop.load()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        send(R"({"ev":"p","done":)" + std::to_string(done.load()) + "}");
    }
    const ax::pg::NodeStats s = node.stats();
    std::uint64_t claimed = s.claimed[0] + s.claimed[1] + s.claimed[2];
    std::string out = R"({"ev":"stats","done":)" + std::to_string(done.load()) + R"(,"claims":)" +
                      std::to_string(s.claims) + R"(,"claimed_rows":)" + std::to_string(claimed) +
                      R"(,"batch":")" + batch + "\"";
    if (const long long rt = round_trips_of(s); rt >= 0)
        out += R"(,"round_trips":)" + std::to_string(rt);
    if (first_ns.load() >= 0)
        out += R"(,"first_ms":)" + num(static_cast<double>(first_ns.load()) / 1e6);
    if (rtt) {
        std::lock_guard lock(g_rtt_mutex);
        if (!g_rtt_us.empty())
            out += R"(,"claim_p50_us":)" + num(pct(g_rtt_us, 0.5)) + R"(,"claim_p99_us":)" +
                   num(pct(g_rtt_us, 0.99));
    }
    out += R"(,"claimed_high":)" + std::to_string(s.claimed[0]) + R"(,"claimed_normal":)" +
           std::to_string(s.claimed[1]) + R"(,"claimed_low":)" + std::to_string(s.claimed[2]) +
           R"(,"reclaimed_tasks":)" + std::to_string(s.reclaimed_tasks) + "}";
    send(out);
    node.stop();
    return 0;
}

// Holds the unfinished backlog near --backlog: every --tick-ms it counts unfinished tasks and
// enqueues the difference in one statement, until "stop" or until --total were enqueued.
int role_produce() {
    const auto target = static_cast<std::uint64_t>(opt_num("backlog", 4000));
    const auto tick = std::chrono::milliseconds(opt_num("tick-ms", 50));
    const auto total = static_cast<std::uint64_t>(opt_num("total", 0));
    ax::pg::Client client(conninfo());
    auto count = ax::pg::detail::Connection::open(conninfo());
    read_commands();
    send(R"({"ev":"ready"})");
    wait_flag(g_go);
    const auto t0 = Clock::now();
    std::uint64_t enq = 0, calls = 0, queries = 0, samples = 0;
    double sum_backlog = 0;
    auto last_tick = t0;
    std::uint64_t last_backlog = 0, last_want = 0;
    while (!g_stop.load()) {
        const auto tick_start = Clock::now();
        auto r = count.exec("SELECT count(*) FROM ax.tasks");
        ++queries;
        const auto backlog = static_cast<std::uint64_t>(std::stoll(std::string(r.text(0, 0))));
        sum_backlog += static_cast<double>(backlog);
        ++samples;
        const auto ms =
            std::chrono::duration_cast<std::chrono::milliseconds>(tick_start - t0).count();
        send(R"({"ev":"s","t_ms":)" + std::to_string(ms) + R"(,"backlog":)" +
             std::to_string(backlog) + R"(,"enq":)" + std::to_string(enq) + R"(,"q":)" +
             std::to_string(queries) + "}");
        // Tops up to the target plus what the nodes will consume before the next count (the
        // rate since the last tick, at most another target): topped up to the target alone, a
        // fast consumer drained it between two counts (2 350 of 4 000 per 50 ms tick at 47k/s)
        // and waited for the producer. The same rule in peers.mjs.
        const double dt = std::chrono::duration<double>(tick_start - last_tick).count();
        const double consumed =
            static_cast<double>(last_backlog + last_want) - static_cast<double>(backlog);
        const auto ahead = samples > 1 && dt > 0
                               ? static_cast<std::uint64_t>(std::clamp(
                                     consumed / dt * std::chrono::duration<double>(tick).count(),
                                     0.0, static_cast<double>(target)))
                               : 0;
        std::uint64_t want = backlog < target + ahead ? target + ahead - backlog : 0;
        last_tick = tick_start;
        last_backlog = backlog;
        if (total != 0)
            want = std::min(want, total - enq);
        last_want = want;
        if (want > 0) {
            const auto tasks = make_tasks(enq, want);
            client.enqueue_many(tasks);
            enq += want;
            ++calls;
            ++queries;
        }
        if (total != 0 && enq >= total && backlog == 0) {
            send(R"({"ev":"drained","t_ms":)" +
                 std::to_string(
                     std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0)
                         .count()) +
                 R"(,"enq":)" + std::to_string(enq) + "}");
            break;
        }
        std::this_thread::sleep_until(tick_start + tick);
    }
    wait_flag(g_stop);
    send(R"({"ev":"stats","enq":)" + std::to_string(enq) + R"(,"calls":)" + std::to_string(calls) +
         R"(,"queries":)" + std::to_string(queries) + R"(,"avg_backlog":)" +
         num(samples ? sum_backlog / static_cast<double>(samples) : 0) + "}");
    return 0;
}

} // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr,
                     "usage: ax_pg_bench <info|setup|enqueue|node|produce> [--key value]...\n");
        return 2;
    }
    const std::string role = argv[1];
    for (int i = 2; i < argc; i += 2) {
        const std::string k = argv[i];
        if (k.size() < 3 || k.rfind("--", 0) != 0 || i + 1 >= argc) {
            std::fprintf(stderr, "ax_pg_bench: bad argument '%s'\n", k.c_str());
            return 2;
        }
        g_opt[k.substr(2)] = argv[i + 1];
    }
    try {
        if (role == "info")
            return role_info();
        if (role == "setup")
            return role_setup();
        if (role == "enqueue")
            return role_enqueue();
        if (role == "node")
            return role_node();
        if (role == "produce")
            return role_produce();
        std::fprintf(stderr, "ax_pg_bench: unknown role '%s'\n", role.c_str());
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "ax_pg_bench %s: %s\n", role.c_str(), e.what());
        return 1;
    }
}
