/* Soft Actor-Critic (Haarnoja et al. 2018, v2), written once against the backend
 * interface (backend.h): tanh-squashed Gaussian policy, twin critics with target copies,
 * clipped double-Q target with the entropy term, learned temperature (log alpha), Adam
 * and Polyak over flat parameter buffers. See ../shared/REFERENCE.md for the equations.
 *
 * All state lives in backend memory allocated by sac_new; sac_update allocates nothing.
 * One sac_t is used by one thread. With the cpu backend and a fixed seed, updates are
 * deterministic (the policy noise is a pure function of seed, step and index). */
#ifndef SAC_LEARNER_SAC_H
#define SAC_LEARNER_SAC_H
#include <stddef.h>
#include <stdint.h>

#include "common/mlp.h"
#include "learner/backend.h"

typedef struct {
  int obs_dim, act_dim;
  int hidden, depth; /* hidden width and number of hidden layers (actor and critics) */
  int batch;
  float gamma, tau;
  float lr_actor, lr_critic, lr_alpha;
  float init_alpha;     /* initial temperature */
  int autotune_alpha;   /* 0: alpha stays at init_alpha */
  float target_entropy; /* NAN: -act_dim */
  float log_std_min, log_std_max;
  int policy_delay; /* actor and alpha update every policy_delay critic updates */
  uint64_t seed;
  int recompute; /* 1: keep every ~sqrt(depth)-th hidden activation and recompute the
                    others in the backward (gradient checkpointing); same results */
} sac_hparams_t;

/* The defaults of DESIGN.md §5 (lr 3e-4, batch 256, 2 x 256, gamma 0.99, tau 0.005). */
void sac_hparams_default(sac_hparams_t *hp, int obs_dim, int act_dim);

/* Statistics of the last update (downloaded by sac_stats). */
typedef struct {
  float critic_loss, actor_loss, alpha_loss;
  float alpha, entropy, mean_q;
} sac_stats_t;

/* The batch the next update reads: backend memory, filled by the caller (upload, or
 * written in place by the cpu backend's callers). weights may be left all 1. */
typedef struct {
  float *obs;        /* (B, obs_dim); next_obs follows it directly */
  float *action;     /* (B, act_dim), in [-1, 1] */
  float *reward;     /* (B) */
  float *terminated; /* (B) 1 only for true termination: truncation bootstraps */
  float *next_obs;   /* (B, obs_dim) */
  float *weights;    /* (B) importance weights (prioritised replay), 1 otherwise */
} sac_batch_t;

typedef struct sac sac_t;

/* The largest rows x cols of any one buffer or op operand: BLAS and the cuda kernels take
 * int dimensions and index some operands with int. The widest is the critics' hidden
 * activations (2B, 2H), so batch x hidden <= SAC_MAX_OPERAND / 4 (about 5.4e8). */
#define SAC_MAX_OPERAND 2147483647
/* Checks hyperparameters without allocating: 0, or SAC_EINVAL with the reason (naming the
 * learner options to change) in why. sac_new runs it first. */
int sac_hparams_check(const sac_hparams_t *hp, char *why, size_t cap);
/* Bytes of backend memory sac_new allocates for hp (plus its one host buffer), before the
 * padding of activation rows a backend may ask for (act_ld: the cpu backend's adds 1/16
 * to the activations at hidden 256); 0 when hp fails sac_hparams_check. */
size_t sac_state_bytes(const sac_hparams_t *hp);

/* Allocates and initialises networks (PyTorch's default init from seed), targets equal
 * to the critics, Adam state zero, log alpha = log(init_alpha). The backend is borrowed.
 * Returns 0, SAC_EINVAL (bad hyperparameters or sizes the backends cannot index, logged) or
 * SAC_ENOMEM. */
int sac_new(const sac_hparams_t *hp, sac_backend_t *be, sac_t **out);
void sac_destroy(sac_t **s);

const sac_hparams_t *sac_hparams(const sac_t *s);
const sac_mlp_desc_t *sac_actor_desc(const sac_t *s);
const sac_mlp_desc_t *sac_critic_desc(const sac_t *s);
sac_batch_t *sac_batch(sac_t *s);
uint64_t sac_step(const sac_t *s);

