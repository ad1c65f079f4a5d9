#!/usr/bin/env bash
# Load (issue 8, point 2): 64 actors (64 sac-actor processes, 64 actor identities) against
# 2 replay shards and a learner (remote mode, Pendulum-v1, the default 2 x 256 network),
# all on 127.0.0.1, for a bounded window (LOAD_S, default 60 s) after a warm-up. The
# learner is the bottleneck by far (about 150 updates/s on 2 cores against actors that
# could step thousands of times faster), so the run is backpressure the whole time.
# Checks that
#   - backpressure holds: the shards' rate limiters hold inserts back (their insert waits
#     grow over the window), the actors wait for window room (their send waits grow), and
#     the shards store no more than the learner's pace allows (inserted transitions per
#     second within 25% of updates per second: updates_per_step is 1);
#   - memory stays bounded: the RSS of every process, sampled every SAMPLE_S, stays below
#     its bound (below) and does not keep growing (the maximum over the last third of the
#     window exceeds the maximum over the first third by at most PLATEAU_KIB);
#   - nothing crashes, and everything stops cleanly on SIGTERM (exit 0): the actors one
#     after the other (as when a deployment scales them down), then the learner and the
#     shards.
# Every check is evaluated and all failures are reported together at the end.
# Reports p50/p99 of the learner's sample request latency (its
# sac_learner_sample_wait_seconds histogram, observations within the window) and of the
# insert latency (every actor's sac_actor_insert_latency_seconds histogram, a batch's
# first send to its acknowledgement, summed over the actors, observations within the
# window), the mean time from send to acknowledgement by Little's law (transitions sent
# but not yet stored, over the rate the shards store them), plus throughput, waits,
# fairness (steps per actor) and the RSS figures, as a table.
#
# RSS bounds, and why (KiB):
#   shard   229376 (224 MiB): the ring, 500,000 slots x 25 bytes (obs 12, action 4, reward
#           4, next slot 4, flags 1) = 12.5 MB; two decoders' arenas, 2 x 16.8 MB, and two
#           4 MiB message buffers (replay/server.c); the held inserts, at most 64 actors x
#           16 batches x 2.3 KB = 2.4 MB (bounded by max_held_bytes, 64 MiB); ZeroMQ's
#           receive queues, drained all the time (the server always reads), at most
#           ZMQ_RCVHWM = 256 messages per connected actor, each pinning at most one 8 KiB
#           receive buffer: 134 MB in the worst case; code, ZeroMQ and libuv threads
#           ~10 MB.
#   actor   32768 (32 MiB): a window of 16 encoded batches per shard (2 x 16 x 2.3 KB), two
#           copies of the policy (2 x 67k floats = 0.5 MB), code and ZeroMQ threads (~10 MB).
#   learner 262144 (256 MiB): networks, targets and Adam state (< 4 MB), prefetched batches,
#           OpenBLAS's per-thread buffers (32 MB each), code and threads.
#
# usage: load_test.sh SAC_LEARNER SAC_ACTOR SAC_REPLAY
# env:   LOAD_ACTORS (64), LOAD_S (60), LOAD_SAMPLE_S (5), DIST_DEADLINE_S (540), DIST_KEEP=1
source "$(dirname "$0")/../dist/lib.sh"
# shellcheck source=tests/fault/lib_fault.sh
source "$(dirname "$0")/lib_fault.sh"
dist_init load_test 540
# progress for the waits: the learner's steps and updates (one log, not 67)
DIST_PROGRESS="learner_progress learner"
check_binaries "$@"
command -v curl >/dev/null || skip "needs curl to read /metrics"

S=2
N=${LOAD_ACTORS:-64}
WINDOW_S=${LOAD_S:-60}
SAMPLE_S=${LOAD_SAMPLE_S:-5}
WARMUP_S=10
declare -A RSS_BOUND=([shard]=229376 [actor]=32768 [learner]=262144)
declare -A PLATEAU_KIB=([shard]=8192 [actor]=2048 [learner]=16384)

for ((i = 0; i < S; i++)); do start_local_shard "shard$i" "$S" "$i"; done
start_local_learner learner "" --total_steps=100000000 --eval_every=0 --checkpoint_every=0
DIST_WATCH="learner shard0 shard1"
# --drain_timeout_ms 200: the actors are stopped one after the other while the learner
# still paces inserts through 64 actors' held batches, so each one's last batches may wait
# behind all the others' for longer than the default drain (5 s) -- 64 stops would then
# take minutes; this test checks a clean stop and bounded memory, not the drain (that is
# tests/fault/drain_control.sh)
for ((i = 0; i < N; i++)); do
  start_local_actor "actor$i" "$N" "$i" --drain_timeout_ms=200
  DIST_WATCH+=" actor$i"
