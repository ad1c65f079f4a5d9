/* Philox4x32-10 counter-based random numbers (Salmon et al., SC'11), header-only so the
 * CPU and CUDA backends draw bit-identical uniform bits from the same (key, counter):
 * the update noise is a pure function of (seed, update step, tensor, index), which makes
 * the cpu backend deterministic and lets the cuda backend be compared with it. */
#ifndef SAC_COMMON_PHILOX_H
#define SAC_COMMON_PHILOX_H
#include <stdint.h>
#ifndef __CUDACC__
#include <math.h>
#endif

#ifdef __CUDACC__
#define SAC_HD __host__ __device__ __forceinline__
#else
#define SAC_HD static inline
#endif

SAC_HD uint32_t sac__mulhilo32(uint32_t a, uint32_t b, uint32_t *hi) {
  uint64_t p = (uint64_t)a * (uint64_t)b;
  *hi = (uint32_t)(p >> 32);
  return (uint32_t)p;
}

/* out = Philox4x32-10(ctr, key). Cannot fail. */
SAC_HD void sac_philox4x32(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
  uint32_t k0 = key[0], k1 = key[1];
  for (int r = 0; r < 10; r++) {
    uint32_t hi0, hi1;
    uint32_t lo0 = sac__mulhilo32(0xD2511F53u, c0, &hi0);
    uint32_t lo1 = sac__mulhilo32(0xCD9E8D57u, c2, &hi1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

/* Uniform in (0, 1]: never 0, so log() is safe. */
SAC_HD float sac_u32_to_unit(uint32_t x) { return ((float)(x >> 8) + 1.0f) * (1.0f / 16777216.0f); }

/* Box-Muller's inputs from one Philox block: the uniform u1 (whose log it takes) and the
 * angle t = 2 pi u2, from (out[0], out[1]). The counter is (index, stream_lo, stream_hi,
 * tag). The cpu backend takes them for a chunk of pairs and the functions a chunk at a
 * time (common/vmath.h). */
SAC_HD void sac_philox_box_muller_in(const uint32_t key[2], uint32_t index, uint64_t stream, uint32_t tag,
                                     float *u1, float *t) {
  uint32_t ctr[4] = {index, (uint32_t)stream, (uint32_t)(stream >> 32), tag};
  uint32_t o[4];
  sac_philox4x32(ctr, key, o);
  *u1 = sac_u32_to_unit(o[0]);
  *t = 6.283185307179586f * sac_u32_to_unit(o[1]);
}

/* Two standard normals from one Philox block: Box-Muller on its inputs above. */
SAC_HD void sac_philox_normal2(const uint32_t key[2], uint32_t index, uint64_t stream, uint32_t tag,
                               float *z0, float *z1) {
  float u1, t;
  sac_philox_box_muller_in(key, index, stream, tag, &u1, &t);
  float r = sqrtf(-2.0f * logf(u1));
  *z0 = r * cosf(t);
  *z1 = r * sinf(t);
}

#endif
