// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// Schema migration 15 of ax's distributed mode: workflows made cheaper and pruned (issue 29,
// part 4). Applied once, in order, inside the migrate transaction (detail::migrate in
// connection.hpp); a migration already released is never edited: a change is a new version.
//
// 1. ax.flow_settle replaced (same signature, same outcome): a dependent whose last dependencies
//    just ended is released straight from ax.flow_waiting into ax.tasks (DELETE ... RETURNING
//    into the INSERT), without first writing its count down; only the dependents that still
//    wait are counted down. A fan-out's dependents (one dependency each) were each written twice
//    before their release (the count, then the delete): 9,800 row versions of a 10,000-task
//    flow's 19,600 writes on that path. The dependents are still locked first, in ID order, by
//    their own statement: the release and the count read the counts of that lock's snapshot,
//    which no racing acknowledgement can change any more (one statement deciding on an older
//    snapshot would skip a row a racing statement had just counted down, and it would wait
//    forever).
// 2. Finished flows are pruned (ax.prune_flows, called by ax.maintain, replaced with that one
//    call added): a flow's rows (ax.flows, ax.flow_tasks) go once none of its tasks is left
//    anywhere, waiting, live, in the history or in the dead letters, i.e. once the history's
//    retention (and the dead letters', for a flow with a dead letter) has passed over its last
//    task; until then ax-pg flows and parent_results can still read it.
// 3. ax.limit_lock (migration 11) dropped: it has had no caller since migration 12.

namespace ax::pg::sql::migrations {

/// Migration 15's SQL (several statements, run by the simple protocol).
inline constexpr const char* v15 = R"SQL(
DROP FUNCTION ax.limit_lock(text, text);

-- Flow tasks ended (p_how: NULL for a success, else how it ended, e.g. 'was dead-lettered';
-- tasks outside any flow are ignored): cancels the waiting dependents that a dependency that did
-- not succeed ends (unless run_anyway), with the reason; releases into ax.tasks (same ID) those
-- with no dependency left and counts the others down; repeats for the tasks it cancelled. Each
-- round is a few set statements, whatever the number of tasks. The dependents are locked in ID
-- order first, so acknowledgements racing on the same fan-in task never deadlock, and the
-- statements after the lock read counts that no one else can change.
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
                 GROUP BY c.ch) x;
        EXIT WHEN v_child IS NULL;
        -- A dead letter may come back (replayed, then ending again; or discarded, a history row
        -- of its own): its dependents were settled now, once, so it forgets them.
        IF array_position(p_how, 'was dead-lettered') IS NOT NULL THEN
            UPDATE ax.flow_tasks f SET children = '{}'
              FROM unnest(p_ended, p_how) AS e(id, how)
             WHERE f.task_id = e.id AND e.how = 'was dead-lettered';
        END IF;
        PERFORM 1 FROM ax.flow_waiting WHERE task_id = ANY (v_child) ORDER BY task_id FOR UPDATE;
        p_ended := '{}';
        IF EXISTS (SELECT 1 FROM unnest(v_why) w WHERE w IS NOT NULL) THEN
            WITH d AS (DELETE FROM ax.flow_waiting w USING unnest(v_child, v_why) AS u(ch, why)
                        WHERE w.task_id = u.ch AND u.why IS NOT NULL AND NOT w.run_anyway
                       RETURNING w.task_id, w.kind, w.priority, w.enqueued_at, u.why),
                 r AS (UPDATE ax.flow_tasks f SET reason = d.why FROM d WHERE f.task_id = d.task_id),
                 h AS (INSERT INTO ax.history (id, kind, priority, state, attempts, enqueued_at)
                       SELECT task_id, kind, priority, 2, 0, enqueued_at FROM d)
            SELECT coalesce(array_agg(task_id), '{}') INTO p_ended FROM d;
            p_how := array_fill('was cancelled'::text, ARRAY[cardinality(p_ended)]);
        END IF;
        -- Released: those whose count these endings take to zero, moved whole; counted down:
        -- the rest (disjoint sets of rows, decided on the counts the lock above made final).
        WITH r AS (DELETE FROM ax.flow_waiting w USING unnest(v_child, v_n) AS u(ch, n)
                    WHERE w.task_id = u.ch AND w.deps_left <= u.n RETURNING w.*),
             i AS (INSERT INTO ax.tasks (id, kind, priority, payload, tags, max_attempts,
                                         timeout_ms, enqueued_at)
                   SELECT task_id, kind, priority, payload, tags, max_attempts, timeout_ms,
                          enqueued_at
                     FROM r)
        UPDATE ax.flow_waiting w SET deps_left = w.deps_left - u.n
          FROM unnest(v_child, v_n) AS u(ch, n)
         WHERE w.task_id = u.ch AND w.deps_left > u.n;
    END LOOP;
END $$;

