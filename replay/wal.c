/* The shard write-ahead log (see wal.h): plain write(2) appends, fdatasync for group
 * commit, ftruncate to drop a torn tail or to empty the log after a snapshot. */
#define _GNU_SOURCE
#include "replay/wal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "common/durable.h"
#include "common/error.h"
#include "common/le.h"
#include "common/log.h"
#include "common/snapshot.h"

void (*sac_replay_wal_sync_hook)(void *arg);
void *sac_replay_wal_sync_hook_arg;

static const char k_magic[8] = {'S', 'A', 'C', 'W', 'A', 'L', '1', '\0'};

struct sac_replay_wal {
  int fd;
  uint64_t bytes;
  char path[1024];
};

static uint32_t record_crc(const unsigned char *head, const void *payload, size_t len) {
  uint32_t c = sac_crc32c(0, head + 8, SAC_REPLAY_WAL_RECORD_HEAD - 8);
  c = sac_crc32c(c, payload, len);
  return sac_crc32c(c, head, 4);
}

static int read_full(int fd, void *buf, size_t len, size_t *got) {
  unsigned char *p = buf;
  *got = 0;
  while (*got < len) {
    ssize_t n = read(fd, p + *got, len - *got);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return SAC_EIO;
    if (n == 0)
      break;
    *got += (size_t)n;
  }
  return 0;
}

#define RESYNC_WINDOW (64u << 20) /* offsets searched for an intact record after a bad one */

/* After a bad record at bad: is there an intact record (length in range, checksum good)
 * anywhere in the next RESYNC_WINDOW bytes? *at gets its offset, or 0 (a torn tail: what
 * a crash mid-append leaves, which holds no intact record). 0, SAC_EIO, SAC_ENOMEM. */
static int find_intact_after(int fd, uint64_t file_bytes, uint64_t bad, uint64_t *at) {
  *at = 0;
  uint64_t span = file_bytes - bad;
  if (span > (uint64_t)RESYNC_WINDOW + SAC_REPLAY_WAL_MAX_RECORD + SAC_REPLAY_WAL_RECORD_HEAD)
    span = (uint64_t)RESYNC_WINDOW + SAC_REPLAY_WAL_MAX_RECORD + SAC_REPLAY_WAL_RECORD_HEAD;
  if (span <= SAC_REPLAY_WAL_RECORD_HEAD)
    return 0;
  unsigned char *buf = malloc((size_t)span);
  if (!buf)
    return SAC_ENOMEM;
  size_t got = 0;
  if (lseek(fd, (off_t)bad, SEEK_SET) < 0 || read_full(fd, buf, (size_t)span, &got) != 0) {
    free(buf);
    return SAC_EIO;
  }
  for (size_t i = 1; i + SAC_REPLAY_WAL_RECORD_HEAD <= got && i < RESYNC_WINDOW; i++) {
    uint32_t len = sac_le_get32(buf + i);
    if (len == 0 || len > got - i - SAC_REPLAY_WAL_RECORD_HEAD)
      continue;
    if (record_crc(buf + i, buf + i + SAC_REPLAY_WAL_RECORD_HEAD, len) == sac_le_get32(buf + i + 4)) {
      *at = bad + i;
      break;
    }
  }
  free(buf);
  return 0;
}

/* Reads records from fd (positioned after the header) until the end or the first bad
 * one; fills out (valid_bytes counts from the file's start). */
