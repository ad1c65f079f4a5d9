# Shared harness of the single-script integration tests (test_metrics_integration.sh,
# test_curve_cluster.sh, test_monitoring.sh): a temporary directory, the PIDs the script
# started, a fail() that prints the tail of every log, a cleanup that stops only those PIDs
# (TERM, a bounded wait, then KILL) and removes the directory, bounded waiting helpers, and
# a Prometheus server on a free port.
# Usage: source it, then it_init NAME (sets DIR and PIDS, installs the EXIT trap).

# shellcheck source=tests/lib_port.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib_port.sh"

it_init() {
  DIR=$(mktemp -d "/tmp/sac-$1.XXXXXX")
  PIDS=()
  trap it_cleanup EXIT
}

fail() {
  echo "FAIL: $*"
  for f in "$DIR"/*.log; do
    [ -f "$f" ] && { echo "---- $(basename "$f") (last lines)"; tail -n 15 "$f"; }
  done
  exit 1
}

it_cleanup() {
  # only what this script started, by PID; then a bounded wait for each
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do
    for _ in $(seq 1 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null
    wait "$p" 2>/dev/null
  done
  rm -rf "$DIR"
}

# wait_for CMD STALL: polls the command CMD (eval'd) every 0.1 s until it succeeds; returns
# 1 once NOTHING has progressed for STALL tenths of a second. Progress is the output of
# $IT_PROGRESS changing (probed once a second); the default, it_progress, is the total
# size of the logs in $DIR, which grows while the processes under test do anything. So a
# slow or busy machine slows the test down without failing it, and a wedged system fails
# it after the stated time; the test's ctest TIMEOUT stays the last resort against a
# livelock. (tests/test_wait_progress.sh checks both ways.) It also returns 1, saying so,
# once a process registered with it_watch has exited: the logs of the others would go on
# growing while it waited for what the dead one would never do.
it_progress() { cat "$DIR"/*.log 2>/dev/null | wc -c; }
IT_PROGRESS=it_progress
declare -A IT_WATCH=()
# it_watch PID NAME: process PID (NAME in messages) must stay up while wait_for waits
it_watch() { IT_WATCH[$1]=$2; }
wait_for() {
  local _wf_tok _wf_now _wf_last _wf_probe _wf_t _wf_p
  _wf_tok=$(eval "$IT_PROGRESS" 2>/dev/null)
  _wf_last=${EPOCHREALTIME/./} _wf_probe=$_wf_last # microseconds
  while :; do
    eval "$1" && return 0
    sleep 0.1
    _wf_t=${EPOCHREALTIME/./}
    if ((_wf_t - _wf_probe >= 1000000)); then
      _wf_probe=$_wf_t
      for _wf_p in "${!IT_WATCH[@]}"; do
        kill -0 "$_wf_p" 2>/dev/null || {
          echo "wait_for: ${IT_WATCH[$_wf_p]} (pid $_wf_p) exited while waiting"
          return 1
        }
      done
      _wf_now=$(eval "$IT_PROGRESS" 2>/dev/null)
      if [ "$_wf_now" != "$_wf_tok" ]; then
        _wf_tok=$_wf_now _wf_last=$_wf_t
      fi
    fi
    ((_wf_t - _wf_last < $2 * 100000)) || return 1
  done
}

# the metrics port a binary logged in file $1 ("metrics on http://ADDR:PORT/metrics"),
# for the bind address $2 (default 127.0.0.1)
logged_port() { grep -o "metrics on http://${2:-127.0.0.1}:[0-9]*" "$1" 2>/dev/null | head -n1 | grep -o '[0-9]*$'; }

# it_start_prometheus CONFIG: a Prometheus server with CONFIG on a free port of 127.0.0.1
# (storage $DIR/tsdb, log $DIR/prometheus.log), in PIDS, ready when this returns 0; sets
# PROM_PORT and PROM_PID. The port lies below the kernel's ephemeral range (an outgoing
# connection's source port cannot take it between the pick and the bind) and no socket uses
# it. A server that exits (its bind raced another program) is retried on a fresh port; one
# that neither answers /-/ready nor uses CPU for 20 s is stopped and retried. Returns 1
# when it did not start on any of five ports.
it_start_prometheus() {
  PROM_PID=
  local attempt
  for attempt in 1 2 3 4 5; do
    PROM_PORT=$(free_port) || return 1
    prometheus --config.file="$1" --storage.tsdb.path="$DIR/tsdb" \
      --web.listen-address="127.0.0.1:$PROM_PORT" --log.level=warn >"$DIR/prometheus.log" 2>&1 &
    PROM_PID=$!
    PIDS+=("$PROM_PID")
    IT_PROGRESS='it_cpu_ticks "$PROM_PID"'
    wait_for '! kill -0 "$PROM_PID" 2>/dev/null || curl -s --max-time 2 "http://127.0.0.1:$PROM_PORT/-/ready" | grep -qi ready' 200
    IT_PROGRESS=it_progress
    if kill -0 "$PROM_PID" 2>/dev/null && curl -s --max-time 2 "http://127.0.0.1:$PROM_PORT/-/ready" | grep -qi ready; then
      it_watch "$PROM_PID" prometheus
      return 0
    fi
    echo "prometheus on :$PROM_PORT (attempt $attempt) did not become ready: $(tail -n 3 "$DIR/prometheus.log" | tr '\n' ' ')"
    kill -TERM "$PROM_PID" 2>/dev/null
    wait "$PROM_PID" 2>/dev/null
    PROM_PID=
  done
  return 1
}

# it_cpu_ticks PID: the CPU time (user + system, in clock ticks) process PID has used; empty
# once it is gone. A progress measure for a process that logs nothing while it works.
it_cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null; }
