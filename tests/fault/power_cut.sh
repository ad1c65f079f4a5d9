#!/usr/bin/env bash
# shellcheck disable=SC2317 # functions below are called through wait_until
# Power cuts under a streaming shard: "acknowledged" must mean "on disk", not "in the
# page cache". The shard's snapshot and write-ahead log live on tests/forgetfs, a FUSE
# file system that keeps everything not yet fsynced in its own memory; a power cut is
# SIGKILL of the shard followed by forgetfs's drop (what was not synced is gone, as on a
# real machine losing power), then a restart on what survived. Three actors with ledgers
# stream all along and resend what was not acknowledged.
#   MODE fsync (the default durability, --wal_sync_ms 2): after every trial the ledger
#     check (scripts/ledger_check.sh: the actors' ledgers against the restarted shard's
#     provenance) must show 0 acknowledged batches missing and 0 stored twice.
#   MODE nofsync (the NEGATIVE CONTROL, --wal_sync_ms -1: written to the kernel, never
#     synced): the same cuts must make the checker report missing acknowledged batches;
#     the test passes only if it does. A kill -9 test cannot see this loss.
# Trials: TRIALS (default 20; 10 for the control) cuts, each after the actors' ledgers grew; every second cut
# waits for an ack held for a group commit (sac_replay_wal_acks_waiting > 0 on the shard's
# /metrics) and cuts at once; every fifth restart is cut again as soon as the shard is
# ready (before the resends: a shard restarted on what survived can lose power too), then
# restarted once more. (A cut between a restarted shard's ack of a resent duplicate and
# its next group commit cannot be timed from here; tests/test_replay_wal.c's
# restart_syncs_the_replayed_log_and_snapshot_before_serving shows that hole.)
#
# usage: power_cut.sh fsync|nofsync SAC_LEARNER SAC_ACTOR SAC_REPLAY FORGETFS
# env:   TRIALS (20; nofsync 10), DIST_DEADLINE_S (280), DIST_KEEP=1 keeps the logs.
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
dist_init "power_cut_$MODE" 280
check_binaries "$1" "$2" "$3"
[[ -x "$FORGETFS" ]] || fail "not an executable: $FORGETFS"
command -v curl >/dev/null || skip "needs curl to read /provenance"
# without fsync the actors are not slowed by the group commit and reach their 1,200,000
# steps (the ring's bound) in about 25 s: the control makes 10 cuts, well within that
TRIALS_DEFAULT=20
[[ "$MODE" == nofsync ]] && TRIALS_DEFAULT=10
TRIALS=${TRIALS:-$TRIALS_DEFAULT}
DISK=$T/disk MNT=$T/mnt
forgetfs_mount "$FORGETFS" "$DISK" "$MNT"
on_cleanup forgetfs_umount

LEDGERS="$T/ledgers"
mkdir -p "$LEDGERS"
SYNC=2
[[ "$MODE" == nofsync ]] && SYNC=-1
SHARD_OPTS=(--durability=wal --wal_sync_ms="$SYNC" --snapshot_path="$MNT/shard0.snap" --snapshot_interval_s=3
  --samples_per_insert=0 --min_size=64 --capacity=4000000)
# shellcheck disable=SC2034 # read by lib.sh's start_local_actor
WEIGHTS_PORT=$(pick_port) # actors take random actions: no learner
PI=$(pick_port) PS=$(pick_port)
# shellcheck disable=SC2034 # read by lib.sh's start_local_actor
SHARD_INS[0]="tcp://127.0.0.1:$PI"

start_shard() {
  rm -f "$T/shard0.ready"
  # shellcheck disable=SC2046
  start shard0 "$REPLAY" $(shard_args 1 0) --insert_endpoint="tcp://127.0.0.1:$PI" \
    --sample_endpoint="tcp://127.0.0.1:$PS" --ready_file="$T/shard0.ready" "${SHARD_OPTS[@]}"
  wait_ready shard0 "$START_PID" 30 || fail "shard0 cannot bind its endpoints"
}

# power_cut: SIGKILL of the shard, then everything not synced is dropped.
power_cut() {
  kill9 shard0
  forgetfs_drop || fail "forgetfs did not drop within 100 ms"
}

ledger_lines() { cat "$LEDGERS"/*.ledger 2>/dev/null | grep -vc '^#'; }
grew_since() { (($(ledger_lines) >= GROW_FROM + 6)); }
acks_waiting() {
  local v
  v=$(metric shard0 sac_replay_wal_acks_waiting)
  [[ -n "$v" ]] && awk -v v="$v" 'BEGIN { exit !(v > 0) }'
}

# the ring (4,000,000 slots) holds every row the actors can send (3 x 1,200,000 steps), so
# nothing is evicted (an evicted batch would read as missing)
start_shard
for i in 0 1 2; do
  start_local_actor "actor$i" 3 "$i" --max_steps=1200000 --weights_wait_ms=0 --ledger="$LEDGERS/actor$i.ledger"
done
GROW_FROM=0
wait_until 60 "the actors' first acknowledged batches" grew_since

missing_trials=0 missing_max=0 acked=0 in_flight=0 double=0
for ((k = 1; k <= TRIALS; k++)); do
  GROW_FROM=$(ledger_lines)
  wait_until 60 "the ledgers growing before cut $k" grew_since
  how="at a random point"
  if ((k % 2 == 0)); then
    # group commit in flight: an ack is held for an fsync (under --wal_sync_ms -1 no ack is
    # ever held: cut at once)
    if [[ "$MODE" == fsync ]]; then
      for ((w = 0; w < 200; w++)); do acks_waiting && break; done
      ((w < 200)) && how="with acks held for a group commit" && in_flight=$((in_flight + 1))
    fi
  else
    sleep "0.$((RANDOM % 10))"
  fi
  power_cut
  start_shard
  if ((k % 5 == 0)); then
    power_cut # again, right after the restart: before the resends arrive
    start_shard
    how="$how, then again right after the restart"
    double=$((double + 1))
  fi
  # the actors resend what was not acknowledged; the check runs once they made progress
  GROW_FROM=$(ledger_lines)
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
done
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
pass "power cuts: $TRIALS trials ($cuts cuts: $in_flight with acks held for a group commit, $double cut again right after the restart), $acked acknowledged batches, missing 0, found twice 0 after every trial"
