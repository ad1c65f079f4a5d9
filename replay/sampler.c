/* Uniform and prioritised sampling (see sampler.h). */
#include "replay/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/hugepages.h"
#include "common/vmath.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define FAN SAC_SUMTREE_FAN
#define GROUP SAC_SUMTREE_GROUP
#define LINE 64

double sac_replay_sumtree_bytes_per_leaf(void) {
  return (double)sizeof(float) + (double)(FAN * sizeof(double)) / (double)(FAN * GROUP);
}

/* Nodes at level l (0: the root's). */
static uint64_t level_nodes(const sac_replay_sumtree_t *t, uint32_t l) {
  return t->level_first[l + 1] - t->level_first[l];
}

int sac_replay_sumtree_init(sac_replay_sumtree_t *t, uint64_t n) {
  memset(t, 0, sizeof *t);
  if (n == 0)
    return SAC_EINVAL;
  /* level sizes from the bottom up: ceil(groups / 8), ceil(that / 8), ... down to 1 */
  uint64_t count[SAC_SUMTREE_MAX_LEVELS], c = ((n + GROUP - 1) / GROUP + FAN - 1) / FAN;
  uint32_t L = 0;
  for (;;) {
    count[L++] = c;
    if (c == 1)
      break;
    c = (c + FAN - 1) / FAN;
  }
  t->levels = L;
  t->level_first[0] = 0;
  for (uint32_t l = 0; l < L; l++) /* root first */
    t->level_first[l + 1] = t->level_first[l] + count[L - 1 - l];
  const uint64_t padded = count[0] * FAN * GROUP; /* whole bottom nodes: scans stay inside */
  /* searched at random (common/hugepages.h); pages never written stay unbacked, so a
   * shard sized for a long run pays for the slots it fills */
  t->leaf_bytes = padded * sizeof(float);
  t->node_bytes = t->level_first[L] * FAN * sizeof(double);
  t->leaf = sac_hugepages_calloc(t->leaf_bytes, &t->leaf_mem);
  t->node = sac_hugepages_calloc(t->node_bytes, &t->node_mem);
  if (!t->leaf || !t->node) {
    sac_replay_sumtree_close(t);
    return SAC_ENOMEM;
  }
  t->n = n;
  t->max_leaf = 1.0f;
  return 0;
}

void sac_replay_sumtree_close(sac_replay_sumtree_t *t) {
  sac_hugepages_free(t->leaf_mem, t->leaf_bytes);
  sac_hugepages_free(t->node_mem, t->node_bytes);
  memset(t, 0, sizeof *t);
}

void sac_replay_sumtree_rebuild(sac_replay_sumtree_t *t) {
  const uint32_t B = t->levels - 1;
  /* bottom nodes: running sums of their 8 groups of 16 leaves */
  for (uint64_t j = 0; j < level_nodes(t, B); j++) {
    double *s = t->node + (t->level_first[B] + j) * FAN, run = 0.0;
    const float *g = t->leaf + j * FAN * GROUP;
    for (int c = 0; c < FAN; c++) {
      double w = 0.0;
      for (int k = 0; k < GROUP; k++)
        w += (double)g[c * GROUP + k];
      s[c] = run += w;
    }
  }
  /* above: running sums of the children's totals (a child past the level's end weighs 0) */
  for (uint32_t l = B; l-- > 0;) {
    const uint64_t below = level_nodes(t, l + 1);
    for (uint64_t j = 0; j < level_nodes(t, l); j++) {
      double *s = t->node + (t->level_first[l] + j) * FAN, run = 0.0;
      for (uint64_t c = 0; c < FAN; c++) {
        const uint64_t ch = j * FAN + c;
        s[c] = run += ch < below ? t->node[(t->level_first[l + 1] + ch) * FAN + FAN - 1] : 0.0;
      }
    }
  }
  t->total = t->node[FAN - 1];
  t->updates_since_rebuild = 0;
}

