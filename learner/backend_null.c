/* The null backend (--backend null): a measuring tool, not a learner. It has the
 * interface and the buffers of the real backends and does none of their math, so a
 * learner on it runs as fast as the service around the update allows (sampling,
 * decoding, staging, priorities, publishing): the service ceiling that
 * sac-bench-service reports (docs/LEARNER.md, docs/SCALING.md).
 *
 * What it does do, so that nothing the service moves is elided and what it sends back
 * has the real sizes:
 *   - memory is host memory, 256-byte aligned and zeroed, as the cpu backend's;
 *   - every staged (and uploaded) float is copied to its destination and added into a
 *     checksum of its bits, so the batch is read once, as a copy to a device would;
 *     a batch staged in place (stage_at: the replay client copies each reply straight
 *     into the batch buffers) was read once by that copy, and is counted, not summed;
 *   - critic_target is the real formula (y = r + gamma (1 - term) (min qt - alpha
 *     logp')), and critic_loss writes td = |min(q1, q2) - y| + NULL_TD_FLOOR: with the
 *     networks' outputs left at zero that is |r| plus a floor, so prioritised replay
 *     gets finite, positive priorities of the right size that follow the rewards;
 *   - the Adam ops count their step; parameters are never changed, so the actor's
 *     weights stay the initialised ones (finite, the real size) and every loss is a
 *     finite number (the critic loss from the formula, the others 0).
 * Every other op returns at once. Deterministic; one thread. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "learner/backend.h"

/* Added to every TD error, so no priority is 0 where a reward is. */
#define NULL_TD_FLOOR 1e-3f

typedef struct {
  uint64_t checksum;      /* sum of the 32-bit words of every staged or uploaded float */
  uint64_t staged_floats; /* floats staged (the learner's batches) */
  uint64_t uploaded_floats;
  uint64_t commits; /* stage_commit calls: batches the updates read */
  uint64_t critic_losses;
} null_impl_t;

static null_impl_t *impl_of(sac_backend_t *be) { return be->impl; }

/* dst = src over n floats, returning the sum of src's 32-bit words: one pass that reads
 * every byte (the compiler vectorises it; it runs at about memcpy's speed). */
static uint64_t copy_sum(float *restrict dst, const float *restrict src, size_t n) {
  uint32_t *restrict d = (uint32_t *)dst;
  const uint32_t *restrict s = (const uint32_t *)src;
  uint64_t acc = 0;
  for (size_t i = 0; i < n; i++) {
    d[i] = s[i];
    acc += s[i];
  }
  return acc;
}

static int null_upload(sac_backend_t *be, float *dst, const float *src, size_t n) {
  null_impl_t *im = impl_of(be);
  if (dst == src)
    return 0;
  im->checksum += copy_sum(dst, src, n);
  im->uploaded_floats += n;
  return 0;
}

static int null_download(sac_backend_t *be, float *dst, const float *src, size_t n) {
  (void)be;
  memmove(dst, src, n * sizeof(float));
  return 0;
}

static int null_stage(sac_backend_t *be, float *dst, const float *src, size_t n) {
  null_impl_t *im = impl_of(be);
  im->checksum += copy_sum(dst, src, n);
  im->staged_floats += n;
  return 0;
}

static float *null_stage_at(sac_backend_t *be, float *dst, size_t n) {
  impl_of(be)->staged_floats += n;
  return dst;
}

static int null_stage_commit(sac_backend_t *be) {
  impl_of(be)->commits++;
  return 0;
}

static int null_sync(sac_backend_t *be) {
  (void)be;
  return 0;
}

static void null_destroy(sac_backend_t *be) {
  free(be->impl);
  free(be);
}

/* ---- the ops that do nothing ---- */
static void null_linear_fwd(sac_backend_t *be, const sac_linear_t *L, float *Y, int ldy) {
  (void)be, (void)L, (void)Y, (void)ldy;
}
static void null_linear_bwd(sac_backend_t *be, const sac_linear_t *L, float *dY, const float *Y, int ldy,
                            float *dW, float *db, float *dX[2], const int ldx[2]) {
  (void)be, (void)L, (void)dY, (void)Y, (void)ldy, (void)dW, (void)db, (void)dX, (void)ldx;
}
static void null_normal(sac_backend_t *be, float *out, size_t n, const uint32_t key[2], uint64_t stream,
                        uint32_t tag) {
  (void)be, (void)out, (void)n, (void)key, (void)stream, (void)tag;
}
static void null_head_fwd(sac_backend_t *be, const sac_head_hp_t *h, const float *P, const float *eps,
                          float *a, int lda, float *logp) {
  (void)be, (void)h, (void)P, (void)eps, (void)a, (void)lda, (void)logp;
}
static void null_head_bwd(sac_backend_t *be, const sac_head_hp_t *h, const float *P, const float *eps,
                          const float *a, int lda, const float *da, int ldda, const float *dlogp, float *dP) {
  (void)be, (void)h, (void)P, (void)eps, (void)a, (void)lda, (void)da, (void)ldda, (void)dlogp, (void)dP;
}
static void null_actor_loss(sac_backend_t *be, const sac_head_hp_t *h, const float *q, const float *logp,
                            float *dq, float *dlogp, float *stats) {
  (void)be, (void)h, (void)q, (void)logp, (void)dq, (void)dlogp, (void)stats;
}
static void null_alpha_loss(sac_backend_t *be, const sac_head_hp_t *h, const float *logp, float *grad,
                            float *stats) {
  (void)be, (void)h, (void)logp, (void)grad, (void)stats;
}
static void null_polyak(sac_backend_t *be, float *tgt, const float *src, size_t n, float tau) {
  (void)be, (void)tgt, (void)src, (void)n, (void)tau;
}

