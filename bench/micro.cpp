// ax benchmarks — ax_micro: Google Benchmark micro-benchmarks of ax's hot paths against peers, all
// in one binary so ratios come from one run on one machine:
//   * the double-buffer queue (try_push + swap) vs std::deque + std::mutex
//   * submit throughput, one and several producers (post() of an empty lambda)
//   * end-to-end throughput of 1M tiny tasks: ax vs asio::thread_pool, oneTBB task_group, and a
//     mutex + condvar pool, all on hardware_concurrency threads
//   * idle submit-to-start latency p50/p99 (counters)
//   * bytes of memory per queued task (counters; ax's task record is 128 B), run first
// SPDX-License-Identifier: MIT

#include "ax/scheduler.hpp"
#include "naive_pool.hpp"

#include <algorithm>
#include <atomic>
#include <benchmark/benchmark.h>
#include <chrono>
#include <cstdint>
#include <deque>
#include <fstream>
#include <functional>
#include <malloc.h>
#include <memory>
#include <mutex>
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

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

unsigned hw_threads() {
    const unsigned n = std::thread::hardware_concurrency();
    return n == 0 ? 1 : n;
}

std::int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
        .count();
}

/// A Config for throughput runs: a fixed pool of hardware_concurrency workers and a queue large
/// enough that backpressure never triggers (soft limit off).
ax::Config throughput_config(std::uint32_t workers = hw_threads()) {
    ax::Config cfg;
    cfg.min_workers = workers;
    cfg.max_workers = workers;
    cfg.queue_capacity = 1u << 20;
    cfg.soft_limit_ratio = 1.0;
    return cfg;
}

// ---------------------------------------------------------------------------------------------
// 0. Memory per queued task (registered first, so it runs in a fresh heap): block the only worker,
// queue 100k tasks (8-byte capture), and divide
//    the growth of resident memory (RSS) and of malloc'ed bytes (mallinfo2) by the task count.
// ---------------------------------------------------------------------------------------------

constexpr std::uint64_t queued_tasks = 100'000;

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

void BM_MemoryPerQueuedTask_Ax(benchmark::State& state) {
    for (auto _ : state) {
        ax::Config cfg = throughput_config(1);
        ax::Scheduler<> sched(cfg);
        std::atomic<bool> release{false}, running{false};
        auto b = sched.post([&] {
            running.store(true);
            running.notify_one();
            release.wait(false);
        });
        if (!b)
            state.SkipWithError("blocker refused");
        running.wait(false);
        std::atomic<std::uint64_t> sink{0};
        ::malloc_trim(0); // hand freed pages back so RSS growth is not absorbed by reuse
        const double rss0 = rss_bytes(), heap0 = heap_bytes();
        for (std::uint64_t i = 0; i < queued_tasks; ++i) {
            auto r = sched.post([&sink] { sink.fetch_add(1, std::memory_order_relaxed); });
            if (!r)
                state.SkipWithError("post refused");
        }
        const double rss1 = rss_bytes(), heap1 = heap_bytes();
        release.store(true);
        release.notify_one();
        sched.shutdown();
        state.counters["rss_B_per_task"] = (rss1 - rss0) / queued_tasks;
        state.counters["heap_B_per_task"] = (heap1 - heap0) / queued_tasks;
        state.counters["record_B"] = sizeof(ax::detail::TaskRecord);
    }
}
BENCHMARK(BM_MemoryPerQueuedTask_Ax)->Iterations(1)->Unit(benchmark::kMillisecond);

void BM_MemoryPerQueuedTask_NaivePool(benchmark::State& state) {
    for (auto _ : state) {
        ax_bench::NaivePool pool(1);
        std::atomic<bool> release{false}, running{false};
        pool.submit([&] {
            running.store(true);
            running.notify_one();
            release.wait(false);
        });
        running.wait(false);
        std::atomic<std::uint64_t> sink{0};
        ::malloc_trim(0); // hand freed pages back so RSS growth is not absorbed by reuse
        const double rss0 = rss_bytes(), heap0 = heap_bytes();
        for (std::uint64_t i = 0; i < queued_tasks; ++i)
            pool.submit([&sink] { sink.fetch_add(1, std::memory_order_relaxed); });
        const double rss1 = rss_bytes(), heap1 = heap_bytes();
        release.store(true);
        release.notify_one();
        state.counters["rss_B_per_task"] = (rss1 - rss0) / queued_tasks;
        state.counters["heap_B_per_task"] = (heap1 - heap0) / queued_tasks;
        state.counters["record_B"] = sizeof(std::function<void()>);
    }
}
BENCHMARK(BM_MemoryPerQueuedTask_NaivePool)->Iterations(1)->Unit(benchmark::kMillisecond);

