// Workflows (issue 29, parts 4 and 5) against a real PostgreSQL: graphs enqueued in one call by
// Client::enqueue_flow and ax.enqueue_flow, run by pg_test_node processes whose "flow" handler
// records every start and end with the database's clock (flow_log). The checks are the ones a
// user who distrusts the feature would make: no task starts before all its dependencies ended,
// each task ends in exactly one terminal state, failures propagate (or not, run_anyway), bad
// graphs are refused with nothing enqueued, and all of it holds with several node processes,
// kill -9 of one mid-flow and a server restart. scripts/pg-server.sh starts a throw-away server
// and exports AX_PG_CONNINFO (and AX_PG_CTL for the restart); without it every test is skipped
// (exit 77). Durations are generous hang guards, never speed claims.

#define CATCH_CONFIG_RUNNER
#include <ax/pg/json.hpp>
#include <ax/pg/pg.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <functional>
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

/// A fresh database at this library's schema version, with the handlers' log table.
struct Db {
    std::string conninfo;
    pg::detail::Connection conn;
    explicit Db(const std::string& name) {
        auto admin = pg::detail::Connection::open(g_base);
        admin.exec(("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)").c_str());
        admin.exec(("CREATE DATABASE " + name).c_str());
        conninfo = g_base + " dbname=" + name;
        pg::Client c(conninfo, {.require_schema = false});
        REQUIRE(c.migrate() == pg::schema_version);
        conn = pg::detail::Connection::open(conninfo);
        conn.exec("CREATE TABLE flow_log (task_id bigint NOT NULL, node text NOT NULL, "
                  "ev text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp(), "
                  "unfinished int, foreign_results int)");
    }
    std::int64_t scalar(const std::string& sql) {
        try {
            return conn.exec(sql.c_str()).int64(0, 0);
        } catch (const pg::ConnectionError&) {
            conn = pg::detail::Connection::open(conninfo); // after a server restart
            return conn.exec(sql.c_str()).int64(0, 0);
        }
    }
};

bool wait_until(const std::function<bool()>& pred, std::chrono::milliseconds limit) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < until) {
        try {
            if (pred())
                return true;
        } catch (const pg::Error&) {
            // the server is restarting: look again
        }
        std::this_thread::sleep_for(20ms);
    }
    return pred();
}

/// A pg_test_node child process running the "flow" handler.
struct Proc {
    pid_t pid = -1;
    Proc(const std::string& db, const std::string& name, std::vector<std::string> extra = {}) {
        std::vector<std::string> args = {
            g_node_exe, "--db",       db,     "--name",        name, "--kinds", "flow", "--workers",
            "4",        "--lease-ms", "2000", "--maintain-ms", "200"};
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
    void kill9() {
        kill(pid, SIGKILL);
        int st = 0;
        waitpid(pid, &st, 0);
        pid = -1;
    }
    ~Proc() {
        if (pid > 0)
            kill9();
    }
};

pg::FlowTask step(std::string_view name, std::vector<std::string_view> deps,
                  std::string_view payload = {}) {
    pg::FlowTask t;
    t.name = name;
    t.task.kind = "flow";
    t.task.payload = payload;
    t.depends_on = std::move(deps);
    return t;
}

/// Every flow finished (no task waiting, pending or running).
bool all_finished(pg::Client& c) {
    for (const auto& f : c.flows(1000))
        if (!f.finished)
            return false;
    return true;
}

/// The checker over flow_log and the tables, for every flow in the database:
///  - order: a start of a task before the last end of one of its dependencies;
///  - handlers that saw an unfinished dependency or a result that is not the dependency's own;
///  - tasks not in exactly one terminal place (history or dead letters, and no longer live or
///    waiting).
void check_invariants(Db& db) {
    CHECK(db.scalar("SELECT count(*) FROM ax.flow_tasks c CROSS JOIN unnest(c.parents) p(id) "
                    "JOIN flow_log s ON s.task_id = c.task_id AND s.ev = 'start' "
                    "WHERE s.at <= (SELECT max(e.at) FROM flow_log e "
                    "                WHERE e.task_id = p.id AND e.ev = 'end') "
                    "   OR NOT EXISTS (SELECT 1 FROM flow_log e "
                    "                  WHERE e.task_id = p.id AND e.ev = 'end')") == 0);
    CHECK(db.scalar(
              "SELECT count(*) FROM flow_log WHERE unfinished <> 0 OR foreign_results <> 0") == 0);
    CHECK(db.scalar("SELECT count(*) FROM ax.flow_tasks f WHERE "
                    "(SELECT count(*) FROM ax.history h WHERE h.id = f.task_id) + "
                    "(SELECT count(*) FROM ax.dead_letters d WHERE d.id = f.task_id) <> 1 "
                    "OR EXISTS (SELECT 1 FROM ax.tasks t WHERE t.id = f.task_id) "
                    "OR EXISTS (SELECT 1 FROM ax.flow_waiting w WHERE w.task_id = f.task_id)") ==
          0);
}

} // namespace

