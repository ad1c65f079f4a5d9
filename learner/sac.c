/* SAC update written once against the backend interface (see sac.h). The update reads
 * top to bottom: target, critic step, actor step, alpha step, Polyak. Buffers are
 * allocated once in sac_new; nothing is allocated per update. */
#include "learner/sac.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "common/rng.h"

enum { NOISE_NEXT = 0, NOISE_PI = 1 };

/* Hidden activations of one MLP. Without recompute, acts[l] is layer l's own buffer.
 * With recompute (a checkpoint every ck layers), layer l with l % ck == ck - 1 keeps its
 * own buffer and the others share ck - 1 buffers by l % ck; slot_layer says which layer
 * a shared buffer holds now, and mlp_bwd recomputes a segment from its checkpoint when
 * it needs a layer that was overwritten. The recomputed values are bit-identical. */
typedef struct {
  float *acts[SAC_MLP_MAX_LAYERS]; /* per hidden layer (aliased with recompute) */
  float *own[SAC_MLP_MAX_LAYERS];  /* the distinct buffers */
  int slot_layer[SAC_MLP_MAX_LAYERS];
  int ck;       /* 0: every activation kept */
  int fwd_rows; /* rows of the forward that fills them (the policy runs over 2B) */
} mlp_acts_t;

/* Where one MLP's layers sit in the backend buffers: every weight block (K matrices)
 * and every bias block (K vectors) starts on a 256-byte boundary (SAC_BLOCK_ALIGN
 * floats) relative to the MLP's block, so cuBLASLt gets 16-byte aligned operands and
 * bias epilogues whatever the layer sizes (issue 16: with an odd action size the critics
 * were only 8-byte aligned). Offsets in floats from the start of the MLP's block. */
typedef struct {
  size_t w[SAC_MLP_MAX_LAYERS], b[SAC_MLP_MAX_LAYERS];
  size_t len; /* padded length, a multiple of SAC_BLOCK_ALIGN */
} net_layout_t;

/* One run of floats that is contiguous in both the packed layout (the public one:
 * checkpoints, data-parallel sync, weights) and the padded backend layout. */
typedef struct {
  size_t packed, padded, len;
} span_t;

#define SAC_BLOCK_ALIGN 64 /* floats: 256 bytes */
#define STATS_FLOATS 8
/* fetch slots of the backend (backend.h): two each, used alternately */
enum { SLOT_TD = 0, SLOT_STATS = 2, SLOT_ACTOR = 4 };
#define SAC_MAX_SPANS (4 * SAC_MLP_MAX_LAYERS + 1)
/* graph ids (backend.h): 0 and 1 one update of each phase; 2 and 3 the updates of one
 * launch (sac_set_updates_per_launch), starting at phase 0 or at another phase */
enum { GRAPH_K = 2, N_GRAPHS = 4 };

/* One batch the updates read: [obs; next_obs] back to back, action, reward,
 * terminated, importance weights. Set j is the batch of update j of a launch. */
typedef struct {
  float *obs2, *action, *reward, *terminated, *weights;
} batch_set_t;

struct sac {
  sac_hparams_t hp;
  sac_backend_t *be;
  sac_mlp_desc_t ad, cd;              /* actor (K = 1) and twin critics (K = 2) */
  size_t n_actor, n_critic, n_params; /* packed sizes (the public layout) */
  /* flat backend buffers, padded layout [actor | critics | log alpha]: each block and
   * each layer's W and b on a 256-byte boundary, the padding zero (and it stays zero:
   * no op writes a gradient there, so Adam and Polyak leave it) */
  float *params, *grads, *m, *v;
  float *target; /* the critics' padded block */
  net_layout_t al, cl;
  size_t off_critic, off_alpha, n_dev; /* padded offsets; n_dev = padded total */
  span_t spans[SAC_MAX_SPANS];         /* packed <-> padded, in order: actor, critics, alpha */
  int n_spans, n_actor_spans;
  float *fb_host; /* the fetch slots' host copies where the backend has no fetch */
  size_t fb_off[SAC_BACKEND_FETCH_SLOTS];
  float *host;       /* n_dev floats: packing and unpacking at setup, checkpoint and publish time */
  float *steps;      /* Adam step counters: critic, actor, alpha */
  mlp_acts_t aa, ca; /* hidden activations of the actor and of the critics */
  float *dbuf[2];
  /* The policy runs once per update over 2B rows, [s; s'] (the batch stores obs and
   * next_obs back to back): both forwards use the same actor parameters, and one GEMM
   * of 2B rows is cheaper than two of B. Rows [0, B) serve the actor loss and are the
   * ones back-propagated; rows [B, 2B) give a' for the critic target. */
  float *obs2; /* (2B, O) = [obs; next_obs] */
  /* The critics' input, joined (the fused ops, policy_fwd): (3B, O + A) rows
   * [obs | a~; next_obs | a'; obs | action], each read by the critics' first layer as
   * one operand (sac_segs_adjacent). policy_fwd writes a~ and a' into its action columns
   * and copies the batch's obs, next_obs and action into the rest, so the batch keeps
   * its layout and its writers. The unfused ops read the batch and a2 as two segments. */
  float *cin;
  float *P, *dP;         /* actor head (2B, 2A); dP (B, 2A) */
  float *eps2;           /* (2B, A) = [eps_pi; eps_next] */
  float *a2, *da;        /* (2B, A) = [a~; a']; da (B, A) */
  float *logp2;          /* (2B) = [log pi(a~|s); log pi(a'|s')] */
  float *dlogp, *y, *td; /* (B) */
  float *q, *qt, *dq;    /* (B, 2) */
  float *stats;          /* critic loss, mean q, actor loss, entropy, alpha loss: STATS_FLOATS floats
                          * right after the padded log alpha block (params + n_dev), so log alpha,
                          * its padding and the statistics are one range fetched as one copy */
  sac_batch_t batch;
  /* updates per launch (sac_set_updates_per_launch): set j is batch j of a launch; the
   * current one is in obs2, batch and td (use_set) */
  int upl, cur;
  batch_set_t sets[SAC_MAX_UPDATES_PER_LAUNCH];
  float *td_all;             /* (upl B): batch j's TD errors at j B */
  sac_head_hp_t head, head2; /* B and 2B rows */
  uint32_t key[2];
  uint64_t step;
  sac_profile_t *prof;
  double prof_t;
  /* graph capture (backends with graph_launch), per phase: 1 = the update that also
   * steps the actor (step % policy_delay == 0), 0 = critic only */
  int eager_runs[2];      /* eager updates so far (capture waits for two: lazy initialisation) */
  int graph_ok[N_GRAPHS]; /* graph id is captured and launchable */
  uint64_t k_phase[2];    /* the step % policy_delay a launch graph (GRAPH_K + i) starts at */
  int unfused;            /* 1: the unfused ops (sac_set_unfused; tests, kernel counts) */
  sac_grad_hook_t hook;   /* data-parallel gradient averaging (NULL: none) */
  void *hook_user;
  int guard; /* 1: refuse to apply a step whose loss is not finite (sac_set_loss_guard) */
  int pad;   /* 1: hidden activations laid out with the backend's act_ld */
  size_t cms; /* the critics' hidden activations: member stride (0: side by side; plan) */
};

static double g_discard;

static size_t stats_block(const sac_t *s);
/* The host copies of the fetch slots where the backend has no fetch, sized for upl
 * batches of TD errors. 0 or SAC_ENOMEM (the old ones kept). */
static int fb_alloc(sac_t *s) {
  size_t fb = 0, off[SAC_BACKEND_FETCH_SLOTS];
  for (int i = 0; i < SAC_BACKEND_FETCH_SLOTS; i++) {
    off[i] = fb;
    fb += i < SLOT_STATS       ? (size_t)s->upl * s->hp.batch
          : i < SLOT_ACTOR     ? stats_block(s)
          : i < SLOT_ACTOR + 2 ? s->al.len
                               : 0;
  }
  float *p = calloc(fb, sizeof(float));
  if (!p)
    return SAC_ENOMEM;
  free(s->fb_host);
  s->fb_host = p;
  memcpy(s->fb_off, off, sizeof off);
  return 0;
}

/* Profile: charge the time since the last lap to *acc (only when a profile is attached). */
static void lap(sac_t *s, double *acc) {
  if (!s->prof)
    return;
  s->be->ops->sync(s->be);
  double now = sac_clock_s();
  *acc += now - s->prof_t;
  s->prof_t = now;
}
#define PROF(field) (s->prof ? &s->prof->field : &g_discard)

void sac_hparams_default(sac_hparams_t *hp, int obs_dim, int act_dim) {
  memset(hp, 0, sizeof *hp);
  hp->obs_dim = obs_dim;
  hp->act_dim = act_dim;
  hp->hidden = 256;
  hp->depth = 2;
  hp->batch = 256;
  hp->gamma = 0.99f;
  hp->tau = 0.005f;
  hp->lr_actor = hp->lr_critic = hp->lr_alpha = 3e-4f;
  hp->init_alpha = 1.0f;
  hp->autotune_alpha = 1;
  hp->target_entropy = NAN;
  hp->log_std_min = -5.0f;
  hp->log_std_max = 2.0f;
  hp->policy_delay = 1;
  hp->seed = 1;
}

