#!/usr/bin/env bash
# Distributed SAC across separate processes on loopback (issue 4, point 4): a learner,
# S replay shards and N actors, each its own process on 127.0.0.1 with free ports, trained
# on Pendulum-v1; passes when the learner's final evaluation return is >= -200.
#
# usage: run_cluster.sh SAC_LEARNER SAC_ACTOR SAC_REPLAY
# env:   DIST_SHARDS (2), DIST_ACTORS (2), DIST_TOTAL_STEPS (20000), DIST_THRESHOLD (-200),
#        DIST_STALL_S (120: the learner's progress line may stand still this long), DIST_DEADLINE_S (840: the whole test),
#        DIST_KEEP=1 keeps the logs.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" || { echo "FAIL: $0: cannot load lib.sh"; exit 1; }
dist_init run_cluster 840
check_binaries "$@"

S=${DIST_SHARDS:-2}
N=${DIST_ACTORS:-2}
TOTAL=${DIST_TOTAL_STEPS:-20000}
THRESHOLD=${DIST_THRESHOLD:--200}
TIMEOUT=${DIST_STALL_S:-120}

for ((i = 0; i < S; i++)); do
  start_local_shard "shard$i" "$S" "$i"
  log "shard$i: inserts ${SHARD_INS[$i]}, samples ${SHARD_SMP[$i]}"
done
start_local_learner learner "" --total_steps="$TOTAL" --lr=1e-3
log "learner: weights on tcp://127.0.0.1:$WEIGHTS_PORT"
DIST_WATCH="learner"
for ((i = 0; i < S; i++)); do DIST_WATCH+=" shard$i"; done
for ((i = 0; i < N; i++)); do
  start_local_actor "actor$i" "$N" "$i"
  DIST_WATCH+=" actor$i"
done
log "$S shard(s), $N actor(s), learner training for $TOTAL steps"

wait_result learner "$TIMEOUT"
line=$(result_line learner)
log "$line"
# every other process is still up (nothing crashed while the learner trained)
check_watch_others() {
  local n
  for n in $DIST_WATCH; do
    [[ $n == learner ]] && continue
    exited "$(pid_of "$n")" && fail "$n ended during the run (exit $(rc_of "$(pid_of "$n")"))"
  done
  return 0
}
check_watch_others
no_crash_in_logs
return_check "$line" "$THRESHOLD" || fail "$RETURN_WHY"
ret=$RETURN
pass "final eval return $ret >= $THRESHOLD with $S shards and $N actors as separate processes on loopback"
