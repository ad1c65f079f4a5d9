#!/usr/bin/env bash
# The embedded default against the single-process loop on the same configuration, runs
# interleaved, medians reported: wall seconds, updates/s, environment steps/s, and the
# embedded default's overhead (target: <= 20% slower at `tiny`, 10,000 steps).
# usage: bench/bench_embedded.sh [BUILD_DIR] [RUNS] [PRESET: tiny|pendulum] [STEPS]
set -uo pipefail
build=${1:-build}; runs=${2:-5}; preset=${3:-tiny}; steps=${4:-10000}
bin="$build/learner/sac-learner"
[ -x "$bin" ] || { echo "no $bin: build first" >&2; exit 2; }
case "$preset" in
  tiny) net=(--hidden 64 --depth 3 --batch_size 100) ;;
  pendulum) net=(--hidden 256 --depth 2 --batch_size 256) ;;
  *) echo "unknown preset $preset" >&2; exit 2 ;;
esac
common=(--env Pendulum-v1 --lr 1e-3 --total_steps "$steps" --quiet --log_level warn --threads 1 "${net[@]}")
med() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
declare -A wall ups ret
for i in $(seq "$runs"); do
  for mode in local service; do
    s=$(date +%s.%N)
    line=$("$bin" --mode "$mode" "${common[@]}" | grep '^result:')
    e=$(date +%s.%N)
    wall[$mode]+="$(echo "$e - $s" | bc) "
    ups[$mode]+="$(sed -E 's/.* ([0-9]+) updates\/s.*/\1/' <<<"$line") "
    ret[$mode]+="$(sed -E 's/.*final eval return (-?[0-9.]+).*/\1/' <<<"$line") "
  done
done
lw=$(tr ' ' '\n' <<<"${wall[local]}" | grep . | med); sw=$(tr ' ' '\n' <<<"${wall[service]}" | grep . | med)
printf 'preset %s, %s steps, %s runs each, interleaved; medians; learner on 1 BLAS thread in both\n' "$preset" "$steps" "$runs"
printf '| mode | wall s | env steps/s | updates/s (update time only) | final eval return |\n| --- | --- | --- | --- | --- |\n'
for mode in local service; do
  w=$(tr ' ' '\n' <<<"${wall[$mode]}" | grep . | med)
  printf '| %s | %.2f | %.0f | %s | %s |\n' "$( [ $mode = local ] && echo 'single-process loop' || echo 'embedded default (2 shards, 2 actors, inproc)')" \
    "$w" "$(echo "$steps / $w" | bc -l)" "$(tr ' ' '\n' <<<"${ups[$mode]}" | grep . | med)" "$(tr ' ' '\n' <<<"${ret[$mode]}" | grep . | med)"
done
printf 'embedded default overhead: %+.1f%% wall time (target <= +20%%)\n' "$(echo "($sw / $lw - 1) * 100" | bc -l)"
