// Unit tests for ax::Config: design-card defaults, validate() and window_slots().
#include <ax/config.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <limits>
#include <stdexcept>

using namespace std::chrono_literals;
using Catch::Contains;

TEST_CASE("Config defaults follow the design card", "[config]") {
    const ax::Config c;
    CHECK(c.min_workers == 4);
    CHECK(c.max_workers == 200);
    CHECK(c.queue_capacity == 150);
    CHECK(c.soft_limit_ratio == 0.8);
    CHECK(c.weight_high == 3);
    CHECK(c.weight_normal == 2);
    CHECK(c.weight_low == 1);
    CHECK(c.max_wait == 5s);
    CHECK(c.dispatch_interval == 10ms);
    CHECK(c.metrics_window == 30s);
    CHECK(c.controller_interval == 2s);
    CHECK(c.drain_time == 5s);
    CHECK(c.max_step_up == 10);
    CHECK(c.max_step_down == 5);
    CHECK(c.retry_base_delay == 200ms);
    CHECK(c.retry_jitter == 50ms);
    CHECK(c.retry_max == 3);
    CHECK(c.history_capacity == 4096);
    CHECK(c.huge_pages);
}

TEST_CASE("Config::validate accepts the defaults and boundary values", "[config]") {
    ax::Config c;
    REQUIRE_NOTHROW(c.validate());

    SECTION("min_workers == max_workers") {
        c.min_workers = 7;
        c.max_workers = 7;
        REQUIRE_NOTHROW(c.validate());
    }
    SECTION("min_workers 0") {
        c.min_workers = 0;
        REQUIRE_NOTHROW(c.validate());
    }
    SECTION("largest max_workers, queue_capacity, history_capacity") {
        c.max_workers = 65536;
        c.queue_capacity = 1u << 24;
        c.history_capacity = 1u << 24;
        REQUIRE_NOTHROW(c.validate());
    }
    SECTION("soft_limit_ratio 1.0 and a tiny positive one") {
        c.soft_limit_ratio = 1.0;
        REQUIRE_NOTHROW(c.validate());
        c.soft_limit_ratio = 1e-6;
        REQUIRE_NOTHROW(c.validate());
    }
    SECTION("weights 1 and 1000") {
        c.weight_high = 1000;
        c.weight_normal = 1;
        c.weight_low = 1;
        REQUIRE_NOTHROW(c.validate());
    }
    SECTION("metrics_window 1 s and 3600 s") {
        c.metrics_window = 1s;
        REQUIRE_NOTHROW(c.validate());
        c.metrics_window = 3600s;
        REQUIRE_NOTHROW(c.validate());
    }
    SECTION("controller_interval == dispatch_interval") {
        c.controller_interval = c.dispatch_interval;
        REQUIRE_NOTHROW(c.validate());
    }
    SECTION("zero retry delays and retries") {
        c.retry_base_delay = 0ms;
        c.retry_jitter = 0ms;
        c.retry_max = 0;
        REQUIRE_NOTHROW(c.validate());
    }
    SECTION("retry_max 100") {
        c.retry_max = 100;
        REQUIRE_NOTHROW(c.validate());
    }
}

TEST_CASE("Config::validate rejects worker limits naming field and value", "[config]") {
    ax::Config c;
    SECTION("max_workers 0") {
        c.min_workers = 0;
        c.max_workers = 0;
        REQUIRE_THROWS_AS(c.validate(), std::invalid_argument);
        REQUIRE_THROWS_WITH(c.validate(), Contains("max_workers = 0"));
    }
    SECTION("min_workers > max_workers") {
        c.min_workers = 10;
        c.max_workers = 5;
        REQUIRE_THROWS_AS(c.validate(), std::invalid_argument);
        REQUIRE_THROWS_WITH(c.validate(), Contains("min_workers = 10"));
        REQUIRE_THROWS_WITH(c.validate(), Contains("max_workers (5)"));
    }
    SECTION("max_workers above 65536") {
        c.max_workers = 65537;
        REQUIRE_THROWS_AS(c.validate(), std::invalid_argument);
        REQUIRE_THROWS_WITH(c.validate(), Contains("max_workers = 65537"));
    }
}

