#!/usr/bin/env bash
# Installs the Debian 12 (bookworm) packages sacfleet needs. Runs apt-get as root (through
# sudo when not root) and installs only what is missing, so a second run is quick.
#
#   scripts/install-deps.sh          what building and running the main job needs, nothing
#                                    more: compiler, CMake, pkg-config, ZeroMQ, protobuf-c,
#                                    libuv, OpenBLAS (the README's first command;
#                                    scripts/first_command_test.sh checks that it stays lean)
#   scripts/install-deps.sh --test   that, plus what the test suite, the benchmarks and the
#                                    optional environments need (scripts/test.sh runs this):
#                                    Criterion, Prometheus and curl, ffmpeg, MuJoCo and the Python
#                                    headers, clang (fuzzing), valgrind, iproute2, procps, bc,
#                                    pip, and python3-torch (the PyTorch peer of the learner
#                                    benchmark; SAC_WITH_PEER=0 leaves it out)
#   scripts/install-deps.sh --all    the same as --test
#
# CMake says in one line per optional part what it builds and what it skips (look for
# "sacfleet:" in its output), so a missing extra shows there rather than as an error.
set -euo pipefail
usage() { echo "usage: scripts/install-deps.sh [--test | --all]" >&2; }
extras=0
for a in "$@"; do
  case $a in
    --test | --all) extras=1 ;;
    -h | --help) usage; exit 0 ;;
    *) usage; exit 2 ;;
  esac
done

# build and run the main job: exactly what the top CMakeLists.txt requires
pkgs=(build-essential cmake pkg-config libzmq3-dev libprotobuf-c-dev protobuf-c-compiler libuv1-dev
      libopenblas-dev)
if ((extras)); then
  pkgs+=(libcriterion-dev)                  # the unit and integration tests (tests/CMakeLists.txt)
  pkgs+=(iproute2 procps bc)                # the distributed/fault test scripts (netns, ps, sums)
  pkgs+=(git)                               # the docker tests' build context (git ls-files)
  pkgs+=(prometheus curl)                   # promtool and a Prometheus server for tests/test_metrics*
  pkgs+=(ffmpeg)                            # sac-eval --record's video encoder, ffprobe (tests/test_eval_record.sh)
  pkgs+=(libmujoco-dev python3-dev)         # envs/mujoco (MuJoCo 2.2.2) and envs/gym_bridge (embedded CPython)
  pkgs+=(python3-pip)                       # scripts/test.sh pip-installs gymnasium[mujoco], the tests' reference
  pkgs+=(time binutils)                    # /usr/bin/time -v and readelf: tests/footprint (peak RSS, NEEDED)
  pkgs+=(clang valgrind)                    # scripts/ci_extra.sh: fuzzing, memcheck
  pkgs+=(fuse3 libfuse3-dev)                # tests/forgetfs and the power-cut tests (FUSE; skipped without)
  if [ "${SAC_WITH_PEER:-1}" = 1 ]; then
    pkgs+=(python3-torch)                   # the PyTorch peer of bench/bench_learner.c
  fi
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#pkgs[@]} packages present"
  exit 0
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
