// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <mutex>
#include <queue>
#include <random>
#include <vector>

namespace ax {

/// Delay before attempt `next_attempt` (2 for the first retry) of seed §3.6:
///   base x 2^(next_attempt - 2) + jitter,  jitter uniform in [0, max_jitter]
/// `unit_random` is a number in [0, 1) supplying the jitter; the exponent stops at 30 and the
/// back-off saturates near 73 years instead of overflowing.
inline std::chrono::nanoseconds retry_delay(std::chrono::nanoseconds base,
                                            std::chrono::nanoseconds max_jitter,
                                            std::uint32_t next_attempt,
                                            double unit_random) noexcept {
    constexpr std::int64_t ceiling = std::numeric_limits<std::int64_t>::max() / 4;
    const std::uint32_t retry = next_attempt >= 2 ? next_attempt - 1 : 1;
    const std::uint32_t shift = std::min<std::uint32_t>(retry - 1, 30);
    const std::int64_t b = std::clamp<std::int64_t>(base.count(), 0, ceiling);
    const auto backoff = std::chrono::nanoseconds(b > (ceiling >> shift) ? ceiling : b << shift);
    const auto jitter = std::chrono::nanoseconds(static_cast<std::int64_t>(
        static_cast<double>(std::clamp<std::int64_t>(max_jitter.count(), 0, ceiling)) *
        std::clamp(unit_random, 0.0, 1.0)));
    return backoff + jitter;
}

namespace detail {

/// Tasks waiting for their retry time, without a thread: a min-heap of (due, slot) that the
/// maintenance tick drains into the queue when due. Cancelled entries stay as tombstones and are
/// skipped by whoever pops them.
class RetryTimers {
  public:
    struct Entry {
        std::int64_t due_ns;
        std::uint32_t index;
        friend bool operator>(const Entry& a, const Entry& b) noexcept {
            return a.due_ns > b.due_ns;
        }
    };

    void add(std::int64_t due_ns, std::uint32_t index) {
        std::lock_guard lock(mutex_);
        heap_.push(Entry{due_ns, index});
    }

    /// Appends every entry due at now_ns to `out`.
    void take_due(std::int64_t now_ns, std::vector<std::uint32_t>& out) {
        std::lock_guard lock(mutex_);
        while (!heap_.empty() && heap_.top().due_ns <= now_ns) {
            out.push_back(heap_.top().index);
            heap_.pop();
        }
    }

    /// Removes and appends every entry (shutdown).
    void take_all(std::vector<std::uint32_t>& out) {
        std::lock_guard lock(mutex_);
        while (!heap_.empty()) {
            out.push_back(heap_.top().index);
            heap_.pop();
        }
    }

    [[nodiscard]] std::size_t size() {
        std::lock_guard lock(mutex_);
        return heap_.size();
    }

    /// Introspection: calls f(const Entry&) for each entry (heap order, tombstones included)
    /// under the timers' lock, until f returns false. f must take no lock.
    template <class F> void scan(F&& f) {
        std::lock_guard lock(mutex_);
        for (const Entry& e : heap_.entries())
            if (!f(e))
                return;
    }

  private:
    /// The heap, with its entries readable for scan().
    struct Heap : std::priority_queue<Entry, std::vector<Entry>, std::greater<>> {
        [[nodiscard]] const std::vector<Entry>& entries() const noexcept { return this->c; }
    };
    std::mutex mutex_;
    Heap heap_;
};

/// Thread-safe source of jitter: a small PRNG behind the timers' own lock is cheap on the failure
/// path, which is the only one that uses it.
class Jitter {
  public:
    explicit Jitter(std::uint64_t seed) : rng_(seed) {}
    double operator()() {
        std::lock_guard lock(mutex_);
        return std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
    }

  private:
    std::mutex mutex_;
    std::mt19937_64 rng_;
};

} // namespace detail
} // namespace ax
