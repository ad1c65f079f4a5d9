#!/usr/bin/env bash
# Self-test of scripts/gpu_check.sh's decision on a CPU machine: its check functions and
# its verdict over a results directory are fed recorded outputs in the formats the GPU
# steps write (criterion --verbose, sac-bench-dp and sac-bench-learner result lines,
# sac-learner --mode local's result line). A good run must pass; each planted failure
# (a skipped, failed or missing GPU test, too few [PASS] lines, a bad exit status, no
# expected test count; unequal
# data-parallel hashes, a missing rank, a rank with identical=0 or a bad exit status, an
# fp16 overflow that only one rank skipped, a required run that did not run; a benchmark
# line with a NaN loss, a failed graph capture, degraded GEMMs, too many launches, a
# blocking sync per update, no result; Pendulum below -200 or not run) must fail, naming
# what failed. Seconds long.
#
# usage: test_gpu_check.sh [PATH/TO/gpu_check.sh]
set -u
SCRIPT=${1:-"$(dirname "$0")/../scripts/gpu_check.sh"}
T=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check_test.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
export GPU_CHECK_SOURCE_ONLY=1
# shellcheck source=/dev/null
. "$SCRIPT" || { echo "FAIL: cannot source $SCRIPT"; exit 1; }
fails=0 cases=0

good() { # a recorded good run into directory $1
  local d=$1
  mkdir -p "$d/dp"
  cat >"$d/tests.log" <<'L'
[RUN ] backend_cuda::linear_critic_input_layer_two_segments
[PASS] backend_cuda::linear_critic_input_layer_two_segments: (0.12s)
[RUN ] backend_cuda::update_parity_cpu_vs_cuda_fp32_100_updates
  per tensor after 100 updates: worst params critics layer 0 W err 1.20e-04
[PASS] backend_cuda::update_parity_cpu_vs_cuda_fp32_100_updates: (1.80s)
[RUN ] backend_cuda::low_precision_updates_stay_finite_and_close
[PASS] backend_cuda::low_precision_updates_stay_finite_and_close: (2.10s)
[====] Synthesis: Tested: 3 | Passing: 3 | Failing: 0 | Crashing: 0
test exit status 0
L
  echo 3 >"$d/expected_pass"
  echo "result: env Pendulum-v1  steps 20000  updates 19000  episodes 100  final eval return -152.4 (best -140.2) over 10 episodes" >"$d/pendulum.log"
  printf '%s\n' zmq-fp16-overflow-2-ranks-gpu0 zmq-2-ranks-gpu0 >"$d/dp/required"
  echo "2 1" >"$d/dp/zmq-fp16-overflow-2-ranks-gpu0.spec"
  cat >"$d/dp/zmq-fp16-overflow-2-ranks-gpu0.out" <<'L'
bench-dp-result rank=0 size=2 collective=zmq backend=cuda updates=300 updates_per_s=900.1 allreduce_ms=0.4000 allreduce_share=36.0% identical=1 hash=0123456789abcdef skipped=3
rank 0 exit status 0
bench-dp-result rank=1 size=2 collective=zmq backend=cuda updates=300 updates_per_s=899.7 allreduce_ms=0.4100 allreduce_share=36.9% identical=1 hash=0123456789abcdef skipped=3
rank 1 exit status 0
L
  echo "2 0" >"$d/dp/zmq-2-ranks-gpu0.spec"
  sed 's/skipped=3/skipped=0/; s/hash=0123456789abcdef/hash=fedcba9876543210/' "$d/dp/zmq-fp16-overflow-2-ranks-gpu0.out" >"$d/dp/zmq-2-ranks-gpu0.out"
  echo "1 0" >"$d/dp/nccl-1-rank.spec"
  printf '%s\n' "bench-dp-result rank=0 size=1 collective=nccl backend=cuda updates=1000 updates_per_s=2100.0 allreduce_ms=0.0500 allreduce_share=10.5% identical=1 hash=00000000000000aa skipped=0" "rank 0 exit status 0" >"$d/dp/nccl-1-rank.out"
  local common="backend=cuda recompute=0 batch=256 hidden=256 depth=2 ms_per_update=0.2 peak_device_mib=120.5 loss_scale=1 skipped=0 degraded_gemms=0 critic_loss=1.25 actor_loss=-7.5 alpha_loss=-0.22"
  cat >"$d/results" <<L
bench-result label=cheetah/b256/fp32/graphs=true preset=cheetah precision=fp32 graphs=1 updates_per_s=5200.0 graph_launches=3090 kernels=27 blocking_per_update=0.000 $common
bench-result label=cheetah/b256/fp32/graphs=false preset=cheetah precision=fp32 graphs=0 updates_per_s=3100.0 graph_launches=0 kernels=27 blocking_per_update=0.000 $common
bench-result label=cheetah/b256/fp16/graphs=true preset=cheetah precision=fp16 graphs=1 updates_per_s=6100.0 graph_launches=3090 kernels=36 blocking_per_update=0.000 $common
bench-result label=seed/b256/bf16/graphs=true preset=seed precision=bf16 graphs=1 updates_per_s=4100.0 graph_launches=3090 kernels=39 blocking_per_update=0.000 ${common/depth=2/depth=3}
bench-result label=cheetah/b256/fp32/profiled preset=cheetah precision=fp32 graphs=0 updates_per_s=1500.0 graph_launches=0 kernels=27 blocking_per_update=5.000 $common
bench-result label=8x512/b256/bf16/recompute=true preset=cheetah precision=bf16 graphs=1 updates_per_s=900.0 graph_launches=1030 kernels=147 blocking_per_update=0.000 ${common/recompute=0/recompute=1}
L
  awk '{ sub(/^label=/, "", $2); print $2 }' "$d/results" >"$d/bench_runs" # the runs that started
}

