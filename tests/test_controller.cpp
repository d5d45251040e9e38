// Unit tests for ax/controller.hpp: little_law_target and LittleController.
#include <ax/controller.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <limits>

using namespace std::chrono_literals;

namespace {

std::uint32_t target(double rate, double avg_s, std::uint32_t queue, std::uint32_t current,
                     const ax::Config& cfg = ax::Config{}) {
    return ax::little_law_target(ax::ControllerInput{rate, avg_s, queue, current}, cfg);
}

} // namespace

TEST_CASE("little_law_target: the seed's example", "[controller]") {
    // 200 tasks/s x 0.5 s = 100 workers; already at 100.
    CHECK(target(200.0, 0.5, 0, 100) == 100);
}

TEST_CASE("little_law_target: queue term is queue_length / drain_time", "[controller]") {
    // 100 + 150 / 5 s = 130.
    CHECK(target(200.0, 0.5, 150, 130) == 130);
    CHECK(target(200.0, 0.5, 150, 125) == 130);
    // Queue term alone: 150 / 5 = 30.
    CHECK(target(0.0, 0.0, 150, 30) == 30);
    CHECK(target(0.0, 0.0, 150, 25) == 30);

    ax::Config slow_drain;
    slow_drain.drain_time = 10s;
    CHECK(target(0.0, 0.0, 150, 15, slow_drain) == 15);
    CHECK(target(200.0, 0.5, 150, 115, slow_drain) == 115);

    ax::Config fast_drain;
    fast_drain.drain_time = 500ms;
    CHECK(target(0.0, 0.0, 10, 20, fast_drain) == 20);
}

TEST_CASE("little_law_target: clamps to [min_workers, max_workers]", "[controller]") {
    SECTION("below min") {
        CHECK(target(1.0, 1.0, 0, 4) == 4);
        CHECK(target(0.0, 0.0, 0, 4) == 4);
        CHECK(target(0.0, 0.0, 0, 6) == 4); // down by 2, within the step
    }
    SECTION("above max") {
        CHECK(target(1000.0, 1.0, 0, 200) == 200);
        CHECK(target(1000.0, 1.0, 0, 195) == 200);
        CHECK(target(1e9, 1e9, 1000000, 200) == 200);
    }
    SECTION("custom limits") {
        ax::Config cfg;
        cfg.min_workers = 1;
        cfg.max_workers = 10;
        cfg.max_step_up = 100;
        cfg.max_step_down = 100;
        CHECK(target(3.0, 2.0, 0, 1, cfg) == 6);
        CHECK(target(300.0, 2.0, 0, 1, cfg) == 10);
        CHECK(target(0.0, 0.0, 0, 10, cfg) == 1);
    }
}

TEST_CASE("little_law_target: moves at most +max_step_up / -max_step_down", "[controller]") {
    CHECK(target(200.0, 0.5, 0, 50) == 60);  // wants 100, +10
    CHECK(target(200.0, 0.5, 0, 91) == 100); // wants 100, +9
    CHECK(target(200.0, 0.5, 0, 89) == 99);
    CHECK(target(100.0, 0.5, 0, 100) == 95); // wants 50, -5
    CHECK(target(100.0, 0.5, 0, 53) == 50);  // wants 50, -3
    CHECK(target(100.0, 0.5, 0, 56) == 51);

    ax::Config cfg;
    cfg.max_step_up = 1;
    cfg.max_step_down = 2;
    CHECK(target(200.0, 0.5, 0, 50, cfg) == 51);
    CHECK(target(100.0, 0.5, 0, 100, cfg) == 98);
}

TEST_CASE("little_law_target: current_target outside [min, max] is clamped first", "[controller]") {
    CHECK(target(200.0, 0.5, 0, 0) == 14);     // from min 4, +10
    CHECK(target(1.0, 1.0, 0, 0) == 4);        // wants min
    CHECK(target(200.0, 0.5, 0, 1000) == 195); // from max 200, -5
    CHECK(target(1000.0, 1.0, 0, 1000) == 200);
}

TEST_CASE("little_law_target: rounds half up", "[controller]") {
    CHECK(target(10.5, 1.0, 0, 10) == 11);
    CHECK(target(10.49, 1.0, 0, 10) == 10);
    CHECK(target(21.0, 0.5, 0, 10) == 11); // 10.5
    CHECK(target(9.0, 1.0, 3, 10, [] {
              ax::Config c;
              c.drain_time = 2s; // 9 + 3 / 2 = 10.5
              return c;
          }()) == 11);
    CHECK(target(20.0, 0.7, 0, 14) == 14); // 14.000000000000002
}

