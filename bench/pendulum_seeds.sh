#!/usr/bin/env bash
# Pendulum-v1, five seeds: the learning bar of the foundation issue (mean deterministic
# evaluation return >= -200 over 10 episodes within 20,000 steps, in at least 4 of 5
# seeds). Prints each seed's final and best evaluation return and wall time.
# usage: bench/pendulum_seeds.sh [BUILD_DIR] [extra sac-learner options...]
set -uo pipefail
build=${1:-build}; shift || true
bin="$build/learner/sac-learner"
[ -x "$bin" ] || { echo "no $bin: build first" >&2; exit 2; }
pass=0
printf '| seed | final eval return | best eval return | wall s | updates/s | >= -200 |\n| --- | --- | --- | --- | --- | --- |\n'
for seed in 1 2 3 4 5; do
  line=$("$bin" --env Pendulum-v1 --lr 1e-3 --total_steps 20000 --seed "$seed" --quiet --log_level warn "$@" | grep '^result:')
  final=$(sed -E 's/.*final eval return (-?[0-9.]+).*/\1/' <<<"$line")
  best=$(sed -E 's/.*\(best (-?[0-9.]+)\).*/\1/' <<<"$line")
  wall=$(sed -E 's/.*wall ([0-9.]+) s.*/\1/' <<<"$line")
  ups=$(sed -E 's/.* ([0-9]+) updates\/s.*/\1/' <<<"$line")
  ok=no; awk -v f="$final" 'BEGIN{exit !(f >= -200)}' && { ok=yes; pass=$((pass+1)); }
  printf '| %s | %s | %s | %s | %s | %s |\n' "$seed" "$final" "$best" "$wall" "$ups" "$ok"
done
echo "seeds reaching -200 at 20k steps: $pass of 5 (bar: at least 4)"
[ "$pass" -ge 4 ]
