// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// The PostgreSQL schema of ax's distributed mode: its version, the migrations in order (each a
// file of its own under sql/migrations/, the truth about the tables and functions), the advisory
// lock keys, and the claim and acknowledgement statements the node's hot path prepares. The
// client's statements are in sql/client.hpp and sql/enqueue.hpp; the migration runner
// (detail::migrate, require_schema) in connection.hpp, which the node reaches it through.
// docs/distributed.md explains the design.
//
// Everything lives in the schema `ax`:
//   ax.schema_version  one row per applied migration
//   ax.tasks           live tasks only (pending, scheduled, claimed); the primary key, a partial
//                      claim-order index over claimable ungrouped rows, two partial indexes
//                      over grouped rows (v11); v6's listing index (kind, id) was dropped by v13
//                      (every enqueue paid for it)
//   ax.batches         one row per claimed batch: its node, size, checksum and lease
//   ax.nodes           live nodes: kinds, tags, lease (renewed in place, a HOT update)
//   ax.history         finished tasks (succeeded, cancelled, discarded), pruned in batches
//   ax.dead_letters    failed for good, until replayed or discarded
//   ax.counters        recovery counters (reclaimed batches/tasks, checksum mismatches)
//   ax.pauses          paused kinds and lanes (Client::pause; nodes LISTEN ax_pause)
//   ax.waiters         one row per Client::wait in progress (its task and backend)
//   ax.schedules       recurring schedules: cron, zone, task template, the next tick
//   ax.flows, ax.flow_tasks, ax.flow_waiting  workflows: graphs of tasks (v10); a finished
//                      flow's rows pruned by maintenance once its tasks left the history (v15);
//                      waiting flow tasks and schedules keep a limit group (v16)
//   ax.limits          concurrency and rate limits per task group (v11; ax.limit_state: windows
//                      and bounds; v12: large limits in slices, ax.key_weights: fair-share weights)

#include "sql/migrations/v1.hpp"
#include "sql/migrations/v10.hpp"
#include "sql/migrations/v11.hpp"
#include "sql/migrations/v12.hpp"
#include "sql/migrations/v13.hpp"
#include "sql/migrations/v14.hpp"
#include "sql/migrations/v15.hpp"
#include "sql/migrations/v16.hpp"
#include "sql/migrations/v17.hpp"
#include "sql/migrations/v2.hpp"
#include "sql/migrations/v3.hpp"
#include "sql/migrations/v4.hpp"
#include "sql/migrations/v5.hpp"
#include "sql/migrations/v6.hpp"
#include "sql/migrations/v7.hpp"
#include "sql/migrations/v8.hpp"
#include "sql/migrations/v9.hpp"

#include <array>
#include <cstdint>