# expect NAME STATUS PATTERN: the verdict over $T/case exits STATUS with PATTERN in its output
expect() {
  local name=$1 want=$2 pat=$3 out rc
  cases=$((cases + 1))
  out=$(verdict "$T/case" 2>&1)
  rc=$?
  # a here-string, not printf | grep -q: with gpu_check.sh's pipefail sourced, grep -q
  # quitting at its first match could fail the pipeline on printf's SIGPIPE (seen: 1 run
  # in about 20)
  if [ "$rc" != "$want" ] || ! grep -Eq -- "$pat" <<<"$out"; then
    echo "FAIL $name: verdict exit $rc (expected $want), pattern '$pat'; output:"
    printf '%s\n' "$out" | sed 's/^/    /'
    fails=$((fails + 1))
  else
    echo "ok   $name: $(grep -E -m 1 -- "$pat" <<<"$out")"
  fi
}

# plant NAME PATTERN COMMAND...: a fresh good run, COMMAND changes it (in $T/case), the
# verdict must fail naming PATTERN
plant() {
  local name=$1 pat=$2
  shift 2
  rm -rf "$T/case" && good "$T/case"
  (cd "$T/case" && eval "$*") || { echo "FAIL $name: could not plant"; fails=$((fails + 1)); return; }
  expect "$name" 1 "$pat"
}

rm -rf "$T/case" && good "$T/case"
expect "good run passes" 0 "^VERDICT: PASS$"

plant "a GPU test skipped" "FAIL GPU tests: 1 skipped" \
  "sed -i '2a [SKIP] backend_cuda::graph_replay_equals_eager: no usable CUDA device' tests.log"
plant "every GPU test skipped" "FAIL GPU tests: 3 skipped" "sed -i 's/^\[PASS\]/[SKIP]/' tests.log"
plant "fewer PASS lines than tests" "FAIL GPU tests: 2 \[PASS\] lines, 3 expected" "sed -i '0,/^\[PASS\]/{/^\[PASS\]/d}' tests.log"
plant "a GPU test failed" "FAIL GPU tests: 1 failed" \
  "sed -i 's/^\[PASS\] backend_cuda::update_parity/[FAIL] backend_cuda::update_parity/' tests.log"
plant "a GPU test crashed" "FAIL GPU tests: 1 failed" "echo '[----] backend_cuda::x: CRASH!' >>tests.log"
plant "test binary exit status" "FAIL GPU tests: exit status 1" "sed -i 's/^test exit status 0/test exit status 1/' tests.log"
plant "GPU tests not run" "FAIL GPU tests: no log" "rm tests.log"
plant "expected test count missing" "FAIL GPU tests: no expected test count" "echo >expected_pass"
plant "expected test count file missing" "FAIL GPU tests: no expected test count" "rm expected_pass"

plant "data-parallel hashes differ" "FAIL data-parallel zmq-fp16-overflow-2-ranks-gpu0: 2 distinct parameter hashes" \
  "sed -i '3s/hash=0123456789abcdef/hash=0123456789abcdee/' dp/zmq-fp16-overflow-2-ranks-gpu0.out"
plant "data-parallel rank missing" "FAIL data-parallel zmq-2-ranks-gpu0: 1 rank results, 2 expected" \
  "sed -i '3d' dp/zmq-2-ranks-gpu0.out"
plant "data-parallel overflow skipped on one rank only" "FAIL data-parallel zmq-fp16-overflow-2-ranks-gpu0: 1 rank\(s\) skipped fewer than 1" \
  "sed -i '1s/skipped=3/skipped=0/' dp/zmq-fp16-overflow-2-ranks-gpu0.out"
plant "data-parallel identical=0" "FAIL data-parallel nccl-1-rank: a rank reports identical=0" \
  "sed -i 's/identical=1/identical=0/' dp/nccl-1-rank.out"
plant "data-parallel rank exit status" "FAIL data-parallel zmq-2-ranks-gpu0: rank 1 exit status 1" \
  "sed -i 's/^rank 1 exit status 0/rank 1 exit status 1/' dp/zmq-2-ranks-gpu0.out"
