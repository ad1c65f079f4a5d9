# shellcheck shell=bash
# Mounting tests/forgetfs for a test script: forgetfs_mount BIN BACKING MNT starts it in the
# foreground (single-threaded) in the background of this shell and waits until the
# control file answers; forgetfs_drop drops everything not synced and checks the answer
# came within 100 ms; forgetfs_umount unmounts and reaps it. Exit 77 (skip) where FUSE
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
  ((FORGETFS_DROP_MS < 100)) || { echo "FAIL: the drop took $FORGETFS_DROP_MS ms (limit 100 ms)"; return 1; }
}
forgetfs_umount() {
  [[ -n "$FORGETFS_PID" ]] || return 0
  fusermount3 -u "$FORGETFS_MNT" 2>/dev/null || fusermount3 -uz "$FORGETFS_MNT" 2>/dev/null
  wait "$FORGETFS_PID" 2>/dev/null
  FORGETFS_PID=
}
