// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include "../tuning.hpp"
#include "huge_region.hpp"
#include "record.hpp"

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <stop_token>
#include <vector>

namespace ax::detail {

/// Owns every task record: fixed-size chunks that never move, a lock-free free list of slot
/// indices, and the striped mutex/condvar table that blocking waits park on. Shared by the
/// scheduler and every handle, so a handle outlives its scheduler safely.
///
/// Chunks past Tuning::slab_huge_after_chunks come from 2 MiB huge-page regions (HugeRegion),
/// 18 to a region, where the platform has them and Config::huge_pages allows; the others from
/// new[].
///
/// Locks it owns: `grow_mutex_` guards appending a chunk and the region list (`regions_`;
/// grow(), region_chunks() and the destructor); each wait stripe's mutex
/// guards nothing but its condvar's wait (wait_terminal, notify_waiters). The free list is
/// lock-free (a Treiber stack tagged against ABA). No other lock is ever held with these.
class TaskSlab {
  public:
    static constexpr std::uint32_t chunk_bits = Tuning::slab_chunk_bits;
    static constexpr std::uint32_t chunk_size = 1u << chunk_bits;
    static constexpr std::uint32_t max_chunks = Tuning::slab_max_chunks;
    static constexpr std::size_t wait_stripes = Tuning::wait_stripes;

    /// `huge_pages`: whether chunks past Tuning::slab_huge_after_chunks come from huge-page
    /// regions (Config::huge_pages).
    explicit TaskSlab(bool huge_pages = true)
        : chunks_(new std::atomic<TaskRecord*>[max_chunks]), huge_pages_(huge_pages) {
        for (std::uint32_t i = 0; i < max_chunks; ++i)
            chunks_[i].store(nullptr, std::memory_order_relaxed);
    }
    TaskSlab(const TaskSlab&) = delete;
    TaskSlab& operator=(const TaskSlab&) = delete;
    ~TaskSlab() {
        const auto n = chunk_count_.load(std::memory_order_acquire);
        std::size_t region = 0; // regions_ is in chunk order
        for (std::uint32_t i = 0; i < n; ++i) {
            TaskRecord* chunk = chunks_[i].load(std::memory_order_relaxed);
            while (region < regions_.size() &&
                   i >= regions_[region].first_chunk + regions_[region].chunks)
                ++region;
            if (region < regions_.size() && i >= regions_[region].first_chunk) {
                for (std::uint32_t k = 0; k < chunk_size; ++k)
                    chunk[k].~TaskRecord();
            } else {
                delete[] chunk;
            }
        }
        for (const Region& r : regions_)
            HugeRegion::unmap(r.base);
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
                                                     std::memory_order_acquire)) {
                    // The next acquire reads that slot's link: fetch it while this task is
                    // being built (a worker recycled it, so it sits in that worker's cache).
                    if (next != 0)
                        prefetch_record(at(next - 1));
                    return index;
                }
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

    /// Chunks carved from huge-page regions so far.
    [[nodiscard]] std::size_t region_chunks() const {
        std::lock_guard lock(grow_mutex_);
        std::size_t n = 0;
        for (const Region& r : regions_)
            n += r.chunks;
        return n;
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
        TaskRecord* chunk = allocate_chunk(n);
        chunks_[n].store(chunk, std::memory_order_release);
        chunk_count_.store(n + 1, std::memory_order_release);
        // Chain the new slots in index order (low indices come out first, friendlier to caches)
        // and splice the chain onto the free list with one CAS, not one per slot.
        const std::uint32_t base = n * chunk_size;
        for (std::uint32_t i = 0; i + 1 < chunk_size; ++i)
            chunk[i].next.store(base + i + 2, std::memory_order_relaxed);
        TaskRecord& tail = chunk[chunk_size - 1];
        auto head = free_head_.load(std::memory_order_relaxed);
        std::uint64_t tagged;
        do {
            tail.next.store(static_cast<std::uint32_t>(head), std::memory_order_relaxed);
            tagged = ((head >> 32) + 1) << 32 | (base + 1);
        } while (!free_head_.compare_exchange_weak(head, tagged, std::memory_order_release,
                                                   std::memory_order_relaxed));
        return true;
    }

