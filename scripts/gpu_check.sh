#!/usr/bin/env bash
# The one prepared GPU check of the cuda learner backend (docs/CUDA.md): everything a GPU
# loan is for, in one command of at most 8 minutes (GPU_CHECK_BUDGET, default 480 s).
#
#   scripts/gpu_check.sh --bundle [DIR]
#       On the build machine (no GPU needed): a Release build with CUDA of only the
#       needed targets, packed with the shared libraries they need (not glibc, not the
#       CUDA driver or cuBLAS, which the GPU machine has) into DIR (default
#       build-gpu-bundle/, ignored by git: carry it to the GPU machine). The bundle records
#       the hash of the source tree it was built from (tree_hash: every file under the
#       build's folders, as the working tree holds it, committed or not).
#   scripts/gpu_check.sh
#       On the GPU machine: prints the card; builds there when the project's libraries are
#       installed, else uses build-gpu-bundle/ and REFUSES it (exit 3, nothing run) when
#       its tree hash is not this checkout's: a stale bundle would measure old kernels.
#       Then, each stage with its own time budget (a hang costs that stage, not the loan):
#         1. the GPU tests (test_backend_cuda; a gate), then the kept gates: a Pendulum-v1
#            training on cuda (eval return >= -200 at 20k steps) and the data-parallel
#            checks (sac-bench-dp: fp16 overflow shared by two zmq ranks, two fp32 ranks,
#            nccl with one rank; two ranks on two GPUs where there are two);
#         2. the per-op profile (sac-bench-learner --op_profile: device time per op by
#            CUDA events, device and host microseconds per update);
#         3. the learner benchmarks (cheetah, batch 256, fp32 / bf16 / fp16, graphs on and
#            off, 1 and 8 updates per launch, in-place intake; batch 1024; 8 x 512);
#         4. the peers (bench/gpu_peers.py, PyTorch and JAX on the same card, cheetah shape,
#            fp32 and bf16);
#         5. the service (sac-learner, embedded default, --backend cuda, Pendulum-v1 at
#            --hidden 256: environment steps/s, updates/s and the learner's stage timers,
#            scraped from its /metrics; and sac-bench-service, the null-backend ceiling of
#            this machine's cores);
#         6. where ncu is found and time is left, scripts/gpu_kernels.sh (a note).
#       A summary (figures, ratio to the fastest peer) and the verdict come last. Everything
#       printed also goes to $OUT/gpu_check.log when $OUT is set, and the results directory
#       (the log included) to $OUT/gpu_check_results.tgz (one file: a device machine
#       returns few; unpacked, the input of `--verdict DIR` and of tests/data/).
#   scripts/gpu_check.sh --verdict DIR
#       The decision alone, over a results directory (recorded outputs; the self-test
#       tests/test_gpu_check.sh feeds it good and planted-bad ones on a CPU machine).
#   scripts/gpu_check.sh --tree-hash
#       Prints this checkout's tree hash.
#
# The decision (verdict) fails when: the binaries came from a bundle of another tree; any
# GPU test skipped or failed, fewer [PASS] lines appear than the test file has tests, or
# the test binary's exit status is not 0; a data-parallel run lacks a rank's result, a
# rank exited non-zero, the ranks' parameter hashes differ or a rank reports identical=0,
# or (the fp16 overflow run) a rank skipped no step; a benchmark line has a non-finite
# loss, graphs on but no graph launched, degraded_gemms not 0, more launches per update
# than the bound (check_bench_line) or, unprofiled, a blocking sync per update; Pendulum
# ends below -200 or did not run; the per-op profile table or the update times are
# missing or inconsistent (the rows longer than the update); a precision has no peer
# result; the service run left no result or no stage timers; a stage ran into its time
# budget. A benchmark skipped for the budget is a note; a gate skipped for it fails.
#
# GPU_CHECK_USE_BUNDLE=1 skips the native build attempt; GPU_CHECK_BUNDLE_DIR (default
# build-gpu-bundle) and GPU_CHECK_PEERS_PYTHON (default python3) are for the self-test's dry
# run on stub binaries. Exit status 0 only when the verdict passes; 3 when a stale bundle
# is refused.
set -u -o pipefail
# sourced by the self-test for its functions (GPU_CHECK_SOURCE_ONLY): no cd, nothing run
[ -n "${GPU_CHECK_SOURCE_ONLY:-}" ] || cd "$(dirname "$0")/.." || exit 2
# the return bar every training test uses: a finite number at or above it
# shellcheck source=scripts/lib_return.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib_return.sh" || exit 2

# The folders (and files) whose contents the binaries are built from and the check reads:
# the tree a bundle belongs to. tests/data is left out (the check's own results go there).
TREE_ROOTS="CMakeLists.txt cmake common replay learner actor envs proto bench scripts tests examples fuzz"

