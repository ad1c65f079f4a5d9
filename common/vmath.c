/* Elementwise float functions over arrays (vmath.h). */
#include "common/vmath.h"

#include <math.h>
#include <string.h>

#if defined(SAC_HAVE_LIBMVEC) && defined(__x86_64__)
#include <immintrin.h>

/* libmvec's AVX2 variants (the x86_64 vector ABI's names: 'd' AVX2, 'N8' eight lanes
 * unmasked, 'v' a vector argument), exported by glibc since 2.22 (exp, log, sin, cos,
 * pow) and 2.35 (log1p, tanh). */
__m256 _ZGVdN8v_expf(__m256 x);
__m256 _ZGVdN8v_logf(__m256 x);
__m256 _ZGVdN8v_log1pf(__m256 x);
__m256 _ZGVdN8v_tanhf(__m256 x);
__m256 _ZGVdN8v_sinf(__m256 x);
__m256 _ZGVdN8v_cosf(__m256 x);
__m256 _ZGVdN8vv_powf(__m256 x, __m256 y);

#define VMATH_VECTOR 1

typedef __m256 (*vfn_t)(__m256);

/* y = f(x) eight at a time, or y = x^e where f is NULL; the last, short group is copied
 * into a padded vector (the pad's lanes compute f(1), finite for every function here,
 * and are dropped). */
__attribute__((target("avx2"))) static void apply8(vfn_t f, float e, const float *x, float *y, size_t n) {
  const __m256 ev = _mm256_set1_ps(e);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    _mm256_storeu_ps(y + i, f ? f(v) : _ZGVdN8vv_powf(v, ev));
  }
  if (i < n) {
    float in[8] = {1, 1, 1, 1, 1, 1, 1, 1}, out[8];
    memcpy(in, x + i, (n - i) * sizeof(float));
    const __m256 v = _mm256_loadu_ps(in);
    _mm256_storeu_ps(out, f ? f(v) : _ZGVdN8vv_powf(v, ev));
    memcpy(y + i, out, (n - i) * sizeof(float));
  }
}

int sac_vmath_vectorised(void) { return __builtin_cpu_supports("avx2") ? 1 : 0; }
#else
#define VMATH_VECTOR 0
int sac_vmath_vectorised(void) { return 0; }
#endif

#if VMATH_VECTOR
#define VECTOR_PATH(fn)                                                                                      \
  if (sac_vmath_vectorised()) {                                                                              \
    apply8(fn, 0.0f, x, y, n);                                                                               \
    return;                                                                                                  \
  }
#else
#define VECTOR_PATH(fn)
#endif

#define VMATH(name, scalar, vector)                                                                          \
  void name(const float *x, float *y, size_t n) {                                                            \
    VECTOR_PATH(vector)                                                                                      \
    for (size_t i = 0; i < n; i++)                                                                           \
      y[i] = scalar(x[i]);                                                                                   \
  }

VMATH(sac_vexpf, expf, _ZGVdN8v_expf)
VMATH(sac_vlogf, logf, _ZGVdN8v_logf)
VMATH(sac_vlog1pf, log1pf, _ZGVdN8v_log1pf)
VMATH(sac_vtanhf, tanhf, _ZGVdN8v_tanhf)
VMATH(sac_vsinf, sinf, _ZGVdN8v_sinf)
VMATH(sac_vcosf, cosf, _ZGVdN8v_cosf)

void sac_vpowf(const float *x, float e, float *y, size_t n) {
#if VMATH_VECTOR
  if (sac_vmath_vectorised()) {
    apply8(NULL, e, x, y, n);
    return;
  }
#endif
  for (size_t i = 0; i < n; i++)
    y[i] = powf(x[i], e);
}
