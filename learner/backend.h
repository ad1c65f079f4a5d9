/* The learner's compute backend: a struct of function pointers (as ggml's backends) that
 * the SAC algorithm (sac.c) is written against once. Backends: "cpu" (OpenBLAS sgemm,
 * the readable reference and the fallback), "cuda" (cuBLASLt + a few kernels) and "null"
 * (no math: a measuring tool for the service around the update, backend_null.c).
 *
 * Every float pointer an op receives is backend memory from ->alloc (host memory for
 * cpu, device memory for cuda). Ops are enqueued in order and may run asynchronously;
 * ->sync waits for them. Ops never allocate. Scalars that change during training
 * (log alpha, Adam step counters) live in backend memory, so a whole update can be
 * captured and replayed (CUDA graphs) without host round trips.
 *
 * Layouts: matrices are row-major. An "ensemble" of K members (K = 2 for the twin
 * critics) keeps its activations as (B x K*n) with member k in columns [k*n, (k+1)*n),
 * and its parameters as described in common/mlp.h. Shapes are written as (rows, cols). */
#ifndef SAC_LEARNER_BACKEND_H
#define SAC_LEARNER_BACKEND_H
#include <stddef.h>
#include <stdint.h>

#include "common/mlp.h"

typedef struct sac_backend sac_backend_t;

/* One input segment of a linear layer: p (B, n) with leading dimension ld. For a
 * segment of K members (shared = 0), ms is the floats from one member's block to the
 * next's: 0 for members side by side in each row (member k at column k * n_in), else
 * each member a (B, n_in) block of its own at p + k * ms (act_members_apart). */
typedef struct {
  const float *p;
  int ld;
  int n;
  size_t ms;
} sac_seg_t;

/* A linear layer of an ensemble: Y_k = act(X_k W_k + b_k).
 * shared = 1: every member reads the same input, given as up to two segments side by
 * side (obs and action for the critics' first layer); member k's W_k then has
 * seg[0].n + seg[1].n rows, segment 0's rows first. Two segments that are adjacent in
 * memory (sac_segs_adjacent: each row [seg 0 | seg 1] at one leading dimension) are read
 * as one operand, one matmul where two would be.
 * shared = 0: one segment of K members' inputs, member k's at columns [k*n_in, (k+1)*n_in)
 * or, where seg[0].ms is not 0, in its own block (sac_seg_t). */
typedef struct {
  int B, n_in, n_out, K;
  int shared;
  int n_seg; /* 1 or 2 (2 only when shared) */
  sac_seg_t seg[2];
  const float *W, *b; /* K weight matrices (n_in, n_out) one after another; K biases */
  sac_act_t act;
  size_t out_ms; /* the output's (and its gradient's) member stride, as sac_seg_t's ms */
} sac_linear_t;

/* 1 when L's two input segments are one row-major block [seg 0 | seg 1]: segment 1 starts
 * right after segment 0's columns and both have the same leading dimension. */
static inline int sac_segs_adjacent(const sac_linear_t *L) {
  return L->shared && L->n_seg == 2 && L->seg[0].ld == L->seg[1].ld &&
         L->seg[1].p == L->seg[0].p + L->seg[0].n && L->seg[0].ld >= L->seg[0].n + L->seg[1].n;
}

typedef struct {
  float lr, beta1, beta2, eps;
} sac_adam_hp_t;

/* One parameter group of a multi-tensor Adam step (adam_polyak). */
typedef struct {
  float *p;
  const float *g;
  float *m, *v;
  size_t n;
  sac_adam_hp_t hp;
  float *t; /* the group's step counter (1 float of backend memory) */
} sac_adam_group_t;
#define SAC_ADAM_MAX_GROUPS 4

/* Scalars the fused SAC kernels read; pointers are backend memory. */
typedef struct {
  int B, A;
  float gamma;
  float log_std_min, log_std_max;
  float target_entropy;
  const float *log_alpha; /* (1) */
} sac_head_hp_t;

