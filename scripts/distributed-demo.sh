#!/usr/bin/env bash
# The distributed mode in one command: a throw-away PostgreSQL, a producer, two node processes;
# one node is killed with SIGKILL midway, the other reclaims its batch once the lease expires and
# finishes everything. Prints per node what it ran, the reclaimed batch and the totals.
#
#   bash scripts/distributed-demo.sh [TASKS]     (default 2000; builds the example if needed)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

tasks="${1:-2000}"
build="${AX_DEMO_BUILD:-build/default}"
if [ ! -x "$build/examples/distributed/ax_pg_node" ]; then
    cmake --preset default >/dev/null
    cmake --build "$build" --target ax_pg_producer ax_pg_node ax-pg --parallel "${AX_BUILD_JOBS:-2}"
fi
export AX_DEMO_BIN="$PWD/$build" AX_DEMO_TASKS="$tasks"

exec bash scripts/pg-server.sh -- bash -c '
set -euo pipefail
bin="$AX_DEMO_BIN"; tasks="$AX_DEMO_TASKS"; db="$AX_PG_CONNINFO"
log="$(mktemp -d)"; trap "kill -9 \$(jobs -p) 2>/dev/null || true; rm -rf $log" EXIT
q() { psql -qAtX -c "$1"; }

"$bin/tools/ax-pg" migrate
q "CREATE TABLE demo_results (task_id bigint PRIMARY KEY, node text NOT NULL)"
q "CREATE TABLE demo_runs (task_id bigint NOT NULL, node text NOT NULL)"
"$bin/examples/distributed/ax_pg_producer" "$db" "$tasks"
"$bin/examples/distributed/ax_pg_producer" "$db" "$tasks"   # again: the keys make it a no-op

lease=2000
"$bin/examples/distributed/ax_pg_node" "$db" node-a "$lease" >"$log/a.out" 2>&1 &
a=$!
"$bin/examples/distributed/ax_pg_node" "$db" node-b "$lease" >"$log/b.out" 2>&1 &
b=$!
echo "demo: two nodes started (lease $lease ms); waiting until about 40% are done"
until [ "$(q "SELECT count(*) FROM demo_results")" -ge $((tasks * 2 / 5)) ]; do sleep 0.1; done
kill -9 "$a"; wait "$a" 2>/dev/null || true
held="$(q "SELECT count(*) FROM ax.tasks t JOIN ax.nodes n ON n.id = t.node_id WHERE n.name = '"'"'node-a'"'"'")"
batches="$(q "SELECT string_agg(b.id::text, '"'"','"'"') FROM ax.batches b JOIN ax.nodes n ON n.id = b.node_id WHERE n.name = '"'"'node-a'"'"'")"
echo "demo: kill -9 node-a; it held $held claimed task(s) in batch(es) ${batches:-none}"
t0=$(date +%s.%N)
until [ "$(q "SELECT count(*) FROM ax.tasks")" -eq 0 ]; do sleep 0.1; done
t1=$(date +%s.%N)
kill -TERM "$b"; wait "$b" || true
echo
echo "demo: node-a output (its last progress lines before the kill):"; sed "s/^/    /" "$log/a.out" | tail -n 3
echo "demo: node-b output:"; grep -E "reclaimed|stopped" "$log/b.out" | sed "s/^/    /"
echo
echo "demo: per node, executions (demo_runs) and results kept (demo_results):"
q "SELECT r.node, count(*), (SELECT count(*) FROM demo_results x WHERE x.node = r.node) FROM demo_runs r GROUP BY r.node ORDER BY r.node" \
    | awk -F"|" "{printf \"    %-7s ran %5d, results %5d\n\", \$1, \$2, \$3}"
echo "demo: totals:"
echo "    tasks enqueued        $tasks"
echo "    distinct results      $(q "SELECT count(*) FROM demo_results")  (idempotent handler: exactly once)"
echo "    executions            $(q "SELECT count(*) FROM demo_runs")  (at least once: re-runs of what node-a had started)"
echo "    succeeded in history  $(q "SELECT count(*) FROM ax.history WHERE state = 1")"
echo "    dead letters          $(q "SELECT count(*) FROM ax.dead_letters")"
printf "    all done %.1f s after the kill (lease %d ms)\n" "$(echo "$t1 - $t0" | bc)" "$lease"
"$bin/tools/ax-pg" status | grep -E "recovery|nodes"
'
