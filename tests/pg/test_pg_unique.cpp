// Unique tasks with a window and a choice of states (issue 28, part 4) against a real PostgreSQL:
// NewTask::unique_for / unique_states through Client::enqueue_many, and the SQL API's
// unique_for_ms / unique_states, both decided by the key's row in ax.idem_keys (migration 9).
// scripts/pg-server.sh starts a throw-away server and exports AX_PG_CONNINFO; without it every
// test is skipped (exit 77). Each test case works in a database of its own. Durations are
// generous hang guards, or windows whose end is made certain by back-dating the key's row.

#define CATCH_CONFIG_RUNNER
#include <atomic>
#include <ax/pg/pg.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
namespace pg = ax::pg;
using US = pg::UniqueStates;

namespace {

std::string g_base; // AX_PG_CONNINFO

/// A fresh database at this library's schema version.
std::string fresh_db(const std::string& name) {
    auto admin = pg::detail::Connection::open(g_base);
    admin.exec(("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)").c_str());
    admin.exec(("CREATE DATABASE " + name).c_str());
    const std::string conninfo = g_base + " dbname=" + name;
    pg::Client c(conninfo, {.require_schema = false});
    REQUIRE(c.migrate() == pg::schema_version);
    return conninfo;
}

std::int64_t scalar(const std::string& db, const std::string& q) {
    auto s = pg::detail::Connection::open(db);
    return s.exec(q.c_str()).int64(0, 0);
}

void exec(const std::string& db, const std::string& q) {
    auto s = pg::detail::Connection::open(db);
    s.exec(q.c_str());
}

/// Moves key `key`'s row back by `ms`, so its task was enqueued that long before (ends a window
/// without sleeping through it).
void backdate(const std::string& db, const std::string& key, int ms) {
    exec(db, "UPDATE ax.idem_keys SET enqueued_at = enqueued_at - interval '" + std::to_string(ms) +
                 " milliseconds' WHERE idem_key = '" + key + "'");
}

/// Polls `pred` every 20 ms; false if `limit` (a hang guard) passed.
bool wait_until(const std::function<bool()>& pred, std::chrono::milliseconds limit) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < until) {
        if (pred())
            return true;
        std::this_thread::sleep_for(20ms);
    }
    return pred();
}

pg::NodeOptions node_options(const std::string& conninfo) {
    pg::NodeOptions o;
    o.conninfo = conninfo;
    o.scheduler.min_workers = 2;
    o.scheduler.max_workers = 2;
    o.poll_interval = 100ms;
    o.maintenance_interval = 200ms;
    return o;
}

pg::NewTask keyed(std::string_view kind, std::string_view key,
                  std::chrono::milliseconds window = 0ms, US states = US::all) {
    return {.kind = kind, .idempotency_key = key, .unique_for = window, .unique_states = states};
}

/// SQLSTATE and COLUMN of a failing statement (empty when it succeeded).
std::pair<std::string, std::string> sql_error(const std::string& db, const std::string& q) {
    auto s = pg::detail::Connection::open(db);
    pg::detail::Result r(PQexec(s.get(), q.c_str()));
    const ExecStatusType st = r.get() == nullptr ? PGRES_FATAL_ERROR : r.status();
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK)
        return {};
    auto field = [&](int code) {
        const char* v = PQresultErrorField(r.get(), code);
        return std::string(v != nullptr ? v : "");
    };
    return {field(PG_DIAG_SQLSTATE), field(PG_DIAG_COLUMN_NAME)};
}

std::string invalid_message(pg::Client& c, const pg::NewTask& t) {
    try {
        c.enqueue(t);
    } catch (const std::invalid_argument& e) {
        return e.what();
    }
    return "(no error)";
}

} // namespace

