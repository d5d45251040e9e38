// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace ax {

/// Why a submit was refused. Every refusal is reported: ax never drops a task silently.
enum class Errc : std::uint8_t {
    queue_full = 1,  ///< The queue holds queue_capacity tasks (seed: ErrQueueFull).
    busy,            ///< Soft limit: queue at soft_limit_ratio of capacity, normal/low refused.
    shutting_down,   ///< shutdown() has begun or the scheduler is being destroyed.
    invalid_options, ///< The SubmitOptions are invalid (see SubmitError::message()).
    too_many_tasks,  ///< Task records exhausted: the caller holds millions of live handles.
    /// The group's circuit breaker is open: its submits fail fast for the rest of the cool-down
    /// (SubmitError::retry_after says how long).
    breaker_open,
    /// The group holds Config::group_queue_capacity tasks back (over its limit or behind its
    /// breaker); other groups are not affected.
    group_full,
};

/// The seed's names for the two backpressure errors, kept so its readers find them.
inline constexpr Errc ErrQueueFull = Errc::queue_full;
/// Soft "server busy" refusal with a Retry-After hint (seed §3.4).
inline constexpr Errc ErrBusy = Errc::busy;

/// std::error_category for Errc, so SubmitError composes with std::error_code based code.
class ErrorCategory final : public std::error_category {
  public:
    [[nodiscard]] const char* name() const noexcept override { return "ax"; }
    [[nodiscard]] std::string message(int code) const override {
        if (code < static_cast<int>(Errc::queue_full) || code > static_cast<int>(Errc::group_full))
            return "unknown ax error";
        switch (static_cast<Errc>(code)) {
        case Errc::queue_full:
            return "queue full";
        case Errc::busy:
            return "busy: queue above its soft limit";
        case Errc::shutting_down:
            return "scheduler is shutting down";
        case Errc::invalid_options:
            return "invalid submit options";
        case Errc::too_many_tasks:
            return "too many live task records";
        case Errc::breaker_open:
            return "the group's circuit breaker is open";
        case Errc::group_full:
            return "the group holds its limit of queued tasks";
        }
        return "unknown ax error";
    }
};

/// The single ErrorCategory instance.
inline const std::error_category& error_category() noexcept {
    static const ErrorCategory category;
    return category;
}

/// Makes std::error_code from Errc (found by ADL).
inline std::error_code make_error_code(Errc e) noexcept {
    return {static_cast<int>(e), error_category()};
}

/// What submit returns instead of a handle: the reason plus what a producer needs to back off.
struct SubmitError {
    Errc code{};
    /// Tasks queued (all priorities) when the submit was refused; for group_full, the tasks
    /// the group holds.
    std::uint32_t queue_length = 0;
    /// The queue's capacity (Config::queue_capacity); for group_full the group's bound.
    std::uint32_t capacity = 0;
    /// How long to wait before submitting again, from the measured drain rate: the time the
    /// workers need to free the slot this submit wanted; for queue_full and busy at least
    /// Tuning::retry_after_floor (1 ms) while the queue holds that much work above its room
    /// mark, so that a producer obeying it comes back to room for a run of submits rather than
    /// one (at least 1 us: when the queue drains in microseconds the hint says so; a hint
    /// shorter than a sleep's granularity means "try again now", or use submit_wait /
    /// post_wait, which park until there is room). For breaker_open, the rest of the
    /// cool-down. Zero for errors retrying cannot fix.
    std::chrono::microseconds retry_after{0};
    /// For invalid_options: which option and why. Empty otherwise.
    std::string detail;

