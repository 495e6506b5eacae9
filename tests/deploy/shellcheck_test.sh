#!/usr/bin/env bash
# Lints (shellcheck, all severities) the deployment's shell scripts and their tests, and the
# GPU check and its bundle. Exit 77
# (CTest: skipped) when shellcheck is not installed.
set -uo pipefail
src="${PARATUNE_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}"
command -v shellcheck >/dev/null 2>&1 ||
  { echo "SKIP: shellcheck not installed (Debian package shellcheck)"; exit 77; }
cd "$src" || exit 1
scripts=(deploy/slurm/paratune.sbatch deploy/container/runtime-packages.sh tests/deploy/*.sh
  bench/gpu_check.sh bench/gpu_bundle.sh bench/gpu_programs.sh)
shellcheck -x "${scripts[@]}" || exit 1
echo "PASS: ${#scripts[@]} scripts clean"
