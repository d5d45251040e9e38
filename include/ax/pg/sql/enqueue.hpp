// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// The enqueue statements of ax::pg::Client, and one typed function per statement: the keyed
// INSERT from arrays, the unkeyed one, and the bulk path (reserve IDs, then a binary COPY). The
// parameters are binary arrays built column by column (EnqueueColumns) with detail/wire.hpp's
// encoder; the COPY rows with its CopyWriter. Then the rules every enqueue from C++ applies
// (validate_tasks: Client::enqueue_many and ax::pg::enqueue_on alike) and the choice of path
// (enqueue_tasks).

#include "../connection.hpp"
#include "../detail/wire.hpp"
#include "../types.hpp"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ax::pg::sql {

/// Enqueue many in one statement. Arrays: $1 kind text[], $2 payload bytea[], $3 priority int2[],
/// $4 timeout_ms int4[], $5 max_attempts int4[], $6 delay_ms int8[], $7 idem_key text[] (NULLs),
/// $8 tags text[] (comma-joined), $9 run_at_us int8[] (microseconds since the Unix epoch, NULL:
/// now() + delay; an empty array when no task of the call has a run_at: unnest pads it with
/// NULLs, so a call without one sends 12 bytes for it). A run_at in the past is now() (it does not
/// jump ahead of older tasks), $10 unique_for_ms int8[], $11 unique_states int2[] (each empty
/// when no task of the call sets it: NULL, coalesced to the defaults 0 and 31), $12 grp and $13
/// grp_key text[] (NewTask::group; both empty when no task of the call has a group: NULL, none).
/// Returns one row per input, in input order: (ord, id, existed).
/// A key is claimed by inserting its row into ax.idem_keys: the first enqueue inserts it with its
/// new task's ID; any other, however it races, conflicts on that row (waiting for the first to
/// commit or roll back) and its DO UPDATE answers the row as committed, i.e. the first task's
/// ID, whether that task is live, being acknowledged, retrying, a dead letter or finished --
/// unless the task's unique options say that holder does not count (ax.unique_blocks, migration
/// 9: enqueued longer ago than unique_for_ms, or in a state outside unique_states): then the row
/// passes to this call's new ID, still under the row's lock, so racing calls agree. The SQL
/// API's ax.enqueue and ax.enqueue_many use the same ON CONFLICT clause. A task is inserted
/// only for a key whose row carries this call's new ID. Keys are taken in key
/// order, so concurrent calls with overlapping keys never deadlock. (Callers pass distinct keys:
/// ON CONFLICT cannot touch one row twice in a statement.)
inline constexpr const char* enqueue_keyed_sql = R"SQL(
WITH u AS MATERIALIZED (
        SELECT u.*, nextval('ax.tasks_id_seq') AS new_id
        FROM unnest($1::text[], $2::bytea[], $3::int2[], $4::int4[], $5::int4[], $6::int8[],
                    $7::text[], $8::text[], $9::int8[], $10::int8[], $11::int2[], $12::text[],
                    $13::text[])
             WITH ORDINALITY AS u(kind, payload, priority, timeout_ms, max_attempts, delay_ms,
                                  idem_key, tags, run_at_us, unique_for_ms, unique_states, grp,
                                  grp_key, ord)),
     k AS (INSERT INTO ax.idem_keys AS k (idem_key, task_id, unique_for_ms, unique_states)
           SELECT u.idem_key, u.new_id, coalesce(u.unique_for_ms, 0),
                  coalesce(u.unique_states, 31)
             FROM u WHERE u.idem_key IS NOT NULL ORDER BY u.idem_key
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
     ins AS (INSERT INTO ax.tasks (id, kind, payload, priority, timeout_ms, max_attempts, run_at,
                                   idem_key, tags, grp, grp_key)
             SELECT u.new_id, u.kind, u.payload, u.priority, u.timeout_ms, u.max_attempts,
                    CASE WHEN u.run_at_us IS NULL THEN now() + u.delay_ms * interval '1 millisecond'
                         ELSE greatest(now(), timestamptz 'epoch' + u.run_at_us * interval '1 microsecond')
                    END, u.idem_key,
                    CASE WHEN u.tags = '' THEN '{}'::text[] ELSE string_to_array(u.tags, ',') END,
                    u.grp, coalesce(u.grp_key, '')
             FROM u LEFT JOIN k ON k.idem_key = u.idem_key
             WHERE u.idem_key IS NULL OR k.task_id = u.new_id
             ORDER BY u.ord)
SELECT u.ord, coalesce(k.task_id, u.new_id), (k.task_id IS NOT NULL AND k.task_id <> u.new_id)
FROM u LEFT JOIN k ON k.idem_key = u.idem_key
ORDER BY u.ord)SQL";

