#!/usr/bin/env bash
# The monitoring assets of deploy/ (issue 37): the alerting rules and the Grafana dashboard.
#  1. promtool check rules deploy/alerts.yml, promtool check config deploy/prometheus.yml
#     (which loads them), and promtool test rules tests/monitoring/alerts_test.yml: each
#     alert fires on its synthetic failure (after its `for`, not before) and nothing fires
#     on healthy series. Controls: the same suite against the rules made never to fire
#     must fail every expectation that names an alert, and against rules made always to
#     fire must fail the healthy ones.
#  2. A short embedded run (Pendulum-v1, small networks, an evaluation every 200 updates,
#     the default write-ahead log) on 127.0.0.1 and a real Prometheus scraping it every
#     second with deploy/alerts.yml loaded: every query of the dashboard returns data
#     (tests/monitoring/dashboard_check.py names any that does not); every rule group
#     evaluates without error and no alert fires on the healthy run. Control: the checker
#     fails, naming the query, on a copy of the dashboard with one metric name misspelled.
# Waits are bounded by progress (tests/lib_it.sh), not by the clock.
#
# Usage: test_monitoring.sh SAC_LEARNER
# Exit: 0 pass, 1 fail, 77 skipped (no prometheus/promtool/curl/python3:
# scripts/install-deps.sh --test installs the Debian package prometheus).
set -u
LEARNER=${1:?sac-learner path}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
for tool in prometheus promtool curl python3; do
  command -v "$tool" >/dev/null 2>&1 ||
    { echo "SKIP: $tool not installed (scripts/install-deps.sh --test installs the Debian package prometheus)"; exit 77; }
done

# shellcheck source=tests/lib_it.sh
source "$HERE/lib_it.sh"
it_init monitoring

# ---- 1. the rules -------------------------------------------------------------------------
promtool check rules "$ROOT/deploy/alerts.yml" || fail "promtool check rules"
(cd "$ROOT/deploy" && promtool check config prometheus.yml) || fail "promtool check config deploy/prometheus.yml"
promtool test rules "$HERE/monitoring/alerts_test.yml" || fail "promtool test rules"

# the rules with every expression replaced, and the suite pointed at them (line by line: an
# `expr:` and the lines indented under it are one expression)
mutate() { # $1: the replacement expression, $2: output directory
  mkdir -p "$2"
  python3 - "$ROOT/deploy/alerts.yml" "$HERE/monitoring/alerts_test.yml" "$1" "$2" <<'PY'
import re, sys
rules, suite, expr, out = sys.argv[1:]
lines, skip = [], None
for line in open(rules):
    indent = len(line) - len(line.lstrip())
    if skip is not None and (not line.strip() or indent > skip):
        continue
    skip = None
    m = re.match(r"^( *)expr:", line)
    if m:
        lines.append(f"{m.group(1)}expr: '{expr}'\n")
        skip = len(m.group(1))
    else:
        lines.append(line)
open(f"{out}/alerts.yml", "w").writelines(lines)
text = open(suite).read().replace("../../deploy/alerts.yml", f"{out}/alerts.yml")
open(f"{out}/alerts_test.yml", "w").write(text)
# how many expectations name an alert, and how many expect none
quiet = len(re.findall(r"exp_samples: \[\]", text))
print(len(re.findall(r"exp_samples:", text)) - quiet, quiet)
PY
}
read -r named quiet < <(mutate 'vector(1) < 0' "$DIR/never")
promtool test rules "$DIR/never/alerts_test.yml" >"$DIR/never.out" 2>&1 && fail "control: rules that never fire passed the suite"
failed=$(grep -c '^ *expr: .*time: ' "$DIR/never.out")
[ "$failed" = "$named" ] && ! grep -q '^ *exp: nil' "$DIR/never.out" ||
  fail "control: $failed failed expectations on rules that never fire, not the $named that name an alert"
