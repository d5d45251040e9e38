// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// Schema migration 9 of ax's distributed mode: unique tasks with a window and a choice of states
// (issue 28, part 4), the semantics River (UniqueOpts ByPeriod / ByState) and Oban (unique
// period / states) document, through the one arbiter of keys, ax.idem_keys (migration 4). A
// key's row now also carries when its task was enqueued, the state it finished in, and the
// unique options it was enqueued with; a new enqueue with the key answers the row's task only
// when ax.unique_blocks says it counts (enqueued within the new call's unique_for_ms, in one of
// its unique_states), else the row passes to the new task (ON CONFLICT ... DO UPDATE, so racing
// producers still serialize on the row). ax.enqueue / ax.enqueue_many are replaced (DROP +
// CREATE: an overload with the extra parameters would make the old calls ambiguous) with two
// optional parameters each. Applied once, in order, inside the migrate transaction
// (detail::migrate in connection.hpp); a migration already released is never edited: a change
// is a new version.
//
// What decides, and why without racing joins: the row is locked by the conflicting insert, and
// its version is the newest committed one (possibly newer than the statement's snapshot). Every
// move that ends a task (acknowledgement, cancel, discard) writes finished_at and finished_state
// into the row, so a finished state is read from the locked row itself. Only the live states
// (pending vs running) and dead letters, which the claim and the failure path do not record in
// the row (the claim is the hot path), are read from ax.tasks / ax.dead_letters under the
// statement's snapshot; a task too new for that snapshot counts as pending (it was just
// enqueued). A finished task's key is remembered for the history retention after it ended
// (ax.forget_keys), so a window longer than that ends with it for finished tasks.

namespace ax::pg::sql::migrations {

/// Migration 9's SQL (several statements, run by the simple protocol).
inline constexpr const char* v9 = R"SQL(
-- Fast defaults (no table rewrite); the backfill below sets the known values for keys in use.
ALTER TABLE ax.idem_keys
    ADD COLUMN enqueued_at    timestamptz NOT NULL DEFAULT now(), -- its task's enqueue
    ADD COLUMN finished_state smallint,   -- ax.history.state once finished_at is set, else NULL
    ADD COLUMN unique_for_ms  bigint   NOT NULL DEFAULT 0,  -- its enqueue's window (0: none)
    ADD COLUMN unique_states  smallint NOT NULL DEFAULT 31; -- its enqueue's states mask
UPDATE ax.idem_keys k SET enqueued_at = h.enqueued_at, finished_state = h.state
  FROM ax.history h WHERE k.finished_at IS NOT NULL AND h.id = k.task_id;
UPDATE ax.idem_keys k SET enqueued_at = t.enqueued_at
  FROM ax.tasks t WHERE k.finished_at IS NULL AND t.id = k.task_id;
UPDATE ax.idem_keys k SET enqueued_at = d.enqueued_at
  FROM ax.dead_letters d WHERE k.finished_at IS NULL AND d.id = k.task_id;

-- The states mask of names: pending (1: waiting, scheduled or retrying, not claimed), running
-- (2: claimed by a node), succeeded (4), failed (8: a dead letter, or discarded), cancelled
-- (16), all (31). For SQL callers: ax.enqueue(..., unique_states => ax.unique_states('pending',
-- 'running')).
CREATE FUNCTION ax.unique_states(VARIADIC p_names text[]) RETURNS integer
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE n text; m integer := 0;
BEGIN
    FOREACH n IN ARRAY p_names LOOP
        m := m | CASE lower(n) WHEN 'pending' THEN 1 WHEN 'running' THEN 2 WHEN 'succeeded' THEN 4
                               WHEN 'failed' THEN 8 WHEN 'cancelled' THEN 16 WHEN 'all' THEN 31 END;
        IF m IS NULL THEN
            RAISE EXCEPTION 'ax.unique_states: %: must be pending, running, succeeded, failed, cancelled or all',
                coalesce(quote_literal(n), 'NULL')
                USING ERRCODE = 'invalid_parameter_value', COLUMN = 'unique_states';
        END IF;
    END LOOP;
    RETURN m;
END $$;

-- Whether a key's current task (the locked ax.idem_keys row's columns) makes an enqueue with
-- window p_for_ms (0: any age) and states mask p_states answer it: enqueued within the window
-- and in one of the states. The defaults (0, 31) answer any holder without reading anything,
-- today's idempotency. The finished states come from the row (written by every finish in the
-- same transaction as the move, so exact however the enqueue raced it); dead letter / running /
-- pending from the statement's snapshot (see the file's comment).
CREATE FUNCTION ax.unique_blocks(p_task bigint, p_enqueued_at timestamptz,
                                 p_finished_at timestamptz, p_finished_state smallint,
                                 p_for_ms bigint, p_states integer)
RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT (p_for_ms = 0 OR p_enqueued_at > now() - p_for_ms * interval '1 millisecond')
       AND (p_states = 31 OR (p_states & CASE
            WHEN p_finished_at IS NOT NULL
                THEN CASE p_finished_state WHEN 2 THEN 16 WHEN 3 THEN 8 ELSE 4 END
            WHEN EXISTS (SELECT 1 FROM ax.dead_letters d WHERE d.id = p_task) THEN 8
            WHEN EXISTS (SELECT 1 FROM ax.tasks t WHERE t.id = p_task AND t.node_id IS NOT NULL)
                THEN 2
            ELSE 1 END) <> 0) $$;

-- The finishes that write a key's row record the state too (only for the row's own task: after
-- a window passed, the key may belong to a newer task).
CREATE OR REPLACE FUNCTION ax.finish_cancelled(p_id bigint) RETURNS void LANGUAGE sql AS $$
    WITH d AS (DELETE FROM ax.tasks WHERE id = p_id RETURNING *),
    k AS (UPDATE ax.idem_keys k SET finished_at = now(), finished_state = 2 FROM d
           WHERE d.idem_key IS NOT NULL AND k.idem_key = d.idem_key AND k.task_id = d.id)
    INSERT INTO ax.history (id, kind, priority, state, attempts, node_id, enqueued_at, idem_key)
    SELECT id, kind, priority, 2, attempts, node_id, enqueued_at, idem_key FROM d $$;

CREATE OR REPLACE FUNCTION ax.discard_dead_letter(p_id bigint) RETURNS boolean LANGUAGE sql AS $$
    WITH d AS (DELETE FROM ax.dead_letters WHERE id = p_id RETURNING *),
    k AS (UPDATE ax.idem_keys k SET finished_at = now(), finished_state = 3 FROM d
           WHERE d.idem_key IS NOT NULL AND k.idem_key = d.idem_key AND k.task_id = d.id),
    i AS (INSERT INTO ax.history (id, kind, priority, state, attempts, enqueued_at, idem_key)
          SELECT id, kind, priority, 3, attempts, enqueued_at, idem_key FROM d RETURNING id)
    SELECT EXISTS (SELECT 1 FROM i) $$;

DROP FUNCTION ax.enqueue(text, bytea, integer, timestamptz, text, text[], integer, integer);
DROP FUNCTION ax.enqueue_many(text[], bytea[], integer[], timestamptz[], text[], text[], integer[],
                              integer[]);

