#!/usr/bin/env bash
# Unit test of the deadlines by progress in tests/dist/lib.sh (issue 15, point 7): a wait
# goes on past its stated time while the system progresses, and fails once nothing has
# moved for that time, for wait_until (DIST_PROGRESS) and wait_result (the learner's
# progress line); and the same for tests/lib_it.sh's wait_for (its logs growing), which
# also ends when a watched process exits, and for its Prometheus start when the server exits.
# Each case runs in a subshell of its own (lib.sh's fail exits).
set -u
LIB="$(dirname "$0")/dist/lib.sh"
fails=0
ok() { echo "ok   $1"; }
bad() {
  echo "FAIL $1"
  fails=$((fails + 1))
}
# a failing case keeps its temp dir (lib.sh does, for the logs): removed here
tidy() { sed -n 's/.*logs in \(\/[^ ]*sacfleet-wait_progress_[0-9].[A-Za-z0-9]*\)$/\1/p' <<<"$1" | sort -u | xargs -r rm -rf; }

# 1. progress for 5 s, the condition true after 4 s, a stall bound of 2 s: passes
out=$( (
  source "$LIB"
  dist_init wait_progress_1 60
  t_start=$SECONDS
  tick() { echo $((SECONDS - t_start < 5 ? SECONDS : 0)); }
  DIST_PROGRESS=tick
  later() { ((SECONDS - t_start >= 4)); }
  wait_until 2 "a condition true after 4 s" later
  pass "waited $((SECONDS - t_start)) s"
) 2>&1)
grep -qE '^PASS: wait_progress_1: waited ([4-9]|[1-9][0-9]+) s' <<<"$out" && ok "wait_until goes on while progressing" || bad "wait_until goes on while progressing: $out"

# 2. nothing progresses: fails after the stall bound, not later
out=$( (
  source "$LIB"
  dist_init wait_progress_2 60
  DIST_PROGRESS="echo same"
  wait_until 2 "a condition never true" false
  pass "not reached"
) 2>&1)
rc=$?
tidy "$out"
grep -qE 'FAIL: wait_progress_2: nothing progressed for 2s \(progress: same ?\) waiting for a condition never true' <<<"$out" &&
  ((rc == 1)) && ok "wait_until fails when nothing progresses" || bad "wait_until fails when nothing progresses (exit $rc): $out"

# 3. wait_result: a "learner" logging progress for 5 s, then its result line; stall 2 s
out=$( (
  source "$LIB"
  dist_init wait_progress_3 60
  start learner bash -c 'for i in 1 2 3 4 5; do echo "learner: steps $((i * 100))/500  updates $i (1/s)"; sleep 1; done; echo "result: final eval return -150.0"'
  t_start=$SECONDS
  wait_result learner 2
  pass "result after $((SECONDS - t_start)) s"
) 2>&1)
grep -qE '^PASS: wait_progress_3: result after ([4-9]|[1-9][0-9]+) s' <<<"$out" && ok "wait_result goes on while the learner progresses" ||
  bad "wait_result goes on while the learner progresses: $out"

# 4. wait_result: a "learner" that stops progressing fails after the stall bound
out=$( (
  source "$LIB"
  dist_init wait_progress_4 60
  start learner bash -c 'echo "learner: steps 100/500  updates 1 (1/s)"; sleep 20'
  t_start=$SECONDS
  wait_result learner 2
  pass "not reached"
) 2>&1)
rc=$?
tidy "$out"
grep -q 'FAIL: wait_progress_4: no result line from learner and its progress line did not move for 2s' <<<"$out" &&
  ((rc == 1)) && ok "wait_result fails when the learner stops progressing" ||
  bad "wait_result fails when the learner stops progressing (exit $rc): $out"

# 5. tests/lib_it.sh's wait_for: a log growing (5 lines a second) for 8 s, the condition
#    true after 6 s, a stall bound of 3 s (30 tenths): passes after about 6 s (a plain
#    bound of 3 s would give up at 3 s)
LIB_IT="$(dirname "$0")/lib_it.sh"
out=$( (
  source "$LIB_IT"
  it_init wait_progress_5
  (for i in $(seq 1 40); do echo "tick $i"; sleep 0.2; done) >"$DIR/p.log" 2>&1 &
  PIDS+=($!)
  t_start=$SECONDS
  wait_for '((SECONDS - t_start >= 6))' 30 || { echo "FAIL: gave up after $((SECONDS - t_start)) s"; exit 1; }
  echo "PASS: waited $((SECONDS - t_start)) s"
) 2>&1)
grep -qE '^PASS: waited ([6-9]|[1-9][0-9]+) s' <<<"$out" && ok "lib_it wait_for goes on while the logs grow" ||
  bad "lib_it wait_for goes on while the logs grow: $out"

