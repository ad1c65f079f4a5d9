/* The cpu backend's own GEMM (gemm_own.h).
 *
 * Blocking: k in blocks of KC; for each, the n columns in panels of NR = 32 (two AVX-512
 * vectors), each panel of B copied once into a contiguous KC x 32 block (32 KiB, in the
 * first-level cache); then the rows in blocks of MR = 12, each a 12 x 32 tile of C held in
 * 24 registers: per k, two loads of the panel and twelve broadcasts of A, each multiplied
 * into two accumulators (24 multiply-adds for 14 loads), four k steps to a loop
 * iteration. A is read where it lies, as rows (ta 0), or, for the weight gradient's X^T
 * (ta 1), from a copy of its k block made once in blocks of columns. The rows left after
 * the 12-row blocks go in blocks of MR_TAIL = 4, the last one copied into zero-padded rows
 * first where fewer are left; a last panel of fewer than 32 columns is loaded and stored
 * under a mask.
 *
 * One cheetah forward layer (256 x 256 x 256, bias and ReLU), one thread, hot caches, on
 * the 2-core AVX-512 development VM, against a loop of independent multiply-adds in
 * registers run alternately with it: 0.83 of that loop's rate with 12-row tiles where 8-row
 * tiles (16 accumulators, one k step an iteration) reached 0.69. */
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

enum { MR = 12, MR_TAIL = 4, MR_MAX = 12, MIN_ROWS = 8, NR = 32, KC = 256 };

#define OWN_AVX512 __attribute__((target("avx512f")))

int sac_gemm_own_supported(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f");
}

/* What a tile does once its sums are made: add C's old values, add the bias, clamp at 0. */
typedef struct {
  int add, relu;
  const float *bias; /* at the panel's first column, or NULL */
} epilogue_t;

/* The mr x 32 tile at c (its first `rows` rows, columns under masks m0 and m1) from kc
 * steps of: A's mr values at step q (a[r * rs + q * ks]) times the packed panel's row q.
 * Inlined with mr a constant: 2 mr accumulators, two loads of the panel and mr broadcasts
 * a step, the steps four to a loop iteration. */
__attribute__((always_inline)) OWN_AVX512 static inline void tile_mr(const int mr, int kc, const float *a,
                                                                    ptrdiff_t rs, ptrdiff_t ks,
                                                                    const float *bp, float *c, int ldc,
                                                                    int rows, __mmask16 m0, __mmask16 m1,
                                                                    epilogue_t e) {
  __m512 acc[MR_MAX][2];
  for (int r = 0; r < mr; r++)
    acc[r][0] = acc[r][1] = _mm512_setzero_ps();
#if !defined(__SANITIZE_ADDRESS__) /* four checked copies of the step overflow the code cache */
#pragma GCC unroll 4
#endif
  for (int q = 0; q < kc; q++) {
    const __m512 b0 = _mm512_load_ps(bp + (size_t)q * NR), b1 = _mm512_load_ps(bp + (size_t)q * NR + 16);
    const float *aq = a + q * ks;
#pragma GCC unroll 12
    for (int r = 0; r < mr; r++) {
      const __m512 x = _mm512_set1_ps(aq[r * rs]);
      acc[r][0] = _mm512_fmadd_ps(x, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(x, b1, acc[r][1]);
    }
  }
  const __m512 zero = _mm512_setzero_ps();
  const __m512 bias0 = e.bias ? _mm512_maskz_loadu_ps(m0, e.bias) : zero;
  const __m512 bias1 = e.bias ? _mm512_maskz_loadu_ps(m1, e.bias + 16) : zero;
  for (int r = 0; r < rows && r < mr; r++) {
    float *cr = c + (size_t)r * ldc;
    __m512 y0 = acc[r][0], y1 = acc[r][1];
    if (e.add) {
      y0 = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, cr), y0);
      y1 = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, cr + 16), y1);
    }
    if (e.bias) {
      y0 = _mm512_add_ps(y0, bias0);
      y1 = _mm512_add_ps(y1, bias1);
    }
    if (e.relu) {
      y0 = _mm512_max_ps(y0, zero);
      y1 = _mm512_max_ps(y1, zero);
    }
    _mm512_mask_storeu_ps(cr, m0, y0);
    _mm512_mask_storeu_ps(cr + 16, m1, y1);
  }
}

