#!/usr/bin/env bash
# EXPLAIN (ANALYZE) of ax-pg's task listings (Client::list, `ax-pg tasks list`) on a million
# live tasks, a million finished ones and 10,000 dead letters, in a database of its own on the
# throw-away server. docs/distributed.md ("Listing tasks") shows its output.
#
#   bash scripts/pg-server.sh -- bash scripts/pg-list-explain.sh [path/to/ax-pg]
#
# The rows are written by SQL (generate_series), not by nodes: 8 kinds and the three lanes
# (hashed, independent of the rest) plus a rare kind (one row in a thousand), 10 % scheduled,
# 1 % claimed, a quarter tagged gpu (hashed), one in a thousand keyed; the history 1 %
# cancelled and 0.1 % discarded. Then VACUUM ANALYZE, as autovacuum would have by then. Last, the
# rare kind's pending list again with the opt-in index tasks_kind created (migration 13 dropped it).
set -euo pipefail
tool="${1:-build/default/tools/ax-pg}"
: "${AX_PG_CONNINFO:?run under scripts/pg-server.sh}"
psql -q -v ON_ERROR_STOP=1 -d postgres -c "DROP DATABASE IF EXISTS ax_explain WITH (FORCE)" \
     -c "CREATE DATABASE ax_explain"
db="$AX_PG_CONNINFO dbname=ax_explain"
"$tool" --db "$db" migrate
psql -q -v ON_ERROR_STOP=1 -d ax_explain <<'SQL'
INSERT INTO ax.tasks (id, kind, priority, run_at, node_id, batch_id, attempts, tags, idem_key,
                      payload)
SELECT g, CASE WHEN g % 1000 = 7 THEN 'rare' ELSE 'kind' || (hashint4(g) & 7) END, ((hashint4(g + 1) & 255) % 3)::smallint,
       now() + CASE WHEN g % 10 = 0 THEN interval '1 hour' ELSE -interval '1 minute' END,
       CASE WHEN g % 100 = 1 THEN 1 END, CASE WHEN g % 100 = 1 THEN 1 END,
       CASE WHEN g % 100 = 1 THEN 1 ELSE 0 END,
       CASE WHEN hashint4(g + 2) & 7 < 2 THEN ARRAY['gpu'] ELSE '{}' END,
       CASE WHEN g % 1000 = 0 THEN 'key-' || g END, convert_to('payload ' || g, 'UTF8')
  FROM generate_series(1, 1000000) g;
INSERT INTO ax.idem_keys (idem_key, task_id)
SELECT idem_key, id FROM ax.tasks WHERE idem_key IS NOT NULL;
INSERT INTO ax.history (id, kind, priority, state, attempts, node_id, enqueued_at, finished_at,
                        slot)
SELECT 1000000 + g, CASE WHEN g % 1000 = 7 THEN 'rare' ELSE 'kind' || (hashint4(g) & 7) END, ((hashint4(g + 1) & 255) % 3)::smallint,
       CASE WHEN g % 100 = 0 THEN 2 WHEN g % 1000 = 1 THEN 3 ELSE 1 END, 1, 1,
       now() - interval '10 minutes', now() - interval '5 minutes', 0
  FROM generate_series(1, 1000000) g;
INSERT INTO ax.dead_letters (id, kind, priority, payload, tags, max_attempts, timeout_ms,
                             attempts, errors, reason, enqueued_at)
SELECT 2000000 + g, 'kind' || (hashint4(g) & 7), ((hashint4(g + 1) & 255) % 3)::smallint, '\x00', '{}', 4, 0, 4, '{boom}',
       'attempts exhausted', now() - interval '1 hour'
  FROM generate_series(1, 10000) g;
SELECT setval(pg_get_serial_sequence('ax.tasks', 'id'), 3000000);
VACUUM ANALYZE;
SQL
explain() {
    echo
    echo "### ax-pg tasks list $*"
    echo
    "$tool" --db "$db" tasks list "$@" --explain
}
explain --limit 100
explain --limit 100 --newest-first
explain --state pending --kind kind3 --limit 100 --after 500000
explain --state pending,scheduled,claimed --kind kind3 --limit 100
explain --state pending --kind rare --limit 100
explain --state succeeded --kind rare --limit 100
explain --state succeeded --kind kind5 --limit 100 --after 1500000
explain --state cancelled --limit 100
explain --state dead --kind kind2 --limit 100
explain --kind kind7 --limit 100
explain --key key-5000
explain --state claimed --limit 100
explain --tag gpu --lane high --limit 100
# The worst case: a filter no index serves that matches nothing (no claimed task is of kind
# rare) walks the whole live table.
explain --state claimed --kind rare --limit 100
# The opt-in listing index (docs/distributed.md, "Listing tasks"; migration 13 dropped it because
# every enqueue paid for it): what it buys the list of a rare kind's pending tasks.
psql -q -v ON_ERROR_STOP=1 -d ax_explain \
     -c "CREATE INDEX CONCURRENTLY tasks_kind ON ax.tasks (kind, id) WHERE node_id IS NULL" \
     -c "ANALYZE ax.tasks"
echo
echo "### with the opt-in index tasks_kind: ax-pg tasks list --state pending --kind rare --limit 100"
echo
"$tool" --db "$db" tasks list --state pending --kind rare --limit 100 --explain
