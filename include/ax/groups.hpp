// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include "task.hpp"

#include <chrono>
#include <cstdint>
#include <string>

/// The public side of concurrency groups: their breaker settings and what group_stats() and
/// MetricsSnapshot::groups report. The state behind them is in detail/groups.hpp.
namespace ax {

/// State of a group's circuit breaker.
enum class BreakerState : std::uint8_t {
    closed, ///< Tasks flow (up to the group limit).
    /// Too many recent failures: for the cool-down, submits to the group are refused with
    /// Errc::breaker_open and the tasks it already held stay queued (not failed, not retried).
    open,
    half_open, ///< Cool-down over: a few probe tasks run; success closes, failure re-opens.
};

/// Per-group circuit breaker settings (Scheduler::set_group_breaker).
struct BreakerOptions {
    /// Opens when failures / attempts reaches this ratio (default 0.5)...
    double failure_ratio = 0.5;
    /// ...over at least this many attempts in the current metrics window (default 20).
    std::uint32_t min_attempts = 20;
    /// How long the group's tasks stay held once open (default 5 s).
    std::chrono::nanoseconds cooldown = std::chrono::seconds(5);
    /// Tasks let through while half-open (default 1).
    std::uint32_t probes = 1;
};

/// A concurrency group's state (Scheduler::group_stats, MetricsSnapshot::groups).
struct GroupStats {
    std::uint32_t limit = 0;   ///< Concurrent tasks allowed (0: no limit).
    std::uint32_t active = 0;  ///< Tasks of the group dispatched and not yet ended.
    std::uint32_t waiting = 0; ///< Tasks held back by the limit or the breaker (still queued).
    /// The group's tasks queued (admitted or re-queued, not yet started): what its own bound,
    /// Config::group_queue_capacity, limits.
    std::uint32_t queued = 0;
    /// Of those, the ones counted out of the shared queue (set aside by the limit or the breaker
    /// once: `waiting`, plus those let back in and not yet started).
    std::uint32_t held = 0;
    bool breaker_enabled = false;
    BreakerState breaker = BreakerState::closed;
    std::uint32_t recent_attempts = 0; ///< Attempts the breaker counted in this window.
    std::uint32_t recent_failures = 0;
};

/// One registered group in a metrics snapshot.
struct GroupSnapshot {
    GroupId id{};
    std::string name;
    GroupStats stats;
};

} // namespace ax
