// ax benchmarks — ax_micro: ax's hot path against the peers a user would reach for, in one process
// with rounds interleaved, so ratios come from one run on one machine.
//
// Default mode prints one table (medians of --reps rounds, each round runs every case once, the
// order rotated per round so no side always goes first):
//   * 1M tiny tasks (an atomic increment each) into 2 workers, from one producer thread and from
//     two: ax with a fixed pool of 2 and a queue large enough that it never refuses; ax with its
//     default Config and a producer that obeys retry_after; the textbook mutex + condvar +
//     std::deque<std::function> pool (naive_pool.hpp); oneTBB task_group; asio::thread_pool
//   * idle submit-to-start p50 / p99: single submits 200 µs apart into an idle pool, taking
//     turns among the implementations one submit at a time (all their pools alive at once)
//   * post() throughput: one producer posting into a queue that one worker drains
//   * memory per queued task, the queue's share included (one worker blocked, 100k tasks queued)
//   * the cost of the latency histograms: 1M tiny tasks, one producer, the fixed pool with
//     Config::latency_histograms on and off (section `hist`; the difference is printed below
//     the table)
//   * coroutine tasks (section `coro`, ax/coro.hpp): 1M tiny tasks posted as ax::Task
//     coroutines (taking nothing, taking a TaskContext&, asking ax::this_context()) against the
//     same work as plain callables,
//     and coroutines that each co_await one subtask; the plain post is the reference of the
//     "vs best peer" column there, and the notes give heap allocations per task (operator new
//     calls in every thread over the timed window, counted by this file's replacement)
// Each throughput row also reports CPU time per task and context switches per 1000 tasks
// (getrusage over the round), which say where the time went when wall time alone is noise.
//
// `ax_micro --gbench [Google Benchmark flags]` runs the component micro-benchmarks instead (the
// double-buffer queue vs deque + mutex, post() with 1/2/4 producers).
// SPDX-License-Identifier: MIT

#include "ax/coro.hpp"
#include "ax/scheduler.hpp"
#include "naive_pool.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <benchmark/benchmark.h>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <malloc.h>
#include <memory>
#include <mutex>
#include <new>
#include <pthread.h>
#include <sched.h>
#include <span>
#include <string>
#include <sys/resource.h>
#include <thread>
#include <unistd.h>
#include <vector>

#if AX_BENCH_HAVE_ASIO
#include <asio.hpp>
#endif
#if AX_BENCH_HAVE_TBB
#include <tbb/global_control.h>
#include <tbb/task_group.h>
#endif

// ---------------------------------------------------------------------------------------------
// Heap allocations: operator new replaced to count calls, one counter per thread (written only
// by its thread, summed by the reader), so counting adds no shared cache line to the hot paths.
// ---------------------------------------------------------------------------------------------
// The replacements below pair malloc with free by design; g++ sees operator delete inlined
// into callers and mistakes that for a mismatch.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
namespace ax_bench_alloc {
constexpr int slots = 256;
struct alignas(64) Counter {
    std::atomic<std::uint64_t> n{0};
};
inline Counter counters[slots];
inline std::atomic<int> next_slot{0};
inline thread_local int my_slot = -1;
inline void count() noexcept {
    if (my_slot < 0) {
        const int s = next_slot.fetch_add(1, std::memory_order_relaxed);
        my_slot = s < slots ? s : slots - 1; // threads past 255 share the last (never here)
    }
    auto& c = counters[my_slot].n;
    c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}
inline std::uint64_t total() noexcept {
    std::uint64_t t = 0;
    for (const auto& c : counters)
        t += c.n.load(std::memory_order_relaxed);
    return t;
}
} // namespace ax_bench_alloc

void* operator new(std::size_t n) {
    ax_bench_alloc::count();
    if (void* p = std::malloc(n == 0 ? 1 : n))
        return p;
    throw std::bad_alloc();
}
void* operator new(std::size_t n, std::align_val_t a) {
    ax_bench_alloc::count();
    const auto al = static_cast<std::size_t>(a);
    if (void* p = std::aligned_alloc(al, (n + al - 1) / al * al))
        return p;
    throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
    std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
    std::free(p);
}
void operator delete(void* p, std::align_val_t) noexcept {
    std::free(p);
}
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
    std::free(p);
}

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

std::int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
        .count();
}

/// Run parameters (command line).
struct Options {
    int reps = 5;
    std::uint64_t tasks = 1'000'000;
    std::uint32_t workers = 2;
    int latency_samples = 2000;
    std::chrono::microseconds latency_gap{200};
    std::uint64_t queued_tasks = 100'000;
    std::string
        only; // comma-separated sections: e2e, e2e2, hist, coro, idle, post, mem (empty: all)
    std::string impl; // only cases whose implementation name contains this (empty: all)
    bool wants(const char* section) const {
        return only.empty() ||
               ("," + only + ",").find(std::string(",") + section + ",") != std::string::npos;
    }
};

/// A Config for the fixed-pool cases: `workers` threads and a queue large enough that
/// backpressure never triggers (soft limit off).
ax::Config fixed_config(std::uint32_t workers, std::uint32_t capacity = 1u << 22) {
    ax::Config cfg;
    cfg.min_workers = workers;
    cfg.max_workers = workers;
    cfg.queue_capacity = capacity;
    cfg.soft_limit_ratio = 1.0;
    return cfg;
}

/// Process CPU time and context switches (getrusage), for per-task costs over a round.
struct Usage {
    double cpu_s = 0;
    double voluntary = 0;
    double involuntary = 0;
    static Usage now() {
        rusage ru{};
        ::getrusage(RUSAGE_SELF, &ru);
        Usage u;
        u.cpu_s = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                  static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
        u.voluntary = static_cast<double>(ru.ru_nvcsw);
        u.involuntary = static_cast<double>(ru.ru_nivcsw);
        return u;
    }
};

