// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// Schema migration 5 of ax's distributed mode: the SQL API (issue 28), so any language enqueues
// inside its own transaction with one statement: ax.enqueue(...) returns the task's ID,
// ax.enqueue_many(...) takes arrays and returns (ord, id, existed) rows. The rules are those of
// Client::enqueue_many (ax/pg/types.hpp's valid_kind / valid_tag, Client's validation, the
// idempotency arbiter of sql/enqueue.hpp's enqueue_keyed_sql): a bad argument raises SQLSTATE
// 22023 (invalid_parameter_value) naming it, before anything is written. Applied once, in order,
// inside the migrate transaction (detail::migrate in connection.hpp); a migration already
// released is never edited: a change is a new version.

namespace ax::pg::sql::migrations {

/// Migration 5's SQL (several statements, run by the simple protocol).
inline constexpr const char* v5 = R"SQL(
-- The priority lane of a name ('high', 'normal', 'low', any case): 0, 1, 2. For SQL callers who
-- prefer names: ax.enqueue(kind => 'k', priority => ax.priority('high')). ax.enqueue itself takes
-- the integer only: an overload taking text would make a call that leaves priority out
-- ambiguous.
CREATE FUNCTION ax.priority(p_name text) RETURNS integer LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    CASE lower(p_name)
        WHEN 'high' THEN RETURN 0;
        WHEN 'normal' THEN RETURN 1;
        WHEN 'low' THEN RETURN 2;
        ELSE RAISE EXCEPTION 'ax.priority: %: must be high, normal or low',
                 coalesce(quote_literal(p_name), 'NULL')
             USING ERRCODE = 'invalid_parameter_value', COLUMN = 'priority';
    END CASE;
END $$;

-- The largest payload the SQL API accepts: the setting ax.max_payload_bytes (a custom setting:
-- ALTER DATABASE ... SET ax.max_payload_bytes = '4194304', or per role, or SET in a session),
-- default 1 MiB like ClientOptions::max_payload_bytes, at most 64 MiB like it. A setting rather
-- than a table: no row to read per call, and a database, role or session can each choose.
CREATE FUNCTION ax.max_payload_bytes() RETURNS integer LANGUAGE plpgsql STABLE AS $$
DECLARE s text := current_setting('ax.max_payload_bytes', true);
BEGIN
    IF s IS NULL OR s = '' THEN RETURN 1048576; END IF;
    IF s !~ '^[0-9]{1,9}$' OR s::bigint > 67108864 THEN
        RAISE EXCEPTION 'ax: setting ax.max_payload_bytes = %: must be a byte count up to 67108864 (64 MiB)',
            quote_literal(s) USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN s::integer;
END $$;

-- Enqueues one task in the caller's transaction and returns its ID (for an idempotency key
-- already taken: the first task's ID, and nothing is added). NULL for any argument but kind
-- means its default. run_at NULL or past: claimable at once (a past time is stored as now(), so
-- it does not jump ahead of tasks enqueued before it). The key's row in ax.idem_keys is the one
-- arbiter, exactly as in Client::enqueue_many's statement (sql/enqueue.hpp); the statement
-- trigger on ax.tasks sends the wake notification, which PostgreSQL delivers at commit.
CREATE FUNCTION ax.enqueue(kind text, payload bytea DEFAULT '', priority integer DEFAULT 1,
                           run_at timestamptz DEFAULT NULL, idempotency_key text DEFAULT NULL,
                           tags text[] DEFAULT '{}', max_attempts integer DEFAULT 4,
                           timeout_ms integer DEFAULT 0)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_payload bytea := coalesce(enqueue.payload, '');
    v_priority integer := coalesce(enqueue.priority, 1);
    v_run timestamptz := greatest(coalesce(enqueue.run_at, now()), now());
    v_key text := nullif(enqueue.idempotency_key, '');
    v_tags text[] := coalesce(enqueue.tags, '{}');
    v_attempts integer := coalesce(enqueue.max_attempts, 4);
    v_timeout integer := coalesce(enqueue.timeout_ms, 0);
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

