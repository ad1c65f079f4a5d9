/* Seedable random numbers with independent, reproducible streams. A generator is a
 * Philox4x32-10 key (derived from (seed, stream)) plus a counter: the same seed and stream
 * always give the same sequence, and different streams (one per actor, one per
 * environment, one for the learner's noise) never overlap. Not thread-safe: one
 * generator per thread. None of these functions can fail. */
#ifndef SAC_COMMON_RNG_H
#define SAC_COMMON_RNG_H
#include <stdint.h>

typedef struct {
  uint32_t key[2];
  uint64_t counter;
  uint32_t buf[4];
  int nbuf;
  int has_spare;
  float spare;
} sac_rng_t;

/* Well-known stream ids; actors use SAC_STREAM_ACTOR(actor_id) and environments
 * SAC_STREAM_ENV(actor_id, env_index). */
#define SAC_STREAM_LEARNER 1ull
#define SAC_STREAM_EVAL 2ull
#define SAC_STREAM_ACTOR(a) ((1ull << 40) | (uint64_t)(a))
#define SAC_STREAM_ENV(a, e) ((2ull << 40) | ((uint64_t)(a) << 20) | (uint64_t)(e))

uint64_t sac_splitmix64(uint64_t x);
/* The Philox key of (seed, stream), as used by the generator and by backends. */
void sac_rng_key(uint64_t seed, uint64_t stream, uint32_t key[2]);
void sac_rng_init(sac_rng_t *rng, uint64_t seed, uint64_t stream);
uint32_t sac_rng_u32(sac_rng_t *rng);
uint64_t sac_rng_u64(sac_rng_t *rng);
/* Uniform in [0, 1). */
double sac_rng_uniform(sac_rng_t *rng);
/* Uniform in [lo, hi). */
double sac_rng_uniform_range(sac_rng_t *rng, double lo, double hi);
/* Uniform integer in [0, n), n > 0, without modulo bias. */
uint64_t sac_rng_below(sac_rng_t *rng, uint64_t n);
/* The same for n < 2^32 from one 32-bit draw (Lemire's multiply-and-shift, rejecting the
 * few products that would bias it): about a third of sac_rng_below's time, and another
 * stream of numbers for the same state. n > 0. */
uint32_t sac_rng_below32(sac_rng_t *rng, uint32_t n);
/* Standard normal. */
float sac_rng_normal(sac_rng_t *rng);

#endif
