// Coroutine tasks (ax/coro.hpp): co_await on handles, nested tasks, when_all, then, schedule(),
// and the lifetime rules (cancellation, timeouts, retries, shutdown). Each rule has a test that
// fails when it breaks; the races run under TSan and ASan in CI.
#include "test_support.hpp"

#include <atomic>
#include <ax/coro.hpp>
#include <ax/scheduler.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <dirent.h>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using ax_test::eventually;
using ax_test::Gate;

namespace {

ax::Config small_pool(std::uint32_t workers) {
    ax::Config c;
    c.min_workers = workers;
    c.max_workers = workers;
    c.shutdown_grace = 5s;
    return c;
}

/// Counts live instances, so a test can see a frame's locals destroyed exactly once.
struct Tracked {
    std::atomic<int>* live;
    explicit Tracked(std::atomic<int>& n) : live(&n) { live->fetch_add(1); }
    Tracked(const Tracked&) = delete;
    Tracked& operator=(const Tracked&) = delete;
    ~Tracked() { live->fetch_sub(1); }
};

/// Threads of this process (Linux: entries of /proc/self/task).
int thread_count() {
    int n = 0;
    if (DIR* d = ::opendir("/proc/self/task")) {
        while (const dirent* e = ::readdir(d))
            if (e->d_name[0] != '.')
                ++n;
        ::closedir(d);
    }
    return n;
}

bool on_worker() {
    return ax::detail::current_host != nullptr;
}

/// Catch's assertions are not thread-safe: checks inside tasks count failures here (with the
/// line of the last one), and the test checks the count on its own thread (CHECK_TASKS).
std::atomic<int> task_failures{0};
std::atomic<int> task_failure_line{0};
#define TASK_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            task_failure_line.store(__LINE__);                                                     \
            task_failures.fetch_add(1);                                                            \
        }                                                                                          \
    } while (false)
#define CHECK_TASKS()                                                                              \
    do {                                                                                           \
        INFO("last failed check inside a task: line " << task_failure_line.load());                \
        CHECK(task_failures.exchange(0) == 0);                                                     \
    } while (false)

ax::Task<int> add_one(int x) {
    co_return x + 1;
}
ax::Task<int> throws_after(int x) {
    co_await add_one(x);
    throw std::runtime_error("nested " + std::to_string(x));
}

} // namespace

TEST_CASE("a coroutine task returns its value through an ordinary handle", "[coro]") {
    ax::Scheduler<> sched(small_pool(2));
    auto h = sched.submit([]() -> ax::Task<int> { co_return 41 + 1; });
    REQUIRE(h);
    CHECK(h->get() == 42);
    auto v = sched.submit([](ax::TaskContext& ctx) -> ax::Task<void> {
        TASK_CHECK(ctx.attempt() == 1);
        co_return;
    });
    REQUIRE(v);
    v->get();
    CHECK_TASKS();
}

TEST_CASE("co_await on a handle takes its value, its exception or TaskCancelled", "[coro]") {
    ax::Scheduler<> sched(small_pool(2));
    Gate gate;
    auto h = sched.submit([&]() -> ax::Task<std::string> {
        auto child = sched.submit([&] {
            gate.wait();
            return std::string("child");
        });
        std::string got = co_await child.value();
        auto failing = sched.submit([]() -> int { throw ax::PermanentError("boom"); });
        try {
            co_await failing.value();
            got += " no-throw";
        } catch (const ax::PermanentError& e) {
            got += std::string(" ") + e.what();
        }
        Gate never;
        auto blocked = sched.submit([&never](ax::TaskContext& ctx) {
            while (!ctx.stop_requested() && !never.is_open())
                std::this_thread::sleep_for(1ms);
        });
        TASK_CHECK(blocked);
        sched.cancel(blocked->id());
        try {
            co_await *blocked;
            got += " not-cancelled";
        } catch (const ax::TaskCancelled&) {
            got += " cancelled";
        }
        co_return got;
    });
    REQUIRE(h);
    gate.open();
    CHECK(h->get() == "child boom cancelled");
    CHECK_TASKS();
}

