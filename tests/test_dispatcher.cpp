// Unit tests for detail::Dispatcher (ax/detail/dispatcher.hpp), without a scheduler or threads:
// fill, give back, group parking and unparking, the subtask lane, the starvation pick.
#include <algorithm>
#include <ax/detail/dispatcher.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

using ax::Priority;
using ax::detail::Dispatcher;
using ax::detail::Notifier;
using ax::detail::Reservation;
using ax::detail::SlabLinks;
using ax::detail::TaskQueue;
using ax::detail::TaskSlab;

namespace {

constexpr std::int64_t never = INT64_MAX / 4; // a max_wait that never forces a pick

/// A slab, a queue and a dispatcher over them, with helpers to admit records as the scheduler
/// does (state queued, priority, group, enqueue time).
struct Rig {
    explicit Rig(std::int64_t max_wait_ns = never)
        : queue(SlabLinks{&slab}, 64, 64),
          dispatcher(slab, queue, notifier, {3, 2, 1}, max_wait_ns) {}

    std::uint32_t admit(Priority p, std::uint16_t group = 0, std::int64_t enqueue_ns = 0) {
        const auto i = slab.acquire();
        auto& r = slab.at(i);
        r.refs.store(1);
        r.priority = p;
        r.group = group;
        r.enqueue_ns.store(enqueue_ns);
        r.state.store(static_cast<std::uint32_t>(ax::TaskState::queued));
        std::uint32_t len = 0;
        REQUIRE(queue.try_push(i, p, len) == ax::detail::Admission::admitted);
        return i;
    }
    /// Everything one fill reserves.
    std::vector<std::uint32_t> fill(std::int64_t now = 0, bool tiny = false,
                                    std::uint32_t live = 1) {
        Reservation res;
        dispatcher.fill(now, live, tiny, res);
        return {res.batch.begin(), res.batch.begin() + static_cast<std::ptrdiff_t>(res.reserved)};
    }

    TaskSlab slab;
    TaskQueue queue;
    Notifier notifier;
    Dispatcher dispatcher;
};

} // namespace

TEST_CASE("Dispatcher::fill swaps the queue in and serves the ring 3:2:1", "[dispatcher]") {
    Rig rig;
    std::vector<std::uint32_t> high, normal, low;
    for (int k = 0; k < 6; ++k) {
        low.push_back(rig.admit(Priority::low));
        normal.push_back(rig.admit(Priority::normal));
        high.push_back(rig.admit(Priority::high));
    }
    CHECK(rig.dispatcher.has_work());
    std::vector<std::uint32_t> order;
    for (int k = 0; k < 12; ++k) {
        const auto got = rig.fill();
        REQUIRE(got.size() == 1); // not tiny: one task per dispatch
        order.push_back(got[0]);
    }
    const std::vector<std::uint32_t> want{high[0], high[1], high[2], normal[0], normal[1], low[0],
                                          high[3], high[4], high[5], normal[2], normal[3], low[1]};
    CHECK(order == want);
    CHECK(rig.dispatcher.starvation_picks() == 0);
}

TEST_CASE("Dispatcher::fill reserves a batch only for tiny tasks and long lanes", "[dispatcher]") {
    Rig rig;
    for (int k = 0; k < 40; ++k)
        rig.admit(Priority::normal);
    CHECK(rig.fill(0, /*tiny=*/false).size() == 1);
    // 39 left, one live worker: a share of 39 / 2 = 19, capped at max_reserve.
    CHECK(rig.fill(0, /*tiny=*/true, 1).size() == ax::Tuning::max_reserve);
    // 31 left, 8 live workers: 31 / 16 = 1.
    CHECK(rig.fill(0, /*tiny=*/true, 8).size() == 1);
}

