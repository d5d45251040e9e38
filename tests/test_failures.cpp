// Failure reporting: permanent errors, exception types, hooks, the dead-letter list.
#include "test_support.hpp"

#include <algorithm>
#include <atomic>
#include <ax/scheduler.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using ax_test::eventually;

namespace {

ax::Config fast_retries() {
    ax::Config cfg;
    cfg.min_workers = 2;
    cfg.max_workers = 2;
    cfg.retry_base_delay = 1ms;
    cfg.retry_jitter = 0ms;
    return cfg;
}

struct CustomError {
    int code;
};

} // namespace

TEST_CASE("a PermanentError skips the remaining retries", "[failures]") {
    ax::Scheduler sched{fast_retries()};
    std::atomic<int> calls{0};
    auto h = sched.submit(
        [&]() -> int {
            ++calls;
            throw ax::PermanentError("corrupt input");
        },
        {.max_retries = 3});
    REQUIRE(h);
    const auto id = h->id();
    REQUIRE_THROWS_AS(h->get(), ax::PermanentError);
    CHECK(calls == 1);
    auto q = sched.query(id);
    REQUIRE(q);
    CHECK(q->state == ax::TaskState::dead_lettered);
    CHECK(q->last_error == "corrupt input");
    CHECK(q->last_error_type == "ax::PermanentError");
}

TEST_CASE("the exception type is recorded, for non-std types too", "[failures]") {
    ax::Scheduler sched{fast_retries()};
    auto a = sched.submit([] { throw std::out_of_range("row 7"); }, {.max_retries = 0});
    auto b = sched.submit([] { throw 42; }, {.max_retries = 0});
    auto c = sched.submit([] { throw CustomError{3}; }, {.max_retries = 0});
    REQUIRE((a && b && c));
    const auto ida = a->id(), idb = b->id(), idc = c->id();
    REQUIRE_THROWS_AS(a->get(), std::out_of_range);
    REQUIRE_THROWS_AS(b->get(), int);
    REQUIRE_THROWS_AS(c->get(), CustomError);
    CHECK(sched.query(ida)->last_error_type == "std::out_of_range");
    CHECK(sched.query(ida)->last_error == "row 7");
    CHECK(sched.query(idb)->last_error_type == "int");
    CHECK(sched.query(idb)->last_error.find("non-standard exception") != std::string::npos);
    CHECK(sched.query(idc)->last_error_type.find("CustomError") != std::string::npos);
}

TEST_CASE("hooks report start, exception, retry, success and dead letters", "[failures][hooks]") {
    std::mutex mu;
    std::vector<std::string> log;
    auto record = [&](const char* what) {
        return [&log, &mu, what](const ax::TaskEvent& e) {
            std::lock_guard lock(mu);
            log.push_back(
                std::string(what) + " " + std::string(e.name) + " #" + std::to_string(e.attempt) +
                (e.error.empty() ? ""
                                 : " " + std::string(e.error_type) + ": " + std::string(e.error)));
        };
    };
    ax::Hooks hooks;
    hooks.on_start = record("start");
    hooks.on_success = record("success");
    hooks.on_exception = record("exception");
    hooks.on_retry = [&](const ax::TaskEvent& e) {
        std::lock_guard lock(mu);
        log.push_back("retry " + std::string(e.name) + " after " +
                      std::to_string(e.retry_delay.count() > 0 ? 1 : 0));
    };
    hooks.on_dead_letter = record("dead");
    auto cfg = fast_retries();
    cfg.min_workers = cfg.max_workers = 1;
    ax::Scheduler sched{cfg, hooks};

    auto flaky = sched.submit(
        [](ax::TaskContext& ctx) {
            if (ctx.attempt() == 1)
                throw std::runtime_error("blip");
            return 1;
        },
        {.name = "flaky", .max_retries = 1});
    REQUIRE(flaky);
    CHECK(flaky->get() == 1);
    auto doomed = sched.submit([]() -> int { throw std::runtime_error("down"); },
                               {.name = "doomed", .max_retries = 0});
    REQUIRE(doomed);
    REQUIRE_THROWS(doomed->get());
    REQUIRE(eventually([&] {
        std::lock_guard lock(mu);
        return log.size() == 8;
    }));
    std::lock_guard lock(mu);
    const std::vector<std::string> expected{
        "start flaky #1",
        "exception flaky #1 std::runtime_error: blip",
        "retry flaky after 1",
        "start flaky #2",
        "success flaky #2",
        "start doomed #1",
        "exception doomed #1 std::runtime_error: down",
        "dead doomed #1 std::runtime_error: down",
    };
    CHECK(log == expected);
}

