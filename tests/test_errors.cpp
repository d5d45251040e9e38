// Unit tests for ax/errors.hpp: Errc as std::error_code, SubmitError, Expected.
#include <ax/errors.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>

using Catch::Contains;

static_assert(std::is_error_code_enum_v<ax::Errc>);
static_assert(ax::ErrQueueFull == ax::Errc::queue_full);
static_assert(ax::ErrBusy == ax::Errc::busy);

TEST_CASE("Errc converts to std::error_code in the ax category", "[errors]") {
    const std::error_code ec = ax::Errc::queue_full; // implicit, via is_error_code_enum
    CHECK(ec.value() == 1);
    CHECK(std::string(ec.category().name()) == "ax");
    CHECK(&ec.category() == &ax::error_category());
    CHECK(ec == ax::Errc::queue_full);
    CHECK(ec == ax::ErrQueueFull);
    CHECK(ec != ax::Errc::busy);
    CHECK(static_cast<bool>(ec));
    // Same number in another category is a different error.
    CHECK(ec != std::error_code(1, std::generic_category()));

    const std::error_code made = ax::make_error_code(ax::ErrBusy);
    CHECK(made.value() == 2);
    CHECK(made == ax::Errc::busy);
    CHECK(&made.category() == &ax::error_category());
}

TEST_CASE("Errc values and messages", "[errors]") {
    CHECK(static_cast<int>(ax::Errc::queue_full) == 1);
    CHECK(static_cast<int>(ax::Errc::busy) == 2);
    CHECK(static_cast<int>(ax::Errc::shutting_down) == 3);
    CHECK(static_cast<int>(ax::Errc::invalid_options) == 4);
    CHECK(static_cast<int>(ax::Errc::too_many_tasks) == 5);

    CHECK(ax::make_error_code(ax::Errc::queue_full).message() == "queue full");
    CHECK(ax::make_error_code(ax::Errc::busy).message() == "busy: queue above its soft limit");
    CHECK(ax::make_error_code(ax::Errc::shutting_down).message() == "scheduler is shutting down");
    CHECK(ax::make_error_code(ax::Errc::invalid_options).message() == "invalid submit options");
    CHECK(ax::make_error_code(ax::Errc::too_many_tasks).message() == "too many live task records");
}

TEST_CASE("ErrorCategory names codes outside Errc unknown", "[errors]") {
    const auto& cat = ax::error_category();
    CHECK(cat.message(0) == "unknown ax error");
    CHECK(cat.message(8) == "unknown ax error");
    CHECK(cat.message(-1) == "unknown ax error");
    // Errc's underlying type is uint8_t: a code like 257 must not alias queue_full (1).
    CHECK(cat.message(257) == "unknown ax error");
    CHECK(cat.message(258) == "unknown ax error");
}

TEST_CASE("SubmitError::retryable is true for backpressure and a group's refusals only",
          "[errors]") {
    ax::SubmitError e;
    e.code = ax::Errc::queue_full;
    CHECK(e.retryable());
    e.code = ax::Errc::busy;
    CHECK(e.retryable());
    e.code = ax::Errc::shutting_down;
    CHECK_FALSE(e.retryable());
    e.code = ax::Errc::invalid_options;
    CHECK_FALSE(e.retryable());
    e.code = ax::Errc::too_many_tasks;
    CHECK_FALSE(e.retryable());
    e.code = ax::Errc::breaker_open;
    CHECK(e.retryable());
    e.code = ax::Errc::group_full;
    CHECK(e.retryable());
    CHECK_FALSE(ax::SubmitError{}.retryable());
    e.code = ax::Errc::breaker_open;
    e.retry_after = std::chrono::microseconds(250);
    CHECK(e.message() == "the group's circuit breaker is open (retry after 250 us)");
}

TEST_CASE("SubmitError::error_code and message", "[errors]") {
    SECTION("queue_full carries length, capacity and retry_after") {
        const ax::SubmitError e{
            ax::Errc::queue_full, 150, 150, std::chrono::microseconds(1200), {}};
        CHECK(e.error_code() == ax::ErrQueueFull);
        CHECK(e.message() == "queue full (150/150 queued, retry after 1200 us)");
    }
    SECTION("busy carries its figures too") {
        const ax::SubmitError e{ax::Errc::busy, 121, 150, std::chrono::microseconds(35), {}};
        CHECK(e.error_code() == ax::Errc::busy);
        CHECK(e.message() ==
              "busy: queue above its soft limit (121/150 queued, retry after 35 us)");
    }
    SECTION("non-retryable errors carry no figures") {
        const ax::SubmitError e{ax::Errc::shutting_down, 3, 150, std::chrono::microseconds(0), {}};
        CHECK(e.message() == "scheduler is shutting down");
        CHECK_THAT(e.message(), !Contains("150"));
    }
    SECTION("invalid_options appends the detail") {
        const ax::SubmitError e{ax::Errc::invalid_options, 0, 150, std::chrono::microseconds(0),
                                "timeout = -5 ms is negative"};
        CHECK(e.error_code() == ax::Errc::invalid_options);
        CHECK(e.message() == "invalid submit options: timeout = -5 ms is negative");
    }
}

namespace {
struct Point {
    int x = 0;
    int y = 0;
};
} // namespace

TEST_CASE("Expected holding a value", "[errors]") {
    ax::Expected<int> e = 42;
    REQUIRE(e.has_value());
    REQUIRE(static_cast<bool>(e));
    CHECK(e.value() == 42);
    CHECK(*e == 42);
    e.value() = 7;
    CHECK(*e == 7);
    REQUIRE_THROWS_AS(e.error(), std::logic_error);
    REQUIRE_THROWS_WITH(e.error(), Contains("error() on a value"));

    ax::Expected<Point> p = Point{1, 2};
    CHECK(p->x == 1);
    CHECK(p->y == 2);

    ax::Expected<std::unique_ptr<int>> u = std::make_unique<int>(5);
    std::unique_ptr<int> taken = std::move(u).value();
    REQUIRE(taken != nullptr);
    CHECK(*taken == 5);

    ax::Expected<std::string> s = std::string("hello");
    std::string moved = *std::move(s);
    CHECK(moved == "hello");
}

TEST_CASE("Expected holding an error", "[errors]") {
    ax::Expected<int> e =
        ax::SubmitError{ax::Errc::queue_full, 10, 10, std::chrono::microseconds(500), {}};
    REQUIRE_FALSE(e.has_value());
    REQUIRE_FALSE(static_cast<bool>(e));
    CHECK(e.error().code == ax::Errc::queue_full);
    CHECK(e.error().queue_length == 10);
    CHECK(e.error().capacity == 10);
    CHECK(e.error().retry_after == std::chrono::microseconds(500));

    REQUIRE_THROWS_AS(e.value(), std::logic_error);
    REQUIRE_THROWS_WITH(e.value(), Contains("value() on an error"));
    REQUIRE_THROWS_WITH(e.value(), Contains("queue full (10/10 queued, retry after 500 us)"));
    REQUIRE_THROWS_AS(*e, std::logic_error);
    REQUIRE_THROWS_AS(std::move(e).value(), std::logic_error);

    ax::Expected<Point> p = ax::SubmitError{ax::Errc::shutting_down, 0, 0, {}, {}};
    REQUIRE_THROWS_AS(p->x, std::logic_error);
    CHECK(p.error().code == ax::Errc::shutting_down);
}
