/* One replay shard's state without any networking: storage ring, sampler (uniform or
 * prioritised), rate limiter, per-actor dedup windows and the shard's counters, plus
 * saving and restoring all of it as one snapshot. The server (server.h) puts it behind
 * ZeroMQ; tests and benchmarks drive it directly.
 *
 * Dedup: each actor's batches carry (session, seq); the shard keeps per actor the
 * highest seq below which everything is stored plus a 64-bit bitmap of the seqs above
 * it, so resent batches are recognised exactly even when they arrive out of order. A
 * new session (a restarted actor) resets the actor's window; acked_through in a batch
 * moves the window forward when the shard restarted from an older snapshot than the
 * client's acks (counted as acked batches lost).
 *
 * Not thread-safe: one thread (the server's) owns a shard. Allocates only in new and
 * load; insert, sample and priority updates allocate nothing. */
#ifndef SAC_REPLAY_SHARD_H
#define SAC_REPLAY_SHARD_H
#include <stddef.h>
#include <stdint.h>

#include "common/wire.h"
#include "replay/provenance.h"

typedef enum { SAC_REPLAY_UNIFORM = 0, SAC_REPLAY_PRIORITIZED = 1 } sac_replay_sampler_kind_t;

typedef struct {
  uint32_t shard_id; /* < SAC_WIRE_MAX_SHARDS */
  uint64_t capacity; /* slots */
  uint32_t obs_dim, act_dim;
  int obs_f16, act_f16;
  sac_replay_sampler_kind_t sampler;
  double alpha;              /* prioritised: exponent on priorities */
  double priority_eps;       /* prioritised: added to |td| before ^alpha */
  uint64_t min_size;         /* transitions before sampling starts */
  double samples_per_insert; /* <= 0: no ratio */
  double error_buffer;       /* <= 0: automatic */
  uint32_t max_batch_rows;   /* rows per inserted batch */
  uint32_t max_sample_batch; /* rows per sample request */
  uint32_t max_actors;
  uint32_t max_streams;
  uint64_t seed;
  /* Hostile or broken senders (docs/REPLAY.md "Sequence fields"): */
  uint64_t max_seq_jump;      /* largest forward move of an actor's window by acked_through
                                 within a session it has stored in (0: any) */
  double max_session_ahead_s; /* sessions encode their start time (replay/client.c): one
                                 further ahead of this shard's clock is refused (0: no check) */
  double actor_idle_s;        /* an actor silent this long may be forgotten when the table
                                 of max_actors is full and a new actor arrives (0: never) */
  int adopt_snapshot;         /* load a snapshot written by another shard id (else refused) */
} sac_replay_shard_config_t;

/* Defaults: capacity 1M, obs 17, act 6, fp32, uniform, alpha 0.6, eps 1e-6, min_size
 * 1000, spi 0 (off), max_batch_rows 4096, max_sample_batch 4096, 4096 actors, 65536
 * streams, seed 1, max_seq_jump 2^20, max_session_ahead_s 3600, actor_idle_s 600,
 * adopt_snapshot 0. */
void sac_replay_shard_config_default(sac_replay_shard_config_t *c);

typedef struct sac_replay_shard sac_replay_shard_t;

/* NULL on a bad config (logged) or out of memory; *err says which when err != NULL. */
sac_replay_shard_t *sac_replay_shard_new(const sac_replay_shard_config_t *cfg, int *err);
void sac_replay_shard_destroy(sac_replay_shard_t **sh);
const sac_replay_shard_config_t *sac_replay_shard_config(const sac_replay_shard_t *sh);

typedef enum {
  SAC_REPLAY_SEQ_NEW = 0,       /* store it */
  SAC_REPLAY_SEQ_DUPLICATE = 1, /* already stored: ack, do not store */
  SAC_REPLAY_SEQ_REJECT = 2,    /* beyond the window or no room for another actor */
} sac_replay_seq_t;

typedef struct {
  sac_replay_seq_t kind;
  uint64_t acked_seq; /* the actor's cumulative ack after this batch */
  uint32_t stored;    /* transitions stored */
  sac_wire_reason_t reason;
  int expired;            /* making room for this batch's actor forgot an idle one: */
  uint32_t expired_actor; /* that one (a write-ahead log records it: sac_replay_shard_forget_actor) */
} sac_replay_insert_result_t;

