// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// The worker side of the distributed mode: ax::pg::Node claims batches of tasks from
// PostgreSQL and runs them on a local ax::Scheduler. See docs/distributed.md.
//
// This is the public header. It holds the Node class (its public API, the worker-side slot
// transitions, its state) and includes its pieces, filed by role:
//   - node_options.hpp: Job, Handler, NodeOptions, NodeStats (the vocabulary);
//   - detail/lanes.hpp: batch sizing and lane split (BatchPid, LaneSplitter, TokenBucket);
//   - detail/node_driver.hpp: the driver thread's loop, connection, registration, notifications;
//   - detail/node_round_trip.hpp: the pipelined claim / acknowledge / renew / maintain round trip;
//   - detail/node_batches.hpp: slot and batch bookkeeping, maintenance reports, stop's hand-back.
// The three node_*.hpp headers define Node's private member functions (inline, out of line);
// each includes this header first, so any of them compiles on its own.
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
#include "detail/lanes.hpp"
#include "node_options.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
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
        flights_.resize(opt_.connections);
        more_conns_.resize(opt_.connections - 1);
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
        s.empty_claims = empty_claims_.load(std::memory_order_relaxed);
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
        s.vacuums = vacuums_.load(std::memory_order_relaxed);
        s.lease_renewals = lease_renewals_.load(std::memory_order_relaxed);
        s.round_trips = round_trips_.load(std::memory_order_relaxed);
        s.last_batch = last_batch_.load(std::memory_order_relaxed);
        s.depth = depth_.load(std::memory_order_relaxed);
        return s;
    }

    /// The options in force.
    [[nodiscard]] const NodeOptions& options() const noexcept { return opt_; }

  private:
    using Clock = std::chrono::steady_clock;

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
        std::uint32_t in_flight = 0; // of those, in a round trip not yet read back
        std::int64_t xor_ids = 0;
        bool in_use = false;
        bool stale = false; // the node re-registered: the database forgot this batch
    };

    /// What one link (connection) carries between a round trip's send and its read: the
    /// results it acknowledges (their slots stay held until it is read back), the batches it
    /// closes and the claim it asked for (`promised` slots are kept free for it).
    struct Flight {
        bool busy = false;
        bool claim = false;
        std::uint64_t seq = 0; // send order: the oldest busy flight is read first
        std::uint32_t promised = 0;
        std::array<std::uint32_t, 3> asked{};
        std::uint64_t wake_seq = 0; // Node::wake_seq_ when its claim was sent
        std::vector<Step> steps;
        std::vector<std::uint32_t> acked_slots;
        std::vector<std::uint32_t> close_batches;
        detail::BinaryArray ack_ids{detail::BinaryArray::int8_oid};
        detail::BinaryArray fail_ids{detail::BinaryArray::int8_oid};
        detail::BinaryArray fail_errors{detail::BinaryArray::text_oid};
        detail::BinaryArray fail_perm{detail::BinaryArray::bool_oid};
        detail::BinaryArray fail_delay{detail::BinaryArray::int8_oid};
        detail::BinaryArray release_ids{detail::BinaryArray::int8_oid};

        /// Forgets the results this flight carried (their arrays keep their capacity).
        void clear_results() {
            ack_ids.clear();
            fail_ids.clear();
            fail_errors.clear();
            fail_perm.clear();
            fail_delay.clear();
            release_ids.clear();
        }
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
        if (opt_.connections == 0 || opt_.connections > 16)
            bad("connections", std::to_string(opt_.connections), "must be in 1..16");
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
    // Declared here, defined by role in the headers included at the end of this file.

    // detail/node_driver.hpp: the driver thread's loop, its connection and its sleeps.
    void drive();
    bool stop_deadline_passed();
    void sleep_for(std::chrono::milliseconds d);
    void drain_wake() noexcept;
    void connect();
    /// Renews the node's row if the database still has it, else registers a new one (its old
    /// batches were reclaimed: the local copies become stale).
    void register_node();
    void collect_batch_ids(detail::BinaryArray& ids);
    void process_notifications();
    /// A cross-node cancel: stop the local task (its stop token) or keep it from starting.
    void cancel_local(std::int64_t id);
    void wait_for_work();
    void poll_until(Clock::time_point until);
    /// Sends VACUUM (SKIP_LOCKED) ax.tasks on vacuum_conn_ (opened on first use) without
    /// waiting; poll_vacuum() reads its outcome in later cycles.
    void start_vacuum();
    void poll_vacuum();
    bool empty_all() const noexcept {
        return lanes_.all_empty();
    }
    /// News that every lane may hold work again (NOTIFY ax_wake, the poll, a reconnect): the
    /// lanes forget what they knew, and the next claim is not held back by the empty-claim floor.
    void wake_lanes() noexcept {
        lanes_.wake();
        claim_now_ = true;
        ++wake_seq_;
    }
    /// Until when a claim is held back: after a claim that returned nothing, and with no news
    /// since it was sent, the next one waits out empty_claim_floor (Clock::time_point{} when
    /// nothing holds it back).
    Clock::time_point claim_floor_end() const noexcept {
        if (!last_claim_empty_ || wake_seq_ != claim_wake_seq_)
            return {};
        return empty_claim_at_ + empty_claim_floor;
    }
    /// Some lane is not known empty and its token bucket has a token.
    bool lane_with_work() const noexcept {
        for (std::size_t p = 0; p < 3; ++p)
            if (!lanes_.empty(p) && buckets_[p].wait().count() == 0)
                return true;
        return false;
    }

    // detail/node_round_trip.hpp: the pipelined round trips (acknowledge, claim, renew,
    // maintain), up to NodeOptions::connections of them in flight at once, one per link.
    /// One step of the driver: send a round trip on a free link when one is worth it, read the
    /// oldest one back when no link is free for the next or nothing else was sent, sleep when
    /// none is in flight and nothing is due. Returns false when the node is done.
    bool cycle();
    /// Queues one round trip on link `li`: acknowledgements (their own transaction, durable
    /// commit), then claim and lease renewal (one transaction with asynchronous commit: a claim
    /// lost in a crash is claimable again), then maintenance when due. False if nothing was due.
    bool send_flight(std::size_t li, Clock::time_point now, bool stopping, bool others_busy);
    /// Reads link `li`'s round trip back and applies it (acknowledgements confirmed, the claim
    /// taken). Throws when the link broke or the acknowledgement failed; the flight then stays
    /// busy so that drop_links() puts its results back for the next attempt.
    void read_flight(std::size_t li);
    /// Reads every busy flight, oldest first.
    void drain_flights();
    /// The oldest busy link, or links_.size() when none is busy.
    std::size_t oldest_busy() const noexcept;
    std::size_t busy_links() const noexcept;
    std::uint32_t promised() const noexcept;
    /// A link broke: close every link; the results of every unread round trip go back into
    /// the pending arrays (a claim in flight is left to its lease).
    void drop_links() noexcept;
    const std::string& node_text();
    void send(std::size_t li, int ok, Step step);
    void send_prepared(std::size_t li, const char* name, detail::BinaryArray& ids, Step step);
    void sync(std::size_t li);
    bool acks_pending() const noexcept;
    std::size_t pending_done();
    bool all_closed() const noexcept;
    /// Whether to claim now, and how many per lane.
    bool want_claim(Clock::time_point now, std::array<std::uint32_t, 3>& quota);

    // detail/node_batches.hpp: the slots' and batches' bookkeeping, maintenance and rescue.
    void on_maintain(detail::Result& r);
    /// A round trip's acknowledgement transaction committed: free its slots and the batches it
    /// closed.
    void acks_confirmed(Flight& f);
    void release_batch(std::uint32_t bi);
    /// Moves finished slots into the acknowledgement arrays.
    void collect_done();
    /// Adds a finished or handed-back slot's result to the pending acknowledgement arrays.
    void add_result(std::uint32_t idx);
    /// Counts a slot into its batch; a fully accounted batch is closed in the round trip that
    /// carries its last results.
    void account(std::uint32_t idx);
    /// stop(): every slot still queued locally goes back to the database at once.
    void hand_back_unstarted();
    void take_claim(detail::Result rows, const std::array<std::uint32_t, 3>& asked);

    /// Maintenance scheduled at the earliest lease expiry runs this long after it (on_maintain).
    static constexpr std::int64_t expiry_slack_ms = 5;
    /// Shortest time between the starts of two of this node's VACUUM passes (poll_vacuum).
    static constexpr std::chrono::milliseconds vacuum_min_period{500};
    /// After a claim that returned nothing, the next claim waits at least this long unless news
    /// came meanwhile (NOTIFY ax_wake, the poll, a reconnect: claim_floor_end). The lane rules
    /// (detail::LaneBook) already keep an idle node to one claim per wake-up; this floor is the
    /// defence in depth that bounds an idle node at 1 / 250 ms + 1 / poll_interval claims per
    /// second (6/s with the defaults) whatever state its lanes are left in. It never delays a
    /// wake-up by NOTIFY or the poll, so it costs no latency when work arrives.
    static constexpr std::chrono::milliseconds empty_claim_floor{250};

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
    detail::Connection conn_; // the primary link: registration, LISTEN, the idle sleep
    /// The other links (NodeOptions::connections - 1): claims and acknowledgements only. Link
    /// 0 is conn_, link i > 0 is more_conns_[i - 1]; flights_[i] is what link i carries.
    std::vector<detail::Connection> more_conns_;
    std::vector<Flight> flights_;
    std::uint64_t flight_seq_ = 0;
    std::size_t next_link_ = 0;
    bool last_sent_claim_ = false;
    std::int64_t node_id_ = 0;
    std::string node_text_;
    std::int64_t node_text_id_ = -1;
    detail::BinaryArray kinds_param_{detail::BinaryArray::text_oid};
    detail::BinaryArray tags_param_{detail::BinaryArray::text_oid};
    // Results not yet sent: the next round trip takes them (swapped into its Flight).
    detail::BinaryArray ack_ids_{detail::BinaryArray::int8_oid};
    detail::BinaryArray fail_ids_{detail::BinaryArray::int8_oid};
    detail::BinaryArray fail_errors_{detail::BinaryArray::text_oid};
    detail::BinaryArray fail_perm_{detail::BinaryArray::bool_oid};
    detail::BinaryArray fail_delay_{detail::BinaryArray::int8_oid};
    detail::BinaryArray release_ids_{detail::BinaryArray::int8_oid};
    detail::BinaryArray renew_ids_{detail::BinaryArray::int8_oid};
    std::vector<std::uint32_t> acked_slots_;
    std::vector<std::uint32_t> close_batches_;
    std::vector<std::uint32_t> close_later_; // driver only: scratch of send_flight
    detail::BatchPid pid_;
    detail::LaneBook lanes_;
    std::array<detail::TokenBucket, 3> buckets_{};
    bool claim_now_ = true;
    std::uint64_t wake_seq_ = 1;       // counts wake_lanes() calls
    std::uint64_t claim_wake_seq_ = 0; // wake_seq_ when the last claim was sent
    bool last_claim_empty_ = false;    // the last claim read back returned no task
    Clock::time_point empty_claim_at_{};
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
    std::atomic<std::uint64_t> empty_claims_{0};
    std::array<std::atomic<std::uint64_t>, 3> claimed_{};
    std::atomic<std::uint64_t> succeeded_{0}, failed_{0}, cancelled_{0}, released_{0};
    std::atomic<std::uint64_t> reconnects_{0}, reclaimed_batches_{0}, reclaimed_tasks_{0};
    std::atomic<std::uint64_t> mismatches_{0}, vacuums_{0}, lease_renewals_{0}, round_trips_{0};
    detail::Connection vacuum_conn_; // driver only: the node's own VACUUM passes
    bool vacuum_running_ = false;    // driver only
    std::chrono::steady_clock::time_point vacuum_started_{}; // driver only
    std::atomic<std::uint32_t> last_batch_{0};
};

} // namespace ax::pg

// Node's member functions, by role (each of these includes this header first).
#include "detail/node_batches.hpp"
#include "detail/node_driver.hpp"
#include "detail/node_round_trip.hpp"
