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
      for (int r = 0; r < B; r++) { /* row by row, W read along its rows (cache-friendly) */
        double *acc = nxt + (size_t)r * no;
        for (int j = 0; j < no; j++)
          acc[j] = b[j];
        for (int i = 0; i < ni; i++) {
          const double xi = cur[(size_t)r * ni + i];
          for (int j = 0; j < no; j++)
            acc[j] += xi * W[(size_t)i * no + j];
        }
        for (int j = 0; j < no; j++)
          if (!last && d->hidden_act == SAC_ACT_RELU)
            acc[j] = acc[j] > 0 ? acc[j] : 0;
          else if (!last && d->hidden_act == SAC_ACT_TANH)
            acc[j] = tanh(acc[j]);
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

/* The analytic backward of ref_mlp, for comparing whole updates at sizes where finite
 * differences are out of reach: dparams (the MLP's layout, overwritten) = d/dparams of
 * sum(dout . ref_mlp(x)), and where dx is non-NULL dx (B, n_in0) = d/dx of the same,
 * summed over the members. */
__attribute__((unused)) static void ref_mlp_bwd(const sac_mlp_desc_t *d, const double *params,
                                                const double *x, int B, const double *dout, double *dparams,
                                                double *dx) {
  const int K = d->ensemble, NL = d->n_layers, maxw = sac_mlp_max_width(d);
  double *h[SAC_MLP_MAX_LAYERS + 1]; /* h[l + 1]: layer l's output of member k (after act) */
  for (int l = 1; l <= NL; l++)
    h[l] = malloc(sizeof(double) * (size_t)B * maxw);
  double *g = malloc(sizeof(double) * (size_t)B * maxw), *gn = malloc(sizeof(double) * (size_t)B * maxw);
  memset(dparams, 0, sizeof(double) * sac_mlp_param_count(d));
  if (dx)
    memset(dx, 0, sizeof(double) * (size_t)B * d->sizes[0]);
  for (int k = 0; k < K; k++) {
    h[0] = (double *)x;
    for (int l = 0; l < NL; l++) { /* forward, keeping every layer's output */
      const int ni = d->sizes[l], no = d->sizes[l + 1];
      const double *W = params + sac_mlp_weight_offset(d, l) + (size_t)k * ni * no;
      const double *b = params + sac_mlp_bias_offset(d, l) + (size_t)k * no;
      for (int r = 0; r < B; r++) {
        double *acc = h[l + 1] + (size_t)r * no;
        for (int j = 0; j < no; j++)
          acc[j] = b[j];
        for (int i = 0; i < ni; i++) {
          const double xi = h[l][(size_t)r * ni + i];
          for (int j = 0; j < no; j++)
            acc[j] += xi * W[(size_t)i * no + j];
        }
        for (int j = 0; j < no; j++)
          if (l < NL - 1 && d->hidden_act == SAC_ACT_RELU)
            acc[j] = acc[j] > 0 ? acc[j] : 0;
          else if (l < NL - 1 && d->hidden_act == SAC_ACT_TANH)
            acc[j] = tanh(acc[j]);
      }
    }
    const int nout = d->sizes[NL];
    for (int r = 0; r < B; r++)
      for (int j = 0; j < nout; j++)
        g[(size_t)r * nout + j] = dout[(size_t)r * K * nout + (size_t)k * nout + j];
    for (int l = NL - 1; l >= 0; l--) { /* g: the gradient at layer l's output */
      const int ni = d->sizes[l], no = d->sizes[l + 1];
      if (l < NL - 1)
        for (size_t e = 0; e < (size_t)B * no; e++) {
          double y = h[l + 1][e];
          g[e] *= d->hidden_act == SAC_ACT_RELU   ? (y > 0 ? 1.0 : 0.0)
                  : d->hidden_act == SAC_ACT_TANH ? 1 - y * y
                                                  : 1.0;
        }
      const double *W = params + sac_mlp_weight_offset(d, l) + (size_t)k * ni * no;
      double *dW = dparams + sac_mlp_weight_offset(d, l) + (size_t)k * ni * no;
      double *db = dparams + sac_mlp_bias_offset(d, l) + (size_t)k * no;
      for (int r = 0; r < B; r++) {
        const double *gr = g + (size_t)r * no;
        for (int j = 0; j < no; j++)
          db[j] += gr[j];
        for (int i = 0; i < ni; i++) {
          const double xi = h[l][(size_t)r * ni + i];
          for (int j = 0; j < no; j++)
            dW[(size_t)i * no + j] += xi * gr[j];
        }
      }
      if (l == 0 && !dx)
        break;
      for (int r = 0; r < B; r++)
        for (int i = 0; i < ni; i++) {
          double acc = 0;
          for (int j = 0; j < no; j++)
            acc += g[(size_t)r * no + j] * W[(size_t)i * no + j];
          gn[(size_t)r * ni + i] = acc;
        }
      if (l == 0)
        for (size_t e = 0; e < (size_t)B * ni; e++)
          dx[e] += gn[e];
      double *t = g;
      g = gn, gn = t;
    }
  }
  for (int l = 1; l <= NL; l++)
    free(h[l]);
  free(g), free(gn);
}

/* Backward of ref_head: dP (B, 2A) from da (B, A) and dlogp (B); the clamp passes no
 * gradient to log std outside [lsmin, lsmax]. d logp / du = 2 tanh(u). */
__attribute__((unused)) static void ref_head_bwd(const double *P, const double *eps, int B, int A,
                                                 double lsmin, double lsmax, const double *da,
                                                 const double *dlogp, double *dP) {
  for (int r = 0; r < B; r++)
    for (int i = 0; i < A; i++) {
      double mu = P[(size_t)r * 2 * A + i], raw = P[(size_t)r * 2 * A + A + i];
      double ls = raw < lsmin ? lsmin : (raw > lsmax ? lsmax : raw);
      double e = eps[(size_t)r * A + i], a = tanh(mu + exp(ls) * e);
      double du = da[(size_t)r * A + i] * (1 - a * a) + dlogp[r] * 2 * a;
      dP[(size_t)r * 2 * A + i] = du;
      dP[(size_t)r * 2 * A + A + i] = raw > lsmin && raw < lsmax ? du * exp(ls) * e - dlogp[r] : 0;
    }
}

/* The critic loss's gradient over the critics' parameters (dcritic, the critics' layout),
 * analytically; returns the loss (as ref_critic_loss). The target y is a constant. */
__attribute__((unused)) static double ref_critic_grad(const ref_sac_t *R, const double *actor,
                                                      const double *critic, const double *target,
                                                      double log_alpha, double *dcritic) {
  int B = R->B, O = R->O, A = R->A;
  double *P = malloc(sizeof(double) * B * 2 * A), *a2 = malloc(sizeof(double) * B * A);
  double *lp2 = malloc(sizeof(double) * B), *sa = malloc(sizeof(double) * B * (O + A));
  double *qt = malloc(sizeof(double) * B * 2), *q = malloc(sizeof(double) * B * 2);
  double *dq = malloc(sizeof(double) * B * 2);
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
    dq[2 * r] = w * (q[2 * r] - y) / B;
    dq[2 * r + 1] = w * (q[2 * r + 1] - y) / B;
  }
  ref_mlp_bwd(R->cd, critic, sa, B, dq, dcritic, NULL);
  free(P), free(a2), free(lp2), free(sa), free(qt), free(q), free(dq);
  return L / B;
}

