#!/usr/bin/env bash
# Installs what is missing, builds, and runs ParaTune's main job on the embedded default:
# the planner ranks layouts for GPT-3 175B on 1024 A100-80GB.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
scripts/build-web.sh
echo
echo "== paratune plan: GPT-3 175B, 1024 x A100-80GB, global batch 1536, sequence 2048 =="
build/bin/paratune plan --spec deploy/examples/gpt3-175b.yaml --top 10
