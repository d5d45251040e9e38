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
//
// AX_FLOWS_TRACE=1 adds a line per timed side (docs/bench/pg-flows.md, "Slow rounds"): when the
// handlers had run all N and when the history held them, the CPU time and the run-queue wait
// (/proc/<pid>/schedstat: runnable but not running) of this process and of the server's
// processes, the machine's busy share, each node's counters over the side, the longest stretch
// without a task run; for a slow side (over twice the side's fastest so far) also the progress
// every 0.5 s and what pg_stat_activity / pg_locks showed meanwhile (sampled every 100 ms).
// AX_FLOWS_VACUUM_EMPTY=1 runs `VACUUM (TRUNCATE false) ax.tasks` on the drained table before each
// side (what made claims slow before the fix described there); AX_FLOWS_SKIP_ACK=1 leaves out
// the acknowledgement statement's part.

#include <algorithm>
#include <atomic>
#include <ax/pg/pg.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <sys/resource.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace pg = ax::pg;
using Clock = std::chrono::steady_clock;

namespace {

std::atomic<std::int64_t> g_ran{0};
double g_enqueue_s = 0; // the last run's enqueue call

// ------------------------------------------------------------------ AX_FLOWS_TRACE
bool g_trace = false;

/// utime + stime (s) and run-queue wait (s) of one process (all its threads) from /proc.
struct ProcCpu {
    double cpu = 0, runq = 0;
};

ProcCpu proc_cpu(long pid) {
    ProcCpu out;
    const std::string base = "/proc/" + std::to_string(pid);
    if (std::FILE* f = std::fopen((base + "/stat").c_str(), "r")) {
        char buf[1024];
        const std::size_t got = std::fread(buf, 1, sizeof buf - 1, f);
        std::fclose(f);
        buf[got] = '\0';
        if (const char* p = std::strrchr(buf, ')')) {
            unsigned long long u = 0, st = 0;
            if (std::sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &u,
                            &st) == 2)
                out.cpu = static_cast<double>(u + st) / static_cast<double>(sysconf(_SC_CLK_TCK));
        }
    }
    // schedstat is per thread: sum the tasks.
    if (DIR* d = opendir((base + "/task").c_str())) {
        while (dirent* e = readdir(d)) {
            if (e->d_name[0] == '.')
                continue;
            if (std::FILE* f =
                    std::fopen((base + "/task/" + e->d_name + "/schedstat").c_str(), "r")) {
                unsigned long long run = 0, wait = 0;
                if (std::fscanf(f, "%llu %llu", &run, &wait) == 2)
                    out.runq += static_cast<double>(wait) / 1e9;
                std::fclose(f);
            }
        }
        closedir(d);
    }
    return out;
}

long parent_of(long pid) {
    std::FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "r");
    if (f == nullptr)
        return -1;
    char buf[1024];
    const std::size_t got = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    buf[got] = '\0';
    const char* p = std::strrchr(buf, ')');
    long ppid = -1;
    if (p == nullptr || std::sscanf(p + 2, "%*c %ld", &ppid) != 1)
        return -1;
    return ppid;
}

/// The postmaster and its children (the backends, the nodes' among them; exited ones are lost).
ProcCpu server_cpu(long postmaster) {
    ProcCpu sum = proc_cpu(postmaster);
    if (DIR* d = opendir("/proc")) {
        while (dirent* e = readdir(d)) {
            const long pid = std::atol(e->d_name);
            if (pid <= 0 || parent_of(pid) != postmaster)
                continue;
            const ProcCpu c = proc_cpu(pid);
            sum.cpu += c.cpu;
            sum.runq += c.runq;
        }
        closedir(d);
    }
    return sum;
}

