/* The cpu backend's own GEMM (learner/gemm_own.h): every form it takes (the forward's
 * X W, the weight gradient's X^T dY, the input gradient's dY W^T) against a double
 * reference, with the bias and activation it applies (and the weight gradient's
 * activation backward and bias gradient), adding into C or not, with padded
 * leading dimensions (nothing written between rows: a negative control writes there on
 * purpose and the check sees it), k over its block size and ragged edges; results equal
 * bit for bit however the rows or columns are split over calls (as over threads); the
 * shapes it leaves to OpenBLAS; and the cpu backend's layers, which use it, against the
 * same layers with it turned off; and, on a CPU with AVX-512, its AVX2 kernel giving the same
 * results as its AVX-512 one, bit for bit (a negative control moves one input by an ulp and
 * the comparison sees it). The own GEMM runs on CPUs with AVX-512 or with
 * AVX2 and FMA: elsewhere every case skips and the binary exits 77 (tests/skip_exit.h; an
 * allowed skip in tests/allowed_skips.txt). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "learner/backend.h"
#include "learner/gemm_own.h"
#include "tests/skip_exit.h"

static sac_rng_t rng;

static void setup(void) {
  if (!sac_gemm_own_supported())
    cr_skip_test(
        "SKIP: neither AVX-512 nor AVX2 with FMA on this CPU: the own GEMM does not run here (OpenBLAS "
        "makes every product)");
  sac_gemm_own_set_enabled(1);
  sac_gemm_own_cap_bits(512);
  sac_rng_init(&rng, 2026, 12);
}

TestSuite(gemm_own, .init = setup);

static float *filled(size_t n, double lo, double hi) {
  float *p = malloc((n ? n : 1) * sizeof(float));
  cr_assert(p);
  for (size_t i = 0; i < n; i++)
    p[i] = (float)sac_rng_uniform_range(&rng, lo, hi);
  return p;
}

typedef struct {
  int ta, tb, m, n, k;
} shape_t;

/* leading dimensions with room between rows (the padding must stay as it was) */
static int lda_of(const shape_t *s) { return (s->ta ? s->m : s->k) + 3; }
static int ldb_of(const shape_t *s) { return (s->tb ? s->k : s->n) + 5; }
static int ldc_of(const shape_t *s) { return s->n + 7; }

static double a_at(const shape_t *s, const float *A, int i, int q) {
  return s->ta ? A[(size_t)q * lda_of(s) + i] : A[(size_t)i * lda_of(s) + q];
}
static double b_at(const shape_t *s, const float *B, int q, int j) {
  return s->tb ? B[(size_t)j * ldb_of(s) + q] : B[(size_t)q * ldb_of(s) + j];
}

#define SENTINEL 1234.5f

/* Whether C's columns past n (up to ldc) of every row still hold SENTINEL. */
static int padding_intact(const float *C, int m, int n, int ldc) {
  for (int i = 0; i < m; i++)
    for (int j = n; j < ldc; j++)
      if (C[(size_t)i * ldc + j] != SENTINEL)
        return 0;
  return 1;
}

/* One case: the own GEMM's C against the double reference, within the bound of float
 * sums of k terms ((k + 4) float epsilons of the sum of the terms' magnitudes). */
