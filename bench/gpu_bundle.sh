#!/usr/bin/env bash
# Packs what bench/gpu_check.sh runs into one relocatable archive, for a GPU machine that
# has the NVIDIA driver and CUDA 13's cuBLAS and NCCL but not this project's build
# dependencies (gRPC, protobuf, OpenBLAS, Gloo, ...):
#   bench/gpu_bundle.sh [--build DIR] [OUT.tar.xz]        (defaults: build, paratune-gpu.tar.xz)
# The archive holds paratune-gpu/{bin,tests,lib}: the CUDA tests and programs gpu_check.sh
# runs, stripped, and every shared library they load except the C/C++ runtime and CUDA's
# own libraries (cudart travels; cuBLAS, cuBLASLt and NCCL are the machine's), plus
# gpu_check.sh, the example specs it reads and run.sh. On the GPU machine:
#   tar xJf paratune-gpu.tar.xz && paratune-gpu/run.sh [gpu_check.sh arguments]
# run.sh finds cuBLAS and NCCL under /usr/local/cuda or a Python environment's nvidia
# packages (or $PARATUNE_CUDA_LIBS, colon-separated), lists any library still missing, then
# runs gpu_check.sh from the bundle.
set -euo pipefail
BUILD=build
OUT=paratune-gpu.tar.xz
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD=$2; shift 2 ;;
    -*) echo "gpu_bundle.sh: unknown argument $1" >&2; exit 2 ;;
    *) OUT=$1; shift ;;
  esac
done
src=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/gpu_programs.sh
source "$src/bench/gpu_programs.sh"
tests=("${GPU_TESTS[@]}")
bins=("${GPU_PROGRAMS[@]}")
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root=$stage/paratune-gpu
mkdir -p "$root"/{bin,tests,lib,bench,deploy/examples}
for t in "${tests[@]}"; do
  [[ -x "$BUILD/tests/$t" ]] || { echo "gpu_bundle.sh: $BUILD/tests/$t missing (a CUDA build?)" >&2; exit 1; }
  cp "$BUILD/tests/$t" "$root/tests/"
done
for b in "${bins[@]}"; do
  [[ -x "$BUILD/bin/$b" ]] || { echo "gpu_bundle.sh: $BUILD/bin/$b missing (a CUDA build?)" >&2; exit 1; }
  cp "$BUILD/bin/$b" "$root/bin/"
done
strip "$root"/bin/* "$root"/tests/*
# Every library the programs load, less the C/C++ runtime (the machine's is as new or newer)
# and CUDA's libraries that must match the machine's driver.
ldd "$root"/bin/* "$root"/tests/* | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
  grep -Ev '/(ld-linux[^/]*|libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|libcublas|libcublasLt|libnccl|libcuda)\.so' |
  while read -r lib; do cp -L "$lib" "$root/lib/"; done
cp "$src/bench/gpu_check.sh" "$src/bench/gpu_programs.sh" "$root/bench/"
cp "$src"/deploy/examples/*-verify.yaml "$root/deploy/examples/"
cat >"$root/run.sh" <<'EOF'
#!/usr/bin/env bash
# Runs bench/gpu_check.sh from this bundle (see bench/gpu_bundle.sh in the source tree).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
libs=$here/lib
extra=${PARATUNE_CUDA_LIBS:-}
for d in ${extra//:/ } /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
  /usr/local/cuda/lib \
  /opt/*/.venv/lib/python3*/site-packages/nvidia/*/lib /usr/local/lib/python3*/dist-packages/nvidia/*/lib; do
  [[ -d $d ]] && libs=$libs:$d
done
export LD_LIBRARY_PATH=$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
missing=$(ldd "$here"/bin/* "$here"/tests/* | grep 'not found' | sort -u)
[[ -n "$missing" ]] && { echo "run.sh: libraries not found (set PARATUNE_CUDA_LIBS):" >&2; echo "$missing" >&2; }
cd "$here" || exit 1
exec bench/gpu_check.sh --bin bin --tests tests "$@"
EOF
chmod +x "$root/run.sh"
tar cJf "$OUT" -C "$stage" paratune-gpu
echo "gpu_bundle.sh: $OUT ($(du -h "$OUT" | cut -f1)): ${#bins[@]} programs, ${#tests[@]} tests, $(find "$root/lib" -type f | wc -l) libraries"