/* What the fused critic output op (q_head) runs after the critics' last layer, on the q
 * (B, 2) it just wrote, with the arguments of the op it stands for:
 * SAC_Q_TARGET: critic_target(h, r, term, q, logp, y);
 * SAC_Q_CRITIC_LOSS: critic_loss(h, q, y, w, dq, td, stats);
 * SAC_Q_ACTOR_ALPHA_LOSS: actor_alpha_loss(h, q, logp, dq, dlogp, stats, grad_alpha, stats_alpha). */
enum { SAC_Q_TARGET = 0, SAC_Q_CRITIC_LOSS = 1, SAC_Q_ACTOR_ALPHA_LOSS = 2 };
typedef struct {
  int then;
  const float *r, *term, *logp, *w;
  float *y; /* written by SAC_Q_TARGET, read by SAC_Q_CRITIC_LOSS */
  float *dq, *dlogp, *td, *stats, *grad_alpha, *stats_alpha;
} sac_q_head_t;

/* The layer below a fused backward (linear_bwd_act, policy_bwd). The fused layer's input
 * X (its one segment) is the output of the layer below after that layer's activation
 * act; once the fused layer's input gradient dX is written, dX = dX * act'(X) in place
 * and db (non-NULL) = the column sums of the result: what linear_bwd of the layer below
 * does first, so that layer's own linear_bwd then runs with act SAC_ACT_NONE and db NULL
 * (its weight and input gradients only). */
typedef struct {
  sac_act_t act;
  float *db;
} sac_below_t;

/* Row copies a fused op makes besides its math: rows x cols floats from src (leading
 * dimension lds) to dst (ldd); the regions are disjoint from each other and from
 * everything else the op reads or writes. */
typedef struct {
  const float *src;
  float *dst;
  int lds, ldd, rows, cols;
} sac_copy_t;
#define SAC_MAX_COPIES 3

/* What the fused policy output op (policy_fwd) runs besides the actor's last layer: the
 * noise normal2(eps, n, key, stream, tag0, tag1) with n = (rows / 2) * A (the two halves
 * of the rows), head_fwd(h, P, eps, a, lda, logp), and the copies. */
typedef struct {
  const uint32_t *key; /* 2 words */
  uint64_t stream;
  uint32_t tag0, tag1;
  float *eps; /* (rows, A) */
  float *a;   /* (rows, A, ld lda) */
  int lda;
  float *logp; /* (rows) */
  sac_copy_t copy[SAC_MAX_COPIES];
  int n_copy;
} sac_policy_fwd_t;

/* The largest action size for which the cuda backend's policy_bwd is one kernel (its
 * shared memory holds rows x 2A floats); above it the op issues the ops it stands for
 * (and the cpu backend counts those). */
#define SAC_POLICY_BWD_MAX_ACT 64

