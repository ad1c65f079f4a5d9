/* Finite-difference checks (double-precision reference, sac_ref.h) of every backward op
 * of the cpu backend, plus forward ops against the reference, Adam against a
 * hand-computed step, Polyak, and the noise generator.
 *
 * Tolerance: analytic gradients are float32 (about 1e-7 relative per operation over a
 * few hundred terms), the finite differences are double with h = 1e-6 (truncation
 * error ~1e-12, rounding ~1e-10): |analytic - fd| <= 2e-4 + 1e-3 |fd| is far above
 * float noise and far below any real mistake (a wrong sign or a missing term is O(1)).
 *
 * Every op's outputs hold stale values (stale(), not zeros) when the op runs, so an op
 * that accumulates into an output instead of overwriting it fails (issue 27: two such
 * bugs passed while every output buffer started zeroed). */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif
#include <dirent.h>
#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/error.h"
#include "common/philox.h"
#include "common/rng.h"
#include "learner/backend.h"
#include "sac_ref.h"

static sac_backend_t *be;
static sac_rng_t rng;
static sac_rng_t stale_rng; /* its own stream: the inputs stay those of rng */

static void setup(void) {
  cr_assert_eq(sac_backend_new("cpu", 1, &be), 0);
  sac_rng_init(&rng, 1234, 99);
  sac_rng_init(&stale_rng, 4321, 7);
}
static void teardown(void) { sac_backend_destroy(&be); }

TestSuite(backend_cpu, .init = setup, .fini = teardown);

static float *dev(size_t n) {
  float *p;
  cr_assert_eq(be->ops->alloc(be, n, &p), 0);
  return p;
}
static void fill(float *p, size_t n, double lo, double hi) {
  for (size_t i = 0; i < n; i++)
    p[i] = (float)sac_rng_uniform_range(&rng, lo, hi);
}
/* What an output buffer holds before an op writes it: values of the size of a previous
 * update's, which the op must overwrite, not add to. */
static void stale(float *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    p[i] = (float)sac_rng_uniform_range(&stale_rng, -3, 3);
}
static void to_double(const float *f, double *d, size_t n) {
  for (size_t i = 0; i < n; i++)
    d[i] = f[i];
}

#define CHECK_GRAD(an, fd, what, idx)                                                                        \
  cr_expect(fabs((double)(an) - (fd)) <= 2e-4 + 1e-3 * fabs(fd), "%s[%d]: analytic %.7g vs fd %.7g", what,   \
            (int)(idx), (double)(an), (double)(fd))

/* J = sum G . layer(X) in double, for a shared 2-segment or non-shared layer. */
typedef struct {
  int B, n1, n2, n_out, K, shared;
  sac_act_t act;
  double *X1, *X2, *W, *b, *G;
} lin_ref_t;

static double lin_objective(const lin_ref_t *r) {
  int n_in = r->shared ? r->n1 + r->n2 : r->n1;
  double J = 0;
  for (int k = 0; k < r->K; k++)
    for (int i = 0; i < r->B; i++)
      for (int j = 0; j < r->n_out; j++) {
        double acc = r->b[k * r->n_out + j];
        const double *W = r->W + (size_t)k * n_in * r->n_out;
        if (r->shared) {
          for (int c = 0; c < r->n1; c++)
            acc += r->X1[i * r->n1 + c] * W[c * r->n_out + j];
          for (int c = 0; c < r->n2; c++)
            acc += r->X2[i * r->n2 + c] * W[(r->n1 + c) * r->n_out + j];
        } else {
          for (int c = 0; c < r->n1; c++)
            acc += r->X1[i * r->K * r->n1 + k * r->n1 + c] * W[c * r->n_out + j];
        }
        if (r->act == SAC_ACT_RELU)
          acc = acc > 0 ? acc : 0;
        else if (r->act == SAC_ACT_TANH)
          acc = tanh(acc);
        J += r->G[i * r->K * r->n_out + k * r->n_out + j] * acc;
      }
  return J;
}

static void check_linear(int shared, sac_act_t act) {
  const int B = 5, n1 = shared ? 4 : 3, n2 = shared ? 2 : 0, n_out = 3, K = 2;
  const int n_in = n1 + n2;
  const int w1 = shared ? n1 : K * n1; /* columns of X1 */
  float *X1 = dev((size_t)B * w1), *X2 = dev((size_t)B * (n2 ? n2 : 1));
  float *W = dev((size_t)K * n_in * n_out), *b = dev((size_t)K * n_out);
  float *Y = dev((size_t)B * K * n_out), *dY = dev((size_t)B * K * n_out);
  float *dW = dev((size_t)K * n_in * n_out), *db = dev((size_t)K * n_out);
  float *dX1 = dev((size_t)B * w1), *dX2 = dev((size_t)B * (n2 ? n2 : 1));
  fill(X1, (size_t)B * w1, -1, 1);
  fill(X2, (size_t)B * n2, -1, 1);
  fill(W, (size_t)K * n_in * n_out, -1, 1);
  fill(b, (size_t)K * n_out, -0.5, 0.5);
  fill(dY, (size_t)B * K * n_out, -1, 1);
  stale(Y, (size_t)B * K * n_out), stale(dW, (size_t)K * n_in * n_out), stale(db, (size_t)K * n_out);
  stale(dX1, (size_t)B * w1), stale(dX2, (size_t)B * (n2 ? n2 : 1));
  lin_ref_t r = {B, n1, n2, n_out, K, shared, act, NULL, NULL, NULL, NULL, NULL};
  r.X1 = calloc((size_t)B * w1, sizeof(double));
  r.X2 = calloc((size_t)B * (n2 ? n2 : 1), sizeof(double));
  r.W = calloc((size_t)K * n_in * n_out, sizeof(double));
  r.b = calloc((size_t)K * n_out, sizeof(double));
  r.G = calloc((size_t)B * K * n_out, sizeof(double));
  to_double(X1, r.X1, (size_t)B * w1);
  to_double(X2, r.X2, (size_t)B * n2);
  to_double(W, r.W, (size_t)K * n_in * n_out);
  to_double(b, r.b, (size_t)K * n_out);
  to_double(dY, r.G, (size_t)B * K * n_out);

  sac_linear_t L = {.B = B,
                    .n_in = n_in,
                    .n_out = n_out,
                    .K = K,
                    .shared = shared,
                    .n_seg = shared ? 2 : 1,
                    .W = W,
                    .b = b,
                    .act = act};
  L.seg[0] = (sac_seg_t){X1, w1, w1, 0};
  if (shared)
    L.seg[1] = (sac_seg_t){X2, n2, n2, 0};
  else
    L.n_in = n1;
  be->ops->linear_fwd(be, &L, Y, K * n_out);
  /* forward against the reference: J with G = unit vectors is the output itself */
  double Jf = 0, Jr = lin_objective(&r);
  for (int i = 0; i < B * K * n_out; i++)
    Jf += (double)dY[i] * Y[i];
  cr_expect(fabs(Jf - Jr) < 1e-4 * (1 + fabs(Jr)), "forward: %g vs %g", Jf, Jr);

  float *dX[2] = {dX1, shared ? dX2 : NULL};
  int ldx[2] = {w1, n2};
  be->ops->linear_bwd(be, &L, dY, Y, K * n_out, dW, db, dX, ldx);
  const double h = 1e-6;
  double fd;
  for (int i = 0; i < K * n_in * n_out; i++) {
    REF_FD(h, r.W[i], lin_objective(&r), fd);
    CHECK_GRAD(dW[i], fd, "dW", i);
  }
  for (int i = 0; i < K * n_out; i++) {
    REF_FD(h, r.b[i], lin_objective(&r), fd);
    CHECK_GRAD(db[i], fd, "db", i);
  }
  for (int i = 0; i < B * w1; i++) {
    REF_FD(h, r.X1[i], lin_objective(&r), fd);
    CHECK_GRAD(dX1[i], fd, "dX1", i);
  }
  for (int i = 0; i < B * n2; i++) {
    REF_FD(h, r.X2[i], lin_objective(&r), fd);
    CHECK_GRAD(dX2[i], fd, "dX2", i);
  }
  free(r.X1), free(r.X2), free(r.W), free(r.b), free(r.G);
  float *all[] = {X1, X2, W, b, Y, dY, dW, db, dX1, dX2};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    be->ops->free(be, all[i]);
}

Test(backend_cpu, linear_shared_two_segments_relu) { check_linear(1, SAC_ACT_RELU); }
Test(backend_cpu, linear_shared_two_segments_tanh) { check_linear(1, SAC_ACT_TANH); }
Test(backend_cpu, linear_shared_two_segments_identity) { check_linear(1, SAC_ACT_NONE); }
Test(backend_cpu, linear_ensemble_blocks_relu) { check_linear(0, SAC_ACT_RELU); }
Test(backend_cpu, linear_ensemble_blocks_identity) { check_linear(0, SAC_ACT_NONE); }

/* The same finite-difference checks with the op split over a thread pool (issue 17). */
static void use_threads(int threads) {
  sac_backend_destroy(&be);
  cr_assert_eq(sac_backend_new("cpu", threads, &be), 0);
}
Test(backend_cpu, linear_shared_two_segments_relu_2_threads) {
  use_threads(2), check_linear(1, SAC_ACT_RELU);
}
Test(backend_cpu, linear_ensemble_blocks_tanh_3_threads) { use_threads(3), check_linear(0, SAC_ACT_TANH); }

/* The split ops (members on threads, rows or output columns split, Adam and Polyak split
 * by range; layers under 2^16 multiply-adds stay on one thread) against the one-thread
 * composition on shapes that split unevenly: every
 * output within float rounding of the one-thread result, and bit-identical between two
 * runs at the same thread count; the input gradient asked for alone equal to the full
 * backward's. */
typedef struct {
  int B, n1, n2, n_out, K, shared;
  sac_act_t act;
} split_case_t;