TEST_CASE("a suspended coroutine holds no thread: one worker runs the children it awaits",
          "[coro]") {
    ax::Scheduler<> sched(small_pool(1));
    auto h = sched.submit([&](ax::TaskContext& ctx) -> ax::Task<int> {
        int sum = 0;
        for (int i = 0; i < 50; ++i) {
            auto child = ctx.submit([i] { return i; });
            TASK_CHECK(child);
            sum += co_await *child;
            // Back on the (only) worker, not inside the child's ending.
            TASK_CHECK(on_worker());
        }
        co_return sum;
    });
    REQUIRE(h);
    REQUIRE(h->wait_for(30s));
    CHECK(h->get() == 49 * 50 / 2);
    CHECK_TASKS();
}

TEST_CASE("this_context() gives a coroutine taking nothing its context across suspensions",
          "[coro]") {
    ax::Scheduler<> sched(small_pool(1));
    std::atomic<std::uint64_t> seen_id{0};
    auto h = sched.submit([&]() -> ax::Task<int> {
        ax::TaskContext& ctx = co_await ax::this_context();
        seen_id = ctx.id().value;
        const int before = static_cast<int>(ctx.attempt());
        co_await ctx.submit([] { return 1; }).value();
        ax::TaskContext& again = co_await ax::this_context();
        again.heartbeat();
        TASK_CHECK(&again == &ctx); // one home for the whole task
        TASK_CHECK(again.id() == ctx.id() && !again.stop_requested());
        co_return before * 10 + static_cast<int>(again.attempt());
    });
    REQUIRE(h);
    const ax::TaskId id = h->id();
    CHECK(h->get() == 11);
    CHECK(seen_id.load() == id.value);
    CHECK_TASKS();
}

TEST_CASE("nested ax::Task runs inline and propagates its exception", "[coro]") {
    ax::Scheduler<> sched(small_pool(2));
    auto h = sched.submit([]() -> ax::Task<int> {
        int a = co_await add_one(1);
        try {
            co_await throws_after(a);
        } catch (const std::runtime_error& e) {
            TASK_CHECK(std::string(e.what()) == "nested 2");
            a += 10;
        }
        co_return a;
    });
    REQUIRE(h);
    CHECK(h->get() == 12);
    CHECK_TASKS();
}

TEST_CASE("no stack grows with a chain of awaits: resumption always goes through the queue",
          "[coro]") {
    // c(n) awaits c(n-1) ... c(0). Resumed inline inside the awaited task's ending, the chain
    // would unwind as N nested resumptions on one stack; through the queue each is one run.
    struct Chain {
        ax::Scheduler<>* sched;
        int n;
        ax::Task<int> operator()() {
            if (n == 0)
                co_return 0;
            auto next = sched->submit(Chain{sched, n - 1});
            TASK_CHECK(next);
            const int below = co_await *next;
            TASK_CHECK(on_worker());
            co_return below + 1;
        }
    };
    ax::Config cfg = small_pool(2);
    ax::Scheduler<> sched(cfg);
    constexpr int depth = 20000;
    auto h = sched.submit(Chain{&sched, depth});
    REQUIRE(h);
    REQUIRE(h->wait_for(120s));
    CHECK(h->get() == depth);
    CHECK_TASKS();
}

