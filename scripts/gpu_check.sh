#!/usr/bin/env bash
# The one prepared GPU check of the cuda learner backend (issue 6, docs/CUDA.md).
#
#   scripts/gpu_check.sh --bundle [DIR]
#       On the build machine (no GPU needed): a Release build with CUDA of only the
#       needed targets, packed with the shared libraries they need (not glibc, not the
#       CUDA driver or cuBLAS, which the GPU machine has) into DIR (default
#       build-gpu-bundle/, ignored by git: carry it to the GPU machine).
#   scripts/gpu_check.sh
#       On the GPU machine: prints the card, builds there when the project's libraries
#       are installed (else uses build-gpu-bundle/), then, in this order (the gates
#       first, so the budget never skips them): the GPU tests (test_backend_cuda); a
#       Pendulum-v1 training run on cuda (the gate: eval return >= -200 at 20k steps);
#       the data-parallel checks (sac-bench-dp): two zmq ranks on the one GPU in fp16
#       with rank 1's rewards of one update spiked so its gradient overflows there alone
#       (the overflow decision is shared: both ranks skip, their parameter hashes must be
#       equal), two fp32 zmq ranks, the nccl collective with one rank (two ranks on two
#       GPUs where there are two); then the learner benchmark (cheetah and seed, fp32 /
#       bf16 / fp16, graph and eager, 8 x 512 with and without activation recomputation);
#       then, where ncu is found, scripts/gpu_kernels.sh (time per kernel, a note). A
#       summary table comes last. Everything printed also goes to $OUT/gpu_check.log when
#       $OUT is set, the result files to $OUT/gpu_check_results.tgz (one file: a device
#       machine returns few; unpacked, the input of `--verdict DIR`).
#   scripts/gpu_check.sh --verdict DIR
#       The decision alone, over a results directory (recorded outputs; the self-test
#       tests/test_gpu_check.sh feeds it good and planted-bad ones on a CPU machine).
#
# The decision (verdict): it fails when any GPU test skipped or failed, fewer [PASS]
# lines appear than the test file has tests, the test binary's exit status is not 0;
# when a data-parallel run lacks a rank's result, a rank exited non-zero, the ranks'
# parameter hashes differ or a rank reports identical=0, or (the fp16 overflow run) a
# rank skipped no step; when a benchmark line has a non-finite loss, graphs on but no
# graph launched (a capture that failed and fell back to eager), degraded_gemms not 0,
# more launches per update than the bound (check_bench_line) or, unprofiled, a blocking
# sync per update; when Pendulum ends below -200 or did not run. A benchmark skipped for
# the budget is a note, not a failure; a gate skipped for it is a failure.
#
# Budget: GPU_CHECK_BUDGET seconds (default 420); steps that would start after it are
# skipped and say so. GPU_CHECK_USE_BUNDLE=1 skips the native build attempt. Exit status
# 0 only when the verdict passes.
set -u -o pipefail
# sourced by the self-test for its functions (GPU_CHECK_SOURCE_ONLY): no cd, nothing run
[ -n "${GPU_CHECK_SOURCE_ONLY:-}" ] || cd "$(dirname "$0")/.." || exit 2
# the return bar every training test uses: a finite number at or above it
# shellcheck source=scripts/lib_return.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib_return.sh" || exit 2

