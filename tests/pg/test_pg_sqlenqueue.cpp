// Enqueue inside the application's own transaction (issue 28, part 1): the SQL API
// (ax.enqueue, ax.enqueue_many) against a real PostgreSQL (scripts/pg-server.sh exports
// AX_PG_CONNINFO). Without AX_PG_CONNINFO the server tests are skipped with a visible message
// (exit 77, which ctest reports as skipped). Each test case works in a database of its own.

#define CATCH_CONFIG_RUNNER
#include <atomic>
#include <ax/pg/pg.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
namespace pg = ax::pg;

namespace {

std::string g_base;         // AX_PG_CONNINFO
std::string g_producers;    // AX_PRODUCERS_DIR: examples/producers
std::string g_node_modules; // AX_PRODUCERS_NODE_MODULES: scripts/producers-deps.sh's node_modules

/// A fresh database with the ax schema.
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

/// What a failed statement reported: SQLSTATE, the column field (the argument's name) and the
/// primary message; empty fields when it succeeded.
struct Failure {
    std::string state, column, message;
};

Failure fails(pg::detail::Connection& c, const std::string& q) {
    pg::detail::Result r(PQexec(c.get(), q.c_str()));
    const ExecStatusType st = r.get() == nullptr ? PGRES_FATAL_ERROR : r.status();
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK)
        return {};
    auto field = [&](int code) {
        const char* v = PQresultErrorField(r.get(), code);
        return std::string(v != nullptr ? v : "");
    };
    return {field(PG_DIAG_SQLSTATE), field(PG_DIAG_COLUMN_NAME), field(PG_DIAG_MESSAGE_PRIMARY)};
}

/// Notifications on channel ax_wake that `c` (LISTENing) has received so far.
int wake_notifications(pg::detail::Connection& c) {
    PQconsumeInput(c.get());
    int n = 0;
    while (PGnotify* note = PQnotifies(c.get())) {
        if (std::string(note->relname) == "ax_wake")
            ++n;
        PQfreemem(note);
    }
    return n;
}

pg::NodeOptions quick_node(const Db& db, const std::string& name) {
    pg::NodeOptions o;
    o.conninfo = db.conninfo;
    o.name = name;
    o.scheduler.min_workers = 2;
    o.scheduler.max_workers = 2;
    o.scheduler.retry_base_delay = 20ms;
    o.scheduler.retry_jitter = 10ms;
    o.poll_interval = 100ms;
    o.maintenance_interval = 200ms;
    o.reconnect_base = 20ms;
    o.stop_grace = 5000ms;
    return o;
}

/// Runs `cmd` through the shell; returns its output (stdout and stderr), its exit status in `rc`.
std::string run_capture(const std::string& cmd, int& rc) {
    std::string out;
    FILE* p = popen((cmd + " 2>&1").c_str(), "r");
    if (p == nullptr) {
        rc = -1;
        return out;
    }
    char buf[4096];
    while (std::size_t n = std::fread(buf, 1, sizeof buf, p))
        out.append(buf, n);
    const int st = pclose(p);
    rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
    return out;
}

/// Points libpq's PG* variables (which psql, psycopg2 and Node's pg all read) at `conninfo`.
void export_pg_env(const std::string& conninfo) {
    char* err = nullptr;
    PQconninfoOption* opts = PQconninfoParse(conninfo.c_str(), &err);
    REQUIRE(opts != nullptr);
    for (PQconninfoOption* o = opts; o->keyword != nullptr; ++o)
        if (o->val != nullptr && o->envvar != nullptr)
            setenv(o->envvar, o->val, 1);
    PQconninfoFree(opts);
}

/// A Python that can import psycopg2 (Debian's python3-psycopg2 is /usr/bin/python3's), or "".
std::string python_with_psycopg2() {
    for (const char* py : {"/usr/bin/python3", "python3"}) {
        int rc = 0;
        run_capture(std::string(py) + " -c 'import psycopg2'", rc);
        if (rc == 0)
            return py;
    }
    return "";
}

/// Runs a producer of examples/producers against a fresh database, then an ax node: exactly the
/// tasks of its committed transaction run, each once, with their payloads; nothing of its rolled
/// back one exists anywhere.
void check_producer(const std::string& name, const std::string& cmd) {
    const std::string dbname = "ax_t_producer_" + name;
    Db db(dbname);
    export_pg_env(db.conninfo);
    int rc = 0;
    const std::string out = run_capture(cmd, rc);
    INFO(cmd);
    INFO(out);
    REQUIRE(rc == 0);
    std::set<std::int64_t> committed, rolled_back;
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);) {
        std::istringstream words(line);
        std::string what;
        words >> what;
        auto& into = what == "committed" ? committed : rolled_back;
        if (what != "committed" && what != "rolledback")
            continue;
        for (std::int64_t id = 0; words >> id;)
            into.insert(id);
    }
    REQUIRE(committed.size() == 3);
    REQUIRE(rolled_back.size() == 1);
    CHECK(db.scalar("SELECT count(*) FROM orders") == 1); // the rolled back order is gone too
    CHECK(db.scalar("SELECT count(*) FROM ax.tasks") == 3);

    std::mutex m;
    std::map<std::int64_t, std::string> ran;
    int runs = 0;
    pg::Node node(quick_node(db, name));
    node.handle("ship", [&](pg::Job& j) {
        std::lock_guard lock(m);
        ran.emplace(j.id(), std::string(j.payload()));
        ++runs;
    });
    node.start();
    pg::Client c(db.conninfo);
    REQUIRE(wait_until([&] { return c.counts().succeeded == 3; }, 20s));
    node.stop();
    std::lock_guard lock(m);
    CHECK(runs == 3);
    std::set<std::int64_t> ran_ids;
    for (const auto& [id, payload] : ran) {
        ran_ids.insert(id);
        CHECK(payload.rfind(name + ": ", 0) == 0); // "<producer>: order 1", "... gift wrap"
    }
    CHECK(ran_ids == committed);
    CHECK(c.counts().live() == 0);
    for (const std::int64_t id : rolled_back) {
        CHECK(!c.query(id));
        CHECK(committed.count(id) == 0);
    }
    CHECK(db.scalar("SELECT count(*) FROM ax.idem_keys") == 1); // the committed order's key
}

} // namespace

