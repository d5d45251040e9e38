// The controller in a deterministic simulator (tests/controller_sim.hpp): virtual time, N cores,
// tasks with CPU and blocked parts. Every assertion is on simulated outcomes (makespan against
// the ideal, worker counts, direction changes), never on wall-clock time. AX_SIM_VERBOSE=1
// prints each run's figures.
#include "controller_sim.hpp"
#include "workload_family.hpp"

#include <algorithm>
#include <ax/adaptive_controller.hpp>
#include <ax/controller.hpp>
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

using ax_sim::Arrival;
using ax_sim::Result;
using ax_sim::Setup;
using ax_sim::Task;

namespace {

void report(const char* name, const Result& r) {
    if (std::getenv("AX_SIM_VERBOSE") == nullptr)
        return;
    std::printf("%-34s makespan %7.3f s  thread-s %8.1f  peak %3u  peak busy %3u  rounds %4llu  "
                "changes %3llu  reversals %2llu  rejected %llu%s\n",
                name, r.makespan_s, r.thread_seconds, r.peak_workers, r.peak_busy,
                static_cast<unsigned long long>(r.rounds),
                static_cast<unsigned long long>(r.changes),
                static_cast<unsigned long long>(r.direction_changes),
                static_cast<unsigned long long>(r.rejected), r.finished ? "" : "  UNFINISHED");
}

Setup machine(std::uint32_t cores, std::uint32_t queue_capacity = 150) {
    Setup s;
    s.cores = cores;
    s.cfg.queue_capacity = queue_capacity;
    return s;
}

Result adaptive(const Setup& s, const std::vector<Arrival>& a, bool forecast = true,
                const char* name = "adaptive") {
    ax::AdaptiveController c(s.cfg, forecast);
    Result r = ax_sim::run(s, a, c);
    report(name, r);
    return r;
}

template <class P> Result with(const Setup& s, const std::vector<Arrival>& a, const char* name) {
    P c(s.cfg);
    Result r = ax_sim::run(s, a, c);
    report(name, r);
    return r;
}

Result fixed(const Setup& s, const std::vector<Arrival>& a, std::uint32_t n) {
    Setup f = s;
    f.cfg.min_workers = f.cfg.max_workers = n; // all started at once, as a fixed pool
    ax_sim::FixedPolicy p(f.cfg);
    p.n = n;
    Result r = ax_sim::run(f, a, p);
    report(("fixed-" + std::to_string(n)).c_str(), r);
    return r;
}

/// Smallest makespan of the fixed pools 1, 2, 4, 32, 128 and max_workers.
double best_fixed(const Setup& s, const std::vector<Arrival>& a) {
    double best = 1e300;
    for (const std::uint32_t n : {1u, 2u, 4u, 32u, 128u, s.cfg.max_workers}) {
        const Result r = fixed(s, a, n);
        REQUIRE(r.finished);
        best = std::min(best, r.makespan_s);
    }
    return best;
}

const Task io_5ms{20e-6, 5e-3};
const Task cpu_30ms{30e-3, 0.0};

} // namespace

TEST_CASE("sim: an IO-bound burst of 20k x 5 ms reaches ~max_workers within a fraction of a second",
          "[controller][sim]") {
    Setup s = machine(2, 32768);
    std::vector<Arrival> a;
    ax_sim::burst(a, 0.0, 20000, io_5ms);
    const Result r = adaptive(s, a);
    REQUIRE(r.finished);
    // Ideal: 20000 x 5 ms over 200 workers = 0.5 s.
    CHECK(r.makespan_s <= 0.5 * 1.25);
    CHECK(r.peak_workers >= 190);
    // Within 0.2 s the target is at max_workers.
    CHECK(r.target_trace.at(static_cast<std::size_t>(0.2 / r.tick_s)) == 200);
    CHECK(r.direction_changes <= 2);
    // Against the seed's rule (+10 per 2 s round: several seconds).
    const Result little = with<ax::LittleController>(s, a, "little_law");
    REQUIRE(little.finished);
    CHECK(r.makespan_s * 3 < little.makespan_s);
    CHECK(r.makespan_s <= 1.05 * best_fixed(s, a));
}

TEST_CASE("sim: a huge queue capacity converges as fast as a small one", "[controller][sim]") {
    std::vector<Arrival> a;
    ax_sim::burst(a, 0.0, 20000, io_5ms);
    const Result small = adaptive(machine(2, 150), a, true, "adaptive q150");
    const Result huge = adaptive(machine(2, 1u << 24), a, true, "adaptive q16M");
    REQUIRE(small.finished);
    REQUIRE(huge.finished);
    CHECK(huge.makespan_s <= 1.1 * small.makespan_s);
    CHECK(small.makespan_s <= 1.1 * huge.makespan_s);
    CHECK(huge.peak_workers >= 190);
}

TEST_CASE("sim: a CPU-bound burst runs at most cores + 1 busy workers at steady state",
          "[controller][sim]") {
    for (const std::uint32_t cores : {2u, 4u}) {
        Setup s = machine(cores); // min_workers 4: on 2 cores the cap parks two of them
        std::vector<Arrival> a;
        ax_sim::burst(a, 0.0, 400, cpu_30ms);
        const Result r = adaptive(s, a);
        REQUIRE(r.finished);
        const double ideal = 400 * 0.030 / cores;
        CHECK(r.makespan_s <= 1.05 * ideal + 0.1);
        // Steady state: the middle of the run.
        CHECK(ax_sim::mean_busy(r, 0.25 * r.makespan_s, 0.75 * r.makespan_s) <= cores + 1);
        CHECK(r.target_trace.at(r.target_trace.size() / 2) <= cores + 1);
        CHECK(r.direction_changes <= 3);
        CHECK(r.makespan_s <= 1.05 * best_fixed(s, a));
    }
}

TEST_CASE("sim: mixed work (half CPU, half blocked) settles near a few workers per core",
          "[controller][sim]") {
    Setup s = machine(2, 4096);
    s.cfg.min_workers = 1;
    std::vector<Arrival> a;
    ax_sim::burst(a, 0.0, 2000, Task{10e-3, 10e-3});
    const Result r = adaptive(s, a);
    REQUIRE(r.finished);
    // The cores' throughput bounds it at 10 s; colliding CPU phases and the oversubscription
    // penalty make every pool slower.
    const double ideal = 2000 * 0.010 / 2;
    CHECK(r.makespan_s <= 1.5 * ideal);
    const double mid = ax_sim::mean_busy(r, 0.25 * r.makespan_s, 0.75 * r.makespan_s);
    CHECK(mid >= 3.0);
    // The cap (6 here) widens while the lockstep tasks leave cores idle (14 measured).
    CHECK(mid <= 16.0);
    CHECK(r.direction_changes <= 4);
    CHECK(r.makespan_s <= 1.05 * best_fixed(s, a));
}

