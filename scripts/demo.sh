#!/usr/bin/env bash
# Installs what is missing, builds, and runs the ax tour (priorities, backpressure, adaptive pool).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/deps.sh
cmake --preset default
cmake --build --preset default --target ax_demo
exec build/default/examples/ax_demo
