// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// The distributed mode's client-facing vocabulary, std and ax/task.hpp only: what a producer
// enqueues (NewTask) and gets back (Enqueued), where a task is (TaskState, TaskStatus), what a
// cancel did, dead letters, counts and the cluster status, and the one copy of the rules for
// kinds and tags (valid_kind, valid_tag) that the client and the node both apply. Read by
// client.hpp, json.hpp and prometheus.hpp, so rendering a Status needs neither libpq nor the
// Client.

#include "../task.hpp"

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ax::pg {

/// Longest task kind, in bytes (a kind is 1..max_kind_bytes).
inline constexpr std::size_t max_kind_bytes = 200;
/// Longest tag, in bytes (a tag is 1..max_tag_bytes).
inline constexpr std::size_t max_tag_bytes = 100;
/// What valid_kind checks, for error messages.
inline constexpr std::string_view kind_rule = "must be 1..200 bytes";
/// What valid_tag checks, for error messages.
inline constexpr std::string_view tag_rule =
    "each tag must be 1..100 bytes without ',', '{' or '\"'";

/// A kind a handler can be registered under and a task enqueued with: 1..200 bytes.
[[nodiscard]] constexpr bool valid_kind(std::string_view kind) noexcept {
    return !kind.empty() && kind.size() <= max_kind_bytes;
}

/// A tag a node can offer and a task require: 1..100 bytes, none of ',' (the enqueue statement
/// sends a task's tags comma-joined), '{' or '"' (array literal syntax).
[[nodiscard]] constexpr bool valid_tag(std::string_view tag) noexcept {
    return !tag.empty() && tag.size() <= max_tag_bytes &&
           tag.find_first_of(",{\"") == std::string_view::npos;
}

// --- unique tasks (issue 28, part 4)

/// Which states of the task holding an idempotency key make a new enqueue with the key answer it
/// (NewTask::unique_states); a bitmask, combined with |. Like River's UniqueOpts.ByState and
/// Oban's unique states. The SQL API takes the same bits (ax.unique_states('pending', ...)).
enum class UniqueStates : std::uint8_t {
    pending = 1,    ///< Waiting: claimable, scheduled (delay, run_at) or in a retry's back-off.
    running = 2,    ///< Claimed by a node (queued there or running).
    succeeded = 4,  ///< Finished successfully.
    failed = 8,     ///< A dead letter, or a discarded one.
    cancelled = 16, ///< Cancelled.
    /// Every state: the default, today's idempotency.
    all = 31,
    /// Not finished, or finished well: a failed or cancelled task may be enqueued again.
    not_failed = pending | running | succeeded,
};

/// The union of two state sets.
[[nodiscard]] constexpr UniqueStates operator|(UniqueStates a, UniqueStates b) noexcept {
    return static_cast<UniqueStates>(static_cast<unsigned>(a) | static_cast<unsigned>(b));
}

/// Whether `set` has any state of `s`.
[[nodiscard]] constexpr bool has(UniqueStates set, UniqueStates s) noexcept {
    return (static_cast<unsigned>(set) & static_cast<unsigned>(s)) != 0;
}

/// One task to enqueue. Designated initializers read well:
/// `client.enqueue({.kind = "thumb", .payload = bytes, .priority = ax::Priority::high})`.
struct NewTask {
    /// Which handler runs it; only nodes that registered this kind claim it. Until one does, the
    /// task waits (visible in Client::status() as unhandled). 1..200 bytes.
    std::string_view kind;
    /// Opaque bytes handed to the handler; at most ClientOptions::max_payload_bytes.
    std::string_view payload{};
    /// Claim lane: nodes take high:normal:low in 3:2:1 shares (weights of the node's Config).
    Priority priority = Priority::normal;
    /// Per-attempt timeout on the node, measured from the handler's last heartbeat (zero: none).
    std::chrono::milliseconds timeout{0};
    /// Attempts before the task becomes a dead letter (default 4 = the core's 1 + retry_max 3).
    int max_attempts = 4;
    /// Not claimable before now + delay (the server's now; 0..366 days).
    std::chrono::milliseconds delay{0};
    /// Not claimable before this absolute time (none by default); give it or a delay, not both
    /// (std::invalid_argument). At most 366 days ahead of this machine's clock; a time in the
    /// past means now (stored as the server's now(), so it does not jump ahead of older tasks).
    /// Compared with the database server's clock when claiming: keep the clocks in sync.
    std::optional<std::chrono::system_clock::time_point> run_at{};
    /// Idempotency key (empty: none; at most 512 bytes): one key, one task ID, from any number of
    /// producers and nodes, however enqueues race claims, acknowledgements, retries, dead
    /// letters, replays and discards. A second enqueue with the key answers the first task's ID
    /// (Enqueued::existed) while that task is live (pending, scheduled, claimed, retrying) or a
    /// dead letter, and for the history retention (NodeOptions::history_retention, 1 h by
    /// default) after it ended (succeeded, cancelled, discarded; a dead letter that expired
    /// with its ring, Client::set_dead_letter_retention, is forgotten at once). After that,
    /// maintenance forgets the key and the same key makes a new task. The key's row in
    /// ax.idem_keys is the one arbiter (docs/distributed.md).
    std::string_view idempotency_key{};
    /// Tags a node must offer to claim it ("gpu", "bigmem"); no commas, 1..100 bytes each.
    std::vector<std::string_view> tags{};
    /// Unique window (needs an idempotency_key; 0, the default: any age, today's idempotency;
    /// at most 366 days): the key's task counts only if it was enqueued less than unique_for
    /// ago; an older one no longer blocks, and this enqueue makes a new task that takes the key
    /// over (River's ByPeriod, Oban's period, measured from the holder's enqueue). A finished
    /// task's key is forgotten the history retention after it ended, whatever the window: a
    /// longer window ends there for finished tasks. Decided by the key's row in ax.idem_keys,
    /// so racing producers still get one task (docs/distributed.md "Unique tasks").
    std::chrono::milliseconds unique_for{0};
    /// Which states of the key's task count (needs an idempotency_key; default all, today's
    /// idempotency): e.g. UniqueStates::pending | UniqueStates::running enqueues again once the
    /// holder finished, however it ended. Finished states are exact (recorded with the move);
    /// pending vs running vs dead letter is read as of the enqueue's statement, so a claim that
    /// commits at the same moment may be seen either way.
    UniqueStates unique_states = UniqueStates::all;
    /// Limit group (empty: none; 1..200 bytes): the cluster-wide limits Client::set_limit sets
    /// for it apply (at most n running, at most n starts per period). A group without limits
    /// runs unlimited, but its keys still share each claim fairly. Grouped tasks are claimed by a
    /// slower path (a plpgsql function, several statements per claim) than ungrouped ones.
    std::string_view group{};
    /// Partition key within the group (a tenant ID; needs a group; at most 200 bytes; empty:
    /// the group's one key): a per-key limit (LimitSpec::per_key) counts each key on its own,
    /// and a lane's claims are shared evenly among the keys with work, so one key's flood does
    /// not hold back another's few tasks.
    std::string_view group_key{};
};

/// A group's cluster-wide limits (Client::set_limit). At least one of them must be set.
struct LimitSpec {
    /// At most this many of the group's tasks claimed at once across all nodes (per key when
    /// per_key); nullopt: no concurrency limit. 0 holds the group's tasks back entirely.
    std::optional<std::int32_t> max_running{};
    /// Each partition key (NewTask::group_key) gets the limits on its own, instead of the whole
    /// group sharing them (default false).
    bool per_key = false;
    /// At most rate_n starts per rate_period (per key when per_key); nullopt: no rate limit.
    /// Windows are fixed: one opens with the first start after the previous one ended, so two
    /// back-to-back windows may start up to 2 * rate_n within one period's span.
    std::optional<std::int32_t> rate_n{};
    /// The rate window's length (needs rate_n; 1 ms .. 366 days).
    std::chrono::milliseconds rate_period{0};
};

/// One group's limits and where it stands (Client::limits, status()).
struct LimitInfo {
    std::string group;
    LimitSpec spec;
    /// The group's tasks claimed now, and waiting (claimable or scheduled).
    std::int64_t running = 0, queued = 0;
    /// Partition keys with tasks (running or queued).
    std::int64_t keys = 0;
    /// Seconds until the first full rate window ends (when a rate-limited key or the group waits
    /// for its next slot); nullopt when no window is full.
    std::optional<double> next_slot_s{};
};

/// A partition key's weight in its lane's fair shares (Client::set_key_weight).
struct KeyWeight {
    std::string group, key;
    /// 1..1000; keys without a row weigh 1.
    int weight = 1;
};

/// What enqueue answers per task.
struct Enqueued {
    /// The task's ID (the earlier task's, when the idempotency key was already taken).
    std::int64_t id = 0;
    /// True when the key was taken and no new task was added.
    bool existed = false;
};

/// Where a distributed task is.
enum class TaskState : std::uint8_t {
    pending,       ///< Claimable now.
    scheduled,     ///< Waiting for its run-at (a delay, or a retry's back-off).
    claimed,       ///< Held by a node (queued locally or running).
    succeeded,     ///< Finished (still in the history).
    cancelled,     ///< Cancelled (still in the history).
    dead_lettered, ///< Failed for good; replay or discard it.
    discarded,     ///< A dead letter that was discarded (still in the history).
};

/// "pending", "scheduled", ...
constexpr std::string_view to_string(TaskState s) noexcept {
    switch (s) {
    case TaskState::pending:
        return "pending";
    case TaskState::scheduled:
        return "scheduled";
    case TaskState::claimed:
        return "claimed";
    case TaskState::succeeded:
        return "succeeded";
    case TaskState::cancelled:
        return "cancelled";
    case TaskState::dead_lettered:
        return "dead_lettered";
    case TaskState::discarded:
        return "discarded";
    }
    return "unknown";
}

/// What query() reports.
struct TaskStatus {
    std::int64_t id = 0;
    std::string kind;
    TaskState state = TaskState::pending;
    Priority priority = Priority::normal;
    /// Attempts started so far.
    int attempts = 0;
    /// The node holding it (claimed), or the node that finished it; 0 when none.
    std::int64_t node_id = 0;
    /// A cancel was requested while a node held it.
    bool cancel_requested = false;
    /// Errors of the failed attempts, oldest first (live tasks and dead letters).
    std::vector<std::string> errors;
};

/// What cancel() did.
enum class CancelResult : std::uint8_t {
    cancelled,        ///< It was not claimed: cancelled at once.
    cancel_requested, ///< A node holds it: the node was told, its stop token is requested.
    finished,         ///< Too late: it already finished.
    dead_lettered,    ///< It is a dead letter (discard it instead).
    unknown,          ///< No such task (or its history was pruned).
};

/// "cancelled", "cancel_requested", ...
constexpr std::string_view to_string(CancelResult r) noexcept {
    switch (r) {
    case CancelResult::cancelled:
        return "cancelled";
    case CancelResult::cancel_requested:
        return "cancel_requested";
    case CancelResult::finished:
        return "finished";
    case CancelResult::dead_lettered:
        return "dead_lettered";
    case CancelResult::unknown:
        return "unknown";
    }
    return "unknown";
}

/// One dead letter.
struct DeadLetterInfo {
    std::int64_t id = 0;
    std::string kind;
    Priority priority = Priority::normal;
    int attempts = 0;
    /// "permanent error", "attempts exhausted".
    std::string reason;
    /// Every failed attempt's error, oldest first.
    std::vector<std::string> errors;
    std::string payload;
    /// Seconds since it failed.
    double age_s = 0;
};

/// Live tasks by state and priority lane (index: 0 high, 1 normal, 2 low), plus the rest.
struct Counts {
    std::array<std::int64_t, 3> pending{};
    std::array<std::int64_t, 3> scheduled{};
    std::array<std::int64_t, 3> claimed{};
    /// Flow tasks waiting for their dependencies (Client::enqueue_flow): not claimable yet, and
    /// not in live() (they are not in ax.tasks until released).
    std::array<std::int64_t, 3> waiting{};
    std::int64_t dead_letters = 0;
    /// In the history (bounded by the retention).
    std::int64_t succeeded = 0;
    std::int64_t cancelled = 0;
    std::int64_t discarded = 0;
    /// Live tasks of all states (pending, scheduled, claimed; not waiting).
    [[nodiscard]] std::int64_t live() const noexcept {
        std::int64_t n = 0;
        for (std::size_t p = 0; p < 3; ++p)
            n += pending[p] + scheduled[p] + claimed[p];
        return n;
    }
};

/// A node as the database sees it.
struct NodeInfo {
    std::int64_t id = 0;
    std::string name;
    std::string host;
    int pid = 0;
    std::vector<std::string> kinds;
    std::vector<std::string> tags;
    /// Seconds left on its lease; negative once expired (maintenance then reclaims its batches).
    double lease_left_s = 0;
    std::int64_t batches = 0;
    std::int64_t tasks = 0;
};

// --- pause and resume, listing (issue 28)

/// What Client::pause() and Client::resume() act on, cluster-wide: every task of one kind, or
/// one claim lane (high, normal, low). Build one with PauseTarget::kind(), ::lane() or ::parse().
struct PauseTarget {
    /// Which of the two a target names.
    enum class Scope : std::uint8_t { kind, lane };
    Scope scope = Scope::kind;
    /// The kind, or the lane's name ("high", "normal", "low").
    std::string name;

    /// Every task of `k` (1..200 bytes; std::invalid_argument otherwise).
    static PauseTarget kind(std::string_view k) {
        if (!valid_kind(k))
            throw std::invalid_argument("ax::pg::PauseTarget: kind '" +
                                        std::string(k.substr(0, 40)) +
                                        "': " + std::string(kind_rule));
        return {Scope::kind, std::string(k)};
    }
    /// Every task of lane `p` (std::invalid_argument for a value outside the three lanes).
    static PauseTarget lane(Priority p) {
        if (static_cast<unsigned>(p) > 2)
            throw std::invalid_argument("ax::pg::PauseTarget: lane " +
                                        std::to_string(static_cast<unsigned>(p)) +
                                        ": must be high, normal or low");
        return {Scope::lane, std::string(to_string(p))};
    }
    /// "kind" + a kind, or "lane" + "high" | "normal" | "low" (for tools; std::invalid_argument
    /// naming what is wrong otherwise).
    static PauseTarget parse(std::string_view scope, std::string_view name) {
        if (scope == "kind")
            return kind(name);
        if (scope == "lane") {
            for (const Priority p : {Priority::high, Priority::normal, Priority::low})
                if (to_string(p) == name)
                    return lane(p);
            throw std::invalid_argument("ax::pg::PauseTarget: lane '" +
                                        std::string(name.substr(0, 40)) +
                                        "': must be high, normal or low");
        }
        throw std::invalid_argument("ax::pg::PauseTarget: '" + std::string(scope.substr(0, 40)) +
                                    "': must be kind or lane");
    }
    /// "kind resize", "lane low".
    [[nodiscard]] std::string text() const {
        return std::string(scope == Scope::kind ? "kind " : "lane ") + name;
    }
    friend bool operator==(const PauseTarget&, const PauseTarget&) = default;
};

/// One pause in force.
struct PauseInfo {
    PauseTarget target;
    /// Seconds since it was paused.
    double age_s = 0;
};

/// The TaskState named `s` for tools: to_string's names, plus "running" (claimed) and "dead"
/// (dead_lettered); nullopt for any other text.
[[nodiscard]] constexpr std::optional<TaskState> parse_task_state(std::string_view s) noexcept {
    if (s == "running")
        return TaskState::claimed;
    if (s == "dead")
        return TaskState::dead_lettered;
    for (const TaskState t :
         {TaskState::pending, TaskState::scheduled, TaskState::claimed, TaskState::succeeded,
          TaskState::cancelled, TaskState::dead_lettered, TaskState::discarded})
        if (to_string(t) == s)
            return t;
    return std::nullopt;
}

/// What the states are called in errors and usage lines.
inline constexpr std::string_view task_state_names =
    "pending, scheduled, claimed (or running), succeeded, cancelled, dead_lettered (or dead), "
    "discarded";

/// Largest page Client::list() returns.
inline constexpr std::size_t max_list_limit = 1000;

/// Which tasks Client::list() returns, and the page: every field left at its default matches
/// everything. Tasks come in ID order (the enqueue order) with a keyset cursor: pass the page's
/// TaskPage::next as `after` for the next page. A task is in one place at a time (live table,
/// history or dead letters) and keeps its ID through all of them, so no page repeats a task of
/// an earlier one and none is skipped, whatever finishes, fails or is enqueued between pages
/// (new tasks have higher IDs: they come on later pages, or never with newest_first). The one
/// exception is an enqueue transaction still open when a page is read: its IDs were drawn
/// earlier and may land behind the cursor.
struct TaskFilter {
    /// States to list (empty: all seven). Claimed is also "running" for tools.
    std::vector<TaskState> states{};
    /// Only this kind (empty: any).
    std::string kind{};
    /// Only tasks that require this tag. The history keeps no tags: with a tag, finished tasks
    /// (succeeded, cancelled, discarded) are never listed.
    std::string tag{};
    /// Only this lane.
    std::optional<Priority> lane{};
    /// Only tasks enqueued at or after / strictly before these times.
    std::optional<std::chrono::system_clock::time_point> enqueued_after{}, enqueued_before{};
    /// Only the task that holds this idempotency key now (ax.idem_keys; a key is forgotten a
    /// history retention after its task ended).
    std::string idempotency_key{};
    /// The cursor: list tasks past this ID (0: from the start).
    std::int64_t after = 0;
    /// Newest first (descending IDs; `after` then means "below this ID").
    bool newest_first = false;
    /// Page size, 1..max_list_limit (default 100).
    std::size_t limit = 100;
};

/// One task as a listing shows it.
struct TaskInfo {
    std::int64_t id = 0;
    std::string kind;
    TaskState state = TaskState::pending;
    Priority priority = Priority::normal;
    /// Attempts started so far.
    int attempts = 0;
    /// The node holding it (claimed) or that finished it; 0 when none.
    std::int64_t node_id = 0;
    /// Required tags (empty for finished tasks: the history keeps none).
    std::vector<std::string> tags;
    std::string idempotency_key;
    std::chrono::system_clock::time_point enqueued_at{};
    /// Live: when it is (or was) due; finished: when it ended; dead letter: when it failed.
    std::chrono::system_clock::time_point at{};
    /// Payload size in bytes; -1 for finished tasks (the history keeps no payload).
    std::int64_t payload_bytes = -1;
    /// Errors of its failed attempts so far (live tasks and dead letters).
    int errors = 0;
};

/// One page of Client::list().
struct TaskPage {
    std::vector<TaskInfo> tasks;
    /// The cursor for the next page (TaskFilter::after); 0 when this page was the last.
    std::int64_t next = 0;
};

/// Everything known of one task (Client::task_details).
struct TaskDetails {
    TaskInfo info;
    /// Attempts allowed and per-attempt timeout (0 ms: none); 0 / 0 for finished tasks.
    int max_attempts = 0;
    std::int64_t timeout_ms = 0;
    /// A cancel was requested while a node held it.
    bool cancel_requested = false;
    /// The claimed batch (0 when not claimed).
    std::int64_t batch_id = 0;
    /// Every failed attempt's error, oldest first.
    std::vector<std::string> errors;
    /// Why it is a dead letter ("permanent error", "attempts exhausted"); empty otherwise.
    std::string reason;
    /// The payload's first bytes (escaped as PostgreSQL's encode(..., 'escape') writes them).
    std::string payload_preview;
};

// --- end of pause and resume, listing

/// Everything `ax-pg status` prints.
struct Status {
    Counts counts;
    std::vector<NodeInfo> nodes;
    /// Age of the oldest claimable task (0 when none).
    double oldest_pending_age_s = 0;
    /// Claimable tasks no live node can take, by reason: kinds no live node handles, and tags no
    /// live node offers (each as "kind [tags]" with its count).
    std::vector<std::pair<std::string, std::int64_t>> unclaimable;
    std::int64_t unclaimable_total = 0;
    /// Recovery counters since the schema was created.
    std::int64_t reclaimed_batches = 0;
    std::int64_t reclaimed_tasks = 0;
    std::int64_t checksum_mismatches = 0;
    /// Kinds and lanes paused cluster-wide (Client::pause), by scope and name.
    std::vector<PauseInfo> paused;
    /// Cluster-wide group limits (Client::set_limit) and where each group stands.
    std::vector<LimitInfo> limits;
};

// --- results (Client::result, Client::wait)

/// A task's outcome as Client::result and Client::wait report it.
struct TaskResult {
    std::int64_t id = 0;
    /// Where the task is: an ending (succeeded, cancelled, dead_lettered, discarded) or, when
    /// Client::wait's timeout passed first, the live state it was still in.
    TaskState state = TaskState::pending;
    /// Attempts started (snoozes not counted).
    int attempts = 0;
    /// The bytes the handler set (Job::set_result), for a task that succeeded with one (or was
    /// cancelled after setting it); nullopt when it set none or did not succeed.
    std::optional<std::string> result;
    /// The last error: a dead letter's last attempt's (what dead-lettered it), a live task's
    /// last failed attempt's so far; "cancelled" or "discarded" for those endings (the history
    /// keeps no errors); empty for a success or a task that never failed.
    std::string error;
    /// True for an ending: succeeded, cancelled, dead_lettered, discarded. A dead letter counts
    /// as an ending although Client::replay_dead_letter can revive it.
    [[nodiscard]] bool finished() const noexcept {
        return state == TaskState::succeeded || state == TaskState::cancelled ||
               state == TaskState::dead_lettered || state == TaskState::discarded;
    }
};

/// The TaskState named `s` (to_string's inverse); discarded for any other text.
[[nodiscard]] constexpr TaskState task_state_from_string(std::string_view s) noexcept {
    for (const TaskState t : {TaskState::pending, TaskState::scheduled, TaskState::claimed,
                              TaskState::succeeded, TaskState::cancelled, TaskState::dead_lettered})
        if (to_string(t) == s)
            return t;
    return TaskState::discarded;
}

/// The CancelResult named `s` (to_string's inverse); unknown for any other text.
[[nodiscard]] constexpr CancelResult cancel_result_from_string(std::string_view s) noexcept {
    for (const CancelResult r : {CancelResult::cancelled, CancelResult::cancel_requested,
                                 CancelResult::finished, CancelResult::dead_lettered})
        if (to_string(r) == s)
            return r;
    return CancelResult::unknown;
}

// --- recurring schedules

/// What a schedule does with ticks that came while no node could fire them (all nodes down or
/// stuck for longer than the schedule's grace).
enum class MissedTicks : std::uint8_t {
    skip,     ///< Drop them; the schedule resumes at its next tick (cron's behaviour).
    run_once, ///< One task stands for all of them (keyed by the first missed tick), then resume.
};

/// "skip", "run_once".
constexpr std::string_view to_string(MissedTicks m) noexcept {
    return m == MissedTicks::run_once ? "run_once" : "skip";
}

/// A recurring schedule (Client::schedule): every tick of `cron` in `time_zone` enqueues one
/// task built from the template fields, exactly once across the cluster. Designated
/// initializers read well: `client.schedule({.name = "nightly", .cron = "0 3 * * *",
/// .time_zone = "Europe/Berlin", .kind = "report"})`.
struct ScheduleSpec {
    /// Unique name, 1..200 bytes; schedule() with an existing name replaces that schedule.
    std::string name;
    /// Standard 5-field cron (minute hour day-of-month month day-of-week; lists, ranges, steps,
    /// JAN..DEC, SUN..SAT), a 6-field form with a leading seconds field, or @yearly @annually
    /// @monthly @weekly @daily @midnight @hourly. Both day fields restricted: either matches.
    std::string cron;
    /// "UTC" (default) or an IANA zone ("America/New_York") read from the tz database
    /// (/usr/share/zoneinfo, or $TZDIR) on the client and on every node. DST: a skipped wall-clock
    /// time runs at the transition; a repeated one runs once (twice if the hour field is '*').
    std::string time_zone = "UTC";
    /// The task each tick enqueues (the rules of NewTask); its idempotency key is
    /// "schedule:<name>:<tick as YYYY-MM-DDTHH:MM:SSZ>".
    std::string kind;
    std::string payload{};
    Priority priority = Priority::normal;
    std::vector<std::string> tags{};
    int max_attempts = 4;
    std::chrono::milliseconds timeout{0};
    /// Limit group of each tick's task (NewTask::group: empty, the default, for none; at most
    /// 200 bytes) and its partition key (needs a group; at most 200 bytes): the group's
    /// cluster-wide limits (Client::set_limit) apply to the schedule's tasks.
    std::string group{};
    std::string group_key{};
    /// Missed ticks (default skip, as cron, River and Oban do; run_once for work that must
    /// happen after an outage, such as a nightly settlement).
    MissedTicks missed = MissedTicks::skip;
    /// A tick fired at most this late is on time and runs (default 60 s, 1 s .. 1 day); an older
    /// one counts as missed. Longer tolerates longer outages without applying `missed` at the
    /// cost of running stale ticks back to back after one.
    std::chrono::milliseconds grace{60000};
};

/// A schedule as stored (Client::schedules()).
struct ScheduleInfo {
    ScheduleSpec spec;
    /// The next tick not yet enqueued, UTC seconds since the epoch (0 with no next tick).
    std::int64_t next_at_s = 0;
    /// The latest tick enqueued (0: none yet).
    std::int64_t last_tick_s = 0;
    /// Tasks enqueued so far, and firings that found missed ticks.
    std::int64_t fired = 0;
    std::int64_t missed = 0;
    /// Why the nodes cannot fire it (a zone missing on a node, say); empty when fine.
    std::string error;
};

// --- workflows (Client::enqueue_flow)

/// One task of a flow (Client::enqueue_flow): a task, its name in the flow, and the names of the
/// tasks it waits for. It becomes claimable when all of them succeeded; when one of them is
/// dead-lettered, cancelled or discarded, it ends cancelled at once (its reason recorded,
/// FlowTaskState::reason), unless run_anyway, when it runs once all of them ended whichever way.
struct FlowTask {
    /// Its name in the flow: unique within the flow, 1..200 bytes.
    std::string_view name;
    /// The task. Flow tasks take no delay, run_at or idempotency key (std::invalid_argument):
    /// a flow task runs when its dependencies let it, and the flow is one call.
    NewTask task;
    /// Names of tasks of the same flow this one waits for (none: claimable at once). An unknown
    /// name, the task's own name or a cycle refuses the whole flow.
    std::vector<std::string_view> depends_on{};
    /// Run even when a dependency did not succeed (default false: the dependency's failure
    /// cancels this task and, in turn, its own dependents). For clean-up and reporting steps.
    bool run_anyway = false;
};

/// What Client::enqueue_flow made: the flow's ID and the task IDs in the order given.
struct FlowEnqueued {
    std::int64_t flow_id = 0;
    std::vector<std::int64_t> ids;
};

/// A flow's progress (Client::flows): how many of its tasks are in each state.
struct FlowProgress {
    std::int64_t id = 0;
    std::string name;
    /// When it was enqueued, UTC seconds since the epoch.
    double created_at_s = 0;
    std::int64_t tasks = 0;
    /// Waiting for dependencies; claimable (or scheduled for a retry); held by a node.
    std::int64_t waiting = 0, pending = 0, running = 0;
    /// Endings. `other`: discarded dead letters, and tasks whose history was pruned.
    std::int64_t succeeded = 0, cancelled = 0, dead_lettered = 0, other = 0;
    /// No task waiting, pending or running.
    bool finished = false;
};

/// One task of a flow as Client::flow_tasks reports it.
struct FlowTaskState {
    std::int64_t id = 0;
    std::string name;
    /// waiting, pending, scheduled, running, succeeded, cancelled, dead_lettered, discarded,
    /// unknown (its history was pruned).
    std::string state;
    /// Why the flow cancelled it ("dependency 'a' (task 12) was dead-lettered", "cancelled by
    /// request"); empty when it did not.
    std::string reason;
    /// Its dependencies' names, in the order of the flow's task list (not of depends_on).
    std::vector<std::string> depends_on;
};

/// A dependency's outcome, as a dependent reads it (Client::parent_results).
struct ParentResult {
    /// The dependency's name in the flow.
    std::string name;
    /// Its outcome, as Client::result reports it (a waiting one reads as scheduled).
    TaskResult result;
};

} // namespace ax::pg
