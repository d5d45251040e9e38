// examples/metrics_server: a changing workload on ax, served by ax::http::MetricsServer
// (/metrics, /snapshot.json, the dashboard at /) with every task event logged as a JSON line.
//
//   ax_metrics_server [--port N] [--seconds S] [--host H] [--events PATH]
//
// --port N     port to listen on (default 9464; 0 = a free one). Prints
//              "listening on http://HOST:PORT" on one line, flushed, once serving.
// --seconds S  run for S seconds, then exit cleanly (default 0: until SIGINT or SIGTERM).
// --host H     address to bind (default 127.0.0.1).
// --events P   where the JSON event lines go: "-" for stdout (default), or a file (appended).
//
// The workload repeats a 20-second cycle: a steady trickle of short tasks in all three
// priorities, a burst every 5 s (large enough to hit the queue's limit, so some submits are
// refused), tasks that fail once and succeed on their retry, tasks that always fail and end as
// dead letters, one stuck task per cycle (at 2 s) that the watchdog times out, and a "payments"
// group limited to 2 concurrent tasks whose circuit breaker opens while the group fails (from 4 s
// to 12 s of each cycle) and closes again once it recovers.
#include <algorithm>
#include <atomic>
#include <ax/http/event_log.hpp>
#include <ax/http/metrics_server.hpp>
#include <ax/scheduler.hpp>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>

namespace {

using namespace std::chrono_literals;

std::atomic<bool> stop_requested{false};

extern "C" void on_signal(int) {
    stop_requested.store(true);
}

struct Options {
    int port = 9464;
    long seconds = 0;
    std::string host = "127.0.0.1";
    std::string events = "-";
};

[[noreturn]] void usage(const std::string& why) {
    std::fprintf(stderr,
                 "ax_metrics_server: %s\n"
                 "usage: ax_metrics_server [--port N] [--seconds S] [--host H] [--events PATH]\n",
                 why.c_str());
    std::exit(2);
}

long parse_number(std::string_view flag, std::string_view text, long lo, long hi) {
    long v = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc{} || end != text.data() + text.size() || v < lo || v > hi)
        usage(std::string(flag) + " wants a whole number in [" + std::to_string(lo) + ", " +
              std::to_string(hi) + "], got '" + std::string(text) + "'");
    return v;
}

Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string_view a = argv[i];
        const auto value = [&]() -> std::string_view {
            if (i + 1 >= argc)
                usage(std::string(a) + " needs a value");
            return argv[++i];
        };
        if (a == "--port")
            o.port = static_cast<int>(parse_number(a, value(), 0, 65535));
        else if (a == "--seconds")
            o.seconds = parse_number(a, value(), 0, 365L * 24 * 3600);
        else if (a == "--host")
            o.host = value();
        else if (a == "--events")
            o.events = value();
        else if (a == "--help" || a == "-h")
            usage("a demo workload served on /metrics, /snapshot.json and /");
        else
            usage("unknown argument '" + std::string(a) + "'");
    }
    return o;
}

/// Sleeps `d` in small steps, returning early once a stop is requested.
void nap(std::chrono::milliseconds d, const ax::TaskContext& ctx) {
    const auto until = std::chrono::steady_clock::now() + d;
    while (std::chrono::steady_clock::now() < until && !ctx.stop_requested())
        std::this_thread::sleep_for(
            std::min<std::chrono::nanoseconds>(1ms, until - std::chrono::steady_clock::now()));
}

