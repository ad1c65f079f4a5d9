/* The shard write-ahead log (see wal.h): plain write(2) appends, fdatasync for group
 * commit, ftruncate to drop a power-cut tail or to empty the log after a snapshot. */
#define _GNU_SOURCE
#include "replay/wal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
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
  uint32_t version, shard;
  uint64_t header; /* bytes */
  uint64_t bytes;
  uint64_t capacity;
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

static int all_zero(const unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i])
      return 0;
  return 1;
}

#define RESYNC_WINDOW (64u << 20) /* version 1: offsets searched for an intact record after a bad one */

/* Version 1's rule, kept for logs written before sync records existed: after a bad
 * record at bad, is there an intact record (length in range, checksum good) anywhere in
 * the next RESYNC_WINDOW bytes? *at gets its offset, or 0. 0, SAC_EIO, SAC_ENOMEM. */
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

#define SYNC_PAYLOAD 16u
#define SYNC_BYTES (SAC_REPLAY_WAL_RECORD_HEAD + SYNC_PAYLOAD)

/* An intact SYNC record at p (SYNC_BYTES readable): its claim, else 0. */
static uint64_t sync_claim(const unsigned char *p) {
  if (sac_le_get32(p) != SYNC_PAYLOAD || sac_le_get32(p + 8) != SAC_REPLAY_WAL_SYNC || sac_le_get32(p + 12) ||
      sac_le_get64(p + 24))
    return 0;
  if (record_crc(p, p + SAC_REPLAY_WAL_RECORD_HEAD, SYNC_PAYLOAD) != sac_le_get32(p + 4))
    return 0;
  return sac_le_get64(p + SAC_REPLAY_WAL_RECORD_HEAD);
}

/* The rule of wal.h: every offset after the damage at bad, to the end of the file (no
 * window: a record may be up to 1 GiB), is tried as the start of a SYNC record; the
 * largest claim of an intact one goes to out->claim_after (its offset to claim_at).
 * Read in 1 MiB pieces that overlap by a record's size. 0, SAC_EIO, SAC_ENOMEM. */
static int find_claims_after(int fd, uint64_t file_bytes, uint64_t bad, sac_replay_wal_scan_t *out) {
  const size_t piece = 1u << 20;
  unsigned char *buf = malloc(piece + SYNC_BYTES);
  if (!buf)
    return SAC_ENOMEM;
  int rc = 0;
  for (uint64_t at = bad + 1; at + SYNC_BYTES <= file_bytes; at += piece) {
    size_t want = piece + SYNC_BYTES - 1;
    if (at + want > file_bytes)
      want = (size_t)(file_bytes - at);
    ssize_t n = pread(fd, buf, want, (off_t)at);
    if (n < (ssize_t)SYNC_BYTES) {
      rc = n < 0 ? SAC_EIO : 0;
      break;
    }
    for (size_t i = 0; i + SYNC_BYTES <= (size_t)n && i < piece; i++) {
      if (buf[i] != SYNC_PAYLOAD) /* the length's low byte: the cheap filter */
        continue;
      uint64_t claim = sync_claim(buf + i);
      if (claim > out->claim_after) {
        out->claim_after = claim;
        out->claim_at = at + i;
      }
    }
  }
  free(buf);
  return rc;
}