/// Enqueue many when no task in the call has an idempotency key: a plain INSERT ... SELECT FROM
/// unnest, without the key joins, the ON CONFLICT arbiter or the result joins of enqueue_keyed_sql
/// (less than half of its server CPU on 100k rows: 7 against 16 us per task). Arrays as
/// enqueue_keyed_sql less the keys: $1 kind, $2 payload, $3 priority, $4 timeout_ms, $5
/// max_attempts, $6 delay_ms, $7 tags (comma-joined), $8 run_at_us. Returns one row: the new IDs
/// as one int8[].
/// IDs are taken by nextval in the projection over the unnest scan, so in input order: ascending ID
/// is input order, whatever order RETURNING hands them back in (the client sorts when it is not
/// already ascending).
inline constexpr const char* enqueue_unkeyed_sql = R"SQL(
WITH i AS (
    INSERT INTO ax.tasks (id, kind, payload, priority, timeout_ms, max_attempts, run_at, tags)
    SELECT nextval('ax.tasks_id_seq'), u.kind, u.payload, u.priority, u.timeout_ms,
           u.max_attempts,
           CASE WHEN u.run_at_us IS NULL THEN now() + u.delay_ms * interval '1 millisecond'
                ELSE greatest(now(), timestamptz 'epoch' + u.run_at_us * interval '1 microsecond')
           END,
           CASE WHEN u.tags = '' THEN '{}'::text[] ELSE string_to_array(u.tags, ',') END
    FROM unnest($1::text[], $2::bytea[], $3::int2[], $4::int4[], $5::int4[], $6::int8[],
                $7::text[], $8::int8[])
         AS u(kind, payload, priority, timeout_ms, max_attempts, delay_ms, tags, run_at_us)
    RETURNING id)
SELECT array_agg(id) FROM i)SQL";

/// The bulk enqueue (Client's COPY path): $1 how many IDs to take from the tasks' sequence, as
/// one int8[] in the order taken (ascending).
inline constexpr const char* reserve_ids_sql =
    "SELECT array_agg(nextval('ax.tasks_id_seq')) FROM generate_series(1, $1::int4)";

/// Then the rows, in binary COPY format; every other column takes its default (run_at and
/// enqueued_at: now(); claimable at once). The statement trigger wakes idle nodes, as after an
/// INSERT.
inline constexpr const char* enqueue_copy_sql =
    "COPY ax.tasks (id, kind, payload, priority, timeout_ms, max_attempts, tags) FROM STDIN "
    "(FORMAT binary)";

/// The same with the limit group and partition key (NewTask::group, group_key; NULL and ''
/// for a task without a group), for a call where some task has a group: a call without one
/// sends no group columns.
inline constexpr const char* enqueue_copy_grouped_sql =
    "COPY ax.tasks (id, kind, payload, priority, timeout_ms, max_attempts, tags, grp, grp_key) "
    "FROM STDIN (FORMAT binary)";