done
log "$S shards, learner and $N actor processes (ids 0..$((N - 1))) up; warm-up ${WARMUP_S}s"
for n in learner shard0 shard1 actor0 "actor$((N - 1))"; do
  has_metrics() { [[ -n "$(metric "$1" process_resident_memory_bytes)" ]]; }
  wait_until 60 "$n's /metrics" has_metrics "$n"
done
updating() { ge "$(last_num "$T/learner.log" "learner: steps " "updates ")" 1; }
wait_until 120 "the learner updating" updating
sleep "$WARMUP_S"
check_watch

# ---------------------------------------------------------------- the window
NAMES=(learner shard0 shard1)
for ((i = 0; i < N; i++)); do NAMES+=("actor$i"); done
kind_of() { case $1 in learner) echo learner ;; shard*) echo shard ;; *) echo actor ;; esac; }
declare -A RSS_FIRST=() RSS_LAST=() RSS_MAX=() PORT=()
for n in "${NAMES[@]}"; do
  RSS_FIRST[$n]=0 RSS_LAST[$n]=0 RSS_MAX[$n]=0
  PORT[$n]=$(metrics_port "$n")
done
# fast scrape of a process whose port is known (the window scrapes 67 processes)
scrape_port() { curl -s --max-time 2 "http://127.0.0.1:${PORT[$1]}/metrics" 2>/dev/null; }

declare -A W0=() B0=() ST0=()
# every actor's insert latency histogram, summed over the actors
insert_hist() { for ((i = 0; i < N; i++)); do scrape_port "actor$i"; done | hist_buckets sac_actor_insert_latency_seconds; }
read_actor() { # NAME -> "send_wait_seconds batches steps waits transitions_sent"
  local text
  text=$(scrape_port "$1")
  printf '%s %s %s %s %s' "$(mval sac_actor_send_wait_seconds_total <<<"$text")" \
    "$(mval sac_actor_batches_sent_total <<<"$text")" "$(mval sac_actor_env_steps_total <<<"$text")" \
    "$(mval sac_actor_send_waits_total <<<"$text")" "$(mval sac_actor_transitions_sent_total <<<"$text")"
}
snapshot_shards() { # -> inserted sampled insert_waits insert_wait_s parked(sum)
  local i text ins=0 smp=0 w=0 ws=0 pk=0
  for ((i = 0; i < S; i++)); do
    text=$(scrape_port "shard$i")
    ins=$(awk -v a="$ins" -v b="$(mval sac_replay_inserted_transitions_total <<<"$text")" 'BEGIN { print a + b }')
    smp=$(awk -v a="$smp" -v b="$(mval sac_replay_sampled_transitions_total <<<"$text")" 'BEGIN { print a + b }')
    w=$(awk -v a="$w" -v b="$(mval sac_replay_rate_limiter_waits_total 'op="insert"' <<<"$text")" 'BEGIN { print a + b }')
    ws=$(awk -v a="$ws" -v b="$(mval sac_replay_rate_limiter_wait_seconds_total 'op="insert"' <<<"$text")" 'BEGIN { print a + b }')
    pk=$(awk -v a="$pk" -v b="$(mval sac_replay_insert_parked <<<"$text")" 'BEGIN { print a + b }')
  done
  printf '%s %s %s %s %s' "$ins" "$smp" "$w" "$ws" "$pk"
}

learner_text=$(scrape_port learner)
hist_buckets sac_learner_sample_wait_seconds <<<"$learner_text" >"$T/sample_before.txt"
upd0=$(mval sac_learner_updates_total <<<"$learner_text")
read -r ins0 smp0 iw0 iws0 _ <<<"$(snapshot_shards)"
waits0=0
for ((i = 0; i < N; i++)); do
  read -r W0[$i] B0[$i] ST0[$i] wt _ <<<"$(read_actor "actor$i")"
  waits0=$(awk -v a="$waits0" -v b="${wt:-0}" 'BEGIN { print a + b }')
done
insert_hist >"$T/insert_before.txt"
t_start=$(now_ms)
log "window of ${WINDOW_S}s starts: every ${SAMPLE_S}s, RSS of ${#NAMES[@]} processes and the actors' counters"
samples=$((WINDOW_S / SAMPLE_S))
parked_sum=0
for ((k = 0; k < samples; k++)); do
  t_next=$((t_start + (k + 1) * SAMPLE_S * 1000))
  while (($(now_ms) < t_next)); do sleep 0.2; done
  check_watch
  deadline_check
  for n in "${NAMES[@]}"; do
    r=$(rss_kib "$(pid_of "$n")")
    [[ -n "$r" ]] || fail "$n is gone"
    ((r > RSS_MAX[$n])) && RSS_MAX[$n]=$r
    if ((k < samples / 3)); then
      ((r > RSS_FIRST[$n])) && RSS_FIRST[$n]=$r
    elif ((k >= samples - samples / 3)); then
      ((r > RSS_LAST[$n])) && RSS_LAST[$n]=$r
    fi
  done
  read -r _ _ _ _ pk <<<"$(snapshot_shards)"
  parked_sum=$(awk -v a="$parked_sum" -v b="${pk:-0}" 'BEGIN { print a + b }')
