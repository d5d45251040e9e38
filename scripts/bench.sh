#!/usr/bin/env bash
# Install dependencies, build the benchmarks with the "default" preset, and run ax_thumbnails.
# Arguments go to ax_thumbnails; without any it runs the seed's §4.5 experiment (sleep workload,
# 20000 tasks x 80 ms; strategies fixed1/2/4/32/128/hw, ax, ax-little, pools that would need over
# 30 s listed as not run) and writes bench-results/.
#   bash scripts/bench.sh                      # the seed's experiment (about 1.5 min on 2 cores)
#   bash scripts/bench.sh --quick              # a few seconds
#   bash scripts/bench.sh --workload all       # sleep, cpu, cpu-heavy, mixed, bursty,
#                                              # bursty-forecast, large-queue (about 6 min)
# The micro-benchmarks are built too: build/default/bench/ax_micro --benchmark_min_time=0.2
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/deps.sh
cmake --preset default
cmake --build --preset default --target ax_thumbnails ax_micro
exec build/default/bench/ax_thumbnails "$@"