namespace ax::pg {

/// The schema version this library writes and understands. A database at a newer version is
/// refused with a clear error; an older one is brought up to date by migrate().
inline constexpr int schema_version = 17;

/// Codes of ax.history.state.
enum class HistoryState : std::int16_t { succeeded = 1, cancelled = 2, discarded = 3 };

namespace detail {

/// Advisory lock keys (arbitrary 64-bit constants): migrations, and the single maintenance runner.
/// The maintenance key is the literal ax.maintain() takes in the migrations' SQL (what runs in
/// every migrated database, so the constant follows it, not the other way round; test_pg [logic]
/// checks they agree). An operator can see or take it: SELECT pg_try_advisory_lock(<key>).
inline constexpr std::int64_t migrate_lock_key = 0x61782d6d69677274; // "ax-migrt"
inline constexpr std::int64_t maintain_lock_key = 7887330361530609268;

/// Migration n (1-based) is migrations[n - 1]; each runs once, inside the migrate transaction.
/// Each is a file of its own under sql/migrations/.
inline constexpr std::array<const char*, schema_version> migrations = {
    sql::migrations::v1,  sql::migrations::v2,  sql::migrations::v3,  sql::migrations::v4,
    sql::migrations::v5,  sql::migrations::v6,  sql::migrations::v7,  sql::migrations::v8,
    sql::migrations::v9,  sql::migrations::v10, sql::migrations::v11, sql::migrations::v12,
    sql::migrations::v13, sql::migrations::v14, sql::migrations::v15, sql::migrations::v16,
    sql::migrations::v17};

// ---------------------------------------------------------------- hot-path statements
// Prepared once per connection; parameters and the claim's result are in binary format, so
// the node neither formats nor parses text per task.

/// Claim one batch in one statement. $1 node, $2 kinds text[], $3 offered tags text[],
/// $4/$5/$6 how many to take from the high/normal/low lanes, $7 lease in ms.
/// Each lane is its own SKIP LOCKED scan of the partial claim index (ungrouped tasks only). While
/// some grouped task (NewTask::group, migration 11) waits unclaimed, the scans are switched off
/// (x.u: no grouped task waits) and ax.claim_grouped claims the batch instead, limits and fair
/// shares applied; otherwise that costs one probe of the empty tasks_grouped index. The text up
/// to the batch INSERT stays within track_activity_query_size's default 1024 bytes, so
/// pg_stat_activity shows a claim as one (test_pg [links] finds claims in the server that way).
/// The update reaches ax.tasks through its key only (`id = ANY (ARRAY(...))`, an index condition):
/// as a join with c, a VACUUM that found the table empty (pg_class.reltuples 0, which lasts until
/// the next VACUUM or ANALYZE while the table refills) had the planner scan all of ax.tasks once
/// per claimed task, a claim costing O(tasks waiting) (docs/bench/pg-flows.md, "Slow rounds").
inline constexpr const char* claim_sql = R"SQL(
WITH x AS MATERIALIZED (SELECT NOT EXISTS (SELECT 1 FROM ax.tasks
                                            WHERE node_id IS NULL AND grp IS NOT NULL) AS u),
h AS (SELECT id FROM ax.tasks WHERE node_id IS NULL AND grp IS NULL AND priority = 0
  AND run_at <= now() AND kind = ANY ($2::text[]) AND tags <@ $3::text[] AND (SELECT u FROM x)
  ORDER BY priority, run_at, id LIMIT $4 FOR UPDATE SKIP LOCKED),
n AS (SELECT id FROM ax.tasks WHERE node_id IS NULL AND grp IS NULL AND priority = 1
  AND run_at <= now() AND kind = ANY ($2::text[]) AND tags <@ $3::text[] AND (SELECT u FROM x)
  ORDER BY priority, run_at, id LIMIT $5 FOR UPDATE SKIP LOCKED),
l AS (SELECT id FROM ax.tasks WHERE node_id IS NULL AND grp IS NULL AND priority = 2
  AND run_at <= now() AND kind = ANY ($2::text[]) AND tags <@ $3::text[] AND (SELECT u FROM x)
  ORDER BY priority, run_at, id LIMIT $6 FOR UPDATE SKIP LOCKED),
c AS (SELECT id FROM h UNION ALL SELECT id FROM n UNION ALL SELECT id FROM l),
b AS (INSERT INTO ax.batches (node_id, size, checksum, lease_until)
      SELECT $1, count(*), coalesce(bit_xor(id), 0), now() + $7 * interval '1 millisecond'
      FROM c HAVING count(*) > 0
      RETURNING id),
r AS (UPDATE ax.tasks t SET node_id = $1, batch_id = b.id, attempts = t.attempts + 1
        FROM b WHERE t.id = ANY (ARRAY(SELECT id FROM c))
      RETURNING t.id, b.id AS batch, array_position($2::text[], t.kind)::int4, t.priority,
                t.attempts, t.timeout_ms, t.cancel_requested,
                (extract(epoch FROM now() - t.run_at) * 1000)::int8, t.payload)
SELECT * FROM r
UNION ALL
SELECT * FROM ax.claim_grouped($1, $2::text[], $3::text[], $4, $5, $6, $7)
 WHERE NOT (SELECT u FROM x))SQL";

/// Acknowledge successes: $1 node, $2 task IDs int8[]. Moves them to the history in one
/// statement; a task cancelled meanwhile ends cancelled (a late ack never overwrites a cancel),
/// and a task no longer held by this node (reclaimed) is left alone. The history slot is read
/// once per statement (a scalar subquery: one InitPlan), not per row. Keyed tasks start their
/// key's retention and record how they ended (finished_state, read by unique_states; only the
/// key's own task: once a unique window passed, the key may belong to a newer task); the keys are
/// locked in key order (the order enqueue takes them in), so an acknowledgement and a keyed enqueue
/// never deadlock. Without keys in the call, that part reads nothing. Rows and keys are reached by
/// `= ANY (array)`, an index condition: after a VACUUM found a table drained the planner takes it
/// for empty, and a join would then read all of it (test_pg_idle [plans_after_drain]).
inline constexpr const char* ack_sql = R"SQL(
WITH d AS (DELETE FROM ax.tasks t WHERE t.id = ANY ($2::int8[]) AND t.node_id = $1
           RETURNING t.id, t.kind, t.priority, t.attempts, t.enqueued_at, t.idem_key,
                     t.cancel_requested),
     k AS (UPDATE ax.idem_keys k
              SET finished_at = now(), finished_state = CASE WHEN d.cancel_requested THEN 2 ELSE 1 END
             FROM d
            WHERE k.idem_key = ANY (ARRAY(SELECT x.idem_key FROM ax.idem_keys x
                                           WHERE x.idem_key = ANY (ARRAY(
                                                 SELECT idem_key FROM d
                                                  WHERE idem_key IS NOT NULL))
                                           ORDER BY x.idem_key FOR UPDATE))
              AND k.idem_key = d.idem_key AND k.task_id = d.id)
INSERT INTO ax.history (id, kind, priority, state, attempts, node_id, enqueued_at, idem_key, slot)
SELECT id, kind, priority, CASE WHEN cancel_requested THEN 2 ELSE 1 END, attempts, $1,
       enqueued_at, idem_key, (SELECT cur FROM ax.rings WHERE name = 'history') FROM d)SQL";