/// Machine-wide busy and total jiffies (/proc/stat's first line), and steal.
struct MachineCpu {
    double busy = 0, total = 0, steal = 0;
};
MachineCpu machine_cpu() {
    MachineCpu m;
    std::FILE* f = std::fopen("/proc/stat", "r");
    if (f == nullptr)
        return m;
    unsigned long long v[10] = {};
    if (std::fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
                    &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9]) >= 8) {
        for (int i = 0; i < 8; ++i)
            m.total += static_cast<double>(v[i]);
        m.busy = m.total - static_cast<double>(v[3] + v[4]); // less idle and iowait
        m.steal = static_cast<double>(v[7]);
    }
    std::fclose(f);
    return m;
}

std::vector<pg::Node*> g_nodes;
long g_postmaster = -1;
std::mutex g_events_mu;
std::vector<std::string> g_events; // nodes' on_event lines, with the time into the side

/// Samples the side in progress from its own thread: the handlers' count every 50 ms, and
/// pg_stat_activity / pg_locks every 100 ms.
class Sampler {
  public:
    explicit Sampler(const std::string& conninfo)
        : db_(pg::detail::Connection::open(conninfo)), th_([this] { loop(); }) {}
    ~Sampler() {
        quit_.store(true);
        th_.join();
    }
    void begin(Clock::time_point t0) {
        std::lock_guard l(mu_);
        t0_ = t0;
        progress_.clear();
        activity_.clear();
        active_ = true;
    }
    void end() {
        std::lock_guard l(mu_);
        active_ = false;
    }
    /// (seconds into the side, tasks run) every 50 ms.
    std::vector<std::pair<double, std::int64_t>> progress() {
        std::lock_guard l(mu_);
        return progress_;
    }
    std::vector<std::string> activity() {
        std::lock_guard l(mu_);
        return activity_;
    }

  private:
    void loop() {
        int tick = 0;
        while (!quit_.load()) {
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
            Clock::time_point t0;
            {
                std::lock_guard l(mu_);
                if (!active_)
                    continue;
                t0 = t0_;
                progress_.emplace_back(std::chrono::duration<double>(Clock::now() - t0).count(),
                                       g_ran.load());
            }
            if (++tick % 2 != 0)
                continue;
            std::string line;
            try {
                pg::detail::Result r = db_.exec(
                    "SELECT pid, state, coalesce(wait_event_type || ':' || wait_event, '-'), "
                    "left(regexp_replace(query, '\\s+', ' ', 'g'), 60), "
                    "(SELECT count(*) FROM pg_locks WHERE NOT granted) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid() AND state "
                    "<> 'idle' ORDER BY pid");
                char head[64];
                std::snprintf(head, sizeof head, "t=%.2f ran=%lld",
                              std::chrono::duration<double>(Clock::now() - t0).count(),
                              static_cast<long long>(g_ran.load()));
                line = head;
                if (r.rows() > 0)
                    line += " locks-waiting=" + std::string(r.text(0, 4));
                for (int i = 0; i < r.rows(); ++i) {
                    line += "\n      pid " + std::string(r.text(i, 0)) + " " +
                            std::string(r.text(i, 1)) + " " + std::string(r.text(i, 2)) + " | " +
                            std::string(r.text(i, 3));
                }
            } catch (const std::exception& e) {
                line = std::string("sample failed: ") + e.what();
            }
            std::lock_guard l(mu_);
            if (active_)
                activity_.push_back(std::move(line));
        }
    }
    pg::detail::Connection db_;
    std::mutex mu_;
    bool active_ = false;
    Clock::time_point t0_;
    std::vector<std::pair<double, std::int64_t>> progress_;
    std::vector<std::string> activity_;
    std::atomic<bool> quit_{false};
    std::thread th_;
};
std::unique_ptr<Sampler> g_sampler;

std::atomic<Clock::rep> g_t0_ticks{0}; // the side's start, for the nodes' on_event (driver threads)

/// What AX_FLOWS_TRACE prints of one side.
struct SideTrace {
    Clock::time_point t0;
    double ran_s = 0, hist_s = 0;
    rusage ru0{};
    ProcCpu self0, srv0;
    MachineCpu m0;
    std::vector<pg::NodeStats> st0;
    Clock::time_point events_t0;

