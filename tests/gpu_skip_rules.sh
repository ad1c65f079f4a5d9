#!/usr/bin/env bash
# The GPU tests' skip rules, checked on any machine (label unit): a GPU test skips only on
# "no device"; a CUDA module that is missing, not loadable or not a module at all fails it,
# on a machine with no GPU and, with the fake "device present" switch SAC_TEST_GPU_PRESENT=1
# (tests/skip_exit.h), on one that has a GPU; and a run whose every case skipped exits 77
# (CTest: Skipped), never 0 (Passed).
#
# usage: gpu_skip_rules.sh TEST_BACKEND_CUDA NOT_A_CUDA_MODULE.so
# Runs one cheap case of test_backend_cuda (options_and_metrics) per situation:
#   1. the module missing (SAC_CUDA_MODULE=/nonexistent)  -> fails (exit neither 0 nor 77)
#   2. a .so that is not the CUDA module                   -> fails
#   3. 1. again with SAC_TEST_GPU_PRESENT=1                -> fails
#   4. the built module, SAC_TEST_GPU_PRESENT=1           -> passes (0) where a GPU answers,
#                                                            fails where none does
#   5. the built module, no switch                          -> 0 with a GPU; 77 (never 0) and
#                                                            "no usable GPU" in the log without one
#   6. without a GPU, the whole backend_cuda suite          -> 77: no case in it runs without
#                                                            a device (those are in backend_cuda_cpu)
set -uo pipefail
BIN=$1 NOT_MODULE=$2
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
FAILS=0
case_one() { "$BIN" --jobs 1 -S --filter 'backend_cuda/options_and_metrics' >"$T/out" 2>&1; }
bad() {
  echo "FAIL: $*"
  sed 's/^/    | /' "$T/out" | tail -n 15
  FAILS=$((FAILS + 1))
}

# 1. the module missing: a failure, not a skip
SAC_CUDA_MODULE=/nonexistent/libsacfleet-cuda.so case_one
rc=$?
if [ "$rc" = 0 ] || [ "$rc" = 77 ]; then bad "module missing: exit $rc (must fail, not pass or skip)"; else
  echo "ok: module missing -> exit $rc (failed: $(grep -o 'module missing or broken' "$T/out" | head -n 1))"
fi

# 2. a shared object that is not the module (no entry point): a failure
SAC_CUDA_MODULE=$NOT_MODULE case_one
rc=$?
if [ "$rc" = 0 ] || [ "$rc" = 77 ]; then bad "not a CUDA module ($NOT_MODULE): exit $rc (must fail)"; else
  echo "ok: a .so that is not the module -> exit $rc"
fi

# 3. the module missing on a machine that (says it) has a GPU
SAC_TEST_GPU_PRESENT=1 SAC_CUDA_MODULE=/nonexistent/libsacfleet-cuda.so case_one
rc=$?
if [ "$rc" = 0 ] || [ "$rc" = 77 ]; then bad "module missing, SAC_TEST_GPU_PRESENT=1: exit $rc (must fail)"; else
  echo "ok: module missing with the device-present switch -> exit $rc"
fi

# 4 and 5: the built module; whether a GPU answers decides what is right
env -u SAC_CUDA_MODULE -u SAC_TEST_GPU_PRESENT "$BIN" --jobs 1 -S --filter 'backend_cuda/options_and_metrics' \
  >"$T/out" 2>&1
rc=$?
if grep -q 'there is no usable GPU' "$T/out"; then
  if [ "$rc" = 77 ]; then echo "ok: no device -> exit 77 (Skipped)"; else bad "no device: exit $rc (must be 77)"; fi
  SAC_TEST_GPU_PRESENT=1 case_one
  rc=$?
  if [ "$rc" = 0 ] || [ "$rc" = 77 ]; then bad "no device, SAC_TEST_GPU_PRESENT=1: exit $rc (must fail)"; else
    echo "ok: no device with the device-present switch -> exit $rc (failed)"
  fi
  # the whole GPU suite, as ctest runs it: every case needs the device, so all skip and the
  # binary exits 77 (a case that runs without a GPU belongs in suite backend_cuda_cpu, or
  # the GPU test would say Passed on a machine where no GPU case ran)
  "$BIN" --jobs 1 -S --filter 'backend_cuda/*' --verbose >"$T/out" 2>&1
  rc=$?
  if [ "$rc" = 77 ]; then echo "ok: no device, the whole backend_cuda suite -> exit 77 (Skipped)"; else
    bad "no device, the whole backend_cuda suite: exit $rc, not 77; cases that did not skip: $(grep -E '^\[(PASS|FAIL)\]' "$T/out" | cut -c1-100 | tr '\n' ' ')"
  fi
elif [ "$rc" = 0 ]; then
  echo "ok: a GPU answered, the case ran and passed"
  SAC_TEST_GPU_PRESENT=1 case_one || bad "GPU present, SAC_TEST_GPU_PRESENT=1: exit $?"
else
  bad "the built module: exit $rc without saying there is no usable GPU"
fi

if [ "$FAILS" != 0 ]; then
  echo "gpu_skip_rules: $FAILS check(s) failed"
  exit 1
fi
echo "gpu_skip_rules: every check passed"
