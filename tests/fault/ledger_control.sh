#!/usr/bin/env bash
# shellcheck disable=SC2317 # functions below are called through wait_until
# The ledger check's control (issue 15, point 6): kill -9 of a shard holding batches that
# were acknowledged after its last snapshot, then the ledger check (scripts/ledger_check.sh)
# of the actors' ledgers against the restarted shard's provenance.
#   MODE snapshot (the NEGATIVE CONTROL): an acknowledgement means "in memory"; the kill
#     loses every batch acknowledged after the snapshot, and the checker MUST report
#     exactly those as missing: the test passes only if it does. A checker (or a fault
#     suite) that cannot see this loss proves nothing when it reports 0.
#   MODE wal: the same kill; the write-ahead log holds those batches, and the checker must
#     find every acknowledged batch exactly once.
#
# Steps, deterministic (no race with a periodic snapshot: the interval is an hour):
#   1. one shard (--durability MODE, no rate limiter), 2 actors that take 3000 steps each
#      with --ledger and exit (their batches acknowledged: the ledger check must be clean);
#   2. SIGUSR1: the shard writes a snapshot ("requested snapshot: 6000 transitions");
#   3. the 2 actors again (new processes, new sessions), 3000 steps each, exit;
#      the ledger check, shard alive: clean, 12000 transitions' batches acknowledged;
#   4. kill -9 of the shard (reaped with 137), restart from its snapshot (and log), a new
#      incarnation id;
#   5. the ledger check: snapshot: missing = the batches of step 3, found twice 0, exit 1;
#      wal: missing 0, found twice 0, exit 0.
#
# usage: ledger_control.sh snapshot|wal SAC_LEARNER SAC_ACTOR SAC_REPLAY
# env:   DIST_DEADLINE_S (240), DIST_KEEP=1 keeps the logs.
MODE=${1:-}
shift
source "$(dirname "$0")/../dist/lib.sh"
# shellcheck source=tests/fault/lib_fault.sh
source "$(dirname "$0")/lib_fault.sh"
[[ "$MODE" == snapshot || "$MODE" == wal ]] || { echo "usage: $0 snapshot|wal SAC_LEARNER SAC_ACTOR SAC_REPLAY"; exit 2; }
dist_init "ledger_control_$MODE" 240
check_binaries "$@"
command -v curl >/dev/null || skip "needs curl to read /provenance"
# (the help captured first: with pipefail, "cmd | grep -q" fails on a match when grep exits
# before cmd's last write and cmd dies of SIGPIPE; CI's ASan build lost that race)
replay_help=$("$REPLAY" --help 2>&1)
grep -q -- '--durability' <<<"$replay_help" || fail "$REPLAY has no --durability option"

STEPS=3000 # per actor and phase: 3000 / 64 rows = 47 batches each
LEDGERS="$T/ledgers"
LEDGER_EXPECT=2 # one ledger per actor, each with acknowledged batches (lib_fault.sh)
mkdir -p "$LEDGERS"
SHARD_OPTS=(--durability="$MODE" --snapshot_path="$T/shard0.snap" --snapshot_interval_s=3600
  --samples_per_insert=0 --min_size=64)
# shellcheck disable=SC2034 # read by lib.sh's start_local_actor
WEIGHTS_PORT=$(pick_port) # actors take random actions: no learner, nothing on this port

