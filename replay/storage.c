/* The structure-of-arrays ring of a shard (see storage.h). */
#include "replay/storage.h"

#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/hugepages.h"
#include "replay/sampler.h"

static uint32_t pow2_at_least(uint64_t x) {
  uint64_t p = 16;
  while (p < x)
    p <<= 1;
  return (uint32_t)p;
}

int sac_replay_storage_init(sac_replay_storage_t *st, const sac_replay_storage_config_t *cfg) {
  memset(st, 0, sizeof *st);
  if (cfg->obs_dim == 0 || cfg->act_dim == 0 || cfg->obs_dim > 65536 || cfg->act_dim > 65536 ||
      cfg->max_rows == 0 || cfg->max_rows > (1u << 24) || cfg->capacity >= UINT32_MAX ||
      cfg->capacity < 4ull * cfg->max_rows || cfg->max_streams == 0 || cfg->max_streams > (1u << 28))
    return SAC_EINVAL;
  st->cfg = *cfg;
  st->obs_row = (size_t)cfg->obs_dim * (cfg->obs_f16 ? 2 : 4);
  st->act_row = (size_t)cfg->act_dim * (cfg->act_f16 ? 2 : 4);
  size_t cap = (size_t)cfg->capacity;
  st->act_at = (SAC_REC_OBS + st->obs_row + 3) & ~(size_t)3;
  st->flags_at = st->act_at + st->act_row;
  st->rec = (st->flags_at + 1 + 3) & ~(size_t)3;
  st->recs_bytes = cap * st->rec;
  st->recs = sac_hugepages_calloc(st->recs_bytes, &st->recs_mem); /* read at random */
  st->bounce_size = SAC_REPLAY_BOUNCE; /* at least one row of each field */
  st->bounce_size = st->obs_row > st->bounce_size ? st->obs_row : st->bounce_size;
  st->bounce_size = st->act_row > st->bounce_size ? st->act_row : st->bounce_size;
  st->bounce = malloc(st->bounce_size);
  uint32_t ns = pow2_at_least(cfg->max_streams);
  st->streams = calloc(ns, sizeof *st->streams);
  st->streams_mask = ns - 1;
  uint32_t ne = pow2_at_least(2ull * cfg->max_rows);
  st->envmap = calloc(ne, sizeof *st->envmap);
  st->envmap_mask = ne - 1;
  st->row16 = malloc((size_t)cfg->obs_dim * 2);
  if (!st->recs || !st->bounce || !st->streams || !st->envmap || !st->row16) {
    sac_replay_storage_close(st);
    return SAC_ENOMEM;
  }
  return 0;
}

void sac_replay_storage_close(sac_replay_storage_t *st) {
  sac_hugepages_free(st->recs_mem, st->recs_bytes);
  free(st->bounce);
  free(st->streams);
  free(st->envmap);
  free(st->row16);
  sac_replay_sumtree_t *tree = st->tree;
  memset(st, 0, sizeof *st);
  st->tree = tree;
}

void sac_replay_storage_reset(sac_replay_storage_t *st) {
  /* slots past the filled ones were never written: their flags are still zero */
  for (uint64_t s = 0, filled = sac_replay_storage_filled(st); s < filled; s++)
    *sac_replay_flags(st, s) = 0;
  memset(st->streams, 0, ((size_t)st->streams_mask + 1) * sizeof *st->streams);
  st->alloc_count = st->cursor = st->laps = st->size = 0;
  st->rows_inserted = st->obs_only_slots = st->tails_reused = 0;
  if (st->tree) {
    memset(st->tree->leaf, 0, st->tree->n * sizeof(float));
    st->tree->max_leaf = 1.0f;
    sac_replay_sumtree_rebuild(st->tree);
  }
}

/* ------------------------------------------------------------------ slots */

static uint32_t alloc_slot(sac_replay_storage_t *st) {
  uint32_t s = (uint32_t)st->cursor;
  if (*sac_replay_flags(st, s) & SAC_SLOT_READY) {
    st->size--;
    if (st->tree)
      sac_replay_sumtree_set(st->tree, s, 0.0f);
  }
  *sac_replay_flags(st, s) = 0;
  st->alloc_count++;
  if (++st->cursor == st->cfg.capacity) {
    st->cursor = 0;
    st->laps++;
  }
  return s;
}

