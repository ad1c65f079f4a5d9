# shellcheck shell=bash
# Helpers of the fault-injection and load tests in tests/fault/ (sourced after
# tests/dist/lib.sh, which owns process start/stop, PIDs, ports, bounded waits and the
# cleanup trap). What this file adds: reading a process's Prometheus /metrics (also inside
# a network namespace), the part of a log written since a process's latest start,
# millisecond clocks, histogram quantiles, and a small namespace topology for cutting the
# network between two processes. Every wait is bounded; every namespace and interface
# made here is registered with on_cleanup and removed at exit.

# now_ms: wall clock in milliseconds (bash's EPOCHREALTIME, no fork).
now_ms() {
  local t=${EPOCHREALTIME/./}
  printf '%s' $((t / 1000))
}
# secs_since MS: seconds (one decimal) since a now_ms value.
secs_since() { awk -v a="$1" -v b="$(now_ms)" 'BEGIN { printf "%.1f", (b - a) / 1000 }'; }

# FAULT_NS[NAME]: the network namespace a process runs in (unset: the host's).
declare -A FAULT_NS=()
# nsexec NAME cmd...: cmd in NAME's namespace.
nsexec() {
  local n=$1
  shift
  if [[ -n "${FAULT_NS[$n]:-}" ]]; then ip netns exec "${FAULT_NS[$n]}" "$@"; else "$@"; fi
}

# since_start NAME: the lines of NAME's log written by its latest start (lib.sh's start
# appends a "--- start NAME" line before each).
since_start() { tac "$T/$1.log" 2>/dev/null | sed '/^--- start /q' | tac; }

# metrics_port NAME: the /metrics port NAME's latest start logged (empty before).
metrics_port() {
  since_start "$1" | sed -n 's|.*metrics on http://.*:\([0-9][0-9]*\)/metrics.*|\1|p' | tail -n 1
}

# scrape NAME: NAME's /metrics text (2 s bound; empty when it does not answer).
scrape() {
  local p
  p=$(metrics_port "$1")
  [[ -n "$p" ]] || return 1
  nsexec "$1" curl -s --max-time 2 "http://127.0.0.1:$p/metrics" 2>/dev/null
}

# mval SERIES [LABEL_SUBSTRING] < metrics text: the sum of SERIES's samples (whose label
# set contains LABEL_SUBSTRING, when given); empty when there is none.
mval() {
  awk -v s="$1" -v l="${2:-}" '
    /^#/ { next }
    {
      name = $1; labels = ""
      i = index(name, "{")
      if (i > 0) { labels = substr(name, i); name = substr(name, 1, i - 1) }
      if (name != s || (l != "" && index(labels, l) == 0)) next
      v += $NF; n++
    }
    END { if (n) printf "%.17g\n", v }'
}

# metric NAME SERIES [LABEL_SUBSTRING]: scrape NAME and print one series (empty on failure).
metric() {
  local text
  text=$(scrape "$1") || return 0
  mval "$2" "${3:-}" <<<"$text"
}

# hist_buckets SERIES < metrics text: "le cumulative_count" lines of a histogram, summed
# over label sets, sorted by le (+Inf last).
hist_buckets() {
  awk -v s="$1_bucket" '
    /^#/ { next }
    index($1, s "{") == 1 {
      match($1, /le="[^"]*"/)
      le = substr($1, RSTART + 4, RLENGTH - 5)
      c[le] += $NF
    }
    END { for (k in c) print (k == "+Inf" ? "inf" : k), c[k] }' | sort -g
}