TEST_CASE("ax.enqueue: named arguments and defaults, every field stored, keys answer the first "
          "task; ax.enqueue_many in input order",
          "[pg][sql_api]") {
    Db db("ax_t_sql_api");
    auto s = db.sql();
    const std::int64_t a =
        s.exec("SELECT ax.enqueue(kind => 'resize', payload => 'abc')").int64(0, 0);
    {
        auto r = s.exec(("SELECT kind, encode(payload, 'escape'), priority, max_attempts, "
                         "timeout_ms, tags::text, idem_key IS NULL, node_id IS NULL FROM ax.tasks "
                         "WHERE id = " +
                         std::to_string(a))
                            .c_str());
        CHECK(r.text(0, 1) == "abc");
        CHECK(r.text(0, 2) == "1");
        CHECK(r.text(0, 3) == "4");
        CHECK(r.text(0, 4) == "0");
        CHECK(r.text(0, 5) == "{}");
        CHECK(r.text(0, 6) == "t");
        CHECK(r.text(0, 7) == "t");
    }
    // Every argument, positionally; a run_at an hour ahead is scheduled, not claimable.
    const std::int64_t b =
        s.exec("SELECT ax.enqueue('thumb', '\\x00ff', 0, now() + interval '1 hour', 'key-1', "
               "'{gpu,bigmem}', 3, 1500)")
            .int64(0, 0);
    {
        auto r = s.exec(("SELECT kind, encode(payload, 'hex'), priority, max_attempts, timeout_ms, "
                         "tags::text, idem_key, round(extract(epoch FROM run_at - now()) / 60) "
                         "FROM ax.tasks WHERE id = " +
                         std::to_string(b))
                            .c_str());
        CHECK(r.text(0, 0) == "thumb");
        CHECK(r.text(0, 1) == "00ff");
        CHECK(r.text(0, 2) == "0");
        CHECK(r.text(0, 3) == "3");
        CHECK(r.text(0, 4) == "1500");
        CHECK(r.text(0, 5) == "{gpu,bigmem}");
        CHECK(r.text(0, 6) == "key-1");
        CHECK(r.text(0, 7) == "60");
    }
    pg::Client c(db.conninfo);
    CHECK(c.query(b)->state == pg::TaskState::scheduled);
    // A past run_at is now (it does not jump ahead of older tasks); NULLs take the defaults;
    // priority by name.
    const std::int64_t p =
        s.exec(
             "SELECT ax.enqueue(kind => 'k', run_at => now() - interval '1 day', payload => NULL, "
             "priority => ax.priority('High'), tags => NULL, max_attempts => NULL)")
            .int64(0, 0);
    {
        auto r = s.exec(("SELECT run_at > now() - interval '1 minute', max_attempts, payload = '', "
                         "tags::text FROM ax.tasks WHERE id = " +
                         std::to_string(p))
                            .c_str());
        CHECK(r.text(0, 0) == "t");
        CHECK(r.text(0, 1) == "4");
        CHECK(r.text(0, 2) == "t");
        CHECK(r.text(0, 3) == "{}");
    }
    CHECK(db.scalar("SELECT priority FROM ax.tasks WHERE id = " + std::to_string(p)) == 0);
    // The key answers the first task's ID and adds nothing; '' is no key.
    CHECK(s.exec("SELECT ax.enqueue(kind => 'other', idempotency_key => 'key-1')").int64(0, 0) ==
          b);
    CHECK(db.scalar("SELECT count(*) FROM ax.tasks") == 3);
    const std::int64_t e =
        s.exec("SELECT ax.enqueue(kind => 'k', idempotency_key => '')").int64(0, 0);
    CHECK(db.scalar("SELECT count(*) FROM ax.tasks WHERE idem_key IS NULL AND id = " +
                    std::to_string(e)) == 1);
    // Client::enqueue and the SQL API share the arbiter.
    CHECK(c.enqueue({.kind = "x", .idempotency_key = "key-1"}).id == b);
    CHECK(c.enqueue({.kind = "x", .idempotency_key = "key-1"}).existed);
    const auto from_client = c.enqueue({.kind = "x", .idempotency_key = "key-2"});
    CHECK(s.exec("SELECT ax.enqueue(kind => 'y', idempotency_key => 'key-2')").int64(0, 0) ==
          from_client.id);

    // enqueue_many: one row per task in input order, keyed and not, mixed.
    auto r = s.exec("SELECT ord, id, existed FROM ax.enqueue_many("
                    "kind => array['m1', 'm2', 'm3', 'm4'], "
                    "payload => array['p1', NULL, 'p3', 'p4']::bytea[], "
                    "priority => array[2, 0, NULL, 1], "
                    "idempotency_key => array[NULL, 'key-1', 'key-3', ''], "
                    "tags => array['gpu,bigmem', '', NULL, 'x'], "
                    "max_attempts => array[1, 2, 3, 4], timeout_ms => array[10, 20, 30, 40])");
    REQUIRE(r.rows() == 4);
    for (int i = 0; i < 4; ++i)
        CHECK(r.int64(i, 0) == i + 1);
    CHECK(r.int64(1, 1) == b);
    CHECK(r.text(1, 2) == "t");
    CHECK(r.text(0, 2) == "f");
    CHECK(r.text(2, 2) == "f");
    CHECK(r.int64(2, 1) > r.int64(0, 1)); // new IDs ascend in input order
    CHECK(r.int64(3, 1) > r.int64(2, 1));
    {
        auto t = s.exec(("SELECT kind, encode(payload, 'escape'), priority, tags::text, "
                         "max_attempts, timeout_ms, coalesce(idem_key, '-') FROM ax.tasks WHERE "
                         "id IN (" +
                         std::to_string(r.int64(0, 1)) + "," + std::to_string(r.int64(2, 1)) + "," +
                         std::to_string(r.int64(3, 1)) + ") ORDER BY id")
                            .c_str());
        REQUIRE(t.rows() == 3);
        CHECK(t.text(0, 0) == "m1");
        CHECK(t.text(0, 1) == "p1");
        CHECK(t.text(0, 2) == "2");
        CHECK(t.text(0, 3) == "{gpu,bigmem}");
        CHECK(t.text(0, 4) == "1");
        CHECK(t.text(0, 5) == "10");
        CHECK(t.text(0, 6) == "-");
        CHECK(t.text(1, 0) == "m3");
        CHECK(t.text(1, 2) == "1");
        CHECK(t.text(1, 3) == "{}");
        CHECK(t.text(1, 6) == "key-3");
        CHECK(t.text(2, 3) == "{x}");
        CHECK(t.text(2, 6) == "-");
    }
    // Without keys: the INSERT-only path, IDs in input order.
    auto u = s.exec("SELECT ord, id, existed FROM ax.enqueue_many(kind => "
                    "array(SELECT 'bulk' FROM generate_series(1, 1000)))");
    REQUIRE(u.rows() == 1000);
    for (int i = 0; i < 1000; ++i) {
        CHECK(u.int64(i, 0) == i + 1);
        CHECK(u.text(i, 2) == "f");
        if (i > 0)
            CHECK(u.int64(i, 1) > u.int64(i - 1, 1));
    }
    // Each row's ID is its own task's (not only ascending): task i of kind 'b<i>', payload i,
    // lane i % 3, and with some but not all arrays given (NULL arrays pad the defaults). The rows
    // are read by a second statement (the call's own statement cannot see what it inserted).
    s.exec("CREATE TEMP TABLE own AS SELECT * FROM ax.enqueue_many(kind => array(SELECT 'b' || "
           "g FROM generate_series(1, 300) g), payload => array(SELECT convert_to(g::text, "
           "'UTF8') FROM generate_series(1, 300) g), priority => array(SELECT g % 3 FROM "
           "generate_series(1, 300) g))");
    auto own = s.exec("SELECT count(*), count(*) FILTER (WHERE t.kind = 'b' || r.ord AND "
                      "encode(t.payload, 'escape') = r.ord::text AND t.priority = r.ord % 3 AND "
                      "t.max_attempts = 4 AND t.tags = '{}' AND NOT r.existed) "
                      "FROM own r JOIN ax.tasks t ON t.id = r.id");
    CHECK(own.int64(0, 0) == 300);
    CHECK(own.int64(0, 1) == 300);
    CHECK(s.exec("SELECT count(*) FROM ax.enqueue_many(kind => '{}')").int64(0, 0) == 0);
}

