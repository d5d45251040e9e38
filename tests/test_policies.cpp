// The policy contracts as concepts (ax/policies.hpp, ax/worker_pool.hpp's PoolHost): what meets
// them and what is refused where it is named.
#include <atomic>
#include <ax/clock.hpp>
#include <ax/detail/notifier.hpp>
#include <ax/policies.hpp>
#include <ax/worker_pool.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <thread>

namespace {

struct NoNow {
    using duration = std::chrono::nanoseconds;
    using time_point = std::chrono::time_point<NoNow>;
};

struct FixedController {
    explicit FixedController(const ax::Config&) {}
    std::uint32_t operator()(const ax::ControllerInput&) { return 3; } // non-const is fine
};
struct NoConfigController {
    std::uint32_t operator()(const ax::ControllerInput&) const { return 1; }
};

/// The smallest host a WorkerPool accepts: runs `budget` fake tasks, then has no work.
struct CountingHost {
    struct WorkerLocal {
        int ran = 0;
    };
    using Worker = ax::detail::WorkerPool<CountingHost>::Worker;
    std::atomic<int> budget{0};
    std::atomic<int> ran{0};
    bool run_one(Worker& w) {
        if (budget.fetch_sub(1) <= 0) {
            budget.fetch_add(1);
            return false;
        }
        ++w.local.ran;
        ++ran;
        return true;
    }
    [[nodiscard]] bool has_work() const { return budget.load() > 0; }
    [[nodiscard]] bool holds_reserved(Worker&) const { return false; }
    void on_worker_start(Worker&) {}
    void on_worker_exit(Worker&) {}
};
struct NotAHost {
    struct WorkerLocal {};
};

} // namespace

static_assert(ax::SchedulerClock<std::chrono::steady_clock>);
static_assert(ax::SchedulerClock<std::chrono::system_clock>);
static_assert(ax::SchedulerClock<ax::ManualClock>);
static_assert(!ax::SchedulerClock<NoNow>);
static_assert(!ax::SchedulerClock<int>);
static_assert(ax::ControllerPolicy<ax::LittleController>);
static_assert(ax::ControllerPolicy<FixedController>);
static_assert(!ax::ControllerPolicy<NoConfigController>);
static_assert(ax::detail::PoolHost<CountingHost, CountingHost::Worker>);
static_assert(!ax::detail::PoolHost<NotAHost, ax::detail::WorkerPool<CountingHost>::Worker>);

TEST_CASE("WorkerPool runs a host that meets PoolHost and wakes through the Notifier",
          "[policies][pool]") {
    CountingHost host;
    ax::detail::Notifier notifier;
    {
        ax::detail::WorkerPool<CountingHost> pool(host, notifier, 1, 1);
        pool.start();
        host.budget.store(5);
        notifier.notify_one();
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (host.ran.load() < 5 && std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        CHECK(host.ran.load() == 5);
        pool.stop_and_join();
    }
    CHECK(notifier.parked() == 0);
}
