// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include "../tuning.hpp"
#include "huge_region.hpp"
#include "record.hpp"
#include "spin_lock.hpp"
#include "thread_stripe.hpp"

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <stop_token>
#include <vector>

namespace ax::detail {

/// Owns every task record: fixed-size chunks that never move, the free slots, and the striped
/// mutex/condvar table that blocking waits park on. Shared by the scheduler and every handle, so
/// a handle outlives its scheduler safely.
///
/// Free slots are plain indices, never a chain through the records: a thread takes them (and
/// returns single ones) through a small cache of its stripe (thread_stripe), which trades
/// batches with a shared stack; workers return their batches to that stack directly; slots
/// never used yet come from a cursor over the newest chunk. A slot a worker recycled sits in
/// that worker's cache, and the producer that takes it next must pull the record's lines
/// across. Knowing the indices ahead, acquire() asks for the record a few takes ahead, so the
/// transfer overlaps building the tasks before it (a chain through the records gave one record
/// ahead, and reading its link was itself a miss; docs/hot-path.md, "Slots"). When the slab
/// is at max_chunks, a slot another stripe's cache holds while that stripe is busy is not seen:
/// acquire() may then say exhausted a moment early.
///
/// Chunks past Tuning::slab_huge_after_chunks come from 2 MiB huge-page regions (HugeRegion),
/// 18 to a region, where the platform has them and Config::huge_pages allows; the others from
/// new[].
///
/// Locks it owns: each cache stripe's `lock` guards that stripe's `n` and `slots`; `free_lock_`
/// guards the shared stack (`stack_`, `free_n_`) and the fresh cursor (`fresh_next_`,
/// `fresh_end_`); `grow_mutex_` guards appending a chunk and the region list (`regions_`;
/// grow(), region_chunks() and the destructor). Order: a stripe lock, then `grow_mutex_`, then
/// `free_lock_`; a second stripe's lock is only ever tried (reclaim), never waited for. Each wait
/// stripe's mutex guards nothing but its condvar's wait (wait_terminal, notify_waiters) and is
/// never held with another lock.
class TaskSlab {
  public:
    static constexpr std::uint32_t chunk_bits = Tuning::slab_chunk_bits;
    static constexpr std::uint32_t chunk_size = 1u << chunk_bits;
    static constexpr std::uint32_t max_chunks = Tuning::slab_max_chunks;
    static constexpr std::size_t wait_stripes = Tuning::wait_stripes;
    /// What acquire() returns when the slab is exhausted (never a slot: indices stay below
    /// max_chunks x chunk_size).
    static constexpr std::uint32_t no_slot = UINT32_MAX;
    static constexpr std::size_t cache_stripes = Tuning::slab_cache_stripes;
    /// Slots a stripe's cache holds (the rest of its four lines).
    static constexpr std::size_t cache_slots = 62;
    /// Slots a refill takes: half a cache, so the thread's own releases fit beside them.
    static constexpr std::size_t refill_batch = 32;
    /// How many takes ahead acquire() asks for a record.
    static constexpr std::uint32_t prefetch_ahead = Tuning::slab_prefetch_ahead;

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

    /// A free slot with refs = 0 and a fresh generation, or no_slot when the slab is exhausted.
    /// A plain index, not an optional: GCC built the optional in memory with two stores and read
    /// it back with one wider load, which cannot be forwarded and so waited for every store
    /// before it to drain, the task record's included (docs/hot-path.md, "Slots").
    std::uint32_t acquire() {
        Cache& c = caches_[thread_stripe<cache_stripes>()];
        std::lock_guard lock(c.lock);
        if (c.n == 0 && !refill(c))
            return no_slot;
        const std::uint32_t index = c.slots[--c.n];
        if (c.n >= prefetch_ahead)
            prefetch_record(at(c.slots[c.n - prefetch_ahead]));
        return index;
    }

