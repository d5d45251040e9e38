// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include "../config.hpp"
#include "../controller.hpp"
#include "../metrics.hpp"
#include "../policies.hpp"
#include "sched_stat.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <thread>

/// The controller's bookkeeping: when a round is due, when the workers' thread times are
/// sampled, and what the last round decided (MetricsSnapshot::controller).
namespace ax::detail {

/// Cores the process may use (std::thread::hardware_concurrency, at least 1).
inline std::uint32_t available_cores() noexcept {
    return std::max(1u, std::thread::hardware_concurrency());
}

/// Owns the controller's state between rounds. The tick and the tests' simulator drive it the
/// same way: round_due(), then (when sample_due()) set_shares() from the summed per-worker
/// deltas, begin_round() to complete the input, the policy, then end_round().
///
/// Lock it owns: `mutex_` guards `stats_` (written by end_round on the tick, read by fill from
/// metrics()). Everything else is tick-thread only, no lock.
class ControllerStore {
  public:
    /// `policy` is the policy's name; `fast` whether it asked for fast rounds.
    ControllerStore(const Config& cfg, const char* policy, bool fast, std::int64_t now_ns)
        : max_workers_(cfg.max_workers), min_workers_(cfg.min_workers), fast_(fast),
          interval_ns_(round_interval_ns(cfg, fast)), last_round_ns_(now_ns),
          last_sample_ns_(now_ns) {
        stats_.policy = policy;
    }

    /// The period of regular rounds: controller_interval, or for a fast-round policy
    /// controller_interval / 20 but at least dispatch_interval.
    static std::int64_t round_interval_ns(const Config& cfg, bool fast) noexcept {
        const auto ci =
            std::chrono::duration_cast<std::chrono::nanoseconds>(cfg.controller_interval);
        const auto di = std::chrono::duration_cast<std::chrono::nanoseconds>(cfg.dispatch_interval);
        return fast ? std::max(ci / 20, di).count() : ci.count();
    }

    /// Whether a round is due at `now` (tick thread). Regular rounds every round interval; a
    /// fast-round policy also gets one on any tick where queued work exceeds the idle workers of a
    /// pool that has reached its target (below max_workers), and on any tick where nothing is
    /// queued and more than half of a pool above min_workers idles: the end of a run of work,
    /// whose surplus a round interval later would have idled a whole round (on the seed's
    /// 20 000 x 80 ms the last tasks end over ~80 ms, less than one 100 ms round, so 200 workers
    /// idled through the tail). Counted in ticks, not clock time, so it works on a frozen test
    /// clock too.
    bool round_due(std::int64_t now, const ControllerInput& in) const noexcept {
        if (now - last_round_ns_ >= interval_ns_)
            return true;
        if (!fast_)
            return false;
        const std::uint32_t idle = in.live_workers - std::min(in.live_workers, in.busy_workers);
        if (in.queue_length > idle && in.live_workers >= in.current_target &&
            in.current_target < max_workers_)
            return true;
        return in.queue_length == 0 && 2 * idle > in.live_workers &&
               in.live_workers > min_workers_ && in.current_target > min_workers_;
    }

    /// Whether this round should sample the workers' thread times (at most once per round
    /// interval; rounds in between reuse the last shares).
    /// Until a sample measured something (the first one only primes the workers' cursors),
    /// every round samples, so the CPU cap is known within two rounds of the first busy worker.
    /// A round right after the target grew samples too: the pool must not outgrow what the
    /// last sample of fewer workers showed (a few extra reads while the pool ramps up).
    /// Until one sample has covered half a round interval or the pool first grew, the next is
    /// due after twice the last one's window (10, 20, 40 ms...): the first measured sample
    /// covers the first milliseconds of the work, when the tasks just started sit in the same
    /// phase, and read alone for a whole interval it held pools at a quarter of their size for
    /// 100 ms at a time (issue 33: gen-31 on the machine).
    [[nodiscard]] bool sample_due(std::int64_t now) const noexcept {
        if (!measured_ || grew_ || now - last_sample_ns_ >= interval_ns_)
            return true;
        return !full_sample_ && !grown_ && window_ns_ > 0 &&
               now - last_sample_ns_ >= 2 * window_ns_;
    }

    /// Records a sample's summed deltas as the shares rounds report until the next sample.
    void set_shares(std::int64_t now, const SchedDelta& d) noexcept {
        shares_from(d, cpu_share_, runqueue_share_);
        idle_cores_ = d.idle_cores;
        window_ns_ = now - last_sample_ns_;
        last_sample_ns_ = now;
        const bool measured = cpu_share_ + runqueue_share_ > 0.0;
        full_sample_ = full_sample_ || (measured && 2 * window_ns_ >= interval_ns_);
        measured_ = measured_ || measured;
    }