# hist_quantile Q BEFORE_FILE AFTER_FILE: the Q-quantile (seconds) of the observations
# between two hist_buckets outputs, interpolated linearly inside the bucket as
# Prometheus's histogram_quantile does; "n/a" with no observations. Prints "q count".
hist_quantile() {
  awk -v q="$1" '
    FILENAME == ARGV[1] { b[$1] = $2; next }
    { n++; le[n] = $1; c[n] = $2 - (($1 in b) ? b[$1] : 0) }
    END {
      total = c[n]
      if (n == 0 || total <= 0) { print "n/a 0"; exit }
      rank = q * total; prev = 0; lo = 0
      for (i = 1; i <= n; i++) {
        if (c[i] >= rank) {
          if (le[i] == "inf") { printf ">%s %d\n", lo, total; exit }
          w = c[i] - prev
          printf "%.6g %d\n", (w > 0 ? lo + (le[i] - lo) * (rank - prev) / w : le[i]), total
          exit
        }
        prev = c[i]; lo = le[i]
      }
    }' "$2" "$3"
}

# ---------------------------------------------------------------- namespaces
# A topology for the network cut, all inside namespaces this test creates:
#   hub namespace: a bridge; a veth leg to the host namespace (host side
#   $FNET.1/24, an interface of this test's own) and one to each namespace added with
#   fault_ns_host; fault_ns_link joins two namespaces by a veth pair of their own
#   (10.(233).X.1/30 and .2/30), the link the test cuts.
# Addresses are picked so that no route of the host covers them; nothing is routed or
# forwarded: each namespace reaches the host leg and the others on one L2 segment.
FAULT_P=""
FNET=""
FLINK=""
declare -a FAULT_NSES=()
FAULT_HOSTLEG=""

fault_ns_teardown() {
  local ns
  [[ -n "$FAULT_HOSTLEG" ]] && ip link del "$FAULT_HOSTLEG" 2>/dev/null
  for ns in "${FAULT_NSES[@]}"; do ip netns del "$ns" 2>/dev/null; done
  for ns in "${FAULT_NSES[@]}"; do
    grep -q "^$ns\b" <<<"$(ip netns list 2>/dev/null)" && echo "warning: namespace $ns still present"
  done
  [[ -n "$FAULT_HOSTLEG" ]] && ip link show "$FAULT_HOSTLEG" >/dev/null 2>&1 &&
    echo "warning: interface $FAULT_HOSTLEG still present"
  return 0
}

# fault_ns_setup: returns non-zero (with FAULT_NS_WHY set) where namespaces, veth pairs
# or bridges cannot be made (not root, no iproute2, a restricted container).
FAULT_NS_WHY=""
fault_ns_setup() {
  local x i
  [[ $(id -u) == 0 ]] || { FAULT_NS_WHY="needs root to create network namespaces"; return 1; }
  command -v ip >/dev/null || { FAULT_NS_WHY="needs iproute2 (ip)"; return 1; }
  FAULT_P="sff$$"
  # a /24 in 10.232.0.0/16 and a /30 block in 10.233.0.0/16 that nothing on the host uses
  # (output captured first: with pipefail, "cmd | grep -q" can fail on a match when cmd
  # gets SIGPIPE)
  local used
  used=$(ip -4 route show table all 2>/dev/null; ip -4 addr show 2>/dev/null)
  for ((i = 0; i < 50; i++)); do
    x=$((RANDOM % 250 + 1))
    grep -qE "(^|[^0-9])10\.23[23]\.$x\." <<<"$used" && continue
    FNET="10.232.$x" FLINK="10.233.$x"
    break
  done
  [[ -n "$FNET" ]] || { FAULT_NS_WHY="no free 10.232.x.0/24"; return 1; }
  on_cleanup fault_ns_teardown
  ip netns add "${FAULT_P}hub" 2>"$T/ip.err" || { FAULT_NS_WHY="cannot create a namespace: $(cat "$T/ip.err")"; return 1; }
  FAULT_NSES+=("${FAULT_P}hub")
  ip -n "${FAULT_P}hub" link set lo up
  ip -n "${FAULT_P}hub" link add br0 type bridge 2>"$T/ip.err" ||
    { FAULT_NS_WHY="cannot create a bridge: $(cat "$T/ip.err")"; return 1; }
  ip -n "${FAULT_P}hub" link set br0 up || return 1
  ip link add "${FAULT_P}h" type veth peer name hostleg netns "${FAULT_P}hub" 2>"$T/ip.err" ||
    { FAULT_NS_WHY="cannot create a veth pair: $(cat "$T/ip.err")"; return 1; }
  FAULT_HOSTLEG="${FAULT_P}h"
  ip -n "${FAULT_P}hub" link set hostleg master br0 && ip -n "${FAULT_P}hub" link set hostleg up &&
    ip addr add "$FNET.1/24" dev "$FAULT_HOSTLEG" && ip link set "$FAULT_HOSTLEG" up ||
    { FAULT_NS_WHY="cannot configure the host leg"; return 1; }
  return 0
}

