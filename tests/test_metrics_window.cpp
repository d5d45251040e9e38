// Unit tests for ax/metrics.hpp: MetricsSlot and detail::MetricsWindow.
#include <ax/metrics.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <vector>

using ax::MetricsSlot;
using ax::detail::CumulativeCounters;
using ax::detail::MetricsWindow;

namespace {

constexpr std::int64_t ms = 1'000'000;
constexpr std::int64_t sec = 1'000'000'000;
// Windows start at an arbitrary non-zero time, as the scheduler's clock would.
constexpr std::int64_t t0 = 1000 * sec;

CumulativeCounters counters(std::uint64_t incoming, std::uint64_t completed = 0,
                            std::uint64_t failed = 0, std::uint64_t rejected = 0,
                            std::int64_t duration_ns = 0) {
    return CumulativeCounters{incoming, completed, failed, rejected, duration_ns};
}

} // namespace

TEST_CASE("MetricsSlot averages", "[metrics]") {
    MetricsSlot s;
    CHECK(s.average_duration() == std::chrono::nanoseconds(0));
    CHECK(s.average_queue_length() == 0.0);

    s.completed = 3;
    s.failed = 1;
    s.total_duration = std::chrono::milliseconds(10);
    CHECK(s.average_duration() == std::chrono::microseconds(2500));

    s.completed = 0;
    s.failed = 4;
    CHECK(s.average_duration() == std::chrono::microseconds(2500)); // failed attempts count too

    s.queue_samples = 4;
    s.queue_length_sum = 10;
    CHECK(s.average_queue_length() == 2.5);
}

TEST_CASE("MetricsWindow folds counter deltas and queue samples into the current slot",
          "[metrics]") {
    MetricsWindow w(5);
    w.start(t0);
    w.update(t0 + 100 * ms, counters(3, 2, 1, 4, 3 * ms), 7);

    auto slots = w.ordered();
    REQUIRE(slots.size() == 5);
    const MetricsSlot& cur = slots.back();
    CHECK(cur.incoming == 3);
    CHECK(cur.completed == 2);
    CHECK(cur.failed == 1);
    CHECK(cur.rejected == 4);
    CHECK(cur.total_duration == std::chrono::milliseconds(3));
    CHECK(cur.queue_samples == 1);
    CHECK(cur.queue_length_sum == 7);
    CHECK(cur.queue_length_max == 7);
    for (std::size_t i = 0; i + 1 < slots.size(); ++i)
        CHECK(slots[i].queue_samples == 0);

    // Cumulative counters: only the growth since the last update is added.
    w.update(t0 + 200 * ms, counters(5, 6, 1, 4, 11 * ms), 3);
    w.update(t0 + 300 * ms, counters(5, 6, 1, 4, 11 * ms), 2);
    slots = w.ordered();
    const MetricsSlot& cur2 = slots.back();
    CHECK(cur2.incoming == 5);
    CHECK(cur2.completed == 6);
    CHECK(cur2.failed == 1);
    CHECK(cur2.rejected == 4);
    CHECK(cur2.total_duration == std::chrono::milliseconds(11));
    CHECK(cur2.queue_samples == 3);
    CHECK(cur2.queue_length_sum == 12);
    CHECK(cur2.queue_length_max == 7);
    CHECK(cur2.average_queue_length() == 4.0);
    CHECK(cur2.average_duration() == std::chrono::nanoseconds(11 * ms / 7));

    const MetricsSlot total = w.sum();
    CHECK(total.incoming == 5);
    CHECK(total.queue_samples == 3);
    CHECK(total.queue_length_max == 7);
}

