// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// The node's schedule firing (NodeOptions::fire_schedules): a thread of its own with a connection
// of its own, apart from the driver's round trips, so no claim or acknowledgement waits for it
// and it waits for no lock holder. It sleeps until the earliest next tick (asked of the
// database), a change announced on ax_schedules, NodeOptions::schedule_poll, or stop(); then
// fires every due schedule it can lock, a batch per transaction (sql/schedules.hpp says why
// each tick is enqueued exactly once). Every node runs one; they share the due schedules by
// SKIP LOCKED. Guards: the caches, the connection and the counters' writes are this thread's;
// stop() only sets the flag and writes the eventfd.

#include "../../detail/cron.hpp"
#include "../connection.hpp"
#include "../sql/schedules.hpp"
#include "wire.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <map>
#include <optional>
#include <poll.h>
#include <string>
#include <string_view>
#include <sys/eventfd.h>
#include <thread>
#include <unistd.h>

namespace ax::pg::detail {

class Ticker {
  public:
    /// Due schedules locked and fired per transaction.
    static constexpr int batch = 256;
    /// On-time ticks enqueued per schedule per firing (a seconds schedule after a long grace).
    static constexpr std::size_t max_ticks = 1000;
    /// A due schedule another node holds is looked at again this soon.
    static constexpr std::chrono::milliseconds busy_retry{200};

    Ticker(std::string conninfo, std::chrono::milliseconds max_sleep)
        : conninfo_(std::move(conninfo)), max_sleep_(max_sleep) {}
    Ticker(const Ticker&) = delete;
    Ticker& operator=(const Ticker&) = delete;
    ~Ticker() { stop(); }

    void start() {
        stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        thread_ = std::thread([this] { run(); });
    }

    void stop() noexcept {
        if (!thread_.joinable())
            return;
        stopping_.store(true);
        const std::uint64_t one = 1;
        [[maybe_unused]] const auto w = write(stop_fd_, &one, sizeof one);
        thread_.join();
        close(stop_fd_);
        stop_fd_ = -1;
    }

    /// Tasks this node enqueued for schedule ticks.
    [[nodiscard]] std::uint64_t enqueued() const noexcept { return enqueued_.load(); }
    /// Firing passes that failed (connection lost, statement error); retried with back-off.
    [[nodiscard]] std::uint64_t errors() const noexcept { return errors_.load(); }

  private:
    void run() {
        std::chrono::milliseconds backoff{100};
        while (!stopping_.load()) {
            std::chrono::milliseconds sleep = max_sleep_;
            try {
                if (!conn_.ok()) {
                    conn_ = Connection::open(conninfo_);
                    conn_.exec("LISTEN ax_schedules");
                }
                while (!stopping_.load() && fire_once() == (one_by_one_ ? 1 : batch)) {
                }
                Result r = conn_.exec(sql::next_schedule_in_sql);
                if (!r.null(0, 0)) {
                    const std::int64_t ms = r.int64(0, 0);
                    sleep =
                        ms <= 0 ? busy_retry : std::min(max_sleep_, std::chrono::milliseconds(ms));
                }
                backoff = std::chrono::milliseconds(100);
            } catch (const std::exception&) {
                errors_.fetch_add(1);
                conn_.close();
                sleep = backoff;
                backoff = std::min(backoff * 2, std::chrono::milliseconds(5000));
            }
            wait(sleep);
        }
        conn_.close();
    }

    /// Sleeps up to `d`, returning early on a notification or stop().
    void wait(std::chrono::milliseconds d) {
        if (conn_.ok() && drain())
            return;
        pollfd fds[2] = {{stop_fd_, POLLIN, 0},
                         {conn_.ok() ? PQsocket(conn_.get()) : -1, POLLIN, 0}};
        if (::poll(fds, 2, static_cast<int>(d.count())) > 0 && (fds[1].revents & POLLIN) != 0) {
            if (PQconsumeInput(conn_.get()) == 0)
                conn_.close();
            else
                drain();
        }
    }

    /// True if notifications were waiting (all are consumed).
    bool drain() {
        bool any = false;
        while (PGnotify* n = PQnotifies(conn_.get())) {
            PQfreemem(n);
            any = true;
        }
        return any;
    }

