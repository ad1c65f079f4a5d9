#!/usr/bin/env bash
# Smoke test of sac-bench-service (the service ceiling with the null backend): a tiny run
# (inproc with 1 shard and loopback TCP with 2, uniform and prioritised, 0 and 2 actors,
# two windows of 0.2 s) must print, for every one of the 8 configurations, a RESULT line
# with a positive finite updates/s, and exit 0. The checker is shown to catch what it
# looks for on doctored output first (negative controls: a figure of 0, a nan, a missing
# configuration). Usage: test_bench_service.sh BENCH
set -euo pipefail
bench=${1:?usage: test_bench_service.sh BENCH}
want=8

# check OUTPUT: every RESULT line positive and finite, and `want` of them
check() {
  awk -v want="$want" '
    /^RESULT / {
      n++
      v = ""
      for (i = 2; i <= NF; i++) if ($i ~ /^updates_per_s=/) { split($i, kv, "="); v = kv[2] }
      if (v !~ /^[0-9]+(\.[0-9]+)?$/ || v + 0 <= 0) { print "not a positive finite figure: " $0; bad = 1 }
    }
    END {
      if (n != want) { print "expected " want " RESULT lines, got " n + 0; bad = 1 }
      exit bad
    }' <<<"$1"
}

good=""
for t in inproc tcp; do
  for s in uniform prioritized; do
    for a in 0 2; do
      good+="RESULT transport=$t shards=1 sampler=$s actors=$a updates_per_s=1234.5 transitions_per_s=1"$'\n'
    done
  done
done
check "$good" >/dev/null || { echo "FAIL: the checker refuses good output"; exit 1; }
if check "${good/updates_per_s=1234.5/updates_per_s=0.0}" >/dev/null; then
  echo "FAIL: the checker accepts a figure of 0"; exit 1
fi
if check "${good/updates_per_s=1234.5/updates_per_s=nan}" >/dev/null; then
  echo "FAIL: the checker accepts nan"; exit 1
fi
if check "$(head -n 7 <<<"$good")" >/dev/null; then
  echo "FAIL: the checker accepts a missing configuration"; exit 1
fi

set +e
out=$(timeout 120 "$bench" --seconds 0.2 --windows 2 --prefill 4096 --configs inproc:1,tcp:2 \
  --samplers uniform,prioritized --actors 0,2 2>&1)
rc=$?
set -e
echo "$out"
if [ "$rc" -ne 0 ]; then
  echo "FAIL: sac-bench-service exited with $rc"
  exit 1
fi
check "$out" || { echo "FAIL: sac-bench-service stopped producing figures"; exit 1; }
echo "PASS: $want configurations, each with a positive finite updates/s"
