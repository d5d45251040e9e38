// An idle node costs the database almost nothing, whatever happened before (issue 26): after each
// path that can leave claim state behind (lanes drained past the anti-starvation budget, tasks no
// node can take, a server restart, a dead node's batches reclaimed), nodes with the default
// poll_interval (500 ms) must send at most 10 claim statements per second each while nothing is
// claimable. Runs against a real PostgreSQL (scripts/pg-server.sh exports AX_PG_CONNINFO); without
// one it exits 77 (skipped). Each test case works in a database of its own. The [idle_logic] case
// needs no server. Beside them, [claim_plan]: a claim's cost stays bounded by its batch once a
// VACUUM found ax.tasks empty (its statistics then say "empty" while the queue refills).

#define CATCH_CONFIG_RUNNER
#include <algorithm>
#include <atomic>
#include <ax/pg/pg.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <signal.h>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace std::chrono_literals;
namespace pg = ax::pg;

namespace {

std::string g_base;     // AX_PG_CONNINFO
std::string g_node_exe; // pg_test_node beside this executable

/// The target (issue 26): claim statements per second of one idle node, default poll_interval.
constexpr double max_idle_claims_per_s = 10.0;

/// A fresh database with the ax schema and the tables the test node's handlers write.
struct Db {
    std::string conninfo;
    explicit Db(const std::string& name) {
        auto admin = pg::detail::Connection::open(g_base);
        admin.exec(("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)").c_str());
        admin.exec(("CREATE DATABASE " + name).c_str());
        conninfo = g_base + " dbname=" + name;
        pg::Client c(conninfo, {.require_schema = false});
        c.migrate();
        auto s = sql();
        s.exec("CREATE TABLE results (task_id bigint PRIMARY KEY, node text NOT NULL)");
        s.exec("CREATE TABLE runs (task_id bigint NOT NULL, node text NOT NULL)");
    }
    [[nodiscard]] pg::detail::Connection sql() const {
        return pg::detail::Connection::open(conninfo);
    }
    std::int64_t scalar(const std::string& q) const {
        auto s = sql();
        return s.exec(q.c_str()).int64(0, 0);
    }
    /// Makes every pending task look queued `ago` ago (as if enqueued before the nodes
    /// started): past Config::max_wait (5 s), the nodes' anti-starvation path is taken.
    /// The table lock comes first: an UPDATE of every row beside running nodes takes its row
    /// locks in scan order, the nodes' claims and acks in theirs, and PostgreSQL broke the tie
    /// by aborting one side (a deadlock) under load.
    void back_date(std::chrono::milliseconds ago) const {
        sql().exec(("BEGIN; LOCK TABLE ax.tasks IN SHARE ROW EXCLUSIVE MODE; "
                    "UPDATE ax.tasks SET run_at = run_at - interval '" +
                    std::to_string(ago.count()) + " milliseconds', enqueued_at = enqueued_at - " +
                    "interval '" + std::to_string(ago.count()) + " milliseconds'; COMMIT")
                       .c_str());
    }
};

/// Polls `pred` every 20 ms; false if `limit` (a generous hang guard, not a speed claim) passed.
bool wait_until(const std::function<bool()>& pred, std::chrono::milliseconds limit) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < until) {
        if (pred())
            return true;
        std::this_thread::sleep_for(20ms);
    }
    return pred();
}

/// A pg_test_node child process.
struct Proc {
    pid_t pid = -1;
    Proc(const std::string& db, const std::string& name, std::vector<std::string> extra) {
        std::vector<std::string> args = {g_node_exe, "--db", db, "--name", name};
        args.insert(args.end(), extra.begin(), extra.end());
        pid = fork();
        if (pid == 0) {
            std::vector<char*> argv;
            for (auto& a : args)
                argv.push_back(a.data());
            argv.push_back(nullptr);
            execv(argv[0], argv.data());
            _exit(127);
        }
        REQUIRE(pid > 0);
    }
    void kill9() {
        if (pid <= 0)
            return;
        kill(pid, SIGKILL);
        int st = 0;
        waitpid(pid, &st, 0);
        pid = -1;
    }
    Proc(const Proc&) = delete;
    Proc& operator=(const Proc&) = delete;
    ~Proc() { kill9(); }
};

/// A node as users run it: 4 workers and every knob at its default (poll_interval 500 ms,
/// Config::max_wait 5 s), except quicker reconnects and maintenance for the tests' pace.
pg::NodeOptions idle_node(const Db& db, const std::string& name) {
    pg::NodeOptions o;
    o.conninfo = db.conninfo;
    o.name = name;
    o.scheduler.min_workers = 4;
    o.scheduler.max_workers = 4;
    o.reconnect_base = 20ms;
    o.reconnect_max = 500ms;
    o.stop_grace = 5000ms;
    o.on_event = [name](std::string_view e) {
        std::fprintf(stderr, "  [%s] %.*s\n", name.c_str(), static_cast<int>(e.size()), e.data());
    };
    return o;
}

std::vector<pg::NewTask> tasks_of(std::string_view kind, std::size_t n,
                                  ax::Priority priority = ax::Priority::normal,
                                  std::string_view payload = {}) {
    std::vector<pg::NewTask> v(n);
    for (auto& t : v) {
        t.kind = kind;
        t.priority = priority;
        t.payload = payload;
    }
    return v;
}

