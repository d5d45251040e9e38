// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#if defined(__linux__)
#include <cerrno>
#include <ctime>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace ax::detail {

/// Sleeping on a 32-bit word and waking its sleepers: what idle workers park on.
///
/// On Linux this is a process-private futex called directly. libstdc++'s std::atomic::wait
/// (the fallback elsewhere) uses a *shared* futex, so every wait and wake makes the kernel look
/// the word's page up to build a cross-process key, and its wait first spins and calls
/// sched_yield four times. Measured here (docs/hot-path.md, "Parking on a private futex": a
/// thread woken 200 us after it slept, 3 000 times, alternating runs), the private futex brings
/// the p50 submit to wake-up from 8.3 - 9.0 us to 7.6 - 8.4 us; that gap was what the textbook
/// mutex pool (whose condition variable uses private futexes) had over ax's idle wake-up.
///
/// Nothing here orders memory: the caller publishes through the word's own atomic operations
/// (seq_cst in the Notifier) and these calls only sleep and wake. A wait returns when the word
/// differs from `old`, never merely because the kernel returned (signals, spurious wake-ups).
struct Futex {
    static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t) &&
                      std::atomic<std::uint32_t>::is_always_lock_free,
                  "a futex word must be a plain lock-free 32-bit integer");

    /// Sleeps until `word` no longer holds `old` (re-checked after every return of the kernel).
    static void wait(std::atomic<std::uint32_t>& word, std::uint32_t old) noexcept {
        wait_tagged(word, old, any_tag); // FUTEX_WAIT is FUTEX_WAIT_BITSET with every bit set
    }

    /// wait(), carrying `tag` (a nonzero bit mask) that wake_tagged() can pick sleepers by.
    /// wake_one() and wake_all() wake tagged sleepers like any other.
    static void wait_tagged(std::atomic<std::uint32_t>& word, std::uint32_t old,
                            std::uint32_t tag) noexcept {
#if defined(__linux__) && defined(SYS_futex)
        while (word.load(std::memory_order_seq_cst) == old)
            ::syscall(SYS_futex, addr(word), op_wait_bitset | private_flag, old, nullptr, nullptr,
                      tag);
#else
        (void)tag;
        word.wait(old, std::memory_order_seq_cst);
#endif
    }

    /// wait_tagged() for at most `timeout`: true once the word no longer holds `old`, false if
    /// the time ran out first. Where timed waits are not supported it waits without a limit.
    static bool wait_tagged_for(std::atomic<std::uint32_t>& word, std::uint32_t old,
                                std::uint32_t tag, std::chrono::nanoseconds timeout) noexcept {
#if defined(__linux__) && defined(SYS_futex)
        // FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC time (steady_clock on Linux), so a
        // return without a wake (a signal) re-waits toward the same deadline.
        const auto until = std::chrono::steady_clock::now().time_since_epoch() + timeout;
        const auto secs = std::chrono::duration_cast<std::chrono::seconds>(until);
        timespec ts{};
        ts.tv_sec = static_cast<decltype(ts.tv_sec)>(secs.count());
        ts.tv_nsec = static_cast<decltype(ts.tv_nsec)>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(until - secs).count());
        while (word.load(std::memory_order_seq_cst) == old) {
            if (::syscall(SYS_futex, addr(word), op_wait_bitset | private_flag, old, &ts, nullptr,
                          tag) != 0 &&
                errno == ETIMEDOUT)
                return word.load(std::memory_order_seq_cst) != old;
        }
        return true;
#else
        (void)tag;
        (void)timeout;
        word.wait(old, std::memory_order_seq_cst);
        return true;
#endif
    }

    /// Wakes the sleeper on `word` that waited first among those whose tag shares a bit with
    /// `tag`; returns how many it woke (0 or 1). Where tags are not supported it wakes any one
    /// sleeper and returns 1.
    static int wake_tagged(std::atomic<std::uint32_t>& word, std::uint32_t tag) noexcept {
#if defined(__linux__) && defined(SYS_futex)
        return static_cast<int>(::syscall(SYS_futex, addr(word), op_wake_bitset | private_flag, 1,
                                          nullptr, nullptr, tag));
#else
        (void)tag;
        word.notify_one();
        return 1;
#endif
    }

    /// Wakes one thread sleeping on `word` (none: a cheap no-op in the kernel).
    static void wake_one(std::atomic<std::uint32_t>& word) noexcept {
#if defined(__linux__) && defined(SYS_futex)
        ::syscall(SYS_futex, addr(word), op_wake | private_flag, 1, nullptr, nullptr, 0);
#else
        word.notify_one();
#endif
    }

    /// Wakes every thread sleeping on `word`.
    static void wake_all(std::atomic<std::uint32_t>& word) noexcept {
#if defined(__linux__) && defined(SYS_futex)
        ::syscall(SYS_futex, addr(word), op_wake | private_flag, int_max, nullptr, nullptr, 0);
#else
        word.notify_all();
#endif
    }

  private:
    static constexpr std::uint32_t any_tag = 0xffffffffu; // FUTEX_BITSET_MATCH_ANY

#if defined(__linux__) && defined(SYS_futex)
    // The kernel's ABI values (linux/futex.h), spelled here so the header does not bring that
    // file's macros into every user's translation unit.
    static constexpr int op_wake = 1;
    static constexpr int op_wait_bitset = 9;
    static constexpr int op_wake_bitset = 10;
    static constexpr int private_flag = 128;
    static constexpr int int_max = 0x7fffffff;
    static std::uint32_t* addr(std::atomic<std::uint32_t>& word) noexcept {
        return reinterpret_cast<std::uint32_t*>(&word);
    }
#endif
};

} // namespace ax::detail