-- Deletes the rows of finished flows whose tasks have all left ax's tables (none waiting, live,
-- in the history or in the dead letters: the rings' retention has passed over every one), oldest
-- first, at most p_limit flows and, past the first flow, 10,000 of their tasks per call (a pass
-- stays short however large the flows), among the 10 * p_limit oldest flows created more than
-- p_history_ms ago (a younger one's history rows cannot be gone yet). A flow whose tasks are
-- still there is found so by its first task that is, in one index probe or a few. Returns the
-- flows deleted.
CREATE FUNCTION ax.prune_flows(p_history_ms bigint, p_limit integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE v_gone bigint[];
BEGIN
    SELECT array_agg(g.id) INTO v_gone
      FROM (SELECT c.id, sum(c.tasks) OVER (ORDER BY c.id) - c.tasks AS before
              FROM (SELECT fl.id, fl.tasks
                      FROM (SELECT id, tasks FROM ax.flows
                             WHERE created_at < now() - greatest(p_history_ms, 0) * interval '1 millisecond'
                             ORDER BY id LIMIT 10 * greatest(p_limit, 1)) fl
                     WHERE NOT EXISTS (
                           SELECT 1 FROM ax.flow_tasks f
                            WHERE f.flow_id = fl.id
                              AND (EXISTS (SELECT 1 FROM ax.flow_waiting w WHERE w.task_id = f.task_id)
                                   OR EXISTS (SELECT 1 FROM ax.tasks t WHERE t.id = f.task_id)
                                   OR EXISTS (SELECT 1 FROM ax.history h WHERE h.id = f.task_id)
                                   OR EXISTS (SELECT 1 FROM ax.dead_letters d WHERE d.id = f.task_id)))
                     ORDER BY fl.id LIMIT greatest(p_limit, 1)) c) g
     WHERE g.before < 10000;
    IF v_gone IS NULL THEN
        RETURN 0;
    END IF;
    DELETE FROM ax.flow_tasks WHERE flow_id = ANY (v_gone);
    DELETE FROM ax.flows WHERE id = ANY (v_gone);
    RETURN cardinality(v_gone);
END $$;

-- Migration 4's ax.maintain, the same, and it prunes finished flows (ax.prune_flows, up to 100
-- flows a pass) after the rings turned.
CREATE OR REPLACE FUNCTION ax.maintain(p_history_ms bigint, p_prune_limit integer,
    OUT got_lock boolean, OUT reclaimed_batches bigint[], OUT reclaimed_nodes text[],
    OUT requeued integer, OUT dead integer, OUT pruned integer, OUT next_expiry_ms bigint,
    OUT dead_rows bigint)
LANGUAGE plpgsql AS $$
DECLARE expired bigint[]; r record;
BEGIN
    requeued := 0; dead := 0; pruned := 0;
    reclaimed_batches := '{}'; reclaimed_nodes := '{}';
    got_lock := pg_try_advisory_xact_lock(7887330361530609268);
    IF NOT got_lock THEN
        SELECT ceil(extract(epoch FROM min(lease_until) - now()) * 1000)::bigint
          INTO next_expiry_ms FROM ax.batches WHERE lease_until >= now();
        RETURN;
    END IF;
    SELECT array_agg(b.id ORDER BY b.id),
           array_agg(DISTINCT coalesce(n.name, '') || '#' || b.node_id)
      INTO expired, reclaimed_nodes
      FROM ax.batches b LEFT JOIN ax.nodes n ON n.id = b.node_id
     WHERE b.lease_until < now();
    IF expired IS NOT NULL THEN
        reclaimed_batches := expired;
        DELETE FROM ax.batches WHERE id = ANY (expired);
        FOR r IN SELECT id, attempts, max_attempts, cancel_requested, node_id FROM ax.tasks
                 WHERE batch_id = ANY (expired) ORDER BY id FOR UPDATE
        LOOP
            IF r.cancel_requested THEN
                PERFORM ax.finish_cancelled(r.id);
            ELSIF r.attempts >= r.max_attempts THEN
                PERFORM ax.dead_letter(r.id, 'lease expired on node ' || r.node_id, 'attempts exhausted');
                dead := dead + 1;
            ELSE
                UPDATE ax.tasks SET node_id = NULL, batch_id = NULL,
                       errors = errors || ('lease expired on node ' || r.node_id)
                WHERE id = r.id;
                requeued := requeued + 1;
            END IF;
        END LOOP;
        UPDATE ax.counters SET value = value + cardinality(expired) WHERE name = 'reclaimed_batches';
        UPDATE ax.counters SET value = value + requeued + dead WHERE name = 'reclaimed_tasks';
        PERFORM pg_notify('ax_wake', '');
    ELSE
        reclaimed_nodes := '{}';
    END IF;
    SELECT ceil(extract(epoch FROM min(lease_until) - now()) * 1000)::bigint
      INTO next_expiry_ms FROM ax.batches WHERE lease_until >= now();
    DELETE FROM ax.nodes WHERE lease_until < now() - interval '10 minutes';
    pruned := ax.turn_ring('history', p_history_ms) + ax.turn_ring('dead_letters', NULL);
    IF p_prune_limit > 0 THEN
        pruned := pruned + ax.forget_keys(p_history_ms, p_prune_limit);
    END IF;
    PERFORM ax.prune_flows(p_history_ms, 100);
    -- Only for a role that may vacuum the table (its owner's or the database owner's rights, or
    -- a superuser): for any other VACUUM would just warn and skip.
    IF (SELECT pg_has_role(c.relowner, 'USAGE') FROM pg_class c WHERE c.oid = 'ax.tasks'::regclass)
       OR (SELECT pg_has_role(d.datdba, 'USAGE') FROM pg_database d
            WHERE d.datname = current_database()) THEN
        dead_rows := pg_stat_get_dead_tuples('ax.tasks'::regclass);
    END IF;
END $$;
)SQL";

} // namespace ax::pg::sql::migrations
