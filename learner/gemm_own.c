/* The cpu backend's own GEMM (gemm_own.h).
 *
 * Blocking: k in blocks of KC; for each, the n columns in panels of NR = two vectors (32
 * columns with AVX-512, 16 with AVX2), each panel of B copied once into a contiguous
 * KC x NR block (32 or 16 KiB, in the first-level cache); then the rows in blocks of MR,
 * each an MR x NR tile of C held in 2 MR registers (12 x 32 in 24 of AVX-512's 32; 6 x 16
 * in 12 of AVX2's 16): per k, two loads of the panel and MR broadcasts of A, each
 * multiplied into two accumulators, four k steps to a loop iteration. A is read where it
 * lies, as rows (ta 0), or, for the weight gradient's X^T (ta 1), from a copy of its k
 * block made once in blocks of columns. The rows left after the MR-row blocks go in blocks
 * of MR_TAIL = 4, the last one copied into zero-padded rows first where fewer are left; a
 * last panel of fewer than NR columns is loaded and stored under a mask. The kernel is
 * written once (gemm_own_kernel.h) and compiled for each of the two instruction sets.
 *
 * One cheetah forward layer (256 x 256 x 256, bias and ReLU), one thread, hot caches, on
 * the 2-core AVX-512 development VM, against a loop of independent multiply-adds in
 * registers run alternately with it: 0.83 of that loop's rate with 12-row tiles where 8-row
 * tiles (16 accumulators, one k step an iteration) reached 0.69. On a 2-core AMD EPYC (Zen
 * 3, AVX2) VM the whole cheetah update on 2 threads reached 0.79-0.82 of the sgemm ceiling
 * with the AVX2 kernel where OpenBLAS making every product reached 0.63-0.67. */
#include "learner/gemm_own.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static atomic_int own_enabled = 1;
static _Atomic unsigned long long own_products;

void sac_gemm_own_set_enabled(int on) { atomic_store(&own_enabled, on != 0); }
int sac_gemm_own_enabled(void) { return atomic_load(&own_enabled); }
unsigned long long sac_gemm_own_products(void) { return atomic_load(&own_products); }

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* MIN_COLS: the fewest columns the forward and the input gradient take (against OpenBLAS
 * at 128 x n x 256 on one thread of the Zen 3 VM: 12 us to its 16 at n = 6, 11.6 to 17.6
 * at n = 12); MIN_COLS_TN: the weight gradient's (its column slabs cost more than OpenBLAS
 * saves there below 32 columns: 33 us to 31.5 at n = 12). */
enum { MR_TAIL = 4, MIN_ROWS = 8, MIN_COLS = 4, MIN_COLS_TN = 32, KC = 256 };

/* What a tile does once its sums are made: add C's old values, add the bias, clamp at 0. */
typedef struct {
  int add, relu;
  const float *bias; /* at the panel's first column, or NULL */
} epilogue_t;

/* The weight gradient's activation backward (sac_gemm_own_wgrad), applied as its dY is
 * packed. */
typedef struct {
  const float *Y; /* the layer's output, with dY's leading dimension */
  sac_act_t act;
  float *db; /* NULL: no column sums */
} act_bwd_t;

/* The forms taken: op(A) B (the forward), op(A)^T B (the weight gradient: A is X, the
 * layer's input) and A B^T (the input gradient: B is W). */
typedef enum { FORM_NN, FORM_TN, FORM_NT } form_t;

/* This thread's scratch of at least n floats, 64-byte aligned, kept for its next calls and
 * freed when the thread ends (NULL when it cannot be had). */
typedef struct {
  size_t n;
  float *p;
} scratch_t;

static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static int scratch_key_ok;

static void scratch_free(void *v) {
  scratch_t *s = v;
  free(s->p);
  free(s);
}

static void scratch_key_make(void) { scratch_key_ok = pthread_key_create(&scratch_key, scratch_free) == 0; }

static float *scratch_of(size_t n) {
  pthread_once(&scratch_once, scratch_key_make);
  if (!scratch_key_ok)
    return NULL;
  scratch_t *s = pthread_getspecific(scratch_key);
  if (!s) {
    s = calloc(1, sizeof *s);
    if (!s || pthread_setspecific(scratch_key, s) != 0) {
      free(s);
      return NULL;
    }
  }
  if (s->n < n) {
    float *p = aligned_alloc(64, (n * sizeof(float) + 63) & ~(size_t)63);
    if (!p)
      return NULL;
    free(s->p);
    s->p = p, s->n = n;
  }
  return s->p;
}

/* ---- AVX-512F: 16 floats a vector, 12 x 32 tiles ---- */

