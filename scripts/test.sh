#!/usr/bin/env bash
# Install dependencies, configure, build and run the test suite.
# Without AX_PRESET (what CI runs): the default suite, then the ThreadSanitizer suite, then the
# AddressSanitizer + UndefinedBehaviorSanitizer suite, then the fuzz targets (scripts/fuzz.sh).
# Every stage runs even when an earlier one failed, so one CI run reports every problem; the
# script exits non-zero if any stage failed and ends with each stage's result and time.
# AX_PRESET=<preset> builds and tests that preset only (AX_PRESET=fuzz runs scripts/fuzz.sh).
# The sanitizer options (fail on the first report, suppressions) are in CMakePresets.json's test
# presets, so `ctest --preset tsan` behaves the same by hand.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/deps.sh

# Chained with && rather than relying on set -e, which bash ignores inside a function called
# from `cmd || ...` (as stage does): a failed build must never go on to test stale binaries.
# One compile job per core (AX_BUILD_JOBS overrides): Ninja's default of cores + 2 only adds
# memory pressure on a small CI machine, where a sanitizer build is the heaviest thing running.
jobs="${AX_BUILD_JOBS:-$(nproc)}"
run_preset() {
    cmake --preset "$1" && cmake --build --preset "$1" --parallel "$jobs" && ctest --preset "$1"
}

if [ -n "${AX_PRESET:-}" ]; then
    # The fuzz preset has fuzz targets, not ctest tests: its "suite" is a fuzz run.
    [ "$AX_PRESET" = fuzz ] && exec bash scripts/fuzz.sh
    run_preset "$AX_PRESET"
    exit 0
fi

summary=()
status=0
stage() {
    local name="$1"
    shift
    local start=$SECONDS rc=0
    echo "test.sh: === stage $name ==="
    # `|| rc=$?` keeps set -e from ending the script, so later stages still run.
    "$@" || rc=$?
    local line
    line="$(printf '%-8s %s  %4ds' "$name" "$([ "$rc" -eq 0 ] && echo pass || echo "FAIL (exit $rc)")" $((SECONDS - start)))"
    summary+=("$line")
    echo "test.sh: $line"
    [ "$rc" -eq 0 ] || status=1
}

stage default run_preset default
stage tsan run_preset tsan
stage asan run_preset asan
stage fuzz bash scripts/fuzz.sh

echo "test.sh: summary"
printf 'test.sh:   %s\n' "${summary[@]}"
exit "$status"
