// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include "config.hpp"
#include "controller.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>

/// The default controller policy of ax::Scheduler, and its burst forecaster. Both are pure state
/// machines fed one ControllerInput per round: no clock, no thread, so the tests' simulator
/// (tests/controller_sim.hpp) runs exactly this code in virtual time.
namespace ax {

/// A light forecaster for periodic bursts (seed §5.1's "predict the arrival pattern"): no model,
/// only the start times of the last bursts. A round is hot when it brings at least
/// `min_burst_tasks` arrivals at more than `hot_factor` times the baseline rate (an EWMA that
/// follows quiet rounds quickly and hot ones slowly, so a steady stream stops looking hot within
/// seconds). A burst starts with a hot round and ends when a round is neither hot nor leaves work
/// queued. When the last four starts are evenly spaced (their three intervals within
/// `period_tolerance` of the longest) the next start is predicted one period after the last, and
/// the worker need the last burst reached is asked for from `lead` (1.1 rounds, or 5 % of the
/// period if longer) before it until `lead` after it; then the prediction lapses until the next
/// burst. Bursts at uneven intervals give no prediction (no pre-scale before them); once one is
/// under way, every burst after the first is met at once with the workers the last one needed
/// (at most its own arrivals so far, unless admission refused some of them) instead of a ramp.
class BurstForecaster {
  public:
    /// Fewest arrivals in one round for it to count as hot (default 16).
    static constexpr std::uint64_t min_burst_tasks = 16;
    /// A hot round's rate exceeds the baseline by this factor (default 3).
    static constexpr double hot_factor = 3.0;
    /// Time constants of the baseline rate in quiet and in hot rounds, seconds.
    static constexpr double quiet_tau_s = 2.0;
    static constexpr double hot_tau_s = 10.0;
    /// Largest relative difference of two intervals that still makes a period (default 0.2).
    static constexpr double period_tolerance = 0.2;
    /// The pre-scale floor is the last burst's worker need divided by this (default 8): the
    /// threads the burst's first tasks need are started before it, the rest at the burst's first
    /// round, which asks for the whole need at once (and comes at the burst's first refused
    /// submit, see detail::TickWaker). A larger share buys little: a quarter (4) cost 40 % more
    /// idle thread-seconds than an eighth for 1 ms less p99 wait of the bursts' first 200 tasks
    /// in the simulator (test_controller_sim, bursty-forecast).
    static constexpr std::uint32_t prescale_divisor = 8;

    /// What the forecaster asks of the controller this round: a floor under the target (0: none)
    /// and the arrival rate it expects (0 outside a predicted burst).
    struct Hint {
        std::uint32_t floor = 0;
        double rate = 0.0;
    };

    /// Feeds one round: the time `t` (seconds since the first round), the round's length `dt`,
    /// the arrivals during it, the queue length now, the worker need the controller computed
    /// from the load (without any forecast floor) and whether admission refused work (or the
    /// queue sat at its soft limit) since the last round.
    void observe(double t, double dt, std::uint64_t arrivals, std::uint32_t queue_length,
                 std::uint32_t need, bool saturated = false) noexcept {
        const double rate = dt > 0.0 ? static_cast<double>(arrivals) / dt : 0.0;
        const bool hot = dt > 0.0 && arrivals >= min_burst_tasks && rate > hot_factor * base_;
        if (dt > 0.0) {
            const double tau = hot ? hot_tau_s : quiet_tau_s;
            base_ += std::min(1.0, dt / tau) * (rate - base_);
        }
        if (!in_burst_ && hot) {
            // When the burst started is known to within the round: its arrivals came in
            // (t - dt, t]. A burst that arrives as predicted keeps the predicted time (a
            // pre-scaled pool meets it without queueing, so no early round marks its start and
            // the round that notices it may come most of a round late; recording that lateness
            // would shift the next prediction past the round that should pre-scale). Otherwise
            // the middle of the round.
            double start = t - 0.5 * std::max(0.0, dt);
            double next = 0.0;
            foreseen_ = false;
            if (predict(next)) {
                if (next > t - std::max(0.0, dt) - 1e-9 && next <= t + 1e-9)
                    start = next;
                const double lead = std::max(1.1 * std::max(0.0, dt), 0.05 * period_s());
                foreseen_ = std::abs(t - next) <= lead + std::max(0.0, dt);
            }
            in_burst_ = true;
            refused_ = false;
            peak_ = need;
            burst_tasks_ = 0;
            burst_start_ = start;
            for (std::size_t i = 0; i + 1 < starts_.size(); ++i)
                starts_[i] = starts_[i + 1];
            starts_.back() = start;
            starts_seen_ = std::min<std::size_t>(starts_seen_ + 1, starts_.size());
        }
        arriving_ = queue_length > 0;
        if (in_burst_) {
            peak_ = std::max(peak_, need);
            burst_tasks_ += arrivals;
            refused_ = refused_ || saturated;
            if (!hot && queue_length == 0) {
                in_burst_ = false;
                learned_peak_ = peak_;
                const double len = std::max(t - burst_start_, dt);
                learned_rate_ = static_cast<double>(burst_tasks_) / len;
            }
        }
    }

