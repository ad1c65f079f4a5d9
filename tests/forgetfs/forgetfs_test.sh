#!/usr/bin/env bash
# tests/forgetfs on its own: after a drop, an unsynced write is gone and a synced one
# (fsync, fdatasync) stays; a create, a rename and an unlink without an fsync of their
# directory are undone, and with one they stay; the drop is answered within 100 ms; the
# backing directory holds exactly the synced state at every step. Plain buffered I/O
# (no O_DIRECT) through python3's os module.
# usage: forgetfs_test.sh FORGETFS_BIN
set -u
BIN=${1:?usage: forgetfs_test.sh FORGETFS_BIN}
# shellcheck source=tests/forgetfs/lib_forgetfs.sh
source "$(dirname "$0")/lib_forgetfs.sh"
command -v python3 >/dev/null || { echo "SKIP: needs python3"; exit 77; }
T=$(mktemp -d /tmp/forgetfs-test.XXXXXX)
trap 'forgetfs_umount; rm -rf "$T"' EXIT
forgetfs_mount "$BIN" "$T/back" "$T/mnt"
M=$T/mnt B=$T/back
fails=0
check() { # check DESCRIPTION COMMAND...
  if "${@:2}"; then echo "ok: $1"; else echo "FAIL: $1"; fails=$((fails + 1)); fi
}
py() { python3 -c "import os,sys
M=sys.argv[1]
$1" "$M"; }
content() { [[ -f "$1" ]] && cat "$1" || echo "<absent>"; }

# 1. a durable file (created, fsynced, directory fsynced), then more writes
py 'fd=os.open(M+"/a",os.O_CREAT|os.O_WRONLY,0o644); os.write(fd,b"synced"); os.fsync(fd); os.close(fd)
d=os.open(M,os.O_RDONLY); os.fsync(d); os.close(d)'
check "a synced file is in the backing directory" [ "$(content "$B/a")" = synced ]
py 'fd=os.open(M+"/a",os.O_WRONLY|os.O_APPEND); os.write(fd,b"+unsynced"); os.close(fd)'
check "the mount shows the unsynced write" [ "$(content "$M/a")" = synced+unsynced ]
check "the backing directory does not have it" [ "$(content "$B/a")" = synced ]
# 2. fdatasync covers data too
py 'fd=os.open(M+"/b",os.O_CREAT|os.O_WRONLY,0o644); os.write(fd,b"one"); os.fdatasync(fd); os.close(fd)
d=os.open(M,os.O_RDONLY); os.fsync(d); os.close(d)
fd=os.open(M+"/b",os.O_WRONLY); os.pwrite(fd,b"two",3); os.fdatasync(fd); os.close(fd)'
# 3. in a subdirectory s that is never synced after its setup: a create (the file itself
#    fsynced), a rename and an unlink, none covered by an fsync of s
py 'os.mkdir(M+"/s")
for n,t in (("r1",b"old"),("u",b"gone?")):
    fd=os.open(M+"/s/"+n,os.O_CREAT|os.O_WRONLY,0o644); os.write(fd,t); os.fsync(fd); os.close(fd)
for d in (M+"/s",M):
    f=os.open(d,os.O_RDONLY); os.fsync(f); os.close(f)
fd=os.open(M+"/s/c",os.O_CREAT|os.O_WRONLY,0o644); os.write(fd,b"new"); os.fsync(fd); os.close(fd)
os.rename(M+"/s/r1",M+"/s/r1.moved")
os.unlink(M+"/s/u")'
# 4. in the root: a rename followed by the directory fsync, and an unlink not followed by one
#    (nothing else in the root changes after the fsync)
py 'fd=os.open(M+"/r2",os.O_CREAT|os.O_WRONLY,0o644); os.write(fd,b"keep"); os.fsync(fd); os.close(fd)
d=os.open(M,os.O_RDONLY); os.fsync(d); os.close(d)
os.rename(M+"/r2",M+"/r2.moved"); d=os.open(M,os.O_RDONLY); os.fsync(d); os.close(d)
os.unlink(M+"/b")'
check "the mount shows the renames and the unlinks" [ -f "$M/s/r1.moved" ] && [ ! -e "$M/s/r1" ] && [ ! -e "$M/b" ] && [ ! -e "$M/s/u" ]
# 6. a truncate without an fsync
py 'fd=os.open(M+"/r2.moved",os.O_WRONLY); os.ftruncate(fd,1); os.close(fd)'

forgetfs_drop || fails=$((fails + 1))
echo "drop: $FORGETFS_DROP_US us inside forgetfs, answered in $FORGETFS_DROP_MS ms"
check "an unsynced write is gone after the drop" [ "$(content "$M/a")" = synced ]
check "a write covered by fdatasync stays" [ "$(content "$M/b")" = onetwo ]
check "an unlink without a directory fsync is undone" [ -f "$M/b" ] && [ "$(content "$M/s/u")" = "gone?" ]
check "a create without a directory fsync is undone" [ ! -e "$M/s/c" ]
check "a rename without a directory fsync is undone (old name back)" [ "$(content "$M/s/r1")" = old ]
check "... and the new name gone" [ ! -e "$M/s/r1.moved" ]
check "a rename with a directory fsync stays" [ "$(content "$M/r2.moved")" = keep ] && [ ! -e "$M/r2" ]
check "an unsynced truncate is undone" [ "$(content "$M/r2.moved")" = keep ]
check "the mount and the backing directory agree after the drop" diff -r --exclude=.forgetfs "$M" "$B"

# negative control: the same write, fsynced, is not forgotten (the drop is not a wipe)
py 'fd=os.open(M+"/a",os.O_WRONLY|os.O_APPEND); os.write(fd,b"+now"); os.fsync(fd); os.close(fd)'
forgetfs_drop || fails=$((fails + 1))
check "a write covered by fsync survives the drop" [ "$(content "$M/a")" = synced+now ]
if grep -q '^drops 2$' "$M/.forgetfs"; then
  echo "ok: two drops counted"
else
  echo "FAIL: $(cat "$M/.forgetfs")"
  fails=$((fails + 1))
fi
((fails == 0)) || { echo "FAIL: $fails checks failed"; exit 1; }
echo "PASS: forgetfs forgets exactly what a power cut would"
