// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include "detail/host.hpp"
#include "detail/record.hpp"
#include "detail/slab.hpp"
#include "errors.hpp"
#include "task.hpp"

#include <chrono>
#include <memory>
#include <stdexcept>
#include <type_traits>
#include <utility>

namespace ax {

template <class R> class TaskHandle;

namespace detail {
/// What the scheduler's join code may see of a handle.
struct HandleAccess {
    template <class R> static const TaskSlab* slab(const TaskHandle<R>& h) noexcept {
        return h.slab_.get();
    }
};
} // namespace detail

/// The caller's side of one submitted task: its ID, and a way to wait for it and take its value
/// or its exception. Move-only, like std::future; it may outlive the scheduler.
template <class R> class TaskHandle {
  public:
    TaskHandle() = default;
    TaskHandle(TaskHandle&& o) noexcept
        : slab_(std::move(o.slab_)), record_(std::exchange(o.record_, nullptr)), id_(o.id_) {}
    TaskHandle& operator=(TaskHandle&& o) noexcept {
        if (this != &o) {
            reset();
            slab_ = std::move(o.slab_);
            record_ = std::exchange(o.record_, nullptr);
            id_ = o.id_;
        }
        return *this;
    }
    TaskHandle(const TaskHandle&) = delete;
    TaskHandle& operator=(const TaskHandle&) = delete;
    ~TaskHandle() { reset(); }

    /// The task's ID, for cancel() and query().
    [[nodiscard]] TaskId id() const noexcept { return id_; }
    /// False after get() or on a default-constructed handle.
    [[nodiscard]] bool valid() const noexcept { return record_ != nullptr; }
    /// The task's current state.
    [[nodiscard]] TaskState state() const noexcept { return record_->load_state(); }
    /// True once the task is terminal (get() will not block).
    [[nodiscard]] bool ready() const noexcept { return is_terminal(state()); }

    /// Blocks until the task is terminal. On a worker thread of the scheduler that runs the task,
    /// the wait helps instead of only blocking: it runs its worker's reserved tasks, pending
    /// subtasks and (up to 16 nested waits deep) queued tasks meanwhile, so a parent waiting for
    /// its children cannot deadlock the pool, even with max_workers = 1.
    void wait() const {
        if (auto* host = helper())
            host->help_wait(*record_, id_.index(), nullptr);
        else
            slab_->wait_terminal(
                *record_, id_.index(),
                static_cast<const std::chrono::steady_clock::time_point*>(nullptr));
    }
    /// Blocks at most `timeout` (helping like wait(); a subtask run meanwhile may overrun it);
    /// true if the task is terminal.
    template <class Rep, class Period>
    bool wait_for(std::chrono::duration<Rep, Period> timeout) const {
        const auto deadline = std::chrono::steady_clock::now() + timeout;
        if (auto* host = helper())
            return host->help_wait(*record_, id_.index(), &deadline);
        return slab_->wait_terminal(*record_, id_.index(), &deadline);
    }

    /// Waits, then returns the value, or rethrows the task's final exception (dead_lettered), or
    /// throws ax::TaskCancelled. Callable once; the handle is empty afterwards.
    R get() {
        if (!valid())
            throw std::logic_error("ax::TaskHandle::get on an empty handle");
        wait();
        detail::TaskRecord& r = *record_;
        struct Release {
            TaskHandle* h;
            ~Release() { h->reset(); }
        } release{this};
        switch (r.load_state()) {
        case TaskState::succeeded:
            if constexpr (!std::is_void_v<R>) {
                return std::move(*detail::storage_as<R>(r));
            } else {
                return;
            }
        case TaskState::cancelled:
            throw TaskCancelled();
        default: {
            if (auto e = r.final_error())
                std::rethrow_exception(e);
            throw TaskFailed("ax: task " + id_.to_string() + " failed");
        }
        }
    }

    /// Built by the scheduler only: adopts one reference on the record.
    TaskHandle(std::shared_ptr<detail::TaskSlab> slab, detail::TaskRecord* record, TaskId id)
        : slab_(std::move(slab)), record_(record), id_(id) {}

  private:
    friend struct detail::HandleAccess;

    /// The scheduler to help while waiting: this thread is one of its workers and the task is
    /// one of its tasks (null otherwise, or once the task is terminal).
    [[nodiscard]] detail::TaskHost* helper() const noexcept {
        detail::TaskHost* host = detail::current_host;
        if (host == nullptr || ready() || host->task_slab().get() != slab_.get())
            return nullptr;
        return host;
    }

    void reset() noexcept {
        if (record_ != nullptr) {
            slab_->release(id_.index());
            record_ = nullptr;
        }
        slab_.reset();
    }

    std::shared_ptr<detail::TaskSlab> slab_;
    detail::TaskRecord* record_ = nullptr;
    TaskId id_{};
};

} // namespace ax
