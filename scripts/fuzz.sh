#!/usr/bin/env bash
# Builds the libFuzzer targets (preset "fuzz": clang, ASan + UBSan) and runs each for
# AX_FUZZ_SECONDS seconds (default 30), starting from the seed corpus in fuzz/corpus/<target>/.
# New corpus entries go to a temporary directory, so a run never modifies the repository; a
# finding (crash, broken invariant, leak, timeout, out-of-memory) is copied to
# build/fuzz/findings/ and makes the script exit non-zero.
#   bash scripts/fuzz.sh                       # what CI runs
#   AX_FUZZ_SECONDS=600 bash scripts/fuzz.sh   # a longer hunt
#   build/fuzz/fuzz/ax_fuzz_ops build/fuzz/findings/<file>       # replay a finding
#   AX_FUZZ_TRACE=1 build/fuzz/fuzz/ax_fuzz_ops <file>           # ...with each operation printed
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

seconds="${AX_FUZZ_SECONDS:-30}"
targets=(config ops)

bash scripts/deps.sh
cmake --preset fuzz
cmake --build --preset fuzz --parallel "${AX_BUILD_JOBS:-$(nproc)}"

# UBSan already aborts (-fno-sanitize-recover); the stack makes its one-line report usable.
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}"

findings="build/fuzz/findings"
mkdir -p "$findings"
work="$(mktemp -d "${TMPDIR:-/tmp}/ax-fuzz.XXXXXX")"
trap 'rm -rf "$work"' EXIT

status=0
for target in "${targets[@]}"; do
    corpus="$work/corpus-$target"
    mkdir -p "$corpus" "$work/artifacts-$target"
    log="$work/$target.log"
    echo "fuzz.sh: ax_fuzz_$target for ${seconds}s"
    # -timeout: an input takes milliseconds, and the harness's own hang guards give up after 5 s,
    # so 10 s is a hang. -rss_limit_mb: the scheduler's queues are bounded, so growth past this
    # is a leak or an unbounded buffer. -max_len: ops stops after 64 operations anyway.
    rc=0
    "build/fuzz/fuzz/ax_fuzz_$target" "$corpus" "fuzz/corpus/$target" \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=512 \
        -print_final_stats=1 -artifact_prefix="$work/artifacts-$target/" >"$log" 2>&1 || rc=$?
    runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")"
    rate="$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")"
    echo "fuzz.sh: ax_fuzz_$target: exit $rc, ${runs:-?} runs, ${rate:-?} exec/s"
    if [ "$rc" -ne 0 ] || [ -n "$(ls -A "$work/artifacts-$target")" ]; then
        status=1
        echo "fuzz.sh: ax_fuzz_$target FOUND A PROBLEM; last lines of its log:" >&2
        tail -n 60 "$log" >&2
        for f in "$work/artifacts-$target"/*; do
            [ -e "$f" ] || continue
            cp "$f" "$findings/$target-$(basename "$f")"
            echo "fuzz.sh: saved $findings/$target-$(basename "$f")" >&2
        done
    fi
done
exit "$status"
