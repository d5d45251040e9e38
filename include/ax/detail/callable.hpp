// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include "../errors.hpp"
#include "../task.hpp"
#include "../task_context.hpp"
#include "../task_handle.hpp"
#include "host.hpp"
#include "lifecycle.hpp"
#include "record.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <new>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

/// Type erasure of task callables (the manager, the storage helpers, the claim-word protocol of
/// an attempt) and the submit paths a TaskContext and the scheduler share.
namespace ax {
namespace detail {

/// Exceptions thrown by task callables' destructors (contained; process-wide count).
inline std::atomic<std::uint64_t>& destructor_exceptions() noexcept {
    static std::atomic<std::uint64_t> n{0};
    return n;
}

/// How a coroutine task (ax::Task, see ax/coro.hpp) asks to leave its worker without ending its
/// attempt: wait (pending, in the join table) until every task in `deps` ended, or hop back
/// into the queue with another priority and group. It lives in the coroutine's frame; the
/// worker copies what it needs before the task can be cancelled (and the frame destroyed).
struct Suspension {
    enum class Kind : std::uint8_t { await, hop };
    Kind kind = Kind::await;
    /// await: the tasks to wait for (of this scheduler).
    const TaskId* deps = nullptr;
    std::uint32_t ndeps = 0;
    /// hop: where the task goes (admission was checked by TaskHost::admit_hop).
    Priority priority = Priority::normal;
    std::uint16_t group = 0;
};

/// One attempt as the manager runs it. The worker's claim word holds `token` while the body runs;
/// whoever swaps it to no_attempt first owns the attempt's ending: the worker when the body
/// returns, or the watchdog when it takes over a timed-out attempt whose body ignores its stop.
struct Attempt {
    TaskContext* ctx = nullptr;
    std::atomic<std::uint64_t>* claim = nullptr;
    std::uint64_t token = no_attempt;
    /// Claim word before publish (a parent's token while a subtask runs nested in its wait).
    std::uint64_t saved = no_attempt;
    /// Read once the claim word is published: shutdown(cancel) began, so the attempt cancels
    /// itself before its body runs (see Lifecycle::discarding_ordered). Null: no such check.
    const Lifecycle* lifecycle = nullptr;
    /// Set by the manager: the watchdog took the attempt over; the outcome is discarded.
    bool abandoned = false;
    /// Set by the manager: the callable's destructor threw after a successful run (contained;
    /// the task still succeeded).
    std::exception_ptr destructor_error;
    /// Set by the worker: this run resumes a suspended coroutine (same attempt).
    bool resumed = false;
    /// Set by a coroutine's manager: the coroutine suspended; the attempt goes on later.
    const Suspension* suspend = nullptr;