    void begin(Clock::time_point t) {
        if (!g_trace)
            return;
        t0 = t;
        g_t0_ticks.store(t.time_since_epoch().count());
        getrusage(RUSAGE_SELF, &ru0);
        self0 = proc_cpu(getpid());
        srv0 = server_cpu(g_postmaster);
        m0 = machine_cpu();
        st0.clear();
        for (auto* nd : g_nodes)
            st0.push_back(nd->stats());
        {
            std::lock_guard l(g_events_mu);
            g_events.clear();
        }
        g_sampler->begin(t0);
    }
};
SideTrace g_side;
std::map<std::string, double> g_fastest;

double tv_s(const timeval& tv) {
    return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) / 1e6;
}

void trace_end(const char* side, double wall) {
    if (!g_trace)
        return;
    g_sampler->end();
    rusage ru1{};
    getrusage(RUSAGE_SELF, &ru1);
    const ProcCpu self1 = proc_cpu(getpid()), srv1 = server_cpu(g_postmaster);
    const MachineCpu m1 = machine_cpu();
    const double self_cpu = tv_s(ru1.ru_utime) + tv_s(ru1.ru_stime) - tv_s(g_side.ru0.ru_utime) -
                            tv_s(g_side.ru0.ru_stime);
    const double tot = m1.total - g_side.m0.total;
    std::printf("  [trace] %s %.3f s: all run at %.3f s, history full at %.3f s; this process "
                "cpu %.3f s runq-wait %.3f s; server cpu %.3f s runq-wait %.3f s; machine busy "
                "%.0f%% steal %.0f%% (%d cores)\n",
                side, wall, g_side.ran_s, g_side.hist_s, self_cpu,
                proc_cpu(getpid()).runq - g_side.self0.runq, srv1.cpu - g_side.srv0.cpu,
                srv1.runq - g_side.srv0.runq, tot > 0 ? 100 * (m1.busy - g_side.m0.busy) / tot : 0,
                tot > 0 ? 100 * (m1.steal - g_side.m0.steal) / tot : 0,
                static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
    (void)self1;
    for (std::size_t i = 0; i < g_nodes.size(); ++i) {
        const pg::NodeStats a = g_side.st0[i], b = g_nodes[i]->stats();
        std::printf("    node%zu: round_trips %llu claims %llu batches %llu empty %llu claimed "
                    "%llu succeeded %llu renewals %llu reclaimed %llu/%llu vacuums %llu "
                    "reconnects %llu\n",
                    i, static_cast<unsigned long long>(b.round_trips - a.round_trips),
                    static_cast<unsigned long long>(b.claims - a.claims),
                    static_cast<unsigned long long>(b.batches - a.batches),
                    static_cast<unsigned long long>(b.empty_claims - a.empty_claims),
                    static_cast<unsigned long long>(b.claimed[0] + b.claimed[1] + b.claimed[2] -
                                                    a.claimed[0] - a.claimed[1] - a.claimed[2]),
                    static_cast<unsigned long long>(b.succeeded - a.succeeded),
                    static_cast<unsigned long long>(b.lease_renewals - a.lease_renewals),
                    static_cast<unsigned long long>(b.reclaimed_batches - a.reclaimed_batches),
                    static_cast<unsigned long long>(b.reclaimed_tasks - a.reclaimed_tasks),
                    static_cast<unsigned long long>(b.vacuums - a.vacuums),
                    static_cast<unsigned long long>(b.reconnects - a.reconnects));
    }
    // The longest stretch without a task run (before all ran).
    const auto prog = g_sampler->progress();
    double gap = 0, gap_at = 0, last_t = 0;
    std::int64_t last_v = -1;
    for (auto [t, v] : prog) {
        if (v != last_v) {
            last_v = v;
            last_t = t;
        } else if (t - last_t > gap && v < g_ran.load()) {
            gap = t - last_t;
            gap_at = last_t;
        }
    }
    std::printf("    longest stretch without a task run: %.2f s from t=%.2f\n", gap, gap_at);
    {
        std::lock_guard l(g_events_mu);
        for (auto& e : g_events)
            std::printf("    event %s\n", e.c_str());
    }
    double& fastest = g_fastest.try_emplace(side, wall).first->second;
    if (wall > 2 * fastest) {
        std::printf("    SLOW (fastest %s so far %.3f s); tasks run by t:", side, fastest);
        double next = 0;
        for (auto [t, v] : prog)
            if (t >= next) {
                std::printf(" %.1f:%lld", t, static_cast<long long>(v));
                next = t + 0.5;
            }
        std::printf("\n    pg_stat_activity (non-idle backends of this database) every 100 ms:\n");
        for (auto& a : g_sampler->activity())
            std::printf("    %s\n", a.c_str());
    }
    fastest = std::min(fastest, wall);
    std::fflush(stdout);
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

/// Waits until the handlers ran `n` tasks and the history holds them all.
void wait_done(pg::detail::Connection& db, std::int64_t n) {
    while (g_ran.load() < n)
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    if (g_trace)
        g_side.ran_s = std::chrono::duration<double>(Clock::now() - g_side.t0).count();
    while (db.exec("SELECT count(*) FROM ax.history").int64(0, 0) < n)
        std::this_thread::sleep_for(std::chrono::microseconds(500));
    if (g_trace)
        g_side.hist_s = std::chrono::duration<double>(Clock::now() - g_side.t0).count();
}

void reset(pg::detail::Connection& db) {
    db.exec("TRUNCATE ax.history, ax.flows, ax.flow_tasks, ax.flow_waiting");
    // AX_FLOWS_VACUUM_EMPTY=1: vacuum ax.tasks now, while it holds no live row, as a node's own
    // vacuum sometimes does between two sides (docs/bench/pg-flows.md, "Slow rounds").
    if (const char* v = std::getenv("AX_FLOWS_VACUUM_EMPTY"); v != nullptr && *v == '1')
        db.exec("VACUUM (TRUNCATE false) ax.tasks"); // as the node does
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
    g_side.begin(t0);
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
    g_side.begin(t0);
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
    g_trace = std::getenv("AX_FLOWS_TRACE") != nullptr && *std::getenv("AX_FLOWS_TRACE") == '1';
    if (g_trace) {
        g_postmaster = parent_of(db.exec("SELECT pg_backend_pid()").int64(0, 0));
        g_sampler = std::make_unique<Sampler>(conninfo);
    }
    std::vector<std::unique_ptr<pg::Node>> running;
    for (int i = 0; i < nodes; ++i) {
        pg::NodeOptions o;
        o.conninfo = conninfo;
        o.name = "bench" + std::to_string(i);
        o.scheduler.min_workers = workers;
        o.scheduler.max_workers = workers;
        if (g_trace)
            o.on_event = [i](std::string_view what) {
                char head[48];
                std::snprintf(
                    head, sizeof head, "t=%.3f node%d: ",
                    std::chrono::duration<double>(
                        Clock::now() - Clock::time_point(Clock::duration(g_t0_ticks.load())))
                        .count(),
                    i);
                std::lock_guard l(g_events_mu);
                g_events.push_back(head + std::string(what));
            };
        running.push_back(std::make_unique<pg::Node>(o));
        running.back()->handle("noop", [](pg::Job&) { g_ran.fetch_add(1); });
        running.back()->start();
        g_nodes.push_back(running.back().get());
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
                trace_end("plain-off", off.back());
                set_triggers(db, true);
            } else if (k == 1) {
                on.push_back(run_plain(c, db, n));
                on_enq.push_back(g_enqueue_s);
                trace_end("plain-on", on.back());
            } else {
                dag.push_back(run_dag(c, db, n, groups));
                dag_enq.push_back(g_enqueue_s);
                trace_end("dag", dag.back());
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
    g_sampler.reset();
    if (std::getenv("AX_FLOWS_SKIP_ACK") == nullptr)
        ack_bench(db, rounds);
    for (auto& nd : running)
        nd->stop();
    return 0;
}