static int scan_fd(int fd, uint64_t file_bytes, size_t max_payload, sac_replay_wal_apply_fn apply, void *user,
                   sac_replay_wal_scan_t *out) {
  memset(out, 0, sizeof *out);
  out->why = "";
  out->valid_bytes = SAC_REPLAY_WAL_HEADER_BYTES;
  size_t cap = max_payload ? max_payload : 4096;
  unsigned char *buf = malloc(cap);
  if (!buf)
    return SAC_ENOMEM;
  int rc = 0;
  for (;;) {
    unsigned char head[SAC_REPLAY_WAL_RECORD_HEAD];
    size_t got = 0;
    if ((rc = read_full(fd, head, sizeof head, &got)) != 0)
      break;
    if (got == 0)
      break; /* the clean end */
    if (got < sizeof head) {
      out->why = "torn record head";
      break;
    }
    /* A record longer than max_payload is still read (the shard may have been restarted
     * with a smaller max_msg_bytes; the apply callback decides), up to what the file
     * holds: a length beyond that is a torn record or a corrupt length field. */
    uint32_t len = sac_le_get32(head);
    uint64_t left = file_bytes - out->valid_bytes - sizeof head;
    if (len == 0 || len > SAC_REPLAY_WAL_MAX_RECORD ||
        (file_bytes >= out->valid_bytes + sizeof head && len > left)) {
      out->why =
          len == 0 || len > SAC_REPLAY_WAL_MAX_RECORD ? "record length out of range" : "torn record payload";
      break;
    }
    if (len > cap) {
      unsigned char *nb = realloc(buf, len);
      if (!nb) {
        rc = SAC_ENOMEM;
        break;
      }
      buf = nb;
      cap = len;
    }
    if ((rc = read_full(fd, buf, len, &got)) != 0)
      break;
    if (got < len) {
      out->why = "torn record payload";
      break;
    }
    if (record_crc(head, buf, len) != sac_le_get32(head + 4)) {
      out->why = "record checksum mismatch";
      break;
    }
    sac_replay_wal_rec_t rec = {sac_le_get32(head + 8), sac_le_get32(head + 12), sac_le_get64(head + 16),
                                sac_le_get64(head + 24), out->valid_bytes};
    if (apply && (rc = apply(user, &rec, buf, len)) != 0) {
      out->why = "record refused by the shard";
      break;
    }
    out->records++;
    out->valid_bytes += sizeof head + len;
  }
  free(buf);
  out->dropped_bytes = file_bytes > out->valid_bytes ? file_bytes - out->valid_bytes : 0;
  if (!rc && out->dropped_bytes)
    rc = find_intact_after(fd, file_bytes, out->valid_bytes, &out->valid_after);
  return rc;
}

/* Checks the header of an open log. 0, SAC_EPROTO, SAC_EIO. */
static int check_header(int fd, const char *path, uint32_t *shard_id) {
  unsigned char h[SAC_REPLAY_WAL_HEADER_BYTES];
  size_t got = 0;
  if (read_full(fd, h, sizeof h, &got) != 0)
    return SAC_EIO;
  if (got < sizeof h || memcmp(h, k_magic, 8) != 0 || sac_le_get32(h + 8) != 1) {
    SAC_ERROR("replay", "%s is not a replay shard write-ahead log (bad header)", path);
    return SAC_EPROTO;
  }
  *shard_id = sac_le_get32(h + 12);
  return 0;
}

int sac_replay_wal_scan(const char *path, size_t max_payload, sac_replay_wal_apply_fn apply, void *user,
                        sac_replay_wal_scan_t *out) {
  memset(out, 0, sizeof *out);
  out->why = "";
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return errno == ENOENT ? 0 : SAC_EIO;
  struct stat sb;
  uint32_t shard = 0;
  int rc = fstat(fd, &sb) != 0 ? SAC_EIO : 0;
  if (!rc && sb.st_size > 0)
    rc = check_header(fd, path, &shard);
  if (!rc && sb.st_size > 0)
    rc = scan_fd(fd, (uint64_t)sb.st_size, max_payload, apply, user, out);
  close(fd);
  return rc;
}

/* Copies the damaged log to "<path>.corrupt-<unix time>" (synced, with its directory)
 * before a cut destroys the records after the bad one. 0 or SAC_EIO. */
