// Subtasks through the task context: the subtask lane ahead of every priority, helping waits that
// cannot deadlock (the seed's §5.2 incident), admission past a full queue, and non-blocking joins
// (when_all) from outside and inside tasks.
#include "test_support.hpp"

#include <atomic>
#include <ax/scheduler.hpp>
#include <catch2/catch.hpp>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

using namespace std::chrono_literals;
using ax_test::eventually;
using ax_test::Gate;

namespace {

ax::Config workers(std::uint32_t n) {
    ax::Config cfg;
    cfg.min_workers = n;
    cfg.max_workers = n;
    cfg.retry_base_delay = 1ms;
    cfg.retry_jitter = 0ms;
    return cfg;
}

/// A parent that spawns `m` children and blocks on each one's result.
int blocking_parent(ax::TaskContext& ctx, int m) {
    std::vector<ax::TaskHandle<int>> kids;
    for (int c = 0; c < m; ++c) {
        auto k = ctx.submit([c] { return c; });
        if (!k)
            throw std::runtime_error("child refused: " + k.error().message());
        kids.push_back(std::move(*k));
    }
    int sum = 0;
    for (auto& k : kids)
        sum += k.get();
    return sum;
}

} // namespace

TEST_CASE("the seed's incident: N parents block on M children each, fewer workers than parents",
          "[subtasks]") {
    const std::uint32_t n_workers = GENERATE(1u, 2u);
    INFO("workers " << n_workers);
    ax::Scheduler sched{workers(n_workers)};
    constexpr int parents = 8;
    constexpr int children = 10;
    std::vector<ax::TaskHandle<int>> hs;
    for (int p = 0; p < parents; ++p) {
        auto h = sched.submit([](ax::TaskContext& ctx) { return blocking_parent(ctx, children); });
        REQUIRE(h);
        hs.push_back(std::move(*h));
    }
    for (auto& h : hs) {
        REQUIRE(h.wait_for(60s)); // hang guard: a deadlock fails here instead of hanging CI
        CHECK(h.get() == children * (children - 1) / 2);
    }
    const auto m = sched.metrics();
    CHECK(m.totals.subtasks == parents * children);
    CHECK(m.totals.submitted == parents + parents * children);
    CHECK(m.totals.succeeded == parents + parents * children);
    CHECK(m.subtasks_queued == 0);
}

TEST_CASE("subtasks nest: a child may wait for grandchildren on a single worker", "[subtasks]") {
    ax::Scheduler sched{workers(1)};
    auto h = sched.submit([](ax::TaskContext& ctx) {
        auto child = ctx.submit([](ax::TaskContext& c) { return blocking_parent(c, 4) + 100; });
        if (!child)
            throw std::runtime_error("refused");
        return child->get() + 1000;
    });
    REQUIRE(h);
    REQUIRE(h->wait_for(60s));
    CHECK(h->get() == 1106);
}

TEST_CASE("a waiting parent runs its child's retry itself", "[subtasks]") {
    ax::Scheduler sched{workers(1)};
    std::atomic<int> attempts{0};
    auto h = sched.submit([&attempts](ax::TaskContext& ctx) {
        auto child = ctx.submit(
            [&attempts] {
                if (++attempts < 3)
                    throw std::runtime_error("flaky");
                return 5;
            },
            {.max_retries = 3});
        if (!child)
            throw std::runtime_error("refused");
        return child->get();
    });
    REQUIRE(h);
    REQUIRE(h->wait_for(60s));
    CHECK(h->get() == 5);
    CHECK(attempts == 3);
}

