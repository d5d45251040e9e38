// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// Schema migration 3 of ax's distributed mode: the history prune finds old rows without reading the
// recent ones. Applied once, in order, inside the migrate transaction (detail::migrate in
// connection.hpp); a migration already released is never edited: a change is a new version.
//
// The history prune must find old rows without reading the recent ones. Its BRIN index on
// finished_at knows nothing of the pages filled since it was last summarized (VACUUM
// summarizes; at tens of thousands of tasks a second that is millions of rows), and a
// planner without statistics on a young history (its default estimate: a third of the rows
// match) prefers a sequential scan "to find the LIMIT soon": either way every pass read the
// whole recent history, 0.1-0.3 s per pass with a million rows, growing with the table.

namespace ax::pg::sql::migrations {

/// Migration 3's SQL (several statements, run by the simple protocol).
inline constexpr const char* v3 = R"SQL(
-- Summarizes the history's new BRIN ranges when this role may (it must own the index), never
-- waiting more than 20 ms behind a VACUUM of the table (then the next pass does it).
CREATE FUNCTION ax.summarize_history() RETURNS void
LANGUAGE plpgsql SET lock_timeout = '20ms' AS $$
BEGIN
    IF (SELECT pg_has_role(c.relowner, 'USAGE') FROM pg_class c
         WHERE c.oid = 'ax.history_finished'::regclass) THEN
        PERFORM brin_summarize_new_values('ax.history_finished'::regclass);
    END IF;
EXCEPTION WHEN lock_not_available THEN
    NULL;
END $$;
-- One batch of old history, found through the BRIN index (summarized first; the planner kept
-- off a sequential scan).
CREATE FUNCTION ax.prune_history(p_history_ms bigint, p_prune_limit integer) RETURNS integer
LANGUAGE plpgsql SET enable_seqscan = off AS $$
DECLARE n integer;
BEGIN
    PERFORM ax.summarize_history();
    DELETE FROM ax.history h USING (
        SELECT ctid FROM ax.history
         WHERE finished_at < now() - p_history_ms * interval '1 millisecond'
         LIMIT p_prune_limit) old
     WHERE h.ctid = old.ctid;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END $$;
ALTER FUNCTION ax.maintain(bigint, integer) RENAME TO maintain_v2;
-- ax.maintain as in version 2, with its prune (given a limit of 0: no scan at all) replaced by
-- ax.prune_history, run by the node holding the maintenance lock.
CREATE FUNCTION ax.maintain(p_history_ms bigint, p_prune_limit integer,
    OUT got_lock boolean, OUT reclaimed_batches bigint[], OUT reclaimed_nodes text[],
    OUT requeued integer, OUT dead integer, OUT pruned integer, OUT next_expiry_ms bigint,
    OUT dead_rows bigint)
LANGUAGE plpgsql AS $$
BEGIN
    SELECT * INTO got_lock, reclaimed_batches, reclaimed_nodes, requeued, dead, pruned,
                  next_expiry_ms, dead_rows
      FROM ax.maintain_v2(p_history_ms, 0);
    IF got_lock THEN
        pruned := ax.prune_history(p_history_ms, p_prune_limit);
    END IF;
END $$;
)SQL";

} // namespace ax::pg::sql::migrations
