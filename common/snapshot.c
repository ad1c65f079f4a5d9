/* Atomic, checksummed snapshot files (see snapshot.h). */
#include "common/snapshot.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/durable.h"
#include "common/error.h"
#include "common/log.h"

#define HEADER_BYTES 64u
#define TRAILER_BYTES 16u
static const char k_magic[8] = {'S', 'A', 'C', 'S', 'N', 'A', 'P', 0};
static const char k_end[8] = {'S', 'N', 'A', 'P', 'E', 'N', 'D', 0};

/* ------------------------------------------------------------------ CRC-32C */

static uint32_t g_crc_table[8][256];
static int g_crc_ready;

static void crc_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++)
      c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    g_crc_table[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; i++)
    for (int t = 1; t < 8; t++)
      g_crc_table[t][i] = (g_crc_table[t - 1][i] >> 8) ^ g_crc_table[0][g_crc_table[t - 1][i] & 0xFF];
  __atomic_store_n(&g_crc_ready, 1, __ATOMIC_RELEASE);
}

#if defined(__x86_64__) && defined(__GNUC__)
/* SSE4.2's crc32 instruction computes exactly CRC-32C, about 5x the table's speed; the
 * shard's write-ahead log checksums every batch with it. */
__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t crc, const unsigned char *p,
                                                            size_t len) {
  uint64_t c = (uint32_t)~crc;
  for (; len >= 8; p += 8, len -= 8) {
    uint64_t v;
    memcpy(&v, p, 8);
    c = __builtin_ia32_crc32di(c, v);
  }
  uint32_t c32 = (uint32_t)c;
  while (len--)
    c32 = __builtin_ia32_crc32qi(c32, *p++);
  return ~c32;
}
#endif

uint32_t sac_crc32c(uint32_t crc, const void *data, size_t len) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (__builtin_cpu_supports("sse4.2"))
    return crc32c_hw(crc, data, len);
#endif
  if (!__atomic_load_n(&g_crc_ready, __ATOMIC_ACQUIRE))
    crc_init(); /* idempotent: concurrent first calls compute the same table */
  const unsigned char *p = data;
  crc = ~crc;
  while (len >= 8) {
    uint32_t lo, hi;
    memcpy(&lo, p, 4);
    memcpy(&hi, p + 4, 4);
    lo ^= crc;
    crc = g_crc_table[7][lo & 0xFF] ^ g_crc_table[6][(lo >> 8) & 0xFF] ^ g_crc_table[5][(lo >> 16) & 0xFF] ^
          g_crc_table[4][lo >> 24] ^ g_crc_table[3][hi & 0xFF] ^ g_crc_table[2][(hi >> 8) & 0xFF] ^
          g_crc_table[1][(hi >> 16) & 0xFF] ^ g_crc_table[0][hi >> 24];
    p += 8;
    len -= 8;
  }
  while (len--)
    crc = (crc >> 8) ^ g_crc_table[0][(crc ^ *p++) & 0xFF];
  return ~crc;
}

/* ------------------------------------------------------------------ I/O */

static int write_all(int fd, const void *data, size_t len) {
  const unsigned char *p = data;
  while (len) {
    ssize_t w = write(fd, p, len);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      return SAC_EIO;
    }
    p += w;
    len -= (size_t)w;
  }
  return 0;
}

static int read_all(int fd, void *data, size_t len) {
  unsigned char *p = data;
  while (len) {
    ssize_t r = read(fd, p, len);
    if (r < 0) {
      if (errno == EINTR)
        continue;
      return SAC_EIO;
    }
    if (r == 0)
      return SAC_EIO;
    p += r;
    len -= (size_t)r;
  }
  return 0;
}

static void put32(unsigned char *p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }
static uint32_t get32(const unsigned char *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}
static uint64_t get64(const unsigned char *p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}

static void make_header(unsigned char h[HEADER_BYTES], uint64_t payload, uint32_t kind) {
  memset(h, 0, HEADER_BYTES);
  memcpy(h, k_magic, 8);
  put32(h + 8, SAC_SNAP_FORMAT);
  put32(h + 12, HEADER_BYTES);
  put64(h + 16, payload);
  put64(h + 24, sac_wallclock_ns());
  put32(h + 32, kind);
  put32(h + 60, sac_crc32c(0, h, 60));
}

