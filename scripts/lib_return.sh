# shellcheck shell=bash disable=SC2034
# The return bar, one helper for every test that checks a training run's return (sourced;
# bash). A learner's result line says "... final eval return R (best B) ..."; a test passes
# its bar only when R is there, is a finite number (nan and inf are not, whatever their
# sign) and is >= the bar. Used by tests/test_slurm.sh, scripts/compose_test.sh,
# scripts/first_command_test.sh, tests/dist/run_cluster.sh, tests/dist/run_netns.sh and
# tests/fault/fault_suite.sh; tests/test_return_bar.sh plants a NaN return into each.
#
#   return_check LINE BAR || fail "$RETURN_WHY"; ret=$RETURN
#
# return_check LINE BAR: 0 when LINE's final eval return is a finite number >= BAR (a
# finite number too); then RETURN holds it. 1 otherwise, with the reason in RETURN_WHY
# (no return in the line, a return that is not a finite number, or below the bar) and
# RETURN empty unless the number parsed. Runs in the caller's shell (no subshell), so the
# two variables are there afterwards.
return_check() {
  local line=$1 bar=$2 raw num='^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$'
  RETURN='' RETURN_WHY=''
  if ! [[ $bar =~ $num ]]; then
    RETURN_WHY="the bar '$bar' is not a finite number"
    return 1
  fi
  raw=$(sed -n 's/.*final eval return \([^ ]*\).*/\1/p' <<<"$line" | tail -n 1)
  if [[ -z $raw ]]; then
    RETURN_WHY="no 'final eval return' in the result line: '$line'"
    return 1
  fi
  if ! [[ $raw =~ $num ]]; then
    RETURN_WHY="the final eval return '$raw' is not a finite number: '$line'"
    return 1
  fi
  RETURN=$raw
  if ! awk -v r="$raw" -v b="$bar" 'BEGIN { exit !(r + 0 >= b + 0) }'; then
    RETURN_WHY="final eval return $raw is below the bar of $bar"
    return 1
  fi
  return 0
}
