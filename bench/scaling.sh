#!/usr/bin/env bash
# How cost grows with work (issue 17): a loopback cluster (sac-replay shards, sac-actor
# processes, one sac-learner, all on this machine) measured over a fixed window per
# configuration: actors 1, 4, 16, 64 on 2 shards, then shards 1, 2, 4 under 16 actors.
# Prints one markdown row per configuration:
#   env steps/s          transitions the shards stored per second (all shards)
#   updates/s            the learner's updates per second
#   actor CPU us/step    CPU time (user + system) of all actor processes per stored transition
#   shard CPU us/step    CPU time of all shard processes per stored transition (inserts,
#                        and the learner's sampling, which the shards also serve)
#   wire B/step          bytes over loopback per stored transition, everything included
#                        (inserts and acks, sample requests and replies, weights); only
#                        where the run has a network namespace of its own (root), else n/a
#   sample wait ms       the learner's mean wait per sampled batch
#   cores busy           CPU seconds of all processes per wall second
# The training configuration: the shards' rate limiter holds samples per insert at the
# batch size (one update per environment step, as tests/dist runs), so collection can run
# ahead of learning only within the limiter's buffer. Pendulum-v1, the learner at 2 x 256,
# batch 256, one thread. SCALING_SPI=0 turns the limiter off (collection then competes
# with the learner for the cores unchecked). Bounded: WINDOW seconds per
# configuration plus start-up (at most 60 s), the whole script at most 15 minutes.
# usage: bench/scaling.sh [BUILD_DIR] [WINDOW_S]   (DIST_KEEP=1 keeps the logs)
#   SCALING_CONFIGS="64 2,16 2"   the configurations ("ACTORS SHARDS", comma-separated)
#   SCALING_LEARNER_ARGS="..."    more learner options, e.g. "--backend=null
#                                 --publish_interval_ms=0 --weights_precision=bf16"
set -u
build=${1:-build}; window=${2:-10}
build=$(cd "$build" && pwd) || exit 2
if [[ $(id -u) == 0 && -z "${SCALING_IN_NETNS:-}" ]] && command -v unshare >/dev/null; then
  # a network namespace of our own: its loopback carries only this cluster's bytes
  exec env SCALING_IN_NETNS=1 unshare -n bash -c 'ip link set lo up && exec "$0" "$@"' "$0" "$build" "$window"
fi
source "$(dirname "${BASH_SOURCE[0]}")/../tests/dist/lib.sh" || exit 2
dist_init scaling 900
check_binaries "$build/learner/sac-learner" "$build/actor/sac-actor" "$build/replay/sac-replay"
BUFFER=1000000 LEARNING_STARTS=1000
hz=$(getconf CLK_TCK)

