// Dispatch order of the whole scheduler: 3:2:1 shares under saturation, anti-starvation, and
// the adaptive pool (controller policy, growth, shrink without interruption).
#include "test_support.hpp"

#include <algorithm>
#include <atomic>
#include <ax/scheduler.hpp>
#include <catch2/catch.hpp>
#include <mutex>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using ax_test::eventually;
using ax_test::Gate;

namespace {

/// A controller policy whose target the test sets, proving the Controller parameter is honoured.
struct ManualController {
    explicit ManualController(const ax::Config&) {}
    std::uint32_t operator()(const ax::ControllerInput&) const { return wanted().load(); }
    static std::atomic<std::uint32_t>& wanted() {
        static std::atomic<std::uint32_t> w{1};
        return w;
    }
};

} // namespace

TEST_CASE("one saturated worker dispatches High:Normal:Low as 3:2:1", "[scheduler][dispatch]") {
    ax::Config cfg;
    cfg.min_workers = 1;
    cfg.max_workers = 1;
    cfg.queue_capacity = 20000;
    cfg.max_wait = std::chrono::hours(1); // measure the ring alone
    ax::Scheduler sched{cfg};

    Gate gate;
    auto blocker = sched.submit([&] { gate.wait(); }, {.priority = ax::Priority::high});
    REQUIRE(blocker);
    REQUIRE(eventually([&] { return blocker->state() == ax::TaskState::running; }));

    constexpr int per_lane = 3000;
    std::vector<int> order;
    order.reserve(3 * per_lane);
    std::mutex mu;
    for (int i = 0; i < per_lane; ++i) {
        for (int p = 0; p < 3; ++p) {
            auto r = sched.post(
                [&order, &mu, p] {
                    std::lock_guard lock(mu);
                    order.push_back(p);
                },
                {.priority = static_cast<ax::Priority>(p)});
            REQUIRE(r);
        }
    }
    gate.open();
    REQUIRE(eventually([&] {
        std::lock_guard lock(mu);
        return order.size() == 3 * per_lane;
    }));
    // While all three lanes are non-empty (the first 6000 dispatches) the shares are 3:2:1.
    const std::size_t window = 6000;
    std::array<double, 3> share{};
    for (std::size_t i = 0; i < window; ++i)
        share[static_cast<std::size_t>(order[i])] += 1;
    CHECK(share[0] / window == Approx(3.0 / 6).margin(0.05 * 3 / 6));
    CHECK(share[1] / window == Approx(2.0 / 6).margin(0.05 * 2 / 6));
    CHECK(share[2] / window == Approx(1.0 / 6).margin(0.05 * 1 / 6));
    // And each lane is FIFO-complete: everything ran.
    CHECK(std::count(order.begin(), order.end(), 2) == per_lane);
}

TEST_CASE("weights are configurable", "[scheduler][dispatch]") {
    ax::Config cfg;
    cfg.min_workers = 1;
    cfg.max_workers = 1;
    cfg.queue_capacity = 5000;
    cfg.weight_high = 1;
    cfg.weight_normal = 1;
    cfg.weight_low = 2;
    cfg.max_wait = std::chrono::hours(1);
    ax::Scheduler sched{cfg};
    Gate gate;
    auto blocker = sched.submit([&] { gate.wait(); });
    REQUIRE(blocker);
    REQUIRE(eventually([&] { return blocker->state() == ax::TaskState::running; }));
    std::vector<int> order;
    std::mutex mu;
    for (int i = 0; i < 1000; ++i)
        for (int p = 0; p < 3; ++p)
            REQUIRE(sched.post(
                [&order, &mu, p] {
                    std::lock_guard lock(mu);
                    order.push_back(p);
                },
                {.priority = static_cast<ax::Priority>(p)}));
    gate.open();
    REQUIRE(eventually([&] {
        std::lock_guard lock(mu);
        return order.size() == 3000;
    }));
    const auto lows = std::count(order.begin(), order.begin() + 2000, 2);
    CHECK(lows == 1000); // 1:1:2 over the first 2000 dispatches: Low has half
}

