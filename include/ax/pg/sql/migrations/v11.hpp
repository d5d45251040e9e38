// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// Schema migration 11 of ax's distributed mode: cluster-wide concurrency and rate limits per task
// group (optionally per partition key), and fair sharing among a lane's keys. Applied once, in
// order, inside the migrate transaction (detail::migrate in connection.hpp); a migration already
// released is never edited: a change is a new version.
//
// A task may name a group (ax.tasks.grp) and a partition key (grp_key, '' when none). Ungrouped
// tasks keep the claim they had: the claim index now holds only them (grp IS NULL), and the claim
// statement (schema.hpp) calls ax.claim_grouped instead of its own scans only while some grouped
// task waits unclaimed (one probe of the empty tasks_grouped index otherwise).
//
// ax.claim_grouped is one plpgsql call, so each of its statements reads a fresh snapshot (READ
// COMMITTED): for every limited (group, key) it takes a transaction-scoped advisory lock first,
// then counts the claimed tasks of that group (or key) -- so it sees every claim committed by
// whoever held the lock before -- and claims at most the remaining slots. The lock is held until
// the claim's transaction commits, so two claimers of one key never both see the same free slot.
// Claimed = node_id IS NOT NULL: a slot is freed by whatever ends the claim (acknowledgement,
// failure, snooze, release, cancel, lease expiry), with no counter to drift. Rate limits keep a
// fixed window per (group, key) in ax.limit_state, updated under the same lock.

