/* A replay shard's state machine (see shard.h).
 *
 * Snapshot payload (after the snapshot.h header), all little-endian:
 *   meta      32 x u64 (see enum meta below; doubles stored as their bits)
 *   obs       filled x obs_row bytes      act   filled x act_row bytes
 *   reward    filled x f32                next  filled x u32       flags  filled x u8
 *   leaves    filled x f32 (prioritised shards only)
 *   actors    n_actors x {u32 actor, u32 0, u64 session, u64 last_seq, u64 bitmap}
 *   streams   n_streams x {u32 actor, u32 env, u64 serial + 1}
 *   provenance n_prov x {u32 actor, u32 rows, u64 session, u64 seq, u64 end serial}
 *             (payload version 2; a version 1 snapshot loads with an empty index)
 * where filled = min(alloc_count, capacity): slots are handed out in order from 0, so
 * the used region is always a prefix. The ring keeps a record per slot; the snapshot keeps
 * each field's rows together (sac_replay_storage_write_fields), as it always has. */
#include "replay/shard.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/hugepages.h"
#include "common/log.h"
#include "common/rng.h"
#include "common/snapshot.h"
#include "replay/provenance.h"
#include "replay/ratelimit.h"
#include "replay/sampler.h"
#include "replay/storage.h"

typedef struct {
  uint32_t actor, used;
  uint64_t session, last, bits; /* bits: bit i set = seq last + 1 + i stored */
  uint32_t granted;             /* credit last granted (sac_replay_shard_credit) */
  uint64_t active_ns;           /* last batch (sac_clock_ns), for expiring idle actors */
} actor_t;

struct sac_replay_shard {
  sac_replay_shard_config_t cfg;
  sac_replay_storage_t st;
  sac_replay_sumtree_t tree;
  int prioritized;
  sac_replay_limiter_t lim;
  sac_rng_t rng;
  actor_t *actors;
  uint32_t actors_mask, n_actors;
  /* sample scratch, max_sample_batch rows */
  uint32_t *slots;
  float *obs, *act, *rew, *term, *next_obs, *weights;
  uint16_t *obs16, *act16, *next_obs16; /* fp16 replies (sac_replay_shard_sample_as) */
  uint64_t f16_clamped;                 /* values sent as +-65504 for being out of fp16's range */
  uint64_t *indices;
  /* counters */
  uint64_t inserted_batches, duplicate_batches, sampled_rows, sample_batches;
  uint64_t prio_updates, prio_stale, prio_foreign, acked_lost;
  uint64_t granted_total; /* sum of the actors' granted credit */
  uint64_t actors_expired;
  uint64_t next_expiry_scan_ns; /* a full table with nobody idle is not rescanned before this */
  uint32_t last_expired;        /* the actor actor_expire_one forgot last */
  sac_replay_prov_t prov;       /* who sent each stored batch (provenance.h) */
};

void sac_replay_shard_config_default(sac_replay_shard_config_t *c) {
  memset(c, 0, sizeof *c);
  c->capacity = 1000000;
  c->obs_dim = 17;
  c->act_dim = 6;
  c->sampler = SAC_REPLAY_UNIFORM;
  c->alpha = 0.6;
  c->priority_eps = 1e-6;
  c->min_size = 1000;
  c->samples_per_insert = 0.0;
  c->error_buffer = 0.0;
  c->max_batch_rows = 4096;
  c->max_sample_batch = 4096;
  c->max_actors = 4096;
  c->max_streams = 65536;
  c->seed = 1;
  c->max_seq_jump = 1u << 20;
  c->max_session_ahead_s = 3600.0;
  c->actor_idle_s = 600.0;
}

const sac_replay_shard_config_t *sac_replay_shard_config(const sac_replay_shard_t *sh) { return &sh->cfg; }

static uint32_t pow2_at_least(uint64_t x) {
  uint64_t p = 16;
  while (p < x)
    p <<= 1;
  return (uint32_t)p;
}

/* A shard large enough to ask for huge pages, on a host where they are off: its rows sit
 * on 4 KiB pages whatever it asks (common/hugepages.h), and sampling from them is slower
 * (docs/REPLAY.md). Said once per process, at start, with the fix. */
static void warn_if_no_huge_pages(const sac_replay_storage_t *st) {
  static atomic_int said;
  if (st->recs_bytes < SAC_HUGEPAGES_MIN || sac_hugepages_mode(SAC_THP_ENABLED_PATH) != SAC_THP_NEVER ||
      atomic_exchange(&said, 1))
    return;
  SAC_WARN("replay",
           "transparent huge pages are off on this host (%s: never): this shard's %.0f MB of rows are on "
           "4 KiB pages, where sampling is slower (docs/REPLAY.md); as root, `echo madvise > %s` lets "
           "shards ask for them",
           SAC_THP_ENABLED_PATH, (double)st->recs_bytes / 1048576.0, SAC_THP_ENABLED_PATH);
}