static void check_case(const shape_t *s, int add, int with_bias, sac_act_t act) {
  const int lda = lda_of(s), ldb = ldb_of(s), ldc = ldc_of(s);
  float *A = filled((size_t)(s->ta ? s->k : s->m) * lda, -1, 1);
  float *B = filled((size_t)(s->tb ? s->n : s->k) * ldb, -1, 1);
  float *bias = filled((size_t)s->n, -0.5, 0.5);
  float *C = filled((size_t)s->m * ldc, -2, 2), *C0 = malloc(sizeof(float) * (size_t)s->m * ldc);
  for (int i = 0; i < s->m; i++)
    for (int j = s->n; j < ldc; j++)
      C[(size_t)i * ldc + j] = SENTINEL;
  memcpy(C0, C, sizeof(float) * (size_t)s->m * ldc);
  cr_assert_eq(
      sac_gemm_own(s->ta, s->tb, s->m, s->n, s->k, A, lda, B, ldb, add, C, ldc, with_bias ? bias : NULL, act),
      1, "ta %d tb %d %dx%dx%d: not taken", s->ta, s->tb, s->m, s->n, s->k);
  for (int i = 0; i < s->m; i++)
    for (int j = 0; j < s->n; j++) {
      double sum = add ? C0[(size_t)i * ldc + j] : 0.0, mag = fabs(sum);
      for (int q = 0; q < s->k; q++) {
        const double t = a_at(s, A, i, q) * b_at(s, B, q, j);
        sum += t, mag += fabs(t);
      }
      if (with_bias)
        sum += bias[j], mag += fabs(bias[j]);
      if (act == SAC_ACT_RELU)
        sum = sum > 0.0 ? sum : 0.0;
      else if (act == SAC_ACT_TANH)
        sum = tanh(sum);
      const double got = C[(size_t)i * ldc + j], tol = (s->k + 4) * 1.2e-7 * mag + 2.4e-7;
      cr_assert(fabs(got - sum) <= tol,
                "ta %d tb %d %dx%dx%d add %d bias %d act %d: C[%d][%d] = %.9g, double %.9g (tolerance %.3g)",
                s->ta, s->tb, s->m, s->n, s->k, add, with_bias, (int)act, i, j, got, sum, tol);
    }
  cr_assert(padding_intact(C, s->m, s->n, ldc), "ta %d tb %d %dx%dx%d: wrote between rows", s->ta, s->tb,
            s->m, s->n, s->k);
  free(A), free(B), free(bias), free(C), free(C0);
}

/* The last row is narrow: the policy's 2A outputs, the action's input gradient, the fewest
 * columns taken. */
static const shape_t shapes[] = {
    {0, 0, 8, 32, 1},      {0, 0, 9, 33, 17},   {0, 0, 37, 70, 23},    {0, 0, 256, 256, 256},
    {0, 0, 13, 40, 300},   {0, 0, 20, 45, 600}, {1, 0, 8, 32, 5},      {1, 0, 23, 256, 256},
    {1, 0, 17, 77, 129},   {1, 0, 64, 96, 300}, {1, 0, 256, 128, 256}, {0, 1, 8, 32, 1},
    {0, 1, 128, 256, 256}, {0, 1, 37, 45, 300}, {0, 1, 19, 100, 17},   {0, 1, 16, 64, 600},
    {0, 0, 256, 12, 256},  {0, 1, 128, 6, 256}, {0, 0, 9, 4, 17},      {0, 1, 37, 5, 300},
};

Test(gemm_own, every_form_matches_a_double_reference, .timeout = 120) {
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
    for (int add = 0; add <= 1; add++) {
      check_case(&shapes[i], add, 0, SAC_ACT_NONE);
      check_case(&shapes[i], add, 1, SAC_ACT_NONE);
      check_case(&shapes[i], add, 1, SAC_ACT_RELU);
      check_case(&shapes[i], add, 1, SAC_ACT_TANH);
    }
}

/* The negative control of the padding check: a product one column wider than the check
 * is told writes into every row's padding, and padding_intact says so. */
Test(gemm_own, padding_check_sees_a_write_between_rows) {
  const int m = 9, n = 40, k = 7, ldc = n + 7;
  float *A = filled((size_t)m * k, -1, 1), *B = filled((size_t)k * (n + 1), -1, 1);
  float *C = malloc(sizeof(float) * (size_t)m * ldc);
  for (int i = 0; i < m * ldc; i++)
    C[i] = SENTINEL;
  cr_assert_eq(sac_gemm_own(0, 0, m, n + 1, k, A, k, B, n + 1, 0, C, ldc, NULL, SAC_ACT_NONE), 1);
  cr_assert_not(padding_intact(C, m, n, ldc), "a write into the padding went unseen");
  free(A), free(B), free(C);
}

/* C computed whole, and again in pieces along `split_rows` (rows) or not (columns): equal bit
 * for bit, as the backend's threads take rows (forward, input gradient) or columns (weight
 * gradient). */
