// Issue 31: a waiting submit that helps (SubmitOptions::help_while_waiting): the producer runs
// queued tasks on its own thread instead of parking. Each task so run must still be dispatched in
// ring order, watched by the watchdog, cancellable, retried, counted, and end exactly once; a
// body's exception stays in the task; a deadline or shutdown met while helping ends the wait as
// it would a parked one. Each case declares its scheduler after the objects its tasks use, so the
// scheduler (draining its last tasks) is destroyed before them.
#include "test_support.hpp"

#include <algorithm>
#include <atomic>
#include <ax/scheduler.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using ax_test::eventually;

namespace {

/// One worker, capacity 8 (soft limit 6, room mark 3), no scale-out: the worker is held on a gate
/// while the test fills the queue, so what the queue holds is known.
ax::Config one_worker() {
    ax::Config c;
    c.min_workers = 1;
    c.max_workers = 1;
    c.queue_capacity = 8;
    c.scale_out_when_saturated = false;
    c.watchdog_interval = 10ms;
    c.timeout_grace = 50ms;
    c.retry_base_delay = 1ms;
    return c;
}

/// Which tasks ran, in order, and on which thread.
struct Ran {
    std::mutex m;
    std::vector<std::string> names;
    std::vector<std::thread::id> threads;
    void add(const std::string& n) {
        std::lock_guard lock(m);
        names.push_back(n);
        threads.push_back(std::this_thread::get_id());
    }
    std::vector<std::string> names_now() {
        std::lock_guard lock(m);
        return names;
    }
};

ax::SubmitOptions helping(ax::Priority p = ax::Priority::normal) {
    ax::SubmitOptions o;
    o.priority = p;
    o.help_while_waiting = true;
    return o;
}

/// Holds the only worker on `gate` (the queue is empty once it runs).
template <class Sched> void hold_worker(Sched& sched, ax_test::Gate& gate) {
    REQUIRE(sched.post([&gate] { gate.wait(); }));
    REQUIRE(eventually([&] { return sched.metrics().queue_length_total == 0; }));
}

/// Queues low, low, normal, normal, high, high (up to the soft limit), then two more high (up
/// to capacity), each recording itself.
template <class Sched> void queue_mixed(Sched& sched, Ran& ran) {
    const std::pair<const char*, ax::Priority> tasks[] = {
        {"L1", ax::Priority::low},    {"L2", ax::Priority::low},  {"N1", ax::Priority::normal},
        {"N2", ax::Priority::normal}, {"H1", ax::Priority::high}, {"H2", ax::Priority::high},
        {"H3", ax::Priority::high},   {"H4", ax::Priority::high}};
    for (const auto& [name, p] : tasks) {
        const std::string n = name;
        REQUIRE(sched.post([&ran, n] { ran.add(n); }, {.priority = p}));
    }
    REQUIRE(sched.metrics().queue_length_total == 8);
}

} // namespace

TEST_CASE("Helping post_wait runs the tasks the worker would have taken, in ring order, on the "
          "producer's thread, each once",
          "[caller_runs]") {
    // The order a worker takes them, from a twin scheduler that does not help.
    std::vector<std::string> reference;
    {
        ax_test::Gate gate;
        Ran ran;
        ax::Scheduler<> sched{one_worker()};
        hold_worker(sched, gate);
        queue_mixed(sched, ran);
        gate.open();
        REQUIRE(eventually([&] { return ran.names_now().size() == 8; }));
        reference = ran.names_now();
    }
    ax_test::Gate gate;
    Ran ran;
    ax::Scheduler<> sched{one_worker()};
    hold_worker(sched, gate);
    queue_mixed(sched, ran);
    const auto refused = sched.post([] {});
    REQUIRE_FALSE(refused);
    REQUIRE(refused.error().code == ax::Errc::queue_full);
    // The worker is held: only this thread can make room. A normal task needs the length at 5,
    // so it runs at least three queued tasks (a dispatch's worth at a time), then admits its own.
    const auto got = sched.post_wait([&ran] { ran.add("mine"); }, helping(),
                                     std::chrono::steady_clock::now() + 20s);
    REQUIRE(got);
    auto names = ran.names_now();
    const std::size_t helped = names.size();
    REQUIRE(helped >= 3);
    REQUIRE(helped <= 8);
    for (std::size_t k = 0; k < helped; ++k) {
        CHECK(names[k] == reference[k]);
        CHECK(ran.threads[k] == std::this_thread::get_id());
    }
    CHECK(names[0] == "H1"); // the high lane first
    CHECK(sched.metrics().queue_length_total == 8 - helped + 1);
    gate.open();
    REQUIRE(eventually([&] { return ran.names_now().size() == 9; }));
    names = ran.names_now();
    std::sort(names.begin(), names.end());
    CHECK(names ==
          std::vector<std::string>{"H1", "H2", "H3", "H4", "L1", "L2", "N1", "N2", "mine"});
    // Counted like a worker's: every task succeeded once (the gate task, eight, and "mine").
    REQUIRE(eventually([&] { return sched.metrics().totals.succeeded == 10; }));
    const auto m = sched.metrics();
    CHECK(m.totals.submitted == 10);
    // The per-worker counters the controller reads include the producer's guest slot.
    CHECK(m.totals.attempts_succeeded == 10);
    CHECK(m.totals.attempts_failed == 0);
}

