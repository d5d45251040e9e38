#!/usr/bin/env bash
# Issue 28's recurring target: 1,000 schedules firing every minute on three nodes for ten minutes
# must make exactly 10,000 tasks (one per schedule per minute, none lost, none doubled).
#
#   bash scripts/bench-schedules.sh [MINUTES] [SCHEDULES]     (defaults 10 and 1000)
#
# Starts a throw-away server (scripts/pg-server.sh), defines SCHEDULES schedules "* * * * *" with
# ax-pg, starts three pg_test_node processes (they fire the schedules and run the tasks), waits
# for MINUTES whole minutes from the next minute boundary, stops the nodes and counts the tasks
# whose tick lies in those minutes (live and finished, by their keys schedule:<name>:<tick>).
# Prints the count, the distinct keys, the expected figure and the lateness (enqueue time minus
# tick, from the database's clock). Needs a build: cmake --build --preset default --target ax-pg
# pg_test_node. Exit status 0 when the count is exact.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
if [ "${1:-}" != "--inner" ]; then
    export AX_BENCH_MINUTES="${1:-10}" AX_BENCH_SCHEDULES="${2:-1000}"
    export AX_BENCH_BUILD="${AX_BUILD_DIR:-$here/build/default}"
    exec bash "$here/scripts/pg-server.sh" -- bash "$here/scripts/bench-schedules.sh" --inner
fi

db="$AX_PG_CONNINFO"
tool="$AX_BENCH_BUILD/tools/ax-pg"
node="$AX_BENCH_BUILD/tests/pg/pg_test_node"
minutes="$AX_BENCH_MINUTES"
count="$AX_BENCH_SCHEDULES"
"$tool" --db "$db" migrate
# one ax-pg call (one round trip) per schedule: about a second per thousand
for i in $(seq 1 "$count"); do
    "$tool" --db "$db" schedules add "s$i" "* * * * *" noop >/dev/null
done
echo "schedules: $(psql -Atc "SELECT count(*) FROM ax.schedules")"
pids=()
for n in a b c; do
    "$node" --db "$db" --name "$n" --kinds noop --workers 2 >/dev/null 2>&1 &
    pids+=($!)
done
start=$(psql -Atc "SELECT floor(extract(epoch FROM date_trunc('minute', now()) + interval '1 minute'))::int8")
end=$((start + 60 * minutes))
echo "window: $(date -u -d @"$start" +%H:%M:%S) .. $(date -u -d @"$end" +%H:%M:%S) UTC ($minutes min), 3 nodes"
# until the window ended and its last ticks had time to be enqueued
while [ "$(psql -Atc "SELECT floor(extract(epoch FROM now()))::int8")" -lt $((end + 5)) ]; do
    sleep 5
done
kill -TERM "${pids[@]}"
wait "${pids[@]}" || true
result=$(psql -At -F ' ' <<SQL
WITH t AS (SELECT idem_key, enqueued_at FROM ax.tasks WHERE idem_key LIKE 'schedule:%'
           UNION ALL
           SELECT idem_key, enqueued_at FROM ax.history WHERE idem_key LIKE 'schedule:%'),
     k AS (SELECT idem_key, enqueued_at,
                  to_timestamp(substring(idem_key FROM '^schedule:[^:]*:(.*)$'),
                               'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS tick FROM t)
SELECT count(*), count(DISTINCT idem_key),
       round(percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM enqueued_at - tick))::numeric * 1000, 1),
       round(percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM enqueued_at - tick))::numeric * 1000, 1),
       round(max(extract(epoch FROM enqueued_at - tick))::numeric * 1000, 1)
  FROM k WHERE tick >= to_timestamp($start) AND tick < to_timestamp($end)
SQL
)
read -r tasks distinct p50 p99 max <<<"$result"
expected=$((count * minutes))
echo "tasks $tasks  distinct keys $distinct  expected $expected  lateness ms p50 $p50 p99 $p99 max $max"
[ "$tasks" -eq "$expected" ] && [ "$distinct" -eq "$expected" ]
