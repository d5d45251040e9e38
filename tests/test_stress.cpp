// The short randomized stress run (a few seconds; bench/stress_long.cpp runs the same engine for
// millions of operations). Fixed seed; AX_STRESS_SEED=<n> picks another. See stress_engine.hpp
// for the operation mix and the invariants checked.
#include "stress_engine.hpp"

#include <catch2/catch.hpp>
#include <cstdlib>

TEST_CASE("randomized stress: nothing lost, counters add up", "[stress]") {
    const char* env = std::getenv("AX_STRESS_SEED");
    ax_stress::Options opt;
    opt.seed = env != nullptr ? static_cast<unsigned>(std::strtoul(env, nullptr, 10)) : 12345u;
    opt.producers = 4;
    opt.operations = 6000;
    INFO("seed " << opt.seed);

    const ax_stress::Result r = ax_stress::run(opt);
    for (const auto& f : r.failures)
        UNSCOPED_INFO(f);
    CHECK(r.violations == 0);
    CHECK(r.operations == opt.operations);
    // The mix must actually have exercised each ending, or the invariants above prove little.
    CHECK(r.admitted > 0);
    CHECK(r.succeeded > 0);
    CHECK(r.dead_lettered > 0);
    CHECK(r.cancels_accepted > 0);
    CHECK(r.queries > 0);
}
