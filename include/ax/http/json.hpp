// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// Optional part (target ax::http, nlohmann-json from Debian nlohmann-json3-dev): never included
// by the core headers.
#include "../controller.hpp"
#include "../groups.hpp"
#include "../metrics.hpp"
#include "../task.hpp"

#include <chrono>
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>

/// A MetricsSnapshot as JSON (nlohmann-json), for `GET /snapshot.json` and the dashboard.
///
/// Field names are MetricsSnapshot's own; durations become seconds (a `_s` suffix: `std::chrono`
/// values are rendered as doubles), per-priority arrays become objects keyed "high", "normal",
/// "low", enums become their snake_case names (plus `reason_text` for the controller), and each
/// histogram carries its `upper_bounds_s` beside its per-bucket (not cumulative) `buckets`.
namespace ax::http {

namespace detail {

/// Seconds in a duration, as a double.
template <class Rep, class Period>
double json_seconds(std::chrono::duration<Rep, Period> d) noexcept {
    return std::chrono::duration<double>(d).count();
}

/// "closed", "open" or "half_open".
constexpr const char* breaker_state_name(BreakerState b) noexcept {
    switch (b) {
    case BreakerState::closed:
        return "closed";
    case BreakerState::open:
        return "open";
    case BreakerState::half_open:
        return "half_open";
    }
    return "closed";
}

/// {"high": a[0], "normal": a[1], "low": a[2]} of a per-priority array, each value mapped by f.
template <class Array, class F> nlohmann::json per_priority(const Array& a, F f) {
    nlohmann::json j = nlohmann::json::object();
    for (std::size_t p = 0; p < priority_count; ++p)
        j[std::string(to_string(static_cast<Priority>(p)))] = f(a[p]);
    return j;
}

} // namespace detail

/// A LatencyHistogram: `upper_bounds_s` (20 bounds), `buckets` (21 per-bucket counts, the last
/// one above the last bound, i.e. +Inf), `count` and `sum_s`.
inline nlohmann::json to_json(const LatencyHistogram& h) {
    nlohmann::json j = nlohmann::json::object();
    j["upper_bounds_s"] = LatencyHistogram::upper_bounds_s;
    j["buckets"] = h.buckets;
    j["count"] = h.count;
    j["sum_s"] = h.sum_s;
    return j;
}

/// ControllerInput, every field.
inline nlohmann::json to_json(const ControllerInput& in) {
    return {
        {"incoming_rate", in.incoming_rate},
        {"avg_duration_s", in.avg_duration_s},
        {"queue_length", in.queue_length},
        {"current_target", in.current_target},
        {"live_workers", in.live_workers},
        {"busy_workers", in.busy_workers},
        {"cpu_utilization", in.cpu_utilization},
        {"saturated", in.saturated},
        {"offered_rate", in.offered_rate},
        {"cpu_share", in.cpu_share},
        {"runqueue_share", in.runqueue_share},
        {"cores", in.cores},
        {"idle_cores", in.idle_cores},
        {"sample_window_s", in.sample_window_s},
        {"peak_busy_workers", in.peak_busy_workers},
        {"offered_total", in.offered_total},
        {"completed_total", in.completed_total},
        {"attempts_total", in.attempts_total},
        {"elapsed_s", in.elapsed_s},
    };
}

/// ControllerStats: policy, target, `reason` (controller_reason_name) and `reason_text`
/// (controller_reason_text), round counts, forecast and the last round's inputs.
inline nlohmann::json to_json(const ControllerStats& c) {
    return {
        {"policy", c.policy},
        {"target", c.target},
        {"reason", controller_reason_name(c.reason)},
        {"reason_text", controller_reason_text(c.reason)},
        {"rounds", c.rounds},
        {"changes", c.changes},
        {"direction_changes", c.direction_changes},
        {"forecast_rate", c.forecast_rate},
        {"inputs", to_json(c.inputs)},
    };
}

/// One 1-second window slot, with its derived `average_duration_s` and `average_queue_length`.
inline nlohmann::json to_json(const MetricsSlot& s) {
    return {
        {"incoming", s.incoming},
        {"completed", s.completed},
        {"failed", s.failed},
        {"rejected", s.rejected},
        {"total_duration_s", detail::json_seconds(s.total_duration)},
        {"average_duration_s", detail::json_seconds(s.average_duration())},
        {"queue_samples", s.queue_samples},
        {"queue_length_sum", s.queue_length_sum},
        {"queue_length_max", s.queue_length_max},
        {"average_queue_length", s.average_queue_length()},
    };
}

/// WorkerStats, every field.
inline nlohmann::json to_json(const WorkerStats& w) {
    return {
        {"current", w.current}, {"target", w.target},     {"busy", w.busy},
        {"idle", w.idle},       {"peak", w.peak},         {"created", w.created},
        {"orphans", w.orphans}, {"orphaned", w.orphaned},
    };
}

/// MetricsTotals, every field.
inline nlohmann::json to_json(const MetricsTotals& t) {
    return {
        {"submitted", t.submitted},
        {"rejected", t.rejected},
        {"refused_other", t.refused_other},
        {"attempts_succeeded", t.attempts_succeeded},
        {"attempts_failed", t.attempts_failed},
        {"succeeded", t.succeeded},
        {"dead_lettered", t.dead_lettered},
        {"cancelled", t.cancelled},
        {"retries", t.retries},
        {"timeouts", t.timeouts},
        {"hook_failures", t.hook_failures},
        {"dead_letters_evicted", t.dead_letters_evicted},
        {"starvation_picks", t.starvation_picks},
        {"takeovers", t.takeovers},
        {"orphans_refused", t.orphans_refused},
        {"subtasks", t.subtasks},
        {"destructor_exceptions", t.destructor_exceptions},
    };
}

/// One group: id, name (any bytes; dump with snapshot_json_text() or
/// `error_handler_t::replace`), limit, active, waiting, queued, held, breaker_enabled, `breaker`
/// ("closed", "open", "half_open"), recent_attempts, recent_failures.
inline nlohmann::json to_json(const GroupSnapshot& g) {
    return {
        {"id", g.id.value},
        {"name", g.name},
        {"limit", g.stats.limit},
        {"active", g.stats.active},
        {"waiting", g.stats.waiting},
        {"queued", g.stats.queued},
        {"held", g.stats.held},
        {"breaker_enabled", g.stats.breaker_enabled},
        {"breaker", detail::breaker_state_name(g.stats.breaker)},
        {"recent_attempts", g.stats.recent_attempts},
        {"recent_failures", g.stats.recent_failures},
    };
}

/// Every field of a snapshot: queue_length / oldest_queued_age_s per priority, queue totals,
/// dead_letters, workers, the window's `slots` (oldest first, the one being filled last), totals,
/// rates, groups, the queue_wait and run_time histograms, and the controller.
inline nlohmann::json to_json(const MetricsSnapshot& m) {
    nlohmann::json j = nlohmann::json::object();
    j["queue_length"] = detail::per_priority(m.queue_length, [](std::uint32_t n) { return n; });
    j["queue_length_total"] = m.queue_length_total;
    j["queue_capacity"] = m.queue_capacity;
    j["waiting_retry"] = m.waiting_retry;
    j["scheduled"] = m.scheduled;
    j["subtasks_queued"] = m.subtasks_queued;
    j["pending_joins"] = m.pending_joins;
    j["dead_letters"] = m.dead_letters;
    j["oldest_queued_age_s"] = detail::per_priority(
        m.oldest_queued_age, [](std::chrono::nanoseconds d) { return detail::json_seconds(d); });
    j["workers"] = to_json(m.workers);
    nlohmann::json slots = nlohmann::json::array();
    for (const auto& s : m.slots)
        slots.push_back(to_json(s));
    j["slots"] = std::move(slots);
    j["totals"] = to_json(m.totals);
    j["drain_rate"] = m.drain_rate;
    j["incoming_rate"] = m.incoming_rate;
    j["average_duration_s"] = detail::json_seconds(m.average_duration);
    j["cpu_utilization"] = m.cpu_utilization;
    nlohmann::json groups = nlohmann::json::array();
    for (const auto& g : m.groups)
        groups.push_back(to_json(g));
    j["groups"] = std::move(groups);
    j["queue_wait"] = to_json(m.queue_wait);
    j["run_time"] = to_json(m.run_time);
    j["controller"] = to_json(m.controller);
    return j;
}

/// to_json(m) as compact text. Strings that are not valid UTF-8 (a group or policy name may hold
/// any bytes) have each invalid byte replaced by U+FFFD instead of throwing.
inline std::string snapshot_json_text(const MetricsSnapshot& m) {
    return to_json(m).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

/// The Content-Type to serve snapshot_json_text() with.
inline constexpr const char* json_content_type = "application/json; charset=utf-8";

} // namespace ax::http
