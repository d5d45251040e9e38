// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include "../errors.hpp"
#include "../task.hpp"
#include "core.hpp"
#include "enqueue_stamp.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
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
    if (o.delay.count() < 0)
        return "delay = " + std::to_string(o.delay.count()) + " ns is negative";
    if (o.delay > std::chrono::hours(24 * 366))
        return "delay = " + std::to_string(o.delay.count()) + " ns exceeds a year";
    if (o.run_at != std::chrono::steady_clock::time_point{} &&
        o.run_at > std::chrono::steady_clock::now() + std::chrono::hours(24 * 366))
        return std::string("run_at is more than a year away");
    if (child && (o.delay.count() != 0 || o.run_at != std::chrono::steady_clock::time_point{}))
        return std::string("delay / run_at: subtasks start at once");
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
           o.max_retries <= 100 && o.group.value == 0 && o.delay.count() == 0 &&
           o.run_at == std::chrono::steady_clock::time_point{};
}

/// Whether `o` asks for a later start (delay or run_at).
inline bool delayed(const SubmitOptions& o) noexcept {
    return o.delay.count() != 0 || o.run_at != std::chrono::steady_clock::time_point{};
}

/// The start time on the scheduler's clock of a task admitted at `now` with `o` (delayed()).
inline std::int64_t due_ns(const SubmitOptions& o, std::int64_t now) noexcept {
    std::int64_t wait = o.delay.count();
    if (o.run_at != std::chrono::steady_clock::time_point{})
        wait = std::max<std::int64_t>(wait, std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                o.run_at - std::chrono::steady_clock::now())
                                                .count());
    return now + std::max<std::int64_t>(wait, 0);
}

/// The `excess` of a backpressure refusal: how many tasks must drain before a submit that saw
/// `len` queued fits under `limit` (at least 1).
inline std::uint32_t backpressure_excess(std::uint32_t len, std::uint32_t limit) noexcept {
    return len >= limit ? len - limit + 1 : 1;
}

template <SchedulerClock Clock, ControllerPolicy Controller>
template <class F, class R>
Expected<TaskHandle<R>> SchedulerCore<Clock, Controller>::submit(F&& f, const SubmitOptions& o,
                                                                 const RoomWait* wait) {
    TaskId id;
    if (auto err = admit_new<F>(std::forward<F>(f), o, id, /*with_handle=*/true, wait))
        return std::move(*err);
    return TaskHandle<R>(slab_, &slab_->at(id.index()), id);
}

template <SchedulerClock Clock, ControllerPolicy Controller>
template <class F>
Expected<TaskId> SchedulerCore<Clock, Controller>::post(F&& f, const SubmitOptions& o,
                                                        const RoomWait* wait) {
    TaskId id;
    if (auto err = admit_new<F>(std::forward<F>(f), o, id, /*with_handle=*/false, wait))
        return std::move(*err);
    return id;
}