# fault_ns_host NAME INDEX: namespace ${FAULT_P}NAME with eth0 = $FNET.INDEX/24 on the hub.
fault_ns_host() {
  local ns="${FAULT_P}$1"
  ip netns add "$ns" 2>"$T/ip.err" || fail "ip netns add $ns: $(cat "$T/ip.err")"
  FAULT_NSES+=("$ns")
  ip -n "$ns" link set lo up
  ip -n "${FAULT_P}hub" link add "v$2" type veth peer name eth0 netns "$ns" 2>"$T/ip.err" ||
    fail "veth for $ns: $(cat "$T/ip.err")"
  ip -n "${FAULT_P}hub" link set "v$2" master br0 && ip -n "${FAULT_P}hub" link set "v$2" up &&
    ip -n "$ns" addr add "$FNET.$2/24" dev eth0 && ip -n "$ns" link set eth0 up || fail "configure $ns"
}

# fault_ns_link A B: a veth pair "cut" between namespaces ${FAULT_P}A ($FLINK.1/30) and
# ${FAULT_P}B ($FLINK.2/30).
fault_ns_link() {
  local a="${FAULT_P}$1" b="${FAULT_P}$2"
  ip -n "$a" link add cut type veth peer name cut netns "$b" 2>"$T/ip.err" || fail "cut link: $(cat "$T/ip.err")"
  ip -n "$a" addr add "$FLINK.1/30" dev cut && ip -n "$b" addr add "$FLINK.2/30" dev cut &&
    ip -n "$a" link set cut up && ip -n "$b" link set cut up || fail "configure the cut link"
}

# ---------------------------------------------------------------- the ledger (issue 15)
# Every actor writes the batches a shard acknowledged to $LEDGERS/NAME.ledger (sac-actor
# --ledger); every shard serves its provenance (which batches it holds) on its metrics
# port at GET /provenance. scripts/ledger_check.sh matches the two.
LEDGER_CHECK="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/scripts/ledger_check.sh"
LEDGERS=""

# fetch_provenance NAME OUT: shard NAME's provenance listing into OUT (5 s bound); non-zero
# when it does not answer with one.
fetch_provenance() {
  local p code
  p=$(metrics_port "$1")
  [[ -n "$p" ]] || return 1
  code=$(nsexec "$1" curl -s --max-time 5 -o "$2" -w '%{http_code}' "http://127.0.0.1:$p/provenance" 2>/dev/null)
  [[ "$code" == 200 ]] && head -n 1 "$2" | grep -q '^# sacfleet provenance v1 shard=[0-9]* incarnation=[0-9]*'
}

# incarnation_of FILE: the incarnation in a provenance listing's header.
incarnation_of() { head -n 1 "$1" | sed -n 's/.* incarnation=\([0-9][0-9]*\).*/\1/p'; }
# receipts_from FILE ACTOR: batches of ACTOR a provenance listing holds.
receipts_from() { awk -v a="$2" '!/^#/ && $1 == a { n++ } END { print n + 0 }' "$1"; }
# last_seq_from FILE ACTOR: the highest seq of ACTOR's newest session in a provenance
# listing (0 if none). Sessions grow across an actor's restarts (replay/client.c), and are
# compared as strings of equal length (decimal u64 of the same magnitude) or by length.
last_seq_from() {
  awk -v a="$2" '!/^#/ && $1 == a {
      if (s == "" || length($2) > length(s) || (length($2) == length(s) && $2 > s)) { s = $2; m = 0 }
      if ($2 == s && $3 + 0 > m) m = $3 + 0
    } END { print m + 0 }' "$1"
}