TEST_CASE("fan-out/fan-in of 100k children awaited by coroutines, max_workers = 1", "[coro]") {
    const int before = thread_count();
    ax::Config cfg = small_pool(1);
    cfg.subtask_capacity = 1u << 16;
    ax::Scheduler<> sched(cfg);
    constexpr int parents = 100;
    constexpr int children = 1000;
    std::atomic<int> most_threads{0};
    std::vector<ax::TaskHandle<long>> hs;
    for (int p = 0; p < parents; ++p) {
        auto h = sched.submit([&, p](ax::TaskContext& ctx) -> ax::Task<long> {
            std::vector<ax::TaskHandle<long>> kids;
            kids.reserve(children);
            for (int c = 0; c < children; ++c) {
                auto k = ctx.submit([p, c] { return long{p} * 1000 + c; });
                TASK_CHECK(k);
                kids.push_back(std::move(*k));
            }
            const std::vector<long> values = co_await ax::when_all(kids);
            int t = thread_count();
            int seen = most_threads.load();
            while (t > seen && !most_threads.compare_exchange_weak(seen, t)) {
            }
            long sum = 0;
            for (const long v : values)
                sum += v;
            co_return sum;
        });
        REQUIRE(h);
        hs.push_back(std::move(*h));
    }
    long total = 0;
    for (auto& h : hs) {
        REQUIRE(h.wait_for(300s));
        total += h.get();
    }
    const long n = long{parents} * children;
    CHECK(total == n * (n - 1) / 2);
    // The pool's one worker and the tick thread: nothing blocked a thread, nothing added one.
    CHECK(most_threads.load() <= before + 2);
    CHECK(sched.metrics().workers.peak <= 1);
    CHECK(sched.metrics().workers.created <= 1);
    CHECK_TASKS();
}

TEST_CASE("when_all rethrows the first failure after every task ended", "[coro]") {
    ax::Scheduler<> sched(small_pool(2));
    std::atomic<int> ended{0};
    auto h = sched.submit([&]() -> ax::Task<int> {
        std::vector<ax::TaskHandle<int>> hs;
        for (int i = 0; i < 20; ++i) {
            hs.push_back(sched
                             .submit(
                                 [&, i]() -> int {
                                     std::this_thread::sleep_for(std::chrono::microseconds(200));
                                     ended.fetch_add(1);
                                     if (i == 7 || i == 13)
                                         throw ax::PermanentError("child " + std::to_string(i));
                                     return i;
                                 },
                                 {.max_retries = 0})
                             .value());
        }
        try {
            co_await ax::when_all(hs);
        } catch (const ax::PermanentError& e) {
            TASK_CHECK(std::string(e.what()) == "child 7");
            TASK_CHECK(ended.load() == 20);
            for (auto& x : hs)
                TASK_CHECK(!x.valid());
            co_return 1;
        }
        co_return 0;
    });
    REQUIRE(h);
    CHECK(h->get() == 1);
    CHECK_TASKS();
}

TEST_CASE("then runs a continuation on the value without blocking a thread", "[coro]") {
    ax::Scheduler<> sched(small_pool(1));
    auto a = sched.submit([] { return 20; });
    REQUIRE(a);
    auto b = ax::then(sched, std::move(*a), [](int& v) { return std::to_string(v + 1); });
    REQUIRE(b);
    auto c = ax::then(sched, std::move(*b), [](std::string& s) { return s + "!"; });
    REQUIRE(c);
    CHECK(c->get() == "21!");

    // A failed antecedent fails the continuation with its exception; a cancelled one cancels it.
    auto bad = sched.submit([]() -> int { throw ax::PermanentError("first"); });
    auto after_bad = ax::then(sched, std::move(*bad), [](int& v) { return v; }, {.max_retries = 0});
    REQUIRE(after_bad);
    CHECK_THROWS_AS(after_bad->get(), ax::PermanentError);
    CHECK(sched.query(after_bad->id()).has_value());

    auto slow = sched.submit([&](ax::TaskContext& ctx) {
        while (!ctx.stop_requested())
            std::this_thread::sleep_for(1ms);
    });
    REQUIRE(slow);
    const ax::TaskId slow_id = slow->id();
    auto after_slow = ax::then(sched, std::move(*slow), [] { return 1; });
    REQUIRE(after_slow);
    sched.cancel(slow_id);
    REQUIRE(after_slow->wait_for(30s));
    CHECK(after_slow->state() == ax::TaskState::cancelled);
    CHECK_THROWS_AS(after_slow->get(), ax::TaskCancelled);
    CHECK_TASKS();
}

