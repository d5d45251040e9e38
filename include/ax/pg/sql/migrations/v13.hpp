// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// Schema migration 13 of ax's distributed mode: a cheaper enqueue (issue 28's two open figures).
// Applied once, in order, inside the migrate transaction (detail::migrate in connection.hpp); a
// migration already released is never edited: a change is a new version.
//
// 1. DROP INDEX ax.tasks_kind (migration 6's partial (kind, id) index over unclaimed rows, for
//    listings by kind). Every enqueue paid an entry in it: a 200,000-row psql \copy into
//    ax.tasks took 1,458-2,334 ms with it against 966-1,316 ms without, and the bulk enqueue fell
//    to 0.61x of the build before it. A list of pending tasks by kind now walks ax.tasks in ID
//    order, as a list of finished tasks by kind walks the history: quick for any kind that is not
//    rare. A deployment that lists a rare kind often can create the index itself (the CREATE
//    INDEX CONCURRENTLY statement: docs/distributed.md, "Listing tasks").
//
// 2. ax.enqueue_many replaced (same signature, same results, same errors), cheaper per task:
//    - the arrays are walked by unnest() in the select list (a ProjectSet node: rows stream out
//      one by one, the arrays in lockstep, a NULL array padding NULLs) instead of unnest() in
//      FROM, which copies every array's elements into a tuplestore before the first row;
//      generate_series(1, n) beside them is the ordinal;
//    - validation stays one pass before any write (the first bad element by position), over that
//      stream; the tags check no longer runs its per-row subquery when a task has no tags (a NULL
//      tags element left the AND undecided, so PostgreSQL evaluated the EXISTS for every row:
//      most of the validation's time);
//    - without a key in the call: the n IDs are taken first into one array (ascending, in input
//      order, as Client's COPY path reserves them), then one plain INSERT of that array beside the
//      others (no ON CONFLICT, no joins, no RETURNING), and the rows returned are (ordinal, that
//      array's element): no window function, no sort, no second tuplestore. Against migration
//      9's body, alternating 100k-task calls in one session: 345 against 487 ms median (a bare
//      INSERT ... SELECT FROM unnest of the same rows 309 ms, Client's COPY path 252 ms;
//      docs/bench/sql-enqueue.md, run 3);
//    - the length checks of the arrays are one SELECT ... INTO (no cursor loop).
//    The keyed path is migration 9's (the arbiter is unchanged), over the same stream.

