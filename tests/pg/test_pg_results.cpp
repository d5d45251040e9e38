// Task results, Client::wait and snooze against a real PostgreSQL (issue 28, parts 3 and 7).
// scripts/pg-server.sh starts a throw-away server and exports AX_PG_CONNINFO; without it every
// test is skipped (exit 77). Each test case works in a database of its own, with an in-process
// node. Durations here are generous hang guards or lower bounds the design promises, never
// speed claims.

#define CATCH_CONFIG_RUNNER
#include <atomic>
#include <ax/pg/pg.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
namespace pg = ax::pg;
using Clock = std::chrono::steady_clock;

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

pg::NodeOptions node_options(const std::string& conninfo) {
    pg::NodeOptions o;
    o.conninfo = conninfo;
    o.scheduler.min_workers = 2;
    o.scheduler.max_workers = 2;
    o.poll_interval = 100ms;
    o.maintenance_interval = 200ms;
    return o;
}

std::int64_t enqueue(pg::Client& c, std::string_view kind, std::string_view payload = {},
                     int max_attempts = 4) {
    return c.enqueue({.kind = kind, .payload = payload, .max_attempts = max_attempts}).id;
}

/// Waits (a hang guard) until `id` has ended, by the client's own wait.
pg::TaskResult ended(pg::Client& c, std::int64_t id) {
    auto r = c.wait(id, 60s);
    REQUIRE(r.has_value());
    REQUIRE(r->finished());
    return *r;
}

} // namespace

TEST_CASE("results: round trip of empty, binary, limit-sized and too large results", "[results]") {
    const std::string db = fresh_db("ax_results_roundtrip");
    pg::Client c(db);
    const std::string binary("a\0b\0\0c\xff\x00z", 9);
    pg::NodeOptions o = node_options(db);
    o.max_result_bytes = 64 * 1024;
    const std::string at_limit(o.max_result_bytes, '\0');
    pg::Node node(o);
    node.handle("res", [&](pg::Job& j) {
        const std::string_view p = j.payload();
        if (p == "empty")
            j.set_result(std::string_view{});
        else if (p == "binary")
            j.set_result(binary);
        else if (p == "limit")
            j.set_result(at_limit);
        else if (p == "over")
            j.set_result(std::string(o.max_result_bytes + 1, 'x')); // throws ResultTooLarge
        else if (p == "caught") {
            try {
                j.set_result(std::string(o.max_result_bytes + 1, 'x'));
            } catch (const pg::ResultTooLarge&) {
                j.set_result("key-of-the-big-output"); // the handler chose a smaller result
            }
        }
        // "none": no result
    });
    const auto empty = enqueue(c, "res", "empty"), bin = enqueue(c, "res", "binary"),
               limit = enqueue(c, "res", "limit"), over = enqueue(c, "res", "over"),
               caught = enqueue(c, "res", "caught"), none = enqueue(c, "res", "none");
    node.start();

    const auto e = ended(c, empty);
    CHECK(e.state == pg::TaskState::succeeded);
    REQUIRE(e.result.has_value());
    CHECK(e.result->empty());
    CHECK(e.error.empty());

    const auto b = ended(c, bin);
    CHECK(b.state == pg::TaskState::succeeded);
    REQUIRE(b.result.has_value());
    CHECK(*b.result == binary); // NULs and 0xff intact, nothing truncated
    CHECK(b.attempts == 1);

    const auto l = ended(c, limit);
    CHECK(l.state == pg::TaskState::succeeded);
    REQUIRE(l.result.has_value());
    CHECK(*l.result == at_limit);

    // Over the limit: the attempt fails for good, the dead letter says why; nothing stored.
    const auto v = ended(c, over);
    CHECK(v.state == pg::TaskState::dead_lettered);
    CHECK_FALSE(v.result.has_value());
    CHECK(v.error.find("exceeds NodeOptions::max_result_bytes (65536)") != std::string::npos);
    CHECK(v.attempts == 1);
    const auto dl = c.dead_letters();
    REQUIRE(dl.size() == 1);
    CHECK(dl[0].reason == "permanent error");

    const auto k = ended(c, caught);
    CHECK(k.state == pg::TaskState::succeeded);
    REQUIRE(k.result.has_value());
    CHECK(*k.result == "key-of-the-big-output");

    const auto n = ended(c, none);
    CHECK(n.state == pg::TaskState::succeeded);
    CHECK_FALSE(n.result.has_value());

    // result() agrees with wait(), and an unknown ID is nullopt for both.
    const auto again = c.result(bin);
    REQUIRE(again.has_value());
    CHECK(again->result == b.result);
    CHECK_FALSE(c.result(999999).has_value());
    CHECK_FALSE(c.wait(999999, 10s).has_value());
    node.stop();
    CHECK(node.stats().succeeded == 5);
}