TEST_CASE("subtasks are dispatched ahead of every priority", "[subtasks]") {
    ax::Scheduler sched{workers(1)};
    Gate gate;
    std::mutex mu;
    std::vector<std::string> order;
    auto note = [&](std::string s) {
        std::lock_guard lock(mu);
        order.push_back(std::move(s));
    };
    auto parent = sched.submit([&](ax::TaskContext& ctx) {
        gate.wait(); // the high-priority tasks queue up meanwhile
        for (int c = 0; c < 2; ++c)
            (void)ctx.submit([&note, c] { note("child" + std::to_string(c)); });
        note("parent");
    });
    REQUIRE(parent);
    REQUIRE(eventually([&] { return parent->state() == ax::TaskState::running; }));
    std::vector<ax::TaskHandle<void>> highs;
    for (int i = 0; i < 3; ++i) {
        auto h = sched.submit([&note, i] { note("high" + std::to_string(i)); },
                              {.priority = ax::Priority::high});
        REQUIRE(h);
        highs.push_back(std::move(*h));
    }
    gate.open();
    parent->get();
    for (auto& h : highs)
        REQUIRE(h.wait_for(20s));
    REQUIRE(eventually([&] {
        std::lock_guard lock(mu);
        return order.size() == 6;
    }));
    std::lock_guard lock(mu);
    CHECK(order ==
          std::vector<std::string>{"parent", "child0", "child1", "high0", "high1", "high2"});
}

TEST_CASE("subtasks are admitted past a full queue, up to subtask_capacity", "[subtasks]") {
    auto cfg = workers(1);
    cfg.queue_capacity = 2;
    cfg.subtask_capacity = 2;
    ax::Scheduler sched{cfg};
    Gate gate;
    std::atomic<int> refused_code{-1};
    std::atomic<std::uint32_t> refused_capacity{0};
    std::atomic<int> admitted{0};
    auto parent = sched.submit([&](ax::TaskContext& ctx) {
        for (int c = 0; c < 3; ++c) {
            auto k = ctx.submit([] { return 1; });
            if (k) {
                ++admitted;
            } else {
                refused_code = static_cast<int>(k.error().code);
                refused_capacity = k.error().capacity;
            }
        }
        gate.wait();
        return 0;
    });
    REQUIRE(parent);
    REQUIRE(eventually([&] { return parent->state() == ax::TaskState::running; }));
    // Fill the main queue while the parent holds the only worker.
    REQUIRE(sched.post([] {}, {.priority = ax::Priority::high}));
    REQUIRE(sched.post([] {}, {.priority = ax::Priority::high}));
    CHECK(sched.post([] {}, {.priority = ax::Priority::high}).error().code == ax::Errc::queue_full);
    gate.open();
    REQUIRE(parent->wait_for(20s));
    CHECK(admitted == 2);
    CHECK(refused_code == static_cast<int>(ax::Errc::queue_full));
    CHECK(refused_capacity == 2);
    REQUIRE(sched.shutdown(ax::ShutdownMode::drain, 20s));
    CHECK(sched.metrics().totals.succeeded == 1 + 2 + 2);
}

TEST_CASE("subtasks take no group, and are accepted while draining", "[subtasks]") {
    ax::Scheduler sched{workers(2)};
    const auto g = sched.group("g");
    std::atomic<int> group_refusal{-1};
    Gate gate;
    auto parent = sched.submit([&](ax::TaskContext& ctx) {
        auto bad = ctx.submit([] {}, {.group = g});
        group_refusal = bad ? 0 : static_cast<int>(bad.error().code);
        gate.wait(); // shutdown(drain) starts meanwhile
        auto late = ctx.submit([] { return 40; });
        if (!late)
            throw std::runtime_error("child refused while draining: " + late.error().message());
        return late->get() + 2;
    });
    REQUIRE(parent);
    REQUIRE(eventually([&] { return group_refusal != -1; }));
    CHECK(group_refusal == static_cast<int>(ax::Errc::invalid_options));
    std::thread closer([&] { CHECK(sched.shutdown(ax::ShutdownMode::drain, 30s)); });
    REQUIRE(eventually([&] {
        auto r = sched.post([] {});
        return !r && r.error().code == ax::Errc::shutting_down;
    }));
    gate.open();
    closer.join();
    CHECK(parent->get() == 42);
}

