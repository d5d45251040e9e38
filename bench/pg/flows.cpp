// Workflows' cost (issue 29; docs/bench/pg-flows.md), in one process against one server, the
// sides alternating round by round so that drift and neighbours' load hit them alike:
//   plain-off  N no-op tasks without dependencies (Client::enqueue_many), the flow triggers on
//              ax.history and ax.dead_letters disabled: the ending statements as before v10;
//   plain-on   the same with the triggers enabled: what they cost tasks outside any flow;
//   dag        the same N no-op tasks as one flow (Client::enqueue_flow): G groups, each a head
//              fanning out to N/G - 2 steps that fan in to one tail.
// Each side's time runs from the enqueue call to the moment the history holds all N tasks. In-
// process nodes (ax::pg::Node) run the handler, which only counts.
//
//   ax_pg_flows CONNINFO [ROUNDS=5] [N=10000] [GROUPS=100] [NODES=2] [WORKERS=4]

#include <algorithm>
#include <atomic>
#include <ax/pg/pg.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace pg = ax::pg;
using Clock = std::chrono::steady_clock;

namespace {

std::atomic<std::int64_t> g_ran{0};
double g_enqueue_s = 0; // the last run's enqueue call

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

/// Waits until the handlers ran `n` tasks and the history holds them all.
void wait_done(pg::detail::Connection& db, std::int64_t n) {
    while (g_ran.load() < n)
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    while (db.exec("SELECT count(*) FROM ax.history").int64(0, 0) < n)
        std::this_thread::sleep_for(std::chrono::microseconds(500));
}

void reset(pg::detail::Connection& db) {
    db.exec("TRUNCATE ax.history, ax.flows, ax.flow_tasks, ax.flow_waiting");
    g_ran.store(0);
}

void set_triggers(pg::detail::Connection& db, bool on) {
    db.exec(on ? "ALTER TABLE ax.history ENABLE TRIGGER history_flow_settle; "
                 "ALTER TABLE ax.dead_letters ENABLE TRIGGER dead_letters_flow_settle"
               : "ALTER TABLE ax.history DISABLE TRIGGER history_flow_settle; "
                 "ALTER TABLE ax.dead_letters DISABLE TRIGGER dead_letters_flow_settle");
}

double run_plain(pg::Client& c, pg::detail::Connection& db, std::size_t n) {
    std::vector<pg::NewTask> tasks(n, pg::NewTask{.kind = "noop"});
    const auto t0 = Clock::now();
    c.enqueue_many(tasks);
    g_enqueue_s = std::chrono::duration<double>(Clock::now() - t0).count();
    wait_done(db, static_cast<std::int64_t>(n));
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// One no-op flow task (built field by field: GCC 12 -O3 misreads a nested designated
/// initializer's vectors as uninitialized).
pg::FlowTask noop_step(std::string_view name, std::vector<std::string_view> deps) {
    pg::FlowTask t;
    t.name = name;
    t.task.kind = "noop";
    t.depends_on = std::move(deps);
    return t;
}

double run_dag(pg::Client& c, pg::detail::Connection& db, std::size_t n, std::size_t groups) {
    const std::size_t per = n / groups; // head + steps + tail
    std::vector<std::string> names;
    names.reserve(n);
    for (std::size_t g = 0; g < groups; ++g)
        for (std::size_t i = 0; i < per; ++i)
            names.push_back(std::to_string(g) + "." + std::to_string(i));
    std::vector<pg::FlowTask> tasks;
    tasks.reserve(n);
    for (std::size_t g = 0; g < groups; ++g) {
        const std::string& head = names[g * per];
        tasks.push_back(noop_step(head, {}));
        std::vector<std::string_view> steps;
        for (std::size_t i = 1; i + 1 < per; ++i) {
            tasks.push_back(noop_step(names[g * per + i], {head}));
            steps.push_back(names[g * per + i]);
        }
        tasks.push_back(noop_step(names[g * per + per - 1], steps));
    }
    const auto t0 = Clock::now();
    c.enqueue_flow("bench", tasks);
    g_enqueue_s = std::chrono::duration<double>(Clock::now() - t0).count();
    wait_done(db, static_cast<std::int64_t>(tasks.size()));
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// CPU seconds (user + system) the server process `pid` has used so far, from /proc (the
/// server runs on this machine in scripts/bench-flows.sh): a backend's CPU time moves far less
/// with the neighbours' load than wall time does. -1 where /proc cannot tell.
double backend_cpu_s(long pid) {
    std::FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "r");
    if (f == nullptr)
        return -1;
    char buf[1024];
    const std::size_t got = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    buf[got] = '\0';
    const char* p = std::strrchr(buf, ')'); // the command name may hold spaces
    if (p == nullptr)
        return -1;
    unsigned long long utime = 0, stime = 0;
    // After ") ": state, then fields 4..13, then utime (14) and stime (15).
    if (std::sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime,
                    &stime) != 2)
        return -1;
    return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

/// The acknowledgement statement alone (schema.hpp's ack_sql, prepared), on tasks outside any
/// flow, with the flow triggers disabled and enabled, alternating: 100 000 tasks marked claimed
/// by a made-up node, acknowledged 200 per statement from one connection. Prints the medians.
void ack_bench(pg::detail::Connection& db, int rounds) {
    std::string prepare = "PREPARE ack_bench (int8, int8[]) AS ";
    prepare += pg::detail::ack_sql;
    db.exec(prepare.c_str());
    const std::size_t n = 100000, per = 200;
    const long pid = static_cast<long>(db.exec("SELECT pg_backend_pid()").int64(0, 0));
    std::vector<double> cpu_off, cpu_on;
    auto one = [&](bool triggers) {
        set_triggers(db, triggers);
        db.exec("TRUNCATE ax.history");
        pg::detail::Result r =
            db.exec("WITH i AS (INSERT INTO ax.tasks (kind, node_id) SELECT "
                    "'ackbench', -1 FROM generate_series(1, 100000) RETURNING id) "
                    "SELECT min(id) FROM i");
        const std::int64_t first = r.int64(0, 0);
        db.exec("VACUUM ANALYZE ax.tasks");
        const double c0 = backend_cpu_s(pid);
        const auto t0 = Clock::now();
        for (std::size_t b = 0; b < n; b += per) {
            // Appended piece by piece: GCC 12's -Wrestrict misfires on `"x" + std::string` at -O3.
            std::string sql = "EXECUTE ack_bench (-1, '{";
            for (std::size_t i = 0; i < per; ++i) {
                if (i != 0)
                    sql += ',';
                sql += std::to_string(first + static_cast<std::int64_t>(b + i));
            }
            sql += "}')";
            db.exec(sql.c_str());
        }
        const double s = std::chrono::duration<double>(Clock::now() - t0).count();
        (triggers ? cpu_on : cpu_off).push_back(backend_cpu_s(pid) - c0);
        set_triggers(db, true);
        return s;
    };
    std::vector<double> off, on;
    one(false); // warm-up
    one(true);
    cpu_off.clear();
    cpu_on.clear();
    for (int r = 0; r < rounds; ++r) {
        if (r % 2 == 0) {
            off.push_back(one(false));
            on.push_back(one(true));
        } else {
            on.push_back(one(true));
            off.push_back(one(false));
        }
    }
    std::printf(
        "\nacknowledgement statement alone, 100000 tasks outside any flow, 200 per "
        "statement, %d rounds:\n| flow triggers | median s | µs per task |\n|---|---:|---:|\n",
        rounds);
    std::printf("| disabled | %.3f | %.2f |\n| enabled | %.3f | %.2f |\n", median(off),
                median(off) * 1e6 / static_cast<double>(n), median(on),
                median(on) * 1e6 / static_cast<double>(n));
    std::printf("enabled / disabled = %.3f (per-round:", median(on) / median(off));
    for (std::size_t i = 0; i < on.size(); ++i)
        std::printf(" %.3f", on[i] / off[i]);
    std::printf(")\nserver CPU of the acknowledging backend (/proc): disabled %.3f s, enabled %.3f "
                "s, enabled / disabled = %.3f (per-round:",
                median(cpu_off), median(cpu_on), median(cpu_on) / median(cpu_off));
    for (std::size_t i = 0; i < cpu_on.size(); ++i)
        std::printf(" %.3f", cpu_on[i] / cpu_off[i]);
    std::printf(")\n");
}

} // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: ax_pg_flows CONNINFO [ROUNDS=5] [N=10000] [GROUPS=100] "
                             "[NODES=2] [WORKERS=4]\n");
        return 2;
    }
    const std::string conninfo = argv[1];
    const int rounds = argc > 2 ? std::atoi(argv[2]) : 5;
    const std::size_t n = argc > 3 ? std::stoul(argv[3]) : 10000;
    const std::size_t groups = argc > 4 ? std::stoul(argv[4]) : 100;
    const int nodes = argc > 5 ? std::atoi(argv[5]) : 2;
    const std::uint32_t workers = argc > 6 ? static_cast<std::uint32_t>(std::atoi(argv[6])) : 4;
    {
        pg::Client m(conninfo, {.require_schema = false});
        m.migrate();
    }
    pg::Client c(conninfo);
    auto db = pg::detail::Connection::open(conninfo);
    std::vector<std::unique_ptr<pg::Node>> running;
    for (int i = 0; i < nodes; ++i) {
        pg::NodeOptions o;
        o.conninfo = conninfo;
        o.name = "bench" + std::to_string(i);
        o.scheduler.min_workers = workers;
        o.scheduler.max_workers = workers;
        running.push_back(std::make_unique<pg::Node>(o));
        running.back()->handle("noop", [](pg::Job&) { g_ran.fetch_add(1); });
        running.back()->start();
    }
    std::printf("ax_pg_flows: %zu tasks, %zu groups (head -> %zu steps -> tail), %d node(s) x %u "
                "workers, %d rounds\n",
                n, groups, n / groups - 2, nodes, workers, rounds);
    // Warm-up: one of each.
    reset(db);
    run_plain(c, db, n);
    reset(db);
    run_dag(c, db, n, groups);
    std::vector<double> off, on, dag, on_enq, dag_enq;
    for (int r = 0; r < rounds; ++r) {
        // Alternate the order: even rounds off, on, dag; odd rounds dag, on, off.
        auto side = [&](int k) {
            reset(db);
            if (k == 0) {
                set_triggers(db, false);
                off.push_back(run_plain(c, db, n));
                set_triggers(db, true);
            } else if (k == 1) {
                on.push_back(run_plain(c, db, n));
                on_enq.push_back(g_enqueue_s);
            } else {
                dag.push_back(run_dag(c, db, n, groups));
                dag_enq.push_back(g_enqueue_s);
            }
        };
        for (int k = 0; k < 3; ++k)
            side(r % 2 == 0 ? k : 2 - k);
        std::printf("round %d: plain-off %.3f s  plain-on %.3f s (enqueue %.3f)  dag %.3f s "
                    "(enqueue %.3f)\n",
                    r + 1, off.back(), on.back(), on_enq.back(), dag.back(), dag_enq.back());
        std::fflush(stdout);
    }
    const double mo = median(off), mn = median(on), md = median(dag);
    std::printf("\n| side | median s | tasks/s | vs plain-on |\n|---|---:|---:|---:|\n");
    std::printf("| plain-off (flow triggers disabled) | %.3f | %.0f | %.3f |\n", mo,
                static_cast<double>(n) / mo, mo / mn);
    std::printf("| plain-on (flow triggers enabled) | %.3f | %.0f | 1.000 |\n", mn,
                static_cast<double>(n) / mn);
    std::printf("| dag (one flow, %zu x fan-out %zu / fan-in) | %.3f | %.0f | %.3f |\n", groups,
                n / groups - 2, md, static_cast<double>(n) / md, md / mn);
    std::printf("\nnon-flow trigger cost: plain-on / plain-off = %.3f (per-round ratios:", mn / mo);
    for (std::size_t i = 0; i < on.size(); ++i)
        std::printf(" %.3f", on[i] / off[i]);
    std::printf(")\ndag / plain-on = %.3f (per-round:", md / mn);
    for (std::size_t i = 0; i < on.size(); ++i)
        std::printf(" %.3f", dag[i] / on[i]);
    std::printf(")\n");
    std::vector<double> on_run, dag_run;
    for (std::size_t i = 0; i < on.size(); ++i) {
        on_run.push_back(on[i] - on_enq[i]);
        dag_run.push_back(dag[i] - dag_enq[i]);
    }
    std::printf("enqueue medians: plain %.3f s, dag %.3f s; after the enqueue: plain %.3f s, dag "
                "%.3f s, dag / plain = %.3f\n",
                median(on_enq), median(dag_enq), median(on_run), median(dag_run),
                median(dag_run) / median(on_run));
    ack_bench(db, rounds);
    for (auto& nd : running)
        nd->stop();
    return 0;
}
