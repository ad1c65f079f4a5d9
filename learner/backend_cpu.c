/* The cpu backend: OpenBLAS sgemm for the layers and plain loops for everything else.
 * It is the readable reference the cuda backend is checked against, so the math here is
 * written for clarity first; the GEMMs carry almost all of the time.
 * "Backend memory" is 64-byte aligned host memory. Deterministic for a fixed thread
 * count: OpenBLAS sgemm does not split the reduction dimension across threads. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/philox.h"
#include "learner/backend.h"

typedef struct {
  int threads;
} cpu_impl_t;

static int cpu_alloc(sac_backend_t *be, size_t n, float **out) {
  (void)be;
  size_t bytes = ((n ? n : 1) * sizeof(float) + 63) & ~(size_t)63;
  float *p = aligned_alloc(64, bytes);
  if (!p)
    return SAC_ENOMEM;
  memset(p, 0, bytes);
  *out = p;
  return 0;
}

static void cpu_free(sac_backend_t *be, float *p) {
  (void)be;
  free(p);
}

static int cpu_copy(sac_backend_t *be, float *dst, const float *src, size_t n) {
  (void)be;
  memmove(dst, src, n * sizeof(float));
  return 0;
}

static int cpu_sync(sac_backend_t *be) {
  (void)be;
  return 0;
}

static void cpu_destroy(sac_backend_t *be) {
  free(be->impl);
  free(be);
}

/* The elementwise passes are memory-bound loops over (B, width); restrict lets the
 * compiler vectorise them, and target_clones picks AVX2 code where the CPU has it
 * without making the binary require it. */
#define SAC_VEC __attribute__((target_clones("avx2", "default")))

/* y = act(y + b) row by row over (B, width) */
SAC_VEC static void bias_act(float *restrict Y, int ldy, const float *restrict b, int B, int width,
                             sac_act_t act) {
  for (int r = 0; r < B; r++) {
    float *restrict y = Y + (size_t)r * ldy;
    if (act == SAC_ACT_RELU) {
      for (int j = 0; j < width; j++) {
        float v = y[j] + b[j];
        y[j] = v > 0.0f ? v : 0.0f;
      }
    } else if (act == SAC_ACT_TANH) {
      for (int j = 0; j < width; j++)
        y[j] = tanhf(y[j] + b[j]);
    } else {
      for (int j = 0; j < width; j++)
        y[j] += b[j];
    }
  }
}

/* d = d * act'(y) in place; db = column sums of the result when db is non-NULL */
SAC_VEC static void act_bwd_colsum(float *restrict dY, const float *restrict Y, int ldy, int B, int width,
                                   sac_act_t act, float *restrict db) {
  if (db)
    memset(db, 0, sizeof(float) * (size_t)width);
  for (int r = 0; r < B; r++) {
    float *restrict d = dY + (size_t)r * ldy;
    const float *restrict y = Y + (size_t)r * ldy;
    if (act == SAC_ACT_RELU)
      for (int j = 0; j < width; j++)
        d[j] = y[j] > 0.0f ? d[j] : 0.0f;
    else if (act == SAC_ACT_TANH)
      for (int j = 0; j < width; j++)
        d[j] *= 1.0f - y[j] * y[j];
    if (db)
      for (int j = 0; j < width; j++)
        db[j] += d[j];
  }
}

/* Y_k = act(X_k W_k + b_k) */
static void cpu_linear_fwd(sac_backend_t *be, const sac_linear_t *L, float *Y, int ldy) {
  (void)be;
  const size_t wsz = (size_t)L->n_in * L->n_out;
  for (int k = 0; k < L->K; k++) {
    const float *Wk = L->W + k * wsz;
    float *Yk = Y + (size_t)k * L->n_out;
    if (L->shared) {
      int row = 0;
      for (int s = 0; s < L->n_seg; s++) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, L->B, L->n_out, L->seg[s].n, 1.0f, L->seg[s].p,
                    L->seg[s].ld, Wk + (size_t)row * L->n_out, L->n_out, s == 0 ? 0.0f : 1.0f, Yk, ldy);
        row += L->seg[s].n;
      }
    } else {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, L->B, L->n_out, L->n_in, 1.0f,
                  L->seg[0].p + (size_t)k * L->n_in, L->seg[0].ld, Wk, L->n_out, 0.0f, Yk, ldy);
    }
  }
  bias_act(Y, ldy, L->b, L->B, L->K * L->n_out, L->act);
}

