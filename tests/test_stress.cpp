// A short randomized stress run (fixed seed; AX_STRESS_SEED=<n> picks another): producers submit,
// cancel and query at every priority while bodies succeed, throw, fail permanently, time out,
// heartbeat and belong to a limited group, under a config small enough that backpressure,
// resizing and retries all happen. At the end every admitted task is terminal exactly once and
// the counters add up.
#include "test_support.hpp"

#include <atomic>
#include <ax/scheduler.hpp>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

using namespace std::chrono_literals;

TEST_CASE("randomized stress: nothing lost, counters add up", "[stress]") {
    const char* env = std::getenv("AX_STRESS_SEED");
    const unsigned seed =
        env != nullptr ? static_cast<unsigned>(std::strtoul(env, nullptr, 10)) : 12345u;
    INFO("seed " << seed);

    ax::Config cfg;
    cfg.min_workers = 1;
    cfg.max_workers = 8;
    cfg.queue_capacity = 32;
    cfg.retry_base_delay = 1ms;
    cfg.retry_jitter = 1ms;
    cfg.controller_interval = 20ms;
    cfg.watchdog_interval = 10ms;
    cfg.history_capacity = 64;
    cfg.dead_letter_capacity = 16;
    ax::Scheduler sched{cfg};
    const auto group = sched.group("limited");
    sched.set_group_limit(group, 2);

    constexpr int producers = 4;
    constexpr int per_producer = 1500;
    std::mutex mu;
    std::vector<ax::TaskHandle<int>> handles;
    std::atomic<std::uint64_t> refused{0}, unexpected{0};
    std::vector<std::thread> threads;
    for (int p = 0; p < producers; ++p) {
        threads.emplace_back([&, p] {
            std::mt19937 rng(seed + static_cast<unsigned>(p));
            std::vector<ax::TaskHandle<int>> mine;
            std::vector<ax::TaskId> ids;
            for (int i = 0; i < per_producer; ++i) {
                const int kind = static_cast<int>(rng() % 7);
                ax::SubmitOptions o;
                o.priority = static_cast<ax::Priority>(rng() % 3);
                o.max_retries = static_cast<int>(rng() % 3);
                if (rng() % 4 == 0)
                    o.group = group;
                if (kind == 5)
                    o.timeout = 2ms;
                auto r = sched.submit(
                    [kind](ax::TaskContext& ctx) -> int {
                        switch (kind) {
                        case 1:
                            throw std::runtime_error("fails");
                        case 2:
                            if (ctx.attempt() == 1)
                                throw 7; // non-std, then succeeds on retry
                            return 2;
                        case 3:
                            throw ax::PermanentError("permanent");
                        case 4:
                            for (int k = 0; k < 5; ++k) {
                                ctx.heartbeat();
                                std::this_thread::sleep_for(50us);
                            }
                            return 4;
                        case 5: // outlives its 2 ms timeout unless stopped
                            for (int k = 0; k < 400 && !ctx.stop_requested(); ++k)
                                std::this_thread::sleep_for(100us);
                            return 5;
                        default:
                            return kind;
                        }
                    },
                    o);
                if (!r) {
                    if (!r.error().retryable())
                        ++unexpected;
                    ++refused;
                    std::this_thread::sleep_for(
                        std::min(r.error().retry_after, std::chrono::microseconds(2000)));
                    continue;
                }
                ids.push_back(r->id());
                if (rng() % 6 == 0)
                    sched.cancel(ids[rng() % ids.size()]);
                if (rng() % 5 == 0)
                    (void)sched.query(ids[rng() % ids.size()]);
                mine.push_back(std::move(*r));
            }
            std::lock_guard lock(mu);
            for (auto& h : mine)
                handles.push_back(std::move(h));
        });
    }
    for (auto& t : threads)
        t.join();
    CHECK(unexpected == 0);

    ax_test::check_every_task_ended_once(sched, handles, 60s);
    const auto m = sched.metrics();
    CHECK(m.totals.submitted + refused == producers * per_producer);
    CHECK(m.queue_length_total == 0);
    CHECK(m.waiting_retry == 0);
    CHECK(ax_test::eventually([&] { return sched.group_stats(group).active == 0; }));
    CHECK(sched.group_stats(group).waiting == 0);
    CHECK(sched.dead_letters().size() <= 16);
    CHECK(sched.shutdown(ax::ShutdownMode::drain, 30s));
}
