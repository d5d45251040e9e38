// ax benchmarks — ax_thumbnails: the seed's §4.5 experiment (one round of 20k "thumbnail" tasks of
// ~80 ms) run against fixed thread pools and ax::Scheduler, plus CPU-bound, mixed and bursty
// variants. Each strategy runs in a fresh child process (fork + exec of this binary with
// --child) so peak RSS and CPU time are per strategy. Prints a table per workload and writes
// <out>/<workload>.{md,csv,svg}. It measures and reports; it never asserts a target.
// SPDX-License-Identifier: MIT

#include "ax/scheduler.hpp"
#include "naive_pool.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <sys/resource.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

std::int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
        .count();
}

unsigned cores() {
    const unsigned n = std::thread::hardware_concurrency();
    return n == 0 ? 1 : n;
}

// ---------------------------------------------------------------------------------------------
// Workloads
// ---------------------------------------------------------------------------------------------

/// One workload, fully resolved (what a child process runs).
struct Spec {
    std::string name;         ///< sleep, cpu, mixed, bursty
    std::uint64_t tasks = 0;  ///< total tasks
    double sleep_ms = 0.0;    ///< simulated IO wait per task
    double cpu_ms = 0.0;      ///< box-filter work per task (target; the image is calibrated)
    std::uint32_t bursts = 1; ///< submission rounds
    double gap_ms = 0.0;      ///< time between the starts of two rounds
    int image_side = 0;       ///< side of the synthetic RGB image (cpu work only)

    [[nodiscard]] std::uint64_t burst_size() const { return (tasks + bursts - 1) / bursts; }
    [[nodiscard]] double task_s() const { return (sleep_ms + cpu_ms) / 1000.0; }
};

const std::vector<std::string> all_workloads = {"sleep", "cpu", "mixed", "bursty"};

Spec default_spec(const std::string& w, bool quick) {
    Spec s;
    s.name = w;
    if (w == "sleep") {
        s.tasks = quick ? 400 : 20000;
        s.sleep_ms = quick ? 10 : 80;
    } else if (w == "cpu") {
        s.tasks = quick ? 200 : 4000;
        s.cpu_ms = quick ? 2 : 3;
    } else if (w == "mixed") {
        s.tasks = quick ? 200 : 4000;
        s.sleep_ms = quick ? 5 : 20;
        s.cpu_ms = quick ? 1 : 3;
    } else if (w == "bursty") {
        s.bursts = quick ? 4 : 5;
        s.tasks = quick ? 400 : 10000;
        s.sleep_ms = quick ? 10 : 80;
        s.gap_ms = quick ? 250 : 2000;
    } else {
        throw std::invalid_argument("unknown workload '" + w +
                                    "' (sleep, cpu, mixed, bursty, all)");
    }
    return s;
}

std::string describe(const Spec& s) {
    std::string work;
    if (s.sleep_ms > 0 && s.cpu_ms > 0)
        work = fmt::format("{:g} ms sleep + ~{:g} ms box filter", s.sleep_ms, s.cpu_ms);
    else if (s.cpu_ms > 0)
        work = fmt::format("~{:g} ms box filter (CPU-bound)", s.cpu_ms);
    else
        work = fmt::format("{:g} ms sleep", s.sleep_ms);
    std::string shape = s.bursts <= 1 ? "one round"
                                      : fmt::format("{} bursts of {} every {:g} s", s.bursts,
                                                    s.burst_size(), s.gap_ms / 1000.0);
    std::string img = s.cpu_ms > 0
                          ? fmt::format(", image {}x{} RGB -> 1/4", s.image_side, s.image_side)
                          : std::string();
    return fmt::format("{} tasks x {}, {}{}", s.tasks, work, shape, img);
}

/// Shortest possible completion time when `cap_workers` tasks may run at once and `cap_cpu`
/// cores execute the CPU part: the fluid bound over every burst, plus one task duration.
double floor_seconds(const Spec& s, double cap_workers, double cap_cpu) {
    const double bs = static_cast<double>(s.burst_size());
    double best = 0.0;
    for (std::uint32_t k = 0; k < s.bursts; ++k) {
        const double release = k * s.gap_ms / 1000.0;
        const double remaining_tasks =
            std::min<double>(static_cast<double>(s.tasks), bs * s.bursts) - bs * k;
        if (remaining_tasks <= 0)
            break;
        const double by_workers = remaining_tasks * s.task_s() / cap_workers;
        const double by_cpu = remaining_tasks * (s.cpu_ms / 1000.0) / cap_cpu;
        best = std::max(best, release + std::max(by_workers, by_cpu));
    }
    return best + s.task_s();
}

/// The thumbnailer: a synthetic RGB image downscaled 4x with a box filter.
struct Image {
    int side = 0;
    std::vector<std::uint8_t> rgb;
};

Image make_image(int side) {
    Image img;
    img.side = side;
    img.rgb.resize(static_cast<std::size_t>(side) * static_cast<std::size_t>(side) * 3);
    std::uint32_t x = 2463534242u;
    for (auto& b : img.rgb) { // xorshift noise: no run-length shortcuts for the filter
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        b = static_cast<std::uint8_t>(x);
    }
    return img;
}

