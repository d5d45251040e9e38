// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include "../errors.hpp"
#include "../task.hpp"
#include "slab.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

/// The one upward interface of ax: what a running task's context and a blocked handle may ask
/// of the scheduler core that runs them, so task_context.hpp and task_handle.hpp never include
/// the scheduler. Also the thread-locals that say which scheduler a worker thread belongs to.
namespace ax::detail {

/// A type-erased "construct the callable in this record" step, so the non-template admission
/// path of the scheduler can place any callable. `detachable` asks for the heap layout that lets
/// a timed-out attempt be taken over (honoured only for copyable callables).
struct Placer {
    void (*fn)(void* self, TaskRecord& r, bool detachable);
    void* self;
    void operator()(TaskRecord& r, bool detachable) const { fn(self, r, detachable); }
};

/// What a running task (through its TaskContext) and a blocked TaskHandle may ask of the
/// scheduler that runs them. Implemented by the scheduler core.
class TaskHost {
  public:
    /// Admits a subtask (`child`) or a join waiting for `deps` (none: runnable now).
    virtual std::optional<SubmitError> admit_erased(const SubmitOptions& o, TaskId& id,
                                                    bool with_handle, bool child,
                                                    const TaskId* deps, std::size_t ndeps,
                                                    Placer place) = 0;
    /// The slab handles must share.
    virtual const std::shared_ptr<TaskSlab>& task_slab() noexcept = 0;
    /// Called by TaskHandle waits on this host's worker threads: runs pending subtasks while
    /// the awaited task is not terminal, so a parent waiting for its children never deadlocks.
    /// Returns whether the task is terminal (false: the deadline passed).
    virtual bool help_wait(TaskRecord& r, std::uint32_t index,
                           const std::chrono::steady_clock::time_point* deadline) = 0;
    /// Asked by a running coroutine task (record `r`) before it hops back into the queue with
    /// `o`'s priority and group (co_await Scheduler::schedule): the admission a submit of `o`
    /// would meet (options, backpressure, shutdown), nullopt if the hop may go.
    virtual std::optional<SubmitError> admit_hop(const TaskRecord& r, const SubmitOptions& o) = 0;

  protected:
    TaskHost() = default;
    ~TaskHost() = default;
    TaskHost(const TaskHost&) = default;
    TaskHost& operator=(const TaskHost&) = default;
};

/// What Scheduler::schedule() (Try = false) and try_schedule() (Try = true) return: a request,
/// awaited by an ax::Task (ax/coro.hpp), to move onto a worker of `host` with `options`'
/// priority and group. Try: a refusal is an Expected instead of an ax::SubmitRefused thrown.
template <bool Try> struct ScheduleRequest {
    TaskHost* host = nullptr;
    SubmitOptions options{};
};

/// The scheduler whose worker the current thread is (null elsewhere): where a blocking wait
/// helps.
inline thread_local TaskHost* current_host = nullptr;

/// Which scheduler, if any, the current thread is a worker of (shutdown from inside a task must
/// not join its own thread).
inline thread_local const void* current_worker_owner = nullptr;
/// The pool Worker the current thread is (for a helping wait to run subtasks on).
inline thread_local void* current_worker_slot = nullptr;
/// How deeply helping waits are nested on this thread.
inline thread_local std::uint32_t help_depth = 0;

/// Wraps a placement lambda as a Placer (the lambda outlives the call).
template <class L> Placer make_placer(L& place) noexcept {
    return Placer{
        [](void* self, TaskRecord& r, bool detachable) { (*static_cast<L*>(self))(r, detachable); },
        &place};
}

} // namespace ax::detail
