/* Data-parallel learner check and benchmark (issue 9): one rank of L learners in
 * lock-step (learner/dp.h) on synthetic batches, no replay and no actors. Every rank
 * runs this with its --rank; rank 0 binds --coord. The gradient hook is installed even
 * for --size 1, so a single GPU exercises the nccl collective's whole path. At the end
 * the ranks compare a hash of their whole learner state (sac_dp_check_identical).
 *
 * Prints one line per rank:
 *   bench-dp-result rank=R size=L collective=C backend=B updates=N updates_per_s=X
 *     allreduce_ms=Y allreduce_share=Z identical=0|1 hash=H skipped=S
 * (allreduce_share: the gradient all-reduces' part of the timed update loop; for nccl
 * the host does not synchronise the stream first, so it includes the gradient compute
 * still in flight when the collective is enqueued).
 * Exit status 0 when every rank's state is bit-identical, 1 otherwise, 2 for bad options.
 * Used by scripts/gpu_check.sh; on a CPU machine it runs with --backend cpu --collective
 * zmq. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/config.h"
#include "common/error.h"
#include "common/log.h"
#include "common/rng.h"
#include "learner/dp.h"
#include "learner/sac.h"

typedef struct {
  int rank, size, updates, warmup, threads, device, timeout_ms;
  int obs, act, hidden, depth, batch;
  double loss_scale, overflow_reward;
  int loss_scale_rank, overflow_rank, overflow_at;
  char coord[256], collective[16], backend[16], precision[8];
} cfg_t;

#define O_(k, t, f, d, lo, hi, h)                                                                            \
  { k, t, offsetof(cfg_t, f), 0, d, lo, hi, h }
#define S_(k, f, d, h)                                                                                       \
  { k, SAC_CFG_STRING, offsetof(cfg_t, f), sizeof(((cfg_t *)0)->f), d, SAC_CFG_UNBOUNDED, h }
static const sac_cfg_opt_t k_opts[] = {
    O_("rank", SAC_CFG_INT, rank, "0", 0, 255, "this rank"),
    O_("size", SAC_CFG_INT, size, "1", 1, 256, "ranks (1: the hook and the collective all the same)"),
    S_("coord", coord, "tcp://127.0.0.1:9300", "coordinator endpoint: rank 0 binds it"),
    S_("collective", collective, "zmq", "gradient collective: zmq or nccl"),
    S_("backend", backend, "cpu", "learner backend: cpu or cuda"),
    S_("precision", precision, "fp32",
       "fp32; with cuda also tf32, bf16, fp16 (fp16: the shared overflow decision)"),
    O_("device", SAC_CFG_INT, device, "-1", -1, 64, "cuda device (-1: the rank)"),
    O_("threads", SAC_CFG_INT, threads, "1", 0, 256, "cpu backend threads"),
    O_("updates", SAC_CFG_INT, updates, "1000", 1, 1e9, "timed updates"),
    O_("warmup", SAC_CFG_INT, warmup, "20", 0, 1e9, "untimed updates first"),
    O_("timeout_ms", SAC_CFG_INT, timeout_ms, "30000", 100, 3600000, "collective timeout"),
    O_("obs", SAC_CFG_INT, obs, "17", 1, 1e6, "observation size"),
    O_("act", SAC_CFG_INT, act, "6", 1, 1e6, "action size"),
    O_("hidden", SAC_CFG_INT, hidden, "256", 1, 1e6, "hidden width"),
    O_("depth", SAC_CFG_INT, depth, "2", 1, 15, "hidden layers"),
    O_("batch", SAC_CFG_INT, batch, "256", 1, 1e6, "batch per rank"),
    O_("loss_scale", SAC_CFG_DOUBLE, loss_scale, "0", 0, 3.4e38,
       "fp16: this initial loss scale after the ranks synchronised (0: keep), on loss_scale_rank"),
    O_("loss_scale_rank", SAC_CFG_INT, loss_scale_rank, "-1", -1, 255,
       "the rank loss_scale applies to (-1: every rank); a huge scale on one rank forces an overflow there "
       "alone (the ranks' scales then differ for good, so their states do too: use overflow_rank to check "
       "that a skip is shared)"),
    O_("overflow_rank", SAC_CFG_INT, overflow_rank, "-1", -1, 255,
       "fp16: this rank's batch of update overflow_at has every reward overflow_reward (its scaled loss "
       "gradient overflows there alone; every rank must skip that step, and their states stay equal)"),
    O_("overflow_at", SAC_CFG_INT, overflow_at, "5", 0, 1e9, "the update (from 0, warmup included) overflow_rank spikes"),
    O_("overflow_reward", SAC_CFG_DOUBLE, overflow_reward, "1e6", -3.4e38, 3.4e38,
       "the reward of every transition of that batch"),
};

#define POOL 8 /* distinct batches per rank, cycled */