TEST_CASE("MetricsWindow rotates one slot per elapsed second", "[metrics]") {
    MetricsWindow w(5);
    w.start(t0);
    w.update(t0 + 500 * ms, counters(10), 1);
    CHECK(w.covered_seconds(t0 + 500 * ms) == Approx(0.5));

    // The update at 1.0 s still lands in slot 0, then a fresh slot begins.
    w.update(t0 + 1000 * ms, counters(12), 2);
    auto slots = w.ordered();
    CHECK(slots[3].incoming == 12);
    CHECK(slots[3].queue_samples == 2);
    CHECK(slots[4].incoming == 0);
    CHECK(slots[4].queue_samples == 0);
    CHECK(w.covered_seconds(t0 + 1000 * ms) == Approx(1.0));

    w.update(t0 + 1500 * ms, counters(15), 4);
    slots = w.ordered();
    CHECK(slots[3].incoming == 12);
    CHECK(slots[4].incoming == 3);
    CHECK(slots[4].queue_length_max == 4);
    CHECK(w.covered_seconds(t0 + 1500 * ms) == Approx(1.5));

    // No rotation just before the next second.
    w.update(t0 + 1999 * ms, counters(16), 0);
    slots = w.ordered();
    CHECK(slots[4].incoming == 4);
    CHECK(slots[3].incoming == 12);
}

TEST_CASE("MetricsWindow rotates several slots after a long gap", "[metrics]") {
    MetricsWindow w(5);
    w.start(t0);
    w.update(t0 + 200 * ms, counters(10), 1);
    w.update(t0 + 1200 * ms, counters(20), 1);
    // Slot [0,1) holds 20 (folded before rotating), slot [1,2) is current.
    w.update(t0 + 3500 * ms, counters(25), 1);
    // The 5 that arrived in (1.2, 3.5] went into slot [1,2); slots [2,3) and [3,4) rotated in.
    auto slots = w.ordered();
    REQUIRE(slots.size() == 5);
    CHECK(slots[0].incoming == 0); // never used
    CHECK(slots[1].incoming == 20);
    CHECK(slots[2].incoming == 5);
    CHECK(slots[3].incoming == 0);
    CHECK(slots[4].incoming == 0);
    CHECK(w.covered_seconds(t0 + 3500 * ms) == Approx(3.5));
    CHECK(w.sum().incoming == 25);
}

TEST_CASE("MetricsWindow drops data older than the window", "[metrics]") {
    MetricsWindow w(3);
    w.start(t0);
    w.update(t0 + 500 * ms, counters(7), 9);   // slot [0,1)
    w.update(t0 + 1500 * ms, counters(7), 1);  // rotates at 1 s (slot [0,1) gets the sample)
    w.update(t0 + 2500 * ms, counters(10), 1); // rotates at 2 s
    CHECK(w.sum().incoming == 10);
    CHECK(w.sum().queue_length_max == 9);
    w.update(t0 + 2600 * ms, counters(11), 1); // into [2,3)
    CHECK(w.sum().incoming == 11);

    // At 3 s slot [0,1) is reused: its 7 arrivals and max sample 9 are gone.
    w.update(t0 + 3000 * ms, counters(11), 1);
    const auto total = w.sum();
    CHECK(total.incoming == 4);
    CHECK(total.queue_length_max == 1);
    // Window of 3 slots covers 2 full seconds plus the current partial one, never more.
    CHECK(w.covered_seconds(t0 + 3000 * ms) == Approx(2.0));
    CHECK(w.covered_seconds(t0 + 3400 * ms) == Approx(2.4));
    w.update(t0 + 60 * sec, counters(11), 0);
    CHECK(w.covered_seconds(t0 + 60 * sec) == Approx(2.0));

    // After a gap longer than the window nothing old remains.
    const auto after = w.sum();
    CHECK(after.incoming == 0);
    CHECK(after.queue_samples == 0);
    CHECK(after.queue_length_max == 0);
}

TEST_CASE("MetricsWindow covered_seconds clamps the partial slot", "[metrics]") {
    MetricsWindow w(4);
    w.start(t0);
    CHECK(w.covered_seconds(t0) == 0.0);
    CHECK(w.covered_seconds(t0 - sec) == 0.0);             // before the slot start
    CHECK(w.covered_seconds(t0 + 5 * sec) == Approx(1.0)); // no update yet: at most 1 s
    w.update(t0 + 2 * sec + 250 * ms, counters(0), 0);     // two rotations
    CHECK(w.covered_seconds(t0 + 2 * sec + 250 * ms) == Approx(2.25));
}

