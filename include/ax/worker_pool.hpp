// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include "detail/notifier.hpp"
#include "detail/record.hpp"
#include "detail/sched_stat.hpp"
#include "detail/spin_lock.hpp"
#include "detail/thread_slice.hpp"
#include "metrics.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <concepts>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace ax::detail {

/// What WorkerPool<Host> asks of its Host (the scheduler core), for a Worker `w`:
///   run_one(w)        dispatch and run one task; false when there was none
///   has_work()        cheap hint that run_one would find something (read by spinning and
///                     parking workers without any lock)
///   holds_reserved(w) the worker still has tasks reserved for it (it must not retire then;
///                     they would never run)
///   on_worker_start(w), on_worker_exit(w) the latter gives back reserved tasks left by a worker
///                     leaving for shutdown or as an orphan
/// and a default-constructible Host::WorkerLocal the pool keeps in each Worker for the host.
template <class H, class W>
concept PoolHost = std::default_initializable<typename H::WorkerLocal> &&
    requires(H& h, const H& ch, W& w) {
    { h.run_one(w) } -> std::same_as<bool>;
    { ch.has_work() } -> std::same_as<bool>;
    { ch.holds_reserved(w) } -> std::same_as<bool>;
    h.on_worker_start(w);
    h.on_worker_exit(w);
};

