// Introspection: Scheduler::list_tasks for every state (from the store that owns it), the
// limit, bad input, oldest_waiting per priority and MetricsSnapshot::oldest_queued_age, on
// ax::ManualClock so ages are exact.
#include "test_support.hpp"

#include <algorithm>
#include <atomic>
#include <ax/clock.hpp>
#include <ax/errors.hpp>
#include <ax/scheduler.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

using namespace std::chrono_literals;
using ax_test::eventually;
using ax_test::Gate;

namespace {

using Sched = ax::Scheduler<ax::ManualClock>;

std::set<std::string> names_of(const std::vector<ax::TaskSummary>& v) {
    std::set<std::string> out;
    for (const auto& t : v)
        out.insert(t.name);
    return out;
}

const ax::TaskSummary* find(const std::vector<ax::TaskSummary>& v, ax::TaskId id) {
    const auto it =
        std::find_if(v.begin(), v.end(), [&](const ax::TaskSummary& t) { return t.id == id; });
    return it == v.end() ? nullptr : &*it;
}

ax::Config one_worker() {
    ax::Config cfg;
    cfg.min_workers = 1;
    cfg.max_workers = 1;
    cfg.retry_base_delay = 10s; // on the manual clock: a retry waits until the test advances it
    cfg.retry_jitter = 0ms;
    return cfg;
}

} // namespace