TEST_CASE("MetricsWindow incoming_rate and drain_rate", "[metrics]") {
    MetricsWindow w(10);
    w.start(t0);

    SECTION("over the covered part of the first second") {
        w.update(t0 + 500 * ms, counters(10, 4, 1), 0);
        CHECK(w.incoming_rate(t0 + 500 * ms) == Approx(20.0));
        CHECK(w.drain_rate(t0 + 500 * ms) == Approx(10.0)); // completed + failed
    }
    SECTION("never divides by less than 0.1 s") {
        w.update(t0 + 10 * ms, counters(10, 3, 0), 0);
        CHECK(w.incoming_rate(t0 + 10 * ms) == Approx(100.0));
        CHECK(w.drain_rate(t0 + 10 * ms) == Approx(30.0));
        CHECK(w.incoming_rate(t0) == Approx(100.0));
        CHECK(w.incoming_rate(t0 + 200 * ms) == Approx(50.0));
    }
    SECTION("over several seconds") {
        w.update(t0 + 500 * ms, counters(10, 5), 0);
        w.update(t0 + 1500 * ms, counters(20, 15), 0);
        w.update(t0 + 2500 * ms, counters(30, 25), 0);
        CHECK(w.incoming_rate(t0 + 2500 * ms) == Approx(30.0 / 2.5));
        CHECK(w.drain_rate(t0 + 2500 * ms) == Approx(25.0 / 2.5));
    }
    SECTION("only over the window once it is full") {
        MetricsWindow small(3);
        small.start(t0);
        for (int i = 1; i <= 20; ++i) {
            // 10 arrivals per second, sampled every 500 ms.
            small.update(t0 + i * 500 * ms, counters(static_cast<std::uint64_t>(i) * 5), 0);
        }
        // At 10.0 s: slots [8,9) and [9,10) hold 10 each, the current one is empty; 2.0 s covered.
        CHECK(small.incoming_rate(t0 + 10 * sec) == Approx(10.0));
        CHECK(small.sum().incoming == 20);
    }
    SECTION("zero when nothing happened") {
        w.update(t0 + 3 * sec, counters(0), 0);
        CHECK(w.incoming_rate(t0 + 3 * sec) == 0.0);
        CHECK(w.drain_rate(t0 + 3 * sec) == 0.0);
    }
}

TEST_CASE("MetricsWindow::ordered returns oldest first, current last", "[metrics]") {
    MetricsWindow w(4);
    w.start(t0);
    // Slot k receives k+1 arrivals.
    std::uint64_t cum = 0;
    for (std::uint64_t k = 0; k < 6; ++k) {
        cum += k + 1;
        w.update(t0 + static_cast<std::int64_t>(k) * sec + 500 * ms, counters(cum), 0);
        w.update(t0 + static_cast<std::int64_t>(k + 1) * sec, counters(cum), 0);
    }
    // Six slots filled and rotated out of a ring of 4: [3,4), [4,5), [5,6) remain, then current.
    const std::vector<MetricsSlot> slots = w.ordered();
    REQUIRE(slots.size() == 4);
    CHECK(slots[0].incoming == 4);
    CHECK(slots[1].incoming == 5);
    CHECK(slots[2].incoming == 6);
    CHECK(slots[3].incoming == 0);
    CHECK(slots[3].queue_samples == 0);
    CHECK(w.sum().incoming == 15);
}

TEST_CASE("MetricsWindow with zero slots keeps one", "[metrics]") {
    MetricsWindow w(0);
    w.start(t0);
    w.update(t0 + 100 * ms, counters(4), 2);
    REQUIRE(w.ordered().size() == 1);
    CHECK(w.ordered()[0].incoming == 4);
    CHECK(w.incoming_rate(t0 + 100 * ms) == Approx(40.0));
    w.update(t0 + 1100 * ms, counters(4), 2);
    CHECK(w.sum().incoming == 0);
    CHECK(w.covered_seconds(t0 + 1100 * ms) == Approx(0.1));
}
