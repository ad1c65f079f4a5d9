#!/usr/bin/env bash
# scripts/skip_check.sh against real ctest reports (label unit): a throwaway CMake project
# (LANGUAGES NONE, configured in a second) with a test that passes, one that skips (exit 77)
# and is on the allowed list, one that skips and is not, and one that fails; ctest writes
# its JUnit report as scripts/test.sh has it do, and skip_check must
#   1. fail, naming the unlisted skip (and not the listed one), with its SKIP line;
#   2. pass once that test is listed too (a failing test is ctest's business, not a skip);
#   3. fail on the report of a ctest that found no test (and ctest --no-tests=error fails);
#   4. fail without a report.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CHECK=$ROOT/scripts/skip_check.sh
T=$(mktemp -d /tmp/sac-skipcheck.XXXXXX)
trap 'rm -rf "$T"' EXIT
FAILS=0
bad() {
  echo "FAIL: $*"
  sed 's/^/    | /' "$T/out"
  FAILS=$((FAILS + 1))
}
mkdir -p "$T/p" "$T/empty"
cat >"$T/p/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.21)
project(skipcheck LANGUAGES NONE)
enable_testing()
add_test(NAME t_pass COMMAND sh -c "echo fine")
add_test(NAME t_gpu COMMAND sh -c "echo 'SKIP: no device'; exit 77")
add_test(NAME t_hidden COMMAND sh -c "echo 'SKIP: no docker here'; exit 77")
add_test(NAME t_fail COMMAND sh -c "exit 1")
set_tests_properties(t_gpu t_hidden PROPERTIES SKIP_RETURN_CODE 77)
CM
cat >"$T/empty/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.21)
project(skipcheck_empty LANGUAGES NONE)
enable_testing()
CM
cmake -S "$T/p" -B "$T/p/b" >/dev/null 2>&1 || { echo "FAIL: cannot configure the throwaway project"; exit 1; }
(cd "$T/p/b" && ctest --no-tests=error --output-junit "$T/p.xml" >/dev/null 2>&1)
printf '# comment line\nt_gpu  # why\n' >"$T/allowed1"
printf 't_gpu\nt_hidden # now allowed\n' >"$T/allowed2"

# 1. an unlisted skip fails the check, by name and with its SKIP line
"$CHECK" "$T/p.xml" "$T/allowed1" >"$T/out" 2>&1
rc=$?
if [ $rc = 0 ]; then bad "1: an unlisted skip (t_hidden) passed"
elif ! grep -q 'FAIL: t_hidden did not run (SKIP: no docker here)' "$T/out"; then bad "1: t_hidden not named with its reason"
elif grep -q 'FAIL: t_gpu' "$T/out"; then bad "1: the listed t_gpu was refused"
elif grep -q 't_fail\|t_pass' "$T/out"; then bad "1: a test that ran was reported as a skip"
else echo "ok: 1. unlisted skip refused: $(grep 'FAIL: t_hidden' "$T/out")"; fi

# 2. both listed: passes
"$CHECK" "$T/p.xml" "$T/allowed2" >"$T/out" 2>&1 && echo "ok: 2. every skip listed -> $(tail -n 1 "$T/out")" ||
  bad "2: every skip listed, still failed"

# 3. a ctest that finds no test: --no-tests=error fails it, and its report fails the check
cmake -S "$T/empty" -B "$T/empty/b" >/dev/null 2>&1
if (cd "$T/empty/b" && ctest --no-tests=error --output-junit "$T/empty.xml" >/dev/null 2>&1); then
  : >"$T/out"
  bad "3: ctest --no-tests=error passed with no test"
else
  echo "ok: 3a. ctest --no-tests=error fails when it finds no test"
fi
"$CHECK" "$T/empty.xml" "$T/allowed2" >"$T/out" 2>&1 && bad "3: the check passed a report with no test" ||
  echo "ok: 3b. no test in the report -> $(tail -n 1 "$T/out")"

# 4. no report at all
"$CHECK" "$T/nothing.xml" "$T/allowed2" >"$T/out" 2>&1 && bad "4: the check passed without a report" ||
  echo "ok: 4. no report -> $(tail -n 1 "$T/out")"

# and the committed list names only tests that exist in this tree's tests/CMakeLists.txt
while read -r name; do
  grep -qE "NAME $name( |\))" "$ROOT/tests/CMakeLists.txt" || {
    : >"$T/out"
    bad "tests/allowed_skips.txt names $name, which tests/CMakeLists.txt does not register"
  }
done < <(sed 's/#.*//' "$ROOT/tests/allowed_skips.txt" | awk 'NF { print $1 }')

if ((FAILS)); then
  echo "test_skip_check: $FAILS check(s) failed"
  exit 1
fi
echo "test_skip_check: every check passed"