static float *actor_params(const sac_t *s) { return s->params; }
static float *critic_params(const sac_t *s) { return s->params + s->off_critic; }
static float *log_alpha(const sac_t *s) { return s->params + s->off_alpha; }
/* log alpha, its padding and the statistics: one range of params */
static size_t stats_block(const sac_t *s) { return s->n_dev - s->off_alpha + STATS_FLOATS; }

static void stats_from(const sac_t *s, const float *blk, sac_stats_t *out);

static size_t align_up(size_t n) { return (n + SAC_BLOCK_ALIGN - 1) / SAC_BLOCK_ALIGN * SAC_BLOCK_ALIGN; }

/* Lays out one MLP from padded offset `base` (packed offset `pbase`): its layers' W and
 * b blocks each aligned, appended to s->spans. */
static void layout_net(sac_t *s, const sac_mlp_desc_t *d, net_layout_t *nl, size_t base, size_t pbase) {
  size_t off = 0;
  for (int l = 0; l < d->n_layers; l++) {
    size_t nw = (size_t)d->ensemble * d->sizes[l] * d->sizes[l + 1],
           nb = (size_t)d->ensemble * d->sizes[l + 1];
    nl->w[l] = off;
    s->spans[s->n_spans++] = (span_t){pbase + sac_mlp_weight_offset(d, l), base + off, nw};
    off = align_up(off + nw);
    nl->b[l] = off;
    s->spans[s->n_spans++] = (span_t){pbase + sac_mlp_bias_offset(d, l), base + off, nb};
    off = align_up(off + nb);
  }
  nl->len = off;
}

static void layout(sac_t *s) {
  s->n_spans = 0;
  layout_net(s, &s->ad, &s->al, 0, 0);
  s->n_actor_spans = s->n_spans;
  s->off_critic = s->al.len;
  layout_net(s, &s->cd, &s->cl, s->off_critic, s->n_actor);
  s->off_alpha = s->off_critic + s->cl.len;
  s->spans[s->n_spans++] = (span_t){s->n_actor + s->n_critic, s->off_alpha, 1};
  s->n_dev = s->off_alpha + SAC_BLOCK_ALIGN;
}

/* Packed (first n floats of the range [p0, p0 + n) of the public layout) <-> padded
 * (host copy `pad` of the backend range starting at padded offset q0), over spans
 * [from, to). to_packed: pad -> packed, else packed -> pad. */
static void repack(const sac_t *s, int from, int to, size_t p0, size_t q0, float *packed, float *pad,
                   size_t n, int to_packed) {
  for (int i = from; i < to; i++) {
    const span_t *sp = &s->spans[i];
    if (sp->packed < p0 || sp->packed - p0 >= n)
      continue;
    size_t len = sp->len < n - (sp->packed - p0) ? sp->len : n - (sp->packed - p0);
    float *a = packed + (sp->packed - p0), *b = pad + (sp->padded - q0);
    if (to_packed)
      memcpy(a, b, len * sizeof(float));
    else
      memcpy(b, a, len * sizeof(float));
  }
}

void sac_layout(const sac_t *s, sac_layout_t *out) {
  memset(out, 0, sizeof *out);
  out->critic = s->off_critic;
  out->log_alpha = s->off_alpha;
  out->total = s->n_dev;
  out->n_layers = s->ad.n_layers;
  for (int l = 0; l < s->ad.n_layers; l++) {
    out->actor_w[l] = s->al.w[l], out->actor_b[l] = s->al.b[l];
    out->critic_w[l] = s->off_critic + s->cl.w[l], out->critic_b[l] = s->off_critic + s->cl.b[l];
  }
  out->params = s->params, out->grads = s->grads, out->adam_m = s->m, out->adam_v = s->v;
  out->target = s->target;
}

static const net_layout_t *net_of(const sac_t *s, const sac_mlp_desc_t *d) {
  return d == &s->ad ? &s->al : &s->cl;
}

/* The leading dimension of a hidden activation block `width` floats wide (and of its
 * gradient): the backend's act_ld where it has one, else the width. */
static int ld_for(sac_backend_t *be, int width) {
  const int ld = be && be->ops->act_ld ? be->ops->act_ld(be, width) : width;
  assert(ld >= width);
  return ld;
}

/* The member stride of the critics' hidden activations for a backend that wants each
 * member's block on pages of its own (act_members_apart): B rows at ld, rounded up to
 * 4 KiB; else 0 (members side by side in each row). be NULL: 0. */
static size_t members_ms(sac_backend_t *be, size_t B, size_t ld) {
  if (!be || !be->ops->act_members_apart || !be->ops->act_members_apart(be))
    return 0;
  return (B * ld + 1023) / 1024 * 1024;
}

/* Layer l's output: its member stride (hidden layers of an ensemble: sac_t's cms) and its
 * leading dimension (hidden layers: ld_for of the row it holds, all members' or, where
 * they lie apart, one member's; the last layer's is its width, as the ops that read it
 * expect). */
static size_t out_ms(const sac_t *s, const sac_mlp_desc_t *d, int l) {
  return l < d->n_layers - 1 && d->ensemble > 1 ? s->cms : 0;
}

static int out_ld(const sac_t *s, const sac_mlp_desc_t *d, int l) {
  const int width = d->ensemble * d->sizes[l + 1];
  if (l == d->n_layers - 1 || !s->pad)
    return width;
  return ld_for(s->be, out_ms(s, d, l) ? d->sizes[l + 1] : width);
}

/* Layer l of an MLP as a backend linear op reading `in` (layer 0) or the previous
 * layer's activations. */
static sac_linear_t layer(const sac_t *s, const sac_mlp_desc_t *d, const float *params, int l, int B,
                          const sac_seg_t *in, int n_in_seg, float *const *acts) {
  const net_layout_t *nl = net_of(s, d);
  sac_linear_t L;
  memset(&L, 0, sizeof L);
  L.B = B;
  L.n_in = d->sizes[l];
  L.n_out = d->sizes[l + 1];
  L.K = d->ensemble;
  L.W = params + nl->w[l];
  L.b = params + nl->b[l];
  L.act = l == d->n_layers - 1 ? SAC_ACT_NONE : d->hidden_act;
  L.out_ms = out_ms(s, d, l);
  if (l == 0) {
    L.shared = 1;
    L.n_seg = n_in_seg;
    for (int i = 0; i < n_in_seg; i++)
      L.seg[i] = in[i];
  } else {
    L.shared = 0;
    L.n_seg = 1;
    L.seg[0].p = acts[l - 1];
    L.seg[0].ld = out_ld(s, d, l - 1);
    L.seg[0].n = d->ensemble * d->sizes[l];
    L.seg[0].ms = out_ms(s, d, l - 1);
  }
  return L;
}

/* Layers [from, to] of the MLP forward; hidden outputs into ma (the last layer's into out). */
static void mlp_fwd_range(sac_t *s, const sac_mlp_desc_t *d, const float *params, int B, const sac_seg_t *in,
                          int n_in_seg, mlp_acts_t *ma, float *out, int from, int to) {
  for (int l = from; l <= to; l++) {
    sac_linear_t L = layer(s, d, params, l, B, in, n_in_seg, ma->acts);
    int last = l == d->n_layers - 1;
    s->be->ops->linear_fwd(s->be, &L, last ? out : ma->acts[l], out_ld(s, d, l));
    if (!last && ma->ck)
      ma->slot_layer[l % ma->ck] = l;
  }
}

/* out (B, K*out) = MLP(in); hidden activations kept in ma for the backward. */
static void mlp_fwd(sac_t *s, const sac_mlp_desc_t *d, const float *params, int B, const sac_seg_t *in,
                    int n_in_seg, mlp_acts_t *ma, float *out) {
  mlp_fwd_range(s, d, params, B, in, n_in_seg, ma, out, 0, d->n_layers - 1);
}

/* Recompute: makes hidden layer m's activation present, re-running its segment of the
 * forward from the checkpoint below it (or from the input) over the forward's rows. */
static void mlp_need(sac_t *s, const sac_mlp_desc_t *d, const float *params, const sac_seg_t *in,
                     int n_in_seg, mlp_acts_t *ma, int m) {
  const int ck = ma->ck;
  if (!ck || m < 0 || m >= d->n_layers - 1 || m % ck == ck - 1 || ma->slot_layer[m % ck] == m)
    return;
  int from = m / ck * ck, to = from + ck - 2;
  if (to > d->n_layers - 2)
    to = d->n_layers - 2;
  mlp_fwd_range(s, d, params, ma->fwd_rows, in, n_in_seg, ma, NULL, from, to);
}

/* Backward of layers [0, top] of mlp_fwd over its first B rows from dy, the gradient at
 * layer top's output (overwritten): after its activation, or where `pre` before it
 * (layer top's activation backward and bias gradient already done by the fused op of
 * the layer above: top's own linear_bwd then runs without them). grads NULL: input
 * gradient only. dx[i] (may be NULL) receives the gradient of input segment i. */
