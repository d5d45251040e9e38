// Tests of ax::pg against a real PostgreSQL (scripts/pg-server.sh starts a throw-away one and
// exports AX_PG_CONNINFO; scripts/test.sh's pg stage does that). Without AX_PG_CONNINFO every
// test is skipped with a visible message (exit 77, which ctest reports as skipped).
// Each test case works in a database of its own.

#define CATCH_CONFIG_RUNNER
#include <algorithm>
#include <atomic>
#include <ax/pg/pg.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <random>
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

/// A pg_test_node child process.
struct Proc {
    pid_t pid = -1;
    std::string name;
    Proc(const std::string& db, const std::string& name_, std::vector<std::string> extra)
        : name(name_) {
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
    /// Graceful stop; returns the exit status.
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
    o.on_event = [name](std::string_view e) {
        std::fprintf(stderr, "  [%s] %.*s\n", name.c_str(), static_cast<int>(e.size()), e.data());
    };
    return o;
}

std::vector<pg::NewTask> tasks_of(std::string_view kind, std::size_t n,
                                  std::string_view payload = {}) {
    std::vector<pg::NewTask> v(n);
    for (auto& t : v) {
        t.kind = kind;
        t.payload = payload;
    }
    return v;
}

std::map<std::int64_t, int> read_ids(const std::string& path) {
    std::map<std::int64_t, int> m;
    std::ifstream in(path);
    std::int64_t id;
    while (in >> id)
        m[id] += 1;
    return m;
}

} // namespace

TEST_CASE("migrations are versioned and idempotent; a newer database is refused", "[pg][migrate]") {
    Db db("ax_t_migrate");
    pg::Client c(db.conninfo, {.require_schema = false});
    CHECK(c.migrate() == pg::schema_version);
    CHECK(c.migrate() == pg::schema_version); // twice: a no-op
    CHECK(db.scalar("SELECT count(*) FROM ax.schema_version") == pg::schema_version);
    // The hot table's indexes: two that ungrouped tasks enter (the primary key and the claim
    // order), and since migration 11 two partial on grp IS NOT NULL (group limits), which tasks
    // without a group never enter. Migration 6's listing index tasks_kind is gone since migration
    // 12 (every enqueue paid an entry in it); a deployment may create it itself
    // (docs/distributed.md, "Listing tasks").
    CHECK(db.scalar("SELECT count(*) FROM pg_indexes WHERE schemaname = 'ax' AND tablename = "
                    "'tasks' AND (indexname = 'tasks_kind' OR indexdef LIKE '%(kind%')") == 0);
    CHECK(db.scalar("SELECT count(*) FROM pg_indexes WHERE schemaname = 'ax' AND tablename = "
                    "'tasks'") <= 4);
    CHECK(db.scalar("SELECT count(*) FROM pg_indexes WHERE schemaname = 'ax' AND tablename = "
                    "'tasks' AND indexdef NOT LIKE '%AND (grp IS NOT NULL))'") == 2);
    CHECK(
        db.scalar("SELECT count(*) FROM pg_indexes WHERE schemaname = 'ax' AND tablename = 'tasks' "
                  "AND indexdef LIKE '%(priority, run_at, id) WHERE ((node_id IS NULL) AND (grp IS "
                  "NULL))%'") == 1);
    // Migration 11's ax.limit_lock lost its last caller in migration 12; migration 15 drops it.
    CHECK(db.scalar("SELECT count(*) FROM pg_proc WHERE proname = 'limit_lock'") == 0);
    CHECK(db.scalar("SELECT count(*) FROM pg_proc WHERE proname = 'prune_flows'") == 1);

    db.sql().exec("INSERT INTO ax.schema_version (version) VALUES (999)");
    try {
        pg::Client newer(db.conninfo);
        FAIL("a newer schema was accepted");
    } catch (const pg::SchemaError& e) {
        CHECK(std::string(e.what()).find("version 999, newer than this library's") !=
              std::string::npos);
    }
    CHECK_THROWS_AS(c.migrate(), pg::SchemaError);
    pg::Node node(quick_node(db, "n"));
    node.handle("noop", [](pg::Job&) {});
    CHECK_THROWS_AS(node.start(), pg::SchemaError);
}

TEST_CASE("a version 3 database is upgraded with every task, finished row, dead letter and key "
          "kept",
          "[pg][migrate]") {
    const std::string name = "ax_t_upgrade";
    {
        auto admin = pg::detail::Connection::open(g_base);
        admin.exec(("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)").c_str());
        admin.exec(("CREATE DATABASE " + name).c_str());
    }
    const std::string conninfo = g_base + " dbname=" + name;
    auto s = pg::detail::Connection::open(conninfo);
    s.exec("CREATE SCHEMA ax");
    s.exec("CREATE TABLE ax.schema_version (version integer PRIMARY KEY, applied_at timestamptz "
           "NOT NULL DEFAULT now())");
    for (int v = 1; v <= 3; ++v) {
        s.exec(pg::detail::migrations[static_cast<std::size_t>(v - 1)]);
        s.exec(
            ("INSERT INTO ax.schema_version (version) VALUES (" + std::to_string(v) + ")").c_str());
    }
    // What a version 3 database holds: live tasks (one keyed), finished ones (keyed, and the
    // same key finished twice, as the race left it), dead letters (one keyed).
    s.exec("INSERT INTO ax.tasks (id, kind, idem_key) VALUES (1, 'k', 'live-key'), (2, 'k', NULL)");
    s.exec("INSERT INTO ax.history (id, kind, priority, state, attempts, enqueued_at, finished_at, "
           "idem_key) VALUES (10, 'k', 1, 1, 1, now(), now() - interval '10 minutes', 'done-key'), "
           "(11, 'k', 1, 1, 1, now(), now() - interval '5 minutes', 'twice'), "
           "(12, 'k', 1, 1, 1, now(), now() - interval '1 minute', 'twice'), "
           "(13, 'k', 1, 2, 1, now(), now(), NULL)");
    s.exec("INSERT INTO ax.dead_letters (id, kind, priority, payload, tags, max_attempts, "
           "timeout_ms, attempts, idem_key, errors, reason, enqueued_at) VALUES "
           "(20, 'k', 1, 'p', '{}', 4, 0, 4, 'dead-key', '{e}', 'attempts exhausted', now()), "
           "(21, 'k', 1, 'q', '{}', 4, 0, 4, NULL, '{e}', 'attempts exhausted', now())");
    s.exec("SELECT setval('ax.tasks_id_seq', 100)");
    pg::Client c(conninfo, {.require_schema = false});
    CHECK(c.migrate() == pg::schema_version);
    CHECK(c.counts().live() == 2);
    CHECK(c.counts().dead_letters == 2);
    CHECK(c.counts().succeeded == 3);
    CHECK(c.counts().cancelled == 1);
    CHECK(c.query(13)->state == pg::TaskState::cancelled);
    CHECK(c.query(20)->state == pg::TaskState::dead_lettered);
    // Every key answers its task, the newest finished one for a key finished twice.
    CHECK(c.enqueue({.kind = "k", .idempotency_key = "live-key"}).id == 1);
    CHECK(c.enqueue({.kind = "k", .idempotency_key = "done-key"}).id == 10);
    CHECK(c.enqueue({.kind = "k", .idempotency_key = "twice"}).id == 12);
    CHECK(c.enqueue({.kind = "k", .idempotency_key = "dead-key"}).id == 20);
    CHECK(c.counts().live() == 2);
    auto check = pg::detail::Connection::open(conninfo);
    CHECK(check.exec("SELECT count(*) FROM ax.idem_keys WHERE finished_at IS NULL").int64(0, 0) ==
          2);
    CHECK(c.replay_dead_letter(20));
    CHECK(c.discard_dead_letter(21));
    CHECK(c.counts().dead_letters == 0);
    CHECK(c.counts().discarded == 1);
    CHECK(c.migrate() == pg::schema_version); // twice: a no-op
}

TEST_CASE("one node runs a bulk enqueue exactly once and acknowledges into the history",
          "[pg][basic]") {
    Db db("ax_t_basic");
    pg::Client c(db.conninfo);
    const std::size_t n = 3000;
    std::vector<std::string> payloads(n);
    std::vector<pg::NewTask> ts(n);
    for (std::size_t i = 0; i < n; ++i) {
        payloads[i] = "p" + std::to_string(i);
        ts[i] = {
            .kind = "echo", .payload = payloads[i], .priority = static_cast<ax::Priority>(i % 3)};
    }
    const auto ids = c.enqueue_many(ts);
    REQUIRE(ids.size() == n);
    for (std::size_t i = 1; i < n; ++i)
        REQUIRE(ids[i].id > ids[i - 1].id); // in input order
    CHECK(c.counts().live() == static_cast<std::int64_t>(n));

    std::mutex m;
    std::map<std::int64_t, std::string> seen;
    std::atomic<int> dups{0};
    pg::Node node(quick_node(db, "basic"));
    node.handle("echo", [&](pg::Job& j) {
        std::lock_guard lock(m);
        if (!seen.emplace(j.id(), std::string(j.payload())).second)
            dups.fetch_add(1);
    });
    node.start();
    REQUIRE(wait_until([&] { return c.counts().succeeded == static_cast<std::int64_t>(n); }, 20s));
    node.stop();
    CHECK(dups.load() == 0);
    REQUIRE(seen.size() == n);
    for (std::size_t i = 0; i < n; ++i)
        CHECK(seen[ids[i].id] == payloads[i]);
    CHECK(c.counts().live() == 0);
    const auto q = c.query(ids[7].id);
    REQUIRE(q);
    CHECK(q->state == pg::TaskState::succeeded);
    CHECK(q->attempts == 1);
    CHECK(!c.query(ids.back().id + 1000));
    const auto st = node.stats();
    CHECK(st.succeeded == n);
    CHECK(st.claims < n / 4);                                 // batches, not one claim per task
    CHECK(db.scalar("SELECT count(*) FROM ax.batches") == 0); // every batch closed
    CHECK(db.scalar("SELECT count(*) FROM ax.nodes") == 0);   // left on stop
    CHECK(db.scalar("SELECT value FROM ax.counters WHERE name = 'checksum_mismatches'") == 0);
}