TEST_CASE("unique_for: inside the window the first task answers, after it a new task") {
    const std::string db = fresh_db("ax_unique_window");
    pg::Client c(db);
    const auto first = c.enqueue(keyed("idle", "w", 300ms));
    CHECK_FALSE(first.existed);
    const auto again = c.enqueue(keyed("idle", "w", 300ms));
    CHECK(again.existed);
    CHECK(again.id == first.id);

    // A real wait past the window (generous: the window is 300 ms).
    std::this_thread::sleep_for(700ms);
    const auto second = c.enqueue(keyed("idle", "w", 300ms));
    CHECK_FALSE(second.existed);
    CHECK(second.id != first.id);
    // The first task is untouched (still pending); the key now names the second.
    CHECK(scalar(db, "SELECT count(*) FROM ax.tasks WHERE idem_key = 'w'") == 2);
    CHECK(scalar(db, "SELECT task_id FROM ax.idem_keys WHERE idem_key = 'w'") == second.id);
    // Inside the new holder's window: answered by it, with or without a window of its own.
    CHECK(c.enqueue(keyed("idle", "w", 300ms)).id == second.id);
    CHECK(c.enqueue(keyed("idle", "w")).id == second.id); // no window: any age counts

    // A long window measured from the holder's enqueue: back-dated past it, a new task.
    backdate(db, "w", 3600 * 1000);
    CHECK(c.enqueue(keyed("idle", "w")).id == second.id);    // no window: still the holder
    const auto third = c.enqueue(keyed("idle", "w", 10min)); // 1 h old > 10 min: new
    CHECK_FALSE(third.existed);
    CHECK(third.id != second.id);
    CHECK(c.enqueue(keyed("idle", "w", 10min)).id == third.id);
    CHECK(scalar(db, "SELECT count(*) FROM ax.tasks WHERE idem_key = 'w'") == 3);

    // The same through enqueue_many, mixing keys and windows in one call.
    backdate(db, "w", 3600 * 1000);
    const std::vector<pg::NewTask> many = {
        keyed("idle", "w", 10min), keyed("idle", "m1", 10min), {.kind = "idle"}};
    const auto r = c.enqueue_many(many);
    REQUIRE(r.size() == 3);
    CHECK_FALSE(r[0].existed);
    CHECK(r[0].id != third.id);
    CHECK_FALSE(r[1].existed);
    const auto r2 = c.enqueue_many(many);
    CHECK(r2[0].existed);
    CHECK(r2[0].id == r[0].id);
    CHECK(r2[1].existed);
    CHECK(r2[1].id == r[1].id);
    CHECK_FALSE(r2[2].existed);
}

