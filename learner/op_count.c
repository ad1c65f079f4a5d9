/* Counting the backend ops of one SAC update (issue 16: "kernels per update" where no GPU
 * is at hand). A proxy backend forwards every op to the real one and counts the compute
 * ops; graph capture is hidden from sac.c behind it, so the update runs eagerly and every
 * op is seen. sac-bench-learner prints the counts; on the cuda backend each op is one
 * kernel or one cuBLASLt matmul except where docs/CUDA.md says otherwise (linear_bwd,
 * fp16 Adam), and the cuda backend's own "kernel_launches" metric gives the exact
 * number on a GPU. */
#include "learner/op_count.h"

#include <stdio.h>
#include <string.h>

#include "common/error.h"

/* The proxy: every compute op counted; with timing on, each op between two marks of the
 * real backend (timing_mark), its row (an op name and its shape) noted, so the marks can
 * be charged to the rows once the update has run. */
#define MAX_CALLS (SAC_BACKEND_MAX_MARKS / 2 - 1)
typedef struct {
  sac_backend_t base; /* first: the ops receive &base */
  sac_backend_t *real;
  int64_t count;
  int timing, mark, n_calls, overflow;
  short row_of[MAX_CALLS]; /* call i: its row, between marks 2i + 1 and 2i + 2 */
  sac_op_profile_t *prof;
} proxy_t;

#define P(be) ((proxy_t *)(be))
#define R(be) (P(be)->real)

/* The row named by op and (where L) the layer's shape: "linear_fwd 256->256 x2 B256". */
static int row_for(proxy_t *p, const char *op, const sac_linear_t *L, const char *what) {
  char name[SAC_OP_NAME_MAX];
  if (L)
    snprintf(name, sizeof name, "%s %d->%d%s B%d%s%s", op, L->n_in, L->n_out, L->K > 1 ? " x2" : "", L->B,
             what ? " " : "", what ? what : "");
  else
    snprintf(name, sizeof name, "%s%s%s", op, what ? " " : "", what ? what : "");
  sac_op_profile_t *pr = p->prof;
  for (int r = 0; r < pr->n_rows; r++)
    if (strcmp(pr->row[r].name, name) == 0)
      return r;
  if (pr->n_rows == SAC_OP_PROFILE_ROWS)
    return SAC_OP_PROFILE_ROWS - 1; /* the last row takes the rest (never at SAC's op count) */
  snprintf(pr->row[pr->n_rows].name, sizeof pr->row[0].name, "%s", name);
  return pr->n_rows++;
}

static void before(sac_backend_t *be, const char *op, const sac_linear_t *L, const char *what) {
  proxy_t *p = P(be);
  p->count++;
  if (!p->timing)
    return;
  if (p->n_calls == MAX_CALLS) {
    p->overflow = 1;
    return;
  }
  p->row_of[p->n_calls++] = (short)row_for(p, op, L, what);
  R(be)->ops->timing_mark(R(be), p->mark++);
}

static void after(sac_backend_t *be) {
  proxy_t *p = P(be);
  if (p->timing && !p->overflow)
    R(be)->ops->timing_mark(R(be), p->mark++);
}

