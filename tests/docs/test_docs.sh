#!/bin/sh
# Runs tests/docs/check_docs.py on the user documentation (README.md, docs/, deploy/README.md),
# after negative controls that show the check catches what it looks for (a planted line per
# marker and per kind of history told in prose, a broken link, a figure or command cited from
# the README that it lacks, a message no source prints) and a control that the same words in
# current facts are not flagged.
# usage: test_docs.sh lint|troubleshooting SOURCE_DIR WORK_DIR
set -eu
mode=$1 src=$2 work=$3
check="$src/tests/docs/check_docs.py"
mkdir -p "$work"
if [ "$mode" = lint ]; then
  # negative controls: one planted line per pattern, each must be caught ...
  mkdir -p "$work/docs"
  printf '# Planted\n\nThe learner runs at 161.6 updates/s; run it with `sac-learner --env Pendulum-v1`.\n' >"$work/README.md"
  cat >"$work/docs/planted.md" <<'PLANTED'
Measured on 2026-01-02 at commit 1a2b3c4d (issue 12), this session; see [x](nope.md).

After the fix the shard acks in 2 ms.

The code as it was before the service was rebuilt ("before") ran slower.

| step | after, local | before, local |
| --- | --- | --- |

In an earlier run the learner reached -150.

Runs A–E below show the proof; run C failed.

Every run of the suite on this branch passed; see h15-wal for the code.

The kernel was changed after the run.

The learner used to wait 5 s here.

The README's table gives 230 updates/s on 2 threads.

The README gives the `ctest -j2` timings.
PLANTED
  out=$(python3 "$check" lint "$work" "$work/docs/planted.md" || true)
  for what in "a commit hash" "a date" "an issue number" "session talk" "broken relative link" \
    ":3: history in a manual (before/after a change)" ":5: history in a manual (before/after a change)" \
    ":5: history in a manual (a before/after comparison)" ":7: history in a manual (a before/after comparison)" \
    ":10: history in a manual (an earlier run or version)" ":12: history in a manual (runs named by letter" \
    ":14: history in a manual (a branch name): 'on this branch'" ":14: history in a manual (a branch name): 'h15-wal'" \
    ":16: history in a manual (a change told as history)" ":18: history in a manual (a change told as history)" \
    "cites README for '230 updates/s'" "cites README for \`ctest -j2\`"; do
    echo "$out" | grep -qF -- "$what" || { echo "FAIL: the negative control's '$what' was not caught:"; echo "$out"; exit 1; }
  done
  # ... and the same words in current facts must not be (the patterns' precision)
  cat >"$work/docs/clean.md" <<'CLEAN'
A shard that no longer answers is dropped; the flag is used to print the sizes. After the
build, run the tests; before the first update the actors act at random. The previous batch
is kept. The sum tree's branch factor is 2. Run a test with `ctest -R x`. The README's
first command runs at 161.6 updates/s (`sac-learner --env Pendulum-v1`).

| field | when |
| --- | --- |
| activation | after every layer but the last |
CLEAN
  out=$(python3 "$check" lint "$work" "$work/docs/clean.md" || true)
  echo "$out" | grep -q "^docs/clean.md" && { echo "FAIL: the lint flags current facts:"; echo "$out"; exit 1; }
  n=$(wc -l <"$src/README.md")
  [ "$n" -le 150 ] || { echo "FAIL: README.md has $n lines, more than 150 (a landing page; details go in docs/)"; exit 1; }
  files="$src/README.md $src/deploy/README.md"
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
