#!/usr/bin/env bash
# tests/forgetfs on its own: after a drop, an unsynced write is gone and a synced one
# (fsync, fdatasync) stays; a create, a rename and an unlink without an fsync of their
# directory are undone, and with one they stay; each drop happens exactly once; the
# backing directory holds exactly the synced state at every step. Then its power-cut
# tools: a partial drop keeps whole sectors, new ones as a prefix of each page; cut_after
# cuts right after the chosen operation and fails everything after it until power_on; a
# failed fsync loses what it should have written even after a later fsync succeeds.
# Plain buffered I/O (no O_DIRECT) through python3's os module.
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
# 7. partial: a drop keeps a random part of the unsynced writes, page by page (old, new, or
#    a torn prefix of 512-byte sectors of the new over the old)
ctl() { echo "$1" >"$M/.forgetfs"; }
py 'fd=os.open(M+"/p",os.O_CREAT|os.O_WRONLY,0o644); os.write(fd,b"a"*16384); os.fsync(fd); os.close(fd)
d=os.open(M,os.O_RDONLY); os.fsync(d); os.close(d)
fd=os.open(M+"/p",os.O_WRONLY); os.pwrite(fd,b"b"*16384,0); os.close(fd)'
ctl "seed 7"
ctl "partial on"
forgetfs_drop || fails=$((fails + 1))
ctl "partial off"
mix=$(python3 -c 'import sys
d=open(sys.argv[1],"rb").read()
ok=len(d)==16384
kinds=set()
for pg in range(0,len(d),4096):
    secs=[d[k:k+512] for k in range(pg,pg+4096,512)]
    new=[s==b"b"*512 for s in secs]; old=[s==b"a"*512 for s in secs]
    ok=ok and all(n or o for n,o in zip(new,old)) and new==sorted(new,reverse=True)
    kinds.add("new" if all(new) else "old" if all(old) else "torn")
print("ok" if ok else "bad", " ".join(sorted(kinds)))' "$B/p")
check "a partial drop keeps whole 512-byte sectors, new ones as a prefix of each page ($mix)" [ "${mix%% *}" = ok ]
check "... and it kept some pages and not others (seed 7)" [ "$(wc -w <<<"$mix")" -ge 3 ]
# 8. cut_after: the power goes right after the 2nd write to /c, then everything fails
py 'fd=os.open(M+"/c",os.O_CREAT|os.O_WRONLY,0o644); os.fsync(fd); os.close(fd)
d=os.open(M,os.O_RDONLY); os.fsync(d); os.close(d)'
ctl "cut_after 2 0 write /c"
out=$(py 'fd=os.open(M+"/c",os.O_WRONLY|os.O_APPEND)
os.write(fd,b"one"); os.fsync(fd); os.write(fd,b"two")
try:
    os.write(fd,b"three"); print("written")
except OSError as e:
    print("refused", e.errno)' 2>&1)
check "after the cut every operation fails with EIO ($out)" [ "$out" = "refused 5" ]
check "the control file says the power is off" grep -q '^power off$' "$M/.forgetfs"
check "... and which operation the cut followed" grep -q '^cut_op write /c$' "$M/.forgetfs"
ctl power_on
check "power on: what was synced before the cut is there, the rest is not" [ "$(content "$M/c")" = one ]
# 9. fail_fsync: an fsync fails and what it should have written is lost for good: a later
#    fsync succeeds without writing it (only what was written after the failure reaches the disk)
py 'fd=os.open(M+"/f",os.O_CREAT|os.O_WRONLY,0o644); os.write(fd,b"old"); os.fsync(fd); os.close(fd)
d=os.open(M,os.O_RDONLY); os.fsync(d); os.close(d)'
ctl "fail_fsync 1 /f"
out=$(py 'fd=os.open(M+"/f",os.O_WRONLY); os.pwrite(fd,b"NEW",0)
try:
    os.fsync(fd); print("synced")
except OSError as e:
    print("failed", e.errno)
os.pwrite(fd,b"+later",3); os.fsync(fd); print("then synced")' 2>&1 | tr '\n' ' ')
check "the armed fsync fails with EIO and the next one succeeds ($out)" [ "$out" = "failed 5 then synced " ]
check "the failed fsync's write never reaches the disk; what came after it does" [ "$(content "$B/f")" = "old+later" ]

((fails == 0)) || { echo "FAIL: $fails checks failed"; exit 1; }
echo "PASS: forgetfs forgets exactly what a power cut would (all, or a random part, of the unsynced writes; right after a chosen operation; after a failed fsync)"
