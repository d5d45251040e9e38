// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace ax::detail {

/// A small number that tells threads apart, for counters split into stripes so that threads
/// counting at the same time write different cache lines. Each thread draws its number once,
/// from a process-wide sequence, the first time it asks; it is only a hint (two threads may
/// share a stripe), never an identity, so it needs no cleanup when a thread or a scheduler
/// ends. Constant-initialised thread_local: reading it is one load, no TLS wrapper call.
inline thread_local std::uint32_t thread_stripe_plus_one = 0;

/// The process-wide sequence those numbers come from: one for every stripe count, since a
/// thread keeps the number it drew first whichever count it asked for (a counter per count
/// handed two threads the same number, and so the same stripe of everything striped).
inline std::atomic<std::uint32_t> thread_stripe_sequence{0};

/// This thread's stripe among `Stripes` (a power of two).
template <std::size_t Stripes> [[nodiscard]] inline std::size_t thread_stripe() noexcept {
    static_assert(Stripes != 0 && (Stripes & (Stripes - 1)) == 0, "a power of two");
    std::uint32_t s = thread_stripe_plus_one;
    if (s == 0) [[unlikely]] {
        s = thread_stripe_sequence.fetch_add(1, std::memory_order_relaxed) + 1;
        thread_stripe_plus_one = s;
    }
    return (s - 1) & (Stripes - 1);
}

} // namespace ax::detail
