// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// The producer and operator side of the distributed mode: enqueue, query, cancel, dead letters,
// counts and status. See docs/distributed.md.

#include "connection.hpp"
#include "schema.hpp"
#include "sql/client.hpp"
#include "sql/enqueue.hpp"
#include "sql/flows.hpp"
#include "sql/limits.hpp"
#include "sql/overview.hpp"
#include "sql/pause.hpp"
#include "sql/results.hpp"
#include "sql/schedules.hpp"
#include "sql/tasks.hpp"
#include "types.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
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
    /// FROM STDIN (FORMAT binary)` when no task in the call has an idempotency key, a delay or a
    /// run_at: about half the server's CPU per task of the INSERT from arrays, at the cost of two
    /// more round trips per call (the IDs are reserved first, then the COPY starts and ends), so
    /// small calls are cheaper as the one INSERT statement. Both are one transaction: all or
    /// nothing.
    std::size_t copy_min_tasks = 128;
    /// When above zero, every statement of this client is cancelled by the server after this
    /// long (`SET statement_timeout` on each connection it opens) and the call throws
    /// ax::pg::Error naming the timeout (SQLSTATE 57014); the connection stays usable. Default 0:
    /// no limit (the server's setting). A console or dashboard sets it so a slow query (a lock
    /// wait, a scan of a huge table) cannot hold one of its threads; producers usually leave it.
    std::chrono::milliseconds statement_timeout{0};
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
        if (options_.statement_timeout.count() < 0)
            throw std::invalid_argument("ax::pg::ClientOptions: statement_timeout must be >= 0");
        conn_ = open_connection();
        if (options_.require_schema)
            detail::require_schema(conn_);
    }

    /// Applies the missing schema migrations (idempotent; a newer database is a SchemaError).
    /// Returns the schema version reached.
    int migrate() { return detail::migrate(connection()); }

    /// Enqueues one task; see enqueue_many.
    Enqueued enqueue(const NewTask& task) { return enqueue_many(std::span(&task, 1)).at(0); }

    /// Enqueues every task in one transaction (all or nothing) and returns their IDs in order.
    /// One statement and round trip, or for a large call of tasks without idempotency keys,
    /// delays or run_at times a COPY (ClientOptions::copy_min_tasks). Throws
    /// std::invalid_argument naming the first bad task (nothing is enqueued then). To enqueue
    /// inside a transaction of the application's own, see ax::pg::enqueue_on
    /// (ax/pg/enqueue_on.hpp) or the SQL API (ax.enqueue).
    std::vector<Enqueued> enqueue_many(std::span<const NewTask> tasks) {
        return sql::enqueue_tasks(connection(), tasks, options_.max_payload_bytes,
                                  options_.copy_min_tasks, copy_buf_);
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
        s.paused = pauses();
        s.limits = limits();
        return s;
    }

    // --- results: a task's outcome, and waiting for it

    /// Task `id`'s outcome: its ending (succeeded with the handler's result if it set one,
    /// cancelled, dead_lettered with its last error, discarded) or, for a live task, its state
    /// and last error so far. nullopt for an unknown ID (or one whose history was pruned: see
    /// NodeOptions::history_retention). One statement.
    std::optional<TaskResult> result(std::int64_t id) { return sql::task_result(connection(), id); }

    /// Waits until task `id` ends (succeeded, cancelled, dead-lettered, discarded) or `timeout`
    /// passes, and returns what result() then says: check TaskResult::finished(), false when the
    /// timeout came first. Returns at once for a task that already ended, and nullopt for an
    /// unknown ID. Woken by PostgreSQL (LISTEN ax_done on this client's connection, NOTIFY sent
    /// by the ending statement only for waited tasks), never by polling: one registration, one
    /// check per wake-up and at the deadline. Meanwhile the connection is this call's (one
    /// thread per Client, as for every call).
    std::optional<TaskResult> wait(std::int64_t id, std::chrono::milliseconds timeout) {
        const auto deadline = std::chrono::steady_clock::now() + timeout;
        detail::Connection& c = connection();
        if (listening_on_ != conn_generation_) {
            sql::listen_done(c);
            listening_on_ = conn_generation_;
        }
        sql::register_waiter(c, id);
        struct Unregister {
            detail::Connection& c;
            std::int64_t id;
            ~Unregister() {
                try {
                    if (c.ok())
                        sql::unregister_waiter(c, id);
                } catch (const std::exception&) {
                    // A broken connection: its backend is gone, and the next wait's clean-up
                    // removes the row.
                }
            }
        } unregister{c, id};
        const std::string want = std::to_string(id);
        for (;;) {
            std::optional<TaskResult> r = sql::task_result(c, id);
            if (!r || r->finished())
                return r;
            const bool woken = c.await_notification(
                [&](std::string_view channel, std::string_view payload) {
                    return channel == sql::done_channel && payload == want;
                },
                deadline);
            if (!woken)
                return sql::task_result(c, id); // the deadline: one last look
        }
    }

    // --- workflows (issue 29)

    /// Enqueues a flow named `name` (1..200 bytes, need not be unique): a graph of tasks in one
    /// transaction, all or nothing. A task with no dependencies is claimable at once; one with
    /// dependencies waits outside the claimable set until all of them succeeded. One that did
    /// not succeed (dead-lettered, cancelled, discarded) cancels its dependents at once with the
    /// reason recorded (FlowTaskState::reason), and so on down the graph, except for dependents
    /// marked FlowTask::run_anyway, which run once all their dependencies ended. Returns the
    /// flow's ID and the task IDs in the order given. Throws std::invalid_argument, nothing
    /// enqueued, for a bad task (the NewTask rules; no delay, run_at or key), a duplicate or empty
    /// name, a dependency on an unknown name or on the task itself, or a cycle (named). One
    /// statement (the SQL API's ax.enqueue_flow_arrays; ax.enqueue_flow takes JSON).
    FlowEnqueued enqueue_flow(std::string_view name, std::span<const FlowTask> tasks) {
        return sql::enqueue_flow(connection(), name, tasks, options_.max_payload_bytes);
    }

    /// The newest `limit` flows' progress, newest first: how many tasks are waiting, pending,
    /// running, succeeded, cancelled, dead-lettered. Computed when asked (nothing is counted on
    /// the acknowledgement path).
    std::vector<FlowProgress> flows(std::size_t limit = 20) {
        return sql::flows(connection(), std::nullopt, limit);
    }

    /// Flow `id`'s progress; nullopt for an unknown flow.
    std::optional<FlowProgress> flow(std::int64_t id) {
        auto v = sql::flows(connection(), id, 1);
        if (v.empty())
            return std::nullopt;
        return std::move(v.front());
    }

    /// Every task of flow `id` with its state, dependencies and the reason the flow cancelled it.
    std::vector<FlowTaskState> flow_tasks(std::int64_t id) {
        return sql::flow_tasks(connection(), id);
    }

    /// The outcomes of task `id`'s dependencies (its flow's), in the order of the flow's task list
    /// (the order given to enqueue_flow, whatever the order of the task's depends_on):
    /// each one's name and what Client::result says of it, results included. A handler calls it
    /// with its job's ID (Job::id) on a Client of its own: a task runs only once all its
    /// dependencies succeeded (or, run_anyway, ended), so their results are there. Empty for a task
    /// with no dependencies or outside a flow. A dependency whose history was pruned
    /// (NodeOptions::history_retention) reads as discarded with the error "unknown: ...".
    std::vector<ParentResult> parent_results(std::int64_t id) {
        return sql::parent_results(connection(), id);
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

    // --- pause and resume, listing (issue 28)

    /// Pauses a kind or a lane cluster-wide (stored in ax.pauses, so it outlives every node and
    /// client): every live node is notified (NOTIFY ax_pause) and stops claiming it within about
    /// one of its round trips; nodes that start or reconnect later read it at once. Tasks
    /// already claimed finish (those queued on a node still run; a claim in flight as the
    /// notification arrives may still take some). Enqueues go on: the tasks wait, claimable
    /// again at resume. Returns false if it was paused already. Bad targets throw
    /// std::invalid_argument when built (PauseTarget).
    bool pause(const PauseTarget& target) { return sql::set_paused(connection(), target, true); }

    /// Resumes a paused kind or lane; every node claims it again at once. Returns false if it
    /// was not paused.
    bool resume(const PauseTarget& target) { return sql::set_paused(connection(), target, false); }

    /// The pauses in force, by scope and name (also in status()).
    std::vector<PauseInfo> pauses() { return sql::pauses(connection()); }

    // --- cluster-wide limits per task group (issue 29)

    /// Sets (or replaces) the limits of the tasks with NewTask::group == `group`, cluster-wide:
    /// at most spec.max_running claimed at once and/or spec.rate_n starts per spec.rate_period,
    /// for the whole group or each partition key on its own (spec.per_key). Enforced by the
    /// database when nodes claim (ax.claim_grouped; docs/distributed.md "Limits: concurrency,
    /// rate and fair shares per group"), so however
    /// many nodes race, the limit holds; a slot frees when its task's claim ends (success,
    /// failure, snooze, release, cancel, lease expiry). Takes effect at the nodes' next claim
    /// (they are woken); tasks already running over a lowered limit finish. A change restarts
    /// the group's rate windows. Bad values throw std::invalid_argument.
    void set_limit(const std::string& group, const LimitSpec& spec) {
        sql::set_limit(connection(), group, spec);
    }

    /// Removes the group's limits (its tasks then run unlimited); false if it had none.
    bool clear_limit(const std::string& group) { return sql::clear_limit(connection(), group); }

    /// The limited groups: their limits, running and queued counts, keys, and when the next rate
    /// slot opens (also in status()).
    std::vector<LimitInfo> limits() { return sql::limits(connection()); }

    /// Sets the weight of partition key `key` of `group` in its lane's fair shares (1..1000;
    /// default 1, and 1 removes the setting): when keys of a lane compete for a claim, each gets
    /// a part in proportion to its weight (the ungrouped tasks weigh 1), so a weight-3 tenant
    /// gets three times a weight-1 tenant's share while both have work; a key that wants less
    /// leaves its part to the others. Weights apply whether or not the group is limited. Bad
    /// values throw std::invalid_argument.
    void set_key_weight(const std::string& group, const std::string& key, int weight) {
        sql::set_key_weight(connection(), group, key, weight);
    }

    /// The keys with a weight other than 1: (group, key, weight), in (group, key) order.
    std::vector<KeyWeight> key_weights() { return sql::key_weights(connection()); }

    /// One page of the tasks matching `filter`, live, finished (the history, within its
    /// retention) and dead letters alike, in ID order; TaskPage::next is the next page's
    /// TaskFilter::after. One statement, each state's branch an index scan (docs/distributed.md
    /// shows the plans on a million rows). Throws std::invalid_argument naming a bad field
    /// (limit outside 1..1000, a kind or tag that could not exist, ...).
    TaskPage list(const TaskFilter& filter) { return sql::list_tasks(connection(), filter); }

    /// The plan PostgreSQL runs for list(filter), with its timings (EXPLAIN ANALYZE, BUFFERS):
    /// for operators checking a listing's cost on their own data.
    std::string explain_list(const TaskFilter& filter) {
        return sql::explain_list(connection(), filter);
    }

    /// Everything known of task `id`: where it is, its attempts and errors, times, node, tags,
    /// key, and its payload's size and first `preview_bytes` bytes. nullopt for an unknown ID (or
    /// one whose history was pruned).
    std::optional<TaskDetails> task_details(std::int64_t id, std::size_t preview_bytes = 256) {
        return sql::task_details(connection(), id, preview_bytes);
    }

    // --- the operator's overview (the console, include/ax/console/)

    /// status() plus tasks by kind, what each node runs, the schedules and the last hour's
    /// succeeded / failed / cancelled tasks per minute (Overview). Eight statements, each over
    /// small tables or the last hour of the history and dead letters.
    Overview overview() {
        Overview o;
        o.status = status();
        o.kinds = sql::kind_counts(connection());
        o.running = sql::node_running(connection());
        o.schedules = schedules();
        sql::minute_series(connection(), o);
        return o;
    }

    /// "Retry now": a scheduled task (waiting out a delay or a retry's back-off) becomes
    /// claimable at once and idle nodes are woken. False when `id` is not waiting for its time
    /// (pending, claimed, finished, a dead letter (replay it), or unknown).
    bool retry_now(std::int64_t id) { return sql::retry_now(connection(), id); }

    /// Task `id`'s payload's first `max_bytes` bytes exactly as stored (binary safe) and its full
    /// size; {"", -1} for a finished task (the history keeps no payload) or an unknown ID.
    std::pair<std::string, std::int64_t> payload_preview(std::int64_t id, std::size_t max_bytes) {
        return sql::payload_preview(connection(), id, max_bytes);
    }

  private:
    detail::Connection open_connection() {
        detail::Connection c = detail::Connection::open(conninfo_);
        if (options_.statement_timeout.count() > 0)
            c.exec(("SET statement_timeout = " + std::to_string(options_.statement_timeout.count()))
                       .c_str());
        return c;
    }

    detail::Connection& connection() {
        if (!conn_.ok()) {
            conn_ = open_connection();
            ++conn_generation_;
        }
        return conn_;
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
    /// Connections opened so far, and the one LISTEN ax_done was sent on (wait): a new connection
    /// after a reconnect listens again.
    std::uint64_t conn_generation_ = 1;
    std::uint64_t listening_on_ = 0;
    /// The COPY path's row buffer, reused across calls (a producer enqueueing every few
    /// milliseconds does not rebuild it).
    std::string copy_buf_;
};

} // namespace ax::pg
