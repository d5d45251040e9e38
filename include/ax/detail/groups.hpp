// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include "../groups.hpp"
#include "../priority_ring.hpp"
#include "../task.hpp"
#include "../tuning.hpp"
#include "slab.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ax::detail {

/// A std::atomic that copies its value (GroupState stays a value type for the pure tests; the
/// dispatcher never copies a live one).
template <class T> struct CopyableAtomic : std::atomic<T> {
    CopyableAtomic() noexcept : std::atomic<T>(T{}) {}
    CopyableAtomic(const CopyableAtomic& o) noexcept
        : std::atomic<T>(o.load(std::memory_order_relaxed)) {}
    CopyableAtomic& operator=(const CopyableAtomic& o) noexcept {
        this->store(o.load(std::memory_order_relaxed), std::memory_order_relaxed);
        return *this;
    }
};

/// One group's limit, its tasks reserved or running, the tasks parked over its capacity, and its
/// circuit breaker. No lock of its own: the Dispatcher owns every GroupState and touches it only
/// under the dispatch lock. The breaker transitions are pure (no clock, no lock), so they are
/// tested on their own.
struct GroupState {
    std::uint32_t limit = 0;
    std::uint32_t active = 0;
    IntrusiveFifo<SlabLinks> parked;
    // Circuit breaker (off unless set_group_breaker enabled it).
    bool breaker_on = false;
    BreakerOptions breaker;
    BreakerState state = BreakerState::closed;
    std::uint32_t attempts = 0;
    std::uint32_t failures = 0;
    std::int64_t since_ns = 0; // window start while closed, opening time while open
    // Lock-free mirrors for admission (written under the dispatch lock, or, for `held`, by
    // whoever ends a parked task):
    /// While the breaker is open: the end of its cool-down (0 otherwise). Submits to the group
    /// before then are refused with Errc::breaker_open.
    CopyableAtomic<std::int64_t> open_until_ns;
    /// The group's tasks queued (admitted, re-queued for a retry or released as a join, and
    /// not yet started or cancelled): what Config::group_queue_capacity bounds at admission.
    CopyableAtomic<std::uint32_t> queued;
    /// Of those, the ones counted out of the shared queue (parked_bit set): parked, or let back
    /// into the lanes and not yet started.
    CopyableAtomic<std::uint32_t> held;

    /// How many of the group's tasks may be dispatched at once right now.
    [[nodiscard]] std::uint32_t capacity() const noexcept {
        std::uint32_t cap = limit == 0 ? UINT32_MAX : limit;
        if (breaker_on && state == BreakerState::open)
            return 0;
        if (breaker_on && state == BreakerState::half_open)
            cap = std::min(cap, std::max<std::uint32_t>(breaker.probes, 1));
        return cap;
    }

    /// Feeds one attempt's outcome to the breaker: closed opens once failures reach
    /// failure_ratio of at least min_attempts attempts; half-open closes on a success and
    /// re-opens on a failure; open ignores attempts that started before it opened.
    void on_attempt(bool ok, std::int64_t now) noexcept {
        if (!breaker_on)
            return;
        switch (state) {
        case BreakerState::closed:
            ++attempts;
            failures += ok ? 0 : 1;
            if (attempts >= breaker.min_attempts &&
                static_cast<double>(failures) >=
                    breaker.failure_ratio * static_cast<double>(attempts)) {
                state = BreakerState::open;
                since_ns = now;
            }
            break;
        case BreakerState::half_open:
            if (ok) {
                state = BreakerState::closed;
                attempts = failures = 0;
            } else {
                state = BreakerState::open;
            }
            since_ns = now;
            break;
        case BreakerState::open:
            break; // an attempt that started before the breaker opened
        }
        sync_gate();
    }

    /// Publishes the end of an open breaker's cool-down for admission (0: not open).
    void sync_gate() noexcept {
        std::int64_t until = 0;
        if (breaker_on && state == BreakerState::open) {
            const std::int64_t c = std::max<std::int64_t>(breaker.cooldown.count(), 0);
            until = since_ns > INT64_MAX - c ? INT64_MAX : since_ns + c;
            until = std::max<std::int64_t>(until, 1);
        }
        open_until_ns.store(until, std::memory_order_release);
    }

    /// The tick: an open breaker whose cool-down is over goes half-open (true: parked tasks may
    /// flow now); a closed one starts a new counting window every `window_ns`.
    bool on_tick(std::int64_t now, std::int64_t window_ns) noexcept {
        if (!breaker_on)
            return false;
        if (state == BreakerState::open && now - since_ns >= breaker.cooldown.count()) {
            state = BreakerState::half_open;
            sync_gate();
            return true;
        }
        if (state == BreakerState::closed && now - since_ns >= window_ns) {
            attempts = failures = 0;
            since_ns = now;
        }
        return false;
    }

    /// Turns the breaker on with `options` (or off with nullptr), closed, counting from `now`.
    void set_breaker(const BreakerOptions* options, std::int64_t now) noexcept {
        breaker_on = options != nullptr;
        if (options != nullptr)
            breaker = *options;
        state = BreakerState::closed;
        attempts = failures = 0;
        since_ns = now;
        sync_gate();
    }

