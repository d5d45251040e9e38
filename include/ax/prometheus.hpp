// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include "controller.hpp"
#include "groups.hpp"
#include "metrics.hpp"
#include "task.hpp"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

/// Renders a MetricsSnapshot in the Prometheus text exposition format 0.0.4 (std only), for a
/// `/metrics` endpoint: counters end in `_total`, durations are in seconds, every family has
/// `# HELP` and `# TYPE`, label values are escaped and group names made valid UTF-8.
namespace ax {

/// The Content-Type header to serve to_prometheus()'s output with.
inline constexpr std::string_view prometheus_content_type =
    "text/plain; version=0.0.4; charset=utf-8";

/// How to_prometheus() names and labels its series.
struct PrometheusOptions {
    /// Metric name prefix (default "ax": `ax_tasks_submitted_total`); characters not allowed in
    /// a metric name become '_', "" gives unprefixed names.
    std::string_view prefix = "ax";
    /// When not empty, every sample carries `scheduler="<this>"`, telling apart several
    /// schedulers in one process.
    std::string_view scheduler = {};
};

namespace detail {

/// Appends `s` with every character outside [a-zA-Z0-9_:] replaced by '_' (a leading digit
/// gets a '_' in front), so the result is a valid metric name fragment.
inline void prom_append_name_part(std::string& out, std::string_view s, bool leading) {
    for (std::size_t i = 0; i < s.size(); ++i) {
        const char c = s[i];
        const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
        const bool digit = c >= '0' && c <= '9';
        if (leading && i == 0 && digit)
            out += '_';
        out += (alpha || digit) ? c : '_';
    }
}

/// Length of the valid UTF-8 sequence starting at s[i], or 0 if the bytes there are not one
/// (overlong forms, surrogates and code points above U+10FFFF are invalid).
inline std::size_t prom_utf8_length(std::string_view s, std::size_t i) noexcept {
    const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[i + k]); };
    const auto cont = [&](std::size_t k) { return i + k < s.size() && (b(k) & 0xC0) == 0x80; };
    const unsigned char c = b(0);
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        return cont(1) ? 2 : 0;
    if (c >= 0xE0 && c <= 0xEF) {
        if (!cont(1) || !cont(2))
            return 0;
        if ((c == 0xE0 && b(1) < 0xA0) || (c == 0xED && b(1) > 0x9F))
            return 0;
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (!cont(1) || !cont(2) || !cont(3))
            return 0;
        if ((c == 0xF0 && b(1) < 0x90) || (c == 0xF4 && b(1) > 0x8F))
            return 0;
        return 4;
    }
    return 0;
}

/// Appends `v` as the inside of a quoted label value: backslash, double quote and newline are
/// escaped (`\\`, `\"`, `\n`), other control bytes become '_', and bytes that are not valid
/// UTF-8 become U+FFFD, so any group name yields a value Prometheus accepts.
inline void prom_append_label_value(std::string& out, std::string_view v) {
    for (std::size_t i = 0; i < v.size();) {
        const char c = v[i];
        if (c == '\\') {
            out += "\\\\";
        } else if (c == '"') {
            out += "\\\"";
        } else if (c == '\n') {
            out += "\\n";
        } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) {
            out += '_';
        } else {
            const std::size_t n = prom_utf8_length(v, i);
            if (n == 0) {
                out += "\xEF\xBF\xBD";
                ++i;
                continue;
            }
            out.append(v.substr(i, n));
            i += n;
            continue;
        }
        ++i;
    }
}

/// Appends an unsigned integer sample value.
inline void prom_append_value(std::string& out, std::uint64_t v) {
    char buf[24];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    out.append(buf, r.ptr);
}

/// Appends a floating-point sample value: shortest round-trip form, NaN / +Inf / -Inf spelled
/// as Prometheus does.
inline void prom_append_value(std::string& out, double v) {
    if (std::isnan(v)) {
        out += "NaN";
        return;
    }
    if (std::isinf(v)) {
        out += v > 0 ? "+Inf" : "-Inf";
        return;
    }
    char buf[32];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    if (r.ec == std::errc{})
        out.append(buf, r.ptr);
    else
        out += '0';
}

/// One label of a sample.
struct PromLabel {
    std::string_view name;
    std::string_view value;
};

