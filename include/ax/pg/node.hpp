// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// The worker side of the distributed mode: ax::pg::Node claims batches of tasks from
// PostgreSQL and runs them on a local ax::Scheduler. See docs/distributed.md.
//
// Threads and ownership:
//   - the driver thread owns the connection, the batch table and the slot free list; it claims,
//     acknowledges, renews leases, runs maintenance and reacts to notifications, all in one
//     pipelined round trip per cycle;
//   - worker threads (the local scheduler's) run handlers and append finished slots to done_,
//     which done_mutex_ guards; they wake the driver through an eventfd only when it sleeps and
//     something is worth a round trip (enough results, or the local queue ran low);
//   - local_mutex_ guards the slots' local TaskIds, written by the driver once per batch and read
//     by cancel notifications and the timeout hook.

#include "../scheduler.hpp"
#include "connection.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <poll.h>
#include <random>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <string_view>
#include <sys/eventfd.h>
#include <thread>
#include <typeinfo>
#include <unistd.h>
#include <vector>

namespace ax::pg {

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

    /// Built by the node only.
    Job(std::int64_t id, std::string_view kind, std::string_view payload, std::uint32_t attempt,
        Priority priority, TaskContext& ctx) noexcept
        : id_(id), kind_(kind), payload_(payload), attempt_(attempt), priority_(priority),
          ctx_(&ctx) {}

  private:
    std::int64_t id_;
    std::string_view kind_;
    std::string_view payload_;
    std::uint32_t attempt_;
    Priority priority_;
    TaskContext* ctx_;
};

/// A handler: returns normally for success, throws to fail the attempt (retried in the
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
    /// History kept for query() (default 1 h), pruned by maintenance `prune_batch` rows at a time.
    std::chrono::milliseconds history_retention{3600 * 1000};
    std::uint32_t prune_batch = 10000;
    /// Reconnect back-off: the core's jittered exponential back-off from reconnect_base, capped
    /// at reconnect_max (defaults 100 ms, 5 s).
    std::chrono::milliseconds reconnect_base{100};
    std::chrono::milliseconds reconnect_max{5000};
    /// How long stop() waits for running handlers (default 30 s) before leaving their tasks to
    /// the lease.
    std::chrono::milliseconds stop_grace{30000};
    /// Optional log of rare events (reconnects, reclaims, checksum mismatches); called on the
    /// driver thread.
    std::function<void(std::string_view)> on_event;
};

/// Counters of one node (monotonic, read any time).
struct NodeStats {
    std::int64_t node_id = 0;
    /// Claim statements sent, and how many of them returned tasks (a batch).
    std::uint64_t claims = 0;
    std::uint64_t batches = 0;
    std::array<std::uint64_t, 3> claimed{};
    std::uint64_t succeeded = 0;
    std::uint64_t failed = 0;
    std::uint64_t cancelled = 0;
    std::uint64_t released = 0;
    std::uint64_t reconnects = 0;
    std::uint64_t reclaimed_batches = 0;
    std::uint64_t reclaimed_tasks = 0;
    std::uint64_t checksum_mismatches = 0;
    std::uint32_t last_batch = 0;
    std::uint32_t depth = 0;
};

namespace detail {

/// Batch-size PID (seed 003 §4.1): steers the local depth toward a target, so a fast drain
/// claims more per round trip and a slow one less, without oscillating between starving and
/// flooding.
class BatchPid {
  public:
    /// Gains: the proportional term refills the gap, the integral removes a steady shortfall
    /// (tasks finishing during the round trip), the derivative damps.
    double kp = 0.8, ki = 0.1, kd = 0.2;

    /// The next batch size in [1, max_batch] for `depth` against `target`.
    std::uint32_t next(double target, double depth, std::uint32_t max_batch) noexcept {
        const double e = target - depth;
        integral_ = std::clamp(integral_ + e, -2.0 * target, 2.0 * target);
        const double d = e - prev_;
        prev_ = e;
        const double u = kp * e + ki * integral_ + kd * d;
        return static_cast<std::uint32_t>(
            std::clamp(std::lround(u), 1L, static_cast<long>(std::max(1u, max_batch))));
    }
    /// Forgets the history (after an idle spell, so the integral does not wind up).
    void reset() noexcept { integral_ = prev_ = 0; }

  private:
    double integral_ = 0, prev_ = 0;
};

/// Splits each claim over the lanes by weight (3:2:1), exactly over time even for small batches:
/// every busy lane earns batch x weight / (sum of busy weights) credit per claim and takes the
/// whole part, keeping the fraction for the next claim (deficit round robin). A lane known empty
/// gets a probe of one task, so new arrivals are seen at once, and its share goes to the busy
/// lanes. An overdue lane (its oldest claimed task waited past the anti-starvation budget, the
/// core's Config::max_wait) gets at least half the batch.
class LaneSplitter {
  public:
    std::array<std::uint32_t, 3> split(std::uint32_t batch,
                                       const std::array<std::uint32_t, 3>& weights,
                                       const std::array<bool, 3>& empty,
                                       const std::array<bool, 3>& overdue) noexcept {
        std::array<std::uint32_t, 3> q{};
        double busy = 0;
        for (std::size_t p = 0; p < 3; ++p)
            if (!empty[p])
                busy += weights[p];
        if (batch == 0)
            return q;
        if (busy == 0) {
            q = {1, 1, 1}; // every lane looked empty: probe each
            return q;
        }
        std::uint32_t given = 0;
        for (std::size_t p = 0; p < 3; ++p) {
            if (empty[p]) {
                credit_[p] = 0;
                q[p] = 1;
                continue;
            }
            credit_[p] += batch * weights[p] / busy;
            q[p] = static_cast<std::uint32_t>(credit_[p]);
            credit_[p] -= q[p];
            given += q[p];
        }
        // Rounding left some of the batch unassigned: the lane with the most credit takes it.
        while (given < batch) {
            std::size_t best = 3;
            for (std::size_t p = 0; p < 3; ++p)
                if (!empty[p] && (best == 3 || credit_[p] > credit_[best]))
                    best = p;
            q[best] += 1;
            credit_[best] -= 1;
            ++given;
        }
        for (std::size_t p = 0; p < 3; ++p)
            if (overdue[p] && !empty[p])
                q[p] = std::max(q[p], (batch + 1) / 2);
        return q;
    }

