// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// Schema migration 4 of ax's distributed mode: idempotency keys in ax.idem_keys (one arbiter), and
// the history and dead letters as rings of partitions emptied by TRUNCATE. Applied once, in order,
// inside the migrate transaction (detail::migrate in connection.hpp); a migration already released
// is never edited: a change is a new version.
//
// Idempotency that holds under races, and finished rows removed in O(1) per time range.
// Keys: the lookup of a key in three tables (live, history, dead letters) and the insert of
// a new task were not atomic with an acknowledgement moving the key's task from one table to
// another between them (READ COMMITTED: the enqueue's snapshot predates the ack's commit,
// and ON CONFLICT on the live table waits for the deleting ack, then finds no conflict), so
// the same key could make two tasks. A key now has one row in ax.idem_keys for its whole
// life, which no move touches: ON CONFLICT on that row is the one arbiter.
// Retention: the history (and the dead letters) are LIST-partitioned into a ring of slots;
// finished rows go to the current slot, the ring turns every retention / (slots - 1), and a
// slot is emptied by TRUNCATE (a lock on that slot alone, never on the parent: the
// acknowledgements inserting into the current slot never wait for it) once its newest row is
// older than the retention. The row-by-row prune removed ~5k rows/s against a finish rate of
// 50k/s: under a flood that never pauses, the history grew without bound.