sac_replay_shard_t *sac_replay_shard_new(const sac_replay_shard_config_t *cfg, int *err) {
  int dummy;
  if (!err)
    err = &dummy;
  *err = SAC_EINVAL;
  if (cfg->shard_id >= SAC_WIRE_MAX_SHARDS) {
    SAC_ERROR("replay", "shard_id %u must be < %u", cfg->shard_id, SAC_WIRE_MAX_SHARDS);
    return NULL;
  }
  if (cfg->capacity < 4ull * cfg->max_batch_rows || cfg->capacity >= UINT32_MAX) {
    SAC_ERROR("replay", "capacity %llu must be at least 4 x max_batch_rows (%u) and below 2^32",
              (unsigned long long)cfg->capacity, cfg->max_batch_rows);
    return NULL;
  }
  if (cfg->min_size > cfg->capacity) {
    SAC_ERROR("replay", "min_size %llu is above capacity %llu: the shard could never serve a sample",
              (unsigned long long)cfg->min_size, (unsigned long long)cfg->capacity);
    return NULL;
  }
  if (!(cfg->max_session_ahead_s >= 0.0) || !(cfg->actor_idle_s >= 0.0)) {
    SAC_ERROR("replay", "max_session_ahead_s and actor_idle_s must be >= 0");
    return NULL;
  }
  if (cfg->max_sample_batch == 0 || cfg->max_actors == 0 || cfg->max_actors > (1u << 24) ||
      !(cfg->alpha >= 0.0 && cfg->alpha <= 10.0) || !(cfg->priority_eps >= 0.0) ||
      !isfinite(cfg->samples_per_insert) || !isfinite(cfg->error_buffer)) {
    SAC_ERROR("replay", "invalid shard configuration (sample batch, actors, alpha, eps or limiter)");
    return NULL;
  }
  sac_replay_shard_t *sh = calloc(1, sizeof *sh);
  if (!sh) {
    *err = SAC_ENOMEM;
    return NULL;
  }
  sh->cfg = *cfg;
  sac_replay_storage_config_t sc = {cfg->capacity, cfg->obs_dim,        cfg->act_dim,    cfg->obs_f16,
                                    cfg->act_f16,  cfg->max_batch_rows, cfg->max_streams};
  int rc = sac_replay_storage_init(&sh->st, &sc);
  if (rc) {
    SAC_ERROR("replay", "cannot create storage for %llu transitions: %s", (unsigned long long)cfg->capacity,
              sac_strerror(rc));
    *err = rc;
    free(sh);
    return NULL;
  }
  warn_if_no_huge_pages(&sh->st);
  sh->prioritized = cfg->sampler == SAC_REPLAY_PRIORITIZED;
  if (sh->prioritized) {
    rc = sac_replay_sumtree_init(&sh->tree, cfg->capacity);
    if (rc)
      goto fail;
    sh->st.tree = &sh->tree;
  }
  sac_replay_limiter_init(&sh->lim, cfg->samples_per_insert, cfg->min_size, cfg->error_buffer,
                          cfg->max_batch_rows, cfg->max_sample_batch);
  sac_rng_init(&sh->rng, cfg->seed, ((uint64_t)3 << 40) | cfg->shard_id);
  uint32_t na = pow2_at_least(2ull * cfg->max_actors);
  sh->actors = calloc(na, sizeof *sh->actors);
  sh->actors_mask = na - 1;
  size_t B = cfg->max_sample_batch;
  sh->slots = malloc(B * sizeof *sh->slots);
  sh->obs = malloc(B * cfg->obs_dim * sizeof(float));
  sh->next_obs = malloc(B * cfg->obs_dim * sizeof(float));
  sh->act = malloc(B * cfg->act_dim * sizeof(float));
  sh->obs16 = malloc(B * cfg->obs_dim * sizeof(uint16_t));
  sh->next_obs16 = malloc(B * cfg->obs_dim * sizeof(uint16_t));
  sh->act16 = malloc(B * cfg->act_dim * sizeof(uint16_t));
  sh->rew = malloc(B * sizeof(float));
  sh->term = malloc(B * sizeof(float));
  sh->weights = malloc(B * sizeof(float));
  sh->indices = malloc(B * sizeof(uint64_t));
  rc = SAC_ENOMEM;
  if (sac_replay_prov_init(&sh->prov, cfg->capacity / 64 < 65536 ? cfg->capacity / 64 : 65536) != 0)
    goto fail;
  if (!sh->actors || !sh->slots || !sh->obs || !sh->next_obs || !sh->act || !sh->rew || !sh->term ||
      !sh->weights || !sh->indices || !sh->obs16 || !sh->next_obs16 || !sh->act16)
    goto fail;
  *err = 0;
  return sh;
fail:
  SAC_ERROR("replay", "cannot allocate the shard: %s", sac_strerror(rc));
  *err = rc;
  sac_replay_shard_destroy(&sh);
  return NULL;
}

void sac_replay_shard_destroy(sac_replay_shard_t **shp) {
  if (!shp || !*shp)
    return;
  sac_replay_shard_t *sh = *shp;
  sac_replay_storage_close(&sh->st);
  if (sh->prioritized)
    sac_replay_sumtree_close(&sh->tree);
  free(sh->actors);
  free(sh->slots);
  free(sh->obs);
  free(sh->next_obs);
  free(sh->act);
  free(sh->obs16);
  free(sh->next_obs16);
  free(sh->act16);
  free(sh->rew);
  free(sh->term);
  free(sh->weights);
  free(sh->indices);
  sac_replay_prov_close(&sh->prov);
  free(sh);
  *shp = NULL;
}

/* ------------------------------------------------------------------ dedup */

static uint32_t hash_u32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

/* Removes the entry at slot i of the linear-probing table, moving later entries of
 * the same probe run back so that every remaining one is still found. */
static void actor_remove(sac_replay_shard_t *sh, uint32_t i) {
  uint32_t mask = sh->actors_mask;
  sh->granted_total -= sh->actors[i].granted;
  memset(&sh->actors[i], 0, sizeof sh->actors[i]);
  sh->n_actors--;
  for (uint32_t j = (i + 1) & mask; sh->actors[j].used; j = (j + 1) & mask) {
    uint32_t home = hash_u32(sh->actors[j].actor) & mask;
    /* entry j may move to the hole at i when i lies cyclically in [home, j) */
    if (((j - home) & mask) >= ((j - i) & mask)) {
      sh->actors[i] = sh->actors[j];
      memset(&sh->actors[j], 0, sizeof sh->actors[j]);
      i = j;
    }
  }
}

/* Makes room for a new actor when the table is full: forgets the one silent longest,
 * if it has been silent for actor_idle_s. Its dedup window goes with it: should it come
 * back, its acked_through moves a fresh window past what it was told is stored. 1 when
 * a slot was freed. */
static int actor_expire_one(sac_replay_shard_t *sh) {
  if (sh->cfg.actor_idle_s <= 0.0)
    return 0;
  uint64_t now = sac_clock_ns();
  if (now < sh->next_expiry_scan_ns)
    return 0;
  uint64_t idle = (uint64_t)(sh->cfg.actor_idle_s * 1e9);
  uint32_t oldest = UINT32_MAX;
  for (uint32_t i = 0; i <= sh->actors_mask; i++) {
    const actor_t *a = &sh->actors[i];
    if (a->used && now - a->active_ns >= idle &&
        (oldest == UINT32_MAX || a->active_ns < sh->actors[oldest].active_ns))
      oldest = i;
  }
  if (oldest == UINT32_MAX) {
    sh->next_expiry_scan_ns = now + 100000000ull; /* a flood of new ids scans 10 times a second */
    return 0;
  }
  SAC_INFO_EVERY(10.0, "replay", "forgot actor %u, silent for %.0f s, to make room for a new actor",
                 sh->actors[oldest].actor, (double)(now - sh->actors[oldest].active_ns) * 1e-9);
  sh->last_expired = sh->actors[oldest].actor;
  actor_remove(sh, oldest);
  sh->actors_expired++;
  return 1;
}

