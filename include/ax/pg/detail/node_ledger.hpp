// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// The batch ledger: claim -> acks -> close. It holds the batches the node claimed (each with its
// claim's rows, which its slots' payloads point into) and the results not yet sent, and it
// enforces the order the database needs:
//   - a finished or handed-back slot's result goes into the pending arrays and is counted into
//     its batch (account);
//   - a round trip ships the pending results (ship): its slots stay held, counted in_flight in
//     their batch, until the database confirms them (confirm) or the link breaks and they go
//     back to pending (put_back);
//   - a batch whose every result is accounted is closed only in a round trip that carries, or
//     comes after the confirmation of, all its results: never while one of them is unconfirmed
//     on another link;
//   - results set by handlers (Job::set_result) take at most shipment_result_bytes per round
//     trip: the rest are held back (deferred) for the next one, and their batches' closes wait;
//   - a batch the database forgot (the node re-registered: stale) is not closed but freed once
//     all its results are confirmed.
// Driver thread only; it guards nothing.

#include "../../retry.hpp"
#include "node_link.hpp"
#include "node_slots.hpp"

#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

namespace ax::pg::detail {

/// Results in the binary arrays their statements take.
struct Results {
    BinaryArray ack_ids{BinaryArray::int8_oid};
    // Successes that set a result go by their own statement (ax_ack_result), so the plain
    // acknowledgement carries nothing for the feature.
    BinaryArray result_ids{BinaryArray::int8_oid};
    BinaryArray results{BinaryArray::bytea_oid};
    BinaryArray snooze_ids{BinaryArray::int8_oid};
    BinaryArray snooze_delay{BinaryArray::int8_oid};
    BinaryArray fail_ids{BinaryArray::int8_oid};
    BinaryArray fail_errors{BinaryArray::text_oid};
    BinaryArray fail_perm{BinaryArray::bool_oid};
    BinaryArray fail_delay{BinaryArray::int8_oid};
    BinaryArray release_ids{BinaryArray::int8_oid};

    [[nodiscard]] std::size_t count() const noexcept {
        return ack_ids.size() + result_ids.size() + snooze_ids.size() + fail_ids.size() +
               release_ids.size();
    }
    /// Forgets them (the arrays keep their capacity).
    void clear() {
        ack_ids.clear();
        result_ids.clear();
        results.clear();
        snooze_ids.clear();
        snooze_delay.clear();
        fail_ids.clear();
        fail_errors.clear();
        fail_perm.clear();
        fail_delay.clear();
        release_ids.clear();
    }
    void swap(Results& o) noexcept {
        std::swap(ack_ids, o.ack_ids);
        std::swap(result_ids, o.result_ids);
        std::swap(results, o.results);
        std::swap(snooze_ids, o.snooze_ids);
        std::swap(snooze_delay, o.snooze_delay);
        std::swap(fail_ids, o.fail_ids);
        std::swap(fail_errors, o.fail_errors);
        std::swap(fail_perm, o.fail_perm);
        std::swap(fail_delay, o.fail_delay);
        std::swap(release_ids, o.release_ids);
    }
};

/// Results on their way to the database: the arrays, the slots they free once confirmed and the
/// batches the same round trip closes.
struct Shipment {
    Results results;
    std::vector<std::uint32_t> slots;
    std::vector<std::uint32_t> closes;
};

/// One claimed batch and the accounting its close reports.
struct Batch {
    std::int64_t db_id = 0;
    std::unique_ptr<ClaimRows> rows; // the slots' payloads point into it
    std::uint32_t size = 0;
    std::uint32_t accounted = 0; // tasks reported or handed back (queued for acknowledgement)
    std::uint32_t confirmed = 0; // of those, acknowledged by the database
    std::uint32_t in_flight = 0; // of those, in a round trip not yet read back
    std::uint32_t deferred = 0;  // of those, results held for a later round trip (too big now)
    std::int64_t xor_ids = 0;
    bool in_use = false;
    bool stale = false; // the node re-registered: the database forgot this batch
};

/// The ledger (see the header comment).
class BatchLedger {
  public:
    explicit BatchLedger(SlotTable& slots) noexcept : slots_(slots) {}

