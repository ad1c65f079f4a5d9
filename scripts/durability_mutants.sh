#!/usr/bin/env bash
# Mutation check of the replay shard's durability (docs/RELIABILITY.md): plants each bug
# of a fixed list, one at a time, in a COPY of the source tree (never in the checkout it
# runs from), rebuilds what the durability tests need (sac-replay, sac-actor, forgetfs,
# test_replay_wal), runs them, and fails unless every planted bug makes a test fail. The
# tests: test_replay_wal (every case) and the power-cut test (tests/fault/power_cut.sh
# fsync) with TRIALS trials, one of each kind of cut by default. It prints one line per
# mutant: caught (by which test cases or power-cut trials) or SURVIVED.
#
# The bugs are the ways a write-ahead log is usually got wrong:
#   ack-before-fsync            an insert is acknowledged before the fsync covering it
#   no-dirsync-after-rename     the snapshot's rename is not followed by a directory fsync
#   no-dirsync-after-log-create a new log's name is not made durable (directory fsync)
#   rotate-before-snapshot      the log is emptied before the snapshot that replaces it is
#                               durable (before it is even written)
#   ack-duplicate-early         a resent duplicate is acknowledged while its original still
#                               waits for its fsync
#   ignore-failed-fsync         a failed fdatasync of the log is taken for a success
#
# Not part of CI (a build and two test runs per mutant: about 10 minutes on 2 busy cores
# after the first build); run it after changing replay/wal.c, replay/server.c,
# common/snapshot.c, common/durable.c or the tests that guard them. A mutant whose text
# no longer matches the source is an error (the list must follow the code). The power-cut
# test mounts a FUSE file system and opens TCP ports on 127.0.0.1: run it as root, in a
# network namespace of its own where other tests run beside it.
#
# usage: scripts/durability_mutants.sh [NAME...]   (default: every mutant; names as printed)
# env:   MUTANTS_DIR (work folder; default a new one under /tmp, removed at the end unless
#        MUTANTS_KEEP=1; inside it src/ is the copy and src/build its build, so with ccache
#        and CCACHE_BASEDIR set above it a copy of a built checkout recompiles little),
#        MUTANTS_JOBS (build jobs, 2), MUTANTS_TRIALS (power-cut trials, 8),
#        MUTANTS_CMAKE_ARGS (extra configure arguments; default RelWithDebInfo without CUDA,
#        ccache when installed)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
jobs=${MUTANTS_JOBS:-2}
trials=${MUTANTS_TRIALS:-8}
work=${MUTANTS_DIR:-$(mktemp -d /tmp/sac-durability-mutants.XXXXXX)}
src=$work/src
build_dir=$src/build
targets=(sac-replay sac-actor forgetfs test_replay_wal)
cleanup() { [[ ${MUTANTS_KEEP:-0} == 1 ]] || rm -rf "$work"; }
trap cleanup EXIT
PREFIX=durability_mutants
# shellcheck source=scripts/lib_mutants.sh
source "$root/scripts/lib_mutants.sh"

# ---------------------------------------------------------------- the mutants

SV=replay/server.c
mutant ack-before-fsync $SV \
  '  if (!s->wal || s->cfg.wal_sync_ms < 0 || (!s->n_wacks && s->wal_synced >= s->wal_appended)) {' \
  '  if (1) { /* planted: acknowledged before the fsync covers it */'
mutant no-dirsync-after-rename common/snapshot.c \
  '  if (sac_durable_sync_dir(w->path) != 0) {' \
  '  if (0) { /* planted: no directory fsync after the rename */'
mutant no-dirsync-after-log-create replay/wal.c \
  'sac_durable_fault("fsync", w->path) || fsync(w->fd) != 0 || sac_durable_sync_dir(w->path) != 0)
    return SAC_EIO;
  w->version = 2;' \
  'sac_durable_fault("fsync", w->path) || fsync(w->fd) != 0) /* planted: no directory fsync */
    return SAC_EIO;
  w->version = 2;'