static void run_layer(sac_backend_t *b, const split_case_t *c, const float *src, float *out) {
  const int n_in = c->n1 + c->n2, w1 = c->shared ? c->n1 : c->K * c->n1;
  const size_t nX1 = (size_t)c->B * w1, nX2 = (size_t)c->B * (c->n2 ? c->n2 : 1),
               nW = (size_t)c->K * n_in * c->n_out, nb = (size_t)c->K * c->n_out,
               nY = (size_t)c->B * c->K * c->n_out;
  float *X1, *X2, *W, *bb, *Y, *dY, *dW, *db, *dX1, *dX2;
  float **all[] = {&X1, &X2, &W, &bb, &Y, &dY, &dW, &db, &dX1, &dX2};
  size_t sz[] = {nX1, nX2, nW, nb, nY, nY, nW, nb, nX1, nX2};
  for (int i = 0; i < 10; i++)
    cr_assert_eq(b->ops->alloc(b, sz[i], all[i]), 0);
  for (int i = 4; i < 10; i++) /* Y and the gradients: outputs */
    if (i != 5)
      stale(*all[i], sz[i]);
  size_t off = 0;
  memcpy(X1, src + off, nX1 * 4), off += nX1;
  memcpy(X2, src + off, nX2 * 4), off += nX2;
  memcpy(W, src + off, nW * 4), off += nW;
  memcpy(bb, src + off, nb * 4), off += nb;
  memcpy(dY, src + off, nY * 4);
  sac_linear_t L = {.B = c->B,
                    .n_in = c->shared ? n_in : c->n1,
                    .n_out = c->n_out,
                    .K = c->K,
                    .shared = c->shared,
                    .n_seg = c->shared ? 2 : 1,
                    .W = W,
                    .b = bb,
                    .act = c->act};
  L.seg[0] = (sac_seg_t){X1, w1, w1, 0};
  if (c->shared)
    L.seg[1] = (sac_seg_t){X2, c->n2, c->n2, 0};
  b->ops->linear_fwd(b, &L, Y, c->K * c->n_out);
  float *dX[2] = {dX1, c->shared ? dX2 : NULL};
  int ldx[2] = {w1, c->n2};
  /* the input gradient alone (the critics' backward in the actor step: the activation
   * backward made in the rows job, no cols job) first, from a copy of dY: the same dY and
   * dX, bit for bit, as the full backward's */
  float *dY1, *dXa1, *dXa2;
  cr_assert_eq(b->ops->alloc(b, nY, &dY1), 0);
  cr_assert_eq(b->ops->alloc(b, nX1, &dXa1), 0);
  cr_assert_eq(b->ops->alloc(b, nX2, &dXa2), 0);
  memcpy(dY1, dY, nY * 4);
  stale(dXa1, nX1), stale(dXa2, nX2);
  float *dXa[2] = {dXa1, c->shared ? dXa2 : NULL};
  b->ops->linear_bwd(b, &L, dY1, Y, c->K * c->n_out, NULL, NULL, dXa, ldx);
  b->ops->linear_bwd(b, &L, dY, Y, c->K * c->n_out, dW, db, dX, ldx);
  cr_expect_eq(memcmp(dY1, dY, nY * 4), 0, "%d->%d: dY of the input gradient alone differs", c->n1, c->n_out);
  cr_expect_eq(memcmp(dXa1, dX1, nX1 * 4), 0, "%d->%d: the input gradient alone differs", c->n1, c->n_out);
  cr_expect(!c->shared || memcmp(dXa2, dX2, nX2 * 4) == 0, "%d->%d: segment 2's input gradient alone differs",
            c->n1, c->n_out);
  b->ops->free(b, dY1), b->ops->free(b, dXa1), b->ops->free(b, dXa2);
  float *outs[] = {Y, dY, dW, db, dX1, dX2};
  size_t on[] = {nY, nY, nW, nb, nX1, c->shared ? nX2 : 0};
  for (int i = 0; i < 6; i++)
    memcpy(out, outs[i], on[i] * 4), out += on[i];
  for (int i = 0; i < 10; i++)
    b->ops->free(b, *all[i]);
}

Test(backend_cpu, split_ops_match_the_one_thread_composition) {
  const split_case_t cases[] = {
      {256, 17, 6, 256, 2, 1, SAC_ACT_RELU},  /* critics' first layer */
      {256, 256, 0, 256, 2, 0, SAC_ACT_RELU}, /* critics' hidden layer */
      {256, 256, 0, 1, 2, 0, SAC_ACT_NONE},   /* critics' output */
      {512, 17, 0, 256, 1, 0, SAC_ACT_RELU},  /* actor's first layer, 2B rows */
      {256, 256, 0, 12, 1, 0, SAC_ACT_NONE},  /* actor's output */
      {37, 5, 3, 33, 2, 1, SAC_ACT_TANH},     /* odd sizes everywhere */
      {41, 7, 0, 19, 1, 0, SAC_ACT_TANH},
      {3, 4, 0, 2, 1, 0, SAC_ACT_RELU},     /* fewer rows than threads */
      {301, 37, 0, 97, 1, 0, SAC_ACT_TANH}, /* odd sizes above the split threshold */
      {129, 150, 7, 70, 2, 1, SAC_ACT_RELU},
      {20, 64, 0, 64, 1, 0, SAC_ACT_TANH}, /* one member by rows: parts with no rows (a zero share) */
  };
  sac_backend_t *one, *many[3], *control;
  cr_assert_eq(sac_backend_new("cpu", 1, &one), 0);
  cr_assert_eq(sac_backend_new("cpu", 2, &control), 0);
  const int threads[3] = {2, 3, 4};
  for (int t = 0; t < 3; t++)
    cr_assert_eq(sac_backend_new("cpu", threads[t], &many[t]), 0);
  for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
    const split_case_t *c = &cases[ci];
    const int n_in = c->n1 + c->n2, w1 = c->shared ? c->n1 : c->K * c->n1;
    const size_t nY = (size_t)c->B * c->K * c->n_out, nW = (size_t)c->K * n_in * c->n_out;
    const size_t nin =
        (size_t)c->B * w1 + (size_t)c->B * (c->n2 ? c->n2 : 1) + nW + (size_t)c->K * c->n_out + nY;
    const size_t nout =
        2 * nY + nW + (size_t)c->K * c->n_out + (size_t)c->B * w1 + (c->shared ? (size_t)c->B * c->n2 : 0);
    float *src = malloc(nin * 4), *ref = malloc(nout * 4), *got = malloc(nout * 4), *again = malloc(nout * 4);
    fill(src, nin, -1, 1);
    run_layer(one, c, src, ref);
    for (int t = 0; t < 3; t++) {
      run_layer(many[t], c, src, got);
      run_layer(many[t], c, src, again);
      cr_expect_eq(memcmp(got, again, nout * 4), 0, "case %zu, %d threads: not deterministic", ci,
                   threads[t]);
      if (t == 0) { /* negative control: the comparison sees dY moved by an ulp (a backend of
                     * its own, so the split counts below stay this loop's) */
        float *moved = malloc(nin * 4), *out = malloc(nout * 4);
        memcpy(moved, src, nin * 4);
        for (size_t i = nin - nY; i < nin; i++)
          moved[i] = nextafterf(moved[i], INFINITY);
        run_layer(control, c, moved, out);
        cr_expect_neq(memcmp(got, out, nout * 4), 0, "case %zu: dY moved by an ulp, the same bits", ci);
        free(moved), free(out);
      }
      for (size_t i = 0; i < nout; i++)
        if (!(fabsf(got[i] - ref[i]) <= 1e-5f * (1.0f + fabsf(ref[i])))) {
          cr_expect(0, "case %zu, %d threads: output %zu is %.9g, one thread %.9g", ci, threads[t], i, got[i],
                    ref[i]);
          break;
        }
    }
    free(src), free(ref), free(got), free(again);
  }
  /* the one-member layers above the split size (the actor's two, 301 x 37 x 97 and
   * 20 x 64 x 64) ran by rows of the batch, their shares summed (bwd_batch_job): four
   * cases, two runs each at every thread count; one thread never splits */
  double splits = -1;
  cr_assert_eq(one->ops->get_metric(one, "batch_split_bwds", &splits), 0);
  cr_expect_eq(splits, 0.0, "one thread split %.0f backward ops by rows", splits);
  for (int t = 0; t < 3; t++) {
    cr_assert_eq(many[t]->ops->get_metric(many[t], "batch_split_bwds", &splits), 0);
    cr_expect_eq(splits, 8.0, "%d threads: %.0f backward ops by rows of the batch, not 8", threads[t],
                 splits);
  }
  /* the two shared two-member layers above the split size (the critics' first, 129 x 157 x
   * 70) made their input gradient by members at two threads, the shares summed after
   * (member_shares): two backward ops per run; by rows at three and four threads */
  for (int t = 0; t < 3; t++) {
    cr_assert_eq(many[t]->ops->get_metric(many[t], "member_split_bwds", &splits), 0);
    cr_expect_eq(splits, threads[t] == 2 ? 8.0 : 0.0, "%d threads: %.0f input gradients by members",
                 threads[t], splits);
  }
  /* Adam and Polyak over a range long enough to be split (and a tail that is not a
   * multiple of the chunk): elementwise, so bit-identical to one thread */
  const size_t n = 300007;
  float *p[2], *g = malloc(n * 4), *m[2], *v[2], *tg[2], t[2] = {0, 0};
  fill(g, n, -1, 1);
  sac_backend_t *bs[2] = {one, many[0]};
  for (int k = 0; k < 2; k++) {
    p[k] = malloc(n * 4), m[k] = calloc(n, 4), v[k] = calloc(n, 4), tg[k] = malloc(n * 4);
    for (size_t i = 0; i < n; i++)
      p[k][i] = 0.001f * (float)(i % 1000), tg[k][i] = -p[k][i];
    sac_adam_hp_t hp = {1e-3f, 0.9f, 0.999f, 1e-8f};
    for (int s = 0; s < 3; s++)
      bs[k]->ops->adam(bs[k], p[k], g, m[k], v[k], n, &hp, &t[k]);
    bs[k]->ops->polyak(bs[k], tg[k], p[k], n, 0.005f);
  }
  cr_expect_eq(memcmp(p[0], p[1], n * 4), 0, "split Adam differs from one thread");
  cr_expect_eq(memcmp(m[0], m[1], n * 4), 0);
  cr_expect_eq(memcmp(v[0], v[1], n * 4), 0);
  cr_expect_eq(memcmp(tg[0], tg[1], n * 4), 0, "split Polyak differs from one thread");
  for (int k = 0; k < 2; k++)
    free(p[k]), free(m[k]), free(v[k]), free(tg[k]);
  free(g);
  sac_backend_destroy(&one);
  sac_backend_destroy(&control);
  for (int t2 = 0; t2 < 3; t2++)
    sac_backend_destroy(&many[t2]);
}

/* The layers that read the observation at full size, where the backend joins the critics'
 * two input segments and cuts the product into pieces for OpenBLAS's small kernels (issue
 * 17): Y, the weight gradient and the input gradient against double precision, with 1 and
 * 2 threads, each within 1e-5 of the sum of its terms' magnitudes. */