TEST_CASE("little_law_target: negative inputs count as zero", "[controller]") {
    CHECK(target(-100.0, 0.5, 0, 4) == 4);
    CHECK(target(100.0, -0.5, 0, 4) == 4);
    CHECK(target(-100.0, -0.5, 50, 10) == 10); // 50 / 5 = 10, not (-100 x -0.5) + 10
}

TEST_CASE("little_law_target: a huge max_step_up does not wrap around", "[controller]") {
    // validate() accepts any non-zero step; UINT32_MAX reads as "no step limit".
    ax::Config cfg;
    cfg.max_step_up = std::numeric_limits<std::uint32_t>::max();
    cfg.max_step_down = std::numeric_limits<std::uint32_t>::max();
    REQUIRE_NOTHROW(cfg.validate());
    CHECK(target(200.0, 0.5, 0, 100, cfg) == 100);
    CHECK(target(100.0, 0.5, 0, 100, cfg) == 50); // down without limit
    CHECK(target(200.0, 0.5, 0, 50, cfg) == 100); // up without limit
}

TEST_CASE("LittleController wraps little_law_target with a copy of the config", "[controller]") {
    ax::Config cfg;
    const ax::LittleController ctl(cfg);
    CHECK(ctl({200.0, 0.5, 0, 100}) == 100);
    CHECK(ctl({200.0, 0.5, 150, 100}) == 110);
    CHECK(ctl({200.0, 0.5, 150, 125}) == 130);
    CHECK(ctl({100.0, 0.5, 0, 100}) == 95);

    cfg.max_step_up = 1; // the controller kept its own copy
    CHECK(ctl({200.0, 0.5, 0, 50}) == 60);

    const ax::LittleController narrow(cfg);
    CHECK(narrow({200.0, 0.5, 0, 50}) == 51);
}

TEST_CASE("little_law_target does not grow while the process is CPU-bound", "[controller]") {
    ax::Config cfg; // cpu_ceiling 0.9
    ax::ControllerInput in;
    in.incoming_rate = 200;
    in.avg_duration_s = 0.5;
    in.current_target = 50;
    in.cpu_utilization = 0.95;
    CHECK(ax::little_law_target(in, cfg) == 50); // would be 60
    in.cpu_utilization = 0.5;
    CHECK(ax::little_law_target(in, cfg) == 60);
    // Shrinking is still allowed when CPU-bound.
    in.incoming_rate = 0;
    in.cpu_utilization = 1.0;
    CHECK(ax::little_law_target(in, cfg) == 45);
}

TEST_CASE("saturation_target steps up only when every worker is busy at the soft limit",
          "[controller]") {
    ax::Config cfg; // min 4, max 200, step +10
    ax::ControllerInput in;
    in.current_target = 20;
    in.live_workers = 20;
    in.busy_workers = 20;
    in.saturated = true;
    CHECK(ax::saturation_target(in, cfg) == 30);
    in.current_target = 195;
    in.live_workers = in.busy_workers = 195;
    CHECK(ax::saturation_target(in, cfg) == 200); // capped at max_workers
    in.current_target = 200;
    in.live_workers = in.busy_workers = 200;
    CHECK(ax::saturation_target(in, cfg) == 200);

    in.current_target = 20;
    in.live_workers = 20;
    in.busy_workers = 19; // someone is idle: workers are not the bottleneck
    CHECK(ax::saturation_target(in, cfg) == 20);
    in.busy_workers = 20;
    in.live_workers = 15; // the pool has not reached its target yet
    in.busy_workers = 15;
    CHECK(ax::saturation_target(in, cfg) == 20);
    in.live_workers = in.busy_workers = 20;
    in.saturated = false;
    CHECK(ax::saturation_target(in, cfg) == 20);
    in.saturated = true;
    in.cpu_utilization = 0.95; // CPU-bound: more threads would not help
    CHECK(ax::saturation_target(in, cfg) == 20);
    in.cpu_utilization = 0.0;
    cfg.scale_out_when_saturated = false;
    CHECK(ax::saturation_target(in, cfg) == 20);
}

// ---- AdaptiveController and its inputs --------------------------------------------------------

