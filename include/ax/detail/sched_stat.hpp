// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include "../controller.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <thread>
#include <type_traits>

/// Per-thread CPU and runqueue time from the kernel, and the shares of the workers' busy time the
/// controller reads (ControllerInput::cpu_share / runqueue_share).
///
/// Cost (measured on the 2-core development machine, ../shared/notes/machine-costs.md style): one
/// read of /proc/self/task/<tid>/schedstat (fopen + fscanf + fclose) takes ~8 us, so the tick
/// reads each worker once per sampling period (a controller round, at most every
/// controller_interval / 20), never per task: 200 workers every 100 ms is ~1.6 ms of one core per
/// 100 ms, and CPU-bound work runs with only a few workers. A worker finds its thread id once, at
/// start (read_symlink of /proc/thread-self). Where /proc is missing (not Linux) every read fails,
/// the shares stay 0 (unknown) and the controller falls back on durations alone.
namespace ax::detail {

/// The calling thread's kernel thread id (from /proc/thread-self), or 0 where unavailable.
inline std::int32_t current_thread_tid() noexcept {
    std::error_code ec;
    const auto p = std::filesystem::read_symlink("/proc/thread-self", ec);
    if (ec)
        return 0;
    const std::string s = p.filename().string(); // "<pid>/task/<tid>"
    std::int32_t tid = 0;
    for (const char ch : s) {
        if (ch < '0' || ch > '9')
            return 0;
        tid = tid * 10 + (ch - '0');
    }
    return tid;
}

/// Reads thread `tid`'s time on a CPU and waiting on a runqueue, in ns, from
/// /proc/self/task/<tid>/schedstat. False (outputs untouched) when it cannot.
inline bool read_schedstat(std::int32_t tid, std::uint64_t& cpu_ns,
                           std::uint64_t& wait_ns) noexcept {
    if (tid <= 0)
        return false;
    char path[64];
    std::snprintf(path, sizeof path, "/proc/self/task/%d/schedstat", static_cast<int>(tid));
    std::FILE* f = std::fopen(path, "r");
    if (f == nullptr)
        return false;
    unsigned long long cpu = 0;
    unsigned long long wait = 0;
    const bool ok = std::fscanf(f, "%llu %llu", &cpu, &wait) == 2;
    std::fclose(f);
    if (ok) {
        cpu_ns = cpu;
        wait_ns = wait;
    }
    return ok;
}

/// A worker's previous sample (tick thread only; kept in the pool's per-worker slot).
struct SchedCursor {
    std::uint64_t cpu_ns = 0;
    std::uint64_t wait_ns = 0;
    std::int64_t busy_ns = 0;
    bool primed = false;
};

/// What the workers did over one sampling period, summed over workers: time on a CPU, time
/// waiting for one, and wall time inside task bodies.
struct SchedDelta {
    std::uint64_t cpu_ns = 0;
    std::uint64_t wait_ns = 0;
    std::int64_t busy_ns = 0;
    /// Cores of the machine idle over the period, on average; negative when unknown
    /// (ControllerInput::idle_cores).
    double idle_cores = -1.0;
};

/// The machine's spare CPU time between two reads of /proc/stat's first line (all CPUs, in
/// clock ticks): idle + iowait, plus the time of niced (background) processes when this process
/// itself is not niced — a worker that wakes takes their core at once, so for the controller it
/// is spare (a build running under `nice` beside the service left no idle time at all, and the
/// pool stopped short). Steal counts as busy (a hypervisor's steal is no core the workers could
/// use). One read is ~10 us here, once per sampling period (tick thread only). The counters tick
/// at USER_HZ (100 per second per CPU), so a 100 ms period on 2 cores resolves it to 5 %.
class IdleSampler {
  public:
    /// Average idle cores since the previous call; negative on the first call or when
    /// /proc/stat cannot be read.
    double sample() noexcept {
        unsigned long long idle = 0;
        unsigned long long total = 0;
        if (!read(idle, total))
            return -1.0;
        const bool primed = primed_;
        const unsigned long long di = idle >= idle_ ? idle - idle_ : 0;
        const unsigned long long dt = total >= total_ ? total - total_ : 0;
        idle_ = idle;
        total_ = total;
        primed_ = true;
        if (!primed || dt == 0)
            return -1.0;
        return static_cast<double>(cpus_) * static_cast<double>(di) / static_cast<double>(dt);
    }