    /// acquire() for a batch (post_many): up to `n` free slots into `out` under one take of
    /// this thread's cache lock (refilled as often as needed), where acquire() locks per slot.
    /// Returns how many it took: fewer than `n` only when the slab is exhausted. The first
    /// prefetch_ahead records are asked for; the caller asks for the rest as it fills them.
    std::uint32_t acquire_many(std::uint32_t* out, std::uint32_t n) {
        Cache& c = caches_[thread_stripe<cache_stripes>()];
        std::lock_guard lock(c.lock);
        std::uint32_t got = 0;
        while (got < n) {
            if (c.n == 0 && !refill(c))
                break;
            // The cache's top first, as acquire() takes them (most recently freed first).
            const std::uint32_t take = c.n < n - got ? c.n : n - got;
            for (std::uint32_t k = 0; k < take; ++k)
                out[got + k] = c.slots[c.n - 1 - k];
            c.n -= take;
            got += take;
        }
        for (std::uint32_t k = 0; k < prefetch_ahead && k < got; ++k)
            prefetch_record(at(out[k]));
        return got;
    }

    /// Drops one reference; the last one recycles the slot.
    void release(std::uint32_t index) noexcept {
        TaskRecord& r = at(index);
        if (r.refs.fetch_sub(1, std::memory_order_acq_rel) != 1)
            return;
        reset(r);
        put(&index, 1);
    }