static void cpu_linear_bwd(sac_backend_t *be, const sac_linear_t *L, float *dY, const float *Y, int ldy,
                           float *dW, float *db, float *dX[2], const int ldx[2]) {
  (void)be;
  act_bwd_colsum(dY, Y, ldy, L->B, L->K * L->n_out, L->act, db);
  const size_t wsz = (size_t)L->n_in * L->n_out;
  for (int k = 0; k < L->K; k++) {
    const float *dYk = dY + (size_t)k * L->n_out;
    const float *Wk = L->W + k * wsz;
    if (L->shared) {
      int row = 0;
      for (int s = 0; s < L->n_seg; s++) {
        int n = L->seg[s].n;
        if (dW)
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, L->n_out, L->B, 1.0f, L->seg[s].p,
                      L->seg[s].ld, dYk, ldy, 0.0f, dW + k * wsz + (size_t)row * L->n_out, L->n_out);
        if (dX && dX[s])
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, L->B, n, L->n_out, 1.0f, dYk, ldy,
                      Wk + (size_t)row * L->n_out, L->n_out, k == 0 ? 0.0f : 1.0f, dX[s], ldx[s]);
        row += n;
      }
    } else {
      if (dW)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, L->n_in, L->n_out, L->B, 1.0f,
                    L->seg[0].p + (size_t)k * L->n_in, L->seg[0].ld, dYk, ldy, 0.0f, dW + k * wsz, L->n_out);
      if (dX && dX[0])
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, L->B, L->n_in, L->n_out, 1.0f, dYk, ldy, Wk,
                    L->n_out, 0.0f, dX[0] + (size_t)k * L->n_in, ldx[0]);
    }
  }
}

static void cpu_normal(sac_backend_t *be, float *out, size_t n, const uint32_t key[2], uint64_t stream,
                       uint32_t tag) {
  (void)be;
  for (size_t i = 0; i < n; i += 2) {
    float z0, z1;
    sac_philox_normal2(key, (uint32_t)(i / 2), stream, tag, &z0, &z1);
    out[i] = z0;
    if (i + 1 < n)
      out[i + 1] = z1;
  }
}