/* The row blocks: MR rows where that many are left, the last few in blocks of MR_TAIL. */
OWN_AVX512 static void tile(int kc, const float *a, ptrdiff_t rs, ptrdiff_t ks, const float *bp, float *c,
                            int ldc, int rows, __mmask16 m0, __mmask16 m1, epilogue_t e) {
  tile_mr(MR, kc, a, rs, ks, bp, c, ldc, rows, m0, m1, e);
}

OWN_AVX512 static void tile_tail(int kc, const float *a, ptrdiff_t rs, ptrdiff_t ks, const float *bp, float *c,
                                 int ldc, int rows, __mmask16 m0, __mmask16 m1, epilogue_t e) {
  tile_mr(MR_TAIL, kc, a, rs, ks, bp, c, ldc, rows, m0, m1, e);
}

static __mmask16 mask_of(int w) {
  return w >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (w > 0 ? w : 0)) - 1u);
}

/* Columns [j0, j0 + 32) of rows [q0, q0 + kc) of B into bp (kc x 32), zeros past n. */
OWN_AVX512 static void pack_panel(const float *B, int ldb, int q0, int kc, int j0, __mmask16 m0, __mmask16 m1,
                                  float *bp) {
  for (int q = 0; q < kc; q++) {
    const float *b = B + (size_t)(q0 + q) * ldb + j0;
    _mm512_store_ps(bp + (size_t)q * NR, _mm512_maskz_loadu_ps(m0, b));
    _mm512_store_ps(bp + (size_t)q * NR + 16, _mm512_maskz_loadu_ps(m1, b + 16));
  }
}

/* The weight gradient's B is the layer's output gradient dY before its activation's
 * backward. Where the caller asks (sac_gemm_own_wgrad), the panel's pack applies it:
 * dY = dY * act'(Y) in place, and adds the result's column sums to db, in row order (the
 * sums the backend's separate pass made, bit for bit, for k within one block). */
typedef struct {
  const float *Y; /* the layer's output, with dY's leading dimension */
  sac_act_t act;
  float *db; /* NULL: no column sums */
} act_bwd_t;

OWN_AVX512 static void pack_panel_act(float *dY, int ldb, int q0, int kc, int j0, __mmask16 m0, __mmask16 m1,
                                      const act_bwd_t *g, float *bp) {
  const __m512 zero = _mm512_setzero_ps(), one = _mm512_set1_ps(1.0f);
  __m512 s0 = zero, s1 = zero;
  for (int q = 0; q < kc; q++) {
    float *d = dY + (size_t)(q0 + q) * ldb + j0;
    const float *y = g->Y + (size_t)(q0 + q) * ldb + j0;
    __m512 d0 = _mm512_maskz_loadu_ps(m0, d), d1 = _mm512_maskz_loadu_ps(m1, d + 16);
    const __m512 y0 = _mm512_maskz_loadu_ps(m0, y), y1 = _mm512_maskz_loadu_ps(m1, y + 16);
    if (g->act == SAC_ACT_RELU) {
      d0 = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(y0, zero, _CMP_GT_OQ), d0);
      d1 = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(y1, zero, _CMP_GT_OQ), d1);
    } else if (g->act == SAC_ACT_TANH) {
      d0 = _mm512_mul_ps(d0, _mm512_sub_ps(one, _mm512_mul_ps(y0, y0)));
      d1 = _mm512_mul_ps(d1, _mm512_sub_ps(one, _mm512_mul_ps(y1, y1)));
    }
    _mm512_mask_storeu_ps(d, m0, d0);
    _mm512_mask_storeu_ps(d + 16, m1, d1);
    _mm512_store_ps(bp + (size_t)q * NR, d0);
    _mm512_store_ps(bp + (size_t)q * NR + 16, d1);
    s0 = _mm512_add_ps(s0, d0);
    s1 = _mm512_add_ps(s1, d1);
  }
  if (g->db) {
    float *db = g->db + j0;
    _mm512_mask_storeu_ps(db, m0, _mm512_add_ps(_mm512_maskz_loadu_ps(m0, db), s0));
    _mm512_mask_storeu_ps(db + 16, m1, _mm512_add_ps(_mm512_maskz_loadu_ps(m1, db + 16), s1));
  }
}