static void mlp_bwd_from(sac_t *s, const sac_mlp_desc_t *d, const float *params, float *grads, int B,
                         const sac_seg_t *in, int n_in_seg, mlp_acts_t *ma, const float *out, float *dy,
                         int top, int pre, float *dx[2], const int ldx[2]) {
  for (int l = top; l >= 0; l--) {
    mlp_need(s, d, params, in, n_in_seg, ma, l);
    mlp_need(s, d, params, in, n_in_seg, ma, l - 1);
    sac_linear_t L = layer(s, d, params, l, B, in, n_in_seg, ma->acts);
    int last = l == d->n_layers - 1;
    const float *y = last ? out : ma->acts[l];
    int ldy = out_ld(s, d, l);
    float *dW = grads ? grads + net_of(s, d)->w[l] : NULL;
    float *db = grads ? grads + net_of(s, d)->b[l] : NULL;
    if (pre && l == top)
      L.act = SAC_ACT_NONE, db = NULL;
    if (l > 0) {
      float *next = s->dbuf[l & 1];
      float *dxs[2] = {next, NULL};
      int lds[2] = {out_ld(s, d, l - 1), 0};
      s->be->ops->linear_bwd(s->be, &L, dy, y, ldy, dW, db, dxs, lds);
      dy = next;
    } else {
      s->be->ops->linear_bwd(s->be, &L, dy, y, ldy, dW, db, dx, ldx);
    }
  }
}

/* The last layer of an MLP as a fused backward op sees it: the layer, its gradient
 * blocks, the input-gradient buffer it writes (the one mlp_bwd_from's loop would) and the
 * layer below, whose activation is made present first (recompute). */
typedef struct {
  sac_linear_t L;
  float *dW, *db, *dx;
  int ldx;
  sac_below_t below;
} bwd_top_t;

static void bwd_top(sac_t *s, const sac_mlp_desc_t *d, const float *params, float *grads, int B,
                    const sac_seg_t *in, int n_in_seg, mlp_acts_t *ma, bwd_top_t *t) {
  const int last = d->n_layers - 1;
  const net_layout_t *nl = net_of(s, d);
  mlp_need(s, d, params, in, n_in_seg, ma, last - 1);
  t->L = layer(s, d, params, last, B, in, n_in_seg, ma->acts);
  t->dW = grads ? grads + nl->w[last] : NULL;
  t->db = grads ? grads + nl->b[last] : NULL;
  t->dx = s->dbuf[last & 1];
  t->ldx = out_ld(s, d, last - 1);
  t->below = (sac_below_t){d->hidden_act, grads ? grads + nl->b[last - 1] : NULL};
}

/* Backward of mlp_fwd over its first B rows from dout (overwritten): the last layer with
 * the layer below's activation backward in one fused op where the backend has
 * linear_bwd_act (the critics' one-wide output: one launch), else layer by layer. grads
 * NULL: input gradient only. dx[i] (may be NULL) receives the gradient of input
 * segment i. */
static void mlp_bwd(sac_t *s, const sac_mlp_desc_t *d, const float *params, float *grads, int B,
                    const sac_seg_t *in, int n_in_seg, mlp_acts_t *ma, const float *out, float *dout,
                    float *dx[2], const int ldx[2]) {
  const int last = d->n_layers - 1;
  if (!s->be->ops->linear_bwd_act || s->unfused || last < 1) {
    mlp_bwd_from(s, d, params, grads, B, in, n_in_seg, ma, out, dout, last, 0, dx, ldx);
    return;
  }
  bwd_top_t t;
  bwd_top(s, d, params, grads, B, in, n_in_seg, ma, &t);
  s->be->ops->linear_bwd_act(s->be, &t.L, dout, out, out_ld(s, d, last), t.dW, t.db, t.dx, t.ldx, &t.below);
  mlp_bwd_from(s, d, params, grads, B, in, n_in_seg, ma, out, t.dx, last - 1, 1, dx, ldx);
}

/* The sizes sac_new allocates, in floats, and the widest operand an op sees. Every
 * buffer below is sized here and nowhere else, so a buffer can never be filled from a
 * quantity it was not sized by (issue 14: the host init buffer was n_params floats and
 * received batch floats). */
typedef struct {
  size_t n_actor, n_critic, n_params;
  size_t act_slots;  /* hidden activation buffers per network (fewer with recompute) */
  size_t act_floats; /* each: (2B, H) for the actor, (B, 2H) for the critics, rows at ld_for */
  size_t dbuf_floats; /* each of dbuf[2]: (B, 2H), rows at ld_for */
  size_t cms;         /* the critics' member stride (members_ms): 0, or (B, H) each at cms */
  size_t total;      /* every float sac_new allocates, plus its host init buffer */
  double widest;     /* largest rows x cols of any one buffer or op operand */
} sac_plan_t;

static int recompute_ck(const sac_hparams_t *hp) {
  int ck = 0;
  if (hp->recompute) /* checkpoint every ck = ceil(sqrt(depth)) (at least 2) layers */
    for (ck = 2; ck * ck < hp->depth; ck++)
      ;
  return ck;
}

/* be: the backend whose act_ld lays out the hidden activations (NULL: none). */
static void plan(const sac_hparams_t *hp, const sac_mlp_desc_t *ad, const sac_mlp_desc_t *cd,
                 sac_backend_t *be, sac_plan_t *p) {
  const size_t B = (size_t)hp->batch, A = (size_t)hp->act_dim, O = (size_t)hp->obs_dim,
               H = (size_t)hp->hidden;
  const size_t ld1 = (size_t)ld_for(be, hp->hidden), ld2 = (size_t)ld_for(be, 2 * hp->hidden);
  memset(p, 0, sizeof *p);
  p->n_actor = sac_mlp_param_count(ad);
  p->n_critic = sac_mlp_param_count(cd);
  p->n_params = p->n_actor + p->n_critic + 1;
  int ck = recompute_ck(hp);
  p->act_slots = !ck ? (size_t)hp->depth : (size_t)(ck - 1) + (size_t)(hp->depth / ck);
  if (p->act_slots > (size_t)hp->depth)
    p->act_slots = (size_t)hp->depth;
  p->cms = members_ms(be, B, ld1);
  const size_t critic_floats = p->cms ? 2 * p->cms : B * ld2;
  p->act_floats = 2 * B * ld1 > critic_floats ? 2 * B * ld1 : critic_floats;
  p->dbuf_floats = B * ld1 > critic_floats ? B * ld1 : critic_floats;
  size_t host_init = p->n_params > B ? p->n_params : B;
  p->total = 4 * p->n_params + p->n_critic + 3               /* params, grads, m, v; target; steps */
             + 2 * p->act_slots * p->act_floats              /* hidden activations, actor and critics */
             + 2 * p->dbuf_floats                            /* dbuf[2] */
             + 2 * B * O + 3 * B * (O + A)                   /* obs2, cin */
             + 2 * B * 2 * A + B * 2 * A                     /* P, dP */
             + 2 * B * A + 2 * B * A + B * A                 /* eps2, a2, da */
             + 2 * B + 3 * B + 3 * (B * 2) + SAC_BLOCK_ALIGN /* logp2; dlogp, y, td; q, qt, dq; stats */
             + B * A + 3 * B                                 /* batch action, reward, terminated, weights */
             + host_init;
  /* widest operands: activations (2B, 2H), [obs; next_obs] (2B, O), the head (2B, 2A),
   * the joined critic input (3B, O + A), a critic's first-layer weights (O + A, 2H) and a
   * hidden layer's (H, 2H) */
  double d2B = 2.0 * (double)B, w = (double)ld2;
  if ((double)O > w)
    w = (double)O;
  if (2.0 * (double)A > w)
    w = 2.0 * (double)A;
  p->widest = d2B * w;
  if (1.5 * d2B * ((double)O + (double)A) > p->widest)
    p->widest = 1.5 * d2B * ((double)O + (double)A);
  double wl = ((double)O + (double)A) * 2.0 * (double)H;
  if ((double)H * 2.0 * (double)H > wl)
    wl = (double)H * 2.0 * (double)H;
  if (wl > p->widest)
    p->widest = wl;
}

int sac_hparams_check(const sac_hparams_t *hp, char *why, size_t cap) {
  if (hp->obs_dim < 1 || hp->act_dim < 1 || hp->hidden < 1 || hp->depth < 1 ||
      hp->depth >= SAC_MLP_MAX_LAYERS || hp->batch < 1 || hp->policy_delay < 1 ||
      !(hp->gamma >= 0.0f && hp->gamma <= 1.0f) || !(hp->tau > 0.0f && hp->tau <= 1.0f) ||
      !(hp->init_alpha > 0.0f) || !(hp->log_std_min < hp->log_std_max)) {
    snprintf(why, cap, "invalid hyperparameters (obs %d act %d hidden %d depth %d batch %d)", hp->obs_dim,
             hp->act_dim, hp->hidden, hp->depth, hp->batch);
    return SAC_EINVAL;
  }
  sac_mlp_desc_t ad, cd;
  sac_mlp_desc_init(&ad, hp->obs_dim, hp->hidden, hp->depth, 2 * hp->act_dim, SAC_ACT_RELU, 1);
  sac_mlp_desc_init(&cd, hp->obs_dim + hp->act_dim, hp->hidden, hp->depth, 1, SAC_ACT_RELU, 2);
  sac_plan_t p;
  plan(hp, &ad, &cd, NULL, &p);
  /* BLAS and the cuda kernels take int dimensions and index some operands with int */
  if (p.widest > (double)SAC_MAX_OPERAND) {
    snprintf(
        why, cap,
        "batch_size %d with hidden %d%s needs an operand of %.0f floats, over the %d the backends can index: "
        "lower --batch_size or --hidden (batch_size x hidden <= %d)",
        hp->batch, hp->hidden,
        hp->obs_dim > 2 * hp->hidden || hp->act_dim > hp->hidden ? " and this environment's sizes" : "",
        p.widest, SAC_MAX_OPERAND, SAC_MAX_OPERAND / 4);
    return SAC_EINVAL;
  }
  return 0;
}