/// Nodes that run no-op handlers and count what they ran.
struct Nodes {
    std::atomic<std::uint64_t> ran{0};
    std::vector<std::unique_ptr<pg::Node>> nodes;
    Nodes(const Db& db, int n, const std::vector<std::string>& kinds = {"noop"},
          const std::function<void(pg::NodeOptions&)>& tweak = {}) {
        for (int i = 0; i < n; ++i) {
            auto o = idle_node(db, "idle" + std::to_string(i));
            if (tweak)
                tweak(o);
            nodes.push_back(std::make_unique<pg::Node>(o));
            for (auto& k : kinds)
                nodes.back()->handle(k, [this](pg::Job&) { ran.fetch_add(1); });
        }
    }
    void start() {
        for (auto& n : nodes)
            n->start();
    }
    ~Nodes() {
        for (auto& n : nodes)
            n->stop();
    }
};

/// Measures each node's claim statements over `window` with nothing claimable; prints and
/// returns the highest rate (statements per second).
double idle_claim_rate(const Nodes& ns, const char* after,
                       std::chrono::milliseconds window = 2500ms) {
    std::vector<pg::NodeStats> before;
    for (auto& n : ns.nodes)
        before.push_back(n->stats());
    const auto t0 = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(window);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double worst = 0;
    for (std::size_t i = 0; i < ns.nodes.size(); ++i) {
        const auto now = ns.nodes[i]->stats();
        const double rate = static_cast<double>(now.claims - before[i].claims) / s;
        const double empty = static_cast<double>(now.empty_claims - before[i].empty_claims) / s;
        std::printf("  idle after %s: node %zu sent %.1f claims/s (%.1f empty/s) over %.2f s; "
                    "%.1f round trips/s\n",
                    after, i, rate, empty, s,
                    static_cast<double>(now.round_trips - before[i].round_trips) / s);
        worst = std::max(worst, rate);
    }
    return worst;
}

} // namespace

TEST_CASE("lane bookkeeping: an empty queue is learnt in at most three claims from any state "
          "(no database)",
          "[idle_logic]") {
    using Lanes = std::array<std::uint32_t, 3>;
    const Lanes weights{3, 2, 1};
    const std::uint32_t unlimited = std::numeric_limits<std::uint32_t>::max();

    // The sequence of the finding: lanes 0 and 2 known empty, lane 1 drained past the
    // anti-starvation budget, and an idle node's claim sized at exactly its free slots (64).
    // The probes used to be cut to make room and the lanes asked nothing came back "not empty",
    // so two claims that found nothing alternated without end ({0,0,64}, {38,26,0}, ...).
    {
        pg::detail::LaneBook b;
        b.learn({1, 64, 1}, {0, 64, 0}, {false, true, false});
        REQUIRE(b.empty(0));
        REQUIRE(!b.empty(1));
        REQUIRE(b.overdue(1));
        const Lanes q = b.plan(64, 64, weights, {unlimited, unlimited, unlimited});
        CHECK(q[0] == 1); // the probes are kept, inside the free slots
        CHECK(q[1] == 62);
        CHECK(q[2] == 1);
        b.learn(q, {0, 0, 0}, {false, false, false});
        CHECK(b.all_empty());
        CHECK(!b.overdue(1));
        const Lanes idle = b.plan(64, 64, weights, {unlimited, unlimited, unlimited});
        CHECK(idle == Lanes{1, 1, 1});
    }
    // A lane asked for nothing keeps what was known of it.
    {
        pg::detail::LaneBook b;
        b.learn({0, 5, 0}, {0, 0, 0}, {false, false, false});
        CHECK(!b.empty(0));
        CHECK(b.empty(1));
        CHECK(!b.empty(2));
        b.learn({1, 1, 1}, {0, 0, 0}, {false, false, false});
        CHECK(b.all_empty());
        b.learn({0, 0, 0}, {0, 0, 0}, {false, false, false});
        CHECK(b.all_empty());
        b.wake();
        CHECK(!b.empty(0));
        CHECK(!b.empty(1));
        CHECK(!b.empty(2));
    }
    // An overdue lane gets at least half of a claim that fits the free slots; the others give way.
    {
        pg::detail::LaneBook b;
        b.learn({10, 10, 10}, {10, 10, 10}, {false, false, true});
        const Lanes q = b.plan(64, 64, weights, {unlimited, unlimited, unlimited});
        CHECK(q[0] + q[1] + q[2] == 64);
        CHECK(q[2] >= 32);
        CHECK(q[0] > 0); // the lowest priority (after the overdue lane) gives way first
    }
    // Less room than probes: the lane known to hold work is asked first.
    {
        pg::detail::LaneBook b;
        b.learn({1, 1, 1}, {0, 1, 0}, {false, false, false});
        CHECK(b.plan(8, 1, weights, {unlimited, unlimited, unlimited}) == Lanes{0, 1, 0});
    }

    // Every starting state (lanes known empty or not, overdue or not), every room from 1 up,
    // batches from 1 to the room, token caps that leave lanes out: each plan fits the room and
    // the caps, and with nothing claimable the book learns "all empty" in at most three claims
    // (each claim asks some lane not yet known empty, unless the caps leave nothing to ask).
    int states = 0;
    for (int e = 0; e < 8; ++e)
        for (int o = 0; o < 8; ++o)
            for (std::uint32_t room : {1u, 2u, 3u, 4u, 5u, 7u, 16u, 63u, 64u, 65u, 512u})
                for (std::uint32_t batch : {1u, 2u, room / 2 + 1, room})
                    for (int c = 0; c < 3; ++c) {
                        const Lanes cap = c == 0   ? Lanes{unlimited, unlimited, unlimited}
                                          : c == 1 ? Lanes{unlimited, 0, unlimited}
                                                   : Lanes{2, 1, 0};
                        pg::detail::LaneBook b;
                        // Reach the state through learn(): asked one of each lane, got one of a
                        // lane that holds work (late when overdue), none of an empty one.
                        Lanes got{};
                        std::array<bool, 3> late{};
                        for (std::size_t p = 0; p < 3; ++p) {
                            got[p] = (e >> p & 1) ? 0 : 1;
                            late[p] = (o >> p & 1) != 0;
                        }
                        b.learn({1, 1, 1}, got, late);
                        // Until every lane its caps let it ask is known empty.
                        const auto learnt = [&] {
                            for (std::size_t p = 0; p < 3; ++p)
                                if (cap[p] > 0 && !b.empty(p))
                                    return false;
                            return true;
                        };
                        int claims = 0;
                        while (!learnt()) {
                            const Lanes q = b.plan(batch, room, weights, cap);
                            const std::uint32_t total = q[0] + q[1] + q[2];
                            REQUIRE(total <= room);
                            REQUIRE(total > 0);
                            for (std::size_t p = 0; p < 3; ++p)
                                REQUIRE(q[p] <= cap[p]);
                            b.learn(q, {0, 0, 0}, {false, false, false});
                            ++claims;
                            REQUIRE(claims <= 3);
                        }
                        // A lane whose bucket is dry is not asked and keeps its state (the
                        // node's sleep waits for its token, not for a claim).
                        for (std::size_t p = 0; p < 3; ++p)
                            if (cap[p] == 0)
                                REQUIRE(b.empty(p) == ((e >> p & 1) != 0));
                        ++states;
                    }
    CHECK(states == 8 * 8 * 11 * 4 * 3);
}

