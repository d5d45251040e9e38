// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include "errors.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

/// The public vocabulary of ax: priorities, states, IDs, submit options and what query()
/// reports. Standard headers only; everything else in ax builds on it.
namespace ax {

/// Dispatch lane of a task. The ring serves High:Normal:Low in Config's weights (3:2:1 by default).
enum class Priority : std::uint8_t { high = 0, normal = 1, low = 2 };

/// Number of priority lanes.
inline constexpr std::size_t priority_count = 3;

/// Where a task is in its life. succeeded, dead_lettered and cancelled are terminal: a task
/// reaches exactly one of them, exactly once.
enum class TaskState : std::uint8_t {
    queued = 1,    ///< Admitted, waiting in its priority lane.
    running,       ///< An attempt is executing on a worker.
    waiting_retry, ///< An attempt failed; waiting (without a thread) for its retry time.
    succeeded,     ///< The callable returned; its value is in the handle.
    dead_lettered, ///< Every allowed attempt failed; the last exception is in the handle.
    cancelled,     ///< cancel() or shutdown(cancel) ended it.
    pending,       ///< A when_all join waiting for the tasks it depends on to end.
    /// Admitted with SubmitOptions::delay or run_at: waiting (without a thread, on the timers
    /// that also hold retries) for its start time; then queued.
    scheduled,
};

/// Human-readable name of a state ("queued", "running", ...).
constexpr std::string_view to_string(TaskState s) noexcept {
    switch (s) {
    case TaskState::queued:
        return "queued";
    case TaskState::running:
        return "running";
    case TaskState::waiting_retry:
        return "waiting_retry";
    case TaskState::succeeded:
        return "succeeded";
    case TaskState::dead_lettered:
        return "dead_lettered";
    case TaskState::cancelled:
        return "cancelled";
    case TaskState::pending:
        return "pending";
    case TaskState::scheduled:
        return "scheduled";
    }
    return "unknown";
}

/// Human-readable name of a priority ("high", "normal", "low").
constexpr std::string_view to_string(Priority p) noexcept {
    switch (p) {
    case Priority::high:
        return "high";
    case Priority::normal:
        return "normal";
    case Priority::low:
        return "low";
    }
    return "unknown";
}

/// True for succeeded, dead_lettered and cancelled.
constexpr bool is_terminal(TaskState s) noexcept {
    return s == TaskState::succeeded || s == TaskState::dead_lettered || s == TaskState::cancelled;
}

/// Identifies one task for its whole life. It carries the task record's slot and a generation,
/// so lookups are an index, never a hash, and a stale ID never aliases a newer task.
struct TaskId {
    std::uint64_t value = 0;