/// One enqueue_many call's tasks as the statements' array parameters, one binary array per
/// column (reused across calls: refilling does not allocate once grown).
struct EnqueueColumns {
    detail::BinaryArray kind{detail::oid::text};
    detail::BinaryArray payload{detail::oid::bytea};
    detail::BinaryArray priority{detail::oid::int2};
    detail::BinaryArray timeout_ms{detail::oid::int4};
    detail::BinaryArray max_attempts{detail::oid::int4};
    detail::BinaryArray delay_ms{detail::oid::int8};
    /// NULL for a task without a key.
    detail::BinaryArray idem_key{detail::oid::text};
    /// Comma-joined (a tag has no comma: valid_tag); the statements split them.
    detail::BinaryArray tags{detail::oid::text};
    /// NewTask::run_at in microseconds since the Unix epoch (NULL: none); empty when no task of
    /// the call has one (the statements' unnest pads it with NULLs).
    detail::BinaryArray run_at_us{detail::oid::int8};
    /// NewTask::unique_for in ms; empty when no task of the call has a window.
    detail::BinaryArray unique_for_ms{detail::oid::int8};
    /// NewTask::unique_states' bits; empty when every task of the call counts all states.
    detail::BinaryArray unique_states{detail::oid::int2};
    /// NewTask::group (NULL: none) and group_key; both empty when no task of the call has one.
    detail::BinaryArray grp{detail::oid::text};
    detail::BinaryArray grp_key{detail::oid::text};

    /// Fills the columns from `tasks` (validated by the caller).
    void fill(std::span<const NewTask> tasks) {
        for (detail::BinaryArray* a :
             {&kind, &payload, &priority, &timeout_ms, &max_attempts, &delay_ms, &idem_key, &tags,
              &run_at_us, &unique_for_ms, &unique_states, &grp, &grp_key})
            a->clear();
        const bool grouped = std::any_of(tasks.begin(), tasks.end(),
                                         [](const NewTask& t) { return !t.group.empty(); });
        const bool timed = std::any_of(tasks.begin(), tasks.end(),
                                       [](const NewTask& t) { return t.run_at.has_value(); });
        const bool windowed = std::any_of(
            tasks.begin(), tasks.end(), [](const NewTask& t) { return t.unique_for.count() != 0; });
        const bool stated = std::any_of(tasks.begin(), tasks.end(), [](const NewTask& t) {
            return t.unique_states != UniqueStates::all;
        });
        std::string joined;
        for (const NewTask& t : tasks) {
            kind.add_bytes(t.kind);
            payload.add_bytes(t.payload);
            priority.add_int16(static_cast<std::int16_t>(t.priority));
            timeout_ms.add_int32(static_cast<std::int32_t>(t.timeout.count()));
            max_attempts.add_int32(t.max_attempts);
            delay_ms.add_int64(t.delay.count());
            if (t.idempotency_key.empty())
                idem_key.add_null();
            else
                idem_key.add_bytes(t.idempotency_key);
            joined.clear();
            for (std::size_t k = 0; k < t.tags.size(); ++k) {
                if (k != 0)
                    joined += ',';
                joined += t.tags[k];
            }
            tags.add_bytes(joined);
            if (timed) {
                if (t.run_at)
                    run_at_us.add_int64(std::chrono::duration_cast<std::chrono::microseconds>(
                                            t.run_at->time_since_epoch())
                                            .count());
                else
                    run_at_us.add_null();
            }
            if (windowed)
                unique_for_ms.add_int64(t.unique_for.count());
            if (stated)
                unique_states.add_int16(static_cast<std::int16_t>(t.unique_states));
            if (grouped) {
                if (t.group.empty())
                    grp.add_null();
                else
                    grp.add_bytes(t.group);
                grp_key.add_bytes(t.group_key);
            }
        }
    }
};

/// The IDs of a one-row binary int8[] result, ascending (the order they were taken in, which
/// is input order), checked to be n of them.
inline std::vector<Enqueued> ids_of(const detail::Result& r, std::size_t n) {
    const auto ids =
        r.rows() == 1 && !r.null(0, 0) ? detail::decode_int8_array(r.text(0, 0)) : std::nullopt;
    if (!ids || ids->size() != n)
        throw Error("ax::pg: enqueue returned " + std::to_string(ids ? ids->size() : 0) +
                    " IDs for " + std::to_string(n) + " tasks");
    std::vector<Enqueued> out(n);
    bool ascending = true;
    for (std::size_t i = 0; i < n; ++i) {
        out[i].id = (*ids)[i];
        ascending = ascending && (i == 0 || out[i].id > out[i - 1].id);
    }
    if (!ascending)
        std::sort(out.begin(), out.end(),
                  [](const Enqueued& a, const Enqueued& b) { return a.id < b.id; });
    return out;
}

