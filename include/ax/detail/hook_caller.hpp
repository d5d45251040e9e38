// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include "../hooks.hpp"
#include "../task.hpp"
#include "record.hpp"

#include <atomic>
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