/* One SAC update on the current batch: critic step, then (every policy_delay) actor and
 * alpha steps, then Polyak. Enqueued on the backend. Without a gradient hook it cannot
 * fail (returns 0); with one it returns the hook's error, and the update stopped at that
 * hook: the state is then partly updated and the learner must not go on with it. With
 * the loss guard on and the unfused ops (sac_set_loss_guard) it may also return
 * SAC_ENONFINITE, as described there; the learner may then go on with the next batch. */
int sac_update(sac_t *s);

/* Gradient hook (data-parallel learners, learner/dp.h, average their gradients across
 * ranks here). Called on the caller's thread inside sac_update, after a gradient is
 * computed and before its Adam step: phase SAC_GRAD_CRITIC with one segment (the
 * critics' gradients), phase SAC_GRAD_ACTOR with the actor's gradients and, when
 * autotune_alpha, log alpha's (1 float) as a second segment. Segments are backend
 * memory, to be changed in place; the backend's ops enqueued before may still be
 * running (sync first to read them on the host). Returns 0 or a negative code.
 * With a hook set, updates run eagerly (no graph capture): a hook runs on the host
 * between ops. NULL removes it. Setup time only. */
enum { SAC_GRAD_CRITIC = 0, SAC_GRAD_ACTOR = 1 };
typedef int (*sac_grad_hook_t)(void *user, int phase, float *const *segs, const size_t *ns, int n_segs);
void sac_set_grad_hook(sac_t *s, sac_grad_hook_t fn, void *user);
/* Loss guard (huge finite rewards made the critic loss inf and the learner went on). With
 * it on, a step whose loss is NaN or Inf is not applied: a bad critic loss (or mean q)
 * leaves the whole update unapplied (parameters, Adam moments and step counters, target
 * networks); a bad actor or alpha loss leaves the critic step of that update applied and
 * the actor, alpha and Polyak steps not. With the fused optimizer tails (adam_polyak:
 * every backend's default) the verdict is taken on the backend, by the optimizer op
 * itself: sac_update returns 0 without waiting, graphs stay on, and the caller learns of
 * the skip from the update's statistics (sac_stats_fetch / sac_stats_collect one update
 * late, sac_stats_finite false); sac_step counts the update as enqueued. With the
 * unfused ops (sac_set_unfused) the statistics are checked on the host before each
 * step (a wait for the backend) and sac_update returns SAC_ENONFINITE, the step counter
 * then unchanged for a bad critic loss. Setup time only. */
void sac_set_loss_guard(sac_t *s, int on);
/* 1: issue the unfused ops even where the backend has fused ones (adam_polyak): for the
 * tests that compare the two and the kernel counts of sac-bench-learner. Setup time. */
void sac_set_unfused(sac_t *s, int unfused);
/* Replaces the backend by a wrapper of the same backend (same impl: the buffers stay
 * valid), e.g. op_count.c's counting proxy. SAC_EINVAL for another backend. Setup time. */
int sac_swap_backend(sac_t *s, sac_backend_t *be);
/* Copies the last update's statistics to the host (waits for the backend: one
 * blocking sync; for logs and tests, not once per update). */
int sac_stats(sac_t *s, sac_stats_t *out);
/* The same one update late, without a blocking sync per update: log alpha and the loss
 * statistics are one range of backend memory, fetched by one copy. As the priorities:
 * sac_stats_fetch right after update N into slot N & 1, update N + 1, then
 * sac_stats_collect N (waits for that copy only). 0, SAC_EINVAL (slot not 0 or 1) or a
 * backend error. */
int sac_stats_fetch(sac_t *s, int slot);
int sac_stats_collect(sac_t *s, int slot, sac_stats_t *out);
/* 1 when the critic, actor and alpha losses of st are finite (the learner's verdict on
 * an update, one update late). */
int sac_stats_finite(const sac_stats_t *st);
/* |min(q1, q2) - y| of the last critic step on each batch, (K B) floats with K =
 * sac_updates_per_launch (batch j's at j B; K is 1 unless set), for priority updates.
 * Waits for every op enqueued so far. */
int sac_td_errors(sac_t *s, float *out);
/* The same (K B floats), one update late, without a synchronisation per update (issue 16):
 * sac_td_errors_fetch, right after sac_update, enqueues a copy of that update's values
 * into slot (0 or 1); sac_td_errors_collect waits for that copy only (not for the
 * updates enqueued after it) and hands the values out. Use the two slots alternately:
 * fetch N into slot N & 1, update N + 1, collect N. */
