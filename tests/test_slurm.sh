#!/usr/bin/env bash
# deploy/slurm/sacfleet.sbatch against a real Slurm controller (issue 19; ctest test_slurm,
# labels integration;slow).
#
# Makes a one-node Slurm cluster of this machine in a temporary folder: a munge key and a
# munged on its own socket, a generated slurm.conf (this machine's CPUs, OverSubscribe,
# proctrack/linuxproc and task/none so no cgroup plugin is needed, free ports, state and
# logs in the folder), slurmctld and slurmd. Then:
#   1. job 1: the launch as a user submits it (2 shards, learner, 2 actors as srun steps of
#      one allocation) trains Pendulum-v1 for SAC_SLURM_STEPS1 (default 20000: the learner's
#      default, and the length README.md's result is for) steps, and its final evaluation
#      return must be >= -200;
#   2. job 2: a longer run is requeued with `scontrol requeue` once its learner has written
#      a checkpoint and its shards a snapshot; the requeued job (same id, attempt 2) must
#      resume from the checkpoint (the learner logs from which update), the shards must
#      restore their snapshots (with transitions in them), and the run must finish at its
#      total steps, with more updates than it resumed from.
# Prints the job's own log lines and the time each job took.
#
# Every wait is bounded and on progress: a job fails the test when its logs have not grown
# for SAC_SLURM_STALL_S (default 180) seconds. At the end it cancels its jobs and stops the
# daemons it started, by PID, and removes its folder.
#
# Exit 0 pass, 1 fail, 77 skip only when the daemons cannot be had (not root, slurm-wlm or
# munge cannot be installed, munged/slurmctld/slurmd do not start); the reason is printed on
# a line starting "SKIP:".
#
# usage: test_slurm.sh SAC_LEARNER SAC_REPLAY SAC_ACTOR
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/lib_return.sh
. "$ROOT/scripts/lib_return.sh"
LEARNER_BIN=${1:?usage: test_slurm.sh SAC_LEARNER SAC_REPLAY SAC_ACTOR}
REPLAY_BIN=${2:?sac-replay}
ACTOR_BIN=${3:?sac-actor}
STEPS1=${SAC_SLURM_STEPS1:-20000}
STEPS2=${SAC_SLURM_STEPS2:-6000}
STALL_S=${SAC_SLURM_STALL_S:-180}
# the binaries refuse SAC_* variables that are not their options: none of the caller's
# reaches the jobs (the test's knobs above are read already)
while read -r v; do unset "$v"; done < <(compgen -e | grep '^SAC_' || true)

