-- Side "nowait" of run.sh: migration 15's settle over ax.flow_tasks3; a dependent whose count
-- these endings take to zero is copied into ax.tasks (nothing deleted, nothing written in
-- ax.flow_tasks3), the others counted down. (A prototype: the cancel path and the states a
-- released task reads as are left out.)
CREATE FUNCTION ax.flow_settle3(p_ended bigint[], p_how text[]) RETURNS void
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
                  JOIN ax.flow_tasks3 f ON f.task_id = e.id
                  CROSS JOIN LATERAL unnest(f.children) AS c(ch)
                 GROUP BY c.ch) x;
        EXIT WHEN v_child IS NULL;
        PERFORM 1 FROM ax.flow_tasks3 WHERE task_id = ANY (v_child) ORDER BY task_id FOR UPDATE;
        p_ended := '{}';
        WITH i AS (INSERT INTO ax.tasks (id, kind, priority, payload, tags, max_attempts,
                                         timeout_ms, enqueued_at)
                   SELECT f.task_id, f.kind, f.priority, f.payload, f.tags, f.max_attempts,
                          f.timeout_ms, f.enqueued_at
                     FROM ax.flow_tasks3 f JOIN unnest(v_child, v_n) AS u(ch, n) ON f.task_id = u.ch
                    WHERE f.deps_left <= u.n)
        UPDATE ax.flow_tasks3 f SET deps_left = f.deps_left - u.n
          FROM unnest(v_child, v_n) AS u(ch, n)
         WHERE f.task_id = u.ch AND f.deps_left > u.n;
    END LOOP;
END $$;
CREATE FUNCTION ax.flow_settle_ended3() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE v_ids bigint[]; v_how text[];
BEGIN
    IF pg_trigger_depth() > 1 THEN RETURN NULL; END IF;
    SELECT array_agg(e.id), array_agg(CASE e.state WHEN 1 THEN NULL ELSE 'ended otherwise' END)
      INTO v_ids, v_how FROM ended e;
    PERFORM ax.flow_settle3(v_ids, v_how);
    RETURN NULL;
END $$;
CREATE TRIGGER history_flow_settle3 AFTER INSERT ON ax.history REFERENCING NEW TABLE AS ended
    FOR EACH STATEMENT EXECUTE FUNCTION ax.flow_settle_ended3();
ALTER TABLE ax.history DISABLE TRIGGER history_flow_settle3;
