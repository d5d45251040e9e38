// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// Listing tasks (Client::list) and showing one (Client::task_details): the statements over
// ax.tasks, ax.history and ax.dead_letters. A list is one statement built from the filter: one
// branch per state asked for, each its own `ORDER BY id LIMIT page + 1` over one table (an index
// scan that stops at the page's end: PostgreSQL 15 does not merge the index scans of a UNION ALL
// whose members are partitioned tables, it sorts everything), and the outer statement sorts
// those few rows (at most 7 x 1001) and keeps a page; the filters are parameters, and the
// keyset cursor `id > $1` (never OFFSET: a page costs the same deep in the list as at its
// start). The indexes each branch uses are migration 6's
// (docs/distributed.md shows the plans on a million rows). Not API: Client is.

#include "../connection.hpp"
#include "../types.hpp"
#include "client.hpp"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace ax::pg::sql {

/// Checks a filter; std::invalid_argument naming the field otherwise.
inline void validate(const TaskFilter& f) {
    const auto bad = [](const std::string& field, const std::string& why) {
        throw std::invalid_argument("ax::pg::TaskFilter: " + field + ": " + why);
    };
    if (f.limit < 1 || f.limit > max_list_limit)
        bad("limit = " + std::to_string(f.limit),
            "must be in 1.." + std::to_string(max_list_limit) + " (page with `after`)");
    if (f.after < 0)
        bad("after = " + std::to_string(f.after), "must be a task ID, or 0 for the first page");
    if (!f.kind.empty() && !valid_kind(f.kind))
        bad("kind '" + f.kind.substr(0, 40) + "'", std::string(kind_rule));
    if (!f.tag.empty() && !valid_tag(f.tag))
        bad("tag '" + f.tag.substr(0, 40) + "'", std::string(tag_rule));
    if (f.lane && static_cast<unsigned>(*f.lane) > 2)
        bad("lane " + std::to_string(static_cast<unsigned>(*f.lane)),
            "must be high, normal or low");
    if (f.idempotency_key.size() > 512)
        bad("idempotency_key", "must be at most 512 bytes");
    for (const TaskState s : f.states)
        if (static_cast<unsigned>(s) > static_cast<unsigned>(TaskState::discarded))
            bad("state " + std::to_string(static_cast<unsigned>(s)),
                "must be one of " + std::string(task_state_names));
    if (f.enqueued_after && f.enqueued_before && *f.enqueued_after >= *f.enqueued_before)
        bad("enqueued_after", "must be before enqueued_before");
}

