// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// The claim planner: whether the node claims now and how many tasks per lane, and what it
// learns from each claim's answer. It owns the batch-size PID, what the node knows of each lane
// (LaneBook), the per-lane token buckets (all in lanes.hpp) and the empty-claim floor: after a
// claim that returned nothing, and with no news since it was sent (NOTIFY ax_wake, the poll, a
// reconnect: wake_lanes()), the next claim waits out empty_claim_floor. Driver thread only; it
// guards nothing.

#include "lanes.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <limits>

namespace ax::pg::detail {

class ClaimPlanner {
  public:
    using Clock = std::chrono::steady_clock;

    /// After a claim that returned nothing, the next claim waits at least this long unless
    /// news came meanwhile. The lane rules (LaneBook) already keep an idle node to one claim
    /// per wake-up; this floor is the defence in depth that bounds an idle node at 1 / 250 ms +
    /// 1 / poll_interval claims per second (6/s with the defaults) whatever state its lanes are
    /// left in. It never delays a wake-up by NOTIFY or the poll, so it costs no latency when
    /// work arrives.
    static constexpr std::chrono::milliseconds empty_claim_floor{250};
    /// After a claim a group limit cut short (ClaimRows::limited), the next claim waits this
    /// long, doubled after each such claim that found nothing, up to limited_backoff_max: the
    /// slots free as the claimed tasks are acknowledged (every ack_delay), so a burn-down of a
    /// limited group re-claims within milliseconds, while a node facing a group whose slots
    /// stay taken (long tasks) sends about 4 claims a second, as an idle node does.
    static constexpr std::chrono::milliseconds limited_backoff_min{2};
    static constexpr std::chrono::milliseconds limited_backoff_max{256};

    struct Settings {
        std::uint32_t target = 1;        // local depth to steer toward
        std::uint32_t low_watermark = 1; // below it, claim whatever fits
        std::uint32_t max_batch = 1;
        std::array<std::uint32_t, 3> weights{3, 2, 1};
        std::int64_t max_wait_ms = 5000; // a lane whose task waited longer is overdue
        std::array<double, 3> rate_per_s{};
        std::array<double, 3> burst{};
    };

    void init(const Settings& s, Clock::time_point now) {
        s_ = s;
        for (std::size_t p = 0; p < 3; ++p)
            buckets_[p] = {s.rate_per_s[p], s.burst[p], s.burst[p], now};
    }
    [[nodiscard]] const Settings& settings() const noexcept { return s_; }

    /// News that every lane may hold work again: the lanes forget what they knew, and the next
    /// claim is not held back by the empty-claim floor.
    void wake_lanes() noexcept {
        lanes_.wake();
        claim_now_ = true;
        ++wake_seq_;
    }
    /// Until when a claim is held back (Clock::time_point{} when nothing holds it back).
    [[nodiscard]] Clock::time_point floor_end() const noexcept {
        if (wake_seq_ != claim_wake_seq_)
            return {};
        if (last_claim_empty_)
            return empty_claim_at_ + empty_claim_floor;
        return limited_until_;
    }
    /// Some lane is not known empty and its token bucket has a token.
    [[nodiscard]] bool lane_with_work() const noexcept {
        for (std::size_t p = 0; p < 3; ++p)
            if (!lanes_.empty(p) && buckets_[p].wait().count() == 0)
                return true;
        return false;
    }
    [[nodiscard]] bool all_empty() const noexcept { return lanes_.all_empty(); }
    /// Lanes paused cluster-wide: no claim asks them for anything (LaneBook::set_paused).
    void set_paused_lanes(const std::array<bool, 3>& paused) noexcept { lanes_.set_paused(paused); }
    /// The longest a token bucket makes the node wait (0 when every lane has a token).
    [[nodiscard]] std::chrono::milliseconds bucket_wait(std::size_t p) const noexcept {
        return buckets_[p].wait();
    }

