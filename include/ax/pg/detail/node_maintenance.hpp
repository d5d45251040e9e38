// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// When the node's periodic work is due, and its own VACUUM passes.
//   - Schedule: lease renewal (every lease / 3), maintenance (every maintenance_interval, and
//     again just after the earliest running lease ends), the polling fallback (poll_interval),
//     and stop()'s deadline (stop_grace). Pure time arithmetic.
//   - Vacuum: `VACUUM (SKIP_LOCKED, TRUNCATE false) ax.tasks` on a connection of its own, sent
//     without waiting and read in later cycles, so no round trip waits for it.
// Driver thread only; they guard nothing.

#include "../sql/node_statements.hpp"
#include "pipeline.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>

namespace ax::pg::detail {

class Schedule {
  public:
    using Clock = std::chrono::steady_clock;

    /// Maintenance scheduled at the earliest lease expiry runs this long after it.
    static constexpr std::int64_t expiry_slack_ms = 5;

    Schedule(std::chrono::milliseconds lease, std::chrono::milliseconds maintenance_interval,
             std::chrono::milliseconds poll_interval, std::chrono::milliseconds stop_grace) noexcept
        : lease_(lease), maintenance_(maintenance_interval), poll_(poll_interval),
          grace_(stop_grace) {}

    /// A link came up: renew a third of a lease from now, maintain at once.
    void connected(Clock::time_point now) noexcept {
        next_renew_ = now + lease_ / 3;
        next_maintain_ = now;
    }
    [[nodiscard]] bool renew_due(Clock::time_point now) const noexcept {
        return now >= next_renew_;
    }
    [[nodiscard]] bool maintain_due(Clock::time_point now) const noexcept {
        return now >= next_maintain_;
    }
    void renew_sent(Clock::time_point now) noexcept { next_renew_ = now + lease_ / 3; }
    void maintain_sent(Clock::time_point now) noexcept { next_maintain_ = now + maintenance_; }
    /// The polling fallback (delayed tasks and retries come due without a notification): true
    /// once per poll_interval.
    bool poll_due(Clock::time_point now) noexcept {
        if (now < next_poll_)
            return false;
        next_poll_ = now + poll_;
        return true;
    }
    /// Run maintenance again just after the earliest running lease ends, when that comes before
    /// the regular interval: a dead node's batches are then reclaimed within moments of their
    /// expiry rather than up to a whole interval later. Live nodes renew at lease / 3, so their
    /// leases are never that close and this adds no round trips while every node is alive; a
    /// few milliseconds of slack make sure the lease has ended on the server's clock too.
    void lease_ends_in(std::int64_t ms, Clock::time_point now) noexcept {
        ms = std::max<std::int64_t>(ms, 0) + expiry_slack_ms;
        next_maintain_ = std::min(next_maintain_, now + std::chrono::milliseconds(ms));
    }
    /// Maintain no later than `at`.
    void maintain_by(Clock::time_point at) noexcept {
        next_maintain_ = std::min(next_maintain_, at);
    }

    /// stop() came: true once stop_grace has passed since the first call.
    bool stop_deadline_passed(Clock::time_point now) noexcept {
        if (stop_deadline_ == Clock::time_point{})
            stop_deadline_ = now + grace_;
        return now >= stop_deadline_;
    }

    [[nodiscard]] Clock::time_point next_renew() const noexcept { return next_renew_; }
    [[nodiscard]] Clock::time_point next_maintain() const noexcept { return next_maintain_; }
    [[nodiscard]] Clock::time_point next_poll() const noexcept { return next_poll_; }

  private:
    std::chrono::milliseconds lease_, maintenance_, poll_, grace_;
    Clock::time_point next_renew_{}, next_maintain_{}, next_poll_{}, stop_deadline_{};
};

class Vacuum {
  public:
    using Clock = std::chrono::steady_clock;

    /// Shortest time between the starts of two of this node's passes.
    static constexpr std::chrono::milliseconds min_period{500};

    /// Sends a pass (opening the connection on first use); "" or why it could not start.
    std::string start(const std::string& conninfo) {
        try {
            if (!p_.ok())
                p_ = Pipeline(Connection::open(conninfo));
            p_.send_simple(sql::vacuum_tasks_sql);
            running_ = true;
            started_ = Clock::now();
            return {};
        } catch (const std::exception& e) {
            p_.close();
            return e.what();
        }
    }
    [[nodiscard]] bool running() const noexcept { return running_; }

    enum class Poll : std::uint8_t { idle, running, done, lost };
    /// Reads the pass's outcome if it came; `error` gets a failed pass's message (Poll::done
    /// still) or a lost connection's.
    Poll poll(std::string& error) {
        if (!running_)
            return Poll::idle;
        if (!p_.consume()) {
            error = p_.error_message();
            p_.close();
            running_ = false;
            return Poll::lost;
        }
        while (!p_.busy()) {
            Result r = p_.next();
            if (r.get() == nullptr) {
                running_ = false;
                return Poll::done;
            }
            if (r.status() != PGRES_COMMAND_OK)
                error = result_error(r);
        }
        return Poll::running;
    }
    /// When the last pass started.
    [[nodiscard]] Clock::time_point started() const noexcept { return started_; }
    void close() noexcept { p_.close(); }

  private:
    Pipeline p_;
    bool running_ = false;
    Clock::time_point started_{};
};

} // namespace ax::pg::detail