/// Box-filter downscale by 4 in each direction; returns a checksum of the thumbnail.
std::uint32_t thumbnail(const Image& img) {
    constexpr int f = 4;
    const int out_side = img.side / f;
    const auto stride = static_cast<std::size_t>(img.side) * 3;
    std::vector<std::uint8_t> out(static_cast<std::size_t>(out_side) * out_side * 3);
    std::vector<std::uint32_t> row(static_cast<std::size_t>(out_side) * 3);
    for (int oy = 0; oy < out_side; ++oy) {
        std::fill(row.begin(), row.end(), 0u);
        for (int dy = 0; dy < f; ++dy) {
            const std::uint8_t* in =
                img.rgb.data() + static_cast<std::size_t>(oy * f + dy) * stride;
            for (int ox = 0; ox < out_side; ++ox) {
                const std::uint8_t* p = in + static_cast<std::size_t>(ox) * f * 3;
                for (int c = 0; c < 3; ++c)
                    row[static_cast<std::size_t>(ox) * 3 + c] +=
                        p[c] + p[3 + c] + p[6 + c] + p[9 + c];
            }
        }
        for (std::size_t i = 0; i < row.size(); ++i)
            out[static_cast<std::size_t>(oy) * row.size() + i] =
                static_cast<std::uint8_t>((row[i] + f * f / 2) / (f * f));
    }
    std::uint32_t sum = 0;
    for (const auto b : out)
        sum = sum * 31 + b;
    return sum;
}

/// Picks the image side so that one thumbnail takes about `target_ms` on this machine.
int calibrate_side(double target_ms) {
    auto time_ms = [](int side) {
        const Image img = make_image(side);
        std::vector<double> t;
        volatile std::uint32_t sink = 0;
        for (int i = 0; i < 9; ++i) {
            const auto a = Clock::now();
            sink = sink + thumbnail(img);
            t.push_back(std::chrono::duration<double, std::milli>(Clock::now() - a).count());
        }
        std::sort(t.begin(), t.end());
        return t[t.size() / 2];
    };
    const int probe = 512;
    const double ms = std::max(time_ms(probe), 1e-3);
    int side = static_cast<int>(probe * std::sqrt(target_ms / ms));
    side = std::clamp(side / 4 * 4, 16, 8192);
    return side;
}

// ---------------------------------------------------------------------------------------------
// One strategy, run inside a child process
// ---------------------------------------------------------------------------------------------

struct Sample {
    double t_s = 0;
    std::uint64_t workers = 0;
    std::uint64_t queue_length = 0;
    std::uint64_t completed = 0;
};

struct Result {
    std::string strategy;
    bool ran = false;
    std::string note; // why it did not run
    double total_s = 0, avg_s = 0, p50_s = 0, p99_s = 0, avg_release_s = 0;
    std::uint64_t rejections = 0, pushbacks = 0, peak_workers = 0, threads_created = 0;
    std::uint64_t completed = 0;
    double cpu_pct = 0, rss_mib = 0;
    std::vector<Sample> samples;
};

/// State the tasks of one run share.
struct Shared {
    Spec spec;
    const Image* image = nullptr;
    std::int64_t t0 = 0;
    std::vector<std::int64_t> submit_ns; // first submit attempt
    std::vector<std::int64_t> end_ns;    // body finished (0: never ran)
    std::atomic<std::uint64_t> completed{0};
    std::atomic<std::uint32_t> sink{0};

    void run(std::uint64_t i) {
        if (spec.sleep_ms > 0)
            std::this_thread::sleep_for(
                std::chrono::nanoseconds(static_cast<std::int64_t>(spec.sleep_ms * 1e6)));
        if (spec.cpu_ms > 0)
            sink.fetch_add(thumbnail(*image), std::memory_order_relaxed);
        end_ns[i] = now_ns();
        completed.fetch_add(1, std::memory_order_acq_rel);
    }
};

double cpu_seconds() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    auto tv = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
    return tv(u.ru_utime) + tv(u.ru_stime);
}

double peak_rss_mib() {
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("VmHWM:", 0) == 0)
            return std::strtod(line.c_str() + 6, nullptr) / 1024.0;
    }
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return static_cast<double>(u.ru_maxrss) / 1024.0; // kB on Linux
}

struct Probe {
    std::uint64_t workers = 0;
    std::uint64_t queue_length = 0;
};

