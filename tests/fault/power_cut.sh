#!/usr/bin/env bash
# shellcheck disable=SC2317 # functions below are called through wait_until
# Power cuts under a streaming shard: "acknowledged" must mean "on disk", not "in the
# page cache". The shard's snapshot and write-ahead log live on tests/forgetfs, a FUSE
# file system that keeps everything not yet fsynced in its own memory; a power cut is
# SIGKILL of the shard and forgetfs's drop (what was not synced is gone, as on a real
# machine losing power; in some trials a random part of it made it to disk: some pages
# and not others, a torn prefix of a write), then a restart on what survived. Three
# actors with ledgers stream all along and resend what was not acknowledged (duplicates
# of what the cut kept included).
#   MODE fsync (the default durability, --wal_sync_ms 2): after every trial the ledger
#     check (scripts/ledger_check.sh: the actors' ledgers against the restarted shard's
#     provenance) must show 0 acknowledged batches missing and 0 stored twice.
#   MODE nofsync (the NEGATIVE CONTROL, --wal_sync_ms -1: written to the kernel, never
#     synced): the same cuts must make the checker report missing acknowledged batches;
#     the test passes only if it does. A kill -9 test cannot see this loss.
# The trials of fsync go round these kinds of cut, and the counts of each are printed:
#   before   before the restarted shard's first snapshot (the log alone holds its data)
#   held     while an ack waits for its group commit (sac_replay_wal_acks_waiting > 0)
#   snapshot in the middle of writing a snapshot (forgetfs cuts right after the Nth write
#            of the snapshot's temporary file, the snapshot asked for with SIGUSR1)
#   rename   right after the snapshot's rename, before its directory fsync
#   rotation right after the log's truncation that follows a snapshot, before its fsync
#   rotated  right after that fsync (the snapshot and the emptied log are all there is)
#   after    at once when the snapshot counter moved (--snapshot_interval_s 0.5)
#   fsync    an fsync of the log fails and loses its pages (forgetfs fail_fsync): the
#            shard must acknowledge nothing more (sac_replay_wal_state 2), then the cut
# Every third trial drops only a random part of the unsynced writes; every fifth restart
# is cut again at once (before the resends), as a restarted shard can lose power too.
# Restarts alternate --snapshot_interval_s 3 and 0.5.
#
# usage: power_cut.sh fsync|nofsync SAC_LEARNER SAC_ACTOR SAC_REPLAY FORGETFS
# env:   TRIALS (24; nofsync 10 at most: it stops after 3 that lost acknowledged batches), DIST_DEADLINE_S (380), DIST_KEEP=1 keeps the logs.
MODE=${1:-}
shift
FORGETFS=${4:-}
source "$(dirname "$0")/../dist/lib.sh"
# shellcheck source=tests/fault/lib_fault.sh
source "$(dirname "$0")/lib_fault.sh"
# shellcheck source=tests/forgetfs/lib_forgetfs.sh
source "$(dirname "$0")/../forgetfs/lib_forgetfs.sh"
[[ "$MODE" == fsync || "$MODE" == nofsync ]] || {
  echo "usage: $0 fsync|nofsync SAC_LEARNER SAC_ACTOR SAC_REPLAY FORGETFS"
  exit 2
}
dist_init "power_cut_$MODE" 380
check_binaries "$1" "$2" "$3"
[[ -x "$FORGETFS" ]] || fail "not an executable: $FORGETFS"
command -v curl >/dev/null || skip "needs curl to read /provenance"
# without fsync the actors are not slowed by the group commit and reach their 1,200,000
# steps (the ring's bound) in about 25 s: the control makes 10 cuts, well within that
TRIALS_DEFAULT=24
[[ "$MODE" == nofsync ]] && TRIALS_DEFAULT=10
TRIALS=${TRIALS:-$TRIALS_DEFAULT}
DISK=$T/disk MNT=$T/mnt
forgetfs_mount "$FORGETFS" "$DISK" "$MNT"
on_cleanup forgetfs_umount

