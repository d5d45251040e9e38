// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// The vocabulary of ax::pg::Node, split out of node.hpp so it can be read (and included) without
// the node's machinery: what a handler receives (Job), the handler type, the node's knobs
// (NodeOptions) and its counters (NodeStats). Include <ax/pg/node.hpp> to run a node.

#include "../config.hpp"
#include "../errors.hpp"
#include "../task.hpp"
#include "../task_context.hpp"

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

namespace ax::pg {

/// What Job::set_result throws for a result larger than NodeOptions::max_result_bytes. A
/// PermanentError: left uncaught, the attempt fails for good (the task becomes a dead letter whose
/// last error says the result was too big); nothing is truncated. A handler may catch it and set a
/// smaller result instead.
class ResultTooLarge : public PermanentError {
  public:
    using PermanentError::PermanentError;
};

namespace detail {
/// What a handler asked for besides returning: a result, a snooze. One per node slot, reset
/// before each run; the node reads it after the handler returned.
struct JobOutput {
    std::string result;
    bool has_result = false;
    std::int64_t snooze_ms = -1; // < 0: no snooze asked
    /// Drops what the last run left (a large result's memory too).
    void reset() noexcept {
        if (result.capacity() > 4096)
            std::string().swap(result);
        else
            result.clear();
        has_result = false;
        snooze_ms = -1;
    }
};
} // namespace detail

/// What a handler receives: the task's identity and payload, plus the local TaskContext (stop
/// token, heartbeat, subtasks). Valid during the handler call only.
class Job {
  public:
    /// The task's database ID.
    [[nodiscard]] std::int64_t id() const noexcept { return id_; }
    /// Its kind (the handler's registration name).
    [[nodiscard]] std::string_view kind() const noexcept { return kind_; }
    /// The payload bytes (a view into the claim's result: no copy was made).
    [[nodiscard]] std::string_view payload() const noexcept { return payload_; }
    /// Attempt number across all nodes, 1 for the first.
    [[nodiscard]] std::uint32_t attempt() const noexcept { return attempt_; }
    /// The task's lane.
    [[nodiscard]] Priority priority() const noexcept { return priority_; }
    /// The local task's context: stop token (requested by a cross-node cancel, a timeout or a
    /// node stop), heartbeat (extends the timeout), subtasks.
    [[nodiscard]] TaskContext& context() const noexcept { return *ctx_; }
    /// Shorthands for context().stop_token() / stop_requested() / heartbeat().
    [[nodiscard]] std::stop_token stop_token() const { return ctx_->stop_token(); }
    [[nodiscard]] bool stop_requested() const noexcept { return ctx_->stop_requested(); }
    void heartbeat() noexcept { ctx_->heartbeat(); }

    /// Sets the task's result: bytes (any, NULs included; empty is a result too) stored with the
    /// task's history row when the handler returns normally, read by Client::result / wait.
    /// Calling it again replaces the result. Throws ResultTooLarge (a PermanentError) beyond
    /// NodeOptions::max_result_bytes, keeping any result set before. Ignored when the attempt
    /// fails or snoozes.
    void set_result(std::string bytes) {
        check_result(bytes.size());
        out_->result = std::move(bytes);
        out_->has_result = true;
    }
    void set_result(std::string_view bytes) {
        check_result(bytes.size());
        out_->result.assign(bytes.data(), bytes.size());
        out_->has_result = true;
    }
    void set_result(const char* bytes) { set_result(std::string_view(bytes)); }

    /// Asks to run the task again after `delay` (0 .. 366 days) without spending an attempt:
    /// when the handler then returns normally, the task goes back to the database, claimable
    /// from now + delay on any node, its attempt given back (Job::attempt() is the same next
    /// time). Bounded: a task snoozed NodeOptions::max_snoozes times already becomes a dead letter
    /// (reason "snooze limit") instead. A handler that throws after snooze() fails as usual; a
    /// result set with it is dropped. The last call wins. Throws std::invalid_argument for a
    /// delay out of range.
    void snooze(std::chrono::milliseconds delay) {
        if (delay.count() < 0 || delay > std::chrono::hours(24 * 366))
            throw std::invalid_argument("ax::pg::Job::snooze: delay " +
                                        std::to_string(delay.count()) +
                                        " ms: must be in 0..366 days");
        out().snooze_ms = delay.count();
    }

    /// Built by the node only (`out`: where set_result and snooze write; `max_result_bytes`:
    /// NodeOptions::max_result_bytes).
    Job(std::int64_t id, std::string_view kind, std::string_view payload, std::uint32_t attempt,
        Priority priority, TaskContext& ctx, detail::JobOutput* out = nullptr,
        std::size_t max_result_bytes = 0) noexcept
        : id_(id), kind_(kind), payload_(payload), attempt_(attempt), priority_(priority),
          ctx_(&ctx), out_(out), max_result_bytes_(max_result_bytes) {}

