// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include "errors.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

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
};

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
/// Bits that survive every non-terminal state change.
inline constexpr std::uint32_t sticky_bits = has_waiter_bit | has_dependents_bit;

/// TaskRecord::flags.
inline constexpr std::uint8_t record_child = 1; ///< A subtask: queued in the subtask lane.
/// The callable lives on the heap and can be copied, so a timed-out attempt stuck in its body
/// can be taken over: the retry runs on a copy while the stuck body keeps the original.
inline constexpr std::uint8_t record_detachable = 2;

/// Value of a worker's claim word when it runs no attempt.
inline constexpr std::uint64_t no_attempt = UINT64_MAX;

/// Rarely needed, variable-sized fields, allocated the first time a slot needs them and reused by
/// every later task of the slot, so steady-state submits do not allocate.
/// One failed attempt, as the dead-letter list reports it.
struct AttemptFailure {
    std::uint32_t attempt = 0;
    std::string type;    ///< Exception type ("std::runtime_error", "int", "ax::TaskTimedOut").
    std::string message; ///< what(), or a description for non-std exceptions.
    std::int64_t started_ns = 0;
    std::int64_t ended_ns = 0;
};

struct TaskExtras {
    std::string name;
    std::string last_error;
    std::string last_error_type;
    /// Every failed attempt of the current series.
    std::vector<AttemptFailure> failures;
    /// What the handle rethrows once the task is dead-lettered.
    std::exception_ptr final_error;
};

using Manager = std::exception_ptr (*)(ManagerOp, TaskRecord&, void* context);

/// Bytes of a capture (or result) stored inline in the task record.
inline constexpr std::size_t small_buffer_size = 40;

