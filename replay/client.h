/* The replay client library, used by actors (inserting) and learners (sampling and
 * updating priorities). It talks to S shards over DEALER sockets and hides ZeroMQ.
 *
 * Actor side: sac_replay_client_insert() encodes a batch once into a window slot of the
 * chosen shard and sends it. Each shard has a bounded window of unacknowledged batches
 * (min(window, the credit of the shard's last ack), at least 1; 1 until its first ack); a full window makes
 * insert wait for acks, up to its timeout, so a slow learner slows the actors (backpressure) and memory stays
 * bounded. Unacknowledged batches are resent after a reconnect and after resend_ms without an ack; the shard
 * drops duplicates by (actor, session, seq).
 *
 * Learner side: sac_replay_client_sample() keeps `prefetch` sample requests in flight
 * per shard and returns whichever batch arrives first (fair across shards), sending a
 * replacement request at once, so the learner rarely waits. Requests lost to a dead
 * shard are reissued after their timeout. sac_replay_client_update_priorities() splits
 * updates by the shard id inside each index and sends each shard its part.
 *
 * Not thread-safe: one client per thread. Allocates at creation; afterwards only when a
 * batch larger than any before it needs a bigger window slot. */
#ifndef SAC_REPLAY_CLIENT_H
#define SAC_REPLAY_CLIENT_H
#include <stddef.h>
#include <stdint.h>

#include "common/net.h"
#include "common/wire.h"

/* One acknowledged batch: the shard that acknowledged it (its --shard_id, from the ack)
 * and the batch's key there. seq counts per shard connection, from 1. */
typedef struct sac_replay_acked {
  uint32_t shard_id, actor_id, rows;
  uint64_t session, seq;
} sac_replay_acked_t;

typedef struct {
  size_t n_shards;
  const char *const *insert_endpoints; /* n_shards, or NULL for a sampling-only client */
  const char *const *sample_endpoints; /* n_shards, or NULL for an inserting-only client */
  sac_net_ctx_t *ctx;                  /* shared context, or NULL for the client's own */
  uint32_t actor_id;
  uint32_t window;     /* unacked batches per shard (1..64), default 16 */
  uint32_t resend_ms;  /* resend unacked batches older than this, default 2000 */
  uint32_t prefetch;   /* sample requests in flight per shard, default 2 */
  uint32_t batch_size; /* rows per sample request, default 256 */
  /* batches of batch_size rows asked for in one request (1..64, default 1): a reply then
   * carries that many batches, each sampled on its own by the shard, and sample returns
   * them one per call (fewer messages, and their fixed costs, per batch). A shard that
   * predates the option answers one batch (counted in sample_single_batch_replies). */
  uint32_t batches_per_request;
  float beta;                 /* importance-sampling exponent sent with requests, default 0.4 */
  uint32_t sample_timeout_ms; /* how long a shard may hold a request, default 1000 */
  /* SAC_WIRE_F32 (default) or SAC_WIRE_F16: the dtype asked for the obs, action and
   * next_obs of sample replies (half the bytes); fp16 replies are converted back to f32
   * on arrival, so a sampled batch is f32 either way. A shard that predates the option
   * replies f32 (counted in sample_precision_fallbacks, logged once per shard). */
  uint32_t sample_precision;
  size_t max_msg_bytes;      /* default 4 MiB */
  uint32_t obs_dim, act_dim; /* expected in sample batches (0: any) */
  uint64_t session;          /* 0: from the start time (increasing across restarts) */
  /* Called (on the client's thread) when a batch is acknowledged, with the seconds from
   * its first send to the acknowledgement; NULL: none. */
  void (*on_ack)(void *arg, double seconds);
  void *on_ack_arg;
  /* Called (on the client's thread) once per batch the shard acknowledged as stored (not
   * for batches it refused), with what identifies the batch in the shard's provenance
   * index: an actor's ledger of acknowledged batches (actor/ledger.h); NULL: none. */
  void (*on_acked)(void *arg, const sac_replay_acked_t *b);
  void *on_acked_arg;
} sac_replay_client_config_t;

void sac_replay_client_config_default(sac_replay_client_config_t *c);

typedef struct sac_replay_client sac_replay_client_t;

/* Connects to every endpoint (asynchronously: shards may start later). NULL on failure
 * (logged). */
sac_replay_client_t *sac_replay_client_new(const sac_replay_client_config_t *cfg);
/* Closes sockets without waiting for unacknowledged batches (call flush first to keep
 * them); idempotent, nulls *c. */
void sac_replay_client_destroy(sac_replay_client_t **c);

