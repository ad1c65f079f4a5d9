# shellcheck shell=bash
# Mounting tests/forgetfs for a test script: forgetfs_mount BIN BACKING MNT starts it in the
# foreground (single-threaded) in the background of this shell and waits until the
# control file answers; forgetfs_drop drops everything not synced and checks that the drop
# took under 100 ms inside forgetfs (and the answer came within 1 s); forgetfs_umount unmounts and reaps it. Exit 77 (skip) where FUSE
# cannot be used (no /dev/fuse, no fusermount3, mounting refused).
FORGETFS_PID=
forgetfs_mount() {
  local bin=$1 back=$2 mnt=$3 i
  [[ -c /dev/fuse ]] || { echo "SKIP: no /dev/fuse"; exit 77; }
  command -v fusermount3 >/dev/null || { echo "SKIP: no fusermount3 (apt-get install fuse3)"; exit 77; }
  mkdir -p "$back" "$mnt"
  "$bin" "$back" "$mnt" -f -s >"$back.forgetfs.log" 2>&1 &
  FORGETFS_PID=$!
  FORGETFS_MNT=$mnt
  for ((i = 0; i < 100; i++)); do
    [[ -f "$mnt/.forgetfs" ]] && return 0
    kill -0 "$FORGETFS_PID" 2>/dev/null || { echo "SKIP: forgetfs could not mount: $(cat "$back.forgetfs.log")"; exit 77; }
    sleep 0.05
  done
  echo "FAIL: forgetfs not mounted after 5 s: $(cat "$back.forgetfs.log")"
  exit 1
}
forgetfs_drop() {
  local t0 t1
  t0=$(date +%s%N)
  echo drop >"$FORGETFS_MNT/.forgetfs" || { echo "FAIL: the drop command failed"; return 1; }
  t1=$(date +%s%N)
  FORGETFS_DROP_MS=$(((t1 - t0) / 1000000))
  FORGETFS_DROP_US=$(sed -n 's/^last_drop_us //p' "$FORGETFS_MNT/.forgetfs")
  # the drop itself (inside forgetfs) within 100 ms; the round trip through the kernel and
  # this shell, which a loaded 2-core machine can stretch, within 1 s
  if [[ -z "$FORGETFS_DROP_US" ]] || ((FORGETFS_DROP_US >= 100000)); then
    echo "FAIL: the drop took ${FORGETFS_DROP_US:-?} us inside forgetfs (limit 100 ms)"
    return 1
  fi
  ((FORGETFS_DROP_MS < 1000)) || { echo "FAIL: the drop was answered after $FORGETFS_DROP_MS ms (limit 1 s)"; return 1; }
}

forgetfs_umount() {
  local i
  [[ -n "$FORGETFS_PID" ]] || return 0
  fusermount3 -u "$FORGETFS_MNT" 2>/dev/null || fusermount3 -uz "$FORGETFS_MNT" 2>/dev/null
  # the daemon normally ends with the mount; when the kernel keeps its connection (seen
  # once after a clean unmount) it is told to stop, then killed
  for ((i = 0; i < 30; i++)); do
    kill -0 "$FORGETFS_PID" 2>/dev/null || break
    sleep 0.1
  done
  kill -TERM "$FORGETFS_PID" 2>/dev/null && sleep 0.5
  kill -KILL "$FORGETFS_PID" 2>/dev/null
  wait "$FORGETFS_PID" 2>/dev/null
  FORGETFS_PID=
}