TEST_CASE("when_all runs a join once every dependency ended, without blocking a thread",
          "[subtasks][when_all]") {
    ax::Scheduler sched{workers(1)};
    Gate gate;
    std::vector<ax::TaskHandle<int>> deps;
    for (int i = 1; i <= 3; ++i) {
        auto h = sched.submit([&gate, i] {
            gate.wait();
            return i;
        });
        REQUIRE(h);
        deps.push_back(std::move(*h));
    }
    auto failing =
        sched.submit([]() -> int { throw std::runtime_error("nope"); }, {.max_retries = 0});
    REQUIRE(failing);
    deps.push_back(std::move(*failing));
    auto join = sched.when_all(std::move(deps), [](std::vector<ax::TaskHandle<int>>& hs) {
        int sum = 0;
        int failed = 0;
        for (auto& h : hs) {
            if (!h.ready())
                throw std::logic_error("a dependency is not ready");
            if (h.state() == ax::TaskState::succeeded)
                sum += h.get();
            else
                ++failed;
        }
        return sum * 10 + failed;
    });
    REQUIRE(join);
    CHECK(join->state() == ax::TaskState::pending);
    CHECK(sched.query(join->id())->state == ax::TaskState::pending);
    CHECK(sched.metrics().pending_joins == 1);
    gate.open();
    REQUIRE(join->wait_for(20s));
    CHECK(join->get() == 61);
    CHECK(sched.metrics().pending_joins == 0);
}

TEST_CASE("when_all: cancelling a pending join; joins of finished tasks run at once",
          "[subtasks][when_all]") {
    ax::Scheduler sched{workers(1)};
    Gate gate;
    auto blocker = sched.submit([&gate] {
        gate.wait();
        return 1;
    });
    REQUIRE(blocker);
    std::vector<ax::TaskHandle<int>> one;
    one.push_back(std::move(*blocker));
    std::atomic<bool> ran{false};
    auto join = sched.when_all(std::move(one), [&ran](std::vector<ax::TaskHandle<int>>&) {
        ran = true;
        return 0;
    });
    REQUIRE(join);
    CHECK(sched.cancel(join->id()));
    CHECK(join->state() == ax::TaskState::cancelled);
    CHECK(sched.metrics().pending_joins == 0);
    gate.open();
    REQUIRE(sched.shutdown(ax::ShutdownMode::drain, 20s) == true);
    CHECK_FALSE(ran);
    CHECK_THROWS_AS(join->get(), ax::TaskCancelled);
    const auto m = sched.metrics();
    CHECK(m.totals.submitted == 2);
    CHECK(m.totals.succeeded == 1);
    CHECK(m.totals.cancelled == 1);

    ax::Scheduler again{workers(1)};
    auto done = again.submit([] { return 3; });
    REQUIRE(done);
    REQUIRE(done->wait_for(20s));
    std::vector<ax::TaskHandle<int>> ready;
    ready.push_back(std::move(*done));
    auto late = again.when_all(std::move(ready),
                               [](std::vector<ax::TaskHandle<int>>& hs) { return hs[0].get(); });
    REQUIRE(late);
    CHECK(late->get() == 3);
    // Foreign or empty handles are refused.
    std::vector<ax::TaskHandle<int>> empty(1);
    CHECK(again.when_all(std::move(empty), [](std::vector<ax::TaskHandle<int>>&) { return 0; })
              .error()
              .code == ax::Errc::invalid_options);
}

TEST_CASE("a task joins its children with when_all and returns without waiting",
          "[subtasks][when_all]") {
    ax::Scheduler sched{workers(1)};
    std::atomic<int> total{-1};
    auto parent = sched.submit([&total](ax::TaskContext& ctx) {
        std::vector<ax::TaskHandle<int>> kids;
        for (int c = 1; c <= 4; ++c)
            kids.push_back(std::move(*ctx.submit([c] { return c; })));
        auto join = ctx.when_all(std::move(kids), [&total](std::vector<ax::TaskHandle<int>>& hs) {
            int sum = 0;
            for (auto& h : hs)
                sum += h.get();
            total = sum;
        });
        return join.has_value();
    });
    REQUIRE(parent);
    CHECK(parent->get());
    REQUIRE(eventually([&] { return total == 10; }));
    REQUIRE(sched.shutdown(ax::ShutdownMode::drain, 20s));
    const auto m = sched.metrics();
    CHECK(m.totals.subtasks == 5);
    CHECK(m.totals.submitted == 6);
    CHECK(m.totals.succeeded == 6);
}

