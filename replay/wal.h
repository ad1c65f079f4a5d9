/* A replay shard's write-ahead log: every batch the shard stores is appended here before
 * it is acknowledged, so an acknowledged batch survives a kill -9 of the shard (and,
 * once sac_replay_wal_sync has returned, a power cut). A snapshot makes the log's
 * records redundant and sac_replay_wal_reset empties it.
 *
 * File layout, all little-endian:
 *   header  16 bytes: "SACWAL1\0" | u32 version 1 | u32 shard id
 *   record  32-byte head | payload
 *           head: u32 payload bytes | u32 crc32c | u32 actor id | u32 rows |
 *                 u64 session | u64 seq
 *           crc32c covers the head's bytes 8..31, the payload, then the length field
 *           payload: the batch's wire message as it arrived (common/wire.h), so the
 *           record replays through the same validation as a live batch.
 * Records are only ever appended; a crash can leave a torn last record, and a disk can
 * corrupt one in the middle. Reading stops at the first record that is short, too long,
 * or fails its checksum. When no intact record follows it, it is a torn tail (what a
 * crash leaves): opening drops it (the file is truncated there). When an intact record
 * does follow, records that were fsynced and acknowledged would be lost with it:
 * opening refuses (SAC_ECHECKSUM) unless SAC_REPLAY_WAL_TRUNCATE_CORRUPT asks for the
 * cut, and then the damaged file is first copied aside to "<path>.corrupt-<unix time>".
 *
 * Replaying records a snapshot already holds is harmless: the shard recognises them as
 * duplicates by (actor, session, seq), so a crash between a snapshot's rename and the
 * log's truncation stores nothing twice (tests/test_replay_wal.c).
 *
 * Not thread-safe: the shard server's thread owns a log. */
#ifndef SAC_REPLAY_WAL_H
#define SAC_REPLAY_WAL_H
#include <stddef.h>
#include <stdint.h>

#define SAC_REPLAY_WAL_HEADER_BYTES 16u
#define SAC_REPLAY_WAL_RECORD_HEAD 32u
#define SAC_REPLAY_WAL_MAX_RECORD (1u << 30) /* payload bytes, like the largest wire message */

typedef struct {
  uint32_t actor, rows;
  uint64_t session, seq;
  uint64_t offset; /* where the record starts in the file (set when reading) */
} sac_replay_wal_rec_t;

/* Called once per intact record, in order. Returns 0 to go on, or a negative code to
 * stop: reading fails with that code and the file is left as it is. */
typedef int (*sac_replay_wal_apply_fn)(void *user, const sac_replay_wal_rec_t *rec,
                                       const unsigned char *payload, size_t len);

typedef struct {
  uint64_t records;       /* handed to apply */
  uint64_t valid_bytes;   /* file offset after the last intact record */
  uint64_t dropped_bytes; /* after it: a torn or corrupt tail */
  const char *why;        /* why the scan stopped early ("" when it read to the end) */
  uint64_t valid_after;   /* an intact record follows the bad one at valid_bytes: its offset (0: none,
                             a torn tail) */
} sac_replay_wal_scan_t;

/* Reads the log at path without changing it. max_payload is the expected largest record
 * payload: a longer one is still read, up to what the file holds and
 * SAC_REPLAY_WAL_MAX_RECORD (beyond that it counts as torn or corrupt). 0 (also when the
 * file does not exist: nothing read), SAC_EPROTO (not a shard log: bad header), SAC_EIO,
 * SAC_ENOMEM. */
int sac_replay_wal_scan(const char *path, size_t max_payload, sac_replay_wal_apply_fn apply, void *user,
                        sac_replay_wal_scan_t *out);

typedef struct sac_replay_wal sac_replay_wal_t;

#define SAC_REPLAY_WAL_TRUNCATE_CORRUPT 1u /* cut at a corrupt record even when intact ones follow */
#define SAC_REPLAY_WAL_ADOPT 2u            /* replay another shard's log (as adopt_snapshot) */

/* Opens (creating when missing) the log at path for shard_id: replays it through apply
 * as sac_replay_wal_scan does, truncates a torn tail, logs "wal: applied N records,
 * dropped M bytes", syncs the file and its directory (what was replayed may so far
 * exist only in the page cache of a process that died: it is durable before anything
 * is acknowledged on top of it), and positions at the end for appends. *out NULL on
 * error, the file unchanged: SAC_EPROTO (not a shard log), SAC_ESTATE (another shard's
 * log, without SAC_REPLAY_WAL_ADOPT), SAC_ECHECKSUM (a corrupt record with intact ones
 * after it, without SAC_REPLAY_WAL_TRUNCATE_CORRUPT), the apply callback's code, SAC_EIO,
 * SAC_ENOMEM. Each refusal is logged with the file, the offset and the reason. */
int sac_replay_wal_open(const char *path, uint32_t shard_id, size_t max_payload, unsigned flags,
                        sac_replay_wal_apply_fn apply, void *user, sac_replay_wal_t **out,
                        sac_replay_wal_scan_t *scan);
/* Closes the file (without syncing); idempotent, nulls *w. */
void sac_replay_wal_close(sac_replay_wal_t **w);

/* Appends one record (one write). 0, or SAC_EIO (nothing of it stays in the file). */
int sac_replay_wal_append(sac_replay_wal_t *w, const sac_replay_wal_rec_t *rec, const void *payload,
                          size_t len);
/* fdatasync: every record appended before it is on disk when it returns 0; SAC_EIO. */
int sac_replay_wal_sync(sac_replay_wal_t *w);
/* Empties the log (after a snapshot made its records redundant) and syncs. 0 or SAC_EIO. */
int sac_replay_wal_reset(sac_replay_wal_t *w);
/* Bytes in the log now (header included). */
uint64_t sac_replay_wal_bytes(const sac_replay_wal_t *w);

/* For tests: called at the start of every sac_replay_wal_sync (NULL: none). */
extern void (*sac_replay_wal_sync_hook)(void *arg);
extern void *sac_replay_wal_sync_hook_arg;

#endif
