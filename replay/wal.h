/* A replay shard's write-ahead log: every batch the shard stores is appended here before
 * it is acknowledged, so an acknowledged batch survives a kill -9 of the shard (and,
 * once sac_replay_wal_sync has returned, a power cut). A snapshot makes the log's
 * records redundant and sac_replay_wal_reset empties it.
 *
 * File layout, all little-endian:
 *   header  32 bytes (version 2): "SACWAL1\0" | u32 version 2 | u32 shard id |
 *           u64 ring capacity of the shard that created it | u32 crc32c(bytes 0..23) | u32 0
 *           (version 1, written by older shards and still read: 16 bytes, the first three fields)
 *   record  32-byte head | payload
 *           head: u32 payload bytes | u32 crc32c | u32 actor id | u32 rows |
 *                 u64 session | u64 seq
 *           crc32c covers the head's bytes 8..31, the payload, then the length field
 *   batch   seq >= 1; payload: the batch's wire message as it arrived (common/wire.h), so
 *           the record replays through the same validation as a live batch
 *   control seq 0 (no batch has it), rows 0, actor = the kind:
 *           SYNC   (1) payload u64 synced_through | u64 0; session = the ring capacity of
 *                  the shard that wrote it. Appended just before an fsync is asked for; it
 *                  says that a fsync which had COMPLETED covered every record ending at or
 *                  before byte synced_through (so those may have been acknowledged).
 *           FORGET (2) payload u32 actor | u32 0: the shard forgot that idle actor (its
 *                  dedup window) to make room for a new one; replay forgets it at the same
 *                  point, so the actor table is rebuilt as it was.
 *
 * What was acknowledged, and the torn-tail rule. A crash can leave damage at the end of
 * the log: a torn record, zeros (pages the kernel had not written back), a record whose
 * checksum fails (a page of it written, another not); a power cut can leave intact
 * records after such damage (pages written back out of order). None of that was ever
 * acknowledged if no completed fsync covered it. The sync records say which fsyncs
 * completed: damage at byte B is corruption of acknowledged records when an intact SYNC
 * record anywhere after B (the rest of the file is searched, whatever its size) claims
 * synced_through > B; then opening refuses (SAC_ECHECKSUM) unless
 * SAC_REPLAY_WAL_TRUNCATE_CORRUPT asks for the cut (the damaged file is first copied aside
 * to "<path>.corrupt-<unix time>"). Otherwise it is a power-cut tail: opening drops it
 * (the file is truncated at B) and says so with the bytes dropped and what they were.
 * The one case the records cannot settle is damage inside the last group whose fsync
 * completed before any later SYNC record reached the disk: the shard writes a SYNC record
 * (and syncs it) within CLOSE_MS of going idle after every fsync, so that case needs
 * the disk to corrupt data within milliseconds of a completed fsync; it is read as a torn
 * tail. A version 1 log, which has no sync records, keeps the older rule: corruption when
 * an intact record follows the damage within 64 MiB.
 *
 * Replaying records a snapshot already holds is harmless: the shard recognises them as
 * duplicates by (actor, session, seq), so a crash between a snapshot's rename and the
 * log's truncation stores nothing twice (tests/test_replay_wal.c).
 *
 * Not thread-safe: the shard server's thread owns a log (sac_replay_wal_sync may run on
 * another thread while the owner appends: fdatasync covers what was written before it). */
#ifndef SAC_REPLAY_WAL_H
#define SAC_REPLAY_WAL_H
#include <stddef.h>
#include <stdint.h>

#define SAC_REPLAY_WAL_HEADER_BYTES 32u /* version 2 */
#define SAC_REPLAY_WAL_HEADER_V1 16u
#define SAC_REPLAY_WAL_RECORD_HEAD 32u
#define SAC_REPLAY_WAL_MAX_RECORD (1u << 30) /* payload bytes, like the largest wire message */

#define SAC_REPLAY_WAL_BATCH 0u  /* a stored batch */
#define SAC_REPLAY_WAL_SYNC 1u   /* a completed fsync's coverage (read by the log itself) */
#define SAC_REPLAY_WAL_FORGET 2u /* an idle actor forgotten (rec.actor) */
#define SAC_REPLAY_WAL_END 3u    /* apply's last call (no record): see sac_replay_wal_apply_fn */

typedef struct {
  uint32_t actor, rows;
  uint64_t session, seq;
  uint64_t offset; /* where the record starts in the file (set when reading) */
  uint32_t kind;   /* SAC_REPLAY_WAL_BATCH or SAC_REPLAY_WAL_FORGET (set when reading) */
} sac_replay_wal_rec_t;

/* Called once per intact batch or forget record, in order, and by sac_replay_wal_open
 * once more after the last one with rec.kind SAC_REPLAY_WAL_END (payload NULL;
 * rec.session: the largest ring capacity the log names, 0 when it names none; rec.offset:
 * where the replay ended), before anything in the file changes. Returns 0 to go on, or a
 * negative code to stop: reading fails with that code and the file is left as it is. */
typedef int (*sac_replay_wal_apply_fn)(void *user, const sac_replay_wal_rec_t *rec,
                                       const unsigned char *payload, size_t len);