/// enqueue_keyed_sql over `n` tasks' columns: their IDs in input order, existed set for a key
/// that was already taken.
inline std::vector<Enqueued> enqueue_keyed(detail::Connection& c, EnqueueColumns& cols,
                                           std::size_t n) {
    const std::string_view params[] = {
        cols.kind.bytes(),          cols.payload.bytes(),       cols.priority.bytes(),
        cols.timeout_ms.bytes(),    cols.max_attempts.bytes(),  cols.delay_ms.bytes(),
        cols.idem_key.bytes(),      cols.tags.bytes(),          cols.run_at_us.bytes(),
        cols.unique_for_ms.bytes(), cols.unique_states.bytes(), cols.grp.bytes(),
        cols.grp_key.bytes()};
    detail::Result r = c.exec_binary(enqueue_keyed_sql, params, detail::Format::text);
    if (static_cast<std::size_t>(r.rows()) != n)
        throw Error("ax::pg: enqueue returned " + std::to_string(r.rows()) + " rows for " +
                    std::to_string(n) + " tasks");
    std::vector<Enqueued> out;
    out.reserve(n);
    for (int i = 0; i < r.rows(); ++i)
        out.push_back(Enqueued{r.int64(i, 1), r.boolean(i, 2)});
    return out;
}

/// enqueue_unkeyed_sql over `n` tasks' columns (their keys are not sent): their IDs in input
/// order.
inline std::vector<Enqueued> enqueue_unkeyed(detail::Connection& c, EnqueueColumns& cols,
                                             std::size_t n) {
    const std::string_view params[] = {cols.kind.bytes(),         cols.payload.bytes(),
                                       cols.priority.bytes(),     cols.timeout_ms.bytes(),
                                       cols.max_attempts.bytes(), cols.delay_ms.bytes(),
                                       cols.tags.bytes(),         cols.run_at_us.bytes()};
    return ids_of(c.exec_binary(enqueue_unkeyed_sql, params, detail::Format::binary), n);
}

/// The COPY data of enqueue_copy_sql (enqueue_copy_grouped_sql when `grouped`) for `tasks`
/// with their reserved `ids` (same order), in `buf`: per row the statement's columns in their
/// types' binary send formats.
inline void write_copy(std::string& buf, std::span<const NewTask> tasks,
                       std::span<const Enqueued> ids, bool grouped = false) {
    detail::CopyWriter w(buf);
    for (std::size_t i = 0; i < tasks.size(); ++i) {
        const NewTask& t = tasks[i];
        w.row(grouped ? 9 : 7);
        w.field_int(ids[i].id);
        w.field_bytes(t.kind);
        w.field_bytes(t.payload);
        w.field_int(static_cast<std::int16_t>(t.priority));
        w.field_int(static_cast<std::int32_t>(t.timeout.count()));
        w.field_int(static_cast<std::int32_t>(t.max_attempts));
        w.field_text_array(t.tags);
        if (grouped) {
            if (t.group.empty())
                w.field_null();
            else
                w.field_bytes(t.group);
            w.field_bytes(t.group_key);
        }
    }
    w.finish();
}