TEST_CASE("a low task is not starved past max_wait", "[scheduler][dispatch]") {
    using Sched = ax::Scheduler<ax::ManualClock>;
    ax::Config cfg;
    cfg.min_workers = 1;
    cfg.max_workers = 1;
    cfg.queue_capacity = 1000;
    cfg.max_wait = 1s;
    Sched sched{cfg};
    Gate gate;
    // The blocker is low so the ring's cursor sits at the end of Low's share: the ring alone
    // would serve High three times before Low.
    auto blocker = sched.submit([&] { gate.wait(); }, {.priority = ax::Priority::low});
    REQUIRE(blocker);
    REQUIRE(eventually([&] { return blocker->state() == ax::TaskState::running; }));

    std::vector<int> order;
    std::mutex mu;
    auto record = [&](int tag) {
        return [&order, &mu, tag] {
            std::lock_guard lock(mu);
            order.push_back(tag);
        };
    };
    REQUIRE(sched.post(record(-1), {.priority = ax::Priority::low}));
    ax::ManualClock::advance(2s); // the low task is now over its budget
    for (int i = 0; i < 100; ++i)
        REQUIRE(sched.post(record(i), {.priority = ax::Priority::high}));
    gate.open();
    REQUIRE(eventually([&] {
        std::lock_guard lock(mu);
        return order.size() == 101;
    }));
    CHECK(order.front() == -1); // the ring alone would have served three highs first
    CHECK(sched.metrics().totals.starvation_picks == 1);
}

TEST_CASE("without max_wait pressure the ring serves high first", "[scheduler][dispatch]") {
    using Sched = ax::Scheduler<ax::ManualClock>;
    ax::Config cfg;
    cfg.min_workers = 1;
    cfg.max_workers = 1;
    cfg.queue_capacity = 1000;
    cfg.max_wait = 10s;
    Sched sched{cfg};
    Gate gate;
    auto blocker = sched.submit([&] { gate.wait(); }, {.priority = ax::Priority::low});
    REQUIRE(blocker);
    REQUIRE(eventually([&] { return blocker->state() == ax::TaskState::running; }));
    std::vector<int> order;
    std::mutex mu;
    auto record = [&](int tag) {
        return [&order, &mu, tag] {
            std::lock_guard lock(mu);
            order.push_back(tag);
        };
    };
    REQUIRE(sched.post(record(-1), {.priority = ax::Priority::low}));
    ax::ManualClock::advance(2s);
    for (int i = 0; i < 10; ++i)
        REQUIRE(sched.post(record(i), {.priority = ax::Priority::high}));
    gate.open();
    REQUIRE(eventually([&] {
        std::lock_guard lock(mu);
        return order.size() == 11;
    }));
    CHECK(std::find(order.begin(), order.end(), -1) - order.begin() == 3);
    CHECK(sched.metrics().totals.starvation_picks == 0);
}

TEST_CASE("the Little's-Law controller grows the target by at most +10 per round",
          "[scheduler][pool]") {
    using Sched = ax::Scheduler<ax::ManualClock, ax::LittleController>;
    ax::Config cfg;
    cfg.min_workers = 1;
    cfg.max_workers = 40;
    cfg.queue_capacity = 1000;
    cfg.controller_interval = 2s;
    Sched sched{cfg};
    Gate gate;
    std::vector<ax::TaskHandle<void>> hs;
    for (int i = 0; i < 500; ++i)
        hs.push_back(std::move(*sched.submit([&] { gate.wait(); })));
    // Queue ~ 499 over drain 5 s asks for ~100 workers; steps are capped at +10 per round.
    CHECK(sched.metrics().workers.target == 1);
    ax::ManualClock::advance(2s);
    REQUIRE(eventually([&] { return sched.metrics().workers.target == 11; }));
    // Growth creates threads toward the target because queued work exceeds idle workers.
    REQUIRE(eventually([&] { return sched.metrics().workers.current == 11; }));
    ax::ManualClock::advance(2s);
    REQUIRE(eventually([&] { return sched.metrics().workers.target == 21; }));
    REQUIRE(eventually([&] { return sched.metrics().workers.current == 21; }));
    REQUIRE(eventually([&] { return sched.metrics().workers.busy == 21; }));
    const auto m = sched.metrics();
    CHECK(m.workers.peak == 21);
    CHECK(m.workers.created == 21);
    gate.open();
    for (auto& h : hs)
        h.get();
}

