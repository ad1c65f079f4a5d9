#!/usr/bin/env bash
# Which tests skipped, and were they allowed to: reads ctest's JUnit report (ctest
# --output-junit FILE) and a list of the tests that may skip on this machine (one name a
# line, '#' starts a comment; tests/allowed_skips.txt), prints every test that did not run
# (skipped with exit 77, disabled, or not run for a missing requirement) with its SKIP line,
# and exits 1 when one of them is not on the list, or when the report holds no test at all.
# Exit 0: every test ran or was allowed to skip. scripts/test.sh runs it after ctest.
# usage: skip_check.sh JUNIT_XML ALLOWED_LIST
set -uo pipefail
junit=$1 allowed=$2
[ -s "$junit" ] || { echo "skip_check: FAIL: no ctest JUnit report at $junit"; exit 1; }
[ -r "$allowed" ] || { echo "skip_check: FAIL: no list of allowed skips at $allowed"; exit 1; }
# one line per test case: NAME STATUS (ctest writes each <testcase ...> opening tag on a line)
cases=$(sed -n 's/.*<testcase name="\([^"]*\)"[^>]* status="\([^"]*\)".*/\1 \2/p' "$junit")
total=$(grep -c . <<<"$cases")
if [ -z "$cases" ] || [ "$total" = 0 ]; then
  echo "skip_check: FAIL: the report lists no test (ctest ran nothing)"
  exit 1
fi
mapfile -t ok < <(sed 's/#.*//' "$allowed" | awk 'NF { print $1 }')
is_allowed() {
  local a
  for a in "${ok[@]}"; do [ "$a" = "$1" ] && return 0; done
  return 1
}
# the SKIP line a test printed (its <system-out>), for the report
why() {
  awk -v n="$1" '
    index($0, "<testcase name=\"" n "\"") { inside = 1; next }
    inside && /<\/testcase>/ { exit }
    inside && /SKIP: / { sub(/^.*SKIP: /, "SKIP: "); print; exit }' "$junit"
}
bad=0 skipped=0
while read -r name status; do
  [ "$status" = run ] || [ "$status" = fail ] && continue
  skipped=$((skipped + 1))
  reason=$(why "$name")
  if is_allowed "$name"; then
    echo "skip_check: allowed skip: $name (${reason:-$status})"
  else
    echo "skip_check: FAIL: $name did not run (${reason:-$status}) and is not in $(basename "$allowed")"
    bad=$((bad + 1))
  fi
done <<<"$cases"
echo "skip_check: $total tests, $skipped not run, $bad of them not allowed"
[ "$bad" = 0 ]