static void layer_ref(const split_case_t *c, const float *src, double *Y, double *dW, double *dX,
                      double *mag_y, double *mag_w, double *mag_x) {
  const int n_in = c->n1 + c->n2, w1 = c->shared ? c->n1 : c->K * c->n1, KO = c->K * c->n_out;
  const float *X1 = src, *X2 = X1 + (size_t)c->B * w1;
  const float *W = X2 + (size_t)c->B * (c->n2 ? c->n2 : 1), *b = W + (size_t)c->K * n_in * c->n_out;
  const float *G = b + (size_t)c->K * c->n_out;
  double *Ga = calloc((size_t)c->B * KO, sizeof(double));
  for (int i = 0; i < c->B; i++)
    for (int k = 0; k < c->K; k++)
      for (int j = 0; j < c->n_out; j++) {
        const float *Wk = W + (size_t)k * n_in * c->n_out;
        double acc = b[k * c->n_out + j], mag = fabs(acc);
        for (int q = 0; q < n_in; q++) {
          double x = c->shared ? (q < c->n1 ? X1[(size_t)i * c->n1 + q] : X2[(size_t)i * c->n2 + q - c->n1])
                               : X1[(size_t)i * w1 + k * c->n1 + q];
          acc += x * Wk[(size_t)q * c->n_out + j], mag += fabs(x * Wk[(size_t)q * c->n_out + j]);
        }
        const size_t o = (size_t)i * KO + (size_t)k * c->n_out + j;
        Y[o] = c->act == SAC_ACT_RELU ? (acc > 0 ? acc : 0) : acc;
        mag_y[o] = mag;
        Ga[o] = c->act == SAC_ACT_RELU && acc <= 0 ? 0 : G[o];
      }
  for (int k = 0; k < c->K; k++)
    for (int q = 0; q < n_in; q++)
      for (int j = 0; j < c->n_out; j++) {
        double acc = 0, mag = 0;
        for (int i = 0; i < c->B; i++) {
          double x = c->shared ? (q < c->n1 ? X1[(size_t)i * c->n1 + q] : X2[(size_t)i * c->n2 + q - c->n1])
                               : X1[(size_t)i * w1 + k * c->n1 + q];
          acc += x * Ga[(size_t)i * KO + (size_t)k * c->n_out + j];
          mag += fabs(x * Ga[(size_t)i * KO + (size_t)k * c->n_out + j]);
        }
        const size_t o = ((size_t)k * n_in + q) * c->n_out + j;
        dW[o] = acc, mag_w[o] = mag;
      }
  /* the input gradient of the first segment (summed over members where shared) */
  for (int i = 0; i < c->B; i++)
    for (int col = 0; col < w1; col++) {
      const int k0 = c->shared ? 0 : col / c->n1, k1 = c->shared ? c->K : k0 + 1,
                q = c->shared ? col : col % c->n1;
      double acc = 0, mag = 0;
      for (int k = k0; k < k1; k++)
        for (int j = 0; j < c->n_out; j++) {
          double t = Ga[(size_t)i * KO + (size_t)k * c->n_out + j] * W[((size_t)k * n_in + q) * c->n_out + j];
          acc += t, mag += fabs(t);
        }
      dX[(size_t)i * w1 + col] = acc, mag_x[(size_t)i * w1 + col] = mag;
    }
  free(Ga);
}

static int near(const float *got, const double *ref, const double *mag, size_t n, size_t *bad) {
  for (size_t i = 0; i < n; i++)
    if (!(fabs(got[i] - ref[i]) <= 1e-5 * mag[i] + 1e-6)) {
      *bad = i;
      return 0;
    }
  return 1;
}

Test(backend_cpu, observation_layers_at_full_size_match_double, .timeout = 60) {
  const split_case_t cases[] = {
      {256, 17, 6, 256, 2, 1, SAC_ACT_RELU}, /* the critics' first layer (joined, cut in pieces) */
      {512, 17, 0, 256, 1, 0, SAC_ACT_RELU}, /* the policy's first layer on 2B rows */
      {256, 17, 0, 256, 1, 0, SAC_ACT_NONE}, /* its weight gradient: 17 x 256 over 256 rows */
      {333, 40, 9, 200, 2, 1, SAC_ACT_RELU}, /* ragged pieces */
      {4096, 32, 0, 32, 1, 0, SAC_ACT_RELU}, /* a long batch: even 16-wide pieces are too big, so whole */
  };
  for (int threads = 1; threads <= 2; threads++) {
    sac_backend_t *b;
    cr_assert_eq(sac_backend_new("cpu", threads, &b), 0);
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
      const split_case_t *c = &cases[ci];
      const int n_in = c->n1 + c->n2, w1 = c->shared ? c->n1 : c->K * c->n1;
      const size_t nY = (size_t)c->B * c->K * c->n_out, nW = (size_t)c->K * n_in * c->n_out,
                   nX = (size_t)c->B * w1;
      const size_t nin = nX + (size_t)c->B * (c->n2 ? c->n2 : 1) + nW + (size_t)c->K * c->n_out + nY;
      const size_t nout = 2 * nY + nW + (size_t)c->K * c->n_out + nX + (c->shared ? (size_t)c->B * c->n2 : 0);
      float *src = malloc(nin * 4), *got = malloc(nout * 4);
      double *Y = malloc(nY * 8), *dW = malloc(nW * 8), *dX = malloc(nX * 8);
      double *my = malloc(nY * 8), *mw = malloc(nW * 8), *mx = malloc(nX * 8);
      fill(src, nin, -1, 1);
      run_layer(b, c, src, got);
      layer_ref(c, src, Y, dW, dX, my, mw, mx);
      size_t bad = 0;
      cr_expect(near(got, Y, my, nY, &bad), "case %zu, %d threads: Y[%zu] %.9g, double %.9g", ci, threads,
                bad, got[bad], Y[bad]);
      const float *gW = got + 2 * nY, *gX = gW + nW + (size_t)c->K * c->n_out;
      cr_expect(near(gW, dW, mw, nW, &bad), "case %zu, %d threads: dW[%zu] %.9g, double %.9g", ci, threads,
                bad, gW[bad], dW[bad]);
      cr_expect(near(gX, dX, mx, nX, &bad), "case %zu, %d threads: dX[%zu] %.9g, double %.9g", ci, threads,
                bad, gX[bad], dX[bad]);
      free(src), free(got), free(Y), free(dW), free(dX), free(my), free(mw), free(mx);
    }
    sac_backend_destroy(&b);
  }
}

/* Every other thread of this process to nice 19: on a shared CPU the kernel then runs
 * them only in the gaps the caller leaves (a weight of 15 against its 1024). Returns how
 * many it lowered. */
static int lower_other_threads(void) {
  const long self = syscall(SYS_gettid);
  DIR *d = opendir("/proc/self/task");
  int n = 0;
  if (!d)
    return 0;
  for (struct dirent *e; (e = readdir(d));) {
    const long tid = strtol(e->d_name, NULL, 10);
    if (tid > 0 && tid != self && setpriority(PRIO_PROCESS, (id_t)tid, 19) == 0)
      n++;
  }
  closedir(d);
  return n;
}

/* The pool with fewer cores than threads (issue 17): the test pins itself, and so the pool
 * it then creates, to one CPU, as on a machine where other processes hold the other cores,
 * and lowers the worker's priority so that the caller, not the worker, holds that CPU
 * while it has work (sharing it equally, a job longer than the kernel's time slice, as
 * under the sanitizers, lets the worker start its part in time, and then nothing is
 * starved). The caller must not wait for a worker the kernel is not running: it runs the
 * worker's parts itself (missed parts counted), and when that keeps happening it runs jobs
 * alone for a while (serial jobs counted), longer each time it keeps happening. Results
 * stay bit-identical to the same pool's on free cores, and the 400 layer ops finish well
 * inside the test's timeout. */
