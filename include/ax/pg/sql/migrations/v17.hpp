// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// Schema migration 17 of ax's distributed mode: the statements that end tasks and settle flows
// reach their rows by key whatever the table statistics say. Applied once, in order, inside the
// migrate transaction (detail::migrate in connection.hpp); a migration already released is never
// edited: a change is a new version.
//
// Why: a VACUUM that finds a table empty (the node's own pass over a drained ax.tasks, or
// autovacuum after a flow was pruned) leaves pg_class.reltuples at 0 with the pages kept, and
// until the next VACUUM the planner takes the table for empty. A join of an unnest() of IDs with
// such a table may then become a pass over the whole table, once or once per ID (the claim's
// update did: docs/bench/pg-flows.md, "Slow rounds"). Measured after such a VACUUM with 5,000
// pending tasks and 3,300 flow tasks (test_pg_idle [plans_after_drain]): ax.fail_tasks and
// ax.snooze_tasks read 5,050 index entries of ax.tasks for 16 tasks; ax.flow_settle, which every
// ending statement calls while any flow task waits, read all of ax.flow_tasks once per ended task
// (52,848 entries for a dead-lettered batch of 16) and all of ax.flow_waiting twice per call.
// ax.idem_keys after its keys were forgotten is the same case: every acknowledgement (a
// statement in schema.hpp) and every cancel (ax.finish_cancelled) read all of it, keyed tasks
// or not (3,000 entries per statement with 3,000 keys). Each join now also names its IDs or keys
// as `= ANY (array)`, an index condition the planner takes however few rows it expects; in
// ax.fail_tasks, ax.snooze_tasks, ax.flow_settle, ax.finish_cancelled, ax.discard_dead_letter and
// ax.forget_keys, bodies, arguments and results are otherwise unchanged.

