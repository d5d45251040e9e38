// The tiny-task hot path (docs/hot-path.md): what its shortcuts must still keep. Per-worker
// success counts add up exactly, a reused end stamp never hides a long attempt, the split
// admission count stays exact at its limits, and waking only on the first push of a burst
// strands no queued task beside parked workers.
#include "queue_links.hpp"
#include "test_support.hpp"

#include <algorithm>
#include <atomic>
#include <ax/detail/enqueue_stamp.hpp>
#include <ax/detail/futex.hpp>
#include <ax/detail/notifier.hpp>
#include <ax/detail/slab.hpp>
#include <ax/detail/thread_slice.hpp>
#include <ax/queue.hpp>
#include <ax/scheduler.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <mutex>
#include <random>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <cerrno>
#include <sys/resource.h> // setpriority, for the slice test's nice value
#include <sys/syscall.h>  // SYS_futex, for the shared wake the private-futex test sends itself
#include <unistd.h>       // syscall
#endif

using namespace std::chrono_literals;
using ax_test::eventually;
using ax_test::Gate;

namespace {

ax::Config fixed(std::uint32_t workers) {
    ax::Config cfg;
    cfg.min_workers = workers;
    cfg.max_workers = workers;
    cfg.queue_capacity = 100'000;
    cfg.soft_limit_ratio = 1.0;
    return cfg;
}

/// Posts `n` tiny tasks and waits until all ran. The count is released, so the wait (an acquire
/// load that sees the last increment) happens after every body: `done` lives on this stack
/// frame, reused right after (a relaxed count raced with the next call's frame under TSan, CI).
template <class Sched> void run_tiny(Sched& sched, std::uint64_t n) {
    std::atomic<std::uint64_t> done{0};
    for (std::uint64_t i = 0; i < n; ++i)
        while (!sched.post([&done] { done.fetch_add(1, std::memory_order_release); }))
            std::this_thread::yield();
    REQUIRE(eventually([&] { return done.load() == n; }));
}

} // namespace