TEST_CASE("unique_states: which states of the key's task count") {
    const std::string db = fresh_db("ax_unique_states");
    pg::Client c(db);
    pg::Node node(node_options(db));
    std::atomic<bool> release{false};
    node.handle("gate", [&](pg::Job&) {
        while (!release.load())
            std::this_thread::sleep_for(5ms);
    });
    node.handle("ok", [](pg::Job&) {});
    node.handle("boom", [](pg::Job&) { throw std::runtime_error("boom"); });
    node.start();
    auto state_is = [&](std::int64_t id, pg::TaskState s) {
        return wait_until(
            [&] {
                const auto q = c.query(id);
                return q && q->state == s;
            },
            60s);
    };

    SECTION("pending only: a running or succeeded task does not block, a pending one does") {
        const auto pend = c.enqueue(keyed("idle", "p", 0ms, US::pending));
        CHECK(c.enqueue(keyed("idle", "p", 0ms, US::pending)).id == pend.id);

        const auto run = c.enqueue(keyed("gate", "r", 0ms, US::pending));
        REQUIRE(state_is(run.id, pg::TaskState::claimed));
        const auto run2 = c.enqueue(keyed("gate", "r", 0ms, US::pending));
        CHECK_FALSE(run2.existed);
        CHECK(run2.id != run.id);
        // Counting running too, the new holder (pending or already running) blocks.
        CHECK(c.enqueue(keyed("gate", "r", 0ms, US::pending | US::running)).id == run2.id);
        release.store(true);
        REQUIRE(state_is(run.id, pg::TaskState::succeeded));
        REQUIRE(state_is(run2.id, pg::TaskState::succeeded));
        // The first task's acknowledgement did not finish the key's row: it names run2, and
        // records run2's own ending.
        CHECK(scalar(db, "SELECT task_id FROM ax.idem_keys WHERE idem_key = 'r'") == run2.id);
        CHECK(scalar(db, "SELECT finished_state FROM ax.idem_keys WHERE idem_key = 'r'") == 1);

        const auto done = c.enqueue(keyed("ok", "s", 0ms, US::pending));
        REQUIRE(state_is(done.id, pg::TaskState::succeeded));
        const auto again = c.enqueue(keyed("ok", "s", 0ms, US::pending));
        CHECK_FALSE(again.existed);
        CHECK(again.id != done.id);
    }
    SECTION("succeeded counts: a succeeded task inside the window blocks; outside it does not") {
        release.store(true);
        const auto done = c.enqueue(keyed("ok", "s", 10min, US::not_failed));
        REQUIRE(state_is(done.id, pg::TaskState::succeeded));
        const auto again = c.enqueue(keyed("ok", "s", 10min, US::succeeded));
        CHECK(again.existed);
        CHECK(again.id == done.id);
        // Live states only: the succeeded task no longer counts.
        const auto live = c.enqueue(keyed("ok", "s", 10min, US::pending | US::running));
        CHECK_FALSE(live.existed);
        REQUIRE(state_is(live.id, pg::TaskState::succeeded));
        backdate(db, "s", 11 * 60 * 1000);
        const auto late = c.enqueue(keyed("ok", "s", 10min, US::succeeded));
        CHECK_FALSE(late.existed);
        CHECK(late.id != live.id);
    }
    SECTION("failed: a dead letter and a discarded one count only with failed") {
        const auto dead = c.enqueue({.kind = "boom", .max_attempts = 1, .idempotency_key = "f"});
        REQUIRE(state_is(dead.id, pg::TaskState::dead_lettered));
        CHECK(c.enqueue(keyed("boom", "f", 0ms, US::failed)).id == dead.id);
        CHECK(c.enqueue(keyed("boom", "f")).id == dead.id); // default: every state
        REQUIRE(c.discard_dead_letter(dead.id));
        CHECK(c.enqueue(keyed("boom", "f", 0ms, US::failed)).id == dead.id);
        CHECK(scalar(db, "SELECT finished_state FROM ax.idem_keys WHERE idem_key = 'f'") == 3);
        const auto retry =
            c.enqueue({.kind = "idle", .idempotency_key = "f", .unique_states = US::not_failed});
        CHECK_FALSE(retry.existed);
        CHECK(retry.id != dead.id);
        // And a live dead letter (not discarded) does not block not_failed either.
        const auto dead2 = c.enqueue({.kind = "boom", .max_attempts = 1, .idempotency_key = "f2"});
        REQUIRE(state_is(dead2.id, pg::TaskState::dead_lettered));
        CHECK_FALSE(c.enqueue(keyed("idle", "f2", 0ms, US::not_failed)).existed);
        release.store(true);
    }
    SECTION("cancelled: counts only with cancelled") {
        const auto t = c.enqueue(keyed("idle", "c"));
        REQUIRE(c.cancel(t.id) == pg::CancelResult::cancelled);
        CHECK(c.enqueue(keyed("idle", "c")).id == t.id);
        CHECK(c.enqueue(keyed("idle", "c", 0ms, US::cancelled | US::succeeded)).id == t.id);
        CHECK(scalar(db, "SELECT finished_state FROM ax.idem_keys WHERE idem_key = 'c'") == 2);
        const auto again = c.enqueue(keyed("idle", "c", 0ms, US::not_failed));
        CHECK_FALSE(again.existed);
        CHECK(again.id != t.id);
        release.store(true);
    }
    node.stop();
}