/// A waiting submit was refused for want of room: park until a pop brings the queue down to
/// its room mark (DoubleBufferQueue::wait_for_room), shutdown, the stop token, or the deadline.
/// False when the wait is over (deadline passed, stop requested): the refusal stands. The
/// futex wait is capped (Tuning-free 20 ms) only as a safety net; the wake comes from the pop.
template <SchedulerClock Clock, ControllerPolicy Controller>
bool SchedulerCore<Clock, Controller>::wait_for_room(const RoomWait& w) {
    if (w.stop.stop_requested() || !lifecycle_.accepting())
        return false;
    std::chrono::nanoseconds limit = std::chrono::milliseconds(20);
    if (w.bounded) {
        const auto now = std::chrono::steady_clock::now();
        if (now >= w.deadline)
            return false;
        limit = std::min<std::chrono::nanoseconds>(limit, w.deadline - now);
    }
    // Caller-runs (opt-in): queued tasks run here make room as a worker would, with no switch.
    if (w.help && help_producer(w))
        return true;
    // Before the kernel: a few yields, each giving this core to a worker that drains (on a
    // machine with fewer cores than threads the producer's core is theirs to take). A queue of
    // microsecond tasks is back at its room mark within them, without a futex round trip.
    for (std::uint32_t k = 0; k < Tuning::room_yields; ++k) {
        std::this_thread::yield();
        if (queue_.length() <= queue_.room_mark())
            return true;
    }
    if (w.stop.stop_possible()) {
        std::stop_callback wake(w.stop, [this] { queue_.wake_room(); });
        queue_.wait_for_room(limit);
    } else {
        queue_.wait_for_room(limit);
    }
    return !w.stop.stop_requested();
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
/// at once (TickWaker); the seed's rule keeps its tick-paced steps. Its retry_after: the time
/// to free the slot, at least Tuning::retry_after_floor while that leaves the room mark's work
/// queued (backpressure_hint).
template <SchedulerClock Clock, ControllerPolicy Controller>
SubmitError SchedulerCore<Clock, Controller>::backpressure_error(Errc code, std::uint32_t len) {
    if constexpr (controller_fast_rounds<Controller>())
        tick_waker_.poke();
    const std::uint32_t limit = code == Errc::queue_full ? queue_.capacity() : queue_.soft_limit();
    const std::uint32_t room = queue_.room_mark();
    // The drain to the room mark at the faster of the window's completion rate and the pool's
    // own (live workers over the mean duration): the window divides by at least 0.1 s, so early
    // in a run its rate reads low (10 x at the first tick), and a hint from it alone could
    // outlast the queue's work.
    const double avg_s = telemetry_.avg_duration_s();
    const std::uint32_t live = pool_.live();
    const double pool_rate = avg_s > 0.0 ? std::max<std::uint32_t>(live, 1) / avg_s : 0.0;
    const auto to_room = retry_after_hint(
        len > room ? len - room : 1, std::max(telemetry_.drain_rate(), pool_rate), avg_s, live,
        std::chrono::duration_cast<std::chrono::microseconds>(cfg_.dispatch_interval));
    return SubmitError{code,
                       len,
                       queue_.capacity(),
                       backpressure_hint(retry_after(backpressure_excess(len, limit)), to_room),
                       {}};
}

/// Errc::breaker_open while group `g`'s breaker is open (retry_after: the rest of its
/// cool-down, rounded up), Errc::group_full while it queues group_queue_capacity tasks; nullopt
/// when it admits (having taken a group place when `reserve`). Counted with the other
/// non-backpressure refusals: a failing group's refusals must not read as load to the controller.
template <SchedulerClock Clock, ControllerPolicy Controller>
std::optional<SubmitError> SchedulerCore<Clock, Controller>::group_gate(std::uint16_t g,
                                                                        bool reserve) {
    const std::int64_t open_until = dispatcher_.breaker_open_until(g);
    if (open_until != 0) {
        const std::int64_t now = now_ns();
        if (now < open_until) {
            totals_.refused_other.fetch_add(1, std::memory_order_relaxed);
            return SubmitError{Errc::breaker_open,
                               queue_.length(),
                               queue_.capacity(),
                               std::chrono::microseconds((open_until - now + 999) / 1000),
                               {}};
        }
    }
    const std::uint32_t cap = group_queue_capacity();
    std::uint32_t queued = 0;
    const bool fits = reserve ? dispatcher_.reserve(g, cap, queued)
                              : (queued = dispatcher_.group_queued(g)) < cap;
    if (!fits) {
        totals_.refused_other.fetch_add(1, std::memory_order_relaxed);
        return SubmitError{Errc::group_full, queued, cap, retry_after(queued - cap + 1), {}};
    }
    return std::nullopt;
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
                                            bool with_handle, const RoomWait* wait) {
    using Fn = std::decay_t<F>;
    return admit(
        o, id, with_handle,
        [&](TaskRecord& r, bool detachable) {
            place_callable<Fn>(r, std::forward<F>(f), detachable);
        },
        [](TaskRecord&) {}, false, nullptr, 0, wait);
}

/// The one admission path: checks, takes a slot, lets `place` put the callable in it
/// (constructing it, or relocating it for a replay), and queues it: a subtask (`child`) into
/// the subtask lane, a join with `deps` into the join table until they end, anything else
/// into the queue. On a refusal after placing, `unplace` gets the callable back out before
/// the slot is freed.
template <SchedulerClock Clock, ControllerPolicy Controller>
template <class Place, class Unplace>
std::optional<SubmitError> SchedulerCore<Clock, Controller>::admit(
    const SubmitOptions& o, TaskId& id, bool with_handle, Place&& place, Unplace&& unplace,
    bool child, const TaskId* deps, std::size_t ndeps, const RoomWait* wait) {
    // A running parent's children are part of work already admitted: they are accepted
    // while draining, refused only once shutdown cancels or the threads are gone.
    if (!lifecycle_.open(child))
        return refusal(Errc::shutting_down);
    // Only a submit naming a group pays for the groups mutex.
    if (!plainly_valid(o))
        if (auto why = invalid_options(o, child, o.group.value != 0 ? registry_.count() : 0))
            return refusal(Errc::invalid_options, std::move(*why));
    // A group's own gate: fail fast behind an open breaker, and bound what the group queues
    // (its parked tasks are not in the shared queue's count). Lock-free: atomics of the group.
    // A plain task takes its group place now (given back if admission fails below); a join is
    // only checked, and counted when it is released into the queue.
    const bool later = delayed(o);
    if (later && ndeps != 0)
        return refusal(Errc::invalid_options, "delay / run_at: a join starts when its tasks end");
    const bool group_place = o.group.value != 0 && ndeps == 0 && !later;
    if (o.group.value != 0)
        if (auto err = group_gate(o.group.value, group_place))
            return err;
    // Group place taken above, given back on every refusal from here.
    struct GroupPlace {
        Dispatcher* d;
        std::uint16_t g;
        ~GroupPlace() {
            if (d != nullptr)
                d->unreserve(g);
        }
    } place_guard{group_place ? &dispatcher_ : nullptr, o.group.value};
    if (later) {
        // Scheduled: no queue place is taken now; it enters the queue unchecked when due.
    } else if (child) {
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
        for (;;) {
            std::uint32_t seen = queue_.length_upper_bound();
            if (over(seen))
                seen = queue_.length();
            if (!over(seen))
                break;
            queue_.count_rejection();
            // A waiting submit parks here, before anything is built: its callable is untouched
            // until there is room.
            if (wait == nullptr || !wait_for_room(*wait)) {
                if (!lifecycle_.open(false))
                    return refusal(Errc::shutting_down);
                return backpressure_error(seen >= queue_.capacity() ? Errc::queue_full : Errc::busy,
                                          seen);
            }
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
    fill_record(r, o, enqueued, with_handle);
    id = TaskId::make(index, r.generation.load(std::memory_order_relaxed));

    if (later) {
        totals_.admitted_other.fetch_add(1, std::memory_order_relaxed);
        const std::int64_t due = due_ns(o, now_ns());
        r.mark_ns.store(due, std::memory_order_relaxed);
        // Counted before the state says scheduled (see conclude_failure's waiting_retry).
        totals_.scheduled.fetch_add(1, std::memory_order_acq_rel);
        r.state.store(static_cast<std::uint32_t>(TaskState::scheduled), std::memory_order_release);
        timers_.add(due, index);
        return std::nullopt;
    }
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
    place_guard.d = nullptr; // the place is the task's now (given back when it leaves the queue)
    r.state.store(static_cast<std::uint32_t>(TaskState::queued), std::memory_order_release);
    std::uint32_t len = 0;
    bool first = false;
    Admission a = queue_.try_push(index, o.priority, len, &first);
    // Another producer took the room between the check and the push: a waiting submit keeps
    // its record and waits again.
    while ((a == Admission::full || a == Admission::busy) && wait != nullptr &&
           wait_for_room(*wait))
        a = queue_.try_push(index, o.priority, len, &first);
    if (a != Admission::admitted) {
        if (group_place)
            dispatcher_.unreserve(o.group.value);
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

/// The fields of a fresh record from its options (its callable is placed already).
template <SchedulerClock Clock, ControllerPolicy Controller>
void SchedulerCore<Clock, Controller>::fill_record(TaskRecord& r, const SubmitOptions& o,
                                                   std::int64_t enqueued, bool with_handle) {
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
}

/// A batch through one admission: the checks once, the queue's places taken for the whole
/// batch under one lock (DoubleBufferQueue::try_reserve), the records built outside it, and
/// the chain appended under the lock again; one wake for the batch. `T` is TaskId (post_many)
/// or TaskHandle<R> (submit_many). If moving a callable into its record throws, the tasks
/// before it stay admitted and the exception propagates.
template <SchedulerClock Clock, ControllerPolicy Controller>
template <class T, class R, class It>
BatchResult<T> SchedulerCore<Clock, Controller>::admit_many(It first, std::size_t n,
                                                            const SubmitOptions& o,
                                                            BatchPolicy policy) {
    BatchResult<T> out;
    if (n == 0)
        return out;
    const bool all = policy == BatchPolicy::all_or_nothing;
    if (!lifecycle_.open(false)) {
        out.error = refusal(Errc::shutting_down);
        return out;
    }
    if (!plainly_valid(o))
        if (auto why = invalid_options(o, false, o.group.value != 0 ? registry_.count() : 0)) {
            out.error = refusal(Errc::invalid_options, std::move(*why));
            return out;
        }
    if (delayed(o)) {
        out.error = refusal(Errc::invalid_options,
                            "delay / run_at: post_many queues at once; submit delayed tasks alone");
        return out;
    }
    std::uint32_t want = static_cast<std::uint32_t>(
        std::min<std::size_t>(n, std::min<std::uint32_t>(queue_.capacity(), 1u << 16)));
    std::optional<SubmitError> why_short; // the refusal that cut the batch short
    if (want < n && all) {
        queue_.count_rejection();
        out.error = backpressure_error(Errc::queue_full, queue_.length());
        return out;
    }
    // The group's places, one atomic add each, up to its bound.
    std::uint32_t group_places = 0;
    if (o.group.value != 0) {
        if (auto err = group_gate(o.group.value, /*reserve=*/false)) {
            out.error = std::move(err);
            return out;
        }
        std::uint32_t q = 0;
        while (group_places < want && dispatcher_.reserve(o.group.value, group_queue_capacity(), q))
            ++group_places;
        if (group_places < want) {
            const std::uint32_t cap = group_queue_capacity();
            why_short = SubmitError{Errc::group_full, q, cap, retry_after(q - cap + 1), {}};
            if (all || group_places == 0) {
                for (std::uint32_t k = 0; k < group_places; ++k)
                    dispatcher_.unreserve(o.group.value);
                totals_.refused_other.fetch_add(1, std::memory_order_relaxed);
                out.error = std::move(why_short);
                return out;
            }
            want = group_places;
        }
    }
    const auto give_back_group = [&](std::uint32_t k) {
        for (std::uint32_t j = 0; j < k && o.group.value != 0; ++j)
            dispatcher_.unreserve(o.group.value);
    };
    std::uint32_t len = 0;
    Admission why = Admission::admitted;
    const std::uint32_t places = queue_.try_reserve(want, o.priority, all, len, why);
    if (places == 0) {
        give_back_group(group_places);
        if (why == Admission::closed) {
            totals_.refused_other.fetch_add(1, std::memory_order_relaxed);
            out.error = SubmitError{Errc::shutting_down, len, queue_.capacity(), {}, {}};
        } else {
            out.error =
                backpressure_error(why == Admission::full ? Errc::queue_full : Errc::busy, len);
        }
        return out;
    }
    if (places < want) {
        give_back_group(group_places - places);
        why_short = backpressure_error(
            len + places >= queue_.capacity() ? Errc::queue_full : Errc::busy, len + places);
    } else if (want < n && !why_short) {
        why_short = backpressure_error(Errc::queue_full, len + places);
    }
    notifier_.prewake(pool_.live());
    out.admitted.reserve(places);
    const std::int64_t enqueued = enqueue_stamp_ns<Clock>();
    SlabLinks links{slab_.get()};
    TaskQueue::Chain chain;
    std::uint32_t built = 0;
    std::exception_ptr thrown;
    // The slots a chunk at a time under one take of the slab cache's lock (acquire() locks per
    // slot: the larger part of a batch's per-task cost on the producer; docs/isolation.md).
    constexpr std::uint32_t slot_chunk = 64;
    std::uint32_t slots[slot_chunk];
    std::uint32_t slot_n = 0, slot_next = 0;
    for (; built < places; ++built, ++first) {
        if (slot_next == slot_n) {
            slot_next = 0;
            slot_n = slab_->acquire_many(slots, std::min(slot_chunk, places - built));
            if (slot_n == 0) {
                totals_.refused_other.fetch_add(1, std::memory_order_relaxed);
                why_short = SubmitError{Errc::too_many_tasks, len, queue_.capacity(), {}, {}};
                break;
            }
        }
        const std::uint32_t index = slots[slot_next++];
        if (slot_next + TaskSlab::prefetch_ahead <= slot_n)
            prefetch_record(slab_->at(slots[slot_next + TaskSlab::prefetch_ahead - 1]));
        TaskRecord& r = slab_->at(index);
        r.flags = 0;
        try {
            using Fn = std::decay_t<decltype(*first)>;
            place_callable<Fn>(r, std::move(*first), o.timeout.count() > 0);
        } catch (...) {
            r.refs.store(1, std::memory_order_relaxed);
            slab_->release(index);
            thrown = std::current_exception();
            break;
        }
        fill_record(r, o, enqueued, !std::is_same_v<T, TaskId>);
        r.state.store(static_cast<std::uint32_t>(TaskState::queued), std::memory_order_release);
        chain.push_back(links, index);
        const TaskId id = TaskId::make(index, r.generation.load(std::memory_order_relaxed));
        if constexpr (std::is_same_v<T, TaskId>)
            out.admitted.push_back(id);
        else
            out.admitted.push_back(T(slab_, &r, id));
    }
    // Slots taken and not filled (a callable's move threw) go back free.
    for (; slot_next < slot_n; ++slot_next) {
        slab_->at(slots[slot_next]).refs.store(1, std::memory_order_relaxed);
        slab_->release(slots[slot_next]);
    }
    if (built < places) {
        queue_.unreserve(places - built, o.priority);
        give_back_group(places - built);
    }
    const bool first_push = queue_.append_reserved(chain, o.priority);
    if (built != 0) {
        if (first_push || !telemetry_.tasks_are_tiny())
            notifier_.notify_one();
        if (built > 1 && !telemetry_.tasks_are_tiny())
            notifier_.notify_all();
    }
    if (thrown)
        std::rethrow_exception(thrown);
    if (built < n)
        out.error = std::move(why_short);
    return out;
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
