// The queue-wait and run-time histograms (Config::latency_histograms): the bucket search, counts
// that equal attempts, known durations in the right bucket (ManualClock), off means empty, and
// counts that survive workers leaving the pool.
#include "test_support.hpp"

#include <atomic>
#include <ax/clock.hpp>
#include <ax/detail/notifier.hpp>
#include <ax/metrics.hpp>
#include <ax/scheduler.hpp>
#include <ax/worker_pool.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <numeric>
#include <stdexcept>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using ax_test::eventually;
using ax_test::Gate;

namespace {

/// The bucket by definition: the number of bounds below the value (Prometheus' `le`).
std::size_t linear_bucket(std::int64_t ns) {
    std::size_t i = 0;
    while (i < ax::LatencyHistogram::bound_count && ax::detail::latency_bounds_ns[i] < ns)
        ++i;
    return i;
}

std::uint64_t bucket_sum(const ax::LatencyHistogram& h) {
    return std::accumulate(h.buckets.begin(), h.buckets.end(), std::uint64_t{0});
}

/// The index of the bucket whose upper bound is `bound_s`.
std::size_t bucket_of_bound(double bound_s) {
    for (std::size_t i = 0; i < ax::LatencyHistogram::bound_count; ++i)
        if (ax::LatencyHistogram::upper_bounds_s[i] == bound_s)
            return i;
    FAIL("no bucket with bound " << bound_s);
    return 0;
}

/// A pool host whose every task observes a 1 ms queue wait and a 3 ms run.
struct ObservingHost {
    struct WorkerLocal {};
    using Worker = ax::detail::WorkerPool<ObservingHost>::Worker;
    std::atomic<int> budget{0};
    std::atomic<int> ran{0};
    bool run_one(Worker& w) {
        if (budget.fetch_sub(1) <= 0) {
            budget.fetch_add(1);
            return false;
        }
        w.counters.queue_wait.add(1'000'000);
        w.counters.run_time.add(3'000'000);
        ++ran;
        return true;
    }
    [[nodiscard]] bool has_work() const { return budget.load() > 0; }
    [[nodiscard]] bool holds_reserved(Worker&) const { return false; }
    void on_worker_start(Worker&) {}
    void on_worker_exit(Worker&) {}
};

} // namespace