/* Creates w->tmp, "<path>.tmp.<pid>-<random>", and holds an flock on it until it is
 * renamed or removed: the lock, not the pid (a container's shard is often pid 1, like
 * its neighbour's), is what tells a live writer's temporary from a dead one's
 * (sac_snap_prepare). A cleaner that removed the name between the create and the lock
 * is noticed (the name no longer leads to this file) and the create is tried again. */
static int open_tmp(sac_snap_writer_t *w) {
  for (int attempt = 0; attempt < 3; attempt++) {
    snprintf(w->tmp, sizeof w->tmp, "%s.tmp.%ld-%08x%08x", w->path, (long)getpid(),
             (unsigned)(sac_wallclock_ns() & 0xFFFFFFFFu), (unsigned)(sac_clock_ns() * 2654435761u));
    if (sac_durable_fault("open", w->path)) {
      w->fd = -1;
      return SAC_EIO;
    }
    w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (w->fd < 0) {
      if (errno == EEXIST)
        continue;
      return SAC_EIO;
    }
    struct stat a, b;
    if (flock(w->fd, LOCK_EX | LOCK_NB) == 0 && fstat(w->fd, &a) == 0 && stat(w->tmp, &b) == 0 &&
        a.st_ino == b.st_ino && a.st_dev == b.st_dev)
      return 0;
    close(w->fd);
    w->fd = -1;
  }
  errno = EAGAIN;
  return SAC_EIO;
}

int sac_snap_writer_open(sac_snap_writer_t *w, const char *path, uint32_t kind) {
  memset(w, 0, sizeof *w);
  w->fd = -1;
  if (strlen(path) >= sizeof w->path)
    return SAC_EINVAL;
  snprintf(w->path, sizeof w->path, "%s", path);
  w->kind = kind;
  if (open_tmp(w) != 0) {
    SAC_ERROR("snapshot", "cannot create %s: %s", w->tmp, strerror(errno));
    w->tmp[0] = '\0';
    return SAC_EIO;
  }
  /* the real header is written at commit, once the payload length is known */
  unsigned char h[HEADER_BYTES];
  make_header(h, 0, kind);
  if (write_all(w->fd, h, sizeof h) != 0) {
    SAC_ERROR("snapshot", "cannot write %s: %s", w->tmp, strerror(errno));
    sac_snap_writer_abort(w);
    return SAC_EIO;
  }
  return 0;
}

int sac_snap_write(sac_snap_writer_t *w, const void *data, size_t len) {
  if (w->fd < 0)
    return SAC_EIO;
  if (sac_durable_fault("write", w->path) || write_all(w->fd, data, len) != 0) {
    SAC_ERROR("snapshot", "cannot write %s: %s", w->tmp, strerror(errno));
    return SAC_EIO;
  }
  w->crc = sac_crc32c(w->crc, data, len);
  w->bytes += len;
  return 0;
}

int sac_snap_writer_commit(sac_snap_writer_t *w) {
  if (w->fd < 0)
    return SAC_EIO;
  unsigned char t[TRAILER_BYTES], h[HEADER_BYTES];
  memset(t, 0, sizeof t);
  put32(t, w->crc);
  memcpy(t + 8, k_end, 8);
  make_header(h, w->bytes, w->kind);
  const char *step = "write trailer";
  if (write_all(w->fd, t, sizeof t) != 0)
    goto err;
  step = "write header";
  if (pwrite(w->fd, h, sizeof h, 0) != (ssize_t)sizeof h)
    goto err;
  step = "fsync";
  if (sac_durable_fault("fsync", w->path) || fsync(w->fd) != 0)
    goto err;
  /* renamed while still open: the flock on the temporary holds until its name is gone */
  step = "rename";
  if (sac_durable_fault("rename", w->path) || rename(w->tmp, w->path) != 0)
    goto err;
  w->tmp[0] = '\0';
  int closed = close(w->fd);
  w->fd = -1;
  if (closed != 0) {
    SAC_ERROR("snapshot", "close of %s failed: %s; the new snapshot is in place but may not be durable",
              w->path, strerror(errno));
    return SAC_EIO;
  }
  /* until the directory is synced the rename may be undone by a power cut: the new
   * snapshot is not durable, and whoever relies on it (the shard truncating its log)
   * must not */
  if (sac_durable_sync_dir(w->path) != 0) {
    SAC_ERROR("snapshot",
              "fsync of the directory of %s failed: %s; the new snapshot is in place but not durable",
              w->path, strerror(errno));
    return SAC_EIO;
  }
  return 0;
err:
  SAC_ERROR("snapshot", "%s of %s failed: %s; the previous snapshot is kept", step, w->tmp, strerror(errno));
  sac_snap_writer_abort(w);
  return SAC_EIO;
}