/// Drives one run: releases the bursts, lets `submit(i)` place task i (false: lost), samples
/// `probe()` every 100 ms, waits for every admitted task, and fills the timing part of `r`.
void drive(Shared& sh, Result& r, const std::function<bool(std::uint64_t)>& submit,
           const std::function<Probe()>& probe) {
    const Spec& s = sh.spec;
    const auto n = s.tasks;
    const auto bs = s.burst_size();
    std::atomic<bool> stop{false};
    std::atomic<std::uint64_t> lost{0};
    const double cpu0 = cpu_seconds();
    sh.t0 = now_ns();
    const auto t0 = Clock::now();

    std::thread sampler([&] {
        for (std::uint64_t k = 0;; ++k) {
            std::this_thread::sleep_until(t0 + k * 100ms);
            const Probe p = probe();
            r.samples.push_back({static_cast<double>(k) * 0.1, p.workers, p.queue_length,
                                 sh.completed.load(std::memory_order_acquire)});
            if (stop.load(std::memory_order_acquire))
                break;
        }
    });

    for (std::uint64_t i = 0; i < n; ++i) {
        if (i % bs == 0 && i > 0) {
            const auto release =
                t0 + std::chrono::nanoseconds(static_cast<std::int64_t>((i / bs) * s.gap_ms * 1e6));
            std::this_thread::sleep_until(release);
        }
        sh.submit_ns[i] = now_ns();
        if (!submit(i))
            lost.fetch_add(1, std::memory_order_relaxed);
    }
    while (sh.completed.load(std::memory_order_acquire) + lost.load() < n)
        std::this_thread::sleep_for(1ms);
    const double cpu1 = cpu_seconds();
    const auto t_end = Clock::now();
    stop.store(true, std::memory_order_release);
    sampler.join();

    std::int64_t last = sh.t0;
    std::vector<double> lat;
    lat.reserve(n);
    double sum_release = 0;
    for (std::uint64_t i = 0; i < n; ++i) {
        if (sh.end_ns[i] == 0)
            continue;
        last = std::max(last, sh.end_ns[i]);
        lat.push_back(static_cast<double>(sh.end_ns[i] - sh.submit_ns[i]) / 1e9);
        const double release_ns = sh.t0 + static_cast<double>(i / bs) * s.gap_ms * 1e6;
        sum_release += (static_cast<double>(sh.end_ns[i]) - release_ns) / 1e9;
    }
    std::sort(lat.begin(), lat.end());
    auto pct = [&](double q) {
        if (lat.empty())
            return 0.0;
        const auto idx =
            static_cast<std::size_t>(std::ceil(q * static_cast<double>(lat.size()))) - 1;
        return lat[std::min(idx, lat.size() - 1)];
    };
    r.ran = true;
    r.completed = lat.size();
    r.rejections = lost.load();
    r.total_s = static_cast<double>(last - sh.t0) / 1e9;
    double sum = 0;
    for (const double v : lat)
        sum += v;
    r.avg_s = lat.empty() ? 0 : sum / static_cast<double>(lat.size());
    r.avg_release_s = lat.empty() ? 0 : sum_release / static_cast<double>(lat.size());
    r.p50_s = pct(0.50);
    r.p99_s = pct(0.99);
    const double wall = std::chrono::duration<double>(t_end - t0).count();
    r.cpu_pct = wall > 0 ? 100.0 * (cpu1 - cpu0) / wall / cores() : 0;
}

/// Parses "fixed32", "fixed128", "fixedhw" (any "fixed<N>") into a thread count; 0 for ax.
std::optional<std::size_t> naive_threads(const std::string& strategy) {
    if (strategy == "ax")
        return 0;
    if (strategy.rfind("fixed", 0) != 0)
        return std::nullopt;
    const std::string rest = strategy.substr(5);
    if (rest == "hw")
        return cores();
    std::size_t n = 0;
    const auto [p, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), n);
    if (ec != std::errc() || p != rest.data() + rest.size() || n == 0 || n > 100000)
        return std::nullopt;
    return n;
}

constexpr auto submit_deadline = std::chrono::seconds(60);

Result run_strategy(const std::string& strategy, const Spec& spec) {
    Image image;
    if (spec.cpu_ms > 0)
        image = make_image(spec.image_side);
    Shared sh;
    sh.spec = spec;
    sh.image = &image;
    sh.submit_ns.assign(spec.tasks, 0);
    sh.end_ns.assign(spec.tasks, 0);
    Result r;
    r.strategy = strategy;

    const auto threads = naive_threads(strategy);
    if (!threads)
        throw std::invalid_argument("unknown strategy '" + strategy + "'");
    if (*threads == 0) {
        ax::Scheduler<> sched; // the default Config: 4..200 workers, queue capacity 150
        std::uint64_t pushbacks = 0;
        auto submit = [&](std::uint64_t i) {
            const auto first = Clock::now();
            for (;;) {
                auto h = sched.submit([&sh, i] { sh.run(i); });
                if (h)
                    return true; // the handle is dropped: fire and forget
                const ax::SubmitError& e = h.error();
                if (!e.retryable() || Clock::now() - first > submit_deadline)
                    return false;
                ++pushbacks; // obey the hint, then resubmit the same task
                std::this_thread::sleep_for(e.retry_after);
            }
        };
        auto probe = [&] {
            const auto m = sched.metrics();
            return Probe{m.workers.current, m.queue_length_total};
        };
        drive(sh, r, submit, probe);
        const auto m = sched.metrics();
        r.pushbacks = pushbacks;
        r.peak_workers = m.workers.peak;
        r.threads_created = m.workers.created;
        sched.shutdown();
    } else {
        ax_bench::NaivePool pool(*threads);
        auto submit = [&](std::uint64_t i) {
            pool.submit([&sh, i] { sh.run(i); });
            return true;
        };
        auto probe = [&] { return Probe{pool.threads(), pool.queue_length()}; };
        drive(sh, r, submit, probe);
        r.peak_workers = pool.threads();
        r.threads_created = pool.threads();
    }
    r.rss_mib = peak_rss_mib();
    return r;
}

// ---------------------------------------------------------------------------------------------
// Parent <-> child protocol: "key=value ..." lines on a pipe
// ---------------------------------------------------------------------------------------------

std::string serialize(const Result& r) {
    std::string s = fmt::format(
        "result strategy={} total_s={:.6f} avg_s={:.6f} p50_s={:.6f} p99_s={:.6f} "
        "avg_release_s={:.6f} rejections={} pushbacks={} peak_workers={} threads_created={} "
        "completed={} cpu_pct={:.3f} rss_mib={:.3f}\n",
        r.strategy, r.total_s, r.avg_s, r.p50_s, r.p99_s, r.avg_release_s, r.rejections,
        r.pushbacks, r.peak_workers, r.threads_created, r.completed, r.cpu_pct, r.rss_mib);
    for (const auto& x : r.samples)
        s += fmt::format("sample {:.1f} {} {} {}\n", x.t_s, x.workers, x.queue_length, x.completed);
    return s;
}

