/* A single-process SAC training loop: one environment, an in-memory buffer, updates on
 * the selected backend, deterministic evaluation. It validates the SAC core end to end
 * (Pendulum-v1 within 20k steps) and is what `sac-learner --mode local` runs; the
 * distributed service uses the same sac_t. Not thread-safe; one call per thread. */
#ifndef SAC_LEARNER_TRAIN_LOCAL_H
#define SAC_LEARNER_TRAIN_LOCAL_H
#include <stdint.h>

#include "learner/sac.h"

typedef struct {
  char env[256];
  char backend[16];
  char precision[8];       /* fp32 (any backend), tf32, bf16, fp16 (cuda) */
  int graphs;              /* cuda: capture the update as CUDA graphs */
  int threads;             /* cpu backend threads, 0 = all cores */
  int device;              /* cuda: GPU index, or SAC_DEVICE_AUTO (= GPU 0 here) */
  int64_t total_steps;     /* environment steps */
  int64_t learning_starts; /* uniform random actions and no updates before this */
  int updates_per_step;    /* update-to-data ratio */
  int64_t buffer_capacity;
  int64_t eval_interval; /* environment steps between evaluations (0: only at the end) */
  int eval_episodes;
  int64_t log_interval; /* environment steps between progress lines (0: none) */
  int quiet;
  uint64_t seed;
  /* The acting copy of the actor: 1 (the default) refreshed one environment step late,
   * from a copy fetched after the previous step's updates (no wait for the updates just
   * enqueued); 0 downloaded after every step's updates (a blocking sync per step). */
  int actor_lag;
  sac_hparams_t hp; /* obs_dim / act_dim are taken from the environment */
} sac_train_cfg_t;

typedef struct {
  double final_eval_return; /* mean over eval_episodes at the end */
  double best_eval_return;
  int64_t steps, updates, episodes;
  double wall_seconds;
  double updates_per_second; /* of update time only */
  /* The backend's counts (sac_backend_counts) over the steady-state steps: those after
   * learning_starts that neither log nor evaluate, from sampling to the acting copy's
   * refresh. -1 where the backend keeps no counts. */
  int64_t steady_updates, steady_blocking_syncs, steady_launches;
} sac_train_result_t;

/* Called after each evaluation (may be NULL). */
typedef void (*sac_train_eval_cb)(void *user, int64_t step, double mean_return, const sac_stats_t *st);

void sac_train_cfg_default(sac_train_cfg_t *cfg);
/* Mean return of `episodes` deterministic episodes of the policy `actor` (the actor's
 * parameter layout) on a fresh environment of the given name. 0 or a negative code. */
int sac_evaluate(const char *env_name, uint64_t seed, const sac_mlp_desc_t *ad, const float *actor,
                 const sac_hparams_t *hp, int episodes, double *mean_return);
/* Trains; fills *res. Returns 0, or a negative code (environment, backend, memory). */
int sac_train_local(const sac_train_cfg_t *cfg, sac_train_eval_cb cb, void *user, sac_train_result_t *res);

#endif