static void check_split(int ta, int tb, int m, int n, int k, int split_rows, int cut) {
  const int lda = ta ? m : k, ldb = tb ? k : n;
  float *A = filled((size_t)(ta ? k : m) * lda, -1, 1), *B = filled((size_t)(tb ? n : k) * ldb, -1, 1);
  float *bias = filled((size_t)n, -0.5, 0.5);
  float *whole = malloc(sizeof(float) * (size_t)m * n), *parts = malloc(sizeof(float) * (size_t)m * n);
  cr_assert_eq(sac_gemm_own(ta, tb, m, n, k, A, lda, B, ldb, 0, whole, n, bias, SAC_ACT_RELU), 1);
  if (split_rows) {
    const float *A2 = ta ? A + cut : A + (size_t)cut * lda;
    cr_assert_eq(sac_gemm_own(ta, tb, cut, n, k, A, lda, B, ldb, 0, parts, n, bias, SAC_ACT_RELU), 1);
    cr_assert_eq(sac_gemm_own(ta, tb, m - cut, n, k, A2, lda, B, ldb, 0, parts + (size_t)cut * n, n, bias,
                              SAC_ACT_RELU),
                 1);
  } else {
    const float *B2 = tb ? B + (size_t)cut * ldb : B + cut;
    cr_assert_eq(sac_gemm_own(ta, tb, m, cut, k, A, lda, B, ldb, 0, parts, n, bias, SAC_ACT_RELU), 1);
    cr_assert_eq(
        sac_gemm_own(ta, tb, m, n - cut, k, A, lda, B2, ldb, 0, parts + cut, n, bias + cut, SAC_ACT_RELU), 1);
  }
  cr_assert_eq(memcmp(whole, parts, sizeof(float) * (size_t)m * n), 0, "ta %d tb %d: split %s at %d differs",
               ta, tb, split_rows ? "rows" : "columns", cut);
  free(A), free(B), free(bias), free(whole), free(parts);
}

Test(gemm_own, results_do_not_depend_on_how_rows_or_columns_are_split) {
  check_split(0, 0, 256, 256, 256, 1, 120); /* forward, rows */
  check_split(0, 1, 256, 256, 256, 1, 100); /* input gradient, rows */
  check_split(1, 0, 256, 256, 256, 0, 96);  /* weight gradient, columns */
  check_split(1, 0, 23, 256, 256, 0, 128);
  check_split(0, 0, 64, 96, 600, 1, 24); /* k over the block size */
}

Test(gemm_own, leaves_what_it_does_not_take_untouched) {
  float *A = filled(64 * 64, -1, 1), *B = filled(64 * 64, -1, 1), *C = filled(64 * 64, -1, 1);
  float *C0 = malloc(sizeof(float) * 64 * 64);
  memcpy(C0, C, sizeof(float) * 64 * 64);
  cr_expect_eq(sac_gemm_own(0, 0, 7, 64, 64, A, 64, B, 64, 0, C, 64, NULL, SAC_ACT_NONE), 0, "7 rows");
  cr_expect_eq(sac_gemm_own(0, 0, 64, 3, 64, A, 64, B, 64, 0, C, 64, NULL, SAC_ACT_NONE), 0, "3 columns");
  cr_expect_eq(sac_gemm_own(0, 1, 64, 3, 64, A, 64, B, 64, 0, C, 64, NULL, SAC_ACT_NONE), 0, "3 columns, NT");
  cr_expect_eq(sac_gemm_own(1, 0, 64, 31, 64, A, 64, B, 64, 0, C, 64, NULL, SAC_ACT_NONE), 0,
               "31 columns of a weight gradient");
  cr_expect_eq(sac_gemm_own(1, 1, 64, 64, 64, A, 64, B, 64, 0, C, 64, NULL, SAC_ACT_NONE), 0,
               "both transposed");
  cr_expect_eq(sac_gemm_own(0, 0, 64, 64, 0, A, 64, B, 64, 0, C, 64, NULL, SAC_ACT_NONE), 0, "k = 0");
  sac_gemm_own_set_enabled(0);
  cr_expect_eq(sac_gemm_own_enabled(), 0);
  cr_expect_eq(sac_gemm_own(0, 0, 64, 64, 64, A, 64, B, 64, 0, C, 64, NULL, SAC_ACT_NONE), 0, "turned off");
  sac_gemm_own_set_enabled(1);
  cr_expect_eq(memcmp(C, C0, sizeof(float) * 64 * 64), 0, "a product it did not take changed C");
  cr_expect_eq(sac_gemm_own(0, 0, 64, 64, 64, A, 64, B, 64, 0, C, 64, NULL, SAC_ACT_NONE), 1, "on again");
  free(A), free(B), free(C), free(C0);
}

/* sac_gemm_own_wgrad: dY after the activation's backward equal, bit for bit, to the
 * backend's pass (d * (y > 0), d * (1 - y * y) in float); db its column sums in row order
 * (bit for bit within one k block, within rounding over several); dW = X^T dY within the
 * double reference's bound. */