/// Writes families one after another: begin() emits `# HELP` and `# TYPE`, sample() the series.
class PromWriter {
  public:
    PromWriter(std::string& out, const PrometheusOptions& o) : out_(out), opt_(o) {}

    /// Starts family `name` (without prefix) of `type` ("counter" / "gauge" / "histogram").
    void begin(std::string_view name, std::string_view type, std::string_view help) {
        name_ = name;
        out_ += "# HELP ";
        append_name();
        out_ += ' ';
        for (const char c : help) { // HELP escapes backslash and newline only
            if (c == '\\')
                out_ += "\\\\";
            else if (c == '\n')
                out_ += "\\n";
            else
                out_ += c;
        }
        out_ += "\n# TYPE ";
        append_name();
        out_ += ' ';
        out_ += type;
        out_ += '\n';
    }

    /// One sample of the current family.
    template <class V> void sample(std::initializer_list<PromLabel> labels, V value) {
        sample_suffixed({}, labels, value);
    }

    /// One sample of the current family whose name has `suffix` appended (a histogram's
    /// `_bucket`, `_sum`, `_count`).
    template <class V>
    void sample_suffixed(std::string_view suffix, std::initializer_list<PromLabel> labels,
                         V value) {
        append_name();
        out_ += suffix;
        const bool any = !opt_.scheduler.empty() || labels.size() != 0;
        if (any) {
            out_ += '{';
            bool first = true;
            const auto label = [&](std::string_view n, std::string_view v) {
                if (!first)
                    out_ += ',';
                first = false;
                out_ += n;
                out_ += "=\"";
                prom_append_label_value(out_, v);
                out_ += '"';
            };
            if (!opt_.scheduler.empty())
                label("scheduler", opt_.scheduler);
            for (const PromLabel& l : labels)
                label(l.name, l.value);
            out_ += '}';
        }
        out_ += ' ';
        if constexpr (std::is_floating_point_v<V>)
            prom_append_value(out_, static_cast<double>(value));
        else
            prom_append_value(out_, static_cast<std::uint64_t>(value));
        out_ += '\n';
    }

    /// A histogram family: cumulative `_bucket{le}` samples (the bounds, then +Inf), `_sum`
    /// and `_count`.
    void histogram(std::string_view name, std::string_view help, const LatencyHistogram& h) {
        begin(name, "histogram", help);
        std::uint64_t cumulative = 0;
        std::string le;
        for (std::size_t i = 0; i <= LatencyHistogram::bound_count; ++i) {
            cumulative += h.buckets[i];
            le.clear();
            if (i < LatencyHistogram::bound_count)
                prom_append_value(le, LatencyHistogram::upper_bounds_s[i]);
            else
                le = "+Inf";
            sample_suffixed("_bucket", {{"le", le}}, cumulative);
        }
        sample_suffixed("_sum", {}, h.sum_s);
        // The buckets, not h.count: the +Inf bucket and _count must agree.
        sample_suffixed("_count", {}, cumulative);
    }

    /// A family with one unlabelled sample.
    template <class V>
    void single(std::string_view name, std::string_view type, std::string_view help, V value) {
        begin(name, type, help);
        sample({}, value);
    }

  private:
    void append_name() {
        if (!opt_.prefix.empty()) {
            prom_append_name_part(out_, opt_.prefix, true);
            out_ += '_';
        }
        prom_append_name_part(out_, name_, opt_.prefix.empty());
    }

    std::string& out_;
    const PrometheusOptions& opt_;
    std::string_view name_;
};

/// `v` made valid UTF-8 (invalid bytes become U+FFFD) with control bytes other than newline
/// replaced by '_'; the writer escapes the result (prom_append_label_value).
inline std::string prom_sanitise_label_value(std::string_view v) {
    std::string out;
    out.reserve(v.size());
    for (std::size_t i = 0; i < v.size();) {
        const auto c = static_cast<unsigned char>(v[i]);
        if (c == '\n' || (c >= 0x20 && c != 0x7F && c < 0x80)) {
            out += v[i++];
        } else if (c < 0x80) {
            out += '_';
            ++i;
        } else if (const std::size_t n = prom_utf8_length(v, i); n != 0) {
            out.append(v.substr(i, n));
            i += n;
        } else {
            out += "\xEF\xBF\xBD";
            ++i;
        }
    }
    return out;
}