TEST_CASE("flows: diamond, fan-out and fan-in run in dependency order; results reach dependents",
          "[flows]") {
    Db db("ax_flows_order");
    pg::Client c(db.conninfo);
    // Diamond a -> {b, c} -> d, listed out of order (d first) so the cycle check runs.
    // d names c before b: its parents still come in the flow's order, b then c.
    std::vector<pg::FlowTask> diamond = {step("d", {"c", "b"}), step("b", {"a"}, "sleep:30"),
                                         step("c", {"a"}), step("a", {})};
    const pg::FlowEnqueued d = c.enqueue_flow("diamond", diamond);
    REQUIRE(d.ids.size() == 4);
    // Before any node runs: only a is claimable; d reads as scheduled (waiting) and can be
    // waited for.
    CHECK(db.scalar("SELECT count(*) FROM ax.tasks") == 1);
    CHECK(db.scalar("SELECT count(*) FROM ax.tasks WHERE id = " + std::to_string(d.ids[3])) == 1);
    const auto waiting = c.result(d.ids[0]);
    REQUIRE(waiting.has_value());
    CHECK(waiting->state == pg::TaskState::scheduled);
    const auto prog = c.flow(d.flow_id);
    REQUIRE(prog.has_value());
    CHECK(prog->waiting == 3);
    const pg::Counts counts = c.counts(); // b, c (normal) and d wait; a is pending
    CHECK(counts.waiting[1] == 3);
    CHECK(counts.live() == 1);
    CHECK(pg::to_json_text(c.status()).find("\"waiting\":3,") != std::string::npos);
    CHECK(prog->pending == 1);
    CHECK_FALSE(prog->finished);

    // Fan-out 1 -> 30 -> fan-in 1, from the SQL API (JSON).
    std::string json = R"([{"name":"root","kind":"flow"},)";
    for (int i = 0; i < 30; ++i)
        json += R"({"name":"w)" + std::to_string(i) + R"(","kind":"flow","depends_on":["root"]},)";
    json += R"({"name":"sink","kind":"flow","payload":"sleep:5","depends_on":[)";
    for (int i = 0; i < 30; ++i)
        json += (i ? ",\"w" : "\"w") + std::to_string(i) + "\"";
    json += "]}]";
    const std::int64_t fan =
        db.scalar("SELECT min(flow_id) FROM ax.enqueue_flow('fan', '" + json + "'::jsonb)");
    const std::int64_t sink =
        db.scalar("SELECT task_id FROM ax.flow_tasks WHERE name = 'sink' AND flow_id = " +
                  std::to_string(fan));

    Proc n1(db.conninfo, "o1"), n2(db.conninfo, "o2");
    // Client::wait on the last task of each flow (registered while it still waits).
    const auto dr = c.wait(d.ids[0], 60s);
    REQUIRE(dr.has_value());
    CHECK(dr->state == pg::TaskState::succeeded);
    CHECK(dr->result == "r" + std::to_string(d.ids[0]));
    const auto sr = c.wait(sink, 60s);
    REQUIRE(sr.has_value());
    CHECK(sr->state == pg::TaskState::succeeded);
    REQUIRE(wait_until([&] { return all_finished(c); }, 60s));

    // d reads b's and c's results, in the flow's task order.
    const auto parents = c.parent_results(d.ids[0]);
    REQUIRE(parents.size() == 2);
    CHECK(parents[0].name == "b");
    CHECK(parents[1].name == "c");
    CHECK(parents[0].result.state == pg::TaskState::succeeded);
    CHECK(parents[0].result.result == "r" + std::to_string(d.ids[1]));
    CHECK(c.parent_results(d.ids[3]).empty()); // a has no dependencies
    CHECK(c.parent_results(sink).size() == 30);

    const auto fp = c.flow(fan);
    REQUIRE(fp.has_value());
    CHECK(fp->tasks == 32);
    CHECK(fp->succeeded == 32);
    CHECK(fp->finished);
    for (const auto& t : c.flow_tasks(d.flow_id))
        CHECK(t.state == "succeeded");
    CHECK(db.scalar("SELECT count(*) FROM flow_log WHERE ev = 'start'") == 36);
    check_invariants(db);
    CHECK(n1.stop() == 0);
    CHECK(n2.stop() == 0);
}

