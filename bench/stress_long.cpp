// Long randomized stress: the engine of tests/test_stress.cpp (tests/stress_engine.hpp) run for
// millions of operations, to shake out races too rare for the test suite's few thousand.
//
//   ax_stress_long [--seed N] [--producers N] [--ops N] [--window N]
//
// Prints progress and a summary; exits 1 if any invariant failed (each one is listed), 2 for a
// bad command line.
#include "stress_engine.hpp"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

bool parse_u64(const char* s, std::uint64_t& out) {
    if (s == nullptr || *s == '\0')
        return false;
    char* end = nullptr;
    const unsigned long long v = std::strtoull(s, &end, 10);
    if (*end != '\0')
        return false;
    out = v;
    return true;
}

int usage(const char* argv0) {
    std::fprintf(stderr,
                 "usage: %s [--seed N] [--producers N (1..64)] [--ops N] [--window N]\n"
                 "  defaults: --seed 12345 --producers 4 --ops 10000000 --window 96\n",
                 argv0);
    return 2;
}

} // namespace

int main(int argc, char** argv) {
    ax_stress::Options opt;
    opt.operations = 10'000'000;
    for (int i = 1; i < argc; ++i) {
        std::uint64_t v = 0;
        const char* flag = argv[i];
        if (i + 1 >= argc || !parse_u64(argv[i + 1], v))
            return usage(argv[0]);
        ++i;
        if (std::strcmp(flag, "--seed") == 0) {
            opt.seed = static_cast<unsigned>(v);
        } else if (std::strcmp(flag, "--producers") == 0 && v >= 1 && v <= 64) {
            opt.producers = static_cast<unsigned>(v);
        } else if (std::strcmp(flag, "--ops") == 0 && v >= 1) {
            opt.operations = v;
        } else if (std::strcmp(flag, "--window") == 0 && v >= 1) {
            opt.window = static_cast<std::size_t>(v);
        } else {
            return usage(argv[0]);
        }
    }

    std::printf("ax_stress_long: seed %u, %u producers, %llu operations\n", opt.seed, opt.producers,
                static_cast<unsigned long long>(opt.operations));
    std::fflush(stdout);
    const auto t0 = std::chrono::steady_clock::now();
    opt.progress_every = opt.operations >= 20 ? opt.operations / 20 : 1;
    opt.progress = [&](std::uint64_t done) {
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::printf("  %11llu ops  %5.1f%%  %7.1f s  %9.0f ops/s\n",
                    static_cast<unsigned long long>(done),
                    100.0 * static_cast<double>(done) / static_cast<double>(opt.operations), s,
                    s > 0 ? static_cast<double>(done) / s : 0.0);
        std::fflush(stdout);
    };

    const ax_stress::Result r = ax_stress::run(opt);
    const auto u = [](std::uint64_t v) { return static_cast<unsigned long long>(v); };
    std::printf("summary:\n"
                "  ops            %llu\n"
                "  submits        %llu (admitted %llu, rejected %llu)\n"
                "  cancels        %llu (accepted %llu)\n"
                "  queries        %llu\n"
                "  submitted      %llu (subtasks and joins %llu)\n"
                "  succeeded      %llu\n"
                "  dead-lettered  %llu\n"
                "  cancelled      %llu\n"
                "  rejected       %llu\n"
                "  retries        %llu\n"
                "  timeouts       %llu (taken over %llu)\n"
                "  elapsed        %.1f s\n"
                "  ops/s          %.0f\n",
                u(r.operations), u(r.submits), u(r.admitted), u(r.refused), u(r.cancels),
                u(r.cancels_accepted), u(r.queries), u(r.totals.submitted), u(r.totals.subtasks),
                u(r.totals.succeeded), u(r.totals.dead_lettered), u(r.totals.cancelled),
                u(r.totals.rejected), u(r.totals.retries), u(r.totals.timeouts),
                u(r.totals.takeovers), r.elapsed_s,
                r.elapsed_s > 0 ? static_cast<double>(r.operations) / r.elapsed_s : 0.0);
    if (!r.ok()) {
        std::printf("FAILED: %llu invariant violation(s)%s\n", u(r.violations),
                    r.violations > r.failures.size() ? " (first ones listed)" : "");
        for (const auto& f : r.failures)
            std::printf("  %s\n", f.c_str());
        return 1;
    }
    std::printf("OK: every invariant held\n");
    return 0;
}
