// ax::pg — distributed mode on PostgreSQL. SPDX-License-Identifier: MIT
#pragma once

#include "node_options.hpp"
#include "types.hpp"

#include <array>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

/// The distributed mode's figures as compact JSON text, std-only (no nlohmann), for
/// ax::http::MetricsServerOptions::extra_json (the dashboard shows them in its "Extra"
/// section), which lets ax::http stay free of libpq:
///
///     ax::http::MetricsServerOptions o;
///     o.extra_metrics = [&](std::string& body) { ax::pg::append_prometheus(body, node.stats()); };
///     o.extra_json = [&] { return "{\"node\":" + ax::pg::to_json_text(node.stats()) + "}"; };
///
/// Counters end in `_total` (the dashboard also shows their rate per second: per-node
/// throughput is tasks_finished_total's).
namespace ax::pg {

namespace detail {

/// Appends `s` as a JSON string: quotes, backslashes and control characters escaped; other
/// bytes copied as they are.
inline void json_string(std::string& out, std::string_view s) {
    out += '"';
    for (const char ch : s) {
        const auto c = static_cast<unsigned char>(ch);
        if (c == '"' || c == '\\') {
            out += '\\';
            out += ch;
        } else if (c < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
            out += buf;
        } else {
            out += ch;
        }
    }
    out += '"';
}

inline void json_number(std::string& out, std::int64_t v) {
    out += std::to_string(v);
}
inline void json_number(std::string& out, std::uint64_t v) {
    out += std::to_string(v);
}
inline void json_number(std::string& out, std::uint32_t v) {
    out += std::to_string(v);
}
inline void json_number(std::string& out, std::int32_t v) {
    out += std::to_string(v);
}
/// Non-finite doubles become null (JSON has no NaN or infinity).
inline void json_number(std::string& out, double v) {
    if (!std::isfinite(v)) {
        out += "null";
        return;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", v);
    out += buf;
}

/// Builds one JSON object: key(), then a value; commas placed for the caller.
class JsonObject {
  public:
    explicit JsonObject(std::string& out) : out_(out) { out_ += '{'; }
    JsonObject(const JsonObject&) = delete;
    JsonObject& operator=(const JsonObject&) = delete;
    ~JsonObject() { out_ += '}'; }
    std::string& key(std::string_view k) {
        if (!first_)
            out_ += ',';
        first_ = false;
        json_string(out_, k);
        out_ += ':';
        return out_;
    }
    template <class T> void number(std::string_view k, T v) { json_number(key(k), v); }
    /// The value, or null when there is none.
    template <class T> void number(std::string_view k, const std::optional<T>& v) {
        if (v)
            json_number(key(k), *v);
        else
            key(k) += "null";
    }
    void boolean(std::string_view k, bool v) { key(k) += v ? "true" : "false"; }

  private:
    std::string& out_;
    bool first_ = true;
};

} // namespace detail

/// One node's counters (Node::stats()) as a JSON object: node_id, claims_total,
/// claim_batches_total, mean_batch_size (tasks claimed / batches; 0 before the first batch),
/// last_batch_size, tasks_held, tasks_claimed_total, tasks_finished_total (succeeded + failed
/// + cancelled: its rate is the node's throughput), succeeded_total, failed_total,
/// cancelled_total, released_total, reconnects_total, reclaimed_batches_total,
/// reclaimed_tasks_total, checksum_mismatches_total, lease_renewals_total, vacuums_total,
/// round_trips_total.
[[nodiscard]] inline std::string to_json_text(const NodeStats& s) {
    std::string out;
    {
        detail::JsonObject o(out);
        const std::uint64_t claimed = s.claimed[0] + s.claimed[1] + s.claimed[2];
        o.number("node_id", s.node_id);
        o.number("claims_total", s.claims);
        o.number("claim_batches_total", s.batches);
        o.number("mean_batch_size",
                 s.batches == 0 ? 0.0
                                : static_cast<double>(claimed) / static_cast<double>(s.batches));
        o.number("last_batch_size", s.last_batch);
        o.number("tasks_held", s.depth);
        o.number("tasks_claimed_total", claimed);
        o.number("tasks_finished_total", s.succeeded + s.failed + s.cancelled);
        o.number("succeeded_total", s.succeeded);
        o.number("failed_total", s.failed);
        o.number("cancelled_total", s.cancelled);
        o.number("released_total", s.released);
        o.number("reconnects_total", s.reconnects);
        o.number("reclaimed_batches_total", s.reclaimed_batches);
        o.number("reclaimed_tasks_total", s.reclaimed_tasks);
        o.number("checksum_mismatches_total", s.checksum_mismatches);
        o.number("lease_renewals_total", s.lease_renewals);
        o.number("vacuums_total", s.vacuums);
        o.number("round_trips_total", s.round_trips);
    }
    return out;
}

/// The cluster (Client::status()) as a JSON object: pending, scheduled, claimed, waiting (flow
/// tasks waiting for their dependencies; all priorities), dead_letters, oldest_pending_age_s,
/// unclaimable_tasks (tasks no live node can take), unclaimable (an object: "kind [tags]" ->
/// count), nodes (an object: node id -> its lease_left_s, batches and tasks), the schema's
/// reclaimed_batches_total, reclaimed_tasks_total and checksum_mismatches_total, paused (an object:
/// "kind K" or "lane L" -> seconds since it was paused; empty when nothing is), and limits (an
/// object: each limited group (Client::set_limit) -> its max_running (null: no concurrency limit),
/// per_key, rate_n (null: no rate limit), rate_period_s, running, queued, keys and next_slot_s
/// (seconds until a full rate window ends; null when none is full); empty when no group is
/// limited).
[[nodiscard]] inline std::string to_json_text(const Status& s) {
    std::string out;
    {
        detail::JsonObject o(out);
        const auto sum = [](const std::array<std::int64_t, 3>& a) { return a[0] + a[1] + a[2]; };
        o.number("pending", sum(s.counts.pending));
        o.number("scheduled", sum(s.counts.scheduled));
        o.number("claimed", sum(s.counts.claimed));
        o.number("waiting", sum(s.counts.waiting));
        o.number("dead_letters", s.counts.dead_letters);
        o.number("oldest_pending_age_s", s.oldest_pending_age_s);
        o.number("unclaimable_tasks", s.unclaimable_total);
        {
            detail::JsonObject u(o.key("unclaimable"));
            for (const auto& [reason, n] : s.unclaimable)
                u.number(reason, n);
        }
        {
            detail::JsonObject ns(o.key("nodes"));
            for (const NodeInfo& n : s.nodes) {
                detail::JsonObject one(ns.key(std::to_string(n.id)));
                one.number("lease_left_s", n.lease_left_s);
                one.number("batches", n.batches);
                one.number("tasks", n.tasks);
            }
        }
        o.number("reclaimed_batches_total", s.reclaimed_batches);
        o.number("reclaimed_tasks_total", s.reclaimed_tasks);
        o.number("checksum_mismatches_total", s.checksum_mismatches);
        {
            detail::JsonObject p(o.key("paused"));
            for (const PauseInfo& x : s.paused)
                p.number(x.target.text(), x.age_s);
        }
        {
            detail::JsonObject ls(o.key("limits"));
            for (const LimitInfo& l : s.limits) {
                detail::JsonObject one(ls.key(l.group));
                one.number("max_running", l.spec.max_running);
                one.boolean("per_key", l.spec.per_key);
                one.number("rate_n", l.spec.rate_n);
                one.number("rate_period_s",
                           std::chrono::duration<double>(l.spec.rate_period).count());
                one.number("running", l.running);
                one.number("queued", l.queued);
                one.number("keys", l.keys);
                one.number("next_slot_s", l.next_slot_s);
            }
        }
    }
    return out;
}

} // namespace ax::pg
