// libFuzzer target: builds an ax::Config from the input, every field included, and checks that an
// invalid one is refused with a clear std::invalid_argument while a valid one runs a few tasks.
#include "fuzz_input.hpp"

#include <array>
#include <ax/scheduler.hpp>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

using ax_fuzz::Input;
using ax_fuzz::require;
using Duration = ax::Config::Duration;

// Edge values come from the limits validate() draws and the places where arithmetic on a field
// could overflow, so the fuzzer reaches both sides of every bound without having to guess them.
std::uint32_t fuzz_u32(Input& in, std::uint32_t def) {
    static constexpr std::array<std::uint32_t, 16> edges = {
        0u,          1u,
        2u,          8u,
        100u,        101u,
        1000u,       1001u,
        65536u,      65537u,
        1u << 20,    (1u << 20) + 1,
        1u << 24u,   (1u << 24) + 1,
        0x7fffffffu, std::numeric_limits<std::uint32_t>::max()};
    const std::uint8_t tag = in.u8();
    switch (tag % 4) {
    case 0:
        return def;
    case 1:
        return in.u8();
    case 2:
        return in.u32();
    default:
        return edges[(tag / 4) % edges.size()];
    }
}

Duration fuzz_duration(Input& in, Duration def) {
    using namespace std::chrono_literals;
    static constexpr std::array<Duration, 12> edges = {
        Duration{0},     Duration{-1},          Duration{1},    Duration::min(),
        Duration::max(), Duration{999'999'999}, Duration{1s},   Duration{3600s},
        Duration{3601s}, Duration{1ms},         Duration{-1ms}, Duration{100ms}};
    static constexpr std::array<std::int64_t, 4> units = {1, 1'000, 1'000'000, 1'000'000'000};
    const std::uint8_t tag = in.u8();
    switch (tag % 4) {
    case 0:
        return def;
    case 1:
        return Duration{static_cast<std::int8_t>(in.u8()) * units[(tag / 4) % units.size()]};
    case 2:
        return Duration{static_cast<std::int64_t>(in.u64())};
    default:
        return edges[(tag / 4) % edges.size()];
    }
}

double fuzz_double(Input& in, double def) {
    static constexpr std::array<double, 10> edges = {0.0,
                                                     -0.0,
                                                     1.0,
                                                     1.0 + 1e-15,
                                                     0.5,
                                                     std::numeric_limits<double>::quiet_NaN(),
                                                     std::numeric_limits<double>::infinity(),
                                                     -std::numeric_limits<double>::infinity(),
                                                     std::numeric_limits<double>::denorm_min(),
                                                     -1.0};
    const std::uint8_t tag = in.u8();
    switch (tag % 4) {
    case 0:
        return def;
    case 1:
        return in.u8() / 200.0;
    case 2: {
        const std::uint64_t bits = in.u64();
        double d;
        std::memcpy(&d, &bits, sizeof d);
        return d;
    }
    default:
        return edges[(tag / 4) % edges.size()];
    }
}

ax::Config config_from(Input& in) {
    const ax::Config d;
    ax::Config c;
    c.min_workers = fuzz_u32(in, d.min_workers);
    c.max_workers = fuzz_u32(in, d.max_workers);
    c.queue_capacity = fuzz_u32(in, d.queue_capacity);
    c.soft_limit_ratio = fuzz_double(in, d.soft_limit_ratio);
    c.weight_high = fuzz_u32(in, d.weight_high);
    c.weight_normal = fuzz_u32(in, d.weight_normal);
    c.weight_low = fuzz_u32(in, d.weight_low);
    c.max_wait = fuzz_duration(in, d.max_wait);
    c.dispatch_interval = fuzz_duration(in, d.dispatch_interval);
    c.watchdog_interval = fuzz_duration(in, d.watchdog_interval);
    c.metrics_window = fuzz_duration(in, d.metrics_window);
    c.controller_interval = fuzz_duration(in, d.controller_interval);
    c.drain_time = fuzz_duration(in, d.drain_time);
    c.max_step_up = fuzz_u32(in, d.max_step_up);
    c.max_step_down = fuzz_u32(in, d.max_step_down);
    c.scale_out_when_saturated = (in.u8() & 1) == 0;
    c.cpu_ceiling = fuzz_double(in, d.cpu_ceiling);
    c.retry_base_delay = fuzz_duration(in, d.retry_base_delay);
    c.retry_jitter = fuzz_duration(in, d.retry_jitter);
    c.retry_max = fuzz_u32(in, d.retry_max);
    c.shutdown_grace = fuzz_duration(in, d.shutdown_grace);
    c.dead_letter_capacity = fuzz_u32(in, d.dead_letter_capacity);
    c.history_capacity = fuzz_u32(in, d.history_capacity);
    c.huge_pages = (in.u8() & 1) == 0;
    return c;
}

// A refusal must say which field is wrong, so a user can fix a config from the message alone.
bool names_a_field(std::string_view what) {
    static constexpr std::string_view prefix = "ax::Config: ";
    static constexpr std::array<std::string_view, 22> fields = {
        "min_workers",          "max_workers",       "queue_capacity", "soft_limit_ratio",
        "weight_high",          "weight_normal",     "weight_low",     "max_wait",
        "dispatch_interval",    "watchdog_interval", "metrics_window", "controller_interval",
        "drain_time",           "max_step_up",       "max_step_down",  "cpu_ceiling",
        "retry_base_delay",     "retry_jitter",      "retry_max",      "shutdown_grace",
        "dead_letter_capacity", "history_capacity"};
    if (what.substr(0, prefix.size()) != prefix)
        return false;
    what.remove_prefix(prefix.size());
    for (const auto f : fields)
        if (what.substr(0, f.size()) == f)
            return true;
    return false;
}

