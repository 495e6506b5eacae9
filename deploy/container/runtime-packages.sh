#!/bin/sh
# Prints the Debian/Ubuntu packages that own the shared libraries the given binaries load,
# one per line, sorted: what a runtime image must install for them. The Dockerfiles' build
# stages run it; tests/deploy/container_test.sh runs it on the binaries built here.
# Fails naming the library when no installed package owns it. Libraries ldd cannot find
# (e.g. libcuda.so.1, which the NVIDIA container toolkit mounts at run time) are skipped, and
# so are the CUDA toolkit's own libraries (/usr/local/cuda*: cuBLAS, cudart, NCCL), which
# the worker's nvidia/cuda runtime base image provides and no Debian package owns.
set -eu
[ $# -gt 0 ] || { echo "usage: $0 BINARY..." >&2; exit 2; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
ldd "$@" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | grep -v '^/usr/local/cuda' |
  sort -u >"$work/libs"
# dpkg knows some files by their pre-merged-/usr path (/lib/...), alternatives-managed ones
# (libblas, libopenblas) only by their real path: ask for every spelling, in one dpkg call
# (each call reads the whole database).
while read -r lib; do
  real="$(realpath "$lib")"
  printf '%s\t%s\n%s\t%s\n%s\t%s\n%s\t%s\n' "$lib" "$lib" "$lib" "$real" \
    "$lib" "${lib#/usr}" "$lib" "${real#/usr}"
done <"$work/libs" | sort -u >"$work/candidates"
# shellcheck disable=SC2046  # one argument per candidate path (no spaces in library paths)
dpkg -S $(cut -f2 "$work/candidates" | sort -u) 2>/dev/null | grep -v '^diversion ' >"$work/owned" || true
# "pkg[:arch][, pkg2[:arch]]: /path"
awk -F': ' '{print $NF}' "$work/owned" | sort -u >"$work/owned-paths"
missing=0
while read -r lib; do
  if ! awk -F'\t' -v lib="$lib" '$1 == lib {print $2}' "$work/candidates" |
       grep -qxF -f - "$work/owned-paths"; then
    echo "runtime-packages: no installed package owns $lib" >&2
    missing=1
  fi
done <"$work/libs"
[ "$missing" -eq 0 ] || exit 1
sed 's/: [^:]*$//' "$work/owned" | tr ',' '\n' | sed 's/^ *//; s/:.*$//' | sort -u