# (the cases that go on while things progress check only that they did not give up
# early: how much longer a busy machine takes is not what they test)

# 6. lib_it wait_for: nothing grows: gives up after the stall bound (3 s), not much later
#    (under 15 s: on a machine busy enough to be slower than that, a wait of 30 tenths
#    measured as tenths would not be told from one that never gives up)
out=$( (
  source "$LIB_IT"
  it_init wait_progress_6
  echo "one line" >"$DIR/p.log"
  t_start=$SECONDS
  wait_for 'false' 30 && { echo "FAIL: a condition never true was met"; exit 1; }
  echo "GAVE UP after $((SECONDS - t_start)) s"
) 2>&1)
grep -qE '^GAVE UP after ([2-9]|1[0-4]) s' <<<"$out" && ok "lib_it wait_for gives up when nothing progresses" ||
  bad "lib_it wait_for gives up when nothing progresses: $out"

# 7. lib_it it_start_prometheus: the first port it tries is taken, so that Prometheus exits
#    at once, while a log keeps growing (as the processes under test do): it says so and
#    starts on a fresh port within 30 s (the log grows for 60 s: before the fix it waited on
#    the dead server as long as the logs grew)
if command -v prometheus >/dev/null && command -v curl >/dev/null; then
  out=$( (
    source "$LIB_IT"
    it_init wait_progress_7
    (for i in $(seq 1 600); do echo "tick $i"; sleep 0.1; done) >"$DIR/p.log" 2>&1 &
    PIDS+=($!)
    taken=$(free_port)
    python3 -c 'import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(); print("bound", flush=True); time.sleep(60)' "$taken" >"$DIR/holder.out" 2>&1 &
    PIDS+=($!)
    wait_for 'grep -q bound "$DIR/holder.out"' 100 || { echo "FAIL: the port holder did not bind"; exit 1; }
    eval "real_free_port() $(declare -f free_port | tail -n +2)"
    free_port() { if [ -f "$DIR/picked" ]; then real_free_port; else touch "$DIR/picked"; echo "$taken"; fi; }
    printf 'global:\n  scrape_interval: 1s\n' >"$DIR/prom.yml"
    t_start=$SECONDS
    it_start_prometheus "$DIR/prom.yml" || { echo "FAIL: did not start"; exit 1; }
    [ "$PROM_PORT" != "$taken" ] || { echo "FAIL: ready on the taken port $taken"; exit 1; }
    echo "STARTED on :$PROM_PORT after $((SECONDS - t_start)) s (:$taken taken)"
  ) 2>&1)
  grep -q 'did not become ready' <<<"$out" && grep -qE '^STARTED on :[0-9]+ after ([0-9]|[12][0-9]) s' <<<"$out" &&
    ok "lib_it it_start_prometheus retries when its server exits: $(grep -m1 '^STARTED' <<<"$out")" ||
    bad "lib_it it_start_prometheus retries when its server exits: $out"
else
  echo "skip 7: prometheus or curl not installed"
fi

# 8. lib_it wait_for: a process under watch exits while a log keeps growing (for 60 s): the
#    wait ends within 30 s and names it (without the watch it would last as long as the log)
out=$( (
  source "$LIB_IT"
  it_init wait_progress_8
  (for i in $(seq 1 600); do echo "tick $i"; sleep 0.1; done) >"$DIR/p.log" 2>&1 &
  PIDS+=($!)
  sleep 2 &
  PIDS+=($!)
  it_watch $! "the short one"
  t_start=$SECONDS
  wait_for 'false' 600 && { echo "FAIL: a condition never true was met"; exit 1; }
  echo "GAVE UP after $((SECONDS - t_start)) s"
) 2>&1)
grep -q '^wait_for: the short one (pid [0-9]*) exited while waiting' <<<"$out" &&
  grep -qE '^GAVE UP after ([0-9]|[12][0-9]) s' <<<"$out" && ok "lib_it wait_for ends when a watched process exits" ||
  bad "lib_it wait_for ends when a watched process exits: $out"

if ((fails)); then
  echo "FAIL: $fails case(s)"
  exit 1
fi
echo "PASS: waits by progress"
