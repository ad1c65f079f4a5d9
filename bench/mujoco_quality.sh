#!/usr/bin/env bash
# Learning quality on MuJoCo locomotion (issue 10): trains HalfCheetah-v4 (and Hopper-v4)
# with several seeds through the MuJoCo plugin (envs/mujoco) and prints the mean
# deterministic evaluation return at fixed step counts next to the published figures at
# 1M steps (CleanRL sac_continuous_action: HalfCheetah ~9,600, Hopper ~2,300; SB3 zoo:
# HalfCheetah ~9,500, Hopper ~2,300), with wall-clock and environment steps/s.
# Single-process loop (--mode local), default SAC hyper-parameters (2 x 256, batch 256,
# lr 3e-4, gamma 0.99, tau 0.005, learned alpha), 5,000 random steps as CleanRL/SB3 use.
#
# usage: bench/mujoco_quality.sh [BUILD_DIR] [STEPS] [SEEDS] [ENVS] [extra sac-learner options...]
#   defaults: build 100000 "1 2" "HalfCheetah-v4 Hopper-v4"; eval every STEPS/10 steps
#   (SAC_EVAL_EPISODES, default 5 episodes). Seeds run in parallel (one thread each);
#   logs go to ${OUT:-bench/out/mujoco_quality}/<env>_s<seed>.log.
set -uo pipefail
build=${1:-build}; steps=${2:-100000}; seeds=${3:-"1 2"}; envs=${4:-"HalfCheetah-v4 Hopper-v4"}
shift 4 2>/dev/null || shift $#
bin="$build/learner/sac-learner"
so="$(cd "$build" && pwd)/envs/mujoco/libsac_env_mujoco.so"
[ -x "$bin" ] || { echo "no $bin: build first" >&2; exit 2; }
[ -f "$so" ] || { echo "no $so: install libmujoco-dev and reconfigure" >&2; exit 2; }
out=${OUT:-bench/out/mujoco_quality}; mkdir -p "$out"
interval=$((steps / 10))
declare -A published=([HalfCheetah-v4]="9,600 / 9,500" [Hopper-v4]="2,300 / 2,300")
for env in $envs; do
  pids=()
  for seed in $seeds; do
    "$bin" --mode local --env "plugin:$so:$env" --total_steps "$steps" --seed "$seed" --threads 1 \
      --learning_starts 5000 --eval_every_steps "$interval" --eval_episodes "${SAC_EVAL_EPISODES:-5}" \
      --log_every_steps 10000 --metrics_port 0 "$@" >"$out/${env}_s$seed.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  echo "## $env, $steps steps, seeds: $seeds (published at 1M steps, CleanRL / SB3 zoo: ${published[$env]:-n/a})"
  printf '| step |'; for seed in $seeds; do printf ' seed %s |' "$seed"; done; printf ' mean |\n'
  printf '| --- |'; for seed in $seeds; do printf ' --- |'; done; printf ' --- |\n'
  for ((s = interval; s <= steps; s += interval)); do
    printf '| %d |' "$s"; sum=0; n=0
    for seed in $seeds; do
      r=$(sed -nE "s/.*eval at step $s: mean return (-?[0-9.]+).*/\1/p" "$out/${env}_s$seed.log" | tail -1)
      printf ' %s |' "${r:--}"
      [ -n "$r" ] && { sum=$(echo "$sum + $r" | bc -l); n=$((n + 1)); }
    done
    [ "$n" -gt 0 ] && printf ' %.1f |\n' "$(echo "$sum / $n" | bc -l)" || printf ' - |\n'
  done
  for seed in $seeds; do
    line=$(grep '^result:' "$out/${env}_s$seed.log")
    wall=$(sed -nE 's/.*wall ([0-9.]+) s.*/\1/p' <<<"$line")
    [ -n "$wall" ] && echo "seed $seed: wall $wall s, $(echo "$steps / $wall" | bc) env steps/s, $(sed -nE 's/.* ([0-9]+) updates\/s.*/\1/p' <<<"$line") updates/s" \
      || echo "seed $seed: did not finish (see $out/${env}_s$seed.log)"
  done
done