TEST_CASE("success totals counted per worker add up exactly, during and after shutdown",
          "[hot_path]") {
    ax::Scheduler sched{fixed(2)};
    run_tiny(sched, 20'000);
    // Every task's terminal state is published after its count: once all ran, all are counted.
    REQUIRE(eventually([&] { return sched.metrics().totals.succeeded == 20'000; }));
    auto h = sched.submit([] { return 1; });
    REQUIRE(h);
    CHECK(h->get() == 1);
    CHECK(sched.metrics().totals.succeeded == 20'001);
    REQUIRE(sched.shutdown(ax::ShutdownMode::drain, 10s));
    // The workers are gone; their counts were folded into the pool's retired totals.
    CHECK(sched.metrics().totals.succeeded == 20'001);
}

TEST_CASE("a long attempt after a run of tiny ones is timed from a fresh clock reading",
          "[hot_path]") {
    ax::Scheduler sched{fixed(1)};
    run_tiny(sched, 5'000);
    std::vector<ax::TaskHandle<void>> tiny;
    for (int i = 0; i < 64; ++i) {
        auto t = sched.submit([] {});
        REQUIRE(t);
        tiny.push_back(std::move(*t));
    }
    const auto before = std::chrono::steady_clock::now();
    auto slow = sched.submit([] { std::this_thread::sleep_for(5ms); });
    REQUIRE(slow);
    slow->wait();
    const auto after = std::chrono::steady_clock::now();
    auto info = sched.query(slow->id());
    REQUIRE(info);
    CHECK(info->finished - info->started >= 5ms);
    CHECK(info->finished <= after);
    CHECK(info->finished >= before);
    for (auto& t : tiny) {
        t.wait();
        auto i = sched.query(t.id());
        REQUIRE(i);
        CHECK(i->started <= i->finished);
        CHECK(i->finished <= after);
    }
    // Reused stamps give tiny attempts a zero duration and the next fresh reading the rest:
    // the busy time is still the whole run, so the mean stays above zero.
    REQUIRE(eventually([&] { return sched.metrics().average_duration.count() > 0; }));
}

TEST_CASE("a tiny task never finishes before it started, reused end stamps or not", "[hot_path]") {
    // A worker reuses its last end reading for attempts that follow within
    // Tuning::stale_end_ticks, and an attempt starts no earlier than its enqueue stamp, which may
    // be a few tens of ns late; an attempt enqueued after that reading once got a finish before
    // its start (seen as a rare failure of the test above).
    ax::Scheduler sched{fixed(1)};
    int backwards = 0;
    for (int round = 0; round < 40; ++round) {
        std::vector<ax::TaskHandle<void>> tiny;
        for (int i = 0; i < 256; ++i) {
            auto t = sched.submit([] {});
            REQUIRE(t);
            tiny.push_back(std::move(*t));
        }
        for (auto& t : tiny) {
            t.wait();
            auto info = sched.query(t.id());
            REQUIRE(info);
            if (info->finished < info->started)
                ++backwards;
        }
    }
    CHECK(backwards == 0);
}

TEST_CASE("the split admission count is exact at the limits", "[hot_path]") {
    using ax::detail::Admission;
    ax_test::TestQueue q(8, 6);
    std::uint32_t len = 0;
    for (std::uint32_t i = 0; i < 6; ++i)
        REQUIRE(q.try_push(i, ax::Priority::normal, len) == Admission::admitted);
    CHECK(q.try_push(6, ax::Priority::normal, len) == Admission::busy);
    CHECK(len == 6);
    // Pops the producer has not seen yet: the estimate is at the soft limit, so it re-reads.
    q.on_dequeued(ax::Priority::normal);
    q.on_dequeued(ax::Priority::normal);
    CHECK(q.length() == 4);
    CHECK(q.length_upper_bound() >= q.length());
    bool first = true;
    CHECK(q.try_push(7, ax::Priority::normal, len, &first) == Admission::admitted);
    CHECK(len == 4);
    CHECK_FALSE(first); // the standby buffer already held the six
    CHECK(q.length() == 5);
    CHECK(q.length(ax::Priority::normal) == 5);
    // High ignores the soft limit; the count it is checked against is fresh at the limit.
    CHECK(q.try_push(8, ax::Priority::high, len) == Admission::admitted);
    CHECK(q.try_push(9, ax::Priority::high, len) == Admission::admitted);
    CHECK(q.try_push(10, ax::Priority::high, len) == Admission::admitted);
    CHECK(len == 7);
    CHECK(q.try_push(11, ax::Priority::high, len) == Admission::full);
    CHECK(len == 8);
    std::vector<std::uint32_t> out;
    REQUIRE(q.swap(out));
    CHECK(out.size() == 10);
    CHECK(q.length() == 8); // swapped, not started: still counted
    CHECK(q.try_push(12, ax::Priority::high, len, &first) == Admission::full);
    q.on_dequeued(ax::Priority::high);
    CHECK(q.try_push(12, ax::Priority::high, len, &first) == Admission::admitted);
    CHECK(len == 7);
    CHECK(first); // the swap emptied the standby buffer
    CHECK(q.length() == 8);
    CHECK(q.length(ax::Priority::high) == 3);
}

TEST_CASE("pops counted on many threads add up: stripes lose no pop", "[hot_path]") {
    using ax::detail::Admission;
    // Each thread counts its pops in the stripe its number picks; threads drawn one after
    // another get distinct stripes, so with more threads than stripes every stripe is written.
    constexpr std::uint32_t threads = 2 * ax_test::TestQueue::pop_stripes;
    constexpr std::uint32_t per_thread = 1000;
    constexpr std::uint32_t total = threads * per_thread;
    ax_test::TestQueue q(total, total);
    std::uint32_t len = 0;
    for (std::uint32_t i = 0; i < total; ++i)
        REQUIRE(q.try_push(i, ax::Priority::low, len) == Admission::admitted);
    CHECK(q.try_push(total, ax::Priority::high, len) == Admission::full);
    std::vector<std::size_t> stripes(threads);
    std::vector<std::thread> pool;
    for (std::uint32_t t = 0; t < threads; ++t)
        pool.emplace_back([&, t] {
            stripes[t] = ax::detail::thread_stripe<ax_test::TestQueue::pop_stripes>();
            for (std::uint32_t k = 0; k < per_thread; ++k)
                q.on_dequeued(ax::Priority::low);
        });
    for (auto& th : pool)
        th.join();
    std::sort(stripes.begin(), stripes.end());
    CHECK(std::unique(stripes.begin(), stripes.end()) - stripes.begin() ==
          static_cast<std::ptrdiff_t>(ax_test::TestQueue::pop_stripes));
    CHECK(q.length() == 0);
    CHECK(q.length(ax::Priority::low) == 0);
    // The producer's stale estimate is at the limit, so it reads every stripe and finds room.
    std::vector<std::uint32_t> out;
    REQUIRE(q.swap(out));
    CHECK(q.try_push(total, ax::Priority::low, len) == Admission::admitted);
    CHECK(len == 0);
    CHECK(q.length() == 1);
}

TEST_CASE("threads that first ask for different stripe counts still draw distinct numbers",
          "[hot_path]") {
    // A thread keeps the number it drew first, whatever count it asks for later. Each count
    // once kept a sequence of its own: the first thread to ask for 4 stripes and the first to
    // ask for 8 both drew 1, and shared the stripe of everything striped (the queue's pops,
    // the slab's free-slot cache). Counts no other code asks for, so a per-count sequence would
    // start both at 1 here.
    std::uint32_t first = 0;
    std::uint32_t second = 0;
    std::thread([&] {
        (void)ax::detail::thread_stripe<1024>();
        first = ax::detail::thread_stripe_plus_one;
    }).join();
    std::thread([&] {
        (void)ax::detail::thread_stripe<2048>();
        second = ax::detail::thread_stripe_plus_one;
    }).join();
    CHECK(first != 0);
    CHECK(second != 0);
    CHECK(first != second);
}

TEST_CASE("a burst into parked workers while tasks are tiny strands nothing", "[hot_path]") {
    Gate gate; // before the scheduler: bodies may still read it while sched drains
    std::atomic<int> started{0};
    ax::Scheduler sched{fixed(4)};
    run_tiny(sched, 20'000);
    // Let a tick publish the tiny mean duration and the workers park.
    std::this_thread::sleep_for(100ms);
    for (int i = 0; i < 4; ++i)
        REQUIRE(sched.post([&] {
            started.fetch_add(1);
            gate.wait();
        }));
    // One wake for the burst; the tick's safety net and the chain wake bring the rest in.
    CHECK(eventually([&] { return started.load() == 4; }));
    gate.open();
    run_tiny(sched, 1'000);
}

TEST_CASE("the quick options check never passes what the full check refuses", "[hot_path]") {
    std::mt19937 rng(13);
    std::uniform_int_distribution<int> pick(0, 5);
    const std::int64_t timeouts[] = {
        -1, 0, 1, 1000, std::int64_t{UINT32_MAX}, std::int64_t{UINT32_MAX} + 1};
    const int retries[] = {-2, -1, 0, 7, 100, 101};
    const std::uint16_t groups[] = {0, 0, 1, 2, 5, 1000};
    int quick = 0;
    for (int i = 0; i < 5000; ++i) {
        ax::SubmitOptions o;
        o.priority = static_cast<ax::Priority>(pick(rng) % 4); // 3 is out of range
        o.timeout = std::chrono::milliseconds(timeouts[pick(rng)]);
        o.max_retries = retries[pick(rng)];
        o.group = ax::GroupId{groups[pick(rng)]};
        const bool child = pick(rng) % 2 == 0;
        if (ax::detail::plainly_valid(o)) {
            ++quick;
            CHECK_FALSE(ax::detail::invalid_options(o, child, 2).has_value());
        }
    }
    CHECK(quick > 100);
}

// ---- the intrusive standby list (docs/hot-path.md, "The standby list") -----------------------

TEST_CASE("the standby list keeps push order across priorities and reports which it holds",
          "[hot_path][queue]") {
    ax_test::TestQueue q(100, 100);
    std::uint32_t len = 0;
    for (const std::uint32_t i : {9u, 3u, 7u})
        REQUIRE(q.try_push(i, ax::Priority::normal, len) == ax::detail::Admission::admitted);
    std::vector<std::uint32_t> out;
    REQUIRE(q.swap(out));
    CHECK(out == std::vector<std::uint32_t>{9, 3, 7});
    CHECK(q.chain_size == 3);
    CHECK(q.lanes == 1u << static_cast<unsigned>(ax::Priority::normal));
    CHECK(q.link(7) == ax::detail::IntrusiveFifo<ax_test::VecLinks>::none); // the tail ends it

    // Mixed priorities, and a retry's push_unchecked: one chain in push order, every lane named.
    REQUIRE(q.try_push(1, ax::Priority::low, len) == ax::detail::Admission::admitted);
    q.push_unchecked(2, ax::Priority::high);
    REQUIRE(q.try_push(0, ax::Priority::low, len) == ax::detail::Admission::admitted);
    out.clear();
    REQUIRE(q.swap(out));
    CHECK(out == std::vector<std::uint32_t>{1, 2, 0});
    CHECK(q.lanes == ((1u << static_cast<unsigned>(ax::Priority::low)) |
                      (1u << static_cast<unsigned>(ax::Priority::high))));
    // The mask starts over with each swap.
    REQUIRE(q.try_push(5, ax::Priority::high, len) == ax::detail::Admission::admitted);
    out.clear();
    REQUIRE(q.swap(out));
    CHECK(q.lanes == 1u << static_cast<unsigned>(ax::Priority::high));
}

TEST_CASE("a standby list at capacity holds every slot once and a refusal links nothing",
          "[hot_path][queue]") {
    constexpr std::uint32_t cap = 1000;
    ax_test::TestQueue q(cap, cap, cap + 2);
    std::uint32_t len = 0;
    for (std::uint32_t i = 0; i < cap; ++i)
        REQUIRE(q.try_push(i, ax::Priority::normal, len) == ax::detail::Admission::admitted);
    const std::uint32_t tail_link = q.link(cap - 1);
    // Refused at capacity: neither the refused slot nor the tail is linked.
    CHECK(q.try_push(cap, ax::Priority::high, len) == ax::detail::Admission::full);
    CHECK(q.link(cap) == 0xdeadbeefu);
    CHECK(q.link(cap - 1) == tail_link);
    // A scan walks the whole list, oldest first, and stops when told.
    std::vector<std::uint32_t> scanned;
    q.scan_standby([&](std::uint32_t i) {
        scanned.push_back(i);
        return true;
    });
    REQUIRE(scanned.size() == cap);
    for (std::uint32_t i = 0; i < cap; ++i)
        CHECK(scanned[i] == i);
    std::uint32_t seen = 0;
    q.scan_standby([&](std::uint32_t) { return ++seen < 10; });
    CHECK(seen == 10);
    std::vector<std::uint32_t> out;
    REQUIRE(q.swap(out));
    CHECK(out.size() == cap);
    CHECK(q.chain_size == cap);
    // Swapped but not started: still counted, still full; after pops, a new list starts.
    CHECK(q.try_push(cap, ax::Priority::high, len) == ax::detail::Admission::full);
    q.on_dequeued(ax::Priority::normal);
    bool first = false;
    CHECK(q.try_push(cap, ax::Priority::high, len, &first) == ax::detail::Admission::admitted);
    CHECK(first);
    out.clear();
    REQUIRE(q.swap(out));
    CHECK(out == std::vector<std::uint32_t>{cap});
}

TEST_CASE("a chain spliced into a lane keeps its order behind what the lane held",
          "[hot_path][queue]") {
    std::vector<std::uint32_t> next(16, 0xdeadbeefu);
    ax_test::VecLinks links{&next};
    ax::detail::IntrusiveFifo<ax_test::VecLinks> lane, chain, empty;
    lane.splice_back(links, chain); // both empty: nothing happens
    CHECK(lane.empty());
    for (const std::uint32_t i : {4u, 5u, 6u})
        chain.push_back(links, i);
    lane.splice_back(links, chain); // into an empty lane
    CHECK(chain.empty());
    CHECK(chain.size() == 0);
    for (const std::uint32_t i : {1u, 2u})
        chain.push_back(links, i);
    lane.splice_back(links, chain); // behind what it held
    lane.splice_back(links, empty);
    lane.push_back(links, 9);
    CHECK(lane.size() == 6);
    std::vector<std::uint32_t> order;
    while (!lane.empty())
        order.push_back(lane.pop_front(links));
    CHECK(order == std::vector<std::uint32_t>{4, 5, 6, 1, 2, 9});
}

TEST_CASE("one-priority and mixed swaps dispatch in the same order as before", "[hot_path]") {
    // One worker, held by a gate while the batch queues: a single-priority batch (spliced whole)
    // runs in push order; a mixed one follows the ring (high first at 3:2:1).
    ax::Config cfg = fixed(1);
    ax::Scheduler sched{cfg};
    Gate gate, gate2;
    std::atomic<bool> holding{false};
    REQUIRE(sched.post([&] {
        holding.store(true);
        gate.wait();
    }));
    REQUIRE(eventually([&] { return holding.load(); }));
    std::vector<int> order;
    std::mutex m;
    auto rec = [&](int v) {
        return [&, v] {
            std::lock_guard lock(m);
            order.push_back(v);
        };
    };
    std::vector<ax::TaskHandle<void>> hs;
    for (int i = 0; i < 5; ++i)
        hs.push_back(sched.submit(rec(i)).value());
    gate.open();
    for (auto& h : hs)
        h.wait();
    CHECK(order == std::vector<int>{0, 1, 2, 3, 4});

    order.clear();
    hs.clear();
    holding.store(false);
    REQUIRE(sched.post([&] {
        holding.store(true);
        gate2.wait();
    }));
    REQUIRE(eventually([&] { return holding.load(); }));
    ax::SubmitOptions lo, hi;
    lo.priority = ax::Priority::low;
    hi.priority = ax::Priority::high;
    for (int i = 0; i < 3; ++i)
        hs.push_back(sched.submit(rec(10 + i), lo).value());
    for (int i = 0; i < 3; ++i)
        hs.push_back(sched.submit(rec(20 + i), hi).value());
    gate2.open();
    for (auto& h : hs)
        h.wait();
    CHECK(order == std::vector<int>{20, 21, 22, 10, 11, 12});
}

TEST_CASE("the stop state kept in the record's extras is fresh for the slot's next task",
          "[hot_path]") {
    // history_capacity 0 recycles a finished slot at once; the submits below hold their slots
    // until one reuses the first task's record (and its extras).
    ax::Config cfg = fixed(1);
    cfg.history_capacity = 0;
    ax::Scheduler sched{cfg};
    std::atomic<bool> asked{false}, saw_stop{false};
    ax::TaskId first_id;
    {
        auto first = sched.submit([&](ax::TaskContext& ctx) {
            const std::stop_token token = ctx.stop_token();
            asked.store(true);
            while (!token.stop_requested())
                std::this_thread::sleep_for(100us);
            saw_stop.store(true);
        });
        REQUIRE(first);
        first_id = first->id();
        REQUIRE(eventually([&] { return asked.load(); }));
        CHECK(sched.cancel(first_id)); // running: requests stop on the token handed out
        REQUIRE_THROWS_AS(first->get(), ax::TaskCancelled);
        CHECK(saw_stop.load());
    } // the handle's reference goes; the worker's idle flush recycles the slot
    REQUIRE(eventually([&] { return !sched.query(first_id).has_value(); }));

    // Which submit gets the slot back depends on the thread that recycled it (free slots are
    // cached per thread stripe); it returns before the slab adds a chunk, so within a chunk's
    // worth of submits whose handles keep their own slots taken.
    std::vector<ax::TaskHandle<bool>> held;
    bool reused = false;
    for (std::uint32_t k = 0; k < 2 * ax::detail::TaskSlab::chunk_size && !reused; ++k) {
        auto next =
            sched.submit([](ax::TaskContext& ctx) { return ctx.stop_token().stop_requested(); });
        REQUIRE(next);
        reused = next->id().index() == first_id.index();
        held.push_back(std::move(*next));
    }
    REQUIRE(reused);
    CHECK_FALSE(held.back().get());
    // And a token asked before a cancel still sees that cancel (the stop bits are checked when
    // the state is made).
    Gate gate;
    std::atomic<bool> third_stop{false};
    std::atomic<bool> running{false};
    auto third = sched.submit([&](ax::TaskContext& ctx) {
        running.store(true);
        gate.wait();
        third_stop.store(ctx.stop_token().stop_requested());
    });
    REQUIRE(third);
    REQUIRE(eventually([&] { return running.load(); }));
    CHECK(sched.cancel(third->id()));
    gate.open();
    REQUIRE_THROWS_AS(third->get(), ax::TaskCancelled);
    CHECK(third_stop.load());
}

TEST_CASE("Futex: a wait returns when the word changed, one wake wakes one, all wake all",
          "[hot_path]") {
    using ax::detail::Futex;
    std::atomic<std::uint32_t> word{0};
    Futex::wait(word, 7); // the word is not 7: returns at once instead of sleeping
    std::atomic<int> entered{0};
    std::atomic<int> woke{0};
    std::vector<std::thread> sleepers;
    for (int i = 0; i < 3; ++i)
        sleepers.emplace_back([&] {
            entered.fetch_add(1);
            Futex::wait(word, 0);
            woke.fetch_add(1);
        });
    REQUIRE(eventually([&] { return entered.load() == 3; }));
    std::this_thread::sleep_for(100ms); // time to reach the kernel, generously
    CHECK(woke.load() == 0);            // asleep while the word holds 0
    word.store(1);
    Futex::wake_one(word);
    REQUIRE(eventually([&] { return woke.load() >= 1; }));
    std::this_thread::sleep_for(50ms);
    CHECK(woke.load() == 1); // one wake, one sleeper up; the others sleep until woken
    Futex::wake_all(word);
    REQUIRE(eventually([&] { return woke.load() == 3; }));
    for (auto& t : sleepers)
        t.join();
}

#if defined(__linux__) && defined(SYS_futex)
TEST_CASE("Futex sleeps on a process-private futex (a shared wake does not reach it)",
          "[hot_path]") {
    // The idle wake-up's speed rests on the private futex (futex.hpp): a fall back to
    // std::atomic::wait (libstdc++: a shared futex) would let the shared wake below through.
    using ax::detail::Futex;
    std::atomic<std::uint32_t> word{0};
    std::atomic<bool> entered{false};
    std::atomic<bool> woke{false};
    std::thread sleeper([&] {
        entered.store(true);
        Futex::wait(word, 0);
        woke.store(true);
    });
    REQUIRE(eventually([&] { return entered.load(); }));
    std::this_thread::sleep_for(100ms); // time to reach the kernel, generously
    word.store(1);
    auto* addr = reinterpret_cast<std::uint32_t*>(&word);
    ::syscall(SYS_futex, addr, 1 /* FUTEX_WAKE, shared */, 1, nullptr, nullptr, 0);
    std::this_thread::sleep_for(100ms);
    CHECK_FALSE(woke.load());
    Futex::wake_one(word);
    REQUIRE(eventually([&] { return woke.load(); }));
    sleeper.join();
}
#endif

#if defined(__linux__) && defined(SYS_futex)
namespace {

/// This thread's kernel id, for asleep().
int this_tid() {
    return static_cast<int>(::syscall(SYS_gettid));
}

/// Whether thread `tid` of this process sleeps in the kernel now (state S in its stat file).
bool asleep(int tid) {
    std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/stat");
    std::string line;
    std::getline(in, line);
    const auto close = line.rfind(')'); // the name in parentheses may hold spaces
    return close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'S';
}

} // namespace

TEST_CASE("Futex: a tagged wake wakes the sleeper with that tag, not the one asleep longest",
          "[hot_path]") {
    using ax::detail::Futex;
    std::atomic<std::uint32_t> word{0};
    std::atomic<int> tid_a{0}, tid_b{0};
    std::atomic<bool> woke_a{false}, woke_b{false};
    std::thread a([&] {
        tid_a.store(this_tid());
        Futex::wait_tagged(word, 0, 1u << 3);
        woke_a.store(true);
    });
    // a sleeps first: the kernel's own order would wake it first
    REQUIRE(eventually([&] { return tid_a.load() != 0 && asleep(tid_a.load()); }));
    std::thread b([&] {
        tid_b.store(this_tid());
        Futex::wait_tagged(word, 0, 1u << 7);
        woke_b.store(true);
    });
    REQUIRE(eventually([&] { return tid_b.load() != 0 && asleep(tid_b.load()); }));
    word.store(1);
    CHECK(Futex::wake_tagged(word, 1u << 5) == 0); // nobody carries that tag
    CHECK(Futex::wake_tagged(word, 1u << 7) == 1);
    REQUIRE(eventually([&] { return woke_b.load(); }));
    std::this_thread::sleep_for(50ms);
    CHECK_FALSE(woke_a.load()); // still asleep: the word changed, but nobody woke it
    Futex::wake_one(word);      // a plain wake reaches tagged sleepers too
    REQUIRE(eventually([&] { return woke_a.load(); }));
    a.join();
    b.join();
}

TEST_CASE("Notifier: a wake into a pool idle for a while goes to the worker that slept last",
          "[hot_path]") {
    // The most recently parked worker is the warm one (docs/hot-path.md, "The warm wake"); the
    // kernel alone would wake the one asleep longest.
    ax::detail::Notifier n;
    std::atomic<bool> stop{false};
    std::atomic<int> tid[2] = {0, 0};
    std::atomic<int> woke[2] = {0, 0};
    auto worker = [&](int k) {
        tid[k].store(this_tid());
        while (!stop.load()) {
            n.park([&] { return !stop.load(); });
            woke[k].fetch_add(1);
        }
    };
    const auto idle = ax::Tuning::warm_wake_after + 10ms;
    std::thread first(worker, 0);
    REQUIRE(eventually([&] { return n.parked() == 1 && asleep(tid[0].load()); }));
    std::thread second(worker, 1);
    REQUIRE(eventually([&] { return n.parked() == 2 && asleep(tid[1].load()); }));
    std::this_thread::sleep_for(idle);
    n.prewake(2);
    REQUIRE(eventually([&] { return woke[1].load() == 1; }));
    // The second worker parks again and is again the last asleep: the next wake is its too.
    REQUIRE(eventually([&] { return n.parked() == 2 && asleep(tid[1].load()); }));
    std::this_thread::sleep_for(idle);
    n.prewake(2);
    REQUIRE(eventually([&] { return woke[1].load() == 2; }));
    std::this_thread::sleep_for(50ms);
    CHECK(woke[0].load() == 0);
    stop.store(true);
    n.notify_all();
    first.join();
    second.join();
}
#endif

#if defined(__linux__) && defined(SYS_sched_getattr)
namespace {

/// Thread `tid`'s slice as the kernel reports it (sched_getattr's sched_runtime), -1 on error.
std::int64_t slice_of(int tid) {
    struct {
        std::uint32_t size, policy;
        std::uint64_t flags;
        std::int32_t nice;
        std::uint32_t priority;
        std::uint64_t runtime, deadline, period;
        std::uint32_t util_min, util_max;
    } a{};
    if (::syscall(SYS_sched_getattr, tid, &a, sizeof a, 0) != 0)
        return -1;
    return static_cast<std::int64_t>(a.runtime);
}

/// Whether the running kernel is 6.12 or later (EEVDF slice requests for fair threads).
bool kernel_takes_slices() {
    std::ifstream in("/proc/sys/kernel/osrelease");
    int major = 0, minor = 0;
    char dot = 0;
    in >> major >> dot >> minor;
    return major > 6 || (major == 6 && minor >= 12);
}

constexpr std::int64_t wake_slice_ns = ax::Tuning::wake_slice.count();

} // namespace

TEST_CASE("ThreadSlice: a request takes effect, keeps the nice value, and restore undoes it",
          "[hot_path]") {
    using ax::detail::ThreadSlice;
    // A kernel that takes slice requests must be found to (else the idle wake-up loses its
    // preemption without a word); an older one must be found not to.
    REQUIRE(ThreadSlice::supported() == kernel_takes_slices());
    if (!ThreadSlice::supported())
        return;
    std::int64_t before = -1, during = -1, after = -1;
    int nice_during = -100;
    bool reniced = false; // Catch's assertions are not for other threads: checked after join
    std::thread t([&] {
        reniced = ::setpriority(PRIO_PROCESS, static_cast<id_t>(this_tid()), 5) == 0;
        before = ThreadSlice::requested();
        const bool ok = ThreadSlice::request(ax::Tuning::wake_slice);
        during = ok ? ThreadSlice::requested() : -2;
        errno = 0;
        nice_during = ::getpriority(PRIO_PROCESS, static_cast<id_t>(this_tid()));
        ThreadSlice::restore();
        after = ThreadSlice::requested();
    });
    t.join();
    REQUIRE(reniced);
    CHECK(during == wake_slice_ns);
    CHECK(nice_during == 5);
    CHECK(before != wake_slice_ns);
    CHECK(after == before);
}

TEST_CASE("Notifier: the last worker of an idle pool sleeps with a short slice, and prewake "
          "stands aside for it",
          "[hot_path]") {
    if (!ax::detail::ThreadSlice::supported())
        return; // ThreadSlice's test says why that is right on this kernel
    ax::detail::Notifier n;
    std::atomic<int> tid{0};
    std::atomic<int> woke{0};
    std::atomic<bool> stop{false};
    std::atomic<bool> had_short{false};
    std::thread worker([&] {
        tid.store(this_tid());
        bool short_slice = false;
        while (!stop.load()) {
            n.park([&] { return !stop.load(); }, 1, &short_slice);
            had_short.store(short_slice);
            woke.fetch_add(1);
        }
        if (short_slice)
            ax::detail::ThreadSlice::restore();
    });
    // Past its first, timed sleep the worker asks for the short slice and sleeps on.
    REQUIRE(eventually([&] { return tid.load() != 0 && slice_of(tid.load()) == wake_slice_ns; }));
    REQUIRE(eventually([&] { return asleep(tid.load()); }));
    n.prewake(1);
    std::this_thread::sleep_for(50ms);
    CHECK(woke.load() == 0); // an early wake would preempt the producer before its push
    n.notify_one();          // the push's wake
    REQUIRE(eventually([&] { return woke.load() == 1; }));
    CHECK(had_short.load());
    stop.store(true);
    n.notify_all();
    worker.join();
}

TEST_CASE("a worker woken from an idle pool runs its task with the short slice and then gives "
          "it back",
          "[hot_path]") {
    if (!ax::detail::ThreadSlice::supported())
        return; // ThreadSlice's test says why that is right on this kernel
    ax::Scheduler sched{fixed(1)};
    std::this_thread::sleep_for(20ms); // idle for far longer than Tuning::warm_wake_after
    std::atomic<std::int64_t> second_slice{-1};
    auto first = sched.submit([&](ax::TaskContext& ctx) {
        // Queued behind this task on the one worker: it runs after the slice is given back.
        auto next = ctx.submit([&] { second_slice.store(ax::detail::ThreadSlice::requested()); });
        return next.has_value() ? ax::detail::ThreadSlice::requested() : std::int64_t{-1};
    });
    REQUIRE(first);
    CHECK(first->get() == wake_slice_ns);
    REQUIRE(eventually([&] { return second_slice.load() != -1; }));
    CHECK(second_slice.load() != wake_slice_ns);
}
#endif

namespace {

/// Adds `rounds` units one at a time, each with the notify a push makes (and, when
/// `prewake_live` is not 0, the pre-wake before it, idling now and then long enough for warm
/// wakes and short-slice sleeps), and waits for each to be taken. False if one was not taken
/// within a generous hang guard: a lost wake.
bool feed_units(ax::detail::Notifier& n, std::atomic<int>& work, const std::atomic<int>& done,
                int rounds, std::uint32_t prewake_live) {
    for (int i = 0; i < rounds; ++i) {
        if (prewake_live != 0) {
            if (i % 64 == 0)
                std::this_thread::sleep_for(ax::Tuning::warm_wake_after + 50us);
            n.prewake(prewake_live);
        }
        work.fetch_add(1);
        n.notify_one();
        const auto deadline = std::chrono::steady_clock::now() + 10s;
        while (done.load() != i + 1) {
            std::this_thread::yield();
            if (std::chrono::steady_clock::now() > deadline)
                return false;
        }
    }
    return true;
}

} // namespace

TEST_CASE("Notifier: no wake is lost among several parking workers", "[hot_path]") {
    // Three workers park and take units; the producer wakes one ahead (prewake: a warm wake when
    // the pool has idled long enough, by the tag the last sleeper left; none while the last
    // sleeps with a short slice), adds one unit, notifies and waits for it to be taken. A wake
    // lost in a race between a hint, a timed sleep or a short-slice sleep and a worker's check
    // would leave a unit untaken (the hang guard fails the test).
    ax::detail::Notifier n;
    std::atomic<int> work{0};
    std::atomic<int> done{0};
    std::atomic<bool> stop{false};
    std::vector<std::thread> workers;
    for (int k = 0; k < 3; ++k)
        workers.emplace_back([&] {
            bool short_slice = false; // the last to park may sleep with a short slice
            while (!stop.load()) {
                n.park([&] { return work.load() == 0 && !stop.load(); }, 3, &short_slice);
                if (short_slice) {
                    ax::detail::ThreadSlice::restore();
                    short_slice = false;
                }
                int w = work.load();
                while (w > 0 && !work.compare_exchange_weak(w, w - 1)) {
                }
                if (w > 0)
                    done.fetch_add(1);
            }
        });
    constexpr int rounds = 20000;
    const bool lost = !feed_units(n, work, done, rounds, 3);
    stop.store(true);
    n.notify_all();
    for (auto& t : workers)
        t.join();
    CHECK_FALSE(lost);
    CHECK(done.load() == rounds);
}

TEST_CASE("Notifier: no wake is lost between a worker's check and its sleep", "[hot_path]") {
    // One worker parks whenever it sees no work; the producer adds one unit, notifies, and waits
    // for it to be taken. A wake lost in the window between the check and the sleep would leave
    // the unit untaken (the hang guard fails the test instead of hanging it).
    ax::detail::Notifier n;
    std::atomic<int> work{0};
    std::atomic<int> done{0};
    std::atomic<bool> stop{false};
    std::thread worker([&] {
        while (!stop.load()) {
            n.park([&] { return work.load() == 0 && !stop.load(); });
            if (work.load() > 0) {
                work.fetch_sub(1);
                done.fetch_add(1);
            }
        }
    });
    constexpr int rounds = 20000;
    const bool lost = !feed_units(n, work, done, rounds, 0);
    stop.store(true);
    n.notify_all();
    worker.join();
    CHECK_FALSE(lost);
    CHECK(done.load() == rounds);
}

TEST_CASE("Notifier::prewake wakes a parked worker and leaves no token when none is parked",
          "[hot_path]") {
    ax::detail::Notifier n;
    // Nobody parked: nothing to wake, and no token may be left for a later park to swallow.
    n.prewake(1);
    std::atomic<int> woke{0};
    std::atomic<bool> stop{false};
    std::thread worker([&] {
        while (!stop.load()) {
            n.park([&] { return !stop.load(); });
            woke.fetch_add(1);
        }
    });
    REQUIRE(eventually([&] { return n.parked() == 1; }));
    std::this_thread::sleep_for(50ms);
    CHECK(woke.load() == 0); // it sleeps: the early prewake left nothing behind
    // One of two live workers parked: the other is up and the push's notify decides.
    n.prewake(2);
    std::this_thread::sleep_for(50ms);
    CHECK(woke.load() == 0);
    // Every live worker parked: the pool is asleep, wake one now.
    n.prewake(1);
    REQUIRE(eventually([&] { return woke.load() >= 1; }));
    stop.store(true);
    n.notify_all();
    worker.join();
}

namespace {

/// A model of the TSC against the clock: `ns_per_tick` nanoseconds per tick from `origin`.
struct TscModel {
    double ns_per_tick = 1.0 / 2.4; // a 2.4 GHz counter
    double origin_ns = 1e12;
    std::uint64_t origin_ticks = 1'000'000;
    [[nodiscard]] std::int64_t ns_at(std::uint64_t ticks) const {
        return static_cast<std::int64_t>(origin_ns +
                                         static_cast<double>(ticks - origin_ticks) * ns_per_tick);
    }
    /// Changes the rate from `ticks` on, keeping the clock continuous there.
    void set_rate(std::uint64_t ticks, double rate) {
        origin_ns = static_cast<double>(ns_at(ticks));
        origin_ticks = ticks;
        ns_per_tick = rate;
    }
};

/// A stamper over a modelled counter whose clock is read 40 ns after the counter; counts the
/// clock reads.
struct ModelledStamper {
    ax::detail::TscCalibration cal;
    ax::detail::EnqueueStamper stamper;
    TscModel tsc;
    std::uint64_t reads = 0;

    std::int64_t stamp(std::uint64_t ticks) {
        return stamper.stamp(cal, ticks, [&] {
            ++reads;
            return tsc.ns_at(ticks + 40);
        });
    }
    /// Stamps 100,000 ticks apart (every one a reading) from `ticks` on until the rate is known.
    void calibrate(std::uint64_t& ticks) {
        while (cal.rate() == 0) {
            ticks += 100'000;
            stamp(ticks);
        }
    }
    /// The calibrated rate in nanoseconds per tick.
    [[nodiscard]] double rate() const { return static_cast<double>(cal.rate()) / 4294967296.0; }
};

} // namespace

TEST_CASE("enqueue stamps from the TSC are never early, barely late, and read the clock rarely",
          "[hot_path]") {
    ax::detail::TscCalibration cal;
    ax::detail::EnqueueStamper stamper;
    TscModel tsc;
    std::mt19937_64 rng(7);
    std::uint64_t ticks = 2'000'000;
    std::int64_t previous = 0;
    std::uint64_t reads = 0;
    std::uint64_t early = 0, late = 0, backwards = 0;
    constexpr int n = 400'000;
    for (int k = 0; k < n; ++k) {
        ticks += 20 + rng() % 400; // a submit every ~10 - 170 ns
        const std::int64_t truth = tsc.ns_at(ticks);
        const std::int64_t s = stamper.stamp(cal, ticks, [&] {
            ++reads;
            // The clock is read after the counter: its value is a little later, never earlier.
            return tsc.ns_at(ticks + 30 + rng() % 60);
        });
        early += s < truth ? 1 : 0;
        late += s > truth + 200 ? 1 : 0;
        backwards += s < previous ? 1 : 0;
        previous = s;
    }
    CHECK(early == 0);
    CHECK(late == 0);
    CHECK(backwards == 0);
    REQUIRE(cal.rate() != 0);
    // Calibration takes 2^23 ticks of fresh readings; after it, about one reading per 2,048 ticks.
    const double ticks_after = static_cast<double>(ticks - 2'000'000) -
                               static_cast<double>(ax::detail::TscCalibration::calibration_ticks);
    CHECK(static_cast<double>(reads) < ticks_after / 2048.0 * 1.2 + 40'000.0);
    CHECK(reads < static_cast<std::uint64_t>(n) / 4);
    // The rate is an upper bound, and a tight one.
    const double rate = static_cast<double>(cal.rate()) / 4294967296.0;
    CHECK(rate >= tsc.ns_per_tick);
    CHECK(rate <= tsc.ns_per_tick * 1.01);
}

TEST_CASE("an enqueue stamp rate that falls short of the clock is dropped and measured again",
          "[hot_path]") {
    ModelledStamper m;
    std::uint64_t ticks = 2'000'000;
    m.calibrate(ticks);
    // The counter now runs at half the speed (a VM moved to another host): each tick is twice
    // the time. Stamps derived in the meantime may be early (by at most reuse_ticks' worth each);
    // the rate check, within check_ticks_min of readings, finds the rate short and drops it.
    m.tsc.set_rate(ticks, m.tsc.ns_per_tick * 2);
    const std::uint64_t changed = ticks;
    while (m.cal.rate() != 0 && ticks - changed < 4 * ax::detail::EnqueueStamper::check_ticks_min) {
        ticks += 97;
        m.stamp(ticks);
    }
    CHECK(m.cal.rate() == 0);
    CHECK(ticks - changed <= 2 * ax::detail::EnqueueStamper::check_ticks_min + 4096);
    // Until it is measured again every stamp is a reading; then they are derived and not early.
    std::uint64_t early = 0;
    for (int k = 0; k < 200'000; ++k) {
        ticks += 97;
        early += m.stamp(ticks) < m.tsc.ns_at(ticks) ? 1 : 0;
    }
    CHECK(early == 0);
    REQUIRE(m.cal.rate() != 0);
    CHECK(m.rate() >= m.tsc.ns_per_tick);
    CHECK(m.rate() <= m.tsc.ns_per_tick * 1.01);
}

TEST_CASE("a counter behind the last reading (another core's) forces a fresh reading",
          "[hot_path]") {
    ModelledStamper m;
    std::uint64_t ticks = 2'000'000;
    m.calibrate(ticks);
    m.stamp(ticks + 4'000); // a fresh reading
    m.reads = 0;
    m.stamp(ticks + 4'100); // derived
    CHECK(m.reads == 0);
    const std::int64_t behind = m.stamp(ticks + 3'000); // behind the reading: read the clock
    CHECK(m.reads == 1);
    // Stamps of one thread never go back, even when the clock reading does.
    CHECK(behind >= m.tsc.ns_at(ticks + 4'100));
}

TEST_CASE("query()'s enqueued is not before a time taken before the submit, over many submits",
          "[hot_path]") {
    Gate gate; // before the scheduler: the blocker's body still reads it while sched drains
    ax::Scheduler sched{fixed(1)};
    auto blocker = sched.submit([&] { gate.wait(); });
    REQUIRE(blocker);
    REQUIRE(eventually([&] { return blocker->state() == ax::TaskState::running; }));
    // Two submits far enough apart for the process's TSC rate to be measured (2^23 ticks), so
    // most stamps below are derived from it rather than read.
    REQUIRE(sched.post([] {}));
    std::this_thread::sleep_for(20ms);
    REQUIRE(sched.post([] {}));
#if defined(__x86_64__) || defined(__i386__)
    CHECK(ax::detail::TscCalibration::instance().rate() != 0);
#endif
    struct Submitted {
        ax::TaskId id;
        std::chrono::steady_clock::time_point before, after;
    };
    std::vector<Submitted> submitted;
    constexpr int n = 20'000;
    submitted.reserve(n);
    for (int k = 0; k < n; ++k) {
        Submitted s;
        s.before = std::chrono::steady_clock::now();
        auto id = sched.post([] {});
        s.after = std::chrono::steady_clock::now();
        REQUIRE(id);
        s.id = *id;
        submitted.push_back(s);
    }
    // The same across threads: a time taken on another thread before it hands over.
    std::atomic<std::int64_t> handed{0};
    std::thread other([&] {
        handed.store(std::chrono::steady_clock::now().time_since_epoch().count(),
                     std::memory_order_release);
    });
    other.join();
    const auto cross_before = std::chrono::steady_clock::time_point(
        std::chrono::steady_clock::duration(handed.load(std::memory_order_acquire)));
    auto cross = sched.post([] {});
    REQUIRE(cross);
    int early = 0, late = 0;
    for (const auto& s : submitted) {
        const auto info = sched.query(s.id);
        REQUIRE(info);
        early += info->enqueued < s.before ? 1 : 0;
        late += info->enqueued > s.after + 1us ? 1 : 0;
    }
    CHECK(early == 0);
    CHECK(late == 0);
    CHECK(sched.query(*cross)->enqueued >= cross_before);
    gate.open();
}