TEST_CASE("hook events carry queue wait, run time and the retry's error", "[failures][hooks]") {
    // One worker on the manual clock: every wait and run time below is exact.
    struct Seen {
        std::string what, name, error_type, error;
        std::uint32_t attempt;
        std::chrono::nanoseconds queue_wait, run_time;
    };
    std::mutex mu;
    std::vector<Seen> seen;
    auto record = [&](const char* what) {
        return [&seen, &mu, what](const ax::TaskEvent& e) {
            std::lock_guard lock(mu);
            seen.push_back(Seen{what, std::string(e.name), std::string(e.error_type),
                                std::string(e.error), e.attempt, e.queue_wait, e.run_time});
        };
    };
    ax::Hooks hooks;
    hooks.on_start = record("start");
    hooks.on_success = record("success");
    hooks.on_exception = record("exception");
    hooks.on_retry = record("retry");
    auto cfg = fast_retries();
    cfg.min_workers = cfg.max_workers = 1;
    ax::Scheduler<ax::ManualClock> sched{cfg, hooks};
    const auto count = [&](const std::string& what) {
        std::lock_guard lock(mu);
        return std::count_if(seen.begin(), seen.end(),
                             [&](const Seen& x) { return x.what == what; });
    };

    std::atomic<bool> release{false};
    auto blocker = sched.submit(
        [&release] {
            while (!release.load())
                std::this_thread::sleep_for(100us);
        },
        {.name = "blocker"});
    REQUIRE(blocker);
    REQUIRE(eventually([&] { return blocker->state() == ax::TaskState::running; }));
    // Queued behind the busy worker for 30 ms; its first attempt runs 5 ms, its second 7 ms.
    auto queued = sched.submit(
        [](ax::TaskContext& ctx) {
            if (ctx.attempt() == 1) {
                ax::ManualClock::advance(5ms);
                throw std::runtime_error("blip");
            }
            ax::ManualClock::advance(7ms);
            return 1;
        },
        {.name = "queued", .max_retries = 1});
    REQUIRE(queued);
    ax::ManualClock::advance(30ms);
    release = true;
    REQUIRE(eventually([&] { return count("retry") == 1; }));
    ax::ManualClock::advance(1ms); // the retry delay
    REQUIRE(queued->get() == 1);
    REQUIRE(eventually([&] { return count("success") == 2; }));

    std::lock_guard lock(mu);
    const auto find = [&](const std::string& what, const std::string& name,
                          std::uint32_t attempt) -> const Seen& {
        const auto it = std::find_if(seen.begin(), seen.end(), [&](const Seen& x) {
            return x.what == what && x.name == name && x.attempt == attempt;
        });
        REQUIRE(it != seen.end());
        return *it;
    };
    CHECK(find("start", "blocker", 1).run_time == 0ns);
    CHECK(find("success", "blocker", 1).run_time == 30ms);
    // The queued task waited from its admission to the blocker's end.
    CHECK(find("start", "queued", 1).queue_wait == 30ms);
    for (const char* what : {"exception", "retry"}) {
        const Seen& e = find(what, "queued", 1);
        INFO(what);
        CHECK(e.queue_wait == 30ms);
        CHECK(e.run_time == 5ms);
        CHECK(e.error_type == "std::runtime_error");
        CHECK(e.error == "blip");
    }
    // The retry's wait counts from its re-queue, not from the admission.
    CHECK(find("start", "queued", 2).queue_wait == 0ns);
    CHECK(find("success", "queued", 2).queue_wait == 0ns);
    CHECK(find("success", "queued", 2).run_time == 7ms);
}

TEST_CASE("a throwing hook is contained and counted", "[failures][hooks]") {
    ax::Hooks hooks;
    hooks.on_start = [](const ax::TaskEvent&) { throw std::runtime_error("hook bug"); };
    hooks.on_success = [](const ax::TaskEvent&) { throw 7; };
    ax::Scheduler sched{fast_retries(), hooks};
    for (int i = 0; i < 5; ++i) {
        auto h = sched.submit([i] { return i; });
        REQUIRE(h);
        CHECK(h->get() == i);
    }
    // on_success runs after the terminal state is published: wait for the last one.
    REQUIRE(eventually([&] { return sched.metrics().totals.hook_failures == 10; }));
    CHECK(sched.metrics().totals.succeeded == 5);
}