/// The workload: submits for as long as `running` holds (see the file comment).
void drive(ax::Scheduler<>& sched, ax::GroupId payments, const std::atomic<bool>& running) {
    std::mt19937 rng(42);
    std::uniform_int_distribution<int> percent(0, 99);
    std::uniform_int_distribution<int> work_ms(1, 25);
    const auto start = std::chrono::steady_clock::now();
    std::uint64_t n = 0;
    long last_burst = -1, last_stuck = -1;
    while (running.load()) {
        const auto elapsed = std::chrono::steady_clock::now() - start;
        const long sec =
            static_cast<long>(std::chrono::duration_cast<std::chrono::seconds>(elapsed).count());
        const long in_cycle = sec % 20;
        const bool payments_failing = in_cycle >= 4 && in_cycle < 12;

        // The trickle: about 60 tasks a second, in all lanes, some failing.
        for (int k = 0; k < 6; ++k, ++n) {
            const int roll = percent(rng);
            const auto prio = roll < 20 ? ax::Priority::high
                                        : (roll < 80 ? ax::Priority::normal : ax::Priority::low);
            const auto ms = std::chrono::milliseconds(work_ms(rng));
            const int fate = percent(rng);
            const std::string name = "job-" + std::to_string(n);
            if (fate < 8) { // fails once, succeeds on the retry
                (void)sched.post(
                    [ms](ax::TaskContext& ctx) {
                        nap(ms, ctx);
                        if (ctx.attempt() == 1)
                            throw std::runtime_error("upstream timed out (transient)");
                    },
                    {.name = name, .priority = prio, .max_retries = 2});
            } else if (fate < 10) { // always fails: retried, then dead-lettered
                (void)sched.post(
                    [ms](ax::TaskContext& ctx) {
                        nap(ms, ctx);
                        throw std::invalid_argument("malformed record \"#" +
                                                    std::to_string(ctx.attempt()) + "\"");
                    },
                    {.name = name, .priority = prio, .max_retries = 1});
            } else {
                (void)sched.post([ms](ax::TaskContext& ctx) { nap(ms, ctx); },
                                 {.name = name, .priority = prio});
            }
        }
        // The payments group: limited to 2 at once; fails hard from 4 s to 12 s of each cycle.
        {
            ++n;
            (void)sched.post(
                [payments_failing](ax::TaskContext& ctx) {
                    nap(15ms, ctx);
                    if (payments_failing)
                        throw std::runtime_error("payment gateway 503");
                },
                {.name = "payment-" + std::to_string(n), .max_retries = 0, .group = payments});
        }
        // A burst every 5 s: more than the queue holds, so some submits are refused.
        if (sec % 5 == 0 && sec != last_burst) {
            last_burst = sec;
            for (int k = 0; k < 400; ++k, ++n)
                (void)sched.post(
                    [](ax::TaskContext& ctx) { nap(5ms, ctx); },
                    {.name = "burst-" + std::to_string(n), .priority = ax::Priority::low});
        }
        // One stuck task per cycle: ignores its work until the watchdog's timeout stops it.
        if (in_cycle == 2 && sec != last_stuck) {
            last_stuck = sec;
            (void)sched.post(
                [](ax::TaskContext& ctx) {
                    while (!ctx.stop_requested())
                        std::this_thread::sleep_for(1ms);
                },
                {.name = "stuck-export", .timeout = 800ms, .max_retries = 0});
        }
        std::this_thread::sleep_for(100ms);
    }
}

} // namespace

int main(int argc, char** argv) {
    const Options opt = parse(argc, argv);

    std::ofstream events_file;
    if (opt.events != "-") {
        events_file.open(opt.events, std::ios::app | std::ios::binary);
        if (!events_file)
            usage("cannot open --events file '" + opt.events + "': " + std::strerror(errno));
    }
    std::ostream& events = opt.events == "-" ? std::cout : events_file;
    ax::http::JsonEventLog log(events);

    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGINT, &sa, nullptr);
    ::sigaction(SIGTERM, &sa, nullptr);

    ax::Config cfg;
    cfg.min_workers = 2;
    cfg.max_workers = 16;
    cfg.queue_capacity = 256;
    cfg.retry_base_delay = 100ms;
    cfg.shutdown_grace = 2s;
    ax::Scheduler sched{cfg, log.hooks()};
    const ax::GroupId payments = sched.group("payments");
    sched.set_group_limit(payments, 2);
    sched.set_group_breaker(
        payments,
        ax::BreakerOptions{.failure_ratio = 0.3, .min_attempts = 10, .cooldown = 3s, .probes = 1});

    try {
        ax::http::MetricsServer server{sched, {.host = opt.host, .port = opt.port}};
        // Written before the workload starts, so no event line can interleave with it.
        std::cout << "listening on " << server.url() << std::endl;

        std::atomic<bool> running{true};
        std::thread driver([&] { drive(sched, payments, running); });
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(opt.seconds);
        while (!stop_requested.load() &&
               (opt.seconds == 0 || std::chrono::steady_clock::now() < deadline))
            std::this_thread::sleep_for(50ms);
        running.store(false);
        driver.join();
        server.stop();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "ax_metrics_server: %s\n", e.what());
        return 1;
    }
    sched.shutdown(ax::ShutdownMode::cancel, 5s);
    return 0;
}
