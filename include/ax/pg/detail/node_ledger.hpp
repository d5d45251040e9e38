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
    BinaryArray fail_ids{BinaryArray::int8_oid};
    BinaryArray fail_errors{BinaryArray::text_oid};
    BinaryArray fail_perm{BinaryArray::bool_oid};
    BinaryArray fail_delay{BinaryArray::int8_oid};
    BinaryArray release_ids{BinaryArray::int8_oid};

    [[nodiscard]] std::size_t count() const noexcept {
        return ack_ids.size() + fail_ids.size() + release_ids.size();
    }
    /// Forgets them (the arrays keep their capacity).
    void clear() {
        ack_ids.clear();
        fail_ids.clear();
        fail_errors.clear();
        fail_perm.clear();
        fail_delay.clear();
        release_ids.clear();
    }
    void swap(Results& o) noexcept {
        std::swap(ack_ids, o.ack_ids);
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

    /// A slot ended (finished, or handed back unstarted): its result joins the pending ones
    /// and counts into its batch, which is queued for closing once fully accounted.
    void settle(std::uint32_t idx) {
        add_result(idx);
        Slot& s = slots_[idx];
        Batch& b = batches_[s.batch];
        pending_.slots.push_back(idx);
        b.accounted += 1;
        b.xor_ids ^= s.id;
        if (b.accounted == b.size && !b.stale)
            pending_.closes.push_back(s.batch);
    }

    /// Results waiting for a round trip.
    [[nodiscard]] std::size_t pending_results() const noexcept { return pending_.results.count(); }
    /// Slots whose results wait for a round trip (freed once it is confirmed).
    [[nodiscard]] std::size_t pending_slots() const noexcept { return pending_.slots.size(); }
    /// Anything (results, closes) waiting for a round trip.
    [[nodiscard]] bool pending() const noexcept {
        return pending_.results.count() + pending_.closes.size() > 0;
    }

    /// Moves what is ready to go into `out`: every pending result, and the closes of batches
    /// with no result in flight (the others wait). False when nothing is ready.
    bool ship(Shipment& out) {
        close_later_.clear();
        out.closes.clear();
        for (std::uint32_t bi : pending_.closes)
            (batches_[bi].in_flight == 0 ? out.closes : close_later_).push_back(bi);
        pending_.closes.swap(close_later_);
        if (pending_.results.count() == 0 && out.closes.empty())
            return false;
        out.results.swap(pending_.results);
        out.slots.swap(pending_.slots);
        for (std::uint32_t idx : out.slots)
            batches_[slots_[idx].batch].in_flight += 1;
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
            add_result(idx);
            pending_.slots.push_back(idx);
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
    void add_result(std::uint32_t idx) {
        Slot& s = slots_[idx];
        if (s.phase() == handed_back) {
            pending_.results.release_ids.add_int64(s.id);
            return;
        }
        Results& r = pending_.results;
        switch (s.outcome) {
        case ok:
        case cancelled_outcome: // the database turns a cancel-requested task into cancelled
            r.ack_ids.add_int64(s.id);
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
    std::chrono::nanoseconds retry_base_{std::chrono::seconds(1)};
    std::chrono::nanoseconds retry_jitter_{0};
    std::mt19937_64 rng_{std::random_device{}()};
    std::uniform_real_distribution<double> unit_{0.0, 1.0};
};

} // namespace ax::pg::detail