int sac_td_errors_fetch(sac_t *s, int slot);
int sac_td_errors_collect(sac_t *s, int slot, float *out);

/* A sampled batch in host memory (the replay client's, --mode local's ring). */
typedef struct {
  const float *obs, *next_obs, *action; /* (B, obs_dim), (B, obs_dim), (B, act_dim) */
  const float *reward, *terminated;     /* (B) */
  const float *weights;                 /* (B) importance weights; NULL: keep the current ones */
} sac_host_batch_t;
/* Makes b the batch the next update reads; b is reusable on return. staged 1 (the
 * learner's path): through the backend's stage / stage_commit, so on a GPU the copy
 * overlaps the update already enqueued; a backend without staging uploads. staged 0:
 * plain uploads (kept to show the two give identical results). 0 or a backend error. */
int sac_load_batch(sac_t *s, const sac_host_batch_t *b, int staged);
/* The batch in place (a backend with stage_at: cpu, cuda, null): where the next batch is
 * written so that no copy follows (the learner's replay client copies each reply there
 * straight from the message; on cuda that is the pinned memory the one host-to-device
 * copy of the commit reads). obs, next_obs, action, reward, terminated as
 * sac_host_batch_t's; weights only when `weights` (prioritised replay), else NULL (the
 * current ones are kept). Ask before writing each batch (the cuda backend alternates
 * between two buffers), write them whole, then sac_batch_commit makes them the batch
 * the next update reads. sac_batch_slots_at: batch j of the next launch (0 <= j <
 * sac_updates_per_launch; sac_batch_slots is j = 0); one commit after all of them.
 * 0, SAC_EINVAL (j), SAC_EBACKEND (the backend could not hand out its memory), or
 * SAC_EUNSUPPORTED (no stage_at; use sac_load_batch). */
typedef struct {
  float *obs, *next_obs, *action, *reward, *terminated, *weights;
} sac_batch_slots_t;
int sac_batch_slots(sac_t *s, int weights, sac_batch_slots_t *out);
int sac_batch_slots_at(sac_t *s, int j, int weights, sac_batch_slots_t *out);
int sac_batch_commit(sac_t *s);

/* Several updates per launch (issue 33): K updates, each on its own batch, recorded as
 * one graph where the backend has graphs (one launch for K updates, so the host work per
 * update no longer bounds the rate), their K batches staged by one commit (one
 * host-to-device copy on cuda). The same results, bit for bit, as K sac_update calls on
 * the same batches (tests/test_sac.c, test_backend_cuda.c).
 * sac_set_updates_per_launch: setup time; allocates K - 1 more batches (their weights 1).
 * 0, SAC_EINVAL (K outside [1, SAC_MAX_UPDATES_PER_LAUNCH]) or SAC_ENOMEM (K unchanged).
 * sac_load_batches: batches b[0..n) as the batches 0..n-1 of the next launch, staged and
 * committed once (n <= K; a batch not loaded keeps what it held). 0 or a backend error.
 * sac_update_launch: K updates, update j on batch j, the step counter advanced by K. With
 * K = 1 it is sac_update. One graph for the K updates needs K to be a multiple of
 * policy_delay; else they run as K updates (graphs for batch 0 only). Errors as
 * sac_update's (the updates after a failed one are not run). */
#define SAC_MAX_UPDATES_PER_LAUNCH 16
int sac_set_updates_per_launch(sac_t *s, int k);
int sac_updates_per_launch(const sac_t *s);
int sac_load_batches(sac_t *s, const sac_host_batch_t *b, int n);
int sac_update_launch(sac_t *s);

/* Flat parameter layout: [actor | critics | log alpha]. */
size_t sac_param_count(const sac_t *s);
size_t sac_actor_param_count(const sac_t *s);
/* The backend buffers hold the parameters padded (issue 16): the actor block, the
 * critics' block, log alpha and, inside the two MLPs, every layer's W and b start on a
 * 256-byte boundary; the padding is zero. sac_get_buffer, sac_set_buffer, sac_get_actor
 * and checkpoints use the packed layout above, so nothing outside sac.c sees it, except
 * the gradient hook's segments (padded blocks; sac_grad_capacity floats at most, the
 * padding zero on every rank). sac_layout says where the blocks are (for tests):
 * offsets in floats from each buffer's start. */