#if defined(__SSE2__)
/* from[c]: the lanes k >= c all ones, the others zero */
static const uint64_t from[FAN][FAN]
    __attribute__((aligned(LINE))) = {{~0ull, ~0ull, ~0ull, ~0ull, ~0ull, ~0ull, ~0ull, ~0ull},
                                      {0, ~0ull, ~0ull, ~0ull, ~0ull, ~0ull, ~0ull, ~0ull},
                                      {0, 0, ~0ull, ~0ull, ~0ull, ~0ull, ~0ull, ~0ull},
                                      {0, 0, 0, ~0ull, ~0ull, ~0ull, ~0ull, ~0ull},
                                      {0, 0, 0, 0, ~0ull, ~0ull, ~0ull, ~0ull},
                                      {0, 0, 0, 0, 0, ~0ull, ~0ull, ~0ull},
                                      {0, 0, 0, 0, 0, 0, ~0ull, ~0ull},
                                      {0, 0, 0, 0, 0, 0, 0, ~0ull}};
#endif

/* Adds d to a node's running sums from child c on (with SSE2 a masked add of the whole
 * line, where the masked-off lanes add +0.0 and stay as they are: no loop whose length
 * changes from node to node). */
static inline void add_from(double *s, unsigned c, double d) {
#if defined(__SSE2__)
  const __m128d dd = _mm_set1_pd(d);
  const __m128d *m = (const __m128d *)from[c];
  _mm_store_pd(s, _mm_add_pd(_mm_load_pd(s), _mm_and_pd(dd, m[0])));
  _mm_store_pd(s + 2, _mm_add_pd(_mm_load_pd(s + 2), _mm_and_pd(dd, m[1])));
  _mm_store_pd(s + 4, _mm_add_pd(_mm_load_pd(s + 4), _mm_and_pd(dd, m[2])));
  _mm_store_pd(s + 6, _mm_add_pd(_mm_load_pd(s + 6), _mm_and_pd(dd, m[3])));
#else
  for (unsigned k = c; k < FAN; k++)
    s[k] += d;
#endif
}

/* Updates asked for this many ahead: their leaf and bottom-node lines. */
#define SET_AHEAD 8

static void set_prefetch(const sac_replay_sumtree_t *t, uint64_t i) {
  __builtin_prefetch(t->leaf + i, 1);
  __builtin_prefetch(t->node + (t->level_first[t->levels - 1] + i / (GROUP * FAN)) * FAN, 1);
}

/* A batch's changes go up the tree a level at a time: the changes to children of one
 * node next to one another in the list (as the updates of a stratified sample are: in
 * the order of their leaves) are added to it in one masked add each and passed up as one
 * change, so that the levels near the root, which every update crosses, take one add per
 * node touched instead of one per update. */
#define SET_CHUNK 256

static void add_level(sac_replay_sumtree_t *t, uint32_t l, uint64_t *child, double *d, size_t *m) {
  size_t up = 0;
  for (size_t k = 0; k < *m; k++) {
    const uint64_t node = child[k] / FAN;
    add_from(t->node + (t->level_first[l] + node) * FAN, (unsigned)(child[k] % FAN), d[k]);
    if (up > 0 && child[up - 1] == node) {
      d[up - 1] += d[k];
    } else {
      child[up] = node;
      d[up++] = d[k];
    }
  }
  *m = up;
}

void sac_replay_sumtree_set(sac_replay_sumtree_t *t, uint64_t i, float v) {
  double delta = (double)v - (double)t->leaf[i];
  t->leaf[i] = v;
  if (delta == 0.0)
    return;
  uint64_t group = i / GROUP;
  size_t m = 1;
  for (uint32_t l = t->levels; l-- > 0;)
    add_level(t, l, &group, &delta, &m);
  t->total = t->node[FAN - 1];
  if (++t->updates_since_rebuild >= t->n)
    sac_replay_sumtree_rebuild(t);
}

