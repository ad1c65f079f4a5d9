#!/usr/bin/env bash
# Issue 17: `sac-learner --backend cuda` finds the CUDA module next to the binary, in
# <binary>/../lib/sacfleet or through SAC_CUDA_MODULE, and fails at once (under 10 s)
# with a line saying which when
#   (a) there is no module: "not installed (looked for ...)" / "not at SAC_CUDA_MODULE=...";
#   (b) the module is there but there is no GPU: "is loaded, but there is no usable GPU"
#       (any error of cudaGetDeviceCount counts as no GPU).
#   (c) a file that is not a module: "found but cannot be loaded".
# Where the machine has a GPU, (b) becomes a short successful run instead.
# usage: [CUDAMOD_PART=a|b] cuda_module.sh SAC_LEARNER [MODULE_SO]
# CUDAMOD_PART=a runs (a) and (c), which need no module; CUDAMOD_PART=b runs (b), which
# exits 77 (Skipped) in a build without nvcc (no MODULE_SO); unset, both run, and a build
# without a module skips the whole test rather than pass with (b) not run. ctest:
# test_cuda_module (a) and test_cuda_module_loaded (b).
set -uo pipefail
learner=$1; module=${2:-}
PART=${CUDAMOD_PART:-all}
. "$(dirname "$0")/../lib_it.sh"
it_init cudamod
skip() { echo "SKIP: $*"; exit 77; }
case $PART in a | b | all) ;; *) fail "CUDAMOD_PART=$PART: a, b or unset" ;; esac
args=(--mode local --env Pendulum-v1 --total_steps 300 --batch_size 32 --hidden 16 --learning_starts 100
      --log_level info --run_dir "$DIR/runs")

# runs the learner ($1: label, then the command), records rc, elapsed seconds and output
run() {
  local label=$1; shift
  local t0=$(date +%s.%N)
  timeout 60 "$@" "${args[@]}" > "$DIR/$label.log" 2>&1
  rc=$?
  el=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.2f", b - a}')
  echo "$label: rc $rc in ${el}s: $(grep -E 'ERROR|CUDA module' "$DIR/$label.log" | head -n 2 | cut -c26- | tr '\n' '|')"
}
fast() { awk -v e="$el" 'BEGIN {exit !(e < 10)}' || fail "$1 took ${el}s, not at once"; }

if [ "$PART" = all ] && [ -z "$module" ]; then skip "no CUDA module in this build (no nvcc): (b) cannot run"; fi
if [ "$PART" != b ]; then
  # (a1) SAC_CUDA_MODULE names a file that does not exist: nothing else is tried
  SAC_CUDA_MODULE=$DIR/nowhere/libsacfleet-cuda.so run env_missing "$learner" --backend cuda
  [ $rc -ne 0 ] || fail "a missing module at SAC_CUDA_MODULE did not fail"
  grep -q "not at SAC_CUDA_MODULE=$DIR/nowhere" "$DIR/env_missing.log" || fail "no line naming SAC_CUDA_MODULE's path"
  grep -q 'backend "cuda" is not available' "$DIR/env_missing.log" || fail "no line saying the backend is not available"
  fast env_missing

  # (a2) the binary alone in a folder: every place it looked is named
  mkdir -p "$DIR/alone" && cp "$learner" "$DIR/alone/"
  if [ -e /usr/local/lib/sacfleet/libsacfleet-cuda.so ] || [ -e /usr/lib/sacfleet/libsacfleet-cuda.so ]; then
    echo "(a2) skipped: a module is installed system-wide on this machine"
  else
    run alone "$DIR/alone/sac-learner" --backend cuda
    [ $rc -ne 0 ] || fail "the binary without a module did not fail"
    grep -q "is not installed (looked for $DIR/alone/libsacfleet-cuda.so" "$DIR/alone.log" || fail "no 'not installed (looked for ...)' line"
    fast alone
  fi
  # the cpu backend never looks for the module
  run cpu_alone "$DIR/alone/sac-learner" --backend cpu
  [ $rc -eq 0 ] || fail "--backend cpu failed without the module (rc $rc)"
  ! grep -q "CUDA module" "$DIR/cpu_alone.log" || fail "--backend cpu looked for the CUDA module"

  # (c) a file that is not a module: found, then refused with dlerror's reason
  echo "not an ELF file" > "$DIR/bogus.so"
  SAC_CUDA_MODULE=$DIR/bogus.so run bogus "$learner" --backend cuda
  [ $rc -ne 0 ] || fail "a bogus module did not fail"
  grep -q "found but cannot be loaded" "$DIR/bogus.log" || fail "no 'cannot be loaded' line for a bogus module"
  fast bogus
  [ "$PART" = a ] && { echo "PASS ((a) and (c))"; exit 0; }
fi

[ -n "$module" ] || skip "no CUDA module in this build (no nvcc): (b) cannot run"
[ -f "$module" ] || fail "no module at $module"
gpu=0
command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU' && gpu=1
check_b() { # $1: label
  if [ $gpu = 1 ]; then
    [ $rc -eq 0 ] || fail "$1: a run with a GPU and the module failed (rc $rc)"
  else
    [ $rc -ne 0 ] || fail "$1: --backend cuda without a GPU did not fail"
    grep -q 'is loaded, but there is no usable GPU' "$DIR/$1.log" || fail "$1: no 'no usable GPU' line"
    fast "$1"
  fi
}
# (b1) module next to the binary
mkdir -p "$DIR/next" && cp "$learner" "$module" "$DIR/next/"
run next "$DIR/next/sac-learner" --backend cuda
grep -q "CUDA module $DIR/next/libsacfleet-cuda.so loaded" "$DIR/next.log" || fail "the module next to the binary was not loaded"
check_b next
# (b2) an installed prefix: bin/ and lib/sacfleet/
mkdir -p "$DIR/prefix/bin" "$DIR/prefix/lib/sacfleet" && cp "$learner" "$DIR/prefix/bin/" && cp "$module" "$DIR/prefix/lib/sacfleet/"
run prefix "$DIR/prefix/bin/sac-learner" --backend cuda
grep -q "CUDA module $DIR/prefix/lib/sacfleet/libsacfleet-cuda.so loaded" "$DIR/prefix.log" || fail "the module in <prefix>/lib/sacfleet was not loaded"
check_b prefix
# (b3) through SAC_CUDA_MODULE, from the lonely binary
[ -x "$DIR/alone/sac-learner" ] || { mkdir -p "$DIR/alone" && cp "$learner" "$DIR/alone/"; }
SAC_CUDA_MODULE=$DIR/next/libsacfleet-cuda.so run env "$DIR/alone/sac-learner" --backend cuda
grep -q "CUDA module $DIR/next/libsacfleet-cuda.so loaded" "$DIR/env.log" || fail "SAC_CUDA_MODULE's module was not loaded"
check_b env
echo "PASS ((b); GPU present: $gpu)"