TEST_CASE("sim: a stream that turns from IO-bound to CPU-bound halfway", "[controller][sim]") {
    Setup s = machine(2, 4096);
    s.cfg.min_workers = 1;
    std::vector<Arrival> a;
    // 5 s of IO tasks at 4000/s (20 workers of need), then 5 s of CPU tasks at 60/s (just under
    // the 2 cores' 66/s).
    ax_sim::stream(a, 0.0, 20000, 4000.0, Task{20e-6, 5e-3});
    ax_sim::stream(a, 5.0, 300, 60.0, Task{30e-3, 0.0});
    const Result r = adaptive(s, a);
    REQUIRE(r.finished);
    const double io_busy = ax_sim::mean_busy(r, 1.0, 5.0);
    CHECK(io_busy >= 15.0);
    CHECK(*std::max_element(r.target_trace.begin(), r.target_trace.begin() + 500) >= 20);
    // Two seconds into the CPU half the target is near the cores.
    const auto at7 = static_cast<std::size_t>(7.0 / r.tick_s);
    const auto late = std::max_element(r.target_trace.begin() + static_cast<std::ptrdiff_t>(at7),
                                       r.target_trace.end());
    CHECK(*late <= 3);
    CHECK(ax_sim::mean_busy(r, 7.0, 10.0) <= 3.0);
    CHECK(r.makespan_s <= 10.5);
    CHECK(r.direction_changes <= 6);
}

TEST_CASE("sim: the forecaster pre-scales ahead of periodic bursts", "[controller][sim]") {
    Setup s = machine(2, 32768);
    std::vector<Arrival> a;
    const std::size_t per_burst = 2000;
    const int bursts = 8;
    // Bursts every 3 s landing between two ticks; 2000 x 5 ms needs 200 workers for 50 ms.
    for (int b = 0; b < bursts; ++b)
        ax_sim::burst(a, 0.0055 + 3.0 * b, per_burst, io_5ms);
    const Result on = adaptive(s, a, true, "adaptive (forecast)");
    const Result off = adaptive(s, a, false, "adaptive (no forecast)");
    REQUIRE(on.finished);
    REQUIRE(off.finished);
    bool forecast_seen = false;
    for (const auto reason : on.reason_trace)
        forecast_seen = forecast_seen || reason == ax::ControllerReason::forecast;
    CHECK(forecast_seen);
    // Every burst after the first: met at the last one's size (bursts 2 - 4) or pre-scaled
    // once four evenly spaced starts gave the period (the 5th on): the first 200 tasks wait
    // less.
    for (int b = 1; b < bursts; ++b) {
        const std::size_t first = static_cast<std::size_t>(b) * per_burst;
        const double p99_on = ax_sim::wait_quantile(on, first, 200, 0.99);
        const double p99_off = ax_sim::wait_quantile(off, first, 200, 0.99);
        INFO("burst " << b << " p99 wait of its first 200: forecast " << p99_on << " s, without "
                      << p99_off << " s");
        if (std::getenv("AX_SIM_VERBOSE") != nullptr)
            std::printf("burst %d first-200 p99 wait: forecast %.5f s, without %.5f s\n", b, p99_on,
                        p99_off);
        CHECK(p99_on * 2 <= p99_off);
    }
    CHECK(on.thread_seconds <= 1.25 * off.thread_seconds);
    CHECK(on.direction_changes <= off.direction_changes + 2 * bursts);
}

TEST_CASE("sim: bursts at irregular intervals get no pre-scale and lose nothing",
          "[controller][sim]") {
    Setup s = machine(2, 32768);
    std::vector<Arrival> a;
    std::vector<double> starts;
    double t = 0.0055;
    std::mt19937 rng(7);
    std::uniform_real_distribution<double> gap(1.0, 5.0);
    for (int b = 0; b < 6; ++b) {
        ax_sim::burst(a, t, 2000, io_5ms);
        starts.push_back(t);
        t += gap(rng);
    }
    const Result on = adaptive(s, a, true, "adaptive irregular (forecast)");
    const Result off = adaptive(s, a, false, "adaptive irregular (no forecast)");
    REQUIRE(on.finished);
    REQUIRE(off.finished);
    // No forecast between bursts (a burst of 2000 x 5 ms on 200 workers is over within 0.5 s):
    // nothing predicted the next one.
    for (std::size_t b = 0; b + 1 < starts.size(); ++b) {
        const auto from = static_cast<std::size_t>((starts[b] + 0.5) / on.tick_s);
        const auto to = static_cast<std::size_t>((starts[b + 1] - 0.02) / on.tick_s);
        for (std::size_t i = from; i < to && i < on.reason_trace.size(); ++i)
            CHECK(on.reason_trace[i] != ax::ControllerReason::forecast);
    }
    // Each burst after the first is met at the last one's size: no slower, no costlier.
    CHECK(on.makespan_s <= 1.01 * off.makespan_s);
    CHECK(on.thread_seconds <= 1.05 * off.thread_seconds);
    for (std::size_t b = 1; b < starts.size(); ++b)
        CHECK(ax_sim::wait_quantile(on, b * 2000, 200, 0.99) <=
              ax_sim::wait_quantile(off, b * 2000, 200, 0.99));
}

TEST_CASE("sim: thousands of tasks on one core", "[controller][sim]") {
    SECTION("CPU-bound") {
        Setup s = machine(1, 8192);
        s.cfg.min_workers = 1;
        std::vector<Arrival> a;
        ax_sim::burst(a, 0.0, 5000, Task{1e-3, 0.0});
        const Result r = adaptive(s, a);
        REQUIRE(r.finished);
        CHECK(r.makespan_s <= 5.0 * 1.05 + 0.1);
        CHECK(ax_sim::mean_busy(r, 1.0, 4.0) <= 2.0);
        CHECK(r.direction_changes <= 3);
    }
    SECTION("IO-bound") {
        Setup s = machine(1, 8192);
        std::vector<Arrival> a;
        ax_sim::burst(a, 0.0, 5000, Task{50e-6, 20e-3});
        const Result r = adaptive(s, a);
        REQUIRE(r.finished);
        // 5000 x 20 ms over 200 workers = 0.5 s; the one core's CPU need is 0.25 s, and
        // workers leaving their blocked phase together queue for it.
        CHECK(r.makespan_s <= 1.05 * best_fixed(s, a));
        CHECK(r.peak_workers >= 150);
    }
}

