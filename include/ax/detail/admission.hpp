// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include "../errors.hpp"
#include "../task.hpp"
#include "core.hpp"
#include "enqueue_stamp.hpp"

#include <chrono>
#include <cstdint>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

/// Admission: the one path by which a task enters the scheduler (submit, post, a context's
/// subtask or join, a replayed dead letter), and the pure rules it applies.
namespace ax::detail {

/// Why `o` cannot be admitted (nullopt: it can). `child`: a subtask; `groups_registered`: how
/// many groups exist. Pure; the texts are what SubmitError::detail carries.
inline std::optional<std::string> invalid_options(const SubmitOptions& o, bool child,
                                                  std::size_t groups_registered) {
    if (static_cast<std::uint8_t>(o.priority) >= priority_count)
        return "priority = " + std::to_string(static_cast<int>(o.priority)) +
               " is not high, normal or low";
    if (o.timeout.count() < 0)
        return "timeout = " + std::to_string(o.timeout.count()) + " ms is negative";
    if (o.timeout.count() > std::int64_t{UINT32_MAX})
        return "timeout = " + std::to_string(o.timeout.count()) + " ms exceeds 49 days";
    if (o.max_retries < -1 || o.max_retries > 100)
        return "max_retries = " + std::to_string(o.max_retries) + " must be -1 (default) or 0..100";
    if (child && o.group.value != 0)
        return std::string("group: subtasks take no group (a parent holding its group's slot "
                           "while waiting for children of that group could never finish)");
    if (o.group.value != 0 && o.group.value > groups_registered)
        return "group = " + std::to_string(o.group.value) + " was not registered";
    return std::nullopt;
}

/// A quick yes for the common case, inlined into every submit: in-range fields and no group.
/// Never true for options invalid_options() would refuse (test_hot_path checks the two agree);
/// false only sends the submit to the full check.
inline bool plainly_valid(const SubmitOptions& o) noexcept {
    return static_cast<std::uint8_t>(o.priority) < priority_count && o.timeout.count() >= 0 &&
           o.timeout.count() <= std::int64_t{UINT32_MAX} && o.max_retries >= -1 &&
           o.max_retries <= 100 && o.group.value == 0;
}

/// The `excess` of a backpressure refusal: how many tasks must drain before a submit that saw
/// `len` queued fits under `limit` (at least 1).
inline std::uint32_t backpressure_excess(std::uint32_t len, std::uint32_t limit) noexcept {
    return len >= limit ? len - limit + 1 : 1;
}

template <SchedulerClock Clock, ControllerPolicy Controller>
template <class F, class R>
Expected<TaskHandle<R>> SchedulerCore<Clock, Controller>::submit(F&& f, const SubmitOptions& o) {
    TaskId id;
    if (auto err = admit_new<F>(std::forward<F>(f), o, id, /*with_handle=*/true))
        return std::move(*err);
    return TaskHandle<R>(slab_, &slab_->at(id.index()), id);
}

template <SchedulerClock Clock, ControllerPolicy Controller>
template <class F>
Expected<TaskId> SchedulerCore<Clock, Controller>::post(F&& f, const SubmitOptions& o) {
    TaskId id;
    if (auto err = admit_new<F>(std::forward<F>(f), o, id, /*with_handle=*/false))
        return std::move(*err);
    return id;
}

template <SchedulerClock Clock, ControllerPolicy Controller>
std::optional<SubmitError>
SchedulerCore<Clock, Controller>::admit_erased(const SubmitOptions& o, TaskId& id, bool with_handle,
                                               bool child, const TaskId* deps, std::size_t ndeps,
                                               Placer place) {
    return admit(
        o, id, with_handle, place, [](TaskRecord&) {}, child, deps, ndeps);
}

/// A refusal that is not backpressure (shutdown, invalid options, no slot): counted apart.
template <SchedulerClock Clock, ControllerPolicy Controller>
SubmitError SchedulerCore<Clock, Controller>::refusal(Errc code, std::string why) {
    totals_.refused_other.fetch_add(1, std::memory_order_relaxed);
    return SubmitError{code, queue_.length(), queue_.capacity(), {}, std::move(why)};
}

/// A backpressure refusal (busy, queue_full). Its onset wakes the tick for a controller round
/// at once (TickWaker); the seed's rule keeps its tick-paced steps.
template <SchedulerClock Clock, ControllerPolicy Controller>
SubmitError SchedulerCore<Clock, Controller>::backpressure_error(Errc code, std::uint32_t len) {
    if constexpr (controller_fast_rounds<Controller>())
        tick_waker_.poke();
    const std::uint32_t limit = code == Errc::queue_full ? queue_.capacity() : queue_.soft_limit();
    return SubmitError{
        code, len, queue_.capacity(), retry_after(backpressure_excess(len, limit)), {}};
}

template <SchedulerClock Clock, ControllerPolicy Controller>
std::chrono::microseconds
SchedulerCore<Clock, Controller>::retry_after(std::uint32_t excess) const {
    return retry_after_hint(
        excess, telemetry_.drain_rate(), telemetry_.avg_duration_s(), pool_.live(),
        std::chrono::duration_cast<std::chrono::microseconds>(cfg_.dispatch_interval));
}

template <SchedulerClock Clock, ControllerPolicy Controller>
template <class F>
std::optional<SubmitError>
SchedulerCore<Clock, Controller>::admit_new(F&& f, const SubmitOptions& o, TaskId& id,
                                            bool with_handle) {
    using Fn = std::decay_t<F>;
    return admit(
        o, id, with_handle,
        [&](TaskRecord& r, bool detachable) {
            place_callable<Fn>(r, std::forward<F>(f), detachable);
        },
        [](TaskRecord&) {});
}

/// The one admission path: checks, takes a slot, lets `place` put the callable in it
/// (constructing it, or relocating it for a replay), and queues it: a subtask (`child`) into
/// the subtask lane, a join with `deps` into the join table until they end, anything else
/// into the queue. On a refusal after placing, `unplace` gets the callable back out before
/// the slot is freed.
template <SchedulerClock Clock, ControllerPolicy Controller>
template <class Place, class Unplace>
std::optional<SubmitError>
SchedulerCore<Clock, Controller>::admit(const SubmitOptions& o, TaskId& id, bool with_handle,
                                        Place&& place, Unplace&& unplace, bool child,
                                        const TaskId* deps, std::size_t ndeps) {
    // A running parent's children are part of work already admitted: they are accepted
    // while draining, refused only once shutdown cancels or the threads are gone.
    if (!lifecycle_.open(child))
        return refusal(Errc::shutting_down);
    // Only a submit naming a group pays for the groups mutex.
    if (!plainly_valid(o))
        if (auto why = invalid_options(o, child, o.group.value != 0 ? registry_.count() : 0))
            return refusal(Errc::invalid_options, std::move(*why));
    if (child) {
        const std::uint32_t waiting = dispatcher_.children_queued();
        if (waiting >= cfg_.subtask_capacity) {
            queue_.count_rejection();
            return SubmitError{Errc::queue_full,
                               waiting,
                               cfg_.subtask_capacity,
                               retry_after(waiting - cfg_.subtask_capacity + 1),
                               {}};
        }
    } else {
        // Cheap pre-check so a producer hammering a full queue never builds a record. The upper
        // bound costs no read of the workers' line; only a bound at a limit pays for the count.
        const auto over = [&](std::uint32_t n) {
            return n >= queue_.capacity() ||
                   (n >= queue_.soft_limit() && o.priority != Priority::high);
        };
        std::uint32_t seen = queue_.length_upper_bound();
        if (over(seen))
            seen = queue_.length();
        if (over(seen)) {
            queue_.count_rejection();
            return backpressure_error(seen >= queue_.capacity() ? Errc::queue_full : Errc::busy,
                                      seen);
        }
        // The whole pool asleep: its worker needs microseconds to come back from the kernel.
        // Wake it now, so that overlaps building and queueing this task (the wake after the
        // push stays). Asked of the notifier (parked workers against live ones), not of the
        // length estimate above: that estimate counts pops only as of the last limit check, so
        // under a large capacity it never read zero and this wake never happened
        // (docs/hot-path.md, "The pre-wake").
        notifier_.prewake(pool_.live());
    }
    // Read here, ahead of the slot's compare-exchange: the counter read then overlaps it rather
    // than waiting behind it (docs/hot-path.md, "The enqueue stamp"). Still after the submit began,
    // so never early.
    const std::int64_t enqueued = enqueue_stamp_ns<Clock>();
    const std::uint32_t index = slab_->acquire();
    if (index == TaskSlab::no_slot)
        return refusal(Errc::too_many_tasks);
    TaskRecord& r = slab_->at(index);
    r.flags = child ? record_child : 0;
    try {
        // A timeout makes a takeover possible: ask for the layout that allows it.
        place(r, o.timeout.count() > 0);
    } catch (...) {
        r.refs.store(1, std::memory_order_relaxed);
        slab_->release(index);
        throw;
    }
    r.priority = o.priority;
    r.attempts.store(0, std::memory_order_relaxed);
    r.max_retries = static_cast<std::uint8_t>(
        o.max_retries < 0 ? cfg_.retry_max : static_cast<std::uint32_t>(o.max_retries));
    r.timeout_ms = static_cast<std::uint32_t>(o.timeout.count());
    r.group = o.group.value;
    if (!o.name.empty() || r.extras != nullptr) {
        r.lock_extras();
        r.ensure_extras().name.assign(o.name);
        r.unlock_extras();
    }
    // Not a clock call per submit: derived from the TSC between readings, never early
    // (enqueue_stamp.hpp), so query()'s `enqueued` is still not before a time taken before it.
    r.enqueue_ns.store(enqueued, std::memory_order_relaxed);
    r.start_ns.store(0, std::memory_order_relaxed);
    r.finish_ns.store(0, std::memory_order_relaxed);
    r.mark_ns.store(0, std::memory_order_relaxed);
    r.refs.store(with_handle ? 2 : 1, std::memory_order_relaxed);
    id = TaskId::make(index, r.generation.load(std::memory_order_relaxed));

    if (child || ndeps != 0) {
        totals_.admitted_other.fetch_add(1, std::memory_order_relaxed);
        if (child)
            totals_.subtasks.fetch_add(1, std::memory_order_relaxed);
        if (ndeps != 0) {
            joins_.pending.fetch_add(1, std::memory_order_acq_rel);
            r.state.store(static_cast<std::uint32_t>(TaskState::pending),
                          std::memory_order_release);
            if (joins_.add(*slab_, index, deps, ndeps) == 0)
                release_join(index);
        } else {
            r.state.store(static_cast<std::uint32_t>(TaskState::queued), std::memory_order_release);
            dispatcher_.push_child(index);
        }
        return std::nullopt;
    }
    r.state.store(static_cast<std::uint32_t>(TaskState::queued), std::memory_order_release);
    std::uint32_t len = 0;
    bool first = false;
    const Admission a = queue_.try_push(index, o.priority, len, &first);
    if (a != Admission::admitted) {
        unplace(r);
        r.state.store(0, std::memory_order_relaxed);
        r.refs.store(1, std::memory_order_relaxed);
        slab_->release(index);
        if (a == Admission::closed) {
            totals_.refused_other.fetch_add(1, std::memory_order_relaxed);
            return SubmitError{Errc::shutting_down, len, queue_.capacity(), {}, {}};
        }
        return backpressure_error(a == Admission::full ? Errc::queue_full : Errc::busy, len);
    }
    // While tasks are tiny only the push that made the standby list non-empty wakes: whoever
    // it woke (or found awake) swaps the later pushes in with it and is back for more within
    // microseconds, so a stream pays one fence per swap, not one per task. Longer tasks keep a
    // wake per push, so a burst spreads over the parked workers.
    if (first || !telemetry_.tasks_are_tiny())
        notifier_.notify_one();
    return std::nullopt;
}

/// Moves a dead letter's callable into a fresh task through admit() (so backpressure applies);
/// on a refusal the entry goes back to the list at its old age.
template <SchedulerClock Clock, ControllerPolicy Controller>
Expected<TaskId> SchedulerCore<Clock, Controller>::replay_dead_letter(TaskId id) {
    if (!dead_letters_.remove(id))
        return refusal(Errc::invalid_options,
                       "task " + id.to_string() + " is not in the dead-letter list");
    TaskRecord& old = slab_->at(id.index()); // the list's reference keeps it alive
    std::string name;
    old.lock_extras();
    if (old.extras != nullptr)
        name = old.extras->name;
    old.unlock_extras();
    SubmitOptions o;
    o.name = name;
    o.priority = old.priority;
    o.timeout = std::chrono::milliseconds(old.timeout_ms);
    o.max_retries = old.max_retries;
    o.group = GroupId{old.group};
    TaskId fresh;
    std::optional<SubmitError> err;
    try {
        err = admit(
            o, fresh, /*with_handle=*/false,
            [&](TaskRecord& r, bool) {
                if (old.content != Content::callable)
                    throw std::logic_error("ax: dead letter has no callable to replay");
                if (auto e = old.manager(ManagerOp::relocate, old, &r))
                    std::rethrow_exception(e);
            },
            [&](TaskRecord& r) { r.manager(ManagerOp::relocate, r, &old); });
    } catch (...) {
        dead_letters_.restore(id);
        throw;
    }
    if (err) {
        dead_letters_.restore(id);
        return std::move(*err);
    }
    slab_->release(id.index());
    return fresh;
}

} // namespace ax::detail