  private:
    std::array<double, 3> credit_{};
};

/// Token bucket of one lane (seed 003 §2.2). rate 0: unlimited.
struct TokenBucket {
    double rate = 0, burst = 0, tokens = 0;
    std::chrono::steady_clock::time_point last{};
    void refill(std::chrono::steady_clock::time_point now) noexcept {
        if (rate <= 0)
            return;
        const double dt = std::chrono::duration<double>(now - last).count();
        last = now;
        tokens = std::min(burst, tokens + dt * rate);
    }
    [[nodiscard]] std::uint32_t allow(std::uint32_t want) const noexcept {
        if (rate <= 0)
            return want;
        return std::min<std::uint32_t>(want, static_cast<std::uint32_t>(std::max(0.0, tokens)));
    }
    void take(std::uint32_t n) noexcept {
        if (rate > 0)
            tokens -= n;
    }
    /// Time until one token is there (zero when unlimited or available).
    [[nodiscard]] std::chrono::milliseconds wait() const noexcept {
        if (rate <= 0 || tokens >= 1)
            return std::chrono::milliseconds(0);
        return std::chrono::milliseconds(
            static_cast<std::int64_t>(std::ceil((1 - tokens) / rate * 1000)));
    }
};

} // namespace detail

/// A worker process's handle on the distributed queue: register handlers, start(), and it
/// claims, runs and acknowledges until stop().
class Node {
  public:
    /// Validates the options (std::invalid_argument) and the connection string; connects at
    /// start().
    explicit Node(NodeOptions options) : opt_(std::move(options)) {
        validate_conninfo(opt_.conninfo);
        validate_options();
        if (opt_.name.empty()) {
            char host[256] = {};
            gethostname(host, sizeof host - 1);
            host_ = host;
            opt_.name = host_ + ":" + std::to_string(getpid());
        } else {
            char host[256] = {};
            gethostname(host, sizeof host - 1);
            host_ = host;
        }
    }
    Node(const Node&) = delete;
    Node& operator=(const Node&) = delete;
    /// Stops (gracefully) if still running.
    ~Node() { stop(); }

    /// Registers the handler for `kind` (before start()). The node claims only registered kinds.
    void handle(std::string kind, Handler handler) {
        if (started_)
            throw std::logic_error("ax::pg::Node::handle: register handlers before start()");
        if (kind.empty() || kind.size() > 200)
            throw std::invalid_argument("ax::pg::Node::handle: kind must be 1..200 bytes");
        for (auto& k : kinds_)
            if (k == kind)
                throw std::invalid_argument("ax::pg::Node::handle: kind '" + kind +
                                            "' registered twice");
        kinds_.push_back(std::move(kind));
        handlers_.push_back(std::move(handler));
    }

    /// Starts the local scheduler and the driver thread. Throws for no handlers; connection
    /// problems are not thrown but retried with back-off (see stats().reconnects), except a
    /// schema mismatch at the first connect, which is thrown (SchemaError).
    void start() {
        if (started_)
            throw std::logic_error("ax::pg::Node::start: already started");
        if (handlers_.empty())
            throw std::logic_error("ax::pg::Node::start: no handler registered");
        {
            // Fail fast on a database that is not ready for us; the driver keeps its own link.
            detail::Connection c = detail::Connection::open(opt_.conninfo);
            detail::require_schema(c);
        }
        started_ = true;
        Config cfg = opt_.scheduler;
        capacity_ = static_cast<std::uint32_t>(std::min<std::uint64_t>(
            std::uint64_t{cfg.max_workers} * opt_.tasks_per_worker, 1u << 20));
        target_ = opt_.target_depth != 0 ? std::min(opt_.target_depth, capacity_) : capacity_;
        low_watermark_ = std::max(1u, target_ / 2);
        cfg.queue_capacity = std::max<std::uint32_t>(cfg.queue_capacity, capacity_ + 16);
        cfg.soft_limit_ratio = 1.0;
        weights_ = {cfg.weight_high, cfg.weight_normal, cfg.weight_low};
        max_wait_ms_ = std::chrono::duration_cast<std::chrono::milliseconds>(cfg.max_wait).count();
        slots_ = std::make_unique<Slot[]>(capacity_);
        free_.reserve(capacity_);
        for (std::uint32_t i = capacity_; i > 0; --i)
            free_.push_back(i - 1);
        done_.reserve(capacity_);
        done_local_.reserve(capacity_);
        const auto now = std::chrono::steady_clock::now();
        for (std::size_t p = 0; p < 3; ++p)
            buckets_[p] = {opt_.rate_per_s[p], opt_.burst[p], opt_.burst[p], now};
        for (auto& k : kinds_)
            kinds_param_.add_bytes(k);
        for (auto& t : opt_.tags)
            tags_param_.add_bytes(t);
        wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (wake_fd_ < 0)
            throw std::runtime_error("ax::pg::Node: eventfd failed");
        Hooks hooks;
        hooks.on_dead_letter = [this](const TaskEvent& e) { on_local_dead_letter(e); };
        sched_ = std::make_unique<Scheduler<>>(cfg, std::move(hooks));
        driver_ = std::thread([this] { drive(); });
    }

    /// Graceful stop: claims nothing more, hands claimed tasks that have not started back at
    /// once (attempt not counted), waits up to stop_grace for running handlers, acknowledges
    /// everything, closes its batches and leaves. Tasks still running after the grace are left to
    /// their lease. Idempotent.
    void stop() {
        if (!started_ || stopped_.exchange(true))
            return;
        stopping_.store(true);
        wake();
        if (driver_.joinable())
            driver_.join();
        sched_.reset();
        if (wake_fd_ >= 0)
            ::close(wake_fd_);
        wake_fd_ = -1;
    }

    /// True until stop() (or a fatal error) ended the driver.
    [[nodiscard]] bool running() const noexcept { return started_ && !driver_done_.load(); }

    /// Counters.
    [[nodiscard]] NodeStats stats() const noexcept {
        NodeStats s;
        s.node_id = node_id_pub_.load(std::memory_order_relaxed);
        s.claims = claims_.load(std::memory_order_relaxed);
        s.batches = batches_claimed_.load(std::memory_order_relaxed);
        for (std::size_t p = 0; p < 3; ++p)
            s.claimed[p] = claimed_[p].load(std::memory_order_relaxed);
        s.succeeded = succeeded_.load(std::memory_order_relaxed);
        s.failed = failed_.load(std::memory_order_relaxed);
        s.cancelled = cancelled_.load(std::memory_order_relaxed);
        s.released = released_.load(std::memory_order_relaxed);
        s.reconnects = reconnects_.load(std::memory_order_relaxed);
        s.reclaimed_batches = reclaimed_batches_.load(std::memory_order_relaxed);
        s.reclaimed_tasks = reclaimed_tasks_.load(std::memory_order_relaxed);
        s.checksum_mismatches = mismatches_.load(std::memory_order_relaxed);
        s.last_batch = last_batch_.load(std::memory_order_relaxed);
        s.depth = depth_.load(std::memory_order_relaxed);
        return s;
    }