#include <ax/adaptive_controller.hpp>
#include <ax/detail/sched_stat.hpp>
#include <ax/policies.hpp>

namespace {

/// A user policy answering a plain target, as before decisions existed.
struct PlainPolicy {
    explicit PlainPolicy(const ax::Config&) {}
    std::uint32_t operator()(const ax::ControllerInput& in) const { return in.current_target + 1; }
};
/// A user policy answering a decision, with a name.
struct DecidingPolicy {
    static constexpr const char* name = "deciding";
    explicit DecidingPolicy(const ax::Config&) {}
    ax::ControllerDecision operator()(const ax::ControllerInput&) {
        return {7, ax::ControllerReason::forecast, 12.5};
    }
};
/// Answers something that is neither a target nor a decision.
struct BadPolicy {
    explicit BadPolicy(const ax::Config&) {}
    const char* operator()(const ax::ControllerInput&) const { return "x"; }
};

ax::ControllerInput input(std::uint32_t queue, std::uint32_t current, std::uint32_t busy,
                          double avg_s) {
    ax::ControllerInput in;
    in.queue_length = queue;
    in.current_target = current;
    in.live_workers = current;
    in.busy_workers = busy;
    in.avg_duration_s = avg_s;
    in.cores = 2;
    in.elapsed_s = 0.01;
    return in;
}

} // namespace

static_assert(ax::ControllerPolicy<ax::AdaptiveController>);
static_assert(ax::ControllerPolicy<PlainPolicy>);
static_assert(ax::ControllerPolicy<DecidingPolicy>);
static_assert(!ax::ControllerPolicy<BadPolicy>);
static_assert(ax::detail::controller_fast_rounds<ax::AdaptiveController>());
static_assert(!ax::detail::controller_fast_rounds<ax::LittleController>());
static_assert(!ax::detail::controller_fast_rounds<PlainPolicy>());

TEST_CASE("a plain target becomes little_law when it changes, hold when not", "[controller]") {
    const auto changed = ax::detail::to_decision(std::uint32_t{5}, 4);
    CHECK(changed.target == 5);
    CHECK(changed.reason == ax::ControllerReason::little_law);
    CHECK(ax::detail::to_decision(std::uint32_t{4}, 4).reason == ax::ControllerReason::hold);
    const ax::ControllerDecision d{9, ax::ControllerReason::idle, 3.0};
    CHECK(ax::detail::to_decision(d, 4).reason == ax::ControllerReason::idle);
    CHECK(std::string(ax::detail::controller_policy_name<PlainPolicy>()) == "custom");
    CHECK(std::string(ax::detail::controller_policy_name<DecidingPolicy>()) == "deciding");
    CHECK(std::string(ax::detail::controller_policy_name<ax::AdaptiveController>()) == "adaptive");
    CHECK(std::string(ax::detail::controller_policy_name<ax::LittleController>()) == "little_law");
}