TEST_CASE("results: max_result_bytes over 64 MiB and max_snoozes over 1e6 are refused",
          "[results]") {
    pg::NodeOptions o;
    o.conninfo = "host=/nonexistent";
    o.max_result_bytes = (std::size_t{64} << 20) + 1;
    CHECK_THROWS_AS(pg::Node(o), std::invalid_argument);
    o.max_result_bytes = std::size_t{64} << 20;
    o.max_snoozes = 1000001;
    CHECK_THROWS_AS(pg::Node(o), std::invalid_argument);
    o.max_snoozes = 1000000;
    CHECK_NOTHROW(pg::Node(o)); // both at their bounds: accepted (the node connects at start)
}

TEST_CASE("wait: returns as the task ends, woken by NOTIFY", "[wait]") {
    const std::string db = fresh_db("ax_results_wait");
    pg::Client c(db);
    pg::Node node(node_options(db));
    std::atomic<bool> release{false};
    std::atomic<std::int64_t> ended_ns{0};
    node.handle("gate", [&](pg::Job& j) {
        while (!release.load())
            std::this_thread::sleep_for(5ms);
        j.set_result("done " + std::to_string(j.id()));
        ended_ns.store(Clock::now().time_since_epoch().count());
    });
    node.start();

    SECTION("a running task: wait with a long timeout returns soon after it ends") {
        const auto id = enqueue(c, "gate");
        std::thread opener([&] {
            std::this_thread::sleep_for(500ms);
            release.store(true);
        });
        const auto t0 = Clock::now();
        const auto r = c.wait(id, 120s);
        const auto t1 = Clock::now();
        opener.join();
        REQUIRE(r.has_value());
        CHECK(r->state == pg::TaskState::succeeded);
        CHECK(r->result == "done " + std::to_string(id));
        CHECK(t1 - t0 >= 500ms); // it did wait for the ending
        CHECK(t1 - t0 < 30s);    // far before the timeout (a hang guard)
        const auto after_end = t1 - Clock::time_point(Clock::duration(ended_ns.load()));
        INFO("returned " << std::chrono::duration_cast<std::chrono::milliseconds>(after_end).count()
                         << " ms after the handler ended");
        CHECK(after_end < 10s); // the acknowledgement's NOTIFY, not the timeout
        // The waiter's row is gone.
        auto s = pg::detail::Connection::open(db);
        CHECK(s.exec("SELECT count(*) FROM ax.waiters").int64(0, 0) == 0);
    }
    SECTION("an already finished task: at once") {
        release.store(true);
        const auto id = enqueue(c, "gate");
        ended(c, id);
        const auto t0 = Clock::now();
        const auto r = c.wait(id, 120s);
        CHECK(Clock::now() - t0 < 10s);
        REQUIRE(r.has_value());
        CHECK(r->state == pg::TaskState::succeeded);
        CHECK(r->result == "done " + std::to_string(id));
    }
    SECTION("a never-claimed task: the timeout, with its live state") {
        const auto id = enqueue(c, "nobody-handles-this");
        const auto t0 = Clock::now();
        const auto r = c.wait(id, 400ms);
        CHECK(Clock::now() - t0 >= 400ms);
        REQUIRE(r.has_value());
        CHECK_FALSE(r->finished());
        CHECK(r->state == pg::TaskState::pending);
        CHECK_FALSE(r->result.has_value());
        release.store(true);
    }
    node.stop();
}

