// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include "../groups.hpp"
#include "../priority_ring.hpp"
#include "../queue.hpp"
#include "../task.hpp"
#include "../tuning.hpp"
#include "groups.hpp"
#include "notifier.hpp"
#include "record.hpp"
#include "slab.hpp"
#include "spin_lock.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

namespace ax::detail {

/// Tasks one worker reserved in a dispatch, run from `next` to `reserved`. Reserved tasks stay
/// `queued` (cancel and query see the truth) until the worker starts them; they belong to that
/// worker alone.
struct Reservation {
    std::array<std::uint32_t, Tuning::max_reserve> batch{};
    std::size_t next = 0;
    std::size_t reserved = 0;

    /// Whether tasks are left to run.
    [[nodiscard]] bool holds() const noexcept { return next < reserved; }
};

/// The scheduler's queue: its standby list is chained through the records' `next` links.
using TaskQueue = DoubleBufferQueue<SlabLinks>;

/// Dispatch: which queued task runs next. There is no dispatcher thread; whichever worker needs
/// work calls fill() and takes the role for one pass. The dispatcher sorts the queue's standby
/// list into three priority lanes (PriorityLanes: the 3:2:1 ring plus the max_wait budget),
/// serves the subtask lane first, and parks tasks whose group is at capacity (limit or breaker)
/// until a slot frees.
///
/// Lock it owns: `mutex_` (the dispatch spin lock) guards `lanes_`, `pops_since_swap_`,
/// `subtasks_` and every GroupState in `groups_`. Every member function below takes it itself,
/// except the `_locked` ones, which need it held. While it is held the only other lock taken is
/// the queue's (DoubleBufferQueue::swap in swap_into_lanes_locked, and scan_standby in the
/// introspection scans scan() and oldest_queued()): dispatch -> queue is the one nesting of the
/// scheduler. The atomics `lanes_count_`, `subtask_lane_count_` and
/// `children_queued_` mirror sizes for lock-free readers (has_work, admission).
class Dispatcher {
  public:
    static constexpr std::uint32_t none = UINT32_MAX;
    /// Entries oldest_queued() reads at most per list it walks (a lane, a parking list, the
    /// standby list).
    static constexpr std::size_t oldest_scan_limit = 1024;

    /// Lanes with the ring's `weights` and the anti-starvation budget `max_wait_ns`.
    Dispatcher(TaskSlab& slab, TaskQueue& queue, Notifier& notifier,
               std::array<std::uint32_t, priority_count> weights, std::int64_t max_wait_ns)
        : slab_(slab), queue_(queue), notifier_(notifier), lanes_(weights, max_wait_ns) {}
    Dispatcher(const Dispatcher&) = delete;
    Dispatcher& operator=(const Dispatcher&) = delete;

    /// Whether a dispatch would find something: tasks in the lanes or in the standby list.
    /// Tasks a worker has already reserved do not count; that worker is awake and will run them.
    [[nodiscard]] bool has_work() const noexcept {
        return lanes_count_.load(std::memory_order_seq_cst) > 0 ||
               subtask_lane_count_.load(std::memory_order_seq_cst) > 0 || queue_.has_standby();
    }

    /// Reserves the next tasks in ring order into `local`: one normally, up to
    /// Tuning::max_reserve when tasks are `tiny` and the lanes are long (a share of them per
    /// `live` worker), so a stream of microsecond tasks takes the dispatch lock once per several
    /// tasks. A subtask is always reserved alone.
    void fill(std::int64_t now, std::uint32_t live, bool tiny, Reservation& local) {
        SlabLinks links{&slab_};
        std::lock_guard lock(mutex_);
        // Swap when the lanes run dry, else every swap_period pops: a new high-priority task
        // waits at most that many dispatches, and a steady producer does not bounce the queue
        // lock's cache line with the dispatcher on every task.
        if (lanes_.size() == 0 || ++pops_since_swap_ >= Tuning::swap_period)
            swap_into_lanes_locked(links);
        // Subtasks first, one at a time: a reserved child would wait behind its worker's current
        // task, and a parent waiting for it there could wait on a worker waiting on it.
        if (!subtasks_.empty()) {
            local.batch[local.reserved++] = subtasks_.pop_front(links);
            subtask_lane_count_.store(static_cast<std::uint32_t>(subtasks_.size()),
                                      std::memory_order_seq_cst);
            lanes_count_.store(static_cast<std::uint32_t>(lanes_.size()),
                               std::memory_order_seq_cst);
            return;
        }
        std::size_t want = 1;
        if (tiny) {
            const std::size_t share = lanes_.size() / (2 * std::max<std::uint32_t>(live, 1));
            want = std::clamp<std::size_t>(share, 1, Tuning::max_reserve);
        }
        while (local.reserved < want) {
            const std::uint32_t i = lanes_.pop(links, now);
            if (i == none)
                break;
            if (const std::uint16_t g = slab_.at(i).group; g != 0) {
                // Over its group's limit the task waits in the group's parking list, still
                // queued and holding no worker; other groups pass it by.
                GroupState& gs = groups_[g];
                if (gs.active >= gs.capacity()) {
                    park_locked(gs, i);
                    gs.parked.push_back(links, i);
                    continue;
                }
                ++gs.active; // released by release_group when this attempt ends
            }
            local.batch[local.reserved++] = i;
        }
        lanes_count_.store(static_cast<std::uint32_t>(lanes_.size()), std::memory_order_seq_cst);
    }

