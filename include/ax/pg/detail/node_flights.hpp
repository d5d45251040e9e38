// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// The flights: what each link carries between a round trip's send and its read (one Flight per
// link, NodeOptions::connections of them). A busy flight holds the shipment of results it
// acknowledges (their slots stay held until it is read back), the batches it closes, and the
// claim it asked for (its `promised` slots are kept free for it). The set picks the next free
// link round robin and the oldest busy one to read. Driver thread only; it guards nothing.

#include "node_ledger.hpp"
#include "node_link.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace ax::pg::detail {

/// One link's round trip in flight.
struct Flight {
    bool busy = false;
    bool claim = false;
    std::uint64_t seq = 0; // send order: the oldest busy flight is read first
    std::uint32_t promised = 0;
    std::array<std::uint32_t, 3> asked{};
    std::uint64_t wake_seq = 0; // the planner's wake count when its claim was sent
    std::vector<Step> steps;
    Shipment acks;

    /// Back to idle (its shipment already confirmed or put back).
    void land() noexcept {
        busy = false;
        claim = false;
        promised = 0;
        steps.clear();
    }
};

/// The flights, one per link.
class FlightSet {
  public:
    void resize(std::size_t links) { flights_.resize(links); }
    [[nodiscard]] std::size_t size() const noexcept { return flights_.size(); }
    Flight& operator[](std::size_t li) noexcept { return flights_[li]; }
    const Flight& operator[](std::size_t li) const noexcept { return flights_[li]; }

    /// The next free link in round-robin order, or size() when every link is busy.
    [[nodiscard]] std::size_t next_free() const noexcept {
        const std::size_t n = flights_.size();
        for (std::size_t k = 0; k < n; ++k) {
            const std::size_t i = (next_ + k) % n;
            if (!flights_[i].busy)
                return i;
        }
        return n;
    }
    /// Link `li`'s flight was sent: it is busy, the newest, and the next send tries the link
    /// after it.
    void took_off(std::size_t li) noexcept {
        flights_[li].busy = true;
        flights_[li].seq = ++seq_;
        next_ = (li + 1) % flights_.size();
    }
    /// The oldest busy link, or size() when none is busy.
    [[nodiscard]] std::size_t oldest_busy() const noexcept {
        std::size_t best = flights_.size();
        for (std::size_t i = 0; i < flights_.size(); ++i)
            if (flights_[i].busy &&
                (best == flights_.size() || flights_[i].seq < flights_[best].seq))
                best = i;
        return best;
    }
    [[nodiscard]] std::size_t busy() const noexcept {
        std::size_t n = 0;
        for (const Flight& f : flights_)
            n += f.busy ? 1 : 0;
        return n;
    }
    /// Slots promised to the claims in flight.
    [[nodiscard]] std::uint32_t promised() const noexcept {
        std::uint32_t n = 0;
        for (const Flight& f : flights_)
            if (f.busy)
                n += f.promised;
        return n;
    }

  private:
    std::vector<Flight> flights_;
    std::uint64_t seq_ = 0;
    std::size_t next_ = 0;
};

} // namespace ax::pg::detail