size_t sac_state_bytes(const sac_hparams_t *hp) {
  char why[256];
  if (sac_hparams_check(hp, why, sizeof why) != 0)
    return 0;
  sac_mlp_desc_t ad, cd;
  sac_mlp_desc_init(&ad, hp->obs_dim, hp->hidden, hp->depth, 2 * hp->act_dim, SAC_ACT_RELU, 1);
  sac_mlp_desc_init(&cd, hp->obs_dim + hp->act_dim, hp->hidden, hp->depth, 1, SAC_ACT_RELU, 2);
  sac_plan_t p;
  plan(hp, &ad, &cd, NULL, &p);
  return p.total * sizeof(float);
}

int sac_new(const sac_hparams_t *hp, sac_backend_t *be, sac_t **out) {
  *out = NULL;
  char why[320];
  int bad = sac_hparams_check(hp, why, sizeof why);
  if (bad) {
    SAC_ERROR("sac", "%s", why);
    return bad;
  }
  const int B = hp->batch, A = hp->act_dim, O = hp->obs_dim, H = hp->hidden;
  sac_mlp_desc_t ad, cd;
  sac_mlp_desc_init(&ad, O, H, hp->depth, 2 * A, SAC_ACT_RELU, 1);
  sac_mlp_desc_init(&cd, O + A, H, hp->depth, 1, SAC_ACT_RELU, 2);
  sac_plan_t pl;
  plan(hp, &ad, &cd, be, &pl);
  int pad = 1;
  if (pl.widest > (double)SAC_MAX_OPERAND) { /* the check passed the unpadded layout: keep it */
    plan(hp, &ad, &cd, NULL, &pl);
    pad = 0;
  }
  /* host memory (the cpu backend) zeroes what it allocates: a state larger than the host
   * would be killed while touching it rather than fail cleanly, so refuse it here */
  size_t need = pl.total * sizeof(float);
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (!strcmp(be->ops->name, "cpu") && pages > 0 && page > 0 && (double)need > (double)pages * (double)page) {
    SAC_ERROR(
        "sac",
        "batch_size %d, hidden %d, depth %d need %.1f GiB of memory, more than this host's %.1f GiB: lower "
        "--batch_size or --hidden",
        hp->batch, hp->hidden, hp->depth, (double)need / 1073741824.0,
        (double)pages * (double)page / 1073741824.0);
    return SAC_ENOMEM;
  }
  sac_t *s = calloc(1, sizeof *s);
  if (!s)
    return SAC_ENOMEM;
  s->hp = *hp;
  if (isnan(s->hp.target_entropy))
    s->hp.target_entropy = -(float)hp->act_dim;
  s->be = be;
  s->pad = pad;
  s->cms = pl.cms;
  s->ad = ad;
  s->cd = cd;
  s->n_actor = pl.n_actor;
  s->n_critic = pl.n_critic;
  s->n_params = pl.n_params;
  layout(s);

  int rc = 0;
#define ALLOC(ptr, n)                                                                                        \
  do {                                                                                                       \
    if ((rc = be->ops->alloc(be, (n), &(ptr))) != 0)                                                         \
      goto err;                                                                                              \
  } while (0)
  ALLOC(s->params, s->n_dev + SAC_BLOCK_ALIGN); /* the statistics after log alpha's block */
  s->stats = s->params + s->n_dev;
  ALLOC(s->grads, s->n_dev);
  ALLOC(s->m, s->n_dev);
  ALLOC(s->v, s->n_dev);
  ALLOC(s->target, s->cl.len);
  s->upl = 1;
  if (!(s->host = calloc(s->n_dev, sizeof(float))) || fb_alloc(s) != 0) {
    rc = SAC_ENOMEM;
    goto err;
  }
  ALLOC(s->steps, 3);
  {
    int ck = recompute_ck(hp);
    mlp_acts_t *mas[2] = {&s->aa, &s->ca};
    for (int i = 0; i < 2; i++) {
      mlp_acts_t *ma = mas[i];
      ma->ck = ck;
      ma->fwd_rows = i == 0 ? 2 * B : B;
      for (int l = 0; l < hp->depth; l++) {
        int slot = !ck ? l : (l % ck == ck - 1 ? ck - 1 + l / ck : l % ck);
        if (!ma->own[slot])
          ALLOC(ma->own[slot], pl.act_floats); /* (2B, H) actor, (B, 2H) critics */
        ma->acts[l] = ma->own[slot];
        ma->slot_layer[l] = -1;
      }
    }
  }
  ALLOC(s->dbuf[0], pl.dbuf_floats);
  ALLOC(s->dbuf[1], pl.dbuf_floats);
  ALLOC(s->obs2, (size_t)2 * B * O);
  ALLOC(s->cin, (size_t)3 * B * (O + A));
  ALLOC(s->P, (size_t)2 * B * 2 * A);
  ALLOC(s->dP, (size_t)B * 2 * A);
  ALLOC(s->eps2, (size_t)2 * B * A);
  ALLOC(s->a2, (size_t)2 * B * A);
  ALLOC(s->da, (size_t)B * A);
  ALLOC(s->logp2, (size_t)2 * B);
  ALLOC(s->dlogp, B);
  ALLOC(s->y, B);
  ALLOC(s->td_all, B);
  s->td = s->td_all;
  ALLOC(s->q, (size_t)B * 2);
  ALLOC(s->qt, (size_t)B * 2);
  ALLOC(s->dq, (size_t)B * 2);
  ALLOC(s->batch.action, (size_t)B * A);
  ALLOC(s->batch.reward, B);
  ALLOC(s->batch.terminated, B);
  ALLOC(s->batch.weights, B);
#undef ALLOC
  s->batch.obs = s->obs2;
  s->batch.next_obs = s->obs2 + (size_t)B * O;
  s->upl = 1;
  s->sets[0] =
      (batch_set_t){s->obs2, s->batch.action, s->batch.reward, s->batch.terminated, s->batch.weights};

  /* initial values, built on the host once; the buffer also gives the B importance
   * weights their initial 1s, so it holds max(n_params, B) floats */
  {
    float *host = malloc(sizeof(float) * (s->n_params > (size_t)B ? s->n_params : (size_t)B));
    if (!host) {
      rc = SAC_ENOMEM;
      goto err;
    }
    sac_rng_t rng;
    sac_rng_init(&rng, hp->seed, SAC_STREAM_LEARNER);
    sac_mlp_init_params(&s->ad, host, &rng);
    sac_mlp_init_params(&s->cd, host + s->n_actor, &rng);
    host[s->n_params - 1] = logf(hp->init_alpha);
    memset(s->host, 0, s->n_dev * sizeof(float));
    repack(s, 0, s->n_spans, 0, 0, host, s->host, s->n_params, 0);
    rc = be->ops->upload(be, s->params, s->host, s->n_dev);
    if (rc == 0)
      rc = be->ops->upload(be, s->target, s->host + s->off_critic, s->cl.len);
    for (int i = 0; rc == 0 && i < B; i++)
      host[i] = 1.0f;
    if (rc == 0)
      rc = be->ops->upload(be, s->batch.weights, host, B);
    free(host);
    if (rc)
      goto err;
  }
  sac_rng_key(hp->seed, SAC_STREAM_LEARNER, s->key);
  s->head = (sac_head_hp_t){.B = B,
                            .A = A,
                            .gamma = s->hp.gamma,
                            .log_std_min = s->hp.log_std_min,
                            .log_std_max = s->hp.log_std_max,
                            .target_entropy = s->hp.target_entropy,
                            .log_alpha = log_alpha(s)};
  s->head2 = s->head;
  s->head2.B = 2 * B;
  *out = s;
  return 0;
err:
  sac_destroy(&s);
  return rc;
}

static void drop_graphs(sac_t *s) {
  for (int i = 0; i < N_GRAPHS; i++)
    s->graph_ok[i] = 0;
}

/* Makes batch set j the one the ops read (obs2, batch, td). Host pointers only: a graph
 * records the set that was current while it was captured. */
static void use_set(sac_t *s, int j) {
  const size_t B = (size_t)s->hp.batch, O = (size_t)s->hp.obs_dim;
  const batch_set_t *b = &s->sets[j];
  s->cur = j;
  s->obs2 = b->obs2;
  s->batch = (sac_batch_t){b->obs2, b->action, b->reward, b->terminated, b->obs2 + B * O, b->weights};
  s->td = s->td_all + (size_t)j * B;
}

/* Frees batch sets [from, upl) (set 0 is sac_new's, freed with the rest). */
static void free_sets(sac_t *s, int from) {
  for (int j = from; j < s->upl; j++) {
    float **p[5] = {&s->sets[j].obs2, &s->sets[j].action, &s->sets[j].reward, &s->sets[j].terminated,
                    &s->sets[j].weights};
    for (int i = 0; i < 5; i++)
      if (*p[i]) {
        s->be->ops->free(s->be, *p[i]);
        *p[i] = NULL;
      }
  }
}

