#!/usr/bin/env bash
# Checkpoint and resume of a whole run (embedded default, tiny network): a run of 4,000
# steps, then --resume of its run directory to 7,000 steps. The resumed run must restore
# the learner's counters and both shards' replay, continue the learning curve (updates
# and steps strictly increasing across the two parts) and end at exactly 7,000 steps.
# usage: test_resume.sh SAC_LEARNER
set -euo pipefail
learner=$1
dir=$(mktemp -d /tmp/sac-resume-XXXXXX)
trap 'rm -rf "$dir"' EXIT
common=(--hidden 64 --depth 3 --batch_size 100 --lr 1e-3 --eval_every 1000 --checkpoint_every 1000
        --run_dir "$dir" --eval_episodes 2 --log_interval 0)
"$learner" "${common[@]}" --run_name r --total_steps 4000 > "$dir/first.log" 2>&1
grep -q '^result: .* steps 4000 ' "$dir/first.log" || { cat "$dir/first.log"; echo "FAIL: first part"; exit 1; }
first_rows=$(($(wc -l < "$dir/r/metrics.csv") - 1))
"$learner" --config "$dir/r/config.txt" --resume "$dir/r" --total_steps 7000 > "$dir/second.log" 2>&1 || {
  cat "$dir/second.log"; echo "FAIL: resumed part exited non-zero"; exit 1; }
grep -q 'resumed from .*checkpoint.bin: [0-9]* updates, 4000 environment steps' "$dir/second.log" ||
  { cat "$dir/second.log"; echo "FAIL: counters not restored"; exit 1; }
[ "$(grep -c 'restored [0-9]* transitions' "$dir/second.log")" = 2 ] ||
  { cat "$dir/second.log"; echo "FAIL: shards did not restore their replay"; exit 1; }
grep -q '^result: .* steps 7000 ' "$dir/second.log" || { cat "$dir/second.log"; echo "FAIL: budget"; exit 1; }
rows=$(($(wc -l < "$dir/r/metrics.csv") - 1))
[ "$rows" -gt "$first_rows" ] || { echo "FAIL: the curve did not continue ($first_rows -> $rows rows)"; exit 1; }
awk -F, 'NR > 2 && ($2 < ps || $3 < pu) { bad = 1 } NR > 1 { ps = $2; pu = $3 } END { exit bad }' "$dir/r/metrics.csv" ||
  { cat "$dir/r/metrics.csv"; echo "FAIL: steps/updates go backwards"; exit 1; }
echo "resume: $first_rows evaluation rows before, $rows after; ended at 7000 steps"
echo "1 passed, 0 failed"
