// Unit tests for ax/detail/groups.hpp: the breaker's pure transitions, capacity, the registry.
#include <ax/detail/groups.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

using ax::BreakerOptions;
using ax::BreakerState;
using ax::detail::GroupRegistry;
using ax::detail::GroupState;

namespace {
GroupState with_breaker(std::uint32_t min_attempts, double ratio, std::int64_t cooldown_ns,
                        std::uint32_t probes = 1) {
    GroupState g;
    BreakerOptions o;
    o.min_attempts = min_attempts;
    o.failure_ratio = ratio;
    o.cooldown = std::chrono::nanoseconds(cooldown_ns);
    o.probes = probes;
    g.set_breaker(&o, 0);
    return g;
}
} // namespace

TEST_CASE("GroupState capacity follows the limit and the breaker", "[groups]") {
    GroupState g;
    CHECK(g.capacity() == UINT32_MAX);
    g.limit = 3;
    CHECK(g.capacity() == 3);
    g = with_breaker(1, 1.0, 100, 2);
    g.limit = 5;
    CHECK(g.capacity() == 5);
    g.state = BreakerState::open;
    CHECK(g.capacity() == 0);
    g.state = BreakerState::half_open;
    CHECK(g.capacity() == 2);
    g.limit = 1;
    CHECK(g.capacity() == 1);
}

TEST_CASE("Breaker: closed opens at the failure ratio after min_attempts", "[groups]") {
    GroupState g = with_breaker(4, 0.5, 100);
    g.on_attempt(false, 1);
    g.on_attempt(false, 2);
    g.on_attempt(true, 3);
    CHECK(g.state == BreakerState::closed); // 3 attempts < min_attempts
    g.on_attempt(true, 4);
    CHECK(g.state == BreakerState::open); // 2 of 4 failed = 0.5
    CHECK(g.since_ns == 4);
    g.on_attempt(false, 5); // started before it opened: ignored
    CHECK(g.attempts == 4);
}

TEST_CASE("Breaker: successes below the ratio keep it closed", "[groups]") {
    GroupState g = with_breaker(4, 0.75, 100);
    g.on_attempt(true, 0);
    g.on_attempt(true, 1);
    for (int k = 2; k < 5; ++k)
        g.on_attempt(false, k);
    CHECK(g.state == BreakerState::closed); // 2 of 4, then 3 of 5 = 0.6 < 0.75
    const auto st = g.stats();
    CHECK(st.breaker_enabled);
    CHECK(st.recent_attempts == 5);
    CHECK(st.recent_failures == 3);
}

TEST_CASE("Breaker: cool-down to half-open, then a probe closes or re-opens it", "[groups]") {
    GroupState g = with_breaker(1, 1.0, 100);
    g.on_attempt(false, 10);
    REQUIRE(g.state == BreakerState::open);
    CHECK_FALSE(g.on_tick(109, 1000));
    CHECK(g.state == BreakerState::open);
    CHECK(g.on_tick(110, 1000));
    CHECK(g.state == BreakerState::half_open);

    GroupState fail = g;
    fail.on_attempt(false, 120);
    CHECK(fail.state == BreakerState::open);
    CHECK(fail.since_ns == 120);

    g.on_attempt(true, 120);
    CHECK(g.state == BreakerState::closed);
    CHECK(g.attempts == 0);
    CHECK(g.failures == 0);
}

TEST_CASE("Breaker: a closed breaker starts a new window every window_ns", "[groups]") {
    GroupState g = with_breaker(10, 0.5, 100);
    g.on_attempt(false, 1);
    g.on_attempt(false, 2);
    CHECK_FALSE(g.on_tick(999, 1000));
    CHECK(g.failures == 2);
    CHECK_FALSE(g.on_tick(1000, 1000));
    CHECK(g.failures == 0);
    CHECK(g.since_ns == 1000);
}

TEST_CASE("Breaker off: attempts and ticks change nothing", "[groups]") {
    GroupState g;
    g.on_attempt(false, 1);
    CHECK_FALSE(g.on_tick(1'000'000, 1));
    CHECK(g.attempts == 0);
    CHECK(g.state == BreakerState::closed);
    BreakerOptions o;
    g.set_breaker(&o, 5);
    CHECK(g.breaker_on);
    g.set_breaker(nullptr, 6);
    CHECK_FALSE(g.breaker_on);
}

TEST_CASE("validate_breaker names what is wrong", "[groups]") {
    BreakerOptions o;
    CHECK_NOTHROW(ax::detail::validate_breaker(o));
    o.failure_ratio = 0.0;
    CHECK_THROWS_WITH(ax::detail::validate_breaker(o), Catch::Contains("failure_ratio in (0, 1]"));
    o.failure_ratio = 1.5;
    CHECK_THROWS_AS(ax::detail::validate_breaker(o), std::invalid_argument);
    o.failure_ratio = 0.5;
    o.min_attempts = 0;
    CHECK_THROWS_AS(ax::detail::validate_breaker(o), std::invalid_argument);
    o.min_attempts = 1;
    o.cooldown = std::chrono::nanoseconds(-1);
    CHECK_THROWS_AS(ax::detail::validate_breaker(o), std::invalid_argument);
}

TEST_CASE("GroupRegistry registers names once, makes state first, and checks IDs", "[groups]") {
    GroupRegistry reg;
    std::vector<std::size_t> made;
    auto make = [&](std::size_t g) { made.push_back(g); };
    CHECK(reg.add("a", make).value == 1);
    CHECK(reg.add("b", make).value == 2);
    CHECK(reg.add("a", make).value == 1);
    CHECK(made == std::vector<std::size_t>{1, 2});
    CHECK(reg.count() == 2);
    CHECK(reg.name(ax::GroupId{2}) == "b");
    CHECK(reg.name(ax::GroupId{3}).empty());
    CHECK(reg.names() == std::vector<std::string>{"a", "b"});
    CHECK(reg.registered(ax::GroupId{1}));
    CHECK_FALSE(reg.registered(ax::GroupId{0}));
    CHECK_NOTHROW(reg.check(ax::GroupId{2}));
    CHECK_THROWS_WITH(reg.check(ax::GroupId{3}), Catch::Contains("group 3 is not registered"));
}

TEST_CASE("GroupRegistry refuses a group past max_groups", "[groups]") {
    GroupRegistry reg;
    for (std::size_t g = 0; g < ax::Tuning::max_groups; ++g)
        reg.add("g" + std::to_string(g), [](std::size_t) {});
    CHECK_THROWS_AS(reg.add("one-too-many", [](std::size_t) {}), std::length_error);
    CHECK(reg.count() == ax::Tuning::max_groups);
}
