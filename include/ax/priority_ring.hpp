// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include "task.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>

namespace ax::detail {

/// The weighted ring of seed §3.3: each round takes up to weight[0] tasks from High, weight[1]
/// from Normal, weight[2] from Low; a lane with nothing to give passes its share on. Pure state
/// machine, no locks: the dispatcher owns it.
class PriorityRing {
  public:
    explicit PriorityRing(std::array<std::uint32_t, priority_count> weights) : weights_(weights) {}

    /// Lane to serve next given which lanes are non-empty (bit i = lane i), or -1 if none is.
    int next(std::uint32_t nonempty_mask) noexcept {
        if ((nonempty_mask & 7u) == 0)
            return -1;
        for (std::size_t step = 0; step < 2 * priority_count + 1; ++step) {
            if (((nonempty_mask >> lane_) & 1u) != 0 && taken_ < weights_[lane_]) {
                ++taken_;
                return static_cast<int>(lane_);
            }
            lane_ = (lane_ + 1) % priority_count;
            taken_ = 0;
        }
        return -1; // unreachable with non-zero weights
    }

    [[nodiscard]] const std::array<std::uint32_t, priority_count>& weights() const noexcept {
        return weights_;
    }

  private:
    std::array<std::uint32_t, priority_count> weights_;
    std::size_t lane_ = 0;
    std::uint32_t taken_ = 0;
};

/// Intrusive FIFO of slot indices linked through a per-slot `next` field that Links provides:
/// O(1) push/pop, no allocation, and re-inserting at the head is free.
template <class Links> class IntrusiveFifo {
  public:
    static constexpr std::uint32_t none = std::numeric_limits<std::uint32_t>::max();

    void push_back(Links& links, std::uint32_t index) noexcept {
        links.set_next(index, none);
        if (tail_ == none) {
            head_ = index;
        } else {
            links.set_next(tail_, index);
        }
        tail_ = index;
        ++size_;
    }
    void push_front(Links& links, std::uint32_t index) noexcept {
        links.set_next(index, head_);
        head_ = index;
        if (tail_ == none)
            tail_ = index;
        ++size_;
    }
    /// A list over a chain already linked from `head` to `tail` (whose link is none), `size`
    /// slots long; none, none, 0 for an empty one.
    static IntrusiveFifo adopt(std::uint32_t head, std::uint32_t tail, std::size_t size) noexcept {
        IntrusiveFifo f;
        f.head_ = head;
        f.tail_ = tail;
        f.size_ = size;
        return f;
    }
    /// Appends every slot of `other`, in its order, in O(1); `other` is left empty.
    void splice_back(Links& links, IntrusiveFifo& other) noexcept {
        if (other.head_ == none)
            return;
        if (tail_ == none) {
            head_ = other.head_;
        } else {
            links.set_next(tail_, other.head_);
        }
        tail_ = other.tail_;
        size_ += other.size_;
        other = IntrusiveFifo{};
    }
    std::uint32_t pop_front(Links& links) noexcept {
        const std::uint32_t index = head_;
        if (index == none)
            return none;
        head_ = links.next(index);
        if (head_ == none)
            tail_ = none;
        --size_;
        return index;
    }
    [[nodiscard]] std::uint32_t front() const noexcept { return head_; }
    [[nodiscard]] std::uint32_t back() const noexcept { return tail_; }
    [[nodiscard]] bool empty() const noexcept { return head_ == none; }
    [[nodiscard]] std::size_t size() const noexcept { return size_; }

  private:
    std::uint32_t head_ = none;
    std::uint32_t tail_ = none;
    std::size_t size_ = 0;
};

/// The three priority lanes behind the ring, plus the anti-starvation budget: before asking the
/// ring, the dispatcher looks at the oldest task at the head of each lane; one that has waited
/// longer than max_wait goes next whatever its priority. Links provides next/set_next and
/// enqueue_ns(index).
template <class Links> class PriorityLanes {
  public:
    using Fifo = IntrusiveFifo<Links>;
    static constexpr std::uint32_t none = Fifo::none;

    PriorityLanes(std::array<std::uint32_t, priority_count> weights, std::int64_t max_wait_ns)
        : ring_(weights), max_wait_ns_(max_wait_ns) {}

    void push(Links& links, std::uint32_t index, Priority p) noexcept {
        lanes_[static_cast<std::size_t>(p)].push_back(links, index);
    }

    /// Appends a whole chain of priority-`p` slots to lane p in O(1); `chain` is left empty.
    void splice(Links& links, Fifo& chain, Priority p) noexcept {
        lanes_[static_cast<std::size_t>(p)].splice_back(links, chain);
    }

    /// Puts a slot back at the head of its lane (a task that was held back keeps its age).
    void push_front(Links& links, std::uint32_t index, Priority p) noexcept {
        lanes_[static_cast<std::size_t>(p)].push_front(links, index);
    }

    /// Next slot to dispatch at time now_ns, or none when every lane is empty.
    std::uint32_t pop(Links& links, std::int64_t now_ns) noexcept {
        // One lane holding tasks (the common case: one priority in use): its head is the oldest
        // task and the ring would pick it anyway, so neither the age check nor the ring is
        // consulted (the ring's walk past the empty lanes was ~35 instructions per task). The
        // ring keeps its place for when a second lane fills: shares are kept among lanes that
        // compete, and a lane alone competes with nobody.
        const std::uint32_t single = single_lane();
        if (single != none)
            return lanes_[single].pop_front(links);
        std::uint32_t mask = 0;
        int oldest_lane = -1;
        std::int64_t oldest_ns = std::numeric_limits<std::int64_t>::max();
        for (std::size_t i = 0; i < priority_count; ++i) {
            if (lanes_[i].empty())
                continue;
            mask |= 1u << i;
            const std::int64_t t = links.enqueue_ns(lanes_[i].front());
            if (t < oldest_ns) {
                oldest_ns = t;
                oldest_lane = static_cast<int>(i);
            }
        }
        if (mask == 0)
            return none;
        int lane = -1;
        if (now_ns - oldest_ns > max_wait_ns_) {
            lane = oldest_lane;
            ++starvation_picks_;
        } else {
            lane = ring_.next(mask);
        }
        return lanes_[static_cast<std::size_t>(lane)].pop_front(links);
    }

    [[nodiscard]] std::size_t size(Priority p) const noexcept {
        return lanes_[static_cast<std::size_t>(p)].size();
    }
    [[nodiscard]] std::size_t size() const noexcept {
        return lanes_[0].size() + lanes_[1].size() + lanes_[2].size();
    }
    /// How often the anti-starvation budget overrode the ring.
    [[nodiscard]] std::uint64_t starvation_picks() const noexcept { return starvation_picks_; }
    /// Lane `p`, front first (introspection walks it; dispatch order is pop's).
    [[nodiscard]] const Fifo& lane(Priority p) const noexcept {
        return lanes_[static_cast<std::size_t>(p)];
    }

  private:
    /// The only non-empty lane, or none when zero or several hold tasks.
    [[nodiscard]] std::uint32_t single_lane() const noexcept {
        const bool h = !lanes_[0].empty(), n = !lanes_[1].empty(), l = !lanes_[2].empty();
        if (h + n + l != 1)
            return none;
        return h ? 0u : n ? 1u : 2u;
    }

    PriorityRing ring_;
    std::array<Fifo, priority_count> lanes_{};
    std::int64_t max_wait_ns_;
    std::uint64_t starvation_picks_ = 0;
};

} // namespace ax::detail
