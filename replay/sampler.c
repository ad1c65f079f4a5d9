/* Uniform and prioritised sampling (see sampler.h). */
#include "replay/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

int sac_replay_sumtree_init(sac_replay_sumtree_t *t, uint64_t n) {
  memset(t, 0, sizeof *t);
  if (n == 0)
    return SAC_EINVAL;
  t->fen = calloc(n + 1, sizeof *t->fen);
  t->leaf = calloc(n, sizeof *t->leaf);
  if (!t->fen || !t->leaf) {
    sac_replay_sumtree_close(t);
    return SAC_ENOMEM;
  }
  t->n = n;
  t->top = 1;
  while (t->top * 2 <= n)
    t->top *= 2;
  t->max_leaf = 1.0f;
  return 0;
}

void sac_replay_sumtree_close(sac_replay_sumtree_t *t) {
  free(t->fen);
  free(t->leaf);
  memset(t, 0, sizeof *t);
}

void sac_replay_sumtree_rebuild(sac_replay_sumtree_t *t) {
  double total = 0.0;
  for (uint64_t i = 1; i <= t->n; i++) {
    t->fen[i] = (double)t->leaf[i - 1];
    total += t->fen[i];
  }
  for (uint64_t i = 1; i <= t->n; i++) {
    uint64_t j = i + (i & (~i + 1));
    if (j <= t->n)
      t->fen[j] += t->fen[i];
  }
  t->total = total;
  t->updates_since_rebuild = 0;
}

void sac_replay_sumtree_set(sac_replay_sumtree_t *t, uint64_t i, float v) {
  double delta = (double)v - (double)t->leaf[i];
  t->leaf[i] = v;
  if (delta == 0.0)
    return;
  for (uint64_t j = i + 1; j <= t->n; j += j & (~j + 1))
    t->fen[j] += delta;
  t->total += delta;
  if (++t->updates_since_rebuild >= t->n)
    sac_replay_sumtree_rebuild(t);
}

uint64_t sac_replay_sumtree_find(const sac_replay_sumtree_t *t, double u) {
  uint64_t pos = 0;
  for (uint64_t step = t->top; step; step >>= 1) {
    if (pos + step <= t->n && t->fen[pos + step] <= u) {
      pos += step;
      u -= t->fen[pos];
    }
  }
  return pos < t->n ? pos : t->n - 1;
}

/* Searches in a group: enough to keep a core's outstanding loads busy. */
#define FIND_GROUP 8

void sac_replay_sumtree_find_n(const sac_replay_sumtree_t *t, const double *u, size_t n, uint64_t *out) {
  for (size_t g = 0; g < n; g += FIND_GROUP) {
    const size_t m = n - g < FIND_GROUP ? n - g : FIND_GROUP;
    uint64_t pos[FIND_GROUP] = {0};
    double rest[FIND_GROUP];
    for (size_t k = 0; k < m; k++)
      rest[k] = u[g + k];
    for (uint64_t step = t->top; step; step >>= 1)
      for (size_t k = 0; k < m; k++) /* independent of one another: the loads overlap */
        if (pos[k] + step <= t->n && t->fen[pos[k] + step] <= rest[k]) {
          pos[k] += step;
          rest[k] -= t->fen[pos[k]];
        }
    for (size_t k = 0; k < m; k++)
      out[g + k] = pos[k] < t->n ? pos[k] : t->n - 1;
  }
}

/* ------------------------------------------------------------------ uniform */

static uint32_t ready_near(const sac_replay_storage_t *st, uint64_t filled, uint64_t s) {
  for (uint64_t i = 0; i < filled; i++) {
    uint64_t j = s + i;
    if (j >= filled)
      j -= filled;
    if (st->flags[j] & SAC_SLOT_READY)
      return (uint32_t)j;
  }
  return SAC_SLOT_NONE;
}

static uint32_t uniform_one(const sac_replay_storage_t *st, sac_rng_t *rng, uint64_t filled) {
  /* Rejection sampling is exactly uniform; observation-only slots are a small share
   * (one per episode end and one per open stream), so 64 misses in a row only happen
   * on a pathological buffer, where the forward scan still terminates. */
  uint64_t s = 0;
  for (int tries = 0; tries < 64; tries++) {
    s = sac_rng_below32(rng, (uint32_t)filled);
    if (st->flags[s] & SAC_SLOT_READY)
      return (uint32_t)s;
  }
  return ready_near(st, filled, s);
}

