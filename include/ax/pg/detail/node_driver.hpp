// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// The node's driver thread: its loop connects (with jittered back-off), runs cycle() until the
// node is done, and leaves. Each cycle reads NOTIFY (wake-ups, cross-node cancels), collects
// finished slots into the ledger, sends a round trip on a free link when one is worth it
// (deciding what it carries from the schedule and the claim planner), reads the oldest back, and
// sleeps on the primary link and the waker when nothing is due. It owns the links, the ledger,
// the planner, the round trips, the schedule and the vacuum; the slot table, counters and waker
// are the node's (shared with the workers). Driver thread only, except done() (any thread).

#include "../../retry.hpp"
#include "../node_options.hpp"
#include "node_counters.hpp"
#include "node_ledger.hpp"
#include "node_maintenance.hpp"
#include "node_planner.hpp"
#include "node_round_trip.hpp"
#include "node_slots.hpp"
#include "node_waker.hpp"
#include "pg_link.hpp"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

namespace ax::pg::detail {

class Driver {
  public:
    using Clock = std::chrono::steady_clock;

    /// What the driver needs from the node's local workers.
    struct Workers {
        /// Posts a queued slot (see RoundTrips::Hooks::post).
        std::function<bool(std::uint32_t idx, std::uint64_t gen, std::chrono::milliseconds)> post;
        /// Requests the stop of a running local task.
        std::function<void(TaskId)> cancel;
    };

    Driver(const NodeOptions& opt, std::string host, const std::vector<std::string>& kinds,
           SlotTable& slots, Counters& counters, Waker& waker, const std::atomic<bool>& stopping,
           Workers workers)
        : opt_(opt), host_(std::move(host)), kinds_(kinds), slots_(slots), counters_(counters),
          waker_(waker), stopping_(stopping), workers_(std::move(workers)), ledger_(slots),
          trips_(slots, ledger_, planner_, counters),
          schedule_(opt.lease, opt.maintenance_interval, opt.poll_interval, opt.stop_grace) {
        const Config& cfg = opt.scheduler;
        const std::uint32_t capacity = slots.capacity();
        ClaimPlanner::Settings ps;
        ps.target = opt.target_depth != 0 ? std::min(opt.target_depth, capacity) : capacity;
        ps.low_watermark = std::max(1u, ps.target / 2);
        ps.max_batch = opt.max_batch;
        ps.weights = {cfg.weight_high, cfg.weight_normal, cfg.weight_low};
        ps.max_wait_ms =
            std::chrono::duration_cast<std::chrono::milliseconds>(cfg.max_wait).count();
        ps.rate_per_s = opt.rate_per_s;
        ps.burst = opt.burst;
        planner_.init(ps, Clock::now());
        ledger_.set_retry(cfg.retry_base_delay, cfg.retry_jitter);
        RoundTrips::Settings rs;
        rs.lease_ms = opt.lease.count();
        rs.retention_ms = opt.history_retention.count();
        rs.prune_batch = opt.prune_batch;
        rs.ack_batch = opt.ack_batch;
        rs.max_snoozes = opt.max_snoozes;
        RoundTrips::Hooks hooks;
        hooks.event = [this](const std::string& s) { event(s); };
        hooks.post = workers_.post;
        hooks.maintained = [this](const sql::MaintainReport& m) { on_maintain(m); };
        hooks.paused = [this](const sql::PausedSet* s) { on_paused(s); };
        trips_.init(opt.connections, rs, kinds, opt.tags, std::move(hooks));
        links_.resize(opt.connections);
    }

    /// True once run() returned.
    [[nodiscard]] bool done() const noexcept { return done_.load(); }