echo "ok   control: rules that never fire fail all $named expectations that name an alert, and only those"
mutate 'vector(1)' "$DIR/always" >/dev/null
promtool test rules "$DIR/always/alerts_test.yml" >"$DIR/always.out" 2>&1 && fail "control: rules that always fire passed the suite"
failed=$(grep -c '^ *exp: nil' "$DIR/always.out")
[ "$failed" = "$quiet" ] || fail "control: $failed of the $quiet expectations of quiet failed on rules that always fire"
echo "ok   control: rules that always fire fail all $quiet expectations of quiet"

# ---- 2. the dashboard against a real Prometheus scraping an embedded run --------------------
"$LEARNER" --env Pendulum-v1 --hidden 32 --batch_size 64 --threads 1 --total_steps 1000000000 \
  --learning_starts 300 --eval_every_updates 200 --eval_episodes 1 --log_interval 0 --run_dir "$DIR/runs" \
  --metrics_addr 127.0.0.1 --metrics_port 0 >"$DIR/learner.log" 2>&1 &
LEARNER_PID=$!
PIDS+=("$LEARNER_PID")
it_watch "$LEARNER_PID" sac-learner
wait_for '[ -n "$(logged_port "$DIR/learner.log")" ]' 300 || fail "sac-learner not serving /metrics"
PORT=$(logged_port "$DIR/learner.log")
cp "$ROOT/deploy/alerts.yml" "$DIR/alerts.yml"
cat >"$DIR/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files: [alerts.yml]
scrape_configs:
  - job_name: learner
    static_configs: [{targets: ['127.0.0.1:$PORT']}]
EOF
it_start_prometheus "$DIR/prometheus.yml" || fail "Prometheus did not start"
URL="http://127.0.0.1:$PROM_PORT"
echo "sac-learner :$PORT, prometheus :$PROM_PORT"
# the run has evaluated once (the last series to appear) before the queries are polled
wait_for 'grep -q "eval at update" "$DIR/learner.log"' 600 || fail "no evaluation in the embedded run"
python3 "$HERE/monitoring/dashboard_check.py" "$ROOT/deploy/grafana/dashboards/sacfleet.json" "$URL" \
  --expect-empty 'sum(rate(sac_learner_updates_totl[10s]))' || fail "the dashboard's queries"
kill -0 "$LEARNER_PID" 2>/dev/null || fail "sac-learner exited during the check"

# the rules evaluate on real series: every group healthy, nothing firing on a healthy run
rules=$(curl -s --max-time 5 "$URL/api/v1/rules")
python3 - "$rules" <<'PY' || fail "rule evaluation on the live run"
import json, sys
groups = json.loads(sys.argv[1])["data"]["groups"]
rules = [r for g in groups for r in g["rules"]]
bad = [f"{r['name']}: {r.get('lastError')}" for r in rules if r.get("health") != "ok"]
firing = [r["name"] for r in rules if r.get("state") == "firing"]
print(f"{len(groups)} rule groups, {len(rules)} alerts evaluated; unhealthy {bad}; firing {firing}")
sys.exit(1 if bad or firing or len(rules) != 14 else 0)
PY

# control: a misspelled metric name in the dashboard is named by the checker
sed 's/sac_replay_wal_syncs_total/sac_replay_wal_sync_total/' "$ROOT/deploy/grafana/dashboards/sacfleet.json" \
  >"$DIR/misspelled.json"
python3 "$HERE/monitoring/dashboard_check.py" "$DIR/misspelled.json" "$URL" --stall 3 >"$DIR/misspelled.out" 2>&1 &&
  fail "control: a dashboard with a misspelled metric passed"
grep -q '^FAIL \[WAL group commit\] returns no data.*sac_replay_wal_sync_total' "$DIR/misspelled.out" ||
  { cat "$DIR/misspelled.out"; fail "control: the checker did not name the misspelled query"; }
echo "ok   control: the misspelled query is named: $(grep -m1 '^FAIL \[' "$DIR/misspelled.out")"
echo "PASS: rules checked and tested, every dashboard query answered by a live Prometheus"
exit 0
