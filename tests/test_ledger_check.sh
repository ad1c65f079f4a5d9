#!/usr/bin/env bash
# Unit test of the ledger checker (scripts/ledger_check.sh) on crafted inputs: a clean
# match, a missing batch, a batch stored twice (acknowledged or not), a row count that
# differs, a ledger appended to after an actor's restart, a batch of a shard whose
# provenance was not given, and the inputs it must refuse (empty, unknown, malformed,
# a shard given twice). Each case checks the exit status and the per-actor figures.
#
# usage: test_ledger_check.sh [PATH/TO/ledger_check.sh]
set -u
CHECK=${1:-"$(dirname "$0")/../scripts/ledger_check.sh"}
T=$(mktemp -d "${TMPDIR:-/tmp}/ledger_check.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
fails=0

# expect NAME STATUS PATTERN... -- FILES...: runs the checker on FILES; its exit status
# must be STATUS and its output must hold every PATTERN (grep -E).
expect() {
  local name=$1 want=$2 out rc p
  shift 2
  local pats=()
  while [[ $1 != -- ]]; do
    pats+=("$1")
    shift
  done
  shift
  out=$(sh "$CHECK" -v "$@" 2>&1)
  rc=$?
  if [[ $rc != "$want" ]]; then
    echo "FAIL $name: exit $rc, expected $want; output:"
    echo "$out"
    fails=$((fails + 1))
    return
  fi
  for p in "${pats[@]}"; do
    if ! grep -qE -- "$p" <<<"$out"; then
      echo "FAIL $name: no line matching /$p/ in:"
      echo "$out"
      fails=$((fails + 1))
      return
    fi
  done
  echo "ok   $name"
}

# two actors, two shards; actor 1 restarted (a second header, a new session)
cat >"$T/a0.ledger" <<'EOF'
# sacfleet ledger v1 actor=0 pid=11
0 0 1000 1 64
0 1 1000 1 64
0 0 1000 2 64
0 1 1000 2 17
EOF
cat >"$T/a1.ledger" <<'EOF'
# sacfleet ledger v1 actor=1 pid=12
1 0 2000 1 64
1 0 2000 2 64
# sacfleet ledger v1 actor=1 pid=13
1 0 2001 1 64
EOF
cat >"$T/s0.prov" <<'EOF'
# sacfleet provenance v1 shard=0 incarnation=5
0 1000 1 64
1 2000 1 64
0 1000 2 64
1 2000 2 64
1 2001 1 64
1 2001 2 64
EOF
cat >"$T/s1.prov" <<'EOF'
# sacfleet provenance v1 shard=1 incarnation=6
0 1000 1 64
0 1000 2 17
EOF

expect clean 0 \
  '^ledger actor 0: acknowledged 4, found once 4, missing 0, found twice 0$' \
  '^ledger actor 1: acknowledged 3, found once 3, missing 0, found twice 0$' \
  'ledger total: acknowledged 7, found once 7, missing 0, found twice 0, rows differ 0; shards: 0\(incarnation 5\) 1\(incarnation 6\); 8 batches stored, 1 of them in no ledger' \
  -- "$T/a0.ledger" "$T/s0.prov" "$T/a1.ledger" "$T/s1.prov"

# a lost batch: shard 1 lost actor 0's seq 2 (a snapshot older than the ack)
grep -v '^0 1000 2 17$' "$T/s1.prov" >"$T/s1.lost"
expect missing 1 \
  '^ledger actor 0: acknowledged 4, found once 3, missing 1, found twice 0$' \
  '^ledger actor 1: acknowledged 3, found once 3, missing 0, found twice 0$' \
  'missing: actor 0 shard 1 session 1000 seq 2 \(17 rows\)$' \
  -- "$T/a0.ledger" "$T/a1.ledger" "$T/s0.prov" "$T/s1.lost"

# an acknowledged batch stored twice (a resend stored again), and an unacknowledged one
cp "$T/s0.prov" "$T/s0.twice"
echo '0 1000 1 64' >>"$T/s0.twice"
echo '1 2001 2 64' >>"$T/s0.twice"
expect twice 1 \
  '^ledger actor 0: acknowledged 4, found once 3, missing 0, found twice 1$' \
  '^ledger actor 1: acknowledged 3, found once 3, missing 0, found twice 1$' \
  'twice: actor 0 shard 0 session 1000 seq 1$' \
  -- "$T/a0.ledger" "$T/a1.ledger" "$T/s0.twice" "$T/s1.prov"

# the shard holds another row count than was acknowledged
sed 's/^0 1000 2 17$/0 1000 2 16/' "$T/s1.prov" >"$T/s1.rows"
expect rows_differ 1 \
  '^ledger actor 0: acknowledged 4, found once 4, missing 0, found twice 0, rows differ 1$' \
  'rows differ: actor 0 shard 1 session 1000 seq 2: acknowledged 17, stored 16' \
  -- "$T/a0.ledger" "$T/a1.ledger" "$T/s0.prov" "$T/s1.rows"

# without shard 1's provenance, actor 0's batches there are missing, and said why
expect shard_not_given 1 \
  '^ledger actor 0: acknowledged 4, found once 2, missing 2, found twice 0$' \
  'and no provenance of shard 1 was given' \
  -- "$T/a0.ledger" "$T/a1.ledger" "$T/s0.prov"

# a shard that restarted with a new incarnation but kept everything: still clean
sed 's/incarnation=5/incarnation=77/' "$T/s0.prov" >"$T/s0.inc"
expect new_incarnation 0 'shards: 0\(incarnation 77\) 1\(incarnation 6\)' \
  -- "$T/a0.ledger" "$T/a1.ledger" "$T/s0.inc" "$T/s1.prov"

# refused inputs: exit 2 with the reason
: >"$T/empty"
expect empty_file 2 'is empty' -- "$T/a0.ledger" "$T/empty"
echo 'hello' >"$T/junk"
expect unknown_file 2 'neither a ledger' -- "$T/a0.ledger" "$T/junk"
{ cat "$T/a0.ledger"; echo '0 0 1000 3'; } >"$T/a0.bad"
expect malformed_ledger 2 'malformed ledger line "0 0 1000 3"' -- "$T/a0.bad" "$T/s0.prov"
{ cat "$T/s1.prov"; echo '0 1000 x 64'; } >"$T/s1.bad"
expect malformed_provenance 2 'malformed provenance line' -- "$T/a0.ledger" "$T/s0.prov" "$T/s1.bad"
expect shard_twice 2 'shard 0 given twice' -- "$T/a0.ledger" "$T/s0.prov" "$T/s0.inc"
sh "$CHECK" >/dev/null 2>&1
rc=$?
if [[ $rc == 2 ]]; then echo "ok   no_arguments"; else
  echo "FAIL no_arguments: exit $rc"
  fails=$((fails + 1))
fi

# speed: 200,000 acknowledged batches over 8 actors and 4 shards, checked in bounded time
awk -v T="$T" 'BEGIN {
  for (a = 0; a < 8; a++) print "# sacfleet ledger v1 actor=" a " pid=1" > (T "/big" a ".ledger")
  for (s = 0; s < 4; s++) print "# sacfleet provenance v1 shard=" s " incarnation=1" > (T "/big" s ".prov")
  for (i = 0; i < 200000; i++) {
    a = i % 8; s = int(i / 8) % 4; q = int(i / 32) + 1
    print a, s, "1234567890123450" a, q, 64 > (T "/big" a ".ledger")
    print a, "1234567890123450" a, q, 64 > (T "/big" s ".prov")
  }
}'
t0=$SECONDS
expect large_clean 0 'ledger total: acknowledged 200000, found once 200000, missing 0, found twice 0' \
  -- "$T"/big*.ledger "$T"/big*.prov
echo "     (200,000 batches checked in $((SECONDS - t0)) s)"

if ((fails)); then
  echo "FAIL: $fails case(s)"
  exit 1
fi
echo "PASS: ledger checker"
