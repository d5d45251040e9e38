// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// The statements of Client::result and Client::wait, one typed function each: read a task's
// outcome (binary results, so a result's bytes come back as they were set, NULs included), and
// register / unregister a waiter in ax.waiters (migration 7), whose ending the history's and
// dead letters' statement trigger announces with NOTIFY ax_done '<id>'. Not API: Client is.

#include "../connection.hpp"
#include "../detail/wire.hpp"
#include "../types.hpp"

#include <cstdint>
#include <optional>
#include <string>

namespace ax::pg::sql {

/// The channel the end of a waited task is announced on (payload: the task ID).
inline constexpr const char* done_channel = "ax_done";

/// A task's outcome: the live table, then the dead letters, then the history (the ID is in at
/// most one), then the flow tasks waiting for their dependencies (reported as scheduled: not
/// claimable yet). Columns (binary): state int2 (TaskState's value), attempts int4, result bytea
/// (NULL: none), last error text (NULL: none).
inline constexpr const char* task_result_sql = R"SQL(
SELECT (CASE WHEN node_id IS NOT NULL THEN 2 WHEN run_at > now() THEN 1 ELSE 0 END)::int2,
       attempts, NULL::bytea, errors[cardinality(errors)]
  FROM ax.tasks WHERE id = $1::int8
UNION ALL
SELECT 5::int2, attempts, NULL::bytea, errors[cardinality(errors)]
  FROM ax.dead_letters WHERE id = $1::int8
UNION ALL
SELECT (CASE state WHEN 1 THEN 3 WHEN 2 THEN 4 ELSE 6 END)::int2, attempts, result,
       CASE state WHEN 2 THEN 'cancelled' WHEN 3 THEN 'discarded' END
  FROM ax.history WHERE id = $1::int8
UNION ALL
SELECT 1::int2, 0, NULL::bytea, NULL FROM ax.flow_waiting WHERE task_id = $1::int8
LIMIT 1)SQL";

/// Registers this connection's backend as waiting for `id` and, in the same transaction, takes a
/// KEY SHARE lock on the live row if there is one: an ending statement (they all delete that
/// row) then either committed before this one (the check that follows sees the ending) or waits
/// for it, so that its trigger's fresh snapshot sees the waiter and notifies. No wake-up is lost.
/// A flow task waiting for its dependencies is locked likewise in ax.flow_waiting (the flow's
/// cancellation of it deletes that row).
inline constexpr const char* register_waiter_sql = R"SQL(
WITH w AS (INSERT INTO ax.waiters (task_id, pid) VALUES ($1::int8, pg_backend_pid())),
     f AS (SELECT 1 FROM ax.flow_waiting WHERE task_id = $1::int8 FOR KEY SHARE),
     t AS (SELECT 1 FROM ax.tasks WHERE id = $1::int8 FOR KEY SHARE)
SELECT (SELECT count(*) FROM t) + (SELECT count(*) FROM f))SQL";

/// Removes this backend's waiter row for `id`, and the rows of backends that are gone (a client
/// that died while waiting).
inline constexpr const char* unregister_waiter_sql = R"SQL(
DELETE FROM ax.waiters
 WHERE (task_id = $1::int8 AND pid = pg_backend_pid())
    OR pid NOT IN (SELECT pid FROM pg_stat_activity WHERE pid IS NOT NULL))SQL";

/// Task `task_id`'s outcome; nullopt for an unknown ID (or one whose history was pruned).
inline std::optional<TaskResult> task_result(detail::Connection& c, std::int64_t task_id) {
    const std::string id = std::to_string(task_id);
    const char* values[] = {id.c_str()};
    detail::Result r = c.exec_raw(task_result_sql, 1, values, nullptr, nullptr, 1);
    if (r.rows() == 0)
        return std::nullopt;
    TaskResult t;
    t.id = task_id;
    t.state = static_cast<TaskState>(detail::be16(r.text(0, 0).data()));
    t.attempts = detail::be32(r.text(0, 1).data());
    if (!r.null(0, 2))
        t.result = std::string(r.text(0, 2));
    if (!r.null(0, 3))
        t.error = std::string(r.text(0, 3));
    return t;
}

/// LISTEN on the done channel.
inline void listen_done(detail::Connection& c) {
    c.exec("LISTEN ax_done");
}

/// See register_waiter_sql.
inline void register_waiter(detail::Connection& c, std::int64_t task_id) {
    const std::string id = std::to_string(task_id);
    c.exec_params(register_waiter_sql, {id.c_str()});
}

/// See unregister_waiter_sql.
inline void unregister_waiter(detail::Connection& c, std::int64_t task_id) {
    const std::string id = std::to_string(task_id);
    c.exec_params(unregister_waiter_sql, {id.c_str()});
}

} // namespace ax::pg::sql