TEST_CASE("shutdown(cancel) cancels queued subtasks and pending joins", "[subtasks][shutdown]") {
    ax::Scheduler sched{workers(1)};
    Gate gate;
    std::atomic<int> children_ran{0};
    std::atomic<bool> spawned{false};
    std::mutex mu;
    std::vector<ax::TaskHandle<int>> kids;
    auto parent = sched.submit([&](ax::TaskContext& ctx) {
        std::vector<ax::TaskHandle<int>> mine;
        for (int c = 0; c < 3; ++c)
            mine.push_back(std::move(*ctx.submit([&children_ran] { return ++children_ran; })));
        {
            std::lock_guard lock(mu);
            for (auto& k : mine)
                kids.push_back(std::move(k));
        }
        spawned = true;
        gate.wait();
    });
    REQUIRE(parent);
    REQUIRE(eventually([&] { return spawned.load(); }));
    std::vector<ax::TaskHandle<int>> for_join;
    {
        std::lock_guard lock(mu);
        auto extra = sched.submit([] { return 0; });
        REQUIRE(extra);
        for_join.push_back(std::move(*extra));
    }
    auto join =
        sched.when_all(std::move(for_join), [](std::vector<ax::TaskHandle<int>>&) { return 1; });
    REQUIRE(join);
    std::thread opener([&] {
        std::this_thread::sleep_for(50ms);
        gate.open();
    });
    CHECK(sched.shutdown(ax::ShutdownMode::cancel, 30s));
    opener.join();
    CHECK(children_ran == 0);
    std::lock_guard lock(mu);
    for (auto& k : kids) {
        REQUIRE(k.wait_for(20s));
        CHECK(k.state() == ax::TaskState::cancelled);
    }
    REQUIRE(join->wait_for(20s));
    CHECK(join->state() == ax::TaskState::cancelled);
    const auto m = sched.metrics();
    CHECK(m.totals.submitted == m.totals.succeeded + m.totals.dead_lettered + m.totals.cancelled);
}

TEST_CASE("a helping wait runs the tasks its worker reserved, the awaited one among them",
          "[subtasks]") {
    // Tiny tasks make a worker reserve several at once; a task that waits for one reserved
    // right behind it must run it itself, since no other worker can.
    ax::Scheduler sched{workers(1)};
    std::vector<ax::TaskHandle<void>> warm;
    for (int i = 0; i < 20000; ++i) {
        auto h = sched.submit([] {}, {.priority = ax::Priority::high});
        if (h)
            warm.push_back(std::move(*h));
        else
            std::this_thread::sleep_for(h.error().retry_after);
    }
    for (auto& h : warm)
        REQUIRE(h.wait_for(20s));
    REQUIRE(eventually([&] {
        const auto avg = sched.metrics().average_duration;
        return avg > 0ns && avg < 20us;
    }));
    Gate gate;
    auto target = std::make_shared<std::optional<ax::TaskHandle<int>>>();
    REQUIRE(sched.post([&gate] { gate.wait(); }));
    auto waiter = sched.submit([target] { return (*target)->get() + 1; });
    auto awaited = sched.submit([] { return 1; });
    REQUIRE((waiter && awaited));
    target->emplace(std::move(*awaited));
    for (int i = 0; i < 6; ++i)
        REQUIRE(sched.post([] {}));
    gate.open();
    REQUIRE(waiter->wait_for(30s));
    CHECK(waiter->get() == 2);
}

TEST_CASE("a task waiting on a queued top-level task runs it itself, even on one worker",
          "[subtasks]") {
    ax::Scheduler sched{workers(1)};
    Gate gate;
    auto target = std::make_shared<std::optional<ax::TaskHandle<int>>>();
    REQUIRE(sched.post([&gate] { gate.wait(); })); // holds the only worker meanwhile
    auto waiter = sched.submit([target] { return (*target)->get() + 1; });
    auto awaited = sched.submit([] { return 41; }, {.priority = ax::Priority::low});
    REQUIRE((waiter && awaited));
    target->emplace(std::move(*awaited));
    gate.open();
    REQUIRE(waiter->wait_for(30s)); // hang guard: without helping this is a deadlock
    CHECK(waiter->get() == 42);
}
