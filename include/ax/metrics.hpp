// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include "controller.hpp"
#include "groups.hpp"
#include "task.hpp"
#include "tuning.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ax {

/// One 1-second slot of the sliding metrics window (seed §4.4).
struct MetricsSlot {
    std::uint64_t incoming = 0;                 ///< Tasks admitted.
    std::uint64_t completed = 0;                ///< Attempts that succeeded.
    std::uint64_t failed = 0;                   ///< Attempts that threw (each retry counts).
    std::uint64_t rejected = 0;                 ///< Submits refused (full, busy).
    std::chrono::nanoseconds total_duration{0}; ///< Summed duration of finished attempts.
    std::uint64_t queue_samples = 0;            ///< Queue-length samples taken (one per tick).
    std::uint64_t queue_length_sum = 0;         ///< Sum of those samples.
    std::uint32_t queue_length_max = 0;         ///< Largest sample.

    /// Mean attempt duration in this slot (zero if none finished).
    [[nodiscard]] std::chrono::nanoseconds average_duration() const noexcept {
        const auto n = completed + failed;
        return n == 0 ? std::chrono::nanoseconds{0} : total_duration / static_cast<std::int64_t>(n);
    }
    /// Mean sampled queue length in this slot.
    [[nodiscard]] double average_queue_length() const noexcept {
        return queue_samples == 0
                   ? 0.0
                   : static_cast<double>(queue_length_sum) / static_cast<double>(queue_samples);
    }
};

/// Worker pool figures at the time of a snapshot.
struct WorkerStats {
    std::uint32_t current = 0; ///< Worker threads alive and serving.
    std::uint32_t target = 0;  ///< What the controller asks for.
    std::uint32_t busy = 0;    ///< Running a task now.
    std::uint32_t idle = 0;    ///< current - busy.
    std::uint32_t peak = 0;    ///< Highest `current` since start.
    std::uint64_t created = 0; ///< Threads created since start.
    /// Threads stuck in a timed-out body that ignores its stop token, set aside so they no
    /// longer count against max_workers (capped by Config::max_orphans); each leaves when its
    /// body returns.
    std::uint32_t orphans = 0;
    std::uint64_t orphaned = 0; ///< Threads set aside since start.
};

/// Counts since the scheduler started.
struct MetricsTotals {
    std::uint64_t submitted = 0;     ///< Tasks admitted.
    std::uint64_t rejected = 0;      ///< Submits refused for backpressure (full, busy).
    std::uint64_t refused_other = 0; ///< Submits refused for shutdown or invalid options.
    std::uint64_t attempts_succeeded = 0;
    std::uint64_t attempts_failed = 0;
    std::uint64_t succeeded = 0;            ///< Tasks that ended succeeded.
    std::uint64_t dead_lettered = 0;        ///< Tasks that ended dead_lettered.
    std::uint64_t cancelled = 0;            ///< Tasks that ended cancelled.
    std::uint64_t retries = 0;              ///< Retries scheduled.
    std::uint64_t timeouts = 0;             ///< Attempts the watchdog timed out.
    std::uint64_t hook_failures = 0;        ///< Hooks that threw (contained).
    std::uint64_t dead_letters_evicted = 0; ///< Dead letters dropped by the bounded list.
    std::uint64_t starvation_picks = 0;     ///< Dispatches forced by max_wait.
    /// Timed-out attempts ended by the watchdog while their body still ran (the retry went on
    /// with a copy of the callable; the stuck body's eventual result is discarded).
    std::uint64_t takeovers = 0;
    /// Timed-out bodies left holding their worker because Config::max_orphans were stuck.
    std::uint64_t orphans_refused = 0;
    /// Subtasks admitted through TaskContext::submit / when_all (included in `submitted`).
    std::uint64_t subtasks = 0;
    /// Exceptions thrown by task callables' destructors, contained (process-wide count).
    std::uint64_t destructor_exceptions = 0;
};

/// A latency distribution with fixed bucket bounds (the Prometheus histogram model: buckets, not
/// quantiles, so histograms of several workers or schedulers add up). Counts are per bucket, not
/// cumulative; a renderer accumulates them.
struct LatencyHistogram {
    /// Buckets with an upper bound; one more bucket (+Inf) follows them.
    static constexpr std::size_t bound_count = 20;
    /// Upper bounds in seconds, ascending: 10 us .. 60 s, roughly 1-2.5-5 per decade.
    static constexpr std::array<double, bound_count> upper_bounds_s = {
        10e-6, 50e-6,  100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3,
        50e-3, 100e-3, 250e-3, 500e-3, 1.0,    2.5,  5.0,    10.0, 30.0,  60.0};
    /// Observations per bucket; buckets[bound_count] counts those above the last bound.
    std::array<std::uint64_t, bound_count + 1> buckets{};
    /// Observations in all buckets.
    std::uint64_t count = 0;
    /// Sum of all observations, in seconds.
    double sum_s = 0.0;
};