-- Enqueues one task in the caller's transaction and returns its ID (for an idempotency key
-- already taken by a task that counts: that task's ID, and nothing is added). unique_for_ms and
-- unique_states narrow which holder of the key counts (ax.unique_blocks): one enqueued within
-- the last unique_for_ms (0: any age), in one of the states of the unique_states mask
-- (ax.unique_states(...); 31: all). They need an idempotency_key. NULL for any argument but kind
-- means its default. run_at NULL or past: claimable at once (a past time is stored as now(), so
-- it does not jump ahead of tasks enqueued before it). The key's row in ax.idem_keys is the one
-- arbiter, exactly as in Client::enqueue_many's statement (sql/enqueue.hpp); the statement
-- trigger on ax.tasks sends the wake notification, which PostgreSQL delivers at commit.
CREATE FUNCTION ax.enqueue(kind text, payload bytea DEFAULT '', priority integer DEFAULT 1,
                           run_at timestamptz DEFAULT NULL, idempotency_key text DEFAULT NULL,
                           tags text[] DEFAULT '{}', max_attempts integer DEFAULT 4,
                           timeout_ms integer DEFAULT 0, unique_for_ms bigint DEFAULT 0,
                           unique_states integer DEFAULT 31)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_payload bytea := coalesce(enqueue.payload, '');
    v_priority integer := coalesce(enqueue.priority, 1);
    v_run timestamptz := greatest(coalesce(enqueue.run_at, now()), now());
    v_key text := nullif(enqueue.idempotency_key, '');
    v_tags text[] := coalesce(enqueue.tags, '{}');
    v_attempts integer := coalesce(enqueue.max_attempts, 4);
    v_timeout integer := coalesce(enqueue.timeout_ms, 0);
    v_for bigint := coalesce(enqueue.unique_for_ms, 0);
    v_states integer := coalesce(enqueue.unique_states, 31);
    v_max integer;
    v_bad text;
    v_new bigint;
    v_id bigint;