static void mark_ready(sac_replay_storage_t *st, uint32_t s, uint32_t next) {
  *sac_replay_next(st, s) = next;
  *sac_replay_flags(st, s) |= SAC_SLOT_READY;
  st->size++;
  if (st->tree)
    sac_replay_sumtree_set(st->tree, s, st->tree->max_leaf);
}

static void write_obs(sac_replay_storage_t *st, uint32_t s, const float *row) {
  uint8_t *dst = sac_replay_obs(st, s);
  if (st->cfg.obs_f16) {
    uint16_t *h = (uint16_t *)dst;
    for (uint32_t i = 0; i < st->cfg.obs_dim; i++)
      h[i] = sac_wire_f32_to_f16(row[i], 1);
  } else {
    memcpy(dst, row, st->obs_row);
  }
  *sac_replay_flags(st, s) |= SAC_SLOT_OBS;
}

static int obs_equal(sac_replay_storage_t *st, uint32_t s, const float *row) {
  const uint8_t *have = sac_replay_obs(st, s);
  if (!st->cfg.obs_f16)
    return memcmp(have, row, st->obs_row) == 0;
  for (uint32_t i = 0; i < st->cfg.obs_dim; i++)
    st->row16[i] = sac_wire_f32_to_f16(row[i], 1);
  return memcmp(have, st->row16, st->obs_row) == 0;
}

static void write_act(sac_replay_storage_t *st, uint32_t s, const float *row) {
  uint8_t *dst = sac_replay_act(st, s);
  if (st->cfg.act_f16) {
    uint16_t *h = (uint16_t *)dst;
    for (uint32_t i = 0; i < st->cfg.act_dim; i++)
      h[i] = sac_wire_f32_to_f16(row[i], 1);
  } else {
    memcpy(dst, row, st->act_row);
  }
}

/* ------------------------------------------------------------------ streams */

static uint32_t hash64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return (uint32_t)x;
}

/* The stream table is a direct-mapped cache: losing an entry to a collision only costs
 * one extra slot for that stream's next batch, never correctness. */
static sac_replay_stream_t *stream_slot(sac_replay_storage_t *st, uint32_t actor, uint32_t env) {
  return &st->streams[hash64(((uint64_t)actor << 32) | env) & st->streams_mask];
}

/* The pending tail slot of (actor, env) if it still holds the given observation and
 * cannot be overwritten by the `budget` allocations this batch may make. */
static uint32_t stream_take(sac_replay_storage_t *st, uint32_t actor, uint32_t env, const float *obs,
                            uint64_t budget) {
  sac_replay_stream_t *e = stream_slot(st, actor, env);
  if (e->serial1 == 0 || e->actor != actor || e->env != env)
    return SAC_SLOT_NONE;
  uint64_t serial = e->serial1 - 1;
  e->serial1 = 0;
  if (serial + st->cfg.capacity < st->alloc_count + budget)
    return SAC_SLOT_NONE; /* overwritten already, or would be during this batch */
  uint32_t s = (uint32_t)(serial % st->cfg.capacity);
  if ((*sac_replay_flags(st, s) & (SAC_SLOT_OBS | SAC_SLOT_READY)) != SAC_SLOT_OBS)
    return SAC_SLOT_NONE;
  if (!obs_equal(st, s, obs))
    return SAC_SLOT_NONE;
  return s;
}

void sac_replay_storage_stream_put(sac_replay_storage_t *st, uint32_t actor, uint32_t env, uint64_t serial) {
  sac_replay_stream_t *e = stream_slot(st, actor, env);
  e->actor = actor;
  e->env = env;
  e->serial1 = serial + 1;
}

/* ------------------------------------------------------------------ per-batch env map */

static sac_replay_envmap_t *envmap_get(sac_replay_storage_t *st, uint32_t env, int *first) {
  uint32_t mask = st->envmap_mask;
  for (uint32_t h = hash64(env) & mask, probes = 0; probes <= mask; h = (h + 1) & mask, probes++) {
    sac_replay_envmap_t *m = &st->envmap[h];
    if (m->stamp != st->stamp) {
      m->stamp = st->stamp;
      m->env = env;
      m->open = SAC_SLOT_NONE;
      if (first)
        *first = 1;
      return m;
    }
    if (m->env == env) {
      if (first)
        *first = 0;
      return m;
    }
  }
  return NULL; /* cannot happen: the map has twice as many entries as rows */
}

