// A tour of ax in ~10 seconds: priorities, backpressure with retry_after, and the adaptive pool.
#include <array>
#include <atomic>
#include <ax/scheduler.hpp>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

using namespace std::chrono_literals;

namespace {

void priorities() {
    std::puts("== 1. Priorities: one worker, 30 tasks of each priority queued behind a blocker");
    ax::Config cfg;
    cfg.min_workers = cfg.max_workers = 1;
    ax::Scheduler sched{cfg};
    std::atomic<bool> release{false};
    auto blocker = sched.submit([&] {
        while (!release)
            std::this_thread::sleep_for(1ms);
    });
    while (blocker->state() != ax::TaskState::running)
        std::this_thread::sleep_for(1ms);

    std::mutex mu;
    std::string order;
    for (int i = 0; i < 30; ++i) {
        for (auto p : {ax::Priority::low, ax::Priority::normal, ax::Priority::high}) {
            auto r = sched.post(
                [&, p] {
                    std::lock_guard lock(mu);
                    order += "HNL"[static_cast<int>(p)];
                },
                {.priority = p});
            if (!r)
                std::printf("   refused: %s\n", r.error().message().c_str());
        }
    }
    release = true;
    sched.shutdown();
    std::printf("   dispatch order: %s\n", order.c_str());
    std::printf("   (3:2:1 ring: HHHNNL repeats while every lane has work; nothing starves)\n\n");
}

void backpressure_and_pool() {
    std::puts("== 2. Backpressure and the adaptive pool: 3000 tasks of 20 ms, default config");
    std::puts("   (queue_capacity 150, min_workers 4, max_workers 200, controller every 2 s)");
    ax::Scheduler sched; // the design card's defaults
    std::atomic<int> done{0};
    std::uint64_t pushbacks_full = 0, pushbacks_busy = 0;
    std::chrono::microseconds max_hint{0};
    const auto t0 = std::chrono::steady_clock::now();
    std::atomic<bool> stop_report{false};
    std::thread reporter([&] {
        while (!stop_report) {
            std::this_thread::sleep_for(1s);
            const auto m = sched.metrics();
            std::printf(
                "   t=%4.1fs  workers %3u (target %3u, busy %3u)  queue %3u  done %5d\n",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                m.workers.current, m.workers.target, m.workers.busy, m.queue_length_total,
                done.load());
        }
    });
    for (int i = 0; i < 3000; ++i) {
        for (;;) {
            auto r = sched.post([&] {
                std::this_thread::sleep_for(20ms);
                ++done;
            });
            if (r)
                break;
            // Never drop work: obey the hint and resubmit.
            (r.error().code == ax::ErrQueueFull ? pushbacks_full : pushbacks_busy)++;
            max_hint = std::max(max_hint, r.error().retry_after);
            std::this_thread::sleep_for(r.error().retry_after);
        }
    }
    sched.shutdown();
    stop_report = true;
    reporter.join();
    const auto m = sched.metrics();
    std::printf(
        "   all %d tasks done in %.1f s; pushbacks: %llu busy + %llu full (largest hint %lld us);"
        " lost: 0\n",
        done.load(), std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
        static_cast<unsigned long long>(pushbacks_busy),
        static_cast<unsigned long long>(pushbacks_full), static_cast<long long>(max_hint.count()));
    std::printf("   peak workers %u, threads created %llu, submitted %llu, succeeded %llu\n\n",
                m.workers.peak, static_cast<unsigned long long>(m.workers.created),
                static_cast<unsigned long long>(m.totals.submitted),
                static_cast<unsigned long long>(m.totals.succeeded));
}

void failures() {
    std::puts("== 3. Failures: a flaky task retried with back-off, a broken one dead-lettered");
    ax::Config cfg;
    cfg.retry_base_delay = 20ms;
    ax::Scheduler sched{cfg};
    std::atomic<int> calls{0};
    auto flaky = sched.submit(
        [&](ax::TaskContext& ctx) {
            ++calls;
            if (ctx.attempt() < 3)
                throw std::runtime_error("upstream timeout");
            return ctx.attempt();
        },
        {.name = "flaky"});
    std::printf("   flaky succeeded on attempt %u\n", flaky->get());
    auto broken = sched.submit([]() -> int { throw std::runtime_error("corrupt input"); },
                               {.name = "broken", .max_retries = 1});
    const auto id = broken->id();
    try {
        broken->get();
    } catch (const std::exception& e) {
        const auto info = sched.query(id);
        std::printf("   %s: %s after %u attempts, last error \"%s\"\n", info->name.c_str(),
                    std::string(ax::to_string(info->state)).c_str(), info->attempts, e.what());
    }
}

} // namespace

int main() {
    priorities();
    backpressure_and_pool();
    failures();
}