# ledger_check LABEL SHARD...: the ledger check, now. The actors' ledgers are copied
# FIRST, then the shards' provenance fetched: every batch acknowledged before the copy was
# stored before it, so a batch in the copy that no shard holds is lost (the rings are sized
# so that nothing is evicted). Keeps the inputs and the checker's output in
# $T/ledger-LABEL/; sets LEDGER_FIG ("acknowledged A, found once O, missing M, found twice
# D") and LEDGER_ACTORS (the per-actor lines, joined by "; "); returns the checker's
# status (0 clean, 1 missing or twice, 2 unreadable input).
LEDGER_FIG="" LEDGER_ACTORS=""
ledger_check() {
  local label=$1 d="$T/ledger-$1" n rc=0 try
  shift
  mkdir -p "$d"
  cp "$LEDGERS"/*.ledger "$d"/ || fail "no actor ledgers in $LEDGERS"
  for n in "$@"; do
    for ((try = 0; try < 5; try++)); do
      fetch_provenance "$n" "$d/$n.prov" && break
      sleep 1
    done
    ((try < 5)) || fail "$n does not serve GET /provenance (ledger check '$label')"
  done
  sh "$LEDGER_CHECK" -v "$d"/*.ledger "$d"/*.prov >"$d/check.txt" 2>&1 || rc=$?
  LEDGER_FIG=$(sed -n 's/^ledger total: \(acknowledged [0-9]*, found once [0-9]*, missing [0-9]*, found twice [0-9]*\).*/\1/p' "$d/check.txt")
  LEDGER_ACTORS=$(sed -n 's/^ledger actor \([0-9]*\): acknowledged \([0-9]*\), found once \([0-9]*\), missing \([0-9]*\), found twice \([0-9]*\).*/a\1 \2\/\3\/\4\/\5/p' "$d/check.txt" | paste -sd ' ' -)
  log "ledger check '$label': $(grep '^ledger total' "$d/check.txt")"
  ((rc == 2)) && fail "ledger check '$label': unreadable input: $(cat "$d/check.txt")"
  return "$rc"
}