static actor_t *actor_get(sac_replay_shard_t *sh, uint32_t actor, int create) {
  uint32_t mask = sh->actors_mask;
  if (create && sh->n_actors >= sh->cfg.max_actors && !actor_get(sh, actor, 0)) {
    if (!actor_expire_one(sh))
      return NULL;
  }
  for (uint32_t h = hash_u32(actor) & mask, probes = 0; probes <= mask; h = (h + 1) & mask, probes++) {
    actor_t *a = &sh->actors[h];
    if (!a->used) {
      if (!create || sh->n_actors >= sh->cfg.max_actors)
        return NULL;
      memset(a, 0, sizeof *a);
      a->used = 1;
      a->actor = actor;
      a->active_ns = sac_clock_ns();
      sh->n_actors++;
      return a;
    }
    if (a->actor == actor)
      return a;
  }
  return NULL;
}

static void actor_advance(actor_t *a) {
  while (a->bits & 1u) {
    a->last++;
    a->bits >>= 1;
  }
}

sac_replay_seq_t sac_replay_shard_check(sac_replay_shard_t *sh, const sac_wire_transitions_t *t,
                                        sac_replay_insert_result_t *res) {
  memset(res, 0, sizeof *res);
  if (sh->cfg.max_session_ahead_s > 0.0) {
    /* A session is (start time in microseconds << 12 | noise): one far in the future
     * would make every later session of this actor id "older" and lock it out. */
    uint64_t now_us = sac_wallclock_ns() / 1000u;
    uint64_t ahead_us = (uint64_t)(sh->cfg.max_session_ahead_s * 1e6);
    if ((t->session >> 12) > now_us + ahead_us) {
      SAC_WARN_EVERY(10.0, "replay", "batch from actor %u refused: its session starts %.0f s in the future",
                     t->actor_id, (double)((t->session >> 12) - now_us) * 1e-6);
      res->kind = SAC_REPLAY_SEQ_REJECT;
      res->reason = SAC_WIRE_R_SEQUENCE;
      return res->kind;
    }
  }
  uint64_t expired_before = sh->actors_expired;
  actor_t *a = actor_get(sh, t->actor_id, 1);
  if (sh->actors_expired != expired_before) {
    res->expired = 1;
    res->expired_actor = sh->last_expired;
  }
  if (!a) {
    SAC_WARN_EVERY(10.0, "replay",
                   "batch from actor %u refused: already tracking max_actors=%u actors, none silent for "
                   "actor_idle_s=%.0f s",
                   t->actor_id, sh->cfg.max_actors, sh->cfg.actor_idle_s);
    res->kind = SAC_REPLAY_SEQ_REJECT;
    res->reason = SAC_WIRE_R_ACTORS;
    return res->kind;
  }
  a->active_ns = sac_clock_ns();
  if (t->acked_through >= t->seq) { /* the wire check, for callers that skip it */
    res->kind = SAC_REPLAY_SEQ_REJECT;
    res->reason = SAC_WIRE_R_SEQUENCE;
    return res->kind;
  }
  if (a->session != t->session) {
    if (t->session < a->session) {
      /* A batch of a client instance that a newer one with the same actor id has
       * replaced (a restarted actor: the old process's queued messages and resends
       * still arrive). Its dedup window is gone, so storing it could store a batch
       * twice; refuse it. The old client is dead or is told why. */
      res->kind = SAC_REPLAY_SEQ_REJECT;
      res->reason = SAC_WIRE_R_SESSION;
      return res->kind;
    }
    if (a->session || a->last)
      SAC_INFO_EVERY(10.0, "replay", "actor %u started a new session; its dedup window is reset",
                     t->actor_id);
    a->session = t->session;
    a->last = 0;
    a->bits = 0;
  }
  if (t->acked_through > a->last) {
    /* The client was told these were stored, but this shard does not have them: it
     * restarted from an older snapshot. They are gone; move the window past them. */
    uint64_t d = t->acked_through - a->last;
    if ((a->last || a->bits) && sh->cfg.max_seq_jump && d > sh->cfg.max_seq_jump) {
      /* within a session this shard has stored in, so far a jump is a broken or
       * hostile sender, not a restart: refused, the window stays */
      SAC_WARN_EVERY(10.0, "replay",
                     "batch from actor %u refused: acked_through %llu is %llu past its window "
                     "(max_seq_jump %llu)",
                     t->actor_id, (unsigned long long)t->acked_through, (unsigned long long)d,
                     (unsigned long long)sh->cfg.max_seq_jump);
      res->kind = SAC_REPLAY_SEQ_REJECT;
      res->reason = SAC_WIRE_R_SEQUENCE;
      res->acked_seq = a->last;
      return res->kind;
    }
    uint64_t lost = d;
    for (uint64_t i = 0; i < d && i < 64; i++)
      lost -= (a->bits >> i) & 1u;
    if (lost) {
      /* saturating: a counter never goes down */
      sh->acked_lost = sh->acked_lost + lost < sh->acked_lost ? UINT64_MAX : sh->acked_lost + lost;
      SAC_WARN_EVERY(10.0, "replay",
                     "actor %u: %llu acknowledged batches up to seq %llu are not in this shard "
                     "(restarted from an older snapshot)",
                     t->actor_id, (unsigned long long)lost, (unsigned long long)t->acked_through);
    }
    a->bits = d >= 64 ? 0 : a->bits >> d;
    a->last = t->acked_through;
    actor_advance(a);
  }
  res->acked_seq = a->last;
  if (t->seq <= a->last || (t->seq - a->last <= 64 && ((a->bits >> (t->seq - a->last - 1)) & 1u))) {
    res->kind = SAC_REPLAY_SEQ_DUPLICATE;
  } else if (t->seq - a->last > 64) {
    res->kind = SAC_REPLAY_SEQ_REJECT;
    res->reason = SAC_WIRE_R_WINDOW;
  } else {
    res->kind = SAC_REPLAY_SEQ_NEW;
  }
  return res->kind;
}

int sac_replay_shard_forget_actor(sac_replay_shard_t *sh, uint32_t actor) {
  uint32_t mask = sh->actors_mask;
  for (uint32_t h = hash_u32(actor) & mask, probes = 0; probes <= mask; h = (h + 1) & mask, probes++) {
    if (!sh->actors[h].used)
      break;
    if (sh->actors[h].actor == actor) {
      actor_remove(sh, h);
      sh->actors_expired++;
      return 0;
    }
  }
  return SAC_ENOTFOUND;
}

