#!/usr/bin/env bash
# Issue 17: memory sized to the run. Bounds on peak RSS (VmHWM, which sac-learner prints on
# its result line as "peak RSS X MiB"; /usr/bin/time -v's maximum resident set is logged
# beside it where installed):
#   1. the `tiny` embedded Pendulum run (bench/bench_embedded.sh's tiny: 3 x 64, batch 100,
#      10,000 steps, 1 thread): <= 40 MiB;
#   2. the cheetah learner service (HalfCheetah-v4 shapes: obs 17, act 6, 2 x 256, batch 256)
#      as its own process beside a sac-replay shard and an actor: <= 120 MiB (skipped where
#      the MuJoCo plugin was not built).
# Negative control: the same bound check on a run made big on purpose (the tiny run with
# 3 x 768 networks) must fail, so a parse that reads nothing cannot pass.
# usage: [FOOTPRINT_PART=tiny|cheetah] footprint.sh SAC_LEARNER SAC_ACTOR SAC_REPLAY [MUJOCO_PLUGIN_SO]
# FOOTPRINT_PART runs one half alone (ctest: test_footprint is 1 with its control,
# test_footprint_cheetah is 2, which exits 77 - Skipped - where the plugin was not built);
# unset, both run and a missing plugin skips the whole test rather than pass half of it.
source "$(dirname "${BASH_SOURCE[0]}")/../dist/lib.sh" || { echo "FAIL: $0: cannot load lib.sh"; exit 1; }
dist_init footprint 280
plugin=${4:-}
PART=${FOOTPRINT_PART:-all}
case $PART in tiny | cheetah | all) ;; *) fail "FOOTPRINT_PART=$PART: tiny, cheetah or unset" ;; esac
check_binaries "$1" "$2" "$3"
# AddressSanitizer's shadow memory and quarantine are part of an instrumented binary's RSS:
# its figures say nothing about the product's. The plain build (scripts/test.sh) runs this.
grep -qa __asan_init "$LEARNER" && skip "$LEARNER is built with AddressSanitizer: peak RSS is measured on the plain build"
TINY_MIB=40 CHEETAH_MIB=120
tiny=(--env Pendulum-v1 --lr 1e-3 --quiet --log_level warn --threads 1 --depth 3 --batch_size 100
      --metrics_port -1 --run_dir "$T/runs")
timer=()
[ -x /usr/bin/time ] && timer=(/usr/bin/time -v)

peak() { result_line "$1" | sed -n 's/.* peak RSS \([0-9.]*\) MiB.*/\1/p'; }
within() { awk -v p="$1" -v b="$2" 'BEGIN {exit !(p != "" && p + 0 > 0 && p + 0 <= b)}'; }
time_rss() { sed -n 's/.*Maximum resident set size (kbytes): \([0-9]*\)/\1/p' "$T/$1.log" | tail -n 1; }

# 1. tiny, embedded default (foreground, bounded)
if [ "$PART" != cheetah ]; then
  timeout 120 "${timer[@]}" "$LEARNER" "${tiny[@]}" --hidden 64 --total_steps 10000 > "$T/tiny.log" 2>&1 ||
    fail "the tiny run failed: $(tail -n 3 "$T/tiny.log")"
  p=$(peak tiny)
  log "tiny embedded run: $(result_line tiny)"
  [ -n "${timer[*]}" ] && log "tiny embedded run: /usr/bin/time -v maximum resident set $(time_rss tiny) KiB"
  within "$p" "$TINY_MIB" || fail "tiny embedded run: peak RSS ${p:-none} MiB, bound $TINY_MIB MiB"

  # negative control: 3 x 768 networks, a few hundred updates, must exceed the same bound
  timeout 120 "$LEARNER" "${tiny[@]}" --hidden 768 --total_steps 300 --learning_starts 200 > "$T/big.log" 2>&1 ||
    fail "the negative-control run failed: $(tail -n 3 "$T/big.log")"
  pb=$(peak big)
  [ -n "$pb" ] || fail "negative control: no peak RSS on the result line"
  within "$pb" "$TINY_MIB" && fail "negative control: a 3 x 768 run (peak $pb MiB) passed the $TINY_MIB MiB bound"
  log "negative control: 3 x 768 run peaks at $pb MiB, over the bound as it should"
  [ "$PART" = tiny ] && pass "tiny embedded ${p} MiB <= $TINY_MIB MiB (its negative control: $pb MiB fails the bound)"
fi

# 2. the cheetah learner service beside one shard and one actor
if [ -z "$plugin" ] || [ ! -f "$plugin" ]; then
  skip "the cheetah learner service needs the MuJoCo plugin, not built here (${plugin:-no path given})"
fi
env_arg="--env=plugin:$plugin:HalfCheetah-v4"
OBS_DIM=17 ACT_DIM=6 LEARNING_STARTS=1000 BUFFER=20000 BATCH=256
start_local_shard shard0 1 0
# the learner process, with /usr/bin/time around it where installed (a wrapper script, as
# start_local_learner runs "$LEARNER" with its options)
if [ -n "${timer[*]}" ]; then
  printf '#!/bin/sh\nexec /usr/bin/time -v "%s" "$@"\n' "$LEARNER" > "$T/timed-learner"
  chmod +x "$T/timed-learner"
  LEARNER=$T/timed-learner
fi
start_local_learner learner "" "$env_arg" --total_steps=2500 --hidden=256 --depth=2 --threads=2 \
  --eval_episodes=1 --checkpoint_every=0
start_local_actor actor0 1 0 "$env_arg" --max_steps=2500
wait_result learner 200
line=$(result_line learner)
log "cheetah learner: $line"
[ -n "${timer[*]}" ] && log "cheetah learner: /usr/bin/time -v maximum resident set $(time_rss learner) KiB"
pc=$(peak learner)
shard_kib=$(rss_kib "$(pid_of shard0)")
log "beside it: the shard's resident set ${shard_kib:-?} KiB"
within "$pc" "$CHEETAH_MIB" || fail "cheetah learner service: peak RSS ${pc:-none} MiB, bound $CHEETAH_MIB MiB"
if [ "$PART" = cheetah ]; then
  pass "cheetah learner service ${pc} MiB <= $CHEETAH_MIB MiB"
fi
pass "tiny embedded ${p} MiB <= $TINY_MIB MiB; cheetah learner service ${pc} MiB <= $CHEETAH_MIB MiB"
