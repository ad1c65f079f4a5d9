# Shared helpers of the multi-process tests in tests/dist/ (sourced, not run).
#
# What it gives a test: a temp dir for logs ($T), a record of every process the test
# started (and only those), bounded waits, free-port picking on 127.0.0.1, and one EXIT
# trap that stops exactly those processes by PID (SIGTERM, then SIGKILL after a grace
# period), removes anything registered with `on_cleanup`, and prints every log when the
# test fails. It never signals a process it did not start and never waits without a bound.
#
# Usage: source lib.sh; dist_init NAME; start NAME cmd...; ...; pass "message"
# Environment: DIST_KEEP=1 keeps the temp dir even on success (not SAC_*: the binaries
# refuse SAC_ variables they do not know).

set -u
set -o pipefail
# the return bar (return_check): one helper for every test that checks a return
# shellcheck source=scripts/lib_return.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib_return.sh" || { echo "FAIL: cannot load scripts/lib_return.sh"; exit 1; }
# shellcheck source=tests/lib_port.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib_port.sh" || { echo "FAIL: cannot load tests/lib_port.sh"; exit 1; }

declare -a DIST_PIDS=()     # every PID started, in order
declare -A DIST_PID_OF=()   # name -> PID of its latest start
declare -A DIST_NAME_OF=()  # PID -> name
declare -A DIST_RC_OF=()    # PID -> exit status once reaped
declare -A DIST_START_OF=() # PID -> its start time (/proc/PID/stat field 22)
declare -a DIST_CLEANUPS=() # commands run at exit, last registered first
declare -A DIST_PORTS=()    # ports this test picked
DIST_OK=0
T=""

# deadline_check: fail once the test has run past its own time limit.
deadline_check() {
  ((SECONDS <= DIST_DEADLINE)) || fail "over the test's time limit of ${DIST_DEADLINE}s"
}

log() { printf '[%s %5ds] %s\n' "${DIST_NAME:-dist}" "$SECONDS" "$*"; }

fail() {
  printf 'FAIL: %s: %s\n' "${DIST_NAME:-dist}" "$*"
  exit 1
}

skip() {
  printf 'SKIP: %s: %s\n' "${DIST_NAME:-dist}" "$*"
  DIST_OK=1
  exit 77
}

pass() {
  DIST_OK=1
  printf 'PASS: %s: %s (%d s)\n' "${DIST_NAME:-dist}" "$*" "$SECONDS"
  exit 0
}

on_cleanup() { DIST_CLEANUPS+=("$*"); }

# dist_init NAME [DEADLINE_S]: temp dir, traps, and the test's own time limit (default
# DIST_DEADLINE_S or 280 s), kept below the ctest TIMEOUT so that the test fails and
# cleans up by itself rather than being killed with its processes left behind. The limit
# is a last resort against a livelock, set well above a slow run: the waits fail on a
# lack of progress (DIST_PROGRESS, below), not on the clock.
DIST_DEADLINE=280
dist_init() {
  DIST_NAME=$1
  DIST_DEADLINE=${DIST_DEADLINE_S:-${2:-280}}
  SECONDS=0
  T=$(mktemp -d "${TMPDIR:-/tmp}/sacfleet-$1.XXXXXX") || { echo "FAIL: $1: mktemp"; exit 1; }
  trap dist_exit EXIT
  trap 'log "interrupted"; exit 130' INT TERM HUP
  log "logs in $T"
}