/// Time this thread spent runnable but waiting for a CPU (ns, /proc/thread-self/schedstat): how
/// much the workers' spinning and the other threads kept the producer off the cores.
double runqueue_wait_ns() {
    std::ifstream in("/proc/thread-self/schedstat");
    double run = 0, wait = 0;
    in >> run >> wait;
    return wait;
}

/// One measurement of one case in one round: the headline value plus diagnostics.
struct Sample {
    double value = 0;  // M tasks/s, µs, or bytes
    double value2 = 0; // p99 for latency rows, malloc's heap for memory rows
    double cpu_ns = 0; // process CPU time per task
    double vcsw_k = 0; // voluntary context switches per 1000 tasks
    double icsw_k = 0; // involuntary context switches per 1000 tasks
    double rq_ns = 0;  // the (first) producer's run-queue wait per task
    std::uint64_t refused = 0;
    double allocs = 0; // operator new calls per task over the timed window (all threads)
};

// ---------------------------------------------------------------------------------------------
// 1M tiny tasks
// ---------------------------------------------------------------------------------------------

struct alignas(64) Countdown {
    std::atomic<std::uint64_t> left{0};
    alignas(64) std::atomic<bool> finished{false};

    void reset(std::uint64_t n) {
        left.store(n, std::memory_order_relaxed);
        finished.store(false, std::memory_order_release);
    }
    void hit() {
        if (left.fetch_sub(1, std::memory_order_acq_rel) == 1) {
            finished.store(true, std::memory_order_release);
            finished.notify_one();
        }
    }
    void wait() { finished.wait(false, std::memory_order_acquire); }
};