#define OWN_TARGET __attribute__((target("avx512f")))
#define OWN(name) name##_avx512
#define VW 16
#define MR 12
#define VF __m512
#define VMASK __mmask16
#define VZERO() _mm512_setzero_ps()
#define VSET1(x) _mm512_set1_ps(x)
#define VFMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define VADD(a, b) _mm512_add_ps(a, b)
#define VSUB(a, b) _mm512_sub_ps(a, b)
#define VMUL(a, b) _mm512_mul_ps(a, b)
#define VMAX(a, b) _mm512_max_ps(a, b)
#define VLOAD(p) _mm512_load_ps(p)
#define VSTORE(p, v) _mm512_store_ps(p, v)
#define VLOADM(m, p) _mm512_maskz_loadu_ps(m, p)
#define VSTOREM(p, m, v) _mm512_mask_storeu_ps(p, m, v)
#define VSTORE_SLAB(p, m, v) _mm512_mask_storeu_ps(p, m, v)
#define VRELU_BWD(d, y) _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(y, _mm512_setzero_ps(), _CMP_GT_OQ), d)

static __mmask16 mask_of_avx512(int w) {
  return w >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (w > 0 ? w : 0)) - 1u);
}

/* r[i] (16 rows of 16) becomes its transpose: r[c] holds what was column c. Pairs of
 * floats, then pairs of pairs, then 128-bit lanes twice. */
OWN_TARGET static inline void transpose_avx512(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) { /* r[i + c]: rows i..i+3 of columns c, c + 4, c + 8, c + 12 */
    r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
    r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
    r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
    r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
  }
  for (int h = 0; h < 16; h += 8) /* t[h + c], c < 4: rows h..h+7 of columns c, c + 8 (c + 4, c + 12) */
    for (int c = 0; c < 4; c++) {
      t[h + c] = _mm512_shuffle_f32x4(r[h + c], r[h + c + 4], 0x88);
      t[h + c + 4] = _mm512_shuffle_f32x4(r[h + c], r[h + c + 4], 0xdd);
    }
  for (int c = 0; c < 8; c++) {
    r[c] = _mm512_shuffle_f32x4(t[c], t[c + 8], 0x88);
    r[c + 8] = _mm512_shuffle_f32x4(t[c], t[c + 8], 0xdd);
  }
}

#include "learner/gemm_own_kernel.h" /* it #undefs what was defined for it */

/* ---- AVX2 with FMA: 8 floats a vector, 6 x 16 tiles ----
 *
 * A mask is a vector of lanes plus whether it is whole: loads and stores under a whole
 * mask are plain ones (a masked store is slow on some AMD cores). */

typedef struct {
  __m256i lanes;
  int whole;
} mask8_t;

#define OWN_TARGET __attribute__((target("avx2,fma")))
#define OWN(name) name##_avx2
#define VW 8
#define MR 6
#define VF __m256
#define VMASK mask8_t
#define VZERO() _mm256_setzero_ps()
#define VSET1(x) _mm256_set1_ps(x)
#define VFMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define VADD(a, b) _mm256_add_ps(a, b)
#define VSUB(a, b) _mm256_sub_ps(a, b)
#define VMUL(a, b) _mm256_mul_ps(a, b)
#define VMAX(a, b) _mm256_max_ps(a, b)
#define VLOAD(p) _mm256_load_ps(p)
#define VSTORE(p, v) _mm256_store_ps(p, v)
#define VLOADM(m, p) loadm_avx2(m, p)
#define VSTOREM(p, m, v) storem_avx2(p, m, v)
#define VSTORE_SLAB(p, m, v) _mm256_storeu_ps(p, v)
#define VRELU_BWD(d, y) _mm256_and_ps(_mm256_cmp_ps(y, _mm256_setzero_ps(), _CMP_GT_OQ), d)

OWN_TARGET static inline mask8_t mask_of_avx2(int w) {
  const mask8_t m = {_mm256_cmpgt_epi32(_mm256_set1_epi32(w), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)),
                     w >= 8};
  return m;
}

OWN_TARGET static inline __m256 loadm_avx2(mask8_t m, const float *p) {
  return m.whole ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, m.lanes);
}

OWN_TARGET static inline void storem_avx2(float *p, mask8_t m, __m256 v) {
  if (m.whole)
    _mm256_storeu_ps(p, v);
  else
    _mm256_maskstore_ps(p, m.lanes, v);
}

/* r[i] (8 rows of 8) becomes its transpose: pairs of floats, pairs of pairs, then the
 * 128-bit halves. */