TEST_CASE("idle after draining lanes past the anti-starvation budget (overdue lanes)",
          "[pg][idle_overdue]") {
    Db db("ax_t_idle_overdue");
    pg::Client c(db.conninfo);
    // The finding: 20,000 no-op tasks queued 6 s before two 4-worker nodes started.
    c.enqueue_many(tasks_of("noop", 20000));
    db.back_date(6s);
    Nodes ns(db, 2);
    ns.start();
    REQUIRE(wait_until([&] { return c.counts().live() == 0; }, 60s));
    std::this_thread::sleep_for(300ms); // the last round trips settle
    CHECK(idle_claim_rate(ns, "20k overdue normal tasks") <= max_idle_claims_per_s);

    // Again with every lane overdue at once.
    std::vector<pg::NewTask> mixed;
    for (int p = 0; p < 3; ++p) {
        auto ts = tasks_of("noop", 3000, static_cast<ax::Priority>(p));
        mixed.insert(mixed.end(), ts.begin(), ts.end());
    }
    c.enqueue_many(mixed);
    db.back_date(6s);
    REQUIRE(wait_until([&] { return c.counts().live() == 0; }, 60s));
    std::this_thread::sleep_for(300ms);
    CHECK(idle_claim_rate(ns, "9k overdue tasks in three lanes") <= max_idle_claims_per_s);
    // Every claim read back either returned a batch or nothing.
    for (auto& n : ns.nodes) {
        n->stop();
        const auto st = n->stats();
        CHECK(st.claims == st.batches + st.empty_claims);
        CHECK(st.empty_claims > 0);
    }
}

TEST_CASE("idle with tasks no node can take: tags nobody offers", "[pg][idle_tags]") {
    Db db("ax_t_idle_tags");
    pg::Client c(db.conninfo);
    std::vector<pg::NewTask> ts;
    for (int p = 0; p < 3; ++p) {
        const auto prio = static_cast<ax::Priority>(p);
        for (int i = 0; i < 1000; ++i)
            ts.push_back({.kind = "noop", .priority = prio});
        for (int i = 0; i < 300; ++i)
            ts.push_back({.kind = "noop", .priority = prio, .tags = {"gpu"}});
        for (int i = 0; i < 100; ++i) // nobody offers tpu: these stay
            ts.push_back({.kind = "noop", .priority = prio, .tags = {"tpu"}});
    }
    c.enqueue_many(ts);
    db.back_date(6s);
    Nodes ns(db, 2, {"noop"}, [n = 0](pg::NodeOptions& o) mutable {
        if (n++ == 0)
            o.tags = {"gpu"};
    });
    ns.start();
    REQUIRE(wait_until([&] { return c.counts().live() == 300; }, 60s));
    std::this_thread::sleep_for(300ms);
    CHECK(idle_claim_rate(ns, "drain beside 300 tpu-tagged tasks") <= max_idle_claims_per_s);
    CHECK(c.counts().live() == 300);
    CHECK(ns.ran.load() == 3900);
}