bundle() {
  local dir=${1:-build-gpu-bundle} bdir=build-gpu-release
  cmake -S . -B "$bdir" -DCMAKE_BUILD_TYPE=Release -DSAC_WITH_CUDA=ON -DSAC_CUDA_ARCHITECTURES="80;90" >/dev/null ||
    return 1
  cmake --build "$bdir" -j"$(nproc)" --target test_backend_cuda sac-bench-learner sacfleet-cuda || return 1
  cmake --build "$bdir" -j"$(nproc)" --target sac-learner || echo "bundle: sac-learner did not build (skipped)"
  cmake --build "$bdir" -j"$(nproc)" --target sac-bench-dp || echo "bundle: sac-bench-dp did not build (skipped)"
  local stage
  stage=$(mktemp -d /tmp/gpu_bundle.XXXXXX) || return 1
  mkdir -p "$stage/bin" "$stage/lib/sacfleet" || return 1
  # the CUDA module, where the binaries look for it (<bin>/../lib/sacfleet, learner/cuda_module.h)
  cp "$bdir/lib/sacfleet/libsacfleet-cuda.so" "$stage/lib/sacfleet/" || return 1
  local bins=("$bdir/tests/test_backend_cuda" "$bdir/bench/sac-bench-learner")
  [ -x "$bdir/learner/sac-learner" ] && bins+=("$bdir/learner/sac-learner")
  [ -x "$bdir/bench/sac-bench-dp" ] && bins+=("$bdir/bench/sac-bench-dp")
  cp "${bins[@]}" "$stage/bin/" || return 1
  # every shared library but the C library family, the compiler runtime and CUDA's
  # (the GPU machine has newer ones of those; ours would shadow them)
  local skip='/(libc|libm|libpthread|libdl|librt|libresolv|libutil|libnsl|ld-linux[^/]*|libgcc_s|libstdc\+\+|libcuda|libcublas[^/]*|libnvidia[^/]*)\.so'
  for b in "${bins[@]}" "$bdir/lib/sacfleet/libsacfleet-cuda.so"; do
    ldd "$b" | awk '/=> \// {print $3}'
  done | sort -u | grep -Ev "$skip" | while read -r lib; do cp -L "$lib" "$stage/lib/"; done
  # glibc symbol versions the bundle needs, so the GPU machine can say if it is too old
  local need
  need=$(for f in "$stage"/bin/* "$stage"/lib/*; do objdump -T "$f" 2>/dev/null; done | grep -o 'GLIBC_[0-9.]*' |
    sort -uV | tail -1)
  {
    echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) from $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo +changes)"
    # shellcheck source=/dev/null
    echo "build machine: $(. /etc/os-release && echo "$PRETTY_NAME"), $(ldd --version | head -1)"
    echo "nvcc: $(nvcc --version | tail -1)"
    echo "needs: ${need:-unknown}"
  } >"$stage/MANIFEST"
  # one compressed file keeps what travels to the GPU machine small
  rm -rf "$dir" && mkdir -p "$dir" && cp "$stage/MANIFEST" "$dir/" &&
    tar -C "$stage" -czf "$dir/bundle.tar.gz" . || return 1
  rm -rf "$stage"
  cat "$dir/MANIFEST"
  du -sh "$dir"
}


# ------------------------------------------------------------------------------------
# The checks: functions over files, each printing "FAIL <what>: <why>" for every failure
# it finds and returning 1 if there was one. The self-test (tests/test_gpu_check.sh)
# sources this script with GPU_CHECK_SOURCE_ONLY=1 and feeds them recorded outputs.

# check_tests LOG EXPECTED: the criterion --verbose log of test_backend_cuda, with the
# line "test exit status N" appended by the runner; EXPECTED [PASS] lines at least.
check_tests() {
  local log=$1 expected=$2 pass skip fail st bad=0
  case "$expected" in
    '' | *[!0-9]*)
      echo "FAIL GPU tests: no expected test count ('$expected')"
      return 1
      ;;
  esac
  if [ ! -s "$log" ]; then
    echo "FAIL GPU tests: no log (not run)"
    return 1
  fi
  pass=$(grep -ac '^\[PASS\] ' "$log")
  skip=$(grep -ac '^\[SKIP\] ' "$log")
  fail=$(grep -ac '^\[FAIL\] \|CRASH' "$log")
  st=$(grep -a '^test exit status ' "$log" | tail -1 | awk '{print $4}')
  if [ "$skip" -ne 0 ]; then
    echo "FAIL GPU tests: $skip skipped ($(grep -a '^\[SKIP\] ' "$log" | head -3 | cut -c1-120 | tr '\n' ' '))"
    bad=1
  fi
  if [ "$fail" -ne 0 ]; then
    echo "FAIL GPU tests: $fail failed ($(grep -a '^\[FAIL\] ' "$log" | head -3 | cut -c1-120 | tr '\n' ' '))"
    bad=1
  fi
  if [ "$pass" -lt "$expected" ]; then
    echo "FAIL GPU tests: $pass [PASS] lines, $expected expected"
    bad=1
  fi
  if [ "${st:-none}" != 0 ]; then
    echo "FAIL GPU tests: exit status ${st:-missing}"
    bad=1
  fi
  return $bad
}

# check_dp OUT N MIN_SKIPPED: the combined output of one data-parallel run of N ranks
# (their "bench-dp-result" lines and a "rank R exit status S" line each); MIN_SKIPPED > 0:
# every rank must report at least that many skipped fp16 steps (the forced overflow).
check_dp() {
  local out=$1 n=$2 min_skip=$3 got hashes bad=0 label
  label=$(basename "$out" .out)
  if [ ! -s "$out" ]; then
    echo "FAIL data-parallel $label: no output (not run)"
    return 1
  fi
  got=$(grep -ac '^bench-dp-result ' "$out")
  if [ "$got" -ne "$n" ]; then
    echo "FAIL data-parallel $label: $got rank results, $n expected"
    bad=1
  fi
  if grep -aq '^rank [0-9]* exit status [1-9]' "$out"; then
    echo "FAIL data-parallel $label: $(grep -a '^rank [0-9]* exit status [1-9]' "$out" | tr '\n' ' ')"
    bad=1
  fi
  hashes=$(grep -a '^bench-dp-result ' "$out" | grep -o 'hash=[0-9a-f]*' | sort -u | wc -l)
  if [ "$got" -gt 0 ] && [ "$hashes" -ne 1 ]; then
    echo "FAIL data-parallel $label: $hashes distinct parameter hashes"
    bad=1
  fi
  # one grep: under pipefail, grep -q quitting at its match could fail a pipeline on the
  # first grep's SIGPIPE and hide the rank that disagrees
  if grep -aq '^bench-dp-result .* identical=0' "$out"; then
    echo "FAIL data-parallel $label: a rank reports identical=0"
    bad=1
  fi
  if [ "$min_skip" -gt 0 ]; then
    local low
    low=$(grep -a '^bench-dp-result ' "$out" | awk -v m="$min_skip" '{
      s = -1; for (i = 1; i <= NF; i++) if ($i ~ /^skipped=/) s = substr($i, 9) + 0;
      if (s < m) print }' | wc -l)
    if [ "$low" -ne 0 ]; then
      echo "FAIL data-parallel $label: $low rank(s) skipped fewer than $min_skip steps (the forced overflow was not shared)"
      bad=1
    fi
  fi
  return $bad
}

# kernel_bound PRECISION DEPTH: launches per update (kernels + matmuls, eager, fused) the
# cuda backend may make: the cpu backend's count of the same calls (tests/test_sac.c:
# 27 at depth 2, each further hidden layer 12 more), fp16 9 more (the overflow checks
# before each Adam step, the unfused Adam tails, the scaler update, and the overflow
# check of the gradient that the hidden layer under each fused last layer receives).
kernel_bound() {
  local extra=0
  [ "$1" = fp16 ] && extra=9
  echo $((27 + 12 * ($2 - 2) + extra))
}

# check_bench_line LINE: one "bench-result label=... " line of sac-bench-learner.
check_bench_line() {
  local line=$1
  local out
  out=$(printf '%s\n' "$line" | awk '
    function num(x) { return x ~ /^-?[0-9.]+(e[-+]?[0-9]+)?$/ }
    {
      for (i = 2; i <= NF; i++) { k = $i; sub(/=.*/, "", k); v = $i; sub(/^[^=]*=/, "", v); f[k] = v }
      what = f["label"] != "" ? f["label"] : "bench line";
      for (j = 1; j <= 3; j++) {
        n = j == 1 ? "critic_loss" : (j == 2 ? "actor_loss" : "alpha_loss");
        if (!(n in f) || !num(f[n])) printf "FAIL benchmark %s: %s %s (not finite)\n", what, n, f[n];
      }
      if (!num(f["updates_per_s"]) || f["updates_per_s"] + 0 <= 0) printf "FAIL benchmark %s: updates_per_s %s\n", what, f["updates_per_s"];
      if (f["graphs"] + 0 == 1 && (!num(f["graph_launches"]) || f["graph_launches"] + 0 <= 0))
        printf "FAIL benchmark %s: graphs on but graph_launches %s (capture failed, ran eager)\n", what, f["graph_launches"];
      if (!num(f["degraded_gemms"]) || f["degraded_gemms"] + 0 != 0) printf "FAIL benchmark %s: degraded_gemms %s\n", what, f["degraded_gemms"];
      if (f["recompute"] + 0 != 1) {
        bound = 27 + 12 * (f["depth"] - 2) + (f["precision"] == "fp16" ? 9 : 0); # = kernel_bound
        if (!num(f["kernels"]) || f["kernels"] + 0 > bound) printf "FAIL benchmark %s: %s launches per update, bound %d\n", what, f["kernels"], bound;
      }
      if (what !~ /profiled/ && (!num(f["blocking_per_update"]) || f["blocking_per_update"] + 0 != 0))
        printf "FAIL benchmark %s: %s blocking syncs per update\n", what, f["blocking_per_update"];
    }')
  [ -z "$out" ] && return 0
  printf '%s\n' "$out"
  return 1
}

