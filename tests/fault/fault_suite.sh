#!/usr/bin/env bash
# Fault injection (issue 8, point 1; issue 15): ONE Pendulum-v1 training run with a
# learner, 2 replay shards (--durability wal) and 4 actors as separate processes, during
# which five faults are injected in turn, each only once the previous one has been
# recovered from:
#   1. kill -9 of an actor, restarted at once with the same identity;
#   2. kill -9 of a shard (shortly after one of its periodic snapshots, so that batches
#      acknowledged after the snapshot exist and live only in its write-ahead log),
#      restarted on the same ports from its snapshot and log;
#   3. kill -9 of the learner, restarted with --config RUN/config.txt --resume RUN;
#   4. SIGSTOP of a shard for longer than every client timeout (resend 2 s, sample
#      request 1 s + 2 s, info 0.5 s), then SIGCONT;
#   5. a network cut between an actor's network namespace and a shard's: the veth link
#      that joins the two goes down for a while and comes back.
#
# What is lost or duplicated is measured, not inferred from counters: every actor keeps a
# ledger of the batches a shard acknowledged (sac-actor --ledger), every shard a
# provenance index of the batches it holds (GET /provenance), and after each fault's
# recovery scripts/ledger_check.sh matches them: it must find every acknowledged batch
# exactly once (missing 0, found twice 0). The rings hold the whole run, so nothing is
# evicted. The figures go into each result line and the table. After the clean stop the
# same check runs on what the shards left on disk (sac-replay --print_provenance of each
# final snapshot and its log).
#
# Each fault must also prove that it happened, or the suite fails:
#   - a killed process: reaped with status 137 (SIGKILL); a restarted actor appends a
#     second header to its ledger (a new process, a new session);
#   - the shard restart: its provenance header shows a new incarnation id;
#   - SIGSTOP: the shard's state is T (stopped) in /proc and its /metrics (a heartbeat the
#     test polls every 0.5 s) goes unanswered for most of the stop: a heartbeat gap;
#   - the network cut: the link is DOWN (ip link), the cut actor's resends
#     (sac_actor_batches_resent_total) or unacknowledged batches (sac_actor_unacked_batches)
#     rise during the cut, and the shard stores none of that actor's batches sent after
#     the link went down (its provenance: no seq above the actor's batches sent at the
#     cut; batches sent before it may still be admitted from the shard's held queue)
#     until the link is back, and then it does.
# After each: every other process is still running (no crash) and the run goes on (the
# learner's update counter and the shards' insert and sample counters move again). The
# learner must resume from its latest checkpoint and the run must still reach the
# evaluation bar (final eval return >= -200). Prints a table: fault, injected at, proof,
# recovered, ledger figures, time to recover.
#
# Waits fail when nothing progresses (the learner's steps and updates, the actors' steps)
# for a stated time, never at a fixed instant (tests/dist/lib.sh, DIST_PROGRESS): a busy
# machine makes the run slower, not failed. DIST_DEADLINE_S is only a backstop.
#
# Topology: learner, shard0 and actors 0-2 in the host's network namespace, on
# 127.0.0.1; shard1 and actor3 each in a network namespace of their own, made by this
# test, on a bridge in a third one with a leg to the host (an interface of this test's
# own, $FNET.1/24), plus a direct veth link between actor3's and shard1's namespaces.
# actor3 sends to shard1 only, over that link (the one fault 5 cuts), so that while it
# is cut actor3 can store nothing and its recovery is visible; it takes weights from the
# learner, which binds its weights endpoint on the host leg's address. The host's
# processes reach shard1 over the host leg. Every /metrics is on the loopback of the
# process's namespace. Without root or namespaces everything runs on 127.0.0.1, fault 5
# is skipped, and the test exits 77 (SKIP) if everything else passed.
#
# The negative control of this ledger check is tests/fault/ledger_control.sh snapshot
# (ctest fault_ledger_negative_control): the same shard kill under --durability snapshot
# must make the checker report the batches it lost. At the end every actor must have
# drained (no batch unacknowledged at exit); the negative control of that check is
# tests/fault/drain_control.sh (ctest fault_drain_control).
#
# usage: fault_suite.sh SAC_LEARNER SAC_ACTOR SAC_REPLAY
# env:   FAULT_TOTAL_STEPS (24000), FAULT_THRESHOLD (-200), FAULT_STOP_S (8), FAULT_CUT_S (10),
#        FAULT_STALL_S (120: a wait fails after this long without progress),
#        FAULT_NO_NETNS=1 (run as where namespaces are unavailable),
#        DIST_DEADLINE_S (1500: the whole test, a backstop), DIST_KEEP=1 keeps the logs.
source "$(dirname "$0")/../dist/lib.sh"
# shellcheck source=tests/fault/lib_fault.sh
source "$(dirname "$0")/lib_fault.sh"
dist_init fault_suite 1500
check_binaries "$@"
command -v curl >/dev/null || skip "needs curl to read /metrics"

