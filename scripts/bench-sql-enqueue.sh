#!/usr/bin/env bash
# The SQL API's figures (issue 28; docs/bench/sql-enqueue.md), on one throw-away PostgreSQL 15
# (initdb defaults: fsync and synchronous_commit on) from scripts/pg-server.sh:
#   1. pgbench, one client, `SELECT ax.enqueue(...)` one task per statement (each its own
#      transaction), SECONDS long; then the same with synchronous_commit = off for the session
#      (what the commit's WAL flush costs); a bare INSERT per statement as the baseline, both ways;
#      and 100 ax.enqueue statements per transaction;
#   2. bench/pg/sql_enqueue.cpp: ax.enqueue one per statement through libpq, and 100k-task calls of
#      ax.enqueue_many against Client::enqueue_many (INSERT from arrays, and COPY) and a bare
#      INSERT ... SELECT FROM unnest of the same rows (the floor for an SQL function), alternating.
#   bash scripts/bench-sql-enqueue.sh [SECONDS=10] [ROUNDS=5]
# Server settings through AX_PG_SETTINGS (pg-server.sh), e.g. AX_PG_SETTINGS="-c fsync=off".
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
secs="${1:-10}"
rounds="${2:-5}"
cmake -S bench/pg -B build/bench-sql -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build/bench-sql --target ax_pg_sql_enqueue
work="$(mktemp -d /tmp/ax-sql-bench.XXXXXX)"
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"
echo "SELECT ax.enqueue(kind => 'resize', payload => '\x0001020304050607');" >"$work/one.sql"
echo "INSERT INTO ax.tasks (kind, payload) VALUES ('resize', '\x0001020304050607');" >"$work/insert.sql"
{ echo "BEGIN;"; for _ in $(seq 100); do cat "$work/one.sql"; done; echo "COMMIT;"; } >"$work/tx100.sql"
# pgbench's -f script runs the statement; PGOPTIONS carries the session setting.
bash scripts/pg-server.sh -- bash -c "
    set -e
    createdb axbench
    build/bench-sql/ax_pg_sql_enqueue \"\$AX_PG_CONNINFO dbname=axbench\" 1 1 1000 >/dev/null  # migrates
    echo '== pgbench: SELECT ax.enqueue(...), 1 client, ${secs} s, synchronous_commit on (default)'
    pgbench -n -f $work/one.sql -c1 -T$secs axbench | grep -E 'latency average|tps'
    echo '== the same, synchronous_commit = off'
    PGOPTIONS='-c synchronous_commit=off' pgbench -n -f $work/one.sql -c1 -T$secs axbench | grep -E 'latency average|tps'
    echo '== baseline: a bare INSERT INTO ax.tasks per statement (no function, no checks), synchronous_commit on'
    pgbench -n -f $work/insert.sql -c1 -T$secs axbench | grep -E 'latency average|tps'
    echo '== the same, synchronous_commit = off'
    PGOPTIONS='-c synchronous_commit=off' pgbench -n -f $work/insert.sql -c1 -T$secs axbench | grep -E 'latency average|tps'
    echo '== SELECT ax.enqueue(...) one task per statement, 100 statements per transaction (tps x 100 = tasks/s)'
    pgbench -n -f $work/tx100.sql -c1 -T$secs axbench | grep -E 'latency average|tps'
    echo '== bench/pg/sql_enqueue.cpp'
    build/bench-sql/ax_pg_sql_enqueue \"\$AX_PG_CONNINFO dbname=axbench\" $secs $rounds 100000
"