namespace ax::pg::sql::migrations {

/// Migration 11's SQL (several statements, run by the simple protocol).
inline constexpr const char* v11 = R"SQL(
ALTER TABLE ax.tasks ADD COLUMN grp text, ADD COLUMN grp_key text NOT NULL DEFAULT '';
ALTER TABLE ax.tasks ADD CONSTRAINT tasks_grp_len
    CHECK ((grp IS NULL AND grp_key = '') OR (length(grp) BETWEEN 1 AND 200 AND length(grp_key) <= 200));
-- The ungrouped claim's index: only claimable ungrouped rows, so waiting limited tasks are never
-- walked by it.
DROP INDEX ax.tasks_claim;
CREATE INDEX tasks_claim ON ax.tasks (priority, run_at, id) WHERE node_id IS NULL AND grp IS NULL;
-- Grouped claimable rows by key (the key scan, each key's claim), and grouped claimed rows (the
-- running counts).
CREATE INDEX tasks_grouped ON ax.tasks (grp, grp_key, priority, run_at, id)
    WHERE node_id IS NULL AND grp IS NOT NULL;
CREATE INDEX tasks_grouped_running ON ax.tasks (grp, grp_key)
    WHERE node_id IS NOT NULL AND grp IS NOT NULL;

CREATE TABLE ax.limits (
    grp            text PRIMARY KEY CHECK (length(grp) BETWEEN 1 AND 200),
    max_running    integer CHECK (max_running >= 0),       -- NULL: no concurrency limit
    per_key        boolean NOT NULL DEFAULT false,          -- each partition key on its own
    rate_n         integer CHECK (rate_n >= 0),             -- NULL: no rate limit
    rate_period_ms bigint  CHECK (rate_period_ms > 0),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    CHECK ((rate_n IS NULL) = (rate_period_ms IS NULL)),
    CHECK (max_running IS NOT NULL OR rate_n IS NOT NULL)
);
-- Per limited (group, key), key '' for a group-wide limit: the rate window (its start, NULL
-- before the first start, and the starts in it) and an upper bound on the claimed tasks (claims
-- add to it; ax.claim_grouped recounts when it nears the limit). Written only under the pool's
-- advisory lock.
CREATE TABLE ax.limit_state (
    grp          text NOT NULL,
    grp_key      text NOT NULL,
    window_start timestamptz,
    started      integer NOT NULL DEFAULT 0,
    bound        integer,
    PRIMARY KEY (grp, grp_key)
) WITH (fillfactor = 50);

-- The advisory lock of a limited (group, key): key '' for a group-wide limit.
CREATE FUNCTION ax.limit_lock(g text, k text) RETURNS void LANGUAGE sql AS $$
    SELECT pg_advisory_xact_lock(hashtextextended(g || E'\x1f' || k, 2911))
$$;

-- Sets (or replaces) a group's limits; a NULL max_running / rate_n means none of that kind.
CREATE FUNCTION ax.set_limit(g text, max_running integer, per_key boolean, rate_n integer,
                             rate_period_ms bigint) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO ax.limits AS l (grp, max_running, per_key, rate_n, rate_period_ms)
    VALUES (g, max_running, per_key, rate_n, rate_period_ms)
    ON CONFLICT (grp) DO UPDATE SET max_running = excluded.max_running,
        per_key = excluded.per_key, rate_n = excluded.rate_n,
        rate_period_ms = excluded.rate_period_ms, updated_at = now();
    -- A change of mode or period starts the windows afresh.
    DELETE FROM ax.limit_state s WHERE s.grp = g;
    PERFORM pg_notify('ax_wake', '');
END $$;

CREATE FUNCTION ax.clear_limit(g text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM ax.limit_state s WHERE s.grp = g;
    DELETE FROM ax.limits l WHERE l.grp = g;
    IF FOUND THEN PERFORM pg_notify('ax_wake', ''); RETURN true; END IF;
    RETURN false;
END $$;

-- The claim of a batch when grouped tasks wait: the same arguments and rows as the claim
-- statement (schema.hpp), one batch. Lane p gets at most q[p]; within a lane, the quota is shared
-- evenly among the keys with work and the ungrouped tasks (water-filling: a key that wants less
-- than its share leaves the rest to the others), so a flood in one key does not hold back another.
-- Keys are visited in (grp, grp_key) order (the advisory locks' order: no deadlock), at most 1000
-- per claim.
CREATE FUNCTION ax.claim_grouped(p_node bigint, p_kinds text[], p_tags text[], q0 bigint,
                                 q1 bigint, q2 bigint, p_lease_ms bigint)
RETURNS TABLE (r_id bigint, r_batch bigint, r_kind int4, r_priority smallint, r_attempts int4,
               r_timeout int4, r_cancel boolean, r_waited bigint, r_payload bytea)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    q bigint[] := ARRAY[q0, q1, q2];
    ids bigint[] := '{}';
    got bigint[];
    kg text[];
    kk text[];
    kpool int[];       -- each key's pool (0: unlimited)
    pg_ text[] := '{}';   -- pool: group
    pk text[] := '{}';    -- pool: lock key ('' group-wide)
    pav bigint[] := '{}'; -- pool: slots left (NULL: unlimited)
    prate boolean[] := '{}';
    pws timestamptz[] := '{}';
    pst bigint[] := '{}';  -- pool: starts in its window before this claim
    pgot bigint[] := '{}'; -- pool: claimed by this call
    pbound bigint[] := '{}'; -- pool: its bound on running claims (NULL: no concurrency limit)
    precount boolean[] := '{}';
    want bigint[];
    alloc bigint[];
    uwant bigint; ualloc bigint; uany boolean;
    lim record;
    n int; np int; i int; lane int; active int; share bigint; remaining bigint; t bigint;
    bnd bigint; recount boolean; conc bigint; rate bigint; ws timestamptz; st bigint;
    b bigint;
BEGIN
    WITH RECURSIVE s AS (
        (SELECT t.grp, t.grp_key FROM ax.tasks t
          WHERE t.node_id IS NULL AND t.grp IS NOT NULL ORDER BY t.grp, t.grp_key LIMIT 1)
        UNION ALL
        SELECT x.grp, x.grp_key FROM s, LATERAL (
            SELECT t.grp, t.grp_key FROM ax.tasks t
             WHERE t.node_id IS NULL AND t.grp IS NOT NULL AND (t.grp, t.grp_key) > (s.grp, s.grp_key)
             ORDER BY t.grp, t.grp_key LIMIT 1) x)
    SELECT array_agg(s2.grp), array_agg(s2.grp_key) INTO kg, kk
      FROM (SELECT s.grp, s.grp_key FROM s LIMIT 1000) s2;
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
        pk[np] := CASE WHEN lim.per_key THEN kk[i] ELSE '' END;
        PERFORM ax.limit_lock(pg_[np], pk[np]);
        -- After the lock (each statement of its own: a fresh snapshot), every claim of this pool
        -- committed before is seen: in its bound and in the count.
        SELECT s.window_start, s.started, s.bound INTO ws, st, bnd FROM ax.limit_state s
         WHERE s.grp = pg_[np] AND s.grp_key = pk[np];
        st := coalesce(st, 0);
        recount := false;
        conc := NULL;
        IF lim.max_running IS NOT NULL THEN
            -- The bound (running <= bound: claims raise both, only ends lower running) spares
            -- the count while it leaves at least half of what this claim could take (its quota,
            -- at most the limit); closer to the limit, or without a bound, count.
            IF bnd IS NULL
               OR 2 * (lim.max_running - bnd) < least(q0 + q1 + q2, lim.max_running) THEN
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
        prate[np] := lim.rate_n IS NOT NULL;
        pws[np] := ws;
        pst[np] := st;
        pbound[np] := bnd;
        precount[np] := recount;
        pgot[np] := 0;
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
                t := least(t, pav[kpool[1]]);
                pav[kpool[1]] := pav[kpool[1]] - t;
            END IF;
            alloc[1] := t;
        ELSE
            active := 0;
            FOR i IN 1..n LOOP
                t := q[lane + 1];
                IF kpool[i] > 0 AND pav[kpool[i]] IS NOT NULL THEN
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
                IF t > 0 THEN active := active + 1; END IF;
            END LOOP;
            uwant := 0;
            IF uany THEN
                SELECT count(*) INTO uwant FROM (
                    SELECT 1 FROM ax.tasks x
                     WHERE x.node_id IS NULL AND x.grp IS NULL AND x.priority = lane
                       AND x.run_at <= now() AND x.kind = ANY (p_kinds) AND x.tags <@ p_tags
                     LIMIT q[lane + 1]) c;
                active := active + 1;
            END IF;
            remaining := q[lane + 1];
            -- Water-filling: each round gives every key still wanting an equal share.
            WHILE remaining > 0 AND active > 0 LOOP
                share := greatest(remaining / active, 1);
                active := 0;
                FOR i IN 1..n LOOP
                    CONTINUE WHEN alloc[i] >= want[i] OR remaining = 0;
                    t := least(share, want[i] - alloc[i], remaining);
                    IF kpool[i] > 0 AND pav[kpool[i]] IS NOT NULL THEN
                        t := least(t, pav[kpool[i]]);
                        pav[kpool[i]] := pav[kpool[i]] - t;
                    END IF;
                    alloc[i] := alloc[i] + t;
                    remaining := remaining - t;
                    IF alloc[i] < want[i] AND (kpool[i] = 0 OR coalesce(pav[kpool[i]], 1) > 0) THEN
                        active := active + 1;
                    END IF;
                END LOOP;
                IF ualloc < uwant AND remaining > 0 THEN
                    t := least(share, uwant - ualloc, remaining);
                    ualloc := ualloc + t;
                    remaining := remaining - t;
                    IF ualloc < uwant THEN active := active + 1; END IF;
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
            ids := ids || got;
            IF kpool[i] > 0 THEN
                pgot[kpool[i]] := pgot[kpool[i]] + cardinality(got);
                IF pav[kpool[i]] IS NOT NULL THEN  -- give back what was skipped
                    pav[kpool[i]] := pav[kpool[i]] + alloc[i] - cardinality(got);
                END IF;
            END IF;
        END LOOP;
        IF ualloc > 0 THEN
            ids := ids || ARRAY(SELECT x.id FROM ax.tasks x
                                 WHERE x.node_id IS NULL AND x.grp IS NULL AND x.priority = lane
                                   AND x.run_at <= now() AND x.kind = ANY (p_kinds)
                                   AND x.tags <@ p_tags
                                 ORDER BY x.priority, x.run_at, x.id
                                 LIMIT ualloc FOR UPDATE SKIP LOCKED);
        END IF;
    END LOOP;

    FOR i IN 1..np LOOP
        CONTINUE WHEN pgot[i] = 0 AND NOT precount[i];
        INSERT INTO ax.limit_state AS s (grp, grp_key, window_start, started, bound)
        VALUES (pg_[i], pk[i],
                CASE WHEN prate[i] AND pgot[i] > 0 THEN coalesce(pws[i], clock_timestamp())
                     ELSE pws[i] END,
                pst[i] + pgot[i], pbound[i] + pgot[i])
        ON CONFLICT (grp, grp_key) DO UPDATE
            SET window_start = excluded.window_start, started = excluded.started,
                bound = excluded.bound;
    END LOOP;

    IF cardinality(ids) = 0 THEN
        RETURN;
    END IF;
    INSERT INTO ax.batches (node_id, size, checksum, lease_until)
    SELECT p_node, count(*), coalesce(bit_xor(u), 0), now() + p_lease_ms * interval '1 millisecond'
      FROM unnest(ids) u
    RETURNING id INTO b;
    RETURN QUERY
    UPDATE ax.tasks t SET node_id = p_node, batch_id = b, attempts = t.attempts + 1
     WHERE t.id = ANY (ids)
    RETURNING t.id, b, array_position(p_kinds, t.kind)::int4, t.priority, t.attempts,
              t.timeout_ms, t.cancel_requested,
              (extract(epoch FROM now() - t.run_at) * 1000)::int8, t.payload;
END $$;

-- When a limited group's next slot opens: now for free concurrency slots, else the rate window's
-- end (NULL: no rate window is full).
CREATE FUNCTION ax.limit_next_slot(g text, k text) RETURNS timestamptz LANGUAGE sql STABLE AS $$
    SELECT s.window_start + l.rate_period_ms * interval '1 millisecond'
      FROM ax.limits l JOIN ax.limit_state s ON s.grp = l.grp
     WHERE l.grp = g AND s.grp_key = k AND s.started >= l.rate_n
       AND s.window_start + l.rate_period_ms * interval '1 millisecond' > clock_timestamp()
$$;
)SQL";

} // namespace ax::pg::sql::migrations