TEST_CASE("ax.enqueue and ax.enqueue_many: a bad argument raises 22023 naming it and writes "
          "nothing",
          "[pg][sql_api]") {
    Db db("ax_t_sql_bad");
    auto s = db.sql();
    s.exec("SELECT ax.enqueue(kind => 'taken', idempotency_key => 'dup')");
    const std::int64_t seq0 = db.scalar("SELECT count(*) FROM ax.tasks");
    struct Case {
        const char* call;
        const char* column;
        const char* says;
    };
    const Case cases[] = {
        {"ax.enqueue(kind => '')", "kind", "kind = '': must be 1..200 bytes"},
        {"ax.enqueue(kind => NULL)", "kind", "kind = NULL"},
        {"ax.enqueue(kind => repeat('k', 201))", "kind", "must be 1..200 bytes"},
        {"ax.enqueue(kind => 'k', payload => convert_to(repeat('x', 1048577), 'UTF8'))", "payload",
         "payload = 1048577 bytes: exceeds ax.max_payload_bytes (1048576)"},
        {"ax.enqueue(kind => 'k', priority => 3)", "priority", "priority = 3"},
        {"ax.enqueue(kind => 'k', priority => -1)", "priority", "must be 0 (high)"},
        {"ax.enqueue(kind => 'k', priority => ax.priority('urgent'))", "priority", "'urgent'"},
        {"ax.enqueue(kind => 'k', run_at => now() + interval '367 days')", "run_at",
         "at most 366 days ahead"},
        {"ax.enqueue(kind => 'k', run_at => 'infinity')", "run_at", "run_at = infinity"},
        {"ax.enqueue(kind => 'k', idempotency_key => repeat('x', 513))", "idempotency_key",
         "513 bytes"},
        {"ax.enqueue(kind => 'k', tags => '{ok,\"a,b\"}')", "tags", "'a,b'"},
        {"ax.enqueue(kind => 'k', tags => '{\"\"}')", "tags", "each tag must be 1..100 bytes"},
        {"ax.enqueue(kind => 'k', tags => array[repeat('t', 101)])", "tags", "1..100 bytes"},
        {"ax.enqueue(kind => 'k', tags => array[NULL]::text[])", "tags", "tags = NULL"},
        {"ax.enqueue(kind => 'k', tags => '{{a},{b}}')", "tags", "one-dimensional"},
        {"ax.enqueue(kind => 'k', max_attempts => 0)", "max_attempts", "must be in 1..1000"},
        {"ax.enqueue(kind => 'k', max_attempts => 1001)", "max_attempts", "1001"},
        {"ax.enqueue(kind => 'k', timeout_ms => -1)", "timeout_ms", "must be in 0..86400000"},
        {"ax.enqueue(kind => 'k', timeout_ms => 86400001)", "timeout_ms", "86400001"},
        {"ax.enqueue_many(kind => NULL)", "kind", "one-dimensional array"},
        {"ax.enqueue_many(kind => array['a', 'b'], priority => array[1])", "priority",
         "priority has 1 elements for 2 kinds"},
        {"ax.enqueue_many(kind => array['a', 'b'], payload => '{{a},{b}}'::bytea[])", "payload",
         "payload has"},
        {"ax.enqueue_many(kind => array['a', NULL])", "kind", "kind[2] = NULL"},
        {"ax.enqueue_many(kind => array['a', 'b'], priority => array[1, 7])", "priority",
         "priority[2] = 7"},
        {"ax.enqueue_many(kind => array['a', 'b'], run_at => array[NULL, now() + interval '2 "
         "years'])",
         "run_at", "run_at[2]"},
        {"ax.enqueue_many(kind => array['a', 'b'], tags => array['ok', 'a,,b'])", "tags",
         "tags[2] = 'a,,b'"},
        {"ax.enqueue_many(kind => array['a'], tags => array['a{'])", "tags", "tags[1]"},
        {"ax.enqueue_many(kind => array['a', 'b'], tags => array['ok', repeat('y', 101)])", "tags",
         "tags[2]"},
        {"ax.enqueue_many(kind => array['a', 'b'], max_attempts => array[4, 0])", "max_attempts",
         "max_attempts[2] = 0"},
        {"ax.enqueue_many(kind => array['a', 'b'], timeout_ms => array[-5, 0])", "timeout_ms",
         "timeout_ms[1] = -5"},
        {"ax.enqueue_many(kind => array['a', 'b'], idempotency_key => array['z', 'z'])",
         "idempotency_key", "appears twice in one call"},
        {"ax.enqueue_many(kind => array['a', 'b'], idempotency_key => array['new', "
         "repeat('x', 600)])",
         "idempotency_key", "idempotency_key[2] = 600 bytes"},
        {"ax.enqueue_many(kind => array['a', 'b'], payload => array['', "
         "convert_to(repeat('x', 1048577), 'UTF8')])",
         "payload", "payload[2] = 1048577 bytes"},
        {"ax.enqueue(kind => 'k', group_name => repeat('g', 201))", "group_name",
         "group_name = 201 bytes: must be at most 200 bytes"},
        {"ax.enqueue(kind => 'k', group_name => 'g', group_key => repeat('t', 201))", "group_key",
         "group_key = 201 bytes"},
        {"ax.enqueue(kind => 'k', group_key => 'tenant-1')", "group_key",
         "group_key = 'tenant-1': needs a group_name"},
        {"ax.enqueue(kind => 'k', group_name => '', group_key => 'tenant-1')", "group_key",
         "needs a group_name"},
        {"ax.enqueue_many(kind => array['a', 'b'], group_name => array['g'])", "group_name",
         "group_name has 1 elements for 2 kinds"},
        {"ax.enqueue_many(kind => array['a', 'b'], group_name => array['g', repeat('g', 201)])",
         "group_name", "group_name[2] = 201 bytes: must be at most 200 bytes"},
        {"ax.enqueue_many(kind => array['a', 'b'], group_name => array['g', NULL], group_key => "
         "array['x', 'y'])",
         "group_key", "group_key[2] = 'y': needs a group_name"},
        {"ax.enqueue_many(kind => array['a', 'b'], idempotency_key => array['k1', 'k2'], "
         "group_name => array['g', 'g'], group_key => array[repeat('t', 201), ''])",
         "group_key", "group_key[1] = 201 bytes"},
    };
    for (const Case& k : cases) {
        INFO(k.call);
        const Failure f = fails(s, std::string("SELECT * FROM ") + k.call);
        CHECK(f.state == "22023");
        CHECK(f.column == k.column);
        CHECK(f.message.find(k.says) != std::string::npos);
        INFO(f.message);
    }
    // Nothing half-written: no task, no key row, whatever failed where.
    CHECK(db.scalar("SELECT count(*) FROM ax.tasks") == seq0);
    CHECK(db.scalar("SELECT count(*) FROM ax.idem_keys") == 1);
    // The payload limit is the setting ax.max_payload_bytes (database, role or session).
    s.exec("SET ax.max_payload_bytes = '10'");
    Failure f = fails(s, "SELECT ax.enqueue(kind => 'k', payload => '12345678901')");
    CHECK(f.state == "22023");
    CHECK(f.message.find("exceeds ax.max_payload_bytes (10)") != std::string::npos);
    f = fails(s, "SELECT * FROM ax.enqueue_many(kind => array['k'], payload => array['12345678901'"
                 "::bytea])");
    CHECK(f.message.find("exceeds ax.max_payload_bytes (10)") != std::string::npos);
    CHECK(fails(s, "SELECT ax.enqueue(kind => 'k', payload => '1234567890')").state.empty());
    s.exec("SET ax.max_payload_bytes = '100000000'");
    f = fails(s, "SELECT ax.enqueue(kind => 'k')");
    CHECK(f.state == "22023");
    CHECK(f.message.find("up to 67108864") != std::string::npos);
    s.exec("RESET ax.max_payload_bytes");
    CHECK(fails(s, "SELECT ax.enqueue(kind => 'k', payload => convert_to(repeat('x', 1048576), "
                   "'UTF8'))")
              .state.empty());
}

