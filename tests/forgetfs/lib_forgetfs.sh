# shellcheck shell=bash
# Mounting tests/forgetfs for a test script: forgetfs_mount BIN BACKING MNT starts it in the
# foreground (single-threaded) in the background of this shell and waits until the
# control file answers; forgetfs_drop drops everything not synced, checks that exactly one
# drop happened and reports how long it took; forgetfs_umount unmounts and reaps it. Exit 77 (skip) where FUSE
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
  local t0 t1 before after
  before=$(sed -n 's/^drops //p' "$FORGETFS_MNT/.forgetfs")
  t0=$(date +%s%N)
  echo drop >"$FORGETFS_MNT/.forgetfs" || { echo "FAIL: the drop command failed"; return 1; }
  t1=$(date +%s%N)
  after=$(sed -n 's/^drops //p' "$FORGETFS_MNT/.forgetfs")
  FORGETFS_DROP_MS=$(((t1 - t0) / 1000000))
  FORGETFS_DROP_US=$(sed -n 's/^last_drop_us //p' "$FORGETFS_MNT/.forgetfs")
  # forgetfs serves one operation at a time (-s), so nothing runs during a drop however
  # long a loaded machine makes it: the cut is instant for every process using the mount.
  # What is checked is that exactly this one drop happened; its time is reported.
  if [[ -z "$before" || -z "$after" ]] || ((after != before + 1)); then
    echo "FAIL: the drop counter went from ${before:-?} to ${after:-?} (one drop asked for)"
    return 1
  fi
  echo "forgetfs: drop $after took ${FORGETFS_DROP_US:-?} us inside forgetfs, answered in $FORGETFS_DROP_MS ms"
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