typedef struct sac_backend_ops {
  const char *name;
  /* --- memory (setup time only; never inside the update) --- */
  int (*alloc)(sac_backend_t *be, size_t n, float **out); /* zeroed; SAC_ENOMEM */
  void (*free)(sac_backend_t *be, float *p);
  int (*upload)(sac_backend_t *be, float *dst, const float *src, size_t n);
  int (*download)(sac_backend_t *be, float *dst, const float *src, size_t n);
  int (*sync)(sac_backend_t *be);
  void (*destroy)(sac_backend_t *be);

  /* --- compute --- */
  /* Y (B, K*n_out) with leading dimension ldy. */
  void (*linear_fwd)(sac_backend_t *be, const sac_linear_t *L, float *Y, int ldy);
  /* Backward of linear_fwd. dY (B, K*n_out, ld ldy) is the gradient at the layer's
   * output after its activation; it is overwritten with the gradient before the
   * activation, using Y (the forward output). Then, where non-NULL:
   * dW (K weight matrices) = X_k^T dY_k and db = column sums of dY_k (overwritten);
   * dX[s] (B, seg[s].n, ld ldx[s]) = sum over k of dY_k W_k^T restricted to segment s
   * (non-shared: one segment of K*n_in columns, member k into its own block). */
  void (*linear_bwd)(sac_backend_t *be, const sac_linear_t *L, float *dY, const float *Y, int ldy, float *dW,
                     float *db, float *dX[2], const int ldx[2]);
  /* n standard normals into out: element i is normal (2*(i/2) + i%2) of Philox block
   * (i/2, stream, tag) under key (common/philox.h). Identical bits on every backend. */
  void (*normal)(sac_backend_t *be, float *out, size_t n, const uint32_t key[2], uint64_t stream,
                 uint32_t tag);
  /* Tanh-Gaussian policy head. P (B, 2A) = (mu, raw log std); eps (B, A).
   * a (B, A, ld lda) = tanh(mu + exp(clamp(log std)) * eps);
   * logp (B) = sum_i [-eps^2/2 - log std - log(2 pi)/2 - 2 (log 2 - u - softplus(-2u))]. */
  void (*head_fwd)(sac_backend_t *be, const sac_head_hp_t *h, const float *P, const float *eps, float *a,
                   int lda, float *logp);
  /* Backward of head_fwd: from da (B, A, ld ldda; may be NULL = 0) and dlogp (B) to
   * dP (B, 2A). The clamp passes no gradient to log std outside [min, max]. */
  void (*head_bwd)(sac_backend_t *be, const sac_head_hp_t *h, const float *P, const float *eps,
                   const float *a, int lda, const float *da, int ldda, const float *dlogp, float *dP);
  /* y = r + gamma (1 - terminated) (min(qt1, qt2) - alpha logp_next); qt (B, 2). */
  void (*critic_target)(sac_backend_t *be, const sac_head_hp_t *h, const float *r, const float *term,
                        const float *qt, const float *logp_next, float *y);
  /* L = 1/2 mean w (q1 - y)^2 + 1/2 mean w (q2 - y)^2 (w = 1 where w is NULL);
   * dq (B, 2) = dL/dq; td (B) = |min(q1, q2) - y| (priorities); stats[0] = L,
   * stats[1] = mean q1. */
  void (*critic_loss)(sac_backend_t *be, const sac_head_hp_t *h, const float *q, const float *y,
                      const float *w, float *dq, float *td, float *stats);
  /* L = mean(alpha logp - min(q1, q2)); dq (B, 2), dlogp (B); stats[0] = L,
   * stats[1] = -mean(logp) (the policy entropy estimate). */
  void (*actor_loss)(sac_backend_t *be, const sac_head_hp_t *h, const float *q, const float *logp, float *dq,
                     float *dlogp, float *stats);
  /* L = -mean(log alpha (logp + target_entropy)); grad[0] = dL/dlog alpha; stats[0] = L. */
  void (*alpha_loss)(sac_backend_t *be, const sac_head_hp_t *h, const float *logp, float *grad, float *stats);
  /* (*t) += 1, then one bias-corrected Adam step (PyTorch's formula) over n parameters. */
  void (*adam)(sac_backend_t *be, float *p, const float *g, float *m, float *v, size_t n,
               const sac_adam_hp_t *hp, float *t);
  /* tgt = (1 - tau) tgt + tau src over n floats. */
  void (*polyak)(sac_backend_t *be, float *tgt, const float *src, size_t n, float tau);

  /* --- optional: NULL where a backend has no such thing (the cpu backend) --- */
  /* Called by sac_update once at the end of every update, in order with the ops: the
   * fp16 loss scaler of the cuda backend adjusts its scale here. */
  void (*update_end)(sac_backend_t *be);
  /* Graph capture (CUDA graphs). Between graph_begin and graph_end the ops are recorded,
   * not run, as graph id (0 <= id < SAC_BACKEND_MAX_GRAPHS, replacing an older one);
   * graph_launch enqueues the recorded ops. `stream` is the noise stream (update step)
   * at capture and at launch: each recorded normal op draws from its recorded stream
   * plus (launch stream - capture stream), so one graph serves every step. Return 0,
   * SAC_EUNSUPPORTED (graphs switched off), SAC_ESTATE (no such graph) or SAC_EBACKEND;
   * after a failed graph_end nothing ran and the caller runs the ops itself. `steps` at
   * graph_end: how many consecutive noise streams the recorded ops use (the updates
   * recorded: several per graph, sac_set_updates_per_launch); a launch at stream s is
   * expected to be followed by one at s + steps, which needs no host write. */
  int (*graph_begin)(sac_backend_t *be, int id, uint64_t stream);
  int (*graph_end)(sac_backend_t *be, int id, uint64_t steps);
  int (*graph_launch)(sac_backend_t *be, int id, uint64_t stream);
  /* Batch staging: stage copies n floats of host src (reusable on return) towards
   * backend memory dst through pinned double buffers on a copy stream that overlaps
   * the ops already enqueued; stage_commit makes the ops enqueued after it read the
   * staged data at their destinations. 0, SAC_ENOMEM or SAC_EBACKEND. */
  int (*stage)(sac_backend_t *be, float *dst, const float *src, size_t n);
  int (*stage_commit)(sac_backend_t *be);
  /* Batch staging in place (optional): the host memory where the caller writes the n
   * floats bound for backend memory dst (a batch buffer) itself, instead of handing them
   * to stage: the learner's replay client copies each sample reply there straight from
   * the message (replay/client.h, sac_replay_client_sample_into). They are the batch the
   * ops read from the next stage_commit on (from at once where the memory returned is dst
   * itself: the host backends). Ask again after every stage_commit: the cuda backend
   * hands out the other of its two pinned buffers then (the one whose copy is done, so
   * it may wait for that copy); between two commits the same dst gets the same pointer.
   * Parts given to stage and to stage_at may be mixed in one commit. Never allocates once
   * a batch of this size has been staged (the first one grows the pinned buffers; call
   * stage_reserve first). NULL on failure (logged); the op NULL where the backend has no
   * such thing: stage (or upload) only. */
  float *(*stage_at)(sac_backend_t *be, float *dst, size_t n);
  /* Optional, with stage_at: makes room for a commit of at most `parts` parts of n floats
   * in all (those handed out already included), before asking for them: a part that had
   * to make room itself could move the parts handed out before it in the same commit. 0,
   * SAC_ENOMEM or SAC_EBACKEND. NULL: stage_at never moves a part (host backends). */
  int (*stage_reserve)(sac_backend_t *be, size_t n, int parts);
  /* Named settings and readings (see docs/CUDA.md for the cuda backend's): set_option
   * returns 0, SAC_ENOTFOUND (unknown key) or SAC_EINVAL (bad value); get_metric 0 or
   * SAC_ENOTFOUND. Setup time only: not between graph_begin and graph_end. */
  int (*set_option)(sac_backend_t *be, const char *key, const char *value);
  /* Readings every backend with get_metric keeps (cpu, cuda), counted since creation:
   * "blocking_syncs": calls that wait for the ops enqueued so far (download, sync, a
   * pinned upload, reading the loss scaler); "kernel_launches": kernels and matmul calls
   * the ops enqueued (or recorded into a graph), the cpu backend counting what the cuda
   * backend's ops launch in fp32 for the same calls. sac_backend_counts reads both.
   * Backends with staging also keep "staged_batches" (stage_commit calls that carried a
   * batch) and "host_copies" (host-side copies of those batches on their way to the ops:
   * 1 for a batch written in place through stage_at, the writer's copy from the message;
   * 2 for one that passed through stage, the caller's decode into its own buffer and the
   * backend's copy from there), so host_copies / staged_batches is the copies per batch. */
  int (*get_metric)(sac_backend_t *be, const char *key, double *out);
  /* Data-parallel fp16. A backend that skips an Adam step on an overflow it saw in its
   * own backward pass (the cuda backend in fp16) must make that decision together with
   * the other ranks, or their weights part for good. overflow_export writes the pending
   * step's overflow flag as 0.0f or 1.0f into dst (1 float of backend memory);
   * overflow_import sets the flag from src (nonzero: overflow). The data-parallel hook
   * all-reduces the slot with the gradients, so every rank skips, or none. In order with
   * the ops; graph-capturable. NULL (both) where a backend never skips a step (cpu). */
  void (*overflow_export)(sac_backend_t *be, float *dst);
  void (*overflow_import)(sac_backend_t *be, const float *src);
  /* The device stream the ops are enqueued on (a cudaStream_t), for a collective that
   * must run in order with them (learner/collective.h, nccl). Cannot fail. */
  void *(*native_stream)(sac_backend_t *be);
  /* Reading a small result back without waiting for the ops enqueued after it (PER
   * priorities, the update statistics and the acting actor one update late,
   * docs/LEARNER.md): fetch enqueues, in order with the ops, a copy of n floats of src
   * into the backend's host slot `slot` (0 <= slot < SAC_BACKEND_FETCH_SLOTS); fetch_wait
   * waits for that copy only (not for later ops) and copies it into host dst. Not
   * between graph_begin and graph_end. 0, SAC_EINVAL, SAC_ENOMEM or SAC_EBACKEND. NULL
   * (both): sac.c then downloads at fetch time (a blocking sync). */
  int (*fetch)(sac_backend_t *be, int slot, const float *src, size_t n);
  int (*fetch_wait)(sac_backend_t *be, int slot, float *dst, size_t n);
  /* Fused (issue 16, fewer kernels): the adam op on each of n_groups groups in order,
   * then polyak(tgt, src, n_polyak, tau) when n_polyak > 0, as one launch. src is either
   * disjoint from every group's p or exactly one group's whole p (then the Polyak reads
   * it after that Adam step, as the unfused order does). Results equal the unfused ops'
   * (tests/test_backend_cpu.c, test_backend_cuda.c). NULL: sac.c issues the ops one by one. */
  /* Fused: actor_loss(h, q, logp, dq, dlogp, stats_pi) and alpha_loss(h, logp, grad_alpha,
   * stats_alpha) as one launch (both read only the forward values and log alpha). NULL:
   * sac.c issues the two. */
  /* Fused: normal(out, n, key, stream, tag0) and normal(out + n, n, key, stream, tag1) as
   * one launch (the policy noise of s and of s'). NULL: sac.c issues the two. */
  void (*normal2)(sac_backend_t *be, float *out, size_t n, const uint32_t key[2], uint64_t stream,
                  uint32_t tag0, uint32_t tag1);
  void (*actor_alpha_loss)(sac_backend_t *be, const sac_head_hp_t *h, const float *q, const float *logp,
                           float *dq, float *dlogp, float *stats_pi, float *grad_alpha, float *stats_alpha);
  /* guard (NULL: none): the loss guard's verdict, read by the op itself when it runs.
   * The whole op (every group's Adam step and step counter, and the Polyak) does nothing
   * when guard[i] is NaN or Inf for some bit i set in guard_mask (i < 32), as PyTorch's
   * GradScaler skips optimizer.step on found_inf: no host round trip, graph-capturable. */
  void (*adam_polyak)(sac_backend_t *be, const sac_adam_group_t *g, int n_groups, float *tgt,
                      const float *src, size_t n_polyak, float tau, const float *guard, unsigned guard_mask);
  /* Fused: linear_fwd(L, q, 2) of the twin critics' last layer (K = 2, one output each),
   * then the op q->then names (sac_q_head_t) on that q, as one launch: the critic target,
   * the critic loss or the actor and alpha losses read q where it is computed. Results
   * equal the two ops' (tests/test_backend_cpu.c, test_backend_cuda.c). NULL: sac.c
   * issues the two. */
  void (*q_head)(sac_backend_t *be, const sac_linear_t *L, float *q, const sac_head_hp_t *h,
                 const sac_q_head_t *a);
  /* Fused (issue 25, the policy's output): the noise, the actor's last layer
   * linear_fwd(L, P, 2A) (K = 1, not shared, no activation, h->B = L->B rows, an even
   * number), head_fwd on P and the copies, as sac_policy_fwd_t says, as one launch. The
   * copies let the critics read [obs | action] rows as one operand (sac_segs_adjacent)
   * without the batch being stored that way. Results equal the ops' (tests/
   * test_backend_cpu.c, test_backend_cuda.c). NULL: sac.c issues them. */
  void (*policy_fwd)(sac_backend_t *be, const sac_linear_t *L, float *P, const sac_head_hp_t *h,
                     const sac_policy_fwd_t *a);
  /* Fused: linear_bwd(L, dY, Y, ldy, dW, db, {dX}, {ldx}) of a layer that is not shared
   * (one input segment; dX non-NULL, ldx = L->seg[0].ld), then the activation backward
   * and bias gradient of the layer below on dX (sac_below_t), as one launch where the
   * cuda backend has a kernel for L (the critics' one-wide last layer), else its ops.
   * NULL: sac.c issues linear_bwd twice. */
  void (*linear_bwd_act)(sac_backend_t *be, const sac_linear_t *L, float *dY, const float *Y, int ldy,
                         float *dW, float *db, float *dX, int ldx, const sac_below_t *below);
  /* Fused (the policy's backward through its output): head_bwd(h, P, eps, a, lda, da,
   * ldda, dlogp, dP), then linear_bwd_act(L, dP, P, 2A, dW, db, dX, ldx, below) of the
   * actor's last layer (h->B = L->B), as one launch for A <= SAC_POLICY_BWD_MAX_ACT.
   * NULL: sac.c issues head_bwd and linear_bwd_act (or linear_bwd twice). */
  void (*policy_bwd)(sac_backend_t *be, const sac_head_hp_t *h, const float *P, const float *eps,
                     const float *a, int lda, const float *da, int ldda, const float *dlogp, float *dP,
                     const sac_linear_t *L, float *dW, float *db, float *dX, int ldx,
                     const sac_below_t *below);

  /* --- optional (issue 33) --- */
  /* Called by sac.c at the start of every update, in order with the ops. The cuda backend
   * zeroes its completion counters here when it runs eagerly (graph_launch does it before
   * every launch), so a launch that stopped half way cannot leave a later one skipping
   * its last-block work. NULL: nothing to do (cpu). */
  void (*update_begin)(sac_backend_t *be);
  /* Per-op timing, for profiling (sac_profile_update_ops, sac-bench-learner --op_profile).
   * timing_begin starts a recording of at most SAC_BACKEND_MAX_MARKS marks; with hold 1
   * the cuda backend holds its stream (a kernel that waits for the host, at most a
   * second) until timing_end, so the ops enqueued meanwhile run back to back from the
   * queue and the marks measure the device, not the host's launch rate. timing_mark
   * records mark i in order with the ops (a CUDA event; the cpu backend, whose ops are
   * done when they return, reads its clock). timing_end releases the stream, waits for
   * the marks and writes seconds[i] = time from mark 0 to mark i for i < n. Not between
   * graph_begin and graph_end (a mark around a graph_launch times the whole graph). 0,
   * SAC_EINVAL (a mark out of range or never recorded), SAC_ESTATE (capturing, or not
   * begun), SAC_ETIMEOUT (the hold gave up: the marks include host time) or
   * SAC_EBACKEND. NULL (all three): the backend cannot time its ops. */
  int (*timing_begin)(sac_backend_t *be, int hold);
  int (*timing_mark)(sac_backend_t *be, int i);
  int (*timing_end)(sac_backend_t *be, int n, double *seconds);
  /* The leading dimension (>= width) the backend wants for a block of hidden activations
   * `width` floats wide, and for its gradient: sac.c lays out every hidden layer's
   * output and input gradient with it. The cpu backend pads a width that is a multiple
   * of 64 floats by one cache line, so that the rows its GEMM reads side by side do not
   * fall into the same few L1 sets. NULL: width. */
  int (*act_ld)(sac_backend_t *be, int width);
  /* 1: lay out each member of an ensemble's hidden activations (and their gradients) as
   * a block of its own, on pages of its own, member k at k * ms (sac_seg_t), rows at
   * act_ld of one member's width. The cpu backend gives each member to one thread; where
   * two threads wrote the two halves of the same rows, the next op read its half at a
   * third of the speed (the cores' prefetchers fetch the other core's lines of a shared
   * page). NULL: members side by side in each row; only a backend that has this op sees
   * a non-zero ms or out_ms. */
  int (*act_members_apart)(sac_backend_t *be);
} sac_backend_ops_t;