Result deserialize(const std::string& text) {
    Result r;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
        std::istringstream ls(line);
        std::string kind;
        ls >> kind;
        if (kind == "sample") {
            Sample x;
            ls >> x.t_s >> x.workers >> x.queue_length >> x.completed;
            r.samples.push_back(x);
        } else if (kind == "result") {
            std::map<std::string, std::string> kv;
            std::string tok;
            while (ls >> tok) {
                const auto eq = tok.find('=');
                if (eq != std::string::npos)
                    kv[tok.substr(0, eq)] = tok.substr(eq + 1);
            }
            auto d = [&](const char* k) { return std::strtod(kv[k].c_str(), nullptr); };
            auto u = [&](const char* k) { return std::strtoull(kv[k].c_str(), nullptr, 10); };
            r.strategy = kv["strategy"];
            r.total_s = d("total_s");
            r.avg_s = d("avg_s");
            r.p50_s = d("p50_s");
            r.p99_s = d("p99_s");
            r.avg_release_s = d("avg_release_s");
            r.rejections = u("rejections");
            r.pushbacks = u("pushbacks");
            r.peak_workers = u("peak_workers");
            r.threads_created = u("threads_created");
            r.completed = u("completed");
            r.cpu_pct = d("cpu_pct");
            r.rss_mib = d("rss_mib");
            r.ran = true;
        }
    }
    return r;
}