# tree_files: the files of TREE_ROOTS that travel with a checkout (tracked, or untracked
# and not ignored), sorted; from git where this is a git checkout, else from the folders
# (a copy of a working tree holds exactly those, plus what Python leaves behind).
tree_files() {
  # shellcheck disable=SC2086
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files -co --exclude-standard -- $TREE_ROOTS ':!tests/data'
  else
    find $TREE_ROOTS -path tests/data -prune -o -type f ! -name '*.pyc' ! -path '*/__pycache__/*' -print 2>/dev/null
  fi | LC_ALL=C sort
}

# tree_hash: sha256 over every tree file's path and content (not its mode or time), so a
# copy of the same working tree gives the same hash on any machine, with or without git.
tree_hash() {
  tree_files | while IFS= read -r f; do [ -f "$f" ] && printf '%s\0' "$f"; done |
    xargs -0 -r sha256sum -- | sha256sum | cut -c1-64
}

# check_tree BUNDLE_HASH CHECKOUT_HASH: the bundle was built from this checkout's tree.
check_tree() {
  if [ -z "$1" ] || [ -z "$2" ]; then
    echo "FAIL bundle: no tree hash recorded (bundle '${1:-none}', checkout '${2:-none}')"
    return 1
  fi
  if [ "$1" != "$2" ]; then
    echo "FAIL bundle: built from tree $1, this checkout is tree $2 (stale bundle refused: scripts/gpu_check.sh --bundle)"
    return 1
  fi
  return 0
}

bundle() {
  local dir=${1:-build-gpu-bundle} bdir=build-gpu-release tree
  tree=$(tree_hash) || return 1
  cmake -S . -B "$bdir" -DCMAKE_BUILD_TYPE=Release -DSAC_WITH_CUDA=ON -DSAC_CUDA_ARCHITECTURES="80;90" >/dev/null ||
    return 1
  cmake --build "$bdir" -j"$(nproc)" --target test_backend_cuda sac-bench-learner sacfleet-cuda || return 1
  cmake --build "$bdir" -j"$(nproc)" --target sac-learner || echo "bundle: sac-learner did not build (skipped)"
  cmake --build "$bdir" -j"$(nproc)" --target sac-bench-dp || echo "bundle: sac-bench-dp did not build (skipped)"
  cmake --build "$bdir" -j"$(nproc)" --target sac-bench-service || echo "bundle: sac-bench-service did not build (skipped)"
  local stage
  stage=$(mktemp -d /tmp/gpu_bundle.XXXXXX) || return 1
  mkdir -p "$stage/bin" "$stage/lib/sacfleet" || return 1
  # the CUDA module, where the binaries look for it (<bin>/../lib/sacfleet, learner/cuda_module.h)
  cp "$bdir/lib/sacfleet/libsacfleet-cuda.so" "$stage/lib/sacfleet/" || return 1
  local bins=("$bdir/tests/test_backend_cuda" "$bdir/bench/sac-bench-learner")
  [ -x "$bdir/learner/sac-learner" ] && bins+=("$bdir/learner/sac-learner")
  [ -x "$bdir/bench/sac-bench-dp" ] && bins+=("$bdir/bench/sac-bench-dp")
  [ -x "$bdir/bench/sac-bench-service" ] && bins+=("$bdir/bench/sac-bench-service")
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
    echo "tree: $tree"
  } >"$stage/MANIFEST"
  if [ "$(tree_hash)" != "$tree" ]; then # edited while it built: the binaries may be of either
    echo "bundle: the tree changed during the build; run --bundle again"
    return 1
  fi
  # one compressed file keeps what travels to the GPU machine small
  rm -rf "$dir" && mkdir -p "$dir" && cp "$stage/MANIFEST" "$dir/" && echo "$tree" >"$dir/TREE" &&
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

