/* Samplers over a storage ring: uniform over the READY transitions, and prioritised
 * (Schaul et al. 2016) with a sum tree: P(i) = p_i^α / Σ p^α, stratified over the
 * batch, importance weights w_i = (N·P(i))^-β normalised by the batch's largest weight.
 * The sum tree is a Fenwick tree of doubles over per-slot float leaves (12 bytes per
 * slot); it is rebuilt from the leaves every `capacity` updates so rounding drift
 * cannot accumulate. New transitions get the largest priority seen so far.
 *
 * Not thread-safe; allocates only in init. */
#ifndef SAC_REPLAY_SAMPLER_H
#define SAC_REPLAY_SAMPLER_H
#include <stdint.h>

#include "common/rng.h"
#include "replay/storage.h"

struct sac_replay_sumtree {
  uint64_t n;     /* leaves */
  uint64_t top;   /* highest power of two <= n */
  double *fen;    /* (n + 1) Fenwick partial sums, 1-based */
  float *leaf;    /* (n) */
  double total;   /* sum of leaves */
  float max_leaf; /* priority given to new transitions (already ^alpha) */
  uint64_t updates_since_rebuild;
};

/* 0 or SAC_ENOMEM/SAC_EINVAL (n == 0). */
int sac_replay_sumtree_init(sac_replay_sumtree_t *t, uint64_t n);
void sac_replay_sumtree_close(sac_replay_sumtree_t *t);
/* Sets leaf i to v (finite, >= 0). */
void sac_replay_sumtree_set(sac_replay_sumtree_t *t, uint64_t i, float v);
/* The leaf i such that prefix(i) <= u < prefix(i + 1), for 0 <= u < total. */
uint64_t sac_replay_sumtree_find(const sac_replay_sumtree_t *t, double u);
/* The same for u[0..n), into out[0..n): the searches descend side by side, a level at
 * a time, so that their loads (a cache miss a level in a large tree) overlap. */
void sac_replay_sumtree_find_n(const sac_replay_sumtree_t *t, const double *u, size_t n, uint64_t *out);
/* Recomputes the partial sums and the total from the leaves. */
void sac_replay_sumtree_rebuild(sac_replay_sumtree_t *t);

/* n slots drawn uniformly (with replacement) from the READY slots. SAC_EAGAIN when the
 * storage holds no transition. */
int sac_replay_sample_uniform(const sac_replay_storage_t *st, sac_rng_t *rng, uint32_t n, uint32_t *slots);

/* n slots drawn in proportion to the tree's leaves, stratified, with importance weights
 * for exponent beta. SAC_EAGAIN when the total priority is zero. */
int sac_replay_sample_prioritized(const sac_replay_storage_t *st, const sac_replay_sumtree_t *t,
                                  sac_rng_t *rng, uint32_t n, float beta, uint32_t *slots, float *weights);

/* Applies priority p (finite, >= 0) to slot if its generation is still gen and it holds
 * a transition: leaf = (p + eps)^alpha. Returns 1 when applied, 0 when stale. */
int sac_replay_priority_set(const sac_replay_storage_t *st, sac_replay_sumtree_t *t, uint32_t slot,
                            uint32_t gen, float p, double alpha, double eps);

#endif
