// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include "../tuning.hpp"
#include "spin_lock.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

namespace ax::detail {

/// How idle workers wait for work and how producers wake them, apart from the pool so that
/// whoever queues work (admission, the dispatcher, the tick) wakes a worker without naming the
/// pool. Idle workers spin briefly, one at a time, then park on a condition variable; a producer
/// wakes one parked worker only when nobody spins and no wake is already in flight.
///
/// Lock it owns: `mutex_` (the park mutex) guards `epoch_`, the wake counter parked workers wait
/// on. Held by park() while it checks and waits, and by notify_one()/notify_all() for one
/// increment. Never held with any other lock (the predicates park() evaluates take none).
class Notifier {
  public:
    /// Tells one parked worker that work arrived. Called after every push; costs a fence and a
    /// load when workers are busy or one is spinning.
    void notify_one() noexcept {
        std::atomic_thread_fence(std::memory_order_seq_cst);
        if (parked_.load(std::memory_order_acquire) == 0)
            return;
        // A spinning worker will see the work; a worker already being woken will too. Either
        // way the producer is spared the futex call (about 1-2 us) that dominates tiny tasks.
        if (spinning_.load(std::memory_order_acquire) != 0)
            return;
        if (waking_.exchange(true, std::memory_order_acq_rel))
            return;
        {
            std::lock_guard lock(mutex_);
            ++epoch_;
        }
        cv_.notify_one();
    }

    /// Wakes every parked worker (many tasks at once, shrink, shutdown).
    void notify_all() noexcept {
        {
            std::lock_guard lock(mutex_);
            ++epoch_;
        }
        cv_.notify_all();
    }

    /// Spins up to Tuning::idle_spin until `found()` (a lock-free check: work, or a stop) says
    /// true, yielding now and then. Only one caller spins at a time; the others return false at
    /// once and park. Returns whether `found()` said true.
    template <class Found> bool spin(Found&& found) noexcept {
        std::uint32_t expected = 0;
        if (!spinning_.compare_exchange_strong(expected, 1, std::memory_order_acq_rel))
            return false;
        const auto until = std::chrono::steady_clock::now() + Tuning::idle_spin;
        constexpr std::uint32_t mask = Tuning::idle_spin_yield_every - 1;
        bool hit = false;
        for (std::uint32_t i = 0; !hit; ++i) {
            if (found()) {
                hit = true;
            } else if ((i & mask) == mask) {
                // Yield rather than burn: with more threads than cores (a producer plus
                // workers on 2 cores) a pure spin steals the producer's CPU.
                if (std::chrono::steady_clock::now() >= until)
                    break;
                std::this_thread::yield();
            } else {
                cpu_relax();
            }
        }
        spinning_.store(0, std::memory_order_release);
        return hit;
    }

    /// Sleeps until notified, unless `should_sleep()` (checked after registering as parked, so
    /// a notify in between is never lost) says there is a reason to stay up. The wake token
    /// (waking_) is consumed by whichever worker next passes through here, so a token set after
    /// every parked worker had left is never stranded. A glibc condition variable (private futex)
    /// rather than std::atomic::wait, which this libstdc++ implements with shared futexes and a
    /// page-table walk per call.
    template <class ShouldSleep> void park(ShouldSleep&& should_sleep) {
        std::unique_lock lock(mutex_);
        const std::uint64_t e = epoch_;
        parked_.fetch_add(1, std::memory_order_seq_cst);
        const bool token = waking_.exchange(false, std::memory_order_acq_rel);
        if (!token && should_sleep()) {
            cv_.wait(lock, [&] { return epoch_ != e; });
            waking_.exchange(false, std::memory_order_acq_rel);
        }
        parked_.fetch_sub(1, std::memory_order_seq_cst);
    }

    /// Workers parked now (for tests and the pool's stats).
    [[nodiscard]] std::uint32_t parked() const noexcept {
        return parked_.load(std::memory_order_acquire);
    }

  private:
    std::mutex mutex_;
    std::condition_variable cv_;
    std::uint64_t epoch_ = 0; // under mutex_
    alignas(64) std::atomic<std::uint32_t> parked_{0};
    std::atomic<std::uint32_t> spinning_{0};
    std::atomic<bool> waking_{false};
};

} // namespace ax::detail
