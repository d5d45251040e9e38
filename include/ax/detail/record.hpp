// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include "../task.hpp"
#include "../tuning.hpp"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <new>
#include <optional>
#include <stop_token>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace ax {
namespace detail {

struct TaskRecord;

/// Operations a task's type-erased manager knows; the manager is the only code that knows the
/// callable's and the result's types.
/// run: context is an Attempt*. relocate: context is the destination record. clone: context is
/// a void** receiving a heap copy of the callable (detachable records only). adopt: context is
/// such a copy, which replaces the callable pointer in the record. drop: deletes such a copy.
enum class ManagerOp : std::uint8_t { run, destroy, relocate, clone, adopt, drop };

/// What the storage of a record holds.
enum class Content : std::uint8_t { none, callable, value };

/// Bits of TaskRecord::state besides the TaskState in the low byte.
inline constexpr std::uint32_t state_mask = 0xffu;
inline constexpr std::uint32_t cancel_requested_bit = 1u << 8;
inline constexpr std::uint32_t has_waiter_bit = 1u << 9;
/// Set by the watchdog when the running attempt outlived its timeout; cleared for the next one.
inline constexpr std::uint32_t timed_out_bit = 1u << 10;
/// Either reason to stop the running attempt.
inline constexpr std::uint32_t stop_bits = cancel_requested_bit | timed_out_bit;
/// Some when_all join waits for this task's end (its entry is in the scheduler's join table).
inline constexpr std::uint32_t has_dependents_bit = 1u << 11;
/// The running attempt's worker committed to the dead-letter ending: cancel() is too late.
inline constexpr std::uint32_t ending_bit = 1u << 12;
/// The scheduler forgot this task: it left the bounded history, or its dead letter was discarded.
/// query() answers nullopt for it although a handle may still hold the record (set on a terminal
/// state, or by a discard between a dead letter's listing and its terminal state, which keeps
/// it; cleared when the slot is recycled).
inline constexpr std::uint32_t forgotten_bit = 1u << 13;
/// A coroutine task (ax::Task) that suspended: its next run resumes the suspended frame and is
/// part of the same attempt (no new attempt is counted, no on_start hook). Set with the
/// running -> pending/queued step of a suspension, cleared when the worker takes it again.
inline constexpr std::uint32_t resumed_bit = 1u << 14;
/// The watchdog is calling Hooks::on_timeout for the running attempt: the attempt's worker holds
/// back its own events (exception, retry, dead letter, success) until the hook has returned, so
/// a consumer of the event stream never sees the timeout after the task's terminal event.
inline constexpr std::uint32_t timeout_hook_bit = 1u << 15;
/// Held back by its group (over the limit, or the breaker open): the task was counted out of the
/// shared queue's admission count and into its group's (GroupState::held) when it was first
/// parked, so a group's backlog never takes room from other groups. Cleared when the task starts;
/// whoever ends it queued (start or cancel) gives the group's count back instead of the queue's.
inline constexpr std::uint32_t parked_bit = 1u << 16;
/// The attempt's worker has its outcome (the body returned or threw) and is concluding it:
/// the watchdog no longer times the attempt out (watchdog_verdict answers none), so no timeout
/// event can land between the worker's own events (exception, retry, dead letter, success).
/// Set by one fetch_or in execute() only for a task with a timeout (the only kind the watchdog
/// flags), never on a coroutine's suspension (the attempt goes on); cleared by the CAS that
/// ends the attempt (waiting_retry keeps only sticky_bits, a terminal state none of it). Its
/// fetch_or and the watchdog's CAS are ordered on the state word: either the watchdog flagged
/// first (the worker sees timed_out_bit and waits for the on_timeout hook) or it flags nothing.
inline constexpr std::uint32_t concluding_bit = 1u << 17;
/// Bits that survive every non-terminal state change.
inline constexpr std::uint32_t sticky_bits = has_waiter_bit | has_dependents_bit;

/// TaskRecord::flags.
inline constexpr std::uint8_t record_child = 1; ///< A subtask: queued in the subtask lane.
/// The callable lives on the heap and can be copied, so a timed-out attempt stuck in its body
/// can be taken over: the retry runs on a copy while the stuck body keeps the original.
inline constexpr std::uint8_t record_detachable = 2;

/// Value of a worker's claim word when it runs no attempt.
inline constexpr std::uint64_t no_attempt = UINT64_MAX;

/// One failed attempt, as the dead-letter list reports it.
struct AttemptFailure {
    std::uint32_t attempt = 0;
    std::string type;    ///< Exception type ("std::runtime_error", "int", "ax::TaskTimedOut").
    std::string message; ///< what(), or a description for non-std exceptions.
    std::int64_t started_ns = 0;
    std::int64_t ended_ns = 0;
};

/// Rarely needed, variable-sized fields, allocated the first time a slot needs them and reused by
/// every later task of the slot, so steady-state submits do not allocate. Guarded by the record's
/// extras flag (TaskRecord::lock_extras).
struct TaskExtras {
    std::string name;
    std::string last_error;
    std::string last_error_type;
    /// Every failed attempt of the current series.
    std::vector<AttemptFailure> failures;
    /// What the handle rethrows once the task is dead-lettered.
    std::exception_ptr final_error;
    /// The running attempt's stop state, made the first time its body asks for a token (most
    /// tasks never do, so it lives here rather than in every record).
    std::stop_source stop{std::nostopstate};
};

using Manager = std::exception_ptr (*)(ManagerOp, TaskRecord&, void* context);

/// Bytes of a capture (or result) stored inline in the task record (see Tuning).
inline constexpr std::size_t small_buffer_size = Tuning::small_buffer_size;

/// One task's record: 112 bytes in a slab. It carries the callable (inline when it fits
/// small_buffer_size), then the result or the final exception in the same bytes. The header and
/// the inline buffer are its first 64 bytes; rare fields live in TaskExtras. 112 rather than 128:
/// a queued task costs 112 B, not 128, and at 16-byte alignment a record still spans two cache
/// lines half of the time (three otherwise), against always two at 128.
struct alignas(16) TaskRecord {
    Manager manager = nullptr;
    /// TaskState in the low byte, plus the flags above: cancel_requested_bit, has_waiter_bit,
    /// timed_out_bit, has_dependents_bit, ending_bit, forgotten_bit, resumed_bit,
    /// timeout_hook_bit, parked_bit and concluding_bit.
    std::atomic<std::uint32_t> state{0};
    /// Owners: the scheduler until the task leaves history, each handle, each transient pin.
    std::atomic<std::uint32_t> refs{0};
    std::atomic<std::uint32_t> generation{1};
    /// Link for the standby list, the priority lanes, the subtask lane and group parking lists
    /// (slot index + 1; 0 ends a list). Free slots are not chained (TaskSlab keeps indices).
    std::atomic<std::uint32_t> next{0};
    std::uint32_t timeout_ms = 0;
    std::uint16_t group = 0;
    /// Attempts started (a worker writes it while query reads it).
    std::atomic<std::uint8_t> attempts{0};
    std::uint8_t max_retries = 0;