#define FWD(be, op, L, what, ...)                                                                            \
  do {                                                                                                       \
    before(be, #op, L, what);                                                                                \
    R(be)->ops->op(R(be), __VA_ARGS__);                                                                      \
    after(be);                                                                                               \
  } while (0)

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
  FWD(be, linear_fwd, L, NULL, L, Y, ldy);
}
static void px_linear_bwd(sac_backend_t *be, const sac_linear_t *L, float *dY, const float *Y, int ldy,
                          float *dW, float *db, float *dX[2], const int ldx[2]) {
  FWD(be, linear_bwd, L, dW ? NULL : "(dX only)", L, dY, Y, ldy, dW, db, dX, ldx);
}
static void px_normal(sac_backend_t *be, float *out, size_t n, const uint32_t key[2], uint64_t stream,
                      uint32_t tag) {
  FWD(be, normal, NULL, NULL, out, n, key, stream, tag);
}
static void px_head_fwd(sac_backend_t *be, const sac_head_hp_t *h, const float *P, const float *eps, float *a,
                        int lda, float *logp) {
  FWD(be, head_fwd, NULL, NULL, h, P, eps, a, lda, logp);
}
static void px_head_bwd(sac_backend_t *be, const sac_head_hp_t *h, const float *P, const float *eps,
                        const float *a, int lda, const float *da, int ldda, const float *dlogp, float *dP) {
  FWD(be, head_bwd, NULL, NULL, h, P, eps, a, lda, da, ldda, dlogp, dP);
}
static void px_critic_target(sac_backend_t *be, const sac_head_hp_t *h, const float *r, const float *term,
                             const float *qt, const float *logp_next, float *y) {
  FWD(be, critic_target, NULL, NULL, h, r, term, qt, logp_next, y);
}
static void px_critic_loss(sac_backend_t *be, const sac_head_hp_t *h, const float *q, const float *y,
                           const float *w, float *dq, float *td, float *stats) {
  FWD(be, critic_loss, NULL, NULL, h, q, y, w, dq, td, stats);
}
static void px_actor_loss(sac_backend_t *be, const sac_head_hp_t *h, const float *q, const float *logp,
                          float *dq, float *dlogp, float *stats) {
  FWD(be, actor_loss, NULL, NULL, h, q, logp, dq, dlogp, stats);
}
static void px_alpha_loss(sac_backend_t *be, const sac_head_hp_t *h, const float *logp, float *grad,
                          float *stats) {
  FWD(be, alpha_loss, NULL, NULL, h, logp, grad, stats);
}
static void px_adam(sac_backend_t *be, float *p, const float *g, float *m, float *v, size_t n,
                    const sac_adam_hp_t *hp, float *t) {
  FWD(be, adam, NULL, NULL, p, g, m, v, n, hp, t);
}
static void px_polyak(sac_backend_t *be, float *tgt, const float *src, size_t n, float tau) {
  FWD(be, polyak, NULL, NULL, tgt, src, n, tau);
}
static void px_adam_polyak(sac_backend_t *be, const sac_adam_group_t *g, int n_groups, float *tgt,
                           const float *src, size_t n_polyak, float tau, const float *guard,
                           unsigned guard_mask) {
  FWD(be, adam_polyak, NULL,
      n_polyak ? (n_groups > 1 ? "(actor, alpha, Polyak)" : "(critics, Polyak)")
               : (n_groups > 1 ? "(actor, alpha)" : "(critics)"),
      g, n_groups, tgt, src, n_polyak, tau, guard, guard_mask);
}
static void px_actor_alpha_loss(sac_backend_t *be, const sac_head_hp_t *h, const float *q, const float *logp,
                                float *dq, float *dlogp, float *stats_pi, float *grad_alpha,
                                float *stats_alpha) {
  FWD(be, actor_alpha_loss, NULL, NULL, h, q, logp, dq, dlogp, stats_pi, grad_alpha, stats_alpha);
}
static void px_normal2(sac_backend_t *be, float *out, size_t n, const uint32_t key[2], uint64_t stream,
                       uint32_t tag0, uint32_t tag1) {
  FWD(be, normal2, NULL, NULL, out, n, key, stream, tag0, tag1);
}
static void px_q_head(sac_backend_t *be, const sac_linear_t *L, float *q, const sac_head_hp_t *h,
                      const sac_q_head_t *a) {
  static const char *const then[3] = {"(target)", "(critic loss)", "(actor and alpha losses)"};
  FWD(be, q_head, L, then[a->then < 0 || a->then > 2 ? 0 : a->then], L, q, h, a);
}
static void px_policy_fwd(sac_backend_t *be, const sac_linear_t *L, float *P, const sac_head_hp_t *h,
                          const sac_policy_fwd_t *a) {
  FWD(be, policy_fwd, L, NULL, L, P, h, a);
}
static void px_linear_bwd_act(sac_backend_t *be, const sac_linear_t *L, float *dY, const float *Y, int ldy,
                              float *dW, float *db, float *dX, int ldx, const sac_below_t *below) {
  FWD(be, linear_bwd_act, L, dW ? NULL : "(dX only)", L, dY, Y, ldy, dW, db, dX, ldx, below);
}
static void px_policy_bwd(sac_backend_t *be, const sac_head_hp_t *h, const float *P, const float *eps,
                          const float *a, int lda, const float *da, int ldda, const float *dlogp, float *dP,
                          const sac_linear_t *L, float *dW, float *db, float *dX, int ldx,
                          const sac_below_t *below) {
  FWD(be, policy_bwd, L, NULL, h, P, eps, a, lda, da, ldda, dlogp, dP, L, dW, db, dX, ldx, below);
}
static void px_update_end(sac_backend_t *be) {
  before(be, "update_end", NULL, NULL);
  R(be)->ops->update_end(R(be));
  after(be);
}
/* not an op of the count: the cuda backend's counter reset (a memset, no kernel) */
static void px_update_begin(sac_backend_t *be) { R(be)->ops->update_begin(R(be)); }