typedef struct {
  uint64_t records;       /* handed to apply */
  uint64_t syncs;         /* SYNC records read */
  uint64_t valid_bytes;   /* file offset after the last intact record */
  uint64_t dropped_bytes; /* after it: a torn or corrupt tail */
  const char *why;        /* what stopped the scan ("" when it read to the end) */
  char detail[192];       /* the same with the sizes and offsets ("" when it read to the end) */
  uint64_t valid_after;   /* version 1: an intact record follows the bad one at valid_bytes: its offset */
  uint32_t version;       /* of the file (0: empty or missing) */
  uint64_t capacity;      /* largest ring capacity the log's header and SYNC records name (0: none) */
  uint64_t acked_bytes;   /* the largest synced_through read before the damage */
  uint64_t claim_after;   /* the largest synced_through of an intact SYNC record after the damage */
  uint64_t claim_at;      /* where that record starts */
  int corrupt;            /* the damage holds records a completed fsync covered */
  uint64_t claimed;       /* sac_replay_wal_open: what the log's SYNC records claim once it is open */
} sac_replay_wal_scan_t;

/* Reads the log at path without changing it. max_payload is the expected largest record
 * payload: a longer one is still read, up to what the file holds and
 * SAC_REPLAY_WAL_MAX_RECORD (beyond that it counts as torn or corrupt). 0 (also when the
 * file does not exist: nothing read), SAC_EPROTO (not a shard log: bad header), SAC_EIO,
 * SAC_ENOMEM. */
int sac_replay_wal_scan(const char *path, size_t max_payload, sac_replay_wal_apply_fn apply, void *user,
                        sac_replay_wal_scan_t *out);

typedef struct sac_replay_wal sac_replay_wal_t;

#define SAC_REPLAY_WAL_TRUNCATE_CORRUPT 1u /* cut at corruption even when acknowledged records are lost */
#define SAC_REPLAY_WAL_ADOPT 2u            /* replay another shard's log (as adopt_snapshot) */

/* Opens (creating when missing, or when a crash while creating it left no more than a
 * partial header) the log at path for shard_id, whose ring holds capacity slots: replays
 * it through apply as sac_replay_wal_scan does, truncates a power-cut tail, logs "wal:
 * applied N records, dropped M bytes[: what]", syncs the file and its directory (what
 * was replayed may so far exist only in the page cache of a process that died: it is
 * durable before anything is acknowledged on top of it), appends a SYNC record saying
 * so (duplicates of replayed batches are acknowledged from now on), and positions at the
 * end for appends. *out NULL on error, the file unchanged: SAC_EPROTO (not a shard
 * log), SAC_ESTATE (another shard's log, without SAC_REPLAY_WAL_ADOPT), SAC_ECHECKSUM
 * (acknowledged records damaged, without SAC_REPLAY_WAL_TRUNCATE_CORRUPT), the apply
 * callback's code, SAC_EIO, SAC_ENOMEM. Each refusal is logged with the file, the offset
 * and the reason. */
int sac_replay_wal_open(const char *path, uint32_t shard_id, uint64_t capacity, size_t max_payload,
                        unsigned flags, sac_replay_wal_apply_fn apply, void *user, sac_replay_wal_t **out,
                        sac_replay_wal_scan_t *scan);
/* Closes the file (without syncing); idempotent, nulls *w. */
void sac_replay_wal_close(sac_replay_wal_t **w);

/* Appends one batch record (one write). 0, or SAC_EIO with errno set (nothing of it stays
 * in the file; ENOSPC/EDQUOT: the disk is full). */
int sac_replay_wal_append(sac_replay_wal_t *w, const sac_replay_wal_rec_t *rec, const void *payload,
                          size_t len);
/* Appends a FORGET record for actor. 0 or SAC_EIO, as append. */
int sac_replay_wal_append_forget(sac_replay_wal_t *w, uint32_t actor);
/* Appends a SYNC record: a completed fsync covered every record ending at or before byte
 * synced_through. The caller appends it just before asking for the next fsync. 0 or
 * SAC_EIO, as append. */
int sac_replay_wal_append_sync(sac_replay_wal_t *w, uint64_t synced_through);
/* fdatasync: every record appended before it is on disk when it returns 0; SAC_EIO
 * (errno set). After a failure the kernel may have dropped the unsynced pages and will
 * not say so again: the caller must not trust a later success (see server.h). */
int sac_replay_wal_sync(sac_replay_wal_t *w);
/* Empties the log (after a snapshot made its records redundant) and syncs; a version 1
 * log becomes a version 2 one. 0 or SAC_EIO. */
int sac_replay_wal_reset(sac_replay_wal_t *w);
/* Bytes in the log now (header included). */
uint64_t sac_replay_wal_bytes(const sac_replay_wal_t *w);
/* The size of its header (where records start). */
uint64_t sac_replay_wal_header_bytes(const sac_replay_wal_t *w);

/* For tests: called at the start of every sac_replay_wal_sync (NULL: none). */
extern void (*sac_replay_wal_sync_hook)(void *arg);
extern void *sac_replay_wal_sync_hook_arg;

#endif