/* Names the damage at the scan's stop (out->why, out->detail). */
static void describe(sac_replay_wal_scan_t *out, const char *why, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void describe(sac_replay_wal_scan_t *out, const char *why, const char *fmt, ...) {
  out->why = why;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(out->detail, sizeof out->detail, fmt, ap);
  va_end(ap);
}

/* One intact record: a SYNC record raises acked_bytes; the others go to apply. */
static int take_record(const unsigned char *head, const unsigned char *payload, uint32_t len,
                       sac_replay_wal_apply_fn apply, void *user, sac_replay_wal_scan_t *out) {
  sac_replay_wal_rec_t rec = {sac_le_get32(head + 8),  sac_le_get32(head + 12), sac_le_get64(head + 16),
                              sac_le_get64(head + 24), out->valid_bytes,        SAC_REPLAY_WAL_BATCH};
  if (rec.seq == 0) { /* a control record */
    rec.kind = rec.actor;
    if (rec.kind == SAC_REPLAY_WAL_SYNC && len == SYNC_PAYLOAD) {
      uint64_t claim = sac_le_get64(payload);
      out->acked_bytes = claim > out->acked_bytes ? claim : out->acked_bytes;
      out->capacity = rec.session > out->capacity ? rec.session : out->capacity;
      out->syncs++;
      return 0;
    }
    if (rec.kind != SAC_REPLAY_WAL_FORGET || len < 4)
      return 1; /* unknown: refused like a record the shard cannot take */
    rec.actor = sac_le_get32(payload);
  }
  if (apply) {
    int rc = apply(user, &rec, payload, len);
    if (rc)
      return rc;
  }
  out->records++;
  return 0;
}

/* Reads records from fd (positioned after the header) until the end or the first bad
 * one; fills out (valid_bytes counts from the file's start), then judges the damage. */
static int scan_fd(int fd, uint64_t file_bytes, size_t max_payload, sac_replay_wal_apply_fn apply, void *user,
                   sac_replay_wal_scan_t *out) {
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
      describe(out, "torn record head", "the file ends %zu bytes into a record head", got);
      break;
    }
    /* A record longer than max_payload is still read (the shard may have been restarted
     * with a smaller max_msg_bytes; the apply callback decides), up to what the file
     * holds: a length beyond that is a torn record or a corrupt length field. */
    uint32_t len = sac_le_get32(head);
    uint64_t left = file_bytes - out->valid_bytes - sizeof head;
    if (all_zero(head, sizeof head)) {
      describe(out, "zero-filled record head",
               "zeros where a record should start (%llu bytes to the end of the file): pages not written "
               "back",
               (unsigned long long)(left + sizeof head));
      break;
    }
    if (len == 0 || len > SAC_REPLAY_WAL_MAX_RECORD) {
      describe(out, "record length out of range", "a record head with length %u", len);
      break;
    }
    if (len > left) {
      describe(out, "torn record payload", "the file ends %llu bytes into a record of %u bytes",
               (unsigned long long)(left + sizeof head), len + SAC_REPLAY_WAL_RECORD_HEAD);
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
      describe(out, "torn record payload", "the file ends %zu bytes into a payload of %u bytes", got, len);
      break;
    }
    if (record_crc(head, buf, len) != sac_le_get32(head + 4)) {
      describe(out, "record checksum mismatch", "a record of %u bytes whose checksum does not match%s",
               len + SAC_REPLAY_WAL_RECORD_HEAD, all_zero(buf, len) ? " (its payload is zeros)" : "");
      break;
    }
    int taken = take_record(head, buf, len, apply, user, out);
    if (taken) {
      rc = taken < 0 ? taken : 0;
      describe(out, "record refused by the shard", "a record the shard refused (kind %u)",
               sac_le_get32(head + 8));
      if (taken > 0)
        rc = SAC_EPROTO;
      break;
    }
    out->valid_bytes += sizeof head + len;
  }
  free(buf);
  out->dropped_bytes = file_bytes > out->valid_bytes ? file_bytes - out->valid_bytes : 0;
  if (!rc && out->dropped_bytes) {
    rc = find_claims_after(fd, file_bytes, out->valid_bytes, out);
    if (!rc && out->version == 1)
      rc = find_intact_after(fd, file_bytes, out->valid_bytes, &out->valid_after);
    out->corrupt = out->claim_after > out->valid_bytes || out->valid_after != 0;
  }
  return rc;
}

