// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include "detail/futex.hpp"
#include "detail/spin_lock.hpp"
#include "detail/thread_stripe.hpp"
#include "priority_ring.hpp"
#include "task.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <utility>

namespace ax::detail {

/// Outcome of DoubleBufferQueue::try_push.
enum class Admission : std::uint8_t { admitted, full, busy, closed };

/// Counters the queue keeps under its own lock; read by the maintenance tick.
struct QueueCounters {
    std::uint64_t incoming = 0; ///< Tasks admitted (first attempts only).
    std::uint64_t rejected = 0; ///< Submits refused with full or busy.
    std::uint64_t requeued = 0; ///< Retries that re-entered the queue.
};

/// The seed's double-buffer queue (§3.2). Producers append slot indices to the standby list under
/// a mutex; the dispatcher takes the whole list in O(1) and sorts it into priority lanes. The
/// list is intrusive: slots are chained through the `next` link that Links provides (the record's
/// own field, free while a task waits here: it is in no lane), so the
/// queue holds no buffer sized to its capacity (it was queue_capacity x 4 B twice, reserved up
/// front) and never allocates. The lock is held for a bounds check and one link store (the old
/// tail to the new slot; the chain is ended once, at the swap).
///
/// The queue also owns admission: the per-priority count of tasks admitted but not yet started,
/// checked against capacity (ErrQueueFull) and the soft limit (ErrBusy, normal and low only).
/// The count is pushes (producers, under the lock) minus pops (workers, lock-free) on separate
/// cache lines; producers check against a stale count of pops, which over-estimates the length,
/// and read the workers' line only when that estimate reaches a limit.
///
/// Producers that want room park on `room_seq_` (a futex word, no lock): the pop that brings the
/// length down to room_mark() while `room_wanted_` is set wakes them all.
///
/// Lock it owns: `mutex_` (the queue spin lock) guards the standby list (`head_`, `tail_`,
/// `count_`), `standby_lanes_`,
/// `counters_`, `closed_`, `popped_seen_`, the writes of `pushed_` and `popped_hint_`, and the
/// links of the slots in the standby list.
template <class Links> class DoubleBufferQueue {
  public:
    /// A chain of slots as swap() hands it over (front: the oldest push).
    using Chain = IntrusiveFifo<Links>;
    static constexpr std::uint32_t none = Chain::none;

    /// Stripes of the pop count (a power of two): enough that a few workers rarely share one,
    /// few enough that a producer at a limit reads them all cheaply (one line each).
    static constexpr std::size_t pop_stripes = 4;

    DoubleBufferQueue(Links links, std::uint32_t capacity, std::uint32_t soft_limit)
        : links_(links), capacity_(capacity), soft_limit_(soft_limit) {}

    /// Appends `index` if admission allows. `queue_length` receives the length seen; `first`,
    /// if given, whether the standby list was empty (only such a push needs to wake a worker:
    /// the push that made the buffer non-empty already woke one, or found one awake, and that
    /// worker's swap takes every later push with it).
    Admission try_push(std::uint32_t index, Priority p, std::uint32_t& queue_length,
                       bool* first = nullptr) {
        std::lock_guard lock(mutex_);
        // Checked against an over-estimate first (this side's pushes less the pops last seen),
        // so a producer with room to spare never reads the line the workers' pops write; only
        // an estimate at a limit pays for the fresh count.
        std::uint32_t len = pushed_total_locked() - popped_seen_;
        if (len >= soft_limit_ || len >= capacity_) {
            popped_seen_ = popped_total();
            len = pushed_total_locked() - popped_seen_;
        }
        queue_length = len;
        if (closed_)
            return Admission::closed;
        if (len >= capacity_) {
            ++counters_.rejected;
            return Admission::full;
        }
        if (len >= soft_limit_ && p != Priority::high) {
            ++counters_.rejected;
            return Admission::busy;
        }
        const bool was_empty = append(index, p);
        if (first != nullptr)
            *first = was_empty;
        ++counters_.incoming;
        return Admission::admitted;
    }

    /// Appends without admission control: for tasks admitted before (retries), which must never
    /// be refused or dropped.
    void push_unchecked(std::uint32_t index, Priority p) {
        std::lock_guard lock(mutex_);
        append(index, p);
        ++counters_.requeued;
    }

    /// Refuses every later try_push (shutdown). Retries still enter through push_unchecked.
    /// Producers parked in wait_for_room() wake and see the refusal.
    void close() {
        {
            std::lock_guard lock(mutex_);
            closed_ = true;
        }
        wake_room();
    }

    /// Admits up to `n` tasks of priority `p` at once (post_many): under the lock, takes
    /// min(n, room) places (all `n` or none when `all_or_nothing`) and counts them queued, so
    /// the caller builds their records outside the lock and hands them over with
    /// append_reserved(). Returns the places taken; 0 with `why` (full, busy, closed) and
    /// `queue_length` the length seen.
    std::uint32_t try_reserve(std::uint32_t n, Priority p, bool all_or_nothing,
                              std::uint32_t& queue_length, Admission& why) {
        std::lock_guard lock(mutex_);
        popped_seen_ = popped_total();
        const std::uint32_t len = pushed_total_locked() - popped_seen_;
        queue_length = len;
        if (closed_) {
            why = Admission::closed;
            return 0;
        }
        const std::uint32_t limit = p == Priority::high ? capacity_ : soft_limit_;
        const std::uint32_t room = len >= limit ? 0 : limit - len;
        const std::uint32_t k = all_or_nothing ? (room >= n ? n : 0) : std::min(n, room);
        if (k == 0) {
            ++counters_.rejected;
            why = len >= capacity_ ? Admission::full : Admission::busy;
            return 0;
        }
        auto& c = pushed_[static_cast<std::size_t>(p)];
        c.store(c.load(std::memory_order_relaxed) + k, std::memory_order_release);
        popped_hint_.store(popped_seen_, std::memory_order_relaxed);
        counters_.incoming += k;
        why = Admission::admitted;
        return k;
    }

    /// Gives back `n` places try_reserve() took and no record filled (a record could not be
    /// built).
    void unreserve(std::uint32_t n, Priority p) {
        std::lock_guard lock(mutex_);
        auto& c = pushed_[static_cast<std::size_t>(p)];
        c.store(c.load(std::memory_order_relaxed) - n, std::memory_order_release);
        counters_.incoming -= n;
    }

    /// Appends `chain` (records for places try_reserve() took, linked front to back, priority
    /// `p`) in one step. Returns whether the standby list was empty (see try_push's `first`).
    bool append_reserved(Chain& chain, Priority p) {
        if (chain.empty())
            return false;
        std::lock_guard lock(mutex_);
        const bool was_empty = tail_ == none;
        if (was_empty)
            head_ = chain.front();
        else
            links_.set_next(tail_, chain.front());
        tail_ = chain.back();
        count_ += chain.size();
        standby_lanes_ |= 1u << static_cast<std::uint32_t>(p);
        if (was_empty)
            nonempty_.store(true, std::memory_order_release);
        return was_empty;
    }

    // ---- producers waiting for room (submit_wait / post_wait) ----------------------------------

    /// The length at or below which a parked producer is woken: half the soft limit, so that
    /// once woken it has room for a run of pushes and the workers still have half a queue of
    /// work while it comes back from the kernel.
    [[nodiscard]] std::uint32_t room_mark() const noexcept { return soft_limit_ / 2; }

    /// Parks the caller until the length may have dropped to room_mark() (a pop saw it there),
    /// close() or wake_room() ran, or `timeout` passed. Announce-then-check: the flag is set,
    /// then the length read (both seq_cst, against the pop's seq_cst count and flag read), so a
    /// pop either sees the flag or the caller sees the pop. Returns at once if there is room.
    void wait_for_room(std::chrono::nanoseconds timeout) {
        const std::uint32_t seq = room_seq_.load(std::memory_order_seq_cst);
        room_wanted_.store(true, std::memory_order_seq_cst);
        if (length() <= room_mark() || closed_seen())
            return;
        Futex::wait_tagged_for(room_seq_, seq, 0xffffffffu /* any */, timeout);
    }

    /// Wakes every producer parked in wait_for_room() (shutdown, a stop token).
    void wake_room() noexcept {
        room_wanted_.store(false, std::memory_order_seq_cst);
        room_seq_.fetch_add(1, std::memory_order_seq_cst);
        Futex::wake_all(room_seq_);
    }

    /// Counts a refusal decided without taking the lock (the fast pre-check of submit).
    void count_rejection() {
        std::lock_guard lock(mutex_);
        ++counters_.rejected;
    }

    /// Moves everything appended since the last swap into `out` (which must be empty), in push
    /// order; `lanes` receives the priorities among them (bit p = Priority p), so a caller
    /// that finds a single one can splice the chain whole. O(1) under the lock.
    bool swap(Chain& out, std::uint32_t& lanes) {
        if (!nonempty_.load(std::memory_order_acquire))
            return false;
        std::lock_guard lock(mutex_);
        if (tail_ != none)
            links_.set_next(tail_, none); // the one link a push leaves unset
        out = Chain::adopt(head_, tail_, count_);
        head_ = tail_ = none;
        count_ = 0;
        lanes = std::exchange(standby_lanes_, 0u);
        nonempty_.store(false, std::memory_order_relaxed);
        return !out.empty();
    }

    /// Cheap, lock-free hint that swap() would return something.
    [[nodiscard]] bool has_standby() const noexcept {
        return nonempty_.load(std::memory_order_acquire);
    }

    /// A task left the queue (dispatched or cancelled while queued).
    void on_dequeued(Priority p) noexcept {
        // seq_cst (the same locked add on x86): ordered against a waiting producer's flag.
        popped_[thread_stripe<pop_stripes>()].n[static_cast<std::size_t>(p)].fetch_add(
            1, std::memory_order_seq_cst);
        // A read of a line nobody writes while no producer waits: the cost of post_wait to
        // everyone else.
        if (room_wanted_.load(std::memory_order_seq_cst)) [[unlikely]]
            if (length() <= room_mark() && room_wanted_.exchange(false, std::memory_order_seq_cst))
                wake_room_unflagged();
    }

    /// Tasks admitted and not yet started, all priorities (may lag by in-flight dequeues).
    [[nodiscard]] std::uint32_t length() const noexcept {
        // Pops first: a push counted after them can only make the difference larger, never
        // negative.
        const std::uint32_t popped = popped_total();
        return pushed_[0].load(std::memory_order_acquire) +
               pushed_[1].load(std::memory_order_acquire) +
               pushed_[2].load(std::memory_order_acquire) - popped;
    }
    /// Tasks admitted and not yet started, in one priority lane.
    [[nodiscard]] std::uint32_t length(Priority p) const noexcept {
        const auto i = static_cast<std::size_t>(p);
        std::uint32_t popped = 0;
        for (const auto& stripe : popped_)
            popped += stripe.n[i].load(std::memory_order_acquire);
        return pushed_[i].load(std::memory_order_acquire) - popped;
    }
    /// A length that is never below the true one and costs producers no read of the workers'
    /// line (a stale count of pops); for the lock-free pre-check of a submit, which must only
    /// trust it when it is under the limits.
    [[nodiscard]] std::uint32_t length_upper_bound() const noexcept {
        const std::uint32_t seen = popped_hint_.load(std::memory_order_acquire);
        return pushed_[0].load(std::memory_order_acquire) +
               pushed_[1].load(std::memory_order_acquire) +
               pushed_[2].load(std::memory_order_acquire) - seen;
    }
    [[nodiscard]] std::uint32_t capacity() const noexcept { return capacity_; }
    [[nodiscard]] std::uint32_t soft_limit() const noexcept { return soft_limit_; }

    /// Introspection: calls f(index) for each slot in the standby list, oldest first, under
    /// the queue lock, until f returns false. f must take no lock (it is called with the
    /// dispatch lock held too: dispatch -> queue is the one nesting).
    template <class F> void scan_standby(F&& f) {
        std::lock_guard lock(mutex_);
        // The tail's link is not set until a swap: stop at the tail, not at a none link.
        for (std::uint32_t i = head_; i != none; i = i == tail_ ? none : links_.next(i))
            if (!f(i))
                return;
    }

    /// Snapshot of the counters.
    [[nodiscard]] QueueCounters counters() {
        std::lock_guard lock(mutex_);
        return counters_;
    }

  private:
    void wake_room_unflagged() noexcept {
        room_seq_.fetch_add(1, std::memory_order_seq_cst);
        Futex::wake_all(room_seq_);
    }
    [[nodiscard]] bool closed_seen() {
        std::lock_guard lock(mutex_);
        return closed_;
    }

    /// Returns whether the buffer was empty before. Needs mutex_.
    bool append(std::uint32_t index, Priority p) {
        // One link store: the new tail's own link stays unset until swap() ends the chain.
        if (tail_ == none) {
            head_ = index;
        } else {
            links_.set_next(tail_, index);
        }
        tail_ = index;
        ++count_;
        standby_lanes_ |= 1u << static_cast<std::uint32_t>(p);
        auto& c = pushed_[static_cast<std::size_t>(p)];
        c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_release);
        popped_hint_.store(popped_seen_, std::memory_order_relaxed);
        if (count_ != 1)
            return false;
        nonempty_.store(true, std::memory_order_release);
        return true;
    }

