// Regression tests for what the scheduler forgets and when: a discarded dead letter frees its
// captures at once and query() stops answering for it; a task that has left the bounded history
// answers nullopt even while a handle to it is still held (as the README says).
#include "test_support.hpp"

#include <ax/scheduler.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <stdexcept>

using namespace std::chrono_literals;
using ax_test::eventually;

TEST_CASE("discard_dead_letter frees the captures at once and query forgets the task",
          "[failures][dead-letters][regression]") {
    ax::Config cfg;
    cfg.min_workers = 1;
    cfg.max_workers = 1;
    ax::Scheduler sched{cfg};
    auto capture = std::make_shared<int>(42);
    std::weak_ptr<int> watch = capture;
    auto h = sched.submit(
        [c = std::move(capture)]() -> int {
            throw std::runtime_error("bad " + std::to_string(*c));
        },
        {.max_retries = 0});
    REQUIRE(h);
    const auto id = h->id();
    REQUIRE(h->wait_for(20s));
    REQUIRE(sched.query(id)->state == ax::TaskState::dead_lettered);
    CHECK_FALSE(watch.expired()); // kept for a replay

    REQUIRE(sched.discard_dead_letter(id));
    CHECK(watch.expired());       // freed now, not when history lets the record go
    CHECK_FALSE(sched.query(id)); // forgotten, not "dead_lettered"
    CHECK(sched.dead_letters().empty());
    CHECK_FALSE(sched.replay_dead_letter(id));
    CHECK_FALSE(sched.cancel(id));
    // The handle still tells its own story.
    CHECK(h->state() == ax::TaskState::dead_lettered);
    CHECK_THROWS_WITH(h->get(), "bad 42");
}

TEST_CASE("discard_dead_letter without a handle forgets the task too",
          "[failures][dead-letters][regression]") {
    ax::Scheduler sched{};
    auto id = sched.post([]() { throw ax::PermanentError("no"); });
    REQUIRE(id);
    REQUIRE(eventually([&] { return sched.dead_letters().size() == 1; }));
    REQUIRE(sched.discard_dead_letter(*id));
    CHECK_FALSE(sched.query(*id));
}

TEST_CASE("query answers nullopt once a task left the history, even with a handle held",
          "[scheduler][history][regression]") {
    ax::Config cfg;
    cfg.min_workers = 1;
    cfg.max_workers = 1;
    cfg.history_capacity = 1;
    ax::Scheduler sched{cfg};
    auto first = sched.submit([] { return 7; });
    REQUIRE(first);
    const auto id = first->id();
    REQUIRE(first->wait_for(20s));
    // Later tasks push it out of the one-entry history (workers hand finished tasks to history
    // in batches, at the latest when they go idle).
    for (int k = 0; k < 3; ++k) {
        auto h = sched.submit([] { return 0; });
        REQUIRE(h);
        REQUIRE(h->wait_for(20s));
    }
    CHECK(eventually([&] { return !sched.query(id).has_value(); }));
    // The handle keeps the record and its value.
    CHECK(first->valid());
    CHECK(first->state() == ax::TaskState::succeeded);
    CHECK(first->get() == 7);
    CHECK_FALSE(sched.query(id));
}

TEST_CASE("query still answers for a finished task inside the history", "[scheduler][history]") {
    ax::Scheduler sched{};
    auto h = sched.submit([] { return 1; });
    REQUIRE(h);
    const auto id = h->id();
    REQUIRE(h->get() == 1);
    auto q = sched.query(id);
    REQUIRE(q);
    CHECK(q->state == ax::TaskState::succeeded);
}