static void make_header(unsigned char h[SAC_REPLAY_WAL_HEADER_BYTES], uint32_t shard, uint64_t capacity) {
  memset(h, 0, SAC_REPLAY_WAL_HEADER_BYTES);
  memcpy(h, k_magic, 8);
  sac_le_put32(h + 8, 2);
  sac_le_put32(h + 12, shard);
  sac_le_put64(h + 16, capacity);
  sac_le_put32(h + 24, sac_crc32c(0, h, 24));
}

/* Checks the header of an open log (version 1 or 2). 0, SAC_EPROTO, SAC_EIO. */
static int check_header(int fd, const char *path, sac_replay_wal_scan_t *out, uint32_t *shard_id) {
  unsigned char h[SAC_REPLAY_WAL_HEADER_BYTES];
  size_t got = 0;
  if (lseek(fd, 0, SEEK_SET) < 0 || read_full(fd, h, sizeof h, &got) != 0)
    return SAC_EIO;
  uint32_t version = got >= 12 ? sac_le_get32(h + 8) : 0;
  if (got >= SAC_REPLAY_WAL_HEADER_V1 && !memcmp(h, k_magic, 8) && version == 1) {
    *shard_id = sac_le_get32(h + 12);
    out->version = 1;
    out->valid_bytes = SAC_REPLAY_WAL_HEADER_V1;
    return lseek(fd, SAC_REPLAY_WAL_HEADER_V1, SEEK_SET) < 0 ? SAC_EIO : 0;
  }
  if (got < SAC_REPLAY_WAL_HEADER_BYTES || memcmp(h, k_magic, 8) != 0 || version != 2 ||
      sac_le_get32(h + 24) != sac_crc32c(0, h, 24)) {
    SAC_ERROR("replay", "%s is not a replay shard write-ahead log (bad header)", path);
    return SAC_EPROTO;
  }
  *shard_id = sac_le_get32(h + 12);
  out->version = 2;
  out->capacity = sac_le_get64(h + 16);
  out->valid_bytes = SAC_REPLAY_WAL_HEADER_BYTES;
  return 0;
}

static void scan_init(sac_replay_wal_scan_t *out) {
  memset(out, 0, sizeof *out);
  out->why = "";
}