/* Classifies a batch by (actor, session, seq) without storing it; applies a session
 * change and acked_through, and makes room for a new actor (res->expired says when an
 * idle one was forgotten for it). */
sac_replay_seq_t sac_replay_shard_check(sac_replay_shard_t *sh, const sac_wire_transitions_t *t,
                                        sac_replay_insert_result_t *res);
/* Stores a validated batch unless it is a duplicate. Does not consult the rate limiter
 * (the caller decides when to insert); counts the insert in it. 0, or SAC_EINVAL with
 * res->reason for a rejected batch (nothing stored). */
int sac_replay_shard_insert(sac_replay_shard_t *sh, const sac_wire_transitions_t *t,
                            sac_replay_insert_result_t *res);

/* Forgets actor's dedup window as expiring it did (a log replaying an expiry). 0, or
 * SAC_ENOTFOUND (not tracked: nothing changed). */
int sac_replay_shard_forget_actor(sac_replay_shard_t *sh, uint32_t actor);

/* The credit to grant actor `actor` with its next ack (batches it may keep
 * unacknowledged): 1 while inserts are held back (holding) or the limiter is closed;
 * otherwise the limiter's room in batches of rows_per_batch, less what is granted to
 * the other actors, at least 1 and at most max_credit; max_credit when the ratio is off.
 * Records the grant. Without the sharing, 64 actors each got credit 16 at the start,
 * filled their windows long before the limiter engaged, and every batch then waited
 * behind ~100,000 queued transitions. */
uint32_t sac_replay_shard_credit(sac_replay_shard_t *sh, uint32_t actor, double rows_per_batch,
                                 uint32_t max_credit, int holding);
int sac_replay_shard_can_insert(const sac_replay_shard_t *sh, uint32_t n);
int sac_replay_shard_can_sample(const sac_replay_shard_t *sh, uint32_t n);

/* A sampled batch, in the shard's scratch memory: valid until the next sample. Shapes
 * obs/next_obs (n, obs_dim), action (n, act_dim), reward/terminated/weights (n),
 * indices (n) = SAC_WIRE_INDEX(shard, generation, slot). */
typedef struct {
  uint32_t n, obs_dim, act_dim, shard_id;
  uint32_t precision; /* SAC_WIRE_F32, or SAC_WIRE_F16: obs/action/next_obs NULL, the *16 views set */
  const float *obs, *action, *reward, *terminated, *next_obs, *weights;
  const uint64_t *indices;
  const uint16_t *obs16, *action16, *next_obs16;
} sac_replay_sample_t;

/* Samples n transitions (n <= max_sample_batch) regardless of the rate limiter and
 * counts them in it. SAC_EAGAIN when the shard is empty, SAC_EINVAL for a bad n. */
int sac_replay_shard_sample(sac_replay_shard_t *sh, uint32_t n, float beta, sac_replay_sample_t *out);
/* The same with obs/action/next_obs gathered as precision (SAC_WIRE_F32 or SAC_WIRE_F16,
 * else SAC_EINVAL), converted row by row as they are gathered (storage keeps its own
 * dtype). An fp32 value beyond fp16's range (|x| > 65504) is sent as +-65504, never
 * Inf, and counted in sample_f16_clamped_total. */
int sac_replay_shard_sample_as(sac_replay_shard_t *sh, uint32_t n, float beta, uint32_t precision,
                               sac_replay_sample_t *out);
/* Where sac_replay_shard_sample_to writes a sample: bytes, not necessarily aligned (the
 * payloads of a reply being built, common/wire_view.h's layout), in the shapes of
 * sac_replay_sample_t with obs/action/next_obs values of the precision's size (4 or 2
 * bytes), little-endian. */
typedef struct {
  unsigned char *obs, *action, *reward, *terminated, *next_obs, *indices, *weights;
} sac_replay_sample_dst_t;
/* As sac_replay_shard_sample_as, the sample written to dst instead of the shard's
 * scratch memory: f32 rows gathered straight into it (fp16 ones converted in the
 * scratch, then copied). The same codes; nothing written on an error. */