TEST_CASE("idle with tasks no node can take: kinds nobody handles, tasks not due yet",
          "[pg][idle_unknown_kind]") {
    Db db("ax_t_idle_kind");
    pg::Client c(db.conninfo);
    std::vector<pg::NewTask> ts;
    for (int p = 0; p < 3; ++p) {
        const auto prio = static_cast<ax::Priority>(p);
        for (int i = 0; i < 1500; ++i)
            ts.push_back({.kind = "noop", .priority = prio});
        for (int i = 0; i < 100; ++i) // no node handles this kind: these stay
            ts.push_back({.kind = "nobody", .priority = prio});
        for (int i = 0; i < 50; ++i) // due in a minute: these stay too
            ts.push_back({.kind = "noop", .priority = prio, .delay = 60s});
    }
    c.enqueue_many(ts);
    db.back_date(6s);
    Nodes ns(db, 2);
    ns.start();
    REQUIRE(wait_until([&] { return c.counts().live() == 450; }, 60s));
    std::this_thread::sleep_for(300ms);
    CHECK(idle_claim_rate(ns, "drain beside unknown kinds and delayed tasks") <=
          max_idle_claims_per_s);
    CHECK(c.counts().live() == 450);
    CHECK(ns.ran.load() == 4500);
}

TEST_CASE("idle after a server restart in the middle of a drain", "[pg][idle_restart]") {
    const char* ctl = std::getenv("AX_PG_CTL");
    if (ctl == nullptr) {
        WARN("AX_PG_CTL not set (run under scripts/pg-server.sh): restart test skipped");
        return;
    }
    Db db("ax_t_idle_restart");
    const std::size_t n = 20000;
    {
        pg::Client c(db.conninfo);
        std::vector<pg::NewTask> ts;
        for (int p = 0; p < 3; ++p) {
            auto part = tasks_of("noop", n / 4, static_cast<ax::Priority>(p));
            ts.insert(ts.end(), part.begin(), part.end());
        }
        auto rest = tasks_of("noop", n - ts.size());
        ts.insert(ts.end(), rest.begin(), rest.end());
        c.enqueue_many(ts);
    }
    db.back_date(6s);
    Nodes ns(db, 2);
    ns.start();
    REQUIRE(wait_until([&] { return ns.ran.load() >= n / 4; }, 60s));
    REQUIRE(std::system((std::string(ctl) + " restart >/dev/null").c_str()) == 0);
    std::printf("  server restarted with %llu of %zu tasks run\n",
                static_cast<unsigned long long>(ns.ran.load()), n);
    pg::Client c(db.conninfo);
    REQUIRE(wait_until(
        [&] {
            try {
                return c.counts().live() == 0;
            } catch (const pg::Error&) {
                return false;
            }
        },
        60s));
    std::this_thread::sleep_for(300ms);
    CHECK(idle_claim_rate(ns, "a restart mid-drain") <= max_idle_claims_per_s);
    CHECK(db.scalar("SELECT count(*) FROM ax.history WHERE state = 1") ==
          static_cast<std::int64_t>(n));
    std::uint64_t reconnects = 0;
    for (auto& node : ns.nodes)
        reconnects += node->stats().reconnects;
    CHECK(reconnects >= 2);
}

TEST_CASE("idle after a dead node's batches were reclaimed", "[pg][idle_reclaim]") {
    Db db("ax_t_idle_reclaim");
    pg::Client c(db.conninfo);
    // The victim claims every task and sleeps on them; it never finishes one.
    const std::size_t n = 40;
    c.enqueue_many(tasks_of("sleep", n / 2, ax::Priority::high, "600000"));
    c.enqueue_many(tasks_of("sleep", n / 2, ax::Priority::low, "600000"));
    db.back_date(6s);
    Proc victim(
        db.conninfo, "victim",
        {"--kinds", "sleep", "--workers", "4", "--lease-ms", "1000", "--maintain-ms", "200"});
    REQUIRE(wait_until(
        [&] {
            return db.scalar("SELECT count(*) FROM ax.tasks WHERE node_id IS NOT NULL") ==
                   static_cast<std::int64_t>(n);
        },
        60s));
    // The survivors start while the victim holds everything: idle from the start, then the
    // reclaim (their maintenance, at the victim's lease end) hands them the tasks.
    Nodes ns(db, 2, {"sleep"});
    ns.start();
    std::this_thread::sleep_for(300ms);
    victim.kill9();
    REQUIRE(wait_until([&] { return c.counts().live() == 0; }, 60s));
    std::uint64_t reclaimed = 0;
    for (auto& node : ns.nodes)
        reclaimed += node->stats().reclaimed_batches;
    CHECK(reclaimed >= 1);
    CHECK(ns.ran.load() == n);
    std::this_thread::sleep_for(300ms);
    CHECK(idle_claim_rate(ns, "a reclaim of a dead node's batches") <= max_idle_claims_per_s);
}

/// Sum of `actual rows=R loops=L` (R x L) over the plan lines that read ax.tasks.
std::int64_t tasks_rows_read(const std::vector<std::string>& plan) {
    std::int64_t sum = 0;
    for (const std::string& line : plan) {
        if (line.find(" on tasks") == std::string::npos)
            continue;
        const auto a = line.find("actual rows=");
        const auto l = line.find("loops=");
        if (a == std::string::npos || l == std::string::npos)
            continue;
        sum += std::stoll(line.substr(a + 12)) * std::stoll(line.substr(l + 6));
    }
    return sum;
}