void sac_snap_writer_abort(sac_snap_writer_t *w) {
  if (w->fd >= 0) {
    close(w->fd);
    w->fd = -1;
  }
  if (w->tmp[0])
    unlink(w->tmp);
  w->tmp[0] = '\0';
}

static const char *sac_snap_file_kind(mode_t m) {
  return S_ISDIR(m)    ? "a directory"
         : S_ISFIFO(m) ? "a FIFO"
         : S_ISSOCK(m) ? "a socket"
         : S_ISCHR(m)  ? "a character device"
         : S_ISBLK(m)  ? "a block device"
                       : "not a regular file";
}

/* Removes "<base>.tmp.<anything>" in dir that no writer holds: a live writer keeps an
 * flock on its temporary (open_tmp), in whatever PID namespace it runs. As a second,
 * conservative reason to keep one, a name whose pid is a live process other than this
 * one is kept too (a writer of an older version, which took no lock). */
static uint64_t remove_stale_tmp(const char *dir, const char *base) {
  DIR *d = opendir(dir);
  if (!d)
    return 0;
  uint64_t n = 0;
  size_t bl = strlen(base);
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    const char *nm = e->d_name;
    if (strncmp(nm, base, bl) != 0 || strncmp(nm + bl, ".tmp.", 5) != 0 || !nm[bl + 5])
      continue;
    char *end = NULL;
    errno = 0;
    long pid = strtol(nm + bl + 5, &end, 10);
    if (!errno && pid > 0 && pid != (long)getpid() && (kill((pid_t)pid, 0) == 0 || errno != ESRCH))
      continue; /* named after a live process (an older writer without the lock) */
    char full[8400];
    snprintf(full, sizeof full, "%s/%s", dir, nm);
    struct stat sb;
    if (lstat(full, &sb) != 0 || !S_ISREG(sb.st_mode))
      continue;
    if (sac_durable_file_locked(full))
      continue; /* a live writer, perhaps in another PID namespace */
    if (unlink(full) == 0) {
      SAC_WARN("snapshot", "removed %s (%lld bytes), left by a writer that stopped mid-snapshot", full,
               (long long)sb.st_size);
      n++;
    }
  }
  closedir(d);
  return n;
}

int sac_snap_prepare(const char *path, uint64_t *removed) {
  if (removed)
    *removed = 0;
  struct stat sb;
  if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) {
    SAC_ERROR("snapshot",
              "snapshot path %s is %s, not a regular file: name a file (it is created if missing)", path,
              sac_snap_file_kind(sb.st_mode));
    return SAC_EINVAL;
  }
  char d1[4096], d2[4096];
  snprintf(d1, sizeof d1, "%s", path);
  snprintf(d2, sizeof d2, "%s", path);
  const char *dir = dirname(d1), *base = basename(d2);
  char probe[8400];
  snprintf(probe, sizeof probe, "%s/.%s.probe.%ld", dir, base, (long)getpid());
  int fd = open(probe, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0 && (errno == ENOSPC || errno == EDQUOT)) {
    /* full, not unwritable: the shard starts, refuses inserts until there is room, and
     * serves what it holds (docs/RELIABILITY.md "A full disk") */
    SAC_WARN("snapshot", "the folder %s of snapshot %s is full (%s): snapshots fail until there is room", dir,
             path, strerror(errno));
  } else if (fd < 0) {
    SAC_ERROR("snapshot", "cannot create files in %s, the folder of snapshot %s: %s", dir, path,
              strerror(errno));
    return SAC_EIO;
  }
  if (fd >= 0) {
    close(fd);
    unlink(probe);
  }
  uint64_t n = remove_stale_tmp(dir, base);
  if (removed)
    *removed = n;
  return 0;
}