cpu_ticks() { # sum of utime + stime of the given PIDs
  local p s=0 line rest
  for p in "$@"; do
    read -r line 2>/dev/null <"/proc/$p/stat" || continue
    rest=${line##*) }
    # shellcheck disable=SC2086
    set -- $rest
    s=$((s + ${12} + ${13}))
  done
  echo "$s"
}
lo_bytes() { [[ -n "${SCALING_IN_NETNS:-}" ]] && awk -F'[: ]+' '$2 == "lo" {print $3}' /proc/net/dev || echo 0; }
fmetric() { # NAME METRIC [SUFFIX]: a float from NAME's /metrics (first series of the family)
  local port
  port=$(sed -n 's|.*metrics on http://127\.0\.0\.1:\([0-9][0-9]*\)/metrics.*|\1|p' "$T/$1.log" | tail -n 1)
  [[ -n "$port" ]] || { echo 0; return; }
  timeout 3 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" && printf "GET /metrics HTTP/1.0\r\n\r\n" >&3 && cat <&3' \
    _ "$port" 2>/dev/null | awk -v s="$2" '$1 == s || index($1, s "{") == 1 { print $2 + 0; found = 1; exit } END { if (!found) print 0 }'
}
sum_metric() { # METRIC NAMES...: the sum over processes
  local m=$1 n t=0 v
  shift
  for n in "$@"; do v=$(fmetric "$n" "$m"); t=$(awk -v a="$t" -v b="$v" 'BEGIN {print a + b}'); done
  echo "$t"
}

run_config() { # ACTORS SHARDS
  local N=$1 S=$2 i names=() shard_names=() actor_pids=() shard_pids=() all
  SHARD_INS=() SHARD_SMP=()
  for ((i = 0; i < S; i++)); do
    start_local_shard "s${S}a${N}shard$i" "$S" "$i" ${SCALING_SPI:+--samples_per_insert=$SCALING_SPI}
    shard_names+=("s${S}a${N}shard$i") shard_pids+=("$START_PID")
  done
  # shellcheck disable=SC2086
  start_local_learner "s${S}a${N}learner" "" --total_steps=1000000000 --threads=1 --eval_every=0 \
    --checkpoint_every=0 --log_interval=0 ${SCALING_LEARNER_ARGS:-}
  local lpid=$START_PID
  for ((i = 0; i < N; i++)); do
    start_local_actor "s${S}a${N}actor$i" "$N" "$i" --log_interval=0 --metrics_port=-1
    actor_pids+=("$START_PID")
  done
  all=("${shard_pids[@]}" "${actor_pids[@]}" "$lpid")
  # warm-up: until the learner has updated (learning_starts stored, every actor started)
  local end=$((SECONDS + 60)) u0=0
  while ((SECONDS < end)); do
    u0=$(fmetric "s${S}a${N}learner" sac_learner_updates_total)
    awk -v u="$u0" 'BEGIN {exit !(u >= 20)}' && break
    sleep 0.5
  done
  awk -v u="$u0" 'BEGIN {exit !(u >= 20)}' || fail "$N actors, $S shards: the learner did not start updating in 60 s"
  local t0 st0 ws0 wc0 ca0 cs0 call0 b0 t1
  t0=$(date +%s.%N)
  u0=$(fmetric "s${S}a${N}learner" sac_learner_updates_total)
  st0=$(sum_metric sac_replay_inserted_transitions_total "${shard_names[@]}")
  ws0=$(fmetric "s${S}a${N}learner" sac_learner_sample_wait_seconds_sum)
  wc0=$(fmetric "s${S}a${N}learner" sac_learner_sample_wait_seconds_count)
  ca0=$(cpu_ticks "${actor_pids[@]}") cs0=$(cpu_ticks "${shard_pids[@]}") call0=$(cpu_ticks "${all[@]}")
  b0=$(lo_bytes)
  sleep "$window"
  t1=$(date +%s.%N)
  local u1 st1 ws1 wc1 ca1 cs1 call1 b1
  u1=$(fmetric "s${S}a${N}learner" sac_learner_updates_total)
  st1=$(sum_metric sac_replay_inserted_transitions_total "${shard_names[@]}")
  ws1=$(fmetric "s${S}a${N}learner" sac_learner_sample_wait_seconds_sum)
  wc1=$(fmetric "s${S}a${N}learner" sac_learner_sample_wait_seconds_count)
  ca1=$(cpu_ticks "${actor_pids[@]}") cs1=$(cpu_ticks "${shard_pids[@]}") call1=$(cpu_ticks "${all[@]}")
  b1=$(lo_bytes)
  awk -v N="$N" -v S="$S" -v dt="$(awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}')" -v du=$((${u1%.*} - ${u0%.*})) \
    -v ds="$(awk -v a="$st0" -v b="$st1" 'BEGIN {print b - a}')" -v ca=$((ca1 - ca0)) -v cs=$((cs1 - cs0)) \
    -v call=$((call1 - call0)) -v hz="$hz" -v db=$((b1 - b0)) -v netns="${SCALING_IN_NETNS:-}" \
    -v ws="$(awk -v a="$ws0" -v b="$ws1" 'BEGIN {print b - a}')" -v wc="$(awk -v a="$wc0" -v b="$wc1" 'BEGIN {print b - a}')" \
    'BEGIN {
       steps = ds / dt; ups = du / dt
       a = (ds > 0) ? sprintf("%.0f", ca / hz * 1e6 / ds) : "-"
       s = (ds > 0) ? sprintf("%.0f", cs / hz * 1e6 / ds) : "-"
       w = (netns != "" && ds > 0) ? sprintf("%.0f", db / ds) : "n/a"
       q = (wc > 0) ? sprintf("%.2f", ws / wc * 1e3) : "-"
       printf "| %d | %d | %.0f | %.1f | %s | %s | %s | %s | %.2f |\n", N, S, steps, ups, a, s, w, q, call / hz / dt
     }' | tee -a "$T/table.md"
  # stop this configuration's processes: actors first, then learner and shards
  local p
  for p in "${actor_pids[@]}" "$lpid" "${shard_pids[@]}"; do stop_pid "$p" 5 >/dev/null 2>&1 || true; done
}

echo "== scaling: $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores ($(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)), load average $(cut -d' ' -f1-3 /proc/loadavg), window ${window} s$([[ -n "${SCALING_IN_NETNS:-}" ]] && echo ', own network namespace')"
echo "| actors | shards | env steps/s | updates/s | actor CPU us/step | shard CPU us/step | wire B/step | sample wait ms | cores busy |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
echo "learner options: --threads=1 ${SCALING_LEARNER_ARGS:-(defaults)}"
IFS=, read -r -a configs <<<"${SCALING_CONFIGS:-1 2,4 2,16 2,64 2,16 1,16 4}"
for cfg in "${configs[@]}"; do
  # shellcheck disable=SC2086
  run_config $cfg
  deadline_check
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
pass "scaling table above"