TEST_CASE("a suspended coroutine is pending: query, list_tasks and cancel by ID; cancel destroys "
          "its frame at once",
          "[coro][lifetime]") {
    ax::Scheduler<> sched(small_pool(2));
    std::atomic<int> live{0};
    Gate gate;
    auto h = sched.submit([&]() -> ax::Task<int> {
        Tracked t(live);
        auto c = sched.submit([&] {
            gate.wait();
            return 1;
        });
        co_return co_await c.value();
    });
    REQUIRE(h);
    const ax::TaskId id = h->id();
    REQUIRE(eventually([&] {
        auto q = sched.query(id);
        return q && q->state == ax::TaskState::pending;
    }));
    CHECK(live.load() == 1);
    bool listed = false;
    for (const auto& t : sched.list_tasks(ax::TaskState::pending, 100))
        listed = listed || t.id == id;
    CHECK(listed);
    CHECK(sched.query(id)->attempts == 1);
    CHECK(sched.cancel(id));
    CHECK(live.load() == 0); // the frame (and its locals) went with the cancel
    CHECK(h->state() == ax::TaskState::cancelled);
    gate.open(); // the awaited task runs on, unaffected
    REQUIRE(sched.shutdown(ax::ShutdownMode::drain, 30s));
    CHECK_THROWS_AS(h->get(), ax::TaskCancelled);
    CHECK_TASKS();
}

TEST_CASE("cancel while a coroutine runs: its stop token fires, it ends cancelled at its next "
          "suspension",
          "[coro][lifetime]") {
    ax::Scheduler<> sched(small_pool(2));
    std::atomic<int> live{0};
    std::atomic<bool> started{false}, stopped_by_token{false}, went_on{false};
    auto h = sched.submit([&](ax::TaskContext& ctx) -> ax::Task<int> {
        Tracked t(live);
        std::stop_callback cb(ctx.stop_token(), [&] { stopped_by_token = true; });
        started = true;
        while (!ctx.stop_requested())
            std::this_thread::sleep_for(1ms);
        // Already ended: a co_await is a cancellation point all the same.
        auto done = sched.submit([] { return 1; }).value();
        while (!done.ready())
            std::this_thread::sleep_for(1ms);
        co_await done;
        went_on = true;
        co_return 0;
    });
    REQUIRE(h);
    REQUIRE(eventually([&] { return started.load(); }));
    CHECK(sched.cancel(h->id()));
    REQUIRE(h->wait_for(30s));
    CHECK(h->state() == ax::TaskState::cancelled);
    CHECK(stopped_by_token.load());
    CHECK(!went_on.load());
    CHECK(live.load() == 0);
    CHECK_TASKS();
}

TEST_CASE("cancellation racing resumption: each coroutine is resumed or cancelled, never both, "
          "its frame destroyed once",
          "[coro][lifetime][race]") {
    ax::Scheduler<> sched(small_pool(2));
    std::atomic<int> live{0};
    constexpr int rounds = 300;
    std::vector<std::atomic<int>> resumed(rounds);
    std::vector<ax::TaskHandle<int>> hs;
    for (int i = 0; i < rounds; ++i) {
        auto h = sched.submit([&, i]() -> ax::Task<int> {
            Tracked t(live);
            for (int k = 0; k < 3; ++k) {
                auto c = sched.submit([] { return 1; });
                if (!c)
                    co_return -1;
                co_await *c;
            }
            resumed[static_cast<std::size_t>(i)].fetch_add(1);
            co_return 1;
        });
        REQUIRE(h);
        for (int spin = 0; spin < (i % 7) * 50; ++spin)
            std::this_thread::yield();
        sched.cancel(h->id());
        hs.push_back(std::move(*h));
    }
    int ok = 0, cancelled = 0;
    for (int i = 0; i < rounds; ++i) {
        REQUIRE(hs[static_cast<std::size_t>(i)].wait_for(30s));
        const auto st = hs[static_cast<std::size_t>(i)].state();
        if (st == ax::TaskState::succeeded) {
            ++ok;
            CHECK(resumed[static_cast<std::size_t>(i)].load() == 1);
        } else {
            CHECK(st == ax::TaskState::cancelled);
            ++cancelled;
        }
        CHECK(resumed[static_cast<std::size_t>(i)].load() <= 1);
    }
    CHECK(ok + cancelled == rounds);
    REQUIRE(sched.shutdown(ax::ShutdownMode::drain, 30s));
    CHECK(live.load() == 0);
    CHECK_TASKS();
}