TEST_CASE("A task the producer runs keeps its exception, retries and dead-letters as on a "
          "worker",
          "[caller_runs]") {
    ax_test::Gate gate;
    std::atomic<int> attempts{0};
    ax::Scheduler<> sched{one_worker()};
    hold_worker(sched, gate);
    std::vector<ax::TaskHandle<int>> handles;
    // Eight (high, up to capacity): a normal submit needs three of them run.
    for (int i = 0; i < 8; ++i) {
        auto h = sched.submit(
            [&attempts]() -> int {
                ++attempts;
                throw std::runtime_error("boom");
            },
            {.priority = ax::Priority::high, .max_retries = 1});
        REQUIRE(h);
        handles.push_back(std::move(*h));
    }
    // The throws stay in the tasks: post_wait returns normally.
    std::optional<ax::Expected<ax::TaskHandle<int>>> mine;
    REQUIRE_NOTHROW(mine.emplace(
        sched.submit_wait([] { return 7; }, helping(), std::chrono::steady_clock::now() + 20s)));
    REQUIRE(mine->has_value());
    CHECK(attempts.load() >= 3);
    gate.open();
    for (auto& h : handles) {
        REQUIRE(h.wait_for(20s));
        CHECK(h.state() == ax::TaskState::dead_lettered);
    }
    CHECK((*mine)->get() == 7);
    CHECK(attempts.load() == 16); // each task twice: the first attempt and its one retry
    REQUIRE(eventually([&] { return sched.metrics().totals.dead_lettered == 8; }));
    CHECK(sched.metrics().totals.succeeded == 2);
    CHECK(sched.metrics().totals.attempts_failed == 16);
}

TEST_CASE("The watchdog times out a task the producer runs; cancel reaches one too",
          "[caller_runs]") {
    ax_test::Gate gate;
    std::atomic<std::thread::id> timed_thread{};
    std::atomic<bool> cancellable_started{false};
    ax::Scheduler<> sched{one_worker()};
    hold_worker(sched, gate);
    // Heads the queue (high): it waits for its stop, which only the watchdog's timeout gives.
    auto stuck = sched.submit(
        [&](ax::TaskContext& ctx) {
            timed_thread = std::this_thread::get_id();
            while (!ctx.stop_requested())
                std::this_thread::sleep_for(1ms);
        },
        {.priority = ax::Priority::high, .timeout = 30ms, .max_retries = 0});
    REQUIRE(stuck);
    // Next (high): waits for its stop, which only the test's cancel gives.
    auto cancellable = sched.submit(
        [&](ax::TaskContext& ctx) {
            cancellable_started = true;
            while (!ctx.stop_requested())
                std::this_thread::sleep_for(1ms);
        },
        {.priority = ax::Priority::high});
    REQUIRE(cancellable);
    // Six more high, to capacity: a normal submit needs three run, these two first.
    for (int i = 0; i < 6; ++i)
        REQUIRE(sched.post([] {}, {.priority = ax::Priority::high}));
    // No Catch assertion off the main thread (Catch is not thread-safe): results in atomics.
    std::atomic<long> listed{-1};
    std::atomic<bool> cancelled{false};
    std::thread canceller([&] {
        if (!eventually([&] { return cancellable_started.load(); }))
            return;
        // Listed as running while the producer runs it.
        const auto running = sched.list_tasks(ax::TaskState::running, 10);
        listed = std::count_if(running.begin(), running.end(),
                               [&](const ax::TaskSummary& t) { return t.id == cancellable->id(); });
        cancelled = sched.cancel(cancellable->id());
    });
    const auto got = sched.post_wait([] {}, helping(), std::chrono::steady_clock::now() + 20s);
    canceller.join();
    CHECK(listed.load() == 1);
    CHECK(cancelled.load());
    REQUIRE(got);
    CHECK(timed_thread.load() == std::this_thread::get_id());
    REQUIRE(stuck->wait_for(20s));
    CHECK(stuck->state() == ax::TaskState::dead_lettered);
    const auto info = sched.query(stuck->id());
    REQUIRE(info);
    CHECK(info->last_error_type == "ax::TaskTimedOut");
    REQUIRE(cancellable->wait_for(20s));
    CHECK(cancellable->state() == ax::TaskState::cancelled);
    CHECK(sched.metrics().totals.timeouts == 1);
    gate.open();
}

