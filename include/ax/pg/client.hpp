// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// The producer and operator side of the distributed mode: enqueue, query, cancel, dead letters,
// counts and status. See docs/distributed.md.

#include "connection.hpp"
#include "types.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ax::pg {

/// Client knobs.
struct ClientOptions {
    /// Largest payload accepted (default 1 MiB, at most 64 MiB). Larger payloads are refused with
    /// std::invalid_argument before anything is sent: big blobs belong in object storage, with
    /// their key in the payload. Raising it costs memory on every node that claims such tasks.
    std::size_t max_payload_bytes = std::size_t{1} << 20;
    /// Check at connect that the database is at this library's schema version (default true;
    /// `ax-pg migrate` turns it off to run the migration itself).
    bool require_schema = true;
    /// enqueue_many calls of at least this many tasks (default 128; 0: never) go by `COPY ...
    /// FROM STDIN (FORMAT binary)` when no task in the call has an idempotency key or a delay:
    /// about half the server's CPU per task of the INSERT from arrays, at the cost of two more
    /// round trips per call (the IDs are reserved first, then the COPY starts and ends), so small
    /// calls are cheaper as the one INSERT statement. Both are one transaction: all or nothing.
    std::size_t copy_min_tasks = 128;
};

/// Producer and operator handle on the queue: one connection, used by one thread at a time.
/// Every call runs one statement (enqueue_many: one for the whole span, or a COPY, see
/// ClientOptions::copy_min_tasks). On a broken connection a call throws ConnectionError and the
/// next call reconnects.
class Client {
  public:
    /// Validates `conninfo` (std::invalid_argument when malformed), connects (ConnectionError)
    /// and checks the schema version (SchemaError) unless options.require_schema is false.
    explicit Client(std::string conninfo, ClientOptions options = {})
        : conninfo_(std::move(conninfo)), options_(options) {
        validate_conninfo(conninfo_);
        if (options_.max_payload_bytes > (std::size_t{64} << 20))
            throw std::invalid_argument("ax::pg::ClientOptions: max_payload_bytes = " +
                                        std::to_string(options_.max_payload_bytes) +
                                        ": must be at most 64 MiB");
        conn_ = detail::Connection::open(conninfo_);
        if (options_.require_schema)
            detail::require_schema(conn_);
    }

    /// Applies the missing schema migrations (idempotent; a newer database is a SchemaError).
    /// Returns the schema version reached.
    int migrate() { return detail::migrate(connection()); }

    /// Enqueues one task; see enqueue_many.
    Enqueued enqueue(const NewTask& task) { return enqueue_many(std::span(&task, 1)).at(0); }

    /// Enqueues every task in one transaction (all or nothing) and returns their IDs in order.
    /// One statement and round trip, or for a large call of tasks without idempotency keys or
    /// delays a COPY (ClientOptions::copy_min_tasks). Throws std::invalid_argument naming the
    /// first bad task (nothing is enqueued then).
    std::vector<Enqueued> enqueue_many(std::span<const NewTask> tasks) {
        std::vector<Enqueued> out;
        if (tasks.empty())
            return out;
        std::set<std::string_view> seen_keys;
        bool keyed = false, delayed = false;
        for (std::size_t i = 0; i < tasks.size(); ++i) {
            const NewTask& t = tasks[i];
            validate(t, i);
            if (!t.idempotency_key.empty() && !seen_keys.insert(t.idempotency_key).second)
                bad(i, "idempotency_key", std::string(t.idempotency_key),
                    "appears twice in one enqueue_many call");
            keyed = keyed || !t.idempotency_key.empty();
            delayed = delayed || t.delay.count() != 0;
        }
        if (!keyed && !delayed && options_.copy_min_tasks != 0 &&
            tasks.size() >= options_.copy_min_tasks)
            return enqueue_copy(tasks);
        namespace oid = detail::oid;
        detail::BinaryArray kinds(oid::text), payloads(oid::bytea), prios(oid::int2),
            timeouts(oid::int4), attempts(oid::int4), delays(oid::int8), keys(oid::text),
            tags(oid::text);
        std::string joined;
        for (const NewTask& t : tasks) {
            kinds.add_bytes(t.kind);
            payloads.add_bytes(t.payload);
            prios.add_int16(static_cast<std::int16_t>(t.priority));
            timeouts.add_int32(static_cast<std::int32_t>(t.timeout.count()));
            attempts.add_int32(t.max_attempts);
            delays.add_int64(t.delay.count());
            if (t.idempotency_key.empty())
                keys.add_null();
            else
                keys.add_bytes(t.idempotency_key);
            joined.clear();
            for (std::size_t k = 0; k < t.tags.size(); ++k) {
                if (k != 0)
                    joined += ',';
                joined += t.tags[k];
            }
            tags.add_bytes(joined);
        }
        if (!keyed)
            return enqueue_unkeyed(
                tasks.size(), {&kinds, &payloads, &prios, &timeouts, &attempts, &delays, &tags});
        detail::BinaryArray* arrays[] = {&kinds,    &payloads, &prios, &timeouts,
                                         &attempts, &delays,   &keys,  &tags};
        const char* values[8];
        int lengths[8];
        int formats[8];
        for (int i = 0; i < 8; ++i) {
            values[i] = arrays[i]->data();
            lengths[i] = arrays[i]->length();
            formats[i] = 1;
        }
        detail::Result r =
            connection().exec_raw(detail::enqueue_sql, 8, values, lengths, formats, 0);
        if (static_cast<std::size_t>(r.rows()) != tasks.size())
            throw Error("ax::pg: enqueue returned " + std::to_string(r.rows()) + " rows for " +
                        std::to_string(tasks.size()) + " tasks");
        out.reserve(tasks.size());
        for (int i = 0; i < r.rows(); ++i)
            out.push_back(Enqueued{r.int64(i, 1), r.boolean(i, 2)});
        return out;
    }

