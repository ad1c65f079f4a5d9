/* A single-process SAC training loop: one environment, an in-memory buffer, updates on
 * the selected backend, deterministic evaluation. It validates the SAC core end to end
 * (Pendulum-v1 within 20k steps) and is what `sac-learner --mode local` runs; the
 * distributed service uses the same sac_t. With a run directory it keeps the same run
 * contract as the service (learner/rundir.h): evaluations with their spread in
 * metrics.csv, curve.svg and TensorBoard, checkpoint.bin every checkpoint_every updates
 * and at the end (with its replay in replay-local.snap, so a resumed run goes on with the
 * transitions it had), policy.bin at the end; and it resumes from one. With a fixed seed
 * and thread count a run is bit-reproducible: one thread of control decides every random
 * draw and every update's batch. Not thread-safe; one call per thread. */
#ifndef SAC_LEARNER_TRAIN_LOCAL_H
#define SAC_LEARNER_TRAIN_LOCAL_H
#include <stdatomic.h>
#include <stdint.h>

#include "common/http.h"
#include "common/metrics.h"
#include "learner/evaluate.h"
#include "learner/rundir.h"
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
  /* the run contract (all optional) */
  sac_rundir_t *rundir;     /* evaluations, TensorBoard, checkpoints, policy.bin go here (NULL: nowhere) */
  int64_t checkpoint_every; /* updates between checkpoints in the run directory (0: at the end only) */
  char resume[1024];        /* a checkpoint.bin to continue from ("": a new run); its replay beside it */
  sac_metrics_t *metrics;   /* the training series go here (learner/train_series.h; NULL: none) */
  atomic_int *stop;         /* set: stop after this step, then evaluate and save as at the end */
  sac_http_t *http; /* the metrics endpoint, told each step that the loop turns (/livez; NULL: none) */
} sac_train_cfg_t;

typedef struct {
  double final_eval_return; /* mean over eval_episodes at the end */
  double best_eval_return;  /* over the whole run, a resumed one's earlier part included */
  sac_eval_stats_t final_eval;
  int64_t steps, updates, episodes; /* a resumed run's counts include its earlier part */
  int interrupted;                  /* stopped by *stop before total_steps */
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
/* Trains; fills *res. Returns 0, or a negative code (environment, backend, memory; a
 * checkpoint that does not fit this configuration: SAC_ECONFIG, the field named in the
 * log). */
int sac_train_local(const sac_train_cfg_t *cfg, sac_train_eval_cb cb, void *user, sac_train_result_t *res);

#endif
