// Unit tests for the pure rules of admission (ax/detail/admission.hpp) and of retry_after
// (ax/detail/telemetry.hpp): option validation messages and the back-off arithmetic.
#include <algorithm>
#include <ax/detail/admission.hpp>
#include <ax/detail/telemetry.hpp>
#include <ax/tuning.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <string>

using ax::SubmitOptions;
using ax::detail::invalid_options;
using ax::detail::retry_after_hint;
using namespace std::chrono_literals;

TEST_CASE("invalid_options accepts the defaults and every valid field", "[admission]") {
    CHECK_FALSE(invalid_options(SubmitOptions{}, false, 0));
    SubmitOptions o;
    o.priority = ax::Priority::low;
    o.timeout = std::chrono::milliseconds(UINT32_MAX);
    o.max_retries = 100;
    o.group = ax::GroupId{3};
    CHECK_FALSE(invalid_options(o, false, 3));
    o.max_retries = -1;
    CHECK_FALSE(invalid_options(o, false, 3));
}

TEST_CASE("invalid_options names the field and the reason", "[admission]") {
    auto why = [](SubmitOptions o, bool child = false, std::size_t groups = 0) {
        auto r = invalid_options(o, child, groups);
        REQUIRE(r.has_value());
        return *r;
    };
    SubmitOptions o;
    o.priority = static_cast<ax::Priority>(7);
    CHECK(why(o) == "priority = 7 is not high, normal or low");
    o = {};
    o.timeout = -5ms;
    CHECK(why(o) == "timeout = -5 ms is negative");
    o.timeout = std::chrono::milliseconds(std::int64_t{UINT32_MAX} + 1);
    CHECK(why(o) == "timeout = 4294967296 ms exceeds 49 days");
    o = {};
    o.max_retries = 101;
    CHECK(why(o) == "max_retries = 101 must be -1 (default) or 0..100");
    o.max_retries = -2;
    CHECK(why(o) == "max_retries = -2 must be -1 (default) or 0..100");
    o = {};
    o.group = ax::GroupId{2};
    CHECK(why(o, /*child=*/true, 5).rfind("group: subtasks take no group", 0) == 0);
    CHECK(why(o, false, 1) == "group = 2 was not registered");
}

TEST_CASE("backpressure_excess: tasks to drain before a submit fits", "[admission]") {
    CHECK(ax::detail::backpressure_excess(150, 150) == 1);
    CHECK(ax::detail::backpressure_excess(160, 150) == 11);
    CHECK(ax::detail::backpressure_excess(100, 150) == 1); // raced below the limit
}

TEST_CASE("backpressure_hint: one slot's drain, at least the floor, never past the room mark",
          "[admission]") {
    using ax::detail::backpressure_hint;
    constexpr auto floor = ax::Tuning::retry_after_floor;
    static_assert(floor >= 100us, "the cases below assume a floor of at least 100 us");
    // A slow drain: the one-slot hint is longer than the floor and stands.
    CHECK(backpressure_hint(floor * 5, floor * 300) == floor * 5);
    // A fast drain (family gen-10: a task every ~65 us, 60 above the room mark): the floor,
    // so that an obeying producer comes back to a run of free slots, not to one.
    CHECK(backpressure_hint(65us, 3900us) == std::max<std::chrono::microseconds>(65us, floor));
    CHECK(backpressure_hint(1us, floor * 2) == floor);
    // Draining to the room mark is quicker than the floor: no longer than that, so the queue
    // still holds the room mark's work when the producer is back.
    CHECK(backpressure_hint(1us, floor / 4) == floor / 4);
    // Never shorter than the one-slot hint (a stale rate may make to_room read shorter).
    CHECK(backpressure_hint(floor * 2, floor / 2) == floor * 2);
    // Through retry_after_hint at one rate, as admission computes it: 15,000 tasks/s, one
    // slot to free, 60 tasks above the room mark.
    const auto one = retry_after_hint(1, 15000.0, 0.0, 4, 10ms);
    const auto room = retry_after_hint(60, 15000.0, 0.0, 4, 10ms);
    CHECK(one == 66us);
    CHECK(room == 4000us);
    CHECK(backpressure_hint(one, room) == std::min(room, std::max(one, floor)));
    // No rate yet: both fall back to the tick, and the hint is the tick as before.
    CHECK(backpressure_hint(retry_after_hint(1, 0.0, 0.0, 4, 10ms),
                            retry_after_hint(60, 0.0, 0.0, 4, 10ms)) == 10ms);
}

TEST_CASE("retry_after_hint divides the excess by the drain rate", "[admission]") {
    // 10 tasks at 1,000 per second: 10 ms.
    CHECK(retry_after_hint(10, 1000.0, 0.0, 4, 10ms) == 10ms);
    CHECK(retry_after_hint(1, 4e6, 0.0, 4, 10ms) == 1us); // clamped up to 1 µs
    // Without a measured drain: live / mean duration (4 workers, 8 ms each: 500/s).
    CHECK(retry_after_hint(5, 0.0, 0.008, 4, 10ms) == 10ms);
    CHECK(retry_after_hint(5, 0.0, 0.008, 0, 10ms) == 40ms); // at least one worker
    // Nothing measured at all: one tick.
    CHECK(retry_after_hint(1000, 0.0, 0.0, 4, 10ms) == 10ms);
    // A stalled pool never says "wait for hours".
    CHECK(retry_after_hint(1'000'000, 0.001, 0.0, 1, 10ms) == ax::Tuning::retry_after_max);
}
