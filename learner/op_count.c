/* Counting the backend ops of one SAC update (issue 16: "kernels per update" where no GPU
 * is at hand). A proxy backend forwards every op to the real one and counts the compute
 * ops; graph capture is hidden from sac.c behind it, so the update runs eagerly and every
 * op is seen. sac-bench-learner prints the counts; on the cuda backend each op is one
 * kernel or one cuBLASLt matmul except where docs/CUDA.md says otherwise (linear_bwd,
 * fp16 Adam), and the cuda backend's own "kernel_launches" metric gives the exact
 * number on a GPU. */
#include "learner/op_count.h"

#include <string.h>

#include "common/error.h"

typedef struct {
  sac_backend_t base; /* first: the ops receive &base */
  sac_backend_t *real;
  int64_t count;
} proxy_t;

#define P(be) ((proxy_t *)(be))
#define R(be) (P(be)->real)
#define FWD(be, op, ...) (P(be)->count++, R(be)->ops->op(R(be), __VA_ARGS__))

static int px_alloc(sac_backend_t *be, size_t n, float **out) { return R(be)->ops->alloc(R(be), n, out); }
static void px_free(sac_backend_t *be, float *p) { R(be)->ops->free(R(be), p); }
static int px_upload(sac_backend_t *be, float *d, const float *s, size_t n) {
  return R(be)->ops->upload(R(be), d, s, n);
}
static int px_download(sac_backend_t *be, float *d, const float *s, size_t n) {
  return R(be)->ops->download(R(be), d, s, n);
}
static int px_sync(sac_backend_t *be) { return R(be)->ops->sync(R(be)); }
static void px_destroy(sac_backend_t *be) { (void)be; }
static void px_linear_fwd(sac_backend_t *be, const sac_linear_t *L, float *Y, int ldy) {
  FWD(be, linear_fwd, L, Y, ldy);
}
static void px_linear_bwd(sac_backend_t *be, const sac_linear_t *L, float *dY, const float *Y, int ldy,
                          float *dW, float *db, float *dX[2], const int ldx[2]) {
  FWD(be, linear_bwd, L, dY, Y, ldy, dW, db, dX, ldx);
}
static void px_normal(sac_backend_t *be, float *out, size_t n, const uint32_t key[2], uint64_t stream,
                      uint32_t tag) {
  FWD(be, normal, out, n, key, stream, tag);
}
static void px_head_fwd(sac_backend_t *be, const sac_head_hp_t *h, const float *P, const float *eps, float *a,
                        int lda, float *logp) {
  FWD(be, head_fwd, h, P, eps, a, lda, logp);
}
static void px_head_bwd(sac_backend_t *be, const sac_head_hp_t *h, const float *P, const float *eps,
                        const float *a, int lda, const float *da, int ldda, const float *dlogp, float *dP) {
  FWD(be, head_bwd, h, P, eps, a, lda, da, ldda, dlogp, dP);
}
static void px_critic_target(sac_backend_t *be, const sac_head_hp_t *h, const float *r, const float *term,
                             const float *qt, const float *logp_next, float *y) {
  FWD(be, critic_target, h, r, term, qt, logp_next, y);
}
static void px_critic_loss(sac_backend_t *be, const sac_head_hp_t *h, const float *q, const float *y,
                           const float *w, float *dq, float *td, float *stats) {
  FWD(be, critic_loss, h, q, y, w, dq, td, stats);
}
static void px_actor_loss(sac_backend_t *be, const sac_head_hp_t *h, const float *q, const float *logp,
                          float *dq, float *dlogp, float *stats) {
  FWD(be, actor_loss, h, q, logp, dq, dlogp, stats);
}
static void px_alpha_loss(sac_backend_t *be, const sac_head_hp_t *h, const float *logp, float *grad,
                          float *stats) {
  FWD(be, alpha_loss, h, logp, grad, stats);
}
static void px_adam(sac_backend_t *be, float *p, const float *g, float *m, float *v, size_t n,
                    const sac_adam_hp_t *hp, float *t) {
  FWD(be, adam, p, g, m, v, n, hp, t);
}
static void px_polyak(sac_backend_t *be, float *tgt, const float *src, size_t n, float tau) {
  FWD(be, polyak, tgt, src, n, tau);
}
static void px_adam_polyak(sac_backend_t *be, const sac_adam_group_t *g, int n_groups, float *tgt,
                           const float *src, size_t n_polyak, float tau, const float *guard,
                           unsigned guard_mask) {
  FWD(be, adam_polyak, g, n_groups, tgt, src, n_polyak, tau, guard, guard_mask);
}
static void px_actor_alpha_loss(sac_backend_t *be, const sac_head_hp_t *h, const float *q, const float *logp,
                                float *dq, float *dlogp, float *stats_pi, float *grad_alpha,
                                float *stats_alpha) {
  FWD(be, actor_alpha_loss, h, q, logp, dq, dlogp, stats_pi, grad_alpha, stats_alpha);
}
static void px_normal2(sac_backend_t *be, float *out, size_t n, const uint32_t key[2], uint64_t stream,
                       uint32_t tag0, uint32_t tag1) {
  FWD(be, normal2, out, n, key, stream, tag0, tag1);
}
static void px_q_head(sac_backend_t *be, const sac_linear_t *L, float *q, const sac_head_hp_t *h,
                      const sac_q_head_t *a) {
  FWD(be, q_head, L, q, h, a);
}
static void px_policy_fwd(sac_backend_t *be, const sac_linear_t *L, float *P, const sac_head_hp_t *h,
                          const sac_policy_fwd_t *a) {
  FWD(be, policy_fwd, L, P, h, a);
}
static void px_linear_bwd_act(sac_backend_t *be, const sac_linear_t *L, float *dY, const float *Y, int ldy,
                              float *dW, float *db, float *dX, int ldx, const sac_below_t *below) {
  FWD(be, linear_bwd_act, L, dY, Y, ldy, dW, db, dX, ldx, below);
}
static void px_policy_bwd(sac_backend_t *be, const sac_head_hp_t *h, const float *P, const float *eps,
                          const float *a, int lda, const float *da, int ldda, const float *dlogp, float *dP,
                          const sac_linear_t *L, float *dW, float *db, float *dX, int ldx,
                          const sac_below_t *below) {
  FWD(be, policy_bwd, h, P, eps, a, lda, da, ldda, dlogp, dP, L, dW, db, dX, ldx, below);
}
static void px_update_end(sac_backend_t *be) {
  P(be)->count++;
  R(be)->ops->update_end(R(be));
}