int main(int argc, char **argv) {
  cfg_t c;
  memset(&c, 0, sizeof c);
  int action;
  if (sac_config_load(k_opts, sizeof k_opts / sizeof k_opts[0], &c, argc, argv,
                      "sac-bench-dp: one rank of data-parallel SAC learners on synthetic batches", &action))
    return 2;
  if (action == SAC_CFG_EXIT_OK)
    return 0;
  if (c.rank >= c.size) {
    fprintf(stderr, "sac-bench-dp: rank %d is not below size %d\n", c.rank, c.size);
    return 2;
  }
  sac_backend_t *be = NULL;
  int rc;
  if (strcmp(c.backend, "cuda") == 0) {
    rc = sac_backend_cuda_new(c.device >= 0 ? c.device : c.rank, &be);
  } else {
    rc = sac_backend_new(c.backend, c.threads, &be);
  }
  if (rc == 0 && (rc = sac_backend_configure(be, c.precision, 0)) != 0)
    sac_backend_destroy(&be);
  if (rc) {
    fprintf(stderr, "sac-bench-dp: backend %s (%s): %s\n", c.backend, c.precision, sac_strerror(rc));
    return 1;
  }
  sac_hparams_t hp;
  sac_hparams_default(&hp, c.obs, c.act);
  hp.hidden = c.hidden, hp.depth = c.depth, hp.batch = c.batch, hp.seed = 1;
  sac_t *s = NULL;
  sac_dp_t *dp = NULL;
  float *pool = NULL, *buf = NULL, *spike = NULL; /* spike: overflow_rank's rewards at update overflow_at */
  int same = 0;
  if ((rc = sac_new(&hp, be, &s)) != 0)
    goto out;
  /* the configuration every rank must share */
  char conf[512] = "";
  if (sac_dp_describe(conf, sizeof conf, "backend", "%s", c.backend) ||
      sac_dp_describe(conf, sizeof conf, "shape", "%d %d %d %d %d", c.obs, c.act, c.hidden, c.depth,
                      c.batch) ||
      sac_dp_describe(conf, sizeof conf, "updates", "%d %d", c.warmup, c.updates)) {
    rc = SAC_ETOOBIG;
    goto out;
  }
  sac_dp_cfg_t dc;
  sac_dp_cfg_default(&dc);
  dc.rank = c.rank, dc.size = c.size, dc.timeout_ms = c.timeout_ms, dc.connect_timeout_ms = 60000;
  snprintf(dc.coord, sizeof dc.coord, "%s", c.coord);
  snprintf(dc.collective, sizeof dc.collective, "%s", c.collective);
  if ((rc = sac_dp_new(&dc, conf, be, &dp, NULL, 0)) != 0 || (rc = sac_dp_sync_state(dp, s, NULL, 0)) != 0 ||
      (rc = sac_dp_attach(dp, s)) != 0)
    goto out;
  if (c.loss_scale > 0 && (c.loss_scale_rank < 0 || c.loss_scale_rank == c.rank)) {
    sac_scaler_state_t sc = {(float)c.loss_scale, 0};
    if ((rc = sac_set_scaler(s, &sc)) != 0) {
      fprintf(stderr, "sac-bench-dp: --loss_scale needs --precision fp16 on cuda: %s\n", sac_strerror(rc));
      goto out;
    }
  }
  /* this rank's batches: (B, O) obs and next obs, (B, A) actions, (B) rewards, terminated */
  const size_t B = (size_t)c.batch, O = (size_t)c.obs, A = (size_t)c.act;
  const size_t per = 2 * B * O + B * A + 2 * B;
  if (!(pool = malloc(sizeof(float) * per * POOL))) {
    rc = SAC_ENOMEM;
    goto out;
  }
  sac_rng_t rng;
  sac_rng_init(&rng, 4242, (uint64_t)c.rank);
  for (size_t i = 0; i < per * POOL; i++)
    pool[i] = (float)sac_rng_uniform_range(&rng, -1, 1);
  for (int k = 0; k < POOL; k++) /* terminated: 0 or 1 */
    for (size_t i = 0; i < B; i++)
      pool[k * per + per - B + i] = pool[k * per + per - B + i] > 0.8f ? 1.0f : 0.0f;
  const sac_backend_ops_t *ops = be->ops;
  sac_batch_t *bb = sac_batch(s);
  if (c.overflow_rank == c.rank) {
    if (!(spike = malloc(sizeof(float) * B))) {
      rc = SAC_ENOMEM;
      goto out;
    }
    for (size_t i = 0; i < B; i++)
      spike[i] = (float)c.overflow_reward;
  }
  double t0 = 0, ar0 = 0;
  for (int u = 0; u < c.warmup + c.updates; u++) {
    if (u == c.warmup) {
      ops->sync(be);
      sac_dp_stats_t st;
      sac_dp_stats(dp, &st);
      ar0 = st.allreduce_s;
      t0 = sac_clock_s();
    }
    const float *p = pool + (size_t)(u % POOL) * per;
    if ((rc = ops->upload(be, bb->obs, p, 2 * B * O)) != 0 || /* obs and next_obs are contiguous */
        (rc = ops->upload(be, bb->action, p + 2 * B * O, B * A)) != 0 ||
        (rc = ops->upload(be, bb->reward, spike && u == c.overflow_at ? spike : p + 2 * B * O + B * A, B)) !=
            0 ||
        (rc = ops->upload(be, bb->terminated, p + 2 * B * O + B * A + B, B)) != 0 ||
        (rc = sac_update(s)) != 0)
      goto out;
  }
  if ((rc = ops->sync(be)) != 0)
    goto out;
  double wall = sac_clock_s() - t0;
  sac_dp_stats_t st;
  sac_dp_stats(dp, &st);
  double ar = st.allreduce_s - ar0;
  if ((rc = sac_dp_check_identical(dp, s, &same)) != 0)
    goto out;
  /* a hash of this rank's parameters, for the caller to compare too */
  size_t n = sac_param_count(s);
  if (!(buf = malloc(sizeof(float) * n))) {
    rc = SAC_ENOMEM;
    goto out;
  }
  if ((rc = sac_get_buffer(s, SAC_BUF_PARAMS, buf, n)) != 0)
    goto out;
  double skipped = 0; /* fp16 updates whose step every rank skipped (0 elsewhere) */
  if (!be->ops->get_metric || be->ops->get_metric(be, "skipped_steps", &skipped) != 0)
    skipped = 0;
  uint64_t h = 0xcbf29ce484222325ull;
  const unsigned char *bytes = (const unsigned char *)buf;
  for (size_t i = 0; i < n * sizeof(float); i++)
    h = (h ^ bytes[i]) * 0x100000001b3ull;
  printf("bench-dp-result rank=%d size=%d collective=%s backend=%s updates=%d updates_per_s=%.1f "
         "allreduce_ms=%.4f "
         "allreduce_share=%.1f%% identical=%d hash=%016llx skipped=%.0f\n",
         c.rank, c.size, sac_dp_collective(dp), c.backend, c.updates, c.updates / wall, 1e3 * ar / c.updates,
         100.0 * ar / wall, same, (unsigned long long)h, skipped);
out:
  if (rc) {
    fprintf(stderr, "sac-bench-dp: rank %d: %s\n", c.rank, sac_strerror(rc));
    sac_dp_abort(dp, sac_strerror(rc));
  }
  sac_dp_destroy(&dp);
  sac_destroy(&s);
  sac_backend_destroy(&be);
  free(pool), free(buf), free(spike);
  return rc ? 1 : same ? 0 : 1;
}