    /// The options in force.
    [[nodiscard]] const NodeOptions& options() const noexcept { return opt_; }

  private:
    // ------------------------------------------------------------------ slots and batches
    enum Phase : std::uint8_t { free_phase, queued, running_phase, done_phase, handed_back };
    enum Outcome : std::uint8_t { ok, failed, permanent, cancelled_outcome };

    /// One claimed task. `word` = generation << 8 | Phase; whoever moves it (the worker, the
    /// timeout hook, the stop path) with a CAS owns the transition, and the generation keeps a
    /// late body from touching a reused slot.
    struct Slot {
        std::atomic<std::uint64_t> word{0};
        std::atomic<bool> cancel{false};
        std::int64_t id = 0;
        std::uint32_t batch = 0;
        std::uint32_t kind = 0;
        std::uint32_t attempt = 0;
        Priority priority = Priority::normal;
        Outcome outcome = ok;
        std::string_view payload;
        std::string error;
        TaskId local{};
    };

    /// One claimed batch: the claim's result (the slots' payloads point into it) and the
    /// accounting its close reports.
    struct Batch {
        std::int64_t db_id = 0;
        PGresult* result = nullptr;
        std::uint32_t size = 0;
        std::uint32_t accounted = 0; // tasks reported or handed back (queued for acknowledgement)
        std::uint32_t confirmed = 0; // of those, acknowledged by the database
        std::int64_t xor_ids = 0;
        bool in_use = false;
        bool stale = false; // the node re-registered: the database forgot this batch
    };

    static std::uint64_t word(std::uint64_t gen, Phase p) noexcept { return gen << 8 | p; }

    void run_slot(std::uint32_t idx, std::uint64_t gen, TaskContext& ctx) {
        Slot& s = slots_[idx];
        std::uint64_t expect = word(gen, queued);
        if (!s.word.compare_exchange_strong(expect, word(gen, running_phase)))
            return; // handed back by stop() before it started
        if (s.cancel.load()) {
            s.outcome = cancelled_outcome;
        } else {
            Job job(s.id, kinds_[s.kind], s.payload, s.attempt, s.priority, ctx);
            try {
                handlers_[s.kind](job);
                s.outcome = s.cancel.load() ? cancelled_outcome : ok;
            } catch (const PermanentError& e) {
                s.outcome = permanent;
                s.error = std::string("ax::PermanentError: ") + e.what();
            } catch (const std::exception& e) {
                s.outcome = s.cancel.load() ? cancelled_outcome : failed;
                s.error = describe(e);
            } catch (...) {
                s.outcome = s.cancel.load() ? cancelled_outcome : failed;
                s.error = "unknown exception (not derived from std::exception)";
            }
        }
        finish(idx, gen, running_phase);
    }

    static std::string describe(const std::exception& e) {
        const char* type = typeid(e).name();
        std::string t = type;
#if __has_include(<cxxabi.h>)
        int status = 0;
        char* d = abi::__cxa_demangle(type, nullptr, nullptr, &status);
        if (d != nullptr) {
            t = d;
            std::free(d);
        }
#endif
        return t + ": " + e.what();
    }

    /// Publishes a slot's ending to the driver.
    void finish(std::uint32_t idx, std::uint64_t gen, Phase from) {
        Slot& s = slots_[idx];
        std::uint64_t expect = word(gen, from);
        if (!s.word.compare_exchange_strong(expect, word(gen, done_phase)))
            return;
        std::size_t pending;
        {
            std::lock_guard lock(done_mutex_);
            done_.push_back(idx);
            pending = done_.size();
        }
        const std::uint32_t depth = depth_.fetch_sub(1, std::memory_order_acq_rel) - 1;
        if ((pending >= opt_.ack_batch || depth <= low_watermark_) &&
            sleeping_.load(std::memory_order_acquire) && sleeping_.exchange(false))
            wake();
    }

    /// The watchdog timed out an attempt whose body did not return in time: report the failure
    /// now (the body's own ending, if it ever comes, loses the CAS).
    void on_local_dead_letter(const TaskEvent& e) {
        std::lock_guard lock(local_mutex_);
        for (std::uint32_t i = 0; i < capacity_; ++i) {
            Slot& s = slots_[i];
            const std::uint64_t w = s.word.load();
            if ((w & 0xff) == running_phase && s.local == e.id) {
                s.outcome = s.cancel.load() ? cancelled_outcome : failed;
                s.error = "ax::TaskTimedOut: " + std::string(e.error);
                finish(i, w >> 8, running_phase);
                return;
            }
        }
    }

    void wake() noexcept {
        if (wake_fd_ >= 0) {
            const std::uint64_t one = 1;
            [[maybe_unused]] auto n = ::write(wake_fd_, &one, sizeof one);
        }
    }

    void event(const std::string& what) {
        if (opt_.on_event)
            opt_.on_event(what);
    }

    void validate_options() const {
        auto bad = [](const char* f, const std::string& v, const char* why) {
            throw std::invalid_argument(std::string("ax::pg::NodeOptions: ") + f + " = " + v +
                                        ": " + why);
        };
        opt_.scheduler.validate();
        if (opt_.tasks_per_worker == 0 || opt_.tasks_per_worker > 1024)
            bad("tasks_per_worker", std::to_string(opt_.tasks_per_worker), "must be in 1..1024");
        if (opt_.max_batch == 0 || opt_.max_batch > 65536)
            bad("max_batch", std::to_string(opt_.max_batch), "must be in 1..65536");
        if (opt_.ack_batch == 0)
            bad("ack_batch", "0", "must be at least 1");
        const std::pair<const char*, std::chrono::milliseconds> durations[] = {
            {"lease", opt_.lease},
            {"maintenance_interval", opt_.maintenance_interval},
            {"poll_interval", opt_.poll_interval},
            {"ack_delay", opt_.ack_delay},
            {"history_retention", opt_.history_retention},
            {"reconnect_base", opt_.reconnect_base},
            {"reconnect_max", opt_.reconnect_max},
            {"stop_grace", opt_.stop_grace}};
        for (auto& [f, d] : durations)
            if (d.count() <= 0 || d > std::chrono::hours(24 * 30))
                bad(f, std::to_string(d.count()) + " ms", "must be in (0, 30 days]");
        if (opt_.lease < std::chrono::milliseconds(300))
            bad("lease", std::to_string(opt_.lease.count()) + " ms", "must be at least 300 ms");
        for (std::size_t p = 0; p < 3; ++p)
            if (opt_.rate_per_s[p] < 0 || (opt_.rate_per_s[p] > 0 && opt_.burst[p] < 1))
                bad("rate_per_s/burst", std::to_string(opt_.rate_per_s[p]),
                    "rate must be >= 0, and a limited lane needs burst >= 1");
        for (auto& t : opt_.tags)
            if (t.empty() || t.size() > 100 || t.find_first_of(",{\"") != std::string::npos)
                bad("tags", "'" + t + "'",
                    "each tag must be 1..100 bytes without ',', '{' or '\"'");
    }

