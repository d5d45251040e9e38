// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// ax::pg::Node's round trip, split out of node.hpp by role: cycle() queues, in one pipelined
// round trip, the acknowledgements (their own durable transaction), the claim and lease renewal
// (one asynchronous-commit transaction) and maintenance when due, then reads every result back in
// step. Also how much to claim per lane (want_claim, using detail/lanes.hpp). Driver thread only.
// Defines members of the class in ../node.hpp, which includes this file at its end; including
// ../node.hpp here first keeps this header self-contained.

#include "../node.hpp"

namespace ax::pg {

inline bool Node::cycle() {
    PGconn* c = conn_.get();
    process_notifications();
    poll_vacuum();
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
    const bool acks =
        !ack_ids_.empty() || !fail_ids_.empty() || !release_ids_.empty() || !close_batches_.empty();
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
        send(PQsendQueryParams(c, "BEGIN", 0, nullptr, nullptr, nullptr, nullptr, 0), Step::begin);
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

inline const std::string& Node::node_text() {
    if (node_text_id_ != node_id_) {
        node_text_ = std::to_string(node_id_);
        node_text_id_ = node_id_;
    }
    return node_text_;
}

inline void Node::send(int ok, Step step) {
    if (ok != 1)
        throw ConnectionError("ax::pg: send failed: " + conn_.error_message());
    steps_.push_back(step);
}

inline void Node::send_prepared(const char* name, std::array<const char*, 2> node_and_null,
                                detail::BinaryArray& ids, Step step) {
    const char* v[2] = {node_and_null[0], ids.data()};
    int l[2] = {0, ids.length()};
    int f[2] = {0, 1};
    send(PQsendQueryPrepared(conn_.get(), name, 2, v, l, f, 0), step);
}

inline void Node::sync() {
    if (PQpipelineSync(conn_.get()) != 1)
        throw ConnectionError("ax::pg: pipeline sync failed: " + conn_.error_message());
    steps_.push_back(Step::sync);
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
    const std::uint32_t depth = depth_.load();
    // Slots whose results go out in this round trip's acknowledgement count as free: they
    // are freed before the claim's rows are taken (and the claim is not taken if that
    // acknowledgement fails), so a claim is sized by what the node will have room for.
    const std::uint32_t free_slots = static_cast<std::uint32_t>(free_.size() + acked_slots_.size());
    if (free_slots == 0 || depth >= target_ || (!claim_now_ && depth > low_watermark_))
        return false;
    std::uint32_t batch = pid_.next(target_, depth, opt_.max_batch);
    batch = std::min({batch, free_slots, opt_.max_batch, target_ > depth ? target_ - depth : 1u});
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

inline void Node::read_results(bool renewing, bool claiming) {
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
                if (r.boolean(0, 0))
                    lease_renewals_.fetch_add(1, std::memory_order_relaxed);
                else
                    need_register_ = true;
                break;
            case Step::claim:
                claim_rows = std::move(r);
                break;
            case Step::close: {
                const auto n = r.int64(0, 0);
                if (n > 0) {
                    mismatches_.fetch_add(1);
                    event("checksum mismatch on close: " + std::to_string(n) + " task(s) put back");
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

} // namespace ax::pg