TEST_CASE("several node processes finish 100k tasks, each exactly once", "[pg][processes]") {
    Db db("ax_t_procs");
    pg::Client c(db.conninfo);
    const std::size_t n = 100000;
    for (std::size_t done = 0; done < n; done += 20000)
        c.enqueue_many(tasks_of("noop", 20000));
    std::vector<std::unique_ptr<Proc>> procs;
    const std::string dir = "/tmp/ax_t_procs." + std::to_string(getpid());
    std::system(("mkdir -p " + dir).c_str());
    for (int i = 0; i < 3; ++i)
        procs.push_back(std::make_unique<Proc>(
            db.conninfo, "p" + std::to_string(i),
            std::vector<std::string>{"--kinds", "noop", "--workers", "2", "--max-batch", "512",
                                     "--tasks-per-worker", "256", "--log",
                                     dir + "/p" + std::to_string(i) + ".log"}));
    const auto t0 = std::chrono::steady_clock::now();
    REQUIRE(wait_until([&] { return c.counts().succeeded == static_cast<std::int64_t>(n); }, 240s));
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (auto& p : procs)
        CHECK(p->stop() == 0);
    std::map<std::int64_t, int> all;
    for (int i = 0; i < 3; ++i) {
        const auto m = read_ids(dir + "/p" + std::to_string(i) + ".log");
        std::printf("  node p%d ran %zu tasks\n", i, m.size());
        CHECK(!m.empty()); // all three took part
        for (auto [id, k] : m)
            all[id] += k;
    }
    std::system(("rm -rf " + dir).c_str());
    std::printf("  3 node processes: %zu tasks in %.1f s (includes start-up; not a benchmark)\n", n,
                secs);
    REQUIRE(all.size() == n);
    std::size_t twice = 0;
    for (auto [id, k] : all)
        twice += k != 1;
    CHECK(twice == 0);
    CHECK(c.counts().live() == 0);
}

TEST_CASE("kill -9 of a node mid-batch: its batches are reclaimed within about a lease",
          "[pg][kill9]") {
    Db db("ax_t_kill");
    pg::Client c(db.conninfo);
    const std::size_t n = 1500;
    c.enqueue_many(tasks_of("sleep", n, "4"));
    const std::vector<std::string> args = {"--kinds",       "sleep", "--workers",  "4",
                                           "--max-batch",   "64",    "--lease-ms", "1000",
                                           "--maintain-ms", "200"};
    Proc a(db.conninfo, "victim", args);
    Proc b(db.conninfo, "survivor", args);
    REQUIRE(wait_until(
        [&] { return db.scalar("SELECT count(*) FROM results WHERE node = 'victim'") >= 50; },
        60s));
    const std::int64_t held_before = db.scalar("SELECT count(*) FROM ax.tasks t JOIN ax.nodes n ON "
                                               "n.id = t.node_id WHERE n.name = 'victim'");
    a.kill9();
    const auto killed = std::chrono::steady_clock::now();
    const std::int64_t victim =
        db.scalar("SELECT coalesce(max(id), 0) FROM ax.nodes WHERE name = 'victim'");
    REQUIRE(victim != 0);
    REQUIRE(wait_until(
        [&] {
            return db.scalar("SELECT count(*) FROM ax.tasks WHERE node_id = " +
                             std::to_string(victim)) == 0;
        },
        30s));
    const double reclaim_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
    std::printf("  victim held %lld tasks when killed; reclaimed %.2f s later (lease 1 s)\n",
                static_cast<long long>(held_before), reclaim_s);
    CHECK(reclaim_s < 10.0); // hang guard: about one lease plus a maintenance period
    REQUIRE(wait_until([&] { return c.counts().live() == 0; }, 120s));
    // Idempotent handler: every task once in the result table, no gaps, no duplicates.
    CHECK(db.scalar("SELECT count(*) FROM results") == static_cast<std::int64_t>(n));
    CHECK(db.scalar("SELECT max(task_id) - min(task_id) + 1 FROM results") ==
          static_cast<std::int64_t>(n));
    CHECK(db.scalar("SELECT count(*) FROM (SELECT task_id FROM runs GROUP BY task_id) x") ==
          static_cast<std::int64_t>(n));
    const auto s = c.status();
    CHECK(s.reclaimed_batches >= 1);
    std::printf(
        "  %lld batch(es), %lld task(s) reclaimed; %lld executions for %zu tasks (at least once)\n",
        static_cast<long long>(s.reclaimed_batches), static_cast<long long>(s.reclaimed_tasks),
        static_cast<long long>(db.scalar("SELECT count(*) FROM runs")), n);
    CHECK(c.counts().dead_letters == 0);
    CHECK(b.stop() == 0);
}

TEST_CASE("a dead node's batch is reclaimed at its lease's end, not a maintenance interval later",
          "[pg][reclaim]") {
    Db db("ax_t_reclaim");
    pg::Client c(db.conninfo);
    // The victim claims every task and sleeps on them; it never finishes one.
    const std::size_t n = 6;
    const auto ids = c.enqueue_many(tasks_of("sleep", n, "600000"));
    Proc victim(
        db.conninfo, "victim",
        {"--kinds", "sleep", "--workers", "2", "--lease-ms", "1500", "--maintain-ms", "600000"});
    REQUIRE(wait_until(
        [&] {
            return db.scalar("SELECT count(*) FROM ax.tasks WHERE node_id IS NOT NULL") ==
                   static_cast<std::int64_t>(n);
        },
        60s));
    // The survivor runs maintenance every 10 minutes only: what reclaims the victim's batch
    // within the hang guard below is the maintenance it schedules at the earliest lease expiry.
    std::mutex m;
    std::set<std::int64_t> ran;
    std::chrono::steady_clock::time_point last_run{};
    auto o = quick_node(db, "survivor");
    o.lease = 1500ms;
    o.maintenance_interval = 600s;
    pg::Node survivor(o);
    survivor.handle("sleep", [&](pg::Job& j) {
        std::lock_guard lock(m);
        ran.insert(j.id());
        last_run = std::chrono::steady_clock::now();
    });
    survivor.start();
    std::this_thread::sleep_for(2s); // the victim renews its lease meanwhile (every 500 ms)
    {
        std::lock_guard lock(m);
        CHECK(ran.empty()); // a live node's batch is never taken from it
    }
    victim.kill9();
    const auto killed = std::chrono::steady_clock::now();
    // Hang guard (not a speed claim): far below the survivor's 10-minute maintenance interval.
    REQUIRE(wait_until(
        [&] {
            std::lock_guard lock(m);
            return ran.size() == n;
        },
        60s));
    double secs = 0;
    {
        std::lock_guard lock(m);
        secs = std::chrono::duration<double>(last_run - killed).count();
    }
    std::printf("  the victim's %zu tasks ran on the survivor %.2f s after kill -9 (lease 1.5 s)\n",
                n, secs);
    for (const auto& e : ids) {
        const auto q = c.query(e.id);
        REQUIRE(q);
        CHECK(q->attempts == 2);
    }
    REQUIRE(wait_until([&] { return c.counts().succeeded == static_cast<std::int64_t>(n); }, 30s));
    survivor.stop();
    CHECK(c.status().reclaimed_batches >= 1);
    CHECK(c.status().reclaimed_tasks == static_cast<std::int64_t>(n));
}

TEST_CASE("the maintenance node vacuums the hot table once dead rows pile up; 0 turns it off",
          "[pg][vacuum]") {
    // may_vacuum false: the node connects as a role that may use the tables but does not own
    // them (VACUUM would only warn and skip), so it must not try.
    const auto run = [](const char* name, std::uint32_t threshold, bool may_vacuum = true) {
        Db db(name);
        pg::Client c(db.conninfo);
        const std::size_t n = 20000;
        c.enqueue_many(tasks_of("noop", n));
        auto o = quick_node(db, name);
        if (!may_vacuum) {
            auto s = db.sql();
            s.exec("DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'ax_t_plain') "
                   "THEN CREATE ROLE ax_t_plain LOGIN; END IF; END $$");
            s.exec("GRANT USAGE ON SCHEMA ax TO ax_t_plain");
            s.exec("GRANT ALL ON ALL TABLES IN SCHEMA ax TO ax_t_plain");
            s.exec("GRANT ALL ON ALL SEQUENCES IN SCHEMA ax TO ax_t_plain");
            o.conninfo = db.conninfo + " user=ax_t_plain";
        }
        o.vacuum_dead_rows = threshold;
        pg::Node node(o);
        node.handle("noop", [](pg::Job&) {});
        node.start();
        // Hang guard: 20 000 no-op tasks drain in seconds; a loaded CI machine once took 55 s.
        REQUIRE(
            wait_until([&] { return c.counts().succeeded == static_cast<std::int64_t>(n); }, 150s));
        const auto vacuums = [&] {
            return db.scalar("SELECT vacuum_count FROM pg_stat_user_tables WHERE relid = "
                             "'ax.tasks'::regclass");
        };
        if (threshold > 0 && may_vacuum) {
            // 2 dead row versions per finished task; the statistics catch up within seconds.
            REQUIRE(wait_until([&] { return vacuums() >= 1; }, 60s));
            CHECK(node.stats().vacuums >= 1);
        } else {
            std::this_thread::sleep_for(3s); // several maintenance periods (200 ms)
            CHECK(node.stats().vacuums == 0);
            CHECK(vacuums() == 0);
        }
        std::printf(
            "  vacuum_dead_rows %u: %llu VACUUM pass(es) by the node, hot table %lld "
            "KiB after %zu tasks\n",
            threshold, static_cast<unsigned long long>(node.stats().vacuums),
            static_cast<long long>(db.scalar("SELECT pg_total_relation_size('ax.tasks') / 1024")),
            n);
        node.stop();
    };
    run("ax_t_vacuum_on", 2000);
    run("ax_t_vacuum_off", 0);
    run("ax_t_vacuum_not_owner", 2000, false);
}

namespace {
/// The history ring's row: current slot, and which slots hold rows (closed_at not NULL).
struct Ring {
    int cur = 0;
    std::int64_t emptied = 0;
    std::string closed; // closed_at as text, e.g. {NULL,"2026-..."}
};
Ring ring(pg::detail::Connection& s, const char* name) {
    auto r =
        s.exec_params("SELECT cur, emptied, closed_at::text FROM ax.rings WHERE name = $1", {name});
    return {static_cast<int>(r.int64(0, 0)), r.int64(0, 1), std::string(r.text(0, 2))};
}
std::int64_t slot_rows(const Db& db, const std::string& table, int slot) {
    return db.scalar("SELECT count(*) FROM ax." + table + "_" + std::to_string(slot));
}
} // namespace

