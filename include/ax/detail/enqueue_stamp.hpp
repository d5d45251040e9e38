// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include "../tuning.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <type_traits>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

/// The enqueue stamp of a submit without a clock call per submit (docs/hot-path.md,
/// "The enqueue stamp").
namespace ax::detail {

/// How the time-stamp counter (TSC) relates to std::chrono::steady_clock in this process: an
/// upper bound on nanoseconds per tick, in 32.32 fixed point, measured once over a span of
/// ticks (`calibration_ticks`) between two clock readings and widened by 1/256, so that a stamp
/// derived from it is never early. Process-wide (the TSC and the clock are), lock-free; shared
/// by every scheduler and every submitting thread.
///
/// Self-checking: a stamper's fresh clock readings are compared, at least
/// EnqueueStamper::check_ticks_min apart, with what the rate predicted, and a rate that
/// undershot by more than jitter explains is dropped and measured again (a migrated VM, a
/// changed TSC frequency).
class TscCalibration {
  public:
    /// Ticks between the anchor reading and the one that fixes the rate (2^23, ~3.4 ms at
    /// 2.4 GHz): long enough that two readings' jitter (tens of ns) is under 1e-4 of it.
    static constexpr std::uint64_t calibration_ticks = std::uint64_t{1} << 23;

    /// The upper bound (ns per tick << 32), or 0 while not measured yet.
    [[nodiscard]] std::uint64_t rate() const noexcept {
        return rate_.load(std::memory_order_acquire);
    }

    /// Feeds one fresh reading: the first anchors the measurement, a later one at least
    /// calibration_ticks after the anchor fixes the rate.
    void observe(std::uint64_t ticks, std::int64_t ns) noexcept {
        if (rate_.load(std::memory_order_relaxed) != 0)
            return;
        std::uint64_t anchor = anchor_ticks_.load(std::memory_order_acquire);
        if (anchor == 0) {
            // One thread sets the anchor; the others keep reading the clock until it is set.
            if (anchor_ticks_.compare_exchange_strong(anchor, ticks | 1,
                                                      std::memory_order_acq_rel)) {
                anchor_ns_.store(ns, std::memory_order_release);
            }
            return;
        }
        const std::int64_t anchor_ns = anchor_ns_.load(std::memory_order_acquire);
        // A reset between the two loads would pair an old anchor with a new reading: read the
        // anchor again and give up if it moved.
        if (anchor_ns == 0 || anchor_ticks_.load(std::memory_order_acquire) != anchor)
            return;
        const std::uint64_t span = ticks - anchor;
        // Unsigned: a counter behind the anchor (another core's, before a reset) reads as huge.
        if (span < calibration_ticks || span > (std::uint64_t{1} << 44) || ns <= anchor_ns)
            return;
        const double per_tick =
            static_cast<double>(ns - anchor_ns) / static_cast<double>(span) * (1.0 + 1.0 / 256);
        if (!(per_tick > 0.0 && per_tick < 1024.0))
            return;
        std::uint64_t expected = 0;
        rate_.compare_exchange_strong(expected,
                                      static_cast<std::uint64_t>(per_tick * 4294967296.0) + 1,
                                      std::memory_order_acq_rel);
    }

    /// Drops the rate and anchors a new measurement at (ticks, ns).
    void reset(std::uint64_t ticks, std::int64_t ns) noexcept {
        rate_.store(0, std::memory_order_release);
        anchor_ns_.store(0, std::memory_order_release);
        anchor_ticks_.store(ticks | 1, std::memory_order_release);
        anchor_ns_.store(ns, std::memory_order_release);
    }

    /// The process's calibration.
    static TscCalibration& instance() noexcept {
        static TscCalibration c;
        return c;
    }