static inline float softplusf(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

#define HALF_LOG_2PI 0.91893853320467274178f
#define LOG2F_ 0.69314718055994530942f

static inline float clampf(float x, float lo, float hi) { return x < lo ? lo : (x > hi ? hi : x); }

static void cpu_head_fwd(sac_backend_t *be, const sac_head_hp_t *h, const float *P, const float *eps,
                         float *a, int lda, float *logp) {
  (void)be;
  const int A = h->A;
  for (int r = 0; r < h->B; r++) {
    const float *mu = P + (size_t)r * 2 * A, *ls_raw = mu + A;
    const float *e = eps + (size_t)r * A;
    float lp = 0.0f;
    for (int i = 0; i < A; i++) {
      float ls = clampf(ls_raw[i], h->log_std_min, h->log_std_max);
      float u = mu[i] + expf(ls) * e[i];
      a[(size_t)r * lda + i] = tanhf(u);
      lp += -0.5f * e[i] * e[i] - ls - HALF_LOG_2PI - 2.0f * (LOG2F_ - u - softplusf(-2.0f * u));
    }
    logp[r] = lp;
  }
}

static void cpu_head_bwd(sac_backend_t *be, const sac_head_hp_t *h, const float *P, const float *eps,
                         const float *a, int lda, const float *da, int ldda, const float *dlogp, float *dP) {
  (void)be;
  const int A = h->A;
  for (int r = 0; r < h->B; r++) {
    const float *ls_raw = P + (size_t)r * 2 * A + A;
    const float *e = eps + (size_t)r * A;
    float *dmu = dP + (size_t)r * 2 * A, *dls = dmu + A;
    for (int i = 0; i < A; i++) {
      float ai = a[(size_t)r * lda + i];
      float g = da ? da[(size_t)r * ldda + i] : 0.0f;
      /* d logp / du = 2 tanh(u) (from the stable tanh correction) */
      float du = g * (1.0f - ai * ai) + dlogp[r] * 2.0f * ai;
      dmu[i] = du;
      float raw = ls_raw[i];
      int inside = raw > h->log_std_min && raw < h->log_std_max;
      float ls = clampf(raw, h->log_std_min, h->log_std_max);
      dls[i] = inside ? du * expf(ls) * e[i] - dlogp[r] : 0.0f;
    }
  }
}

static void cpu_critic_target(sac_backend_t *be, const sac_head_hp_t *h, const float *r, const float *term,
                              const float *qt, const float *logp_next, float *y) {
  (void)be;
  const float alpha = expf(*h->log_alpha);
  for (int i = 0; i < h->B; i++) {
    float qmin = fminf(qt[2 * i], qt[2 * i + 1]);
    y[i] = r[i] + h->gamma * (1.0f - term[i]) * (qmin - alpha * logp_next[i]);
  }
}

static void cpu_critic_loss(sac_backend_t *be, const sac_head_hp_t *h, const float *q, const float *y,
                            const float *w, float *dq, float *td, float *stats) {
  (void)be;
  const float invB = 1.0f / (float)h->B;
  double loss = 0.0, qsum = 0.0;
  for (int i = 0; i < h->B; i++) {
    float wi = w ? w[i] : 1.0f;
    float d1 = q[2 * i] - y[i], d2 = q[2 * i + 1] - y[i];
    loss += 0.5 * wi * ((double)d1 * d1 + (double)d2 * d2);
    dq[2 * i] = wi * d1 * invB;
    dq[2 * i + 1] = wi * d2 * invB;
    td[i] = fabsf(fminf(q[2 * i], q[2 * i + 1]) - y[i]);
    qsum += q[2 * i];
  }
  stats[0] = (float)(loss / h->B);
  stats[1] = (float)(qsum / h->B);
}

static void cpu_actor_loss(sac_backend_t *be, const sac_head_hp_t *h, const float *q, const float *logp,
                           float *dq, float *dlogp, float *stats) {
  (void)be;
  const float alpha = expf(*h->log_alpha), invB = 1.0f / (float)h->B;
  double loss = 0.0, ent = 0.0;
  for (int i = 0; i < h->B; i++) {
    int first = q[2 * i] <= q[2 * i + 1];
    float qmin = first ? q[2 * i] : q[2 * i + 1];
    loss += (double)alpha * logp[i] - qmin;
    ent -= logp[i];
    dq[2 * i] = first ? -invB : 0.0f;
    dq[2 * i + 1] = first ? 0.0f : -invB;
    dlogp[i] = alpha * invB;
  }
  stats[0] = (float)(loss / h->B);
  stats[1] = (float)(ent / h->B);
}

static void cpu_alpha_loss(sac_backend_t *be, const sac_head_hp_t *h, const float *logp, float *grad,
                           float *stats) {
  (void)be;
  double s = 0.0;
  for (int i = 0; i < h->B; i++)
    s += (double)logp[i] + h->target_entropy;
  float mean = (float)(s / h->B);
  grad[0] = -mean;
  stats[0] = -*h->log_alpha * mean;
}

SAC_VEC static void adam_loop(float *restrict p, const float *restrict g, float *restrict m,
                              float *restrict v, size_t n, float b1, float b2, float step, float sqrt_bc2,
                              float eps) {
  for (size_t i = 0; i < n; i++) {
    float mi = b1 * m[i] + (1.0f - b1) * g[i];
    float vi = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
    m[i] = mi;
    v[i] = vi;
    p[i] -= step * mi / (sqrtf(vi) / sqrt_bc2 + eps);
  }
}

static void cpu_adam(sac_backend_t *be, float *p, const float *g, float *m, float *v, size_t n,
                     const sac_adam_hp_t *hp, float *t) {
  (void)be;
  *t += 1.0f;
  const float b1 = hp->beta1, b2 = hp->beta2;
  const float bc1 = 1.0f - powf(b1, *t), bc2 = 1.0f - powf(b2, *t);
  adam_loop(p, g, m, v, n, b1, b2, hp->lr / bc1, sqrtf(bc2), hp->eps);
}

SAC_VEC static void polyak_loop(float *restrict tgt, const float *restrict src, size_t n, float tau) {
  const float keep = 1.0f - tau;
  for (size_t i = 0; i < n; i++)
    tgt[i] = keep * tgt[i] + tau * src[i];
}

static void cpu_polyak(sac_backend_t *be, float *tgt, const float *src, size_t n, float tau) {
  (void)be;
  polyak_loop(tgt, src, n, tau);
}

static const sac_backend_ops_t k_cpu_ops = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .sync = cpu_sync,
    .destroy = cpu_destroy,
    .linear_fwd = cpu_linear_fwd,
    .linear_bwd = cpu_linear_bwd,
    .normal = cpu_normal,
    .head_fwd = cpu_head_fwd,
    .head_bwd = cpu_head_bwd,
    .critic_target = cpu_critic_target,
    .critic_loss = cpu_critic_loss,
    .actor_loss = cpu_actor_loss,
    .alpha_loss = cpu_alpha_loss,
    .adam = cpu_adam,
    .polyak = cpu_polyak,
};

int sac_backend_cpu_new(int threads, sac_backend_t **out) {
  *out = NULL;
  sac_backend_t *be = calloc(1, sizeof *be);
  cpu_impl_t *impl = calloc(1, sizeof *impl);
  if (!be || !impl) {
    free(be);
    free(impl);
    return SAC_ENOMEM;
  }
  if (threads > 0)
    openblas_set_num_threads(threads);
  impl->threads = openblas_get_num_threads();
  be->ops = &k_cpu_ops;
  be->impl = impl;
  *out = be;
  return 0;
}
