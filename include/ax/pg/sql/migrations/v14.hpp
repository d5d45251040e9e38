// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// Schema migration 14 of ax's distributed mode: the SQL enqueue functions take a task's limit
// group and partition key, as Client::enqueue_many does (NewTask::group, group_key). Applied once,
// in order, inside the migrate transaction (detail::migrate in connection.hpp); a migration already
// released is never edited: a change is a new version.
//
// Why: migration 11 added groups to ax.tasks and to Client's statement and COPY paths, but an
// application enqueueing from SQL (a trigger, psql, a Python or Node producer inside its own
// transaction) could not put a task in a group, so the limits, fair shares and weights were C++
// only. ax.enqueue gains group_name and group_key (both last, with defaults, so every call written
// for migration 9's signature, positional or named, means what it meant); ax.enqueue_many gains
// the two arrays. Each function is dropped and created again (an added parameter would otherwise
// make a second overload, and a call naming only the old parameters would match both). The bodies
// are migration 9's ax.enqueue and migration 13's ax.enqueue_many with the two columns added:
// same checks (the group's are Client's: at most 200 bytes each, a key needs a group; SQLSTATE
// 22023 naming the argument), same arbiter for idempotency keys, same results.

namespace ax::pg::sql::migrations {

/// Migration 14's SQL (several statements, run by the simple protocol).
inline constexpr const char* v14 = R"SQL(
DROP FUNCTION ax.enqueue(text, bytea, integer, timestamptz, text, text[], integer, integer, bigint,
                         integer);
DROP FUNCTION ax.enqueue_many(text[], bytea[], integer[], timestamptz[], text[], text[], integer[],
                              integer[], bigint[], integer[]);

-- Enqueues one task in the caller's transaction and returns its ID (for an idempotency key
-- already taken by a task that counts: that task's ID, and nothing is added). unique_for_ms and
-- unique_states narrow which holder of the key counts (ax.unique_blocks): one enqueued within
-- the last unique_for_ms (0: any age), in one of the states of the unique_states mask
-- (ax.unique_states(...); 31: all). They need an idempotency_key. group_name puts the task in a
-- limit group (Client::set_limit; NULL or '': none, as NewTask::group), group_key in one of its
-- partitions (NULL or '': the whole group; a key needs a group). NULL for any argument but kind
-- means its default. run_at NULL or past: claimable at once (a past time is stored as now(), so
-- it does not jump ahead of tasks enqueued before it). The key's row in ax.idem_keys is the one
-- arbiter, exactly as in Client::enqueue_many's statement (sql/enqueue.hpp); the statement
-- trigger on ax.tasks sends the wake notification, which PostgreSQL delivers at commit.
CREATE FUNCTION ax.enqueue(kind text, payload bytea DEFAULT '', priority integer DEFAULT 1,
                           run_at timestamptz DEFAULT NULL, idempotency_key text DEFAULT NULL,
                           tags text[] DEFAULT '{}', max_attempts integer DEFAULT 4,
                           timeout_ms integer DEFAULT 0, unique_for_ms bigint DEFAULT 0,
                           unique_states integer DEFAULT 31, group_name text DEFAULT NULL,
                           group_key text DEFAULT NULL)
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
    v_grp text := nullif(enqueue.group_name, '');
    v_grp_key text := coalesce(enqueue.group_key, '');
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
    IF octet_length(v_grp) > 200 THEN
        RAISE EXCEPTION 'ax.enqueue: group_name = % bytes: must be at most 200 bytes',
            octet_length(v_grp) USING ERRCODE = 'invalid_parameter_value', COLUMN = 'group_name';
    END IF;
    IF octet_length(v_grp_key) > 200 THEN
        RAISE EXCEPTION 'ax.enqueue: group_key = % bytes: must be at most 200 bytes',
            octet_length(v_grp_key) USING ERRCODE = 'invalid_parameter_value', COLUMN = 'group_key';
    END IF;
    IF v_grp IS NULL AND v_grp_key <> '' THEN
        RAISE EXCEPTION 'ax.enqueue: group_key = %: needs a group_name (a key partitions a group)',
            quote_literal(left(v_grp_key, 40))
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'group_key';
    END IF;
    IF v_key IS NULL AND (v_for <> 0 OR v_states <> 31) THEN
        RAISE EXCEPTION 'ax.enqueue: % = %: needs an idempotency_key (uniqueness is per key)',
            CASE WHEN v_for <> 0 THEN 'unique_for_ms' ELSE 'unique_states' END,
            CASE WHEN v_for <> 0 THEN v_for ELSE v_states END
            USING ERRCODE = 'invalid_parameter_value',
                  COLUMN = CASE WHEN v_for <> 0 THEN 'unique_for_ms' ELSE 'unique_states' END;
    END IF;