void sac_destroy(sac_t **sp) {
  sac_t *s = *sp;
  if (!s)
    return;
  sac_backend_t *be = s->be;
  free_sets(s, 1);
  if (s->sets[0].obs2) /* sac_new got that far */
    use_set(s, 0);
  float **bufs[] = {&s->params,
                    &s->grads,
                    &s->m,
                    &s->v,
                    &s->target,
                    &s->steps,
                    &s->dbuf[0],
                    &s->dbuf[1],
                    &s->obs2,
                    &s->cin,
                    &s->P,
                    &s->dP,
                    &s->eps2,
                    &s->a2,
                    &s->da,
                    &s->logp2,
                    &s->dlogp,
                    &s->y,
                    &s->td_all,
                    &s->q,
                    &s->qt,
                    &s->dq,
                    &s->batch.action,
                    &s->batch.reward,
                    &s->batch.terminated,
                    &s->batch.weights};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
    if (*bufs[i])
      be->ops->free(be, *bufs[i]);
  for (int l = 0; l < SAC_MLP_MAX_LAYERS; l++) {
    if (s->aa.own[l])
      be->ops->free(be, s->aa.own[l]);
    if (s->ca.own[l])
      be->ops->free(be, s->ca.own[l]);
  }
  free(s->host);
  free(s->fb_host);
  free(s);
  *sp = NULL;
}

const sac_hparams_t *sac_hparams(const sac_t *s) { return &s->hp; }
const sac_mlp_desc_t *sac_actor_desc(const sac_t *s) { return &s->ad; }
const sac_mlp_desc_t *sac_critic_desc(const sac_t *s) { return &s->cd; }
sac_batch_t *sac_batch(sac_t *s) { return &s->batch; }
uint64_t sac_step(const sac_t *s) { return s->step; }
void sac_set_step(sac_t *s, uint64_t step) { s->step = step; }
void sac_set_profile(sac_t *s, sac_profile_t *prof) { s->prof = prof; }
void sac_get_noise_key(const sac_t *s, uint32_t key[2]) { key[0] = s->key[0], key[1] = s->key[1]; }
void sac_set_noise_key(sac_t *s, const uint32_t key[2]) {
  s->key[0] = key[0], s->key[1] = key[1];
  drop_graphs(s); /* a captured update holds the old key: capture again */
}
size_t sac_param_count(const sac_t *s) { return s->n_params; }
size_t sac_grad_capacity(const sac_t *s) { return s->n_dev; }
size_t sac_actor_param_count(const sac_t *s) { return s->n_actor; }

/* The critics' input rows of the update, as the first layer's two segments. */
enum { CIN_PI = 0, CIN_NEXT = 1, CIN_BATCH = 2 }; /* (s, a~), (s', a'), (s, a) */

/* The fused policy output (policy_fwd), and with it the joined critic input (cin) */
static int joined_input(const sac_t *s) { return s->be->ops->policy_fwd && !s->unfused; }

static void critic_input(sac_t *s, int which, sac_seg_t in[2]) {
  const int B = s->hp.batch, O = s->hp.obs_dim, A = s->hp.act_dim;
  if (joined_input(s)) {
    float *row = s->cin + (size_t)which * B * (O + A);
    in[0] = (sac_seg_t){row, O + A, O, 0}, in[1] = (sac_seg_t){row + O, O + A, A, 0};
    return;
  }
  const sac_batch_t *b = &s->batch;
  const float *act = which == CIN_PI ? s->a2 : which == CIN_NEXT ? s->a2 + (size_t)B * A : b->action;
  in[0] = (sac_seg_t){which == CIN_NEXT ? b->next_obs : b->obs, O, O, 0}, in[1] = (sac_seg_t){act, A, A, 0};
}

/* Where the policy's actions (2B, A) = [a~; a'] are: in cin's action columns, or a2. */
static float *policy_actions(sac_t *s, int *lda) {
  const int O = s->hp.obs_dim, A = s->hp.act_dim;
  *lda = joined_input(s) ? O + A : A;
  return joined_input(s) ? s->cin + O : s->a2;
}

/* Twin critics (params: online or target) on the rows `in`: q (B, 2). */
static void critics(sac_t *s, const float *params, const sac_seg_t in[2], float *q) {
  mlp_fwd(s, &s->cd, params, s->hp.batch, in, 2, &s->ca, q);
}

/* The critics' forward into q, then the head op a->then on q: the last layer and the
 * head as one fused launch where the backend has q_head, else the ops one by one (the
 * same results). */
static void critics_then(sac_t *s, const float *params, const sac_seg_t in[2], float *q,
                         const sac_q_head_t *a) {
  const sac_backend_ops_t *ops = s->be->ops;
  const sac_mlp_desc_t *d = &s->cd;
  if (!ops->q_head || !ops->actor_alpha_loss || s->unfused || d->n_layers < 2) {
    critics(s, params, in, q);
    if (a->then == SAC_Q_TARGET)
      ops->critic_target(s->be, &s->head, a->r, a->term, q, a->logp, a->y);
    else if (a->then == SAC_Q_CRITIC_LOSS)
      ops->critic_loss(s->be, &s->head, q, a->y, a->w, a->dq, a->td, a->stats);
    else if (ops->actor_alpha_loss && !s->unfused)
      ops->actor_alpha_loss(s->be, &s->head, q, a->logp, a->dq, a->dlogp, a->stats, a->grad_alpha,
                            a->stats_alpha);
    else /* the alpha loss comes after the actor's backward (sac_compute_actor_grads) */
      ops->actor_loss(s->be, &s->head, q, a->logp, a->dq, a->dlogp, a->stats);
    return;
  }
  const int last = d->n_layers - 1;
  mlp_fwd_range(s, d, params, s->hp.batch, in, 2, &s->ca, NULL, 0, last - 1);
  sac_linear_t L = layer(s, d, params, last, s->hp.batch, in, 2, s->ca.acts);
  ops->q_head(s->be, &L, q, &s->head, a);
}

/* The policy's output through the fused op: the noise, the last layer, the head, and the
 * copies that fill cin around the actions the head writes there. */
static void policy_output_fused(sac_t *s, const sac_seg_t *in) {
  const int B = s->hp.batch, O = s->hp.obs_dim, A = s->hp.act_dim, ld = O + A;
  const sac_mlp_desc_t *d = &s->ad;
  const int last = d->n_layers - 1;
  mlp_fwd_range(s, d, actor_params(s), 2 * B, in, 1, &s->aa, NULL, 0, last - 1);
  sac_linear_t L = layer(s, d, actor_params(s), last, 2 * B, in, 1, s->aa.acts);
  float *batch_rows = s->cin + (size_t)CIN_BATCH * B * ld;
  sac_policy_fwd_t pf = {.key = s->key,
                         .stream = s->step,
                         .tag0 = NOISE_PI,
                         .tag1 = NOISE_NEXT,
                         .eps = s->eps2,
                         .a = s->cin + O,
                         .lda = ld,
                         .logp = s->logp2,
                         .n_copy = 3};
  pf.copy[0] = (sac_copy_t){s->obs2, s->cin, O, ld, 2 * B, O}; /* [obs; next_obs] beside [a~; a'] */
  pf.copy[1] = (sac_copy_t){s->batch.obs, batch_rows, O, ld, B, O};
  pf.copy[2] = (sac_copy_t){s->batch.action, batch_rows + O, A, ld, B, A};
  s->be->ops->policy_fwd(s->be, &L, s->P, &s->head2, &pf);
}

void sac_forward_policy(sac_t *s) {
  const sac_backend_ops_t *ops = s->be->ops;
  const int A = s->hp.act_dim, B = s->hp.batch;
  sac_seg_t in = {s->obs2, s->hp.obs_dim, s->hp.obs_dim, 0};
  if (joined_input(s)) {
    policy_output_fused(s, &in);
    return;
  }
  if (ops->normal2 && !s->unfused) { /* one launch for both halves */
    ops->normal2(s->be, s->eps2, (size_t)B * A, s->key, s->step, NOISE_PI, NOISE_NEXT);
  } else {
    ops->normal(s->be, s->eps2, (size_t)B * A, s->key, s->step, NOISE_PI);
    ops->normal(s->be, s->eps2 + (size_t)B * A, (size_t)B * A, s->key, s->step, NOISE_NEXT);
  }
  mlp_fwd(s, &s->ad, actor_params(s), 2 * B, &in, 1, &s->aa, s->P);
  ops->head_fwd(s->be, &s->head2, s->P, s->eps2, s->a2, A, s->logp2);
}

void sac_compute_critic_grads(sac_t *s) {
  const int B = s->hp.batch;
  sac_batch_t *b = &s->batch;
  sac_seg_t in[2];
  /* y = r + gamma (1 - terminated) (min Qtarget(s', a') - alpha log pi(a'|s')) */
  sac_q_head_t tq = {
      .then = SAC_Q_TARGET, .r = b->reward, .term = b->terminated, .logp = s->logp2 + B, .y = s->y};
  critic_input(s, CIN_NEXT, in);
  critics_then(s, s->target, in, s->qt, &tq);
  lap(s, PROF(target));
  /* L_Q and its gradient through both critics */
  sac_q_head_t lq = {
      .then = SAC_Q_CRITIC_LOSS, .y = s->y, .w = b->weights, .dq = s->dq, .td = s->td, .stats = s->stats};
  critic_input(s, CIN_BATCH, in);
  critics_then(s, critic_params(s), in, s->q, &lq);
  float *dx[2] = {NULL, NULL};
  int ldx[2] = {0, 0};
  mlp_bwd(s, &s->cd, critic_params(s), s->grads + s->off_critic, B, in, 2, &s->ca, s->q, s->dq, dx, ldx);
  lap(s, PROF(critic));
}

