// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include "../config.hpp"
#include "../controller.hpp"
#include "../metrics.hpp"
#include "../task.hpp"
#include "../tuning.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <mutex>
#include <thread>

namespace ax::detail {

/// Counts since start and the gauges admission, conclusion and the watchdog keep: relaxed
/// atomics, no lock. Read by metrics() and the tick.
struct TaskTotals {
    /// Succeeded endings concluded off a worker's own path; each worker counts its own in
    /// WorkerCounters::tasks_succeeded, and metrics() adds them up.
    std::atomic<std::uint64_t> succeeded{0};
    std::atomic<std::uint64_t> dead_lettered{0};
    std::atomic<std::uint64_t> cancelled{0};
    std::atomic<std::uint64_t> retries{0};
    std::atomic<std::uint64_t> timeouts{0};
    std::atomic<std::uint64_t> takeovers{0};
    std::atomic<std::uint64_t> orphans_refused{0};
    /// Submits refused for shutdown, invalid options or an exhausted slab.
    std::atomic<std::uint64_t> refused_other{0};
    /// Subtasks and joins admitted (they bypass the queue's own admission count).
    std::atomic<std::uint64_t> admitted_other{0};
    std::atomic<std::uint64_t> subtasks{0};
    /// Tasks waiting for a retry now (a gauge).
    std::atomic<std::uint32_t> waiting_retry{0};
    /// Tasks scheduled for later (SubmitOptions::delay / run_at) now (a gauge).
    std::atomic<std::uint32_t> scheduled{0};

    /// Counts (delta 1) or un-counts (delta -1, a lost CAS) a terminal ending.
    void count_terminal(TaskState s, int delta) noexcept {
        const auto d = static_cast<std::uint64_t>(static_cast<std::int64_t>(delta));
        switch (s) {
        case TaskState::succeeded:
            succeeded.fetch_add(d, std::memory_order_relaxed);
            break;
        case TaskState::dead_lettered:
            dead_lettered.fetch_add(d, std::memory_order_relaxed);
            break;
        case TaskState::cancelled:
            cancelled.fetch_add(d, std::memory_order_relaxed);
            break;
        default:
            break;
        }
    }
};

/// Time for the workers to finish `excess` more tasks at `drain_rate` (per second). Before any
/// drain was measured, estimate the rate from `live` workers and the mean duration `avg_s`; with
/// no duration either, one tick (`fallback`). Clamped to [1 µs, Tuning::retry_after_max]. Pure:
/// this is the retry_after of every backpressure refusal.
inline std::chrono::microseconds retry_after_hint(std::uint32_t excess, double drain_rate,
                                                  double avg_s, std::uint32_t live,
                                                  std::chrono::microseconds fallback) noexcept {
    double rate = drain_rate;
    if (rate <= 0.0 && avg_s > 0.0)
        rate = std::max<std::uint32_t>(live, 1) / avg_s;
    std::chrono::microseconds hint;
    if (rate <= 0.0) {
        hint = fallback;
    } else {
        hint = std::chrono::microseconds(static_cast<std::int64_t>(1e6 * excess / rate));
    }
    return std::clamp(hint, std::chrono::microseconds(1), Tuning::retry_after_max);
}

/// The retry_after of a backpressure refusal from two drain times: `one_slot` (retry_after_hint
/// of the tasks that must drain before the refused submit fits) and `to_room` (of the tasks
/// above the queue's room mark, at the fastest rate known: the caller's to give). The one-slot
/// hint, raised to Tuning::retry_after_floor but never past `to_room`: a producer obeying it
/// comes back to room for a run of submits instead of one, while the queue still holds the
/// room mark's work. Never shorter than the one-slot hint. Pure.
inline std::chrono::microseconds backpressure_hint(std::chrono::microseconds one_slot,
                                                   std::chrono::microseconds to_room) noexcept {
    return std::max(one_slot, std::min(Tuning::retry_after_floor, to_room));
}

/// Share of all cores the process used since the last sample, smoothed over a few samples
/// (Tuning::cpu_smoothing). Uses std::clock (process CPU time) and the real clock, whatever Clock
/// the scheduler runs on. Tick thread only: no lock.
class CpuSampler {
  public:
    /// Takes a sample and returns the smoothed utilisation (0..1).
    double sample() noexcept {
        const std::clock_t cpu = std::clock();
        const auto wall = std::chrono::steady_clock::now();
        if (cpu == static_cast<std::clock_t>(-1))
            return 0.0;
        if (last_cpu_ != 0) {
            const double dcpu = static_cast<double>(cpu - last_cpu_) / CLOCKS_PER_SEC;
            const double dwall = std::chrono::duration<double>(wall - last_wall_).count();
            if (dwall > 0.0) {
                const double sample = std::clamp(dcpu / (dwall * cores_), 0.0, 1.0);
                cpu_util_ =
                    Tuning::cpu_smoothing * cpu_util_ + (1.0 - Tuning::cpu_smoothing) * sample;
            }
        }
        last_cpu_ = cpu;
        last_wall_ = wall;
        return cpu_util_;
    }