done
elapsed=$(secs_since "$t_start")
learner_text=$(scrape_port learner)
hist_buckets sac_learner_sample_wait_seconds <<<"$learner_text" >"$T/sample_after.txt"
upd1=$(mval sac_learner_updates_total <<<"$learner_text")
read -r ins1 smp1 iw1 iws1 _ <<<"$(snapshot_shards)"
insert_hist >"$T/insert_after.txt"
sw0=0 sw1=0 waits_total=0 sent_total=0
declare -a STEPS=()
for ((i = 0; i < N; i++)); do
  read -r w b st wt tx <<<"$(read_actor "actor$i")"
  sent_total=$(awk -v a="$sent_total" -v b="${tx:-0}" 'BEGIN { print a + b }')
  sw0=$(awk -v a="$sw0" -v b="${W0[$i]}" 'BEGIN { print a + b }')
  sw1=$(awk -v a="$sw1" -v b="$w" 'BEGIN { print a + b }')
  waits_total=$(awk -v a="$waits_total" -v b="$wt" 'BEGIN { print a + b }')
  STEPS+=("$(awk -v a="$st" -v b="${ST0[$i]}" 'BEGIN { print a - b }')")
done

# ---------------------------------------------------------------- checks and figures
ups=$(awk -v a="$upd0" -v b="$upd1" -v t="$elapsed" 'BEGIN { printf "%.1f", (b - a) / t }')
ips=$(awk -v a="$ins0" -v b="$ins1" -v t="$elapsed" 'BEGIN { printf "%.1f", (b - a) / t }')
sps=$(awk -v a="$smp0" -v b="$smp1" -v t="$elapsed" 'BEGIN { printf "%.0f", (b - a) / t }')
iw=$(awk -v a="$iw0" -v b="$iw1" 'BEGIN { print b - a }')
iws=$(awk -v a="$iws0" -v b="$iws1" -v t="$elapsed" 'BEGIN { printf "%.2f", (b - a) / t }')
sendw=$(awk -v a="$sw0" -v b="$sw1" -v t="$elapsed" -v n="$N" 'BEGIN { printf "%.2f", (b - a) / t / n }')
parked=$(awk -v p="$parked_sum" -v k="$samples" -v s="$S" 'BEGIN { printf "%.2f", p / (k * s) }')
read -r s50 ns <<<"$(hist_quantile 0.50 "$T/sample_before.txt" "$T/sample_after.txt")"
read -r s99 _ <<<"$(hist_quantile 0.99 "$T/sample_before.txt" "$T/sample_after.txt")"
read -r i50 n_ins <<<"$(hist_quantile 0.50 "$T/insert_before.txt" "$T/insert_after.txt")"
read -r i99 _ <<<"$(hist_quantile 0.99 "$T/insert_before.txt" "$T/insert_after.txt")"
backlog=$(awk -v s="$sent_total" -v i="$ins1" 'BEGIN { print s - i }')
little=$(awk -v b="$backlog" -v r="$ips" 'BEGIN { if (r > 0) printf "%.0f s", b / r; else print "n/a" }')
fair=$(printf '%s\n' "${STEPS[@]}" | sort -n | awk '{ a[NR] = $1; s += $1 } END { printf "%d / %d / %d (sum %d)", a[1], a[int((NR + 1) / 2)], a[NR], s }')

