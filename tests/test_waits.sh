#!/usr/bin/env bash
# Never silent, and stops that behave (issue 36), with real processes on 127.0.0.1:
#   1. a sac-actor whose shard is not there logs a WARN naming it within 10 s, keeps its
#      progress line coming (saying what it waits for), says it has no weights, answers
#      /healthz with 503 and the reason, and logs the recovery once a shard starts there; an actor run with --log_level=error (its
#      WARNs suppressed: silent on purpose) fails the same check (negative control). A
#      remote sac-learner with no shard there logs it within 10 s, its /healthz answers 503
#      with the reason, sac_learner_waits_total counts it, and on SIGINT it exits 130
#      within 3 s leaving no run directory (it made no update). While both wait, their
#      /livez answers 200: a wait is not a failure an orchestrator should restart; the
#      same for an actor whose shard holds its batches back (the rate limiter) and for that
#      shard; each one's sac_main_loop_silence_seconds shows its loop turning.
#   2. a remote run (2 shards, 2 actors) ends at its total_steps, give or take one actor
#      batch per actor, reports the actors' episodes, and the actors stop stepping when the
#      learner says the run is over (they wait for a new run: SIGTERM ends them, exit 0);
#      the shards print progress lines. Negative control: a run whose shards an actor
#      filled past the total before the learner started (it was given no budget) fails the
#      same check.
#   3. a shard killed with kill -9 mid-run and restarted: the learner and the actor log
#      the loss at once and the recovery; the restarted shard's one start line says what it
#      restored from its write-ahead log.
#   4. Ctrl-C of the embedded default with 4 actors: a line at once, exit 130 within 3 s,
#      the resume command printed (its directory holds the checkpoint); a second SIGINT
#      right after the first exits at once (130, "exiting at once", no result files).
# Waits are bounded and by progress (tests/lib_it.sh); only processes started here are
# signalled, by PID.
#
# Usage: test_waits.sh SAC_LEARNER SAC_REPLAY SAC_ACTOR
# Exit: 0 pass, 1 fail, 77 skipped (no curl or python3).
set -u
LEARNER=${1:?sac-learner path}
REPLAY=${2:?sac-replay path}
ACTOR=${3:?sac-actor path}
command -v curl >/dev/null 2>&1 || { echo "SKIP: curl not installed"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "SKIP: python3 not installed"; exit 77; }

