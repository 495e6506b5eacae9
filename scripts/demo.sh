#!/usr/bin/env bash
# Installs what is missing, builds, and runs ParaTune's main job on the embedded default
# (`paratune tune`: the coordinator logic and a local worker in one process, no servers):
#   1. a small GPT profiled for real on this machine's CPU (profile mode: measured layers
#      and all-reduce, composed into a ranking);
#   2. GPT-3 175B on 1024 A100-80GB ranked by the analytical model (model mode).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
# The dashboard is optional for the demo: without the npm registry it is skipped.
if ! scripts/build-web.sh; then
  echo "demo: the web dashboard was not built (see the npm error above); continuing" >&2
fi
db=build/demo.db
echo
echo "== paratune tune (profile mode): small GPT on 2 CPU ranks, measured on this machine =="
build/bin/paratune tune --spec deploy/examples/small-gpt-cpu-profile.yaml --db "$db"
echo
echo "== paratune tune (model mode): GPT-3 175B, 1024 x A100-80GB, batch 1536, sequence 2048 =="
build/bin/paratune tune --spec deploy/examples/gpt3-175b.yaml --db "$db"
echo
echo "Next: build/bin/paratune plan --spec deploy/examples/gpt3-175b.yaml --json | --csv;"
echo "      build/bin/paratune export --spec deploy/examples/gpt3-175b.yaml --format megatron;"
echo "      build/bin/paratune-coordinator --dashboard-dir web/dist  (dashboard on :8080)."
