#!/usr/bin/env bash
# Idempotent installer for ax's build/test dependencies on Debian/Ubuntu.
# Usage: scripts/deps.sh [extra-package ...]
set -euo pipefail

packages=(
    build-essential cmake ninja-build g++ clang
    # libFuzzer and the clang sanitizer runtimes (scripts/fuzz.sh, the tsan/asan presets)
    libclang-rt-14-dev
    catch2 libbenchmark-dev libfmt-dev libtbb-dev libasio-dev
    # ax::pg (libpq) and the throw-away server its tests run against (scripts/pg-server.sh)
    libpq-dev postgresql
    # the tz database (TZif files): recurring schedules' named time zones and test_cron's DST cases
    tzdata
    # ax::http (cpp-httplib, found through pkg-config)
    libcpp-httplib-dev pkg-config
    # nlohmann-json: ax::http's JSON snapshot and event log (and the Prometheus API answers the
    # scrape test parses)
    nlohmann-json3-dev
    # headless Chromium: test_dashboard loads the live dashboard page and takes its screenshot;
    # pg_console_browser drives the cluster console through the DevTools protocol (with python3
    # below and psql from postgresql above)
    chromium
    # promtool (checks the exposition format) and the Prometheus server the http tests scrape with
    prometheus
    # scripts/check-doc-refs.py (ctest label docs: no doc names a file or target that is gone)
    python3
    # ax::pg_pqxx (include/ax/pg/pqxx.hpp: enqueue in a libpqxx transaction) and its test
    libpqxx-dev
    # the Python producer of examples/producers (ctest pg_producer_python)
    python3-psycopg2
    "$@"
)
# The Node.js producer of examples/producers (ctest pg_producer_node; `pg` itself comes from npm
# through scripts/producers-deps.sh). Only when missing: a NodeSource nodejs carries its own npm,
# which Debian's npm package would conflict with.
command -v node >/dev/null 2>&1 || packages+=(nodejs)
command -v npm >/dev/null 2>&1 || packages+=(npm)

# No pipe: with pipefail, `dpkg -s | grep -q` failed whenever grep quit before dpkg finished
# writing (SIGPIPE), and an installed package read as missing now and then.
is_installed() {
    [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" = "install ok installed" ]
}

missing=()
for pkg in "${packages[@]}"; do
    if ! is_installed "$pkg"; then
        missing+=("$pkg")
    fi
done

if [ "${#missing[@]}" -eq 0 ]; then
    echo "deps.sh: all ${#packages[@]} packages already installed"
    exit 0
fi

echo "deps.sh: missing packages: ${missing[*]}"

fail() {
    echo "deps.sh: ERROR: $1" >&2
    echo "deps.sh: please install these packages manually: ${missing[*]}" >&2
    exit 1
}

command -v apt-get >/dev/null 2>&1 || fail "apt-get not found (not a Debian-based system?)"

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || fail "not running as root and sudo is not available"
    SUDO=(sudo)
fi

export DEBIAN_FRONTEND=noninteractive
if ! "${SUDO[@]}" apt-get update; then
    echo "deps.sh: warning: apt-get update failed; trying to install from cached package lists" >&2
fi
"${SUDO[@]}" apt-get install -y --no-install-recommends "${missing[@]}" \
    || fail "apt-get install failed"

still_missing=()
for pkg in "${missing[@]}"; do
    is_installed "$pkg" || still_missing+=("$pkg")
done
if [ "${#still_missing[@]}" -ne 0 ]; then
    missing=("${still_missing[@]}")
    fail "packages still not installed after apt-get install"
fi
echo "deps.sh: installed ${#missing[@]} package(s)"
