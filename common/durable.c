/* Durable-file helpers (common/durable.h): directory fsync, rename + directory fsync,
 * the holder-naming exclusive lock, and the fault hook tests use to inject I/O errors. */
#define _GNU_SOURCE
#include "common/durable.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
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

int sac_durable_lock(const char *lock_path, int *fd, char *holder, unsigned holder_cap) {
  *fd = -1;
  if (holder_cap)
    holder[0] = '\0';
  int f = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (f < 0)
    return SAC_EIO;
  if (flock(f, LOCK_EX | LOCK_NB) != 0) {
    int busy = errno == EWOULDBLOCK;
    if (busy && holder_cap > 1) {
      ssize_t n = pread(f, holder, holder_cap - 1, 0);
      holder[n > 0 ? n : 0] = '\0';
      holder[strcspn(holder, "\n")] = '\0';
    }
    close(f);
    return busy ? SAC_EAGAIN : SAC_EIO;
  }
  char pid[32];
  int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
  if (ftruncate(f, 0) != 0 || pwrite(f, pid, (size_t)n, 0) != n) {
    close(f);
    return SAC_EIO;
  }
  *fd = f;
  return 0;
}