namespace ax::pg::sql::migrations {

/// Migration 4's SQL (several statements, run by the simple protocol).
inline constexpr const char* v4 = R"SQL(
CREATE TABLE ax.idem_keys (
    idem_key    text   PRIMARY KEY,
    task_id     bigint NOT NULL,
    finished_at timestamptz   -- NULL while its task is live or a dead letter
) WITH (fillfactor = 90);
CREATE INDEX idem_keys_finished ON ax.idem_keys (finished_at) WHERE finished_at IS NOT NULL;

-- One row per ring of partitions: how many slots, which one takes new rows, when it started to,
-- when each other slot stopped taking rows (NULL: empty), and the retention the ring keeps.
CREATE TABLE ax.rings (
    name         text     PRIMARY KEY,
    slots        smallint NOT NULL CHECK (slots BETWEEN 3 AND 64),
    cur          smallint NOT NULL DEFAULT 0,
    opened_at    timestamptz NOT NULL DEFAULT now(),
    closed_at    timestamptz[] NOT NULL,
    retention_ms bigint   NOT NULL CHECK (retention_ms > 0),
    emptied      bigint   NOT NULL DEFAULT 0  -- slots emptied so far (TRUNCATE)
);
INSERT INTO ax.rings (name, slots, closed_at, retention_ms) VALUES
    ('history', 8, array_fill(NULL::timestamptz, ARRAY[8]), 3600000),
    ('dead_letters', 8, array_fill(NULL::timestamptz, ARRAY[8]), 14 * 86400000::bigint);

-- The slot new rows of a ring go to (a statement evaluates it once when written as a scalar
-- subquery, as the acknowledgement does; the tables' column defaults call it per row).
CREATE FUNCTION ax.ring_slot(p_name text) RETURNS smallint LANGUAGE sql STABLE AS $$
    SELECT cur FROM ax.rings WHERE name = p_name $$;

ALTER TABLE ax.history RENAME TO history_v3;
CREATE TABLE ax.history (
    id          bigint   NOT NULL,
    kind        text     NOT NULL,
    priority    smallint NOT NULL,
    state       smallint NOT NULL,      -- ax::pg::HistoryState
    attempts    integer  NOT NULL,
    node_id     bigint,
    enqueued_at timestamptz NOT NULL,
    finished_at timestamptz NOT NULL DEFAULT now(),
    idem_key    text,
    slot        smallint NOT NULL DEFAULT ax.ring_slot('history')
) PARTITION BY LIST (slot);
ALTER TABLE ax.dead_letters RENAME TO dead_letters_v3;
CREATE TABLE ax.dead_letters (
    id           bigint   NOT NULL,
    kind         text     NOT NULL,
    priority     smallint NOT NULL,
    payload      bytea    NOT NULL,
    tags         text[]   NOT NULL,
    max_attempts integer  NOT NULL,
    timeout_ms   integer  NOT NULL,
    attempts     integer  NOT NULL,
    idem_key     text,
    errors       text[]   NOT NULL,
    reason       text     NOT NULL,
    enqueued_at  timestamptz NOT NULL,
    failed_at    timestamptz NOT NULL DEFAULT now(),
    slot         smallint NOT NULL DEFAULT ax.ring_slot('dead_letters')
) PARTITION BY LIST (slot);
DO $$
BEGIN
    FOR i IN 0..7 LOOP
        EXECUTE format('CREATE TABLE ax.history_%s PARTITION OF ax.history FOR VALUES IN (%s)', i, i);
        EXECUTE format('CREATE TABLE ax.dead_letters_%s PARTITION OF ax.dead_letters FOR VALUES IN (%s)', i, i);
    END LOOP;
END $$;
CREATE INDEX history_by_id ON ax.history (id);
CREATE INDEX dead_letters_by_id ON ax.dead_letters (id);
CREATE INDEX dead_letters_by_failed ON ax.dead_letters (failed_at, id);
INSERT INTO ax.history (id, kind, priority, state, attempts, node_id, enqueued_at, finished_at,
                        idem_key, slot)
SELECT id, kind, priority, state, attempts, node_id, enqueued_at, finished_at, idem_key, 0
  FROM ax.history_v3;
INSERT INTO ax.dead_letters (id, kind, priority, payload, tags, max_attempts, timeout_ms, attempts,
                             idem_key, errors, reason, enqueued_at, failed_at, slot)
SELECT id, kind, priority, payload, tags, max_attempts, timeout_ms, attempts, idem_key, errors,
       reason, enqueued_at, failed_at, 0
  FROM ax.dead_letters_v3;
DROP TABLE ax.history_v3;
DROP TABLE ax.dead_letters_v3;
DROP FUNCTION ax.maintain(bigint, integer);
DROP FUNCTION ax.maintain_v2(bigint, integer);
DROP FUNCTION ax.prune_history(bigint, integer);
DROP FUNCTION ax.summarize_history();

-- Every key already in use, one row each: a live task's first, then a dead letter's, then the
-- newest finished one's.
INSERT INTO ax.idem_keys (idem_key, task_id)
SELECT DISTINCT ON (idem_key) idem_key, id FROM ax.tasks WHERE idem_key IS NOT NULL
 ORDER BY idem_key, id
ON CONFLICT DO NOTHING;
INSERT INTO ax.idem_keys (idem_key, task_id)
SELECT DISTINCT ON (idem_key) idem_key, id FROM ax.dead_letters WHERE idem_key IS NOT NULL
 ORDER BY idem_key, id
ON CONFLICT DO NOTHING;
INSERT INTO ax.idem_keys (idem_key, task_id, finished_at)
SELECT DISTINCT ON (idem_key) idem_key, id, finished_at FROM ax.history
 WHERE idem_key IS NOT NULL ORDER BY idem_key, finished_at DESC
ON CONFLICT DO NOTHING;
-- The key's row is the arbiter now; the per-table key indexes only cost writes.
DROP INDEX ax.tasks_idem;

-- Moves a live task to the history as cancelled (its key, if any, starts its retention).
CREATE OR REPLACE FUNCTION ax.finish_cancelled(p_id bigint) RETURNS void LANGUAGE sql AS $$
    WITH d AS (DELETE FROM ax.tasks WHERE id = p_id RETURNING *),
    k AS (UPDATE ax.idem_keys k SET finished_at = now() FROM d
           WHERE d.idem_key IS NOT NULL AND k.idem_key = d.idem_key AND k.task_id = d.id)
    INSERT INTO ax.history (id, kind, priority, state, attempts, node_id, enqueued_at, idem_key)
    SELECT id, kind, priority, 2, attempts, node_id, enqueued_at, idem_key FROM d $$;

-- Drops a dead letter; the history remembers it as discarded (its key starts its retention).
CREATE OR REPLACE FUNCTION ax.discard_dead_letter(p_id bigint) RETURNS boolean LANGUAGE sql AS $$
    WITH d AS (DELETE FROM ax.dead_letters WHERE id = p_id RETURNING *),
    k AS (UPDATE ax.idem_keys k SET finished_at = now() FROM d
           WHERE d.idem_key IS NOT NULL AND k.idem_key = d.idem_key AND k.task_id = d.id),
    i AS (INSERT INTO ax.history (id, kind, priority, state, attempts, enqueued_at, idem_key)
          SELECT id, kind, priority, 3, attempts, enqueued_at, idem_key FROM d RETURNING id)
    SELECT EXISTS (SELECT 1 FROM i) $$;

-- Turns ring p_name (a table ax.<p_name> LIST-partitioned into slots ax.<p_name>_<i>) when due,
-- keeping p_retention_ms (NULL: the ring's stored retention). First every slot whose newest row
-- is older than the retention is emptied by TRUNCATE (for the dead letters, their keys are
-- forgotten first); then, once the current slot has taken rows for retention / (slots - 1), new
-- rows go to the next slot if it is empty (if it is not, the retention grew meanwhile: the
-- current slot keeps taking rows until it is). A TRUNCATE waits at most 50 ms for its slot's
-- lock (a reader of the whole table holds it), else that slot waits for the next pass: it is
-- never a long lock, and never one on the parent, which the acknowledgements insert into.
-- Returns the slots emptied.
CREATE FUNCTION ax.turn_ring(p_name text, p_retention_ms bigint) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE r record; n integer := 0; nxt integer; keep interval; old_timeout text;
BEGIN
    SELECT * INTO r FROM ax.rings WHERE name = p_name FOR UPDATE;
    IF NOT FOUND THEN RAISE EXCEPTION 'ax.turn_ring: no ring %', p_name; END IF;
    IF p_retention_ms IS NOT NULL AND p_retention_ms > 0 AND p_retention_ms <> r.retention_ms THEN
        UPDATE ax.rings SET retention_ms = p_retention_ms WHERE name = p_name;
        r.retention_ms := p_retention_ms;
    END IF;
    keep := r.retention_ms * interval '1 millisecond';
    old_timeout := current_setting('lock_timeout');
    FOR i IN 0 .. r.slots - 1 LOOP
        CONTINUE WHEN i = r.cur OR r.closed_at[i + 1] IS NULL OR r.closed_at[i + 1] >= now() - keep;
        BEGIN
            PERFORM set_config('lock_timeout', '50ms', true);
            IF p_name = 'dead_letters' THEN
                EXECUTE format('DELETE FROM ax.idem_keys k USING ax.%I d WHERE d.idem_key IS NOT NULL '
                               'AND k.idem_key = d.idem_key AND k.task_id = d.id', p_name || '_' || i);
            END IF;
            EXECUTE format('TRUNCATE ax.%I', p_name || '_' || i);
            PERFORM set_config('lock_timeout', old_timeout, true);
            r.closed_at[i + 1] := NULL;
            n := n + 1;
        EXCEPTION WHEN lock_not_available THEN
            PERFORM set_config('lock_timeout', old_timeout, true);
        END;
    END LOOP;
    nxt := (r.cur + 1) % r.slots;
    IF now() >= r.opened_at + keep / (r.slots - 1) AND r.closed_at[nxt + 1] IS NULL THEN
        r.closed_at[r.cur + 1] := now();
        UPDATE ax.rings SET cur = nxt, opened_at = now(), closed_at = r.closed_at,
               emptied = emptied + n WHERE name = p_name;
    ELSE
        UPDATE ax.rings SET closed_at = r.closed_at, emptied = emptied + n WHERE name = p_name;
    END IF;
    RETURN n;
END $$;

-- Forgets up to p_limit keys whose task ended more than p_retention_ms ago (the same key then
-- makes a new task). Returns how many.
CREATE FUNCTION ax.forget_keys(p_retention_ms bigint, p_limit integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE n integer;
BEGIN
    DELETE FROM ax.idem_keys WHERE idem_key IN (
        SELECT idem_key FROM ax.idem_keys
         WHERE finished_at < now() - p_retention_ms * interval '1 millisecond'
         ORDER BY finished_at LIMIT p_limit);
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END $$;

-- Maintenance, run by one node at a time (advisory lock): batches whose lease expired go back
-- (attempt counted; past max_attempts to the dead letters), long-expired node rows are dropped,
-- the history and dead-letter rings turn (whole slots past their retention emptied), and up to
-- p_prune_limit expired idempotency keys are forgotten. Whether or not it got the lock, it
-- answers next_expiry_ms: milliseconds until the earliest unexpired batch lease ends (NULL:
-- none), so the caller can run it again right then (expired batches are left out of that figure
-- when another node holds the lock: it is reclaiming them). With the lock it also answers
-- dead_rows: ax.tasks's dead row versions as the statistics last saw them (the node vacuums the
-- table past NodeOptions::vacuum_dead_rows), NULL when this role may not vacuum it; and pruned:
-- the ring slots emptied plus the keys forgotten.
CREATE FUNCTION ax.maintain(p_history_ms bigint, p_prune_limit integer,
    OUT got_lock boolean, OUT reclaimed_batches bigint[], OUT reclaimed_nodes text[],
    OUT requeued integer, OUT dead integer, OUT pruned integer, OUT next_expiry_ms bigint,
    OUT dead_rows bigint)
LANGUAGE plpgsql AS $$
DECLARE expired bigint[]; r record;
BEGIN
    requeued := 0; dead := 0; pruned := 0;
    reclaimed_batches := '{}'; reclaimed_nodes := '{}';
    got_lock := pg_try_advisory_xact_lock(7887330361530609268);
    IF NOT got_lock THEN
        SELECT ceil(extract(epoch FROM min(lease_until) - now()) * 1000)::bigint
          INTO next_expiry_ms FROM ax.batches WHERE lease_until >= now();
        RETURN;
    END IF;
    SELECT array_agg(b.id ORDER BY b.id),
           array_agg(DISTINCT coalesce(n.name, '') || '#' || b.node_id)
      INTO expired, reclaimed_nodes
      FROM ax.batches b LEFT JOIN ax.nodes n ON n.id = b.node_id
     WHERE b.lease_until < now();
    IF expired IS NOT NULL THEN
        reclaimed_batches := expired;
        DELETE FROM ax.batches WHERE id = ANY (expired);
        FOR r IN SELECT id, attempts, max_attempts, cancel_requested, node_id FROM ax.tasks
                 WHERE batch_id = ANY (expired) ORDER BY id FOR UPDATE
        LOOP
            IF r.cancel_requested THEN
                PERFORM ax.finish_cancelled(r.id);
            ELSIF r.attempts >= r.max_attempts THEN
                PERFORM ax.dead_letter(r.id, 'lease expired on node ' || r.node_id, 'attempts exhausted');
                dead := dead + 1;
            ELSE
                UPDATE ax.tasks SET node_id = NULL, batch_id = NULL,
                       errors = errors || ('lease expired on node ' || r.node_id)
                WHERE id = r.id;
                requeued := requeued + 1;
            END IF;
        END LOOP;
        UPDATE ax.counters SET value = value + cardinality(expired) WHERE name = 'reclaimed_batches';
        UPDATE ax.counters SET value = value + requeued + dead WHERE name = 'reclaimed_tasks';
        PERFORM pg_notify('ax_wake', '');
    ELSE
        reclaimed_nodes := '{}';
    END IF;
    SELECT ceil(extract(epoch FROM min(lease_until) - now()) * 1000)::bigint
      INTO next_expiry_ms FROM ax.batches WHERE lease_until >= now();
    DELETE FROM ax.nodes WHERE lease_until < now() - interval '10 minutes';
    pruned := ax.turn_ring('history', p_history_ms) + ax.turn_ring('dead_letters', NULL);
    IF p_prune_limit > 0 THEN
        pruned := pruned + ax.forget_keys(p_history_ms, p_prune_limit);
    END IF;
    -- Only for a role that may vacuum the table (its owner's or the database owner's rights, or
    -- a superuser): for any other VACUUM would just warn and skip.
    IF (SELECT pg_has_role(c.relowner, 'USAGE') FROM pg_class c WHERE c.oid = 'ax.tasks'::regclass)
       OR (SELECT pg_has_role(d.datdba, 'USAGE') FROM pg_database d
            WHERE d.datname = current_database()) THEN
        dead_rows := pg_stat_get_dead_tuples('ax.tasks'::regclass);
    END IF;
END $$;
)SQL";

} // namespace ax::pg::sql::migrations