  private:
    detail::JobOutput& out() const {
        if (out_ == nullptr)
            throw std::logic_error("ax::pg::Job: this job takes no result or snooze");
        return *out_;
    }
    void check_result(std::size_t n) const {
        (void)out();
        if (n > max_result_bytes_)
            throw ResultTooLarge("ax::pg::Job::set_result: a result of " + std::to_string(n) +
                                 " bytes exceeds NodeOptions::max_result_bytes (" +
                                 std::to_string(max_result_bytes_) + ")");
    }

    std::int64_t id_;
    std::string_view kind_;
    std::string_view payload_;
    std::uint32_t attempt_;
    Priority priority_;
    TaskContext* ctx_;
    detail::JobOutput* out_;
    std::size_t max_result_bytes_;
};

/// A handler: returns normally for success (with a result when it called Job::set_result, or
/// snoozed when it called Job::snooze), throws to fail the attempt (retried in the
/// database after the core's jittered back-off, on any node), throws ax::PermanentError (or a
/// type derived from it) to dead-letter the task at once.
using Handler = std::function<void(Job&)>;

/// Node knobs. Every duration must be positive.
struct NodeOptions {
    /// libpq connection string (validated at construction).
    std::string conninfo;
    /// Shown in `ax-pg status` (default "<host>:<pid>").
    std::string name;
    /// Tags this node offers; it claims only tasks whose required tags are all here.
    std::vector<std::string> tags;
    /// The local scheduler. queue_capacity is raised to hold the local buffer and the soft
    /// limit is turned off (the node itself bounds what it claims); max_workers also sizes that
    /// buffer. weight_high/normal/low are the claim shares (3:2:1), max_wait the anti-starvation
    /// budget, retry_base_delay/retry_jitter the database retry back-off.
    Config scheduler = {};
    /// Tasks claimed per worker slot (default 16): the local buffer holds max_workers x this.
    /// More hides the claim round trip better (short tasks need it); fewer leaves more for other
    /// nodes and holds fewer tasks hostage to a node's death.
    std::uint32_t tasks_per_worker = 16;
    /// Largest batch per claim (default 512). Larger batches cost fewer round trips per task but
    /// hold more tasks on one node when it dies (each waits out the lease).
    std::uint32_t max_batch = 512;
    /// Local depth the batch-size PID steers toward (default 0: the whole local buffer). A claim
    /// is sent when the depth falls to half of it (the low watermark), never on a timer.
    std::uint32_t target_depth = 0;
    /// Token bucket per lane, high/normal/low: tasks per second this node may claim (0: no limit,
    /// the default) and the bucket's burst. A limited lane's share goes to the other lanes.
    std::array<double, 3> rate_per_s{0, 0, 0};
    std::array<double, 3> burst{100, 100, 100};
    /// Database connections the node keeps a round trip in flight on (default 2, 1..16). One
    /// backend runs its statements one after another, so with one connection a node of short
    /// tasks waits for the server's claim and acknowledgement of each batch in turn (about 58k
    /// no-op tasks/s on 2 vCPUs, bench/pg); with two, one batch's claim and acknowledgement run
    /// while the node reads the other's results and runs its tasks. More uses more of the
    /// server's max_connections and holds more claimed tasks in flight (each link's claim is
    /// kept room for in the local buffer); 1 is a strictly serial round trip.
    std::uint32_t connections = 2;
    /// Lease of each claimed batch (default 30 s), renewed every lease / 3. A dead node's tasks
    /// run again elsewhere after about one lease: shorter recovers faster but renews more often
    /// and risks reclaiming from a node that is only slow.
    std::chrono::milliseconds lease{30000};
    /// How often this node tries to run maintenance (default 2 s; one node at a time runs it):
    /// reclaiming expired batches, pruning history.
    std::chrono::milliseconds maintenance_interval{2000};
    /// Idle fallback poll (default 500 ms): NOTIFY wakes an idle node at once; the poll catches
    /// delayed tasks and retries coming due, and notifications lost with a connection.
    std::chrono::milliseconds poll_interval{500};
    /// Results wait at most this long before they are acknowledged (default 2 ms) when fewer
    /// than ack_batch are pending.
    std::chrono::milliseconds ack_delay{2};
    /// Acknowledge as soon as this many results are pending (default 128).
    std::uint32_t ack_batch = 128;
    /// History kept for query() (default 1 h): maintenance empties the history's ring slots whole
    /// (TRUNCATE) once their newest row is this old, so rows stay between this and 8/7 of it; it
    /// is also how long a finished task's idempotency key is remembered.
    std::chrono::milliseconds history_retention{3600 * 1000};
    /// Expired idempotency keys forgotten per maintenance pass (default 10 000; row deletes, only
    /// for keyed tasks). Larger catches up faster after a keyed flood at the cost of a longer pass.
    std::uint32_t prune_batch = 10000;
    /// The node running maintenance vacuums ax.tasks (`VACUUM (SKIP_LOCKED)`, on a second
    /// connection, without blocking its round trips) once the statistics show at least this many
    /// dead row versions there (default 20 000; 0: never, leave it to autovacuum). Each finished
    /// task leaves two, and autovacuum visits a database once per `autovacuum_naptime` (1 min by
    /// default), so without it the table grows by about a minute of traffic between passes.
    /// Lower keeps the table smaller and claims faster at the cost of more vacuum passes.
    std::uint32_t vacuum_dead_rows = 20000;
    /// Reconnect back-off: the core's jittered exponential back-off from reconnect_base, capped
    /// at reconnect_max (defaults 100 ms, 5 s).
    std::chrono::milliseconds reconnect_base{100};
    std::chrono::milliseconds reconnect_max{5000};
    /// How long stop() waits for running handlers (default 30 s) before leaving their tasks to
    /// the lease.
    std::chrono::milliseconds stop_grace{30000};
    /// Largest result a handler may set (Job::set_result; default 1 MiB, at most 64 MiB). A
    /// larger one is refused with ResultTooLarge, which fails the attempt for good unless the
    /// handler catches it. Results travel with the acknowledgement and stay in the history for
    /// history_retention: raising it costs the node memory per finished task until acknowledged
    /// and the database history space; big outputs belong in object storage, with their key as
    /// the result.
    std::size_t max_result_bytes = std::size_t{1} << 20;
    /// Times one task may snooze (Job::snooze; default 100, 0: never, at most 1 000 000). A snooze
    /// beyond it makes the task a dead letter (reason "snooze limit"), so a handler that snoozes
    /// forever cannot keep a task alive without bound. Higher lets long polls (wait for an external
    /// state) last longer; each snooze is one more claim and row update.
    std::uint32_t max_snoozes = 100;
    /// Optional log of rare events (reconnects, reclaims, checksum mismatches); called on the
    /// driver thread.
    std::function<void(std::string_view)> on_event;