/// Runs `producers` threads that each call submit(c, n) for their share of `tasks`, then waits
/// for the countdown (and `join()` of each producer's own work, for TBB). Timed from the release
/// of the producers to the last task's end.
template <class Submit> Sample e2e(std::uint64_t tasks, int producers, Submit&& submit) {
    Countdown c;
    // Warm-up, untimed: threads started, first slab chunks and queue pages touched.
    c.reset(10'000);
    submit(c, 10'000, 0);
    c.wait();

    c.reset(tasks);
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> threads;
    for (int p = 1; p < producers; ++p)
        threads.emplace_back([&, p] {
            ready.fetch_add(1);
            while (!go.load(std::memory_order_acquire))
                std::this_thread::yield();
            submit(c, tasks / producers, p);
        });
    while (ready.load() != producers - 1)
        std::this_thread::yield();
    const Usage u0 = Usage::now();
    const double rq0 = runqueue_wait_ns();
    const std::uint64_t a0 = ax_bench_alloc::total();
    const auto t0 = Clock::now();
    go.store(true, std::memory_order_release);
    submit(c, tasks - (tasks / producers) * (producers - 1), 0);
    const double rq1 = runqueue_wait_ns();
    for (auto& t : threads)
        t.join();
    c.wait();
    const auto t1 = Clock::now();
    const std::uint64_t a1 = ax_bench_alloc::total();
    const Usage u1 = Usage::now();
    Sample s;
    s.allocs = static_cast<double>(a1 - a0) / static_cast<double>(tasks);
    s.value = static_cast<double>(tasks) / std::chrono::duration<double>(t1 - t0).count() / 1e6;
    s.cpu_ns = (u1.cpu_s - u0.cpu_s) * 1e9 / static_cast<double>(tasks);
    s.vcsw_k = (u1.voluntary - u0.voluntary) * 1000.0 / static_cast<double>(tasks);
    s.icsw_k = (u1.involuntary - u0.involuntary) * 1000.0 / static_cast<double>(tasks);
    s.rq_ns = (rq1 - rq0) / static_cast<double>(tasks / producers);
    return s;
}

Sample e2e_ax_fixed(const Options& o, int producers, bool histograms = true) {
    ax::Config cfg = fixed_config(o.workers);
    cfg.latency_histograms = histograms;
    ax::Scheduler<> sched(cfg);
    std::atomic<std::uint64_t> refused{0};
    auto s = e2e(o.tasks, producers, [&](Countdown& c, std::uint64_t n, int) {
        for (std::uint64_t i = 0; i < n; ++i) {
            while (!sched.post([&c] { c.hit(); })) {
                refused.fetch_add(1, std::memory_order_relaxed);
                std::this_thread::yield();
            }
        }
    });
    s.refused = refused.load();
    return s;
}

/// What a real user runs: the default Config, and a producer that sleeps retry_after whenever a
/// submit is refused, as the API asks.
Sample e2e_ax_default(const Options& o, int producers) {
    ax::Scheduler<> sched;
    std::atomic<std::uint64_t> refused{0};
    auto s = e2e(o.tasks, producers, [&](Countdown& c, std::uint64_t n, int) {
        for (std::uint64_t i = 0; i < n; ++i) {
            for (;;) {
                auto r = sched.post([&c] { c.hit(); });
                if (r)
                    break;
                refused.fetch_add(1, std::memory_order_relaxed);
                if (!r.error().retryable())
                    std::abort();
                std::this_thread::sleep_for(r.error().retry_after);
            }
        }
    });
    s.refused = refused.load();
    return s;
}

/// Coroutine tasks against plain callables: the same tiny work (one countdown hit) posted into
/// the fixed pool, as a plain lambda, as an ax::Task coroutine without a context, as one taking
/// ax::TaskContext& (whose context the scheduler keeps with the frame), and as a coroutine that
/// co_awaits one subtask doing the hit (a suspension and a resumption per task, plus the child).
enum class CoroShape { plain, coroutine, coroutine_ctx, this_context, awaits_child };

Sample e2e_coro(const Options& o, CoroShape shape) {
    ax::Scheduler<> sched(fixed_config(o.workers));
    std::atomic<std::uint64_t> refused{0};
    auto post = [&](auto&& f) {
        while (!sched.post(f)) {
            refused.fetch_add(1, std::memory_order_relaxed);
            std::this_thread::yield();
        }
    };
    auto s = e2e(o.tasks, 1, [&](Countdown& c, std::uint64_t n, int) {
        for (std::uint64_t i = 0; i < n; ++i) {
            switch (shape) {
            case CoroShape::plain:
                post([&c] { c.hit(); });
                break;
            case CoroShape::coroutine:
                post([&c]() -> ax::Task<void> {
                    c.hit();
                    co_return;
                });
                break;
            case CoroShape::coroutine_ctx:
                post([&c](ax::TaskContext& ctx) -> ax::Task<void> {
                    if (ctx.attempt() != 0)
                        c.hit();
                    co_return;
                });
                break;
            case CoroShape::this_context:
                post([&c]() -> ax::Task<void> {
                    if ((co_await ax::this_context()).attempt() != 0)
                        c.hit();
                });
                break;
            case CoroShape::awaits_child:
                post([&c](ax::TaskContext& ctx) -> ax::Task<void> {
                    co_await ctx.submit([&c] { c.hit(); }).value();
                });
                break;
            }
        }
    });
    s.refused = refused.load();
    return s;
}

/// The default Config with post_wait: a refused producer parks until the workers drain the
/// queue to half its soft limit (issue 31), instead of sleeping retry_after.
/// `help`: SubmitOptions::help_while_waiting, the producer runs queued tasks while it waits.
Sample e2e_ax_post_wait(const Options& o, int producers, bool help = false) {
    ax::Scheduler<> sched;
    std::atomic<std::uint64_t> refused{0};
    ax::SubmitOptions opts;
    opts.help_while_waiting = help;
    auto s = e2e(o.tasks, producers, [&](Countdown& c, std::uint64_t n, int) {
        for (std::uint64_t i = 0; i < n; ++i)
            if (!sched.post_wait([&c] { c.hit(); }, opts))
                std::abort();
    });
    s.refused = refused.load();
    return s;
}

/// The fixed pool fed with post_many in batches of 256 (one admission per batch), against the
/// same pool's single post in "ax fixed pool, large queue".
Sample e2e_ax_post_many(const Options& o, int producers) {
    ax::Scheduler<> sched(fixed_config(o.workers));
    std::atomic<std::uint64_t> refused{0};
    auto s = e2e(o.tasks, producers, [&](Countdown& c, std::uint64_t n, int) {
        struct Hit {
            Countdown* c;
            void operator()() const { c->hit(); }
        };
        std::array<Hit, 256> batch;
        batch.fill(Hit{&c});
        for (std::uint64_t i = 0; i < n;) {
            const std::size_t k = static_cast<std::size_t>(std::min<std::uint64_t>(256, n - i));
            const auto r = sched.post_many(std::span<Hit>(batch.data(), k));
            i += r.admitted.size();
            if (!r.complete()) {
                refused.fetch_add(1, std::memory_order_relaxed);
                std::this_thread::yield();
            }
        }
    });
    s.refused = refused.load();
    return s;
}

Sample e2e_naive(const Options& o, int producers) {
    ax_bench::NaivePool pool(o.workers);
    return e2e(o.tasks, producers, [&](Countdown& c, std::uint64_t n, int) {
        for (std::uint64_t i = 0; i < n; ++i)
            pool.submit([&c] { c.hit(); });
    });
}

#if AX_BENCH_HAVE_ASIO
Sample e2e_asio(const Options& o, int producers) {
    asio::thread_pool pool(o.workers);
    auto s = e2e(o.tasks, producers, [&](Countdown& c, std::uint64_t n, int) {
        for (std::uint64_t i = 0; i < n; ++i)
            asio::post(pool, [&c] { c.hit(); });
    });
    pool.join();
    return s;
}
#endif

#if AX_BENCH_HAVE_TBB
/// oneTBB as intended: each producer runs its share through its own task_group and joins in with
/// wait(); the arena is limited to `workers` threads (the waiting producer counts as one).
Sample e2e_tbb(const Options& o, int producers) {
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism, o.workers);
    return e2e(o.tasks, producers, [&](Countdown& c, std::uint64_t n, int) {
        tbb::task_group tg;
        for (std::uint64_t i = 0; i < n; ++i)
            tg.run([&c] { c.hit(); });
        tg.wait();
    });
}
#endif

// ---------------------------------------------------------------------------------------------
// Idle submit-to-start
// ---------------------------------------------------------------------------------------------

struct StartProbe {
    std::atomic<std::int64_t> started{0};
    std::atomic<bool> flag{false};
    void body() {
        started.store(now_ns(), std::memory_order_relaxed);
        flag.store(true, std::memory_order_release);
        flag.notify_one();
    }
};

/// One side of the idle comparison: its pool, kept alive for a round, and how to submit one probe
/// into it.
struct IdleSide {
    std::shared_ptr<void> pool;
    std::function<void(StartProbe&)> submit;
};

/// Single submits `gap` apart, each into an idle pool: time from just before the submit call to
/// the first statement of the body. Every side's pool lives for the whole round and the submits
/// take turns among them, one by one (the order rotated per turn), so the host's state, which on
/// this VM changes from second to second, weighs on every side alike; a round per side had the
/// same code read 0.76 - 1.46 x the other side from run to run (docs/hot-path.md,
/// "Measuring on a shared VM").
/// Each pool thus sees a submit every `sides` x gap. Returns p50 in value, p99 in value2, per
/// side.
std::vector<Sample> idle_round(const Options& o,
                               const std::vector<std::function<IdleSide()>>& make) {
    std::vector<IdleSide> sides;
    for (const auto& m : make)
        sides.push_back(m());
    std::this_thread::sleep_for(20ms); // let the workers park
    const std::size_t n = sides.size();
    std::vector<std::vector<double>> us(n);
    for (auto& v : us)
        v.reserve(static_cast<std::size_t>(o.latency_samples));
    StartProbe p;
    for (int i = 0; i < o.latency_samples; ++i) {
        for (std::size_t j = 0; j < n; ++j) {
            const std::size_t k = (j + static_cast<std::size_t>(i)) % n;
            std::this_thread::sleep_for(o.latency_gap);
            p.flag.store(false, std::memory_order_relaxed);
            const auto t = now_ns();
            sides[k].submit(p);
            p.flag.wait(false, std::memory_order_acquire);
            us[k].push_back(static_cast<double>(p.started.load(std::memory_order_relaxed) - t) /
                            1e3);
        }
    }
    std::vector<Sample> out(n);
    for (std::size_t k = 0; k < n; ++k) {
        auto& v = us[k];
        std::sort(v.begin(), v.end());
        auto pct = [&](double q) {
            return v[std::min(v.size() - 1,
                              static_cast<std::size_t>(q * static_cast<double>(v.size())))];
        };
        out[k].value = pct(0.50);
        out[k].value2 = pct(0.99);
    }
    return out;
}

IdleSide idle_ax(const ax::Config& cfg) {
    auto sched = std::make_shared<ax::Scheduler<>>(cfg);
    return {sched, [s = sched.get()](StartProbe& p) {
                if (!s->post([&p] { p.body(); }))
                    std::abort();
            }};
}

IdleSide idle_naive(const Options& o) {
    auto pool = std::make_shared<ax_bench::NaivePool>(o.workers);
    return {pool, [q = pool.get()](StartProbe& p) { q->submit([&p] { p.body(); }); }};
}

// ---------------------------------------------------------------------------------------------
// post() throughput: one producer, one worker draining
// ---------------------------------------------------------------------------------------------

template <class Post, class Drain> Sample post_rate(std::uint64_t n, Post&& post, Drain&& drain) {
    std::atomic<std::uint64_t> sink{0};
    const Usage u0 = Usage::now();
    const double rq0 = runqueue_wait_ns();
    const auto t0 = Clock::now();
    for (std::uint64_t i = 0; i < n; ++i)
        post([&sink] { sink.fetch_add(1, std::memory_order_relaxed); });
    const auto t1 = Clock::now();
    const double rq1 = runqueue_wait_ns();
    const Usage u1 = Usage::now();
    drain(sink, n);
    Sample s;
    s.value = static_cast<double>(n) / std::chrono::duration<double>(t1 - t0).count() / 1e6;
    s.cpu_ns = (u1.cpu_s - u0.cpu_s) * 1e9 / static_cast<double>(n);
    s.vcsw_k = (u1.voluntary - u0.voluntary) * 1000.0 / static_cast<double>(n);
    s.icsw_k = (u1.involuntary - u0.involuntary) * 1000.0 / static_cast<double>(n);
    s.rq_ns = (rq1 - rq0) / static_cast<double>(n);
    return s;
}

void wait_sink(std::atomic<std::uint64_t>& sink, std::uint64_t n) {
    while (sink.load(std::memory_order_relaxed) < n)
        std::this_thread::sleep_for(100us);
}

Sample post_ax(const Options& o) {
    ax::Scheduler<> sched(fixed_config(1));
    std::uint64_t refused = 0;
    auto s = post_rate(
        o.tasks,
        [&](auto&& f) {
            while (!sched.post(f)) {
                ++refused;
                std::this_thread::yield();
            }
        },
        wait_sink);
    s.refused = refused;
    return s;
}

/// post_ax() with post_many in batches of 256: the producer's side of a batch (one admission,
/// the slots taken a chunk at a time, one chain appended) against single post()s, with the
/// same single worker draining (it lags behind: the queue holds what it has not run yet).
Sample post_many_ax(const Options& o) {
    ax::Scheduler<> sched(fixed_config(1));
    std::uint64_t refused = 0;
    std::atomic<std::uint64_t> sink{0};
    struct Hit {
        std::atomic<std::uint64_t>* sink;
        void operator()() const { sink->fetch_add(1, std::memory_order_relaxed); }
    };
    std::array<Hit, 256> batch;
    batch.fill(Hit{&sink});
    const Usage u0 = Usage::now();
    const double rq0 = runqueue_wait_ns();
    const auto t0 = Clock::now();
    for (std::uint64_t i = 0; i < o.tasks;) {
        const auto k = static_cast<std::size_t>(std::min<std::uint64_t>(256, o.tasks - i));
        const auto r = sched.post_many(std::span<Hit>(batch.data(), k));
        i += r.admitted.size();
        if (!r.complete()) {
            ++refused;
            std::this_thread::yield();
        }
    }
    const auto t1 = Clock::now();
    const double rq1 = runqueue_wait_ns();
    const Usage u1 = Usage::now();
    wait_sink(sink, o.tasks);
    Sample s;
    const auto n = static_cast<double>(o.tasks);
    s.value = n / std::chrono::duration<double>(t1 - t0).count() / 1e6;
    s.cpu_ns = (u1.cpu_s - u0.cpu_s) * 1e9 / n;
    s.vcsw_k = (u1.voluntary - u0.voluntary) * 1000.0 / n;
    s.icsw_k = (u1.involuntary - u0.involuntary) * 1000.0 / n;
    s.rq_ns = (rq1 - rq0) / n;
    s.refused = refused;
    return s;
}

Sample post_naive(const Options& o) {
    ax_bench::NaivePool pool(1);
    return post_rate(
        o.tasks, [&](auto&& f) { pool.submit(f); }, wait_sink);
}

// ---------------------------------------------------------------------------------------------
// Memory per queued task: measured from before the pool is built, so the queue's own storage
// (ax reserves queue_capacity up front; it is set to the number of tasks queued here) counts.
// ---------------------------------------------------------------------------------------------

double rss_bytes() {
    std::ifstream in("/proc/self/statm");
    std::uint64_t size = 0, resident = 0;
    in >> size >> resident;
    return static_cast<double>(resident) * static_cast<double>(::sysconf(_SC_PAGESIZE));
}

double heap_bytes() {
    const auto m = ::mallinfo2();
    return static_cast<double>(m.uordblks) + static_cast<double>(m.hblkhd);
}

template <class Make, class Post>
Sample memory_per_task(std::uint64_t n, Make&& make, Post&& post) {
    ::malloc_trim(0);
    const double rss0 = rss_bytes(), heap0 = heap_bytes();
    auto pool = make();
    std::atomic<bool> release{false}, running{false};
    post(*pool, [&] {
        running.store(true);
        running.notify_one();
        release.wait(false);
    });
    running.wait(false);
    std::atomic<std::uint64_t> sink{0};
    for (std::uint64_t i = 0; i < n; ++i)
        post(*pool, [&sink] { sink.fetch_add(1, std::memory_order_relaxed); });
    const double rss1 = rss_bytes(), heap1 = heap_bytes();
    release.store(true);
    release.notify_one();
    pool.reset();
    Sample s;
    // Resident memory, not malloc's count: ax's large slabs map their chunks outside malloc
    // (2 MiB huge-page regions), which mallinfo never sees. The heap figure goes in the notes.
    s.value = (rss1 - rss0) / static_cast<double>(n);
    s.value2 = (heap1 - heap0) / static_cast<double>(n);
    return s;
}

Sample memory_ax(const Options& o) {
    return memory_per_task(
        o.queued_tasks,
        [&] {
            return std::make_unique<ax::Scheduler<>>(
                fixed_config(1, static_cast<std::uint32_t>(o.queued_tasks + 1)));
        },
        [](ax::Scheduler<>& s, auto&& f) {
            if (!s.post(std::forward<decltype(f)>(f)))
                std::abort();
        });
}

Sample memory_naive(const Options& o) {
    return memory_per_task(
        o.queued_tasks, [] { return std::make_unique<ax_bench::NaivePool>(1); },
        [](ax_bench::NaivePool& p, auto&& f) { p.submit(std::forward<decltype(f)>(f)); });
}

// ---------------------------------------------------------------------------------------------
// The table
// ---------------------------------------------------------------------------------------------

enum class Kind { throughput, latency, memory };

struct Case {
    std::string measure; // row group
    std::string impl;
    bool is_ax = false;
    Kind kind = Kind::throughput;
    std::function<Sample()> run;
    std::vector<Sample> samples;
    /// Idle-latency cases only: their pool for an interleaved round (idle_round), instead of run.
    std::function<IdleSide()> idle = {};
    /// Report heap allocations per task in the notes.
    bool allocs = false;
};

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

template <class Get> double med(const Case& c, Get&& get) {
    std::vector<double> v;
    for (const auto& s : c.samples)
        v.push_back(get(s));
    return median(std::move(v));
}

std::string load_avg() {
    std::ifstream in("/proc/loadavg");
    std::string a, b, c;
    in >> a >> b >> c;
    return a + " " + b + " " + c;
}

/// Mean time for one cache line to go from CPU 0 to CPU 1 and back (two threads pinned there
/// taking turns on one atomic). On this VM it tells the two states apart that every row moves
/// with: ~80-110 ns when the two vCPUs sit close, ~400-500 ns when they do not (compute speed is
/// the same in both). 0 where there is no second CPU or pinning fails.
double cache_line_round_trip_ns() {
    if (std::thread::hardware_concurrency() < 2)
        return 0;
    const auto pin = [](int cpu) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
    };
    constexpr int trips = 100000;
    alignas(64) std::atomic<int> turn{0};
    std::atomic<bool> pinned{true};
    std::thread other([&] {
        if (!pin(1))
            pinned.store(false);
        for (int i = 0; i < trips; ++i) {
            while (turn.load(std::memory_order_acquire) != 2 * i + 1) {
            }
            turn.store(2 * i + 2, std::memory_order_release);
        }
    });
    cpu_set_t before;
    pthread_getaffinity_np(pthread_self(), sizeof before, &before);
    if (!pin(0))
        pinned.store(false);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < trips; ++i) {
        turn.store(2 * i + 1, std::memory_order_release);
        while (turn.load(std::memory_order_acquire) != 2 * i + 2) {
        }
    }
    const auto t1 = std::chrono::steady_clock::now();
    other.join();
    pthread_setaffinity_np(pthread_self(), sizeof before, &before);
    if (!pinned.load())
        return 0;
    return std::chrono::duration<double, std::nano>(t1 - t0).count() / trips;
}

