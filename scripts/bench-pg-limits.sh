#!/usr/bin/env bash
# The group limits' figures (issue 29; docs/bench/pg-limits.md), on one throw-away PostgreSQL 15
# (scripts/pg-server.sh; settings through AX_PG_SETTINGS), bench/pg/limits.cpp:
#   1. burn-down of N no-op tasks, alternating in one run: ungrouped (plain), all in one group with
#      limit 1000 (group), and, with --baseline REF, the ungrouped burn-down built against REF's
#      headers (the claim before migration 11: what limits cost tasks that use none);
#   2. N tasks over 100 keys, limit 1 per key, on 3 nodes: the most running at once for one key;
#   3. fairness: one tenant with N queued, another submitting 10 tasks/s: the small one's waits.
#   bash scripts/bench-pg-limits.sh [--baseline REF] [N=100000] [ROUNDS=3] [NODES=3]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
baseline=""
if [ "${1:-}" = "--baseline" ]; then baseline="$2"; shift 2; fi
n="${1:-100000}"
rounds="${2:-3}"
nodes="${3:-3}"
cmake -S bench/pg -B build/bench-limits -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build/bench-limits --target ax_pg_limits
bin=build/bench-limits/ax_pg_limits
base_bin=""
if [ -n "$baseline" ]; then
    work="$(mktemp -d /tmp/ax-limits-bench.XXXXXX)"
    trap 'rm -rf "$work"' EXIT
    git archive "$baseline" include | tar -x -C "$work"
    base_bin="$work/ax_pg_limits_base"
    ${CXX:-c++} -std=c++20 -O2 -DNDEBUG -DAX_LIMITS_BASELINE -I"$work/include" \
        -I"$(pg_config --includedir)" bench/pg/limits.cpp -o "$base_bin" -lpq -pthread
fi
bash scripts/pg-server.sh -- bash -c "
    set -e
    echo \"== burn-down, $n no-op tasks, $nodes nodes, $rounds rounds alternating (commit $(git rev-parse --short HEAD)${baseline:+, baseline $baseline})\"
    for r in \$(seq $rounds); do
        $bin \"\$AX_PG_CONNINFO\" burn plain $n $nodes
        $bin \"\$AX_PG_CONNINFO\" burn group $n $nodes
        ${base_bin:+$base_bin \"\$AX_PG_CONNINFO\" burn plain $n $nodes | sed 's/^burn plain /burn BASELINE/'}
    done
    echo '== 100 keys, limit 1 per key'
    $bin \"\$AX_PG_CONNINFO\" keys $n 3 100
    echo '== fairness'
    $bin \"\$AX_PG_CONNINFO\" fair $n $nodes
"