// ---------------------------------------------------------------------------------------------
// 1. Queue: ax::detail::DoubleBufferQueue vs std::deque + std::mutex
//    Each iteration pushes 64 items (one lock each) and then takes everything queued: one swap
//    for the double buffer, one lock per item for the deque (as a worker of a naive pool pops).
//    With several threads they share one queue.
// ---------------------------------------------------------------------------------------------

constexpr int queue_batch = 64;

void BM_Queue_DoubleBuffer(benchmark::State& state) {
    static ax::detail::DoubleBufferQueue q(1u << 24, 1u << 24);
    std::vector<std::uint32_t> out;
    out.reserve(4096);
    std::uint32_t len = 0;
    std::uint64_t taken = 0;
    for (auto _ : state) {
        for (int i = 0; i < queue_batch; ++i) {
            const auto a = q.try_push(static_cast<std::uint32_t>(i), ax::Priority::normal, len);
            benchmark::DoNotOptimize(a);
        }
        if (q.swap(out)) {
            for (const auto v : out) {
                benchmark::DoNotOptimize(v);
                q.on_dequeued(ax::Priority::normal);
            }
            taken += out.size();
            out.clear();
        }
    }
    state.SetItemsProcessed(state.iterations() * queue_batch);
    state.counters["taken"] = static_cast<double>(taken);
}
BENCHMARK(BM_Queue_DoubleBuffer)->Threads(1)->Threads(2)->UseRealTime();

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

// ---------------------------------------------------------------------------------------------
// 2. Submit throughput: post() of an empty lambda while hardware_concurrency workers drain.
//    items/s counts admitted posts; "refused" counts queue_full answers (the producer yields).
// ---------------------------------------------------------------------------------------------

std::unique_ptr<ax::Scheduler<>> g_sched;
std::unique_ptr<ax_bench::NaivePool> g_naive;

void BM_Submit_AxPost(benchmark::State& state) {
    if (state.thread_index() == 0)
        g_sched = std::make_unique<ax::Scheduler<>>(throughput_config());
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

// ---------------------------------------------------------------------------------------------
// 3. End to end: 1M tiny tasks (an atomic increment each) through each pool, waiting until the
//    last one ran. Pools are built once per benchmark, outside the timed loop.
// ---------------------------------------------------------------------------------------------

constexpr std::uint64_t e2e_tasks = 1'000'000;

struct alignas(64) Countdown {
    std::atomic<std::uint64_t> done{0};
    alignas(64) std::atomic<bool> finished{false};

    void reset() {
        done.store(0, std::memory_order_relaxed);
        finished.store(false, std::memory_order_release);
    }
    void hit() {
        if (done.fetch_add(1, std::memory_order_acq_rel) + 1 == e2e_tasks) {
            finished.store(true, std::memory_order_release);
            finished.notify_one();
        }
    }
    void wait() { finished.wait(false, std::memory_order_acquire); }
};

void BM_E2E_Ax(benchmark::State& state) {
    ax::Scheduler<> sched(throughput_config());
    Countdown c;
    std::uint64_t refused = 0;
    for (auto _ : state) {
        c.reset();
        for (std::uint64_t i = 0; i < e2e_tasks; ++i) {
            for (;;) {
                auto r = sched.post([&c] { c.hit(); });
                if (r)
                    break;
                ++refused;
                std::this_thread::yield();
            }
        }
        c.wait();
    }
    state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(e2e_tasks));
    state.counters["refused"] = static_cast<double>(refused);
    state.counters["threads"] = hw_threads();
}
BENCHMARK(BM_E2E_Ax)->Unit(benchmark::kMillisecond)->UseRealTime();

