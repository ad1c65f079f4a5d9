#!/usr/bin/env bash
# Self-test of lib.sh's wait_result: the watched process it waits for may end between
# wait_result's own "has it exited?" check and the check of everything watched. CI failed
# dist_staying_up_learner on that race once ("learner2 ended unexpectedly (exit 0)" while
# wait_result waited for exactly that end). Here the race is forced in one step: the first
# exited() call on the learner waits for it to end and still answers "running".
# Negative control: with wait_result calling check_watch on all of $DIST_WATCH (the code
# before the fix), this fails with "learner ended unexpectedly (exit 0)".
# A second case checks the guard still works: another watched process that ends meanwhile
# is still reported.
# usage: selftest_wait_result.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" || { echo "FAIL: $0: cannot load lib.sh"; exit 1; }

case ${1:-} in
other-ends)
  # the second case, run as a child: a watched process other than the learner ends first
  dist_init selftest_wait_result_other 60
  start learner bash -c 'sleep 20; echo "result: late"'
  start other bash -c 'exit 3'
  DIST_WATCH="learner other"
  wait_result learner 30
  pass "wait_result returned although 'other' ended (this must not print)"
  ;;
esac

dist_init selftest_wait_result 60
start learner bash -c 'sleep 1; echo "result: done"; exit 0'
start other sleep 30
DIST_WATCH="learner other"
eval "orig_$(declare -f exited)"
first=1
exited() {
  if [[ $1 == "${DIST_PID_OF[learner]}" && $first == 1 ]]; then
    first=0
    local t=0
    while kill -0 "$1" 2>/dev/null && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status"; do
      sleep 0.1
      ((++t < 200)) || fail "the learner stand-in did not end in 20 s"
    done
    return 1 # "running", answered as it ends: the race in one step
  fi
  orig_exited "$@"
}
wait_result learner 20
[[ " $DIST_WATCH " != *" learner "* ]] || fail "the learner is still watched after its result"
[[ " $DIST_WATCH " == *" other "* ]] || fail "'other' is no longer watched"

out=$(bash "${BASH_SOURCE[0]}" other-ends 2>&1)
grep -q "FAIL: .*other ended unexpectedly (exit 3)" <<<"$out" ||
  fail "a watched process that ended was not reported; the child said: $(grep -E 'FAIL|PASS' <<<"$out")"
pass "wait_result waits through its own process's end and still reports another's"