int sac_replay_wal_scan(const char *path, size_t max_payload, sac_replay_wal_apply_fn apply, void *user,
                        sac_replay_wal_scan_t *out) {
  scan_init(out);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return errno == ENOENT ? 0 : SAC_EIO;
  struct stat sb;
  uint32_t shard = 0;
  int rc = fstat(fd, &sb) != 0 ? SAC_EIO : 0;
  if (!rc && sb.st_size > 0)
    rc = check_header(fd, path, out, &shard);
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

/* Writes a fresh header (version 2) at the start of an empty file and syncs it with its
 * directory. 0 or SAC_EIO. */
static int write_header(sac_replay_wal_t *w) {
  unsigned char h[SAC_REPLAY_WAL_HEADER_BYTES];
  make_header(h, w->shard, w->capacity);
  if (sac_durable_fault("write", w->path) || pwrite(w->fd, h, sizeof h, 0) != (ssize_t)sizeof h ||
      sac_durable_fault("fsync", w->path) || fsync(w->fd) != 0 || sac_durable_sync_dir(w->path) != 0)
    return SAC_EIO;
  w->version = 2;
  w->header = w->bytes = SAC_REPLAY_WAL_HEADER_BYTES;
  return 0;
}

/* A file no longer than a header that is all zeros or starts as a header does: what a
 * crash while the header was being written leaves (or a log with no record yet). No
 * record fits in it, so nothing is lost when it is started again. */
static int torn_new_header(int fd, uint64_t file_bytes) {
  unsigned char h[SAC_REPLAY_WAL_HEADER_BYTES];
  if (file_bytes > sizeof h || pread(fd, h, (size_t)file_bytes, 0) != (ssize_t)file_bytes)
    return 0;
  size_t m = file_bytes < 8 ? (size_t)file_bytes : 8;
  return all_zero(h, (size_t)file_bytes) || memcmp(h, k_magic, m) == 0;
}

/* The damage the scan stopped at, when it is corruption of acknowledged records: refused
 * (SAC_ECHECKSUM), or, asked to, kept aside and cut. 0 when the cut may go on. */
static int judge_corruption(sac_replay_wal_t *w, uint64_t file_bytes, unsigned flags,
                            const sac_replay_wal_scan_t *scan) {
  if (!scan->corrupt)
    return 0;
  char proof[160];
  if (scan->claim_after > scan->valid_bytes)
    snprintf(proof, sizeof proof,
             "a sync record at byte %llu says a completed fsync covered the log up to byte %llu",
             (unsigned long long)scan->claim_at, (unsigned long long)scan->claim_after);
  else
    snprintf(proof, sizeof proof, "an intact record follows at byte %llu (a version 1 log)",
             (unsigned long long)scan->valid_after);
  if (!(flags & SAC_REPLAY_WAL_TRUNCATE_CORRUPT)) {
    SAC_ERROR(
        "replay",
        "the write-ahead log %s is corrupt: %s at byte %llu (%s), and %s: acknowledged batches would be "
        "lost with it. Refusing to start; wal_truncate_corrupt=1 keeps a copy aside and cuts the log there",
        w->path, scan->why, (unsigned long long)scan->valid_bytes, scan->detail, proof);
    return SAC_ECHECKSUM;
  }
  char aside[1200];
  if (keep_aside(w, file_bytes, aside, sizeof aside) != 0) {
    SAC_ERROR("replay", "cannot keep the corrupt log %s aside as %s: %s", w->path, aside, strerror(errno));
    return SAC_EIO;
  }
  SAC_WARN(
      "replay",
      "write-ahead log %s: %s at byte %llu (%s), and %s; kept the whole file as %s and cut the log there, "
      "as asked",
      w->path, scan->why, (unsigned long long)scan->valid_bytes, scan->detail, proof, aside);
  return 0;
}

/* The existing log of open: header, shard, records; a power-cut tail is cut, damage to
 * acknowledged records refuses (or, asked to, is cut after keeping the file aside). Then
 * the file and its directory are synced. */
static int replay_existing(sac_replay_wal_t *w, uint32_t shard_id, uint64_t file_bytes, size_t max_payload,
                           unsigned flags, sac_replay_wal_apply_fn apply, void *user,
                           sac_replay_wal_scan_t *scan) {
  const char *path = w->path;
  uint32_t file_shard = 0;
  int rc = check_header(w->fd, path, scan, &file_shard);
  if (rc)
    return rc;
  w->version = scan->version;
  w->header = scan->valid_bytes;
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
  if ((rc = judge_corruption(w, file_bytes, flags, scan)) != 0)
    return rc;
  sac_replay_wal_rec_t end = {
      .session = scan->capacity, .offset = scan->valid_bytes, .kind = SAC_REPLAY_WAL_END};
  if (apply && (rc = apply(user, &end, NULL, 0)) != 0)
    return rc;
  if (scan->dropped_bytes &&
      (sac_durable_fault("truncate", path) || ftruncate(w->fd, (off_t)scan->valid_bytes) != 0))
    return SAC_EIO;
  /* replayed records may be only in the page cache of the process that died */
  if (sac_durable_fault("fsync", path) || fsync(w->fd) != 0 || sac_durable_sync_dir(path) != 0)
    return SAC_EIO;
  if (scan->dropped_bytes && !scan->corrupt)
    SAC_INFO(
        "replay",
        "wal: applied %llu records, dropped %llu bytes: %s at byte %llu (%s); no completed fsync covered "
        "them (the sync records reach byte %llu), so none was acknowledged: a power-cut tail (%s)",
        (unsigned long long)scan->records, (unsigned long long)scan->dropped_bytes, scan->why,
        (unsigned long long)scan->valid_bytes, scan->detail,
        (unsigned long long)(scan->claim_after > scan->acked_bytes ? scan->claim_after : scan->acked_bytes),
        path);
  else /* the shard's start line says what was restored (replay/server.c, restore_summary) */
    SAC_DEBUG("replay", "wal: applied %llu records, dropped %llu bytes%s%s (%s)",
             (unsigned long long)scan->records, (unsigned long long)scan->dropped_bytes,
             scan->dropped_bytes ? ": " : "", scan->dropped_bytes ? scan->why : "", path);
  return 0;
}

int sac_replay_wal_open(const char *path, uint32_t shard_id, uint64_t capacity, size_t max_payload,
                        unsigned flags, sac_replay_wal_apply_fn apply, void *user, sac_replay_wal_t **out,
                        sac_replay_wal_scan_t *scan) {
  *out = NULL;
  sac_replay_wal_scan_t dummy;
  if (!scan)
    scan = &dummy;
  scan_init(scan);
  sac_replay_wal_t *w = calloc(1, sizeof *w);
  if (!w)
    return SAC_ENOMEM;
  snprintf(w->path, sizeof w->path, "%s", path);
  w->shard = shard_id;
  w->capacity = capacity;
  w->fd = sac_durable_fault("open", path) ? -1 : open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  struct stat sb;
  if (w->fd < 0 || fstat(w->fd, &sb) != 0) {
    SAC_ERROR("replay", "cannot open the write-ahead log %s: %s", path, strerror(errno));
    sac_replay_wal_close(&w);
    return SAC_EIO;
  }
  int rc = 0;
  if (sb.st_size == 0 || torn_new_header(w->fd, (uint64_t)sb.st_size)) {
    /* new, or a crash while its header was written (no record can be in it) */
    if (sb.st_size && (sac_durable_fault("truncate", path) || ftruncate(w->fd, 0) != 0))
      rc = SAC_EIO;
    if (!rc)
      rc = write_header(w);
    scan->version = 2;
    scan->valid_bytes = SAC_REPLAY_WAL_HEADER_BYTES;
    if (!rc)
      SAC_DEBUG("replay", "wal: applied 0 records, dropped 0 bytes (new log %s)", path);
  } else {
    rc = replay_existing(w, shard_id, (uint64_t)sb.st_size, max_payload, flags, apply, user, scan);
    w->bytes = scan->valid_bytes;
    scan->claimed = scan->acked_bytes;
    /* what was replayed is synced: say so in the log, so that an acknowledgement of a
     * resent duplicate of it has a sync record behind it. A full disk only delays that
     * record (the shard writes it with its next fsync): the start goes on. */
    if (!rc && w->bytes > w->header) {
      uint64_t end = w->bytes;
      if (sac_replay_wal_append_sync(w, end) != 0) {
        if (errno != ENOSPC && errno != EDQUOT)
          rc = SAC_EIO;
        else
          SAC_WARN("replay", "write-ahead log %s: no room for its sync record (%s): written later", path,
                   strerror(errno));
      } else if (sac_replay_wal_sync(w) != 0) {
        rc = SAC_EIO;
      } else {
        scan->claimed = end;
      }
    }
  }
  if (rc) {
    if (rc == SAC_EIO)
      SAC_ERROR("replay", "cannot use the write-ahead log %s: %s", path, strerror(errno));
    sac_replay_wal_close(&w);
    return rc;
  }
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

/* One record (head + payload) at the end of the file, in one pwritev. */
static int append_raw(sac_replay_wal_t *w, unsigned char head[SAC_REPLAY_WAL_RECORD_HEAD],
                      const void *payload, size_t len) {
  sac_le_put32(head, (uint32_t)len);
  sac_le_put32(head + 4, record_crc(head, payload, len));
  struct iovec iov[2] = {{head, SAC_REPLAY_WAL_RECORD_HEAD}, {(void *)payload, len}};
  size_t want = SAC_REPLAY_WAL_RECORD_HEAD + len, done = 0;
  while (done < want) {
    ssize_t n = sac_durable_fault("write", w->path) ? -1 : pwritev(w->fd, iov, 2, (off_t)(w->bytes + done));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      int e = n < 0 ? errno : ENOSPC;
      SAC_ERROR_EVERY(10.0, "replay", "write-ahead log %s: write failed: %s", w->path, strerror(e));
      /* leave no partial record behind: the next append starts where this one did */
      if (ftruncate(w->fd, (off_t)w->bytes) != 0)
        SAC_ERROR_EVERY(10.0, "replay", "write-ahead log %s: cannot cut the partial record: %s", w->path,
                        strerror(errno));
      errno = e;
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

int sac_replay_wal_append(sac_replay_wal_t *w, const sac_replay_wal_rec_t *rec, const void *payload,
                          size_t len) {
  unsigned char head[SAC_REPLAY_WAL_RECORD_HEAD];
  sac_le_put32(head + 8, rec->actor);
  sac_le_put32(head + 12, rec->rows);
  sac_le_put64(head + 16, rec->session);
  sac_le_put64(head + 24, rec->seq);
  return append_raw(w, head, payload, len);
}

static int append_control(sac_replay_wal_t *w, uint32_t kind, uint64_t session, const void *payload,
                          size_t len) {
  unsigned char head[SAC_REPLAY_WAL_RECORD_HEAD];
  sac_le_put32(head + 8, kind);
  sac_le_put32(head + 12, 0);
  sac_le_put64(head + 16, session);
  sac_le_put64(head + 24, 0);
  return append_raw(w, head, payload, len);
}

int sac_replay_wal_append_forget(sac_replay_wal_t *w, uint32_t actor) {
  unsigned char p[8] = {0};
  sac_le_put32(p, actor);
  return append_control(w, SAC_REPLAY_WAL_FORGET, 0, p, sizeof p);
}

int sac_replay_wal_append_sync(sac_replay_wal_t *w, uint64_t synced_through) {
  unsigned char p[SYNC_PAYLOAD] = {0};
  sac_le_put64(p, synced_through);
  return append_control(w, SAC_REPLAY_WAL_SYNC, w->capacity, p, sizeof p);
}

int sac_replay_wal_sync(sac_replay_wal_t *w) {
  if (sac_replay_wal_sync_hook)
    sac_replay_wal_sync_hook(sac_replay_wal_sync_hook_arg);
  if (sac_durable_fault("fdatasync", w->path) || fdatasync(w->fd) != 0) {
    int e = errno;
    SAC_ERROR_EVERY(10.0, "replay", "write-ahead log %s: fdatasync failed: %s", w->path, strerror(e));
    errno = e;
    return SAC_EIO;
  }
  return 0;
}

int sac_replay_wal_reset(sac_replay_wal_t *w) {
  int rc = 0;
  if (w->version == 2) {
    if (sac_durable_fault("truncate", w->path) || ftruncate(w->fd, SAC_REPLAY_WAL_HEADER_BYTES) != 0 ||
        sac_durable_fault("fsync", w->path) || fsync(w->fd) != 0)
      rc = SAC_EIO;
    else
      w->bytes = SAC_REPLAY_WAL_HEADER_BYTES;
  } else if (sac_durable_fault("truncate", w->path) || ftruncate(w->fd, 0) != 0 || write_header(w) != 0) {
    /* a version 1 log starts over as version 2; a crash in between leaves an empty file
     * or a partial header, which open starts again (torn_new_header) */
    rc = SAC_EIO;
  }
  if (rc)
    SAC_ERROR("replay", "write-ahead log %s: cannot empty it: %s", w->path, strerror(errno));
  return rc;
}

uint64_t sac_replay_wal_bytes(const sac_replay_wal_t *w) { return w->bytes; }

uint64_t sac_replay_wal_header_bytes(const sac_replay_wal_t *w) { return w->header; }
