// Unit tests for the watchdog's rule (ax/detail/watchdog.hpp) on ax::ManualClock times: when a
// running attempt times out, and when it is orphaned.
#include <ax/clock.hpp>
#include <ax/detail/watchdog.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>

using ax::ManualClock;
using ax::detail::watchdog_verdict;
using ax::detail::WatchdogVerdict;
using namespace std::chrono_literals;

namespace {
std::int64_t ns(ManualClock::time_point t) {
    return t.time_since_epoch().count();
}
constexpr auto running = static_cast<std::uint32_t>(ax::TaskState::running);
constexpr std::int64_t grace = std::chrono::nanoseconds(50ms).count();
} // namespace

TEST_CASE("Watchdog: a quiet attempt times out after its timeout, then orphans after grace",
          "[watchdog]") {
    const auto start = ns(ManualClock::now());
    ManualClock::advance(100ms);
    CHECK(watchdog_verdict(running, 100, start, ns(ManualClock::now()), grace) ==
          WatchdogVerdict::none); // exactly at the limit: not over it
    ManualClock::advance(1ms);
    CHECK(watchdog_verdict(running, 100, start, ns(ManualClock::now()), grace) ==
          WatchdogVerdict::time_out);
    const std::uint32_t flagged = running | ax::detail::timed_out_bit;
    CHECK(watchdog_verdict(flagged, 100, start, ns(ManualClock::now()), grace) ==
          WatchdogVerdict::none); // stop requested, grace running
    ManualClock::advance(50ms);
    CHECK(watchdog_verdict(flagged, 100, start, ns(ManualClock::now()), grace) ==
          WatchdogVerdict::orphan);
}

TEST_CASE("Watchdog: a heartbeat restarts the timeout", "[watchdog]") {
    const auto start = ns(ManualClock::now());
    ManualClock::advance(90ms);
    const auto beat = ns(ManualClock::now());
    ManualClock::advance(90ms);
    CHECK(watchdog_verdict(running, 100, start, ns(ManualClock::now()), grace) ==
          WatchdogVerdict::time_out);
    CHECK(watchdog_verdict(running, 100, beat, ns(ManualClock::now()), grace) ==
          WatchdogVerdict::none);
}

TEST_CASE("Watchdog: no timeout, not running, or a cancel leaves the attempt alone", "[watchdog]") {
    const auto start = ns(ManualClock::now());
    ManualClock::advance(10s);
    const auto now = ns(ManualClock::now());
    CHECK(watchdog_verdict(running, 0, start, now, grace) == WatchdogVerdict::none);
    CHECK(watchdog_verdict(static_cast<std::uint32_t>(ax::TaskState::waiting_retry), 100, start,
                           now, grace) == WatchdogVerdict::none);
    // A cancelled attempt is already asked to stop: no timeout on top, and no orphaning (the
    // cancel, not the watchdog, owns its ending).
    CHECK(watchdog_verdict(running | ax::detail::cancel_requested_bit, 100, start, now, grace) ==
          WatchdogVerdict::none);
    // The worker has the outcome and is concluding: no timeout (it would be reported after the
    // attempt's own events) and no orphaning (the body has returned).
    CHECK(watchdog_verdict(running | ax::detail::concluding_bit, 100, start, now, grace) ==
          WatchdogVerdict::none);
    CHECK(watchdog_verdict(running | ax::detail::concluding_bit | ax::detail::timed_out_bit, 100,
                           start, now, grace) == WatchdogVerdict::none);
}