S=2 N=4
TOTAL=${FAULT_TOTAL_STEPS:-24000}
THRESHOLD=${FAULT_THRESHOLD:--200}
STOP_S=${FAULT_STOP_S:-8}
CUT_S=${FAULT_CUT_S:-10}
SNAP_S=8        # shards' periodic snapshots
CKPT_EVERY=500  # learner checkpoints (updates)
STALL_S=${FAULT_STALL_S:-120} # every wait: fails after this long without progress
RECOVER_S=$STALL_S
LEDGERS="$T/ledgers"
LEDGER_EXPECT=4 # one ledger per actor, each with acknowledged batches (lib_fault.sh)
mkdir -p "$LEDGERS"

# ---------------------------------------------------------------- topology
NETNS=0
if [[ "${FAULT_NO_NETNS:-0}" == 1 ]]; then
  FAULT_NS_WHY="FAULT_NO_NETNS=1"
elif fault_ns_setup; then
  NETNS=1
  fault_ns_host shard1 12
  fault_ns_host actor3 103
  fault_ns_link actor3 shard1
  FAULT_NS[shard1]="${FAULT_P}shard1"
  FAULT_NS[actor3]="${FAULT_P}actor3"
  LEG=$FNET.1
  log "namespaces ${FAULT_NSES[*]}: host leg $FAULT_HOSTLEG $LEG, shard1 $FNET.12, actor3 $FNET.103, cut link $FLINK.1 <-> $FLINK.2"
fi
if ((!NETNS)); then
  LEG=127.0.0.1
  log "no network namespaces ($FAULT_NS_WHY): everything on 127.0.0.1, the network cut is skipped"
fi

P0I=$(pick_port) P0S=$(pick_port) WPORT=$(pick_port)
SHARD0_INS="tcp://127.0.0.1:$P0I"
if ((NETNS)); then
  SHARD1_INS="tcp://$FNET.12:5560" SHARD1_SMP="tcp://$FNET.12:5561"
  SHARD1_INS_A3="tcp://$FLINK.2:5560" # actor3 reaches shard1 over the cut link
else
  P1I=$(pick_port) P1S=$(pick_port)
  SHARD1_INS="tcp://127.0.0.1:$P1I" SHARD1_SMP="tcp://127.0.0.1:$P1S" SHARD1_INS_A3=$SHARD1_INS
fi
WEIGHTS="tcp://$LEG:$WPORT"