/* The actor's backward from dL/da~ (da) and dL/dlogp: the head, the last layer and the
 * layer below's activation backward as one fused op where the backend has policy_bwd,
 * else head_bwd and mlp_bwd; then the layers below. */
static void actor_bwd(sac_t *s, const sac_seg_t *in) {
  const sac_backend_ops_t *ops = s->be->ops;
  const sac_mlp_desc_t *d = &s->ad;
  const int B = s->hp.batch, A = s->hp.act_dim, last = d->n_layers - 1;
  int lda;
  const float *a = policy_actions(s, &lda);
  float *nodx[2] = {NULL, NULL};
  const int noldx[2] = {0, 0};
  if (!ops->policy_bwd || s->unfused || last < 1) {
    ops->head_bwd(s->be, &s->head, s->P, s->eps2, a, lda, s->da, A, s->dlogp, s->dP);
    mlp_bwd(s, d, actor_params(s), s->grads, B, in, 1, &s->aa, s->P, s->dP, nodx, noldx);
    return;
  }
  bwd_top_t t;
  bwd_top(s, d, actor_params(s), s->grads, B, in, 1, &s->aa, &t);
  ops->policy_bwd(s->be, &s->head, s->P, s->eps2, a, lda, s->da, A, s->dlogp, s->dP, &t.L, t.dW, t.db, t.dx,
                  t.ldx, &t.below);
  mlp_bwd_from(s, d, actor_params(s), s->grads, B, in, 1, &s->aa, s->P, t.dx, last - 1, 1, nodx, noldx);
}

void sac_compute_actor_grads(sac_t *s) {
  const sac_backend_ops_t *ops = s->be->ops;
  const int A = s->hp.act_dim, B = s->hp.batch;
  sac_batch_t *b = &s->batch;
  /* L_pi = mean(alpha log pi(a~|s) - min Q(s, a~)), a~ reparameterised (rows [0, B)) */
  /* L_alpha = -mean(log alpha (log pi + target entropy)) reads only the forward values:
   * one fused launch with the actor loss (and the critics' last layer) where the backend
   * has it */
  const int fused = ops->actor_alpha_loss && !s->unfused;
  sac_q_head_t aq = {.then = SAC_Q_ACTOR_ALPHA_LOSS,
                     .logp = s->logp2,
                     .dq = s->dq,
                     .dlogp = s->dlogp,
                     .stats = s->stats + 2,
                     .grad_alpha = s->grads + s->off_alpha,
                     .stats_alpha = s->stats + 4};
  sac_seg_t cin[2];
  critic_input(s, CIN_PI, cin);
  critics_then(s, critic_params(s), cin, s->q, &aq);
  /* dL/da~ through the critics (input gradient only: the critics are not stepped here) */
  float *dx[2] = {NULL, s->da};
  int ldx[2] = {0, A};
  mlp_bwd(s, &s->cd, critic_params(s), NULL, B, cin, 2, &s->ca, s->q, s->dq, dx, ldx);
  sac_seg_t ain = {b->obs, s->hp.obs_dim, s->hp.obs_dim, 0};
  actor_bwd(s, &ain);
  if (!fused)
    ops->alpha_loss(s->be, &s->head, s->logp2, s->grads + s->off_alpha, s->stats + 4);
  lap(s, PROF(actor));
}

int sac_swap_backend(sac_t *s, sac_backend_t *be) {
  if (be->impl != s->be->impl)
    return SAC_EINVAL;
  s->be = be;
  drop_graphs(s);
  return 0;
}

void sac_set_unfused(sac_t *s, int unfused) {
  s->unfused = unfused;
  drop_graphs(s);
}

void sac_set_grad_hook(sac_t *s, sac_grad_hook_t fn, void *user) {
  s->hook = fn;
  s->hook_user = user;
  drop_graphs(s);
}

/* The hook on the critics' gradients, or on the actor's (and log alpha's). */
static int grad_hook(sac_t *s, int phase) {
  float *segs[2];
  size_t ns[2];
  int k = 1;
  if (phase == SAC_GRAD_CRITIC) {
    segs[0] = s->grads + s->off_critic, ns[0] = s->cl.len;
  } else {
    segs[0] = s->grads, ns[0] = s->al.len;
    if (s->hp.autotune_alpha)
      segs[1] = s->grads + s->off_alpha, ns[1] = 1, k = 2;
  }
  return s->hook(s->hook_user, phase, segs, ns, k);
}

void sac_set_loss_guard(sac_t *s, int on) {
  s->guard = on ? 1 : 0;
  drop_graphs(s);
}

/* The loss guard's masks over the statistics: the critic step needs a finite critic loss
 * and mean q; the actor's, alpha's and Polyak's also a finite actor and alpha loss. */
#define GUARD_CRITIC 0x3u
#define GUARD_ACTOR 0x17u

/* The optimizer tails run fused (adam_polyak), the loss guard then on the backend */
static int fused_tail(const sac_t *s) { return s->be->ops->adam_polyak && !s->unfused; }

/* The guard's check on the host, for the unfused ops only (waits for the backend): 0, or
 * SAC_ENONFINITE when a statistic of `mask` is NaN or Inf. */
static int losses_finite(sac_t *s, unsigned mask) {
  float st[STATS_FLOATS];
  if (s->be->ops->download(s->be, st, s->stats, STATS_FLOATS) != 0)
    return SAC_EBACKEND;
  for (int i = 0; i < STATS_FLOATS; i++)
    if ((mask >> i & 1u) && !isfinite(st[i]))
      return SAC_ENONFINITE;
  return 0;
}

/* Adam over groups, then (polyak) the target critics: one fused op where the backend
 * has it, else the ops one by one (the same results). With the loss guard on, the fused
 * op itself skips everything when a statistic of `mask` is not finite (the verdict stays
 * on the backend: the host reads it one update late with the statistics); the unfused
 * ops are checked on the host first (a wait) and SAC_ENONFINITE returned. */
static int optimizer_tail(sac_t *s, const sac_adam_group_t *g, int n, int polyak, unsigned mask) {
  const sac_backend_ops_t *ops = s->be->ops;
  if (fused_tail(s)) {
    ops->adam_polyak(s->be, g, n, s->target, critic_params(s), polyak ? s->cl.len : 0, s->hp.tau,
                     s->guard ? s->stats : NULL, mask);
    return 0;
  }
  int rc;
  if (s->guard && (rc = losses_finite(s, mask)) != 0)
    return rc;
  for (int i = 0; i < n; i++)
    ops->adam(s->be, g[i].p, g[i].g, g[i].m, g[i].v, g[i].n, &g[i].hp, g[i].t);
  if (polyak)
    ops->polyak(s->be, s->target, critic_params(s), s->cl.len, s->hp.tau);
  return 0;
}

/* The ops of one update, enqueued on the backend (or recorded into a graph). 0, or a
 * hook's error (the update stopped there), or SAC_ENONFINITE from the host-side guard of
 * the unfused ops. */
static int update_ops(sac_t *s) {
  const sac_backend_ops_t *ops = s->be->ops;
  sac_adam_hp_t critic_hp = {s->hp.lr_critic, 0.9f, 0.999f, 1e-8f};
  sac_adam_hp_t actor_hp = {s->hp.lr_actor, 0.9f, 0.999f, 1e-8f};
  sac_adam_hp_t alpha_hp = {s->hp.lr_alpha, 0.9f, 0.999f, 1e-8f};

  if (s->prof)
    s->prof_t = sac_clock_s();
  if (ops->update_begin)
    ops->update_begin(s->be);
  int rc;
  sac_forward_policy(s);
  sac_compute_critic_grads(s);
  if (s->hook && (rc = grad_hook(s, SAC_GRAD_CRITIC)) != 0)
    return rc;
  /* the optimizer tails: each one fused launch where the backend has adam_polyak (the
   * critics' step must land before the actor's gradient reads the critics). The guard:
   * a non-finite critic loss applies nothing of the update; a non-finite actor or alpha
   * loss applies the critic step and not the actor's, alpha's and Polyak's. */
  sac_adam_group_t gc = {critic_params(s),
                         s->grads + s->off_critic,
                         s->m + s->off_critic,
                         s->v + s->off_critic,
                         s->cl.len,
                         critic_hp,
                         s->steps + 0};
  sac_adam_group_t ga[2] = {{actor_params(s), s->grads, s->m, s->v, s->al.len, actor_hp, s->steps + 1},
                            {log_alpha(s), s->grads + s->off_alpha, s->m + s->off_alpha, s->v + s->off_alpha,
                             1, alpha_hp, s->steps + 2}};
  const int actor_step = s->step % (uint64_t)s->hp.policy_delay == 0;
  if (!actor_step) { /* critic step and Polyak */
    if ((rc = optimizer_tail(s, &gc, 1, 1, GUARD_CRITIC)) != 0)
      return rc;
    lap(s, PROF(optimizer));
  } else {
    if ((rc = optimizer_tail(s, &gc, 1, 0, GUARD_CRITIC)) != 0)
      return rc; /* nothing of this update applied */
    lap(s, PROF(optimizer));
    sac_compute_actor_grads(s);
    if (s->hook && (rc = grad_hook(s, SAC_GRAD_ACTOR)) != 0)
      return rc;
    /* the critic loss again: its step was skipped, so nothing of this update applies */
    if ((rc = optimizer_tail(s, ga, s->hp.autotune_alpha ? 2 : 1, 1, GUARD_ACTOR)) != 0)
      return rc; /* the critic step applied; the actor's, alpha's and Polyak's not */
  }
  if (ops->update_end)
    ops->update_end(s->be);
  lap(s, PROF(optimizer));
  if (s->prof)
    s->prof->updates++;
  return 0;
}

