/* common/vmath.h: the array functions the cpu backend's noise and policy head and the
 * prioritised sampler call, against double-precision references over the ranges they
 * are called on, and the same bits whichever way an array is cut. */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/vmath.h"

/* Units in the last place between a float and the float nearest the reference. */
static double ulps(float got, double ref) {
  const float want = (float)ref;
  if (got == want)
    return 0.0;
  const float step = nextafterf(fabsf(want), INFINITY) - fabsf(want);
  return fabs((double)got - (double)want) / (double)step;
}

typedef struct {
  const char *name;
  void (*f)(const float *, float *, size_t);
  double (*ref)(double);
  float (*scalar)(float); /* libm's, for the negative control */
  float lo, hi;
  int logscale; /* points spread evenly in log(x) (x > 0), else in x */
} fn_case_t;

static double ref_tanh(double x) { return tanh(x); }

/* The functions and their ranges in the backend: exp of log std (clamped, about [-20, 2])
 * and of -2u (u a pre-tanh action, |u| up to tens); log of uniforms in [2^-24, 1]; log1p of
 * exp(-2u) (0 to huge); tanh of u; sin and cos of [0, 2 pi]. */
static const fn_case_t k_cases[] = {
    {"expf", sac_vexpf, exp, expf, -87.0f, 88.0f, 0},
    {"logf", sac_vlogf, log, logf, 5.9604645e-8f, 1.0f, 1},
    {"logf (wide)", sac_vlogf, log, logf, 1e-30f, 1e30f, 1},
    {"log1pf", sac_vlog1pf, log1p, log1pf, 1e-30f, 1e30f, 1},
    {"log1pf (-1, 0)", sac_vlog1pf, log1p, log1pf, -0.999f, 0.0f, 0},
    {"tanhf", sac_vtanhf, ref_tanh, tanhf, -20.0f, 20.0f, 0},
    {"sinf", sac_vsinf, sin, sinf, 0.0f, 6.2831855f, 0},
    {"cosf", sac_vcosf, cos, cosf, 0.0f, 6.2831855f, 0},
};

#define N 100003 /* odd: the last vector is a short one */

static void fill_range(float *x, const fn_case_t *c) {
  for (size_t i = 0; i < N; i++) {
    const double t = (double)i / (N - 1);
    x[i] = c->logscale ? (float)exp(log(c->lo) + t * (log(c->hi) - log(c->lo)))
                       : (float)(c->lo + t * (c->hi - c->lo));
  }
}

Test(vmath, within_4_ulp_of_the_exact_result) {
  cr_log_info("vmath: %s", sac_vmath_vectorised() ? "libmvec, eight at a time" : "libm, one at a time");
  float *x = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float));
  for (size_t k = 0; k < sizeof k_cases / sizeof k_cases[0]; k++) {
    const fn_case_t *c = &k_cases[k];
    fill_range(x, c);
    c->f(x, y, N);
    double worst = 0.0;
    size_t at = 0;
    for (size_t i = 0; i < N; i++) {
      const double e = ulps(y[i], c->ref((double)x[i]));
      if (!(e <= worst)) /* NaN counts as worst */
        worst = e, at = i;
    }
    cr_log_info("%-16s [%g, %g]: at most %.2f ulp (at x = %.9g)", c->name, (double)c->lo, (double)c->hi,
                worst, (double)x[at]);
    cr_expect_leq(worst, 4.0, "%s(%.9g) = %.9g: %.2f ulp from %.9g", c->name, (double)x[at], (double)y[at],
                  worst, c->ref((double)x[at]));
  }
  free(x), free(y);
}

/* pow with the exponents the prioritised sampler uses: the importance weights' -beta on
 * ratios of priorities (at least 1) and the priorities' alpha on |TD error| + eps. */
Test(vmath, powf_within_4_ulp_of_the_exact_result) {
  static const float exps[] = {-1.0f, -0.4f, -0.123f, 0.0f, 0.6f, 1.0f};
  float *x = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float)), *cut = malloc(N * sizeof(float));
  for (size_t i = 0; i < N; i++)
    x[i] = (float)exp(log(1e-8) + (double)i / (N - 1) * (log(1e8) - log(1e-8)));
  for (size_t k = 0; k < sizeof exps / sizeof exps[0]; k++) {
    const float e = exps[k];
    sac_vpowf(x, e, y, N);
    double worst = 0.0;
    size_t at = 0;
    for (size_t i = 0; i < N; i++) {
      const double u = ulps(y[i], pow((double)x[i], (double)e));
      if (!(u <= worst))
        worst = u, at = i;
    }
    cr_log_info("powf(x, %g), x in [1e-8, 1e8]: at most %.2f ulp (at x = %.9g)", (double)e, worst,
                (double)x[at]);
    cr_expect_leq(worst, 4.0, "powf(%.9g, %g) = %.9g: %.2f ulp", (double)x[at], (double)e, (double)y[at],
                  worst);
    for (size_t i = 0; i < N; i += 37) { /* in pieces of 37, in place: the same bits */
      const size_t n = N - i < 37 ? N - i : 37;
      memcpy(cut + i, x + i, n * sizeof(float));
      sac_vpowf(cut + i, e, cut + i, n);
    }
    cr_expect_eq(memcmp(y, cut, N * sizeof(float)), 0, "powf(x, %g) cut into pieces: the bits differ",
                 (double)e);
  }
  free(x), free(y), free(cut);
}

/* The backend splits a range among threads and chunks: an element's value must not depend
 * on where the cut falls (a tail computed another way would break the cpu backend's
 * one-thread bits). In place as well as out of place. Negative control, where the
 * functions are vectorised: the pieces' elements past their last whole vector computed by
 * libm instead must differ somewhere from the whole array's, or the comparison could not
 * see such a tail. */
Test(vmath, the_same_bits_however_the_array_is_cut) {
  float *x = malloc(N * sizeof(float)), *whole = malloc(N * sizeof(float)), *cut = malloc(N * sizeof(float)),
        *control = malloc(N * sizeof(float));
  for (size_t k = 0; k < sizeof k_cases / sizeof k_cases[0]; k++) {
    const fn_case_t *c = &k_cases[k];
    fill_range(x, c);
    c->f(x, whole, N);
    static const size_t pieces[] = {1, 3, 7, 8, 9, 13, 64, 255};
    size_t i = 0;
    for (size_t p = 0; i < N; p++) {
      const size_t want = pieces[p % (sizeof pieces / sizeof pieces[0])], n = want < N - i ? want : N - i;
      memcpy(cut + i, x + i, n * sizeof(float));
      c->f(cut + i, cut + i, n);
      memcpy(control + i, cut + i, n * sizeof(float));
      for (size_t t = i + n / 8 * 8; t < i + n; t++)
        control[t] = c->scalar(x[t]);
      i += n;
    }
    cr_expect_eq(memcmp(whole, cut, N * sizeof(float)), 0, "%s: cut into pieces, in place, the bits differ",
                 c->name);
    if (sac_vmath_vectorised())
      cr_expect_neq(memcmp(whole, control, N * sizeof(float)), 0,
                    "negative control: %s with its tails by libm gives the same bits: the check sees nothing",
                    c->name);
  }
  free(x), free(whole), free(cut), free(control);
}