    /// Pops the subtask lane's head (none if empty).
    std::uint32_t pop_subtask() {
        SlabLinks links{&slab_};
        std::lock_guard lock(mutex_);
        if (subtasks_.empty())
            return none;
        const std::uint32_t i = subtasks_.pop_front(links);
        subtask_lane_count_.store(static_cast<std::uint32_t>(subtasks_.size()),
                                  std::memory_order_seq_cst);
        return i;
    }

    /// Returns tasks a worker reserved but will not run now to the front of their lanes (still
    /// `queued` all along), with the group slots they held, and wakes the workers.
    void give_back(Reservation& local) {
        if (local.next >= local.reserved) {
            local.next = local.reserved = 0;
            return;
        }
        SlabLinks links{&slab_};
        {
            std::lock_guard lock(mutex_);
            // Back to front, so they keep their order at the head of their lanes.
            for (std::size_t k = local.reserved; k-- > local.next;) {
                const std::uint32_t i = local.batch[k];
                TaskRecord& r = slab_.at(i);
                if (r.group != 0) {
                    --groups_[r.group].active;
                    unpark_locked(groups_[r.group]);
                }
                lanes_.push_front(links, i, r.priority);
            }
            lanes_count_.store(static_cast<std::uint32_t>(lanes_.size()),
                               std::memory_order_seq_cst);
        }
        local.next = local.reserved = 0;
        notifier_.notify_all();
    }

    /// Queues a subtask in the subtask lane (first attempt, retry or released join).
    void push_child(std::uint32_t index) {
        children_queued_.fetch_add(1, std::memory_order_acq_rel);
        {
            SlabLinks links{&slab_};
            std::lock_guard lock(mutex_);
            subtasks_.push_back(links, index);
            subtask_lane_count_.store(static_cast<std::uint32_t>(subtasks_.size()),
                                      std::memory_order_seq_cst);
        }
        notifier_.notify_one();
    }

    /// A queued task left the queue (started or cancelled): its admission count goes down.
    /// `state` is its state word as it left (parked_bit: its group's count, not the queue's).
    void dequeued(const TaskRecord& r, std::uint32_t state) noexcept {
        if (r.group != 0)
            groups_[r.group].queued.fetch_sub(1, std::memory_order_acq_rel);
        if ((state & parked_bit) != 0) {
            groups_[r.group].held.fetch_sub(1, std::memory_order_acq_rel);
            held_total_.fetch_sub(1, std::memory_order_acq_rel);
        } else if ((r.flags & record_child) != 0) {
            children_queued_.fetch_sub(1, std::memory_order_acq_rel);
        } else {
            queue_.on_dequeued(r.priority);
        }
    }

    /// Admission's lock-free look at group `g` (registered): the end of its open breaker's
    /// cool-down (0: not open).
    [[nodiscard]] std::int64_t breaker_open_until(std::uint16_t g) const noexcept {
        return groups_[g].open_until_ns.load(std::memory_order_acquire);
    }
    /// Takes one of group `g`'s `capacity` queued places for an admission (true), or answers
    /// false with `queued` = what the group holds. Lock-free; undone by unreserve() if the
    /// admission then fails, and given back by dequeued() when the task leaves the queue.
    bool reserve(std::uint16_t g, std::uint32_t capacity, std::uint32_t& queued) noexcept {
        auto& q = groups_[g].queued;
        queued = q.fetch_add(1, std::memory_order_acq_rel);
        if (queued < capacity)
            return true;
        q.fetch_sub(1, std::memory_order_acq_rel);
        return false;
    }
    /// Gives back a place reserve() took for an admission that failed.
    void unreserve(std::uint16_t g) noexcept {
        groups_[g].queued.fetch_sub(1, std::memory_order_acq_rel);
    }
    /// A task of a group re-enters the queue without admission (a retry, a released join, a
    /// coroutine's hop or resumption): it counts toward its group's queued tasks (never
    /// refused). Called before the state says queued, so a cancel that dequeues it at once
    /// finds its place already counted (the count never wraps below zero, which admission
    /// would read as a full group).
    void requeued(const TaskRecord& r) noexcept {
        if (r.group != 0)
            groups_[r.group].queued.fetch_add(1, std::memory_order_acq_rel);
    }
    /// Undoes requeued() for a task that did not become queued after all (cancelled or timed
    /// out before its state changed).
    void requeue_undone(const TaskRecord& r) noexcept {
        if (r.group != 0)
            groups_[r.group].queued.fetch_sub(1, std::memory_order_acq_rel);
    }
    /// Group `g`'s queued tasks now (lock-free).
    [[nodiscard]] std::uint32_t group_queued(std::uint16_t g) const noexcept {
        return groups_[g].queued.load(std::memory_order_acquire);
    }

