/* The wire codec: every message of proto/sac.proto, encoded into a caller's buffer and
 * decoded-and-validated into plain C views. This is the one place where bytes from the
 * network become trusted data: a decoded message has the right protocol version, byte
 * lengths that match its declared dimensions, dimensions that match what the receiver
 * expects, finite floats where the protocol allows no others, flags that are 0 or 1,
 * row and env indices in range and internally consistent episode ends. Anything else
 * is rejected with a negative SAC_E* code AND a reason (sac_wire_reason_t) so a server
 * can count rejections per reason. It is not a transport (see common/net.h) and it
 * keeps no state between messages except a decoder's reusable memory.
 *
 * Tensors are little-endian on the wire; this codec is built for little-endian hosts
 * (a big-endian build fails at compile time rather than silently swapping).
 *
 * Decoding allocates nothing per message: a decoder owns an arena sized from the
 * maximum message size at creation and every view points into it, valid until the next
 * decode with the same decoder. Encoding writes into a caller buffer and allocates
 * nothing unless a message carries more than SAC_WIRE_STACK_REPEATED episode records
 * or layers (then one temporary array). A decoder or an encode call is used by one
 * thread at a time; different decoders are independent. */
#ifndef SAC_COMMON_WIRE_H
#define SAC_COMMON_WIRE_H
#include <stddef.h>
#include <stdint.h>

#define SAC_PROTOCOL_VERSION 1u

/* Index of a sampled transition, as carried in SampleBatch.indices and
 * PriorityUpdate.indices: shard (12 bits) | generation (20 bits) | slot (32 bits). The
 * generation lets a shard ignore an update to a slot that was overwritten since. */
#define SAC_WIRE_INDEX(shard, gen, slot)                                                                     \
  (((uint64_t)(shard)&0xFFFu) << 52 | ((uint64_t)(gen)&0xFFFFFu) << 32 | (uint64_t)(uint32_t)(slot))
#define SAC_WIRE_INDEX_SHARD(i) ((uint32_t)((i) >> 52) & 0xFFFu)
#define SAC_WIRE_INDEX_GEN(i) ((uint32_t)((i) >> 32) & 0xFFFFFu)
#define SAC_WIRE_INDEX_SLOT(i) ((uint32_t)(i))
#define SAC_WIRE_MAX_SHARDS 4096u

#define SAC_WIRE_STACK_REPEATED 64

/* Why a message was rejected. One counter per reason in every server. */
#define SAC_WIRE_REASON_MAP(X)                                                                               \
  X(NONE, "none")                                                                                            \
  X(TOO_BIG, "message larger than the maximum message size")                                                 \
  X(MALFORMED, "not a decodable protobuf Envelope (random or truncated bytes)")                              \
  X(VERSION, "wrong protocol version")                                                                       \
  X(NO_BODY, "envelope without a body")                                                                      \
  X(UNEXPECTED, "message type not accepted on this endpoint")                                                \
  X(DIMS, "dimensions differ from the receiver's")                                                           \
  X(LENGTH, "byte length does not match the declared dimensions")                                            \
  X(NONFINITE, "NaN or Inf where only finite values are allowed")                                            \
  X(ROWS, "row count zero or over the limit")                                                                \
  X(FLAG, "flag byte other than 0 or 1")                                                                     \
  X(ENV_ID, "env id out of range")                                                                           \
  X(EPISODE_ENDS, "next_obs rows do not match the terminated/truncated rows")                                \
  X(TAIL, "tail observations missing, duplicated or for an env not in the batch")                            \
  X(INDEX, "sample index for another shard or out of range")                                                 \
  X(VALUE, "field value out of range")                                                                       \
  X(FRAMES, "wrong number of message frames")                                                                \
  X(WINDOW, "sequence number beyond the dedup window or zero")                                               \
  X(SESSION, "batch of a superseded client session (a newer client with this actor id has sent)")            \
  X(BUSY, "shard busy: its queue of held inserts is full; resend later")                                     \
  X(RANGE, "value outside the receiver's configured finite range")                                           \
  X(SEQUENCE, "sequence fields inconsistent (acked_through not below seq, or a jump beyond the allowed)")    \
  X(ACTORS, "too many actors tracked and none idle long enough to forget")

