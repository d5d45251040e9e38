#!/usr/bin/env bash
# Installs the Node.js producer's one dependency (`pg`, pinned by
# examples/producers/package-lock.json) into a build folder, as scripts/bench-pg.sh does for the
# peers: the source tree gets no node_modules. Idempotent: nothing happens when the folder already
# has this lock file's modules.
#   bash scripts/producers-deps.sh [FOLDER]     # default build/producers
# Exit status: 0 installed or up to date; 77 (a loud skip for ctest) when npm is missing (deps.sh
# installs it); npm's failure otherwise.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
dest="${1:-build/producers}"
if ! command -v npm >/dev/null 2>&1; then
    echo "producers-deps.sh: SKIPPED: npm not found (Debian: nodejs npm; scripts/deps.sh installs them)" >&2
    exit 77
fi
mkdir -p "$dest"
if cmp -s examples/producers/package-lock.json "$dest/package-lock.json" && [ -d "$dest/node_modules/pg" ]; then
    echo "producers-deps.sh: $dest/node_modules is up to date"
    exit 0
fi
cp examples/producers/package.json examples/producers/package-lock.json "$dest/"
(cd "$dest" && npm ci --no-audit --no-fund --loglevel=error)
echo "producers-deps.sh: installed pg into $dest/node_modules"
