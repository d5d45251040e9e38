// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include "../tuning.hpp"
#include "futex.hpp"
#include "spin_lock.hpp"
#include "thread_slice.hpp"
#include "thread_stripe.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

namespace ax::detail {

/// How idle workers wait for work and how producers wake them, apart from the pool so that
/// whoever queues work (admission, the dispatcher, the tick) wakes a worker without naming the
/// pool. Idle workers spin briefly, one at a time, then park on the wake counter `epoch_` (a
/// process-private futex, futex.hpp); a producer wakes one parked worker only when nobody spins
/// and no wake is already in flight.
///
/// Owns no lock. A parking worker reads `epoch_` before it registers as parked and checks for
/// work, and sleeps only while `epoch_` still has that value, so a wake that bumps it anywhere
/// after that read is never lost. It used a mutex and condition variable once (docs/hot-path.md,
/// "Parking on a private futex"): glibc re-takes the mutex of a woken waiter as contended,
/// so every wake-up paid a second futex call, ~0.3 us, before the worker could look for work.
///
/// Which sleeper a wake reaches: the kernel wakes a word's sleepers longest-asleep first. A
/// wake into a pool idle for Tuning::warm_wake_after instead reaches the worker that went to
/// sleep last: each sleeper carries a tag (a bit of its thread stripe, Futex::wait_tagged) and
/// leaves it, with the time it went to sleep, in `last_parked_` and `last_park_ns_` until it is
/// up again, and that wake picks the sleeper by the tag.
///
/// How soon it runs: the last worker of a pool to park sleeps Tuning::warm_wake_after at
/// first; still asleep then, the pool is idle, and it asks the kernel for a short time slice
/// (Tuning::wake_slice, ThreadSlice) before it sleeps on, so that its wake-up preempts the
/// producer whose CPU the kernel puts it on instead of waiting for that producer to block. Such
/// a sleeper counts in `deep_`, and prewake() stands aside while there is one: woken before the
/// push, it would run before there was anything to run. The worker gives the slice back after
/// its next task (WorkerPool), so busy workers keep the default.
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
        wake_one();
    }

    /// A wake sent ahead of a push into an idle pool: the woken worker's trip out of the kernel
    /// (microseconds) then overlaps the producer building and queueing the task instead of
    /// starting after it. Only when all `live` workers are parked (the pool is asleep, so the
    /// queue is empty): while any worker is up, the push's own notify_one() decides, and tiny
    /// tasks keep waking only on the first push of a swap. No fence, so it can miss a worker
    /// parking right now; that is the job of the notify_one() after the push, which this never
    /// replaces (and which finds the wake in flight and returns). A wake whose push is then
    /// refused costs one worker a spin.
    /// Not while a worker sleeps with a short slice (see the class comment): the push's
    /// notify_one() wakes it then, and it runs at once.
    void prewake(std::uint32_t live) noexcept {
        if (live == 0 || parked_.load(std::memory_order_relaxed) < live ||
            spinning_.load(std::memory_order_relaxed) != 0 ||
            waking_.load(std::memory_order_relaxed) || deep_.load(std::memory_order_relaxed) != 0)
            return;
        wake_one();
    }

    /// Wakes every parked worker (many tasks at once, shrink, shutdown).
    void notify_all() noexcept {
        epoch_.fetch_add(1, std::memory_order_seq_cst);
        Futex::wake_all(epoch_);
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
    /// every parked worker had left is never stranded. (Not std::atomic::wait: libstdc++ makes
    /// that a shared futex, which cost each idle wake-up about 0.5 us more, futex.hpp.)
    ///
    /// `live`: the pool's workers, so the last of them to park can tell (0: unknown).
    /// `short_slice`: the caller's record of whether its thread holds a short slice; the last
    /// worker to park sets it when it asks for one (see the class comment), and the caller gives
    /// the slice back (ThreadSlice::restore) and clears it after its next task. Null: never ask.
    template <class ShouldSleep>
    void park(ShouldSleep&& should_sleep, std::uint32_t live = 0, bool* short_slice = nullptr) {
        const std::uint32_t e = epoch_.load(std::memory_order_seq_cst);
        const bool last = parked_.fetch_add(1, std::memory_order_seq_cst) + 1 >= live && live != 0;
        const bool token = waking_.exchange(false, std::memory_order_acq_rel);
        if (!token && should_sleep()) {
            for (std::uint32_t i = 0;
                 i < Tuning::park_yields && epoch_.load(std::memory_order_seq_cst) == e; ++i)
                std::this_thread::yield();
            const std::uint32_t tag = std::uint32_t{1} << thread_stripe<32>();
            last_park_ns_.store(now_ns(), std::memory_order_relaxed);
            last_parked_.store(tag, std::memory_order_relaxed);
            if (!last || short_slice == nullptr || Tuning::wake_slice.count() == 0)
                Futex::wait_tagged(epoch_, e, tag);
            else if (!Futex::wait_tagged_for(epoch_, e, tag, Tuning::warm_wake_after))
                sleep_deep(e, tag, *short_slice);
            // Up again: a hint naming this worker would send the next warm wake to nobody.
            std::uint32_t mine = tag;
            last_parked_.compare_exchange_strong(mine, 0, std::memory_order_relaxed);
            waking_.exchange(false, std::memory_order_acq_rel);
        }
        parked_.fetch_sub(1, std::memory_order_seq_cst);
    }

    /// Workers parked now (for tests and the pool's stats).
    [[nodiscard]] std::uint32_t parked() const noexcept {
        return parked_.load(std::memory_order_acquire);
    }

  private:
    /// The rest of an idle pool's last sleep, with a short slice if the kernel grants one.
    void sleep_deep(std::uint32_t e, std::uint32_t tag, bool& short_slice) noexcept {
        if (!short_slice)
            short_slice = ThreadSlice::request(Tuning::wake_slice);
        if (!short_slice) {
            Futex::wait_tagged(epoch_, e, tag);
            return;
        }
        deep_.fetch_add(1, std::memory_order_seq_cst);
        Futex::wait_tagged(epoch_, e, tag);
        deep_.fetch_sub(1, std::memory_order_seq_cst);
    }

    /// Takes the wake token and, unless a wake is already in flight, wakes one parked worker:
    /// the one that went to sleep last once the pool has idled Tuning::warm_wake_after, else the
    /// kernel's choice.
    void wake_one() noexcept {
        if (waking_.exchange(true, std::memory_order_acq_rel))
            return;
        epoch_.fetch_add(1, std::memory_order_seq_cst);
        const bool warm = now_ns() - last_park_ns_.load(std::memory_order_relaxed) >=
                          std::chrono::nanoseconds(Tuning::warm_wake_after).count();
        const std::uint32_t last = warm ? last_parked_.exchange(0, std::memory_order_relaxed) : 0;
        // A tagged wake that finds nobody: the hint's worker is between its hint and its sleep
        // (the epoch just moved, so it stays up) or on its way out of park(). Wake another as
        // well rather than reason about which: a spare wake costs a worker a spin.
        if (last == 0 || Futex::wake_tagged(epoch_, last) == 0)
            Futex::wake_one(epoch_);
    }

    static std::int64_t now_ns() noexcept {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(
                   std::chrono::steady_clock::now().time_since_epoch())
            .count();
    }

    std::atomic<std::uint32_t> epoch_{0};
    alignas(64) std::atomic<std::uint32_t> parked_{0};
    std::atomic<std::uint32_t> spinning_{0};
    std::atomic<bool> waking_{false};
    /// Tag of the worker that went to sleep last, 0 once it is up (a hint for warm wakes).
    std::atomic<std::uint32_t> last_parked_{0};
    /// When a worker last went to sleep (steady clock, ns): how long the pool has been idle.
    std::atomic<std::int64_t> last_park_ns_{0};
    /// Workers asleep with a short slice (prewake() stands aside while there are any).
    std::atomic<std::uint32_t> deep_{0};
};

} // namespace ax::detail
