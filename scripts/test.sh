#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test (CTest: unit, e2e, web, gpu), then
# the fuzz targets for a fixed budget.
# gpu tests skip with a reason where no CUDA device exists.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
scripts/install-deps.sh
scripts/build.sh "$@"
scripts/build-web.sh
ctest --test-dir build --output-on-failure --parallel "$(nproc)" --timeout 900
# The fuzz targets under ASan/UBSan, 40 s each, in their own build folder (libFuzzer with
# clang, else g++ and fuzz/replay_main.cc); a crash, leak or sanitizer report fails the run.
# A fixed seed repeats the same inputs each run, so the outcome does not depend on chance;
# bench/fuzz.sh without --seed explores new ones.
bench/fuzz.sh --time 40 --build-dir build-fuzz --seed 1
echo "scripts/test.sh: finished in $(( $(date +%s) - start )) s"
