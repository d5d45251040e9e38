// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include "../task.hpp"
#include "../task_context.hpp"
#include "../tuning.hpp"
#include "callable.hpp"
#include "core.hpp"
#include "error_text.hpp"
#include "host.hpp"
#include "record.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <thread>
#include <type_traits>
#include <utility>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

/// Running: the core as the WorkerPool's Host (a worker's loop asks it for one task at a time),
/// the start of an attempt, and helping waits on worker threads.
namespace ax::detail {

/// The end of an attempt on a worker: a fresh clock reading, or the last one again while fewer
/// than Tuning::stale_end_ticks have passed since it (std::chrono::steady_clock on x86 only; any
/// other clock, ManualClock included, is read every time). See Tuning::stale_end_ticks.
template <SchedulerClock Clock, ControllerPolicy Controller>
std::int64_t SchedulerCore<Clock, Controller>::end_of_attempt(WorkerLocal& local) noexcept {
#if defined(__x86_64__) || defined(__i386__)
    if constexpr (std::is_same_v<Clock, std::chrono::steady_clock> &&
                  Tuning::stale_end_ticks != 0) {
        const std::uint64_t ticks = __rdtsc();
        // Unsigned: a counter that went backwards (another core's) reads as far apart.
        if (local.stamp_ns != 0 && ticks - local.stamp_ticks < Tuning::stale_end_ticks)
            return local.stamp_ns;
        local.stamp_ticks = ticks; // before the reading: the gap it measures is never short
        local.stamp_ns = now_ns();
        return local.stamp_ns;
    }
#endif
    (void)local;
    return now_ns();
}

template <SchedulerClock Clock, ControllerPolicy Controller>
bool SchedulerCore<Clock, Controller>::run_one(Worker& w) {
    if (!w.counters.busy.load(std::memory_order_relaxed))
        w.counters.busy.store(true, std::memory_order_seq_cst);
    WorkerLocal& local = w.local;
    Reservation& res = local.res;
    const std::int64_t now = local.last_end_ns != 0 ? local.last_end_ns : now_ns();
    for (;;) {
        if (res.next == res.reserved) {
            res.next = res.reserved = 0;
            fill(now, local);
            if (res.reserved == 0) {
                w.counters.busy.store(false, std::memory_order_seq_cst);
                local.last_end_ns = 0;
                history_.flush(local.finished);
                return false;
            }
        }
        const std::uint32_t index = res.batch[res.next++];
        if (try_start(index, local)) {
            // Chain wake: work is left and this worker is about to be busy, so rouse a
            // parked one (a no-op while one spins or a wake is in flight). Without it a burst
            // of long tasks could leave queued work next to sleeping workers.
            // Tiny tasks are exempt: this worker is back at the queue within microseconds,
            // and waking a second one would only crowd the producer's core.
            if (!telemetry_.tasks_are_tiny() && has_work())
                notifier_.notify_one();
            // A task with a timeout may get stuck and its thread orphaned: tasks reserved
            // behind it must not wait for it.
            if (slab_->at(index).timeout_ms != 0)
                dispatcher_.give_back(res);
            execute(index, w, now);
            return true;
        }
    }
}

template <SchedulerClock Clock, ControllerPolicy Controller>
void SchedulerCore<Clock, Controller>::on_worker_start(Worker& w) {
    current_host = this;
    current_worker_slot = &w;
    w.local.counters = &w.counters;
}

template <SchedulerClock Clock, ControllerPolicy Controller>
void SchedulerCore<Clock, Controller>::on_worker_exit(Worker& w) {
    dispatcher_.give_back(w.local.res);
    history_.flush(w.local.finished);
    current_host = nullptr;
    current_worker_slot = nullptr;
}

template <SchedulerClock Clock, ControllerPolicy Controller>
bool SchedulerCore<Clock, Controller>::help_wait(
    TaskRecord& r, std::uint32_t index, const std::chrono::steady_clock::time_point* deadline) {
    auto* w = static_cast<Worker*>(current_worker_slot);
    auto backoff = Tuning::help_backoff_min;
    for (;;) {
        if (is_terminal(r.load_state()))
            return true;
        if (deadline != nullptr && std::chrono::steady_clock::now() >= *deadline)
            return false;
        if (w != nullptr && help_one(*w)) {
            backoff = Tuning::help_backoff_min;
            continue;
        }
        // Nothing to help with: the awaited task runs elsewhere or waits for a retry. Block
        // briefly, then look again, since a subtask may enter the lane (a child's retry) with
        // no other worker free to take it.
        auto until = std::chrono::steady_clock::now() + backoff;
        if (deadline != nullptr && *deadline < until)
            until = *deadline;
        if (slab_->wait_terminal(r, index, &until))
            return true;
        backoff = std::min<std::chrono::microseconds>(backoff * 2, Tuning::help_backoff_max);
    }
}

/// Runs one task nested in a helping wait on this worker: first one this worker reserved
/// before the waiting task started (nobody else will run those, and the awaited task may be
/// among them), else a subtask from the lane, else (not too deeply nested) the next queued
/// task in ring order, which may be the awaited one. False if there was none.
template <SchedulerClock Clock, ControllerPolicy Controller>
bool SchedulerCore<Clock, Controller>::help_one(Worker& w) {
    Reservation& res = w.local.res;
    std::uint32_t i = none;
    if (res.next < res.reserved)
        i = res.batch[res.next++];
    if (i == none && dispatcher_.subtasks_waiting())
        i = dispatcher_.pop_subtask();
    if (i == none && help_depth < Tuning::max_help_depth && has_work()) {
        res.next = res.reserved = 0;
        fill(now_ns(), w.local);
        if (res.reserved != 0)
            i = res.batch[res.next++];
    }
    if (i == none)
        return false;
    ++help_depth;
    struct Depth {
        ~Depth() { --help_depth; }
    } depth;
    if (try_start(i, w.local))
        execute(i, w, now_ns());
    return true;
}

/// Caller-runs (SubmitOptions::help_while_waiting): a producer refused for want of room runs
/// queued tasks itself, those the next worker would have taken (dispatched in ring order as a
/// worker's run_one() takes them): what one dispatch reserves, less if the queue is down to its
/// room mark or `w`'s deadline or stop comes (looked at between tasks), instead of parking. On
/// a worker of this scheduler (a task posting with a wait) that is a helping wait's step on its
/// own worker; elsewhere the tasks run in a guest slot of the pool, which the watchdog watches
/// and whose counters the metrics sum, with this thread's worker identity swapped in meanwhile
/// (a TaskContext's subtasks and helping waits then work as on a worker) and restored after.
/// execute() lets no exception out (the body's is the attempt's failure, a hook's is counted).
/// Tasks reserved and not run are given back to the front of their lanes. False: nothing was
/// run (nothing to take, or no guest slot free); the caller waits as usual.
template <SchedulerClock Clock, ControllerPolicy Controller>
bool SchedulerCore<Clock, Controller>::help_producer(const RoomWait& w) {
    if (current_host == this && current_worker_slot != nullptr)
        return help_one(*static_cast<Worker*>(current_worker_slot));
    if (!has_work())
        return false;
    Worker* g = pool_.lend_guest();
    if (g == nullptr)
        return false;
    struct Identity {
        SchedulerCore& core;
        Worker* g;
        TaskHost* host = current_host;
        void* slot = current_worker_slot;
        const void* owner = current_worker_owner;
        ~Identity() {
            core.dispatcher_.give_back(g->local.res);
            current_host = host;
            current_worker_slot = slot;
            current_worker_owner = owner;
            g->counters.busy.store(false, std::memory_order_seq_cst);
            core.pool_.return_guest(g);
        }
    } identity{*this, g};
    current_host = this;
    current_worker_slot = g;
    g->local.last_end_ns = 0; // the last lend's end is no start for this one
    bool ran = false;
    // run_one() sets the slot busy before its dispatch: the drain check counts the attempt
    // once the queue's length no longer does. One dispatch's worth: the tasks a worker's run_one()
    // reserves at once (one, or a share of long lanes of tiny tasks), then back to admission.
    // Helping on down to the room mark, dispatch after dispatch, measured slower (0.66 - 0.74 x
    // parking against 0.83 - 1.11 x for one dispatch, docs/isolation.md): the producer left the
    // queue to the workers' contention for longer and pushed nothing meanwhile.
    while (run_one(*g)) {
        ran = true;
        if (!g->local.res.holds() || queue_.length() <= queue_.room_mark() ||
            w.stop.stop_requested() ||
            (w.bounded && std::chrono::steady_clock::now() >= w.deadline))
            break;
    }
    return ran;
}

/// Hands what idle guest slots hold for history (finished tasks batched as a worker batches
/// them) to it: from the tick, so a producer that stopped helping leaves none unlisted for
/// longer than a tick, and before the threads stop.
template <SchedulerClock Clock, ControllerPolicy Controller>
void SchedulerCore<Clock, Controller>::flush_guests() {
    pool_.for_each_idle_guest([this](Worker& g) {
        if (!g.local.finished.empty())
            history_.flush(g.local.finished);
    });
}

/// queued -> running for a reserved slot. A slot cancelled meanwhile (a tombstone), or any
/// slot during shutdown(cancel), goes to history instead.
template <SchedulerClock Clock, ControllerPolicy Controller>
bool SchedulerCore<Clock, Controller>::try_start(std::uint32_t i, WorkerLocal& local) {
    TaskRecord& r = slab_->at(i);
    if (lifecycle_.discarding()) {
        cancel_pinned(r, i);
        dispatcher_.release_group(r);
        retire(i, &local);
        return false;
    }
    auto s = r.state.load(std::memory_order_acquire);
    while ((s & state_mask) == static_cast<std::uint32_t>(TaskState::queued)) {
        if (r.state.compare_exchange_weak(s,
                                          (s & ~(state_mask | parked_bit)) |
                                              static_cast<std::uint32_t>(TaskState::running),
                                          std::memory_order_acq_rel)) {
            dispatcher_.dequeued(r, s);
            return true;
        }
    }
    dispatcher_.release_group(r);
    retire(i, &local);
    return false;
}

/// The watchdog is still in Hooks::on_timeout for this attempt: wait until it returned, so the
/// attempt's own events (and its terminal one) follow the timeout event. Rare (a timeout racing
/// the body's return) and as short as the hook: yield, then nap. Returns the state word after.
template <SchedulerClock Clock, ControllerPolicy Controller>
std::uint32_t SchedulerCore<Clock, Controller>::await_timeout_hook(TaskRecord& r) {
    for (std::uint32_t spins = 0;; ++spins) {
        const auto s = r.state.load(std::memory_order_acquire);
        if ((s & timeout_hook_bit) == 0)
            return s;
        if (spins < 64)
            std::this_thread::yield();
        else
            std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
}

/// Runs one attempt of a started task on worker `w` and concludes it (success here; failures
/// in conclude_failure).
template <SchedulerClock Clock, ControllerPolicy Controller>
void SchedulerCore<Clock, Controller>::execute(std::uint32_t index, Worker& w, std::int64_t start) {
    TaskRecord& r = slab_->at(index);
    // `start` is the previous attempt's end reading (one clock read per task); a task enqueued
    // after that reading but taken in the same dispatch round must not start before its
    // enqueue stamp (query() promises started >= enqueued).
    start = std::max(start, r.enqueue_ns.load(std::memory_order_relaxed));
    // A suspended coroutine taken again goes on with its attempt: no new attempt, no on_start,
    // the attempt's start kept; its timeout counts from now (a suspension is not a stall).
    const bool resumed = (r.state.load(std::memory_order_relaxed) & resumed_bit) != 0;
    std::uint32_t attempt = r.attempts.load(std::memory_order_relaxed);
    if (resumed) {
        r.state.fetch_and(~resumed_bit, std::memory_order_relaxed);
    } else {
        attempt = std::min<std::uint32_t>(attempt + 1u, 255u);
        r.attempts.store(static_cast<std::uint8_t>(attempt), std::memory_order_relaxed);
        r.start_ns.store(start, std::memory_order_relaxed);
    }
    r.mark_ns.store(start, std::memory_order_relaxed);
    const bool histograms = cfg_.latency_histograms;
    if (histograms) // queue wait since admission or the retry's re-queue; start is reused
        w.counters.queue_wait.add(start - r.enqueue_ns.load(std::memory_order_relaxed));
    const TaskId id = TaskId::make(index, r.generation.load(std::memory_order_relaxed));
    Attempt a;
    a.resumed = resumed;
    a.claim = &w.current;
    a.lifecycle = &lifecycle_;
    a.token = (std::uint64_t{++w.serial} << 32) | index;
    TaskContext ctx(r, id, attempt, &now_ns, this, &w.current, a.token);
    a.ctx = &ctx;
    current_worker_owner = this;
    const Hooks& hooks = hooks_.hooks();
    if (hooks.on_start && !resumed)
        hooks_.call(hooks.on_start, HookCaller::attempt_event(r, id, attempt, start, start));
    std::exception_ptr error = r.manager(ManagerOp::run, r, &a);
    // Not before `start`: a reused end reading can be older than an enqueue stamp taken after
    // it (stamps may be late by a few tens of ns), and query() promises started <= finished.
    const std::int64_t end = std::max(end_of_attempt(w.local), start);
    w.local.last_end_ns = end;
    a.restore();
    if (a.abandoned) {
        // The watchdog ended this attempt while the body ignored its stop; the record is the
        // retry's now. Give back the group slot the body held and the pin taken for us.
        dispatcher_.release_group(r);
        slab_->release(index);
        return;
    }
    if (a.suspend != nullptr) {
        suspend(r, index, id, attempt, *a.suspend, start, end, w.local);
        return;
    }
    w.counters.add_attempt(error == nullptr, end - start);
    if (histograms)
        w.counters.run_time.add(end - start);
    if (a.destructor_error)
        note_destructor_error(r, a.destructor_error);

    // The commit point against the watchdog: from here it flags nothing on this attempt, so
    // every event below (on_exception first, called before any state change) follows a
    // timeout flagged before it and precedes none. Only tasks with a timeout pay the RMW.
    auto s = r.timeout_ms != 0
                 ? r.state.fetch_or(concluding_bit, std::memory_order_acq_rel) | concluding_bit
                 : r.state.load(std::memory_order_acquire);
    if ((s & timeout_hook_bit) != 0) [[unlikely]]
        s = await_timeout_hook(r);
    if (r.group != 0 && (s & cancel_requested_bit) == 0)
        dispatcher_.record_attempt(r.group, error == nullptr, end);
    if (error == nullptr) {
        if (!hooks.on_success) {
            finish(r, index, s, TaskState::succeeded, end, &w.local);
            return;
        }
        // Pinned so the record cannot be recycled (history may evict it) before the hook.
        r.refs.fetch_add(1, std::memory_order_relaxed);
        const TaskEvent e = HookCaller::attempt_event(r, id, attempt, start, end);
        if (finish(r, index, s, TaskState::succeeded, end, &w.local))
            hooks_.call(hooks.on_success, e);
        slab_->release(index);
        return;
    }
    conclude_failure(r, index, id, attempt, s, std::move(error), start, end, &w.local);
}

} // namespace ax::detail