/* The actor loss's gradient over the actor's parameters (dactor, the actor's layout) and
 * the alpha loss's over log alpha (*dlog_alpha), analytically; returns the actor loss
 * (as ref_actor_loss). */
__attribute__((unused)) static double ref_actor_grad(const ref_sac_t *R, const double *actor,
                                                     const double *critic, double log_alpha, double *dactor,
                                                     double *dlog_alpha) {
  int B = R->B, O = R->O, A = R->A;
  double *P = malloc(sizeof(double) * B * 2 * A), *a = malloc(sizeof(double) * B * A);
  double *lp = malloc(sizeof(double) * B), *sa = malloc(sizeof(double) * B * (O + A));
  double *q = malloc(sizeof(double) * B * 2), *dq = malloc(sizeof(double) * B * 2);
  double *dlp = malloc(sizeof(double) * B), *dsa = malloc(sizeof(double) * B * (O + A));
  double *da = malloc(sizeof(double) * B * A), *dP = malloc(sizeof(double) * B * 2 * A);
  double *dcrit = malloc(sizeof(double) * sac_mlp_param_count(R->cd));
  ref_mlp(R->ad, actor, R->obs, B, P);
  ref_head(P, R->eps_pi, B, A, R->lsmin, R->lsmax, a, lp);
  ref_concat(R->obs, O, a, A, B, sa);
  ref_mlp(R->cd, critic, sa, B, q);
  double L = 0, ml = 0, alpha = exp(log_alpha);
  for (int r = 0; r < B; r++) {
    int first = q[2 * r] <= q[2 * r + 1];
    L += alpha * lp[r] - (first ? q[2 * r] : q[2 * r + 1]);
    ml += lp[r];
    dq[2 * r] = first ? -1.0 / B : 0;
    dq[2 * r + 1] = first ? 0 : -1.0 / B;
    dlp[r] = alpha / B;
  }
  ref_mlp_bwd(R->cd, critic, sa, B, dq, dcrit, dsa);
  for (int r = 0; r < B; r++)
    memcpy(da + (size_t)r * A, dsa + (size_t)r * (O + A) + O, sizeof(double) * A);
  ref_head_bwd(P, R->eps_pi, B, A, R->lsmin, R->lsmax, da, dlp, dP);
  ref_mlp_bwd(R->ad, actor, R->obs, B, dP, dactor, NULL);
  *dlog_alpha = -(ml / B + R->target_entropy);
  free(P), free(a), free(lp), free(sa), free(q), free(dq), free(dlp), free(dsa), free(da), free(dP),
      free(dcrit);
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