    /// Where task `id` is; nullopt for an unknown ID (or one whose history was pruned).
    std::optional<TaskStatus> query(std::int64_t id) {
        const std::string ids = std::to_string(id);
        detail::Result r = connection().exec_params(
            "SELECT 'live', kind, priority, attempts, coalesce(node_id, 0), cancel_requested, "
            "       CASE WHEN node_id IS NOT NULL THEN 'claimed' WHEN run_at > now() THEN "
            "'scheduled' ELSE 'pending' END, array_to_json(errors)::text "
            "  FROM ax.tasks WHERE id = $1 "
            "UNION ALL SELECT 'dead', kind, priority, attempts, 0, false, 'dead_lettered', "
            "       array_to_json(errors)::text FROM ax.dead_letters WHERE id = $1 "
            "UNION ALL SELECT 'hist', kind, priority, attempts, coalesce(node_id, 0), false, "
            "       CASE state WHEN 1 THEN 'succeeded' WHEN 2 THEN 'cancelled' ELSE 'discarded' "
            "END, '[]' FROM ax.history WHERE id = $1 LIMIT 1",
            {ids.c_str()});
        if (r.rows() == 0)
            return std::nullopt;
        TaskStatus s;
        s.id = id;
        s.kind = std::string(r.text(0, 1));
        s.priority = static_cast<Priority>(r.int64(0, 2));
        s.attempts = static_cast<int>(r.int64(0, 3));
        s.node_id = r.int64(0, 4);
        s.cancel_requested = r.boolean(0, 5);
        s.state = task_state_from_string(r.text(0, 6));
        s.errors = parse_json_strings(r.text(0, 7));
        return s;
    }

    /// Cancels task `id`: at once when no node holds it; otherwise its node is notified and
    /// requests stop on the running task's stop token, and the task ends cancelled whatever the
    /// node reports afterwards.
    CancelResult cancel(std::int64_t id) {
        const std::string ids = std::to_string(id);
        detail::Result r = connection().exec_params("SELECT ax.cancel($1)", {ids.c_str()});
        return cancel_result_from_string(r.text(0, 0));
    }

    /// Dead letters, oldest first (at most `limit`).
    std::vector<DeadLetterInfo> dead_letters(std::size_t limit = 1000) {
        const std::string lim = std::to_string(limit);
        detail::Result r = connection().exec_params(
            "SELECT id, kind, priority, attempts, reason, array_to_json(errors)::text, "
            "encode(payload, 'escape'), extract(epoch FROM now() - failed_at)::float8 "
            "FROM ax.dead_letters ORDER BY failed_at, id LIMIT $1",
            {lim.c_str()});
        std::vector<DeadLetterInfo> out;
        for (int i = 0; i < r.rows(); ++i) {
            DeadLetterInfo d;
            d.id = r.int64(i, 0);
            d.kind = std::string(r.text(i, 1));
            d.priority = static_cast<Priority>(r.int64(i, 2));
            d.attempts = static_cast<int>(r.int64(i, 3));
            d.reason = std::string(r.text(i, 4));
            d.errors = parse_json_strings(r.text(i, 5));
            d.payload = std::string(r.text(i, 6));
            d.age_s = r.float8(i, 7);
            out.push_back(std::move(d));
        }
        return out;
    }