OWN_TARGET static inline void transpose_avx2(__m256 r[8]) {
  __m256 t[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) { /* r[i + c]: rows i..i+3 of columns c and c + 4 */
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
  }
  for (int c = 0; c < 4; c++) {
    t[c] = _mm256_permute2f128_ps(r[c], r[c + 4], 0x20);
    t[c + 4] = _mm256_permute2f128_ps(r[c], r[c + 4], 0x31);
  }
  for (int c = 0; c < 8; c++)
    r[c] = t[c];
}

#include "learner/gemm_own_kernel.h" /* it #undefs what was defined for it */

/* ---- dispatch ---- */

/* The widest vector set this CPU has for the own GEMM: 512, 256 or 0. */
static int cpu_bits(void) {
  static atomic_int bits = -1;
  int b = atomic_load_explicit(&bits, memory_order_relaxed);
  if (b < 0) {
    __builtin_cpu_init();
    b = __builtin_cpu_supports("avx512f")                                 ? 512
        : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? 256
                                                                          : 0;
    atomic_store_explicit(&bits, b, memory_order_relaxed);
  }
  return b;
}

static atomic_int bits_cap = 512;

int sac_gemm_own_supported(void) { return cpu_bits() > 0; }

int sac_gemm_own_bits(void) {
  const int have = cpu_bits(), cap = atomic_load(&bits_cap);
  return have < cap ? have : cap;
}

int sac_gemm_own_cap_bits(int bits) {
  if (bits != 512 && bits != 256)
    return -1;
  atomic_store(&bits_cap, bits);
  return sac_gemm_own_bits();
}

/* Whether the own GEMM takes an m x n product over k here. */
static int own_takes(form_t f, int m, int n, int k) {
  return sac_gemm_own_bits() > 0 && atomic_load(&own_enabled) && m >= MIN_ROWS &&
         n >= (f == FORM_TN ? MIN_COLS_TN : MIN_COLS) && k >= 1;
}

static int own_gemm(const act_bwd_t *g, form_t f, int m, int n, int k, const float *A, int lda,
                    const float *B, int ldb, int add, float *C, int ldc, const float *bias, sac_act_t act) {
  const int done = sac_gemm_own_bits() == 512
                       ? own_gemm_avx512(g, f, m, n, k, A, lda, B, ldb, add, C, ldc, bias, act)
                       : own_gemm_avx2(g, f, m, n, k, A, lda, B, ldb, add, C, ldc, bias, act);
  if (done)
    atomic_fetch_add_explicit(&own_products, 1, memory_order_relaxed);
  return done;
}

int sac_gemm_own(int ta, int tb, int m, int n, int k, const float *A, int lda, const float *B, int ldb,
                 int add, float *C, int ldc, const float *bias, sac_act_t act) {
  const form_t f = ta ? FORM_TN : tb ? FORM_NT : FORM_NN;
  if ((ta && tb) || !own_takes(f, m, n, k))
    return 0;
  return own_gemm(NULL, f, m, n, k, A, lda, B, ldb, add, C, ldc, bias, act);
}

int sac_gemm_own_wgrad(int m, int n, int k, const float *X, int ldx, float *dY, const float *Y, int ldy,
                       sac_act_t act, float *db, float *dW, int ldw) {
  if (!own_takes(FORM_TN, m, n, k))
    return 0;
  const act_bwd_t g = {Y, act, db};
  return own_gemm(&g, FORM_TN, m, n, k, X, ldx, dY, ldy, 0, dW, ldw, NULL, SAC_ACT_NONE);
}

#else /* not x86-64 with GCC or Clang: OpenBLAS does every product */

int sac_gemm_own_supported(void) { return 0; }
int sac_gemm_own_bits(void) { return 0; }

int sac_gemm_own_cap_bits(int bits) { return bits == 512 || bits == 256 ? 0 : -1; }

int sac_gemm_own(int ta, int tb, int m, int n, int k, const float *A, int lda, const float *B, int ldb,
                 int add, float *C, int ldc, const float *bias, sac_act_t act) {
  (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)A, (void)lda, (void)B, (void)ldb, (void)add, (void)C,
      (void)ldc, (void)bias, (void)act;
  return 0;
}

int sac_gemm_own_wgrad(int m, int n, int k, const float *X, int ldx, float *dY, const float *Y, int ldy,
                       sac_act_t act, float *db, float *dW, int ldw) {
  (void)m, (void)n, (void)k, (void)X, (void)ldx, (void)dY, (void)Y, (void)ldy, (void)act, (void)db, (void)dW,
      (void)ldw;
  return 0;
}

#endif