/// What the controller decided last and from what (seed §5.1: a pool size nobody can explain
/// cannot be tuned).
struct ControllerStats {
    /// The controller policy's name ("adaptive", "little_law", or a user policy's).
    std::string policy;
    /// The worker target in force.
    std::uint32_t target = 0;
    /// Why the target is what it is.
    ControllerReason reason = ControllerReason::none;
    /// Controller rounds run, rounds that changed the target, and changes that reversed the
    /// direction of the previous change (a damped controller keeps the last one small).
    std::uint64_t rounds = 0;
    std::uint64_t changes = 0;
    std::uint64_t direction_changes = 0;
    /// Arrivals per second the forecaster expects over the next round (0 without one).
    double forecast_rate = 0.0;
    /// The inputs of the last round.
    ControllerInput inputs;
};

/// A consistent-enough picture of the scheduler for dashboards and tests.
struct MetricsSnapshot {
    /// Queued tasks per priority lane (index = Priority).
    std::array<std::uint32_t, priority_count> queue_length{};
    std::uint32_t queue_length_total = 0;
    std::uint32_t queue_capacity = 0;
    /// Tasks waiting for a retry.
    std::uint32_t waiting_retry = 0;
    /// Tasks admitted with a delay or run_at and not yet due (TaskState::scheduled).
    std::uint32_t scheduled = 0;
    /// Subtasks waiting in the subtask lane (not part of queue_length / queue_capacity).
    std::uint32_t subtasks_queued = 0;
    /// when_all joins waiting for the tasks they depend on, and coroutine tasks (ax::Task)
    /// suspended in a co_await on tasks.
    std::uint32_t pending_joins = 0;
    /// Entries in the dead-letter list.
    std::uint32_t dead_letters = 0;
    WorkerStats workers;
    /// The window's slots, oldest first; the last one is the slot being filled.
    std::vector<MetricsSlot> slots;
    MetricsTotals totals;
    /// Completions per second measured over the window (what retry_after hints are based on).
    double drain_rate = 0.0;
    /// Admissions per second over the window (the controller's input).
    double incoming_rate = 0.0;
    /// Mean attempt duration over the window.
    std::chrono::nanoseconds average_duration{0};
    /// Share of all cores the process used recently (0..1); the pool stops growing above
    /// Config::cpu_ceiling.
    double cpu_utilization = 0.0;
    /// Every registered group: limit, activity and breaker state.
    std::vector<GroupSnapshot> groups;
    /// Age of the oldest task queued in each priority lane (zero for an empty lane).
    std::array<std::chrono::nanoseconds, priority_count> oldest_queued_age{};
    /// Time from admission (or a retry's re-queue) to the start of each attempt, and each
    /// attempt's run time, since start (Config::latency_histograms off: both stay empty).
    LatencyHistogram queue_wait;
    LatencyHistogram run_time;
    /// The controller's last decision and its inputs.
    ControllerStats controller;
};

