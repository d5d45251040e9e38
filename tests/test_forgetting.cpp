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

TEST_CASE("a dead letter discarded the moment it is listed stays forgotten",
          "[failures][dead-letters][regression]") {
    // A dead letter is listed before its terminal state is published, so a discard can set the
    // forgotten bit before that publication; the publication once replaced the state word
    // keeping only the waiter bit, and query() then answered for the discarded task (found by
    // fuzz_ops). The discard here polls the list to land in that window as often as it can.
    ax::Config cfg;
    cfg.min_workers = 1;
    cfg.max_workers = 1;
    ax::Scheduler sched{cfg};
    int answered = 0;
    for (int round = 0; round < 300; ++round) {
        auto h = sched.submit([] { throw std::runtime_error("dead"); }, {.max_retries = 0});
        REQUIRE(h);
        const ax::TaskId id = h->id();
        // Spun, not polled with sleeps: the window is a few instructions of the worker's.
        const auto guard = std::chrono::steady_clock::now() + 20s;
        bool discarded = false;
        while (!(discarded = sched.discard_dead_letter(id)) &&
               std::chrono::steady_clock::now() < guard) {
        }
        REQUIRE(discarded);
        REQUIRE(h->wait_for(20s)); // the terminal state is published
        if (sched.query(id))
            ++answered;
    }
    CHECK(answered == 0);
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