TEST_CASE("a suspended coroutine is not stuck: its timeout counts per run", "[coro][timeout]") {
    ax::Config cfg = small_pool(2);
    cfg.dispatch_interval = 1ms;
    cfg.watchdog_interval = 2ms;
    cfg.retry_base_delay = 1ms;
    ax::Scheduler<> sched(cfg);
    auto h = sched.submit(
        [&]() -> ax::Task<int> {
            for (int i = 0; i < 3; ++i)
                co_await sched
                    .submit([] {
                        std::this_thread::sleep_for(60ms);
                        return 1;
                    })
                    .value();
            co_return 7;
        },
        {.timeout = 20ms, .max_retries = 0});
    REQUIRE(h);
    REQUIRE(h->wait_for(30s));
    const auto q = sched.query(h->id());
    REQUIRE(q);
    CHECK(q->state == ax::TaskState::succeeded);
    CHECK(q->attempts == 1); // resumptions are not attempts
    CHECK(sched.metrics().totals.timeouts == 0);
    CHECK(h->get() == 7);
    CHECK_TASKS();
}

TEST_CASE("a run that outlives its timeout fails the attempt; the retry restarts the coroutine",
          "[coro][timeout]") {
    ax::Config cfg = small_pool(2);
    cfg.dispatch_interval = 1ms;
    cfg.watchdog_interval = 2ms;
    cfg.retry_base_delay = 1ms;
    cfg.retry_jitter = 0ms;
    ax::Scheduler<> sched(cfg);
    std::atomic<int> starts{0}, live{0};
    auto h = sched.submit(
        [&](ax::TaskContext& ctx) -> ax::Task<int> {
            Tracked t(live);
            starts.fetch_add(1);
            co_await sched.submit([] { return 1; }).value();
            if (ctx.attempt() == 1) {
                while (!ctx.stop_requested()) // no heartbeat: the watchdog times this run out
                    std::this_thread::sleep_for(1ms);
                co_await sched.submit([] { return 1; }).value(); // the suspension ends it
                co_return -1;
            }
            ctx.heartbeat();
            co_return ctx.attempt();
        },
        {.timeout = 30ms, .max_retries = 1});
    REQUIRE(h);
    REQUIRE(h->wait_for(30s));
    CHECK(starts.load() == 2);
    CHECK(sched.query(h->id())->attempts == 2);
    CHECK(sched.metrics().totals.timeouts >= 1);
    CHECK(h->get() == 2);
    CHECK(live.load() == 0);
    CHECK_TASKS();
}

