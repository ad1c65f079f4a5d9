#!/usr/bin/env bash
# shellcheck disable=SC2317 # functions below are called through wait_until
# Staying up (issue 4, point 5), the learner goes away: 2 shards, 2 actors and a learner as
# separate processes on loopback; the learner is killed with SIGKILL mid-run. Checks that
#   - the actors keep running (no crash, no exit) on their last weights while it is gone,
#   - their memory stays bounded meanwhile (VmRSS sampled every 0.5 s: it plateaus),
#     and so does the shards' (the rate limiter holds inserts back without a learner),
#   - a new learner on the same ports is picked up: each actor reports weights versions
#     from it (different from the last version of the killed learner), and the new
#     learner's run finishes (its result line) with the data the actors keep sending,
#   - everything then stops cleanly on SIGTERM (exit 0), and no data was lost or stored
#     twice meanwhile: the shards' final snapshots hold every step the actors took, less
#     only what the design allows (check_accounting in lib.sh).
# No learning threshold: the property is staying up, not the return.
#
# usage: staying_up_learner.sh SAC_LEARNER SAC_ACTOR SAC_REPLAY
# env:   DIST_TOTAL_STEPS (8000), DIST_AWAY_S (20: seconds without a learner), DIST_DEADLINE_S (540), DIST_KEEP=1
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" || { echo "FAIL: $0: cannot load lib.sh"; exit 1; }
dist_init staying_up_learner 540
check_binaries "$@"

S=2 N=2
TOTAL=${DIST_TOTAL_STEPS:-8000}
AWAY=${DIST_AWAY_S:-20}
KILL_AT=$((TOTAL / 3))
# growth allowed while the learner is away: the plateau test is the sharp one; this bound
# only catches a burst (a client window is 16 batches of 64 rows per shard: < 1 MiB)
# (ZeroMQ queues, bounded by the high-water marks, come on top)
RSS_GROWTH_MAX_KIB=$((16 * 1024))
# plateau: the max over the last half of the window may exceed the max over the first
# half by this much; over the default 20 s a steady growth faster than ~100 KiB/s (actors)
# or ~200 KiB/s (shards) fails, slower growth needs a longer DIST_AWAY_S to show
declare -A RSS_PLATEAU_KIB=([actor0]=1024 [actor1]=1024 [shard0]=2048 [shard1]=2048)

# snapshots only at shutdown: their final line gives the count for the accounting
for ((i = 0; i < S; i++)); do
  start_local_shard "shard$i" "$S" "$i" --snapshot_path="$T/shard$i.snap" --snapshot_interval_s=0
done
# weights versions are update counts: learner1 publishes every 10 updates, learner2 every
# 7 (by count only: --publish_interval_ms=0), so a version that is not a multiple of 10
# can only have come from learner2
start_local_learner learner1 "" --total_steps="$TOTAL" --publish_every=10 --publish_interval_ms=0
DIST_WATCH="shard0 shard1 learner1"
for ((i = 0; i < N; i++)); do
  start_local_actor "actor$i" "$N" "$i"
  DIST_WATCH+=" actor$i"
done
log "cluster up: weights on tcp://127.0.0.1:$WEIGHTS_PORT"

# 1. training under way: the learner past a third of the run, both actors on learned weights
trained() { ge "$(learner_steps learner1)" "$KILL_AT"; }
wait_until 120 "learner1 past $KILL_AT steps" trained
actors_on_weights() { ge "$(actor_version actor0 0)" 1 && ge "$(actor_version actor1 1)" 1; }
wait_until 60 "both actors on learned weights" actors_on_weights
declare -a V_OLD=()
for ((i = 0; i < N; i++)); do V_OLD[i]=$(actor_version "actor$i" "$i"); done
log "learner1 at $(learner_steps learner1) steps; actors on weights v${V_OLD[0]} / v${V_OLD[1]}: kill -9 learner1"