TEST_CASE("wait: dead letters and cancels end a wait with their last error", "[wait]") {
    const std::string db = fresh_db("ax_results_wait_endings");
    pg::Client c(db);
    pg::Node node(node_options(db));
    std::atomic<bool> running{false};
    node.handle("boom", [](pg::Job& j) {
        j.set_result("not kept: the attempt failed");
        throw std::runtime_error("boom on attempt " + std::to_string(j.attempt()));
    });
    node.handle("stuck", [&](pg::Job& j) {
        running.store(true);
        while (!j.stop_requested())
            std::this_thread::sleep_for(5ms);
    });
    node.start();

    SECTION("dead-lettered") {
        const auto id = enqueue(c, "boom", {}, 2);
        const auto r = ended(c, id);
        CHECK(r.state == pg::TaskState::dead_lettered);
        CHECK(r.error == "std::runtime_error: boom on attempt 2");
        CHECK(r.attempts == 2);
        CHECK_FALSE(r.result.has_value());
    }
    SECTION("cancelled while running, by another client") {
        const auto id = enqueue(c, "stuck");
        std::thread canceller([&] {
            pg::Client other(db);
            while (!running.load())
                std::this_thread::sleep_for(5ms);
            other.cancel(id);
        });
        const auto r = c.wait(id, 120s);
        canceller.join();
        REQUIRE(r.has_value());
        CHECK(r->state == pg::TaskState::cancelled);
        CHECK(r->error == "cancelled");
    }
    SECTION("cancelled before any node claimed it") {
        const auto id = enqueue(c, "nobody-handles-this");
        CHECK(c.cancel(id) == pg::CancelResult::cancelled);
        const auto r = c.wait(id, 120s);
        REQUIRE(r.has_value());
        CHECK(r->state == pg::TaskState::cancelled);
    }
    node.stop();
}

TEST_CASE("wait: each of many waits racing its task's end is woken, none left registered",
          "[wait]") {
    const std::string db = fresh_db("ax_results_wait_many");
    pg::Client c(db);
    pg::NodeOptions o = node_options(db);
    o.poll_interval = 20ms;
    pg::Node node(o);
    node.handle("echo", [](pg::Job& j) {
        std::this_thread::sleep_for(std::chrono::milliseconds(j.id() % 7)); // endings spread
        j.set_result(j.payload());
    });
    node.start();
    // Enqueue, then wait at once: the registration races the claim and the acknowledgement, in
    // every order. A lost wake-up would return only at the (long) timeout: each wait must come
    // back far sooner, woken.
    const auto t0 = Clock::now();
    for (int i = 0; i < 100; ++i) {
        const std::string p = "p" + std::to_string(i);
        const auto id = enqueue(c, "echo", p);
        const auto w0 = Clock::now();
        const auto r = c.wait(id, 120s);
        REQUIRE(Clock::now() - w0 < 20s);
        REQUIRE(r.has_value());
        REQUIRE(r->state == pg::TaskState::succeeded);
        REQUIRE(r->result == p);
    }
    CHECK(Clock::now() - t0 < 60s);
    auto s = pg::detail::Connection::open(db);
    CHECK(s.exec("SELECT count(*) FROM ax.waiters").int64(0, 0) == 0);
    node.stop();
}

