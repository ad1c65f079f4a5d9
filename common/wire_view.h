/* A SampleBatch read in place, and copied out of the message once. The learner's intake
 * (replay/client.c, sac_replay_client_sample_into): sac_wire_sample_view finds the
 * arrays of a sample reply inside the received bytes without copying them, and
 * sac_wire_sample_copy copies them to where the update reads them (the backend's stage)
 * checking them as it copies: finiteness, range, flags, weights and indices in the same
 * pass, with the same verdict and reason as sac_wire_decode (common/wire.h) gives the
 * same bytes (tests/test_wire.c compares the two on valid, spoilt and random replies).
 *
 * The view takes only the common encoding of a SampleBatch with rows (each field at most
 * once, no error string); anything else (an error reply, a repeated field, other
 * bodies, bytes that are not protobuf) it hands back as SAC_EAGAIN, and the caller
 * decodes it the ordinary way, which gives its reason. No allocation; any thread. */
#ifndef SAC_COMMON_WIRE_VIEW_H
#define SAC_COMMON_WIRE_VIEW_H
#include <stddef.h>
#include <stdint.h>

#include "common/wire.h"

/* The arrays point into the received bytes: little-endian, not necessarily aligned. */
typedef struct {
  uint64_t request_id;
  uint32_t n, obs_dim, act_dim, shard_id;
  uint32_t batches; /* 0 or 1: one batch; K > 1: K batches of n / K rows (n a multiple of K) */
  const unsigned char *obs, *action, *reward, *terminated, *next_obs, *indices, *weights;
} sac_wire_sample_view_t;

/* Reads buf[0..len) as an Envelope holding a SampleBatch of n > 0 rows and no error,
 * whose header passes lim (rows, dims; lim may be NULL: no limits) and whose arrays have
 * exactly the lengths its dimensions give. 0 (the arrays are not checked yet: see
 * sac_wire_sample_copy) or SAC_EAGAIN (anything else: decode it with sac_wire_decode). */
int sac_wire_sample_view(const void *buf, size_t len, const sac_wire_limits_t *lim,
                         sac_wire_sample_view_t *out);

/* Where the rows go: obs/next_obs (n, obs_dim), action (n, act_dim), reward, terminated,
 * weights (n) as f32, indices (n). A NULL array is checked and not copied. */
typedef struct {
  float *obs, *next_obs, *action, *reward, *terminated, *weights;
  uint64_t *indices;
} sac_wire_sample_dst_t;

/* Copies v's arrays into dst, checking them as sac_wire_decode checks a SampleBatch
 * against lim (finite values, |x| <= lim->max_abs_value, terminated 0 or 1, weights >= 0,
 * indices of shard v->shard_id). 0, or the code and *reason sac_wire_decode would give;
 * then dst holds a partial copy that the caller must not use. */
int sac_wire_sample_copy(const sac_wire_sample_view_t *v, const sac_wire_limits_t *lim,
                         const sac_wire_sample_dst_t *dst, sac_wire_reason_t *reason);

/* The writing side: a SampleBatch reply laid out so that its arrays can be written
 * straight into the message (the shard's gather, replay/server.c). The bytes equal what
 * sac_wire_encode gives the same batch (tests/test_wire_view.c). */
typedef struct {
  size_t len; /* bytes of the whole Envelope */
  /* where each array starts, in bytes from the Envelope's first */
  size_t obs, action, reward, terminated, next_obs, indices, weights;
} sac_wire_sample_layout_t;

/* The layout of a SampleBatch with hdr's request_id, n (> 0), obs_dim and act_dim (> 0),
 * shard_id, batches and precision (SAC_WIRE_F32: 4-byte obs, action and next_obs values; or
 * SAC_WIRE_F16: 2-byte) and no error; hdr's arrays are not read. 0, or SAC_EINVAL for a
 * header that has no such encoding. */
int sac_wire_sample_layout(const sac_wire_sample_batch_t *hdr, sac_wire_sample_layout_t *out);

/* Writes every byte of that encoding except the arrays' into buf (l->len bytes): the
 * caller writes the arrays at the layout's offsets, little-endian, and then buf holds the
 * message. Cannot fail. */
void sac_wire_sample_put_header(void *buf, const sac_wire_sample_batch_t *hdr,
                                const sac_wire_sample_layout_t *l);

#endif
