// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include "../errors.hpp"
#include "../task.hpp"
#include "core.hpp"
#include "hook_caller.hpp"
#include "record.hpp"

#include <chrono>
#include <cstdint>
#include <exception>
#include <string>

/// The watchdog: timeouts of running attempts, orphaning of bodies that ignore their stop, and
/// takeovers of detachable attempts. Run by the tick every watchdog_interval.
namespace ax::detail {

/// What the watchdog does about one running attempt.
enum class WatchdogVerdict : std::uint8_t {
    none,     ///< Not running, no timeout, still within it, or its worker is concluding it.
    time_out, ///< Quiet (no heartbeat) for longer than its timeout: set timed_out, request stop.
    orphan,   ///< Timed out and still quiet timeout_grace later: it ignores its stop.
};

/// The rule, pure: `state` is the record's state word, `mark_ns` its last heartbeat (or start),
/// all times on the scheduler's clock.
inline WatchdogVerdict watchdog_verdict(std::uint32_t state, std::uint32_t timeout_ms,
                                        std::int64_t mark_ns, std::int64_t now,
                                        std::int64_t grace_ns) noexcept {
    // A concluding attempt has its outcome: a timeout now would only be reported out of order.
    const bool running = (state & state_mask) == static_cast<std::uint32_t>(TaskState::running) &&
                         (state & concluding_bit) == 0;
    const std::int64_t limit = running ? std::int64_t{timeout_ms} * 1'000'000 : 0;
    const std::int64_t quiet = now - mark_ns;
    if (limit == 0)
        return WatchdogVerdict::none;
    if ((state & stop_bits) == 0 && quiet > limit)
        return WatchdogVerdict::time_out;
    if ((state & timed_out_bit) != 0 && quiet > limit + grace_ns)
        return WatchdogVerdict::orphan;
    return WatchdogVerdict::none;
}

/// Flags running attempts whose last heartbeat (or start) is older than their timeout and
/// requests stop on them; the attempt then ends as a failure (TaskTimedOut) and follows the
/// retry policy. A body still running timeout_grace later ignores its stop: its thread is
/// orphaned (no longer counted against max_workers) and, if the callable can be copied, the
/// attempt is taken over: ended now, its retry runs on a copy.
template <SchedulerClock Clock, ControllerPolicy Controller>
void SchedulerCore<Clock, Controller>::watchdog(std::int64_t now) {
    // Under the pool lock only collect running attempts; act on them pinned and unlocked,
    // so hooks may call back into the scheduler and never see a recycled record.
    overdue_.clear();
    const auto collect = [&](Worker& w) {
        const auto c = w.current.load(std::memory_order_acquire);
        if (c == no_attempt)
            return;
        // Only atomics here: the slot may be recycled under us; the rest is read pinned.
        const auto i = static_cast<std::uint32_t>(c);
        TaskRecord& r = slab_->at(i);
        overdue_.push_back(
            Overdue{TaskId::make(i, r.generation.load(std::memory_order_acquire)), &w, c});
    };
    pool_.for_each(collect);
    pool_.for_each_guest(collect); // attempts producers run while they wait for room
    const std::int64_t grace =
        std::chrono::duration_cast<std::chrono::nanoseconds>(cfg_.timeout_grace).count();
    for (const Overdue& o : overdue_) {
        TaskRecord* r = slab_->try_pin(o.id);
        if (r == nullptr)
            continue;
        // State first (acquire): seeing `running` orders us after the admission that wrote
        // timeout_ms, which the ID alone (read from a worker) does not.
        auto s = r->state.load(std::memory_order_acquire);
        const auto verdict = watchdog_verdict(
            s, r->timeout_ms, r->mark_ns.load(std::memory_order_relaxed), now, grace);
        if (verdict == WatchdogVerdict::time_out) {
            // With an on_timeout hook the attempt's worker must not report the attempt's end
            // before the hook ran: timeout_hook_bit holds it back (execute() waits it out).
            const std::uint32_t bits =
                timed_out_bit | (hooks_.hooks().on_timeout ? timeout_hook_bit : 0u);
            if (r->state.compare_exchange_strong(s, s | bits, std::memory_order_acq_rel))
                fire_timeout(*r, o.id, now);
        } else if (verdict == WatchdogVerdict::orphan) {
            orphan(*r, o, now);
        }
        slab_->release(o.id.index());
    }
}

template <SchedulerClock Clock, ControllerPolicy Controller>
void SchedulerCore<Clock, Controller>::fire_timeout(TaskRecord& r, TaskId id, std::int64_t now) {
    totals_.timeouts.fetch_add(1, std::memory_order_relaxed);
    r.request_stop();
    const Hooks& hooks = hooks_.hooks();
    if (hooks.on_timeout) {
        std::string name;
        TaskEvent e = HookCaller::foreign_event(r, id, name);
        HookCaller::set_times(e, r, r.start_ns.load(std::memory_order_relaxed), now);
        const std::string message = TaskTimedOut(r.timeout_ms).what();
        e.error_type = "ax::TaskTimedOut";
        e.error = message;
        hooks_.call(hooks.on_timeout, e);
        // The worker may conclude the attempt now (release: the hook's effects come first).
        r.state.fetch_and(~timeout_hook_bit, std::memory_order_release);
    }
}

/// A timed-out body ignored its stop for timeout_grace: set its thread aside (capped) so it
/// no longer holds a worker's place, and take the attempt over when the callable allows.
template <SchedulerClock Clock, ControllerPolicy Controller>
void SchedulerCore<Clock, Controller>::orphan(TaskRecord& r, const Overdue& o, std::int64_t now) {
    if (cfg_.max_orphans == 0)
        return;
    Worker& w = *o.worker;
    // A guest slot's thread is a producer's, not the pool's: nothing to set aside or
    // replace; the takeover below still frees the task from it.
    if (!w.guest && !w.orphaned.load(std::memory_order_acquire) && !pool_.try_orphan(w)) {
        if (w.refused_token != o.token) {
            w.refused_token = o.token;
            totals_.orphans_refused.fetch_add(1, std::memory_order_relaxed);
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
    totals_.takeovers.fetch_add(1, std::memory_order_relaxed);
    pool_.add_failed_attempt(
        cfg_.latency_histograms ? now - r.start_ns.load(std::memory_order_relaxed) : -1);
    const std::uint32_t attempt = r.attempts.load(std::memory_order_relaxed);
    const auto s = r.state.load(std::memory_order_acquire);
    if (r.group != 0 && (s & cancel_requested_bit) == 0)
        dispatcher_.record_attempt(r.group, false, now);
    // The group slot stays with the stuck body (a group limit often stands for a resource
    // the body still holds): the retry waits for a slot like any other task of the group.
    conclude_failure(r, o.id.index(), o.id, attempt, s,
                     std::make_exception_ptr(TaskTimedOut(r.timeout_ms)),
                     r.start_ns.load(std::memory_order_relaxed), now, nullptr,
                     /*free_group_slot=*/false);
    // The orphan's place in the pool is free: queued work need not wait for it.
    notifier_.notify_one();
}

} // namespace ax::detail