int sac_replay_shard_sample_to(sac_replay_shard_t *sh, uint32_t n, float beta, uint32_t precision,
                               const sac_replay_sample_dst_t *dst);

/* Applies priorities to indices of this shard. Updates to another shard's index, an
 * overwritten slot (generation changed) or a slot that holds no transition are skipped
 * and counted: *stale (overwritten/not a transition), *foreign (wrong shard or slot out
 * of range). Uniform shards ignore updates (all counted as applied). Never fails. */
void sac_replay_shard_update_priorities(sac_replay_shard_t *sh, uint32_t n, const uint64_t *indices,
                                        const float *priorities, uint32_t *applied, uint32_t *stale,
                                        uint32_t *foreign);

typedef struct {
  uint64_t size, capacity, filled;
  uint64_t allocated_total; /* ring slots handed out since the shard began (filled = min(this, capacity)) */
  uint64_t inserted_rows_total, inserted_batches_total, duplicate_batches_total;
  uint64_t sampled_rows_total, sample_batches_total;
  uint64_t sample_f16_clamped_total; /* fp16 replies: values beyond +-65504 sent as +-65504 */
  uint64_t priority_updates_total, priority_stale_total, priority_foreign_total;
  uint64_t acked_batches_lost_total; /* batches acked before a restart from an older snapshot */
  uint64_t obs_only_slots, tails_reused_total;
  uint64_t actors;
  uint64_t actors_expired_total; /* idle actors forgotten to make room for a new one */
  double bytes_per_slot, bytes_per_transition;
  /* rate limiter */
  double limiter_spi, limiter_diff, limiter_min_diff, limiter_max_diff;
  uint64_t limiter_min_size;
  int can_insert, can_sample;
} sac_replay_shard_stats_t;

void sac_replay_shard_stats(const sac_replay_shard_t *sh, sac_replay_shard_stats_t *out);
/* Actors that sent a batch within the last within_s seconds (the learner divides the
 * run's remaining steps among them, proto/sac.proto's Weights.run_actors). */
uint32_t sac_replay_shard_active_actors(const sac_replay_shard_t *sh, double within_s);

/* Writes the whole shard to path atomically (see snapshot.h); *bytes gets the file's
 * payload size. 0 or SAC_EIO (the previous snapshot at path is kept). */
int sac_replay_shard_save(sac_replay_shard_t *sh, const char *path, uint64_t *bytes);
/* Replaces the shard's contents with the snapshot at path. 0; SAC_ENOTFOUND (no file,
 * shard unchanged); SAC_ECONFIG (snapshot of a shard with other dimensions, capacity,
 * storage or sampler: shard unchanged); SAC_ESTATE (a good snapshot of another shard id
 * and adopt_snapshot is off: shard unchanged; the file is someone else's, not broken); SAC_EIO /
 * SAC_ECHECKSUM / SAC_EVERSION / SAC_EPROTO (truncated, corrupt, other format, inconsistent content: the
 * shard is left empty). */
int sac_replay_shard_load(sac_replay_shard_t *sh, const char *path);

/* The provenance index (replay/provenance.h): one entry per stored batch that still has
 * a slot in the ring, oldest first. Saved in snapshots (payload version 2; a version 1
 * snapshot loads with an empty index). */
const sac_replay_prov_t *sac_replay_shard_provenance(const sac_replay_shard_t *sh);

/* Sets the fields of *cfg a snapshot must match (shard id, capacity, dimensions, fp16,
 * sampler) from the snapshot at path, for tools that read a snapshot without knowing the
 * shard's flags. 0; SAC_ENOTFOUND; SAC_EIO / SAC_ECHECKSUM / SAC_EVERSION / SAC_EPROTO. */
int sac_replay_shard_snapshot_config(const char *path, sac_replay_shard_config_t *cfg);

/* The capacity a shard sized to `sized` slots takes to load the snapshot at path (a
 * resumed run whose budget, and so its replay, changed): the snapshot's own when its ring
 * wrapped (only a shard of the same capacity can take it), else the larger of the two.
 * *wrapped says which. 0; the errors of sac_replay_shard_snapshot_config (SAC_ENOTFOUND:
 * no snapshot there). */
int sac_replay_shard_resume_capacity(const char *path, uint64_t sized, uint64_t *capacity, int *wrapped);

#endif
