/* A shard's transition storage: one preallocated ring of slots, each slot one record
 * (array of structures): the slot of its next observation, the reward, the observation
 * row, the action row and the flags, packed to a multiple of 4 bytes (cheetah: 104). A
 * slot holds an observation and, when it is a transition, the action, reward,
 * terminated/truncated flags and the slot of its next observation. A sampled row reads
 * its record and the observation of its next slot, most often the record after it: about
 * three cache lines, against seven when each field had an array of its own (256 rows
 * gathered from 500,000 slots took 0.6 of the time). next_obs is never
 * stored twice: the next observation of a transition is the observation slot of the
 * same (actor, env) stream's next transition; only an episode's final observation and
 * the pending observation at the end of a batch take a slot of their own, and the
 * pending one is reused as the first transition of the stream's next batch when that
 * batch begins with the same observation. Slots are overwritten in allocation order, and
 * a transition's next slot is always allocated after it, so a live transition never
 * points at an overwritten slot. Observations (and optionally actions) can be stored
 * as float16.
 *
 * It is not thread-safe, performs no I/O, and allocates only in init. Inputs are
 * transition batches already checked by sac_wire_decode (bad ones are rejected there);
 * storage still never reads or writes out of bounds whatever it is given. */
#ifndef SAC_REPLAY_STORAGE_H
#define SAC_REPLAY_STORAGE_H
#include <stddef.h>
#include <stdint.h>

#include "common/wire.h"

#define SAC_SLOT_TERM 1u  /* terminated: no bootstrap */
#define SAC_SLOT_TRUNC 2u /* truncated by a time limit: still bootstraps */
#define SAC_SLOT_READY 4u /* a complete, sampleable transition */
#define SAC_SLOT_OBS 8u   /* holds a valid observation */
#define SAC_SLOT_NONE UINT32_MAX

typedef struct sac_replay_sumtree sac_replay_sumtree_t;

typedef struct {
  uint64_t capacity; /* slots; 4 * max_rows <= capacity < 2^32 */
  uint32_t obs_dim, act_dim;
  int obs_f16, act_f16;
  uint32_t max_rows;    /* rows per inserted batch */
  uint32_t max_streams; /* (actor, env) streams remembered for tail reuse */
} sac_replay_storage_config_t;

typedef struct {
  uint32_t actor, env;
  uint64_t serial1; /* allocation serial + 1 of the pending tail slot; 0: empty */
} sac_replay_stream_t;

typedef struct {
  uint32_t env, stamp, open, pad;
} sac_replay_envmap_t;

/* A record: next slot (uint32) at SAC_REC_NEXT, reward (float) at SAC_REC_REWARD, the
 * observation row at SAC_REC_OBS, the action row at act_at, the flags byte at flags_at. */
#define SAC_REC_NEXT 0u
#define SAC_REC_REWARD 4u
#define SAC_REC_OBS 8u

typedef struct {
  sac_replay_storage_config_t cfg;
  size_t obs_row, act_row; /* bytes per row */
  size_t rec;              /* bytes per record, a multiple of 4 */
  size_t act_at, flags_at; /* offsets in a record */
  uint8_t *recs;           /* (capacity, rec), 64-byte aligned */
  void *recs_mem;          /* what recs was allocated as, and its size (common/hugepages.h) */
  size_t recs_bytes;
  uint8_t *bounce;         /* bounce_size bytes: a field's rows on their way to or from a snapshot */
  size_t bounce_size;      /* SAC_REPLAY_BOUNCE, or one row where a row is larger */
  uint64_t alloc_count;    /* slots allocated since creation (serials 0..alloc_count-1) */
  uint64_t cursor;         /* alloc_count % capacity */
  uint64_t laps;           /* alloc_count / capacity: times the cursor went round */
  uint64_t size;           /* READY slots */
  sac_replay_stream_t *streams;
  uint32_t streams_mask;
  sac_replay_envmap_t *envmap; /* per-batch env -> open slot */
  uint32_t envmap_mask, stamp;
  uint16_t *row16;            /* one obs row in f16 for comparisons */
  sac_replay_sumtree_t *tree; /* not owned; NULL for uniform sampling */
  /* counters */
  uint64_t rows_inserted, obs_only_slots, tails_reused;
} sac_replay_storage_t;

