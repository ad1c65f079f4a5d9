#!/bin/sh
# Runs tests/docs/check_docs.py on the user documentation, after a negative control that
# shows the check catches what it looks for (a planted marker, a broken link, a message no
# source prints).
# usage: test_docs.sh lint|troubleshooting SOURCE_DIR WORK_DIR
set -eu
mode=$1 src=$2 work=$3
check="$src/tests/docs/check_docs.py"
mkdir -p "$work"
if [ "$mode" = lint ]; then
  printf 'Measured on 2026-01-02 at commit 1a2b3c4d (issue 12), this session; see [x](nope.md).\n' \
    >"$work/planted.md"
  out=$(python3 "$check" lint "$work" "$work/planted.md" || true)
  for what in "a commit hash" "a date" "an issue number" "session talk" "broken relative link"; do
    echo "$out" | grep -q "$what" || { echo "FAIL: the negative control's $what was not caught:"; echo "$out"; exit 1; }
  done
  n=$(wc -l <"$src/README.md")
  [ "$n" -le 150 ] || { echo "FAIL: README.md has $n lines, more than 150 (a landing page; details go in docs/)"; exit 1; }
  files="$src/README.md"
  for f in "$src"/docs/*.md; do files="$files $f"; done
  # shellcheck disable=SC2086
  exec python3 "$check" lint "$src" $files
fi
sed 's/is too small for 2 embedded shard/is too little for 2 embedded shard/' \
  "$src/docs/TROUBLESHOOTING.md" >"$work/TROUBLESHOOTING.md"
if python3 "$check" troubleshooting "$src" "$work/TROUBLESHOOTING.md" >"$work/control.out"; then
  echo "FAIL: the negative control (a reworded message) was not caught"
  exit 1
fi
grep -q "not printed by the sources" "$work/control.out" || { cat "$work/control.out"; exit 1; }
exec python3 "$check" troubleshooting "$src" "$src/docs/TROUBLESHOOTING.md"