int sac_replay_shard_insert(sac_replay_shard_t *sh, const sac_wire_transitions_t *t,
                            sac_replay_insert_result_t *res) {
  sac_replay_seq_t kind = sac_replay_shard_check(sh, t, res);
  if (kind == SAC_REPLAY_SEQ_DUPLICATE) {
    sh->duplicate_batches++;
    return 0;
  }
  if (kind == SAC_REPLAY_SEQ_REJECT)
    return SAC_EINVAL;
  uint32_t stored = 0;
  int rc = sac_replay_storage_insert(&sh->st, t->actor_id, t, &stored);
  if (rc) {
    res->kind = SAC_REPLAY_SEQ_REJECT;
    res->reason = SAC_WIRE_R_DIMS;
    return rc;
  }
  actor_t *a = actor_get(sh, t->actor_id, 0);
  a->bits |= 1ull << (t->seq - a->last - 1);
  actor_advance(a);
  res->acked_seq = a->last;
  res->stored = stored;
  sac_replay_limiter_inserted(&sh->lim, stored);
  sh->inserted_batches++;
  /* the rows this shard holds of the batch, which the ledger check compares with what was sent */
  sac_replay_prov_add(&sh->prov, t->actor_id, t->session, t->seq, stored, sh->st.alloc_count);
  sac_replay_prov_trim(&sh->prov, sh->st.alloc_count, sh->cfg.capacity);
  return 0;
}

const sac_replay_prov_t *sac_replay_shard_provenance(const sac_replay_shard_t *sh) { return &sh->prov; }

int sac_replay_shard_can_insert(const sac_replay_shard_t *sh, uint32_t n) {
  return sac_replay_limiter_can_insert(&sh->lim, n);
}

uint32_t sac_replay_shard_credit(sac_replay_shard_t *sh, uint32_t actor, double rows_per_batch,
                                 uint32_t max_credit, int holding) {
  actor_t *a = actor_get(sh, actor, 0);
  uint64_t c = 1;
  if (!holding && sac_replay_shard_can_insert(sh, 1)) {
    uint64_t room = sac_replay_limiter_insert_room(&sh->lim);
    if (room == UINT64_MAX) {
      c = max_credit;
    } else {
      uint64_t batches = room / (uint64_t)(rows_per_batch > 1.0 ? rows_per_batch : 1.0);
      uint64_t others = sh->granted_total - (a ? a->granted : 0);
      c = batches > others ? batches - others : 1;
    }
  }
  if (c < 1)
    c = 1;
  if (c > max_credit)
    c = max_credit ? max_credit : 1;
  if (a) {
    sh->granted_total += c;
    sh->granted_total -= a->granted;
    a->granted = (uint32_t)c;
  }
  return (uint32_t)c;
}

int sac_replay_shard_can_sample(const sac_replay_shard_t *sh, uint32_t n) {
  return sac_replay_limiter_can_sample(&sh->lim, sh->st.size, n);
}

/* ------------------------------------------------------------------ sampling */

/* Picks n slots (uniform or by priority) with their importance weights. */
static int pick_slots(sac_replay_shard_t *sh, uint32_t n, float beta) {
  if (sh->prioritized)
    return sac_replay_sample_prioritized(&sh->st, &sh->tree, &sh->rng, n, beta, sh->slots, sh->weights);
  int rc = sac_replay_sample_uniform(&sh->st, &sh->rng, n, sh->slots);
  for (uint32_t i = 0; i < n && rc == 0; i++)
    sh->weights[i] = 1.0f;
  return rc;
}

/* The gathered f32 batch into the fp16 scratch. Converting the batch as a whole, not row
 * by row inside the gather, keeps the vector conversion at full width: row by row it took
 * 3x the fp32 sample's time for cheetah's rows of 17 and 6 values. */
static void to_f16(sac_replay_shard_t *sh, uint32_t n) {
  size_t no = (size_t)n * sh->cfg.obs_dim, na = (size_t)n * sh->cfg.act_dim;
  sh->f16_clamped += sac_wire_f32_to_f16_n(sh->obs, no, sh->obs16);
  sh->f16_clamped += sac_wire_f32_to_f16_n(sh->next_obs, no, sh->next_obs16);
  sh->f16_clamped += sac_wire_f32_to_f16_n(sh->act, na, sh->act16);
}

int sac_replay_shard_sample(sac_replay_shard_t *sh, uint32_t n, float beta, sac_replay_sample_t *out) {
  return sac_replay_shard_sample_as(sh, n, beta, SAC_WIRE_F32, out);
}

/* The picked slots' rows into dst (f32) or, for fp16, into the fp16 scratch (rows stored
 * in fp16 as they are, f32 rows gathered whole and converted in one pass: 8 values an
 * instruction), reward and terminated into dst; indices into the scratch. */
static void fill_sample(sac_replay_shard_t *sh, uint32_t n, uint32_t precision,
                        const sac_replay_sample_dst_t *dst) {
  if (precision == SAC_WIRE_F16) {
    if (sh->cfg.obs_f16 || sh->cfg.act_f16)
      sac_replay_storage_gather16(&sh->st, sh->slots, n, sh->obs16, sh->act16, sh->rew, sh->term,
                                  sh->next_obs16, &sh->f16_clamped);
    else {
      sac_replay_storage_gather(&sh->st, sh->slots, n, sh->obs, sh->act, sh->rew, sh->term, sh->next_obs);
      to_f16(sh, n);
    }
    if (dst->reward != (unsigned char *)sh->rew) {
      memcpy(dst->reward, sh->rew, (size_t)n * 4);
      memcpy(dst->terminated, sh->term, (size_t)n * 4);
    }
  } else {
    sac_replay_storage_gather(&sh->st, sh->slots, n, dst->obs, dst->action, dst->reward, dst->terminated,
                              dst->next_obs);
  }
  for (uint32_t i = 0; i < n; i++)
    sh->indices[i] =
        SAC_WIRE_INDEX(sh->cfg.shard_id, sac_replay_storage_generation(&sh->st, sh->slots[i]), sh->slots[i]);
  sac_replay_limiter_sampled(&sh->lim, n);
  sh->sampled_rows += n;
  sh->sample_batches++;
}

static int sample_check(const sac_replay_shard_t *sh, uint32_t n, uint32_t precision) {
  return n == 0 || n > sh->cfg.max_sample_batch || (precision != SAC_WIRE_F32 && precision != SAC_WIRE_F16)
             ? SAC_EINVAL
             : 0;
}

