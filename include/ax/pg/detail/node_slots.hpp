// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// The node's slot table: one Slot per task the node may hold (max_workers x tasks_per_worker),
// and who may touch what.
//   - Slot::word (generation << 8 | Phase) is moved by CAS by whoever ends a phase: the worker
//     (queued -> running -> done), the timeout hook (running -> done), the stop path (queued ->
//     handed_back); the generation keeps a late body from touching a reused slot.
//   - The free list and the slots' task fields are the driver's: it fills a slot from a claim
//     and recycles it once the database confirmed its result.
//   - done_mutex_ guards done_, the finished slots workers hand to the driver.
//   - local_mutex_ guards Slot::local (the local TaskId) while the driver (re)fills slots,
//     against cancel notifications and the timeout hook that look slots up by it.
//   - depth_ counts the tasks queued or running locally.

#include "../../task.hpp"
#include "../node_options.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace ax::pg::detail {

enum Phase : std::uint8_t { free_phase, queued, running_phase, done_phase, handed_back };
enum Outcome : std::uint8_t { ok, failed, permanent, cancelled_outcome, snoozed_outcome };

/// One claimed task.
struct Slot {
    std::atomic<std::uint64_t> word{0};
    std::atomic<bool> cancel{false};
    std::int64_t id = 0;
    std::uint32_t batch = 0;
    std::uint32_t kind = 0;
    std::uint32_t attempt = 0;
    Priority priority = Priority::normal;
    Outcome outcome = ok;
    std::string_view payload;
    std::string error;
    JobOutput out; // the handler's result and snooze request (outcome ok / snoozed_outcome)
    TaskId local{};

    [[nodiscard]] Phase phase() const noexcept { return static_cast<Phase>(word.load() & 0xff); }
    [[nodiscard]] std::uint64_t generation() const noexcept { return word.load() >> 8; }
};

/// The slot table (see the header comment for who owns what).
class SlotTable {
  public:
    static constexpr std::uint64_t word(std::uint64_t gen, Phase p) noexcept {
        return gen << 8 | p;
    }

    /// Sizes the table; every slot free. `wake_results` / `wake_depth`: a finishing worker asks
    /// for the driver when that many results wait, or the depth fell to that.
    void init(std::uint32_t capacity, std::size_t wake_results, std::uint32_t wake_depth) {
        capacity_ = capacity;
        wake_results_ = wake_results;
        wake_depth_ = wake_depth;
        slots_ = std::make_unique<Slot[]>(capacity);
        free_.clear();
        free_.reserve(capacity);
        for (std::uint32_t i = capacity; i > 0; --i)
            free_.push_back(i - 1);
        done_.reserve(capacity);
    }
    [[nodiscard]] std::uint32_t capacity() const noexcept { return capacity_; }
    Slot& operator[](std::uint32_t i) noexcept { return slots_[i]; }
    const Slot& operator[](std::uint32_t i) const noexcept { return slots_[i]; }

    // ---- worker side
    /// queued -> running; false if the stop path handed it back first.
    bool start(std::uint32_t idx, std::uint64_t gen) noexcept {
        std::uint64_t expect = word(gen, queued);
        return slots_[idx].word.compare_exchange_strong(expect, word(gen, running_phase));
    }
    /// `from` -> done, handing the slot to the driver. True when the driver is worth waking
    /// (enough results wait, or the local queue ran low).
    bool finish(std::uint32_t idx, std::uint64_t gen, Phase from) {
        std::uint64_t expect = word(gen, from);
        if (!slots_[idx].word.compare_exchange_strong(expect, word(gen, done_phase)))
            return false;
        std::size_t pending;
        {
            std::lock_guard lock(done_mutex_);
            done_.push_back(idx);
            pending = done_.size();
        }
        const std::uint32_t depth = depth_.fetch_sub(1, std::memory_order_acq_rel) - 1;
        return pending >= wake_results_ || depth <= wake_depth_;
    }

    // ---- driver side
    [[nodiscard]] std::size_t free_count() const noexcept { return free_.size(); }
    /// Takes a free slot (there must be one).
    std::uint32_t take_free() noexcept {
        const std::uint32_t idx = free_.back();
        free_.pop_back();
        return idx;
    }
    /// The database confirmed the slot's result: next generation, free.
    void recycle(std::uint32_t idx) {
        Slot& s = slots_[idx];
        s.word.store(word(s.generation() + 1, free_phase));
        s.cancel.store(false);
        s.out.reset();
        free_.push_back(idx);
    }
    /// queued -> handed_back (stop, or a refused local post); false if a worker started it.
    bool hand_back(std::uint32_t idx, std::uint64_t gen) noexcept {
        std::uint64_t expect = word(gen, queued);
        return slots_[idx].word.compare_exchange_strong(expect, word(gen, handed_back));
    }
    /// Moves the finished slots into `out` (emptied first).
    void take_done(std::vector<std::uint32_t>& out) {
        out.clear();
        std::lock_guard lock(done_mutex_);
        out.swap(done_);
    }
    [[nodiscard]] std::size_t pending_done() {
        std::lock_guard lock(done_mutex_);
        return done_.size();
    }
    [[nodiscard]] std::uint32_t depth() const noexcept { return depth_.load(); }
    void queued_one() noexcept { depth_.fetch_add(1); }
    void unqueued_one() noexcept { depth_.fetch_sub(1); }

    /// Holds Slot::local still (see the header comment).
    [[nodiscard]] std::unique_lock<std::mutex> lock_local() {
        return std::unique_lock<std::mutex>(local_mutex_);
    }

  private:
    std::unique_ptr<Slot[]> slots_;
    std::uint32_t capacity_ = 0;
    std::size_t wake_results_ = 1;
    std::uint32_t wake_depth_ = 0;
    std::vector<std::uint32_t> free_; // driver only
    std::mutex done_mutex_;           // guards done_
    std::vector<std::uint32_t> done_;
    std::mutex local_mutex_; // guards Slot::local while slots are (re)filled
    std::atomic<std::uint32_t> depth_{0};
};

} // namespace ax::pg::detail
