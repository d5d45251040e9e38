// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include "clock.hpp"
#include "config.hpp"
#include "controller.hpp"
#include "dead_letters.hpp"
#include "errors.hpp"
#include "hooks.hpp"
#include "metrics.hpp"
#include "policies.hpp"
#include "priority_ring.hpp"
#include "queue.hpp"
#include "retry.hpp"
#include "detail/callable.hpp"
#include "detail/host.hpp"
#include "detail/record.hpp"
#include "detail/slab.hpp"
#include "task.hpp"
#include "task_context.hpp"
#include "task_handle.hpp"
#include "worker_pool.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <typeinfo>
#include <unordered_map>
#include <utility>
#include <vector>

#if __has_include(<cxxabi.h>)
#include <cxxabi.h>
#endif

namespace ax {

/// How shutdown() treats work that has not finished.
enum class ShutdownMode : std::uint8_t {
    drain,  ///< Refuse new submits, finish everything queued and every retry, then stop.
    cancel, ///< Refuse new submits, cancel queued and retry-waiting tasks, ask running ones to
            ///< stop.
};

namespace detail {

/// Readable name of a type from typeid or the ABI (demangled where the C++ runtime can).
inline std::string type_name(const char* mangled) {
    if (mangled == nullptr)
        return "unknown";
#if __has_include(<cxxabi.h>)
    int status = 0;
    char* demangled = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
    if (status == 0 && demangled != nullptr) {
        std::string out(demangled);
        std::free(demangled);
        return out;
    }
#endif
    return mangled;
}

/// Type and text of an exception, for query(), hooks and the dead-letter list.
struct ErrorText {
    std::string type;
    std::string message;
    bool permanent = false;
};

inline ErrorText describe_exception(const std::exception_ptr& e) {
    try {
        std::rethrow_exception(e);
    } catch (const PermanentError& ex) {
        return {type_name(typeid(ex).name()), ex.what(), true};
    } catch (const std::exception& ex) {
        return {type_name(typeid(ex).name()), ex.what(), false};
    } catch (...) {
#if __has_include(<cxxabi.h>)
        const std::type_info* t = abi::__cxa_current_exception_type();
        std::string type = type_name(t != nullptr ? t->name() : nullptr);
#else
        std::string type = "unknown";
#endif
        return {type, "non-standard exception of type " + type, false};
    }
}


/// The scheduler's shared state. Scheduler owns it through a shared_ptr; see docs/design.md for
/// who calls what, and under which lock.
template <SchedulerClock Clock, ControllerPolicy Controller>
class SchedulerCore final : public std::enable_shared_from_this<SchedulerCore<Clock, Controller>>,
                            public TaskHost {
  public:
    static constexpr std::uint32_t none = UINT32_MAX;
    static constexpr std::size_t history_batch = 32;
    static constexpr std::size_t max_groups = 1024;
    static constexpr std::uint32_t swap_period = 16;
    static constexpr std::size_t max_reserve = 8;
    /// Mean duration under which a worker may reserve several tasks at once.
    static constexpr double tiny_task_s = 20e-6;

    /// Per-worker state the pool keeps for the core: finished slots waiting to enter history
    /// (batched so the history lock is taken once per 32 tasks) and the time of the last task end.
    struct WorkerLocal {
        /// Tasks reserved by dispatch_fill, run from `next` to `reserved`.
        std::array<std::uint32_t, max_reserve> batch{};
        std::size_t next = 0;
        std::size_t reserved = 0;
        std::vector<std::uint32_t> finished;
        std::int64_t last_end_ns = 0;
        WorkerLocal() { finished.reserve(history_batch); }
    };
    using Pool = WorkerPool<SchedulerCore>;
    using Worker = typename Pool::Worker;
    /// A running attempt the watchdog looks at: the task, its worker, the claim token.
    struct Overdue {
        TaskId id;
        Worker* worker;
        std::uint64_t token;
    };

    static std::int64_t now_ns() noexcept {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
            .count();
    }
    static typename Clock::time_point to_time_point(std::int64_t ns) {
        return typename Clock::time_point(
            std::chrono::duration_cast<typename Clock::duration>(std::chrono::nanoseconds(ns)));
    }

    SchedulerCore(const Config& cfg, Hooks hooks)
        : cfg_((cfg.validate(), cfg)), slab_(std::make_shared<TaskSlab>()),
          queue_(cfg.queue_capacity, soft_limit(cfg)),
          lanes_({cfg.weight_high, cfg.weight_normal, cfg.weight_low},
                 std::chrono::duration_cast<std::chrono::nanoseconds>(cfg.max_wait).count()),
          window_(cfg.window_slots()), controller_(cfg), hooks_(std::move(hooks)),
          dead_letters_(cfg.dead_letter_capacity), jitter_(std::random_device{}()),
          pool_(*this, cfg.min_workers, cfg.max_workers, cfg.max_orphans) {
        batch_.reserve(cfg.queue_capacity);
        history_.assign(cfg.history_capacity, 0);
        const auto t0 = now_ns();
        window_.start(t0);
        last_control_ns_ = t0;
    }

    SchedulerCore(const SchedulerCore&) = delete;
    SchedulerCore& operator=(const SchedulerCore&) = delete;

    ~SchedulerCore() {
        stop_threads();
        // Give back what history and the dead-letter list hold, so callables are destroyed now:
        // one that captured a TaskHandle (a join's) would otherwise keep the slab alive forever.
        for (const TaskId id : dead_letters_.ids())
            if (dead_letters_.remove(id))
                slab_->release(id.index());
        std::lock_guard lock(history_mutex_);
        for (std::size_t k = 0; k < history_size_; ++k)
            slab_->release(history_[(history_head_ + k) % history_.size()]);
        history_size_ = 0;
    }

    void start() {
        pool_.set_keepalive(this->weak_from_this());
        pool_.start();
        ticker_ = std::jthread([this](std::stop_token st) { tick_loop(st); });
    }

    // ---- submit -------------------------------------------------------------------------------

    template <class F, class R> Expected<TaskHandle<R>> submit(F&& f, const SubmitOptions& o) {
        TaskId id;
        if (auto err = admit_new<F>(std::forward<F>(f), o, id, /*with_handle=*/true))
            return std::move(*err);
        return TaskHandle<R>(slab_, &slab_->at(id.index()), id);
    }

    template <class R, class F>
    auto when_all(std::vector<TaskHandle<R>> handles, F&& f, const SubmitOptions& o) {
        return submit_join(*this, /*child=*/false, std::move(handles), std::forward<F>(f), o);
    }

    // ---- TaskHost (task contexts and helping waits) ---------------------------------------------

    std::optional<SubmitError> admit_erased(const SubmitOptions& o, TaskId& id, bool with_handle,
                                            bool child, const TaskId* deps, std::size_t ndeps,
                                            Placer place) override {
        return admit(
            o, id, with_handle, place, [](TaskRecord&) {}, child, deps, ndeps);
    }

    const std::shared_ptr<TaskSlab>& task_slab() noexcept override { return slab_; }

    bool help_wait(TaskRecord& r, std::uint32_t index,
                   const std::chrono::steady_clock::time_point* deadline) override {
        auto* w = static_cast<Worker*>(current_worker_slot);
        auto backoff = std::chrono::microseconds(50);
        for (;;) {
            if (is_terminal(r.load_state()))
                return true;
            if (deadline != nullptr && std::chrono::steady_clock::now() >= *deadline)
                return false;
            if (w != nullptr && help_one(*w)) {
                backoff = std::chrono::microseconds(50);
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
            backoff =
                std::min<std::chrono::microseconds>(backoff * 2, std::chrono::microseconds(2000));
        }
    }

    template <class F> Expected<TaskId> post(F&& f, const SubmitOptions& o) {
        TaskId id;
        if (auto err = admit_new<F>(std::forward<F>(f), o, id, /*with_handle=*/false))
            return std::move(*err);
        return id;
    }

    // ---- cancel / query -----------------------------------------------------------------------

    bool cancel(TaskId id) {
        TaskRecord* r = slab_->try_pin(id);
        if (r == nullptr)
            return false;
        const bool done = cancel_pinned(*r, id.index());
        slab_->release(id.index());
        return done;
    }

    std::optional<TaskInfo<Clock>> query(TaskId id) {
        TaskRecord* r = slab_->try_pin(id);
        if (r == nullptr)
            return std::nullopt;
        TaskInfo<Clock> info;
        const auto s = r->state.load(std::memory_order_acquire);
        info.id = id;
        info.state = static_cast<TaskState>(s & state_mask);
        info.cancel_requested = (s & cancel_requested_bit) != 0;
        info.timed_out = (s & timed_out_bit) != 0;
        info.timeout = std::chrono::milliseconds(r->timeout_ms);
        info.priority = r->priority;
        info.attempts = r->attempts.load(std::memory_order_relaxed);
        info.max_retries = r->max_retries;
        info.group = GroupId{r->group};
        info.enqueued = to_time_point(r->enqueue_ns.load(std::memory_order_relaxed));
        info.started = to_time_point(r->start_ns.load(std::memory_order_relaxed));
        info.finished = to_time_point(r->finish_ns.load(std::memory_order_relaxed));
        if (info.state == TaskState::waiting_retry)
            info.retry_due = to_time_point(r->mark_ns.load(std::memory_order_relaxed));
        r->lock_extras();
        if (r->extras != nullptr) {
            info.name = r->extras->name;
            info.last_error = r->extras->last_error;
            info.last_error_type = r->extras->last_error_type;
        }
        r->unlock_extras();
        slab_->release(id.index());
        return info;
    }

    // ---- metrics ------------------------------------------------------------------------------

    MetricsSnapshot metrics() {
        MetricsSnapshot m;
        for (std::size_t p = 0; p < priority_count; ++p)
            m.queue_length[p] = queue_.length(static_cast<Priority>(p));
        m.queue_length_total = m.queue_length[0] + m.queue_length[1] + m.queue_length[2];
        m.queue_capacity = queue_.capacity();
        m.waiting_retry = waiting_retry_.load(std::memory_order_acquire);
        m.workers = pool_.stats();
        const auto qc = queue_.counters();
        m.totals.submitted = qc.incoming + admitted_other_.load(std::memory_order_relaxed);
        m.totals.subtasks = subtasks_total_.load(std::memory_order_relaxed);
        m.totals.takeovers = takeovers_.load(std::memory_order_relaxed);
        m.totals.orphans_refused = orphans_refused_.load(std::memory_order_relaxed);
        m.totals.destructor_exceptions = destructor_exceptions().load(std::memory_order_relaxed);
        m.subtasks_queued = children_queued_.load(std::memory_order_acquire);
        m.pending_joins = pending_joins_.load(std::memory_order_acquire);
        m.totals.rejected = qc.rejected;
        m.totals.refused_other = refused_other_.load(std::memory_order_relaxed);
        std::int64_t busy_ns = 0;
        pool_.sum_counters(m.totals.attempts_succeeded, m.totals.attempts_failed, busy_ns);
        m.totals.succeeded = succeeded_.load(std::memory_order_relaxed);
        m.totals.dead_lettered = dead_lettered_.load(std::memory_order_relaxed);
        m.totals.cancelled = cancelled_.load(std::memory_order_relaxed);
        m.totals.retries = retries_.load(std::memory_order_relaxed);
        m.totals.timeouts = timeouts_.load(std::memory_order_relaxed);
        m.totals.hook_failures = hook_failures_.load(std::memory_order_relaxed);
        m.totals.dead_letters_evicted = dead_letters_.evicted();
        m.dead_letters = static_cast<std::uint32_t>(dead_letters_.size());
        {
            std::lock_guard lock(dispatch_mutex_);
            m.totals.starvation_picks = lanes_.starvation_picks();
        }
        const auto now = now_ns();
        std::lock_guard lock(metrics_mutex_);
        m.slots = window_.ordered();
        m.drain_rate = window_.drain_rate(now);
        m.incoming_rate = window_.incoming_rate(now);
        const auto sum = window_.sum();
        m.average_duration = sum.average_duration();
        m.cpu_utilization = cpu_util_pub_.load(std::memory_order_relaxed);
        std::vector<std::string> names;
        {
            std::lock_guard glock(groups_mutex_);
            names = group_names_;
        }
        for (std::size_t g = 1; g <= names.size(); ++g) {
            const GroupId id{static_cast<std::uint16_t>(g)};
            m.groups.push_back(GroupSnapshot{id, names[g - 1], group_stats(id)});
        }
        return m;
    }

    // ---- dead letters -------------------------------------------------------------------------

    std::vector<DeadLetter<Clock>> dead_letters() {
        std::vector<DeadLetter<Clock>> out;
        for (const TaskId id : dead_letters_.ids()) {
            TaskRecord* r = slab_->try_pin(id);
            if (r == nullptr)
                continue;
            DeadLetter<Clock> d;
            d.id = id;
            d.priority = r->priority;
            d.group = GroupId{r->group};
            d.enqueued = to_time_point(r->enqueue_ns.load(std::memory_order_relaxed));
            d.finished = to_time_point(r->finish_ns.load(std::memory_order_relaxed));
            r->lock_extras();
            if (r->extras != nullptr) {
                d.name = r->extras->name;
                for (const auto& f : r->extras->failures)
                    d.attempts.push_back(AttemptError<Clock>{f.attempt, f.type, f.message,
                                                             to_time_point(f.started_ns),
                                                             to_time_point(f.ended_ns)});
            }
            r->unlock_extras();
            slab_->release(id.index());
            out.push_back(std::move(d));
        }
        return out;
    }

    bool discard_dead_letter(TaskId id) {
        if (!dead_letters_.remove(id))
            return false;
        slab_->release(id.index());
        return true;
    }

    Expected<TaskId> replay_dead_letter(TaskId id) {
        if (!dead_letters_.remove(id)) {
            refused_other_.fetch_add(1, std::memory_order_relaxed);
            return SubmitError{Errc::invalid_options,
                               queue_.length(),
                               queue_.capacity(),
                               {},
                               "task " + id.to_string() + " is not in the dead-letter list"};
        }
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

    // ---- groups -------------------------------------------------------------------------------

    GroupId group(std::string_view name) {
        std::lock_guard lock(groups_mutex_);
        for (std::size_t i = 0; i < group_names_.size(); ++i)
            if (group_names_[i] == name)
                return GroupId{static_cast<std::uint16_t>(i + 1)};
        if (group_names_.size() >= max_groups)
            throw std::length_error("ax: too many groups (at most " + std::to_string(max_groups) +
                                    ")");
        group_names_.emplace_back(name);
        return GroupId{static_cast<std::uint16_t>(group_names_.size())};
    }

    void check_group(GroupId g) {
        std::lock_guard lock(groups_mutex_);
        if (g.value == 0 || g.value > group_names_.size())
            throw std::invalid_argument("ax: group " + std::to_string(g.value) +
                                        " is not registered");
    }

    void set_group_limit(GroupId g, std::uint32_t limit) {
        check_group(g);
        GroupState& gs = groups_[g.value];
        std::uint32_t moved = 0;
        {
            std::lock_guard lock(dispatch_mutex_);
            gs.limit = limit;
            moved = unpark_locked(gs);
        }
        if (moved != 0)
            pool_.notify_all();
    }

    GroupStats group_stats(GroupId g) {
        GroupStats st;
        if (g.value == 0 || g.value > max_groups)
            return st;
        GroupState& gs = groups_[g.value];
        std::lock_guard lock(dispatch_mutex_);
        st.limit = gs.limit;
        st.active = gs.active;
        st.waiting = static_cast<std::uint32_t>(gs.parked.size());
        st.breaker_enabled = gs.breaker_on;
        st.breaker = gs.state;
        st.recent_attempts = gs.attempts;
        st.recent_failures = gs.failures;
        return st;
    }

    void set_group_breaker(GroupId g, std::optional<BreakerOptions> options) {
        check_group(g);
        if (options && (!(options->failure_ratio > 0.0 && options->failure_ratio <= 1.0) ||
                        options->min_attempts == 0 || options->cooldown.count() < 0))
            throw std::invalid_argument(
                "ax: BreakerOptions needs failure_ratio in (0, 1], min_attempts >= 1 and a "
                "non-negative cooldown");
        GroupState& gs = groups_[g.value];
        std::uint32_t moved = 0;
        {
            std::lock_guard lock(dispatch_mutex_);
            gs.breaker_on = options.has_value();
            if (options)
                gs.breaker = *options;
            gs.state = BreakerState::closed;
            gs.attempts = gs.failures = 0;
            gs.since_ns = now_ns();
            moved = unpark_locked(gs);
        }
        if (moved != 0)
            pool_.notify_all();
    }

    std::string group_name(GroupId g) {
        std::lock_guard lock(groups_mutex_);
        if (g.value == 0 || g.value > group_names_.size())
            return {};
        return group_names_[g.value - 1];
    }

    // ---- shutdown -----------------------------------------------------------------------------

    bool shutdown(ShutdownMode mode, std::optional<std::chrono::nanoseconds> timeout) {
        // A deadline past a year is "no deadline" (and now() + nanoseconds::max() overflows).
        const bool bounded = timeout.has_value() && *timeout <= std::chrono::hours(24 * 365);
        const std::chrono::nanoseconds limit = bounded ? *timeout : std::chrono::nanoseconds(0);
        accepting_.store(false, std::memory_order_seq_cst);
        queue_.close();
        if (mode == ShutdownMode::cancel) {
            discard_.store(true, std::memory_order_seq_cst);
            cancel_all();
        }
        pool_.notify_all();
        if (current_worker_owner == this)
            return false; // cannot wait for ourselves
        {
            std::unique_lock lock(drain_mutex_);
            auto drained = [&] { return drained_; };
            if (bounded) {
                if (!drain_cv_.wait_for(lock, limit, drained))
                    return false;
            } else {
                drain_cv_.wait(lock, drained);
            }
        }
        stop_threads();
        return true;
    }

    /// After a bounded shutdown failed: stop the tick, join idle workers, report and detach the
    /// ones stuck in a body (they keep this core alive until they return).
    void abandon() {
        if (!stop_ticker())
            return;
        pool_.abandon_busy([&](Worker& w) {
            const auto i = static_cast<std::uint32_t>(w.current.load(std::memory_order_acquire));
            TaskRecord& r = slab_->at(i);
            std::string name;
            TaskEvent e = foreign_event(
                r, TaskId::make(i, r.generation.load(std::memory_order_acquire)), name);
            e.error = "abandoned at shutdown: the body ignored its stop token";
            if (hooks_.on_orphan) {
                call_hook(hooks_.on_orphan, e);
            } else {
                std::fprintf(stderr, "ax: abandoning task %s (%s) at shutdown: %s\n",
                             e.id.to_string().c_str(), name.c_str(), e.error.data());
            }
        });
    }

    [[nodiscard]] const Config& config() const noexcept { return cfg_; }

    // ---- WorkerPool host interface ------------------------------------------------------------

    /// Whether a dispatch would find something: tasks in the lanes or in the standby buffer.
    /// Tasks a worker has already reserved do not count; that worker is awake and will run them.
    [[nodiscard]] bool has_work() const noexcept {
        return lanes_count_.load(std::memory_order_seq_cst) > 0 ||
               subtask_lane_count_.load(std::memory_order_seq_cst) > 0 || queue_.has_standby();
    }

    bool run_one(Worker& w) {
        if (!w.counters.busy.load(std::memory_order_relaxed))
            w.counters.busy.store(true, std::memory_order_seq_cst);
        WorkerLocal& local = w.local;
        const std::int64_t now = local.last_end_ns != 0 ? local.last_end_ns : now_ns();
        for (;;) {
            if (local.next == local.reserved) {
                local.next = local.reserved = 0;
                dispatch_fill(now, local);
                if (local.reserved == 0) {
                    w.counters.busy.store(false, std::memory_order_seq_cst);
                    local.last_end_ns = 0;
                    flush_history(local.finished);
                    return false;
                }
            }
            const std::uint32_t index = local.batch[local.next++];
            if (try_start(index, local)) {
                // Chain wake: work is left and this worker is about to be busy, so rouse a
                // parked one (a no-op while one spins or a wake is in flight). Without it a burst
                // of long tasks could leave queued work next to sleeping workers.
                // Tiny tasks are exempt: this worker is back at the queue within microseconds,
                // and waking a second one would only crowd the producer's core.
                if (!tasks_are_tiny() && has_work())
                    pool_.notify_work();
                // A task with a timeout may get stuck and its thread orphaned: tasks reserved
                // behind it must not wait for it.
                if (slab_->at(index).timeout_ms != 0)
                    give_back_reserved(local);
                execute(index, w, now);
                return true;
            }
        }
    }

    void on_worker_start(Worker& w) {
        current_host = this;
        current_worker_slot = &w;
    }

    bool holds_reserved(Worker& w) const noexcept { return w.local.next < w.local.reserved; }

    void on_worker_exit(Worker& w) {
        give_back_reserved(w.local);
        flush_history(w.local.finished);
        current_host = nullptr;
        current_worker_slot = nullptr;
    }

  private:
    static std::uint32_t soft_limit(const Config& cfg) {
        const auto s = static_cast<std::uint32_t>(cfg.soft_limit_ratio * cfg.queue_capacity);
        return std::clamp<std::uint32_t>(s, 1, cfg.queue_capacity);
    }

    struct Links {
        TaskSlab* slab;
        [[nodiscard]] std::uint32_t next(std::uint32_t i) const noexcept {
            return slab->at(i).next.load(std::memory_order_relaxed);
        }
        void set_next(std::uint32_t i, std::uint32_t v) const noexcept {
            slab->at(i).next.store(v, std::memory_order_relaxed);
        }
        [[nodiscard]] std::int64_t enqueue_ns(std::uint32_t i) const noexcept {
            return slab->at(i).enqueue_ns.load(std::memory_order_relaxed);
        }
    };

    /// Per-group limit, tasks reserved or running, and tasks parked over the limit; all under
    /// the dispatch lock. Index = GroupId (0 unused).
    struct GroupState {
        std::uint32_t limit = 0;
        std::uint32_t active = 0;
        IntrusiveFifo<Links> parked;
        // Circuit breaker (off unless set_group_breaker enabled it).
        bool breaker_on = false;
        BreakerOptions breaker;
        BreakerState state = BreakerState::closed;
        std::uint32_t attempts = 0;
        std::uint32_t failures = 0;
        std::int64_t since_ns = 0; // window start while closed, opening time while open

        /// How many of the group's tasks may be dispatched at once right now.
        [[nodiscard]] std::uint32_t capacity() const noexcept {
            std::uint32_t cap = limit == 0 ? UINT32_MAX : limit;
            if (breaker_on && state == BreakerState::open)
                return 0;
            if (breaker_on && state == BreakerState::half_open)
                cap = std::min(cap, std::max<std::uint32_t>(breaker.probes, 1));
            return cap;
        }
    };

    std::optional<SubmitError> validate(const SubmitOptions& o, bool child) const {
        auto bad = [&](std::string why) {
            refused_other_.fetch_add(1, std::memory_order_relaxed);
            SubmitError e{
                Errc::invalid_options, queue_.length(), queue_.capacity(), {}, std::move(why)};
            return std::optional<SubmitError>(std::move(e));
        };
        if (static_cast<std::uint8_t>(o.priority) >= priority_count)
            return bad("priority = " + std::to_string(static_cast<int>(o.priority)) +
                       " is not high, normal or low");
        if (o.timeout.count() < 0)
            return bad("timeout = " + std::to_string(o.timeout.count()) + " ms is negative");
        if (o.timeout.count() > std::int64_t{UINT32_MAX})
            return bad("timeout = " + std::to_string(o.timeout.count()) + " ms exceeds 49 days");
        if (o.max_retries < -1 || o.max_retries > 100)
            return bad("max_retries = " + std::to_string(o.max_retries) +
                       " must be -1 (default) or 0..100");
        if (child && o.group.value != 0)
            return bad("group: subtasks take no group (a parent holding its group's slot while "
                       "waiting for children of that group could never finish)");
        if (o.group.value != 0) {
            std::lock_guard lock(groups_mutex_);
            if (o.group.value > group_names_.size())
                return bad("group = " + std::to_string(o.group.value) + " was not registered");
        }
        return std::nullopt;
    }

    SubmitError backpressure_error(Errc code, std::uint32_t len) const {
        const std::uint32_t limit =
            code == Errc::queue_full ? queue_.capacity() : queue_.soft_limit();
        const std::uint32_t excess = len >= limit ? len - limit + 1 : 1;
        return SubmitError{code, len, queue_.capacity(), retry_after(excess), {}};
    }

    /// Time for the workers to finish `excess` more tasks at the measured drain rate. Before any
    /// drain was measured, estimate it from the live workers and the mean duration; with no
    /// duration either, one tick.
    std::chrono::microseconds retry_after(std::uint32_t excess) const {
        double rate = drain_rate_.load(std::memory_order_relaxed);
        if (rate <= 0.0) {
            const double avg_s = avg_duration_s_.load(std::memory_order_relaxed);
            if (avg_s > 0.0)
                rate = std::max<std::uint32_t>(pool_.live(), 1) / avg_s;
        }
        std::chrono::microseconds hint;
        if (rate <= 0.0) {
            hint = std::chrono::duration_cast<std::chrono::microseconds>(cfg_.dispatch_interval);
        } else {
            hint = std::chrono::microseconds(static_cast<std::int64_t>(1e6 * excess / rate));
        }
        return std::clamp(hint, std::chrono::microseconds(1),
                          std::chrono::microseconds(60'000'000));
    }

    template <class F>
    std::optional<SubmitError> admit_new(F&& f, const SubmitOptions& o, TaskId& id,
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
    template <class Place, class Unplace>
    std::optional<SubmitError> admit(const SubmitOptions& o, TaskId& id, bool with_handle,
                                     Place&& place, Unplace&& unplace, bool child = false,
                                     const TaskId* deps = nullptr, std::size_t ndeps = 0) {
        // A running parent's children are part of work already admitted: they are accepted
        // while draining, refused only once shutdown cancels or the threads are gone.
        const bool open = child ? !discard_.load(std::memory_order_acquire) &&
                                      !threads_stopped_.load(std::memory_order_acquire)
                                : accepting_.load(std::memory_order_acquire);
        if (!open) {
            refused_other_.fetch_add(1, std::memory_order_relaxed);
            return SubmitError{Errc::shutting_down, queue_.length(), queue_.capacity(), {}, {}};
        }
        if (auto e = validate(o, child))
            return e;
        if (child) {
            const std::uint32_t waiting = children_queued_.load(std::memory_order_acquire);
            if (waiting >= cfg_.subtask_capacity) {
                queue_.count_rejection();
                return SubmitError{Errc::queue_full,
                                   waiting,
                                   cfg_.subtask_capacity,
                                   retry_after(waiting - cfg_.subtask_capacity + 1),
                                   {}};
            }
        } else {
            // Cheap pre-check so a producer hammering a full queue never builds a record.
            const std::uint32_t seen = queue_.length();
            if (seen >= queue_.capacity() ||
                (seen >= queue_.soft_limit() && o.priority != Priority::high)) {
                queue_.count_rejection();
                return backpressure_error(seen >= queue_.capacity() ? Errc::queue_full : Errc::busy,
                                          seen);
            }
        }
        auto slot = slab_->acquire();
        if (!slot) {
            refused_other_.fetch_add(1, std::memory_order_relaxed);
            return SubmitError{Errc::too_many_tasks, queue_.length(), queue_.capacity(), {}, {}};
        }
        const std::uint32_t index = *slot;
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
        const auto now = now_ns();
        r.enqueue_ns.store(now, std::memory_order_relaxed);
        r.start_ns.store(0, std::memory_order_relaxed);
        r.finish_ns.store(0, std::memory_order_relaxed);
        r.mark_ns.store(0, std::memory_order_relaxed);
        r.refs.store(with_handle ? 2 : 1, std::memory_order_relaxed);
        id = TaskId::make(index, r.generation.load(std::memory_order_relaxed));

        if (child || ndeps != 0) {
            admitted_other_.fetch_add(1, std::memory_order_relaxed);
            if (child)
                subtasks_total_.fetch_add(1, std::memory_order_relaxed);
            if (ndeps != 0) {
                pending_joins_.fetch_add(1, std::memory_order_acq_rel);
                r.state.store(static_cast<std::uint32_t>(TaskState::pending),
                              std::memory_order_release);
                register_join(index, deps, ndeps);
            } else {
                r.state.store(static_cast<std::uint32_t>(TaskState::queued),
                              std::memory_order_release);
                push_child(index);
            }
            return std::nullopt;
        }
        r.state.store(static_cast<std::uint32_t>(TaskState::queued), std::memory_order_release);
        std::uint32_t len = 0;
        const Admission a = queue_.try_push(index, o.priority, len);
        if (a != Admission::admitted) {
            unplace(r);
            r.state.store(0, std::memory_order_relaxed);
            r.refs.store(1, std::memory_order_relaxed);
            slab_->release(index);
            if (a == Admission::closed) {
                refused_other_.fetch_add(1, std::memory_order_relaxed);
                return SubmitError{Errc::shutting_down, len, queue_.capacity(), {}, {}};
            }
            return backpressure_error(a == Admission::full ? Errc::queue_full : Errc::busy, len);
        }
        pool_.notify_work();
        return std::nullopt;
    }

    /// Pops the subtask lane's head (none if empty).
    std::uint32_t pop_subtask() {
        Links links{slab_.get()};
        std::lock_guard lock(dispatch_mutex_);
        if (subtasks_.empty())
            return none;
        const std::uint32_t i = subtasks_.pop_front(links);
        subtask_lane_count_.store(static_cast<std::uint32_t>(subtasks_.size()),
                                  std::memory_order_seq_cst);
        return i;
    }

    /// Returns tasks a worker reserved but will not run now to the front of their lanes (still
    /// `queued` all along), with the group slots they held.
    void give_back_reserved(WorkerLocal& local) {
        if (local.next >= local.reserved) {
            local.next = local.reserved = 0;
            return;
        }
        Links links{slab_.get()};
        {
            std::lock_guard lock(dispatch_mutex_);
            // Back to front, so they keep their order at the head of their lanes.
            for (std::size_t k = local.reserved; k-- > local.next;) {
                const std::uint32_t i = local.batch[k];
                TaskRecord& r = slab_->at(i);
                if (r.group != 0) {
                    --groups_[r.group].active;
                    unpark_locked(groups_[r.group]);
                }
                lanes_.push_front(links, i, r.priority);
            }
            lanes_count_.store(static_cast<std::uint32_t>(lanes_.size()),
                               std::memory_order_seq_cst);
        }
        local.next = local.reserved = 0;
        pool_.notify_all();
    }

    /// Queues a subtask in the subtask lane (first attempt or retry).
    void push_child(std::uint32_t index) {
        children_queued_.fetch_add(1, std::memory_order_acq_rel);
        {
            Links links{slab_.get()};
            std::lock_guard lock(dispatch_mutex_);
            subtasks_.push_back(links, index);
            subtask_lane_count_.store(static_cast<std::uint32_t>(subtasks_.size()),
                                      std::memory_order_seq_cst);
        }
        pool_.notify_work();
    }

    /// A queued task left the queue (started or cancelled): its admission count goes down.
    void dequeued(const TaskRecord& r) noexcept {
        if ((r.flags & record_child) != 0)
            children_queued_.fetch_sub(1, std::memory_order_acq_rel);
        else
            queue_.on_dequeued(r.priority);
    }

    /// Records that join `j` waits for `deps`; a dependency already ended (or forgotten) does
    /// not count. With nothing left to wait for, the join is queued at once.
    void register_join(std::uint32_t j, const TaskId* deps, std::size_t ndeps) {
        std::uint32_t outstanding = 0;
        {
            std::lock_guard lock(joins_mutex_);
            for (std::size_t k = 0; k < ndeps; ++k) {
                TaskRecord* d = slab_->try_pin(deps[k]);
                if (d == nullptr)
                    continue; // left history long ago: it ended
                // Under the join lock, so the dependency's finisher (which takes it after
                // publishing the terminal state) either sees this entry or was seen terminal.
                const auto prev = d->state.fetch_or(has_dependents_bit, std::memory_order_acq_rel);
                if (!is_terminal(static_cast<TaskState>(prev & state_mask))) {
                    dependents_[deps[k].index()].push_back(j);
                    ++outstanding;
                }
                slab_->release(deps[k].index());
            }
            if (outstanding != 0)
                join_waits_[j] = outstanding;
        }
        if (outstanding == 0)
            release_join(j);
    }

    /// A task with dependents ended: count its joins down and queue those now free.
    void release_dependents(std::uint32_t index) {
        std::vector<std::uint32_t> ready;
        {
            std::lock_guard lock(joins_mutex_);
            auto it = dependents_.find(index);
            if (it == dependents_.end())
                return;
            for (const auto j : it->second) {
                auto w = join_waits_.find(j);
                if (--w->second == 0) {
                    join_waits_.erase(w);
                    ready.push_back(j);
                }
            }
            dependents_.erase(it);
        }
        for (const auto j : ready)
            release_join(j);
    }

    /// pending -> queued for a join whose dependencies all ended; a join cancelled meanwhile is
    /// retired here (nothing else holds it).
    void release_join(std::uint32_t j) {
        TaskRecord& r = slab_->at(j);
        auto s = r.state.load(std::memory_order_acquire);
        while ((s & state_mask) == static_cast<std::uint32_t>(TaskState::pending)) {
            if (r.state.compare_exchange_weak(
                    s, (s & ~state_mask) | static_cast<std::uint32_t>(TaskState::queued),
                    std::memory_order_acq_rel)) {
                pending_joins_.fetch_sub(1, std::memory_order_acq_rel);
                r.enqueue_ns.store(now_ns(), std::memory_order_relaxed);
                if ((r.flags & record_child) != 0) {
                    push_child(j);
                } else {
                    queue_.push_unchecked(j, r.priority);
                    pool_.notify_work();
                }
                return;
            }
        }
        retire(j, nullptr);
    }

    /// Helping waits nest (a task run while waiting may wait and help in turn); past this depth
    /// a wait helps only with its own reservations and subtasks, so the stack stays bounded.
    static constexpr std::uint32_t max_help_depth = 16;

    /// Runs one task nested in a helping wait on this worker: first one this worker reserved
    /// before the waiting task started (nobody else will run those, and the awaited task may be
    /// among them), else a subtask from the lane, else (not too deeply nested) the next queued
    /// task in ring order, which may be the awaited one. False if there was none.
    bool help_one(Worker& w) {
        WorkerLocal& local = w.local;
        std::uint32_t i = none;
        if (local.next < local.reserved)
            i = local.batch[local.next++];
        if (i == none && subtask_lane_count_.load(std::memory_order_acquire) != 0)
            i = pop_subtask();
        if (i == none && help_depth < max_help_depth && has_work()) {
            local.next = local.reserved = 0;
            dispatch_fill(now_ns(), local);
            if (local.reserved != 0)
                i = local.batch[local.next++];
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

    /// Reserves the next tasks in ring order into the worker's batch: one normally, up to
    /// max_reserve when tasks are known to be tiny and the lanes are long, so a stream of
    /// microsecond tasks takes the dispatch lock once per several tasks. Reserved tasks stay
    /// `queued` (cancel and query see the truth) until try_start.
    void dispatch_fill(std::int64_t now, WorkerLocal& local) {
        Links links{slab_.get()};
        std::lock_guard lock(dispatch_mutex_);
        // Swap when the lanes run dry, else every swap_period pops: a new high-priority task
        // waits at most that many dispatches, and a steady producer does not bounce the queue
        // lock's cache line with the dispatcher on every task.
        if (lanes_.size() == 0 || ++pops_since_swap_ >= swap_period)
            swap_into_lanes_locked(links);
        // Subtasks first, one at a time: a reserved child would wait behind its worker's current
        // task, and a parent waiting for it there could wait on a worker waiting on it.
        if (!subtasks_.empty()) {
            local.batch[local.reserved++] = subtasks_.pop_front(links);
            subtask_lane_count_.store(static_cast<std::uint32_t>(subtasks_.size()),
                                      std::memory_order_seq_cst);
            lanes_count_.store(static_cast<std::uint32_t>(lanes_.size()),
                               std::memory_order_seq_cst);
            return;
        }
        std::size_t want = 1;
        if (tasks_are_tiny()) {
            const std::size_t share =
                lanes_.size() / (2 * std::max<std::uint32_t>(pool_.live(), 1));
            want = std::clamp<std::size_t>(share, 1, max_reserve);
        }
        while (local.reserved < want) {
            const std::uint32_t i = lanes_.pop(links, now);
            if (i == none)
                break;
            if (const std::uint16_t g = slab_->at(i).group; g != 0) {
                // Over its group's limit the task waits in the group's parking list, still
                // queued and holding no worker; other groups pass it by.
                GroupState& gs = groups_[g];
                if (gs.active >= gs.capacity()) {
                    gs.parked.push_back(links, i);
                    continue;
                }
                ++gs.active; // released by release_group when this attempt ends
            }
            local.batch[local.reserved++] = i;
        }
        lanes_count_.store(static_cast<std::uint32_t>(lanes_.size()), std::memory_order_seq_cst);
    }

    /// Whether the measured mean attempt duration is known and under tiny_task_s.
    [[nodiscard]] bool tasks_are_tiny() const noexcept {
        const double avg_s = avg_duration_s_.load(std::memory_order_relaxed);
        return avg_s > 0.0 && avg_s < tiny_task_s;
    }

    /// Takes the standby buffer (O(1)) and sorts it into the priority lanes. Dispatch lock held.
    void swap_into_lanes_locked(Links& links) {
        if (!queue_.swap(batch_))
            return;
        pops_since_swap_ = 0;
        for (const auto i : batch_)
            lanes_.push(links, i, slab_->at(i).priority);
        batch_.clear();
    }

    /// queued -> running for a reserved slot. A slot cancelled meanwhile (a tombstone), or any
    /// slot during shutdown(cancel), goes to history instead.
    bool try_start(std::uint32_t i, WorkerLocal& local) {
        TaskRecord& r = slab_->at(i);
        if (discard_.load(std::memory_order_acquire)) {
            cancel_pinned(r, i);
            release_group(r);
            retire(i, &local);
            return false;
        }
        auto s = r.state.load(std::memory_order_acquire);
        while ((s & state_mask) == static_cast<std::uint32_t>(TaskState::queued)) {
            if (r.state.compare_exchange_weak(
                    s, (s & ~state_mask) | static_cast<std::uint32_t>(TaskState::running),
                    std::memory_order_acq_rel)) {
                dequeued(r);
                return true;
            }
        }
        release_group(r);
        retire(i, &local);
        return false;
    }

    /// Feeds an attempt's outcome to its group's breaker (before the slot is released, so the
    /// release already sees the new state).
    void group_attempt(GroupState& gs, bool ok, std::int64_t now) {
        std::lock_guard lock(dispatch_mutex_);
        if (!gs.breaker_on)
            return;
        switch (gs.state) {
        case BreakerState::closed:
            ++gs.attempts;
            gs.failures += ok ? 0 : 1;
            if (gs.attempts >= gs.breaker.min_attempts &&
                static_cast<double>(gs.failures) >=
                    gs.breaker.failure_ratio * static_cast<double>(gs.attempts)) {
                gs.state = BreakerState::open;
                gs.since_ns = now;
            }
            break;
        case BreakerState::half_open:
            if (ok) {
                gs.state = BreakerState::closed;
                gs.attempts = gs.failures = 0;
            } else {
                gs.state = BreakerState::open;
            }
            gs.since_ns = now;
            break;
        case BreakerState::open:
            break; // an attempt that started before the breaker opened
        }
    }

    /// Tick: open breakers whose cool-down is over go half-open (probes flow); closed ones start
    /// a new counting window every metrics_window.
    void tick_breakers(std::int64_t now) {
        std::size_t registered = 0;
        {
            std::lock_guard lock(groups_mutex_);
            registered = group_names_.size();
        }
        std::uint32_t moved = 0;
        const std::int64_t window =
            std::chrono::duration_cast<std::chrono::nanoseconds>(cfg_.metrics_window).count();
        std::lock_guard lock(dispatch_mutex_);
        for (std::size_t g = 1; g <= registered; ++g) {
            GroupState& gs = groups_[g];
            if (!gs.breaker_on)
                continue;
            if (gs.state == BreakerState::open &&
                now - gs.since_ns >= gs.breaker.cooldown.count()) {
                gs.state = BreakerState::half_open;
                moved += unpark_locked(gs);
            } else if (gs.state == BreakerState::closed && now - gs.since_ns >= window) {
                gs.attempts = gs.failures = 0;
                gs.since_ns = now;
            }
        }
        if (moved != 0)
            pool_.notify_all();
    }

    /// Gives back the group slot a reserved task held and lets parked tasks of its group in.
    /// The calling worker is about to look for work itself, so one task let in needs no wake.
    void release_group(TaskRecord& r) {
        if (r.group == 0)
            return;
        GroupState& gs = groups_[r.group];
        std::uint32_t moved = 0;
        {
            std::lock_guard lock(dispatch_mutex_);
            --gs.active;
            moved = unpark_locked(gs);
        }
        if (moved > 1)
            pool_.notify_all();
    }

    /// Moves parked tasks of a group back to the front of their lanes while the group has room.
    /// Caller holds the dispatch lock. Returns how many moved.
    std::uint32_t unpark_locked(GroupState& gs) {
        Links links{slab_.get()};
        const std::uint32_t cap = gs.capacity();
        const std::uint32_t room = gs.active >= cap ? 0 : cap - gs.active;
        std::uint32_t moved = 0;
        while (moved < room && !gs.parked.empty()) {
            const std::uint32_t i = gs.parked.pop_front(links);
            lanes_.push_front(links, i, slab_->at(i).priority);
            ++moved;
        }
        if (moved != 0)
            lanes_count_.store(static_cast<std::uint32_t>(lanes_.size()),
                               std::memory_order_seq_cst);
        return moved;
    }

    void execute(std::uint32_t index, Worker& w, std::int64_t start) {
        TaskRecord& r = slab_->at(index);
        const std::uint32_t attempt = std::min<std::uint32_t>(r.attempts.load() + 1u, 255u);
        r.attempts.store(static_cast<std::uint8_t>(attempt), std::memory_order_relaxed);
        r.start_ns.store(start, std::memory_order_relaxed);
        r.mark_ns.store(start, std::memory_order_relaxed);
        const TaskId id = TaskId::make(index, r.generation.load(std::memory_order_relaxed));
        Attempt a;
        a.claim = &w.current;
        a.token = (std::uint64_t{++w.serial} << 32) | index;
        TaskContext ctx(r, id, attempt, &now_ns, this, &w.current, a.token);
        a.ctx = &ctx;
        current_worker_owner = this;
        if (hooks_.on_start)
            call_hook(hooks_.on_start, event(r, id, attempt));
        std::exception_ptr error = r.manager(ManagerOp::run, r, &a);
        const std::int64_t end = now_ns();
        w.local.last_end_ns = end;
        a.restore();
        if (a.abandoned) {
            // The watchdog ended this attempt while the body ignored its stop; the record is the
            // retry's now. Give back the group slot the body held and the pin taken for us.
            release_group(r);
            slab_->release(index);
            return;
        }
        w.counters.add_attempt(error == nullptr, end - start);
        if (a.destructor_error)
            note_destructor_error(r, a.destructor_error);

        auto s = r.state.load(std::memory_order_acquire);
        if (r.group != 0 && (s & cancel_requested_bit) == 0)
            group_attempt(groups_[r.group], error == nullptr, end);
        if (error == nullptr) {
            if (!hooks_.on_success) {
                finish(r, index, s, TaskState::succeeded, end, &w.local);
                return;
            }
            // Pinned so the record cannot be recycled (history may evict it) before the hook.
            r.refs.fetch_add(1, std::memory_order_relaxed);
            if (finish(r, index, s, TaskState::succeeded, end, &w.local))
                call_hook(hooks_.on_success, event(r, id, attempt));
            slab_->release(index);
            return;
        }
        conclude_failure(r, index, id, attempt, s, std::move(error), start, end, &w.local);
    }

    /// The callable's destructor threw after a successful run: the task still succeeded; the
    /// exception is kept as its last error so query() says what happened.
    static void note_destructor_error(TaskRecord& r, const std::exception_ptr& e) {
        ErrorText text = describe_exception(e);
        r.lock_extras();
        try {
            TaskExtras& x = r.ensure_extras();
            x.last_error = "exception from the task's destructor, contained: " + text.message;
            x.last_error_type = std::move(text.type);
        } catch (...) {
        }
        r.unlock_extras();
    }

    /// Ends a failed attempt: hooks, the failure record, then a retry, the dead-letter list, or
    /// cancelled. Run by the attempt's owner: its worker, or the watchdog after a takeover
    /// (local = nullptr).
    void conclude_failure(TaskRecord& r, std::uint32_t index, TaskId id, std::uint32_t attempt,
                          std::uint32_t s, std::exception_ptr error, std::int64_t start,
                          std::int64_t end, WorkerLocal* local, bool free_group_slot = true) {
        // Whatever a timed-out body threw on its way out (often its reaction to the stop), the
        // attempt failed because of the timeout.
        if ((s & stop_bits) == timed_out_bit)
            error = std::make_exception_ptr(TaskTimedOut(r.timeout_ms));
        ErrorText text = describe_exception(error);
        if (hooks_.on_exception) {
            TaskEvent e = event(r, id, attempt);
            e.error_type = text.type;
            e.error = text.message;
            call_hook(hooks_.on_exception, e);
        }
        const bool permanent = text.permanent;
        r.record_failure(
            AttemptFailure{attempt, std::move(text.type), std::move(text.message), start, end});
        const bool retryable =
            !permanent && attempt <= r.max_retries && r.content == Content::callable;
        // shutdown(cancel) stops retries: a task that would have retried is cancelled, not
        // dead-lettered (its stop request may simply not have reached it yet).
        const bool can_retry = retryable && !discard_.load(std::memory_order_acquire);
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
            if (hooks_.on_retry) {
                TaskEvent e = event(r, id, attempt);
                e.retry_delay = delay;
                call_hook(hooks_.on_retry, e);
            }
            // The timed-out flag belonged to this attempt; the next one starts clean. The CAS
            // fails when a waiter set has_waiter_bit (try again) or a cancel slipped in (fall
            // through to the cancelled ending).
            while ((s & cancel_requested_bit) == 0) {
                if (r.state.compare_exchange_weak(
                        s, (s & sticky_bits) | static_cast<std::uint32_t>(TaskState::waiting_retry),
                        std::memory_order_acq_rel)) {
                    waiting_retry_.fetch_add(1, std::memory_order_acq_rel);
                    retries_.fetch_add(1, std::memory_order_relaxed);
                    if (free_group_slot)
                        release_group(r);
                    timers_.add(due, index);
                    return;
                }
            }
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
        if (hooks_.on_dead_letter && (s & cancel_requested_bit) == 0) {
            TaskEvent e = event(r, id, attempt);
            r.lock_extras();
            const std::string type = r.extras->last_error_type;
            const std::string message = r.extras->last_error;
            r.unlock_extras();
            e.error_type = type;
            e.error = message;
            call_hook(hooks_.on_dead_letter, e);
        }
        // The dead-letter list holds its own reference (and with it the callable, for replay),
        // and lists the task before its terminal state is published: whoever sees it dead finds
        // it there.
        r.refs.fetch_add(1, std::memory_order_relaxed);
        if (const auto evicted = dead_letters_.add(id))
            slab_->release(evicted->index());
        finish(r, index, s, TaskState::dead_lettered, end, local, free_group_slot);
    }

    /// An event built by a thread that does not own the record (the tick, shutdown): the name is
    /// copied into `name` under the record's lock, and the event points at that copy.
    static TaskEvent foreign_event(TaskRecord& r, TaskId id, std::string& name) {
        r.lock_extras();
        name = r.extras != nullptr ? r.extras->name : std::string();
        r.unlock_extras();
        TaskEvent e;
        e.id = id;
        e.name = name;
        e.priority = r.priority;
        e.attempt = r.attempts.load(std::memory_order_relaxed);
        return e;
    }

    /// An event for the worker that owns the record (it alone may create r.extras).
    static TaskEvent event(TaskRecord& r, TaskId id, std::uint32_t attempt) {
        TaskEvent e;
        e.id = id;
        e.name = r.extras != nullptr ? std::string_view(r.extras->name) : std::string_view();
        e.priority = r.priority;
        e.attempt = attempt;
        return e;
    }

    void call_hook(const std::function<void(const TaskEvent&)>& hook, const TaskEvent& e) noexcept {
        try {
            hook(e);
        } catch (...) {
            hook_failures_.fetch_add(1, std::memory_order_relaxed);
        }
    }

    /// Ends a running task: the wanted state, or cancelled if a cancel was requested meanwhile.
    /// Returns whether the task ended in `wanted`.
    bool finish(TaskRecord& r, std::uint32_t index, std::uint32_t s, TaskState wanted,
                std::int64_t end, WorkerLocal* local, bool free_group_slot = true) {
        TaskState final_state = wanted;
        r.finish_ns.store(end, std::memory_order_relaxed);
        if ((s & cancel_requested_bit) != 0)
            r.destroy_content(); // a cancelled task's callable (or value) serves no one now
        // The body has returned: its group slot is free before anyone can see the task ended.
        // (After a takeover the stuck body still holds it; its orphan frees it on return.)
        if (free_group_slot)
            release_group(r);
        for (;;) {
            final_state = (s & cancel_requested_bit) != 0 ? TaskState::cancelled : wanted;
            // Counted before publishing, so whoever sees the terminal state sees the totals.
            count_terminal(final_state, 1);
            if (r.state.compare_exchange_weak(
                    s, static_cast<std::uint32_t>(final_state) | (s & has_waiter_bit),
                    std::memory_order_acq_rel)) {
                if ((s & has_waiter_bit) != 0)
                    slab_->notify_waiters(index);
                if ((s & has_dependents_bit) != 0)
                    release_dependents(index);
                break;
            }
            count_terminal(final_state, -1);
        }
        retire(index, local);
        return final_state == wanted;
    }

    void count_terminal(TaskState s, int delta) noexcept {
        const auto d = static_cast<std::uint64_t>(static_cast<std::int64_t>(delta));
        switch (s) {
        case TaskState::succeeded:
            succeeded_.fetch_add(d, std::memory_order_relaxed);
            break;
        case TaskState::dead_lettered:
            dead_lettered_.fetch_add(d, std::memory_order_relaxed);
            break;
        case TaskState::cancelled:
            cancelled_.fetch_add(d, std::memory_order_relaxed);
            break;
        default:
            break;
        }
    }

    /// cancel() on a pinned record; see the state machine in docs/design.md.
    bool cancel_pinned(TaskRecord& r, std::uint32_t index) {
        auto s = r.state.load(std::memory_order_acquire);
        for (;;) {
            const auto st = static_cast<TaskState>(s & state_mask);
            if (st == TaskState::queued || st == TaskState::waiting_retry ||
                st == TaskState::pending) {
                r.finish_ns.store(now_ns(), std::memory_order_relaxed);
                count_terminal(TaskState::cancelled, 1);
                if (!r.state.compare_exchange_weak(
                        s, static_cast<std::uint32_t>(TaskState::cancelled) | (s & has_waiter_bit),
                        std::memory_order_acq_rel)) {
                    count_terminal(TaskState::cancelled, -1);
                } else {
                    // Nobody runs or reads a cancelled task's callable: free its captures now
                    // (a join's handles among them).
                    r.destroy_content();
                    if (st == TaskState::queued) {
                        dequeued(r);
                    } else if (st == TaskState::waiting_retry) {
                        waiting_retry_.fetch_sub(1, std::memory_order_acq_rel);
                    } else {
                        pending_joins_.fetch_sub(1, std::memory_order_acq_rel);
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

    /// Cancels everything queued or waiting for a retry, and asks running tasks to stop.
    void cancel_all() {
        std::vector<std::uint32_t> victims;
        {
            Links links{slab_.get()};
            std::lock_guard lock(dispatch_mutex_);
            swap_into_lanes_locked(links);
            for (std::uint32_t i = lanes_.pop(links, 0); i != none; i = lanes_.pop(links, 0))
                victims.push_back(i);
            while (!subtasks_.empty())
                victims.push_back(subtasks_.pop_front(links));
            subtask_lane_count_.store(0, std::memory_order_seq_cst);
            for (std::size_t g = 1; g <= max_groups; ++g)
                while (!groups_[g].parked.empty())
                    victims.push_back(groups_[g].parked.pop_front(links));
            lanes_count_.store(0, std::memory_order_seq_cst);
        }
        timers_.take_all(victims);
        for (const auto i : victims) {
            cancel_pinned(slab_->at(i), i);
            retire(i, nullptr);
        }
        // Joins still waiting: cancelled now, retired by their last dependency's ending.
        std::vector<std::uint32_t> joins;
        {
            std::lock_guard lock(joins_mutex_);
            for (const auto& [j, n] : join_waits_)
                joins.push_back(j);
        }
        for (const auto j : joins)
            cancel_pinned(slab_->at(j), j);
        pool_.for_each([&](Worker& w) {
            const auto c = w.current.load(std::memory_order_relaxed);
            if (c == no_attempt)
                return;
            const auto i = static_cast<std::uint32_t>(c);
            TaskRecord& r = slab_->at(i);
            cancel(TaskId::make(i, r.generation.load(std::memory_order_relaxed)));
        });
    }

    /// The scheduler's reference to a finished slot moves into history; batched per worker.
    void retire(std::uint32_t index, WorkerLocal* local) {
        if (local != nullptr) {
            local->finished.push_back(index);
            if (local->finished.size() >= history_batch)
                flush_history(local->finished);
        } else {
            std::vector<std::uint32_t> one{index};
            flush_history(one);
        }
    }

    void flush_history(std::vector<std::uint32_t>& finished) {
        if (finished.empty())
            return;
        // Evicted slots are written back over the front of `finished` (never past the entry
        // being read), so a flush allocates nothing.
        std::size_t evicted = 0;
        {
            std::lock_guard lock(history_mutex_);
            for (const auto i : finished) {
                if (history_.empty()) {
                    finished[evicted++] = i;
                    continue;
                }
                if (history_size_ == history_.size()) {
                    finished[evicted++] = history_[history_head_];
                    history_head_ = (history_head_ + 1) % history_.size();
                    --history_size_;
                }
                history_[(history_head_ + history_size_) % history_.size()] = i;
                ++history_size_;
            }
        }
        slab_->release_many(finished.data(), evicted);
        finished.clear();
    }

    // ---- maintenance tick ---------------------------------------------------------------------

    void tick_loop(std::stop_token st) {
        std::mutex m;
        std::condition_variable_any cv;
        std::unique_lock lock(m);
        while (!st.stop_requested()) {
            cv.wait_for(lock, st, cfg_.dispatch_interval, [] { return false; });
            if (st.stop_requested())
                break;
            tick();
        }
    }

    void tick() {
        const std::int64_t now = now_ns();
        fire_due_retries(now);

        CumulativeCounters c;
        const auto qc = queue_.counters();
        c.incoming = qc.incoming;
        c.rejected = qc.rejected;
        c.incoming += admitted_other_.load(std::memory_order_relaxed);
        pool_.sum_counters(c.completed, c.failed, c.duration_ns);
        const std::uint32_t qlen = queue_.length();
        const WorkerStats ws = pool_.stats();
        ControllerInput in;
        in.queue_length = qlen;
        in.current_target = ws.target;
        in.live_workers = ws.current;
        in.busy_workers = ws.busy;
        in.cpu_utilization = sample_cpu();
        cpu_util_pub_.store(in.cpu_utilization, std::memory_order_relaxed);
        // Saturated: the queue is at its soft limit now, or admission refused work since the
        // last tick (the queue was at a limit then; a producer obeying retry_after keeps it
        // just below the limit most of the time).
        in.saturated = qlen >= queue_.soft_limit() || c.rejected > last_rejected_;
        last_rejected_ = c.rejected;
        bool control = false;
        {
            std::lock_guard lock(metrics_mutex_);
            window_.update(now, c, qlen);
            drain_rate_.store(window_.drain_rate(now), std::memory_order_relaxed);
            const auto avg = window_.sum().average_duration();
            in.avg_duration_s = std::chrono::duration<double>(avg).count();
            avg_duration_s_.store(in.avg_duration_s, std::memory_order_relaxed);
            if (now - last_control_ns_ >=
                std::chrono::duration_cast<std::chrono::nanoseconds>(cfg_.controller_interval)
                    .count()) {
                last_control_ns_ = now;
                control = true;
                in.incoming_rate = window_.incoming_rate(now);
            }
        }
        if (control) {
            pool_.set_target(controller_(in));
        } else if (const auto t = saturation_target(in, cfg_); t != in.current_target) {
            pool_.set_target(t);
        }
        // Queued work with no worker at all (min_workers = 0) cannot wait for a controller round.
        if (pool_.target() == 0 && (qlen > 0 || has_work()))
            pool_.set_target(1);
        pool_.reap();
        // Also while draining: queued work still needs its workers.
        pool_.grow(std::max<std::uint32_t>(qlen + children_queued_.load(std::memory_order_acquire),
                                           has_work() ? 1 : 0));
        if (++ticks_ % watchdog_ticks_ == 0)
            watchdog(now);
        tick_breakers(now);
        if (has_work())
            pool_.notify_work(); // safety net: never leave queued work beside parked workers
        check_drained();
    }

    /// Flags running attempts whose last heartbeat (or start) is older than their timeout and
    /// requests stop on them; the attempt then ends as a failure (TaskTimedOut) and follows the
    /// retry policy. A body still running timeout_grace later ignores its stop: its thread is
    /// orphaned (no longer counted against max_workers) and, if the callable can be copied, the
    /// attempt is taken over: ended now, its retry runs on a copy.
    void watchdog(std::int64_t now) {
        // Under the pool lock only collect running attempts; act on them pinned and unlocked,
        // so hooks may call back into the scheduler and never see a recycled record.
        overdue_.clear();
        pool_.for_each([&](Worker& w) {
            const auto c = w.current.load(std::memory_order_acquire);
            if (c == no_attempt)
                return;
            // Only atomics here: the slot may be recycled under us; the rest is read pinned.
            const auto i = static_cast<std::uint32_t>(c);
            TaskRecord& r = slab_->at(i);
            overdue_.push_back(
                Overdue{TaskId::make(i, r.generation.load(std::memory_order_acquire)), &w, c});
        });
        const std::int64_t grace =
            std::chrono::duration_cast<std::chrono::nanoseconds>(cfg_.timeout_grace).count();
        for (const Overdue& o : overdue_) {
            TaskRecord* r = slab_->try_pin(o.id);
            if (r == nullptr)
                continue;
            // State first (acquire): seeing `running` orders us after the admission that wrote
            // timeout_ms, which the ID alone (read from a worker) does not.
            auto s = r->state.load(std::memory_order_acquire);
            const bool running = (s & state_mask) == static_cast<std::uint32_t>(TaskState::running);
            const std::int64_t limit = running ? std::int64_t{r->timeout_ms} * 1'000'000 : 0;
            const std::int64_t quiet = now - r->mark_ns.load(std::memory_order_relaxed);
            if (limit == 0) {
                // not running, or no timeout
            } else if ((s & stop_bits) == 0 && quiet > limit) {
                if (r->state.compare_exchange_strong(s, s | timed_out_bit,
                                                     std::memory_order_acq_rel))
                    fire_timeout(*r, o.id);
            } else if ((s & timed_out_bit) != 0 && quiet > limit + grace) {
                orphan(*r, o, now);
            }
            slab_->release(o.id.index());
        }
    }

    void fire_timeout(TaskRecord& r, TaskId id) {
        timeouts_.fetch_add(1, std::memory_order_relaxed);
        r.request_stop();
        if (hooks_.on_timeout) {
            std::string name;
            TaskEvent e = foreign_event(r, id, name);
            const std::string message = TaskTimedOut(r.timeout_ms).what();
            e.error_type = "ax::TaskTimedOut";
            e.error = message;
            call_hook(hooks_.on_timeout, e);
        }
    }

    /// A timed-out body ignored its stop for timeout_grace: set its thread aside (capped) so it
    /// no longer holds a worker's place, and take the attempt over when the callable allows.
    void orphan(TaskRecord& r, const Overdue& o, std::int64_t now) {
        if (cfg_.max_orphans == 0)
            return;
        Worker& w = *o.worker;
        if (!w.orphaned.load(std::memory_order_acquire) && !pool_.try_orphan(w)) {
            if (w.refused_token != o.token) {
                w.refused_token = o.token;
                orphans_refused_.fetch_add(1, std::memory_order_relaxed);
            }
            return;
        }
        // A move-only callable cannot run twice at once: its orphan ends the attempt (as timed
        // out) when the body returns, and the retry follows then.
        if ((r.flags & record_detachable) == 0)
            return;
        void* copy = nullptr;
        if (r.manager(ManagerOp::clone, r, &copy) != nullptr)
            return; // the copy threw: same as move-only
        std::uint64_t expected = o.token;
        if (!w.current.compare_exchange_strong(expected, no_attempt, std::memory_order_acq_rel)) {
            r.manager(ManagerOp::drop, r, copy); // the body returned meanwhile: it ends itself
            return;
        }
        // The attempt is ours: the record gets the copy (the body keeps the original and frees
        // it), and a pin that the orphan drops when its body returns.
        r.manager(ManagerOp::adopt, r, copy);
        r.refs.fetch_add(1, std::memory_order_relaxed);
        takeovers_.fetch_add(1, std::memory_order_relaxed);
        pool_.add_failed_attempt();
        const std::uint32_t attempt = r.attempts.load(std::memory_order_relaxed);
        const auto s = r.state.load(std::memory_order_acquire);
        if (r.group != 0 && (s & cancel_requested_bit) == 0)
            group_attempt(groups_[r.group], false, now);
        // The group slot stays with the stuck body (a group limit often stands for a resource
        // the body still holds): the retry waits for a slot like any other task of the group.
        conclude_failure(r, o.id.index(), o.id, attempt, s,
                         std::make_exception_ptr(TaskTimedOut(r.timeout_ms)),
                         r.start_ns.load(std::memory_order_relaxed), now, nullptr,
                         /*free_group_slot=*/false);
        // The orphan's place in the pool is free: queued work need not wait for it.
        pool_.notify_work();
    }

    /// Share of all cores the process used since the last tick, smoothed over a few ticks. Uses
    /// std::clock (process CPU time) and the real clock, whatever Clock the scheduler runs on.
    double sample_cpu() noexcept {
        const std::clock_t cpu = std::clock();
        const auto wall = std::chrono::steady_clock::now();
        if (cpu == static_cast<std::clock_t>(-1))
            return 0.0;
        if (last_cpu_ != 0) {
            const double dcpu = static_cast<double>(cpu - last_cpu_) / CLOCKS_PER_SEC;
            const double dwall = std::chrono::duration<double>(wall - last_wall_).count();
            if (dwall > 0.0) {
                const double sample = std::clamp(dcpu / (dwall * cores_), 0.0, 1.0);
                cpu_util_ = 0.7 * cpu_util_ + 0.3 * sample;
            }
        }
        last_cpu_ = cpu;
        last_wall_ = wall;
        return cpu_util_;
    }

    void fire_due_retries(std::int64_t now) {
        due_.clear();
        timers_.take_due(now, due_);
        std::size_t requeued = 0;
        for (const auto i : due_) {
            TaskRecord& r = slab_->at(i);
            auto s = r.state.load(std::memory_order_acquire);
            bool back = false;
            while ((s & state_mask) == static_cast<std::uint32_t>(TaskState::waiting_retry)) {
                if (r.state.compare_exchange_weak(
                        s, (s & ~state_mask) | static_cast<std::uint32_t>(TaskState::queued),
                        std::memory_order_acq_rel)) {
                    back = true;
                    break;
                }
            }
            if (back) {
                waiting_retry_.fetch_sub(1, std::memory_order_acq_rel);
                r.enqueue_ns.store(now, std::memory_order_relaxed);
                if ((r.flags & record_child) != 0) {
                    push_child(i);
                } else {
                    queue_.push_unchecked(i, r.priority);
                    ++requeued;
                }
            } else {
                retire(i, nullptr); // cancelled while waiting: a tombstone
            }
        }
        if (requeued == 1)
            pool_.notify_work();
        if (requeued > 1)
            pool_.notify_all();
    }

    void check_drained() {
        if (accepting_.load(std::memory_order_acquire))
            return;
        // Order matters: joins, queue, subtasks, then busy workers, then timers (each stage feeds
        // the next; see docs/design.md, shutdown).
        if (pending_joins_.load(std::memory_order_acquire) != 0)
            return;
        if (queue_.length() != 0)
            return;
        if (children_queued_.load(std::memory_order_acquire) != 0)
            return;
        if (pool_.in_flight() != 0)
            return;
        if (waiting_retry_.load(std::memory_order_acquire) != 0)
            return;
        {
            std::lock_guard lock(drain_mutex_);
            drained_ = true;
        }
        drain_cv_.notify_all();
    }

    /// Claims the (one-time) stop and joins the tick; false if the threads were stopped before.
    bool stop_ticker() {
        {
            std::lock_guard lock(stop_mutex_);
            if (stopped_)
                return false;
            stopped_ = true;
        }
        if (ticker_.joinable()) {
            ticker_.request_stop();
            ticker_.join();
        }
        return true;
    }

    void stop_threads() {
        if (stop_ticker()) {
            threads_stopped_.store(true, std::memory_order_release);
            pool_.stop_and_join();
        }
    }

    const Config cfg_;
    std::shared_ptr<TaskSlab> slab_;
    DoubleBufferQueue queue_;

    // Dispatcher state: lanes and the swapped-out batch, under dispatch_mutex_.
    SpinLock dispatch_mutex_;
    PriorityLanes<Links> lanes_;
    std::vector<std::uint32_t> batch_;
    std::uint32_t pops_since_swap_ = 0;
    /// lanes_.size(), readable without the dispatch lock (has_work).
    std::atomic<std::uint32_t> lanes_count_{0};
    std::unique_ptr<GroupState[]> groups_ = std::make_unique<GroupState[]>(max_groups + 1);
    /// Subtasks, dispatched ahead of every priority (under the dispatch lock).
    IntrusiveFifo<Links> subtasks_;
    /// subtasks_.size(), readable without the lock.
    std::atomic<std::uint32_t> subtask_lane_count_{0};
    /// Subtasks admitted and not yet started (their admission count; tombstones included).
    std::atomic<std::uint32_t> children_queued_{0};

    // when_all joins: who waits for whom (rare path; a map is fine here).
    std::mutex joins_mutex_;
    std::unordered_map<std::uint32_t, std::vector<std::uint32_t>> dependents_;
    std::unordered_map<std::uint32_t, std::uint32_t> join_waits_;
    std::atomic<std::uint32_t> pending_joins_{0};

    RetryTimers timers_;
    std::vector<std::uint32_t> due_; // ticker only
    std::vector<Overdue> overdue_;   // ticker only

    std::mutex metrics_mutex_;
    MetricsWindow window_;
    // CPU sampling: tick thread only.
    const double cores_ = std::max(1u, std::thread::hardware_concurrency());
    std::clock_t last_cpu_ = 0;
    std::chrono::steady_clock::time_point last_wall_{};
    double cpu_util_ = 0.0;
    Controller controller_;
    std::int64_t last_control_ns_ = 0;

    SpinLock history_mutex_;
    std::vector<std::uint32_t> history_;
    std::size_t history_head_ = 0;
    std::size_t history_size_ = 0;

    mutable std::mutex groups_mutex_;
    std::vector<std::string> group_names_;

    Hooks hooks_;
    DeadLetterList dead_letters_;
    std::atomic<std::uint64_t> hook_failures_{0};

    Jitter jitter_;
    std::atomic<bool> accepting_{true};
    std::atomic<bool> discard_{false};
    std::atomic<double> drain_rate_{0.0};
    std::atomic<double> avg_duration_s_{0.0};
    std::atomic<double> cpu_util_pub_{0.0};
    std::atomic<std::uint32_t> waiting_retry_{0};
    mutable std::atomic<std::uint64_t> refused_other_{0};
    std::atomic<std::uint64_t> succeeded_{0};
    std::atomic<std::uint64_t> dead_lettered_{0};
    std::atomic<std::uint64_t> cancelled_{0};
    std::atomic<std::uint64_t> retries_{0};
    std::atomic<std::uint64_t> timeouts_{0};
    std::atomic<std::uint64_t> takeovers_{0};
    std::atomic<std::uint64_t> orphans_refused_{0};
    /// Subtasks and joins admitted (they bypass the queue's own admission count).
    std::atomic<std::uint64_t> admitted_other_{0};
    std::atomic<std::uint64_t> subtasks_total_{0};
    std::atomic<bool> threads_stopped_{false};
    std::uint64_t last_rejected_ = 0; // tick thread only
    // Watchdog cadence, in ticks (tick thread only).
    std::uint64_t ticks_ = 0;
    const std::uint64_t watchdog_ticks_ = std::max<std::uint64_t>(
        1, static_cast<std::uint64_t>(cfg_.watchdog_interval / cfg_.dispatch_interval));

    std::mutex drain_mutex_;
    std::condition_variable drain_cv_;
    bool drained_ = false;

    std::mutex stop_mutex_;
    bool stopped_ = false;
    std::jthread ticker_;
    Pool pool_; // last: its threads stop first and may use everything above
};

} // namespace detail

/// The in-process scheduler: submit / cancel / query plus metrics and shutdown.
///
/// Clock is the time source (std::chrono::steady_clock; ax::ManualClock in tests); Controller
/// sizes the worker pool (ax::LittleController). policies.hpp states both contracts as concepts.
/// `ax::Scheduler<> sched;` or `ax::Scheduler sched{cfg};` use the defaults.
///
/// Thread-safety: every member function may be called from any thread, including from inside a
/// running task.
template <SchedulerClock Clock = std::chrono::steady_clock,
          ControllerPolicy Controller = LittleController>
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

    /// Cancels a queued or retry-waiting task at once (true); asks a running one to stop and ends
    /// it as cancelled when its body returns (true); false for finished or unknown tasks.
    bool cancel(TaskId id) { return core_->cancel(id); }

    /// State, priority, attempts, times and last error of a task; nullopt once it has left the
    /// bounded history (Config::history_capacity) or for an ID never issued.
    std::optional<Info> query(TaskId id) { return core_->query(id); }

    /// Queue, workers, the metrics window and totals since start.
    MetricsSnapshot metrics() { return core_->metrics(); }

    /// Snapshot of the dead-letter list, oldest first: each task with every attempt's error.
    std::vector<DeadLetter<Clock>> dead_letters() { return core_->dead_letters(); }

    /// Drops a dead letter (and with it the task's captures); false if `id` is not listed.
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
