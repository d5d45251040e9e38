// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include "detail/callable.hpp"
#include "detail/host.hpp"
#include "detail/record.hpp"
#include "errors.hpp"
#include "scheduler.hpp"
#include "task.hpp"
#include "task_context.hpp"
#include "task_handle.hpp"

#include <coroutine>
#include <cstdint>
#include <exception>
#include <functional>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

/// C++20 coroutines on the scheduler. A callable returning ax::Task<T> is a coroutine task:
/// `sched.submit([](ax::TaskContext& ctx) -> ax::Task<int> { ... co_return 42; })` returns an
/// Expected<TaskHandle<int>> like any submit, and the task has an ID, a priority, a group, a
/// timeout, retries, query() and cancel(). Inside it, `co_await handle` waits for another task
/// without holding a thread, `co_await ax::when_all(handles)` for several, `co_await
/// sched.schedule(options)` hops back into the queue with another priority or group, and
/// `co_await other_coroutine()` runs a nested ax::Task inline, and `co_await ax::this_context()`
/// gives a coroutine that takes no parameter its TaskContext.
///
/// How it runs: each run of the coroutine on a worker lasts until it ends or suspends. A
/// suspension moves the task out of `running` (to `pending` while it awaits tasks, to `queued`
/// for a hop); the worker is free at once. When what it awaits has ended, the task is queued
/// again and a worker resumes the frame: always from the queue, never inline inside the ending
/// of the awaited task (so a chain of a million awaits cannot grow any stack), never on the tick
/// or watchdog thread. The whole coroutine is one attempt. See docs/coroutines.md.
///
/// Lifetime rules (docs/coroutines.md has the reasons):
/// - The TaskContext& a coroutine task receives stays valid across its suspensions (the
///   scheduler keeps it with the frame and refreshes it at every resumption); the callable's
///   captures live as long as the frame.
/// - cancel() of a suspended coroutine ends it cancelled at once and destroys its frame (its
///   locals' destructors run on the cancelling thread, like a queued task's captures). A cancel
///   while it runs requests its stop token; it ends cancelled at its next suspension, or when
///   it returns (every co_await of a handle, when_all or schedule() is a cancellation point,
///   even when what it awaits has already ended). A cancel racing its resumption is one of the two:
///   either it is resumed (and the cancel finds it running) or it is cancelled (and never resumed).
/// - A TaskCancelled escaping the coroutine (a cancelled child awaited, not caught) ends the
///   task cancelled, not failed: cancellation propagates to the awaiting parent.
/// - A timeout counts per run, from the last resumption or heartbeat: a suspended coroutine is
///   never "stuck". A run that outlives it fails the attempt (TaskTimedOut); a retry restarts
///   the coroutine from the beginning with a fresh frame (the callable's captures are kept).
/// - Shutdown: drain lets suspended coroutines finish (they count as pending work); cancel, or
///   the destructor's grace passing, cancels them and destroys their frames. A handle to a
///   coroutine task outlives the scheduler like any handle, and reports TaskCancelled then.
/// - An ax::Task co_awaits only these ax awaitables (anything else is a compile error: a
///   coroutine suspended where the scheduler cannot see it could be resumed on any thread), and
///   handles of its own scheduler's tasks (one of another scheduler only once it has ended;
///   before that std::invalid_argument).
namespace ax {

/// What `co_await sched.schedule(options)` throws when the scheduler refuses the hop (the
/// admission a submit would meet): the SubmitError, with retry_after for backpressure.
class SubmitRefused : public std::runtime_error {
  public:
    explicit SubmitRefused(SubmitError error)
        : std::runtime_error("ax: schedule() refused: " + error.message()),
          error_(std::move(error)) {}
    /// Why the hop was refused.
    [[nodiscard]] const SubmitError& error() const noexcept { return error_; }