// docs/bench/pg-flows.md, "Slow rounds": the node's own VACUUM ran while the queue was drained,
// left pg_class.reltuples 0 with the pages kept (TRUNCATE false), and until the next VACUUM the
// planner took ax.tasks for empty: the claim's update, a join with the claimed IDs, became a
// full scan of ax.tasks per claimed task, and rounds of 10,000 tasks took 5-10x as long. The
// claim must read about its batch of ax.tasks rows whatever the statistics say.
TEST_CASE("a claim reads about its batch of ax.tasks, also after a VACUUM found the table empty",
          "[pg][claim_plan]") {
    Db db("ax_claim_plan");
    auto s = db.sql();
    s.exec("INSERT INTO ax.tasks (kind) SELECT 'noop' FROM generate_series(1, 5000)");
    s.exec("DELETE FROM ax.tasks");
    s.exec("VACUUM (TRUNCATE false) ax.tasks"); // as the node's pass (Vacuum) runs it
    REQUIRE(db.scalar("SELECT reltuples::int8 FROM pg_class WHERE oid = 'ax.tasks'::regclass") ==
            0);
    s.exec("INSERT INTO ax.tasks (kind) SELECT 'noop' FROM generate_series(1, 5000)");
    // Prepared as the node prepares it (sql::prepare_node_statements): parameter types, plan mode.
    s.exec(("PREPARE claim (int8, text[], text[], int8, int8, int8, int8) AS " +
            std::string(pg::detail::claim_sql))
               .c_str());
    s.exec(
        ("PREPARE ack_result (int8, int8[], bytea[]) AS " + std::string(pg::detail::ack_result_sql))
            .c_str());
    for (const char* mode : {"force_generic_plan", "force_custom_plan"}) {
        INFO(mode);
        s.exec(("SET plan_cache_mode = " + std::string(mode)).c_str());
        s.exec("BEGIN");
        auto r = s.exec("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) EXECUTE claim (1, '{noop}', "
                        "'{}', 0, 16, 0, 30000)");
        std::vector<std::string> plan;
        std::string text;
        for (int i = 0; i < r.rows(); ++i) {
            plan.emplace_back(r.text(i, 0));
            text += plan.back() + "\n";
        }
        // The acknowledgement with results (ack_result_sql) of what was claimed.
        auto ids = s.exec("SELECT array_agg(id)::text, array_agg('\\x00'::bytea)::text FROM "
                          "ax.tasks WHERE node_id = 1");
        auto a = s.exec(("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) EXECUTE ack_result (1, '" +
                         std::string(ids.text(0, 0)) + "', '" + std::string(ids.text(0, 1)) + "')")
                            .c_str());
        std::vector<std::string> ack_plan;
        std::string ack_text;
        for (int i = 0; i < a.rows(); ++i) {
            ack_plan.emplace_back(a.text(i, 0));
            ack_text += ack_plan.back() + "\n";
        }
        s.exec("ROLLBACK");
        INFO(text);
        CHECK(text.find("Update on tasks") != std::string::npos);
        // 16 claimed: the lane's scan and the update's each read about 16 rows; a scan of the
        // table reads 5,000 (once, or once per claimed task).
        CHECK(tasks_rows_read(plan) <= 200);
        INFO(ack_text);
        CHECK(ack_text.find("Delete on tasks") != std::string::npos);
        CHECK(tasks_rows_read(ack_plan) <= 200);
    }
}