int sac_snap_reader_open(sac_snap_reader_t *r, const char *path, uint32_t kind) {
  memset(r, 0, sizeof *r);
  /* O_NONBLOCK: opening a FIFO must not wait for a writer; nothing but a regular file
   * is read */
  r->fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (r->fd < 0) {
    if (errno == ENOENT)
      return SAC_ENOTFOUND;
    SAC_ERROR("snapshot", "cannot open %s: %s", path, strerror(errno));
    return SAC_EIO;
  }
  struct stat sb;
  unsigned char h[HEADER_BYTES], t[TRAILER_BYTES];
  int rc = SAC_EIO;
  if (fstat(r->fd, &sb) != 0) {
    SAC_ERROR("snapshot", "cannot stat %s: %s", path, strerror(errno));
    goto fail;
  }
  if (!S_ISREG(sb.st_mode)) {
    SAC_ERROR("snapshot", "%s is %s, not a regular file: a snapshot path must name a file", path,
              sac_snap_file_kind(sb.st_mode));
    rc = SAC_EINVAL;
    goto fail;
  }
  fcntl(r->fd, F_SETFL, fcntl(r->fd, F_GETFL) & ~O_NONBLOCK);
  if ((uint64_t)sb.st_size < HEADER_BYTES + TRAILER_BYTES || read_all(r->fd, h, sizeof h) != 0) {
    SAC_ERROR("snapshot", "%s is truncated: %lld bytes, shorter than a header and trailer", path,
              (long long)sb.st_size);
    goto fail;
  }
  if (memcmp(h, k_magic, 8) != 0) {
    SAC_ERROR("snapshot", "%s is not a sacfleet snapshot (bad magic)", path);
    rc = SAC_ECHECKSUM;
    goto fail;
  }
  if (get32(h + 60) != sac_crc32c(0, h, 60)) {
    SAC_ERROR("snapshot", "%s: header checksum mismatch (corrupt header)", path);
    rc = SAC_ECHECKSUM;
    goto fail;
  }
  if (get32(h + 8) != SAC_SNAP_FORMAT || get32(h + 12) != HEADER_BYTES) {
    SAC_ERROR("snapshot", "%s: format %u, this build reads format %u", path, get32(h + 8), SAC_SNAP_FORMAT);
    rc = SAC_EVERSION;
    goto fail;
  }
  if (get32(h + 32) != kind) {
    SAC_ERROR("snapshot", "%s: snapshot kind %u, expected %u", path, get32(h + 32), kind);
    rc = SAC_EVERSION;
    goto fail;
  }
  r->payload_bytes = get64(h + 16);
  r->created_ns = get64(h + 24);
  r->kind = kind;
  uint64_t expect = HEADER_BYTES + r->payload_bytes + TRAILER_BYTES;
  if (r->payload_bytes > (uint64_t)sb.st_size || expect != (uint64_t)sb.st_size) {
    SAC_ERROR("snapshot", "%s is truncated or has trailing bytes: %lld bytes, header says %llu", path,
              (long long)sb.st_size, (unsigned long long)expect);
    goto fail;
  }
  /* verify the payload checksum before anything is loaded */
  uint32_t crc = 0;
  unsigned char buf[1 << 16];
  for (uint64_t left = r->payload_bytes; left;) {
    size_t chunk = left < sizeof buf ? (size_t)left : sizeof buf;
    if (read_all(r->fd, buf, chunk) != 0) {
      SAC_ERROR("snapshot", "%s: read error: %s", path, strerror(errno));
      goto fail;
    }
    crc = sac_crc32c(crc, buf, chunk);
    left -= chunk;
  }
  if (read_all(r->fd, t, sizeof t) != 0 || memcmp(t + 8, k_end, 8) != 0 || get32(t + 4) != 0) {
    SAC_ERROR("snapshot", "%s: missing end marker (truncated)", path);
    goto fail;
  }
  if (get32(t) != crc) {
    SAC_ERROR("snapshot", "%s: payload checksum mismatch (corrupt)", path);
    rc = SAC_ECHECKSUM;
    goto fail;
  }
  if (lseek(r->fd, HEADER_BYTES, SEEK_SET) != (off_t)HEADER_BYTES) {
    SAC_ERROR("snapshot", "%s: seek failed: %s", path, strerror(errno));
    goto fail;
  }
  return 0;
fail:
  close(r->fd);
  r->fd = -1;
  return rc;
}

int sac_snap_read(sac_snap_reader_t *r, void *data, size_t len) {
  if (r->fd < 0 || len > r->payload_bytes - r->read_bytes)
    return SAC_EIO;
  if (read_all(r->fd, data, len) != 0)
    return SAC_EIO;
  r->read_bytes += len;
  return 0;
}

void sac_snap_reader_close(sac_snap_reader_t *r) {
  if (r->fd >= 0)
    close(r->fd);
  r->fd = -1;
}