/// The bulk path: reserves `tasks.size()` IDs (reserve_ids_sql), then writes the rows with one
/// binary COPY (enqueue_copy_sql) built in `buf` (reused; a large call's buffer is released
/// after it). A failed COPY leaves only a gap of unused IDs, as a failed INSERT does.
inline std::vector<Enqueued> enqueue_copy(detail::Connection& c, std::span<const NewTask> tasks,
                                          std::string& buf, bool grouped = false) {
    const std::size_t n = tasks.size();
    const std::string count = std::to_string(n);
    const char* v[1] = {count.c_str()};
    detail::Result r = c.exec_raw(reserve_ids_sql, 1, v, nullptr, nullptr, 1);
    std::vector<Enqueued> out = ids_of(r, n);
    write_copy(buf, tasks, out, grouped);
    detail::Result done = c.copy_in(grouped ? enqueue_copy_grouped_sql : enqueue_copy_sql, buf);
    const std::string_view tuples = done.affected_rows();
    if (count != tuples)
        throw Error("ax::pg: enqueue copied " + std::string(tuples) + " rows for " + count +
                    " tasks");
    if (buf.capacity() > (std::size_t{4} << 20))
        std::string().swap(buf);
    return out;
}

/// What validate_tasks found about a call's tasks (it picks the statement).
struct TaskCall {
    /// Some task has an idempotency key: the keyed statement.
    bool keyed = false;
    /// Some task has a group: the keyed statement or the grouped COPY (the ones that write
    /// groups).
    bool grouped = false;
    /// Some task has a delay or a run_at: not the COPY path (its rows take run_at = now()).
    bool timed = false;
};

/// Throws std::invalid_argument "ax::pg::NewTask #i: field = value: why".
[[noreturn]] inline void bad_task(std::size_t i, const char* field, const std::string& value,
                                  const std::string& why) {
    throw std::invalid_argument("ax::pg::NewTask #" + std::to_string(i) + ": " + field + " = " +
                                value + ": " + why);
}

/// `v`'s first 40 bytes in single quotes, for an error message (appended piece by piece: GCC 12's
/// -Wrestrict misfires on `"'" + std::string(...)` at -O3).
inline std::string quoted_prefix(std::string_view v) {
    std::string s;
    s.reserve(42);
    s += '\'';
    s.append(v.substr(0, 40));
    s += '\'';
    return s;
}

