// The tiny-task hot path (docs/hot-path.md): what its shortcuts must still keep. Per-worker
// success counts add up exactly, a reused end stamp never hides a long attempt, the split
// admission count stays exact at its limits, and waking only on the first push of a burst
// strands no queued task beside parked workers.
#include "test_support.hpp"

#include <atomic>
#include <ax/queue.hpp>
#include <ax/scheduler.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using ax_test::eventually;
using ax_test::Gate;

namespace {

ax::Config fixed(std::uint32_t workers) {
    ax::Config cfg;
    cfg.min_workers = workers;
    cfg.max_workers = workers;
    cfg.queue_capacity = 100'000;
    cfg.soft_limit_ratio = 1.0;
    return cfg;
}

/// Posts `n` tiny tasks and waits until all ran.
template <class Sched> void run_tiny(Sched& sched, std::uint64_t n) {
    std::atomic<std::uint64_t> done{0};
    for (std::uint64_t i = 0; i < n; ++i)
        while (!sched.post([&done] { done.fetch_add(1, std::memory_order_relaxed); }))
            std::this_thread::yield();
    REQUIRE(eventually([&] { return done.load() == n; }));
}

} // namespace

TEST_CASE("success totals counted per worker add up exactly, during and after shutdown",
          "[hot_path]") {
    ax::Scheduler sched{fixed(2)};
    run_tiny(sched, 20'000);
    // Every task's terminal state is published after its count: once all ran, all are counted.
    REQUIRE(eventually([&] { return sched.metrics().totals.succeeded == 20'000; }));
    auto h = sched.submit([] { return 1; });
    REQUIRE(h);
    CHECK(h->get() == 1);
    CHECK(sched.metrics().totals.succeeded == 20'001);
    REQUIRE(sched.shutdown(ax::ShutdownMode::drain, 10s));
    // The workers are gone; their counts were folded into the pool's retired totals.
    CHECK(sched.metrics().totals.succeeded == 20'001);
}

TEST_CASE("a long attempt after a run of tiny ones is timed from a fresh clock reading",
          "[hot_path]") {
    ax::Scheduler sched{fixed(1)};
    run_tiny(sched, 5'000);
    std::vector<ax::TaskHandle<void>> tiny;
    for (int i = 0; i < 64; ++i) {
        auto t = sched.submit([] {});
        REQUIRE(t);
        tiny.push_back(std::move(*t));
    }
    const auto before = std::chrono::steady_clock::now();
    auto slow = sched.submit([] { std::this_thread::sleep_for(5ms); });
    REQUIRE(slow);
    slow->wait();
    const auto after = std::chrono::steady_clock::now();
    auto info = sched.query(slow->id());
    REQUIRE(info);
    CHECK(info->finished - info->started >= 5ms);
    CHECK(info->finished <= after);
    CHECK(info->finished >= before);
    for (auto& t : tiny) {
        t.wait();
        auto i = sched.query(t.id());
        REQUIRE(i);
        CHECK(i->started <= i->finished);
        CHECK(i->finished <= after);
    }
    // Reused stamps give tiny attempts a zero duration and the next fresh reading the rest:
    // the busy time is still the whole run, so the mean stays above zero.
    REQUIRE(eventually([&] { return sched.metrics().average_duration.count() > 0; }));
}

TEST_CASE("the split admission count is exact at the limits", "[hot_path]") {
    using ax::detail::Admission;
    ax::detail::DoubleBufferQueue q(8, 6);
    std::uint32_t len = 0;
    for (std::uint32_t i = 0; i < 6; ++i)
        REQUIRE(q.try_push(i, ax::Priority::normal, len) == Admission::admitted);
    CHECK(q.try_push(6, ax::Priority::normal, len) == Admission::busy);
    CHECK(len == 6);
    // Pops the producer has not seen yet: the estimate is at the soft limit, so it re-reads.
    q.on_dequeued(ax::Priority::normal);
    q.on_dequeued(ax::Priority::normal);
    CHECK(q.length() == 4);
    CHECK(q.length_upper_bound() >= q.length());
    bool first = true;
    CHECK(q.try_push(7, ax::Priority::normal, len, &first) == Admission::admitted);
    CHECK(len == 4);
    CHECK_FALSE(first); // the standby buffer already held the six
    CHECK(q.length() == 5);
    CHECK(q.length(ax::Priority::normal) == 5);
    // High ignores the soft limit; the count it is checked against is fresh at the limit.
    CHECK(q.try_push(8, ax::Priority::high, len) == Admission::admitted);
    CHECK(q.try_push(9, ax::Priority::high, len) == Admission::admitted);
    CHECK(q.try_push(10, ax::Priority::high, len) == Admission::admitted);
    CHECK(len == 7);
    CHECK(q.try_push(11, ax::Priority::high, len) == Admission::full);
    CHECK(len == 8);
    std::vector<std::uint32_t> out;
    REQUIRE(q.swap(out));
    CHECK(out.size() == 10);
    CHECK(q.length() == 8); // swapped, not started: still counted
    CHECK(q.try_push(12, ax::Priority::high, len, &first) == Admission::full);
    q.on_dequeued(ax::Priority::high);
    CHECK(q.try_push(12, ax::Priority::high, len, &first) == Admission::admitted);
    CHECK(len == 7);
    CHECK(first); // the swap emptied the standby buffer
    CHECK(q.length() == 8);
    CHECK(q.length(ax::Priority::high) == 3);
}

TEST_CASE("a burst into parked workers while tasks are tiny strands nothing", "[hot_path]") {
    ax::Scheduler sched{fixed(4)};
    run_tiny(sched, 20'000);
    // Let a tick publish the tiny mean duration and the workers park.
    std::this_thread::sleep_for(100ms);
    Gate gate;
    std::atomic<int> started{0};
    for (int i = 0; i < 4; ++i)
        REQUIRE(sched.post([&] {
            started.fetch_add(1);
            gate.wait();
        }));
    // One wake for the burst; the tick's safety net and the chain wake bring the rest in.
    CHECK(eventually([&] { return started.load() == 4; }));
    gate.open();
    run_tiny(sched, 1'000);
}

TEST_CASE("the quick options check never passes what the full check refuses", "[hot_path]") {
    std::mt19937 rng(13);
    std::uniform_int_distribution<int> pick(0, 5);
    const std::int64_t timeouts[] = {
        -1, 0, 1, 1000, std::int64_t{UINT32_MAX}, std::int64_t{UINT32_MAX} + 1};
    const int retries[] = {-2, -1, 0, 7, 100, 101};
    const std::uint16_t groups[] = {0, 0, 1, 2, 5, 1000};
    int quick = 0;
    for (int i = 0; i < 5000; ++i) {
        ax::SubmitOptions o;
        o.priority = static_cast<ax::Priority>(pick(rng) % 4); // 3 is out of range
        o.timeout = std::chrono::milliseconds(timeouts[pick(rng)]);
        o.max_retries = retries[pick(rng)];
        o.group = ax::GroupId{groups[pick(rng)]};
        const bool child = pick(rng) % 2 == 0;
        if (ax::detail::plainly_valid(o)) {
            ++quick;
            CHECK_FALSE(ax::detail::invalid_options(o, child, 2).has_value());
        }
    }
    CHECK(quick > 100);
}