TEST_CASE("flows: a failed or cancelled dependency cancels its dependents, run_anyway runs",
          "[flows_fail]") {
    Db db("ax_flows_fail");
    pg::Client c(db.conninfo);
    // a fails for good: b (and c after it) are cancelled with the reason; x runs anyway, and
    // y after x runs normally.
    std::vector<pg::FlowTask> g = {step("a", {}, "fail"), step("b", {"a"}), step("c", {"b"}),
                                   step("x", {"a"}),      step("y", {"x"}), step("k", {"y"})};
    g[3].run_anyway = true;
    g[3].task.payload = "sleep:500"; // still running while k is cancelled below
    g[0].task.max_attempts = 1;
    const auto f = c.enqueue_flow("failing", g);
    // A waiting task cancelled by request ends at once and takes its dependents along.
    std::vector<pg::FlowTask> h = {step("p", {}, "sleep:300"), step("q", {"p"}), step("r", {"q"}),
                                   step("s", {"p"})};
    const auto f2 = c.enqueue_flow("cancelled", h);
    // A dead letter discarded (or replayed) later does not count for its dependents twice: z
    // runs anyway after a, but not before w ended.
    std::vector<pg::FlowTask> late = {step("a", {}, "fail"), step("w", {}, "sleep:800"),
                                      step("z", {"a", "w"})};
    late[0].task.max_attempts = 1;
    late[2].run_anyway = true;
    const auto f3 = c.enqueue_flow("discarded", late);
    CHECK(c.cancel(f2.ids[1]) == pg::CancelResult::cancelled);
    CHECK(c.result(f2.ids[2])->state == pg::TaskState::cancelled);

    Proc n1(db.conninfo, "f1");
    REQUIRE(wait_until(
        [&] {
            return db.scalar("SELECT count(*) FROM flow_log WHERE ev = 'start' "
                             "AND task_id = " +
                             std::to_string(f.ids[3])) == 1;
        },
        60s));
    CHECK(c.cancel(f.ids[5]) == pg::CancelResult::cancelled); // k: waiting for y
    REQUIRE(wait_until([&] { return c.result(f3.ids[0])->state == pg::TaskState::dead_lettered; },
                       60s));
    CHECK(c.discard_dead_letter(f3.ids[0]));
    REQUIRE(wait_until([&] { return all_finished(c); }, 60s));

    auto state_of = [&](const pg::FlowEnqueued& fl, std::size_t i) {
        for (const auto& t : c.flow_tasks(fl.flow_id))
            if (t.id == fl.ids[i])
                return t;
        FAIL("no such task");
        return pg::FlowTaskState{};
    };
    CHECK(state_of(f, 0).state == "dead_lettered");
    CHECK(state_of(f, 1).state == "cancelled");
    CHECK(state_of(f, 1).reason ==
          "dependency 'a' (task " + std::to_string(f.ids[0]) + ") was dead-lettered");
    CHECK(state_of(f, 2).state == "cancelled");
    CHECK(state_of(f, 2).reason ==
          "dependency 'b' (task " + std::to_string(f.ids[1]) + ") was cancelled");
    CHECK(state_of(f, 3).state == "succeeded"); // run_anyway
    CHECK(state_of(f, 4).state == "succeeded");
    CHECK(state_of(f, 5).state == "cancelled");
    CHECK(state_of(f, 5).reason == "cancelled by request");
    CHECK(state_of(f2, 0).state == "succeeded");
    CHECK(state_of(f2, 1).reason == "cancelled by request");
    CHECK(state_of(f2, 2).reason ==
          "dependency 'q' (task " + std::to_string(f2.ids[1]) + ") was cancelled");
    CHECK(state_of(f2, 3).state == "succeeded");
    CHECK(state_of(f3, 0).state == "discarded");
    CHECK(state_of(f3, 2).state == "succeeded");
    // Never started: b, c, k, q, r.
    for (auto id : {f.ids[1], f.ids[2], f.ids[5], f2.ids[1], f2.ids[2]})
        CHECK(db.scalar("SELECT count(*) FROM flow_log WHERE task_id = " + std::to_string(id)) ==
              0);
    // x read its failed dependency's outcome.
    const auto px = c.parent_results(f.ids[3]);
    REQUIRE(px.size() == 1);
    CHECK(px[0].result.state == pg::TaskState::dead_lettered);
    CHECK(px[0].result.error.find("flow step told to fail") != std::string::npos);
    const auto fp = c.flow(f.flow_id);
    CHECK(fp->dead_lettered == 1);
    CHECK(fp->cancelled == 3);
    CHECK(fp->succeeded == 2);
    // The order and one-ending checks (a failing step logs its end before it throws).
    check_invariants(db);
    CHECK(n1.stop() == 0);
}