    /// The figures group_stats() reports.
    [[nodiscard]] GroupStats stats() const noexcept {
        GroupStats st;
        st.limit = limit;
        st.active = active;
        st.waiting = static_cast<std::uint32_t>(parked.size());
        st.held = held.load(std::memory_order_acquire);
        st.queued = queued.load(std::memory_order_acquire);
        st.breaker_enabled = breaker_on;
        st.breaker = state;
        st.recent_attempts = attempts;
        st.recent_failures = failures;
        return st;
    }
};

/// Throws std::invalid_argument unless `o` is a valid breaker configuration.
inline void validate_breaker(const BreakerOptions& o) {
    if (!(o.failure_ratio > 0.0 && o.failure_ratio <= 1.0) || o.min_attempts == 0 ||
        o.cooldown.count() < 0)
        throw std::invalid_argument(
            "ax: BreakerOptions needs failure_ratio in (0, 1], min_attempts >= 1 and a "
            "non-negative cooldown");
}

/// Every group's GroupState, indexed by GroupId (0 unused), allocated Tuning::group_chunk at a
/// time when a group is registered: a scheduler that never registers one pays a pointer table
/// (17 pointers), not the state of 1,024 groups. Chunks are installed lock-free and never move
/// or go away, so a registered group's state can be used without any lock but the owner's.
class GroupTable {
  public:
    static constexpr std::size_t chunks = Tuning::max_groups / Tuning::group_chunk + 1;

    GroupTable() = default;
    GroupTable(const GroupTable&) = delete;
    GroupTable& operator=(const GroupTable&) = delete;
    ~GroupTable() {
        for (auto& c : chunks_)
            delete[] c.load(std::memory_order_relaxed);
    }

    /// Makes sure group `g`'s state exists (registration, before the group's ID is published).
    void ensure(std::size_t g) {
        auto& slot = chunks_[g / Tuning::group_chunk];
        if (slot.load(std::memory_order_acquire) != nullptr)
            return;
        auto* fresh = new GroupState[Tuning::group_chunk];
        GroupState* expected = nullptr;
        if (!slot.compare_exchange_strong(expected, fresh, std::memory_order_acq_rel))
            delete[] fresh;
    }

    /// State of a group made by ensure().
    [[nodiscard]] GroupState& operator[](std::size_t g) const noexcept {
        return chunks_[g / Tuning::group_chunk].load(
            std::memory_order_acquire)[g % Tuning::group_chunk];
    }
    /// State of group `g`, or null when nothing of its chunk was ever registered.
    [[nodiscard]] GroupState* find(std::size_t g) const noexcept {
        if (g == 0 || g > Tuning::max_groups)
            return nullptr;
        GroupState* c = chunks_[g / Tuning::group_chunk].load(std::memory_order_acquire);
        return c != nullptr ? &c[g % Tuning::group_chunk] : nullptr;
    }
    /// Bytes of group state allocated (for tests of the "no groups, no cost" promise).
    [[nodiscard]] std::size_t allocated_bytes() const noexcept {
        std::size_t n = 0;
        for (const auto& c : chunks_)
            n += c.load(std::memory_order_acquire) != nullptr
                     ? sizeof(GroupState) * Tuning::group_chunk
                     : 0;
        return n;
    }

  private:
    std::array<std::atomic<GroupState*>, chunks> chunks_{};
};

/// The registered groups' names (GroupId = position + 1).
///
/// Lock it owns: `mutex_` (the groups mutex) guards `names_`. Taken by registration, lookups,
/// validation of a submit's group, metrics() and the tick (for the count); never held with
/// another lock: callers copy what they need and let go before taking the dispatch lock.
class GroupRegistry {
  public:
    /// The ID of `name`, registering it on first use; `make_state(id)` runs (under the lock)
    /// before a new ID is published, so no submit can name a group whose state is missing.
    /// Throws std::length_error past Tuning::max_groups.
    template <class MakeState> GroupId add(std::string_view name, MakeState&& make_state) {
        std::lock_guard lock(mutex_);
        for (std::size_t i = 0; i < names_.size(); ++i)
            if (names_[i] == name)
                return GroupId{static_cast<std::uint16_t>(i + 1)};
        if (names_.size() >= Tuning::max_groups)
            throw std::length_error("ax: too many groups (at most " +
                                    std::to_string(Tuning::max_groups) + ")");
        make_state(names_.size() + 1);
        names_.emplace_back(name);
        return GroupId{static_cast<std::uint16_t>(names_.size())};
    }

    /// Whether `g` was registered.
    [[nodiscard]] bool registered(GroupId g) const {
        std::lock_guard lock(mutex_);
        return g.value != 0 && g.value <= names_.size();
    }
    /// Throws std::invalid_argument unless `g` was registered.
    void check(GroupId g) const {
        if (!registered(g))
            throw std::invalid_argument("ax: group " + std::to_string(g.value) +
                                        " is not registered");
    }
    /// Groups registered so far.
    [[nodiscard]] std::size_t count() const {
        std::lock_guard lock(mutex_);
        return names_.size();
    }
    /// The name of `g` ("" if unregistered).
    [[nodiscard]] std::string name(GroupId g) const {
        std::lock_guard lock(mutex_);
        if (g.value == 0 || g.value > names_.size())
            return {};
        return names_[g.value - 1];
    }
    /// Every name, in ID order.
    [[nodiscard]] std::vector<std::string> names() const {
        std::lock_guard lock(mutex_);
        return names_;
    }

  private:
    mutable std::mutex mutex_;
    std::vector<std::string> names_; // under mutex_
};

} // namespace ax::detail