# proc_start PID: the start time of PID (clock ticks since boot), empty if none. Unlike
# the PID, which the kernel reuses (pid_max may be 32768), it tells our process apart.
proc_start() {
  local line rest
  read -r line 2>/dev/null <"/proc/$1/stat" || return 0
  rest=${line##*) } # fields after "(comm)": state is the 1st, starttime the 20th
  # shellcheck disable=SC2086
  set -- $rest
  printf '%s' "${20:-}"
}

# exited PID: the process we started as PID has ended (zombie, reaped, or the PID now
# belongs to another process). Records its exit status when reaped here.
exited() {
  local pid=$1 st
  [[ -n "${DIST_RC_OF[$pid]:-}" ]] && return 0
  st=$(proc_start "$pid")
  if [[ -n "$st" && "$st" == "${DIST_START_OF[$pid]:-}" ]] &&
    ! grep -q '^State:[[:space:]]*Z' "/proc/$pid/status" 2>/dev/null; then
    return 1
  fi
  local rc=0
  wait "$pid" 2>/dev/null || rc=$?
  DIST_RC_OF[$pid]=$rc
  return 0
}

alive() { ! exited "$1"; }

# Exit status of an ended process (empty while it runs).
rc_of() {
  exited "$1" || return 0
  printf '%s' "${DIST_RC_OF[$1]}"
}

# start NAME cmd...: runs cmd in the background with stdout+stderr in $T/NAME.log
# (appended, so a restarted NAME keeps one log); sets START_PID.
start() {
  local name=$1
  shift
  printf -- '--- start %s at %ds: %s\n' "$name" "$SECONDS" "$*" >>"$T/$name.log"
  "$@" >>"$T/$name.log" 2>&1 </dev/null &
  START_PID=$!
  DIST_START_OF[$START_PID]=$(proc_start "$START_PID")
  DIST_PIDS+=("$START_PID")
  DIST_PID_OF[$name]=$START_PID
  DIST_NAME_OF[$START_PID]=$name
}

pid_of() { printf '%s' "${DIST_PID_OF[$1]}"; }

# stop_pid PID [grace_s]: SIGTERM, then SIGKILL after grace_s; reaps. Only our PIDs.
stop_pid() {
  local pid=$1 grace=${2:-5} i
  [[ -n "${DIST_NAME_OF[$pid]:-}" ]] || { log "refusing to signal $pid: not started by this test"; return 1; }
  exited "$pid" && return 0
  kill -TERM "$pid" 2>/dev/null
  for ((i = 0; i < grace * 10; i++)); do
    exited "$pid" && return 0
    sleep 0.1
  done
  log "${DIST_NAME_OF[$pid]} (pid $pid) ignored SIGTERM for ${grace}s: SIGKILL"
  {
    kill -KILL "$pid"
    for ((i = 0; i < 50; i++)); do
      exited "$pid" && return 0
      sleep 0.1
    done
  } 2>/dev/null
  return 1
}

# kill9 NAME: SIGKILL the latest process started as NAME and reap it.
# (stderr is muted while it is reaped: bash would print "Killed" for the job)
kill9() {
  local pid=${DIST_PID_OF[$1]} i
  exited "$pid" && fail "$1 (pid $pid) had already ended (exit ${DIST_RC_OF[$pid]}) before the kill"
  {
    kill -KILL "$pid"
    for ((i = 0; i < 50; i++)); do
      exited "$pid" && break
      sleep 0.1
    done
  } 2>/dev/null
  exited "$pid" || fail "$1 (pid $pid) survived SIGKILL for 5 s"
  log "$1 (pid $pid) killed with SIGKILL"
}

dist_exit() {
  local status=$? pid i
  trap - EXIT INT TERM HUP
  for ((i = ${#DIST_PIDS[@]} - 1; i >= 0; i--)); do
    pid=${DIST_PIDS[$i]}
    exited "$pid" || stop_pid "$pid" 5
  done
  for ((i = ${#DIST_CLEANUPS[@]} - 1; i >= 0; i--)); do
    eval "${DIST_CLEANUPS[$i]}" || true
  done
  if [[ $DIST_OK != 1 || $status -ne 0 && $status -ne 77 ]]; then
    echo "=== ${DIST_NAME:-dist}: failed (exit $status); logs in $T"
    for pid in "${DIST_PIDS[@]}"; do
      echo "    ${DIST_NAME_OF[$pid]} pid $pid exit ${DIST_RC_OF[$pid]:-?}"
    done
    local f
    for f in "$T"/*.log; do
      [[ -e $f ]] || continue
      echo "=== $f (last 60 lines)"
      tail -n 60 "$f"
    done
    [[ $status -eq 0 ]] && status=1
  elif [[ -n "$T" && "${DIST_KEEP:-0}" != 1 ]]; then
    rm -rf "$T"
  fi
  exit "$status"
}

# Deadlines by progress (issue 15, point 7): a wait fails when NOTHING has moved for its
# stated time, not at a fixed instant, so that a slow or busy machine slows a test down
# without failing it. A test sets DIST_PROGRESS to a command whose output changes while
# its system makes progress (say, the learner's step and update counts and the actors'
# steps); each wait then polls it at most once a second and restarts its clock whenever
# the output changes. Without DIST_PROGRESS a wait's time is a plain bound (start-up
# waits, short local waits). The test's own limit (DIST_DEADLINE) stays as a last resort
# against a livelock, set well above a slow run.
#   The default, cluster_progress, reads the latest "steps N" / "updates N" every process
# logged: it moves while the learner learns or any actor steps.
cluster_progress() {
  tail -q -n 2 "$T"/*.log 2>/dev/null | grep -ao 'steps [0-9]*\|updates [0-9]*' | tr '\n' ' '
}
DIST_PROGRESS=cluster_progress
DIST_PROGRESS_TOKEN=""
DIST_PROGRESS_T=-1
# progress_since: the SECONDS at which DIST_PROGRESS's output last changed (probed at most
# once a second; SECONDS itself when no DIST_PROGRESS is set).
progress_since() {
  [[ -n "$DIST_PROGRESS" ]] || { printf '%s' "$SECONDS"; return; }
  if ((SECONDS != DIST_PROGRESS_PROBED)); then
    DIST_PROGRESS_PROBED=$SECONDS
    local tok
    tok=$(eval "$DIST_PROGRESS" 2>/dev/null | tr '\n' ' ')
    if [[ "$tok" != "$DIST_PROGRESS_TOKEN" || $DIST_PROGRESS_T -lt 0 ]]; then
      DIST_PROGRESS_TOKEN=$tok
      DIST_PROGRESS_T=$SECONDS
    fi
  fi
  printf '%s' "$DIST_PROGRESS_T"
}
DIST_PROGRESS_PROBED=-1
# stalled START STALL_S: true when, since START (a SECONDS value), neither the clock nor
# (with DIST_PROGRESS) the system has moved for STALL_S seconds.
stalled() {
  local from=$1 last
  if [[ -n "$DIST_PROGRESS" ]]; then
    progress_since >/dev/null
    last=$DIST_PROGRESS_T
    ((last < from)) && last=$from
  else
    last=$from
  fi
  ((SECONDS - last >= $2))
}
# stall_why STALL_S: the failure text of a wait that timed out.
stall_why() {
  if [[ -n "$DIST_PROGRESS" ]]; then
    printf 'nothing progressed for %ss (progress: %s)' "$1" "${DIST_PROGRESS_TOKEN:-none}"
  else
    printf 'timed out after %ss' "$1"
  fi
}

# wait_until STALL_S DESCRIPTION CMD...: polls CMD every 0.2 s; fails when nothing has
# progressed for STALL_S (see DIST_PROGRESS above; without it, after STALL_S). Also fails
# early when a process named in $DIST_WATCH (space-separated names) ends.
DIST_WATCH=""
# (its locals are prefixed: bash's scoping is dynamic, and CMD often reads a t0 or n of
# the caller's)
wait_until() {
  local _wu_stall=$1 _wu_what=$2 _wu_n _wu_t0=$SECONDS
  shift 2
  progress_since >/dev/null
  while :; do
    "$@" && return 0
    for _wu_n in $DIST_WATCH; do
      exited "${DIST_PID_OF[$_wu_n]}" &&
        fail "$_wu_n ended (exit ${DIST_RC_OF[${DIST_PID_OF[$_wu_n]}]}) while waiting for $_wu_what"
    done
    deadline_check
    stalled "$_wu_t0" "$_wu_stall" && fail "$(stall_why "$_wu_stall") waiting for $_wu_what"
    sleep 0.2
  done
}

# check_watch: fail if any process named in $DIST_WATCH has ended.
check_watch() {
  local n
  for n in $DIST_WATCH; do
    exited "${DIST_PID_OF[$n]}" && fail "$n ended unexpectedly (exit ${DIST_RC_OF[${DIST_PID_OF[$n]}]})"
  done
  return 0
}

# pick_port: a free TCP port below the ephemeral range (free_port, tests/lib_port.sh) that
# this test has not picked before. A bind can still race another program; the start helpers
# retry with a fresh port when it does.
pick_port() {
  local p
  p=$(free_port DIST_PORTS) || fail "no free port found below the ephemeral range"
  DIST_PORTS[$p]=1
  printf '%s' "$p"
}

# last_num FILE PATTERN PREFIX: the number right after PREFIX (a sed regex, e.g. "steps ")
# in the last line of FILE matching PATTERN that has one (empty if none).
last_num() {
  local file=$1 pattern=$2 key=$3
  grep -a -- "$pattern" "$file" 2>/dev/null | sed -n "s/.*$key\([0-9][0-9]*\).*/\1/p" | tail -n 1
}

# rss_kib PID: resident set size in KiB (empty if the process is gone).
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null; }

# The learner's result line; its return is checked with return_check (scripts/lib_return.sh).
result_line() { grep -a '^result:' "$T/$1.log" | tail -n 1; }

# Grep the logs for crash signatures (sanitizers, assertions, fatal signals).
no_crash_in_logs() {
  local f bad
  for f in "$T"/*.log; do
    bad=$(grep -a -m1 -E 'AddressSanitizer|UndefinedBehaviorSanitizer|runtime error:|Assertion .* failed|Segmentation fault|core dumped|double free|stack smashing' "$f") &&
      fail "crash signature in $(basename "$f"): $bad"
  done
  return 0
}

# ---------------------------------------------------------------- the cluster
# Pendulum-v1 configured as the embedded default configures itself (learner/service.c,
# embedded_start): per shard capacity = buffer / S, min_size = max(batch, learning_starts / S),
# samples_per_insert = batch x updates_per_step, seed = seed * 1000 + shard id; per actor
# learning_starts / N steps of uniform random actions, a distinct actor id, the same seed.
OBS_DIM=3
ACT_DIM=1
SEED=${DIST_SEED:-1}
BATCH=${DIST_BATCH:-256}
UTD=${DIST_UTD:-1}
LEARNING_STARTS=${DIST_LEARNING_STARTS:-1000}
BUFFER=${DIST_BUFFER:-1000000}

# Every process serves /metrics on a free port of its own loopback (never a fixed port on
# all interfaces: several processes share a host here, and traffic stays on loopback).
METRICS_OPTS="--metrics_addr=127.0.0.1 --metrics_port=0"

# memory_only_unless_durable [options...]: "--durability=none" unless the options give a
# snapshot path or a durability (sac-replay refuses durability wal without a path).
memory_only_unless_durable() {
  local a
  for a in "$@"; do
    case $a in --snapshot_path=* | --durability=*) return 0 ;; esac
  done
  printf -- '--durability=none'
}

# shard_args S ID: the sac-replay options of shard ID of S (endpoints excluded).
shard_args() {
  local S=$1 id=$2 min=$((LEARNING_STARTS / $1))
  ((min < BATCH)) && min=$BATCH
  printf -- '--shard_id=%s --obs_dim=%s --act_dim=%s --capacity=%s --min_size=%s --samples_per_insert=%s --seed=%s %s' \
    "$id" "$OBS_DIM" "$ACT_DIM" $((BUFFER / S)) "$min" $((BATCH * UTD)) $((SEED * 1000 + id)) "$METRICS_OPTS"
}

# actor_args N ID: the sac-actor options of actor ID of N (endpoints excluded).
actor_args() {
  printf -- '--actor_id=%s --seed=%s --learning_starts=%s --log_interval=1 %s' "$2" "$SEED" $((LEARNING_STARTS / $1)) \
    "$METRICS_OPTS"
}

# learner_args NAME: the sac-learner options shared by every test (shards and weights
# excluded); its run directory goes to the test's temp dir. A learner with --shards refuses
# what the shards and actors set (learning_starts, capacity, updates per step: shard_args and
# actor_args carry them).
learner_args() {
  printf -- '--seed=%s --batch_size=%s %s --run_dir=%s --run_name=%s' \
    "$SEED" "$BATCH" "$METRICS_OPTS" "$T/runs" "$1"
}

# wait_ready NAME PID TIMEOUT: waits for $T/NAME.ready (written by sac-replay once bound).
# Returns 0 ready, 4 the shard could not bind (exit 4), fails the test otherwise.
wait_ready() {
  local name=$1 pid=$2 end=$((SECONDS + $3))
  while ((SECONDS < end)); do
    [[ -s "$T/$name.ready" ]] && return 0
    if exited "$pid"; then
      [[ ${DIST_RC_OF[$pid]} == 4 ]] && return 4
      fail "$name exited with ${DIST_RC_OF[$pid]} before it was ready"
    fi
    deadline_check
    sleep 0.1
  done
  fail "$name not ready after $3 s"
}

# wait_learner_up NAME PID TIMEOUT: waits for the learner's start line (weights bound).
# Returns 0 up, 4 it could not bind its weights endpoint, fails the test otherwise.
wait_learner_up() {
  local name=$1 pid=$2 end=$((SECONDS + $3))
  while ((SECONDS < end)); do
    grep -aq 'weights on tcp://' "$T/$name.log" && return 0
    if exited "$pid"; then
      grep -aq 'cannot bind' "$T/$name.log" && return 4
      fail "$name exited with ${DIST_RC_OF[$pid]} before it was up"
    fi
    deadline_check
    sleep 0.1
  done
  fail "$name not up after $3 s"
}

# wait_result NAME STALL_S: waits for the learner's result line and its exit 0; fails when
# its progress line (steps, updates) has not moved for STALL_S seconds (nor, where the test
# set one, DIST_PROGRESS's output): a slow learner is waited for, a stuck one is not.
learner_progress() { grep -a 'steps ' "$T/$1.log" | tail -n 1 | sed -n 's/.*\(steps [0-9][0-9]*\).*\(updates [0-9][0-9]*\).*/\1 \2/p'; }
# The others in $DIST_WATCH are checked without it: it may end between its own check and
# theirs, and that end is the one this waits for (CI once failed on that race).
wait_result() {
  local name=$1 pid=${DIST_PID_OF[$1]} stall=$2 n others="" last="" cur t_moved=$SECONDS
  for n in $DIST_WATCH; do [[ $n == "$name" ]] || others+=" $n"; done
  while :; do
    if exited "$pid"; then
      [[ ${DIST_RC_OF[$pid]} == 0 ]] || fail "$name exited with ${DIST_RC_OF[$pid]}"
      [[ -n "$(result_line "$name")" ]] || fail "$name exited 0 without a result line"
      DIST_WATCH=$others # it has ended as it should: no longer watched
      return 0
    fi
    DIST_WATCH=$others check_watch
    deadline_check
    cur=$(learner_progress "$name")
    [[ "$cur" != "$last" ]] && { last=$cur; t_moved=$SECONDS; }
    stalled "$t_moved" "$stall" &&
      fail "no result line from $name and its progress line did not move for ${stall}s (last progress: $(grep -a 'steps ' "$T/$name.log" | tail -n 1))"
    sleep 0.5
  done
}

# Loopback: start_local_shard NAME S ID [extra sac-replay options...]: picks two free ports
# (retrying on a lost bind race), starts the shard on 127.0.0.1, waits until it is bound.
# Sets SHARD_INS[ID] and SHARD_SMP[ID] (its insert and sample endpoints).
declare -a SHARD_INS=() SHARD_SMP=()
start_local_shard() {
  local name=$1 S=$2 id=$3 try pi ps r
  shift 3
  for ((try = 0; try < 5; try++)); do
    pi=$(pick_port) || fail "no free port"
    ps=$(pick_port) || fail "no free port"
    DIST_PORTS[$pi]=1 DIST_PORTS[$ps]=1
    rm -f "$T/$name.ready"
    # shellcheck disable=SC2046
    start "$name" "$REPLAY" $(shard_args "$S" "$id") $(memory_only_unless_durable "$@") \
      --insert_endpoint="tcp://127.0.0.1:$pi" --sample_endpoint="tcp://127.0.0.1:$ps" \
      --ready_file="$T/$name.ready" "$@"
    r=0
    wait_ready "$name" "$START_PID" 30 || r=$?
    if ((r == 0)); then
      SHARD_INS[id]="tcp://127.0.0.1:$pi" SHARD_SMP[id]="tcp://127.0.0.1:$ps"
      return 0
    fi
    log "$name: ports $pi/$ps taken meanwhile, retrying"
  done
  fail "$name: could not bind after 5 tries"
}

# start_local_learner NAME PORT [extra sac-learner options...]: the learner on the shards
# in SHARD_SMP, publishing weights on 127.0.0.1:PORT (PORT "" picks one, retrying on a
# bind race). Sets WEIGHTS_PORT.
start_local_learner() {
  local name=$1 port=$2 try r smp
  shift 2
  smp=$(IFS=,; echo "${SHARD_SMP[*]}")
  for ((try = 0; try < 5; try++)); do
    local p=$port
    [[ -z "$p" ]] && p=$(pick_port)
    # shellcheck disable=SC2046
    start "$name" "$LEARNER" --shards="$smp" --weights="tcp://127.0.0.1:$p" $(learner_args "$name") \
      --log_interval=1 "$@"
    r=0
    wait_learner_up "$name" "$START_PID" 60 || r=$?
    if ((r == 0)); then
      WEIGHTS_PORT=$p
      return 0
    fi
    [[ -n "$port" ]] && fail "$name: weights port $port is taken"
    log "$name: port $p taken meanwhile, retrying"
  done
  fail "$name: could not bind after 5 tries"
}

# start_local_actor NAME N ID [extra sac-actor options...]
start_local_actor() {
  local name=$1 N=$2 id=$3 ins
  shift 3
  ins=$(IFS=,; echo "${SHARD_INS[*]}")
  # shellcheck disable=SC2046
  start "$name" "$ACTOR" $(actor_args "$N" "$id") --shards="$ins" --weights="tcp://127.0.0.1:$WEIGHTS_PORT" "$@"
}

# check_binaries LEARNER ACTOR REPLAY: sets LEARNER, ACTOR, REPLAY.
check_binaries() {
  [[ $# -eq 3 ]] || { echo "usage: $0 SAC_LEARNER SAC_ACTOR SAC_REPLAY"; exit 2; }
  LEARNER=$1 ACTOR=$2 REPLAY=$3
  local b
  for b in "$LEARNER" "$ACTOR" "$REPLAY"; do
    [[ -x "$b" ]] || fail "not an executable: $b"
  done
}

# ---------------------------------------------------------------- progress from the logs
# learner_steps NAME: environment steps stored so far, from the learner's progress lines.
learner_steps() { last_num "$T/$1.log" "learner: steps " "learner: steps "; }
# actor_steps NAME ID / actor_version NAME ID / actor_unacked NAME ID: from the actor's
# progress lines ("actor ID: steps S ... weights vV  unacked U"); empty before the first.
actor_steps() { last_num "$T/$1.log" "actor $2: steps " "actor $2: steps "; }
actor_version() { last_num "$T/$1.log" "actor $2: steps " "weights v"; }
actor_unacked() { last_num "$T/$1.log" "actor $2: steps " "unacked "; }
# The number of progress lines an actor has logged so far.
actor_lines() { grep -ac "actor $2: steps " "$T/$1.log"; }

# ge A B: A >= B for integers, false when A is empty.
ge() { [[ -n "$1" && "$1" -ge "$2" ]]; }

# stop_clean NAME...: SIGTERM each (latest start of NAME), and require exit status 0.
stop_clean() {
  local n pid
  for n in "$@"; do
    pid=${DIST_PID_OF[$n]}
    exited "$pid" && fail "$n had already ended (exit ${DIST_RC_OF[$pid]})"
    stop_pid "$pid" 10 || fail "$n (pid $pid) did not stop"
    [[ ${DIST_RC_OF[$pid]} == 0 ]] || fail "$n exited with ${DIST_RC_OF[$pid]} on SIGTERM, not 0"
  done
}

# check_accounting SEND_ROWS ACTORS... -- SHARDS...: after the actors and then the shards
# (run with --snapshot_path, so they log a final snapshot) have stopped cleanly, every
# environment step is in exactly one shard, except what the design allows to be missing:
# per actor the batch being built when it stopped and the batches it logged as
# unacknowledged at exit, and the acknowledged batches a shard reported lost after a kill -9
# between snapshots (docs/REPLAY.md, "Durability"); each counted at SEND_ROWS rows (the
# most a batch holds). Stored transitions above the steps taken would mean a resent batch
# was stored twice. The actors' logs must each hold one "done" line, the shards' one final
# snapshot since their last start.
check_accounting() {
  local rows=$1 n f steps=0 stored=0 missing_batches=0 x
  shift
  while [[ $# -gt 0 && $1 != -- ]]; do
    f="$T/$1.log"
    x=$(sed -n 's/.* done: \([0-9][0-9]*\) steps,.*/\1/p' "$f" | tail -n 1)
    [[ -n "$x" ]] || fail "no 'done' line from $1"
    steps=$((steps + x))
    x=$(sed -n 's/.*: \([0-9][0-9]*\) batch(es) unacknowledged at exit.*/\1/p' "$f" | tail -n 1)
    missing_batches=$((missing_batches + ${x:-0} + 1))
    shift
  done
  shift
  for n in "$@"; do
    f="$T/$n.log"
    x=$(sed -n 's/.*final snapshot: \([0-9][0-9]*\) transitions.*/\1/p' "$f" | tail -n 1)
    [[ -n "$x" ]] || fail "no final snapshot line from $n"
    stored=$((stored + x))
    x=$(sed -n 's/.*: \([0-9][0-9]*\) acknowledged batches up to seq.*/\1/p' "$f" | awk '{s += $1} END {print s + 0}')
    missing_batches=$((missing_batches + x))
  done
  log "accounting: $steps steps taken, $stored transitions stored, up to $missing_batches batch(es) of <= $rows rows allowed missing"
  ((stored <= steps)) || fail "$stored transitions stored but only $steps steps taken: a batch was stored twice"
  ((stored >= steps - missing_batches * rows)) ||
    fail "$((steps - stored)) transitions lost; at most $((missing_batches * rows)) may be (unsent, unacknowledged at exit or documented lost)"
}

# metric NAME SERIES: the value of the first sample of SERIES (a metric name, optionally
# with labels as printed) on the /metrics endpoint of the process started as NAME, read
# over loopback with bash's /dev/tcp (no curl needed); empty when unavailable. Bounded: 3 s.
metric() {
  local port
  port=$(sed -n 's|.*metrics on http://127\.0\.0\.1:\([0-9][0-9]*\)/metrics.*|\1|p' "$T/$1.log" | tail -n 1)
  [[ -n "$port" ]] || return 0
  # shellcheck disable=SC2016
  timeout 3 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" && printf "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n" >&3 && cat <&3' \
    _ "$port" 2>/dev/null | awk -v s="$2" '$1 == s || index($1, s "{") == 1 { printf "%d", $2; exit }'
}