/* ---- actor side ---- */

/* Sends batch t to shard (or round-robin when shard < 0). The client fills in
 * actor_id, seq, session and acked_through; the rest of t is the caller's and is copied
 * (encoded) before return. Waits up to timeout_ms for room in the shard's window.
 * Returns 0 (sent or queued for sending), SAC_ETIMEOUT (window still full: nothing was
 * sent, try again), SAC_EINVAL (a batch that fails validation, with a log line),
 * SAC_ETOOBIG, SAC_ENOMEM. */
int sac_replay_client_insert(sac_replay_client_t *c, int shard, const sac_wire_transitions_t *t,
                             int timeout_ms);
/* Processes acks, reconnects and resends without blocking longer than timeout_ms. */
int sac_replay_client_poll(sac_replay_client_t *c, int timeout_ms);
/* Waits until every batch was acknowledged; 0 or SAC_ETIMEOUT. */
int sac_replay_client_flush(sac_replay_client_t *c, int timeout_ms);
/* Batches sent and not yet acknowledged, over all shards. */
uint32_t sac_replay_client_unacked(const sac_replay_client_t *c);
/* Their transitions (rows). */
uint64_t sac_replay_client_unacked_rows(const sac_replay_client_t *c);

/* ---- learner side ---- */

/* A sampled batch; every pointer is valid until the next sample or info call on this
 * client.
 * obs/next_obs (n, obs_dim), action (n, act_dim), reward/terminated/weights (n) f32,
 * indices (n) for sac_replay_client_update_priorities. */
typedef struct {
  uint32_t n, obs_dim, act_dim, shard_id;
  const float *obs, *action, *reward, *terminated, *next_obs, *weights;
  const uint64_t *indices;
} sac_replay_batch_t;

/* The next batch from any shard, waiting up to timeout_ms. A batch returned is exactly
 * what was asked for: batch_size rows, the configured obs_dim/act_dim, n indices of the
 * answering shard, the request id of a request in flight on that connection, finite
 * values. Any other reply is refused, counted by kind (stats rejected_by, see
 * sac_replay_client_reject_name) and logged (the first of each kind at once, then at
 * most one summary line per kind every 10 s); nothing of it is returned, so no index of
 * a refused reply can reach a priority update.
 * Returns 0; SAC_ETIMEOUT (no shard answered with a batch in time: the rate limiter is
 * holding the learner back, or no shard is up); SAC_ECONFIG when a shard can never serve
 * this client: its observation or action size differs from obs_dim/act_dim (its error
 * replies carry its sizes too) or it refuses batch_size as over its max_sample_batch
 * (logged with the shard's endpoint and the sizes; sac_replay_client_fatal has the
 * line). Other shard errors (e.g. a rate-limiter timeout) are counted and not returned. */
int sac_replay_client_sample(sac_replay_client_t *c, int timeout_ms, sac_replay_batch_t *out);
/* Where sac_replay_client_sample_into puts a batch: the update's own input (the
 * backend's stage, sac_batch_slots), batch_size rows: obs/next_obs (n, obs_dim), action
 * (n, act_dim), reward/terminated/weights (n). weights may be NULL (uniform replay: the
 * weights are checked, not stored). */
typedef struct {
  float *obs, *next_obs, *action, *reward, *terminated, *weights;
} sac_replay_stage_t;
/* As sac_replay_client_sample, the batch copied once, straight from the received
 * message, into `stage`, and checked as it is copied (common/wire_view.h): a reply that
 * fails the checks is refused and counted as sac_replay_client_sample refuses it, and
 * then the stage holds a partial copy: use it only after a return of 0, which means a
 * whole, valid batch is there. out's arrays are the stage's; out->indices is the
 * client's, valid until the next sample. Needs obs_dim and act_dim in the client's
 * configuration (SAC_EINVAL otherwise). Replies in an encoding the direct reader does
 * not take (stats samples_received - samples_direct) are decoded and then copied. */
int sac_replay_client_sample_into(sac_replay_client_t *c, int timeout_ms, const sac_replay_stage_t *stage,
                                  sac_replay_batch_t *out);
/* The reason of the last SAC_ECONFIG from sample ("" if none). */
const char *sac_replay_client_fatal(const sac_replay_client_t *c);
/* Sends new priorities (finite, >= 0) for indices from sampled batches, each to the
 * shard that owns it. 0; SAC_EINVAL (non-finite or negative priority: nothing sent);
 * SAC_EAGAIN (a shard's queue was full: that part was dropped). */
int sac_replay_client_update_priorities(sac_replay_client_t *c, size_t n, const uint64_t *indices,
                                        const float *priorities);