    IF v_key IS NULL THEN
        INSERT INTO ax.tasks (kind, payload, priority, timeout_ms, max_attempts, run_at, tags)
        VALUES (enqueue.kind, v_payload, v_priority, v_timeout, v_attempts, v_run, v_tags)
        RETURNING ax.tasks.id INTO v_id;
        RETURN v_id;
    END IF;
    -- The arbiter of sql/enqueue.hpp's enqueue_keyed_sql: the first enqueue of a key inserts its
    -- row with the new ID; any other conflicts on that row (waiting for the first to commit or
    -- roll back) and gets the committed task ID back; only the row's owner inserts a task.
    v_new := nextval('ax.tasks_id_seq');
    INSERT INTO ax.idem_keys AS k (idem_key, task_id) VALUES (v_key, v_new)
    ON CONFLICT (idem_key) DO UPDATE SET task_id = k.task_id
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
-- argument's default (ax.enqueue's). tags: each element one task's tags, comma-joined
-- ('gpu,bigmem'; a tag has no comma), '' or NULL for none. An idempotency key may appear once
-- per call (as Client::enqueue_many). Validation is one pass over the arrays before any write;
-- the first bad element is named with its position.
CREATE FUNCTION ax.enqueue_many(kind text[], payload bytea[] DEFAULT NULL,
                                priority integer[] DEFAULT NULL,
                                run_at timestamptz[] DEFAULT NULL,
                                idempotency_key text[] DEFAULT NULL, tags text[] DEFAULT NULL,
                                max_attempts integer[] DEFAULT NULL,
                                timeout_ms integer[] DEFAULT NULL)
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
                           array_ndims(enqueue_many.timeout_ms))) AS a(name, len, dims)
        WHERE a.len IS NOT NULL AND (a.len <> n OR a.dims > 1)
    LOOP
        RAISE EXCEPTION 'ax.enqueue_many: % has % elements for % kinds: each array has one element per task (or is NULL)',
            v_arg, v_len, n USING ERRCODE = 'invalid_parameter_value', COLUMN = v_arg;
    END LOOP;

    -- The first bad element, in one pass (no write has happened yet).
    SELECT u.i, u.bad, u.kind, u.pl, u.pr, u.ra, u.ik, u.tg, u.ma, u.tm INTO b
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
                   END AS bad
              FROM unnest(enqueue_many.kind, enqueue_many.payload, enqueue_many.priority,
                          enqueue_many.run_at, enqueue_many.idempotency_key, enqueue_many.tags,
                          enqueue_many.max_attempts, enqueue_many.timeout_ms)
                   WITH ORDINALITY AS u(kind, pl, pr, ra, ik, tg, ma, tm, i)) u
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
                       ELSE b.tm::text END,
            CASE b.bad WHEN 'kind' THEN 'must be 1..200 bytes'
                       WHEN 'payload' THEN 'exceeds ax.max_payload_bytes (' || v_max
                                           || '); store big blobs elsewhere and enqueue their key'
                       WHEN 'priority' THEN 'must be 0 (high), 1 (normal) or 2 (low)'
                       WHEN 'run_at' THEN 'must be at most 366 days ahead'
                       WHEN 'idempotency_key' THEN 'must be at most 512 bytes'
                       WHEN 'tags' THEN 'each task''s tags comma-joined, each tag 1..100 bytes without '','', ''{'' or ''"'''
                       WHEN 'max_attempts' THEN 'must be in 1..1000'
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
    -- call's new ID.
    RETURN QUERY
    WITH u AS MATERIALIZED (
            SELECT u.*, nullif(u.ik, '') AS key, nextval('ax.tasks_id_seq') AS new_id
              FROM unnest(enqueue_many.kind, enqueue_many.payload, enqueue_many.priority,
                          enqueue_many.run_at, enqueue_many.idempotency_key, enqueue_many.tags,
                          enqueue_many.max_attempts, enqueue_many.timeout_ms)
                   WITH ORDINALITY AS u(kind, pl, pr, ra, ik, tg, ma, tm, i)),
         k AS (INSERT INTO ax.idem_keys AS k (idem_key, task_id)
               SELECT u.key, u.new_id FROM u WHERE u.key IS NOT NULL ORDER BY u.key
               ON CONFLICT (idem_key) DO UPDATE SET task_id = k.task_id
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
