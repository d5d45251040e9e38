#!/usr/bin/env bash
# The flow's settle in SQL alone (docs/bench/pg-flows.md, run 4): the 10,000-task DAG of
# bench/pg/flows.cpp (100 x head -> 98 steps -> tail) enqueued, its heads ended by one statement,
# then its steps and tails 128 per statement, each side in its own round, sides alternating.
# Sides: plain (the same 10,000 tasks without a flow), cur (the schema: migration 15 in
# docs/bench/pg-flows.md run 4), proto (waiting tasks in
# ax.tasks with run_at 'infinity', released by an UPDATE of run_at: proto_*.sql), lock
# (migration 15 locking only the dependents it counts down: settle_lock.sql), nowait (no
# ax.flow_waiting: the task's fields in its ax.flow_tasks row, copied into ax.tasks at release:
# nowait_*.sql).
#   bash bench/pg/flows_sql/run.sh [ROUNDS=6] [SIDES="plain cur proto"]
# Side "cur" runs the schema's own ax.flow_settle (saved before the first round, restored before
# each round, since side "lock" replaces it); settle_lock.sql is migration 15's with the narrower
# lock (without migration 16's group columns).
# Needs build/bench-flows/ax_pg_flows (scripts/bench-flows.sh builds it: it migrates the schema).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
export ROUNDS=${1:-6} SIDES=${2:-plain cur proto}
bash scripts/pg-server.sh -- bash -c '
    set -e
    createdb axflows
    C="$AX_PG_CONNINFO dbname=axflows"
    build/bench-flows/ax_pg_flows "$C" 1 200 2 1 1 >/dev/null 2>&1
    D=bench/pg/flows_sql
    S=$(mktemp)
    { psql "$C" -Atc "SELECT pg_get_functiondef('"'"'ax.flow_settle(bigint[], text[])'"'"'::regprocedure)"; echo ";"; } > $S
    psql "$C" -q -v ON_ERROR_STOP=1 -f $D/proto_enqueue.sql -f $D/proto_settle.sql \
        -f $D/nowait_enqueue.sql -f $D/nowait_settle.sql
    for r in $(seq 1 $ROUNDS); do
        order=$SIDES
        if [ $((r % 2)) = 0 ]; then order=$(echo $SIDES | tr " " "\n" | tac | tr "\n" " "); fi
        for v in $order; do
            psql "$C" -q -v ON_ERROR_STOP=1 -v plain=$([ $v = plain ] && echo true || echo false) \
                -v curenq=$([ $v = proto ] && echo false || echo true) \
                -v nowait=$([ $v = nowait ] && echo true || echo false) \
                -v cur=$([ $v = lock ] && echo false || echo true) -v label="R$r-$v" -v settle_cur=$S \
                -c "\timing on" -f $D/round.sql 2>&1 | grep -E "^R|Time|Execution" | tr "\n" " " |
                sed -E "s/Time: ([0-9.]+) ms/\1/g"
            echo
        done
    done
' | tee /dev/stderr | python3 bench/pg/flows_sql/parse.py /dev/stdin
