// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include "../hooks.hpp"
#include "../task.hpp"
#include "record.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>

namespace ax::detail {

/// The user's Hooks and how the scheduler calls them: contained (a hook that throws is counted,
/// never propagated) and with no scheduler lock held, so a hook may call back into the
/// scheduler. No lock of its own.
class HookCaller {
  public:
    /// Takes the user's hooks.
    explicit HookCaller(Hooks hooks) : hooks_(std::move(hooks)) {}

    /// The hooks, to test which are set.
    [[nodiscard]] const Hooks& hooks() const noexcept { return hooks_; }

    /// Calls `hook` with `e`; an exception is swallowed and counted.
    void call(const std::function<void(const TaskEvent&)>& hook, const TaskEvent& e) noexcept {
        try {
            hook(e);
        } catch (...) {
            failures_.fetch_add(1, std::memory_order_relaxed);
        }
    }

    /// Hooks that threw so far.
    [[nodiscard]] std::uint64_t failures() const noexcept {
        return failures_.load(std::memory_order_relaxed);
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

    /// event() for an attempt that started at `start` and ran until `end` (both in ns of the
    /// scheduler's clock; end == start for on_start): fills queue_wait from the record's
    /// enqueue time, which is this attempt's until a retry re-queues it.
    static TaskEvent attempt_event(TaskRecord& r, TaskId id, std::uint32_t attempt,
                                   std::int64_t start, std::int64_t end) {
        TaskEvent e = event(r, id, attempt);
        set_times(e, r, start, end);
        return e;
    }

    /// Sets e.queue_wait (never negative) and e.run_time for an attempt from `start` to `end`.
    static void set_times(TaskEvent& e, const TaskRecord& r, std::int64_t start,
                          std::int64_t end) noexcept {
        const std::int64_t enqueued = r.enqueue_ns.load(std::memory_order_relaxed);
        e.queue_wait = std::chrono::nanoseconds(start > enqueued ? start - enqueued : 0);
        e.run_time = std::chrono::nanoseconds(end > start ? end - start : 0);
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

  private:
    Hooks hooks_;
    std::atomic<std::uint64_t> failures_{0};
};

} // namespace ax::detail