  private:
    static bool read(unsigned long long& idle, unsigned long long& total) noexcept {
        std::FILE* f = std::fopen("/proc/stat", "r");
        if (f == nullptr)
            return false;
        unsigned long long v[8] = {};
        const int n = std::fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1],
                                  &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]);
        std::fclose(f);
        if (n < 4)
            return false;
        idle = v[3] + v[4] + (own_nice() <= 0 ? v[1] : 0);
        total = 0;
        for (const auto x : v)
            total += x;
        return true;
    }

    /// This process's nice value (field 19 of /proc/self/stat), read once; 0 when unknown.
    static int own_nice() noexcept {
        static const int nice = [] {
            std::FILE* f = std::fopen("/proc/self/stat", "r");
            if (f == nullptr)
                return 0;
            // pid (comm) state ...: comm may hold spaces and parentheses, so skip to the last ')'.
            char buf[1024];
            const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
            std::fclose(f);
            buf[n] = '\0';
            const char* p = std::strrchr(buf, ')');
            if (p == nullptr)
                return 0;
            int field = 2; // the ')' ends field 2
            long value = 0;
            for (++p; *p != '\0' && field < 19; ++p)
                if (*p == ' ') {
                    ++field;
                    if (field == 19)
                        value = std::strtol(p + 1, nullptr, 10);
                }
            return static_cast<int>(value);
        }();
        return nice;
    }

    // The aggregate line covers every online CPU, which hardware_concurrency() counts.
    const unsigned cpus_ = std::max(1u, std::thread::hardware_concurrency());
    unsigned long long idle_ = 0;
    unsigned long long total_ = 0;
    bool primed_ = false;
};

/// Folds one worker's new readings into `sum`, advancing its cursor. The first sample of a
/// worker only primes its cursor. Negative deltas (a counter read while it moved) count as 0.
///
/// The kernel's counters also run while the worker is idle: waking up to find no work, or
/// parking and unparking (200 idle workers woken at once wait in the runqueue for each other).
/// Summed raw, a sample of idle workers shows a runqueue share near 1 and the controller would
/// take bursty IO work for oversubscribed CPU work. So a worker's CPU and runqueue time count
/// only up to its busy time in the period, scaled together (its own CPU : runqueue ratio kept):
/// an idle worker adds nothing, a busy one its time in task bodies.
inline void accumulate(SchedCursor& c, std::uint64_t cpu_ns, std::uint64_t wait_ns,
                       std::int64_t busy_ns, SchedDelta& sum) noexcept {
    if (c.primed) {
        const std::uint64_t cpu = cpu_ns > c.cpu_ns ? cpu_ns - c.cpu_ns : 0;
        const std::uint64_t wait = wait_ns > c.wait_ns ? wait_ns - c.wait_ns : 0;
        const std::int64_t busy = std::max<std::int64_t>(0, busy_ns - c.busy_ns);
        const double scale = cpu + wait > static_cast<std::uint64_t>(busy)
                                 ? static_cast<double>(busy) / static_cast<double>(cpu + wait)
                                 : 1.0;
        sum.cpu_ns += static_cast<std::uint64_t>(static_cast<double>(cpu) * scale);
        sum.wait_ns += static_cast<std::uint64_t>(static_cast<double>(wait) * scale);
        sum.busy_ns += busy;
    }
    c = SchedCursor{cpu_ns, wait_ns, busy_ns, true};
}

/// The input computation the tick and the tests' simulator share: the shares of the workers'
/// busy wall time spent on a CPU and on a runqueue (the rest is blocked). The busy time is at
/// least CPU + runqueue time (the dispatch loop and idle spinning run outside task bodies).
/// Both 0 when nothing was measured, and when the workers were busy for less than
/// min_sample_busy_ns in all: such a sample is the wake-up of a few workers (a worker that
/// started its task microseconds ago has spent its busy time being scheduled, which reads as
/// CPU-bound work), not the work. A round right at a burst's first refusal sampled 50
/// pre-scaled workers that way, read a CPU share of 0.84 and capped the burst at 114 workers
/// instead of 200 (ax_thumbnails --workload bursty-forecast).
inline constexpr std::int64_t min_sample_busy_ns = 1'000'000;
inline void shares_from(const SchedDelta& d, double& cpu_share, double& runqueue_share) noexcept {
    if (d.busy_ns < min_sample_busy_ns) {
        cpu_share = runqueue_share = 0.0;
        return;
    }
    const double cpu = static_cast<double>(d.cpu_ns);
    const double wait = static_cast<double>(d.wait_ns);
    const double wall = std::max(static_cast<double>(d.busy_ns), cpu + wait);
    if (wall <= 0.0) {
        cpu_share = runqueue_share = 0.0;
        return;
    }
    // A measured share is never exactly 0 (0 and 0 mean "not measured"): workers that only
    // blocked report a CPU share of 1e-6.
    cpu_share = std::max(cpu / wall, 1e-6);
    runqueue_share = wait / wall;
}

/// Whether Clock's durations are real time, comparable with the kernel's thread times (a test
/// clock such as ax::ManualClock is not: then the shares stay unknown).
template <class Clock>
inline constexpr bool real_time_clock = std::is_same_v<Clock, std::chrono::steady_clock> ||
                                        std::is_same_v<Clock, std::chrono::system_clock>;

} // namespace ax::detail
