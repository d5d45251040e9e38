// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// The worker side of the distributed mode: ax::pg::Node claims batches of tasks from
// PostgreSQL and runs them on a local ax::Scheduler. See docs/distributed.md.
//
// This is the public header: the Node facade (registration, start, stop, stats) and what its
// workers run. The node is composed of owners, each in its own header under detail/ with its
// data, its lock if any and a comment saying what it guards:
//   - node_options.hpp: Job, Handler, NodeOptions, NodeStats (the vocabulary);
//   - detail/node_slots.hpp: the slot table (workers and driver; done_ and local TaskIds locked);
//   - detail/node_counters.hpp, detail/node_waker.hpp: the counters, the driver's eventfd;
//   - detail/node_driver.hpp: the driver thread, which owns the links (detail/pg_link.hpp behind
//     detail/node_link.hpp), the batch ledger (node_ledger.hpp), the claim planner
//     (node_planner.hpp), the round trips and their flights (node_round_trip.hpp,
//     node_flights.hpp) and the maintenance schedule and vacuum (node_maintenance.hpp);
//   - detail/node_ticker.hpp: recurring schedules' firing (a thread and connection of its own).
// Every SQL statement the node sends is in sql/node_statements.hpp.
//
// Threads: the driver thread claims, acknowledges, renews leases, runs maintenance and reacts
// to notifications; worker threads (the local scheduler's) run handlers and hand finished slots
// to the driver through the slot table, waking it only when it sleeps and something is worth a
// round trip.

