/* Counter-based generator streams (see rng.h). */
#include "common/rng.h"

#include <math.h>

#include "common/philox.h"

uint64_t sac_splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

void sac_rng_key(uint64_t seed, uint64_t stream, uint32_t key[2]) {
  uint64_t k = sac_splitmix64(sac_splitmix64(seed) ^ sac_splitmix64(stream + 0x5851F42D4C957F2Dull));
  key[0] = (uint32_t)k;
  key[1] = (uint32_t)(k >> 32);
}

void sac_rng_init(sac_rng_t *rng, uint64_t seed, uint64_t stream) {
  sac_rng_key(seed, stream, rng->key);
  rng->counter = 0;
  rng->nbuf = 0;
  rng->has_spare = 0;
  rng->spare = 0.0f;
}

uint32_t sac_rng_u32(sac_rng_t *rng) {
  if (rng->nbuf == 0) {
    uint32_t ctr[4] = {(uint32_t)rng->counter, (uint32_t)(rng->counter >> 32), 0x52414e44u, 0};
    sac_philox4x32(ctr, rng->key, rng->buf);
    rng->counter++;
    rng->nbuf = 4;
  }
  return rng->buf[--rng->nbuf];
}

uint64_t sac_rng_u64(sac_rng_t *rng) {
  uint64_t hi = sac_rng_u32(rng);
  return (hi << 32) | sac_rng_u32(rng);
}

double sac_rng_uniform(sac_rng_t *rng) {
  return (double)(sac_rng_u64(rng) >> 11) * (1.0 / 9007199254740992.0);
}

double sac_rng_uniform_range(sac_rng_t *rng, double lo, double hi) {
  return lo + (hi - lo) * sac_rng_uniform(rng);
}

uint64_t sac_rng_below(sac_rng_t *rng, uint64_t n) {
  uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do {
    x = sac_rng_u64(rng);
  } while (x >= limit);
  return x % n;
}

uint32_t sac_rng_below32(sac_rng_t *rng, uint32_t n) {
  uint64_t m = (uint64_t)sac_rng_u32(rng) * n;
  if ((uint32_t)m < n) { /* the low word can fall in the biased range only here */
    const uint32_t threshold = (uint32_t)-n % n;
    while ((uint32_t)m < threshold)
      m = (uint64_t)sac_rng_u32(rng) * n;
  }
  return (uint32_t)(m >> 32);
}

float sac_rng_normal(sac_rng_t *rng) {
  if (rng->has_spare) {
    rng->has_spare = 0;
    return rng->spare;
  }
  double u1 = ((double)(sac_rng_u64(rng) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
  double u2 = sac_rng_uniform(rng);
  double r = sqrt(-2.0 * log(u1));
  rng->spare = (float)(r * sin(6.283185307179586 * u2));
  rng->has_spare = 1;
  return (float)(r * cos(6.283185307179586 * u2));
}