/* r[i] (16 rows of 16) becomes its transpose: r[c] holds what was column c. Pairs of
 * floats, then pairs of pairs, then 128-bit lanes twice. */
OWN_AVX512 static inline void transpose16(__m512 r[16]) {
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

/* The same panel of B^T, for B stored n x k (ldb): bp[q][j] = B[j0 + j][q0 + q], moved
 * 16 x 16 at a time through registers; zeros past w columns. */
OWN_AVX512 static void pack_panel_t(const float *B, int ldb, int q0, int kc, int j0, int w, float *bp) {
  for (int jb = 0; jb < NR; jb += 16)
    for (int qb = 0; qb < kc; qb += 16) {
      const int nq = kc - qb < 16 ? kc - qb : 16;
      const __mmask16 mq = mask_of(nq);
      __m512 r[16];
      for (int i = 0; i < 16; i++)
        r[i] = jb + i < w ? _mm512_maskz_loadu_ps(mq, B + (size_t)(j0 + jb + i) * ldb + q0 + qb)
                          : _mm512_setzero_ps();
      transpose16(r);
      for (int c = 0; c < nq; c++)
        _mm512_store_ps(bp + (size_t)(qb + c) * NR + jb, r[c]);
    }
}

/* The forms taken: op(A) B (the forward), op(A)^T B (the weight gradient: A is X, the
 * layer's input) and A B^T (the input gradient: B is W). */
typedef enum { FORM_NN, FORM_TN, FORM_NT } form_t;

/* The rows of C in blocks: MR where that many are left, else MR_TAIL (the last block
 * zero-padded where fewer are left). */
static int block_of(int m, int i0) { return m - i0 >= MR ? MR : MR_TAIL; }

/* Columns [i0, i0 + w) of rows [q0, q0 + kc) of A (k x m, lda) into ap as kc steps of w
 * side by side, zeros past m. */
OWN_AVX512 static void pack_columns(const float *A, int lda, int q0, int kc, int i0, int w, int m, float *ap) {
  const float *a = A + (size_t)q0 * lda + i0;
  const __mmask16 mk = mask_of(m - i0 < w ? m - i0 : w);
  for (int q = 0; q < kc; q++)
    _mm512_mask_storeu_ps(ap + q * w, mask_of(w), _mm512_maskz_loadu_ps(mk, a + (size_t)q * lda));
}

/* One k block [q0, q0 + kc) over all of C, panel by panel. Rows of A are read in place
 * (a last block of fewer rows than its tile's copied into zero-padded rows first). The
 * weight gradient's A is X^T, whose tile values at one k lie in one line of X, a line per
 * k: read in place, every panel fetched all of X's lines again and ran at 0.75 of the
 * forward's speed; so its k block is packed once into blocks of columns (slabs, in
 * scratch, each block's kc steps side by side) that the tiles then read as rows. */
OWN_AVX512 static void k_block(form_t f, int m, int n, int q0, int kc, const float *A, int lda,
                               const float *B, int ldb, float *C, int ldc, epilogue_t e, const float *bias,
                               float *slabs, const act_bwd_t *g) {
  float bp[KC * NR] __attribute__((aligned(64)));
  float ap[MR_MAX * KC] __attribute__((aligned(64)));
  if (f == FORM_TN)
    for (int i0 = 0; i0 < m; i0 += block_of(m, i0))
      pack_columns(A, lda, q0, kc, i0, block_of(m, i0), m, slabs + (size_t)i0 * kc);
  for (int j0 = 0; j0 < n; j0 += NR) {
    const int w = n - j0 < NR ? n - j0 : NR;
    const __mmask16 m0 = mask_of(w), m1 = mask_of(w - 16);
    if (f == FORM_NT)
      pack_panel_t(B, ldb, q0, kc, j0, w, bp);
    else if (g) /* B is the caller's dY (sac_gemm_own_wgrad), written in place */
      pack_panel_act((float *)B, ldb, q0, kc, j0, m0, m1, g, bp);
    else
      pack_panel(B, ldb, q0, kc, j0, m0, m1, bp);
    e.bias = bias ? bias + j0 : NULL;
    for (int i0 = 0; i0 < m;) {
      const int bw = block_of(m, i0), rows = m - i0 < bw ? m - i0 : bw;
      const float *a = A + (size_t)i0 * lda + q0;
      ptrdiff_t rs = lda, ks = 1;
      if (f == FORM_TN) {
        a = slabs + (size_t)i0 * kc, rs = 1, ks = bw;
      } else if (rows < bw) {
        memset(ap, 0, sizeof(float) * (size_t)bw * (size_t)kc);
        for (int r = 0; r < rows; r++)
          memcpy(ap + r * kc, a + (size_t)r * lda, sizeof(float) * (size_t)kc);
        a = ap, rs = kc;
      }
      float *c = C + (size_t)i0 * ldc + j0;
      if (bw == MR)
        tile(kc, a, rs, ks, bp, c, ldc, rows, m0, m1, e);
      else
        tile_tail(kc, a, rs, ks, bp, c, ldc, rows, m0, m1, e);
      i0 += bw;
    }
  }
}

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

/* Returns 0 where it did nothing (no scratch for the weight gradient's slabs). */
OWN_AVX512 static int own_gemm(const act_bwd_t *g, form_t f, int m, int n, int k, const float *A, int lda,
                               const float *B, int ldb, int add, float *C, int ldc, const float *bias,
                               sac_act_t act) {
  float *slabs = NULL;
  if (f == FORM_TN && !(slabs = scratch_of((size_t)(k < KC ? k : KC) * (size_t)(m + MR_TAIL))))
    return 0;
  if (g && g->db) /* the column sums start here: nothing was touched before this point */
    memset(g->db, 0, sizeof(float) * (size_t)n);
  for (int q0 = 0; q0 < k; q0 += KC) {
    const int kc = k - q0 < KC ? k - q0 : KC;
    const int last = q0 + kc >= k;
    /* later k blocks add to what the earlier ones stored; bias and ReLU once, at the end */
    const epilogue_t e = {q0 == 0 ? add : 1, last && act == SAC_ACT_RELU, NULL};
    k_block(f, m, n, q0, kc, A, lda, B, ldb, C, ldc, e, last ? bias : NULL, slabs, g);
  }
  if (act == SAC_ACT_TANH)
    for (int i = 0; i < m; i++)
      for (int j = 0; j < n; j++)
        C[(size_t)i * ldc + j] = tanhf(C[(size_t)i * ldc + j]);
  return 1;
}

/* Whether the own GEMM takes an m x n product over k here. */
static int own_takes(int m, int n, int k) {
  static atomic_int supported = -1;
  int have = atomic_load_explicit(&supported, memory_order_relaxed);
  if (have < 0)
    atomic_store_explicit(&supported, have = sac_gemm_own_supported(), memory_order_relaxed);
  return have && atomic_load(&own_enabled) && m >= MIN_ROWS && n >= NR && k >= 1;
}

static int counted(int done) {
  if (done)
    atomic_fetch_add_explicit(&own_products, 1, memory_order_relaxed);
  return done;
}

int sac_gemm_own(int ta, int tb, int m, int n, int k, const float *A, int lda, const float *B, int ldb,
                 int add, float *C, int ldc, const float *bias, sac_act_t act) {
  if ((ta && tb) || !own_takes(m, n, k))
    return 0;
  return counted(own_gemm(NULL,
                          ta   ? FORM_TN
                          : tb ? FORM_NT
                               : FORM_NN,
                          m, n, k, A, lda, B, ldb, add, C, ldc, bias, act));
}

int sac_gemm_own_wgrad(int m, int n, int k, const float *X, int ldx, float *dY, const float *Y, int ldy,
                       sac_act_t act, float *db, float *dW, int ldw) {
  if (!own_takes(m, n, k))
    return 0;
  const act_bwd_t g = {Y, act, db};
  return counted(own_gemm(&g, FORM_TN, m, n, k, X, ldx, dY, ldy, 0, dW, ldw, NULL, SAC_ACT_NONE));
}

#else /* not x86-64 with GCC or Clang: OpenBLAS does every product */

int sac_gemm_own_supported(void) { return 0; }

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