/// Rows this backend's open transaction has read so far from the ax schema, per table and
/// index: rows returned by sequential scans, index entries returned by index scans
/// (pg_stat_get_xact_*: the backend's counts not yet reported, nested statements of functions
/// and triggers included; read twice in one transaction, their difference is what ran between).
std::map<std::string, std::int64_t> ax_rows_read(pg::detail::Connection& s) {
    auto r = s.exec("SELECT c.relname, pg_stat_get_xact_tuples_returned(c.oid) "
                    "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "WHERE n.nspname = 'ax' AND c.relkind IN ('r', 'i')");
    std::map<std::string, std::int64_t> m;
    for (int i = 0; i < r.rows(); ++i)
        m[std::string(r.text(i, 0))] = r.int64(i, 1);
    return m;
}

/// What one statement read of the ax schema, in all; `detail` gets it per table and index.
std::int64_t rows_read_by(pg::detail::Connection& s, const std::string& statement,
                          std::string* detail = nullptr) {
    const auto before = ax_rows_read(s);
    s.exec(statement.c_str());
    if (detail != nullptr)
        *detail += "| ";
    std::int64_t sum = 0;
    for (const auto& [rel, n] : ax_rows_read(s)) {
        const auto b = before.find(rel);
        const std::int64_t d = n - (b == before.end() ? 0 : b->second);
        sum += d;
        if (detail != nullptr && d > 0)
            *detail += rel + "=" + std::to_string(d) + " ";
    }
    return sum;
}

/// '{1,2,3}' of the IDs the query returns (one int8 column).
std::string id_array(pg::detail::Connection& s, const std::string& query) {
    const std::string q =
        "SELECT coalesce(array_agg(id ORDER BY id), '{}')::text FROM (" + query + ") q(id)";
    return std::string(s.exec(q.c_str()).text(0, 0));
}

// The claim's plan after a drain ([claim_plan]) was one statement; the same statistics reach
// every statement a node or a flow runs. Each is checked here, in every plan mode, against the
// rows it may read: about the rows it works on, never a pass over a table per row (the claim's
// bug read 5,032 rows for a batch of 16). ax.tasks, ax.flow_tasks and ax.flow_waiting are each
// filled, emptied and vacuumed (reltuples 0, pages kept), with autovacuum off so nothing
// corrects the statistics while the test runs, then refilled well beyond the bounds below.
TEST_CASE("every node and flow statement reads about the rows it works on, also after a VACUUM "
          "found the tables empty",
          "[pg][plans_after_drain]") {
    Db db("ax_plans_after_drain");
    pg::Client c(db.conninfo);
    auto s = db.sql();
    for (const char* t : {"tasks", "flow_tasks", "flow_waiting", "flows", "batches", "idem_keys"})
        s.exec(("ALTER TABLE ax." + std::string(t) + " SET (autovacuum_enabled = false)").c_str());
    // A flow of 1 head and 5,000 dependents fills the flow tables and ax.tasks, then all goes.
    auto flow_of = [](std::string_view kind, std::vector<std::string>& names,
                      std::size_t dependents, bool with_sink) {
        std::vector<pg::FlowTask> f;
        names.clear();
        names.reserve(dependents + 2);
        names.emplace_back("head");
        for (std::size_t i = 0; i < dependents; ++i)
            names.emplace_back("d" + std::to_string(i));
        if (with_sink)
            names.emplace_back("sink");
        pg::NewTask t;
        t.kind = kind;
        t.priority = kind == "step"     ? ax::Priority::high
                     : kind == "parked" ? ax::Priority::low
                                        : ax::Priority::normal;
        f.push_back({names[0], t});
        for (std::size_t i = 1; i <= dependents; ++i)
            f.push_back({names[i], t, {names[0]}});
        if (with_sink) {
            std::vector<std::string_view> deps(names.begin() + 1, names.begin() + 1 + dependents);
            f.push_back({names.back(), t, deps});
        }
        return f;
    };
    std::vector<std::string> names;
    c.enqueue_flow("fill", flow_of("fill", names, 5000, false));
    s.exec("INSERT INTO ax.tasks (kind) SELECT 'noop' FROM generate_series(1, 5000)");
    // Tasks with idempotency keys: 10,000 of them, their keys in ax.idem_keys (100 bytes each:
    // ~200 pages, so that a plan reading the table whole costs the planner more than one by key,
    // as it does in a real queue's table; a small one is read whole cheaply by any plan).
    std::vector<std::string> keys;
    auto keyed = [&](const std::string& prefix) {
        keys.clear();
        keys.reserve(10000);
        auto ts = tasks_of("keyed", 10000, ax::Priority::low);
        for (std::size_t i = 0; i < ts.size(); ++i)
            ts[i].idempotency_key =
                keys.emplace_back(prefix + std::string(90, 'k') + std::to_string(i));
        c.enqueue_many(ts);
    };
    keyed("fill-");
    for (const char* t : {"flow_waiting", "flow_tasks", "flows", "tasks", "idem_keys"})
        s.exec(("DELETE FROM ax." + std::string(t)).c_str());
    for (const char* t : {"flow_waiting", "flow_tasks", "flows", "tasks", "idem_keys"}) {
        s.exec(("VACUUM (TRUNCATE false) ax." + std::string(t)).c_str());
        INFO(t);
        REQUIRE(db.scalar("SELECT reltuples::int8 FROM pg_class WHERE oid = 'ax." + std::string(t) +
                          "'::regclass") == 0);
    }
    // Refilled: 5,000 pending tasks (normal lane); a flow whose 3,000 dependents wait on a head
    // (low lane); a flow head -> 300 -> sink (high lane) whose steps the test runs; 10,000 keyed
    // tasks (low lane, after the head).
    s.exec("INSERT INTO ax.tasks (kind) SELECT 'noop' FROM generate_series(1, 5000)");
    std::vector<std::string> bg_names, names2;
    c.enqueue_flow("background", flow_of("parked", bg_names, 3000, false));
    c.enqueue_flow("steps", flow_of("step", names2, 300, true));
    keyed("key-");
    s.exec(("PREPARE claim (int8, text[], text[], int8, int8, int8, int8) AS " +
            std::string(pg::detail::claim_sql))
               .c_str());
    s.exec(("PREPARE ack (int8, int8[]) AS " + std::string(pg::detail::ack_sql)).c_str());
    s.exec(
        ("PREPARE ack_result (int8, int8[], bytea[]) AS " + std::string(pg::detail::ack_result_sql))
            .c_str());
    const std::string node = std::to_string(
        s.exec("INSERT INTO ax.nodes (name, kinds, tags, lease_until) VALUES ('plans', "
               "'{noop,step,parked,keyed}', '{}', now() + interval '1 hour') RETURNING id")
            .int64(0, 0));
    // n tasks of `kind` from the normal lane (the flow's steps are in the high lane: a lane's
    // scan walks past the tasks of other kinds, which is the kind filter's cost, not a plan's).
    auto claim = [&](const std::string& kind, int n) {
        const std::string q = std::to_string(n);
        const std::string lanes = kind == "step"                        ? q + ", 0, 0"
                                  : kind == "parked" || kind == "keyed" ? "0, 0, " + q
                                                                        : "0, " + q + ", 0";
        return "EXECUTE claim (" + node + ", '{" + kind + "}', '{}', " + lanes + ", 30000)";
    };
    auto claimed = [&] { return id_array(s, "SELECT id FROM ax.tasks WHERE node_id = " + node); };
    auto batch = [&] {
        return std::to_string(
            s.exec(("SELECT max(id) FROM ax.batches WHERE node_id = " + node).c_str()).int64(0, 0));
    };

    std::string why; // each statement's reads per table and index, for a failure's message
    const std::int64_t all_tasks = db.scalar("SELECT count(*) FROM ax.tasks");
    const std::string last_noop =
        std::to_string(db.scalar("SELECT max(id) FROM ax.tasks WHERE kind = 'noop'"));
    // The bounds: the node's statements run with generic plans (prepare_node_statements), which
    // must reach every row by key. A custom plan (a client's first calls of a function) sees the
    // IDs and, taking a table for empty, may choose one pass over it for a few hundred IDs: a
    // pass per statement is allowed there, never one per row.
    for (const char* mode : {"force_generic_plan", "force_custom_plan"}) {
        INFO(mode);
        const bool generic = std::string(mode) == "force_generic_plan";
        s.exec(("SET plan_cache_mode = " + std::string(mode)).c_str());
        // Each ending of a claimed batch of 16, in a transaction of its own (rolled back, so
        // every one starts from the same 5,000 pending tasks).
        struct Ending {
            const char* what;
            std::function<std::string(const std::string& ids)> statement;
            std::int64_t bound;
        };
        const std::vector<Ending> endings{
            {"ack",
             [&](const std::string& ids) { return "EXECUTE ack (" + node + ", '" + ids + "')"; },
             200},
            {"ack with results",
             [&](const std::string& ids) {
                 return "EXECUTE ack_result (" + node + ", '" + ids +
                        "', array_fill('\\x00'::bytea, ARRAY[16]))";
             },
             200},
            {"fail, retried",
             [&](const std::string& ids) {
                 return "SELECT ax.fail_tasks(" + node + ", '" + ids +
                        "', array_fill('boom'::text, ARRAY[16]), array_fill(false, ARRAY[16]), "
                        "array_fill(10::int8, ARRAY[16]))";
             },
             200},
            {"fail, dead-lettered",
             [&](const std::string& ids) {
                 return "SELECT ax.fail_tasks(" + node + ", '" + ids +
                        "', array_fill('boom'::text, ARRAY[16]), array_fill(true, ARRAY[16]), "
                        "array_fill(10::int8, ARRAY[16]))";
             },
             200},
            {"snooze",
             [&](const std::string& ids) {
                 return "SELECT ax.snooze_tasks(" + node + ", '" + ids +
                        "', array_fill(1000::int8, ARRAY[16]), 10)";
             },
             200},
            {"release",
             [&](const std::string& ids) {
                 return "SELECT ax.release(" + node + ", '" + ids + "')";
             },
             200},
            {"renew",
             [&](const std::string&) {
                 return "SELECT ax.renew(" + node + ", ARRAY[" + batch() + "]::int8[], 30000)";
             },
             200},
            {"close",
             [&](const std::string&) {
                 return "SELECT ax.close_batch(" + node + ", " + batch() +
                        ", size, checksum) FROM ax.batches WHERE id = " + batch();
             },
             200},
            {"cancel a running task",
             [&](const std::string& ids) {
                 return "SELECT ax.cancel(" + ids.substr(1, ids.find(',') - 1) + ")";
             },
             200},
            {"cancel a pending task",
             [&](const std::string&) { return "SELECT ax.cancel(" + last_noop + ")"; }, 200},
            // A dead node's batch: the reclaim finds its tasks by batch (no index on batch_id:
            // reclaims are rare), one pass over ax.tasks, not one per task.
            {"reclaim",
             [&](const std::string&) {
                 s.exec("UPDATE ax.batches SET lease_until = now() - interval '1 second'");
                 return std::string("SELECT ax.maintain(3600000, 100)");
             },
             all_tasks + all_tasks / 10 + 200},
        };
        for (const Ending& e : endings) {
            INFO(e.what);
            s.exec("BEGIN");
            why.clear();
            const std::int64_t claim_reads = rows_read_by(s, claim("noop", 16), &why);
            const std::string ids = claimed();
            REQUIRE(std::count(ids.begin(), ids.end(), ',') == 15);
            CHECK(claim_reads <= 200);
            const std::int64_t reads = rows_read_by(s, e.statement(ids), &why);
            s.exec("ROLLBACK");
            CAPTURE(claim_reads, reads, why);
            CHECK(reads <= e.bound);
        }

        // Keyed tasks: the acknowledgements also finish their keys in ax.idem_keys.
        for (const bool with_results : {false, true}) {
            INFO((with_results ? "ack with results, keyed" : "ack, keyed"));
            s.exec("BEGIN");
            why.clear();
            CHECK(rows_read_by(s, claim("keyed", 16), &why) <= 200);
            const std::string ids = claimed();
            REQUIRE(std::count(ids.begin(), ids.end(), ',') == 15);
            const std::int64_t reads =
                rows_read_by(s,
                             with_results ? "EXECUTE ack_result (" + node + ", '" + ids +
                                                "', array_fill('\\x00'::bytea, ARRAY[16]))"
                                          : "EXECUTE ack (" + node + ", '" + ids + "')",
                             &why);
            CHECK(s.exec(("SELECT count(*) FROM ax.idem_keys WHERE finished_at IS NOT NULL AND "
                          "task_id = ANY ('" +
                          ids + "')")
                             .c_str())
                      .int64(0, 0) == 16);
            s.exec("ROLLBACK");
            CAPTURE(reads, why);
            CHECK(reads <= (generic ? 200 : 200 + 10000)); // custom: + idem_keys once
        }

        // A flow: the head's acknowledgement releases its 300 dependents (one flow_settle, the
        // other flow's 3,000 waiting beside them), their first 16 count the sink down.
        {
            s.exec("BEGIN");
            why.clear();
            // (In the second mode, the first's rolled-back releases left 300 dead entries in the
            // lane's index, which this scan steps over once.)
            CHECK(rows_read_by(s, claim("step", 16), &why) <= (generic ? 200 : 500));
            const std::string head = claimed();
            REQUIRE(head.find(',') == std::string::npos);
            const std::int64_t settle =
                rows_read_by(s, "EXECUTE ack (" + node + ", '" + head + "')", &why);
            REQUIRE(s.exec("SELECT count(*) FROM ax.flow_waiting").int64(0, 0) == 3001);
            CHECK(s.exec("SELECT count(*) FROM ax.tasks WHERE kind = 'step'").int64(0, 0) == 300);
            const std::int64_t claim16 = rows_read_by(s, claim("step", 16), &why);
            const std::string mids = id_array(s, "SELECT id FROM ax.tasks WHERE node_id = " + node +
                                                     " AND kind = 'step'");
            REQUIRE(std::count(mids.begin(), mids.end(), ',') == 15);
            const std::int64_t count_down =
                rows_read_by(s, "EXECUTE ack (" + node + ", '" + mids + "')", &why);
            CHECK(s.exec("SELECT deps_left FROM ax.flow_waiting WHERE kind = 'step'").int64(0, 0) ==
                  284);
            s.exec("ROLLBACK");
            CAPTURE(settle, claim16, count_down, why);
            // 300 released: each read a few times (flow_tasks, flow_waiting, their keys).
            CHECK(settle <= (generic ? 3000 : 3000 + 3 * 3301));
            CHECK(claim16 <= 200);
            CHECK(count_down <= 300);
        }

        // The background flow's head dead-lettered: its 3,000 dependents are cancelled (the
        // flow's cancel branch: a reason each, a history row each).
        {
            s.exec("BEGIN");
            why.clear();
            CHECK(rows_read_by(s, claim("parked", 1), &why) <= 200);
            const std::string head = claimed();
            REQUIRE(head.find(',') == std::string::npos);
            const std::int64_t cancel_all = rows_read_by(
                s, "SELECT ax.fail_tasks(" + node + ", '" + head + "', '{boom}', '{true}', '{10}')",
                &why);
            CHECK(s.exec("SELECT count(*) FROM ax.flow_tasks WHERE reason LIKE 'dependency%'")
                      .int64(0, 0) == 3000);
            CHECK(s.exec("SELECT count(*) FROM ax.flow_waiting").int64(0, 0) == 301);
            s.exec("ROLLBACK");
            CAPTURE(cancel_all, why);
            CHECK(cancel_all <= 3000 * 10);
        }
    }

    // Grouped work waiting (committed: a rolled-back insert would leave dead index entries that
    // the next scan pays for once): the claim goes through ax.claim_grouped, a sliced group-wide
    // limit and a per-key limit over 100 keys.
    s.exec("SELECT ax.set_limit('g', 1000, false, NULL, NULL)");
    s.exec("SELECT ax.set_limit('k', 2, true, NULL, NULL)");
    s.exec("INSERT INTO ax.tasks (kind, grp) SELECT 'noop', 'g' FROM generate_series(1, 2000)");
    s.exec("INSERT INTO ax.tasks (kind, grp, grp_key) SELECT 'noop', 'k', 'key' || (i % 100) "
           "FROM generate_series(1, 1000) i");
    for (const char* mode : {"force_generic_plan", "force_custom_plan"}) {
        INFO(mode);
        const bool generic = std::string(mode) == "force_generic_plan";
        s.exec(("SET plan_cache_mode = " + std::string(mode)).c_str());
        {
            s.exec("BEGIN");
            why.clear();
            const std::int64_t grouped_claim = rows_read_by(s, claim("noop", 64), &why);
            const std::string ids = claimed();
            REQUIRE(std::count(ids.begin(), ids.end(), ',') == 63);
            const std::int64_t grouped_ack =
                rows_read_by(s, "EXECUTE ack (" + node + ", '" + ids + "')", &why);
            const std::int64_t again = rows_read_by(s, claim("noop", 64), &why);
            s.exec("ROLLBACK");
            CAPTURE(grouped_claim, grouped_ack, again, why);
            // The keys' walk (101 pools), the slices' counts and the 64 rows.
            CHECK(grouped_claim <= 1500);
            CHECK(grouped_ack <= (generic ? 300 : 300 + 3303)); // + flow_tasks once
            CHECK(again <= 1500);
        }
    }
    // Nothing above corrected the statistics: the test ran against the drained state.
    for (const char* t : {"flow_waiting", "flow_tasks", "tasks"}) {
        INFO(t);
        CHECK(db.scalar("SELECT reltuples::int8 FROM pg_class WHERE oid = 'ax." + std::string(t) +
                        "'::regclass") == 0);
    }
}

int main(int argc, char** argv) {
    const char* conninfo = std::getenv("AX_PG_CONNINFO");
    bool logic_only = false;
    for (int i = 1; i < argc; ++i)
        logic_only = logic_only || std::string(argv[i]) == "[idle_logic]";
    if ((conninfo == nullptr || *conninfo == '\0') && !logic_only) {
        std::printf("SKIPPED: AX_PG_CONNINFO is not set, so no PostgreSQL server to test against "
                    "(run under scripts/pg-server.sh, as scripts/test.sh's pg stage does)\n");
        return 77;
    }
    g_base = conninfo != nullptr ? conninfo : "";
    std::string self = argv[0];
    g_node_exe = self.substr(0, self.rfind('/') + 1) + "pg_test_node";
    return Catch::Session().run(argc, argv);
}
