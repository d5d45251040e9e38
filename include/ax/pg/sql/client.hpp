// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// The operator statements of ax::pg::Client (query, cancel, dead letters, counts, status), each
// as one typed function: its SQL text beside the code that reads its columns, so a column moved
// in the SELECT and its reader change together. Parameters are named C++ arguments; every
// statement is one round trip on the caller's connection. Not API: Client is (docs/distributed.md).

#include "../connection.hpp"
#include "../types.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ax::pg {
namespace detail {

/// Parses a JSON array of strings as array_to_json writes it (the statements below send text[]
/// columns that way, so empty arrays and quoting need no array-literal parser).
inline std::vector<std::string> parse_json_strings(std::string_view j) {
    std::vector<std::string> out;
    std::size_t i = 0;
    while (i < j.size()) {
        if (j[i] != '"') {
            ++i;
            continue;
        }
        std::string s;
        for (++i; i < j.size() && j[i] != '"'; ++i) {
            if (j[i] == '\\' && i + 1 < j.size()) {
                const char e = j[++i];
                switch (e) {
                case 'n':
                    s += '\n';
                    break;
                case 't':
                    s += '\t';
                    break;
                case 'r':
                    s += '\r';
                    break;
                case 'u':
                    // Control characters only (array_to_json escapes nothing else).
                    if (i + 4 < j.size()) {
                        s += static_cast<char>(
                            std::stoi(std::string(j.substr(i + 1, 4)), nullptr, 16));
                        i += 4;
                    }
                    break;
                default:
                    s += e;
                }
            } else {
                s += j[i];
            }
        }
        ++i;
        out.push_back(std::move(s));
    }
    return out;
}

} // namespace detail