    /// Slot of the task record.
    [[nodiscard]] constexpr std::uint32_t index() const noexcept {
        return static_cast<std::uint32_t>(value);
    }
    /// Generation of the slot when the task was admitted.
    [[nodiscard]] constexpr std::uint32_t generation() const noexcept {
        return static_cast<std::uint32_t>(value >> 32);
    }
    /// False for a default-constructed ID.
    [[nodiscard]] constexpr bool valid() const noexcept { return generation() != 0; }
    /// Builds an ID from its parts.
    static constexpr TaskId make(std::uint32_t index, std::uint32_t generation) noexcept {
        return TaskId{(std::uint64_t{generation} << 32) | index};
    }
    friend constexpr bool operator==(TaskId, TaskId) = default;
    /// "slot#generation", the form ax uses in logs.
    [[nodiscard]] std::string to_string() const {
        return std::to_string(index()) + "#" + std::to_string(generation());
    }
};

/// A concurrency group registered with Scheduler::group(); 0 means "no group".
struct GroupId {
    std::uint16_t value = 0;
    friend constexpr bool operator==(GroupId, GroupId) = default;
};

/// Per-task options of submit(). Designated initializers read well:
/// `sched.submit(f, {.name = "thumb-42", .priority = ax::Priority::high})`.
struct SubmitOptions {
    /// A human-readable ID for logs and query(); copied at submit. Names up to 15 bytes are stored
    /// without allocating.
    std::string_view name{};
    /// Dispatch lane.
    Priority priority = Priority::normal;
    /// Attempt timeout measured from the last heartbeat (zero: none). At most 49 days.
    std::chrono::milliseconds timeout{0};
    /// Retries after the first attempt; -1 takes Config::retry_max; 0 disables retries.
    int max_retries = -1;
    /// Concurrency group from Scheduler::group(); default none.
    GroupId group{};
    /// Queue the task only this long after admission (default zero: at once). Meanwhile it is
    /// `scheduled`: on the retry timers, holding no worker and no queue place (so a delayed
    /// submit is never refused for a full queue; it enters the queue unchecked when due, like a
    /// retry), cancellable, and query() shows its due time in retry_due. Due tasks are queued by
    /// the maintenance tick: the start is late by up to Config::dispatch_interval. At most a
    /// year. Not for subtasks, joins or post_many.
    std::chrono::nanoseconds delay{0};
    /// Queue the task at this time (std::chrono::steady_clock; the default, the epoch, means
    /// not set); a time past is "now". With delay too, the later of the two wins. On a
    /// scheduler with another clock (ManualClock) it is taken as a delay from now.
    std::chrono::steady_clock::time_point run_at{};
    /// submit_wait() / post_wait() only: while the queue has no room, the calling thread runs
    /// queued tasks itself (caller-runs: the tasks the next worker would have taken, in ring
    /// order, one dispatch's worth at a time, trying to admit again after each) instead of
    /// parking until the workers drain. Default false. On a machine with fewer cores than threads a
    /// parked producer costs two context switches per wait (docs/isolation.md); helping costs none
    /// and turns the wait into work. The trade-off: other submitters' tasks run on this thread, so
    /// they see its thread-local state and stack, may deadlock on a lock it holds, delay it by
    /// their length (a long task overshoots the wait's deadline; the stop token is looked at
    /// between tasks only), and a body that ignores its timeout holds it (the watchdog times it
    /// out and takes it over as on a worker, but cannot replace the thread). Each task still
    /// runs as on a worker: timeout, heartbeat, retry, cancel, hooks, one terminal state, its
    /// exception caught. Ignored by submit() and post().
    bool help_while_waiting = false;
};

/// What query() reports about one task.
template <class Clock = std::chrono::steady_clock> struct TaskInfo {
    using TimePoint = typename Clock::time_point;
    TaskId id{};
    TaskState state = TaskState::queued;
    Priority priority = Priority::normal;
    /// Attempts started so far.
    std::uint32_t attempts = 0;
    /// Retries allowed after the first attempt.
    std::uint32_t max_retries = 0;
    GroupId group{};
    /// Whether cancel() asked a running attempt to stop.
    bool cancel_requested = false;
    /// Whether the watchdog timed out the running attempt (it ends as a failed attempt).
    bool timed_out = false;
    /// The attempt timeout (zero: none), measured from the last heartbeat.
    std::chrono::milliseconds timeout{0};
    TimePoint enqueued{};
    /// Start of the latest attempt (epoch if none yet).
    TimePoint started{};
    /// When it reached its terminal state (epoch if not yet).
    TimePoint finished{};
    /// When waiting_retry or scheduled: when the next attempt becomes due.
    TimePoint retry_due{};
    std::string name;
    /// Text of the latest attempt's error ("" if none).
    std::string last_error;
    /// Exception type of the latest attempt's error ("std::runtime_error", "int", ...).
    std::string last_error_type;
};

/// One task as Scheduler::list_tasks() and oldest_waiting() report it: a small, clock-free
/// summary (query() gives the full TaskInfo).
struct TaskSummary {
    TaskId id{};
    /// SubmitOptions::name ("" if none).
    std::string name;
    Priority priority = Priority::normal;
    /// The state it was listed in.
    TaskState state = TaskState::queued;
    /// Time since it was last queued: its admission, or the re-queue of its latest retry (what
    /// TaskInfo::enqueued reports), measured on the scheduler's clock when listed.
    std::chrono::nanoseconds age{0};
    /// Attempts started so far.
    std::uint32_t attempts = 0;
};

} // namespace ax

template <> struct std::hash<ax::TaskId> {
    std::size_t operator()(ax::TaskId id) const noexcept {
        return std::hash<std::uint64_t>{}(id.value);
    }
};
