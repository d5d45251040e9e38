// Operators' tools of ax::pg against a real PostgreSQL (issue 28): pause and resume by kind and
// by lane across several node processes, and listing tasks with filters and a keyset cursor.
// Run under scripts/pg-server.sh (it exports AX_PG_CONNINFO); without it every case is skipped
// (exit 77). Each test case works in a database of its own.

#define CATCH_CONFIG_RUNNER
#include <atomic>
#include <ax/pg/pg.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <set>
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
std::string g_tool_exe; // ax-pg

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
        s.exec(
            "CREATE TABLE stops (task_id bigint NOT NULL, node text NOT NULL, saw_stop boolean)");
    }
    [[nodiscard]] pg::detail::Connection sql() const {
        return pg::detail::Connection::open(conninfo);
    }
    std::int64_t scalar(const std::string& q) const {
        auto s = sql();
        return s.exec(q.c_str()).int64(0, 0);
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

/// A pg_test_node child process (killed at scope exit if still running).
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
    int stop() {
        if (pid <= 0)
            return -1;
        kill(pid, SIGTERM);
        int st = 0;
        waitpid(pid, &st, 0);
        pid = -1;
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
    ~Proc() {
        if (pid > 0) {
            kill(pid, SIGKILL);
            int st = 0;
            waitpid(pid, &st, 0);
        }
    }
};

/// Runs ax-pg with `args` against `db`; its exit status, and its output in `out`.
int run_tool(const Db& db, const std::string& args, std::string& out) {
    const std::string cmd = g_tool_exe + " --db '" + db.conninfo + "' " + args + " 2>&1";
    out.clear();
    FILE* p = popen(cmd.c_str(), "r");
    REQUIRE(p != nullptr);
    char buf[512];
    while (std::fgets(buf, sizeof buf, p) != nullptr)
        out += buf;
    const int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

std::vector<pg::NewTask> tasks_of(std::string_view kind, std::size_t n,
                                  ax::Priority lane = ax::Priority::normal) {
    std::vector<pg::NewTask> v(n);
    for (auto& t : v) {
        t.kind = kind;
        t.priority = lane;
    }
    return v;
}

std::vector<std::int64_t> ids_of(const std::vector<pg::Enqueued>& e) {
    std::vector<std::int64_t> ids;
    for (auto& x : e)
        ids.push_back(x.id);
    return ids;
}

/// How many of `ids` some node started (the record handler's runs table).
std::int64_t started(const Db& db, const std::vector<std::int64_t>& ids) {
    std::string list;
    for (auto id : ids)
        list += (list.empty() ? "" : ",") + std::to_string(id);
    return db.scalar("SELECT count(DISTINCT task_id) FROM runs WHERE task_id IN (" + list + ")");
}

/// Two node processes handling record, gpu and sleep; `lease_ms` sets how often they renew
/// (lease / 3), and so how often they re-read the paused set without a notification.
std::vector<std::unique_ptr<Proc>> two_nodes(const Db& db, const std::string& lease_ms) {
    std::vector<std::unique_ptr<Proc>> v;
    for (int i = 0; i < 2; ++i)
        v.push_back(std::make_unique<Proc>(
            db.conninfo, "n" + std::to_string(i),
            std::vector<std::string>{"--kinds", "record,gpu,sleep", "--workers", "2", "--lease-ms",
                                     lease_ms, "--maintain-ms", lease_ms}));
    return v;
}

/// Waits until `n` nodes are registered and have had time to LISTEN.
void wait_nodes(pg::Client& c, std::size_t n) {
    REQUIRE(wait_until([&] { return c.status().nodes.size() == n; }, 30s));
    std::this_thread::sleep_for(300ms);
}

} // namespace

// ---------------------------------------------------------------- pause and resume

TEST_CASE("a paused kind is claimed by no node while other kinds run; the notification, not the "
          "renewal, stops them; running tasks finish; resume runs the rest",
          "[pg][pause]") {
    Db db("ax_t_pause_kind");
    pg::Client c(db.conninfo);
    // A 10-minute lease: the nodes renew (and re-read the paused set) every 200 s, so only the
    // notification can explain a stop within the test.
    auto nodes = two_nodes(db, "600000");
    wait_nodes(c, 2);

    // A task running when its kind is paused finishes.
    const std::int64_t slow = c.enqueue({.kind = "sleep", .payload = "1500"}).id;
    REQUIRE(wait_until([&] { return c.query(slow)->state == pg::TaskState::claimed; }, 30s));
    CHECK(c.pause(pg::PauseTarget::kind("sleep")));
    CHECK(c.pause(pg::PauseTarget::kind("record")));
    CHECK_FALSE(c.pause(pg::PauseTarget::kind("record"))); // already paused
    const auto t_pause = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(1s); // the promise: every node stops within a second

    const auto paused_ids = ids_of(c.enqueue_many(tasks_of("record", 20)));
    const auto other_ids = ids_of(c.enqueue_many(tasks_of("gpu", 20)));
    REQUIRE(wait_until([&] { return started(db, other_ids) == 20; }, 30s));
    // Generous window: 2 s more in which the paused kind's tasks sit there.
    std::this_thread::sleep_for(2s);
    CHECK(started(db, paused_ids) == 0);
    CHECK(c.query(paused_ids.front())->state == pg::TaskState::pending);
    REQUIRE(wait_until([&] { return c.query(slow)->state == pg::TaskState::succeeded; }, 30s));
    CHECK(std::chrono::steady_clock::now() - t_pause < 200s); // well before any renewal

    // Status shows it; so does the tool.
    const pg::Status s = c.status();
    REQUIRE(s.paused.size() == 2);
    CHECK(s.paused[0].target == pg::PauseTarget::kind("record"));
    CHECK(s.paused[1].target == pg::PauseTarget::kind("sleep"));
    std::string out;
    CHECK(run_tool(db, "status", out) == 0);
    CHECK(out.find("kind record") != std::string::npos);

    CHECK(c.resume(pg::PauseTarget::kind("record")));
    CHECK_FALSE(c.resume(pg::PauseTarget::kind("record")));
    REQUIRE(wait_until([&] { return started(db, paused_ids) == 20; }, 30s));
    CHECK(c.pauses().size() == 1);
    for (auto& n : nodes)
        CHECK(n->stop() == 0);
}

TEST_CASE("a paused lane is claimed by no node while the other lanes run; resume runs it",
          "[pg][pause]") {
    Db db("ax_t_pause_lane");
    pg::Client c(db.conninfo);
    auto nodes = two_nodes(db, "600000");
    wait_nodes(c, 2);
    std::string out;
    REQUIRE(run_tool(db, "pause lane low", out) == 0);
    CHECK(out.find("lane low: paused") != std::string::npos);
    std::this_thread::sleep_for(1s);
    const auto low = ids_of(c.enqueue_many(tasks_of("record", 15, ax::Priority::low)));
    const auto high = ids_of(c.enqueue_many(tasks_of("record", 15, ax::Priority::high)));
    const auto normal = ids_of(c.enqueue_many(tasks_of("record", 15, ax::Priority::normal)));
    REQUIRE(wait_until([&] { return started(db, high) == 15 && started(db, normal) == 15; }, 30s));
    std::this_thread::sleep_for(2s);
    CHECK(started(db, low) == 0);
    CHECK(c.counts().pending[2] == 15);
    REQUIRE(run_tool(db, "resume lane low", out) == 0);
    CHECK(out.find("lane low: resumed") != std::string::npos);
    REQUIRE(wait_until([&] { return started(db, low) == 15; }, 30s));
    for (auto& n : nodes)
        CHECK(n->stop() == 0);
}

TEST_CASE("a pause survives node restarts, and a missed notification is made up for at the "
          "lease renewal",
          "[pg][pause]") {
    Db db("ax_t_pause_restart");
    pg::Client c(db.conninfo);
    c.pause(pg::PauseTarget::kind("record"));
    std::vector<std::int64_t> paused_ids;
    {
        // A node started after the pause reads it at start.
        Proc n(db.conninfo, "early", {"--kinds", "record,gpu", "--lease-ms", "600000"});
        wait_nodes(c, 1);
        paused_ids = ids_of(c.enqueue_many(tasks_of("record", 10)));
        const auto other = ids_of(c.enqueue_many(tasks_of("gpu", 10)));
        REQUIRE(wait_until([&] { return started(db, other) == 10; }, 30s));
        std::this_thread::sleep_for(1s);
        CHECK(started(db, paused_ids) == 0);
        CHECK(n.stop() == 0);
    }
    REQUIRE(wait_until([&] { return c.status().nodes.empty(); }, 30s));
    {
        // A 1.5 s lease: renewal (and the re-read) every 500 ms.
        Proc n(db.conninfo, "late", {"--kinds", "record,gpu", "--lease-ms", "1500"});
        wait_nodes(c, 1);
        std::this_thread::sleep_for(1s);
        CHECK(started(db, paused_ids) == 0);
        // A change nobody is told of (a raw write: no NOTIFY), as if the notification had been
        // lost with a connection: the renewal's re-read picks it up.
        db.sql().exec("DELETE FROM ax.pauses");
        REQUIRE(wait_until([&] { return started(db, paused_ids) == 10; }, 30s));
        db.sql().exec("INSERT INTO ax.pauses (scope, name) VALUES ('kind', 'gpu')");
        std::this_thread::sleep_for(1500ms); // three renewals
        const auto gpu = ids_of(c.enqueue_many(tasks_of("gpu", 5)));
        std::this_thread::sleep_for(2s);
        CHECK(started(db, gpu) == 0);
        CHECK(n.stop() == 0);
    }
}

TEST_CASE("pause and resume refuse bad targets with a clear error", "[pg][pause]") {
    Db db("ax_t_pause_bad");
    pg::Client c(db.conninfo);
    const auto message = [](const std::function<void()>& f) {
        try {
            f();
        } catch (const std::invalid_argument& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    CHECK(message([] {
              (void)pg::PauseTarget::parse("lane", "urgent");
          }).find("lane 'urgent': must be high, normal or low") != std::string::npos);
    CHECK(message([] {
              (void)pg::PauseTarget::parse("queue", "x");
          }).find("'queue': must be kind or lane") != std::string::npos);
    CHECK(message([] { (void)pg::PauseTarget::kind(""); }).find("must be 1..200 bytes") !=
          std::string::npos);
    CHECK(message([] {
              (void)pg::PauseTarget::kind(std::string(201, 'k'));
          }).find("must be 1..200 bytes") != std::string::npos);
    CHECK(message([] {
              (void)pg::PauseTarget::lane(static_cast<ax::Priority>(7));
          }).find("lane 7: must be high, normal or low") != std::string::npos);
    // The SQL functions check too (other languages call them), SQLSTATE 22023.
    auto s = db.sql();
    for (const char* q : {"SELECT ax.pause('lane', 'urgent')", "SELECT ax.pause('kind', '')",
                          "SELECT ax.resume('queue', 'x')", "SELECT ax.pause('kind', NULL)"}) {
        pg::detail::Result r(PQexec(s.get(), q));
        CHECK(r.status() == PGRES_FATAL_ERROR);
        const char* state = PQresultErrorField(r.get(), PG_DIAG_SQLSTATE);
        CHECK(std::string(state != nullptr ? state : "") == "22023");
    }
    CHECK(c.pauses().empty());
    std::string out;
    CHECK(run_tool(db, "pause lane urgent", out) == 2);
    CHECK(out.find("must be high, normal or low") != std::string::npos);
    CHECK(run_tool(db, "pause kind", out) == 2);
    CHECK(run_tool(db, "pause", out) == 0);
    CHECK(out.find("paused: nothing") != std::string::npos);
}

// ---------------------------------------------------------------- listing

namespace {

pg::NodeOptions quick_node(const Db& db, const std::string& name) {
    pg::NodeOptions o;
    o.conninfo = db.conninfo;
    o.name = name;
    o.scheduler.min_workers = 2;
    o.scheduler.max_workers = 2;
    o.poll_interval = 100ms;
    o.maintenance_interval = 200ms;
    o.reconnect_base = 20ms;
    o.stop_grace = 5000ms;
    return o;
}

std::set<std::int64_t> listed(pg::Client& c, pg::TaskFilter f) {
    f.limit = pg::max_list_limit;
    const pg::TaskPage page = c.list(f);
    CHECK(page.next == 0);
    std::set<std::int64_t> ids;
    for (const auto& t : page.tasks)
        CHECK(ids.insert(t.id).second);
    return ids;
}

std::set<std::int64_t> set_of(std::initializer_list<std::vector<std::int64_t>> parts) {
    std::set<std::int64_t> s;
    for (const auto& p : parts)
        s.insert(p.begin(), p.end());
    return s;
}

} // namespace

TEST_CASE("list: every filter, over live tasks, the history and the dead letters", "[pg][list]") {
    Db db("ax_t_list");
    pg::Client c(db.conninfo);
    using P = ax::Priority;
    // Group 1 (before t_mid): three alpha that will succeed (one keyed), two high beta needing a
    // tag no node offers (pending), a delayed low alpha (scheduled).
    const auto alpha = ids_of(c.enqueue_many(
        std::vector<pg::NewTask>{{.kind = "alpha", .payload = "a0", .idempotency_key = "k-alpha"},
                                 {.kind = "alpha", .payload = "a1"},
                                 {.kind = "alpha", .payload = "a2"}}));
    const auto beta = ids_of(c.enqueue_many(
        std::vector<pg::NewTask>{{.kind = "beta", .priority = P::high, .tags = {"gpu"}},
                                 {.kind = "beta", .priority = P::high, .tags = {"gpu", "ssd"}}}));
    const std::int64_t sched =
        c.enqueue({.kind = "alpha", .priority = P::low, .delay = std::chrono::hours(1)}).id;
    std::this_thread::sleep_for(50ms);
    const auto t_mid = std::chrono::system_clock::now();
    std::this_thread::sleep_for(50ms);
    // Group 2: one held running, two that fail for good, two nobody handles, one cancelled.
    const std::int64_t hold = c.enqueue({.kind = "hold"}).id;
    const auto bad = ids_of(c.enqueue_many(
        std::vector<pg::NewTask>{{.kind = "bad", .payload = "payload of bad 0"}, {.kind = "bad"}}));
    const auto gamma = ids_of(c.enqueue_many(tasks_of("gamma", 2)));
    const std::int64_t cancelled = c.enqueue({.kind = "gamma"}).id;
    REQUIRE(c.cancel(cancelled) == pg::CancelResult::cancelled);

    std::atomic<bool> release{false};
    pg::Node node(quick_node(db, "lister"));
    node.handle("alpha", [](pg::Job&) {});
    node.handle("bad", [](pg::Job&) { throw ax::PermanentError("boom"); });
    node.handle("hold", [&](pg::Job&) {
        while (!release.load())
            std::this_thread::sleep_for(5ms);
    });
    node.start();
    REQUIRE(wait_until(
        [&] {
            const auto k = c.counts();
            return k.succeeded == 3 && k.dead_letters == 2 && k.claimed[1] == 1;
        },
        30s));
    REQUIRE(c.discard_dead_letter(bad[1]));

    using S = pg::TaskState;
    const auto by_state = [&](S s) { return listed(c, {.states = {s}}); };
    CHECK(by_state(S::succeeded) == set_of({alpha}));
    CHECK(by_state(S::pending) == set_of({beta, gamma}));
    CHECK(by_state(S::scheduled) == set_of({{sched}}));
    CHECK(by_state(S::claimed) == set_of({{hold}}));
    CHECK(by_state(S::cancelled) == set_of({{cancelled}}));
    CHECK(by_state(S::dead_lettered) == set_of({{bad[0]}}));
    CHECK(by_state(S::discarded) == set_of({{bad[1]}}));
    CHECK(listed(c, {.states = {S::pending, S::discarded}}) == set_of({beta, gamma, {bad[1]}}));
    const auto all = set_of({alpha, beta, {sched, hold}, bad, gamma, {cancelled}});
    CHECK(listed(c, {}) == all);
    CHECK(listed(c, {.kind = "alpha"}) == set_of({alpha, {sched}}));
    CHECK(listed(c, {.states = {S::succeeded}, .kind = "beta"}).empty());
    CHECK(listed(c, {.tag = "gpu"}) == set_of({beta}));
    CHECK(listed(c, {.tag = "ssd"}) == set_of({{beta[1]}}));
    CHECK(listed(c, {.lane = P::high}) == set_of({beta}));
    CHECK(listed(c, {.lane = P::low}) == set_of({{sched}}));
    CHECK(listed(c, {.idempotency_key = "k-alpha"}) == set_of({{alpha[0]}}));
    CHECK(listed(c, {.idempotency_key = "no-such-key"}).empty());
    CHECK(listed(c, {.enqueued_before = t_mid}) == set_of({alpha, beta, {sched}}));
    CHECK(listed(c, {.enqueued_after = t_mid}) == set_of({{hold}, bad, gamma, {cancelled}}));
    CHECK(listed(c, {.kind = "gamma", .enqueued_after = t_mid}) == set_of({gamma, {cancelled}}));

    // Order and fields.
    const pg::TaskPage newest = c.list({.newest_first = true, .limit = 3});
    REQUIRE(newest.tasks.size() == 3);
    CHECK(newest.tasks[0].id == cancelled);
    CHECK(newest.tasks[0].id > newest.tasks[1].id);
    CHECK(newest.next == newest.tasks[2].id);
    const pg::TaskPage first = c.list({.limit = 1});
    REQUIRE(first.tasks.size() == 1);
    const pg::TaskInfo& a0 = first.tasks[0];
    CHECK(a0.id == alpha[0]);
    CHECK(a0.state == S::succeeded);
    CHECK(a0.kind == "alpha");
    CHECK(a0.idempotency_key == "k-alpha");
    CHECK(a0.attempts == 1);
    CHECK(a0.node_id == node.stats().node_id);
    CHECK(a0.payload_bytes == -1); // the history keeps no payload
    CHECK(a0.at >= a0.enqueued_at);
    const pg::TaskInfo b1 = c.list({.tag = "ssd"}).tasks.at(0);
    CHECK(b1.tags == std::vector<std::string>{"gpu", "ssd"});
    CHECK(b1.priority == P::high);
    CHECK(b1.payload_bytes == 0);
    const pg::TaskInfo s0 = c.list({.states = {S::scheduled}}).tasks.at(0);
    CHECK(s0.at > std::chrono::system_clock::now() + std::chrono::minutes(59));
    const pg::TaskInfo d0 = c.list({.states = {S::dead_lettered}}).tasks.at(0);
    CHECK(d0.errors == 1);
    CHECK(d0.payload_bytes == 16);

    // Everything known of one task.
    const auto d = c.task_details(bad[0], 7);
    REQUIRE(d.has_value());
    CHECK(d->info.state == S::dead_lettered);
    CHECK(d->reason == "permanent error");
    REQUIRE(d->errors.size() == 1);
    CHECK(d->errors[0].find("boom") != std::string::npos);
    CHECK(d->payload_preview == "payload");
    CHECK(d->max_attempts == 4);
    const auto h = c.task_details(hold);
    REQUIRE(h.has_value());
    CHECK(h->info.state == S::claimed);
    CHECK(h->batch_id != 0);
    CHECK(h->info.node_id == node.stats().node_id);
    CHECK_FALSE(c.task_details(999999).has_value());

    std::string out;
    CHECK(run_tool(db, "tasks list --state dead,discarded", out) == 0);
    CHECK(out.find("#" + std::to_string(bad[0]) + " dead_lettered") != std::string::npos);
    CHECK(out.find("#" + std::to_string(bad[1]) + " discarded") != std::string::npos);
    CHECK(out.find("2 task(s); no more") != std::string::npos);
    CHECK(run_tool(db, "tasks list --kind alpha --limit 2", out) == 0);
    CHECK(out.find("next page: --after " + std::to_string(alpha[1])) != std::string::npos);
    CHECK(run_tool(db, "tasks show " + std::to_string(bad[0]), out) == 0);
    CHECK(out.find("permanent error") != std::string::npos);
    CHECK(out.find("16 bytes: payload of bad 0") != std::string::npos);
    CHECK(run_tool(db, "tasks list --kind alpha --explain", out) == 0);
    CHECK(out.find("Execution Time") != std::string::npos);

    release.store(true);
    node.stop();
}

TEST_CASE("list: pages by cursor see every task once while tasks are enqueued and finish "
          "between pages",
          "[pg][list]") {
    Db db("ax_t_list_pages");
    pg::Client c(db.conninfo);
    const auto initial = ids_of(c.enqueue_many(tasks_of("p", 300)));
    for (const bool newest_first : {false, true}) {
        INFO("newest_first " << newest_first);
        std::set<std::int64_t> seen, added;
        std::size_t dup = 0, pages = 0;
        std::int64_t after = 0;
        std::size_t k = 0;
        do {
            const pg::TaskPage page =
                c.list({.after = after, .newest_first = newest_first, .limit = 37});
            ++pages;
            for (const auto& t : page.tasks)
                dup += seen.insert(t.id).second ? 0 : 1;
            after = page.next;
            if (after == 0)
                break;
            // Between pages: new tasks, and tasks moving to the history (same ID), some already
            // listed, some not yet.
            for (const auto& e : c.enqueue_many(tasks_of("p", 5)))
                added.insert(e.id);
            for (int i = 0; i < 2; ++i, ++k) {
                const std::int64_t id = initial[(k * 37) % initial.size()];
                c.cancel(id);
            }
        } while (true);
        CHECK(dup == 0);
        for (const std::int64_t id : initial)
            CHECK(seen.count(id) == 1);
        if (newest_first)
            CHECK(pages >= 300 / 37);
        else // ascending: what was enqueued meanwhile comes on later pages
            for (const std::int64_t id : added)
                CHECK(seen.count(id) == 1);
    }
}

TEST_CASE("list: a bad filter gets a clear error", "[pg][list]") {
    Db db("ax_t_list_bad");
    pg::Client c(db.conninfo);
    const auto message = [&](const pg::TaskFilter& f) {
        try {
            (void)c.list(f);
        } catch (const std::invalid_argument& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    CHECK(message({.limit = 0}).find("limit = 0: must be in 1..1000") != std::string::npos);
    CHECK(message({.limit = 1001}).find("limit = 1001: must be in 1..1000") != std::string::npos);
    CHECK(message({.after = -5}).find("after = -5") != std::string::npos);
    CHECK(message({.kind = std::string(201, 'k')}).find("must be 1..200 bytes") !=
          std::string::npos);
    CHECK(message({.tag = "a,b"}).find("tag 'a,b'") != std::string::npos);
    CHECK(message({.lane = static_cast<ax::Priority>(9)}).find("lane 9") != std::string::npos);
    CHECK(message({.states = {static_cast<pg::TaskState>(42)}}).find("state 42") !=
          std::string::npos);
    CHECK(message({.idempotency_key = std::string(513, 'x')}).find("idempotency_key") !=
          std::string::npos);
    const auto now = std::chrono::system_clock::now();
    CHECK(message({.enqueued_after = now, .enqueued_before = now - 1s})
              .find("enqueued_after: must be before enqueued_before") != std::string::npos);
    CHECK(pg::parse_task_state("running") == pg::TaskState::claimed);
    CHECK(pg::parse_task_state("dead") == pg::TaskState::dead_lettered);
    CHECK(pg::parse_task_state("discarded") == pg::TaskState::discarded);
    CHECK_FALSE(pg::parse_task_state("done").has_value());
    std::string out;
    CHECK(run_tool(db, "tasks list --state done", out) == 2);
    CHECK(out.find("state 'done': must be one of pending, scheduled") != std::string::npos);
    CHECK(run_tool(db, "tasks list --limit 5000", out) == 2);
    CHECK(out.find("must be in 1..1000") != std::string::npos);
    CHECK(run_tool(db, "tasks list --lane urgent", out) == 2);
    CHECK(run_tool(db, "tasks list --bogus 1", out) == 2);
    CHECK(run_tool(db, "tasks show 12345", out) == 2);
    CHECK(out.find("unknown") != std::string::npos);
    CHECK(run_tool(db, "tasks show x", out) == 2);
}

int main(int argc, char** argv) {
    const char* conninfo = std::getenv("AX_PG_CONNINFO");
    if (conninfo == nullptr || *conninfo == '\0') {
        std::printf("SKIPPED: AX_PG_CONNINFO is not set, so no PostgreSQL server to test against "
                    "(run under scripts/pg-server.sh, as scripts/test.sh's pg stage does)\n");
        return 77;
    }
    g_base = conninfo;
    std::string self = argv[0];
    const std::string dir = self.substr(0, self.rfind('/') + 1);
    g_node_exe = dir + "pg_test_node";
    g_tool_exe = AX_PG_TOOL;
    return Catch::Session().run(argc, argv);
}
