#!/usr/bin/env bash
# The distributed mode's soak: no-op tasks through node processes at their burn-down rate, without
# a pause, for 10 minutes (history retention 1 minute); prints every table's size every 10 s and
# judges whether each one levels off after the first retention periods (within +-20 %). Not part of
# the test suite (CI runs the short flood test, test_pg [history_flood]).
#   bash scripts/soak-pg.sh                      # 10 min, 2 nodes; writes docs/bench/pg-soak.md
#   bash scripts/soak-pg.sh --minutes 4 --out /tmp/soak.md   # --out, and any ax_pg_soak option (bench/pg/soak.cpp)
# Builds bench/pg's ax_pg_soak into build/bench-pg/ax and runs it on a throw-away server
# (scripts/pg-server.sh: initdb defaults, fsync on, always stopped on exit).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/deps.sh libpq-dev
cmake -S bench/pg -B build/bench-pg/ax -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build/bench-pg/ax -j2 --target ax_pg_soak
out=docs/bench/pg-soak.md
args=()
while [ $# -gt 0 ]; do
    if [ "$1" = "--out" ]; then
        out="$2"
        shift 2
    else
        args+=("$1")
        shift
    fi
done
mkdir -p "$(dirname "$out")"
{
    echo "# Soak: every ax table under a flood that never pauses"
    echo
    echo "Command: \`bash scripts/soak-pg.sh${args[*]:+ ${args[*]}}\` at commit" \
        "$(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(date -u '+%Y-%m-%d %H:%M UTC')," \
        "$(nproc) cores. No-op tasks through node processes (default 2, 2 workers each) at their" \
        "burn-down rate (a producer keeps 4 000 queued), history retention 60 s unless the" \
        "command says otherwise. Sizes are pg_total_relation_size over every partition (heap," \
        "indexes, TOAST); tasks/s is the rate over each interval."
    echo
} >"$out"
rc=0
bash scripts/pg-server.sh -- build/bench-pg/ax/ax_pg_soak "${args[@]}" | tee -a "$out" || rc=$?
echo "soak-pg.sh: wrote $out"
exit "$rc"
