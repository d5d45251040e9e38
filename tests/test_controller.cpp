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
