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
# blocking sync per update, no result; Pendulum below -200 or not run; issue 33: a bundle
# of another tree, no tree hash, the op profile table or the update times missing, rows
# longer than the update, a precision without a peer result, the service without a result
# or stage timers or ceiling, a stage that ran into its budget) must fail, naming what
# failed. Then a dry run of the whole check on stub binaries (every stage's plumbing,
# the results tarball; a stale bundle refused with nothing run; a hanging stage cut at its
# budget and named by the verdict). About 20 seconds.
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
  printf 'bundle %s\ncheckout %s\n' 0123abcd 0123abcd >"$d/tree"
  mkdir -p "$d/profile" "$d/peers" "$d/service"
  printf '%s\n' cheetah-b256-bf16 cheetah-b256-fp32 >"$d/profile/required"
  for f in cheetah-b256-bf16 cheetah-b256-fp32; do
    cat >"$d/profile/$f.out" <<L
| q_head 256->1 x2 B256 (critic loss) | 1.00 | 4.10 | 4.10 | 5.0% |
op-profile-row name="q_head 256->1 x2 B256 (critic loss)" calls=1.000 us_per_call=4.100 us_per_update=4.100 share=0.0500
op-profile-result preset=cheetah backend=cuda precision=${f#cheetah-b256-} batch=256 rows=19 ops_per_update=23.00 update_us=82.000 sum_us=70.500
update-time-result preset=cheetah backend=cuda precision=${f#cheetah-b256-} graphs=1 upl=1 device_us=61.200 host_us=14.300
L
  done
  for f in fp32 bf16; do
    cat >"$d/peers/$f.out" <<L
peer-result mode=torch-eager precision=$f batch=256 hidden=256x2 updates_per_s=310.2 us_per_update=3223.7 runs=309,310,312 torch=2.11.0 finite=1 device=NVIDIA_H200
peer-failed mode=torch-compile reason=TimeoutError: planted
peer-result mode=jax-scan precision=$f batch=256 hidden=256x2 updates_per_s=2900.5 us_per_update=344.8 runs=2890,2900,2911 jax=0.11.2 scan=100 finite=1 device=NVIDIA_H200
L
  done
  echo "result: env Pendulum-v1  steps 60000  updates 59000  episodes 300  final eval return -160.0 (best -150.0) over 2 episodes  wall 20.0 s  5200 updates/s  3000 steps/s  policy version 5900  peak RSS 400.0 MiB" >"$d/service/learner.out"
  printf '%s\n' 'sac_learner_updates_total 59000' 'sac_learner_stage_seconds_total{stage="sample"} 1.5' \
    'sac_learner_stage_seconds_total{stage="update"} 9.0' >"$d/service/metrics.txt"
  echo "RESULT learner_service env=Pendulum-v1 updates_per_s=25000.0 sample_us=10.00 update_us=1.00" >"$d/service/ceiling.out"
  printf '%s\n' "gates 260 40 0" "profile 60 12 0" "bench 130 70 0" "peers 200 150 0" "service 110 35 0" >"$d/stages"
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

# issue 33's gates
plant "stale bundle" "FAIL bundle: built from tree 0123abcd, this checkout is tree 9999ffff" \
  "sed -i 's/^checkout .*/checkout 9999ffff/' tree"
plant "no tree hash recorded" "FAIL bundle: no tree hash recorded" "rm tree"
plant "profile table missing" "FAIL profile cheetah-b256-fp32: no op table" \
  "sed -i '/^op-profile-result/d' profile/cheetah-b256-fp32.out"
plant "profile not run" "FAIL profile cheetah-b256-bf16: no output" "rm profile/cheetah-b256-bf16.out"
plant "profile list missing" "FAIL profile none: no output" "rm profile/required"
plant "update times missing" "FAIL profile cheetah-b256-bf16: no update times" \
  "sed -i '/^update-time-result/d' profile/cheetah-b256-bf16.out"
plant "profile rows longer than the update" "FAIL profile cheetah-b256-bf16: the rows \\(90.000 us\\) exceed the update" \
  "sed -i 's/sum_us=70.500/sum_us=90.000/' profile/cheetah-b256-bf16.out"
plant "device time not finite" "FAIL profile cheetah-b256-fp32: device_us nan" \
  "sed -i 's/device_us=61.200/device_us=nan/' profile/cheetah-b256-fp32.out"
plant "peer result missing" "FAIL peers bf16: no peer result" "sed -i '/^peer-result/d' peers/bf16.out"
plant "peers not run" "FAIL peers fp32: no peer result" "rm peers/fp32.out"
plant "service result missing" "FAIL service: no result line" "rm service/learner.out"
plant "service stage timers missing" "FAIL service: no stage timers" "rm service/metrics.txt"
plant "service ceiling missing" "FAIL service: no null-backend ceiling" "sed -i 's/^RESULT/NORESULT/' service/ceiling.out"
plant "stage over budget" "FAIL stage peers: ran into its budget \\(200 s of 200, status 124\\)" \
  "sed -i 's/^peers 200 150 0/peers 200 200 124/' stages"
plant "stage at its cap" "FAIL stage bench: ran into its budget \\(130 s of 130" "sed -i 's/^bench 130 70 0/bench 130 130 0/' stages"

# tree_hash: the same for the same files, another when one changes (any file of the tree)
cases=$((cases + 1))
h1=$( (cd "$(dirname "$0")/.." && tree_hash) )
h2=$( (cd "$(dirname "$0")/.." && tree_hash) )
if [ -n "$h1" ] && [ "$h1" = "$h2" ] && [ ${#h1} -eq 64 ]; then
  echo "ok   tree_hash: stable ($h1)"
else
  echo "FAIL tree_hash: '$h1' then '$h2'"
  fails=$((fails + 1))
fi

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
  expect "recorded H200 run: it predates the tree hash" 1 "^FAIL bundle: no tree hash recorded"
  cases=$((cases + 1))
  # that run had none of issue 33's stages: those fail as not run, and nothing else does
  others=$(verdict "$T/case" 2>&1 | grep -a '^FAIL' |
    grep -v 'GPU tests\|zmq-fp16-overflow\|^FAIL bundle: no tree hash\|^FAIL profile none: no output\|^FAIL peers \(fp32\|bf16\): no peer result\|^FAIL service: no ')
  if [ -n "$others" ]; then
    echo "FAIL recorded H200 run: a failure besides the two known ones and the stages it did not have"
    verdict "$T/case" 2>&1 | sed 's/^/    /'
    fails=$((fails + 1))
  else
    echo "ok   recorded H200 run: no failure besides the parity test, the fp16 overflow run and the stages it did not have"
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

# ---- a dry run of the whole check on stub binaries: the stages' plumbing ----------------
# Stubs print what the real binaries print (the lines the checks read); the bundle is a
# tarball of them with this checkout's tree hash. Run from a copy of the scripts beside
# the real tree (the check reads tests/test_backend_cuda.c and hashes the tree).
ROOT=$(cd "$(dirname "$0")/.." && pwd)
stubs() { # stub binaries into $1/bin; HANG=1 makes sac-bench-learner --op_profile hang
  local b=$1/bin
  mkdir -p "$b" "$1/lib/sacfleet"
  cat >"$b/test_backend_cuda" <<'S'
#!/usr/bin/env bash
n=$(grep -c '^Test(' "${STUB_ROOT:?}/tests/test_backend_cuda.c")
for ((i = 0; i < n; i++)); do echo "[PASS] backend_cuda::t$i: (0.01s)"; done
echo "[====] Synthesis: Tested: $n | Passing: $n | Failing: 0 | Crashing: 0"
S
  cat >"$b/sac-learner" <<'S'
#!/usr/bin/env bash
port=0
while [ $# -gt 0 ]; do [ "$1" = --metrics_port ] && port=$2; shift; done
if [ "$port" -gt 0 ]; then # serve a /metrics for four seconds, as the embedded learner does
  python3 - "$port" <<'P' &
import sys, http.server, threading
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        b = b'sac_learner_updates_total 1000\nsac_learner_stage_seconds_total{stage="update"} 0.5\n'
        self.send_response(200); self.end_headers(); self.wfile.write(b)
    def log_message(self, *a): pass
s = http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H)
threading.Timer(4.0, s.shutdown).start(); s.serve_forever()
P
  sleep 4.5
fi
echo "result: env Pendulum-v1  steps 20000  updates 19000  episodes 100  final eval return -150.0 (best -140.0) over 10 episodes  wall 8.0 s  2400 updates/s  2500 steps/s  policy version 1  peak RSS 1.0 MiB"
S
  cat >"$b/sac-bench-dp" <<'S'
#!/usr/bin/env bash
rank=0 size=1 sk=0
while [ $# -gt 0 ]; do case $1 in --rank) rank=$2 ;; --size) size=$2 ;; --precision) [ "$2" = fp16 ] && sk=2 ;; esac; shift; done
echo "bench-dp-result rank=$rank size=$size collective=zmq backend=cuda updates=300 updates_per_s=900.0 allreduce_ms=0.4 allreduce_share=36% identical=1 hash=00ab skipped=$sk"
S
  cat >"$b/sac-bench-learner" <<'S'
#!/usr/bin/env bash
prec=fp32 graphs=true upl=1 prof=false depth=2 rec=false batch=256 preset=cheetah
while [ $# -gt 0 ]; do
  case $1 in --precision) prec=$2 ;; --graphs) graphs=$2 ;; --updates_per_launch) upl=$2 ;; --op_profile) prof=$2 ;;
    --depth) depth=$2 ;; --recompute) rec=$2 ;; --batch) batch=$2 ;; --preset) preset=$2 ;; esac
  shift
