// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include "task.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace ax {

/// One failed attempt of a dead-lettered task.
template <class Clock = std::chrono::steady_clock> struct AttemptError {
    std::uint32_t attempt = 0;
    std::string type;
    std::string message;
    typename Clock::time_point started{};
    typename Clock::time_point ended{};
};

/// A task whose attempts are exhausted (or that failed permanently), as the dead-letter list
/// keeps it: who it was and every attempt's error. Scheduler::replay_dead_letter resubmits it.
template <class Clock = std::chrono::steady_clock> struct DeadLetter {
    TaskId id{};
    std::string name;
    Priority priority = Priority::normal;
    GroupId group{};
    typename Clock::time_point enqueued{};
    typename Clock::time_point finished{};
    std::vector<AttemptError<Clock>> attempts;
};

namespace detail {

/// The bounded dead-letter list: task IDs in arrival order, each holding a reference on its
/// record so the record (its callable included, for replay) outlives history. Overflow evicts the
/// oldest and counts it.
class DeadLetterList {
  public:
    explicit DeadLetterList(std::size_t capacity) : capacity_(capacity) {}

    /// Adds `id`; returns the ID evicted to make room, if any (its reference must be released).
    std::optional<TaskId> add(TaskId id) {
        std::lock_guard lock(mutex_);
        std::optional<TaskId> evicted;
        if (capacity_ == 0) {
            ++evicted_;
            return id;
        }
        if (ids_.size() == capacity_) {
            evicted = ids_.front();
            ids_.pop_front();
            ++evicted_;
        }
        ids_.push_back(id);
        return evicted;
    }

    /// Removes `id`; false if it is not listed.
    bool remove(TaskId id) {
        std::lock_guard lock(mutex_);
        auto it = std::find(ids_.begin(), ids_.end(), id);
        if (it == ids_.end())
            return false;
        ids_.erase(it);
        return true;
    }

    /// Puts back an entry whose replay was refused, at its old age (the front).
    void restore(TaskId id) {
        std::lock_guard lock(mutex_);
        ids_.push_front(id);
    }

    [[nodiscard]] std::vector<TaskId> ids() {
        std::lock_guard lock(mutex_);
        return {ids_.begin(), ids_.end()};
    }
    [[nodiscard]] std::uint64_t evicted() {
        std::lock_guard lock(mutex_);
        return evicted_;
    }
    [[nodiscard]] std::size_t size() {
        std::lock_guard lock(mutex_);
        return ids_.size();
    }

  private:
    std::mutex mutex_;
    std::deque<TaskId> ids_;
    std::size_t capacity_;
    std::uint64_t evicted_ = 0;
};

} // namespace detail
} // namespace ax
