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
#       are installed (else uses build-gpu-bundle/), runs the GPU tests, the learner
#       benchmark (cheetah and seed, batch 256 and 1024, fp32 / bf16 / fp16, graph and
#       eager, 8 x 512 with and without activation recomputation), a Pendulum training run
#       on cuda, and prints a summary table last. Before the benchmark: the data-parallel
#       check (sac-bench-dp, issue 9): the nccl collective with one rank, two ranks on two
#       GPUs where there are two, and two zmq ranks sharing GPU 0; 1,000 updates each, the
#       ranks' weights compared bit for bit, updates/s and the all-reduce share per rank;
#       and the fp16 data-parallel case with one rank (issue 16). Issue 16's checks are
#       GPU tests (a whole Pendulum update with A = 1, policy_delay 2 under graphs, graph
#       replay equal to eager in bf16 and fp16, the fused Adam + Polyak kernel) listed one
#       by one in the summary, with kernels per update and degraded_gemms from the
#       benchmark and updates/s per precision. A failed step is reported and the rest
#       still run. Everything printed also goes to $OUT/gpu_check.log when $OUT is set,
#       and the benchmark lines to $OUT/gpu_check_results.txt.
#
# Budget: GPU_CHECK_BUDGET seconds (default 420); steps that would start after it are
# skipped and say so. GPU_CHECK_USE_BUNDLE=1 skips the native build attempt. Exit status:
# 0 when the tests passed and every benchmark ran.
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 2

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