void print_table(const std::vector<Case>& cases, const Options& o) {
    std::printf("\n| measure | implementation | median | min – max | vs best peer | CPU ns/task | "
                "producer run-queue wait ns/task | csw/1k tasks (vol / invol) | notes |\n");
    std::printf("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n");
    for (std::size_t i = 0; i < cases.size();) {
        std::size_t j = i;
        while (j < cases.size() && cases[j].measure == cases[i].measure)
            ++j;
        // Best peer (non-ax) in this group: highest throughput, lowest latency / memory.
        double best = 0;
        bool have_best = false;
        for (std::size_t k = i; k < j; ++k) {
            if (cases[k].is_ax || cases[k].samples.empty())
                continue;
            const double m = med(cases[k], [](const Sample& s) { return s.value; });
            if (!have_best || (cases[k].kind == Kind::throughput ? m > best : m < best))
                best = m;
            have_best = true;
        }
        for (std::size_t k = i; k < j; ++k) {
            const Case& c = cases[k];
            if (c.samples.empty())
                continue;
            std::vector<double> v;
            for (const auto& s : c.samples)
                v.push_back(s.value);
            const double m = median(v);
            const double lo = *std::min_element(v.begin(), v.end());
            const double hi = *std::max_element(v.begin(), v.end());
            char ratio[32] = "";
            if (c.is_ax && have_best && best > 0 && c.kind != Kind::memory)
                std::snprintf(ratio, sizeof ratio, "%.2f×",
                              c.kind == Kind::throughput ? m / best : best / m);
            std::string notes;
            char buf[96];
            if (c.kind == Kind::latency) {
                std::snprintf(
                    buf, sizeof buf, "p99 %.1f µs (min–max %.1f – %.1f)",
                    med(c, [](const Sample& s) { return s.value2; }),
                    std::min_element(c.samples.begin(), c.samples.end(),
                                     [](auto& a, auto& b) { return a.value2 < b.value2; })
                        ->value2,
                    std::max_element(c.samples.begin(), c.samples.end(), [](auto& a, auto& b) {
                        return a.value2 < b.value2;
                    })->value2);
                notes = buf;
            } else if (c.kind == Kind::memory) {
                std::snprintf(buf, sizeof buf, "heap (malloc) %.1f B/task",
                              med(c, [](const Sample& s) { return s.value2; }));
                notes = buf;
            }
            if (c.allocs) {
                std::snprintf(buf, sizeof buf, "%s%.2f allocs/task", notes.empty() ? "" : "; ",
                              med(c, [](const Sample& s) { return s.allocs; }));
                notes += buf;
            }
            const double refused = med(c, [](const Sample& s) { return double(s.refused); });
            if (refused > 0) {
                std::snprintf(buf, sizeof buf, "%s%.0f refusals obeyed", notes.empty() ? "" : "; ",
                              refused);
                notes += buf;
            }
            const char* unit = c.kind == Kind::throughput ? " M/s"
                               : c.kind == Kind::latency  ? " µs"
                                                          : " B";
            const int prec = c.kind == Kind::memory ? 1 : 2;
            char cpu[32] = "", csw[48] = "", rq[32] = "";
            if (c.kind == Kind::throughput) {
                std::snprintf(cpu, sizeof cpu, "%.0f",
                              med(c, [](const Sample& s) { return s.cpu_ns; }));
                std::snprintf(rq, sizeof rq, "%.0f",
                              med(c, [](const Sample& s) { return s.rq_ns; }));
                std::snprintf(csw, sizeof csw, "%.2f / %.2f",
                              med(c, [](const Sample& s) { return s.vcsw_k; }),
                              med(c, [](const Sample& s) { return s.icsw_k; }));
            }
            std::printf("| %s | %s | %.*f%s | %.*f – %.*f | %s | %s | %s | %s | %s |\n",
                        c.measure.c_str(), c.impl.c_str(), prec, m, unit, prec, lo, prec, hi, ratio,
                        cpu, rq, csw, notes.c_str());
        }
        i = j;
    }
    std::printf("\n%d rounds, interleaved (case order rotated each round); %llu tasks per "
                "throughput round; %u workers; idle: %d submits per implementation, %lld µs apart, "
                "taking turns one by one; memory: %llu "
                "tasks queued behind one blocked worker.\n",
                o.reps, static_cast<unsigned long long>(o.tasks), o.workers, o.latency_samples,
                static_cast<long long>(o.latency_gap.count()),
                static_cast<unsigned long long>(o.queued_tasks));
}

