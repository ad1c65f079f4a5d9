#!/usr/bin/env bash
# Behaviour unchanged: builds OLD_REF and the current tree (uncommitted changes
# included), then on both
#   - runs `sac-learner --mode local` with a fixed seed (Pendulum-v1 with --threads 1 and
#     --threads 2; HalfCheetah-v5 at the `cheetah` network size, short, when MuJoCo is
#     built), strips the fields that measure time (the updates/s, eta, wall and peak RSS
#     figures and the log lines' timestamps) and the warnings about renamed options, and
#     compares the rest byte for byte;
#   - builds scripts/wire_probe.c against each tree's wire codec and compares what it
#     prints (seeded messages of every type encoded, decoded under several limits, and
#     decoded again after corruption).
# Exits 0 when everything is identical, 1 on any difference (the diff is printed), 2 when
# something cannot be built or run.
#
# usage: scripts/local_identity.sh [OLD_REF]   (default: the merge-base of HEAD and main)
# (not SAC_*: the programs read SAC_* variables as options and refuse unknown ones)
#   LOCAL_IDENTITY_STEPS   total steps of the Pendulum runs (default 4000)
#   LOCAL_IDENTITY_JOBS    build parallelism (default 2)
#   LOCAL_IDENTITY_KEEP=1  keep the temporary folder (its path is printed)
#   LOCAL_IDENTITY_NEW_REF a commit to compare instead of the current tree (e.g. a merge
#                        commit on main against its first parent: that merge's changes alone)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
old_ref=${1:-$(git -C "$here" merge-base HEAD main)}
old_commit=$(git -C "$here" rev-parse --verify "$old_ref^{commit}") || {
  echo "local_identity: no such commit: $old_ref" >&2
  exit 2
}
steps=${LOCAL_IDENTITY_STEPS:-4000}
jobs=${LOCAL_IDENTITY_JOBS:-2}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sac-identity.XXXXXX")
cleanup() { [ "${LOCAL_IDENTITY_KEEP:-0}" = 1 ] && echo "local_identity: kept $tmp" || rm -rf "$tmp"; }
trap cleanup EXIT

# build SRC OUT: sac-learner and the libraries the wire probe links
build() {
  if ! { cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=RelWithDebInfo &&
    cmake --build "$2" -j"$jobs" --target sac-learner sac_common sac_proto; } >"$2.log" 2>&1; then
    tail -30 "$2.log" >&2
    echo "local_identity: cannot build $1 (log: $2.log)" >&2
    exit 2
  fi
  # the MuJoCo plugins, where this machine can build them (the cheetah run needs one)
  cmake --build "$2" -j"$jobs" --target sac_env_mujoco >>"$2.log" 2>&1 || true
  cc -std=c11 -O1 -I"$1" -I"$2" "$here/scripts/wire_probe.c" "$2/common/libsac_common.a" \
    "$2/proto/libsac_proto.a" -lprotobuf-c -lzmq -luv -lm -lpthread -ldl -o "$2/wire_probe" >>"$2.log" 2>&1 || {
    echo "local_identity: cannot build the wire probe against $1 (log: $2.log)" >&2
    exit 2
  }
}

echo "local_identity: old $old_commit ($(git -C "$here" log -1 --format=%s "$old_commit" | cut -c1-60))"
mkdir -p "$tmp/old-src"
git -C "$here" archive "$old_commit" | tar -x -C "$tmp/old-src"
build "$tmp/old-src" "$tmp/old"
new_src=$here
if [ -n "${LOCAL_IDENTITY_NEW_REF:-}" ]; then
  new_commit=$(git -C "$here" rev-parse --verify "$LOCAL_IDENTITY_NEW_REF^{commit}") || exit 2
  echo "local_identity: new $new_commit ($(git -C "$here" log -1 --format=%s "$new_commit" | cut -c1-60))"
  new_src=$tmp/new-src
  mkdir -p "$new_src"
  git -C "$here" archive "$new_commit" | tar -x -C "$new_src"
fi
build "$new_src" "$tmp/new"

# The fields that measure time, not behaviour (and the warnings that an option the
# command uses has a new name, which only one side may print).
strip_timing() {
  sed -E -e '/ is deprecated and goes in the next release; use /d' -e 's/^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z //' \
    -e 's/ \([0-9.]+\/s\)/ (-\/s)/g' -e 's/eta [0-9.]+s/eta -s/g' \
    -e 's/wall [0-9.]+ s/wall - s/' -e 's/[0-9.]+ updates\/s/- updates\/s/' -e 's/peak RSS [0-9.]+ MiB/peak RSS - MiB/'
}

status=0
# compare NAME ARGS...: one local-mode run on both builds
compare() {
  local name=$1
  shift
  for side in old new; do
    if ! "$tmp/$side/learner/sac-learner" --mode local --metrics_port -1 "$@" >"$tmp/$side-$name.raw" 2>&1; then
      tail -20 "$tmp/$side-$name.raw" >&2
      echo "local_identity: the $side build failed on $name" >&2
      exit 2
    fi
    strip_timing <"$tmp/$side-$name.raw" >"$tmp/$side-$name.txt"
  done
  if cmp -s "$tmp/old-$name.txt" "$tmp/new-$name.txt"; then
    echo "local_identity: $name: identical ($(wc -l <"$tmp/new-$name.txt") lines; $(grep '^result:' "$tmp/new-$name.txt" | cut -c1-120))"
  else
    echo "local_identity: $name: DIFFERENT" >&2
    diff "$tmp/old-$name.txt" "$tmp/new-$name.txt" | head -40 >&2 || true
    status=1
  fi
}

common=(--seed 7 --total_steps "$steps" --learning_starts 1000 --eval_interval 1000 --eval_episodes 2 --log_interval 500)
compare pendulum-threads1 "${common[@]}" --threads 1
compare pendulum-threads2 "${common[@]}" --threads 2
# MuJoCo: built, and its models found (SAC_MUJOCO_ASSETS, or Gymnasium for python3)
if [ -f "$tmp/old/envs/mujoco/libsac_env_mujoco.so" ] && [ -f "$tmp/new/envs/mujoco/libsac_env_mujoco.so" ] &&
  "$tmp/new/learner/sac-learner" --mode local --metrics_port -1 --env HalfCheetah-v5 --total_steps 2 \
    --learning_starts 2 --batch_size 1 --eval_interval 0 --eval_episodes 1 >"$tmp/mujoco-probe.log" 2>&1; then
  compare cheetah --env HalfCheetah-v5 --seed 7 --total_steps 1500 --learning_starts 1000 --eval_interval 500 \
    --eval_episodes 1 --log_interval 250 --hidden 256 --depth 2 --batch_size 256 --threads 2
else
  echo "local_identity: cheetah: skipped (MuJoCo not built, or no models: set SAC_MUJOCO_ASSETS)"
fi

for side in old new; do "$tmp/$side/wire_probe" 3000 >"$tmp/$side-wire.txt"; done
if cmp -s "$tmp/old-wire.txt" "$tmp/new-wire.txt"; then
  echo "local_identity: wire codec: identical ($(wc -l <"$tmp/new-wire.txt") lines: encodings and decodings of $(grep -c '^msg' "$tmp/new-wire.txt") messages and their corruptions)"
else
  echo "local_identity: wire codec: DIFFERENT" >&2
  diff "$tmp/old-wire.txt" "$tmp/new-wire.txt" | head -40 >&2 || true
  status=1
fi
[ $status = 0 ] && echo "local_identity: identical" || echo "local_identity: DIFFERENCES (see above)" >&2
exit $status