TEST_CASE("Dispatcher::give_back returns reserved tasks to the head, in order", "[dispatcher]") {
    Rig rig;
    std::vector<std::uint32_t> ids;
    for (int k = 0; k < 20; ++k)
        ids.push_back(rig.admit(Priority::normal));
    Reservation res;
    rig.dispatcher.fill(0, 1, /*tiny=*/true, res);
    REQUIRE(res.reserved == ax::Tuning::max_reserve);
    res.next = 2; // two ran; the rest goes back
    rig.dispatcher.give_back(res);
    CHECK(res.reserved == 0);
    CHECK_FALSE(res.holds());
    for (std::size_t k = 2; k < 6; ++k)
        CHECK(rig.fill() == std::vector<std::uint32_t>{ids[k]});
}

TEST_CASE("Dispatcher parks tasks over their group's limit and lets them in on release",
          "[dispatcher][groups]") {
    Rig rig;
    rig.dispatcher.add_group(1);
    rig.dispatcher.set_limit(1, 1);
    const auto a = rig.admit(Priority::normal, 1);
    const auto b = rig.admit(Priority::normal, 1);
    const auto c = rig.admit(Priority::normal, 0);
    CHECK(rig.fill() == std::vector<std::uint32_t>{a});
    // b is over the limit: parked, and the group-less c passes it by.
    CHECK(rig.fill() == std::vector<std::uint32_t>{c});
    CHECK(rig.fill().empty());
    auto st = rig.dispatcher.stats(ax::GroupId{1});
    CHECK(st.limit == 1);
    CHECK(st.active == 1);
    CHECK(st.waiting == 1);
    rig.dispatcher.release_group(rig.slab.at(a));
    CHECK(rig.dispatcher.stats(ax::GroupId{1}).waiting == 0);
    CHECK(rig.fill() == std::vector<std::uint32_t>{b});
    // Raising the limit lets parked tasks in at once.
    const auto d = rig.admit(Priority::normal, 1);
    CHECK(rig.fill().empty());
    rig.dispatcher.set_limit(1, 2);
    CHECK(rig.fill() == std::vector<std::uint32_t>{d});
}

TEST_CASE("Dispatcher: an open breaker parks its group until the tick half-opens it",
          "[dispatcher][groups]") {
    Rig rig;
    rig.dispatcher.add_group(1);
    ax::BreakerOptions o;
    o.min_attempts = 2;
    o.failure_ratio = 0.5;
    o.cooldown = std::chrono::nanoseconds(100);
    o.probes = 1;
    rig.dispatcher.set_breaker(1, o, 0);
    rig.dispatcher.record_attempt(1, false, 10);
    rig.dispatcher.record_attempt(1, false, 20);
    CHECK(rig.dispatcher.stats(ax::GroupId{1}).breaker == ax::BreakerState::open);
    const auto a = rig.admit(Priority::normal, 1);
    const auto b = rig.admit(Priority::normal, 1);
    CHECK(rig.fill().empty());
    rig.dispatcher.tick_breakers(50, 1, 1'000'000);
    CHECK(rig.fill().empty()); // cool-down not over
    rig.dispatcher.tick_breakers(200, 1, 1'000'000);
    CHECK(rig.dispatcher.stats(ax::GroupId{1}).breaker == ax::BreakerState::half_open);
    CHECK(rig.fill() == std::vector<std::uint32_t>{a}); // one probe
    CHECK(rig.fill().empty());
    rig.dispatcher.record_attempt(1, true, 300);
    rig.dispatcher.release_group(rig.slab.at(a));
    CHECK(rig.dispatcher.stats(ax::GroupId{1}).breaker == ax::BreakerState::closed);
    CHECK(rig.fill() == std::vector<std::uint32_t>{b});
}

TEST_CASE("Dispatcher serves the subtask lane first, one at a time", "[dispatcher]") {
    Rig rig;
    for (int k = 0; k < 10; ++k)
        rig.admit(Priority::high);
    const auto child = rig.slab.acquire();
    rig.slab.at(child).flags = ax::detail::record_child;
    rig.dispatcher.push_child(child);
    CHECK(rig.dispatcher.children_queued() == 1);
    CHECK(rig.dispatcher.subtasks_waiting());
    CHECK(rig.fill(0, /*tiny=*/true) == std::vector<std::uint32_t>{child});
    rig.dispatcher.dequeued(rig.slab.at(child), 0);
    CHECK(rig.dispatcher.children_queued() == 0);
    CHECK(rig.dispatcher.pop_subtask() == Dispatcher::none);
}

