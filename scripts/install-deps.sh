#!/usr/bin/env bash
# Installs what sacfleet needs to build and test on Debian 12 (bookworm): compilers, CMake,
# ZeroMQ, protobuf-c, libuv, OpenBLAS, Criterion; python3-torch for the PyTorch peer in
# the learner benchmark. Runs apt-get as root (through sudo when not root). Installs only
# what is missing, so a second run is quick.
set -euo pipefail
pkgs=(build-essential cmake pkg-config git
      libzmq3-dev libprotobuf-c-dev protobuf-c-compiler libuv1-dev libopenblas-dev libcriterion-dev
      iproute2 procps bc)
pkgs+=(prometheus curl) # promtool and a Prometheus server for tests/test_metrics*
pkgs+=(time binutils) # /usr/bin/time -v and readelf: tests/footprint (peak RSS, no CUDA in NEEDED)
pkgs+=(libmujoco-dev python3-dev) # envs/mujoco (MuJoCo 2.2.2) and envs/gym_bridge (embedded CPython); tests also need: pip install "gymnasium[mujoco]"
if [ "${SAC_WITH_PEER:-1}" = 1 ]; then pkgs+=(python3-torch); fi
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
