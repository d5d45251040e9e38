#!/usr/bin/env bash
# Install dependencies, configure, build and run the test suite.
# The preset defaults to "default"; override with AX_PRESET=<preset>.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

preset="${AX_PRESET:-default}"

bash scripts/deps.sh
cmake --preset "$preset"
cmake --build --preset "$preset"
ctest --preset "$preset"