/* ------------------------------------------------------------------ insert */

int sac_replay_storage_insert(sac_replay_storage_t *st, uint32_t actor_id, const sac_wire_transitions_t *t,
                              uint32_t *stored) {
  *stored = 0;
  if (t->obs_dim != st->cfg.obs_dim || t->act_dim != st->cfg.act_dim || t->n == 0 ||
      t->n > st->cfg.max_rows || t->n_next > t->n || t->n_tail > t->n)
    return SAC_EINVAL;
  const uint32_t od = st->cfg.obs_dim, ad = st->cfg.act_dim;
  const uint64_t budget = (uint64_t)t->n + t->n_next + t->n_tail;
  if (++st->stamp == 0) {
    memset(st->envmap, 0, ((size_t)st->envmap_mask + 1) * sizeof *st->envmap);
    st->stamp = 1;
  }
  uint32_t k = 0, count = 0;
  for (uint32_t r = 0; r < t->n; r++) {
    int first = 0;
    sac_replay_envmap_t *m = envmap_get(st, t->env_ids[r], &first);
    if (!m)
      break;
    const float *obs = t->obs + (size_t)r * od;
    uint32_t s = first ? stream_take(st, actor_id, t->env_ids[r], obs, budget) : SAC_SLOT_NONE;
    if (s != SAC_SLOT_NONE) {
      st->tails_reused++;
      st->obs_only_slots--;
    } else {
      s = alloc_slot(st);
      write_obs(st, s, obs);
    }
    if (m->open != SAC_SLOT_NONE)
      mark_ready(st, m->open, s);
    m->open = SAC_SLOT_NONE;
    write_act(st, s, t->action + (size_t)r * ad);
    *sac_replay_reward(st, s) = t->reward[r];
    *sac_replay_next(st, s) = SAC_SLOT_NONE;
    *sac_replay_flags(st, s) = (uint8_t)(SAC_SLOT_OBS | (t->terminated[r] ? SAC_SLOT_TERM : 0u) |
                                         (t->truncated[r] ? SAC_SLOT_TRUNC : 0u));
    count++;
    if (t->terminated[r] | t->truncated[r]) {
      if (k < t->n_next && t->next_obs_rows[k] == r) {
        uint32_t f = alloc_slot(st);
        write_obs(st, f, t->next_obs + (size_t)k * od);
        st->obs_only_slots++;
        mark_ready(st, s, f);
        k++;
      }
    } else {
      m->open = s;
    }
  }
  for (uint32_t j = 0; j < t->n_tail; j++) {
    int first = 0;
    sac_replay_envmap_t *m = envmap_get(st, t->tail_env_ids[j], &first);
    if (!m || first || m->open == SAC_SLOT_NONE)
      continue; /* a tail for an env that ended its episode: not needed */
    uint64_t serial = st->alloc_count;
    uint32_t f = alloc_slot(st);
    write_obs(st, f, t->tail_obs + (size_t)j * od);
    st->obs_only_slots++;
    mark_ready(st, m->open, f);
    m->open = SAC_SLOT_NONE;
    sac_replay_storage_stream_put(st, actor_id, t->tail_env_ids[j], serial);
  }
  st->rows_inserted += count;
  *stored = count;
  return 0;
}

/* ------------------------------------------------------------------ gather */

static void read_row(const uint8_t *src, int f16, uint32_t dim, unsigned char *dst) {
  if (f16) {
    const uint16_t *h = (const uint16_t *)src;
    for (uint32_t i = 0; i < dim; i++) {
      float f = sac_wire_f16_to_f32(h[i]);
      memcpy(dst + 4 * (size_t)i, &f, 4);
    }
  } else {
    memcpy(dst, src, (size_t)dim * 4);
  }
}