TEST_CASE("sim: an idle pool shrinks back to min_workers after a burst", "[controller][sim]") {
    Setup s = machine(2, 32768);
    std::vector<Arrival> a;
    ax_sim::burst(a, 0.0, 20000, io_5ms);
    a.push_back({5.0, io_5ms}); // keeps the run going 5 s
    const Result r = adaptive(s, a);
    REQUIRE(r.finished);
    const auto at2 = static_cast<std::size_t>(2.0 / r.tick_s);
    CHECK(r.target_trace.at(at2) == s.cfg.min_workers);
    CHECK(r.direction_changes <= 2);
}

namespace {

/// `n` tasks at t = 0 whose CPU and blocked parts vary by +-20 % (seeded): identical tasks under
/// processor sharing would move in lockstep, which no real pool does.
std::vector<Arrival> jittered(std::size_t n, Task t, unsigned seed = 1) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> f(0.8, 1.2);
    std::vector<Arrival> a;
    for (std::size_t i = 0; i < n; ++i)
        a.push_back({0.0, Task{t.cpu_s * f(rng), t.blocked_s * f(rng)}});
    return a;
}

} // namespace

TEST_CASE("sim: the bench's mixed workload at the default queue capacity settles without "
          "oscillating",
          "[controller][sim]") {
    // ax_thumbnails --workload mixed: 2000 x (3 ms CPU + 20 ms sleep), default Config (queue
    // 150, the producer pushed back). The useful concurrency is about
    // cores x (23 / 3) x (1 + 20 / 23) = 29.
    const Setup s = machine(2);
    const std::vector<Arrival> a = jittered(2000, Task{3e-3, 20e-3});
    const Result r = adaptive(s, a);
    REQUIRE(r.finished);
    // Before the CPU cap was normalised by the runqueue share, the cap fell as the pool grew
    // (a crowded pool measures less blocked time) and rose as it shrank: 13 reversals here.
    CHECK(r.direction_changes <= 3);
    CHECK(r.makespan_s <= 1.05 * best_fixed(s, a));
    const std::uint32_t settled = r.target_trace.at(r.target_trace.size() / 2);
    CHECK(settled >= 16);
    CHECK(settled <= 40);
}

TEST_CASE("sim: mixed work whose workers wake late widens its CPU cap and keeps up with the "
          "best fixed pool",
          "[controller][sim]") {
    // The bench's mixed workload as the development VM ran it: each task waited ~27 ms for a
    // core after its sleep while the cores idled (ControllerInput::idle_cores). The CPU cap
    // alone (29) leaves them idle: fixed pools of 64 finish first.
    Setup s = machine(2);
    s.wake_latency_s = 27e-3;
    const std::vector<Arrival> a = jittered(2000, Task{3e-3, 20e-3});
    const Result r = adaptive(s, a);
    REQUIRE(r.finished);
    CHECK(r.makespan_s <= 1.05 * best_fixed(s, a));
    const std::uint32_t settled = r.target_trace.at(r.target_trace.size() / 2);
    CHECK(settled >= 40);
    CHECK(r.direction_changes <= 4);
    // No wake latency, no idle cores: the cap is not widened and the pool stays near it.
    const Result plain = adaptive(machine(2), a);
    REQUIRE(plain.finished);
    CHECK(plain.target_trace.at(plain.target_trace.size() / 2) <= 40);
}

TEST_CASE("sim: the bench's cpu workload at the default config runs cores busy workers",
          "[controller][sim]") {
    // ax_thumbnails --workload cpu: 2000 x 3 ms of CPU, default Config (min_workers 4).
    const Setup s = machine(2);
    const std::vector<Arrival> a = jittered(2000, Task{3e-3, 0.0});
    const Result r = adaptive(s, a);
    REQUIRE(r.finished);
    CHECK(ax_sim::mean_busy(r, 0.25 * r.makespan_s, 0.75 * r.makespan_s) <= 2.0 + 1e-9);
    // The cap is in force within 0.3 s.
    CHECK(*std::max_element(r.target_trace.begin() + static_cast<std::ptrdiff_t>(0.3 / r.tick_s),
                            r.target_trace.end() - static_cast<std::ptrdiff_t>(0.2 / r.tick_s)) <=
          2);
    CHECK(r.makespan_s <= 1.02 * best_fixed(s, a));
}

TEST_CASE("sim: idle workers between bursts do not read as a crowded runqueue",
          "[controller][sim]") {
    // Idle workers' kernel counters move (Setup::idle_wait_s); counted raw they made a sample
    // of an idle pool show a runqueue share near 1, and the next burst waited for a fresh
    // sample (up to a round) before the pool could grow.
    Setup s = machine(2);
    std::vector<Arrival> a;
    for (int b = 0; b < 5; ++b)
        ax_sim::burst(a, 1.5 * b, 400, Task{20e-6, 20e-3});
    const Result r = adaptive(s, a, false, "adaptive bursts after idle gaps");
    REQUIRE(r.finished);
    for (int b = 1; b < 5; ++b) {
        const auto at = static_cast<std::size_t>((1.5 * b + 0.02) / r.tick_s);
        INFO("burst " << b);
        CHECK(r.target_trace.at(at) >= 4 * s.cfg.min_workers);
        CHECK(r.reason_trace.at(at) != ax::ControllerReason::runqueue);
    }
}

TEST_CASE("accumulate: an idle worker's kernel time does not count", "[controller][sim]") {
    ax::detail::SchedCursor c;
    ax::detail::SchedDelta sum;
    ax::detail::accumulate(c, 1000, 1000, 0, sum);
    ax::detail::accumulate(c, 1100, 9000, 0, sum); // woke and waited, ran no task
    CHECK(sum.cpu_ns == 0);
    CHECK(sum.wait_ns == 0);
    // Busy 500 ns with 400 + 400 ns of kernel time: scaled to the busy time, ratio kept.
    ax::detail::accumulate(c, 1500, 9400, 500, sum);
    CHECK(sum.cpu_ns == 250);
    CHECK(sum.wait_ns == 250);
    CHECK(sum.busy_ns == 500);
}

