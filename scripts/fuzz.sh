#!/usr/bin/env bash
# Builds the libFuzzer target for the wire decoder with clang (in build-fuzz/) and runs it
# for a bounded time. Usage: scripts/fuzz.sh [seconds (default 60)] [extra libFuzzer args...]
# Needs clang with libFuzzer (Debian: apt-get install clang). Crashes are written to
# build-fuzz/crashes/; the corpus (seeded with valid messages) lives in build-fuzz/corpus/.
set -euo pipefail
secs="${1:-60}"
shift || true
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$root/build-fuzz"
command -v clang >/dev/null || { echo "fuzz.sh: clang not found (apt-get install clang)" >&2; exit 2; }
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_C_COMPILER=clang -DSAC_FUZZ=ON -DBUILD_TESTING=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" --target fuzz_wire >/dev/null
mkdir -p "$build/corpus" "$build/crashes"
# seeds: valid messages of every type, written by the encoder itself
if [ -z "$(ls -A "$build/corpus")" ]; then
  SAC_FUZZ_SEED_DIR="$build/corpus" "$build/replay/fuzz_wire" -runs=0 >/dev/null 2>&1 || true
fi
exec "$build/replay/fuzz_wire" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
  -artifact_prefix="$build/crashes/" "$@" "$build/corpus"