  private:
    const double cores_ = std::max(1u, std::thread::hardware_concurrency());
    std::clock_t last_cpu_ = 0;
    std::chrono::steady_clock::time_point last_wall_{};
    double cpu_util_ = 0.0;
};

/// The metrics window and the figures the tick publishes from it for the hot paths (drain rate
/// for retry_after, mean duration for the tiny-task rule, CPU use for metrics()).
///
/// Lock it owns: `mutex_` (the metrics mutex) guards `window_`. Taken by
/// update() (the tick) and fill() (metrics()); never held with another lock.
class Telemetry {
  public:
    /// A window of cfg.window_slots() one-second slots starting at `now_ns`.
    Telemetry(const Config& cfg, std::int64_t now_ns) : window_(cfg.window_slots()) {
        window_.start(now_ns);
    }

    /// Folds the counters into the window and publishes the drain rate and mean duration; fills
    /// `in`'s window figures (mean duration, incoming and offered rates) and its completed and
    /// attempt totals.
    void update(std::int64_t now, const CumulativeCounters& c, std::uint32_t qlen,
                ControllerInput& in) {
        std::lock_guard lock(mutex_);
        window_.update(now, c, qlen);
        drain_rate_.store(window_.drain_rate(now), std::memory_order_relaxed);
        const MetricsSlot sum = window_.sum();
        const auto avg = sum.average_duration();
        in.avg_duration_s = std::chrono::duration<double>(avg).count();
        avg_duration_s_.store(in.avg_duration_s, std::memory_order_relaxed);
        // Never divide by less than 100 ms, as the window's own rates.
        const double secs = std::max(window_.covered_seconds(now), 0.1);
        in.incoming_rate = static_cast<double>(sum.incoming) / secs;
        in.offered_rate = static_cast<double>(sum.incoming + sum.rejected) / secs;
        in.completed_total = c.completed;
        in.attempts_total = c.completed + c.failed;
    }

    /// Copies the window's figures into a snapshot.
    void fill(MetricsSnapshot& m, std::int64_t now) {
        std::lock_guard lock(mutex_);
        m.slots = window_.ordered();
        m.drain_rate = window_.drain_rate(now);
        m.incoming_rate = window_.incoming_rate(now);
        m.average_duration = window_.sum().average_duration();
        m.cpu_utilization = cpu_util_.load(std::memory_order_relaxed);
    }

    /// Samples the process's CPU use (tick thread only) and publishes it.
    double sample_cpu() noexcept {
        const double u = cpu_.sample();
        cpu_util_.store(u, std::memory_order_relaxed);
        return u;
    }

    /// Completions per second over the window, as of the last tick.
    [[nodiscard]] double drain_rate() const noexcept {
        return drain_rate_.load(std::memory_order_relaxed);
    }
    /// Mean attempt duration in seconds, as of the last tick (0 before any finished).
    [[nodiscard]] double avg_duration_s() const noexcept {
        return avg_duration_s_.load(std::memory_order_relaxed);
    }
    /// Whether the mean attempt duration is known and under Tuning::tiny_task_s.
    [[nodiscard]] bool tasks_are_tiny() const noexcept {
        const double avg_s = avg_duration_s();
        return avg_s > 0.0 && avg_s < Tuning::tiny_task_s;
    }

  private:
    std::mutex mutex_;
    MetricsWindow window_; // under mutex_
    CpuSampler cpu_;       // tick thread only
    std::atomic<double> drain_rate_{0.0};
    std::atomic<double> avg_duration_s_{0.0};
    std::atomic<double> cpu_util_{0.0};
};

} // namespace ax::detail