    /// Completes the round's input: the last shares and idle cores, the cores and the time since
    /// the previous round.
    void begin_round(std::int64_t now, ControllerInput& in) noexcept {
        in.cpu_share = cpu_share_;
        in.runqueue_share = runqueue_share_;
        in.sample_window_s = static_cast<double>(window_ns_) / 1e9;
        in.idle_cores = idle_cores_;
        in.cores = available_cores_;
        in.elapsed_s = rounds_ == 0 ? 0.0 : static_cast<double>(now - last_round_ns_) / 1e9;
        last_round_ns_ = now;
    }

    /// Records the decision (the target already clamped) and its inputs for metrics().
    void end_round(const ControllerInput& in, const ControllerDecision& d) {
        ++rounds_;
        grew_ = d.target > in.current_target;
        grown_ = grown_ || grew_;
        std::lock_guard lock(mutex_);
        stats_.rounds = rounds_;
        if (d.target != in.current_target) {
            const int dir = d.target > in.current_target ? 1 : -1;
            ++stats_.changes;
            if (last_dir_ != 0 && dir != last_dir_)
                ++stats_.direction_changes;
            last_dir_ = dir;
        }
        stats_.target = d.target;
        stats_.reason = d.reason;
        stats_.forecast_rate = d.forecast_rate;
        stats_.inputs = in;
    }

    /// Overrides the core count (the simulator's N cores; the tick uses the machine's).
    void set_cores(std::uint32_t n) noexcept { available_cores_ = std::max(1u, n); }

    /// Reasons that may set the target below min_workers: a CPU cap. min_workers threads stay
    /// alive; only `target` of them run tasks at once (WorkerPool's gate).
    static constexpr bool cap_reason(ControllerReason r) noexcept {
        return r == ControllerReason::cpu_bound || r == ControllerReason::runqueue;
    }

    /// One controller step, as the tick (and the tests' simulator) runs it: nothing unless a
    /// round is due; then, when a sample is due, `sample(SchedDelta&)` sums the workers' deltas
    /// (returning false when it could not, e.g. on a test clock), the input is completed, the
    /// policy decides, its target is clamped to [min_workers, max_workers] (to [1, max_workers]
    /// for a CPU cap, see cap_reason) and recorded.
    template <class Policy, class Sample>
    std::optional<ControllerDecision> step(std::int64_t now, ControllerInput& in, Policy& policy,
                                           const Config& cfg, Sample&& sample) {
        peak_busy_ = std::max(peak_busy_, in.busy_workers);
        if (!round_due(now, in))
            return std::nullopt;
        in.peak_busy_workers = peak_busy_;
        peak_busy_ = 0;
        if (sample_due(now)) {
            SchedDelta d;
            if (sample(d))
                set_shares(now, d);
        }
        begin_round(now, in);
        ControllerDecision d = to_decision(policy(in), in.current_target);
        d.target =
            std::clamp(d.target, cap_reason(d.reason) ? 1u : cfg.min_workers, cfg.max_workers);
        end_round(in, d);
        return d;
    }

    /// Copies the last decision into a snapshot (any thread).
    void fill(ControllerStats& out) {
        std::lock_guard lock(mutex_);
        out = stats_;
    }

  private:
    const std::uint32_t max_workers_;
    const std::uint32_t min_workers_;
    const bool fast_;
    const std::int64_t interval_ns_;
    std::int64_t last_round_ns_;  // tick thread
    std::int64_t last_sample_ns_; // tick thread
    bool measured_ = false;       // tick thread
    bool full_sample_ = false;    // tick thread: a measured sample covered half an interval
    bool grown_ = false;          // tick thread: some round raised the target
    std::int64_t window_ns_ = 0;  // tick thread: the last sample's window
    bool grew_ = false;           // tick thread
    double cpu_share_ = 0.0;      // tick thread
    double runqueue_share_ = 0.0; // tick thread
    double idle_cores_ = -1.0;    // tick thread
    std::uint32_t available_cores_ = available_cores();
    std::uint64_t rounds_ = 0;    // tick thread
    std::uint32_t peak_busy_ = 0; // tick thread: most busy workers since the last round
    int last_dir_ = 0;            // under mutex_
    std::mutex mutex_;
    ControllerStats stats_; // under mutex_
};

} // namespace ax::detail
