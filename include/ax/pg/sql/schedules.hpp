// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// Recurring schedules (ax.schedules, migration 8): the client's statements (define, remove, list)
// and the node's firing statements, each as one typed function beside its SQL, plus the
// validation of a ScheduleSpec. Ticks are computed in C++ (include/ax/detail/cron.hpp) from the
// database's clock, so every node and client judges time alike.
//
// Exactly once: a node fires in one transaction — it locks the due rows (FOR UPDATE SKIP LOCKED:
// another node takes the other due rows, never the same), then one statement moves each row's
// next_at past the ticks it enqueues and inserts their tasks, then commits. A node that dies
// before the commit has changed nothing (its locks go with its connection, and the next node
// fires the same ticks); after it, the ticks are enqueued and next_at is past them. Each task
// also carries the idempotency key schedule:<name>:<tick>, claimed in ax.idem_keys, which no
// path can insert twice.

#include "../../detail/cron.hpp"
#include "../connection.hpp"
#include "../detail/wire.hpp"
#include "../types.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ax::pg::sql {

/// The notification channel a schedule change is announced on (nodes LISTEN to re-plan).
inline constexpr const char* schedules_channel = "ax_schedules";

[[noreturn]] inline void bad_schedule(const ScheduleSpec& s, const char* field,
                                      const std::string& value, const std::string& why) {
    throw std::invalid_argument("ax::pg::ScheduleSpec '" + s.name.substr(0, 60) + "': " + field +
                                " = " + value + ": " + why);
}

/// Throws std::invalid_argument naming the bad field of `s` (a cron error names the cron field
/// too); returns the parsed expression and zone.
inline std::pair<ax::detail::CronExpr, ax::detail::TimeZone>
validate_schedule(const ScheduleSpec& s, std::size_t max_payload_bytes) {
    if (s.name.empty() || s.name.size() > 200)
        bad_schedule(s, "name", "'" + s.name.substr(0, 40) + "'", "must be 1..200 bytes");
    if (!valid_kind(s.kind))
        bad_schedule(s, "kind", "'" + s.kind.substr(0, 40) + "'", std::string(kind_rule));
    if (s.payload.size() > max_payload_bytes)
        bad_schedule(s, "payload", std::to_string(s.payload.size()) + " bytes",
                     "exceeds max_payload_bytes (" + std::to_string(max_payload_bytes) + ")");
    if (static_cast<unsigned>(s.priority) > 2)
        bad_schedule(s, "priority", std::to_string(static_cast<unsigned>(s.priority)),
                     "must be high, normal or low");
    if (s.max_attempts < 1 || s.max_attempts > 1000)
        bad_schedule(s, "max_attempts", std::to_string(s.max_attempts), "must be in 1..1000");
    if (s.timeout.count() < 0 || s.timeout > std::chrono::hours(24))
        bad_schedule(s, "timeout", std::to_string(s.timeout.count()) + " ms", "must be in 0..24 h");
    if (s.grace < std::chrono::seconds(1) || s.grace > std::chrono::hours(24))
        bad_schedule(s, "grace", std::to_string(s.grace.count()) + " ms",
                     "must be in 1 s .. 1 day");
    if (static_cast<unsigned>(s.missed) > 1)
        bad_schedule(s, "missed", std::to_string(static_cast<unsigned>(s.missed)),
                     "must be skip or run_once");
    if (s.group.size() > 200)
        bad_schedule(s, "group", std::to_string(s.group.size()) + " bytes",
                     "must be at most 200 bytes");
    if (s.group_key.size() > 200)
        bad_schedule(s, "group_key", std::to_string(s.group_key.size()) + " bytes",
                     "must be at most 200 bytes");
    if (s.group.empty() && !s.group_key.empty())
        bad_schedule(s, "group_key", "'" + s.group_key.substr(0, 40) + "'",
                     "needs a group (a partition key is within a group)");
    for (const std::string& tag : s.tags)
        if (!valid_tag(tag))
            bad_schedule(s, "tags", "'" + tag.substr(0, 40) + "'", std::string(tag_rule));
    ax::detail::CronExpr e;
    try {
        e = ax::detail::parse_cron(s.cron);
    } catch (const std::invalid_argument& x) {
        bad_schedule(s, "cron", "'" + s.cron.substr(0, 80) + "'", x.what());
    }
    try {
        return {e, ax::detail::TimeZone::load(s.time_zone)};
    } catch (const std::invalid_argument& x) {
        bad_schedule(s, "time_zone", "'" + s.time_zone.substr(0, 80) + "'", x.what());
    }
}

/// The database's clock, whole UTC seconds since the epoch.
inline std::int64_t server_now_s(detail::Connection& c) {
    return c.exec("SELECT floor(extract(epoch FROM now()))::int8").int64(0, 0);
}

