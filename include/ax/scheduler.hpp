// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include "adaptive_controller.hpp"
#include "clock.hpp"
#include "config.hpp"
#include "controller.hpp"
#include "dead_letters.hpp"
#include "detail/admission.hpp"
#include "detail/callable.hpp"
#include "detail/conclude.hpp"
#include "detail/core.hpp"
#include "detail/hook_caller.hpp"
#include "detail/introspect.hpp"
#include "detail/runner.hpp"
#include "detail/suspend.hpp"
#include "detail/tick.hpp"
#include "detail/watchdog.hpp"
#include "errors.hpp"
#include "groups.hpp"
#include "hooks.hpp"
#include "metrics.hpp"
#include "policies.hpp"
#include "shutdown.hpp"
#include "task.hpp"
#include "task_context.hpp"
#include "task_handle.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <memory>
#include <optional>
#include <ranges>
#include <stop_token>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

/// The in-process scheduler. This header composes: the core's components live in detail/ (one
/// owner per lock, see docs/design.md), its services are filed by role (detail/admission.hpp,
/// runner.hpp, conclude.hpp, watchdog.hpp, tick.hpp), and what is defined here is what needs all
/// of them at once: the reads that assemble a snapshot, cancel_all and shutdown. Then the
/// public Scheduler facade.
namespace ax {
namespace detail {

template <SchedulerClock Clock, ControllerPolicy Controller>
MetricsSnapshot SchedulerCore<Clock, Controller>::metrics() {
    MetricsSnapshot m;
    for (std::size_t p = 0; p < priority_count; ++p)
        m.queue_length[p] = queue_.length(static_cast<Priority>(p));
    m.queue_length_total = m.queue_length[0] + m.queue_length[1] + m.queue_length[2];
    m.queue_capacity = queue_.capacity();
    m.waiting_retry = totals_.waiting_retry.load(std::memory_order_acquire);
    m.scheduled = totals_.scheduled.load(std::memory_order_acquire);
    m.workers = pool_.stats();
    const auto qc = queue_.counters();
    m.totals.submitted = qc.incoming + totals_.admitted_other.load(std::memory_order_relaxed);
    m.totals.subtasks = totals_.subtasks.load(std::memory_order_relaxed);
    m.totals.takeovers = totals_.takeovers.load(std::memory_order_relaxed);
    m.totals.orphans_refused = totals_.orphans_refused.load(std::memory_order_relaxed);
    m.totals.destructor_exceptions = destructor_exceptions().load(std::memory_order_relaxed);
    m.subtasks_queued = dispatcher_.children_queued();
    m.pending_joins = joins_.pending.load(std::memory_order_acquire);
    m.totals.rejected = qc.rejected;
    m.totals.refused_other = totals_.refused_other.load(std::memory_order_relaxed);
    std::int64_t busy_ns = 0;
    pool_.sum_counters(m.totals.attempts_succeeded, m.totals.attempts_failed, busy_ns);
    if (cfg_.latency_histograms)
        pool_.sum_latency(m.queue_wait, m.run_time);
    m.totals.succeeded =
        totals_.succeeded.load(std::memory_order_relaxed) + pool_.sum_tasks_succeeded();
    m.totals.dead_lettered = totals_.dead_lettered.load(std::memory_order_relaxed);
    m.totals.cancelled = totals_.cancelled.load(std::memory_order_relaxed);
    m.totals.retries = totals_.retries.load(std::memory_order_relaxed);
    m.totals.timeouts = totals_.timeouts.load(std::memory_order_relaxed);
    m.totals.hook_failures = hooks_.failures();
    m.totals.dead_letters_evicted = dead_letters_.evicted();
    m.dead_letters = static_cast<std::uint32_t>(dead_letters_.size());
    m.totals.starvation_picks = dispatcher_.starvation_picks();
    {
        std::array<TaskId, priority_count> oldest{};
        std::array<std::int64_t, priority_count> at{};
        dispatcher_.oldest_queued(oldest, at);
        const std::int64_t now = now_ns();
        for (std::size_t p = 0; p < priority_count; ++p)
            if (oldest[p].valid())
                m.oldest_queued_age[p] =
                    std::chrono::nanoseconds(std::max<std::int64_t>(0, now - at[p]));
    }
    telemetry_.fill(m, now_ns());
    controller_state_.fill(m.controller);
    const std::vector<std::string> names = registry_.names();
    for (std::size_t g = 1; g <= names.size(); ++g) {
        const GroupId id{static_cast<std::uint16_t>(g)};
        m.groups.push_back(GroupSnapshot{id, names[g - 1], group_stats(id)});
    }
    return m;
}

template <SchedulerClock Clock, ControllerPolicy Controller>
std::vector<DeadLetter<Clock>> SchedulerCore<Clock, Controller>::dead_letters() {
    std::vector<DeadLetter<Clock>> out;
    for (const TaskId id : dead_letters_.ids()) {
        TaskRecord* r = slab_->try_pin(id);
        if (r == nullptr)
            continue;
        DeadLetter<Clock> d;
        d.id = id;
        d.priority = r->priority;
        d.group = GroupId{r->group};
        d.enqueued = to_time_point<Clock>(r->enqueue_ns.load(std::memory_order_relaxed));
        d.finished = to_time_point<Clock>(r->finish_ns.load(std::memory_order_relaxed));
        r->lock_extras();
        if (r->extras != nullptr) {
            d.name = r->extras->name;
            for (const auto& f : r->extras->failures)
                d.attempts.push_back(AttemptError<Clock>{f.attempt, f.type, f.message,
                                                         to_time_point<Clock>(f.started_ns),
                                                         to_time_point<Clock>(f.ended_ns)});
        }
        r->unlock_extras();
        slab_->release(id.index());
        out.push_back(std::move(d));
    }
    return out;
}

/// The list's reference goes, the task is forgotten (query answers nullopt) and its callable,
/// kept only for a replay, is destroyed now rather than when history lets the record go. The
/// list's pin keeps the record alive while its content is destroyed; a dead-lettered record is
/// terminal, so nobody else touches its content (a handle reads only the final error).
template <SchedulerClock Clock, ControllerPolicy Controller>
bool SchedulerCore<Clock, Controller>::discard_dead_letter(TaskId id) {
    if (!dead_letters_.remove(id))
        return false;
    TaskRecord& r = slab_->at(id.index());
    r.state.fetch_or(forgotten_bit, std::memory_order_acq_rel);
    r.destroy_content();
    slab_->release(id.index());
    return true;
}

/// Cancels everything queued or waiting for a retry, and asks running tasks to stop: it gathers
/// the victims of the dispatcher, the timers, the join table and the pool, one lock at a time.
template <SchedulerClock Clock, ControllerPolicy Controller>
void SchedulerCore<Clock, Controller>::cancel_all() {
    std::vector<std::uint32_t> victims;
    dispatcher_.drain_all(victims);
    timers_.take_all(victims);
    for (const auto i : victims) {
        cancel_pinned(slab_->at(i), i);
        retire(i, nullptr);
    }
    // Joins still waiting: cancelled now, retired by their last dependency's ending.
    std::vector<std::uint32_t> joins;
    joins_.waiting(joins);
    for (const auto j : joins)
        cancel_pinned(slab_->at(j), j);
    // seq_cst, after start_discarding(): pairs with Attempt::publish (see
    // Lifecycle::discarding_ordered) so a task just started is either seen here or cancels itself.
    const auto stop_running = [&](Worker& w) {
        const auto c = w.current.load(std::memory_order_seq_cst);
        if (c == no_attempt)
            return;
        const auto i = static_cast<std::uint32_t>(c);
        TaskRecord& r = slab_->at(i);
        cancel(TaskId::make(i, r.generation.load(std::memory_order_relaxed)));
    };
    pool_.for_each(stop_running);
    pool_.for_each_guest(stop_running); // tasks producers run while they wait for room
}

template <SchedulerClock Clock, ControllerPolicy Controller>
bool SchedulerCore<Clock, Controller>::shutdown(ShutdownMode mode,
                                                std::optional<std::chrono::nanoseconds> timeout) {
    // A deadline past a year is "no deadline" (and now() + nanoseconds::max() overflows).
    const bool bounded = timeout.has_value() && *timeout <= std::chrono::hours(24 * 365);
    const std::chrono::nanoseconds limit = bounded ? *timeout : std::chrono::nanoseconds(0);
    lifecycle_.stop_accepting();
    queue_.close();
    if (mode == ShutdownMode::cancel) {
        lifecycle_.start_discarding();
        cancel_all();
    }
    notifier_.notify_all();
    if (current_worker_owner == this)
        return false; // cannot wait for ourselves
    if (!lifecycle_.wait_drained(bounded, limit))
        return false;
    stop_threads();
    return true;
}

/// After a bounded shutdown failed: stop the tick, join idle workers, report and detach the
/// ones stuck in a body (they keep this core alive until they return).
template <SchedulerClock Clock, ControllerPolicy Controller>
void SchedulerCore<Clock, Controller>::abandon() {
    if (!stop_ticker())
        return;
    pool_.abandon_busy([&](Worker& w) {
        const auto i = static_cast<std::uint32_t>(w.current.load(std::memory_order_acquire));
        TaskRecord& r = slab_->at(i);
        std::string name;
        TaskEvent e = HookCaller::foreign_event(
            r, TaskId::make(i, r.generation.load(std::memory_order_acquire)), name);
        e.error = "abandoned at shutdown: the body ignored its stop token";
        if (hooks_.hooks().on_orphan) {
            hooks_.call(hooks_.hooks().on_orphan, e);
        } else {
            std::fprintf(stderr, "ax: abandoning task %s (%s) at shutdown: %s\n",
                         e.id.to_string().c_str(), name.c_str(), e.error.data());
        }
    });
}

} // namespace detail

/// The in-process scheduler: submit / cancel / query plus metrics and shutdown.
///
/// Clock is the time source (std::chrono::steady_clock; ax::ManualClock in tests); Controller
/// sizes the worker pool (ax::AdaptiveController; the seed's rule is ax::LittleController:
/// `ax::Scheduler<std::chrono::steady_clock, ax::LittleController>`). policies.hpp states both
/// contracts as concepts. `ax::Scheduler<> sched;` or `ax::Scheduler sched{cfg};` use the defaults.
///
/// Thread-safety: every member function may be called from any thread, including from inside a
/// running task.
template <SchedulerClock Clock = std::chrono::steady_clock,
          ControllerPolicy Controller = AdaptiveController>
class Scheduler {
    using Core = detail::SchedulerCore<Clock, Controller>;

