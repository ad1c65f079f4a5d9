#!/usr/bin/env bash
# One run contract for every mode (docs/LEARNER.md, "The run directory"): --mode local, the
# embedded default and a learner with --shards (one sac-replay shard and one sac-actor on
# 127.0.0.1, ports picked by the kernel), each at tiny sizes:
#   1. a run of 600 steps leaves config.txt, metrics.csv (with the evaluation's spread),
#      curve.svg, policy.bin, checkpoint.bin and a TensorBoard event file;
#   2. `--resume DIR --total_steps 1000` continues from the checkpoint (the log says from
#      where; steps and updates never go back in metrics.csv), records the override in
#      DIR/config.txt, and carries the best return and (local, embedded: the learner counts
#      its actors' episodes there) the episodes across;
#   3. `sac-eval DIR --json` gives exactly the final evaluation of metrics.csv's last row
#      (mean, std, min, max to its 4 decimals); negative control: another --seed does not;
#   4. `--resume DIR` alone on the finished run says so, exits 0 and changes no file;
#   5. while a run trains, /metrics carries every training series of
#      learner/train_series.h, the same in all three modes; in local mode they move.
# Waits are on progress (tests/lib_it.sh), never on the clock alone.
# usage: test_run_contract.sh SAC_LEARNER SAC_REPLAY SAC_ACTOR SAC_EVAL   (exit 77 without curl)
set -u
LEARNER=${1:?sac-learner} REPLAY=${2:?sac-replay} ACTOR=${3:?sac-actor} EVAL=${4:?sac-eval}
command -v curl >/dev/null 2>&1 || { echo "SKIP: curl not installed"; exit 77; }
# shellcheck source=tests/lib_it.sh
source "$(dirname "$0")/lib_it.sh"
it_init run-contract

SERIES=(sac_learner_updates_total sac_learner_update_duration_seconds_count sac_learner_env_steps_total
  sac_learner_target_env_steps sac_learner_policy_version sac_learner_critic_loss sac_learner_actor_loss
  sac_learner_alpha_loss sac_learner_alpha sac_learner_policy_entropy sac_learner_mean_q sac_learner_eval_return
  'sac_learner_rundir_write_errors_total{file="metrics_csv"}')
SMALL=(--hidden 32 --batch_size 32 --threads 1 --eval_episodes 3 --checkpoint_every 200 --seed 3)

# ---- the remote mode's shard and actor (kept up through both of its runs) ----
"$REPLAY" --env Pendulum-v1 --insert_endpoint='tcp://127.0.0.1:*' --sample_endpoint='tcp://127.0.0.1:*' \
  --min_size 300 --samples_per_insert 64 --durability none --metrics_port -1 --ready_file="$DIR/replay.ready" \
  >"$DIR/replay.log" 2>&1 &
PIDS+=($!)
wait_for '[ -f "$DIR/replay.ready" ] && grep -q "^sample=" "$DIR/replay.ready"' 150 || fail "sac-replay not ready"
INSERT_EP=$(sed -n 's/^insert=//p' "$DIR/replay.ready")
SAMPLE_EP=$(sed -n 's/^sample=//p' "$DIR/replay.ready")
# the weights port is fixed for the remote learners, so the one actor follows every one of them
WEIGHTS_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

mode_args() { # the options of mode $1 (each mode gets only options it uses)
  case $1 in
    local) echo --mode local --learning_starts 300 --eval_every_steps 200 --log_every_steps 0 ;;
    embedded) echo --learning_starts 300 --eval_every_updates 150 --log_interval_s 0 ;;
    remote) echo --shards "$SAMPLE_EP" --weights "tcp://127.0.0.1:$WEIGHTS_PORT" --eval_every_updates 150 \
      --log_interval_s 0 ;;
  esac
}
field() { grep '^result:' "$2" | grep -o "  $1 [-0-9.]*" | head -n1 | awk '{ print $2 }'; } # of the result line
best() { sed -n 's/^result: .*(best \([-0-9.]*\)).*/\1/p' "$1" | head -n1; }