    /// How a failed task's retry delay is drawn (the local Config's retry policy).
    void set_retry(std::chrono::nanoseconds base, std::chrono::nanoseconds jitter) noexcept {
        retry_base_ = base;
        retry_jitter_ = jitter;
    }

    /// Opens a batch for a claim's rows; returns its index.
    std::uint32_t open(std::unique_ptr<ClaimRows> rows, std::int64_t db_id) {
        std::uint32_t bi;
        if (!free_batches_.empty()) {
            bi = free_batches_.back();
            free_batches_.pop_back();
        } else {
            bi = static_cast<std::uint32_t>(batches_.size());
            batches_.emplace_back();
        }
        Batch& b = batches_[bi];
        b.in_use = true;
        b.size = rows->size();
        b.rows = std::move(rows);
        b.db_id = db_id;
        return bi;
    }
    Batch& operator[](std::uint32_t bi) noexcept { return batches_[bi]; }
    [[nodiscard]] std::size_t size() const noexcept { return batches_.size(); }

    /// The most result bytes one round trip carries (default 256 MiB): PostgreSQL refuses a
    /// parameter or message over 1 GB, so a flush of many large results (Job::set_result) goes
    /// over several round trips; a single result (at most 64 MiB) always fits.
    void set_shipment_result_bytes(std::size_t n) noexcept { shipment_result_bytes_ = n; }

    /// A slot ended (finished, or handed back unstarted): its result joins the pending ones
    /// and counts into its batch, which is queued for closing once fully accounted.
    void settle(std::uint32_t idx) {
        enqueue(idx);
        Slot& s = slots_[idx];
        Batch& b = batches_[s.batch];
        b.accounted += 1;
        b.xor_ids ^= s.id;
        if (b.accounted == b.size && !b.stale)
            pending_.closes.push_back(s.batch);
    }

    /// Results waiting for a round trip.
    [[nodiscard]] std::size_t pending_results() const noexcept { return pending_.results.count(); }
    /// Slots whose results wait for a round trip (freed once it is confirmed).
    [[nodiscard]] std::size_t pending_slots() const noexcept {
        return pending_.slots.size() + deferred_.size();
    }
    /// Anything (results, closes) waiting for a round trip.
    [[nodiscard]] bool pending() const noexcept {
        return pending_.results.count() + pending_.closes.size() + deferred_.size() > 0;
    }

    /// Moves what is ready to go into `out`: every pending result, and the closes of batches
    /// with no result in flight (the others wait). False when nothing is ready.
    bool ship(Shipment& out) {
        close_later_.clear();
        out.closes.clear();
        for (std::uint32_t bi : pending_.closes)
            (batches_[bi].in_flight == 0 && batches_[bi].deferred == 0 ? out.closes : close_later_)
                .push_back(bi);
        pending_.closes.swap(close_later_);
        if (pending_.results.count() == 0 && out.closes.empty())
            return false;
        out.results.swap(pending_.results);
        out.slots.swap(pending_.slots);
        for (std::uint32_t idx : out.slots)
            batches_[slots_[idx].batch].in_flight += 1;
        pending_result_bytes_ = 0;
        // Results held back for size go into the next shipment (their batches' closes wait).
        if (!deferred_.empty()) {
            deferred_scratch_.swap(deferred_);
            for (std::uint32_t idx : deferred_scratch_) {
                batches_[slots_[idx].batch].deferred -= 1;
                enqueue(idx);
            }
            deferred_scratch_.clear();
        }
        return true;
    }

    /// The database committed a shipment: free its slots, and the batches it closed.
    void confirm(Shipment& s) {
        for (std::uint32_t idx : s.slots) {
            Batch& b = batches_[slots_[idx].batch];
            b.confirmed += 1;
            b.in_flight -= 1;
            slots_.recycle(idx);
        }
        s.slots.clear();
        for (std::uint32_t bi : s.closes)
            release(bi);
        s.closes.clear();
        // Batches the database forgot (stale) are freed locally once all their tasks are done.
        for (std::uint32_t bi = 0; bi < batches_.size(); ++bi) {
            Batch& b = batches_[bi];
            if (b.in_use && b.stale && b.confirmed == b.size)
                release(bi);
        }
        s.results.clear();
    }