  public:
    using clock = Clock;
    /// What query() returns.
    using Info = TaskInfo<Clock>;

    /// Validates `cfg` (std::invalid_argument naming the field on error) and starts min_workers.
    explicit Scheduler(const Config& cfg = Config{}, Hooks hooks = {})
        : core_(std::make_shared<Core>(cfg, std::move(hooks))) {
        core_->start();
    }
    Scheduler(const Scheduler&) = delete;
    Scheduler& operator=(const Scheduler&) = delete;

    /// Drains, boundedly: refuses new work and waits up to Config::shutdown_grace for every
    /// queued and retrying task to finish; then cancels what is left and waits as long again for
    /// running bodies to stop; a body still running after that is reported (Hooks::on_orphan, or
    /// stderr) and its thread detached. It never hangs on a body that ignores its stop token.
    ~Scheduler() {
        const auto grace =
            std::chrono::duration_cast<std::chrono::nanoseconds>(core_->config().shutdown_grace);
        if (core_->shutdown(ShutdownMode::drain, grace))
            return;
        if (core_->shutdown(ShutdownMode::cancel, grace))
            return;
        core_->abandon();
    }

    /// Queues `f` (callable as f(ax::TaskContext&) or f()) and returns a handle to its result, or
    /// a SubmitError: queue_full / busy with retry_after, shutting_down, invalid_options. Never
    /// blocks; a task is either admitted (and will reach exactly one terminal state) or refused.
    template <class F>
    auto submit(F&& f, const SubmitOptions& options = {})
        -> Expected<TaskHandle<typename detail::CallableTraits<std::decay_t<F>>::result>> {
        using R = typename detail::CallableTraits<std::decay_t<F>>::result;
        static_assert(!std::is_reference_v<R>, "ax: a task may not return a reference");
        return core_->template submit<F, R>(std::forward<F>(f), options);
    }