  private:
    SubmitError error_;
};

template <class T = void> class Task;

namespace detail {

template <class> inline constexpr bool coro_false = false;

/// What a coroutine task's frames share while it runs: the frame to resume next (the innermost
/// suspended one), the suspension it asked for, and who runs it. Lives in the promise of the
/// task's outermost frame, so a coroutine task costs its frame allocation and no other.
struct CoroDriver {
    std::coroutine_handle<> resume{};
    Suspension request{};
    TaskId one{}; ///< The awaited ID of a single-handle await.
    TaskHost* host = nullptr;
    TaskRecord* record = nullptr;
    TaskId id{};
    bool suspended = false;
    /// The task's context for ax::this_context(): the factory's (a coroutine taking one) or
    /// `own_context`, refreshed at each run.
    TaskContext* context = nullptr;
    std::optional<TaskContext> own_context{};
};

/// What ax::this_context() returns.
struct ThisContext {};

template <class R> class HandleAwaiter;
template <class T> class TaskAwaiter;
template <class R> class AllAwaiter;
template <bool Try> class HopAwaiter;

/// What ax::when_all returns: the handles to await.
template <class R> struct AllOf { std::vector<TaskHandle<R>>* handles; };

template <class A> struct IsAxAwaitable : std::false_type {};
template <class R> struct IsAxAwaitable<TaskHandle<R>> : std::true_type {};
template <class T> struct IsAxAwaitable<Task<T>> : std::true_type {};
template <class R> struct IsAxAwaitable<AllOf<R>> : std::true_type {};
template <bool Try> struct IsAxAwaitable<ScheduleRequest<Try>> : std::true_type {};
template <> struct IsAxAwaitable<ThisContext> : std::true_type {};

/// `co_await ax::this_context()`: the running task's context, at once.
struct ContextAwaiter {
    CoroDriver* d;
    bool await_ready() const noexcept { return true; }
    void await_suspend(std::coroutine_handle<>) const noexcept {}
    TaskContext& await_resume() const {
        if (d == nullptr || d->context == nullptr)
            throw std::logic_error("ax: this_context() outside a running coroutine task");
        return *d->context;
    }
};

/// The part of an ax::Task's promise that does not depend on T.
struct PromiseBase {
    /// The task's driver: `own` in the outermost frame, the awaiting frame's in a nested one.
    CoroDriver* driver = nullptr;
    CoroDriver own;
    /// The frame awaiting this one (nested Task), resumed by symmetric transfer at the end.
    std::coroutine_handle<> continuation{};
    std::exception_ptr error;

    /// Lazy: the scheduler (or the awaiting frame) starts it.
    std::suspend_always initial_suspend() noexcept { return {}; }
    struct Final {
        bool await_ready() noexcept { return false; }
        template <class P>
        std::coroutine_handle<> await_suspend(std::coroutine_handle<P> h) noexcept {
            const std::coroutine_handle<> c = h.promise().continuation;
            return c ? c : std::noop_coroutine();
        }
        void await_resume() noexcept {}
    };
    Final final_suspend() noexcept { return {}; }
    void unhandled_exception() noexcept { error = std::current_exception(); }