    /// The floor and rate for the round at time `t`, given the controller's round length
    /// `round_s` (the lead is a little over one round, so some round falls inside it).
    [[nodiscard]] Hint hint(double t, double round_s) const noexcept {
        Hint h;
        if (in_burst_) {
            // A burst that came as predicted gets at once the workers the last one needed:
            // refusals at a full queue hide how far behind the pool is, so the controller alone
            // would ramp up over a few rounds (x4 per round: 4 -> 200 in three). Any other burst
            // after a first one is met the same way, up to what it brought so far: bursts
            // repeat their size more often than their timing, and before four starts no timing
            // is known (bursts 2 - 4 of a periodic pattern waited as long as without the
            // forecaster). A burst smaller than the last asks only for its own tasks, unless
            // admission refused some of them: then its arrivals so far are what the queue let
            // in, not its size (a 400-task burst against a 150-task queue counted ~125 at its
            // first round, so its next 75 tasks waited for a second round and for their
            // producer's retry_after), and it gets the last burst's need too.
            if (arriving_ && learned_peak_ > 0) {
                h.floor = foreseen_ || refused_
                              ? learned_peak_
                              : static_cast<std::uint32_t>(
                                    std::min<std::uint64_t>(learned_peak_, burst_tasks_));
                h.rate = learned_rate_;
            }
            return h;
        }
        double next = 0.0;
        if (!predict(next))
            return h;
        const double p = period_s();
        const double lead = std::max(1.1 * round_s, 0.05 * p);
        if (t >= next - lead && t <= next + lead) {
            // An eighth of the peak (prescale_divisor): the burst's first tasks start at once,
            // and its first round asks for the whole peak, for an eighth of the idle
            // thread-seconds of pre-starting all of it.
            h.floor = (learned_peak_ + prescale_divisor - 1) / prescale_divisor;
            h.rate = learned_rate_;
        }
        return h;
    }

    /// Whether the last bursts were evenly spaced; `next` gets the predicted start.
    [[nodiscard]] bool predict(double& next) const noexcept {
        if (starts_seen_ < starts_.size() || learned_peak_ == 0)
            return false;
        const double p = period_s();
        if (p <= 0.0)
            return false;
        next = starts_.back() + p;
        return true;
    }

    /// The period of the last four bursts, or 0 when their three intervals were not evenly
    /// spaced (each within period_tolerance of the longest).
    [[nodiscard]] double period_s() const noexcept {
        if (starts_seen_ < starts_.size())
            return 0.0;
        double lo = 1e300;
        double hi = 0.0;
        for (std::size_t i = 1; i < starts_.size(); ++i) {
            const double d = starts_[i] - starts_[i - 1];
            lo = std::min(lo, d);
            hi = std::max(hi, d);
        }
        if (lo <= 0.0 || hi - lo > period_tolerance * hi)
            return 0.0;
        return (starts_.back() - starts_.front()) / static_cast<double>(starts_.size() - 1);
    }

    /// Whether a burst is under way (between its first hot round and its drained end).
    [[nodiscard]] bool in_burst() const noexcept { return in_burst_; }
    /// Worker need the last finished burst reached.
    [[nodiscard]] std::uint32_t learned_peak() const noexcept { return learned_peak_; }