// The validation message, or nullopt for a valid config. Anything but std::invalid_argument is a
// bug in validate() itself.
std::optional<std::string> validation_error(const ax::Config& c) {
    try {
        c.validate();
        return std::nullopt;
    } catch (const std::invalid_argument& e) {
        return std::string(e.what());
    }
}

// Shrinks a valid config until one run costs milliseconds and bounded memory, keeping it valid:
// every clamp stays inside the bounds validate() checks, and the relations between fields
// (min <= max, watchdog/controller >= dispatch) are restored after the clamps.
ax::Config make_cheap(ax::Config c) {
    using namespace std::chrono_literals;
    c.max_workers = std::min(c.max_workers, 8u);
    c.min_workers = std::min({c.min_workers, c.max_workers, 4u});
    c.queue_capacity = std::min(c.queue_capacity, 1024u);
    c.history_capacity = std::min(c.history_capacity, 1024u);
    c.dead_letter_capacity = std::min(c.dead_letter_capacity, 1024u);
    // The tick drives drain detection and retries: a long period would stall shutdown.
    c.dispatch_interval = std::min<Duration>(c.dispatch_interval, 2ms);
    c.watchdog_interval = std::clamp<Duration>(c.watchdog_interval, c.dispatch_interval, 20ms);
    c.controller_interval = std::clamp<Duration>(c.controller_interval, c.dispatch_interval, 20ms);
    c.retry_base_delay = std::min<Duration>(c.retry_base_delay, 1ms);
    c.retry_jitter = std::min<Duration>(c.retry_jitter, 1ms);
    return c;
}

int task_value(std::size_t i) {
    return static_cast<int>(i * 7 + 3);
}

void run_a_few_tasks(const ax::Config& cfg, Input& in) {
    using namespace std::chrono_literals;
    ax::Scheduler sched{cfg};
    require(sched.config().queue_capacity == cfg.queue_capacity, "config not kept");

    const std::size_t n = 1 + in.u8() % 8;
    std::vector<std::pair<std::size_t, ax::TaskHandle<int>>> ok; // (submit index, handle)
    std::vector<ax::TaskHandle<int>> failing;
    std::uint64_t refused = 0;
    for (std::size_t i = 0; i < n; ++i) {
        const auto prio = static_cast<ax::Priority>(in.u8() % 3);
        const bool fail = (in.u8() & 3) == 0;
        auto h = fail ? sched.submit([]() -> int { throw std::runtime_error("fuzz failure"); },
                                     {.priority = prio, .max_retries = 0})
                      : sched.submit([i] { return task_value(i); }, {.priority = prio});
        if (!h) {
            // A tiny queue_capacity or soft_limit_ratio refuses some; nothing else may.
            require(h.error().retryable(), "submit refused for a reason other than backpressure");
            require(h.error().capacity == cfg.queue_capacity, "refusal reports another capacity");
            ++refused;
            continue;
        }
        if (fail)
            failing.push_back(std::move(*h));
        else
            ok.emplace_back(i, std::move(*h));
    }

    for (auto& [i, h] : ok) {
        require(h.wait_for(5s), "task never finished");
        require(h.state() == ax::TaskState::succeeded, "plain task did not succeed");
    }
    for (auto& h : failing) {
        require(h.wait_for(5s), "failing task never finished");
        require(h.state() == ax::TaskState::dead_lettered, "failing task not dead-lettered");
        bool threw = false;
        try {
            (void)h.get();
        } catch (const std::runtime_error& e) {
            threw = std::string_view(e.what()) == "fuzz failure";
        }
        require(threw, "dead-lettered task did not rethrow its exception");
    }

    require(sched.shutdown(ax::ShutdownMode::drain, 5s), "drain shutdown timed out");
    const auto m = sched.metrics();
    require(m.totals.submitted == ok.size() + failing.size(), "submitted total is off");
    require(m.totals.succeeded == ok.size(), "succeeded total is off");
    require(m.totals.dead_lettered == failing.size(), "dead-lettered total is off");
    require(m.totals.cancelled == 0, "cancelled total is off");
    require(m.totals.rejected == refused, "rejected total is off");
    // Values are read after the join: a handle must outlive the scheduler's threads intact.
    for (auto& [i, h] : ok)
        require(h.get() == task_value(i), "a task returned another task's value");
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    Input in(data, size);
    const ax::Config cfg = config_from(in);
    const auto error = validation_error(cfg);
    if (error) {
        require(names_a_field(*error), "Config error does not name a field");
        // The scheduler must refuse the same config with the same message, before starting
        // anything.
        bool same = false;
        try {
            ax::Scheduler sched{cfg};
        } catch (const std::invalid_argument& e) {
            same = *error == e.what();
        }
        require(same, "Scheduler accepted a config validate() refused, or said something else");
        return 0;
    }
    // What validate() lets through must at least not make the core divide by zero or index an
    // empty buffer.
    require(cfg.max_workers >= 1 && cfg.min_workers <= cfg.max_workers, "worker bounds accepted");
    require(cfg.queue_capacity >= 1, "zero queue_capacity accepted");
    require(cfg.soft_limit_ratio > 0.0 && cfg.soft_limit_ratio <= 1.0, "soft_limit_ratio accepted");
    require(cfg.dispatch_interval > Duration::zero(), "dispatch_interval accepted");
    require(cfg.window_slots() >= 1, "empty metrics window accepted");

    const ax::Config cheap = make_cheap(cfg);
    require(!validation_error(cheap), "make_cheap broke a valid config (harness bug)");
    run_a_few_tasks(cheap, in);
    return 0;
}