typedef struct {
  size_t critic, log_alpha, total;
  size_t actor_w[SAC_MLP_MAX_LAYERS], actor_b[SAC_MLP_MAX_LAYERS];
  size_t critic_w[SAC_MLP_MAX_LAYERS], critic_b[SAC_MLP_MAX_LAYERS];
  int n_layers;
  const float *params, *grads, *adam_m, *adam_v, *target; /* backend memory */
} sac_layout_t;
void sac_layout(const sac_t *s, sac_layout_t *out);
size_t sac_grad_capacity(const sac_t *s);
/* Copies the actor's parameters (the Weights layout) to host memory (a blocking sync). */
int sac_get_actor(sac_t *s, float *out);
/* The same without waiting for the updates enqueued after it: sac_actor_fetch enqueues a
 * copy of the actor as it stands into slot (0 or 1); sac_actor_collect waits for that
 * copy only and unpacks it into out (the Weights layout). The acting copy of --mode
 * local, one step late. 0, SAC_EINVAL or a backend error. */
int sac_actor_fetch(sac_t *s, int slot);
int sac_actor_collect(sac_t *s, int slot, float *out);

/* Test and checkpoint access to the state, host copies of backend buffers:
 * which = SAC_BUF_PARAMS / GRADS / TARGET / ADAM_M / ADAM_V (sac_param_count floats;
 * TARGET holds the critics' layout only) or SAC_BUF_STEPS (3: critic, actor, alpha Adam steps). */
enum { SAC_BUF_PARAMS, SAC_BUF_GRADS, SAC_BUF_TARGET, SAC_BUF_ADAM_M, SAC_BUF_ADAM_V, SAC_BUF_STEPS };
int sac_get_buffer(sac_t *s, int which, float *out, size_t n);
int sac_set_buffer(sac_t *s, int which, const float *in, size_t n);
size_t sac_buffer_len(const sac_t *s, int which);
void sac_set_step(sac_t *s, uint64_t step);
/* The Philox key of the update noise (derived from the seed): part of a checkpoint. */
void sac_get_noise_key(const sac_t *s, uint32_t key[2]);
void sac_set_noise_key(sac_t *s, const uint32_t key[2]);

/* The fp16 loss scaler's state (cuda backend in fp16): the scale and the updates
 * without overflow since it last changed. Part of a checkpoint, so a resumed fp16 run
 * goes on with the scale it had. sac_get_scaler: 0, or SAC_ENOTFOUND where the backend
 * has no loss scaler (cpu; cuda in fp32/tf32/bf16). sac_set_scaler: 0, SAC_ENOTFOUND
 * or SAC_EINVAL (scale not finite and > 0, good < 0). Setup time only. */
typedef struct {
  float scale;
  int32_t good;
} sac_scaler_state_t;
int sac_get_scaler(sac_t *s, sac_scaler_state_t *out);
int sac_set_scaler(sac_t *s, const sac_scaler_state_t *in);

/* Where an update's time goes, filled when a profile is attached (the backend is
 * synchronised between phases, which costs a little on a GPU). Seconds, accumulated. */
typedef struct {
  double target;    /* a' ~ pi(s'), target critics, y */
  double critic;    /* critic forward, loss, backward */
  double actor;     /* policy forward, critics on (s, a~), backward through both */
  double optimizer; /* Adam (critics, actor, alpha) and Polyak */
  int64_t updates;
} sac_profile_t;
/* Attaches (or with NULL detaches) a profile; the caller owns it. */
void sac_set_profile(sac_t *s, sac_profile_t *prof);

/* Pieces of sac_update, exposed for gradient checks, in this order: the policy on
 * [obs; next_obs] with the current step's noise; the critic loss gradient into GRADS'
 * critic part (nothing applied); the actor and alpha loss gradients into GRADS' actor
 * and log-alpha parts. With the fused ops the critics read the batch's obs, next_obs and
 * action as sac_forward_policy copied them (their joined input rows): a batch changed
 * after it is seen from the next sac_forward_policy on (reward, terminated and weights
 * at once). */
void sac_forward_policy(sac_t *s);
void sac_compute_critic_grads(sac_t *s);
void sac_compute_actor_grads(sac_t *s);
/* The noise the current step uses: eps for a' (tag 0) or for the policy loss (tag 1),
 * (B, act_dim) on the host. */
int sac_get_noise(sac_t *s, int tag, float *out);

#endif