namespace ax::pg::sql::migrations {

/// Migration 13's SQL (several statements, run by the simple protocol).
inline constexpr const char* v13 = R"SQL(
DROP INDEX IF EXISTS ax.tasks_kind;

-- Enqueues many tasks with one call, all or nothing, and returns one row per task in input
-- order: (ord: 1-based position, id, existed: the key was taken, id is the first task's). Each
-- argument is an array with one element per kind; a NULL array, or a NULL element, takes the
-- argument's default (ax.enqueue's; unique_for_ms and unique_states as there). tags: each element
-- one task's tags, comma-joined ('gpu,bigmem'; a tag has no comma), '' or NULL for none. An
-- idempotency key may appear once per call (as Client::enqueue_many). Validation is one pass over
-- the arrays before any write; the first bad element is named with its position.
CREATE OR REPLACE FUNCTION ax.enqueue_many(kind text[], payload bytea[] DEFAULT NULL,
                                           priority integer[] DEFAULT NULL,
                                           run_at timestamptz[] DEFAULT NULL,
                                           idempotency_key text[] DEFAULT NULL,
                                           tags text[] DEFAULT NULL,
                                           max_attempts integer[] DEFAULT NULL,
                                           timeout_ms integer[] DEFAULT NULL,
                                           unique_for_ms bigint[] DEFAULT NULL,
                                           unique_states integer[] DEFAULT NULL)
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
                                 array_ndims(enqueue_many.unique_states))) AS a(pos, name, len, dims)
     WHERE a.len IS NOT NULL AND (a.len <> n OR a.dims > 1) ORDER BY a.pos LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'ax.enqueue_many: % has % elements for % kinds: each array has one element per task (or is NULL)',
            v_arg, v_len, n USING ERRCODE = 'invalid_parameter_value', COLUMN = v_arg;
    END IF;
    v_max := ax.max_payload_bytes();

    -- The first bad element, in one pass (no write has happened yet). The subquery's select-list
    -- unnests stream the arrays in lockstep (a NULL array gives NULLs), no tuplestore.
    SELECT u.i, u.bad, u.kind, u.pl, u.pr, u.ra, u.ik, u.tg, u.ma, u.tm, u.uf, u.us INTO b
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
                   END AS bad
              FROM (SELECT generate_series(1, n) AS i, unnest(enqueue_many.kind) AS kind,
                           unnest(enqueue_many.payload) AS pl, unnest(enqueue_many.priority) AS pr,
                           unnest(enqueue_many.run_at) AS ra,
                           unnest(enqueue_many.idempotency_key) AS ik,
                           unnest(enqueue_many.tags) AS tg,
                           unnest(enqueue_many.max_attempts) AS ma,
                           unnest(enqueue_many.timeout_ms) AS tm,
                           unnest(enqueue_many.unique_for_ms) AS uf,
                           unnest(enqueue_many.unique_states) AS us) u) u
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

    IF enqueue_many.idempotency_key IS NULL
       OR NOT EXISTS (SELECT 1 FROM unnest(enqueue_many.idempotency_key) k WHERE k <> '') THEN
        -- No key: the IDs first (n nextval calls, ascending in input order, as Client's COPY
        -- path reserves them: sql/enqueue.hpp's reserve_ids_sql), then one plain INSERT of the
        -- arrays beside them, with no RETURNING to collect and no ON CONFLICT; the rows returned
        -- are (ordinal, ID) from the same array.
        v_ids := ARRAY(SELECT nextval('ax.tasks_id_seq') FROM generate_series(1, n));
        INSERT INTO ax.tasks (id, kind, payload, priority, timeout_ms, max_attempts, run_at, tags)
        SELECT u.id, u.kind, coalesce(u.pl, ''), coalesce(u.pr, 1), coalesce(u.tm, 0),
               coalesce(u.ma, 4), CASE WHEN u.ra > now() THEN u.ra ELSE now() END,
               CASE WHEN u.tg IS NULL OR u.tg = '' THEN '{}'::text[]
                    ELSE string_to_array(u.tg, ',') END
          FROM (SELECT unnest(v_ids) AS id, unnest(enqueue_many.kind) AS kind,
                       unnest(enqueue_many.payload) AS pl, unnest(enqueue_many.priority) AS pr,
                       unnest(enqueue_many.run_at) AS ra, unnest(enqueue_many.tags) AS tg,
                       unnest(enqueue_many.max_attempts) AS ma,
                       unnest(enqueue_many.timeout_ms) AS tm) u;
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
                           unnest(enqueue_many.unique_states) AS us) u),
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
                        coalesce(u.ma, 4), CASE WHEN u.ra > now() THEN u.ra ELSE now() END, u.key,
                        CASE WHEN u.tg IS NULL OR u.tg = '' THEN '{}'::text[]
                             ELSE string_to_array(u.tg, ',') END
                   FROM u LEFT JOIN k ON k.idem_key = u.key
                  WHERE u.key IS NULL OR k.task_id = u.new_id
                  ORDER BY u.i)
    SELECT u.i, coalesce(k.task_id, u.new_id), (k.task_id IS NOT NULL AND k.task_id <> u.new_id)
      FROM u LEFT JOIN k ON k.idem_key = u.key
     ORDER BY u.i;
END $$;
)SQL";

} // namespace ax::pg::sql::migrations