int sac_replay_shard_sample_as(sac_replay_shard_t *sh, uint32_t n, float beta, uint32_t precision,
                               sac_replay_sample_t *out) {
  int rc;
  if ((rc = sample_check(sh, n, precision)) != 0 || (rc = pick_slots(sh, n, beta)) != 0)
    return rc;
  const sac_replay_sample_dst_t scratch = {(unsigned char *)sh->obs,
                                           (unsigned char *)sh->act,
                                           (unsigned char *)sh->rew,
                                           (unsigned char *)sh->term,
                                           (unsigned char *)sh->next_obs,
                                           NULL,
                                           NULL};
  fill_sample(sh, n, precision, &scratch);
  const int h = precision == SAC_WIRE_F16;
  *out = (sac_replay_sample_t){.n = n,
                               .obs_dim = sh->cfg.obs_dim,
                               .act_dim = sh->cfg.act_dim,
                               .shard_id = sh->cfg.shard_id,
                               .precision = precision,
                               .obs = h ? NULL : sh->obs,
                               .action = h ? NULL : sh->act,
                               .reward = sh->rew,
                               .terminated = sh->term,
                               .next_obs = h ? NULL : sh->next_obs,
                               .weights = sh->weights,
                               .indices = sh->indices,
                               .obs16 = h ? sh->obs16 : NULL,
                               .action16 = h ? sh->act16 : NULL,
                               .next_obs16 = h ? sh->next_obs16 : NULL};
  return 0;
}

int sac_replay_shard_sample_to(sac_replay_shard_t *sh, uint32_t n, float beta, uint32_t precision,
                               const sac_replay_sample_dst_t *dst) {
  int rc;
  if ((rc = sample_check(sh, n, precision)) != 0 || (rc = pick_slots(sh, n, beta)) != 0)
    return rc;
  fill_sample(sh, n, precision, dst);
  if (precision == SAC_WIRE_F16) {
    const size_t no = (size_t)n * sh->cfg.obs_dim * 2, na = (size_t)n * sh->cfg.act_dim * 2;
    memcpy(dst->obs, sh->obs16, no);
    memcpy(dst->next_obs, sh->next_obs16, no);
    memcpy(dst->action, sh->act16, na);
  }
  memcpy(dst->indices, sh->indices, (size_t)n * 8);
  memcpy(dst->weights, sh->weights, (size_t)n * 4);
  return 0;
}

/* Updates decoded and checked a chunk at a time, then applied to the tree together. */
void sac_replay_shard_update_priorities(sac_replay_shard_t *sh, uint32_t n, const uint64_t *indices,
                                        const float *priorities, uint32_t *applied, uint32_t *stale,
                                        uint32_t *foreign) {
  uint32_t ok = 0, old = 0, bad = 0, slot[SAC_PRIORITY_CHUNK], gen[SAC_PRIORITY_CHUNK];
  float p[SAC_PRIORITY_CHUNK];
  for (uint32_t i0 = 0; i0 < n; i0 += SAC_PRIORITY_CHUNK) {
    const uint32_t end = n - i0 < SAC_PRIORITY_CHUNK ? n : i0 + SAC_PRIORITY_CHUNK;
    uint32_t m = 0;
    for (uint32_t i = i0; i < end; i++) {
      const uint64_t ix = indices[i];
      if (SAC_WIRE_INDEX_SHARD(ix) != sh->cfg.shard_id || SAC_WIRE_INDEX_SLOT(ix) >= sh->cfg.capacity ||
          !isfinite(priorities[i]) || priorities[i] < 0.0f) {
        bad++;
        continue;
      }
      slot[m] = SAC_WIRE_INDEX_SLOT(ix);
      gen[m] = SAC_WIRE_INDEX_GEN(ix);
      p[m++] = priorities[i];
    }
    /* a uniform shard takes every well-formed update and has nothing to apply it to */
    const uint32_t done = sh->prioritized ? sac_replay_priority_set_n(&sh->st, &sh->tree, m, slot, gen, p,
                                                                      sh->cfg.alpha, sh->cfg.priority_eps)
                                          : m;
    ok += done;
    old += m - done;
  }
  sh->prio_updates += ok;
  sh->prio_stale += old;
  sh->prio_foreign += bad;
  if (applied)
    *applied = ok;
  if (stale)
    *stale = old;
  if (foreign)
    *foreign = bad;
}

uint32_t sac_replay_shard_active_actors(const sac_replay_shard_t *sh, double within_s) {
  uint64_t now = sac_clock_ns(), w = (uint64_t)(within_s * 1e9);
  uint32_t n = 0;
  for (uint32_t i = 0; i <= sh->actors_mask; i++)
    n += sh->actors[i].used && now - sh->actors[i].active_ns < w;
  return n;
}

void sac_replay_shard_stats(const sac_replay_shard_t *sh, sac_replay_shard_stats_t *o) {
  memset(o, 0, sizeof *o);
  o->size = sh->st.size;
  o->capacity = sh->cfg.capacity;
  o->filled = sac_replay_storage_filled(&sh->st);
  o->allocated_total = sh->st.alloc_count;
  o->inserted_rows_total = sh->st.rows_inserted;
  o->inserted_batches_total = sh->inserted_batches;
  o->duplicate_batches_total = sh->duplicate_batches;
  o->sampled_rows_total = sh->sampled_rows;
  o->sample_batches_total = sh->sample_batches;
  o->sample_f16_clamped_total = sh->f16_clamped;
  o->priority_updates_total = sh->prio_updates;
  o->priority_stale_total = sh->prio_stale;
  o->priority_foreign_total = sh->prio_foreign;
  o->acked_batches_lost_total = sh->acked_lost;
  o->obs_only_slots = sh->st.obs_only_slots;
  o->tails_reused_total = sh->st.tails_reused;
  o->actors = sh->n_actors;
  o->actors_expired_total = sh->actors_expired;
  double extra = sh->prioritized ? sac_replay_sumtree_bytes_per_leaf() : 0.0;
  o->bytes_per_slot = sac_replay_storage_bytes_per_slot(&sh->st) + extra;
  o->bytes_per_transition = sac_replay_storage_bytes_per_transition(&sh->st, extra);
  o->limiter_spi = sh->lim.spi;
  o->limiter_diff = sh->lim.diff;
  o->limiter_min_diff = sh->lim.min_diff;
  o->limiter_max_diff = sh->lim.max_diff;
  o->limiter_min_size = sh->lim.min_size;
  o->can_insert = sac_replay_shard_can_insert(sh, 1);
  o->can_sample = sac_replay_shard_can_sample(sh, 1);
}

