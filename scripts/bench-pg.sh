#!/usr/bin/env bash
# The distributed benchmark (issue 14): ax against graphile-worker 0.17.3 and pg-boss 10.4.2 on one
# throw-away PostgreSQL 15 (initdb defaults), in one run. Not part of the test suite.
#   bash scripts/bench-pg.sh            # full run (about 15 min on 2 cores); writes docs/bench/pg.{md,svg,json}
#   bash scripts/bench-pg.sh --quick    # development sizes (about 3 min); writes bench-results/pg/
#   bash scripts/bench-pg.sh --help     # every option (sizes, durations, sides, rounds)
# Installs what it needs (PostgreSQL 15, Node.js + npm, the peers from npm into build/bench-pg),
# builds ax's bench node when the ax::pg target exists, and always stops its server on exit.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$(pwd)
for a in "$@"; do
    case "$a" in -h | --help) exec node bench/pg/bench.mjs --help ;; esac
done

extra=()
command -v node >/dev/null 2>&1 || extra+=(nodejs)
command -v npm >/dev/null 2>&1 || extra+=(npm)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || extra+=(postgresql postgresql-contrib)
bash scripts/deps.sh libpq-dev "${extra[@]}"

# The peers, pinned by bench/pg/package-lock.json.
mods=build/bench-pg
mkdir -p "$mods"
if ! cmp -s bench/pg/package-lock.json "$mods/package-lock.json" || [ ! -d "$mods/node_modules" ]; then
    cp bench/pg/package.json bench/pg/package-lock.json "$mods/"
    (cd "$mods" && npm ci --no-audit --no-fund --loglevel=error)
fi
export AX_BENCH_PG_MODULES="$root/$mods"

# ax's side, when the ax::pg target exists.
ax_args=()
if [ -f include/ax/pg/node.hpp ] && [ -f bench/pg/CMakeLists.txt ]; then
    cmake -S bench/pg -B build/bench-pg/ax -DCMAKE_BUILD_TYPE=Release >/dev/null
    cmake --build build/bench-pg/ax -j2 --target ax_pg_bench
    ax_args=(--ax-bin "$root/build/bench-pg/ax/ax_pg_bench")
else
    echo "bench-pg.sh: include/ax/pg not found: running the peers only"
fi

# shellcheck source=../bench/pg/pg-server.sh
source bench/pg/pg-server.sh
pg_bench_server_start
BENCH_PG_CMD="bash scripts/bench-pg.sh${*:+ $*}" node bench/pg/bench.mjs "${ax_args[@]}" "$@"