if [ "${1:-}" = "--bundle" ]; then
  bundle "${2:-build-gpu-bundle}"
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

  # --- GPU tests
  if [ -n "$BIN" ]; then
    echo "== GPU tests: test_backend_cuda"
    env LD_LIBRARY_PATH="$LDP" timeout 240 "$BIN/test_backend_cuda" --jobs 1 --verbose 2>&1 | tee "$RES/tests.log" | grep -v ' INFO  cuda: device'
    echo "test exit status ${PIPESTATUS[0]}" | tee -a "$RES/tests.log"
  fi

  # --- data-parallel learners (issue 9): the nccl collective, bit-identical weights (before the
  # long benchmark, so the budget does not skip it)
  if [ -n "$BIN" ] && [ -x "$BIN/sac-bench-dp" ]; then
    # run_dp LABEL N DEVICE_OF_RANK... -- ARGS: N ranks of sac-bench-dp as processes, rank r
    # (LABEL without blanks)
    # on the given device; their result lines go to $RES/dp_results, the check to notes
    run_dp() {
      local label=$1 n=$2 r port pids=() devs=()
      shift 2
      while [ "$1" != -- ]; do devs+=("$1"); shift; done
      shift
      if ! time_left 90; then
        note "skipped (budget): data-parallel $label"
        return
      fi
      port=$((29000 + RANDOM % 2000))
      echo "-- data-parallel $label: $n rank(s), sac-bench-dp $*"
      for ((r = 0; r < n; r++)); do
        env LD_LIBRARY_PATH="$LDP" timeout 90 "$BIN/sac-bench-dp" --rank "$r" --size "$n" --device "${devs[$r]}" \
          --coord "tcp://127.0.0.1:$port" --updates 1000 --warmup 20 "$@" >"$RES/dp_$r.out" 2>&1 &
        pids+=($!)
      done
      local st=0
      for ((r = 0; r < n; r++)); do wait "${pids[$r]}" || st=1; done
      cat "$RES"/dp_*.out | grep -v ' INFO ' | tail -20
      grep -h '^bench-dp-result ' "$RES"/dp_*.out | sed "s#^bench-dp-result #bench-dp-result label=$label #" >>"$RES/dp_results"
      local hashes
      hashes=$(grep -ho 'hash=[0-9a-f]*' "$RES"/dp_*.out | sort -u | wc -l)
      if [ $st -ne 0 ] || [ "$(grep -c '^bench-dp-result ' "$RES"/dp_*.out | awk -F: '{s += $NF} END {print s}')" -ne "$n" ] ||
        [ "$hashes" -ne 1 ]; then
        note "data-parallel failed (status $st, $hashes distinct weight hashes): $label"
      fi
      rm -f "$RES"/dp_*.out
    }
    echo "== data-parallel: sac-bench-dp (nccl, and zmq through the host)"
    run_dp nccl/1-rank 1 0 -- --backend cuda --collective nccl
    # issue 16: fp16 with the overflow decision all-reduced and rank 0's scale handed out
    run_dp nccl-fp16/1-rank 1 0 -- --backend cuda --collective nccl --precision fp16
    local ngpu
    ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
    if [ "$ngpu" -ge 2 ]; then
      run_dp nccl/2-ranks-2-gpus 2 0 1 -- --backend cuda --collective nccl
    else
      note "data-parallel: nccl with 2 ranks skipped ($ngpu GPU: NCCL refuses two ranks on one device)"
    fi
    run_dp zmq/2-ranks-gpu0 2 0 0 -- --backend cuda --collective zmq
  fi

  # --- benchmark
  if [ -n "$BIN" ]; then
    echo "== benchmark: sac-bench-learner --backend cuda"
    local preset batch prec graphs updates
    run_bench() { # label, timeout, args...
      local label=$1 to=$2
      shift 2
      if ! time_left "$to"; then
        note "skipped (budget): $label"
        return
      fi
      echo "-- $label: sac-bench-learner $*"
      env LD_LIBRARY_PATH="$LDP" timeout "$to" "$BIN/sac-bench-learner" --backend cuda --peer false "$@" \
        >"$RES/bench.out" 2>&1
      local st=$?
      cat "$RES/bench.out"
      if grep -q '^bench-result ' "$RES/bench.out"; then
        grep '^bench-result ' "$RES/bench.out" | sed "s/^bench-result /bench-result label=$label /" >>"$RES/results"
        # issue 16: kernels per update (cuda's own launch count) and degraded GEMMs, per run
        local kern deg
        kern=$(grep -a '^| cuda launches per update' "$RES/bench.out" | awk -F'|' '{gsub(/ /, "", $3); print $3}')
        deg=$(grep -a '^| backend degraded_gemms ' "$RES/bench.out" | awk -F'|' '{gsub(/ /, "", $3); print $3}')
        echo "$label ${kern:-?} ${deg:-?}" >>"$RES/kernels"
      else
        note "benchmark failed (status $st): $label"
      fi
    }
    for preset in cheetah seed; do
      for batch in 256 1024; do
        for prec in fp32 bf16 fp16; do
          for graphs in true false; do
            updates=3000
            [ "$graphs" = false ] && updates=1000
            run_bench "$preset/b$batch/$prec/graphs=$graphs" 60 --preset "$preset" --batch "$batch" \
              --precision "$prec" --graphs "$graphs" --profile false --runs 3 --warmup 30 --updates "$updates"
          done
        done
      done
    done
    # where an eager update's time goes (the profile synchronises between phases)
    run_bench "cheetah/b256/fp32/profiled" 60 --preset cheetah --precision fp32 --profile true --runs 3 \
      --warmup 30 --updates 500
    # activation recomputation at 8 x 512
    for rc in false true; do
      run_bench "8x512/b256/bf16/recompute=$rc" 90 --preset cheetah --hidden 512 --depth 8 --precision bf16 \
        --graphs true --profile false --recompute "$rc" --runs 3 --warmup 20 --updates 1000
    done
  fi

  # --- Pendulum on the cuda backend (the issue's evaluation bar: >= -200)
  if [ -n "$BIN" ] && [ -x "$BIN/sac-learner" ]; then
    if time_left 150; then
      echo "== Pendulum-v1 on cuda: sac-learner --mode local --backend cuda --total_steps 20000"
      env LD_LIBRARY_PATH="$LDP" timeout 150 "$BIN/sac-learner" --mode local --backend cuda --env Pendulum-v1 --total_steps 20000 \
        --eval_interval 0 --log_interval 5000 --seed 1 2>&1 | tee "$RES/pendulum.log" | tail -8
    else
      note "skipped (budget): Pendulum training"
    fi
  fi

  summary
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
    echo "| GPU tests (test_backend_cuda) | ${syn:-no synthesis line} ; skipped $skips ; exit $status |"
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
  echo "| benchmark run | kernels per update, eager (fused / unfused) | degraded_gemms |"
  echo "| --- | --- | --- |"
  if [ -f "$RES/kernels" ]; then
    awk '{printf "| %s | %s | %s |\n", $1, $2, $3}' "$RES/kernels"
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
  status=$?
  [ -f "$RES/results" ] && cp "$RES/results" "$OUT/gpu_check_results.txt"
  [ -f "$RES/dp_results" ] && cp "$RES/dp_results" "$OUT/gpu_check_dp_results.txt"
else
  main 2>&1
  status=$?
fi
# 0 only when the tests passed and no benchmark failed
if [ -f "$RES/tests.log" ] && grep -q 'test exit status 0' "$RES/tests.log" &&
  ! grep -q 'benchmark failed\|data-parallel failed' "$RES/notes" 2>/dev/null; then
  status=0
else
  status=1
fi
rm -rf "$RES"
exit $status