LEDGERS="$T/ledgers"
mkdir -p "$LEDGERS"
SYNC=2
[[ "$MODE" == nofsync ]] && SYNC=-1
SHARD_OPTS=(--durability=wal --wal_sync_ms="$SYNC" --snapshot_path="$MNT/shard0.snap"
  --samples_per_insert=0 --min_size=64 --capacity=4000000)
INTERVAL=30 # the first trial cuts before any snapshot
# shellcheck disable=SC2034 # read by lib.sh's start_local_actor
WEIGHTS_PORT=$(pick_port) # actors take random actions: no learner
PI=$(pick_port) PS=$(pick_port)
# shellcheck disable=SC2034 # read by lib.sh's start_local_actor
SHARD_INS[0]="tcp://127.0.0.1:$PI"

start_shard() {
  rm -f "$T/shard0.ready"
  # shellcheck disable=SC2046
  start shard0 "$REPLAY" $(shard_args 1 0) --insert_endpoint="tcp://127.0.0.1:$PI" \
    --sample_endpoint="tcp://127.0.0.1:$PS" --ready_file="$T/shard0.ready" "${SHARD_OPTS[@]}" \
    --snapshot_interval_s="$INTERVAL"
  wait_ready shard0 "$START_PID" 30 || fail "shard0 cannot bind its endpoints"
  DUP_BASE=$(dups_now)
}

ctl() { echo "$1" >"$MNT/.forgetfs" || fail "forgetfs refused the command '$1'"; }
ctl_val() { sed -n "s/^$1 //p" "$MNT/.forgetfs"; }
power_is_off() { [[ "$(ctl_val power)" == off ]]; }

# the duplicates each started shard acknowledged (resends of batches it already held: kept
# through a cut) are added up before each cut (the counter starts from the snapshot's)
DUPS=0 DUP_BASE=0
dups_now() {
  local d
  d=$(metric shard0 sac_replay_duplicate_batches_total)
  d=${d%.*}
  printf '%s' "${d:-0}"
}
count_dups() {
  local d
  d=$(dups_now)
  ((d > DUP_BASE)) && DUPS=$((DUPS + d - DUP_BASE))
  DUP_BASE=$d
}

# power_cut: SIGKILL of the shard, then everything not synced is dropped.
power_cut() {
  count_dups
  kill9 shard0
  forgetfs_drop || fail "forgetfs did not drop"
}

# armed_cut WHAT CUT_AFTER_ARGS: forgetfs cuts the power right after the operation named
# (the snapshot it belongs to asked for with SIGUSR1); then SIGKILL, power back on.
armed_cut() {
  count_dups
  ctl "cut_after $2"
  kill -USR1 "$(pid_of shard0)"
  wait_until 20 "forgetfs to cut the power $1 ($2)" power_is_off
  kill9 shard0
  ctl power_on
}

