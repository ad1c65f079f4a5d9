# shellcheck shell=bash
# Sourced by the tests that run sacfleet in Docker containers (scripts/compose_test.sh, tests/test_deb.sh,
# scripts/first_command_test.sh): a Docker engine when none answers, and a bare Debian base
# image made with debootstrap from this machine's apt mirror, so no image registry is ever
# needed. The caller defines log MESSAGE... (progress lines) and runs as root where an
# engine must be started or a base image made.
#
#   docker_tools_ensure WORK    docker.io and debootstrap installed (apt-get, log in
#                               WORK/apt.log) when missing. Returns 77 with the reason on
#                               stdout ("SKIP: ...") when they cannot be installed.
#   docker_engine_ensure WORK   a Docker engine answers afterwards: the running one, or a
#                               dockerd started here (--iptables=false --bridge=none, log in
#                               WORK/dockerd.log) whose PID is left in DOCKERD_PID (empty when
#                               none was started: a running engine is never ours to stop).
#                               Returns 77 with the reason on stdout ("SKIP: ...") when no
#                               engine can be had.
#   docker_engine_stop          stops the dockerd in DOCKERD_PID, if any, by that PID.
#   debian_base_image WORK      sets BASE_TAG (sacfleet-base:SUITE, this machine's Debian
#                               suite) and makes that image when it is not there yet
#                               (SAC_COMPOSE_REBASE=1 makes it again): debootstrap
#                               --variant=minbase, apt pointed at this machine's mirror, no
#                               documentation. Cached by tag. Returns 1 with the reason on
#                               stderr when it cannot be made.

