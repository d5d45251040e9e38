// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace ax {

/// A clock that only moves when told to, for tests of time-driven behaviour (retry delays,
/// anti-starvation, metrics slots, the controller) without sleeping. Meets the Clock policy of
/// ax::Scheduler: a static now(). All schedulers using ManualClock share its time.
///
///     using Sched = ax::Scheduler<ax::ManualClock>;
///     ax::ManualClock::advance(std::chrono::seconds(2));
struct ManualClock {
    using rep = std::int64_t;
    using period = std::nano;
    using duration = std::chrono::duration<rep, period>;
    using time_point = std::chrono::time_point<ManualClock>;
    static constexpr bool is_steady = true;

    /// Current manual time.
    static time_point now() noexcept {
        return time_point(duration(ticks().load(std::memory_order_acquire)));
    }
    /// Moves time forward by d.
    static void advance(duration d) noexcept {
        ticks().fetch_add(d.count(), std::memory_order_acq_rel);
    }
    /// Sets the absolute time (tests usually start from a large value so "zero" stays distinct).
    static void set(time_point t) noexcept {
        ticks().store(t.time_since_epoch().count(), std::memory_order_release);
    }

  private:
    static std::atomic<rep>& ticks() noexcept {
        static std::atomic<rep> t{1'000'000'000'000};
        return t;
    }
};

} // namespace ax
