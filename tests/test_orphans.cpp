// Timed-out bodies that ignore their stop token: the thread is orphaned (capacity kept), the
// attempt is taken over when the callable can be copied (the retry runs at once, the late result
// is discarded), orphans are capped and reported, and shutdown never waits for them.
#include "test_support.hpp"

#include <atomic>
#include <ax/scheduler.hpp>
#include <catch2/catch.hpp>
#include <memory>
#include <string>

using namespace std::chrono_literals;
using ax_test::eventually;
using ax_test::Gate;
using Sched = ax::Scheduler<ax::ManualClock>;

namespace {

ax::Config one_worker() {
    ax::Config cfg;
    cfg.min_workers = 1;
    cfg.max_workers = 1;
    cfg.retry_base_delay = 0ms;
    cfg.retry_jitter = 0ms;
    cfg.timeout_grace = 100ms;
    return cfg;
}

/// Moves manual time past the timeout (stop requested), then past the grace (orphaned).
void time_out_and_orphan(Sched& sched, std::uint64_t timeouts_before) {
    ax::ManualClock::advance(1500ms);
    REQUIRE(eventually([&] { return sched.metrics().totals.timeouts > timeouts_before; }));
    ax::ManualClock::advance(200ms);
}

} // namespace

TEST_CASE("a deaf body is orphaned and its attempt taken over: the retry runs at once",
          "[orphans]") {
    std::atomic<int> takeover_events{0};
    ax::Hooks hooks;
    hooks.on_retry = [&](const ax::TaskEvent& e) {
        if (e.attempt == 1)
            ++takeover_events;
    };
    Sched sched{one_worker(), hooks};
    Gate gate;
    std::atomic<int> runs{0};
    std::atomic<bool> late_return{false};
    std::atomic<bool> saw_stop{false};
    // Copyable and const-callable: the scheduler may run a copy while the original is stuck.
    auto h = sched.submit(
        [&gate, &runs, &late_return, &saw_stop](ax::TaskContext& ctx) -> int {
            if (++runs == 1) {
                gate.wait(); // ignores its stop token
                saw_stop = ctx.stop_requested() && ctx.stop_token().stop_requested();
                ctx.heartbeat(); // must not touch the retry's clock
                late_return = true;
                return 99;
            }
            return 7;
        },
        {.name = "deaf", .timeout = 1000ms, .max_retries = 1});
    REQUIRE(h);
    const auto id = h->id();
    REQUIRE(eventually([&] { return runs == 1; }));
    time_out_and_orphan(sched, 0);

    // The only worker is stuck, yet the retry completes: the orphan left the pool's count.
    REQUIRE(h->wait_for(20s));
    CHECK(h->get() == 7);
    CHECK(runs == 2);
    CHECK_FALSE(late_return);
    auto m = sched.metrics();
    CHECK(m.workers.orphans == 1);
    CHECK(m.workers.orphaned == 1);
    CHECK(m.totals.takeovers == 1);
    CHECK(m.totals.attempts_failed >= 1);
    CHECK(takeover_events == 1);
    auto q = sched.query(id);
    REQUIRE(q);
    CHECK(q->state == ax::TaskState::succeeded);
    CHECK(q->attempts == 2);
    CHECK(q->last_error.find("timed out") != std::string::npos);

    // Other work flows too.
    auto other = sched.submit([] { return 1; });
    REQUIRE(other);
    CHECK(other->get() == 1);

    // The stuck body finally returns: it saw a stopped token, its 99 is discarded, the thread
    // leaves.
    gate.open();
    REQUIRE(eventually([&] { return late_return.load(); }));
    REQUIRE(eventually([&] { return sched.metrics().workers.orphans == 0; }));
    CHECK(saw_stop);
    q = sched.query(id);
    REQUIRE(q);
    CHECK(q->state == ax::TaskState::succeeded);
    CHECK(q->attempts == 2);
    CHECK(sched.metrics().totals.succeeded == 2);
    CHECK(sched.shutdown(ax::ShutdownMode::drain, 20s));
}

TEST_CASE("a deaf move-only body is orphaned; it ends its attempt when it returns", "[orphans]") {
    Sched sched{one_worker()};
    Gate gate;
    std::atomic<int> runs{0};
    auto value = std::make_unique<int>(5);
    auto h = sched.submit(
        [&gate, &runs, v = std::move(value)](ax::TaskContext&) -> int {
            if (++runs == 1) {
                gate.wait();
                return 99;
            }
            return *v;
        },
        {.timeout = 1000ms, .max_retries = 1});
    REQUIRE(h);
    REQUIRE(eventually([&] { return runs == 1; }));
    time_out_and_orphan(sched, 0);
    REQUIRE(eventually([&] { return sched.metrics().workers.orphans == 1; }));
    CHECK(sched.metrics().totals.takeovers == 0);

    // Capacity kept: a replacement worker runs other tasks while the body is stuck.
    auto other = sched.submit([] { return 1; });
    REQUIRE(other);
    REQUIRE(other->wait_for(20s));
    CHECK(other->get() == 1);
    CHECK(h->state() == ax::TaskState::running);

    gate.open(); // the body returns: its attempt failed (timed out), the retry runs the callable
    REQUIRE(h->wait_for(20s));
    CHECK(h->get() == 5);
    CHECK(runs == 2);
    REQUIRE(eventually([&] { return sched.metrics().workers.orphans == 0; }));
}

