// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include "../clock.hpp"
#include "../config.hpp"
#include "../controller.hpp"
#include "../dead_letters.hpp"
#include "../errors.hpp"
#include "../hooks.hpp"
#include "../metrics.hpp"
#include "../policies.hpp"
#include "../queue.hpp"
#include "../retry.hpp"
#include "../shutdown.hpp"
#include "../task.hpp"
#include "../task_context.hpp"
#include "../task_handle.hpp"
#include "../tuning.hpp"
#include "../worker_pool.hpp"
#include "callable.hpp"
#include "controller_state.hpp"
#include "dispatcher.hpp"
#include "groups.hpp"
#include "history.hpp"
#include "hook_caller.hpp"
#include "host.hpp"
#include "joins.hpp"
#include "lifecycle.hpp"
#include "notifier.hpp"
#include "record.hpp"
#include "slab.hpp"
#include "telemetry.hpp"
#include "tick_waker.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <random>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace ax::detail {

/// How a waiting submit (submit_wait / post_wait) waits for room: until `deadline` when
/// `bounded`, and until `stop` is requested.
struct RoomWait {
    bool bounded = false;
    std::chrono::steady_clock::time_point deadline{};
    std::stop_token stop{};
    /// Run queued tasks on the waiting thread instead of parking (help_while_waiting).
    bool help = false;
};

