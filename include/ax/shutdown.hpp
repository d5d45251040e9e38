// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include <cstdint>

namespace ax {

/// How shutdown() treats work that has not finished.
enum class ShutdownMode : std::uint8_t {
    drain,  ///< Refuse new submits, finish everything queued and every retry, then stop.
    cancel, ///< Refuse new submits, cancel queued and retry-waiting tasks, ask running ones to
            ///< stop.
};

} // namespace ax
