// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include "detail/host.hpp"
#include "detail/record.hpp"
#include "errors.hpp"
#include "task.hpp"

#include <atomic>
#include <cstdint>
#include <stop_token>
#include <string_view>
#include <type_traits>
#include <vector>

namespace ax {

template <class R> class TaskHandle;
class TaskContext;
namespace detail {
template <class F> struct CallableTraits;
}

/// What a running callable receives: who it is, which attempt, how to notice a stop request, how
/// to tell the watchdog it is still making progress, and how to spawn subtasks.
class TaskContext {
  public:
    /// The task's ID.
    [[nodiscard]] TaskId id() const noexcept { return id_; }
    /// Attempt number, 1 for the first run.
    [[nodiscard]] std::uint32_t attempt() const noexcept { return attempt_; }
    /// Token whose stop is requested by cancel(), shutdown(cancel) or a timeout. Its shared
    /// state is created on the first call, so tasks that never ask pay nothing for it. An attempt
    /// the scheduler has given up on (timed out and taken over) gets an already stopped token.
    [[nodiscard]] std::stop_token stop_token() const {
        if (detached())
            return stopped_token();
        auto token = record_->stop_token(
            [this]() noexcept { return detached(); }); // re-checked under the record's lock
        return token ? *token : stopped_token();
    }
    /// Whether a stop was requested; cheaper than stop_token() (one atomic load). It can turn
    /// true a moment before a token from stop_token() reports the stop (and before that token's
    /// std::stop_callback runs): the scheduler marks the attempt first and then requests stop on
    /// the token, so a token made in between cannot miss it. Code that hands the token on and
    /// needs the two to agree should wait on the token itself.
    [[nodiscard]] bool stop_requested() const noexcept {
        return (record_->state.load(std::memory_order_acquire) & detail::stop_bits) != 0 ||
               detached();
    }
    /// Reports progress: the timeout is measured from the last heartbeat instead of the start.
    void heartbeat() noexcept {
        if (!detached())
            record_->mark_ns.store(now_ns_(), std::memory_order_relaxed);
    }
    /// The name given at submit (empty if none).
    [[nodiscard]] std::string_view name() const noexcept {
        record_->lock_extras();
        const detail::TaskExtras* x = record_->extras;
        record_->unlock_extras();
        return x != nullptr ? std::string_view(x->name) : std::string_view();
    }

    /// Submits a subtask: it goes to the subtask lane, dispatched ahead of every priority, and is
    /// admitted even while the queue is full or draining (up to Config::subtask_capacity waiting
    /// subtasks). Waiting on its handle from inside this task never deadlocks: the waiting worker
    /// runs pending subtasks itself. Subtasks take no group (a parent holding its group's slot
    /// while waiting for children of the same group could never finish); options.group must be
    /// empty.
    template <class F>
    auto submit(F&& f, const SubmitOptions& options = {})
        -> Expected<TaskHandle<typename detail::CallableTraits<std::decay_t<F>>::result>>;

    /// Submits `f` as a subtask that runs once every task in `handles` has ended (succeeded,
    /// dead-lettered or cancelled), without blocking anyone meanwhile; f receives the handles
    /// (std::vector<TaskHandle<R>>&), every one ready. See Scheduler::when_all.
    template <class R, class F>
    auto when_all(std::vector<TaskHandle<R>> handles, F&& f, const SubmitOptions& options = {});

    /// Built by the scheduler only.
    TaskContext(detail::TaskRecord& record, TaskId id, std::uint32_t attempt,
                std::int64_t (*now_ns)(), detail::TaskHost* host,
                const std::atomic<std::uint64_t>* claim, std::uint64_t token) noexcept
        : record_(&record), id_(id), attempt_(attempt), now_ns_(now_ns), host_(host), claim_(claim),
          token_(token) {}

  private:
    /// Whether the scheduler took this attempt over (it ended as timed out; a retry may be
    /// running on a copy of the callable). Meaningful on the body's own thread: while a subtask
    /// runs nested in this body's wait, the claim word holds the subtask's token.
    [[nodiscard]] bool detached() const noexcept {
        return claim_->load(std::memory_order_acquire) != token_;
    }
    static std::stop_token stopped_token() {
        std::stop_source s;
        s.request_stop();
        return s.get_token();
    }

    template <class R> friend class TaskHandle;

    detail::TaskRecord* record_;
    TaskId id_;
    std::uint32_t attempt_;
    std::int64_t (*now_ns_)();
    detail::TaskHost* host_;
    const std::atomic<std::uint64_t>* claim_;
    std::uint64_t token_;
};

} // namespace ax