static void check_wgrad(int m, int n, int k, sac_act_t act, int with_db) {
  const int ldx = m + 3, ldy = n + 5, ldw = n + 2;
  float *X = filled((size_t)k * ldx, -1, 1), *dY = filled((size_t)k * ldy, -1, 1);
  float *Y = filled((size_t)k * ldy, -1, 1), *dW = filled((size_t)m * ldw, -3, 3);
  float *db = filled((size_t)n, -3, 3), *want = malloc(sizeof(float) * (size_t)k * ldy);
  memcpy(want, dY, sizeof(float) * (size_t)k * ldy);
  for (int q = 0; q < k; q++)
    for (int j = 0; j < n; j++) {
      float *d = &want[(size_t)q * ldy + j];
      const float y = Y[(size_t)q * ldy + j];
      if (act == SAC_ACT_RELU)
        *d = y > 0.0f ? *d : 0.0f;
      else if (act == SAC_ACT_TANH)
        *d *= 1.0f - y * y;
    }
  cr_assert_eq(sac_gemm_own_wgrad(m, n, k, X, ldx, dY, Y, ldy, act, with_db ? db : NULL, dW, ldw), 1);
  for (int q = 0; q < k; q++)
    for (int j = 0; j < ldy; j++) /* the padding between rows included: as it was */
      cr_assert_eq(dY[(size_t)q * ldy + j], want[(size_t)q * ldy + j],
                   "act %d: dY[%d][%d] is %.9g, want %.9g", (int)act, q, j, dY[(size_t)q * ldy + j],
                   want[(size_t)q * ldy + j]);
  for (int j = 0; with_db && j < n; j++) {
    float sum = 0.0f;
    double mag = 0.0;
    for (int q = 0; q < k; q++)
      sum += want[(size_t)q * ldy + j], mag += fabs(want[(size_t)q * ldy + j]);
    if (k <= 256)
      cr_assert_eq(db[j], sum, "act %d: db[%d] is %.9g, the row-order sum %.9g", (int)act, j, db[j], sum);
    else
      cr_assert(fabs(db[j] - sum) <= (k + 4) * 1.2e-7 * mag, "act %d k %d: db[%d] is %.9g, want %.9g",
                (int)act, k, j, db[j], sum);
  }
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++) {
      double sum = 0.0, mag = 0.0;
      for (int q = 0; q < k; q++) {
        const double t = (double)X[(size_t)q * ldx + i] * want[(size_t)q * ldy + j];
        sum += t, mag += fabs(t);
      }
      cr_assert(fabs(dW[(size_t)i * ldw + j] - sum) <= (k + 4) * 1.2e-7 * mag + 1e-30,
                "act %d: dW[%d][%d] is %.9g, double %.9g", (int)act, i, j, dW[(size_t)i * ldw + j], sum);
    }
  free(X), free(dY), free(Y), free(dW), free(db), free(want);
}

Test(gemm_own, weight_gradient_applies_the_activation_backward_on_its_way, .timeout = 60) {
  const sac_act_t acts[] = {SAC_ACT_NONE, SAC_ACT_RELU, SAC_ACT_TANH};
  for (int a = 0; a < 3; a++) {
    check_wgrad(23, 256, 256, acts[a], 1); /* the critics' joined first layer */
    check_wgrad(64, 45, 300, acts[a], 1);  /* k over the block, ragged columns */
    check_wgrad(9, 32, 17, acts[a], 0);
  }
}

/* A critic's hidden layer at cheetah size (twin members, 256 x 256, batch 256, ReLU) and the
 * critics' joined first layer, forward and backward on two threads: with the own GEMM
 * (which must then make products: its count rises) and with it off (OpenBLAS; the count
 * stays), every output within float rounding of the other. */
