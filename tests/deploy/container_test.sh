#!/usr/bin/env bash
# What of deploy/container/ can run without a container engine: runtime-packages.sh, which
# the Dockerfiles' build stages use to choose the runtime image's packages, on the binaries
# built here (Debian 12, the coordinator image's base):
#   - it succeeds for the coordinator + CLI and for the worker (every library they load is
#     owned by an installed package);
#   - the lists hold the runtime libraries we link (gRPC, protobuf, SQLite, yaml-cpp) and no
#     -dev package (a runtime image must not need one);
#   - it fails on a library no package owns, naming it.
# No `producer | grep -q` under pipefail: grep -q exits at the first match and the
# producer's SIGPIPE then fails the pipeline at random; grep reads a here-string instead.
set -uo pipefail
src="${PARATUNE_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}"
bin="${PARATUNE_BIN_DIR:-}"
command -v dpkg >/dev/null 2>&1 || { echo "SKIP: dpkg not found (not a Debian system)"; exit 77; }
[[ -n "$bin" && -x "$bin/paratune-coordinator" && -x "$bin/paratune-worker" && -x "$bin/paratune" ]] ||
  { echo "FAIL: PARATUNE_BIN_DIR ($bin) lacks the binaries"; exit 1; }
script="$src/deploy/container/runtime-packages.sh"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

coordinator="$(sh "$script" "$bin/paratune" "$bin/paratune-coordinator")" ||
  fail "runtime-packages.sh failed for the coordinator and the CLI"
worker="$(sh "$script" "$bin/paratune-worker")" || fail "runtime-packages.sh failed for the worker"
echo "coordinator image: $(echo "$coordinator" | wc -l) packages: $(echo "$coordinator" | tr '\n' ' ')"
echo "worker: $(echo "$worker" | wc -l) packages: $(echo "$worker" | tr '\n' ' ')"
for pattern in '^libgrpc\+\+' '^libprotobuf[0-9]' '^libsqlite3-0$' '^libyaml-cpp' '^libc6$'; do
  grep -Eq "$pattern" <<<"$coordinator" || fail "coordinator list lacks $pattern"
done
grep -Eq '^libgrpc\+\+' <<<"$worker" || fail "worker list lacks libgrpc++"
if echo "$coordinator $worker" | tr ' ' '\n' | grep -E -- '-dev$'; then
  fail "a -dev package in a runtime list"
fi
# A library that no package owns is an error that names it.
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cp "$(ldd "$bin/paratune" | awk '/libsqlite3/ {print $3}')" "$tmp/libsqlite3.so.0"
err="$(LD_LIBRARY_PATH="$tmp" sh "$script" "$bin/paratune" 2>&1 >/dev/null)" &&
  fail "runtime-packages.sh accepted a library no package owns"
[[ "$err" == *"no installed package owns $tmp/libsqlite3.so.0"* ]] || fail "unexpected error: $err"

[[ $failures -eq 0 ]] || exit 1
echo "PASS"
