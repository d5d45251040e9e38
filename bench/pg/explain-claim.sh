#!/usr/bin/env bash
# EXPLAIN (ANALYZE, BUFFERS, WAL) of ax's claim statement (custom plans, then generic plans) and of
# its acknowledgement, on 100 000 queued no-op tasks (priorities 3:2:1), 500 rows per claim
# (250/167/83 by lane). A diagnostic for docs/bench/pg.md, not part of the benchmark or the tests.
#   bash bench/pg/explain-claim.sh        # after scripts/bench-pg.sh built build/bench-pg/ax
# Starts its own throw-away server (scripts/pg-server.sh, initdb defaults) and prints the plans.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
root=$(pwd)
bin="$root/build/bench-pg/ax/ax_pg_bench"
[ -x "$bin" ] || { echo "explain-claim.sh: $bin not found: run scripts/bench-pg.sh first" >&2; exit 2; }
if [ "${1:-}" != "--inside" ]; then
    exec bash scripts/pg-server.sh -- bash "$root/bench/pg/explain-claim.sh" --inside
fi
export PGHOST=127.0.0.1 PGUSER=postgres PGDATABASE=postgres
P=(psql -X -q -v ON_ERROR_STOP=1)
# The statement's text as the node prepares it, from include/ax/pg/schema.hpp.
sql_of() {
    sed -n "/$1 = R\"SQL(/,/)SQL\";/p" include/ax/pg/schema.hpp | sed -e '1d' -e 's/)SQL";$//'
}
claim=$(sql_of claim_sql)
ack=$(sql_of ack_sql)
"$bin" setup >/dev/null
"${P[@]}" -c "INSERT INTO ax.tasks (kind, priority)
              SELECT 'noop', (ARRAY[0,0,0,1,1,2])[1 + i % 6] FROM generate_series(1, 100000) i"
"${P[@]}" -c "VACUUM ANALYZE ax.tasks" -c "CHECKPOINT"
for mode in auto force_generic_plan; do
    for i in 1 2; do
        echo "=== claim $i, plan_cache_mode = $mode"
        "${P[@]}" <<SQL
SET plan_cache_mode = $mode;
PREPARE claim(bigint, text[], text[], int8, int8, int8, int8) AS $claim;
BEGIN;
SET LOCAL synchronous_commit = off;
EXPLAIN (ANALYZE, BUFFERS, WAL, VERBOSE) EXECUTE claim(1, '{noop}', '{}', 250, 167, 83, 5000);
COMMIT;
SQL
    done
done
echo "=== ack of 500 claimed tasks"
"${P[@]}" <<SQL
PREPARE ack(bigint, int8[]) AS $ack;
SELECT array_agg(id)::text AS ids FROM (SELECT id FROM ax.tasks WHERE node_id = 1 LIMIT 500) s \gset
EXPLAIN (ANALYZE, BUFFERS, WAL) EXECUTE ack(1, :'ids');
SQL