/* ---- the ops that give the service something real ---- */
static void null_critic_target(sac_backend_t *be, const sac_head_hp_t *h, const float *r, const float *term,
                               const float *qt, const float *logp_next, float *y) {
  (void)be;
  const float alpha = expf(*h->log_alpha);
  for (int i = 0; i < h->B; i++) {
    float qmin = fminf(qt[2 * i], qt[2 * i + 1]);
    y[i] = r[i] + h->gamma * (1.0f - term[i]) * (qmin - alpha * logp_next[i]);
  }
}

static void null_critic_loss(sac_backend_t *be, const sac_head_hp_t *h, const float *q, const float *y,
                             const float *w, float *dq, float *td, float *stats) {
  (void)dq;
  double loss = 0.0, qsum = 0.0;
  for (int i = 0; i < h->B; i++) {
    float wi = w ? w[i] : 1.0f;
    float d1 = q[2 * i] - y[i], d2 = q[2 * i + 1] - y[i];
    loss += 0.5 * wi * ((double)d1 * d1 + (double)d2 * d2);
    td[i] = fabsf(fminf(q[2 * i], q[2 * i + 1]) - y[i]) + NULL_TD_FLOOR;
    qsum += q[2 * i];
  }
  stats[0] = (float)(loss / h->B);
  stats[1] = (float)(qsum / h->B);
  impl_of(be)->critic_losses++;
}

static void null_adam(sac_backend_t *be, float *p, const float *g, float *m, float *v, size_t n,
                      const sac_adam_hp_t *hp, float *t) {
  (void)be, (void)p, (void)g, (void)m, (void)v, (void)n, (void)hp;
  *t += 1.0f;
}

static int null_get_metric(sac_backend_t *be, const char *key, double *out) {
  const null_impl_t *im = impl_of(be);
  if (strcmp(key, "staged_bytes") == 0)
    *out = (double)im->staged_floats * sizeof(float);
  else if (strcmp(key, "uploaded_bytes") == 0)
    *out = (double)im->uploaded_floats * sizeof(float);
  else if (strcmp(key, "staged_batches") == 0)
    *out = (double)im->commits;
  else if (strcmp(key, "critic_losses") == 0)
    *out = (double)im->critic_losses;
  else if (strcmp(key, "checksum") == 0) /* low 52 bits: exact in a double */
    *out = (double)(im->checksum & ((UINT64_C(1) << 52) - 1));
  else
    return SAC_ENOTFOUND;
  return 0;
}

static const sac_backend_ops_t k_null_ops = {
    .name = "null",
    .alloc = sac_backend_host_alloc, /* the cpu backend's: host memory, 256-byte aligned */
    .free = sac_backend_host_free,
    .upload = null_upload,
    .download = null_download,
    .sync = null_sync,
    .destroy = null_destroy,
    .linear_fwd = null_linear_fwd,
    .linear_bwd = null_linear_bwd,
    .normal = null_normal,
    .head_fwd = null_head_fwd,
    .head_bwd = null_head_bwd,
    .critic_target = null_critic_target,
    .critic_loss = null_critic_loss,
    .actor_loss = null_actor_loss,
    .alpha_loss = null_alpha_loss,
    .adam = null_adam,
    .polyak = null_polyak,
    .stage = null_stage,
    .stage_commit = null_stage_commit,
    .stage_at = null_stage_at,
    .get_metric = null_get_metric,
};

int sac_backend_null_new(sac_backend_t **out) {
  *out = NULL;
  sac_backend_t *be = calloc(1, sizeof *be);
  null_impl_t *impl = calloc(1, sizeof *impl);
  if (!be || !impl) {
    free(be);
    free(impl);
    return SAC_ENOMEM;
  }
  be->ops = &k_null_ops;
  be->impl = impl;
  *out = be;
  return 0;
}