TEST_CASE("A helping producer looks at its deadline and stop token between tasks",
          "[caller_runs]") {
    SECTION("past the deadline with room made: admitted, the task's length overshooting it") {
        ax_test::Gate gate;
        std::atomic<int> ran{0};
        ax::Scheduler<> sched{one_worker()};
        hold_worker(sched, gate);
        for (int i = 0; i < 6; ++i)
            REQUIRE(sched.post([&ran] {
                std::this_thread::sleep_for(30ms);
                ++ran;
            }));
        const auto t0 = std::chrono::steady_clock::now();
        const auto got = sched.post_wait([&ran] { ++ran; }, helping(), t0 + 10ms);
        // One task run (the deadline passed inside it), and that one made room.
        REQUIRE(got);
        CHECK(ran.load() == 1);
        CHECK(std::chrono::steady_clock::now() - t0 >= 30ms);
        gate.open();
    }
    SECTION("past the deadline without room: the backpressure error, after one task") {
        ax_test::Gate gate;
        std::atomic<int> ran{0};
        ax::Scheduler<> sched{one_worker()};
        hold_worker(sched, gate);
        // High tasks fill to capacity (8): a normal one needs the length at 5, three tasks away.
        for (int i = 0; i < 8; ++i)
            REQUIRE(sched.post(
                [&ran] {
                    std::this_thread::sleep_for(30ms);
                    ++ran;
                },
                {.priority = ax::Priority::high}));
        const auto t0 = std::chrono::steady_clock::now();
        const auto r = sched.post_wait([] {}, helping(), t0 + 10ms);
        REQUIRE_FALSE(r);
        CHECK(r.error().code == ax::Errc::busy);
        CHECK(ran.load() == 1);
        gate.open();
        REQUIRE(eventually([&] { return ran.load() == 8; }));
    }
    SECTION("a stop requested by the task it runs: the backpressure error, after that task") {
        ax_test::Gate gate;
        std::atomic<int> ran{0};
        std::stop_source stop;
        ax::Scheduler<> sched{one_worker()};
        hold_worker(sched, gate);
        for (int i = 0; i < 8; ++i)
            REQUIRE(sched.post(
                [&ran, &stop] {
                    stop.request_stop();
                    ++ran;
                },
                {.priority = ax::Priority::high}));
        const auto r = sched.post_wait([] {}, helping(), stop.get_token());
        REQUIRE_FALSE(r);
        CHECK(r.error().code == ax::Errc::busy);
        CHECK(ran.load() == 1);
        gate.open();
        REQUIRE(eventually([&] { return ran.load() == 8; }));
    }
}

TEST_CASE("Shutdown while the producer helps: the task it runs is cancelled, the wait answers "
          "shutting_down, the drain counts the task",
          "[caller_runs]") {
    ax_test::Gate gate;
    std::atomic<bool> started{false};
    ax::Scheduler<> sched{one_worker()};
    hold_worker(sched, gate);
    auto waits = sched.submit(
        [&](ax::TaskContext& ctx) {
            started = true;
            while (!ctx.stop_requested())
                std::this_thread::sleep_for(1ms);
        },
        {.priority = ax::Priority::high});
    REQUIRE(waits);
    for (int i = 0; i < 5; ++i)
        REQUIRE(sched.post([] {}));
    std::optional<ax::Expected<ax::TaskId>> got;
    std::thread producer([&] {
        got.emplace(sched.post_wait([] {}, helping(), std::chrono::steady_clock::now() + 20s));
    });
    REQUIRE(eventually([&] { return started.load(); }));
    gate.open();
    CHECK(sched.shutdown(ax::ShutdownMode::cancel, 20s));
    producer.join();
    REQUIRE(got.has_value());
    REQUIRE_FALSE(got->has_value());
    CHECK(got->error().code == ax::Errc::shutting_down);
    REQUIRE(waits->wait_for(20s));
    CHECK(waits->state() == ax::TaskState::cancelled);
}