int usage(const char* argv0) {
    std::printf(
        "usage: %s [--reps N] [--tasks N] [--workers N] [--samples N] [--gap-us N]\n"
        "          [--queued N] [--only e2e,e2e2,hist,coro,idle,post,mem] [--impl SUBSTRING]\n"
        "       %s --gbench [Google Benchmark flags]   component micro-benchmarks\n",
        argv0, argv0);
    return 2;
}

int run_table(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&]() -> const char* {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "ax_micro: %s needs a value\n", a.c_str());
                std::exit(usage(argv[0]));
            }
            return argv[++i];
        };
        auto num = [&]() -> long long {
            const char* v = next();
            char* end = nullptr;
            const long long n = std::strtoll(v, &end, 10);
            if (end == v || *end != '\0' || n <= 0) {
                std::fprintf(stderr, "ax_micro: %s wants a positive integer, got '%s'\n", a.c_str(),
                             v);
                std::exit(usage(argv[0]));
            }
            return n;
        };
        if (a == "--reps")
            o.reps = static_cast<int>(num());
        else if (a == "--tasks")
            o.tasks = static_cast<std::uint64_t>(num());
        else if (a == "--workers")
            o.workers = static_cast<std::uint32_t>(num());
        else if (a == "--samples")
            o.latency_samples = static_cast<int>(num());
        else if (a == "--gap-us")
            o.latency_gap = std::chrono::microseconds(num());
        else if (a == "--queued")
            o.queued_tasks = static_cast<std::uint64_t>(num());
        else if (a == "--only")
            o.only = next();
        else if (a == "--impl")
            o.impl = next();
        else if (a == "--help" || a == "-h")
            return usage(argv[0]), 0;
        else {
            std::fprintf(stderr, "ax_micro: unknown argument '%s'\n", a.c_str());
            return usage(argv[0]);
        }
    }

    std::vector<Case> cases;
    // Memory first, on a heap no other case has fragmented yet; it does not vary between rounds,
    // so it runs once.
    std::vector<Case> memory;
    if (o.wants("mem")) {
        memory.push_back({"memory per queued task (RSS)",
                          "ax",
                          true,
                          Kind::memory,
                          [&] { return memory_ax(o); },
                          {}});
        memory.push_back({"memory per queued task (RSS)",
                          "mutex pool",
                          false,
                          Kind::memory,
                          [&] { return memory_naive(o); },
                          {}});
    }
    for (int producers : {1, 2}) {
        if (!o.wants(producers == 1 ? "e2e" : "e2e2"))
            continue;
        const std::string m = "1M tiny tasks, " + std::to_string(producers) + " producer" +
                              (producers == 1 ? "" : "s");
        cases.push_back({m,
                         "ax fixed pool, large queue",
                         true,
                         Kind::throughput,
                         [&o, producers] { return e2e_ax_fixed(o, producers); },
                         {}});
        cases.push_back({m,
                         "ax default Config, retry_after",
                         true,
                         Kind::throughput,
                         [&o, producers] { return e2e_ax_default(o, producers); },
                         {}});
        cases.push_back({m,
                         "ax default Config, post_wait",
                         true,
                         Kind::throughput,
                         [&o, producers] { return e2e_ax_post_wait(o, producers); },
                         {}});
        cases.push_back({m,
                         "ax default Config, post_wait helping",
                         true,
                         Kind::throughput,
                         [&o, producers] { return e2e_ax_post_wait(o, producers, true); },
                         {}});
        cases.push_back({m,
                         "ax fixed pool, post_many x256",
                         true,
                         Kind::throughput,
                         [&o, producers] { return e2e_ax_post_many(o, producers); },
                         {}});
        cases.push_back({m,
                         "mutex pool",
                         false,
                         Kind::throughput,
                         [&o, producers] { return e2e_naive(o, producers); },
                         {}});
#if AX_BENCH_HAVE_TBB
        cases.push_back({m,
                         "oneTBB task_group",
                         false,
                         Kind::throughput,
                         [&o, producers] { return e2e_tbb(o, producers); },
                         {}});
#endif
#if AX_BENCH_HAVE_ASIO
        cases.push_back({m,
                         "asio thread_pool",
                         false,
                         Kind::throughput,
                         [&o, producers] { return e2e_asio(o, producers); },
                         {}});
#endif
    }
    const std::string hist_measure = "1M tiny tasks, 1 producer, latency histograms";
    const std::string hist_on = "ax fixed pool, histograms on";
    const std::string hist_off = "ax fixed pool, histograms off";
    if (o.wants("hist")) {
        cases.push_back({hist_measure,
                         hist_on,
                         true,
                         Kind::throughput,
                         [&o] { return e2e_ax_fixed(o, 1, true); },
                         {}});
        cases.push_back({hist_measure,
                         hist_off,
                         true,
                         Kind::throughput,
                         [&o] { return e2e_ax_fixed(o, 1, false); },
                         {}});
    }
    if (o.wants("coro")) {
        const std::string m = "1M tiny tasks, 1 producer, coroutine tasks";
        const std::pair<const char*, CoroShape> shapes[] = {
            {"ax post(), plain callable (reference)", CoroShape::plain},
            {"ax post(), ax::Task coroutine", CoroShape::coroutine},
            {"ax post(), ax::Task taking TaskContext&", CoroShape::coroutine_ctx},
            {"ax post(), ax::Task using this_context()", CoroShape::this_context},
            {"ax post(), ax::Task awaiting 1 subtask", CoroShape::awaits_child}};
        for (const auto& [name, shape] : shapes)
            cases.push_back({m,
                             name,
                             shape != CoroShape::plain,
                             Kind::throughput,
                             [&o, shape = shape] { return e2e_coro(o, shape); },
                             {},
                             {},
                             true});
    }
    if (o.wants("idle")) {
        const std::string m = "idle submit-to-start p50";
        cases.push_back({m, "ax default Config", true, Kind::latency, {}, {}, [] {
                             return idle_ax(ax::Config{});
                         }});
        cases.push_back({m, "ax fixed pool", true, Kind::latency, {}, {}, [&o] {
                             return idle_ax(fixed_config(o.workers));
                         }});
        cases.push_back(
            {m, "mutex pool", false, Kind::latency, {}, {}, [&o] { return idle_naive(o); }});
    }
    if (o.wants("post")) {
        const std::string m = "post(), 1 producer, 1 worker draining";
        cases.push_back({m, "ax post()", true, Kind::throughput, [&o] { return post_ax(o); }, {}});
        cases.push_back({m,
                         "ax post_many() x256",
                         true,
                         Kind::throughput,
                         [&o] { return post_many_ax(o); },
                         {}});
        cases.push_back({m,
                         "mutex pool submit()",
                         false,
                         Kind::throughput,
                         [&o] { return post_naive(o); },
                         {}});
    }

    if (!o.impl.empty()) {
        auto drop = [&](const Case& c) { return c.impl.find(o.impl) == std::string::npos; };
        cases.erase(std::remove_if(cases.begin(), cases.end(), drop), cases.end());
        memory.erase(std::remove_if(memory.begin(), memory.end(), drop), memory.end());
    }
    for (auto& c : memory)
        c.samples.push_back(c.run());
    std::printf("ax_micro: %d rounds, load average before: %s; cache-line round trip CPU 0 <-> 1: "
                "%.0f ns\n",
                o.reps, load_avg().c_str(), cache_line_round_trip_ns());
    for (int rep = 0; rep < o.reps; ++rep) {
        std::vector<Case*> idle;
        for (std::size_t k = 0; k < cases.size(); ++k) {
            Case& c = cases[(k + static_cast<std::size_t>(rep)) % cases.size()];
            if (c.idle) {
                idle.push_back(&c);
                continue;
            }
            c.samples.push_back(c.run());
            const Sample& s = c.samples.back();
            std::fprintf(stderr, "round %d  %-40s %-32s %10.2f\n", rep + 1, c.measure.c_str(),
                         c.impl.c_str(), s.value);
        }
        if (idle.empty())
            continue;
        std::vector<std::function<IdleSide()>> make;
        for (Case* c : idle)
            make.push_back(c->idle);
        const std::vector<Sample> got = idle_round(o, make);
        for (std::size_t k = 0; k < idle.size(); ++k) {
            idle[k]->samples.push_back(got[k]);
            std::fprintf(stderr, "round %d  %-40s %-32s %10.2f\n", rep + 1,
                         idle[k]->measure.c_str(), idle[k]->impl.c_str(), got[k].value);
        }
    }
    std::printf("load average after: %s; cache-line round trip CPU 0 <-> 1: %.0f ns\n",
                load_avg().c_str(), cache_line_round_trip_ns());
    std::vector<Case> all = std::move(cases);
    all.insert(all.end(), std::make_move_iterator(memory.begin()),
               std::make_move_iterator(memory.end()));
    print_table(all, o);
    // The histograms' cost: medians of the interleaved on / off rounds.
    const auto find_case = [&](const std::string& impl) -> const Case* {
        for (const Case& c : all)
            if (c.measure == hist_measure && c.impl == impl && !c.samples.empty())
                return &c;
        return nullptr;
    };
    if (const Case* on = find_case(hist_on), *off = find_case(hist_off); on && off) {
        const double m_on = med(*on, [](const Sample& s) { return s.value; });
        const double m_off = med(*off, [](const Sample& s) { return s.value; });
        const double c_on = med(*on, [](const Sample& s) { return s.cpu_ns; });
        const double c_off = med(*off, [](const Sample& s) { return s.cpu_ns; });
        // Each round ran both (in rotating order): the median of the per-round ratios is less
        // sensitive to load that drifts between rounds than the ratio of the medians.
        std::vector<double> ratios;
        for (std::size_t r = 0; r < on->samples.size() && r < off->samples.size(); ++r)
            ratios.push_back(on->samples[r].value / off->samples[r].value);
        std::printf("\nlatency histograms: on %.2f M/s, off %.2f M/s (median of %d): throughput "
                    "%+.1f %% with them on (median of per-round on/off ratios: %+.1f %%); CPU "
                    "%.0f vs %.0f ns/task (%+.1f %%)\n",
                    m_on, m_off, o.reps, (m_on / m_off - 1.0) * 100.0,
                    (median(ratios) - 1.0) * 100.0, c_on, c_off, (c_on / c_off - 1.0) * 100.0);
    }
    return 0;
}