    /// Tasks every group holds (parked_bit set): queued work that is not in the shared queue's
    /// count (shutdown waits for it too).
    [[nodiscard]] std::uint32_t held_total() const noexcept {
        return held_total_.load(std::memory_order_acquire);
    }

    /// Gives back the group slot a reserved task held and lets parked tasks of its group in.
    /// The calling worker is about to look for work itself, so one task let in needs no wake.
    void release_group(const TaskRecord& r) {
        if (r.group == 0)
            return;
        GroupState& gs = groups_[r.group];
        std::uint32_t moved = 0;
        {
            std::lock_guard lock(mutex_);
            --gs.active;
            moved = unpark_locked(gs);
        }
        if (moved > 1)
            notifier_.notify_all();
    }

    /// Feeds an attempt's outcome to group `g`'s breaker (before the slot is released, so the
    /// release already sees the new state).
    void record_attempt(std::uint16_t g, bool ok, std::int64_t now) {
        GroupState& gs = groups_[g];
        std::lock_guard lock(mutex_);
        gs.on_attempt(ok, now);
    }

    /// The tick, for the first `registered` groups: open breakers whose cool-down is over go
    /// half-open (their parked tasks flow), closed ones start a new window every `window_ns`.
    void tick_breakers(std::int64_t now, std::size_t registered, std::int64_t window_ns) {
        std::uint32_t moved = 0;
        {
            std::lock_guard lock(mutex_);
            for (std::size_t g = 1; g <= registered; ++g) {
                GroupState& gs = groups_[g];
                if (gs.on_tick(now, window_ns))
                    moved += unpark_locked(gs);
            }
        }
        if (moved != 0)
            notifier_.notify_all();
    }

    /// Group registration: makes `g`'s state exist (lock-free; see GroupTable).
    void add_group(std::size_t g) { groups_.ensure(g); }

    /// Sets group `g`'s limit (0: none) and lets in what now fits.
    void set_limit(std::uint16_t g, std::uint32_t limit) {
        GroupState& gs = groups_[g];
        std::uint32_t moved = 0;
        {
            std::lock_guard lock(mutex_);
            gs.limit = limit;
            moved = unpark_locked(gs);
        }
        if (moved != 0)
            notifier_.notify_all();
    }

    /// Turns group `g`'s breaker on (`options`, validated by the caller) or off (nullopt).
    void set_breaker(std::uint16_t g, const std::optional<BreakerOptions>& options,
                     std::int64_t now) {
        GroupState& gs = groups_[g];
        std::uint32_t moved = 0;
        {
            std::lock_guard lock(mutex_);
            gs.set_breaker(options ? &*options : nullptr, now);
            moved = unpark_locked(gs);
        }
        if (moved != 0)
            notifier_.notify_all();
    }

    /// Limit, activity and breaker of group `g` (zeros for a group never registered).
    [[nodiscard]] GroupStats stats(GroupId g) {
        GroupState* gs = groups_.find(g.value);
        if (gs == nullptr)
            return {};
        std::lock_guard lock(mutex_);
        return gs->stats();
    }

    /// shutdown(cancel): takes every task the dispatcher holds (the standby list, the lanes,
    /// the subtask lane, every parking list) and appends it to `out`.
    void drain_all(std::vector<std::uint32_t>& out) {
        SlabLinks links{&slab_};
        std::lock_guard lock(mutex_);
        swap_into_lanes_locked(links);
        for (std::uint32_t i = lanes_.pop(links, 0); i != none; i = lanes_.pop(links, 0))
            out.push_back(i);
        while (!subtasks_.empty())
            out.push_back(subtasks_.pop_front(links));
        subtask_lane_count_.store(0, std::memory_order_seq_cst);
        for (std::size_t g = 1; g <= Tuning::max_groups; ++g)
            if (GroupState* gs = groups_.find(g))
                while (!gs->parked.empty())
                    out.push_back(gs->parked.pop_front(links));
        lanes_count_.store(0, std::memory_order_seq_cst);
    }

