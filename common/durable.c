/* Durable-file helpers (common/durable.h): directory fsync, rename + directory fsync,
 * the holder-naming exclusive locks, and the fault hook tests use to inject I/O errors. */
#define _GNU_SOURCE
#include "common/durable.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "common/error.h"

int (*sac_durable_fault_hook)(const char *op, const char *path);

int sac_durable_fault(const char *op, const char *path) {
  if (!sac_durable_fault_hook)
    return 0;
  int e = sac_durable_fault_hook(op, path);
  if (e)
    errno = e;
  return e;
}

int sac_durable_sync_dir(const char *path) {
  char dir[4096];
  if (snprintf(dir, sizeof dir, "%s", path) >= (int)sizeof dir) {
    errno = ENAMETOOLONG;
    return SAC_EIO;
  }
  char *slash = strrchr(dir, '/');
  if (slash == dir)
    slash[1] = '\0';
  else if (slash)
    *slash = '\0';
  else
    snprintf(dir, sizeof dir, ".");
  if (sac_durable_fault("dirsync", path))
    return SAC_EIO;
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return SAC_EIO;
  int rc = fsync(fd);
  int e = errno;
  close(fd);
  errno = e;
  return rc == 0 ? 0 : SAC_EIO;
}

int sac_durable_rename(const char *from, const char *to) {
  if (sac_durable_fault("rename", to) || rename(from, to) != 0)
    return SAC_EIO;
  return sac_durable_sync_dir(to);
}

/* The pid /proc/locks names for an flock on the file behind fd ("" when none is found):
 * for messages only. */
static void lock_holder(int fd, char *holder, unsigned cap) {
  if (cap == 0)
    return;
  holder[0] = '\0';
  struct stat sb;
  FILE *f = fstat(fd, &sb) == 0 ? fopen("/proc/locks", "r") : NULL;
  if (!f)
    return;
  char line[256];
  while (fgets(line, sizeof line, f)) {
    char kind[16];
    long pid = 0;
    unsigned maj = 0, min = 0;
    unsigned long ino = 0;
    if (strstr(line, "->") ||
        sscanf(line, "%*d: %15s %*s %*s %ld %x:%x:%lu", kind, &pid, &maj, &min, &ino) != 5)
      continue;
    if (!strcmp(kind, "FLOCK") && ino == (unsigned long)sb.st_ino && maj == major(sb.st_dev) &&
        min == minor(sb.st_dev)) {
      snprintf(holder, cap, "%ld", pid);
      break;
    }
  }
  fclose(f);
}

/* flock(LOCK_EX | LOCK_NB) on f: 0, SAC_EAGAIN (held elsewhere: holder filled), SAC_EIO. */
static int try_flock(int f, char *holder, unsigned holder_cap) {
  if (flock(f, LOCK_EX | LOCK_NB) == 0)
    return 0;
  if (errno != EWOULDBLOCK)
    return SAC_EIO;
  lock_holder(f, holder, holder_cap);
  return SAC_EAGAIN;
}

int sac_durable_lock(const char *lock_path, int *fd, char *holder, unsigned holder_cap) {
  *fd = -1;
  if (holder_cap)
    holder[0] = '\0';
  int f = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (f < 0)
    return SAC_EIO;
  int rc = try_flock(f, holder, holder_cap);
  if (rc) {
    if (rc == SAC_EAGAIN && holder_cap > 1) {
      char pid[32];
      ssize_t n = pread(f, pid, sizeof pid - 1, 0);
      pid[n > 0 ? n : 0] = '\0';
      pid[strcspn(pid, "\n")] = '\0';
      if (pid[0])
        snprintf(holder, holder_cap, "%s", pid);
    }
    close(f);
    return rc;
  }
  /* the pid is for people reading the file; the lock is the flock, so a full disk (the
   * shard must still start and serve samples there) only loses the note */
  char pid[32];
  int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
  if (pwrite(f, pid, (size_t)n, 0) != n || ftruncate(f, n) != 0) {
    /* nothing to do: see above */
  }
  *fd = f;
  return 0;
}

int sac_durable_lock_file(const char *path, int create, int *fd, char *holder, unsigned holder_cap) {
  *fd = -1;
  if (holder_cap)
    holder[0] = '\0';
  int f = open(path, O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0), 0644);
  if (f < 0)
    return errno == ENOENT ? SAC_ENOTFOUND : SAC_EIO;
  int rc = try_flock(f, holder, holder_cap);
  if (rc) {
    close(f);
    return rc;
  }
  *fd = f;
  return 0;
}

int sac_durable_file_locked(const char *path) {
  int f = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (f < 0)
    return 0;
  int held = flock(f, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  close(f); /* releases the probe's own lock, if it got one */
  return held;
}