    /// Chunk `n`'s records, default-constructed. Under grow_mutex_.
    TaskRecord* allocate_chunk(std::uint32_t n) {
        if (huge_pages_ && n >= Tuning::slab_huge_after_chunks) {
            // A region fills with consecutive chunks: a new one is mapped only when the last is
            // full, and new[] serves a chunk only when that mapping failed.
            if (regions_.empty() || regions_.back().chunks == chunks_per_region) {
                if (void* base = HugeRegion::map()) {
                    try {
                        regions_.push_back(Region{base, n, 0});
                    } catch (...) {
                        HugeRegion::unmap(base);
                        throw;
                    }
                }
            }
            if (!regions_.empty() && regions_.back().chunks < chunks_per_region) {
                Region& region = regions_.back();
                auto* chunk = reinterpret_cast<TaskRecord*>(
                    static_cast<unsigned char*>(region.base) + region.chunks * chunk_bytes);
                for (std::uint32_t k = 0; k < chunk_size; ++k)
                    ::new (static_cast<void*>(chunk + k)) TaskRecord(); // noexcept
                ++region.chunks;
                return chunk;
            }
        }
        return new TaskRecord[chunk_size];
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
        if (r.extras != nullptr) {
            // Dropping the stop state (instead of reusing it) keeps a token an old body kept
            // from seeing the next task's cancel.
            if (r.extras->stop.stop_possible())
                r.extras->stop = std::stop_source(std::nostopstate);
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

    // Every at() reads `chunks_` (read-mostly: written once per grow), and every acquire and
    // release writes `free_head_`: on one cache line, each allocation invalidated the line every
    // worker's at() read, a miss per record access on the other core (docs/hot-path.md, fourth
    // look). They sit on lines of their own.
    alignas(64) std::unique_ptr<std::atomic<TaskRecord*>[]> chunks_;
    std::atomic<std::uint32_t> chunk_count_{0};
    alignas(64) std::atomic<std::uint64_t> free_head_{0};
    alignas(64) mutable std::mutex grow_mutex_;
    const bool huge_pages_;

    static constexpr std::size_t chunk_bytes = std::size_t{chunk_size} * sizeof(TaskRecord);
    static constexpr std::uint32_t chunks_per_region =
        static_cast<std::uint32_t>(HugeRegion::bytes / chunk_bytes);
    static_assert(chunks_per_region >= 1, "a huge-page region holds at least one chunk");
    static_assert(chunk_bytes % alignof(TaskRecord) == 0);
    /// A huge-page region and the consecutive chunks carved from it.
    struct Region {
        void* base;
        std::uint32_t first_chunk;
        std::uint32_t chunks;
    };
    std::vector<Region> regions_;

    Stripe stripes_[wait_stripes];
};

/// Links slots into intrusive lists (the priority lanes, the subtask lane, group parking
/// lists) through each record's `next` field, and gives their enqueue times to the
/// anti-starvation check. Whoever owns the list owns the links of the slots in it.
struct SlabLinks {
    TaskSlab* slab;
    [[nodiscard]] std::uint32_t next(std::uint32_t i) const noexcept {
        return slab->at(i).next.load(std::memory_order_relaxed);
    }
    void set_next(std::uint32_t i, std::uint32_t v) const noexcept {
        slab->at(i).next.store(v, std::memory_order_relaxed);
    }
    [[nodiscard]] std::int64_t enqueue_ns(std::uint32_t i) const noexcept {
        return slab->at(i).enqueue_ns.load(std::memory_order_relaxed);
    }
};

} // namespace ax::detail
