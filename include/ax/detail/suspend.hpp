// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include "../errors.hpp"
#include "../task.hpp"
#include "admission.hpp"
#include "callable.hpp"
#include "core.hpp"
#include "record.hpp"

#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <vector>

/// Suspending: how a coroutine task (ax::Task, ax/coro.hpp) leaves its worker in the middle of an
/// attempt and comes back. It reuses the when_all machinery: a coroutine awaiting tasks becomes
/// a pending join on them (the join table, JoinTable), and the last one's ending queues it again;
/// a hop (co_await schedule()) re-queues it at once. Either way it is resumed by a worker that
/// takes it from the queue, never inline in another task's ending (no deep stacks) and never on
/// the tick thread. While suspended it holds no worker and no group slot, and the watchdog does
/// not see it (its timeout counts per run, from the last resumption or heartbeat).
namespace ax::detail {

/// The checks a submit with `o` would meet, for a running coroutine task that hops: options
/// (a subtask still takes no group; a hop re-queues at once, so no delay / run_at), shutdown
/// (cancel) (a drain lets running work go on, as it does subtasks), the target group's gate (an
/// open breaker, its group_queue_capacity: a coroutine cannot bypass a failing group's
/// fail-fast by hopping into it) and backpressure (a hop is refused where a submit would be,
/// so a coroutine cannot bypass the queue's limits by hopping).
template <SchedulerClock Clock, ControllerPolicy Controller>
std::optional<SubmitError> SchedulerCore<Clock, Controller>::admit_hop(const TaskRecord& r,
                                                                       const SubmitOptions& o) {
    const bool child = (r.flags & record_child) != 0;
    if (!lifecycle_.open(/*child=*/true))
        return refusal(Errc::shutting_down);
    if (!plainly_valid(o))
        if (auto why = invalid_options(o, child, o.group.value != 0 ? registry_.count() : 0))
            return refusal(Errc::invalid_options, std::move(*why));
    if (delayed(o))
        return refusal(Errc::invalid_options, "delay / run_at: schedule() re-queues at once");
    if (child)
        return std::nullopt; // the subtask lane takes it back (it was admitted there)
    // Only checked: the place is counted when suspend() re-queues the task (requeued()).
    if (o.group.value != 0)
        if (auto err = group_gate(o.group.value, /*reserve=*/false))
            return err;
    const std::uint32_t len = queue_.length();
    if (len >= queue_.capacity() || (len >= queue_.soft_limit() && o.priority != Priority::high)) {
        queue_.count_rejection();
        return backpressure_error(len >= queue_.capacity() ? Errc::queue_full : Errc::busy, len);
    }
    return std::nullopt;
}

/// A coroutine's run ended in a suspension (`how`, which lives in its frame). The worker copies
/// what it needs, frees the group slot, and moves the task from running to pending (await) or
/// queued (hop), with resumed_bit so the next run continues the attempt. A cancel that came
/// during the run ends the task cancelled here instead (its frame is destroyed with its
/// content); a timeout that fired during the run ends the attempt as timed out (a retry
/// restarts the coroutine), reported to its group's breaker like any failed attempt and, as in
/// execute(), only once the watchdog's on_timeout hook returned (event order).
template <SchedulerClock Clock, ControllerPolicy Controller>
void SchedulerCore<Clock, Controller>::suspend(TaskRecord& r, std::uint32_t index, TaskId id,
                                               std::uint32_t attempt, const Suspension& how,
                                               std::int64_t start, std::int64_t end,
                                               WorkerLocal& local) {
    const bool hop = how.kind == Suspension::Kind::hop;
    // Copied first: once the state leaves `running` a cancel may destroy the frame (and `how`).
    TaskId one{};
    std::vector<TaskId> many;
    const TaskId* deps = &one;
    if (!hop) {
        if (how.ndeps == 1) {
            one = how.deps[0];
        } else {
            many.assign(how.deps, how.deps + how.ndeps);
            deps = many.data();
        }
    }
    const std::size_t ndeps = hop ? 0 : how.ndeps;
    const Priority priority = how.priority;
    const bool child = (r.flags & record_child) != 0;
    const std::uint16_t ran_group = r.group; // the group this run counted in (a hop changes it)
    // The group slot is held only while on a worker: a coroutine awaiting tasks of its own group
    // must not keep them from running.
    dispatcher_.release_group(r);
    if (hop) {
        // Still running and ours: nobody reads these until the state says queued.
        r.priority = priority;
        r.group = how.group;
        r.enqueue_ns.store(now_ns(), std::memory_order_relaxed);
        // Its new group's place before the state says queued: a cancel that dequeues it at
        // once gives back a place that was counted.
        if (!child)
            dispatcher_.requeued(r);
    } else {
        // Counted before the state says pending, like an admitted join: a cancel that ends it
        // pending takes it back, and the drain check never sees a pending task uncounted.
        joins_.pending.fetch_add(1, std::memory_order_acq_rel);
    }
    const std::uint32_t target =
        static_cast<std::uint32_t>(hop ? TaskState::queued : TaskState::pending);
    auto s = r.state.load(std::memory_order_acquire);
    for (;;) {
        if ((s & stop_bits) != 0) {
            if ((s & timeout_hook_bit) != 0) [[unlikely]]
                s = await_timeout_hook(r);
            if (!hop)
                joins_.pending.fetch_sub(1, std::memory_order_acq_rel);
            else if (!child)
                dispatcher_.requeue_undone(r);
            if ((s & cancel_requested_bit) != 0) {
                finish(r, index, s, TaskState::cancelled, end, &local, /*free_group_slot=*/false);
            } else {
                if (ran_group != 0)
                    dispatcher_.record_attempt(ran_group, /*ok=*/false, end);
                conclude_failure(r, index, id, attempt, s,
                                 std::make_exception_ptr(TaskTimedOut(r.timeout_ms)), start, end,
                                 &local, /*free_group_slot=*/false);
            }
            return;
        }
        if (r.state.compare_exchange_weak(s, (s & sticky_bits) | resumed_bit | target,
                                          std::memory_order_acq_rel))
            break;
    }
    // From here the task is not ours: it may be cancelled, resumed elsewhere, even finished.
    if (hop) {
        if (child) {
            dispatcher_.push_child(index);
        } else {
            queue_.push_unchecked(index, priority);
            notifier_.notify_one();
        }
        return;
    }
    if (joins_.add(*slab_, index, deps, ndeps) == 0)
        release_join(index);
}

} // namespace ax::detail