TEST_CASE("list_tasks answers every state from its store, within the limit", "[introspection]") {
    Gate gate; // before the scheduler: its draining destructor may still run the blocker
    std::atomic<bool> entered{false};
    Sched sched{one_worker()};
    auto blocker = sched.submit(
        [&] {
            entered.store(true);
            gate.wait();
        },
        {.name = "blocker"});
    REQUIRE(blocker);
    const ax::TaskId blocker_id = blocker->id();
    // The record turns running a moment before the worker publishes its attempt, which is
    // where list_tasks(running) looks: wait for the callable itself.
    REQUIRE(eventually([&] { return entered.load(); }));

    // running: the worker's attempt.
    const auto running = sched.list_tasks(ax::TaskState::running, 10);
    REQUIRE(running.size() == 1);
    CHECK(running[0].id == blocker_id);
    CHECK(running[0].name == "blocker");
    CHECK(running[0].state == ax::TaskState::running);
    CHECK(running[0].attempts == 1);

    // queued: three tasks of two lanes, with known ages.
    auto a = sched.submit([] { return 1; }, {.name = "a"});
    ax::ManualClock::advance(2s);
    auto b = sched.submit([] { return 2; }, {.name = "b", .priority = ax::Priority::high});
    auto c = sched.submit([] { return 3; }, {.name = "c"});
    REQUIRE((a && b && c));
    ax::ManualClock::advance(1s);
    const auto queued = sched.list_tasks(ax::TaskState::queued, 10);
    REQUIRE(queued.size() == 3);
    CHECK(names_of(queued) == std::set<std::string>{"a", "b", "c"});
    REQUIRE(find(queued, a->id()) != nullptr);
    CHECK(find(queued, a->id())->age == 3s);
    CHECK(find(queued, a->id())->attempts == 0);
    CHECK(find(queued, a->id())->priority == ax::Priority::normal);
    CHECK(find(queued, b->id())->age == 1s);
    CHECK(find(queued, b->id())->priority == ax::Priority::high);
    CHECK(find(queued, c->id())->state == ax::TaskState::queued);

    // The limit, and limit 0.
    CHECK(sched.list_tasks(ax::TaskState::queued, 2).size() == 2);
    CHECK(sched.list_tasks(ax::TaskState::queued, 1).size() == 1);
    CHECK(sched.list_tasks(ax::TaskState::queued, 0).empty());
    CHECK(sched.list_tasks(ax::TaskState::running, 0).empty());

    // pending: a join waiting for a queued task.
    auto dep = sched.submit([] { return 4; }, {.name = "dep"});
    REQUIRE(dep);
    std::vector<ax::TaskHandle<int>> deps;
    deps.push_back(std::move(*dep));
    auto join = sched.when_all(std::move(deps),
                               [](std::vector<ax::TaskHandle<int>>& hs) { return hs[0].get(); },
                               {.name = "join"});
    REQUIRE(join);
    const auto pending = sched.list_tasks(ax::TaskState::pending, 10);
    REQUIRE(pending.size() == 1);
    CHECK(pending[0].id == join->id());
    CHECK(pending[0].name == "join");
    CHECK(pending[0].state == ax::TaskState::pending);

    // cancelled (from history); a cancelled queued task is no longer listed as queued.
    REQUIRE(sched.cancel(c->id()));
    REQUIRE(eventually(
        [&] { return find(sched.list_tasks(ax::TaskState::cancelled, 10), c->id()) != nullptr; }));
    CHECK(find(sched.list_tasks(ax::TaskState::queued, 10), c->id()) == nullptr);

    // waiting_retry (the timers) and dead_lettered, after the worker is free.
    auto flaky = sched.submit(
        [](ax::TaskContext& ctx) {
            if (ctx.attempt() == 1)
                throw std::runtime_error("first attempt fails");
            return 5;
        },
        {.name = "flaky"});
    auto doomed = sched.submit([]() -> int { throw ax::PermanentError("no"); }, {.name = "doomed"});
    REQUIRE((flaky && doomed));
    gate.open();
    REQUIRE(eventually(
        [&] { return sched.query(flaky->id())->state == ax::TaskState::waiting_retry; }));
    const auto retrying = sched.list_tasks(ax::TaskState::waiting_retry, 10);
    REQUIRE(retrying.size() == 1);
    CHECK(retrying[0].id == flaky->id());
    CHECK(retrying[0].name == "flaky");
    CHECK(retrying[0].attempts == 1);
    CHECK(retrying[0].state == ax::TaskState::waiting_retry);
    REQUIRE(doomed->wait_for(20s));

    // Terminal states from history (the worker hands finished tasks over when it goes idle).
    REQUIRE(eventually([&] {
        return names_of(sched.list_tasks(ax::TaskState::succeeded, 100)) ==
               std::set<std::string>{"blocker", "a", "b", "dep", "join"};
    }));
    REQUIRE(eventually([&] {
        return names_of(sched.list_tasks(ax::TaskState::dead_lettered, 100)) ==
               std::set<std::string>{"doomed"};
    }));
    CHECK(sched.list_tasks(ax::TaskState::succeeded, 2).size() == 2);
    CHECK(sched.list_tasks(ax::TaskState::queued, 10).empty());
    CHECK(sched.list_tasks(ax::TaskState::running, 10).empty());

    // The retry fires once its due time passes; then nothing waits.
    ax::ManualClock::advance(11s);
    REQUIRE(flaky->wait_for(20s));
    CHECK(flaky->get() == 5);
    CHECK(sched.list_tasks(ax::TaskState::waiting_retry, 10).empty());
}

TEST_CASE("list_tasks refuses a value that is not a TaskState", "[introspection]") {
    Sched sched{one_worker()};
    CHECK_THROWS_AS(sched.list_tasks(static_cast<ax::TaskState>(0), 10), std::invalid_argument);
    CHECK_THROWS_WITH(sched.list_tasks(static_cast<ax::TaskState>(99), 10),
                      Catch::Contains("unknown TaskState 99"));
}