ms() { awk -v x="$1" 'BEGIN { if (x ~ /^[0-9.e+-]+$/) printf "%.2f ms", x * 1000; else print x }'; }
echo
echo "| measure | value |"
echo "| --- | --- |"
echo "| actors | $N processes, $N actor identities (ids 0..$((N - 1))), 1 env each, window 16 batches x 64 rows per shard |"
echo "| window | ${elapsed} s after a ${WARMUP_S} s warm-up, sampled every ${SAMPLE_S} s |"
echo "| learner updates/s | $ups |"
echo "| transitions inserted/s (both shards) | $ips |"
echo "| transitions sampled/s (both shards) | $sps |"
echo "| shards: inserts held back by the rate limiter | $iw times in the window; $iws s held back per s (summed over shards); an insert parked in $parked of the samples |"
echo "| actors: send waits (window full, 100 ms each) | $(awk -v a="$waits0" -v b="$waits_total" 'BEGIN { print b - a }') in the window ($waits_total since start); send time completed per actor: $sendw s per s |"
echo "| sample latency (learner, $ns requests) | p50 $(ms "$s50"), p99 $(ms "$s99") |"
echo "| insert latency, first send -> acknowledged (actors, $n_ins batches acknowledged) | p50 $(ms "$i50"), p99 $(ms "$i99") |"
echo "| send -> acknowledged, mean (Little's law) | $little ($backlog transitions sent and not yet stored, at $ips stored/s) |"
echo "| steps per actor in the window: min / median / max | $fair |"
for kind in learner shard actor; do
  mx=0 who="" growth=0 gw=""
  for n in "${NAMES[@]}"; do
    [[ $(kind_of "$n") == "$kind" ]] || continue
    ((RSS_MAX[$n] > mx)) && mx=${RSS_MAX[$n]} who=$n
    d=$((RSS_LAST[$n] - RSS_FIRST[$n]))
    ((d > growth || ${#gw} == 0)) && growth=$d gw=$n
  done
  echo "| RSS $kind (max over processes) | $((mx / 1024)) MiB ($who), bound $((RSS_BOUND[$kind] / 1024)) MiB; largest growth first->last third $growth KiB ($gw), bound ${PLATEAU_KIB[$kind]} KiB |"
done
echo

declare -a PROBLEMS=()
problem() {
  PROBLEMS+=("$*")
  log "PROBLEM: $*"
}
# memory bounded
for n in "${NAMES[@]}"; do
  kind=$(kind_of "$n")
  ((RSS_MAX[$n] <= RSS_BOUND[$kind])) || problem "$n RSS reached ${RSS_MAX[$n]} KiB, bound ${RSS_BOUND[$kind]} KiB"
  ((RSS_LAST[$n] - RSS_FIRST[$n] <= PLATEAU_KIB[$kind])) ||
    problem "$n still growing: max ${RSS_FIRST[$n]} KiB in the first third of the window, ${RSS_LAST[$n]} KiB in the last"
done
# backpressure
awk -v x="$iw" 'BEGIN { exit !(x > 0) }' || problem "the shards never held an insert back: no backpressure"
awk -v a="$waits0" -v b="$waits_total" 'BEGIN { exit !(b > a) }' || problem "the actors' send waits did not grow"
awk -v i="$ips" -v u="$ups" 'BEGIN { exit !(u > 0 && i <= 1.25 * u && i >= 0.75 * u) }' ||
  problem "inserted $ips transitions/s against $ups updates/s: the rate limiter does not hold the ratio"

# a clean stop: the actors one after the other, then the learner and the shards; every
# process must exit 0 (a shard that dies meanwhile loses what its last snapshot lacks)
DIST_WATCH=""
t_stop=$SECONDS
for ((i = N - 1; i >= 0; i--)); do
  pid=$(pid_of "actor$i")
  stop_pid "$pid" 5 || problem "actor$i (pid $pid) did not stop"
  rc=$(rc_of "$pid")
  [[ $rc == 0 ]] || problem "actor$i exited with $rc on SIGTERM"
done
log "$N actors stopped in $((SECONDS - t_stop)) s"
for n in learner shard0 shard1; do
  pid=$(pid_of "$n")
  if exited "$pid"; then
    problem "$n had already ended (exit $(rc_of "$pid")) when the actors had stopped: $(grep -a -h -m1 -E 'Assertion|ERROR' "$T/$n.log")"
    continue
  fi
  stop_pid "$pid" 20 || problem "$n (pid $pid) did not stop"
  rc=$(rc_of "$pid")
  [[ $rc == 0 ]] || problem "$n exited with $rc on SIGTERM: $(grep -a -h -m1 -E 'Assertion|ERROR' "$T/$n.log")"
done
for f in "$T"/*.log; do
  bad=$(grep -a -m1 -E 'AddressSanitizer|runtime error:|Assertion .* failed|Assertion failed|Segmentation fault|double free' "$f") &&
    problem "crash signature in $(basename "$f"): $bad"
done
if ((${#PROBLEMS[@]})); then
  printf 'load_test: %d problem(s):\n' "${#PROBLEMS[@]}"
  printf '  - %s\n' "${PROBLEMS[@]}"
  fail "${#PROBLEMS[@]} problem(s), listed above"
fi
pass "$N actors, ${elapsed}s: backpressure held ($ips inserted/s at $ups updates/s), RSS bounded, sample p99 $(ms "$s99"), insert p99 $(ms "$i99")"