typedef enum {
#define SAC__WIRE_REASON_ENUM(name, msg) SAC_WIRE_R_##name,
  SAC_WIRE_REASON_MAP(SAC__WIRE_REASON_ENUM)
#undef SAC__WIRE_REASON_ENUM
      SAC_WIRE_R_COUNT
} sac_wire_reason_t;

/* Text for a reason, never NULL. */
const char *sac_wire_reason_str(sac_wire_reason_t r);
/* Short snake_case name for metrics labels ("too_big"), never NULL. */
const char *sac_wire_reason_name(sac_wire_reason_t r);

typedef enum {
  SAC_WIRE_NONE = 0,
  SAC_WIRE_TRANSITIONS = 10,
  SAC_WIRE_ACK = 11,
  SAC_WIRE_SAMPLE_REQUEST = 12,
  SAC_WIRE_SAMPLE_BATCH = 13,
  SAC_WIRE_PRIORITY_UPDATE = 14,
  SAC_WIRE_WEIGHTS = 15,
  SAC_WIRE_HELLO = 16,
  SAC_WIRE_HEARTBEAT = 17,
  SAC_WIRE_SHARD_INFO = 18,
  SAC_WIRE_LEARNER_INFO = 19,
  SAC_WIRE_INFO_REQUEST = 20,
} sac_wire_type_t;

typedef struct {
  uint32_t env_id;
  float episode_return;
  uint32_t length;
  int truncated;
} sac_wire_episode_t;

/* A batch of transitions (actor -> shard). Rows are in time order per env; row i
 * belongs to env_ids[i]. next_obs is given for the rows whose episode ended
 * (next_obs_rows, strictly increasing, exactly the rows with terminated or truncated
 * set); for any other row it is the obs of the same env's next row, or for the env's
 * last row in the batch, that env's tail obs (tail_env_ids/tail_obs: one per env whose
 * last row in the batch did not end an episode; extra tails for ended envs are allowed
 * and ignored by the shard). Shapes: obs (n, obs_dim), action (n, act_dim), reward (n),
 * terminated/truncated (n) bytes 0/1, next_obs (n_next, obs_dim), tail_obs (n_tail,
 * obs_dim). */
typedef struct {
  uint32_t actor_id;
  uint64_t seq;           /* per (actor, shard), from 1 */
  uint64_t session;       /* random per client instance */
  uint64_t acked_through; /* every seq <= this was acked to the sender */
  uint64_t policy_version;
  uint32_t n, obs_dim, act_dim;
  const uint32_t *env_ids;
  const float *obs;
  const float *action;
  const float *reward;
  const uint8_t *terminated;
  const uint8_t *truncated;
  uint32_t n_next;
  const uint32_t *next_obs_rows;
  const float *next_obs;
  uint32_t n_tail;
  const uint32_t *tail_env_ids;
  const float *tail_obs;
  uint32_t n_episodes;
  const sac_wire_episode_t *episodes;
} sac_wire_transitions_t;

typedef struct {
  uint64_t acked_seq; /* cumulative: every seq <= acked_seq is stored */
  uint64_t seq;       /* the batch this ack answers */
  uint32_t credit;    /* batches the sender may have unacknowledged */
  uint32_t stored;
  uint32_t shard_id;
  int duplicate;
  const char *error;       /* "" when accepted */
  uint32_t status;         /* SAC_WIRE_ACK_* (0 from a shard that predates the field) */
  uint32_t retry_after_ms; /* SAC_WIRE_ACK_NOT_DURABLE: resend no earlier than this */
} sac_wire_ack_t;

/* InsertAck.status. NOT_DURABLE: the shard cannot make data durable now (its disk is
 * full, its log failed a write or an fsync); nothing of the batch is stored, and the
 * sender keeps it and resends it after retry_after_ms (docs/RELIABILITY.md). */
#define SAC_WIRE_ACK_OK 0u
#define SAC_WIRE_ACK_NOT_DURABLE 1u
#define SAC_WIRE_NOT_DURABLE_ERROR                                                                           \
  "shard cannot make data durable (disk full or I/O error): not stored, resend later"

