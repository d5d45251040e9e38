// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include "record.hpp"
#include "slab.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace ax::detail {

/// Who waits for whom among when_all joins: for each task with dependents, the joins waiting for
/// it, and for each join, how many dependencies are still running. A rare path, so maps are
/// fine. The join's pending -> queued step is the caller's (it needs the dispatcher).
///
/// Lock it owns: `mutex_` (the join mutex) guards `dependents_` and `waits_`. Taken by add()
/// (when_all), take_ready() (the finisher of a task with dependents, after it published its
/// terminal state) and waiting() (shutdown(cancel)); never held with another lock.
class JoinTable {
  public:
    /// Records that join `j` waits for `deps`; a dependency already ended (or forgotten) does
    /// not count. Sets has_dependents_bit on each dependency. Returns how many it waits for:
    /// with 0 the caller queues the join at once.
    std::uint32_t add(TaskSlab& slab, std::uint32_t j, const TaskId* deps, std::size_t ndeps) {
        std::uint32_t outstanding = 0;
        std::lock_guard lock(mutex_);
        for (std::size_t k = 0; k < ndeps; ++k) {
            TaskRecord* d = slab.try_pin(deps[k]);
            if (d == nullptr)
                continue; // left history long ago: it ended
            // Under the join lock, so the dependency's finisher (which takes it after
            // publishing the terminal state) either sees this entry or was seen terminal.
            const auto prev = d->state.fetch_or(has_dependents_bit, std::memory_order_acq_rel);
            if (!is_terminal(static_cast<TaskState>(prev & state_mask))) {
                dependents_[deps[k].index()].push_back(j);
                ++outstanding;
            }
            slab.release(deps[k].index());
        }
        if (outstanding != 0)
            waits_[j] = outstanding;
        return outstanding;
    }

    /// Task `index` (which had dependents) ended: counts its joins down and appends those with
    /// nothing left to wait for to `ready`.
    void take_ready(std::uint32_t index, std::vector<std::uint32_t>& ready) {
        std::lock_guard lock(mutex_);
        auto it = dependents_.find(index);
        if (it == dependents_.end())
            return;
        for (const auto j : it->second) {
            auto w = waits_.find(j);
            if (--w->second == 0) {
                waits_.erase(w);
                ready.push_back(j);
            }
        }
        dependents_.erase(it);
    }

    /// Appends every join still waiting to `out` (shutdown(cancel)).
    void waiting(std::vector<std::uint32_t>& out) {
        std::lock_guard lock(mutex_);
        for (const auto& [j, n] : waits_)
            out.push_back(j);
    }

    /// Joins admitted and not yet queued or cancelled (a gauge the admitter and the finisher
    /// keep; read without the lock by metrics() and the drain check).
    std::atomic<std::uint32_t> pending{0};

  private:
    std::mutex mutex_;
    std::unordered_map<std::uint32_t, std::vector<std::uint32_t>> dependents_; // under mutex_
    std::unordered_map<std::uint32_t, std::uint32_t> waits_;                   // under mutex_
};

} // namespace ax::detail