/* Every row's first draw is made before any is checked, and its flag byte asked for
 * (prefetched): in a large buffer each check is a cache miss, and this way they overlap
 * instead of coming one after another. A first draw that is not a transition is drawn
 * again as uniform_one draws, so each row is still uniform over the transitions. */
int sac_replay_sample_uniform(const sac_replay_storage_t *st, sac_rng_t *rng, uint32_t n, uint32_t *slots) {
  uint64_t filled = sac_replay_storage_filled(st);
  if (st->size == 0 || filled == 0)
    return SAC_EAGAIN;
  for (uint32_t i = 0; i < n; i++) {
    slots[i] = sac_rng_below32(rng, (uint32_t)filled);
    __builtin_prefetch(st->flags + slots[i]);
  }
  for (uint32_t i = 0; i < n; i++)
    if (!(st->flags[slots[i]] & SAC_SLOT_READY))
      slots[i] = uniform_one(st, rng, filled);
  return 0;
}

/* ------------------------------------------------------------------ prioritised */

int sac_replay_sample_prioritized(const sac_replay_storage_t *st, const sac_replay_sumtree_t *t,
                                  sac_rng_t *rng, uint32_t n, float beta, uint32_t *slots, float *weights) {
  double total = t->total;
  uint64_t filled = sac_replay_storage_filled(st);
  if (st->size == 0 || !(total > 0.0) || filled == 0)
    return SAC_EAGAIN;
  /* every row's first pick, one point in each of n equal strata of the total, searched
   * side by side; a pick that is no transition (or of zero weight) is drawn again over
   * the whole total, one search at a time (rare: rounding at a stratum's edge) */
  double seg = total / n, u[FIND_GROUP * 32];
  uint64_t found[FIND_GROUP * 32];
  const uint32_t chunk = FIND_GROUP * 32;
  for (uint32_t i0 = 0; i0 < n; i0 += chunk) {
    const uint32_t m = n - i0 < chunk ? n - i0 : chunk;
    for (uint32_t k = 0; k < m; k++) {
      u[k] = ((double)(i0 + k) + sac_rng_uniform(rng)) * seg;
      if (u[k] >= total)
        u[k] = nextafter(total, 0.0);
    }
    sac_replay_sumtree_find_n(t, u, m, found);
    for (uint32_t k = 0; k < m; k++) {
      uint64_t j = found[k];
      uint32_t s =
          j < filled && (st->flags[j] & SAC_SLOT_READY) && t->leaf[j] > 0.0f ? (uint32_t)j : SAC_SLOT_NONE;
      for (int tries = 1; tries < 16 && s == SAC_SLOT_NONE; tries++) {
        double v = sac_rng_uniform(rng) * total;
        if (v >= total)
          v = nextafter(total, 0.0);
        j = sac_replay_sumtree_find(t, v);
        if (j < filled && (st->flags[j] & SAC_SLOT_READY) && t->leaf[j] > 0.0f)
          s = (uint32_t)j;
      }
      if (s == SAC_SLOT_NONE) /* only after rounding drift left zero-weight picks */
        s = uniform_one(st, rng, filled);
      slots[i0 + k] = s;
    }
  }
  /* w_i = (size p_i)^-beta / max_j w_j = (p_i / p_min)^-beta: float powers (weights are
   * float; powf is a fraction of pow's time) of ratios to the smallest picked priority */
  float pmin = INFINITY;
  for (uint32_t i = 0; i < n; i++)
    if (t->leaf[slots[i]] > 0.0f && t->leaf[slots[i]] < pmin)
      pmin = t->leaf[slots[i]];
  for (uint32_t i = 0; i < n; i++) {
    const float p = t->leaf[slots[i]];
    weights[i] = p > 0.0f && isfinite(pmin) ? powf(p / pmin, -beta) : (isfinite(pmin) ? 0.0f : 1.0f);
  }
  return 0;
}

int sac_replay_priority_set(const sac_replay_storage_t *st, sac_replay_sumtree_t *t, uint32_t slot,
                            uint32_t gen, float p, double alpha, double eps) {
  if (slot >= st->cfg.capacity || !(st->flags[slot] & SAC_SLOT_READY) ||
      (sac_replay_storage_generation(st, slot) & 0xFFFFFu) != (gen & 0xFFFFFu))
    return 0;
  double v = pow((double)p + eps, alpha);
  float fv = (float)v;
  if (!isfinite(fv))
    fv = 3.0e38f;
  sac_replay_sumtree_set(t, slot, fv);
  if (fv > t->max_leaf)
    t->max_leaf = fv;
  return 1;
}
