// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// The node's counters, written by the driver (and the stats' readers on any thread), read as a
// NodeStats snapshot. Each is its own relaxed atomic: a snapshot is not one instant, and nothing
// synchronizes on them.

#include "../node_options.hpp"

#include <array>
#include <atomic>
#include <cstdint>

namespace ax::pg::detail {

struct Counters {
    using Count = std::atomic<std::uint64_t>;
    std::atomic<std::int64_t> node_id{0};
    Count claims{0}, batches{0}, empty_claims{0};
    std::array<Count, 3> claimed{};
    Count succeeded{0}, failed{0}, cancelled{0}, released{0}, snoozed{0};
    Count reconnects{0}, reclaimed_batches{0}, reclaimed_tasks{0};
    Count mismatches{0}, vacuums{0}, lease_renewals{0}, round_trips{0};
    std::atomic<std::uint32_t> last_batch{0};

    /// Adds one (relaxed).
    static void bump(Count& c, std::uint64_t n = 1) noexcept {
        c.fetch_add(n, std::memory_order_relaxed);
    }

    /// The snapshot; `depth` is the slot table's.
    [[nodiscard]] NodeStats snapshot(std::uint32_t depth) const noexcept {
        constexpr auto r = std::memory_order_relaxed;
        NodeStats s;
        s.node_id = node_id.load(r);
        s.claims = claims.load(r);
        s.batches = batches.load(r);
        s.empty_claims = empty_claims.load(r);
        for (std::size_t p = 0; p < 3; ++p)
            s.claimed[p] = claimed[p].load(r);
        s.succeeded = succeeded.load(r);
        s.failed = failed.load(r);
        s.cancelled = cancelled.load(r);
        s.released = released.load(r);
        s.snoozed = snoozed.load(r);
        s.reconnects = reconnects.load(r);
        s.reclaimed_batches = reclaimed_batches.load(r);
        s.reclaimed_tasks = reclaimed_tasks.load(r);
        s.checksum_mismatches = mismatches.load(r);
        s.vacuums = vacuums.load(r);
        s.lease_renewals = lease_renewals.load(r);
        s.round_trips = round_trips.load(r);
        s.last_batch = last_batch.load(r);
        s.depth = depth;
        return s;
    }
};

} // namespace ax::pg::detail