  private:
    std::atomic<std::uint64_t> rate_{0};
    std::atomic<std::uint64_t> anchor_ticks_{0};
    std::atomic<std::int64_t> anchor_ns_{0};
};

/// One submitting thread's stamps: the last fresh clock reading, the counter value read just
/// before it, and the last stamp handed out. Stamps within `reuse_ticks` of the reading are the
/// reading plus the elapsed ticks at the calibrated upper-bound rate, plus 1 ns.
///
/// Why a stamp is never early: the counter is read before the clock, so the reading is at least
/// as late as the counter value it is paired with; the elapsed ticks are converted at a rate no
/// lower than the true one (the 1/256 margin holds NTP's slew of the clock, at most 500 ppm;
/// a change the margin does not cover, beyond 1/32, is caught by check(), and one between the
/// two makes a stamp early by at most ~25 ns, about what the reading's own gap adds); so a stamp
/// is at least the clock's value at the moment its own counter read executed, which is after
/// anything that happened before the submit. How late it
/// can be: the clock call's own duration (~30 ns) plus 1/256 of at most `reuse_ticks` (~1 µs),
/// so a few tens of nanoseconds. Stamps from one thread never decrease.
///
/// Relies on what Linux needs to use the TSC as its clock source: an invariant counter,
/// synchronised across cores. A counter read on another core that runs behind shows as a
/// negative gap and forces a fresh reading.
struct EnqueueStamper {
    /// Ticks after a fresh reading during which stamps are derived from it
    /// (Tuning::enqueue_stamp_ticks).
    static constexpr std::uint64_t reuse_ticks = Tuning::enqueue_stamp_ticks;

    /// Ticks between two readings that check the rate (2^20, ~0.44 ms at 2.4 GHz): long enough
    /// that a reading made late by a preemption (a few µs) barely moves the comparison.
    static constexpr std::uint64_t check_ticks_min = std::uint64_t{1} << 20;

    std::int64_t base_ns = 0;
    std::uint64_t base_ticks = 0;
    std::int64_t last = 0;
    /// The reading the next rate check measures from.
    std::int64_t check_ns = 0;
    std::uint64_t check_ticks = 0;

    /// The self-check, on every fresh reading: over at least check_ticks_min since the last
    /// check, the clock may not have run ahead of the rate by more than 1/32 plus 2 µs (a
    /// preemption between the counter read and the clock read makes a reading late, never
    /// early); otherwise the rate is dropped and measured again. A rate short by less than that
    /// makes a stamp early by at most 1/32 of reuse_ticks (~25 ns), about what the clock call
    /// that pairs a reading with its counter value adds to it.
    void check(TscCalibration& cal, std::uint64_t rate, std::uint64_t ticks,
               std::int64_t ns) noexcept {
        const std::uint64_t span = ticks - check_ticks;
        if (check_ns != 0 && span < check_ticks_min)
            return;
        if (rate != 0 && check_ns != 0 && span < (std::uint64_t{1} << 44)) {
            const double predicted =
                static_cast<double>(span) * (static_cast<double>(rate) / 4294967296.0);
            if (static_cast<double>(ns - check_ns) > predicted * (1.0 + 1.0 / 32) + 2000.0)
                cal.reset(ticks, ns);
        }
        check_ticks = ticks;
        check_ns = ns;
    }

    /// The stamp for a submit whose counter read gave `ticks`; `read()` is the clock (called
    /// only when no derived stamp is possible).
    template <class Read>
    std::int64_t stamp(TscCalibration& cal, std::uint64_t ticks, Read&& read) noexcept {
        const std::uint64_t rate = cal.rate();
        const std::uint64_t gap = ticks - base_ticks;
        std::int64_t s;
        if (rate != 0 && base_ns != 0 && gap < reuse_ticks) {
            s = base_ns + static_cast<std::int64_t>((gap * rate) >> 32) + 1;
        } else {
            const std::int64_t ns = read();
            check(cal, rate, ticks, ns);
            cal.observe(ticks, ns);
            base_ticks = ticks;
            base_ns = ns;
            s = ns;
        }
        if (s < last)
            s = last;
        last = s;
        return s;
    }
};

/// The enqueue stamp on `Clock`, in nanoseconds: derived from the TSC for steady_clock on x86
/// (one counter read, ~12 ns here, instead of a clock call, ~30 – 45 ns), a plain reading on
/// any other clock (ManualClock included) or processor.
template <class Clock> std::int64_t enqueue_stamp_ns() noexcept {
    const auto read = [] {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
            .count();
    };
#if defined(__x86_64__) || defined(__i386__)
    if constexpr (std::is_same_v<Clock, std::chrono::steady_clock> &&
                  Tuning::enqueue_stamp_ticks != 0) {
        thread_local EnqueueStamper stamper;
        return stamper.stamp(TscCalibration::instance(), __rdtsc(), read);
    }
#endif
    return read();
}

} // namespace ax::detail