static void run_layer(int on, int n_in, float *const in[4], float *out, size_t nout_each[5]) {
  const int B = 256, n_out = 256, K = 2;
  sac_backend_t *be;
  cr_assert_eq(sac_backend_new("cpu", 2, &be), 0);
  sac_gemm_own_set_enabled(on);
  const size_t nX = (size_t)B * n_in, nW = (size_t)K * n_in * n_out, nb = (size_t)K * n_out,
               nY = (size_t)B * K * n_out;
  float *X, *W, *b, *Y, *dY, *dW, *db, *dX;
  float **bufs[] = {&X, &W, &b, &Y, &dY, &dW, &db, &dX};
  const size_t sz[] = {nX, nW, nb, nY, nY, nW, nb, nX};
  for (int i = 0; i < 8; i++)
    cr_assert_eq(be->ops->alloc(be, sz[i], bufs[i]), 0);
  memcpy(X, in[0], nX * 4), memcpy(W, in[1], nW * 4), memcpy(b, in[2], nb * 4), memcpy(dY, in[3], nY * 4);
  sac_linear_t L = {.B = B,
                    .n_in = n_in,
                    .n_out = n_out,
                    .K = K,
                    .shared = 1,
                    .n_seg = 1,
                    .W = W,
                    .b = b,
                    .act = SAC_ACT_RELU};
  L.seg[0] = (sac_seg_t){X, n_in, n_in, 0};
  const unsigned long long before = sac_gemm_own_products();
  be->ops->linear_fwd(be, &L, Y, K * n_out);
  float *dXs[2] = {dX, NULL};
  const int ldx[2] = {n_in, 0};
  be->ops->linear_bwd(be, &L, dY, Y, K * n_out, dW, db, dXs, ldx);
  const unsigned long long made = sac_gemm_own_products() - before;
  if (on)
    cr_assert_geq(made, 3, "the layer made %llu products with the own GEMM on", made);
  else
    cr_assert_eq(made, 0, "the layer made %llu products with the own GEMM off", made);
  const float *outs[] = {Y, dY, dW, db, dX};
  const size_t on_[] = {nY, nY, nW, nb, nX};
  for (int i = 0; i < 5; i++)
    memcpy(out, outs[i], on_[i] * 4), out += on_[i], nout_each[i] = on_[i];
  for (int i = 0; i < 8; i++)
    be->ops->free(be, *bufs[i]);
  sac_backend_destroy(&be);
  sac_gemm_own_set_enabled(1);
}

static void compare_layers(int n_in) {
  const int B = 256, n_out = 256, K = 2;
  float *in[4] = {filled((size_t)B * n_in, -1, 1), filled((size_t)K * n_in * n_out, -0.1, 0.1),
                  filled((size_t)K * n_out, -0.1, 0.1), filled((size_t)B * K * n_out, -1, 1)};
  const size_t total =
      2 * (size_t)B * K * n_out + 2 * (size_t)K * n_in * n_out + (size_t)K * n_out + 2 * (size_t)B * n_in;
  float *own = malloc(total * 4), *blas = malloc(total * 4);
  size_t each[5];
  run_layer(1, n_in, in, own, each);
  run_layer(0, n_in, in, blas, each);
  const char *what[] = {"Y", "dY", "dW", "db", "dX"};
  size_t off = 0;
  for (int o = 0; o < 5; o++) {
    double scale = 0.0;
    for (size_t i = 0; i < each[o]; i++)
      scale = fmax(scale, fabs(blas[off + i]));
    for (size_t i = 0; i < each[o]; i++)
      cr_assert(fabs(own[off + i] - blas[off + i]) <= 1e-5 * scale + 1e-7,
                "n_in %d: %s[%zu] is %.9g with the own GEMM, %.9g with OpenBLAS", n_in, what[o], i,
                own[off + i], blas[off + i]);
    off += each[o];
  }
  for (int i = 0; i < 4; i++)
    free(in[i]);
  free(own), free(blas);
}

Test(gemm_own, cpu_backend_layers_match_openblas, .timeout = 120) {
  compare_layers(256); /* a hidden layer */
  compare_layers(23);  /* the critics' joined first layer (cheetah: 17 + 6) */
}

/* Every form and shape above, and the weight gradient with each activation, made by the
 * AVX-512 kernel and by the AVX2 one from the same inputs: the same bits (each element the
 * same running sum over k in the same order). Where the CPU has no AVX-512 there is one
 * kernel and nothing to compare: the case skips. */
typedef struct {
  size_t n;
  float *p;
} outputs_t;