    /// One transaction: lock up to `batch` due schedules, enqueue their ticks, move them on.
    /// Returns how many schedules it fired.
    int fire_once() {
        conn_.exec("BEGIN");
        const std::string lim = std::to_string(one_by_one_ ? 1 : batch);
        Result due = conn_.exec_params(sql::due_schedules_sql, {lim.c_str()});
        const int n = due.rows();
        if (n == 0) {
            conn_.exec("COMMIT");
            one_by_one_ = false;
            return 0;
        }
        for (BinaryArray* a :
             {&name_, &due_, &next_, &missed_, &error_, &last_, &count_, &task_name_, &task_tick_})
            a->clear();
        for (int i = 0; i < n; ++i) {
            const std::string_view name = due.text(i, 0);
            const std::int64_t tick = due.int64(i, 3), now = due.int64(i, 6);
            const std::int64_t grace_s = std::max<std::int64_t>(1, due.int64(i, 5) / 1000);
            name_.add_bytes(name);
            due_.add_int64(tick);
            try {
                const ax::detail::TickPlan p =
                    ax::detail::plan_ticks(cron(due.text(i, 1)), zone(due.text(i, 2)), tick, now,
                                           grace_s, due.boolean(i, 4), max_ticks);
                if (p.next)
                    next_.add_int64(*p.next);
                else
                    next_.add_null();
                missed_.add_bool(p.missed);
                error_.add_null();
                if (p.ticks.empty())
                    last_.add_null();
                else
                    last_.add_int64(p.ticks.back());
                count_.add_int32(static_cast<std::int32_t>(p.ticks.size()));
                for (const std::int64_t t : p.ticks) {
                    task_name_.add_bytes(name);
                    task_tick_.add_int64(t);
                }
            } catch (const std::invalid_argument& e) {
                // A row written around Client::schedule (by hand, or a zone this machine lacks):
                // park it with the reason rather than retry it every pass.
                next_.add_null();
                missed_.add_bool(false);
                error_.add_bytes(e.what());
                last_.add_null();
                count_.add_int32(0);
            }
        }
        const std::string_view params[] = {name_.bytes(),   due_.bytes(),       next_.bytes(),
                                           missed_.bytes(), error_.bytes(),     last_.bytes(),
                                           count_.bytes(),  task_name_.bytes(), task_tick_.bytes()};
        Result r;
        try {
            r = conn_.exec_binary(sql::fire_schedules_sql, params, Format::text);
        } catch (const Error&) {
            if (!conn_.ok())
                throw;
            // The server refused the batch (a row written around Client::schedule, a trigger):
            // one bad row must not stop the others. Fire one schedule per transaction until none
            // is due; a single one that still fails is parked with the server's reason.
            conn_.exec("ROLLBACK");
            if (!one_by_one_) {
                one_by_one_ = true;
                return 1;
            }
            park(due.text(0, 0), std::current_exception());
            return 1;
        }
        const std::string_view added = r.affected_rows();
        conn_.exec("COMMIT");
        enqueued_.fetch_add(added.empty() ? 0 : std::stoull(std::string(added)));
        return n;
    }

    /// Parks schedule `name` (next_at infinity) with the error `e` carries.
    void park(std::string_view name, const std::exception_ptr& e) {
        std::string why = "refused by the server";
        try {
            std::rethrow_exception(e);
        } catch (const std::exception& x) {
            why = x.what();
        }
        const std::string n(name);
        conn_.exec_params(sql::park_schedule_sql, {n.c_str(), why.c_str()});
        errors_.fetch_add(1);
    }

    const ax::detail::CronExpr& cron(std::string_view text) {
        if (crons_.size() > 10000)
            crons_.clear();
        auto it = crons_.find(std::string(text));
        if (it == crons_.end())
            it = crons_.emplace(std::string(text), ax::detail::parse_cron(text)).first;
        return it->second;
    }

    const ax::detail::TimeZone& zone(std::string_view name) {
        if (zones_.size() > 1000)
            zones_.clear();
        auto it = zones_.find(std::string(name));
        if (it == zones_.end())
            it = zones_.emplace(std::string(name), ax::detail::TimeZone::load(name)).first;
        return it->second;
    }

    std::string conninfo_;
    std::chrono::milliseconds max_sleep_;
    Connection conn_;
    int stop_fd_ = -1;
    std::atomic<bool> stopping_{false};
    std::atomic<std::uint64_t> enqueued_{0}, errors_{0};
    std::thread thread_;
    bool one_by_one_ = false; // a batch was refused: fire one schedule per transaction
    std::map<std::string, ax::detail::CronExpr, std::less<>> crons_;
    std::map<std::string, ax::detail::TimeZone, std::less<>> zones_;
    // the firing statement's parameters, reused across passes
    BinaryArray name_{oid::text}, due_{oid::int8}, next_{oid::int8}, missed_{oid::boolean},
        error_{oid::text}, last_{oid::int8}, count_{oid::int4}, task_name_{oid::text},
        task_tick_{oid::int8};
};

} // namespace ax::pg::detail