namespace detail {

/// LatencyHistogram's bounds in nanoseconds, for the workers' bucket search (no floating point
/// per observation).
inline constexpr std::array<std::int64_t, LatencyHistogram::bound_count> latency_bounds_ns = [] {
    std::array<std::int64_t, LatencyHistogram::bound_count> b{};
    for (std::size_t i = 0; i < b.size(); ++i)
        b[i] = static_cast<std::int64_t>(LatencyHistogram::upper_bounds_s[i] * 1e9 + 0.5);
    return b;
}();

/// The bounds followed by a sentinel no observation exceeds, so the search needs no range check.
inline constexpr std::array<std::int64_t, LatencyHistogram::bound_count + 1> latency_search_ns =
    [] {
        std::array<std::int64_t, LatencyHistogram::bound_count + 1> b{};
        for (std::size_t i = 0; i < LatencyHistogram::bound_count; ++i)
            b[i] = latency_bounds_ns[i];
        b[LatencyHistogram::bound_count] = INT64_MAX;
        return b;
    }();

/// For each bit width w of an observation (w = 1 + floor(log2 ns), 0 for 0), how many bounds
/// lie below 2^(w-1), the smallest value of that width.
inline constexpr std::array<std::uint8_t, 65> latency_bucket_by_width = [] {
    std::array<std::uint8_t, 65> t{};
    for (std::size_t w = 0; w < t.size(); ++w) {
        const std::int64_t lo = w <= 1 ? static_cast<std::int64_t>(w) : std::int64_t{1} << (w - 1);
        std::uint8_t n = 0;
        while (n < LatencyHistogram::bound_count && (w == 64 || latency_bounds_ns[n] < lo))
            ++n;
        t[w] = n;
    }
    return t;
}();

/// Consecutive bounds are at least a factor 2 apart, so [2^(w-1), 2^w) holds at most one: the
/// bucket search below needs one compare after the table.
inline constexpr bool latency_bounds_double = [] {
    for (std::size_t i = 1; i < LatencyHistogram::bound_count; ++i)
        if (latency_bounds_ns[i] < 2 * latency_bounds_ns[i - 1])
            return false;
    return true;
}();
static_assert(latency_bounds_double, "latency_bucket needs bounds at least 2x apart");

/// The bucket of an observation of `ns` nanoseconds (ns >= 0): the first bound >= ns
/// (Prometheus' `le`), bound_count for +Inf. Branch-free: a table lookup by bit width and one
/// compare.
[[nodiscard]] inline std::size_t latency_bucket(std::int64_t ns) noexcept {
    const auto u = static_cast<std::uint64_t>(std::max<std::int64_t>(ns, 0));
    std::size_t i = latency_bucket_by_width[static_cast<std::size_t>(std::bit_width(u))];
    i += static_cast<std::size_t>(latency_search_ns[i] < ns);
    return i;
}

/// Adds one observation of `ns` nanoseconds (negative counts as 0) to a plain histogram.
inline void observe(LatencyHistogram& h, std::int64_t ns) noexcept {
    ns = std::max<std::int64_t>(ns, 0);
    ++h.buckets[latency_bucket(ns)];
    ++h.count;
    h.sum_s += static_cast<double>(ns) / 1e9;
}

/// One worker's bucket counts of a latency histogram: written only by that worker (relaxed
/// load + store, no read-modify-write, no shared cache line), read by metrics() while the worker
/// runs. Its own cache lines.
struct alignas(64) LatencyCounters {
    /// First, so it shares a cache line with the lowest buckets (tiny tasks touch one line).
    std::atomic<std::int64_t> sum_ns{0};
    std::array<std::atomic<std::uint64_t>, LatencyHistogram::bound_count + 1> buckets{};

    /// Counts one observation (single writer only).
    void add(std::int64_t ns) noexcept {
        ns = std::max<std::int64_t>(ns, 0);
        auto& b = buckets[latency_bucket(ns)];
        b.store(b.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
        sum_ns.store(sum_ns.load(std::memory_order_relaxed) + ns, std::memory_order_relaxed);
    }
    /// Adds these counts into `h` (any thread).
    void add_to(LatencyHistogram& h) const noexcept {
        for (std::size_t i = 0; i < buckets.size(); ++i) {
            const auto n = buckets[i].load(std::memory_order_relaxed);
            h.buckets[i] += n;
            h.count += n;
        }
        h.sum_s += static_cast<double>(sum_ns.load(std::memory_order_relaxed)) / 1e9;
    }
};

/// Adds histogram `from` into `to` (folding a leaving worker's counts, summing workers).
inline void merge(LatencyHistogram& to, const LatencyHistogram& from) noexcept {
    for (std::size_t i = 0; i < to.buckets.size(); ++i)
        to.buckets[i] += from.buckets[i];
    to.count += from.count;
    to.sum_s += from.sum_s;
}

/// Per-worker counters: written only by their worker (relaxed stores, no shared cache line is
/// bounced per task), summed by the maintenance tick and metrics(). The latency histograms
/// (Config::latency_histograms) have cache lines of their own.
struct alignas(64) WorkerCounters {
    std::atomic<std::uint64_t> attempts_succeeded{0};
    std::atomic<std::uint64_t> attempts_failed{0};
    std::atomic<std::int64_t> busy_ns{0};
    /// Tasks this worker ended succeeded (TaskTotals::succeeded's share, kept here so two workers
    /// do not bounce one shared line per task; metrics() sums them).
    std::atomic<std::uint64_t> tasks_succeeded{0};
    std::atomic<bool> busy{false};
    /// Queue wait of each attempt this worker started, run time of each it finished.
    LatencyCounters queue_wait;
    LatencyCounters run_time;