/* ------------------------------------------------------------------ snapshots */

enum meta {
  M_VERSION,
  M_SHARD,
  M_CAPACITY,
  M_OBS_DIM,
  M_ACT_DIM,
  M_OBS_F16,
  M_ACT_F16,
  M_SAMPLER,
  M_ALLOC,
  M_SIZE,
  M_ROWS,
  M_OBS_ONLY,
  M_TAILS,
  M_LIM_INS,
  M_LIM_SMP,
  M_LIM_DIFF,
  M_N_ACTORS,
  M_N_STREAMS,
  M_MAX_LEAF,
  M_BATCHES,
  M_DUPS,
  M_SAMPLED,
  M_SAMPLE_BATCHES,
  M_PRIO,
  M_PRIO_STALE,
  M_PRIO_FOREIGN,
  M_LOST,
  M_N_PROV, /* version 2 */
  M_COUNT = 32
};
#define PAYLOAD_VERSION 2u

static uint64_t dbits(double d) {
  uint64_t u;
  memcpy(&u, &d, 8);
  return u;
}
static double bitsd(uint64_t u) {
  double d;
  memcpy(&d, &u, 8);
  return d;
}

typedef struct {
  uint32_t actor, zero;
  uint64_t session, last, bits;
} actor_rec_t;

/* The storage's fields to and from a snapshot. */
static int snap_put(void *w, void *data, size_t len) { return sac_snap_write(w, data, len); }
static int snap_get(void *r, void *data, size_t len) { return sac_snap_read(r, data, len); }

int sac_replay_shard_save(sac_replay_shard_t *sh, const char *path, uint64_t *bytes) {
  sac_replay_storage_t *st = &sh->st;
  uint64_t filled = sac_replay_storage_filled(st);
  uint64_t n_streams = 0;
  for (uint32_t i = 0; i <= st->streams_mask; i++)
    n_streams += st->streams[i].serial1 != 0;
  uint64_t m[M_COUNT] = {0};
  m[M_VERSION] = PAYLOAD_VERSION;
  m[M_SHARD] = sh->cfg.shard_id;
  m[M_CAPACITY] = sh->cfg.capacity;
  m[M_OBS_DIM] = sh->cfg.obs_dim;
  m[M_ACT_DIM] = sh->cfg.act_dim;
  m[M_OBS_F16] = (uint64_t)(sh->cfg.obs_f16 != 0);
  m[M_ACT_F16] = (uint64_t)(sh->cfg.act_f16 != 0);
  m[M_SAMPLER] = (uint64_t)sh->prioritized;
  m[M_ALLOC] = st->alloc_count;
  m[M_SIZE] = st->size;
  m[M_ROWS] = st->rows_inserted;
  m[M_OBS_ONLY] = st->obs_only_slots;
  m[M_TAILS] = st->tails_reused;
  m[M_LIM_INS] = sh->lim.inserted;
  m[M_LIM_SMP] = sh->lim.sampled;
  m[M_LIM_DIFF] = dbits(sh->lim.diff);
  m[M_N_ACTORS] = sh->n_actors;
  m[M_N_STREAMS] = n_streams;
  m[M_MAX_LEAF] = dbits(sh->prioritized ? (double)sh->tree.max_leaf : 1.0);
  m[M_BATCHES] = sh->inserted_batches;
  m[M_DUPS] = sh->duplicate_batches;
  m[M_SAMPLED] = sh->sampled_rows;
  m[M_SAMPLE_BATCHES] = sh->sample_batches;
  m[M_PRIO] = sh->prio_updates;
  m[M_PRIO_STALE] = sh->prio_stale;
  m[M_PRIO_FOREIGN] = sh->prio_foreign;
  m[M_LOST] = sh->acked_lost;
  m[M_N_PROV] = sh->prov.count;

  sac_snap_writer_t w;
  int rc = sac_snap_writer_open(&w, path, SAC_SNAP_KIND_REPLAY);
  if (rc)
    return rc;
  rc = sac_snap_write(&w, m, sizeof m);
  if (!rc)
    rc = sac_replay_storage_write_fields(st, filled, snap_put, &w);
  if (!rc && sh->prioritized)
    rc = sac_snap_write(&w, sh->tree.leaf, filled * sizeof(float));
  for (uint32_t i = 0; i <= sh->actors_mask && !rc; i++) {
    const actor_t *a = &sh->actors[i];
    if (!a->used)
      continue;
    actor_rec_t r = {a->actor, 0, a->session, a->last, a->bits};
    rc = sac_snap_write(&w, &r, sizeof r);
  }
  for (uint32_t i = 0; i <= st->streams_mask && !rc; i++)
    if (st->streams[i].serial1)
      rc = sac_snap_write(&w, &st->streams[i], sizeof st->streams[i]);
  for (uint64_t i = 0; i < sh->prov.count && !rc; i++)
    rc = sac_snap_write(&w, sac_replay_prov_at(&sh->prov, i), sizeof(sac_replay_prov_entry_t));
  if (rc) {
    sac_snap_writer_abort(&w);
    return rc;
  }
  uint64_t total = w.bytes;
  rc = sac_snap_writer_commit(&w);
  if (!rc && bytes)
    *bytes = total;
  return rc;
}

static int row_finite(const uint8_t *row, uint32_t dim, int f16) {
  for (uint32_t i = 0; i < dim; i++) {
    if (f16) {
      uint16_t h;
      memcpy(&h, row + 2 * i, 2);
      if ((h & 0x7c00u) == 0x7c00u)
        return 0;
    } else {
      float f;
      memcpy(&f, row + 4 * i, 4);
      if (!isfinite(f))
        return 0;
    }
  }
  return 1;
}

/* Checks everything a sampler or the insert path relies on, so that a snapshot with a
 * valid checksum but inconsistent content (a bug, or a crafted file) is refused. */