/* A proxy of real with the ops sac.c calls (graph ops left out: the updates run eagerly). */
static void proxy_init(proxy_t *px, sac_backend_ops_t *ops, sac_backend_t *real) {
  memset(ops, 0, sizeof *ops);
  const sac_backend_ops_t *r = real->ops;
  ops->name = r->name;
  ops->alloc = px_alloc, ops->free = px_free, ops->upload = px_upload, ops->download = px_download;
  ops->sync = px_sync, ops->destroy = px_destroy;
  ops->linear_fwd = px_linear_fwd, ops->linear_bwd = px_linear_bwd, ops->normal = px_normal;
  ops->head_fwd = px_head_fwd, ops->head_bwd = px_head_bwd, ops->critic_target = px_critic_target;
  ops->critic_loss = px_critic_loss, ops->actor_loss = px_actor_loss, ops->alpha_loss = px_alpha_loss;
  ops->adam = px_adam, ops->polyak = px_polyak;
  ops->adam_polyak = r->adam_polyak ? px_adam_polyak : NULL;
  ops->actor_alpha_loss = r->actor_alpha_loss ? px_actor_alpha_loss : NULL;
  ops->normal2 = r->normal2 ? px_normal2 : NULL;
  ops->q_head = r->q_head ? px_q_head : NULL;
  ops->policy_fwd = r->policy_fwd ? px_policy_fwd : NULL;
  ops->linear_bwd_act = r->linear_bwd_act ? px_linear_bwd_act : NULL;
  ops->policy_bwd = r->policy_bwd ? px_policy_bwd : NULL;
  ops->update_end = r->update_end ? px_update_end : NULL;
  ops->update_begin = r->update_begin ? px_update_begin : NULL;
  memset(px, 0, sizeof *px);
  px->base = (sac_backend_t){ops, real->impl};
  px->real = real;
}

int sac_count_update_ops(sac_t *s, sac_backend_t *real, int unfused, int64_t counts[2]) {
  sac_backend_ops_t ops;
  proxy_t px;
  proxy_init(&px, &ops, real);
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

/* One update through the timing proxy: mark 0, the ops between their marks, the last
 * mark; the marks charged to the rows. */
static int profile_one(sac_t *s, proxy_t *px, sac_backend_t *real) {
  const sac_backend_ops_t *r = real->ops;
  px->mark = 0, px->n_calls = 0, px->overflow = 0;
  int rc = r->timing_begin(real, 1);
  if (rc)
    return rc;
  px->timing = 1;
  r->timing_mark(real, px->mark++);
  int urc = sac_update(s);
  const int last = px->mark;
  r->timing_mark(real, px->mark++);
  px->timing = 0;
  static double sec[SAC_BACKEND_MAX_MARKS];
  rc = r->timing_end(real, px->mark, sec);
  if (urc)
    return urc;
  if (rc)
    return rc;
  if (px->overflow)
    return SAC_ETOOBIG;
  sac_op_profile_t *pr = px->prof;
  for (int i = 0; i < px->n_calls; i++) {
    sac_op_row_t *row = &pr->row[px->row_of[i]];
    row->calls += 1;
    row->seconds += sec[2 * i + 2] - sec[2 * i + 1];
  }
  pr->update_seconds += sec[last];
  pr->updates++;
  return 0;
}

int sac_profile_update_ops(sac_t *s, sac_backend_t *real, int updates, sac_op_profile_t *out) {
  memset(out, 0, sizeof *out);
  if (!real->ops->timing_begin || !real->ops->timing_mark || !real->ops->timing_end)
    return SAC_EUNSUPPORTED;
  sac_backend_ops_t ops;
  proxy_t px;
  proxy_init(&px, &ops, real);
  px.prof = out;
  int rc = sac_swap_backend(s, &px.base);
  if (rc)
    return rc;
  for (int u = 0; u < updates && rc == 0; u++)
    rc = profile_one(s, &px, real);
  out->ops = px.count;
  int rc2 = sac_swap_backend(s, real);
  return rc ? rc : rc2;
}
