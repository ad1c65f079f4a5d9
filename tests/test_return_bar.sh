#!/usr/bin/env bash
# The return bar's self-test (label unit): scripts/lib_return.sh's return_check on crafted
# result lines (finite returns above, at and below -200 pass or fail as they should; nan,
# -nan, inf, a line without a return and an empty line fail), then a NaN return planted
# into each test that checks a return: the test's own bar-check line (every line of it
# that calls return_check) is run against a learner result line whose return is nan and
# must fail, and against one whose return is -150.0 and must pass. A test that checks a
# return some other way (an awk comparison of its own) is refused outright.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/lib_return.sh
. "$ROOT/scripts/lib_return.sh"
USERS=(tests/test_slurm.sh scripts/compose_test.sh scripts/first_command_test.sh tests/dist/run_cluster.sh
  tests/dist/run_netns.sh tests/fault/fault_suite.sh)
FAILS=0
bad() {
  echo "FAIL: $*"
  FAILS=$((FAILS + 1))
}
line_with() {
  echo "result: env Pendulum-v1  steps 20000  updates 19000  episodes 100  final eval return $1 (best $1) over 10 episodes  wall 60.0 s"
}

# ---- the helper on crafted lines
expect() { # expect pass|fail LINE BAR
  local want=$1 line=$2 bar=$3 got=fail
  return_check "$line" "$bar" && got=pass
  if [[ $got == "$want" ]]; then
    echo "ok: bar $bar, '${line:0:90}' -> $got${RETURN_WHY:+ ($RETURN_WHY)}"
  else
    bad "bar $bar, '$line' -> $got, want $want${RETURN_WHY:+ ($RETURN_WHY)}"
  fi
}
expect pass "$(line_with -150.0)" -200
expect pass "$(line_with -200.0)" -200
expect pass "$(line_with 12.5)" -200
expect fail "$(line_with -200.1)" -200
expect fail "$(line_with -1500.3)" -200
for v in nan -nan NaN inf -inf +inf 1e999x ''; do
  expect fail "$(line_with "$v")" -200
done
expect fail "result: env Pendulum-v1  steps 20000  updates 19000" -200
expect fail "" -200
expect fail "$(line_with -150.0)" nan
return_check "$(line_with -150.0)" -200
[[ $RETURN == -150.0 ]] || bad "RETURN is '$RETURN', want -150.0"

# ---- a NaN return planted into each test's own check
for f in "${USERS[@]}"; do
  src="$ROOT/$f"
  [[ -r $src ]] || {
    bad "$f: not found"
    continue
  }
  grep -Eq '^\s*(\.|source) .*(lib_return\.sh|/lib\.sh)' "$src" ||
    bad "$f: does not load scripts/lib_return.sh (directly or through tests/dist/lib.sh)"
  if grep -nE "awk .*r ?>= ?(-200|t|\\\$)" "$src" | grep -v '^\s*#' >/dev/null; then
    bad "$f: compares a return with awk of its own: $(grep -nE "awk .*r ?>= ?(-200|t|\\\$)" "$src" | head -n 1)"
  fi
  checks=$(grep -E '^\s*return_check ' "$src")
  if [[ -z $checks ]]; then
    bad "$f: no return_check line"
    continue
  fi
  for v in nan -nan -150.0; do
    failed=0
    (
      # shellcheck disable=SC2317 # called by the eval below
      fail() { exit 3; }
      # shellcheck disable=SC2034 # read by the eval below
      result=$(line_with "$v") line=$result THRESHOLD=-200
      eval "$checks"
    ) >/dev/null 2>&1 || failed=1
    if [[ $v == -150.0 ]]; then
      if ((failed)); then bad "$f: a return of -150.0 failed its check"; else echo "ok: $f passes a return of -150.0"; fi
    elif ((failed)); then
      echo "ok: $f fails on a planted return of $v"
    else
      bad "$f: a planted return of $v passed its check"
    fi
  done
done

if ((FAILS)); then
  echo "test_return_bar: $FAILS check(s) failed"
  exit 1
fi
echo "test_return_bar: every check passed"