TEST_CASE("terminal states list what history still holds, newest first", "[introspection]") {
    ax::Config cfg = one_worker();
    cfg.history_capacity = 3;
    Sched sched{cfg};
    std::vector<ax::TaskHandle<int>> hs;
    for (int i = 0; i < 6; ++i) {
        auto h = sched.submit([i] { return i; }, {.name = "t" + std::to_string(i)});
        REQUIRE(h);
        REQUIRE(h->wait_for(20s)); // one at a time: history order is submit order
        hs.push_back(std::move(*h));
    }
    std::vector<ax::TaskSummary> done;
    REQUIRE(eventually([&] {
        done = sched.list_tasks(ax::TaskState::succeeded, 10);
        return done.size() == 3 && done[0].name == "t5";
    }));
    CHECK(done[1].name == "t4");
    CHECK(done[2].name == "t3");
    CHECK_FALSE(sched.query(hs[0].id())); // forgotten: not listed either
}

TEST_CASE("oldest_waiting and oldest_queued_age per priority lane", "[introspection]") {
    Gate gate; // before the scheduler: its draining destructor may still run the blocker
    Sched sched{one_worker()};
    auto blocker = sched.submit([&] { gate.wait(); });
    REQUIRE(blocker);
    const ax::TaskId blocker_id = blocker->id();
    REQUIRE(eventually([&] { return sched.query(blocker_id)->state == ax::TaskState::running; }));

    // Nothing queued: no oldest, zero ages.
    for (const auto& o : sched.oldest_waiting())
        CHECK_FALSE(o.has_value());
    for (const auto age : sched.metrics().oldest_queued_age)
        CHECK(age == 0ns);

    auto n1 = sched.submit([] { return 1; }, {.name = "n1"});
    ax::ManualClock::advance(2s);
    auto n2 = sched.submit([] { return 2; }, {.name = "n2"});
    auto h1 = sched.submit([] { return 3; }, {.name = "h1", .priority = ax::Priority::high});
    ax::ManualClock::advance(500ms);
    auto h2 = sched.submit([] { return 4; }, {.name = "h2", .priority = ax::Priority::high});
    ax::ManualClock::advance(1s);
    REQUIRE((n1 && n2 && h1 && h2));

    // The arrivals are still in the standby buffer (the only worker is busy).
    const auto oldest = sched.oldest_waiting();
    REQUIRE(oldest[0].has_value());
    CHECK(oldest[0]->id == h1->id());
    CHECK(oldest[0]->name == "h1");
    CHECK(oldest[0]->age == 1500ms);
    CHECK(oldest[0]->state == ax::TaskState::queued);
    REQUIRE(oldest[1].has_value());
    CHECK(oldest[1]->id == n1->id());
    CHECK(oldest[1]->age == 3500ms);
    CHECK_FALSE(oldest[2].has_value());
    const auto m = sched.metrics();
    CHECK(m.oldest_queued_age[0] == 1500ms);
    CHECK(m.oldest_queued_age[1] == 3500ms);
    CHECK(m.oldest_queued_age[2] == 0ns);

    // A cancelled task stays behind as a tombstone: the next one is the oldest.
    REQUIRE(sched.cancel(n1->id()));
    const auto after = sched.oldest_waiting();
    REQUIRE(after[1].has_value());
    CHECK(after[1]->id == n2->id());
    CHECK(after[1]->age == 1500ms);
    CHECK(sched.metrics().oldest_queued_age[1] == 1500ms);

    gate.open();
    REQUIRE(h2->wait_for(20s));
    REQUIRE(n2->wait_for(20s));
    REQUIRE(eventually([&] { return sched.metrics().oldest_queued_age[0] == 0ns; }));
    for (const auto& o : sched.oldest_waiting())
        CHECK_FALSE(o.has_value());
}

