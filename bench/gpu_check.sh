#!/usr/bin/env bash
# The GPU checks in one run, for a machine with one CUDA device and a CUDA build:
#   1. the gpu-labelled tests (CUDA backend, MoE kernels, serving paged attention and KV
#      write, the served model and serving step, step runner, trainer), each against its
#      CPU twin;
#   2. bench/kernels/cuda_kernels: paged attention decode, KV write, MoE permute/unpermute
#      bandwidth against the device copy bandwidth;
#   3. layer_step: one GPT layer forward + backward in bf16 against cuBLAS;
#   4. paratune-train: a 24-layer 1.3B-class GPT step in bf16;
#   5. a coordinator, a CUDA worker, the 350M verify spec and the small MoE verify spec
#      (profile, top 3 trained) and the Llama 3.1 8B serving spec (serving steps profiled
#      in bf16, the best layout served by the serving loop), each on the device kind the
#      worker reports;
#   6. step_accuracy: the serving kernels' prefill and decode steps of Llama 3.1 8B in bf16
#      on the device against the inference step model for the device's kind;
#   7. serving_accuracy on the machine's host cores (the CPU serving kernels: dense,
#      expert-parallel and attention-DP layouts, profile composition against the loop).
#
#   bench/gpu_check.sh [--bin DIR] [--tests DIR] [--out DIR] [--verify-spec FILE]
#                      [--moe-verify-spec FILE|""] [--serving-verify-spec FILE|""]
#                      [--only verify] [--worker-backend cuda|cpu]
# Defaults: build/bin, build/tests, ./gpu-check, deploy/examples/gpt-350m-h100-verify.yaml,
# deploy/examples/moe-1xh100-verify.yaml,
# deploy/examples/llama3.1-8b-1xh100-serving-verify.yaml. Each step's log goes to OUT; the summary
# (one line per step, PASS/FAIL and its figures) is printed last. Exit 1 if a step failed.
set -uo pipefail

BIN=build/bin
TESTS=build/tests
OUT=gpu-check
SPEC=deploy/examples/gpt-350m-h100-verify.yaml
MOE_SPEC=deploy/examples/moe-1xh100-verify.yaml
SERVING_SPEC=deploy/examples/llama3.1-8b-1xh100-serving-verify.yaml
ONLY=
BACKEND=cuda
while [[ $# -gt 0 ]]; do
  case "$1" in
    --bin) BIN=$2; shift 2 ;;
    --tests) TESTS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --verify-spec) SPEC=$2; shift 2 ;;
    --moe-verify-spec) MOE_SPEC=$2; shift 2 ;;
    --serving-verify-spec) SERVING_SPEC=$2; shift 2 ;;
    --only) ONLY=$2; shift 2 ;;
    --worker-backend) BACKEND=$2; shift 2 ;;
    *) echo "gpu_check.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT"
SUMMARY=()
FAILED=0
step() {  # step NAME SECONDS COMMAND...: runs it with a limit, logs to OUT/NAME.log
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  local verdict=PASS
  [[ $rc -ne 0 ]] && verdict="FAIL (exit $rc)" && FAILED=1
  SUMMARY+=("$(printf '%-34s %s, %ds' "$name" "$verdict" $((SECONDS - t0)))")
  echo "== $name: $verdict"
  tail -n 25 "$OUT/$name.log"
}

if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,temperature.gpu \
    --format=csv >"$OUT/device.txt" 2>&1
  cat "$OUT/device.txt"
fi

if [[ -z "$ONLY" ]]; then

# shellcheck source=bench/gpu_programs.sh
source "$(dirname "$0")/gpu_programs.sh"
for t in "${GPU_TESTS[@]}"; do
  step "$t" 300 "$TESTS/$t" --gtest_brief=1
done
step cuda_kernels 120 "$BIN/cuda_kernels"
step layer_step 300 "$BIN/layer_step" --backend cuda --dtype bf16 --hidden 2048,4096,8192 \
  --seq 4096 --batch 1 --tp 1 --warmup 2 --iters 5
step moe_layer 120 "$BIN/moe_layer" --backend cuda --dtype bf16 --hidden 4096 --experts 16 \
  --topk 2 --ffn 1536 --tokens 4096 --ep 1 --routing dropless --iters 5
step paratune_train 300 "$BIN/paratune-train" --backend cuda --dtype bf16 --hidden 2304 \
  --heads 24 --vocab 51200 --layers 24 --seq 2048 --micro-batch 4 --micro-batches 4 --flash \
  --steps 4
fi

# The verify runs: a coordinator and a CUDA worker on this machine. Each spec names a device
# kind; it runs on the kind the worker reports (an H200 runs the H100 specs as h200-141gb).
DB=$(mktemp -d)/paratune.db
"$BIN/paratune-coordinator" --db "$DB" --bind 127.0.0.1 --grpc-port 50151 --http-port -1 \
  >"$OUT/coordinator.log" 2>&1 &
COORD=$!
"$BIN/paratune-worker" --coordinator 127.0.0.1:50151 --backend "$BACKEND" >"$OUT/worker.log" 2>&1 &
WORKER=$!
KIND=
for _ in $(seq 1 300); do  # the worker prints its kind once registered
  KIND=$(grep -o 'device kind [a-z0-9-]*' "$OUT/worker.log" | head -1 | cut -d' ' -f3)
  [[ -n "$KIND" ]] || ! kill -0 "$WORKER" 2>/dev/null && break
  sleep 0.1
done
echo "worker device kind: ${KIND:-unknown}"
verify() {  # verify NAME SPEC: submit, watch, then the results as text and JSON
  local name=$1 spec=$2
  if [[ -n "$KIND" ]]; then
    sed -E "s/^( *gpu: *).*/\1$KIND/" "$spec" >"$OUT/$name.yaml"
    spec=$OUT/$name.yaml
  fi
  step "$name" 400 "$BIN/paratune" submit --coordinator 127.0.0.1:50151 --spec "$spec" --watch
  local job
  job=$(grep -o 'job-[0-9a-f]*' "$OUT/$name.log" | head -1)
  if [[ -n "$job" ]]; then
    "$BIN/paratune" results --coordinator 127.0.0.1:50151 "$job" >"$OUT/${name}_results.txt" 2>&1
    "$BIN/paratune" results --coordinator 127.0.0.1:50151 --json "$job" \
      >"$OUT/${name}_results.json" 2>&1
    cat "$OUT/${name}_results.txt"
  fi
}
verify verify "$SPEC"
[[ -n "$MOE_SPEC" ]] && verify verify_moe "$MOE_SPEC"
[[ -n "$SERVING_SPEC" ]] && verify verify_serving "$SERVING_SPEC"
kill "$WORKER" "$COORD" 2>/dev/null
wait 2>/dev/null
# The serving kernels on the device (Llama 3.1 8B in bf16, every layer) against the step
# model for the device kind the worker reported.
[[ -z "$ONLY" ]] && step step_accuracy 400 "$BIN/step_accuracy" --backend cuda \
  --gpu "${KIND:-h100-sxm-80gb}" --preset llama3.1-8b --prefills 1x512,4x2048 \
  --decode_batches 1,32,128 --contexts 2048 --iters 5
[[ -z "$ONLY" ]] && step serving_host 300 "$BIN/serving_accuracy" --experts 8 --ep 2 \
  --attention_dp --rounds 3 --iters 15

echo
echo "# gpu_check summary ($(head -2 "$OUT/device.txt" 2>/dev/null | tail -1))"
printf '%s\n' "${SUMMARY[@]}"
exit $FAILED
