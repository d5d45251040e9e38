// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// Schema migration 16 of ax's distributed mode: flow tasks and recurring schedules carry a limit
// group (issue 29). Applied once, in order, inside the migrate transaction (detail::migrate in
// connection.hpp); a migration already released is never edited: a change is a new version.
//
// Until now a flow task's NewTask::group was dropped on the way in (ax.enqueue_flow_arrays had no
// column for it), so a flow's steps ran outside their group's limits, and a schedule's tasks could
// not name one. Now:
// 1. ax.flow_waiting keeps the group and key of a waiting flow task, and ax.flow_settle (v15's
//    body) releases them into ax.tasks with it; the heads go in with theirs at once.
// 2. ax.enqueue_flow_arrays takes two more arrays, p_groups and p_group_keys, last, with defaults;
//    it is dropped and created again (an added parameter would make a second overload, and calls
//    naming only the old parameters would match both), so every earlier call means what it
//    meant. The rules are Client's and ax.enqueue's: a group of at most 200 bytes ('' or NULL:
//    none), a key of at most 200 bytes that needs a group; SQLSTATE 22023 naming the task.
// 3. ax.enqueue_flow (JSON) reads "group_name" and "group_key", and refuses a field it does not
//    know (a misspelt "depends_on" used to enqueue a task with no dependencies, silently).
// 4. ax.schedules gains grp and grp_key: each tick's task is in the schedule's group (the
//    client's and the node's statements in sql/schedules.hpp).

namespace ax::pg::sql::migrations {

/// Migration 16's SQL (several statements, run by the simple protocol).
inline constexpr const char* v16 = R"SQL(
ALTER TABLE ax.flow_waiting ADD COLUMN grp text, ADD COLUMN grp_key text NOT NULL DEFAULT '',
    ADD CONSTRAINT flow_waiting_grp_len
    CHECK ((grp IS NULL AND grp_key = '') OR (length(grp) BETWEEN 1 AND 200 AND length(grp_key) <= 200));
ALTER TABLE ax.schedules ADD COLUMN grp text, ADD COLUMN grp_key text NOT NULL DEFAULT '',
    ADD CONSTRAINT schedules_grp_len
    CHECK ((grp IS NULL AND grp_key = '') OR (length(grp) BETWEEN 1 AND 200 AND length(grp_key) <= 200));

DROP FUNCTION ax.enqueue_flow_arrays(text, text[], text[], bytea[], integer[], text[], integer[],
                                     integer[], boolean[], integer[], text[]);

-- Migration 10's ax.enqueue_flow_arrays with the tasks' groups (p_groups, p_group_keys).
CREATE FUNCTION ax.enqueue_flow_arrays(p_flow text, p_names text[], p_kinds text[],
                                       p_payloads bytea[] DEFAULT NULL,
                                       p_priorities integer[] DEFAULT NULL,
                                       p_tags text[] DEFAULT NULL,
                                       p_max_attempts integer[] DEFAULT NULL,
                                       p_timeout_ms integer[] DEFAULT NULL,
                                       p_run_anyway boolean[] DEFAULT NULL,
                                       p_dep_task integer[] DEFAULT NULL,
                                       p_dep_on text[] DEFAULT NULL,
                                       p_groups text[] DEFAULT NULL,
                                       p_group_keys text[] DEFAULT NULL)
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
       OR coalesce(cardinality(p_groups), n) <> n OR coalesce(cardinality(p_group_keys), n) <> n
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
                        WHEN octet_length(u.gn) > 200 THEN 'group_name must be at most 200 bytes'
                        WHEN octet_length(u.gk) > 200 THEN 'group_key must be at most 200 bytes'
                        WHEN coalesce(u.gn, '') = '' AND coalesce(u.gk, '') <> '' THEN 'group_key needs a group_name (a key partitions a group)'
                   END AS bad
              FROM unnest(p_names, p_kinds, p_payloads, p_priorities, p_tags, p_max_attempts,
                          p_timeout_ms, p_groups, p_group_keys)
                   WITH ORDINALITY AS u(nm, kind, pl, pr, tg, ma, tm, gn, gk, i)) u
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
                                 timeout_ms, run_anyway, deps_left, grp, grp_key)
    SELECT v_ids[u.i], v_flow, u.kind, coalesce(u.pr, 1), coalesce(u.pl, ''),
           CASE WHEN coalesce(u.tg, '') = '' THEN '{}'::text[] ELSE string_to_array(u.tg, ',') END,
           coalesce(u.ma, 4), coalesce(u.tm, 0), coalesce(u.ra, false), d.k, nullif(u.gn, ''),
           CASE WHEN coalesce(u.gn, '') = '' THEN '' ELSE coalesce(u.gk, '') END
      FROM unnest(p_kinds, p_payloads, p_priorities, p_tags, p_max_attempts, p_timeout_ms,
                  p_run_anyway, p_groups, p_group_keys)
           WITH ORDINALITY AS u(kind, pl, pr, tg, ma, tm, ra, gn, gk, i)
      JOIN (SELECT e.c, count(*)::integer AS k FROM unnest(ec) AS e(c) GROUP BY e.c) d ON d.c = u.i;
    INSERT INTO ax.tasks (id, kind, priority, payload, tags, max_attempts, timeout_ms, grp,
                          grp_key)
    SELECT v_ids[u.i], u.kind, coalesce(u.pr, 1), coalesce(u.pl, ''),
           CASE WHEN coalesce(u.tg, '') = '' THEN '{}'::text[] ELSE string_to_array(u.tg, ',') END,
           coalesce(u.ma, 4), coalesce(u.tm, 0), nullif(u.gn, ''),
           CASE WHEN coalesce(u.gn, '') = '' THEN '' ELSE coalesce(u.gk, '') END
      FROM unnest(p_kinds, p_payloads, p_priorities, p_tags, p_max_attempts, p_timeout_ms,
                  p_groups, p_group_keys)
           WITH ORDINALITY AS u(kind, pl, pr, tg, ma, tm, gn, gk, i)
      LEFT JOIN (SELECT DISTINCT e.c FROM unnest(ec) AS e(c)) d ON d.c = u.i
     WHERE d.c IS NULL
     ORDER BY u.i;
    RETURN QUERY SELECT v_flow, x.i::integer, x.nm, v_ids[x.i]
                   FROM unnest(p_names) WITH ORDINALITY AS x(nm, i) ORDER BY x.i;