TEST_CASE("retries restart a failed coroutine with a fresh frame; captures are kept",
          "[coro][retry]") {
    ax::Config cfg = small_pool(2);
    cfg.retry_base_delay = 1ms;
    cfg.retry_jitter = 0ms;
    ax::Scheduler<> sched(cfg);
    std::atomic<int> live{0};
    auto counter = std::make_shared<std::atomic<int>>(0);
    auto h = sched.submit(
        [&, counter](ax::TaskContext& ctx) -> ax::Task<int> {
            Tracked t(live);
            counter->fetch_add(1);
            const int v = co_await sched.submit([] { return 5; }).value();
            if (ctx.attempt() < 3)
                throw std::runtime_error("attempt " + std::to_string(ctx.attempt()));
            co_return v * 10 + static_cast<int>(ctx.attempt());
        },
        {.max_retries = 3});
    REQUIRE(h);
    CHECK(h->get() == 53);
    CHECK(counter->load() == 3);
    CHECK(live.load() == 0);
    // Failures exhaust the retries: dead-lettered with the last exception.
    auto bad = sched.submit(
        [&]() -> ax::Task<void> {
            co_await sched.submit([] {}).value();
            throw std::runtime_error("always");
        },
        {.max_retries = 1});
    REQUIRE(bad);
    REQUIRE(bad->wait_for(30s));
    CHECK(bad->state() == ax::TaskState::dead_lettered);
    CHECK(sched.query(bad->id())->attempts == 2);
    CHECK_THROWS_AS(bad->get(), std::runtime_error);
    CHECK_TASKS();
}

TEST_CASE("schedule() hops onto a worker with a new priority and group", "[coro][schedule]") {
    ax::Scheduler<> sched(small_pool(2));
    const ax::GroupId g = sched.group("one-at-a-time");
    sched.set_group_limit(g, 1);
    std::atomic<int> inside{0}, most{0};
    std::vector<ax::TaskHandle<ax::TaskId>> hs;
    for (int i = 0; i < 6; ++i) {
        auto h = sched.submit([&]() -> ax::Task<ax::TaskId> {
            auto me = co_await sched.try_schedule({.priority = ax::Priority::high, .group = g});
            TASK_CHECK(me);
            TASK_CHECK(on_worker());
            for (int k = 0; k < 2; ++k) {
                const int now = inside.fetch_add(1) + 1;
                int seen = most.load();
                while (now > seen && !most.compare_exchange_weak(seen, now)) {
                }
                std::this_thread::sleep_for(2ms);
                inside.fetch_sub(1);
                // A suspension gives the group slot back; the resumption takes one again.
                co_await sched.submit([] { return 0; }).value();
            }
            co_return *me;
        });
        REQUIRE(h);
        hs.push_back(std::move(*h));
    }
    for (auto& h : hs) {
        REQUIRE(h.wait_for(30s));
        const ax::TaskId id = h.id();
        const auto q = sched.query(id);
        REQUIRE(q);
        CHECK(q->priority == ax::Priority::high);
        CHECK(q->group == g);
        CHECK(h.get() == id); // try_schedule's value is the task's own ID
    }
    CHECK(most.load() == 1);
    CHECK_TASKS();
}

TEST_CASE("schedule() refused: SubmitRefused or an Expected with the SubmitError",
          "[coro][schedule]") {
    ax::Config cfg = small_pool(2);
    cfg.queue_capacity = 4;
    Gate blocker, filled; // before the schedulers: they outlive every task that waits on them
    ax::Scheduler<> sched(cfg);
    ax::Scheduler<> other(small_pool(1));
    auto block = sched.submit([&] { blocker.wait(); });
    REQUIRE(block);
    std::atomic<bool> running{false};
    auto h = sched.submit([&]() -> ax::Task<std::string> {
        std::string out;
        try {
            co_await sched.schedule({.group = ax::GroupId{77}});
        } catch (const ax::SubmitRefused& e) {
            out += e.error().code == ax::Errc::invalid_options ? "invalid" : "?";
        }
        try {
            co_await other.schedule();
        } catch (const std::invalid_argument&) {
            out += " foreign";
        }
        running = true;
        filled.wait(); // the test fills the queue behind us
        auto r = co_await sched.try_schedule({.priority = ax::Priority::low});
        if (!r)
            out += r.error().retryable() ? " busy" : " ?";
        try {
            co_await sched.schedule();
        } catch (const ax::SubmitRefused& e) {
            out += e.error().retryable() ? " refused" : " ?";
        }
        co_return out;
    });
    REQUIRE(h);
    REQUIRE(eventually([&] { return running.load(); }));
    std::vector<ax::TaskHandle<void>> fill;
    while (true) {
        auto f = sched.submit([] {}, {.priority = ax::Priority::high});
        if (!f)
            break;
        fill.push_back(std::move(*f));
    }
    filled.open();
    REQUIRE(h->wait_for(30s));
    CHECK(h->get() == "invalid foreign busy refused");
    blocker.open();
    CHECK_TASKS();
}