bool write_all(int fd, const std::string& s) {
    std::size_t off = 0;
    while (off < s.size()) {
        const ssize_t w = ::write(fd, s.data() + off, s.size() - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        off += static_cast<std::size_t>(w);
    }
    return true;
}

/// Runs `strategy` on `spec` in a fresh process (this binary with --child).
Result run_in_child(const std::string& self, const std::string& strategy, const Spec& spec) {
    int fds[2];
    if (::pipe(fds) != 0)
        throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
    std::vector<std::string> args = {
        self,
        "--child",
        strategy,
        "--workload",
        spec.name,
        "--tasks",
        std::to_string(spec.tasks),
        "--sleep-ms",
        fmt::format("{}", spec.sleep_ms),
        "--cpu-ms",
        fmt::format("{}", spec.cpu_ms),
        "--bursts",
        std::to_string(spec.bursts),
        "--burst-gap-ms",
        fmt::format("{}", spec.gap_ms),
        "--image-side",
        std::to_string(spec.image_side),
        "--result-fd",
        std::to_string(fds[1]),
    };
    std::fflush(stdout);
    std::fflush(stderr);
    const pid_t pid = ::fork();
    if (pid < 0)
        throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
    if (pid == 0) {
        ::close(fds[0]);
        std::vector<char*> argv;
        for (auto& a : args)
            argv.push_back(a.data());
        argv.push_back(nullptr);
        ::execv("/proc/self/exe", argv.data());
        ::execv(self.c_str(), argv.data());
        std::fprintf(stderr, "ax_thumbnails: exec failed: %s\n", std::strerror(errno));
        std::_Exit(127);
    }
    ::close(fds[1]);
    std::string text;
    char buf[65536];
    for (;;) {
        const ssize_t n = ::read(fds[0], buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        text.append(buf, static_cast<std::size_t>(n));
    }
    ::close(fds[0]);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    Result r = deserialize(text);
    r.strategy = strategy;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !r.ran) {
        r.ran = false;
        r.note = WIFEXITED(status) ? fmt::format("child exited with status {}", WEXITSTATUS(status))
                                   : "child killed by a signal";
    }
    return r;
}

// ---------------------------------------------------------------------------------------------
// Reporting: console table, markdown, CSV, SVG
// ---------------------------------------------------------------------------------------------

struct Column {
    const char* title;
    int width;
};
const Column columns[] = {
    {"strategy", 9},  {"total s", 8},       {"avg latency s", 13},
    {"p50 s", 7},     {"p99 s", 7},         {"rejections", 10},
    {"pushbacks", 9}, {"peak workers", 12}, {"threads created", 15},
    {"avg CPU %", 9}, {"peak RSS MiB", 12}, {"avg from release s", 18},
};

std::vector<std::string> cells(const Result& r) {
    return {r.strategy,
            fmt::format("{:.2f}", r.total_s),
            fmt::format("{:.2f}", r.avg_s),
            fmt::format("{:.2f}", r.p50_s),
            fmt::format("{:.2f}", r.p99_s),
            fmt::format("{}", r.rejections),
            fmt::format("{}", r.pushbacks),
            fmt::format("{}", r.peak_workers),
            fmt::format("{}", r.threads_created),
            fmt::format("{:.1f}", r.cpu_pct),
            fmt::format("{:.1f}", r.rss_mib),
            fmt::format("{:.2f}", r.avg_release_s)};
}

/// The seed's published §4.5 figures (8-core server, 20k x ~80 ms, one round).
struct SeedRow {
    const char* strategy;
    double total_s, avg_s;
    int rejections, peak;
    int cpu_pct;
};
const SeedRow seed_rows[] = {
    {"fixed-32", 52.4, 26.8, 0, 32, 61},
    {"fixed-128", 19.8, 9.7, 0, 128, 88},
    {"ax", 12.6, 6.4, 0, 84, 76},
};

struct Verdict {
    std::string what;
    std::optional<bool> met; // nullopt: cannot be judged (strategy missing)
    std::string figures;
};

std::vector<Verdict> verdicts(const Spec& spec, const std::vector<Result>& results) {
    const double floor = floor_seconds(spec, 200.0, cores());
    const Result* ax = nullptr;
    const Result* f128 = nullptr;
    for (const auto& r : results) {
        if (!r.ran)
            continue;
        if (r.strategy == "ax")
            ax = &r;
        if (r.strategy == "fixed128")
            f128 = &r;
    }
    std::vector<Verdict> v;
    if (ax == nullptr) {
        v.push_back({"ax total <= 1.05 x floor", std::nullopt, "ax did not run"});
        v.push_back({"ax total < fixed128 total", std::nullopt, "ax did not run"});
        v.push_back({"ax rejections = 0", std::nullopt, "ax did not run"});
        return v;
    }
    v.push_back({"ax total <= 1.05 x floor", ax->total_s <= 1.05 * floor,
                 fmt::format("{:.2f} s vs {:.2f} s (floor {:.2f} s, ax = {:.2f} x floor)",
                             ax->total_s, 1.05 * floor, floor, ax->total_s / floor)});
    if (f128 != nullptr)
        v.push_back({"ax total < fixed128 total", ax->total_s < f128->total_s,
                     fmt::format("{:.2f} s vs {:.2f} s", ax->total_s, f128->total_s)});
    else
        v.push_back({"ax total < fixed128 total", std::nullopt, "fixed128 did not run"});
    v.push_back({"ax rejections = 0", ax->rejections == 0,
                 fmt::format("{} rejections, {} pushbacks obeyed", ax->rejections, ax->pushbacks)});
    return v;
}

std::string verdict_word(const Verdict& v) {
    return !v.met ? "N/A" : (*v.met ? "MET" : "MISSED");
}

void print_report(const Spec& spec, const std::vector<Result>& results) {
    const double floor = floor_seconds(spec, 200.0, cores());
    fmt::print("\n== workload {}: {} ({} cores) ==\n", spec.name, describe(spec), cores());
    std::string header;
    for (const auto& c : columns)
        header += &c == columns ? fmt::format("{:<{}}  ", c.title, c.width)
                                : fmt::format("{:>{}}  ", c.title, c.width);
    fmt::print("{}\n", header.substr(0, header.find_last_not_of(' ') + 1));
    for (const auto& r : results) {
        if (!r.ran)
            continue;
        const auto cs = cells(r);
        std::string line;
        for (std::size_t i = 0; i < cs.size(); ++i)
            line += i == 0 ? fmt::format("{:<{}}  ", cs[i], columns[i].width)
                           : fmt::format("{:>{}}  ", cs[i], columns[i].width);
        fmt::print("{}\n", line.substr(0, line.find_last_not_of(' ') + 1));
    }
    for (const auto& r : results)
        if (!r.ran)
            fmt::print("  ({} not run: {})\n", r.strategy, r.note);
    if (spec.name == "sleep") {
        fmt::print("seed §4.5 (8-core server, 20000 x ~80 ms):\n");
        for (const auto& s : seed_rows)
            fmt::print("  {:<9}  total {:>5.1f} s  avg latency {:>5.1f} s  rejections {}  peak "
                       "workers {:>3}  CPU {}%\n",
                       s.strategy, s.total_s, s.avg_s, s.rejections, s.peak, s.cpu_pct);
    }
    fmt::print("physical floor: {:.2f} s ({})\n", floor,
               spec.cpu_ms > 0 ? fmt::format("max(tasks x duration / 200 workers, tasks x cpu / {} "
                                             "cores) + one duration, per burst",
                                             cores())
                               : std::string("tasks x duration / 200 workers + one duration, per "
                                             "burst"));
    for (const auto& v : verdicts(spec, results))
        fmt::print("target {:<26} {:<6} {}\n", v.what + ":", verdict_word(v), v.figures);
}

void write_markdown(const std::filesystem::path& file, const Spec& spec,
                    const std::vector<Result>& results) {
    std::ofstream out(file);
    out << fmt::format("### Workload `{}`: {} ({} cores)\n\n", spec.name, describe(spec), cores());
    std::string h = "|", sep = "|";
    for (const auto& c : columns) {
        h += fmt::format(" {} |", c.title);
        sep += std::string_view(c.title) == "strategy" ? " --- |" : " ---: |";
    }
    out << h << "\n" << sep << "\n";
    for (const auto& r : results) {
        if (!r.ran)
            continue;
        std::string row = "|";
        for (const auto& c : cells(r))
            row += " " + c + " |";
        out << row << "\n";
    }
    out << "\n";
    for (const auto& r : results)
        if (!r.ran)
            out << fmt::format("- `{}` not run: {}\n", r.strategy, r.note);
    if (spec.name == "sleep") {
        out << "Seed §4.5 (8-core server, 20000 x ~80 ms):\n\n"
            << "| strategy | total s | avg latency s | rejections | peak workers | avg CPU % |\n"
            << "| --- | ---: | ---: | ---: | ---: | ---: |\n";
        for (const auto& s : seed_rows)
            out << fmt::format("| {} (seed) | {:.1f} | {:.1f} | {} | {} | {} |\n", s.strategy,
                               s.total_s, s.avg_s, s.rejections, s.peak, s.cpu_pct);
        out << "\n";
    }
    out << fmt::format("Physical floor: {:.2f} s.\n\n", floor_seconds(spec, 200.0, cores()));
    for (const auto& v : verdicts(spec, results))
        out << fmt::format("- {}: **{}** — {}\n", v.what, verdict_word(v), v.figures);
}

void write_csv(const std::filesystem::path& file, const std::vector<Result>& results) {
    std::ofstream out(file);
    out << "t_s,strategy,workers,queue_length,completed\n";
    for (const auto& r : results)
        for (const auto& s : r.samples)
            out << fmt::format("{:.1f},{},{},{},{}\n", s.t_s, r.strategy, s.workers, s.queue_length,
                               s.completed);
}

double nice_step(double span, int ticks) {
    const double raw = span / std::max(ticks, 1);
    const double mag = std::pow(10.0, std::floor(std::log10(std::max(raw, 1e-9))));
    for (const double m : {1.0, 2.0, 5.0, 10.0})
        if (m * mag >= raw)
            return m * mag;
    return 10 * mag;
}

std::string color_of(const std::string& strategy, std::size_t i) {
    if (strategy == "ax")
        return "#d62728";
    if (strategy == "fixed32")
        return "#1f77b4";
    if (strategy == "fixed128")
        return "#ff7f0e";
    if (strategy == "fixedhw")
        return "#2ca02c";
    static const char* palette[] = {"#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22"};
    return palette[i % 5];
}

std::string fmt_num(double v) {
    if (v >= 1000 && std::fmod(v, 1000) == 0)
        return fmt::format("{:g}k", v / 1000);
    return fmt::format("{:g}", v);
}

/// Workers (linear) and queue length (log scale: it spans 0..150 for ax and 0..20000 for fixed
/// pools) over time, one line per strategy.
void write_svg(const std::filesystem::path& file, const Spec& spec,
               const std::vector<Result>& results) {
    const double W = 960, H = 640, left = 80, right = 170, top = 50, panel_h = 230, gap = 70;
    const double plot_w = W - left - right;
    double t_max = 0.1, w_max = 1, q_max = 1;
    for (const auto& r : results)
        for (const auto& s : r.samples) {
            t_max = std::max(t_max, s.t_s);
            w_max = std::max(w_max, static_cast<double>(s.workers));
            q_max = std::max(q_max, static_cast<double>(s.queue_length));
        }
    const double t_step = nice_step(t_max, 8);
    t_max = std::ceil(t_max / t_step) * t_step;
    const double w_step = nice_step(w_max, 5);
    w_max = std::ceil(w_max / w_step) * w_step;
    const double q_decades = std::max(1.0, std::ceil(std::log10(q_max + 1)));

    auto x_of = [&](double t) { return left + plot_w * t / t_max; };
    std::string svg = fmt::format(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} "
        "{1}\" font-family=\"sans-serif\" font-size=\"12\">\n"
        "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
        "<text x=\"{2}\" y=\"24\" font-size=\"15\" font-weight=\"bold\">ax_thumbnails — workload "
        "{3}: {4}</text>\n",
        W, H, left, spec.name, describe(spec));

    struct Panel {
        const char* title;
        const char* y_label;
        bool log;
    };
    const Panel panels[] = {{"Workers over time", "workers", false},
                            {"Queue length over time (log scale)", "queue length", true}};
    for (int p = 0; p < 2; ++p) {
        const double y0 = top + p * (panel_h + gap); // top of the plot area
        const double y1 = y0 + panel_h;              // bottom (x axis)
        auto y_of = [&](double v) {
            if (panels[p].log)
                return y1 - panel_h * std::log10(v + 1) / q_decades;
            return y1 - panel_h * v / w_max;
        };
        svg += fmt::format("<text x=\"{}\" y=\"{}\" font-weight=\"bold\">{}</text>\n", left, y0 - 8,
                           panels[p].title);
        // grid and y ticks
        std::vector<std::pair<double, std::string>> yt;
        if (panels[p].log) {
            for (int d = 0; d <= static_cast<int>(q_decades); ++d) {
                const double v = std::pow(10.0, d);
                yt.emplace_back(v, fmt_num(v));
            }
            yt.insert(yt.begin(), {0.0, "0"});
        } else {
            for (double v = 0; v <= w_max + 1e-9; v += w_step)
                yt.emplace_back(v, fmt_num(v));
        }
        for (const auto& [v, label] : yt) {
            const double y = y_of(v);
            if (y < y0 - 0.5)
                continue;
            svg += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" "
                               "stroke=\"#ddd\"/>\n",
                               left, y, left + plot_w, y);
            svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n",
                               left - 6, y + 4, label);
        }
        for (double t = 0; t <= t_max + 1e-9; t += t_step) {
            const double x = x_of(t);
            svg += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" "
                               "stroke=\"#eee\"/>\n",
                               x, y0, x, y1);
            svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n",
                               x, y1 + 16, fmt_num(t));
        }
        // axes and labels
        svg += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"black\"/>\n",
                           left, y0, y1);
        svg += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"black\"/>\n",
                           left, y1, left + plot_w);
        svg +=
            fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">time (s)</text>\n",
                        left + plot_w / 2, y1 + 34);
        svg += fmt::format("<text x=\"{0:.1f}\" y=\"{1:.1f}\" text-anchor=\"middle\" "
                           "transform=\"rotate(-90 {0:.1f} {1:.1f})\">{2}</text>\n",
                           left - 52, y0 + panel_h / 2, panels[p].y_label);
        // one line per strategy
        std::size_t i = 0;
        for (const auto& r : results) {
            if (r.samples.empty())
                continue;
            std::string pts;
            for (const auto& s : r.samples) {
                const double v =
                    p == 0 ? static_cast<double>(s.workers) : static_cast<double>(s.queue_length);
                pts += fmt::format("{:.1f},{:.1f} ", x_of(s.t_s), y_of(v));
            }
            svg += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.8\" "
                               "points=\"{}\"><title>{}</title></polyline>\n",
                               color_of(r.strategy, i++), pts, r.strategy);
        }
    }
    // legend
    const double lx = left + plot_w + 20;
    svg +=
        fmt::format("<text x=\"{}\" y=\"{}\" font-weight=\"bold\">strategy</text>\n", lx, top + 4);
    std::size_t i = 0;
    double ly = top + 24;
    for (const auto& r : results) {
        if (r.samples.empty())
            continue;
        svg += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"{3}\" "
                           "stroke-width=\"3\"/>\n",
                           lx, ly - 4, lx + 24, color_of(r.strategy, i++));
        svg += fmt::format("<text x=\"{}\" y=\"{}\">{}</text>\n", lx + 30, ly, r.strategy);
        ly += 20;
    }
    svg += "</svg>\n";
    std::ofstream(file) << svg;
}

