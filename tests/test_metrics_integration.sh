#!/usr/bin/env bash
# Integration test of the /metrics endpoints against a real Prometheus server (issue 5).
# It starts, all on 127.0.0.1 with ports picked by the kernel (or checked free):
#   one sac-replay shard, a sac-learner in remote mode sampling from it, one sac-actor
#   feeding it, a sac-learner in the embedded default (its shards and actors appear on
#   its own endpoint with shard / actor labels), and a Prometheus server scraping the
#   four every second;
# checks each endpoint's text with `promtool check metrics`, waits (bounded) until
# Prometheus reports every target up and the key series present (and moving) through
# its HTTP API, then stops only the processes it started and removes its directory.
#
# Usage: test_metrics_integration.sh SAC_LEARNER SAC_REPLAY SAC_ACTOR
# Exit: 0 pass, 1 fail, 77 skipped (no prometheus/promtool/curl: scripts/install-deps.sh --test
# installs the Debian package prometheus).
set -u
LEARNER=${1:?sac-learner path}
REPLAY=${2:?sac-replay path}
ACTOR=${3:?sac-actor path}

for tool in prometheus promtool curl; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "SKIP: $tool not installed (Debian package prometheus / curl; scripts/install-deps.sh --test installs them)"
    exit 77
  fi
done

# shellcheck source=tests/lib_it.sh
source "$(dirname "$0")/lib_it.sh"
it_init metrics-it
alive() { kill -0 "$1" 2>/dev/null || fail "$2 exited early"; }

# ---- the sacfleet processes ---------------------------------------------------------------
"$REPLAY" --insert_endpoint='tcp://127.0.0.1:*' --sample_endpoint='tcp://127.0.0.1:*' --obs_dim=3 --act_dim=1 \
  --capacity=100000 --min_size=256 --snapshot_path="$DIR/shard.snap" --snapshot_interval_s=2 \
  --metrics_addr=127.0.0.1 --metrics_port=0 --ready_file="$DIR/replay.ready" >"$DIR/replay.log" 2>&1 &
REPLAY_PID=$!
PIDS+=("$REPLAY_PID")
it_watch "$REPLAY_PID" sac-replay
wait_for '[ -f "$DIR/replay.ready" ] && grep -q "^metrics_port=" "$DIR/replay.ready"' 150 || fail "sac-replay not ready"
INSERT_EP=$(sed -n 's/^insert=//p' "$DIR/replay.ready")
SAMPLE_EP=$(sed -n 's/^sample=//p' "$DIR/replay.ready")
REPLAY_PORT=$(sed -n 's/^metrics_port=//p' "$DIR/replay.ready")

"$LEARNER" --shards="$SAMPLE_EP" --weights='tcp://127.0.0.1:*' --hidden=32 --batch_size=32 --threads=1 \
  --total_steps=1000000000 --eval_every=0 --log_interval=1 --run_dir="$DIR/runs" \
  --metrics_addr=127.0.0.1 --metrics_port=0 >"$DIR/learner.log" 2>&1 &
LEARNER_PID=$!
PIDS+=("$LEARNER_PID")
it_watch "$LEARNER_PID" "sac-learner (remote)"
wait_for 'grep -q "weights on tcp://127.0.0.1:[0-9]*" "$DIR/learner.log" && [ -n "$(logged_port "$DIR/learner.log")" ]' 300 ||
  fail "sac-learner (remote) not serving"
WEIGHTS_EP=$(grep -o 'weights on tcp://127.0.0.1:[0-9]*' "$DIR/learner.log" | head -n1 | sed 's/^weights on //')
LEARNER_PORT=$(logged_port "$DIR/learner.log")

"$ACTOR" --shards="$INSERT_EP" --weights="$WEIGHTS_EP" --learning_starts=200 --log_interval=0 \
  --metrics_addr=127.0.0.1 --metrics_port=0 >"$DIR/actor.log" 2>&1 &
ACTOR_PID=$!
PIDS+=("$ACTOR_PID")
it_watch "$ACTOR_PID" sac-actor
wait_for '[ -n "$(logged_port "$DIR/actor.log")" ]' 150 || fail "sac-actor not serving"
ACTOR_PORT=$(logged_port "$DIR/actor.log")

"$LEARNER" --hidden=32 --batch_size=32 --threads=1 --embedded_shards=2 --actors=2 --total_steps=1000000000 \
  --learning_starts=256 --eval_every=0 --log_interval=0 --run_dir="$DIR/runs" \
  --metrics_addr=127.0.0.1 --metrics_port=0 >"$DIR/embedded.log" 2>&1 &
