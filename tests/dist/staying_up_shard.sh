#!/usr/bin/env bash
# shellcheck disable=SC2317 # functions below are called through wait_until
# Staying up (issue 4, point 5), a shard restarted: 2 shards (snapshotting every 2 s), 2
# actors and a learner as separate processes on loopback. Mid-run, right after a periodic
# snapshot of shard0, shard0 is killed with SIGKILL, left down for a moment, and started
# again on the same ports with the same snapshot path. Checks that
#   - the restarted shard restores at least the transitions of its last snapshot (> 0),
#   - the actors and the learner reconnect by themselves: the restarted shard receives new
#     inserts (its next snapshot holds more than it restored), the actors make progress
#     again (they can only do so once the batches they had unacknowledged at shard0 are
#     acknowledged, which the new shard only does for batches it received again), and
#   - the learner's run finishes (result line, exit 0); nothing crashed; every remaining
#     process stops cleanly on SIGTERM (exit 0),
#   - no data was lost or stored twice: the shards' final snapshots hold every step the
#     actors took, less only what the design allows (check_accounting in lib.sh).
# No learning threshold: the property is staying up, not the return.
#
# usage: staying_up_shard.sh SAC_LEARNER SAC_ACTOR SAC_REPLAY
# env:   DIST_TOTAL_STEPS (6000), DIST_DOWN_S (2: seconds shard0 stays down), DIST_DEADLINE_S (540), DIST_KEEP=1
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" || { echo "FAIL: $0: cannot load lib.sh"; exit 1; }
dist_init staying_up_shard 540
check_binaries "$@"

S=2 N=2
TOTAL=${DIST_TOTAL_STEPS:-6000}
DOWN=${DIST_DOWN_S:-2}
KILL_AT=$((TOTAL / 3))
SNAP_S=2
WINDOW=2
SEND_ROWS=64

for ((i = 0; i < S; i++)); do
  start_local_shard "shard$i" "$S" "$i" --snapshot_path="$T/shard$i.snap" --snapshot_interval_s=$SNAP_S
done
start_local_learner learner "" --total_steps="$TOTAL"
DIST_WATCH="shard0 shard1 learner"
for ((i = 0; i < N; i++)); do
  # a window of 2 batches per shard: with shard0 down an actor soon has nothing but
  # unacknowledged batches for it and waits; it can only go on once those are acknowledged
  start_local_actor "actor$i" "$N" "$i" --inflight_batches=$WINDOW --send_rows=$SEND_ROWS
  DIST_WATCH+=" actor$i"
done
log "cluster up: weights on tcp://127.0.0.1:$WEIGHTS_PORT"

snap_lines() { grep -ac "periodic snapshot: " "$T/shard0.log"; }
last_snap() { last_num "$T/shard0.log" "periodic snapshot: " "periodic snapshot: "; }
trained() { ge "$(learner_steps learner)" "$KILL_AT"; }
wait_until 120 "the learner past $KILL_AT steps" trained
# kill right after a fresh periodic snapshot, so the kill lands between two of them
n0=$(snap_lines)
fresh_snap() { (($(snap_lines) > n0)); }
wait_until $((SNAP_S * 5)) "a periodic snapshot of shard0" fresh_snap
kill9 shard0
snap_n=$(last_snap)
ge "$snap_n" 1 || fail "shard0's last snapshot before the kill holds '$snap_n' transitions"
DIST_WATCH="shard1 learner actor0 actor1"
declare -a A_STEPS=() A_LINES=()
for ((i = 0; i < N; i++)); do
  A_STEPS[i]=$(actor_steps "actor$i" "$i")
  A_STEPS[i]=${A_STEPS[$i]:-0}
done
log "shard0 killed (-9) at learner step $(learner_steps learner), its last snapshot: $snap_n transitions; actors at ${A_STEPS[0]} / ${A_STEPS[1]} steps"
sleep "$DOWN"
check_watch

# restart on the same ports, from the same snapshot
rm -f "$T/shard0.ready"
log_mark=$(wc -l <"$T/shard0.log")
# shellcheck disable=SC2046
start shard0 "$REPLAY" $(shard_args "$S" 0) --insert_endpoint="${SHARD_INS[0]}" \
  --sample_endpoint="${SHARD_SMP[0]}" --ready_file="$T/shard0.ready" \
  --snapshot_path="$T/shard0.snap" --snapshot_interval_s=$SNAP_S
wait_ready shard0 "$START_PID" 30 || fail "shard0 cannot bind its ports again"
DIST_WATCH+=" shard0"
since_restart() { tail -n +$((log_mark + 1)) "$T/shard0.log"; }
restored=$(since_restart | sed -n 's/.*restored \([0-9][0-9]*\) transitions.*/\1/p' | tail -n 1)
ge "$restored" "$snap_n" || fail "shard0 restored '$restored' transitions, its last snapshot had $snap_n"
log "shard0 restarted on ${SHARD_INS[0]} / ${SHARD_SMP[0]}: restored $restored transitions"
for ((i = 0; i < N; i++)); do A_LINES[i]=$(actor_lines "actor$i" "$i"); done

# the restarted shard gets inserts again
grown() {
  local n
  n=$(since_restart | sed -n 's/.*periodic snapshot: \([0-9][0-9]*\) transitions.*/\1/p' | tail -n 1)
  ge "$n" $((restored + 1))
}
wait_until 60 "new inserts at the restarted shard0" grown
log "shard0 holds $(since_restart | sed -n 's/.*periodic snapshot: \([0-9][0-9]*\) transitions.*/\1/p' | tail -n 1) transitions after the restart"
# every actor moves again
moved() { ge "$(actor_steps "actor$1" "$1")" $((A_STEPS[$1] + 1)) && (($(actor_lines "actor$1" "$1") > A_LINES[$1])); }
for ((i = 0; i < N; i++)); do
  wait_until 60 "actor$i making progress after the restart" moved "$i"
  log "actor$i: steps $(actor_steps "actor$i" "$i"), unacked $(actor_unacked "actor$i" "$i")"
done
wait_result learner 150
log "$(result_line learner)"
lost=$(since_restart | grep -a "acknowledged batches" | head -n 2)
[[ -n "$lost" ]] && log "shard0 reported, as documented for a kill -9 between snapshots: $lost"
stop_clean actor0 actor1 shard0 shard1
no_crash_in_logs
# every step the actors took is stored exactly once, but for what the design lets go
check_accounting $SEND_ROWS actor0 actor1 -- shard0 shard1
pass "shard0 killed and restarted from its snapshot ($restored transitions); actors and learner reconnected and the run finished"
