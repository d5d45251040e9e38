// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include "task.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <string_view>

namespace ax {

/// What a hook is told about one task event. The string views are valid during the call only.
struct TaskEvent {
    TaskId id{};
    std::string_view name;
    Priority priority = Priority::normal;
    /// The attempt concerned (1 for the first).
    std::uint32_t attempt = 0;
    /// For failures: the exception's type and message.
    std::string_view error_type;
    std::string_view error;
    /// For on_retry: how long until the next attempt.
    std::chrono::nanoseconds retry_delay{0};
    /// How long this attempt waited to start: from admission (or, for a retry, its re-queue
    /// when the retry delay ran out) to the attempt's start. Set on every event of an attempt
    /// (start, success, exception, retry, timeout, dead_letter); 0 on on_orphan. Measured with
    /// the scheduler's clock from timestamps the worker already takes (the start may be the
    /// end of the worker's previous task, so a task admitted just then reads 0).
    std::chrono::nanoseconds queue_wait{0};
    /// How long this attempt ran: on success, exception, retry and dead_letter its whole run
    /// (start to the body's return, or to the watchdog's takeover); on on_timeout the time run
    /// so far; 0 on on_start and on_orphan.
    std::chrono::nanoseconds run_time{0};
};

/// Optional callbacks for logging "task ID, attempt, error" (seed §5.5) or persisting dead
/// letters. Each runs on the thread where the event happens (a worker, or the maintenance tick
/// for timeouts) with no scheduler lock held, so it may call back into the scheduler; keep it
/// short, it delays that thread. A hook that throws is contained: the exception is swallowed
/// and counted in MetricsSnapshot::totals.hook_failures.
///
/// Order: each task's events come one after another in causal order (start, then the
/// attempt's timeout if any, exception, retry; the next attempt's start ...), and its terminal
/// event (on_success or on_dead_letter) is the last one. on_timeout runs on the maintenance tick
/// while the body may be returning: the attempt's worker waits for it before it reports the
/// attempt's end, so a slow on_timeout also delays that worker. Events of different tasks
/// interleave freely.
struct Hooks {
    /// An attempt starts.
    std::function<void(const TaskEvent&)> on_start;
    /// The task succeeded.
    std::function<void(const TaskEvent&)> on_success;
    /// An attempt threw (any type) or timed out; called before on_retry / on_dead_letter.
    std::function<void(const TaskEvent&)> on_exception;
    /// A retry was scheduled after retry_delay; the event carries the failure's error_type and
    /// error.
    std::function<void(const TaskEvent&)> on_retry;
    /// The watchdog timed out the running attempt (called from the maintenance tick).
    std::function<void(const TaskEvent&)> on_timeout;
    /// The task was dead-lettered; the event carries its last error. Persist it here so nothing
    /// is lost when the bounded dead-letter list evicts it.
    std::function<void(const TaskEvent&)> on_dead_letter;
    /// ~Scheduler gave up on a body that ignored its stop token for 2 x Config::shutdown_grace:
    /// its thread is detached and ends whenever the body returns. Without this hook ax writes one
    /// line to stderr instead, so an orphan is never silent.
    std::function<void(const TaskEvent&)> on_orphan;
};

} // namespace ax