    /// Puts a dead letter back as a live task (same ID, fresh attempt series); false if `id` is
    /// not a dead letter.
    bool replay_dead_letter(std::int64_t id) {
        const std::string ids = std::to_string(id);
        return connection()
            .exec_params("SELECT ax.replay_dead_letter($1)", {ids.c_str()})
            .boolean(0, 0);
    }

    /// Drops a dead letter (the history remembers it as discarded); false if not listed.
    bool discard_dead_letter(std::int64_t id) {
        const std::string ids = std::to_string(id);
        return connection()
            .exec_params("SELECT ax.discard_dead_letter($1)", {ids.c_str()})
            .boolean(0, 0);
    }

    /// How long dead letters are kept (default 14 days) before maintenance drops them, a ring
    /// slot at a time (kept between `retention` and retention x 8 / 7; their idempotency keys
    /// are forgotten with them). Cluster-wide: stored in the database (ax.rings). Throws
    /// std::invalid_argument outside 1 s .. 10 years.
    void set_dead_letter_retention(std::chrono::milliseconds retention) {
        if (retention < std::chrono::seconds(1) || retention > std::chrono::hours(24 * 3660))
            throw std::invalid_argument(
                "ax::pg::Client::set_dead_letter_retention: " + std::to_string(retention.count()) +
                " ms: must be in [1 s, 10 years]");
        const std::string ms = std::to_string(retention.count());
        connection().exec_params(
            "UPDATE ax.rings SET retention_ms = $1 WHERE name = 'dead_letters'", {ms.c_str()});
    }

    /// The dead letters' retention in force (set_dead_letter_retention).
    std::chrono::milliseconds dead_letter_retention() {
        return std::chrono::milliseconds(
            connection()
                .exec("SELECT retention_ms FROM ax.rings WHERE name = 'dead_letters'")
                .int64(0, 0));
    }

    /// Live tasks by state and lane, dead letters, and the history by final state.
    Counts counts() {
        Counts c;
        detail::Result r = connection().exec(
            "SELECT CASE WHEN node_id IS NOT NULL THEN 2 WHEN run_at > now() THEN 1 ELSE 0 END, "
            "priority, count(*) FROM ax.tasks GROUP BY 1, 2");
        for (int i = 0; i < r.rows(); ++i) {
            const auto st = r.int64(i, 0);
            const auto p = static_cast<std::size_t>(r.int64(i, 1));
            const auto n = r.int64(i, 2);
            (st == 0 ? c.pending : st == 1 ? c.scheduled : c.claimed).at(p) = n;
        }
        detail::Result h = connection().exec(
            "SELECT (SELECT count(*) FROM ax.dead_letters), "
            "count(*) FILTER (WHERE state = 1), count(*) FILTER (WHERE state = 2), "
            "count(*) FILTER (WHERE state = 3) FROM ax.history");
        c.dead_letters = h.int64(0, 0);
        c.succeeded = h.int64(0, 1);
        c.cancelled = h.int64(0, 2);
        c.discarded = h.int64(0, 3);
        return c;
    }