    /// The thread's body.
    void run() {
        std::uint32_t failures = 0;
        std::mt19937_64 rng(std::random_device{}());
        // Jittered exponential back-off between connection attempts, capped at reconnect_max,
        // so a restarted server is not met by every node at the same instant.
        const auto back_off = [&] {
            const auto d = std::min<std::chrono::nanoseconds>(
                retry_delay(opt_.reconnect_base, opt_.reconnect_base, failures + 1,
                            std::uniform_real_distribution<double>(0, 1)(rng)),
                opt_.reconnect_max);
            waker_.sleep_for(std::chrono::duration_cast<std::chrono::milliseconds>(d));
        };
        while (true) {
            if (!linked()) {
                if (stopping_.load() && schedule_.stop_deadline_passed(Clock::now()))
                    break;
                try {
                    drop_links();
                    connect();
                    if (failures > 0) {
                        Counters::bump(counters_.reconnects);
                        event("reconnected after " + std::to_string(failures) +
                              " failed attempt(s)");
                    }
                    failures = 0;
                } catch (const std::exception& e) {
                    drop_links();
                    ++failures;
                    if (failures == 1)
                        event(std::string("connection lost, retrying: ") + e.what());
                    back_off();
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
                drop_links();
                ++failures;
                back_off();
            }
        }
        // Leave: the row goes, so status no longer lists this node.
        try {
            if (links_[0].ok() && trips_.node() != 0) {
                links_[0].pipeline().leave();
                sql::leave(links_[0].pipeline().connection(), trips_.node());
            }
        } catch (const std::exception&) {
        }
        drop_links();
        vacuum_.close();
        done_.store(true);
    }

  private:
    // ------------------------------------------------------------------ one cycle
    /// One step: send a round trip on a free link when one is worth it, read the oldest one
    /// back when no link is free for the next or nothing else was sent, sleep when none is in
    /// flight and nothing is due. Returns false when the node is done.
    bool cycle() {
        FlightSet& flights = trips_.flights();
        // Notifications arrive on the primary link; read them while it carries no round trip.
        if (!flights[0].busy)
            process_notifications();
        poll_vacuum();
        collect_done();
        const auto now = Clock::now();
        if (schedule_.poll_due(now))
            planner_.wake_lanes(); // delayed tasks and retries came due without a notification
        const bool stopping = stopping_.load();
        if (stopping && !handed_back_)
            hand_back_unstarted();

        // Send on the next free link, round robin (so the links take turns and each one's
        // backend works while the node reads the other's results).
        const std::size_t n = flights.size();
        // A pause notification's re-read goes on the primary link (where notifications and the
        // renewal's re-read are too, so the reads apply in the order they ran).
        const std::size_t li = pause_wanted_ && !flights[0].busy ? 0 : flights.next_free();
        bool sent = false;
        if (li < n)
            sent = send(li, now, stopping, flights.busy() > 0);
        // Read the oldest round trip back when no link is left for the next one, or when
        // nothing else was worth sending meanwhile.
        const std::size_t busy = flights.busy();
        if (busy > 0 && (busy == n || !sent)) {
            const std::size_t oldest = flights.oldest_busy();
            trips_.read(oldest, links_[oldest], stopping);
        }

        if (stopping) {
            if (flights.busy() == 0 && slots_.depth() == 0 && slots_.pending_done() == 0 &&
                !ledger_.pending() && ledger_.all_closed())
                return false;
            if (schedule_.stop_deadline_passed(Clock::now())) {
                drain();
                return false;
            }
        }
        if (trips_.need_register()) {
            drain();
            trips_.take_need_register();
            Pipeline& p = links_[0].pipeline();
            p.leave();
            register_node();
            p.enter();
        }
        if (flights.busy() > 0)
            return true; // the next cycle reads it (or sends beside it): no sleep
        // Sleep unless another round trip is worth it right away: a full claim with room left
        // (a backlog), or a full set of results to acknowledge.
        const bool backlog = trips_.last_sent_claim() && planner_.last_claim_full() &&
                             slots_.depth() < planner_.settings().target;
        if (!backlog && slots_.pending_done() < opt_.ack_batch && !ledger_.pending())
            wait_for_work();
        return true;
    }

    /// Decides what link `li`'s round trip carries and sends it (RoundTrips::send).
    bool send(std::size_t li, Clock::time_point now, bool stopping, bool others_busy) {
        FlightPlan plan;
        plan.renew = li == 0 && schedule_.renew_due(now);
        plan.maintain = li == 0 && !stopping && schedule_.maintain_due(now);
        // The paused set is read with every renewal (a notification lost with a connection is
        // made up for within lease / 3) and after each pause notification; claims wait for the
        // notification's read, so none is sent with a set known to be stale.
        plan.pauses = li == 0 && (pause_wanted_ || (plan.renew && !pause_in_flight_));
        plan.claim =
            !stopping && claims_allowed() &&
            planner_.plan(now, slots_.depth(), slots_.free_count() + ledger_.pending_slots(),
                          trips_.flights().promised(), plan.quota);
        if (!trips_.send(li, links_[li], plan, others_busy))
            return false;
        if (plan.renew)
            schedule_.renew_sent(now);
        if (plan.maintain)
            schedule_.maintain_sent(now);
        if (plan.pauses) {
            pause_in_flight_ = true;
            pause_wanted_ = false;
        }
        return true;
    }

    // ------------------------------------------------------------------ pause and resume
    /// No pause notification waits for its read, and some kind and lane of this node is not
    /// paused.
    [[nodiscard]] bool claims_allowed() const noexcept {
        return !pause_wanted_ && !pause_in_flight_ && trips_.claimable_kinds() > 0 &&
               !(paused_.lanes[0] && paused_.lanes[1] && paused_.lanes[2]);
    }

    /// A read of ax.pauses came back (nullptr: it failed; read again next round trip).
    void on_paused(const sql::PausedSet* s) {
        pause_in_flight_ = false;
        if (s == nullptr) {
            pause_wanted_ = true;
            return;
        }
        apply_paused(*s);
    }

    /// Applies a paused set: the claim's kinds and the planner's lanes change only when the set
    /// did; a resume wakes the lanes (their tasks were left alone while paused).
    void apply_paused(sql::PausedSet s) {
        std::sort(s.kinds.begin(), s.kinds.end());
        if (s == paused_)
            return;
        std::vector<bool> kinds(kinds_.size());
        std::string mine;
        for (std::size_t k = 0; k < kinds_.size(); ++k) {
            kinds[k] = std::binary_search(s.kinds.begin(), s.kinds.end(), kinds_[k]);
            if (kinds[k])
                mine += (mine.empty() ? "" : ",") + kinds_[k];
        }
        trips_.set_paused_kinds(kinds);
        planner_.set_paused_lanes(s.lanes);
        planner_.wake_lanes();
        std::string lanes;
        for (std::size_t p = 0; p < 3; ++p)
            if (s.lanes[p])
                lanes +=
                    (lanes.empty() ? "" : ",") + std::string(to_string(static_cast<Priority>(p)));
        event("paused: kinds [" + mine + "] lanes [" + lanes + "]");
        paused_ = std::move(s);
    }

    void drain() {
        trips_.drain([this](std::size_t li) -> Link& { return links_[li]; }, stopping_.load());
    }

    /// Finished slots go into the ledger (their results pending).
    void collect_done() {
        slots_.take_done(done_local_);
        for (std::uint32_t idx : done_local_) {
            switch (slots_[idx].outcome) {
            case ok:
                Counters::bump(counters_.succeeded);
                break;
            case cancelled_outcome:
                Counters::bump(counters_.cancelled);
                break;
            case snoozed_outcome:
                Counters::bump(counters_.snoozed);
                break;
            case failed:
            case permanent:
                Counters::bump(counters_.failed);
                break;
            }
            ledger_.settle(idx);
        }
        done_local_.clear();
    }

    /// stop(): every slot still queued locally goes back to the database at once.
    void hand_back_unstarted() {
        handed_back_ = true;
        auto lock = slots_.lock_local();
        for (std::uint32_t i = 0; i < slots_.capacity(); ++i) {
            Slot& s = slots_[i];
            if (s.phase() != queued || !slots_.hand_back(i, s.generation()))
                continue;
            Counters::bump(counters_.released);
            slots_.unqueued_one();
            ledger_.settle(i);
        }
    }

    // ------------------------------------------------------------------ links
    [[nodiscard]] bool linked() const noexcept {
        for (auto& l : links_)
            if (!l.ok())
                return false;
        return true;
    }

    /// Closes every link; the results of every unread round trip go back to pending.
    void drop_links() noexcept {
        trips_.drop();
        for (auto& l : links_)
            l.close();
    }

    void connect() {
        links_[0] = PgLink::open(opt_.conninfo, true);
        for (std::size_t i = 1; i < links_.size(); ++i)
            links_[i] = PgLink::open(opt_.conninfo, false);
        register_node();
        sql::listen_wake(links_[0].pipeline().connection());
        // After LISTEN ax_pause, so no change committed from here on goes unseen.
        pause_wanted_ = pause_in_flight_ = false;
        apply_paused(sql::listen_and_read_pauses(links_[0].pipeline().connection()));
        links_[0].pipeline().enter();
        planner_.wake_lanes();
        schedule_.connected(Clock::now());
    }

    /// Renews the node's row if the database still has it, else registers a new one (its old
    /// batches were reclaimed: the local copies become stale).
    void register_node() {
        Connection& c = links_[0].pipeline().connection();
        if (trips_.node() != 0) {
            BinaryArray ids(BinaryArray::int8_oid);
            ledger_.held_ids(ids);
            if (sql::renew_node(c, trips_.node(), ids, opt_.lease.count())) {
                sql::listen_node(c, trips_.node());
                return;
            }
            event("node #" + std::to_string(trips_.node()) +
                  " was reclaimed while away; registering again");
            ledger_.forget_all();
        }
        BinaryArray kinds(BinaryArray::text_oid), tags(BinaryArray::text_oid);
        for (auto& k : kinds_)
            kinds.add_bytes(k);
        for (auto& t : opt_.tags)
            tags.add_bytes(t);
        const std::int64_t id =
            sql::register_node(c, {opt_.name, kinds, tags, host_,
                                   static_cast<std::int64_t>(getpid()), opt_.lease.count()});
        trips_.set_node(id);
        counters_.node_id.store(id);
        sql::listen_node(c, id);
    }

    void process_notifications() {
        Pipeline& p = links_[0].pipeline();
        if (!p.consume())
            throw ConnectionError("ax::pg: connection lost: " + p.error_message());
        p.notifications([this](std::string_view channel, std::string_view extra) {
            if (channel == sql::wake_channel) {
                planner_.wake_lanes();
                return;
            }
            if (channel == sql::pause_channel) {
                pause_wanted_ = true;
                return;
            }
            std::int64_t id = 0;
            if (std::from_chars(extra.data(), extra.data() + extra.size(), id).ec == std::errc())
                cancel_local(id);
        });
    }

    /// A cross-node cancel: stop the local task (its stop token) or keep it from starting.
    void cancel_local(std::int64_t id) {
        auto lock = slots_.lock_local();
        for (std::uint32_t i = 0; i < slots_.capacity(); ++i) {
            Slot& s = slots_[i];
            const Phase phase = s.phase();
            if (s.id != id || (phase != queued && phase != running_phase))
                continue;
            s.cancel.store(true);
            if (s.phase() == running_phase)
                workers_.cancel(s.local);
            event("cancel requested for task " + std::to_string(id));
            return;
        }
    }

    // ------------------------------------------------------------------ sleeping
    void wait_for_work() {
        const auto now = Clock::now();
        auto until = std::min(schedule_.next_renew(), now + opt_.poll_interval);
        const bool stopping = stopping_.load();
        if (!stopping)
            until = std::min(until, schedule_.next_maintain());
        for (std::size_t p = 0; p < 3; ++p)
            if (planner_.bucket_wait(p).count() > 0)
                until = std::min(until, now + planner_.bucket_wait(p));
        if (slots_.pending_done() > 0)
            until = std::min(until, now + opt_.ack_delay);
        if (stopping)
            until = std::min(until, now + std::chrono::milliseconds(5));
        until = std::min(until, schedule_.next_poll());
        // A claim the empty-claim floor holds back is due when the floor ends.
        const auto floor_end = planner_.floor_end();
        if (floor_end > now && room_to_claim())
            until = std::min(until, floor_end);
        poll_until(until);
    }

    /// The local queue ran low, a slot is free and some lane may hold work.
    [[nodiscard]] bool room_to_claim() const noexcept {
        return slots_.depth() <= planner_.settings().low_watermark && slots_.free_count() > 0 &&
               claims_allowed() && planner_.lane_with_work();
    }

    void poll_until(Clock::time_point until) {
        const auto ms =
            std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
        if (ms <= 0)
            return;
        // Refill on demand: a worker wakes us when the local queue runs low or results pile
        // up. Claim at once instead of sleeping only while some lane is thought to hold work
        // (a lane known empty waits for NOTIFY or the poll) and no empty claim's floor holds it
        // back: an idle node must not loop on claims that find nothing.
        waker_.set_sleeping(true);
        if (room_to_claim() && Clock::now() >= planner_.floor_end()) {
            waker_.set_sleeping(false);
            planner_.claim_soon();
            return;
        }
        waker_.sleep_on(links_[0].pipeline().socket(), static_cast<int>(ms));
        waker_.set_sleeping(false);
        if (slots_.depth() <= planner_.settings().low_watermark && !planner_.all_empty())
            planner_.claim_soon();
    }

    // ------------------------------------------------------------------ maintenance
    void on_maintain(const sql::MaintainReport& m) {
        if (m.next_expiry_ms)
            schedule_.lease_ends_in(*m.next_expiry_ms, Clock::now());
        if (!m.got_lock)
            return;
        // Every finished task leaves two dead row versions in ax.tasks (the claim's update,
        // the acknowledgement's delete); autovacuum visits a database only once per naptime (a
        // minute by default), so the maintenance node vacuums the table itself once enough
        // piled up.
        if (opt_.vacuum_dead_rows > 0 && !vacuum_.running() && m.dead_rows &&
            *m.dead_rows >= static_cast<std::int64_t>(opt_.vacuum_dead_rows))
            start_vacuum();
        if (m.reclaimed_batches.size() > 2) {
            const auto n = 1 + static_cast<std::size_t>(std::count(m.reclaimed_batches.begin(),
                                                                   m.reclaimed_batches.end(), ','));
            Counters::bump(counters_.reclaimed_batches, n);
            Counters::bump(counters_.reclaimed_tasks,
                           static_cast<std::uint64_t>(m.requeued + m.dead));
            event("reclaimed expired batch(es) " + m.reclaimed_batches + " of node(s) " +
                  m.reclaimed_nodes + ": " + std::to_string(m.requeued) +
                  " task(s) back to pending, " + std::to_string(m.dead) + " dead-lettered");
        }
    }

    void start_vacuum() {
        const std::string err = vacuum_.start(opt_.conninfo);
        if (err.empty())
            Counters::bump(counters_.vacuums);
        else
            event("could not start VACUUM of ax.tasks: " + err);
    }

    void poll_vacuum() {
        std::string err;
        const Vacuum::Poll st = vacuum_.poll(err);
        if (st == Vacuum::Poll::lost) {
            event("VACUUM of ax.tasks: connection lost: " + err);
            return;
        }
        if (!err.empty())
            event("VACUUM of ax.tasks failed: " + err);
        if (st == Vacuum::Poll::done) {
            // Look again at once, so that under heavy churn passes follow each other (each one
            // short, on a small table) rather than leaving a maintenance interval of dead rows
            // to pile up; but never start passes closer than Vacuum::min_period, so a pass
            // skipped at once (SKIP_LOCKED while autovacuum runs) does not loop.
            schedule_.maintain_by(std::max(Clock::now(), vacuum_.started() + Vacuum::min_period));
        }
    }

    void event(const std::string& what) {
        if (opt_.on_event)
            opt_.on_event(what);
    }

    const NodeOptions& opt_;
    const std::string host_;
    const std::vector<std::string>& kinds_;
    SlotTable& slots_;
    Counters& counters_;
    Waker& waker_;
    const std::atomic<bool>& stopping_;
    Workers workers_;
    std::vector<PgLink> links_; // link 0: registration, LISTEN, the idle sleep
    BatchLedger ledger_;
    ClaimPlanner planner_;
    RoundTrips trips_;
    Schedule schedule_;
    Vacuum vacuum_;
    std::vector<std::uint32_t> done_local_; // scratch of collect_done
    bool handed_back_ = false;
    sql::PausedSet paused_;        // as last read (kinds sorted)
    bool pause_wanted_ = false;    // a pause notification came: read ax.pauses again
    bool pause_in_flight_ = false; // a read of ax.pauses is in a round trip
    std::atomic<bool> done_{false};
};

} // namespace ax::pg::detail