mutant rotate-before-snapshot $SV \
  '  int rc = sac_replay_shard_save(s->shard, s->cfg.snapshot_path, &bytes);' \
  '  wal_rotate(s); /* planted: the log emptied before the snapshot is durable */
  int rc = sac_replay_shard_save(s->shard, s->cfg.snapshot_path, &bytes);'
mutant ack-duplicate-early $SV \
  '    ack_stored(s, id, id_len, t->actor_id, t->seq, &r); /* its original may still wait for an fsync */' \
  '    send_ack(s, id, id_len, t->actor_id, t->seq, &r, NULL); /* planted: not waiting for the original */'
mutant ignore-failed-fsync replay/wal.c \
  '  if (sac_durable_fault("fdatasync", w->path) || fdatasync(w->fd) != 0) {' \
  '  if ((sac_durable_fault("fdatasync", w->path) || fdatasync(w->fd) != 0) && 0) { /* planted */'

# ---------------------------------------------------------------- the copy and its build
(($#)) && mutants_check_names "$@"
mutants_copy "$root"
if [[ -n ${MUTANTS_CMAKE_ARGS:-} ]]; then
  read -r -a cargs <<<"$MUTANTS_CMAKE_ARGS"
else
  cargs=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DSAC_WITH_CUDA=OFF)
  command -v ccache >/dev/null && cargs+=(-DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
echo "durability_mutants: copy in $src; building ${targets[*]}"
cmake -S "$src" -B "$build_dir" "${cargs[@]}" >"$work/configure.log" 2>&1 ||
  { tail -n 20 "$work/configure.log"; exit 2; }

build() { cmake --build "$build_dir" -j"$jobs" --target "${targets[@]}" >"$work/build.log" 2>&1; }
# runs the tests; sets caught_by (failing cases, power-cut trials) and returns 0 when all passed
run_tests() {
  caught_by=()
  local out rc cases
  out="$work/test_replay_wal.log"
  rc=0
  (cd "$build_dir/tests" && timeout 600 ./test_replay_wal --jobs 1 >"$out" 2>&1) || rc=$?
  if ((rc != 0)); then
    cases=$(grep -oE '\[(FAIL|CRASH)\] [A-Za-z0-9_]+::[A-Za-z0-9_]+' "$out" | awk '{print $2}' | sort -u || true)
    [[ -n $cases ]] || cases="test_replay_wal(exit $rc)"
    mapfile -t -O "${#caught_by[@]}" caught_by <<<"$cases"
  fi
  out="$work/power_cut.log"
  rc=0
  # (the power-cut test starts no learner: any executable stands in for it)
  TRIALS=$trials DIST_DEADLINE_S=300 timeout 600 "$src/tests/fault/power_cut.sh" fsync "$(type -P true)" \
    "$build_dir/actor/sac-actor" "$build_dir/replay/sac-replay" "$build_dir/tests/forgetfs" >"$out" 2>&1 || rc=$?
  if ((rc == 77)); then
    echo "durability_mutants: the power-cut test was skipped (needs FUSE): $(tail -n 1 "$out")"
  elif ((rc != 0)); then
    caught_by+=("power_cut: $(grep -m1 -oE 'FAIL: .{0,160}' "$out" || echo "exit $rc")")
  fi
  ((${#caught_by[@]} == 0))
}

t0=$SECONDS
build || { echo "durability_mutants: the unmutated copy does not build (see $work/build.log)"; MUTANTS_KEEP=1; exit 2; }
if ! run_tests; then
  echo "durability_mutants: the unmutated copy fails ${caught_by[*]}: fix that first"
  MUTANTS_KEEP=1
  exit 2
fi
echo "durability_mutants: unmutated copy builds and passes ($((SECONDS - t0)) s)"

# ---------------------------------------------------------------- one mutant at a time
T0=$t0
mutants_plant_each "$@"
