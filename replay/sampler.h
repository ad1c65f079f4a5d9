/* Samplers over a storage ring: uniform over the READY transitions, and prioritised
 * (Schaul et al. 2016) with a sum tree: P(i) = p_i^α / Σ p^α, stratified over the
 * batch, importance weights w_i = (N·P(i))^-β normalised by the batch's largest weight.
 *
 * The sum tree is built for a million leaves and a descent per sampled row: float leaves
 * in groups of 16 (one cache line), and above them nodes of 8 children, each node one
 * cache line of 8 doubles holding the running sums of its children's weights (child c's
 * weight is sum[c] - sum[c - 1]). A search reads one line per level and picks the child
 * by counting the running sums at or below its point (8 comparisons, no chain of
 * subtractions), then scans the 16 leaves of one group: for 500,000 leaves, 5 node lines
 * (about 250 KB of nodes in all, which stay in the caches) and the leaf line, against the
 * 19 levels of a binary or Fenwick tree spread over 4 MB. Searches run side by side, a
 * group at a time, so that their misses overlap. An update adds its change to the running
 * sums from the child's position on, one line per level; a batch of updates (the
 * priorities of a stratified sample, which come in the order of their leaves) merges the
 * changes under one node before they go up, so that the levels near the root take one add
 * per node touched rather than one per update. The arrays ask for transparent huge pages
 * (common/hugepages.h): searches land at random over megabytes. 4.5 bytes per leaf. Changes add up
 * rounding error, so the sums are recomputed from the leaves every `n` updates. New
 * transitions get the largest priority seen so far.
 *
 * Not thread-safe; allocates only in init. */
#ifndef SAC_REPLAY_SAMPLER_H
#define SAC_REPLAY_SAMPLER_H
#include <stddef.h>
#include <stdint.h>

#include "common/rng.h"
#include "replay/storage.h"

#define SAC_SUMTREE_FAN 8    /* children per node: 8 doubles, one cache line */
#define SAC_SUMTREE_GROUP 16 /* leaves per bottom child: 16 floats, one cache line */
#define SAC_SUMTREE_MAX_LEVELS 16

struct sac_replay_sumtree {
  uint64_t n;   /* leaves */
  float *leaf;  /* (n, padded with zeros to whole bottom nodes), 64-byte aligned */
  double *node; /* every level's nodes, root first: node k's running sums at [8k, 8k + 8) */
  uint64_t level_first[SAC_SUMTREE_MAX_LEVELS + 1]; /* each level's first node; [levels]: all nodes */
  uint32_t levels;                                  /* node levels; the last one's children are leaf groups */
  void *leaf_mem, *node_mem;                        /* what leaf and node were allocated as */
  size_t leaf_bytes, node_bytes;                    /* and their sizes (common/hugepages.h) */
  double total;                                     /* sum of leaves */
  float max_leaf;                                   /* priority given to new transitions (already ^alpha) */
  uint64_t updates_since_rebuild;
};

/* Bytes the tree takes per leaf (leaves and nodes). */
double sac_replay_sumtree_bytes_per_leaf(void);
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
/* Sets leaves i[k] to v[k] (each finite, >= 0), k < n: the same as n calls of set (up to
 * the rounding of the running sums), with the lines each one touches asked for ahead, so
 * that the misses of a batch of priority updates overlap, and the changes of neighbours
 * in the list that share a node added to it at once. */
void sac_replay_sumtree_set_n(sac_replay_sumtree_t *t, const uint64_t *i, const float *v, size_t n);
/* Recomputes the running sums and the total from the leaves. */
void sac_replay_sumtree_rebuild(sac_replay_sumtree_t *t);

/* n slots drawn uniformly (with replacement) from the READY slots. SAC_EAGAIN when the
 * storage holds no transition. */
int sac_replay_sample_uniform(const sac_replay_storage_t *st, sac_rng_t *rng, uint32_t n, uint32_t *slots);

/* n slots drawn in proportion to the tree's leaves, stratified, with importance weights
 * for exponent beta. SAC_EAGAIN when the total priority is zero. */
int sac_replay_sample_prioritized(const sac_replay_storage_t *st, const sac_replay_sumtree_t *t,
                                  sac_rng_t *rng, uint32_t n, float beta, uint32_t *slots, float *weights);

/* Updates priority_set_n takes at once (their lines asked for together): a caller that
 * decodes updates into arrays of its own can size them by it. */
#define SAC_PRIORITY_CHUNK 256

/* Applies priority p[k] (finite, >= 0) to slot[k], k < n, where the slot's generation is
 * still gen[k] and it holds a transition: leaf = (p + eps)^alpha, as n calls of set in
 * that order, with the batch's lines (flag bytes, leaves, bottom nodes) asked for ahead so
 * that its misses overlap. Returns how many were applied (the others are stale). */
uint32_t sac_replay_priority_set_n(const sac_replay_storage_t *st, sac_replay_sumtree_t *t, uint32_t n,
                                   const uint32_t *slot, const uint32_t *gen, const float *p, double alpha,
                                   double eps);

#endif