TEST_CASE("a shrink never interrupts a running task", "[scheduler][pool]") {
    using Sched = ax::Scheduler<std::chrono::steady_clock, ManualController>;
    ax::Config cfg;
    cfg.min_workers = 1;
    cfg.max_workers = 8;
    cfg.queue_capacity = 100;
    cfg.dispatch_interval = 1ms;
    cfg.controller_interval = 1ms;
    ManualController::wanted() = 6;
    Sched sched{cfg};
    Gate gate;
    std::atomic<int> started{0};
    std::vector<ax::TaskHandle<bool>> hs;
    for (int i = 0; i < 6; ++i) {
        hs.push_back(std::move(*sched.submit([&](ax::TaskContext& ctx) {
            ++started;
            gate.wait();
            return ctx.stop_requested();
        })));
    }
    REQUIRE(eventually([&] { return started == 6; }));
    CHECK(sched.metrics().workers.current == 6);

    ManualController::wanted() = 1;
    REQUIRE(eventually([&] { return sched.metrics().workers.target == 1; }));
    std::this_thread::sleep_for(20ms);
    // Every task is still running: nobody was interrupted to meet the smaller target.
    CHECK(sched.metrics().workers.current == 6);
    CHECK(sched.metrics().workers.busy == 6);
    for (auto& h : hs)
        CHECK(h.state() == ax::TaskState::running);

    gate.open();
    for (auto& h : hs)
        CHECK_FALSE(h.get()); // succeeded, and no stop was ever requested
    REQUIRE(eventually([&] { return sched.metrics().workers.current == 1; }));
    CHECK(sched.metrics().totals.succeeded == 6);
    CHECK(sched.metrics().totals.cancelled == 0);
}

TEST_CASE("a pool read, shrunk and shut down while it creates threads loses none of them",
          "[scheduler][pool]") {
    // The pool creates each thread outside its lock (WorkerPool::spawn), so metrics() and the
    // watchdog need not wait for a growth of tens of threads: the worker must still be listed
    // under the lock before its thread runs (TSan reports a race with metrics()' scans when it
    // is not), and a shrink or the destructor must find every thread created. Run under TSan
    // and ASan in CI; each round races growth against reads, a shrink (some of the new workers
    // retire at once) and the destructor.
    using Sched = ax::Scheduler<std::chrono::steady_clock, ManualController>;
    for (int round = 0; round < 30; ++round) {
        ax::Config cfg;
        cfg.min_workers = 1;
        cfg.max_workers = 48;
        cfg.queue_capacity = 1000;
        cfg.dispatch_interval = 1ms;
        cfg.controller_interval = 1ms;
        ManualController::wanted() = 48;
        std::atomic<int> ran{0};
        {
            Sched sched{cfg};
            for (int i = 0; i < 200; ++i)
                REQUIRE(sched.post([&] {
                    std::this_thread::sleep_for(200us);
                    ++ran;
                }));
            std::uint32_t peak = 0;
            for (int k = 0; k < 20; ++k) {
                const auto m = sched.metrics();
                CHECK(m.workers.current <= cfg.max_workers);
                peak = std::max(peak, m.workers.peak);
                if (k == 10 && round % 2 == 1)
                    ManualController::wanted() = 1;
                std::this_thread::sleep_for(100us);
            }
            CHECK(peak <= cfg.max_workers);
            if (round % 3 == 0) {
                sched.shutdown(ax::ShutdownMode::drain);
                CHECK(ran == 200);
            }
        } // the destructor: a shutdown while the pool may still grow
    }
    ManualController::wanted() = 1;
}