/* The gathers ask for rows ahead of copying them: slot i + GATHER_AHEAD's observation
 * and action rows, reward and next index, and (GATHER_AHEAD / 2 ahead, when that index has
 * had time to arrive) its next observation's row. In a buffer larger than the caches each
 * row is a miss; asked for ahead, more of the misses overlap. They are asked for as
 * non-temporal (each row is read once, into the reply): on the x86 cores measured that
 * fills the first-level cache without evicting from the second what stays there between
 * samples, the prioritised shard's sum tree above all (on the 2-core Intel machine, paired
 * runs of a prioritised shard over TCP: median CPU per update 115 us before, 106 after). */
#define GATHER_AHEAD 8
/* Below this many bytes of observation rows the buffer is in the caches and asking ahead
 * only costs instructions (a 256-row sample from 30,000 rows took 12 us with it, 8.5 us
 * without; from a million rows 47 us with it, 54 us without). */
#define GATHER_AHEAD_BYTES ((size_t)8 << 20)

/* Asks for the lines of [p, p + bytes): the first four and the last (a record or row may
 * start anywhere in a line; past four lines the hardware's own prefetcher follows). */
static inline void prefetch_span(const uint8_t *p, size_t bytes) {
  const size_t head = bytes < 4 * 64 ? bytes : 4 * 64;
  for (size_t o = 0; o < head; o += 64)
    __builtin_prefetch(p + o, 0, 0);
  __builtin_prefetch(p + bytes - 1, 0, 0);
}

static inline void gather_ahead(const sac_replay_storage_t *st, const uint32_t *slots, uint32_t n,
                                uint32_t i) {
  if (i + GATHER_AHEAD < n)
    prefetch_span(sac_replay_rec(st, slots[i + GATHER_AHEAD]), st->rec);
  if (i + GATHER_AHEAD / 2 < n)
    prefetch_span(sac_replay_obs(st, *sac_replay_next(st, slots[i + GATHER_AHEAD / 2])), st->obs_row);
}

static int gather_large(const sac_replay_storage_t *st) {
  return sac_replay_storage_filled(st) * st->rec >= GATHER_AHEAD_BYTES;
}

static void gather_start(const sac_replay_storage_t *st, const uint32_t *slots, uint32_t n) {
  for (uint32_t i = 0; i < n && i < GATHER_AHEAD; i++)
    prefetch_span(sac_replay_rec(st, slots[i]), st->rec);
}

void sac_replay_storage_gather(const sac_replay_storage_t *st, const uint32_t *slots, uint32_t n,
                               void *obs_out, void *action_out, void *reward_out, void *terminated_out,
                               void *next_obs_out) {
  const uint32_t od = st->cfg.obs_dim, ad = st->cfg.act_dim;
  unsigned char *obs = obs_out, *action = action_out, *reward = reward_out, *terminated = terminated_out,
                *next_obs = next_obs_out;
  const size_t ob = (size_t)od * 4, ab = (size_t)ad * 4;
  const int ahead = gather_large(st);
  if (ahead)
    gather_start(st, slots, n);
  for (uint32_t i = 0; i < n; i++) {
    if (ahead)
      gather_ahead(st, slots, n, i);
    uint32_t s = slots[i];
    read_row(sac_replay_obs(st, s), st->cfg.obs_f16, od, obs + i * ob);
    read_row(sac_replay_obs(st, *sac_replay_next(st, s)), st->cfg.obs_f16, od, next_obs + i * ob);
    read_row(sac_replay_act(st, s), st->cfg.act_f16, ad, action + i * ab);
    const float t = (*sac_replay_flags(st, s) & SAC_SLOT_TERM) ? 1.0f : 0.0f;
    memcpy(reward + 4 * (size_t)i, sac_replay_reward(st, s), 4);
    memcpy(terminated + 4 * (size_t)i, &t, 4);
  }
}

/* One row into binary16; returns the values clamped to +-65504. */
static uint32_t read_row16(const uint8_t *src, int f16, uint32_t dim, uint16_t *dst) {
  if (f16) {
    memcpy(dst, src, (size_t)dim * 2);
    return 0;
  }
  return (uint32_t)sac_wire_f32_to_f16_n((const float *)(const void *)src, dim, dst);
}