TEST_CASE("the bucket search agrees with the definition on and around every bound",
          "[metrics][histogram]") {
    const auto& b = ax::detail::latency_bounds_ns;
    CHECK(b.front() == 10'000);
    CHECK(b.back() == 60'000'000'000);
    for (std::size_t i = 1; i < b.size(); ++i)
        CHECK(b[i - 1] < b[i]);
    std::vector<std::int64_t> probes{-5, 0, 1, 9'999, std::int64_t{1} << 62};
    for (const auto bound : b)
        for (const std::int64_t d : {-1, 0, 1})
            probes.push_back(bound + d);
    for (const auto ns : probes) {
        INFO("ns = " << ns);
        CHECK(ax::detail::latency_bucket(ns) == linear_bucket(ns));
    }
    CHECK(ax::detail::latency_bucket(10'000) == 0); // le is inclusive
    CHECK(ax::detail::latency_bucket(10'001) == 1);
    CHECK(ax::detail::latency_bucket(60'000'000'001) == ax::LatencyHistogram::bound_count);

    ax::LatencyHistogram h;
    ax::detail::observe(h, 2'000'000); // 2 ms: (1 ms, 2.5 ms]
    ax::detail::observe(h, -7);        // a clock step backwards counts as 0
    CHECK(h.count == 2);
    CHECK(h.buckets[bucket_of_bound(2.5e-3)] == 1);
    CHECK(h.buckets[0] == 1);
    CHECK(h.sum_s == Approx(0.002));
}

TEST_CASE("histogram counts equal attempts, retries included", "[metrics][histogram]") {
    ax::Config cfg;
    cfg.min_workers = 2;
    cfg.max_workers = 4;
    cfg.queue_capacity = 1000;
    cfg.retry_base_delay = 0ms;
    cfg.retry_jitter = 0ms;
    cfg.retry_max = 2;
    ax::Scheduler<> sched{cfg};
    std::vector<ax::TaskHandle<int>> handles;
    for (int i = 0; i < 300; ++i) {
        auto h = sched.submit([i](ax::TaskContext& ctx) {
            if (i % 10 == 0 && ctx.attempt() == 1)
                throw std::runtime_error("first attempt fails");
            return i;
        });
        REQUIRE(h);
        handles.push_back(std::move(*h));
    }
    for (auto& h : handles)
        REQUIRE(h.wait_for(20s));
    // The last attempts' counters are written just after their handles become ready.
    REQUIRE(eventually([&] {
        const auto m = sched.metrics();
        return m.totals.attempts_succeeded == 300 && m.totals.attempts_failed == 30;
    }));
    const auto m = sched.metrics();
    CHECK(m.queue_wait.count == 330);
    CHECK(m.run_time.count == 330);
    CHECK(bucket_sum(m.queue_wait) == m.queue_wait.count);
    CHECK(bucket_sum(m.run_time) == m.run_time.count);
    CHECK(m.queue_wait.sum_s >= 0.0);
    CHECK(m.run_time.sum_s > 0.0);
}

TEST_CASE("a known queue wait and run time land in their buckets", "[metrics][histogram]") {
    using Sched = ax::Scheduler<ax::ManualClock>;
    ax::Config cfg;
    cfg.min_workers = 1;
    cfg.max_workers = 1;
    Sched sched{cfg};
    Gate gate;
    auto blocker = sched.submit([&] { gate.wait(); });
    REQUIRE(blocker);
    const auto blocker_id = blocker->id();
    REQUIRE(eventually([&] { return sched.query(blocker_id)->state == ax::TaskState::running; }));
    // Queued behind the blocker for 300 ms of manual time, then runs for 30 ms.
    auto timed = sched.submit([] { ax::ManualClock::advance(30ms); });
    REQUIRE(timed);
    ax::ManualClock::advance(300ms);
    gate.open();
    REQUIRE(timed->wait_for(20s));
    REQUIRE(eventually([&] { return sched.metrics().run_time.count == 2; }));
    const auto m = sched.metrics();
    REQUIRE(m.queue_wait.count == 2);
    CHECK(m.queue_wait.buckets[0] == 1);                    // the blocker: no wait
    CHECK(m.queue_wait.buckets[bucket_of_bound(0.5)] == 1); // 300 ms: (250 ms, 500 ms]
    CHECK(m.run_time.buckets[bucket_of_bound(0.5)] == 1);   // the blocker: 300 ms
    CHECK(m.run_time.buckets[bucket_of_bound(50e-3)] == 1); // 30 ms: (25 ms, 50 ms]
    CHECK(m.queue_wait.sum_s == Approx(0.3));
    CHECK(m.run_time.sum_s == Approx(0.33));
}

TEST_CASE("latency_histograms off leaves both histograms empty", "[metrics][histogram]") {
    ax::Config cfg;
    cfg.min_workers = 2;
    cfg.max_workers = 2;
    cfg.latency_histograms = false;
    ax::Scheduler<> sched{cfg};
    std::vector<ax::TaskHandle<int>> handles;
    for (int i = 0; i < 50; ++i) {
        auto h = sched.submit([i] { return i; });
        REQUIRE(h);
        handles.push_back(std::move(*h));
    }
    for (auto& h : handles)
        REQUIRE(h.wait_for(20s));
    REQUIRE(eventually([&] { return sched.metrics().totals.attempts_succeeded == 50; }));
    const auto m = sched.metrics();
    CHECK(m.queue_wait.count == 0);
    CHECK(m.run_time.count == 0);
    CHECK(bucket_sum(m.queue_wait) == 0);
    CHECK(bucket_sum(m.run_time) == 0);
    CHECK(m.queue_wait.sum_s == 0.0);
    CHECK(m.run_time.sum_s == 0.0);
}

TEST_CASE("histogram counts survive workers leaving the pool", "[metrics][histogram][pool]") {
    ObservingHost host;
    ax::detail::Notifier notifier;
    ax::detail::WorkerPool<ObservingHost> pool(host, notifier, 1, 4);
    pool.start();
    pool.set_target(4);
    REQUIRE(pool.grow(100) == 3);
    host.budget.store(400);
    notifier.notify_all();
    REQUIRE(eventually([&] { return host.ran.load() == 400; }));

    auto check_totals = [&] {
        ax::LatencyHistogram qw, rt;
        pool.sum_latency(qw, rt);
        CHECK(qw.count == 400);
        CHECK(rt.count == 400);
        CHECK(qw.buckets[bucket_of_bound(1e-3)] == 400); // 1 ms: (500 us, 1 ms]
        CHECK(rt.buckets[bucket_of_bound(5e-3)] == 400); // 3 ms: (2.5 ms, 5 ms]
        CHECK(qw.sum_s == Approx(0.4));
        CHECK(rt.sum_s == Approx(1.2));
    };
    check_totals();

    // Shrink to one worker; the three that leave are reaped and their counts folded.
    pool.set_target(1);
    std::size_t workers = 0;
    REQUIRE(eventually([&] {
        pool.reap();
        workers = 0;
        pool.for_each([&](auto&) { ++workers; });
        return workers == 1;
    }));
    check_totals();

    // Stopping folds the last one too.
    pool.stop_and_join();
    check_totals();

    // A takeover's attempt (ended by the watchdog, not its worker) counts its run time.
    pool.add_failed_attempt(7'000'000);
    pool.add_failed_attempt(-1); // histograms off: not counted
    ax::LatencyHistogram qw, rt;
    pool.sum_latency(qw, rt);
    CHECK(rt.count == 401);
    CHECK(rt.buckets[bucket_of_bound(10e-3)] == 1);
}
