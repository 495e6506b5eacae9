#!/usr/bin/env bash
# Installs the Debian 12 packages that ParaTune's build, tests and demo need.
# Idempotent: packages already present are skipped, and `apt-get update` runs at most once.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git ca-certificates ccache
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  nlohmann-json3-dev libcpp-httplib-dev libsqlite3-dev libgtest-dev libgmock-dev
  libbenchmark-dev libopenblas-dev libgloo-dev libcli11-dev libyaml-cpp-dev
  prometheus-cpp-dev prometheus
)
# Node.js/npm build the dashboard (web/), Chromium runs its browser test (tests/web/).
packages+=(nodejs npm chromium)
# Slurm + MUNGE run the one-node cluster of tests/deploy/slurm_test.sh; systemd-analyze checks
# the unit files in deploy/systemd/; shellcheck lints the deployment scripts.
packages+=(slurmctld slurmd slurm-client munge systemd shellcheck)

missing=()
for p in "${packages[@]}"; do
  # A NodeSource nodejs ships npm itself (and conflicts with Debian's npm package).
  if [[ "$p" == npm ]] && command -v npm >/dev/null 2>&1; then continue; fi
  if [[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" != *"install ok installed"* ]]; then
    missing+=("$p")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