Test(backend_cpu, pool_without_a_free_core_runs_the_parts_itself, .timeout = 120) {
  const split_case_t c = {256, 256, 0, 256, 2, 0, SAC_ACT_RELU}; /* the critics' hidden layer */
  const size_t nY = (size_t)c.B * c.K * c.n_out, nW = (size_t)c.K * c.n1 * c.n_out,
               nX = (size_t)c.B * c.K * c.n1;
  const size_t nin = nX + c.B + nW + (size_t)c.K * c.n_out + nY;
  const size_t nout = 2 * nY + nW + (size_t)c.K * c.n_out + nX;
  float *src = malloc(nin * 4), *free_cores = malloc(nout * 4), *pinned = malloc(nout * 4);
  fill(src, nin, -1, 1);
  sac_backend_t *b;
  cr_assert_eq(sac_backend_new("cpu", 2, &b), 0);
  run_layer(b, &c, src, free_cores);
  sac_backend_destroy(&b);

  cpu_set_t all, one;
  cr_assert_eq(sched_getaffinity(0, sizeof all, &all), 0);
  int cpu = 0;
  while (cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &all))
    cpu++;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  cr_assert_eq(sched_setaffinity(0, sizeof one, &one), 0);
  cr_assert_eq(sac_backend_new("cpu", 2, &b), 0); /* its worker inherits the one CPU */
  cr_assert_geq(lower_other_threads(), 1, "no worker thread to lower");
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  /* the serial count after each op pair, where it stays put (the parallel jobs between
   * two serial stretches: 64, about 21 pairs), in the order it rests */
  double rests[8] = {0}, last = 0;
  int n_rests = 0;
  for (int i = 0; i < 200; i++) { /* a forward and a backward each: 400 layer ops, 600 jobs */
    run_layer(b, &c, src, pinned);
    cr_assert_eq(memcmp(pinned, free_cores, nout * 4), 0, "op %d on one core differs from free cores", i);
    double now = 0;
    cr_assert_eq(b->ops->get_metric(b, "pool_serial_jobs", &now), 0);
    if (now > 0 && now == last && (n_rests == 0 || rests[n_rests - 1] != now) && n_rests < 8)
      rests[n_rests++] = now;
    last = now;
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double jobs = 0, serial = 0, missed = 0, sleeps = 0;
  cr_assert_eq(b->ops->get_metric(b, "pool_jobs", &jobs), 0);
  cr_assert_eq(b->ops->get_metric(b, "pool_serial_jobs", &serial), 0);
  cr_assert_eq(b->ops->get_metric(b, "pool_missed_parts", &missed), 0);
  cr_assert_eq(b->ops->get_metric(b, "pool_sleeps", &sleeps), 0);
  cr_log_info("one core: %.0f jobs, %.0f serial, %.0f parts missed, %.0f worker sleeps, %.2f s", jobs, serial,
              missed, sleeps, (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
  cr_expect_gt(missed, 0, "the caller never ran a part of a worker that had no core");
  cr_expect_gt(serial, 0, "the pool never went serial with its worker starved of a core");
  cr_expect_gt(sleeps, 0, "the starved worker never stopped spinning to sleep");
  /* the first serial stretch is short (64 jobs: a worker that missed once costs little),
   * and a worker still starved after it makes the next one twice as long (128), so that
   * a machine whose cores stay taken runs most jobs serially */
  cr_log_info("the serial count rested at %.0f, then %.0f", rests[0], rests[1]);
  cr_expect(n_rests >= 2 && rests[0] == 64 && rests[1] == 64 + 128,
            "serial stretches: the count rested at %.0f, then %.0f (%d rests): not 64, then 192", rests[0],
            rests[1], n_rests);
  cr_expect_gt(serial, jobs / 2, "%.0f of %.0f jobs serial: the serial stretches did not grow", serial, jobs);
  sac_backend_destroy(&b);
  cr_assert_eq(sched_setaffinity(0, sizeof all, &all), 0);
  free(src), free(free_cores), free(pinned);
}

/* The noise and the policy head split by rows (issue 17): element by element, so every
 * thread count gives the one-thread bits, on a batch above the split threshold with a
 * ragged tail, and on one below it. */
Test(backend_cpu, split_noise_and_head_match_one_thread) {
  const int shapes[][2] = {{301, 5}, {256, 6}, {100, 1}};
  sac_backend_t *bs[3];
  const int threads[3] = {1, 2, 3};
  for (int t = 0; t < 3; t++)
    cr_assert_eq(sac_backend_new("cpu", threads[t], &bs[t]), 0);
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
    const int B = shapes[si][0], A = shapes[si][1];
    const size_t n = (size_t)B * A;
    float *P = malloc(2 * n * 4), *da = malloc(n * 4), *dl = malloc((size_t)B * 4);
    fill(P, 2 * n, -3, 3), fill(da, n, -1, 1), fill(dl, (size_t)B, -1, 1);
    float *eps[3], *a[3], *lp[3], *dP[3];
    const uint32_t key[2] = {7, 11};
    sac_head_hp_t h = {.B = B, .A = A, .log_std_min = -5, .log_std_max = 2};
    for (int t = 0; t < 3; t++) {
      eps[t] = malloc((n + 1) * 4), a[t] = malloc(n * 4), lp[t] = malloc((size_t)B * 4);
      dP[t] = malloc(2 * n * 4);
      stale(a[t], n), stale(lp[t], (size_t)B), stale(dP[t], 2 * n);
      eps[t][n] = 12345.0f; /* n odd: the last pair's second number must not be written */
      bs[t]->ops->normal(bs[t], eps[t], n, key, 5, 1);
      bs[t]->ops->head_fwd(bs[t], &h, P, eps[t], a[t], A, lp[t]);
      bs[t]->ops->head_bwd(bs[t], &h, P, eps[t], a[t], A, da, A, dl, dP[t]);
      cr_expect_eq(eps[t][n], 12345.0f, "B %d A %d, %d threads: noise written past its end", B, A,
                   threads[t]);
    }
    for (int t = 1; t < 3; t++) {
      cr_expect_eq(memcmp(eps[t], eps[0], n * 4), 0, "B %d A %d, %d threads: noise differs", B, A,
                   threads[t]);
      cr_expect_eq(memcmp(a[t], a[0], n * 4), 0, "B %d A %d, %d threads: actions differ", B, A, threads[t]);
      cr_expect_eq(memcmp(lp[t], lp[0], (size_t)B * 4), 0, "B %d A %d, %d threads: log-probs differ", B, A,
                   threads[t]);
      cr_expect_eq(memcmp(dP[t], dP[0], 2 * n * 4), 0, "B %d A %d, %d threads: head gradient differs", B, A,
                   threads[t]);
    }
    for (int t = 0; t < 3; t++)
      free(eps[t]), free(a[t]), free(lp[t]), free(dP[t]);
    free(P), free(da), free(dl);
  }
  for (int t = 0; t < 3; t++)
    sac_backend_destroy(&bs[t]);
}

/* J = sum Ga . a + sum Gl . logp over the head, as a function of P. */
typedef struct {
  int B, A;
  double lsmin, lsmax;
  double *P, *eps, *Ga, *Gl;
} head_ref_t;

static double head_objective(const head_ref_t *r) {
  double *a = malloc(sizeof(double) * r->B * r->A), *lp = malloc(sizeof(double) * r->B);
  ref_head(r->P, r->eps, r->B, r->A, r->lsmin, r->lsmax, a, lp);
  double J = 0;
  for (int i = 0; i < r->B * r->A; i++)
    J += r->Ga[i] * a[i];
  for (int i = 0; i < r->B; i++)
    J += r->Gl[i] * lp[i];
  free(a), free(lp);
  return J;
}

Test(backend_cpu, policy_head_forward_and_backward) {
  const int B = 6, A = 3;
  float *P = dev((size_t)B * 2 * A), *eps = dev((size_t)B * A), *a = dev((size_t)B * A), *lp = dev(B);
  float *da = dev((size_t)B * A), *dl = dev(B), *dP = dev((size_t)B * 2 * A);
  fill(P, (size_t)B * 2 * A, -1.5, 1.5);
  P[A] = -7.0f;            /* below log_std_min: clamped, no gradient */
  P[2 * A + A + 1] = 3.0f; /* above log_std_max */
  P[4 * 2 * A] = 4.0f;     /* large u: the stable tanh correction must stay finite */
  fill(eps, (size_t)B * A, -2, 2);
  fill(da, (size_t)B * A, -1, 1);
  fill(dl, B, -1, 1);
  stale(a, (size_t)B * A), stale(lp, B), stale(dP, (size_t)B * 2 * A);
  sac_head_hp_t h = {.B = B, .A = A, .log_std_min = -5, .log_std_max = 2};
  be->ops->head_fwd(be, &h, P, eps, a, A, lp);
  head_ref_t r = {B, A, -5, 2, NULL, NULL, NULL, NULL};
  r.P = calloc((size_t)B * 2 * A, sizeof(double));
  r.eps = calloc((size_t)B * A, sizeof(double));
  r.Ga = calloc((size_t)B * A, sizeof(double));
  r.Gl = calloc(B, sizeof(double));
  to_double(P, r.P, (size_t)B * 2 * A);
  to_double(eps, r.eps, (size_t)B * A);
  double *ra = malloc(sizeof(double) * B * A), *rl = malloc(sizeof(double) * B);
  ref_head(r.P, r.eps, B, A, -5, 2, ra, rl);
  for (int i = 0; i < B * A; i++)
    cr_expect(fabs(a[i] - ra[i]) < 1e-6, "a[%d] %g vs %g", i, a[i], ra[i]);
  for (int i = 0; i < B; i++)
    cr_expect(fabs(lp[i] - rl[i]) < 1e-4 * (1 + fabs(rl[i])), "logp[%d] %g vs %g", i, lp[i], rl[i]);
  to_double(da, r.Ga, (size_t)B * A);
  to_double(dl, r.Gl, B);
  be->ops->head_bwd(be, &h, P, eps, a, A, da, A, dl, dP);
  double fd;
  for (int i = 0; i < B * 2 * A; i++) {
    REF_FD(1e-6, r.P[i], head_objective(&r), fd);
    CHECK_GRAD(dP[i], fd, "dP", i);
  }
  cr_expect_eq(dP[A], 0.0f, "clamped log std passes no gradient");
  free(r.P), free(r.eps), free(r.Ga), free(r.Gl), free(ra), free(rl);
  float *all[] = {P, eps, a, lp, da, dl, dP};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    be->ops->free(be, all[i]);
}

Test(backend_cpu, critic_target_bootstraps_unless_terminated) {
  const int B = 4;
  float *r = dev(B), *term = dev(B), *qt = dev(2 * B), *lp = dev(B), *y = dev(B), *la = dev(1);
  float rv[] = {1, -2, 0.5f, 3}, tv[] = {0, 1, 0, 1}, qv[] = {5, 4, -1, 2, 7, 9, 0, 0},
        lv[] = {-1, 2, 0.5f, 1};
  memcpy(r, rv, sizeof rv), memcpy(term, tv, sizeof tv), memcpy(qt, qv, sizeof qv), memcpy(lp, lv, sizeof lv);
  la[0] = logf(0.2f);
  stale(y, B);
  sac_head_hp_t h = {.B = B, .A = 1, .gamma = 0.9f, .log_alpha = la};
  be->ops->critic_target(be, &h, r, term, qt, lp, y);
  /* y0 = 1 + 0.9 (min(5,4) - 0.2 * -1) = 1 + 0.9 * 4.2; y1 terminated = -2;
   * y2 = 0.5 + 0.9 (7 - 0.2 * 0.5) (a truncation is not terminal); y3 = 3 */
  cr_expect_float_eq(y[0], 1 + 0.9f * 4.2f, 1e-5);
  cr_expect_float_eq(y[1], -2.0f, 1e-6);
  cr_expect_float_eq(y[2], 0.5f + 0.9f * 6.9f, 1e-5);
  cr_expect_float_eq(y[3], 3.0f, 1e-6);
  float *all[] = {r, term, qt, lp, y, la};
  for (size_t i = 0; i < 6; i++)
    be->ops->free(be, all[i]);
}

Test(backend_cpu, critic_loss_gradient_and_weights) {
  const int B = 5;
  float *q = dev(2 * B), *y = dev(B), *w = dev(B), *dq = dev(2 * B), *td = dev(B), *st = dev(2);
  fill(q, 2 * B, -2, 2), fill(y, B, -2, 2), fill(w, B, 0.1, 2);
  stale(dq, 2 * B), stale(td, B), stale(st, 2);
  sac_head_hp_t h = {.B = B};
  be->ops->critic_loss(be, &h, q, y, w, dq, td, st);
  double dq_d[10], y_d[5], w_d[5];
  to_double(q, dq_d, 2 * B), to_double(y, y_d, B), to_double(w, w_d, B);
#define LQ()                                                                                                 \
  ({                                                                                                         \
    double _L = 0;                                                                                           \
    for (int _i = 0; _i < B; _i++)                                                                           \
      _L += 0.5 * w_d[_i] *                                                                                  \
            ((dq_d[2 * _i] - y_d[_i]) * (dq_d[2 * _i] - y_d[_i]) +                                           \
             (dq_d[2 * _i + 1] - y_d[_i]) * (dq_d[2 * _i + 1] - y_d[_i]));                                   \
    _L / B;                                                                                                  \
  })
  cr_expect(fabs(st[0] - LQ()) < 1e-5 * (1 + fabs(LQ())));
  double fd;
  for (int i = 0; i < 2 * B; i++) {
    REF_FD(1e-6, dq_d[i], LQ(), fd);
    CHECK_GRAD(dq[i], fd, "dq", i);
  }
  for (int i = 0; i < B; i++)
    cr_expect_float_eq(td[i], fabsf(fminf(q[2 * i], q[2 * i + 1]) - y[i]), 1e-6);
#undef LQ
  float *all[] = {q, y, w, dq, td, st};
  for (size_t i = 0; i < 6; i++)
    be->ops->free(be, all[i]);
}

Test(backend_cpu, actor_and_alpha_loss_gradients) {
  const int B = 5;
  float *q = dev(2 * B), *lp = dev(B), *dq = dev(2 * B), *dl = dev(B), *st = dev(2), *la = dev(1),
        *g = dev(1);
  fill(q, 2 * B, -2, 2), fill(lp, B, -3, 1);
  stale(dq, 2 * B), stale(dl, B), stale(st, 2), stale(g, 1);
  la[0] = -0.7f;
  sac_head_hp_t h = {.B = B, .A = 2, .target_entropy = -2, .log_alpha = la};
  be->ops->actor_loss(be, &h, q, lp, dq, dl, st);
  double qd[10], ld[5], lad = la[0];
  to_double(q, qd, 2 * B), to_double(lp, ld, B);
#define LPI()                                                                                                \
  ({                                                                                                         \
    double _L = 0;                                                                                           \
    for (int _i = 0; _i < B; _i++)                                                                           \
      _L += exp(lad) * ld[_i] - fmin(qd[2 * _i], qd[2 * _i + 1]);                                            \
    _L / B;                                                                                                  \
  })
  cr_expect(fabs(st[0] - LPI()) < 1e-5 * (1 + fabs(LPI())));
  double fd;
  for (int i = 0; i < 2 * B; i++) {
    REF_FD(1e-6, qd[i], LPI(), fd);
    CHECK_GRAD(dq[i], fd, "dq", i);
  }
  for (int i = 0; i < B; i++) {
    REF_FD(1e-6, ld[i], LPI(), fd);
    CHECK_GRAD(dl[i], fd, "dlogp", i);
  }
#undef LPI
  be->ops->alpha_loss(be, &h, lp, g, st);
#define LA()                                                                                                 \
  ({                                                                                                         \
    double _L = 0;                                                                                           \
    for (int _i = 0; _i < B; _i++)                                                                           \
      _L += -lad * (ld[_i] + h.target_entropy);                                                              \
    _L / B;                                                                                                  \
  })
  REF_FD(1e-6, lad, LA(), fd);
  CHECK_GRAD(g[0], fd, "dlog_alpha", 0);
  cr_expect(fabs(st[0] - LA()) < 1e-5 * (1 + fabs(LA())));
#undef LA
  float *all[] = {q, lp, dq, dl, st, la, g};
  for (size_t i = 0; i < 7; i++)
    be->ops->free(be, all[i]);
}

/* A first moment decaying into float's subnormal range is flushed to 0 (backend_cpu.c's
 * adam_job: the subnormal steps each took a microcode assist), on the caller's part and
 * on a worker's, and the caller's floating-point mode is as it was. */
Test(backend_cpu, adam_flushes_subnormal_moments_to_zero) {
  sac_backend_t *b2;
  cr_assert_eq(sac_backend_new("cpu", 2, &b2), 0);
  const size_t n = 1u << 14; /* split over both threads */
  float *p = NULL, *g = NULL, *m = NULL, *v = NULL, *t = NULL;
  cr_assert_eq(b2->ops->alloc(b2, n, &p), 0);
  cr_assert_eq(b2->ops->alloc(b2, n, &g), 0);
  cr_assert_eq(b2->ops->alloc(b2, n, &m), 0);
  cr_assert_eq(b2->ops->alloc(b2, n, &v), 0);
  cr_assert_eq(b2->ops->alloc(b2, 1, &t), 0);
  for (size_t i = 0; i < n; i++)
    p[i] = 1.0f, g[i] = 0.0f, m[i] = 1.2e-38f, v[i] = 1e-6f; /* 0.9 m is under FLT_MIN */
  t[0] = 1000.0f;
  sac_adam_hp_t hp = {1e-3f, 0.9f, 0.999f, 1e-8f};
#if defined(__x86_64__) || defined(__i386__)
  const unsigned mode = _mm_getcsr();
#endif
  b2->ops->adam(b2, p, g, m, v, n, &hp, t);
#if defined(__x86_64__) || defined(__i386__)
  /* the control bits (the low six are sticky exception flags: powf(beta, t) underflows) */
  cr_expect_eq(_mm_getcsr() & ~0x3fu, mode & ~0x3fu, "the caller's MXCSR mode changed: %#x -> %#x", mode,
               _mm_getcsr());
#endif
  size_t kept = 0;
  for (size_t i = 0; i < n; i++)
    kept += m[i] != 0.0f || p[i] != 1.0f;
  cr_expect_eq(kept, 0, "%zu of %zu moments kept a subnormal value (m[0] %g, m[n-1] %g)", kept, n, m[0],
               m[n - 1]);
  float *all[] = {p, g, m, v, t};
  for (size_t i = 0; i < 5; i++)
    b2->ops->free(b2, all[i]);
  sac_backend_destroy(&b2);
}

Test(backend_cpu, adam_matches_hand_computed_steps) {
  /* Two steps by hand (PyTorch's Adam): p=1.0, g=0.5 then g=-0.25, lr 0.1.
   * t=1: m=0.05, v=0.00025, mhat=0.5, vhat=0.25, p = 1 - 0.1*0.5/(0.5+1e-8) = 0.9 (to 1e-8)
   * t=2: m=0.9*0.05+0.1*-0.25=0.02, v=0.999*0.00025+0.001*0.0625=0.00031225,
   *      mhat=0.02/0.19=0.105263158, vhat=0.00031225/0.001999=0.156203102,
   *      p = 0.9 - 0.1*0.105263158/(0.395225381+1e-8) = 0.873366 */
  float *p = dev(1), *g = dev(1), *m = dev(1), *v = dev(1), *t = dev(1);
  p[0] = 1.0f;
  sac_adam_hp_t hp = {0.1f, 0.9f, 0.999f, 1e-8f};
  g[0] = 0.5f;
  be->ops->adam(be, p, g, m, v, 1, &hp, t);
  cr_expect_float_eq(p[0], 0.9f, 1e-6);
  cr_expect_float_eq(t[0], 1.0f, 0);
  g[0] = -0.25f;
  be->ops->adam(be, p, g, m, v, 1, &hp, t);
  cr_expect_float_eq(m[0], 0.02f, 1e-7);
  /* 1 - 0.999f is 0.00099998713 in float: the hand value is good to ~2e-5 relative */
  cr_expect_float_eq(v[0], 0.00031225f, 1e-8);
  cr_expect_float_eq(p[0], 0.9f - 0.1f * 0.105263158f / 0.395225381f, 2e-6, "p %.8f", p[0]);
  float *all[] = {p, g, m, v, t};
  for (size_t i = 0; i < 5; i++)
    be->ops->free(be, all[i]);
}

Test(backend_cpu, polyak_moves_target_by_tau) {
  float *tg = dev(3), *src = dev(3);
  tg[0] = 1, tg[1] = -2, tg[2] = 0;
  src[0] = 3, src[1] = 2, src[2] = 10;
  be->ops->polyak(be, tg, src, 3, 0.005f);
  cr_expect_float_eq(tg[0], 0.995f * 1 + 0.005f * 3, 1e-7);
  cr_expect_float_eq(tg[1], 0.995f * -2 + 0.005f * 2, 1e-7);
  cr_expect_float_eq(tg[2], 0.05f, 1e-7);
  be->ops->free(be, tg), be->ops->free(be, src);
}

Test(backend_cpu, normal_is_deterministic_and_standard) {
  const size_t n = 200001; /* odd: the last element uses half a block */
  float *a = dev(n), *b = dev(n);
  uint32_t key[2];
  sac_rng_key(7, 3, key);
  be->ops->normal(be, a, n, key, 42, 1);
  be->ops->normal(be, b, n, key, 42, 1);
  cr_expect_eq(memcmp(a, b, n * sizeof(float)), 0);
  be->ops->normal(be, b, n, key, 43, 1);
  cr_expect_neq(memcmp(a, b, 64), 0, "another stream gives other numbers");
  double s = 0, s2 = 0;
  for (size_t i = 0; i < n; i++)
    s += a[i], s2 += (double)a[i] * a[i];
  double mean = s / n, var = s2 / n - mean * mean;
  /* standard error of the mean is 1/sqrt(n) = 0.0022; of the variance sqrt(2/n) = 0.0032 */
  cr_expect(fabs(mean) < 0.01, "mean %g", mean);
  cr_expect(fabs(var - 1) < 0.015, "var %g", var);
  be->ops->free(be, a), be->ops->free(be, b);
}

/* The learner's --precision: the cpu backend takes fp32 only, anything else is a
 * configuration error (not silently fp32); graphs are ignored there. */
Test(backend_cpu, precision_other_than_fp32_is_refused) {
  cr_assert_eq(sac_backend_configure(be, "fp32", 1), 0);
  cr_assert_eq(sac_backend_configure(be, "", 0), 0, "empty means fp32");
  cr_assert_eq(sac_backend_configure(be, "bf16", 1), SAC_ECONFIG);
  cr_assert_eq(sac_backend_configure(be, "fp16", 0), SAC_ECONFIG);
  cr_assert_eq(sac_backend_configure(be, "fp8", 1), SAC_ECONFIG);
}

/* --device (issue 16, point 5b): parsing, and the rank -> GPU mapping that keeps two
 * data-parallel learners on one host off the same GPU. */
Test(device, parse) {
  int d = 42;
  cr_assert_eq(sac_device_parse("auto", &d), 0);
  cr_assert_eq(d, SAC_DEVICE_AUTO);
  cr_assert_eq(sac_device_parse("", &d), 0);
  cr_assert_eq(d, SAC_DEVICE_AUTO);
  cr_assert_eq(sac_device_parse("0", &d), 0);
  cr_assert_eq(d, 0);
  cr_assert_eq(sac_device_parse("7", &d), 0);
  cr_assert_eq(d, 7);
  const char *bad[] = {"-1", "x", "1x", "+1", " 1", "1024", "99999999999999999999", "auto1"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    d = 42;
    cr_assert_eq(sac_device_parse(bad[i], &d), SAC_ECONFIG, "\"%s\" accepted", bad[i]);
    cr_assert_eq(d, 42, "\"%s\" changed the output", bad[i]);
  }
}

Test(device, rank_mapping) {
  /* an explicit device wins over the rank */
  cr_assert_eq(sac_device_for_rank(3, 5, 8), 3);
  cr_assert_eq(sac_device_for_rank(0, 1, 2), 0);
  /* auto: ranks spread over the host's GPUs, and two ranks on a host with as many GPUs
   * never share one */
  for (int n = 1; n <= 8; n++) {
    int used[8] = {0};
    for (int r = 0; r < n; r++) {
      int d = sac_device_for_rank(SAC_DEVICE_AUTO, r, n);
      cr_assert(d >= 0 && d < n);
      cr_assert_eq(used[d]++, 0, "ranks share GPU %d of %d", d, n);
    }
  }
  cr_assert_eq(sac_device_for_rank(SAC_DEVICE_AUTO, 5, 4), 1);
  /* no GPU count known (or no GPU): GPU 0, and sac_backend_cuda_new says why */
  cr_assert_eq(sac_device_for_rank(SAC_DEVICE_AUTO, 3, 0), 0);
  cr_assert_eq(sac_device_for_rank(SAC_DEVICE_AUTO, 3, -1), 0);
  /* the cpu backend takes any device */
  sac_backend_t *b = NULL;
  cr_assert_eq(sac_backend_new_on("cpu", 1, 5, 2, &b), 0);
  sac_backend_destroy(&b);
}

/* Issue 16, point 6: the fused Adam + Polyak tail equals the unfused ops in their order,
 * bit for bit: with Polyak reading a stepped group (critic-only updates) and with Polyak
 * on a separate buffer after two groups (actor + log alpha). Negative control: a
 * Polyak that read the parameters before the step would differ. */
static void fused_tail_case(int polyak_of_group) {
  const size_t n0 = 1000, n1 = 1;
  float t0 = 3.0f;
  float *h[4];
  for (int i = 0; i < 4; i++) {
    h[i] = malloc(sizeof(float) * n0);
    fill(h[i], n0, -1, 1);
  }
  for (size_t i = 0; i < n0; i++)
    h[3][i] = fabsf(h[3][i]) * 1e-3f; /* v >= 0 */
  /* two copies of everything: [0] unfused, [1] fused */
  float *p[2][2], *g[2][2], *m[2][2], *v[2][2], *t[2][2], *tgt[2], *src[2];
  for (int c = 0; c < 2; c++) {
    for (int k = 0; k < 2; k++) {
      size_t n = k ? n1 : n0;
      p[c][k] = dev(n), g[c][k] = dev(n), m[c][k] = dev(n), v[c][k] = dev(n), t[c][k] = dev(1);
      memcpy(p[c][k], h[0], n * sizeof(float)), memcpy(g[c][k], h[1], n * sizeof(float));
      memcpy(m[c][k], h[2], n * sizeof(float)), memcpy(v[c][k], h[3], n * sizeof(float));
      *t[c][k] = t0;
    }
    tgt[c] = dev(n0), src[c] = dev(n0);
    memcpy(tgt[c], h[2], n0 * sizeof(float)), memcpy(src[c], h[1], n0 * sizeof(float));
  }
  sac_adam_hp_t hp0 = {1e-3f, 0.9f, 0.999f, 1e-8f}, hp1 = {3e-4f, 0.8f, 0.99f, 1e-7f};
  int ng = polyak_of_group ? 1 : 2;
  /* unfused */
  be->ops->adam(be, p[0][0], g[0][0], m[0][0], v[0][0], n0, &hp0, t[0][0]);
  if (ng == 2)
    be->ops->adam(be, p[0][1], g[0][1], m[0][1], v[0][1], n1, &hp1, t[0][1]);
  be->ops->polyak(be, tgt[0], polyak_of_group ? p[0][0] : src[0], n0, 0.01f);
  /* fused */
  sac_adam_group_t grp[2] = {{p[1][0], g[1][0], m[1][0], v[1][0], n0, hp0, t[1][0]},
                             {p[1][1], g[1][1], m[1][1], v[1][1], n1, hp1, t[1][1]}};
  cr_assert_not_null(be->ops->adam_polyak);
  be->ops->adam_polyak(be, grp, ng, tgt[1], polyak_of_group ? p[1][0] : src[1], n0, 0.01f, NULL, 0u);
  for (int k = 0; k < ng; k++) {
    size_t n = k ? n1 : n0;
    cr_assert_eq(memcmp(p[0][k], p[1][k], n * sizeof(float)), 0, "group %d params", k);
    cr_assert_eq(memcmp(m[0][k], m[1][k], n * sizeof(float)), 0, "group %d m", k);
    cr_assert_eq(memcmp(v[0][k], v[1][k], n * sizeof(float)), 0, "group %d v", k);
    cr_assert_eq(*t[1][k], t0 + 1.0f, "group %d step counter", k);
  }
  cr_assert_eq(memcmp(tgt[0], tgt[1], n0 * sizeof(float)), 0, "Polyak target");
  if (polyak_of_group) { /* negative control: Polyak on the pre-step parameters differs */
    float *pre = dev(n0), *tg = dev(n0);
    memcpy(pre, h[0], n0 * sizeof(float)), memcpy(tg, h[2], n0 * sizeof(float));
    be->ops->polyak(be, tg, pre, n0, 0.01f);
    cr_assert_neq(memcmp(tg, tgt[1], n0 * sizeof(float)), 0);
    be->ops->free(be, pre), be->ops->free(be, tg);
  }
  for (int c = 0; c < 2; c++) {
    for (int k = 0; k < 2; k++) {
      be->ops->free(be, p[c][k]), be->ops->free(be, g[c][k]), be->ops->free(be, m[c][k]);
      be->ops->free(be, v[c][k]), be->ops->free(be, t[c][k]);
    }
    be->ops->free(be, tgt[c]), be->ops->free(be, src[c]);
  }
  for (int i = 0; i < 4; i++)
    free(h[i]);
}

Test(backend_cpu, fused_adam_polyak_equals_unfused_polyak_of_stepped_group) { fused_tail_case(1); }
Test(backend_cpu, fused_adam_polyak_equals_unfused_two_groups_then_polyak) { fused_tail_case(0); }

/* The loss guard of the fused tail: a NaN or Inf statistic under the mask skips every
 * group's step (parameters, moments, step counter) and the Polyak; one outside the mask
 * (the control) does not, and the op then equals the unguarded one bit for bit. */
static void guarded_tail(const float *stats, unsigned mask, int expect_skip) {
  const size_t n = 300;
  float *h[4];
  for (int i = 0; i < 4; i++) {
    h[i] = malloc(sizeof(float) * n);
    fill(h[i], n, 0.1, 1);
  }
  float *p[2], *g[2], *m[2], *v[2], *t[2], *tgt[2], *guard = dev(8);
  memcpy(guard, stats, 8 * sizeof(float));
  for (int c = 0; c < 2; c++) { /* [0] unguarded, [1] guarded */
    p[c] = dev(n), g[c] = dev(n), m[c] = dev(n), v[c] = dev(n), t[c] = dev(1), tgt[c] = dev(n);
    memcpy(p[c], h[0], n * sizeof(float)), memcpy(g[c], h[1], n * sizeof(float));
    memcpy(m[c], h[2], n * sizeof(float)), memcpy(v[c], h[3], n * sizeof(float));
    memcpy(tgt[c], h[2], n * sizeof(float));
    *t[c] = 2.0f;
  }
  sac_adam_hp_t hp = {1e-3f, 0.9f, 0.999f, 1e-8f};
  for (int c = 0; c < 2; c++) {
    sac_adam_group_t grp = {p[c], g[c], m[c], v[c], n, hp, t[c]};
    be->ops->adam_polyak(be, &grp, 1, tgt[c], p[c], n, 0.01f, c ? guard : NULL, mask);
  }
  if (expect_skip) {
    cr_assert_eq(memcmp(p[1], h[0], n * sizeof(float)), 0, "a guarded step moved the parameters");
    cr_assert_eq(memcmp(m[1], h[2], n * sizeof(float)), 0, "a guarded step moved m");
    cr_assert_eq(memcmp(v[1], h[3], n * sizeof(float)), 0, "a guarded step moved v");
    cr_assert_eq(memcmp(tgt[1], h[2], n * sizeof(float)), 0, "a guarded step moved the target");
    cr_assert_eq(*t[1], 2.0f, "a guarded step advanced the step counter");
  } else {
    cr_assert_neq(memcmp(p[1], h[0], n * sizeof(float)), 0, "control: the step should apply");
    cr_assert_eq(memcmp(p[0], p[1], n * sizeof(float)), 0);
    cr_assert_eq(memcmp(m[0], m[1], n * sizeof(float)), 0);
    cr_assert_eq(memcmp(v[0], v[1], n * sizeof(float)), 0);
    cr_assert_eq(memcmp(tgt[0], tgt[1], n * sizeof(float)), 0);
    cr_assert_eq(*t[1], 3.0f);
  }
  for (int c = 0; c < 2; c++) {
    be->ops->free(be, p[c]), be->ops->free(be, g[c]), be->ops->free(be, m[c]);
    be->ops->free(be, v[c]), be->ops->free(be, t[c]), be->ops->free(be, tgt[c]);
  }
  be->ops->free(be, guard);
  for (int i = 0; i < 4; i++)
    free(h[i]);
}

Test(backend_cpu, fused_adam_polyak_guard_skips_on_a_nonfinite_masked_statistic) {
  float st[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  guarded_tail(st, 0x17u, 0); /* all finite */
  st[3] = NAN;                /* entropy: outside the actor's mask */
  guarded_tail(st, 0x17u, 0);
  guarded_tail(st, 0x08u, 1);
  st[3] = 4.0f, st[0] = INFINITY; /* the critic loss */
  guarded_tail(st, 0x03u, 1);
  guarded_tail(st, 0x17u, 1);
  st[0] = 1.0f, st[4] = NAN; /* the alpha loss: the critic's mask passes it */
  guarded_tail(st, 0x03u, 0);
  guarded_tail(st, 0x17u, 1);
}

/* The fused actor + alpha loss equals actor_loss then alpha_loss, bit for bit. */
Test(backend_cpu, fused_actor_alpha_loss_equals_the_two_ops) {
  const int B = 37;
  float *q = dev(2 * B), *logp = dev(B), *la = dev(1), *out[2][5];
  fill(q, 2 * B, -3, 3), fill(logp, B, -4, 1);
  la[0] = -0.7f;
  sac_head_hp_t h = {.B = B, .A = 3, .gamma = 0.99f, .target_entropy = -3.0f, .log_alpha = la};
  size_t sz[5] = {2 * (size_t)B, (size_t)B, 2, 1, 1}; /* dq, dlogp, stats_pi, grad_alpha, stats_alpha */
  for (int c = 0; c < 2; c++)                         /* each copy its own stale values */
    for (int k = 0; k < 5; k++)
      out[c][k] = dev(sz[k]), stale(out[c][k], sz[k]);
  be->ops->actor_loss(be, &h, q, logp, out[0][0], out[0][1], out[0][2]);
  be->ops->alpha_loss(be, &h, logp, out[0][3], out[0][4]);
  cr_assert_not_null(be->ops->actor_alpha_loss);
  be->ops->actor_alpha_loss(be, &h, q, logp, out[1][0], out[1][1], out[1][2], out[1][3], out[1][4]);
  for (int k = 0; k < 5; k++)
    cr_assert_eq(memcmp(out[0][k], out[1][k], sz[k] * sizeof(float)), 0, "output %d differs", k);
  cr_assert_neq(out[1][3][0], 0.0f, "the alpha gradient was written");
  for (int c = 0; c < 2; c++)
    for (int k = 0; k < 5; k++)
      be->ops->free(be, out[c][k]);
  be->ops->free(be, q), be->ops->free(be, logp), be->ops->free(be, la);
}

/* The fused critic output (q_head: the critics' one-wide last layer and the head op on
 * its q) equals linear_fwd and the op, bit for bit, in each of its three modes, every
 * output stale-filled first; and it counts one launch where the two ops count two. */
Test(backend_cpu, q_head_equals_last_layer_then_op) {
  const int B = 37, H = 24;
  float *X = dev((size_t)B * 2 * H), *W = dev(2 * H), *bias = dev(2), *la = dev(1);
  float *r = dev(B), *term = dev(B), *logp = dev(B), *w = dev(B), *ysrc = dev(B);
  fill(X, (size_t)B * 2 * H, 0, 2), fill(W, 2 * H, -0.3, 0.3), fill(bias, 2, -1, 1);
  fill(r, B, -2, 2), fill(logp, B, -4, 1), fill(w, B, 0.2, 1.5), fill(ysrc, B, -5, 5);
  for (int i = 0; i < B; i++)
    term[i] = i % 5 == 0;
  la[0] = -0.7f;
  sac_head_hp_t h = {.B = B, .A = 3, .gamma = 0.99f, .target_entropy = -3.0f, .log_alpha = la};
  sac_linear_t L = {.B = B, .n_in = H, .n_out = 1, .K = 2, .shared = 0, .n_seg = 1, .W = W, .b = bias};
  L.seg[0] = (sac_seg_t){X, 2 * H, 2 * H, 0};
  L.act = SAC_ACT_NONE;
  /* outputs: q, y, dq, dlogp, td, stats (2), grad_alpha, stats_alpha */
  size_t sz[8] = {2 * (size_t)B, (size_t)B, 2 * (size_t)B, (size_t)B, (size_t)B, 2, 1, 1};
  for (int then = 0; then < 3; then++) {
    float *out[2][8];
    for (int k = 0; k < 8; k++) { /* the same stale values on both sides: an output a mode
                                   * does not write must stay so on both */
      out[0][k] = dev(sz[k]), out[1][k] = dev(sz[k]), stale(out[0][k], sz[k]);
      memcpy(out[1][k], out[0][k], sz[k] * sizeof(float));
    }
    for (int c = 0; c < 2; c++) /* the critic loss reads a y: the same one on both sides */
      if (then == SAC_Q_CRITIC_LOSS)
        memcpy(out[c][1], ysrc, B * sizeof(float));
    sac_backend_counts_t n0, n1, n2;
    cr_assert_eq(sac_backend_counts(be, &n0), 0);
    be->ops->linear_fwd(be, &L, out[0][0], 2);
    if (then == SAC_Q_TARGET)
      be->ops->critic_target(be, &h, r, term, out[0][0], logp, out[0][1]);
    else if (then == SAC_Q_CRITIC_LOSS)
      be->ops->critic_loss(be, &h, out[0][0], out[0][1], w, out[0][2], out[0][4], out[0][5]);
    else
      be->ops->actor_alpha_loss(be, &h, out[0][0], logp, out[0][2], out[0][3], out[0][5], out[0][6],
                                out[0][7]);
    cr_assert_eq(sac_backend_counts(be, &n1), 0);
    sac_q_head_t a = {.then = then,
                      .r = r,
                      .term = term,
                      .logp = logp,
                      .w = w,
                      .y = out[1][1],
                      .dq = out[1][2],
                      .dlogp = out[1][3],
                      .td = out[1][4],
                      .stats = out[1][5],
                      .grad_alpha = out[1][6],
                      .stats_alpha = out[1][7]};
    cr_assert_not_null(be->ops->q_head);
    be->ops->q_head(be, &L, out[1][0], &h, &a);
    cr_assert_eq(sac_backend_counts(be, &n2), 0);
    cr_assert_eq(n1.launches - n0.launches, 2, "mode %d: the two ops", then);
    cr_assert_eq(n2.launches - n1.launches, 1, "mode %d: one fused launch", then);
    for (int k = 0; k < 8; k++)
      cr_assert_eq(memcmp(out[0][k], out[1][k], sz[k] * sizeof(float)), 0, "mode %d: output %d differs", then,
                   k);
    cr_assert(isfinite(out[1][0][0]) && out[1][0][0] != out[1][0][1], "q was written");
    for (int c = 0; c < 2; c++)
      for (int k = 0; k < 8; k++)
        be->ops->free(be, out[c][k]);
  }
  float *bufs[] = {X, W, bias, la, r, term, logp, w, ysrc};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
    be->ops->free(be, bufs[i]);
}

/* The fused noise of both halves equals two normal ops with the two tags, bit for bit
 * (an odd n checks the halves' boundary). */
Test(backend_cpu, fused_normal2_equals_two_normals) {
  const size_t n = 37;
  const uint32_t key[2] = {0x1234u, 0xabcdu};
  float *a = dev(2 * n), *b = dev(2 * n);
  be->ops->normal(be, a, n, key, 9, 1);
  be->ops->normal(be, a + n, n, key, 9, 0);
  cr_assert_not_null(be->ops->normal2);
  be->ops->normal2(be, b, n, key, 9, 1, 0);
  cr_assert_eq(memcmp(a, b, 2 * n * sizeof(float)), 0);
  cr_assert_neq(memcmp(b, b + n, n * sizeof(float)), 0, "the two halves differ (their tags do)");
  be->ops->free(be, a), be->ops->free(be, b);
}

/* launches the cpu backend counted for the calls since *c (and *c moved on) */
static int64_t launches_since(sac_backend_counts_t *c) {
  sac_backend_counts_t now;
  cr_assert_eq(sac_backend_counts(be, &now), 0);
  int64_t n = now.launches - c->launches;
  *c = now;
  return n;
}

/* Issue 25: a shared layer whose two segments are one [seg 0 | seg 1] block in memory (the
 * critics' joined input) gives what the same values in two separate buffers give, bit for
 * bit, forward and backward (every output stale-filled first), and counts one matmul per
 * pass where two segments count two. */
Test(backend_cpu, adjacent_segments_equal_two_segments_with_one_operand) {
  const int B = 37, n1 = 5, n2 = 3, n = n1 + n2, n_out = 24, K = 2;
  const size_t nW = (size_t)K * n * n_out, nY = (size_t)B * K * n_out;
  float *blk = dev((size_t)B * n), *X1 = dev((size_t)B * n1), *X2 = dev((size_t)B * n2);
  float *W = dev(nW), *bias = dev((size_t)K * n_out), *G = dev(nY);
  fill(blk, (size_t)B * n, -1, 1), fill(W, nW, -0.4, 0.4), fill(bias, (size_t)K * n_out, -0.3, 0.3);
  fill(G, nY, -1, 1);
  for (int r = 0; r < B; r++) {
    memcpy(X1 + (size_t)r * n1, blk + (size_t)r * n, n1 * sizeof(float));
    memcpy(X2 + (size_t)r * n2, blk + (size_t)r * n + n1, n2 * sizeof(float));
  }
  sac_linear_t L[2];
  for (int c = 0; c < 2; c++) {
    L[c] =
        (sac_linear_t){.B = B, .n_in = n, .n_out = n_out, .K = K, .shared = 1, .n_seg = 2, .W = W, .b = bias};
    L[c].act = SAC_ACT_RELU;
  }
  L[0].seg[0] = (sac_seg_t){X1, n1, n1, 0}, L[0].seg[1] = (sac_seg_t){X2, n2, n2, 0};
  L[1].seg[0] = (sac_seg_t){blk, n, n1, 0}, L[1].seg[1] = (sac_seg_t){blk + n1, n, n2, 0};
  cr_assert(!sac_segs_adjacent(&L[0]) && sac_segs_adjacent(&L[1]));
  /* outputs per side: Y, dY, dW, db, dX (a (B, n) block: segment 1's after segment 0's) */
  size_t sz[5] = {nY, nY, nW, (size_t)K * n_out, (size_t)B * n};
  float *out[2][5];
  int64_t fwd[2], bwd[2];
  sac_backend_counts_t cnt;
  cr_assert_eq(sac_backend_counts(be, &cnt), 0);
  for (int c = 0; c < 2; c++) {
    for (int k = 0; k < 5; k++)
      out[c][k] = dev(sz[k]), stale(out[c][k], sz[k]);
    memcpy(out[c][1], G, nY * sizeof(float));
    launches_since(&cnt);
    be->ops->linear_fwd(be, &L[c], out[c][0], K * n_out);
    fwd[c] = launches_since(&cnt);
    float *dX[2] = {out[c][4], out[c][4] + n1};
    int ldx[2] = {n, n};
    be->ops->linear_bwd(be, &L[c], out[c][1], out[c][0], K * n_out, out[c][2], out[c][3], dX, ldx);
    bwd[c] = launches_since(&cnt);
  }
  for (int k = 0; k < 5; k++)
    cr_assert_eq(memcmp(out[0][k], out[1][k], sz[k] * sizeof(float)), 0, "output %d differs", k);
  cr_assert_eq(fwd[0], 2, "two segments: two matmuls");
  cr_assert_eq(fwd[1], 1, "adjacent segments: one matmul");
  cr_assert_eq(bwd[0], 5, "activation/bias kernel, two dW matmuls, two dX kernels");
  cr_assert_eq(bwd[1], 4, "activation/bias kernel, one dW matmul, two dX kernels");
  for (int c = 0; c < 2; c++)
    for (int k = 0; k < 5; k++)
      be->ops->free(be, out[c][k]);
  float *bufs[] = {blk, X1, X2, W, bias, G};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
    be->ops->free(be, bufs[i]);
}

/* n floats of a fresh buffer holding a copy of src */
static float *dup_of(const float *src, size_t n) {
  float *p = dev(n);
  memcpy(p, src, n * sizeof(float));
  return p;
}

static void expect_same(const float *a, const float *b, size_t n, const char *what) {
  cr_assert_eq(memcmp(a, b, n * sizeof(float)), 0, "%s differs", what);
}

/* Issue 25: the fused policy output (policy_fwd: the noise, the actor's last layer, the
 * head and the copies of the critics' joined input) equals normal2, linear_fwd, head_fwd
 * and the copies, bit for bit, every output stale-filled alike on both sides (the columns
 * of the action block between rows must stay as they were), and counts one launch where
 * the ops count three. */
Test(backend_cpu, policy_fwd_equals_noise_last_layer_head_and_copies) {
  const int B = 37, rows = 2 * B, A = 3, H = 24, O = 4, lda = O + A;
  const uint32_t key[2] = {0x51u, 0x7au};
  float *X = dev((size_t)rows * H), *W = dev((size_t)H * 2 * A), *bias = dev(2 * A),
        *obs = dev((size_t)rows * O);
  float *act = dev((size_t)B * A), *la = dev(1);
  fill(X, (size_t)rows * H, 0, 1.5), fill(W, (size_t)H * 2 * A, -0.5, 0.5), fill(bias, 2 * A, -1, 1);
  fill(obs, (size_t)rows * O, -2, 2), fill(act, (size_t)B * A, -1, 1);
  la[0] = -0.4f;
  sac_head_hp_t h = {.B = rows, .A = A, .gamma = 0.99f, .log_std_min = -5, .log_std_max = 2, .log_alpha = la};
  sac_linear_t L = {.B = rows, .n_in = H, .n_out = 2 * A, .K = 1, .n_seg = 1, .W = W, .b = bias};
  L.seg[0] = (sac_seg_t){X, H, H, 0}, L.act = SAC_ACT_NONE;
  /* outputs: P, eps, the joined rows (3B, O + A) holding a in rows [0, 2B), logp */
  size_t sz[4] = {(size_t)rows * 2 * A, (size_t)rows * A, (size_t)3 * B * lda, (size_t)rows};
  float *out[2][4];
  for (int k = 0; k < 4; k++) {
    out[0][k] = dev(sz[k]), stale(out[0][k], sz[k]);
    out[1][k] = dup_of(out[0][k], sz[k]);
  }
  sac_backend_counts_t cnt;
  cr_assert_eq(sac_backend_counts(be, &cnt), 0);
  be->ops->normal2(be, out[0][1], (size_t)B * A, key, 9, 1, 0);
  be->ops->linear_fwd(be, &L, out[0][0], 2 * A);
  be->ops->head_fwd(be, &h, out[0][0], out[0][1], out[0][2] + O, lda, out[0][3]);
  for (int r = 0; r < 3 * B; r++) {
    memcpy(out[0][2] + (size_t)r * lda, obs + (size_t)(r < rows ? r : r - rows) * O, O * sizeof(float));
    if (r >= rows)
      memcpy(out[0][2] + (size_t)r * lda + O, act + (size_t)(r - rows) * A, A * sizeof(float));
  }
  cr_assert_eq(launches_since(&cnt), 3);
  sac_policy_fwd_t pf = {.key = key, .stream = 9, .tag0 = 1, .tag1 = 0, .eps = out[1][1], .a = out[1][2] + O};
  pf.lda = lda, pf.logp = out[1][3], pf.n_copy = 3;
  pf.copy[0] = (sac_copy_t){obs, out[1][2], O, lda, rows, O};
  pf.copy[1] = (sac_copy_t){obs, out[1][2] + (size_t)rows * lda, O, lda, B, O};
  pf.copy[2] = (sac_copy_t){act, out[1][2] + (size_t)rows * lda + O, A, lda, B, A};
  cr_assert_not_null(be->ops->policy_fwd);
  be->ops->policy_fwd(be, &L, out[1][0], &h, &pf);
  cr_assert_eq(launches_since(&cnt), 1);
  const char *names[4] = {"P", "eps", "joined rows", "logp"};
  for (int k = 0; k < 4; k++)
    expect_same(out[0][k], out[1][k], sz[k], names[k]);
  cr_assert_neq(memcmp(out[1][1], out[1][1] + (size_t)B * A, (size_t)B * A * sizeof(float)), 0,
                "the two halves' noise differs (their tags do)");
  for (int c = 0; c < 2; c++)
    for (int k = 0; k < 4; k++)
      be->ops->free(be, out[c][k]);
  float *bufs[] = {X, W, bias, obs, act, la};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
    be->ops->free(be, bufs[i]);
}

/* One case of linear_bwd_act against linear_bwd of the layer and then of the layer below
 * (its real description: n_in 7, its own act; with only its bias gradient). */
typedef struct {
  const char *name;
  int n_out, K;
  sac_act_t below_act;
  int grads;              /* 1: dW, db and the layer below's db; 0: the input gradient only */
  int64_t fused, unfused; /* launches counted */
} bwd_act_case_t;

static void run_bwd_act(const bwd_act_case_t *c) {
  const int B = 37, H = 24, K = c->K, n_out = c->n_out, w = K * H, wo = K * n_out;
  const size_t nX = (size_t)B * w, nW = (size_t)K * H * n_out, nY = (size_t)B * wo;
  float *X = dev(nX), *W = dev(nW), *bias = dev((size_t)wo), *Y = dev(nY), *G = dev(nY);
  fill(X, nX, -1, 1), fill(W, nW, -0.5, 0.5), fill(bias, (size_t)wo, -0.2, 0.2), fill(G, nY, -1, 1);
  if (c->below_act == SAC_ACT_RELU)
    for (size_t i = 0; i < nX; i++)
      X[i] = X[i] > 0 ? X[i] : 0.0f; /* a ReLU layer's output */
  else if (c->below_act == SAC_ACT_TANH)
    for (size_t i = 0; i < nX; i++)
      X[i] = tanhf(X[i]);
  sac_linear_t L = {.B = B, .n_in = H, .n_out = n_out, .K = K, .n_seg = 1, .W = W, .b = bias};
  L.seg[0] = (sac_seg_t){X, w, w, 0}, L.act = n_out == 1 ? SAC_ACT_NONE : SAC_ACT_RELU;
  be->ops->linear_fwd(be, &L, Y, wo);
  sac_linear_t below = {.B = B, .n_in = 7, .n_out = H, .K = K, .n_seg = 1, .act = c->below_act};
  /* outputs: dY, dW, db, dX, the layer below's db */
  size_t sz[5] = {nY, nW, (size_t)wo, nX, (size_t)w};
  float *out[2][5];
  for (int k = 0; k < 5; k++) {
    out[0][k] = dev(sz[k]), stale(out[0][k], sz[k]);
    if (k == 0)
      memcpy(out[0][0], G, nY * sizeof(float));
    out[1][k] = dup_of(out[0][k], sz[k]);
  }
  sac_backend_counts_t cnt;
  cr_assert_eq(sac_backend_counts(be, &cnt), 0);
  float *dx[2] = {out[0][3], NULL};
  int ldx[2] = {w, 0};
  be->ops->linear_bwd(be, &L, out[0][0], Y, wo, c->grads ? out[0][1] : NULL, c->grads ? out[0][2] : NULL, dx,
                      ldx);
  be->ops->linear_bwd(be, &below, out[0][3], X, w, NULL, c->grads ? out[0][4] : NULL, NULL, NULL);
  cr_assert_eq(launches_since(&cnt), c->unfused, "%s: the two ops", c->name);
  sac_below_t bl = {c->below_act, c->grads ? out[1][4] : NULL};
  cr_assert_not_null(be->ops->linear_bwd_act);
  be->ops->linear_bwd_act(be, &L, out[1][0], Y, wo, c->grads ? out[1][1] : NULL, c->grads ? out[1][2] : NULL,
                          out[1][3], w, &bl);
  cr_assert_eq(launches_since(&cnt), c->fused, "%s: fused", c->name);
  const char *names[5] = {"dY", "dW", "db", "dX", "db below"};
  for (int k = 0; k < 5; k++)
    expect_same(out[0][k], out[1][k], sz[k], names[k]);
  for (int c2 = 0; c2 < 2; c2++)
    for (int k = 0; k < 5; k++)
      be->ops->free(be, out[c2][k]);
  float *bufs[] = {X, W, bias, Y, G};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
    be->ops->free(be, bufs[i]);
}

/* Issue 25: linear_bwd_act equals the layer's backward then the layer below's activation
 * backward and bias sum, bit for bit: the critics' one-wide last layer (one launch where
 * the ops count two, in the critic step and in the actor step's input-gradient pass), and
 * a hidden layer (no kernel of its own on cuda: the ops' count). */
Test(backend_cpu, linear_bwd_act_equals_the_layer_then_the_layer_below) {
  const bwd_act_case_t cases[] = {
      {"critic output, gradients", 1, 2, SAC_ACT_RELU, 1, 1, 2},
      {"critic output, input gradient", 1, 2, SAC_ACT_RELU, 0, 1, 2},
      {"critic output, tanh below", 1, 2, SAC_ACT_TANH, 1, 1, 2},
      {"hidden layer", 16, 2, SAC_ACT_RELU, 1, 4, 4},
      {"hidden layer, one member, input gradient", 16, 1, SAC_ACT_RELU, 0, 3, 3},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    run_bwd_act(&cases[i]);
}

/* Issue 25: the fused policy backward equals head_bwd, the last layer's linear_bwd and
 * the layer below's, bit for bit, every output stale-filled alike; one launch where the
 * ops count five, and above SAC_POLICY_BWD_MAX_ACT the ops' count. */
static void run_policy_bwd(int A, int64_t fused) {
  const int B = 37, H = 24, lda = A + 2, ldda = A + 1;
  float *P = dev((size_t)2 * B * 2 * A), *eps = dev((size_t)2 * B * A), *a = dev((size_t)2 * B * lda);
  float *da = dev((size_t)B * ldda), *dlogp = dev(B), *X = dev((size_t)B * H), *W = dev((size_t)H * 2 * A);
  fill(P, (size_t)2 * B * 2 * A, -6, 3), fill(eps, (size_t)2 * B * A, -2, 2),
      fill(a, (size_t)2 * B * lda, -1, 1);
  fill(da, (size_t)B * ldda, -1, 1), fill(dlogp, B, 0, 0.1), fill(X, (size_t)B * H, -1, 1);
  fill(W, (size_t)H * 2 * A, -0.5, 0.5);
  for (int i = 0; i < B * H; i++)
    X[i] = X[i] > 0 ? X[i] : 0.0f;
  sac_head_hp_t h = {.B = B, .A = A, .log_std_min = -5, .log_std_max = 2};
  sac_linear_t L = {.B = B, .n_in = H, .n_out = 2 * A, .K = 1, .n_seg = 1, .W = W};
  L.seg[0] = (sac_seg_t){X, H, H, 0}, L.act = SAC_ACT_NONE;
  sac_linear_t below = {.B = B, .n_in = 5, .n_out = H, .K = 1, .n_seg = 1, .act = SAC_ACT_RELU};
  /* outputs: dP, dW, db, dX, the layer below's db */
  size_t sz[5] = {(size_t)B * 2 * A, (size_t)H * 2 * A, (size_t)2 * A, (size_t)B * H, (size_t)H};
  float *out[2][5];
  for (int k = 0; k < 5; k++) {
    out[0][k] = dev(sz[k]), stale(out[0][k], sz[k]);
    out[1][k] = dup_of(out[0][k], sz[k]);
  }
  sac_backend_counts_t cnt;
  cr_assert_eq(sac_backend_counts(be, &cnt), 0);
  be->ops->head_bwd(be, &h, P, eps, a, lda, da, ldda, dlogp, out[0][0]);
  float *dx[2] = {out[0][3], NULL};
  int ldx[2] = {H, 0};
  be->ops->linear_bwd(be, &L, out[0][0], P, 2 * A, out[0][1], out[0][2], dx, ldx);
  be->ops->linear_bwd(be, &below, out[0][3], X, H, NULL, out[0][4], NULL, NULL);
  cr_assert_eq(launches_since(&cnt), 5, "A %d: the ops", A);
  sac_below_t bl = {SAC_ACT_RELU, out[1][4]};
  cr_assert_not_null(be->ops->policy_bwd);
  be->ops->policy_bwd(be, &h, P, eps, a, lda, da, ldda, dlogp, out[1][0], &L, out[1][1], out[1][2], out[1][3],
                      H, &bl);
  cr_assert_eq(launches_since(&cnt), fused, "A %d: fused", A);
  const char *names[5] = {"dP", "dW", "db", "dX", "db below"};
  for (int k = 0; k < 5; k++)
    expect_same(out[0][k], out[1][k], sz[k], names[k]);
  for (int c = 0; c < 2; c++)
    for (int k = 0; k < 5; k++)
      be->ops->free(be, out[c][k]);
  float *bufs[] = {P, eps, a, da, dlogp, X, W};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
    be->ops->free(be, bufs[i]);
}

Test(backend_cpu, policy_bwd_equals_head_then_last_layer_then_the_layer_below) {
  run_policy_bwd(3, 1);
  run_policy_bwd(SAC_POLICY_BWD_MAX_ACT, 1);
  run_policy_bwd(SAC_POLICY_BWD_MAX_ACT + 1, 5);
}

/* Issue 25: a shared layer's input gradient without dW and db (the critics' first layer
 * in the actor step's input-gradient pass) counts the one kernel the cuda backend runs
 * for it with the activation backward (k_dx_shared_act), one or both segments wanted,
 * where the activation kernel and a dX kernel per segment were counted; with dW it
 * counts as before. */
Test(backend_cpu, shared_input_gradient_alone_counts_one_launch) {
  const int B = 9, n1 = 4, n2 = 2, n_out = 8, K = 2;
  float *X1 = dev((size_t)B * n1), *X2 = dev((size_t)B * n2), *W = dev((size_t)K * (n1 + n2) * n_out);
  float *bias = dev((size_t)K * n_out), *Y = dev((size_t)B * K * n_out), *G = dev((size_t)B * K * n_out);
  float *dX1 = dev((size_t)B * n1), *dX2 = dev((size_t)B * n2), *dW = dev((size_t)K * (n1 + n2) * n_out);
  fill(X1, (size_t)B * n1, -1, 1), fill(X2, (size_t)B * n2, -1, 1),
      fill(W, (size_t)K * (n1 + n2) * n_out, -1, 1);
  sac_linear_t L = {
      .B = B, .n_in = n1 + n2, .n_out = n_out, .K = K, .shared = 1, .n_seg = 2, .W = W, .b = bias};
  L.seg[0] = (sac_seg_t){X1, n1, n1, 0}, L.seg[1] = (sac_seg_t){X2, n2, n2, 0}, L.act = SAC_ACT_RELU;
  be->ops->linear_fwd(be, &L, Y, K * n_out);
  int ldx[2] = {n1, n2};
  float *one[2] = {NULL, dX2}, *both[2] = {dX1, dX2};
  sac_backend_counts_t cnt;
  cr_assert_eq(sac_backend_counts(be, &cnt), 0);
  fill(G, (size_t)B * K * n_out, -1, 1);
  be->ops->linear_bwd(be, &L, G, Y, K * n_out, NULL, NULL, one, ldx);
  cr_assert_eq(launches_since(&cnt), 1, "the action segment's input gradient");
  be->ops->linear_bwd(be, &L, G, Y, K * n_out, NULL, NULL, both, ldx);
  cr_assert_eq(launches_since(&cnt), 1, "both segments' input gradients");
  be->ops->linear_bwd(be, &L, G, Y, K * n_out, dW, NULL, both, ldx);
  cr_assert_eq(launches_since(&cnt), 5, "with dW: the activation kernel, two dW matmuls, two dX kernels");
  float *bufs[] = {X1, X2, W, bias, Y, G, dX1, dX2, dW};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
    be->ops->free(be, bufs[i]);
}