TEST_CASE("the history is a ring of slots: a slot is emptied whole once its newest row is past "
          "the retention, never earlier, and a reader's lock only postpones it",
          "[pg][history]") {
    Db db("ax_t_history");
    auto s = db.sql();
    const auto add = [&](std::int64_t from, std::int64_t to) {
        s.exec(("INSERT INTO ax.history (id, kind, priority, state, attempts, node_id, "
                "enqueued_at) SELECT i, 'k', 1, 1, 1, 1, now() FROM generate_series(" +
                std::to_string(from) + ", " + std::to_string(to) + ") i")
                   .c_str());
    };
    // Time is injected by moving the ring's own clock readings back: opened_at (when the current
    // slot started taking rows) and closed_at (when each other slot stopped).
    const auto age_current = [&](const char* by) {
        s.exec(("UPDATE ax.rings SET opened_at = opened_at - interval '" + std::string(by) +
                "' WHERE name = 'history'")
                   .c_str());
    };
    const auto age_closed = [&](const char* by) {
        s.exec(("UPDATE ax.rings SET closed_at = (SELECT array_agg(c - interval '" +
                std::string(by) +
                "' ORDER BY i) FROM unnest(closed_at) WITH ORDINALITY AS u(c, i)) "
                "WHERE name = 'history'")
                   .c_str());
    };
    const auto turn = [&](std::int64_t retention_ms) {
        return s
            .exec_params("SELECT ax.turn_ring('history', $1)",
                         {std::to_string(retention_ms).c_str()})
            .int64(0, 0);
    };
    const std::int64_t hour = 3600000; // retention 1 h: slot width 1 h / 7

    add(1, 1000);
    CHECK(slot_rows(db, "history", 0) == 1000);
    CHECK(turn(hour) == 0); // the current slot is young: nothing turns
    CHECK(ring(s, "history").cur == 0);
    age_current("9 minutes"); // past 60 / 7 = 8.6 minutes: the ring turns
    CHECK(turn(hour) == 0);
    CHECK(ring(s, "history").cur == 1);
    add(1001, 3000); // new rows go to slot 1
    CHECK(slot_rows(db, "history", 0) == 1000);
    CHECK(slot_rows(db, "history", 1) == 2000);
    // Slot 0 closed just now: its rows are kept for the whole retention, however often
    // maintenance runs.
    for (int i = 0; i < 3; ++i)
        CHECK(turn(hour) == 0);
    age_closed("59 minutes");
    CHECK(turn(hour) == 0);
    CHECK(slot_rows(db, "history", 0) == 1000);
    // Past the retention: emptied whole, and only slot 0.
    age_closed("2 minutes");
    CHECK(turn(hour) == 1);
    CHECK(slot_rows(db, "history", 0) == 0);
    CHECK(slot_rows(db, "history", 1) == 2000);
    CHECK(ring(s, "history").emptied == 1);

    // A reader holding the whole table (every slot) postpones the TRUNCATE by at most its lock
    // timeout (50 ms) instead of queueing behind it, and the next pass does it.
    age_current("9 minutes");
    CHECK(turn(hour) == 0);
    CHECK(ring(s, "history").cur == 2);
    age_closed("61 minutes");
    auto reader = db.sql();
    reader.exec("BEGIN");
    reader.exec("SELECT count(*) FROM ax.history");
    const auto t0 = std::chrono::steady_clock::now();
    CHECK(turn(hour) == 0);
    CHECK(std::chrono::steady_clock::now() - t0 < 5s); // hang guard: it did not wait for COMMIT
    CHECK(slot_rows(db, "history", 1) == 2000);
    reader.exec("COMMIT");
    CHECK(turn(hour) == 1);
    CHECK(slot_rows(db, "history", 1) == 0);

    // An acknowledgement inserting into the current slot while another slot is being emptied:
    // neither waits for the other (the TRUNCATE locks its slot alone, not the parent table).
    add(3001, 3500); // slot 2
    age_current("9 minutes");
    CHECK(turn(hour) == 0); // now slot 3
    age_closed("61 minutes");
    auto truncating = db.sql();
    truncating.exec("BEGIN");
    CHECK(truncating.exec("SELECT ax.turn_ring('history', 3600000)").int64(0, 0) == 1);
    auto acking = db.sql();
    acking.exec("SET lock_timeout = '2s'");
    acking.exec("INSERT INTO ax.history (id, kind, priority, state, attempts, enqueued_at) "
                "VALUES (9999, 'k', 1, 1, 1, now())"); // would time out if it waited
    truncating.exec("COMMIT");
    CHECK(slot_rows(db, "history", 3) == 1);
    CHECK(slot_rows(db, "history", 2) == 0);

    // Without the maintenance lock (another node holds it) maintenance turns nothing.
    age_current("9 minutes");
    auto blocker = db.sql();
    blocker.exec("BEGIN");
    blocker.exec("SELECT pg_advisory_xact_lock(7887330361530609268)");
    auto r = s.exec("SELECT got_lock, pruned FROM ax.maintain(3600000, 10000)");
    CHECK(!r.boolean(0, 0));
    CHECK(ring(s, "history").cur == 3);
    blocker.exec("COMMIT");
    r = s.exec("SELECT got_lock, pruned FROM ax.maintain(3600000, 10000)");
    CHECK(r.boolean(0, 0));
    CHECK(ring(s, "history").cur == 4);

    // A retention grown meanwhile: the next slot still holds rows younger than it, so the ring
    // does not turn onto it (the current slot keeps taking rows; nothing is dropped early).
    for (int i = 0; i < 8; ++i) {
        add(20000 + i * 10, 20000 + i * 10 + 9);
        age_current("9 minutes");
        turn(hour);
    }
    const int before = ring(s, "history").cur;
    age_current("10 hours");
    CHECK(turn(24 * hour) == 0);
    CHECK(ring(s, "history").cur == before);
}