    IF v_key IS NULL THEN
        INSERT INTO ax.tasks (kind, payload, priority, timeout_ms, max_attempts, run_at, tags, grp,
                              grp_key)
        VALUES (enqueue.kind, v_payload, v_priority, v_timeout, v_attempts, v_run, v_tags, v_grp,
                v_grp_key)
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
                              idem_key, tags, grp, grp_key)
        VALUES (v_new, enqueue.kind, v_payload, v_priority, v_timeout, v_attempts, v_run, v_key,
                v_tags, v_grp, v_grp_key);
    END IF;
    RETURN v_id;
END $$;

-- Enqueues many tasks with one call, all or nothing, and returns one row per task in input
-- order: (ord: 1-based position, id, existed: the key was taken, id is the first task's). Each
-- argument is an array with one element per kind; a NULL array, or a NULL element, takes the
-- argument's default (ax.enqueue's; unique_for_ms and unique_states as there). tags: each element
-- one task's tags, comma-joined ('gpu,bigmem'; a tag has no comma), '' or NULL for none. An
-- idempotency key may appear once per call (as Client::enqueue_many). group_name / group_key:
-- each task's limit group (NULL or '': none) and partition key (NULL or '': the whole group). Validation is one pass over
-- the arrays before any write; the first bad element is named with its position.
CREATE FUNCTION ax.enqueue_many(kind text[], payload bytea[] DEFAULT NULL,
                                           priority integer[] DEFAULT NULL,
                                           run_at timestamptz[] DEFAULT NULL,
                                           idempotency_key text[] DEFAULT NULL,
                                           tags text[] DEFAULT NULL,
                                           max_attempts integer[] DEFAULT NULL,
                                           timeout_ms integer[] DEFAULT NULL,
                                           unique_for_ms bigint[] DEFAULT NULL,
                                           unique_states integer[] DEFAULT NULL,
                                           group_name text[] DEFAULT NULL,
                                           group_key text[] DEFAULT NULL)
RETURNS TABLE (ord integer, id bigint, existed boolean) LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    n integer := cardinality(enqueue_many.kind);
    v_max integer;
    v_arg text;
    v_len integer;
    v_ids bigint[];
    b record;
