-- The one-table prototype's settle (run.sh; not part of the schema): migration 15's
-- ax.flow_settle over ax.flow_tasks2, releasing by an UPDATE of run_at; its trigger (disabled until a
-- round enables it); and the benchmark graph g (100 x head -> 98 steps -> tail) as SQL arrays.
CREATE FUNCTION ax.flow_settle2(p_ended bigint[], p_how text[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE v_child bigint[]; v_n integer[]; v_why text[]; v_rel integer;
BEGIN
    WHILE cardinality(p_ended) > 0 LOOP
        SELECT array_agg(x.ch ORDER BY x.ch), array_agg(x.n ORDER BY x.ch),
               array_agg(x.why ORDER BY x.ch)
          INTO v_child, v_n, v_why
          FROM (SELECT c.ch, count(*)::integer AS n,
                       min(CASE WHEN e.how IS NOT NULL THEN 'dependency ' || quote_literal(f.name)
                                || ' (task ' || f.task_id || ') ' || e.how END) AS why
                  FROM unnest(p_ended, p_how) AS e(id, how)
                  JOIN ax.flow_tasks2 f ON f.task_id = e.id
                  CROSS JOIN LATERAL unnest(f.children) AS c(ch)
                 GROUP BY c.ch) x;
        EXIT WHEN v_child IS NULL;
        PERFORM 1 FROM ax.flow_tasks2 WHERE task_id = ANY (v_child) ORDER BY task_id FOR UPDATE;
        p_ended := '{}';
        IF EXISTS (SELECT 1 FROM unnest(v_why) w WHERE w IS NOT NULL) THEN
            WITH d AS (DELETE FROM ax.tasks t USING unnest(v_child, v_why) AS u(ch, why), ax.flow_tasks2 f
                        WHERE t.id = u.ch AND f.task_id = u.ch AND u.why IS NOT NULL AND NOT f.run_anyway
                          AND t.run_at = 'infinity'
                       RETURNING t.id, t.kind, t.priority, t.enqueued_at, u.why),
                 r AS (UPDATE ax.flow_tasks2 f SET reason = d.why FROM d WHERE f.task_id = d.id),
                 h AS (INSERT INTO ax.history (id, kind, priority, state, attempts, enqueued_at)
                       SELECT id, kind, priority, 2, 0, enqueued_at FROM d)
            SELECT coalesce(array_agg(id), '{}') INTO p_ended FROM d;
            p_how := array_fill('was cancelled'::text, ARRAY[cardinality(p_ended)]);
        END IF;
        WITH r AS (UPDATE ax.tasks t SET run_at = now()
                     FROM unnest(v_child, v_n) AS u(ch, n) JOIN ax.flow_tasks2 f ON f.task_id = u.ch
                    WHERE t.id = u.ch AND t.run_at = 'infinity' AND f.deps_left <= u.n
                   RETURNING t.id),
             c AS (UPDATE ax.flow_tasks2 f SET deps_left = f.deps_left - u.n
                     FROM unnest(v_child, v_n) AS u(ch, n)
                    WHERE f.task_id = u.ch AND f.deps_left > u.n)
        SELECT count(*) INTO v_rel FROM r;
        IF v_rel > 0 THEN PERFORM pg_notify('ax_wake', ''); END IF;
    END LOOP;
END $$;
CREATE FUNCTION ax.flow_settle_ended2() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE v_ids bigint[]; v_how text[];
BEGIN
    IF pg_trigger_depth() > 1 THEN RETURN NULL; END IF;
    SELECT array_agg(e.id), array_agg(CASE e.state WHEN 1 THEN NULL WHEN 2 THEN 'was cancelled'
                                                   ELSE 'was discarded' END)
      INTO v_ids, v_how FROM ended e;
    PERFORM ax.flow_settle2(v_ids, v_how);
    RETURN NULL;
END $$;
CREATE TRIGGER history_flow_settle2 AFTER INSERT ON ax.history REFERENCING NEW TABLE AS ended
    FOR EACH STATEMENT EXECUTE FUNCTION ax.flow_settle_ended2();
ALTER TABLE ax.history DISABLE TRIGGER history_flow_settle2;
-- the graph: 100 groups of head -> 98 steps -> tail (positions 1-based, grp*100 + j + 1)
CREATE TABLE g AS
WITH e AS (SELECT grp * 100 + j + 1 AS t, 'g' || grp || 'h' AS o, j AS k
             FROM generate_series(0, 99) grp, generate_series(1, 98) j
           UNION ALL
           SELECT grp * 100 + 100, 'g' || grp || 's' || j, j
             FROM generate_series(0, 99) grp, generate_series(1, 98) j)
SELECT (SELECT array_agg(CASE WHEN j = 0 THEN 'g' || grp || 'h' WHEN j = 99 THEN 'g' || grp || 't'
                              ELSE 'g' || grp || 's' || j END ORDER BY grp, j)
          FROM generate_series(0, 99) grp, generate_series(0, 99) j) AS names,
       array_fill('noop'::text, ARRAY[10000]) AS kinds,
       (SELECT array_agg(t ORDER BY t, k) FROM e) AS dt,
       (SELECT array_agg(o ORDER BY t, k) FROM e) AS don;