// ---------------------------------------------------------------------------------------------
// Command line
// ---------------------------------------------------------------------------------------------

struct Options {
    std::string workload = "sleep";
    std::optional<std::uint64_t> tasks;
    std::optional<double> duration_ms, cpu_ms, gap_ms;
    std::optional<double> sleep_ms; // child only: the resolved sleep part
    std::optional<std::uint32_t> bursts;
    std::vector<std::string> strategies;
    bool strategies_given = false;
    std::string out = "bench-results";
    bool quick = false;
    double max_estimate_s = 300;
    // child only
    std::string child;
    int result_fd = -1;
    int image_side = 0;
};

constexpr const char* usage = R"(usage: ax_thumbnails [options]

Runs N simulated thumbnail tasks through several scheduling strategies, one child process per
strategy, and prints a table per workload. Writes <out>/<workload>.md, .csv and .svg.

  --workload W        sleep (default; the seed's 20000 x 80 ms), cpu, mixed, bursty, or all
  --tasks N           number of tasks (defaults: sleep 20000, cpu 4000, mixed 4000, bursty 10000)
  --duration-ms D     sleep per task for sleep/mixed/bursty (80/20/80); CPU target for cpu (3)
  --cpu-ms C          box-filter time per task for cpu and mixed (3)
  --bursts B          bursty: number of bursts (5)
  --burst-gap-ms G    bursty: time between bursts (2000)
  --strategies LIST   comma list of fixed32, fixed128, fixedhw, fixed<N>, ax
                      (default: fixed32,fixed128,fixedhw,ax)
  --max-estimate-s S  skip a fixed pool whose lower-bound time exceeds S seconds unless it was
                      named in --strategies (default 300; fixedhw on the sleep workload needs
                      tasks x duration / cores, 800 s on 2 cores)
  --out DIR           output folder (default bench-results)
  --quick             small and fast: 400 x 10 ms (and scaled-down cpu/mixed/bursty)
  --help              this text

Targets (reported as MET / MISSED, never asserted): ax total <= 1.05 x physical floor
(tasks x duration / 200 + one duration), ax total < fixed128 total, ax rejections = 0.
)";