start_shard() {
  local id=$1 name=shard$1
  rm -f "$T/$name.ready"
  local snap=(--snapshot_path="$T/$name.snap" --snapshot_interval_s="$SNAP_S" --ready_file="$T/$name.ready"
    --durability=wal --limiter_idle_ms=10000)
  if ((id == 0)); then
    # shellcheck disable=SC2046
    start "$name" "$REPLAY" $(shard_args $S 0) --insert_endpoint="$SHARD0_INS" \
      --sample_endpoint="tcp://127.0.0.1:$P0S" "${snap[@]}"
  elif ((NETNS)); then
    # inside its own namespace shard1 binds every address it has (its hub address and
    # its end of the cut link): all of them are this test's
    # shellcheck disable=SC2046
    start "$name" ip netns exec "${FAULT_NS[shard1]}" "$REPLAY" $(shard_args $S 1) \
      --insert_endpoint='tcp://*:5560' --sample_endpoint="$SHARD1_SMP" "${snap[@]}"
  else
    # shellcheck disable=SC2046
    start "$name" "$REPLAY" $(shard_args $S 1) --insert_endpoint="$SHARD1_INS" --sample_endpoint="$SHARD1_SMP" "${snap[@]}"
  fi
  wait_ready "$name" "$START_PID" 30 || fail "$name cannot bind its endpoints"
}

start_actor() {
  local id=$1 ins="$SHARD0_INS,$SHARD1_INS" led="--ledger=$LEDGERS/actor$1.ledger"
  if ((id == 3 && NETNS)); then
    # (ip netns exec execs the binary: the PID recorded is the actor's own)
    # shellcheck disable=SC2046
    start actor3 ip netns exec "${FAULT_NS[actor3]}" "$ACTOR" $(actor_args $N 3) --shards="$SHARD1_INS_A3" \
      --weights="$WEIGHTS" "$led"
  elif ((id == 3)); then
    # shellcheck disable=SC2046
    start actor3 "$ACTOR" $(actor_args $N 3) --shards="$SHARD1_INS_A3" --weights="$WEIGHTS" "$led"
  else
    # shellcheck disable=SC2046
    start "actor$id" "$ACTOR" $(actor_args $N "$id") --shards="$ins" --weights="$WEIGHTS" "$led"
  fi
}

RUN="$T/runs/learner"
start_learner_first() {
  # shellcheck disable=SC2046
  start learner "$LEARNER" --shards="tcp://127.0.0.1:$P0S,$SHARD1_SMP" --weights="$WEIGHTS" $(learner_args learner) \
    --log_interval=1 --total_steps="$TOTAL" --lr=1e-3 --checkpoint_every=$CKPT_EVERY
  wait_learner_up learner "$START_PID" 60 || fail "learner cannot bind $WEIGHTS"
}

ALL="learner shard0 shard1 actor0 actor1 actor2 actor3"
watch_all_but() {
  local n w=""
  for n in $ALL; do [[ $n == "$1" ]] || w+=" $n"; done
  DIST_WATCH=$w
}

# ---------------------------------------------------------------- measures
learner_updates() { last_num "$T/learner.log" "learner: steps " "updates "; }
inserted() { metric "shard$1" sac_replay_inserted_transitions_total; }
sampled() { metric "shard$1" sac_replay_sampled_transitions_total; }
# wait_steps AT: waits until the learner is past AT steps and at least 500 past the
# previous fault's recovery, and fails when too little of the run is left for a fault
# and its recovery (FAULT_TOTAL_STEPS too small for this machine's pace).
wait_steps() {
  local at=$1 now
  now=$(learner_steps learner)
  ((${now:-0} + 500 > at)) && at=$((${now:-0} + 500))
  reached() { ge "$(learner_steps learner)" "$at"; }
  wait_until "$STALL_S" "the learner past $at steps" reached
  now=$(learner_steps learner)
  ((now + 2000 < TOTAL)) || fail "only $((TOTAL - now)) steps of the run left for the next fault: raise FAULT_TOTAL_STEPS"
}
# killed_by_sigkill NAME PID: the process was reaped with status 137 (128 + SIGKILL).
killed_by_sigkill() {
  [[ "${DIST_RC_OF[$2]:-}" == 137 ]] || fail "$1 (pid $2) ended with status '${DIST_RC_OF[$2]:-?}', not 137 (SIGKILL)"
}
# the shards the ledger check reads
SHARDS="shard0 shard1"

