-- One round of one side (run.sh sets the variables): plain (10,000 tasks without a flow; the
-- schema's flow trigger enabled), curenq (the flow through the schema's ax.enqueue_flow_arrays and
-- trigger; false: the one-table prototype of proto_*.sql), nowait (nowait_*.sql's), cur (the
-- schema's ax.flow_settle, saved by run.sh in :settle_cur; false: settle_lock.sql's). Prints the
-- enqueue, the heads' statement (the release of 9,800 steps), and the steps' and tails'
-- statements (128 tasks each) in ms.
TRUNCATE ax.tasks, ax.history, ax.flows, ax.flow_tasks, ax.flow_waiting, ax.flow_tasks2, ax.flow_tasks3;
ALTER TABLE ax.history DISABLE TRIGGER history_flow_settle3;
\if :plain
ALTER TABLE ax.history DISABLE TRIGGER history_flow_settle2;
ALTER TABLE ax.history ENABLE TRIGGER history_flow_settle;
\elif :nowait
ALTER TABLE ax.history DISABLE TRIGGER history_flow_settle2;
ALTER TABLE ax.history DISABLE TRIGGER history_flow_settle;
ALTER TABLE ax.history ENABLE TRIGGER history_flow_settle3;
\elif :curenq
ALTER TABLE ax.history DISABLE TRIGGER history_flow_settle2;
ALTER TABLE ax.history ENABLE TRIGGER history_flow_settle;
\else
ALTER TABLE ax.history DISABLE TRIGGER history_flow_settle;
ALTER TABLE ax.history ENABLE TRIGGER history_flow_settle2;
\endif
\if :cur
\i :settle_cur
\else
\ir settle_lock.sql
\endif
VACUUM ANALYZE ax.tasks;
CHECKPOINT;
\echo :label enqueue
\if :plain
INSERT INTO ax.tasks (kind) SELECT 'noop' FROM generate_series(1, 10000);
\elif :nowait
SELECT count(*) FROM g, ax.enqueue_flow_arrays3('f', g.names, g.kinds, NULL, NULL, NULL, NULL, NULL, NULL, g.dt, g.don);
\elif :curenq
SELECT count(*) FROM g, ax.enqueue_flow_arrays('f', g.names, g.kinds, NULL, NULL, NULL, NULL, NULL, NULL, g.dt, g.don);
\else
SELECT count(*) FROM g, ax.enqueue_flow_arrays2('f', g.names, g.kinds, NULL, NULL, NULL, NULL, NULL, NULL, g.dt, g.don);
\endif
\echo :label claimscan
EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY ON) SELECT id FROM ax.tasks WHERE node_id IS NULL AND grp IS NULL AND run_at <= now() AND kind = ANY ('{noop}') ORDER BY priority, run_at, id LIMIT 200;
\echo :label heads
WITH d AS (DELETE FROM ax.tasks WHERE id IN (SELECT min(id) FROM ax.tasks GROUP BY (id - (SELECT min(id) FROM ax.tasks)) / 100) RETURNING *)
INSERT INTO ax.history (id, kind, priority, state, attempts, enqueued_at) SELECT id, kind, priority, 1, 1, enqueued_at FROM d;
SELECT count(*) AS claimable_after_heads FROM ax.tasks WHERE run_at <= now();
\echo :label steps
DO $$ BEGIN
  FOR i IN 1..200 LOOP
    WITH s AS (SELECT id FROM ax.tasks WHERE run_at <= now() ORDER BY id LIMIT 128),
         d AS (DELETE FROM ax.tasks t USING s WHERE t.id = s.id RETURNING t.*)
    INSERT INTO ax.history (id, kind, priority, state, attempts, enqueued_at) SELECT id, kind, priority, 1, 1, enqueued_at FROM d;
  END LOOP; END $$;
SELECT count(*) AS history_rows, (SELECT count(*) FROM ax.tasks) AS left_in_tasks FROM ax.history;
