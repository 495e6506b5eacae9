#!/usr/bin/env bash
# deploy/systemd/*.service against systemd itself:
#   - `systemd-analyze verify` accepts both units with NO message at all (unknown keys or
#     bad values are only warnings there, so any output fails the test), after pointing
#     ExecStart at the binaries just built (verify checks that the program exists);
#   - `systemd-analyze security --offline` scores their exposure: coordinator <= 1.5,
#     worker <= 2.5 (0 = fully locked down, 10 = no hardening);
#   - a deliberately broken copy (misspelt key) is caught, so the check can fail.
# Exit 77 (CTest: skipped) when systemd-analyze is missing.
set -uo pipefail

src="${PARATUNE_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}"
bin="${PARATUNE_BIN_DIR:-}"
command -v systemd-analyze >/dev/null 2>&1 ||
  { echo "SKIP: systemd-analyze not installed (Debian package systemd)"; exit 77; }
[[ -n "$bin" && -x "$bin/paratune-coordinator" && -x "$bin/paratune-worker" ]] ||
  { echo "FAIL: PARATUNE_BIN_DIR ($bin) lacks the binaries"; exit 1; }

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
failures=0
check() {  # check DESCRIPTION COMMAND...: runs COMMAND, which must succeed silently.
  local desc="$1"; shift
  local out
  out="$("$@" 2>&1)"
  local rc=$?
  if [[ $rc -ne 0 || -n "$out" ]]; then
    echo "FAIL: $desc (exit $rc)"; echo "$out"; failures=$((failures + 1))
  else
    echo "ok: $desc"
  fi
}

for unit in paratune-coordinator.service paratune-worker.service; do
  grep -q '^ExecStart=/usr/local/bin/paratune-' "$src/deploy/systemd/$unit" ||
    { echo "FAIL: $unit: ExecStart does not start /usr/local/bin/paratune-*"; failures=$((failures + 1)); }
  sed "s|/usr/local/bin/|$bin/|" "$src/deploy/systemd/$unit" >"$tmp/$unit"
  check "systemd-analyze verify $unit" systemd-analyze verify --man=no "$tmp/$unit"
done

# `security --threshold` (tenths of the exposure level) fails when the exposure is above it.
exposure() {  # exposure UNIT THRESHOLD EXPECT(pass|fail)
  local unit="$1" threshold="$2" expect="$3" got=fail
  systemd-analyze security --offline=yes --threshold="$threshold" --no-pager "$tmp/$unit" \
    >/dev/null 2>&1 && got=pass
  if [[ "$got" == "$expect" ]]; then
    echo "ok: $unit exposure vs $threshold/10: $got"
  else
    echo "FAIL: $unit exposure vs $threshold/10: $got, expected $expect"
    systemd-analyze security --offline=yes --no-pager "$tmp/$unit" 2>&1 | grep -E '✗|Overall'
    failures=$((failures + 1))
  fi
}
exposure paratune-coordinator.service 15 pass
exposure paratune-worker.service 25 pass
exposure paratune-worker.service 5 fail   # the check can fail: nothing scores 0.5
for unit in paratune-coordinator.service paratune-worker.service; do
  systemd-analyze security --offline=yes --no-pager "$tmp/$unit" 2>/dev/null | grep 'Overall exposure'
done

# The check itself can fail: a misspelt key is reported.
mkdir "$tmp/broken"
sed 's/^Restart=on-failure/Restrat=on-failure/' "$tmp/paratune-worker.service" \
  >"$tmp/broken/paratune-worker.service"
if [[ -z "$(systemd-analyze verify --man=no "$tmp/broken/paratune-worker.service" 2>&1)" ]]; then
  echo "FAIL: verify did not report the misspelt key Restrat="; failures=$((failures + 1))
else
  echo "ok: a misspelt key is reported"
fi

[[ $failures -eq 0 ]] || exit 1
echo "PASS"