# ledger_require_clean LABEL SHARD...: the ledger check must find every acknowledged batch
# once: missing 0, found twice 0; and every actor must have kept a ledger with at least one
# acknowledged batch in it (LEDGER_EXPECT, when set: how many ledger files there must be),
# so that an actor whose ledger stayed empty cannot pass by having nothing to lose.
ledger_require_clean() {
  local label=$1 f n files=0
  for f in "$LEDGERS"/*.ledger; do
    [[ -f "$f" ]] || continue
    files=$((files + 1))
    n=$(grep -vc '^#' "$f")
    ((n > 0)) || fail "ledger check '$label': $(basename "$f") holds no acknowledged batch"
  done
  [[ -z "${LEDGER_EXPECT:-}" ]] || ((files == LEDGER_EXPECT)) ||
    fail "ledger check '$label': $files ledger files in $LEDGERS, expected one per actor ($LEDGER_EXPECT)"
  ledger_check "$@" || fail "ledger check '$label': $(cat "$T/ledger-$label/check.txt")"
  [[ "$LEDGER_FIG" =~ ^acknowledged\ ([0-9]+),\ found\ once\ ([0-9]+),\ missing\ 0,\ found\ twice\ 0$ ]] ||
    fail "ledger check '$label': unexpected figures '$LEDGER_FIG'"
  ((BASH_REMATCH[1] > 0 && BASH_REMATCH[1] == BASH_REMATCH[2])) ||
    fail "ledger check '$label': $LEDGER_FIG (nothing acknowledged?)"
}

# ledger_errors_zero ACTOR...: each actor's sac_actor_ledger_errors_total is 0 (a ledger
# line it could not write would make the check above blind to that batch).
ledger_errors_zero() {
  local n v
  for n in "$@"; do
    v=$(metric "$n" sac_actor_ledger_errors_total)
    [[ -n "$v" ]] || fail "$n: no sac_actor_ledger_errors_total on its /metrics"
    [[ "$v" == 0 ]] || fail "$n: $v ledger lines could not be written (sac_actor_ledger_errors_total)"
  done
}

# prov_rows_match_stored LABEL SHARD...: with the actors stopped (nothing arriving), the
# rows of SHARD's provenance as fetched by the ledger check LABEL add up to the rows the
# shard counts as stored (sac_replay_inserted_transitions_total): the provenance records
# what was stored, not what was sent, and holds every stored batch (the rings are sized
# so that nothing is evicted). Retried for 5 s: the metrics are published periodically.
prov_rows_match_stored() {
  local label=$1 n rows v try
  shift
  for n in "$@"; do
    rows=$(awk '!/^#/ { r += $4 } END { printf "%d", r }' "$T/ledger-$label/$n.prov")
    for ((try = 0; try < 25; try++)); do
      v=$(metric "$n" sac_replay_inserted_transitions_total)
      [[ "$v" == "$rows" ]] && break
      sleep 0.2
    done
    [[ "$v" == "$rows" ]] ||
      fail "ledger check '$label': $n's provenance holds $rows rows, the shard counts ${v:-?} stored"
    log "ledger check '$label': $n's provenance rows ($rows) = its stored transitions"
  done
}

# ---------------------------------------------------------------- the drain at exit
# An actor told to stop (or at --max_steps) sends its last batch and waits up to
# --drain_timeout_ms for the acknowledgements; what is still unacknowledged after it is
# logged as "N batch(es) unacknowledged at exit" and has an unknown fate (stored with the
# acknowledgement lost, or never stored): a test that allows none must see none.

# unacked_at_exit NAME: the batches NAME's latest start logged as unacknowledged at exit
# (0 when it logged none), and its rows never sent ("batches rows" on one line).
unacked_at_exit() {
  since_start "$1" | awk '
    /batch\(es\) unacknowledged at exit/ { for (i = 1; i < NF; i++) if ($(i + 1) == "batch(es)") b = $i }
    /last batch of [0-9]+ rows not sent at exit/ { for (i = 1; i < NF; i++) if ($i == "of") r = $(i + 1) }
    END { printf "%d %d\n", b, r }'
}

# drained_clean ACTOR...: each actor (exited) drained completely: nothing logged as
# unacknowledged at exit, no batch unsent, and its "done" line says the same. Returns 1
# with DRAIN_WHY set otherwise (callers fail; the drain control expects the failure).
DRAIN_WHY=""
drained_clean() {
  local n u done_line
  DRAIN_WHY=""
  for n in "$@"; do
    u=$(unacked_at_exit "$n")
    done_line=$(since_start "$n" | grep -a ' done: ' | tail -n 1)
    [[ -n "$done_line" ]] || { DRAIN_WHY="$n: no 'done' line (did it exit cleanly?)"; return 1; }
    if [[ "$u" != "0 0" ]] || ! grep -q ' 0 without acknowledgement, 0 rows unsent' <<<"$done_line"; then
      DRAIN_WHY="$n exited with batches unacknowledged or unsent (batches rows: $u): $(since_start "$n" | grep -a 'at exit' | head -n 2 | paste -sd ';' -)"
      return 1
    fi
  done
  return 0
}

# limiter_idle_now SHARD: SHARD's rate limiter is idle now (sac-replay --limiter_idle_ms:
# its latest line of the two is "no sample request for ...", not "sample requests again").
limiter_idle_now() {
  since_start "$1" | grep -a -E 'no sample request for [0-9]+ ms|sample requests again' | tail -n 1 |
    grep -aq 'no sample request for'
}