static void all_outputs(outputs_t *o, float *const in[4]) {
  size_t at = 0;
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    const shape_t *s = &shapes[i];
    const int lda = lda_of(s), ldb = ldb_of(s), ldc = ldc_of(s);
    for (int form = 0; form < 4; form++) { /* add or not, x bias and ReLU or tanh */
      float *C = o->p + at;
      memcpy(C, in[2], sizeof(float) * (size_t)s->m * ldc);
      cr_assert_eq(sac_gemm_own(s->ta, s->tb, s->m, s->n, s->k, in[0], lda, in[1], ldb, form & 1, C, ldc,
                                in[3], form & 2 ? SAC_ACT_TANH : SAC_ACT_RELU),
                   1);
      at += (size_t)s->m * ldc;
    }
  }
  const sac_act_t acts[] = {SAC_ACT_NONE, SAC_ACT_RELU, SAC_ACT_TANH};
  const int wm = 64, wn = 45, wk = 300, ldy = wn + 5, ldw = wn + 2; /* k over the block, ragged */
  for (int a = 0; a < 3; a++) {
    float *dY = o->p + at, *dW = dY + (size_t)wk * ldy, *db = dW + (size_t)wm * ldw;
    memcpy(dY, in[1], sizeof(float) * (size_t)wk * ldy);
    cr_assert_eq(sac_gemm_own_wgrad(wm, wn, wk, in[0], wm + 3, dY, in[2], ldy, acts[a], db, dW, ldw), 1);
    at += (size_t)wk * ldy + (size_t)wm * ldw + (size_t)wn;
  }
  o->n = at;
}

/* The first output whose bits differ between a and b, or a.n when none does. */
static size_t first_difference(const outputs_t *a, const outputs_t *b) {
  cr_assert_eq(a->n, b->n);
  for (size_t i = 0; i < a->n; i++)
    if (memcmp(&a->p[i], &b->p[i], sizeof(float)) != 0)
      return i;
  return a->n;
}

#define BIG ((size_t)1 << 22) /* floats: more than any input or all outputs together need */

static void inputs(float *in[4]) {
  in[0] = filled(BIG, -1, 1), in[1] = filled(BIG, -1, 1), in[2] = filled(BIG, -2, 2),
  in[3] = filled(BIG, -0.5, 0.5);
}

Test(gemm_own, the_avx2_kernel_gives_the_avx512_kernels_bits, .timeout = 120) {
  if (sac_gemm_own_bits() != 512)
    cr_skip_test(
        "SKIP: no AVX-512 on this CPU: the AVX2 kernel is the only one here (the other cases test it)");
  float *in[4];
  inputs(in);
  outputs_t wide = {0, malloc(BIG * sizeof(float))}, narrow = {0, malloc(BIG * sizeof(float))};
  all_outputs(&wide, in);
  cr_assert_eq(sac_gemm_own_cap_bits(256), 256);
  all_outputs(&narrow, in);
  cr_assert_eq(sac_gemm_own_cap_bits(512), 512);
  cr_assert_leq(wide.n, BIG);
  const size_t d = first_difference(&wide, &narrow);
  cr_assert_eq(d, wide.n, "output %zu: %.9g with AVX-512, %.9g with AVX2", d, wide.p[d], narrow.p[d]);
  for (int i = 0; i < 4; i++)
    free(in[i]);
  free(wide.p), free(narrow.p);
}

/* The negative control of that comparison, with whichever kernel this CPU runs: one input
 * of the first product moved by one unit in the last place between two runs, and
 * first_difference finds an output that moved. */
Test(gemm_own, the_bit_comparison_sees_one_input_moved_by_an_ulp, .timeout = 120) {
  float *in[4];
  inputs(in);
  outputs_t a = {0, malloc(BIG * sizeof(float))}, b = {0, malloc(BIG * sizeof(float))};
  all_outputs(&a, in);
  in[0][0] = nextafterf(in[0][0], 2.0f);
  all_outputs(&b, in);
  cr_assert_lt(first_difference(&a, &b), a.n, "a moved input went unseen");
  for (int i = 0; i < 4; i++)
    free(in[i]);
  free(a.p), free(b.p);
}

Test(gemm_own, the_width_cap_takes_only_512_or_256) {
  const int have = sac_gemm_own_bits();
  cr_expect_eq(sac_gemm_own_cap_bits(128), -1);
  cr_expect_eq(sac_gemm_own_cap_bits(0), -1);
  cr_expect_eq(sac_gemm_own_bits(), have, "a refused cap changed the width");
  cr_expect_eq(sac_gemm_own_cap_bits(256), 256);
  cr_expect_eq(sac_gemm_own_cap_bits(512), have);
}
