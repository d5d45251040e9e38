// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include "../tuning.hpp"

#include <atomic>
#include <cstdint>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace ax::detail {

/// Tells the core this is a spin-wait (pause on x86, yield on Arm): cheaper for the sibling
/// hyper-thread and for the memory bus than a bare loop.
inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
}

/// Test-and-test-and-set lock for the scheduler's tiny critical sections (a push, a swap, a pop:
/// tens of nanoseconds). Unlike std::mutex it never sleeps in the kernel on contention, which on
/// this hot path cost a futex call per few tasks; it yields after a short spin so a preempted
/// holder on an oversubscribed machine gets the CPU back. Meets Lockable. It guards nothing by
/// itself: each owner's header names what its SpinLock guards.
class SpinLock {
  public:
    /// Acquires the lock, spinning (and yielding every Tuning::spin_lock_yield_every polls).
    void lock() noexcept {
        for (std::uint32_t spins = 0;; ++spins) {
            if (!locked_.exchange(true, std::memory_order_acquire))
                return;
            while (locked_.load(std::memory_order_relaxed)) {
                if (++spins % Tuning::spin_lock_yield_every == 0)
                    std::this_thread::yield();
                else
                    cpu_relax();
            }
        }
    }
    /// Acquires the lock if it is free; never waits.
    bool try_lock() noexcept {
        return !locked_.load(std::memory_order_relaxed) &&
               !locked_.exchange(true, std::memory_order_acquire);
    }
    /// Releases the lock.
    void unlock() noexcept { locked_.store(false, std::memory_order_release); }

  private:
    std::atomic<bool> locked_{false};
};

} // namespace ax::detail