#define SAC_BACKEND_MAX_MARKS 2048

#define SAC_BACKEND_MAX_GRAPHS 4
/* Fetch slots: 0-1 PER priorities, 2-3 update statistics, 4-5 the acting actor (sac.c),
 * 6-8 the gradient segments a data-parallel rank sends through the host (dp.c) */
#define SAC_BACKEND_SLOT_DP 6
#define SAC_BACKEND_FETCH_SLOTS 9

/* The two counts of get_metric ("blocking_syncs", "kernel_launches"); SAC_ENOTFOUND
 * where the backend keeps none. Difference two readings for the calls between them. */
typedef struct {
  int64_t blocking_syncs, launches;
} sac_backend_counts_t;
int sac_backend_counts(sac_backend_t *be, sac_backend_counts_t *out);

struct sac_backend {
  const sac_backend_ops_t *ops;
  void *impl;
};

/* Creates a backend by name ("cpu", "cuda", "null"). threads: CPU threads for "cpu" (0 = all
 * cores). Returns 0, SAC_ENOTFOUND (unknown name), SAC_EUNSUPPORTED (the CUDA module is
 * not installed or not loadable: learner/cuda_module.h), SAC_ENODEV (module loaded, no
 * usable GPU) or SAC_ENOMEM; each failure logs which. */