    /// Counts, nodes and their leases, the oldest claimable task's age, what no live node can
    /// take, and the recovery counters.
    Status status() {
        Status s;
        s.counts = counts();
        detail::Result n = connection().exec(
            "SELECT n.id, n.name, n.host, n.pid, array_to_json(n.kinds)::text, "
            "array_to_json(n.tags)::text, extract(epoch FROM n.lease_until - now())::float8, "
            "(SELECT count(*) FROM ax.batches b WHERE b.node_id = n.id), "
            "(SELECT count(*) FROM ax.tasks t WHERE t.node_id = n.id) "
            "FROM ax.nodes n ORDER BY n.id");
        for (int i = 0; i < n.rows(); ++i) {
            NodeInfo ni;
            ni.id = n.int64(i, 0);
            ni.name = std::string(n.text(i, 1));
            ni.host = std::string(n.text(i, 2));
            ni.pid = static_cast<int>(n.int64(i, 3));
            ni.kinds = parse_json_strings(n.text(i, 4));
            ni.tags = parse_json_strings(n.text(i, 5));
            ni.lease_left_s = n.float8(i, 6);
            ni.batches = n.int64(i, 7);
            ni.tasks = n.int64(i, 8);
            s.nodes.push_back(std::move(ni));
        }
        detail::Result o = connection().exec(
            "SELECT coalesce(extract(epoch FROM now() - min(run_at)), 0)::float8 FROM ax.tasks "
            "WHERE node_id IS NULL AND run_at <= now()");
        s.oldest_pending_age_s = o.float8(0, 0);
        detail::Result u = connection().exec(
            "SELECT CASE WHEN NOT EXISTS (SELECT 1 FROM ax.nodes n WHERE n.lease_until > now() "
            "AND t.kind = ANY (n.kinds)) THEN 'kind ' || t.kind || ': no live node handles it' "
            "ELSE 'kind ' || t.kind || ' tags [' || array_to_string(t.tags, ',') || "
            "']: no live node offers them' END, count(*) "
            "FROM ax.tasks t WHERE t.node_id IS NULL AND NOT EXISTS (SELECT 1 FROM ax.nodes n "
            "WHERE n.lease_until > now() AND t.kind = ANY (n.kinds) AND t.tags <@ n.tags) "
            "GROUP BY 1 ORDER BY 1");
        for (int i = 0; i < u.rows(); ++i) {
            s.unclaimable.emplace_back(std::string(u.text(i, 0)), u.int64(i, 1));
            s.unclaimable_total += u.int64(i, 1);
        }
        detail::Result k = connection().exec("SELECT name, value FROM ax.counters");
        for (int i = 0; i < k.rows(); ++i) {
            const auto name = k.text(i, 0);
            const auto v = k.int64(i, 1);
            if (name == "reclaimed_batches")
                s.reclaimed_batches = v;
            else if (name == "reclaimed_tasks")
                s.reclaimed_tasks = v;
            else if (name == "checksum_mismatches")
                s.checksum_mismatches = v;
        }
        return s;
    }

    /// The options in force.
    [[nodiscard]] const ClientOptions& options() const noexcept { return options_; }

  private:
    /// The fast path of enqueue_many (no idempotency key in the call): enqueue_unkeyed_sql, whose
    /// one binary int8[] result holds the IDs; ascending ID order is input order (see the SQL).
    std::vector<Enqueued> enqueue_unkeyed(std::size_t n,
                                          std::array<detail::BinaryArray*, 7> arrays) {
        const char* values[7];
        int lengths[7];
        int formats[7];
        for (std::size_t i = 0; i < 7; ++i) {
            values[i] = arrays[i]->data();
            lengths[i] = arrays[i]->length();
            formats[i] = 1;
        }
        detail::Result r =
            connection().exec_raw(detail::enqueue_unkeyed_sql, 7, values, lengths, formats, 1);
        return ids_of(r, n);
    }

    /// The bulk path of enqueue_many (no key, no delay, ClientOptions::copy_min_tasks or more):
    /// reserves n IDs from the tasks' sequence (ascending: one nextval after another), then
    /// writes the rows with one binary COPY, the rest of each row from the column defaults
    /// (run_at and enqueued_at are the COPY's now()). A failed COPY leaves only a gap of unused
    /// IDs, as a failed INSERT does.
    std::vector<Enqueued> enqueue_copy(std::span<const NewTask> tasks) {
        const std::size_t n = tasks.size();
        const std::string count = std::to_string(n);
        const char* v[1] = {count.c_str()};
        detail::Result r =
            connection().exec_raw(detail::reserve_ids_sql, 1, v, nullptr, nullptr, 1);
        std::vector<Enqueued> out = ids_of(r, n);
        // The binary COPY format (detail::CopyWriter): per row the field count and each field
        // as length + bytes in its type's binary send format.
        std::string& b = copy_buf_;
        detail::CopyWriter w(b);
        for (std::size_t i = 0; i < n; ++i) {
            const NewTask& t = tasks[i];
            w.row(7);
            w.field_int(out[i].id);
            w.field_bytes(t.kind);
            w.field_bytes(t.payload);
            w.field_int(static_cast<std::int16_t>(t.priority));
            w.field_int(static_cast<std::int32_t>(t.timeout.count()));
            w.field_int(static_cast<std::int32_t>(t.max_attempts));
            w.field_text_array(t.tags);
        }
        w.finish();
        detail::Result done = connection().copy_in(detail::enqueue_copy_sql, b);
        const std::string_view tuples = done.affected_rows();
        if (std::to_string(n) != tuples)
            throw Error("ax::pg: enqueue copied " + std::string(tuples) + " rows for " +
                        std::to_string(n) + " tasks");
        // A large call's buffer is not kept past the call.
        if (b.capacity() > (std::size_t{4} << 20))
            std::string().swap(b);
        return out;
    }

