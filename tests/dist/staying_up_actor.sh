#!/usr/bin/env bash
# shellcheck disable=SC2317 # functions below are called through wait_until
# Staying up (issue 4, point 5), an actor killed: 2 shards, 2 actors and a learner as
# separate processes on loopback; one actor is killed with SIGKILL mid-run. Checks that
#   - the other actor keeps stepping and sending (its progress advances after the kill),
#   - the learner keeps training and its run finishes (result line, exit 0), with the
#     remaining steps coming from the surviving actor alone,
#   - the shards and the surviving actor stay up and stop cleanly on SIGTERM (exit 0).
# No learning threshold: the property is staying up, not the return.
#
# usage: staying_up_actor.sh SAC_LEARNER SAC_ACTOR SAC_REPLAY
# env:   DIST_TOTAL_STEPS (6000), DIST_DEADLINE_S (540), DIST_KEEP=1
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" || { echo "FAIL: $0: cannot load lib.sh"; exit 1; }
dist_init staying_up_actor 540
check_binaries "$@"

S=2 N=2
TOTAL=${DIST_TOTAL_STEPS:-6000}
KILL_AT=$((TOTAL / 3))

for ((i = 0; i < S; i++)); do start_local_shard "shard$i" "$S" "$i"; done
start_local_learner learner "" --total_steps="$TOTAL"
DIST_WATCH="shard0 shard1 learner"
for ((i = 0; i < N; i++)); do
  start_local_actor "actor$i" "$N" "$i"
  DIST_WATCH+=" actor$i"
done
log "cluster up: weights on tcp://127.0.0.1:$WEIGHTS_PORT"

trained() { ge "$(learner_steps learner)" "$KILL_AT"; }
wait_until 120 "the learner past $KILL_AT steps" trained
# actor1 is really taking part: it has sent transitions (its metrics; it may not have
# logged yet while its first batches wait for the rate limiter)
a1_sent() { ge "$(metric actor1 sac_actor_transitions_sent_total)" 1; }
wait_until 60 "actor1 sending transitions" a1_sent
steps_at_kill=$(learner_steps learner)
a0_at_kill=$(actor_steps actor0 0)
a0_at_kill=${a0_at_kill:-0}
log "learner at $steps_at_kill steps, actor0 at $a0_at_kill, actor1 has sent $(metric actor1 sac_actor_transitions_sent_total) transitions: kill -9 actor1"
kill9 actor1
DIST_WATCH="shard0 shard1 learner actor0"

wait_result learner 150
log "$(result_line learner)"
a0_end=$(actor_steps actor0 0)
log "actor0 went from $a0_at_kill to $a0_end steps after actor1 was killed"
# the learner needed TOTAL - steps_at_kill more stored steps; only actor0 could give them
need=$(((TOTAL - steps_at_kill) / 2))
((a0_end - a0_at_kill >= need)) ||
  fail "actor0 advanced only $((a0_end - a0_at_kill)) steps after the kill (expected >= $need)"
grep -aq "actor 0 stopped" "$T/actor0.log" && fail "actor0 stopped: $(grep -a 'actor 0 stopped' "$T/actor0.log")"
stop_clean actor0 shard0 shard1
no_crash_in_logs
pass "actor1 killed at $steps_at_kill/$TOTAL steps; actor0 and the learner carried on and the run finished"
