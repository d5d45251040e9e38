// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// Schema migration 2 of ax's distributed mode: ax.maintain answers the next lease expiry and the
// hot table's dead rows. Applied once, in order, inside the migrate transaction (detail::migrate in
// connection.hpp); a migration already released is never edited: a change is a new version.
//
// Maintenance also answers when the earliest lease still running expires, so nodes run it
// again right then instead of up to a maintenance interval later: a dead node's batches are
// reclaimed within moments of their lease's end. And it reports the hot table's dead row
// versions, so the maintenance node can vacuum it long before autovacuum would look.

namespace ax::pg::sql::migrations {

/// Migration 2's SQL (several statements, run by the simple protocol).
inline constexpr const char* v2 = R"SQL(
DROP FUNCTION ax.maintain(bigint, integer);
-- Maintenance, run by one node at a time (advisory lock): batches whose lease expired go back
-- (attempt counted; past max_attempts to the dead letters), long-expired node rows are dropped,
-- and one batch of old history is pruned. Whether or not it got the lock, it answers
-- next_expiry_ms: milliseconds until the earliest unexpired batch lease ends (NULL: none), so
-- the caller can run it again right then. Expired batches are left out of that figure when the
-- lock was taken by another node (which is reclaiming them). With the lock it also answers
-- dead_rows: ax.tasks's dead row versions as the statistics last saw them (the node vacuums the
-- table past NodeOptions::vacuum_dead_rows), NULL when this role may not vacuum it.
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
                 WHERE batch_id = ANY (expired) FOR UPDATE
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
    DELETE FROM ax.history h USING (
        SELECT ctid FROM ax.history
         WHERE finished_at < now() - p_history_ms * interval '1 millisecond'
         LIMIT p_prune_limit) old
     WHERE h.ctid = old.ctid;
    GET DIAGNOSTICS pruned = ROW_COUNT;
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