static const char *check_loaded(sac_replay_shard_t *sh, uint64_t size) {
  sac_replay_storage_t *st = &sh->st;
  uint64_t filled = sac_replay_storage_filled(st), cap = sh->cfg.capacity;
  uint64_t ready = 0;
  for (uint64_t s = 0; s < filled; s++) {
    uint8_t f = *sac_replay_flags(st, s);
    if (f & ~(SAC_SLOT_TERM | SAC_SLOT_TRUNC | SAC_SLOT_READY | SAC_SLOT_OBS))
      return "unknown slot flags";
    if (!(f & SAC_SLOT_READY)) {
      if (sh->prioritized && sh->tree.leaf[s] != 0.0f)
        return "priority on a slot without a transition";
      continue;
    }
    ready++;
    uint32_t nx = *sac_replay_next(st, s);
    if (!(f & SAC_SLOT_OBS) || nx >= filled || !(*sac_replay_flags(st, nx) & SAC_SLOT_OBS))
      return "transition without a valid next observation";
    /* the next observation is always allocated after its transition */
    uint64_t age_s = (st->cursor + cap - 1 - s) % cap, age_n = (st->cursor + cap - 1 - nx) % cap;
    if (age_n >= age_s)
      return "next observation older than its transition";
    float r = *sac_replay_reward(st, s);
    if (!isfinite(r) || !row_finite(sac_replay_obs(st, s), sh->cfg.obs_dim, sh->cfg.obs_f16) ||
        !row_finite(sac_replay_obs(st, nx), sh->cfg.obs_dim, sh->cfg.obs_f16) ||
        !row_finite(sac_replay_act(st, s), sh->cfg.act_dim, sh->cfg.act_f16))
      return "non-finite values";
    if (sh->prioritized && !(isfinite(sh->tree.leaf[s]) && sh->tree.leaf[s] >= 0.0f))
      return "invalid priority";
  }
  if (ready != size)
    return "transition count does not match the header";
  return NULL;
}

/* The metadata block of the snapshot at path, checked for what the readers below use. */
static int read_snapshot_meta(const char *path, uint64_t m[M_COUNT]) {
  sac_snap_reader_t r;
  int rc = sac_snap_reader_open(&r, path, SAC_SNAP_KIND_REPLAY);
  if (rc)
    return rc;
  rc = sac_snap_read(&r, m, M_COUNT * sizeof *m) != 0 ? SAC_EPROTO : 0;
  sac_snap_reader_close(&r);
  if (rc)
    return rc;
  if (m[M_VERSION] != PAYLOAD_VERSION && m[M_VERSION] != 1)
    return SAC_EVERSION;
  if (m[M_SHARD] >= SAC_WIRE_MAX_SHARDS || m[M_CAPACITY] >= UINT32_MAX || m[M_OBS_DIM] > (1u << 20) ||
      m[M_ACT_DIM] > (1u << 20))
    return SAC_EPROTO;
  return 0;
}

int sac_replay_shard_resume_capacity(const char *path, uint64_t sized, uint64_t *capacity, int *wrapped) {
  uint64_t m[M_COUNT];
  int rc = read_snapshot_meta(path, m);
  if (rc)
    return rc;
  *wrapped = m[M_ALLOC] > m[M_CAPACITY];
  *capacity = *wrapped || m[M_CAPACITY] > sized ? m[M_CAPACITY] : sized;
  return 0;
}

int sac_replay_shard_snapshot_config(const char *path, sac_replay_shard_config_t *cfg) {
  uint64_t m[M_COUNT];
  int rc = read_snapshot_meta(path, m);
  if (rc)
    return rc;
  cfg->shard_id = (uint32_t)m[M_SHARD];
  cfg->capacity = m[M_CAPACITY];
  cfg->obs_dim = (uint32_t)m[M_OBS_DIM];
  cfg->act_dim = (uint32_t)m[M_ACT_DIM];
  cfg->obs_f16 = m[M_OBS_F16] != 0;
  cfg->act_f16 = m[M_ACT_F16] != 0;
  cfg->sampler = m[M_SAMPLER] ? SAC_REPLAY_PRIORITIZED : SAC_REPLAY_UNIFORM;
  if (cfg->max_batch_rows > cfg->capacity / 4) /* what shard_new demands */
    cfg->max_batch_rows = (uint32_t)(cfg->capacity / 4);
  return 0;
}

/* Reads n provenance entries (storage order: end serials never decrease and never pass
 * alloc). NULL, or why the section is refused. */
static const char *load_provenance(sac_replay_shard_t *sh, sac_snap_reader_t *r, uint64_t n, uint64_t alloc) {
  sac_replay_prov_reset(&sh->prov);
  if (n > alloc) /* every stored batch takes at least one slot */
    return "provenance index longer than the slots allocated";
  uint64_t prev = 0;
  for (uint64_t i = 0; i < n; i++) {
    sac_replay_prov_entry_t e;
    if (sac_snap_read(r, &e, sizeof e))
      return "provenance index truncated";
    if (e.end < prev || e.end > alloc || e.rows == 0)
      return "provenance entry out of order or out of range";
    prev = e.end;
    if (sac_replay_prov_add(&sh->prov, e.actor, e.session, e.seq, e.rows, e.end) != 0)
      return "out of memory for the provenance index";
  }
  return NULL;
}

