// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// Schema migration 6 of ax's distributed mode: pause and resume by kind and by lane, and the
// indexes that let an operator list tasks by kind and state. Applied once, in order, inside the
// migrate transaction (detail::migrate in connection.hpp); a migration already released is never
// edited: a change is a new version.
//
// Pauses: one row per paused kind or lane in ax.pauses. ax.pause / ax.resume change a row and
// NOTIFY ax_pause; every node listens, re-reads the table in its next round trip and leaves the
// paused kinds out of its claim's kinds parameter and asks a paused lane for nothing (the claim
// statement itself is unchanged, so nothing paused costs nothing). Nodes also re-read the table
// at start, after a reconnect and with every lease renewal, so a notification lost with a
// connection is made up for within lease / 3.
//
// Listing (sql/tasks.hpp): every list is ordered by ID with a keyset cursor, one branch per
// state and table, merged by the planner. The indexes added here are the ones a list by kind
// (with or without a state) needs on a table of millions; each was chosen for what it costs the
// hot path:
//   - ax.tasks (kind, id) WHERE node_id IS NULL: one entry per enqueue (and per retry put back);
//     the claim's update leaves the predicate, so it adds no entry there. The hot table keeps
//     three indexes.
//   - none on ax.history's kind: the acknowledgement inserts every finished task there, and a
//     (kind, id) index made a bulk of them cost 40-60 % more server time (docs/distributed.md);
//     a list by kind walks the history in ID order instead, quick for any kind that is not rare.
//   - ax.history (state, id) WHERE state <> 1: cancelled and discarded rows only, so a
//     succeeded task's acknowledgement never touches it, yet a list of the rare states does not
//     walk the successes.
//   - ax.dead_letters (kind, id): dead letters are rare writes.

namespace ax::pg::sql::migrations {

/// Migration 6's SQL (several statements, run by the simple protocol).
inline constexpr const char* v6 = R"SQL(
CREATE TABLE ax.pauses (
    scope     text NOT NULL CHECK (scope IN ('kind', 'lane')),
    name      text NOT NULL,
    paused_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, name),
    CHECK (scope = 'kind' AND octet_length(name) BETWEEN 1 AND 200
           OR scope = 'lane' AND name IN ('high', 'normal', 'low'))
);

-- Raises SQLSTATE 22023 naming what is wrong with a pause target.
CREATE FUNCTION ax.check_pause_target(p_scope text, p_name text) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF p_scope = 'kind' THEN
        IF p_name IS NULL OR octet_length(p_name) NOT BETWEEN 1 AND 200 THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = format('ax.pause: kind %L: must be 1..200 bytes', p_name);
        END IF;
    ELSIF p_scope = 'lane' THEN
        IF p_name IS NULL OR p_name NOT IN ('high', 'normal', 'low') THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = format('ax.pause: lane %L: must be high, normal or low', p_name);
        END IF;
    ELSE
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('ax.pause: scope %L: must be kind or lane', p_scope);
    END IF;
END $$;

-- Pauses a kind or a lane cluster-wide; true if it was not paused already. Every node is told
-- (NOTIFY ax_pause, delivered at commit) and stops claiming it; running tasks finish.
CREATE FUNCTION ax.pause(p_scope text, p_name text) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE n integer;
BEGIN
    PERFORM ax.check_pause_target(p_scope, p_name);
    INSERT INTO ax.pauses (scope, name) VALUES (p_scope, p_name) ON CONFLICT DO NOTHING;
    GET DIAGNOSTICS n = ROW_COUNT;
    -- Told even when already paused: a node that missed the first notification learns it now.
    PERFORM pg_notify('ax_pause', p_scope || ' ' || p_name);
    RETURN n > 0;
END $$;

-- Resumes a paused kind or lane; true if it was paused.
CREATE FUNCTION ax.resume(p_scope text, p_name text) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE n integer;
BEGIN
    PERFORM ax.check_pause_target(p_scope, p_name);
    DELETE FROM ax.pauses WHERE scope = p_scope AND name = p_name;
    GET DIAGNOSTICS n = ROW_COUNT;
    PERFORM pg_notify('ax_pause', p_scope || ' ' || p_name);
    RETURN n > 0;
END $$;

CREATE INDEX tasks_kind ON ax.tasks (kind, id) WHERE node_id IS NULL;
CREATE INDEX history_rare ON ax.history (state, id) WHERE state <> 1;
CREATE INDEX dead_letters_kind ON ax.dead_letters (kind, id);
)SQL";

} // namespace ax::pg::sql::migrations
