#!/usr/bin/env bash
# deploy/slurm/paratune.sbatch on a REAL one-node Slurm cluster, built in a temp dir:
# munged (fresh key), slurmctld and slurmd (-D, state and spool in the temp dir, proctrack/
# pgid and task/none: no cgroups needed) on 127.0.0.1. Then:
#   1. sbatch starts the coordinator and one worker; the address file appears and the job's
#      output prints the same address;
#   2. the worker registers (named after the node), /healthz answers on the HTTP port;
#   3. `paratune submit` + `paratune watch` run a tiny profile job (cluster.gpu: cpu) to
#      SUCCEEDED with every ranked layout measured, with bearer tokens on both sides;
#   4. `scancel` stops it cleanly: the job ends, the worker deregisters ("stopping"), the
#      coordinator logs its shutdown, the address file is removed and no process of the
#      job is left;
#   5. a second job on the same state dir returns the first job's results unchanged and
#      serves the spec from the profile cache; `scancel --batch --signal=TERM` (what
#      --signal=B:TERM@120 does before the time limit) stops it in order: the worker
#      deregisters before the coordinator shuts down, the job ends COMPLETED 0:0;
#   6. a job whose coordinator cannot start (a bad flag) ends FAILED 1:0 and says why;
# then slurmd, slurmctld and munged are stopped. Exit 77 (CTest: skipped) names what is
# missing when Slurm or MUNGE is not installed or we are not root (SlurmUser=root).
set -uo pipefail