BEGIN
    IF enqueue.kind IS NULL OR octet_length(enqueue.kind) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'ax.enqueue: kind = %: must be 1..200 bytes',
            coalesce(quote_literal(left(enqueue.kind, 40)), 'NULL')
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'kind';
    END IF;
    -- The setting's parse only when it is set (one lookup per call otherwise).
    v_max := CASE WHEN coalesce(current_setting('ax.max_payload_bytes', true), '') = ''
                  THEN 1048576 ELSE ax.max_payload_bytes() END;
    IF octet_length(v_payload) > v_max THEN
        RAISE EXCEPTION 'ax.enqueue: payload = % bytes: exceeds ax.max_payload_bytes (%); store big blobs elsewhere and enqueue their key',
            octet_length(v_payload), v_max
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'payload';
    END IF;
    IF v_priority NOT BETWEEN 0 AND 2 THEN
        RAISE EXCEPTION 'ax.enqueue: priority = %: must be 0 (high), 1 (normal) or 2 (low)', v_priority
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'priority';
    END IF;
    IF v_run > now() + interval '366 days' THEN
        RAISE EXCEPTION 'ax.enqueue: run_at = %: must be at most 366 days ahead', enqueue.run_at
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'run_at';
    END IF;
    IF octet_length(v_key) > 512 THEN
        RAISE EXCEPTION 'ax.enqueue: idempotency_key = % bytes: must be at most 512 bytes',
            octet_length(v_key) USING ERRCODE = 'invalid_parameter_value', COLUMN = 'idempotency_key';
    END IF;
    IF cardinality(v_tags) > 0 THEN
        IF array_ndims(v_tags) > 1 THEN
            RAISE EXCEPTION 'ax.enqueue: tags = %: must be a one-dimensional array', v_tags
                USING ERRCODE = 'invalid_parameter_value', COLUMN = 'tags';
        END IF;
        SELECT t INTO v_bad FROM unnest(v_tags) t
         WHERE t IS NULL OR octet_length(t) NOT BETWEEN 1 AND 100 OR t ~ '[,{"]' LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'ax.enqueue: tags = %: each tag must be 1..100 bytes without '','', ''{'' or ''"''',
                coalesce(quote_literal(left(v_bad, 40)), 'NULL')
                USING ERRCODE = 'invalid_parameter_value', COLUMN = 'tags';
        END IF;
    END IF;
    IF v_attempts NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'ax.enqueue: max_attempts = %: must be in 1..1000', v_attempts
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'max_attempts';
    END IF;
    IF v_timeout NOT BETWEEN 0 AND 86400000 THEN
        RAISE EXCEPTION 'ax.enqueue: timeout_ms = %: must be in 0..86400000 (24 h)', v_timeout
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'timeout_ms';
    END IF;
    IF v_for NOT BETWEEN 0 AND 31622400000 THEN
        RAISE EXCEPTION 'ax.enqueue: unique_for_ms = %: must be in 0..31622400000 (366 days; 0: any age)', v_for
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'unique_for_ms';
    END IF;
    IF v_states NOT BETWEEN 1 AND 31 THEN
        RAISE EXCEPTION 'ax.enqueue: unique_states = %: must be a nonzero mask of 1 pending, 2 running, 4 succeeded, 8 failed, 16 cancelled (ax.unique_states(...))', v_states
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'unique_states';
    END IF;
    IF v_key IS NULL AND (v_for <> 0 OR v_states <> 31) THEN
        RAISE EXCEPTION 'ax.enqueue: % = %: needs an idempotency_key (uniqueness is per key)',
            CASE WHEN v_for <> 0 THEN 'unique_for_ms' ELSE 'unique_states' END,
            CASE WHEN v_for <> 0 THEN v_for ELSE v_states END
            USING ERRCODE = 'invalid_parameter_value',
                  COLUMN = CASE WHEN v_for <> 0 THEN 'unique_for_ms' ELSE 'unique_states' END;
    END IF;

    IF v_key IS NULL THEN
        INSERT INTO ax.tasks (kind, payload, priority, timeout_ms, max_attempts, run_at, tags)
        VALUES (enqueue.kind, v_payload, v_priority, v_timeout, v_attempts, v_run, v_tags)
        RETURNING ax.tasks.id INTO v_id;
        RETURN v_id;
    END IF;
    -- The arbiter of sql/enqueue.hpp's enqueue_keyed_sql: the first enqueue of a key inserts its
    -- row with the new ID; any other conflicts on that row (waiting for the first to commit or
    -- roll back) and gets the committed task ID back unless that task does not count
    -- (ax.unique_blocks), when the row passes to the new ID; only the row's owner inserts a task.
    v_new := nextval('ax.tasks_id_seq');
    INSERT INTO ax.idem_keys AS k (idem_key, task_id, unique_for_ms, unique_states)
    VALUES (v_key, v_new, v_for, v_states)
    ON CONFLICT (idem_key) DO UPDATE SET
            (task_id, enqueued_at, finished_at, finished_state, unique_for_ms, unique_states) =
            (SELECT CASE WHEN d.keeps THEN k.task_id ELSE excluded.task_id END,
                    CASE WHEN d.keeps THEN k.enqueued_at ELSE now() END,
                    CASE WHEN d.keeps THEN k.finished_at END,
                    CASE WHEN d.keeps THEN k.finished_state END,
                    CASE WHEN d.keeps THEN k.unique_for_ms ELSE excluded.unique_for_ms END,
                    CASE WHEN d.keeps THEN k.unique_states ELSE excluded.unique_states END
               FROM (SELECT ax.unique_blocks(k.task_id, k.enqueued_at, k.finished_at,
                                             k.finished_state, excluded.unique_for_ms,
                                             excluded.unique_states) AS keeps) d)
    RETURNING k.task_id INTO v_id;
    IF v_id = v_new THEN
        INSERT INTO ax.tasks (id, kind, payload, priority, timeout_ms, max_attempts, run_at,
                              idem_key, tags)
        VALUES (v_new, enqueue.kind, v_payload, v_priority, v_timeout, v_attempts, v_run, v_key,
                v_tags);
    END IF;
    RETURN v_id;
END $$;

-- Enqueues many tasks with one call, all or nothing, and returns one row per task in input
-- order: (ord: 1-based position, id, existed: the key was taken, id is the first task's). Each
-- argument is an array with one element per kind; a NULL array, or a NULL element, takes the
-- argument's default (ax.enqueue's; unique_for_ms and unique_states as there). tags: each element one task's tags, comma-joined
-- ('gpu,bigmem'; a tag has no comma), '' or NULL for none. An idempotency key may appear once
-- per call (as Client::enqueue_many). Validation is one pass over the arrays before any write;
-- the first bad element is named with its position.
CREATE FUNCTION ax.enqueue_many(kind text[], payload bytea[] DEFAULT NULL,
                                priority integer[] DEFAULT NULL,
                                run_at timestamptz[] DEFAULT NULL,
                                idempotency_key text[] DEFAULT NULL, tags text[] DEFAULT NULL,
                                max_attempts integer[] DEFAULT NULL,
                                timeout_ms integer[] DEFAULT NULL,
                                unique_for_ms bigint[] DEFAULT NULL,
                                unique_states integer[] DEFAULT NULL)