# check_pendulum LOG: sac-learner --mode local's output; its final eval return a finite
# number >= -200 (scripts/lib_return.sh).
check_pendulum() {
  local log=$1 line
  line=$(grep -a '^result: ' "$log" 2>/dev/null | tail -1)
  if [ -z "$line" ]; then
    echo "FAIL Pendulum: no result line (not run, or it did not finish)"
    return 1
  fi
  if ! return_check "$line" -200; then
    echo "FAIL Pendulum: $RETURN_WHY"
    return 1
  fi
  return 0
}

# tag_label LABEL PREFIX: stdin's lines starting "PREFIX " with "label=LABEL " put after
# the prefix (a label holds '/', '=', '.': nothing of it is taken as a pattern).
tag_label() {
  awk -v label="$1" -v prefix="$2" 'index($0, prefix " ") == 1 {
    print prefix " label=" label substr($0, length(prefix) + 1) }'
}

# check_bench_runs DIR: every benchmark run that started (DIR/bench_runs, a label a line)
# has a result line in DIR/results.
check_bench_runs() {
  local d=$1 label bad=0
  [ -f "$d/bench_runs" ] || return 0
  while IFS= read -r label; do
    [ -n "$label" ] || continue
    if ! awk -v l="label=$label" '$2 == l { found = 1 } END { exit !found }' "$d/results" 2>/dev/null; then
      echo "FAIL benchmark $label: ran, but no result line was recorded"
      bad=1
    fi
  done <"$d/bench_runs"
  return $bad
}

