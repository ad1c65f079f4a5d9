#!/usr/bin/env bash
# The deployment, tested for real (issue 7; ctest test_compose, labels integration;slow;docker).
#
# Starts a Docker engine when none answers (dockerd --iptables=false --bridge=none, logged to
# a file), makes a Debian base image with debootstrap from this machine's apt mirror (no
# image registry is needed; cached by tag, so a second run skips it), builds the images of
# deploy/ (host networking for apt), brings up deploy/docker-compose.yml with 2 replay
# shards, 2 actors, the learner and Prometheus — with the `up` command README.md shows, its
# actor count set to 2 — and checks:
#   1. every container becomes healthy (/healthz) and Prometheus has every target up;
#   2. one actor and one shard are killed (SIGKILL of the container's process: a crash;
#      `docker kill` would count as a manual stop, which restart policies leave alone) once
#      the shard has written a snapshot; both are restarted by their restart policy, the
#      shard logs that it restored its snapshot, both are healthy and scraped again, and the
#      restarted actor, the shard and the learner go on counting;
#   3. the learner finishes Pendulum-v1 with final eval return >= -200 within the bound,
#      its run directory is in the named volume, and it is not restarted after finishing;
#   4. `down -v` leaves no container, volume or network of the project;
#   4b. the same cluster with deploy/docker-compose.dp.yml: two learners in lock-step
#      (data-parallel, CPU, zmq collective) finish a short run with their state bit-identical;
#   5. on an engine this test started: the same compose file under `docker stack deploy` on
#      a one-node swarm (127.0.0.1) gets every target up and the learner training with no
#      task replaced (swarm replaces a task whose healthcheck fails; negative control: an
#      actor killed on purpose is seen replaced), then the stack is removed and the swarm
#      left; and the engine never asked an image registry.
# At the end it removes what it made (containers, networks, volumes, its work folder, the
# engine it started); the base image and the built images stay as the build cache
# (SAC_COMPOSE_RMI=1 removes the built images too).
#
# Exit 0 pass, 1 fail, 77 skip (no engine can be had: not root and no access to one, the
# tools cannot be installed, or dockerd will not start); the reason is printed on a line
# starting "SKIP:". Installs docker.io, docker-compose, debootstrap and curl with apt-get
# when missing. Traffic stays on loopback and the networks the test creates; apt reaches
# the configured mirror. Every wait is bounded.
#
# Knobs (environment): SAC_COMPOSE_TRAIN_TIMEOUT (s, default 720), SAC_COMPOSE_STACK=0 (no
# stack part), SAC_COMPOSE_KEEP=1 (leave the cluster up on failure, for a look),
# SAC_COMPOSE_RMI=1, SAC_COMPOSE_REBASE=1 (make the base image again).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/lib_return.sh
. "$ROOT/scripts/lib_return.sh"
T0=$(date +%s)
log() { printf '[compose_test %4ds] %s\n' "$(($(date +%s) - T0))" "$*"; }
skip() {
  echo "SKIP: $*"
  exit 77
}

PROJECT="sacfleetci$$"
IMAGE=sacfleet-ci:latest
PROM_IMAGE=sacfleet-ci-prometheus:latest
TRAIN_TIMEOUT=${SAC_COMPOSE_TRAIN_TIMEOUT:-720}
# All waits together end by this, so the cleanup runs before ctest's TIMEOUT (1800 s) would
# kill the script without one.
DEADLINE=$((T0 + ${SAC_COMPOSE_DEADLINE:-1560}))
COMPOSE_FILE="$ROOT/deploy/docker-compose.yml"
WORK=$(mktemp -d /tmp/sacfleet-compose.XXXXXX)
DOCKERD_PID=""
UP=0
SWARM=0
STACK="sacfleetstack$$"
export DOCKER_BUILDKIT=0 # the classic builder: --network host works without extra setup
export COMPOSE_DOCKER_CLI_BUILD=0

# ---- tools ---------------------------------------------------------------------------------

