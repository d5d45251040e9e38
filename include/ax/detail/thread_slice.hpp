// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace ax::detail {

/// The calling thread's time slice as the kernel's fair scheduler sees it (Linux 6.12 and later:
/// EEVDF takes a slice request for SCHED_OTHER threads through sched_setattr's `sched_runtime`).
///
/// Why a scheduler touches it: a thread woken with a slice shorter than the running thread's is
/// allowed to preempt it at once. On the development VM nearly every idle wake-up is placed on the
/// waking producer's own CPU (rousing the other, halted vCPU costs 16 - 20 us), where with the
/// default slice (1.4 ms here) the worker waits until the producer blocks or is preempted; with a
/// short one it runs as the producer's wake call returns (docs/hot-path.md, "The short slice").
/// Only a worker asleep in an idle pool asks for it, and gives it back after its first task, so
/// busy workers keep the default and never preempt producers in a stream.
///
/// Leaves the policy, nice value and flags as they are (read back first); does nothing for
/// real-time or deadline threads, or where the kernel has no such request (older kernels accept
/// the call and ignore the field: supported() finds out once per process by reading it back).
struct ThreadSlice {
    /// Asks for a slice of `slice` (the kernel clamps requests to 0.1 - 100 ms); true if the
    /// request took effect.
    static bool request(std::chrono::nanoseconds slice) noexcept {
        if (slice.count() <= 0 || !supported())
            return false;
        return set(static_cast<std::uint64_t>(slice.count()));
    }

    /// Back to the kernel's default slice.
    static void restore() noexcept { set(0); }

    /// This thread's slice in ns as the kernel reports it (its default, 1.4 ms on the
    /// development VM, unless requested otherwise), or -1 where it cannot be read.
    static std::int64_t requested() noexcept {
#if defined(__linux__) && defined(SYS_sched_getattr) && defined(SYS_sched_setattr)
        Attr a{};
        if (!get(a))
            return -1;
        return static_cast<std::int64_t>(a.runtime);
#else
        return -1;
#endif
    }

    /// Whether this kernel honours a slice request (checked once per process, on a first use:
    /// request, read back, restore).
    static bool supported() noexcept {
        int s = support().load(std::memory_order_relaxed);
        if (s < 0) {
            s = probe() ? 1 : 0;
            support().store(s, std::memory_order_relaxed);
        }
        return s == 1;
    }

  private:
#if defined(__linux__) && defined(SYS_sched_getattr) && defined(SYS_sched_setattr)
    /// The kernel's struct sched_attr up to the utilisation clamps (SCHED_ATTR_SIZE_VER1).
    struct Attr {
        std::uint32_t size;
        std::uint32_t policy;
        std::uint64_t flags;
        std::int32_t nice;
        std::uint32_t priority;
        std::uint64_t runtime;
        std::uint64_t deadline;
        std::uint64_t period;
        std::uint32_t util_min;
        std::uint32_t util_max;
    };
    static constexpr std::uint32_t policy_other = 0;
    static constexpr std::uint32_t policy_batch = 3;
    static constexpr std::uint64_t flag_reset_on_fork = 0x01;

    static bool get(Attr& a) noexcept {
        a = Attr{};
        return ::syscall(SYS_sched_getattr, 0, &a, sizeof a, 0) == 0;
    }

    static bool set(std::uint64_t runtime_ns) noexcept {
        Attr a{};
        if (!get(a) || (a.policy != policy_other && a.policy != policy_batch))
            return false;
        if (a.runtime == runtime_ns)
            return true;
        a.size = sizeof a;
        a.runtime = runtime_ns;
        a.flags &= flag_reset_on_fork; // no clamp or keep flags: policy and nice go back as read
        return ::syscall(SYS_sched_setattr, 0, &a, 0) == 0;
    }

    static bool probe() noexcept {
        constexpr std::uint64_t trial = 1'000'000; // 1 ms, inside the kernel's range
        Attr before{};
        if (!get(before) || (before.policy != policy_other && before.policy != policy_batch))
            return false;
        if (!set(trial))
            return false;
        Attr after{};
        const bool ok = get(after) && after.runtime == trial;
        set(0); // the kernel reports its default as a number; 0 asks for the default itself
        return ok;
    }
#else
    static bool set(std::uint64_t) noexcept {
        return false;
    }
    static bool probe() noexcept {
        return false;
    }
#endif

    /// -1 unknown, 0 no, 1 yes.
    static std::atomic<int>& support() noexcept {
        static std::atomic<int> s{-1};
        return s;
    }
};

} // namespace ax::detail
