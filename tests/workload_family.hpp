// A generated family of workloads (issue 33): the controller is judged on workloads nobody tuned
// it for, not on a fixed list. One seed gives one workload — its task mix (blocking time 0 - 100
// ms, CPU time 0.1 - 20 ms, memory intensity 0 - 1, sleep before or after the CPU part), its
// arrival shape (all at once, periodic or irregular bursts, a steady stream) and its size — the
// same on every machine and compiler (mt19937_64's output is fixed by the standard, and the
// draws below use only its raw bits). The simulator (test_controller_sim) and the benchmark
// (ax_thumbnails --family) both run these workloads, each against fixed pools.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

namespace ax_family {

/// One task of a generated workload.
struct FamilyTask {
    double release_s = 0.0;   ///< when the producer offers it, from the start of the run
    double block_s = 0.0;     ///< time asleep (IO)
    double cpu_s = 0.0;       ///< CPU time when it runs alone
    double mem = 0.0;         ///< share of the CPU part that streams fresh memory (0..1)
    bool block_first = false; ///< sleep, then compute (else compute, then sleep)
};

/// A task class of a workload's mix.
struct TaskClass {
    double block_s = 0.0;
    double cpu_s = 0.0;
    double mem = 0.0;
    bool block_first = false;
    double weight = 1.0;
};

/// How the tasks arrive.
enum class Shape : std::uint8_t {
    at_once,   ///< every task at t = 0
    bursts,    ///< evenly spaced bursts
    irregular, ///< bursts at uneven gaps
    stream,    ///< one by one at a steady rate
};

inline const char* shape_name(Shape s) {
    switch (s) {
    case Shape::at_once:
        return "at-once";
    case Shape::bursts:
        return "bursts";
    case Shape::irregular:
        return "irregular";
    case Shape::stream:
        return "stream";
    }
    return "?";
}

/// One generated workload: its seed, mix and arrivals.
struct Workload {
    std::uint64_t seed = 0;
    std::vector<TaskClass> classes;
    Shape shape = Shape::at_once;
    std::uint32_t bursts = 1;
    std::vector<FamilyTask> tasks; ///< sorted by release_s