    /// The IDs of a one-row binary int8[] result, ascending (the order they were taken in, which
    /// is input order), checked to be n of them.
    static std::vector<Enqueued> ids_of(detail::Result& r, std::size_t n) {
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

    detail::Connection& connection() {
        if (!conn_.ok())
            conn_ = detail::Connection::open(conninfo_);
        return conn_;
    }

    [[noreturn]] static void bad(std::size_t i, const char* field, const std::string& value,
                                 const std::string& why) {
        throw std::invalid_argument("ax::pg::NewTask #" + std::to_string(i) + ": " + field + " = " +
                                    value + ": " + why);
    }

    void validate(const NewTask& t, std::size_t i) const {
        if (!valid_kind(t.kind))
            bad(i, "kind", "'" + std::string(t.kind.substr(0, 40)) + "'", std::string(kind_rule));
        if (t.payload.size() > options_.max_payload_bytes)
            bad(i, "payload", std::to_string(t.payload.size()) + " bytes",
                "exceeds max_payload_bytes (" + std::to_string(options_.max_payload_bytes) +
                    "); store big blobs elsewhere and enqueue their key");
        if (static_cast<unsigned>(t.priority) > 2)
            bad(i, "priority", std::to_string(static_cast<unsigned>(t.priority)),
                "must be high, normal or low");
        if (t.max_attempts < 1 || t.max_attempts > 1000)
            bad(i, "max_attempts", std::to_string(t.max_attempts), "must be in 1..1000");
        if (t.timeout.count() < 0 || t.timeout > std::chrono::hours(24))
            bad(i, "timeout", std::to_string(t.timeout.count()) + " ms", "must be in 0..24 h");
        if (t.delay.count() < 0 || t.delay > std::chrono::hours(24 * 366))
            bad(i, "delay", std::to_string(t.delay.count()) + " ms", "must be in 0..366 days");
        if (t.idempotency_key.size() > 512)
            bad(i, "idempotency_key", std::to_string(t.idempotency_key.size()) + " bytes",
                "must be at most 512 bytes");
        for (std::string_view tag : t.tags)
            if (!valid_tag(tag))
                bad(i, "tags", "'" + std::string(tag.substr(0, 40)) + "'", std::string(tag_rule));
    }

  public:
    /// Parses a JSON array of strings as array_to_json writes it (for operators' tools).
    static std::vector<std::string> parse_json_strings(std::string_view j) {
        std::vector<std::string> out;
        std::size_t i = 0;
        while (i < j.size()) {
            if (j[i] != '"') {
                ++i;
                continue;
            }
            std::string s;
            for (++i; i < j.size() && j[i] != '"'; ++i) {
                if (j[i] == '\\' && i + 1 < j.size()) {
                    const char e = j[++i];
                    switch (e) {
                    case 'n':
                        s += '\n';
                        break;
                    case 't':
                        s += '\t';
                        break;
                    case 'r':
                        s += '\r';
                        break;
                    case 'u':
                        // Control characters only (array_to_json escapes nothing else).
                        if (i + 4 < j.size()) {
                            s += static_cast<char>(
                                std::stoi(std::string(j.substr(i + 1, 4)), nullptr, 16));
                            i += 4;
                        }
                        break;
                    default:
                        s += e;
                    }
                } else {
                    s += j[i];
                }
            }
            ++i;
            out.push_back(std::move(s));
        }
        return out;
    }

  private:
    std::string conninfo_;
    ClientOptions options_;
    detail::Connection conn_;
    /// The COPY path's row buffer, reused across calls (a producer enqueueing every few
    /// milliseconds does not rebuild it).
    std::string copy_buf_;
};

} // namespace ax::pg