  private:
    double base_ = 0.0;
    bool in_burst_ = false;
    bool foreseen_ = false; // the burst under way started where one was predicted
    bool arriving_ = false; // the last round was hot or left work queued
    bool refused_ = false;  // admission refused work during the burst under way
    std::uint32_t peak_ = 0;
    std::uint32_t learned_peak_ = 0;
    double learned_rate_ = 0.0;
    std::uint64_t burst_tasks_ = 0;
    double burst_start_ = 0.0;
    std::array<double, 4> starts_{};
    std::size_t starts_seen_ = 0;
};

/// The default controller of ax::Scheduler: sizes the pool from what the workers' time is spent
/// on, with no step limit tied to the queue's size, so it needs no tuning for IO-bound,
/// CPU-bound or mixed work (docs/tuning.md explains each input).
///
/// Each round (fast_rounds: every controller_interval / 20, and at once when queued work outgrows
/// a pool at its target) it computes, with d the mean attempt duration and the shares of the
/// workers' busy time measured per worker from the kernel (cpu, runqueue, blocked = the rest):
///   d_eff    = d x (1 - runqueue share)      the duration without oversubscription's inflation
///   in use   = busy workers x (1 - runqueue)  Little's L = arrival rate x d_eff, measured
///   demand   = offered rate x d_eff           only while saturated (refusals hide the backlog)
///   backlog  = queue_length x d_eff / backlog_horizon_s  (the admitted queue, whatever its size)
///   need     = max(in use, demand) + backlog
///   cpu cap  = cores x (cpu + blocked) / cpu  the useful concurrency of this work
/// It grows to min(need, cpu cap) at once; it shrinks when need falls under shrink_hysteresis of
/// the target, by half the surplus per round (at least Config::max_step_down), and straight to
/// the cap while the runqueue share exceeds the CPU share. Runqueue time counts only in the
/// share of the sample the cores were busy (a wait beside idle cores is a wake-up's latency);
/// a pool seen all busy beside idle cores with work queued is a floor until the queue drains;
/// and the cap widened for idle cores must raise the completion rate, not only CPU use
/// (issue 33: docs/tuning.md). With work queued, no core idle and the workers waiting for a CPU
/// (saturated cores), the pool is trimmed from the cap to the knee, cores / cpu x
/// (1 + knee_margin), and the trim stays only if the completion rate did not fall (memory-bound
/// work finishes more at the knee than past it). Before any attempt finished it
/// doubles the pool per round while work is queued. The BurstForecaster's floor then pre-scales
/// ahead of a predicted burst and keeps its workers through a short gap.
/// Config::max_step_up and drain_time are not used (they shape LittleController).
class AdaptiveController {
  public:
    /// Policy name in MetricsSnapshot::controller.policy.
    static constexpr const char* name = "adaptive";
    /// Asks the scheduler for fast rounds (see ControllerPolicy).
    static constexpr bool fast_rounds = true;
    /// Time within which the admitted backlog should be drained (default 100 ms): short,
    /// because for blocked work more workers cost no more thread-seconds while they are busy,
    /// and the CPU cap bounds CPU-bound work anyway.
    static constexpr double backlog_horizon_s = 0.1;
    /// Shrink only when the need is below this share of the target (default 0.8): a margin
    /// for arrival noise, and the damping that keeps direction changes rare.
    static constexpr double shrink_hysteresis = 0.8;
    /// Runqueue share of the busy time above which waiting for a CPU dominates (default 0.5):
    /// the pool grows no further and shrinks to the CPU cap.
    static constexpr double runqueue_dominates = 0.5;
    /// Weight of each new share sample (default 0.5). At the start of the work (until a sample
    /// covered half a sample period or the pool grew), a sample weighs in proportion to the time
    /// it covers against the time behind the smoothed shares.
    static constexpr double share_smoothing = 0.5;
    /// Largest growth of the target per round, as a factor (default 4): from 4 workers to 200
    /// in three rounds, each after a fresh sample of the shares, so the pool never outgrows
    /// what a sample of a few workers showed.
    static constexpr double growth_factor = 4.0;
    /// The CPU cap lowers the target only when it is at most this share of it (default 0.8):
    /// the deadband that keeps a cap measured near the target from moving it.
    static constexpr double cap_shrink_margin = 0.8;
    /// Idle cores (ControllerInput::idle_cores) above this share of the cores, while work is
    /// queued and the work is not CPU-bound (its cap above cores + 1), widen the CPU cap
    /// (default 0.03). The cap assumes the workers' CPU phases spread evenly; on mixed work
    /// they bunch up and wake late, so at the cap the cores idled 22 - 37 % of the time while a
    /// fixed pool of 128 kept them 98 % busy (ax_thumbnails --workload mixed, 20 ms sleep + 3 ms
    /// CPU per task). Idle cores are the signal no runqueue share gives: each worker waited for
    /// a CPU, yet cores stood idle. Raising it leaves more idle time on such work; lowering it
    /// lets the reading's noise (/proc/stat ticks at 100 Hz) grow pools that gain nothing.
    static constexpr double idle_widen_share = 0.03;
    /// Largest widening of the cap per sample, as a factor of the pool size (default 1.5; the
    /// widening is 1.1 + 2 x the idle share, up to this): from the cap to 5 x the cap in four
    /// samples. Larger reaches a big pool sooner and overshoots further.
    static constexpr double widen_step = 1.5;
    /// With every worker busy and work queued, the queue is sized by the workers' turnover
    /// (busy worker-seconds per finished attempt, running attempts' time included) instead of
    /// the mean of finished attempts when it exceeds that mean by this factor (default 4). The
    /// turnover also holds each attempt's dispatch and a woken worker's wait for a core (on a
    /// VM, milliseconds), so near the mean it reads latency, not longer tasks; far above it,
    /// the finished attempts are the short ones of a mix whose long ones hold the workers.
    /// Lower sizes mixes sooner and reads more latency as work; higher leaves more of the
    /// survivor bias.
    static constexpr double turnover_trust = 4.0;
    /// Rise of the process's CPU use (share of all cores, ControllerInput::cpu_utilization)
    /// each widening must bring once the pool reached it (mean over a sample period); two that
    /// do not in a row stop the widening (default 0.02).
    /// Higher stops sooner on work that gains slowly; lower follows spare time that more
    /// workers cannot take (a background process's) further up.
    static constexpr double widen_min_gain = 0.02;
    /// Rise of the completion rate each widening must bring as well (default 0.03, where
    /// ControllerInput::completed_total is known): a raise that only burned more CPU (memory-
    /// bound work slows down as more of it computes at once) is taken back and counts as one
    /// that did not pay. Higher judges a raise on a clearer gain (a sample period of short tasks
    /// counts a few hundred completions, noisy by several percent); lower keeps raises whose
    /// gain is within that noise.
    static constexpr double widen_min_rate_gain = 0.03;
    /// Runqueue share (of the busy time, contended) at or above which a sample taken with work
    /// queued and no core idle reads as cores saturated: the CPU is the bottleneck, and workers
    /// past the ones that keep the cores busy add nothing (default 0.3). Then the pool is trimmed
    /// to the knee (knee_margin) and the trim is judged on the completion rate. Lower trims pools
    /// that wait less for a CPU (more probes, each judged); higher leaves the cap's margin in
    /// place on more saturated work.
    static constexpr double saturated_runqueue = 0.3;
    /// The knee is cores / cpu x (1 + knee_margin), cpu the CPU share of the un-inflated busy
    /// time (default 0.25): the workers that keep the cores busy if their CPU phases collided
    /// little, plus a quarter for collisions. The CPU cap's own margin (1 + blocked share, up to
    /// 2 x) is for cores that idle while CPU phases bunch up; once the cores are saturated that
    /// margin buys nothing, and on memory-bound work it costs (each task takes longer on a CPU
    /// the more compute at once: issue 33's gen-7/8/9/30 lost 10 - 14 % past the knee in the
    /// simulator). Lower trims closer to the cores (more idle time from collisions); higher
    /// keeps more of the contention.
    static constexpr double knee_margin = 0.25;
    /// A trim to the knee stays only if the completion rate of the next sample period at the
    /// knee is at least this share of the rate before it (default 0.97): otherwise the pool
    /// returns to the size of the better rate and trims no more while work stays queued. Higher
    /// takes back trims within the rate's noise; lower keeps trims that cost a little speed.
    static constexpr double trim_keep_rate = 0.97;
    /// Idle cores (ControllerInput::idle_cores) at or above this share of the cores, in a sample
    /// taken while work was queued and every running worker was busy, mark the pool as too small:
    /// until the queue drains, no rule shrinks it below the workers that sample saw busy
    /// (default 0.1: two ticks of /proc/stat's resolution on 2 cores over a 100 ms sample).
    /// Without it a pool whose runqueue share was a woken thread's latency (cores idle, issue
    /// 33) read as oversubscribed, shrank to a few workers, left the cores idle, grew again:
    /// 22 -> 146 -> 22 workers, 1.36 x the best fixed pool in the simulator. Lower trusts
    /// noisier idle readings; higher lets more idle time pass as noise.
    static constexpr double idle_floor_share = 0.1;