TEST_CASE("invalid configs are rejected at construction, naming the field", "[scheduler]") {
    ax::Config cfg;
    cfg.min_workers = 10;
    cfg.max_workers = 2;
    REQUIRE_THROWS_WITH(ax::Scheduler<>{cfg},
                        Catch::Contains("min_workers") && Catch::Contains("10"));
    ax::Config zero;
    zero.queue_capacity = 0;
    REQUIRE_THROWS_WITH(ax::Scheduler<>{zero}, Catch::Contains("queue_capacity"));
    ax::Config weights;
    weights.weight_normal = 0;
    REQUIRE_THROWS_WITH(ax::Scheduler<>{weights}, Catch::Contains("weight_normal"));
    ax::Config neg;
    neg.retry_base_delay = -1ms;
    REQUIRE_THROWS_WITH(ax::Scheduler<>{neg}, Catch::Contains("retry_base_delay"));
}

TEST_CASE("a saturated pool scales out every tick, not every controller round",
          "[scheduler][pool]") {
    // The rule applies between the rounds of a policy without fast rounds (the seed's); frozen
    // time: no controller round fires.
    using Sched = ax::Scheduler<ax::ManualClock, ax::LittleController>;
    for (const bool enabled : {true, false}) {
        ax::Config cfg;
        cfg.min_workers = 1;
        cfg.max_workers = 50;
        cfg.queue_capacity = 10; // soft limit 8
        cfg.scale_out_when_saturated = enabled;
        Sched sched{cfg};
        Gate gate;
        std::vector<ax::TaskHandle<void>> hs;
        hs.push_back(std::move(*sched.submit([&] { gate.wait(); })));
        REQUIRE(eventually([&] { return hs[0].state() == ax::TaskState::running; }));
        for (int i = 0; i < 8; ++i)
            hs.push_back(std::move(*sched.submit([&] { gate.wait(); })));
        if (enabled) {
            REQUIRE(eventually([&] { return sched.metrics().workers.target >= 11; }));
            // Threads are created only for queued work beyond idle workers: 8 more.
            REQUIRE(eventually([&] { return sched.metrics().workers.current == 9; }));
            REQUIRE(eventually([&] { return sched.metrics().queue_length_total == 0; }));
        } else {
            std::this_thread::sleep_for(100ms); // ten ticks
            CHECK(sched.metrics().workers.target == 1);
            CHECK(sched.metrics().workers.current == 1);
        }
        gate.open();
        for (auto& h : hs)
            h.get();
    }
}

