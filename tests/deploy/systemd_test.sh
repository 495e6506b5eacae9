#!/usr/bin/env bash
# deploy/systemd/*.service against systemd itself:
#   - `systemd-analyze verify` accepts both units with NO message at all (unknown keys or
#     bad values are only warnings there, so any output fails the test), after pointing
#     ExecStart at the binaries just built (verify checks that the program exists);
#   - `systemd-analyze security --offline` scores their exposure: coordinator <= 1.5,
#     worker <= 2.5 (0 = fully locked down, 10 = no hardening);
#   - a deliberately broken copy (misspelt key) is caught, so the check can fail;
#   - both ExecStart lines, expanded as systemd would, run: the worker registers with the
#     coordinator using the credentials, both exit 0 on SIGTERM.
# Exit 77 (CTest: skipped) when systemd-analyze is missing.
set -uo pipefail

src="${PARATUNE_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}"
bin="${PARATUNE_BIN_DIR:-}"
command -v systemd-analyze >/dev/null 2>&1 ||
  { echo "SKIP: systemd-analyze not installed (Debian package systemd)"; exit 77; }
[[ -n "$bin" && -x "$bin/paratune-coordinator" && -x "$bin/paratune-worker" ]] ||
  { echo "FAIL: PARATUNE_BIN_DIR ($bin) lacks the binaries"; exit 1; }

tmp="$(mktemp -d)"
coordinator_pid=""
worker_pid=""
# Programs still running when a check fails are ours: stop them by pid.
stop_all() {
  local pid
  for pid in $worker_pid $coordinator_pid; do kill -KILL "$pid" 2>/dev/null; done
  rm -rf "$tmp"
}
trap stop_all EXIT
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

# --- the ExecStart lines run ---------------------------------------------------------------
# Without systemd as PID 1 the units cannot be started here, so the test expands their
# ExecStart the way systemd does and runs that: Environment= defaults, then the env file's
# overrides; ${VAR} is one word, a bare $VAR splits on spaces; %S is the state root, %C the
# cache root, $CREDENTIALS_DIRECTORY the folder of the LoadCredential= copies (named by id).
# The coordinator must come up, accept the worker with the worker token and answer the CLI
# with the client token.
# expand UNIT OVERRIDES...: prints the expanded command, one word per line.
expand() {
  local unit="$1"; shift
  declare -A env=()
  local kv word out=() value
  while IFS= read -r kv; do env["${kv%%=*}"]="${kv#*=}"; done < <(sed -n 's/^Environment=//p' "$unit")
  for kv in "$@"; do env["${kv%%=*}"]="${kv#*=}"; done
  env[CREDENTIALS_DIRECTORY]="$tmp/credentials"
  # shellcheck disable=SC2013  # words, not lines: the command line splits on spaces
  for word in $(sed -n 's/^ExecStart=//p' "$unit"); do
    word="${word//%S/$tmp/state}"
    word="${word//%C/$tmp/cache}"
    if [[ "$word" =~ ^\$([A-Z_]+)$ ]]; then
      # shellcheck disable=SC2206  # systemd splits a bare $VAR on spaces
      out+=(${env[${BASH_REMATCH[1]}]:-})
      continue
    fi
    while [[ "$word" =~ \$\{([A-Z_]+)\} ]]; do
      value="${env[${BASH_REMATCH[1]}]:-}"
      word="${word/"${BASH_REMATCH[0]}"/$value}"
    done
    out+=("$word")
  done
  printf '%s\n' "${out[@]}"
}
mkdir -p "$tmp/state/paratune" "$tmp/credentials"
head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/credentials/client-token"
head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/credentials/worker-token"
mapfile -t coordinator_cmd < <(expand "$tmp/paratune-coordinator.service" \
  PARATUNE_BIND=127.0.0.1 PARATUNE_GRPC_PORT=0 PARATUNE_HTTP_PORT=0 \
  "PARATUNE_COORDINATOR_ARGS=--port-file $tmp/ports --heartbeat-interval-ms 300")
echo "coordinator: ${coordinator_cmd[*]}"
"${coordinator_cmd[@]}" >"$tmp/coordinator.log" 2>&1 &
coordinator_pid=$!
# Deadlines in seconds, not counts of polls, and generous ones: CI runs this next to other
# tests on two loaded cores. A coordinator that exits ends the wait at once.
deadline=$((SECONDS + 60))
while [[ ! -s "$tmp/ports" && $SECONDS -lt $deadline ]] && kill -0 "$coordinator_pid" 2>/dev/null; do
  sleep 0.1
done
read -r grpc_port _ <"$tmp/ports" 2>/dev/null
if [[ -z "${grpc_port:-}" ]]; then
  echo "FAIL: the coordinator's ExecStart did not start:"; cat "$tmp/coordinator.log"
  failures=$((failures + 1))
else
  mapfile -t worker_cmd < <(expand "$tmp/paratune-worker.service" \
    "PARATUNE_COORDINATOR=127.0.0.1:$grpc_port" PARATUNE_BACKEND=cpu \
    "PARATUNE_WORKER_ARGS=--devices 0 --name systemd-test --lease-wait-ms 300")
  echo "worker: ${worker_cmd[*]}"
  "${worker_cmd[@]}" >"$tmp/worker.log" 2>&1 &
  worker_pid=$!
  listed=""
  deadline=$((SECONDS + 60))
  while [[ $SECONDS -lt $deadline ]]; do
    listed="$("$bin/paratune" workers --coordinator "127.0.0.1:$grpc_port" \
      --token-file "$tmp/credentials/client-token" 2>&1)"
    [[ "$listed" == *systemd-test* ]] && break
    sleep 0.1
  done
  if [[ "$listed" == *systemd-test* && -s "$tmp/state/paratune/paratune.db" ]]; then
    echo "ok: the expanded ExecStart lines run: the worker registered, the database is in %S/paratune"
  else
    echo "FAIL: the worker did not register through the units' command lines: $listed"
    cat "$tmp/coordinator.log" "$tmp/worker.log"
    failures=$((failures + 1))
  fi
  kill -TERM "$worker_pid" 2>/dev/null
  wait "$worker_pid"
  worker_status=$?
  worker_pid=""
  [[ $worker_status -eq 0 ]] || { echo "FAIL: the worker exited $worker_status on SIGTERM"; failures=$((failures + 1)); }
fi
kill -TERM "$coordinator_pid" 2>/dev/null
wait "$coordinator_pid"
coordinator_status=$?
coordinator_pid=""
[[ $coordinator_status -eq 0 ]] ||
  { echo "FAIL: the coordinator exited $coordinator_status on SIGTERM"; failures=$((failures + 1)); }

[[ $failures -eq 0 ]] || exit 1
echo "PASS"
