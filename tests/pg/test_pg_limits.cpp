// Cluster-wide group limits against a real PostgreSQL (scripts/pg-server.sh exports
// AX_PG_CONNINFO; without one it exits 77, skipped): the Client API and ax-pg; concurrency limits
// per key and per group raced by three node processes, one killed with SIGKILL mid-run, the limit
// changed while they run, with a checker that records every start and end (pg_test_node's span
// log) and reports the highest concurrency seen per key and per group; slots freed by failures
// and cancels; rate limits (starts per window, the next slot shown); fair shares among a lane's
// keys. Each test case works in a database of its own.

#define CATCH_CONFIG_RUNNER

#include <algorithm>
#include <array>
#include <atomic>
#include <ax/pg/pg.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <functional>
#include <map>
#include <signal.h>
#include <sstream>
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
std::string g_ax_pg;    // tools/ax-pg of the same build

struct Db {
    std::string conninfo;
    explicit Db(const std::string& name) {
        auto admin = pg::detail::Connection::open(g_base);
        admin.exec(("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)").c_str());
        admin.exec(("CREATE DATABASE " + name).c_str());
        conninfo = g_base + " dbname=" + name;
        pg::Client c(conninfo, {.require_schema = false});
        c.migrate();
    }
    std::int64_t scalar(const std::string& q) const {
        auto s = pg::detail::Connection::open(conninfo);
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

long long mono_ns() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

/// A pg_test_node child process running `span` tasks into the span log `spans`.
struct Proc {
    pid_t pid = -1;
    Proc(const std::string& db, const std::string& name, const std::string& spans,
         std::vector<std::string> extra = {}) {
        std::vector<std::string> args = {g_node_exe, "--db", db,        "--name", name,
                                         "--kinds",  "span", "--spans", spans};
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
    void stop() {
        if (pid <= 0)
            return;
        kill(pid, SIGTERM);
        int st = 0;
        waitpid(pid, &st, 0);
        pid = -1;
    }
    Proc(const Proc&) = delete;
    Proc& operator=(const Proc&) = delete;
    ~Proc() { kill9(); }
};

/// Runs a shell command; its stdout and exit status.
std::pair<std::string, int> run(const std::string& cmd) {
    std::string out;
    FILE* p = popen((cmd + " 2>&1").c_str(), "r");
    REQUIRE(p != nullptr);
    char buf[512];
    while (std::fgets(buf, sizeof buf, p) != nullptr)
        out += buf;
    const int st = pclose(p);
    return {out, WIFEXITED(st) ? WEXITSTATUS(st) : -1};
}

/// One execution of a task, from the span log.
struct Span {
    std::int64_t id = 0;
    std::string key; // "group:key"
    long long start = 0, end = 0;
};

/// Reads a span log; an execution with no end (its process was killed) ends at `killed_at`.
std::vector<Span> read_spans(const std::string& path, long long killed_at) {
    std::ifstream in(path);
    std::vector<Span> done;
    std::map<std::int64_t, std::vector<Span>> open;
    char what = 0;
    std::int64_t id = 0;
    std::string key;
    long long ns = 0;
    while (in >> what >> id >> key >> ns) {
        if (what == 'S') {
            open[id].push_back(Span{id, key, ns, 0});
        } else {
            auto& v = open[id];
            REQUIRE(!v.empty());
            Span s = v.back();
            v.pop_back();
            s.end = ns;
            done.push_back(s);
        }
    }
    for (auto& [i, v] : open)
        for (Span s : v) {
            s.end = killed_at;
            done.push_back(s);
        }
    return done;
}

/// The highest number of executions at once per name(span) (starts and ends at one instant:
/// the end first).
std::map<std::string, int> max_concurrency(const std::vector<Span>& spans,
                                           const std::function<std::string(const Span&)>& name) {
    std::map<std::string, std::vector<std::pair<long long, int>>> ev;
    for (const Span& s : spans) {
        ev[name(s)].push_back({s.start, +1});
        ev[name(s)].push_back({s.end, -1});
    }
    std::map<std::string, int> out;
    for (auto& [n, v] : ev) {
        std::sort(v.begin(), v.end());
        int cur = 0, best = 0;
        for (const auto& e : v) {
            cur += e.second;
            best = std::max(best, cur);
        }
        out[n] = best;
    }
    return out;
}

std::string group_of(const Span& s) {
    return s.key.substr(0, s.key.find(':'));
}

/// NewTask holds views, so the arguments are views too: a literal lives for the whole program,
/// where a std::string parameter would make a temporary the task outlives.
pg::NewTask span_task(std::string_view group, std::string_view key, std::string_view payload,
                      ax::Priority lane = ax::Priority::normal) {
    pg::NewTask t;
    t.kind = "span";
    t.payload = payload;
    t.group = group;
    t.group_key = key;
    t.priority = lane;
    return t;
}

std::string temp_path(const std::string& name) {
    const std::string p = "/tmp/ax_limits_" + name + "_" + std::to_string(getpid());
    std::remove(p.c_str());
    return p;
}

} // namespace

TEST_CASE("limits: set, replace, list, clear; bad input refused; ax-pg", "[limits_api]") {
    Db db("ax_limits_api");
    pg::Client c(db.conninfo);
    CHECK(c.limits().empty());
    CHECK_THROWS_AS(c.set_limit("", {.max_running = 1}), std::invalid_argument);
    CHECK_THROWS_AS(c.set_limit("g", {}), std::invalid_argument);
    CHECK_THROWS_AS(c.set_limit("g", {.max_running = -1}), std::invalid_argument);
    CHECK_THROWS_AS(c.set_limit("g", {.rate_n = 5}), std::invalid_argument);
    CHECK_THROWS_AS(c.set_limit("g", {.max_running = 1, .rate_period = 10ms}),
                    std::invalid_argument);
    CHECK_THROWS_AS(c.set_limit(std::string(201, 'g'), {.max_running = 1}), std::invalid_argument);
    CHECK(c.limits().empty());

    c.set_limit("pay", {.max_running = 3});
    c.set_limit("mail", {.max_running = 2, .per_key = true, .rate_n = 10, .rate_period = 1000ms});
    c.set_limit("pay", {.max_running = 4}); // replaced
    auto l = c.limits();
    REQUIRE(l.size() == 2);
    CHECK(l[0].group == "mail");
    CHECK(l[0].spec.max_running == 2);
    CHECK(l[0].spec.per_key);
    CHECK(l[0].spec.rate_n == 10);
    CHECK(l[0].spec.rate_period == 1000ms);
    CHECK(l[1].group == "pay");
    CHECK(l[1].spec.max_running == 4);
    CHECK_FALSE(l[1].spec.rate_n);

    // Tasks: a group, a key; a key without a group and an oversized group are refused.
    std::vector<pg::NewTask> ts = {span_task("pay", "", "a|0"), span_task("pay", "t1", "b|0"),
                                   span_task("mail", "t2", "c|0")};
    ts.push_back(pg::NewTask{.kind = "span", .payload = "d|0"});
    const auto ids = c.enqueue_many(ts);
    REQUIRE(ids.size() == 4);
    CHECK(db.scalar("SELECT count(*) FROM ax.tasks WHERE grp = 'pay'") == 2);
    CHECK(db.scalar("SELECT count(*) FROM ax.tasks WHERE grp = 'pay' AND grp_key = 't1'") == 1);
    CHECK(db.scalar("SELECT count(*) FROM ax.tasks WHERE grp IS NULL AND grp_key = ''") == 1);
    // A large call (>= ClientOptions::copy_min_tasks, no keys or times) goes by the grouped
    // COPY: every row keeps its group and key, NULL and '' for the ungrouped ones; with copy
    // switched off the same call goes by the keyed statement and writes the same.
    for (const std::size_t copy_min : {std::size_t{128}, std::size_t{0}}) {
        pg::Client bulk(db.conninfo, {.copy_min_tasks = copy_min});
        static const std::array<std::string, 3> groups = {"bulk", "bulk", ""};
        static const std::array<std::string, 3> keys = {"k1", "", ""};
        std::vector<pg::NewTask> many;
        for (int i = 0; i < 300; ++i)
            many.push_back(span_task(groups[static_cast<std::size_t>(i % 3)],
                                     keys[static_cast<std::size_t>(i % 3)], "bulk|0"));
        const auto got = bulk.enqueue_many(many);
        REQUIRE(got.size() == 300);
        const std::string first = std::to_string(got.front().id);
        CHECK(db.scalar("SELECT count(*) FROM ax.tasks WHERE id >= " + first +
                        " AND grp = 'bulk' AND grp_key = 'k1'") == 100);
        CHECK(db.scalar("SELECT count(*) FROM ax.tasks WHERE id >= " + first +
                        " AND grp = 'bulk' AND grp_key = ''") == 100);
        CHECK(db.scalar("SELECT count(*) FROM ax.tasks WHERE id >= " + first +
                        " AND grp IS NULL AND grp_key = ''") == 100);
        // In input order: the task at i % 3 == 0 has the key.
        CHECK(db.scalar("SELECT count(*) FROM ax.tasks WHERE id = " + first +
                        " AND grp_key = 'k1'") == 1);
        CHECK(db.scalar("DELETE FROM ax.tasks WHERE id >= " + first + " RETURNING 1") == 1);
    }
    // A dead letter keeps its group and key; a replay brings the task back under its group.
    {
        const auto dl = c.enqueue(span_task("pay", "t9", "dead|0"));
        const std::string id = std::to_string(dl.id);
        db.scalar("SELECT 1 FROM ax.dead_letter(" + id + ", 'boom', 'permanent')");
        CHECK(db.scalar("SELECT count(*) FROM ax.dead_letters WHERE id = " + id +
                        " AND grp = 'pay' AND grp_key = 't9'") == 1);
        REQUIRE(c.replay_dead_letter(dl.id));
        CHECK(db.scalar("SELECT count(*) FROM ax.tasks WHERE id = " + id +
                        " AND grp = 'pay' AND grp_key = 't9'") == 1);
        CHECK(db.scalar("DELETE FROM ax.tasks WHERE id = " + id + " RETURNING 1") == 1);
    }
    pg::NewTask bad = span_task("", "k", "x|0");
    CHECK_THROWS_AS(c.enqueue(bad), std::invalid_argument);
    const std::string long_group(201, 'x');
    bad = span_task(long_group, "", "x|0");
    CHECK_THROWS_AS(c.enqueue(bad), std::invalid_argument);
    l = c.limits();
    CHECK(l[1].queued == 2);
    CHECK(l[1].keys == 2);
    CHECK(l[1].running == 0);
    CHECK(c.status().limits.size() == 2);

    CHECK(c.clear_limit("pay"));
    CHECK_FALSE(c.clear_limit("pay"));
    CHECK(c.limits().size() == 1);

    const std::string db_arg = " --db '" + db.conninfo + "'";
    auto [out, rc] = run(g_ax_pg + db_arg + " limits set pay running=7 rate=5/2000 per-key");
    CHECK(rc == 0);
    CHECK(out.find("pay: running<=7 rate 5/2000ms per key") != std::string::npos);
    std::tie(out, rc) = run(g_ax_pg + db_arg + " limits list");
    CHECK(rc == 0);
    CHECK(out.find("mail: running<=2 rate 10/1000ms per key") != std::string::npos);
    std::tie(out, rc) = run(g_ax_pg + db_arg + " status");
    CHECK(rc == 0);
    CHECK(out.find("limits:") != std::string::npos);
    CHECK(out.find("pay: running<=7") != std::string::npos);
    std::tie(out, rc) = run(g_ax_pg + db_arg + " limits set pay running=x");
    CHECK(rc != 0);
    CHECK(out.find("not a count") != std::string::npos);
    std::tie(out, rc) = run(g_ax_pg + db_arg + " limits set pay");
    CHECK(rc != 0);
    std::tie(out, rc) = run(g_ax_pg + db_arg + " limits clear pay");
    CHECK(rc == 0);
    CHECK(out.find("limits cleared") != std::string::npos);
    CHECK(c.limits().size() == 1);
}

TEST_CASE("limits: 3 node processes race, one killed, the limit changed mid-run, the server "
          "restarted; never exceeded",
          "[limits_race]") {
    Db db("ax_limits_race");
    pg::Client c(db.conninfo);
    const std::string spans = temp_path("race");
    // "pk": 1 per key over 20 keys; "gw": 3 for the whole group (5 keys), lowered to 2 mid-run;
    // ungrouped tasks alongside.
    c.set_limit("pk", {.max_running = 1, .per_key = true});
    c.set_limit("gw", {.max_running = 3});
    std::vector<std::string> payloads;
    std::vector<pg::NewTask> ts;
    constexpr int pk_tasks = 20 * 15, gw_tasks = 5 * 20, free_tasks = 60;
    payloads.reserve(pk_tasks + gw_tasks + free_tasks);
    for (int i = 0; i < pk_tasks; ++i)
        payloads.push_back("pk:k" + std::to_string(i % 20) + "|" + std::to_string(5 + i % 11));
    for (int i = 0; i < gw_tasks; ++i)
        payloads.push_back("gw:k" + std::to_string(i % 5) + "|" + std::to_string(10 + i % 11));
    for (int i = 0; i < free_tasks; ++i)
        payloads.push_back("free:none|1");
    for (std::size_t i = 0; i < payloads.size(); ++i) {
        const std::string& p = payloads[i];
        const std::string grp = p.substr(0, p.find(':'));
        const std::string key = p.substr(p.find(':') + 1, p.find('|') - p.find(':') - 1);
        pg::NewTask t;
        t.kind = "span";
        t.payload = p;
        t.priority = static_cast<ax::Priority>(i % 3);
        if (grp != "free") {
            t.group = std::string_view(p).substr(0, grp.size());
            t.group_key = std::string_view(p).substr(p.find(':') + 1, key.size());
        }
        ts.push_back(t);
    }
    const auto total = static_cast<std::int64_t>(ts.size());
    c.enqueue_many(ts);
    const std::vector<std::string> fast = {"--workers",     "6",  "--lease-ms", "1500",
                                           "--maintain-ms", "200"};
    const auto finished = [&] {
        return db.scalar("SELECT count(*) FROM ax.history WHERE state = 1");
    };
    // The node to be killed starts first, so it holds slots when it dies (a node that frees a
    // slot claims again in the same round trip, so slots tend to stay where they are).
    Proc k(db.conninfo, "k", spans, fast);
    REQUIRE(wait_until([&] { return finished() >= 20; }, 60s));
    // The survivors' leases outlast the server restart below (a batch reclaimed while its node
    // is only cut off would run twice, which no limit can prevent: at-least-once).
    const std::vector<std::string> steady = {"--workers",     "6",  "--lease-ms", "15000",
                                             "--maintain-ms", "200"};
    Proc a(db.conninfo, "a", spans, steady), b(db.conninfo, "b", spans, steady);
    REQUIRE(wait_until([&] { return finished() >= total / 4; }, 120s));
    // Kill k while it holds claimed tasks (CI once killed it between two claims: nothing to
    // reclaim). What it holds is read right after the kill: nothing moves them until its lease
    // (1.5 s) ends.
    const auto held_by_k = [&] {
        return db.scalar("SELECT count(*) FROM ax.tasks t JOIN ax.nodes n ON n.id = t.node_id "
                         "WHERE n.name = 'k'");
    };
    REQUIRE(wait_until([&] { return held_by_k() > 0; }, 60s));
    k.kill9();
    const long long killed_at = mono_ns();
    const auto held_at_kill = held_by_k();
    c.set_limit("gw", {.max_running = 2});
    // A server restart while the two survivors run: their claims, acknowledgements and the
    // limits' state come back with the server (the nodes reconnect), and the limits still hold.
    bool restarted = false;
    if (const char* ctl = std::getenv("AX_PG_CTL"); ctl != nullptr && *ctl != '\0') {
        const auto before = finished();
        REQUIRE(wait_until([&] { return finished() >= before + 20; }, 120s));
        REQUIRE(std::system((std::string(ctl) + " restart >/dev/null").c_str()) == 0);
        restarted = true;
    } else {
        WARN("AX_PG_CTL not set (run under scripts/pg-server.sh): restart part skipped");
    }
    REQUIRE(wait_until(
        [&] {
            try {
                return finished() == total;
            } catch (const std::exception&) {
                return false; // the server is still coming back
            }
        },
        240s));
    a.stop();
    b.stop();
    CHECK(db.scalar("SELECT count(*) FROM ax.tasks") == 0);
    CHECK(db.scalar("SELECT count(*) FROM ax.dead_letters") == 0);
    // A fresh client: c's connection ended with the restart.
    const auto reclaimed = pg::Client(db.conninfo).status().reclaimed_tasks;
    // The killed node's tasks (and their slots) came back with its batches. held_at_kill is 0
    // only if k acknowledged everything in the instant between the look and the kill.
    if (held_at_kill == 0)
        WARN("k held no task at the kill: the reclaim is not exercised in this run");
    CHECK(reclaimed >= held_at_kill);

    const std::vector<Span> s = read_spans(spans, killed_at);
    std::map<std::int64_t, int> per_task;
    for (const Span& x : s)
        per_task[x.id] += 1;
    CHECK(static_cast<std::int64_t>(per_task.size()) == total);
    const auto by_key = max_concurrency(s, [](const Span& x) { return x.key; });
    const auto by_group = max_concurrency(s, group_of);
    int pk_max = 0;
    for (const auto& [key, n] : by_key)
        if (key.rfind("pk:", 0) == 0)
            pk_max = std::max(pk_max, n);
    std::printf("limits_race: %zu executions of %lld tasks (%lld held by the killed node, %lld "
                "reclaimed, %zu re-run; server restarted: %s); max "
                "concurrency per key of pk (limit 1): %d; group gw (limit 3, then 2): %d; "
                "ungrouped: %d\n",
                s.size(), static_cast<long long>(total), static_cast<long long>(held_at_kill),
                static_cast<long long>(reclaimed), s.size() - per_task.size(),
                restarted ? "yes" : "no", pk_max, by_group.at("gw"), by_group.at("free"));
    CHECK(pk_max == 1);
    CHECK(by_group.at("gw") <= 3);
    CHECK(by_group.at("gw") >= 2); // the limit let it run that wide at all
    std::remove(spans.c_str());
}

TEST_CASE("limits: slots are freed by failures and cancels; other groups are not held up",
          "[limits_release]") {
    Db db("ax_limits_release");
    pg::Client c(db.conninfo);
    c.set_limit("one", {.max_running = 1});
    std::atomic<int> fails{0};
    std::atomic<bool> in_block{false};
    std::vector<std::pair<std::string, long long>> log;
    std::mutex log_mutex;
    const auto note = [&](const std::string& what) {
        std::lock_guard lock(log_mutex);
        log.push_back({what, mono_ns()});
    };
    pg::NodeOptions o;
    o.conninfo = db.conninfo;
    o.name = "n";
    o.scheduler.min_workers = 4;
    o.scheduler.max_workers = 4;
    o.scheduler.retry_base_delay = 300ms;
    o.poll_interval = 100ms;
    pg::Node node(o);
    node.handle("work", [&](pg::Job& j) {
        const std::string p(j.payload());
        note("S " + p);
        if (p == "fail" && fails.fetch_add(1) == 0) {
            note("E " + p);
            throw std::runtime_error("first attempt fails");
        }
        if (p == "block") {
            in_block = true;
            while (!j.stop_requested())
                std::this_thread::sleep_for(2ms);
        }
        note("E " + p);
    });
    node.start();
    const auto task = [](const char* payload, const char* group) {
        pg::NewTask t;
        t.kind = "work";
        t.payload = payload;
        t.group = group;
        return t;
    };
    // A fails once (retried after 300 ms): B runs meanwhile in the freed slot.
    const auto a = c.enqueue(task("fail", "one"));
    REQUIRE(wait_until([&] { return fails.load() >= 1; }, 30s));
    c.enqueue(task("after_fail", "one"));
    REQUIRE(wait_until([&] { return c.result(a.id) && c.result(a.id)->finished(); }, 30s));
    // A blocking task holds the only slot: the group's next task waits, another group's and
    // ungrouped tasks run.
    const auto blk = c.enqueue(task("block", "one"));
    REQUIRE(wait_until([&] { return in_block.load(); }, 30s));
    const auto waiting = c.enqueue(task("waits", "one"));
    const auto other = c.enqueue(task("other", "two"));
    const auto plain = c.enqueue(pg::NewTask{.kind = "work", .payload = "plain"});
    REQUIRE(wait_until([&] { return c.result(other.id)->finished(); }, 30s));
    REQUIRE(wait_until([&] { return c.result(plain.id)->finished(); }, 30s));
    std::this_thread::sleep_for(300ms);
    CHECK(c.result(waiting.id)->state == pg::TaskState::pending);
    // Cancelling the blocker frees the slot.
    c.cancel(blk.id);
    REQUIRE(wait_until([&] { return c.result(waiting.id)->finished(); }, 30s));
    node.stop();

    const auto at = [&](const std::string& what) {
        std::lock_guard lock(log_mutex);
        for (const auto& [w, t] : log)
            if (w == what)
                return t;
        return -1LL;
    };
    // after_fail started while "fail" waited out its back-off, before its second attempt.
    long long second_fail = -1;
    {
        std::lock_guard lock(log_mutex);
        int seen = 0;
        for (const auto& [w, t] : log)
            if (w == "S fail" && ++seen == 2)
                second_fail = t;
    }
    CHECK(at("S after_fail") > 0);
    CHECK(second_fail > 0);
    CHECK(at("S after_fail") < second_fail);
    CHECK(at("S waits") > at("S other"));
    CHECK(at("S waits") > at("S plain"));
}

TEST_CASE("limits: rate limit, starts per window; the next slot is shown", "[limits_rate]") {
    Db db("ax_limits_rate");
    pg::Client c(db.conninfo);
    const std::string spans = temp_path("rate");
    constexpr int n = 10, tasks = 40;
    constexpr long long period_ns = 500'000'000;
    c.set_limit("r", {.rate_n = n, .rate_period = 500ms});
    std::vector<std::string> payloads(tasks, "r:k|0");
    std::vector<pg::NewTask> ts;
    for (const auto& p : payloads)
        ts.push_back(span_task("r", "k", p));
    c.enqueue_many(ts);
    Proc a(db.conninfo, "a", spans), b(db.conninfo, "b", spans);
    REQUIRE(wait_until([&] { return db.scalar("SELECT count(*) FROM ax.history") >= n; }, 60s));
    // The first window is full: the next slot is shown, within the period.
    std::optional<double> next;
    wait_until(
        [&] {
            const auto l = c.limits();
            next = l.at(0).next_slot_s;
            return next.has_value();
        },
        2s);
    REQUIRE(next.has_value());
    CHECK(*next <= 0.5);
    const auto [out, rc] = run(g_ax_pg + " --db '" + db.conninfo + "' limits list");
    CHECK(rc == 0);
    CHECK(out.find("r: rate 10/500ms") != std::string::npos);
    REQUIRE(wait_until([&] { return db.scalar("SELECT count(*) FROM ax.history") == tasks; }, 60s));
    a.stop();
    b.stop();
    std::vector<Span> s = read_spans(spans, 0);
    REQUIRE(s.size() == static_cast<std::size_t>(tasks));
    std::sort(s.begin(), s.end(), [](const Span& x, const Span& y) { return x.start < y.start; });
    // Fixed windows of n starts: 40 starts need 4 windows, so the last start comes at least 3
    // periods after the first (less a little: the node starts a task a moment after its claim).
    const long long spread = s.back().start - s.front().start;
    std::printf("limits_rate: %d starts over %.3f s (limit %d per 0.5 s)\n", tasks,
                static_cast<double>(spread) / 1e9, n);
    CHECK(spread >= 3 * period_ns - 50'000'000);
    // No span of one period holds more than two windows' worth.
    for (std::size_t i = 0; i < s.size(); ++i) {
        std::size_t j = i;
        while (j < s.size() && s[j].start < s[i].start + period_ns - 50'000'000)
            ++j;
        CHECK(j - i <= static_cast<std::size_t>(2 * n));
    }
    std::remove(spans.c_str());
}

TEST_CASE("limits: a lane's claims are shared among keys; one key's flood does not hold back "
          "another",
          "[limits_fair]") {
    Db db("ax_limits_fair");
    pg::Client c(db.conninfo);
    const std::string spans = temp_path("fair");
    constexpr int big = 3000, small = 10;
    std::vector<std::string> payloads(big, "t:big|0");
    std::vector<pg::NewTask> ts;
    for (const auto& p : payloads)
        ts.push_back(span_task("t", "big", p));
    c.enqueue_many(ts);
    std::vector<std::string> sp(small, "t:small|0");
    ts.clear();
    for (const auto& p : sp)
        ts.push_back(span_task("t", "small", p));
    c.enqueue_many(ts); // enqueued after the flood: FIFO would run them last
    Proc a(db.conninfo, "a", spans, {"--workers", "2", "--max-batch", "16"});
    REQUIRE(wait_until([&] { return db.scalar("SELECT count(*) FROM ax.history") == big + small; },
                       120s));
    a.stop();
    std::vector<Span> s = read_spans(spans, 0);
    std::sort(s.begin(), s.end(), [](const Span& x, const Span& y) { return x.start < y.start; });
    int bigs_before = 0, small_seen = 0;
    for (const Span& x : s) {
        if (x.key == "t:small") {
            if (++small_seen == small)
                break;
        } else {
            ++bigs_before;
        }
    }
    std::printf("limits_fair: the small key's %d tasks all started after %d of the big key's %d\n",
                small, bigs_before, big);
    CHECK(small_seen == small);
    CHECK(bigs_before < big / 10);
    std::remove(spans.c_str());
}

namespace {

/// One claim through ax.claim_grouped for node `node` (no node process: the batch is never
/// acknowledged, so what it takes stays claimed): quota `q` from the normal lane; how many tasks
/// it got. `sentinel`, when given, is set to whether the claim ended with the row that says a
/// limit held work back (ID -1, last).
std::int64_t claim_once(pg::detail::Connection& c, int node, int q, bool* sentinel = nullptr) {
    const std::string sql = "SELECT count(*) FILTER (WHERE r_id > 0), coalesce(bool_or(r_id = -1), "
                            "false) FROM ax.claim_grouped(" +
                            std::to_string(node) + ", ARRAY['span'], '{}'::text[], 0, " +
                            std::to_string(q) + ", 0, 600000)";
    auto r = c.exec(sql.c_str());
    if (sentinel != nullptr)
        *sentinel = r.boolean(0, 1);
    return r.int64(0, 0);
}

/// Four claimers race `rounds` claims each (quotas 1..150); after every claim each reads the
/// group's claimed count in a fresh statement (a committed state) and keeps the highest. The
/// highest seen and the total after one more claim taken alone (quota 2000: every slice free to
/// lock, so it fills whatever room is left).
std::pair<std::int64_t, std::int64_t> race_claims(const Db& db, int rounds, int base_node,
                                                  bool free_some) {
    std::atomic<std::int64_t> most{0};
    std::vector<std::thread> ts;
    for (int w = 0; w < 4; ++w)
        ts.emplace_back([&, w] {
            auto c = pg::detail::Connection::open(db.conninfo);
            unsigned x = 2654435761u * static_cast<unsigned>(w + 1);
            for (int r = 0; r < rounds; ++r) {
                x = x * 1664525u + 1013904223u;
                claim_once(c, base_node + w, 1 + static_cast<int>((x >> 8) % 150));
                const std::int64_t now =
                    c.exec("SELECT count(*) FROM ax.tasks WHERE grp = 'big' AND node_id IS NOT "
                           "NULL")
                        .int64(0, 0);
                std::int64_t m = most.load();
                while (now > m && !most.compare_exchange_weak(m, now)) {
                }
                if (free_some && w == 0 && r % 3 == 0) // an acknowledgement's effect: slots free
                    c.exec("UPDATE ax.tasks SET node_id = NULL, batch_id = NULL WHERE id IN "
                           "(SELECT id FROM ax.tasks WHERE grp = 'big' AND node_id IS NOT NULL "
                           "ORDER BY random() LIMIT 20)");
            }
        });
    for (auto& t : ts)
        t.join();
    auto c = pg::detail::Connection::open(db.conninfo);
    claim_once(c, base_node + 9, 2000);
    return {most.load(),
            db.scalar("SELECT count(*) FROM ax.tasks WHERE grp = 'big' AND node_id IS NOT NULL")};
}

/// The most claimed tasks of group 'big' counted in one slice of `nsl` (grp_slice mod nsl).
std::int64_t fullest_slice(const Db& db, int nsl) {
    return db.scalar("SELECT coalesce(max(c), 0) FROM (SELECT count(*) AS c FROM ax.tasks WHERE "
                     "grp = 'big' AND node_id IS NOT NULL GROUP BY grp_slice % " +
                     std::to_string(nsl) + ") x");
}

} // namespace

TEST_CASE("limits: a large limit is claimed in slices by racing claimers; never exceeded, filled "
          "exactly, across changes of the slice count",
          "[limits_slices]") {
    Db db("ax_limits_slices");
    pg::Client c(db.conninfo);
    std::vector<std::string> payloads(1500, "big:k|0");
    const std::vector<std::string> keys = {"k0", "k1", "k2", "k3", "k4"};
    const std::string group = "big";
    std::vector<pg::NewTask> ts;
    for (std::size_t i = 0; i < payloads.size(); ++i)
        ts.push_back(span_task(group, keys[i % keys.size()], payloads[i]));
    c.enqueue_many(ts);

    auto free_claimed = [&](int n) {
        return db.scalar("WITH u AS (UPDATE ax.tasks SET node_id = NULL, batch_id = NULL WHERE id "
                         "IN (SELECT id FROM ax.tasks WHERE node_id IS NOT NULL ORDER BY random() "
                         "LIMIT " +
                         std::to_string(n) + ") RETURNING 1) SELECT count(*) FROM u");
    };

    // 1000: eight slices of 125; tasks freed at random while the claimers race.
    c.set_limit("big", {.max_running = 1000});
    auto [most, total] = race_claims(db, 40, 1, true);
    std::printf("limits_slices: limit 1000 (8 slices): most seen %lld, filled to %lld, fullest "
                "slice %lld\n",
                static_cast<long long>(most), static_cast<long long>(total),
                static_cast<long long>(fullest_slice(db, 8)));
    CHECK(most <= 1000);
    CHECK(total == 1000);
    CHECK(fullest_slice(db, 8) <= 125);
    CHECK(db.scalar("SELECT count(*) FROM ax.tasks WHERE grp = 'big' AND node_id IS NOT NULL "
                    "AND grp_slice NOT BETWEEN 0 AND 7") == 0);

    // Lowered to 200 (three slices of 67, 67, 66) with 100 still running in all eight earlier
    // slices: each slice counts the tasks of the earlier slices congruent to it, so the room
    // left is 100, not more.
    CHECK(free_claimed(900) == 900);
    c.set_limit("big", {.max_running = 200});
    std::tie(most, total) = race_claims(db, 30, 11, true);
    std::printf("limits_slices: limit 200 (3 slices) over 100 from 8 slices: most seen %lld, "
                "filled to %lld, fullest slice %lld\n",
                static_cast<long long>(most), static_cast<long long>(total),
                static_cast<long long>(fullest_slice(db, 3)));
    CHECK(most <= 200);
    CHECK(total == 200);
    CHECK(fullest_slice(db, 3) <= 67);

    // A single claim alone takes every slice's room: the whole limit in one batch.
    {
        Db one("ax_limits_slices_one");
        pg::Client c1(one.conninfo);
        c1.enqueue_many(ts);
        c1.set_limit("big", {.max_running = 1000});
        auto conn = pg::detail::Connection::open(one.conninfo);
        bool held = false;
        CHECK(claim_once(conn, 1, 5000, &held) == 1000);
        CHECK(held); // 500 more wait on the limit: the claim says so
        CHECK(claim_once(conn, 2, 5000, &held) == 0);
        CHECK(held);
        // While one claim holds the slices, another takes none and waits for nothing: it leaves
        // them to the holder and says work is held back.
        auto other = pg::detail::Connection::open(one.conninfo);
        conn.exec("BEGIN");
        conn.exec("SELECT count(*) FROM ax.claim_grouped(3, ARRAY['span'], '{}'::text[], 0, 5000, "
                  "0, 600000)");
        CHECK(claim_once(other, 4, 5000, &held) == 0);
        CHECK(held);
        conn.exec("COMMIT");
    }

    // Lowered to 100 (one pool, no slices) while 200 run: nothing more until they fall under it,
    // then filled to exactly 100 (the bound goes stale as tasks free, the count fixes it).
    c.set_limit("big", {.max_running = 100});
    std::tie(most, total) = race_claims(db, 10, 21, false);
    CHECK(most == 200);
    CHECK(total == 200);
    CHECK(free_claimed(150) == 150);
    std::tie(most, total) = race_claims(db, 30, 31, true);
    std::printf("limits_slices: limit 100 (one pool) after 150 freed: most seen %lld, filled to "
                "%lld\n",
                static_cast<long long>(most), static_cast<long long>(total));
    CHECK(most <= 100);
    CHECK(total == 100);
}

TEST_CASE("limits: keys share a lane's claim by weight; bad weights refused", "[limits_weight]") {
    Db db("ax_limits_weight");
    pg::Client c(db.conninfo);
    std::vector<std::string> payloads(300, "w:k|0");
    const std::string group = "w", ka = "a", kb = "b"; // NewTask holds views: these outlive it
    std::vector<pg::NewTask> ts;
    for (const auto& p : payloads) {
        ts.push_back(span_task(group, ka, p));
        ts.push_back(span_task(group, kb, p));
    }
    c.enqueue_many(ts);
    c.set_key_weight("w", "a", 3);
    REQUIRE(c.key_weights().size() == 1);
    CHECK(c.key_weights()[0].weight == 3);
    auto conn = pg::detail::Connection::open(db.conninfo);
    auto by_key = [&](const char* k) {
        return db.scalar(std::string("SELECT count(*) FROM ax.tasks WHERE node_id IS NOT NULL AND "
                                     "grp_key = '") +
                         k + "'");
    };
    // 3 : 1 of a claim of 40, the group unlimited (no limit held anything back: no sentinel).
    bool held = true;
    REQUIRE(claim_once(conn, 1, 40, &held) == 40);
    CHECK_FALSE(held);
    CHECK(by_key("a") == 30);
    CHECK(by_key("b") == 10);
    // With ungrouped tasks (weight 1) and the group limited per key: 3 : 1 : 1 of 50.
    std::vector<std::string> up(100, "u:u|0");
    std::vector<pg::NewTask> us;
    for (const auto& p : up) {
        pg::NewTask t;
        t.kind = "span";
        t.payload = p;
        us.push_back(t);
    }
    c.enqueue_many(us);
    c.set_limit("w", {.max_running = 1000, .per_key = true});
    REQUIRE(claim_once(conn, 2, 50) == 50);
    CHECK(by_key("a") == 30 + 30);
    CHECK(by_key("b") == 10 + 10);
    CHECK(db.scalar("SELECT count(*) FROM ax.tasks WHERE node_id IS NOT NULL AND grp IS NULL") ==
          10);
    // Weight 1 removes the row; the ax-pg command sets and lists.
    c.set_key_weight("w", "a", 1);
    CHECK(c.key_weights().empty());
    const auto [out, rc] = run(g_ax_pg + " --db '" + db.conninfo + "' limits weight w b 7");
    CHECK(rc == 0);
    CHECK(out.find("weight w/b: 7") != std::string::npos);
    const auto [out2, rc2] = run(g_ax_pg + " --db '" + db.conninfo + "' limits weight w b 0");
    CHECK(rc2 != 0);
    CHECK(out2.find("1..1000") != std::string::npos);
    CHECK_THROWS_AS(c.set_key_weight("w", "b", 0), std::invalid_argument);
    CHECK_THROWS_AS(c.set_key_weight("w", "b", 1001), std::invalid_argument);
    CHECK_THROWS_AS(c.set_key_weight("", "b", 2), std::invalid_argument);
    CHECK_THROWS_AS(c.set_key_weight("w", std::string(201, 'k'), 2), std::invalid_argument);
    // The SQL function refuses the same, naming the argument (22023), and writes nothing.
    try {
        conn.exec("SELECT ax.set_key_weight('w', 'b', 0)");
        FAIL("accepted weight 0");
    } catch (const std::exception& e) {
        CHECK(std::string(e.what()).find("weight = 0") != std::string::npos);
    }
    CHECK(db.scalar("SELECT weight FROM ax.key_weights WHERE grp_key = 'b'") == 7);
}

int main(int argc, char** argv) {
    const char* conninfo = std::getenv("AX_PG_CONNINFO");
    if (conninfo == nullptr || *conninfo == '\0') {
        std::printf("SKIPPED: AX_PG_CONNINFO is not set, so no PostgreSQL server to test against "
                    "(run under scripts/pg-server.sh, as scripts/test.sh's pg stage does)\n");
        return 77;
    }
    g_base = conninfo;
    const std::string self = argv[0];
    const std::string dir = self.substr(0, self.rfind('/') + 1);
    g_node_exe = dir + "pg_test_node";
    g_ax_pg = dir + "../../tools/ax-pg";
    return Catch::Session().run(argc, argv);
}