    // ------------------------------------------------------------------ the driver
    using Clock = std::chrono::steady_clock;

    void drive() {
        std::uint32_t failures = 0;
        std::mt19937_64 rng(std::random_device{}());
        while (true) {
            if (!conn_.ok()) {
                if (stopping_.load() && stop_deadline_passed())
                    break;
                try {
                    connect();
                    if (failures > 0) {
                        reconnects_.fetch_add(1);
                        event("reconnected after " + std::to_string(failures) +
                              " failed attempt(s)");
                    }
                    failures = 0;
                } catch (const std::exception& e) {
                    conn_.close();
                    ++failures;
                    const auto d = std::min<std::chrono::nanoseconds>(
                        retry_delay(opt_.reconnect_base, opt_.reconnect_base, failures + 1,
                                    std::uniform_real_distribution<double>(0, 1)(rng)),
                        opt_.reconnect_max);
                    if (failures == 1)
                        event(std::string("connection lost, retrying: ") + e.what());
                    sleep_for(std::chrono::duration_cast<std::chrono::milliseconds>(d));
                    continue;
                }
            }
            try {
                if (!cycle())
                    break;
            } catch (const std::exception& e) {
                // The link broke, or a statement failed on a healthy one: drop the link and
                // start over after a back-off, keeping every result for the next attempt
                // (nothing is lost).
                event(std::string("connection lost or statement failed: ") + e.what());
                conn_.close();
                ++failures;
                const auto d = std::min<std::chrono::nanoseconds>(
                    retry_delay(opt_.reconnect_base, opt_.reconnect_base, failures + 1,
                                std::uniform_real_distribution<double>(0, 1)(rng)),
                    opt_.reconnect_max);
                sleep_for(std::chrono::duration_cast<std::chrono::milliseconds>(d));
            }
        }
        // Leave: the row goes, so status no longer lists this node.
        try {
            if (conn_.ok() && node_id_ != 0) {
                PQexitPipelineMode(conn_.get());
                const std::string id = std::to_string(node_id_);
                conn_.exec_params("DELETE FROM ax.nodes WHERE id = $1 AND NOT EXISTS "
                                  "(SELECT 1 FROM ax.batches WHERE node_id = $1)",
                                  {id.c_str()});
            }
        } catch (const std::exception&) {
        }
        conn_.close();
        driver_done_.store(true);
    }

    bool stop_deadline_passed() {
        if (stop_deadline_ == Clock::time_point{})
            stop_deadline_ = Clock::now() + opt_.stop_grace;
        return Clock::now() >= stop_deadline_;
    }

    void sleep_for(std::chrono::milliseconds d) {
        pollfd p{wake_fd_, POLLIN, 0};
        ::poll(&p, 1, static_cast<int>(std::max<std::int64_t>(1, d.count())));
        drain_wake();
    }

    void drain_wake() noexcept {
        std::uint64_t v;
        while (::read(wake_fd_, &v, sizeof v) > 0) {
        }
    }

    void connect() {
        conn_ = detail::Connection::open(opt_.conninfo);
        detail::require_schema(conn_);
        PGconn* c = conn_.get();
        struct P {
            const char* name;
            const char* sql;
            std::vector<Oid> types;
        };
        const P stmts[] = {
            {"ax_claim", detail::claim_sql, {20, 1009, 1009, 20, 20, 20, 20}},
            {"ax_ack", detail::ack_sql, {20, 1016}},
            {"ax_fail", "SELECT ax.fail_tasks($1, $2, $3, $4, $5)", {20, 1016, 1009, 1000, 1016}},
            {"ax_close", "SELECT ax.close_batch($1, $2, $3, $4)", {20, 20, 23, 20}},
            {"ax_renew", "SELECT ax.renew($1, $2, $3)", {20, 1016, 20}},
            {"ax_release", "SELECT ax.release($1, $2)", {20, 1016}},
            {"ax_maintain",
             "SELECT got_lock, reclaimed_batches, reclaimed_nodes, requeued, dead, pruned "
             "FROM ax.maintain($1, $2)",
             {20, 23}},
        };
        for (const P& s : stmts)
            conn_.check(detail::Result(PQprepare(c, s.name, s.sql, static_cast<int>(s.types.size()),
                                                 s.types.data())),
                        s.sql);
        register_node();
        conn_.exec("LISTEN ax_wake");
        if (PQenterPipelineMode(c) != 1)
            throw ConnectionError("ax::pg: cannot enter pipeline mode: " + conn_.error_message());
        empty_ = {false, false, false};
        next_renew_ = Clock::now() + opt_.lease / 3;
        next_maintain_ = Clock::now();
        claim_now_ = true;
    }

    /// Renews the node's row if the database still has it, else registers a new one (its old
    /// batches were reclaimed: the local copies become stale).
    void register_node() {
        if (node_id_ != 0) {
            detail::BinaryArray ids(detail::BinaryArray::int8_oid);
            collect_batch_ids(ids);
            const std::string id = std::to_string(node_id_),
                              lease = std::to_string(opt_.lease.count());
            const char* values[3] = {id.c_str(), ids.data(), lease.c_str()};
            int lengths[3] = {0, ids.length(), 0};
            int formats[3] = {0, 1, 0};
            detail::Result r =
                conn_.exec_raw("SELECT ax.renew($1, $2, $3)", 3, values, lengths, formats, 0);
            if (r.boolean(0, 0)) {
                conn_.exec(("LISTEN ax_node_" + id).c_str());
                return;
            }
            event("node #" + id + " was reclaimed while away; registering again");
            for (auto& b : batches_)
                if (b.in_use)
                    b.stale = true;
        }
        detail::BinaryArray kinds(detail::BinaryArray::text_oid),
            tags(detail::BinaryArray::text_oid);
        for (auto& k : kinds_)
            kinds.add_bytes(k);
        for (auto& t : opt_.tags)
            tags.add_bytes(t);
        const std::string pid = std::to_string(getpid()),
                          lease = std::to_string(opt_.lease.count());
        const char* values[6] = {opt_.name.c_str(), kinds.data(), tags.data(),
                                 host_.c_str(),     pid.c_str(),  lease.c_str()};
        int lengths[6] = {0, kinds.length(), tags.length(), 0, 0, 0};
        int formats[6] = {0, 1, 1, 0, 0, 0};
        detail::Result r = conn_.exec_raw(
            "INSERT INTO ax.nodes (name, kinds, tags, host, pid, lease_until) VALUES "
            "($1, $2, $3, $4, $5, now() + $6::int8 * interval '1 millisecond') RETURNING id",
            6, values, lengths, formats, 0);
        node_id_ = r.int64(0, 0);
        node_id_pub_.store(node_id_);
        conn_.exec(("LISTEN ax_node_" + std::to_string(node_id_)).c_str());
    }