TEST_CASE("orphans are capped; past the cap a deaf body keeps its worker", "[orphans]") {
    auto cfg = one_worker();
    cfg.max_workers = 2;
    cfg.min_workers = 2;
    cfg.max_orphans = 1;
    Sched sched{cfg};
    Gate gate;
    std::atomic<int> started{0};
    auto deaf = [&gate, &started]() -> int {
        ++started;
        gate.wait();
        return 1;
    };
    auto a = sched.submit(deaf, {.timeout = 1000ms, .max_retries = 0});
    auto b = sched.submit(deaf, {.timeout = 1000ms, .max_retries = 0});
    REQUIRE((a && b));
    REQUIRE(eventually([&] { return started == 2; }));
    time_out_and_orphan(sched, 1);
    REQUIRE(eventually([&] { return sched.metrics().totals.orphans_refused == 1; }));
    auto m = sched.metrics();
    CHECK(m.workers.orphans == 1);
    CHECK(m.totals.takeovers == 1);
    // The refusal is counted once per attempt, not once per watchdog round.
    ax::ManualClock::advance(1s);
    std::this_thread::sleep_for(250ms);
    CHECK(sched.metrics().totals.orphans_refused == 1);
    // Without retries the taken-over attempt is a dead letter; the capped one is still running.
    REQUIRE(eventually([&] {
        return a->state() == ax::TaskState::dead_lettered ||
               b->state() == ax::TaskState::dead_lettered;
    }));
    gate.open();
    REQUIRE(a->wait_for(20s));
    REQUIRE(b->wait_for(20s));
    CHECK_THROWS_AS(a->get(), ax::TaskTimedOut);
    CHECK_THROWS_AS(b->get(), ax::TaskTimedOut);
    REQUIRE(eventually([&] { return sched.metrics().workers.orphans == 0; }));
}

TEST_CASE("max_orphans = 0 keeps a deaf body on its worker until it returns", "[orphans]") {
    auto cfg = one_worker();
    cfg.max_orphans = 0;
    Sched sched{cfg};
    Gate gate;
    std::atomic<int> runs{0};
    auto h = sched.submit(
        [&gate, &runs]() -> int {
            if (++runs == 1)
                gate.wait();
            return runs.load();
        },
        {.timeout = 1000ms, .max_retries = 1});
    REQUIRE(h);
    REQUIRE(eventually([&] { return runs == 1; }));
    time_out_and_orphan(sched, 0);
    std::this_thread::sleep_for(250ms);
    auto m = sched.metrics();
    CHECK(m.workers.orphans == 0);
    CHECK(m.totals.takeovers == 0);
    CHECK(runs == 1);
    gate.open();
    CHECK(h->get() == 2);
}

TEST_CASE("shutdown does not wait for a taken-over orphan, which may outlive the scheduler",
          "[orphans][shutdown]") {
    Gate gate;
    std::atomic<bool> returned{false};
    {
        Sched sched{one_worker()};
        auto h = sched.submit(
            [&gate, &returned](ax::TaskContext& ctx) -> int {
                if (ctx.attempt() == 1) {
                    gate.wait();
                    returned = true;
                }
                return 1;
            },
            {.timeout = 1000ms, .max_retries = 1});
        REQUIRE(h);
        REQUIRE(eventually([&] { return h->state() == ax::TaskState::running; }));
        time_out_and_orphan(sched, 0);
        REQUIRE(h->wait_for(20s));
        CHECK(h->get() == 1);
        CHECK(sched.shutdown(ax::ShutdownMode::drain, 20s));
        CHECK(sched.metrics().workers.orphans == 1);
    } // the stuck thread is detached, not joined
    CHECK_FALSE(returned);
    gate.open();
    REQUIRE(eventually([&] { return returned.load(); }));
    std::this_thread::sleep_for(20ms); // let the detached thread leave
}

TEST_CASE("a taken-over body keeps its group slot until it returns", "[orphans][groups]") {
    auto cfg = one_worker();
    cfg.max_workers = 2;
    Sched sched{cfg};
    const auto g = sched.group("db");
    sched.set_group_limit(g, 1);
    Gate gate;
    std::atomic<int> runs{0};
    auto h = sched.submit(
        [&gate, &runs]() -> int {
            if (++runs == 1)
                gate.wait();
            return 3;
        },
        {.timeout = 1000ms, .max_retries = 1, .group = g});
    REQUIRE(h);
    REQUIRE(eventually([&] { return runs == 1; }));
    time_out_and_orphan(sched, 0);
    REQUIRE(eventually([&] { return sched.metrics().totals.takeovers == 1; }));
    // The retry is due at once, but the stuck body still holds the group's only slot.
    std::this_thread::sleep_for(100ms);
    CHECK(runs == 1);
    CHECK(sched.group_stats(g).active == 1);
    gate.open();
    REQUIRE(h->wait_for(20s));
    CHECK(h->get() == 3);
    CHECK(runs == 2);
    REQUIRE(eventually([&] { return sched.group_stats(g).active == 0; }));
}