TEST_CASE("the timeout hook fires from the watchdog", "[failures][hooks]") {
    std::atomic<int> timeouts{0};
    std::string seen_type;
    std::mutex mu;
    ax::Hooks hooks;
    std::chrono::nanoseconds seen_run_time{0};
    hooks.on_timeout = [&](const ax::TaskEvent& e) {
        std::lock_guard lock(mu);
        seen_type = std::string(e.error_type);
        seen_run_time = e.run_time;
        ++timeouts;
    };
    ax::Config cfg = fast_retries();
    ax::Scheduler<ax::ManualClock> sched{cfg, hooks};
    auto h = sched.submit(
        [](ax::TaskContext& ctx) {
            while (!ctx.stop_requested())
                std::this_thread::sleep_for(100us);
        },
        {.timeout = 50ms, .max_retries = 0});
    REQUIRE(h);
    REQUIRE(eventually([&] { return h->state() == ax::TaskState::running; }));
    ax::ManualClock::advance(100ms);
    REQUIRE_THROWS_AS(h->get(), ax::TaskTimedOut);
    // The hook runs on the maintenance tick, which may finish after the task does.
    REQUIRE(eventually([&] { return timeouts == 1; }));
    std::lock_guard lock(mu);
    CHECK(seen_type == "ax::TaskTimedOut");
    // The time run so far when the watchdog saw it: the manual clock moved 100 ms since start.
    CHECK(seen_run_time == 100ms);
}

TEST_CASE("dead letters: every attempt's error, replay, discard", "[failures][dead-letters]") {
    ax::Scheduler sched{fast_retries()};
    std::atomic<bool> fixed{false};
    std::atomic<int> runs{0};
    auto h = sched.submit(
        [&](ax::TaskContext& ctx) {
            ++runs;
            if (!fixed)
                throw std::runtime_error("attempt " + std::to_string(ctx.attempt()) + " failed");
            return 99;
        },
        {.name = "report", .priority = ax::Priority::high, .max_retries = 2});
    REQUIRE(h);
    const auto id = h->id();
    REQUIRE_THROWS_WITH(h->get(), "attempt 3 failed");

    auto letters = sched.dead_letters();
    REQUIRE(letters.size() == 1);
    const auto& d = letters[0];
    CHECK(d.id == id);
    CHECK(d.name == "report");
    CHECK(d.priority == ax::Priority::high);
    REQUIRE(d.attempts.size() == 3);
    for (std::uint32_t a = 0; a < 3; ++a) {
        CHECK(d.attempts[a].attempt == a + 1);
        CHECK(d.attempts[a].type == "std::runtime_error");
        CHECK(d.attempts[a].message == "attempt " + std::to_string(a + 1) + " failed");
        CHECK(d.attempts[a].ended >= d.attempts[a].started);
    }
    CHECK(sched.metrics().dead_letters == 1);

    // Replay once the cause is fixed: a new task with a new ID and a fresh attempt series.
    fixed = true;
    auto replayed = sched.replay_dead_letter(id);
    REQUIRE(replayed);
    CHECK(*replayed != id);
    REQUIRE(eventually([&] {
        auto q = sched.query(*replayed);
        return q && q->state == ax::TaskState::succeeded;
    }));
    auto q = sched.query(*replayed);
    CHECK(q->attempts == 1);
    CHECK(q->name == "report");
    CHECK(runs == 4);
    CHECK(sched.query(id)->state == ax::TaskState::dead_lettered); // the old ID keeps its story
    CHECK(sched.dead_letters().empty());
    auto again = sched.replay_dead_letter(id);
    REQUIRE_FALSE(again);
    CHECK(again.error().code == ax::Errc::invalid_options);

    // Discard.
    auto other = sched.submit([]() -> int { throw std::runtime_error("x"); }, {.max_retries = 0});
    REQUIRE(other);
    const auto oid = other->id();
    REQUIRE_THROWS(other->get());
    CHECK(sched.dead_letters().size() == 1);
    CHECK(sched.discard_dead_letter(oid));
    CHECK_FALSE(sched.discard_dead_letter(oid));
    CHECK(sched.dead_letters().empty());
}

