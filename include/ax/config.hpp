// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

namespace ax {

/// Every knob of an ax::Scheduler. Defaults follow the design card (seed §4.5); each field says
/// what moving it trades. A Config is validated when a Scheduler is built: an invalid one throws
/// std::invalid_argument naming the field and its value.
struct Config {
    using Duration = std::chrono::nanoseconds;

    /// Workers kept alive even when idle (default 4). Higher: no ramp-up after a quiet spell, at
    /// the price of parked threads; lower: fewer threads, slower first burst. The threads stay
    /// even while a CPU cap runs fewer tasks at once (parked, no CPU used), so against the best
    /// fixed pool of CPU-bound work on 2 cores (2 threads) the default counts 2 x the
    /// thread-seconds. Set it to std::thread::hardware_concurrency() where threads are counted
    /// (per-thread billing, many schedulers in one process): in the simulator's 32 generated
    /// workloads on 2 cores, 2 instead of 4 took the rows over 1.10 x the best pool's
    /// thread-seconds from 14 to 6 at the same median speed, with one row more over 1.05 x and
    /// a first burst's p99 wait 2 - 7 % longer (docs/tuning.md). The default stays a constant so
    /// that a Config means the same pool on every machine.
    std::uint32_t min_workers = 4;

    /// Hard ceiling on concurrently running tasks (default 200). Raise for IO-bound bodies that
    /// mostly wait; lower for CPU-bound bodies, where more threads than cores only adds context
    /// switches.
    std::uint32_t max_workers = 200;

    /// Tasks that may wait in the queue, all priorities together (default 150). Beyond it submit
    /// answers ErrQueueFull. Larger absorbs bigger bursts but lets latency and memory grow; the
    /// seed sizes it as expected concurrency x average duration x tolerated wait factor.
    std::uint32_t queue_capacity = 150;

    /// Tasks each concurrency group may hold back (parked over its limit or behind its open
    /// breaker) once the dispatcher set them aside (default 0: queue_capacity). Held tasks leave
    /// the shared queue's count, so a stalled group never takes room from the others; past this
    /// bound submits to that group alone answer Errc::group_full. Larger lets one group buffer a
    /// longer outage (memory: one task record each); smaller sheds a failing group's load sooner.
    /// Retries of tasks already admitted are never refused and may exceed it.
    std::uint32_t group_queue_capacity = 0;

    /// Fraction of queue_capacity from which normal and low submits get the soft `busy` error while
    /// high is still admitted (default 0.8). 1.0 disables the soft limit.
    double soft_limit_ratio = 0.8;

    /// Dispatch shares per round of the priority ring, High:Normal:Low (default 3:2:1). A wider
    /// ratio (10:2:1) favours latency-sensitive work; every lane with a non-zero weight is never
    /// starved.
    std::uint32_t weight_high = 3;
    std::uint32_t weight_normal = 2;
    std::uint32_t weight_low = 1;

    /// Anti-starvation budget (default 5 s): a queued task that has waited longer is dispatched
    /// next whatever its priority. Shorter bounds low-priority latency but weakens priority
    /// ordering.
    Duration max_wait = std::chrono::seconds(5);

    /// Period of the maintenance tick that samples metrics, fires due retries and resizes the pool
    /// (default 10 ms). Dispatch itself never waits for it: a submit wakes a worker at once.
    /// Shorter gives finer metrics at a little more idle CPU.
    Duration dispatch_interval = std::chrono::milliseconds(10);

    /// How often the watchdog compares running attempts with their timeout (default 100 ms,
    /// rounded to whole ticks). Shorter notices a stuck attempt sooner at the cost of a scan of
    /// the running tasks per period.
    Duration watchdog_interval = std::chrono::milliseconds(100);

    /// Length of the sliding metrics window, in 1 s slots (default 30 s). Longer smooths the
    /// controller's input (fewer oscillations), shorter reacts faster to a change of load.
    Duration metrics_window = std::chrono::seconds(30);

    /// How often the concurrency controller recomputes the worker target (default 2 s). Shorter
    /// reacts faster but risks churn; the seed warns against over-adapting.
    Duration controller_interval = std::chrono::seconds(2);

    /// Time within which the controller wants a backlog drained: target = rate x duration +
    /// queue_length / drain_time (default 5 s). Smaller pushes the target up harder under backlog.
    Duration drain_time = std::chrono::seconds(5);

    /// Largest change of the worker target per controller round (defaults +10 / -5). Larger steps
    /// follow load faster, smaller ones avoid thread churn.
    std::uint32_t max_step_up = 10;
    std::uint32_t max_step_down = 5;

    /// Let the target climb by max_step_up every dispatch_interval, instead of every
    /// controller_interval, while the queue is at its soft limit and every worker is busy (default
    /// true). This is what lets a burst far larger than queue_capacity reach max_workers in a
    /// fraction of a second; turn it off to keep growth strictly on the controller's cadence.
    bool scale_out_when_saturated = true;