#if AX_BENCH_HAVE_ASIO
void BM_E2E_AsioThreadPool(benchmark::State& state) {
    asio::thread_pool pool(hw_threads());
    Countdown c;
    for (auto _ : state) {
        c.reset();
        for (std::uint64_t i = 0; i < e2e_tasks; ++i)
            asio::post(pool, [&c] { c.hit(); });
        c.wait();
    }
    pool.join();
    state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(e2e_tasks));
    state.counters["threads"] = hw_threads();
}
BENCHMARK(BM_E2E_AsioThreadPool)->Unit(benchmark::kMillisecond)->UseRealTime();
#endif

#if AX_BENCH_HAVE_TBB
void BM_E2E_TbbTaskGroup(benchmark::State& state) {
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism, hw_threads());
    Countdown c;
    for (auto _ : state) {
        c.reset();
        tbb::task_group tg;
        for (std::uint64_t i = 0; i < e2e_tasks; ++i)
            tg.run([&c] { c.hit(); });
        tg.wait(); // the calling thread joins in, as TBB intends
    }
    state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(e2e_tasks));
    state.counters["threads"] = hw_threads();
}
BENCHMARK(BM_E2E_TbbTaskGroup)->Unit(benchmark::kMillisecond)->UseRealTime();
#endif

void BM_E2E_NaivePool(benchmark::State& state) {
    ax_bench::NaivePool pool(hw_threads());
    Countdown c;
    for (auto _ : state) {
        c.reset();
        for (std::uint64_t i = 0; i < e2e_tasks; ++i)
            pool.submit([&c] { c.hit(); });
        c.wait();
    }
    state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(e2e_tasks));
    state.counters["threads"] = hw_threads();
}
BENCHMARK(BM_E2E_NaivePool)->Unit(benchmark::kMillisecond)->UseRealTime();

// ---------------------------------------------------------------------------------------------
// 4. Idle submit-to-start latency: one task into an idle pool, time from just before the submit
//    call to the first statement of the body; 2000 samples 1 ms apart (the workers park).
// ---------------------------------------------------------------------------------------------

constexpr int latency_samples = 2000;

struct StartProbe {
    std::atomic<std::int64_t> started{0};
    std::atomic<bool> flag{false};
    void body() {
        started.store(now_ns(), std::memory_order_relaxed);
        flag.store(true, std::memory_order_release);
        flag.notify_one();
    }
};

template <class Submit> void idle_latency(benchmark::State& state, Submit&& submit) {
    std::vector<double> us;
    us.reserve(latency_samples);
    for (auto _ : state) {
        us.clear();
        StartProbe p;
        for (int i = 0; i < latency_samples; ++i) {
            std::this_thread::sleep_for(1ms);
            p.flag.store(false, std::memory_order_relaxed);
            const auto t = now_ns();
            submit(p);
            p.flag.wait(false, std::memory_order_acquire);
            us.push_back(static_cast<double>(p.started.load(std::memory_order_relaxed) - t) / 1e3);
        }
    }
    std::sort(us.begin(), us.end());
    auto pct = [&](double q) {
        return us[std::min(us.size() - 1,
                           static_cast<std::size_t>(q * static_cast<double>(us.size())))];
    };
    state.counters["p50_us"] = pct(0.50);
    state.counters["p99_us"] = pct(0.99);
    state.counters["max_us"] = us.back();
}

void BM_IdleLatency_Ax(benchmark::State& state) {
    ax::Scheduler<> sched; // default Config: 4 idle workers
    idle_latency(state, [&](StartProbe& p) {
        auto r = sched.post([&p] { p.body(); });
        if (!r)
            state.SkipWithError("post refused");
    });
}
BENCHMARK(BM_IdleLatency_Ax)->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_IdleLatency_NaivePool(benchmark::State& state) {
    ax_bench::NaivePool pool(4);
    idle_latency(state, [&](StartProbe& p) { pool.submit([&p] { p.body(); }); });
}
BENCHMARK(BM_IdleLatency_NaivePool)->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();

} // namespace

BENCHMARK_MAIN();