TEST_CASE("the dead-letter list is bounded; overflow is counted and the callback sees all",
          "[failures][dead-letters]") {
    std::atomic<int> persisted{0};
    ax::Hooks hooks;
    hooks.on_dead_letter = [&](const ax::TaskEvent&) { ++persisted; };
    auto cfg = fast_retries();
    cfg.dead_letter_capacity = 3;
    ax::Scheduler sched{cfg, hooks};
    std::vector<ax::TaskId> ids;
    for (int i = 0; i < 5; ++i) {
        auto h = sched.submit([]() -> int { throw std::runtime_error("bad"); }, {.max_retries = 0});
        REQUIRE(h);
        ids.push_back(h->id());
        REQUIRE_THROWS(h->get());
    }
    REQUIRE(eventually([&] { return sched.metrics().totals.dead_letters_evicted == 2; }));
    CHECK(persisted == 5);
    const auto letters = sched.dead_letters();
    REQUIRE(letters.size() == 3);
    CHECK(letters[0].id == ids[2]); // the oldest two were evicted
    CHECK(letters[2].id == ids[4]);
}

TEST_CASE("a replay refused by backpressure stays in the list", "[failures][dead-letters]") {
    auto cfg = fast_retries();
    cfg.min_workers = cfg.max_workers = 1;
    cfg.queue_capacity = 2;
    cfg.soft_limit_ratio = 1.0;
    ax::Scheduler sched{cfg};
    auto dead = sched.submit([]() -> int { throw std::runtime_error("no"); }, {.max_retries = 0});
    REQUIRE(dead);
    const auto id = dead->id();
    REQUIRE_THROWS(dead->get());
    ax_test::Gate gate;
    auto blocker = sched.submit([&] { gate.wait(); });
    REQUIRE(blocker);
    REQUIRE(eventually([&] { return blocker->state() == ax::TaskState::running; }));
    std::vector<ax::TaskHandle<void>> fill;
    for (int i = 0; i < 2; ++i)
        fill.push_back(std::move(*sched.submit([] {})));
    auto refused = sched.replay_dead_letter(id);
    REQUIRE_FALSE(refused);
    CHECK(refused.error().code == ax::Errc::queue_full);
    CHECK(sched.dead_letters().size() == 1);
    gate.open();
    for (auto& f : fill)
        f.get();
    auto ok = sched.replay_dead_letter(id);
    REQUIRE(ok);
}

TEST_CASE("retry delays follow base x 2^(n-1) + jitter on the scheduler's clock",
          "[failures][retry]") {
    using Sched = ax::Scheduler<ax::ManualClock>;
    ax::Config cfg;
    cfg.min_workers = 1;
    cfg.max_workers = 1;
    cfg.retry_base_delay = 200ms;
    cfg.retry_jitter = 50ms;
    cfg.retry_max = 3;
    Sched sched{cfg};
    std::atomic<int> attempts{0};
    auto h = sched.submit([&attempts]() -> int {
        ++attempts;
        throw std::runtime_error("dependency down");
    });
    REQUIRE(h);
    const auto id = h->id();
    for (std::uint32_t n = 1; n <= 3; ++n) {
        INFO("after attempt " << n);
        REQUIRE(eventually([&] {
            auto q = sched.query(id);
            return q && q->state == ax::TaskState::waiting_retry && q->attempts == n;
        }));
        const auto q = sched.query(id);
        REQUIRE(q);
        // Manual time stands still while the attempt runs, so start = end of the attempt.
        const auto delay = q->retry_due - q->started;
        const auto base = std::chrono::milliseconds(200 << (n - 1));
        CHECK(delay >= base);
        CHECK(delay <= base + 50ms);
        // Not a moment early: just before the due time the task still waits, holding no thread.
        ax::ManualClock::advance(delay - 1ms);
        std::this_thread::sleep_for(50ms);
        CHECK(sched.query(id)->state == ax::TaskState::waiting_retry);
        // The worker counts itself idle a moment after it parks the retry: wait for it (a hang
        // guard), the state above already says the task holds no thread.
        CHECK(eventually([&] { return sched.metrics().workers.busy == 0; }));
        CHECK(sched.query(id)->state == ax::TaskState::waiting_retry);
        ax::ManualClock::advance(1ms);
    }
    REQUIRE(h->wait_for(20s));
    CHECK_THROWS_AS(h->get(), std::runtime_error);
    CHECK(attempts == 4);
    CHECK(sched.query(id)->state == ax::TaskState::dead_lettered);
}