/* Slot s's record and its fields (pointers into the ring; no bounds check). */
static inline uint8_t *sac_replay_rec(const sac_replay_storage_t *st, uint64_t s) {
  return st->recs + (size_t)s * st->rec;
}
static inline uint32_t *sac_replay_next(const sac_replay_storage_t *st, uint64_t s) {
  return (uint32_t *)(void *)(sac_replay_rec(st, s) + SAC_REC_NEXT);
}
static inline float *sac_replay_reward(const sac_replay_storage_t *st, uint64_t s) {
  return (float *)(void *)(sac_replay_rec(st, s) + SAC_REC_REWARD);
}
static inline uint8_t *sac_replay_obs(const sac_replay_storage_t *st, uint64_t s) {
  return sac_replay_rec(st, s) + SAC_REC_OBS;
}
static inline uint8_t *sac_replay_act(const sac_replay_storage_t *st, uint64_t s) {
  return sac_replay_rec(st, s) + st->act_at;
}
static inline uint8_t *sac_replay_flags(const sac_replay_storage_t *st, uint64_t s) {
  return sac_replay_rec(st, s) + st->flags_at;
}

/* Allocates every array. 0, SAC_EINVAL (bad config), SAC_ENOMEM. On error st is closed. */
int sac_replay_storage_init(sac_replay_storage_t *st, const sac_replay_storage_config_t *cfg);
/* Frees everything; idempotent on a zeroed or closed struct. */
void sac_replay_storage_close(sac_replay_storage_t *st);
/* Empties the ring (no frees). */
void sac_replay_storage_reset(sac_replay_storage_t *st);

/* Stores a validated batch from actor_id. Sets *stored to the transitions added. Cannot
 * fail on validated input; returns SAC_EINVAL (nothing stored) for a batch whose
 * dimensions differ or whose rows exceed max_rows. */
int sac_replay_storage_insert(sac_replay_storage_t *st, uint32_t actor_id, const sac_wire_transitions_t *t,
                              uint32_t *stored);

/* Remembers slot serial (an allocation serial) as the pending tail of (actor, env);
 * used by insert and by snapshot restore. */
void sac_replay_storage_stream_put(sac_replay_storage_t *st, uint32_t actor, uint32_t env, uint64_t serial);

/* Generation of slot (times it was reallocated: (alloc_count - 1 - slot) / capacity),
 * for sample indices and the priority updates that name them. Without the division,
 * which a sample and a batch of priority updates took once a row: a slot below the
 * cursor was handed out in the current lap, one at or above it in the lap before. */
static inline uint32_t sac_replay_storage_generation(const sac_replay_storage_t *st, uint32_t slot) {
  if (st->alloc_count <= slot)
    return 0;
  return (uint32_t)(slot < st->cursor ? st->laps : st->laps - 1);
}
static inline uint64_t sac_replay_storage_filled(const sac_replay_storage_t *st) {
  return st->alloc_count < st->cfg.capacity ? st->alloc_count : st->cfg.capacity;
}

/* Copies the transitions at slots[0..n) as float32: obs/next_obs (n, obs_dim), action
 * (n, act_dim), reward (n), terminated (n, 0/1). Every slot must be READY. The outputs
 * are bytes and need no alignment (a message's payloads: replay/server.c gathers
 * straight into the reply); float arrays do as well. */
void sac_replay_storage_gather(const sac_replay_storage_t *st, const uint32_t *slots, uint32_t n, void *obs,
                               void *action, void *reward, void *terminated, void *next_obs);

/* The same with obs/next_obs/action in IEEE binary16 (rows stored in fp16 are copied
 * as they are). A stored value outside fp16's finite range (|x| > 65504) becomes
 * +-65504, never Inf, and is counted in *clamped (added to). */
void sac_replay_storage_gather16(const sac_replay_storage_t *st, const uint32_t *slots, uint32_t n,
                                 uint16_t *obs, uint16_t *action, float *reward, float *terminated,
                                 uint16_t *next_obs, uint64_t *clamped);

/* The fields of slots [0, filled) as snapshots hold them, each field's rows one after
 * another in slot order: observations (filled x obs_row bytes), actions (x act_row),
 * rewards (x 4), next slots (x 4), flags (x 1). write_fields passes them to put in pieces
 * of at most bounce_size bytes; read_fields fills the records from get the same way.
 * Both return the first nonzero return of put/get (0 when all went through). */
#define SAC_REPLAY_BOUNCE ((size_t)64 << 10)
typedef int (*sac_replay_fields_io_t)(void *ctx, void *data, size_t len);
int sac_replay_storage_write_fields(const sac_replay_storage_t *st, uint64_t filled, sac_replay_fields_io_t put,
                                    void *ctx);
int sac_replay_storage_read_fields(sac_replay_storage_t *st, uint64_t filled, sac_replay_fields_io_t get,
                                   void *ctx);

/* Bytes of storage per slot, and the memory of the whole ring per transition it holds
 * (total bytes / transitions it can hold at the current share of observation-only
 * slots). extra_bytes_per_slot adds a sampler's per-slot memory. */
double sac_replay_storage_bytes_per_slot(const sac_replay_storage_t *st);
double sac_replay_storage_bytes_per_transition(const sac_replay_storage_t *st, double extra_bytes_per_slot);

#endif