    /// Keep the queue-wait and run-time histograms of MetricsSnapshot (default true). Each worker
    /// counts its attempts in buckets of its own (per observation a table lookup, one compare and
    /// two relaxed stores, on timestamps the worker takes anyway; no shared cache line, no extra
    /// clock read), and metrics() sums them: a few nanoseconds per task and ~400 bytes per
    /// worker. Off: both histograms stay empty and that work is skipped, for the last few
    /// percent of throughput on microsecond tasks.
    bool latency_histograms = true;

    /// Share of all cores (0..1] above which the pool stops growing (default 0.9): more threads
    /// than cores only make CPU-bound tasks slower. 1.0 keeps growing until the machine is fully
    /// busy; lower values leave headroom for the rest of the process.
    double cpu_ceiling = 0.9;

    /// Retry back-off: attempt n+1 waits retry_base_delay x 2^(n-1) + uniform jitter in
    /// [0, retry_jitter] (defaults 200 ms and 50 ms). Longer delays protect a struggling
    /// dependency; jitter spreads synchronized failures apart.
    Duration retry_base_delay = std::chrono::milliseconds(200);
    Duration retry_jitter = std::chrono::milliseconds(50);

    /// Retries after the first attempt before a task is dead-lettered (default 3; 0 disables
    /// retries). Overridable per task.
    std::uint32_t retry_max = 3;

    /// How long a timed-out body gets to honour its stop token (default 100 ms) before its thread
    /// is orphaned: set aside so it no longer counts against max_workers, and, when the callable
    /// is copyable and const-callable, the attempt is ended as timed out and retried on a copy
    /// while the stuck body runs on. Shorter frees capacity sooner; longer spares threads for
    /// bodies that stop a little late.
    Duration timeout_grace = std::chrono::milliseconds(100);

    /// Orphaned threads allowed at once (default 64; 0 never orphans, so a stuck body keeps its
    /// worker until it returns). Each is a thread and its stack held by a body that ignores its
    /// stop token; past the cap such bodies keep their workers, counted in
    /// totals.orphans_refused.
    std::uint32_t max_orphans = 64;

    /// Subtasks (TaskContext::submit) that may wait in the subtask lane (default 4096). They do
    /// not count against queue_capacity: a running parent's children are part of work already
    /// admitted. Past it a subtask submit answers queue_full.
    std::uint32_t subtask_capacity = 4096;

    /// How long ~Scheduler waits for queued work to drain (default 30 s) before cancelling it,
    /// and then for running bodies to honour their stop token before abandoning them (reported
    /// via Hooks::on_orphan). The destructor therefore never blocks much longer than twice this.
    Duration shutdown_grace = std::chrono::seconds(30);

    /// Dead-lettered tasks kept for inspection and replay (default 1024). Each keeps its record and
    /// its callable's captures alive; overflow evicts the oldest (counted in the metrics; persist
    /// them from Hooks::on_dead_letter if none may be lost).
    std::uint32_t dead_letter_capacity = 1024;

    /// Finished tasks that stay queryable (default 4096). Older ones are forgotten and query says
    /// unknown. Each remembered task costs one task record (112 bytes, plus its result when that
    /// does not fit inline).
    std::uint32_t history_capacity = 4096;

    /// Let a large backlog's task records come 2 MiB at a time on transparent huge pages
    /// (default true; Linux, past Tuning::slab_huge_after_chunks chunks: 65,536 tasks alive at
    /// once). A fresh record then costs its first touch ~16 ns instead of ~105 ns where a 4 KiB
    /// page faults in slowly (a VM: docs/hot-path.md, "Huge-page regions"), and a producer
    /// outrunning the workers grows the backlog up to 1.2 x faster. Off: memory grows 112 KiB at a
    /// time, and no fault on the submitting thread can wait for the kernel to compact memory into a
    /// huge page (with transparent_hugepage/defrag = madvise it may, on a fragmented machine: a
    /// latency spike).
    bool huge_pages = true;

