// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// ax::pg::Node's slot and batch bookkeeping, split out of node.hpp by role: taking a claim's rows
// into slots and posting them to the local scheduler, collecting finished slots into the
// acknowledgement arrays, freeing slots and batches once the database confirmed them, handing
// unstarted tasks back at stop(), and reporting what maintenance reclaimed. Driver thread only.
// Defines members of the class in ../node.hpp, which includes this file at its end; including
// ../node.hpp here first keeps this header self-contained.

#include "../node.hpp"

namespace ax::pg {

inline void Node::on_maintain(detail::Result& r) {
    // Run it again just after the earliest running lease ends, when that comes before the
    // regular interval: a dead node's batches are then reclaimed within moments of their expiry
    // rather than up to a whole interval later. Live nodes renew at lease / 3, so their leases
    // are never that close and this adds no round trips while every node is alive; a few
    // milliseconds of slack make sure the lease has ended on the server's clock too.
    if (!r.null(0, 6)) {
        const auto ms = std::max<std::int64_t>(r.int64(0, 6), 0) + expiry_slack_ms;
        next_maintain_ = std::min(next_maintain_, Clock::now() + std::chrono::milliseconds(ms));
    }
    if (!r.boolean(0, 0))
        return;
    // Every finished task leaves two dead row versions in ax.tasks (the claim's update, the
    // acknowledgement's delete); autovacuum visits a database only once per naptime (a minute
    // by default), so the maintenance node vacuums the table itself once enough piled up.
    if (opt_.vacuum_dead_rows > 0 && !vacuum_running_ && !r.null(0, 7) &&
        r.int64(0, 7) >= static_cast<std::int64_t>(opt_.vacuum_dead_rows))
        start_vacuum();
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

inline void Node::acks_confirmed(Flight& f) {
    for (std::uint32_t idx : f.acked_slots) {
        Slot& s = slots_[idx];
        Batch& b = batches_[s.batch];
        b.confirmed += 1;
        b.in_flight -= 1;
        const std::uint64_t gen = s.word.load() >> 8;
        s.word.store(word(gen + 1, free_phase));
        s.cancel.store(false);
        free_.push_back(idx);
    }
    f.acked_slots.clear();
    for (std::uint32_t bi : f.close_batches)
        release_batch(bi);
    f.close_batches.clear();
    // Batches the database forgot (stale) are freed locally once all their tasks are done.
    for (std::uint32_t bi = 0; bi < batches_.size(); ++bi) {
        Batch& b = batches_[bi];
        if (b.in_use && b.stale && b.confirmed == b.size)
            release_batch(bi);
    }
    f.clear_results();
}

inline void Node::release_batch(std::uint32_t bi) {
    Batch& b = batches_[bi];
    if (b.result != nullptr)
        PQclear(b.result);
    b = Batch{};
    free_batches_.push_back(bi);
}

inline void Node::collect_done() {
    {
        std::lock_guard lock(done_mutex_);
        done_local_.swap(done_);
    }
    for (std::uint32_t idx : done_local_) {
        switch (slots_[idx].outcome) {
        case ok:
            succeeded_.fetch_add(1, std::memory_order_relaxed);
            break;
        case cancelled_outcome:
            cancelled_.fetch_add(1, std::memory_order_relaxed);
            break;
        case failed:
        case permanent:
            failed_.fetch_add(1, std::memory_order_relaxed);
            break;
        }
        add_result(idx);
        account(idx);
    }
    done_local_.clear();
}

inline void Node::add_result(std::uint32_t idx) {
    Slot& s = slots_[idx];
    if ((s.word.load() & 0xff) == handed_back) {
        release_ids_.add_int64(s.id);
        return;
    }
    switch (s.outcome) {
    case ok:
    case cancelled_outcome: // the database turns a cancel-requested task into cancelled
        ack_ids_.add_int64(s.id);
        break;
    case failed:
    case permanent: {
        fail_ids_.add_int64(s.id);
        fail_errors_.add_bytes(s.error);
        fail_perm_.add_bool(s.outcome == permanent);
        const auto d = retry_delay(opt_.scheduler.retry_base_delay, opt_.scheduler.retry_jitter,
                                   s.attempt + 1, unit_(rng_));
        fail_delay_.add_int64(std::chrono::duration_cast<std::chrono::milliseconds>(d).count());
        break;
    }
    }
}

inline void Node::account(std::uint32_t idx) {
    Slot& s = slots_[idx];
    Batch& b = batches_[s.batch];
    acked_slots_.push_back(idx);
    b.accounted += 1;
    b.xor_ids ^= s.id;
    if (b.accounted == b.size && !b.stale)
        close_batches_.push_back(s.batch);
}

inline void Node::hand_back_unstarted() {
    handed_back_ = true;
    std::lock_guard lock(local_mutex_);
    for (std::uint32_t i = 0; i < capacity_; ++i) {
        Slot& s = slots_[i];
        std::uint64_t w = s.word.load();
        if ((w & 0xff) != queued)
            continue;
        if (!s.word.compare_exchange_strong(w, word(w >> 8, handed_back)))
            continue;
        add_result(i);
        released_.fetch_add(1, std::memory_order_relaxed);
        depth_.fetch_sub(1);
        account(i);
    }
}

inline void Node::take_claim(detail::Result rows, const std::array<std::uint32_t, 3>& asked) {
    claims_.fetch_add(1, std::memory_order_relaxed);
    const int n = rows.rows();
    std::array<std::uint32_t, 3> got{};
    std::array<std::int64_t, 3> max_wait{};
    if (n == 0) {
        empty_claims_.fetch_add(1, std::memory_order_relaxed);
        lanes_.learn(asked, got, {false, false, false});
        last_claim_full_ = false;
        last_claim_empty_ = true;
        empty_claim_at_ = Clock::now();
        claim_now_ = false;
        pid_.reset();
        return;
    }
    last_claim_empty_ = false;
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
    const bool stopping = stopping_.load();
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
        if (stopping) {
            // A claim that was in flight on another link when stop() came: its tasks go back
            // with the others that never started, not to the local workers.
            s.word.store(word(gen, handed_back));
            add_result(idx);
            released_.fetch_add(1, std::memory_order_relaxed);
            account(idx);
            continue;
        }
        s.word.store(word(gen, queued));
        depth_.fetch_add(1);
        SubmitOptions so;
        so.priority = s.priority;
        so.timeout = std::chrono::milliseconds(timeout_ms);
        so.max_retries = 0; // retries happen in the database, on any node
        auto r = sched_->post([this, idx, gen](TaskContext& ctx) { run_slot(idx, gen, ctx); }, so);
        if (r) {
            s.local = r.value();
        } else {
            // Refused locally (should not happen: the queue is sized for the buffer): hand
            // it straight back.
            std::uint64_t w = word(gen, queued);
            if (s.word.compare_exchange_strong(w, word(gen, handed_back))) {
                add_result(idx);
                released_.fetch_add(1, std::memory_order_relaxed);
                depth_.fetch_sub(1);
                account(idx);
            }
        }
    }
    std::uint32_t asked_total = 0;
    std::array<bool, 3> late{};
    for (std::size_t p = 0; p < 3; ++p) {
        claimed_[p].fetch_add(got[p], std::memory_order_relaxed);
        buckets_[p].take(got[p]);
        late[p] = max_wait[p] > max_wait_ms_;
        asked_total += asked[p];
    }
    lanes_.learn(asked, got, late);
    last_claim_full_ = static_cast<std::uint32_t>(n) >= asked_total;
    claim_now_ = last_claim_full_;
}

} // namespace ax::pg