/// The scheduler's composition root: it owns one of each component, wires them, and carries the
/// services that need several of them (admission, running, concluding, the watchdog, the tick).
/// It owns no lock and no state of its own beyond the tick thread's scratch: every lock belongs
/// to the component whose data it guards (see docs/design.md, "Locks and threads").
///
/// The class is declared here; its services are defined by role, one header each:
/// admission.hpp (submit, post, replay), runner.hpp (the pool's Host: dispatch, run, helping
/// waits), suspend.hpp (coroutine tasks leaving their worker mid-attempt), conclude.hpp (endings,
/// retries, cancel), watchdog.hpp (timeouts, orphans), introspect.hpp (list_tasks, oldest_waiting)
/// and tick.hpp (the maintenance thread); scheduler.hpp adds the reads and shutdown and includes
/// them all. Scheduler owns the core through a shared_ptr.
template <SchedulerClock Clock, ControllerPolicy Controller>
class SchedulerCore final : public std::enable_shared_from_this<SchedulerCore<Clock, Controller>>,
                            public TaskHost {
  public:
    static constexpr std::uint32_t none = UINT32_MAX;

    /// Per-worker state the pool keeps for the core: the tasks it reserved, finished slots
    /// waiting to enter history (batched so the history lock is taken once per
    /// Tuning::history_batch tasks) and the time of the last task end.
    struct WorkerLocal {
        Reservation res;
        std::vector<std::uint32_t> finished;
        std::int64_t last_end_ns = 0;
        /// The last clock reading end_of_attempt() took and the time-stamp counter just before
        /// it (0: none yet).
        std::int64_t stamp_ns = 0;
        std::uint64_t stamp_ticks = 0;
        /// The worker's own counters (set at its start), where its succeeded endings are counted.
        WorkerCounters* counters = nullptr;
        WorkerLocal() { finished.reserve(Tuning::history_batch); }
    };
    using Pool = WorkerPool<SchedulerCore>;
    using Worker = typename Pool::Worker;
    /// A running attempt the watchdog looks at: the task, its worker, the claim token.
    struct Overdue {
        TaskId id;
        Worker* worker;
        std::uint64_t token;
    };

    /// Now on Clock, in nanoseconds (a plain function: TaskContext keeps a pointer to it).
    static std::int64_t now_ns() noexcept {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
            .count();
    }

    /// Validates `cfg` (std::invalid_argument naming the field) and builds every component;
    /// no thread starts before start().
    SchedulerCore(const Config& cfg, Hooks hooks)
        : cfg_((cfg.validate(), cfg)), slab_(std::make_shared<TaskSlab>(cfg.huge_pages)),
          telemetry_(cfg, now_ns()),
          queue_(SlabLinks{slab_.get()}, cfg.queue_capacity, soft_limit(cfg)),
          dispatcher_(*slab_, queue_, notifier_,
                      {cfg.weight_high, cfg.weight_normal, cfg.weight_low},
                      std::chrono::duration_cast<std::chrono::nanoseconds>(cfg.max_wait).count()),
          history_(*slab_, cfg.history_capacity), dead_letters_(cfg.dead_letter_capacity),
          jitter_(std::random_device{}()), hooks_(std::move(hooks)), controller_(cfg),
          controller_state_(cfg, controller_policy_name<Controller>(),
                            controller_fast_rounds<Controller>(), now_ns()),
          watchdog_ticks_(std::max<std::uint64_t>(
              1, static_cast<std::uint64_t>(cfg_.watchdog_interval / cfg_.dispatch_interval))),
          pool_(*this, notifier_, cfg.min_workers, cfg.max_workers, cfg.max_orphans) {}

    SchedulerCore(const SchedulerCore&) = delete;
    SchedulerCore& operator=(const SchedulerCore&) = delete;

    ~SchedulerCore() {
        stop_threads();
        // Give back what history and the dead-letter list hold, so callables are destroyed now:
        // one that captured a TaskHandle (a join's) would otherwise keep the slab alive forever.
        for (const TaskId id : dead_letters_.ids())
            if (dead_letters_.remove(id))
                slab_->release(id.index());
        history_.release_all();
    }

    /// Starts min_workers and the tick thread.
    void start() {
        pool_.set_keepalive(this->weak_from_this());
        pool_.start();
        ticker_ = std::jthread([this](std::stop_token st) { tick_loop(st); });
    }

    // ---- the Scheduler's API (admission.hpp, conclude.hpp, scheduler.hpp) -----------------------

    template <class F, class R>
    Expected<TaskHandle<R>> submit(F&& f, const SubmitOptions& o, const RoomWait* wait = nullptr);
    template <class F>
    Expected<TaskId> post(F&& f, const SubmitOptions& o, const RoomWait* wait = nullptr);
    template <class R, class F>
    auto when_all(std::vector<TaskHandle<R>> handles, F&& f, const SubmitOptions& o) {
        return submit_join(*this, /*child=*/false, std::move(handles), std::forward<F>(f), o);
    }
    /// post_many / submit_many (admission.hpp): `R` void-like tag for IDs, else handles.
    template <class T, class R, class It>
    BatchResult<T> admit_many(It first, std::size_t n, const SubmitOptions& o, BatchPolicy policy);
    bool cancel(TaskId id);
    /// nullopt for an unknown ID and for a task the scheduler forgot (out of history, or its
    /// dead letter discarded), even while a handle still holds its record.
    std::optional<TaskInfo<Clock>> query(TaskId id) {
        TaskRecord* r = slab_->try_pin(id);
        if (r == nullptr)
            return std::nullopt;
        std::optional<TaskInfo<Clock>> info;
        if ((r->state.load(std::memory_order_acquire) & forgotten_bit) == 0)
            info = make_task_info<Clock>(*r, id);
        slab_->release(id.index());
        return info;
    }
    MetricsSnapshot metrics();
    // introspect.hpp
    std::vector<TaskSummary> list_tasks(TaskState state, std::size_t limit);
    std::array<std::optional<TaskSummary>, priority_count> oldest_waiting();
    std::vector<DeadLetter<Clock>> dead_letters();
    bool discard_dead_letter(TaskId id);
    Expected<TaskId> replay_dead_letter(TaskId id);

    GroupId group(std::string_view name) {
        return registry_.add(name, [this](std::size_t g) { dispatcher_.add_group(g); });
    }
    void set_group_limit(GroupId g, std::uint32_t limit) {
        registry_.check(g);
        dispatcher_.set_limit(g.value, limit);
    }
    GroupStats group_stats(GroupId g) { return dispatcher_.stats(g); }
    void set_group_breaker(GroupId g, std::optional<BreakerOptions> options) {
        registry_.check(g);
        if (options)
            validate_breaker(*options);
        dispatcher_.set_breaker(g.value, options, now_ns());
    }
    std::string group_name(GroupId g) { return registry_.name(g); }

    bool shutdown(ShutdownMode mode, std::optional<std::chrono::nanoseconds> timeout);
    void abandon();
    [[nodiscard]] const Config& config() const noexcept { return cfg_; }

    // ---- TaskHost (task contexts and helping waits; admission.hpp, runner.hpp) ------------------

    std::optional<SubmitError> admit_erased(const SubmitOptions& o, TaskId& id, bool with_handle,
                                            bool child, const TaskId* deps, std::size_t ndeps,
                                            Placer place) override;
    const std::shared_ptr<TaskSlab>& task_slab() noexcept override { return slab_; }
    bool help_wait(TaskRecord& r, std::uint32_t index,
                   const std::chrono::steady_clock::time_point* deadline) override;
    // suspend.hpp
    std::optional<SubmitError> admit_hop(const TaskRecord& r, const SubmitOptions& o) override;

    // ---- WorkerPool host, see PoolHost (runner.hpp) ---------------------------------------------

    [[nodiscard]] bool has_work() const noexcept { return dispatcher_.has_work(); }
    bool run_one(Worker& w);
    void on_worker_start(Worker& w);
    [[nodiscard]] bool holds_reserved(Worker& w) const noexcept { return w.local.res.holds(); }
    void on_worker_exit(Worker& w);

  private:
    static std::uint32_t soft_limit(const Config& cfg) {
        const auto s = static_cast<std::uint32_t>(cfg.soft_limit_ratio * cfg.queue_capacity);
        return std::clamp<std::uint32_t>(s, 1, cfg.queue_capacity);
    }

    // admission.hpp
    SubmitError refusal(Errc code, std::string why = {});
    SubmitError backpressure_error(Errc code, std::uint32_t len);
    std::optional<SubmitError> group_gate(std::uint16_t g, bool reserve);
    [[nodiscard]] std::uint32_t group_queue_capacity() const noexcept {
        return cfg_.group_queue_capacity != 0 ? cfg_.group_queue_capacity : cfg_.queue_capacity;
    }
    std::chrono::microseconds retry_after(std::uint32_t excess) const;
    template <class F>
    std::optional<SubmitError> admit_new(F&& f, const SubmitOptions& o, TaskId& id,
                                         bool with_handle, const RoomWait* wait = nullptr);
    template <class Place, class Unplace>
    std::optional<SubmitError> admit(const SubmitOptions& o, TaskId& id, bool with_handle,
                                     Place&& place, Unplace&& unplace, bool child = false,
                                     const TaskId* deps = nullptr, std::size_t ndeps = 0,
                                     const RoomWait* wait = nullptr);
    bool wait_for_room(const RoomWait& w);
    void fill_record(TaskRecord& r, const SubmitOptions& o, std::int64_t enqueued,
                     bool with_handle);

    // runner.hpp
    static std::int64_t end_of_attempt(WorkerLocal& local) noexcept;
    bool help_one(Worker& w);
    bool help_producer(const RoomWait& w);
    void flush_guests();
    bool try_start(std::uint32_t i, WorkerLocal& local);
    void execute(std::uint32_t index, Worker& w, std::int64_t start);
    static std::uint32_t await_timeout_hook(TaskRecord& r);
    void fill(std::int64_t now, WorkerLocal& local) {
        const bool tiny = telemetry_.tasks_are_tiny();
        dispatcher_.fill(now, tiny ? pool_.live() : 1, tiny, local.res);
        // The ring read each reserved record's link, so its line is here but shared with the
        // producer that wrote it; each start then writes it (the state CAS). Ask for all of
        // them writable at once so the upgrades overlap instead of stalling one start each.
        for (std::size_t k = local.res.next; k < local.res.reserved; ++k)
            prefetch_record(slab_->at(local.res.batch[k]));
    }

    // suspend.hpp
    void suspend(TaskRecord& r, std::uint32_t index, TaskId id, std::uint32_t attempt,
                 const Suspension& how, std::int64_t start, std::int64_t end, WorkerLocal& local);

    // conclude.hpp
    void conclude_failure(TaskRecord& r, std::uint32_t index, TaskId id, std::uint32_t attempt,
                          std::uint32_t s, std::exception_ptr error, std::int64_t start,
                          std::int64_t end, WorkerLocal* local, bool free_group_slot = true);
    bool finish(TaskRecord& r, std::uint32_t index, std::uint32_t s, TaskState wanted,
                std::int64_t end, WorkerLocal* local, bool free_group_slot = true);
    bool cancel_pinned(TaskRecord& r, std::uint32_t index);
    void cancel_all();
    void release_dependents(std::uint32_t index);
    void release_join(std::uint32_t j);
    void retire(std::uint32_t index, WorkerLocal* local) {
        history_.retire(index, local != nullptr ? &local->finished : nullptr);
    }

    // watchdog.hpp
    void watchdog(std::int64_t now);
    void fire_timeout(TaskRecord& r, TaskId id, std::int64_t now);
    void orphan(TaskRecord& r, const Overdue& o, std::int64_t now);

    // tick.hpp
    void tick_loop(std::stop_token st);
    void tick();
    void fire_due_retries(std::int64_t now);
    void control(std::int64_t now, ControllerInput& in);
    void sample_workers(std::int64_t now, SchedDelta& sum);
    void check_drained();
    bool stop_ticker();
    void stop_threads();

    // Components in wiring order; each owns its locks (named in its header).
    const Config cfg_;
    std::shared_ptr<TaskSlab> slab_;
    Lifecycle lifecycle_;
    TaskTotals totals_;
    Telemetry telemetry_;
    Notifier notifier_;
    TaskQueue queue_;
    GroupRegistry registry_;
    Dispatcher dispatcher_;
    JoinTable joins_;
    History history_;
    RetryTimers timers_;
    DeadLetterList dead_letters_;
    Jitter jitter_;
    HookCaller hooks_;
    Controller controller_;
    ControllerStore controller_state_;

    // Tick thread only (no lock: one thread).
    std::vector<std::uint32_t> due_;
    std::vector<Worker*> sampled_; // tick thread: the workers sample_workers reads
    std::vector<Overdue> overdue_;
    std::uint64_t last_rejected_ = 0;
    bool prescale_ = false; // the last round's reason was forecast
    IdleSampler idle_;      // the machine's idle cores, read with the workers' samples
    std::uint64_t ticks_ = 0;
    const std::uint64_t watchdog_ticks_;

    TickWaker tick_waker_; // the tick sleeps on it; a refused submit pokes it
    std::jthread ticker_;
    Pool pool_; // last: its threads stop first and may use everything above
};

} // namespace ax::detail