    /// Publishes the claim word (seq_cst: ordered against cancel_all()'s scan), then asks the
    /// lifecycle whether shutdown(cancel) began meanwhile; true: the caller cancels the attempt.
    [[nodiscard]] bool publish() noexcept {
        saved = claim->exchange(token, std::memory_order_seq_cst);
        return lifecycle != nullptr && lifecycle->discarding_ordered();
    }
    /// Claims the ending for the worker; false if the watchdog already took it.
    bool keep() noexcept {
        std::uint64_t t = token;
        return claim->compare_exchange_strong(t, no_attempt, std::memory_order_acq_rel);
    }
    /// Gives the claim word back to the enclosing attempt, if any.
    void restore() noexcept { claim->store(saved, std::memory_order_release); }
};

/// A coroutine task type (ax::Task<T>, ax/coro.hpp) names its value type: a callable returning
/// one is run as a coroutine, and its handle carries T.
template <class R, class = void> struct CoroutineValue {
    static constexpr bool coroutine = false;
    using type = R;
};
template <class R> struct CoroutineValue<R, std::void_t<typename R::ax_coroutine_value>> {
    static constexpr bool coroutine = true;
    using type = typename R::ax_coroutine_value;
};

/// The return type of a callable taken by submit: it may accept a TaskContext& or nothing.
/// A callable returning ax::Task<T> is a coroutine task whose result is T.
template <class F> struct CallableTraits {
    static constexpr bool takes_context = std::is_invocable_v<F&, TaskContext&>;
    static constexpr bool takes_nothing = std::is_invocable_v<F&>;
    static_assert(takes_context || takes_nothing,
                  "ax: a task must be callable as f(ax::TaskContext&) or f()");
    using returned =
        typename std::conditional_t<takes_context, std::invoke_result<F&, TaskContext&>,
                                    std::invoke_result<F&>>::type;
    static constexpr bool coroutine = CoroutineValue<returned>::coroutine;
    using result = typename CoroutineValue<returned>::type;
};

/// Places a coroutine task's factory (defined in ax/coro.hpp, which a caller naming ax::Task
/// has included).
template <class Fn, class F> void place_coroutine(TaskRecord& r, F&& f);

/// A callable the scheduler may copy to retry a timed-out attempt while the stuck body still
/// runs on the original: copyable, and callable as const (so copying it while the body runs
/// reads what the body only reads).
template <class F>
inline constexpr bool detachable_v = std::is_copy_constructible_v<F> &&
                                     (std::is_invocable_v<const F&, TaskContext&> ||
                                      std::is_invocable_v<const F&>);

template <class T, bool Inline = fits_inline<T>, class... Args>
void storage_emplace(TaskRecord& r, Args&&... args) {
    if constexpr (Inline) {
        ::new (static_cast<void*>(r.storage)) T(std::forward<Args>(args)...);
    } else {
        T* p = new T(std::forward<Args>(args)...);
        ::new (static_cast<void*>(r.storage)) T*(p);
    }
}

/// Destroys what the storage holds. A destructor that throws (declared noexcept(false)) is
/// contained and counted in destructor_exceptions(): the scheduler must outlive its tasks'
/// captures.
template <class T, bool Inline = fits_inline<T>> void storage_destroy(TaskRecord& r) noexcept {
    auto destroy = [&] {
        if constexpr (Inline) {
            storage_as<T, Inline>(r)->~T();
        } else {
            delete storage_as<T, Inline>(r);
        }
    };
    if constexpr (std::is_nothrow_destructible_v<T>) {
        destroy();
    } else {
        try {
            destroy();
        } catch (...) {
            destructor_exceptions().fetch_add(1, std::memory_order_relaxed);
        }
    }
}

/// storage_destroy that hands a destructor's exception back instead of only counting it.
template <class T, bool Inline = fits_inline<T>>
std::exception_ptr storage_destroy_reporting(TaskRecord& r) noexcept {
    if constexpr (std::is_nothrow_destructible_v<T>) {
        storage_destroy<T, Inline>(r);
        return nullptr;
    } else {
        try {
            if constexpr (Inline)
                storage_as<T, Inline>(r)->~T();
            else
                delete storage_as<T, Inline>(r);
        } catch (...) {
            destructor_exceptions().fetch_add(1, std::memory_order_relaxed);
            return std::current_exception();
        }
        return nullptr;
    }
}

template <class T> void delete_contained(T* p) noexcept {
    if constexpr (std::is_nothrow_destructible_v<T>) {
        delete p;
    } else {
        try {
            delete p;
        } catch (...) {
            destructor_exceptions().fetch_add(1, std::memory_order_relaxed);
        }
    }
}

/// The type-erased manager of a record holding an F (inline, or on the heap when !Inline).
/// run: runs one attempt (context: Attempt*). On success the callable is destroyed and the value
/// takes its place; on failure the callable stays for a retry and the exception is returned; if
/// the watchdog took the attempt over, the outcome is dropped (Attempt::abandoned) and the record
/// is left alone: it belongs to the retry now.
template <class F, bool Inline = fits_inline<F>>
std::exception_ptr manage(ManagerOp op, TaskRecord& r, void* context) {
    using R = typename CallableTraits<F>::result;
    switch (op) {
    case ManagerOp::relocate: {
        // Moves the callable into another record (replay of a dead letter).
        auto& to = *static_cast<TaskRecord*>(context);
        if constexpr (std::is_move_constructible_v<F>) {
            try {
                storage_emplace<F, Inline>(to, std::move(*storage_as<F, Inline>(r)));
            } catch (...) {
                return std::current_exception();
            }
            to.manager = r.manager;
            to.content = Content::callable;
            to.flags = static_cast<std::uint8_t>(r.flags & record_detachable);
            storage_destroy<F, Inline>(r);
            r.content = Content::none;
            return nullptr;
        } else {
            return std::make_exception_ptr(std::logic_error("ax: callable is not movable"));
        }
    }
    case ManagerOp::destroy:
        if (r.content == Content::callable) {
            storage_destroy<F, Inline>(r);
        } else if constexpr (!std::is_void_v<R>) {
            if (r.content == Content::value)
                storage_destroy<R>(r);
        }
        return nullptr;
    case ManagerOp::clone:
    case ManagerOp::adopt:
    case ManagerOp::drop:
        if constexpr (!Inline && detachable_v<F>) {
            try {
                if (op == ManagerOp::clone) {
                    *static_cast<void**>(context) = new F(*storage_as<F, Inline>(r));
                } else if (op == ManagerOp::adopt) {
                    ::new (static_cast<void*>(r.storage)) F*(static_cast<F*>(context));
                } else {
                    delete_contained(static_cast<F*>(context));
                }
            } catch (...) {
                return std::current_exception();
            }
            return nullptr;
        } else {
            return std::make_exception_ptr(std::logic_error("ax: callable is not detachable"));
        }
    case ManagerOp::run:
        break;
    }
    auto& a = *static_cast<Attempt*>(context);
    // Read before the claim word is published: after that the watchdog may replace the pointer.
    F* f = storage_as<F, Inline>(r);
    if (a.publish()) {
        // shutdown(cancel) began after try_start's check and before cancel_all could see the
        // claim word: cancel ourselves as cancel() would (nothing can have set ending_bit yet).
        r.state.fetch_or(cancel_requested_bit, std::memory_order_acq_rel);
        r.request_stop();
    }
    // The watchdog took over: the stuck body's copy is ours to free, the record is not ours.
    auto abandon = [&]() -> std::exception_ptr {
        if constexpr (!Inline)
            delete_contained(f);
        a.abandoned = true;
        return nullptr;
    };
    auto call = [&]() -> decltype(auto) {
        if constexpr (CallableTraits<F>::takes_context) {
            return std::invoke(*f, *a.ctx);
        } else {
            return std::invoke(*f);
        }
    };
    // An attempt the watchdog timed out has failed, whatever it returns: keep the callable
    // for the retry and report the timeout instead of committing a value.
    auto timed_out = [&r] {
        return (r.state.load(std::memory_order_acquire) & timed_out_bit) != 0;
    };
    try {
        if constexpr (std::is_void_v<R>) {
            call();
            if (!a.keep())
                return abandon();
            if (timed_out())
                return std::make_exception_ptr(TaskTimedOut(r.timeout_ms));
            a.destructor_error = storage_destroy_reporting<F, Inline>(r);
            r.content = Content::none;
        } else {
            R value = call();
            if (!a.keep())
                return abandon();
            if (timed_out())
                return std::make_exception_ptr(TaskTimedOut(r.timeout_ms));
            a.destructor_error = storage_destroy_reporting<F, Inline>(r);
            r.content = Content::none;
            storage_emplace<R>(r, std::move(value));
            r.content = Content::value;
        }
        return nullptr;
    } catch (...) {
        if (!a.keep())
            return abandon();
        return std::current_exception();
    }
}

/// Constructs `f` in the record with the right manager: on the heap, copyable, when a timeout
/// makes a takeover possible and the callable allows it; else the usual layout.
template <class Fn, class F> void place_plain(TaskRecord& r, F&& f, bool detachable) {
    if constexpr (detachable_v<Fn>) {
        if (detachable) {
            storage_emplace<Fn, false>(r, std::forward<F>(f));
            r.manager = &manage<Fn, false>;
            r.content = Content::callable;
            r.flags = static_cast<std::uint8_t>(r.flags | record_detachable);
            return;
        }
    }
    storage_emplace<Fn>(r, std::forward<F>(f));
    r.manager = &manage<Fn>;
    r.content = Content::callable;
}

/// Constructs `f` in the record: a coroutine task's factory, or a plain callable.
template <class Fn, class F> void place_callable(TaskRecord& r, F&& f, bool detachable) {
    if constexpr (CallableTraits<Fn>::coroutine) {
        (void)detachable; // a suspended frame cannot run twice: never taken over
        place_coroutine<Fn>(r, std::forward<F>(f));
        return;
    } else {
        place_plain<Fn>(r, std::forward<F>(f), detachable);
    }
}

/// Admits `f` through `host` and wraps the result in a handle.
template <class F>
auto submit_via(TaskHost& host, F&& f, const SubmitOptions& o, bool child, const TaskId* deps,
                std::size_t ndeps)
    -> Expected<TaskHandle<typename CallableTraits<std::decay_t<F>>::result>> {
    using Fn = std::decay_t<F>;
    using R = typename CallableTraits<Fn>::result;
    static_assert(!std::is_reference_v<R>, "ax: a task may not return a reference");
    auto place = [&f](TaskRecord& r, bool detachable) {
        place_callable<Fn>(r, std::forward<F>(f), detachable);
    };
    TaskId id;
    if (auto e =
            host.admit_erased(o, id, /*with_handle=*/true, child, deps, ndeps, make_placer(place)))
        return std::move(*e);
    const auto& slab = host.task_slab();
    return TaskHandle<R>(slab, &slab->at(id.index()), id);
}

/// when_all for the scheduler and for task contexts: a task holding `handles` that becomes
/// runnable when all of them are terminal.
template <class R, class F>
auto submit_join(TaskHost& host, bool child, std::vector<TaskHandle<R>> handles, F&& f,
                 const SubmitOptions& o) {
    using Fn = std::decay_t<F>;
    static_assert(std::is_invocable_v<Fn&, std::vector<TaskHandle<R>>&>,
                  "ax: when_all's callable must accept std::vector<ax::TaskHandle<R>>&");
    using Out = std::invoke_result_t<Fn&, std::vector<TaskHandle<R>>&>;
    std::vector<TaskId> deps;
    deps.reserve(handles.size());
    for (const auto& h : handles) {
        if (!h.valid() || HandleAccess::slab(h) != host.task_slab().get())
            return Expected<TaskHandle<Out>>(
                SubmitError{Errc::invalid_options,
                            0,
                            0,
                            {},
                            "when_all needs valid handles of tasks of this scheduler"});
        deps.push_back(h.id());
    }
    auto join = [fn = Fn(std::forward<F>(f)), hs = std::move(handles)]() mutable -> Out {
        return fn(hs);
    };
    return submit_via(host, std::move(join), o, child, deps.data(), deps.size());
}

} // namespace detail

template <class F>
auto TaskContext::submit(F&& f, const SubmitOptions& options)
    -> Expected<TaskHandle<typename detail::CallableTraits<std::decay_t<F>>::result>> {
    return detail::submit_via(*host_, std::forward<F>(f), options, /*child=*/true, nullptr, 0);
}

template <class R, class F>
auto TaskContext::when_all(std::vector<TaskHandle<R>> handles, F&& f,
                           const SubmitOptions& options) {
    return detail::submit_join(*host_, /*child=*/true, std::move(handles), std::forward<F>(f),
                               options);
}

} // namespace ax