    // --- recurring schedules
    /// Whether this node fires due recurring schedules (default true; Client::schedule). Any
    /// number of nodes may: each tick is enqueued exactly once whichever fires it, so leave it on
    /// everywhere and no single node's death stops the ticks. Costs a thread and a connection
    /// per node, one look at ax.schedules per schedule_poll when none is due; off for a node
    /// that should only run tasks (or a database role that may not write ax.schedules).
    bool fire_schedules = true;
    /// Longest wait between two looks at ax.schedules (default 10 s). The node wakes at the
    /// earliest next tick and on every Client::schedule (a notification); the poll only catches
    /// a change made around them (a hand-written UPDATE) or a notification lost with a
    /// connection. Shorter costs one cheap query more often.
    std::chrono::milliseconds schedule_poll{10000};
};

/// Counters of one node (monotonic, read any time).
struct NodeStats {
    std::int64_t node_id = 0;
    /// Claim statements sent and read back, and how many of them returned tasks (a batch).
    std::uint64_t claims = 0;
    std::uint64_t batches = 0;
    /// Claim statements that returned no task (claims - batches once every claim is read back),
    /// counted on their own so an operator can watch idleness: an idle node sends about one per
    /// wake-up (the poll_interval, maintenance, lease renewal: 2-4/s with the defaults), never
    /// more than one per 250 ms plus one per poll unless NOTIFY ax_wake (new tasks) wakes it.
    /// A steady higher rate with nothing claimed means enqueues this node cannot take (kinds it
    /// does not handle, tags it does not offer) keep waking it.
    std::uint64_t empty_claims = 0;
    std::array<std::uint64_t, 3> claimed{};
    std::uint64_t succeeded = 0;
    std::uint64_t failed = 0;
    std::uint64_t cancelled = 0;
    std::uint64_t released = 0;
    /// Attempts that ended in Job::snooze (their task went back without spending an attempt).
    std::uint64_t snoozed = 0;
    std::uint64_t reconnects = 0;
    std::uint64_t reclaimed_batches = 0;
    std::uint64_t reclaimed_tasks = 0;
    std::uint64_t checksum_mismatches = 0;
    /// Lease renewal statements that succeeded (one per NodeOptions::lease / 3 while running).
    std::uint64_t lease_renewals = 0;
    /// Pipelined round trips sent (each: acknowledgements, claim, renewal, maintenance as due).
    std::uint64_t round_trips = 0;
    /// VACUUM passes of ax.tasks this node started (NodeOptions::vacuum_dead_rows).
    std::uint64_t vacuums = 0;
    std::uint32_t last_batch = 0;
    std::uint32_t depth = 0;
    /// Tasks this node enqueued for recurring schedules' ticks, and firing passes that failed
    /// (retried with back-off).
    std::uint64_t schedule_tasks = 0;
    std::uint64_t schedule_errors = 0;
};

} // namespace ax::pg