TEST_CASE("Config::validate rejects queue settings naming field and value", "[config]") {
    ax::Config c;
    SECTION("queue_capacity 0") {
        c.queue_capacity = 0;
        REQUIRE_THROWS_AS(c.validate(), std::invalid_argument);
        REQUIRE_THROWS_WITH(c.validate(), Contains("queue_capacity = 0"));
    }
    SECTION("queue_capacity too large") {
        c.queue_capacity = (1u << 24) + 1;
        REQUIRE_THROWS_AS(c.validate(), std::invalid_argument);
        REQUIRE_THROWS_WITH(c.validate(), Contains("queue_capacity = 16777217"));
    }
    SECTION("soft_limit_ratio 0") {
        c.soft_limit_ratio = 0.0;
        REQUIRE_THROWS_AS(c.validate(), std::invalid_argument);
        REQUIRE_THROWS_WITH(c.validate(), Contains("soft_limit_ratio = 0"));
    }
    SECTION("soft_limit_ratio negative") {
        c.soft_limit_ratio = -0.5;
        REQUIRE_THROWS_AS(c.validate(), std::invalid_argument);
        REQUIRE_THROWS_WITH(c.validate(), Contains("soft_limit_ratio = -0.5"));
    }
    SECTION("soft_limit_ratio above 1") {
        c.soft_limit_ratio = 1.5;
        REQUIRE_THROWS_AS(c.validate(), std::invalid_argument);
        REQUIRE_THROWS_WITH(c.validate(), Contains("soft_limit_ratio = 1.5"));
    }
    SECTION("soft_limit_ratio NaN") {
        c.soft_limit_ratio = std::numeric_limits<double>::quiet_NaN();
        REQUIRE_THROWS_AS(c.validate(), std::invalid_argument);
        REQUIRE_THROWS_WITH(c.validate(), Contains("soft_limit_ratio"));
    }
    SECTION("history_capacity too large") {
        c.history_capacity = (1u << 24) + 1;
        REQUIRE_THROWS_AS(c.validate(), std::invalid_argument);
        REQUIRE_THROWS_WITH(c.validate(), Contains("history_capacity = 16777217"));
    }
}

TEST_CASE("Config::validate rejects zero and oversized weights", "[config]") {
    ax::Config c;
    SECTION("weight_high 0") {
        c.weight_high = 0;
        REQUIRE_THROWS_AS(c.validate(), std::invalid_argument);
        REQUIRE_THROWS_WITH(c.validate(), Contains("weight_high = 0"));
    }
    SECTION("weight_normal 0") {
        c.weight_normal = 0;
        REQUIRE_THROWS_AS(c.validate(), std::invalid_argument);
        REQUIRE_THROWS_WITH(c.validate(), Contains("weight_normal = 0"));
    }
    SECTION("weight_low 0") {
        c.weight_low = 0;
        REQUIRE_THROWS_AS(c.validate(), std::invalid_argument);
        REQUIRE_THROWS_WITH(c.validate(), Contains("weight_low = 0"));
    }
    SECTION("a weight above 1000") {
        c.weight_normal = 1001;
        REQUIRE_THROWS_AS(c.validate(), std::invalid_argument);
        REQUIRE_THROWS_WITH(c.validate(), Contains("weight_high/normal/low = 3/1001/1"));
    }
}

