#!/usr/bin/env bash
# shellcheck disable=SC2317 # functions below are called through wait_until
# The actors' drain at exit, and the check the fault suite and the power-cut test make of
# it (lib_fault.sh's drained_clean: no batch left unacknowledged at exit, none unsent):
#   1. max_steps: an actor takes 3000 steps and exits; its drain leaves nothing
#      unacknowledged (the check passes), and its ledger check is clean;
#   2. SIGTERM: an actor streaming is told to stop; it sends its last batch and drains
#      (the check passes);
#   3. NEGATIVE CONTROL: the shard is stopped (SIGSTOP) while an actor streams, and the
#      actor, told to stop, drains for --drain_timeout_ms 500: it must log batches
#      unacknowledged at exit, and the check MUST fail on it (the test passes only if it
#      does); the shard is then continued;
#   4. the rate limiter after the learner: a shard with samples_per_insert, a learner
#      that runs to its end, an actor streaming on (it takes no weights from that learner,
#      so no step budget either): once the learner has gone the shard
#      holds the actor's batches, until --limiter_idle_ms after its last sample request
#      (here 2000) the limiter stops holding inserts back (the shard logs it, with the
#      held batches it then stores, which must be > 0); the actor, stopped after that,
#      drains completely (the check passes) and its ledger check is clean.
#      (LIMITER_IDLE_MS=0 shows the old behaviour: the batches stay held, and the check
#      fails.)
#
# usage: drain_control.sh SAC_LEARNER SAC_ACTOR SAC_REPLAY
# env:   LIMITER_IDLE_MS (2000), DIST_DEADLINE_S (240), DIST_KEEP=1 keeps the logs.
export DIST_LEARNING_STARTS=${DIST_LEARNING_STARTS:-300} DIST_BATCH=${DIST_BATCH:-64}
source "$(dirname "$0")/../dist/lib.sh"
# shellcheck source=tests/fault/lib_fault.sh
source "$(dirname "$0")/lib_fault.sh"
dist_init drain_control 240
check_binaries "$@"
command -v curl >/dev/null || skip "needs curl to read /provenance"
IDLE_MS=${LIMITER_IDLE_MS:-2000}

LEDGERS="$T/ledgers"
mkdir -p "$LEDGERS"
SHARD_OPTS=(--durability=wal --snapshot_path="$T/shard0.snap" --samples_per_insert=0 --min_size=64)
# shellcheck disable=SC2034 # read by lib.sh's start_local_actor
WEIGHTS_PORT=$(pick_port) # steps 1-3: random actions, no learner
ledger_lines() {
  local n
  n=$(grep -vc '^#' "$1" 2>/dev/null)
  printf '%s' "${n:-0}"
}
grown() { (($(ledger_lines "$1") >= $2)); }

start_local_shard shard0 1 0 "${SHARD_OPTS[@]}"

# 1. max_steps ---------------------------------------------------------------------------
start_local_actor actor0 1 0 --max_steps=3000 --weights_wait_ms=0 --ledger="$LEDGERS/actor0.ledger"
done0() { exited "$(pid_of actor0)"; }
wait_until 60 "actor0 taking 3000 steps" done0
[[ "$(rc_of "$(pid_of actor0)")" == 0 ]] || fail "actor0 exited with $(rc_of "$(pid_of actor0)")"
drained_clean actor0 || fail "max_steps: $DRAIN_WHY"
log "1. max_steps: $(since_start actor0 | grep -a ' done: ' | sed 's/^.*actor: //')"

# 2. SIGTERM while streaming -------------------------------------------------------------
start_local_actor actor1 1 1 --weights_wait_ms=0 --ledger="$LEDGERS/actor1.ledger"
wait_until 60 "actor1's first acknowledged batches" grown "$LEDGERS/actor1.ledger" 10
stop_clean actor1
drained_clean actor1 || fail "SIGTERM: $DRAIN_WHY"
LEDGER_EXPECT=2 ledger_require_clean sigterm shard0
log "2. SIGTERM: $(since_start actor1 | grep -a ' done: ' | sed 's/^.*actor: //'); ledger $LEDGER_FIG"

# 3. NEGATIVE CONTROL: the shard stalled, a short drain ----------------------------------
start_local_actor actor2 1 2 --weights_wait_ms=0 --drain_timeout_ms=500 --ledger="$LEDGERS/actor2.ledger"
wait_until 60 "actor2's first acknowledged batches" grown "$LEDGERS/actor2.ledger" 10
kill -STOP "$(pid_of shard0)"
sleep 0.3 # batches sent into the stalled shard
stop_clean actor2
kill -CONT "$(pid_of shard0)"
if drained_clean actor2; then
  fail "NEGATIVE CONTROL: actor2 drained for 500 ms into a stopped shard and the check saw nothing left unacknowledged: $(since_start actor2 | grep -a ' done: ')"
fi
neg=$DRAIN_WHY
log "3. NEGATIVE CONTROL: the check fails as it must: $neg"
stop_clean shard0

# 4. the rate limiter after the learner's end --------------------------------------------
unset 'SHARD_INS[0]' 'SHARD_SMP[0]'
LEDGERS="$T/ledgers-limiter"
mkdir -p "$LEDGERS"
start_local_shard shardL 1 0 --durability=wal --snapshot_path="$T/shardL.snap" \
  --samples_per_insert=$((BATCH * UTD)) --limiter_idle_ms="$IDLE_MS"
start_local_learner learner "" --total_steps=1500 --hidden=32 --eval_episodes=2
# actorL takes no weights from this learner: an actor that follows the learner's step budget
# stops stepping when the run is over (test_waits), and this step needs one streaming on
start_local_actor actorL 1 0 --ledger="$LEDGERS/actorL.ledger" --weights="tcp://127.0.0.1:$(pick_port)" --weights_wait_ms=0
# shellcheck disable=SC2034 # read by wait_result and wait_until (lib.sh)
DIST_WATCH="shardL actorL"
wait_result learner 60
log "learner: $(result_line learner)"
idle_line() { since_start shardL | grep -a 'no sample request for' | tail -n 1; }
held=0
if ((IDLE_MS > 0)); then
  opened() { [[ -n "$(idle_line)" ]]; }
  wait_until 30 "shardL's rate limiter idle after the learner's end (limiter_idle_ms $IDLE_MS)" opened
  held=$(idle_line | sed -n 's/.*back (\([0-9][0-9]*\) batch(es) held are stored).*/\1/p')
  ((${held:-0} > 0)) || fail "shardL held no batch when its limiter went idle ('$(idle_line)'): the learner's end did not hold the actor back, so this step proves nothing"
  grown_again() { (($(ledger_lines "$LEDGERS/actorL.ledger") > L0)); }
  L0=$(ledger_lines "$LEDGERS/actorL.ledger")
  wait_until 30 "actorL's batches acknowledged after the limiter went idle" grown_again
else
  sleep 3 # LIMITER_IDLE_MS=0: the limiter never goes idle; the actor's batches stay held
fi
stop_clean actorL
drained_clean actorL || fail "the rate limiter after the learner: $DRAIN_WHY"
LEDGER_EXPECT=1 ledger_require_clean limiter shardL
no_crash_in_logs
pass "the drain leaves nothing unacknowledged at max_steps, at SIGTERM and after the learner's end (shardL stored the $held held batch(es) $IDLE_MS ms after the last sample request; ledger $LEDGER_FIG); NEGATIVE CONTROL: a 500 ms drain into a stopped shard fails the check: $neg"
