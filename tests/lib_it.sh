# Shared harness of the single-script integration tests (test_metrics_integration.sh,
# test_curve_cluster.sh): a temporary directory, the PIDs the script started, a fail()
# that prints the tail of every log, a cleanup that stops only those PIDs (TERM, a
# bounded wait, then KILL) and removes the directory, and bounded waiting helpers.
# Usage: source it, then it_init NAME (sets DIR and PIDS, installs the EXIT trap).

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

# waits (bounded, $2 tenths of a second) until the command $1 succeeds
wait_for() {
  local i
  for i in $(seq 1 "$2"); do
    eval "$1" && return 0
    sleep 0.1
  done
  return 1
}

# the metrics port a binary logged in file $1 ("metrics on http://ADDR:PORT/metrics"),
# for the bind address $2 (default 127.0.0.1)
logged_port() { grep -o "metrics on http://${2:-127.0.0.1}:[0-9]*" "$1" 2>/dev/null | head -n1 | grep -o '[0-9]*$'; }
