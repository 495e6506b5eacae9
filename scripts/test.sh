#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test (CTest: unit, e2e, web, gpu).
# gpu tests skip with a reason where no CUDA device exists.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
scripts/install-deps.sh
scripts/build.sh "$@"
scripts/build-web.sh
ctest --test-dir build --output-on-failure --parallel "$(nproc)" --timeout 900
echo "scripts/test.sh: finished in $(( $(date +%s) - start )) s"
