#!/usr/bin/env bash
# shellcheck disable=SC2317 # functions below are called through wait_until
# Distributed SAC across hosts (issue 4, point 4): the learner, each replay shard and each
# actor run in a network namespace of their own, created by this test and joined in a star
# through veth pairs to a bridge that lives in one more namespace (the hub), so nothing is
# added to the host's own network namespace and all traffic stays between namespaces this
# test created (addresses 10.231.0.0/24 exist only inside them). Passes when Pendulum-v1
# reaches a final evaluation return >= -200. Everything is torn down on exit.
# Without root, iproute2, or the right to create namespaces/veth/bridges: SKIP, exit 77.
#
# usage: run_netns.sh SAC_LEARNER SAC_ACTOR SAC_REPLAY
# env:   DIST_SHARDS (2), DIST_ACTORS (2), DIST_TOTAL_STEPS (20000), DIST_THRESHOLD (-200),
#        DIST_STALL_S (120: the learner's progress line may stand still this long), DIST_DEADLINE_S (840: the whole test),
#        DIST_KEEP=1 keeps the logs.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" || { echo "FAIL: $0: cannot load lib.sh"; exit 1; }
dist_init run_netns 840
check_binaries "$@"

S=${DIST_SHARDS:-2}
N=${DIST_ACTORS:-2}
TOTAL=${DIST_TOTAL_STEPS:-20000}
THRESHOLD=${DIST_THRESHOLD:--200}
TIMEOUT=${DIST_STALL_S:-120}
NET=10.231.0

[[ $(id -u) == 0 ]] || skip "needs root to create network namespaces"
command -v ip >/dev/null || skip "needs iproute2 (ip)"

# A prefix unique to this run: several runs (or other tests) never share a namespace.
P="sacf$$r$RANDOM-"
declare -a NSES=()
# shellcheck disable=SC2317 # run by the EXIT trap
ns_del_all() {
  local ns
  for ns in "${NSES[@]}"; do ip netns del "$ns" 2>/dev/null; done
  for ns in "${NSES[@]}"; do
    ip netns list 2>/dev/null | grep -q "^$ns\b" && echo "warning: namespace $ns still present"
  done
  return 0
}
on_cleanup ns_del_all

# ns_add NAME: a namespace with loopback up.
ns_add() {
  ip netns add "$1" 2>"$T/ip.err" || return 1
  NSES+=("$1")
  ip -n "$1" link set lo up
}

HUB="${P}hub"
if ! ns_add "$HUB"; then
  skip "cannot create a network namespace: $(cat "$T/ip.err")"
fi
ip netns exec "$HUB" true 2>"$T/ip.err" || skip "cannot run a program in a network namespace: $(cat "$T/ip.err")"
ip -n "$HUB" link add br0 type bridge 2>"$T/ip.err" || skip "cannot create a bridge in a namespace: $(cat "$T/ip.err")"
ip -n "$HUB" link set br0 up || fail "bridge up"

# host_add NAME INDEX: a namespace ${P}NAME with eth0 = $NET.INDEX/24 on the hub's bridge.
host_add() {
  local ns="${P}$1" ip4="$NET.$2"
  ns_add "$ns" || fail "ip netns add $ns: $(cat "$T/ip.err")"
  ip -n "$HUB" link add "v$2" type veth peer name eth0 netns "$ns" 2>"$T/ip.err" ||
    skip "cannot create veth pairs: $(cat "$T/ip.err")"
  ip -n "$HUB" link set "v$2" master br0 || fail "attach v$2 to the bridge"
  ip -n "$HUB" link set "v$2" up || fail "v$2 up"
  ip -n "$ns" addr add "$ip4/24" dev eth0 || fail "address $ip4 in $ns"
  ip -n "$ns" link set eth0 up || fail "eth0 up in $ns"
}

# hosts: learner .1, shards .10+i, actors .100+i
host_add learner 1
for ((i = 0; i < S; i++)); do host_add "shard$i" $((10 + i)); done
for ((i = 0; i < N; i++)); do host_add "actor$i" $((100 + i)); done
log "namespaces: ${NSES[*]}"

INS=() SMP=()
for ((i = 0; i < S; i++)); do
  a="$NET.$((10 + i))"
  # shellcheck disable=SC2046
  start "shard$i" ip netns exec "${P}shard$i" "$REPLAY" $(shard_args "$S" "$i") --durability=none \
    --insert_endpoint="tcp://$a:5560" --sample_endpoint="tcp://$a:5561" --ready_file="$T/shard$i.ready"
  wait_ready "shard$i" "$START_PID" 30 || fail "shard$i cannot bind $a"
  INS+=("tcp://$a:5560") SMP+=("tcp://$a:5561")
  log "shard$i in ${P}shard$i: inserts tcp://$a:5560, samples tcp://$a:5561"
done
smp=$(IFS=,; echo "${SMP[*]}")
ins=$(IFS=,; echo "${INS[*]}")
# shellcheck disable=SC2046
start learner ip netns exec "${P}learner" "$LEARNER" --shards="$smp" --weights="tcp://$NET.1:5570" \
  $(learner_args learner) --log_interval=2 --total_steps="$TOTAL" --lr=1e-3
wait_learner_up learner "$START_PID" 60 || fail "learner cannot bind $NET.1:5570"
log "learner in ${P}learner: weights on tcp://$NET.1:5570"
DIST_WATCH="learner"
for ((i = 0; i < S; i++)); do DIST_WATCH+=" shard$i"; done
for ((i = 0; i < N; i++)); do
  # shellcheck disable=SC2046
  start "actor$i" ip netns exec "${P}actor$i" "$ACTOR" $(actor_args "$N" "$i") --shards="$ins" \
    --weights="tcp://$NET.1:5570"
  DIST_WATCH+=" actor$i"
done
# each process really is in its own namespace
# (ip netns exec joins the namespace, then execs the binary under the same pid)
in_ns() { [[ "$(readlink "/proc/$1/ns/net" 2>/dev/null)" == "$2" ]]; }
for n in $DIST_WATCH; do
  pid=$(pid_of "$n")
  want=$(stat -L -c 'net:[%i]' "/var/run/netns/${P}$n")
  wait_until 10 "$n (pid $pid) in namespace ${P}$n" in_ns "$pid" "$want"
done
log "$S shard(s), $N actor(s), learner: $((S + N + 1)) namespaces, training for $TOTAL steps"

wait_result learner "$TIMEOUT"
line=$(result_line learner)
log "$line"
for n in $DIST_WATCH; do
  [[ $n == learner ]] && continue
  exited "$(pid_of "$n")" && fail "$n ended during the run"
done
# the actors did train against the learner across namespaces: they ran learned weights
for ((i = 0; i < N; i++)); do
  v=$(last_num "$T/actor$i.log" "weights v" "weights v")
  [[ -n "$v" && "$v" -gt 0 ]] || fail "actor$i never reported learned weights (last version '${v}')"
done
no_crash_in_logs
return_check "$line" "$THRESHOLD" || fail "$RETURN_WHY"
ret=$RETURN
pass "final eval return $ret >= $THRESHOLD with learner, $S shards and $N actors in $((S + N + 1)) network namespaces"