TEST_CASE("unique: 8 producers racing one key with a window make exactly one task") {
    const std::string db = fresh_db("ax_unique_race");
    constexpr int threads = 8, rounds = 20;
    std::vector<std::vector<std::int64_t>> ids(threads, std::vector<std::int64_t>(rounds * 2));
    std::atomic<int> ready{0};
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t)
        ts.emplace_back([&, t] {
            pg::Client c(db);
            ready.fetch_add(1);
            while (ready.load() < threads)
                std::this_thread::yield();
            for (int r = 0; r < rounds; ++r) {
                const std::string key = "race-" + std::to_string(r);
                // C++ path and SQL path alternate by thread, on the same keys.
                if (t % 2 == 0) {
                    ids[t][r] = c.enqueue(keyed("idle", key, 60s, US::not_failed)).id;
                } else {
                    auto s = pg::detail::Connection::open(db);
                    ids[t][r] = s.exec(("SELECT ax.enqueue(kind => 'idle', idempotency_key => '" +
                                        key + "', unique_for_ms => 60000, unique_states => 7)")
                                           .c_str())
                                    .int64(0, 0);
                }
            }
        });
    for (auto& t : ts)
        t.join();
    for (int r = 0; r < rounds; ++r) {
        std::set<std::int64_t> seen;
        for (int t = 0; t < threads; ++t)
            seen.insert(ids[t][r]);
        CHECK(seen.size() == 1);
    }
    CHECK(scalar(db, "SELECT count(*) FROM ax.tasks") == rounds);

    // Every window over: the racers replace each holder exactly once.
    exec(db, "UPDATE ax.idem_keys SET enqueued_at = enqueued_at - interval '1 hour'");
    ready.store(0);
    ts.clear();
    for (int t = 0; t < threads; ++t)
        ts.emplace_back([&, t] {
            pg::Client c(db);
            ready.fetch_add(1);
            while (ready.load() < threads)
                std::this_thread::yield();
            for (int r = 0; r < rounds; ++r)
                ids[t][rounds + r] = c.enqueue(keyed("idle", "race-" + std::to_string(r), 60s)).id;
        });
    for (auto& t : ts)
        t.join();
    for (int r = 0; r < rounds; ++r) {
        std::set<std::int64_t> seen;
        for (int t = 0; t < threads; ++t)
            seen.insert(ids[t][rounds + r]);
        CHECK(seen.size() == 1);
        CHECK(*seen.begin() != ids[0][r]);
    }
    CHECK(scalar(db, "SELECT count(*) FROM ax.tasks") == 2 * rounds);
}

TEST_CASE("unique via SQL: ax.enqueue / ax.enqueue_many agree with Client, old calls still work") {
    const std::string db = fresh_db("ax_unique_sql");
    pg::Client c(db);
    // The calls of migration 5's API, positional and named, are not ambiguous.
    const auto plain = scalar(db, "SELECT ax.enqueue('idle', '\\x00', 1, NULL, 'old', '{}', 4, 0)");
    CHECK(scalar(db, "SELECT ax.enqueue(kind => 'idle', idempotency_key => 'old')") == plain);
    CHECK(scalar(db, "SELECT count(*) FROM ax.enqueue_many(ARRAY['idle','idle'], NULL, NULL, "
                     "NULL, ARRAY['old','o2'], NULL, NULL, NULL) WHERE existed") == 1);

    // A key taken by Client with a window answers SQL within it, and the reverse.
    const auto cpp = c.enqueue(keyed("idle", "both", 10min));
    CHECK(scalar(db, "SELECT ax.enqueue(kind => 'idle', idempotency_key => 'both', "
                     "unique_for_ms => 600000)") == cpp.id);
    backdate(db, "both", 11 * 60 * 1000);
    const auto sql_id = scalar(db, "SELECT ax.enqueue(kind => 'idle', idempotency_key => 'both', "
                                   "unique_for_ms => 600000)");
    CHECK(sql_id != cpp.id);
    CHECK(c.enqueue(keyed("idle", "both", 10min)).id == sql_id);

    // States by name.
    CHECK(scalar(db, "SELECT ax.unique_states('pending', 'RUNNING')") == 3);
    CHECK(scalar(db, "SELECT ax.unique_states('all')") == 31);
    const auto t = c.enqueue(keyed("idle", "sc"));
    REQUIRE(c.cancel(t.id) == pg::CancelResult::cancelled);
    CHECK(scalar(db, "SELECT ax.enqueue(kind => 'idle', idempotency_key => 'sc', unique_states "
                     "=> ax.unique_states('cancelled'))") == t.id);
    const auto fresh = scalar(db, "SELECT ax.enqueue(kind => 'idle', idempotency_key => 'sc', "
                                  "unique_states => ax.unique_states('pending', 'running'))");
    CHECK(fresh != t.id);

    // enqueue_many with per-task windows and states.
    backdate(db, "sc", 3600 * 1000);
    auto s = pg::detail::Connection::open(db);
    auto r = s.exec("SELECT id, existed FROM ax.enqueue_many(kind => ARRAY['idle','idle','idle'], "
                    "idempotency_key => ARRAY['sc','sc2','both'], unique_for_ms => "
                    "ARRAY[60000,0,NULL]::int8[], unique_states => ARRAY[1,31,NULL]) ORDER BY ord");
    REQUIRE(r.rows() == 3);
    CHECK(r.int64(0, 0) != fresh); // 1 h old > 60 s window
    CHECK_FALSE(r.boolean(0, 1));
    CHECK_FALSE(r.boolean(1, 1)); // a new key
    CHECK(r.int64(2, 0) == sql_id);
    CHECK(r.boolean(2, 1));
}