ledger_lines() { cat "$LEDGERS"/*.ledger 2>/dev/null | grep -vc '^#'; }
grew_since() { (($(ledger_lines) >= GROW_FROM + GROW_BY)); }
acks_waiting() {
  local v
  v=$(metric shard0 sac_replay_wal_acks_waiting)
  [[ -n "$v" ]] && awk -v v="$v" 'BEGIN { exit !(v > 0) }'
}
snapshots_now() {
  local v
  v=$(metric shard0 sac_replay_snapshots_total)
  printf '%s' "${v%.*}"
}
snapshot_moved() { (($(snapshots_now) > SNAP_FROM)); }
wal_state() {
  local v
  v=$(metric shard0 sac_replay_wal_state)
  printf '%s' "${v%.*}"
}
fail_stopped_or_acked() { [[ "$(wal_state)" == 2 ]] || (($(ledger_lines) >= GROW_FROM + 3)); }

# the ring (4,000,000 slots) holds every row the actors can send (3 x 1,200,000 steps), so
# nothing is evicted (an evicted batch would read as missing)
start_shard
for i in 0 1 2; do
  start_local_actor "actor$i" 3 "$i" --max_steps=1200000 --weights_wait_ms=0 --ledger="$LEDGERS/actor$i.ledger"
done
GROW_FROM=0 GROW_BY=2
wait_until 60 "the actors' first acknowledged batches" grew_since

KINDS=(before held snapshot rename rotation rotated after fsync)
declare -A CUT_COUNT=()
missing_trials=0 missing_max=0 acked=0 double=0 partial=0
for ((k = 1; k <= TRIALS; k++)); do
  kind=random
  [[ "$MODE" == fsync ]] && kind=${KINDS[$(((k - 1) % ${#KINDS[@]}))]}
  GROW_FROM=$(ledger_lines) GROW_BY=2
  wait_until 60 "the ledgers growing before cut $k" grew_since
  if ((k % 3 == 0)); then
    ctl "seed $k"
    ctl "partial on"
    partial=$((partial + 1))
  fi
  how=$kind
  case $kind in
  random | before)
    if [[ $kind == before ]]; then
      n=$(snapshots_now)
      [[ -z "$n" || "$n" == 0 ]] || fail "cut $k: the shard took a snapshot before the cut meant to come before one"
    fi
    sleep "0.$((RANDOM % 4))"
    power_cut
    ;;
  held)
    for ((w = 0; w < 200; w++)); do acks_waiting && break; done
    ((w < 200)) || how="held (no ack was seen held: cut at once)"
    power_cut
    ;;
  snapshot) armed_cut "in the middle of a snapshot" "$((1 + RANDOM % 6)) 0 write /shard0.snap.tmp" ;;
  rename) armed_cut "after the snapshot's rename" "1 0 rename /shard0.snap.tmp" ;;
  rotation) armed_cut "after the log's truncation" "1 0 truncate /shard0.snap.wal" ;;
  rotated) armed_cut "after the log's truncation was synced" "1 1 truncate /shard0.snap.wal" ;;
  after)
    SNAP_FROM=$(snapshots_now)
    wait_until 30 "a periodic snapshot before cut $k" snapshot_moved
    power_cut
    ;;
  fsync)
    GROW_FROM=$(ledger_lines)
    ctl "fail_fsync 1 /shard0.snap.wal"
    wait_until 30 "the log's failed fsync to stop the acknowledgements" fail_stopped_or_acked
    [[ "$(wal_state)" == 2 ]] ||
      fail "cut $k: an fsync of the log failed and the shard went on acknowledging ($(($(ledger_lines) - GROW_FROM)) batches since)"
    code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://127.0.0.1:$(metrics_port shard0)/healthz")
    [[ "$code" == 503 ]] || fail "cut $k: /healthz answered $code after a failed fsync"
    power_cut
    ;;
  esac
  if ((k % 3 == 0)); then
    ctl "partial off"
    how="$how, a random part of the unsynced writes kept"
  fi
  CUT_COUNT[$kind]=$((${CUT_COUNT[$kind]:-0} + 1))
  # the restart's snapshot interval: long before a cut meant to come before any snapshot,
  # short before one timed against the snapshot counter, else 3 s and 0.5 s in turn
  next=${KINDS[$((k % ${#KINDS[@]}))]}
  if [[ "$MODE" == fsync && $next == before ]]; then
    INTERVAL=30
  elif [[ "$MODE" == fsync && $next == after ]] || ((k % 2 == 0)); then
    INTERVAL=0.5
  else
    INTERVAL=3
  fi
  start_shard
  if ((k % 5 == 0)); then
    power_cut # again, right after the restart: before the resends arrive
    start_shard
    how="$how, then again right after the restart"
    double=$((double + 1))
  fi
  # the actors resend what was not acknowledged; the check runs once they made progress
  GROW_FROM=$(ledger_lines) GROW_BY=2
  wait_until 60 "the actors acknowledged again after cut $k" grew_since
  rc=0
  ledger_check "cut$k" shard0 || rc=$?
  log "cut $k ($how): $LEDGER_FIG"
  [[ "$LEDGER_FIG" =~ ^acknowledged\ ([0-9]+),\ found\ once\ ([0-9]+),\ missing\ ([0-9]+),\ found\ twice\ ([0-9]+)$ ]] ||
    fail "cut $k: unexpected ledger figures '$LEDGER_FIG'"
  acked=${BASH_REMATCH[1]} miss=${BASH_REMATCH[3]} twice=${BASH_REMATCH[4]}
  ((twice == 0)) || fail "cut $k: $twice batches stored twice ($LEDGER_FIG)"
  if ((miss > 0)); then
    missing_trials=$((missing_trials + 1))
    ((miss > missing_max)) && missing_max=$miss
    [[ "$MODE" == fsync ]] && fail "cut $k ($how): acknowledged batches lost in a power cut: $LEDGER_FIG
$(cat "$T/ledger-cut$k/check.txt")"
  fi
  ((rc == 0 || miss > 0)) || fail "cut $k: the checker failed without a loss: $(cat "$T/ledger-cut$k/check.txt")"
  # the negative control has shown what it must after 3 lossy trials: its actors, never
  # held back by an fsync, would otherwise reach their --max_steps (bounded by the ring)
  # before the trials end on a fast machine
  if [[ "$MODE" == nofsync ]] && ((missing_trials >= 3)); then
    TRIALS=$k
    break
  fi
done
count_dups
ledger_errors_zero actor0 actor1 actor2
for f in "$LEDGERS"/actor{0,1,2}.ledger; do
  (($(grep -vc '^#' "$f") > 0)) || fail "$(basename "$f"): no acknowledged batch in it"
done
# the end: the actors are stopped, drain (the shard is up: none may leave a batch
# unacknowledged at exit or unsent; tests/fault/drain_control.sh is this check's negative
# control), and (fsync: nothing may be missing) the last ledger check covers what they drained
stop_clean actor0 actor1 actor2
drained_clean actor0 actor1 actor2 || fail "end: $DRAIN_WHY"
if [[ "$MODE" == fsync ]]; then
  LEDGER_EXPECT=3 ledger_require_clean end shard0
  log "end: the actors drained, nothing unacknowledged at exit; $LEDGER_FIG"
fi
cuts=$((TRIALS + double))
if [[ "$MODE" == nofsync ]]; then
  ((missing_trials > 0)) ||
    fail "NEGATIVE CONTROL: $cuts power cuts with --wal_sync_ms -1 and the checker saw no acknowledged batch missing ($LEDGER_FIG): the test cannot tell fsync from no fsync"
  pass "NEGATIVE CONTROL: --wal_sync_ms -1, $cuts power cuts in $TRIALS trials: the checker reported acknowledged batches missing after $missing_trials of them (up to $missing_max; last: $LEDGER_FIG)"
fi
counts=""
for kind in "${KINDS[@]}"; do counts="$counts $kind ${CUT_COUNT[$kind]:-0},"; done
if [[ "$MODE" == fsync ]]; then
  for kind in snapshot rename rotation rotated; do
    ((${CUT_COUNT[$kind]:-0} > 0)) || fail "no cut of kind '$kind' in $TRIALS trials: give at least ${#KINDS[@]}"
  done
fi
pages=$(ctl_val "partial_pages")
pass "power cuts: $TRIALS trials ($cuts cuts:${counts%,}; $double cut again right after the restart; $partial keeping a random part of the unsynced writes: pages $pages), $DUPS duplicates acknowledged across cuts, $acked acknowledged batches, missing 0, found twice 0 after every trial"