int sac_backend_new(const char *name, int threads, sac_backend_t **out);
/* --device: which GPU a learner opens. SAC_DEVICE_AUTO lets the data-parallel rank pick
 * (sac_device_for_rank), so several learners on one multi-GPU host open different GPUs
 * (NCCL refuses two ranks on one device). */
#define SAC_DEVICE_AUTO (-1)
/* Parses a --device value: "auto" (or "") gives SAC_DEVICE_AUTO, a decimal N in
 * [0, 1023] gives N. 0 or SAC_ECONFIG (logged). */
int sac_device_parse(const char *s, int *out);
/* The device a learner opens: `device` itself when it is not SAC_DEVICE_AUTO, otherwise
 * dp_rank % device_count (device 0 where the count is not positive). Pure: tested on CPU. */
int sac_device_for_rank(int device, int dp_rank, int device_count);
/* sac_backend_new on a chosen device (ignored by "cpu"): device may be SAC_DEVICE_AUTO,
 * then dp_rank and the module's device count choose (sac_device_for_rank). */
int sac_backend_new_on(const char *name, int threads, int device, int dp_rank, sac_backend_t **out);
/* Applies the learner's precision ("fp32", "tf32", "bf16", "fp16") and CUDA-graph choice
 * (graphs: 1 on, 0 off) through set_option. A backend without options (cpu) takes
 * fp32 only: anything else is SAC_ECONFIG with a line saying it needs the cuda backend,
 * and graphs are ignored there. 0 or a negative code (logged). */
int sac_backend_configure(sac_backend_t *be, const char *precision, int graphs);
void sac_backend_destroy(sac_backend_t **be);

int sac_backend_cpu_new(int threads, sac_backend_t **out);
/* The null backend (backend_null.c): the interface and buffers without the math, to
 * measure the service around the update (--backend null, sac-bench-service). */
int sac_backend_null_new(sac_backend_t **out);
/* The host backends' alloc and free (learner/backend_cpu.c): n floats, zeroed, 256-byte
 * aligned as cudaMalloc's; SAC_ENOMEM. */
int sac_backend_host_alloc(sac_backend_t *be, size_t n, float **out);
void sac_backend_host_free(sac_backend_t *be, float *p);
/* The cuda backend on a device, through the CUDA module (same codes as sac_backend_new). */
int sac_backend_cuda_new(int device, sac_backend_t **out);

#endif
