// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// The producer and operator side of the distributed mode: enqueue, query, cancel, dead letters,
// counts and status. See docs/distributed.md.

#include "connection.hpp"
#include "schema.hpp"
#include "sql/client.hpp"
#include "sql/enqueue.hpp"
#include "sql/schedules.hpp"
#include "types.hpp"

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
        if (tasks.empty())
            return {};
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
            return sql::enqueue_copy(connection(), tasks, copy_buf_);
        sql::EnqueueColumns cols;
        cols.fill(tasks);
        return keyed ? sql::enqueue_keyed(connection(), cols, tasks.size())
                     : sql::enqueue_unkeyed(connection(), cols, tasks.size());
    }

    /// Where task `id` is; nullopt for an unknown ID (or one whose history was pruned).
    std::optional<TaskStatus> query(std::int64_t id) { return sql::task_status(connection(), id); }

    /// Cancels task `id`: at once when no node holds it; otherwise its node is notified and
    /// requests stop on the running task's stop token, and the task ends cancelled whatever the
    /// node reports afterwards.
    CancelResult cancel(std::int64_t id) { return sql::cancel_task(connection(), id); }

    /// Dead letters, oldest first (at most `limit`).
    std::vector<DeadLetterInfo> dead_letters(std::size_t limit = 1000) {
        return sql::dead_letters(connection(), limit);
    }

    /// Puts a dead letter back as a live task (same ID, fresh attempt series); false if `id` is
    /// not a dead letter.
    bool replay_dead_letter(std::int64_t id) { return sql::replay_dead_letter(connection(), id); }

    /// Drops a dead letter (the history remembers it as discarded); false if not listed.
    bool discard_dead_letter(std::int64_t id) { return sql::discard_dead_letter(connection(), id); }

    /// How long dead letters are kept (default 14 days) before maintenance drops them, a ring
    /// slot at a time (kept between `retention` and retention x 8 / 7; their idempotency keys
    /// are forgotten with them). Cluster-wide: stored in the database (ax.rings). Throws
    /// std::invalid_argument outside 1 s .. 10 years.
    void set_dead_letter_retention(std::chrono::milliseconds retention) {
        if (retention < std::chrono::seconds(1) || retention > std::chrono::hours(24 * 3660))
            throw std::invalid_argument(
                "ax::pg::Client::set_dead_letter_retention: " + std::to_string(retention.count()) +
                " ms: must be in [1 s, 10 years]");
        sql::set_dead_letter_retention(connection(), retention);
    }

    /// The dead letters' retention in force (set_dead_letter_retention).
    std::chrono::milliseconds dead_letter_retention() {
        return sql::dead_letter_retention(connection());
    }

    /// Live tasks by state and lane, dead letters, and the history by final state.
    Counts counts() { return sql::counts(connection()); }

    /// Counts, nodes and their leases, the oldest claimable task's age, what no live node can
    /// take, and the recovery counters.
    Status status() {
        Status s;
        s.counts = counts();
        s.nodes = sql::nodes(connection());
        s.oldest_pending_age_s = sql::oldest_pending_age_s(connection());
        s.unclaimable = sql::unclaimable(connection());
        for (const auto& [reason, n] : s.unclaimable)
            s.unclaimable_total += n;
        const sql::RecoveryCounters k = sql::recovery_counters(connection());
        s.reclaimed_batches = k.reclaimed_batches;
        s.reclaimed_tasks = k.reclaimed_tasks;
        s.checksum_mismatches = k.checksum_mismatches;
        return s;
    }

    // --- recurring schedules

    /// Creates or replaces the recurring schedule `spec.name`: from now on every tick of its cron
    /// expression in its time zone enqueues one task from its template, exactly once across the
    /// cluster, fired by whichever node is running (NodeOptions::fire_schedules). Replacing a
    /// schedule with the same cron and zone keeps its next tick (call it at every deploy);
    /// otherwise ticks restart from now. Throws std::invalid_argument naming the bad field (a cron
    /// error names the cron field; an unknown zone, or one missing from this machine's tz
    /// database) before anything is written. True when the schedule is new.
    bool schedule(const ScheduleSpec& spec) {
        const auto [expr, zone] = sql::validate_schedule(spec, options_.max_payload_bytes);
        const std::optional<std::int64_t> first =
            ax::detail::next_tick(expr, zone, sql::server_now_s(connection()));
        return sql::upsert_schedule(connection(), spec, first);
    }

    /// Removes schedule `name`; tasks it already enqueued stay. False if there is none.
    bool unschedule(const std::string& name) { return sql::delete_schedule(connection(), name); }

    /// Every schedule with its next tick and counters, by name.
    std::vector<ScheduleInfo> schedules() { return sql::list_schedules(connection()); }

    /// The options in force.
    [[nodiscard]] const ClientOptions& options() const noexcept { return options_; }

  private:
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
        return detail::parse_json_strings(j);
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
