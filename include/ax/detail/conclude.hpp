// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include "../errors.hpp"
#include "../retry.hpp"
#include "../task.hpp"
#include "core.hpp"
#include "error_text.hpp"
#include "hook_caller.hpp"
#include "record.hpp"

#include <cstdint>
#include <exception>
#include <string>
#include <utility>
#include <vector>

/// Concluding: how an attempt or a task ends (success, a retry, the dead-letter list,
/// cancelled), the cancel state machine, and the release of when_all joins. See the state
/// machine in docs/design.md.
namespace ax::detail {

/// Ends a failed attempt: hooks, the failure record, then a retry, the dead-letter list, or
/// cancelled. Run by the attempt's owner: its worker, or the watchdog after a takeover
/// (local = nullptr).
template <SchedulerClock Clock, ControllerPolicy Controller>
void SchedulerCore<Clock, Controller>::conclude_failure(TaskRecord& r, std::uint32_t index,
                                                        TaskId id, std::uint32_t attempt,
                                                        std::uint32_t s, std::exception_ptr error,
                                                        std::int64_t start, std::int64_t end,
                                                        WorkerLocal* local, bool free_group_slot) {
    const Hooks& hooks = hooks_.hooks();
    // Whatever a timed-out body threw on its way out (often its reaction to the stop), the
    // attempt failed because of the timeout.
    if ((s & stop_bits) == timed_out_bit)
        error = std::make_exception_ptr(TaskTimedOut(r.timeout_ms));
    ErrorText text = describe_exception(error);
    if (hooks.on_exception) {
        TaskEvent e = HookCaller::attempt_event(r, id, attempt, start, end);
        e.error_type = text.type;
        e.error = text.message;
        hooks_.call(hooks.on_exception, e);
    }
    const bool permanent = text.permanent;
    r.record_failure(
        AttemptFailure{attempt, std::move(text.type), std::move(text.message), start, end});
    const bool retryable = !permanent && attempt <= r.max_retries && r.content == Content::callable;
    // shutdown(cancel) stops retries: a task that would have retried is cancelled, not
    // dead-lettered (its stop request may simply not have reached it yet).
    const bool can_retry = retryable && !lifecycle_.discarding();
    if (retryable && !can_retry) {
        finish(r, index, s, TaskState::cancelled, end, local, free_group_slot);
        return;
    }
    if (can_retry && (s & cancel_requested_bit) == 0) {
        const auto delay =
            retry_delay(cfg_.retry_base_delay, cfg_.retry_jitter, attempt + 1u, jitter_());
        const std::int64_t due = end + delay.count();
        r.mark_ns.store(due, std::memory_order_relaxed);
        r.renew_stop();
        if (hooks.on_retry) {
            TaskEvent e = HookCaller::attempt_event(r, id, attempt, start, end);
            e.retry_delay = delay;
            // The failure's text, as record_failure stored it (only when the hook is set).
            std::string type, message;
            r.lock_extras();
            if (r.extras != nullptr) {
                type = r.extras->last_error_type;
                message = r.extras->last_error;
            }
            r.unlock_extras();
            e.error_type = type;
            e.error = message;
            hooks_.call(hooks.on_retry, e);
        }
        // The timed-out flag belonged to this attempt; the next one starts clean. The CAS
        // fails when a waiter set has_waiter_bit (try again) or a cancel slipped in (fall
        // through to the cancelled ending).
        // Counted before the state says waiting_retry, and taken back if a cancel wins: whoever
        // sees the state finds the count (metrics().waiting_retry), and a cancel that ends the
        // wait (and decrements) can never run before the increment and wrap the count.
        totals_.waiting_retry.fetch_add(1, std::memory_order_acq_rel);
        while ((s & cancel_requested_bit) == 0) {
            if (r.state.compare_exchange_weak(
                    s, (s & sticky_bits) | static_cast<std::uint32_t>(TaskState::waiting_retry),
                    std::memory_order_acq_rel)) {
                totals_.retries.fetch_add(1, std::memory_order_relaxed);
                if (free_group_slot)
                    dispatcher_.release_group(r);
                timers_.add(due, index);
                return;
            }
        }
        totals_.waiting_retry.fetch_sub(1, std::memory_order_acq_rel);
    }
    r.set_final_error(std::move(error));
    // Commit to the dead-letter ending unless a cancel came first: from here cancel()
    // answers false (the task is as good as finished), so the hook below and the list never
    // see a task that then ends cancelled.
    while ((s & cancel_requested_bit) == 0 &&
           !r.state.compare_exchange_weak(s, s | ending_bit, std::memory_order_acq_rel)) {
    }
    if ((s & cancel_requested_bit) != 0) {
        finish(r, index, s, TaskState::cancelled, end, local, free_group_slot);
        return;
    }
    // The hook runs while this thread still owns the record and before the task is visibly
    // dead, so a user persisting dead letters sees every one, even those the bounded list
    // evicts at once.
    if (hooks.on_dead_letter && (s & cancel_requested_bit) == 0) {
        TaskEvent e = HookCaller::attempt_event(r, id, attempt, start, end);
        r.lock_extras();
        const std::string type = r.extras->last_error_type;
        const std::string message = r.extras->last_error;
        r.unlock_extras();
        e.error_type = type;
        e.error = message;
        hooks_.call(hooks.on_dead_letter, e);
    }
    // The dead-letter list holds its own reference (and with it the callable, for replay),
    // and lists the task before its terminal state is published: whoever sees it dead finds
    // it there.
    r.refs.fetch_add(1, std::memory_order_relaxed);
    if (const auto evicted = dead_letters_.add(id))
        slab_->release(evicted->index());
    finish(r, index, s, TaskState::dead_lettered, end, local, free_group_slot);
}

/// Ends a running task: the wanted state, or cancelled if a cancel was requested meanwhile.
/// Returns whether the task ended in `wanted`.
template <SchedulerClock Clock, ControllerPolicy Controller>
bool SchedulerCore<Clock, Controller>::finish(TaskRecord& r, std::uint32_t index, std::uint32_t s,
                                              TaskState wanted, std::int64_t end,
                                              WorkerLocal* local, bool free_group_slot) {
    TaskState final_state = wanted;
    r.finish_ns.store(end, std::memory_order_relaxed);
    if ((s & cancel_requested_bit) != 0)
        r.destroy_content(); // a cancelled task's callable (or value) serves no one now
    // The body has returned: its group slot is free before anyone can see the task ended.
    // (After a takeover the stuck body still holds it; its orphan frees it on return.)
    if (free_group_slot)
        dispatcher_.release_group(r);
    // A worker counts its successes in its own counters (summed by metrics()): one shared
    // total written by every worker per task was a cache line bounced per task.
    WorkerCounters* own = local != nullptr ? local->counters : nullptr;
    const auto count = [&](int delta) {
        if (own != nullptr && final_state == TaskState::succeeded)
            own->count_succeeded(delta);
        else
            totals_.count_terminal(final_state, delta);
    };
    for (;;) {
        // The watchdog may have flagged the attempt between the worker's look at the state and
        // this publication (the CAS below then fails on its bit): its on_timeout hook comes
        // first, so nobody sees the timeout after the terminal event.
        if ((s & timeout_hook_bit) != 0) [[unlikely]]
            s = await_timeout_hook(r);
        final_state = (s & cancel_requested_bit) != 0 ? TaskState::cancelled : wanted;
        // Counted before publishing, so whoever sees the terminal state sees the totals. The
        // forgotten bit is kept: a dead letter is listed before this publication, and a discard
        // in between has already marked it (dropped, query() answered for a discarded task).
        count(1);
        if (r.state.compare_exchange_weak(
                s, static_cast<std::uint32_t>(final_state) | (s & (has_waiter_bit | forgotten_bit)),
                std::memory_order_acq_rel)) {
            if ((s & has_waiter_bit) != 0)
                slab_->notify_waiters(index);
            if ((s & has_dependents_bit) != 0)
                release_dependents(index);
            break;
        }
        count(-1);
    }
    retire(index, local);
    return final_state == wanted;
}

template <SchedulerClock Clock, ControllerPolicy Controller>
bool SchedulerCore<Clock, Controller>::cancel(TaskId id) {
    TaskRecord* r = slab_->try_pin(id);
    if (r == nullptr)
        return false;
    const bool done = cancel_pinned(*r, id.index());
    slab_->release(id.index());
    return done;
}

/// cancel() on a pinned record; see the state machine in docs/design.md.
template <SchedulerClock Clock, ControllerPolicy Controller>
bool SchedulerCore<Clock, Controller>::cancel_pinned(TaskRecord& r, std::uint32_t index) {
    auto s = r.state.load(std::memory_order_acquire);
    for (;;) {
        const auto st = static_cast<TaskState>(s & state_mask);
        if (st == TaskState::queued || st == TaskState::waiting_retry || st == TaskState::pending ||
            st == TaskState::scheduled) {
            r.finish_ns.store(now_ns(), std::memory_order_relaxed);
            totals_.count_terminal(TaskState::cancelled, 1);
            if (!r.state.compare_exchange_weak(
                    s, static_cast<std::uint32_t>(TaskState::cancelled) | (s & has_waiter_bit),
                    std::memory_order_acq_rel)) {
                totals_.count_terminal(TaskState::cancelled, -1);
            } else {
                // Nobody runs or reads a cancelled task's callable: free its captures now
                // (a join's handles among them).
                r.destroy_content();
                if (st == TaskState::queued) {
                    dispatcher_.dequeued(r, s);
                } else if (st == TaskState::waiting_retry) {
                    totals_.waiting_retry.fetch_sub(1, std::memory_order_acq_rel);
                } else if (st == TaskState::scheduled) {
                    totals_.scheduled.fetch_sub(1, std::memory_order_acq_rel);
                } else {
                    joins_.pending.fetch_sub(1, std::memory_order_acq_rel);
                }
                if ((s & has_waiter_bit) != 0)
                    slab_->notify_waiters(index);
                if ((s & has_dependents_bit) != 0)
                    release_dependents(index);
                // The record stays linked where it waits (lane, timer heap or the join table)
                // as a tombstone; whoever takes it from there sends it to history.
                return true;
            }
        } else if (st == TaskState::running) {
            if ((s & cancel_requested_bit) != 0)
                return true;
            if ((s & ending_bit) != 0)
                return false; // already committed to its dead-letter ending
            if (r.state.compare_exchange_weak(s, s | cancel_requested_bit,
                                              std::memory_order_acq_rel)) {
                r.request_stop();
                return true;
            }
        } else {
            return false;
        }
    }
}

/// A task with dependents ended: count its joins down and queue those now free.
template <SchedulerClock Clock, ControllerPolicy Controller>
void SchedulerCore<Clock, Controller>::release_dependents(std::uint32_t index) {
    std::vector<std::uint32_t> ready;
    joins_.take_ready(index, ready);
    for (const auto j : ready)
        release_join(j);
}

/// pending -> queued for a join whose dependencies all ended; a join cancelled meanwhile is
/// retired here (nothing else holds it).
template <SchedulerClock Clock, ControllerPolicy Controller>
void SchedulerCore<Clock, Controller>::release_join(std::uint32_t j) {
    TaskRecord& r = slab_->at(j);
    auto s = r.state.load(std::memory_order_acquire);
    // Its group place first: once the state says queued a cancel may give it back.
    dispatcher_.requeued(r);
    while ((s & state_mask) == static_cast<std::uint32_t>(TaskState::pending)) {
        if (r.state.compare_exchange_weak(
                s, (s & ~state_mask) | static_cast<std::uint32_t>(TaskState::queued),
                std::memory_order_acq_rel)) {
            joins_.pending.fetch_sub(1, std::memory_order_acq_rel);
            r.enqueue_ns.store(now_ns(), std::memory_order_relaxed);
            if ((r.flags & record_child) != 0) {
                dispatcher_.push_child(j);
            } else {
                queue_.push_unchecked(j, r.priority);
                notifier_.notify_one();
            }
            return;
        }
    }
    dispatcher_.requeue_undone(r);
    retire(j, nullptr);
}

} // namespace ax::detail