namespace detail_list {

inline std::string epoch_text(std::chrono::system_clock::time_point t) {
    char b[48];
    std::snprintf(b, sizeof b, "%.6f", std::chrono::duration<double>(t.time_since_epoch()).count());
    return b;
}

inline std::chrono::system_clock::time_point from_epoch(double s) {
    return std::chrono::system_clock::time_point(
        std::chrono::duration_cast<std::chrono::system_clock::duration>(
            std::chrono::duration<double>(s)));
}

/// The statement for `f` and its text parameters ($1 the cursor, $2 the page size + 1).
struct Built {
    std::string sql;
    std::vector<std::string> params;
};

inline Built build(const TaskFilter& f) {
    Built b;
    // The cursor is always a bound (IDs start at 1), so $1 is always typed and used.
    b.params.push_back(f.newest_first && f.after == 0 ? "9223372036854775807"
                                                      : std::to_string(f.after));
    b.params.push_back(std::to_string(f.limit + 1));
    const auto param = [&](std::string v) {
        b.params.push_back(std::move(v));
        return "$" + std::to_string(b.params.size());
    };
    // The filters every branch shares (the three tables name these columns alike).
    std::string common;
    common += f.newest_first ? " AND id < $1::int8" : " AND id > $1::int8";
    if (!f.kind.empty())
        common += " AND kind = " + param(f.kind);
    if (f.lane)
        common += " AND priority = " + param(std::to_string(static_cast<unsigned>(*f.lane)));
    if (f.enqueued_after)
        common += " AND enqueued_at >= to_timestamp(" + param(epoch_text(*f.enqueued_after)) +
                  "::float8)";
    if (f.enqueued_before)
        common += " AND enqueued_at < to_timestamp(" + param(epoch_text(*f.enqueued_before)) +
                  "::float8)";
    if (!f.idempotency_key.empty()) {
        const std::string k = param(f.idempotency_key);
        // The key's row names its task: a lookup by ID in each table, not a scan for the key.
        common += " AND id = (SELECT task_id FROM ax.idem_keys WHERE idem_key = " + k +
                  ") AND idem_key = " + k;
    }
    std::string tag;
    if (!f.tag.empty())
        tag = " AND " + param(f.tag) + " = ANY (tags)";

    const auto wanted = [&](TaskState s) {
        if (f.states.empty())
            return true;
        for (const TaskState x : f.states)
            if (x == s)
                return true;
        return false;
    };
    // Every branch's columns have the same types (casts where a constant stands in).
    std::vector<std::string> branches;
    const auto live = [&](TaskState s, const char* pred) {
        if (!wanted(s))
            return;
        branches.push_back(
            "SELECT id, kind, '" + std::string(to_string(s)) +
            "'::text AS state, priority, attempts, coalesce(node_id, 0) AS node_id, "
            "array_to_json(tags)::text AS tags, idem_key, enqueued_at, run_at AS at, "
            "octet_length(payload)::int8 AS payload_bytes, cardinality(errors) AS errors "
            "FROM ax.tasks WHERE " +
            std::string(pred) + common + tag);
    };
    live(TaskState::pending, "node_id IS NULL AND run_at <= now()");
    live(TaskState::scheduled, "node_id IS NULL AND run_at > now()");
    live(TaskState::claimed, "node_id IS NOT NULL");
    const auto hist = [&](TaskState s, HistoryState code) {
        if (!wanted(s) || !f.tag.empty())
            return;
        branches.push_back(
            "SELECT id, kind, '" + std::string(to_string(s)) +
            "'::text AS state, priority, attempts, coalesce(node_id, 0) AS node_id, "
            "'[]'::text AS tags, idem_key, enqueued_at, finished_at AS at, "
            "NULL::int8 AS payload_bytes, 0 AS errors FROM ax.history WHERE state = " +
            std::to_string(static_cast<int>(code)) + common);
    };
    hist(TaskState::succeeded, HistoryState::succeeded);
    hist(TaskState::cancelled, HistoryState::cancelled);
    hist(TaskState::discarded, HistoryState::discarded);
    if (wanted(TaskState::dead_lettered))
        branches.push_back("SELECT id, kind, 'dead_lettered'::text AS state, priority, attempts, "
                           "0::int8 AS node_id, array_to_json(tags)::text AS tags, idem_key, "
                           "enqueued_at, failed_at AS at, octet_length(payload)::int8 AS "
                           "payload_bytes, cardinality(errors) AS errors "
                           "FROM ax.dead_letters WHERE true" +
                           common + tag);
    const std::string order = f.newest_first ? " ORDER BY id DESC" : " ORDER BY id";
    std::string all;
    for (const auto& br : branches)
        all += (all.empty() ? "(" : " UNION ALL (") + br + order + " LIMIT $2::int8)";
    b.sql = "SELECT id, kind, state, priority, attempts, node_id, tags, idem_key, "
            "extract(epoch FROM enqueued_at)::float8, extract(epoch FROM at)::float8, "
            "payload_bytes, errors FROM (" +
            all + ") t" + order + " LIMIT $2::int8";
    return b;
}

inline detail::Result run(detail::Connection& c, const std::string& sql,
                          const std::vector<std::string>& params) {
    std::vector<const char*> v;
    for (const auto& p : params)
        v.push_back(p.c_str());
    return c.exec_raw(sql.c_str(), static_cast<int>(v.size()), v.data(), nullptr, nullptr, 0);
}

} // namespace detail_list

/// One page of tasks matching `f` (validated first).
inline TaskPage list_tasks(detail::Connection& c, const TaskFilter& f) {
    validate(f);
    const detail_list::Built b = detail_list::build(f);
    detail::Result r = detail_list::run(c, b.sql, b.params);
    TaskPage page;
    const int n = std::min(r.rows(), static_cast<int>(f.limit));
    page.tasks.reserve(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) {
        TaskInfo t;
        t.id = r.int64(i, 0);
        t.kind = std::string(r.text(i, 1));
        t.state = task_state_from_string(r.text(i, 2));
        t.priority = static_cast<Priority>(r.int64(i, 3));
        t.attempts = static_cast<int>(r.int64(i, 4));
        t.node_id = r.int64(i, 5);
        t.tags = detail::parse_json_strings(r.text(i, 6));
        if (!r.null(i, 7))
            t.idempotency_key = std::string(r.text(i, 7));
        t.enqueued_at = detail_list::from_epoch(r.float8(i, 8));
        t.at = detail_list::from_epoch(r.float8(i, 9));
        t.payload_bytes = r.null(i, 10) ? -1 : r.int64(i, 10);
        t.errors = static_cast<int>(r.int64(i, 11));
        page.tasks.push_back(std::move(t));
    }
    if (r.rows() > static_cast<int>(f.limit) && !page.tasks.empty())
        page.next = page.tasks.back().id;
    return page;
}

