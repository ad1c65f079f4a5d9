#!/usr/bin/env bash
# CurveZMQ across real processes (docs/RELIABILITY.md, "Authentication and encryption"),
# all on 127.0.0.1 with ports picked by the kernel:
#   sac-keygen makes a server key pair (shared by the shard and the learner), an actor
#   key pair and a stranger's; one sac-replay shard and a sac-learner in remote mode run
#   with CURVE; an actor with the allowed key feeds the run to its end, while an actor
#   with the stranger's key and one without any key run beside it and get nothing: no
#   weights, no acknowledged batch; the shard's sac_auth_denied_total counts the
#   stranger. Also: the learner's metrics endpoint binds 0.0.0.0 by default with
#   --shards and 127.0.0.1 in the embedded default; half-configured CURVE options exit 2.
# Only processes this script started are signalled, by PID; every wait is bounded.
#
# Usage: test_curve_cluster.sh SAC_LEARNER SAC_REPLAY SAC_ACTOR SAC_KEYGEN
# Exit: 0 pass, 1 fail, 77 skipped (no curl).
set -u
LEARNER=${1:?sac-learner path}
REPLAY=${2:?sac-replay path}
ACTOR=${3:?sac-actor path}
KEYGEN=${4:?sac-keygen path}
command -v curl >/dev/null 2>&1 || { echo "SKIP: curl not installed"; exit 77; }

# shellcheck source=tests/lib_it.sh
source "$(dirname "$0")/lib_it.sh"
it_init curve-it
# the first sample of series $2 (name, or name{labels} exactly) on port $1
metric() {
  curl -s --max-time 5 "http://127.0.0.1:$1/metrics" |
    awk -v n="$2" '$1 == n || (index(n, "{") == 0 && index($1, n "{") == 1) { print $2; exit }'
}

# ---- keys -----------------------------------------------------------------------------------
K=$DIR/keys
mkdir -p "$K"
for n in server actor stranger; do
  "$KEYGEN" --out "$K/$n" >/dev/null 2>"$DIR/keygen.log" || fail "sac-keygen --out $K/$n"
done
[ "$(stat -c %a "$K/server.key")" = 600 ] || fail "server.key is not mode 0600"
cat "$K/actor.pub" "$K/server.pub" >"$K/allowed.txt" # the actors, and the learner (as the shard's client)
SRV=(--curve_key="$K/server.key" --curve_allow="$K/allowed.txt")

# ---- half-configured options: exit 2 with the option named -----------------------------
"$REPLAY" --curve_key="$K/server.key" --metrics_port=-1 >"$DIR/bad.log" 2>&1
[ $? -eq 2 ] && grep -q curve_allow "$DIR/bad.log" || fail "sac-replay without curve_allow did not refuse"
"$ACTOR" --curve_key="$K/actor.key" --metrics_port=-1 >"$DIR/bad.log" 2>&1
[ $? -eq 2 ] && grep -q curve_server_key "$DIR/bad.log" || fail "sac-actor without curve_server_key did not refuse"
"$LEARNER" --shards=tcp://127.0.0.1:9 --curve_key="$K/server.key" --curve_allow="$K/allowed.txt" \
  --metrics_port=-1 --run_dir="$DIR/runs" >"$DIR/bad.log" 2>&1
[ $? -eq 2 ] && grep -q curve_server_key "$DIR/bad.log" || fail "remote sac-learner without curve_server_key"
printf 'public = not-a-key\n' >"$K/broken.pub"
"$ACTOR" --curve_key="$K/actor.key" --curve_server_key="$K/broken.pub" --metrics_port=-1 >"$DIR/bad.log" 2>&1
[ $? -eq 2 ] && grep -q "broken.pub:1:" "$DIR/bad.log" || fail "a broken key file is not named with its line"
rm -f "$DIR/bad.log"
echo "half-configured and broken CURVE options: exit 2, the option or file:line named"

# ---- the cluster ------------------------------------------------------------------------------
"$REPLAY" --insert_endpoint='tcp://127.0.0.1:*' --sample_endpoint='tcp://127.0.0.1:*' --obs_dim=3 --act_dim=1 \
  --capacity=100000 --min_size=256 --durability=none "${SRV[@]}" --metrics_addr=127.0.0.1 --metrics_port=0 \
  --ready_file="$DIR/replay.ready" >"$DIR/replay.log" 2>&1 &
PIDS+=($!)
wait_for '[ -f "$DIR/replay.ready" ] && grep -q "^metrics_port=" "$DIR/replay.ready"' 150 || fail "sac-replay not ready"
INSERT_EP=$(sed -n 's/^insert=//p' "$DIR/replay.ready")
SAMPLE_EP=$(sed -n 's/^sample=//p' "$DIR/replay.ready")
REPLAY_PORT=$(sed -n 's/^metrics_port=//p' "$DIR/replay.ready")

# metrics_addr left at its default: 0.0.0.0 for a learner with --shards
"$LEARNER" --shards="$SAMPLE_EP" --weights='tcp://127.0.0.1:*' "${SRV[@]}" --curve_server_key="$K/server.pub" \
  --hidden=32 --batch_size=32 --threads=1 --total_steps=2500 --eval_every=0 \
  --eval_episodes=1 --log_interval=1 --run_dir="$DIR/runs" --metrics_port=0 >"$DIR/learner.log" 2>&1 &