Options parse(int argc, char** argv) {
    Options o;
    std::vector<std::string> args(argv + 1, argv + argc);
    for (std::size_t i = 0; i < args.size(); ++i) {
        std::string a = args[i];
        std::string value;
        bool has_value = false;
        if (const auto eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos) {
            value = a.substr(eq + 1);
            a = a.substr(0, eq);
            has_value = true;
        }
        auto next = [&]() -> std::string {
            if (has_value)
                return value;
            if (i + 1 >= args.size())
                throw std::invalid_argument(a + " needs a value");
            return args[++i];
        };
        auto num = [&](const std::string& v) {
            char* end = nullptr;
            const double d = std::strtod(v.c_str(), &end);
            if (end == v.c_str() || *end != '\0' || !(d >= 0))
                throw std::invalid_argument(a + ": '" + v + "' is not a non-negative number");
            return d;
        };
        if (a == "--help" || a == "-h") {
            std::fputs(usage, stdout);
            std::exit(0);
        } else if (a == "--workload") {
            o.workload = next();
        } else if (a == "--tasks") {
            o.tasks = static_cast<std::uint64_t>(num(next()));
        } else if (a == "--duration-ms") {
            o.duration_ms = num(next());
        } else if (a == "--sleep-ms") {
            o.sleep_ms = num(next());
        } else if (a == "--cpu-ms") {
            o.cpu_ms = num(next());
        } else if (a == "--bursts") {
            o.bursts = static_cast<std::uint32_t>(num(next()));
        } else if (a == "--burst-gap-ms") {
            o.gap_ms = num(next());
        } else if (a == "--strategies") {
            o.strategies.clear();
            std::istringstream in(next());
            for (std::string s; std::getline(in, s, ',');)
                if (!s.empty())
                    o.strategies.push_back(s);
            o.strategies_given = true;
        } else if (a == "--max-estimate-s") {
            o.max_estimate_s = num(next());
        } else if (a == "--out") {
            o.out = next();
        } else if (a == "--quick") {
            o.quick = true;
        } else if (a == "--child") {
            o.child = next();
        } else if (a == "--result-fd") {
            o.result_fd = static_cast<int>(num(next()));
        } else if (a == "--image-side") {
            o.image_side = static_cast<int>(num(next()));
        } else {
            throw std::invalid_argument("unknown option '" + args[i] + "' (see --help)");
        }
    }
    if (o.strategies.empty())
        o.strategies = {"fixed32", "fixed128", "fixedhw", "ax"};
    for (const auto& s : o.strategies)
        if (!naive_threads(s))
            throw std::invalid_argument("unknown strategy '" + s +
                                        "' (fixed32, fixed128, fixedhw, fixed<N>, ax)");
    if (o.tasks && *o.tasks == 0)
        throw std::invalid_argument("--tasks must be at least 1");
    if (o.bursts && *o.bursts == 0)
        throw std::invalid_argument("--bursts must be at least 1");
    return o;
}