EMBEDDED_PID=$!
PIDS+=("$EMBEDDED_PID")
it_watch "$EMBEDDED_PID" "sac-learner (embedded)"
wait_for '[ -n "$(logged_port "$DIR/embedded.log")" ]' 300 || fail "sac-learner (embedded) not serving"
EMBEDDED_PORT=$(logged_port "$DIR/embedded.log")
echo "endpoints: replay :$REPLAY_PORT  learner :$LEARNER_PORT  actor :$ACTOR_PORT  embedded :$EMBEDDED_PORT"

# ---- every endpoint: /healthz, and promtool over /metrics once the run is moving ---------
for t in "replay:$REPLAY_PORT" "learner:$LEARNER_PORT" "actor:$ACTOR_PORT" "embedded:$EMBEDDED_PORT"; do
  name=${t%%:*} port=${t##*:}
  [ "$(curl -s --max-time 5 "http://127.0.0.1:$port/healthz")" = ok ] || fail "$name /healthz"
  code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "http://127.0.0.1:$port/nope")
  [ "$code" = 404 ] || fail "$name /nope answered $code"
done
wait_for 'curl -s --max-time 5 "http://127.0.0.1:$LEARNER_PORT/metrics" | grep -q "^sac_learner_updates_total [1-9]"' 600 ||
  fail "the remote learner made no update"
for t in "replay:$REPLAY_PORT" "learner:$LEARNER_PORT" "actor:$ACTOR_PORT" "embedded:$EMBEDDED_PORT"; do
  name=${t%%:*} port=${t##*:}
  curl -s --max-time 5 "http://127.0.0.1:$port/metrics" >"$DIR/$name.prom" || fail "$name /metrics"
  out=$(promtool check metrics <"$DIR/$name.prom" 2>&1)
  rc=$?
  echo "promtool check metrics ($name, $(grep -vc '^#' "$DIR/$name.prom") samples): exit $rc${out:+, $out}"
  [ $rc -eq 0 ] && [ -z "$out" ] || fail "promtool check metrics on $name: $out"
done

# ---- /provenance on the shard: the fixed format, and its incarnation is the gauge's --------
curl -s --max-time 10 "http://127.0.0.1:$REPLAY_PORT/provenance" >"$DIR/provenance.txt" || fail "replay /provenance"
head -n1 "$DIR/provenance.txt" | grep -Eq '^# sacfleet provenance v1 shard=0 incarnation=[0-9]+$' ||
  fail "/provenance header: $(head -n1 "$DIR/provenance.txt")"
[ "$(tail -n +2 "$DIR/provenance.txt" | grep -c .)" -ge 1 ] || fail "/provenance lists no stored batch"
[ "$(tail -n +2 "$DIR/provenance.txt" | grep -cEv '^[0-9]+ [0-9]+ [0-9]+ [0-9]+$')" = 0 ] ||
  fail "/provenance has a malformed line"
inc=$(head -n1 "$DIR/provenance.txt" | sed 's/.*incarnation=//')
gauge=$(awk '/^sac_replay_incarnation[{]/ {printf "%.0f", $2}' "$DIR/replay.prom")
[ "$inc" = "$gauge" ] || fail "/provenance incarnation $inc, gauge sac_replay_incarnation $gauge"
echo "/provenance: $(tail -n +2 "$DIR/provenance.txt" | grep -c .) stored batches, incarnation $inc (= the gauge)"
curl -s --max-time 10 "http://127.0.0.1:$EMBEDDED_PORT/provenance?shard=1" >"$DIR/provenance-embedded.txt" ||
  fail "embedded /provenance?shard=1"
head -n1 "$DIR/provenance-embedded.txt" | grep -Eq '^# sacfleet provenance v1 shard=1 incarnation=[0-9]+$' ||
  fail "embedded /provenance?shard=1 header: $(head -n1 "$DIR/provenance-embedded.txt")"
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 "http://127.0.0.1:$EMBEDDED_PORT/provenance?shard=9")
[ "$code" = 503 ] || fail "embedded /provenance?shard=9 (no such shard) answered $code"

# ---- Prometheus ---------------------------------------------------------------------------
cat >"$DIR/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: replay
    static_configs: [{targets: ['127.0.0.1:$REPLAY_PORT']}]
  - job_name: learner
    static_configs: [{targets: ['127.0.0.1:$LEARNER_PORT']}]
  - job_name: actor
    static_configs: [{targets: ['127.0.0.1:$ACTOR_PORT']}]
  - job_name: embedded
    static_configs: [{targets: ['127.0.0.1:$EMBEDDED_PORT']}]
EOF
promtool check config "$DIR/prometheus.yml" >/dev/null || fail "generated prometheus.yml does not check"
it_start_prometheus "$DIR/prometheus.yml" || fail "Prometheus did not start"
echo "prometheus :$PROM_PORT"

# the value of an instant query's first result ("" when none)
query() {
  curl -s --max-time 5 -G "http://127.0.0.1:$PROM_PORT/api/v1/query" --data-urlencode "query=$1" |
    grep -o '"value":\[[^]]*\]' | head -n1 | sed 's/.*,"\(.*\)"\]/\1/'
}

wait_for '[ "$(query "count(up == 1)")" = 4 ]' 600 || {
  curl -s "http://127.0.0.1:$PROM_PORT/api/v1/targets" | head -c 2000
  fail "not every target is up"
}
echo "all 4 targets up"

# key series: each must return a sample (and the ones marked > 0 must be moving)
KEYS=(
  'sac_learner_updates_total{job="learner"} > 0'
  'sac_learner_update_duration_seconds_bucket{job="learner",le="+Inf"} > 0'
  'sac_learner_sample_wait_seconds_count{job="learner"} > 0'
  'sac_learner_critic_loss{job="learner"}'
  'sac_learner_actor_loss{job="learner"}'
  'sac_learner_alpha{job="learner"} > 0'
  'sac_learner_policy_entropy{job="learner"}'
  'sac_learner_mean_q{job="learner"}'
  'sac_learner_policy_version{job="learner"} > 0'
  'sac_learner_env_steps_total{job="learner"} > 0'
  'sac_learner_stage_seconds_total{job="learner",stage="sample"} > 0'
  'sac_learner_stage_seconds_total{job="learner",stage="update"} > 0'
  'sac_learner_stage_seconds_total{job="embedded",stage="publish"} > 0'
  'sac_replay_size{job="replay",shard="0"} > 0'
  'sac_replay_capacity{job="replay",shard="0"} == 100000'
  'sac_replay_inserted_transitions_total{job="replay"} > 0'
  'sac_replay_sampled_transitions_total{job="replay"} > 0'
  'sac_replay_rejected_messages_total{job="replay",reason="malformed"}'
  'sac_replay_rate_limiter_waits_total{job="replay",op="sample"}'
  'sac_replay_snapshot_age_seconds{job="replay"}'
  'sac_replay_snapshots_total{job="replay"} > 0'
  'sac_replay_transition_size_bytes{job="replay"} > 0'
  'sac_actor_env_steps_total{job="actor",actor="0"} > 0'
  'sac_actor_episode_return{job="actor"}'
  'sac_actor_policy_version{job="actor"} > 0'
  'sac_actor_send_wait_seconds_total{job="actor"}'
  'sac_actor_stage_seconds_total{job="actor",actor="0",stage="step"} > 0'
  'sac_actor_stage_seconds_total{job="embedded",actor="1",stage="act"} > 0'
  'sac_learner_policy_version{job="learner"} - on() group_right sac_actor_policy_version{job="actor"}'
  'sac_learner_updates_total{job="embedded"} > 0'
  'sac_replay_size{job="embedded",shard="1"} > 0'
  'sac_actor_env_steps_total{job="embedded",actor="1"} > 0'
  'sac_actor_policy_staleness{job="embedded",actor="0"}'
  'process_resident_memory_bytes{job="replay"} > 0'
  'process_resident_memory_bytes{job="learner"} > 0'
  'process_resident_memory_bytes{job="actor"} > 0'
  'process_cpu_seconds_total{job="learner"} > 0'
  'process_start_time_seconds{job="actor"} > 0'
  'sac_build_info{job="embedded",binary="sac-learner"} == 1'
)
for k in "${KEYS[@]}"; do
  alive "$LEARNER_PID" "sac-learner (remote)"
  alive "$EMBEDDED_PID" "sac-learner (embedded)"
  wait_for '[ -n "$(query "$k")" ]' 600 || fail "no sample for: $k"
  echo "ok  $k  = $(query "$k")"
done
echo "PASS: Prometheus scraped learner, replay, actor and embedded learner; every key series present"
exit 0