/// The elastic pool of seed §3.5 and §4.4. Threads are std::jthread; their number follows the
/// controller's target: growth creates threads only while queued work exceeds the idle workers
/// (idle ones are reused first), shrinking lets surplus workers leave after their current task
/// (a running task is never interrupted), and min_workers always stay.
///
/// Host is the scheduler core; the PoolHost concept above says what it provides.
///
/// A worker stuck in a timed-out body can be orphaned (try_orphan): it stops counting against
/// max_workers, so the pool may start a replacement, and it leaves once its body returns.
/// Orphans are capped; shutdown detaches the ones still stuck instead of joining them.
///
/// Idle workers spin briefly (one at a time) and then park; both go through the Notifier the
/// pool is given (detail/notifier.hpp), which producers use to wake them without naming the pool.
///
/// Producers waiting for room may run queued tasks in guest slots (lend_guest): Workers without
/// a thread of the pool's own, which the watchdog, cancel and the counters see like workers.
///
/// Lock it owns: `mutex_` (the pool mutex) guards `workers_`, `orphans_`, `guests_` and the retired
/// counters and histograms. Taken by the tick (grow, reap, the watchdog's scan through for_each,
/// the list for_each_listed copies), metrics() and shutdown; never held while a thread is
/// created or a /proc file read (spawn, for_each_listed). Functions that run a caller's callback
/// under it (for_each) say so; the callback must take no other lock but a record's extras flag.
template <class Host> class WorkerPool {
  public:
    /// One worker thread and what it alone writes.
    struct Worker {
        WorkerCounters counters;
        /// Claim word of the attempt this worker runs: (serial << 32) | slot, or no_attempt.
        /// The watchdog reads it to find overdue attempts and swaps it to take one over.
        std::atomic<std::uint64_t> current{no_attempt};
        /// Attempts started by this worker (the claim word's serial, so a token names one attempt).
        std::uint32_t serial = 0;
        /// Set aside by try_orphan: no longer counted in live workers; leaves after its task.
        std::atomic<bool> orphaned{false};
        /// Token of the last attempt whose orphaning the cap refused (tick thread only), so each
        /// refusal is counted once.
        std::uint64_t refused_token = no_attempt;
        std::atomic<bool> exited{false};
        /// Kernel thread id, recorded once by the worker at start (0: unknown), and the tick's
        /// previous reading of its schedstat (tick thread only; detail/sched_stat.hpp).
        std::atomic<std::int32_t> tid{0};
        SchedCursor sched;
        std::jthread thread;
        /// Host-specific per-worker state (e.g. its batch of finished slots).
        typename Host::WorkerLocal local;
        /// A guest slot (lend_guest): no thread of the pool's own; a producer's thread runs a
        /// queued task in it while it waits for room. Never orphaned, never counted in live().
        bool guest = false;
    };

    /// Guest slots at most: producers helping at once beyond this park instead.
    static constexpr std::size_t max_guests = 8;

    WorkerPool(Host& host, Notifier& notifier, std::uint32_t min_workers, std::uint32_t max_workers,
               std::uint32_t max_orphans = 0)
        : host_(host), notifier_(notifier), min_(min_workers), max_(max_workers),
          max_orphans_(max_orphans) {
        target_.store(min_workers, std::memory_order_relaxed);
        // Here rather than on the class: the host names WorkerPool<Host> while it is incomplete.
        static_assert(PoolHost<Host, Worker>, "WorkerPool's Host does not meet PoolHost");
    }
    WorkerPool(const WorkerPool&) = delete;
    WorkerPool& operator=(const WorkerPool&) = delete;
    ~WorkerPool() { stop_and_join(); }

    /// Starts min_workers threads.
    void start() { spawn(min_, true); }

    /// Wakes every parked worker (shrink, shutdown).
    void notify_all() noexcept { notifier_.notify_all(); }

    /// Sets the worker target (at most max): the workers allowed to run tasks at once. Surplus
    /// workers leave after their task, down to min_workers; a target below min_workers (a CPU
    /// cap) keeps min_workers threads alive and parks the surplus without work.
    void set_target(std::uint32_t t) {
        t = std::min(t, max_);
        const auto old = target_.exchange(t, std::memory_order_acq_rel);
        if (t != old)
            notify_all(); // shrink: surplus leaves or parks; growth: parked surplus may run
    }

    /// Creates threads toward the target, but only as many as queued work can use beyond the
    /// idle workers, which are reused first. Returns the number created.
    std::uint32_t grow(std::uint32_t queued) {
        const auto live = live_.load(std::memory_order_acquire);
        const auto target = target_.load(std::memory_order_acquire);
        if (live >= target)
            return 0;
        const auto idle = live - std::min(live, busy_count());
        if (queued <= idle)
            return 0;
        const auto n = std::min(target - live, queued - idle);
        spawn(n);
        return n;
    }

    /// Joins workers that have left; folds their counters into the totals.
    void reap() {
        std::vector<std::unique_ptr<Worker>> dead;
        {
            std::lock_guard lock(mutex_);
            auto it = std::partition(workers_.begin(), workers_.end(), [](const auto& w) {
                return !w->exited.load(std::memory_order_acquire);
            });
            for (auto j = it; j != workers_.end(); ++j) {
                retired_succeeded_ += (*j)->counters.attempts_succeeded.load();
                retired_failed_ += (*j)->counters.attempts_failed.load();
                retired_busy_ns_ += (*j)->counters.busy_ns.load();
                retired_tasks_succeeded_ += (*j)->counters.tasks_succeeded.load();
                retire_latency_locked((*j)->counters);
                dead.push_back(std::move(*j));
            }
            workers_.erase(it, workers_.end());
        }
        dead.clear(); // joins outside the lock
    }

    /// Stops every worker after its current task and joins them. Idempotent.
    void stop_and_join() {
        stopping_.store(true, std::memory_order_seq_cst);
        notify_all();
        std::vector<std::unique_ptr<Worker>> all;
        {
            std::lock_guard lock(mutex_);
            all.swap(workers_);
        }
        for (auto& w : all) {
            if (w->orphaned.load(std::memory_order_acquire) &&
                !w->exited.load(std::memory_order_acquire)) {
                // Still inside a body the scheduler gave up on: it keeps the scheduler alive
                // and leaves when that body returns.
                w->thread.detach();
                std::lock_guard lock(mutex_);
                orphans_.push_back(std::move(w));
                continue;
            }
            if (w->thread.joinable())
                w->thread.join();
            std::lock_guard lock(mutex_);
            retired_succeeded_ += w->counters.attempts_succeeded.load();
            retired_failed_ += w->counters.attempts_failed.load();
            retired_busy_ns_ += w->counters.busy_ns.load();
            retired_tasks_succeeded_ += w->counters.tasks_succeeded.load();
            retire_latency_locked(w->counters);
        }
    }

    /// Sets a worker stuck in a timed-out body aside: it stops counting against max_workers
    /// (so the pool can replace it) and leaves after that body returns. False if it already is
    /// an orphan or Config::max_orphans are stuck already.
    bool try_orphan(Worker& w) {
        std::lock_guard lock(mutex_);
        if (w.orphaned.load(std::memory_order_relaxed) ||
            orphans_now_.load(std::memory_order_relaxed) >= max_orphans_)
            return false;
        w.orphaned.store(true, std::memory_order_release);
        live_.fetch_sub(1, std::memory_order_acq_rel);
        orphans_now_.fetch_add(1, std::memory_order_acq_rel);
        orphaned_total_.fetch_add(1, std::memory_order_relaxed);
        return true;
    }

    /// A failed attempt ended by someone other than its worker (a takeover), which ran for
    /// `run_ns` (counted in the run-time histogram unless negative: histograms off).
    void add_failed_attempt(std::int64_t run_ns = -1) {
        std::lock_guard lock(mutex_);
        ++retired_failed_;
        if (run_ns >= 0)
            observe(retired_run_time_, run_ns);
    }

    /// Orphans still stuck now, orphans ever, refusals because of the cap.
    [[nodiscard]] std::uint32_t orphans() const noexcept {
        return orphans_now_.load(std::memory_order_acquire);
    }
    [[nodiscard]] std::uint64_t orphaned_total() const noexcept {
        return orphaned_total_.load(std::memory_order_relaxed);
    }

    /// Who the worker threads keep alive (the scheduler core), set before start().
    void set_keepalive(std::weak_ptr<void> k) { keepalive_ = std::move(k); }

    /// Last resort of a bounded shutdown: stops every worker; idle ones are joined, ones still
    /// inside a task body are reported through `report(Worker&)` and detached (they exit when
    /// their body returns). Returns how many were abandoned.
    template <class Report> std::size_t abandon_busy(Report&& report) {
        stopping_.store(true, std::memory_order_seq_cst);
        notify_all();
        std::vector<std::unique_ptr<Worker>> all;
        {
            std::lock_guard lock(mutex_);
            all.swap(workers_);
        }
        std::size_t abandoned = 0;
        for (auto& w : all) {
            const bool stuck = w->current.load(std::memory_order_acquire) != no_attempt;
            if (w->orphaned.load(std::memory_order_acquire) && !stuck &&
                !w->exited.load(std::memory_order_acquire) && w->thread.joinable()) {
                // An orphan whose attempt was taken over (already reported in the metrics).
                w->thread.detach();
                std::lock_guard lock(mutex_);
                orphans_.push_back(std::move(w));
            } else if (stuck && w->thread.joinable()) {
                report(*w);
                w->thread.detach();
                ++abandoned;
                std::lock_guard lock(mutex_);
                orphans_.push_back(std::move(w)); // its thread still uses it
            } else if (w->thread.joinable()) {
                w->thread.join();
                std::lock_guard lock(mutex_);
                retired_tasks_succeeded_ += w->counters.tasks_succeeded.load();
            }
        }
        return abandoned;
    }

    /// Counted workers running a task now (orphans excluded).
    [[nodiscard]] std::uint32_t busy_count() {
        std::lock_guard lock(mutex_);
        std::uint32_t n = 0;
        for (const auto& w : workers_)
            n += w->counters.busy.load(std::memory_order_seq_cst) &&
                         !w->orphaned.load(std::memory_order_acquire)
                     ? 1
                     : 0;
        return n;
    }

    /// Workers, orphans included, that still owe a task its ending (drain waits for them); an
    /// orphan whose attempt was taken over owes nothing.
    [[nodiscard]] std::uint32_t in_flight() {
        std::lock_guard lock(mutex_);
        std::uint32_t n = 0;
        for (const auto& w : workers_) {
            if (!w->counters.busy.load(std::memory_order_seq_cst))
                continue;
            if (w->orphaned.load(std::memory_order_acquire) &&
                w->current.load(std::memory_order_acquire) == no_attempt)
                continue;
            ++n;
        }
        // A producer running a queued task in a guest slot owes it its ending too.
        for (const auto& g : guests_)
            n += g != nullptr && g->counters.busy.load(std::memory_order_seq_cst) ? 1 : 0;
        return n;
    }

    /// Calls f(Worker&) for each worker under the pool lock.
    template <class F> void for_each(F&& f) {
        std::lock_guard lock(mutex_);
        for (auto& w : workers_)
            f(*w);
    }

    /// Calls f(Worker&) for each worker outside the pool lock, on a list of them taken under
    /// it into `list` (reused: no allocation once it has grown). Only for the tick thread: it
    /// alone frees workers (reap) while the pool runs, so the ones listed outlive the calls;
    /// f may read a worker's atomics and the tick's own fields (its SchedCursor). For work
    /// that takes long per worker (a /proc read each), which under the lock stalled
    /// metrics() and every other user of it: beside 150 busy workers the tick, preempted
    /// while it read them, held the lock for up to 80 ms (issue 33, gen-9).
    template <class F> void for_each_listed(std::vector<Worker*>& list, F&& f) {
        list.clear();
        {
            std::lock_guard lock(mutex_);
            for (auto& w : workers_)
                list.push_back(w.get());
        }
        for (Worker* w : list)
            f(*w);
    }

    /// Lends a guest slot to the calling thread (a producer about to run a queued task while
    /// it waits for room), or null when all max_guests are lent. Lock-free once the slot
    /// exists; the first lend of each slot creates it under the pool lock, so a scheduler
    /// whose producers never help allocates none. Given back with return_guest().
    Worker* lend_guest() {
        for (std::size_t k = 0; k < max_guests; ++k) {
            if (guest_lent_[k].load(std::memory_order_relaxed) ||
                guest_lent_[k].exchange(true, std::memory_order_acquire))
                continue;
            Worker* g = guest_ptr_[k].load(std::memory_order_acquire);
            if (g == nullptr) {
                std::lock_guard lock(mutex_);
                guests_[k] = std::make_unique<Worker>();
                g = guests_[k].get();
                g->guest = true;
                g->local.counters = &g->counters;
                guest_ptr_[k].store(g, std::memory_order_release);
            }
            return g;
        }
        return nullptr;
    }
    /// Gives back a slot lend_guest() lent.
    void return_guest(Worker* g) noexcept {
        for (std::size_t k = 0; k < max_guests; ++k)
            if (guest_ptr_[k].load(std::memory_order_relaxed) == g) {
                guest_lent_[k].store(false, std::memory_order_release);
                return;
            }
    }
    /// Calls f(Worker&) for each guest slot not lent now, holding it meanwhile (not under the
    /// pool lock: f may take others).
    template <class F> void for_each_idle_guest(F&& f) {
        for (std::size_t k = 0; k < max_guests; ++k) {
            Worker* g = guest_ptr_[k].load(std::memory_order_acquire);
            if (g == nullptr || guest_lent_[k].exchange(true, std::memory_order_acquire))
                continue;
            f(*g);
            guest_lent_[k].store(false, std::memory_order_release);
        }
    }
    /// Calls f(Worker&) for each guest slot ever lent, under the pool lock (the watchdog: an
    /// attempt a producer runs has a timeout like any other).
    template <class F> void for_each_guest(F&& f) {
        std::lock_guard lock(mutex_);
        for (auto& g : guests_)
            if (g != nullptr)
                f(*g);
    }

    /// Summed per-worker counters (live and retired workers).
    void sum_counters(std::uint64_t& succeeded, std::uint64_t& failed, std::int64_t& busy_ns) {
        std::lock_guard lock(mutex_);
        succeeded = retired_succeeded_;
        failed = retired_failed_;
        busy_ns = retired_busy_ns_;
        const auto add = [&](const std::unique_ptr<Worker>& w) {
            if (w == nullptr)
                return;
            succeeded += w->counters.attempts_succeeded.load(std::memory_order_relaxed);
            failed += w->counters.attempts_failed.load(std::memory_order_relaxed);
            busy_ns += w->counters.busy_ns.load(std::memory_order_relaxed);
        };
        for (const auto& w : workers_)
            add(w);
        for (const auto& g : guests_)
            add(g);
    }

    /// Tasks ended succeeded by workers, live and retired (their share of the total).
    [[nodiscard]] std::uint64_t sum_tasks_succeeded() {
        std::lock_guard lock(mutex_);
        std::uint64_t n = retired_tasks_succeeded_;
        for (const auto& w : workers_)
            n += w->counters.tasks_succeeded.load(std::memory_order_relaxed);
        for (const auto& w : orphans_)
            n += w->counters.tasks_succeeded.load(std::memory_order_relaxed);
        for (const auto& g : guests_)
            if (g != nullptr)
                n += g->counters.tasks_succeeded.load(std::memory_order_relaxed);
        return n;
    }

    /// Adds the latency histograms of every worker, live and retired, into `queue_wait` and
    /// `run_time`.
    void sum_latency(LatencyHistogram& queue_wait, LatencyHistogram& run_time) {
        std::lock_guard lock(mutex_);
        merge(queue_wait, retired_queue_wait_);
        merge(run_time, retired_run_time_);
        for (const auto& w : workers_) {
            w->counters.queue_wait.add_to(queue_wait);
            w->counters.run_time.add_to(run_time);
        }
        for (const auto& g : guests_)
            if (g != nullptr) {
                g->counters.queue_wait.add_to(queue_wait);
                g->counters.run_time.add_to(run_time);
            }
    }

    [[nodiscard]] WorkerStats stats() {
        WorkerStats s;
        s.current = live_.load(std::memory_order_acquire);
        s.target = target_.load(std::memory_order_acquire);
        s.busy = std::min(busy_count(), s.current);
        s.idle = s.current - s.busy;
        s.peak = peak_.load(std::memory_order_acquire);
        s.created = created_.load(std::memory_order_acquire);
        s.orphans = orphans_now_.load(std::memory_order_acquire);
        s.orphaned = orphaned_total_.load(std::memory_order_relaxed);
        return s;
    }

    [[nodiscard]] std::uint32_t live() const noexcept {
        return live_.load(std::memory_order_acquire);
    }
    [[nodiscard]] std::uint32_t target() const noexcept {
        return target_.load(std::memory_order_acquire);
    }

  private:
    /// Folds a leaving worker's histograms into the retired ones. Needs mutex_.
    void retire_latency_locked(const WorkerCounters& c) noexcept {
        c.queue_wait.add_to(retired_queue_wait_);
        c.run_time.add_to(retired_run_time_);
    }

    /// Creates `n` threads, each outside the pool lock. Under it, beside busy workers, the tick
    /// held the lock for the whole batch while each creation took 2 - 5 ms on a 2-vCPU VM (0.2
    /// ms with the cores idle): growing by 50 workers kept metrics() and every other user of
    /// the lock waiting 70 - 100 ms (issue 33, gen-9). Outside it is safe because the only
    /// threads that create (start(), then the tick in grow()) are the only ones that free a
    /// worker or read its `thread` (the tick in reap(); shutdown, after the tick is joined):
    /// a worker is listed under the lock before its thread exists, and no one else touches
    /// its `thread`. `rethrow`: a failed creation throws (start(): the constructor reports
    /// it); otherwise the pool grows less and the next grow() asks again.
    void spawn(std::uint32_t n, bool rethrow = false) {
        for (std::uint32_t i = 0; i < n; ++i) {
            auto w = std::make_unique<Worker>();
            Worker* raw = w.get();
            {
                std::lock_guard lock(mutex_);
                if (stopping_.load(std::memory_order_acquire))
                    return;
                live_.fetch_add(1, std::memory_order_acq_rel);
                workers_.push_back(std::move(w));
            }
            try {
                // The thread keeps the scheduler alive while it runs, so an abandoned (detached)
                // worker stuck in a body can still finish safely after the scheduler is
                // destroyed.
                raw->thread = std::jthread([this, raw, keep = keepalive_.lock()] { loop(*raw); });
            } catch (...) {
                live_.fetch_sub(1, std::memory_order_acq_rel);
                raw->exited.store(true, std::memory_order_release); // reap() removes it
                if (rethrow)
                    throw;
                return;
            }
            created_.fetch_add(1, std::memory_order_relaxed);
            const auto live = live_.load(std::memory_order_relaxed);
            auto peak = peak_.load(std::memory_order_relaxed);
            while (live > peak && !peak_.compare_exchange_weak(peak, live)) {
            }
        }
    }

    /// A surplus worker leaves: live > target and above min_workers.
    bool try_retire() noexcept {
        auto live = live_.load(std::memory_order_relaxed);
        for (;;) {
            const auto target = target_.load(std::memory_order_relaxed);
            if (live <= target || live <= min_)
                return false;
            if (live_.compare_exchange_weak(live, live - 1, std::memory_order_acq_rel))
                return true;
        }
    }

    bool spin_for_work() noexcept {
        return notifier_.spin(
            [this] { return host_.has_work() || stopping_.load(std::memory_order_relaxed); });
    }

    /// Sleeps until notified, unless there is work, a stop, or a reason to retire.
    /// `short_slice`: the worker's record of a short slice its idle sleep asked for (Notifier).
    void park(bool& short_slice) {
        notifier_.park(
            [this] {
                return !host_.has_work() && !stopping_.load(std::memory_order_seq_cst) &&
                       !should_retire();
            },
            live_.load(std::memory_order_relaxed), &short_slice);
    }

    /// try_retire() would let a worker go (live > target and above min_workers).
    [[nodiscard]] bool should_retire() const noexcept {
        const auto live = live_.load(std::memory_order_relaxed);
        return live > target_.load(std::memory_order_relaxed) && live > min_;
    }

    /// Workers in a run of tasks, orphans (stuck, uncounted) excluded.
    [[nodiscard]] std::uint32_t active_now() const noexcept {
        const auto a = active_.load(std::memory_order_relaxed);
        return a - std::min(a, orphans_now_.load(std::memory_order_relaxed));
    }

    /// Joins the active workers if the target has room (or `force`: the worker holds reserved
    /// tasks nobody else will run). A CAS, so racing workers cannot overshoot the target.
    bool try_activate(bool force) noexcept {
        auto a = active_.load(std::memory_order_relaxed);
        for (;;) {
            const auto orphans = orphans_now_.load(std::memory_order_relaxed);
            if (!force && a - std::min(a, orphans) >= target_.load(std::memory_order_relaxed))
                return false;
            if (active_.compare_exchange_weak(a, a + 1, std::memory_order_acq_rel))
                return true;
        }
    }

    /// Sleeps while the target allows no more running workers (a target below min_workers),
    /// unless stopping or retiring. set_target wakes it.
    void park_gated() {
        notifier_.park([this] {
            return !stopping_.load(std::memory_order_seq_cst) && !should_retire() &&
                   active_now() >= target_.load(std::memory_order_relaxed);
        });
    }

    void loop(Worker& w) {
        w.tid.store(current_thread_tid(), std::memory_order_release);
        host_.on_worker_start(w);
        bool retired = false;
        // Active: in a run of tasks, counted in active_; at most `target` are (the gate), so a
        // CPU cap below min_workers holds even though min_workers threads stay alive. Changes on
        // idle transitions only; per task the gate costs three relaxed loads.
        bool active = false;
        // Set while this thread holds the short slice an idle sleep asked for; given back after
        // the task it woke for, so a busy worker never preempts producers (Notifier).
        bool short_slice = false;
        while (!stopping_.load(std::memory_order_acquire)) {
            if (!host_.holds_reserved(w) && try_retire()) {
                retired = true;
                break;
            }
            if (!active) {
                if (!try_activate(host_.holds_reserved(w))) {
                    park_gated();
                    continue;
                }
                active = true;
            }
            if (host_.run_one(w)) {
                if (short_slice) {
                    ThreadSlice::restore();
                    short_slice = false;
                }
                if (w.orphaned.load(std::memory_order_acquire))
                    break;
                if (active_now() > target_.load(std::memory_order_relaxed) &&
                    !host_.holds_reserved(w)) {
                    active_.fetch_sub(1, std::memory_order_acq_rel);
                    active = false;
                }
                continue;
            }
            active_.fetch_sub(1, std::memory_order_acq_rel);
            active = false;
            if (spin_for_work())
                continue;
            park(short_slice);
        }
        if (active)
            active_.fetch_sub(1, std::memory_order_acq_rel);
        // A worker leaving for shutdown still counts in live_; keep the final stats honest.
        // An orphan was uncounted when it was set aside.
        if (w.orphaned.load(std::memory_order_acquire))
            orphans_now_.fetch_sub(1, std::memory_order_acq_rel);
        else if (!retired)
            live_.fetch_sub(1, std::memory_order_acq_rel);
        host_.on_worker_exit(w);
        w.exited.store(true, std::memory_order_release);
    }

    Host& host_;
    Notifier& notifier_;
    const std::uint32_t min_;
    const std::uint32_t max_;
    const std::uint32_t max_orphans_;
    std::atomic<std::uint32_t> orphans_now_{0};
    std::atomic<std::uint64_t> orphaned_total_{0};
    std::mutex mutex_;
    std::vector<std::unique_ptr<Worker>> workers_;
    std::vector<std::unique_ptr<Worker>> orphans_; // detached by abandon_busy
    /// Guest slots (lend_guest): created under mutex_, never freed before the pool; a slot's
    /// pointer is published in guest_ptr_ and its lending flag is guest_lent_.
    std::array<std::unique_ptr<Worker>, max_guests> guests_{};
    std::array<std::atomic<Worker*>, max_guests> guest_ptr_{};
    std::array<std::atomic<bool>, max_guests> guest_lent_{};
    std::weak_ptr<void> keepalive_;
    std::uint64_t retired_succeeded_ = 0;
    std::uint64_t retired_failed_ = 0;
    std::int64_t retired_busy_ns_ = 0;
    std::uint64_t retired_tasks_succeeded_ = 0;
    LatencyHistogram retired_queue_wait_;
    LatencyHistogram retired_run_time_;
    alignas(64) std::atomic<std::uint32_t> live_{0};
    std::atomic<std::uint32_t> target_{0};
    std::atomic<std::uint32_t> active_{0};
    std::atomic<std::uint32_t> peak_{0};
    std::atomic<std::uint64_t> created_{0};
    std::atomic<bool> stopping_{false};
};

} // namespace ax::detail