/// One task's record: 128 bytes, two cache lines, in a slab. It carries the callable (inline when
/// it fits small_buffer_size), then the result or the final exception in the same bytes.
struct alignas(64) TaskRecord {
    Manager manager = nullptr;
    /// TaskState in the low byte, plus cancel_requested_bit and has_waiter_bit.
    std::atomic<std::uint32_t> state{0};
    /// Owners: the scheduler until the task leaves history, each handle, each transient pin.
    std::atomic<std::uint32_t> refs{0};
    std::atomic<std::uint32_t> generation{1};
    /// Link for the free list and for the priority lanes (slot index + 1; 0 ends a list).
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
    std::stop_source stop{std::nostopstate};
    TaskExtras* extras = nullptr;
    Priority priority = Priority::normal;
    Content content = Content::none;
    /// Guards extras->last_error, which a worker writes while query reads.
    std::atomic<bool> extras_lock{false};
    /// record_child, record_detachable; written at admission only.
    std::uint8_t flags = 0;
    std::uint8_t reserved_[4] = {};

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
        if (!stop.stop_possible()) {
            try {
                stop = std::stop_source();
            } catch (...) {
                unlock_extras();
                throw;
            }
            if ((state.load(std::memory_order_acquire) & stop_bits) != 0)
                stop.request_stop();
        }
        auto token = stop.get_token();
        unlock_extras();
        return token;
    }
    /// Drops a stop state whose stop was requested, so the next attempt gets a fresh token.
    void renew_stop() noexcept {
        lock_extras();
        if (stop.stop_possible() && stop.stop_requested())
            stop = std::stop_source(std::nostopstate);
        unlock_extras();
    }
    /// Requests stop on the token handed out, if any. Call after setting a stop bit.
    void request_stop() noexcept {
        lock_extras();
        if (stop.stop_possible())
            stop.request_stop();
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
static_assert(sizeof(TaskRecord) == 128, "TaskRecord is sized to two cache lines");

/// Whether a T is stored inline in a record's storage.
template <class T>
inline constexpr bool fits_inline = sizeof(T) <= small_buffer_size &&
                                    alignof(T) <= 16 && std::is_nothrow_move_constructible_v<T>;

/// Owns every task record: fixed-size chunks that never move, a lock-free free list of slot
/// indices, and the striped mutex/condvar table that blocking waits park on. Shared by the
/// scheduler and every handle, so a handle outlives its scheduler safely.
class TaskSlab {
  public:
    static constexpr std::uint32_t chunk_bits = 10;
    static constexpr std::uint32_t chunk_size = 1u << chunk_bits;
    static constexpr std::uint32_t max_chunks = 1u << 14;
    static constexpr std::size_t wait_stripes = 64;

    TaskSlab() : chunks_(new std::atomic<TaskRecord*>[max_chunks]) {
        for (std::uint32_t i = 0; i < max_chunks; ++i)
            chunks_[i].store(nullptr, std::memory_order_relaxed);
    }
    TaskSlab(const TaskSlab&) = delete;
    TaskSlab& operator=(const TaskSlab&) = delete;
    ~TaskSlab() {
        const auto n = chunk_count_.load(std::memory_order_acquire);
        for (std::uint32_t i = 0; i < n; ++i)
            delete[] chunks_[i].load(std::memory_order_relaxed);
    }

    [[nodiscard]] TaskRecord& at(std::uint32_t index) const noexcept {
        return chunks_[index >> chunk_bits].load(
            std::memory_order_acquire)[index & (chunk_size - 1)];
    }

    /// A free slot with refs = 0 and a fresh generation, or nullopt when the slab is exhausted.
    std::optional<std::uint32_t> acquire() {
        for (;;) {
            auto head = free_head_.load(std::memory_order_acquire);
            while (static_cast<std::uint32_t>(head) != 0) {
                const std::uint32_t index = static_cast<std::uint32_t>(head) - 1;
                const std::uint32_t next = at(index).next.load(std::memory_order_relaxed);
                const std::uint64_t tagged = ((head >> 32) + 1) << 32 | next;
                if (free_head_.compare_exchange_weak(head, tagged, std::memory_order_acquire,
                                                     std::memory_order_acquire))
                    return index;
            }
            if (!grow())
                return std::nullopt;
        }
    }

    /// Drops one reference; the last one recycles the slot.
    void release(std::uint32_t index) noexcept {
        TaskRecord& r = at(index);
        if (r.refs.fetch_sub(1, std::memory_order_acq_rel) != 1)
            return;
        recycle(index, r);
    }

    /// release() for many slots; recycled ones go back to the free list with a single CAS, so
    /// workers returning slots in batches barely touch the cache line producers allocate from.
    void release_many(const std::uint32_t* indices, std::size_t n) noexcept {
        std::uint32_t first = 0; // chain of recycled slots, as index + 1
        std::uint32_t last = 0;
        for (std::size_t k = 0; k < n; ++k) {
            const std::uint32_t index = indices[k];
            TaskRecord& r = at(index);
            if (r.refs.fetch_sub(1, std::memory_order_acq_rel) != 1)
                continue;
            reset(r);
            r.next.store(first, std::memory_order_relaxed);
            if (first == 0)
                last = index + 1;
            first = index + 1;
        }
        if (first == 0)
            return;
        TaskRecord& tail = at(last - 1);
        auto head = free_head_.load(std::memory_order_relaxed);
        std::uint64_t tagged;
        do {
            tail.next.store(static_cast<std::uint32_t>(head), std::memory_order_relaxed);
            tagged = ((head >> 32) + 1) << 32 | first;
        } while (!free_head_.compare_exchange_weak(head, tagged, std::memory_order_release,
                                                   std::memory_order_relaxed));
    }

    /// Pins the live record of `id` (refs + 1) or returns nullptr when the ID is stale.
    TaskRecord* try_pin(TaskId id) noexcept {
        if (!id.valid())
            return nullptr;
        const std::uint32_t chunk = id.index() >> chunk_bits;
        if (chunk >= chunk_count_.load(std::memory_order_acquire))
            return nullptr;
        TaskRecord& r = at(id.index());
        auto refs = r.refs.load(std::memory_order_acquire);
        do {
            if (refs == 0)
                return nullptr;
        } while (!r.refs.compare_exchange_weak(refs, refs + 1, std::memory_order_acq_rel,
                                               std::memory_order_acquire));
        if (r.generation.load(std::memory_order_acquire) != id.generation()) {
            release(id.index());
            return nullptr;
        }
        return &r;
    }

    /// Blocks until the record's state is terminal or `deadline` passes; true if terminal.
    template <class Deadline>
    bool wait_terminal(TaskRecord& r, std::uint32_t index, const Deadline* deadline) {
        if (is_terminal(r.load_state()))
            return true;
        auto& stripe = stripes_[index % wait_stripes];
        std::unique_lock lock(stripe.mutex);
        for (;;) {
            const auto s = r.state.fetch_or(has_waiter_bit, std::memory_order_acq_rel);
            if (is_terminal(static_cast<TaskState>(s & state_mask)))
                return true;
            if (deadline == nullptr) {
                stripe.cv.wait(lock);
            } else if (stripe.cv.wait_until(lock, *deadline) == std::cv_status::timeout) {
                return is_terminal(r.load_state());
            }
        }
    }

    /// Wakes threads blocked in wait_terminal on this record. Call after a terminal state whose
    /// previous value carried has_waiter_bit was published.
    void notify_waiters(std::uint32_t index) noexcept {
        auto& stripe = stripes_[index % wait_stripes];
        { std::lock_guard lock(stripe.mutex); }
        stripe.cv.notify_all();
    }

    /// Records ever created (slab size), for memory accounting.
    [[nodiscard]] std::size_t capacity() const noexcept {
        return std::size_t{chunk_count_.load(std::memory_order_acquire)} * chunk_size;
    }

  private:
    bool grow() {
        std::lock_guard lock(grow_mutex_);
        if (static_cast<std::uint32_t>(free_head_.load(std::memory_order_acquire)) != 0)
            return true;
        const auto n = chunk_count_.load(std::memory_order_relaxed);
        if (n == max_chunks)
            return false;
        auto* chunk = new TaskRecord[chunk_size];
        chunks_[n].store(chunk, std::memory_order_release);
        chunk_count_.store(n + 1, std::memory_order_release);
        // Push in reverse so low indices come out first (friendlier to caches).
        for (std::uint32_t i = chunk_size; i-- > 0;)
            push_free(n * chunk_size + i);
        return true;
    }

    void push_free(std::uint32_t index) noexcept {
        TaskRecord& r = at(index);
        auto head = free_head_.load(std::memory_order_relaxed);
        std::uint64_t tagged;
        do {
            r.next.store(static_cast<std::uint32_t>(head), std::memory_order_relaxed);
            tagged = ((head >> 32) + 1) << 32 | (index + 1);
        } while (!free_head_.compare_exchange_weak(head, tagged, std::memory_order_release,
                                                   std::memory_order_relaxed));
    }

    void recycle(std::uint32_t index, TaskRecord& r) noexcept {
        reset(r);
        push_free(index);
    }

    /// Returns a record to its free shape: content destroyed, strings kept for reuse, a new
    /// generation so stale IDs stop matching.
    static void reset(TaskRecord& r) noexcept {
        r.destroy_content();
        // Dropping the stop state (instead of reusing it) keeps a token an old body kept from
        // seeing the next task's cancel.
        if (r.stop.stop_possible())
            r.stop = std::stop_source(std::nostopstate);
        if (r.extras != nullptr) {
            r.extras->name.clear();
            r.extras->last_error.clear();
            r.extras->last_error_type.clear();
            r.extras->failures.clear();
            r.extras->final_error = nullptr;
        }
        r.state.store(0, std::memory_order_relaxed);
        r.flags = 0;
        auto g = r.generation.load(std::memory_order_relaxed) + 1;
        if (g == 0)
            g = 1;
        r.generation.store(g, std::memory_order_release);
    }

    struct alignas(64) Stripe {
        std::mutex mutex;
        std::condition_variable cv;
    };

    std::unique_ptr<std::atomic<TaskRecord*>[]> chunks_;
    std::atomic<std::uint32_t> chunk_count_{0};
    std::atomic<std::uint64_t> free_head_{0};
    std::mutex grow_mutex_;
    Stripe stripes_[wait_stripes];
};

} // namespace detail