done
[ "$preset" = seed ] && depth=3
if [ "$prof" = true ]; then
  [ -n "${STUB_HANG:-}" ] && sleep 100
  echo "op-profile-result preset=cheetah backend=cuda precision=$prec batch=256 rows=19 ops_per_update=23.00 update_us=82.0 sum_us=70.0"
  echo "update-time-result preset=cheetah backend=cuda precision=$prec graphs=1 upl=$upl device_us=60.0 host_us=14.0"
fi
k=$((27 + 12 * (depth - 2))); [ "$prec" = fp16 ] && k=$((k + 9))
g=$([ "$graphs" = true ] && echo 1 || echo 0)
echo "bench-result preset=$preset backend=cuda precision=$prec graphs=$g recompute=$([ "$rec" = true ] && echo 1 || echo 0) batch=$batch hidden=256 depth=$depth updates_per_s=$((5000 * upl)).0 ms_per_update=0.2 peak_device_mib=40 graph_launches=$((g * 900)) loss_scale=1 skipped=0 degraded_gemms=0 kernels=$k blocking_per_update=0.000 critic_loss=1.2 actor_loss=-7.5 alpha_loss=-0.2 upl=$upl direct=0 host_copies_per_batch=2.00"
S
  cat >"$b/sac-bench-service" <<'S'