    void collect_batch_ids(detail::BinaryArray& ids) {
        ids.clear();
        for (auto& b : batches_)
            if (b.in_use && !b.stale)
                ids.add_int64(b.db_id);
    }

    // One queued statement of the current round trip, and what its result means.
    enum class Step : std::uint8_t {
        ack,
        fail,
        release,
        close,
        begin,
        set_local,
        renew,
        claim,
        commit,
        maintain,
        sync
    };

    /// One round trip: acknowledgements (their own transaction, durable commit), then claim and
    /// lease renewal (one transaction with asynchronous commit: a claim lost in a crash is
    /// claimable again), then maintenance when due. Returns false when the node is done.
    bool cycle() {
        PGconn* c = conn_.get();
        process_notifications();
        collect_done();
        const auto now = Clock::now();
        if (now >= next_poll_) {
            // Polling fallback: delayed tasks and retries come due without a notification.
            next_poll_ = now + opt_.poll_interval;
            claim_now_ = true;
            empty_ = {false, false, false};
        }
        const bool stopping = stopping_.load();
        if (stopping && !handed_back_)
            hand_back_unstarted();

        steps_.clear();
        // -- acknowledgements
        const bool acks = !ack_ids_.empty() || !fail_ids_.empty() || !release_ids_.empty() ||
                          !close_batches_.empty();
        if (acks) {
            const std::string& node = node_text();
            if (ack_ids_.size() > 0)
                send_prepared("ax_ack", {node.c_str(), nullptr}, ack_ids_, Step::ack);
            if (fail_ids_.size() > 0) {
                const char* v[5] = {node.c_str(), fail_ids_.data(), fail_errors_.data(),
                                    fail_perm_.data(), fail_delay_.data()};
                int l[5] = {0, fail_ids_.length(), fail_errors_.length(), fail_perm_.length(),
                            fail_delay_.length()};
                int f[5] = {0, 1, 1, 1, 1};
                send(PQsendQueryPrepared(c, "ax_fail", 5, v, l, f, 0), Step::fail);
            }
            if (release_ids_.size() > 0)
                send_prepared("ax_release", {node.c_str(), nullptr}, release_ids_, Step::release);
            for (const auto& cb : close_batches_) {
                const std::string b = std::to_string(batches_[cb].db_id),
                                  n = std::to_string(batches_[cb].size),
                                  x = std::to_string(batches_[cb].xor_ids);
                const char* v[4] = {node.c_str(), b.c_str(), n.c_str(), x.c_str()};
                send(PQsendQueryPrepared(c, "ax_close", 4, v, nullptr, nullptr, 0), Step::close);
            }
            sync();
        }
        // -- claim and renewal
        const bool renew = now >= next_renew_;
        std::array<std::uint32_t, 3> quota{};
        const bool claim = !stopping && want_claim(now, quota);
        if (renew || claim) {
            send(PQsendQueryParams(c, "BEGIN", 0, nullptr, nullptr, nullptr, nullptr, 0),
                 Step::begin);
            send(PQsendQueryParams(c, "SET LOCAL synchronous_commit TO off", 0, nullptr, nullptr,
                                   nullptr, nullptr, 0),
                 Step::set_local);
            if (renew) {
                collect_batch_ids(renew_ids_);
                const std::string& node = node_text();
                const std::string lease = std::to_string(opt_.lease.count());
                const char* v[3] = {node.c_str(), renew_ids_.data(), lease.c_str()};
                int l[3] = {0, renew_ids_.length(), 0};
                int f[3] = {0, 1, 0};
                send(PQsendQueryPrepared(c, "ax_renew", 3, v, l, f, 0), Step::renew);
            }
            if (claim) {
                const auto node = detail::BinaryInt::int8(node_id_);
                const auto q0 = detail::BinaryInt::int8(quota[0]),
                           q1 = detail::BinaryInt::int8(quota[1]),
                           q2 = detail::BinaryInt::int8(quota[2]),
                           lease = detail::BinaryInt::int8(opt_.lease.count());
                const char* v[7] = {
                    node.bytes, kinds_param_.data(), tags_param_.data(), q0.bytes, q1.bytes,
                    q2.bytes,   lease.bytes};
                int l[7] = {8, kinds_param_.length(), tags_param_.length(), 8, 8, 8, 8};
                int f[7] = {1, 1, 1, 1, 1, 1, 1};
                send(PQsendQueryPrepared(c, "ax_claim", 7, v, l, f, 1), Step::claim);
                asked_ = quota;
            }
            send(PQsendQueryParams(c, "COMMIT", 0, nullptr, nullptr, nullptr, nullptr, 0),
                 Step::commit);
            sync();
        }
        // -- maintenance
        const bool maintain = !stopping && now >= next_maintain_;
        if (maintain) {
            const std::string ms = std::to_string(opt_.history_retention.count()),
                              lim = std::to_string(opt_.prune_batch);
            const char* v[2] = {ms.c_str(), lim.c_str()};
            send(PQsendQueryPrepared(c, "ax_maintain", 2, v, nullptr, nullptr, 0), Step::maintain);
            sync();
            next_maintain_ = now + opt_.maintenance_interval;
        }

        if (!steps_.empty()) {
            if (PQflush(c) != 0)
                throw ConnectionError("ax::pg: send failed: " + conn_.error_message());
            read_results(renew, claim);
            if (renew)
                next_renew_ = now + opt_.lease / 3;
        }

        if (stopping) {
            if (depth_.load() == 0 && pending_done() == 0 && !acks_pending() && all_closed())
                return false;
            if (stop_deadline_passed())
                return false;
        }
        if (need_register_) {
            need_register_ = false;
            PQexitPipelineMode(c);
            register_node();
            PQenterPipelineMode(c);
        }
        // Sleep unless another round trip is worth it right away: a full claim with room left
        // (a backlog), or a full set of results to acknowledge.
        const bool backlog = claim && last_claim_full_ && depth_.load() < target_;
        if (!backlog && pending_done() < opt_.ack_batch)
            wait_for_work();
        return true;
    }