/* precision: SAC_WIRE_F32 (0) or SAC_WIRE_F16, the dtype asked for the reply's obs,
 * action and next_obs (any other value is refused with SAC_WIRE_R_VALUE). */
typedef struct {
  uint64_t request_id;
  uint32_t batch_size;
  float beta;
  uint32_t timeout_ms;
  uint32_t precision;
  uint32_t batches; /* 0 or 1: one batch; K > 1: K batches of batch_size rows in one reply */
} sac_wire_sample_request_t;

/* obs/next_obs (n, obs_dim), action (n, act_dim), reward/terminated/weights (n) f32,
 * indices (n) u64 (SAC_WIRE_INDEX). n == 0 with a non-empty error means no batch.
 * precision SAC_WIRE_F16: obs/action/next_obs are NULL and obs16/action16/next_obs16
 * hold the same shapes in IEEE binary16 (finite halves only); rewards, flags, weights
 * and indices stay as they are. */
typedef struct {
  uint64_t request_id;
  uint32_t n, obs_dim, act_dim, shard_id;
  const float *obs;
  const float *action;
  const float *reward;
  const float *terminated;
  const float *next_obs;
  const uint64_t *indices;
  const float *weights;
  const char *error;
  uint32_t precision; /* SAC_WIRE_F32 (0) or SAC_WIRE_F16 */
  const uint16_t *obs16, *action16, *next_obs16;
  /* 0 or 1: the n rows are one batch; K > 1: K batches of n / K rows one after another,
   * each sampled on its own (n a multiple of K, else SAC_WIRE_R_ROWS) */
  uint32_t batches;
} sac_wire_sample_batch_t;

typedef struct {
  uint32_t n;
  const uint64_t *indices;
  const float *priorities; /* finite, >= 0 */
} sac_wire_priority_update_t;

typedef struct {
  uint32_t n_in, n_out, activation; /* 0 identity, 1 relu, 2 tanh */
} sac_wire_layer_t;

typedef enum { SAC_WIRE_F32 = 0, SAC_WIRE_F16 = 1, SAC_WIRE_BF16 = 2, SAC_WIRE_I8 = 3 } sac_wire_dtype_t;

/* data: per layer W (n_in x n_out, row-major) then b (n_out), in dtype. */
typedef struct {
  uint64_t version;
  sac_wire_dtype_t dtype;
  uint32_t n_layers;
  const sac_wire_layer_t *layers;
  const void *data;
  size_t data_len;
  float scale; /* int8 only: finite and > 0 */
  /* the run's budget (proto/sac.proto): total steps (0: not said), steps the shards held
   * at the learner's last count, the actors they know, and run_over once the learner stopped */
  uint64_t run_total_steps, run_steps;
  uint32_t run_actors;
  int run_over;
} sac_wire_weights_t;

typedef struct {
  const char *role; /* "actor", "learner", "replay" */
  uint32_t id;
  uint64_t pid;
  const char *version;
} sac_wire_hello_t;

typedef struct {
  uint32_t shard_id;
  uint64_t size, capacity, inserted_total, sampled_total;
  uint32_t obs_dim, act_dim;
  int can_sample;
  uint64_t snapshot_inserted_total, snapshots_total;
  double bytes_per_transition;
  uint64_t rejected_total, duplicates_total;
  /* episodes ended in the batches this shard process stored, and their returns' sum
   * (restart at 0 with a new incarnation); min_size; actors that sent a batch in the last 10 s */
  uint64_t episodes_total;
  double episode_return_sum;
  uint64_t incarnation, min_size;
  uint32_t actors;
} sac_wire_shard_info_t;

typedef struct {
  uint32_t rank, world;
  uint64_t policy_version, updates;
} sac_wire_learner_info_t;

