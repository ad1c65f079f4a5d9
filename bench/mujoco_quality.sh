#!/usr/bin/env bash
# Learning quality on MuJoCo locomotion (issue 10): trains HalfCheetah-v4 (and Hopper-v4)
# with several seeds through the MuJoCo plugin (envs/mujoco) and prints the mean
# deterministic evaluation return at fixed step counts next to the published figures at
# 1M steps (CleanRL sac_continuous_action: HalfCheetah ~9,600, Hopper ~2,300; SB3 zoo:
# HalfCheetah ~9,500, Hopper ~2,300), with wall-clock and environment steps/s.
# Default SAC hyper-parameters (2 x 256, batch 256, lr 3e-4, gamma 0.99, tau 0.005, learned
# alpha), 5,000 random steps as CleanRL/SB3 use.
# MODES (default "local") picks the training paths, each with every seed:
#   local     the single-process loop (--mode local): act, store, update in one thread
#   embedded  the default service (no --shards): 2 actor threads stream to 2 in-process
#             shards, the learner samples them and publishes weights back by time
#
# usage: bench/mujoco_quality.sh [BUILD_DIR] [STEPS] [SEEDS] [ENVS] [extra sac-learner options...]
#   defaults: build 100000 "1 2" "HalfCheetah-v4 Hopper-v4"; eval every STEPS/10 steps
#   (SAC_EVAL_EPISODES, default 5 episodes). Seeds run in parallel (one thread each);
#   logs go to ${OUT:-bench/out/mujoco_quality}/<env>_s<seed>.log (local) and
#   <env>_embedded_s<seed>.log; PARALLEL (default: the number of seeds) runs at once.
set -uo pipefail
build=${1:-build}; steps=${2:-100000}; seeds=${3:-"1 2"}; envs=${4:-"HalfCheetah-v4 Hopper-v4"}
shift 4 2>/dev/null || shift $#
bin="$build/learner/sac-learner"
so="$(cd "$build" && pwd)/envs/mujoco/libsac_env_mujoco.so"
[ -x "$bin" ] || { echo "no $bin: build first" >&2; exit 2; }
[ -f "$so" ] || { echo "no $so: install libmujoco-dev and reconfigure" >&2; exit 2; }
out=${OUT:-bench/out/mujoco_quality}; mkdir -p "$out"
interval=$((steps / 10))
modes=${MODES:-local}
nseeds=$(wc -w <<<"$seeds")
parallel=${PARALLEL:-$nseeds}
declare -A published=([HalfCheetah-v4]="9,600 / 9,500" [HalfCheetah-v5]="9,600 / 9,500" [Hopper-v4]="2,300 / 2,300")
log_of() { # env mode seed
  [ "$2" = local ] && echo "$out/${1}_s$3.log" || echo "$out/${1}_${2}_s$3.log"
}
run_one() { # env mode seed
  local mode_args=(--mode local --eval_every_steps "$interval" --log_every_steps 10000)
  case "$2" in
    local) ;;
    embedded) mode_args=(--mode service --run_dir "$out/run_${1}_s$3") ;;
    *) echo "unknown mode '$2' in MODES (local | embedded)" >&2; return 2 ;;
  esac
  "$bin" "${mode_args[@]}" --env "plugin:$so:$1" --total_steps "$steps" --seed "$3" --threads 1 \
    --learning_starts 5000 --eval_episodes "${SAC_EVAL_EPISODES:-5}" \
    --metrics_port 0 "${extra[@]}" >"$(log_of "$1" "$2" "$3")" 2>&1
}
# The evaluation return at environment step S: local mode evaluates at exactly every
# STEPS/10 steps; the service evaluates every --eval_every_updates updates (default 2000),
# so for it this is the first evaluation row of metrics.csv taken at or after step S.
eval_at() { # env mode seed step
  local log; log=$(log_of "$1" "$2" "$3")
  if [ "$2" = local ]; then
    sed -nE "s/.*eval at step $4: mean return (-?[0-9.]+).*/\1/p" "$log" | tail -1
    return
  fi
  local dir; dir=$(sed -nE 's/^results in ([^:]+):.*/\1/p' "$log" | tail -1)
  [ -f "$dir/metrics.csv" ] || return 0
  awk -F, -v s="$4" 'NR > 1 && $2 >= s && $4 != "" { printf "%.1f", $4; exit }' "$dir/metrics.csv"
}
extra=("$@")
for env in $envs; do
  pids=()
  for mode in $modes; do
    for seed in $seeds; do
      while [ "$(jobs -rp | wc -l)" -ge "$parallel" ]; do wait -n; done
      echo "start: $env $mode seed $seed ($(date -u +%H:%M:%S))" >&2
      run_one "$env" "$mode" "$seed" &
      pids+=($!)
    done
  done
  for p in "${pids[@]}"; do wait "$p"; done
  for mode in $modes; do
  echo "## $env, $mode, $steps steps, seeds: $seeds (published at 1M steps, CleanRL / SB3 zoo: ${published[$env]:-n/a})"
  printf '| step |'; for seed in $seeds; do printf ' seed %s |' "$seed"; done; printf ' mean |\n'
  printf '| --- |'; for seed in $seeds; do printf ' --- |'; done; printf ' --- |\n'
  for ((s = interval; s <= steps; s += interval)); do
    printf '| %d |' "$s"; sum=0; n=0
    for seed in $seeds; do
      r=$(eval_at "$env" "$mode" "$seed" "$s")
      printf ' %s |' "${r:--}"
      [ -n "$r" ] && { sum=$(echo "$sum + $r" | bc -l); n=$((n + 1)); }
    done
    [ "$n" -gt 0 ] && printf ' %.1f |\n' "$(echo "$sum / $n" | bc -l)" || printf ' - |\n'
  done
  for seed in $seeds; do
    line=$(grep '^result:' "$(log_of "$env" "$mode" "$seed")")
    wall=$(sed -nE 's/.*wall ([0-9.]+) s.*/\1/p' <<<"$line")
    [ -n "$wall" ] && echo "seed $seed: wall $wall s, $(echo "$steps / $wall" | bc) env steps/s, $(sed -nE 's/.* ([0-9]+) updates\/s.*/\1/p' <<<"$line") updates/s" \
      || echo "seed $seed: did not finish (see $(log_of "$env" "$mode" "$seed"))"
  done
  done
done
