#!/usr/bin/env bash
# shellcheck disable=SC2317 # functions below are called through wait_until
# A full disk under a streaming shard (docs/RELIABILITY.md "A full disk"): the shard's
# snapshot and write-ahead log live on a small tmpfs this test mounts (and unmounts); an
# actor with a ledger streams into it; then a file fills the tmpfs.
#   1. the shard answers the inserts it cannot log "not durable": the actor counts them
#      (sac_actor_not_durable_replies_total) and keeps its batches, the shard counts them
#      (sac_replay_inserts_not_durable_total), stays up, says why on /healthz (503,
#      "inserts refused") and in sac_replay_wal_state 1;
#   2. kill -9 of the shard and a restart on the still-full disk: it starts, and answers
#      the same way (it does not stop at the first write);
#   3. the file is removed: the shard resumes by itself (no restart), /healthz 200, the
#      actor's batches are acknowledged again;
#   4. the actor stops and drains; the ledger check: every acknowledged batch once.
# Needs root (mount); exits 77 (skip) without it.
#
# usage: disk_full.sh SAC_LEARNER SAC_ACTOR SAC_REPLAY
# env:   DIST_DEADLINE_S (180), DIST_KEEP=1 keeps the logs.
source "$(dirname "$0")/../dist/lib.sh"
# shellcheck source=tests/fault/lib_fault.sh
source "$(dirname "$0")/lib_fault.sh"
dist_init disk_full 180
check_binaries "$@"
command -v curl >/dev/null || skip "needs curl to read /healthz and /provenance"
((EUID == 0)) || skip "needs root to mount a small tmpfs"
VOL=$T/vol
mkdir -p "$VOL"
mount -t tmpfs -o size=6m tmpfs "$VOL" 2>/dev/null || skip "cannot mount a tmpfs at $VOL"
on_cleanup umount -l "$VOL"

LEDGERS="$T/ledgers"
LEDGER_EXPECT=1
mkdir -p "$LEDGERS"
# shellcheck disable=SC2034 # read by lib.sh's start_local_actor
WEIGHTS_PORT=$(pick_port) # the actor takes random actions: no learner
PI=$(pick_port) PS=$(pick_port)
# shellcheck disable=SC2034 # read by lib.sh's start_local_actor
SHARD_INS[0]="tcp://127.0.0.1:$PI"

start_shard() {
  rm -f "$T/shard0.ready"
  # shellcheck disable=SC2046
  start shard0 "$REPLAY" $(shard_args 1 0) --insert_endpoint="tcp://127.0.0.1:$PI" \
    --sample_endpoint="tcp://127.0.0.1:$PS" --ready_file="$T/shard0.ready" --durability=wal \
    --snapshot_path="$VOL/shard0.snap" --snapshot_interval_s=3600 --wal_max_mb=0 --samples_per_insert=0 \
    --min_size=64 --capacity=400000
  wait_ready shard0 "$START_PID" 30 || fail "shard0 cannot bind its endpoints"
}
value() {
  local v
  v=$(metric "$1" "$2")
  printf '%s' "${v%.*}"
}
healthz() { curl -s --max-time 2 -w ' %{http_code}' "http://127.0.0.1:$(metrics_port shard0)/healthz" 2>/dev/null; }
ledger_lines() { grep -vc '^#' "$LEDGERS/actor0.ledger" 2>/dev/null || echo 0; }
grew() { (($(ledger_lines) >= GROW_FROM + 5)); }
refusing() { [[ "$(value shard0 sac_replay_wal_state)" == 1 ]]; }
resumed() { [[ "$(value shard0 sac_replay_wal_state)" == 0 ]] && grew; }

start_shard
start_local_actor actor0 1 0 --max_steps=2000000 --weights_wait_ms=0 --ledger="$LEDGERS/actor0.ledger"
GROW_FROM=0
wait_until 60 "the actor's first acknowledged batches" grew

# 1. the disk fills up
dd if=/dev/zero of="$VOL/filler" bs=64k 2>/dev/null
df_line=$(df -k "$VOL" | tail -n 1)
log "tmpfs full: $df_line"
wait_until 30 "the shard to refuse inserts on the full disk" refusing
nd=$(value actor0 sac_actor_not_durable_replies_total)
sd=$(value shard0 sac_replay_inserts_not_durable_total)
for ((i = 0; i < 50 && ${nd:-0} == 0; i++)); do
  sleep 0.2
  nd=$(value actor0 sac_actor_not_durable_replies_total)
done
((${nd:-0} > 0)) || fail "the actor got no 'not durable' answer on a full disk (silence)"
((${sd:-0} > 0)) || fail "the shard counted no insert answered 'not durable'"
h=$(healthz)
[[ "$h" == *" 503" && "$h" == *"inserts refused"* ]] || fail "/healthz on a full disk answered: $h"
log "1. full disk: the actor counted $nd 'not durable' answers, the shard $sd; /healthz: ${h% *}"

# 2. a restart on the still-full disk: it starts and refuses the same way
kill9 shard0
start_shard
wait_until 30 "the restarted shard to refuse inserts on the still-full disk" refusing
sleep 1
alive "$(pid_of shard0)" || fail "the restarted shard stopped on the still-full disk (exit $(rc_of "$(pid_of shard0)"))"
log "2. restarted on the still-full disk: up, inserts answered not durable ($(value shard0 sac_replay_inserts_not_durable_total) so far)"

# 3. room again: it resumes by itself. The volume also grows (as an operator extends a full
# one): the actor streams as fast as it can, and on the 6 MiB left by the filler alone its
# log would fill the disk again before the drain below
rm -f "$VOL/filler"
mount -o remount,size=512m "$VOL" || fail "cannot grow the tmpfs at $VOL"
GROW_FROM=$(ledger_lines)
wait_until 60 "the shard to acknowledge again once the disk has room" resumed
h=$(healthz)
[[ "$h" == *" 200" ]] || fail "/healthz after the disk has room again answered: $h"
log "3. room again: acknowledged again without a restart, /healthz: ${h% *}"

# 4. the actor drains; every acknowledged batch once
stop_clean actor0
drained_clean actor0 || fail "end: $DRAIN_WHY"
ledger_require_clean end shard0
pass "a full disk: answered 'not durable' ($nd answers counted by the actor), the shard up on it and after a restart on it, resumed by itself when it had room; $LEDGER_FIG"