    /// Keeps a copy of the limits it needs; `forecast` false leaves the BurstForecaster out (it
    /// still observes, but never sets a floor).
    explicit AdaptiveController(const Config& cfg, bool forecast = true)
        : cfg_(cfg), forecast_(forecast),
          round_s_(std::max(std::chrono::duration<double>(cfg.controller_interval).count() / 20.0,
                            std::chrono::duration<double>(cfg.dispatch_interval).count())) {}

    /// One round: the new target and why.
    ControllerDecision operator()(const ControllerInput& in) noexcept {
        // A CPU cap may hold the target below min_workers (the pool keeps those threads parked).
        const std::uint32_t cur = std::clamp(in.current_target, 1u, cfg_.max_workers);
        // The first round covers everything since start (one round's length, as far as rates go).
        const double dt = seen_ ? std::max(0.0, in.elapsed_s) : round_s_;
        const bool later_round = seen_;
        const std::uint64_t arrivals =
            in.offered_total >= last_offered_ ? in.offered_total - last_offered_ : 0;
        last_offered_ = in.offered_total;
        seen_ = true;
        t_ += dt;
        if (dt > 0.0) {
            const double a = std::min(1.0, dt / rate_tau_s);
            rate_ += a * (static_cast<double>(arrivals) / dt - rate_);
        }
        // The workers' turnover: busy worker-seconds per finished attempt over the last
        // backlog_horizon_s or so (both decayed alike). Unlike the mean of finished attempts it
        // counts the time of attempts still running, so it is not biased to the short ones.
        {
            // The first round primes the count: its dt is a nominal round, not the time the
            // attempts finished so far took.
            const std::uint64_t done =
                in.attempts_total >= turn_done_ ? in.attempts_total - turn_done_ : 0;
            turn_done_ = in.attempts_total;
            if (later_round) {
                const double keep = std::exp(-dt / backlog_horizon_s);
                turn_busy_ = turn_busy_ * keep + static_cast<double>(in.busy_workers) * dt;
                turn_count_ = turn_count_ * keep + static_cast<double>(done);
            }
        }
        // A new sample (the scheduler reuses the last one between samples).
        const bool fresh = in.cpu_share + in.runqueue_share > 0.0 &&
                           (in.cpu_share != last_cpu_in_ || in.runqueue_share != last_rq_in_);
        // Runqueue wait while cores stood idle is no contention for a CPU: a woken thread that
        // waits for a vCPU, or on one core's queue while the other idles, waits for latency,
        // not for other work, and more workers would use that idle time (1 - the idle share
        // of the cores is the share of the wait that can be contention; unknown idle: all).
        const double in_cores = std::max<std::uint32_t>(in.cores, 1);
        const double contended =
            in.idle_cores < 0.0 ? 1.0 : 1.0 - std::clamp(in.idle_cores / in_cores, 0.0, 1.0);
        const double rq_in = std::clamp(in.runqueue_share, 0.0, 1.0) * contended;
        if (fresh) {
            // Until one sample has covered half a sample period or the pool first grew, a
            // sample weighs by the time it covers, and growth's pessimism (recent_, below)
            // leaves it out: the first samples are taken milliseconds after the work started
            // (ControllerStore samples at doubling windows then), when the tasks just started
            // sit in the same phase, all computing or all asleep. Weighed as a full period, a first
            // sample of 14 ms that caught four workers computing at once (cap 2) held a pool
            // whose work wanted 32 at 4 - 6 workers for 240 ms (issue 33, gen-31 on the
            // machine: 1.27 x the best pool). Later short samples (right after a growth) keep
            // their full weight: they show what the pool just grown to does, and growth must
            // not outrun them (on a machine crowded by other processes, CPU-bound work grew to
            // max_workers without them).
            const double w =
                in.sample_window_s > 0.0 ? std::min(in.sample_window_s, round_s_) : round_s_;
            const bool startup = !full_sample_seen_;
            full_sample_seen_ = full_sample_seen_ || w >= 0.5 * round_s_;
            double a = 1.0;
            if (shares_known_)
                a = startup ? w / (w + share_mass_s_ * (1.0 - share_smoothing) / share_smoothing)
                            : share_smoothing;
            share_mass_s_ = shares_known_ ? std::min(share_mass_s_ + w, round_s_) : w;
            cpu_ += a * (std::clamp(in.cpu_share, 0.0, 1.0) - cpu_);
            rq_ += a * (rq_in - rq_);
            shares_known_ = true;
            last_cpu_in_ = in.cpu_share;
            last_rq_in_ = in.runqueue_share;
            if (full_sample_seen_) {
                for (std::size_t i = 0; i + 1 < recent_.size(); ++i)
                    recent_[i] = recent_[i + 1];
                recent_.back() = {std::clamp(in.cpu_share, 0.0, 1.0), rq_in};
                recent_seen_ = std::min(recent_seen_ + 1, recent_.size());
            }
        }
        const double rq = shares_known_ ? rq_ : 0.0;
        const double hi = cfg_.max_workers;

        // The useful concurrency of this work: cores x (cpu + blocked) / cpu, widened by the
        // blocked share (mixed work's CPU phases collide; a few more workers keep the cores
        // busy) and exactly the cores for pure CPU work.
        // Both shares are taken per unit of un-inflated time (busy time less runqueue wait), so
        // the cap is a property of the work, not of the pool's current size: measured at 17
        // workers or at 90 it comes out the same, and the pool does not chase its own shadow
        // (un-normalised, a crowded pool measured a small blocked share, hence a small cap,
        // shrank, measured a large one and grew: the oscillation on mixed work).
        const double cores = std::max<std::uint32_t>(in.cores, 1);
        const double raw_cap = shares_known_ ? cap_of(cores, cpu_, rq) : hi;
        // Widened while the cores idle beside queued work (idle_widen_share): the pool size
        // that still left cores idle becomes a floor under the cap, raised by up to widen_step
        // per sample. The floor outlives the idle time it answered (narrowing again would bring
        // the idle time back, and the pool would swing between the two) and the swings of a
        // crowd's shares (a pool of 80 mixed-work workers in a convoy reads like oversubscribed
        // CPU work: cap ~30, runqueue share 0.7); it lapses only when the work turns CPU-bound
        // (three fresh samples in a row put the cap at the cores).
        if (fresh && floor_ > 0.0)
            cpu_bound_samples_ = raw_cap <= cores + 1.0 ? cpu_bound_samples_ + 1 : 0;
        if (cpu_bound_samples_ >= 3) {
            floor_ = 0.0;
            cpu_bound_samples_ = 0;
            widen_stalled_ = false;
            raise_util_ = -1.0;
            failed_raises_ = 0;
        }
        const bool idle_cores = in.idle_cores >= idle_widen_share * cores;
        const bool queued = in.queue_length > 0 || in.saturated;
        // The work may change under a queue that never drains: three fresh samples in a row
        // that read it as CPU-bound (the cap at the cores, no idle core) end the floor too.
        if (fresh && idle_floor_ > 0.0)
            idle_floor_cpu_samples_ =
                raw_cap <= cores + 1.0 && in.idle_cores < idle_floor_share * cores
                    ? idle_floor_cpu_samples_ + 1
                    : 0;
        if (!queued || idle_floor_cpu_samples_ >= 3) {
            idle_floor_ = 0.0;
            idle_floor_cpu_samples_ = 0;
        } else if (fresh && !widen_stalled_ && in.idle_cores >= idle_floor_share * cores &&
                   in.busy_workers + 1 >= std::max(std::min(in.live_workers, cur), 1u))
            idle_floor_ = std::max(idle_floor_, static_cast<double>(in.busy_workers));
        // Each raise must pay: once the pool has grown to the last floor and run a sample
        // period there, the process's CPU use must have risen by widen_min_gain; after two
        // raises in a row that did not, the raises stop (until the queue drains or the floor
        // lapses). Spare time that more workers cannot
        // take (a background process's share, a hypervisor's) then stops the widening instead
        // of growing the pool to max_workers.
        if (!queued) {
            widen_stalled_ = false;
            raise_util_ = -1.0;
            failed_raises_ = 0;
        }
        // Judged on the mean CPU use over a sample period (one tick's reading swings by
        // +-7 % on mixed work), and only two failed raises in a row stop it.
        util_acc_ += std::clamp(in.cpu_utilization, 0.0, 1.0) * dt;
        util_t_ += dt;
        double period_util = -1.0;
        // And on the completions per second over the same period (ControllerInput::
        // completed_total, where the scheduler counts them): a raise that burned more CPU but
        // finished no more work did not pay either. Memory-bound work does that: each task
        // takes longer on a CPU the more tasks compute at once (their data evicts each other's
        // from the caches and they share the memory bus), so the CPU use rises with the pool
        // while the work done stays flat or falls (issue 33: a 3 MiB image filled and
        // downscaled per task took 60 % more CPU time in a pool of 128 than in one of 16).
        double period_rate = -1.0;
        if (fresh) {
            period_util = util_t_ > 0.0 ? util_acc_ / util_t_ : -1.0;
            if (done_primed_ && in.completed_total > 0 && util_t_ > 0.0 &&
                in.completed_total >= done_at_sample_)
                period_rate = static_cast<double>(in.completed_total - done_at_sample_) / util_t_;
            done_at_sample_ = in.completed_total;
            done_primed_ = true;
            util_acc_ = util_t_ = 0.0;
        }
        if (fresh && raise_util_ >= 0.0 && in.live_workers >= floor_ && ++since_raise_ >= 2) {
            const bool paid = period_util >= raise_util_ + widen_min_gain &&
                              (raise_rate_ < 0.0 || period_rate < 0.0 ||
                               period_rate >= raise_rate_ * (1.0 + widen_min_rate_gain));
            failed_raises_ = paid ? 0 : failed_raises_ + 1;
            widen_stalled_ = failed_raises_ >= 2;
            // A raise that did no more work gives its workers back: the floor returns to
            // where it stood before it.
            // Its idle cores were no sign of a pool too small either: the idle floor goes
            // back to the pool before the raise, and rises no more while the widening stalls.
            if (!paid && period_rate >= 0.0 && raise_rate_ >= 0.0 &&
                period_rate < raise_rate_ * (1.0 + widen_min_rate_gain)) {
                floor_ = floor_before_raise_;
                idle_floor_ = std::min(idle_floor_, pool_before_raise_);
            }
            raise_util_ = -1.0;
        }
        if (fresh && idle_cores && queued && shares_known_ && raw_cap > cores + 1.0 &&
            !widen_stalled_ && raise_util_ < 0.0 && period_util >= 0.0) {
            floor_before_raise_ = floor_;
            // From the cap in force (after a raise taken back the pool is still above it).
            const double base = std::min<double>(cur, std::max(raw_cap, floor_));
            pool_before_raise_ = base;
            floor_ = std::min(
                hi, std::max(
                        floor_,
                        std::ceil(base * std::min(widen_step, 1.1 + 2.0 * in.idle_cores / cores))));
            raise_util_ = period_util;
            raise_rate_ = period_rate;
            since_raise_ = 0;
        }
        // The knee (issue 33): with work queued, no core idle and the workers waiting for a CPU
        // (saturated_runqueue), the cores are the bottleneck, and the CPU cap's margin for
        // colliding CPU phases only adds a crowd. On memory-bound work the crowd costs: each
        // task takes longer on a CPU the more compute at once, so the completion rate falls
        // past the knee while the CPU use stays at the cores. The pool is trimmed to
        // cores / cpu x (1 + knee_margin) (never under the idle floor: a pool seen too small),
        // and the trim is judged like a widening, on the
        // completion rate of a full sample period at the knee: a rate below trim_keep_rate of
        // the one before gives the margin back and stops trimming while work stays queued.
        // A trim outlives a drained queue (the next burst of the same work meets the knee at
        // once) until the work changes (the CPU cap moves by more than 2 x) or the cores idle
        // at the knee.
        // Cores idle beside queued work at a kept knee end it too: the margin is needed again
        // (the arrivals or the mix changed), and the idle-core widening must not stay capped.
        if (fresh && trim_ > 0.0 &&
            (raw_cap > 2.0 * trim_cap_ || 2.0 * raw_cap < trim_cap_ ||
             (!trim_judge_ && queued && in.live_workers <= trim_ + 1.0 &&
              in.idle_cores >= idle_floor_share * cores))) {
            trim_ = 0.0;
            trim_judge_ = false;
        }
        // A trim still to be judged when the queue drains waits for the next sample period
        // spent at the knee with work queued (the next burst of the same work): a period that
        // ended with the drain counts the tail's few completions, no measure of the pool.
        if (!queued) {
            trim_off_ = false;
            trim_since_ = 0;
        }
        // Judged on a sample taken at the knee with work queued: cores idle beside that work
        // (the knee was too tight for colliding CPU phases) or a completion rate under
        // trim_keep_rate of the one before take it back.
        // The period judged must have started at the knee too (not the ramp of a new burst
        // up to it): the sample before saw the pool there, or set the trim.
        const bool at_knee =
            queued && in.live_workers <= trim_ + 1.0 && in.busy_workers + 1.0 >= trim_;
        if (fresh && trim_judge_ && !at_knee)
            trim_since_ = 0;
        else if (fresh && trim_judge_ && trim_since_ == 0)
            trim_since_ = 1;
        else if (fresh && trim_judge_) {
            trim_judge_ = false;
            if (in.idle_cores >= idle_floor_share * cores ||
                (period_rate >= 0.0 && period_rate < trim_keep_rate * trim_rate_)) {
                trim_ = trim_before_;
                trim_off_ = true;
                restore_to_ = trim_from_; // the need may not ask for them back by itself
            }
        }
        const bool cores_saturated = shares_known_ && in.idle_cores >= 0.0 &&
                                     in.idle_cores < idle_widen_share * cores &&
                                     rq_ >= saturated_runqueue;
        if (fresh && queued && cores_saturated && !trim_off_ && !trim_judge_ && period_rate > 0.0 &&
            in.live_workers >= cur && rq_ < 1.0 - 1e-3 && cpu_ > 1e-3) {
            const double cpu_n = std::min(1.0, cpu_ / (1.0 - rq_));
            const double knee = std::max(
                {std::ceil(cores / cpu_n * (1.0 + knee_margin)), cores + 1.0, idle_floor_});
            if (knee <= cap_shrink_margin * cur) {
                trim_before_ = trim_;
                trim_from_ = cur;
                trim_ = knee;
                trim_rate_ = period_rate;
                trim_cap_ = raw_cap;
                trim_judge_ = true;
                trim_since_ = 1; // this period starts at the knee
            }
        }
        double cap = std::max(raw_cap, floor_);
        if (trim_ > 0.0)
            cap = std::min(cap, trim_);
        // Growth trusts the lowest cap and the highest runqueue share of the last few samples,
        // not their average. A worker waiting for a CPU has its wait credited by the kernel
        // only when it next runs, so on a machine crowded by other processes one sample shows
        // it as blocked (a tiny CPU share, a cap in the hundreds) and a later one as runqueue
        // wait: averaged, CPU-bound work grew to 200 workers on a loaded machine (measured).
        double grow_cap = cap;
        double rq_recent = shares_known_ ? rq_ : 0.0;
        for (std::size_t i = recent_.size() - recent_seen_; i < recent_.size(); ++i) {
            grow_cap =
                std::min(grow_cap, std::max(floor_, cap_of(cores, recent_[i].cpu, recent_[i].rq)));
            rq_recent = std::max(rq_recent, recent_[i].rq);
        }
        // The cap lowers the target only after two fresh samples in a row put it clearly below
        // (under cap_shrink_margin of the target): one sample can catch a transient (a burst's
        // workers all waking at once), and a cap near the target is measurement noise.
        if (fresh)
            cap_low_samples_ =
                cap < cur && cap <= cap_shrink_margin * cur ? cap_low_samples_ + 1 : 0;
        const bool cap_confirmed = cap_low_samples_ >= 2;

        ControllerReason why = ControllerReason::little_law;
        double need = 0.0;
        const double d = std::max(0.0, in.avg_duration_s) * (1.0 - rq);
        if (d <= 0.0) {
            // Nothing finished yet: every queued task may be long. Double while work waits.
            need = in.queue_length > 0 ? std::min<double>(in.busy_workers + in.queue_length,
                                                          std::max<double>(2.0 * cur, 1.0))
                                       : in.busy_workers;
            if (in.queue_length > 0)
                why = ControllerReason::backlog;
        } else {
            const double in_use = in.busy_workers * (1.0 - rq);
            const double demand = in.saturated ? std::max(0.0, rate_) * d : 0.0;
            // The queue is a draw of the whole mix; the finished attempts are biased to its
            // short tasks while the long ones hold every worker (issue 33, gen-26: 59 % of the
            // tasks asleep 93 ms beside 0.1 ms ones read as a backlog of a few workers, and the
            // pool grew by one per round). With every worker busy, the turnover is the better
            // estimate of what a queued task will hold a worker for.
            double d_q = d;
            const double turn = turn_busy_ / std::max(turn_count_, 1.0) * (1.0 - rq);
            if (in.busy_workers >= std::max(std::min(in.live_workers, cur), 1u) &&
                turn > turnover_trust * d)
                d_q = turn;
            const double backlog = in.queue_length * d_q / backlog_horizon_s;
            need = std::max(in_use, demand) + backlog;
            if (in.saturated && demand > in_use)
                why = ControllerReason::saturated;
            else if (backlog > in_use)
                why = ControllerReason::backlog;
            if (in.saturated && in.busy_workers >= in.live_workers && in.live_workers >= cur)
                need = std::max(need, 2.0 * cur); // refusals at a full queue hide the backlog
            // Every worker busy and work still queued: not a pool to shrink. Little's Law on
            // d_eff undercounts a crowd in a convoy (a large runqueue share makes d_eff small
            // while the cores idle), and shrinking it swung mixed work 77 -> 63 -> 77 (measured);
            // oversubscribed CPU work shrinks by the CPU cap instead.
            if (in.queue_length > 0 && in.busy_workers >= std::min(in.live_workers, cur))
                need = std::max(need, static_cast<double>(cur));
        }
        if (in.queue_length > 0)
            need = std::max(need, 1.0);
        need = std::min(std::ceil(need - 1e-9), hi);
        // What a burst needed: the controller's need, or the workers it kept busy where a
        // forecast floor (not the need) gave them.
        // Running plus waiting counts too: a burst the forecast floor met kept fewer workers
        // busy and queued less, so each burst learned a smaller need than the last, and the
        // waits of bursts 5 - 8 grew 9 -> 29 ms (measured); the tasks that wanted a worker at
        // once do not shrink that way.
        fc_.observe(t_, dt, arrivals, in.queue_length,
                    std::max({static_cast<std::uint32_t>(std::max(0.0, need)), in.busy_workers,
                              in.peak_busy_workers,
                              std::min(cfg_.max_workers, in.busy_workers + in.queue_length)}),
                    in.saturated);

        double want = need;
        if (want > cap) {
            want = cap;
            why = ControllerReason::cpu_bound;
        }
        // Idle cores beside queued work temper the pessimism: one extreme sample (a crowd of
        // workers all waking at once) must not hold the pool far below the cap while cores
        // idle, so growth toward the cap goes on, widen_step x per round at most.
        if (idle_cores && queued && shares_known_)
            grow_cap = std::max(grow_cap, std::min(cap, widen_step * cur));
        if (want > cur && want > grow_cap) {
            want = std::max<double>(grow_cap, cur);
            why = ControllerReason::cpu_bound;
        }
        double next = cur;
        const bool waits_for_cpu = shares_known_ && rq_ > runqueue_dominates;
        const bool recently_waited = shares_known_ && rq_recent > runqueue_dominates;
        if (waits_for_cpu && cur > cap) {
            // Oversubscribed: workers wait for a CPU more than they run. Shrink to the cap once
            // two samples agree.
            next = cap_confirmed ? cap : cur;
            why = ControllerReason::runqueue;
        } else if (want > cur && (waits_for_cpu || recently_waited) && !(idle_cores && queued)) {
            // Grow no further while runqueue wait dominates (whoever causes it: more threads
            // would only queue behind the others) and no core idles.
            why = ControllerReason::runqueue;
        } else if (want > cur && !shares_known_ && in.busy_workers > 0 && ++blind_rounds_ < 2) {
            // Work started but nothing measured yet: this round's sample primes the workers'
            // cursors, the next one shows whether the work is CPU-bound. Wait one round rather
            // than grow blind (where shares are never measured this only delays by a round).
            why = ControllerReason::hold;
        } else if (want > cur) {
            next = std::min(want, std::max(growth_factor * cur, cur + growth_factor));
        } else if (want < cur) {
            if (why == ControllerReason::cpu_bound) {
                next = cap_confirmed ? want : cur;
            } else if (want < shrink_hysteresis * cur) {
                const double step =
                    std::max<double>(cfg_.max_step_down, std::ceil((cur - want) / 2.0));
                next = std::max(want, cur - step);
                why = ControllerReason::idle;
            } else {
                why = ControllerReason::hold;
            }
        } else if (why != ControllerReason::cpu_bound) {
            why = ControllerReason::hold;
        }

        // Never below a pool that was seen too small: while work stays queued, no shrink goes
        // under the most workers a sample saw all busy with cores idle beside the queue.
        if (queued && next < cur && next < idle_floor_) {
            next = std::min<double>(cur, idle_floor_);
            why = ControllerReason::hold;
        }
        // A trim taken back returns the pool to its size before the trim (within the cap).
        if (restore_to_ > 0.0) {
            if (next < std::min(restore_to_, cap)) {
                next = std::min(restore_to_, cap);
                why = ControllerReason::cpu_bound;
            }
            restore_to_ = 0.0;
        }
        // The knee holds at once, with no second sample to confirm it: the trim is judged on
        // the completion rate instead, and the sample it came from saw the cores saturated.
        if (trim_ > 0.0 && next > trim_) {
            next = std::max(trim_, 1.0);
            why = ControllerReason::cpu_bound;
        }
        const BurstForecaster::Hint h =
            forecast_ ? fc_.hint(t_, round_s_) : BurstForecaster::Hint{};
        const double floor = std::min<double>(h.floor, cap);
        if (h.floor > 0 && next < floor) {
            why = floor > cur ? ControllerReason::forecast : ControllerReason::keep_warm;
            next = floor;
        }
        const bool capped = why == ControllerReason::cpu_bound || why == ControllerReason::runqueue;
        next = std::clamp(next, capped ? 1.0 : static_cast<double>(cfg_.min_workers), hi);
        if (in.queue_length > 0)
            next = std::max(next, 1.0);
        if (next > cur)
            full_sample_seen_ = true; // the start is over (see the shares' weights above)
        return {static_cast<std::uint32_t>(next), why, h.rate};
    }