    const std::string& node_text() {
        if (node_text_id_ != node_id_) {
            node_text_ = std::to_string(node_id_);
            node_text_id_ = node_id_;
        }
        return node_text_;
    }

    void send(int ok, Step step) {
        if (ok != 1)
            throw ConnectionError("ax::pg: send failed: " + conn_.error_message());
        steps_.push_back(step);
    }
    void send_prepared(const char* name, std::array<const char*, 2> node_and_null,
                       detail::BinaryArray& ids, Step step) {
        const char* v[2] = {node_and_null[0], ids.data()};
        int l[2] = {0, ids.length()};
        int f[2] = {0, 1};
        send(PQsendQueryPrepared(conn_.get(), name, 2, v, l, f, 0), step);
    }
    void sync() {
        if (PQpipelineSync(conn_.get()) != 1)
            throw ConnectionError("ax::pg: pipeline sync failed: " + conn_.error_message());
        steps_.push_back(Step::sync);
    }

    bool acks_pending() const noexcept {
        return ack_ids_.size() + fail_ids_.size() + release_ids_.size() + close_batches_.size() > 0;
    }
    std::size_t pending_done() {
        std::lock_guard lock(done_mutex_);
        return done_.size();
    }
    bool all_closed() const noexcept {
        for (auto& b : batches_)
            if (b.in_use && !b.stale)
                return false;
        return true;
    }

    /// Whether to claim now, and how many per lane.
    bool want_claim(Clock::time_point now, std::array<std::uint32_t, 3>& quota) {
        const std::uint32_t depth = depth_.load();
        // Slots whose results go out in this round trip's acknowledgement count as free: they
        // are freed before the claim's rows are taken (and the claim is not taken if that
        // acknowledgement fails), so a claim is sized by what the node will have room for.
        const std::uint32_t free_slots =
            static_cast<std::uint32_t>(free_.size() + acked_slots_.size());
        if (free_slots == 0 || depth >= target_ || (!claim_now_ && depth > low_watermark_))
            return false;
        std::uint32_t batch = pid_.next(target_, depth, opt_.max_batch);
        batch =
            std::min({batch, free_slots, opt_.max_batch, target_ > depth ? target_ - depth : 1u});
        quota = splitter_.split(batch, weights_, empty_, overdue_);
        std::uint32_t total = 0;
        for (std::size_t p = 0; p < 3; ++p) {
            buckets_[p].refill(now);
            quota[p] = buckets_[p].allow(quota[p]);
            total += quota[p];
        }
        // Never ask for more than the free slots: probes of empty lanes go first, then the
        // lightest lanes' surplus.
        for (std::size_t p = 0; p < 3 && total > free_slots; ++p)
            if (empty_[p] && quota[p] > 0) {
                quota[p] -= 1;
                total -= 1;
            }
        for (std::size_t p = 3; total > free_slots && p-- > 0;) {
            const std::uint32_t cut = std::min(quota[p], total - free_slots);
            quota[p] -= cut;
            total -= cut;
        }
        return total > 0;
    }

    void read_results(bool renewing, bool claiming) {
        PGconn* c = conn_.get();
        bool ack_ok = true, claim_ok = true;
        detail::Result claim_rows;
        std::size_t segment_start = 0;
        for (std::size_t i = 0; i < steps_.size(); ++i) {
            const Step step = steps_[i];
            detail::Result r(PQgetResult(c));
            if (r.get() == nullptr)
                throw ConnectionError("ax::pg: connection lost: " + conn_.error_message());
            const ExecStatusType st = r.status();
            if (step == Step::sync) {
                if (st != PGRES_PIPELINE_SYNC)
                    throw ConnectionError("ax::pg: pipeline out of step: " + conn_.error_message());
                segment_start = i + 1;
                continue;
            }
            const bool good = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK;
            if (!good) {
                std::string msg = PQresultErrorMessage(r.get());
                if (!conn_.ok())
                    throw ConnectionError("ax::pg: connection lost: " + msg);
                if (st != PGRES_PIPELINE_ABORTED)
                    event("statement failed: " + msg);
                if (step == Step::ack || step == Step::fail || step == Step::release ||
                    step == Step::close)
                    ack_ok = false;
                else if (step != Step::maintain)
                    claim_ok = false;
            } else {
                switch (step) {
                case Step::renew:
                    if (!r.boolean(0, 0))
                        need_register_ = true;
                    break;
                case Step::claim:
                    claim_rows = std::move(r);
                    break;
                case Step::close: {
                    const auto n = r.int64(0, 0);
                    if (n > 0) {
                        mismatches_.fetch_add(1);
                        event("checksum mismatch on close: " + std::to_string(n) +
                              " task(s) put back");
                    }
                    break;
                }
                case Step::maintain:
                    on_maintain(r);
                    break;
                default:
                    break;
                }
            }
            // Each query's results end with a null.
            detail::Result end(PQgetResult(c));
            (void)end;
        }
        (void)segment_start;
        (void)renewing;
        if (ack_ok)
            acks_confirmed();
        // A claim is taken only with its acknowledgement confirmed (it counted on those slots);
        // otherwise its rows stay claimed in the database until their lease expires.
        if (claiming && claim_ok && ack_ok && claim_rows.get() != nullptr)
            take_claim(std::move(claim_rows));
        else if (claiming)
            last_claim_full_ = false;
        if (!ack_ok)
            throw Error("ax::pg: acknowledgement failed; retrying on a fresh connection");
    }

    void on_maintain(detail::Result& r) {
        if (!r.boolean(0, 0))
            return;
        const std::string_view batches = r.text(0, 1);
        const auto requeued = r.int64(0, 3), dead = r.int64(0, 4);
        if (batches.size() > 2) {
            std::size_t n =
                1 + static_cast<std::size_t>(std::count(batches.begin(), batches.end(), ','));
            reclaimed_batches_.fetch_add(n);
            reclaimed_tasks_.fetch_add(static_cast<std::uint64_t>(requeued + dead));
            event("reclaimed expired batch(es) " + std::string(batches) + " of node(s) " +
                  std::string(r.text(0, 2)) + ": " + std::to_string(requeued) +
                  " task(s) back to pending, " + std::to_string(dead) + " dead-lettered");
        }
    }