    alignas(16) unsigned char storage[small_buffer_size];

    /// Times in nanoseconds of the scheduler's clock (atomic: query reads them while a worker
    /// writes them).
    std::atomic<std::int64_t> enqueue_ns{0};
    std::atomic<std::int64_t> start_ns{0};
    std::atomic<std::int64_t> finish_ns{0};
    /// While running: time of the last heartbeat (or of the start). While waiting_retry: due time.
    std::atomic<std::int64_t> mark_ns{0};
    TaskExtras* extras = nullptr;
    Priority priority = Priority::normal;
    Content content = Content::none;
    /// Guards extras->last_error, which a worker writes while query reads.
    std::atomic<bool> extras_lock{false};
    /// record_child, record_detachable; written at admission only.
    std::uint8_t flags = 0;

    TaskRecord() = default;
    TaskRecord(const TaskRecord&) = delete;
    TaskRecord& operator=(const TaskRecord&) = delete;
    ~TaskRecord() {
        destroy_content();
        delete extras;
    }

    [[nodiscard]] TaskState load_state(std::memory_order mo = std::memory_order_acquire) const {
        return static_cast<TaskState>(state.load(mo) & state_mask);
    }
    void destroy_content() noexcept {
        if (content == Content::none)
            return;
        manager(ManagerOp::destroy, *this, nullptr);
        content = Content::none;
    }
    /// The exception a dead-lettered task's handle rethrows (written before the terminal state is
    /// published, never changed after).
    [[nodiscard]] std::exception_ptr final_error() const noexcept {
        return extras != nullptr ? extras->final_error : nullptr;
    }
    TaskExtras& ensure_extras() {
        if (extras == nullptr)
            extras = new TaskExtras();
        return *extras;
    }
    void lock_extras() noexcept {
        while (extras_lock.exchange(true, std::memory_order_acquire)) {
            while (extras_lock.load(std::memory_order_relaxed)) {
            }
        }
    }
    void unlock_extras() noexcept { extras_lock.store(false, std::memory_order_release); }
    /// The running task's stop token, creating the stop state on first use (under the extras
    /// lock, which request_stop() takes too, so a cancel can never miss a token made meanwhile).
    /// nullopt if `detached()`, checked under the same lock, says the attempt was taken over (the
    /// state here may already be the retry's).
    template <class Detached> std::optional<std::stop_token> stop_token(Detached&& detached) {
        lock_extras();
        if (detached()) {
            unlock_extras();
            return std::nullopt;
        }
        std::stop_token token;
        try {
            std::stop_source& stop = ensure_extras().stop;
            if (!stop.stop_possible()) {
                stop = std::stop_source();
                if ((state.load(std::memory_order_acquire) & stop_bits) != 0)
                    stop.request_stop();
            }
            token = stop.get_token();
        } catch (...) {
            unlock_extras();
            throw;
        }
        unlock_extras();
        return token;
    }
    /// Drops a stop state whose stop was requested, so the next attempt gets a fresh token.
    void renew_stop() noexcept {
        lock_extras();
        if (extras != nullptr && extras->stop.stop_possible() && extras->stop.stop_requested())
            extras->stop = std::stop_source(std::nostopstate);
        unlock_extras();
    }
    /// Requests stop on the token handed out, if any. Call after setting a stop bit.
    void request_stop() noexcept {
        lock_extras();
        if (extras != nullptr && extras->stop.stop_possible())
            extras->stop.request_stop();
        unlock_extras();
    }
    /// Records a failed attempt for query() and the dead-letter list.
    void record_failure(AttemptFailure f) {
        lock_extras();
        try {
            TaskExtras& x = ensure_extras();
            x.last_error = f.message;
            x.last_error_type = f.type;
            x.failures.push_back(std::move(f));
        } catch (...) {
        }
        unlock_extras();
    }
    void set_final_error(std::exception_ptr e) {
        lock_extras();
        try {
            ensure_extras().final_error = std::move(e);
        } catch (...) {
        }
        unlock_extras();
    }
};
static_assert(sizeof(TaskRecord) == 112, "TaskRecord is sized to 112 bytes (see above)");
static_assert(offsetof(TaskRecord, storage) + small_buffer_size == 64,
              "the header and the inline buffer fill the record's first 64 bytes");

/// Asks for one cache line in a state that allows writing it. `__builtin_prefetch(p, 1)` only
/// becomes PREFETCHW where the compiler is told the processor has it (-mprfchw, not in a plain
/// x86-64 build): otherwise it is a read prefetch, the line arrives shared and the first store
/// still waits for the other core to give it up. Every x86-64 processor decodes PREFETCHW (as a
/// no-op on Intel before Broadwell), so it is issued directly.
inline void prefetch_for_write(const void* p) noexcept {
#if defined(__x86_64__)
    asm volatile("prefetchw %0" : : "m"(*static_cast<const char*>(p)));
#else
    __builtin_prefetch(p, 1);
#endif
}

/// Asks for every cache line `r` spans, for writing: a record is 112 bytes at 16-byte alignment,
/// so it spans two lines or three, and whoever touches one of its fields ends up touching the
/// last line too (the times, `extras`, `priority`, `content`, `flags`). A prefetch of the first
/// line alone left the others as demand misses, taken one after the other (docs/hot-path.md,
/// "Task records"). The middle address is redundant when the record spans two lines; a prefetch of
/// a line already here costs a cycle.
inline void prefetch_record(const TaskRecord& r) noexcept {
    const auto* p = reinterpret_cast<const char*>(&r);
    prefetch_for_write(p);
    prefetch_for_write(p + 64);
    prefetch_for_write(p + sizeof(TaskRecord) - 1);
}

/// Whether a T is stored inline in a record's storage.
template <class T>
inline constexpr bool fits_inline = sizeof(T) <= small_buffer_size &&
                                    alignof(T) <= 16 && std::is_nothrow_move_constructible_v<T>;

/// The storage of a record as a T (inline, or the pointer to it on the heap).
template <class T, bool Inline = fits_inline<T>> T* storage_as(TaskRecord& r) noexcept {
    if constexpr (Inline) {
        return std::launder(reinterpret_cast<T*>(r.storage));
    } else {
        return *std::launder(reinterpret_cast<T**>(r.storage));
    }
}

/// A time in nanoseconds of Clock as Clock's time_point.
template <class Clock> typename Clock::time_point to_time_point(std::int64_t ns) {
    return typename Clock::time_point(
        std::chrono::duration_cast<typename Clock::duration>(std::chrono::nanoseconds(ns)));
}

/// What query() reports of a pinned record (the caller holds a pin; the extras flag is taken for
/// the strings).
template <class Clock> TaskInfo<Clock> make_task_info(TaskRecord& r, TaskId id) {
    TaskInfo<Clock> info;
    const auto s = r.state.load(std::memory_order_acquire);
    info.id = id;
    info.state = static_cast<TaskState>(s & state_mask);
    info.cancel_requested = (s & cancel_requested_bit) != 0;
    info.timed_out = (s & timed_out_bit) != 0;
    info.timeout = std::chrono::milliseconds(r.timeout_ms);
    info.priority = r.priority;
    info.attempts = r.attempts.load(std::memory_order_relaxed);
    info.max_retries = r.max_retries;
    info.group = GroupId{r.group};
    info.enqueued = to_time_point<Clock>(r.enqueue_ns.load(std::memory_order_relaxed));
    info.started = to_time_point<Clock>(r.start_ns.load(std::memory_order_relaxed));
    info.finished = to_time_point<Clock>(r.finish_ns.load(std::memory_order_relaxed));
    if (info.state == TaskState::waiting_retry || info.state == TaskState::scheduled)
        info.retry_due = to_time_point<Clock>(r.mark_ns.load(std::memory_order_relaxed));
    r.lock_extras();
    if (r.extras != nullptr) {
        info.name = r.extras->name;
        info.last_error = r.extras->last_error;
        info.last_error_type = r.extras->last_error_type;
    }
    r.unlock_extras();
    return info;
}

} // namespace detail
} // namespace ax
