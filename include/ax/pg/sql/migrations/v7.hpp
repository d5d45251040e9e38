// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// Schema migration 7 of ax's distributed mode: task results, waiting for a task's end, and snooze.
// Applied once, in order, inside the migrate transaction (detail::migrate in connection.hpp); a
// migration already released is never edited: a change is a new version.
//
// Results: a handler's result bytes travel with the acknowledgement into the history row (a
// second acknowledgement statement, sent only for tasks that set one: an acknowledgement without
// results is the statement it was). Waiting: Client::wait registers in ax.waiters and LISTENs on
// ax_done; a statement trigger on the history and the dead letters sends one NOTIFY per waited
// task that the statement ended, and only reads ax.waiters' (empty) table when nobody waits.
// Snooze: ax.snooze_tasks puts a running task back for later and gives its attempt back.

namespace ax::pg::sql::migrations {

/// Migration 7's SQL (several statements, run by the simple protocol).
inline constexpr const char* v7 = R"SQL(
-- NULL: the handler set no result. On the partitioned parent, so every slot gets it; nullable
-- without a default, so no rewrite of the rows already there.
ALTER TABLE ax.history ADD COLUMN result bytea;
-- Times a task was snoozed (ax.snooze_tasks); bounded by the node's max_snoozes.
ALTER TABLE ax.tasks ADD COLUMN snoozes integer NOT NULL DEFAULT 0;

-- One row per Client::wait in progress: the task and the waiting backend (rows of backends that
-- died are removed by the next wait's clean-up).
CREATE TABLE ax.waiters (
    task_id bigint  NOT NULL,
    pid     integer NOT NULL,
    since   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX waiters_task ON ax.waiters (task_id);

-- After a statement that ended tasks (history or dead letters): when someone waits, one NOTIFY
-- ax_done '<id>' per waited task this transaction ended (finished_at / failed_at default to the
-- transaction's now()). Without waiters it reads one empty table and sends nothing. PL/pgSQL
-- takes a fresh snapshot per query, so a waiter that registered while this statement waited on
-- its task's row lock (Client::wait locks the live row when it registers) is seen here.
CREATE FUNCTION ax.notify_done() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM ax.waiters) THEN RETURN NULL; END IF;
    IF TG_TABLE_NAME = 'history' THEN
        PERFORM pg_notify('ax_done', w.task_id::text)
           FROM (SELECT DISTINCT task_id FROM ax.waiters) w
          WHERE EXISTS (SELECT 1 FROM ax.history h WHERE h.id = w.task_id AND h.finished_at = now());
    ELSE
        PERFORM pg_notify('ax_done', w.task_id::text)
           FROM (SELECT DISTINCT task_id FROM ax.waiters) w
          WHERE EXISTS (SELECT 1 FROM ax.dead_letters d WHERE d.id = w.task_id AND d.failed_at = now());
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER history_done AFTER INSERT ON ax.history
    FOR EACH STATEMENT EXECUTE FUNCTION ax.notify_done();
CREATE TRIGGER dead_letters_done AFTER INSERT ON ax.dead_letters
    FOR EACH STATEMENT EXECUTE FUNCTION ax.notify_done();

-- Snoozed attempts reported by a node: each task goes back with run_at = now() + its delay and
-- its attempt given back (the claim counted one), its snoozes counted. A task already snoozed
-- p_max_snoozes times becomes a dead letter instead (reason 'snooze limit'); a cancel-requested
-- one ends cancelled. Rows no longer held by p_node (reclaimed meanwhile) are left alone.
-- Returns the tasks dead-lettered.
CREATE FUNCTION ax.snooze_tasks(p_node bigint, p_ids bigint[], p_delay_ms bigint[],
                                p_max_snoozes integer)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE r record; dead integer := 0; now_due boolean := false;
BEGIN
    FOR r IN SELECT t.id, t.snoozes, t.cancel_requested, f.delay_ms
             FROM unnest(p_ids, p_delay_ms) AS f(id, delay_ms)
             JOIN ax.tasks t ON t.id = f.id AND t.node_id = p_node
             ORDER BY t.id
             FOR UPDATE OF t
    LOOP
        IF r.cancel_requested THEN
            PERFORM ax.finish_cancelled(r.id);
        ELSIF r.snoozes >= p_max_snoozes THEN
            PERFORM ax.dead_letter(r.id, 'snoozed ' || r.snoozes || ' times: the limit (max_snoozes '
                                   || p_max_snoozes || ') is reached', 'snooze limit');
            dead := dead + 1;
        ELSE
            UPDATE ax.tasks SET node_id = NULL, batch_id = NULL,
                   attempts = greatest(attempts - 1, 0), snoozes = snoozes + 1,
                   run_at = now() + r.delay_ms * interval '1 millisecond'
             WHERE id = r.id;
            now_due := now_due OR r.delay_ms <= 0;
        END IF;
    END LOOP;
    -- A task due at once wakes idle nodes (a later one is found by their poll).
    IF now_due THEN PERFORM pg_notify('ax_wake', ''); END IF;
    RETURN dead;
END $$;
)SQL";

} // namespace ax::pg::sql::migrations
