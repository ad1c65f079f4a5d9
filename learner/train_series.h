/* The training series on /metrics that every mode of sac-learner exports alike (--mode
 * local, the embedded default, a learner with --shards): progress (updates, environment
 * steps, the target), the last update's statistics, the last evaluation's mean return,
 * the update-duration histogram, the policy version and the run directory's failed
 * writes. One registration, so the names, types and help texts cannot drift apart between
 * modes (docs/METRICS.md lists them). Mode-specific series (sampling, shards, actors,
 * weights) stay with their mode. */
#ifndef SAC_LEARNER_TRAIN_SERIES_H
#define SAC_LEARNER_TRAIN_SERIES_H
#include <stdint.h>

#include "common/metrics.h"
#include "learner/rundir.h"
#include "learner/sac.h"

typedef struct {
  sac_metric_t *updates, *update_s, *env_steps, *target_steps, *version;
  sac_metric_t *critic_loss, *actor_loss, *alpha_loss, *alpha, *entropy, *mean_q, *eval_return;
  sac_metric_t *rundir_errors[SAC_RUNDIR_FILES]; /* NULL without a run directory */
  uint64_t rundir_seen[SAC_RUNDIR_FILES];        /* the write errors already counted */
} sac_train_series_t;

/* Registers the series in r (owned by the registry; nothing when r is NULL: every field
 * is then NULL, and updates of NULL series do nothing). The statistics and the
 * evaluation return read NaN until the first update / evaluation of a fresh registry;
 * target_steps is set. with_rundir: the write-error counters too. */
void sac_train_series_register(sac_metrics_t *r, int64_t target_steps, int with_rundir,
                               sac_train_series_t *s);
/* The last update's statistics into the gauges. */
void sac_train_series_stats(const sac_train_series_t *s, const sac_stats_t *st);
/* rd's failed writes since the last call added to the counters. */
void sac_train_series_rundir(sac_train_series_t *s, const sac_rundir_t *rd);

#endif