TEST_CASE("flows: cycles, unknown names, self-dependencies and bad tasks are refused, nothing "
          "enqueued",
          "[flows_refuse]") {
    Db db("ax_flows_refuse");
    pg::Client c(db.conninfo);
    auto refused = [&](std::vector<pg::FlowTask> g, const std::string& want) {
        try {
            c.enqueue_flow("bad", g);
            FAIL("enqueued: " + want);
        } catch (const std::invalid_argument& e) {
            INFO(e.what());
            CHECK(std::string(e.what()).find(want) != std::string::npos);
        }
    };
    refused({step("a", {"c"}), step("b", {"a"}), step("c", {"b"}), step("z", {})},
            "the dependencies form a cycle: 'a' depends on 'c' depends on 'b' depends on 'a'");
    refused({step("a", {}), step("b", {"nope"})},
            "task 'b' depends on 'nope', which is not a task of this flow");
    refused({step("a", {"a"})}, "task 'a' depends on itself");
    refused({step("a", {}), step("a", {})}, "task name 'a' appears twice");
    refused({step("", {})}, "name must be 1..200 bytes");
    auto delayed = step("a", {});
    delayed.task.delay = 10ms;
    refused({delayed}, "takes no delay, run_at or idempotency_key");
    auto bad_kind = step("a", {});
    bad_kind.task.kind = "";
    refused({bad_kind}, "kind");
    // A big cycle behind a long valid chain: found, named.
    std::vector<std::string> names;
    for (int i = 0; i < 2000; ++i)
        names.push_back("t" + std::to_string(i));
    std::vector<pg::FlowTask> chain;
    for (int i = 0; i < 2000; ++i)
        chain.push_back(step(names[static_cast<std::size_t>(i)],
                             {names[static_cast<std::size_t>((i + 1999) % 2000)]}));
    refused(chain, "the dependencies form a cycle");
    auto keyed = step("a", {});
    keyed.task.group_key = "t1";
    refused({keyed}, "group_key");
    auto long_group = step("a", {});
    const std::string g201(201, 'g');
    long_group.task.group = g201;
    refused({long_group}, "group");

    // The SQL API: SQLSTATE 22023 and the same messages.
    db.conn.exec("CREATE FUNCTION t_try(j jsonb) RETURNS text LANGUAGE plpgsql AS $$ BEGIN "
                 "PERFORM ax.enqueue_flow('x', j); RETURN 'ok'; EXCEPTION WHEN OTHERS THEN "
                 "RETURN SQLSTATE || ' ' || SQLERRM; END $$");
    auto sql = [&](const std::string& j) {
        return std::string(db.conn.exec(("SELECT t_try('" + j + "'::jsonb)").c_str()).text(0, 0));
    };
    CHECK(
        sql(R"([{"name":"a","kind":"k","depends_on":["b"]},{"name":"b","kind":"k","depends_on":["a"]}])") ==
        "22023 ax.enqueue_flow: the dependencies form a cycle: 'a' depends on 'b' depends on "
        "'a'");
    CHECK(sql(R"([{"name":"a","kind":"k","depends_on":["x"]}])") ==
          "22023 ax.enqueue_flow: task 'a' depends on 'x', which is not a task of this flow");
    CHECK(sql(R"([{"name":"a","kind":"k","depends_on":["a"]}])") ==
          "22023 ax.enqueue_flow: task 'a' depends on itself");
    CHECK(sql(R"([{"name":"a"}])") == "22023 ax.enqueue_flow: task 1: kind must be a string");
    CHECK(sql(R"({"name":"a"})") == "22023 ax.enqueue_flow: tasks must be a JSON array of objects");
    CHECK(sql(R"([{"name":"a","kind":"k","priority":7}])") ==
          "22023 ax.enqueue_flow: task 1 ('a'): priority must be 0 (high), 1 (normal) or 2 (low)");
    CHECK(sql(R"([{"name":"a","kind":"k","group_key":"t1"}])") ==
          "22023 ax.enqueue_flow: task 1 ('a'): group_key needs a group_name (a key partitions a "
          "group)");
    CHECK(sql(R"([{"name":"a","kind":"k","group_name":")" + g201 + R"("}])") ==
          "22023 ax.enqueue_flow: task 1 ('a'): group_name must be at most 200 bytes");
    CHECK(sql(R"([{"name":"a","kind":"k","group_name":7}])") ==
          "22023 ax.enqueue_flow: task 1: group_name must be a string");
    // A misspelt field is refused, not ignored (it would have run b before a).
    CHECK(sql(R"([{"name":"a","kind":"k"},{"name":"b","kind":"k","depend_on":["a"]}])") ==
          "22023 ax.enqueue_flow: task 2: unknown field 'depend_on' (fields: name, kind, payload, "
          "priority, tags, max_attempts, timeout_ms, depends_on, run_anyway, group_name, "
          "group_key)");
    // The arrays form: one group element per task.
    try {
        db.conn.exec("SELECT * FROM ax.enqueue_flow_arrays('x', ARRAY['a','b'], ARRAY['k','k'], "
                     "p_groups => ARRAY['g'])");
        FAIL("a short p_groups was accepted");
    } catch (const pg::Error& e) {
        CHECK_THAT(e.what(), Catch::Contains("the task arrays need one element per name (2)"));
    }
    // Nothing of any of them was written.
    CHECK(db.scalar("SELECT count(*) FROM ax.flows") == 0);
    CHECK(db.scalar("SELECT count(*) FROM ax.flow_tasks") == 0);
    CHECK(db.scalar("SELECT count(*) FROM ax.flow_waiting") == 0);
    CHECK(db.scalar("SELECT count(*) FROM ax.tasks") == 0);
    // And a good one after them works.
    CHECK(sql(R"([{"name":"a","kind":"k"},{"name":"b","kind":"k","depends_on":["a"]}])") == "ok");
    CHECK(db.scalar("SELECT count(*) FROM ax.tasks") == 1);
}

