#!/usr/bin/env bash
# Workflows' figures (issue 29; docs/bench/pg-flows.md), on one throw-away PostgreSQL from
# scripts/pg-server.sh: bench/pg/flows.cpp alternates, round by round, N no-op tasks without
# dependencies with the flow triggers disabled (the acknowledgement path before migration 10) and
# enabled, and the same N tasks as one flow (GROUPS heads, each fanning out to N/GROUPS - 2 steps
# that fan in to one tail).
#   bash scripts/bench-flows.sh [ROUNDS=5] [N=10000] [GROUPS=100] [NODES=2] [WORKERS=4]
# Server settings through AX_PG_SETTINGS (pg-server.sh), e.g. AX_PG_SETTINGS="-c fsync=off".
# Diagnostics (bench/pg/flows.cpp's header; docs/bench/pg-flows.md, "Slow rounds"): AX_FLOWS_TRACE=1
# (a trace per side), AX_FLOWS_VACUUM_EMPTY=1 (vacuum the empty ax.tasks before each side),
# AX_FLOWS_SKIP_ACK=1 (leave out the acknowledgement statement's part).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cmake -S bench/pg -B build/bench-flows -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build/bench-flows --target ax_pg_flows >/dev/null
bash scripts/pg-server.sh -- bash -c "
    set -e
    createdb axflows
    build/bench-flows/ax_pg_flows \"\$AX_PG_CONNINFO dbname=axflows\" ${1:-5} ${2:-10000} ${3:-100} ${4:-2} ${5:-4}
"