    /// A shipment's round trip was lost: its results and closes go back to pending, for the
    /// next attempt.
    void put_back(Shipment& s) {
        for (std::uint32_t idx : s.slots) {
            batches_[slots_[idx].batch].in_flight -= 1;
            enqueue(idx);
        }
        for (std::uint32_t bi : s.closes)
            pending_.closes.push_back(bi);
        s.slots.clear();
        s.closes.clear();
        s.results.clear();
    }

    /// The node re-registered: the database forgot every batch it held.
    void forget_all() noexcept {
        for (auto& b : batches_)
            if (b.in_use)
                b.stale = true;
    }
    /// The database IDs of the batches the node holds (for lease renewal).
    void held_ids(BinaryArray& ids) const {
        ids.clear();
        for (auto& b : batches_)
            if (b.in_use && !b.stale)
                ids.add_int64(b.db_id);
    }
    /// No batch is held any more.
    [[nodiscard]] bool all_closed() const noexcept {
        for (auto& b : batches_)
            if (b.in_use && !b.stale)
                return false;
        return true;
    }

  private:
    /// Queues slot `idx`'s result for the next shipment, or holds it back for a later one when
    /// its result would take the shipment past shipment_result_bytes_.
    void enqueue(std::uint32_t idx) {
        const Slot& s = slots_[idx];
        if (s.outcome == ok && s.out.has_result && s.phase() != handed_back) {
            const std::size_t n = s.out.result.size();
            if (pending_result_bytes_ > 0 && pending_result_bytes_ + n > shipment_result_bytes_) {
                deferred_.push_back(idx);
                batches_[s.batch].deferred += 1;
                return;
            }
            pending_result_bytes_ += n;
        }
        add_result(idx);
        pending_.slots.push_back(idx);
    }

    void add_result(std::uint32_t idx) {
        Slot& s = slots_[idx];
        if (s.phase() == handed_back) {
            pending_.results.release_ids.add_int64(s.id);
            return;
        }
        Results& r = pending_.results;
        switch (s.outcome) {
        case ok:
            if (s.out.has_result) {
                r.result_ids.add_int64(s.id);
                r.results.add_bytes(s.out.result);
            } else {
                r.ack_ids.add_int64(s.id);
            }
            break;
        case cancelled_outcome: // the database turns a cancel-requested task into cancelled
            r.ack_ids.add_int64(s.id);
            break;
        case snoozed_outcome:
            r.snooze_ids.add_int64(s.id);
            r.snooze_delay.add_int64(s.out.snooze_ms);
            break;
        case failed:
        case permanent: {
            r.fail_ids.add_int64(s.id);
            r.fail_errors.add_bytes(s.error);
            r.fail_perm.add_bool(s.outcome == permanent);
            const auto d = retry_delay(retry_base_, retry_jitter_, s.attempt + 1, unit_(rng_));
            r.fail_delay.add_int64(
                std::chrono::duration_cast<std::chrono::milliseconds>(d).count());
            break;
        }
        }
    }
    void release(std::uint32_t bi) {
        batches_[bi] = Batch{};
        free_batches_.push_back(bi);
    }

    SlotTable& slots_;
    std::vector<Batch> batches_;
    std::vector<std::uint32_t> free_batches_;
    Shipment pending_;
    std::vector<std::uint32_t> close_later_; // scratch of ship()
    std::vector<std::uint32_t> deferred_;    // slots whose results wait for a later shipment
    std::vector<std::uint32_t> deferred_scratch_;
    std::size_t pending_result_bytes_ = 0; // result bytes in pending_
    std::size_t shipment_result_bytes_ = std::size_t{256} << 20;
    std::chrono::nanoseconds retry_base_{std::chrono::seconds(1)};
    std::chrono::nanoseconds retry_jitter_{0};
    std::mt19937_64 rng_{std::random_device{}()};
    std::uniform_real_distribution<double> unit_{0.0, 1.0};
};

} // namespace ax::pg::detail