TEST_CASE("snooze: twice then success spends one attempt and runs three times", "[snooze]") {
    const std::string db = fresh_db("ax_results_snooze");
    pg::Client c(db);
    pg::Node node(node_options(db));
    std::mutex m;
    std::vector<std::uint32_t> attempts_seen;
    node.handle("poll", [&](pg::Job& j) {
        std::size_t runs;
        {
            std::lock_guard lock(m);
            attempts_seen.push_back(j.attempt());
            runs = attempts_seen.size();
        }
        if (runs < 3) {
            j.set_result("dropped: a snoozed run keeps no result");
            j.snooze(0ms);
        } else {
            j.set_result("ready");
        }
    });
    const auto id = enqueue(c, "poll", {}, 1); // one attempt: a snooze must not spend it
    node.start();
    const auto r = ended(c, id);
    CHECK(r.state == pg::TaskState::succeeded);
    CHECK(r.attempts == 1);
    CHECK(r.result == "ready");
    std::lock_guard lock(m);
    CHECK(attempts_seen == std::vector<std::uint32_t>{1, 1, 1});
    node.stop();
    CHECK(node.stats().snoozed == 2);
}

TEST_CASE("snooze: beyond max_snoozes the task becomes a dead letter", "[snooze]") {
    const std::string db = fresh_db("ax_results_snooze_limit");
    pg::Client c(db);
    pg::NodeOptions o = node_options(db);
    o.max_snoozes = 2;
    pg::Node node(o);
    std::atomic<int> runs{0};
    node.handle("forever", [&](pg::Job& j) {
        runs.fetch_add(1);
        j.snooze(0ms);
    });
    const auto id = enqueue(c, "forever");
    node.start();
    const auto r = ended(c, id);
    CHECK(r.state == pg::TaskState::dead_lettered);
    CHECK(runs.load() == 3); // two snoozes granted, the third refused
    CHECK(r.error == "snoozed 2 times: the limit (max_snoozes 2) is reached");
    const auto dl = c.dead_letters();
    REQUIRE(dl.size() == 1);
    CHECK(dl[0].reason == "snooze limit");
    node.stop();
}

TEST_CASE("snooze: the delay is respected and the task is scheduled meanwhile", "[snooze]") {
    const std::string db = fresh_db("ax_results_snooze_delay");
    pg::Client c(db);
    pg::Node node(node_options(db));
    std::mutex m;
    std::vector<Clock::time_point> starts;
    node.handle("later", [&](pg::Job& j) {
        std::size_t runs;
        {
            std::lock_guard lock(m);
            starts.push_back(Clock::now());
            runs = starts.size();
        }
        if (runs == 1)
            j.snooze(1500ms);
        else
            j.set_result("second run");
    });
    const auto id = enqueue(c, "later");
    node.start();
    // Soon after the first run it waits in the database as scheduled, not claimable.
    const auto guard = Clock::now() + 60s;
    for (;;) {
        {
            std::lock_guard lock(m);
            if (!starts.empty())
                break;
        }
        REQUIRE(Clock::now() < guard);
        std::this_thread::sleep_for(5ms);
    }
    // The snooze is acknowledged: scheduled (its run_at ahead), its attempt given back.
    for (;;) {
        const auto s = c.result(id);
        REQUIRE(s.has_value());
        if (s->state == pg::TaskState::scheduled) {
            CHECK(s->attempts == 0);
            break;
        }
        REQUIRE(s->state == pg::TaskState::claimed);
        REQUIRE(Clock::now() < guard);
        std::this_thread::sleep_for(5ms);
    }
    const auto r = ended(c, id);
    CHECK(r.result == "second run");
    CHECK(r.attempts == 1);
    std::lock_guard lock(m);
    REQUIRE(starts.size() == 2);
    CHECK(starts[1] - starts[0] >= 1500ms); // not claimable before its delay
    node.stop();
}

TEST_CASE("snooze: a delay out of range is refused by Job::snooze", "[snooze]") {
    const std::string db = fresh_db("ax_results_snooze_bad");
    pg::Client c(db);
    pg::Node node(node_options(db));
    node.handle("bad", [](pg::Job& j) { j.snooze(-1ms); });
    const auto id = enqueue(c, "bad", {}, 1);
    node.start();
    const auto r = ended(c, id);
    CHECK(r.state == pg::TaskState::dead_lettered);
    CHECK(r.error.find("ax::pg::Job::snooze: delay -1 ms: must be in 0..366 days") !=
          std::string::npos);
    node.stop();
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
