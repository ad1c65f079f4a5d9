#!/usr/bin/env bash
# Smoke test of sac-bench-service (the feed with the null backend): a tiny run of both
# settings (realistic: the rate limiter at the batch with inserters keeping pace, the
# write-ahead log with fsync in a directory on disk, the direct intake; easy: limiter off,
# durability none, direct intake) over inproc with 1 shard and loopback TCP with 2,
# uniform and prioritised, one run of two windows of 0.2 s, must print for every one of
# the 8 rows a RESULT line that names its whole configuration (setting, transport, shards,
# sampler, filled, samples_per_insert, intake, durability) beside a positive finite
# updates_per_s, with the realistic rows' inserts moving (inserted_rows_per_s > 0), and
# exit 0. The checker is shown to catch what it looks for on doctored output first
# (negative controls: a figure of 0, a nan, a missing row, a configuration field left out,
# realistic inserts that stood still). Usage: test_bench_service.sh BENCH
set -euo pipefail
bench=${1:?usage: test_bench_service.sh BENCH}
want=8
keys="setting transport shards sampler filled samples_per_insert intake durability"

# check OUTPUT: `want` RESULT lines, each with every key of the configuration and a
# positive finite updates_per_s; realistic ones with inserted_rows_per_s > 0
check() {
  awk -v want="$want" -v keys="$keys" '
    /^RESULT setting=/ {
      n++
      delete kv
      for (i = 2; i <= NF; i++) { split($i, p, "="); kv[p[1]] = p[2] }
      nk = split(keys, k, " ")
      for (j = 1; j <= nk; j++) if (!(k[j] in kv) || kv[k[j]] == "") { print "no " k[j] "= in: " $0; bad = 1 }
      v = kv["updates_per_s"]
      if (v !~ /^[0-9]+(\.[0-9]+)?$/ || v + 0 <= 0) { print "not a positive finite figure: " $0; bad = 1 }
      if (kv["setting"] == "realistic" && !(kv["inserted_rows_per_s"] + 0 > 0)) { print "inserts stood still: " $0; bad = 1 }
    }
    END {
      if (n != want) { print "expected " want " RESULT lines, got " n + 0; bad = 1 }
      exit bad
    }' <<<"$1"
}

good=""
for set in realistic easy; do
  for t in inproc tcp; do
    for s in uniform prioritized; do
      good+="RESULT setting=$set transport=$t shards=1 sampler=$s filled=8192 samples_per_insert=256 intake=decode"
      good+=" durability=wal updates_per_s=1234.5 inserted_rows_per_s=12"$'\n'
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
  echo "FAIL: the checker accepts a missing row"; exit 1
fi
if check "${good/ durability=wal/}" >/dev/null; then
  echo "FAIL: the checker accepts a row that does not name its durability"; exit 1
fi
if check "${good/inserted_rows_per_s=12/inserted_rows_per_s=0}" >/dev/null; then
  echo "FAIL: the checker accepts realistic inserts that stood still"; exit 1
fi

# the shards' log on disk, as the realistic setting asks (not a tmpfs /tmp)
dir=$(mktemp -d "${SAC_TEST_DISK_DIR:-/var/tmp}/test_bench_service.XXXXXX")
trap 'rm -rf "$dir"' EXIT
set +e
out=$(timeout 150 "$bench" --runs 1 --seconds 0.2 --windows 2 --filled 8192 --dir "$dir" \
  --configs inproc:1,tcp:2 --samplers uniform,prioritized --settings realistic,easy 2>&1)
rc=$?
set -e
echo "$out"
if [ "$rc" -ne 0 ]; then
  echo "FAIL: sac-bench-service exited with $rc"
  exit 1
fi
check "$out" || { echo "FAIL: sac-bench-service stopped producing figures"; exit 1; }
echo "PASS: $want rows, each naming its configuration with a positive finite updates/s"