TEST_CASE("shares_from: CPU and runqueue shares of the busy time", "[controller]") {
    double cpu = -1, rq = -1;
    ax::detail::shares_from({}, cpu, rq);
    CHECK(cpu == 0.0);
    CHECK(rq == 0.0);
    constexpr std::uint64_t ms = 1'000'000;
    ax::detail::shares_from({250 * ms, 250 * ms, 1000 * ms}, cpu, rq);
    CHECK(cpu == Approx(0.25));
    CHECK(rq == Approx(0.25));
    // Busy time below CPU + wait (dispatch and spinning outside bodies): the sum is the wall.
    ax::detail::shares_from({6 * ms, 2 * ms, 4 * ms}, cpu, rq);
    CHECK(cpu == Approx(0.75));
    CHECK(rq == Approx(0.25));
    // Only blocked: measured, so not 0/0.
    ax::detail::shares_from({0, 0, 1000 * ms}, cpu, rq);
    CHECK(cpu > 0.0);
    CHECK(rq == 0.0);
    // Under a millisecond of busy time in all (a few workers just woken): not a sample of the
    // work, whatever its CPU share would read.
    ax::detail::shares_from({600'000, 200'000, 900'000}, cpu, rq);
    CHECK(cpu == 0.0);
    CHECK(rq == 0.0);
    ax::detail::shares_from({600'000, 200'000, 1'000'000}, cpu, rq);
    CHECK(cpu == Approx(0.6));
}

TEST_CASE("accumulate: the first sample primes, later ones add deltas", "[controller]") {
    ax::detail::SchedCursor c;
    ax::detail::SchedDelta sum;
    ax::detail::accumulate(c, 100, 50, 1000, sum);
    CHECK(sum.cpu_ns == 0);
    CHECK(sum.busy_ns == 0);
    ax::detail::accumulate(c, 300, 80, 1500, sum);
    CHECK(sum.cpu_ns == 200);
    CHECK(sum.wait_ns == 30);
    CHECK(sum.busy_ns == 500);
    ax::detail::accumulate(c, 300, 80, 1400, sum); // busy read as it moved: no negative delta
    CHECK(sum.busy_ns == 500);
}

TEST_CASE("this thread's schedstat can be read once its tid is known", "[controller]") {
    const std::int32_t tid = ax::detail::current_thread_tid();
    std::uint64_t cpu = 0, wait = 0;
    if (tid == 0) {
        WARN("no /proc/thread-self here: the controller runs without CPU shares");
        CHECK_FALSE(ax::detail::read_schedstat(tid, cpu, wait));
        return;
    }
    volatile double x = 0;
    for (int i = 0; i < 1000000; ++i)
        x = x + i;
    REQUIRE(ax::detail::read_schedstat(tid, cpu, wait));
    CHECK(cpu > 0);
    CHECK_FALSE(ax::detail::read_schedstat(-1, cpu, wait));
}

TEST_CASE("AdaptiveController grows on a backlog at most x4 per round, whatever the queue size",
          "[controller]") {
    ax::Config cfg; // min 4, max 200
    for (const std::uint32_t queue : {10000u, 1000000u}) {
        ax::AdaptiveController c(cfg);
        auto in = input(queue, 4, 4, 0.005);
        // Nothing measured yet: the first round with busy workers waits for a sample.
        auto d = c(in);
        CHECK(d.target == 4);
        CHECK(d.reason == ax::ControllerReason::hold);
        // IO-bound shares: far from any CPU cap.
        in.cpu_share = 0.004;
        in.runqueue_share = 0.001;
        d = c(in);
        CHECK(d.target == 16);
        CHECK(d.reason == ax::ControllerReason::backlog);
        in = input(queue, 16, 16, 0.005);
        CHECK(c(in).target == 64);
        in = input(queue, 64, 64, 0.005);
        CHECK(c(in).target == 200);
    }
}

TEST_CASE("AdaptiveController grows without shares where they are never measured", "[controller]") {
    ax::Config cfg;
    ax::AdaptiveController c(cfg);
    auto in = input(10000, 4, 4, 0.005);
    CHECK(c(in).target == 4); // one round's wait
    CHECK(c(in).target == 16);
    in = input(10000, 16, 16, 0.005);
    CHECK(c(in).target == 64);
}

TEST_CASE("AdaptiveController caps CPU-bound work near the cores", "[controller]") {
    ax::Config cfg;
    cfg.min_workers = 1;
    ax::AdaptiveController c(cfg);
    auto in = input(100, 2, 2, 0.03);
    in.cpu_share = 0.99;
    in.runqueue_share = 0.01;
    auto d = c(in);
    CHECK(d.target == 2); // cores x (cpu + blocked) / cpu = 2
    CHECK(d.reason == ax::ControllerReason::cpu_bound);
    // Oversubscribed at 40: runqueue wait dominates; the target falls to the cap once two
    // samples agree.
    in = input(100, 40, 40, 0.6);
    in.cpu_share = 0.05;
    in.runqueue_share = 0.95;
    d = c(in);
    CHECK(d.target <= 40);
    in.cpu_share = 0.051;
    d = c(in);
    CHECK(d.reason == ax::ControllerReason::runqueue);
    CHECK(d.target <= 3);
    // IO-bound work: the cap is far away.
    ax::AdaptiveController io(cfg);
    in = input(1000, 4, 4, 0.005);
    in.cpu_share = 0.004;
    in.runqueue_share = 0.0;
    CHECK(io(in).target == 16);
}

TEST_CASE("AdaptiveController widens the CPU cap while cores idle beside queued work",
          "[controller]") {
    // Mixed work at its cap (cores x (cpu + blocked) / cpu x (1 + blocked) = 29 for 3 ms CPU in
    // 23 ms): with the cores a quarter idle the cap widens, step by step, and stays widened
    // when the idle time is gone (narrowing would bring it back).
    ax::Config cfg;
    auto mixed = [](std::uint32_t cur, double idle) {
        auto in = input(120, cur, cur, 0.023);
        in.cpu_share = 3.0 / 23.0;
        in.runqueue_share = 0.0;
        in.idle_cores = idle;
        in.cpu_utilization = std::min(1.0, cur / 150.0); // each widening pays
        return in;
    };
    ax::AdaptiveController c(cfg);
    auto in = mixed(29, 0.5);
    auto d = c(in);
    CHECK(d.target > 29);
    CHECK(d.target <= 44); // at most widen_step x per sample
    std::uint32_t cur = d.target;
    for (int i = 0; i < 16; ++i) {
        in = mixed(cur, 0.5);
        in.cpu_share += 1e-4 * (i + 1); // a fresh sample each round
        cur = c(in).target;
    }
    CHECK(cur >= 100);
    const std::uint32_t widened = cur;
    for (int i = 0; i < 6; ++i) {
        in = mixed(cur, 0.0);
        in.cpu_share += 1e-4 * (i + 20);
        cur = c(in).target;
    }
    CHECK(cur == widened);

    // The same shares without idle cores (a crowded machine), or with the idle time unknown
    // (not Linux): the cap holds.
    for (const double idle : {0.0, 0.05, -1.0}) {
        ax::AdaptiveController held(cfg);
        std::uint32_t t = 29;
        for (int i = 0; i < 6; ++i) {
            in = mixed(t, idle);
            in.cpu_share += 1e-4 * i;
            t = held(in).target;
        }
        CHECK(t == 29);
    }
    // Spare time the workers cannot take (the process's CPU use does not rise): two widenings,
    // each judged after the pool reached it, and no more.
    {
        ax::AdaptiveController flat(cfg);
        std::uint32_t t = 29;
        for (int i = 0; i < 16; ++i) {
            in = mixed(t, 0.5);
            in.cpu_share += 1e-4 * i;
            in.cpu_utilization = 0.5;
            t = flat(in).target;
        }
        CHECK(t > 29);
        CHECK(t <= 66); // 29 x 1.5 x 1.5
    }
    // Idle cores and no queued work: nothing to widen for.
    ax::AdaptiveController quiet(cfg);
    in = mixed(29, 1.0);
    in.queue_length = 0;
    CHECK(quiet(in).target <= 29);
}

TEST_CASE("AdaptiveController drops the widening when the work turns CPU-bound", "[controller]") {
    ax::Config cfg;
    cfg.min_workers = 1;
    ax::AdaptiveController c(cfg);
    std::uint32_t cur = 29;
    for (int i = 0; i < 16; ++i) {
        auto in = input(120, cur, cur, 0.023);
        in.cpu_share = 3.0 / 23.0 + 1e-4 * i;
        in.idle_cores = 0.5;
        in.cpu_utilization = std::min(1.0, cur / 150.0);
        cur = c(in).target;
    }
    REQUIRE(cur > 60);
    // CPU-bound from here: once the smoothed shares put the cap at the cores for three
    // samples in a row the floor lapses, and two more samples confirm the shrink.
    for (int i = 0; i < 10; ++i) {
        auto in = input(120, cur, cur, 0.03);
        in.cpu_share = 0.2 + 0.001 * i; // oversubscribed: short CPU shares, long waits
        in.runqueue_share = 0.79 - 0.001 * i;
        in.idle_cores = 0.0;
        cur = c(in).target;
    }
    CHECK(cur <= 3);
}

TEST_CASE("AdaptiveController shrinks idle pools in damped steps, holding within the margin",
          "[controller]") {
    ax::Config cfg;
    ax::AdaptiveController c(cfg);
    auto in = input(0, 200, 0, 0.005);
    auto d = c(in);
    CHECK(d.reason == ax::ControllerReason::idle);
    CHECK(d.target == 100);        // half the surplus
    in = input(0, 100, 90, 0.005); // 90 busy: within shrink_hysteresis of 100
    d = c(in);
    CHECK(d.target == 100);
    CHECK(d.reason == ax::ControllerReason::hold);
}

TEST_CASE("BurstForecaster predicts evenly spaced bursts and nothing else", "[controller]") {
    auto feed = [](ax::BurstForecaster& f, const std::vector<double>& starts, double until) {
        double t = 0.0;
        std::size_t next = 0;
        bool busy = false;
        while (t < until) {
            std::uint64_t arrivals = 0;
            if (next < starts.size() && t >= starts[next]) {
                arrivals = 2000;
                ++next;
                busy = true;
            } else {
                busy = false;
            }
            f.observe(t, 0.1, arrivals, busy ? 500 : 0, busy ? 200 : 4);
            t += 0.1;
        }
    };
    ax::BurstForecaster periodic;
    feed(periodic, {1.0, 4.0, 7.0, 10.0}, 11.0);
    double next = 0.0;
    REQUIRE(periodic.predict(next));
    CHECK(next == Approx(13.0).margin(0.11));
    CHECK(periodic.learned_peak() == 200);
    // Within the lead: an eighth of the peak pre-started (the burst's first round asks for it
    // all).
    CHECK(periodic.hint(next - 0.1, 0.1).floor ==
          (200 + ax::BurstForecaster::prescale_divisor - 1) /
              ax::BurstForecaster::prescale_divisor);
    CHECK(periodic.hint(next - 0.1, 0.1).floor == 25);
    CHECK(periodic.hint(next - 1.0, 0.1).floor == 0); // well before it: no floor
    CHECK(periodic.hint(next + 1.0, 0.1).floor == 0); // a burst that did not come: lapsed
    // The burst comes as predicted: while its work is queued it gets the whole learned peak.
    periodic.observe(next, 0.1, 2000, 500, 100);
    CHECK(periodic.in_burst());
    CHECK(periodic.hint(next, 0.1).floor == 200);
    periodic.observe(next + 0.1, 0.1, 0, 0, 4); // drained: the burst ends, no floor
    CHECK_FALSE(periodic.in_burst());
    CHECK(periodic.hint(next + 0.1, 0.1).floor == 0);

    ax::BurstForecaster irregular;
    feed(irregular, {1.0, 2.0, 6.0, 7.5}, 9.0);
    CHECK_FALSE(irregular.predict(next));
    CHECK(irregular.hint(8.5, 0.1).floor == 0);

    ax::BurstForecaster steady; // a steady stream is one burst, never a pattern
    for (int i = 0; i < 200; ++i)
        steady.observe(i * 0.1, 0.1, 100, 0, 10);
    CHECK_FALSE(steady.predict(next));
}

TEST_CASE("BurstForecaster: a burst the queue refused is met with the last burst's need, not "
          "with what it let in",
          "[controller]") {
    for (const bool refused : {false, true}) {
        ax::BurstForecaster f;
        for (int i = 0; i < 10; ++i)
            f.observe(i * 0.1, 0.1, 0, 0, 4);
        f.observe(1.0, 0.1, 400, 120, 200, true); // the first burst: the controller ramps
        f.observe(1.1, 0.1, 0, 0, 4);             // drained
        REQUIRE(f.learned_peak() == 200);
        for (int i = 12; i < 30; ++i)
            f.observe(i * 0.1, 0.1, 0, 0, 4);
        // The second burst's first round saw 125 arrivals (queue 150, soft limit 120).
        f.observe(3.0, 0.1, 125, 120, 125, refused);
        REQUIRE(f.in_burst());
        INFO("refused: " << refused);
        // Refused: its arrivals are what the queue let in, so it gets the last burst's need;
        // not refused: a smaller burst asks only for its own tasks.
        CHECK(f.hint(3.0, 0.1).floor == (refused ? 200u : 125u));
    }
}

TEST_CASE("AdaptiveController grows no further while runqueue wait dominates", "[controller]") {
    ax::Config cfg;
    ax::AdaptiveController c(cfg);
    // A big backlog, and a tiny CPU share per worker because other processes hold the cores:
    // the cap alone would allow growth, the runqueue share forbids it.
    auto in = input(10000, 8, 8, 0.1);
    in.cpu_share = 0.01;
    in.runqueue_share = 0.84;
    const auto d = c(in);
    CHECK(d.target == 8);
    CHECK(d.reason == ax::ControllerReason::runqueue);
    // Once the runqueue share has stayed low for the last four samples (the kernel credits
    // waits late, so one low sample proves little), the backlog grows the pool again.
    std::uint32_t t = 0;
    for (int i = 0; i < 3; ++i) {
        in.cpu_share = 0.02 + 0.001 * i; // distinct values: each a fresh sample
        in.runqueue_share = 0.1;
        t = c(in).target;
        CHECK(t == 8);
    }
    in.cpu_share = 0.025;
    CHECK(c(in).target > 8);
}