declare -a ROWS=()
row() { # fault, injected at, proof, recovered, time, notes (ledger figures: LEDGER_FIG)
  ROWS+=("| $1 | $2 | $3 | $4 | $LEDGER_FIG | $5 | $6 |")
  log "RESULT $1: happened ($3); recovered $4 in $5 s; ledger: $LEDGER_FIG [per actor acked/once/missing/twice: $LEDGER_ACTORS] ($6)"
}
print_table() {
  echo
  echo "| fault | injected at | proof it happened | recovered | ledger after recovery | time to recover (s) | notes |"
  echo "| --- | --- | --- | --- | --- | --- | --- |"
  local r
  for r in "${ROWS[@]}"; do echo "$r"; done
  echo
}
# injected-at label: test seconds and learner steps
at_label() { printf '%ds, step %s' "$SECONDS" "$(learner_steps learner)"; }

# ---------------------------------------------------------------- the run
for ((i = 0; i < S; i++)); do start_shard "$i"; done
start_learner_first
for ((i = 0; i < N; i++)); do start_actor "$i"; done
DIST_WATCH=$ALL
log "cluster up: shard0 $SHARD0_INS / tcp://127.0.0.1:$P0S, shard1 $SHARD1_INS / $SHARD1_SMP, weights $WEIGHTS, $TOTAL steps"
for n in $ALL; do
  has_metrics() { [[ -n "$(metric "$1" process_resident_memory_bytes)" ]]; }
  wait_until 30 "$n's /metrics" has_metrics "$n"
done

# 1. kill -9 of an actor --------------------------------------------------------------
wait_steps $((TOTAL * 15 / 100))
at=$(at_label)
watch_all_but actor0
pid=$(pid_of actor0)
heads0=$(grep -c '^# sacfleet ledger v1 ' "$LEDGERS/actor0.ledger")
kill9 actor0
killed_by_sigkill actor0 "$pid"
t0=$(now_ms)
start_actor 0
DIST_WATCH=$ALL
# recovered: the new actor0 acts with learned weights (its /metrics: a policy version
# above 0 and steps taken with the policy) and a shard acknowledged batches of its new
# session (its ledger has a second header and lines after it)
a0_first=""
on_weights() {
  local text v p b
  text=$(scrape actor0) || return 1
  v=$(mval sac_actor_policy_version <<<"$text") p=$(mval sac_actor_policy_steps_total <<<"$text")
  b=$(mval sac_actor_ledger_lines_total <<<"$text")
  [[ -z "$a0_first" ]] && ge "${b%.*}" 1 && a0_first="$(secs_since "$t0") s: $(mval sac_actor_env_steps_total <<<"$text") steps, $b batches acknowledged, policy v${v:-0}"
  ge "$v" 1 && ge "$p" 1 && ge "${b%.*}" 1
}
wait_until $RECOVER_S "the restarted actor0 acting on learned weights, its batches acknowledged" on_weights
rt=$(secs_since "$t0")
heads1=$(grep -c '^# sacfleet ledger v1 ' "$LEDGERS/actor0.ledger")
((heads1 == heads0 + 1)) || fail "actor0's ledger has $heads1 start header(s), expected $((heads0 + 1)) after its restart"
ledger_require_clean actor-kill $SHARDS
row "kill -9 actor0" "$at" "reaped with 137; a new process: ledger header $heads1 (pid $(pid_of actor0))" yes "$rt" \
  "restarted with the same actor id; after $a0_first; on learned weights v$(metric actor0 sac_actor_policy_version) after $rt s"

