// Coroutine tasks (ax/coro.hpp): co_await on handles, nested tasks, when_all, then, schedule(),
// and the lifetime rules (cancellation, timeouts, retries, shutdown). Each rule has a test that
// fails when it breaks; the races run under TSan and ASan in CI.
#include "test_support.hpp"

#include <ax/coro.hpp>
#include <ax/scheduler.hpp>

#include <atomic>
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

bool on_worker() { return ax::detail::current_host != nullptr; }

ax::Task<int> add_one(int x) { co_return x + 1; }
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
        CHECK(ctx.attempt() == 1);
        co_return;
    });
    REQUIRE(v);
    v->get();
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
        REQUIRE(blocked);
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
}

TEST_CASE("a suspended coroutine holds no thread: one worker runs the children it awaits",
          "[coro]") {
    ax::Scheduler<> sched(small_pool(1));
    auto h = sched.submit([&](ax::TaskContext& ctx) -> ax::Task<int> {
        int sum = 0;
        for (int i = 0; i < 50; ++i) {
            auto child = ctx.submit([i] { return i; });
            REQUIRE(child);
            sum += co_await *child;
            // Back on the (only) worker, not inside the child's ending.
            CHECK(on_worker());
        }
        co_return sum;
    });
    REQUIRE(h);
    REQUIRE(h->wait_for(30s));
    CHECK(h->get() == 49 * 50 / 2);
}

TEST_CASE("nested ax::Task runs inline and propagates its exception", "[coro]") {
    ax::Scheduler<> sched(small_pool(2));
    auto h = sched.submit([]() -> ax::Task<int> {
        int a = co_await add_one(1);
        try {
            co_await throws_after(a);
        } catch (const std::runtime_error& e) {
            CHECK(std::string(e.what()) == "nested 2");
            a += 10;
        }
        co_return a;
    });
    REQUIRE(h);
    CHECK(h->get() == 12);
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
            REQUIRE(next);
            const int below = co_await *next;
            CHECK(on_worker());
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
                REQUIRE(k);
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
            CHECK(std::string(e.what()) == "child 7");
            CHECK(ended.load() == 20);
            for (auto& x : hs)
                CHECK(!x.valid());
            co_return 1;
        }
        co_return 0;
    });
    REQUIRE(h);
    CHECK(h->get() == 1);
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
    auto after_bad = ax::then(
        sched, std::move(*bad), [](int& v) { return v; }, {.max_retries = 0});
    REQUIRE(after_bad);
    CHECK_THROWS_AS(after_bad->get(), ax::PermanentError);
    CHECK(sched.query(after_bad->id()).has_value());

    Gate gate;
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
}