    /// Introspection: calls f(index) for each task the dispatcher holds (the subtask lane, the
    /// high, normal and low lanes front to back, every parking list), then for the queue's
    /// standby list, until f returns false; under the dispatch lock with the queue's nested,
    /// so no task moves between them meanwhile. Tombstones (cancelled while queued) are passed
    /// too: f checks the state. Tasks workers reserved are not seen. f must take no lock.
    template <class F> void scan(F&& f) {
        SlabLinks links{&slab_};
        std::lock_guard lock(mutex_);
        const auto walk = [&](const IntrusiveFifo<SlabLinks>& q) {
            for (std::uint32_t i = q.front(); i != none; i = links.next(i))
                if (!f(i))
                    return false;
            return true;
        };
        if (!walk(subtasks_))
            return;
        for (std::size_t p = 0; p < priority_count; ++p)
            if (!walk(lanes_.lane(static_cast<Priority>(p))))
                return;
        for (std::size_t g = 1; g <= Tuning::max_groups; ++g)
            if (GroupState* gs = groups_.find(g); gs != nullptr && !walk(gs->parked))
                return;
        queue_.scan_standby(f);
    }

    /// The oldest queued task of each priority lane: `ids[p]` (invalid if the lane holds no
    /// queued task; the generation is read under the lock, so a task that moves on meanwhile
    /// fails to pin rather than aliasing a newer one) and its enqueue time `at[p]`. Candidates are
    /// the first queued entry of lane p, of each parking list, and, only for a lane with neither,
    /// of the standby list (newer than anything in the lanes). Under the dispatch lock (the
    /// queue's nested); it walks past tombstones and other lanes' tasks, so it costs a few reads
    /// normally, and each walk stops after oldest_scan_limit entries, so a scrape never holds
    /// the locks long (a lane whose only queued tasks lie deeper than that in one list is then
    /// reported from the other candidates, or as empty). Subtasks are not in the priority lanes
    /// and not considered.
    void oldest_queued(std::array<TaskId, priority_count>& ids,
                       std::array<std::int64_t, priority_count>& at) {
        SlabLinks links{&slab_};
        std::array<std::uint32_t, priority_count> index{};
        index.fill(none);
        at.fill(0);
        std::size_t found = 0;
        const auto consider = [&](std::uint32_t i) {
            const TaskRecord& r = slab_.at(i);
            if (r.load_state() != TaskState::queued)
                return false;
            const auto p = static_cast<std::size_t>(r.priority);
            const std::int64_t t = r.enqueue_ns.load(std::memory_order_relaxed);
            if (index[p] == none) {
                ++found;
                index[p] = i;
                at[p] = t;
            } else if (t < at[p]) {
                index[p] = i;
                at[p] = t;
            }
            return true;
        };
        std::lock_guard lock(mutex_);
        for (std::size_t p = 0; p < priority_count; ++p) {
            const auto& lane = lanes_.lane(static_cast<Priority>(p));
            std::size_t walked = 0;
            for (std::uint32_t i = lane.front(); i != none && walked < oldest_scan_limit;
                 i = links.next(i), ++walked)
                if (consider(i))
                    break;
        }
        for (std::size_t g = 1; g <= Tuning::max_groups; ++g) {
            GroupState* gs = groups_.find(g);
            if (gs == nullptr)
                continue;
            std::array<bool, priority_count> seen{};
            std::size_t seen_n = 0;
            std::size_t walked = 0;
            for (std::uint32_t i = gs->parked.front();
                 i != none && seen_n < priority_count && walked < oldest_scan_limit;
                 i = links.next(i), ++walked) {
                const auto p = static_cast<std::size_t>(slab_.at(i).priority);
                if (!seen[p] && consider(i)) {
                    seen[p] = true;
                    ++seen_n;
                }
            }
        }
        if (found < priority_count) {
            // Lanes with no candidate yet: the first queued entry of the standby list (push
            // order).
            std::size_t walked = 0;
            queue_.scan_standby([&](std::uint32_t i) {
                if (index[static_cast<std::size_t>(slab_.at(i).priority)] == none)
                    consider(i);
                return found < priority_count && ++walked < oldest_scan_limit;
            });
        }
        for (std::size_t p = 0; p < priority_count; ++p)
            ids[p] = index[p] == none ? TaskId{}
                                      : TaskId::make(index[p], slab_.at(index[p]).generation.load(
                                                                   std::memory_order_acquire));
    }

