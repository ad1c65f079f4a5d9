#!/usr/bin/env bash
# shellcheck disable=SC2317 # functions below are called through wait_until and attack
# abuse_suite (issue 14, "Deliver"): a bounded adversarial client (abuse_client) against a
# live shard, a live learner in service mode sampling from it, and one well-behaved actor,
# all on loopback. The attacks, one phase each:
#   unread    4 DEALERs send 1024 sample requests of 4096 rows each and never read a reply
#   weights   3 subscriptions of 1 MiB and 300 raw connections of random bytes on the
#             learner's weights PUB port, then 20000 distinct topics of 63 bytes: the
#             learner's VmRSS may grow by at most TOPICS_RSS_KIB meanwhile, and the port
#             must have been renewed (tests/test_weights.c has the negative control)
#   slowloris 200 connections writing 1 byte/s on the shard's and on the learner's
#             metrics port
#   huge      30 transition batches with rewards of 3e38 (finite, absurd)
#   sequence  batches claiming the good actor's id with acked_through 2^64-1, then with
#             session 2^64-1
#   stop      SIGTERM to each process while garbage keeps arriving on every ZeroMQ port
#   portlost  (not in the default set) another process takes the weights port while the
#             learner renews it past its topic budget: the learner must stop, non-zero,
#             saying why; the shard and the actor go on
# Throughout each phase, every second: every process is alive, its VmRSS is under
# RSS_MAX_KIB, /healthz of each answers 200 within 1 s, the learner's losses are finite,
# and progress goes on: the shard's inserted-batches counter (fed by the good actor) and
# the learner's update count both rise; the suite fails when either has not moved for
# STALL_S seconds (a wait on progress, not on the clock). After each phase both must move
# again; after the huge and sequence phases the shard must have refused every attacking
# batch (its rejected-messages counter). At the end each process must exit 0 within 5 s
# of its SIGTERM. The time bounds are on progress: /healthz's 1 s counts only while the
# target runs (a target the machine held off the CPU is asked again), a process stopping on
# SIGTERM may take longer than 5 s while its CPU time moves, and the stop phase waits for
# the garbage clients to say their first bytes went in rather than sleeping.
# Each attack is shown to have reached its target (abuse_client's key=value figures, and
# the target's own counters where it has one): unread: all 4096 requests left the client,
# its 4 DEALERs connected, and the shard dropped at least 1024 replies it could not
# deliver (sac_replay_replies_dropped_total); garbage: bytes taken on each of the 300
# connections; slowloris: bytes taken on each of the 200 connections of each port, and each
# target's HTTP server closed slow connections (sac_http_header_timeouts_total +
# _connections_evicted_total + _connections_rejected_total rose); the stop phase's garbage:
# bytes taken on every port.
#
# usage: abuse_suite.sh SAC_LEARNER SAC_ACTOR SAC_REPLAY ABUSE_CLIENT
# env:   ABUSE_PHASES (default "unread weights slowloris huge sequence stop": a subset runs
#        only those), DIST_DEADLINE_S (240), DIST_KEEP=1 keeps the logs
source "$(dirname "${BASH_SOURCE[0]}")/../dist/lib.sh" || { echo "FAIL: $0: cannot load lib.sh"; exit 1; }
dist_init abuse_suite 240
[[ $# -eq 4 ]] || { echo "usage: $0 SAC_LEARNER SAC_ACTOR SAC_REPLAY ABUSE_CLIENT"; exit 2; }
check_binaries "$1" "$2" "$3"
CLIENT=$4
[[ -x "$CLIENT" ]] || fail "not an executable: $CLIENT"
command -v ss >/dev/null || skip "ss (iproute2) is needed to pick free ports"
PHASES=${ABUSE_PHASES:-unread weights slowloris huge sequence stop}
PHASES=${PHASES//,/ }

# A small, fast run: Pendulum, one shard, 64-row batches, a small network. Nothing here
# is about learning; the run only has to keep moving.
# shellcheck disable=SC2034 # read by lib.sh (shard_args, learner_args)
BATCH=64
# shellcheck disable=SC2034
LEARNING_STARTS=500
# shellcheck disable=SC2034
BUFFER=100000
# Memory bound of every process, KiB. Unattacked they sit at 10-40 MiB (the shard's ring
# is 100000 Pendulum transitions); the defects this suite guards against took a shard to
# 800 MiB (unread replies) and a learner to 400 MiB (garbage subscriptions).
RSS_MAX_KIB=$((256 * 1024))
# Progress: fail when the shard's insert counter or the learner's update count has not
# moved for this long.
STALL_S=30

# no sample/insert ratio: the rate limiter would hold most sample requests back, and
# the unread-replies attack needs a shard that answers every one
start_local_shard shard0 1 0 --samples_per_insert=0
start_local_learner learner "" --total_steps=1000000000 --hidden=64 --eval_every=0 --eval_episodes=2
start_local_actor actor0 1 0
DIST_WATCH="shard0 learner actor0"
PROCS=(shard0 learner actor0)
INS=${SHARD_INS[0]}
SMP=${SHARD_SMP[0]}
port_of() { sed -n 's|.*metrics on http://127\.0\.0\.1:\([0-9][0-9]*\)/metrics.*|\1|p' "$T/$1.log" | tail -n 1; }
declare -A MPORT=()
has_port() { [[ -n "$(port_of "$1")" ]]; }
for n in "${PROCS[@]}"; do
  wait_until 30 "$n's metrics port" has_port "$n"
  MPORT[$n]=$(port_of "$n")
done
log "up: shard $INS / $SMP, weights on $WEIGHTS_PORT, metrics ports shard0 ${MPORT[shard0]} learner ${MPORT[learner]} actor0 ${MPORT[actor0]}"

inserted() { metric shard0 sac_replay_inserted_batches_total; }
# rejected: the shard's refused messages, summed over every reason (empty when unreadable)
rejected() {
  # shellcheck disable=SC2016
  timeout 3 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" && printf "GET /metrics HTTP/1.0\r\n\r\n" >&3 && cat <&3' \
    _ "${MPORT[shard0]}" 2>/dev/null | awk '/^sac_replay_rejected_messages_total[{ ]/ { s += $2; n++ } END { if (n) printf "%d", s }'
}
# refused_by_shard BEFORE N WHAT: the shard's rejected count rose by at least N since BEFORE
refused_by_shard() {
  local now
  now=$(rejected)
  [[ -n "$now" && -n "$1" ]] || fail "cannot read the shard's rejected messages"
  ((now - $1 >= $2)) || fail "the shard refused $((now - $1)) of the $2 $3 batches (it must refuse each)"
  log "the shard refused the $3 batches ($((now - $1)) more rejected messages)"
}
updates() { last_num "$T/learner.log" "learner: steps " "updates "; }
LAST_INS=-1 LAST_UPD=-1 INS_AT=$SECONDS UPD_AT=$SECONDS
declare -A RSS_PEAK=()

# cpu_ticks PID: the process's CPU time (utime + stime, clock ticks; empty once it is gone)
cpu_ticks() {
  local st
  st=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
  st=${st##*) }
  awk '{ print $12 + $13 }' <<<"$st"
}
# healthy NAME: /healthz of NAME answers 200 within 1 s. A miss counts only when NAME used
# CPU meanwhile (it ran and did not answer); a target the machine held off the CPU is asked
# again, up to 5 times: the 1 s bound is on the target's own time, not the clock's.
healthy() {
  local try c0 c1
  for ((try = 0; try < 5; try++)); do
    c0=$(cpu_ticks "$(pid_of "$1")")
    "$CLIENT" healthz "${MPORT[$1]}" 1000 >"$T/healthz.out" 2>&1 && return 0
    c1=$(cpu_ticks "$(pid_of "$1")")
    [[ -n "$c0" && -n "$c1" ]] && ((c1 > c0)) && return 1
  done
  return 1
}

# check_all: one round of every assertion; fails the suite on the first broken one.
check_all() {
  local n r v
  check_watch
  deadline_check
  for n in "${PROCS[@]}"; do
    r=$(rss_kib "$(pid_of "$n")")
    [[ -n "$r" ]] || fail "$n is gone"
    ((r > ${RSS_PEAK[$n]:-0})) && RSS_PEAK[$n]=$r
    ((r <= RSS_MAX_KIB)) || fail "$n VmRSS $r KiB is over the bound of $RSS_MAX_KIB KiB"
    healthy "$n" || fail "$n /healthz did not answer 200 within 1 s while it ran: $(cat "$T/healthz.out")"
  done
  v=$(grep -a -m1 -E '(q_loss|pi_loss) [-+]?(nan|inf)' "$T/learner.log") && fail "non-finite loss in the learner: $v"
  v=$(inserted)
  if [[ -n "$v" ]] && ((v > LAST_INS)); then LAST_INS=$v INS_AT=$SECONDS; fi
  ((SECONDS - INS_AT <= STALL_S)) || fail "the good actor's inserts have not moved for $STALL_S s (shard counter at $LAST_INS)"
  [[ " ${PROCS[*]} " == *" learner "* ]] || return 0 # stopped on purpose (portlost)
  v=$(updates)
  if [[ -n "$v" ]] && ((v > LAST_UPD)); then LAST_UPD=$v UPD_AT=$SECONDS; fi
  ((SECONDS - UPD_AT <= STALL_S)) || fail "the learner's updates have not moved for $STALL_S s (at $LAST_UPD)"
  return 0
}

# progress_after: both counters move past where they were when it was called (bounded by STALL_S).
progress_after() {
  local i0=$LAST_INS u0=$LAST_UPD end=$((SECONDS + STALL_S))
  while ((SECONDS <= end)); do
    check_all
    ((LAST_INS > i0 && LAST_UPD > u0)) && return 0
    sleep 1
  done
  fail "no progress within $STALL_S s after the attack (inserts $i0 -> $LAST_INS, updates $u0 -> $LAST_UPD)"
}

# attack NAME CMD...: runs CMD (abuse_client with a bounded attack) in the background,
# checking everything every second while it runs; its output goes to the log.
attack() {
  local name=$1 pid i
  shift
  log "attack $name: $*"
  "$@" >>"$T/attack-$name.log" 2>&1 &
  pid=$!
  for ((i = 0; i < 200; i++)); do # bounded: every attack ends within its own seconds
    kill -0 "$pid" 2>/dev/null || break
    check_all
    sleep 1
  done
  wait "$pid" || fail "attack $name: abuse_client failed: $(cat "$T/attack-$name.log")"
  log "attack $name done: $(tr '\n' ' ' <"$T/attack-$name.log")"
}

wants() { [[ " $PHASES " == *" $1 "* ]]; }

# sent_figure FILE KEY: abuse_client's KEY=N figure on its summary line in FILE (empty if none)
sent_figure() { grep -ao " $2=[0-9]*" "$1" 2>/dev/null | tail -n 1 | cut -d= -f2; }
# reached NAME FILE KEY MIN WHAT: the attack's KEY figure is at least MIN, or the suite fails
reached() {
  local v
  v=$(sent_figure "$2" "$3")
  [[ -n "$v" ]] || fail "attack $1: abuse_client reported no $3= figure: $(cat "$2")"
  ((v >= $4)) || fail "attack $1: $3=$v, fewer than $4 $5: the attack did not reach its target ($(cat "$2"))"
}
# slow_closed NAME: the HTTP server of process NAME closed connections that were slow or
# over its limit (its three counters, summed)
slow_closed() {
  local n=0 k v
  for k in sac_http_header_timeouts_total sac_http_connections_evicted_total sac_http_connections_rejected_total; do
    v=$(metric "$1" "$k")
    n=$((n + ${v:-0}))
  done
  echo "$n"
}

# The run is moving before any attack.
first_updates() { ge "$(updates)" 1; }
wait_until 60 "the first updates" first_updates
check_all
progress_after

if wants unread; then
  d0=$(metric shard0 sac_replay_replies_dropped_total)
  attack unread "$CLIENT" unread "$SMP" 4 1024 4096 10
  reached unread "$T/attack-unread.log" requests 4096 "sample requests handed to ZeroMQ"
  reached unread "$T/attack-unread.log" conns 4 "DEALERs connected to the shard"
  d1=$(metric shard0 sac_replay_replies_dropped_total)
  [[ -n "$d0" && -n "$d1" ]] || fail "cannot read the shard's sac_replay_replies_dropped_total"
  # the shard answers every request, and all but the few replies that fit in its queue
  # towards a DEALER that never reads are dropped (3756 of 4096 measured): at least 1024
  ((d1 - d0 >= 1024)) ||
    fail "attack unread: the shard dropped $((d1 - d0)) replies (at least 1024 expected): its requests did not reach it"
  log "attack unread reached the shard: it dropped $((d1 - d0)) replies to the peers that do not read"
  progress_after
fi
if wants weights; then
  "$CLIENT" bigsub "$WEIGHTS_PORT" 1048576 3 >>"$T/attack-bigsub.log" 2>&1 &
  BIGSUB=$!
  attack garbage "$CLIENT" garbage "$WEIGHTS_PORT" 300 10
  reached garbage "$T/attack-garbage.log" conns 300 "connections that took bytes"
  reached garbage "$T/attack-garbage.log" bytes $((300 * 4096)) "bytes (one 4 KiB write per connection)"
  wait "$BIGSUB" || fail "bigsub failed: $(cat "$T/attack-bigsub.log")"
  log "bigsub done: $(cat "$T/attack-bigsub.log")"
  grep -q ', 3 disconnected by the publisher' "$T/attack-bigsub.log" ||
    fail "the weights PUB kept a 1 MiB subscription's sender connected: $(cat "$T/attack-bigsub.log")"
  progress_after
  # many small topics (issue 14.5): unbounded they cost 43 MiB (tests/test_weights.c)
  TOPICS_RSS_KIB=$((32 * 1024))
  peak_before=${RSS_PEAK[learner]} r0=$(rss_kib "$(pid_of learner)") ren0=$(metric learner sac_learner_weights_socket_renewals_total)
  RSS_PEAK[learner]=$r0
  attack topics "$CLIENT" topics "$WEIGHTS_PORT" 20000 60
  grew=$((RSS_PEAK[learner] - r0)) ren=$(($(metric learner sac_learner_weights_socket_renewals_total) - ren0))
  ign=$(metric learner sac_learner_weights_ignored_subscriptions_total)
  ((RSS_PEAK[learner] < peak_before)) && RSS_PEAK[learner]=$peak_before
  log "20000 topics: learner VmRSS +$grew KiB at most (bound $TOPICS_RSS_KIB KiB), $ren renewals, $ign ignored in all"
  grep -q ' 20000 of 20000 topics' "$T/attack-topics.log" || fail "the topics attack did not send them all"
  ((grew < TOPICS_RSS_KIB)) || fail "20000 topics grew the learner by $grew KiB (bound $TOPICS_RSS_KIB KiB)"
  ((ren >= 1)) || fail "20000 topics and the weights port was never renewed"
  progress_after
fi
if wants slowloris; then
  c0_shard=$(slow_closed shard0) c0_learner=$(slow_closed learner)
  "$CLIENT" slowloris "${MPORT[shard0]}" 200 10 >>"$T/attack-slowloris-shard.log" 2>&1 &
  SLOW=$!
  attack slowloris-learner "$CLIENT" slowloris "${MPORT[learner]}" 200 10
  wait "$SLOW" || fail "slowloris on the shard failed"
  log "slowloris on the shard done: $(cat "$T/attack-slowloris-shard.log")"
  for n in shard learner; do
    reached "slowloris-$n" "$T/attack-slowloris-$n.log" conns 200 "connections that took a byte"
    reached "slowloris-$n" "$T/attack-slowloris-$n.log" bytes 200 "bytes (a byte on each connection)"
  done
  c1_shard=$(slow_closed shard0) c1_learner=$(slow_closed learner)
  ((c1_shard > c0_shard)) || fail "slowloris: the shard's HTTP server closed no slow connection ($c0_shard -> $c1_shard)"
  ((c1_learner > c0_learner)) ||
    fail "slowloris: the learner's HTTP server closed no slow connection ($c0_learner -> $c1_learner)"
  log "slowloris reached both: slow connections closed by the shard $((c1_shard - c0_shard)), by the learner $((c1_learner - c0_learner))"
  progress_after
fi
if wants huge; then
  r0=$(rejected)
  attack huge "$CLIENT" insert "$INS" "$OBS_DIM" "$ACT_DIM" 77 huge 30
  refused_by_shard "$r0" 30 huge-value
  progress_after
  # the values reached no update: 20 more seconds of finite losses (check_all greps)
  for ((i = 0; i < 20; i++)); do check_all; sleep 1; done
fi
if wants sequence; then
  r0=$(rejected)
  attack acked "$CLIENT" insert "$INS" "$OBS_DIM" "$ACT_DIM" 0 acked 1
  refused_by_shard "$r0" 1 acked_through=2^64-1
  progress_after
  r0=$(rejected)
  attack session "$CLIENT" insert "$INS" "$OBS_DIM" "$ACT_DIM" 0 session 1
  refused_by_shard "$r0" 1 session=2^64-1
  progress_after
  # the good actor (id 0) still stores: its batches keep landing for a further while
  progress_after
fi
for n in "${PROCS[@]}"; do log "$n VmRSS peak ${RSS_PEAK[$n]:-?} KiB (bound $RSS_MAX_KIB KiB)"; done

STOPPED="actor0 learner shard0" # the processes the stop phase sends SIGTERM to
if wants portlost; then
  # The weights port taken by another process while the learner renews it past its topic
  # budget (issue 14.5): publishing cannot go on, and actors on stale weights for good is
  # the failure this guards against. The learner must stop, non-zero, with the reason;
  # the shard and the actor are untouched. (The control, a renewal nobody interferes
  # with, is the weights phase: the learner goes on after 20000 topics.)
  lp=$(pid_of learner)
  "$CLIENT" steal "$WEIGHTS_PORT" 60 >>"$T/attack-steal.log" 2>&1 &
  STEAL=$!
  on_cleanup "kill $STEAL 2>/dev/null"
  DIST_WATCH="shard0 actor0" PROCS=(shard0 actor0) STOPPED="actor0 shard0"
  attack portlost-topics "$CLIENT" topics "$WEIGHTS_PORT" 300 10
  # a bound that is the assertion (the renewal gives up after 2 s of failed binds), not a pace
  DIST_PROGRESS="" wait_until 30 "the learner to stop after losing its weights port" exited "$lp"
  rc=$(rc_of "$lp")
  [[ $rc != 0 ]] || fail "the learner exited 0 after losing its weights port"
  grep -q 'steal: port [0-9]* taken after' "$T/attack-steal.log" ||
    fail "the stealer never got the port: the failed renewal was not exercised ($(cat "$T/attack-steal.log"))"
  grep -aqE "weights: cannot bind tcp://127\.0\.0\.1:$WEIGHTS_PORT again for 2 s \(Address already in use\): weights are no longer published" \
    "$T/learner.log" || fail "the learner did not log the lost port"
  why=$(grep -a 'learner: cannot publish the weights of update [0-9]*: ' "$T/learner.log" | tail -n 1) ||
    fail "the learner did not say why it stopped"
  log "learner exited $rc after its weights port was taken: ${why##*ERROR }"
  kill "$STEAL" 2>/dev/null
  wait "$STEAL" 2>/dev/null
  # the rest of the cluster still moves (the actor acts on the last weights it had)
  i0=$LAST_INS
  for ((i = 0; i < STALL_S && LAST_INS <= i0; i++)); do check_all; sleep 1; done
  ((LAST_INS > i0)) || fail "the actor's inserts stopped with the learner"
fi

if wants stop; then
  # SIGTERM while garbage keeps arriving on the weights port and both shard ports
  STOP_GARBAGE=()
  # the shard's two ports, and the weights port while the learner is one of those stopped
  # (after portlost no one listens on it)
  STOP_PORTS=("${INS##*:}" "${SMP##*:}")
  [[ " $STOPPED " == *" learner "* ]] && STOP_PORTS+=("$WEIGHTS_PORT")
  for p in "${STOP_PORTS[@]}"; do
    "$CLIENT" garbage "$p" 100 20 >>"$T/attack-stop-$p.log" 2>&1 &
    STOP_GARBAGE+=("$!")
    on_cleanup "kill $! 2>/dev/null"
  done
  # the garbage is arriving on every port (each client says so once its first bytes went in)
  garbage_flowing() {
    local p
    for p in "${STOP_PORTS[@]}"; do
      grep -q 'first bytes taken' "$T/attack-stop-$p.log" 2>/dev/null || return 1
    done
  }
  wait_until 10 "garbage arriving on ${STOP_PORTS[*]}" garbage_flowing
  for n in $STOPPED; do
    pid=$(pid_of "$n")
    exited "$pid" && fail "$n had already ended (exit ${DIST_RC_OF[$pid]})"
    DIST_WATCH=${DIST_WATCH//$n/} # its end is what is waited for now
    t0=$(date +%s%N)
    kill -TERM "$pid"
    # by progress: it may take longer than 5 s on a busy machine, as long as it works at
    # stopping (its CPU time moves); it fails once it has done nothing for 5 s
    stopped() { exited "$pid"; }
    DIST_PROGRESS="cpu_ticks $pid" wait_until 5 "$n to stop after SIGTERM" stopped
    ms=$((($(date +%s%N) - t0) / 1000000))
    exited "$pid" || fail "$n (pid $pid) still running after SIGTERM"
    [[ ${DIST_RC_OF[$pid]} == 0 ]] || fail "$n exited with ${DIST_RC_OF[$pid]} on SIGTERM, not 0"
    log "$n stopped on SIGTERM in $ms ms (exit 0)"
  done
  # the garbage did arrive while they stopped (each client ends within its own 20 s)
  for pid in "${STOP_GARBAGE[@]}"; do wait "$pid" || fail "a garbage client of the stop phase failed"; done
  for p in "${STOP_PORTS[@]}"; do
    reached "stop-garbage-$p" "$T/attack-stop-$p.log" conns 100 "connections that took bytes"
  done
  log "garbage during the stop: $(cat "$T"/attack-stop-*.log | tr '\n' ' ')"
fi
no_crash_in_logs
pass "phases: $PHASES"