/// The label values groups are exposed under, in snapshot order: each name sanitised
/// (prom_sanitise_label_value), "#<id>" for an unnamed group, and "#<id>" appended to a name
/// an earlier group already produced (possible only after invalid bytes were replaced), so no
/// two series collide.
inline std::vector<std::string> prom_group_labels(const std::vector<GroupSnapshot>& groups) {
    std::vector<std::string> out;
    out.reserve(groups.size());
    for (const GroupSnapshot& g : groups) {
        std::string v = prom_sanitise_label_value(g.name);
        if (v.empty() || std::find(out.begin(), out.end(), v) != out.end()) {
            v += '#';
            prom_append_value(v, static_cast<std::uint64_t>(g.id.value));
        }
        out.push_back(std::move(v));
    }
    return out;
}

} // namespace detail

/// Appends the exposition of `m` to `out` (reuse one string across scrapes to avoid
/// reallocating). Families, with the default prefix "ax":
/// counters `ax_tasks_submitted_total`, `ax_subtasks_submitted_total`,
/// `ax_submits_rejected_total{reason}`, `ax_attempts_succeeded_total`, `ax_attempts_failed_total`,
/// `ax_tasks_succeeded_total`, `ax_tasks_dead_lettered_total`, `ax_tasks_cancelled_total`,
/// `ax_retries_total`, `ax_attempt_timeouts_total`, `ax_takeovers_total`,
/// `ax_orphans_refused_total`, `ax_workers_created_total`, `ax_workers_orphaned_total`,
/// `ax_hook_failures_total`, `ax_dead_letters_evicted_total`, `ax_starvation_picks_total`,
/// `ax_destructor_exceptions_total`; gauges for the queue (`ax_queue_length{priority}`,
/// `ax_queue_oldest_age_seconds{priority}`, capacity, waiting retries, scheduled (delayed) tasks,
/// subtasks, joins, dead letters), the workers (current, target, busy, idle, peak, orphans), the
/// window (rates, mean attempt duration in seconds, CPU ratio); histograms
/// `ax_task_queue_wait_seconds` and `ax_task_run_seconds` (MetricsSnapshot::queue_wait / run_time);
/// the controller
/// (`ax_controller_info{policy}`, `ax_controller_target_workers`, `ax_controller_reason{reason}`
/// as a state set: 1 for the last decision's reason, 0 for every other, its rounds / changes /
/// direction changes counters, forecast rate and last inputs); and per group
/// (`ax_group_limit{group}`, active, waiting, queued, held, breaker enabled / state / recent
/// attempts and failures).
inline void append_prometheus(std::string& out, const MetricsSnapshot& m,
                              const PrometheusOptions& options = {}) {
    detail::PromWriter w(out, options);
    const MetricsTotals& t = m.totals;
    const char* const counter = "counter";
    const char* const gauge = "gauge";

    w.single("tasks_submitted_total", counter, "Tasks admitted since start (subtasks included).",
             t.submitted);
    w.single("subtasks_submitted_total", counter,
             "Subtasks admitted through TaskContext::submit or when_all since start.", t.subtasks);
    w.begin("submits_rejected_total", counter,
            "Submits refused since start, by reason (backpressure: queue full or busy; other: "
            "shutting down or invalid options).");
    w.sample({{"reason", "backpressure"}}, t.rejected);
    w.sample({{"reason", "other"}}, t.refused_other);
    w.single("attempts_succeeded_total", counter, "Attempts that returned since start.",
             t.attempts_succeeded);
    w.single("attempts_failed_total", counter,
             "Attempts that threw or timed out since start (each retry counts).",
             t.attempts_failed);
    w.single("tasks_succeeded_total", counter, "Tasks that ended succeeded since start.",
             t.succeeded);
    w.single("tasks_dead_lettered_total", counter,
             "Tasks that ended dead-lettered (retries exhausted or permanent error) since start.",
             t.dead_lettered);
    w.single("tasks_cancelled_total", counter, "Tasks that ended cancelled since start.",
             t.cancelled);
    w.single("retries_total", counter, "Retries scheduled since start.", t.retries);
    w.single("attempt_timeouts_total", counter, "Attempts the watchdog timed out since start.",
             t.timeouts);
    w.single("takeovers_total", counter,
             "Timed-out attempts ended by the watchdog while their body still ran.", t.takeovers);
    w.single("orphans_refused_total", counter,
             "Timed-out bodies left holding their worker because max_orphans were stuck.",
             t.orphans_refused);
    w.single("workers_created_total", counter, "Worker threads created since start.",
             m.workers.created);
    w.single("workers_orphaned_total", counter,
             "Worker threads set aside in a stuck body since start.", m.workers.orphaned);
    w.single("hook_failures_total", counter, "Hooks that threw (contained) since start.",
             t.hook_failures);
    w.single("dead_letters_evicted_total", counter,
             "Dead letters dropped by the bounded list since start.", t.dead_letters_evicted);
    w.single("starvation_picks_total", counter,
             "Dispatches forced by the anti-starvation max_wait since start.", t.starvation_picks);
    w.single("destructor_exceptions_total", counter,
             "Exceptions thrown by task callables' destructors, contained (process-wide).",
             t.destructor_exceptions);

    w.begin("queue_length", gauge, "Tasks queued, by priority lane.");
    for (std::size_t p = 0; p < priority_count; ++p)
        w.sample({{"priority", to_string(static_cast<Priority>(p))}}, m.queue_length[p]);
    w.begin("queue_oldest_age_seconds", gauge,
            "Age of the oldest task queued in each priority lane, in seconds (0: none queued).");
    for (std::size_t p = 0; p < priority_count; ++p)
        w.sample({{"priority", to_string(static_cast<Priority>(p))}},
                 std::chrono::duration<double>(m.oldest_queued_age[p]).count());
    w.single("queue_capacity", gauge, "Capacity of the priority queue (all lanes).",
             m.queue_capacity);
    w.single("tasks_waiting_retry", gauge, "Tasks waiting for their retry.", m.waiting_retry);
    w.single("tasks_scheduled", gauge, "Tasks admitted with a delay or run_at, not yet due.",
             m.scheduled);
    w.single("subtasks_queued", gauge, "Subtasks waiting in the subtask lane.", m.subtasks_queued);
    w.single("pending_joins", gauge, "when_all joins waiting for the tasks they depend on.",
             m.pending_joins);
    w.single("dead_letters", gauge, "Entries held in the dead-letter list.", m.dead_letters);

    w.single("workers_current", gauge, "Worker threads alive and serving.", m.workers.current);
    w.single("workers_target", gauge, "Worker threads the concurrency controller asks for.",
             m.workers.target);
    w.single("workers_busy", gauge, "Worker threads running a task.", m.workers.busy);
    w.single("workers_idle", gauge, "Worker threads waiting for work.", m.workers.idle);
    w.single("workers_peak", gauge, "Highest number of worker threads alive since start.",
             m.workers.peak);
    w.single("workers_orphans", gauge,
             "Threads stuck in a timed-out body that ignores its stop token, set aside.",
             m.workers.orphans);

    w.single("drain_rate_per_second", gauge,
             "Finished attempts per second over the sliding window.", m.drain_rate);
    w.single("incoming_rate_per_second", gauge, "Admissions per second over the sliding window.",
             m.incoming_rate);
    w.single("attempt_duration_average_seconds", gauge,
             "Mean attempt duration over the sliding window, in seconds.",
             std::chrono::duration<double>(m.average_duration).count());
    std::uint32_t queue_max = 0;
    for (const MetricsSlot& s : m.slots)
        queue_max = std::max(queue_max, s.queue_length_max);
    w.single("queue_length_window_max", gauge,
             "Largest sampled queue length over the sliding window.", queue_max);
    w.single("cpu_utilization_ratio", gauge, "Share of all cores the process used recently (0..1).",
             m.cpu_utilization);

    w.histogram("task_queue_wait_seconds",
                "Time from admission (or a retry's re-queue) to the start of each attempt, in "
                "seconds; _count is the attempts started (empty with Config::latency_histograms "
                "off).",
                m.queue_wait);
    w.histogram("task_run_seconds",
                "Run time of each finished attempt, in seconds (empty with "
                "Config::latency_histograms off).",
                m.run_time);

    const ControllerStats& c = m.controller;
    if (!c.policy.empty()) {
        w.begin("controller_info", gauge, "The concurrency controller policy in use (always 1).");
        w.sample({{"policy", c.policy}}, 1U);
    }
    w.single("controller_target_workers", gauge, "The worker target the controller set last.",
             c.target);
    w.begin("controller_reason", gauge,
            "Why the controller set its target: 1 for the last decision's reason, 0 for the "
            "others.");
    for (std::size_t r = 0; r < controller_reason_count; ++r) {
        const auto reason = static_cast<ControllerReason>(r);
        w.sample({{"reason", controller_reason_name(reason)}}, c.reason == reason ? 1U : 0U);
    }
    w.single("controller_rounds_total", counter, "Controller rounds run since start.", c.rounds);
    w.single("controller_changes_total", counter,
             "Controller rounds that changed the worker target since start.", c.changes);
    w.single("controller_direction_changes_total", counter,
             "Target changes that reversed the direction of the previous change since start.",
             c.direction_changes);
    w.single("controller_forecast_rate_per_second", gauge,
             "Arrivals per second the forecaster expects over the next round (0 without one).",
             c.forecast_rate);
    w.single("controller_offered_rate_per_second", gauge,
             "Submits per second, refused ones included, at the controller's last round.",
             c.inputs.offered_rate);
    w.single("controller_cpu_share_ratio", gauge,
             "Share of the workers' busy time spent on a CPU at the last round (0..1).",
             c.inputs.cpu_share);
    w.single("controller_runqueue_share_ratio", gauge,
             "Share of the workers' busy time spent waiting for a CPU at the last round (0..1).",
             c.inputs.runqueue_share);
    w.single("controller_cores", gauge, "Cores the process may run on, as the controller saw.",
             c.inputs.cores);
    w.single("controller_idle_cores", gauge,
             "Spare cores of the machine over the controller's last sample (negative: unknown).",
             c.inputs.idle_cores);

    if (m.groups.empty())
        return;
    const std::vector<std::string> names = detail::prom_group_labels(m.groups);
    const auto per_group = [&](std::string_view name, std::string_view help, auto value_of) {
        w.begin(name, gauge, help);
        for (std::size_t i = 0; i < m.groups.size(); ++i)
            w.sample({{"group", names[i]}}, value_of(m.groups[i].stats));
    };
    per_group("group_limit", "Concurrent tasks a group may run (0: no limit).",
              [](const GroupStats& s) { return s.limit; });
    per_group("group_active", "Tasks of a group dispatched and not yet ended.",
              [](const GroupStats& s) { return s.active; });
    per_group("group_waiting", "Tasks of a group held back by its limit or breaker.",
              [](const GroupStats& s) { return s.waiting; });
    per_group("group_queued",
              "Tasks of a group queued (bounded by group_queue_capacity), parked ones included.",
              [](const GroupStats& s) { return s.queued; });
    per_group("group_held", "Tasks of a group counted outside the shared queue (parked once).",
              [](const GroupStats& s) { return s.held; });
    per_group("group_breaker_enabled", "1 if the group has a circuit breaker.",
              [](const GroupStats& s) { return s.breaker_enabled ? 1U : 0U; });
    w.begin("group_breaker_state", gauge,
            "Circuit breaker state of a group: 1 for the current state, 0 for the others.");
    for (std::size_t i = 0; i < m.groups.size(); ++i) {
        const BreakerState b = m.groups[i].stats.breaker;
        w.sample({{"group", names[i]}, {"state", "closed"}}, b == BreakerState::closed ? 1U : 0U);
        w.sample({{"group", names[i]}, {"state", "open"}}, b == BreakerState::open ? 1U : 0U);
        w.sample({{"group", names[i]}, {"state", "half_open"}},
                 b == BreakerState::half_open ? 1U : 0U);
    }
    per_group("group_recent_attempts", "Attempts of a group the breaker counted in this window.",
              [](const GroupStats& s) { return s.recent_attempts; });
    per_group("group_recent_failures", "Failed attempts of a group counted in this window.",
              [](const GroupStats& s) { return s.recent_failures; });
}

/// The exposition of `m` as a new string, named and labelled per `options`.
[[nodiscard]] inline std::string to_prometheus(const MetricsSnapshot& m,
                                               const PrometheusOptions& options) {
    std::string out;
    out.reserve(4096 + m.groups.size() * 512);
    append_prometheus(out, m, options);
    return out;
}

/// The exposition of `m` as a new string, every metric name starting with `prefix` + '_'.
[[nodiscard]] inline std::string to_prometheus(const MetricsSnapshot& m,
                                               std::string_view prefix = "ax") {
    return to_prometheus(m, PrometheusOptions{.prefix = prefix});
}

} // namespace ax
