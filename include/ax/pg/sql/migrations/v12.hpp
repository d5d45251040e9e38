// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// Schema migration 12 of ax's distributed mode: large group-wide concurrency limits are split
// into slices, so several nodes claim one limited group at once. Applied once, in order, inside
// the migrate transaction (detail::migrate in connection.hpp); a migration already released is
// never edited: a change is a new version.
//
// Why: migration 11's ax.claim_grouped takes one advisory lock per limited (group, key) and holds
// it to commit, so the claims of one group ran one at a time across the cluster: a burn-down of a
// group limited to 1,000 on three nodes ran at 0.44x the unlimited one (docs/bench/pg-limits.md).
// A group-wide limit of at least 128 with no rate limit is now cut into S = min(8, limit / 64)
// slices of limit / S slots each (the remainder to the first slices), each with its own advisory
// lock and its own bound in ax.limit_state (key E'\x1e' || slice). A claim try-locks the slices
// starting from its node's, taking them until their free slots cover its quota. A claimed task
// records the slice it was counted in (ax.tasks.grp_slice, 0..7; 0 for an unsliced pool), and a
// slice counts the claimed tasks whose grp_slice is congruent to it mod S, so every claimed task
// of the group is counted by exactly one slice however S changed, and the slices' caps sum to the
// limit: the limit holds across the cluster as before. Smaller limits, per-key limits and rate
// limits keep one lock (one pool). A change of S (set_limit) may, like any lowered limit, let the
// claims already under way finish under the old figure.
//
// Every lock is now try-locked: a pool or slice another claim holds is left to that claim, which
// takes its free slots, so claims never wait for one another and cannot deadlock (migration 11
// waited on each lock in turn: the claims of 100 keys limited to 1 each ran one at a time).
//
// A claim that a limit cut short (a limited key had more work than free slots) ends with one
// sentinel row, ID -1: the node takes it as "work is waiting on a limit", not as empty lanes, and
// claims again after a back-off that starts at 2 ms and doubles to 256 ms while such claims find
// nothing (so a node facing a full group sends at most about 4 claims a second, as idle ones do).
//
// A dead letter keeps its group and key (ax.dead_letters.grp, grp_key), and a replay restores
// them.
//
// Fair shares among a lane's keys become weighted: ax.key_weights (group, key, weight 1..1000,
// default 1), set by ax.set_key_weight / Client::set_key_weight; the ungrouped tasks weigh 1.