LEARNER_PID=$!
PIDS+=("$LEARNER_PID")
wait_for 'grep -q "weights on tcp://127.0.0.1:[0-9]*" "$DIR/learner.log"' 300 || fail "sac-learner not serving"
WEIGHTS_EP=$(grep -o 'weights on tcp://127.0.0.1:[0-9]*' "$DIR/learner.log" | head -n1 | sed 's/^weights on //')
[ -n "$(logged_port "$DIR/learner.log" 0.0.0.0)" ] || fail "the remote learner's metrics do not bind 0.0.0.0"

# the refused first, so they are connected (and refused) through the whole run
"$ACTOR" --shards="$INSERT_EP" --weights="$WEIGHTS_EP" --actor_id=7 --curve_key="$K/stranger.key" \
  --curve_server_key="$K/server.pub" --log_interval=0 --metrics_addr=127.0.0.1 --metrics_port=0 \
  >"$DIR/stranger.log" 2>&1 &
PIDS+=($!)
"$ACTOR" --shards="$INSERT_EP" --weights="$WEIGHTS_EP" --actor_id=8 --log_interval=0 --metrics_addr=127.0.0.1 \
  --metrics_port=0 >"$DIR/plain.log" 2>&1 &
PIDS+=($!)
wait_for '[ -n "$(logged_port "$DIR/stranger.log" 127.0.0.1)" ] && [ -n "$(logged_port "$DIR/plain.log" 127.0.0.1)" ]' 150 ||
  fail "the refused actors did not start"
STRANGER_PORT=$(logged_port "$DIR/stranger.log" 127.0.0.1)
PLAIN_PORT=$(logged_port "$DIR/plain.log" 127.0.0.1)
wait_for '[ "$(metric "$REPLAY_PORT" sac_auth_denied_total)" != 0 ]' 100 || fail "the shard denied nobody"

"$ACTOR" --shards="$INSERT_EP" --weights="$WEIGHTS_EP" --actor_id=1 --curve_key="$K/actor.key" \
  --curve_server_key="$K/server.pub" --learning_starts=200 --log_interval=0 --metrics_port=-1 \
  >"$DIR/actor.log" 2>&1 &
PIDS+=($!)

# the run ends by itself once the shard stored total_steps transitions; waited for by
# progress (the learner's log, one line a second, and the shard's stored transitions), not
# by the clock: it fails once neither has moved for 60 s
curve_progress() {
  wc -c <"$DIR/learner.log"
  metric "$REPLAY_PORT" sac_replay_inserted_transitions_total
}
IT_PROGRESS=curve_progress
wait_for '! kill -0 "$LEARNER_PID" 2>/dev/null' 600 ||
  fail "the CURVE run stopped moving: nothing progressed for 60 s (learner log $(wc -c <"$DIR/learner.log") bytes, shard transitions $(metric "$REPLAY_PORT" sac_replay_inserted_transitions_total))"
IT_PROGRESS=it_progress
wait "$LEARNER_PID"
rc=$?
[ $rc -eq 0 ] || fail "sac-learner exited $rc"
grep -q '^result: ' "$DIR/learner.log" || fail "no result line"
echo "$(grep '^result: ' "$DIR/learner.log" | cut -c1-120)"

for t in "stranger:$STRANGER_PORT" "plain:$PLAIN_PORT"; do
  name=${t%%:*} port=${t##*:}
  w=$(metric "$port" sac_actor_weights_updates_total)
  v=$(metric "$port" sac_actor_policy_version)
  [ "$w" = 0 ] && [ "$v" = 0 ] || fail "the $name actor received weights (updates $w, version $v)"
done
acc=$(metric "$REPLAY_PORT" sac_auth_accepted_total)
den=$(metric "$REPLAY_PORT" sac_auth_denied_total)
ins=$(metric "$REPLAY_PORT" 'sac_replay_inserted_transitions_total{shard="0"}')
echo "shard: sac_auth_accepted_total $acc, sac_auth_denied_total $den, inserted $ins"
[ "${acc:-0}" -ge 2 ] 2>/dev/null || fail "the shard accepted $acc connections (the learner and the actor: >= 2)"
# key prefixes are Z85: fixed strings, not patterns
prefix() { sed -n 's/^public = \(........\).*/\1/p' "$1"; }
grep -F "denied a connection from 127.0.0.1, client key $(prefix "$K/stranger.pub")..." "$DIR/replay.log" >/dev/null ||
  fail "the shard's log does not name the stranger's key prefix"
grep -F "denied a connection" "$DIR/replay.log" | grep -F "client key $(prefix "$K/actor.pub")" >/dev/null &&
  fail "the shard denied the allowed actor"

# ---- the embedded default's metrics bind loopback ---------------------------------------
"$LEARNER" --hidden=16 --batch_size=16 --threads=1 --embedded_shards=1 --actors=1 --total_steps=400 \
  --learning_starts=100 --eval_every=0 --eval_episodes=1 --log_interval=0 --run_dir="$DIR/runs" \
  --metrics_port=0 >"$DIR/embedded.log" 2>&1 &
EMB_PID=$!
PIDS+=("$EMB_PID")
wait_for '[ -n "$(logged_port "$DIR/embedded.log" 127.0.0.1)" ]' 300 ||
  fail "the embedded learner's metrics do not bind 127.0.0.1"
echo "metrics bind 0.0.0.0 for the remote learner, 127.0.0.1 for the embedded default"
echo "PASS"
