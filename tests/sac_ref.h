/* Double-precision reference of the SAC math, for finite-difference gradient checks and
 * for comparing backends. Deliberately naive: loops straight from REFERENCE.md.
 * Header-only (static functions) so each test binary carries its own copy. */
#ifndef SAC_TESTS_SAC_REF_H
#define SAC_TESTS_SAC_REF_H
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/mlp.h"

/* out (B, K*n_out): the ensemble MLP of common/mlp.h's layout on input x (B, n_in0)
 * (already concatenated). */
__attribute__((unused)) static void ref_mlp(const sac_mlp_desc_t *d, const double *params, const double *x,
                                            int B, double *out) {
  int maxw = sac_mlp_max_width(d) * d->ensemble;
  double *cur = malloc(sizeof(double) * (size_t)B * maxw), *nxt = malloc(sizeof(double) * (size_t)B * maxw);
  const int K = d->ensemble;
  for (int k = 0; k < K; k++) {
    int n0 = d->sizes[0];
    for (int r = 0; r < B; r++)
      for (int i = 0; i < n0; i++)
        cur[(size_t)r * n0 + i] = x[(size_t)r * n0 + i];
    for (int l = 0; l < d->n_layers; l++) {
      int ni = d->sizes[l], no = d->sizes[l + 1];
      const double *W = params + sac_mlp_weight_offset(d, l) + (size_t)k * ni * no;
      const double *b = params + sac_mlp_bias_offset(d, l) + (size_t)k * no;
      int last = l == d->n_layers - 1;
      for (int r = 0; r < B; r++)
        for (int j = 0; j < no; j++) {
          double acc = b[j];
          for (int i = 0; i < ni; i++)
            acc += cur[(size_t)r * ni + i] * W[(size_t)i * no + j];
          if (!last && d->hidden_act == SAC_ACT_RELU)
            acc = acc > 0 ? acc : 0;
          else if (!last && d->hidden_act == SAC_ACT_TANH)
            acc = tanh(acc);
          nxt[(size_t)r * no + j] = acc;
        }
      double *t = cur;
      cur = nxt;
      nxt = t;
    }
    int no = d->sizes[d->n_layers];
    for (int r = 0; r < B; r++)
      for (int j = 0; j < no; j++)
        out[(size_t)r * K * no + (size_t)k * no + j] = cur[(size_t)r * no + j];
  }
  free(cur);
  free(nxt);
}

__attribute__((unused)) static double ref_softplus(double x) { return x > 30 ? x : log1p(exp(x)); }

/* Tanh-Gaussian head: P (B, 2A), eps (B, A) -> a (B, A), logp (B). */
__attribute__((unused)) static void ref_head(const double *P, const double *eps, int B, int A, double lsmin,
                                             double lsmax, double *a, double *logp) {
  for (int r = 0; r < B; r++) {
    double lp = 0;
    for (int i = 0; i < A; i++) {
      double mu = P[(size_t)r * 2 * A + i], ls = P[(size_t)r * 2 * A + A + i];
      ls = ls < lsmin ? lsmin : (ls > lsmax ? lsmax : ls);
      double e = eps[(size_t)r * A + i];
      double u = mu + exp(ls) * e;
      a[(size_t)r * A + i] = tanh(u);
      lp += -0.5 * e * e - ls - 0.5 * log(2 * M_PI) - 2 * (log(2.0) - u - ref_softplus(-2 * u));
    }
    logp[r] = lp;
  }
}

/* concat (B, O) and (B, A) into (B, O+A) */
__attribute__((unused)) static void ref_concat(const double *x, int O, const double *y, int A, int B,
                                               double *out) {
  for (int r = 0; r < B; r++) {
    memcpy(out + (size_t)r * (O + A), x + (size_t)r * O, sizeof(double) * O);
    memcpy(out + (size_t)r * (O + A) + O, y + (size_t)r * A, sizeof(double) * A);
  }
}

