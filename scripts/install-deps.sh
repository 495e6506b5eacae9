#!/usr/bin/env bash
# Installs the Debian 12 packages that ParaTune's build, tests and demo need.
# Idempotent: packages already present are skipped, and `apt-get update` runs at most once.
# Usage: scripts/install-deps.sh [--web]   (--web also installs Node.js/npm and Chromium)
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git ca-certificates ccache
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  nlohmann-json3-dev libcpp-httplib-dev libsqlite3-dev libgtest-dev libgmock-dev
  libbenchmark-dev libopenblas-dev libgloo-dev libcli11-dev libyaml-cpp-dev
  prometheus-cpp-dev
)
if [[ "${1:-}" == "--web" ]]; then
  packages+=(nodejs npm chromium)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
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
