#!/usr/bin/env bash
# The .deb in a clean Debian 12 container (issue 18; ctest test_deb, labels slow;docker).
#
# Builds the project (Release, no CUDA, no tests) in a temporary folder, packages it with
# `cpack -G DEB`, and installs the package with apt-get in a container from the
# debootstrapped Debian base image the compose test makes (sacfleet-base:<suite>; made here
# the same way when it is missing). In the container, with nothing but the package and
# what apt pulls in for it:
#   1. `sac-learner --env Pendulum-v1 --total_steps 2000` trains and prints its result;
#   2. `sac-learner --env Hopper-v5` fails before Gymnasium is there, with the message that
#      says what to do (the negative control: the models really come from Gymnasium);
#   3. after `pip install "gymnasium[mujoco]"`, `sac-learner --env Hopper-v5 --total_steps
#      2000` trains: the plugin is found in the install prefix and the model files through
#      the container's python3.
# The package's Depends line must name only Debian packages of shared libraries (checked
# against the container's apt, which must resolve them).
#
# Exit 0 pass, 1 fail, 77 skip (no Docker engine can be had: not root, docker.io or
# debootstrap cannot be installed with apt-get, dockerd will not start). Installs docker.io
# and debootstrap when missing (as scripts/compose_test.sh and scripts/first_command_test.sh
# do, through scripts/lib_debian_image.sh), so on a fresh CI machine it runs whatever order
# ctest picks. An engine this test starts (dockerd --iptables=false --bridge=none) it stops.
# The container uses the host's network (apt mirror, pip with this machine's pip settings);
# every step has a time limit.
# usage: test_deb.sh SOURCE_DIR
set -euo pipefail
src=$(cd "$1" && pwd)
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
T0=$(date +%s)
log() { printf '[test_deb %4ds] %s\n' "$(($(date +%s) - T0))" "$*"; }
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }
WORK=$(mktemp -d /tmp/sacfleet-deb.XXXXXX)
DOCKERD_PID=""
# shellcheck source=scripts/lib_debian_image.sh
. "$ROOT/scripts/lib_debian_image.sh"
cleanup() {
  docker_engine_stop # only an engine this test started
  rm -rf "$WORK"
}
trap cleanup EXIT

# ---- the tools, the engine and the base image (as scripts/first_command_test.sh) ----------
rc=0
docker_tools_ensure "$WORK" || rc=$?
[ $rc = 0 ] || exit $rc # 77 with its SKIP line printed
docker_engine_ensure "$WORK" || rc=$?
[ $rc = 0 ] || exit $rc # 77 with its SKIP line printed
log "engine: Docker $(docker version -f '{{.Server.Version}}')"
debian_base_image "$WORK" || fail "no base image (reason above)" # sets BASE_TAG
BASE=$BASE_TAG
log "base image $BASE"

# ---- the package ---------------------------------------------------------------------------
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache)
log "configure + build (Release, no CUDA, no tests) + cpack"
cmake -S "$src" -B "$WORK/build" -DCMAKE_BUILD_TYPE=Release -DSAC_WITH_CUDA=OFF -DBUILD_TESTING=OFF \
  "${launcher[@]}" >"$WORK/build.log" 2>&1 || { tail -20 "$WORK/build.log"; fail "configure"; }
timeout 1200 cmake --build "$WORK/build" -j"$(nproc)" >>"$WORK/build.log" 2>&1 || { tail -20 "$WORK/build.log"; fail "build"; }
(cd "$WORK/build" && timeout 300 cpack -G DEB >>"$WORK/build.log" 2>&1) || { tail -20 "$WORK/build.log"; fail "cpack"; }
deb=$(ls "$WORK"/build/sacfleet_*.deb)
depends=$(dpkg-deb -f "$deb" Depends)
log "package $(basename "$deb"): Depends: $depends"
mkdir "$WORK/deb" && cp "$deb" "$WORK/deb/"
contents=$(dpkg-deb -c "$deb")
grep -q '/usr/lib/sacfleet/libsac_env_mujoco.so$' <<<"$contents" || fail "the package has no MuJoCo plugin (libmujoco-dev missing at build?)"
grep -q '/usr/share/sacfleet/presets/Pendulum-v1.conf$' <<<"$contents" || fail "the package has no presets"