// ---------------------------------------------------------------------------------------------
// --gbench: component micro-benchmarks (Google Benchmark)
// ---------------------------------------------------------------------------------------------

unsigned hw_threads() {
    const unsigned n = std::thread::hardware_concurrency();
    return n == 0 ? 1 : n;
}

constexpr int queue_batch = 64;

/// Links for the queue benchmark: slots of its own, never walked (the consumer only counts).
struct BenchLinks {
    std::uint32_t* next_;
    [[nodiscard]] std::uint32_t next(std::uint32_t i) const noexcept { return next_[i]; }
    void set_next(std::uint32_t i, std::uint32_t v) const noexcept { next_[i] = v; }
};

/// DoubleBufferQueue: try_push per item, one swap per batch of 64 (1 and 2 threads sharing it).
/// Each thread pushes slots of its own; a swap leaves none of them in the standby list.
void BM_Queue_DoubleBuffer(benchmark::State& state) {
    constexpr int max_threads = 64;
    static std::vector<std::uint32_t> links(static_cast<std::size_t>(queue_batch) * max_threads);
    static ax::detail::DoubleBufferQueue<BenchLinks> q(BenchLinks{links.data()}, 1u << 24,
                                                       1u << 24);
    const auto base = static_cast<std::uint32_t>(state.thread_index() % max_threads) *
                      static_cast<std::uint32_t>(queue_batch);
    ax::detail::DoubleBufferQueue<BenchLinks>::Chain out;
    std::uint32_t lanes = 0;
    std::uint32_t len = 0;
    std::uint64_t taken = 0;
    for (auto _ : state) {
        for (int i = 0; i < queue_batch; ++i) {
            const auto a =
                q.try_push(base + static_cast<std::uint32_t>(i), ax::Priority::normal, len);
            benchmark::DoNotOptimize(a);
        }
        if (q.swap(out, lanes)) {
            for (std::size_t k = 0; k < out.size(); ++k)
                q.on_dequeued(ax::Priority::normal);
            taken += out.size();
            out = {};
        }
    }
    state.SetItemsProcessed(state.iterations() * queue_batch);
    state.counters["taken"] = static_cast<double>(taken);
}
BENCHMARK(BM_Queue_DoubleBuffer)->Threads(1)->Threads(2)->UseRealTime();