    /// Pushes of all priorities. Needs mutex_ (the only writers hold it).
    [[nodiscard]] std::uint32_t pushed_total_locked() const noexcept {
        return pushed_[0].load(std::memory_order_relaxed) +
               pushed_[1].load(std::memory_order_relaxed) +
               pushed_[2].load(std::memory_order_relaxed);
    }
    [[nodiscard]] std::uint32_t popped_total() const noexcept {
        std::uint32_t popped = 0;
        for (const auto& stripe : popped_)
            for (const auto& c : stripe.n)
                popped += c.load(std::memory_order_acquire);
        return popped;
    }

    SpinLock mutex_;
    Links links_;
    /// The standby list: oldest slot, newest slot (its link unset), length.
    std::uint32_t head_ = none;
    std::uint32_t tail_ = none;
    std::size_t count_ = 0;
    /// Priorities pushed since the last swap (bit p = Priority p).
    std::uint32_t standby_lanes_ = 0;
    QueueCounters counters_;
    bool closed_ = false;
    const std::uint32_t capacity_;
    const std::uint32_t soft_limit_;
    // The admission count is pushes minus pops (both wrap; only the difference matters), kept
    // apart so producers and workers each write their own line instead of both hitting one
    // counter per task.
    /// Tasks ever pushed, per priority: written under mutex_, read lock-free.
    std::array<std::atomic<std::uint32_t>, priority_count> pushed_{};
    /// Sum of pops as the producers last read it (under mutex_), and its lock-free copy.
    std::uint32_t popped_seen_ = 0;
    std::atomic<std::uint32_t> popped_hint_{0};
    /// Whether the standby list holds anything: idle workers poll it, so it has a line of its
    /// own rather than one that every push writes.
    alignas(64) std::atomic<bool> nonempty_{false};
    /// Tasks ever dequeued (started or cancelled while queued), per priority, in stripes by
    /// thread: every worker counts each task it starts, and with one shared line two workers
    /// bounced it between their cores on every task (docs/hot-path.md, "Cache lines kept apart").
    /// Sums wrap like the counts themselves; readers (admission at a limit, length()) add the
    /// stripes.
    struct alignas(64) PopStripe {
        std::array<std::atomic<std::uint32_t>, priority_count> n{};
    };
    std::array<PopStripe, pop_stripes> popped_{};
    /// Producers wait for room (set by them, cleared by the pop that wakes them), on a line of
    /// its own that pops only read; and the word they sleep on (bumped by every wake).
    alignas(64) std::atomic<bool> room_wanted_{false};
    alignas(64) std::atomic<std::uint32_t> room_seq_{0};
};

} // namespace ax::detail
