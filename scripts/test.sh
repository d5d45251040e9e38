#!/usr/bin/env bash
# Install dependencies, configure, build and run the test suite.
# Without AX_PRESET (what CI runs): the default suite, then the distributed (PostgreSQL) tests on
# the default build, then the ThreadSanitizer suite, then the
# AddressSanitizer + UndefinedBehaviorSanitizer suite, then the fuzz targets (scripts/fuzz.sh).
# Every stage runs even when an earlier one failed, so one CI run reports every problem; the
# script exits non-zero if any stage failed and ends with each stage's result and time.
# AX_PRESET=<preset> builds and tests that preset only (AX_PRESET=fuzz runs scripts/fuzz.sh;
# AX_PRESET=pg the default preset and then the pg stage).
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

# The distributed mode's tests (label pg) need a real PostgreSQL: they run against a throw-away
# server from scripts/pg-server.sh, on the default build only (not under tsan/asan, to keep CI
# time down), and the stage says how many ran. They are skipped, loudly, only when no server can
# be started.
pg_stage() {
    if [ ! -x build/default/tests/pg/test_pg ]; then
        echo "test.sh: pg: ax::pg was not built (libpq missing?); see the default stage" >&2
        return 1
    fi
    local out rc=0
    out="$(mktemp)"
    AX_PG_SETTINGS="${AX_PG_SETTINGS:--c fsync=off}" bash scripts/pg-server.sh -- \
        ctest --test-dir build/default -L pg --output-on-failure --timeout 300 \
        > >(tee "$out") 2>&1 || rc=$?
    sleep 0.2 # let tee finish writing
    if [ "$rc" -eq 75 ]; then
        echo "test.sh: pg: SKIPPED: no PostgreSQL server could be started (see above)"
        rm -f "$out"
        return 0
    fi
    local ran skipped
    ran="$(grep -oE 'tests failed out of [0-9]+' "$out" | grep -oE '[0-9]+$' || echo 0)"
    skipped="$(grep -c 'Skipped' "$out" || true)"
    echo "test.sh: pg: $((ran - skipped)) distributed test(s) ran against PostgreSQL ($skipped skipped)"
    rm -f "$out"
    return "$rc"
}

if [ -n "${AX_PRESET:-}" ]; then
    # The fuzz preset has fuzz targets, not ctest tests: its "suite" is a fuzz run.
    [ "$AX_PRESET" = fuzz ] && exec bash scripts/fuzz.sh
    # AX_PRESET=pg: the default build and suite, then the distributed tests against PostgreSQL.
    if [ "$AX_PRESET" = pg ]; then
        run_preset default && pg_stage
        exit
    fi
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
stage pg pg_stage
stage tsan run_preset tsan
stage asan run_preset asan
stage fuzz bash scripts/fuzz.sh

echo "test.sh: summary"
printf 'test.sh:   %s\n' "${summary[@]}"
exit "$status"