inline std::string hex(std::string_view bytes) {
    static constexpr char digits[] = "0123456789abcdef";
    std::string out;
    out.reserve(bytes.size() * 2);
    for (const char ch : bytes) {
        const auto b = static_cast<unsigned char>(ch);
        out += digits[b >> 4];
        out += digits[b & 15];
    }
    return out;
}

inline std::string unhex(std::string_view h) {
    auto v = [](char ch) { return ch <= '9' ? ch - '0' : (ch | 0x20) - 'a' + 10; };
    std::string out;
    out.reserve(h.size() / 2);
    for (std::size_t i = 0; i + 1 < h.size(); i += 2)
        out += static_cast<char>(v(h[i]) * 16 + v(h[i + 1]));
    return out;
}

/// Creates or replaces schedule `s` (validated); `next_at_s`: its first tick after now. A
/// replaced schedule keeps its pending next tick when its cron and zone are unchanged (so
/// defining schedules at every deploy loses no tick). Notifies the nodes. True when created.
inline bool upsert_schedule(detail::Connection& c, const ScheduleSpec& s,
                            std::optional<std::int64_t> next_at_s) {
    std::string tags;
    for (std::size_t i = 0; i < s.tags.size(); ++i)
        tags += (i != 0 ? "," : "") + s.tags[i];
    const std::string payload = hex(s.payload), prio = std::to_string(static_cast<int>(s.priority)),
                      attempts = std::to_string(s.max_attempts),
                      timeout = std::to_string(s.timeout.count()),
                      once = s.missed == MissedTicks::run_once ? "t" : "f",
                      grace = std::to_string(s.grace.count()),
                      next = next_at_s ? std::to_string(*next_at_s) : "";
    detail::Result r = c.exec_params(
        "WITH u AS (INSERT INTO ax.schedules AS s (name, cron, time_zone, kind, payload, "
        "  priority, tags, max_attempts, timeout_ms, run_once, grace_ms, next_at, grp, grp_key) "
        "VALUES ($1, $2, $3, $4, decode($5, 'hex'), $6, "
        "  CASE WHEN $7 = '' THEN '{}'::text[] ELSE string_to_array($7, ',') END, $8, $9, $10, "
        "  $11, CASE WHEN $12 = '' THEN 'infinity' ELSE to_timestamp($12::int8) END, "
        "  nullif($13, ''), $14) "
        "ON CONFLICT (name) DO UPDATE SET cron = excluded.cron, time_zone = excluded.time_zone, "
        "  kind = excluded.kind, payload = excluded.payload, priority = excluded.priority, "
        "  tags = excluded.tags, max_attempts = excluded.max_attempts, "
        "  timeout_ms = excluded.timeout_ms, run_once = excluded.run_once, "
        "  grace_ms = excluded.grace_ms, grp = excluded.grp, grp_key = excluded.grp_key, "
        "  error = NULL, updated_at = now(), "
        "  next_at = CASE WHEN s.cron = excluded.cron AND s.time_zone = excluded.time_zone "
        "                  AND s.error IS NULL THEN s.next_at ELSE excluded.next_at END "
        "RETURNING (xmax = 0) AS created) "
        "SELECT u.created, pg_notify('ax_schedules', '') IS NULL FROM u",
        {s.name.c_str(), s.cron.c_str(), s.time_zone.c_str(), s.kind.c_str(), payload.c_str(),
         prio.c_str(), tags.c_str(), attempts.c_str(), timeout.c_str(), once.c_str(), grace.c_str(),
         next.c_str(), s.group.c_str(), s.group_key.c_str()});
    return r.boolean(0, 0);
}

/// Removes schedule `name` (tasks it already enqueued stay); false if there is none.
inline bool delete_schedule(detail::Connection& c, const std::string& name) {
    return c.exec_params("DELETE FROM ax.schedules WHERE name = $1 RETURNING name", {name.c_str()})
               .rows() == 1;
}

