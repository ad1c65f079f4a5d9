/* Snapshot files: written atomically and read back only when intact. A writer streams
 * a payload into "<path>.tmp.<pid>-<random>" (holding an flock on it while it writes),
 * then appends a trailer, fsyncs the file, renames
 * it over <path> and fsyncs the directory, so <path> is always either the previous
 * complete snapshot or the new one. A reader first checks the whole file (magic,
 * format version, declared length against the real length, CRC-32C of header and
 * payload) and only then hands out the payload, so a truncated or corrupt file is
 * refused with a clear error and never loaded as garbage.
 *
 * Layout (little-endian):
 *   header  64 bytes: "SACSNAP\0" | u32 format | u32 header bytes (64) | u64 payload bytes
 *                     | u64 created (unix ns) | u32 kind | u32 reserved | 16 bytes zero
 *                     | u32 crc32c(header bytes 0..59)
 *   payload           payload bytes, written by the owner (the shard)
 *   trailer 16 bytes: u32 crc32c(payload) | u32 0 | "SNAPEND\0"
 * What the payload holds is the owner's business (replay/shard.c documents its own).
 * Not thread-safe per writer/reader; allocates nothing. */
#ifndef SAC_REPLAY_SNAPSHOT_H
#define SAC_REPLAY_SNAPSHOT_H
#include <stddef.h>
#include <stdint.h>

#define SAC_SNAP_FORMAT 1u
#define SAC_SNAP_KIND_REPLAY 1u
#define SAC_SNAP_KIND_CHECKPOINT 2u

uint32_t sac_crc32c(uint32_t crc, const void *data, size_t len);

typedef struct {
  int fd;
  uint32_t crc;
  uint64_t bytes;
  uint32_t kind;
  char path[4096];
  char tmp[4200];
} sac_snap_writer_t;

/* Creates the temporary file. 0 or SAC_EIO (logged). */
int sac_snap_writer_open(sac_snap_writer_t *w, const char *path, uint32_t kind);
/* Appends payload bytes. 0 or SAC_EIO. */
int sac_snap_write(sac_snap_writer_t *w, const void *data, size_t len);
/* Trailer, fsync, rename, directory fsync. 0 or SAC_EIO. On an error before the rename
 * the temporary file is removed and the previous snapshot is untouched; when only the
 * directory fsync fails (or the directory cannot be opened) the new snapshot is in
 * place but may not survive a power cut: SAC_EIO too, so nothing that it would make
 * redundant (a write-ahead log) is dropped. */
int sac_snap_writer_commit(sac_snap_writer_t *w);
/* Removes the temporary file. Idempotent. */
void sac_snap_writer_abort(sac_snap_writer_t *w);

/* What an owner does once before its first snapshot at path, holding the lock that makes
 * it the path's only writer: refuses a path that exists and is not a regular file (a
 * directory, FIFO, device: SAC_EINVAL, logged), checks that the folder takes new files by
 * creating and removing one (SAC_EIO, logged; a full disk is only warned about: the
 * shard must still start and serve there), and removes the "<path>.tmp.*" files that a
 * writer killed mid-snapshot left behind: only those of this exact path that no writer
 * holds an flock on (a live writer holds one, in whatever PID namespace it runs) and
 * whose name does not carry the pid of another live process. *removed (may be NULL) gets
 * how many were removed. */
int sac_snap_prepare(const char *path, uint64_t *removed);

typedef struct {
  int fd;
  uint64_t payload_bytes, read_bytes;
  uint64_t created_ns;
  uint32_t kind;
} sac_snap_reader_t;

/* Opens and fully verifies path. 0; SAC_ENOTFOUND (no file); SAC_EINVAL (not a regular
 * file: never read, so a FIFO cannot block); SAC_EVERSION (another format); SAC_EIO
 * (truncated or unreadable); SAC_ECHECKSUM (corrupt). Each failure is
 * logged with the path and what was wrong. */
int sac_snap_reader_open(sac_snap_reader_t *r, const char *path, uint32_t kind);
/* Reads the next len payload bytes. 0 or SAC_EIO (past the payload, or a read error). */
int sac_snap_read(sac_snap_reader_t *r, void *data, size_t len);
void sac_snap_reader_close(sac_snap_reader_t *r);

#endif