TEST_CASE("oldest_waiting looks into the lanes and the group parking lists", "[introspection]") {
    ax::Config cfg = one_worker();
    cfg.min_workers = 2;
    cfg.max_workers = 2;
    // Declared before the scheduler, so they outlive its workers (a body may still be leaving
    // gate.wait() when the test's last line runs).
    Gate gate1, gate2, gate3;
    Sched sched{cfg};
    const ax::GroupId g = sched.group("g");
    sched.set_group_limit(g, 1);
    auto b1 = sched.submit([&] { gate1.wait(); }, {.name = "b1", .group = g});
    REQUIRE(b1);
    const ax::TaskId b1_id = b1->id();
    REQUIRE(eventually([&] { return sched.query(b1_id)->state == ax::TaskState::running; }));
    auto b2 = sched.submit([&] { gate2.wait(); }, {.name = "b2"});
    REQUIRE(b2);
    const ax::TaskId b2_id = b2->id();
    REQUIRE(eventually([&] { return sched.query(b2_id)->state == ax::TaskState::running; }));

    auto g1 = sched.submit([] { return 1; }, {.name = "g1", .group = g});
    ax::ManualClock::advance(1s);
    auto g2 =
        sched.submit([] { return 2; }, {.name = "g2", .priority = ax::Priority::high, .group = g});
    auto free_task = sched.submit([&] { gate3.wait(); }, {.name = "free"});
    auto n3 = sched.submit([] { return 3; }, {.name = "n3"});
    REQUIRE((g1 && g2 && free_task && n3));
    ax::ManualClock::advance(1s);
    // b2's worker dispatches: g2 and g1 park (group g is at its limit), "free" runs, n3 stays
    // in its lane.
    gate2.open();
    const ax::TaskId free_id = free_task->id();
    REQUIRE(eventually([&] { return sched.query(free_id)->state == ax::TaskState::running; }));
    REQUIRE(eventually([&] { return sched.group_stats(g).waiting == 2; }));

    const auto oldest = sched.oldest_waiting();
    REQUIRE(oldest[0].has_value());
    CHECK(oldest[0]->id == g2->id());
    CHECK(oldest[0]->age == 1s);
    REQUIRE(oldest[1].has_value());
    CHECK(oldest[1]->id == g1->id()); // parked, older than n3 at the head of the lane
    CHECK(oldest[1]->age == 2s);
    CHECK_FALSE(oldest[2].has_value());
    CHECK(names_of(sched.list_tasks(ax::TaskState::queued, 10)) ==
          std::set<std::string>{"g1", "g2", "n3"});

    REQUIRE(sched.cancel(g1->id()));
    const auto after = sched.oldest_waiting();
    REQUIRE(after[1].has_value());
    CHECK(after[1]->id == n3->id());
    CHECK(after[1]->age == 1s);
    CHECK(sched.metrics().oldest_queued_age[1] == 1s);

    gate1.open();
    gate3.open();
    REQUIRE(g2->wait_for(20s));
    REQUIRE(n3->wait_for(20s));
}

TEST_CASE("a task picked up right after another ends never starts before it was enqueued",
          "[introspection]") {
    // The worker stamps an attempt's start with the previous attempt's end reading (one clock
    // read per task). A task enqueued after that reading but taken in the same dispatch round
    // would start "before" it was enqueued; from the on_success hook (after the end reading,
    // before the next round) the test advances the clock and submits exactly such a task.
    std::atomic<Sched*> self{nullptr};
    std::mutex m;
    std::optional<ax::TaskId> late; // under m
    ax::Hooks hooks;
    hooks.on_success = [&](const ax::TaskEvent& e) {
        if (e.name != "first")
            return;
        ax::ManualClock::advance(1s);
        auto h = self.load()->post([] {}, {.name = "late"});
        std::lock_guard lock(m);
        if (h)
            late = *h;
    };
    Sched sched{one_worker(), hooks};
    self = &sched;
    auto first = sched.submit([] { return 1; }, {.name = "first"});
    REQUIRE(first);
    REQUIRE(first->get() == 1);
    const auto late_id = [&] {
        std::lock_guard lock(m);
        return late;
    };
    REQUIRE(eventually([&] {
        const auto id = late_id();
        return id && sched.query(*id) && sched.query(*id)->state == ax::TaskState::succeeded;
    }));
    const auto info = sched.query(*late_id());
    REQUIRE(info);
    CHECK(info->started >= info->enqueued);
    CHECK(info->finished >= info->started);
}