docker_tools_ensure() {
  local work=$1 need_pkgs=()
  command -v docker >/dev/null || need_pkgs+=(docker.io)
  command -v dockerd >/dev/null || need_pkgs+=(docker.io)
  command -v debootstrap >/dev/null || need_pkgs+=(debootstrap)
  [ ${#need_pkgs[@]} -gt 0 ] || return 0
  mapfile -t need_pkgs < <(printf '%s\n' "${need_pkgs[@]}" | sort -u)
  if [ "$(id -u)" != 0 ]; then
    echo "SKIP: needs root to install ${need_pkgs[*]} (apt-get) and to run dockerd"
    return 77
  fi
  log "installing ${need_pkgs[*]}"
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${need_pkgs[@]}"; } >"$work/apt.log" 2>&1; then
    tail -n 20 "$work/apt.log"
    echo "SKIP: could not install ${need_pkgs[*]} with apt-get (log above)"
    return 77
  fi
}

docker_engine_ensure() {
  local work=$1
  DOCKERD_PID=""
  timeout 20 docker info >/dev/null 2>&1 && return 0
  if [ "$(id -u)" != 0 ]; then
    echo "SKIP: no Docker engine answers and starting one needs root"
    return 77
  fi
  if [ -S /var/run/docker.sock ] && pgrep -x dockerd >/dev/null; then
    echo "SKIP: a dockerd is running but does not answer on /var/run/docker.sock"
    return 77
  fi
  log "starting dockerd --iptables=false --bridge=none (log: $work/dockerd.log)"
  # DOCKER_SERVICE_PREFER_OFFLINE_IMAGE: swarm tasks use the local images instead of first
  # trying to pull them (there is no registry to pull from)
  DOCKER_SERVICE_PREFER_OFFLINE_IMAGE=1 dockerd --iptables=false --bridge=none >"$work/dockerd.log" 2>&1 &
  DOCKERD_PID=$!
  local _
  for _ in $(seq 1 60); do
    timeout 5 docker info >/dev/null 2>&1 && return 0
    if ! kill -0 "$DOCKERD_PID" 2>/dev/null; then
      tail -n 20 "$work/dockerd.log"
      DOCKERD_PID=""
      echo "SKIP: dockerd exited at start (its log above)"
      return 77
    fi
    sleep 1
  done
  tail -n 20 "$work/dockerd.log"
  echo "SKIP: dockerd did not answer within 60 s (its log above)"
  return 77
}

docker_engine_stop() {
  [ -n "${DOCKERD_PID:-}" ] || return 0
  log "stopping the dockerd this test started (pid $DOCKERD_PID)"
  kill "$DOCKERD_PID" 2>/dev/null || true
  local _
  for _ in $(seq 1 30); do
    kill -0 "$DOCKERD_PID" 2>/dev/null || break
    sleep 1
  done
  # the network-namespace mount the engine leaves behind
  kill -0 "$DOCKERD_PID" 2>/dev/null || umount /var/run/docker/netns/default 2>/dev/null || true
  DOCKERD_PID=""
}

# debian_mirror SUITE WORK: the first Debian mirror configured for SUITE on this machine
# (deb822 or one-line sources).
debian_mirror() {
  local suite=$1 work=$2 f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk -v s="$suite" '
      function flush() { if (types ~ /(^| )deb( |$)/ && suites ~ ("(^| )" s "( |$)") && uri != "") { print uri; found = 1; exit } }
      /^[ \t]*$/ { flush(); types = suites = uri = ""; next }
      /^Types:/ { sub(/^Types:[ \t]*/, ""); types = $0 }
      /^Suites:/ { sub(/^Suites:[ \t]*/, ""); suites = $0 }
      /^URIs:/ { sub(/^URIs:[ \t]*/, ""); split($0, u, /[ \t]+/); uri = u[1] }
      END { if (!found) flush() }' "$f"
  done >"$work/mirrors"
  cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
    awk -v s="$suite" '$1 == "deb" { i = 2; if ($2 ~ /^\[/) { while ($i !~ /\]$/) i++; i++ } if ($(i + 1) == s) print $i }' \
      >>"$work/mirrors"
  sed -n 1p "$work/mirrors" | grep .
}

debian_base_image() {
  local work=$1 suite mirror rootfs
  suite=$(sed -n 's/^VERSION_CODENAME=//p' /etc/os-release | tr -d '"')
  suite=${suite:-bookworm}
  BASE_TAG="sacfleet-base:$suite"
  if [ "${SAC_COMPOSE_REBASE:-0}" != 1 ] && docker image inspect "$BASE_TAG" >/dev/null 2>&1; then
    log "base image $BASE_TAG: cached ($(docker image inspect -f '{{.Created}}' "$BASE_TAG"))"
    return 0
  fi
  [ "$(id -u)" = 0 ] || { echo "debootstrap needs root" >&2; return 1; }
  mirror=$(debian_mirror "$suite" "$work") ||
    { echo "no Debian mirror for $suite in /etc/apt/sources.list{,.d}" >&2; return 1; }
  log "base image $BASE_TAG: debootstrap --variant=minbase $suite from $mirror"
  rootfs="$work/rootfs"
  timeout 900 debootstrap --variant=minbase "$suite" "$rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 ||
    { tail -n 20 "$work/debootstrap.log"; echo "debootstrap failed (log above)" >&2; return 1; }
  # apt inside the images uses this machine's sources and its apt settings that decide
  # whether the mirror is usable (validity checks, proxies).
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    rm -f "$rootfs/etc/apt/sources.list"
    cp /etc/apt/sources.list.d/debian.sources "$rootfs/etc/apt/sources.list.d/debian.sources"
  elif [ -f /etc/apt/sources.list ]; then
    grep -E '^[[:space:]]*deb[[:space:]]' /etc/apt/sources.list >"$rootfs/etc/apt/sources.list"
  fi
  apt-config dump | grep -E '^Acquire::(Check-Valid-Until|Check-Date|https?::Proxy)' \
    >"$rootfs/etc/apt/apt.conf.d/90host" || true
  # as Debian's -slim images: no documentation or translations in images
  cat >"$rootfs/etc/dpkg/dpkg.cfg.d/90-slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
EOF
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/log/*.log
  tar -C "$rootfs" --numeric-owner -cf - . |
    docker import \
      --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change 'CMD ["/bin/bash"]' \
      --change "LABEL org.sacfleet.base=debootstrap-$suite" \
      - "$BASE_TAG" >/dev/null
  rm -rf "$rootfs"
  log "base image $BASE_TAG: imported ($(docker image inspect -f '{{.Size}}' "$BASE_TAG" | awk '{printf "%.0f MB", $1 / 1e6}'))"
}

# repo_context_tar ROOT: the source tree as git sees it (tracked and untracked-but-not-ignored
# files, so build folders and run folders stay out), or the folder less build* without git;
# a tar stream on stdout.
repo_context_tar() (
  cd "$1" || exit 1
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files -z -co --exclude-standard |
      while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
      tar --null -T - -cf -
  else
    tar --exclude='./build*' --exclude=./runs --exclude=./.git -cf - .
  fi
)