    /// release() for many slots (a worker's batch of finished tasks): the recycled ones go to
    /// the shared stack under one lock, not through this thread's cache. A worker's number may
    /// pick the same stripe as a producer's (thread_stripe is a hint), and a worker filling that
    /// cache would then contend with every acquire of the producer.
    void release_many(const std::uint32_t* indices, std::size_t n) noexcept {
        std::uint32_t recycled[cache_slots]; // pushed a cacheful at a time
        std::size_t m = 0;
        for (std::size_t k = 0; k < n; ++k) {
            const std::uint32_t index = indices[k];
            TaskRecord& r = at(index);
            if (r.refs.fetch_sub(1, std::memory_order_acq_rel) != 1)
                continue;
            reset(r);
            recycled[m++] = index;
            if (m == cache_slots) {
                std::lock_guard lock(free_lock_);
                push_locked(recycled, m);
                m = 0;
            }
        }
        if (m != 0) {
            std::lock_guard lock(free_lock_);
            push_locked(recycled, m);
        }
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
    /// Per-stripe cache of free slots: four lines, so one stripe's traffic never shares a line
    /// with another's.
    struct alignas(64) Cache {
        SpinLock lock;
        std::uint32_t n = 0;
        std::uint32_t slots[cache_slots];
    };

    /// Fills an empty cache (its lock held): recycled slots from the shared stack first, then
    /// fresh ones; then slots idle in other stripes' caches; then a new chunk. False when the
    /// slab is exhausted.
    bool refill(Cache& c) {
        for (;;) {
            {
                std::lock_guard lock(free_lock_);
                if (take_locked(c)) {
                    for (std::uint32_t k = 1; k <= prefetch_ahead && k <= c.n; ++k)
                        prefetch_record(at(c.slots[c.n - k]));
                    return true;
                }
            }
            // Before the slab grows, the slots other stripes hold come back (a thread that only
            // releases keeps up to a cacheful): otherwise each idle cache could cost a chunk.
            if (reclaim_others(c))
                continue;
            if (!grow())
                return false;
        }
    }

    /// Moves up to refill_batch slots into `c` (empty). Needs free_lock_.
    bool take_locked(Cache& c) noexcept {
        if (free_n_ != 0) {
            const std::size_t take = free_n_ < refill_batch ? free_n_ : refill_batch;
            // The stack's order kept: the most recently freed slot is taken first.
            for (std::size_t k = 0; k < take; ++k)
                c.slots[k] = stack_at(free_n_ - take + k);
            free_n_ -= take;
            c.n = static_cast<std::uint32_t>(take);
            return true;
        }
        if (fresh_next_ != fresh_end_) {
            const std::uint32_t left = fresh_end_ - fresh_next_;
            const std::uint32_t take = left < refill_batch ? left : refill_batch;
            // Lowest index on top: fresh slots come out in index order.
            for (std::uint32_t k = 0; k < take; ++k)
                c.slots[k] = fresh_next_ + take - 1 - k;
            fresh_next_ += take;
            c.n = take;
            return true;
        }
        return false;
    }

    /// Empties every other stripe's cache it can lock at once onto the shared stack. Whether
    /// anything moved.
    bool reclaim_others(const Cache& own) noexcept {
        bool moved = false;
        for (Cache& other : caches_) {
            if (&other == &own || !other.lock.try_lock())
                continue;
            if (other.n != 0) {
                std::lock_guard lock(free_lock_);
                push_locked(other.slots, other.n);
                other.n = 0;
                moved = true;
            }
            other.lock.unlock();
        }
        return moved;
    }

    /// Returns a recycled slot (release(): a handle's last reference, a cancel) through this
    /// thread's cache, so the thread's next acquire() takes it back while it is still in this
    /// core's cache; a full cache goes to the shared stack whole, one lock for a cacheful.
    void put(const std::uint32_t* indices, std::size_t m) noexcept {
        Cache& c = caches_[thread_stripe<cache_stripes>()];
        std::lock_guard lock(c.lock);
        if (c.n + m > cache_slots) {
            std::lock_guard shared(free_lock_);
            push_locked(c.slots, c.n);
            c.n = 0;
            if (m > cache_slots) {
                push_locked(indices, m);
                return;
            }
        }
        for (std::size_t k = 0; k < m; ++k)
            c.slots[c.n++] = indices[k];
    }

    /// Needs free_lock_. Never overflows: the stack holds each slot at most once.
    void push_locked(const std::uint32_t* indices, std::size_t m) noexcept {
        for (std::size_t k = 0; k < m; ++k)
            stack_at(free_n_++) = indices[k];
    }

    /// Appends a chunk (its slots join the fresh cursor), unless slots turned free meanwhile.
    /// False when the slab is at max_chunks.
    bool grow() {
        std::lock_guard lock(grow_mutex_);
        {
            std::lock_guard shared(free_lock_);
            if (free_n_ != 0 || fresh_next_ != fresh_end_)
                return true;
        }
        const auto n = chunk_count_.load(std::memory_order_relaxed);
        if (n == max_chunks)
            return false;
        // The shared stack must hold every slot at once: a block of it comes with the first
        // chunk whose slots reach into it (allocated first, so a failed chunk leaks nothing).
        const std::size_t block = (std::size_t{n} * chunk_size) >> stack_block_bits;
        std::unique_ptr<std::uint32_t[]> fresh_block;
        if ((std::size_t{n} * chunk_size & (stack_block_slots - 1)) == 0)
            fresh_block.reset(new std::uint32_t[stack_block_slots]);
        TaskRecord* chunk = allocate_chunk(n);
        chunks_[n].store(chunk, std::memory_order_release);
        chunk_count_.store(n + 1, std::memory_order_release);
        std::lock_guard shared(free_lock_);
        if (fresh_block)
            stack_[block] = std::move(fresh_block);
        fresh_end_ = (n + 1) * chunk_size;
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

    // Every at() reads `chunks_` (read-mostly: written once per grow); the shared stack's lock
    // is written per batch: on one cache line, each write invalidated the line every worker's
    // at() read, a miss per record access on the other core (docs/hot-path.md,
    // "Cache lines kept apart").
    // They sit on lines of their own.
    alignas(64) std::unique_ptr<std::atomic<TaskRecord*>[]> chunks_;
    std::atomic<std::uint32_t> chunk_count_{0};
    Cache caches_[cache_stripes];
    alignas(64) SpinLock free_lock_;
    std::size_t free_n_ = 0;
    std::uint32_t fresh_next_ = 0;
    std::uint32_t fresh_end_ = 0;
    /// The shared stack's storage: room for every slot of the slab, in blocks of
    /// stack_block_slots (256 KiB, never moved, so growing copies nothing), each added with the
    /// first chunk that needs it. 4 B a slot, resident only as deep as the stack has been.
    static constexpr std::size_t stack_block_bits = chunk_bits + 6;
    static constexpr std::size_t stack_block_slots = std::size_t{1} << stack_block_bits;
    static constexpr std::size_t stack_blocks =
        (std::size_t{max_chunks} * chunk_size + stack_block_slots - 1) >> stack_block_bits;
    std::unique_ptr<std::uint32_t[]> stack_[stack_blocks];
    [[nodiscard]] std::uint32_t& stack_at(std::size_t position) noexcept {
        return stack_[position >> stack_block_bits][position & (stack_block_slots - 1)];
    }
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