namespace sql {

/// Where task `task_id` is: the live table, then the dead letters, then the history (one
/// statement; the ID is in at most one of them). nullopt for an unknown ID.
inline std::optional<TaskStatus> task_status(detail::Connection& c, std::int64_t task_id) {
    const std::string id = std::to_string(task_id);
    detail::Result r = c.exec_params(
        "SELECT 'live', kind, priority, attempts, coalesce(node_id, 0), cancel_requested, "
        "       CASE WHEN node_id IS NOT NULL THEN 'claimed' WHEN run_at > now() THEN "
        "'scheduled' ELSE 'pending' END, array_to_json(errors)::text "
        "  FROM ax.tasks WHERE id = $1 "
        "UNION ALL SELECT 'dead', kind, priority, attempts, 0, false, 'dead_lettered', "
        "       array_to_json(errors)::text FROM ax.dead_letters WHERE id = $1 "
        "UNION ALL SELECT 'hist', kind, priority, attempts, coalesce(node_id, 0), false, "
        "       CASE state WHEN 1 THEN 'succeeded' WHEN 2 THEN 'cancelled' ELSE 'discarded' "
        "END, '[]' FROM ax.history WHERE id = $1 LIMIT 1",
        {id.c_str()});
    if (r.rows() == 0)
        return std::nullopt;
    TaskStatus s;
    s.id = task_id;
    s.kind = std::string(r.text(0, 1));
    s.priority = static_cast<Priority>(r.int64(0, 2));
    s.attempts = static_cast<int>(r.int64(0, 3));
    s.node_id = r.int64(0, 4);
    s.cancel_requested = r.boolean(0, 5);
    s.state = task_state_from_string(r.text(0, 6));
    s.errors = detail::parse_json_strings(r.text(0, 7));
    return s;
}

/// ax.cancel (migration 1): cancels a claimable task at once, flags and notifies the node of a
/// claimed one.
inline CancelResult cancel_task(detail::Connection& c, std::int64_t task_id) {
    const std::string id = std::to_string(task_id);
    detail::Result r = c.exec_params("SELECT ax.cancel($1)", {id.c_str()});
    return cancel_result_from_string(r.text(0, 0));
}

/// Dead letters, oldest first, at most `limit`.
inline std::vector<DeadLetterInfo> dead_letters(detail::Connection& c, std::size_t limit) {
    const std::string lim = std::to_string(limit);
    detail::Result r =
        c.exec_params("SELECT id, kind, priority, attempts, reason, array_to_json(errors)::text, "
                      "encode(payload, 'escape'), extract(epoch FROM now() - failed_at)::float8 "
                      "FROM ax.dead_letters ORDER BY failed_at, id LIMIT $1",
                      {lim.c_str()});
    std::vector<DeadLetterInfo> out;
    for (int i = 0; i < r.rows(); ++i) {
        DeadLetterInfo d;
        d.id = r.int64(i, 0);
        d.kind = std::string(r.text(i, 1));
        d.priority = static_cast<Priority>(r.int64(i, 2));
        d.attempts = static_cast<int>(r.int64(i, 3));
        d.reason = std::string(r.text(i, 4));
        d.errors = detail::parse_json_strings(r.text(i, 5));
        d.payload = std::string(r.text(i, 6));
        d.age_s = r.float8(i, 7);
        out.push_back(std::move(d));
    }
    return out;
}

/// ax.replay_dead_letter: false when `task_id` is not a dead letter.
inline bool replay_dead_letter(detail::Connection& c, std::int64_t task_id) {
    const std::string id = std::to_string(task_id);
    return c.exec_params("SELECT ax.replay_dead_letter($1)", {id.c_str()}).boolean(0, 0);
}

/// ax.discard_dead_letter: false when `task_id` is not a dead letter.
inline bool discard_dead_letter(detail::Connection& c, std::int64_t task_id) {
    const std::string id = std::to_string(task_id);
    return c.exec_params("SELECT ax.discard_dead_letter($1)", {id.c_str()}).boolean(0, 0);
}

/// Stores the dead letters' ring retention (maintenance applies it at its next turn).
inline void set_dead_letter_retention(detail::Connection& c, std::chrono::milliseconds retention) {
    const std::string ms = std::to_string(retention.count());
    c.exec_params("UPDATE ax.rings SET retention_ms = $1 WHERE name = 'dead_letters'",
                  {ms.c_str()});
}

/// The dead letters' ring retention stored.
inline std::chrono::milliseconds dead_letter_retention(detail::Connection& c) {
    return std::chrono::milliseconds(
        c.exec("SELECT retention_ms FROM ax.rings WHERE name = 'dead_letters'").int64(0, 0));
}

/// Live tasks by state and lane, dead letters, and the history by final state (two
/// statements).
inline Counts counts(detail::Connection& c) {
    Counts out;
    detail::Result r =
        c.exec("SELECT CASE WHEN node_id IS NOT NULL THEN 2 WHEN run_at > now() THEN 1 ELSE 0 END, "
               "priority, count(*) FROM ax.tasks GROUP BY 1, 2");
    for (int i = 0; i < r.rows(); ++i) {
        const auto st = r.int64(i, 0);
        const auto p = static_cast<std::size_t>(r.int64(i, 1));
        const auto n = r.int64(i, 2);
        (st == 0 ? out.pending : st == 1 ? out.scheduled : out.claimed).at(p) = n;
    }
    detail::Result w = c.exec("SELECT priority, count(*) FROM ax.flow_waiting GROUP BY priority");
    for (int i = 0; i < w.rows(); ++i)
        out.waiting.at(static_cast<std::size_t>(w.int64(i, 0))) = w.int64(i, 1);
    detail::Result h = c.exec("SELECT (SELECT count(*) FROM ax.dead_letters), "
                              "count(*) FILTER (WHERE state = 1), "
                              "count(*) FILTER (WHERE state = 2), "
                              "count(*) FILTER (WHERE state = 3) FROM ax.history");
    out.dead_letters = h.int64(0, 0);
    out.succeeded = h.int64(0, 1);
    out.cancelled = h.int64(0, 2);
    out.discarded = h.int64(0, 3);
    return out;
}

/// Registered nodes by ID, with their lease time left and the batches and tasks they hold.
inline std::vector<NodeInfo> nodes(detail::Connection& c) {
    detail::Result n =
        c.exec("SELECT n.id, n.name, n.host, n.pid, array_to_json(n.kinds)::text, "
               "array_to_json(n.tags)::text, extract(epoch FROM n.lease_until - now())::float8, "
               "(SELECT count(*) FROM ax.batches b WHERE b.node_id = n.id), "
               "(SELECT count(*) FROM ax.tasks t WHERE t.node_id = n.id) "
               "FROM ax.nodes n ORDER BY n.id");
    std::vector<NodeInfo> out;
    for (int i = 0; i < n.rows(); ++i) {
        NodeInfo ni;
        ni.id = n.int64(i, 0);
        ni.name = std::string(n.text(i, 1));
        ni.host = std::string(n.text(i, 2));
        ni.pid = static_cast<int>(n.int64(i, 3));
        ni.kinds = detail::parse_json_strings(n.text(i, 4));
        ni.tags = detail::parse_json_strings(n.text(i, 5));
        ni.lease_left_s = n.float8(i, 6);
        ni.batches = n.int64(i, 7);
        ni.tasks = n.int64(i, 8);
        out.push_back(std::move(ni));
    }
    return out;
}

/// Age of the oldest claimable task in seconds (0 when none).
inline double oldest_pending_age_s(detail::Connection& c) {
    return c
        .exec("SELECT coalesce(extract(epoch FROM now() - min(run_at)), 0)::float8 FROM ax.tasks "
              "WHERE node_id IS NULL AND run_at <= now()")
        .float8(0, 0);
}

/// Claimable tasks no live node can take, by reason ("kind K: no live node handles it", "kind K
/// tags [T]: no live node offers them") with their counts, ordered by reason.
inline std::vector<std::pair<std::string, std::int64_t>> unclaimable(detail::Connection& c) {
    detail::Result u =
        c.exec("SELECT CASE WHEN NOT EXISTS (SELECT 1 FROM ax.nodes n WHERE n.lease_until > now() "
               "AND t.kind = ANY (n.kinds)) THEN 'kind ' || t.kind || ': no live node handles it' "
               "ELSE 'kind ' || t.kind || ' tags [' || array_to_string(t.tags, ',') || "
               "']: no live node offers them' END, count(*) "
               "FROM ax.tasks t WHERE t.node_id IS NULL AND NOT EXISTS (SELECT 1 FROM ax.nodes n "
               "WHERE n.lease_until > now() AND t.kind = ANY (n.kinds) AND t.tags <@ n.tags) "
               "GROUP BY 1 ORDER BY 1");
    std::vector<std::pair<std::string, std::int64_t>> out;
    for (int i = 0; i < u.rows(); ++i)
        out.emplace_back(std::string(u.text(i, 0)), u.int64(i, 1));
    return out;
}

/// The recovery counters since the schema was created (ax.counters).
struct RecoveryCounters {
    std::int64_t reclaimed_batches = 0;
    std::int64_t reclaimed_tasks = 0;
    std::int64_t checksum_mismatches = 0;
};

/// Reads ax.counters; counters this library does not report are skipped.
inline RecoveryCounters recovery_counters(detail::Connection& c) {
    RecoveryCounters out;
    detail::Result k = c.exec("SELECT name, value FROM ax.counters");
    for (int i = 0; i < k.rows(); ++i) {
        const auto name = k.text(i, 0);
        const auto v = k.int64(i, 1);
        if (name == "reclaimed_batches")
            out.reclaimed_batches = v;
        else if (name == "reclaimed_tasks")
            out.reclaimed_tasks = v;
        else if (name == "checksum_mismatches")
            out.checksum_mismatches = v;
    }
    return out;
}

} // namespace sql
} // namespace ax::pg