    /// Throws std::invalid_argument naming the first invalid field and its value.
    void validate() const {
        auto fail = [](const char* field, const std::string& value, const char* why) {
            throw std::invalid_argument(std::string("ax::Config: ") + field + " = " + value + ": " +
                                        why);
        };
        auto ms = [](Duration d) {
            return std::to_string(std::chrono::duration<double, std::milli>(d).count()) + " ms";
        };
        if (max_workers == 0)
            fail("max_workers", "0", "must be at least 1");
        if (min_workers > max_workers)
            fail("min_workers", std::to_string(min_workers),
                 ("must not exceed max_workers (" + std::to_string(max_workers) + ")").c_str());
        if (max_workers > 65536)
            fail("max_workers", std::to_string(max_workers), "must be at most 65536");
        if (queue_capacity == 0)
            fail("queue_capacity", "0", "must be at least 1");
        if (queue_capacity > (1u << 24))
            fail("queue_capacity", std::to_string(queue_capacity), "must be at most 16777216");
        if (group_queue_capacity > (1u << 24))
            fail("group_queue_capacity", std::to_string(group_queue_capacity),
                 "must be at most 16777216 (0: queue_capacity)");
        if (!(soft_limit_ratio > 0.0 && soft_limit_ratio <= 1.0))
            fail("soft_limit_ratio", std::to_string(soft_limit_ratio), "must be in (0, 1]");
        if (!(cpu_ceiling > 0.0 && cpu_ceiling <= 1.0))
            fail("cpu_ceiling", std::to_string(cpu_ceiling), "must be in (0, 1]");
        if (weight_high == 0)
            fail("weight_high", "0", "must be at least 1");
        if (weight_normal == 0)
            fail("weight_normal", "0", "must be at least 1");
        if (weight_low == 0)
            fail("weight_low", "0", "must be at least 1");
        if (weight_high > 1000 || weight_normal > 1000 || weight_low > 1000)
            fail("weight_high/normal/low",
                 std::to_string(weight_high) + "/" + std::to_string(weight_normal) + "/" +
                     std::to_string(weight_low),
                 "each must be at most 1000");
        // Durations are added to clock readings (deadlines, condition variable waits): beyond a
        // day they are surely a mistake, and near Duration::max() they would overflow.
        const Duration day = std::chrono::hours(24);
        const std::pair<const char*, Duration> bounded[] = {
            {"max_wait", max_wait},
            {"dispatch_interval", dispatch_interval},
            {"watchdog_interval", watchdog_interval},
            {"controller_interval", controller_interval},
            {"drain_time", drain_time},
            {"retry_base_delay", retry_base_delay},
            {"retry_jitter", retry_jitter},
            {"timeout_grace", timeout_grace},
            {"shutdown_grace", shutdown_grace},
        };
        for (const auto& [field, value] : bounded)
            if (value > day)
                fail(field, ms(value), "must be at most 24 h");
        if (max_wait <= Duration::zero())
            fail("max_wait", ms(max_wait), "must be positive");
        if (dispatch_interval <= Duration::zero())
            fail("dispatch_interval", ms(dispatch_interval), "must be positive");
        if (watchdog_interval < dispatch_interval)
            fail("watchdog_interval", ms(watchdog_interval), "must be at least dispatch_interval");
        if (metrics_window < std::chrono::seconds(1))
            fail("metrics_window", ms(metrics_window), "must be at least 1 s");
        if (metrics_window > std::chrono::seconds(3600))
            fail("metrics_window", ms(metrics_window), "must be at most 3600 s");
        if (controller_interval < dispatch_interval)
            fail("controller_interval", ms(controller_interval),
                 "must be at least dispatch_interval");
        if (drain_time <= Duration::zero())
            fail("drain_time", ms(drain_time), "must be positive");
        if (max_step_up == 0)
            fail("max_step_up", "0", "must be at least 1");
        if (max_step_down == 0)
            fail("max_step_down", "0", "must be at least 1");
        if (retry_base_delay < Duration::zero())
            fail("retry_base_delay", ms(retry_base_delay), "must not be negative");
        if (retry_jitter < Duration::zero())
            fail("retry_jitter", ms(retry_jitter), "must not be negative");
        if (retry_max > 100)
            fail("retry_max", std::to_string(retry_max), "must be at most 100");
        if (timeout_grace < Duration::zero())
            fail("timeout_grace", ms(timeout_grace), "must not be negative");
        if (max_orphans > 65536)
            fail("max_orphans", std::to_string(max_orphans), "must be at most 65536");
        if (subtask_capacity == 0)
            fail("subtask_capacity", "0", "must be at least 1");
        if (subtask_capacity > (1u << 24))
            fail("subtask_capacity", std::to_string(subtask_capacity), "must be at most 16777216");
        if (shutdown_grace <= Duration::zero())
            fail("shutdown_grace", ms(shutdown_grace), "must be positive");
        if (dead_letter_capacity > (1u << 20))
            fail("dead_letter_capacity", std::to_string(dead_letter_capacity),
                 "must be at most 1048576");
        if (history_capacity > (1u << 24))
            fail("history_capacity", std::to_string(history_capacity), "must be at most 16777216");
    }

    /// Number of 1 s slots in the metrics window.
    [[nodiscard]] std::size_t window_slots() const {
        return static_cast<std::size_t>(
            std::chrono::duration_cast<std::chrono::seconds>(metrics_window).count());
    }
};

} // namespace ax
