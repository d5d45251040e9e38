// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// Schema migration 10 of ax's distributed mode: workflows (issue 29, part 4). Applied once, in
// order, inside the migrate transaction (detail::migrate in connection.hpp); a migration already
// released is never edited: a change is a new version.
//
// A flow is a graph of tasks enqueued in one call (ax.enqueue_flow). A task whose dependencies
// have not all ended waits in ax.flow_waiting, outside ax.tasks: the claim never sees it and is
// unchanged, and ax.tasks is not altered. Every ending of a task writes a row of ax.history or
// ax.dead_letters; a statement trigger on each (with the statement's new rows as a transition
// table, which the insert already holds) settles the flow tasks among them at once
// (ax.flow_settle: a few set statements per acknowledgement, not per task). While no flow task
// waits, the trigger returns after one look at the empty ax.flow_waiting.

namespace ax::pg::sql::migrations {

/// Migration 10's SQL (several statements, run by the simple protocol).
inline constexpr const char* v10 = R"SQL(
CREATE TABLE ax.flows (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name       text    NOT NULL,
    tasks      integer NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
-- One row per task of a flow, for as long as its flow is kept: its name in the flow, the IDs of
-- its dependencies (parents) and dependents (children), and why the flow cancelled it (NULL: it
-- was not).
CREATE TABLE ax.flow_tasks (
    task_id  bigint   PRIMARY KEY,
    flow_id  bigint   NOT NULL,
    name     text     NOT NULL,
    parents  bigint[] NOT NULL,
    children bigint[] NOT NULL,
    reason   text
);
CREATE INDEX flow_tasks_flow ON ax.flow_tasks (flow_id);
-- Tasks whose dependencies have not all ended: the whole task, and how many dependencies are
-- left. Released into ax.tasks (same ID) when the count reaches 0.
CREATE TABLE ax.flow_waiting (
    task_id      bigint   PRIMARY KEY,
    flow_id      bigint   NOT NULL,
    kind         text     NOT NULL,
    priority     smallint NOT NULL,
    payload      bytea    NOT NULL,
    tags         text[]   NOT NULL,
    max_attempts integer  NOT NULL,
    timeout_ms   integer  NOT NULL,
    run_anyway   boolean  NOT NULL,   -- run even when a dependency did not succeed
    deps_left    integer  NOT NULL,
    enqueued_at  timestamptz NOT NULL DEFAULT now()
);

-- Flow tasks ended (p_how: NULL for a success, else how it ended, e.g. 'was dead-lettered';
-- tasks outside any flow are ignored): cancels the waiting dependents that a dependency that did
-- not succeed ends (unless run_anyway), with the reason; counts the others down and releases
-- those with no dependency left into ax.tasks (same ID); repeats for the tasks it cancelled. Each
-- round is a few set statements, whatever the number of tasks. The dependents are locked in ID
-- order, so acknowledgements racing on the same fan-in task never deadlock.
CREATE FUNCTION ax.flow_settle(p_ended bigint[], p_how text[]) RETURNS void LANGUAGE plpgsql AS $$
DECLARE v_child bigint[]; v_n integer[]; v_why text[]; v_ready bigint[];
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
        WITH u AS (UPDATE ax.flow_waiting w SET deps_left = w.deps_left - u.n
                     FROM unnest(v_child, v_n) AS u(ch, n)
                    WHERE w.task_id = u.ch
                   RETURNING w.task_id, w.deps_left)
        SELECT array_agg(u.task_id) INTO v_ready FROM u WHERE u.deps_left <= 0;
        IF v_ready IS NOT NULL THEN
            WITH r AS (DELETE FROM ax.flow_waiting w WHERE w.task_id = ANY (v_ready) RETURNING w.*)
            INSERT INTO ax.tasks (id, kind, priority, payload, tags, max_attempts, timeout_ms,
                                  enqueued_at)
            SELECT task_id, kind, priority, payload, tags, max_attempts, timeout_ms, enqueued_at
              FROM r;
        END IF;
    END LOOP;
END $$;

-- After a statement that ended tasks (history or dead letters; `ended` holds its new rows):
-- while no flow task waits, one look at the empty ax.flow_waiting and nothing else; otherwise
-- one ax.flow_settle call for the statement's tasks. Inserts made by ax.flow_settle itself (the
-- tasks it cancels, trigger depth 2) are settled by its own loop, not again here.
CREATE FUNCTION ax.flow_settle_ended() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE v_ids bigint[]; v_how text[];
BEGIN
    IF pg_trigger_depth() > 1 OR NOT EXISTS (SELECT 1 FROM ax.flow_waiting) THEN
        RETURN NULL;
    END IF;
    IF TG_TABLE_NAME = 'history' THEN
        SELECT array_agg(e.id), array_agg(CASE e.state WHEN 1 THEN NULL WHEN 2 THEN 'was cancelled'
                                                       ELSE 'was discarded' END)
          INTO v_ids, v_how FROM ended e;
    ELSE
        SELECT array_agg(e.id), array_agg('was dead-lettered'::text) INTO v_ids, v_how FROM ended e;
    END IF;
    PERFORM ax.flow_settle(v_ids, v_how);
    RETURN NULL;
END $$;
CREATE TRIGGER history_flow_settle AFTER INSERT ON ax.history REFERENCING NEW TABLE AS ended
    FOR EACH STATEMENT EXECUTE FUNCTION ax.flow_settle_ended();
CREATE TRIGGER dead_letters_flow_settle AFTER INSERT ON ax.dead_letters
    REFERENCING NEW TABLE AS ended FOR EACH STATEMENT EXECUTE FUNCTION ax.flow_settle_ended();

-- Cancels waiting flow tasks (never started: attempts 0) and records p_reason; the history
-- trigger settles their dependents. Returns how many it cancelled.
CREATE FUNCTION ax.flow_cancel_waiting(p_ids bigint[], p_reason text) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE v_done bigint[];
BEGIN
    PERFORM 1 FROM ax.flow_waiting WHERE task_id = ANY (p_ids) ORDER BY task_id FOR UPDATE;
    WITH d AS (DELETE FROM ax.flow_waiting w WHERE w.task_id = ANY (p_ids)
               RETURNING w.task_id, w.kind, w.priority, w.enqueued_at),
         r AS (UPDATE ax.flow_tasks f SET reason = p_reason FROM d WHERE f.task_id = d.task_id),
         h AS (INSERT INTO ax.history (id, kind, priority, state, attempts, enqueued_at)
               SELECT task_id, kind, priority, 2, 0, enqueued_at FROM d)
    SELECT coalesce(array_agg(task_id), '{}') INTO v_done FROM d;
    RETURN cardinality(v_done);
END $$;

-- ax.cancel (migration 1) learns waiting flow tasks: they end cancelled at once, and their
-- dependents with them (unless run_anyway). A task released between the two looks is found by
-- the second look at ax.tasks.
CREATE OR REPLACE FUNCTION ax.cancel(p_id bigint) RETURNS text LANGUAGE plpgsql AS $$
DECLARE r record; v_live boolean := false;
BEGIN
    FOR i IN 1 .. 2 LOOP
        SELECT node_id, cancel_requested INTO r FROM ax.tasks WHERE id = p_id FOR UPDATE;
        v_live := FOUND;
        EXIT WHEN v_live;
        IF ax.flow_cancel_waiting(ARRAY[p_id], 'cancelled by request') > 0 THEN
            RETURN 'cancelled';
        END IF;
    END LOOP;
    IF NOT v_live THEN
        IF EXISTS (SELECT 1 FROM ax.history WHERE id = p_id) THEN RETURN 'finished'; END IF;
        IF EXISTS (SELECT 1 FROM ax.dead_letters WHERE id = p_id) THEN RETURN 'dead_lettered'; END IF;
        RETURN 'unknown';
    END IF;
    IF r.node_id IS NULL THEN
        PERFORM ax.finish_cancelled(p_id);
        RETURN 'cancelled';
    END IF;
    UPDATE ax.tasks SET cancel_requested = true WHERE id = p_id;
    PERFORM pg_notify('ax_node_' || r.node_id, p_id::text);
    RETURN 'cancel_requested';
END $$;

-- Enqueues a flow from arrays (one element per task; NULL arrays or elements take ax.enqueue's
-- defaults) and its dependencies as pairs (p_dep_task: the 1-based position of the dependent,
-- p_dep_on: the name of a task it depends on). Tasks without dependencies are claimable at
-- once, the others wait. Refused with SQLSTATE 22023 naming the problem, nothing enqueued: a
-- duplicate or empty task name, a dependency on an unknown name or on the task itself, a
-- cycle, a bad field. Returns one row per task in input order: the flow's ID, the position,
-- the name, the task ID.
CREATE FUNCTION ax.enqueue_flow_arrays(p_flow text, p_names text[], p_kinds text[],
                                       p_payloads bytea[] DEFAULT NULL,
                                       p_priorities integer[] DEFAULT NULL,
                                       p_tags text[] DEFAULT NULL,
                                       p_max_attempts integer[] DEFAULT NULL,
                                       p_timeout_ms integer[] DEFAULT NULL,
                                       p_run_anyway boolean[] DEFAULT NULL,
                                       p_dep_task integer[] DEFAULT NULL,
                                       p_dep_on text[] DEFAULT NULL)
RETURNS TABLE (flow_id bigint, ord integer, name text, id bigint) LANGUAGE plpgsql
-- Every query here joins arrays of the whole flow, whose sizes the planner cannot see (it guesses
-- 10 elements) and would nest loops over: 10,000 tasks took 28 s in the name lookup alone. Hash
-- joins make each a linear pass.
SET enable_nestloop = off AS $$
#variable_conflict use_column
DECLARE
    n integer := coalesce(cardinality(p_names), 0);
    m integer;
    v_max integer := ax.max_payload_bytes();
    b record;
    ec integer[]; ep integer[]; v_forward boolean;
    indeg integer[]; outn integer[]; off integer[]; queue integer[]; qn integer := 0;
    h integer := 1; v integer; c integer; v_cycle text; v_ids bigint[]; v_flow bigint;
BEGIN
    IF p_flow IS NULL OR octet_length(p_flow) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'ax.enqueue_flow: flow name = %: must be 1..200 bytes',
            coalesce(quote_literal(left(p_flow, 40)), 'NULL') USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF n NOT BETWEEN 1 AND 100000 OR array_ndims(p_names) > 1 THEN
        RAISE EXCEPTION 'ax.enqueue_flow: % tasks: a flow has 1..100000 tasks', n
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF cardinality(p_kinds) IS DISTINCT FROM n
       OR coalesce(cardinality(p_payloads), n) <> n OR coalesce(cardinality(p_priorities), n) <> n
       OR coalesce(cardinality(p_tags), n) <> n OR coalesce(cardinality(p_max_attempts), n) <> n
       OR coalesce(cardinality(p_timeout_ms), n) <> n OR coalesce(cardinality(p_run_anyway), n) <> n
       OR coalesce(cardinality(p_dep_task), 0) <> coalesce(cardinality(p_dep_on), 0) THEN
        RAISE EXCEPTION 'ax.enqueue_flow: the task arrays need one element per name (%) and the dependency arrays equal lengths', n
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- The first bad task, in one pass (no write has happened yet).
    SELECT u.i, u.bad, u.nm, u.kind INTO b
      FROM (SELECT u.*,
                   CASE WHEN u.nm IS NULL OR octet_length(u.nm) NOT BETWEEN 1 AND 200 THEN 'name must be 1..200 bytes'
                        WHEN u.kind IS NULL OR octet_length(u.kind) NOT BETWEEN 1 AND 200 THEN 'kind must be 1..200 bytes'
                        WHEN octet_length(u.pl) > v_max THEN 'payload exceeds ax.max_payload_bytes (' || v_max || ')'
                        WHEN u.pr NOT BETWEEN 0 AND 2 THEN 'priority must be 0 (high), 1 (normal) or 2 (low)'
                        WHEN u.tg <> '' AND u.tg !~ '^[^,{"]{1,100}(,[^,{"]{1,100})*$' THEN 'tags must be comma-joined, each 1..100 bytes without '','', ''{'' or ''"'''
                        WHEN u.ma NOT BETWEEN 1 AND 1000 THEN 'max_attempts must be in 1..1000'
                        WHEN u.tm NOT BETWEEN 0 AND 86400000 THEN 'timeout_ms must be in 0..86400000 (24 h)'
                   END AS bad
              FROM unnest(p_names, p_kinds, p_payloads, p_priorities, p_tags, p_max_attempts,
                          p_timeout_ms) WITH ORDINALITY AS u(nm, kind, pl, pr, tg, ma, tm, i)) u
     WHERE u.bad IS NOT NULL ORDER BY u.i LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'ax.enqueue_flow: task % (%): %', b.i,
            coalesce(quote_literal(left(b.nm, 40)), 'NULL'), b.bad USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT x INTO v_cycle FROM unnest(p_names) x GROUP BY x HAVING count(*) > 1 LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'ax.enqueue_flow: task name % appears twice: names identify tasks in a flow',
            quote_literal(left(v_cycle, 40)) USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Dependencies by name, resolved in one hash join; unknown names, self-dependencies and
    -- positions out of range refused (the first in input order). Duplicates stay: a dependent
    -- then counts that dependency twice, and is counted down twice (children holds it twice).
    SELECT coalesce(array_agg(d.t), '{}'), coalesce(array_agg(x.i), '{}'),
           coalesce(bool_and(x.i < d.t), true),
           min(d.k) FILTER (WHERE d.t IS NULL OR d.t NOT BETWEEN 1 AND n OR x.i IS NULL OR x.i = d.t)
      INTO ec, ep, v_forward, v
      FROM unnest(p_dep_task, p_dep_on) WITH ORDINALITY AS d(t, on_name, k)
      LEFT JOIN unnest(p_names) WITH ORDINALITY AS x(nm, i) ON x.nm = d.on_name;
    IF v IS NOT NULL THEN
        SELECT p_dep_task[v] AS t, p_dep_on[v] AS on_name,
               (SELECT x.i FROM unnest(p_names) WITH ORDINALITY AS x(nm, i)
                 WHERE x.nm = p_dep_on[v] LIMIT 1) AS i INTO b;
        IF b.t IS NULL OR b.t NOT BETWEEN 1 AND n THEN
            RAISE EXCEPTION 'ax.enqueue_flow: dependency of task position %: must be in 1..%', b.t, n
                USING ERRCODE = 'invalid_parameter_value';
        ELSIF b.i IS NULL THEN
            RAISE EXCEPTION 'ax.enqueue_flow: task % depends on %, which is not a task of this flow',
                quote_literal(left(p_names[b.t], 40)), coalesce(quote_literal(left(b.on_name, 40)), 'NULL')
                USING ERRCODE = 'invalid_parameter_value';
        ELSE
            RAISE EXCEPTION 'ax.enqueue_flow: task % depends on itself', quote_literal(left(p_names[b.t], 40))
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END IF;
    m := cardinality(ec);
    -- Every dependency listed before its dependent: no cycle is possible. Otherwise Kahn's
    -- algorithm over the positions (edges sorted by parent first: each one's edges are a run).
    IF NOT v_forward THEN
        SELECT array_agg(e.c ORDER BY e.p), array_agg(e.p ORDER BY e.p) INTO ec, ep
          FROM unnest(ec, ep) AS e(c, p);
        indeg := array_fill(0, ARRAY[n]);
        outn := array_fill(0, ARRAY[n]);
        FOR j IN 1 .. m LOOP
            indeg[ec[j]] := indeg[ec[j]] + 1;
            outn[ep[j]] := outn[ep[j]] + 1;
        END LOOP;
        off := array_fill(1, ARRAY[n + 1]);
        FOR j IN 1 .. n LOOP off[j + 1] := off[j] + outn[j]; END LOOP;
        queue := array_fill(0, ARRAY[n]);
        FOR j IN 1 .. n LOOP
            IF indeg[j] = 0 THEN qn := qn + 1; queue[qn] := j; END IF;
        END LOOP;
        WHILE h <= qn LOOP
            v := queue[h]; h := h + 1;
            FOR j IN off[v] .. off[v + 1] - 1 LOOP
                c := ec[j];
                indeg[c] := indeg[c] - 1;
                IF indeg[c] = 0 THEN qn := qn + 1; queue[qn] := c; END IF;
            END LOOP;
        END LOOP;
        IF qn < n THEN
            -- Walk from a task left over to one of its dependencies left over until a task
            -- repeats: that loop is a cycle.
            SELECT j INTO v FROM generate_series(1, n) j WHERE indeg[j] > 0 LIMIT 1;
            outn := array_fill(0, ARRAY[n]); -- position in the walk, 0: not visited
            h := 0;
            WHILE outn[v] = 0 LOOP
                h := h + 1; outn[v] := h;
                SELECT e.p INTO v FROM unnest(ec, ep) AS e(c, p)
                 WHERE e.c = v AND indeg[e.p] > 0 LIMIT 1;
            END LOOP;
            SELECT string_agg(quote_literal(left(p_names[j], 40)), ' depends on ' ORDER BY outn[j])
              INTO v_cycle FROM generate_series(1, n) j WHERE outn[j] >= outn[v];
            RAISE EXCEPTION 'ax.enqueue_flow: the dependencies form a cycle: % depends on %', v_cycle,
                quote_literal(left(p_names[v], 40)) USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END IF;

    INSERT INTO ax.flows (name, tasks) VALUES (p_flow, n) RETURNING ax.flows.id INTO v_flow;
    v_ids := ARRAY(SELECT nextval('ax.tasks_id_seq') FROM generate_series(1, n));
    INSERT INTO ax.flow_tasks (task_id, flow_id, name, parents, children)
    SELECT v_ids[x.i], v_flow, x.nm, coalesce(pa.ids, '{}'), coalesce(ch.ids, '{}')
      FROM unnest(p_names) WITH ORDINALITY AS x(nm, i)
      LEFT JOIN (SELECT e.c, array_agg(v_ids[e.p] ORDER BY e.p) AS ids
                   FROM unnest(ec, ep) AS e(c, p) GROUP BY e.c) pa ON pa.c = x.i
      LEFT JOIN (SELECT e.p, array_agg(v_ids[e.c]) AS ids
                   FROM unnest(ec, ep) AS e(c, p) GROUP BY e.p) ch ON ch.p = x.i;
    INSERT INTO ax.flow_waiting (task_id, flow_id, kind, priority, payload, tags, max_attempts,
                                 timeout_ms, run_anyway, deps_left)
    SELECT v_ids[u.i], v_flow, u.kind, coalesce(u.pr, 1), coalesce(u.pl, ''),
           CASE WHEN coalesce(u.tg, '') = '' THEN '{}'::text[] ELSE string_to_array(u.tg, ',') END,
           coalesce(u.ma, 4), coalesce(u.tm, 0), coalesce(u.ra, false), d.k
      FROM unnest(p_kinds, p_payloads, p_priorities, p_tags, p_max_attempts, p_timeout_ms,
                  p_run_anyway) WITH ORDINALITY AS u(kind, pl, pr, tg, ma, tm, ra, i)
      JOIN (SELECT e.c, count(*)::integer AS k FROM unnest(ec) AS e(c) GROUP BY e.c) d ON d.c = u.i;
    INSERT INTO ax.tasks (id, kind, priority, payload, tags, max_attempts, timeout_ms)
    SELECT v_ids[u.i], u.kind, coalesce(u.pr, 1), coalesce(u.pl, ''),
           CASE WHEN coalesce(u.tg, '') = '' THEN '{}'::text[] ELSE string_to_array(u.tg, ',') END,
           coalesce(u.ma, 4), coalesce(u.tm, 0)
      FROM unnest(p_kinds, p_payloads, p_priorities, p_tags, p_max_attempts, p_timeout_ms)
           WITH ORDINALITY AS u(kind, pl, pr, tg, ma, tm, i)
      LEFT JOIN (SELECT DISTINCT e.c FROM unnest(ec) AS e(c)) d ON d.c = u.i
     WHERE d.c IS NULL
     ORDER BY u.i;
    RETURN QUERY SELECT v_flow, x.i::integer, x.nm, v_ids[x.i]
                   FROM unnest(p_names) WITH ORDINALITY AS x(nm, i) ORDER BY x.i;
END $$;

-- The same from JSON: tasks is an array of objects {"name", "kind", "payload" (text, stored as
-- its UTF-8 bytes), "priority" (0..2 or "high"/"normal"/"low"), "tags" (array of strings),
-- "max_attempts", "timeout_ms", "depends_on" (array of names), "run_anyway" (boolean)}; absent
-- fields take their defaults.
CREATE FUNCTION ax.enqueue_flow(name text, tasks jsonb)
RETURNS TABLE (flow_id bigint, ord integer, task_name text, id bigint) LANGUAGE plpgsql AS $$
DECLARE r record; v_bad text;
BEGIN
    IF tasks IS NULL OR jsonb_typeof(tasks) <> 'array' THEN
        RAISE EXCEPTION 'ax.enqueue_flow: tasks must be a JSON array of objects'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT t.i || ': ' || t.why INTO v_bad FROM (
        SELECT i, CASE WHEN jsonb_typeof(e) <> 'object' THEN 'not an object'
                       WHEN jsonb_typeof(e -> 'depends_on') NOT IN ('array', 'null') THEN 'depends_on must be an array of names'
                       WHEN jsonb_typeof(e -> 'tags') NOT IN ('array', 'null') THEN 'tags must be an array of strings'
                       WHEN coalesce(jsonb_typeof(e -> 'name'), 'null') <> 'string' THEN 'name must be a string'
                       WHEN coalesce(jsonb_typeof(e -> 'kind'), 'null') <> 'string' THEN 'kind must be a string'
                       WHEN jsonb_typeof(e -> 'payload') NOT IN ('string', 'null') THEN 'payload must be a string'
                       WHEN jsonb_typeof(e -> 'run_anyway') NOT IN ('boolean', 'null') THEN 'run_anyway must be true or false'
                  END AS why
          FROM jsonb_array_elements(tasks) WITH ORDINALITY AS a(e, i)) t
     WHERE t.why IS NOT NULL ORDER BY t.i LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'ax.enqueue_flow: task %', v_bad USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT array_agg(e ->> 'name' ORDER BY i) AS names, array_agg(e ->> 'kind' ORDER BY i) AS kinds,
           array_agg(convert_to(coalesce(e ->> 'payload', ''), 'UTF8') ORDER BY i) AS payloads,
           array_agg(CASE jsonb_typeof(e -> 'priority') WHEN 'string' THEN ax.priority(e ->> 'priority')
                          ELSE (e ->> 'priority')::integer END ORDER BY i) AS prios,
           array_agg((SELECT string_agg(t, ',') FROM jsonb_array_elements_text(e -> 'tags') t)
                     ORDER BY i) AS tags,
           array_agg((e ->> 'max_attempts')::integer ORDER BY i) AS attempts,
           array_agg((e ->> 'timeout_ms')::integer ORDER BY i) AS timeouts,
           array_agg((e ->> 'run_anyway')::boolean ORDER BY i) AS anyway
      INTO r FROM jsonb_array_elements(tasks) WITH ORDINALITY AS a(e, i);
    RETURN QUERY
    SELECT f.flow_id, f.ord, f.name, f.id
      FROM ax.enqueue_flow_arrays(enqueue_flow.name, r.names, r.kinds, r.payloads, r.prios, r.tags,
               r.attempts, r.timeouts, r.anyway,
               ARRAY(SELECT a.i::integer FROM jsonb_array_elements(tasks) WITH ORDINALITY AS a(e, i),
                            jsonb_array_elements_text(coalesce(a.e -> 'depends_on', '[]')) WITH ORDINALITY AS d(nm, k)
                      ORDER BY a.i, d.k),
               ARRAY(SELECT d.nm FROM jsonb_array_elements(tasks) WITH ORDINALITY AS a(e, i),
                            jsonb_array_elements_text(coalesce(a.e -> 'depends_on', '[]')) WITH ORDINALITY AS d(nm, k)
                      ORDER BY a.i, d.k)) f;
END $$;

-- Where each task of flow p_flow is: waiting (for dependencies), pending, scheduled, running,
-- succeeded, cancelled, discarded, dead_lettered, or unknown (its history was pruned); with
-- the reason the flow cancelled it and its dependencies' names.
CREATE FUNCTION ax.flow_task_states(p_flow bigint)
RETURNS TABLE (task_id bigint, name text, state text, reason text, depends_on text[])
LANGUAGE sql STABLE AS $$
    SELECT f.task_id, f.name,
           CASE WHEN w.task_id IS NOT NULL THEN 'waiting'
                WHEN t.node_id IS NOT NULL THEN 'running'
                WHEN t.id IS NOT NULL AND t.run_at > now() THEN 'scheduled'
                WHEN t.id IS NOT NULL THEN 'pending'
                WHEN EXISTS (SELECT 1 FROM ax.dead_letters d WHERE d.id = f.task_id) THEN 'dead_lettered'
                ELSE coalesce((SELECT CASE h.state WHEN 1 THEN 'succeeded' WHEN 2 THEN 'cancelled'
                                                   ELSE 'discarded' END
                                 FROM ax.history h WHERE h.id = f.task_id LIMIT 1), 'unknown')
           END,
           f.reason,
           ARRAY(SELECT p.name FROM unnest(f.parents) WITH ORDINALITY AS u(id, k)
                   JOIN ax.flow_tasks p ON p.task_id = u.id ORDER BY u.k)
      FROM ax.flow_tasks f
      LEFT JOIN ax.flow_waiting w ON w.task_id = f.task_id
      LEFT JOIN ax.tasks t ON t.id = f.task_id
     WHERE f.flow_id = p_flow
     ORDER BY f.task_id $$;

-- Progress of the newest p_limit flows (or of flow p_flow alone): how many of its tasks are in
-- each state; finished when none is waiting, pending, scheduled or running.
CREATE FUNCTION ax.flow_progress(p_flow bigint DEFAULT NULL, p_limit integer DEFAULT 20)
RETURNS TABLE (flow_id bigint, name text, created_at timestamptz, tasks integer,
               waiting bigint, pending bigint, running bigint, succeeded bigint,
               cancelled bigint, dead_lettered bigint, other bigint, finished boolean)
LANGUAGE sql STABLE AS $$
    SELECT fl.id, fl.name, fl.created_at, fl.tasks,
           count(*) FILTER (WHERE s.state = 'waiting'),
           count(*) FILTER (WHERE s.state IN ('pending', 'scheduled')),
           count(*) FILTER (WHERE s.state = 'running'),
           count(*) FILTER (WHERE s.state = 'succeeded'),
           count(*) FILTER (WHERE s.state = 'cancelled'),
           count(*) FILTER (WHERE s.state = 'dead_lettered'),
           count(*) FILTER (WHERE s.state IN ('discarded', 'unknown')),
           count(*) FILTER (WHERE s.state IN ('waiting', 'pending', 'scheduled', 'running')) = 0
      FROM (SELECT * FROM ax.flows WHERE p_flow IS NULL OR id = p_flow
             ORDER BY id DESC LIMIT p_limit) fl
      CROSS JOIN LATERAL ax.flow_task_states(fl.id) s
     GROUP BY fl.id, fl.name, fl.created_at, fl.tasks
     ORDER BY fl.id DESC $$;

-- The outcomes of task p_id's dependencies, in the order the flow lists them: name, ID, state
-- (TaskState's value, as Client::result reads it), attempts, result (NULL: none), last error.
CREATE FUNCTION ax.flow_parent_results(p_id bigint)
RETURNS TABLE (name text, id bigint, state smallint, attempts integer, result bytea, error text)
LANGUAGE sql STABLE AS $$
    SELECT p.name, u.id, o.state, o.attempts, o.result, o.error
      FROM ax.flow_tasks c
      CROSS JOIN LATERAL unnest(c.parents) WITH ORDINALITY AS u(id, k)
      JOIN ax.flow_tasks p ON p.task_id = u.id
      LEFT JOIN LATERAL (
          SELECT (CASE WHEN t.node_id IS NOT NULL THEN 2 WHEN t.run_at > now() THEN 1 ELSE 0 END)::int2,
                 t.attempts, NULL::bytea, t.errors[cardinality(t.errors)]
            FROM ax.tasks t WHERE t.id = u.id
          UNION ALL
          SELECT 5::int2, d.attempts, NULL::bytea, d.errors[cardinality(d.errors)]
            FROM ax.dead_letters d WHERE d.id = u.id
          UNION ALL
          SELECT (CASE h.state WHEN 1 THEN 3 WHEN 2 THEN 4 ELSE 6 END)::int2, h.attempts, h.result,
                 CASE h.state WHEN 2 THEN 'cancelled' WHEN 3 THEN 'discarded' END
            FROM ax.history h WHERE h.id = u.id
          UNION ALL
          SELECT 1::int2, 0, NULL::bytea, NULL FROM ax.flow_waiting w WHERE w.task_id = u.id
          LIMIT 1) AS o(state, attempts, result, error) ON true
     WHERE c.task_id = p_id
     ORDER BY u.k $$;
)SQL";

} // namespace ax::pg::sql::migrations
