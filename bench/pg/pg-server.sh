#!/usr/bin/env bash
# A throw-away PostgreSQL 15 for the distributed benchmark: initdb defaults (nothing tuned,
# fsync and synchronous_commit on), trust auth, 127.0.0.1 on a random free port, data in a
# temporary folder. PostgreSQL refuses to run as root, so as root the server runs as the
# unprivileged `postgres` user (created if missing); otherwise as the calling user.
#
#   source bench/pg/pg-server.sh && pg_bench_server_start   # sets PGHOST PGPORT PGUSER PG_BENCH_DIR
#   pg_bench_server_stop                                    # also installed as an EXIT trap
#
# The only setting added to initdb's defaults is shared_preload_libraries=pg_stat_statements
# (track=top), which the benchmark reads to count statements per task; it changes no
# durability or memory setting.

pg_bench_bindir() {
    local d
    for d in /usr/lib/postgresql/15/bin /usr/lib/postgresql/*/bin; do
        if [ -x "$d/initdb" ]; then
            echo "$d"
            return 0
        fi
    done
    command -v initdb >/dev/null 2>&1 && dirname "$(command -v initdb)" && return 0
    echo "pg-server.sh: ERROR: no initdb found (install Debian postgresql-15)" >&2
    return 1
}

pg_bench_as_owner() {
    if [ "$(id -u)" -eq 0 ]; then
        runuser -u "$PG_BENCH_OWNER" -- "$@"
    else
        "$@"
    fi
}

pg_bench_free_port() {
    node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'
}

pg_bench_server_start() {
    PG_BENCH_BIN=$(pg_bench_bindir) || return 1
    if [ "$(id -u)" -eq 0 ]; then
        PG_BENCH_OWNER=postgres
        if ! id "$PG_BENCH_OWNER" >/dev/null 2>&1; then
            useradd --system --no-create-home --shell /usr/sbin/nologin "$PG_BENCH_OWNER" || return 1
        fi
    else
        PG_BENCH_OWNER=$(id -un)
    fi
    PG_BENCH_DIR=$(mktemp -d /tmp/ax-bench-pg.XXXXXX) || return 1
    chmod 755 "$PG_BENCH_DIR"
    [ "$(id -u)" -eq 0 ] && chown "$PG_BENCH_OWNER" "$PG_BENCH_DIR"
    trap pg_bench_server_stop EXIT
    trap 'exit 130' INT TERM
    pg_bench_as_owner "$PG_BENCH_BIN/initdb" -D "$PG_BENCH_DIR/data" -U postgres -A trust \
        >"$PG_BENCH_DIR/initdb.log" 2>&1 || {
        cat "$PG_BENCH_DIR/initdb.log" >&2
        return 1
    }
    local attempt
    for attempt in 1 2 3 4 5; do
        PGPORT=$(pg_bench_free_port) || return 1
        if pg_bench_as_owner "$PG_BENCH_BIN/pg_ctl" -D "$PG_BENCH_DIR/data" -w -t 60 \
            -l "$PG_BENCH_DIR/server.log" \
            -o "-p $PGPORT -c listen_addresses=127.0.0.1 -k $PG_BENCH_DIR -c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=top" \
            start >/dev/null; then
            export PGHOST=127.0.0.1 PGPORT PGUSER=postgres PG_BENCH_DIR PG_BENCH_BIN
            echo "pg-server.sh: PostgreSQL $("$PG_BENCH_BIN/postgres" --version | awk '{print $3}') on 127.0.0.1:$PGPORT (data $PG_BENCH_DIR/data, owner $PG_BENCH_OWNER)"
            return 0
        fi
        tail -5 "$PG_BENCH_DIR/server.log" >&2 # most likely the port was taken meanwhile
    done
    return 1
}

pg_bench_server_stop() {
    if [ -n "${PG_BENCH_DIR:-}" ] && [ -d "$PG_BENCH_DIR" ]; then
        if [ -f "$PG_BENCH_DIR/data/postmaster.pid" ]; then
            pg_bench_as_owner "$PG_BENCH_BIN/pg_ctl" -D "$PG_BENCH_DIR/data" -m immediate -w stop \
                >/dev/null 2>&1 || true
        fi
        rm -rf "$PG_BENCH_DIR"
        echo "pg-server.sh: stopped and removed $PG_BENCH_DIR"
        PG_BENCH_DIR=
    fi
}