TEST_CASE("a coroutine in a group awaits a task of its own group without deadlock",
          "[coro][groups]") {
    ax::Scheduler<> sched(small_pool(1));
    const ax::GroupId g = sched.group("solo");
    sched.set_group_limit(g, 1);
    auto h = sched.submit(
        [&]() -> ax::Task<int> {
            auto c = sched.submit([] { return 3; }, {.group = g});
            co_return co_await c.value() + 1;
        },
        {.group = g});
    REQUIRE(h);
    REQUIRE(h->wait_for(30s));
    CHECK(h->get() == 4);
    CHECK_TASKS();
}

TEST_CASE("shutdown(drain) lets suspended coroutines finish", "[coro][shutdown]") {
    auto sched = std::make_unique<ax::Scheduler<>>(small_pool(2));
    auto h = sched->submit([s = sched.get()]() -> ax::Task<int> {
        co_return co_await s
            ->submit([] {
                std::this_thread::sleep_for(30ms);
                return 9;
            })
            .value();
    });
    REQUIRE(h);
    REQUIRE(eventually([&] {
        auto q = sched->query(h->id());
        return q && q->state != ax::TaskState::queued && q->state != ax::TaskState::running;
    }));
    CHECK(sched->shutdown(ax::ShutdownMode::drain, 30s));
    sched.reset();
    CHECK(h->get() == 9);
    CHECK_TASKS();
}

TEST_CASE("a scheduler destroyed while a coroutine is suspended cancels it and destroys its "
          "frame; the handle outlives it",
          "[coro][shutdown][lifetime]") {
    std::atomic<int> live{0};
    ax::TaskHandle<int> h;
    {
        ax::Config cfg = small_pool(2);
        cfg.shutdown_grace = 100ms;
        ax::Scheduler<> sched(cfg);
        auto s = sched.submit([&]() -> ax::Task<int> {
            Tracked t(live);
            co_return co_await sched
                .submit([](ax::TaskContext& ctx) {
                    while (!ctx.stop_requested()) // ends only when shutdown cancels it
                        std::this_thread::sleep_for(1ms);
                    return 1;
                })
                .value();
        });
        REQUIRE(s);
        h = std::move(*s);
        REQUIRE(eventually([&] { return h.state() == ax::TaskState::pending; }));
        CHECK(live.load() == 1);
    } // ~Scheduler: drain for 100 ms, then cancel
    CHECK(live.load() == 0);
    CHECK(h.state() == ax::TaskState::cancelled);
    CHECK_THROWS_AS(h.get(), ax::TaskCancelled);
    CHECK_TASKS();
}

TEST_CASE("a handle of a scheduler that shut down can be awaited; an unfinished foreign one is "
          "refused",
          "[coro][shutdown][lifetime]") {
    ax::TaskHandle<int> done;
    {
        ax::Scheduler<> gone(small_pool(1));
        done = gone.submit([] { return 5; }).value();
    } // drained: its task ended
    ax::Scheduler<> other(small_pool(1));
    Gate gate;
    auto pending = other.submit([&] {
        gate.wait();
        return 6;
    });
    REQUIRE(pending);
    ax::Scheduler<> sched(small_pool(2));
    auto h = sched.submit([&]() -> ax::Task<int> {
        int v = co_await done;
        try {
            co_await *pending;
        } catch (const std::invalid_argument&) {
            v += 100;
        }
        co_return v;
    });
    REQUIRE(h);
    CHECK(h->get() == 105);
    gate.open();
    CHECK(pending->get() == 6);
    CHECK_TASKS();
}
