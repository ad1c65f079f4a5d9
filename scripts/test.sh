#!/usr/bin/env bash
# The whole test suite from nothing: install dependencies, configure a fresh build with
# warnings as errors, build everything, run every ctest label (unit, integration, slow;
# gpu tests skip where there is no GPU). Exit status is ctest's.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
build=${SAC_TEST_BUILD:-build-test}
rm -rf "$build"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSAC_WERROR=ON
cmake --build "$build" -j"$(nproc)"
cd "$build"
ctest --output-on-failure --timeout 900 -j1