BEGIN
    IF enqueue_many.kind IS NULL OR array_ndims(enqueue_many.kind) > 1 THEN
        RAISE EXCEPTION 'ax.enqueue_many: kind = %: must be a one-dimensional array of kinds',
            coalesce(left(enqueue_many.kind::text, 40), 'NULL')
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'kind';
    END IF;
    IF n = 0 THEN RETURN; END IF;
    SELECT a.name, a.len INTO v_arg, v_len FROM (VALUES
            (1, 'payload', cardinality(enqueue_many.payload), array_ndims(enqueue_many.payload)),
            (2, 'priority', cardinality(enqueue_many.priority), array_ndims(enqueue_many.priority)),
            (3, 'run_at', cardinality(enqueue_many.run_at), array_ndims(enqueue_many.run_at)),
            (4, 'idempotency_key', cardinality(enqueue_many.idempotency_key),
                                   array_ndims(enqueue_many.idempotency_key)),
            (5, 'tags', cardinality(enqueue_many.tags), array_ndims(enqueue_many.tags)),
            (6, 'max_attempts', cardinality(enqueue_many.max_attempts),
                                array_ndims(enqueue_many.max_attempts)),
            (7, 'timeout_ms', cardinality(enqueue_many.timeout_ms),
                              array_ndims(enqueue_many.timeout_ms)),
            (8, 'unique_for_ms', cardinality(enqueue_many.unique_for_ms),
                                 array_ndims(enqueue_many.unique_for_ms)),
            (9, 'unique_states', cardinality(enqueue_many.unique_states),
                                 array_ndims(enqueue_many.unique_states)),
            (10, 'group_name', cardinality(enqueue_many.group_name),
                               array_ndims(enqueue_many.group_name)),
            (11, 'group_key', cardinality(enqueue_many.group_key),
                              array_ndims(enqueue_many.group_key))) AS a(pos, name, len, dims)
     WHERE a.len IS NOT NULL AND (a.len <> n OR a.dims > 1) ORDER BY a.pos LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'ax.enqueue_many: % has % elements for % kinds: each array has one element per task (or is NULL)',
            v_arg, v_len, n USING ERRCODE = 'invalid_parameter_value', COLUMN = v_arg;
    END IF;
    v_max := ax.max_payload_bytes();

    -- The first bad element, in one pass (no write has happened yet). The subquery's select-list
    -- unnests stream the arrays in lockstep (a NULL array gives NULLs), no tuplestore.
    SELECT u.i, u.bad, u.kind, u.pl, u.pr, u.ra, u.ik, u.tg, u.ma, u.tm, u.uf, u.us, u.gn, u.gk
      INTO b
      FROM (SELECT u.*,
                   CASE WHEN u.kind IS NULL OR octet_length(u.kind) NOT BETWEEN 1 AND 200 THEN 'kind'
                        WHEN octet_length(u.pl) > v_max THEN 'payload'
                        WHEN u.pr NOT BETWEEN 0 AND 2 THEN 'priority'
                        WHEN u.ra > now() + interval '366 days' THEN 'run_at'
                        WHEN octet_length(u.ik) > 512 THEN 'idempotency_key'
                        WHEN coalesce(u.tg, '') <> '' AND (u.tg !~ '^[^,{"]+(,[^,{"]+)*$'
                             OR (octet_length(u.tg) > 100 AND EXISTS (
                                 SELECT 1 FROM unnest(string_to_array(u.tg, ',')) t
                                  WHERE octet_length(t) > 100))) THEN 'tags'
                        WHEN u.ma NOT BETWEEN 1 AND 1000 THEN 'max_attempts'
                        WHEN u.tm NOT BETWEEN 0 AND 86400000 THEN 'timeout_ms'
                        WHEN u.uf NOT BETWEEN 0 AND 31622400000 THEN 'unique_for_ms'
                        WHEN u.us NOT BETWEEN 1 AND 31 THEN 'unique_states'
                        WHEN coalesce(u.ik, '') = '' AND coalesce(u.uf, 0) <> 0 THEN 'unique_for_ms'
                        WHEN coalesce(u.ik, '') = '' AND coalesce(u.us, 31) <> 31 THEN 'unique_states'
                        WHEN octet_length(u.gn) > 200 THEN 'group_name'
                        WHEN octet_length(u.gk) > 200
                             OR (coalesce(u.gn, '') = '' AND coalesce(u.gk, '') <> '') THEN 'group_key'
                   END AS bad
              FROM (SELECT generate_series(1, n) AS i, unnest(enqueue_many.kind) AS kind,
                           unnest(enqueue_many.payload) AS pl, unnest(enqueue_many.priority) AS pr,
                           unnest(enqueue_many.run_at) AS ra,
                           unnest(enqueue_many.idempotency_key) AS ik,
                           unnest(enqueue_many.tags) AS tg,
                           unnest(enqueue_many.max_attempts) AS ma,
                           unnest(enqueue_many.timeout_ms) AS tm,
                           unnest(enqueue_many.unique_for_ms) AS uf,
                           unnest(enqueue_many.unique_states) AS us,
                           unnest(enqueue_many.group_name) AS gn,
                           unnest(enqueue_many.group_key) AS gk) u) u
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
                       WHEN 'group_name' THEN octet_length(b.gn) || ' bytes'
                       WHEN 'group_key' THEN CASE WHEN octet_length(b.gk) > 200
                            THEN octet_length(b.gk) || ' bytes' ELSE quote_literal(left(b.gk, 40)) END
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
                       WHEN 'group_name' THEN 'must be at most 200 bytes'
                       WHEN 'group_key' THEN CASE WHEN octet_length(b.gk) > 200
                            THEN 'must be at most 200 bytes'
                            ELSE 'needs a group_name (a key partitions a group)' END
                       ELSE 'must be in 0..86400000 (24 h)' END
            USING ERRCODE = 'invalid_parameter_value', COLUMN = b.bad;
    END IF;

    IF enqueue_many.idempotency_key IS NULL
       OR NOT EXISTS (SELECT 1 FROM unnest(enqueue_many.idempotency_key) k WHERE k <> '') THEN
        -- No key: the IDs first (n nextval calls, ascending in input order, as Client's COPY
        -- path reserves them: sql/enqueue.hpp's reserve_ids_sql), then one plain INSERT of the
        -- arrays beside them, with no RETURNING to collect and no ON CONFLICT; the rows returned
        -- are (ordinal, ID) from the same array.
        v_ids := ARRAY(SELECT nextval('ax.tasks_id_seq') FROM generate_series(1, n));
        INSERT INTO ax.tasks (id, kind, payload, priority, timeout_ms, max_attempts, run_at, tags,
                              grp, grp_key)
        SELECT u.id, u.kind, coalesce(u.pl, ''), coalesce(u.pr, 1), coalesce(u.tm, 0),
               coalesce(u.ma, 4), CASE WHEN u.ra > now() THEN u.ra ELSE now() END,
               CASE WHEN u.tg IS NULL OR u.tg = '' THEN '{}'::text[]
                    ELSE string_to_array(u.tg, ',') END,
               nullif(u.gn, ''), coalesce(u.gk, '')
          FROM (SELECT unnest(v_ids) AS id, unnest(enqueue_many.kind) AS kind,
                       unnest(enqueue_many.payload) AS pl, unnest(enqueue_many.priority) AS pr,
                       unnest(enqueue_many.run_at) AS ra, unnest(enqueue_many.tags) AS tg,
                       unnest(enqueue_many.max_attempts) AS ma,
                       unnest(enqueue_many.timeout_ms) AS tm,
                       unnest(enqueue_many.group_name) AS gn,
                       unnest(enqueue_many.group_key) AS gk) u;
        RETURN QUERY SELECT generate_series(1, n), unnest(v_ids), false;
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
              FROM (SELECT generate_series(1, n) AS i, unnest(enqueue_many.kind) AS kind,
                           unnest(enqueue_many.payload) AS pl, unnest(enqueue_many.priority) AS pr,
                           unnest(enqueue_many.run_at) AS ra,
                           unnest(enqueue_many.idempotency_key) AS ik,
                           unnest(enqueue_many.tags) AS tg,
                           unnest(enqueue_many.max_attempts) AS ma,
                           unnest(enqueue_many.timeout_ms) AS tm,
                           unnest(enqueue_many.unique_for_ms) AS uf,
                           unnest(enqueue_many.unique_states) AS us,
                           unnest(enqueue_many.group_name) AS gn,
                           unnest(enqueue_many.group_key) AS gk) u),
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
                                       run_at, idem_key, tags, grp, grp_key)
                 SELECT u.new_id, u.kind, coalesce(u.pl, ''), coalesce(u.pr, 1), coalesce(u.tm, 0),
                        coalesce(u.ma, 4), CASE WHEN u.ra > now() THEN u.ra ELSE now() END, u.key,
                        CASE WHEN u.tg IS NULL OR u.tg = '' THEN '{}'::text[]
                             ELSE string_to_array(u.tg, ',') END,
                        nullif(u.gn, ''), coalesce(u.gk, '')
                   FROM u LEFT JOIN k ON k.idem_key = u.key
                  WHERE u.key IS NULL OR k.task_id = u.new_id
                  ORDER BY u.i)
    SELECT u.i, coalesce(k.task_id, u.new_id), (k.task_id IS NOT NULL AND k.task_id <> u.new_id)
      FROM u LEFT JOIN k ON k.idem_key = u.key
     ORDER BY u.i;
END $$;
)SQL";

} // namespace ax::pg::sql::migrations