# verdict DIR: every check over a results directory: tests.log and expected_pass,
# pendulum.log, dp/*.out with dp/*.spec ("N MIN_SKIPPED"), results (bench-result lines).
# The GPU tests, Pendulum and the data-parallel runs listed in dp/required are gates.
verdict() {
  local d=$1 bad=0 f line spec
  check_tests "$d/tests.log" "$(cat "$d/expected_pass" 2>/dev/null)" || bad=1
  check_pendulum "$d/pendulum.log" || bad=1
  if [ -f "$d/dp/required" ]; then
    while read -r f; do
      [ -n "$f" ] || continue
      spec=$(cat "$d/dp/$f.spec" 2>/dev/null || echo "2 0")
      # shellcheck disable=SC2086
      check_dp "$d/dp/$f.out" $spec || bad=1
    done <"$d/dp/required"
  fi
  for f in "$d"/dp/*.out; do
    [ -e "$f" ] || continue
    grep -qx "$(basename "$f" .out)" "$d/dp/required" 2>/dev/null && continue
    spec=$(cat "${f%.out}.spec" 2>/dev/null || echo "1 0")
    # shellcheck disable=SC2086
    check_dp "$f" $spec || bad=1
  done
  if [ -f "$d/results" ]; then
    while IFS= read -r line; do
      check_bench_line "$line" || bad=1
    done <"$d/results"
  fi
  check_bench_runs "$d" || bad=1
  if [ $bad -eq 0 ]; then
    echo "VERDICT: PASS"
  else
    echo "VERDICT: FAIL"
  fi
  return $bad
}

[ -n "${GPU_CHECK_SOURCE_ONLY:-}" ] && return 0

if [ "${1:-}" = "--bundle" ]; then
  bundle "${2:-build-gpu-bundle}"
  exit $?
fi
if [ "${1:-}" = "--verdict" ]; then
  verdict "${2:?--verdict DIR}"
  exit $?
fi

BUDGET=${GPU_CHECK_BUDGET:-420}
T0=$(date +%s)
RES=$(mktemp -d /tmp/gpu_check.XXXXXX)
elapsed() { echo $(($(date +%s) - T0)); }
# time_left SECONDS: is there room for a step of about that long?
time_left() { [ $(($(elapsed) + $1)) -le "$BUDGET" ]; }
note() { printf '%s\n' "$*" >>"$RES/notes"; }

main() {
  echo "== gpu_check: $(date -u +%Y-%m-%dT%H:%M:%SZ), budget ${BUDGET} s"
  export PATH="$PATH:/usr/local/cuda/bin"
  CARD=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
  echo "card: ${CARD:-none found (nvidia-smi)}"
  nvidia-smi 2>/dev/null | head -15
  echo "nvcc: $(nvcc --version 2>/dev/null | tail -1)"
  echo "glibc: $(ldd --version 2>/dev/null | head -1)"

  # --- binaries: built here when the project's libraries are installed, else the bundle
  BIN="" LIBPATH="" HOW="" LDP=""
  if [ -z "${GPU_CHECK_USE_BUNDLE:-}" ] && command -v cmake >/dev/null && command -v nvcc >/dev/null && command -v protoc-c >/dev/null &&
    pkg-config --exists libzmq libprotobuf-c libuv openblas 2>/dev/null && [ -f /usr/include/criterion/criterion.h ]; then
    echo "== build (native, Release, CUDA)"
    if cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DSAC_WITH_CUDA=ON -DSAC_CUDA_ARCHITECTURES=90 >/dev/null &&
      cmake --build build-gpu -j16 --target test_backend_cuda sac-bench-learner sacfleet-cuda; then
      cmake --build build-gpu -j16 --target sac-learner || note "sac-learner did not build"
      cmake --build build-gpu -j16 --target sac-bench-dp || note "sac-bench-dp did not build"
      mkdir -p "$RES/bin" "$RES/lib/sacfleet"
      cp build-gpu/lib/sacfleet/libsacfleet-cuda.so "$RES/lib/sacfleet/" # found from bin/ as ../lib/sacfleet
      cp build-gpu/tests/test_backend_cuda build-gpu/bench/sac-bench-learner "$RES/bin/"
      [ -x build-gpu/learner/sac-learner ] && cp build-gpu/learner/sac-learner "$RES/bin/"
      [ -x build-gpu/bench/sac-bench-dp ] && cp build-gpu/bench/sac-bench-dp "$RES/bin/"
      BIN="$RES/bin" HOW="native build"
    else
      note "native build failed"
    fi
  fi
  if [ -z "$BIN" ] && [ -f build-gpu-bundle/bundle.tar.gz ]; then
    echo "== using build-gpu-bundle: $(tr '\n' ';' <build-gpu-bundle/MANIFEST)"
    mkdir -p "$RES/bundle" && tar -C "$RES/bundle" -xzf build-gpu-bundle/bundle.tar.gz &&
      BIN="$RES/bundle/bin" HOW="bundle" LIBPATH="$RES/bundle/lib"
    [ -z "$BIN" ] && note "bundle did not unpack"
  fi
  if [ -z "$BIN" ]; then
    echo "no binaries: neither a native build nor build-gpu-bundle/ (run scripts/gpu_check.sh --bundle first)"
    HOW="none"
  fi
  # cuBLASLt and the CUDA runtime of this machine: toolkit, loader cache, or Python wheels
  local cudirs="" d f
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib $(ldconfig -p 2>/dev/null |
    awk '/libcublasLt\.so/ {print $NF}' | xargs -r -n1 dirname); do
    [ -e "$d/libcublasLt.so.13" ] && cudirs="$cudirs:$d"
  done
  if [ -z "$cudirs" ]; then
    for d in $(python3 -c 'import nvidia, os; print(" ".join(nvidia.__path__))' 2>/dev/null); do
      f=$(find "$d" -maxdepth 3 -name 'libcublasLt.so.13*' 2>/dev/null | head -1)
      [ -n "$f" ] && cudirs="$cudirs:$(dirname "$f")"
    done
  fi
  echo "cuBLASLt from: ${cudirs#:}"
  # NCCL (dlopen'ed by the nccl collective, so only the data-parallel step needs it)
  local nccldir=""
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib $(ldconfig -p 2>/dev/null |
    awk '/libnccl\.so\.2/ {print $NF}' | xargs -r -n1 dirname); do
    [ -e "$d/libnccl.so.2" ] && nccldir=$d && break
  done
  if [ -z "$nccldir" ]; then
    for d in $(python3 -c 'import nvidia, os; print(" ".join(nvidia.__path__))' 2>/dev/null); do
      f=$(find "$d" -maxdepth 3 -name 'libnccl.so.2' 2>/dev/null | head -1)
      [ -n "$f" ] && nccldir=$(dirname "$f") && break
    done
  fi
  echo "NCCL from: ${nccldir:-not found (the nccl steps will say so)}"
  [ -n "$nccldir" ] && cudirs="$cudirs:$nccldir"
  # only our binaries see the bundle's libraries (the tools of this machine keep theirs)
  LDP="${LIBPATH}${cudirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  LDP=${LDP#:}
  export SAC_LOG_LEVEL=info
  if [ -n "$BIN" ]; then
    local missing
    missing=$(env LD_LIBRARY_PATH="$LDP" ldd "$BIN"/* 2>&1 | grep 'not found' | sort -u)
    [ -n "$missing" ] && echo "missing libraries: $missing" && note "missing libraries: $(echo "$missing" | tr '\n' ' ')"
  fi

  # --- GPU tests (a gate): every test must PASS, none may skip
  mkdir -p "$RES/dp"
  # every test in the file runs in the binary (suites backend_cuda and backend_cuda_cpu);
  # no count (no source here) fails the verdict rather than expecting too few
  grep -c '^Test(' tests/test_backend_cuda.c >"$RES/expected_pass" 2>/dev/null || : >"$RES/expected_pass"
  if [ -n "$BIN" ]; then
    echo "== GPU tests: test_backend_cuda ($(cat "$RES/expected_pass") tests)"
    env LD_LIBRARY_PATH="$LDP" SAC_TEST_GPU_PRESENT=1 timeout 240 "$BIN/test_backend_cuda" --jobs 1 --verbose 2>&1 | tee "$RES/tests.log" | grep -v ' INFO  cuda: device'
    echo "test exit status ${PIPESTATUS[0]}" | tee -a "$RES/tests.log"
  fi

  # --- Pendulum on the cuda backend (a gate: >= -200 at 20k steps), before the benchmark
  if [ -n "$BIN" ] && [ -x "$BIN/sac-learner" ]; then
    if time_left 150; then
      echo "== Pendulum-v1 on cuda: sac-learner --mode local --backend cuda --total_steps 20000"
      env LD_LIBRARY_PATH="$LDP" timeout 150 "$BIN/sac-learner" --mode local --backend cuda --env Pendulum-v1 --total_steps 20000 \
        --eval_interval 0 --eval_episodes 10 --log_interval 5000 --seed 1 --metrics_port 0 \
        --lr 1e-3 2>&1 | tee "$RES/pendulum.log" | tail -8
    else
      note "skipped (budget): Pendulum training (a gate: the verdict fails)"
    fi
  fi

  # --- data-parallel learners (gates): equal parameter hashes across ranks
  if [ -n "$BIN" ] && [ -x "$BIN/sac-bench-dp" ]; then
    # run_dp LABEL N MIN_SKIPPED DEVICE_OF_RANK... -- ARGS [-- RANK1_ARGS]: N ranks of
    # sac-bench-dp; their outputs and exit statuses into $RES/dp/LABEL.out (check_dp)
    run_dp() {
      local label=$1 n=$2 min_skip=$3 r port pids=() devs=() extra=()
      shift 3
      while [ "$1" != -- ]; do devs+=("$1"); shift; done
      shift
      local args=()
      while [ $# -gt 0 ] && [ "$1" != -- ]; do args+=("$1"); shift; done
      [ "${1:-}" = -- ] && shift && extra=("$@")
      echo "$n $min_skip" >"$RES/dp/$label.spec"
      if ! time_left 90; then
        note "skipped (budget): data-parallel $label"
        return
      fi
      port=$((29000 + RANDOM % 2000))
      echo "-- data-parallel $label: $n rank(s), sac-bench-dp ${args[*]} (rank 1 also: ${extra[*]:-nothing})"
      for ((r = 0; r < n; r++)); do
        local mine=("${args[@]}")
        [ "$r" -eq 1 ] && mine+=("${extra[@]}")
        (
          env LD_LIBRARY_PATH="$LDP" timeout 90 "$BIN/sac-bench-dp" --rank "$r" --size "$n" --device "${devs[$r]}" \
            --coord "tcp://127.0.0.1:$port" --updates 1000 --warmup 20 "${mine[@]}" >"$RES/dp_$r.out" 2>&1
          echo "rank $r exit status $?" >>"$RES/dp_$r.out"
        ) &
        pids+=($!)
      done
      for ((r = 0; r < n; r++)); do wait "${pids[$r]}"; done
      cat "$RES"/dp_*.out | grep -v ' INFO ' | tail -20
      cat "$RES"/dp_*.out >"$RES/dp/$label.out"
      cat "$RES"/dp_*.out | tag_label "$label" bench-dp-result >>"$RES/dp_results"
      rm -f "$RES"/dp_*.out
    }
    echo "== data-parallel: sac-bench-dp (zmq through the host, nccl)"
    printf '%s\n' zmq-fp16-overflow-2-ranks-gpu0 zmq-2-ranks-gpu0 >"$RES/dp/required"
    # fp16 with rank 1's rewards of one update spiked (its scaled loss gradient overflows there
    # alone): both ranks must skip that step, and their states stay equal
    run_dp zmq-fp16-overflow-2-ranks-gpu0 2 1 0 0 -- --backend cuda --collective zmq --precision fp16 --updates 300 \
      -- --overflow_rank 1 --overflow_at 5
    run_dp zmq-2-ranks-gpu0 2 0 0 0 -- --backend cuda --collective zmq --updates 500
    run_dp nccl-1-rank 1 0 0 -- --backend cuda --collective nccl
    local ngpu
    ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
    if [ "$ngpu" -ge 2 ]; then
      run_dp nccl-2-ranks-2-gpus 2 0 0 1 -- --backend cuda --collective nccl
    else
      note "data-parallel: nccl with 2 ranks not run ($ngpu GPU: NCCL refuses two ranks on one device)"
    fi
  fi

  # --- benchmark: every line checked (check_bench_line)
  if [ -n "$BIN" ]; then
    echo "== benchmark: sac-bench-learner --backend cuda"
    local preset prec graphs updates
    run_bench() { # label, timeout, args...
      local label=$1 to=$2
      shift 2
      if ! time_left "$to"; then
        note "skipped (budget): $label"
        return
      fi
      echo "-- $label: sac-bench-learner $*"
      echo "$label" >>"$RES/bench_runs"
      env LD_LIBRARY_PATH="$LDP" timeout "$to" "$BIN/sac-bench-learner" --backend cuda --peer false "$@" \
        >"$RES/bench.out" 2>&1
      local st=$?
      cat "$RES/bench.out"
      if grep -q '^bench-result ' "$RES/bench.out"; then
        tag_label "$label" bench-result <"$RES/bench.out" >>"$RES/results"
      else
        echo "bench-result label=$label no_result_status=$st" >>"$RES/results" # fails check_bench_line
      fi
    }
    for preset in cheetah seed; do
      for prec in fp32 bf16 fp16; do
        for graphs in true false; do
          [ "$preset" = seed ] && [ "$graphs" = false ] && continue
          updates=3000
          [ "$graphs" = false ] && updates=1000
          run_bench "$preset/b256/$prec/graphs=$graphs" 60 --preset "$preset" --batch 256 \
            --precision "$prec" --graphs "$graphs" --profile false --runs 3 --warmup 30 --updates "$updates"
        done
      done
    done
    run_bench "cheetah/b1024/bf16/graphs=true" 60 --preset cheetah --batch 1024 --precision bf16 --graphs true \
      --profile false --runs 3 --warmup 30 --updates 3000
    # where an eager update's time goes (the profile synchronises between phases)
    run_bench "cheetah/b256/fp32/profiled" 60 --preset cheetah --precision fp32 --profile true --runs 3 \
      --warmup 30 --updates 500
    # activation recomputation at 8 x 512
    for rc in false true; do
      run_bench "8x512/b256/bf16/recompute=$rc" 90 --preset cheetah --hidden 512 --depth 8 --precision bf16 \
        --graphs true --profile false --recompute "$rc" --runs 3 --warmup 20 --updates 1000
    done
  fi

  # where an update's time goes, kernel by kernel (a note, not a gate; needs ncu)
  if [ -n "$BIN" ] && command -v ncu >/dev/null; then
    if time_left 150; then
      echo "== kernels: scripts/gpu_kernels.sh (Nsight Compute, two eager updates, cheetah bf16)"
      env LD_LIBRARY_PATH="$LDP" GPU_KERNELS_BIN="$BIN" timeout 150 bash scripts/gpu_kernels.sh "$RES/kernels" ||
        note "gpu_kernels.sh did not finish (exit $?)"
    else
      note "skipped (budget): gpu_kernels.sh"
    fi
  fi

  summary
  echo
  echo "== verdict"
  verdict "$RES"
}

summary() {
  echo
  echo "== summary ($(elapsed) s; binaries: $HOW; card: ${CARD:-unknown})"
  echo
  echo "| check | result |"
  echo "| --- | --- |"
  if [ -f "$RES/tests.log" ]; then
    local syn skips status
    syn=$(grep -a 'Synthesis' "$RES/tests.log" | tail -1 | sed 's/.*Synthesis: //; s/ | /, /g; s/ *$//')
    skips=$(grep -ac '^\[SKIP\]' "$RES/tests.log")
    status=$(grep -a 'test exit status' "$RES/tests.log" | awk '{print $4}')
    echo "| GPU tests (test_backend_cuda) | ${syn:-no synthesis line} ; skipped $skips ; exit $status ; [PASS] expected $(cat "$RES/expected_pass") |"
    grep -a '^\[FAIL\]\|^\[----\].*FAIL\|CRASH' "$RES/tests.log" | head -10 | sed 's/^/| failure | /; s/$/ |/'
  else
    echo "| GPU tests | not run |"
  fi
  if [ -f "$RES/pendulum.log" ]; then
    local ret
    ret=$(grep -ao 'final eval return [-0-9.]*' "$RES/pendulum.log" | awk '{print $4}')
    if [ -n "$ret" ]; then
      echo "| Pendulum-v1, cuda, 20k steps | eval return $ret ($(awk -v r="$ret" 'BEGIN{print (r >= -200) ? "meets" : "misses"}') the -200 bar) |"
    else
      echo "| Pendulum-v1, cuda, 20k steps | no result line |"
    fi
  fi
  if [ -f "$RES/tests.log" ]; then
    # issue 16's GPU checks, one row each (criterion --verbose prints [PASS] / [FAIL] suite::name)
    local t r
    for t in pendulum_odd_action_update_matches_cpu policy_delay_2_graph_replay_equals_eager \
      graph_replay_equals_eager_bf16 graph_replay_equals_eager_fp16 fused_adam_polyak_of_stepped_group_matches_cpu \
      fused_adam_groups_then_polyak_match_cpu fused_actor_alpha_loss_matches_cpu fused_actor_alpha_loss_scales_fp16 fused_normal2_matches_cpu; do
      r=$(grep -ao "\[\(PASS\|FAIL\|SKIP\)\] backend_cuda::$t" "$RES/tests.log" | head -1 | cut -d' ' -f1)
      echo "| issue 16: $t | ${r:-not run} |"
    done
  fi
  [ -f "$RES/notes" ] && sed 's/^/| note | /; s/$/ |/' "$RES/notes"
  echo
  echo "| preset | batch | precision | graph | updates/s | ms/update | peak device MiB | loss scale / skipped |"
  echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
  if [ -f "$RES/results" ]; then
    awk '{
      for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
      name = v["preset"]; if (v["depth"] != 2 && v["preset"] == "cheetah") name = v["depth"] "x" v["hidden"];
      if (v["recompute"] == 1) name = name " +recompute";
      ls = (v["precision"] == "fp16") ? v["loss_scale"] " / " v["skipped"] : "-";
      printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", name, v["batch"], v["precision"],
             v["graphs"] ? "yes" : "no", v["updates_per_s"], v["ms_per_update"], v["peak_device_mib"], ls
    }' "$RES/results"
  else
    echo "| (no benchmark results) | | | | | | | |"
  fi
  echo
  echo "targets (issue 6): cheetah, batch 256, bf16 with graphs >= 20000 updates/s; fp32 >= 5000 updates/s"
  echo
  echo "| benchmark run | launches per update, eager, fused | degraded_gemms |"
  echo "| --- | --- | --- |"
  if [ -f "$RES/results" ]; then
    awk '{ for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
      printf "| %s | %s | %s |\n", v["label"], v["kernels"], v["degraded_gemms"] }' "$RES/results"
  else
    echo "| (no benchmark results) | | |"
  fi
  echo
  echo "| data-parallel (cheetah shape, batch 256 per rank) | rank | updates/s | all-reduce ms/update | all-reduce share | bit-identical |"
  echo "| --- | --- | --- | --- | --- | --- |"
  if [ -f "$RES/dp_results" ]; then
    awk '{
      for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
      printf "| %s | %s | %s | %s | %s | %s |\n", v["label"], v["rank"], v["updates_per_s"], v["allreduce_ms"],
             v["allreduce_share"], v["identical"] ? "yes" : "NO"
    }' "$RES/dp_results"
  else
    echo "| (no data-parallel results) | | | | | |"
  fi
}

if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT"
  main 2>&1 | tee "$OUT/gpu_check.log"
  status=${PIPESTATUS[0]}
  rm -rf "$RES/bin" "$RES/lib" "$RES/bundle"
  mv "$RES" "$RES.d" && mkdir -p "$RES" && mv "$RES.d" "$RES/gpu_check_results" &&
    tar -C "$RES" -czf "$OUT/gpu_check_results.tgz" gpu_check_results
else
  main 2>&1
  status=$?
fi
rm -rf "$RES"
exit $status