/// The rules of every C++ enqueue (Client::enqueue_many, ax::pg::enqueue_on; the SQL API's
/// ax.enqueue applies the same in the database): std::invalid_argument naming the first bad task
/// and field, before anything is sent. `now` bounds run_at (at most 366 days ahead, by this
/// machine's clock; the row's time is the server's).
inline TaskCall validate_tasks(std::span<const NewTask> tasks, std::size_t max_payload_bytes,
                               std::chrono::system_clock::time_point now) {
    TaskCall call;
    std::set<std::string_view> seen_keys;
    for (std::size_t i = 0; i < tasks.size(); ++i) {
        const NewTask& t = tasks[i];
        if (!valid_kind(t.kind))
            bad_task(i, "kind", quoted_prefix(t.kind), std::string(kind_rule));
        if (t.payload.size() > max_payload_bytes)
            bad_task(i, "payload", std::to_string(t.payload.size()) + " bytes",
                     "exceeds max_payload_bytes (" + std::to_string(max_payload_bytes) +
                         "); store big blobs elsewhere and enqueue their key");
        if (static_cast<unsigned>(t.priority) > 2)
            bad_task(i, "priority", std::to_string(static_cast<unsigned>(t.priority)),
                     "must be high, normal or low");
        if (t.max_attempts < 1 || t.max_attempts > 1000)
            bad_task(i, "max_attempts", std::to_string(t.max_attempts), "must be in 1..1000");
        if (t.timeout.count() < 0 || t.timeout > std::chrono::hours(24))
            bad_task(i, "timeout", std::to_string(t.timeout.count()) + " ms", "must be in 0..24 h");
        if (t.delay.count() < 0 || t.delay > std::chrono::hours(24 * 366))
            bad_task(i, "delay", std::to_string(t.delay.count()) + " ms", "must be in 0..366 days");
        if (t.run_at) {
            const auto s =
                std::chrono::duration_cast<std::chrono::seconds>(t.run_at->time_since_epoch())
                    .count();
            if (t.delay.count() != 0)
                bad_task(i, "run_at", std::to_string(s) + " s after the Unix epoch",
                         "set together with delay (" + std::to_string(t.delay.count()) +
                             " ms): give one of them");
            if (*t.run_at > now + std::chrono::hours(24 * 366))
                bad_task(i, "run_at", std::to_string(s) + " s after the Unix epoch",
                         "must be at most 366 days ahead");
        }
        if (t.idempotency_key.size() > 512)
            bad_task(i, "idempotency_key", std::to_string(t.idempotency_key.size()) + " bytes",
                     "must be at most 512 bytes");
        for (std::string_view tag : t.tags)
            if (!valid_tag(tag))
                bad_task(i, "tags", quoted_prefix(tag), std::string(tag_rule));
        if (t.unique_for.count() < 0 || t.unique_for > std::chrono::hours(24 * 366))
            bad_task(i, "unique_for", std::to_string(t.unique_for.count()) + " ms",
                     "must be in 0..366 days (0: any age)");
        const auto states = static_cast<unsigned>(t.unique_states);
        if (states == 0 || states > static_cast<unsigned>(UniqueStates::all))
            bad_task(i, "unique_states", std::to_string(states),
                     "must be a nonzero set of UniqueStates (pending 1, running 2, succeeded 4, "
                     "failed 8, cancelled 16)");
        if (t.idempotency_key.empty() && t.unique_for.count() != 0)
            bad_task(i, "unique_for", std::to_string(t.unique_for.count()) + " ms",
                     "needs an idempotency_key (uniqueness is per key)");
        if (t.idempotency_key.empty() && t.unique_states != UniqueStates::all)
            bad_task(i, "unique_states", std::to_string(states),
                     "needs an idempotency_key (uniqueness is per key)");
        if (!t.idempotency_key.empty() && !seen_keys.insert(t.idempotency_key).second)
            bad_task(i, "idempotency_key", std::string(t.idempotency_key),
                     "appears twice in one enqueue_many call");
        if (t.group.size() > 200)
            bad_task(i, "group", std::to_string(t.group.size()) + " bytes",
                     "must be at most 200 bytes");
        if (t.group_key.size() > 200)
            bad_task(i, "group_key", std::to_string(t.group_key.size()) + " bytes",
                     "must be at most 200 bytes");
        if (t.group.empty() && !t.group_key.empty())
            bad_task(i, "group_key", quoted_prefix(t.group_key),
                     "needs a group (a partition key is within a group)");
        call.keyed = call.keyed || !t.idempotency_key.empty();
        call.grouped = call.grouped || !t.group.empty();
        call.timed = call.timed || t.delay.count() != 0 || t.run_at.has_value();
    }
    return call;
}

/// Validates `tasks` (validate_tasks) and enqueues them on `c` with one statement, or for a call
/// of at least `copy_min_tasks` (0: never) without keys, delays or run_at times by COPY
/// (reserve_ids_sql, then enqueue_copy_sql; `copy_buf` is its reused buffer). Whatever
/// transaction `c` is in holds them: Client's connection autocommits each statement (the COPY
/// path is one statement after the reserve), enqueue_on's is the application's open one.
inline std::vector<Enqueued> enqueue_tasks(detail::Connection& c, std::span<const NewTask> tasks,
                                           std::size_t max_payload_bytes,
                                           std::size_t copy_min_tasks, std::string& copy_buf) {
    if (tasks.empty())
        return {};
    const TaskCall call =
        validate_tasks(tasks, max_payload_bytes, std::chrono::system_clock::now());
    if (!call.keyed && !call.timed && copy_min_tasks != 0 && tasks.size() >= copy_min_tasks)
        return enqueue_copy(c, tasks, copy_buf, call.grouped);
    EnqueueColumns cols;
    cols.fill(tasks);
    return call.keyed || call.grouped ? enqueue_keyed(c, cols, tasks.size())
                                      : enqueue_unkeyed(c, cols, tasks.size());
}

} // namespace ax::pg::sql