# actors_run PHASE: actors 0 and 1 take STEPS steps each and exit 0.
actors_run() {
  local i
  for i in 0 1; do
    start_local_actor "actor$i" 2 "$i" --max_steps=$STEPS --weights_wait_ms=0 \
      --ledger="$LEDGERS/actor$i.ledger"
  done
  both_done() { exited "$(pid_of actor0)" && exited "$(pid_of actor1)"; }
  wait_until 60 "actors 0 and 1 taking $STEPS steps ($1)" both_done
  for i in 0 1; do
    [[ "$(rc_of "$(pid_of "actor$i")")" == 0 ]] || fail "actor$i ($1) exited with $(rc_of "$(pid_of "actor$i")")"
    grep -aq "unacknowledged at exit" <<<"$(since_start "actor$i")" &&
      fail "actor$i ($1) left batches unacknowledged: $(since_start "actor$i" | grep -a unacknowledged)"
  done
  return 0
}
ledger_lines() { cat "$LEDGERS"/*.ledger | grep -vc '^#'; }

# 1. a shard, a first phase of batches --------------------------------------------------
start_local_shard shard0 1 0 "${SHARD_OPTS[@]}"
actors_run "phase 1"
ledger_require_clean phase1 shard0
acked1=$(ledger_lines)

# 2. a snapshot, on request -------------------------------------------------------------
kill -USR1 "$(pid_of shard0)"
snapped() { since_start shard0 | grep -aq 'requested snapshot: '; }
wait_until 30 "shard0's requested snapshot" snapped
snap_n=$(since_start shard0 | sed -n 's/.*requested snapshot: \([0-9][0-9]*\) transitions.*/\1/p' | tail -n 1)
((snap_n == 2 * STEPS)) || fail "shard0's snapshot holds $snap_n transitions, expected $((2 * STEPS))"

# 3. a second phase: acknowledged after the snapshot ------------------------------------
actors_run "phase 2"
since_start shard0 | grep -aq 'periodic snapshot: ' && fail "a periodic snapshot happened (interval 3600 s?)"
ledger_require_clean before-kill shard0
acked=$(ledger_lines)
acked2=$((acked - acked1))
((acked2 > 0)) || fail "no batch acknowledged after the snapshot"
inc_before=$(incarnation_of "$T/ledger-before-kill/shard0.prov")
log "$acked batches acknowledged: $acked1 before the snapshot, $acked2 after it"

# 4. kill -9 of the shard, restart from its snapshot (and log) --------------------------
pid=$(pid_of shard0)
kill9 shard0
[[ "${DIST_RC_OF[$pid]}" == 137 ]] || fail "shard0 ended with ${DIST_RC_OF[$pid]}, not 137 (SIGKILL)"
start_local_shard shard0 1 0 "${SHARD_OPTS[@]}"
log "restarted: $(since_start shard0 | grep -a -i 'restored\|wal\|write-ahead\|snapshot' | head -n 3 | sed 's/^.*replay: //' | paste -sd ';' -)"

# 5. the ledger check --------------------------------------------------------------------
rc=0
ledger_check after-kill shard0 || rc=$?
prov_rows_match_stored after-kill shard0
inc_after=$(incarnation_of "$T/ledger-after-kill/shard0.prov")
[[ -n "$inc_after" && "$inc_after" != "$inc_before" ]] ||
  fail "shard0's incarnation did not change across the restart ('$inc_before' -> '$inc_after')"
cat "$T/ledger-after-kill/check.txt"
if [[ "$MODE" == snapshot ]]; then
  ((rc == 1)) || fail "NEGATIVE CONTROL: the checker did not report the loss (exit $rc, $LEDGER_FIG)"
  [[ "$LEDGER_FIG" == "acknowledged $acked, found once $acked1, missing $acked2, found twice 0" ]] ||
    fail "NEGATIVE CONTROL: expected 'acknowledged $acked, found once $acked1, missing $acked2, found twice 0', got '$LEDGER_FIG'"
  pass "NEGATIVE CONTROL: --durability snapshot, kill -9 after the snapshot: the checker reports the loss: $LEDGER_FIG (the $acked2 batches acknowledged after the snapshot; incarnation $inc_before -> $inc_after)"
fi
((rc == 0)) || fail "--durability wal lost or duplicated batches across kill -9: $LEDGER_FIG"
[[ "$LEDGER_FIG" == "acknowledged $acked, found once $acked, missing 0, found twice 0" ]] ||
  fail "expected 'acknowledged $acked, found once $acked, missing 0, found twice 0', got '$LEDGER_FIG'"
pass "--durability wal, kill -9 after the snapshot: $LEDGER_FIG ($acked2 batches acknowledged after the snapshot, all recovered; incarnation $inc_before -> $inc_after)"