END $$;

-- Migration 10's JSON form, with "group_name" and "group_key"; an unknown field is refused.
CREATE OR REPLACE FUNCTION ax.enqueue_flow(name text, tasks jsonb)
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
                       WHEN jsonb_typeof(e -> 'group_name') NOT IN ('string', 'null') THEN 'group_name must be a string'
                       WHEN jsonb_typeof(e -> 'group_key') NOT IN ('string', 'null') THEN 'group_key must be a string'
                       ELSE (SELECT 'unknown field ' || quote_literal(left(k, 40)) || ' (fields: name, kind, payload, priority, tags, max_attempts, timeout_ms, depends_on, run_anyway, group_name, group_key)'
                               FROM jsonb_object_keys(e) k
                              WHERE k NOT IN ('name', 'kind', 'payload', 'priority', 'tags', 'max_attempts',
                                              'timeout_ms', 'depends_on', 'run_anyway', 'group_name', 'group_key')
                              ORDER BY k LIMIT 1)
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
           array_agg((e ->> 'run_anyway')::boolean ORDER BY i) AS anyway,
           array_agg(e ->> 'group_name' ORDER BY i) AS groups,
           array_agg(e ->> 'group_key' ORDER BY i) AS group_keys
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
                      ORDER BY a.i, d.k),
               r.groups, r.group_keys) f;
END $$;

-- Migration 15's ax.flow_settle; a released task keeps its group and key.
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
                                         timeout_ms, enqueued_at, grp, grp_key)
                   SELECT task_id, kind, priority, payload, tags, max_attempts, timeout_ms,
                          enqueued_at, grp, grp_key
                     FROM r)
        UPDATE ax.flow_waiting w SET deps_left = w.deps_left - u.n
          FROM unnest(v_child, v_n) AS u(ch, n)
         WHERE w.task_id = u.ch AND w.deps_left > u.n;
    END LOOP;
END $$;

)SQL";

} // namespace ax::pg::sql::migrations
