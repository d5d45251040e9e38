// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// How a node sizes and splits its claims, split out of node.hpp because it is pure arithmetic
// (no connection, no threads) that tests/pg exercises directly: the batch-size PID, the
// deficit-round-robin lane splitter, what the node knows of each lane between claims (LaneBook)
// and the per-lane token bucket. The node's ClaimPlanner (node_planner.hpp) owns one of each
// (three buckets) and consults them in plan() before a claim and claim_read() after it.

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

/// What a node knows of its three lanes between claims (which look empty, which hold tasks past
/// the anti-starvation budget), and each claim's quota per lane built from it. Pure logic, so
/// that tests can drive it through any sequence of claims without a server.
///
/// The rule that keeps an idle node idle: a lane's state changes only on evidence about that
/// lane. A claim that asked a lane for nothing (its probe did not fit the free slots, its token
/// bucket was dry, its credit rounded to zero) says nothing about it, so its state is kept. The
/// earlier rule, `empty = got < asked` for every lane, took a lane asked 0 for a lane with work
/// (0 < 0 is false): at idle, where the batch is exactly the free slots, the probes of the empty
/// lanes were cut to make room and those lanes came back "not empty" after every empty claim,
/// so the lanes never all looked empty and the node claimed again at once, without end (issue
/// 26: ~11,000 claims/s per idle node after a drain that took the overdue path, whose floor of
/// half a batch pushed quotas past the free slots). plan() also keeps the probes inside the free
/// slots, so every lane known empty is probed in every claim that has room for it.
class LaneBook {
  public:
    /// Every lane may hold work again: NOTIFY ax_wake, the poll, a (re)connect.
    void wake() noexcept { empty_ = {false, false, false}; }

    /// Lanes paused cluster-wide (Client::pause): asked for nothing, and taken for empty by
    /// everything that decides whether a claim is worth it, so an idle node with only paused
    /// work stays idle. What was known of them before is kept for when they resume.
    void set_paused(const std::array<bool, 3>& paused) noexcept { paused_ = paused; }

    [[nodiscard]] bool all_empty() const noexcept { return empty(0) && empty(1) && empty(2); }
    [[nodiscard]] bool empty(std::size_t p) const noexcept { return empty_[p] || paused_[p]; }
    [[nodiscard]] bool overdue(std::size_t p) const noexcept { return overdue_[p]; }

    /// Quotas for one claim: about `batch` tasks (the batch-size PID's output) from lanes with
    /// work, split by `weights` (LaneSplitter), plus a probe of one task for each lane known
    /// empty, the sum at most `room` (the free slots: never claim what the node cannot hold),
    /// each lane at most `cap[p]` (its token bucket's tokens). When the overdue floor pushes the
    /// sum past `room`, the lanes that are neither overdue nor probed give way first (lowest
    /// priority first), then overdue lanes, probes last.
    std::array<std::uint32_t, 3> plan(std::uint32_t batch, std::uint32_t room,
                                      const std::array<std::uint32_t, 3>& weights,
                                      const std::array<std::uint32_t, 3>& cap) noexcept {
        std::array<std::uint32_t, 3> q{};
        if (room == 0 || batch == 0)
            return q;
        std::uint32_t probes = 0;
        const std::array<bool, 3> skip{empty(0), empty(1), empty(2)};
        if (!all_empty())
            for (std::size_t p = 0; p < 3; ++p)
                probes += empty_[p] && !paused_[p] && cap[p] > 0 ? 1 : 0;
        const std::uint32_t busy_room = room > probes ? room - probes : 1;
        q = splitter_.split(std::min(batch, busy_room), weights, skip, overdue_);
        std::uint32_t total = 0;
        for (std::size_t p = 0; p < 3; ++p) {
            q[p] = paused_[p] ? 0 : std::min(q[p], cap[p]);
            total += q[p];
        }
        // Cut what does not fit, in three passes: lanes with work that are not overdue, then
        // overdue ones, then probes; each pass from the lowest priority up. With room for fewer
        // than the probes, the probes go first (a lane known to hold work is worth more).
        const bool probes_first = room <= probes;
        for (int pass = 0; pass < 3 && total > room; ++pass)
            for (std::size_t p = 3; total > room && p-- > 0;) {
                const int plain = overdue_[p] ? 1 : 0;
                const int kind =
                    empty_[p] ? (probes_first ? 0 : 2) : plain + (probes_first ? 1 : 0);
                if (kind != pass)
                    continue;
                const std::uint32_t cut = std::min(q[p], total - room);
                q[p] -= cut;
                total -= cut;
            }
        return q;
    }

    /// What a claim answered: `asked` and `got` per lane, and `late[p]` when the oldest task it
    /// got from lane p had waited past the anti-starvation budget. A lane asked for at least one
    /// task is empty when it gave less than asked (nothing claimable is left there for this
    /// node, or other nodes hold the rest locked), overdue when `late`; a lane asked for
    /// nothing keeps what was known of it.
    void learn(const std::array<std::uint32_t, 3>& asked, const std::array<std::uint32_t, 3>& got,
               const std::array<bool, 3>& late) noexcept {
        for (std::size_t p = 0; p < 3; ++p) {
            if (asked[p] == 0)
                continue;
            empty_[p] = got[p] < asked[p];
            overdue_[p] = got[p] > 0 && late[p];
        }
    }

    /// What a claim that a group limit cut short answered (ClaimRows::limited), when it got at
    /// least one task. A lane that gave some but less than asked may hold more behind the limit,
    /// so it stays a lane with work; a lane asked for tasks that gave none is taken for empty, as
    /// learn() would. That lane may instead hold only work whose limit is full: it is then
    /// probed with one task per claim, and the first probe that comes back with a task makes it
    /// a lane with work again. Without this the lanes of a limited burn-down never learnt that
    /// the other lanes were empty, and every claim asked the one busy lane for its 3:2:1 share
    /// of the batch only (171 of 512 for the normal lane).
    void learn_limited(const std::array<std::uint32_t, 3>& asked,
                       const std::array<std::uint32_t, 3>& got,
                       const std::array<bool, 3>& late) noexcept {
        for (std::size_t p = 0; p < 3; ++p) {
            if (asked[p] == 0)
                continue;
            empty_[p] = got[p] == 0;
            overdue_[p] = got[p] > 0 && late[p];
        }
    }

  private:
    LaneSplitter splitter_;
    std::array<bool, 3> empty_{false, false, false};
    std::array<bool, 3> overdue_{false, false, false};
    std::array<bool, 3> paused_{false, false, false};
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