# 2. the learner goes away
kill9 learner1
DIST_WATCH="shard0 shard1 actor0 actor1"
declare -a WATCHED=(actor0 actor1 shard0 shard1)
declare -A RSS0=() RSS_MAX=() RSS_FIRST=() RSS_LAST=()
for n in "${WATCHED[@]}"; do
  RSS0[$n]=$(rss_kib "$(pid_of "$n")")
  RSS_MAX[$n]=${RSS0[$n]} RSS_FIRST[$n]=${RSS0[$n]} RSS_LAST[$n]=0
done
samples=$((AWAY * 2))
for ((k = 0; k < samples; k++)); do
  sleep 0.5
  check_watch
  deadline_check
  for n in "${WATCHED[@]}"; do
    r=$(rss_kib "$(pid_of "$n")")
    [[ -n "$r" ]] || fail "$n gone while the learner was away"
    ((r > RSS_MAX[$n])) && RSS_MAX[$n]=$r
    # max over the first and over the last half of the window
    if ((k < samples / 2)); then
      ((r > RSS_FIRST[$n])) && RSS_FIRST[$n]=$r
    else
      ((r > RSS_LAST[$n])) && RSS_LAST[$n]=$r
    fi
  done
done
for n in "${WATCHED[@]}"; do
  log "$n VmRSS without a learner: ${RSS0[$n]} KiB at the kill, max ${RSS_FIRST[$n]} KiB over the first $((AWAY / 2)) s, max ${RSS_LAST[$n]} KiB over the last $((AWAY / 2)) s"
  ((RSS_MAX[$n] - RSS0[$n] <= RSS_GROWTH_MAX_KIB)) ||
    fail "$n grew by $((RSS_MAX[$n] - RSS0[$n])) KiB without a learner (bound $RSS_GROWTH_MAX_KIB KiB)"
  ((RSS_LAST[$n] - RSS_FIRST[$n] <= RSS_PLATEAU_KIB[$n])) ||
    fail "$n still growing without a learner: ${RSS_FIRST[$n]} -> ${RSS_LAST[$n]} KiB"
done
declare -a LINES_AWAY=()
for ((i = 0; i < N; i++)); do
  LINES_AWAY[i]=$(actor_lines "actor$i" "$i")
  log "actor$i without a learner: steps $(actor_steps "actor$i" "$i"), weights v$(actor_version "actor$i" "$i"), unacked $(actor_unacked "actor$i" "$i")"
done

# 3. a learner comes back on the same ports; the actors pick up its weights
start_local_learner learner2 "$WEIGHTS_PORT" --total_steps="$TOTAL" --publish_every=7 --publish_interval_ms=0
DIST_WATCH+=" learner2"
log "learner2 up on the same weights port $WEIGHTS_PORT"
# new_weights I: actor I has logged two or more distinct weights versions of learner2's
# (not multiples of 10: learner1's are); an actor that kept an old subscription, or
# stopped applying weights, never does
new_weights() {
  local vs
  vs=$(grep -a "actor $1: steps " "$T/actor$1.log" | tail -n +$((LINES_AWAY[$1] + 1)) |
    sed -n 's/.*weights v\([0-9][0-9]*\).*/\1/p' | awk '$1 % 10 != 0' | sort -u | wc -l)
  ((vs >= 2))
}
for ((i = 0; i < N; i++)); do
  wait_until 90 "actor$i on learner2's weights" new_weights "$i"
  log "actor$i now on learner2's weights v$(actor_version "actor$i" "$i") (was on learner1's v${V_OLD[$i]})"
done
wait_result learner2 120
log "$(result_line learner2)"
check_watch

# 4. a clean stop everywhere, no crash anywhere
stop_clean actor0 actor1 shard0 shard1
no_crash_in_logs
# nothing was lost or stored twice while the actors waited and resent for the shards
check_accounting 64 actor0 actor1 -- shard0 shard1
pass "actors survived $AWAY s without a learner with bounded memory and picked up the new learner's weights; its run finished"