/// The workload as this invocation resolves it (defaults, then --quick, then explicit flags).
Spec resolve(const std::string& workload, const Options& o) {
    Spec s = default_spec(workload, o.quick);
    if (o.tasks)
        s.tasks = *o.tasks;
    if (o.bursts && workload == "bursty")
        s.bursts = *o.bursts;
    if (o.gap_ms && workload == "bursty")
        s.gap_ms = *o.gap_ms;
    if (o.duration_ms)
        (workload == "cpu" ? s.cpu_ms : s.sleep_ms) = *o.duration_ms;
    if (o.cpu_ms && (workload == "cpu" || workload == "mixed"))
        s.cpu_ms = *o.cpu_ms;
    if (!o.child.empty()) { // the parent passes the resolved values verbatim
        s.sleep_ms = o.sleep_ms.value_or(0.0);
        s.cpu_ms = o.cpu_ms.value_or(0.0);
    }
    s.bursts = static_cast<std::uint32_t>(std::min<std::uint64_t>(s.bursts, s.tasks));
    s.image_side = o.image_side;
    return s;
}

int child_main(const Options& o) {
    const Spec spec = resolve(o.workload, o);
    const Result r = run_strategy(o.child, spec);
    const std::string text = serialize(r);
    if (o.result_fd >= 0) {
        if (!write_all(o.result_fd, text))
            return 3;
        ::close(o.result_fd);
    } else {
        std::fputs(text.c_str(), stdout);
    }
    return 0;
}

int parent_main(const Options& o, const std::string& self) {
    std::vector<std::string> workloads;
    if (o.workload == "all")
        workloads = all_workloads;
    else
        workloads = {o.workload};
    for (const auto& w : workloads)
        (void)default_spec(w, o.quick); // validates the name

    const std::filesystem::path out = o.out;
    std::filesystem::create_directories(out);
    std::map<double, int> sides; // cpu target ms -> calibrated side

    for (const auto& w : workloads) {
        Spec spec = resolve(w, o);
        if (spec.cpu_ms > 0) {
            if (!sides.count(spec.cpu_ms))
                sides[spec.cpu_ms] = calibrate_side(spec.cpu_ms);
            spec.image_side = sides[spec.cpu_ms];
        }
        fmt::print(stderr, "[{}] {}\n", w, describe(spec));
        std::vector<Result> results;
        for (const auto& strategy : o.strategies) {
            const auto threads = *naive_threads(strategy);
            if (threads > 0 && !o.strategies_given) {
                const double est = floor_seconds(spec, static_cast<double>(threads),
                                                 std::min<double>(threads, cores()));
                if (est > o.max_estimate_s) {
                    Result r;
                    r.strategy = strategy;
                    r.note = fmt::format("at least {:.0f} s with {} threads, over "
                                         "--max-estimate-s {:g}; name it in --strategies to run it",
                                         est, threads, o.max_estimate_s);
                    fmt::print(stderr, "[{}] {}: skipped ({})\n", w, strategy, r.note);
                    results.push_back(r);
                    continue;
                }
            }
            fmt::print(stderr, "[{}] {}: running...\n", w, strategy);
            const auto a = Clock::now();
            Result r = run_in_child(self, strategy, spec);
            fmt::print(stderr, "[{}] {}: {} in {:.1f} s\n", w, strategy, r.ran ? "done" : r.note,
                       std::chrono::duration<double>(Clock::now() - a).count());
            results.push_back(std::move(r));
        }
        print_report(spec, results);
        write_markdown(out / (w + ".md"), spec, results);
        write_csv(out / (w + ".csv"), results);
        write_svg(out / (w + ".svg"), spec, results);
        fmt::print("wrote {}.md, {}.csv, {}.svg in {}\n", w, w, w, out.string());
        std::fflush(stdout);
    }
    return 0;
}

} // namespace

int main(int argc, char** argv) {
    try {
        const Options o = parse(argc, argv);
        if (!o.child.empty())
            return child_main(o);
        return parent_main(o, argv[0]);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "ax_thumbnails: %s\n", e.what());
        return 2;
    }
}