    /// True for refusals worth retrying after retry_after (queue_full, busy, breaker_open,
    /// group_full).
    [[nodiscard]] bool retryable() const noexcept {
        return code == Errc::queue_full || code == Errc::busy || code == Errc::breaker_open ||
               code == Errc::group_full;
    }
    /// The code as a std::error_code.
    [[nodiscard]] std::error_code error_code() const noexcept { return make_error_code(code); }
    /// One line for logs, e.g. "queue full (150/150 queued, retry after 1200 us)".
    [[nodiscard]] std::string message() const {
        std::string m = error_category().message(static_cast<int>(code));
        if (code == Errc::breaker_open) {
            m += " (retry after " + std::to_string(retry_after.count()) + " us)";
        } else if (retryable()) {
            m += " (" + std::to_string(queue_length) + "/" + std::to_string(capacity) +
                 " queued, retry after " + std::to_string(retry_after.count()) + " us)";
        }
        if (!detail.empty())
            m += ": " + detail;
        return m;
    }
};

/// Thrown by TaskHandle::get() when the task was cancelled before it could produce a value.
class TaskCancelled : public std::runtime_error {
  public:
    TaskCancelled() : std::runtime_error("ax: task cancelled") {}
};

/// Thrown by TaskHandle::get() when the task's last attempt failed without a stored exception
/// (for example a timeout of a body that never returned).
class TaskFailed : public std::runtime_error {
  public:
    explicit TaskFailed(const std::string& what) : std::runtime_error(what) {}
};

/// What a task's handle rethrows (and query's last_error says) when its attempt outlived its
/// timeout without a heartbeat. The attempt counts as failed and is retried like any failure.
class TaskTimedOut : public std::runtime_error {
  public:
    explicit TaskTimedOut(std::uint32_t timeout_ms)
        : std::runtime_error("ax: attempt timed out after " + std::to_string(timeout_ms) +
                             " ms without a heartbeat") {}
};

/// Throw this (or a type derived from it) from a task to fail it for good: no retry is attempted,
/// the task is dead-lettered at once. For errors retrying cannot fix (bad input, missing file).
class PermanentError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

/// Either a value or a SubmitError; the C++20 stand-in for std::expected that submit returns.
template <class T> class [[nodiscard]] Expected {
  public:
    /// Holds a value.
    Expected(T value) : v_(std::in_place_index<0>, std::move(value)) {}
    /// Holds an error.
    Expected(SubmitError error) : v_(std::in_place_index<1>, std::move(error)) {}

    /// True when it holds a value.
    [[nodiscard]] bool has_value() const noexcept { return v_.index() == 0; }
    /// Same as has_value().
    explicit operator bool() const noexcept { return has_value(); }

    /// The value; throws std::logic_error if it holds an error.
    T& value() & { return check(), std::get<0>(v_); }
    /// The value, moved out; throws std::logic_error if it holds an error.
    T&& value() && { return check(), std::move(std::get<0>(v_)); }
    T& operator*() & { return value(); }
    T&& operator*() && { return std::move(*this).value(); }
    T* operator->() { return &value(); }

    /// The error; throws std::logic_error if it holds a value.
    [[nodiscard]] const SubmitError& error() const {
        if (has_value())
            throw std::logic_error("ax::Expected: error() on a value");
        return std::get<1>(v_);
    }

  private:
    void check() const {
        if (!has_value())
            throw std::logic_error("ax::Expected: value() on an error: " +
                                   std::get<1>(v_).message());
    }
    std::variant<T, SubmitError> v_;
};

/// What post_many / submit_many do when the queue has room for only part of a batch.
enum class BatchPolicy : std::uint8_t {
    partial,        ///< Admit the longest front of the batch that fits; refuse the rest.
    all_or_nothing, ///< Admit the whole batch or none of it.
};

/// What post_many / submit_many return: the admitted front of the batch, in order (IDs or
/// handles), and, when not everything was admitted, why the rest was refused. The callables of
/// the admitted front were moved from; those of the refused rest are untouched, so the caller
/// can submit them again (nothing is dropped silently).
template <class T> struct BatchResult {
    std::vector<T> admitted;
    std::optional<SubmitError> error;
    /// True when the whole batch was admitted.
    [[nodiscard]] bool complete() const noexcept { return !error.has_value(); }
};

} // namespace ax

template <> struct std::is_error_code_enum<ax::Errc> : std::true_type {};
