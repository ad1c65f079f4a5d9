#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (in build-fuzz/, or $FUZZ_BUILD) and runs
# each for a bounded time, one after the other.
#
# usage: scripts/fuzz.sh [SECONDS_PER_TARGET (default 60)] [TARGET...] [-- extra libFuzzer args]
# targets (default: all): fuzz_wire (wire decoder, every message type), fuzz_config (config
#   file + command line + environment), fuzz_weights (weights subscriber: decode and shape
#   check over a real PUB/SUB), fuzz_snapshot (replay snapshot files), fuzz_checkpoint
#   (learner checkpoint files), fuzz_policy (policy.bin files), fuzz_http (the /metrics
#   endpoint's request parser, over TCP on 127.0.0.1), fuzz_sample_reply (the learner's
#   replay client receiving and checking SampleBatch replies from a fake shard).
# Each target's corpus lives in build-fuzz/corpus/TARGET/, seeded with valid inputs the
# target writes itself; a finding is written to build-fuzz/crashes/TARGET-* and makes the
# script exit 1 after the remaining targets have run. Exit 2: cannot build (no clang).
# Needs clang with libFuzzer (Debian: apt-get install clang).
set -uo pipefail
secs=60
if [[ $# -gt 0 && $1 =~ ^[0-9]+$ ]]; then
  secs=$1
  shift
fi
all=(fuzz_wire fuzz_config fuzz_weights fuzz_snapshot fuzz_checkpoint fuzz_policy fuzz_http fuzz_sample_reply)
targets=()
while [[ $# -gt 0 && $1 != -- ]]; do
  targets+=("$1")
  shift
done
[[ $# -gt 0 ]] && shift # the rest goes to libFuzzer
((${#targets[@]})) || targets=("${all[@]}")
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${FUZZ_BUILD:-$root/build-fuzz}"
command -v clang >/dev/null || { echo "fuzz.sh: clang not found (apt-get install clang)" >&2; exit 2; }
jobs=$(nproc 2>/dev/null || echo 2)
mkdir -p "$build"
if ! cmake -S "$root" -B "$build" -G Ninja -DCMAKE_C_COMPILER=clang -DSAC_FUZZ=ON -DBUILD_TESTING=OFF \
  -DSAC_WITH_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$build/fuzz-configure.log" 2>&1; then
  cat "$build/fuzz-configure.log" >&2
  echo "fuzz.sh: configure failed" >&2
  exit 2
fi
if ! cmake --build "$build" -j"$jobs" --target "${targets[@]}" >"$build/fuzz-build.log" 2>&1; then
  tail -n 40 "$build/fuzz-build.log" >&2
  echo "fuzz.sh: build failed" >&2
  exit 2
fi
mkdir -p "$build/crashes"
# Files the targets write go to a tmpfs where there is one (the snapshot round trip fsyncs).
fuzz_tmp=$(mktemp -d "$( [[ -d /dev/shm && -w /dev/shm ]] && echo /dev/shm || echo "${TMPDIR:-/tmp}")/sac-fuzz.XXXXXX")
trap 'rm -rf "$fuzz_tmp"' EXIT
# UB is fatal even in a target built without -fno-sanitize-recover (fuzz_wire); a failed
# malloc returns NULL as it does in production instead of being an ASan error.
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=1
status=0
declare -a summary=()
for t in "${targets[@]}"; do
  bin=$(find "$build" -type f -name "$t" -perm -u+x | head -n 1)
  [[ -n "$bin" ]] || { echo "fuzz.sh: no binary for $t" >&2; status=1; continue; }
  corpus="$build/corpus/$t"
  mkdir -p "$corpus"
  if [[ -z "$(ls -A "$corpus")" ]]; then # seeds: valid inputs, written by the target
    SAC_FUZZ_SEED_DIR="$corpus" TMPDIR="$fuzz_tmp" "$bin" -runs=0 "$corpus" >/dev/null 2>&1 || true
  fi
  log="$build/$t.log"
  echo "fuzz.sh: $t for ${secs}s (corpus $(ls "$corpus" | wc -l) inputs)"
  # -close_fd_mask=3: the targets' own log lines (every rejected input logs one) are
  # silenced; libFuzzer and the sanitizers keep reporting on a duplicate of stderr
  TMPDIR="$fuzz_tmp" "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -close_fd_mask=3 \
    -artifact_prefix="$build/crashes/$t-" "$@" "$corpus" >"$log" 2>&1
  rc=$?
  line=$(grep -a -E '^#[0-9]+.*(DONE|pulse|NEW|REDUCE)' "$log" | tail -n 1)
  execs=$(sed -n 's/^#\([0-9][0-9]*\).*/\1/p' <<<"$line")
  cov=$(sed -n 's/.*cov: \([0-9][0-9]*\).*/\1/p' <<<"$line")
  if ((rc != 0)); then
    status=1
    summary+=("$t: FAILED (exit $rc) after ${execs:-?} runs; see $log and $build/crashes/$t-*")
    grep -a -m 1 -E 'ERROR: (AddressSanitizer|libFuzzer|LeakSanitizer)|runtime error|deadly signal' "$log" >&2
  else
    summary+=("$t: ok, ${execs:-?} runs in ${secs}s, coverage ${cov:-?} edges, corpus $(ls "$corpus" | wc -l)")
  fi
done
echo "fuzz.sh summary:"
printf '  %s\n' "${summary[@]}"
exit $status