/* Updates may be recorded as graphs: a backend that can, and nothing that runs on the
 * host between the ops (profile, gradient hook, the unfused ops' host-side guard). */
static int graphable(const sac_t *s) {
  /* the guard of the fused tails runs on the backend: capturable; the unfused ops' is not */
  return s->be->ops->graph_launch && !s->prof && !s->hook && !(s->guard && !fused_tail(s));
}

/* After two eager updates of a phase, a backend that can (graph_launch) records the
 * whole update once as a graph and replays it; the noise stream follows the step through
 * graph_launch. The eager path stays for profiling and wherever capture is refused. The
 * graphs read batch set 0: an update on another set runs eagerly (sac_update_launch
 * records those in its own graph). */
int sac_update(sac_t *s) {
  const sac_backend_ops_t *ops = s->be->ops;
  const int g = s->step % (uint64_t)s->hp.policy_delay == 0;
  if (graphable(s) && s->cur == 0 && s->eager_runs[g] >= 2) {
    if (!s->graph_ok[g] && ops->graph_begin(s->be, g, s->step) == 0) {
      update_ops(s); /* no hook, no host-side guard: cannot fail */
      s->graph_ok[g] = ops->graph_end(s->be, g, 1) == 0;
    }
    if (s->graph_ok[g]) {
      if (ops->graph_launch(s->be, g, s->step) == 0) {
        s->step++;
        return 0;
      }
      s->graph_ok[g] = 0;
    }
  }
  int rc = update_ops(s);
  if (rc)
    return rc;
  if (s->eager_runs[g] < 2)
    s->eager_runs[g]++;
  s->step++;
  return 0;
}

int sac_set_updates_per_launch(sac_t *s, int k) {
  if (k < 1 || k > SAC_MAX_UPDATES_PER_LAUNCH)
    return SAC_EINVAL;
  const sac_backend_ops_t *ops = s->be->ops;
  const size_t B = (size_t)s->hp.batch, O = (size_t)s->hp.obs_dim, A = (size_t)s->hp.act_dim;
  use_set(s, 0);
  drop_graphs(s);
  float *td = NULL, *ones = NULL;
  int rc = ops->alloc(s->be, (size_t)k * B, &td);
  if (rc == 0 && !(ones = malloc(B * sizeof(float))))
    rc = SAC_ENOMEM;
  for (size_t i = 0; rc == 0 && i < B; i++)
    ones[i] = 1.0f;
  if (rc) {
    if (td)
      ops->free(s->be, td);
    return rc;
  }
  const int old = s->upl;
  free_sets(s, k); /* a smaller k: the sets past it */
  for (int j = old; rc == 0 && j < k; j++) {
    batch_set_t *b = &s->sets[j];
    s->upl = j + 1; /* free_sets frees what is made so far */
    if ((rc = ops->alloc(s->be, 2 * B * O, &b->obs2)) == 0 &&
        (rc = ops->alloc(s->be, B * A, &b->action)) == 0 && (rc = ops->alloc(s->be, B, &b->reward)) == 0 &&
        (rc = ops->alloc(s->be, B, &b->terminated)) == 0 && (rc = ops->alloc(s->be, B, &b->weights)) == 0)
      rc = ops->upload(s->be, b->weights, ones, B);
  }
  free(ones);
  if (rc) {
    free_sets(s, old < k ? old : k);
    s->upl = old < k ? old : k;
    if (td)
      ops->free(s->be, td);
    return rc;
  }
  s->upl = k;
  ops->free(s->be, s->td_all);
  s->td_all = td;
  use_set(s, 0);
  return fb_alloc(s);
}

int sac_updates_per_launch(const sac_t *s) { return s->upl; }

int sac_load_batches(sac_t *s, const sac_host_batch_t *b, int n) {
  if (n < 1 || n > s->upl)
    return SAC_EINVAL;
  const sac_backend_ops_t *ops = s->be->ops;
  const size_t B = (size_t)s->hp.batch, O = (size_t)s->hp.obs_dim, A = (size_t)s->hp.act_dim;
  const int use_stage = ops->stage && ops->stage_commit;
  int rc = 0;
  for (int j = 0; j < n && rc == 0; j++) {
    const batch_set_t *d = &s->sets[j];
    float *dst[6] = {d->obs2, d->obs2 + B * O, d->action, d->reward, d->terminated, d->weights};
    const float *src[6] = {b[j].obs, b[j].next_obs, b[j].action, b[j].reward, b[j].terminated, b[j].weights};
    const size_t len[6] = {B * O, B * O, B * A, B, B, B};
    for (int i = 0; i < 6 && rc == 0; i++)
      if (src[i])
        rc = use_stage ? ops->stage(s->be, dst[i], src[i], len[i])
                       : ops->upload(s->be, dst[i], src[i], len[i]);
  }
  if (rc == 0 && use_stage)
    rc = ops->stage_commit(s->be);
  return rc;
}

/* The phases of a launch's updates repeat from launch to launch (K a multiple of the
 * policy delay), each phase has run eagerly twice, and the launch graph of this start
 * phase is the one captured (else capture it). 1: launch it. */
static int launch_graph_ready(sac_t *s, int *id) {
  const uint64_t delay = (uint64_t)s->hp.policy_delay, phase = s->step % delay;
  if (!graphable(s) || (uint64_t)s->upl % delay != 0 || s->eager_runs[1] < 2 ||
      (delay > 1 && s->eager_runs[0] < 2))
    return 0;
  *id = GRAPH_K + (phase != 0);
  if (s->graph_ok[*id] && s->k_phase[*id - GRAPH_K] == phase)
    return 1;
  const sac_backend_ops_t *ops = s->be->ops;
  if (ops->graph_begin(s->be, *id, s->step) != 0)
    return 0;
  const uint64_t step0 = s->step;
  for (int j = 0; j < s->upl; j++, s->step++) { /* each update records its own step's noise */
    use_set(s, j);
    update_ops(s); /* no hook, no host-side guard: cannot fail */
  }
  s->step = step0;
  use_set(s, 0);
  s->graph_ok[*id] = ops->graph_end(s->be, *id, (uint64_t)s->upl) == 0;
  s->k_phase[*id - GRAPH_K] = phase;
  return s->graph_ok[*id];
}

int sac_update_launch(sac_t *s) {
  if (s->upl == 1)
    return sac_update(s);
  int id;
  if (launch_graph_ready(s, &id)) {
    if (s->be->ops->graph_launch(s->be, id, s->step) == 0) {
      s->step += (uint64_t)s->upl;
      return 0;
    }
    s->graph_ok[id] = 0;
  }
  int rc = 0;
  for (int j = 0; j < s->upl && rc == 0; j++) { /* set 0 by its graphs, the others eagerly */
    use_set(s, j);
    rc = sac_update(s);
  }
  use_set(s, 0);
  return rc;
}

int sac_stats(sac_t *s, sac_stats_t *out) {
  int rc = s->be->ops->download(s->be, s->host, log_alpha(s), stats_block(s));
  if (rc == 0)
    stats_from(s, s->host, out);
  return rc;
}

int sac_td_errors(sac_t *s, float *out) {
  return s->be->ops->download(s->be, out, s->td_all, (size_t)s->upl * s->hp.batch);
}

/* A copy of n floats of src into backend fetch slot `slot`, collected later; without
 * the backend's fetch, a download now (a blocking one) into the slot's host copy. */
static int fetch_slot(sac_t *s, int slot, const float *src, size_t n) {
  const sac_backend_ops_t *ops = s->be->ops;
  if (ops->fetch)
    return ops->fetch(s->be, slot, src, n);
  return ops->download(s->be, s->fb_host + s->fb_off[slot], src, n);
}

static int collect_slot(sac_t *s, int slot, float *out, size_t n) {
  const sac_backend_ops_t *ops = s->be->ops;
  if (ops->fetch_wait)
    return ops->fetch_wait(s->be, slot, out, n);
  memcpy(out, s->fb_host + s->fb_off[slot], sizeof(float) * n);
  return 0;
}

int sac_td_errors_fetch(sac_t *s, int slot) {
  if (slot < 0 || slot > 1)
    return SAC_EINVAL;
  return fetch_slot(s, SLOT_TD + slot, s->td_all, (size_t)s->upl * s->hp.batch);
}

int sac_td_errors_collect(sac_t *s, int slot, float *out) {
  if (slot < 0 || slot > 1)
    return SAC_EINVAL;
  return collect_slot(s, SLOT_TD + slot, out, (size_t)s->upl * s->hp.batch);
}

