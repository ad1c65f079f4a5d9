#!/usr/bin/env bash
# --env gym:ID runs a Gymnasium ID sacfleet does not implement through the Gymnasium bridge
# (found like the other plugins: SAC_PLUGIN_PATH, next to the binary, the build tree), and
# --env_module imports a user's package that registers its own ID. Negative control: the
# user's ID without --env_module is not found, and a plain unknown ID names gym:ID as the
# way. Skipped (77) where the bridge is not built or its Python has no gymnasium/MuJoCo.
# usage: test_env_gym_id.sh SAC_LEARNER
set -u
LEARNER=$1
DIR=$(mktemp -d /tmp/sac-gym-id.XXXXXX)
trap 'rm -rf "$DIR"' EXIT
run() { # run NAME ARGS...: a short local run
  local name=$1
  shift
  timeout 120 "$LEARNER" --mode=local --total_steps=300 --learning_starts=100 --hidden=16 --eval_every_steps=0 \
    --eval_episodes=1 --metrics_port=-1 --run_dir="$DIR/runs" "$@" >"$DIR/$name.log" 2>&1
}
fail() { echo "FAIL: $*"; tail -n 5 "$DIR"/*.log; exit 1; }

run unknown --env=InvertedPendulum-v5 && fail "an unknown plain ID ran"
grep -q "gym:ID for any other Gymnasium ID" "$DIR/unknown.log" || fail "the unknown-ID error does not name gym:ID"

if ! run native --env=gym:InvertedPendulum-v5; then
  if grep -q "not usable in the embedded Python\|cannot find plugin\|not found in\|No module named" \
    "$DIR/native.log"; then
    echo "SKIP: the Gymnasium bridge cannot run InvertedPendulum-v5 here:"
    grep ERROR "$DIR/native.log" | head -n 2
    exit 77
  fi
  fail "gym:InvertedPendulum-v5 failed"
fi
grep -q "result: env gym:InvertedPendulum-v5  steps 300" "$DIR/native.log" || fail "no result line for gym:InvertedPendulum-v5"

# a user's package: registers SacUserPendulum-v0 when imported
mkdir -p "$DIR/py/sac_user_envs"
cat >"$DIR/py/sac_user_envs/__init__.py" <<'PY'
import gymnasium
gymnasium.register(id="SacUserPendulum-v0", entry_point="gymnasium.envs.classic_control:PendulumEnv",
                   max_episode_steps=200)
PY
export PYTHONPATH="$DIR/py${PYTHONPATH:+:$PYTHONPATH}"
run user_no_module --env=gym:SacUserPendulum-v0 && fail "a user's ID ran without --env_module"
run user --env=gym:SacUserPendulum-v0 --env_module=sac_user_envs || fail "--env_module sac_user_envs failed"
grep -q "result: env gym:sac_user_envs:SacUserPendulum-v0  steps 300" "$DIR/user.log" ||
  fail "no result line for the user's environment"
run module_without_gym --env=Pendulum-v1 --env_module=sac_user_envs && fail "--env_module without gym: ran"
grep -q "needs --env gym:ID" "$DIR/module_without_gym.log" || fail "--env_module without gym: not explained"
echo "PASS: gym:InvertedPendulum-v5 and a user's gym:SacUserPendulum-v0 (--env_module) ran 300 steps"
