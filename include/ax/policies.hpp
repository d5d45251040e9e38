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

/// The Controller policy: built once from the validated Config, then asked each controller
/// round for the worker target given what the tick measured. It answers either a plain
/// std::uint32_t (reported as reason little_law when it changes the target, hold otherwise) or
/// an ax::ControllerDecision {target, reason, forecast_rate}. The scheduler clamps the target
/// to [min_workers, max_workers]. Optional members:
///   `static constexpr const char* name`  shown as MetricsSnapshot::controller.policy
///                                        ("custom" without it);
///   `static constexpr bool fast_rounds`  true: the policy is also asked every
///                                        controller_interval / 20 (at least every
///                                        dispatch_interval), and on the next tick whenever
///                                        queued work outgrows a pool already at its target;
///                                        the saturation rule is then not applied (the policy
///                                        sees `saturated` itself). Without it the policy runs
///                                        every controller_interval and the saturation rule
///                                        steps up between rounds.
/// ax::AdaptiveController is the default; ax::LittleController is the seed's rule.
template <class C>
concept ControllerPolicy = std::constructible_from<C, const Config&> &&
    requires(C& c, const ControllerInput& in) {
    requires std::convertible_to<decltype(c(in)), std::uint32_t> ||
        std::same_as<std::remove_cvref_t<decltype(c(in))>, ControllerDecision>;
};

namespace detail {

/// A policy's answer as a decision: a plain target becomes little_law (changed) or hold.
inline ControllerDecision to_decision(const ControllerDecision& d, std::uint32_t) noexcept {
    return d;
}
template <class T>
requires std::convertible_to<T, std::uint32_t> &&
    (!std::same_as<std::remove_cvref_t<T>, ControllerDecision>)inline ControllerDecision
    to_decision(const T& target, std::uint32_t current) noexcept {
    const auto t = static_cast<std::uint32_t>(target);
    return {t, t == current ? ControllerReason::hold : ControllerReason::little_law, 0.0};
}

/// The policy's `name`, or "custom".
template <class C> constexpr const char* controller_policy_name() noexcept {
    if constexpr (requires { C::name; })
        return C::name;
    else
        return "custom";
}

/// Whether the policy asks for fast rounds (see ControllerPolicy).
template <class C> constexpr bool controller_fast_rounds() noexcept {
    if constexpr (requires { C::fast_rounds; })
        return static_cast<bool>(C::fast_rounds);
    else
        return false;
}

} // namespace detail

} // namespace ax
