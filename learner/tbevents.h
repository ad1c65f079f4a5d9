/* TensorBoard event files, written in C: a run directory gets
 * events.out.tfevents.<unix time>.<host>, the file TensorBoard (and tbparse, SB3 and
 * CleanRL users' tools) reads, with scalar summaries under the environment step. The
 * format is TFRecord framing (u64 length, masked CRC32C of the length, the bytes, masked
 * CRC32C of the bytes, little endian) around protobuf Event messages (proto/tensorboard.proto,
 * encoded by protobuf-c); the first record carries file_version "brain.Event:2". Every
 * call that writes hands its record to the kernel at once (write(2)), so a reader sees
 * each event within the period the caller writes at; a failed write leaves no partial
 * record behind (cut off again). One writer per file; not thread-safe. */
#ifndef SAC_LEARNER_TBEVENTS_H
#define SAC_LEARNER_TBEVENTS_H
#include <stddef.h>
#include <stdint.h>

typedef struct sac_tb sac_tb_t;

/* Creates dir/events.out.tfevents.<time>.<host>[.<pid> if that exists] (a new file: a resumed run adds one,
 * TensorBoard merges the files of a folder) and writes the version record. 0, SAC_EIO
 * (logged), SAC_ENOMEM. */
int sac_tb_open(const char *dir, sac_tb_t **out);
/* One Event at step holding n scalar values tags[i] = values[i], written at once. 0, or
 * SAC_EIO with errno saying why (not logged: the caller counts and logs it; later events
 * are still tried, unless a partial record could not be cut off, which is logged once),
 * SAC_EINVAL (more than 32 values), SAC_ENOMEM. */
int sac_tb_scalars(sac_tb_t *tb, int64_t step, size_t n, const char *const *tags, const float *values);
/* The file's path. */
const char *sac_tb_path(const sac_tb_t *tb);
/* Closes and NULLs *tb; idempotent. */
void sac_tb_close(sac_tb_t **tb);
/* TFRecord's masked CRC32C: rotate right by 15, add 0xa282ead8. For tests. */
uint32_t sac_tb_masked_crc(const void *data, size_t len);

#endif
