#!/usr/bin/env bash
# The newcomer's first command, on a machine that has nothing (issue 20; ctest
# test_first_command, labels slow;docker).
#
# Copies this repository (the files git sees, so no build or run folders) into a container
# of the bare debootstrapped Debian base image that scripts/compose_test.sh uses
# (scripts/lib_debian_image.sh: nothing preinstalled, no CUDA toolkit, no compiler), and
# runs there the first command of README.md's "The two commands" section, taken from the
# README as it stands, verbatim. Then it checks:
#   1. the command exits 0, applies presets/Pendulum-v1.conf (its log says so) and its
#      `result:` line has a final eval return >= -200;
#   2. it installed nothing the main job does not use: none of the test and benchmark
#      extras (Criterion, Prometheus, curl, MuJoCo, Python headers, PyTorch, clang,
#      valgrind) is in the container, and there is no nvcc; the checker is first shown a
#      package list that has those extras (this machine's) and must flag them;
#   3. CMake configured without them, saying so: its "sacfleet:" lines report the Criterion
#      tests left out (no Criterion) and the cuda backend skipped (no CUDA compiler).
# It prints how long the install, the build (configure and compile) and the training took,
# measured from the command's own trace: the command runs under `set -x` with a clock in
# PS4, so each of its top-level steps is stamped when it starts.
#
# The container uses the host's network (apt reaches this machine's mirror; the engine
# runs with --bridge=none). The wait is on progress: the test fails when the command's
# output has not grown for SAC_FIRST_STALL_S (default 300) seconds, and in any case after
# SAC_FIRST_LIMIT_S (default 1500) seconds.
#
# Exit 0 pass, 1 fail, 77 skip (no Docker engine can be had: not root, docker.io or
# debootstrap cannot be installed, dockerd will not start); the reason is printed on a
# line starting "SKIP:". Installs docker.io and debootstrap with apt-get when missing.
# Removes its container and work folder at the end and stops a dockerd only if it started
# it; the base image stays as the cache.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/lib_return.sh
. "$ROOT/scripts/lib_return.sh"
T0=$(date +%s)
log() { printf '[first_command %4ds] %s\n' "$(($(date +%s) - T0))" "$*"; }
skip() {
  echo "SKIP: $*"
  exit 77
}
fail() {
  echo "FAIL: $*"
  exit 1
}
STALL_S=${SAC_FIRST_STALL_S:-300}
LIMIT_S=${SAC_FIRST_LIMIT_S:-1500}
WORK=$(mktemp -d /tmp/sacfleet-first.XXXXXX)
CTR="sacfleet-first-$$"
CTR_UP=0
DOCKERD_PID=""
# shellcheck source=scripts/lib_debian_image.sh
. "$ROOT/scripts/lib_debian_image.sh"

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ $CTR_UP = 1 ]; then
    docker rm -f "$CTR" >/dev/null 2>&1 || rc=1
  fi
  docker_engine_stop
  rm -rf "$WORK"
  log "done (exit $rc)"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- the command, from the README --------------------------------------------------------

