// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include "config.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace ax {

/// What the controller sees each round, measured over the metrics window.
struct ControllerInput {
    /// Tasks admitted per second.
    double incoming_rate = 0.0;
    /// Mean duration of a finished attempt, in seconds.
    double avg_duration_s = 0.0;
    /// Tasks waiting in the queue now.
    std::uint32_t queue_length = 0;
    /// The worker target currently in force.
    std::uint32_t current_target = 0;
    /// Worker threads alive, and those running a task now.
    std::uint32_t live_workers = 0;
    std::uint32_t busy_workers = 0;
    /// Most workers running a task at any tick since the previous round (at least
    /// busy_workers): a burst shorter than a round shows here what it kept busy.
    std::uint32_t peak_busy_workers = 0;
    /// Share of all cores the process used recently (0..1): the oversubscription signal.
    double cpu_utilization = 0.0;
    /// The queue is at its soft limit or refused work since the last tick: refusals, not queue
    /// length, now measure demand.
    bool saturated = false;
    /// Submits per second over the window, refused ones included: the demand, which completions
    /// (capped by the pool's current size) cannot show.
    double offered_rate = 0.0;
    /// Shares of the workers' busy wall time since the last round spent on a CPU, and waiting in
    /// the kernel's run queue for one (0..1 each; the rest is blocked time). Sampled per worker
    /// once per round, never per task; zero when unknown.
    double cpu_share = 0.0;
    double runqueue_share = 0.0;
    /// Seconds of wall time the shares above were measured over (the last sample's window); 0
    /// when unknown (a policy takes it for a full sample period). Samples right after the work
    /// starts or the pool grows cover a few milliseconds, in which the tasks just started sit
    /// in the same phase (all computing, or all asleep), so a policy weighs a sample by the
    /// time it covers.
    double sample_window_s = 0.0;
    /// Cores of the whole machine left idle over the last sample, on average (0..cores), from
    /// /proc/stat; negative when unknown (not Linux, a test clock, the first sample). Idle cores
    /// while work is queued mean more workers would run more work, whatever the runqueue share
    /// says (a crowd of mixed-work workers collides in its CPU phases and then sleeps together:
    /// each one waited for a CPU, yet the cores sat idle a quarter of the time, measured).
    double idle_cores = -1.0;
    /// Cores the process may run on.
    std::uint32_t cores = 1;
    /// Submits since start, refused ones included (a policy diffs it between rounds for an
    /// arrival rate that reacts within one round, which the window average cannot).
    std::uint64_t offered_total = 0;
    /// Tasks completed since start, failed attempts not counted (0 where the caller does not
    /// count them): a policy diffs it over a sample period for the rate of work done, which CPU
    /// use alone cannot show (memory-bound work burns more CPU per task the more of it runs at
    /// once).
    std::uint64_t completed_total = 0;
    /// Attempts finished since start, failed ones included (0 where the caller does not count
    /// them): with the busy workers over time, a policy gets the workers' turnover (busy
    /// worker-seconds per finished attempt), which counts the time of attempts still running.
    std::uint64_t attempts_total = 0;
    /// Seconds since the previous controller round (0 on the first round, and on rounds that run
    /// within one reading of a frozen clock).
    double elapsed_s = 0.0;
};

/// Why the controller set the target it did, for metrics and dashboards (bounded: one label
/// value each in the Prometheus exposition).
enum class ControllerReason : std::uint8_t {
    none,         ///< No round has run yet.
    hold,         ///< The target already fits the load.
    little_law,   ///< Little's Law: arrival rate x mean duration (+ backlog / drain_time).
    backlog,      ///< The admitted queue needs more workers to drain in time.
    saturated,    ///< Queue at its limit with every worker busy: stepping up per tick.
    cpu_bound,    ///< The CPU share of the work bounds useful concurrency near the cores.
    runqueue,     ///< Workers wait for a CPU more than they run: shrinking.
    forecast,     ///< Pre-scaled ahead of a predicted burst.
    keep_warm,    ///< Holding workers through a short gap between predicted bursts.
    idle,         ///< Less work than workers: shrinking toward min_workers.
    queued_floor, ///< Queued work and no worker at all: one worker.
};

/// What a controller policy may answer instead of a plain target: the target, why, and the
/// arrival rate its forecaster expects (0 without one). The scheduler clamps the target to
/// [min_workers, max_workers] and reports all three in MetricsSnapshot::controller.
struct ControllerDecision {
    std::uint32_t target = 0;
    ControllerReason reason = ControllerReason::hold;
    double forecast_rate = 0.0;
};

/// Number of ControllerReason values (for renderers that enumerate them).
inline constexpr std::size_t controller_reason_count = 11;

/// Snake-case name of a reason (the Prometheus label value, the JSON field).
constexpr const char* controller_reason_name(ControllerReason r) noexcept {
    switch (r) {
    case ControllerReason::none:
        return "none";
    case ControllerReason::hold:
        return "hold";
    case ControllerReason::little_law:
        return "little_law";
    case ControllerReason::backlog:
        return "backlog";
    case ControllerReason::saturated:
        return "saturated";
    case ControllerReason::cpu_bound:
        return "cpu_bound";
    case ControllerReason::runqueue:
        return "runqueue";
    case ControllerReason::forecast:
        return "forecast";
    case ControllerReason::keep_warm:
        return "keep_warm";
    case ControllerReason::idle:
        return "idle";
    case ControllerReason::queued_floor:
        return "queued_floor";
    }
    return "none";
}