TEST_CASE("ax.enqueue and ax.enqueue_many put tasks in limit groups (migration 14): the columns, "
          "the limits' queued counts, and a node that runs them under the limit",
          "[pg][sql_api]") {
    Db db("ax_t_sql_groups");
    auto s = db.sql();
    pg::Client c(db.conninfo);
    c.set_limit("mail", {.max_running = 1, .per_key = true});
    // One call each way: positional calls written for migration 9's signature still work.
    s.exec("SELECT ax.enqueue('plain')");
    // Each mail task's payload is its key, so the handler knows which key it runs.
    s.exec("SELECT ax.enqueue(kind => 'mail', payload => 'tenant-a', group_name => 'mail', "
           "group_key => 'tenant-a')");
    s.exec("SELECT ax.enqueue(kind => 'mail', group_name => 'mail', idempotency_key => 'once')");
    s.exec("SELECT * FROM ax.enqueue_many(kind => array['mail', 'mail', 'mail', 'plain'], "
           "payload => array['tenant-a', 'tenant-b', 'tenant-b', '']::bytea[], "
           "group_name => array['mail', 'mail', 'mail', ''], "
           "group_key => array['tenant-a', 'tenant-b', 'tenant-b', NULL])");
    s.exec("SELECT * FROM ax.enqueue_many(kind => array['mail', 'mail'], "
           "payload => array['tenant-c', '']::bytea[], idempotency_key => array['k1', 'k2'], "
           "group_name => array['mail', 'mail'], group_key => array['tenant-c', NULL])");
    // Stored as Client::enqueue_many stores them: '' and NULL group mean none, NULL key is ''.
    CHECK(db.scalar("SELECT count(*) FROM ax.tasks WHERE grp IS NULL AND grp_key = ''") == 2);
    CHECK(db.scalar("SELECT count(*) FROM ax.tasks WHERE grp = 'mail'") == 7);
    CHECK(db.scalar("SELECT count(*) FROM ax.tasks WHERE grp = 'mail' AND grp_key = 'tenant-a'") ==
          2);
    CHECK(db.scalar("SELECT count(*) FROM ax.tasks WHERE grp = 'mail' AND grp_key = 'tenant-b'") ==
          2);
    CHECK(db.scalar("SELECT count(*) FROM ax.tasks WHERE grp = 'mail' AND grp_key = ''") == 2);
    CHECK(db.scalar("SELECT count(*) FROM ax.tasks WHERE idem_key = 'k1' AND grp_key = "
                    "'tenant-c'") == 1);
    // The limits see them.
    std::int64_t queued = -1;
    for (const pg::LimitInfo& l : c.limits())
        if (l.group == "mail")
            queued = l.queued;
    CHECK(queued == 7);
    // A node runs every task, never two of one key at once (limit 1 per key).
    std::mutex m;
    std::map<std::string, int> running;
    int most = 0;
    std::atomic<int> done{0};
    pg::NodeOptions o;
    o.conninfo = db.conninfo;
    o.scheduler.min_workers = 4;
    pg::Node node(o);
    auto body = [&](pg::Job& j) {
        const std::string key(j.payload());
        {
            std::lock_guard lock(m);
            most = std::max(most, ++running[key]);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        {
            std::lock_guard lock(m);
            --running[key];
        }
        done.fetch_add(1);
    };
    node.handle("mail", body);
    node.handle("plain", [&](pg::Job&) { done.fetch_add(1); });
    node.start();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (done.load() < 9 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    node.stop();
    CHECK(done.load() == 9);
    CHECK(most == 1);
}

TEST_CASE("ax.enqueue in the caller's transaction: rollback leaves nothing, the wake "
          "notification comes at commit, and a node runs what was committed",
          "[pg][sql_tx]") {
    Db db("ax_t_sql_tx");
    auto listener = db.sql();
    listener.exec("LISTEN ax_wake");
    auto app = db.sql();

    app.exec("BEGIN");
    app.exec("CREATE TABLE orders (id int PRIMARY KEY)");
    app.exec("INSERT INTO orders VALUES (1)");
    const std::int64_t gone =
        app.exec("SELECT ax.enqueue(kind => 'ship', payload => 'order 1', idempotency_key => "
                 "'order-1')")
            .int64(0, 0);
    app.exec("SELECT * FROM ax.enqueue_many(kind => array['ship', 'ship'])");
    app.exec("ROLLBACK");
    CHECK(db.scalar("SELECT count(*) FROM ax.tasks") == 0);
    CHECK(db.scalar("SELECT count(*) FROM ax.idem_keys") == 0);
    CHECK(db.scalar("SELECT count(*) FROM ax.history") == 0);
    std::this_thread::sleep_for(100ms);
    CHECK(wake_notifications(listener) == 0);

    // The same key after the rollback makes a new task.
    app.exec("BEGIN");
    app.exec("CREATE TABLE orders (id int PRIMARY KEY)");
    app.exec("INSERT INTO orders VALUES (1)");
    const std::int64_t kept =
        app.exec("SELECT ax.enqueue(kind => 'ship', payload => 'order 1', idempotency_key => "
                 "'order-1')")
            .int64(0, 0);
    CHECK(kept != gone);
    auto many = app.exec("SELECT id FROM ax.enqueue_many(kind => array['ship', 'ship'], "
                         "payload => array['a', 'b']::bytea[])");
    REQUIRE(many.rows() == 2);
    // Not visible to others, no notification yet.
    CHECK(db.scalar("SELECT count(*) FROM ax.tasks") == 0);
    std::this_thread::sleep_for(100ms);
    CHECK(wake_notifications(listener) == 0);
    app.exec("COMMIT");
    CHECK(db.scalar("SELECT count(*) FROM ax.tasks") == 3);
    CHECK(db.scalar("SELECT count(*) FROM orders") == 1);
    // One notification for the whole transaction (PostgreSQL folds identical ones).
    REQUIRE(wait_until([&] { return wake_notifications(listener) > 0; }, 10s));

    std::mutex m;
    std::map<std::int64_t, std::string> ran;
    pg::Node node(quick_node(db, "sqltx"));
    node.handle("ship", [&](pg::Job& j) {
        std::lock_guard lock(m);
        ran.emplace(j.id(), std::string(j.payload()));
    });
    node.start();
    pg::Client c(db.conninfo);
    REQUIRE(wait_until([&] { return c.counts().succeeded == 3; }, 20s));
    node.stop();
    std::lock_guard lock(m);
    CHECK(ran.size() == 3);
    CHECK(ran[kept] == "order 1");
    CHECK(ran[many.int64(0, 0)] == "a");
    CHECK(ran[many.int64(1, 0)] == "b");
    CHECK(ran.count(gone) == 0);
}

TEST_CASE("a task enqueued by SQL retries, dead-letters and is replayed like any other; its key "
          "holds through it",
          "[pg][sql_tx]") {
    Db db("ax_t_sql_dead");
    auto s = db.sql();
    const std::int64_t id =
        s.exec("SELECT ax.enqueue(kind => 'flaky', payload => 'p', idempotency_key => 'dl-1', "
               "max_attempts => 2)")
            .int64(0, 0);
    std::atomic<int> attempts{0};
    std::atomic<bool> heal{false};
    pg::Node node(quick_node(db, "dead"));
    node.handle("flaky", [&](pg::Job&) {
        attempts.fetch_add(1);
        if (!heal.load())
            throw std::runtime_error("boom");
    });
    node.start();
    pg::Client c(db.conninfo);
    REQUIRE(wait_until([&] { return c.counts().dead_letters == 1; }, 20s));
    CHECK(attempts.load() == 2);
    const auto dl = c.dead_letters();
    REQUIRE(dl.size() == 1);
    CHECK(dl[0].id == id);
    CHECK(dl[0].errors.size() == 2);
    CHECK(dl[0].reason == "attempts exhausted");
    // The key answers the dead letter's ID; no new task.
    CHECK(s.exec("SELECT ax.enqueue(kind => 'flaky', idempotency_key => 'dl-1')").int64(0, 0) ==
          id);
    CHECK(c.counts().live() == 0);
    heal.store(true);
    REQUIRE(c.replay_dead_letter(id));
    REQUIRE(wait_until([&] { return c.counts().succeeded == 1; }, 20s));
    node.stop();
    CHECK(c.query(id)->state == pg::TaskState::succeeded);
    CHECK(s.exec("SELECT ax.enqueue(kind => 'flaky', idempotency_key => 'dl-1')").int64(0, 0) ==
          id);
}

TEST_CASE("ax.enqueue keys race safely: a second transaction with the key waits for the first, "
          "then answers its task (commit) or makes its own (rollback)",
          "[pg][sql_tx]") {
    Db db("ax_t_sql_race");
    auto a = db.sql();
    auto b = db.sql();
    for (const bool commit : {true, false}) {
        const std::string key = commit ? "race-commit" : "race-rollback";
        a.exec("BEGIN");
        const std::int64_t first =
            a.exec(("SELECT ax.enqueue(kind => 'k', idempotency_key => '" + key + "')").c_str())
                .int64(0, 0);
        // b's enqueue of the same key blocks on the key's row until a ends.
        REQUIRE(PQsendQuery(
                    b.get(),
                    ("SELECT ax.enqueue(kind => 'k', idempotency_key => '" + key + "')").c_str()) ==
                1);
        std::this_thread::sleep_for(300ms);
        REQUIRE(PQconsumeInput(b.get()) == 1);
        CHECK(PQisBusy(b.get()) == 1);
        a.exec(commit ? "COMMIT" : "ROLLBACK");
        pg::detail::Result r(PQgetResult(b.get()));
        REQUIRE(r.status() == PGRES_TUPLES_OK);
        const std::int64_t second = r.int64(0, 0);
        while (PGresult* more = PQgetResult(b.get()))
            PQclear(more);
        if (commit)
            CHECK(second == first);
        else
            CHECK(second != first);
        CHECK(db.scalar("SELECT count(*) FROM ax.tasks WHERE idem_key = '" + key + "'") == 1);
        CHECK(db.scalar("SELECT task_id FROM ax.idem_keys WHERE idem_key = '" + key + "'") ==
              second);
    }
}

TEST_CASE("NewTask::run_at: absolute times through the statement and COPY paths; with a delay "
          "it is refused",
          "[pg][run_at]") {
    Db db("ax_t_run_at");
    pg::Client c(db.conninfo);
    const auto now = std::chrono::system_clock::now();
    const auto in_1h = now + 1h;
    const auto us = [](std::chrono::system_clock::time_point t) {
        return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
    };
    const std::int64_t later = c.enqueue({.kind = "k", .run_at = in_1h}).id;
    CHECK(c.query(later)->state == pg::TaskState::scheduled);
    // Stored to the microsecond.
    CHECK(
        db.scalar("SELECT (extract(epoch FROM run_at) * 1000000)::int8 FROM ax.tasks WHERE id = " +
                  std::to_string(later)) == us(in_1h));
    // A past time is now: claimable at once, not ahead of older tasks.
    const std::int64_t past = c.enqueue({.kind = "k", .run_at = now - 24h}).id;
    CHECK(c.query(past)->state == pg::TaskState::pending);
    CHECK(db.scalar("SELECT count(*) FROM ax.tasks WHERE id = " + std::to_string(past) +
                    " AND run_at > now() - interval '1 minute'") == 1);
    // With a key, through the keyed statement.
    const auto keyed = c.enqueue({.kind = "k", .run_at = in_1h, .idempotency_key = "ra"});
    CHECK(
        db.scalar("SELECT (extract(epoch FROM run_at) * 1000000)::int8 FROM ax.tasks WHERE id = " +
                  std::to_string(keyed.id)) == us(in_1h));
    // A large call (the COPY's size) with one run_at goes by the statement, so the time holds; the
    // others keep their delay or none.
    std::vector<pg::NewTask> many(300, pg::NewTask{.kind = "k"});
    many[7].run_at = in_1h;
    many[8].delay = 2h;
    const auto ids = c.enqueue_many(many);
    CHECK(c.query(ids[7].id)->state == pg::TaskState::scheduled);
    CHECK(c.query(ids[8].id)->state == pg::TaskState::scheduled);
    CHECK(c.query(ids[9].id)->state == pg::TaskState::pending);
    CHECK(
        db.scalar("SELECT (extract(epoch FROM run_at) * 1000000)::int8 FROM ax.tasks WHERE id = " +
                  std::to_string(ids[7].id)) == us(in_1h));
    CHECK(db.scalar("SELECT round(extract(epoch FROM run_at - now()) / 60) FROM ax.tasks WHERE "
                    "id = " +
                    std::to_string(ids[8].id)) == 120);
    // Both set, or too far: refused before anything is sent.
    const std::int64_t live = c.counts().live();
    try {
        c.enqueue_many(
            std::vector<pg::NewTask>{{.kind = "k"}, {.kind = "k", .delay = 1s, .run_at = in_1h}});
        FAIL("run_at with delay was accepted");
    } catch (const std::invalid_argument& e) {
        CHECK(std::string(e.what()).find("NewTask #1: run_at") != std::string::npos);
        CHECK(std::string(e.what()).find("give one of them") != std::string::npos);
    }
    CHECK_THROWS_WITH(c.enqueue({.kind = "k", .run_at = now + 24h * 367}),
                      Catch::Contains("run_at") && Catch::Contains("366 days ahead"));
    CHECK(c.counts().live() == live);
    // A node runs a run_at task when it comes due (a second ahead), not before.
    const auto due = std::chrono::system_clock::now() + 1500ms;
    c.enqueue({.kind = "due", .run_at = due});
    std::atomic<std::int64_t> ran_at_us{0};
    pg::Node node(quick_node(db, "due"));
    node.handle("due", [&](pg::Job&) { ran_at_us.store(us(std::chrono::system_clock::now())); });
    node.start();
    REQUIRE(wait_until([&] { return ran_at_us.load() != 0; }, 20s));
    node.stop();
    CHECK(ran_at_us.load() >= us(due)); // the server's clock is this machine's
}

TEST_CASE("enqueue_on: tasks on the application's connection commit and roll back with its "
          "transaction; it refuses a connection outside one",
          "[pg][enqueue_on]") {
    Db db("ax_t_enqueue_on");
    auto app = db.sql();
    app.exec("CREATE TABLE orders (id int PRIMARY KEY)");
    const std::string payload = "order";
    std::vector<pg::NewTask> bulk(200, pg::NewTask{.kind = "ship", .payload = payload}); // COPY
    const std::vector<pg::NewTask> few = {
        {.kind = "ship", .payload = "keyed", .idempotency_key = "order-7"},
        {.kind = "ship", .payload = "later", .run_at = std::chrono::system_clock::now() + 1h},
        {.kind = "ship", .payload = "plain", .priority = ax::Priority::high}};

    // Rolled back: nothing, not even the key.
    app.exec("BEGIN");
    app.exec("INSERT INTO orders VALUES (7)");
    const auto gone = pg::enqueue_on(app.get(), few);
    REQUIRE(gone.size() == 3);
    const auto gone_bulk = pg::enqueue_on(app.get(), bulk);
    REQUIRE(gone_bulk.size() == 200);
    CHECK(PQtransactionStatus(app.get()) == PQTRANS_INTRANS); // neither committed nor ended
    CHECK(db.scalar("SELECT count(*) FROM ax.tasks") == 0);   // not visible outside it yet
    app.exec("ROLLBACK");
    CHECK(db.scalar("SELECT count(*) FROM ax.tasks") == 0);
    CHECK(db.scalar("SELECT count(*) FROM ax.idem_keys") == 0);
    CHECK(db.scalar("SELECT count(*) FROM orders") == 0);

    // Committed: every task with its fields, claimable.
    app.exec("BEGIN");
    app.exec("INSERT INTO orders VALUES (7)");
    const auto kept = pg::enqueue_on(app.get(), few);
    const auto kept_bulk = pg::enqueue_on(app.get(), bulk);
    CHECK(pg::enqueue_on(app.get(), {.kind = "ship", .idempotency_key = "order-7"}).existed);
    app.exec("COMMIT");
    CHECK(db.scalar("SELECT count(*) FROM ax.tasks") == 203);
    CHECK(db.scalar("SELECT count(*) FROM orders") == 1);
    pg::Client c(db.conninfo);
    CHECK(c.query(kept[1].id)->state == pg::TaskState::scheduled);
    CHECK(c.query(kept[2].id)->priority == ax::Priority::high);
    for (std::size_t i = 1; i < kept_bulk.size(); ++i)
        CHECK(kept_bulk[i].id > kept_bulk[i - 1].id);

    std::mutex m;
    std::map<std::int64_t, std::string> ran;
    pg::Node node(quick_node(db, "enqueue_on"));
    node.handle("ship", [&](pg::Job& j) {
        std::lock_guard lock(m);
        ran.emplace(j.id(), std::string(j.payload()));
    });
    node.start();
    REQUIRE(wait_until([&] { return c.counts().succeeded == 202; }, 30s));
    node.stop();
    {
        std::lock_guard lock(m);
        CHECK(ran.size() == 202);
        CHECK(ran[kept[0].id] == "keyed");
        CHECK(ran[kept[2].id] == "plain");
        CHECK(ran[kept_bulk[199].id] == "order");
        CHECK(ran.count(kept[1].id) == 0); // an hour ahead
        for (const auto& e : gone)
            CHECK(ran.count(e.id) == 0);
    }

    // Refusals send nothing and leave the application's transaction as it was.
    CHECK_THROWS_WITH(pg::enqueue_on(app.get(), {.kind = "ship"}),
                      Catch::Contains("not in a transaction block"));
    app.exec("BEGIN");
    CHECK_THROWS_WITH(pg::enqueue_on(app.get(), {.kind = ""}), Catch::Contains("NewTask #0: kind"));
    CHECK_THROWS_AS(
        pg::enqueue_on(app.get(),
                       {.kind = "k", .delay = 1s, .run_at = std::chrono::system_clock::now()}),
        std::invalid_argument);
    CHECK_THROWS_WITH(pg::enqueue_on(app.get(),
                                     {.kind = "k", .payload = std::string_view("12345678901")},
                                     {.max_payload_bytes = 10}),
                      Catch::Contains("exceeds max_payload_bytes (10)"));
    CHECK(PQtransactionStatus(app.get()) == PQTRANS_INTRANS);
    PQclear(PQexec(app.get(), "SELECT 1/0"));
    CHECK(PQtransactionStatus(app.get()) == PQTRANS_INERROR);
    CHECK_THROWS_WITH(pg::enqueue_on(app.get(), {.kind = "ship"}), Catch::Contains("roll it back"));
    app.exec("ROLLBACK");
    // The borrowed connection is never closed, whatever happened.
    CHECK(app.ok());
    CHECK(db.scalar("SELECT count(*) FROM ax.tasks") == 1);
    CHECK_THROWS_AS(pg::enqueue_on(nullptr, {.kind = "ship"}), pg::ConnectionError);
}

TEST_CASE("psql producer (examples/producers/enqueue.sql): the committed transaction's tasks "
          "run, the rolled back one's never exist",
          "[pg][producer_psql]") {
    check_producer("psql", "psql -X -q -v ON_ERROR_STOP=1 -f " + g_producers + "/enqueue.sql");
}

TEST_CASE("Python producer (examples/producers/enqueue.py, psycopg2): the committed "
          "transaction's tasks run, the rolled back one's never exist",
          "[pg][producer_python]") {
    check_producer("python", python_with_psycopg2() + " " + g_producers + "/enqueue.py");
}

TEST_CASE("Node.js producer (examples/producers/enqueue.js, pg from npm): the committed "
          "transaction's tasks run, the rolled back one's never exist",
          "[pg][producer_node]") {
    check_producer("node", "NODE_PATH=" + g_node_modules + " node " + g_producers + "/enqueue.js");
}

int main(int argc, char** argv) {
    const char* conninfo = std::getenv("AX_PG_CONNINFO");
    if (conninfo == nullptr || *conninfo == '\0') {
        std::printf("SKIPPED: AX_PG_CONNINFO is not set, so no PostgreSQL server to test against "
                    "(run under scripts/pg-server.sh, as scripts/test.sh's pg stage does)\n");
        return 77;
    }
    g_base = conninfo;
    const char* dir = std::getenv("AX_PRODUCERS_DIR");
    const char* mods = std::getenv("AX_PRODUCERS_NODE_MODULES");
    g_producers = dir != nullptr ? dir : "examples/producers";
    g_node_modules = mods != nullptr ? mods : "build/producers/node_modules";
    // A producer whose language is missing here is a loud skip (scripts/deps.sh installs them
    // all, and CI runs them).
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        int rc = 0;
        if (a == "[producer_psql]" && (run_capture("psql --version", rc), rc != 0)) {
            std::printf("SKIPPED: psql not found (Debian: postgresql-client; scripts/deps.sh)\n");
            return 77;
        }
        if (a == "[producer_python]" && python_with_psycopg2().empty()) {
            std::printf("SKIPPED: no python3 with psycopg2 (Debian: python3-psycopg2; "
                        "scripts/deps.sh installs it)\n");
            return 77;
        }
        if (a == "[producer_node]" &&
            ((run_capture("node --version", rc), rc != 0) ||
             (run_capture("test -d " + g_node_modules + "/pg", rc), rc != 0))) {
            std::printf("SKIPPED: node or its pg module (%s) missing (scripts/deps.sh installs "
                        "Node.js, scripts/producers-deps.sh the module)\n",
                        g_node_modules.c_str());
            return 77;
        }
    }
    return Catch::Session().run(argc, argv);
}