TEST_CASE("group limits hold tasks back without holding workers or other groups",
          "[scheduler][groups]") {
    ax::Config cfg;
    cfg.min_workers = 4;
    cfg.max_workers = 4;
    cfg.queue_capacity = 100;
    ax::Scheduler sched{cfg};
    const auto g = sched.group("uploads");
    sched.set_group_limit(g, 2);
    CHECK(sched.group_stats(g).limit == 2);

    ax_test::Gate gate;
    std::atomic<int> running{0}, peak{0};
    auto grouped = [&] {
        const int now = ++running;
        int p = peak.load();
        while (now > p && !peak.compare_exchange_weak(p, now)) {
        }
        gate.wait();
        --running;
    };
    std::vector<ax::TaskHandle<void>> hs;
    for (int i = 0; i < 6; ++i)
        hs.push_back(std::move(*sched.submit(grouped, {.group = g})));
    REQUIRE(eventually([&] { return running == 2 && sched.group_stats(g).waiting == 4; }));

    // Other work is not stuck behind the held-back group: two workers are still free.
    std::atomic<int> others{0};
    for (int i = 0; i < 10; ++i)
        REQUIRE(sched.post([&] { ++others; }));
    REQUIRE(eventually([&] { return others == 10; }));
    CHECK(running == 2);
    const auto st = sched.group_stats(g);
    CHECK(st.active == 2);
    CHECK(st.waiting == 4);
    // Held-back tasks are still queued, but counted against the group's own bound, not the
    // shared queue's room (a stalled group never holds up other groups' admission).
    CHECK(st.held == 4);
    CHECK(sched.metrics().queue_length_total == 0);

    // A cancelled held-back task ends at once and never runs.
    CHECK(sched.cancel(hs[5].id()));
    CHECK(hs[5].state() == ax::TaskState::cancelled);

    // Raising the limit at run time lets more in.
    sched.set_group_limit(g, 3);
    REQUIRE(eventually([&] { return running == 3; }));
    gate.open();
    for (std::size_t i = 0; i < 5; ++i)
        hs[i].get();
    CHECK(peak == 3);
    CHECK(sched.group_stats(g).active == 0);
    CHECK(sched.group_stats(g).waiting == 0);
    CHECK_THROWS_AS(sched.set_group_limit(ax::GroupId{77}, 1), std::invalid_argument);
}

TEST_CASE("a group limit applies to retries and survives shutdown(cancel)", "[scheduler][groups]") {
    ax::Config cfg;
    cfg.min_workers = 3;
    cfg.max_workers = 3;
    cfg.retry_base_delay = 1ms;
    cfg.retry_jitter = 0ms;
    ax::Scheduler sched{cfg};
    const auto g = sched.group("flaky-api");
    sched.set_group_limit(g, 1);
    std::atomic<int> concurrent{0}, worst{0};
    std::vector<ax::TaskHandle<int>> hs;
    for (int i = 0; i < 6; ++i) {
        hs.push_back(std::move(*sched.submit(
            [&](ax::TaskContext& ctx) {
                const int now = ++concurrent;
                int w = worst.load();
                while (now > w && !worst.compare_exchange_weak(w, now)) {
                }
                std::this_thread::sleep_for(1ms);
                --concurrent;
                if (ctx.attempt() == 1)
                    throw std::runtime_error("retry me");
                return 1;
            },
            {.max_retries = 1, .group = g})));
    }
    for (auto& h : hs)
        CHECK(h.get() == 1);
    CHECK(worst == 1);

    // Held-back tasks are cancelled by shutdown(cancel) like any queued task.
    ax_test::Gate gate;
    std::vector<ax::TaskHandle<void>> blocked;
    for (int i = 0; i < 4; ++i)
        blocked.push_back(std::move(*sched.submit([&] { gate.wait(); }, {.group = g})));
    REQUIRE(eventually([&] { return sched.group_stats(g).waiting == 3; }));
    std::thread opener([&] {
        std::this_thread::sleep_for(20ms);
        gate.open();
    });
    CHECK(sched.shutdown(ax::ShutdownMode::cancel, 20s));
    opener.join();
    int cancelled = 0;
    for (auto& b : blocked)
        cancelled += b.state() == ax::TaskState::cancelled ? 1 : 0;
    CHECK(cancelled >= 3);
}