    /// How often the anti-starvation budget overrode the ring.
    [[nodiscard]] std::uint64_t starvation_picks() {
        std::lock_guard lock(mutex_);
        return lanes_.starvation_picks();
    }
    /// Subtasks admitted and not yet started (their admission count; tombstones included).
    [[nodiscard]] std::uint32_t children_queued() const noexcept {
        return children_queued_.load(std::memory_order_acquire);
    }
    /// Whether the subtask lane holds something (lock-free hint).
    [[nodiscard]] bool subtasks_waiting() const noexcept {
        return subtask_lane_count_.load(std::memory_order_acquire) != 0;
    }
    /// Tasks in the lanes now (lock-free; may lag).
    [[nodiscard]] std::uint32_t lanes_count() const noexcept {
        return lanes_count_.load(std::memory_order_acquire);
    }
    /// The group states (tests: what is allocated).
    [[nodiscard]] const GroupTable& groups() const noexcept { return groups_; }

  private:
    /// Takes the standby list (O(1)) and sorts it into the priority lanes (O(1) when it holds one
    /// priority). Needs mutex_.
    void swap_into_lanes_locked(SlabLinks& links) {
        TaskQueue::Chain batch;
        std::uint32_t pushed_lanes = 0;
        if (!queue_.swap(batch, pushed_lanes))
            return;
        pops_since_swap_ = 0;
        // One priority in the batch (the common case): the chain joins its lane whole, so the
        // swap touches no record. Mixed: each slot goes to its own lane, in push order.
        if ((pushed_lanes & (pushed_lanes - 1)) == 0) {
            const auto p = static_cast<Priority>(std::countr_zero(pushed_lanes));
            lanes_.splice(links, batch, p);
            return;
        }
        for (std::uint32_t i = batch.front(); i != none;) {
            const std::uint32_t n = links.next(i);
            lanes_.push(links, i, slab_.at(i).priority);
            i = n;
        }
    }

    /// A task of `gs` is parked: the first time (a queued task without parked_bit) it moves from
    /// the shared queue's count to the group's, so a stalled group never holds room the other
    /// groups need. A task cancelled meanwhile is a tombstone and was counted out by its cancel.
    /// Needs mutex_.
    void park_locked(GroupState& gs, std::uint32_t i) {
        TaskRecord& r = slab_.at(i);
        auto s = r.state.load(std::memory_order_acquire);
        while ((s & state_mask) == static_cast<std::uint32_t>(TaskState::queued) &&
               (s & parked_bit) == 0) {
            if (r.state.compare_exchange_weak(s, s | parked_bit, std::memory_order_acq_rel)) {
                gs.held.fetch_add(1, std::memory_order_acq_rel);
                held_total_.fetch_add(1, std::memory_order_acq_rel);
                queue_.on_dequeued(r.priority);
                return;
            }
        }
    }

    /// Moves parked tasks of a group back to the front of their lanes while the group has room.
    /// Needs mutex_. Returns how many moved.
    std::uint32_t unpark_locked(GroupState& gs) {
        SlabLinks links{&slab_};
        const std::uint32_t cap = gs.capacity();
        const std::uint32_t room = gs.active >= cap ? 0 : cap - gs.active;
        std::uint32_t moved = 0;
        while (moved < room && !gs.parked.empty()) {
            const std::uint32_t i = gs.parked.pop_front(links);
            lanes_.push_front(links, i, slab_.at(i).priority);
            ++moved;
        }
        if (moved != 0)
            lanes_count_.store(static_cast<std::uint32_t>(lanes_.size()),
                               std::memory_order_seq_cst);
        return moved;
    }

    TaskSlab& slab_;
    TaskQueue& queue_;
    Notifier& notifier_;

    SpinLock mutex_;
    PriorityLanes<SlabLinks> lanes_;    // under mutex_
    std::uint32_t pops_since_swap_ = 0; // under mutex_
    GroupTable groups_;                 // each GroupState under mutex_
    IntrusiveFifo<SlabLinks> subtasks_; // under mutex_
    std::atomic<std::uint32_t> lanes_count_{0};
    std::atomic<std::uint32_t> subtask_lane_count_{0};
    std::atomic<std::uint32_t> children_queued_{0};
    std::atomic<std::uint32_t> held_total_{0};
};

} // namespace ax::detail