    /// Like submit, without a handle (fire and forget): slightly cheaper, and the result is
    /// discarded. The ID still works with cancel() and query().
    template <class F> Expected<TaskId> post(F&& f, const SubmitOptions& options = {}) {
        return core_->post(std::forward<F>(f), options);
    }

    /// Admits a batch of callables (a sized range: a vector, an array, a span) with the same
    /// options through one admission: the queue's lock is taken twice per batch, not once per
    /// task, and one worker is woken. `policy` says what happens when only part of it fits:
    /// BatchPolicy::partial admits the longest front that fits and refuses the rest,
    /// all_or_nothing admits all or none. The result lists the admitted front's IDs in order
    /// and, if anything was refused, why (the same errors as post, once for the batch). Only
    /// the admitted callables are moved from; the rest stay in `fs` for the caller to resubmit.
    /// A batch larger than queue_capacity can never be admitted whole (partial admits a
    /// part). Never blocks.
    template <class Range>
    BatchResult<TaskId> post_many(Range&& fs, const SubmitOptions& options = {},
                                  BatchPolicy policy = BatchPolicy::partial) {
        return core_->template admit_many<TaskId, void>(std::ranges::begin(fs),
                                                        std::ranges::size(fs), options, policy);
    }

    /// post_many() with a handle per admitted task, as submit() gives.
    template <class Range>
    auto submit_many(Range&& fs, const SubmitOptions& options = {},
                     BatchPolicy policy = BatchPolicy::partial) {
        using Fn = std::decay_t<std::ranges::range_reference_t<Range>>;
        using R = typename detail::CallableTraits<Fn>::result;
        static_assert(!std::is_reference_v<R>, "ax: a task may not return a reference");
        return core_->template admit_many<TaskHandle<R>, R>(std::ranges::begin(fs),
                                                            std::ranges::size(fs), options, policy);
    }