    /// Whether to claim now, and how many per lane. `depth`: tasks queued or running locally;
    /// `room`: free slots, counting those whose results go out in this round trip (they are
    /// freed before the claim's rows are taken, and the claim is not taken if that
    /// acknowledgement fails); `in_flight`: slots promised to claims on other links.
    bool plan(Clock::time_point now, std::uint32_t depth, std::size_t room, std::uint32_t in_flight,
              std::array<std::uint32_t, 3>& quota) {
        // The last claim found nothing and no news came since: not again before the floor.
        if (now < floor_end())
            return false;
        // Claim beside another claim only while claims come back full (a backlog): with few
        // tasks pending, the second claim would mostly skip the first one's locked rows and
        // come back short, a statement for a handful of rows (and lanes wrongly taken for
        // empty).
        if (in_flight > 0 && !last_claim_full_)
            return false;
        depth += in_flight; // claims in flight count as taken: their rows arrive first
        const std::uint32_t free_slots =
            room > in_flight ? static_cast<std::uint32_t>(room - in_flight) : 0;
        if (free_slots == 0 || depth >= s_.target || (!claim_now_ && depth > s_.low_watermark))
            return false;
        const std::uint32_t room_for =
            std::min({free_slots, s_.max_batch, s_.target > depth ? s_.target - depth : 1u});
        // Above the low watermark the node has work in hand: claim only when a whole batch fits
        // (max_batch, or a quarter of the target when that is smaller). A claim squeezed into
        // the last few free places costs a statement for a handful of rows, and when the node's
        // CPU is short (its workers lag, the buffer stays nearly full) such claims would
        // multiply the server's cost per task. Below the watermark any size goes.
        if (depth > s_.low_watermark &&
            room_for < std::min(s_.max_batch, std::max(1u, s_.target / 4)))
            return false;
        std::uint32_t batch = pid_.next(s_.target, depth, s_.max_batch);
        batch = std::min(batch, room_for);
        std::array<std::uint32_t, 3> cap{};
        for (std::size_t p = 0; p < 3; ++p) {
            buckets_[p].refill(now);
            cap[p] = buckets_[p].allow(std::numeric_limits<std::uint32_t>::max());
        }
        // Never more than the free slots, probes of the lanes known empty included.
        quota = lanes_.plan(batch, free_slots, s_.weights, cap);
        return quota[0] + quota[1] + quota[2] > 0;
    }

    /// A claim was sent; returns the wake count it saw (claim_read() compares).
    std::uint64_t claim_sent() noexcept {
        claim_wake_seq_ = wake_seq_;
        return wake_seq_;
    }
    /// A claim came back with got[p] tasks per lane (asked[p] asked); max_wait_ms[p]: the
    /// longest any of them waited.
    /// `limited`: a group limit left work unclaimed (the lanes are not empty; see
    /// limited_backoff_min).
    void claim_read(const std::array<std::uint32_t, 3>& asked,
                    const std::array<std::uint32_t, 3>& got,
                    const std::array<std::int64_t, 3>& max_wait_ms, Clock::time_point now,
                    bool limited = false) {
        const std::uint32_t n = got[0] + got[1] + got[2];
        if (limited) {
            limited_backoff_ = n == 0 && limited_until_ != Clock::time_point{}
                                   ? std::min(limited_backoff_ * 2, limited_backoff_max)
                                   : limited_backoff_min;
            limited_until_ = now + limited_backoff_;
            last_claim_full_ = false;
            last_claim_empty_ = false;
            claim_now_ = true;
            for (std::size_t p = 0; p < 3; ++p)
                buckets_[p].take(got[p]);
            if (n == 0) {
                // Nothing came back: every lane's work may be behind the limit, so none is
                // taken for empty (the back-off above paces the next claim instead).
                pid_.reset();
                return;
            }
            std::array<bool, 3> late{};
            for (std::size_t p = 0; p < 3; ++p)
                late[p] = max_wait_ms[p] > s_.max_wait_ms;
            lanes_.learn_limited(asked, got, late);
            return;
        }
        limited_until_ = {};
        if (n == 0) {
            lanes_.learn(asked, got, {false, false, false});
            last_claim_full_ = false;
            last_claim_empty_ = true;
            empty_claim_at_ = now;
            claim_now_ = false;
            pid_.reset();
            return;
        }
        last_claim_empty_ = false;
        std::uint32_t asked_total = 0;
        std::array<bool, 3> late{};
        for (std::size_t p = 0; p < 3; ++p) {
            buckets_[p].take(got[p]);
            late[p] = max_wait_ms[p] > s_.max_wait_ms;
            asked_total += asked[p];
        }
        lanes_.learn(asked, got, late);
        last_claim_full_ = n >= asked_total;
        claim_now_ = last_claim_full_;
    }
    /// A claim's answer was lost (its acknowledgement or its own statement failed).
    void claim_lost() noexcept { last_claim_full_ = false; }
    /// A claim sent at wake count `seq` was read: news that came since is newer than what it
    /// saw, so its lanes may hold work again.
    void news_since(std::uint64_t seq) noexcept {
        if (seq != wake_seq_) {
            lanes_.wake();
            claim_now_ = true;
        }
    }

    /// Claim at the next chance (the driver's sleep found a lane worth it).
    void claim_soon() noexcept { claim_now_ = true; }
    [[nodiscard]] bool last_claim_full() const noexcept { return last_claim_full_; }

  private:
    Settings s_;
    BatchPid pid_;
    LaneBook lanes_;
    std::array<TokenBucket, 3> buckets_{};
    bool claim_now_ = true;
    std::uint64_t wake_seq_ = 1;       // counts wake_lanes() calls
    std::uint64_t claim_wake_seq_ = 0; // wake_seq_ when the last claim was sent
    bool last_claim_empty_ = false;    // the last claim read back returned no task
    // Set by a claim a limit cut short, cleared by any other (limited_backoff_min).
    Clock::time_point limited_until_{};
    std::chrono::milliseconds limited_backoff_ = limited_backoff_min;
    Clock::time_point empty_claim_at_{};
    bool last_claim_full_ = false;
};

} // namespace ax::pg::detail