# 2. kill -9 of a shard ---------------------------------------------------------------
wait_steps $((TOTAL * 30 / 100))
fetch_provenance shard0 "$T/shard0.prov.before" || fail "shard0 does not serve /provenance"
inc_before=$(incarnation_of "$T/shard0.prov.before")
# the kill comes after a periodic snapshot, once at least 2 batches (128 transitions) were
# inserted after it and before the next one: acknowledged batches that only the log holds
snap_lines() { since_start shard0 | grep -ac "periodic snapshot: "; }
last_snap() { since_start shard0 | sed -n 's/.*periodic snapshot: \([0-9][0-9]*\) transitions.*/\1/p' | tail -n 1; }
for ((try = 1; ; try++)); do
  n0=$(snap_lines)
  fresh_snap() { (($(snap_lines) > n0)); }
  wait_until "$STALL_S" "a periodic snapshot of shard0" fresh_snap
  n1=$(snap_lines) snap_n=$(last_snap)
  past_snap() { ge "$(inserted 0)" $((snap_n + 128)) || (($(snap_lines) > n1)); }
  wait_until "$STALL_S" "2 batches at shard0 after its snapshot" past_snap
  ins_kill=$(inserted 0)
  (($(snap_lines) == n1)) && break
  ((try < 5)) || fail "shard0 wrote a snapshot before 2 batches came after the previous one, 5 times: raise SNAP_S"
done
at=$(at_label)
watch_all_but shard0
pid=$(pid_of shard0)
kill9 shard0
killed_by_sigkill shard0 "$pid"
t0=$(now_ms)
sleep 1
check_watch
start_shard 0
DIST_WATCH=$ALL
base_ins=$(inserted 0) base_smp=$(sampled 0)
serving() {
  local a b
  a=$(inserted 0) b=$(sampled 0)
  ge "$a" $((base_ins + 1)) && ge "$b" $((base_smp + 1))
}
wait_until $RECOVER_S "the restarted shard0 storing and serving samples again" serving
rt=$(secs_since "$t0")
ledger_require_clean shard-kill $SHARDS
inc_after=$(incarnation_of "$T/ledger-shard-kill/shard0.prov")
[[ -n "$inc_before" && -n "$inc_after" && "$inc_before" != "$inc_after" ]] ||
  fail "shard0's incarnation did not change across its restart ('$inc_before' -> '$inc_after'): was it restarted?"
replayed=$(since_start shard0 | grep -a -m1 'batches ([0-9]* rows) from the write-ahead log' | sed 's/^.*replay: //')
applied=$(sed -n 's/^restored \(.* and \)\{0,1\}\([0-9][0-9]*\) batches (.*/\2/p' <<<"$replayed")
ge "$applied" 1 || fail "the restarted shard0 applied '${applied}' records of its write-ahead log ($replayed): the kill left nothing to the log, so it proved nothing about it"
row "kill -9 shard0" "$at" "reaped with 137; incarnation $inc_before -> $inc_after" yes "$rt" \
  "last snapshot $snap_n transitions, ${ins_kill:-?} inserted at the kill; start-up: ${replayed%% (*}"

# 3. kill -9 of the learner -----------------------------------------------------------
wait_steps $((TOTAL * 45 / 100))
u_pre=$(metric learner sac_learner_updates_total)
[[ -n "$u_pre" ]] || fail "the learner's /metrics does not answer"
at=$(at_label)
watch_all_but learner
pid=$(pid_of learner)
kill9 learner
killed_by_sigkill learner "$pid"
t0=$(now_ms)
[[ -s "$RUN/checkpoint.bin" && -s "$RUN/config.txt" ]] || fail "no checkpoint.bin / config.txt in $RUN"
ck=$(od -An -t u8 -j 120 -N 8 "$RUN/checkpoint.bin" | tr -d ' ')
u_pre=${u_pre%.*}
((ck >= u_pre / CKPT_EVERY * CKPT_EVERY)) ||
  fail "checkpoint.bin holds update $ck, but the learner was past update $u_pre (checkpoint every $CKPT_EVERY)"