# The first ```sh block of the section "## The two commands".
CMD=$(awk '/^## / { in_sec = ($0 == "## The two commands") }
           in_sec && /^```sh$/ { in_code = 1; next }
           in_code && /^```$/ { exit }
           in_code { print }' "$ROOT/README.md")
[ -n "$CMD" ] || fail "README.md has no \`\`\`sh block under '## The two commands'"
[ "$(wc -l <<<"$CMD")" = 1 ] || fail "the README's first command is not one line: $CMD"
for part in scripts/install-deps.sh "cmake -S" "cmake --build" sac-learner; do
  grep -qF -- "$part" <<<"$CMD" || fail "the README's first command has no '$part' (the test times each step): $CMD"
done
log "the README's first command: $CMD"

# ---- engine and base image ----------------------------------------------------------------

rc=0
docker_tools_ensure "$WORK" || rc=$?
[ $rc = 0 ] || exit $rc # 77 with its SKIP line printed
docker_engine_ensure "$WORK" || rc=$?
[ $rc = 0 ] || exit $rc # 77 with its SKIP line printed
log "engine: Docker $(docker version -f '{{.Server.Version}}')"
debian_base_image "$WORK" || fail "no base image (reason above)" # sets BASE_TAG

# ---- the lean check, and its negative control ---------------------------------------------

# What only tests, benchmarks and optional environments need: none of it may come with the
# first command (scripts/install-deps.sh installs these only with --test / --all).
EXTRAS=(libcriterion-dev prometheus curl libmujoco-dev python3-dev python3-torch clang valgrind)
# extras_in FILE: the extras that FILE (one installed package per line) lists
extras_in() { printf '%s\n' "${EXTRAS[@]}" | grep -xF -f "$1" || true; }
dpkg-query -W -f='${Package}\n' >"$WORK/host-pkgs" 2>/dev/null || true
host_extras=$(extras_in "$WORK/host-pkgs" | tr '\n' ' ')
if grep -qx libcriterion-dev "$WORK/host-pkgs"; then # this machine ran install-deps.sh --test
  [ -n "$host_extras" ] || fail "negative control: the checker did not flag this machine's extras"
  log "negative control: the checker flags this machine's extras: $host_extras"
fi

# ---- the container -----------------------------------------------------------------------

docker run -d --name "$CTR" --network host --label org.sacfleet.test=first-command "$BASE_TAG" \
  sleep infinity >/dev/null || fail "docker run $BASE_TAG failed"
CTR_UP=1
docker exec "$CTR" sh -c '! command -v nvcc && ! command -v cc && ! command -v cmake' >/dev/null ||
  fail "the base image is not bare (it has nvcc, a C compiler or cmake)"
docker exec "$CTR" mkdir -p /root/sacfleet
repo_context_tar "$ROOT" | docker cp - "$CTR:/root/sacfleet" || fail "copying the repository into the container failed"
log "container $CTR from $BASE_TAG ($(docker exec "$CTR" dpkg-query -W -f='.\n' | wc -l) packages, no compiler, no CUDA), repository in /root/sacfleet ($(docker exec "$CTR" sh -c 'find /root/sacfleet -type f | wc -l') files)"

# ---- run it, verbatim ---------------------------------------------------------------------

# The clock in PS4 stamps each top-level step of the command as it starts.
log "running the first command (fails if its output stalls ${STALL_S} s, or after ${LIMIT_S} s)"
docker exec -w /root/sacfleet "$CTR" bash -c "PS4='+[\${EPOCHREALTIME}] '; set -x; $CMD" >"$WORK/run.log" 2>&1 &
run_pid=$!
t_start=$(date +%s)
last_size=-1
last_move=$t_start
while kill -0 "$run_pid" 2>/dev/null; do
  sleep 5
  size=$(stat -c %s "$WORK/run.log")
  now=$(date +%s)
  if [ "$size" != "$last_size" ]; then
    last_size=$size
    last_move=$now
  elif [ $((now - last_move)) -ge "$STALL_S" ]; then
    tail -n 30 "$WORK/run.log"
    fail "the first command's output did not grow for ${STALL_S} s (log above)"
  fi
  if [ $((now - t_start)) -ge "$LIMIT_S" ]; then
    tail -n 30 "$WORK/run.log"
    fail "the first command did not finish within ${LIMIT_S} s (log above)"
  fi
done
cmd_rc=0
wait "$run_pid" || cmd_rc=$?
t_end=$(docker exec "$CTR" date +%s.%N)
if [ $cmd_rc != 0 ]; then
  tail -n 40 "$WORK/run.log"
  fail "the first command exited with $cmd_rc (log above)"
fi

# ---- the three times ----------------------------------------------------------------------

# stamp PATTERN: the clock of the first top-level trace line that starts with PATTERN
stamp() { awk -v p="$1" 'substr($0, 1, 2) == "+[" && index($0, "] " p) { sub(/^\+\[/, ""); sub(/\].*/, ""); print; exit }' "$WORK/run.log"; }
s_install=$(stamp scripts/install-deps.sh)
s_config=$(stamp "cmake -S")
s_build=$(stamp "cmake --build")
s_train=$(stamp build/learner/sac-learner)
for v in s_install s_config s_build s_train; do
  [ -n "${!v}" ] || fail "no trace line for a step of the command ($v); the log starts:$(head -n 5 "$WORK/run.log")"
done
read -r install_s build_s train_s total_s < <(awk -v a="$s_install" -v b="$s_config" -v c="$s_train" -v d="$t_end" \
  'BEGIN { printf "%.0f %.0f %.0f %.0f\n", b - a, c - b, d - c, d - a }')
compile_s=$(awk -v b="$s_build" -v c="$s_train" 'BEGIN { printf "%.0f", c - b }')

# ---- the checks ---------------------------------------------------------------------------

result=$(grep -E '^result:' "$WORK/run.log" | tail -n 1)
[ -n "$result" ] || { tail -n 30 "$WORK/run.log"; fail "no result line (log above)"; }
echo "    $result"
grep -E '^results in' "$WORK/run.log" | sed 's/^/    /' || true
return_check "$result" -200 || fail "$RETURN_WHY"
# the command names the environment and nothing else: its hyper-parameters are the preset's
preset=$(grep -o 'preset [^ ]*/presets/Pendulum-v1.conf: sets [a-z_, ]*' "$WORK/run.log" | head -n 1)
[ -n "$preset" ] || fail "the first command did not apply presets/Pendulum-v1.conf (no 'preset ...' line)"
echo "    $preset"
ret=$RETURN

docker exec "$CTR" dpkg-query -W -f='${Package}\n' >"$WORK/ctr-pkgs"
found=$(extras_in "$WORK/ctr-pkgs" | tr '\n' ' ')
[ -z "$found" ] || fail "the first command installed test/benchmark extras: $found"
docker exec "$CTR" sh -c '! command -v nvcc' >/dev/null || fail "nvcc is in the container"
installed=$(docker exec "$CTR" dpkg-query -W -f='${Installed-Size}\n' | awk '{ s += $1 } END { printf "%.0f MB", s / 1024 }')
log "installed: $(wc -l <"$WORK/ctr-pkgs") packages, $installed in all; none of: ${EXTRAS[*]}; no nvcc"

grep -E -- '-- sacfleet: ' "$WORK/run.log" | sed 's/^-- /    /'
grep -qF 'sacfleet: tests: Criterion not found, only the shell tests are registered' "$WORK/run.log" ||
  fail "CMake did not say that it left out the Criterion tests for want of Criterion"
grep -qF 'sacfleet: cuda learner backend: skipped (no CUDA compiler found' "$WORK/run.log" ||
  fail "CMake did not say that it skipped the cuda backend for want of nvcc"

targets=$(grep -c 'Built target' "$WORK/run.log" || true)
log "final eval return $ret >= -200; install ${install_s} s, build ${build_s} s (configure $((build_s - compile_s)) s, compile ${compile_s} s: $targets targets), training ${train_s} s; ${total_s} s in all on $(nproc) cores"
echo "test_first_command: 1 passed, 0 failed"