namespace ax::pg::sql::migrations {

/// Migration 17's SQL (several statements, run by the simple protocol).
inline constexpr const char* v17 = R"SQL(
CREATE OR REPLACE FUNCTION ax.fail_tasks(p_node bigint, p_ids bigint[], p_errors text[],
                                         p_permanent boolean[], p_delay_ms bigint[])
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE r record; dead integer := 0;
BEGIN
    FOR r IN SELECT t.id, t.attempts, t.max_attempts, t.cancel_requested, f.err, f.perm, f.delay_ms
             FROM unnest(p_ids, p_errors, p_permanent, p_delay_ms) AS f(id, err, perm, delay_ms)
             JOIN ax.tasks t ON t.id = f.id AND t.node_id = p_node
             WHERE t.id = ANY (p_ids)
             FOR UPDATE OF t
    LOOP
        IF r.cancel_requested THEN
            PERFORM ax.finish_cancelled(r.id);
        ELSIF r.perm OR r.attempts >= r.max_attempts THEN
            PERFORM ax.dead_letter(r.id, r.err,
                CASE WHEN r.perm THEN 'permanent error' ELSE 'attempts exhausted' END);
            dead := dead + 1;
        ELSE
            UPDATE ax.tasks SET node_id = NULL, batch_id = NULL, errors = errors || r.err,
                   run_at = now() + r.delay_ms * interval '1 millisecond'
            WHERE id = r.id;
        END IF;
    END LOOP;
    RETURN dead;
END $$;

CREATE OR REPLACE FUNCTION ax.snooze_tasks(p_node bigint, p_ids bigint[], p_delay_ms bigint[],
                                           p_max_snoozes integer)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE r record; dead integer := 0; now_due boolean := false;
BEGIN
    FOR r IN SELECT t.id, t.snoozes, t.cancel_requested, f.delay_ms
             FROM unnest(p_ids, p_delay_ms) AS f(id, delay_ms)
             JOIN ax.tasks t ON t.id = f.id AND t.node_id = p_node
             WHERE t.id = ANY (p_ids)
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

-- Migration 16's ax.flow_settle; every join with the flow tables also names its IDs by ANY.
CREATE OR REPLACE FUNCTION ax.flow_settle(p_ended bigint[], p_how text[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE v_child bigint[]; v_n integer[]; v_why text[];
BEGIN
    WHILE cardinality(p_ended) > 0 LOOP
        SELECT array_agg(x.ch ORDER BY x.ch), array_agg(x.n ORDER BY x.ch),
               array_agg(x.why ORDER BY x.ch)
          INTO v_child, v_n, v_why
          FROM (SELECT c.ch, count(*)::integer AS n,
                       min(CASE WHEN e.how IS NOT NULL THEN 'dependency ' || quote_literal(f.name)
                                || ' (task ' || f.task_id || ') ' || e.how END) AS why
                  FROM unnest(p_ended, p_how) AS e(id, how)
                  JOIN ax.flow_tasks f ON f.task_id = e.id
                  CROSS JOIN LATERAL unnest(f.children) AS c(ch)
                 WHERE f.task_id = ANY (p_ended)
                 GROUP BY c.ch) x;
        EXIT WHEN v_child IS NULL;
        -- A dead letter may come back (replayed, then ending again; or discarded, a history row
        -- of its own): its dependents were settled now, once, so it forgets them.
        IF array_position(p_how, 'was dead-lettered') IS NOT NULL THEN
            UPDATE ax.flow_tasks f SET children = '{}'
              FROM unnest(p_ended, p_how) AS e(id, how)
             WHERE f.task_id = ANY (p_ended) AND f.task_id = e.id AND e.how = 'was dead-lettered';
        END IF;
        PERFORM 1 FROM ax.flow_waiting WHERE task_id = ANY (v_child) ORDER BY task_id FOR UPDATE;
        p_ended := '{}';
        IF EXISTS (SELECT 1 FROM unnest(v_why) w WHERE w IS NOT NULL) THEN
            WITH d AS (DELETE FROM ax.flow_waiting w USING unnest(v_child, v_why) AS u(ch, why)
                        WHERE w.task_id = ANY (v_child) AND w.task_id = u.ch
                          AND u.why IS NOT NULL AND NOT w.run_anyway
                       RETURNING w.task_id, w.kind, w.priority, w.enqueued_at, u.why),
                 r AS (UPDATE ax.flow_tasks f SET reason = d.why FROM d
                        WHERE f.task_id = ANY (ARRAY(SELECT task_id FROM d))
                          AND f.task_id = d.task_id),
                 h AS (INSERT INTO ax.history (id, kind, priority, state, attempts, enqueued_at)
                       SELECT task_id, kind, priority, 2, 0, enqueued_at FROM d)
            SELECT coalesce(array_agg(task_id), '{}') INTO p_ended FROM d;
            p_how := array_fill('was cancelled'::text, ARRAY[cardinality(p_ended)]);
        END IF;
        -- Released: those whose count these endings take to zero, moved whole; counted down:
        -- the rest (disjoint sets of rows, decided on the counts the lock above made final).
        WITH r AS (DELETE FROM ax.flow_waiting w USING unnest(v_child, v_n) AS u(ch, n)
                    WHERE w.task_id = ANY (v_child) AND w.task_id = u.ch AND w.deps_left <= u.n
                   RETURNING w.*),
             i AS (INSERT INTO ax.tasks (id, kind, priority, payload, tags, max_attempts,
                                         timeout_ms, enqueued_at, grp, grp_key)
                   SELECT task_id, kind, priority, payload, tags, max_attempts, timeout_ms,
                          enqueued_at, grp, grp_key
                     FROM r)
        UPDATE ax.flow_waiting w SET deps_left = w.deps_left - u.n
          FROM unnest(v_child, v_n) AS u(ch, n)
         WHERE w.task_id = ANY (v_child) AND w.task_id = u.ch AND w.deps_left > u.n;
    END LOOP;
END $$;

-- Migration 9's bodies; the key's row is reached by key.
CREATE OR REPLACE FUNCTION ax.finish_cancelled(p_id bigint) RETURNS void LANGUAGE sql AS $$
    WITH d AS (DELETE FROM ax.tasks WHERE id = p_id RETURNING *),
    k AS (UPDATE ax.idem_keys k SET finished_at = now(), finished_state = 2 FROM d
           WHERE k.idem_key = ANY (ARRAY(SELECT idem_key FROM d WHERE idem_key IS NOT NULL))
             AND k.idem_key = d.idem_key AND k.task_id = d.id)
    INSERT INTO ax.history (id, kind, priority, state, attempts, node_id, enqueued_at, idem_key)
    SELECT id, kind, priority, 2, attempts, node_id, enqueued_at, idem_key FROM d $$;

CREATE OR REPLACE FUNCTION ax.discard_dead_letter(p_id bigint) RETURNS boolean LANGUAGE sql AS $$
    WITH d AS (DELETE FROM ax.dead_letters WHERE id = p_id RETURNING *),
    k AS (UPDATE ax.idem_keys k SET finished_at = now(), finished_state = 3 FROM d
           WHERE k.idem_key = ANY (ARRAY(SELECT idem_key FROM d WHERE idem_key IS NOT NULL))
             AND k.idem_key = d.idem_key AND k.task_id = d.id),
    i AS (INSERT INTO ax.history (id, kind, priority, state, attempts, enqueued_at, idem_key)
          SELECT id, kind, priority, 3, attempts, enqueued_at, idem_key FROM d RETURNING id)
    SELECT EXISTS (SELECT 1 FROM i) $$;

-- Migration 4's body; the keys to forget are deleted by key (each maintenance pass runs it).
CREATE OR REPLACE FUNCTION ax.forget_keys(p_retention_ms bigint, p_limit integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE n integer;
BEGIN
    DELETE FROM ax.idem_keys WHERE idem_key = ANY (ARRAY(
        SELECT idem_key FROM ax.idem_keys
         WHERE finished_at < now() - p_retention_ms * interval '1 millisecond'
         ORDER BY finished_at LIMIT p_limit));
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END $$;
)SQL";

} // namespace ax::pg::sql::migrations
