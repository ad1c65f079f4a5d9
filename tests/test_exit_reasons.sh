#!/usr/bin/env bash
# Every failing exit says why (issue 14, defects 11 and 12): representative failures of
# sac-learner, sac-actor, sac-export and sac-keygen, each run with a 20 s bound, must exit
# non-zero with a line naming the cause (the substring given per case). A silent exit, a
# generic "invalid argument" alone, or a hang (a config file that never ends) fails.
#
# usage: test_exit_reasons.sh SAC_LEARNER SAC_ACTOR SAC_EXPORT SAC_KEYGEN
set -u
[[ $# -eq 4 ]] || { echo "usage: $0 SAC_LEARNER SAC_ACTOR SAC_EXPORT SAC_KEYGEN"; exit 2; }
LEARNER=$1 ACTOR=$2 EXPORT=$3 KEYGEN=$4
for b in "$LEARNER" "$ACTOR" "$EXPORT" "$KEYGEN"; do
  [[ -x "$b" ]] || { echo "FAIL: not an executable: $b"; exit 1; }
done
command -v timeout >/dev/null || { echo "SKIP: timeout (coreutils) is needed"; exit 77; }
DIR=$(mktemp -d "${TMPDIR:-/tmp}/sac-exit-reasons.XXXXXX") || exit 1
trap 'rm -rf "$DIR"' EXIT
FAILED=0
N=0

# expect_reason WANT CMD...: CMD exits non-zero within 20 s and its output holds WANT.
expect_reason() {
  local want=$1 out rc
  shift
  N=$((N + 1))
  out=$(timeout 20 "$@" 2>&1 </dev/null)
  rc=$?
  if ((rc == 124)); then
    echo "FAIL: still running after 20 s: $*"
    FAILED=$((FAILED + 1))
  elif ((rc == 0)); then
    echo "FAIL: exit 0: $*"
    FAILED=$((FAILED + 1))
  elif ! grep -qF -- "$want" <<<"$out"; then
    echo "FAIL: exit $rc without saying '$want': $*"
    printf '%s\n' "$out" | tail -n 5 | sed 's/^/      /'
    FAILED=$((FAILED + 1))
  else
    echo "ok   exit $rc, says '$want': ${*##*/}"
  fi
}

NO_METRICS=--metrics_port=-1
# a real policy file for sac-export's cases: a 300-step embedded run
"$LEARNER" --total_steps=300 --learning_starts=100 --batch_size=32 --actors=1 --embedded_shards=1 --eval_episodes=1 --hidden=8 --quiet \
  --run_dir="$DIR/runs" --run_name=p $NO_METRICS >"$DIR/policy-run.log" 2>&1 ||
  { echo "FAIL: could not make a policy file"; cat "$DIR/policy-run.log"; exit 1; }
POLICY=$DIR/runs/p/policy.bin
[[ -s "$POLICY" ]] || { echo "FAIL: no $POLICY"; exit 1; }
mkfifo "$DIR/fifo"
printf 'this is not a config\n%.0s' $(seq 1 100) >"$DIR/garbage.conf"

# sac-learner
expect_reason "unknown environment" "$LEARNER" --env=Nope-v1 --run_dir="$DIR/runs" $NO_METRICS
expect_reason "no run directory" "$LEARNER" --resume="$DIR/nonexistent" $NO_METRICS
expect_reason "cannot create run directory" "$LEARNER" --run_dir=/proc/nonexistent $NO_METRICS
expect_reason "is not one of service, local" "$LEARNER" --mode=bogus $NO_METRICS
expect_reason "log_level" "$LEARNER" --log_level=bogus
expect_reason "not a regular file" "$LEARNER" --config=/dev/zero
expect_reason "not a regular file" "$LEARNER" --config=/dev/urandom
expect_reason "not a regular file" "$LEARNER" --config="$DIR/fifo"
expect_reason "too many errors" "$LEARNER" --config="$DIR/garbage.conf"
expect_reason "curve_server_key is empty" "$LEARNER" --curve_key="$DIR/x.key" --shards=tcp://127.0.0.1:9 $NO_METRICS
# sac-actor
expect_reason "bad shard endpoint list" "$ACTOR" --shards= $NO_METRICS
expect_reason "unknown environment" "$ACTOR" --shards=tcp://127.0.0.1:9 --env=Nope-v1 $NO_METRICS
expect_reason "cannot connect to foo://x" "$ACTOR" --shards=foo://x $NO_METRICS
expect_reason "unknown key" "$ACTOR" --no_such_option=1
expect_reason "not a regular file" "$ACTOR" --config=/dev/zero
# sac-export
expect_reason "--policy FILE is required" "$EXPORT"
expect_reason "cannot read" "$EXPORT" --policy="$DIR/nonexistent.bin"
expect_reason "not a sacfleet policy file" "$EXPORT" --policy=/dev/zero
expect_reason "not a C identifier" "$EXPORT" --policy="$POLICY" --out="$DIR" --prefix=
expect_reason "not a C identifier" "$EXPORT" --policy="$POLICY" --out="$DIR" --prefix=1abc
expect_reason "cannot write" "$EXPORT" --policy="$POLICY" --out="$DIR/nonexistent"
# sac-keygen
expect_reason "--out DIR/NAME is required" "$KEYGEN"
expect_reason "unexpected argument" "$KEYGEN" --bogus
expect_reason "cannot create" "$KEYGEN" --out "$DIR/nonexistent/k"
"$KEYGEN" --out "$DIR/k" >/dev/null 2>&1
expect_reason "use --force" "$KEYGEN" --out "$DIR/k"

if ((FAILED > 0)); then
  echo "FAIL: $FAILED of $N failing exits did not say why"
  exit 1
fi
echo "PASS: $N failing exits, each with its reason"