T0=$(date +%s)
log() { printf '[test_slurm %4ds] %s\n' "$(($(date +%s) - T0))" "$*"; }
skip() {
  echo "SKIP: $*"
  exit 77
}
fail() {
  echo "FAIL: $*"
  exit 1
}
D=$(mktemp -d /tmp/sacfleet-slurm.XXXXXX)
chmod 755 "$D"
DAEMON_PIDS=()
JOBS=()

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  local j p
  # the jobs first, while slurmd is there to stop their steps (bounded)
  for j in "${JOBS[@]}"; do scancel "$j" 2>/dev/null || true; done
  for j in "${JOBS[@]}"; do
    for _ in $(seq 1 30); do
      case $(job_state "$j") in RUNNING | COMPLETING | PENDING | REQUEUED) sleep 1 ;; *) break ;; esac
    done
  done
  if [ $rc -ne 0 ] && [ $rc -ne 77 ]; then
    echo "---- diagnostics ----"
    for f in "$D"/slurmctld.log "$D"/slurmd.log "$D"/job-*.out "$D"/runs/*/logs/*.log; do
      [ -f "$f" ] && { echo "---- $f"; tail -n 15 "$f"; }
    done
  fi
  # the daemons this test started, newest first, by PID
  for ((p = ${#DAEMON_PIDS[@]} - 1; p >= 0; p--)); do
    kill "${DAEMON_PIDS[$p]}" 2>/dev/null || true
  done
  for p in "${DAEMON_PIDS[@]}"; do
    for _ in $(seq 1 30); do kill -0 "$p" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$p" 2>/dev/null && kill -KILL "$p" 2>/dev/null
  done
  rm -rf "$D"
  log "done (exit $rc)"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- the daemons ---------------------------------------------------------------------------

[ "$(id -u)" = 0 ] || skip "needs root to run munged, slurmctld and slurmd"
need=()
for t in munged:munge mungekey:munge slurmctld:slurmctld slurmd:slurmd sbatch:slurm-client; do
  command -v "${t%%:*}" >/dev/null || need+=("${t#*:}")
done
if [ ${#need[@]} -gt 0 ]; then
  mapfile -t need < <(printf '%s\n' "${need[@]}" slurm-wlm | sort -u)
  log "installing ${need[*]}"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"; } \
    >"$D/apt.log" 2>&1 || { tail -n 20 "$D/apt.log"; skip "could not install ${need[*]} with apt-get (log above)"; }
fi

# free_port: a TCP port nobody listens on now (the kernel's pick)
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# munge: its own key and socket, so a munged of this machine (if any) is left alone
mungekey -c -k "$D/munge.key" -b 1024 >/dev/null 2>&1 || dd if=/dev/urandom of="$D/munge.key" bs=1 count=1024 2>/dev/null
chmod 400 "$D/munge.key"
munged --force --socket="$D/munge.sock" --key-file="$D/munge.key" --pid-file="$D/munged.pid" \
  --log-file="$D/munged.log" --seed-file="$D/munge.seed" >"$D/munged.out" 2>&1 ||
  { cat "$D/munged.out"; skip "munged would not start (above)"; }
for _ in $(seq 1 20); do [ -s "$D/munged.pid" ] && break; sleep 0.25; done
[ -s "$D/munged.pid" ] || skip "munged wrote no pid file"
DAEMON_PIDS+=("$(cat "$D/munged.pid")")
munge -S "$D/munge.sock" -n | unmunge -S "$D/munge.sock" >/dev/null 2>&1 || skip "munge credentials do not round-trip"

NODE=$(hostname -s)
CPUS=$(nproc)
CTLD_PORT=$(free_port)
SLURMD_PORT=$(free_port)
export SLURM_CONF="$D/slurm.conf"
mkdir -p "$D/state" "$D/spool" "$D/runs"
touch "$D/plugstack.conf"
cat >"$SLURM_CONF" <<EOF
# generated by tests/test_slurm.sh: one node, no cgroup plugins, everything in $D
ClusterName=sacfleettest
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$D/munge.sock
PlugStackConfig=$D/plugstack.conf
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
SlurmUser=root
SlurmdUser=root
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd.pid
SlurmdSpoolDir=$D/spool
StateSaveLocation=$D/state
SlurmctldLogFile=$D/slurmctld.log
SlurmdLogFile=$D/slurmd.log
JobRequeue=1
KillWait=20
MinJobAge=3600
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
# -D: in the foreground, so $! is the daemon's own PID; -i: no state from an earlier run
slurmctld -D -i -f "$SLURM_CONF" >"$D/slurmctld.out" 2>&1 &
DAEMON_PIDS+=($!)
slurmd -D -f "$SLURM_CONF" >"$D/slurmd.out" 2>&1 &
DAEMON_PIDS+=($!)
node_idle() { [ "$(sinfo -h -n "$NODE" -o %T 2>/dev/null)" = idle ]; }
for _ in $(seq 1 60); do
  node_idle && break
  for p in "${DAEMON_PIDS[@]:1}"; do
    kill -0 "$p" 2>/dev/null || { tail -n 20 "$D"/slurm*.out "$D"/slurm*.log 2>/dev/null; skip "a Slurm daemon exited at start (logs above)"; }
  done
  sleep 1
done
node_idle || { tail -n 20 "$D"/slurm*.log; skip "node $NODE not idle within 60 s (logs above)"; }
log "Slurm $(sinfo -V | awk '{print $2}'): slurmctld, slurmd and munged up (pids ${DAEMON_PIDS[*]}), node $NODE with $CPUS CPUs"

# ---- jobs ----------------------------------------------------------------------------------

mkdir -p "$D/bin"
ln -s "$LEARNER_BIN" "$D/bin/sac-learner"
ln -s "$REPLAY_BIN" "$D/bin/sac-replay"
ln -s "$ACTOR_BIN" "$D/bin/sac-actor"
PORT_BASE=$(free_port)

# submit NAME STEPS [SAC_VAR=VALUE...]: the job id. Ports differ per job: two jobs never
# run at once here, but a requeued job must not race the sockets of its previous attempt.
submit() {
  local name=$1 steps=$2
  shift 2
  # SACFLEET_RUN_NAME: the old name of SAC_SLURM_RUN_NAME still works (the run directory shows it)
  env SAC_SLURM_HOME="$ROOT" SAC_SLURM_BIN_DIR="$D/bin" SAC_SLURM_RUN_ROOT="$D/runs" SACFLEET_RUN_NAME="$name" \
    SAC_SLURM_PORT="$PORT_BASE" SAC_SLURM_WEIGHTS_PORT=$((PORT_BASE + 20)) SAC_SLURM_METRICS_PORT=$((PORT_BASE + 100)) \
    SAC_TOTAL_STEPS="$steps" SAC_EVAL_EVERY_UPDATES=2000 SAC_SNAPSHOT_INTERVAL_S=3 "$@" \
    sbatch --parsable --chdir="$D" --output="$D/job-$name.out" "$ROOT/deploy/slurm/sacfleet.sbatch"
}
job_state() { scontrol show job -o "$1" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }
# progress NAME: bytes of everything the job has written (its logs grow while it works)
progress() { { cat "$D/job-$1.out" "$D/runs/$1"/logs/*.log 2>/dev/null || true; } | wc -c; }
# wait_for WHAT NAME COMMAND...: runs COMMAND every 2 s until it succeeds; fails when the
# job's output has not grown for STALL_S seconds
wait_for() {
  local what=$1 name=$2 last=-1 moved now p
  shift 2
  moved=$(date +%s)
  until "$@"; do
    now=$(date +%s)
    p=$(progress "$name")
    if [ "$p" != "$last" ]; then
      last=$p
      moved=$now
    elif [ $((now - moved)) -ge "$STALL_S" ]; then
      fail "$what: job $name made no progress for ${STALL_S} s (state $(job_state "${JOB_ID:-0}"))"
    fi
    sleep 2
  done
}
job_done() { case $(job_state "$JOB_ID") in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY) return 0 ;; esac; return 1; }
show_job_log() { sed 's/^/    /' "$D/job-$1.out"; }

# ---- 1. a run to the end ---------------------------------------------------------------------

t1=$(date +%s)
JOB_ID=$(submit train "$STEPS1")
JOBS+=("$JOB_ID")
log "job $JOB_ID (train): 2 shards, learner, 2 actors; Pendulum-v1, $STEPS1 steps"
wait_for "job train finishing" train job_done
show_job_log train
[ "$(job_state "$JOB_ID")" = COMPLETED ] || fail "job train ended $(job_state "$JOB_ID")"
result=$(grep -h '^result:' "$D/runs/train/logs/learner-0.log" | tail -n 1)
[ -n "$result" ] || fail "job train: the learner printed no result line"
echo "    $result"
return_check "$result" -200 || fail "job train: $RETURN_WHY"
ret=$RETURN
steps=$(sed -E 's/.* steps ([0-9]+) .*/\1/' <<<"$result")
[ "$steps" -ge "$STEPS1" ] || fail "job train ended at $steps steps, before its $STEPS1: $result"
train_s=$(($(date +%s) - t1))
log "job train: final eval return $ret >= -200 in $train_s s (submit to COMPLETED)"