TEST_CASE("A task may post_wait helping into its own scheduler's full queue, and a task the "
          "producer runs may wait on its subtask",
          "[caller_runs]") {
    ax_test::Gate gate;
    std::atomic<int> ran{0};
    std::atomic<int> child_ran{0};
    std::atomic<int> child_failed{0};
    std::atomic<bool> admitted{false};
    ax::Scheduler<> sched{one_worker()};
    // The only worker runs a task that fills the queue and then posts once more with a wait: a
    // parked wait would wait for itself; a helping one runs the queued tasks nested.
    REQUIRE(sched.post([&] {
        for (;;) {
            if (!sched.post([&ran] { ++ran; }))
                break;
        }
        admitted = static_cast<bool>(
            sched.post_wait([&ran] { ++ran; }, helping(), std::chrono::steady_clock::now() + 20s));
    }));
    REQUIRE(eventually([&] { return admitted.load(); }));
    REQUIRE(eventually([&] { return ran.load() == 7; }));

    // A producer-run task submits a subtask and waits on it (a helping wait inside the help).
    hold_worker(sched, gate);
    for (int i = 0; i < 6; ++i)
        REQUIRE(sched.post([&](ax::TaskContext& ctx) {
            auto h = ctx.submit([&child_ran] {
                ++child_ran;
                return 1;
            });
            if (!h || h->get() != 1)
                ++child_failed;
        }));
    REQUIRE(sched.post_wait([] {}, helping(), std::chrono::steady_clock::now() + 20s));
    CHECK(child_ran.load() >= 1);
    gate.open();
    REQUIRE(eventually([&] { return child_ran.load() == 6; }));
    CHECK(child_failed.load() == 0);
    // This thread is no worker of the scheduler after helping: its shutdown joins the pool.
    CHECK(sched.shutdown(ax::ShutdownMode::drain, 20s));
}

TEST_CASE("Helping producers racing workers through a tiny queue: every task ends exactly once",
          "[caller_runs]") {
    ax::Config cfg;
    cfg.min_workers = 2;
    cfg.max_workers = 2;
    cfg.queue_capacity = 16;
    cfg.retry_base_delay = 1ms;
    ax::Scheduler<> sched{cfg};
    constexpr int producers = 3;
    constexpr int per_producer = 1500;
    std::vector<std::vector<ax::TaskHandle<int>>> handles(producers);
    std::atomic<int> refused{0};
    std::vector<std::thread> threads;
    for (int p = 0; p < producers; ++p)
        threads.emplace_back([&, p] {
            for (int i = 0; i < per_producer; ++i) {
                ax::SubmitOptions o = helping(i % 7 == 0   ? ax::Priority::high
                                              : i % 3 == 0 ? ax::Priority::low
                                                           : ax::Priority::normal);
                o.max_retries = 1;
                // Every tenth task throws on its first attempt (a retry follows), every
                // thirteenth on both (dead-lettered).
                auto h = sched.submit_wait(
                    [i](ax::TaskContext& ctx) -> int {
                        if (i % 13 == 0 || (i % 10 == 0 && ctx.attempt() == 1))
                            throw std::runtime_error("boom");
                        return i;
                    },
                    o, std::chrono::steady_clock::now() + 20s);
                if (h)
                    handles[static_cast<std::size_t>(p)].push_back(std::move(*h));
                else
                    ++refused;
            }
        });
    for (auto& t : threads)
        t.join();
    CHECK(refused.load() == 0);
    std::vector<ax::TaskHandle<int>> all;
    for (auto& v : handles)
        for (auto& h : v)
            all.push_back(std::move(h));
    ax_test::check_every_task_ended_once(sched, all, 20s);
}