# ---- in the container ------------------------------------------------------------------------
cat >"$WORK/deb/run.sh" <<'IN'
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
step() { echo "== $*"; }
step "apt-get install ./sacfleet.deb"
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends /deb/sacfleet_*.deb >/tmp/apt.log 2>&1 || { tail -20 /tmp/apt.log; exit 1; }
cd /tmp
run=(--total_steps 2000 --metrics_port -1 --log_interval 0 --eval_episodes 2)
step "sac-learner --env Pendulum-v1"
sac-learner --env Pendulum-v1 "${run[@]}" >/tmp/pend.log 2>&1 || { tail -20 /tmp/pend.log; exit 1; }
grep '^result:' /tmp/pend.log
grep -m1 -o 'preset /usr/share/sacfleet/presets/Pendulum-v1.conf: sets lr' /tmp/pend.log
step "sac-learner --env Hopper-v5 without Gymnasium (must fail, saying what to do)"
if sac-learner --env Hopper-v5 "${run[@]}" >/tmp/nogym.log 2>&1; then echo "it did not fail"; exit 1; fi
grep -m1 'no model file' /tmp/nogym.log
step "pip install gymnasium[mujoco]"
apt-get install -y -qq --no-install-recommends python3-pip >/tmp/apt2.log 2>&1 || { tail -20 /tmp/apt2.log; exit 1; }
pip install -q --break-system-packages "gymnasium[mujoco]" >/tmp/pip.log 2>&1 || { tail -20 /tmp/pip.log; exit 1; }
python3 -c 'import gymnasium, mujoco; print("gymnasium", gymnasium.__version__, "mujoco", mujoco.__version__)'
step "sac-learner --env Hopper-v5"
SAC_LOG_LEVEL=debug sac-learner --env Hopper-v5 "${run[@]}" >/tmp/hop.log 2>&1 || { tail -20 /tmp/hop.log; exit 1; }
grep -m1 -o 'plugin /usr/lib/sacfleet/libsac_env_mujoco.so: loaded .*' /tmp/hop.log
grep '^result:' /tmp/hop.log
echo "== container: all steps passed"
IN
# pip settings of this machine (certificates, local wheel folder, timeouts) go along
pipargs=()
[ -f /etc/pip.conf ] && pipargs+=(-v /etc/pip.conf:/etc/pip.conf:ro)
for v in $(env | sed -n 's/^\(PIP_[A-Z_]*\)=.*/\1/p; s/^\(https\?_proxy\|HTTPS\?_PROXY\|no_proxy\|NO_PROXY\)=.*/\1/p'); do
  pipargs+=(-e "$v")
done
# this machine's CA bundle beside the container's own (whose package must be able to write it)
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
  pipargs+=(-v /etc/ssl/certs/ca-certificates.crt:/run/host-ca.crt:ro -e PIP_CERT=/run/host-ca.crt)
fi
[ -d /opt/wheels ] && pipargs+=(-v /opt/wheels:/opt/wheels:ro)
log "container from $BASE: install, Pendulum-v1, Hopper-v5 without and with Gymnasium"
name=sacfleet-deb-$$
timeout 1500 docker run --rm --name "$name" --network host "${pipargs[@]}" -v "$WORK/deb:/deb:ro" "$BASE" \
  bash /deb/run.sh 2>&1 | tee "$WORK/container.log" | sed 's/^/  | /' || true
grep -q '^== container: all steps passed' "$WORK/container.log" || fail "in the container (log above)"
grep -q '^result: env Pendulum-v1 .* steps 2000 ' "$WORK/container.log" || fail "no Pendulum-v1 result"
grep -q '^result: env Hopper-v5 .* steps 2000 ' "$WORK/container.log" || fail "no Hopper-v5 result"
log "1 passed, 0 failed"