#!/usr/bin/env bash
echo "RESULT transport=inproc shards=2 sampler=uniform actors=0 updates_per_s=30000.0"
S
  cat >"$1/python3" <<'S'
#!/usr/bin/env bash
prec=fp32
while [ $# -gt 0 ]; do [ "$1" = --precision ] && prec=$2; shift; done
echo "peer-result mode=jax-scan precision=$prec batch=256 hidden=256x2 updates_per_s=2900.0 us_per_update=344.8 runs=1 finite=1"
S
  chmod +x "$b"/* "$1/python3"
  : >"$1/lib/sacfleet/libsacfleet-cuda.so"
}

# dry_run NAME STATUS PATTERN [ENV=VALUE ...]: the whole check (OUT, bundle and peers
# python in a temp dir) exits STATUS with PATTERN in its output
dry_run() {
  local name=$1 want=$2 pat=$3 d out rc
  shift 3
  cases=$((cases + 1))
  d=$T/dry_$cases
  mkdir -p "$d/bundle" "$d/out"
  stubs "$d/stage"
  tar -C "$d/stage" -czf "$d/bundle/bundle.tar.gz" bin lib
  echo "stub bundle" >"$d/bundle/MANIFEST"
  (cd "$ROOT" && bash "$SCRIPT" --tree-hash) >"$d/bundle/TREE"
  case " $* " in *" STUB_STALE=1 "*) echo 0000stale >"$d/bundle/TREE" ;; esac # built from another tree
  out=$(cd "$ROOT" && env -u GPU_CHECK_SOURCE_ONLY STUB_ROOT="$ROOT" OUT="$d/out" GPU_CHECK_USE_BUNDLE=1 \
    GPU_CHECK_BUNDLE_DIR="$d/bundle" GPU_CHECK_PEERS_PYTHON="$d/stage/python3" "$@" bash "$SCRIPT" 2>&1)
  rc=$?
  DRY_DIR=$d
  if [ "$rc" != "$want" ] || ! grep -Eq -- "$pat" <<<"$out"; then
    echo "FAIL dry run, $name: exit $rc (expected $want), pattern '$pat'; output:"
    printf '%s\n' "$out" | tail -40 | sed 's/^/    /'
    fails=$((fails + 1))
  else
    echo "ok   dry run, $name: $(grep -E -m 1 -- "$pat" <<<"$out")"
  fi
}

dry_run "every stage on stubs passes" 0 "^VERDICT: PASS$" GPU_CHECK_BUDGET=120
cases=$((cases + 1))
members=$(tar -tzf "$DRY_DIR/out/gpu_check_results.tgz" 2>/dev/null | sed 's|^gpu_check_results/||' | sort | tr '\n' ' ')
missing=""
for m in gpu_check.log tests.log pendulum.log tree stages results profile/cheetah-b256-bf16.out \
  profile/cheetah-b256-bf16-k8.out peers/fp32.out peers/bf16.out service/learner.out service/metrics.txt \
  service/ceiling.out dp/zmq-2-ranks-gpu0.out; do
  grep -q " $m \|^$m " <<<" $members" || missing="$missing $m"
done
if [ -z "$missing" ]; then
  echo "ok   dry run: the results tarball holds every stage's output"
else
  echo "FAIL dry run: the results tarball lacks:$missing (it holds: $members)"
  fails=$((fails + 1))
fi
dry_run "a stale bundle is refused, nothing run" 3 "^REFUSED: " GPU_CHECK_BUDGET=60 STUB_STALE=1
dry_run "a hanging stage is cut at its budget" 1 "^FAIL stage profile: ran into its budget" GPU_CHECK_BUDGET=12 STUB_HANG=1

echo "$cases cases, $fails failed"
[ "$fails" -eq 0 ]
