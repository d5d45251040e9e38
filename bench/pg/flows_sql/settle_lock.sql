-- Migration 15's ax.flow_settle with its FOR UPDATE restricted to the dependents it counts down
-- (run.sh side "lock"; not part of the schema).
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
        PERFORM 1 FROM ax.flow_waiting w JOIN unnest(v_child, v_n) AS u(ch, n) ON w.task_id = u.ch
          WHERE w.deps_left > u.n ORDER BY w.task_id FOR UPDATE OF w;
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

