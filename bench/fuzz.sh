#!/usr/bin/env bash
# Fuzz runs of the spec parsers under ASan and UBSan: fuzz/*.cc built in their own build
# folder, each run for a bounded time from its committed seeds (fuzz/corpus/<target>/, and
# for the spec readers the malformed-input corpus tests/data/bad_specs/cases/), one
# summary line per target.
#
#   bench/fuzz.sh                 # 60 s per target
#   bench/fuzz.sh --time 10       # seconds per target
#   bench/fuzz.sh --build-dir DIR # default: build-fuzz next to the sources
#   bench/fuzz.sh --only spec_json_fuzz
#   bench/fuzz.sh --engine replay # g++ and fuzz/replay_main.cc even where clang exists
#   bench/fuzz.sh --seed 1        # libFuzzer's random seed (default: a new one each run);
#                                 # the same seed repeats the same inputs on the same code
#
# Engine: libFuzzer (clang with compiler-rt's libclang_rt.fuzzer) when it is installed;
# otherwise g++ -fsanitize=address,undefined with fuzz/replay_main.cc (the seeds, then
# random mutations of them, no coverage guidance). Nothing is installed.
# Exit status: 0 when no target crashed, leaked or hit a sanitizer report; 1 otherwise
# (the reproducer is left in the run folder, named in the output); 2 bad flags.
# Found inputs go to a scratch corpus; the committed seeds stay put.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
seconds=60
build_dir="${here}/build-fuzz"
only=""
engine=""
seed=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --time) seconds="$2"; shift 2 ;;
    --build-dir) build_dir="$2"; shift 2 ;;
    --only) only="$2"; shift 2 ;;
    --engine) engine="$2"; shift 2 ;;
    --seed) seed="$2"; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "fuzz.sh: unknown flag $1" >&2; exit 2 ;;
  esac
done
if [[ -n "${seed}" ]] && { ! [[ "${seed}" =~ ^[0-9]+$ ]] || [[ "${seed}" -eq 0 ]]; }; then
  echo "fuzz.sh: --seed must be a positive integer, got '${seed}'" >&2
  exit 2
fi
seed_flag=()
[[ -n "${seed}" ]] && seed_flag=(-seed="${seed}")
if ! [[ "${seconds}" =~ ^[0-9]+$ ]] || [[ "${seconds}" -eq 0 ]]; then
  echo "fuzz.sh: --time must be a positive number of seconds, got '${seconds}'" >&2
  exit 2
fi

if [[ -z "${engine}" ]]; then
  engine=replay
  if command -v clang++ >/dev/null 2>&1 &&
     ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
    engine=libfuzzer
  fi
fi
case "${engine}" in
  libfuzzer) cc=clang; cxx=clang++; coverage="-fsanitize=fuzzer-no-link" ;;
  replay) cc=gcc; cxx=g++; coverage="" ;;
  *) echo "fuzz.sh: --engine must be libfuzzer or replay, got '${engine}'" >&2; exit 2 ;;
esac
launcher=()
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi

mkdir -p "${build_dir}"
sanitize="-fsanitize=address,undefined ${coverage} -fno-omit-frame-pointer \
-fno-sanitize-recover=undefined"
cmake -S "${here}" -B "${build_dir}" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER="${cc}" -DCMAKE_CXX_COMPILER="${cxx}" "${launcher[@]}" \
  -DCMAKE_C_FLAGS="${sanitize}" -DCMAKE_CXX_FLAGS="${sanitize}" \
  -DPARATUNE_FUZZ=ON -DPARATUNE_FUZZ_ENGINE="${engine}" -DPARATUNE_CUDA=OFF \
  -DPARATUNE_BUILD_TESTS=OFF -DPARATUNE_BUILD_BENCH=OFF -DPARATUNE_WERROR=OFF \
  >"${build_dir}/fuzz-cmake.log" 2>&1 || { cat "${build_dir}/fuzz-cmake.log" >&2; exit 1; }

targets=()
for src in "${here}"/fuzz/*_fuzz.cc; do
  name="$(basename "${src}" .cc)"
  [[ -z "${only}" || "${only}" == "${name}" ]] && targets+=("${name}")
done
[[ ${#targets[@]} -gt 0 ]] || { echo "fuzz.sh: no target named '${only}'" >&2; exit 2; }
ninja -C "${build_dir}" -j2 "${targets[@]}" >"${build_dir}/fuzz-build.log" 2>&1 ||
  { tail -40 "${build_dir}/fuzz-build.log" >&2; exit 1; }

run_root="${build_dir}/runs/$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "${run_root}"
echo "# ${engine}, -fsanitize=address,undefined, ${seconds} s per target, ${cxx} $(${cxx} -dumpversion)${seed:+, seed ${seed}}"
printf '# %-24s %12s %10s %8s %8s %9s  %s\n' target runs exec/s crashes corpus peak_rss status
printf '# %-24s %12s %10s %8s %8s %9s  %s\n' "" count "1/s" count inputs MB ""
failed=0
total_runs=0
for name in "${targets[@]}"; do
  seeds=("${here}/fuzz/corpus/${name%_fuzz}")
  # The spec readers also start from every case of the malformed-input corpus.
  [[ "${name}" == spec_*_fuzz ]] && seeds+=("${here}/tests/data/bad_specs/cases")
  work="${run_root}/${name}"
  mkdir -p "${work}/corpus" "${work}/artifacts"
  log="${work}/log.txt"
  set +e
  ASAN_OPTIONS="detect_leaks=1:abort_on_error=0" \
  UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:abort_on_error=1" \
    "${build_dir}/bin/${name}" -max_total_time="${seconds}" -print_final_stats=1 "${seed_flag[@]}" \
      -rss_limit_mb=2048 -timeout=10 -max_len=65536 \
      -artifact_prefix="${work}/artifacts/" "${work}/corpus" "${seeds[@]}" >"${log}" 2>&1
  rc=$?
  set -e
  # A run that ended on a finding may print no stats: no match is not an error here.
  runs="$(grep -m1 'stat::number_of_executed_units' "${log}" | awk '{print $2}' || true)"
  rate="$(grep -m1 'stat::average_exec_per_sec' "${log}" | awk '{print $2}' || true)"
  rss="$(grep -m1 'stat::peak_rss_mb' "${log}" | awk '{print $2}' || true)"
  crashes="$(find "${work}/artifacts" -type f | wc -l)"
  inputs="$(find "${work}/corpus" -type f | wc -l)"
  status="ok"
  if [[ ${rc} -ne 0 || ${crashes} -ne 0 ]]; then
    status="FAILED (exit ${rc}; log ${log})"
    failed=1
  fi
  total_runs=$((total_runs + ${runs:-0}))
  printf '  %-24s %12s %10s %8s %8s %9s  %s\n' "${name}" "${runs:-?}" "${rate:-?}" "${crashes}" \
    "${inputs}" "${rss:-?}" "${status}"
done
if [[ ${failed} -eq 0 ]]; then
  echo "# fuzz: ${#targets[@]} targets, ${total_runs} runs, 0 crashes, 0 leaks (runs in ${run_root})"
else
  echo "# fuzz: FAILED: see the logs and artifacts under ${run_root}"
fi
exit ${failed}
