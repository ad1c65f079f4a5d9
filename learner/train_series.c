/* The training series every mode exports (see train_series.h). */
#include "learner/train_series.h"

#include <math.h>
#include <string.h>

void sac_train_series_register(sac_metrics_t *r, int64_t target_steps, int with_rundir,
                               sac_train_series_t *s) {
  memset(s, 0, sizeof *s);
  if (!r)
    return;
  size_t nb;
  const double *b = sac_metrics_latency_buckets(&nb);
  s->updates = sac_metrics_counter(r, "sac_learner_updates_total", "SAC updates done.", NULL, NULL);
  s->update_s = sac_metrics_histogram(r, "sac_learner_update_duration_seconds",
                                      "Host time of one update: batch upload, update, priorities, publish.",
                                      NULL, b, nb, NULL);
  s->env_steps =
      sac_metrics_counter(r, "sac_learner_env_steps_total",
                          "Environment steps stored in the replay shards (the run's progress).", NULL, NULL);
  s->target_steps = sac_metrics_gauge(r, "sac_learner_target_env_steps",
                                      "Environment steps the run trains for.", NULL, NULL);
  s->version = sac_metrics_gauge(r, "sac_learner_policy_version",
                                 "Version of the last published policy (the update count at publication).",
                                 NULL, NULL);
  s->critic_loss =
      sac_metrics_gauge(r, "sac_learner_critic_loss", "Critic loss of the last update.", NULL, NULL);
  s->actor_loss =
      sac_metrics_gauge(r, "sac_learner_actor_loss", "Actor (policy) loss of the last update.", NULL, NULL);
  s->alpha_loss =
      sac_metrics_gauge(r, "sac_learner_alpha_loss", "Temperature loss of the last update.", NULL, NULL);
  s->alpha = sac_metrics_gauge(r, "sac_learner_alpha", "Entropy temperature alpha.", NULL, NULL);
  s->entropy = sac_metrics_gauge(r, "sac_learner_policy_entropy", "Policy entropy estimate (-mean log pi).",
                                 NULL, NULL);
  s->mean_q =
      sac_metrics_gauge(r, "sac_learner_mean_q", "Mean Q value of the last critic update.", NULL, NULL);
  s->eval_return = sac_metrics_gauge(
      r, "sac_learner_eval_return",
      "Mean return of the last deterministic evaluation (NaN before the first).", NULL, NULL);
  for (int k = 0; with_rundir && k < SAC_RUNDIR_FILES; k++)
    s->rundir_errors[k] = sac_metrics_counter(
        r, "sac_learner_rundir_write_errors_total",
        "Failed writes of the run directory's periodic files (disk full, I/O error); training goes on.",
        (const char *[]){"file", sac_rundir_file_name((sac_rundir_file_t)k), NULL}, NULL);
  sac_metric_set(s->target_steps, (double)target_steps);
  if (sac_metric_value(s->updates) == 0) { /* a first run: no statistics yet */
    sac_metric_t *nan_until_first[] = {s->critic_loss, s->actor_loss, s->alpha_loss, s->alpha,
                                       s->entropy,     s->mean_q,     s->eval_return};
    for (size_t i = 0; i < sizeof nan_until_first / sizeof nan_until_first[0]; i++)
      sac_metric_set(nan_until_first[i], NAN);
  }
}

void sac_train_series_stats(const sac_train_series_t *s, const sac_stats_t *st) {
  sac_metric_set(s->critic_loss, st->critic_loss);
  sac_metric_set(s->actor_loss, st->actor_loss);
  sac_metric_set(s->alpha_loss, st->alpha_loss);
  sac_metric_set(s->alpha, st->alpha);
  sac_metric_set(s->entropy, st->entropy);
  sac_metric_set(s->mean_q, st->mean_q);
}

void sac_train_series_rundir(sac_train_series_t *s, const sac_rundir_t *rd) {
  for (int k = 0; rd && k < SAC_RUNDIR_FILES; k++)
    if (rd->write_errors[k] > s->rundir_seen[k]) {
      sac_metric_add(s->rundir_errors[k], (double)(rd->write_errors[k] - s->rundir_seen[k]));
      s->rundir_seen[k] = rd->write_errors[k];
    }
}