TEST_CASE("sim: the bench's bursty-forecast workload: the forecaster halves the first tasks' "
          "wait at little cost",
          "[controller][sim]") {
    // ax_thumbnails --workload bursty-forecast: 8 bursts of 400 x 20 ms every 1.5 s, default
    // Config (queue 150: refusals hide each burst's size).
    const Setup s = machine(2);
    std::vector<Arrival> a;
    const std::size_t per_burst = 400;
    for (int b = 0; b < 8; ++b)
        ax_sim::burst(a, 1.5 * b, per_burst, Task{20e-6, 20e-3});
    const Result on = adaptive(s, a, true, "adaptive bursty-forecast");
    const Result off = adaptive(s, a, false, "adaptive bursty-forecast (no forecast)");
    REQUIRE(on.finished);
    REQUIRE(off.finished);
    // Every burst once the period is known (four starts: the 5th on), not every other one (a
    // pre-scaled pool met its burst unqueued, the round that noticed it came late, and the
    // shifted start put the next prediction past the round that should pre-scale).
    for (int b = 4; b < 8; ++b) {
        const std::size_t first = static_cast<std::size_t>(b) * per_burst;
        const double p_on = ax_sim::wait_quantile(on, first, 200, 0.99);
        const double p_off = ax_sim::wait_quantile(off, first, 200, 0.99);
        INFO("burst " << b << ": first-200 p99 wait " << p_on << " s with, " << p_off
                      << " s without the forecaster");
        CHECK(p_on <= 0.5 * p_off);
    }
    CHECK(on.thread_seconds <= 1.10 * off.thread_seconds);
    CHECK(on.makespan_s <= 1.01 * off.makespan_s);
}

TEST_CASE("sim: CPU-bound work on a machine crowded by other processes does not grow to "
          "max_workers",
          "[controller][sim]") {
    // 16 CPU-bound threads of other processes on 2 cores; the kernel credits a worker's
    // runqueue wait only when it next runs (Setup::timeslice_s), so a sample shows much of
    // the wait as blocked time and, averaged, the CPU cap in the hundreds: before growth
    // trusted the most pessimistic recent sample, the pool grew to 200 workers here (and on
    // the development machine at a load average of 80).
    Setup s = machine(2);
    s.foreign_threads = 16;
    std::vector<Arrival> a;
    ax_sim::burst(a, 0.0, 2000, Task{3e-3, 0.0});
    const Result r = adaptive(s, a, true, "adaptive cpu, loaded machine");
    REQUIRE(r.finished);
    CHECK(r.peak_workers <= 64);
    CHECK(r.thread_seconds <= 0.25 * static_cast<double>(s.cfg.max_workers) * r.makespan_s);
}

TEST_CASE("sim: at the end of a run of work the surplus leaves within ticks, not a round",
          "[controller][sim]") {
    // The seed's workload, scaled: 4 000 x ~80 ms of sleep at the default queue capacity. The
    // last tasks end over ~80 ms, less than a 100 ms round: without a round on the tick where
    // half the pool idles with nothing queued, the whole pool idles through the tail.
    Setup s = machine(2);
    const std::vector<Arrival> a = jittered(4000, Task{0.0, 0.08});
    const Result r = adaptive(s, a);
    report("tail of 4000 x 80 ms", r);
    REQUIRE(r.finished);
    REQUIRE(r.peak_busy >= 150);
    // The first tick of the tail: at most half the peak busy, after the pool was full.
    std::size_t tail = 0;
    bool full = false;
    for (std::size_t i = 0; i < r.busy_trace.size() && tail == 0; ++i) {
        full = full || r.busy_trace[i] >= 0.9 * r.peak_busy;
        if (full && r.busy_trace[i] <= 0.5 * r.peak_busy)
            tail = i;
    }
    REQUIRE(tail > 0);
    REQUIRE(tail + 3 < r.target_trace.size());
    INFO("tail starts at tick " << tail << ", target " << r.target_trace[tail]);
    // Falling on every tick of the tail (a regular round alone would lower it once per 100 ms).
    for (std::size_t k = tail + 1; k <= tail + 3; ++k)
        CHECK(r.target_trace[k] < r.target_trace[k - 1]);
    CHECK(r.direction_changes <= 2);
}

// ---- issue 33: the controller generalizes (memory contention, idle cores, generated family) --