# ---- 2. requeued mid-run, resumed ----------------------------------------------------------

t2=$(date +%s)
PORT_BASE=$(free_port)
JOB_ID=$(submit requeue "$STEPS2" SAC_CHECKPOINT_EVERY=1000)
JOBS+=("$JOB_ID")
log "job $JOB_ID (requeue): $STEPS2 steps, checkpoint every 1000 updates, snapshots every 3 s"
RUN="$D/runs/requeue"
ckpt_and_snap() {
  grep -qE 'periodic snapshot: [1-9][0-9]* transitions' "$RUN/logs/replay-0.log" 2>/dev/null &&
    [ -f "$RUN/checkpoint.bin" ] && grep -qE 'eval at update [1-9]' "$RUN/logs/learner-0.log" 2>/dev/null
}
wait_for "job requeue: a checkpoint and a snapshot" requeue ckpt_and_snap
at=$(grep -hE 'eval at update' "$RUN/logs/learner-0.log" | tail -n 1 | sed 's/^.*learner: //')
log "job $JOB_ID has a checkpoint and shard snapshots (last: $at): scontrol requeue $JOB_ID"
scontrol requeue "$JOB_ID" || fail "scontrol requeue $JOB_ID failed"
# Slurm makes a requeued job eligible again only about two minutes later (its BeginTime);
# an operator's `scontrol update StartTime=now` saves CI that wait (it changes nothing in
# what the job does when it starts)
pending() { [ "$(job_state "$JOB_ID")" = PENDING ]; }
wait_for "job requeue: pending again" requeue pending
scontrol update JobId="$JOB_ID" StartTime=now 2>&1 || log "scontrol update StartTime=now did not take; waiting for Slurm's own BeginTime"
restarted() { [ "$(scontrol show job -o "$JOB_ID" | grep -o 'Restarts=[0-9]*' | cut -d= -f2)" -ge 1 ] &&
  grep -q 'attempt 2 ' "$D/job-requeue.out"; }