skip() { echo "SKIP: $*"; exit 77; }
fail() {
  echo "FAIL: $*"
  for f in "$tmp"/job.out "$tmp"/job2.out "$tmp"/job3.out "$tmp"/log/*; do
    [[ -f "$f" ]] && { echo "----- $f (last 40 lines)"; tail -n 40 "$f"; }
  done
  exit 1
}

bin="${PARATUNE_BIN_DIR:-}"
src="${PARATUNE_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}"
[[ -n "$bin" && -x "$bin/paratune-coordinator" && -x "$bin/paratune-worker" && -x "$bin/paratune" ]] ||
  { echo "FAIL: PARATUNE_BIN_DIR ($bin) lacks the binaries"; exit 1; }
PATH="$PATH:/usr/sbin:/sbin"
for tool in munged slurmctld slurmd sbatch squeue scancel sinfo; do
  command -v "$tool" >/dev/null 2>&1 ||
    skip "$tool not installed (scripts/install-deps.sh installs slurmctld slurmd slurm-client munge)"
done
[[ $(id -u) -eq 0 ]] || skip "slurmd must run as root (SlurmUser=root in the test cluster)"

tmp="$(mktemp -d /tmp/paratune-slurm.XXXXXX)"
chmod 755 "$tmp"
mkdir -p "$tmp"/{munge,state,spool,log,run}
chmod 700 "$tmp/munge"
daemon_pids=()
# The processes of this test's cluster that are not its daemons: slurmstepd, srun and the
# paratune programs of the job all carry SLURM_CONF=<our slurm.conf> in their environment.
job_processes() {
  local pid
  for pid in $(pgrep '^(slurmstepd|srun|paratune-)' 2>/dev/null); do
    grep -qx "SLURM_CONF=$tmp/slurm.conf" <<<"$(tr '\0' '\n' 2>/dev/null <"/proc/$pid/environ")" &&
      echo "$pid"
  done
}
cleanup() {
  local pid
  # The job first (when a check failed while it ran): its steps need slurmd to finish.
  if [[ -n "${jobid:-}" && -n "$(squeue -h -j "$jobid" -o %T 2>/dev/null)" ]]; then
    scancel "$jobid" 2>/dev/null
    for _ in $(seq 1 150); do
      [[ -z "$(squeue -h -j "$jobid" -o %T 2>/dev/null)" ]] && break
      sleep 0.2
    done
  fi
  for pid in "${daemon_pids[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${daemon_pids[@]}"; do
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  for pid in $(job_processes); do kill -KILL "$pid" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT

# A free TCP port on 127.0.0.1 (nothing answers a connect), below the kernel's ephemeral
# range: a port from that range can be handed to another test's connection or port-0
# listener (tests run in parallel) between this check and the daemon's bind.
ephemeral_low="$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null)"
[[ "$ephemeral_low" =~ ^[0-9]+$ && "$ephemeral_low" -gt 21000 ]] || ephemeral_low=32768
free_port() {
  local p
  for _ in $(seq 1 100); do
    p=$((20000 + RANDOM % (ephemeral_low - 20000)))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return; fi
  done
  echo 0
}
# wait_for SECONDS COMMAND...: polls every 0.2 s until COMMAND succeeds. The limits are
# generous (CI runs this next to other tests on two loaded cores); a wait ends as soon as
# its condition holds.
wait_for() {
  local deadline=$((SECONDS + $1)); shift
  until "$@"; do
    [[ $SECONDS -ge $deadline ]] && return 1
    sleep 0.2
  done
}

# --- MUNGE -------------------------------------------------------------------------------
head -c 1024 /dev/urandom >"$tmp/munge/munge.key"
chmod 400 "$tmp/munge/munge.key"
munged --foreground --force --key-file="$tmp/munge/munge.key" \
  --socket="$tmp/munge/munge.socket" --pid-file="$tmp/munge/munged.pid" \
  --log-file="$tmp/log/munged.log" --seed-file="$tmp/munge/munged.seed" >"$tmp/log/munged.out" 2>&1 &
daemon_pids+=($!)
munge_up() { [[ -S "$tmp/munge/munge.socket" ]]; }
wait_for 30 munge_up || fail "munged did not start"

# --- Slurm: one node, 2 CPUs, on 127.0.0.1 -------------------------------------------------
ctld_port="$(free_port)"
slurmd_port="$(free_port)"
while [[ "$slurmd_port" == "$ctld_port" ]]; do slurmd_port="$(free_port)"; done
export SLURM_CONF="$tmp/slurm.conf"
cat >"$SLURM_CONF" <<CONF
ClusterName=paratunetest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$tmp/munge/munge.socket
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/run/slurmctld.pid
SlurmdPidFile=$tmp/run/slurmd.pid
SlurmctldLogFile=$tmp/log/slurmctld.log
SlurmdLogFile=$tmp/log/slurmd.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
ReturnToService=2
KillWait=20
InactiveLimit=0
MinJobAge=300
NodeName=localhost NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=test Nodes=localhost Default=YES MaxTime=INFINITE State=UP
CONF
slurmctld -D -i -f "$SLURM_CONF" >"$tmp/log/slurmctld.out" 2>&1 &
daemon_pids+=($!)
slurmd -D -N localhost -f "$SLURM_CONF" >"$tmp/log/slurmd.out" 2>&1 &
slurmd_pid=$!
daemon_pids+=("$slurmd_pid")
node_idle() { [[ "$(sinfo -h -N -o %t 2>/dev/null)" == idle ]]; }
if ! wait_for 120 node_idle; then
  # A bare chroot (debootstrap) has no /etc/hosts entry for its own host name; MUNGE and
  # Slurm then cannot tell where credentials come from and the node never registers.
  getent hosts "$(hostname)" >/dev/null ||
    skip "this host's name '$(hostname)' does not resolve (no /etc/hosts entry), so slurmd cannot register"
  fail "the node did not become idle: $(sinfo -N 2>&1)"
fi
echo "slurm: node idle (slurmctld :$ctld_port, slurmd :$slurmd_port)"

# --- the job ---------------------------------------------------------------------------
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/client.token"
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/worker.token"
export PARATUNE_BIN_DIR="$bin"
export PARATUNE_STATE_DIR="$tmp/state-paratune"
export PARATUNE_ADDRESS_FILE="$tmp/coordinator.address"
export PARATUNE_GRPC_PORT=0 PARATUNE_HTTP_PORT=0   # free ports (tests run in parallel)
# The script advertises `hostname`; where that name does not resolve (some CI containers),
# the one node is 127.0.0.1.
getent hosts "$(hostname)" >/dev/null 2>&1 || export PARATUNE_HOST=127.0.0.1
export PARATUNE_BACKEND=cpu PARATUNE_DEVICES=0,1
export PARATUNE_CLIENT_TOKEN_FILE="$tmp/client.token"
export PARATUNE_WORKER_TOKEN_FILE="$tmp/worker.token"
export PARATUNE_COORDINATOR_ARGS="--profile-warmup 1 --profile-iters 2 --heartbeat-interval-ms 300"
export PARATUNE_WORKER_ARGS="--lease-wait-ms 500 --stop-grace-s 5"
# start_job OUTPUT: sbatch the script; sets jobid, address, http_url once a worker is there.
start_job() {
  jobid="$(cd "$tmp" && sbatch --parsable --nodes=1 --output="$1" \
    "$src/deploy/slurm/paratune.sbatch")" || fail "sbatch refused the script"
  jobid="${jobid%%;*}"
  echo "slurm: submitted job $jobid"
  wait_for 120 has_address ||
    fail "no address file after 120 s (job state: $(squeue -h -j "$jobid" -o %T))"
  address="$(cat "$PARATUNE_ADDRESS_FILE")"
  echo "slurm: coordinator at $address"
  [[ "$address" =~ ^[^:]+:[0-9]+$ ]] || fail "address file holds '$address', not HOST:PORT"
  [[ "$(squeue -h -j "$jobid" -o %T)" == RUNNING ]] || fail "job $jobid is not RUNNING"
  grep -q "coordinator listening: gRPC $address" "$1" ||
    fail "the job output does not print the address $address"
  http_url="$(sed -n 's/.*dashboard and REST: \(http:[^ ]*\)$/\1/p' "$1")"
  [[ -n "$http_url" ]] || fail "the job output does not print the HTTP address"
  wait_for 120 one_worker || fail "no worker registered: $(cli workers 2>&1)"
}
has_address() { [[ -s "$PARATUNE_ADDRESS_FILE" ]]; }
cli() { "$bin/paratune" "$@" --coordinator "$address" --token-file "$tmp/client.token"; }
one_worker() { [[ "$(cli workers --json 2>/dev/null | grep -o '"backend"' | wc -l)" -eq 1 ]]; }
job_gone() { [[ -z "$(squeue -h -j "$jobid" -o %T 2>/dev/null)" ]]; }
no_job_processes() { [[ -z "$(job_processes)" ]]; }
# line LOG PATTERN: the line number of PATTERN's first match in LOG (0: none).
line() { local n; n="$(grep -n -m1 -- "$2" "$1" | cut -d: -f1)"; echo "${n:-0}"; }

start_job "$tmp/job.out"
# The leftover check below can see the job's processes: now they are all there.
running="$(for p in $(job_processes); do ps -o comm= -p "$p"; done | sort | uniq -c | tr -s ' \n' ' ')"
echo "slurm: job processes: $running"
for comm in slurmstepd srun paratune-coordi paratune-worker; do
  [[ "$running" == *" $comm "* ]] || fail "no $comm among the job's processes ($running)"
done
grep -q "\"name\": *\"$(hostname)\"" <<<"$(cli workers --json)" ||
  fail "the worker is not named after its node: $(cli workers --json)"
# Without the client token the coordinator refuses (the token file reached it).
if "$bin/paratune" workers --coordinator "$address" >/dev/null 2>&1; then
  fail "the coordinator accepted a client without a token"
fi
hostport="${http_url#http://}"
hostport="${hostport%/}"
health="$( { exec 3<>"/dev/tcp/${hostport%:*}/${hostport##*:}" &&
  printf 'GET /healthz HTTP/1.0\r\nHost: %s\r\n\r\n' "${hostport%:*}" >&3 && cat <&3; } 2>/dev/null)"
grep -q '"status":"ok"' <<<"$health" || fail "/healthz at $http_url answered: $health"

cat >"$tmp/tiny.yaml" <<'SPEC'
name: slurm-tiny
model: {name: tiny, num_layers: 4, hidden_size: 64, num_attention_heads: 4, vocab_size: 256}
training: {seq_length: 64, global_batch_size: 8, precision: fp32}
cluster: {gpu: cpu, num_gpus: 2, gpus_per_node: 2}
search: {mode: profile, top_k: 4}
SPEC
id="$(cli submit --spec "$tmp/tiny.yaml")" || fail "paratune submit failed"
echo "paratune: submitted $id"
timeout 120 "$bin/paratune" watch "$id" --coordinator "$address" --token-file "$tmp/client.token" \
  >"$tmp/watch.out" 2>&1 || fail "paratune watch $id did not end in SUCCEEDED: $(tail -5 "$tmp/watch.out")"
results="$(cli results "$id" --json)" || fail "paratune results failed"
ranked="$(echo "$results" | grep -o '"iteration_time_s"' | wc -l)"
measured="$(echo "$results" | grep -o '"source": *"measured"' | wc -l)"
echo "paratune: $ranked ranked layouts, $measured measured"
[[ "$ranked" -ge 1 && "$ranked" -le 4 ]] || fail "expected 1..4 ranked layouts (top_k 4), got $ranked"
[[ "$measured" -eq "$ranked" ]] || fail "$measured of $ranked ranked layouts measured"

# --- scancel: everything stops --------------------------------------------------------------
scancel "$jobid" || fail "scancel $jobid failed"
wait_for 40 job_gone || fail "job $jobid still $(squeue -h -j "$jobid" -o %T) 40 s after scancel"
wait_for 20 no_job_processes ||
  fail "processes left after scancel: $(for p in $(job_processes); do ps -o pid=,args= -p "$p"; done)"
[[ ! -e "$PARATUNE_ADDRESS_FILE" ]] || fail "the address file survived the shutdown"
# The programs write their log lines in pieces and both go to the job output at the same
# moment here: look for pieces that are single writes ("SIGTERM" ": stopping\n";
# "paratune-coordinator: signal " "15" ", shutting down\n").
grep -q ": stopping$" "$tmp/job.out" || fail "the worker did not stop on SIGTERM"
grep -q "paratune-coordinator: signal " "$tmp/job.out" ||
  fail "the coordinator did not shut down on SIGTERM"
grep -q "paratune.sbatch: stopped" "$tmp/job.out" || fail "the batch script's trap did not finish"
echo "slurm: job $jobid ran $id ($measured layouts measured) and stopped cleanly on scancel"
first_job="$jobid"

# --- a second Slurm job on the same state dir ------------------------------------------------
# The database carried over: the first job's results are there, byte for byte, and the profile
# cache serves the same spec again.
start_job "$tmp/job2.out"
[[ "$(cli results "$id" --json)" == "$results" ]] ||
  fail "the second coordinator does not return the first job's results unchanged"
id2="$(cli submit --spec "$tmp/tiny.yaml")" || fail "paratune submit (second job) failed"
last="$(timeout 120 "$bin/paratune" watch "$id2" --json --coordinator "$address" \
  --token-file "$tmp/client.token" 2>"$tmp/watch2.err" | tail -n 1)" ||
  fail "paratune watch $id2 failed: $last $(cat "$tmp/watch2.err")"
progress="$(echo "$last" | grep -o '"progress":{[^}]*}')"
count() { echo "$progress" | grep -o "\"$1\":\"\?[0-9]*" | grep -o '[0-9]*$'; }
echo "paratune: second profile job $id2: $progress"
[[ "$last" == *'"state":"JOB_STATE_SUCCEEDED"'* ]] || fail "$id2 did not succeed: $last"
[[ "$(count tasks_total)" -ge 1 && "$(count tasks_done)" == "$(count tasks_total)" ]] ||
  fail "$id2: not every task done: $progress"
[[ "$(count tasks_cached)" -ge 1 ]] || fail "$id2: nothing came from the profile cache: $progress"

# Ordered stop, as before the time limit (--signal=B:TERM@120): SIGTERM to the batch script
# only. Its trap stops the worker first (it deregisters while the coordinator still runs),
# then the coordinator; the job ends COMPLETED with exit code 0.
scancel --batch --signal=TERM "$jobid" || fail "scancel --batch --signal=TERM $jobid failed"
wait_for 40 job_gone || fail "job $jobid still $(squeue -h -j "$jobid" -o %T) 40 s after SIGTERM"
wait_for 20 no_job_processes ||
  fail "processes left after SIGTERM: $(for p in $(job_processes); do ps -o pid=,args= -p "$p"; done)"
state="$(scontrol show job "$jobid" | grep -o 'JobState=[A-Z]* .*\|ExitCode=[0-9:]*' | tr '\n' ' ')"
[[ "$state" == *"JobState=COMPLETED"* && "$state" == *"ExitCode=0:0"* ]] ||
  fail "job $jobid ended as: $state"
worker_stop="$(line "$tmp/job2.out" "deregistered w-")"
coordinator_stop="$(line "$tmp/job2.out" "paratune-coordinator: signal ")"
[[ "$worker_stop" -gt 0 && "$coordinator_stop" -gt "$worker_stop" ]] ||
  fail "not the worker's deregistration first, then the coordinator's shutdown (lines $worker_stop, $coordinator_stop)"
[[ "$(line "$tmp/job2.out" "lost the coordinator")" -eq 0 ]] ||
  fail "the worker lost the coordinator during the ordered stop"
[[ ! -e "$PARATUNE_ADDRESS_FILE" ]] || fail "the address file survived the second shutdown"
second_job="$jobid"

# --- a coordinator that cannot start fails the job, saying so --------------------------------
jobid="$(cd "$tmp" && PARATUNE_COORDINATOR_ARGS="--no-such-flag" sbatch --parsable --nodes=1 \
  --output="$tmp/job3.out" "$src/deploy/slurm/paratune.sbatch")" || fail "sbatch refused the script"
jobid="${jobid%%;*}"
wait_for 40 job_gone || fail "job $jobid with a bad coordinator flag still $(squeue -h -j "$jobid" -o %T)"
state="$(scontrol show job "$jobid" | grep -o 'JobState=[A-Z]*\|ExitCode=[0-9:]*' | tr '\n' ' ')"
[[ "$state" == *"JobState=FAILED"* && "$state" == *"ExitCode=1:0"* ]] ||
  fail "job $jobid with a bad coordinator flag ended as: $state"
grep -q "the coordinator exited before listening" "$tmp/job3.out" ||
  fail "job $jobid does not say why it failed: $(cat "$tmp/job3.out")"
[[ ! -e "$PARATUNE_ADDRESS_FILE" ]] || fail "a failed job left an address file"
echo "PASS: jobs $first_job and $second_job: profile job measured, database kept across jobs," \
  "clean stop on scancel and ordered stop on SIGTERM; job $jobid: a bad flag fails the job"