TEST_CASE("Config::validate rejects non-positive and out-of-range durations", "[config]") {
    ax::Config c;
    SECTION("max_wait zero") {
        c.max_wait = 0ms;
        REQUIRE_THROWS_AS(c.validate(), std::invalid_argument);
        REQUIRE_THROWS_WITH(c.validate(), Contains("max_wait = 0"));
    }
    SECTION("max_wait negative") {
        c.max_wait = -1ms;
        REQUIRE_THROWS_AS(c.validate(), std::invalid_argument);
        REQUIRE_THROWS_WITH(c.validate(), Contains("max_wait = -1"));
    }
    SECTION("dispatch_interval zero") {
        c.dispatch_interval = 0ms;
        REQUIRE_THROWS_AS(c.validate(), std::invalid_argument);
        REQUIRE_THROWS_WITH(c.validate(), Contains("dispatch_interval = 0"));
    }
    SECTION("dispatch_interval negative") {
        c.dispatch_interval = -10ms;
        REQUIRE_THROWS_AS(c.validate(), std::invalid_argument);
        REQUIRE_THROWS_WITH(c.validate(), Contains("dispatch_interval = -10"));
    }
    SECTION("metrics_window below 1 s") {
        c.metrics_window = 500ms;
        REQUIRE_THROWS_AS(c.validate(), std::invalid_argument);
        REQUIRE_THROWS_WITH(c.validate(), Contains("metrics_window = 500"));
    }
    SECTION("metrics_window zero") {
        c.metrics_window = 0s;
        REQUIRE_THROWS_AS(c.validate(), std::invalid_argument);
        REQUIRE_THROWS_WITH(c.validate(), Contains("metrics_window = 0"));
    }
    SECTION("metrics_window above 3600 s") {
        c.metrics_window = 3601s;
        REQUIRE_THROWS_AS(c.validate(), std::invalid_argument);
        REQUIRE_THROWS_WITH(c.validate(), Contains("metrics_window = 3601000"));
    }
    SECTION("controller_interval below dispatch_interval") {
        c.controller_interval = 5ms;
        REQUIRE_THROWS_AS(c.validate(), std::invalid_argument);
        REQUIRE_THROWS_WITH(c.validate(), Contains("controller_interval = 5"));
        REQUIRE_THROWS_WITH(c.validate(), Contains("dispatch_interval"));
    }
    SECTION("controller_interval zero") {
        c.controller_interval = 0ms;
        REQUIRE_THROWS_AS(c.validate(), std::invalid_argument);
        REQUIRE_THROWS_WITH(c.validate(), Contains("controller_interval = 0"));
    }
    SECTION("drain_time zero") {
        c.drain_time = 0s;
        REQUIRE_THROWS_AS(c.validate(), std::invalid_argument);
        REQUIRE_THROWS_WITH(c.validate(), Contains("drain_time = 0"));
    }
    SECTION("drain_time negative") {
        c.drain_time = -2s;
        REQUIRE_THROWS_AS(c.validate(), std::invalid_argument);
        REQUIRE_THROWS_WITH(c.validate(), Contains("drain_time = -2000"));
    }
    SECTION("retry_base_delay negative") {
        c.retry_base_delay = -1ms;
        REQUIRE_THROWS_AS(c.validate(), std::invalid_argument);
        REQUIRE_THROWS_WITH(c.validate(), Contains("retry_base_delay = -1"));
    }
    SECTION("retry_jitter negative") {
        c.retry_jitter = -3ms;
        REQUIRE_THROWS_AS(c.validate(), std::invalid_argument);
        REQUIRE_THROWS_WITH(c.validate(), Contains("retry_jitter = -3"));
    }
}

TEST_CASE("Config::validate rejects zero steps and too many retries", "[config]") {
    ax::Config c;
    SECTION("max_step_up 0") {
        c.max_step_up = 0;
        REQUIRE_THROWS_AS(c.validate(), std::invalid_argument);
        REQUIRE_THROWS_WITH(c.validate(), Contains("max_step_up = 0"));
    }
    SECTION("max_step_down 0") {
        c.max_step_down = 0;
        REQUIRE_THROWS_AS(c.validate(), std::invalid_argument);
        REQUIRE_THROWS_WITH(c.validate(), Contains("max_step_down = 0"));
    }
    SECTION("retry_max above 100") {
        c.retry_max = 101;
        REQUIRE_THROWS_AS(c.validate(), std::invalid_argument);
        REQUIRE_THROWS_WITH(c.validate(), Contains("retry_max = 101"));
    }
}

TEST_CASE("Config::validate message starts with the ax::Config prefix", "[config]") {
    ax::Config c;
    c.queue_capacity = 0;
    REQUIRE_THROWS_WITH(c.validate(), Catch::StartsWith("ax::Config: queue_capacity = 0: "));
}

TEST_CASE("Config::window_slots counts whole seconds of metrics_window", "[config]") {
    ax::Config c;
    CHECK(c.window_slots() == 30);
    c.metrics_window = 1s;
    CHECK(c.window_slots() == 1);
    c.metrics_window = 2500ms;
    CHECK(c.window_slots() == 2);
    c.metrics_window = 3600s;
    CHECK(c.window_slots() == 3600);
    c.metrics_window = std::chrono::minutes(2);
    CHECK(c.window_slots() == 120);
}
