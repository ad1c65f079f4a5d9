#!/usr/bin/env bash
# What CI runs after the main test suite (scripts/test.sh), each stage bounded in time:
#   1. fuzz:      every libFuzzer target (scripts/fuzz.sh) for CI_EXTRA_FUZZ_S seconds each;
#   2. sanitize:  the whole ctest suite but the slow and gpu labels (unit + integration)
#                 on a -DSAC_SANITIZE=ON -DSAC_WITH_CUDA=OFF build (AddressSanitizer +
#                 UndefinedBehaviorSanitizer; leaks, any UB and any ASan report fail it),
#                 one test per core at once (its tests wait on progress, not the clock);
#   3. valgrind:  short training runs under valgrind --tool=memcheck (no invalid access,
#                 no definite leak): the single-process loop with a tiny network for a few
#                 hundred updates, and the embedded default (2 shards, 2 actor threads over
#                 inproc://) for a few thousand environment steps.
# Prints a summary (stage, result, wall time) and exits 1 if any stage failed, after
# running all of them. Installs clang and valgrind when missing (apt-get; through sudo
# when not root).
#
# usage: scripts/ci_extra.sh [MAIN_BUILD_DIR]
#   MAIN_BUILD_DIR: a non-sanitized build with sac-learner (default: $SAC_TEST_BUILD or
#   build-test, which scripts/test.sh makes); built into build-ci-rel when absent.
#   (Variables are CI_EXTRA_*, not SAC_*: the binaries refuse unknown SAC_* variables.)
# env:   CI_EXTRA_FUZZ_S (20 s per target), CI_EXTRA_STAGES ("fuzz sanitize valgrind"),
#        CI_EXTRA_JOBS (nproc)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
main_build=${1:-${SAC_TEST_BUILD:-build-test}}
fuzz_s=${CI_EXTRA_FUZZ_S:-20}
stages=${CI_EXTRA_STAGES:-fuzz sanitize valgrind}
jobs=${CI_EXTRA_JOBS:-$(nproc 2>/dev/null || echo 2)}
# The binaries refuse SAC_* environment variables that are not their options (a typo
# must not pass silently), so none of the caller's reaches them from here.
while read -r v; do unset "$v"; done < <(compgen -e | grep '^SAC_')
logs=$(mktemp -d "${TMPDIR:-/tmp}/sacfleet-ci-extra.XXXXXX")
declare -a SUMMARY=()
status=0
t_all=$SECONDS

need_pkg() { # install Debian packages that are missing
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  local sudo=""
  [[ $(id -u) == 0 ]] || sudo=sudo
  echo "ci_extra: installing ${missing[*]}"
  $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    "${missing[@]}"
}

stage_done() { # NAME RC T0 DETAIL
  local r=ok
  if [[ $2 != 0 ]]; then
    r="FAILED (exit $2)"
    status=1
  fi
  SUMMARY+=("| $1 | $r | $((SECONDS - $3)) s | $4 |")
  echo "ci_extra: $1: $r in $((SECONDS - $3)) s"
}

# ---------------------------------------------------------------- 1. fuzz
if [[ " $stages " == *" fuzz "* ]]; then
  t0=$SECONDS
  need_pkg clang
  scripts/fuzz.sh "$fuzz_s" >"$logs/fuzz.log" 2>&1
  rc=$?
  sed -n '/^fuzz.sh summary:/,$p' "$logs/fuzz.log"
  ((rc == 0)) || grep -a -E 'ERROR|runtime error' "$logs/fuzz.log" | head -n 10
  ((rc != 2)) || tail -n 25 "$logs/fuzz.log" # cannot build: the compiler's own words
  n=$(grep -c ': ok, ' "$logs/fuzz.log")
  stage_done "fuzz (${fuzz_s} s per target)" "$rc" "$t0" "$n target(s) clean; findings in build-fuzz/crashes/"
fi

