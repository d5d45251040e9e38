// Unit tests for ax/retry.hpp: retry_delay, detail::RetryTimers, detail::Jitter.
#include <algorithm>
#include <ax/retry.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <limits>
#include <vector>

using namespace std::chrono_literals;
using ax::retry_delay;
using std::chrono::nanoseconds;

TEST_CASE("retry_delay doubles the base per retry and adds jitter", "[retry]") {
    const nanoseconds base = 200ms;
    const nanoseconds jitter = 50ms;

    SECTION("first retry (attempt 2): [200, 250] ms") {
        CHECK(retry_delay(base, jitter, 2, 0.0) == 200ms);
        CHECK(retry_delay(base, jitter, 2, 0.5) == 225ms);
        CHECK(retry_delay(base, jitter, 2, 1.0) == 250ms);
    }
    SECTION("second retry (attempt 3): [400, 450] ms") {
        CHECK(retry_delay(base, jitter, 3, 0.0) == 400ms);
        CHECK(retry_delay(base, jitter, 3, 0.5) == 425ms);
        CHECK(retry_delay(base, jitter, 3, 1.0) == 450ms);
    }
    SECTION("third retry (attempt 4): [800, 850] ms") {
        CHECK(retry_delay(base, jitter, 4, 0.0) == 800ms);
        CHECK(retry_delay(base, jitter, 4, 0.5) == 825ms);
        CHECK(retry_delay(base, jitter, 4, 1.0) == 850ms);
    }
    SECTION("attempt 5 and 11") {
        CHECK(retry_delay(base, jitter, 5, 0.0) == 1600ms);
        CHECK(retry_delay(base, jitter, 11, 0.0) == 200ms * 512);
    }
    SECTION("attempts below 2 are treated as the first retry") {
        CHECK(retry_delay(base, jitter, 1, 0.0) == 200ms);
        CHECK(retry_delay(base, jitter, 0, 0.0) == 200ms);
    }
    SECTION("unit_random outside [0, 1] is clamped") {
        CHECK(retry_delay(base, jitter, 2, -3.0) == 200ms);
        CHECK(retry_delay(base, jitter, 2, 7.0) == 250ms);
    }
    SECTION("zero jitter and zero base") {
        CHECK(retry_delay(base, 0ms, 3, 0.9) == 400ms);
        CHECK(retry_delay(0ms, jitter, 3, 0.5) == 25ms);
        CHECK(retry_delay(0ms, 0ms, 3, 0.5) == 0ms);
    }
}

TEST_CASE("retry_delay does not overflow for huge attempt numbers", "[retry]") {
    const nanoseconds base = 200ms;
    const nanoseconds jitter = 50ms;
    const nanoseconds cap = retry_delay(base, 0ms, 32, 0.0); // exponent capped at 30
    CHECK(cap == 200ms * (std::int64_t{1} << 30));
    CHECK(retry_delay(base, 0ms, 33, 0.0) == cap);
    CHECK(retry_delay(base, 0ms, 1000, 0.0) == cap);
    CHECK(retry_delay(base, 0ms, std::numeric_limits<std::uint32_t>::max(), 0.0) == cap);
    CHECK(retry_delay(base, jitter, std::numeric_limits<std::uint32_t>::max(), 1.0) ==
          cap + jitter);
    CHECK(retry_delay(base, jitter, 100, 1.0) > 0ns);
}

TEST_CASE("retry_delay stays positive and monotonic for a large valid base", "[retry]") {
    // Config::validate accepts any non-negative retry_base_delay and retry_max up to 100, so
    // attempt 101 with a 10 s base is a valid configuration. 10 s x 2^30 exceeds int64 ns.
    const nanoseconds base = 10s;
    nanoseconds previous = retry_delay(base, 0ms, 2, 0.0);
    CHECK(previous == 10s);
    bool monotonic = true;
    for (std::uint32_t attempt = 3; attempt <= 101; ++attempt) {
        const nanoseconds d = retry_delay(base, 50ms, attempt, 1.0);
        if (d < previous)
            monotonic = false;
        previous = d;
    }
    CHECK(monotonic);
    CHECK(retry_delay(base, 50ms, 40, 1.0) >= base);
}

TEST_CASE("RetryTimers::take_due returns only due entries, earliest first", "[retry]") {
    ax::detail::RetryTimers timers;
    CHECK(timers.size() == 0);
    timers.add(500, 5);
    timers.add(100, 1);
    timers.add(300, 3);
    timers.add(200, 2);
    timers.add(400, 4);
    CHECK(timers.size() == 5);

    std::vector<std::uint32_t> out;
    timers.take_due(50, out);
    CHECK(out.empty());
    CHECK(timers.size() == 5);

    timers.take_due(300, out); // due time equal to now counts as due
    CHECK(out == std::vector<std::uint32_t>{1, 2, 3});
    CHECK(timers.size() == 2);

    // take_due appends; it does not clear `out`.
    timers.add(250, 9);
    timers.take_due(450, out);
    CHECK(out == std::vector<std::uint32_t>{1, 2, 3, 9, 4});
    CHECK(timers.size() == 1);

    timers.take_due(450, out);
    CHECK(out.size() == 5);
    timers.take_due(std::numeric_limits<std::int64_t>::max(), out);
    CHECK(out == std::vector<std::uint32_t>{1, 2, 3, 9, 4, 5});
    CHECK(timers.size() == 0);
}

TEST_CASE("RetryTimers::take_all empties the heap in due order", "[retry]") {
    ax::detail::RetryTimers timers;
    timers.add(30, 7);
    timers.add(-10, 8); // already overdue
    timers.add(1'000'000'000'000, 6);
    timers.add(20, 4);
    std::vector<std::uint32_t> out{99};
    timers.take_all(out);
    CHECK(out == std::vector<std::uint32_t>{99, 8, 4, 7, 6});
    CHECK(timers.size() == 0);
    out.clear();
    timers.take_all(out);
    CHECK(out.empty());
    timers.take_due(std::numeric_limits<std::int64_t>::max(), out);
    CHECK(out.empty());
}

TEST_CASE("Jitter yields numbers in [0, 1), reproducible per seed", "[retry]") {
    ax::detail::Jitter a(42);
    ax::detail::Jitter b(42);
    ax::detail::Jitter c(43);
    bool in_range = true;
    bool same = true;
    bool differs = false;
    double lo = 1.0;
    double hi = 0.0;
    for (int i = 0; i < 1000; ++i) {
        const double x = a();
        const double y = b();
        const double z = c();
        if (!(x >= 0.0 && x < 1.0))
            in_range = false;
        if (x != y)
            same = false;
        if (x != z)
            differs = true;
        lo = std::min(lo, x);
        hi = std::max(hi, x);
    }
    CHECK(in_range);
    CHECK(same);
    CHECK(differs);
    CHECK(lo < 0.05);
    CHECK(hi > 0.95);
}