start learner "$LEARNER" --config="$RUN/config.txt" --resume="$RUN"
# (lib.sh's wait_learner_up reads the whole log, where the killed learner's start line is)
up_again() { grep -aq 'weights on tcp://' <<<"$(since_start learner)"; }
DIST_WATCH="$ALL"
wait_until 60 "the resumed learner up" up_again
grep -aq "resumed from $RUN/checkpoint.bin: $ck updates" <<<"$(since_start learner)" ||
  fail "the restarted learner did not log that it resumed from its checkpoint at update $ck: $(since_start learner | grep -a 'resumed\|ERROR' | head -n 3)"
first_upd=""
updating() {
  local u
  u=$(since_start learner | sed -n 's/.*learner: steps .* updates \([0-9][0-9]*\) .*/\1/p' | head -n 1)
  [[ -n "$u" ]] || return 1
  first_upd=$u
  u=$(since_start learner | sed -n 's/.*learner: steps .* updates \([0-9][0-9]*\) .*/\1/p' | tail -n 1)
  ge "$u" $((ck + 1))
}
wait_until $RECOVER_S "the resumed learner updating past update $ck" updating
rt=$(secs_since "$t0")
((first_upd >= ck)) || fail "the resumed learner's update counter restarted at $first_upd, below its checkpoint's $ck"
ledger_require_clean learner-kill $SHARDS
row "kill -9 learner" "$at" "reaped with 137; resumed from checkpoint update $ck" yes "$rt" \
  "killed past update $u_pre; counter went on: first progress line at update $first_upd"

