#!/usr/bin/env bash
# --mode local is bit-reproducible with a seed (docs/LEARNER.md, "Reproducibility"): two
# runs with --seed 5 and the same thread count leave the same policy.bin, byte for byte,
# the same metrics.csv but for its wall_seconds column, and the same final evaluation.
# Negative control: --seed 6 leaves another policy.bin (the comparison can fail).
# usage: test_local_repro.sh SAC_LEARNER
set -euo pipefail
learner=$1
dir=$(mktemp -d /tmp/sac-local-repro-XXXXXX)
trap 'rm -rf "$dir"' EXIT
run() { # name seed
  "$learner" --mode local --seed "$2" --threads 2 --total_steps 800 --learning_starts 300 --hidden 32 \
    --batch_size 32 --eval_episodes 2 --eval_every_steps 400 --checkpoint_every 200 --log_every_steps 0 \
    --metrics_port -1 --run_dir "$dir" --run_name "$1" >"$dir/$1.log" 2>&1 || { cat "$dir/$1.log"; echo "FAIL: run $1"; exit 1; }
}
run a 5
run b 5
run c 6
cmp "$dir/a/policy.bin" "$dir/b/policy.bin" || { echo "FAIL: the same seed gave two different policies"; exit 1; }
cut -d, -f2- "$dir/a/metrics.csv" >"$dir/a.csv"
cut -d, -f2- "$dir/b/metrics.csv" >"$dir/b.csv"
diff "$dir/a.csv" "$dir/b.csv" || { echo "FAIL: the same seed gave two different learning curves"; exit 1; }
ret() { sed -n 's/^result: .*final eval return \([-0-9.]*\) .*/\1/p' "$1"; }
[ "$(ret "$dir/a.log")" = "$(ret "$dir/b.log")" ] || { echo "FAIL: final returns differ"; exit 1; }
if cmp -s "$dir/a/policy.bin" "$dir/c/policy.bin"; then
  echo "FAIL: control: seeds 5 and 6 gave the same policy (the comparison cannot tell)"
  exit 1
fi
echo "seed 5 twice: policy.bin identical ($(wc -c <"$dir/a/policy.bin") bytes), metrics.csv identical ($(wc -l <"$dir/a.csv") rows), final return $(ret "$dir/a.log") both times; seed 6: $(ret "$dir/c.log"), another policy"
echo "1 passed, 0 failed"
