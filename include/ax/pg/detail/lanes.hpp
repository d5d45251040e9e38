// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// How a node sizes and splits its claims, split out of node.hpp because it is pure arithmetic
// (no connection, no threads) that tests/pg exercises directly: the batch-size PID, the
// deficit-round-robin lane splitter and the per-lane token bucket. ax::pg::Node owns one of each
// (three buckets) and consults them in want_claim() (detail/node_round_trip.hpp).

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace ax::pg::detail {

/// Batch-size PID (seed 003 §4.1): steers the local depth toward a target, so a fast drain
/// claims more per round trip and a slow one less, without oscillating between starving and
/// flooding.
class BatchPid {
  public:
    /// Gains: the proportional term refills the gap, the integral removes a steady shortfall
    /// (tasks finishing during the round trip), the derivative damps.
    double kp = 0.8, ki = 0.1, kd = 0.2;

    /// The next batch size in [1, max_batch] for `depth` against `target`.
    std::uint32_t next(double target, double depth, std::uint32_t max_batch) noexcept {
        const double e = target - depth;
        integral_ = std::clamp(integral_ + e, -2.0 * target, 2.0 * target);
        const double d = e - prev_;
        prev_ = e;
        const double u = kp * e + ki * integral_ + kd * d;
        return static_cast<std::uint32_t>(
            std::clamp(std::lround(u), 1L, static_cast<long>(std::max(1u, max_batch))));
    }
    /// Forgets the history (after an idle spell, so the integral does not wind up).
    void reset() noexcept { integral_ = prev_ = 0; }

  private:
    double integral_ = 0, prev_ = 0;
};

/// Splits each claim over the lanes by weight (3:2:1), exactly over time even for small batches:
/// every busy lane earns batch x weight / (sum of busy weights) credit per claim and takes the
/// whole part, keeping the fraction for the next claim (deficit round robin). A lane known empty
/// gets a probe of one task, so new arrivals are seen at once, and its share goes to the busy
/// lanes. An overdue lane (its oldest claimed task waited past the anti-starvation budget, the
/// core's Config::max_wait) gets at least half the batch.
class LaneSplitter {
  public:
    std::array<std::uint32_t, 3> split(std::uint32_t batch,
                                       const std::array<std::uint32_t, 3>& weights,
                                       const std::array<bool, 3>& empty,
                                       const std::array<bool, 3>& overdue) noexcept {
        std::array<std::uint32_t, 3> q{};
        double busy = 0;
        for (std::size_t p = 0; p < 3; ++p)
            if (!empty[p])
                busy += weights[p];
        if (batch == 0)
            return q;
        if (busy == 0) {
            q = {1, 1, 1}; // every lane looked empty: probe each
            return q;
        }
        std::uint32_t given = 0;
        for (std::size_t p = 0; p < 3; ++p) {
            if (empty[p]) {
                credit_[p] = 0;
                q[p] = 1;
                continue;
            }
            credit_[p] += batch * weights[p] / busy;
            q[p] = static_cast<std::uint32_t>(credit_[p]);
            credit_[p] -= q[p];
            given += q[p];
        }
        // Rounding left some of the batch unassigned: the lane with the most credit takes it.
        while (given < batch) {
            std::size_t best = 3;
            for (std::size_t p = 0; p < 3; ++p)
                if (!empty[p] && (best == 3 || credit_[p] > credit_[best]))
                    best = p;
            q[best] += 1;
            credit_[best] -= 1;
            ++given;
        }
        for (std::size_t p = 0; p < 3; ++p)
            if (overdue[p] && !empty[p])
                q[p] = std::max(q[p], (batch + 1) / 2);
        return q;
    }

  private:
    std::array<double, 3> credit_{};
};

/// Token bucket of one lane (seed 003 §2.2). rate 0: unlimited.
struct TokenBucket {
    double rate = 0, burst = 0, tokens = 0;
    std::chrono::steady_clock::time_point last{};
    void refill(std::chrono::steady_clock::time_point now) noexcept {
        if (rate <= 0)
            return;
        const double dt = std::chrono::duration<double>(now - last).count();
        last = now;
        tokens = std::min(burst, tokens + dt * rate);
    }
    [[nodiscard]] std::uint32_t allow(std::uint32_t want) const noexcept {
        if (rate <= 0)
            return want;
        return std::min<std::uint32_t>(want, static_cast<std::uint32_t>(std::max(0.0, tokens)));
    }
    void take(std::uint32_t n) noexcept {
        if (rate > 0)
            tokens -= n;
    }
    /// Time until one token is there (zero when unlimited or available).
    [[nodiscard]] std::chrono::milliseconds wait() const noexcept {
        if (rate <= 0 || tokens >= 1)
            return std::chrono::milliseconds(0);
        return std::chrono::milliseconds(
            static_cast<std::int64_t>(std::ceil((1 - tokens) / rate * 1000)));
    }
};

} // namespace ax::pg::detail