RETURNS TABLE (ord integer, id bigint, existed boolean) LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    n integer := cardinality(enqueue_many.kind);
    v_max integer := ax.max_payload_bytes();
    v_arg text;
    v_len integer;
    b record;
BEGIN
    IF enqueue_many.kind IS NULL OR array_ndims(enqueue_many.kind) > 1 THEN
        RAISE EXCEPTION 'ax.enqueue_many: kind = %: must be a one-dimensional array of kinds',
            coalesce(left(enqueue_many.kind::text, 40), 'NULL')
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'kind';
    END IF;
    IF n = 0 THEN RETURN; END IF;
    FOR v_arg, v_len IN
        SELECT a.name, a.len FROM (VALUES
            ('payload', cardinality(enqueue_many.payload), array_ndims(enqueue_many.payload)),
            ('priority', cardinality(enqueue_many.priority), array_ndims(enqueue_many.priority)),
            ('run_at', cardinality(enqueue_many.run_at), array_ndims(enqueue_many.run_at)),
            ('idempotency_key', cardinality(enqueue_many.idempotency_key),
                                array_ndims(enqueue_many.idempotency_key)),
            ('tags', cardinality(enqueue_many.tags), array_ndims(enqueue_many.tags)),
            ('max_attempts', cardinality(enqueue_many.max_attempts),
                             array_ndims(enqueue_many.max_attempts)),
            ('timeout_ms', cardinality(enqueue_many.timeout_ms),
                           array_ndims(enqueue_many.timeout_ms)),
            ('unique_for_ms', cardinality(enqueue_many.unique_for_ms),
                              array_ndims(enqueue_many.unique_for_ms)),
            ('unique_states', cardinality(enqueue_many.unique_states),
                              array_ndims(enqueue_many.unique_states))) AS a(name, len, dims)
        WHERE a.len IS NOT NULL AND (a.len <> n OR a.dims > 1)
    LOOP
        RAISE EXCEPTION 'ax.enqueue_many: % has % elements for % kinds: each array has one element per task (or is NULL)',
            v_arg, v_len, n USING ERRCODE = 'invalid_parameter_value', COLUMN = v_arg;
    END LOOP;

    -- The first bad element, in one pass (no write has happened yet).
    SELECT u.i, u.bad, u.kind, u.pl, u.pr, u.ra, u.ik, u.tg, u.ma, u.tm, u.uf, u.us INTO b
      FROM (SELECT u.*,
                   CASE WHEN u.kind IS NULL OR octet_length(u.kind) NOT BETWEEN 1 AND 200 THEN 'kind'
                        WHEN octet_length(u.pl) > v_max THEN 'payload'
                        WHEN u.pr NOT BETWEEN 0 AND 2 THEN 'priority'
                        WHEN u.ra > now() + interval '366 days' THEN 'run_at'
                        WHEN octet_length(u.ik) > 512 THEN 'idempotency_key'
                        WHEN u.tg <> '' AND (u.tg !~ '^[^,{"]+(,[^,{"]+)*$'
                             OR (octet_length(u.tg) > 100 AND EXISTS (
                                 SELECT 1 FROM unnest(string_to_array(u.tg, ',')) t
                                  WHERE octet_length(t) > 100))) THEN 'tags'
                        WHEN u.ma NOT BETWEEN 1 AND 1000 THEN 'max_attempts'
                        WHEN u.tm NOT BETWEEN 0 AND 86400000 THEN 'timeout_ms'
                        WHEN u.uf NOT BETWEEN 0 AND 31622400000 THEN 'unique_for_ms'
                        WHEN u.us NOT BETWEEN 1 AND 31 THEN 'unique_states'
                        WHEN coalesce(u.ik, '') = '' AND coalesce(u.uf, 0) <> 0 THEN 'unique_for_ms'
                        WHEN coalesce(u.ik, '') = '' AND coalesce(u.us, 31) <> 31 THEN 'unique_states'
                   END AS bad
              FROM unnest(enqueue_many.kind, enqueue_many.payload, enqueue_many.priority,
                          enqueue_many.run_at, enqueue_many.idempotency_key, enqueue_many.tags,
                          enqueue_many.max_attempts, enqueue_many.timeout_ms,
                          enqueue_many.unique_for_ms, enqueue_many.unique_states)
                   WITH ORDINALITY AS u(kind, pl, pr, ra, ik, tg, ma, tm, uf, us, i)) u
     WHERE u.bad IS NOT NULL ORDER BY u.i LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'ax.enqueue_many: %[%] = %: %', b.bad, b.i,
            CASE b.bad WHEN 'kind' THEN coalesce(quote_literal(left(b.kind, 40)), 'NULL')
                       WHEN 'payload' THEN octet_length(b.pl) || ' bytes'
                       WHEN 'priority' THEN b.pr::text
                       WHEN 'run_at' THEN b.ra::text
                       WHEN 'idempotency_key' THEN octet_length(b.ik) || ' bytes'
                       WHEN 'tags' THEN quote_literal(left(b.tg, 40))
                       WHEN 'max_attempts' THEN b.ma::text
                       WHEN 'unique_for_ms' THEN b.uf::text
                       WHEN 'unique_states' THEN b.us::text
                       ELSE b.tm::text END,
            CASE b.bad WHEN 'kind' THEN 'must be 1..200 bytes'
                       WHEN 'payload' THEN 'exceeds ax.max_payload_bytes (' || v_max
                                           || '); store big blobs elsewhere and enqueue their key'
                       WHEN 'priority' THEN 'must be 0 (high), 1 (normal) or 2 (low)'
                       WHEN 'run_at' THEN 'must be at most 366 days ahead'
                       WHEN 'idempotency_key' THEN 'must be at most 512 bytes'
                       WHEN 'tags' THEN 'each task''s tags comma-joined, each tag 1..100 bytes without '','', ''{'' or ''"'''
                       WHEN 'max_attempts' THEN 'must be in 1..1000'
                       WHEN 'unique_for_ms' THEN CASE WHEN b.uf BETWEEN 0 AND 31622400000
                            THEN 'needs an idempotency_key (uniqueness is per key)'
                            ELSE 'must be in 0..31622400000 (366 days; 0: any age)' END
                       WHEN 'unique_states' THEN CASE WHEN b.us BETWEEN 1 AND 31
                            THEN 'needs an idempotency_key (uniqueness is per key)'
                            ELSE 'must be a nonzero mask of 1 pending, 2 running, 4 succeeded, 8 failed, 16 cancelled (ax.unique_states(...))' END
                       ELSE 'must be in 0..86400000 (24 h)' END
            USING ERRCODE = 'invalid_parameter_value', COLUMN = b.bad;
    END IF;

    IF NOT EXISTS (SELECT 1 FROM unnest(enqueue_many.idempotency_key) k WHERE k <> '') THEN
        -- No key: one INSERT from the arrays. IDs are taken by nextval over the unnest scan, so
        -- ascending ID is input order (as in sql/enqueue.hpp's enqueue_unkeyed_sql).
        RETURN QUERY
        WITH i AS (
            INSERT INTO ax.tasks (id, kind, payload, priority, timeout_ms, max_attempts, run_at, tags)
            SELECT nextval('ax.tasks_id_seq'), u.kind, coalesce(u.pl, ''), coalesce(u.pr, 1),
                   coalesce(u.tm, 0), coalesce(u.ma, 4), greatest(coalesce(u.ra, now()), now()),
                   CASE WHEN coalesce(u.tg, '') = '' THEN '{}'::text[]
                        ELSE string_to_array(u.tg, ',') END
              FROM unnest(enqueue_many.kind, enqueue_many.payload, enqueue_many.priority,
                          enqueue_many.run_at, enqueue_many.tags, enqueue_many.max_attempts,
                          enqueue_many.timeout_ms) AS u(kind, pl, pr, ra, tg, ma, tm)
            RETURNING id)
        SELECT (row_number() OVER (ORDER BY i.id))::integer, i.id, false FROM i ORDER BY i.id;
        RETURN;
    END IF;

    SELECT k INTO v_arg FROM unnest(enqueue_many.idempotency_key) k
     WHERE k <> '' GROUP BY k HAVING count(*) > 1 LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'ax.enqueue_many: idempotency_key = %: appears twice in one call',
            quote_literal(left(v_arg, 40))
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'idempotency_key';
    END IF;
    -- sql/enqueue.hpp's enqueue_keyed_sql over the arrays: keys taken in key order (no deadlock
    -- between calls with overlapping keys), a task inserted only for a key whose row carries this
    -- call's new ID (ax.enqueue's rule for who holds a key).
    RETURN QUERY
    WITH u AS MATERIALIZED (
            SELECT u.*, nullif(u.ik, '') AS key, nextval('ax.tasks_id_seq') AS new_id
              FROM unnest(enqueue_many.kind, enqueue_many.payload, enqueue_many.priority,
                          enqueue_many.run_at, enqueue_many.idempotency_key, enqueue_many.tags,
                          enqueue_many.max_attempts, enqueue_many.timeout_ms,
                          enqueue_many.unique_for_ms, enqueue_many.unique_states)
                   WITH ORDINALITY AS u(kind, pl, pr, ra, ik, tg, ma, tm, uf, us, i)),
         k AS (INSERT INTO ax.idem_keys AS k (idem_key, task_id, unique_for_ms, unique_states)
               SELECT u.key, u.new_id, coalesce(u.uf, 0), coalesce(u.us, 31)
                 FROM u WHERE u.key IS NOT NULL ORDER BY u.key
               ON CONFLICT (idem_key) DO UPDATE SET
                       (task_id, enqueued_at, finished_at, finished_state, unique_for_ms, unique_states) =
                       (SELECT CASE WHEN d.keeps THEN k.task_id ELSE excluded.task_id END,
                               CASE WHEN d.keeps THEN k.enqueued_at ELSE now() END,
                               CASE WHEN d.keeps THEN k.finished_at END,
                               CASE WHEN d.keeps THEN k.finished_state END,
                               CASE WHEN d.keeps THEN k.unique_for_ms ELSE excluded.unique_for_ms END,
                               CASE WHEN d.keeps THEN k.unique_states ELSE excluded.unique_states END
                          FROM (SELECT ax.unique_blocks(k.task_id, k.enqueued_at, k.finished_at,
                                                        k.finished_state, excluded.unique_for_ms,
                                                        excluded.unique_states) AS keeps) d)
               RETURNING k.idem_key, k.task_id),
         ins AS (INSERT INTO ax.tasks (id, kind, payload, priority, timeout_ms, max_attempts,
                                       run_at, idem_key, tags)
                 SELECT u.new_id, u.kind, coalesce(u.pl, ''), coalesce(u.pr, 1), coalesce(u.tm, 0),
                        coalesce(u.ma, 4), greatest(coalesce(u.ra, now()), now()), u.key,
                        CASE WHEN coalesce(u.tg, '') = '' THEN '{}'::text[]
                             ELSE string_to_array(u.tg, ',') END
                   FROM u LEFT JOIN k ON k.idem_key = u.key
                  WHERE u.key IS NULL OR k.task_id = u.new_id
                  ORDER BY u.i)
    SELECT u.i::integer, coalesce(k.task_id, u.new_id), (k.task_id IS NOT NULL AND k.task_id <> u.new_id)
      FROM u LEFT JOIN k ON k.idem_key = u.key
     ORDER BY u.i;
END $$;
)SQL";

} // namespace ax::pg::sql::migrations
