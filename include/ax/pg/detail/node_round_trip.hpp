// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// ax::pg::Node's round trips, split out of node.hpp by role: send_flight() queues, in one
// pipelined round trip on one link, the acknowledgements (their own durable transaction), the
// claim and lease renewal (one asynchronous-commit transaction) and maintenance when due;
// read_flight() reads every result back in step. cycle() keeps up to NodeOptions::connections of
// them in flight, one per link, so one batch's claim and acknowledgement run on the server while
// the node reads another's results. Also how much to claim per lane (want_claim, using
// detail/lanes.hpp). Driver thread only.
// Defines members of the class in ../node.hpp, which includes this file at its end; including
// ../node.hpp here first keeps this header self-contained.

#include "../node.hpp"

namespace ax::pg {

inline bool Node::cycle() {
    // Notifications arrive on the primary link; read them while it carries no round trip.
    if (!flights_[0].busy)
        process_notifications();
    poll_vacuum();
    collect_done();
    const auto now = Clock::now();
    if (now >= next_poll_) {
        // Polling fallback: delayed tasks and retries come due without a notification.
        next_poll_ = now + opt_.poll_interval;
        wake_lanes();
    }
    const bool stopping = stopping_.load();
    if (stopping && !handed_back_)
        hand_back_unstarted();

    // Send on the next free link, round robin (so the links take turns and each one's backend
    // works while the node reads the other's results).
    const std::size_t n = flights_.size();
    std::size_t li = n;
    for (std::size_t k = 0; k < n; ++k) {
        const std::size_t i = (next_link_ + k) % n;
        if (!flights_[i].busy) {
            li = i;
            break;
        }
    }
    const std::size_t busy_before = busy_links();
    bool sent = false;
    if (li < n) {
        sent = send_flight(li, now, stopping, busy_before > 0);
        if (sent)
            next_link_ = (li + 1) % n;
    }
    // Read the oldest round trip back when no link is left for the next one, or when nothing
    // else was worth sending meanwhile.
    const std::size_t busy = busy_links();
    if (busy > 0 && (busy == n || !sent))
        read_flight(oldest_busy());

    if (stopping) {
        if (busy_links() == 0 && depth_.load() == 0 && pending_done() == 0 && !acks_pending() &&
            all_closed())
            return false;
        if (stop_deadline_passed()) {
            drain_flights();
            return false;
        }
    }
    if (need_register_) {
        drain_flights();
        need_register_ = false;
        PGconn* c = conn_.get();
        PQexitPipelineMode(c);
        register_node();
        PQenterPipelineMode(c);
    }
    if (busy_links() > 0)
        return true; // the next cycle reads it (or sends beside it): no sleep
    // Sleep unless another round trip is worth it right away: a full claim with room left
    // (a backlog), or a full set of results to acknowledge.
    const bool backlog = last_sent_claim_ && last_claim_full_ && depth_.load() < target_;
    if (!backlog && pending_done() < opt_.ack_batch && !acks_pending())
        wait_for_work();
    return true;
}

inline bool Node::send_flight(std::size_t li, Clock::time_point now, bool stopping,
                              bool others_busy) {
    Flight& f = flights_[li];
    PGconn* c = li == 0 ? conn_.get() : more_conns_[li - 1].get();
    const bool renew = li == 0 && now >= next_renew_;
    const bool maintain = li == 0 && !stopping && now >= next_maintain_;
    std::array<std::uint32_t, 3> quota{};
    const bool claim = !stopping && want_claim(now, quota);
    // Beside a round trip already in flight, send only what pays for a second one: a claim, a
    // full set of results, or a renewal or maintenance that is due. A few results wait for
    // the next cycle instead (the one in flight is read first).
    const std::size_t results = ack_ids_.size() + fail_ids_.size() + release_ids_.size();
    if (others_busy && !claim && !renew && !maintain && results < opt_.ack_batch)
        return false;
    // A batch is closed only in a round trip that carries, or comes after the confirmation of,
    // every one of its results: a close committed while some of its acknowledgements are still
    // unconfirmed on another link could leave those tasks held by a batch that no longer exists.
    close_later_.clear();
    f.close_batches.clear();
    for (std::uint32_t bi : close_batches_)
        (batches_[bi].in_flight == 0 ? f.close_batches : close_later_).push_back(bi);
    close_batches_.swap(close_later_);
    const bool acks = results > 0 || !f.close_batches.empty();
    if (!acks && !claim && !renew && !maintain)
        return false;

    f.steps.clear();
    f.claim = false;
    f.promised = 0;
    // -- acknowledgements
    if (acks) {
        std::swap(f.ack_ids, ack_ids_);
        std::swap(f.fail_ids, fail_ids_);
        std::swap(f.fail_errors, fail_errors_);
        std::swap(f.fail_perm, fail_perm_);
        std::swap(f.fail_delay, fail_delay_);
        std::swap(f.release_ids, release_ids_);
        f.acked_slots.swap(acked_slots_);
        for (std::uint32_t idx : f.acked_slots)
            batches_[slots_[idx].batch].in_flight += 1;
        const std::string& node = node_text();
        if (f.ack_ids.size() > 0)
            send_prepared(li, "ax_ack", f.ack_ids, Step::ack);
        if (f.fail_ids.size() > 0) {
            const char* v[5] = {node.c_str(), f.fail_ids.data(), f.fail_errors.data(),
                                f.fail_perm.data(), f.fail_delay.data()};
            int l[5] = {0, f.fail_ids.length(), f.fail_errors.length(), f.fail_perm.length(),
                        f.fail_delay.length()};
            int fm[5] = {0, 1, 1, 1, 1};
            send(li, PQsendQueryPrepared(c, "ax_fail", 5, v, l, fm, 0), Step::fail);
        }
        if (f.release_ids.size() > 0)
            send_prepared(li, "ax_release", f.release_ids, Step::release);
        for (const auto& cb : f.close_batches) {
            const std::string b = std::to_string(batches_[cb].db_id),
                              sz = std::to_string(batches_[cb].size),
                              x = std::to_string(batches_[cb].xor_ids);
            const char* v[4] = {node.c_str(), b.c_str(), sz.c_str(), x.c_str()};
            send(li, PQsendQueryPrepared(c, "ax_close", 4, v, nullptr, nullptr, 0), Step::close);
        }
        sync(li);
    }
    // -- claim and renewal
    if (renew || claim) {
        send(li, PQsendQueryParams(c, "BEGIN", 0, nullptr, nullptr, nullptr, nullptr, 0),
             Step::begin);
        send(li,
             PQsendQueryParams(c, "SET LOCAL synchronous_commit TO off", 0, nullptr, nullptr,
                               nullptr, nullptr, 0),
             Step::set_local);
        if (renew) {
            collect_batch_ids(renew_ids_);
            const std::string& node = node_text();
            const std::string lease = std::to_string(opt_.lease.count());
            const char* v[3] = {node.c_str(), renew_ids_.data(), lease.c_str()};
            int l[3] = {0, renew_ids_.length(), 0};
            int fm[3] = {0, 1, 0};
            send(li, PQsendQueryPrepared(c, "ax_renew", 3, v, l, fm, 0), Step::renew);
            next_renew_ = now + opt_.lease / 3;
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
            int fm[7] = {1, 1, 1, 1, 1, 1, 1};
            send(li, PQsendQueryPrepared(c, "ax_claim", 7, v, l, fm, 1), Step::claim);
            f.claim = true;
            f.asked = quota;
            f.wake_seq = wake_seq_;
            claim_wake_seq_ = wake_seq_;
            f.promised = quota[0] + quota[1] + quota[2];
        }
        send(li, PQsendQueryParams(c, "COMMIT", 0, nullptr, nullptr, nullptr, nullptr, 0),
             Step::commit);
        sync(li);
    }
    // -- maintenance
    if (maintain) {
        const std::string ms = std::to_string(opt_.history_retention.count()),
                          lim = std::to_string(opt_.prune_batch);
        const char* v[2] = {ms.c_str(), lim.c_str()};
        send(li, PQsendQueryPrepared(c, "ax_maintain", 2, v, nullptr, nullptr, 0), Step::maintain);
        sync(li);
        next_maintain_ = now + opt_.maintenance_interval;
    }
    if (PQflush(c) != 0)
        throw ConnectionError("ax::pg: send failed: " + std::string(PQerrorMessage(c)));
    f.busy = true;
    f.seq = ++flight_seq_;
    last_sent_claim_ = claim;
    round_trips_.fetch_add(1, std::memory_order_relaxed);
    return true;
}

inline std::size_t Node::oldest_busy() const noexcept {
    std::size_t best = flights_.size();
    for (std::size_t i = 0; i < flights_.size(); ++i)
        if (flights_[i].busy && (best == flights_.size() || flights_[i].seq < flights_[best].seq))
            best = i;
    return best;
}

inline std::size_t Node::busy_links() const noexcept {
    std::size_t n = 0;
    for (const Flight& f : flights_)
        n += f.busy ? 1 : 0;
    return n;
}

inline std::uint32_t Node::promised() const noexcept {
    std::uint32_t n = 0;
    for (const Flight& f : flights_)
        if (f.busy)
            n += f.promised;
    return n;
}

inline void Node::drain_flights() {
    for (std::size_t li = oldest_busy(); li < flights_.size(); li = oldest_busy())
        read_flight(li);
}

inline void Node::drop_links() noexcept {
    // Oldest first, so results go back in the order they were sent (not required: every
    // statement is keyed by task ID).
    for (std::size_t li = oldest_busy(); li < flights_.size(); li = oldest_busy()) {
        Flight& f = flights_[li];
        for (std::uint32_t idx : f.acked_slots) {
            batches_[slots_[idx].batch].in_flight -= 1;
            add_result(idx);
            acked_slots_.push_back(idx);
        }
        for (std::uint32_t bi : f.close_batches)
            close_batches_.push_back(bi);
        f.acked_slots.clear();
        f.close_batches.clear();
        f.clear_results();
        f.steps.clear();
        f.busy = false;
        f.claim = false;
        f.promised = 0;
    }
    conn_.close();
    for (auto& c : more_conns_)
        c.close();
}

inline const std::string& Node::node_text() {
    if (node_text_id_ != node_id_) {
        node_text_ = std::to_string(node_id_);
        node_text_id_ = node_id_;
    }
    return node_text_;
}

inline void Node::send(std::size_t li, int ok, Step step) {
    if (ok != 1) {
        PGconn* c = li == 0 ? conn_.get() : more_conns_[li - 1].get();
        throw ConnectionError("ax::pg: send failed: " + std::string(PQerrorMessage(c)));
    }
    flights_[li].steps.push_back(step);
}

inline void Node::send_prepared(std::size_t li, const char* name, detail::BinaryArray& ids,
                                Step step) {
    const char* v[2] = {node_text().c_str(), ids.data()};
    int l[2] = {0, ids.length()};
    int f[2] = {0, 1};
    PGconn* c = li == 0 ? conn_.get() : more_conns_[li - 1].get();
    send(li, PQsendQueryPrepared(c, name, 2, v, l, f, 0), step);
}

inline void Node::sync(std::size_t li) {
    PGconn* c = li == 0 ? conn_.get() : more_conns_[li - 1].get();
    if (PQpipelineSync(c) != 1)
        throw ConnectionError("ax::pg: pipeline sync failed: " + std::string(PQerrorMessage(c)));
    flights_[li].steps.push_back(Step::sync);
}

inline bool Node::acks_pending() const noexcept {
    return ack_ids_.size() + fail_ids_.size() + release_ids_.size() + close_batches_.size() > 0;
}

inline std::size_t Node::pending_done() {
    std::lock_guard lock(done_mutex_);
    return done_.size();
}

inline bool Node::all_closed() const noexcept {
    for (auto& b : batches_)
        if (b.in_use && !b.stale)
            return false;
    return true;
}

inline bool Node::want_claim(Clock::time_point now, std::array<std::uint32_t, 3>& quota) {
    // The last claim found nothing and no news came since: not again before the floor.
    if (now < claim_floor_end())
        return false;
    // Claims in flight on other links count as taken: their rows arrive before this one's.
    const std::uint32_t in_flight = promised();
    // Claim beside another claim only while claims come back full (a backlog): with few tasks
    // pending, the second claim would mostly skip the first one's locked rows and come back
    // short, a statement for a handful of rows (and lanes wrongly taken for empty).
    if (in_flight > 0 && !last_claim_full_)
        return false;
    const std::uint32_t depth = depth_.load() + in_flight;
    // Slots whose results go out in this round trip's acknowledgement count as free: they
    // are freed before the claim's rows are taken (and the claim is not taken if that
    // acknowledgement fails), so a claim is sized by what the node will have room for. Room
    // promised to the claims in flight on other links does not.
    const std::size_t room = free_.size() + acked_slots_.size();
    const std::uint32_t free_slots =
        room > in_flight ? static_cast<std::uint32_t>(room - in_flight) : 0;
    if (free_slots == 0 || depth >= target_ || (!claim_now_ && depth > low_watermark_))
        return false;
    const std::uint32_t room_for =
        std::min({free_slots, opt_.max_batch, target_ > depth ? target_ - depth : 1u});
    // Above the low watermark the node has work in hand: claim only when a whole batch fits
    // (max_batch, or a quarter of the target when that is smaller). A claim squeezed into the
    // last few free places costs a statement for a handful of rows, and when the node's CPU is
    // short (its workers lag, the buffer stays nearly full) such claims would multiply the
    // server's cost per task. Below the watermark any size goes.
    if (depth > low_watermark_ && room_for < std::min(opt_.max_batch, std::max(1u, target_ / 4)))
        return false;
    std::uint32_t batch = pid_.next(target_, depth, opt_.max_batch);
    batch = std::min(batch, room_for);
    std::array<std::uint32_t, 3> cap{};
    for (std::size_t p = 0; p < 3; ++p) {
        buckets_[p].refill(now);
        cap[p] = buckets_[p].allow(std::numeric_limits<std::uint32_t>::max());
    }
    // Never more than the free slots, probes of the lanes known empty included.
    quota = lanes_.plan(batch, free_slots, weights_, cap);
    return quota[0] + quota[1] + quota[2] > 0;
}

inline void Node::read_flight(std::size_t li) {
    Flight& f = flights_[li];
    detail::Connection& conn = li == 0 ? conn_ : more_conns_[li - 1];
    PGconn* c = conn.get();
    bool ack_ok = true, claim_ok = true;
    detail::Result claim_rows;
    for (const Step step : f.steps) {
        detail::Result r(PQgetResult(c));
        if (r.get() == nullptr)
            throw ConnectionError("ax::pg: connection lost: " + conn.error_message());
        const ExecStatusType st = r.status();
        if (step == Step::sync) {
            if (st != PGRES_PIPELINE_SYNC)
                throw ConnectionError("ax::pg: pipeline out of step: " + conn.error_message());
            continue;
        }
        const bool good = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK;
        if (!good) {
            std::string msg = PQresultErrorMessage(r.get());
            if (!conn.ok())
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
                if (r.boolean(0, 0))
                    lease_renewals_.fetch_add(1, std::memory_order_relaxed);
                else
                    need_register_ = true;
                break;
            case Step::claim:
                claim_rows = std::move(r);
                break;
            case Step::close: {
                const auto k = r.int64(0, 0);
                if (k > 0) {
                    mismatches_.fetch_add(1);
                    event("checksum mismatch on close: " + std::to_string(k) + " task(s) put back");
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
    // A failed acknowledgement leaves the flight busy: drop_links() puts its results back.
    if (!ack_ok)
        throw Error("ax::pg: acknowledgement failed; retrying on a fresh connection");
    acks_confirmed(f);
    f.busy = false;
    f.promised = 0;
    // A claim is taken only with its acknowledgement confirmed (it counted on those slots);
    // otherwise its rows stay claimed in the database until their lease expires.
    if (f.claim && claim_ok && claim_rows.get() != nullptr)
        take_claim(std::move(claim_rows), f.asked);
    else if (f.claim)
        last_claim_full_ = false;
    // News that came while the claim was in flight (a NOTIFY read on another link) is newer
    // than what the claim saw: its lanes may hold work again.
    if (f.claim && f.wake_seq != wake_seq_) {
        lanes_.wake();
        claim_now_ = true;
    }
    f.claim = false;
}

} // namespace ax::pg