# shellcheck source=tests/lib_it.sh
source "$(dirname "$0")/lib_it.sh"
it_init waits
# Progress for wait_for is the runs' own: distinct step, update and stored counts in the
# logs (a process that only repeats its waiting line does not count as moving).
run_progress() { grep -ho 'steps [0-9]*/[0-9]*  updates [0-9]*\|stored [0-9]*' "$DIR"/*.log 2>/dev/null | sort -u | wc -l; }
IT_PROGRESS=run_progress

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
now_ms() { echo $((${EPOCHREALTIME/./} / 1000)); }
# seconds (1 decimal) since the millisecond mark $1
since() { local d=$(($(now_ms) - $1)); printf '%d.%d' $((d / 1000)) $((d % 1000 / 100)); }
# warned_within FILE PATTERN START_MS LIMIT_S: PATTERN (a WARN line) appears in FILE within
# LIMIT_S seconds of START_MS; waits for it at most LIMIT_S + 5 s
warned_within() {
  local f=$1 pat=$2 start=$3 lim=$4 seen=""
  while (($(now_ms) - start < (lim + 5) * 1000)); do
    if grep -q "WARN .*$pat" "$f" 2>/dev/null; then
      seen=$(($(now_ms) - start))
      break
    fi
    sleep 0.1
  done
  [ -n "$seen" ] && ((seen <= lim * 1000))
}
# stop_wait PID SIG LIMIT_S: signals PID and returns its exit code, waiting at most LIMIT_S + 10 s
stop_wait() {
  kill -"$2" "$1" 2>/dev/null
  local t=$(now_ms)
  while kill -0 "$1" 2>/dev/null && (($(now_ms) - t < ($3 + 10) * 1000)); do sleep 0.05; done
  wait "$1"
}
metric() {
  curl -s --max-time 5 "http://127.0.0.1:$1/metrics" | awk -v n="$2" '$1 == n { print $2; exit }'
}
start_shard() { # NAME SHARD_ID [extra args]: a shard on kernel-picked ports, its endpoints in $DIR/NAME.ready
  local n=$1 id=$2
  shift 2
  "$REPLAY" --shard_id="$id" --env=Pendulum-v1 --insert_endpoint='tcp://127.0.0.1:*' --sample_endpoint='tcp://127.0.0.1:*' \
    --metrics_port=-1 --log_interval_s=1 --ready_file="$DIR/$n.ready" "$@" >>"$DIR/$n.log" 2>&1 &
  PIDS+=($!)
  eval "${n}_PID=$!"
  wait_for "[ -s $DIR/$n.ready ]" 100 || fail "shard $n did not start"
}
ready() { sed -n "s/^$2=//p" "$DIR/$1.ready"; }

# ---- 1. waits for what is not there ------------------------------------------------------------
P_INS=$(free_port) P_W=$(free_port) P_SMP=$(free_port) P_LW=$(free_port)
T0=$(now_ms)
"$ACTOR" --shards="tcp://127.0.0.1:$P_INS" --weights="tcp://127.0.0.1:$P_W" --weights_wait_ms=0 --learning_starts=64 \
  --log_interval_s=1 --metrics_addr=127.0.0.1 --metrics_port=0 >"$DIR/actor.log" 2>&1 &
A_PID=$!
PIDS+=($A_PID)
"$ACTOR" --actor_id=1 --shards="tcp://127.0.0.1:$P_INS" --weights="tcp://127.0.0.1:$P_W" --weights_wait_ms=0 \
  --log_interval_s=1 --log_level=error --metrics_port=-1 >"$DIR/silent.log" 2>&1 &
PIDS+=($!)
"$LEARNER" --shards="tcp://127.0.0.1:$P_SMP" --weights="tcp://127.0.0.1:$P_LW" --hidden=16 --log_interval_s=1 \
  --metrics_addr=127.0.0.1 --metrics_port=0 --run_dir="$DIR/runs" >"$DIR/learner.log" 2>&1 &
L_PID=$!
PIDS+=($L_PID)
warned_within "$DIR/actor.log" "actor 0: cannot reach shard tcp://127.0.0.1:$P_INS " "$T0" 10 ||
  fail "the actor said nothing about its unreachable shard within 10 s"
echo "ok   actor: WARN naming the unreachable shard after $(since "$T0") s (bound 10 s)"
warned_within "$DIR/learner.log" "learner: cannot reach shard tcp://127.0.0.1:$P_SMP" "$T0" 10 ||
  fail "the learner said nothing about its unreachable shard within 10 s"
echo "ok   learner: WARN naming the unreachable shard within 10 s"
if warned_within "$DIR/silent.log" "cannot reach shard" "$T0" 0; then
  fail "negative control: the check found a WARN in the log of an actor whose WARNs are off"
fi
echo "ok   negative control: an actor silent on purpose (--log_level=error) fails the check"
wait_for "grep -q 'waiting: shard tcp://127.0.0.1:$P_INS unreachable' $DIR/actor.log" 100 ||
  fail "the actor's progress line does not say what it waits for"
wait_for "grep -q 'WARN .*actor 0: no weights yet from tcp://127.0.0.1:$P_W' $DIR/actor.log" 100 ||
  fail "the actor did not say it has no weights"
wait_for "grep -q 'waiting [0-9]* s: no shard reachable' $DIR/learner.log" 100 ||
  fail "the learner's progress line does not say what it waits for"
LPORT=$(logged_port "$DIR/learner.log")
[ -n "$LPORT" ] || fail "the learner's metrics port is not in its log"
APORT=$(logged_port "$DIR/actor.log")
[ -n "$APORT" ] || fail "the actor's metrics port is not in its log"
health_is() { health=$(curl -s -w ' %{http_code}' --max-time 5 "http://127.0.0.1:$1/healthz"); [[ $health == $2 ]]; }
wait_for "health_is $LPORT 'not ready: no shard reachable (tcp://127.0.0.1:$P_SMP*503'" 100 ||
  fail "the learner's /healthz while it waits: '$health'"
echo "ok   learner /healthz: ${health:0:60}..."
wait_for "health_is $APORT 'not ready: shard tcp://127.0.0.1:$P_INS unreachable for*503'" 100 ||
  fail "the actor's /healthz while it waits: '$health'"
echo "ok   actor /healthz: ${health:0:60}..."
# a wait is not a failure: /livez (what the deploy files' healthchecks ask, and swarm
# restarts on) stays 200 while the loops turn, so an orchestrator does not restart a
# process that waits for another one (tests/test_metrics.c checks the 503 of a loop
# that stopped turning)
live_is() { live=$(curl -s -w ' %{http_code}' --max-time 5 "http://127.0.0.1:$1/livez"); [[ $live == 'ok'*' 200' ]]; }
live_is "$LPORT" || fail "the waiting learner's /livez: '$live'"
live_is "$APORT" || fail "the waiting actor's /livez: '$live'"
# and their loops do turn (-1 would be a loop that never beat: /livez's 200 before the first turn)
turning() { local v; v=$(metric "$1" sac_main_loop_silence_seconds); awk -v v="${v:--1}" 'BEGIN { exit !(v >= 0 && v < 5) }'; }
turning "$LPORT" || fail "the waiting learner's sac_main_loop_silence_seconds: '$(metric "$LPORT" sac_main_loop_silence_seconds)'"
turning "$APORT" || fail "the waiting actor's sac_main_loop_silence_seconds: '$(metric "$APORT" sac_main_loop_silence_seconds)'"
echo "ok   /livez of the waiting learner and actor: 200 ok; their loops turned within 5 s"
w=$(metric "$LPORT" 'sac_learner_waits_total{reason="shard_unreachable"}')
[ "${w:-0}" -ge 1 ] 2>/dev/null || fail "sac_learner_waits_total{reason=\"shard_unreachable\"} is '${w:-}'"
T1=$(now_ms)
stop_wait "$L_PID" INT 3
rc=$?
[ "$rc" = 130 ] || fail "the learner stopped by SIGINT exited $rc, not 130"
(($(now_ms) - T1 <= 3000)) || fail "the learner took $(since "$T1") s to stop (bound 3 s)"
grep -q "no update was made: removed the run directory" "$DIR/learner.log" || fail "no line about the run directory"
[ -z "$(ls -A "$DIR/runs" 2>/dev/null)" ] || fail "a run directory was left for a run that never started: $(ls "$DIR/runs")"
echo "ok   learner: SIGINT -> exit 130 in $(since "$T1") s, no run directory left"
# the shard comes: the actor says so
"$REPLAY" --env=Pendulum-v1 --insert_endpoint="tcp://127.0.0.1:$P_INS" --sample_endpoint='tcp://127.0.0.1:*' \
  --durability=none --metrics_port=-1 >"$DIR/late-shard.log" 2>&1 &
PIDS+=($!)
wait_for "grep -q 'actor 0: shard tcp://127.0.0.1:$P_INS reachable again after' $DIR/actor.log" 150 ||
  fail "the actor did not log its recovery"
wait_for "health_is $APORT 'ok*200'" 100 || fail "the actor's /healthz after its recovery: '$health'"
w=$(metric "$APORT" 'sac_actor_waits_total{actor="0",reason="shard_unreachable"}')
[ "${w:-0}" -ge 1 ] 2>/dev/null || fail "sac_actor_waits_total{reason=\"shard_unreachable\"} is '${w:-}'"
echo "ok   actor: recovery line once the shard is there; /healthz ok again; the wait counted"
stop_wait "$A_PID" INT 6
rc=$?
[ "$rc" = 130 ] || fail "the actor stopped by SIGINT exited $rc, not 130"
grep -q "actor 0: SIGINT: stopping" "$DIR/actor.log" || fail "the actor did not say what it does on SIGINT"
echo "ok   actor: SIGINT -> exit 130"

# an actor held back by its shard's rate limiter (a million samples per insert, no learner
# sampling: the shard stores about 128 rows, then holds every batch): /healthz says it
# waits, /livez that it is alive
start_shard held 0 --samples_per_insert=1000000 --min_size=64 --durability=none --metrics_addr=127.0.0.1 --metrics_port=0
"$ACTOR" --actor_id=2 --shards="$(ready held insert)" --weights="tcp://127.0.0.1:$(free_port)" --weights_wait_ms=0 \
  --learning_starts=64 --send_rows=64 --log_interval_s=1 --metrics_addr=127.0.0.1 --metrics_port=0 \
  >"$DIR/held-actor.log" 2>&1 &
H_PID=$!
PIDS+=($H_PID)
wait_for "[ -n \"\$(logged_port $DIR/held-actor.log)\" ]" 100 || fail "the held actor's metrics port is not in its log"
HPORT=$(logged_port "$DIR/held-actor.log")
wait_for "health_is $HPORT 'not ready: shard $(ready held insert) acknowledges nothing*503'" 150 ||
  fail "the held actor's /healthz: '$health'"
live_is "$HPORT" || fail "the held actor's /livez: '$live'"
echo "ok   actor held back by the rate limiter: /healthz '${health:0:60}...', /livez 200 ok"
SPORT=$(logged_port "$DIR/held.log")
[ -n "$SPORT" ] || fail "the shard's metrics port is not in its log"
live_is "$SPORT" && turning "$SPORT" ||
  fail "the shard's /livez '$live', sac_main_loop_silence_seconds '$(metric "$SPORT" sac_main_loop_silence_seconds)'"
echo "ok   the shard holding the batches: /livez 200 ok; its loop turned within 5 s"
stop_wait "$H_PID" TERM 10 >/dev/null

# ---- 2. a remote run ends at its total_steps and reports the actors' episodes ------------------
TOTAL=1200 ROWS=64
start_shard s0 0 --samples_per_insert=64 --min_size=200 --durability=none
start_shard s1 1 --samples_per_insert=64 --min_size=200 --durability=none
INS="$(ready s0 insert),$(ready s1 insert)" SMP="$(ready s0 sample),$(ready s1 sample)"
P_W2=$(free_port)
for i in 0 1; do
  "$ACTOR" --actor_id=$i --shards="$INS" --weights="tcp://127.0.0.1:$P_W2" --send_rows=$ROWS --log_interval_s=1 \
    --metrics_port=-1 >"$DIR/ractor$i.log" 2>&1 &
  eval "RA$i=$!"
  PIDS+=($!)
done
"$LEARNER" --shards="$SMP" --weights="tcp://127.0.0.1:$P_W2" --total_steps=$TOTAL --batch_size=64 --hidden=16 \
  --eval_episodes=1 --log_interval_s=1 --metrics_port=-1 --run_dir="$DIR/runs" >"$DIR/rlearner.log" 2>&1 &
RL=$!
PIDS+=($RL)
wait_for "! kill -0 $RL 2>/dev/null" 300 || fail "the remote learner did not finish"
wait "$RL" || fail "the remote learner failed"
result=$(grep '^result:' "$DIR/rlearner.log")
steps=$(sed -n 's/.*  steps \([0-9]*\) .*/\1/p' <<<"$result")
eps=$(sed -n 's/.*  episodes \([0-9]*\) .*/\1/p' <<<"$result")
# within_budget STEPS: the run's steps within [TOTAL, TOTAL + one batch per actor]
within_budget() { [ -n "$1" ] && (($1 >= TOTAL && $1 <= TOTAL + 2 * ROWS)); }
within_budget "$steps" || fail "the remote run took ${steps:-?} steps for --total_steps $TOTAL (bound $((TOTAL + 2 * ROWS))): $result"
[ "${eps:-0}" -ge 3 ] || fail "the remote run reports ${eps:-?} episodes (Pendulum ends one per 200 steps): $result"
for i in 0 1; do
  wait_for "grep -q 'actor $i: the learner.s run is over' $DIR/ractor$i.log" 100 || fail "actor $i was not told the run is over"
  eval "stop_wait \$RA$i TERM 6" || fail "actor $i, idle after the run, exited non-zero on SIGTERM"
done
stepped=$(sed -n 's/.*actor [01] done: \([0-9]*\) steps.*/\1/p' "$DIR"/ractor[01].log | paste -sd+ | bc)
within_budget "$stepped" || fail "the actors stepped $stepped in all for --total_steps $TOTAL"
grep -q "replay: shard 0: stored [0-9]* (" "$DIR/s0.log" || fail "shard 0 printed no progress line"
echo "ok   remote run: $steps steps stored, $stepped stepped for $TOTAL, $eps episodes; the actors stopped stepping when told"
# negative control: an actor given no budget (its --weights lead nowhere) fills a shard past
# the total before the learner starts: the same check must fail
start_shard s2 0 --durability=none
"$ACTOR" --shards="$(ready s2 insert)" --weights="tcp://127.0.0.1:$(free_port)" --weights_wait_ms=0 --max_steps=2000 \
  --metrics_port=-1 >"$DIR/nactor.log" 2>&1 || fail "the control's actor failed"
"$LEARNER" --shards="$(ready s2 sample)" --weights="tcp://127.0.0.1:$(free_port)" --total_steps=$TOTAL --batch_size=64 \
  --hidden=16 --eval_episodes=1 --metrics_port=-1 --run_dir="$DIR/runs" >"$DIR/nlearner.log" 2>&1 ||
  fail "the control's learner failed"
nsteps=$(sed -n 's/^result:.*  steps \([0-9]*\) .*/\1/p' "$DIR/nlearner.log")
within_budget "$nsteps" && fail "negative control: a run of $nsteps steps for $TOTAL passed the budget check"
echo "ok   negative control: a run filled past its total ($nsteps steps) fails the check"

# ---- 3. a shard killed mid-run and restarted: loss and recovery logged -------------------------
start_shard k0 0 --snapshot_path="$DIR/k0.snap" --snapshot_interval_s=0
KINS=$(ready k0 insert) KSMP=$(ready k0 sample)
P_W3=$(free_port)
"$ACTOR" --shards="$KINS" --weights="tcp://127.0.0.1:$P_W3" --log_interval_s=1 --metrics_port=-1 >"$DIR/kactor.log" 2>&1 &
KA=$!
PIDS+=($KA)
"$LEARNER" --shards="$KSMP" --weights="tcp://127.0.0.1:$P_W3" --total_steps=100000000 --batch_size=64 --hidden=16 \
  --log_interval_s=1 --metrics_port=-1 --run_dir="$DIR/runs" >"$DIR/klearner.log" 2>&1 &
KL=$!
PIDS+=($KL)
wait_for "grep -q 'updates [1-9]' $DIR/klearner.log" 300 || fail "the learner made no update before the kill"
kill -KILL "$k0_PID"
wait "$k0_PID" 2>/dev/null
wait_for "grep -q 'WARN .*lost the connection to shard $KSMP' $DIR/klearner.log" 100 || fail "the learner did not log the lost shard"
wait_for "grep -q 'WARN .*actor 0: lost the connection to shard $KINS' $DIR/kactor.log" 100 || fail "the actor did not log the lost shard"
echo "ok   kill -9 of the shard: the learner and the actor logged the loss"
"$REPLAY" --env=Pendulum-v1 --insert_endpoint="$KINS" --sample_endpoint="$KSMP" --snapshot_path="$DIR/k0.snap" \
  --metrics_port=-1 >>"$DIR/k0.log" 2>&1 &
PIDS+=($!)
wait_for "grep -q 'shard $KSMP reachable again after' $DIR/klearner.log" 150 || fail "the learner did not log the recovery"
wait_for "grep -q 'actor 0: shard $KINS reachable again after' $DIR/kactor.log" 150 || fail "the actor did not log the recovery"
wait_for "grep -q 'learner: shard 0 restarted' $DIR/klearner.log" 100 || fail "the learner did not see the shard's restart"
grep -q 'INFO  replay: restored [0-9]* batches ([0-9]* rows) from the write-ahead log' "$DIR/k0.log" ||
  fail "the restarted shard's start line does not say what it restored from its log"
grep -q 'wal: applied' "$DIR/k0.log" && fail "the restarted shard still logs its restore in several lines"
echo "ok   restart: recovery logged by both; shard: '$(grep -o 'restored [0-9]* batches.*' "$DIR/k0.log" | head -1 | cut -c1-70)...'"

# ---- 4. Ctrl-C of the embedded default with 4 actors, and a second Ctrl-C ----------------------
"$LEARNER" --embedded_actors=4 --hidden=32 --log_interval_s=1 --metrics_port=-1 --run_dir="$DIR/runs" \
  --run_name=int >"$DIR/int.log" 2>&1 &
E=$!
PIDS+=($E)
wait_for "grep -q 'updates [1-9]' $DIR/int.log" 300 || fail "the embedded run made no update"
T2=$(now_ms)
stop_wait "$E" INT 3
rc=$?
took=$(since "$T2")
[ "$rc" = 130 ] || fail "the embedded run stopped by SIGINT exited $rc, not 130"
(($(now_ms) - T2 <= 3000 + 100)) || fail "the embedded run with 4 actors took $took s to stop (bound 3 s)"
grep -q "learner: SIGINT: stopping: .*4 embedded actor" "$DIR/int.log" || fail "no line at once saying what the stop does"
resume=$(sed -n 's/^interrupted at .* resume with: //p' "$DIR/int.log")
[[ $resume == *"--resume $DIR/runs/int" ]] || fail "no resume command printed: '$resume'"
[ -s "$DIR/runs/int/checkpoint.bin" ] || fail "the resume command's directory holds no checkpoint"
echo "ok   Ctrl-C with 4 embedded actors: exit 130 in $took s; '$resume'"
"$LEARNER" --embedded_actors=4 --hidden=32 --log_interval_s=1 --metrics_port=-1 --run_dir="$DIR/runs" \
  --run_name=int2 >"$DIR/int2.log" 2>&1 &
E=$!
PIDS+=($E)
wait_for "grep -q 'updates [1-9]' $DIR/int2.log" 300 || fail "the second embedded run made no update"
kill -INT "$E"
sleep 0.05
T3=$(now_ms)
stop_wait "$E" INT 1
rc=$?
[ "$rc" = 130 ] || fail "the second SIGINT: exit $rc, not 130"
grep -q "second stop signal: exiting at once" "$DIR/int2.log" || fail "the second SIGINT did not force the exit"
grep -q "^results in" "$DIR/int2.log" && fail "the second SIGINT let the graceful stop finish"
echo "ok   a second SIGINT exits at once ($(since "$T3") s, exit 130)"
echo "PASS: waits are visible, remote runs end at their total, Ctrl-C behaves"
