#!/usr/bin/env bash
# sac-replay started with no size options serves actors of different environments: each
# shard takes its sizes from the first actor's batch (or from --env ID), stores every
# transition of that actor, and refuses a later actor of other sizes with the "dims" reason
# (the negative control: a mismatched actor's batches are counted as rejected, never stored).
# Environments: MountainCarContinuous-v0 (2, 1) and Hopper-v5 (11, 3) where the MuJoCo
# models are found, else Pendulum-v1 (3, 1). Loopback only; every wait is bounded.
# usage: test_replay_sizes.sh SAC_REPLAY SAC_ACTOR
set -u
REPLAY=$1 ACTOR=$2
. "$(dirname "$0")/lib_it.sh"
it_init replay-sizes
unset SAC_OBS_DIM SAC_ACT_DIM SAC_ENV

# start_shard NAME [OPTIONS...]: a shard on free loopback ports, no size options
start_shard() {
  local name=$1
  shift
  "$REPLAY" --insert_endpoint='tcp://127.0.0.1:*' --sample_endpoint='tcp://127.0.0.1:*' --durability=none \
    --metrics_addr=127.0.0.1 --metrics_port=0 --ready_file="$DIR/$name.ready" "$@" >"$DIR/$name.log" 2>&1 &
  PIDS+=($!)
}
# insert_ep NAME: the endpoint the shard waits on (before sizing) or serves (after)
insert_ep() {
  grep -o 'waiting on tcp://127.0.0.1:[0-9]*' "$DIR/$1.log" 2>/dev/null | head -n1 | sed 's/^waiting on //'
}
metric() { # metric NAME SERIES [LABEL]: the shard's counter (the series with LABEL, e.g. reason="dims")
  local port
  port=$(sed -n 's/^metrics_port=//p' "$DIR/$1.ready")
  curl -fsS "http://127.0.0.1:$port/metrics" >"$DIR/$1.metrics" || return 1
  awk -v s="$2" -v l="${3:-}" '($1 == s || index($1, s "{") == 1) && index($1, l) {print $2; exit}' "$DIR/$1.metrics"
}
metric_int() { # metric_int NAME SERIES [LABEL]: the counter without a fractional part
  local v
  v=$(metric "$@") || return 1
  echo "${v%.*}"
}
run_actor() { # run_actor NAME ID ENV ENDPOINT: 300 steps, at most 60 s
  timeout 60 "$ACTOR" --actor_id="$2" --env="$3" --shards="$4" --weights=tcp://127.0.0.1:9 --weights_wait_ms=0 \
    --max_steps=300 --metrics_port=-1 --log_interval_s=0 >"$DIR/$1.log" 2>&1
}

second=Hopper-v5 second_dims="obs_dim 11, act_dim 3"
if ! "$ACTOR" --env=Hopper-v5 --shards=tcp://127.0.0.1:9 --max_steps=1 --metrics_port=-1 --weights_wait_ms=0 \
  >"$DIR/probe.log" 2>&1 && grep -q "no model file\|plugin" "$DIR/probe.log"; then
  echo "Hopper-v5 cannot run here ($(grep -o 'no model file[^:]*' "$DIR/probe.log" | head -n1)); using Pendulum-v1"
  second=Pendulum-v1 second_dims="obs_dim 3, act_dim 1"
fi

start_shard a
start_shard b
for s in a b; do
  wait_for '[ -n "$(insert_ep '$s')" ]' 300 || fail "shard $s did not start within 30 s"
done
run_actor actor_a 1 MountainCarContinuous-v0 "$(insert_ep a)" || fail "the MountainCarContinuous-v0 actor failed"
run_actor actor_b 2 "$second" "$(insert_ep b)" || fail "the $second actor failed"
for s in a b; do
  wait_for "[ -s '$DIR/$s.ready' ]" 300 || fail "shard $s did not serve within 30 s"
done
grep -q "sized from the first batch (actor 1): obs_dim 2, act_dim 1" "$DIR/a.log" || fail "shard a not sized 2, 1"
grep -q "sized from the first batch (actor 2): $second_dims" "$DIR/b.log" || fail "shard b not sized $second_dims"
# the shard publishes its counters within about a millisecond of the last batch: wait for
# them (5 s at most), then read once more for the message
for s in a b; do
  wait_for '[ "$(metric_int '$s' sac_replay_inserted_transitions_total)" = 300 ]' 50
  n=$(metric "$s" sac_replay_inserted_transitions_total)
  [ "${n%.*}" = 300 ] || fail "shard $s stored ${n:-nothing} transitions, not the actor's 300"
done

# the negative control: an actor of other sizes is refused, and nothing of it is stored
run_actor actor_bad 3 "$second" "$(insert_ep a)"
grep -q "dimensions differ from the receiver's" "$DIR/actor_bad.log" || fail "the mismatched actor was not told why"
# counters are published together: once the rejection shows, the inserts read after it
# include anything stored before it
wait_for '[ "$(metric_int a sac_replay_rejected_messages_total '"'"'reason="dims"'"'"')" -gt 0 ] 2>/dev/null' 50
rej=$(metric a sac_replay_rejected_messages_total 'reason="dims"')
[ "${rej%.*}" -gt 0 ] 2>/dev/null || fail "shard a counted no message rejected for its dims"
n=$(metric a sac_replay_inserted_transitions_total)
[ "${n%.*}" = 300 ] || fail "shard a stored a mismatched batch ($n transitions)"

# --env ID sizes a shard at start, without waiting
start_shard c --env=MountainCarContinuous-v0
wait_for "[ -s '$DIR/c.ready' ]" 300 || fail "shard c (--env) did not serve within 30 s"
grep -q "sizes: obs_dim 2, act_dim 1 from --env MountainCarContinuous-v0" "$DIR/c.log" || fail "shard c not sized by --env"
# and sizes that contradict --env are refused at start, naming both
"$REPLAY" --env=MountainCarContinuous-v0 --obs_dim=3 --act_dim=1 --metrics_port=-1 --durability=none \
  >"$DIR/contradict.log" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "contradict --env" "$DIR/contradict.log" || fail "contradicting sizes: exit $rc"
# a restart with no sizes takes them from the snapshot it restores
"$REPLAY" --insert_endpoint='tcp://127.0.0.1:*' --sample_endpoint='tcp://127.0.0.1:*' --durability=snapshot \
  --snapshot_path="$DIR/d.snap" --metrics_port=-1 >"$DIR/d.log" 2>&1 &
d=$!
PIDS+=($d)
wait_for '[ -n "$(insert_ep d)" ]' 300 || fail "shard d did not start within 30 s"
run_actor actor_d 4 MountainCarContinuous-v0 "$(insert_ep d)" || fail "the actor of shard d failed"
kill -TERM "$d"
wait_for "! kill -0 $d 2>/dev/null" 300 || fail "shard d did not stop within 30 s"
[ -s "$DIR/d.snap" ] || fail "shard d wrote no snapshot"
start_shard e --durability=snapshot --snapshot_path="$DIR/d.snap"
wait_for "[ -s '$DIR/e.ready' ]" 300 || fail "shard e (restart) did not serve within 30 s"
grep -q "sizes: obs_dim 2, act_dim 1 from the snapshot" "$DIR/e.log" || fail "the restart did not take the snapshot's sizes"
echo "PASS: shards with no size options served MountainCarContinuous-v0 (2, 1) and $second ($second_dims)"
