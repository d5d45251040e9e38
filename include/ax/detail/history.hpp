// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include "../tuning.hpp"
#include "record.hpp"
#include "slab.hpp"
#include "spin_lock.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace ax::detail {

/// The bounded history of finished tasks: the scheduler's reference to each finished slot, kept
/// for `capacity` tasks so query() still answers for them, then released (the slot is recycled
/// once nobody else holds it). Workers hand slots over in batches of Tuning::history_batch.
///
/// Lock it owns: `mutex_` (the history spin lock) guards `ring_`, `head_` and `size_`. Taken by
/// flush() (a worker per batch, the tick and cancel for single slots), release_all() and
/// scan_newest() (list_tasks); never held with another lock.
class History {
  public:
    /// A ring of `capacity` slots (0: a finished task is forgotten at once).
    History(TaskSlab& slab, std::size_t capacity) : slab_(slab) { ring_.assign(capacity, 0); }

    /// The scheduler's reference to a finished slot moves into history: into the worker's
    /// `batch` (flushed when full), or at once without one (the tick, cancel).
    void retire(std::uint32_t index, std::vector<std::uint32_t>* batch) {
        if (batch != nullptr) {
            batch->push_back(index);
            if (batch->size() >= Tuning::history_batch)
                flush(*batch);
        } else {
            std::vector<std::uint32_t> one{index};
            flush(one);
        }
    }

    /// Moves a batch into the ring, evicting the oldest entries when it is full. An evicted task
    /// still held elsewhere (a handle, the dead-letter list) is marked forgotten, so query()
    /// stops answering for it, as documented. Empties `finished`.
    void flush(std::vector<std::uint32_t>& finished) {
        if (finished.empty())
            return;
        // Evicted slots are written back over the front of `finished` (never past the entry
        // being read), so a flush allocates nothing.
        std::size_t evicted = 0;
        std::array<std::uint32_t, Tuning::history_batch> upcoming;
        std::size_t nupcoming = 0;
        {
            std::lock_guard lock(mutex_);
            for (const auto i : finished) {
                if (ring_.empty()) {
                    finished[evicted++] = i;
                    continue;
                }
                // Wraps by compare, not `%`: a division per finished task was a visible share of
                // a tiny task's worker path (docs/hot-path.md, "The history").
                if (size_ == ring_.size()) {
                    finished[evicted++] = ring_[head_];
                    head_ = wrap(head_ + 1);
                    --size_;
                }
                ring_[wrap(head_ + size_)] = i;
                ++size_;
            }
            // The next flush evicts these: ask for them now, a batch of tasks ahead, so their
            // misses are long done when that flush counts their references (the prefetch of
            // the victims just below comes too late to hide them: they are used at once).
            if (size_ == ring_.size())
                for (; nupcoming < upcoming.size() && nupcoming < size_; ++nupcoming)
                    upcoming[nupcoming] = ring_[wrap(head_ + nupcoming)];
        }
        for (std::size_t k = 0; k < nupcoming; ++k)
            prefetch_record(slab_.at(upcoming[k]));
        // The evicted records were last touched a whole history ago: ask for all of them at once
        // so their misses overlap instead of queueing one behind the other.
        for (std::size_t k = 0; k < evicted; ++k)
            prefetch_record(slab_.at(finished[k]));
        for (std::size_t k = 0; k < evicted; ++k)
            forget(slab_.at(finished[k]));
        slab_.release_many(finished.data(), evicted);
        finished.clear();
    }

    /// Releases every reference history holds (the scheduler is being destroyed).
    void release_all() {
        std::lock_guard lock(mutex_);
        for (std::size_t k = 0; k < size_; ++k)
            slab_.release(ring_[(head_ + k) % ring_.size()]);
        size_ = 0;
    }

    /// Introspection: calls f(index) for each finished slot held, newest first, under the
    /// history lock, until f returns false. f must take no lock.
    template <class F> void scan_newest(F&& f) {
        std::lock_guard lock(mutex_);
        for (std::size_t k = size_; k-- > 0;)
            if (!f(ring_[(head_ + k) % ring_.size()]))
                return;
    }

    /// Entries held now.
    [[nodiscard]] std::size_t size() {
        std::lock_guard lock(mutex_);
        return size_;
    }

    /// Marks a terminal record whose scheduler reference is about to go as forgotten, if anyone
    /// else still holds it (otherwise the release recycles it and the generation says the rest).
    static void forget(TaskRecord& r) noexcept {
        if (r.refs.load(std::memory_order_acquire) > 1)
            r.state.fetch_or(forgotten_bit, std::memory_order_acq_rel);
    }

  private:
    /// `k % ring_.size()` for k < 2 * ring_.size().
    [[nodiscard]] std::size_t wrap(std::size_t k) const noexcept {
        return k >= ring_.size() ? k - ring_.size() : k;
    }

    TaskSlab& slab_;
    SpinLock mutex_;
    std::vector<std::uint32_t> ring_; // under mutex_
    std::size_t head_ = 0;            // under mutex_
    std::size_t size_ = 0;            // under mutex_
};

} // namespace ax::detail