namespace ax::pg::sql::migrations {

/// Migration 12's SQL (several statements, run by the simple protocol).
inline constexpr const char* v12 = R"SQL(
ALTER TABLE ax.tasks ADD COLUMN grp_slice smallint;
-- Claimed before this migration: counted in slice 0, as an unsliced pool's claims are.
UPDATE ax.tasks SET grp_slice = 0 WHERE grp IS NOT NULL AND node_id IS NOT NULL;
-- The running counts: per key (a per-key pool: one descent), per group (an unsliced group-wide
-- pool) and per group and slice (a sliced pool: the group's entries, the slice read from the
-- index tuple, no heap visit for the others).
DROP INDEX ax.tasks_grouped_running;
CREATE INDEX tasks_grouped_running ON ax.tasks (grp, grp_key, grp_slice)
    WHERE node_id IS NOT NULL AND grp IS NOT NULL;

-- A dead letter keeps its group and key, so a replay brings it back under its group's limits.
ALTER TABLE ax.dead_letters ADD COLUMN grp text, ADD COLUMN grp_key text NOT NULL DEFAULT '';
CREATE OR REPLACE FUNCTION ax.dead_letter(p_id bigint, p_error text, p_reason text) RETURNS void
LANGUAGE sql AS $$
    WITH d AS (DELETE FROM ax.tasks WHERE id = p_id RETURNING *)
    INSERT INTO ax.dead_letters (id, kind, priority, payload, tags, max_attempts, timeout_ms,
                                 attempts, idem_key, errors, reason, enqueued_at, grp, grp_key)
    SELECT id, kind, priority, payload, tags, max_attempts, timeout_ms, attempts, idem_key,
           CASE WHEN p_error IS NULL THEN errors ELSE errors || p_error END, p_reason, enqueued_at,
           grp, grp_key
    FROM d $$;
CREATE OR REPLACE FUNCTION ax.replay_dead_letter(p_id bigint) RETURNS boolean LANGUAGE sql AS $$
    WITH d AS (DELETE FROM ax.dead_letters WHERE id = p_id RETURNING *),
    i AS (INSERT INTO ax.tasks (id, kind, priority, payload, tags, max_attempts, timeout_ms,
                                idem_key, enqueued_at, grp, grp_key)
          SELECT id, kind, priority, payload, tags, max_attempts, timeout_ms, idem_key, enqueued_at,
                 grp, grp_key
          FROM d RETURNING id)
    SELECT EXISTS (SELECT 1 FROM i) $$;

CREATE TABLE ax.key_weights (
    grp     text NOT NULL CHECK (length(grp) BETWEEN 1 AND 200),
    grp_key text NOT NULL CHECK (length(grp_key) <= 200),
    weight  integer NOT NULL CHECK (weight BETWEEN 1 AND 1000),
    PRIMARY KEY (grp, grp_key)
);

-- Sets a key's weight in its lane's fair shares (1..1000); weight 1 (the default) removes the row.
CREATE FUNCTION ax.set_key_weight(g text, k text, w integer) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF g IS NULL OR length(g) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'ax.set_key_weight: group = %: must be 1..200 bytes', coalesce(left(g, 40), 'NULL')
            USING ERRCODE = '22023';
    END IF;
    IF k IS NULL OR length(k) > 200 THEN
        RAISE EXCEPTION 'ax.set_key_weight: key must be 0..200 bytes' USING ERRCODE = '22023';
    END IF;
    IF w IS NULL OR w NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'ax.set_key_weight: weight = %: must be 1..1000', w USING ERRCODE = '22023';
    END IF;
    IF w = 1 THEN
        DELETE FROM ax.key_weights x WHERE x.grp = g AND x.grp_key = k;
    ELSE
        INSERT INTO ax.key_weights AS x (grp, grp_key, weight) VALUES (g, k, w)
        ON CONFLICT (grp, grp_key) DO UPDATE SET weight = excluded.weight;
    END IF;
END $$;

-- The claim of a batch when grouped tasks wait: the same arguments and rows as the claim
-- statement (schema.hpp), one batch. Lane p gets at most q[p]; within a lane, the quota is shared
-- among the keys with work and the ungrouped tasks in proportion to their weights (water-filling:
-- a key that wants less than its share leaves the rest to the others), so a flood in one key does
-- not hold back another. Every advisory lock is try-locked: a claim never waits for another
-- (so none can deadlock and claims of one group never queue); a pool or slice another claim holds
-- is left to it, and the claim ends with the sentinel row (work held back). At most 1000 keys are
-- visited per claim, in (grp, grp_key) order.
CREATE OR REPLACE FUNCTION ax.claim_grouped(p_node bigint, p_kinds text[], p_tags text[], q0 bigint,
                                            q1 bigint, q2 bigint, p_lease_ms bigint)
RETURNS TABLE (r_id bigint, r_batch bigint, r_kind int4, r_priority smallint, r_attempts int4,
               r_timeout int4, r_cancel boolean, r_waited bigint, r_payload bytea)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    q bigint[] := ARRAY[q0, q1, q2];
    need bigint := q0 + q1 + q2;
    ids bigint[] := '{}';
    idsl smallint[] := '{}';  -- the slice each claimed task is counted in (NULL: ungrouped)
    got bigint[];
    kg text[];
    kk text[];
    kw bigint[];          -- each key's weight
    kpool int[];          -- each key's pool (0: unlimited)
    pg_ text[] := '{}';   -- pool: group
    pav bigint[] := '{}'; -- pool: slots left (NULL: unlimited)
    prate boolean[] := '{}';
    pws timestamptz[] := '{}';
    pst bigint[] := '{}';  -- pool: starts in its window before this claim
    pe1 int[] := '{}';     -- pool: its first entry (below)
    pcur int[] := '{}';    -- pool: the entry the next claimed task is counted in
    -- Entries: one per locked (pool, slice); an unsliced pool has one.
    ekey text[] := '{}';   -- limit_state / lock key
    esl smallint[] := '{}';
    efree bigint[] := '{}'; -- slots this claim may take in it (NULL: no concurrency limit)
    ebound bigint[] := '{}';
    erecount boolean[] := '{}';
    egot bigint[] := '{}';
    ne int := 0;
    want bigint[];
    alloc bigint[];
    uwant bigint; ualloc bigint; uany boolean;
    lim record;
    n int; np int; i int; j int; sn int; nsl int; lane int; remaining bigint; t bigint;
    wsum bigint; cap bigint; tot bigint; m int; k int; e int; maxlk int;
    bnd bigint; recount boolean; conc bigint; rate bigint; ws timestamptz; st bigint;
    b bigint;
    held boolean := false;  -- a limit left a key's work unclaimed: the sentinel row says so
BEGIN
    WITH RECURSIVE s AS (
        (SELECT t.grp, t.grp_key FROM ax.tasks t
          WHERE t.node_id IS NULL AND t.grp IS NOT NULL ORDER BY t.grp, t.grp_key LIMIT 1)
        UNION ALL
        SELECT x.grp, x.grp_key FROM s, LATERAL (
            SELECT t.grp, t.grp_key FROM ax.tasks t
             WHERE t.node_id IS NULL AND t.grp IS NOT NULL AND (t.grp, t.grp_key) > (s.grp, s.grp_key)
             ORDER BY t.grp, t.grp_key LIMIT 1) x)
    SELECT array_agg(s2.grp ORDER BY s2.grp, s2.grp_key), array_agg(s2.grp_key ORDER BY s2.grp, s2.grp_key),
           array_agg(coalesce(w.weight, 1) ORDER BY s2.grp, s2.grp_key)
      INTO kg, kk, kw
      FROM (SELECT s.grp, s.grp_key FROM s LIMIT 1000) s2
      LEFT JOIN ax.key_weights w ON w.grp = s2.grp AND w.grp_key = s2.grp_key;
    n := coalesce(cardinality(kg), 0);
    kpool := array_fill(0, ARRAY[greatest(n, 1)]);
    np := 0;
    FOR i IN 1..n LOOP
        SELECT * INTO lim FROM ax.limits l WHERE l.grp = kg[i];
        CONTINUE WHEN NOT FOUND;
        IF NOT lim.per_key AND np > 0 AND pg_[np] = kg[i] THEN
            kpool[i] := np;  -- group-wide: the group's keys share its pool
            CONTINUE;
        END IF;
        np := np + 1;
        kpool[i] := np;
        pg_[np] := kg[i];
        pe1[np] := ne + 1;
        pcur[np] := ne + 1;
        nsl := 1;
        IF NOT lim.per_key AND lim.rate_n IS NULL AND lim.max_running >= 128 THEN
            nsl := least(8, lim.max_running / 64);
        END IF;
        IF nsl > 1 THEN
            -- Sliced: the slices this claim can lock without waiting, until their free slots
            -- cover its quota or it holds its quota's part of the slices (so one claim does not
            -- take them all while others wait). Consecutive node IDs start that many slices
            -- apart. When every slice is taken, the pool is left to the claims holding them.
            tot := 0;
            maxlk := least(nsl, greatest(1, ceil(nsl * least(need, lim.max_running)::numeric
                                                 / lim.max_running)::int));
            FOR j IN 0..nsl - 1 LOOP
                sn := ((p_node * maxlk + j) % nsl)::int;
                IF NOT pg_try_advisory_xact_lock(
                        hashtextextended(kg[i] || E'\x1f' || E'\x1e' || sn::text, 2911)) THEN
                    held := true;
                    CONTINUE;
                END IF;
                cap := lim.max_running / nsl + CASE WHEN sn < lim.max_running % nsl THEN 1 ELSE 0 END;
                SELECT x.bound INTO bnd FROM ax.limit_state x
                 WHERE x.grp = kg[i] AND x.grp_key = E'\x1e' || sn::text;
                recount := false;
                IF bnd IS NULL OR 2 * (cap - bnd) < least(need, cap) THEN
                    SELECT count(*) INTO bnd FROM ax.tasks t
                     WHERE t.grp = kg[i] AND t.node_id IS NOT NULL
                       AND t.grp_slice = ANY (ARRAY(SELECT generate_series(sn, 7, nsl))::smallint[]);
                    recount := true;
                END IF;
                ne := ne + 1;
                ekey[ne] := E'\x1e' || sn::text;
                esl[ne] := sn;
                efree[ne] := greatest(cap - bnd, 0);
                ebound[ne] := bnd;
                erecount[ne] := recount;
                egot[ne] := 0;
                tot := tot + efree[ne];
                EXIT WHEN tot >= need OR ne - pe1[np] + 1 >= maxlk;
            END LOOP;
            pav[np] := tot;
            prate[np] := false;
            pws[np] := NULL;
            pst[np] := 0;
            CONTINUE;
        END IF;
        ne := ne + 1;
        ekey[ne] := CASE WHEN lim.per_key THEN kk[i] ELSE '' END;
        esl[ne] := 0;
        egot[ne] := 0;
        erecount[ne] := false;
        prate[np] := false;
        pws[np] := NULL;
        pst[np] := 0;
        IF NOT pg_try_advisory_xact_lock(hashtextextended(pg_[np] || E'\x1f' || ekey[ne], 2911)) THEN
            -- Another claim holds this pool and takes its free slots; this one leaves it alone
            -- (claims never queue behind one another) and says that work is held back.
            held := true;
            pav[np] := 0;
            efree[ne] := 0;
            ebound[ne] := NULL;
            CONTINUE;
        END IF;
        -- After the lock (each statement of its own: a fresh snapshot), every claim of this pool
        -- committed before is seen: in its bound and in the count.
        SELECT x.window_start, x.started, x.bound INTO ws, st, bnd FROM ax.limit_state x
         WHERE x.grp = pg_[np] AND x.grp_key = ekey[ne];
        st := coalesce(st, 0);
        recount := false;
        conc := NULL;
        IF lim.max_running IS NOT NULL THEN
            -- The bound (running <= bound: claims raise both, only ends lower running) spares
            -- the count while it leaves at least half of what this claim could take (its quota,
            -- at most the limit); closer to the limit, or without a bound, count.
            IF bnd IS NULL OR 2 * (lim.max_running - bnd) < least(need, lim.max_running) THEN
                IF lim.per_key THEN
                    SELECT count(*) INTO bnd FROM ax.tasks t
                     WHERE t.grp = kg[i] AND t.grp_key = kk[i] AND t.node_id IS NOT NULL;
                ELSE
                    SELECT count(*) INTO bnd FROM ax.tasks t
                     WHERE t.grp = kg[i] AND t.node_id IS NOT NULL;
                END IF;
                recount := true;
            END IF;
            conc := greatest(lim.max_running - bnd, 0);
        END IF;
        rate := NULL;
        IF lim.rate_n IS NOT NULL THEN
            IF ws IS NULL OR clock_timestamp() >= ws + lim.rate_period_ms * interval '1 millisecond' THEN
                ws := NULL; st := 0;   -- a new window opens with this claim's first start
            END IF;
            rate := greatest(lim.rate_n - st, 0);
        END IF;
        pav[np] := least(conc, rate);
        efree[ne] := pav[np];
        ebound[ne] := bnd;
        erecount[ne] := recount;
        egot[ne] := 0;
        prate[np] := lim.rate_n IS NOT NULL;
        pws[np] := ws;
        pst[np] := st;
    END LOOP;

    FOR lane IN 0..2 LOOP
        CONTINUE WHEN q[lane + 1] <= 0;
        want := array_fill(0::bigint, ARRAY[greatest(n, 1)]);
        alloc := array_fill(0::bigint, ARRAY[greatest(n, 1)]);
        ualloc := 0;
        SELECT EXISTS (SELECT 1 FROM ax.tasks x
                        WHERE x.node_id IS NULL AND x.grp IS NULL AND x.priority = lane
                          AND x.run_at <= now() AND x.kind = ANY (p_kinds) AND x.tags <@ p_tags)
          INTO uany;
        IF n = 1 AND NOT uany THEN
            -- One key and nothing ungrouped: no shares to work out, the key takes what it may.
            t := q[lane + 1];
            IF kpool[1] > 0 AND pav[kpool[1]] IS NOT NULL THEN
                held := held OR pav[kpool[1]] < t;
                t := least(t, pav[kpool[1]]);
                pav[kpool[1]] := pav[kpool[1]] - t;
            END IF;
            alloc[1] := t;
        ELSE
            wsum := 0;
            FOR i IN 1..n LOOP
                t := q[lane + 1];
                IF kpool[i] > 0 AND pav[kpool[i]] IS NOT NULL THEN
                    held := held OR pav[kpool[i]] < t;
                    t := least(t, pav[kpool[i]]);
                END IF;
                IF t > 0 THEN
                    SELECT count(*) INTO t FROM (
                        SELECT 1 FROM ax.tasks x
                         WHERE x.node_id IS NULL AND x.grp = kg[i] AND x.grp_key = kk[i]
                           AND x.priority = lane AND x.run_at <= now()
                           AND x.kind = ANY (p_kinds) AND x.tags <@ p_tags
                         LIMIT t) c;
                END IF;
                want[i] := t;
                IF t > 0 THEN wsum := wsum + kw[i]; END IF;
            END LOOP;
            uwant := 0;
            IF uany THEN
                SELECT count(*) INTO uwant FROM (
                    SELECT 1 FROM ax.tasks x
                     WHERE x.node_id IS NULL AND x.grp IS NULL AND x.priority = lane
                       AND x.run_at <= now() AND x.kind = ANY (p_kinds) AND x.tags <@ p_tags
                     LIMIT q[lane + 1]) c;
                wsum := wsum + 1;
            END IF;
            remaining := q[lane + 1];
            -- Water-filling: each round gives every key still wanting its weight's part of what
            -- is left (at least one task).
            WHILE remaining > 0 AND wsum > 0 LOOP
                t := remaining;  -- what this round shares out
                wsum := greatest(wsum, 1);
                j := wsum;       -- the weights of this round
                wsum := 0;
                FOR i IN 1..n LOOP
                    CONTINUE WHEN alloc[i] >= want[i] OR remaining = 0;
                    m := least(greatest(t * kw[i] / j, 1), want[i] - alloc[i], remaining);
                    IF kpool[i] > 0 AND pav[kpool[i]] IS NOT NULL THEN
                        m := least(m, pav[kpool[i]]);
                        pav[kpool[i]] := pav[kpool[i]] - m;
                    END IF;
                    alloc[i] := alloc[i] + m;
                    remaining := remaining - m;
                    IF alloc[i] < want[i] AND (kpool[i] = 0 OR coalesce(pav[kpool[i]], 1) > 0) THEN
                        wsum := wsum + kw[i];
                    END IF;
                END LOOP;
                IF ualloc < uwant AND remaining > 0 THEN
                    m := least(greatest(t / j, 1), uwant - ualloc, remaining);
                    ualloc := ualloc + m;
                    remaining := remaining - m;
                    IF ualloc < uwant THEN wsum := wsum + 1; END IF;
                END IF;
            END LOOP;
        END IF;
        FOR i IN 1..n LOOP
            CONTINUE WHEN alloc[i] = 0;
            got := ARRAY(SELECT x.id FROM ax.tasks x
                          WHERE x.node_id IS NULL AND x.grp = kg[i] AND x.grp_key = kk[i]
                            AND x.priority = lane AND x.run_at <= now()
                            AND x.kind = ANY (p_kinds) AND x.tags <@ p_tags
                          ORDER BY x.grp, x.grp_key, x.priority, x.run_at, x.id
                          LIMIT alloc[i] FOR UPDATE SKIP LOCKED);
            m := cardinality(got);
            IF kpool[i] > 0 AND pav[kpool[i]] IS NOT NULL THEN  -- give back what was skipped
                pav[kpool[i]] := pav[kpool[i]] + alloc[i] - m;
            END IF;
            CONTINUE WHEN m = 0;
            ids := ids || got;
            IF kpool[i] = 0 THEN
                idsl := idsl || array_fill(0::smallint, ARRAY[m]);
                CONTINUE;
            END IF;
            -- Count each task in a slice with room, the pool's entries in order.
            k := 0;
            e := pcur[kpool[i]];
            WHILE k < m LOOP
                t := m - k;
                IF efree[e] IS NOT NULL THEN
                    t := least(t, efree[e] - egot[e]);
                END IF;
                IF t <= 0 THEN
                    e := e + 1;
                    CONTINUE;
                END IF;
                idsl := idsl || array_fill(esl[e], ARRAY[t::int]);
                egot[e] := egot[e] + t;
                k := k + t::int;
            END LOOP;
            pcur[kpool[i]] := e;
        END LOOP;
        IF ualloc > 0 THEN
            got := ARRAY(SELECT x.id FROM ax.tasks x
                          WHERE x.node_id IS NULL AND x.grp IS NULL AND x.priority = lane
                            AND x.run_at <= now() AND x.kind = ANY (p_kinds)
                            AND x.tags <@ p_tags
                          ORDER BY x.priority, x.run_at, x.id
                          LIMIT ualloc FOR UPDATE SKIP LOCKED);
            ids := ids || got;
            idsl := idsl || array_fill(NULL::smallint, ARRAY[cardinality(got)]);
        END IF;
    END LOOP;

    FOR i IN 1..np LOOP
        e := pe1[i];
        WHILE e <= ne AND (i = np OR e < pe1[i + 1]) LOOP
            IF egot[e] > 0 OR erecount[e] THEN
                INSERT INTO ax.limit_state AS x (grp, grp_key, window_start, started, bound)
                VALUES (pg_[i], ekey[e],
                        CASE WHEN prate[i] AND egot[e] > 0 THEN coalesce(pws[i], clock_timestamp())
                             ELSE pws[i] END,
                        pst[i] + egot[e], ebound[e] + egot[e])
                ON CONFLICT (grp, grp_key) DO UPDATE
                    SET window_start = excluded.window_start, started = excluded.started,
                        bound = excluded.bound;
            END IF;
            e := e + 1;
        END LOOP;
    END LOOP;

    IF cardinality(ids) = 0 THEN
        IF held THEN
            RETURN QUERY SELECT -1::bigint, 0::bigint, 0::int4, 0::smallint, 0::int4, 0::int4,
                                false, 0::bigint, ''::bytea;
        END IF;
        RETURN;
    END IF;
    INSERT INTO ax.batches (node_id, size, checksum, lease_until)
    SELECT p_node, count(*), coalesce(bit_xor(u), 0), now() + p_lease_ms * interval '1 millisecond'
      FROM unnest(ids) u
    RETURNING id INTO b;
    RETURN QUERY
    UPDATE ax.tasks t SET node_id = p_node, batch_id = b, attempts = t.attempts + 1,
                          grp_slice = u.sl
      FROM unnest(ids, idsl) AS u(id, sl)
     WHERE t.id = ANY (ids) AND t.id = u.id  -- the ANY: an index scan of the batch, never a seq scan
    RETURNING t.id, b, array_position(p_kinds, t.kind)::int4, t.priority, t.attempts,
              t.timeout_ms, t.cancel_requested,
              (extract(epoch FROM now() - t.run_at) * 1000)::int8, t.payload;
    -- Last, after the tasks: ID -1, never a task's. The node then neither takes the lanes for
    -- empty nor waits out the empty-claim floor, but claims again after a short back-off.
    IF held THEN
        RETURN QUERY SELECT -1::bigint, 0::bigint, 0::int4, 0::smallint, 0::int4, 0::int4, false,
                            0::bigint, ''::bytea;
    END IF;
END $$;
)SQL";

} // namespace ax::pg::sql::migrations
