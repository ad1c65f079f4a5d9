#!/bin/bash
# sac-entrypoint: the entrypoint of the sacfleet images (deploy/Dockerfile, Dockerfile.cuda,
# Dockerfile.prometheus). It does two small jobs that a compose file cannot do by itself,
# and otherwise execs its arguments so the binary is PID 1 and gets SIGTERM directly
# (sac-replay writes its final snapshot on it).
#
#   sac-entrypoint sac-actor [ARGS...]
#       Runs sac-actor. When SAC_ACTOR_ID is unset, empty or "auto" and no --actor_id is
#       given, the id is derived from this container's IPv4 address: its low 12 bits
#       (octet3 mod 16) * 256 + octet4, in the option's range [0, 4095]. Replicas made by
#       `docker compose up --scale actor=N` or `docker stack deploy` (replicas: N) share one
#       environment, so the id must come from something each container has of its own.
#       Docker gives every container on a network a distinct address, so the ids are
#       distinct while the network's subnet is a /20 or smaller, and in practice on larger
#       ones too (Docker hands addresses out from the bottom of the subnet). A hash of the
#       hostname would collide (2 of 50 actors share an id with probability 26%). An
#       explicit SAC_ACTOR_ID or --actor_id wins. A restarted actor may get a new address
#       and so a new id; the replay shards key deduplication on a random per-process
#       session, so either way is safe.
#
#   sac-entrypoint healthcheck PORT [PATH]
#       Exit 0 when http://127.0.0.1:PORT/PATH (default /healthz) answers "200" within 3 s,
#       1 otherwise. Uses bash's /dev/tcp: the images carry no HTTP client. The compose
#       files ask the learner and the actors for /livez (docs/METRICS.md).
#
#   sac-entrypoint CMD [ARGS...]
#       exec CMD ARGS.
#
# Before it runs a program it drops every SAC_* variable that is set but empty: compose passes
# a variable the user left unset as an empty one (${SAC_LR:-} in docker-compose.yml), and an
# empty value must mean "the program's default", not an empty setting.
set -euo pipefail

log() { printf 'sac-entrypoint: %s\n' "$*" >&2; }

healthcheck() {
  local port=${1:?usage: sac-entrypoint healthcheck PORT [PATH]} path=${2:-/healthz} status=""
  exec 3<>"/dev/tcp/127.0.0.1/${port}" || exit 1
  printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n' "$path" >&3
  IFS= read -r -t 3 status <&3 || true
  exec 3<&-
  case $status in
    "HTTP/1."[01]" 200"*) exit 0 ;;
  esac
  log "unhealthy: ${path} on port ${port} answered '${status%$'\r'}'"
  exit 1
}

# The first IPv4 address of this container's hostname (/etc/hosts, written by Docker).
container_ipv4() {
  local host=${HOSTNAME:-}
  [ -n "$host" ] || host=$(cat /etc/hostname)
  local addrs
  addrs=$(getent ahostsv4 "$host" || true) # read whole: awk leaving early must not be a SIGPIPE failure
  awk '$1 !~ /^127\./ {print $1; exit}' <<<"$addrs"
}

derive_actor_id() {
  local arg
  for arg in "$@"; do
    case $arg in
      --actor_id | --actor_id=*)
        # the command line wins; "auto" must not reach the binary as a value
        case ${SAC_ACTOR_ID-} in auto | "") unset SAC_ACTOR_ID ;; esac
        return 0
        ;;
    esac
  done
  case ${SAC_ACTOR_ID:-auto} in
    auto | "") ;;
    *) return 0 ;;
  esac
  local ip o3 o4
  ip=$(container_ipv4)
  if [ -z "$ip" ]; then
    log "SAC_ACTOR_ID=auto but this container has no IPv4 address: set SAC_ACTOR_ID"
    exit 2
  fi
  IFS=. read -r _ _ o3 o4 <<<"$ip"
  export SAC_ACTOR_ID=$(((o3 % 16) * 256 + o4))
  log "actor_id ${SAC_ACTOR_ID} from address ${ip} (SAC_ACTOR_ID was auto)"
}

if [ $# -eq 0 ]; then
  set -- sac-learner --help
fi
while read -r v; do
  [ -n "${!v}" ] || unset "$v"
done < <(compgen -e | grep '^SAC_' || true)
case $1 in
  healthcheck)
    shift
    healthcheck "$@"
    ;;
  sac-actor | */sac-actor)
    derive_actor_id "${@:2}"
    ;;
esac
exec "$@"