int sac_replay_shard_load(sac_replay_shard_t *sh, const char *path) {
  sac_snap_reader_t r;
  int rc = sac_snap_reader_open(&r, path, SAC_SNAP_KIND_REPLAY);
  if (rc)
    return rc;
  uint64_t m[M_COUNT];
  const char *why = NULL;
  if (sac_snap_read(&r, m, sizeof m) != 0) {
    sac_snap_reader_close(&r);
    SAC_ERROR("replay", "snapshot %s: payload too short for its metadata", path);
    return SAC_EPROTO;
  }
  if (m[M_VERSION] != PAYLOAD_VERSION && m[M_VERSION] != 1) { /* 1: before provenance */
    sac_snap_reader_close(&r);
    SAC_ERROR("replay", "snapshot %s: payload version %llu, expected 1 or %u", path,
              (unsigned long long)m[M_VERSION], PAYLOAD_VERSION);
    return SAC_EVERSION;
  }
  /* A larger shard may take a snapshot whose ring never wrapped: its slots 0..alloc-1 are
   * the same slots here (a resumed embedded run whose step budget, and so its replay
   * capacity, grew: learner/service.c sizes the replay to the run). */
  int grows = m[M_CAPACITY] < sh->cfg.capacity && m[M_ALLOC] <= m[M_CAPACITY];
  if ((m[M_CAPACITY] != sh->cfg.capacity && !grows) || m[M_OBS_DIM] != sh->cfg.obs_dim ||
      m[M_ACT_DIM] != sh->cfg.act_dim || m[M_OBS_F16] != (uint64_t)(sh->cfg.obs_f16 != 0) ||
      m[M_ACT_F16] != (uint64_t)(sh->cfg.act_f16 != 0) || m[M_SAMPLER] != (uint64_t)sh->prioritized) {
    sac_snap_reader_close(&r);
    SAC_ERROR(
        "replay",
        "snapshot %s was written by a shard with capacity %llu, obs %llu, act %llu, fp16 obs/act %llu/%llu, "
        "sampler %s; this shard has %llu, %u, %u, %d/%d, %s",
        path, (unsigned long long)m[M_CAPACITY], (unsigned long long)m[M_OBS_DIM],
        (unsigned long long)m[M_ACT_DIM], (unsigned long long)m[M_OBS_F16], (unsigned long long)m[M_ACT_F16],
        m[M_SAMPLER] ? "prioritized" : "uniform", (unsigned long long)sh->cfg.capacity, sh->cfg.obs_dim,
        sh->cfg.act_dim, sh->cfg.obs_f16 != 0, sh->cfg.act_f16 != 0,
        sh->prioritized ? "prioritized" : "uniform");
    return SAC_ECONFIG;
  }
  if (m[M_SHARD] != sh->cfg.shard_id) {
    if (!sh->cfg.adopt_snapshot) {
      /* serving it would hand out another shard's data under this id and ack that
       * shard's actors' new batches as duplicates */
      sac_snap_reader_close(&r);
      SAC_ERROR("replay",
                "snapshot %s belongs to shard %llu, not to this shard %u: refusing it (check shard_id and "
                "snapshot_path, or start with adopt_snapshot=1 to take it over)",
                path, (unsigned long long)m[M_SHARD], sh->cfg.shard_id);
      return SAC_ESTATE;
    }
    SAC_WARN("replay", "snapshot %s belongs to shard %llu, adopted as shard %u (adopt_snapshot=1)", path,
             (unsigned long long)m[M_SHARD], sh->cfg.shard_id);
  }
  sac_replay_storage_t *st = &sh->st;
  sac_replay_storage_reset(st);
  memset(sh->actors, 0, ((size_t)sh->actors_mask + 1) * sizeof *sh->actors);
  sh->n_actors = 0;
  uint64_t alloc = m[M_ALLOC];
  uint64_t filled = alloc < sh->cfg.capacity ? alloc : sh->cfg.capacity;
  st->alloc_count = alloc;
  st->cursor = alloc % sh->cfg.capacity;
  st->laps = alloc / sh->cfg.capacity;
  rc = SAC_EPROTO;
  if (m[M_SIZE] > filled || m[M_N_ACTORS] > sh->cfg.max_actors ||
      m[M_N_STREAMS] > (uint64_t)st->streams_mask + 1) {
    why = "counts out of range";
    goto bad;
  }
  if (sac_replay_storage_read_fields(st, filled, snap_get, &r) ||
      (sh->prioritized && sac_snap_read(&r, sh->tree.leaf, filled * sizeof(float)))) {
    why = "payload shorter than its metadata says";
    goto bad;
  }
  for (uint64_t i = 0; i < m[M_N_ACTORS]; i++) {
    actor_rec_t rec;
    if (sac_snap_read(&r, &rec, sizeof rec)) {
      why = "actor table truncated";
      goto bad;
    }
    actor_t *a = actor_get(sh, rec.actor, 1);
    if (!a || a->session || a->last) {
      why = "duplicate actor in the actor table";
      goto bad;
    }
    a->session = rec.session;
    a->last = rec.last;
    a->bits = rec.bits;
    a->active_ns = sac_clock_ns(); /* idle time counts from the restart */
  }
  for (uint64_t i = 0; i < m[M_N_STREAMS]; i++) {
    sac_replay_stream_t e;
    if (sac_snap_read(&r, &e, sizeof e)) {
      why = "stream table truncated";
      goto bad;
    }
    if (e.serial1 == 0 || e.serial1 > alloc) {
      why = "stream entry out of range";
      goto bad;
    }
    sac_replay_storage_stream_put(st, e.actor, e.env, e.serial1 - 1);
  }
  why = load_provenance(sh, &r, m[M_VERSION] >= 2 ? m[M_N_PROV] : 0, alloc);
  if (why)
    goto bad;
  if (r.read_bytes != r.payload_bytes) {
    why = "trailing bytes after the payload";
    goto bad;
  }
  if (sh->prioritized)
    for (uint64_t s = filled; s < sh->cfg.capacity; s++)
      sh->tree.leaf[s] = 0.0f;
  why = check_loaded(sh, m[M_SIZE]);
  if (why)
    goto bad;
  st->size = m[M_SIZE];
  st->rows_inserted = m[M_ROWS];
  st->obs_only_slots = m[M_OBS_ONLY];
  st->tails_reused = m[M_TAILS];
  if (sh->prioritized) {
    double ml = bitsd(m[M_MAX_LEAF]);
    sh->tree.max_leaf = (isfinite(ml) && ml > 0.0 && ml < 3.0e38) ? (float)ml : 1.0f;
    sac_replay_sumtree_rebuild(&sh->tree);
  }
  double diff = bitsd(m[M_LIM_DIFF]);
  sh->lim.inserted = m[M_LIM_INS];
  sh->lim.sampled = m[M_LIM_SMP];
  sh->lim.diff = isfinite(diff) ? diff : 0.0;
  sh->inserted_batches = m[M_BATCHES];
  sh->duplicate_batches = m[M_DUPS];
  sh->sampled_rows = m[M_SAMPLED];
  sh->sample_batches = m[M_SAMPLE_BATCHES];
  sh->prio_updates = m[M_PRIO];
  sh->prio_stale = m[M_PRIO_STALE];
  sh->prio_foreign = m[M_PRIO_FOREIGN];
  sh->acked_lost = m[M_LOST];
  sac_snap_reader_close(&r);
  SAC_DEBUG("replay", "restored %llu transitions (%llu slots used) from %s", (unsigned long long)st->size,
            (unsigned long long)filled, path);
  return 0;
bad:
  sac_snap_reader_close(&r);
  SAC_ERROR("replay", "snapshot %s refused: %s; the shard is left empty", path,
            why ? why : "invalid content");
  sac_replay_storage_reset(st);
  memset(sh->actors, 0, ((size_t)sh->actors_mask + 1) * sizeof *sh->actors);
  sh->n_actors = 0;
  sac_replay_prov_reset(&sh->prov);
  return rc;
}