    /// The acknowledgement transaction committed: free the slots and finished batches.
    void acks_confirmed() {
        for (std::uint32_t idx : acked_slots_) {
            Slot& s = slots_[idx];
            Batch& b = batches_[s.batch];
            b.confirmed += 1;
            const std::uint64_t gen = s.word.load() >> 8;
            s.word.store(word(gen + 1, free_phase));
            s.cancel.store(false);
            free_.push_back(idx);
        }
        acked_slots_.clear();
        for (std::uint32_t bi : close_batches_)
            release_batch(bi);
        close_batches_.clear();
        // Batches the database forgot (stale) are freed locally once all their tasks are done.
        for (std::uint32_t bi = 0; bi < batches_.size(); ++bi) {
            Batch& b = batches_[bi];
            if (b.in_use && b.stale && b.confirmed == b.size)
                release_batch(bi);
        }
        ack_ids_.clear();
        fail_ids_.clear();
        fail_errors_.clear();
        fail_perm_.clear();
        fail_delay_.clear();
        release_ids_.clear();
    }

    void release_batch(std::uint32_t bi) {
        Batch& b = batches_[bi];
        if (b.result != nullptr)
            PQclear(b.result);
        b = Batch{};
        free_batches_.push_back(bi);
    }

    /// Moves finished slots into the acknowledgement arrays.
    void collect_done() {
        {
            std::lock_guard lock(done_mutex_);
            done_local_.swap(done_);
        }
        for (std::uint32_t idx : done_local_) {
            Slot& s = slots_[idx];
            switch (s.outcome) {
            case ok:
                ack_ids_.add_int64(s.id);
                succeeded_.fetch_add(1, std::memory_order_relaxed);
                break;
            case cancelled_outcome:
                ack_ids_.add_int64(s.id); // the database turns it into cancelled
                cancelled_.fetch_add(1, std::memory_order_relaxed);
                break;
            case failed:
            case permanent: {
                fail_ids_.add_int64(s.id);
                fail_errors_.add_bytes(s.error);
                fail_perm_.add_bool(s.outcome == permanent);
                const auto d = retry_delay(opt_.scheduler.retry_base_delay,
                                           opt_.scheduler.retry_jitter, s.attempt + 1, unit_(rng_));
                fail_delay_.add_int64(
                    std::chrono::duration_cast<std::chrono::milliseconds>(d).count());
                failed_.fetch_add(1, std::memory_order_relaxed);
                break;
            }
            }
            account(idx);
        }
        done_local_.clear();
    }

    /// Counts a slot into its batch; a fully accounted batch is closed in the same round trip.
    void account(std::uint32_t idx) {
        Slot& s = slots_[idx];
        Batch& b = batches_[s.batch];
        acked_slots_.push_back(idx);
        b.accounted += 1;
        b.xor_ids ^= s.id;
        if (b.accounted == b.size && !b.stale)
            close_batches_.push_back(s.batch);
    }

    /// stop(): every slot still queued locally goes back to the database at once.
    void hand_back_unstarted() {
        handed_back_ = true;
        std::lock_guard lock(local_mutex_);
        for (std::uint32_t i = 0; i < capacity_; ++i) {
            Slot& s = slots_[i];
            std::uint64_t w = s.word.load();
            if ((w & 0xff) != queued)
                continue;
            if (!s.word.compare_exchange_strong(w, word(w >> 8, handed_back)))
                continue;
            release_ids_.add_int64(s.id);
            released_.fetch_add(1, std::memory_order_relaxed);
            depth_.fetch_sub(1);
            account(i);
        }
    }

    void take_claim(detail::Result rows) {
        claims_.fetch_add(1, std::memory_order_relaxed);
        const int n = rows.rows();
        std::array<std::uint32_t, 3> got{};
        std::array<std::int64_t, 3> max_wait{};
        if (n == 0) {
            empty_ = {got[0] < asked_[0], got[1] < asked_[1], got[2] < asked_[2]};
            last_claim_full_ = false;
            claim_now_ = false;
            pid_.reset();
            return;
        }
        batches_claimed_.fetch_add(1, std::memory_order_relaxed);
        std::uint32_t bi;
        if (!free_batches_.empty()) {
            bi = free_batches_.back();
            free_batches_.pop_back();
        } else {
            bi = static_cast<std::uint32_t>(batches_.size());
            batches_.emplace_back();
        }
        PGresult* res = rows.release();
        Batch& b = batches_[bi];
        b.in_use = true;
        b.result = res;
        b.size = static_cast<std::uint32_t>(n);
        b.db_id = detail::be64(PQgetvalue(res, 0, 1));
        last_batch_.store(b.size, std::memory_order_relaxed);
        std::lock_guard lock(local_mutex_);
        for (int i = 0; i < n; ++i) {
            const std::uint32_t idx = free_.back();
            free_.pop_back();
            Slot& s = slots_[idx];
            s.id = detail::be64(PQgetvalue(res, i, 0));
            s.batch = bi;
            s.kind = static_cast<std::uint32_t>(detail::be32(PQgetvalue(res, i, 2)) - 1);
            const auto p = static_cast<std::size_t>(detail::be16(PQgetvalue(res, i, 3)));
            s.priority = static_cast<Priority>(p);
            s.attempt = static_cast<std::uint32_t>(detail::be32(PQgetvalue(res, i, 4)));
            const auto timeout_ms = detail::be32(PQgetvalue(res, i, 5));
            s.cancel.store(*PQgetvalue(res, i, 6) != 0);
            max_wait[p] = std::max(max_wait[p], detail::be64(PQgetvalue(res, i, 7)));
            s.payload = std::string_view(PQgetvalue(res, i, 8),
                                         static_cast<std::size_t>(PQgetlength(res, i, 8)));
            s.outcome = ok;
            got[p] += 1;
            const std::uint64_t gen = s.word.load() >> 8;
            s.word.store(word(gen, queued));
            depth_.fetch_add(1);
            SubmitOptions so;
            so.priority = s.priority;
            so.timeout = std::chrono::milliseconds(timeout_ms);
            so.max_retries = 0; // retries happen in the database, on any node
            auto r =
                sched_->post([this, idx, gen](TaskContext& ctx) { run_slot(idx, gen, ctx); }, so);
            if (r) {
                s.local = r.value();
            } else {
                // Refused locally (should not happen: the queue is sized for the buffer): hand
                // it straight back.
                std::uint64_t w = word(gen, queued);
                if (s.word.compare_exchange_strong(w, word(gen, handed_back))) {
                    release_ids_.add_int64(s.id);
                    released_.fetch_add(1, std::memory_order_relaxed);
                    depth_.fetch_sub(1);
                    account(idx);
                }
            }
        }
        std::uint32_t asked_total = 0;
        for (std::size_t p = 0; p < 3; ++p) {
            claimed_[p].fetch_add(got[p], std::memory_order_relaxed);
            buckets_[p].take(got[p]);
            empty_[p] = got[p] < asked_[p];
            overdue_[p] = max_wait[p] > max_wait_ms_;
            asked_total += asked_[p];
        }
        last_claim_full_ = static_cast<std::uint32_t>(n) >= asked_total;
        claim_now_ = last_claim_full_;
    }

