#!/usr/bin/env bash
# The command line as people type it, through the real programs: -h; --total-steps and 6e5;
# a typo named with the closest option and no second error about a positional argument; an
# unknown --env named with the closest ID, exit 2, and no line that reads like a missing
# binary; options the chosen mode ignores refused with where they belong (from a config file
# or SAC_*: a warning, none where the value is the default), with the controls that they pass
# in their own mode; --run_name leaving --run_dir
# and a value no program takes (--dp_collective=bogus) refused; a metrics port in use named
# with --metrics_port 0 and -1.
# A refused --run_name ("stop/here") ends a run after every other check and before anything
# starts: the controls use it to show that nothing else was refused.
# usage: test_cli.sh BUILD_DIR
set -euo pipefail
build=$1
L=$build/learner/sac-learner A=$build/actor/sac-actor R=$build/replay/sac-replay
T=$(mktemp -d /tmp/sac-cli-XXXXXX)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
while read -r v; do unset "$v"; done < <(compgen -e | grep '^SAC_' || true)
n=0
# expect RC PATTERN [NOT_PATTERN] -- command...: exit code RC, output matching PATTERN (grep -E)
# and, when NOT_PATTERN is not empty, not matching it
expect() {
  local want=$1 pat=$2 notpat=$3 rc=0
  shift 4
  "$@" >"$T/out" 2>&1 || rc=$?
  [ "$rc" = "$want" ] || { cat "$T/out"; fail "exit $rc, not $want: $*"; }
  grep -Eq -- "$pat" "$T/out" || { cat "$T/out"; fail "no '$pat': $*"; }
  if [ -n "$notpat" ] && grep -Eq -- "$notpat" "$T/out"; then cat "$T/out"; fail "'$notpat' printed: $*"; fi
  n=$((n + 1))
}
stop=(--run_name stop/here --metrics_port -1)

for b in "$L" "$A" "$R"; do expect 0 '^Usage: ' '' -- "$b" -h; done
expect 2 'run name is one folder' 'ERROR config' -- "$L" --total-steps 6e5 --batch-size=1e2 "${stop[@]}"
expect 2 "unknown key 'totl_steps'.*did you mean --total_steps\\?" 'positional' -- "$L" --totl_steps 500 "${stop[@]}"
expect 2 "unknown environment 'pendulum-v1' \\(did you mean Pendulum-v1\\?" 'not found$' -- "$L" --env pendulum-v1 --metrics_port -1
expect 2 "unknown environment 'halfcheetah-v5' \\(did you mean HalfCheetah-v5\\?" 'not found$' -- "$A" --env halfcheetah-v5 --metrics_port -1

# options the mode ignores, refused with where they belong; the same in their mode pass
expect 2 "--learning_starts has no effect here: with --shards, the shards' --min_size" '' -- \
  "$L" --shards tcp://127.0.0.1:9 --learning_starts 300 "${stop[@]}"
for o in capacity=5000 updates_per_step=2 embedded_shards=1 embedded_actors=1 envs_per_actor=2 durability=none \
  wal_sync_ms=5 priority_alpha=0.5; do
  expect 2 "--${o%%=*} has no effect here: with --shards" '' -- "$L" --shards tcp://127.0.0.1:9 "--$o" "${stop[@]}"
  expect 2 'run name is one folder' 'has no effect' -- "$L" "--$o" "${stop[@]}"
done
for o in actor_lag=0 eval_every_steps=100 log_every_steps=100; do
  expect 2 "--${o%%=*} has no effect here: " '' -- "$L" "--$o" "${stop[@]}"
  expect 2 'run name is one folder' 'has no effect' -- "$L" --mode local "--$o" "${stop[@]}"
done
for o in shards=tcp://127.0.0.1:9 embedded_actors=1 publish_every=5 eval_every_updates=10 log_interval_s=5 \
  sampler=prioritized curve_key=x.key; do
  expect 2 "--${o%%=*} has no effect here: --mode local" '' -- "$L" --mode local "--$o" "${stop[@]}"
done
expect 2 '--dp_coord has no effect here: without --dp_size 2' '' -- "$L" --dp_coord tcp://x:1 "${stop[@]}"
expect 2 '--graphs has no effect here' '' -- "$L" --graphs false "${stop[@]}"
# from the environment: a warning (one environment serves a whole deployment), not a refusal
SAC_LEARNING_STARTS=300 expect 2 'environment variable SAC_LEARNING_STARTS: --learning_starts is not used here' \
  'has no effect' -- "$L" --shards tcp://127.0.0.1:9 "${stop[@]}"
# from a config file too (one file may serve every program; a run's config.txt holds every
# option), and not at all where the file holds the default (the control)
printf 'learning_starts = 300\n' >"$T/ls.conf"
expect 2 'the config file: --learning_starts is not used here' 'has no effect' -- \
  "$L" --shards tcp://127.0.0.1:9 --config "$T/ls.conf" "${stop[@]}"
printf 'actor_lag = 1\neval_every_steps = 5000\n' >"$T/defaults.conf"
expect 2 'run name is one folder' 'not used here|has no effect' -- "$L" --config "$T/defaults.conf" "${stop[@]}"
# the old name with two meanings is not refused in either mode
expect 2 'run name is one folder' 'has no effect' -- "$L" --log_interval 5 "${stop[@]}"

# values no program takes; a run name that leaves --run_dir
expect 2 'dp_collective "bogus" is not one of auto, zmq, nccl' '' -- "$L" --dp_collective=bogus --metrics_port -1
expect 2 'sampler "x" is not one of' '' -- "$L" --sampler x --metrics_port -1
for name in ../../x a/b . ..; do
  expect 2 "--run_name $name: a run name is one folder name inside --run_dir" '' -- "$L" --run_name "$name" \
    --run_dir "$T/runs" --metrics_port -1
done
[ ! -e "$T/x" ] && [ ! -e "$T/runs" ] || fail "a refused --run_name made a folder"

# a metrics port another process holds: the run goes on without the endpoint, and the line
# names the two ways out; the port is held by a listener this test starts (and stops, by PID)
exec 3< <(python3 -c 'import socket, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
print(s.getsockname()[1], flush=True); time.sleep(120)')
holder=$!
read -r busy <&3
expect 0 "port $busy.*--metrics_port 0 picks a free one.*--metrics_port -1 turns the endpoint off" '' -- \
  "$L" --metrics_port "$busy" --total_steps 300 --learning_starts 100 --hidden 8 --eval_episodes 1 \
  --run_dir "$T/busy"
kill "$holder" 2>/dev/null || true
exec 3<&-
echo "$n checks passed"