    template <class R> HandleAwaiter<R> await_transform(TaskHandle<R>& h) noexcept {
        return HandleAwaiter<R>(driver, &h);
    }
    template <class R> HandleAwaiter<R> await_transform(TaskHandle<R>&& h) noexcept {
        return HandleAwaiter<R>(driver, &h);
    }
    template <class T> TaskAwaiter<T> await_transform(Task<T>& t) noexcept {
        return TaskAwaiter<T>(driver, t.frame_);
    }
    template <class T> TaskAwaiter<T> await_transform(Task<T>&& t) noexcept {
        return TaskAwaiter<T>(driver, t.frame_);
    }
    template <class R> AllAwaiter<R> await_transform(AllOf<R> all) noexcept {
        return AllAwaiter<R>(driver, all.handles);
    }
    template <bool Try> HopAwaiter<Try> await_transform(const ScheduleRequest<Try>& s) noexcept {
        return HopAwaiter<Try>(driver, s);
    }
    ContextAwaiter await_transform(ThisContext) noexcept { return ContextAwaiter{driver}; }
    template <class A, std::enable_if_t<!IsAxAwaitable<std::remove_cvref_t<A>>::value, int> = 0>
    A&& await_transform(A&& a) noexcept {
        static_assert(coro_false<A>,
                      "ax::Task can co_await only ax::TaskHandle, ax::Task, ax::when_all(...), "
                      "ax::this_context() and Scheduler::schedule()/try_schedule(): a coroutine "
                      "suspended where the scheduler cannot see it could be resumed on any "
                      "thread");
        return std::forward<A>(a);
    }
};

template <class T> struct Promise : PromiseBase {
    std::optional<T> value;
    Task<T> get_return_object() noexcept;
    template <class U = T> void return_value(U&& v) { value.emplace(std::forward<U>(v)); }
};

template <> struct Promise<void> : PromiseBase {
    Task<void> get_return_object() noexcept;
    void return_void() noexcept {}
};

/// What the scheduler's manager may do with an ax::Task.
struct CoroAccess {
    template <class T> static std::coroutine_handle<Promise<T>> release(Task<T>& t) noexcept {
        return std::exchange(t.frame_, {});
    }
};

/// Whether the task `d` drives was asked to stop (cancel, or its run timed out): every co_await
/// of a handle, when_all or schedule() is then a suspension, where the scheduler ends it.
inline bool stop_pending(const CoroDriver* d) noexcept {
    return d != nullptr && d->record != nullptr &&
           (d->record->state.load(std::memory_order_acquire) & stop_bits) != 0;
}

/// Throws unless `h` may be awaited by the task `d` drives; true if it already ended.
template <class R> bool handle_ready(const CoroDriver* d, const TaskHandle<R>& h) {
    if (!h.valid())
        throw std::logic_error("ax: co_await on an empty TaskHandle (its value was taken)");
    if (h.ready())
        return true;
    if (d == nullptr || d->host == nullptr || HandleAccess::slab(h) != d->host->task_slab().get())
        throw std::invalid_argument("ax: an ax::Task can co_await only tasks of the scheduler "
                                    "that runs it (or tasks that already ended)");
    return false;
}

/// `co_await handle`: waits (pending, no thread) for the task to end, then get()s it.
template <class R> class HandleAwaiter {
  public:
    HandleAwaiter(CoroDriver* d, TaskHandle<R>* h) noexcept : d_(d), h_(h) {}
    bool await_ready() const { return handle_ready(d_, *h_) && !stop_pending(d_); }
    void await_suspend(std::coroutine_handle<> h) noexcept {
        d_->one = h_->id();
        d_->request = Suspension{Suspension::Kind::await, &d_->one, 1, Priority::normal, 0};
        d_->resume = h;
        d_->suspended = true;
    }
    R await_resume() { return h_->get(); }

  private:
    CoroDriver* d_;
    TaskHandle<R>* h_;
};

/// `co_await task`: runs a nested ax::Task in the same scheduler task (symmetric transfer).
template <class T> class TaskAwaiter {
  public:
    TaskAwaiter(CoroDriver* d, std::coroutine_handle<Promise<T>> child) noexcept
        : d_(d), child_(child) {}
    bool await_ready() const {
        if (!child_ || child_.done())
            throw std::logic_error("ax: co_await on an empty or already awaited ax::Task");
        return false;
    }
    std::coroutine_handle<> await_suspend(std::coroutine_handle<> parent) noexcept {
        child_.promise().driver = d_;
        child_.promise().continuation = parent;
        return child_;
    }
    T await_resume() {
        Promise<T>& p = child_.promise();
        if (p.error)
            std::rethrow_exception(p.error);
        if constexpr (!std::is_void_v<T>)
            return std::move(*p.value);
    }

  private:
    CoroDriver* d_;
    std::coroutine_handle<Promise<T>> child_;
};

/// `co_await ax::when_all(handles)`: waits for every task, then takes every value.
template <class R> class AllAwaiter {
  public:
    AllAwaiter(CoroDriver* d, std::vector<TaskHandle<R>>* hs) noexcept : d_(d), hs_(hs) {}
    bool await_ready() const {
        bool all = true;
        for (const auto& h : *hs_)
            all = handle_ready(d_, h) && all;
        return all && !stop_pending(d_);
    }
    bool await_suspend(std::coroutine_handle<> h) {
        ids_.clear();
        for (const auto& x : *hs_)
            if (!x.ready())
                ids_.push_back(x.id());
        if (ids_.empty() && !stop_pending(d_))
            return false;
        d_->request = Suspension{Suspension::Kind::await, ids_.data(),
                                 static_cast<std::uint32_t>(ids_.size()), Priority::normal, 0};
        d_->resume = h;
        d_->suspended = true;
        return true;
    }
    /// Every handle is taken (empty afterwards); the first failure in order is rethrown.
    auto await_resume() {
        std::exception_ptr first;
        if constexpr (std::is_void_v<R>) {
            for (auto& h : *hs_)
                take(h, first);
            if (first)
                std::rethrow_exception(first);
        } else {
            std::vector<R> out;
            out.reserve(hs_->size());
            for (auto& h : *hs_) {
                auto v = take(h, first);
                if (v)
                    out.push_back(std::move(*v));
            }
            if (first)
                std::rethrow_exception(first);
            return out;
        }
    }

  private:
    static auto take(TaskHandle<R>& h, std::exception_ptr& first) {
        if constexpr (std::is_void_v<R>) {
            try {
                h.get();
            } catch (...) {
                if (!first)
                    first = std::current_exception();
            }
        } else {
            std::optional<R> v;
            try {
                v.emplace(h.get());
            } catch (...) {
                if (!first)
                    first = std::current_exception();
            }
            return v;
        }
    }

    CoroDriver* d_;
    std::vector<TaskHandle<R>>* hs_;
    std::vector<TaskId> ids_;
};

/// `co_await sched.schedule(o)` / `try_schedule(o)`: back into the queue with o's priority and
/// group, if admission allows.
template <bool Try> class HopAwaiter {
  public:
    HopAwaiter(CoroDriver* d, const ScheduleRequest<Try>& req) : d_(d), req_(req) {}
    bool await_ready() const {
        if (d_ == nullptr || req_.host != d_->host)
            throw std::invalid_argument("ax: an ax::Task can schedule() only onto the scheduler "
                                        "that runs it");
        return false;
    }
    bool await_suspend(std::coroutine_handle<> h) {
        if (auto e = d_->host->admit_hop(*d_->record, req_.options)) {
            error_ = std::move(*e);
            return false;
        }
        d_->request = Suspension{Suspension::Kind::hop, nullptr, 0, req_.options.priority,
                                 req_.options.group.value};
        d_->resume = h;
        d_->suspended = true;
        return true;
    }
    auto await_resume() {
        if constexpr (Try) {
            if (error_)
                return Expected<TaskId>(std::move(*error_));
            return Expected<TaskId>(d_->id);
        } else {
            if (error_)
                throw SubmitRefused(std::move(*error_));
        }
    }

  private:
    CoroDriver* d_;
    ScheduleRequest<Try> req_;
    std::optional<SubmitError> error_;
};

struct NoContext {};

/// What a coroutine task's record holds: the factory (kept for retries, and alive as long as a
/// frame that may refer to its captures), the frame of the current attempt, and for a factory
/// taking a TaskContext& the context that reference binds to (stable across suspensions).
template <class Fn> struct CoroSlot {
    using Value = typename CallableTraits<Fn>::result;
    using Frame = std::coroutine_handle<Promise<Value>>;
    static constexpr bool takes_context = CallableTraits<Fn>::takes_context;

    template <class F> CoroSlot(std::in_place_t, F&& f) : fn(std::forward<F>(f)) {}
    CoroSlot(CoroSlot&& o) noexcept(std::is_nothrow_move_constructible_v<Fn>)
        : fn(std::move(o.fn)), frame(std::exchange(o.frame, {})) {}
    CoroSlot(const CoroSlot&) = delete;
    CoroSlot& operator=(const CoroSlot&) = delete;
    CoroSlot& operator=(CoroSlot&&) = delete;
    ~CoroSlot() { drop_frame(); }

    void drop_frame() noexcept {
        if (frame) {
            frame.destroy();
            frame = {};
        }
    }

    Fn fn;
    Frame frame{};
    [[no_unique_address]] std::conditional_t<takes_context, std::optional<TaskContext>, NoContext>
        context{};
};

inline bool is_cancellation(const std::exception_ptr& e) noexcept {
    try {
        std::rethrow_exception(e);
    } catch (const TaskCancelled&) {
        return true;
    } catch (...) {
        return false;
    }
}

/// The manager of a coroutine task (see manage() for the operations). run: starts the
/// coroutine (a new attempt) or resumes its frame (Attempt::resumed), until it ends or
/// suspends; a suspension is handed to the worker in Attempt::suspend.
template <class Fn, bool Inline>
std::exception_ptr manage_coroutine(ManagerOp op, TaskRecord& r, void* context) {
    using Slot = CoroSlot<Fn>;
    using T = typename Slot::Value;
    switch (op) {
    case ManagerOp::relocate: {
        auto& to = *static_cast<TaskRecord*>(context);
        if constexpr (std::is_move_constructible_v<Fn>) {
            try {
                storage_emplace<Slot, Inline>(to, std::move(*storage_as<Slot, Inline>(r)));
            } catch (...) {
                return std::current_exception();
            }
            to.manager = r.manager;
            to.content = Content::callable;
            storage_destroy<Slot, Inline>(r);
            r.content = Content::none;
            return nullptr;
        } else {
            return std::make_exception_ptr(std::logic_error("ax: callable is not movable"));
        }
    }
    case ManagerOp::destroy:
        if (r.content == Content::callable) {
            storage_destroy<Slot, Inline>(r);
        } else if constexpr (!std::is_void_v<T>) {
            if (r.content == Content::value)
                storage_destroy<T>(r);
        }
        return nullptr;
    case ManagerOp::clone:
    case ManagerOp::adopt:
    case ManagerOp::drop:
        return std::make_exception_ptr(std::logic_error("ax: a coroutine task is not detachable"));
    case ManagerOp::run:
        break;
    }
    auto& a = *static_cast<Attempt*>(context);
    Slot& slot = *storage_as<Slot, Inline>(r);
    if (a.publish()) {
        // As manage(): shutdown(cancel) began between try_start and the claim word.
        r.state.fetch_or(cancel_requested_bit, std::memory_order_acq_rel);
        r.request_stop();
    }
    const auto timed_out = [&r] {
        return (r.state.load(std::memory_order_acquire) & timed_out_bit) != 0;
    };
    try {
        if (!a.resumed || !slot.frame) {
            // A new attempt: a frame left by one cut short (a timeout at a suspension) goes.
            slot.drop_frame();
            Task<T> t = [&] {
                if constexpr (Slot::takes_context) {
                    slot.context.emplace(*a.ctx);
                    return std::invoke(slot.fn, *slot.context);
                } else {
                    return std::invoke(slot.fn);
                }
            }();
            slot.frame = CoroAccess::release(t);
            if (!slot.frame)
                throw std::logic_error("ax: a coroutine task returned an empty ax::Task");
            Promise<T>& p = slot.frame.promise();
            p.driver = &p.own;
            p.own.resume = slot.frame;
        } else if constexpr (Slot::takes_context) {
            *slot.context = *a.ctx; // the same task, now on this worker
        }
    } catch (...) {
        if (!a.keep()) {
            a.abandoned = true;
            return nullptr;
        }
        return std::current_exception();
    }
    CoroDriver& d = *slot.frame.promise().driver;
    d.host = current_host;
    d.record = &r;
    d.id = a.ctx->id();
    d.suspended = false;
    if constexpr (Slot::takes_context) {
        d.context = &*slot.context;
    } else {
        d.context = &d.own_context.emplace(*a.ctx);
    }
    d.resume.resume();
    if (!a.keep()) { // not detachable, so never taken over; kept for the claim protocol
        a.abandoned = true;
        return nullptr;
    }
    if (!slot.frame.done()) {
        if (timed_out() || !d.suspended) {
            slot.drop_frame();
            return std::make_exception_ptr(TaskTimedOut(r.timeout_ms));
        }
        a.suspend = &d.request;
        return nullptr;
    }
    Promise<T>& p = slot.frame.promise();
    if (p.error) {
        std::exception_ptr e = std::move(p.error);
        slot.drop_frame();
        if (timed_out())
            return std::make_exception_ptr(TaskTimedOut(r.timeout_ms));
        if (is_cancellation(e)) {
            // Cancellation propagates: the task ends cancelled (finish() sees the request).
            r.state.fetch_or(cancel_requested_bit, std::memory_order_acq_rel);
            return nullptr;
        }
        return e;
    }
    if (timed_out()) {
        slot.drop_frame();
        return std::make_exception_ptr(TaskTimedOut(r.timeout_ms));
    }
    try {
        if constexpr (std::is_void_v<T>) {
            slot.drop_frame();
            a.destructor_error = storage_destroy_reporting<Slot, Inline>(r);
            r.content = Content::none;
        } else {
            T value = std::move(*p.value);
            slot.drop_frame();
            a.destructor_error = storage_destroy_reporting<Slot, Inline>(r);
            r.content = Content::none;
            storage_emplace<T>(r, std::move(value));
            r.content = Content::value;
        }
    } catch (...) {
        return std::current_exception();
    }
    return nullptr;
}

template <class Fn, class F> void place_coroutine(TaskRecord& r, F&& f) {
    using Slot = CoroSlot<Fn>;
    storage_emplace<Slot>(r, std::in_place, std::forward<F>(f));
    r.manager = &manage_coroutine<Fn, fits_inline<Slot>>;
    r.content = Content::callable;
}

/// The coroutine behind ax::then: waits for the antecedent, keeps its value for retries of
/// `fn`, and rethrows its failure (a cancelled antecedent cancels the continuation).
template <class R, class Fn> struct Then {
    using U =
        std::conditional_t<std::is_void_v<R>, std::invoke_result<Fn&>,
                           std::invoke_result<Fn&, std::conditional_t<std::is_void_v<R>, int, R>&>>;
    TaskHandle<R> handle;
    Fn fn;
    std::optional<std::conditional_t<std::is_void_v<R>, bool, R>> value{};
    std::exception_ptr failed{};

    Task<typename U::type> operator()() {
        if (failed)
            std::rethrow_exception(failed);
        if (!value) {
            try {
                if constexpr (std::is_void_v<R>) {
                    co_await handle;
                    value.emplace(true);
                } else {
                    value.emplace(co_await handle);
                }
            } catch (const TaskCancelled&) {
                throw;
            } catch (...) {
                failed = std::current_exception();
                throw;
            }
        }
        if constexpr (std::is_void_v<R>) {
            co_return std::invoke(fn);
        } else {
            co_return std::invoke(fn, *value);
        }
    }
};

} // namespace detail

/// A coroutine task returning T: the return type of a callable submitted to a Scheduler (or a
/// TaskContext) as a coroutine, or of a helper coroutine another ax::Task co_awaits. Lazy (it
/// starts when the scheduler, or the awaiting coroutine, runs it) and move-only; destroying it
/// destroys a frame not yet run. It cannot be run by hand.
template <class T> class [[nodiscard]] Task {
  public:
    using promise_type = detail::Promise<T>;
    /// The value type the scheduler's handle carries (also marks this as a coroutine task).
    using ax_coroutine_value = T;

    Task(Task&& o) noexcept : frame_(std::exchange(o.frame_, {})) {}
    Task& operator=(Task&& o) noexcept {
        if (this != &o) {
            if (frame_)
                frame_.destroy();
            frame_ = std::exchange(o.frame_, {});
        }
        return *this;
    }
    Task(const Task&) = delete;
    Task& operator=(const Task&) = delete;
    ~Task() {
        if (frame_)
            frame_.destroy();
    }

  private:
    friend promise_type;
    friend struct detail::PromiseBase;
    friend struct detail::CoroAccess;
    explicit Task(std::coroutine_handle<promise_type> h) noexcept : frame_(h) {}
    std::coroutine_handle<promise_type> frame_;
};

namespace detail {
template <class T> Task<T> Promise<T>::get_return_object() noexcept {
    return Task<T>(std::coroutine_handle<Promise<T>>::from_promise(*this));
}
inline Task<void> Promise<void>::get_return_object() noexcept {
    return Task<void>(std::coroutine_handle<Promise<void>>::from_promise(*this));
}
} // namespace detail

/// `co_await ax::this_context()` in an ax::Task: the running task's TaskContext (ID, attempt,
/// stop token, heartbeat, subtasks), valid until the task ends, as the context a coroutine
/// taking TaskContext& receives. A coroutine taking nothing that asks for it costs one
/// allocation (its frame), one taking TaskContext& two (the context's home is made before the
/// frame exists).
[[nodiscard]] inline detail::ThisContext this_context() noexcept {
    return {};
}

/// `co_await ax::when_all(handles)` in an ax::Task: waits, holding no thread, until every task
/// ended, then takes every value in order (std::vector<R>; nothing for R = void). If any failed
/// or was cancelled, the first such in order rethrows (after all ended; the other values are
/// dropped). Every handle is empty afterwards. The vector must outlive the co_await.
template <class R> detail::AllOf<R> when_all(std::vector<TaskHandle<R>>& handles) noexcept {
    return detail::AllOf<R>{&handles};
}
/// when_all on a temporary vector (it lives until the co_await's expression ends).
template <class R> detail::AllOf<R> when_all(std::vector<TaskHandle<R>>&& handles) noexcept {
    return detail::AllOf<R>{&handles};
}

/// A continuation: submits to `sched` a coroutine task that waits for `handle`'s task (holding
/// no thread) and then returns f(value) (f() for R = void; f gets the value as an lvalue, kept
/// for its retries). If the antecedent failed, the continuation fails with its exception (each
/// retry rethrows it; pass max_retries = 0 to dead-letter at once); if it was cancelled, the
/// continuation ends cancelled. Admission as submit; on a refusal `handle` is released.
template <class Clock, class Controller, class R, class F>
auto then(Scheduler<Clock, Controller>& sched, TaskHandle<R> handle, F&& f,
          const SubmitOptions& options = {}) {
    return sched.submit(detail::Then<R, std::decay_t<F>>{std::move(handle), std::forward<F>(f)},
                        options);
}

} // namespace ax
