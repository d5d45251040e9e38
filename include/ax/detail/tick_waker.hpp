// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stop_token>

namespace ax::detail {

/// What the maintenance tick sleeps on between ticks: its interval, a stop, or a poke at the
/// onset of backpressure. A burst that fills the queue then gets its controller round within
/// microseconds of its first refused submit instead of at the next tick (up to
/// dispatch_interval later, 10 ms by default; measured as the largest part of a burst's
/// first-tasks wait, ax_thumbnails --workload bursty-forecast). Only the onset pokes: the first
/// refusal after a tick that saw none disarms the waker, and a tick that sees no backpressure
/// arms it again, so a queue held at its limit (a producer obeying retry_after) costs one
/// relaxed load per refusal and no extra ticks.
///
/// Lock it owns: `mutex_` guards `poked_` (and the condition variable's wait). Taken by the
/// tick thread in wait() and by a refused submit in poke() while armed; never held with another
/// lock.
class TickWaker {
  public:
    /// Sleeps for `interval`, until a poke, or until `st` asks to stop (tick thread only).
    /// True when a poke ended the sleep.
    template <class Rep, class Period>
    bool wait(std::stop_token st, std::chrono::duration<Rep, Period> interval) {
        std::unique_lock lock(mutex_);
        const bool poked = cv_.wait_for(lock, st, interval, [this] { return poked_; });
        poked_ = false;
        return poked;
    }

    /// A submit was refused for backpressure: wake the tick now if no backpressure was seen
    /// since the last tick. Costs a relaxed load when disarmed.
    void poke() {
        if (!armed_.load(std::memory_order_relaxed) ||
            !armed_.exchange(false, std::memory_order_acq_rel))
            return;
        {
            std::lock_guard lock(mutex_);
            poked_ = true;
        }
        cv_.notify_one();
    }

    /// The tick's verdict on backpressure since the previous tick: none re-arms the waker;
    /// some keeps it disarmed, so a steady refusal stream never pokes (tick thread only).
    void backpressure_seen(bool seen) noexcept { armed_.store(!seen, std::memory_order_relaxed); }

    /// Whether the next refusal pokes (tests).
    [[nodiscard]] bool armed() const noexcept { return armed_.load(std::memory_order_relaxed); }

  private:
    std::mutex mutex_;
    std::condition_variable_any cv_;
    bool poked_ = false; // under mutex_
    // Read by every refused submit: a line of its own, away from the lock the tick sleeps on.
    alignas(64) std::atomic<bool> armed_{true};
};

} // namespace ax::detail