    void process_notifications() {
        PGconn* c = conn_.get();
        if (PQconsumeInput(c) != 1)
            throw ConnectionError("ax::pg: connection lost: " + conn_.error_message());
        while (PGnotify* n = PQnotifies(c)) {
            const std::string_view channel(n->relname);
            if (channel == "ax_wake") {
                claim_now_ = true;
                empty_ = {false, false, false};
            } else {
                std::int64_t id = 0;
                const char* e = n->extra + std::strlen(n->extra);
                if (std::from_chars(n->extra, e, id).ec == std::errc())
                    cancel_local(id);
            }
            PQfreemem(n);
        }
    }

    /// A cross-node cancel: stop the local task (its stop token) or keep it from starting.
    void cancel_local(std::int64_t id) {
        std::lock_guard lock(local_mutex_);
        for (std::uint32_t i = 0; i < capacity_; ++i) {
            Slot& s = slots_[i];
            const std::uint64_t w = s.word.load();
            const auto phase = w & 0xff;
            if (s.id != id || (phase != queued && phase != running_phase))
                continue;
            s.cancel.store(true);
            if ((s.word.load() & 0xff) == running_phase)
                sched_->cancel(s.local);
            event("cancel requested for task " + std::to_string(id));
            return;
        }
    }

    void wait_for_work() {
        auto now = Clock::now();
        auto until = std::min(next_renew_, now + opt_.poll_interval);
        if (!stopping_.load())
            until = std::min(until, next_maintain_);
        for (auto& b : buckets_)
            if (b.wait().count() > 0)
                until = std::min(until, now + b.wait());
        if (pending_done() > 0)
            until = std::min(until, now + opt_.ack_delay);
        if (stopping_.load())
            until = std::min(until, now + std::chrono::milliseconds(5));
        until = std::min(until, next_poll_);
        poll_until(until);
    }

    void poll_until(Clock::time_point until) {
        const auto ms =
            std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
        if (ms <= 0)
            return;
        // Refill on demand: a worker wakes us when the local queue runs low or results pile up.
        sleeping_.store(true, std::memory_order_release);
        if (depth_.load() <= low_watermark_ && !empty_all() && free_.size() > 0) {
            sleeping_.store(false);
            claim_now_ = true;
            return;
        }
        pollfd p[2] = {{PQsocket(conn_.get()), POLLIN, 0}, {wake_fd_, POLLIN, 0}};
        ::poll(p, 2, static_cast<int>(ms));
        sleeping_.store(false, std::memory_order_release);
        drain_wake();
        if (depth_.load() <= low_watermark_)
            claim_now_ = claim_now_ || !empty_all();
    }

    bool empty_all() const noexcept {
        return empty_[0] && empty_[1] && empty_[2];
    }

    // ------------------------------------------------------------------ state
    NodeOptions opt_;
    std::string host_;
    std::vector<std::string> kinds_;
    std::vector<Handler> handlers_;
    bool started_ = false;
    std::atomic<bool> stopped_{false};
    std::atomic<bool> stopping_{false};
    std::atomic<bool> driver_done_{false};

    std::uint32_t capacity_ = 0, target_ = 0, low_watermark_ = 0;
    std::array<std::uint32_t, 3> weights_{3, 2, 1};
    std::int64_t max_wait_ms_ = 5000;
    std::unique_ptr<Slot[]> slots_;
    std::vector<std::uint32_t> free_;         // driver only
    std::vector<Batch> batches_;              // driver only (workers read slots only)
    std::vector<std::uint32_t> free_batches_; // driver only
    std::mutex done_mutex_;                   // guards done_
    std::vector<std::uint32_t> done_;
    std::vector<std::uint32_t> done_local_; // driver only
    std::mutex local_mutex_;                // guards Slot::local while slots are (re)filled
    std::atomic<std::uint32_t> depth_{0};
    std::atomic<bool> sleeping_{false};
    int wake_fd_ = -1;

    // Driver-only state.
    detail::Connection conn_;
    std::int64_t node_id_ = 0;
    std::string node_text_;
    std::int64_t node_text_id_ = -1;
    std::vector<Step> steps_;
    detail::BinaryArray kinds_param_{detail::BinaryArray::text_oid};
    detail::BinaryArray tags_param_{detail::BinaryArray::text_oid};
    detail::BinaryArray ack_ids_{detail::BinaryArray::int8_oid};
    detail::BinaryArray fail_ids_{detail::BinaryArray::int8_oid};
    detail::BinaryArray fail_errors_{detail::BinaryArray::text_oid};
    detail::BinaryArray fail_perm_{detail::BinaryArray::bool_oid};
    detail::BinaryArray fail_delay_{detail::BinaryArray::int8_oid};
    detail::BinaryArray release_ids_{detail::BinaryArray::int8_oid};
    detail::BinaryArray renew_ids_{detail::BinaryArray::int8_oid};
    std::vector<std::uint32_t> acked_slots_;
    std::vector<std::uint32_t> close_batches_;
    detail::BatchPid pid_;
    detail::LaneSplitter splitter_;
    std::array<detail::TokenBucket, 3> buckets_{};
    std::array<std::uint32_t, 3> asked_{};
    std::array<bool, 3> empty_{false, false, false};
    std::array<bool, 3> overdue_{false, false, false};
    bool claim_now_ = true;
    bool last_claim_full_ = false;
    bool need_register_ = false;
    bool handed_back_ = false;
    Clock::time_point next_renew_{}, next_maintain_{}, next_poll_{}, stop_deadline_{};
    std::mt19937_64 rng_{std::random_device{}()};
    std::uniform_real_distribution<double> unit_{0.0, 1.0};

    std::unique_ptr<Scheduler<>> sched_;
    std::thread driver_;

    std::atomic<std::int64_t> node_id_pub_{0};
    std::atomic<std::uint64_t> claims_{0};
    std::atomic<std::uint64_t> batches_claimed_{0};
    std::array<std::atomic<std::uint64_t>, 3> claimed_{};
    std::atomic<std::uint64_t> succeeded_{0}, failed_{0}, cancelled_{0}, released_{0};
    std::atomic<std::uint64_t> reconnects_{0}, reclaimed_batches_{0}, reclaimed_tasks_{0};
    std::atomic<std::uint64_t> mismatches_{0};
    std::atomic<std::uint32_t> last_batch_{0};
};

} // namespace ax::pg