void sac_replay_storage_gather16(const sac_replay_storage_t *st, const uint32_t *slots, uint32_t n,
                                 uint16_t *obs, uint16_t *action, float *reward, float *terminated,
                                 uint16_t *next_obs, uint64_t *clamped) {
  const uint32_t od = st->cfg.obs_dim, ad = st->cfg.act_dim;
  uint64_t c = 0;
  const int ahead = gather_large(st);
  if (ahead)
    gather_start(st, slots, n);
  for (uint32_t i = 0; i < n; i++) {
    if (ahead)
      gather_ahead(st, slots, n, i);
    uint32_t s = slots[i];
    c += read_row16(sac_replay_obs(st, s), st->cfg.obs_f16, od, obs + (size_t)i * od);
    c += read_row16(sac_replay_obs(st, *sac_replay_next(st, s)), st->cfg.obs_f16, od,
                    next_obs + (size_t)i * od);
    c += read_row16(sac_replay_act(st, s), st->cfg.act_f16, ad, action + (size_t)i * ad);
    reward[i] = *sac_replay_reward(st, s);
    terminated[i] = (*sac_replay_flags(st, s) & SAC_SLOT_TERM) ? 1.0f : 0.0f;
  }
  *clamped += c;
}

double sac_replay_storage_bytes_per_slot(const sac_replay_storage_t *st) { return (double)st->rec; }

/* ------------------------------------------------------------------ snapshot fields */

/* Field f (obs, act, reward, next, flags: the snapshot's order) of a record: its offset,
 * and its bytes in *bytes. */
static size_t field_at(const sac_replay_storage_t *st, int f, size_t *bytes) {
  switch (f) {
  case 0:
    *bytes = st->obs_row;
    return SAC_REC_OBS;
  case 1:
    *bytes = st->act_row;
    return st->act_at;
  case 2:
    *bytes = 4;
    return SAC_REC_REWARD;
  case 3:
    *bytes = 4;
    return SAC_REC_NEXT;
  default:
    *bytes = 1;
    return st->flags_at;
  }
}

/* Every field's rows of slots [0, filled) through the bounce buffer: out of the records
 * to io (to_io), or from io into the records. */
static int fields_io(const sac_replay_storage_t *st, uint64_t filled, int to_io, sac_replay_fields_io_t io,
                     void *ctx) {
  for (int f = 0; f < 5; f++) {
    size_t bytes, at = field_at(st, f, &bytes);
    const uint64_t per = st->bounce_size / bytes;
    for (uint64_t s0 = 0; s0 < filled; s0 += per) {
      const uint64_t m = filled - s0 < per ? filled - s0 : per;
      if (to_io)
        for (uint64_t k = 0; k < m; k++)
          memcpy(st->bounce + k * bytes, sac_replay_rec(st, s0 + k) + at, bytes);
      int rc = io(ctx, st->bounce, (size_t)m * bytes);
      if (rc)
        return rc;
      if (!to_io)
        for (uint64_t k = 0; k < m; k++)
          memcpy(sac_replay_rec(st, s0 + k) + at, st->bounce + k * bytes, bytes);
    }
  }
  return 0;
}

int sac_replay_storage_write_fields(const sac_replay_storage_t *st, uint64_t filled, sac_replay_fields_io_t put,
                                    void *ctx) {
  return fields_io(st, filled, 1, put, ctx);
}

int sac_replay_storage_read_fields(sac_replay_storage_t *st, uint64_t filled, sac_replay_fields_io_t get,
                                   void *ctx) {
  return fields_io(st, filled, 0, get, ctx);
}

double sac_replay_storage_bytes_per_transition(const sac_replay_storage_t *st, double extra_bytes_per_slot) {
  double per_slot = sac_replay_storage_bytes_per_slot(st) + extra_bytes_per_slot;
  double fixed = (double)(((size_t)st->streams_mask + 1) * sizeof *st->streams +
                          ((size_t)st->envmap_mask + 1) * sizeof *st->envmap);
  double cap = (double)st->cfg.capacity;
  double total = per_slot * cap + fixed;
  uint64_t filled = sac_replay_storage_filled(st);
  /* share of slots that are transitions (the rest hold episode-final or pending obs) */
  double share = (filled && st->size) ? (double)st->size / (double)filled : 1.0;
  return total / (cap * share);
}