void sac_replay_sumtree_set_n(sac_replay_sumtree_t *t, const uint64_t *i, const float *v, size_t n) {
  uint64_t group[SET_CHUNK];
  double d[SET_CHUNK];
  for (size_t k = 0; k < n && k < SET_AHEAD; k++)
    set_prefetch(t, i[k]);
  for (size_t k0 = 0; k0 < n; k0 += SET_CHUNK) {
    const size_t end = n - k0 < SET_CHUNK ? n : k0 + SET_CHUNK;
    size_t m = 0;
    for (size_t k = k0; k < end; k++) { /* the leaves, and their changes by leaf group */
      if (k + SET_AHEAD < n)
        set_prefetch(t, i[k + SET_AHEAD]);
      const double delta = (double)v[k] - (double)t->leaf[i[k]];
      t->leaf[i[k]] = v[k];
      if (delta == 0.0)
        continue;
      if (m > 0 && group[m - 1] == i[k] / GROUP) {
        d[m - 1] += delta;
      } else {
        group[m] = i[k] / GROUP;
        d[m++] = delta;
      }
    }
    for (uint32_t l = t->levels; l-- > 0 && m > 0;)
      add_level(t, l, group, d, &m);
    t->total = t->node[FAN - 1];
    t->updates_since_rebuild += end - k0;
    if (t->updates_since_rebuild >= t->n)
      sac_replay_sumtree_rebuild(t);
  }
}

/* The child whose range holds u: the first whose running sum is above u (FAN when none
 * is, which rounding can make happen: see last_weighted). The 8 comparisons are
 * independent of one another: two at a time with SSE2, whose masks give the count. */
static inline unsigned pick_child(const double *s, double u) {
#if defined(__SSE2__)
  const __m128d v = _mm_set1_pd(u);
  const unsigned m = (unsigned)_mm_movemask_pd(_mm_cmple_pd(_mm_load_pd(s), v)) |
                     (unsigned)_mm_movemask_pd(_mm_cmple_pd(_mm_load_pd(s + 2), v)) << 2 |
                     (unsigned)_mm_movemask_pd(_mm_cmple_pd(_mm_load_pd(s + 4), v)) << 4 |
                     (unsigned)_mm_movemask_pd(_mm_cmple_pd(_mm_load_pd(s + 6), v)) << 6;
  return (unsigned)__builtin_ctz(~m); /* the running sums rise: the mask is 0..01..1 */
#else
  unsigned c = 0;
  while (c < FAN && s[c] <= u)
    c++;
  return c;
#endif
}

/* The last child of positive weight (FAN - 1 when none): where a point past the end of
 * a node's sums by rounding goes, so that it never lands on a child of zero weight. */
static inline unsigned last_weighted(const double *s) {
  for (unsigned c = FAN; c-- > 1;)
    if (s[c] > s[c - 1])
      return c;
  return 0;
}

/* One search's step down a node s: the child whose range holds *u, and *u made its
 * point within that child. A point past the node's end (rounding) becomes INFINITY, which
 * is past every node's end below too and so ends on the last leaf of positive weight. */
static inline uint64_t step(const double *s, double *u) {
  unsigned c = pick_child(s, *u);
  if (c == FAN) {
    c = last_weighted(s);
    *u = INFINITY;
  } else {
    /* the sums before child c, without a branch on c > 0 (GCC makes a conditional a
     * branch here, even a multiply by c > 0): taken one step in eight at random, a
     * mispredicted one empties the window the searches beside it overlap in. For c = 0
     * the mask makes s[7] +0.0, and u - 0.0 is u. */
#if defined(__SSE2__)
    const __m128d keep = _mm_castsi128_pd(_mm_set1_epi64x(-(long long)(c > 0)));
    *u -= _mm_cvtsd_f64(_mm_and_pd(_mm_load_sd(s + (c + FAN - 1) % FAN), keep));
#else
    *u -= c > 0 ? s[c - 1] : 0.0;
#endif
  }
  return c;
}

/* The leaf of group g whose range holds u: the first whose running sum within the
 * group is above u (such a leaf has positive weight: a leaf of zero weight does not move
 * the running sum past u), else, for u past the group's end by rounding, the group's last
 * leaf of positive weight. With SSE2 the 16 running sums are made two at a time and all
 * compared with u, and the leaf is their count at or below u: no branch on the data (a
 * scan that stops at the leaf mispredicts once a search, and stalls the searches beside
 * it). */