template <class R> class TaskHandle;
class TaskContext;
namespace detail {
template <class F> struct CallableTraits;
}

namespace detail {

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

  protected:
    TaskHost() = default;
    ~TaskHost() = default;
    TaskHost(const TaskHost&) = default;
    TaskHost& operator=(const TaskHost&) = default;
};

/// The scheduler whose worker the current thread is (null elsewhere): where a blocking wait
/// helps.
inline thread_local TaskHost* current_host = nullptr;

/// Exceptions thrown by task callables' destructors (contained; process-wide count).
inline std::atomic<std::uint64_t>& destructor_exceptions() noexcept {
    static std::atomic<std::uint64_t> n{0};
    return n;
}

/// One attempt as the manager runs it. The worker's claim word holds `token` while the body runs;
/// whoever swaps it to no_attempt first owns the attempt's ending: the worker when the body
/// returns, or the watchdog when it takes over a timed-out attempt whose body ignores its stop.
struct Attempt {
    TaskContext* ctx = nullptr;
    std::atomic<std::uint64_t>* claim = nullptr;
    std::uint64_t token = no_attempt;
    /// Claim word before publish (a parent's token while a subtask runs nested in its wait).
    std::uint64_t saved = no_attempt;
    /// Set by the manager: the watchdog took the attempt over; the outcome is discarded.
    bool abandoned = false;
    /// Set by the manager: the callable's destructor threw after a successful run (contained;
    /// the task still succeeded).
    std::exception_ptr destructor_error;

