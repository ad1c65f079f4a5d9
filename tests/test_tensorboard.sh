#!/usr/bin/env bash
# TensorBoard event files (learner/tbevents.c) read back with TensorBoard's own reader
# (pip tensorboard, installed by scripts/test.sh for the tests only): a short Pendulum run,
# then tests/tb_check.py compares the tags, steps and values with the run's metrics.csv.
# While the run goes, the events file must grow before the learner has used 8 s of CPU since
# it last grew (it is written and flushed every 2 s): a wait on the learner's progress (its
# CPU time), not on the clock. Negative controls: a copy with one flipped byte (TensorBoard's reader
# stops at the bad CRC) and a metrics.csv with one changed value must both fail the check.
# usage: test_tensorboard.sh SAC_LEARNER     exit 77 when tensorboard is not installed
set -euo pipefail
learner=$1
here=$(cd "$(dirname "$0")" && pwd)
python3 -c "import tensorboard" 2>/dev/null || { echo "SKIP: python3 has no tensorboard (pip install tensorboard)"; exit 77; }
dir=$(mktemp -d /tmp/sac-tb-XXXXXX)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
"$learner" --hidden 64 --depth 3 --batch_size 100 --lr 1e-3 --eval_every 4000 --eval_episodes 2 \
  --total_steps 20000 --log_interval 0 --metrics_port 0 --run_dir "$dir" --run_name r > "$dir/log" 2>&1 &
pid=$!
# flushing, waited on by progress: while the learner runs, the events file must grow before
# the learner has used 8 s of CPU since it last grew (it is flushed every 2 s of wall time,
# at most ~4 CPU-s at 2 threads; a learner held off the CPU by a busy machine uses none,
# so a slow machine cannot fail this), and must appear before it has used 60 CPU-s; a
# learner that uses no CPU at all for 60 s is wedged and fails the test.
tck=$(getconf CLK_TCK)
cpu_s() { awk -v t="$tck" '{ sub(/^.*\) /, ""); printf "%.2f", ($12 + $13) / t }' "/proc/$1/stat" 2>/dev/null; }
gt() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a > b) }'; }
last_size=-1 cpu_at_change=0 max_gap=0 growths=0 last_cpu=-1 cpu_moved=$SECONDS
while kill -0 "$pid" 2>/dev/null; do
  cpu=$(cpu_s "$pid")
  [ -n "$cpu" ] || break # ended between the two checks
  if [ "$cpu" != "$last_cpu" ]; then last_cpu=$cpu cpu_moved=$SECONDS; fi
  if ((SECONDS - cpu_moved > 60)); then
    cat "$dir/log"; echo "FAIL: the learner used no CPU for 60 s (at $cpu CPU-s)"; exit 1
  fi
  f=$(ls "$dir"/r/events.out.tfevents.* 2>/dev/null | head -1 || true)
  if [ -n "$f" ]; then
    size=$(stat -c %s "$f")
    if [ "$size" != "$last_size" ]; then
      gap=$(awk -v a="$cpu" -v b="$cpu_at_change" 'BEGIN { printf "%.2f", a - b }')
      ((last_size >= 0)) && gt "$gap" "$max_gap" && max_gap=$gap
      last_size=$size cpu_at_change=$cpu growths=$((growths + 1))
    elif ((last_size >= 0)) && gt "$(awk -v a="$cpu" -v b="$cpu_at_change" 'BEGIN { print a - b }')" 8; then
      echo "FAIL: $f did not grow while the learner used $cpu_at_change -> $cpu s of CPU (bound 8)"; exit 1
    fi
  elif gt "$cpu" 60; then
    cat "$dir/log"; echo "FAIL: no events file after the learner used $cpu s of CPU"; exit 1
  fi
  sleep 0.5
done
wait "$pid" || { cat "$dir/log"; echo "FAIL: learner exited non-zero"; exit 1; }
pid=
grep -q '^result: .* steps 20000 ' "$dir/log" || { cat "$dir/log"; echo "FAIL: no result line"; exit 1; }
f=$(ls "$dir"/r/events.out.tfevents.*)
[[ "$(basename "$f")" =~ ^events\.out\.tfevents\.[0-9]+\.[^.].*$ ]] || { echo "FAIL: file name $f"; exit 1; }
echo "events file $(basename "$f"): grew $growths times, longest pause while running ${max_gap} s of the learner's CPU"
python3 "$here/tb_check.py" "$dir/r" || { echo "FAIL: events and metrics.csv disagree"; exit 1; }
# negative control 1: one flipped byte in the middle of the file
mkdir "$dir/bad" && cp "$dir/r/metrics.csv" "$f" "$dir/bad/"
python3 - "$dir/bad/$(basename "$f")" <<'PY'
import sys
p = sys.argv[1]; b = bytearray(open(p, "rb").read()); b[len(b) // 2] ^= 0x40; open(p, "wb").write(b)
PY
if python3 "$here/tb_check.py" "$dir/bad" > "$dir/neg1" 2>&1; then
  cat "$dir/neg1"; echo "FAIL: a corrupted file passed"; exit 1
fi
echo "negative control (flipped byte): $(grep FAIL "$dir/neg1" | head -1)"
# negative control 2: metrics.csv with the last eval_return changed by 1
awk -F, -v OFS=, 'NR == n { $4 = $4 + 1 } { print }' n="$(wc -l < "$dir/r/metrics.csv")" "$dir/r/metrics.csv" > "$dir/m2.csv"
if python3 "$here/tb_check.py" "$dir/r" --metrics "$dir/m2.csv" > "$dir/neg2" 2>&1; then
  cat "$dir/neg2"; echo "FAIL: a changed metrics.csv value passed"; exit 1
fi
echo "negative control (changed value): $(grep FAIL "$dir/neg2" | head -1)"
echo "1 passed, 0 failed"