# check_profile OUT: one run of sac-bench-learner --op_profile (its output): the op table's
# result line (at least 5 rows, ops per update > 0, the rows' sum within the update's
# time) and the update times (device and host microseconds per update, finite, > 0).
check_profile() {
  local out=$1 label bad
  label=$(basename "$out" .out)
  if [ ! -s "$out" ]; then
    echo "FAIL profile $label: no output (not run)"
    return 1
  fi
  bad=$(awk -v label="$label" '
    function num(x) { return x ~ /^[0-9.]+(e[-+]?[0-9]+)?$/ }
    function kv(line,    i, k, v) { delete f; n = split(line, a, " ");
      for (i = 2; i <= n; i++) { k = a[i]; sub(/=.*/, "", k); v = a[i]; sub(/^[^=]*=/, "", v); f[k] = v } }
    /^op-profile-result / { kv($0); prof = 1;
      if (!num(f["rows"]) || f["rows"] + 0 < 5) print "FAIL profile " label ": op table of " f["rows"] " rows";
      if (!num(f["ops_per_update"]) || f["ops_per_update"] + 0 <= 0) print "FAIL profile " label ": ops per update " f["ops_per_update"];
      if (!num(f["update_us"]) || f["update_us"] + 0 <= 0) print "FAIL profile " label ": update_us " f["update_us"];
      else if (!num(f["sum_us"]) || f["sum_us"] + 0 > 1.001 * f["update_us"] + 0.01)
        print "FAIL profile " label ": the rows (" f["sum_us"] " us) exceed the update (" f["update_us"] " us)" }
    /^update-time-result / { kv($0); times = 1;
      if (!num(f["device_us"]) || f["device_us"] + 0 <= 0) print "FAIL profile " label ": device_us " f["device_us"];
      if (!num(f["host_us"]) || f["host_us"] + 0 <= 0) print "FAIL profile " label ": host_us " f["host_us"] }
    END { if (!prof) print "FAIL profile " label ": no op table (op-profile-result)";
          if (!times) print "FAIL profile " label ": no update times (update-time-result)" }' "$out")
  [ -z "$bad" ] && return 0
  printf '%s\n' "$bad"
  return 1
}

# check_peers OUT: one run of bench/gpu_peers.py: at least one peer-result line with a
# finite, positive updates/s (a mode that failed says so in a peer-failed line: a note).
check_peers() {
  local out=$1 label
  label=$(basename "$out" .out)
  if ! awk '/^peer-result / { for (i = 2; i <= NF; i++) if ($i ~ /^updates_per_s=/) { v = substr($i, 15);
        if (v ~ /^[0-9.]+$/ && v + 0 > 0) ok = 1 } } END { exit !ok }' "$out" 2>/dev/null; then
    if [ -s "$out" ]; then
      echo "FAIL peers $label: no peer result ($(grep -ac '^peer-failed' "$out") modes failed)"
    else
      echo "FAIL peers $label: no peer result (not run)"
    fi
    return 1
  fi
  return 0
}

# check_service DIR: the service on this machine: sac-learner's result line (embedded,
# cuda) with updates/s and steps/s, its stage timers (the last /metrics scrape), and the
# null-backend ceiling's RESULT lines.
check_service() {
  local d=$1 bad=0
  if ! grep -aq '^result: env .* updates/s .* steps/s' "$d/learner.out" 2>/dev/null; then
    echo "FAIL service: no result line from sac-learner --backend cuda (embedded)"
    bad=1
  fi
  if ! grep -aq '^sac_learner_stage_seconds_total{.*stage="update"' "$d/metrics.txt" 2>/dev/null; then
    echo "FAIL service: no stage timers (sac_learner_stage_seconds_total) scraped from its /metrics"
    bad=1
  fi
  if ! grep -aq '^RESULT ' "$d/ceiling.out" 2>/dev/null; then
    echo "FAIL service: no null-backend ceiling (sac-bench-service RESULT lines)"
    bad=1
  fi
  return $bad
}

# check_stages FILE: "NAME CAP ELAPSED STATUS" a stage; one that ran into its budget (its
# timeout, or as long as its cap) fails; a stage skipped for the budget is a note.
check_stages() {
  local f=$1 out
  [ -f "$f" ] || return 0
  out=$(awk '$4 != "skipped" && ($4 == 124 || $4 == 137 || $3 + 0 >= $2 + 0) {
    printf "FAIL stage %s: ran into its budget (%s s of %s, status %s)\n", $1, $3, $2, $4 }' "$f")
  [ -z "$out" ] && return 0
  printf '%s\n' "$out"
  return 1
}