/// One sentence a person reads on a dashboard, for each reason.
constexpr const char* controller_reason_text(ControllerReason r) noexcept {
    switch (r) {
    case ControllerReason::none:
        return "no controller round yet";
    case ControllerReason::hold:
        return "target fits the load";
    case ControllerReason::little_law:
        return "sized by Little's Law from arrival rate and mean duration";
    case ControllerReason::backlog:
        return "growing to drain the queued backlog";
    case ControllerReason::saturated:
        return "queue full and every worker busy";
    case ControllerReason::cpu_bound:
        return "CPU-bound work: concurrency bounded near the cores";
    case ControllerReason::runqueue:
        return "workers wait for a CPU: shrinking";
    case ControllerReason::forecast:
        return "pre-scaled ahead of a predicted burst";
    case ControllerReason::keep_warm:
        return "keeping workers warm through a short gap";
    case ControllerReason::idle:
        return "less work than workers: shrinking";
    case ControllerReason::queued_floor:
        return "queued work needs at least one worker";
    }
    return "";
}

/// True when more threads cannot help: the process already uses cfg.cpu_ceiling of the machine.
/// Adding threads to CPU-bound work only lengthens every task, which Little's Law would misread
/// as a reason to add even more.
inline bool cpu_bound(const ControllerInput& in, const Config& cfg) noexcept {
    return in.cpu_utilization >= cfg.cpu_ceiling;
}

/// The seed's Little's-Law sizing (§2.1, §3.5) as a pure function:
///   raw = incoming_rate x avg_duration + queue_length / drain_time,
/// rounded, clamped to [min_workers, max_workers], then moved from current_target by at most
/// max_step_up / max_step_down so the pool never lurches. While cpu_bound() it does not grow.
inline std::uint32_t little_law_target(const ControllerInput& in, const Config& cfg) noexcept {
    const double drain_s = std::chrono::duration<double>(cfg.drain_time).count();
    double raw = std::max(0.0, in.incoming_rate) * std::max(0.0, in.avg_duration_s);
    if (in.queue_length > 0 && drain_s > 0.0)
        raw += static_cast<double>(in.queue_length) / drain_s;
    // Queued work needs at least one worker, whatever the rounding says (min_workers may be 0).
    if (in.queue_length > 0)
        raw = std::max(raw, 1.0);
    const double lo = cfg.min_workers;
    const double hi = cfg.max_workers;
    const double clamped = std::clamp(std::floor(raw + 0.5), lo, hi);
    const auto wanted = static_cast<std::uint32_t>(clamped);
    const std::uint32_t cur = std::clamp(in.current_target, cfg.min_workers, cfg.max_workers);
    if (wanted > cur) {
        if (cpu_bound(in, cfg))
            return cur;
        return wanted - cur > cfg.max_step_up ? cur + cfg.max_step_up : wanted;
    }
    if (wanted < cur)
        return cur - std::min(cur - wanted, cfg.max_step_down);
    return cur;
}

/// The saturation rule the scheduler applies every tick, between controller rounds: when the
/// queue sits at its soft limit, every live worker is busy and the pool has reached its target,
/// the workers are the bottleneck and the queue length can no longer show how far behind they are
/// (admission caps it). Then the target steps up by max_step_up per tick rather than per
/// controller_interval, unless cpu_bound() or scale_out_when_saturated is off. Returns the new
/// target (current_target when the rule does not apply).
inline std::uint32_t saturation_target(const ControllerInput& in, const Config& cfg) noexcept {
    const std::uint32_t cur = std::clamp(in.current_target, cfg.min_workers, cfg.max_workers);
    if (!cfg.scale_out_when_saturated || !in.saturated || cpu_bound(in, cfg))
        return cur;
    if (in.live_workers < cur || in.busy_workers < in.live_workers)
        return cur;
    return cfg.max_workers - cur > cfg.max_step_up ? cur + cfg.max_step_up : cfg.max_workers;
}

/// The seed's controller (§2.1, §3.5): little_law_target() every controller_interval, with the
/// saturation rule stepping up between rounds. Available as
/// `ax::Scheduler<std::chrono::steady_clock, ax::LittleController>`; the default is
/// ax::AdaptiveController (adaptive_controller.hpp). A controller policy is any type
/// constructible from `const Config&` whose `operator()(const ControllerInput&)` returns the new
/// worker target (a std::uint32_t, or a ControllerDecision with its reason); policies.hpp states
/// the contract.
class LittleController {
  public:
    /// Policy name in MetricsSnapshot::controller.policy.
    static constexpr const char* name = "little_law";
    /// Keeps a copy of the limits it needs.
    explicit LittleController(const Config& cfg) : cfg_(cfg) {}
    /// The new worker target.
    std::uint32_t operator()(const ControllerInput& in) const noexcept {
        return little_law_target(in, cfg_);
    }

  private:
    Config cfg_;
};

} // namespace ax