# 4. SIGSTOP / SIGCONT of a shard -----------------------------------------------------
wait_steps $((TOTAL * 60 / 100))
u_a=$(metric learner sac_learner_updates_total) ta=$(now_ms)
at=$(at_label)
pid1=$(pid_of shard1)
kill -STOP "$pid1"
# the heartbeat: shard1's /metrics polled every 0.5 s; the gap is the longest run of
# polls it did not answer. /proc shows the state the kernel holds it in.
stopped_seen=0 gap_ms=0 last_ok=$(now_ms) t_stop=$(now_ms)
while (($(now_ms) - t_stop < STOP_S * 1000)); do
  grep -q '^State:[[:space:]]*T' "/proc/$pid1/status" 2>/dev/null && stopped_seen=1
  if [[ -n "$(nsexec shard1 curl -s --max-time 0.4 "http://127.0.0.1:$(metrics_port shard1)/metrics" 2>/dev/null | head -c 1)" ]]; then
    last_ok=$(now_ms)
  else
    g=$(($(now_ms) - last_ok))
    ((g > gap_ms)) && gap_ms=$g
  fi
  sleep 0.5
  check_watch
done
# the heartbeat's last beat: still stopped now, so the gap runs to now
if [[ -z "$(nsexec shard1 curl -s --max-time 0.4 "http://127.0.0.1:$(metrics_port shard1)/metrics" 2>/dev/null | head -c 1)" ]]; then
  g=$(($(now_ms) - last_ok))
  ((g > gap_ms)) && gap_ms=$g
fi
u_b=$(metric learner sac_learner_updates_total)
ups_stop=$(awk -v a="${u_a%.*}" -v b="${u_b%.*}" -v t="$(secs_since "$ta")" 'BEGIN { printf "%.0f", (b - a) / t }')
kill -CONT "$pid1"
t0=$(now_ms)
((stopped_seen)) || fail "shard1 (pid $pid1) never showed state T after SIGSTOP"
((gap_ms >= (STOP_S - 1) * 1000)) ||
  fail "shard1's /metrics heartbeat gap was only ${gap_ms} ms during a ${STOP_S} s SIGSTOP: was it stopped?"
base_ins=$(inserted 1) base_smp=$(sampled 1)
[[ -n "$base_ins" ]] || fail "shard1 does not answer /metrics after SIGCONT"
serving1() { ge "$(inserted 1)" $((base_ins + 1)) && ge "$(sampled 1)" $((base_smp + 1)); }
wait_until $RECOVER_S "shard1 storing and serving samples again after SIGCONT" serving1
rt=$(secs_since "$t0")
ledger_require_clean sigstop $SHARDS
# from here the learner may finish its run at any time: wait_result checks how it ended
watch_all_but learner
row "SIGSTOP shard1 ${STOP_S} s, SIGCONT" "$at" "state T; /metrics heartbeat gap $((gap_ms / 100))00 ms" yes "$rt" \
  "learner went on at $ups_stop updates/s on shard0 while shard1 was stopped"

# 5. network cut between actor3's namespace and shard1's ------------------------------
if ((NETNS)); then
  wait_steps $((TOTAL * 75 / 100))
  at=$(at_label)
  rs0=$(metric actor3 sac_actor_batches_resent_total)
  [[ -n "$rs0" ]] || fail "actor3 does not export sac_actor_batches_resent_total"
  ip -n "${FAULT_NS[actor3]}" link set cut down || fail "cannot set the cut link down"
  ip -n "${FAULT_NS[actor3]}" link show cut | grep -q 'state DOWN' || fail "the cut link is not DOWN after 'link set cut down'"
  # the gap in shard1's receipts from actor3: actor3 sends to shard1 only, so its seq there
  # is its batches sent; batches sent before the cut may still be stored during it (shard1
  # holds what its rate limiter has not admitted yet), none sent after it can be
  sent_cut=$(metric actor3 sac_actor_batches_sent_total)
  [[ -n "$sent_cut" ]] || fail "actor3 does not answer /metrics"
  sent_cut=${sent_cut%.*}
  fetch_provenance shard1 "$T/shard1.prov.cut0" || fail "shard1 does not serve /provenance"
  r_cut0=$(receipts_from "$T/shard1.prov.cut0" 3)
  ua_max=0 t_cut=$(now_ms)
  while (($(now_ms) - t_cut < CUT_S * 1000)); do
    sleep 0.5
    ua=$(metric actor3 sac_actor_unacked_batches)
    ua=${ua:-0}
    ((${ua%.*} > ua_max)) && ua_max=${ua%.*}
    check_watch
  done
  fetch_provenance shard1 "$T/shard1.prov.cut1" || fail "shard1 does not serve /provenance"
  r_cut1=$(receipts_from "$T/shard1.prov.cut1" 3) q_cut1=$(last_seq_from "$T/shard1.prov.cut1" 3)
  rs1=$(metric actor3 sac_actor_batches_resent_total)
  sent_end=$(metric actor3 sac_actor_batches_sent_total)
  ip -n "${FAULT_NS[actor3]}" link set cut up || fail "cannot set the cut link up"
  t0=$(now_ms)
  ((q_cut1 <= sent_cut)) ||
    fail "shard1 stored actor3's batch seq $q_cut1 during the cut, but actor3 had sent only $sent_cut when the link went down: the cut did not cut"
  ((${rs1%.*} > ${rs0%.*} || ua_max > 0)) ||
    fail "actor3's resends ($rs0 -> $rs1) and unacknowledged batches (max $ua_max) did not rise during the cut"
  # recovered: shard1 receives actor3's batches again
  grown3() {
    fetch_provenance shard1 "$T/shard1.prov.cut2" && (($(last_seq_from "$T/shard1.prov.cut2" 3) > sent_cut))
  }
  wait_until $RECOVER_S "shard1 receiving actor3's batches again after the link came back" grown3
  rt=$(secs_since "$t0")
  ledger_require_clean network-cut $SHARDS
  row "network cut actor3 <-> shard1 (link down $CUT_S s)" "$at" \
    "link DOWN; actor3 resends ${rs0%.*} -> ${rs1%.*}, unacked up to $ua_max; shard1 stored none of actor3's batches sent after the cut (last seq $q_cut1, $sent_cut sent at the cut, ${sent_end%.*} at its end)" \
    yes "$rt" "receipts from actor3: $r_cut0 at the cut, $r_cut1 at its end (held batches admitted), $(receipts_from "$T/shard1.prov.cut2" 3) after it, last seq $(last_seq_from "$T/shard1.prov.cut2" 3)"
else
  LEDGER_FIG="-"
  row "network cut actor3 <-> shard1" "-" "-" "skipped" "-" "$FAULT_NS_WHY"
fi

# ---------------------------------------------------------------- the end of the run
DIST_WATCH=$ALL
wait_result learner "$STALL_S"
line=$(result_line learner)
log "$line"
DIST_WATCH="shard0 shard1 actor0 actor1 actor2 actor3"
check_watch
# the actors stop first, then the whole run's ledger is checked against the running
# shards, then the shards stop. With the learner gone the shards' rate limiters hold the
# actors' batches until they go idle (--limiter_idle_ms 10000 after the last sample
# request: above a learner restart, so fault 3 keeps the ratio), then store them: the actors are stopped after that, drain, and none
# may leave a batch unacknowledged at exit or unsent (no shard is down at the end), so
# that a lost acknowledgement cannot hide among batches a limiter still held
ledger_errors_zero actor0 actor1 actor2 actor3
for n in $SHARDS; do wait_until 30 "$n's rate limiter idle after the learner's end" limiter_idle_now "$n"; done
stop_clean actor0 actor1 actor2 actor3
drained_clean actor0 actor1 actor2 actor3 || fail "end of run: $DRAIN_WHY"
ledger_require_clean end-of-run $SHARDS
# shellcheck disable=SC2086
prov_rows_match_stored end-of-run $SHARDS
final_fig=$LEDGER_FIG final_actors=$LEDGER_ACTORS
stop_clean shard0 shard1
# and what the shards left on disk (final snapshot + log, sac-replay --print_provenance):
# what a restart would hold, checked the same way
d="$T/ledger-files"
mkdir -p "$d"
cp "$LEDGERS"/*.ledger "$d"/
for n in shard0 shard1; do
  "$REPLAY" --print_provenance="$T/$n.snap" >"$d/$n.prov" 2>>"$d/print.log" ||
    fail "sac-replay --print_provenance $T/$n.snap failed: $(tail -n 3 "$d/print.log")"
done
sh "$LEDGER_CHECK" -v "$d"/*.ledger "$d"/*.prov >"$d/check.txt" 2>&1 ||
  fail "ledger check of the shards' files: $(cat "$d/check.txt")"
files_fig=$(sed -n 's/^ledger total: \(acknowledged [0-9]*, found once [0-9]*, missing [0-9]*, found twice [0-9]*\).*/\1/p' "$d/check.txt")
[[ "$files_fig" == "$final_fig" ]] || fail "the shards' files: $files_fig; the running shards: $final_fig"
no_crash_in_logs
print_table
echo "end of run: ledger $final_fig [per actor acknowledged/once/missing/twice: $final_actors]; the same from the shards' snapshot + log files"
echo "final eval return $(sed -n 's/.*final eval return \([^ ]*\).*/\1/p' <<<"$line") (bar $THRESHOLD); wall $SECONDS s"
return_check "$line" "$THRESHOLD" || fail "$RETURN_WHY"
ret=$RETURN
if ((!NETNS)); then
  skip "4 faults injected, proven and recovered from, ledger $final_fig, final eval return $ret; the network cut needs namespaces ($FAULT_NS_WHY)"
fi
pass "5 faults injected, proven and recovered from; ledger after each: 0 missing, 0 twice; end of run: $final_fig; final eval return $ret >= $THRESHOLD"