# verdict DIR: every check over a results directory: tree ("bundle HASH", "checkout
# HASH"), tests.log and expected_pass, pendulum.log, dp/*.out with dp/*.spec ("N
# MIN_SKIPPED"), results (bench-result lines), profile/*.out (profile/required lists
# them), peers/fp32.out and peers/bf16.out, service/ (learner.out, metrics.txt,
# ceiling.out), stages. The GPU tests, Pendulum and the data-parallel runs listed in
# dp/required are gates.
verdict() {
  local d=$1 bad=0 f line spec
  check_tree "$(awk '$1 == "bundle" { print $2 }' "$d/tree" 2>/dev/null)" \
    "$(awk '$1 == "checkout" { print $2 }' "$d/tree" 2>/dev/null)" || bad=1
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
  for f in $(cat "$d/profile/required" 2>/dev/null || echo none); do
    check_profile "$d/profile/$f.out" || bad=1
  done
  for f in fp32 bf16; do
    check_peers "$d/peers/$f.out" || bad=1
  done
  check_service "$d/service" || bad=1
  check_stages "$d/stages" || bad=1
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
if [ "${1:-}" = "--tree-hash" ]; then
  tree_hash
  exit $?
fi

BUDGET=${GPU_CHECK_BUDGET:-480}
BUNDLE=${GPU_CHECK_BUNDLE_DIR:-build-gpu-bundle}
PEERS_PYTHON=${GPU_CHECK_PEERS_PYTHON:-python3}
T0=$(date +%s)
RES=$(mktemp -d /tmp/gpu_check.XXXXXX)
elapsed() { echo $(($(date +%s) - T0)); }
note() { printf '%s\n' "$*" >>"$RES/notes"; }

# Stages: stage_begin NAME CAP gives the stage CAP seconds (less where the whole budget
# has less left: the check never runs past BUDGET); within it, `left N` is the timeout
# for a command that may take N seconds (what is left of the stage, at most N), 0 when the
# stage's time is up; stage_end records "NAME CAP ELAPSED STATUS" in $RES/stages (STATUS:
# the last command's status, 124 when a command timed out; "skipped" when no time was left).
STAGE="" STAGE_T0=0 STAGE_END=0 STAGE_ST=0
stage_begin() {
  local cap=$2 rest=$((BUDGET - $(elapsed)))
  STAGE=$1 STAGE_CAP=$cap STAGE_T0=$(date +%s) STAGE_ST=0
  [ "$rest" -lt "$cap" ] && cap=$rest
  STAGE_END=$((STAGE_T0 + cap))
  if [ "$cap" -lt 5 ]; then
    echo "$STAGE $STAGE_CAP 0 skipped" >>"$RES/stages"
    note "skipped (budget): stage $STAGE"
    STAGE=""
    return 1
  fi
  echo "== stage $STAGE (at most ${cap} s; $(elapsed) s so far)"
  return 0
}
left() {
  local l=$((STAGE_END - $(date +%s)))
  [ "$l" -gt "$1" ] && l=$1
  [ "$l" -lt 1 ] && l=0
  echo "$l"
}
# run_t N CMD...: CMD under `timeout $(left N)` (not run, status 124, when nothing is left)
run_t() {
  local to
  to=$(left "$1")
  shift
  if [ "$to" -lt 1 ]; then
    note "skipped (stage $STAGE out of time): $*"
    STAGE_ST=124
    return 124
  fi
  timeout "$to" "$@"
  local st=$?
  [ $st -eq 124 ] && STAGE_ST=124 && note "timed out after ${to} s (stage $STAGE): $*"
  return $st
}
stage_end() {
  [ -n "$STAGE" ] && echo "$STAGE $STAGE_CAP $(($(date +%s) - STAGE_T0)) $STAGE_ST" >>"$RES/stages"
  STAGE=""
}

# --- binaries: built here when the project's libraries are installed, else the bundle
find_binaries() {
  BIN="" LIBPATH="" HOW=""
  local here
  here=$(tree_hash)
  if [ -z "${GPU_CHECK_USE_BUNDLE:-}" ] && command -v cmake >/dev/null && command -v nvcc >/dev/null && command -v protoc-c >/dev/null &&
    pkg-config --exists libzmq libprotobuf-c libuv openblas 2>/dev/null && [ -f /usr/include/criterion/criterion.h ]; then
    echo "== build (native, Release, CUDA)"
    local t
    if cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DSAC_WITH_CUDA=ON -DSAC_CUDA_ARCHITECTURES=90 >/dev/null &&
      timeout 300 cmake --build build-gpu -j16 --target test_backend_cuda sac-bench-learner sacfleet-cuda; then
      for t in sac-learner sac-bench-dp sac-bench-service; do
        timeout 120 cmake --build build-gpu -j16 --target $t || note "$t did not build"
      done
      mkdir -p "$RES/bin" "$RES/lib/sacfleet"
      cp build-gpu/lib/sacfleet/libsacfleet-cuda.so "$RES/lib/sacfleet/" # found from bin/ as ../lib/sacfleet
      cp build-gpu/tests/test_backend_cuda build-gpu/bench/sac-bench-learner "$RES/bin/"
      for t in learner/sac-learner bench/sac-bench-dp bench/sac-bench-service; do
        [ -x "build-gpu/$t" ] && cp "build-gpu/$t" "$RES/bin/"
      done
      BIN="$RES/bin" HOW="native build"
      printf 'bundle %s\ncheckout %s\n' "$here" "$here" >"$RES/tree"
    else
      note "native build failed"
    fi
  fi
  if [ -z "$BIN" ] && [ -f "$BUNDLE/bundle.tar.gz" ]; then
    local built
    built=$(cat "$BUNDLE/TREE" 2>/dev/null)
    printf 'bundle %s\ncheckout %s\n' "${built:-none}" "$here" >"$RES/tree"
    echo "== bundle: $(tr '\n' ';' <"$BUNDLE/MANIFEST")"
    if ! check_tree "$built" "$here"; then
      REFUSED=1
      return 1
    fi
    mkdir -p "$RES/bundle" && tar -C "$RES/bundle" -xzf "$BUNDLE/bundle.tar.gz" &&
      BIN="$RES/bundle/bin" HOW="bundle of tree ${built:0:12}" LIBPATH="$RES/bundle/lib"
    [ -z "$BIN" ] && note "bundle did not unpack"
  fi
  if [ -z "$BIN" ]; then
    echo "no binaries: neither a native build nor build-gpu-bundle/ (run scripts/gpu_check.sh --bundle first)"
    HOW="none"
  fi
  return 0
}

# --- this machine's cuBLASLt, CUDA runtime and NCCL: toolkit, loader cache, or Python wheels
find_libraries() {
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
  if [ -n "$BIN" ]; then
    local missing
    missing=$(env LD_LIBRARY_PATH="$LDP" ldd "$BIN"/* 2>&1 | grep 'not found' | sort -u)
    [ -n "$missing" ] && echo "missing libraries: $missing" && note "missing libraries: $(echo "$missing" | tr '\n' ' ')"
  fi
}

# --- stage 1: the gates
stage_gates() {
  # every test in the file runs in the binary (suites backend_cuda and backend_cuda_cpu);
  # no count (no source here) fails the verdict rather than expecting too few
  grep -c '^Test(' tests/test_backend_cuda.c >"$RES/expected_pass" 2>/dev/null || : >"$RES/expected_pass"
  echo "-- GPU tests: test_backend_cuda ($(cat "$RES/expected_pass") tests)"
  run_t 170 env LD_LIBRARY_PATH="$LDP" SAC_TEST_GPU_PRESENT=1 "$BIN/test_backend_cuda" --jobs 1 --verbose 2>&1 |
    tee "$RES/tests.log" | grep -av ' INFO  cuda: device' | grep -a '^\[FAIL\]\|^\[SKIP\]\|Synthesis\|^  .*FAIL'
  local st=${PIPESTATUS[0]}
  [ "$st" -eq 124 ] && STAGE_ST=124 # run_t ran in the pipeline's subshell
  echo "test exit status $st" | tee -a "$RES/tests.log"
  if [ -x "$BIN/sac-learner" ]; then
    echo "-- Pendulum-v1 on cuda: sac-learner --mode local --backend cuda --total_steps 20000"
    run_t 45 env LD_LIBRARY_PATH="$LDP" "$BIN/sac-learner" --mode local --backend cuda --env Pendulum-v1 --total_steps 20000 \
      --eval_interval 0 --eval_episodes 10 --log_interval 5000 --seed 1 --metrics_port -1 \
      --lr 1e-3 2>&1 | tee "$RES/pendulum.log" | tail -3
    [ "${PIPESTATUS[0]}" -eq 124 ] && STAGE_ST=124
  fi
  mkdir -p "$RES/dp"
  [ -x "$BIN/sac-bench-dp" ] || return 0
  # run_dp LABEL N MIN_SKIPPED DEVICE_OF_RANK... -- ARGS [-- RANK1_ARGS]: N ranks of
  # sac-bench-dp; their outputs and exit statuses into $RES/dp/LABEL.out (check_dp)
  run_dp() {
    local label=$1 n=$2 min_skip=$3 r port pids=() devs=() extra=() to
    shift 3
    while [ "$1" != -- ]; do devs+=("$1"); shift; done
    shift
    local args=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do args+=("$1"); shift; done
    [ "${1:-}" = -- ] && shift && extra=("$@")
    echo "$n $min_skip" >"$RES/dp/$label.spec"
    to=$(left 30)
    if [ "$to" -lt 5 ]; then
      note "skipped (budget): data-parallel $label"
      return
    fi
    port=$((29000 + RANDOM % 2000))
    echo "-- data-parallel $label: $n rank(s), sac-bench-dp ${args[*]} (rank 1 also: ${extra[*]:-nothing})"
    for ((r = 0; r < n; r++)); do
      local mine=("${args[@]}")
      [ "$r" -eq 1 ] && mine+=("${extra[@]}")
      (
        env LD_LIBRARY_PATH="$LDP" timeout "$to" "$BIN/sac-bench-dp" --rank "$r" --size "$n" --device "${devs[$r]}" \
          --coord "tcp://127.0.0.1:$port" --updates 1000 --warmup 20 "${mine[@]}" >"$RES/dp_$r.out" 2>&1
        echo "rank $r exit status $?" >>"$RES/dp_$r.out"
      ) &
      pids+=($!)
    done
    for ((r = 0; r < n; r++)); do wait "${pids[$r]}"; done
    cat "$RES"/dp_*.out | grep -av ' INFO ' | tail -6
    cat "$RES"/dp_*.out >"$RES/dp/$label.out"
    cat "$RES"/dp_*.out | tag_label "$label" bench-dp-result >>"$RES/dp_results"
    rm -f "$RES"/dp_*.out
  }
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
}

# --- stage 2: time per op (CUDA events) and device / host time per update
stage_profile() {
  mkdir -p "$RES/profile"
  local label
  for label in cheetah-b256-bf16 cheetah-b256-fp32 cheetah-b256-bf16-k8; do
    echo "$label" >>"$RES/profile/required"
    local prec=${label#cheetah-b256-} k=1
    prec=${prec%-k8}
    [ "${label%-k8}" != "$label" ] && k=8
    echo "-- profile $label: sac-bench-learner --op_profile true --precision $prec --updates_per_launch $k"
    run_t 40 env LD_LIBRARY_PATH="$LDP" "$BIN/sac-bench-learner" --backend cuda --peer false --preset cheetah --batch 256 \
      --precision "$prec" --graphs true --profile false --runs 1 --warmup 20 --updates 200 --updates_per_launch "$k" \
      --op_profile true --op_profile_updates 100 >"$RES/profile/$label.out" 2>&1
    grep -a '^| \|^op-profile-result\|^update-time-result' "$RES/profile/$label.out" | grep -av '^| backend \|^| metric'
  done
}

# --- stage 3: the learner benchmarks; every line checked (check_bench_line)
stage_bench() {
  run_bench() { # label, cap, args...
    local label=$1 cap=$2
    shift 2
    echo "-- $label: sac-bench-learner $*"
    echo "$label" >>"$RES/bench_runs"
    run_t "$cap" env LD_LIBRARY_PATH="$LDP" "$BIN/sac-bench-learner" --backend cuda --peer false "$@" >"$RES/bench.out" 2>&1
    local st=$?
    grep -a '^  run \|^| sacfleet updates\|^| host copies\|^bench-result' "$RES/bench.out"
    cat "$RES/bench.out" >>"$RES/bench.log"
    if grep -q '^bench-result ' "$RES/bench.out"; then
      tag_label "$label" bench-result <"$RES/bench.out" >>"$RES/results"
    else
      echo "bench-result label=$label no_result_status=$st" >>"$RES/results" # fails check_bench_line
    fi
  }
  local prec graphs n
  for prec in bf16 fp32 fp16; do
    for graphs in true false; do
      n=4000
      [ "$graphs" = false ] && n=1500
      run_bench "cheetah/b256/$prec/graphs=$graphs" 25 --preset cheetah --batch 256 --precision "$prec" \
        --graphs "$graphs" --profile false --runs 3 --warmup 30 --updates "$n"
    done
  done
  for prec in bf16 fp32; do
    run_bench "cheetah/b256/$prec/graphs=true/k=8" 25 --preset cheetah --batch 256 --precision "$prec" \
      --graphs true --profile false --runs 3 --warmup 32 --updates 8000 --updates_per_launch 8
  done
  run_bench "cheetah/b256/bf16/graphs=true/k=8/direct" 25 --preset cheetah --batch 256 --precision bf16 \
    --graphs true --profile false --runs 3 --warmup 32 --updates 8000 --updates_per_launch 8 --direct true
  run_bench "cheetah/b1024/bf16/graphs=true" 25 --preset cheetah --batch 1024 --precision bf16 --graphs true \
    --profile false --runs 3 --warmup 30 --updates 2000
  run_bench "seed/b256/bf16/graphs=true" 25 --preset seed --batch 256 --precision bf16 --graphs true \
    --profile false --runs 3 --warmup 30 --updates 3000
  run_bench "8x512/b256/bf16/recompute=false" 30 --preset cheetah --hidden 512 --depth 8 --precision bf16 \
    --graphs true --profile false --recompute false --runs 3 --warmup 20 --updates 1000
}

# --- stage 4: the peers on this card, same shape, fp32 and bf16 (the torch.compile mode
# last: its compile is the slowest, and a timeout then loses only it)
stage_peers() {
  mkdir -p "$RES/peers"
  local prec cap
  for prec in fp32 bf16; do
    cap=85
    [ "$prec" = bf16 ] && cap=$(left 200)
    echo "-- peers $prec: python3 bench/gpu_peers.py (cheetah shape, batch 256)"
    # JAX would take 75% of the card's memory up front; PyTorch runs in the same process
    PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false run_t "$cap" "$PEERS_PYTHON" bench/gpu_peers.py --obs 17 --act 6 --hidden 256 --layers 2 --batch 256 \
      --precision "$prec" --updates 1000 --runs 3 --scan 100 --capacity 1000000 \
      --modes torch-eager,torch-graph,jax-jit,jax-scan,torch-compile --device cuda \
      >"$RES/peers/$prec.out" 2>"$RES/peers/$prec.err"
    grep -a '^peer-' "$RES/peers/$prec.out"
  done
}

# --- stage 5: the service on this machine
stage_service() {
  mkdir -p "$RES/service"
  if [ -x "$BIN/sac-learner" ]; then
    local port=$((31000 + RANDOM % 2000)) pid to
    to=$(left 75)
    echo "-- sac-learner (embedded default) --backend cuda --env Pendulum-v1 --hidden 256 --total_steps 60000"
    (
      cd "$RES/service" || exit 1
      exec env LD_LIBRARY_PATH="$LDP" timeout "$to" "$BIN/sac-learner" --backend cuda --env Pendulum-v1 --hidden 256 \
        --total_steps 60000 --embedded_actors 8 --metrics_port "$port" --log_interval_s 5 --eval_every_steps 0 \
        --eval_episodes 2 --seed 1
    ) >"$RES/service/learner.out" 2>&1 &
    pid=$!
    # the stage timers: /metrics scraped every second; the last good scrape is kept
    while kill -0 "$pid" 2>/dev/null; do
      python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen("http://127.0.0.1:'"$port"'/metrics", timeout=1).read().decode())' \
        >"$RES/service/metrics.new" 2>/dev/null && grep -q '^sac_learner_stage_seconds_total' "$RES/service/metrics.new" &&
        mv "$RES/service/metrics.new" "$RES/service/metrics.txt"
      sleep 1
    done
    wait "$pid"
    local st=$?
    [ $st -eq 124 ] && STAGE_ST=124
    rm -rf "$RES/service/runs" "$RES/service/metrics.new"
    grep -a '^result: ' "$RES/service/learner.out"
    echo "exit status $st" >>"$RES/service/learner.out"
  fi
  if [ -x "$BIN/sac-bench-service" ]; then
    echo "-- sac-bench-service: the null-backend ceiling (inproc, 2 shards, uniform and prioritised)"
    run_t 40 env LD_LIBRARY_PATH="$LDP" "$BIN/sac-bench-service" --seconds 1 --windows 3 --configs inproc:2 \
      --samplers uniform,prioritized --actors 0 --learner Pendulum-v1 >"$RES/service/ceiling.out" 2>&1
    grep -a '^RESULT' "$RES/service/ceiling.out"
  fi
}

main() {
  echo "== gpu_check: $(date -u +%Y-%m-%dT%H:%M:%SZ), budget ${BUDGET} s"
  export PATH="$PATH:/usr/local/cuda/bin"
  CARD=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
  echo "card: ${CARD:-none found (nvidia-smi)}"
  nvidia-smi 2>/dev/null | head -15
  echo "nvcc: $(nvcc --version 2>/dev/null | tail -1)"
  echo "glibc: $(ldd --version 2>/dev/null | head -1)"
  echo "cores: $(nproc)"
  REFUSED=0
  find_binaries
  if [ "$REFUSED" = 1 ]; then
    echo "REFUSED: build-gpu-bundle/ was built from another tree; nothing run (scripts/gpu_check.sh --bundle, then carry it)"
    return 3
  fi
  find_libraries
  export SAC_LOG_LEVEL=info
  if [ -n "$BIN" ]; then
    stage_begin gates 260 && stage_gates
    stage_end
    stage_begin profile 60 && stage_profile
    stage_end
    stage_begin bench 130 && stage_bench
    stage_end
    stage_begin peers 200 && stage_peers
    stage_end
    stage_begin service 110 && stage_service
    stage_end
    # where an update's time goes, kernel by kernel, by Nsight Compute (a note, not a gate)
    if command -v ncu >/dev/null && [ $((BUDGET - $(elapsed))) -ge 60 ]; then
      echo "== kernels: scripts/gpu_kernels.sh (Nsight Compute, two eager updates, cheetah bf16; a note)"
      env LD_LIBRARY_PATH="$LDP" GPU_KERNELS_BIN="$BIN" timeout $((BUDGET - $(elapsed) - 5)) bash scripts/gpu_kernels.sh "$RES/kernels" ||
        note "gpu_kernels.sh did not finish (exit $?)"
    fi
  fi
  summary
  echo
  echo "== verdict"
  verdict "$RES"
}

# The fastest peer of a precision (its mode and updates/s) and sacfleet's best cheetah
# batch-256 graphed figure in it, from a results directory.
peer_best() {
  awk '/^peer-result / { for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
    if (v["updates_per_s"] + 0 > best) { best = v["updates_per_s"] + 0; mode = v["mode"] } }
    END { if (best > 0) printf "%s %.1f\n", mode, best }' "$1" 2>/dev/null
}
ours_best() {
  awk -v p="$2" '{ for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
    if (v["preset"] == "cheetah" && v["batch"] == 256 && v["precision"] == p && v["graphs"] == 1 &&
        v["depth"] == 2 && v["updates_per_s"] + 0 > best) { best = v["updates_per_s"] + 0; k = v["upl"] }
    delete v }
    END { if (best > 0) printf "%.1f %s\n", best, k }' "$1" 2>/dev/null
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
    echo "| Pendulum-v1, cuda, 20k steps | ${ret:+eval return $ret}${ret:-no result line} |"
  fi
  [ -f "$RES/stages" ] && awk '{ printf "| stage %s | %s s of %s (status %s) |\n", $1, $3, $2, $4 }' "$RES/stages"
  [ -f "$RES/notes" ] && sed 's/^/| note | /; s/$/ |/' "$RES/notes"
  echo
  echo "| benchmark run | updates/s | ms/update | launches per update (eager, fused) | host copies per batch | peak device MiB |"
  echo "| --- | --- | --- | --- | --- | --- |"
  if [ -f "$RES/results" ]; then
    awk '{ for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
      printf "| %s | %s | %s | %s | %s | %s |\n", v["label"], v["updates_per_s"], v["ms_per_update"], v["kernels"],
             v["host_copies_per_batch"], v["peak_device_mib"]; delete v }' "$RES/results"
  fi
  echo
  echo "| per update (cheetah, batch 256, graphs) | device us | host us |"
  echo "| --- | --- | --- |"
  cat "$RES"/profile/*.out 2>/dev/null | awk '/^update-time-result / {
    for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
    printf "| %s, %s update(s) per launch | %s | %s |\n", v["precision"], v["upl"], v["device_us"], v["host_us"]; delete v }'
  if [ -f "$RES/profile/cheetah-b256-bf16.out" ]; then
    echo
    echo "time per op, cheetah, batch 256, bf16, eager, CUDA events (profile/cheetah-b256-bf16.out):"
    grep -a '^| op \|^| --- | --- | --- | --- | --- |\|^| [a-z_]* [0-9]\|^| [a-z_]* (\|^| update_end\|^| between\|^| the update' \
      "$RES/profile/cheetah-b256-bf16.out"
  fi
  echo
  echo "| precision | sacfleet, cheetah b256 graphs (best of 1 and 8 updates per launch) | fastest peer | its updates/s | ratio |"
  echo "| --- | --- | --- | --- | --- |"
  local p o f
  for p in fp32 bf16; do
    o=$(ours_best "$RES/results" "$p")
    f=$(peer_best "$RES/peers/$p.out")
    echo "| $p | ${o:-none} | ${f% *} | ${f#* } | $(awk -v a="${o%% *}" -v b="${f#* }" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2fx", a / b; else print "-" }') |"
  done
  echo
  echo "targets (issue 33): cheetah, batch 256, graphs: bf16 >= 20000 updates/s, fp32 >= 5000, and >= 3x the fastest peer"
  if [ -f "$RES/service/learner.out" ]; then
    echo
    echo "service, embedded, --backend cuda, Pendulum-v1 --hidden 256: $(grep -a '^result: ' "$RES/service/learner.out" | sed 's/^result: //')"
    if [ -f "$RES/service/metrics.txt" ]; then
      awk '/^sac_learner_updates_total / { u = $2 }
        /^sac_learner_stage_seconds_total\{/ { s = $1; sub(/.*stage="/, "", s); sub(/".*/, "", s); t[s] = $2; order[++n] = s }
        END { printf "learner stage timers (us per update, last scrape, %d updates):", u;
              for (i = 1; i <= n; i++) if (u > 0) printf " %s %.1f", order[i], 1e6 * t[order[i]] / u; printf "\n" }' \
        "$RES/service/metrics.txt"
    fi
    grep -a '^RESULT' "$RES/service/ceiling.out" 2>/dev/null | sed 's/^/null-backend ceiling: /'
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
  fi
}

if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT"
  main 2>&1 | tee "$OUT/gpu_check.log"
  status=${PIPESTATUS[0]}
  rm -rf "${RES:?}/bin" "${RES:?}/lib" "${RES:?}/bundle"
  cp "$OUT/gpu_check.log" "$RES/" # the whole output in the one file that comes back
  mv "$RES" "$RES.d" && mkdir -p "$RES" && mv "$RES.d" "$RES/gpu_check_results" &&
    tar -C "$RES" -czf "$OUT/gpu_check_results.tgz" gpu_check_results
else
  main 2>&1
  status=$?
fi
rm -rf "$RES"
exit $status
