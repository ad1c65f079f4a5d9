#!/usr/bin/env bash
# TensorBoard event files (learner/tbevents.c) read back with TensorBoard's own reader
# (pip tensorboard, installed by scripts/test.sh for the tests only): a short Pendulum run,
# then tests/tb_check.py compares the tags, steps and values with the run's metrics.csv.
# While the run goes, the events file must grow at least every 8 s (it is written and
# flushed every 2 s). Negative controls: a copy with one flipped byte (TensorBoard's reader
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
# flushing: while the learner runs, the file's size must change within every 8 s (2 s + slack for a busy CI machine)
last_size=-1 last_change=$(date +%s) max_gap=0 growths=0
while kill -0 "$pid" 2>/dev/null; do
  f=$(ls "$dir"/r/events.out.tfevents.* 2>/dev/null | head -1 || true)
  now=$(date +%s)
  if [ -n "$f" ]; then
    size=$(stat -c %s "$f")
    if [ "$size" != "$last_size" ]; then
      gap=$((now - last_change)); ((last_size >= 0 && gap > max_gap)) && max_gap=$gap
      last_size=$size last_change=$now growths=$((growths + 1))
    elif ((now - last_change > 8)) && [ "$last_size" -ge 0 ]; then
      echo "FAIL: $f did not grow for $((now - last_change)) s while the learner ran"; exit 1
    fi
  elif ((now - last_change > 60)); then
    cat "$dir/log"; echo "FAIL: no events file after 60 s"; exit 1
  fi
  sleep 0.5
done
wait "$pid" || { cat "$dir/log"; echo "FAIL: learner exited non-zero"; exit 1; }
pid=
grep -q '^result: .* steps 20000 ' "$dir/log" || { cat "$dir/log"; echo "FAIL: no result line"; exit 1; }
f=$(ls "$dir"/r/events.out.tfevents.*)
[[ "$(basename "$f")" =~ ^events\.out\.tfevents\.[0-9]+\.[^.].*$ ]] || { echo "FAIL: file name $f"; exit 1; }
echo "events file $(basename "$f"): grew $growths times, longest pause while running ${max_gap} s"
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