/* ---- both ---- */

/* Asks shard (by position in the endpoint lists) for its ShardInfo, over a separate
 * socket to its sample endpoint if any, else its insert endpoint, so sampling and
 * inserting are not disturbed (it reuses the client's decoder, so the last sampled
 * batch's pointers become invalid). 0 or SAC_ETIMEOUT. For tools and tests. */
int sac_replay_client_info(sac_replay_client_t *c, size_t shard, int timeout_ms, sac_wire_shard_info_t *out);
/* The same without waiting: reads the ShardInfo replies that have arrived, asks again
 * when the last request is refresh_ms old, and returns the newest reply (0, with its
 * age in *age_ns when not NULL) or SAC_EAGAIN when none has arrived yet. For a loop
 * that must not stall on an unresponsive shard (the learner's step count). Do not mix
 * with sac_replay_client_info on the same client. */
int sac_replay_client_info_cached(sac_replay_client_t *c, size_t shard, int refresh_ms,
                                  sac_wire_shard_info_t *out, uint64_t *age_ns);

/* Where one shard stands, for progress lines and the learner's account of its waits:
 * its endpoint (valid while the client lives), whether its socket (the insert socket of an
 * inserting client, else the sample socket) is connected now (inproc:// always is), the
 * seconds since it went down (0 while connected), the batches unacknowledged and the
 * seconds the oldest of them has waited since the later of its send and the last ack
 * (insert side), the seconds since the last batch and the last error reply since then
 * ("" none: sample side, e.g. the rate limiter's timeout). */
typedef struct {
  const char *endpoint;
  int connected;
  double down_s;
  uint32_t unacked;
  double ack_wait_s;
  double batch_wait_s;
  const char *last_error;
} sac_replay_shard_state_t;
/* 0, or SAC_EINVAL (no such shard). Reads the state the last insert, poll or sample
 * call left. */
int sac_replay_client_shard_state(const sac_replay_client_t *c, size_t shard, sac_replay_shard_state_t *out);

enum { SAC_REPLAY_REJECT_REQUEST_ID = SAC_WIRE_R_COUNT, SAC_REPLAY_REJECT_SHARD_ID, SAC_REPLAY_REJECT_KINDS };

typedef struct {
  uint64_t batches_sent, batches_acked, batches_resent, duplicates_acked, insert_errors, insert_timeouts;
  uint64_t superseded_batches;  /* refused: a newer client with our actor id has sent */
  uint64_t busy_replies;        /* "busy": the shard's held queue was full; resent later */
  uint64_t not_durable_replies; /* "not durable" (InsertAck status NOT_DURABLE): the shard could not make
                                   the batch durable (a full disk, a log error); kept and resent after the
                                   shard's retry_after_ms */
  uint64_t reconnects;
  uint64_t samples_received, samples_direct, sample_errors, sample_requests_sent, sample_requests_reissued;
  uint64_t sample_replies; /* replies that returned batches (several each with batches_per_request) */
  uint64_t sample_single_batch_replies; /* one-batch replies to multi-batch requests (a shard without them) */
  uint64_t priority_updates_sent, priority_updates_dropped;
  uint64_t samples_f16;                /* replies received with fp16 obs/action/next_obs */
  uint64_t sample_precision_fallbacks; /* f32 replies to fp16 requests (a shard without fp16) */
  uint64_t rejected_replies;           /* replies from a shard that failed validation (all kinds, acks too) */
  /* sample replies refused, by kind: [0, SAC_WIRE_R_COUNT) the wire reason (dims, rows,
   * nonfinite, ...), then SAC_REPLAY_REJECT_REQUEST_ID (answers no request in flight on
   * that connection) and SAC_REPLAY_REJECT_SHARD_ID (a shard id another connection has) */
  uint64_t rejected_by[SAC_REPLAY_REJECT_KINDS];
  /* error replies with request id 0: the shard refused a message of this client that it
   * could not read a request id from (logged: the first at once, then every 10 s) */
  uint64_t shard_refusals;
  /* waits logged (a WARN: after 5 s, at once for a connection lost; again every 30 s
   * while it lasts), each counted once, by kind: [1] a shard unreachable, [2] a connected
   * shard that acknowledges nothing */
  uint64_t waits_logged[3];
} sac_replay_client_stats_t;
void sac_replay_client_stats(const sac_replay_client_t *c, sac_replay_client_stats_t *out);
/* snake_case name of a rejection kind (a metric label), never NULL. */
const char *sac_replay_client_reject_name(int kind);

#endif
