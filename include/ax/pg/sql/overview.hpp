// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// The statements behind an operator's overview of the cluster (Client::overview, the console of
// include/ax/console/): tasks by kind and state, what each node is running, and the last hour's
// throughput and failures per minute, read from the history and the dead letters (their
// finished_at / failed_at are the only times the schema keeps of a task's end). Plus "retry
// now" (Client::retry_now) and the raw payload preview (Client::payload_preview). No schema
// change: every statement reads the tables of migrations 1-9. Not API: Client is.

#include "../connection.hpp"
#include "../types.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ax::pg {

/// Tasks of one kind by where they are (Client::overview).
struct KindCounts {
    std::string kind;
    std::int64_t pending = 0;
    std::int64_t scheduled = 0;
    std::int64_t claimed = 0;
    std::int64_t dead_letters = 0;
};

/// What one node holds, by kind (Client::overview).
struct NodeRunning {
    std::int64_t node_id = 0;
    std::string kind;
    std::int64_t tasks = 0;
};

/// Number of one-minute buckets in Overview's series (the last hour).
inline constexpr std::size_t overview_minutes = 60;

/// The cluster at a glance (Client::overview): Status's counts, nodes and pauses, plus tasks by
/// kind, what each node runs, the schedules, and per-minute series over the last hour.
struct Overview {
    Status status;
    /// Kinds with live tasks or dead letters, the largest first (at most 100).
    std::vector<KindCounts> kinds;
    /// Claimed tasks by node and kind.
    std::vector<NodeRunning> running;
    /// Every recurring schedule.
    std::vector<ScheduleInfo> schedules;
    /// Per minute, oldest first; index overview_minutes - 1 is the current (partial) minute.
    /// succeeded / cancelled / discarded from the history (within its retention), failed: tasks
    /// that became dead letters (from ax.dead_letters, so replayed or discarded ones no longer
    /// count there).
    std::array<std::int64_t, overview_minutes> succeeded{}, failed{}, cancelled{};
    /// The server's clock, UTC seconds (the series' end).
    double now_s = 0;
};

namespace sql {

/// Tasks by kind and place, the 100 kinds with the most tasks first.
inline std::vector<KindCounts> kind_counts(detail::Connection& c) {
    detail::Result r = c.exec(
        "SELECT kind, sum(p)::int8, sum(s)::int8, sum(cl)::int8, sum(d)::int8 FROM ("
        "SELECT kind, count(*) FILTER (WHERE node_id IS NULL AND run_at <= now()) AS p, "
        "count(*) FILTER (WHERE node_id IS NULL AND run_at > now()) AS s, "
        "count(*) FILTER (WHERE node_id IS NOT NULL) AS cl, 0::int8 AS d FROM ax.tasks GROUP BY "
        "kind UNION ALL SELECT kind, 0, 0, 0, count(*) FROM ax.dead_letters GROUP BY kind) k "
        "GROUP BY kind ORDER BY sum(p) + sum(s) + sum(cl) + sum(d) DESC, kind LIMIT 100");
    std::vector<KindCounts> out;
    for (int i = 0; i < r.rows(); ++i)
        out.push_back({std::string(r.text(i, 0)), r.int64(i, 1), r.int64(i, 2), r.int64(i, 3),
                       r.int64(i, 4)});
    return out;
}

/// Claimed tasks by node and kind.
inline std::vector<NodeRunning> node_running(detail::Connection& c) {
    detail::Result r = c.exec("SELECT node_id, kind, count(*) FROM ax.tasks WHERE node_id IS NOT "
                              "NULL GROUP BY 1, 2 ORDER BY 1, 3 DESC, 2");
    std::vector<NodeRunning> out;
    for (int i = 0; i < r.rows(); ++i)
        out.push_back({r.int64(i, 0), std::string(r.text(i, 1)), r.int64(i, 2)});
    return out;
}

/// Fills `o`'s per-minute series and now_s: one statement over the last hour of the history
/// (its BRIN index on finished_at) and of the dead letters. Bucket b covers minute
/// [now - (60 - b) min, now - (59 - b) min).
inline void minute_series(detail::Connection& c, Overview& o) {
    detail::Result r =
        c.exec("WITH t AS (SELECT now() AS n), e AS ("
               "SELECT floor(extract(epoch FROM t.n - finished_at) / 60)::int AS m, state FROM "
               "ax.history, t WHERE finished_at > t.n - interval '1 hour' "
               "UNION ALL SELECT floor(extract(epoch FROM t.n - failed_at) / 60)::int, 0 FROM "
               "ax.dead_letters, t WHERE failed_at > t.n - interval '1 hour') "
               "SELECT -1, 0, extract(epoch FROM (SELECT n FROM t))::float8 UNION ALL "
               "SELECT m, state, count(*)::float8 FROM e WHERE m BETWEEN 0 AND 59 GROUP BY 1, 2");
    for (int i = 0; i < r.rows(); ++i) {
        const auto m = r.int64(i, 0);
        if (m < 0) {
            o.now_s = r.float8(i, 2);
            continue;
        }
        const auto b = overview_minutes - 1 - static_cast<std::size_t>(m);
        const auto n = static_cast<std::int64_t>(r.float8(i, 2));
        switch (r.int64(i, 1)) {
        case 0:
            o.failed.at(b) += n;
            break;
        case 1:
            o.succeeded.at(b) += n;
            break;
        case 2:
            o.cancelled.at(b) += n;
            break;
        default: // discarded dead letters: their failure already left the dead letters
            break;
        }
    }
}

/// Moves a scheduled task (a delay or a retry's back-off) to now and wakes idle nodes; false
/// when `id` is not a live task waiting for its time (claimed, pending, finished or unknown).
inline bool retry_now(detail::Connection& c, std::int64_t id) {
    const std::string ids = std::to_string(id);
    detail::Result r = c.exec_params(
        "WITH u AS (UPDATE ax.tasks SET run_at = now() WHERE id = $1 AND node_id IS NULL AND "
        "run_at > now() RETURNING id) SELECT count(*), max(length(pg_notify('ax_wake', '')::text)) "
        "FROM u",
        {ids.c_str()});
    return r.int64(0, 0) > 0;
}

/// The first `max_bytes` bytes of task `id`'s payload, as stored (live tasks and dead letters;
/// the history keeps none), and its full size; {"", -1} when there is no payload to show.
inline std::pair<std::string, std::int64_t> payload_preview(detail::Connection& c, std::int64_t id,
                                                            std::size_t max_bytes) {
    const std::string ids = std::to_string(id), n = std::to_string(max_bytes);
    detail::Result r = c.exec_params(
        "SELECT encode(substring(payload FROM 1 FOR $2::int), 'hex'), octet_length(payload)::int8 "
        "FROM ax.tasks WHERE id = $1 UNION ALL SELECT encode(substring(payload FROM 1 FOR "
        "$2::int), 'hex'), octet_length(payload)::int8 FROM ax.dead_letters WHERE id = $1 LIMIT 1",
        {ids.c_str(), n.c_str()});
    if (r.rows() == 0)
        return {"", -1};
    const std::string_view hex = r.text(0, 0);
    std::string bytes;
    bytes.reserve(hex.size() / 2);
    const auto nib = [](char ch) { return ch <= '9' ? ch - '0' : ch - 'a' + 10; };
    for (std::size_t i = 0; i + 1 < hex.size(); i += 2)
        bytes += static_cast<char>(nib(hex[i]) * 16 + nib(hex[i + 1]));
    return {std::move(bytes), r.int64(0, 1)};
}

} // namespace sql
} // namespace ax::pg