typedef struct {
  int B, O, A;
  double gamma, lsmin, lsmax, target_entropy;
  const sac_mlp_desc_t *ad, *cd;
  const double *obs, *act, *rew, *term, *nobs, *w; /* w may be NULL */
  const double *eps_next, *eps_pi;
} ref_sac_t;

/* L_Q = 1/2 mean w (q1 - y)^2 + 1/2 mean w (q2 - y)^2 with the clipped double-Q target. */
__attribute__((unused)) static double ref_critic_loss(const ref_sac_t *R, const double *actor,
                                                      const double *critic, const double *target,
                                                      double log_alpha) {
  int B = R->B, O = R->O, A = R->A;
  double *P = malloc(sizeof(double) * B * 2 * A), *a2 = malloc(sizeof(double) * B * A);
  double *lp2 = malloc(sizeof(double) * B), *sa = malloc(sizeof(double) * B * (O + A));
  double *qt = malloc(sizeof(double) * B * 2), *q = malloc(sizeof(double) * B * 2);
  ref_mlp(R->ad, actor, R->nobs, B, P);
  ref_head(P, R->eps_next, B, A, R->lsmin, R->lsmax, a2, lp2);
  ref_concat(R->nobs, O, a2, A, B, sa);
  ref_mlp(R->cd, target, sa, B, qt);
  ref_concat(R->obs, O, R->act, A, B, sa);
  ref_mlp(R->cd, critic, sa, B, q);
  double L = 0, alpha = exp(log_alpha);
  for (int r = 0; r < B; r++) {
    double y = R->rew[r] + R->gamma * (1 - R->term[r]) * (fmin(qt[2 * r], qt[2 * r + 1]) - alpha * lp2[r]);
    double w = R->w ? R->w[r] : 1.0;
    L += 0.5 * w * ((q[2 * r] - y) * (q[2 * r] - y) + (q[2 * r + 1] - y) * (q[2 * r + 1] - y));
  }
  free(P), free(a2), free(lp2), free(sa), free(qt), free(q);
  return L / B;
}

/* L_pi = mean(alpha logp - min(q1, q2)) at a~ = policy(obs, eps_pi); also mean logp. */
__attribute__((unused)) static double ref_actor_loss(const ref_sac_t *R, const double *actor,
                                                     const double *critic, double log_alpha,
                                                     double *mean_logp) {
  int B = R->B, O = R->O, A = R->A;
  double *P = malloc(sizeof(double) * B * 2 * A), *a = malloc(sizeof(double) * B * A);
  double *lp = malloc(sizeof(double) * B), *sa = malloc(sizeof(double) * B * (O + A));
  double *q = malloc(sizeof(double) * B * 2);
  ref_mlp(R->ad, actor, R->obs, B, P);
  ref_head(P, R->eps_pi, B, A, R->lsmin, R->lsmax, a, lp);
  ref_concat(R->obs, O, a, A, B, sa);
  ref_mlp(R->cd, critic, sa, B, q);
  double L = 0, ml = 0, alpha = exp(log_alpha);
  for (int r = 0; r < B; r++) {
    L += alpha * lp[r] - fmin(q[2 * r], q[2 * r + 1]);
    ml += lp[r];
  }
  if (mean_logp)
    *mean_logp = ml / B;
  free(P), free(a), free(lp), free(sa), free(q);
  return L / B;
}

/* Central finite difference of f over x[i] in double. */
#define REF_FD(h, xi, expr_plus_minus, out)                                                                  \
  do {                                                                                                       \
    double _x0 = (xi);                                                                                       \
    (xi) = _x0 + (h);                                                                                        \
    double _fp = (expr_plus_minus);                                                                          \
    (xi) = _x0 - (h);                                                                                        \
    double _fm = (expr_plus_minus);                                                                          \
    (xi) = _x0;                                                                                              \
    (out) = (_fp - _fm) / (2 * (h));                                                                         \
  } while (0)

#endif