TEST_CASE("under a flood that never pauses the history holds only what finished within its "
          "retention, and empties once the flood ends",
          "[pg][history_flood]") {
    Db db("ax_t_flood");
    pg::Client c(db.conninfo);
    std::vector<std::unique_ptr<pg::Node>> nodes;
    for (int i = 0; i < 2; ++i) {
        auto o = quick_node(db, "flood" + std::to_string(i));
        o.history_retention = 1000ms;
        o.maintenance_interval = 100ms;
        // A small prune batch: rows leave the history a slot at a time, whatever it is (it bounds
        // only the keys forgotten per pass). Row-by-row pruning of 100 per pass could not keep
        // up with this flood.
        o.prune_batch = 100;
        nodes.push_back(std::make_unique<pg::Node>(o));
        nodes.back()->handle("noop", [](pg::Job&) {});
        nodes.back()->start();
    }
    const auto finished = [&] {
        std::int64_t n = 0;
        for (auto& nd : nodes)
            n += static_cast<std::int64_t>(nd->stats().succeeded);
        return n;
    };
    // The ring may keep the retention x 8 / 7 (the slot being filled) plus a maintenance pass
    // before it turns; a second of slack for the acknowledgement's delay and the sampling.
    const double window_s = 1.0 * 8 / 7 + 0.1 + 1.0;
    struct Point {
        double t;
        std::int64_t finished;
    };
    std::vector<Point> points;
    std::atomic<bool> producing{true};
    std::thread producer([&] {
        pg::Client p(db.conninfo);
        for (int i = 0; i < 60; ++i) { // 60 x 1000 tasks, as fast as the nodes take them
            p.enqueue_many(tasks_of("noop", 1000));
            while (p.counts().live() > 3000)
                std::this_thread::sleep_for(10ms);
        }
        producing.store(false);
    });
    auto s = db.sql();
    const auto t0 = std::chrono::steady_clock::now();
    const auto now_s = [&] {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    std::int64_t worst_excess = 0, max_rows = 0;
    while (producing.load() && now_s() < 240) {
        const double t = now_s();
        const std::int64_t rows = s.exec("SELECT count(*) FROM ax.history").int64(0, 0);
        const std::int64_t done = finished();
        points.push_back({t, done});
        std::int64_t before = 0;
        for (auto& p : points)
            if (p.t <= t - window_s)
                before = p.finished;
        worst_excess = std::max(worst_excess, rows - (done - before));
        max_rows = std::max(max_rows, rows);
        std::this_thread::sleep_for(100ms);
    }
    producer.join();
    std::printf("  60 000 tasks in %.1f s: history at most %lld rows; rows beyond what finished in "
                "the last %.2f s: %lld\n",
                now_s(), static_cast<long long>(max_rows), window_s,
                static_cast<long long>(worst_excess));
    CHECK(worst_excess <= 0);
    CHECK(max_rows < 60000);
    // Once the flood ends the ring turns on (maintenance runs while idle) and empties every slot.
    CHECK(wait_until([&] { return db.scalar("SELECT count(*) FROM ax.history") == 0; }, 60s));
    CHECK(db.scalar("SELECT emptied FROM ax.rings WHERE name = 'history'") >= 7);
    CHECK(c.counts().live() == 0);
    for (auto& nd : nodes)
        nd->stop();
}

TEST_CASE("a PostgreSQL restart while nodes run: they reconnect and nothing is lost",
          "[pg][restart]") {
    const char* ctl = std::getenv("AX_PG_CTL");
    if (ctl == nullptr) {
        WARN("AX_PG_CTL not set (run under scripts/pg-server.sh): restart test skipped");
        return;
    }
    Db db("ax_t_restart");
    const std::size_t n = 4000;
    {
        pg::Client c(db.conninfo);
        c.enqueue_many(tasks_of("sleep", n, "1"));
    }
    const std::vector<std::string> args = {"--kinds",       "sleep", "--workers",  "4",
                                           "--max-batch",   "64",    "--lease-ms", "3000",
                                           "--maintain-ms", "300"};
    Proc a(db.conninfo, "r1", args);
    Proc b(db.conninfo, "r2", args);
    REQUIRE(wait_until([&] { return db.scalar("SELECT count(*) FROM results") >= 300; }, 60s));
    REQUIRE(std::system((std::string(ctl) + " restart >/dev/null").c_str()) == 0);
    std::printf("  server restarted with %lld of %zu results in\n",
                static_cast<long long>(db.scalar("SELECT count(*) FROM results")), n);
    pg::Client c(db.conninfo);
    REQUIRE(wait_until(
        [&] {
            try {
                return c.counts().live() == 0;
            } catch (const pg::Error&) {
                return false;
            }
        },
        120s));
    CHECK(db.scalar("SELECT count(*) FROM results") == static_cast<std::int64_t>(n));
    CHECK(db.scalar("SELECT count(*) FROM ax.history WHERE state = 1") ==
          static_cast<std::int64_t>(n));
    CHECK(c.counts().dead_letters == 0);
    CHECK(a.stop() == 0);
    CHECK(b.stop() == 0);
}

TEST_CASE("weighted claiming: 3:2:1 shares under saturation, low keeps moving", "[pg][weighted]") {
    Db db("ax_t_weighted");
    pg::Client c(db.conninfo);
    for (int p = 0; p < 3; ++p) {
        auto ts = tasks_of("w", 3000);
        for (auto& t : ts)
            t.priority = static_cast<ax::Priority>(p);
        c.enqueue_many(ts);
    }
    auto o = quick_node(db, "weighted");
    o.max_batch = 60;
    o.scheduler.max_wait = std::chrono::seconds(600); // measure the weights, not the aging
    pg::Node node(o);
    node.handle("w", [](pg::Job&) { std::this_thread::sleep_for(100us); });
    node.start();
    REQUIRE(wait_until(
        [&] {
            const auto s = node.stats();
            return s.claimed[0] + s.claimed[1] + s.claimed[2] >= 2400;
        },
        60s));
    node.stop();
    const auto s = node.stats();
    const double total = static_cast<double>(s.claimed[0] + s.claimed[1] + s.claimed[2]);
    const double h = s.claimed[0] / total, nn = s.claimed[1] / total, l = s.claimed[2] / total;
    std::printf("  claimed high %.3f normal %.3f low %.3f of %.0f\n", h, nn, l, total);
    CHECK(std::abs(h - 3.0 / 6) < 0.03);
    CHECK(std::abs(nn - 2.0 / 6) < 0.03);
    CHECK(std::abs(l - 1.0 / 6) < 0.03);
    CHECK(s.claimed[2] > 0);
}

TEST_CASE("tags: gpu tasks only on nodes offering gpu; untakeable tasks wait and are reported",
          "[pg][tags]") {
    Db db("ax_t_tags");
    pg::Client c(db.conninfo);
    std::vector<pg::NewTask> ts;
    for (int i = 0; i < 300; ++i)
        ts.push_back({.kind = "job", .tags = {"gpu"}});
    for (int i = 0; i < 300; ++i)
        ts.push_back({.kind = "job"});
    const auto ids = c.enqueue_many(ts);
    const auto tpu = c.enqueue({.kind = "job", .tags = {"tpu"}});
    std::mutex m;
    std::map<std::int64_t, std::string> ran;
    auto run_on = [&](const std::string& name) {
        return [&, name](pg::Job& j) {
            std::lock_guard lock(m);
            ran[j.id()] = name;
        };
    };
    auto oa = quick_node(db, "gpu-node");
    oa.tags = {"gpu", "bigmem"};
    pg::Node a(oa);
    a.handle("job", run_on("gpu-node"));
    pg::Node b(quick_node(db, "cpu-node"));
    b.handle("job", run_on("cpu-node"));
    // The cpu node starts alone and must run plain work before the gpu node joins: started
    // together, the gpu node (which may also take plain tasks) could drain all 600 before the
    // other's first claim.
    b.start();
    REQUIRE(wait_until([&] { return c.counts().succeeded > 0; }, 60s));
    a.start();
    REQUIRE(wait_until([&] { return c.counts().succeeded == 600; }, 60s));
    const auto status = c.status();
    a.stop();
    b.stop();
    int gpu_on_gpu = 0, plain_on_cpu = 0;
    for (int i = 0; i < 600; ++i) {
        const std::string& where = ran[ids[static_cast<std::size_t>(i)].id];
        if (i < 300) {
            CHECK(where == "gpu-node");
            gpu_on_gpu += where == "gpu-node";
        } else {
            plain_on_cpu += where == "cpu-node";
        }
    }
    std::printf("  gpu tasks on gpu-node: %d/300; plain tasks on cpu-node: %d/300\n", gpu_on_gpu,
                plain_on_cpu);
    CHECK(plain_on_cpu > 0);
    CHECK(ran.count(tpu.id) == 0);
    CHECK(c.query(tpu.id)->state == pg::TaskState::pending);
    REQUIRE(status.unclaimable_total == 1);
    CHECK(status.unclaimable[0].first.find("tags [tpu]: no live node offers them") !=
          std::string::npos);
    CHECK(status.nodes.size() == 2);
}

TEST_CASE("idempotency keys return the first task's ID, live or recently finished",
          "[pg][idempotency]") {
    Db db("ax_t_idem");
    pg::Client c(db.conninfo);
    const auto a = c.enqueue({.kind = "k", .idempotency_key = "order-42"});
    CHECK(!a.existed);
    const auto b = c.enqueue({.kind = "k", .idempotency_key = "order-42"});
    CHECK(b.existed);
    CHECK(b.id == a.id);
    const auto mixed =
        c.enqueue_many(std::vector<pg::NewTask>{{.kind = "k", .idempotency_key = "order-43"},
                                                {.kind = "k"},
                                                {.kind = "k", .idempotency_key = "order-42"}});
    CHECK(!mixed[0].existed);
    CHECK(!mixed[1].existed);
    CHECK(mixed[2].existed);
    CHECK(mixed[2].id == a.id);
    CHECK_THROWS_AS(
        c.enqueue_many(std::vector<pg::NewTask>{{.kind = "k", .idempotency_key = "dup"},
                                                {.kind = "k", .idempotency_key = "dup"}}),
        std::invalid_argument);
    CHECK(c.counts().live() == 3);
    std::atomic<int> runs{0};
    pg::Node node(quick_node(db, "idem"));
    node.handle("k", [&](pg::Job&) { runs.fetch_add(1); });
    node.start();
    REQUIRE(wait_until([&] { return c.counts().live() == 0; }, 30s));
    node.stop();
    CHECK(runs.load() == 3);
    const auto again = c.enqueue({.kind = "k", .idempotency_key = "order-42"});
    CHECK(again.existed);
    CHECK(again.id == a.id);
    CHECK(c.counts().live() == 0);
}

TEST_CASE("a key is remembered through dead letter, replay and discard, then for the "
          "retention after its task ended, and then makes a new task",
          "[pg][idempotency]") {
    Db db("ax_t_idem_life");
    pg::Client c(db.conninfo);
    auto s = db.sql();
    const auto a = c.enqueue({.kind = "fails", .max_attempts = 1, .idempotency_key = "K"});
    pg::Node node(quick_node(db, "idem_life"));
    node.handle("fails", [](pg::Job&) { throw std::runtime_error("down"); });
    node.start();
    REQUIRE(wait_until([&] { return c.counts().dead_letters == 1; }, 30s));
    CHECK(c.enqueue({.kind = "fails", .idempotency_key = "K"}).id == a.id); // a dead letter
    REQUIRE(c.replay_dead_letter(a.id));
    CHECK(c.enqueue({.kind = "fails", .idempotency_key = "K"}).id == a.id); // live again
    REQUIRE(wait_until([&] { return c.counts().dead_letters == 1; }, 30s));
    node.stop();
    REQUIRE(c.discard_dead_letter(a.id));
    CHECK(c.enqueue({.kind = "fails", .idempotency_key = "K"}).id == a.id); // discarded
    CHECK(db.scalar("SELECT count(*) FROM ax.idem_keys WHERE finished_at IS NOT NULL") == 1);
    // Within the retention maintenance keeps it; past it the key is forgotten and makes a new
    // task (the clock is injected by back-dating the key's end).
    s.exec("SELECT ax.maintain(3600000, 10000)");
    CHECK(c.enqueue({.kind = "fails", .idempotency_key = "K"}).existed);
    s.exec("UPDATE ax.idem_keys SET finished_at = finished_at - interval '2 hours'");
    CHECK(s.exec("SELECT pruned FROM ax.maintain(3600000, 10000)").int64(0, 0) == 1);
    const auto b2 = c.enqueue({.kind = "fails", .idempotency_key = "K"});
    CHECK(!b2.existed);
    CHECK(b2.id != a.id);
    // A live task's key and a dead letter's are never forgotten, however old.
    s.exec("UPDATE ax.tasks SET enqueued_at = enqueued_at - interval '1 year'");
    s.exec("SELECT ax.maintain(1, 10000)");
    CHECK(c.enqueue({.kind = "fails", .idempotency_key = "K"}).id == b2.id);
    // A cancelled task's key starts its retention too.
    CHECK(c.cancel(b2.id) == pg::CancelResult::cancelled);
    CHECK(db.scalar("SELECT count(*) FROM ax.idem_keys WHERE idem_key = 'K' AND finished_at IS "
                    "NOT NULL") == 1);
    // Dead letters past their ring's retention go whole, and their keys with them.
    CHECK(c.dead_letter_retention() == std::chrono::hours(24 * 14));
    CHECK_THROWS_AS(c.set_dead_letter_retention(0ms), std::invalid_argument);
    c.set_dead_letter_retention(std::chrono::hours(24 * 7));
    CHECK(c.dead_letter_retention() == std::chrono::hours(24 * 7));
    const auto d = c.enqueue({.kind = "gone", .idempotency_key = "D"});
    s.exec(("SELECT ax.dead_letter(" + std::to_string(d.id) + ", 'x', 'permanent error')").c_str());
    CHECK(c.enqueue({.kind = "gone", .idempotency_key = "D"}).id == d.id);
    s.exec("UPDATE ax.rings SET opened_at = opened_at - interval '3 days' WHERE name = "
           "'dead_letters'");
    s.exec("SELECT ax.turn_ring('dead_letters', NULL)"); // slot 0 closes
    s.exec("UPDATE ax.rings SET closed_at[1] = closed_at[1] - interval '6 days' WHERE name = "
           "'dead_letters'");
    CHECK(s.exec("SELECT ax.turn_ring('dead_letters', NULL)").int64(0, 0) == 0); // 6 < 7 days
    CHECK(c.counts().dead_letters == 1);
    s.exec("UPDATE ax.rings SET closed_at[1] = closed_at[1] - interval '2 days' WHERE name = "
           "'dead_letters'");
    CHECK(s.exec("SELECT ax.turn_ring('dead_letters', NULL)").int64(0, 0) == 1);
    CHECK(c.counts().dead_letters == 0);
    CHECK(!c.enqueue({.kind = "gone", .idempotency_key = "D"}).existed);
}

TEST_CASE("one key, one task: concurrent producers racing nodes that finish the key's task",
          "[pg][idempotency_race]") {
    Db db("ax_t_idem_race");
    const int keys = 1000, producers = 4, per_call = 25;
    const int calls = 1000; // per producer: 4 x 1000 x 25 = 100 000 keyed enqueues
    std::vector<std::unique_ptr<Proc>> procs;
    for (int i = 0; i < 3; ++i)
        procs.push_back(std::make_unique<Proc>(
            db.conninfo, "race" + std::to_string(i),
            std::vector<std::string>{"--kinds", "noop", "--workers", "2", "--max-batch", "64"}));
    // Each producer walks a window of 60 keys that slides over the 1000 keys during the run, so
    // every key is enqueued again and again while its task is pending, claimed, being
    // acknowledged (moving to the history) and finished: the interleavings that made two tasks.
    std::vector<std::map<std::string, std::set<std::int64_t>>> seen(producers);
    std::atomic<int> errors{0};
    std::vector<std::thread> threads;
    for (int p = 0; p < producers; ++p)
        threads.emplace_back([&, p] {
            try {
                pg::Client c(db.conninfo);
                std::mt19937 rng(static_cast<unsigned>(p * 7919 + 1));
                std::vector<std::string> names(per_call);
                for (int call = 0; call < calls; ++call) {
                    const int base = call * (keys - 60) / (calls - 1);
                    std::set<int> pick;
                    while (static_cast<int>(pick.size()) < per_call)
                        pick.insert(base + static_cast<int>(rng() % 60));
                    std::vector<pg::NewTask> batch;
                    int k = 0;
                    for (int key : pick) {
                        names[static_cast<std::size_t>(k)] = "key-" + std::to_string(key);
                        batch.push_back({.kind = "noop",
                                         .idempotency_key = names[static_cast<std::size_t>(k)]});
                        ++k;
                    }
                    std::shuffle(batch.begin(), batch.end(), rng);
                    const auto ids = c.enqueue_many(batch);
                    for (std::size_t i = 0; i < batch.size(); ++i)
                        seen[static_cast<std::size_t>(p)][std::string(batch[i].idempotency_key)]
                            .insert(ids[i].id);
                }
            } catch (const std::exception& e) {
                std::fprintf(stderr, "  producer %d: %s\n", p, e.what());
                errors.fetch_add(1);
            }
        });
    for (auto& t : threads)
        t.join();
    CHECK(errors.load() == 0);
    pg::Client c(db.conninfo);
    REQUIRE(wait_until([&] { return c.counts().live() == 0; }, 120s));
    for (auto& p : procs)
        CHECK(p->stop() == 0);
    // Every answer for a key, from every producer, is one ID.
    std::map<std::string, std::set<std::int64_t>> all;
    for (auto& m : seen)
        for (auto& [k, ids] : m)
            all[k].insert(ids.begin(), ids.end());
    std::size_t split_keys = 0;
    for (auto& [k, ids] : all)
        split_keys += ids.size() != 1;
    std::printf("  %d keyed enqueues of %zu keys against 3 nodes: %zu key(s) answered with more "
                "than one ID\n",
                producers * calls * per_call, all.size(), split_keys);
    CHECK(all.size() == static_cast<std::size_t>(keys));
    CHECK(split_keys == 0);
    // And the tables agree: one task row per key over live, history and dead letters, the one
    // the key's row names and the producers were told.
    CHECK(db.scalar("SELECT count(*) FROM (SELECT idem_key FROM (SELECT idem_key, id FROM "
                    "ax.tasks UNION ALL SELECT idem_key, id FROM ax.history UNION ALL SELECT "
                    "idem_key, id FROM ax.dead_letters) t WHERE idem_key IS NOT NULL GROUP BY "
                    "idem_key HAVING count(*) > 1) d") == 0);
    CHECK(db.scalar("SELECT count(*) FROM ax.history") == keys);
    CHECK(db.scalar("SELECT count(*) FROM ax.idem_keys") == keys);
    CHECK(db.scalar("SELECT count(*) FROM ax.idem_keys k JOIN ax.history h ON h.id = k.task_id "
                    "AND h.idem_key = k.idem_key") == keys);
    auto s = db.sql();
    for (auto& [k, ids] : all) {
        const auto id =
            s.exec_params("SELECT task_id FROM ax.idem_keys WHERE idem_key = $1", {k.c_str()})
                .int64(0, 0);
        if (id != *ids.begin()) {
            FAIL("key " << k << ": the table says " << id << ", producers were told "
                        << *ids.begin());
        }
    }
}

TEST_CASE("one key, one task through failures, retries, dead letters, replays and discards "
          "racing the enqueues",
          "[pg][idempotency_race]") {
    Db db("ax_t_idem_chaos");
    // Handlers that fail a third of the attempts (retried after 20-30 ms) and fail for good a
    // tenth (dead letters); a janitor replays half of the dead letters and discards the rest,
    // while producers enqueue the same 300 keys again and again.
    std::vector<std::unique_ptr<pg::Node>> nodes;
    for (int i = 0; i < 2; ++i) {
        auto o = quick_node(db, "chaos" + std::to_string(i));
        o.on_event = nullptr;
        nodes.push_back(std::make_unique<pg::Node>(o));
        nodes.back()->handle("flaky", [](pg::Job& j) {
            const auto h = (static_cast<std::uint64_t>(j.id()) * 2654435761u + j.attempt()) % 10;
            if (h == 0)
                throw ax::PermanentError("gone for good");
            if (h < 4)
                throw std::runtime_error("try again");
        });
        nodes.back()->start();
    }
    const int keys = 300, producers = 3, calls = 400, per_call = 20;
    std::vector<std::map<std::string, std::set<std::int64_t>>> seen(producers);
    std::atomic<int> errors{0};
    std::atomic<bool> producing{true};
    std::atomic<int> replayed{0}, discarded{0};
    std::thread janitor([&] {
        pg::Client c(db.conninfo);
        int turn = 0;
        while (producing.load()) {
            for (const auto& d : c.dead_letters(50)) {
                if (turn++ % 2 == 0)
                    replayed += c.replay_dead_letter(d.id) ? 1 : 0;
                else
                    discarded += c.discard_dead_letter(d.id) ? 1 : 0;
            }
            std::this_thread::sleep_for(5ms);
        }
    });
    std::vector<std::thread> threads;
    for (int p = 0; p < producers; ++p)
        threads.emplace_back([&, p] {
            try {
                pg::Client c(db.conninfo);
                std::mt19937 rng(static_cast<unsigned>(p + 17));
                for (int call = 0; call < calls; ++call) {
                    std::set<int> pick;
                    while (static_cast<int>(pick.size()) < per_call)
                        pick.insert(static_cast<int>(rng() % keys));
                    std::vector<std::string> names;
                    for (int k : pick)
                        names.push_back("chaos-" + std::to_string(k));
                    std::vector<pg::NewTask> batch;
                    for (auto& n : names)
                        batch.push_back({.kind = "flaky", .max_attempts = 3, .idempotency_key = n});
                    const auto ids = c.enqueue_many(batch);
                    for (std::size_t i = 0; i < batch.size(); ++i)
                        seen[static_cast<std::size_t>(p)][names[i]].insert(ids[i].id);
                }
            } catch (const std::exception& e) {
                std::fprintf(stderr, "  producer %d: %s\n", p, e.what());
                errors.fetch_add(1);
            }
        });
    for (auto& t : threads)
        t.join();
    producing.store(false);
    janitor.join();
    pg::Client c(db.conninfo);
    REQUIRE(wait_until([&] { return c.counts().live() == 0; }, 120s));
    for (auto& n : nodes)
        n->stop();
    CHECK(errors.load() == 0);
    std::map<std::string, std::set<std::int64_t>> all;
    for (auto& m : seen)
        for (auto& [k, ids] : m)
            all[k].insert(ids.begin(), ids.end());
    std::size_t split_keys = 0;
    for (auto& [k, ids] : all)
        split_keys += ids.size() != 1;
    std::printf("  %d keyed enqueues of %zu keys, %d replays, %d discards: %zu key(s) answered "
                "with more than one ID\n",
                producers * calls * per_call, all.size(), replayed.load(), discarded.load(),
                split_keys);
    CHECK(all.size() == static_cast<std::size_t>(keys));
    CHECK(split_keys == 0);
    CHECK(replayed.load() + discarded.load() > 0); // the janitor raced something
    CHECK(db.scalar("SELECT count(*) FROM (SELECT idem_key FROM (SELECT idem_key, id FROM "
                    "ax.tasks UNION ALL SELECT idem_key, id FROM ax.history UNION ALL SELECT "
                    "idem_key, id FROM ax.dead_letters) t WHERE idem_key IS NOT NULL GROUP BY "
                    "idem_key HAVING count(*) > 1) d") == 0);
    CHECK(db.scalar("SELECT count(*) FROM ax.idem_keys") == keys);
    // Each key's row names the one task the producers were told, wherever that task ended.
    CHECK(db.scalar("SELECT count(*) FROM ax.idem_keys k WHERE EXISTS (SELECT 1 FROM ax.history "
                    "h WHERE h.id = k.task_id) OR EXISTS (SELECT 1 FROM ax.dead_letters d WHERE "
                    "d.id = k.task_id)") == keys);
    // Ended keys (history) carry their end; dead letters' keys do not (never forgotten).
    CHECK(db.scalar("SELECT count(*) FROM ax.idem_keys k JOIN ax.dead_letters d ON d.id = "
                    "k.task_id WHERE k.finished_at IS NOT NULL") == 0);
    CHECK(db.scalar("SELECT count(*) FROM ax.idem_keys k JOIN ax.history h ON h.id = k.task_id "
                    "WHERE k.finished_at IS NULL") == 0);
}

TEST_CASE("bulk enqueue: IDs in input order, every field stored, all or nothing; keyed and "
          "unkeyed calls mix",
          "[pg][enqueue]") {
    Db db("ax_t_enqueue");
    pg::Client c(db.conninfo);
    // No key in the call: the unkeyed fast path. Every field lands on the row the ID names.
    const std::size_t n = 5000;
    std::vector<std::string> payloads(n);
    std::vector<pg::NewTask> ts(n);
    for (std::size_t i = 0; i < n; ++i) {
        payloads[i] = "p" + std::to_string(i);
        ts[i] = {.kind = i % 2 == 0 ? "even" : "odd",
                 .payload = payloads[i],
                 .priority = static_cast<ax::Priority>(i % 3),
                 .timeout = std::chrono::milliseconds(i % 7),
                 .max_attempts = 1 + static_cast<int>(i % 5),
                 .delay = i % 10 == 0 ? 3600s : 0s};
        if (i % 4 == 0)
            ts[i].tags = {"gpu", i % 3 == 0 ? "x" : "y"};
    }
    const auto ids = c.enqueue_many(ts);
    REQUIRE(ids.size() == n);
    for (std::size_t i = 0; i < n; ++i) {
        CHECK(!ids[i].existed);
        if (i > 0)
            REQUIRE(ids[i].id > ids[i - 1].id);
    }
    {
        auto s = db.sql();
        auto r = s.exec("SELECT id, kind, convert_from(payload, 'UTF8'), priority, timeout_ms, "
                        "max_attempts, run_at > now() + interval '59 minutes', "
                        "array_to_string(tags, ','), node_id IS NULL, attempts, idem_key IS NULL "
                        "FROM ax.tasks ORDER BY id");
        REQUIRE(r.rows() == static_cast<int>(n));
        std::size_t wrong = 0;
        for (std::size_t i = 0; i < n; ++i) {
            const int row = static_cast<int>(i);
            const std::string tags =
                i % 4 == 0 ? std::string("gpu,") + (i % 3 == 0 ? "x" : "y") : std::string();
            const bool ok =
                r.int64(row, 0) == ids[i].id && r.text(row, 1) == (i % 2 == 0 ? "even" : "odd") &&
                r.text(row, 2) == payloads[i] && r.int64(row, 3) == static_cast<int>(i % 3) &&
                r.int64(row, 4) == static_cast<int>(i % 7) &&
                r.int64(row, 5) == 1 + static_cast<int>(i % 5) &&
                r.boolean(row, 6) == (i % 10 == 0) && r.text(row, 7) == tags && r.boolean(row, 8) &&
                r.int64(row, 9) == 0 && r.boolean(row, 10);
            wrong += ok ? 0 : 1;
        }
        CHECK(wrong == 0);
    }
    CHECK(c.counts().scheduled[0] + c.counts().scheduled[1] + c.counts().scheduled[2] ==
          static_cast<std::int64_t>(n / 10));

    // All or nothing: a row the server refuses (a kind that is not UTF-8) fails the whole call,
    // on the unkeyed path and on the keyed one.
    const std::int64_t live = c.counts().live();
    auto poisoned = tasks_of("good", 2000);
    poisoned[1234].kind = "bad\xff";
    CHECK_THROWS_AS(c.enqueue_many(poisoned), pg::Error);
    CHECK(c.counts().live() == live);
    poisoned[7].idempotency_key = "key-of-a-failed-call";
    CHECK_THROWS_AS(c.enqueue_many(poisoned), pg::Error);
    CHECK(c.counts().live() == live);
    // The key of the failed call was not taken.
    CHECK(!c.enqueue({.kind = "k", .idempotency_key = "key-of-a-failed-call"}).existed);

    // Mixed calls: keyed and unkeyed tasks in one call keep input order and honour the keys;
    // unkeyed calls before and after take new, increasing IDs.
    const auto before = c.enqueue_many(tasks_of("k", 3));
    const auto mixed = c.enqueue_many(
        std::vector<pg::NewTask>{{.kind = "k"},
                                 {.kind = "k", .idempotency_key = "key-of-a-failed-call"},
                                 {.kind = "k", .idempotency_key = "fresh"},
                                 {.kind = "k"}});
    const auto after = c.enqueue_many(tasks_of("k", 3));
    REQUIRE(mixed.size() == 4);
    CHECK(!mixed[0].existed);
    CHECK(mixed[1].existed);
    CHECK(!mixed[2].existed);
    CHECK(!mixed[3].existed);
    CHECK(mixed[0].id > before.back().id);
    CHECK(mixed[3].id > mixed[2].id);
    CHECK(mixed[2].id > mixed[0].id);
    CHECK(after.front().id > mixed[3].id);
    CHECK(c.enqueue({.kind = "k", .idempotency_key = "fresh"}).id == mixed[2].id);
    CHECK(c.counts().live() == live + 1 + 3 + 3 + 3);
    // A duplicate ID can never be handed out: every ID above is distinct and live.
    CHECK(db.scalar("SELECT count(DISTINCT id) FROM ax.tasks") == c.counts().live());
}

TEST_CASE("bulk enqueue by COPY: every field stored, IDs in input order, all or nothing; a node "
          "wakes and runs each task once",
          "[pg][enqueue]") {
    Db db("ax_t_enqueue_copy");
    // No key and no delay in the call, at least copy_min_tasks tasks: the COPY path. Payloads
    // hold every byte value, tags every shape the binary text[] encoding has (none, one, many).
    pg::Client c(db.conninfo, {.copy_min_tasks = 100});
    const std::size_t n = 3000;
    std::vector<std::string> payloads(n);
    std::vector<pg::NewTask> ts(n);
    for (std::size_t i = 0; i < n; ++i) {
        for (std::size_t k = 0; k < i % 300; ++k)
            payloads[i].push_back(static_cast<char>((i + k) & 0xff));
        ts[i] = {.kind = i % 2 == 0 ? "even" : "odd",
                 .payload = payloads[i],
                 .priority = static_cast<ax::Priority>(i % 3),
                 .timeout = std::chrono::milliseconds(i % 7),
                 .max_attempts = 1 + static_cast<int>(i % 5)};
        if (i % 4 == 1)
            ts[i].tags = {"gpu"};
        else if (i % 4 == 2)
            ts[i].tags = {"gpu", i % 3 == 0 ? "x" : "y", "zz"};
    }
    const auto ids = c.enqueue_many(ts);
    REQUIRE(ids.size() == n);
    for (std::size_t i = 0; i < n; ++i) {
        CHECK(!ids[i].existed);
        if (i > 0)
            REQUIRE(ids[i].id > ids[i - 1].id);
    }
    {
        auto s = db.sql();
        auto r = s.exec("SELECT id, kind, encode(payload, 'hex'), priority, timeout_ms, "
                        "max_attempts, run_at <= now() AND enqueued_at <= now(), "
                        "array_to_string(tags, ','), node_id IS NULL, attempts, idem_key IS NULL, "
                        "cancel_requested, cardinality(errors) FROM ax.tasks ORDER BY id");
        REQUIRE(r.rows() == static_cast<int>(n));
        std::size_t wrong = 0;
        static constexpr char hex[] = "0123456789abcdef";
        for (std::size_t i = 0; i < n; ++i) {
            const int row = static_cast<int>(i);
            std::string want_hex;
            for (const char ch : payloads[i]) {
                want_hex.push_back(hex[(static_cast<unsigned char>(ch) >> 4) & 0xf]);
                want_hex.push_back(hex[static_cast<unsigned char>(ch) & 0xf]);
            }
            const std::string tags = i % 4 == 1 ? std::string("gpu")
                                     : i % 4 == 2
                                         ? std::string("gpu,") + (i % 3 == 0 ? "x" : "y") + ",zz"
                                         : std::string();
            const bool ok =
                r.int64(row, 0) == ids[i].id && r.text(row, 1) == (i % 2 == 0 ? "even" : "odd") &&
                r.text(row, 2) == want_hex && r.int64(row, 3) == static_cast<int>(i % 3) &&
                r.int64(row, 4) == static_cast<int>(i % 7) &&
                r.int64(row, 5) == 1 + static_cast<int>(i % 5) && r.boolean(row, 6) &&
                r.text(row, 7) == tags && r.boolean(row, 8) && r.int64(row, 9) == 0 &&
                r.boolean(row, 10) && !r.boolean(row, 11) && r.int64(row, 12) == 0;
            wrong += ok ? 0 : 1;
        }
        CHECK(wrong == 0);
    }
    const auto pending = [&] {
        const auto k = c.counts();
        return k.pending[0] + k.pending[1] + k.pending[2];
    };
    CHECK(pending() == static_cast<std::int64_t>(n));

    // All or nothing: one row the server refuses (a kind that is not UTF-8) fails the COPY.
    auto poisoned = tasks_of("good", 500);
    poisoned[321].kind = "bad\xff";
    CHECK_THROWS_AS(c.enqueue_many(poisoned), pg::Error);
    CHECK(c.counts().live() == static_cast<std::int64_t>(n));
    // The connection is usable after the failed COPY, and small calls (the INSERT) and large
    // ones (the COPY) take increasing IDs, never one twice.
    const auto small = c.enqueue_many(tasks_of("even", 3));
    const auto big = c.enqueue_many(tasks_of("even", 200));
    CHECK(small.front().id > ids.back().id);
    CHECK(big.front().id > small.back().id);
    CHECK(db.scalar("SELECT count(DISTINCT id) FROM ax.tasks") == c.counts().live());
    CHECK(c.counts().live() == static_cast<std::int64_t>(n + 203));

    // A node runs every task exactly once, including one enqueued by COPY while it runs
    // (copy_min_tasks = 1 sends even a single task that way).
    std::mutex m;
    std::set<std::int64_t> seen;
    std::atomic<int> dups{0};
    auto o = quick_node(db, "copy");
    o.tags = {"gpu", "x", "y", "zz"};
    pg::Node node(o);
    const auto count_run = [&](pg::Job& j) {
        std::lock_guard lock(m);
        if (!seen.insert(j.id()).second)
            dups.fetch_add(1);
    };
    node.handle("even", count_run);
    node.handle("odd", count_run);
    node.handle("one", count_run);
    node.start();
    REQUIRE(wait_until([&] { return c.counts().live() == 0; }, 120s));
    pg::Client one(db.conninfo, {.copy_min_tasks = 1});
    const auto single = one.enqueue_many(tasks_of("one", 1));
    REQUIRE(single.size() == 1);
    REQUIRE(wait_until(
        [&] {
            std::lock_guard lock(m);
            return seen.count(single[0].id) == 1;
        },
        120s));
    node.stop();
    CHECK(dups.load() == 0);
    CHECK(seen.size() == n + 203 + 1);
    CHECK(db.scalar("SELECT count(*) FROM ax.history WHERE state = 1") ==
          static_cast<std::int64_t>(n + 203 + 1));
}

TEST_CASE("cross-node cancel: the running task's process sees its stop token", "[pg][cancel]") {
    Db db("ax_t_cancel");
    pg::Client c(db.conninfo);
    // A queued task nobody claims is cancelled at once.
    const auto idle = c.enqueue({.kind = "nobody-handles-this"});
    CHECK(c.cancel(idle.id) == pg::CancelResult::cancelled);
    CHECK(c.query(idle.id)->state == pg::TaskState::cancelled);
    CHECK(c.cancel(idle.id) == pg::CancelResult::finished);
    CHECK(c.cancel(123456789) == pg::CancelResult::unknown);

    Proc p(db.conninfo, "holder", {"--kinds", "wait_stop", "--workers", "2"});
    const auto t = c.enqueue({.kind = "wait_stop"});
    REQUIRE(wait_until([&] { return c.query(t.id)->state == pg::TaskState::claimed; }, 30s));
    std::this_thread::sleep_for(300ms); // let it start running
    CHECK(c.cancel(t.id) == pg::CancelResult::cancel_requested);
    REQUIRE(wait_until([&] { return c.query(t.id)->state == pg::TaskState::cancelled; }, 30s));
    CHECK(db.scalar("SELECT count(*) FROM stops WHERE saw_stop AND node = 'holder' AND task_id = " +
                    std::to_string(t.id)) == 1);
    CHECK(p.stop() == 0);
}

TEST_CASE("failures retry with back-off, then dead-letter; replay and discard",
          "[pg][dead_letters]") {
    Db db("ax_t_dead");
    pg::Client c(db.conninfo);
    std::atomic<bool> broken{true};
    std::atomic<int> attempts{0};
    pg::Node node(quick_node(db, "dl"));
    node.handle("flaky", [&](pg::Job& j) {
        attempts.fetch_add(1);
        if (broken.load())
            throw std::runtime_error("backend down (attempt " + std::to_string(j.attempt()) + ")");
    });
    node.handle("strict", [](pg::Job& j) {
        if (j.payload() == "bad")
            throw ax::PermanentError("payload rejected: 'bad'");
    });
    node.start();
    const auto f = c.enqueue({.kind = "flaky", .max_attempts = 3});
    const auto bad = c.enqueue({.kind = "strict", .payload = "bad", .max_attempts = 5});
    const auto good = c.enqueue({.kind = "strict", .payload = "fine"});
    REQUIRE(
        wait_until([&] { return c.counts().dead_letters == 2 && c.counts().live() == 0; }, 30s));
    CHECK(attempts.load() == 3);
    CHECK(c.query(good.id)->state == pg::TaskState::succeeded);
    const auto list = c.dead_letters();
    REQUIRE(list.size() == 2);
    for (const auto& d : list) {
        if (d.id == f.id) {
            CHECK(d.attempts == 3);
            CHECK(d.reason == "attempts exhausted");
            REQUIRE(d.errors.size() == 3);
            CHECK(d.errors[2].find("std::runtime_error: backend down (attempt 3)") !=
                  std::string::npos);
        } else {
            CHECK(d.id == bad.id);
            CHECK(d.attempts == 1); // permanent: no retry
            CHECK(d.reason == "permanent error");
            REQUIRE(d.errors.size() == 1);
            CHECK(d.errors[0].find("payload rejected") != std::string::npos);
            CHECK(d.payload == "bad");
        }
    }
    CHECK(c.query(f.id)->state == pg::TaskState::dead_lettered);
    broken.store(false);
    CHECK(c.replay_dead_letter(f.id));
    CHECK(!c.replay_dead_letter(f.id));
    REQUIRE(wait_until([&] { return c.query(f.id)->state == pg::TaskState::succeeded; }, 30s));
    CHECK(c.query(f.id)->attempts == 1); // a fresh attempt series
    CHECK(c.discard_dead_letter(bad.id));
    CHECK(c.query(bad.id)->state == pg::TaskState::discarded);
    CHECK(c.dead_letters().empty());
    node.stop();
}

TEST_CASE("bad input gets a clear error and loses nothing", "[pg][bad_input]") {
    Db db("ax_t_bad");
    // Malformed connection strings, before any connection is tried.
    try {
        pg::Client bad("host=localhost port");
        FAIL("malformed conninfo accepted");
    } catch (const std::invalid_argument& e) {
        CHECK(std::string(e.what()).find("malformed connection string") != std::string::npos);
    }
    pg::NodeOptions unterminated;
    unterminated.conninfo = "dbname='unterminated";
    CHECK_THROWS_AS(pg::Node(unterminated), std::invalid_argument);
    CHECK_THROWS_AS(pg::Client("host=/nonexistent-dir port=1"), pg::ConnectionError);

    pg::Client c(db.conninfo);
    const std::string big((1 << 20) + 1, 'x');
    try {
        c.enqueue_many(std::vector<pg::NewTask>{{.kind = "k"}, {.kind = "k", .payload = big}});
        FAIL("oversized payload accepted");
    } catch (const std::invalid_argument& e) {
        CHECK(std::string(e.what()).find(
                  "#1: payload = 1048577 bytes: exceeds max_payload_bytes (1048576)") !=
              std::string::npos);
    }
    CHECK(c.counts().live() == 0); // all or nothing
    CHECK_THROWS_AS(c.enqueue({.kind = ""}), std::invalid_argument);
    CHECK_THROWS_AS(c.enqueue({.kind = "k", .max_attempts = 0}), std::invalid_argument);
    CHECK_THROWS_AS(c.enqueue({.kind = "k", .timeout = -1ms}), std::invalid_argument);
    CHECK_THROWS_AS(c.enqueue({.kind = "k", .tags = {"a,b"}}), std::invalid_argument);
    CHECK_THROWS_AS(pg::Client(db.conninfo, {.max_payload_bytes = std::size_t{65} << 20}),
                    std::invalid_argument);
    auto bad_opts = quick_node(db, "x");
    bad_opts.max_batch = 0;
    CHECK_THROWS_AS(pg::Node(bad_opts), std::invalid_argument);
    for (const std::uint32_t links : {0u, 17u}) {
        auto o = quick_node(db, "x");
        o.connections = links;
        try {
            pg::Node bad(o);
            FAIL("connections = " << links << " accepted");
        } catch (const std::invalid_argument& e) {
            CHECK(std::string(e.what()).find("connections = " + std::to_string(links) +
                                             ": must be in 1..16") != std::string::npos);
        }
    }
    pg::Node none(quick_node(db, "none"));
    CHECK_THROWS_AS(none.start(), std::logic_error); // no handler
    // A payload at the limit is fine, and arrives intact (binary, with NUL bytes).
    std::string exact(1 << 20, '\0');
    exact[5] = 'z';
    const auto e = c.enqueue({.kind = "blob", .payload = exact});

    // An unknown kind waits, visible in status, until a node handles it.
    const auto u = c.enqueue({.kind = "later"});
    std::atomic<bool> blob_ok{false};
    pg::Node n1(quick_node(db, "n1"));
    n1.handle("blob", [&](pg::Job& j) { blob_ok.store(j.payload() == exact); });
    n1.start();
    REQUIRE(wait_until([&] { return c.query(e.id)->state == pg::TaskState::succeeded; }, 30s));
    CHECK(blob_ok.load());
    std::this_thread::sleep_for(300ms);
    CHECK(c.query(u.id)->state == pg::TaskState::pending);
    const auto s = c.status();
    REQUIRE(s.unclaimable_total == 1);
    CHECK(s.unclaimable[0].first == "kind later: no live node handles it");
    pg::Node n2(quick_node(db, "n2"));
    n2.handle("later", [](pg::Job&) {});
    n2.start();
    REQUIRE(wait_until([&] { return c.query(u.id)->state == pg::TaskState::succeeded; }, 30s));
    n1.stop();
    n2.stop();
}

TEST_CASE("graceful stop hands claimed, unstarted tasks back at once", "[pg][stop]") {
    Db db("ax_t_stop");
    pg::Client c(db.conninfo);
    c.enqueue_many(tasks_of("slow", 40));
    auto o = quick_node(db, "stopper");
    o.scheduler.min_workers = 1;
    o.scheduler.max_workers = 1;
    o.tasks_per_worker = 20;
    std::atomic<int> started{0};
    pg::Node node(o);
    node.handle("slow", [&](pg::Job&) {
        started.fetch_add(1);
        std::this_thread::sleep_for(100ms);
    });
    node.start();
    REQUIRE(wait_until([&] { return started.load() >= 1 && node.stats().depth >= 10; }, 30s));
    node.stop();
    const auto st = node.stats();
    std::printf("  stop: %llu handed back, %llu finished\n",
                static_cast<unsigned long long>(st.released),
                static_cast<unsigned long long>(st.succeeded));
    CHECK(st.released >= 5);
    CHECK(db.scalar("SELECT count(*) FROM ax.tasks WHERE node_id IS NULL AND attempts = 0") ==
          static_cast<std::int64_t>(40 - st.succeeded));
    CHECK(c.counts().succeeded == static_cast<std::int64_t>(st.succeeded));
    CHECK(db.scalar("SELECT count(*) FROM ax.batches") == 0);
}

TEST_CASE("a batch closed with a wrong count or checksum puts the missing tasks back",
          "[pg][checksum]") {
    Db db("ax_t_checksum");
    pg::Client c(db.conninfo);
    const auto ids = c.enqueue_many(tasks_of("k", 4));
    auto s = db.sql();
    const std::string node =
        std::to_string(s.exec("INSERT INTO ax.nodes (name, kinds, tags, lease_until) VALUES "
                              "('fake', '{k}', '{}', now() + interval '1 min') RETURNING id")
                           .int64(0, 0));
    const std::string batch = std::to_string(
        s.exec(("INSERT INTO ax.batches (node_id, size, checksum, lease_until) SELECT " + node +
                ", count(*), bit_xor(id), now() + interval '1 min' FROM ax.tasks RETURNING id")
                   .c_str())
            .int64(0, 0));
    s.exec(("UPDATE ax.tasks SET node_id = " + node + ", batch_id = " + batch + ", attempts = 1")
               .c_str());
    // The node acknowledges only the first task, then closes the batch claiming all four.
    s.exec(("DELETE FROM ax.tasks WHERE id = " + std::to_string(ids[0].id)).c_str());
    const std::int64_t all_xor = ids[0].id ^ ids[1].id ^ ids[2].id ^ ids[3].id;
    CHECK(s.exec(("SELECT ax.close_batch(" + node + ", " + batch + ", 4, " +
                  std::to_string(all_xor ^ 1) + ")")
                     .c_str())
              .int64(0, 0) == 3);
    CHECK(db.scalar("SELECT count(*) FROM ax.tasks WHERE node_id IS NULL") == 3);
    CHECK(c.status().checksum_mismatches == 1);
}

TEST_CASE("an idle node is woken by NOTIFY at once, not by its poll", "[pg][notify]") {
    Db db("ax_t_notify");
    pg::Client c(db.conninfo);
    auto o = quick_node(db, "idle");
    o.poll_interval = 120s; // the fallback would take two minutes
    o.maintenance_interval = 120s;
    o.lease = 600s;
    std::atomic<int> ran{0};
    pg::Node node(o);
    node.handle("k", [&](pg::Job&) { ran.fetch_add(1); });
    node.start();
    REQUIRE(wait_until([&] { return node.stats().claims >= 1; }, 30s)); // idle now
    std::this_thread::sleep_for(200ms);
    const auto t0 = std::chrono::steady_clock::now();
    c.enqueue({.kind = "k"});
    REQUIRE(wait_until([&] { return ran.load() == 1; }, 60s)); // hang guard, well under the poll
    std::printf(
        "  idle node ran a new task %.0f ms after the enqueue (poll interval 120 s)\n",
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    node.stop();
}

TEST_CASE("a lane's token bucket caps what the node claims from it", "[pg][rate]") {
    Db db("ax_t_rate");
    pg::Client c(db.conninfo);
    auto low = tasks_of("k", 110);
    for (auto& t : low)
        t.priority = ax::Priority::low;
    c.enqueue_many(low);
    c.enqueue_many(tasks_of("k", 200)); // normal lane: unlimited
    auto o = quick_node(db, "rated");
    o.rate_per_s = {0, 0, 50};
    o.burst = {100, 100, 10};
    pg::Node node(o);
    node.handle("k", [](pg::Job&) {});
    const auto t0 = std::chrono::steady_clock::now();
    node.start();
    REQUIRE(wait_until([&] { return c.counts().live() == 0; }, 60s));
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    node.stop();
    std::printf("  110 low tasks at 50/s (burst 10) took %.2f s\n", secs);
    // A lower bound, so load cannot make it fail: 100 tokens at 50/s need 2 s.
    CHECK(secs >= 1.8);
    CHECK(node.stats().claimed[2] == 110);
    CHECK(node.stats().claimed[1] == 200);
}

TEST_CASE("two links keep two claims in the server at once; stop hands back what was in flight",
          "[pg][links]") {
    Db db("ax_t_links");
    pg::Client c(db.conninfo);
    const std::size_t n = 600;
    auto ts = tasks_of("k", n);
    for (std::size_t i = 0; i < n; ++i) // every lane has a backlog: claims come back full
        ts[i].priority = static_cast<ax::Priority>(i % 3);
    const auto ids = c.enqueue_many(ts);
    // Every claim sleeps 200 ms in the server (its insert into ax.batches), so a claim that
    // overlaps another is there to be seen, however loaded the machine.
    {
        auto s = db.sql();
        s.exec("CREATE FUNCTION slow_claim() RETURNS trigger LANGUAGE plpgsql AS "
               "$$ BEGIN PERFORM pg_sleep(0.2); RETURN NEW; END $$");
        s.exec("CREATE TRIGGER slow_claim BEFORE INSERT ON ax.batches FOR EACH ROW "
               "EXECUTE FUNCTION slow_claim()");
    }
    auto watcher = db.sql();
    const auto claims_in_server = [&] {
        return watcher
            .exec("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                  "AND state = 'active' AND pid <> pg_backend_pid() "
                  "AND query LIKE '%INSERT INTO ax.batches (node_id, size%'")
            .int64(0, 0);
    };
    std::atomic<std::uint64_t> ran{0};
    const auto options = [&](std::uint32_t links) {
        auto o = quick_node(db, "links" + std::to_string(links));
        o.connections = links;
        o.max_batch = 8;
        return o;
    };
    {
        // One link: one claim at a time.
        pg::Node one(options(1));
        one.handle("k", [&](pg::Job&) { ran.fetch_add(1); });
        one.start();
        REQUIRE(wait_until([&] { return one.stats().claims >= 1; }, 30s));
        std::int64_t most = 0;
        for (int i = 0; i < 40; ++i) {
            most = std::max(most, claims_in_server());
            std::this_thread::sleep_for(10ms);
        }
        CHECK(most <= 1);
        one.stop();
        const auto st = one.stats();
        CHECK(st.claimed[0] + st.claimed[1] + st.claimed[2] == st.succeeded + st.released);
        CHECK(st.round_trips >= st.claims);
    }
    // Two links; both workers block in their handler until the gate opens, so every other
    // claimed task waits in the local queue.
    auto o2 = options(2);
    o2.tasks_per_worker = 64;
    o2.stop_grace = 120s; // the blocked handlers finish when the gate opens
    std::atomic<bool> gate{false};
    std::atomic<int> blocked{0};
    pg::Node two(o2);
    two.handle("k", [&](pg::Job&) {
        blocked.fetch_add(1);
        while (!gate.load())
            std::this_thread::sleep_for(1ms);
        ran.fetch_add(1);
    });
    two.start();
    // Wait until a claim was read back and two more are in the server: the driver reads the
    // older one when stop() comes, then hands back what is queued, then reads the newer one.
    REQUIRE(wait_until([&] { return two.stats().claims >= 1 && claims_in_server() >= 2; }, 30s));
    // Stop while both links carry a claim (each takes 200 ms in the server): the tasks of a
    // claim read back after stop() go back with the unstarted ones instead of being queued to
    // run. Once no claim is left in the server, everything claimed is either one of the two
    // blocked tasks or handed back.
    std::thread stopper([&] { two.stop(); });
    const auto claimed_of = [](const pg::NodeStats& s) {
        return s.claimed[0] + s.claimed[1] + s.claimed[2];
    };
    const bool settled = wait_until(
        [&] {
            const auto s = two.stats();
            return claims_in_server() == 0 && blocked.load() == 2 &&
                   claimed_of(s) == s.released + 2;
        },
        60s);
    gate.store(true);
    stopper.join();
    CHECK(settled);
    const auto st = two.stats();
    std::printf("  two links: %llu claims, %llu round trips, %llu succeeded, %llu handed back\n",
                static_cast<unsigned long long>(st.claims),
                static_cast<unsigned long long>(st.round_trips),
                static_cast<unsigned long long>(st.succeeded),
                static_cast<unsigned long long>(st.released));
    CHECK(st.succeeded == 2);
    CHECK(claimed_of(st) == st.succeeded + st.released);
    CHECK(db.scalar("SELECT count(*) FROM ax.tasks WHERE node_id IS NOT NULL") == 0);
    CHECK(db.scalar("SELECT count(*) FROM ax.batches") == 0);
    const auto finished = c.counts().succeeded;
    CHECK(static_cast<std::uint64_t>(finished) == ran.load());
    CHECK(db.scalar("SELECT count(*) FROM ax.tasks WHERE attempts = 0") ==
          static_cast<std::int64_t>(n) - finished);
    // The rest runs to the end, each task once, on a node with four links.
    watcher.exec("DROP TRIGGER slow_claim ON ax.batches");
    std::mutex m;
    std::set<std::int64_t> seen;
    std::atomic<int> dups{0};
    pg::Node four(options(4));
    four.handle("k", [&](pg::Job& j) {
        std::lock_guard lock(m);
        if (!seen.insert(j.id()).second)
            dups.fetch_add(1);
    });
    four.start();
    REQUIRE(wait_until([&] { return c.counts().live() == 0; }, 60s));
    four.stop();
    CHECK(dups.load() == 0);
    CHECK(static_cast<std::int64_t>(seen.size()) == static_cast<std::int64_t>(n) - finished);
    CHECK(c.counts().succeeded == static_cast<std::int64_t>(n));
    CHECK(db.scalar("SELECT count(*) FROM ax.batches") == 0);
    CHECK(db.scalar("SELECT value FROM ax.counters WHERE name = 'checksum_mismatches'") == 0);
    CHECK(c.query(ids.back().id)->attempts == 1);
}

TEST_CASE("the maintenance lock key is the one the schema's SQL takes (no database)",
          "[pg][logic]") {
    const std::string call = "pg_try_advisory_xact_lock(";
    const std::string key = call + std::to_string(pg::detail::maintain_lock_key) + ")";
    int takes = 0;
    for (const char* m : pg::detail::migrations) {
        const std::string sql(m);
        for (auto at = sql.find(call); at != std::string::npos; at = sql.find(call, at + 1)) {
            // A literal key is the maintenance one; the limits' keys (migration 12) are hashes
            // of a group and key, computed in the call.
            const char first = sql[at + call.size()];
            if (first == '-' || (first >= '0' && first <= '9')) {
                ++takes;
                CHECK(sql.compare(at, key.size(), key) == 0);
            }
        }
    }
    CHECK(takes >= 1);
}

TEST_CASE("claim splitting and the batch-size PID (no database)", "[pg][logic]") {
    pg::detail::LaneSplitter sp;
    std::array<std::uint64_t, 3> got{};
    for (int i = 0; i < 600; ++i) {
        const auto q = sp.split(4, {3, 2, 1}, {false, false, false}, {false, false, false});
        CHECK(q[0] + q[1] + q[2] == 4);
        for (std::size_t p = 0; p < 3; ++p)
            got[p] += q[p];
    }
    CHECK(got[0] == 1200); // exact 3:2:1 over time even with batches of 4
    CHECK(got[1] == 800);
    CHECK(got[2] == 400);
    const auto probe = sp.split(60, {3, 2, 1}, {true, false, true}, {false, false, false});
    CHECK(probe[0] == 1);
    CHECK(probe[1] == 60);
    CHECK(probe[2] == 1);
    const auto aged = sp.split(60, {3, 2, 1}, {false, false, false}, {false, false, true});
    CHECK(aged[2] >= 30); // overdue lane: at least half

    pg::detail::BatchPid pid;
    const auto empty = pid.next(400, 0, 512);
    CHECK(empty >= 300);
    pid.reset();
    CHECK(pid.next(400, 399, 512) <= 10);
    CHECK(pid.next(400, 600, 512) == 1);
    CHECK(pid.next(1e9, 0, 512) == 512);

    pg::detail::TokenBucket tb{10, 5, 5, std::chrono::steady_clock::now()};
    CHECK(tb.allow(100) == 5);
    tb.take(5);
    CHECK(tb.allow(100) == 0);
    CHECK(tb.wait() >= std::chrono::milliseconds(99));
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