TEST_CASE("a group's circuit breaker opens, holds, probes and closes", "[scheduler][groups]") {
    using Sched = ax::Scheduler<ax::ManualClock>;
    ax::Config cfg;
    cfg.min_workers = 2;
    cfg.max_workers = 2;
    Sched sched{cfg};
    const auto g = sched.group("downstream");
    ax::BreakerOptions opts;
    opts.failure_ratio = 0.5;
    opts.min_attempts = 4;
    opts.cooldown = 1s;
    opts.probes = 1;
    sched.set_group_breaker(g, opts);
    CHECK(sched.group_stats(g).breaker_enabled);

    std::atomic<bool> healthy{false};
    std::atomic<bool> submitted{false};
    std::atomic<int> runs{0};
    auto call = [&]() -> int {
        // The first attempt waits until all seven are submitted: otherwise a slow producer (a
        // sanitizer build) could see the breaker open before its last submits, refused.
        while (!submitted.load())
            std::this_thread::yield();
        ++runs;
        if (!healthy)
            throw std::runtime_error("503");
        return 1;
    };
    // One at a time, so the breaker opens after exactly four attempts with three tasks behind.
    sched.set_group_limit(g, 1);
    std::vector<ax::TaskHandle<int>> failing, held;
    for (int i = 0; i < 4; ++i)
        failing.push_back(std::move(*sched.submit(call, {.max_retries = 0, .group = g})));
    for (int i = 0; i < 3; ++i)
        held.push_back(std::move(*sched.submit(call, {.max_retries = 0, .group = g})));
    submitted = true;
    for (auto& h : failing)
        REQUIRE_THROWS(h.get());
    CHECK(sched.group_stats(g).breaker == ax::BreakerState::open);
    const auto m = sched.metrics();
    REQUIRE(m.groups.size() == 1);
    CHECK(m.groups[0].name == "downstream");
    CHECK(m.groups[0].stats.breaker == ax::BreakerState::open);

    // What the group held when it opened stays queued: not run, not failed.
    REQUIRE(eventually([&] { return sched.group_stats(g).waiting == 3; }));
    std::this_thread::sleep_for(50ms);
    CHECK(runs == 4);
    for (auto& h : held)
        CHECK(h.state() == ax::TaskState::queued);
    // New submits to the group fail fast for the rest of the cool-down.
    {
        const auto refused = sched.submit(call, {.max_retries = 0, .group = g});
        REQUIRE_FALSE(refused);
        CHECK(refused.error().code == ax::Errc::breaker_open);
        CHECK(refused.error().retryable());
        CHECK(refused.error().retry_after > 0us);
        CHECK(refused.error().retry_after <= 1s);
        ax::ManualClock::advance(400ms);
        const auto later = sched.post(call, {.group = g});
        REQUIRE_FALSE(later);
        CHECK(later.error().retry_after <= 600ms);
        CHECK(later.error().retry_after > 0us);
    }

    // After the cool-down one probe runs; it fails, so the breaker re-opens.
    ax::ManualClock::advance(1500ms);
    REQUIRE(eventually([&] { return runs == 5; }));
    REQUIRE(eventually([&] { return sched.group_stats(g).breaker == ax::BreakerState::open; }));
    std::this_thread::sleep_for(50ms);
    CHECK(runs == 5);
    CHECK(sched.group_stats(g).waiting == 2);

    // Next cool-down, the dependency is healthy: the probe succeeds and the rest flows.
    healthy = true;
    ax::ManualClock::advance(1500ms);
    REQUIRE(held[1].wait_for(20s));
    REQUIRE(held[2].wait_for(20s));
    CHECK(held[1].get() == 1);
    CHECK(held[2].get() == 1);
    CHECK(sched.group_stats(g).breaker == ax::BreakerState::closed);
    CHECK(held[0].state() == ax::TaskState::dead_lettered); // the failed probe
    // Closed: submits are admitted again.
    auto again = sched.submit(call, {.max_retries = 0, .group = g});
    REQUIRE(again);
    CHECK(again->get() == 1);

    // Switching it off lets everything through whatever happens.
    sched.set_group_breaker(g, std::nullopt);
    CHECK_FALSE(sched.group_stats(g).breaker_enabled);
    CHECK_THROWS_AS(sched.set_group_breaker(g, ax::BreakerOptions{0.0, 1, 1s, 1}),
                    std::invalid_argument);
}