/// std::deque + std::mutex: a lock per push and per pop, as a textbook pool's worker pops.
void BM_Queue_DequeMutex(benchmark::State& state) {
    static std::mutex m;
    static std::deque<std::uint32_t> q;
    std::uint64_t taken = 0;
    for (auto _ : state) {
        for (int i = 0; i < queue_batch; ++i) {
            std::lock_guard lock(m);
            q.push_back(static_cast<std::uint32_t>(i));
        }
        for (;;) {
            std::uint32_t v = 0;
            {
                std::lock_guard lock(m);
                if (q.empty())
                    break;
                v = q.front();
                q.pop_front();
            }
            benchmark::DoNotOptimize(v);
            ++taken;
        }
    }
    state.SetItemsProcessed(state.iterations() * queue_batch);
    state.counters["taken"] = static_cast<double>(taken);
}
BENCHMARK(BM_Queue_DequeMutex)->Threads(1)->Threads(2)->UseRealTime();

std::unique_ptr<ax::Scheduler<>> g_sched;
std::unique_ptr<ax_bench::NaivePool> g_naive;

/// post() of an empty lambda from 1/2/4 producers while hardware_concurrency workers drain.
void BM_Submit_AxPost(benchmark::State& state) {
    if (state.thread_index() == 0)
        g_sched = std::make_unique<ax::Scheduler<>>(fixed_config(hw_threads()));
    std::uint64_t ok = 0, refused = 0;
    for (auto _ : state) {
        auto r = g_sched->post([] {});
        if (r) {
            ++ok;
        } else {
            ++refused;
            std::this_thread::yield();
        }
    }
    state.SetItemsProcessed(static_cast<std::int64_t>(ok));
    state.counters["refused"] = benchmark::Counter(static_cast<double>(refused));
    if (state.thread_index() == 0) {
        g_sched->shutdown();
        g_sched.reset();
    }
}
BENCHMARK(BM_Submit_AxPost)->Threads(1)->Threads(2)->Threads(4)->UseRealTime();

void BM_Submit_NaivePool(benchmark::State& state) {
    if (state.thread_index() == 0)
        g_naive = std::make_unique<ax_bench::NaivePool>(hw_threads());
    for (auto _ : state)
        g_naive->submit([] {});
    state.SetItemsProcessed(state.iterations());
    if (state.thread_index() == 0)
        g_naive.reset();
}
BENCHMARK(BM_Submit_NaivePool)->Threads(1)->Threads(2)->Threads(4)->UseRealTime();

} // namespace

int main(int argc, char** argv) {
    if (argc > 1 && std::strcmp(argv[1], "--gbench") == 0) {
        argv[1] = argv[0];
        int n = argc - 1;
        benchmark::Initialize(&n, argv + 1);
        if (benchmark::ReportUnrecognizedArguments(n, argv + 1))
            return 2;
        benchmark::RunSpecifiedBenchmarks();
        benchmark::Shutdown();
        return 0;
    }
    return run_table(argc, argv);
}