# ---- 1-4: a run, its resume, its evaluation, the finished run ----
check_contract() {
  local m=$1 rd=$DIR/runs/$1
  # shellcheck disable=SC2046
  "$LEARNER" $(mode_args "$m") "${SMALL[@]}" --total_steps 600 --metrics_port -1 --run_dir "$DIR/runs" \
    --run_name "$m" >"$DIR/$m-1.log" 2>&1 || fail "$m: the first run exited $?"
  for f in config.txt metrics.csv curve.svg policy.bin checkpoint.bin; do
    [ -s "$rd/$f" ] || fail "$m: no $f in the run directory"
  done
  compgen -G "$rd/events.out.tfevents.*" >/dev/null || fail "$m: no TensorBoard event file"
  head -n1 "$rd/metrics.csv" | grep -q ',eval_return_std,eval_return_min,eval_return_max,eval_episodes,train_return,episodes$' ||
    fail "$m: metrics.csv lacks the evaluation's spread: $(head -n1 "$rd/metrics.csv")"
  grep -q '<polygon class="band-std"' "$rd/curve.svg" || fail "$m: curve.svg has no spread band"
  local s1 e1 b1 rows1
  s1=$(field steps "$DIR/$m-1.log") e1=$(field episodes "$DIR/$m-1.log") b1=$(best "$DIR/$m-1.log")
  rows1=$(($(wc -l <"$rd/metrics.csv") - 1))
  [ "${s1:-0}" -ge 600 ] || fail "$m: the first run ended at ${s1:-?} steps"

  local before after files=("$rd/metrics.csv" "$rd/checkpoint.bin" "$rd/policy.bin" "$rd/config.txt")
  before=$(cat "${files[@]}" | cksum)
  "$LEARNER" --resume "$rd" --total_steps 1000 >"$DIR/$m-2.log" 2>&1 || fail "$m: the resumed run exited $?"
  [ "$(cat "${files[@]}" | cksum)" != "$before" ] || fail "$m: control: a resume that trains changed no file"
  grep -q "resumed from $rd/checkpoint.bin: [0-9]* updates, $s1 environment steps" "$DIR/$m-2.log" ||
    fail "$m: the resumed run did not start from the checkpoint's $s1 steps"
  grep -q '^# resumed with: total_steps = 1000$' "$rd/config.txt" && grep -q '^total_steps = 1000$' "$rd/config.txt" ||
    fail "$m: the override is not recorded in config.txt"
  grep -q '^mode = "local"$' "$rd/config.txt" || [ "$m" != local ] || fail "local: config.txt lost the mode"
  local s2 e2 b2
  s2=$(field steps "$DIR/$m-2.log") e2=$(field episodes "$DIR/$m-2.log") b2=$(best "$DIR/$m-2.log")
  [ "${s2:-0}" -ge 1000 ] || fail "$m: the resumed run ended at ${s2:-?} steps, not 1000"
  awk -v a="$b2" -v b="$b1" 'BEGIN { exit !(a >= b) }' || fail "$m: best return $b1 before, $b2 after the resume"
  if [ "$m" != remote ]; then
    [ "$e2" -gt "$e1" ] || fail "$m: $e1 episodes before the resume, $e2 after (not carried)"
  fi
  [ $(($(wc -l <"$rd/metrics.csv") - 1)) -gt "$rows1" ] || fail "$m: metrics.csv did not continue"
  awk -F, 'NR > 2 && ($2 < ps || $3 < pu) { bad = 1 } NR > 1 { ps = $2; pu = $3 } END { exit bad }' \
    "$rd/metrics.csv" || fail "$m: steps or updates go back in metrics.csv"

  "$EVAL" "$rd" --json >"$DIR/$m-eval.json" 2>"$DIR/$m-eval.log" || fail "$m: sac-eval exited $?"
  "$EVAL" "$rd" --json --seed 4 >"$DIR/$m-eval4.json" 2>>"$DIR/$m-eval.log" || fail "$m: sac-eval --seed 4"
  python3 - "$rd/metrics.csv" "$DIR/$m-eval.json" "$DIR/$m-eval4.json" <<'EOF' || fail "$m: sac-eval and the learner disagree"
import csv, json, sys
row = list(csv.DictReader(open(sys.argv[1])))[-1]
want = {k: row[c] for k, c in (("mean", "eval_return"), ("std", "eval_return_std"),
                                ("min", "eval_return_min"), ("max", "eval_return_max"))}
got, other = json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
have = {k: "%.4f" % got[k] for k in want}
if have != want or got["episodes"] != int(row["eval_episodes"]):
    sys.exit("sac-eval %r over %d episodes, the learner's final evaluation %r" % (have, got["episodes"], want))
if "%.4f" % other["mean"] == want["mean"]:
    sys.exit("negative control: --seed 4 gives the same mean %s as the run's seed" % want["mean"])
print("sac-eval = final evaluation: mean %s std %s over %d episodes (seed 4: %.4f)" %
      (want["mean"], want["std"], got["episodes"], other["mean"]))
EOF

  before=$(cat "${files[@]}" | cksum)
  "$LEARNER" --resume "$rd" --metrics_port -1 >"$DIR/$m-3.log" 2>&1 || fail "$m: resuming the finished run exited $?"
  grep -q "^run $rd is finished: $s2 of 1000 environment steps" "$DIR/$m-3.log" ||
    fail "$m: resuming the finished run did not say so"
  after=$(cat "${files[@]}" | cksum)
  [ "$before" = "$after" ] || fail "$m: resuming the finished run changed its files"
  echo "$m: $s1 steps ($e1 episodes, best $b1), resumed to $s2 ($e2 episodes, best $b2), finished run left alone"
}

