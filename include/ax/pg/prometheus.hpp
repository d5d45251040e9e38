// ax::pg — distributed mode on PostgreSQL. SPDX-License-Identifier: MIT
#pragma once

#include "../prometheus.hpp"
#include "node_options.hpp"
#include "types.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

/// The distributed mode's figures in the Prometheus text exposition, with the conventions of
/// ax/prometheus.hpp (same PrometheusOptions: prefix, optional scheduler label; `_total`
/// counters, seconds, HELP and TYPE per family), so they can be appended to the same /metrics
/// body as the node's local scheduler:
///
///     std::string body = ax::to_prometheus(node_scheduler_metrics);
///     ax::pg::append_prometheus(body, node.stats());      // this node: ax_pg_node_*{node}
///     ax::pg::append_prometheus(body, client.status());   // the cluster: ax_pg_cluster_*
///
/// Families are prefixed `<prefix>_pg_`, so they never collide with the local scheduler's. A
/// node's series carry `node="<node id>"` (one value per node: bounded); the cluster's carry a
/// priority, a state or a node label, and `reason` for tasks no live node can take (one value per
/// kind and tag set in use: bounded by the deployment, never by the tasks).
namespace ax::pg {

/// Appends one node's counters (Node::stats()): claim statements, batches and empty claims (an
/// idle node's rate(<prefix>_pg_node_empty_claims_total) is about 1 / poll_interval), tasks claimed
/// per priority, finished by outcome, handed back, reconnects, batches reclaimed from it and
/// the tasks in them, payload checksum mismatches, lease renewals, the last batch's size and the
/// tasks held. Per-node throughput is rate(<prefix>_pg_node_tasks_finished_total); the mean batch
/// size is rate(..._tasks_claimed_total) / rate(..._claim_batches_total).
inline void append_prometheus(std::string& out, const NodeStats& s,
                              const PrometheusOptions& options = {}) {
    std::string prefix(options.prefix);
    prefix += prefix.empty() ? "pg" : "_pg";
    const PrometheusOptions o{.prefix = prefix, .scheduler = options.scheduler};
    ax::detail::PromWriter w(out, o);
    const std::string node = std::to_string(s.node_id);
    const auto one = [&](std::string_view name, std::string_view type, std::string_view help,
                         auto value) {
        w.begin(name, type, help);
        w.sample({{"node", node}}, value);
    };
    one("node_claims_total", "counter", "Claim statements this node sent.", s.claims);
    one("node_claim_batches_total", "counter", "Claim statements that returned tasks (batches).",
        s.batches);
    one("node_empty_claims_total", "counter",
        "Claim statements that returned no task. An idle node sends about one per poll_interval "
        "(2/s by default) and never more than 1 per 250 ms plus one per poll, except when woken "
        "by new tasks (NOTIFY).",
        s.empty_claims);
    w.begin("node_tasks_claimed_total", "counter", "Tasks this node claimed, by priority.");
    for (std::size_t p = 0; p < priority_count; ++p)
        w.sample({{"node", node}, {"priority", to_string(static_cast<Priority>(p))}}, s.claimed[p]);
    w.begin("node_tasks_finished_total", "counter",
            "Claimed tasks this node finished, by outcome (failed: an attempt failed; the "
            "database schedules its retry or dead-letters it; snoozed: Job::snooze, run again "
            "later without spending an attempt).");
    w.sample({{"node", node}, {"outcome", "succeeded"}}, s.succeeded);
    w.sample({{"node", node}, {"outcome", "failed"}}, s.failed);
    w.sample({{"node", node}, {"outcome", "cancelled"}}, s.cancelled);
    w.sample({{"node", node}, {"outcome", "snoozed"}}, s.snoozed);
    one("node_tasks_released_total", "counter",
        "Claimed tasks this node handed back unrun (stopping, or no room).", s.released);
    one("node_reconnects_total", "counter", "Reconnects to the database after a lost connection.",
        s.reconnects);
    one("node_reclaimed_batches_total", "counter",
        "Batches whose lease expired, reclaimed by this node's maintenance.", s.reclaimed_batches);
    one("node_reclaimed_tasks_total", "counter", "Tasks in the batches this node reclaimed.",
        s.reclaimed_tasks);
    one("node_checksum_mismatches_total", "counter",
        "Claimed tasks whose payload checksum did not match (not run).", s.checksum_mismatches);
    one("node_lease_renewals_total", "counter",
        "Lease renewals of this node that succeeded (one per lease / 3).", s.lease_renewals);
    one("node_db_round_trips_total", "counter",
        "Pipelined round trips to the database (acknowledgements, claim, renewal, maintenance).",
        s.round_trips);
    one("node_last_batch_size", "gauge", "Tasks in the last batch this node claimed.",
        s.last_batch);
    one("node_tasks_held", "gauge", "Tasks claimed by this node and not yet finished.", s.depth);
}

/// Appends the cluster as the database sees it (Client::status()): live tasks by state and
/// priority, dead letters and history, the oldest claimable task's age, tasks no live node can
/// take (by reason and in all), each live node's lease time left and batches / tasks held, and
/// the recovery counters since the schema was created, what is paused (a series per paused
/// kind or lane: bounded by the operator's pauses), and each limited group's limits and where it
/// stands (`<prefix>_pg_limit_*{group}`: running, queued, keys, per_key, max_running,
/// rate_starts, rate_period_seconds, next_slot_seconds; a series per group Client::set_limit
/// limited, bounded by the operator's calls).
inline void append_prometheus(std::string& out, const Status& s,
                              const PrometheusOptions& options = {}) {
    std::string prefix(options.prefix);
    prefix += prefix.empty() ? "pg" : "_pg";
    const PrometheusOptions o{.prefix = prefix, .scheduler = options.scheduler};
    ax::detail::PromWriter w(out, o);
    const Counts& c = s.counts;
    w.begin("cluster_tasks", "gauge",
            "Live tasks in the database, by state (pending: claimable now; scheduled: waiting "
            "for their run time or retry; claimed: held by a node; waiting: flow tasks waiting "
            "for their dependencies) and priority.");
    for (std::size_t p = 0; p < priority_count; ++p) {
        const std::string_view prio = to_string(static_cast<Priority>(p));
        w.sample({{"state", "pending"}, {"priority", prio}}, c.pending[p]);
        w.sample({{"state", "scheduled"}, {"priority", prio}}, c.scheduled[p]);
        w.sample({{"state", "claimed"}, {"priority", prio}}, c.claimed[p]);
        w.sample({{"state", "waiting"}, {"priority", prio}}, c.waiting[p]);
    }
    w.single("cluster_dead_letters", "gauge", "Dead-lettered tasks in the database.",
             c.dead_letters);
    w.begin("cluster_history_tasks", "gauge",
            "Finished tasks kept in the history (bounded by the retention), by outcome.");
    w.sample({{"outcome", "succeeded"}}, c.succeeded);
    w.sample({{"outcome", "cancelled"}}, c.cancelled);
    w.sample({{"outcome", "discarded"}}, c.discarded);
    w.single("cluster_oldest_pending_age_seconds", "gauge",
             "Age of the oldest claimable task, in seconds (0: none).", s.oldest_pending_age_s);
    w.single("cluster_unclaimable_tasks", "gauge",
             "Claimable tasks no live node can take (kind not handled or tags not offered).",
             s.unclaimable_total);
    if (!s.unclaimable.empty()) {
        w.begin("cluster_unclaimable_tasks_by_reason", "gauge",
                "Claimable tasks no live node can take, by kind and tags (\"kind [tags]\").");
        for (const auto& [reason, n] : s.unclaimable)
            w.sample({{"reason", reason}}, n);
    }
    w.single("cluster_nodes", "gauge", "Nodes registered in the database.", s.nodes.size());
    if (!s.nodes.empty()) {
        std::vector<std::string> ids;
        ids.reserve(s.nodes.size());
        for (const NodeInfo& n : s.nodes)
            ids.push_back(std::to_string(n.id));
        const auto per_node = [&](std::string_view name, std::string_view help, auto value_of) {
            w.begin(name, "gauge", help);
            for (std::size_t i = 0; i < s.nodes.size(); ++i)
                w.sample({{"node", ids[i]}}, value_of(s.nodes[i]));
        };
        per_node("cluster_node_lease_left_seconds",
                 "Seconds left on a node's lease; negative once expired (maintenance then "
                 "reclaims its batches).",
                 [](const NodeInfo& n) { return n.lease_left_s; });
        per_node("cluster_node_batches", "Claimed batches a node holds.",
                 [](const NodeInfo& n) { return n.batches; });
        per_node("cluster_node_tasks", "Claimed tasks a node holds.",
                 [](const NodeInfo& n) { return n.tasks; });
    }
    w.single("cluster_reclaimed_batches_total", "counter",
             "Batches reclaimed after their node's lease expired, since the schema was created.",
             s.reclaimed_batches);
    w.single("cluster_reclaimed_tasks_total", "counter",
             "Tasks in reclaimed batches, since the schema was created.", s.reclaimed_tasks);
    w.single("cluster_checksum_mismatches_total", "counter",
             "Claimed tasks whose payload checksum did not match, since the schema was created.",
             s.checksum_mismatches);
    w.single("cluster_paused", "gauge", "Kinds and lanes paused cluster-wide (Client::pause).",
             s.paused.size());
    if (!s.paused.empty()) {
        w.begin("cluster_paused_seconds", "gauge",
                "Seconds since a kind or lane was paused, by scope (kind, lane) and name.");
        for (const PauseInfo& p : s.paused)
            w.sample({{"scope", p.target.scope == PauseTarget::Scope::kind ? "kind" : "lane"},
                      {"name", p.target.name}},
                     p.age_s);
    }
    if (!s.limits.empty()) {
        // One series per limited group (group="<name>"): bounded by the operator's
        // Client::set_limit calls, never by tasks or partition keys.
        const auto per_group = [&](std::string_view name, std::string_view help, auto value_of) {
            w.begin(name, "gauge", help);
            for (const LimitInfo& l : s.limits)
                value_of(l, [&](auto v) { w.sample({{"group", l.group}}, v); });
        };
        per_group("limit_running",
                  "Tasks of a limited group (Client::set_limit) claimed now, on all nodes.",
                  [](const LimitInfo& l, auto emit) { emit(l.running); });
        per_group("limit_queued",
                  "Tasks of a limited group waiting (claimable, or scheduled for later).",
                  [](const LimitInfo& l, auto emit) { emit(l.queued); });
        per_group("limit_keys", "Partition keys of a limited group with tasks running or queued.",
                  [](const LimitInfo& l, auto emit) { emit(l.keys); });
        per_group("limit_per_key",
                  "1 when a group's limits apply to each partition key on its own, 0 when the "
                  "whole group shares them.",
                  [](const LimitInfo& l, auto emit) { emit(l.spec.per_key ? 1 : 0); });
        per_group("limit_max_running",
                  "A group's concurrency limit: at most this many claimed at once (per key when "
                  "per_key). Groups without one have no series.",
                  [](const LimitInfo& l, auto emit) {
                      if (l.spec.max_running)
                          emit(*l.spec.max_running);
                  });
        per_group("limit_rate_starts",
                  "A group's rate limit: at most this many starts per rate window (per key when "
                  "per_key). Groups without one have no series.",
                  [](const LimitInfo& l, auto emit) {
                      if (l.spec.rate_n)
                          emit(*l.spec.rate_n);
                  });
        per_group("limit_rate_period_seconds", "A group's rate window, in seconds.",
                  [](const LimitInfo& l, auto emit) {
                      if (l.spec.rate_n)
                          emit(std::chrono::duration<double>(l.spec.rate_period).count());
                  });
        per_group("limit_next_slot_seconds",
                  "Seconds until a group's first full rate window ends and its next start is "
                  "allowed. No series while no window is full.",
                  [](const LimitInfo& l, auto emit) {
                      if (l.next_slot_s)
                          emit(*l.next_slot_s);
                  });
    }
}

/// The node's exposition as a new string.
[[nodiscard]] inline std::string to_prometheus(const NodeStats& s,
                                               const PrometheusOptions& options = {}) {
    std::string out;
    append_prometheus(out, s, options);
    return out;
}

/// The cluster's exposition as a new string.
[[nodiscard]] inline std::string to_prometheus(const Status& s,
                                               const PrometheusOptions& options = {}) {
    std::string out;
    append_prometheus(out, s, options);
    return out;
}

} // namespace ax::pg