    /// Counts (delta 1) or un-counts (delta -1, a lost CAS) a succeeded ending (single writer).
    void count_succeeded(int delta) noexcept {
        tasks_succeeded.store(tasks_succeeded.load(std::memory_order_relaxed) +
                                  static_cast<std::uint64_t>(static_cast<std::int64_t>(delta)),
                              std::memory_order_relaxed);
    }
    void add_attempt(bool ok, std::int64_t duration_ns) noexcept {
        auto& c = ok ? attempts_succeeded : attempts_failed;
        c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
        busy_ns.store(busy_ns.load(std::memory_order_relaxed) + duration_ns,
                      std::memory_order_relaxed);
    }
};

/// Cumulative figures the window turns into per-slot deltas.
struct CumulativeCounters {
    std::uint64_t incoming = 0;
    std::uint64_t completed = 0;
    std::uint64_t failed = 0;
    std::uint64_t rejected = 0;
    std::int64_t duration_ns = 0;
};

/// The sliding window of seed §4.4: `slots` 1-second slots in a ring. Owned by the maintenance
/// tick; fed cumulative counters, it stores the deltas in the current slot.
class MetricsWindow {
  public:
    explicit MetricsWindow(std::size_t slots) : slots_(std::max<std::size_t>(slots, 1)) {}

    /// Starts the window at `now_ns`.
    void start(std::int64_t now_ns) noexcept { slot_start_ns_ = now_ns; }

    /// Folds the counters since the last call into the current slot, samples the queue length,
    /// and rotates to a fresh slot for every full second elapsed.
    void update(std::int64_t now_ns, const CumulativeCounters& c,
                std::uint32_t queue_len) noexcept {
        MetricsSlot& s = slots_[cur_];
        s.incoming += c.incoming - last_.incoming;
        s.completed += c.completed - last_.completed;
        s.failed += c.failed - last_.failed;
        s.rejected += c.rejected - last_.rejected;
        s.total_duration += std::chrono::nanoseconds(c.duration_ns - last_.duration_ns);
        s.queue_samples += 1;
        s.queue_length_sum += queue_len;
        s.queue_length_max = std::max(s.queue_length_max, queue_len);
        last_ = c;
        while (now_ns - slot_start_ns_ >= 1'000'000'000) {
            slot_start_ns_ += 1'000'000'000;
            cur_ = (cur_ + 1) % slots_.size();
            slots_[cur_] = MetricsSlot{};
            filled_ = std::min(filled_ + 1, slots_.size() - 1);
        }
    }

    /// Seconds the window covers at now_ns: full slots plus the part of the current one.
    [[nodiscard]] double covered_seconds(std::int64_t now_ns) const noexcept {
        const double partial = static_cast<double>(now_ns - slot_start_ns_) / 1e9;
        return static_cast<double>(filled_) + std::clamp(partial, 0.0, 1.0);
    }

    /// Sum of all slots.
    [[nodiscard]] MetricsSlot sum() const noexcept {
        MetricsSlot t;
        for (const auto& s : slots_) {
            t.incoming += s.incoming;
            t.completed += s.completed;
            t.failed += s.failed;
            t.rejected += s.rejected;
            t.total_duration += s.total_duration;
            t.queue_samples += s.queue_samples;
            t.queue_length_sum += s.queue_length_sum;
            t.queue_length_max = std::max(t.queue_length_max, s.queue_length_max);
        }
        return t;
    }

    /// Admissions per second over the window.
    [[nodiscard]] double incoming_rate(std::int64_t now_ns) const noexcept {
        return rate(sum().incoming, now_ns);
    }
    /// Finished attempts per second over the window.
    [[nodiscard]] double drain_rate(std::int64_t now_ns) const noexcept {
        const auto t = sum();
        return rate(t.completed + t.failed, now_ns);
    }

    /// Slots oldest first, the current (partial) slot last.
    [[nodiscard]] std::vector<MetricsSlot> ordered() const {
        std::vector<MetricsSlot> out;
        out.reserve(slots_.size());
        for (std::size_t i = 1; i <= slots_.size(); ++i)
            out.push_back(slots_[(cur_ + i) % slots_.size()]);
        return out;
    }

  private:
    [[nodiscard]] double rate(std::uint64_t n, std::int64_t now_ns) const noexcept {
        // Never divide by less than 100 ms: one tick's worth of arrivals is not a rate.
        const double secs = std::max(covered_seconds(now_ns), 0.1);
        return static_cast<double>(n) / secs;
    }

    std::vector<MetricsSlot> slots_;
    std::size_t cur_ = 0;
    std::size_t filled_ = 0;
    std::int64_t slot_start_ns_ = 0;
    CumulativeCounters last_;
};

} // namespace detail
} // namespace ax