static inline uint64_t leaf_in(const sac_replay_sumtree_t *t, uint64_t g, double u) {
  const float *w = t->leaf + g * GROUP;
  unsigned k;
#if defined(__SSE2__)
  const __m128d uu = _mm_set1_pd(u);
  __m128d carry = _mm_setzero_pd();
  unsigned below = 0; /* bit k: running sum k at or below u (rising: 1..10..0) */
  for (int q = 0; q < GROUP; q += 4) {
    const __m128 f = _mm_load_ps(w + q);
    const __m128d a = _mm_cvtps_pd(f), b = _mm_cvtps_pd(_mm_movehl_ps(f, f));
    /* (x0, x0 + x1) + carry, then the carry becomes its upper lane */
    const __m128d pa = _mm_add_pd(_mm_add_pd(a, _mm_unpacklo_pd(_mm_setzero_pd(), a)), carry);
    carry = _mm_unpackhi_pd(pa, pa);
    const __m128d pb = _mm_add_pd(_mm_add_pd(b, _mm_unpacklo_pd(_mm_setzero_pd(), b)), carry);
    carry = _mm_unpackhi_pd(pb, pb);
    below |= ((unsigned)_mm_movemask_pd(_mm_cmple_pd(pa, uu)) |
              (unsigned)_mm_movemask_pd(_mm_cmple_pd(pb, uu)) << 2) << q;
  }
  k = (unsigned)__builtin_ctz(~below); /* GROUP when every running sum is at or below u */
#else
  for (k = 0; k < GROUP; k++) {
    if (u < (double)w[k])
      break;
    u -= (double)w[k];
  }
#endif
  if (k >= GROUP || !(w[k] > 0.0f))
    for (k = GROUP - 1; k > 0 && !(w[k] > 0.0f); k--)
      ;
  const uint64_t i = g * GROUP + (uint64_t)k;
  return i < t->n ? i : t->n - 1;
}

uint64_t sac_replay_sumtree_find(const sac_replay_sumtree_t *t, double u) {
  uint64_t j = 0;
  for (uint32_t l = 0; l < t->levels; l++)
    j = j * FAN + step(t->node + (t->level_first[l] + j) * FAN, &u);
  return leaf_in(t, j, u);
}

/* Searches in a group: enough to keep a core's outstanding loads busy (a 500,000-leaf
 * tree searched 128 points at a time: 8 side by side took 0.96 of one at a time, 16 took
 * 0.84, 32 took 0.78). */
#define FIND_GROUP 32
/* Points a sample searches at once. */
#define PICK_CHUNK 256

void sac_replay_sumtree_find_n(const sac_replay_sumtree_t *t, const double *u, size_t n, uint64_t *out) {
  for (size_t g = 0; g < n; g += FIND_GROUP) {
    const size_t m = n - g < FIND_GROUP ? n - g : FIND_GROUP;
    uint64_t j[FIND_GROUP] = {0};
    double rest[FIND_GROUP];
    for (size_t k = 0; k < m; k++)
      rest[k] = u[g + k];
    /* where each search goes next is asked for as soon as it is known: the out-of-order
     * window holds the steps of about ten searches, so a load left to the next level's
     * step would overlap with ten others; asked for here it overlaps with all 32 (a
     * 1,000,064-leaf tree searched in L3: 48 -> 42 ns a search) */
    for (uint32_t l = 0; l + 1 < t->levels; l++) {
      const double *level = t->node + t->level_first[l] * FAN, *next = t->node + t->level_first[l + 1] * FAN;
      for (size_t k = 0; k < m; k++) {
        j[k] = j[k] * FAN + step(level + j[k] * FAN, &rest[k]);
        __builtin_prefetch(next + j[k] * FAN);
      }
    }
    const double *bottom = t->node + t->level_first[t->levels - 1] * FAN;
    for (size_t k = 0; k < m; k++) {
      j[k] = j[k] * FAN + step(bottom + j[k] * FAN, &rest[k]);
      __builtin_prefetch(t->leaf + j[k] * GROUP);
    }
    for (size_t k = 0; k < m; k++)
      out[g + k] = leaf_in(t, j[k], rest[k]);
  }
}

