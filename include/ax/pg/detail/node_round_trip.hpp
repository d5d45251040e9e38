// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// The node's pipelined round trips, one per link at a time (NodeOptions::connections links).
// send() queues, on one link: the acknowledgements (their own durable transaction), then claim
// and lease renewal (one asynchronous-commit transaction: a claim lost in a crash is claimable
// again), then maintenance when due. read() reads every reply back in step and applies it: the
// acknowledgements confirmed (the ledger frees their slots and closed batches), the claim taken
// into slots and posted to the local workers. drop() puts the results of every unread round
// trip back for the next attempt when a link broke. It owns the flights (node_flights.hpp) and
// works through the Link interface, so tests drive it against a fake link. Driver thread only;
// it guards nothing.

#include "node_counters.hpp"
#include "node_flights.hpp"
#include "node_ledger.hpp"
#include "node_link.hpp"
#include "node_planner.hpp"
#include "node_slots.hpp"

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ax::pg::detail {

/// What one round trip carries besides the pending results (the driver decides).
struct FlightPlan {
    bool renew = false;
    bool maintain = false;
    bool claim = false;
    /// Read the paused kinds and lanes (ax.pauses) in the claim-and-renew transaction, before
    /// its claim.
    bool pauses = false;
    std::array<std::uint32_t, 3> quota{};
};

class RoundTrips {
  public:
    using Clock = std::chrono::steady_clock;

    /// What the round trips need from the rest of the node.
    struct Hooks {
        /// A line for NodeOptions::on_event.
        std::function<void(const std::string&)> event;
        /// Posts slot `idx` (generation `gen`, queued) to the local workers with the task's
        /// timeout, recording its local TaskId in the slot; false if refused.
        std::function<bool(std::uint32_t idx, std::uint64_t gen, std::chrono::milliseconds)> post;
        /// ax.maintain's report.
        std::function<void(const sql::MaintainReport&)> maintained;
        /// The paused set read (nullptr: the read failed, ask again).
        std::function<void(const sql::PausedSet*)> paused;
    };
    /// The statements' fixed parameters.
    struct Settings {
        std::int64_t lease_ms = 30000;
        std::int64_t retention_ms = 3600 * 1000;
        std::int64_t prune_batch = 10000;
        std::size_t ack_batch = 1;       // results that pay for a round trip beside one in flight
        std::uint32_t max_snoozes = 100; // NodeOptions::max_snoozes
    };

    RoundTrips(SlotTable& slots, BatchLedger& ledger, ClaimPlanner& planner, Counters& counters)
        : slots_(slots), ledger_(ledger), planner_(planner), counters_(counters) {}

    void init(std::size_t links, const Settings& s, const std::vector<std::string>& kinds,
              const std::vector<std::string>& tags, Hooks hooks) {
        flights_.resize(links);
        s_ = s;
        hooks_ = std::move(hooks);
        kinds_.clear();
        for (auto& k : kinds)
            kinds_.add_bytes(k);
        tags_.clear();
        for (auto& t : tags)
            tags_.add_bytes(t);
        all_kinds_ = kinds;
        claimable_kinds_ = kinds.size();
    }

    /// Kinds paused cluster-wide (paused[k] for the node's kind k) leave the claim's kinds
    /// parameter: their place holds a NULL, which no row's kind equals, so the claim's answer
    /// still indexes the node's kinds (array_position) and the statement is unchanged. Rebuilt
    /// only when the paused set changes.
    void set_paused_kinds(const std::vector<bool>& paused) {
        kinds_.clear();
        claimable_kinds_ = 0;
        for (std::size_t k = 0; k < all_kinds_.size(); ++k) {
            if (k < paused.size() && paused[k]) {
                kinds_.add_null();
            } else {
                kinds_.add_bytes(all_kinds_[k]);
                ++claimable_kinds_;
            }
        }
    }
    /// Kinds of this node not paused (0: no claim is worth sending).
    [[nodiscard]] std::size_t claimable_kinds() const noexcept { return claimable_kinds_; }
    /// The node's database ID (after registering).
    void set_node(std::int64_t id) {
        node_id_ = id;
        node_text_ = std::to_string(id);
    }
    [[nodiscard]] std::int64_t node() const noexcept { return node_id_; }

    FlightSet& flights() noexcept { return flights_; }
    const FlightSet& flights() const noexcept { return flights_; }

    /// Queues one round trip on link `li` and sends it; false if nothing was worth it. Beside a
    /// round trip already in flight (`others_busy`), sends only what pays for a second one: a
    /// claim, a full set of results, or a renewal or maintenance that is due.
    bool send(std::size_t li, Link& link, const FlightPlan& plan, bool others_busy) {
        if (others_busy && !plan.claim && !plan.renew && !plan.maintain && !plan.pauses &&
            ledger_.pending_results() < s_.ack_batch)
            return false;
        Flight& f = flights_[li];
        const bool acks = ledger_.ship(f.acks);
        if (!acks && !plan.claim && !plan.renew && !plan.maintain && !plan.pauses)
            return false;
        // Busy from here: if a send throws, drop() puts the shipment back.
        f.steps.clear();
        f.claim = false;
        f.promised = 0;
        flights_.took_off(li);
        if (acks)
            send_acks(link, f);
        if (plan.renew || plan.claim || plan.pauses)
            send_claim_and_renew(link, f, plan);
        if (plan.maintain) {
            link.maintain(s_.retention_ms, s_.prune_batch);
            f.steps.push_back(Step::maintain);
            sync(link, f);
        }
        link.flush();
        last_sent_claim_ = plan.claim;
        Counters::bump(counters_.round_trips);
        return true;
    }

    /// Reads link `li`'s round trip back and applies it. Throws when the link broke or the
    /// acknowledgement failed; the flight then stays busy so that drop() puts its results back.
    void read(std::size_t li, Link& link, bool stopping) {
        Flight& f = flights_[li];
        bool ack_ok = true, claim_ok = true;
        std::unique_ptr<ClaimRows> rows;
        for (const Step step : f.steps) {
            Reply r = link.read(step);
            if (r.status == Reply::lost)
                throw ConnectionError(r.error);
            if (step == Step::sync) {
                if (r.status != Reply::synced)
                    throw ConnectionError("ax::pg: pipeline out of step");
                continue;
            }
            if (r.status != Reply::good) {
                if (r.status == Reply::failed)
                    event("statement failed: " + r.error);
                if (step == Step::pauses && hooks_.paused)
                    hooks_.paused(nullptr);
                if (is_ack_step(step))
                    ack_ok = false;
                else if (step != Step::maintain)
                    claim_ok = false;
                continue;
            }
            apply(step, r, rows);
        }
        if (!ack_ok)
            throw Error("ax::pg: acknowledgement failed; retrying on a fresh connection");
        ledger_.confirm(f.acks);
        const bool claim = f.claim;
        const auto asked = f.asked;
        const auto wake_seq = f.wake_seq;
        f.land();
        // A claim is taken only with its acknowledgement confirmed (it counted on those
        // slots); otherwise its rows stay claimed in the database until their lease expires.
        if (claim && claim_ok && rows != nullptr)
            take_claim(std::move(rows), asked, stopping);
        else if (claim)
            planner_.claim_lost();
        // News that came while the claim was in flight (a NOTIFY read on another link) is
        // newer than what the claim saw: its lanes may hold work again.
        if (claim)
            planner_.news_since(wake_seq);
    }

    /// Reads every busy flight, oldest first.
    void drain(const std::function<Link&(std::size_t)>& link, bool stopping) {
        for (std::size_t li = flights_.oldest_busy(); li < flights_.size();
             li = flights_.oldest_busy())
            read(li, link(li), stopping);
    }

    /// A link broke: the results of every unread round trip go back to pending (oldest first,
    /// so they go again in the order sent); a claim in flight is left to its lease.
    void drop() noexcept {
        for (std::size_t li = flights_.oldest_busy(); li < flights_.size();
             li = flights_.oldest_busy()) {
            ledger_.put_back(flights_[li].acks);
            flights_[li].land();
        }
    }

    /// A renewal found the node unregistered (register again before the next round trip).
    bool take_need_register() noexcept { return std::exchange(need_register_, false); }
    [[nodiscard]] bool need_register() const noexcept { return need_register_; }
    /// The last round trip sent carried a claim.
    [[nodiscard]] bool last_sent_claim() const noexcept { return last_sent_claim_; }

  private:
    void sync(Link& link, Flight& f) {
        link.sync();
        f.steps.push_back(Step::sync);
    }

    // The acknowledgement transaction (durable commit).
    void send_acks(Link& link, Flight& f) {
        Results& r = f.acks.results;
        if (r.ack_ids.size() > 0) {
            link.ack(node_text_, r.ack_ids);
            f.steps.push_back(Step::ack);
        }
        if (r.result_ids.size() > 0) {
            link.ack_result(node_text_, r.result_ids, r.results);
            f.steps.push_back(Step::ack_result);
        }
        if (r.snooze_ids.size() > 0) {
            link.snooze({node_text_, r.snooze_ids, r.snooze_delay, s_.max_snoozes});
            f.steps.push_back(Step::snooze);
        }
        if (r.fail_ids.size() > 0) {
            link.fail({node_text_, r.fail_ids, r.fail_errors, r.fail_perm, r.fail_delay});
            f.steps.push_back(Step::fail);
        }
        if (r.release_ids.size() > 0) {
            link.release(node_text_, r.release_ids);
            f.steps.push_back(Step::release);
        }
        for (std::uint32_t bi : f.acks.closes) {
            const Batch& b = ledger_[bi];
            link.close_batch({node_text_, b.db_id, b.size, b.xor_ids});
            f.steps.push_back(Step::close);
        }
        sync(link, f);
    }

    // The claim-and-renew transaction (asynchronous commit).
    void send_claim_and_renew(Link& link, Flight& f, const FlightPlan& plan) {
        link.begin();
        f.steps.push_back(Step::begin);
        link.async_commit();
        f.steps.push_back(Step::set_local);
        if (plan.renew) {
            ledger_.held_ids(renew_ids_);
            link.renew(node_text_, renew_ids_, s_.lease_ms);
            f.steps.push_back(Step::renew);
        }
        if (plan.pauses) {
            link.pauses();
            f.steps.push_back(Step::pauses);
        }
        if (plan.claim) {
            link.claim({node_id_, kinds_, tags_, plan.quota, s_.lease_ms});
            f.steps.push_back(Step::claim);
            f.claim = true;
            f.asked = plan.quota;
            f.wake_seq = planner_.claim_sent();
            f.promised = plan.quota[0] + plan.quota[1] + plan.quota[2];
        }
        link.commit();
        f.steps.push_back(Step::commit);
        sync(link, f);
    }

    // One good reply.
    void apply(Step step, Reply& r, std::unique_ptr<ClaimRows>& rows) {
        switch (step) {
        case Step::renew:
            if (r.registered)
                Counters::bump(counters_.lease_renewals);
            else
                need_register_ = true;
            break;
        case Step::claim:
            rows = std::move(r.rows);
            break;
        case Step::close:
            if (r.mismatched > 0) {
                Counters::bump(counters_.mismatches);
                event("checksum mismatch on close: " + std::to_string(r.mismatched) +
                      " task(s) put back");
            }
            break;
        case Step::maintain:
            if (hooks_.maintained)
                hooks_.maintained(r.maintenance);
            break;
        case Step::pauses:
            if (hooks_.paused)
                hooks_.paused(&r.paused);
            break;
        default:
            break;
        }
    }

    // A claim's rows become a batch and its slots, posted to the local workers (or handed
    // back at once when stop() came while the claim was in flight).
    void take_claim(std::unique_ptr<ClaimRows> rows, const std::array<std::uint32_t, 3>& asked,
                    bool stopping) {
        Counters::bump(counters_.claims);
        const std::uint32_t n = rows->size();
        const bool limited = rows->limited();
        std::array<std::uint32_t, 3> got{};
        std::array<std::int64_t, 3> max_wait{};
        if (n == 0) {
            Counters::bump(counters_.empty_claims);
            planner_.claim_read(asked, got, max_wait, Clock::now(), limited);
            return;
        }
        Counters::bump(counters_.batches);
        const ClaimRows& claim = *rows;
        const std::uint32_t bi = ledger_.open(std::move(rows), claim.row(0).batch);
        counters_.last_batch.store(n, std::memory_order_relaxed);
        auto lock = slots_.lock_local();
        for (std::uint32_t i = 0; i < n; ++i) {
            const ClaimedTask t = claim.row(i);
            const std::uint32_t idx = slots_.take_free();
            Slot& s = slots_[idx];
            s.id = t.id;
            s.batch = bi;
            s.kind = t.kind;
            s.priority = static_cast<Priority>(t.priority);
            s.attempt = t.attempt;
            s.cancel.store(t.cancel);
            s.payload = t.payload;
            s.outcome = ok;
            got[t.priority] += 1;
            max_wait[t.priority] = std::max(max_wait[t.priority], t.waited_ms);
            const std::uint64_t gen = s.generation();
            if (stopping) {
                // A claim that was in flight when stop() came: its tasks go back with the
                // others that never started, not to the local workers.
                s.word.store(SlotTable::word(gen, handed_back));
                ledger_.settle(idx);
                Counters::bump(counters_.released);
                continue;
            }
            s.word.store(SlotTable::word(gen, queued));
            slots_.queued_one();
            if (!hooks_.post(idx, gen, std::chrono::milliseconds(t.timeout_ms))) {
                // Refused locally (should not happen: the queue is sized for the buffer): hand
                // it straight back.
                if (slots_.hand_back(idx, gen)) {
                    ledger_.settle(idx);
                    Counters::bump(counters_.released);
                    slots_.unqueued_one();
                }
            }
        }
        for (std::size_t p = 0; p < 3; ++p)
            Counters::bump(counters_.claimed[p], got[p]);
        planner_.claim_read(asked, got, max_wait, Clock::now(), limited);
    }

    void event(const std::string& what) {
        if (hooks_.event)
            hooks_.event(what);
    }

    SlotTable& slots_;
    BatchLedger& ledger_;
    ClaimPlanner& planner_;
    Counters& counters_;
    FlightSet flights_;
    Settings s_;
    Hooks hooks_;
    std::int64_t node_id_ = 0;
    std::string node_text_ = "0";
    BinaryArray kinds_{BinaryArray::text_oid};
    BinaryArray tags_{BinaryArray::text_oid};
    std::vector<std::string> all_kinds_;
    std::size_t claimable_kinds_ = 0;
    BinaryArray renew_ids_{BinaryArray::int8_oid};
    bool need_register_ = false;
    bool last_sent_claim_ = false;
};

} // namespace ax::pg::detail
