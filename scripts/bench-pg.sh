#!/usr/bin/env bash
# The distributed benchmark (issue 14): ax against graphile-worker 0.17.3 and pg-boss 10.4.2 on one
# throw-away PostgreSQL 15 (initdb defaults), in one run. Not part of the test suite.
#   bash scripts/bench-pg.sh            # full run (about 15 min on 2 cores); writes docs/bench/pg.{md,svg,json}
#   bash scripts/bench-pg.sh --quick    # development sizes (about 3 min); writes bench-results/pg/
#   bash scripts/bench-pg.sh --help     # every option (sizes, durations, sides, rounds)
# Installs what it needs (PostgreSQL 15, Node.js + npm, the peers from npm into build/bench-pg),
# builds ax's bench node when include/ax/pg exists, and always stops its server on exit
# (scripts/pg-server.sh).
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

# ax's side, when the ax::pg target exists (a build failure leaves the peers' rows only).
ax_args=()
if [ -f include/ax/pg/node.hpp ]; then
    if cmake -S bench/pg -B build/bench-pg/ax -DCMAKE_BUILD_TYPE=Release >/dev/null &&
        cmake --build build/bench-pg/ax -j2 --target ax_pg_bench; then
        ax_args=(--ax-bin "$root/build/bench-pg/ax/ax_pg_bench")
        export AX_BENCH_PG_AX_SOURCE="commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
    else
        echo "bench-pg.sh: WARNING: ax_pg_bench did not build: running the peers only" >&2
    fi
else
    echo "bench-pg.sh: include/ax/pg not found: running the peers only"
fi

# The project's throw-away server (initdb defaults; fsync and synchronous_commit on), plus
# pg_stat_statements for the statement counts. Nodes connect over TCP on 127.0.0.1, as in
# shared/notes/pg-peers-baseline.md.
AX_PG_SETTINGS="-c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=top" \
    bash scripts/pg-server.sh -- env PGHOST=127.0.0.1 PGUSER=postgres \
    BENCH_PG_CMD="bash scripts/bench-pg.sh${*:+ $*}" node bench/pg/bench.mjs "${ax_args[@]}" "$@"
