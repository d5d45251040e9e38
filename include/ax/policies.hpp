// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include "config.hpp"
#include "controller.hpp"

#include <chrono>
#include <concepts>
#include <cstdint>
#include <type_traits>

/// The policy contracts of ax::Scheduler as C++20 concepts, so a policy that does not fit is
/// refused where it is named, with the requirement it misses, instead of deep in the core.
namespace ax {

/// The Clock policy: a std::chrono clock with a static now() (std::chrono::steady_clock in
/// production, ax::ManualClock in tests). The scheduler keeps its times as nanoseconds of it.
template <class C>
concept SchedulerClock = requires {
    typename C::duration;
    typename C::time_point;
    { C::now() } -> std::convertible_to<typename C::time_point>;
    std::chrono::duration_cast<std::chrono::nanoseconds>(C::now().time_since_epoch());
};

/// The Controller policy: built once from the validated Config, then asked each
/// controller_interval for the worker target given what the tick measured (the scheduler clamps
/// the answer to [min_workers, max_workers]). ax::LittleController is the default.
template <class C>
concept ControllerPolicy = std::constructible_from<C, const Config&> &&
    requires(C& c, const ControllerInput& in) {
    { c(in) } -> std::convertible_to<std::uint32_t>;
};

} // namespace ax