/* ------------------------------------------------------------------ a batch's random numbers */

/* The draws of one sample call come from splitmix64 (Steele, Lea and Flood 2014; a
 * 64-bit state stepped by a constant and mixed, equidistributed over its period 2^64)
 * seeded with one 64-bit draw from the shard's generator per call: the same seed still
 * gives the same samples, and a row's draw costs a few multiplications instead of half a
 * Philox block (sac_rng: 10 rounds for 4 words, about a third of a uniform sample's
 * instructions). */
typedef struct {
  uint64_t s;
} draws_t;

static inline uint64_t draw64(draws_t *r) {
  uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Uniform in [0, 1), 53 bits. */
static inline double draw_unit(draws_t *r) { return (double)(draw64(r) >> 11) * (1.0 / 9007199254740992.0); }

/* Uniform in [0, n), n > 0: Lemire's multiply-and-shift with the rejection that removes
 * its bias (as sac_rng_below32). */
static inline uint32_t draw_below(draws_t *r, uint32_t n) {
  uint64_t m = (draw64(r) >> 32) * n;
  if ((uint32_t)m < n) {
    const uint32_t threshold = (uint32_t)-n % n;
    while ((uint32_t)m < threshold)
      m = (draw64(r) >> 32) * n;
  }
  return (uint32_t)(m >> 32);
}

static draws_t draws_from(sac_rng_t *rng) { return (draws_t){sac_rng_u64(rng)}; }

/* ------------------------------------------------------------------ uniform */

static uint32_t ready_near(const sac_replay_storage_t *st, uint64_t filled, uint64_t s) {
  for (uint64_t i = 0; i < filled; i++) {
    uint64_t j = s + i;
    if (j >= filled)
      j -= filled;
    if (*sac_replay_flags(st, j) & SAC_SLOT_READY)
      return (uint32_t)j;
  }
  return SAC_SLOT_NONE;
}

static uint32_t uniform_one(const sac_replay_storage_t *st, draws_t *rng, uint64_t filled) {
  /* Rejection sampling is exactly uniform; observation-only slots are a small share
   * (one per episode end and one per open stream), so 64 misses in a row only happen
   * on a pathological buffer, where the forward scan still terminates. */
  uint64_t s = 0;
  for (int tries = 0; tries < 64; tries++) {
    s = draw_below(rng, (uint32_t)filled);
    if (*sac_replay_flags(st, s) & SAC_SLOT_READY)
      return (uint32_t)s;
  }
  return ready_near(st, filled, s);
}

/* Slot s's record asked for into the second-level cache: its first and last lines (the
 * observation's start, the action and flags; the gather asks for any line between). The
 * prioritised picks ask as each group of searches ends, so that the misses overlap the
 * next group's descents instead of waiting for the gather. A 256-row prioritised sample
 * and its gather from a million cheetah rows, alternating in one process on the 2-core
 * Intel machine: 48-75 us before, 40-63 after (about 15% less in each of three pairs of
 * medians); asked for into the first level only (non-temporal) the lines were gone again
 * by the gather, and asking for every line of the record as well gained nothing. */
static inline void prefetch_record(const sac_replay_storage_t *st, uint64_t s) {
  const uint8_t *rec = sac_replay_rec(st, s);
  __builtin_prefetch(rec, 0, 2);
  __builtin_prefetch(rec + st->rec - 1, 0, 2);
}

/* Slot s's next observation row asked for into the second-level cache, once s's record
 * is at hand (reading the next slot from a record still on its way would wait for it).
 * After prefetch_record, the same alternating runs: 46 us median before, 41.5 after. */
static inline void prefetch_next_obs(const sac_replay_storage_t *st, uint64_t s) {
  const uint8_t *o = sac_replay_obs(st, *sac_replay_next(st, s));
  __builtin_prefetch(o, 0, 2);
  __builtin_prefetch(o + st->obs_row - 1, 0, 2);
}

/* Every row's first draw is made before any is checked, and its flag byte asked for
 * (prefetched): in a large buffer each check is a cache miss, and this way they overlap
 * instead of coming one after another. A first draw that is not a transition is drawn
 * again as uniform_one draws, so each row is still uniform over the transitions. */
int sac_replay_sample_uniform(const sac_replay_storage_t *st, sac_rng_t *rng, uint32_t n, uint32_t *slots) {
  uint64_t filled = sac_replay_storage_filled(st);
  if (st->size == 0 || filled == 0)
    return SAC_EAGAIN;
  draws_t r = draws_from(rng);
  for (uint32_t i = 0; i < n; i++) {
    slots[i] = draw_below(&r, (uint32_t)filled);
    __builtin_prefetch(sac_replay_flags(st, slots[i]));
  }
  for (uint32_t i = 0; i < n; i++)
    if (!(*sac_replay_flags(st, slots[i]) & SAC_SLOT_READY))
      slots[i] = uniform_one(st, &r, filled);
  return 0;
}

/* ------------------------------------------------------------------ prioritised */

/* Whether leaf j may be picked: a transition of positive weight. A leaf is positive only
 * on a slot that holds a transition (a slot's leaf is zeroed when the slot is handed out
 * again, and a snapshot where it is not is refused), so the positive leaf, which the
 * search has just read, answers without the slot's record (a miss in a large ring). */
static inline int prioritized_ok(const sac_replay_sumtree_t *t, uint64_t filled, uint64_t j) {
  return j < filled && t->leaf[j] > 0.0f;
}

int sac_replay_sample_prioritized(const sac_replay_storage_t *st, const sac_replay_sumtree_t *t,
                                  sac_rng_t *rng, uint32_t n, float beta, uint32_t *slots, float *weights) {
  double total = t->total;
  uint64_t filled = sac_replay_storage_filled(st);
  if (st->size == 0 || !(total > 0.0) || filled == 0)
    return SAC_EAGAIN;
  /* every row's first pick, one point in each of n equal strata of the total, searched
   * side by side; a pick that is no transition (or of zero weight) is drawn again over
   * the whole total, one search at a time (rare: rounding at a stratum's edge) */
  draws_t r = draws_from(rng);
  double seg = total / n, u[PICK_CHUNK];
  uint64_t found[PICK_CHUNK];
  const uint32_t chunk = PICK_CHUNK;
  for (uint32_t i0 = 0; i0 < n; i0 += chunk) {
    const uint32_t m = n - i0 < chunk ? n - i0 : chunk;
    for (uint32_t k = 0; k < m; k++) {
      u[k] = ((double)(i0 + k) + draw_unit(&r)) * seg;
      if (u[k] >= total)
        u[k] = nextafter(total, 0.0);
    }
    for (uint32_t g = 0; g < m; g += FIND_GROUP) {
      const uint32_t gm = m - g < FIND_GROUP ? m - g : FIND_GROUP;
      sac_replay_sumtree_find_n(t, u + g, gm, found + g);
      /* the picks' records, asked for now (prefetch_record) */
      for (uint32_t k = g; k < g + gm; k++)
        if (found[k] < filled)
          prefetch_record(st, found[k]);
    }
    for (uint32_t k = 0; k < m; k++) {
      uint64_t j = found[k];
      uint32_t s = prioritized_ok(t, filled, j) ? (uint32_t)j : SAC_SLOT_NONE;
      for (int tries = 1; tries < 16 && s == SAC_SLOT_NONE; tries++) {
        double v = draw_unit(&r) * total;
        if (v >= total)
          v = nextafter(total, 0.0);
        j = sac_replay_sumtree_find(t, v);
        if (prioritized_ok(t, filled, j))
          s = (uint32_t)j;
      }
      if (s == SAC_SLOT_NONE) /* only after rounding drift left zero-weight picks */
        s = uniform_one(st, &r, filled);
      slots[i0 + k] = s;
      weights[i0 + k] = t->leaf[s]; /* the picked leaf, made a weight below */
    }
  }
  /* the picks' next observations, whose slots their records (asked for above) now hold:
   * asked for while the weights are computed (prefetch_next_obs) */
  for (uint32_t i = 0; i < n; i++)
    if (slots[i] < filled)
      prefetch_next_obs(st, slots[i]);
  /* w_i = (size p_i)^-beta / max_j w_j = (p_i / p_min)^-beta: float powers (weights are
   * float; powf is a fraction of pow's time) of ratios to the smallest picked priority */
  float pmin = INFINITY;
  for (uint32_t i = 0; i < n; i++)
    if (weights[i] > 0.0f && weights[i] < pmin)
      pmin = weights[i];
  if (!isfinite(pmin)) { /* no positive pick: all alike */
    for (uint32_t i = 0; i < n; i++)
      weights[i] = 1.0f;
    return 0;
  }
  /* the powers a chunk at a time (common/vmath.h: eight a call where the CPU allows) */
  for (uint32_t i0 = 0; i0 < n; i0 += PICK_CHUNK) {
    const uint32_t m = n - i0 < PICK_CHUNK ? n - i0 : PICK_CHUNK;
    float *w = weights + i0, ratio[PICK_CHUNK];
    for (uint32_t k = 0; k < m; k++)
      ratio[k] = w[k] > 0.0f ? w[k] / pmin : 1.0f;
    sac_vpowf(ratio, -beta, ratio, m);
    for (uint32_t k = 0; k < m; k++)
      w[k] = w[k] > 0.0f ? ratio[k] : 0.0f;
  }
  return 0;
}

/* In three passes over a chunk, so that the misses of the first overlap the work of the
 * second: the leaves and bottom nodes asked for; the generations checked and the powers
 * taken (no memory touched); then the leaves read, each update kept where its slot holds
 * a transition, and the kept ones applied as one sumtree_set_n. */
uint32_t sac_replay_priority_set_n(const sac_replay_storage_t *st, sac_replay_sumtree_t *t, uint32_t n,
                                   const uint32_t *slot, const uint32_t *gen, const float *p, double alpha,
                                   double eps) {
  uint64_t idx[SAC_PRIORITY_CHUNK];
  float val[SAC_PRIORITY_CHUNK], pw[SAC_PRIORITY_CHUNK];
  uint32_t applied = 0;
  for (uint32_t k0 = 0; k0 < n; k0 += SAC_PRIORITY_CHUNK) {
    const uint32_t end = n - k0 < SAC_PRIORITY_CHUNK ? n : k0 + SAC_PRIORITY_CHUNK;
    for (uint32_t k = k0; k < end; k++)
      if (slot[k] < st->cfg.capacity)
        set_prefetch(t, slot[k]);
    /* in float, as the leaf is kept, and a chunk at a time (common/vmath.h) */
    float base[SAC_PRIORITY_CHUNK];
    unsigned char live[SAC_PRIORITY_CHUNK];
    for (uint32_t k = k0; k < end; k++) {
      live[k - k0] = slot[k] < st->cfg.capacity &&
                     (sac_replay_storage_generation(st, slot[k]) & 0xFFFFFu) == (gen[k] & 0xFFFFFu);
      base[k - k0] = live[k - k0] ? (float)((double)p[k] + eps) : 1.0f;
    }
    sac_vpowf(base, (float)alpha, pw, end - k0);
    for (uint32_t k = 0; k < end - k0; k++) /* NaN: not applied */
      pw[k] = !live[k] ? NAN : (isfinite(pw[k]) ? pw[k] : 3.0e38f);
    size_t m = 0;
    for (uint32_t k = k0; k < end; k++) {
      const float fv = pw[k - k0];
      /* a transition: a positive leaf says so (see prioritized_ok), else the record */
      if (isnan(fv) || !(t->leaf[slot[k]] > 0.0f || (*sac_replay_flags(st, slot[k]) & SAC_SLOT_READY)))
        continue;
      if (fv > t->max_leaf)
        t->max_leaf = fv;
      idx[m] = slot[k];
      val[m++] = fv;
    }
    sac_replay_sumtree_set_n(t, idx, val, m);
    applied += (uint32_t)m;
  }
  return applied;
}