wait_for "job requeue: running again" requeue restarted
log "job $JOB_ID requeued and running again ($(scontrol show job -o "$JOB_ID" | grep -o 'Restarts=[0-9]*'))"
wait_for "job requeue finishing" requeue job_done
show_job_log requeue
[ "$(job_state "$JOB_ID")" = COMPLETED ] || fail "job requeue ended $(job_state "$JOB_ID")"

# what the first attempt left: the learner's last words before the requeue
stopped=$(grep -hE '^result:' "$RUN/logs/learner-0.log" | head -n 1)
[ -n "$stopped" ] || fail "the first attempt's learner printed no result line on SIGTERM (no final checkpoint)"
echo "    attempt 1 stopped: $stopped"
resumed=$(grep -hE 'resumed from .*: [0-9]+ updates' "$RUN/logs/learner-0.log" | tail -n 1)
[ -n "$resumed" ] || fail "the requeued learner did not resume from its checkpoint"
echo "    attempt 2: ${resumed#*INFO  }"
from=$(sed -E 's/.*: ([0-9]+) updates.*/\1/' <<<"$resumed")
[ "$from" -gt 0 ] || fail "resumed from update 0"
restored_sum=0
for k in 0 1; do
  restored=$(grep -hE 'restored [0-9]+ transitions' "$RUN/logs/replay-$k.log" | tail -n 1)
  grep -qE 'restored [1-9][0-9]* transitions' <<<"$restored" || fail "shard $k did not restore a snapshot with data: '$restored'"
  echo "    attempt 2: ${restored#*INFO  }"
  restored_sum=$((restored_sum + $(sed -E 's/.*restored ([0-9]+) transitions.*/\1/' <<<"$restored")))
done
ck_steps=$(sed -E 's/.* ([0-9]+) environment steps.*/\1/' <<<"$resumed")
# the shards stop after the learner, so their final snapshots hold at least what the
# learner's checkpoint counted
[ "$restored_sum" -ge "$ck_steps" ] ||
  fail "the shards restored $restored_sum transitions, fewer than the $ck_steps steps of the learner's checkpoint"
echo "    the shards restored $restored_sum transitions; the checkpoint counted $ck_steps environment steps"
stops=$(grep -cE 'replay: stopped$' "$RUN/logs/replay-0.log" || true)
[ "$stops" -ge 2 ] || fail "shard 0 stopped cleanly (final snapshot) $stops time(s), not at the end of both attempts"
final=$(grep -hE '^result:' "$RUN/logs/learner-0.log" | tail -n 1)
echo "    attempt 2: $final"
steps=$(sed -E 's/.* steps ([0-9]+) .*/\1/' <<<"$final")
[ "$steps" -ge "$STEPS2" ] || fail "the resumed run ended at $steps steps, before its $STEPS2"
upd=$(sed -E 's/.* updates ([0-9]+) .*/\1/' <<<"$final")
[ "$upd" -gt "$from" ] || fail "the resumed run ended at $upd updates, not past the $from it resumed from"
log "job requeue: resumed from update $from, finished at $steps steps and $upd updates in $(($(date +%s) - t2)) s (submit to COMPLETED, requeue included)"
echo "test_slurm: 2 passed, 0 failed"
