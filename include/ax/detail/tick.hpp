// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include "../controller.hpp"
#include "../metrics.hpp"
#include "../task.hpp"
#include "core.hpp"
#include "record.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <stop_token>

/// The maintenance tick: one thread, every dispatch_interval. It re-queues due retries, folds
/// the counters into the metrics window, sizes the pool (controller or saturation rule), runs
/// the watchdog and the breakers, and notices when a shutdown has drained.
namespace ax::detail {

template <SchedulerClock Clock, ControllerPolicy Controller>
void SchedulerCore<Clock, Controller>::tick_loop(std::stop_token st) {
    while (!st.stop_requested()) {
        tick_waker_.wait(st, cfg_.dispatch_interval);
        if (st.stop_requested())
            break;
        tick();
    }
}

template <SchedulerClock Clock, ControllerPolicy Controller>
void SchedulerCore<Clock, Controller>::tick() {
    const std::int64_t now = now_ns();
    fire_due_retries(now);

    CumulativeCounters c;
    const auto qc = queue_.counters();
    c.incoming = qc.incoming;
    c.rejected = qc.rejected;
    c.incoming += totals_.admitted_other.load(std::memory_order_relaxed);
    pool_.sum_counters(c.completed, c.failed, c.duration_ns);
    const std::uint32_t qlen = queue_.length();
    const WorkerStats ws = pool_.stats();
    ControllerInput in;
    in.queue_length = qlen;
    in.current_target = ws.target;
    in.live_workers = ws.current;
    in.busy_workers = ws.busy;
    in.cpu_utilization = telemetry_.sample_cpu();
    // Saturated: the queue is at its soft limit now, or admission refused work since the
    // last tick (the queue was at a limit then; a producer obeying retry_after keeps it
    // below the limit most of the time, and comes back within Tuning::retry_after_floor,
    // well under a tick, while the drain is fast).
    in.saturated = qlen >= queue_.soft_limit() || c.rejected > last_rejected_;
    tick_waker_.backpressure_seen(in.saturated);
    last_rejected_ = c.rejected;
    in.offered_total = c.incoming + c.rejected;
    telemetry_.update(now, c, qlen, in);
    control(now, in);
    // Queued work with no worker at all (min_workers = 0) cannot wait for a controller round.
    if (pool_.target() == 0 && (qlen > 0 || has_work()))
        pool_.set_target(1);
    pool_.reap();
    flush_guests();
    // Also while draining: queued work still needs its workers.
    // A forecast pre-scales: its workers start before the burst's work is queued.
    pool_.grow(
        std::max<std::uint32_t>({prescale_ ? pool_.target() : 0u,
                                 qlen + dispatcher_.children_queued(), has_work() ? 1u : 0u}));
    if (++ticks_ % watchdog_ticks_ == 0)
        watchdog(now);
    dispatcher_.tick_breakers(
        now, registry_.count(),
        std::chrono::duration_cast<std::chrono::nanoseconds>(cfg_.metrics_window).count());
    if (has_work())
        notifier_.notify_one(); // safety net: never leave queued work beside parked workers
    check_drained();
}

/// A controller round when one is due (ControllerStore::round_due), else, for a policy without
/// fast rounds, the saturation rule.
template <SchedulerClock Clock, ControllerPolicy Controller>
void SchedulerCore<Clock, Controller>::control(std::int64_t now, ControllerInput& in) {
    const auto d = controller_state_.step(now, in, controller_, cfg_, [&](SchedDelta& sum) {
        if constexpr (real_time_clock<Clock>) {
            sample_workers(now, sum);
            return true;
        } else {
            (void)sum;
            return false; // a test clock: busy times are not comparable with thread times
        }
    });
    if (d) {
        prescale_ = d->reason == ControllerReason::forecast;
        pool_.set_target(d->target);
        return;
    }
    if constexpr (!controller_fast_rounds<Controller>()) {
        // Only when the rule fires: a target a CPU cap set below min_workers stays.
        const auto t = saturation_target(in, cfg_);
        if (t != std::clamp(in.current_target, cfg_.min_workers, cfg_.max_workers))
            pool_.set_target(t);
    }
}

/// Reads every worker's schedstat once and sums the deltas since the last sample (cost: see
/// detail/sched_stat.hpp). Busy time is the worker's finished attempts plus the running one's
/// age, on Clock (a real-time clock here).
template <SchedulerClock Clock, ControllerPolicy Controller>
void SchedulerCore<Clock, Controller>::sample_workers(std::int64_t now, SchedDelta& sum) {
    pool_.for_each_listed(sampled_, [&](Worker& w) {
        std::uint64_t cpu = 0;
        std::uint64_t wait = 0;
        if (!read_schedstat(w.tid.load(std::memory_order_acquire), cpu, wait))
            return;
        std::int64_t busy = w.counters.busy_ns.load(std::memory_order_relaxed);
        const auto claim = w.current.load(std::memory_order_acquire);
        if (claim != no_attempt) {
            const std::int64_t start = slab_->at(static_cast<std::uint32_t>(claim))
                                           .start_ns.load(std::memory_order_relaxed);
            if (start > 0 && now > start)
                busy += now - start;
        }
        accumulate(w.sched, cpu, wait, busy, sum);
    });
    sum.idle_cores = idle_.sample();
}

template <SchedulerClock Clock, ControllerPolicy Controller>
void SchedulerCore<Clock, Controller>::fire_due_retries(std::int64_t now) {
    due_.clear();
    timers_.take_due(now, due_);
    std::size_t requeued = 0;
    for (const auto i : due_) {
        TaskRecord& r = slab_->at(i);
        auto s = r.state.load(std::memory_order_acquire);
        bool back = false;
        const auto waited = static_cast<TaskState>(s & state_mask);
        // Its group place first: once the state says queued a cancel may give it back.
        dispatcher_.requeued(r);
        while ((s & state_mask) == static_cast<std::uint32_t>(TaskState::waiting_retry) ||
               (s & state_mask) == static_cast<std::uint32_t>(TaskState::scheduled)) {
            if (r.state.compare_exchange_weak(
                    s, (s & ~state_mask) | static_cast<std::uint32_t>(TaskState::queued),
                    std::memory_order_acq_rel)) {
                back = true;
                break;
            }
        }
        if (back) {
            (waited == TaskState::scheduled ? totals_.scheduled : totals_.waiting_retry)
                .fetch_sub(1, std::memory_order_acq_rel);
            r.enqueue_ns.store(now, std::memory_order_relaxed);
            if ((r.flags & record_child) != 0) {
                dispatcher_.push_child(i);
            } else {
                queue_.push_unchecked(i, r.priority);
                ++requeued;
            }
        } else {
            dispatcher_.requeue_undone(r);
            retire(i, nullptr); // cancelled while waiting: a tombstone
        }
    }
    // Batched: one wake for one task, one broadcast for several.
    if (requeued == 1)
        notifier_.notify_one();
    if (requeued > 1)
        notifier_.notify_all();
}

template <SchedulerClock Clock, ControllerPolicy Controller>
void SchedulerCore<Clock, Controller>::check_drained() {
    if (lifecycle_.accepting())
        return;
    // Order matters: joins, queue, subtasks, then busy workers, then timers (each stage feeds
    // the next; see docs/design.md, shutdown).
    if (joins_.pending.load(std::memory_order_acquire) != 0)
        return;
    if (queue_.length() != 0 || dispatcher_.held_total() != 0)
        return;
    if (dispatcher_.children_queued() != 0)
        return;
    if (pool_.in_flight() != 0)
        return;
    if (totals_.waiting_retry.load(std::memory_order_acquire) != 0 ||
        totals_.scheduled.load(std::memory_order_acquire) != 0)
        return;
    lifecycle_.mark_drained();
}

/// Claims the (one-time) stop and joins the tick; false if the threads were stopped before.
template <SchedulerClock Clock, ControllerPolicy Controller>
bool SchedulerCore<Clock, Controller>::stop_ticker() {
    if (!lifecycle_.claim_stop())
        return false;
    if (ticker_.joinable()) {
        ticker_.request_stop();
        ticker_.join();
    }
    return true;
}

template <SchedulerClock Clock, ControllerPolicy Controller>
void SchedulerCore<Clock, Controller>::stop_threads() {
    if (stop_ticker()) {
        lifecycle_.mark_threads_stopped();
        pool_.stop_and_join();
        flush_guests();
    }
}

} // namespace ax::detail