    /// submit() that waits for room instead of answering queue_full / busy: the caller parks
    /// (no sleep, no spin: a futex) and is woken by the first dequeue that brings the queue down
    /// to half its soft limit, then tries again. Gives up with the last backpressure error once
    /// `deadline` passes, or when `stop` is requested; answers shutting_down when shutdown
    /// begins meanwhile (parked producers are woken). Every other refusal (invalid_options,
    /// breaker_open, group_full, too_many_tasks) is answered at once, as submit does. `f` is
    /// moved from only once the task is admitted. Not from inside a task of this scheduler's
    /// pool if that task's completion is what would make room (it could wait for itself).
    template <class F>
    auto submit_wait(F&& f, const SubmitOptions& options,
                     std::chrono::steady_clock::time_point deadline, std::stop_token stop = {})
        -> Expected<TaskHandle<typename detail::CallableTraits<std::decay_t<F>>::result>> {
        using R = typename detail::CallableTraits<std::decay_t<F>>::result;
        static_assert(!std::is_reference_v<R>, "ax: a task may not return a reference");
        const detail::RoomWait w{true, deadline, std::move(stop), options.help_while_waiting};
        return core_->template submit<F, R>(std::forward<F>(f), options, &w);
    }
    /// submit_wait() without a deadline: waits until admitted, `stop` is requested, or shutdown.
    template <class F>
    auto submit_wait(F&& f, const SubmitOptions& options = {}, std::stop_token stop = {})
        -> Expected<TaskHandle<typename detail::CallableTraits<std::decay_t<F>>::result>> {
        using R = typename detail::CallableTraits<std::decay_t<F>>::result;
        static_assert(!std::is_reference_v<R>, "ax: a task may not return a reference");
        const detail::RoomWait w{false, {}, std::move(stop), options.help_while_waiting};
        return core_->template submit<F, R>(std::forward<F>(f), options, &w);
    }
    /// post() that waits for room, as submit_wait() does.
    template <class F>
    Expected<TaskId> post_wait(F&& f, const SubmitOptions& options,
                               std::chrono::steady_clock::time_point deadline,
                               std::stop_token stop = {}) {
        const detail::RoomWait w{true, deadline, std::move(stop), options.help_while_waiting};
        return core_->post(std::forward<F>(f), options, &w);
    }
    /// post_wait() without a deadline.
    template <class F>
    Expected<TaskId> post_wait(F&& f, const SubmitOptions& options = {},
                               std::stop_token stop = {}) {
        const detail::RoomWait w{false, {}, std::move(stop), options.help_while_waiting};
        return core_->post(std::forward<F>(f), options, &w);
    }

