#!/usr/bin/env bash
# Smoke test of sac-bench-sumtree: a small tree (100,000 leaves, 3 rounds of 50 calls) must
# print its RESULT line with every figure a positive finite number of nanoseconds, and exit 0.
# The checker is shown to catch what it looks for on doctored output first (negative
# controls: a figure of 0, a nan, the line missing). Usage: test_bench_sumtree.sh BENCH
set -euo pipefail
bench=${1:?usage: test_bench_sumtree.sh BENCH}
keys="find_n_ns find_ns set_n_ns lines_ns find_n_per_lines"

check() {
  awk -v keys="$keys" '
    /^RESULT leaves=/ {
      n++
      for (i = 2; i <= NF; i++) { split($i, p, "="); kv[p[1]] = p[2] }
      nk = split(keys, k, " ")
      for (j = 1; j <= nk; j++) {
        v = kv[k[j]]
        if (v !~ /^[0-9]+(\.[0-9]+)?$/ || v + 0 <= 0) { print "not a positive finite " k[j] ": " $0; bad = 1 }
      }
    }
    END {
      if (n != 1) { print "expected 1 RESULT line, got " n + 0; bad = 1 }
      exit bad
    }' <<<"$1"
}

good="RESULT leaves=100000 batch=256 levels=5 find_n_ns=30.1 find_ns=80.2 set_n_ns=15.0 lines_ns=31.0 find_n_per_lines=0.971"
check "$good" >/dev/null || { echo "FAIL: the checker refuses good output"; exit 1; }
for bad in "${good/find_n_ns=30.1/find_n_ns=0}" "${good/set_n_ns=15.0/set_n_ns=nan}" "no result here"; do
  if check "$bad" >/dev/null; then
    echo "FAIL: the checker passed doctored output: $bad"
    exit 1
  fi
done
echo "negative controls: a zero, a nan and a missing line are caught"

out=$("$bench" --leaves 100000 --rounds 3 --calls 50)
echo "$out"
check "$out"
echo "PASS"