/// Every schedule, by name.
inline std::vector<ScheduleInfo> list_schedules(detail::Connection& c) {
    detail::Result r = c.exec(
        "SELECT name, cron, time_zone, kind, encode(payload, 'hex'), priority, "
        "array_to_string(tags, ','), max_attempts, timeout_ms, run_once, grace_ms, "
        "CASE WHEN next_at = 'infinity' THEN 0 ELSE floor(extract(epoch FROM next_at))::int8 END, "
        "coalesce(floor(extract(epoch FROM last_tick))::int8, 0), fired, missed, "
        "coalesce(error, ''), coalesce(grp, ''), grp_key FROM ax.schedules ORDER BY name");
    std::vector<ScheduleInfo> out;
    for (int i = 0; i < r.rows(); ++i) {
        ScheduleInfo s;
        s.spec.name = std::string(r.text(i, 0));
        s.spec.cron = std::string(r.text(i, 1));
        s.spec.time_zone = std::string(r.text(i, 2));
        s.spec.kind = std::string(r.text(i, 3));
        s.spec.payload = unhex(r.text(i, 4));
        s.spec.priority = static_cast<Priority>(r.int64(i, 5));
        // tags never hold a comma (valid_tag; the enqueue statements join them the same way)
        for (std::string_view t = r.text(i, 6); !t.empty();) {
            const std::size_t comma = std::min(t.find(','), t.size());
            s.spec.tags.emplace_back(t.substr(0, comma));
            t.remove_prefix(std::min(comma + 1, t.size()));
        }
        s.spec.max_attempts = static_cast<int>(r.int64(i, 7));
        s.spec.timeout = std::chrono::milliseconds(r.int64(i, 8));
        s.spec.missed = r.boolean(i, 9) ? MissedTicks::run_once : MissedTicks::skip;
        s.spec.grace = std::chrono::milliseconds(r.int64(i, 10));
        s.next_at_s = r.int64(i, 11);
        s.last_tick_s = r.int64(i, 12);
        s.fired = r.int64(i, 13);
        s.missed = r.int64(i, 14);
        s.error = std::string(r.text(i, 15));
        s.spec.group = std::string(r.text(i, 16));
        s.spec.group_key = std::string(r.text(i, 17));
        out.push_back(std::move(s));
    }
    return out;
}

// ---------------------------------------------------------------- the node's firing

/// Inside the firing transaction: up to $1 due schedules, locked, skipping rows another node has
/// locked (it is firing them). Columns: name, cron, time_zone, due tick, run_once, grace_ms, the
/// database's now (whole seconds).
inline constexpr const char* due_schedules_sql =
    "SELECT name, cron, time_zone, floor(extract(epoch FROM next_at))::int8, run_once, grace_ms, "
    "floor(extract(epoch FROM now()))::int8 FROM ax.schedules WHERE next_at <= now() "
    "ORDER BY next_at LIMIT $1 FOR UPDATE SKIP LOCKED";

/// Fires the locked schedules. Per schedule: $1 name text[], $2 due int8[] (the tick the row was
/// read at: the guard), $3 next int8[] (NULL: never again), $4 missed bool[], $5 error text[]
/// (NULL: none), $6 last tick enqueued int8[] (NULL: none), $7 tasks enqueued int4[]. Per task:
/// $8 schedule name text[], $9 tick int8[]. Each task is the schedule's template with the key
/// schedule:<name>:<tick>, claimed in ax.idem_keys (a key already taken enqueues nothing).
inline constexpr const char* fire_schedules_sql = R"SQL(
WITH u AS (SELECT * FROM unnest($1::text[], $2::int8[], $3::int8[], $4::bool[], $5::text[],
                                $6::int8[], $7::int4[])
                         AS u(name, due, nxt, missed, error, last_tick, n)),
     s AS (UPDATE ax.schedules c
              SET next_at = CASE WHEN u.nxt IS NULL THEN 'infinity' ELSE to_timestamp(u.nxt) END,
                  last_tick = coalesce(to_timestamp(u.last_tick), c.last_tick),
                  fired = c.fired + u.n, missed = c.missed + u.missed::int, error = u.error
             FROM u
            WHERE c.name = u.name AND floor(extract(epoch FROM c.next_at))::int8 = u.due
        RETURNING c.name, c.kind, c.payload, c.priority, c.tags, c.max_attempts, c.timeout_ms,
                  c.grp, c.grp_key),
     t AS MATERIALIZED (
        SELECT s.*, 'schedule:' || s.name || ':' ||
                    to_char(to_timestamp(x.tick) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
                    AS key, nextval('ax.tasks_id_seq') AS new_id
          FROM unnest($8::text[], $9::int8[]) AS x(name, tick) JOIN s ON s.name = x.name),
     k AS (INSERT INTO ax.idem_keys (idem_key, task_id)
           SELECT key, new_id FROM t ORDER BY key
           ON CONFLICT (idem_key) DO NOTHING RETURNING task_id)
INSERT INTO ax.tasks (id, kind, payload, priority, timeout_ms, max_attempts, idem_key, tags,
                      grp, grp_key)
SELECT t.new_id, t.kind, t.payload, t.priority, t.timeout_ms, t.max_attempts, t.key, t.tags,
       t.grp, t.grp_key
  FROM t JOIN k ON k.task_id = t.new_id)SQL";

/// Parks schedule $1 with the reason $2 (a firing the server refused): it fires no more until
/// Client::schedule replaces it.
inline constexpr const char* park_schedule_sql =
    "UPDATE ax.schedules SET next_at = 'infinity', error = $2 WHERE name = $1";

/// Milliseconds until the earliest next tick (NULL: no schedule will tick; <= 0: one is due).
inline constexpr const char* next_schedule_in_sql =
    "SELECT ceil(extract(epoch FROM min(next_at) - now()) * 1000)::int8 FROM ax.schedules "
    "WHERE next_at < 'infinity'";

} // namespace ax::pg::sql