TEST_CASE("Dispatcher: a task older than max_wait goes first (starvation pick)", "[dispatcher]") {
    Rig rig(/*max_wait_ns=*/1000);
    const auto old_low = rig.admit(Priority::low, 0, /*enqueue_ns=*/0);
    for (int k = 0; k < 5; ++k)
        rig.admit(Priority::high, 0, 5000);
    CHECK(rig.fill(/*now=*/5500) == std::vector<std::uint32_t>{old_low});
    CHECK(rig.dispatcher.starvation_picks() == 1);
}

TEST_CASE("Dispatcher::drain_all takes the lanes, the subtask lane and the parked tasks",
          "[dispatcher]") {
    Rig rig;
    rig.dispatcher.add_group(3);
    rig.dispatcher.set_limit(3, 1);
    const auto a = rig.admit(Priority::normal, 3);
    const auto b = rig.admit(Priority::normal, 3);
    const auto c = rig.admit(Priority::low);
    REQUIRE(rig.fill() == std::vector<std::uint32_t>{a});
    const auto d = rig.admit(Priority::high); // still in the standby buffer
    std::vector<std::uint32_t> out;
    rig.dispatcher.drain_all(out);
    std::sort(out.begin(), out.end());
    std::vector<std::uint32_t> want{b, c, d};
    std::sort(want.begin(), want.end());
    // b was parked, c is in a lane, d in the standby buffer; a is reserved by its worker.
    CHECK(out == want);
    CHECK_FALSE(rig.dispatcher.has_work());
}

TEST_CASE("Groups cost nothing until one is registered", "[dispatcher][groups]") {
    Rig rig;
    CHECK(rig.dispatcher.groups().allocated_bytes() == 0);
    CHECK(rig.dispatcher.stats(ax::GroupId{5}).limit == 0); // unregistered: zeros, no state
    rig.dispatcher.add_group(1);
    const auto one_chunk = rig.dispatcher.groups().allocated_bytes();
    CHECK(one_chunk > 0);
    CHECK(one_chunk < 16 * 1024);
    rig.dispatcher.add_group(2); // same chunk
    CHECK(rig.dispatcher.groups().allocated_bytes() == one_chunk);
    rig.dispatcher.add_group(ax::Tuning::max_groups);
    CHECK(rig.dispatcher.groups().allocated_bytes() == 2 * one_chunk);
}

TEST_CASE("Dispatcher: a one-priority swap joins its lane whole, a mixed one is sorted",
          "[dispatcher]") {
    Rig rig;
    const auto a = rig.admit(Priority::normal);
    const auto b = rig.admit(Priority::normal);
    CHECK(rig.fill() == std::vector<std::uint32_t>{a}); // spliced a, b into the normal lane
    CHECK(rig.dispatcher.lanes_count() == 1);
    const auto c = rig.admit(Priority::normal);
    const auto h = rig.admit(Priority::high);
    CHECK(rig.fill() == std::vector<std::uint32_t>{b}); // the lane was not dry: no swap yet
    // Dry: the mixed batch is sorted by priority, high served first by the ring.
    CHECK(rig.fill() == std::vector<std::uint32_t>{h});
    CHECK(rig.fill() == std::vector<std::uint32_t>{c});
    CHECK(rig.fill().empty());
    CHECK_FALSE(rig.dispatcher.has_work());
    // A long one-priority run behind what a lane still holds keeps push order (tiny: reserved
    // several at a time).
    std::vector<std::uint32_t> pushed;
    for (int k = 0; k < 40; ++k)
        pushed.push_back(rig.admit(Priority::low));
    std::vector<std::uint32_t> got;
    while (got.size() < pushed.size()) {
        const auto batch = rig.fill(0, true, 1);
        REQUIRE_FALSE(batch.empty());
        got.insert(got.end(), batch.begin(), batch.end());
    }
    CHECK(got == pushed);
}
