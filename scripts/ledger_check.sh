#!/bin/sh
# The ledger checker (issue 15): proves that no batch a shard acknowledged is lost and none
# is stored twice, by matching what the actors were promised against what the shards hold.
#
# Inputs are files of two kinds, told apart by their first line:
#   - an actor's ledger (sac-actor --ledger, actor/ledger.h):
#       # sacfleet ledger v1 actor=<id> pid=<pid>      (again at each restart of the actor)
#       <actor_id> <shard_id> <session> <seq> <rows>   one per acknowledged batch
#   - a shard's provenance (GET /provenance on its metrics port, or
#     sac-replay --print_provenance SNAPSHOT; replay/provenance.h):
#       # sacfleet provenance v1 shard=<shard_id> incarnation=<u64>
#       <actor_id> <session> <seq> <rows>              one per stored batch
# A batch is the key (actor, shard, session, seq): seq counts per actor and shard. Per actor
# it prints one line
#   ledger actor <id>: acknowledged A, found once O, missing M, found twice D
# (A = distinct batches in its ledgers; O + M + (acknowledged batches found twice) = A;
# D counts every batch of that actor a shard holds more than once, acknowledged or not),
# then a total line with the shards' incarnations, and, with -v, up to 10 missing or
# twice-stored keys per kind. A ledger row count that differs from the shard's is counted
# as "rows differ" and fails too: the shard holds something other than what was sent.
#
# Exit status: 0 clean; 1 missing > 0, found twice > 0 or rows differ > 0; 2 bad usage or
# an input that is neither kind, is empty, has a malformed line, or names a shard twice.
# The rings must be sized so that nothing is evicted: an evicted batch reads as missing.
#
# POSIX sh and awk only (no gawk extensions): it runs wherever the tests run.
#
# usage: ledger_check.sh [-v] FILE...
set -u
verbose=0
if [ "${1:-}" = "-v" ]; then
  verbose=1
  shift
fi
if [ $# -eq 0 ]; then
  echo "usage: ledger_check.sh [-v] FILE... (actors' ledgers and shards' provenance, in any order)" >&2
  exit 2
fi
for f in "$@"; do
  if [ ! -r "$f" ]; then
    echo "ledger_check: cannot read $f" >&2
    exit 2
  fi
  if [ ! -s "$f" ]; then
    echo "ledger_check: $f is empty (neither a ledger nor a provenance listing)" >&2
    exit 2
  fi
done

exec awk -v verbose="$verbose" '
function bad(msg) {
  printf "ledger_check: %s:%d: %s\n", FILENAME, FNR, msg > "/dev/stderr"
  err = 1
  exit 2
}
function num(s) { return s ~ /^[0-9]+$/ }
FNR == 1 {
  if ($0 ~ /^# sacfleet ledger v1 /) kind = "L"
  else if ($0 ~ /^# sacfleet provenance v1 /) {
    kind = "P"
    shard = ""; inc = ""
    for (i = 5; i <= NF; i++) {
      if ($i ~ /^shard=[0-9]+$/) shard = substr($i, 7)
      else if ($i ~ /^incarnation=[0-9]+$/) inc = substr($i, 13)
    }
    if (shard == "" || inc == "") bad("provenance header without shard= and incarnation=")
    if (shard in shards) bad("shard " shard " given twice (also in " shardfile[shard] ")")
    shards[shard] = inc; shardfile[shard] = FILENAME; nshards++
    shardlist = shardlist " " shard "(incarnation " inc ")"
  } else bad("neither a ledger (# sacfleet ledger v1) nor a provenance listing (# sacfleet provenance v1)")
  next
}
/^#/ {
  # a later header: an actor restarted and appended, or a comment
  if (kind == "L" && $0 !~ /^# sacfleet ledger v1 /) bad("unexpected comment in a ledger")
  next
}
kind == "L" {
  if (NF != 5 || !num($1) || !num($2) || !num($3) || !num($4) || !num($5))
    bad("malformed ledger line \"" $0 "\"")
  k = $1 SUBSEP $2 SUBSEP $3 SUBSEP $4
  if (k in acked) { ledger_dups++; next }
  acked[k] = $5
  actor[$1] = 1
  nack[$1]++
  next
}
kind == "P" {
  if (NF != 4 || !num($1) || !num($2) || !num($3) || !num($4))
    bad("malformed provenance line \"" $0 "\"")
  k = $1 SUBSEP shard SUBSEP $2 SUBSEP $3
  stored[k]++
  srows[k] = $4
  actor[$1] = 1
  nstored++
  if (stored[k] == 2) { twice[$1]++; dupkeys = dupkeys "\n  twice: actor " $1 " shard " shard " session " $2 " seq " $3 }
  next
}
END {
  if (err) exit 2
  total_a = total_o = total_m = total_d = total_r = total_extra = 0
  for (k in acked) {
    split(k, p, SUBSEP)
    a = p[1]
    if (!(k in stored)) {
      miss[a]++
      if (nmiss++ < 10) misskeys = misskeys "\n  missing: actor " a " shard " p[2] " session " p[3] " seq " p[4] " (" acked[k] " rows)" (p[2] in shards ? "" : ", and no provenance of shard " p[2] " was given")
      continue
    }
    if (stored[k] == 1) once[a]++
    if (srows[k] != acked[k]) {
      rdiff[a]++
      if (nrd++ < 10) rdkeys = rdkeys "\n  rows differ: actor " a " shard " p[2] " session " p[3] " seq " p[4] ": acknowledged " acked[k] ", stored " srows[k]
    }
  }
  for (k in stored) if (!(k in acked)) total_extra++
  # actors in numeric order: a simple insertion sort (POSIX awk has no asort)
  n = 0
  for (a in actor) { ids[++n] = a + 0 }
  for (i = 2; i <= n; i++) { v = ids[i]; j = i - 1; while (j > 0 && ids[j] > v) { ids[j + 1] = ids[j]; j-- } ids[j + 1] = v }
  for (i = 1; i <= n; i++) {
    a = ids[i] ""
    A = nack[a] + 0; O = once[a] + 0; M = miss[a] + 0; D = twice[a] + 0; R = rdiff[a] + 0
    printf "ledger actor %s: acknowledged %d, found once %d, missing %d, found twice %d%s\n", a, A, O, M, D, (R ? sprintf(", rows differ %d", R) : "")
    total_a += A; total_o += O; total_m += M; total_d += D; total_r += R
  }
  printf "ledger total: acknowledged %d, found once %d, missing %d, found twice %d, rows differ %d; shards:%s; %d batches stored, %d of them in no ledger (sent, stored, not acknowledged yet or the ack not logged)%s\n", total_a, total_o, total_m, total_d, total_r, (nshards ? shardlist : " none"), nstored, total_extra, (ledger_dups ? sprintf("; %d repeated ledger lines", ledger_dups) : "")
  details = misskeys dupkeys rdkeys
  if (verbose && details != "") print substr(details, 2)
  exit (total_m > 0 || total_d > 0 || total_r > 0) ? 1 : 0
}' "$@"