#include "../detail/error_text.hpp"
#include "../scheduler.hpp"
#include "connection.hpp"
#include "detail/node_counters.hpp"
#include "detail/node_driver.hpp"
#include "detail/node_slots.hpp"
#include "detail/node_ticker.hpp"
#include "detail/node_waker.hpp"
#include "node_options.hpp"
#include "types.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <typeinfo>
#include <unistd.h>
#include <utility>
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
        char host[256] = {};
        gethostname(host, sizeof host - 1);
        host_ = host;
        if (opt_.name.empty())
            opt_.name = host_ + ":" + std::to_string(getpid());
    }
    Node(const Node&) = delete;
    Node& operator=(const Node&) = delete;
    /// Stops (gracefully) if still running.
    ~Node() { stop(); }

    /// Registers the handler for `kind` (before start()). The node claims only registered kinds.
    void handle(std::string kind, Handler handler) {
        if (started_)
            throw std::logic_error("ax::pg::Node::handle: register handlers before start()");
        if (!valid_kind(kind))
            throw std::invalid_argument("ax::pg::Node::handle: kind " + std::string(kind_rule));
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
            // Fail fast on a database that is not ready for us; the driver keeps its own links.
            detail::Connection c = detail::Connection::open(opt_.conninfo);
            detail::require_schema(c);
        }
        started_ = true;
        Config cfg = opt_.scheduler;
        const auto capacity = static_cast<std::uint32_t>(std::min<std::uint64_t>(
            std::uint64_t{cfg.max_workers} * opt_.tasks_per_worker, 1u << 20));
        cfg.queue_capacity = std::max<std::uint32_t>(cfg.queue_capacity, capacity + 16);
        cfg.soft_limit_ratio = 1.0;
        const std::uint32_t target =
            opt_.target_depth != 0 ? std::min(opt_.target_depth, capacity) : capacity;
        slots_.init(capacity, opt_.ack_batch, std::max(1u, target / 2));
        waker_.open();
        Hooks hooks;
        hooks.on_dead_letter = [this](const TaskEvent& e) { on_local_dead_letter(e); };
        sched_ = std::make_unique<Scheduler<>>(cfg, std::move(hooks));
        detail::Driver::Workers workers;
        workers.post = [this](std::uint32_t idx, std::uint64_t gen, std::chrono::milliseconds t) {
            return post(idx, gen, t);
        };
        workers.cancel = [this](TaskId id) { sched_->cancel(id); };
        driver_ = std::make_unique<detail::Driver>(opt_, host_, kinds_, slots_, counters_, waker_,
                                                   stopping_, std::move(workers));
        thread_ = std::thread([this] { driver_->run(); });
        if (opt_.fire_schedules) {
            ticker_ = std::make_unique<detail::Ticker>(opt_.conninfo, opt_.schedule_poll);
            ticker_->start();
        }
    }

    /// Graceful stop: claims nothing more, hands claimed tasks that have not started back at
    /// once (attempt not counted), waits up to stop_grace for running handlers, acknowledges
    /// everything, closes its batches and leaves. Tasks still running after the grace are left to
    /// their lease. Idempotent.
    void stop() {
        if (!started_ || stopped_.exchange(true))
            return;
        if (ticker_)
            ticker_->stop(); // no tick enqueued after stop()
        stopping_.store(true);
        waker_.wake();
        if (thread_.joinable())
            thread_.join();
        sched_.reset();
        waker_.close();
    }

    /// True until stop() (or a fatal error) ended the driver.
    [[nodiscard]] bool running() const noexcept { return started_ && !driver_->done(); }

    /// Counters.
    [[nodiscard]] NodeStats stats() const noexcept {
        NodeStats s = counters_.snapshot(slots_.depth());
        if (ticker_) {
            s.schedule_tasks = ticker_->enqueued();
            s.schedule_errors = ticker_->errors();
        }
        return s;
    }

    /// The options in force.
    [[nodiscard]] const NodeOptions& options() const noexcept { return opt_; }

  private:
    /// Posts a claimed slot to the local scheduler (the driver, under the slots' local lock).
    bool post(std::uint32_t idx, std::uint64_t gen, std::chrono::milliseconds timeout) {
        SubmitOptions so;
        so.priority = slots_[idx].priority;
        so.timeout = timeout;
        so.max_retries = 0; // retries happen in the database, on any node
        auto r = sched_->post([this, idx, gen](TaskContext& ctx) { run_slot(idx, gen, ctx); }, so);
        if (!r)
            return false;
        slots_[idx].local = r.value();
        return true;
    }

    /// A worker runs slot `idx`'s handler.
    void run_slot(std::uint32_t idx, std::uint64_t gen, TaskContext& ctx) {
        if (!slots_.start(idx, gen))
            return; // handed back by stop() before it started
        detail::Slot& s = slots_[idx];
        if (s.cancel.load()) {
            s.outcome = detail::cancelled_outcome;
        } else {
            Job job(s.id, kinds_[s.kind], s.payload, s.attempt, s.priority, ctx, &s.out,
                    opt_.max_result_bytes);
            try {
                handlers_[s.kind](job);
                s.outcome = s.cancel.load()        ? detail::cancelled_outcome
                            : s.out.snooze_ms >= 0 ? detail::snoozed_outcome
                                                   : detail::ok;
            } catch (const PermanentError& e) {
                s.outcome = detail::permanent;
                s.error = std::string("ax::PermanentError: ") + e.what();
            } catch (const std::exception& e) {
                s.outcome = s.cancel.load() ? detail::cancelled_outcome : detail::failed;
                s.error = ax::detail::type_name(typeid(e).name()) + ": " + e.what();
            } catch (...) {
                s.outcome = s.cancel.load() ? detail::cancelled_outcome : detail::failed;
                s.error = "unknown exception (not derived from std::exception)";
            }
        }
        finish(idx, gen, detail::running_phase);
    }

    /// Publishes a slot's ending to the driver, waking it when that is worth a round trip.
    void finish(std::uint32_t idx, std::uint64_t gen, detail::Phase from) {
        if (slots_.finish(idx, gen, from))
            waker_.wake_if_sleeping();
    }

    /// The watchdog timed out an attempt whose body did not return in time: report the failure
    /// now (the body's own ending, if it ever comes, loses the CAS).
    void on_local_dead_letter(const TaskEvent& e) {
        auto lock = slots_.lock_local();
        for (std::uint32_t i = 0; i < slots_.capacity(); ++i) {
            detail::Slot& s = slots_[i];
            const std::uint64_t w = s.word.load();
            if ((w & 0xff) == detail::running_phase && s.local == e.id) {
                s.outcome = s.cancel.load() ? detail::cancelled_outcome : detail::failed;
                s.error = "ax::TaskTimedOut: " + std::string(e.error);
                finish(i, w >> 8, detail::running_phase);
                return;
            }
        }
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
        if (opt_.max_result_bytes > (std::size_t{64} << 20))
            bad("max_result_bytes", std::to_string(opt_.max_result_bytes),
                "must be at most 64 MiB");
        if (opt_.max_snoozes > 1000000)
            bad("max_snoozes", std::to_string(opt_.max_snoozes), "must be at most 1000000");
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
            {"stop_grace", opt_.stop_grace},
            {"schedule_poll", opt_.schedule_poll}};
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
            if (!valid_tag(t))
                bad("tags", "'" + t + "'", std::string(tag_rule).c_str());
    }

    NodeOptions opt_;
    std::string host_;
    std::vector<std::string> kinds_;
    std::vector<Handler> handlers_;
    bool started_ = false;
    std::atomic<bool> stopped_{false};
    std::atomic<bool> stopping_{false};
    detail::SlotTable slots_;   // workers and driver (see its header)
    detail::Counters counters_; // written by the driver, read by stats()
    detail::Waker waker_;       // workers and stop() wake the driver
    std::unique_ptr<Scheduler<>> sched_;
    std::unique_ptr<detail::Driver> driver_;
    std::thread thread_;
    std::unique_ptr<detail::Ticker> ticker_; // fires recurring schedules (its own thread)
};

} // namespace ax::pg
