// ax benchmarks — ax_isolation: a healthy stream beside a failing group (issue 31).
//
// The workload of the issue, with the default Config (queue 150): a group `payments` with a
// circuit breaker (default BreakerOptions) and a limit of 4 whose downstream is down (every
// attempt throws after 1 ms), posted at 200/s; beside it a healthy stream of 5 ms tasks at
// 200/s from a producer that obeys retry_after (it sleeps the hint and retries the same task).
// Each round runs the healthy stream alone and beside the failing group, alternating which goes
// first; the table reports, per side, the median over rounds of the healthy tasks finished per
// second and their p50 / p99 latency (submit to end, refusals and waits included), plus the
// failing group's refusals by code.
//
//   ax_isolation [--rounds N] [--seconds S]
// SPDX-License-Identifier: MIT

#include "ax/scheduler.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Result {
    double healthy_per_s = 0;
    double p50_ms = 0;
    double p99_ms = 0;
    std::uint64_t failing_admitted = 0;
    std::map<std::string, std::uint64_t> failing_refused;
};

double percentile(std::vector<double> v, double q) {
    if (v.empty())
        return 0;
    std::sort(v.begin(), v.end());
    return v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1))];
}

Result run(bool with_failing, double seconds) {
    ax::Scheduler<> sched;
    const auto payments = sched.group("payments");
    sched.set_group_limit(payments, 4);
    sched.set_group_breaker(payments, ax::BreakerOptions{});
    std::atomic<bool> stop{false};
    Result res;
    std::thread failing;
    if (with_failing)
        failing = std::thread([&] {
            auto next = Clock::now();
            while (!stop.load()) {
                const auto r = sched.post(
                    [] {
                        std::this_thread::sleep_for(std::chrono::milliseconds(1));
                        throw std::runtime_error("payments downstream is down");
                    },
                    {.group = payments});
                if (r)
                    ++res.failing_admitted;
                else
                    ++res.failing_refused[r.error().error_code().message()];
                next += std::chrono::milliseconds(5);
                std::this_thread::sleep_until(next);
            }
        });
    std::mutex mutex;
    std::vector<double> latencies_ms;
    std::atomic<std::uint64_t> done{0};
    const auto t0 = Clock::now();
    const auto end =
        t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    auto next = t0;
    while (Clock::now() < end) {
        const auto submitted = Clock::now();
        for (;;) {
            const auto r = sched.post([&, submitted] {
                std::this_thread::sleep_for(std::chrono::milliseconds(5));
                const double ms =
                    std::chrono::duration<double, std::milli>(Clock::now() - submitted).count();
                if (Clock::now() < end) {
                    done.fetch_add(1);
                    std::lock_guard lock(mutex);
                    latencies_ms.push_back(ms);
                }
            });
            if (r)
                break;
            if (!r.error().retryable() || Clock::now() >= end)
                break;
            std::this_thread::sleep_for(r.error().retry_after);
        }
        next += std::chrono::milliseconds(5);
        std::this_thread::sleep_until(next);
    }
    stop = true;
    if (failing.joinable())
        failing.join();
    res.healthy_per_s = static_cast<double>(done.load()) / seconds;
    {
        std::lock_guard lock(mutex);
        res.p50_ms = percentile(latencies_ms, 0.5);
        res.p99_ms = percentile(latencies_ms, 0.99);
    }
    sched.shutdown(ax::ShutdownMode::cancel, std::chrono::seconds(10));
    return res;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
}

} // namespace

int main(int argc, char** argv) {
    int rounds = 3;
    double seconds = 4;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string a = argv[i];
        if (a == "--rounds")
            rounds = std::atoi(argv[i + 1]);
        else if (a == "--seconds")
            seconds = std::atof(argv[i + 1]);
    }
    std::vector<double> alone_rate, alone_p50, alone_p99, beside_rate, beside_p50, beside_p99;
    std::map<std::string, std::uint64_t> refused;
    std::uint64_t admitted = 0;
    for (int r = 0; r < rounds; ++r) {
        for (int side = 0; side < 2; ++side) {
            const bool with_failing = (side + r) % 2 == 1;
            const Result x = run(with_failing, seconds);
            std::fprintf(stderr, "round %d %s: %.1f/s p50 %.2f ms p99 %.2f ms\n", r,
                         with_failing ? "beside failing group" : "alone", x.healthy_per_s, x.p50_ms,
                         x.p99_ms);
            auto& rate = with_failing ? beside_rate : alone_rate;
            auto& p50 = with_failing ? beside_p50 : alone_p50;
            auto& p99 = with_failing ? beside_p99 : alone_p99;
            rate.push_back(x.healthy_per_s);
            p50.push_back(x.p50_ms);
            p99.push_back(x.p99_ms);
            if (with_failing) {
                admitted += x.failing_admitted;
                for (const auto& [k, v] : x.failing_refused)
                    refused[k] += v;
            }
        }
    }
    std::printf(
        "| healthy 5 ms stream at 200/s, default Config | finished/s | p50 ms | p99 ms |\n");
    std::printf("| --- | ---: | ---: | ---: |\n");
    std::printf("| alone | %.1f | %.2f | %.2f |\n", median(alone_rate), median(alone_p50),
                median(alone_p99));
    std::printf("| beside failing group | %.1f | %.2f | %.2f |\n", median(beside_rate),
                median(beside_p50), median(beside_p99));
    std::printf("\nratio beside / alone (finished/s): %.3f  (%d rounds of %.1f s, alternating)\n",
                median(beside_rate) / std::max(median(alone_rate), 1e-9), rounds, seconds);
    std::printf("failing group: %llu admitted", static_cast<unsigned long long>(admitted));
    for (const auto& [k, v] : refused)
        std::printf(", %llu refused (%s)", static_cast<unsigned long long>(v), k.c_str());
    std::printf("\n");
}