need_pkgs=()
command -v docker >/dev/null || need_pkgs+=(docker.io)
command -v dockerd >/dev/null || need_pkgs+=(docker.io)
command -v docker-compose >/dev/null || need_pkgs+=(docker-compose)
command -v debootstrap >/dev/null || need_pkgs+=(debootstrap)
command -v curl >/dev/null || need_pkgs+=(curl)
if [ ${#need_pkgs[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || skip "needs root to install ${need_pkgs[*]} (apt-get) and to run dockerd"
  log "installing ${need_pkgs[*]}"
  mapfile -t need_pkgs < <(printf '%s\n' "${need_pkgs[@]}" | sort -u)
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${need_pkgs[@]}"; } >"$WORK/apt.log" 2>&1; then
    tail -n 20 "$WORK/apt.log"
    skip "could not install ${need_pkgs[*]} with apt-get (log above)"
  fi
fi
COMPOSE=(docker-compose -p "$PROJECT" -f "$COMPOSE_FILE")

# ---- cleanup -------------------------------------------------------------------------------

dump_diagnostics() { # LABEL=VALUE of the containers to show
  echo "---- diagnostics ----"
  local c
  for c in $(docker ps -aq --filter "label=$1" 2>/dev/null); do
    echo "---- logs of $(docker inspect -f '{{.Name}} ({{.State.Status}}, exit {{.State.ExitCode}}, restarts {{.RestartCount}})' "$c")"
    docker logs --tail 25 "$c" 2>&1 || true
  done
}

# left_behind LABEL=VALUE: how many containers, volumes and networks still carry the label
left_behind() {
  (docker ps -aq --filter "label=$1"
    docker volume ls -q --filter "label=$1"
    docker network ls -q --filter "label=$1") 2>/dev/null | wc -l
}

compose_down() {
  [ $UP = 1 ] || return 0
  UP=0
  log "docker-compose down -v"
  timeout 180 "${COMPOSE[@]}" down -v --remove-orphans --timeout 20 >"$WORK/down.log" 2>&1 ||
    { cat "$WORK/down.log"; return 1; }
  local left
  left=$(left_behind "com.docker.compose.project=$PROJECT")
  [ "$left" = 0 ] || { echo "FAIL: $left containers/volumes/networks of $PROJECT left after down -v"; return 1; }
  log "cleanup: no container, volume or network of project $PROJECT is left"
}

stack_down() {
  [ $SWARM = 1 ] || return 0
  SWARM=0
  local rc=0
  log "docker stack rm $STACK; docker swarm leave"
  timeout 60 docker stack rm "$STACK" >/dev/null 2>&1 || rc=1
  for _ in $(seq 1 60); do # the tasks' containers go first, then the network
    [ -z "$(docker ps -aq --filter "label=com.docker.stack.namespace=$STACK")" ] &&
      [ -z "$(docker network ls -q --filter "label=com.docker.stack.namespace=$STACK")" ] && break
    sleep 1
  done
  docker volume ls -q --filter "label=com.docker.stack.namespace=$STACK" | xargs -r docker volume rm >/dev/null || rc=1
  timeout 60 docker swarm leave --force >/dev/null 2>&1 || rc=1
  docker network rm docker_gwbridge >/dev/null 2>&1 || true # made by swarm init
  local left
  left=$(left_behind "com.docker.stack.namespace=$STACK")
  [ "$left" = 0 ] || { echo "FAIL: $left containers/volumes/networks of stack $STACK left"; rc=1; }
  [ $rc = 0 ] && log "cleanup: no container, volume or network of stack $STACK is left; swarm left"
  return $rc
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ $rc -ne 0 ] && [ $rc -ne 77 ]; then
    [ $UP = 1 ] && dump_diagnostics "com.docker.compose.project=$PROJECT"
    [ $SWARM = 1 ] && dump_diagnostics "com.docker.stack.namespace=$STACK"
  fi
  if [ $rc -ne 0 ] && [ "${SAC_COMPOSE_KEEP:-0}" = 1 ] && [ $((UP + SWARM)) -gt 0 ]; then
    echo "SAC_COMPOSE_KEEP=1: leaving the cluster up (and the engine running)"
    DOCKERD_PID=""
  else
    compose_down || rc=1
    stack_down || rc=1
  fi
  if docker info >/dev/null 2>&1; then
    # images left untagged by rebuilding ours; our tagged images stay as the build cache
    docker image prune -f --filter "label=org.sacfleet.image" >/dev/null 2>&1 || true
    if [ "${SAC_COMPOSE_RMI:-0}" = 1 ]; then docker rmi "$IMAGE" "$PROM_IMAGE" >/dev/null 2>&1 || true; fi
  fi
  if [ -n "$DOCKERD_PID" ]; then
    log "stopping the dockerd this test started (pid $DOCKERD_PID)"
    kill "$DOCKERD_PID" 2>/dev/null || true
    for _ in $(seq 1 30); do
      kill -0 "$DOCKERD_PID" 2>/dev/null || break
      sleep 1
    done
    # the network-namespace mount the engine leaves behind
    kill -0 "$DOCKERD_PID" 2>/dev/null || umount /var/run/docker/netns/default 2>/dev/null || true
  fi
  rm -rf "$WORK"
  log "done (exit $rc)"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail() {
  echo "FAIL: $*"
  exit 1
}

# Deadlines by progress (issue 15): a wait fails when nothing has moved for its stated
# time, not at a fixed instant, so that a busy machine slows the test down without
# failing it. Progress: the step and update counts in the last lines of every service's
# log (compose_progress, read every 10 s; empty before the cluster is up, where the
# time is a plain bound). The overall DEADLINE stays as a backstop.
compose_progress() {
  [ "$UP" = 1 ] || return 0
  { timeout 20 "${COMPOSE[@]}" logs --no-color --tail 2 2>/dev/null || true; } |
    { grep -ao 'steps [0-9]*\|updates [0-9]*' || true; } | sort | tr '\n' ' '
}

# wait_until SECONDS WHAT COMMAND...: runs COMMAND every 2 s until it succeeds; fails when
# neither it nor the cluster's progress (compose_progress) has moved for SECONDS, or at
# the test's overall deadline.
wait_until() {
  local limit=$1 what=$2 t0 tok last="" n=0
  shift 2
  t0=$(date +%s)
  until "$@"; do
    if [ $((n % 5)) -eq 0 ]; then
      tok=$(compose_progress)
      if [ -n "$tok" ] && [ "$tok" != "$last" ]; then
        last=$tok
        t0=$(date +%s)
      fi
    fi
    n=$((n + 1))
    if [ $(($(date +%s) - t0)) -ge "$limit" ]; then
      fail "$what: nothing progressed for ${limit} s (progress: ${last:-none})"
    fi
    if [ "$(date +%s)" -ge "$DEADLINE" ]; then
      fail "$what: the test's deadline ($((DEADLINE - T0)) s) passed"
    fi
    sleep 2
  done
}

# ---- the engine ----------------------------------------------------------------------------

if ! timeout 20 docker info >/dev/null 2>&1; then
  [ "$(id -u)" = 0 ] || skip "no Docker engine answers and starting one needs root"
  if [ -S /var/run/docker.sock ] && pgrep -x dockerd >/dev/null; then
    skip "a dockerd is running but does not answer on /var/run/docker.sock"
  fi
  log "starting dockerd --iptables=false --bridge=none (log: $WORK/dockerd.log)"
  # DOCKER_SERVICE_PREFER_OFFLINE_IMAGE: swarm tasks use the local images instead of first
  # trying to pull them (there is no registry to pull from)
  DOCKER_SERVICE_PREFER_OFFLINE_IMAGE=1 dockerd --iptables=false --bridge=none >"$WORK/dockerd.log" 2>&1 &
  DOCKERD_PID=$!
  for _ in $(seq 1 60); do
    timeout 5 docker info >/dev/null 2>&1 && break
    if ! kill -0 "$DOCKERD_PID" 2>/dev/null; then
      tail -n 20 "$WORK/dockerd.log"
      DOCKERD_PID=""
      skip "dockerd exited at start (its log above)"
    fi
    sleep 1
  done
  if ! timeout 5 docker info >/dev/null 2>&1; then
    tail -n 20 "$WORK/dockerd.log"
    skip "dockerd did not answer within 60 s (its log above)"
  fi
fi
log "engine: Docker $(docker version -f '{{.Server.Version}}'), $(docker-compose version --short)"

# ---- the base image: debootstrap from this machine's apt mirror -----------------------------

# shellcheck source=scripts/lib_debian_image.sh
. "$ROOT/scripts/lib_debian_image.sh"
debian_base_image "$WORK" || fail "no base image (reason above)" # sets BASE_TAG

# ---- the images ----------------------------------------------------------------------------

# The build context: the source tree as git sees it (tracked and untracked-but-not-ignored
# files, so build folders and run folders stay out), or the folder less build* without git.
context_tar() {
  cd "$ROOT"
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files -z -co --exclude-standard |
      while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
      tar --null -T - -cf -
  else
    tar --exclude='./build*' --exclude=./runs --exclude=./.git -cf - .
  fi
}

build_image() { # DOCKERFILE TAG
  local t0 logf
  t0=$(date +%s)
  logf="$WORK/build-$(basename "$1").log"
  if ! context_tar | timeout 900 docker build --force-rm --network host -f "$1" --build-arg BASE_IMAGE="$BASE_TAG" \
    --label org.sacfleet.image="$2" -t "$2" - >"$logf" 2>&1; then
    tail -n 40 "$logf"
    fail "docker build -f $1 failed (log above)"
  fi
  log "built $2 from $1 in $(($(date +%s) - t0)) s ($(docker image inspect -f '{{.Size}}' "$2" | awk '{printf "%.0f MB", $1 / 1e6}'))"
  grep -E '^runtime packages:' "$logf" | sed 's/^/    /' || true
}
build_image deploy/Dockerfile "$IMAGE"
build_image deploy/Dockerfile.prometheus "$PROM_IMAGE"

# non-root, and the binaries answer
[ "$(docker image inspect -f '{{.Config.User}}' "$IMAGE")" = sac ] || fail "$IMAGE does not run as user sac"

# ---- up ------------------------------------------------------------------------------------

PROM_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null || echo 19090)
export SAC_IMAGE="$IMAGE" SAC_LEARNER_IMAGE="$IMAGE" SAC_PROMETHEUS_IMAGE="$PROM_IMAGE"
export SAC_BASE_IMAGE="$BASE_TAG" SAC_PROMETHEUS_PORT="$PROM_PORT"
export SAC_SNAPSHOT_INTERVAL_S=5 SAC_RUN_NAME=compose-test
# the test's own settings, not the caller's
unset SAC_TOTAL_STEPS SAC_LR SAC_SEED SAC_ENV SAC_ACTOR_REPLICAS SAC_LEARNER_THREADS SAC_BACKEND SAC_LOG_LEVEL

PROM="http://127.0.0.1:$PROM_PORT"
# the compose example README.md shows is the command run here: its arguments after the
# compose file, with 2 actors for its count and --no-build (the images are built above)
readme_up=$(grep -o 'docker-compose -f deploy/docker-compose.yml up [^`]*' "$ROOT/README.md" | head -n 1) || true
[ -n "$readme_up" ] || fail "README.md shows no 'docker-compose -f deploy/docker-compose.yml up' command to run"
read -ra UP_ARGS <<<"${readme_up#docker-compose -f deploy/docker-compose.yml }"
for i in "${!UP_ARGS[@]}"; do
  if [[ ${UP_ARGS[$i]} == actor=* ]]; then UP_ARGS[i]=actor=2; fi
done
[[ " ${UP_ARGS[*]} " == *" --scale actor=2 "* ]] || fail "README.md's compose example sets no actor count: $readme_up"
log "docker-compose ${UP_ARGS[*]} --no-build (README.md's example): project $PROJECT, 2 shards, learner, prometheus on $PROM"
UP=1
timeout 300 "${COMPOSE[@]}" "${UP_ARGS[@]}" --no-build >"$WORK/up.log" 2>&1 ||
  { cat "$WORK/up.log"; fail "docker-compose up failed (README.md's example: $readme_up)"; }

cid() { "${COMPOSE[@]}" ps -q "$@" 2>/dev/null; }
LEARNER=$(cid learner)
REPLAY0=$(cid replay0)
mapfile -t ACTORS < <(cid actor)
[ ${#ACTORS[@]} = 2 ] || fail "expected 2 actor containers, have ${#ACTORS[@]}"
name() { docker inspect -f '{{.Name}}' "$1" | sed 's,^/,,'; }

all_healthy() {
  local c s bad=0
  for c in $(cid); do
    s=$(docker inspect -f '{{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}}' "$c")
    [ "$s" = healthy ] || bad=1
  done
  return $bad
}
wait_until 120 "every container healthy" all_healthy
log "every container is healthy:"
for c in $(cid); do
  docker inspect -f '    {{.Name}}: {{.State.Health.Status}} ({{.Config.User}}) {{range $k, $v := .NetworkSettings.Networks}}{{$v.IPAddress}}{{end}}' "$c"
done
for c in "${ACTORS[@]}"; do
  # (logs are read whole before grep: with pipefail, an early-exiting reader makes SIGPIPE a failure)
  out=$(docker logs "$c" 2>&1)
  grep 'actor_id .* from address' <<<"$out" | sed -n "1s/^/    $(name "$c"): /p"
done

# ---- Prometheus ----------------------------------------------------------------------------

# Prints "job instance health" per active target.
prom_targets() {
  curl -fsS --max-time 5 "$PROM/api/v1/targets?state=active" |
    python3 -c 'import json, sys
for t in json.load(sys.stdin)["data"]["activeTargets"]:
    print(t["labels"]["job"], t["labels"]["instance"], t["health"])'
}
# every_target_up JOB=COUNT...: every listed job has exactly COUNT targets, all up
every_target_up() {
  local out spec job n
  out=$(prom_targets 2>/dev/null) || return 1
  for spec in "$@"; do
    job=${spec%=*} n=${spec#*=}
    [ "$(awk -v j="$job" '$1 == j' <<<"$out" | wc -l)" = "$n" ] || return 1
    [ "$(awk -v j="$job" '$1 == j && $3 == "up"' <<<"$out" | wc -l)" = "$n" ] || return 1
  done
}
# prom_value QUERY: the value of the first series of an instant query
prom_value() {
  curl -fsS --max-time 5 -G "$PROM/api/v1/query" --data-urlencode "query=$1" |
    python3 -c 'import json, sys
r = json.load(sys.stdin)["data"]["result"]
print(r[0]["value"][1] if r else "nan")'
}
wait_until 90 "Prometheus: every target up" every_target_up prometheus=1 learner=1 replay=2 actor=2
log "Prometheus sees every target up ($PROM/api/v1/targets):"
prom_targets | sed 's/^/    /'

# ---- kill an actor and a shard mid-run -----------------------------------------------------

# The shard must have a snapshot with data in it before the crash.
snapshot_written() {
  local out
  out=$(docker logs "$REPLAY0" 2>&1)
  grep -qE 'periodic snapshot: [1-9][0-9]* transitions' <<<"$out"
}
learning() { [ "$(prom_value 'sac_learner_updates_total')" != nan ] &&
  awk -v v="$(prom_value 'sac_learner_updates_total')" 'BEGIN { exit !(v >= 500) }'; }
wait_until 240 "shard 0 writing a snapshot with data" snapshot_written
wait_until 240 "the learner doing 500 updates" learning
KILLED_ACTOR=${ACTORS[1]}
ins_before=$(prom_value 'sac_replay_inserted_transitions_total{shard="0"}')
upd_before=$(prom_value 'sac_learner_updates_total')
log "shard 0 has $ins_before transitions inserted, learner $upd_before updates; last snapshot: $(docker logs "$REPLAY0" 2>&1 | grep -E 'periodic snapshot' | tail -n 1 | sed 's/^.*replay: //')"
T_KILL_EPOCH=$(date +%s)
T_KILL=$(date -u +%Y-%m-%dT%H:%M:%S)
for c in "$KILLED_ACTOR" "$REPLAY0"; do
  pid=$(docker inspect -f '{{.State.Pid}}' "$c")
  log "kill -9 $pid: the process of $(name "$c") (restart count $(docker inspect -f '{{.RestartCount}}' "$c"))"
  kill -9 "$pid"
done

restarted() { # CONTAINER: restarted at least once, running and healthy
  [ "$(docker inspect -f '{{.RestartCount}}' "$1")" -ge 1 ] &&
    [ "$(docker inspect -f '{{.State.Running}} {{.State.Health.Status}}' "$1")" = "true healthy" ]
}
wait_until 90 "the killed actor restarted and healthy" restarted "$KILLED_ACTOR"
wait_until 90 "the killed shard restarted and healthy" restarted "$REPLAY0"
for c in "$KILLED_ACTOR" "$REPLAY0"; do
  died=$(docker events --since "$T_KILL_EPOCH" --until "$(($(date +%s) + 1))" --filter "container=$c" --filter event=die \
    --format '{{.Actor.Attributes.exitCode}}' | tr '\n' ' ')
  docker inspect -f "    {{.Name}}: died with exit code ${died% }, restarted {{.RestartCount}} time(s) by its restart policy ({{.HostConfig.RestartPolicy.Name}}), {{.State.Health.Status}} since {{.State.StartedAt}}" "$c"
done
restore_line=$(docker logs --since "$T_KILL" "$REPLAY0" 2>&1 | grep -E 'restored [0-9]+ transitions' | tail -n 1)
[ -n "$restore_line" ] || fail "shard 0 did not log a restore after its restart"
grep -qE 'restored [1-9][0-9]* transitions' <<<"$restore_line" || fail "shard 0 restored an empty snapshot: $restore_line"
log "shard 0 after the restart: ${restore_line#*replay: }"

# Recovery: the restarted shard takes inserts again, the learner goes on updating, and
# Prometheus scrapes every target again (the restarted actor under its address).
ins_restored=$(sed -E 's/.*restored ([0-9]+) transitions.*/\1/' <<<"$restore_line")
shard_growing() { awk -v v="$(prom_value 'sac_replay_inserted_transitions_total{shard="0"}')" -v r="$ins_restored" \
  'BEGIN { exit !(v > r + 1000) }'; }
learner_growing() { awk -v v="$(prom_value 'sac_learner_updates_total')" -v b="$upd_before" 'BEGIN { exit !(v > b + 1000) }'; }
ACTOR_INSTANCE="$(docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$KILLED_ACTOR"):5582"
actor_stepping() { awk -v v="$(prom_value "sac_actor_env_steps_total{instance=\"$ACTOR_INSTANCE\"}")" \
  'BEGIN { exit !(v > 1000) }'; }
wait_until 180 "shard 0 inserting again after its restart" shard_growing
wait_until 180 "the restarted actor stepping again" actor_stepping
wait_until 180 "the learner updating after the kills" learner_growing
wait_until 90 "Prometheus: every target up after the restarts" every_target_up learner=1 replay=2 actor=2
log "recovered: actor $ACTOR_INSTANCE at $(prom_value "sac_actor_env_steps_total{instance=\"$ACTOR_INSTANCE\"}") steps since its restart, shard 0 at $(prom_value 'sac_replay_inserted_transitions_total{shard="0"}') transitions inserted (restored $ins_restored), learner at $(prom_value 'sac_learner_updates_total') updates (was $upd_before); targets:"
prom_targets | sed 's/^/    /'

# ---- the run ends --------------------------------------------------------------------------

learner_exited() { [ "$(docker inspect -f '{{.State.Status}}' "$LEARNER")" = exited ]; }
wait_until "$TRAIN_TIMEOUT" "the learner finishing its run" learner_exited
code=$(docker inspect -f '{{.State.ExitCode}}' "$LEARNER")
result=$(docker logs "$LEARNER" 2>/dev/null | grep -E '^result:' | tail -n 1)
[ "$code" = 0 ] || fail "the learner exited with $code"
[ -n "$result" ] || fail "the learner printed no result line"
echo "    $result"
docker logs "$LEARNER" 2>/dev/null | grep -E '^results in' | sed 's/^/    /' || true
return_check "$result" -200 || fail "$RETURN_WHY"
ret=$RETURN
log "trained across containers: final eval return $ret >= -200"
files=$(docker cp "$LEARNER:/var/lib/sac/runs/compose-test" - 2>/dev/null | tar -t 2>/dev/null | sed 's,^compose-test/,,' | grep -v '^$' | sort | tr '\n' ' ')
log "run directory in the volume ${PROJECT}_runs: $files"
grep -q 'policy.bin' <<<"$files" || fail "no policy.bin in the run directory"

# The learner's restart policy is on-failure: a finished run stays down.
sleep 3
[ "$(docker inspect -f '{{.State.Status}} {{.RestartCount}}' "$LEARNER")" = "exited 0" ] ||
  fail "the finished learner was restarted"

compose_down || fail "docker-compose down -v left something behind"

# ---- two learners in lock-step (deploy/docker-compose.dp.yml) -------------------------------

# The same cluster with the data-parallel override: learner (rank 0) and learner1 (rank 1)
# on the CPU with the zmq collective, for a short run. Both must finish with exit 0, rank 0
# must log that the learner state is bit-identical on both ranks and print its result, and
# rank 1 must print its own result line. (The GPU/NCCL variant needs GPU nodes.)
PROJECT="${PROJECT}dp"
COMPOSE=(docker-compose -p "$PROJECT" -f "$COMPOSE_FILE" -f "$ROOT/deploy/docker-compose.dp.yml")
DP_STEPS=${SAC_COMPOSE_DP_STEPS:-3000}
log "data-parallel: project $PROJECT, learner + learner1 (dp_size 2, zmq), 2 shards, 2 actors, $DP_STEPS steps"
UP=1
SAC_DP_SIZE=2 SAC_SAMPLES_PER_INSERT=512 SAC_TOTAL_STEPS=$DP_STEPS SAC_EVAL_EVERY_UPDATES=0 SAC_RUN_NAME=compose-dp \
  timeout 300 "${COMPOSE[@]}" up -d --no-build --scale actor=2 >"$WORK/up-dp.log" 2>&1 ||
  { cat "$WORK/up-dp.log"; fail "docker-compose up (data-parallel) failed"; }
LEARNER=$(cid learner)
LEARNER1=$(cid learner1)
[ -n "$LEARNER1" ] || fail "no learner1 container"
both_exited() {
  [ "$(docker inspect -f '{{.State.Status}}' "$LEARNER")" = exited ] &&
    [ "$(docker inspect -f '{{.State.Status}}' "$LEARNER1")" = exited ]
}
wait_until 400 "both data-parallel learners finishing" both_exited
for c in "$LEARNER" "$LEARNER1"; do
  code=$(docker inspect -f '{{.State.ExitCode}} {{.RestartCount}}' "$c")
  [ "$code" = "0 0" ] || fail "$(name "$c") exited with $code (exit code, restarts)"
done
out0=$(docker logs "$LEARNER" 2>&1)
out1=$(docker logs "$LEARNER1" 2>&1)
same=$(grep -E 'bit-identical on all 2 ranks' <<<"$out0" | tail -n 1)
[ -n "$same" ] || fail "rank 0 never logged the ranks' state bit-identical"
result0=$(grep -E '^result:' <<<"$out0" | tail -n 1)
result1=$(grep -E '^result: data-parallel rank 1 of 2' <<<"$out1" | tail -n 1)
[ -n "$result0" ] || fail "rank 0 printed no result line"
[ -n "$result1" ] || fail "rank 1 printed no result line"
echo "    ${same#*INFO  }"
echo "    rank 0: $result0"
echo "    rank 1: $result1"
log "data-parallel: both ranks finished in lock-step"
compose_down || fail "docker-compose down -v (data-parallel) left something behind"

# ---- the same file under docker stack deploy ------------------------------------------------

# A one-node swarm on 127.0.0.1, made only on an engine this test started (a swarm is state
# of the engine, not something to do to somebody else's). It shows that the file deploys as
# a stack: overlay network, DNS round-robin endpoints, the learner's placement constraint
# (this node labelled gpu=true), a host-mode published port, every target scraped and the
# learner training. The run itself was checked above; the stack is removed after 1000 updates.
swarm_state=$(docker info -f '{{.Swarm.LocalNodeState}}' 2>/dev/null || echo unknown)
if [ "${SAC_COMPOSE_STACK:-1}" != 1 ]; then
  log "stack: not tried (SAC_COMPOSE_STACK=${SAC_COMPOSE_STACK})"
elif [ -z "$DOCKERD_PID" ] || [ "$swarm_state" != inactive ]; then
  log "stack: not tried (the engine was already running, swarm state '$swarm_state'; this test puts only an engine of its own into swarm mode)"
else
  log "stack: docker swarm init on 127.0.0.1, node labelled gpu=true, docker stack deploy $STACK"
  timeout 60 docker swarm init --advertise-addr 127.0.0.1 --listen-addr 127.0.0.1:2377 >"$WORK/swarm.log" 2>&1 ||
    { cat "$WORK/swarm.log"; fail "docker swarm init failed"; }
  SWARM=1
  docker node update --label-add gpu=true "$(docker info -f '{{.Swarm.NodeID}}')" >/dev/null
  PROM_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null || echo 19091)
  export SAC_PROMETHEUS_PORT="$PROM_PORT" SAC_RUN_NAME=stack-test
  PROM="http://127.0.0.1:$PROM_PORT"
  # --resolve-image never: the images are local; no registry is asked for digests
  timeout 120 docker stack deploy --resolve-image never -c "$COMPOSE_FILE" "$STACK" >"$WORK/stack.log" 2>&1 ||
    { cat "$WORK/stack.log"; fail "docker stack deploy failed"; }
  wait_until 180 "stack: Prometheus sees every target up" every_target_up prometheus=1 learner=1 replay=2 actor=2
  stack_learning() { awk -v v="$(prom_value 'sac_learner_updates_total')" 'BEGIN { exit !(v >= 1000) }'; }
  wait_until 180 "stack: the learner doing 1000 updates" stack_learning
  docker stack services "$STACK" --format '{{.Name}}: {{.Replicas}} {{.Mode}} {{.Image}}' | sort | sed 's/^/    /'
  log "stack: every target up on $PROM, learner at $(prom_value 'sac_learner_updates_total') updates; placement of the learner: $(docker service inspect -f '{{.Spec.TaskTemplate.Placement.Constraints}}' "${STACK}_learner"), endpoint mode $(docker service inspect -f '{{.Spec.EndpointSpec.Mode}}' "${STACK}_actor") (actors)"
  prom_targets | sed 's/^/    /'
  # no task was replaced: swarm replaces a task whose healthcheck fails, and a wait (the
  # learner for actors, an actor held back by a rate limiter) must not fail it (/livez)
  none_replaced() {
    tasks=$(docker stack ps "$STACK" --format '{{.Name}} {{.CurrentState}} {{.Error}}')
    n_tasks=$(grep -c . <<<"$tasks")
    [ "$n_tasks" = 6 ]
  }
  none_replaced || { sed 's/^/    /' <<<"$tasks"; fail "stack: $n_tasks tasks for 6 replicas: some were replaced"; }
  log "stack: 6 tasks for 6 replicas (none replaced)"
  # negative control: an actor's container killed on purpose is replaced, and the check sees it
  docker kill "$(docker ps -q --filter "label=com.docker.swarm.service.name=${STACK}_actor" | head -n1)" >/dev/null
  replaced() { ! none_replaced; }
  wait_until 60 "stack: swarm replacing the killed actor" replaced
  log "negative control: an actor killed on purpose: the check counts $n_tasks tasks for 6 replicas"
  stack_down || fail "docker stack rm left something behind"
fi

# No image registry was asked for anything: every image here was made here.
if [ -n "$DOCKERD_PID" ]; then
  asked=$(grep -cE 'registry-1|distribution/.*/json|Error getting v2 registry|pulling image' "$WORK/dockerd.log" || true)
  [ "$asked" = 0 ] || { grep -m 5 -E 'registry-1|distribution/.*/json|Error getting v2 registry|pulling image' "$WORK/dockerd.log"; fail "the engine tried to reach an image registry ($asked log lines)"; }
  log "the engine asked no image registry for anything (its log has no pull or registry lookup)"
fi

echo "test_compose: 1 passed, 0 failed"