/// EXPLAIN (ANALYZE) of the list statement for `f`, as PostgreSQL prints it (for operators and
/// docs/distributed.md; runs the statement once).
inline std::string explain_list(detail::Connection& c, const TaskFilter& f) {
    validate(f);
    const detail_list::Built b = detail_list::build(f);
    detail::Result r = detail_list::run(c, "EXPLAIN (ANALYZE, BUFFERS) " + b.sql, b.params);
    std::string out;
    for (int i = 0; i < r.rows(); ++i)
        out += std::string(r.text(i, 0)) + "\n";
    return out;
}

/// Everything known of task `id`, its payload cut to `preview_bytes`; nullopt for an unknown
/// ID (or one whose history was pruned).
inline std::optional<TaskDetails> task_details(detail::Connection& c, std::int64_t id,
                                               std::size_t preview_bytes) {
    const std::string ids = std::to_string(id), n = std::to_string(preview_bytes);
    detail::Result r = c.exec_params(
        "SELECT CASE WHEN node_id IS NOT NULL THEN 'claimed' WHEN run_at > now() THEN "
        "'scheduled' ELSE 'pending' END, kind, priority, attempts, coalesce(node_id, 0), "
        "array_to_json(tags)::text, idem_key, extract(epoch FROM enqueued_at)::float8, "
        "extract(epoch FROM run_at)::float8, octet_length(payload)::int8, max_attempts, "
        "timeout_ms::int8, cancel_requested, coalesce(batch_id, 0), array_to_json(errors)::text, "
        "'', encode(substring(payload FROM 1 FOR $2::int), 'escape') FROM ax.tasks WHERE id = $1 "
        "UNION ALL SELECT 'dead_lettered', kind, priority, attempts, 0, "
        "array_to_json(tags)::text, idem_key, extract(epoch FROM enqueued_at)::float8, "
        "extract(epoch FROM failed_at)::float8, octet_length(payload)::int8, max_attempts, "
        "timeout_ms::int8, false, 0, array_to_json(errors)::text, reason, "
        "encode(substring(payload FROM 1 FOR $2::int), 'escape') FROM ax.dead_letters "
        "WHERE id = $1 "
        "UNION ALL SELECT CASE state WHEN 1 THEN 'succeeded' WHEN 2 THEN 'cancelled' ELSE "
        "'discarded' END, kind, priority, attempts, coalesce(node_id, 0), '[]', idem_key, "
        "extract(epoch FROM enqueued_at)::float8, extract(epoch FROM finished_at)::float8, "
        "NULL, 0, 0, false, 0, '[]', '', '' FROM ax.history WHERE id = $1 LIMIT 1",
        {ids.c_str(), n.c_str()});
    if (r.rows() == 0)
        return std::nullopt;
    TaskDetails d;
    TaskInfo& t = d.info;
    t.id = id;
    t.state = task_state_from_string(r.text(0, 0));
    t.kind = std::string(r.text(0, 1));
    t.priority = static_cast<Priority>(r.int64(0, 2));
    t.attempts = static_cast<int>(r.int64(0, 3));
    t.node_id = r.int64(0, 4);
    t.tags = detail::parse_json_strings(r.text(0, 5));
    if (!r.null(0, 6))
        t.idempotency_key = std::string(r.text(0, 6));
    t.enqueued_at = detail_list::from_epoch(r.float8(0, 7));
    t.at = detail_list::from_epoch(r.float8(0, 8));
    t.payload_bytes = r.null(0, 9) ? -1 : r.int64(0, 9);
    d.max_attempts = static_cast<int>(r.int64(0, 10));
    d.timeout_ms = r.int64(0, 11);
    d.cancel_requested = r.boolean(0, 12);
    d.batch_id = r.int64(0, 13);
    d.errors = detail::parse_json_strings(r.text(0, 14));
    t.errors = static_cast<int>(d.errors.size());
    d.reason = std::string(r.text(0, 15));
    d.payload_preview = std::string(r.text(0, 16));
    return d;
}

} // namespace ax::pg::sql
