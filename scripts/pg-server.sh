#!/usr/bin/env bash
# Throw-away PostgreSQL server for ax's tests, demo and benchmarks.
#
#   bash scripts/pg-server.sh -- COMMAND [ARGS...]   start a server, run COMMAND against it, stop it
#   bash scripts/pg-server.sh                        start a server, print its conninfo, stop on Ctrl-C
#
# The server is initdb'ed into a fresh temporary folder, listens on a Unix socket in that folder and
# on 127.0.0.1 at a random free port (so parallel helpers never collide), and is always stopped and
# removed when this script exits, whether COMMAND passed, failed or was interrupted.
# PostgreSQL refuses to run as root: as root the server runs as the unprivileged OS user
# $AX_PG_USER (default axpg), created on first use and reused afterwards.
#
# COMMAND sees:
#   AX_PG_CONNINFO   a libpq connection string for the database "postgres" (socket, trust auth)
#   AX_PG_CTL        a command that takes pg_ctl actions, e.g. `$AX_PG_CTL restart` (tests use it to
#                    restart the server while nodes run)
#   PGHOST PGPORT PGUSER PGDATABASE   the same target, for psql
# Extra server settings: AX_PG_SETTINGS="-c fsync=off -c shared_buffers=256MB" (default: initdb's).
# Exit status: COMMAND's; 75 if no server could be started (the message says why).
set -euo pipefail

pg_user="${AX_PG_USER:-axpg}"
bindir="${AX_PG_BINDIR:-}"
if [ -z "$bindir" ]; then
    for d in /usr/lib/postgresql/*/bin; do [ -x "$d/initdb" ] && bindir="$d"; done
fi
if [ -z "$bindir" ] && command -v initdb >/dev/null 2>&1; then bindir="$(dirname "$(command -v initdb)")"; fi
if [ -z "$bindir" ] || [ ! -x "$bindir/initdb" ]; then
    echo "pg-server.sh: no PostgreSQL server binaries (initdb) found; install the Debian 'postgresql' package" >&2
    exit 75
fi

[ "${1:-}" = "--" ] && shift

as_user=()
if [ "$(id -u)" -eq 0 ]; then
    if ! id "$pg_user" >/dev/null 2>&1; then
        useradd --system --no-create-home --shell /usr/sbin/nologin "$pg_user" 2>/dev/null \
            || useradd -r -M -s /bin/false "$pg_user"
    fi
    as_user=(runuser -u "$pg_user" --)
    run_user="$pg_user"
else
    run_user="$(id -un)"
fi

dir="$(mktemp -d /tmp/ax-pg.XXXXXX)"
chmod 755 "$dir"
mkdir "$dir/data" "$dir/sock" "$dir/log"
[ "${#as_user[@]}" -eq 0 ] || chown "$pg_user" "$dir/data" "$dir/sock" "$dir/log"
chmod 700 "$dir/data"

cleanup() {
    local rc=$?
    if [ -f "$dir/data/postmaster.pid" ]; then
        "${as_user[@]}" "$bindir/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
    fi
    rm -rf "$dir"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if ! "${as_user[@]}" "$bindir/initdb" -D "$dir/data" -U postgres --auth=trust --no-sync -E UTF8 \
        >"$dir/log/initdb.log" 2>&1; then
    echo "pg-server.sh: initdb failed:" >&2
    cat "$dir/log/initdb.log" >&2
    exit 75
fi

started=""
for _ in 1 2 3 4 5 6 7 8; do
    port=$((20000 + RANDOM % 40000))
    # Skip ports someone already listens on; a race with another starter just fails the start below.
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then continue; fi
    opts="-p $port -k $dir/sock -c listen_addresses=127.0.0.1 ${AX_PG_SETTINGS:-}"
    if "${as_user[@]}" "$bindir/pg_ctl" -D "$dir/data" -l "$dir/log/server.log" -o "$opts" -w -t 60 start \
            >/dev/null 2>&1; then
        started=1
        break
    fi
done
if [ -z "$started" ]; then
    echo "pg-server.sh: the server did not start; its log:" >&2
    cat "$dir/log/server.log" >&2 2>/dev/null || true
    exit 75
fi

# A ctl script so callers can restart the server (its options are remembered by pg_ctl).
cat >"$dir/ctl.sh" <<CTL
#!/usr/bin/env bash
exec ${as_user[*]} "$bindir/pg_ctl" -D "$dir/data" -l "$dir/log/server.log" -w -t 60 -m fast "\$@"
CTL
chmod 755 "$dir/ctl.sh"

export AX_PG_CONNINFO="host=$dir/sock port=$port user=postgres dbname=postgres"
export AX_PG_CTL="$dir/ctl.sh"
export AX_PG_DIR="$dir"
export PGHOST="$dir/sock" PGPORT="$port" PGUSER=postgres PGDATABASE=postgres
echo "pg-server.sh: PostgreSQL $("$bindir/postgres" --version | awk '{print $3}') as $run_user on $dir/sock and 127.0.0.1:$port"
echo "pg-server.sh: AX_PG_CONNINFO='$AX_PG_CONNINFO'"

if [ "$#" -eq 0 ]; then
    echo "pg-server.sh: running until interrupted (Ctrl-C stops and removes it)"
    while :; do sleep 3600; done
fi
rc=0
"$@" || rc=$?
exit "$rc"