# ---- 5: the training series on /metrics ----
series_of() { # mode, log file: the training series present on the learner's /metrics, one a line
  local port addr=127.0.0.1
  [ "$1" = remote ] && addr=0.0.0.0
  wait_for "[ -n \"\$(logged_port '$2' $addr)\" ]" 300 || fail "$1: no metrics port logged"
  port=$(logged_port "$2" $addr)
  wait_for "curl -s --max-time 5 http://127.0.0.1:$port/metrics | grep -q '^sac_learner_updates_total [1-9]'" 300 ||
    fail "$1: no update counted on /metrics"
  curl -s --max-time 5 "http://127.0.0.1:$port/metrics" >"$DIR/$1.metrics"
  for s in "${SERIES[@]}"; do grep -qF "$s " "$DIR/$1.metrics" && echo "$s"; done
  # control: the check does see a series that is not there
  ! grep -qF "sac_learner_no_such_series " "$DIR/$1.metrics" || fail "control: a series that does not exist was found"
}
check_series() {
  local m=$1 pid
  # shellcheck disable=SC2046
  "$LEARNER" $(mode_args "$m") "${SMALL[@]}" --total_steps 1000000000 --metrics_port 0 --run_dir "$DIR/scratch" \
    --run_name "$m" >"$DIR/$m-series.log" 2>&1 &
  pid=$!
  PIDS+=("$pid")
  series_of "$m" "$DIR/$m-series.log" >"$DIR/$m.series"
  if [ "$m" = local ]; then # the progress moves
    local port s0
    port=$(logged_port "$DIR/$m-series.log")
    s0=$(curl -s "http://127.0.0.1:$port/metrics" | sed -n 's/^sac_learner_env_steps_total //p')
    wait_for "[ \"\$(curl -s http://127.0.0.1:$port/metrics | sed -n 's/^sac_learner_env_steps_total //p')\" != '$s0' ]" \
      300 || fail "local: sac_learner_env_steps_total stays at $s0"
  fi
  kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  [ "$(wc -l <"$DIR/$m.series")" = "${#SERIES[@]}" ] ||
    fail "$m: training series missing on /metrics: $(printf '%s\n' "${SERIES[@]}" | grep -vxFf "$DIR/$m.series" | tr '\n' ' ')"
}

"$ACTOR" --env Pendulum-v1 --shards "$INSERT_EP" --weights "tcp://127.0.0.1:$WEIGHTS_PORT" --actor_id 0 \
  --metrics_port -1 >"$DIR/actor.log" 2>&1 &
PIDS+=($!)
for m in local embedded remote; do check_contract "$m"; done
for m in local embedded remote; do check_series "$m"; done
cmp -s "$DIR/local.series" "$DIR/embedded.series" && cmp -s "$DIR/local.series" "$DIR/remote.series" ||
  fail "the modes export different training series"
echo "/metrics: the same ${#SERIES[@]} training series in every mode; local mode's progress moves"
echo "1 passed, 0 failed"