static int keep_aside(sac_replay_wal_t *w, uint64_t file_bytes, char *aside, size_t cap) {
  snprintf(aside, cap, "%s.corrupt-%lld", w->path, (long long)time(NULL));
  int out =
      sac_durable_fault("open", aside) ? -1 : open(aside, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (out < 0)
    return SAC_EIO;
  unsigned char buf[1 << 16];
  int rc = 0;
  for (uint64_t off = 0; off < file_bytes && !rc;) {
    ssize_t n = pread(w->fd, buf, sizeof buf, (off_t)off);
    if (n <= 0 || write(out, buf, (size_t)n) != n)
      rc = SAC_EIO;
    off += n > 0 ? (uint64_t)n : 0;
  }
  if (!rc && (sac_durable_fault("fsync", aside) || fsync(out) != 0))
    rc = SAC_EIO;
  close(out);
  return rc ? rc : sac_durable_sync_dir(aside);
}

/* The existing log of open: header, shard, records; a torn tail is cut, a corrupt
 * record with intact ones after it refuses (or, asked to, is cut after keeping the file
 * aside). Then the file and its directory are synced. */
static int replay_existing(sac_replay_wal_t *w, uint32_t shard_id, uint64_t file_bytes, size_t max_payload,
                           unsigned flags, sac_replay_wal_apply_fn apply, void *user,
                           sac_replay_wal_scan_t *scan) {
  const char *path = w->path;
  uint32_t file_shard = 0;
  int rc = check_header(w->fd, path, &file_shard);
  if (rc)
    return rc;
  if (file_shard != shard_id) {
    if (!(flags & SAC_REPLAY_WAL_ADOPT)) {
      SAC_ERROR("replay",
                "the write-ahead log %s belongs to shard %u, not shard %u: refusing it (adopt_snapshot=1 "
                "replays it into this shard)",
                path, file_shard, shard_id);
      return SAC_ESTATE;
    }
    SAC_WARN("replay", "write-ahead log %s belongs to shard %u, replaying it into shard %u as asked", path,
             file_shard, shard_id);
  }
  rc = scan_fd(w->fd, file_bytes, max_payload, apply, user, scan);
  if (rc)
    return rc;
  if (scan->valid_after) {
    if (!(flags & SAC_REPLAY_WAL_TRUNCATE_CORRUPT)) {
      SAC_ERROR("replay",
                "the write-ahead log %s is corrupt in the middle: %s at byte %llu, an intact record at byte "
                "%llu after it (acknowledged batches would be lost with it). Refusing to start; "
                "wal_truncate_corrupt=1 keeps a copy aside and cuts the log there",
                path, scan->why, (unsigned long long)scan->valid_bytes,
                (unsigned long long)scan->valid_after);
      return SAC_ECHECKSUM;
    }
    char aside[1200];
    if (keep_aside(w, file_bytes, aside, sizeof aside) != 0) {
      SAC_ERROR("replay", "cannot keep the corrupt log %s aside as %s: %s", path, aside, strerror(errno));
      return SAC_EIO;
    }
    SAC_WARN("replay",
             "write-ahead log %s: %s at byte %llu; kept the whole file as %s and cut the log there, as asked",
             path, scan->why, (unsigned long long)scan->valid_bytes, aside);
  }
  if (scan->dropped_bytes &&
      (sac_durable_fault("truncate", path) || ftruncate(w->fd, (off_t)scan->valid_bytes) != 0))
    return SAC_EIO;
  /* replayed records may be only in the page cache of the process that died */
  if (sac_durable_fault("fsync", path) || fsync(w->fd) != 0 || sac_durable_sync_dir(path) != 0)
    return SAC_EIO;
  /* the shard's start line says what was restored (replay/server.c, restore_summary) */
  SAC_DEBUG("replay", "wal: applied %llu records, dropped %llu bytes%s%s (%s)",
            (unsigned long long)scan->records, (unsigned long long)scan->dropped_bytes,
            scan->dropped_bytes ? ": " : "", scan->dropped_bytes ? scan->why : "", path);
  return 0;
}

int sac_replay_wal_open(const char *path, uint32_t shard_id, size_t max_payload, unsigned flags,
                        sac_replay_wal_apply_fn apply, void *user, sac_replay_wal_t **out,
                        sac_replay_wal_scan_t *scan) {
  *out = NULL;
  sac_replay_wal_scan_t dummy;
  if (!scan)
    scan = &dummy;
  memset(scan, 0, sizeof *scan);
  scan->why = "";
  sac_replay_wal_t *w = calloc(1, sizeof *w);
  if (!w)
    return SAC_ENOMEM;
  snprintf(w->path, sizeof w->path, "%s", path);
  w->fd = sac_durable_fault("open", path) ? -1 : open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  struct stat sb;
  if (w->fd < 0 || fstat(w->fd, &sb) != 0) {
    SAC_ERROR("replay", "cannot open the write-ahead log %s: %s", path, strerror(errno));
    sac_replay_wal_close(&w);
    return SAC_EIO;
  }
  int rc = 0;
  if (sb.st_size == 0) { /* new (or emptied by a crash right after creating it) */
    unsigned char h[SAC_REPLAY_WAL_HEADER_BYTES];
    memcpy(h, k_magic, 8);
    sac_le_put32(h + 8, 1);
    sac_le_put32(h + 12, shard_id);
    if (pwrite(w->fd, h, sizeof h, 0) != (ssize_t)sizeof h || fsync(w->fd) != 0 ||
        sac_durable_sync_dir(path) != 0)
      rc = SAC_EIO;
    scan->valid_bytes = sizeof h;
    if (!rc)
      SAC_DEBUG("replay", "wal: applied 0 records, dropped 0 bytes (new log %s)", path);
  } else {
    rc = replay_existing(w, shard_id, (uint64_t)sb.st_size, max_payload, flags, apply, user, scan);
  }
  if (rc) {
    if (rc == SAC_EIO)
      SAC_ERROR("replay", "cannot use the write-ahead log %s: %s", path, strerror(errno));
    sac_replay_wal_close(&w);
    return rc;
  }
  w->bytes = scan->valid_bytes;
  if (lseek(w->fd, (off_t)w->bytes, SEEK_SET) < 0) {
    sac_replay_wal_close(&w);
    return SAC_EIO;
  }
  *out = w;
  return 0;
}

void sac_replay_wal_close(sac_replay_wal_t **wp) {
  if (!wp || !*wp)
    return;
  if ((*wp)->fd >= 0)
    close((*wp)->fd);
  free(*wp);
  *wp = NULL;
}

int sac_replay_wal_append(sac_replay_wal_t *w, const sac_replay_wal_rec_t *rec, const void *payload,
                          size_t len) {
  unsigned char head[SAC_REPLAY_WAL_RECORD_HEAD];
  sac_le_put32(head, (uint32_t)len);
  sac_le_put32(head + 8, rec->actor);
  sac_le_put32(head + 12, rec->rows);
  sac_le_put64(head + 16, rec->session);
  sac_le_put64(head + 24, rec->seq);
  sac_le_put32(head + 4, record_crc(head, payload, len));
  struct iovec iov[2] = {{head, sizeof head}, {(void *)payload, len}};
  size_t want = sizeof head + len, done = 0;
  while (done < want) {
    ssize_t n = sac_durable_fault("write", w->path) ? -1 : pwritev(w->fd, iov, 2, (off_t)(w->bytes + done));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      SAC_ERROR("replay", "write-ahead log %s: write failed: %s", w->path,
                n < 0 ? strerror(errno) : "no progress");
      /* leave no partial record behind: the next append starts where this one did */
      if (ftruncate(w->fd, (off_t)w->bytes) != 0)
        SAC_ERROR("replay", "write-ahead log %s: cannot cut the partial record: %s", w->path,
                  strerror(errno));
      return SAC_EIO;
    }
    done += (size_t)n;
    /* advance the iovecs past what was written (short writes are rare) */
    size_t k = (size_t)n;
    for (int i = 0; i < 2 && k; i++) {
      size_t t = k < iov[i].iov_len ? k : iov[i].iov_len;
      iov[i].iov_base = (unsigned char *)iov[i].iov_base + t;
      iov[i].iov_len -= t;
      k -= t;
    }
  }
  w->bytes += want;
  return 0;
}

int sac_replay_wal_sync(sac_replay_wal_t *w) {
  if (sac_replay_wal_sync_hook)
    sac_replay_wal_sync_hook(sac_replay_wal_sync_hook_arg);
  if (sac_durable_fault("fdatasync", w->path) || fdatasync(w->fd) != 0) {
    SAC_ERROR("replay", "write-ahead log %s: fdatasync failed: %s", w->path, strerror(errno));
    return SAC_EIO;
  }
  return 0;
}

int sac_replay_wal_reset(sac_replay_wal_t *w) {
  if (sac_durable_fault("truncate", w->path) || ftruncate(w->fd, SAC_REPLAY_WAL_HEADER_BYTES) != 0 ||
      sac_durable_fault("fsync", w->path) || fsync(w->fd) != 0) {
    SAC_ERROR("replay", "write-ahead log %s: cannot empty it: %s", w->path, strerror(errno));
    return SAC_EIO;
  }
  w->bytes = SAC_REPLAY_WAL_HEADER_BYTES;
  return 0;
}

uint64_t sac_replay_wal_bytes(const sac_replay_wal_t *w) { return w->bytes; }
