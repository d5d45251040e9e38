-- The one-table prototype's enqueue (bench/pg/flows_sql/run.sh, docs/bench/pg-flows.md run 4; not
-- part of the schema): migration 10's ax.enqueue_flow_arrays as ax.enqueue_flow_arrays2, its last
-- inserts replaced: every task into ax.tasks (waiting ones with run_at 'infinity') and one row per
-- task into ax.flow_tasks2, which also holds deps_left and run_anyway (no ax.flow_waiting).
CREATE TABLE ax.flow_tasks2 (
    task_id bigint PRIMARY KEY, flow_id bigint NOT NULL, name text NOT NULL,
    parents bigint[] NOT NULL, children bigint[] NOT NULL, deps_left integer NOT NULL,
    run_anyway boolean NOT NULL, reason text);
CREATE INDEX flow_tasks2_flow ON ax.flow_tasks2 (flow_id);
CREATE FUNCTION ax.enqueue_flow_arrays2(p_flow text, p_names text[], p_kinds text[],
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
    INSERT INTO ax.flow_tasks2 (task_id, flow_id, name, parents, children, deps_left, run_anyway)
    SELECT v_ids[x.i], v_flow, x.nm, coalesce(pa.ids, '{}'), coalesce(ch.ids, '{}'),
           coalesce(cardinality(pa.ids), 0), coalesce(p_run_anyway[x.i], false)
      FROM unnest(p_names) WITH ORDINALITY AS x(nm, i)
      LEFT JOIN (SELECT e.c, array_agg(v_ids[e.p] ORDER BY e.p) AS ids
                   FROM unnest(ec, ep) AS e(c, p) GROUP BY e.c) pa ON pa.c = x.i
      LEFT JOIN (SELECT e.p, array_agg(v_ids[e.c]) AS ids
                   FROM unnest(ec, ep) AS e(c, p) GROUP BY e.p) ch ON ch.p = x.i;
    INSERT INTO ax.tasks (id, kind, priority, payload, tags, max_attempts, timeout_ms, run_at)
    SELECT v_ids[u.i], u.kind, coalesce(u.pr, 1), coalesce(u.pl, ''),
           CASE WHEN coalesce(u.tg, '') = '' THEN '{}'::text[] ELSE string_to_array(u.tg, ',') END,
           coalesce(u.ma, 4), coalesce(u.tm, 0),
           CASE WHEN d.c IS NULL THEN now() ELSE 'infinity'::timestamptz END
      FROM unnest(p_kinds, p_payloads, p_priorities, p_tags, p_max_attempts, p_timeout_ms)
           WITH ORDINALITY AS u(kind, pl, pr, tg, ma, tm, i)
      LEFT JOIN (SELECT DISTINCT e.c FROM unnest(ec) AS e(c)) d ON d.c = u.i
     ORDER BY u.i;
    RETURN QUERY SELECT v_flow, x.i::integer, x.nm, v_ids[x.i]
                   FROM unnest(p_names) WITH ORDINALITY AS x(nm, i) ORDER BY x.i;
END $$;