int sac_count_update_ops(sac_t *s, sac_backend_t *real, int unfused, int64_t counts[2]) {
  sac_backend_ops_t ops;
  memset(&ops, 0, sizeof ops);
  const sac_backend_ops_t *r = real->ops;
  ops.name = r->name;
  ops.alloc = px_alloc, ops.free = px_free, ops.upload = px_upload, ops.download = px_download;
  ops.sync = px_sync, ops.destroy = px_destroy;
  ops.linear_fwd = px_linear_fwd, ops.linear_bwd = px_linear_bwd, ops.normal = px_normal;
  ops.head_fwd = px_head_fwd, ops.head_bwd = px_head_bwd, ops.critic_target = px_critic_target;
  ops.critic_loss = px_critic_loss, ops.actor_loss = px_actor_loss, ops.alpha_loss = px_alpha_loss;
  ops.adam = px_adam, ops.polyak = px_polyak;
  ops.adam_polyak = r->adam_polyak ? px_adam_polyak : NULL;
  ops.actor_alpha_loss = r->actor_alpha_loss ? px_actor_alpha_loss : NULL;
  ops.normal2 = r->normal2 ? px_normal2 : NULL;
  ops.q_head = r->q_head ? px_q_head : NULL;
  ops.policy_fwd = r->policy_fwd ? px_policy_fwd : NULL;
  ops.linear_bwd_act = r->linear_bwd_act ? px_linear_bwd_act : NULL;
  ops.policy_bwd = r->policy_bwd ? px_policy_bwd : NULL;
  ops.update_end = r->update_end ? px_update_end : NULL;
  proxy_t px = {{&ops, real->impl}, real, 0};
  int rc = sac_swap_backend(s, &px.base);
  if (rc)
    return rc;
  sac_set_unfused(s, unfused);
  const int delay = sac_hparams(s)->policy_delay;
  for (int k = 0; k < 2 && rc == 0; k++) {
    /* counts[0]: an update that steps the actor too; counts[1]: critic only (policy_delay > 1) */
    while (rc == 0 && (int)(sac_step(s) % (uint64_t)delay == 0) != (k == 0)) {
      if (delay == 1)
        break;
      rc = sac_update(s);
    }
    if (k == 1 && delay == 1) {
      counts[1] = counts[0];
      break;
    }
    px.count = 0;
    if (rc == 0)
      rc = sac_update(s);
    counts[k] = px.count;
  }
  sac_set_unfused(s, 0);
  int rc2 = sac_swap_backend(s, real);
  return rc ? rc : rc2;
}