namespace {

/// One round's input for the policy tests below (2 cores, a 10 ms round).
ax::ControllerInput round_input(std::uint32_t queue, std::uint32_t current, std::uint32_t busy,
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

TEST_CASE("sim: memory-bound work takes more CPU per task the more tasks compute at once",
          "[controller][sim]") {
    // 200 x 10 ms of CPU: alone, each takes its 10 ms; with memory_contention 0.05, k tasks
    // computing at once take 1 + 0.05 x (k - 1) times as long, up to memory_saturation (16).
    // Compute-bound tasks (mem 0) do not slow down.
    Setup s = machine(2, 4096);
    s.memory_contention = 0.05;
    s.oversubscription_penalty = 0.0;
    for (const double mem : {0.0, 1.0}) {
        std::vector<Arrival> a;
        ax_sim::burst(a, 0.0, 200, Task{10e-3, 0.0, mem});
        const Result one = fixed(s, a, 1);
        const Result two = fixed(s, a, 2);
        const Result crowd = fixed(s, a, 64);
        INFO("mem " << mem << ": CPU s " << one.cpu_seconds << " / " << two.cpu_seconds << " / "
                    << crowd.cpu_seconds);
        CHECK(one.cpu_seconds == Approx(2.0).epsilon(0.01));
        if (mem == 0.0) {
            CHECK(two.cpu_seconds == Approx(2.0).epsilon(0.01));
            CHECK(crowd.cpu_seconds == Approx(2.0).epsilon(0.01));
        } else {
            CHECK(two.cpu_seconds == Approx(2.0 * 1.05).epsilon(0.01));
            CHECK(crowd.cpu_seconds == Approx(2.0 * 1.75).epsilon(0.02)); // 1 + 0.05 x 15
            // The crowd finishes later, not sooner: the cores are as busy, each task longer.
            CHECK(crowd.makespan_s > 1.5 * two.makespan_s);
        }
    }
    // Sleep first, then compute: the CPU part starts only after the sleep.
    std::vector<Arrival> a;
    ax_sim::burst(a, 0.0, 4, Task{10e-3, 20e-3, 0.0, true});
    const Result r = fixed(s, a, 4);
    CHECK(r.makespan_s == Approx(0.040).margin(0.002)); // 20 ms asleep, then 2 x 10 ms per core
}

TEST_CASE("sim: dispatch within a step keeps two workers' cores busy on tasks shorter than "
          "a step",
          "[controller][sim]") {
    // 4000 x 0.13 ms of pure CPU (shorter than the 0.25 ms step) on 2 cores: 0.26 s of work.
    // Dispatched only at step boundaries, two workers idle the rest of each step and a pool of
    // 8 wins by a quarter (a bias toward large pools no machine has); dispatched within the
    // step, two workers keep both cores busy and no larger pool beats them.
    Setup s = machine(2, 4096);
    std::vector<Arrival> a;
    ax_sim::burst(a, 0.0, 4000, Task{0.13e-3, 0.0});
    const Result coarse2 = fixed(s, a, 2);
    const Result coarse8 = fixed(s, a, 8);
    CHECK(coarse2.makespan_s > 1.2 * coarse8.makespan_s); // the bias the option removes
    s.dispatch_within_step = true;
    const Result fine2 = fixed(s, a, 2);
    const Result fine8 = fixed(s, a, 8);
    CHECK(fine2.makespan_s == Approx(0.26).epsilon(0.02));
    CHECK(fine2.makespan_s <= 1.01 * fine8.makespan_s);
    // Every task still runs once, and each wait is measured from its own start.
    CHECK(fine2.cpu_seconds == Approx(0.52).epsilon(0.01));
    CHECK(std::all_of(fine2.wait_s.begin(), fine2.wait_s.end(), [](double w) { return w >= 0.0; }));
}

TEST_CASE("AdaptiveController: runqueue wait beside idle cores is latency, not contention",
          "[controller]") {
    // 40 workers, each waiting for a CPU 90 % of its busy time. With the cores busy that is
    // oversubscription (shrink to the cap once two samples agree); with the cores idle 90 % of
    // the sample it is a woken thread's latency (a vCPU's wake-up, one core's queue while the
    // other idles) and more workers, not fewer, use the idle time (issue 33).
    ax::Config cfg;
    auto sample = [](double idle, int i) {
        auto in = round_input(100, 40, 38, 0.006); // two between tasks at the tick
        in.cpu_share = 0.02 + 1e-4 * i;            // a fresh sample each round
        in.runqueue_share = 0.9;
        in.idle_cores = idle;
        return in;
    };
    ax::AdaptiveController busy(cfg);
    ax::ControllerDecision d;
    for (int i = 0; i < 3; ++i)
        d = busy(sample(0.0, i));
    CHECK(d.reason == ax::ControllerReason::runqueue);
    CHECK(d.target < 40);
    ax::AdaptiveController idle(cfg);
    for (int i = 0; i < 3; ++i) {
        d = idle(sample(1.8, i));
        // Little's Law on the whole busy time, not on d x (1 - runqueue share): 38 busy
        // workers are 38 in use (before, 3.8, and the pool shrank for "idle").
        CHECK(d.reason != ax::ControllerReason::runqueue);
        CHECK(d.reason != ax::ControllerReason::idle);
        CHECK(d.target >= 40);
    }
}

TEST_CASE("ControllerStore: the first samples come at doubling windows, until one covers half "
          "an interval or the pool grows",
          "[controller]") {
    // A fast-round policy (rounds every 100 ms, and every 10 ms tick while queued work waits
    // for a pool at its target). The first measured sample covers the first milliseconds of the
    // work; read alone until the next regular sample (100 ms later) it held pools at a quarter
    // of their size on the machine (issue 33, gen-31). The samples after it come at 20, 40 and
    // 80 ms windows instead, each weighed by the time it covers (sample_window_s).
    auto times_sampled = [](bool grow_at_40ms) {
        ax::Config cfg; // controller_interval 2 s: rounds every 100 ms
        ax::detail::ControllerStore store(cfg, "test", true, 0);
        std::vector<int> at_ms;
        std::vector<double> windows;
        std::uint32_t target = 4;
        for (int ms = 10; ms <= 400; ms += 10) {
            ax::ControllerInput in;
            in.queue_length = 100; // work waits: a round every tick
            in.current_target = target;
            in.live_workers = target;
            in.busy_workers = target;
            auto policy = [&](const ax::ControllerInput& i) {
                windows.push_back(i.sample_window_s);
                const bool grow = grow_at_40ms && ms == 40;
                return ax::ControllerDecision{i.current_target + (grow ? 4u : 0u),
                                              ax::ControllerReason::hold, 0.0};
            };
            const auto d = store.step(static_cast<std::int64_t>(ms) * 1'000'000, in, policy, cfg,
                                      [&](ax::detail::SchedDelta& sum) {
                                          at_ms.push_back(ms);
                                          // The first read primes the workers' cursors (nothing
                                          // measured), then every sample measures: 40 % CPU of the
                                          // busy time.
                                          const std::int64_t busy = ms == 10 ? 0 : 4'000'000;
                                          sum.busy_ns = busy;
                                          sum.cpu_ns = static_cast<std::uint64_t>(busy) * 2 / 5;
                                          return true;
                                      });
            REQUIRE(d);
            target = d->target;
        }
        return std::make_pair(at_ms, windows);
    };
    const auto [plain, windows] = times_sampled(false);
    // Prime at 10, first measure at 20 (10 ms), then 40 (20 ms), 80 (40 ms), 160 (80 ms: half an
    // interval or more), then every 100 ms. Before: 10, 20, 120, 220, 320.
    CHECK(plain == std::vector<int>{10, 20, 40, 80, 160, 260, 360});
    CHECK(windows.at(1) == Approx(0.010));  // the round at 20 ms saw the 10 ms window
    CHECK(windows.at(15) == Approx(0.080)); // the round at 160 ms, the 80 ms one
    // A growth at 40 ms ends the doubling: the round after it samples (the pool just grown
    // must not outrun its first sample), then every 100 ms as before.
    const auto [grown, unused] = times_sampled(true);
    (void)unused;
    CHECK(grown == std::vector<int>{10, 20, 40, 50, 150, 250, 350});
}

TEST_CASE("AdaptiveController: the first short sample weighs by the time it covers",
          "[controller]") {
    // gen-31 of the family as the machine ran it: 120 tasks queued, 4 workers; the first
    // sample, 14 ms after they started, caught all four computing at once (CPU 0.48, runqueue
    // 0.50: a cap of 2); the next, over 100 ms, the work as it is (CPU 0.25, blocked 0.75: a
    // cap of 14). Weighed half and half, the two held the pool at 4 here (4 - 6 on the machine)
    // for another 100 ms while the best pool was 32.
    ax::Config cfg;
    ax::AdaptiveController c(cfg);
    auto in = round_input(120, 4, 4, 0.0);
    in.cpu_share = 0.481;
    in.runqueue_share = 0.496;
    in.idle_cores = 0.0;
    in.sample_window_s = 0.014;
    auto d = c(in);
    CHECK(d.target <= 4);
    CHECK(d.reason == ax::ControllerReason::cpu_bound);
    in = round_input(117, d.target, d.target, 0.02);
    in.cpu_share = 0.246;
    in.runqueue_share = 0.004;
    in.idle_cores = 0.0;
    in.sample_window_s = 0.1;
    d = c(in);
    CHECK(d.target >= 11);
    // A later short sample (after a growth) keeps its full weight: growth must not outrun what
    // the pool just grown to shows.
    const std::uint32_t grown = d.target;
    in = round_input(117, grown, grown, 0.02);
    in.cpu_share = 0.7;
    in.runqueue_share = 0.29;
    in.idle_cores = 0.0;
    in.sample_window_s = 0.01;
    d = c(in);
    CHECK(d.target <= grown);
}

TEST_CASE("AdaptiveController: with every worker busy, queued work is sized by the workers' "
          "turnover, not by the short attempts that finished",
          "[controller]") {
    // gen-26 of the family: 59 % of the tasks sleep 93 ms, the rest take 0.1 ms, all queued at
    // once. The first attempts to finish are the short ones (a mean of 0.1 ms), while every
    // worker holds a long one: read by that mean, 115 queued tasks are a backlog of 0.1 worker
    // and the pool grew by one per round (1.16 x the best pool on the machine). Busy
    // worker-seconds per finished attempt count the running attempts' time too.
    ax::Config cfg;
    ax::AdaptiveController c(cfg);
    std::uint32_t target = 4;
    std::uint64_t attempts = 3;
    for (int round = 0; round < 4; ++round) {
        auto in = round_input(115, target, target, 0.0001);
        in.elapsed_s = 0.01;
        in.cpu_share = 0.001 + 0.0001 * round; // fresh samples: blocked work, cores idle
        in.runqueue_share = 0.0;
        in.idle_cores = 1.9;
        in.sample_window_s = 0.01;
        in.completed_total = attempts;
        in.attempts_total = attempts;
        const auto d = c(in);
        INFO("round " << round << ": target " << d.target);
        CHECK(d.target >= target);
        target = d.target;
        ++attempts; // one more short attempt per round; the long ones still run
    }
    // By Little's Law on the finished mean the need stayed at 4 busy + 115 x 0.1 ms / 100 ms.
    CHECK(target >= 32);

    // Failed attempts count as turnover: a pool whose attempts fail fast is not read as one
    // whose attempts never end.
    ax::AdaptiveController f(cfg);
    std::uint64_t done = 0;
    for (int round = 0; round < 4; ++round) {
        auto in = round_input(115, 4, 4, 0.0001);
        in.elapsed_s = 0.01;
        in.cpu_share = 0.001 + 0.0001 * round;
        in.idle_cores = 1.9;
        in.sample_window_s = 0.01;
        in.completed_total = 0;
        done += 400; // 4 workers x 10 ms / 0.1 ms, every one failed
        in.attempts_total = done;
        const auto d = f(in);
        CHECK(d.target <= 5);
    }
}

TEST_CASE("AdaptiveController: a pool seen too small is a floor until the queue drains",
          "[controller]") {
    // 4 workers of CPU-heavy work with short sleeps, all busy, the cores idle 40 % of the
    // sample beside queued work: 4 is too few (the woken workers wait for a core that idles).
    // The next samples catch the same 4 computing at once (runqueue share 0.55, no idle core)
    // and read as oversubscribed CPU work: before, the run-queue rule cut the pool to its cap
    // of 2 and the cores idled a third of the run (1.32 x the best fixed pool, 4, in the
    // simulator). The floor holds 4 while work stays queued, and lapses when the queue drains
    // or three samples in a row read the work as CPU-bound.
    ax::Config cfg;
    cfg.min_workers = 1;
    ax::AdaptiveController c(cfg);
    auto in = round_input(100, 4, 4, 0.018);
    in.cpu_share = 0.7;
    in.runqueue_share = 0.25;
    in.idle_cores = 0.8;
    std::uint32_t cur = c(in).target;
    REQUIRE(cur >= 4);
    std::vector<std::uint32_t> targets;
    for (int i = 0; i < 2; ++i) {
        in = round_input(100, cur, cur, 0.02);
        in.cpu_share = 0.45 + 1e-3 * i;
        in.runqueue_share = 0.55;
        in.idle_cores = 0.0;
        cur = c(in).target;
        CHECK(cur >= 4);
    }
    // Nothing queued: the floor is gone, and the cap (2) applies once two samples agree.
    for (int i = 0; i < 2; ++i) {
        in = round_input(0, cur, cur, 0.02);
        in.cpu_share = 0.46 + 1e-3 * i;
        in.runqueue_share = 0.55;
        in.idle_cores = 0.0;
        cur = c(in).target;
    }
    CHECK(cur <= 2);
}

TEST_CASE("AdaptiveController: a widening must finish more work, not only burn more CPU",
          "[controller]") {
    // Mixed work at its cap with idle cores (the widening of issue 12). Each widening raises
    // the process's CPU use; when the completion rate rises with it the widening goes on, when
    // it stays flat (memory-bound work: each task takes longer on a CPU the more compute at
    // once) the raise is taken back and, after two, the widening stops.
    ax::Config cfg;
    auto run = [&](bool work_grows) {
        ax::AdaptiveController c(cfg);
        std::uint32_t cur = 29;
        std::uint64_t done = 1000;
        for (int i = 0; i < 40; ++i) {
            auto in = round_input(120, cur, cur, 0.023);
            in.cpu_share = 3.0 / 23.0 + 1e-4 * i;
            in.idle_cores = 0.5;
            in.cpu_utilization = std::min(1.0, cur / 150.0);
            in.elapsed_s = 0.1;                    // one round per sample period
            done += work_grows ? cur * 4 : 29 * 4; // completions per 100 ms
            in.completed_total = done;
            cur = c(in).target;
        }
        return cur;
    };
    CHECK(run(true) >= 100);
    CHECK(run(false) <= 44); // at most one raise of widen_step stays
}

TEST_CASE("AdaptiveController: saturated cores trim the pool to the knee; a trim that costs "
          "completions is taken back",
          "[controller]") {
    // 64 workers of memory-bound work (2.3 ms asleep, 0.15 ms CPU), work queued, no core idle,
    // the workers waiting for a CPU half their busy time: the CPU cap (~65) keeps a margin for
    // colliding CPU phases the saturated cores do not need. The knee is cores / cpu x 1.25, rounded
    // up: 43. When fewer workers finish more (each task's CPU time falls with the crowd) the trim
    // stays; when they finish fewer, the pool goes back to where the rate was better.
    // Once kept, the knee ends when the cores idle beside queued work there: the cap's margin
    // is needed again.
    ax::Config cfg;
    auto run = [&](bool trim_pays, int idle_from = 1000) {
        ax::AdaptiveController c(cfg);
        std::uint32_t cur = 64;
        std::uint32_t lowest = cur;
        std::uint64_t done = 1000;
        for (int i = 0; i < 12; ++i) {
            auto in = round_input(140, cur, cur, 0.0025);
            in.saturated = true;             // the queue at its soft limit: the need asks for more
            in.cpu_share = 0.032 + 1e-5 * i; // a fresh sample each round
            in.runqueue_share = 0.46;
            in.idle_cores = i >= idle_from ? 0.5 : 0.0;
            in.cpu_utilization = 1.0;
            in.elapsed_s = 0.1; // one round per sample period
            done += cur > 50 ? 900 : (trim_pays ? 1000 : 800);
            in.completed_total = done;
            cur = c(in).target;
            lowest = std::min(lowest, cur);
        }
        return std::make_pair(lowest, cur);
    };
    const auto [pays_lowest, pays_end] = run(true);
    CHECK(pays_lowest <= 43);
    CHECK(pays_end <= 43);
    const auto [costs_lowest, costs_end] = run(false);
    CHECK(costs_lowest <= 43); // it was tried
    CHECK(costs_end >= 60);    // and given back
    const auto [idle_lowest, idle_end] = run(true, 8);
    CHECK(idle_lowest <= 43);
    CHECK(idle_end > 43);
}

TEST_CASE("sim: issue 33's case: a stream whose workers wake late is not held by the runqueue "
          "rule",
          "[controller][sim]") {
    // 4000 tasks of 0.12 ms CPU, then 1 ms asleep, offered at ~7 300/s, on a VM whose woken
    // threads wait 5 ms for a core (Setup::wake_latency_s): each worker reads a runqueue share
    // of 0.8 - 0.97 while the cores idle. Read as contention, the run-queue rule and Little's
    // Law on d x (1 - runqueue share) shrank the pool to 22 and the idle cores grew it back
    // to 146, again and again: 1.36 - 1.56 x the best fixed pool (64). Now within 5 %.
    Setup s = machine(2);
    s.wake_latency_s = 5e-3;
    s.oversubscription_penalty = 0.02;
    std::mt19937 rng(5);
    std::uniform_real_distribution<double> f(0.75, 1.25);
    std::vector<Arrival> a;
    for (int i = 0; i < 4000; ++i)
        a.push_back({i / 7300.0, Task{0.12e-3 * f(rng), 1e-3 * f(rng)}});
    const Result r = adaptive(s, a, true, "adaptive wake-late stream");
    REQUIRE(r.finished);
    const double best = best_fixed(s, a);
    CHECK(r.makespan_s <= 1.05 * best);
    CHECK(r.direction_changes <= 20); // 23 before
}

namespace {

/// A family workload's tasks as simulator arrivals.
std::vector<Arrival> arrivals_of(const ax_family::Workload& w) {
    std::vector<Arrival> a;
    for (const auto& t : w.tasks)
        a.push_back({t.release_s, Task{t.cpu_s, t.block_s, t.mem, t.block_first}});
    return a;
}

/// The simulated machine the family runs on: 2 cores, memory-bound CPU work that slows as more
/// of it computes at once (0.02 per task computing, to 16), oversubscription costing 2 % per
/// doubling, and workers that take the next task within the step.
Setup family_machine() {
    Setup s = machine(2);
    s.memory_contention = 0.02;
    s.oversubscription_penalty = 0.02;
    s.dispatch_within_step = true;
    return s;
}

/// `a` run on a fixed pool of `n` workers on `s`.
Result run_fixed(const Setup& s, const std::vector<Arrival>& a, std::uint32_t n) {
    Setup f = s;
    f.cfg.min_workers = f.cfg.max_workers = n;
    ax_sim::FixedPolicy p(f.cfg);
    p.n = n;
    return ax_sim::run(f, a, p);
}

struct FamilyScore {
    std::vector<double> time_ratio;   // ax / best fixed pool, per workload
    std::vector<double> thread_ratio; // ax thread-seconds / the best pool's
};

/// Runs the first `count` workloads of the generated family on `s`: ax with its defaults
/// against fixed pools of 1 - 200 (max_workers) threads, skipping pools whose nominal lower
/// bound is over 3 x the largest's (they cannot be the best). The best pool is the fastest;
/// its thread-seconds are those of the smallest pool within 1 % of it (pools that tie).
FamilyScore run_family(const Setup& s, std::size_t count, const char* label) {
    FamilyScore score;
    const bool verbose = std::getenv("AX_SIM_VERBOSE") != nullptr;
    for (const auto& w : ax_family::family(count)) {
        const std::vector<Arrival> a = arrivals_of(w);
        const double largest = w.estimate_s(200, s.cores);
        double best = 1e300;
        std::vector<std::pair<double, double>> pools; // makespan, thread-seconds
        std::string line;
        for (const std::uint32_t n : {1u, 2u, 4u, 8u, 16u, 32u, 64u, 128u, 200u}) {
            if (w.estimate_s(n, s.cores) > 3.0 * largest + 0.2) {
                line += "      -";
                continue;
            }
            const Result r = run_fixed(s, a, n);
            REQUIRE(r.finished);
            pools.emplace_back(r.makespan_s, r.thread_seconds);
            best = std::min(best, r.makespan_s);
            char buf[16];
            std::snprintf(buf, sizeof buf, " %6.3f", r.makespan_s);
            line += buf;
        }
        double best_threads = 1e300;
        for (const auto& [m, ts] : pools)
            if (m <= 1.01 * best)
                best_threads = std::min(best_threads, ts);
        ax::AdaptiveController c(s.cfg);
        const Result r = ax_sim::run(s, a, c);
        REQUIRE(r.finished);
        score.time_ratio.push_back(r.makespan_s / best);
        score.thread_ratio.push_back(r.thread_seconds / best_threads);
        if (verbose)
            std::printf("%s %-7s ax %6.3f best %6.3f  x%.2f  thread-s x%.2f peak %3u |%s  %s\n",
                        label, w.name().c_str(), r.makespan_s, best, r.makespan_s / best,
                        r.thread_seconds / best_threads, r.peak_workers, line.c_str(),
                        w.describe().c_str());
    }
    return score;
}

double median_of(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

} // namespace

TEST_CASE("sim: a first sample of tasks that started in step does not hold the pool (gen-31)",
          "[controller][sim]") {
    // The family's gen-31: bursts of tasks that sleep 9.8 ms then compute 3 ms (memory-bound),
    // beside ones that compute 0.2 ms then sleep 77.5 ms; the best pools are 32 - 200. The
    // first sample caught the first tasks computing at once and, weighed as a full period, held
    // the pool at 4 - 6 for 100 ms at a time: 1.13 x the best pool here, 1.27 x on the machine.
    const Setup s = family_machine();
    const auto w = ax_family::family(1, 31).at(0);
    const std::vector<Arrival> a = arrivals_of(w);
    double best = 1e300;
    for (const std::uint32_t n : {16u, 32u, 64u, 128u, 200u}) {
        const Result r = run_fixed(s, a, n);
        REQUIRE(r.finished);
        best = std::min(best, r.makespan_s);
    }
    const Result r = adaptive(s, a);
    REQUIRE(r.finished);
    INFO("ax " << r.makespan_s << " s, best fixed " << best << " s");
    CHECK(r.makespan_s <= 1.05 * best);
}

TEST_CASE("sim: long tasks queued beside short ones reach their pool in time (gen-26)",
          "[controller][sim]") {
    // The family's gen-26: 59 % of the tasks sleep 93 ms, 41 % compute 0.1 ms, all at once; the
    // best pool is the largest. The mean of the finished attempts (the short ones first) read
    // the queue as a backlog of a few workers: 1.07 x the best pool here, 1.16 x on the machine.
    Setup s = family_machine();
    const auto w = ax_family::family(1, 26).at(0);
    const std::vector<Arrival> a = arrivals_of(w);
    for (const double wake : {0.0, 5e-3}) {
        s.wake_latency_s = wake;
        double best = 1e300;
        for (const std::uint32_t n : {64u, 128u, 200u}) {
            const Result r = run_fixed(s, a, n);
            REQUIRE(r.finished);
            best = std::min(best, r.makespan_s);
        }
        const Result r = adaptive(s, a);
        REQUIRE(r.finished);
        INFO("wake " << wake << ": ax " << r.makespan_s << " s, best fixed " << best << " s");
        CHECK(r.makespan_s <= 1.05 * best);
    }
}

TEST_CASE("sim: the generated family of workloads, ax against the best fixed pool of each",
          "[controller][sim]") {
    // 32 workloads nobody tuned the controller for (tests/workload_family.hpp: mixes of 0 -
    // 100 ms blocking, 0.1 - 20 ms CPU, memory intensity, arrival shapes; seeds 1 - 32), on two
    // simulated machines: memory-bound CPU work slows down as more of it computes at once
    // (memory_contention 0.02 per task computing, to 16), oversubscription costs 2 % per
    // doubling, and the VM's woken threads wait 0 or 5 ms for a core. Before issue 33 the
    // second machine put the controller at 1.06 x the best pool in the median and 2.06 x at
    // worst, 17 of 32 workloads over 1.05 x (runqueue wait beside idle cores read as
    // contention). What is left over 1.05 x is mostly the ramp of short runs (0.3 - 0.6 s:
    // a pool that starts at 4 workers and samples before it grows loses tens of ms against a
    // pool started at its best size) and memory-bound crowds (docs/tuning.md).
    // Workers take the next task within the step (dispatch_within_step): at step boundaries
    // only, pools of 2 lost a quarter on sub-step tasks and large pools won rows no machine
    // would give them. With that bias gone, small pools win more rows, and ax's thread-seconds
    // median rose from 1.04 to 1.17 (no wake latency) and from 0.92 to 1.11 (5 ms): the CPU
    // cap's blocked-share widening keeps about twice the knee's pool on IO-heavy rows whose
    // makespan is flat from the knee up, and min_workers (4) stays alive against best pools of
    // 1 - 2 (docs/bench/family.md, row by row). The knee trim (saturated cores: the pool goes
    // from the cap to cores / cpu x 1.25 while the completion rate holds) took memory-bound
    // gen-7 / gen-8 from 1.12 / 1.11 x to 1.05 / 1.04 x, the rows over 1.05 x from 5 to 3
    // (no wake latency) and the thread-seconds median from 1.17 to 1.03 (5 ms: 1.11 to 0.95).
    // The bounds guard against worse.
    Setup s = family_machine();
    for (const double wake : {0.0, 5e-3}) {
        s.wake_latency_s = wake;
        const FamilyScore f = run_family(s, 32, wake > 0 ? "wake 5 ms" : "wake 0");
        const auto over = std::count_if(f.time_ratio.begin(), f.time_ratio.end(),
                                        [](double x) { return x > 1.05; });
        INFO("wake latency " << wake << " s: median " << median_of(f.time_ratio) << ", worst "
                             << *std::max_element(f.time_ratio.begin(), f.time_ratio.end())
                             << ", over 1.05 x: " << over << "; thread-s median "
                             << median_of(f.thread_ratio));
        CHECK(median_of(f.time_ratio) <= 1.03);
        CHECK(over <= 8);
        CHECK(*std::max_element(f.time_ratio.begin(), f.time_ratio.end()) <= 1.20);
        CHECK(median_of(f.thread_ratio) <= 1.10);
    }
}