TEST_CASE("unique: bad options are refused clearly, before anything is written") {
    const std::string db = fresh_db("ax_unique_bad");
    pg::Client c(db);
    CHECK(invalid_message(c, keyed("idle", "k", -1ms)) ==
          "ax::pg::NewTask #0: unique_for = -1 ms: must be in 0..366 days (0: any age)");
    CHECK(invalid_message(c, keyed("idle", "k", 367 * 24h)).find("unique_for") !=
          std::string::npos);
    CHECK(invalid_message(c, keyed("idle", "k", 0ms, static_cast<US>(32))) ==
          "ax::pg::NewTask #0: unique_states = 32: must be a nonzero set of UniqueStates "
          "(pending 1, running 2, succeeded 4, failed 8, cancelled 16)");
    CHECK(invalid_message(c, keyed("idle", "k", 0ms, static_cast<US>(0))).find("nonzero") !=
          std::string::npos);
    CHECK(invalid_message(c, {.kind = "idle", .unique_for = 5s}) ==
          "ax::pg::NewTask #0: unique_for = 5000 ms: needs an idempotency_key (uniqueness is "
          "per key)");
    CHECK(invalid_message(c, {.kind = "idle", .unique_states = US::pending})
              .find("unique_states = 1: needs an idempotency_key") != std::string::npos);

    using P = std::pair<std::string, std::string>;
    CHECK(sql_error(db, "SELECT ax.enqueue(kind => 'k', idempotency_key => 'k', unique_for_ms "
                        "=> -1)") == P{"22023", "unique_for_ms"});
    CHECK(sql_error(db, "SELECT ax.enqueue(kind => 'k', idempotency_key => 'k', unique_states "
                        "=> 32)") == P{"22023", "unique_states"});
    CHECK(sql_error(db, "SELECT ax.enqueue(kind => 'k', idempotency_key => 'k', unique_states "
                        "=> 0)") == P{"22023", "unique_states"});
    CHECK(sql_error(db, "SELECT ax.enqueue(kind => 'k', unique_for_ms => 5)") ==
          P{"22023", "unique_for_ms"});
    CHECK(sql_error(db, "SELECT ax.unique_states('pending', 'queued')") ==
          P{"22023", "unique_states"});
    CHECK(sql_error(db, "SELECT * FROM ax.enqueue_many(kind => ARRAY['k','k'], idempotency_key "
                        "=> ARRAY['a','b'], unique_for_ms => ARRAY[0,-5]::int8[])") ==
          P{"22023", "unique_for_ms"});
    CHECK(sql_error(db, "SELECT * FROM ax.enqueue_many(kind => ARRAY['k','k'], idempotency_key "
                        "=> ARRAY['a',NULL], unique_states => ARRAY[31,1])") ==
          P{"22023", "unique_states"});
    CHECK(sql_error(db, "SELECT * FROM ax.enqueue_many(kind => ARRAY['k'], unique_states => "
                        "ARRAY[1,2])") == P{"22023", "unique_states"});
    CHECK(scalar(db, "SELECT count(*) FROM ax.tasks") == 0);
    CHECK(scalar(db, "SELECT count(*) FROM ax.idem_keys") == 0);
}