plant "required data-parallel run skipped" "FAIL data-parallel zmq-fp16-overflow-2-ranks-gpu0: no output" \
  "rm dp/zmq-fp16-overflow-2-ranks-gpu0.out"

plant "benchmark NaN loss" "FAIL benchmark cheetah/b256/fp32/graphs=false: critic_loss nan" \
  "sed -i '2s/critic_loss=1.25/critic_loss=nan/' results"
plant "benchmark inf loss" "FAIL benchmark seed/b256/bf16/graphs=true: alpha_loss inf" \
  "sed -i '4s/alpha_loss=-0.22/alpha_loss=inf/' results"
plant "benchmark graph capture failed" "FAIL benchmark cheetah/b256/fp32/graphs=true: graphs on but graph_launches 0" \
  "sed -i '1s/graph_launches=3090/graph_launches=0/' results"
plant "benchmark degraded GEMMs" "FAIL benchmark cheetah/b256/fp16/graphs=true: degraded_gemms 2" \
  "sed -i '3s/degraded_gemms=0/degraded_gemms=2/' results"
plant "benchmark launches over the bound" "FAIL benchmark cheetah/b256/fp32/graphs=true: 28 launches per update, bound 27" \
  "sed -i '1s/kernels=27/kernels=28/' results"
plant "benchmark fp16 launches over the bound" "FAIL benchmark cheetah/b256/fp16/graphs=true: 37 launches per update, bound 36" \
  "sed -i '3s/kernels=36/kernels=37/' results"
plant "benchmark blocking sync per update" "FAIL benchmark cheetah/b256/fp32/graphs=false: 2.000 blocking syncs per update" \
  "sed -i '2s/blocking_per_update=0.000/blocking_per_update=2.000/' results"
plant "benchmark without a result" "FAIL benchmark cheetah/b1024/bf16/graphs=true: critic_loss" \
  "echo 'bench-result label=cheetah/b1024/bf16/graphs=true no_result_status=124' >>results"

plant "benchmark ran, its result not recorded" "FAIL benchmark cheetah/b256/fp16/graphs=true: ran, but no result line was recorded" \
  "sed -i '3d' results"

# the labelling of result lines (labels hold '/' and '='; a sed with '/' as its
# delimiter once dropped every line: nothing was checked, nothing failed)
cases=$((cases + 1))
tagged=$(printf '%s\n' 'x' 'bench-result preset=cheetah kernels=27' 'bench-resultx no' |
  tag_label 'cheetah/b256/fp32/graphs=true' bench-result)
if [ "$tagged" = 'bench-result label=cheetah/b256/fp32/graphs=true preset=cheetah kernels=27' ]; then
  echo "ok   tag_label: $tagged"
else
  echo "FAIL tag_label: got '$tagged'"
  fails=$((fails + 1))
fi

# the recorded first run on an H200 (tests/data/gpu_check_h200): the verdict names its
# two failed gates and passes its benchmark lines
rec="$(dirname "$0")/data/gpu_check_h200"
if [ -d "$rec" ]; then
  rm -rf "$T/case" && cp -r "$rec" "$T/case"
  expect "recorded H200 run: parity failed" 1 "^FAIL GPU tests: 1 failed .*update_parity_cpu_vs_cuda_fp32_100_updates"
  expect "recorded H200 run: fp16 overflow ranks differ" 1 \
    "^FAIL data-parallel zmq-fp16-overflow-2-ranks-gpu0: 2 distinct parameter hashes"
  cases=$((cases + 1))
  others=$(verdict "$T/case" 2>&1 | grep -a '^FAIL' | grep -v 'GPU tests\|zmq-fp16-overflow')
  if [ -n "$others" ]; then
    echo "FAIL recorded H200 run: a failure besides the two known ones"
    verdict "$T/case" 2>&1 | sed 's/^/    /'
    fails=$((fails + 1))
  else
    echo "ok   recorded H200 run: no failure besides the parity test and the fp16 overflow run"
  fi
else
  echo "FAIL recorded H200 run: $rec missing"
  fails=$((fails + 1))
fi

plant "Pendulum below -200" "FAIL Pendulum: final eval return -250.1 is below the bar of -200" \
  "sed -i 's/final eval return -152.4/final eval return -250.1/' pendulum.log"
plant "Pendulum NaN" "FAIL Pendulum: the final eval return 'nan' is not a finite number" \
  "sed -i 's/final eval return -152.4/final eval return nan/' pendulum.log"
plant "Pendulum not run" "FAIL Pendulum: no result line" "rm pendulum.log"

# the functions one by one, on the same recorded lines
cases=$((cases + 1))
if [ "$(kernel_bound fp32 2) $(kernel_bound fp16 2) $(kernel_bound bf16 3)" != "27 36 39" ]; then
  echo "FAIL kernel_bound: $(kernel_bound fp32 2) $(kernel_bound fp16 2) $(kernel_bound bf16 3)"
  fails=$((fails + 1))
fi

echo "$cases cases, $fails failed"
[ "$fails" -eq 0 ]