/// Acknowledge successes that set a result (Job::set_result): $1 node, $2 task IDs int8[], $3
/// their results bytea[] (parallel). ack_sql's statement with the result carried into the history
/// row; sent only when some finished task of the flush set a result, so tasks without one pay
/// nothing for the feature.
inline constexpr const char* ack_result_sql = R"SQL(
WITH u AS (SELECT * FROM unnest($2::int8[], $3::bytea[]) AS u(id, result)),
     d AS (DELETE FROM ax.tasks t USING u
            WHERE t.id = ANY ($2::int8[]) AND t.id = u.id AND t.node_id = $1
           RETURNING t.id, t.kind, t.priority, t.attempts, t.enqueued_at, t.idem_key,
                     t.cancel_requested, u.result),
     k AS (UPDATE ax.idem_keys k
              SET finished_at = now(), finished_state = CASE WHEN d.cancel_requested THEN 2 ELSE 1 END
             FROM d
            WHERE k.idem_key = ANY (ARRAY(SELECT x.idem_key FROM ax.idem_keys x
                                           WHERE x.idem_key = ANY (ARRAY(
                                                 SELECT idem_key FROM d
                                                  WHERE idem_key IS NOT NULL))
                                           ORDER BY x.idem_key FOR UPDATE))
              AND k.idem_key = d.idem_key AND k.task_id = d.id)
INSERT INTO ax.history (id, kind, priority, state, attempts, node_id, enqueued_at, idem_key, slot,
                        result)
SELECT id, kind, priority, CASE WHEN cancel_requested THEN 2 ELSE 1 END, attempts, $1,
       enqueued_at, idem_key, (SELECT cur FROM ax.rings WHERE name = 'history'), result FROM d)SQL";

} // namespace detail
} // namespace ax::pg