TEST_CASE("unique: migration 9 fills the keys in use with their enqueue time and final state") {
    const std::string name = "ax_unique_upgrade";
    {
        auto admin = pg::detail::Connection::open(g_base);
        admin.exec(("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)").c_str());
        admin.exec(("CREATE DATABASE " + name).c_str());
    }
    const std::string db = g_base + " dbname=" + name;
    {
        auto s = pg::detail::Connection::open(db);
        s.exec("CREATE SCHEMA ax");
        s.exec("CREATE TABLE ax.schema_version (version integer PRIMARY KEY, applied_at "
               "timestamptz NOT NULL DEFAULT now())");
        for (int v = 1; v < 9; ++v) { // the versions before migration 9, the one under test
            s.exec(pg::detail::migrations[static_cast<std::size_t>(v - 1)]);
            s.exec(("INSERT INTO ax.schema_version (version) VALUES (" + std::to_string(v) + ")")
                       .c_str());
        }
        // Keys of the version before: a live task, a cancelled one and a succeeded one, each
        // enqueued two hours ago.
        s.exec("INSERT INTO ax.tasks (id, kind, idem_key, enqueued_at) VALUES "
               "(1, 'idle', 'live', now() - interval '2 hours')");
        s.exec("INSERT INTO ax.history (id, kind, priority, state, attempts, enqueued_at, "
               "idem_key) VALUES (2, 'idle', 1, 2, 0, now() - interval '2 hours', 'gone'), "
               "(3, 'idle', 1, 1, 1, now() - interval '2 hours', 'done')");
        s.exec("INSERT INTO ax.idem_keys (idem_key, task_id, finished_at) VALUES "
               "('live', 1, NULL), ('gone', 2, now()), ('done', 3, now())");
        s.exec("SELECT setval('ax.tasks_id_seq', 100)");
    }
    pg::Client c(db, {.require_schema = false});
    REQUIRE(c.migrate() == pg::schema_version);
    CHECK(scalar(db, "SELECT count(*) FROM ax.idem_keys WHERE enqueued_at < now() - interval "
                     "'1 hour'") == 3);
    CHECK(scalar(db, "SELECT finished_state FROM ax.idem_keys WHERE idem_key = 'gone'") == 2);
    CHECK(scalar(db, "SELECT finished_state FROM ax.idem_keys WHERE idem_key = 'done'") == 1);
    // Defaults: every key still answers its task.
    CHECK(c.enqueue(keyed("idle", "live")).id == 1);
    CHECK(c.enqueue(keyed("idle", "gone")).id == 2);
    // A 1 h window: the two-hour-old holders no longer count; cancelled not in the states.
    CHECK_FALSE(c.enqueue(keyed("idle", "live", 1h)).existed);
    CHECK(c.enqueue(keyed("idle", "done", 0ms, US::succeeded)).id == 3);
    CHECK_FALSE(c.enqueue(keyed("idle", "gone", 0ms, US::not_failed)).existed);
}

int main(int argc, char** argv) {
    const char* conninfo = std::getenv("AX_PG_CONNINFO");
    if (conninfo == nullptr || *conninfo == '\0') {
        std::printf("SKIPPED: AX_PG_CONNINFO is not set, so no PostgreSQL server to test against "
                    "(run under scripts/pg-server.sh, as scripts/test.sh's pg stage does)\n");
        return 77;
    }
    g_base = conninfo;
    return Catch::Session().run(argc, argv);
}