    /// Submits `f` to run once every task in `handles` has ended (succeeded, dead-lettered or
    /// cancelled), without any thread blocking meanwhile: a non-blocking join. f is called as
    /// f(std::vector<ax::TaskHandle<R>>&) with every handle ready (get() does not block) and its
    /// result is the returned handle's. The join is `pending` until then; cancel() works on it.
    /// Admission is checked now, like submit; on a refusal the handles are released (their tasks
    /// run on). A retry of the join sees the same handles, minus values already taken with get().
    template <class R, class F>
    auto when_all(std::vector<TaskHandle<R>> handles, F&& f, const SubmitOptions& options = {}) {
        return core_->when_all(std::move(handles), std::forward<F>(f), options);
    }

    /// For a coroutine task (ax::Task, include <ax/coro.hpp>) of this scheduler:
    /// `co_await sched.schedule(options)` moves the coroutine back into the queue with
    /// `options.priority` and `options.group` (its other fields are ignored: the task keeps its
    /// name, timeout and retries) and resumes it on the worker that takes it. The admission a
    /// submit would meet applies: a refusal (backpressure, invalid options, shutdown(cancel))
    /// throws ax::SubmitRefused carrying the SubmitError, and the coroutine stays where it was.
    [[nodiscard]] detail::ScheduleRequest<false> schedule(const SubmitOptions& options = {}) {
        return detail::ScheduleRequest<false>{core_.get(), options};
    }
    /// Like schedule(), but `co_await sched.try_schedule(options)` reports a refusal as an
    /// Expected<TaskId> holding the SubmitError instead of throwing (the value: the task's ID).
    [[nodiscard]] detail::ScheduleRequest<true> try_schedule(const SubmitOptions& options = {}) {
        return detail::ScheduleRequest<true>{core_.get(), options};
    }

    /// Cancels a queued or retry-waiting task at once (true); asks a running one to stop and ends
    /// it as cancelled when its body returns (true); false for finished or unknown tasks.
    bool cancel(TaskId id) { return core_->cancel(id); }

    /// State, priority, attempts, times and last error of a task; nullopt for an ID never
    /// issued, once the task has left the bounded history (Config::history_capacity), and once
    /// its dead letter was discarded, even while a handle to it is still held.
    std::optional<Info> query(TaskId id) { return core_->query(id); }

    /// Queue, workers, the metrics window and totals since start.
    MetricsSnapshot metrics() { return core_->metrics(); }

    /// Up to `limit` tasks now in `state` (ID, name, priority, age, attempts; limit 0: none),
    /// gathered at call time from the store that owns that state, under its own lock, so
    /// nothing is added to the hot paths:
    /// - queued: the subtask lane, the high, normal and low lanes front to back, group parking
    ///   lists, then the not yet dispatched arrivals (tasks a worker has already reserved, about
    ///   to start, are not seen);
    /// - running: the attempts the workers run now (a task whose worker is helping inside its
    ///   wait is listed as the nested task the worker runs);
    /// - waiting_retry and scheduled: the retry timers; pending: the join table;
    /// - succeeded, dead_lettered, cancelled: the bounded history (Config::history_capacity),
    ///   newest first; a task that left it (query() answers nullopt) is not listed. Cancelled
    ///   tasks not yet taken from where they waited (a lane, the retry timers, the join table)
    ///   follow.
    /// A task that changes state during the call may be missing. Cost: one pass over at most
    /// that store's entries (for terminal states up to history_capacity, under the history
    /// lock). Throws std::invalid_argument for a value that is not a TaskState.
    std::vector<TaskSummary> list_tasks(TaskState state, std::size_t limit) {
        return core_->list_tasks(state, limit);
    }

