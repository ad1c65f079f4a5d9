/* What the durable files (snapshots, the shard's write-ahead log, their lock) need from
 * the file system beyond plain calls: a directory fsync (a new, renamed or removed name
 * survives a power cut only after it), a rename that is followed by one, an exclusive
 * lock that names its holder, and one test hook through which tests inject I/O errors
 * (EIO, ENOSPC) into exactly these operations. It is not a general file API: the
 * callers still use read/write/fdatasync themselves, asking sac_durable_fault first. */
#ifndef SAC_COMMON_DURABLE_H
#define SAC_COMMON_DURABLE_H

/* For tests: when set, asked before each durable-file operation op ("open", "write",
 * "fsync", "fdatasync", "rename", "dirsync", "truncate") on path; returns 0 to let it
 * run or an errno value (EIO, ENOSPC, ...) to make it fail with that errno. NULL: none. */
extern int (*sac_durable_fault_hook)(const char *op, const char *path);

/* 0, or the errno the hook injects (and errno is set to it). Cheap when no hook is set. */
int sac_durable_fault(const char *op, const char *path);

/* fsync of the directory that holds path ("." for a bare name). 0, or SAC_EIO with errno
 * set (the directory cannot be opened or its fsync failed): a caller that needs the
 * name to survive a power cut must treat that as a failure. */
int sac_durable_sync_dir(const char *path);

/* rename(from, to), then the directory fsync of to (from and to in one directory).
 * 0, SAC_EIO (errno set; a failed directory fsync leaves the rename done but not
 * durable). */
int sac_durable_rename(const char *from, const char *to);

/* Takes an exclusive lock (flock) on lock_path, creating it, and writes this process's
 * pid into it (best effort: a full disk does not stop the lock). 0 with *fd the lock's
 * descriptor (closing it releases the lock); SAC_EAGAIN when another process (or another
 * open in this one) holds it: holder gets the pid the holder wrote, else the one
 * /proc/locks names ("" when unknown); SAC_EIO when the file cannot be opened. */
int sac_durable_lock(const char *lock_path, int *fd, char *holder, unsigned holder_cap);

/* Takes an exclusive flock on the file at path itself (created empty when missing and
 * create is set), writing nothing to it: a lock on the inode, so every name of the file
 * (a symlink, a hard link, a volume mounted at another path) meets the same lock. The
 * same results as sac_durable_lock (holder from /proc/locks); SAC_ENOTFOUND when the
 * file is missing and create is 0. */
int sac_durable_lock_file(const char *path, int create, int *fd, char *holder, unsigned holder_cap);

/* Whether some open file description holds an flock on the file at path: 1 held, 0 not
 * (or the file is gone), never blocking. Used to tell a temporary file being written
 * from one a dead writer left: its writer holds the lock for as long as it lives,
 * whichever PID namespace it runs in. */
int sac_durable_file_locked(const char *path);

#endif
