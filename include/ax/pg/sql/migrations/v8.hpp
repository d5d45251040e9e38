// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// Schema migration 8 of ax's distributed mode: recurring schedules (ax.schedules). Applied once,
// in order, inside the migrate transaction (detail::migrate in connection.hpp); a migration
// already released is never edited: a change is a new version.
//
// One row per schedule: its cron expression and time zone, the template of the task each tick
// enqueues, the missed-ticks policy, and next_at, the next tick not yet enqueued. Any node fires
// a due schedule: it locks the row (FOR UPDATE SKIP LOCKED), enqueues the tick's task and moves
// next_at on in the same transaction, so a tick is enqueued exactly once whichever node takes it
// and whatever dies when (sql/schedules.hpp, docs/distributed.md "Recurring tasks"). Ticks are
// computed by the nodes and clients (include/ax/detail/cron.hpp); the table only stores them.

namespace ax::pg::sql::migrations {

/// Migration 8's SQL (several statements, run by the simple protocol).
inline constexpr const char* v8 = R"SQL(
CREATE TABLE ax.schedules (
    name         text     PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 200),
    cron         text     NOT NULL,
    time_zone    text     NOT NULL,
    kind         text     NOT NULL CHECK (length(kind) BETWEEN 1 AND 200),
    payload      bytea    NOT NULL,
    priority     smallint NOT NULL CHECK (priority BETWEEN 0 AND 2),
    tags         text[]   NOT NULL,
    max_attempts integer  NOT NULL CHECK (max_attempts BETWEEN 1 AND 1000),
    timeout_ms   integer  NOT NULL CHECK (timeout_ms >= 0),
    run_once     boolean  NOT NULL,   -- missed ticks: false skip them, true run once for them
    grace_ms     bigint   NOT NULL CHECK (grace_ms > 0),
    next_at      timestamptz NOT NULL, -- the next tick not yet enqueued ('infinity': none)
    last_tick    timestamptz,          -- the latest tick enqueued
    fired        bigint   NOT NULL DEFAULT 0,  -- tasks enqueued
    missed       bigint   NOT NULL DEFAULT 0,  -- firings that found ticks older than the grace
    error        text,                 -- why a node could not compute the ticks (next_at infinity)
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX schedules_next_at ON ax.schedules (next_at);
)SQL";

} // namespace ax::pg::sql::migrations