    /// The forecaster's state (tests, diagnostics).
    [[nodiscard]] const BurstForecaster& forecaster() const noexcept { return fc_; }

  private:
    /// The CPU cap of shares `cpu`, `rq`: cores / cpu_n x (1 + blocked_n), at most max_workers.
    [[nodiscard]] double cap_of(double cores, double cpu, double rq) const noexcept {
        const double hi = cfg_.max_workers;
        if (cpu <= 1e-3 || rq >= 1.0 - 1e-3)
            return hi;
        const double cpu_n = std::min(1.0, cpu / (1.0 - rq));
        const double blocked_n = 1.0 - cpu_n;
        return std::clamp(std::floor(cores / cpu_n * (1.0 + blocked_n) + 0.5), 1.0, hi);
    }

    struct Shares {
        double cpu = 0.0;
        double rq = 0.0;
    };
    static constexpr double rate_tau_s = 0.5;
    Config cfg_;
    bool forecast_;
    double round_s_;
    double t_ = 0.0;
    bool seen_ = false;
    std::uint64_t last_offered_ = 0;
    double rate_ = 0.0;
    bool shares_known_ = false;
    double cpu_ = 0.0;
    double rq_ = 0.0;
    double last_cpu_in_ = -1.0;
    double last_rq_in_ = -1.0;
    double share_mass_s_ = 0.0;     // seconds of samples behind cpu_ and rq_ (at most a period)
    bool full_sample_seen_ = false; // a sample covered half a period or the pool grew
    int cap_low_samples_ = 0;
    double floor_ = 0.0;               // the CPU cap's floor from idle cores (idle_widen_share)
    int cpu_bound_samples_ = 0;        // fresh samples in a row with the cap at the cores
    double raise_util_ = -1.0;         // cpu_utilization at the last raise still to be judged
    double raise_rate_ = -1.0;         // completions per second before it (-1: unknown)
    double floor_before_raise_ = 0.0;  // floor_ before the raise still to be judged
    double pool_before_raise_ = 0.0;   // the pool size that raise started from
    bool done_primed_ = false;         // done_at_sample_ holds a sample's count
    std::uint64_t done_at_sample_ = 0; // completed_total at the last fresh sample
    int since_raise_ = 0;              // fresh samples since the pool reached that raise's floor
    int failed_raises_ = 0;            // raises in a row that did not pay
    bool widen_stalled_ = false;       // two did not: no more until the queue drains
    double util_acc_ = 0.0;            // cpu_utilization x seconds since the last fresh sample
    double util_t_ = 0.0;
    std::array<Shares, 4> recent_{}; // the last fresh samples, raw (growth's pessimism)
    std::size_t recent_seen_ = 0;
    int blind_rounds_ = 0;
    double trim_ = 0.0;              // the knee the pool is trimmed to (0: none)
    double trim_before_ = 0.0;       // trim_ before the trim still to be judged
    double trim_from_ = 0.0;         // the pool size that trim started from
    double restore_to_ = 0.0;        // a trim taken back: the pool returns to this size
    double trim_rate_ = 0.0;         // completions per second of the sample period before it
    double trim_cap_ = 0.0;          // the CPU cap when it was set (a different cap: other work)
    bool trim_judge_ = false;        // a trim waits for a full sample period at the knee
    int trim_since_ = 0;             // fresh samples at the knee since the trim
    bool trim_off_ = false;          // a trim cost speed: no more until the queue drains
    int idle_floor_cpu_samples_ = 0; // fresh samples in a row that read the work as CPU-bound
    double idle_floor_ = 0.0;        // most workers seen all busy beside idle cores and queued work
    std::uint64_t turn_done_ = 0;    // attempts_total at the last round
    double turn_busy_ = 0.0;         // busy worker-seconds, decayed over backlog_horizon_s
    double turn_count_ = 0.0;        // finished attempts, decayed alike
    BurstForecaster fc_;
};

} // namespace ax