# ---------------------------------------------------------------- 2. sanitize
if [[ " $stages " == *" sanitize "* ]]; then
  t0=$SECONDS
  b=build-ci-asan
  rc=0
  if ! cmake -S . -B "$b" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSAC_SANITIZE=ON -DSAC_WITH_CUDA=OFF -DSAC_WERROR=ON \
    >"$logs/asan-configure.log" 2>&1; then
    rc=2
    tail -n 20 "$logs/asan-configure.log"
  elif ! cmake --build "$b" -j"$jobs" >"$logs/asan-build.log" 2>&1; then
    rc=2
    grep -E 'error|Error' "$logs/asan-build.log" | head -n 20
  else
    tb=$SECONDS
    # Leaks and every ASan/UBSan report fail a test. The one exception: memory an embedded
    # CPython interpreter (the gym bridge's) and the extension modules it imports still
    # hold at exit (OpenSSL's libcrypto included, which Python's hashlib loads); an
    # interpreter that is never finalized keeps it by design. Leaks whose allocation
    # stack runs through sacfleet code alone are still reported.
    printf '%s\n' 'leak:libpython3' 'leak:_PyObject_Malloc' 'leak:_PyMem_' 'leak:/site-packages/' 'leak:libcrypto.so' \
      >"$logs/lsan.supp"
    (cd "$b" && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1 \
      LSAN_OPTIONS="suppressions=$logs/lsan.supp:print_suppressions=0" \
      UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
      ctest -LE 'slow|gpu' --output-on-failure --timeout 600 -j"$jobs") >"$logs/asan-ctest.log" 2>&1
    rc=$?
    grep -E 'tests passed|tests failed|\*\*\*|Failed|Not Run|Skipped' "$logs/asan-ctest.log" | tail -n 25
    detail="$(grep -E 'tests passed|tests failed' "$logs/asan-ctest.log" | tail -n 1), ctest $((SECONDS - tb)) s"
  fi
  stage_done "sanitize (ASan + UBSan, ctest -LE 'slow|gpu')" "$rc" "$t0" "${detail:-build failed, see $logs}"
fi

# ---------------------------------------------------------------- 3. valgrind
if [[ " $stages " == *" valgrind "* ]]; then
  t0=$SECONDS
  need_pkg valgrind
  learner="$main_build/learner/sac-learner"
  if [[ ! -x $learner ]]; then
    main_build=build-ci-rel
    learner="$main_build/learner/sac-learner"
    cmake -S . -B "$main_build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSAC_WITH_CUDA=OFF >"$logs/rel-configure.log" 2>&1 &&
      cmake --build "$main_build" -j"$jobs" --target sac-learner >"$logs/rel-build.log" 2>&1
  fi
  rc=0
  details=()
  if [[ ! -x $learner ]]; then
    rc=2
    details+=("no sac-learner to run")
  else
    vg=(valgrind --tool=memcheck --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite
        --show-leak-kinds=definite --track-origins=no --num-callers=30)
    runs="$logs/vg-runs"
    mkdir -p "$runs"
    # OpenBLAS: one thread, and AVX2 kernels (valgrind does not run AVX-512)
    export OPENBLAS_NUM_THREADS=1 OPENBLAS_CORETYPE=Haswell
    common=(--env Pendulum-v1 --threads 1 --metrics_port -1 --run_dir "$runs" --eval_episodes 1 --log_interval 0)
    # (a) the single-process loop: 2 x 16 network, batch 32, 300 updates after 200 random steps
    OPENBLAS_NUM_THREADS=1 timeout 600 "${vg[@]}" "$learner" --mode local "${common[@]}" --run_name local \
      --hidden 16 --depth 2 --batch_size 32 --learning_starts 200 --total_steps 500 --eval_interval 0 \
      >"$logs/vg-local.log" 2>&1
    r1=$?
    # (b) the embedded default: 2 shards and 2 actor threads over inproc://, 3,000 steps
    timeout 600 "${vg[@]}" "$learner" "${common[@]}" --run_name embedded \
      --hidden 32 --depth 2 --batch_size 64 --learning_starts 1000 --total_steps 3000 --eval_every 0 \
      >"$logs/vg-embedded.log" 2>&1
    r2=$?
    for x in local:$r1 embedded:$r2; do
      name=${x%%:*} r=${x##*:}
      f="$logs/vg-$name.log"
      errs=$(sed -n 's/.*ERROR SUMMARY: \([0-9][0-9]*\) errors.*/\1/p' "$f" | tail -n 1)
      def=$(sed -n 's/.*definitely lost: \([0-9,]*\) bytes.*/\1/p' "$f" | tail -n 1)
      res=$(grep -a '^result:' "$f" | sed 's/^result: //' | cut -c1-90)
      details+=("$name: exit $r, ${errs:-?} errors, definitely lost ${def:-0} bytes (${res:-no result line})")
      echo "ci_extra: valgrind $name: exit $r, errors ${errs:-?}, definitely lost ${def:-0} bytes"
      if [[ $r != 0 ]]; then
        rc=1
        grep -a -E '^==[0-9]+== (Invalid|Conditional|Use of|Syscall|Mismatched|[0-9,]+ bytes in .* definitely)' "$f" |
          head -n 10
      fi
    done
  fi
  stage_done "valgrind memcheck (2 runs)" "$rc" "$t0" "$(IFS=';'; echo "${details[*]}")"
fi

echo
echo "| stage | result | wall | detail |"
echo "| --- | --- | --- | --- |"
printf '%s\n' "${SUMMARY[@]}"
echo
echo "ci_extra: total $((SECONDS - t_all)) s; logs in $logs"
exit $status