    [[nodiscard]] std::string name() const { return "gen-" + std::to_string(seed); }
    /// One line: the mix and the shape.
    [[nodiscard]] std::string describe() const {
        std::string s;
        for (const auto& c : classes) {
            char buf[160];
            if (c.block_s > 0)
                std::snprintf(buf, sizeof buf, "%s%.0f%% %.1f ms %s %.2f ms cpu (mem %.1f)",
                              s.empty() ? "" : " + ", 100.0 * c.weight, 1e3 * c.block_s,
                              c.block_first ? "block, then" : "block after", 1e3 * c.cpu_s, c.mem);
            else
                std::snprintf(buf, sizeof buf, "%s%.0f%% %.2f ms cpu (mem %.1f)",
                              s.empty() ? "" : " + ", 100.0 * c.weight, 1e3 * c.cpu_s, c.mem);
            s += buf;
        }
        char tail[96];
        std::snprintf(tail, sizeof tail, "; %zu tasks, %s%s", tasks.size(), shape_name(shape),
                      shape == Shape::bursts || shape == Shape::irregular
                          ? (" x" + std::to_string(bursts)).c_str()
                          : "");
        return s + tail;
    }
    /// Sum of the tasks' solo CPU time and of their whole work (CPU + blocked), seconds.
    [[nodiscard]] double cpu_total() const {
        double t = 0.0;
        for (const auto& k : tasks)
            t += k.cpu_s;
        return t;
    }
    [[nodiscard]] double work_total() const {
        double t = 0.0;
        for (const auto& k : tasks)
            t += k.cpu_s + k.block_s;
        return t;
    }
    /// A nominal lower bound on the run time of `threads` workers on `cores` cores (solo CPU
    /// times, no contention): the last release, the CPU bound and the worker bound from the
    /// start (used to skip pools that cannot be the best one).
    [[nodiscard]] double estimate_s(double threads, double cores) const {
        const double release = tasks.empty() ? 0.0 : tasks.back().release_s;
        const double c = cpu_total() / std::min(threads, cores);
        const double w = work_total() / threads;
        double longest = 0.0;
        for (const auto& k : tasks)
            longest = std::max(longest, k.cpu_s + k.block_s);
        return std::max({release + longest, c, w});
    }
};

namespace detail {

/// Uniform in [0, 1) from the generator's raw bits (std::uniform_real_distribution's results
/// differ between standard libraries).
inline double unit(std::mt19937_64& g) {
    return static_cast<double>(g() >> 11) * (1.0 / 9007199254740992.0);
}
inline double uniform(std::mt19937_64& g, double lo, double hi) {
    return lo + (hi - lo) * unit(g);
}
inline double log_uniform(std::mt19937_64& g, double lo, double hi) {
    return std::exp(uniform(g, std::log(lo), std::log(hi)));
}

} // namespace detail

/// The workload of `seed`, sized so that an ideal pool on `cores` cores with at most
/// `max_workers` workers would take about `target_s` (between min_tasks and max_tasks tasks).
inline Workload generate(std::uint64_t seed, double target_s = 0.6, double cores = 2.0,
                         double max_workers = 200.0, std::size_t min_tasks = 40,
                         std::size_t max_tasks = 4000) {
    std::mt19937_64 g(0x9E3779B97F4A7C15ull ^ (seed * 0xD1B54A32D192ED03ull));
    using detail::log_uniform;
    using detail::uniform;
    using detail::unit;
    Workload w;
    w.seed = seed;
    const int n_classes = unit(g) < 0.5 ? 1 : 2;
    double weight_left = 1.0;
    for (int i = 0; i < n_classes; ++i) {
        TaskClass c;
        // A fifth of the classes never block (CPU-bound); the rest block 1 - 100 ms.
        c.block_s = unit(g) < 0.2 ? 0.0 : 1e-3 * log_uniform(g, 1.0, 100.0);
        c.cpu_s = 1e-3 * log_uniform(g, 0.1, 20.0);
        const double m = unit(g);
        c.mem = m < 0.35 ? 0.0 : m < 0.55 ? 0.5 : 1.0;
        c.block_first = unit(g) < 0.6;
        c.weight = i + 1 == n_classes ? weight_left : uniform(g, 0.3, 0.7);
        weight_left -= c.weight;
        w.classes.push_back(c);
    }
    const double shape_draw = unit(g);
    w.shape = shape_draw < 0.35  ? Shape::at_once
              : shape_draw < 0.6 ? Shape::bursts
              : shape_draw < 0.8 ? Shape::irregular
                                 : Shape::stream;
    // Per task, what an ideal pool spends: the CPU over the cores, the whole task over
    // max_workers.
    double cpu_mean = 0.0;
    double work_mean = 0.0;
    for (const auto& c : w.classes) {
        cpu_mean += c.weight * c.cpu_s;
        work_mean += c.weight * (c.cpu_s + c.block_s);
    }
    const double per_task = std::max(cpu_mean / cores, work_mean / max_workers);
    // Bursty shapes spend about half their time in gaps; a stream runs at 0.5 - 0.9 of capacity.
    double busy_s = target_s;
    double load = 1.0;
    if (w.shape == Shape::bursts || w.shape == Shape::irregular) {
        w.bursts = 2 + static_cast<std::uint32_t>(unit(g) * 4.0); // 2 - 5
        busy_s = 0.5 * target_s;
    } else if (w.shape == Shape::stream) {
        load = uniform(g, 0.5, 0.9);
        busy_s = load * target_s;
    }
    const auto n = static_cast<std::size_t>(std::clamp(
        busy_s / per_task, static_cast<double>(min_tasks), static_cast<double>(max_tasks)));
    const std::uint32_t bursts = std::min<std::uint32_t>(w.bursts, static_cast<std::uint32_t>(n));
    w.bursts = bursts;
    const std::size_t per_burst = (n + bursts - 1) / bursts;
    // Gaps between burst starts: the burst's own ideal time, x 1.0 - 3.0 (irregular: each gap
    // drawn on its own, 0.5 - 4.0).
    const double burst_s = static_cast<double>(per_burst) * per_task;
    const double period = burst_s * uniform(g, 1.0, 3.0);
    std::vector<double> starts(bursts, 0.0);
    for (std::uint32_t b = 1; b < bursts; ++b)
        starts[b] =
            starts[b - 1] + (w.shape == Shape::irregular ? burst_s * uniform(g, 0.5, 4.0) : period);
    const double rate = w.shape == Shape::stream ? 1.0 / (per_task / load) : 0.0;
    for (std::size_t i = 0; i < n; ++i) {
        // The class, by weight; each task's parts vary by +-25 % (identical tasks move in
        // lockstep, which no real service's do).
        double pick = unit(g);
        std::size_t ci = 0;
        while (ci + 1 < w.classes.size() && pick >= w.classes[ci].weight) {
            pick -= w.classes[ci].weight;
            ++ci;
        }
        const TaskClass& c = w.classes[ci];
        FamilyTask t;
        t.block_s = c.block_s * uniform(g, 0.75, 1.25);
        t.cpu_s = c.cpu_s * uniform(g, 0.75, 1.25);
        t.mem = c.mem;
        t.block_first = c.block_first;
        if (w.shape == Shape::stream)
            t.release_s = static_cast<double>(i) / rate;
        else if (w.shape != Shape::at_once)
            t.release_s = starts[std::min<std::size_t>(i / per_burst, bursts - 1)];
        w.tasks.push_back(t);
    }
    return w;
}

/// The family: seeds first_seed .. first_seed + count - 1.
inline std::vector<Workload> family(std::size_t count, std::uint64_t first_seed = 1,
                                    double target_s = 0.6, double cores = 2.0) {
    std::vector<Workload> v;
    for (std::size_t i = 0; i < count; ++i)
        v.push_back(generate(first_seed + i, target_s, cores));
    return v;
}

} // namespace ax_family
