#!/usr/bin/env bash
# A full disk under the run directory, end to end: metrics.csv's temporary file is made a
# link to /dev/full (every write to it fails with ENOSPC, as on a full disk), then a
# sac-learner run writes its first evaluation there. The write must be logged with the
# file and the reason, counted in sac_learner_rundir_write_errors_total{file="metrics_csv"}
# on /metrics, and training must go on (the update counter keeps moving). Control: the
# event file, written normally in the same run, counts 0. Waits are bounded (30 s each).
# Usage: test_rundir_full.sh SAC_LEARNER     exit 77 without curl or /dev/full
set -u
LEARNER=${1:?sac-learner path}
command -v curl >/dev/null 2>&1 || { echo "SKIP: curl not installed"; exit 77; }
[ -c /dev/full ] || { echo "SKIP: no /dev/full"; exit 77; }
# shellcheck source=tests/lib_it.sh
source "$(dirname "$0")/lib_it.sh"
it_init rundir-full

mkdir -p "$DIR/runs/r"
ln -s /dev/full "$DIR/runs/r/metrics.csv.tmp"
"$LEARNER" --hidden=32 --batch_size=32 --threads=1 --total_steps=1000000000 --learning_starts=256 \
  --eval_every=0 --log_interval=0 --run_dir="$DIR/runs" --run_name=r \
  --metrics_addr=127.0.0.1 --metrics_port=0 >"$DIR/learner.log" 2>&1 &
PIDS+=("$!")
wait_for '[ -n "$(logged_port "$DIR/learner.log")" ]' 300 || fail "sac-learner not serving"
PORT=$(logged_port "$DIR/learner.log")
scrape() { curl -s --max-time 5 "http://127.0.0.1:$PORT/metrics"; }
series() { scrape | sed -n "s/^$1 //p"; }

wait_for '[ "$(series "sac_learner_rundir_write_errors_total{file=\"metrics_csv\"}")" = 1 ]' 300 ||
  fail "metrics_csv write error not counted: $(scrape | grep rundir_write_errors)"
grep -q "cannot write $DIR/runs/r/metrics.csv: No space left on device" "$DIR/learner.log" ||
  fail "the failed write is not logged with the file and the reason"
tb=$(series 'sac_learner_rundir_write_errors_total{file="tensorboard"}')
[ "$tb" = 0 ] || fail "control: the event file counted $tb write errors"
# training goes on: the update counter moves after the failure was counted
u1=$(series sac_learner_updates_total)
wait_for '[ "$(series sac_learner_updates_total)" != "$u1" ]' 300 || fail "updates stopped at $u1 after the failed write"
kill -0 "${PIDS[0]}" 2>/dev/null || fail "sac-learner exited"
echo "counted: $(scrape | grep '^sac_learner_rundir_write_errors_total')" | tr '\n' ' '
echo
echo "1 passed, 0 failed"