TEST_CASE("flows: a flow task's group and key put it under the group's limits", "[flows_groups]") {
    Db db("ax_flows_groups");
    pg::Client c(db.conninfo);
    c.set_limit("g", {.max_running = 0}); // held: none of g's tasks may start yet
    // head (group h, key x, no limit) -> 8 steps of g, keys k0 and k1 in turn -> tail (no group).
    // The steps' names start with their key, for the overlap check below.
    std::vector<std::string> names;
    for (int i = 0; i < 8; ++i)
        names.push_back("k" + std::to_string(i % 2) + "_s" + std::to_string(i));
    std::vector<pg::FlowTask> g = {step("head", {})};
    g[0].task.group = "h";
    g[0].task.group_key = "x";
    std::vector<std::string_view> all;
    for (const std::string& n : names) {
        g.push_back(step(n, {"head"}, "sleep:60"));
        g.back().task.group = "g";
        g.back().task.group_key = std::string_view(n).substr(0, 2);
        all.push_back(n);
    }
    g.push_back(step("tail", all));
    const auto f = c.enqueue_flow("grouped", g);
    CHECK(db.scalar("SELECT count(*) FROM ax.tasks WHERE grp = 'h' AND grp_key = 'x' AND id = " +
                    std::to_string(f.ids[0])) == 1);
    CHECK(db.scalar("SELECT count(*) FROM ax.flow_waiting WHERE grp = 'g'") == 8);
    CHECK(db.scalar("SELECT count(*) FROM ax.flow_waiting WHERE grp = 'g' AND grp_key = 'k1'") ==
          4);
    CHECK(db.scalar("SELECT count(*) FROM ax.flow_waiting WHERE grp IS NULL") == 1); // tail
    // The same from SQL (JSON): a, then b, both in g.
    db.conn.exec(
        R"(SELECT * FROM ax.enqueue_flow('sql', '[{"name":"k0_a","kind":"flow","payload":"sleep:60","group_name":"g","group_key":"k0"},{"name":"k1_b","kind":"flow","payload":"sleep:60","group_name":"g","group_key":"k1","depends_on":["k0_a"]}]'::jsonb))");

    Proc n1(db.conninfo, "g1"), n2(db.conninfo, "g2");
    // head runs; its 8 dependents are released in g and held there by the limit, as is k0_a.
    const auto queued_in_g = [&] {
        for (const auto& l : c.limits())
            if (l.group == "g")
                return l.queued;
        return std::int64_t{-1};
    };
    REQUIRE(wait_until([&] { return queued_in_g() == 9; }, 60s));
    CHECK(db.scalar("SELECT count(*) FROM flow_log l JOIN ax.flow_tasks f ON f.task_id = "
                    "l.task_id WHERE f.name LIKE 'k_\\_%'") == 0);
    CHECK(c.result(f.ids[0])->state == pg::TaskState::succeeded);
    // One at a time per key: each key's tasks run one after another, across both nodes.
    c.set_limit("g", {.max_running = 1, .per_key = true});
    REQUIRE(wait_until([&] { return all_finished(c); }, 120s));
    CHECK(db.scalar("SELECT count(*) FROM flow_log l JOIN ax.flow_tasks f ON f.task_id = "
                    "l.task_id WHERE f.name LIKE 'k_\\_%' AND l.ev = 'start'") == 10);
    CHECK(db.scalar(R"(
        WITH t AS (SELECT f.task_id, left(f.name, 2) AS k, s.at AS st, e.at AS en
                     FROM ax.flow_tasks f
                     JOIN flow_log s ON s.task_id = f.task_id AND s.ev = 'start'
                     JOIN flow_log e ON e.task_id = f.task_id AND e.ev = 'end'
                    WHERE f.name LIKE 'k_\_%')
        SELECT count(*) FROM t a JOIN t b ON a.k = b.k AND a.task_id <> b.task_id
                                         AND b.st >= a.st AND b.st < a.en)") == 0);
    CHECK(c.flow(f.flow_id)->succeeded == 10);
    check_invariants(db);
    CHECK(n1.stop() == 0);
    CHECK(n2.stop() == 0);
}

TEST_CASE("flows: three node processes and two producers race over many flows", "[flows_race]") {
    Db db("ax_flows_race");
    Proc n1(db.conninfo, "r1"), n2(db.conninfo, "r2"), n3(db.conninfo, "r3");
    // Each flow: root -> 8 -> join -> 4 -> last; 15 tasks; 2 producers x 40 flows.
    auto producer = [&](int who) {
        pg::Client c(db.conninfo);
        std::vector<std::string> names = {"root", "join", "last"};
        for (int i = 0; i < 8; ++i)
            names.push_back("m" + std::to_string(i));
        for (int i = 0; i < 4; ++i)
            names.push_back("t" + std::to_string(i));
        for (int f = 0; f < 40; ++f) {
            std::vector<pg::FlowTask> g;
            g.push_back(step(names[0], {}));
            std::vector<std::string_view> mids, tails;
            for (int i = 0; i < 8; ++i) {
                g.push_back(step(names[static_cast<std::size_t>(3 + i)], {names[0]}));
                mids.push_back(names[static_cast<std::size_t>(3 + i)]);
            }
            g.push_back(step(names[1], mids));
            for (int i = 0; i < 4; ++i) {
                g.push_back(step(names[static_cast<std::size_t>(11 + i)], {names[1]}));
                tails.push_back(names[static_cast<std::size_t>(11 + i)]);
            }
            g.push_back(step(names[2], tails));
            c.enqueue_flow("race-" + std::to_string(who) + "-" + std::to_string(f), g);
        }
    };
    std::thread p1(producer, 1), p2(producer, 2);
    p1.join();
    p2.join();
    pg::Client c(db.conninfo);
    REQUIRE(
        wait_until([&] { return db.scalar("SELECT count(*) FROM ax.history") == 80 * 15; }, 120s));
    REQUIRE(all_finished(c));
    CHECK(db.scalar("SELECT count(*) FROM ax.history WHERE state = 1") == 80 * 15);
    CHECK(db.scalar("SELECT count(*) FROM flow_log WHERE ev = 'start'") == 80 * 15); // once each
    CHECK(db.scalar("SELECT count(DISTINCT node) FROM flow_log") >= 2);
    check_invariants(db);
    CHECK(n1.stop() == 0);
    CHECK(n2.stop() == 0);
    CHECK(n3.stop() == 0);
}

TEST_CASE("flows: kill -9 of a node mid-flow and a server restart; every task ends once",
          "[flows_kill]") {
    Db db("ax_flows_kill");
    pg::Client c(db.conninfo);
    // 20 flows: root -> 10 sleeping steps -> join -> 5 -> last.
    std::vector<std::string> names = {"root", "join", "last"};
    for (int i = 0; i < 10; ++i)
        names.push_back("m" + std::to_string(i));
    for (int i = 0; i < 5; ++i)
        names.push_back("t" + std::to_string(i));
    for (int f = 0; f < 20; ++f) {
        std::vector<pg::FlowTask> g;
        g.push_back(step(names[0], {}));
        std::vector<std::string_view> mids, tails;
        for (int i = 0; i < 10; ++i) {
            g.push_back(step(names[static_cast<std::size_t>(3 + i)], {names[0]}, "sleep:40"));
            mids.push_back(names[static_cast<std::size_t>(3 + i)]);
        }
        g.push_back(step(names[1], mids));
        for (int i = 0; i < 5; ++i) {
            g.push_back(step(names[static_cast<std::size_t>(13 + i)], {names[1]}, "sleep:20"));
            tails.push_back(names[static_cast<std::size_t>(13 + i)]);
        }
        g.push_back(step(names[2], tails));
        c.enqueue_flow("kill-" + std::to_string(f), g);
    }
    const std::int64_t total = 20 * 18;
    auto victim = std::make_unique<Proc>(db.conninfo, "victim");
    Proc other(db.conninfo, "survivor");
    REQUIRE(wait_until(
        [&] {
            return db.scalar("SELECT count(*) FROM flow_log WHERE ev = 'start' AND node = "
                             "'victim'") >= 20;
        },
        60s));
    victim->kill9(); // mid-flow: it held claimed, running and finished-but-unacknowledged steps
    const std::int64_t at_kill = db.scalar("SELECT count(*) FROM ax.history");
    std::printf("  killed the node with %lld of %lld flow tasks ended\n",
                static_cast<long long>(at_kill), static_cast<long long>(total));
    CHECK(at_kill < total);
    if (const char* ctl = std::getenv("AX_PG_CTL")) {
        REQUIRE(wait_until(
            [&] { return db.scalar("SELECT count(*) FROM ax.history") >= at_kill + 20; }, 60s));
        REQUIRE(std::system((std::string(ctl) + " restart >/dev/null").c_str()) == 0);
        std::printf("  server restarted with %lld ended\n",
                    static_cast<long long>(db.scalar("SELECT count(*) FROM ax.history")));
    } else {
        WARN("AX_PG_CTL not set (run under scripts/pg-server.sh): restart part skipped");
    }
    pg::Client c2(db.conninfo);
    REQUIRE(
        wait_until([&] { return db.scalar("SELECT count(*) FROM ax.history") == total; }, 120s));
    REQUIRE(all_finished(c2));
    CHECK(db.scalar("SELECT count(*) FROM ax.history WHERE state = 1") == total);
    CHECK(db.scalar("SELECT count(*) FROM ax.dead_letters") == 0);
    // Steps the victim held ran again elsewhere: more starts than tasks, each task ended once.
    std::printf("  %lld starts for %lld tasks\n",
                static_cast<long long>(db.scalar("SELECT count(*) FROM flow_log WHERE ev = "
                                                 "'start'")),
                static_cast<long long>(total));
    check_invariants(db);
    CHECK(other.stop() == 0);
}

TEST_CASE("flows: a finished flow's rows are pruned once its tasks left the history; a running "
          "flow's are kept",
          "[flows_prune]") {
    Db db("ax_flows_prune");
    pg::Client c(db.conninfo);
    const std::vector<pg::FlowTask> done_graph = {step("a", {}), step("b", {"a"}),
                                                  step("c", {"a", "b"})};
    const pg::FlowEnqueued done = c.enqueue_flow("done", done_graph);
    {
        Proc n(db.conninfo, "p1");
        REQUIRE(wait_until([&] { return c.flow(done.flow_id)->finished; }, 60s));
        CHECK(n.stop() == 0);
    }
    // Still running: its head is of a kind no node runs (pending), its dependent waits.
    std::vector<pg::FlowTask> running_graph = {step("h", {}), step("t", {"h"})};
    running_graph[0].task.kind = "nobody";
    const pg::FlowEnqueued running = c.enqueue_flow("running", running_graph);
    auto rows = [&](std::int64_t flow) {
        const std::string f = std::to_string(flow);
        return db.scalar("SELECT count(*) FROM ax.flow_tasks WHERE flow_id = " + f) +
               db.scalar("SELECT count(*) FROM ax.flows WHERE id = " + f);
    };
    CHECK(rows(done.flow_id) == 4);
    CHECK(rows(running.flow_id) == 3);
    // Maintenance as a node with history_retention 300 ms runs it (no node runs now, so none
    // sets the ring's retention back), until the finished flow's rows are gone, and then until
    // the running flow is more than a second old: it is past the retention, and kept.
    auto maintain = [&] { db.scalar("SELECT pruned FROM ax.maintain(300, 1000)"); };
    REQUIRE(wait_until(
        [&] {
            maintain();
            return rows(done.flow_id) == 0;
        },
        60s));
    CHECK(db.scalar("SELECT count(*) FROM ax.history WHERE id IN (" + std::to_string(done.ids[0]) +
                    "," + std::to_string(done.ids[1]) + "," + std::to_string(done.ids[2]) + ")") ==
          0);
    REQUIRE(wait_until(
        [&] {
            maintain();
            return db.scalar("SELECT count(*) FROM ax.flows WHERE id = " +
                             std::to_string(running.flow_id) +
                             " AND created_at < now() - interval '1 second'") == 1;
        },
        60s));
    CHECK(rows(running.flow_id) == 3);
    const auto prog = c.flow(running.flow_id);
    REQUIRE(prog.has_value());
    CHECK(prog->waiting == 1);
    CHECK(prog->pending == 1);
    // Once it ends (its head cancelled, and with it its dependent) and the history lets its
    // tasks go, its rows go too.
    CHECK(c.cancel(running.ids[0]) == pg::CancelResult::cancelled);
    CHECK(db.scalar("SELECT count(*) FROM ax.history WHERE id = " +
                    std::to_string(running.ids[1])) == 1);
    REQUIRE(wait_until(
        [&] {
            maintain();
            return rows(running.flow_id) == 0;
        },
        60s));
    CHECK(db.scalar("SELECT count(*) FROM ax.flow_waiting") == 0);
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
    g_node_exe = self.substr(0, self.rfind('/') + 1) + "pg_test_node";
    return Catch::Session().run(argc, argv);
}