    /// For each priority lane (index = Priority), the oldest queued task and its age, or
    /// nullopt when the lane is empty (subtasks are in a lane of their own and not included).
    /// What MetricsSnapshot::oldest_queued_age reports, with the task named. Cheap: the head of
    /// each lane, of each group's parking list and of the not yet dispatched arrivals, each walk
    /// capped (detail::Dispatcher::oldest_scan_limit entries) so the dispatch lock is held
    /// briefly; a lane whose queued tasks all sit deeper than that behind other lanes' arrivals
    /// reads as empty until the dispatcher sorts them in.
    std::array<std::optional<TaskSummary>, priority_count> oldest_waiting() {
        return core_->oldest_waiting();
    }

    /// Snapshot of the dead-letter list, oldest first: each task with every attempt's error.
    std::vector<DeadLetter<Clock>> dead_letters() { return core_->dead_letters(); }

    /// Drops a dead letter: its captures are destroyed at once and query(id) answers nullopt
    /// from then on (a handle still held keeps its state and rethrows its error); false if `id`
    /// is not listed.
    bool discard_dead_letter(TaskId id) { return core_->discard_dead_letter(id); }

    /// Resubmits a dead letter as a new task (new ID, fresh attempt series, same options),
    /// moving its callable over; the old ID stays dead_lettered. Refused like a submit under
    /// backpressure (the entry then stays listed), or invalid_options if `id` is not listed.
    Expected<TaskId> replay_dead_letter(TaskId id) { return core_->replay_dead_letter(id); }

    /// The ID of concurrency group `name`, registering it on first use.
    GroupId group(std::string_view name) { return core_->group(name); }
    /// Limits how many tasks of group `g` run at once (0: no limit); takes effect at once and may
    /// change at any time. Tasks over the limit wait queued without holding a worker, and never
    /// hold up other groups. Throws std::invalid_argument for an unregistered group.
    void set_group_limit(GroupId g, std::uint32_t limit) { core_->set_group_limit(g, limit); }
    /// Limit, running and waiting tasks of a group, and its breaker state.
    GroupStats group_stats(GroupId g) { return core_->group_stats(g); }
    /// Turns group `g`'s circuit breaker on (with `options`) or off (nullopt). When the group's
    /// failure ratio over the current metrics window reaches options.failure_ratio (with at least
    /// min_attempts attempts) the breaker opens: the group's tasks stay queued — not failed, not
    /// retried into the storm — for the cool-down; then `probes` tasks run (half-open); a success
    /// closes it, a failure re-opens it. Throws std::invalid_argument for an unregistered group
    /// or invalid options.
    void set_group_breaker(GroupId g, std::optional<BreakerOptions> options) {
        core_->set_group_breaker(g, options);
    }
    /// The name a group was registered with ("" for none).
    std::string group_name(GroupId g) { return core_->group_name(g); }

    /// Stops accepting work and ends it per `mode`; returns true once every task is terminal and
    /// the threads are joined, false if `timeout` passed first (or when called from inside a task,
    /// which cannot wait for itself). Later submits get Errc::shutting_down.
    bool shutdown(ShutdownMode mode = ShutdownMode::drain,
                  std::optional<std::chrono::nanoseconds> timeout = std::nullopt) {
        return core_->shutdown(mode, timeout);
    }

    /// The validated configuration.
    [[nodiscard]] const Config& config() const noexcept { return core_->config(); }

  private:
    std::shared_ptr<Core> core_;
};

} // namespace ax