/* One decoded (or to-be-encoded) message. */
typedef struct {
  sac_wire_type_t type;
  union {
    sac_wire_transitions_t transitions;
    sac_wire_ack_t ack;
    sac_wire_sample_request_t sample_request;
    sac_wire_sample_batch_t sample_batch;
    sac_wire_priority_update_t priority_update;
    sac_wire_weights_t weights;
    sac_wire_hello_t hello;
    uint64_t heartbeat_time_ns;
    sac_wire_shard_info_t shard_info;
    sac_wire_learner_info_t learner_info;
  } u;
} sac_wire_msg_t;

/* What the receiver expects. Zero in a dimension field means "any". */
typedef struct {
  size_t max_msg_bytes;      /* whole encoded message; 0: SAC_WIRE_DEFAULT_MAX_MSG */
  uint32_t obs_dim, act_dim; /* transitions / sample batches must match (0: any) */
  uint32_t max_rows;         /* rows per transition batch, sample batch or update (0: 65536) */
  uint32_t max_env_id;       /* env ids must be < this (0: 1 << 20) */
  uint32_t max_layers;       /* weights (0: 64) */
  uint32_t max_layer_dim;    /* weights (0: 65536) */
  uint32_t accept_mask;      /* bit (1u << type) for each accepted type; 0: all */
  float max_abs_value;       /* transitions / sample batches: |obs|, |action|, |reward| <= this,
                                else SAC_WIRE_R_RANGE (0: only finiteness is checked) */
} sac_wire_limits_t;

#define SAC_WIRE_DEFAULT_MAX_MSG (4u << 20)
#define SAC_WIRE_ACCEPT(t) (1u << ((unsigned)(t)&31u))

typedef struct sac_wire_decoder sac_wire_decoder_t;

/* A decoder able to hold any message of up to max_msg_bytes (0: the default). Returns
 * NULL when out of memory. */
sac_wire_decoder_t *sac_wire_decoder_new(size_t max_msg_bytes);
/* Frees the decoder and every view it handed out; idempotent, nulls *d. */
void sac_wire_decoder_destroy(sac_wire_decoder_t **d);

/* Decodes and validates buf[0..len) against lim. On success returns 0 and fills *out
 * (views into the decoder, valid until its next decode). On failure returns a negative
 * SAC_E* code (SAC_ETOOBIG, SAC_EPROTO, SAC_EVERSION, SAC_EINVAL, SAC_ENONFINITE),
 * sets *reason (never SAC_WIRE_R_NONE), and *out is unusable. Never crashes on any
 * input, never reads outside buf. */
int sac_wire_decode(sac_wire_decoder_t *d, const void *buf, size_t len, const sac_wire_limits_t *lim,
                    sac_wire_msg_t *out, sac_wire_reason_t *reason);

/* Checks a view the way sac_wire_decode checks a decoded message (the encoder's side of
 * the same rules: a sender can validate before sending). Returns 0 or as decode. The
 * transitions check needs scratch memory for n rows: it uses the decoder's. */
int sac_wire_validate(sac_wire_decoder_t *d, const sac_wire_msg_t *m, const sac_wire_limits_t *lim,
                      sac_wire_reason_t *reason);

/* Size of m once encoded (protocol version included). */
size_t sac_wire_encoded_size(const sac_wire_msg_t *m);
/* Encodes m into buf[0..cap). Returns 0 and sets *len, SAC_ETOOBIG when cap is too small
 * (buf untouched), SAC_EINVAL for an unknown type or inconsistent view, SAC_ENOMEM. */
int sac_wire_encode(const sac_wire_msg_t *m, void *buf, size_t cap, size_t *len);

/* float32 <-> IEEE binary16 (round to nearest even; overflow saturates to +-65504 when
 * saturate is set, else becomes Inf). Exposed for storage and tests. */
uint16_t sac_wire_f32_to_f16(float f, int saturate);
float sac_wire_f16_to_f32(uint16_t h);

/* The same over arrays, with the CPU's conversion instructions where it has them (x86
 * F16C; bit-identical to the scalar functions). to_f16_n saturates: a value with
 * |x| > 65504 becomes +-65504 and is counted in the return value (NaN stays NaN). */
size_t sac_wire_f32_to_f16_n(const float *in, size_t n, uint16_t *out);
void sac_wire_f16_to_f32_n(const uint16_t *in, size_t n, float *out);

#endif