    void publish() noexcept { saved = claim->exchange(token, std::memory_order_acq_rel); }
    /// Claims the ending for the worker; false if the watchdog already took it.
    bool keep() noexcept {
        std::uint64_t t = token;
        return claim->compare_exchange_strong(t, no_attempt, std::memory_order_acq_rel);
    }
    /// Gives the claim word back to the enclosing attempt, if any.
    void restore() noexcept { claim->store(saved, std::memory_order_release); }
};

} // namespace detail

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
    /// Whether a stop was requested; cheaper than stop_token() (one atomic load).
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

namespace detail {

/// The return type of a callable taken by submit: it may accept a TaskContext& or nothing.
template <class F> struct CallableTraits {
    static constexpr bool takes_context = std::is_invocable_v<F&, TaskContext&>;
    static constexpr bool takes_nothing = std::is_invocable_v<F&>;
    static_assert(takes_context || takes_nothing,
                  "ax: a task must be callable as f(ax::TaskContext&) or f()");
    using result = typename std::conditional_t<takes_context, std::invoke_result<F&, TaskContext&>,
                                               std::invoke_result<F&>>::type;
};

/// A callable the scheduler may copy to retry a timed-out attempt while the stuck body still
/// runs on the original: copyable, and callable as const (so copying it while the body runs
/// reads what the body only reads).
template <class F>
inline constexpr bool detachable_v = std::is_copy_constructible_v<F> &&
                                     (std::is_invocable_v<const F&, TaskContext&> ||
                                      std::is_invocable_v<const F&>);

template <class T, bool Inline = fits_inline<T>> T* storage_as(TaskRecord& r) noexcept {
    if constexpr (Inline) {
        return std::launder(reinterpret_cast<T*>(r.storage));
    } else {
        return *std::launder(reinterpret_cast<T**>(r.storage));
    }
}

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
    a.publish();
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
template <class Fn, class F> void place_callable(TaskRecord& r, F&& f, bool detachable) {
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

} // namespace detail

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
    /// When waiting_retry: when the next attempt becomes due.
    TimePoint retry_due{};
    std::string name;
    /// Text of the latest attempt's error ("" if none).
    std::string last_error;
    /// Exception type of the latest attempt's error ("std::runtime_error", "int", ...).
    std::string last_error_type;
};

namespace detail {

/// Wraps a placement lambda as a Placer (the lambda outlives the call).
template <class L> Placer make_placer(L& place) noexcept {
    return Placer{
        [](void* self, TaskRecord& r, bool detachable) { (*static_cast<L*>(self))(r, detachable); },
        &place};
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

template <> struct std::hash<ax::TaskId> {
    std::size_t operator()(ax::TaskId id) const noexcept {
        return std::hash<std::uint64_t>{}(id.value);
    }
};