/* The statistics from the range [log alpha, padding, stats] (stats_block floats). */
static void stats_from(const sac_t *s, const float *blk, sac_stats_t *out) {
  const float *st = blk + (s->n_dev - s->off_alpha);
  out->critic_loss = st[0];
  out->mean_q = st[1];
  out->actor_loss = st[2];
  out->entropy = st[3];
  out->alpha_loss = st[4];
  out->alpha = expf(blk[0]);
}

int sac_stats_fetch(sac_t *s, int slot) {
  if (slot < 0 || slot > 1)
    return SAC_EINVAL;
  return fetch_slot(s, SLOT_STATS + slot, log_alpha(s), stats_block(s));
}

int sac_stats_collect(sac_t *s, int slot, sac_stats_t *out) {
  if (slot < 0 || slot > 1)
    return SAC_EINVAL;
  int rc = collect_slot(s, SLOT_STATS + slot, s->host, stats_block(s));
  if (rc == 0)
    stats_from(s, s->host, out);
  return rc;
}

int sac_stats_finite(const sac_stats_t *st) {
  return isfinite(st->critic_loss) && isfinite(st->actor_loss) && isfinite(st->alpha_loss);
}

int sac_actor_fetch(sac_t *s, int slot) {
  if (slot < 0 || slot > 1)
    return SAC_EINVAL;
  return fetch_slot(s, SLOT_ACTOR + slot, actor_params(s), s->al.len);
}

int sac_actor_collect(sac_t *s, int slot, float *out) {
  if (slot < 0 || slot > 1)
    return SAC_EINVAL;
  int rc = collect_slot(s, SLOT_ACTOR + slot, s->host, s->al.len);
  if (rc == 0)
    repack(s, 0, s->n_actor_spans, 0, 0, out, s->host, s->n_actor, 1);
  return rc;
}

int sac_load_batch(sac_t *s, const sac_host_batch_t *b, int staged) {
  const sac_backend_ops_t *ops = s->be->ops;
  const size_t B = (size_t)s->hp.batch, O = (size_t)s->hp.obs_dim, A = (size_t)s->hp.act_dim;
  sac_batch_t *d = &s->batch;
  float *dst[6] = {d->obs, d->next_obs, d->action, d->reward, d->terminated, d->weights};
  const float *src[6] = {b->obs, b->next_obs, b->action, b->reward, b->terminated, b->weights};
  const size_t n[6] = {B * O, B * O, B * A, B, B, B};
  const int use_stage = staged && ops->stage && ops->stage_commit;
  int rc = 0;
  for (int i = 0; i < 6 && rc == 0; i++)
    if (src[i])
      rc = use_stage ? ops->stage(s->be, dst[i], src[i], n[i]) : ops->upload(s->be, dst[i], src[i], n[i]);
  if (rc == 0 && use_stage)
    rc = ops->stage_commit(s->be);
  return rc;
}

int sac_batch_slots_at(sac_t *s, int j, int weights, sac_batch_slots_t *out) {
  const sac_backend_ops_t *ops = s->be->ops;
  const size_t B = (size_t)s->hp.batch, O = (size_t)s->hp.obs_dim, A = (size_t)s->hp.act_dim;
  *out = (sac_batch_slots_t){0};
  if (j < 0 || j >= s->upl)
    return SAC_EINVAL;
  if (!ops->stage_at)
    return SAC_EUNSUPPORTED;
  const batch_set_t *d = &s->sets[j];
  /* room for every batch of the launch first: no part asked for later moves this one */
  int rc = ops->stage_reserve
               ? ops->stage_reserve(s->be, (size_t)s->upl * (2 * B * O + B * A + 3 * B), 6 * s->upl)
               : 0;
  if (rc)
    return rc;
  *out = (sac_batch_slots_t){.obs = ops->stage_at(s->be, d->obs2, B * O),
                             .next_obs = ops->stage_at(s->be, d->obs2 + B * O, B * O),
                             .action = ops->stage_at(s->be, d->action, B * A),
                             .reward = ops->stage_at(s->be, d->reward, B),
                             .terminated = ops->stage_at(s->be, d->terminated, B),
                             .weights = weights ? ops->stage_at(s->be, d->weights, B) : NULL};
  if (!out->obs || !out->next_obs || !out->action || !out->reward || !out->terminated ||
      (weights && !out->weights)) {
    *out = (sac_batch_slots_t){0};
    return SAC_EBACKEND;
  }
  return 0;
}

int sac_batch_slots(sac_t *s, int weights, sac_batch_slots_t *out) {
  return sac_batch_slots_at(s, 0, weights, out);
}

int sac_batch_commit(sac_t *s) {
  const sac_backend_ops_t *ops = s->be->ops;
  return ops->stage_commit ? ops->stage_commit(s->be) : 0;
}

int sac_get_actor(sac_t *s, float *out) {
  int rc = s->be->ops->download(s->be, s->host, actor_params(s), s->al.len);
  if (rc == 0)
    repack(s, 0, s->n_actor_spans, 0, 0, out, s->host, s->n_actor, 1);
  return rc;
}

static float *buffer(sac_t *s, int which) {
  switch (which) {
  case SAC_BUF_PARAMS:
    return s->params;
  case SAC_BUF_GRADS:
    return s->grads;
  case SAC_BUF_TARGET:
    return s->target;
  case SAC_BUF_ADAM_M:
    return s->m;
  case SAC_BUF_ADAM_V:
    return s->v;
  case SAC_BUF_STEPS:
    return s->steps;
  default:
    return NULL;
  }
}

size_t sac_buffer_len(const sac_t *s, int which) {
  switch (which) {
  case SAC_BUF_TARGET:
    return s->n_critic;
  case SAC_BUF_STEPS:
    return 3;
  default:
    return s->n_params;
  }
}

/* The packed buffer `which` as a range of the padded layout: spans [*from, *to), packed
 * offset *p0 and padded offset *q0 of its first float, *len padded floats. 0: not a
 * parameter-shaped buffer (steps: same in both layouts). */
static int padded_range(const sac_t *s, int which, int *from, int *to, size_t *p0, size_t *q0, size_t *len) {
  if (which == SAC_BUF_STEPS)
    return 0;
  if (which == SAC_BUF_TARGET)
    *from = s->n_actor_spans, *to = s->n_spans - 1, *p0 = s->n_actor, *q0 = s->off_critic, *len = s->cl.len;
  else
    *from = 0, *to = s->n_spans, *p0 = 0, *q0 = 0, *len = s->n_dev;
  return 1;
}

int sac_get_buffer(sac_t *s, int which, float *out, size_t n) {
  float *p = buffer(s, which);
  if (!p || n > sac_buffer_len(s, which))
    return SAC_EINVAL;
  int from, to;
  size_t p0, q0, len;
  if (!padded_range(s, which, &from, &to, &p0, &q0, &len))
    return s->be->ops->download(s->be, out, p, n);
  int rc = s->be->ops->download(s->be, s->host, p, len);
  if (rc == 0)
    repack(s, from, to, p0, q0, out, s->host, n, 1);
  return rc;
}

int sac_set_buffer(sac_t *s, int which, const float *in, size_t n) {
  float *p = buffer(s, which);
  if (!p || n > sac_buffer_len(s, which))
    return SAC_EINVAL;
  int from, to;
  size_t p0, q0, len;
  if (!padded_range(s, which, &from, &to, &p0, &q0, &len))
    return s->be->ops->upload(s->be, p, in, n);
  /* the padding stays zero; a partial write keeps the floats after n */
  int rc = n < sac_buffer_len(s, which) ? s->be->ops->download(s->be, s->host, p, len) : 0;
  if (rc)
    return rc;
  if (n == sac_buffer_len(s, which))
    memset(s->host, 0, len * sizeof(float));
  repack(s, from, to, p0, q0, (float *)in, s->host, n, 0);
  return s->be->ops->upload(s->be, p, s->host, len);
}

int sac_get_noise(sac_t *s, int tag, float *out) {
  size_t n = (size_t)s->hp.batch * s->hp.act_dim;
  return s->be->ops->download(s->be, out, tag == NOISE_NEXT ? s->eps2 + n : s->eps2, n);
}

int sac_get_scaler(sac_t *s, sac_scaler_state_t *out) {
  const sac_backend_ops_t *ops = s->be->ops;
  double scale, good;
  if (!ops->get_metric || ops->get_metric(s->be, "loss_scale_good", &good) != 0 ||
      ops->get_metric(s->be, "loss_scale", &scale) != 0)
    return SAC_ENOTFOUND;
  out->scale = (float)scale;
  out->good = (int32_t)good;
  return 0;
}

int sac_set_scaler(sac_t *s, const sac_scaler_state_t *in) {
  const sac_backend_ops_t *ops = s->be->ops;
  double good;
  if (!ops->get_metric || !ops->set_option || ops->get_metric(s->be, "loss_scale_good", &good) != 0)
    return SAC_ENOTFOUND;
  if (!(in->scale > 0.0f) || isinf(in->scale) || in->good < 0)
    return SAC_EINVAL;
  char v[64];
  snprintf(v, sizeof v, "%.9g", (double)in->scale);
  int rc = ops->set_option(s->be, "loss_scale", v); /* also zeroes the growth counter */
  if (rc == 0) {
    snprintf(v, sizeof v, "%d", (int)in->good);
    rc = ops->set_option(s->be, "loss_scale_good", v);
  }
  return rc;
}
