/* Evaluation episodes of a policy: what the learner runs at each evaluation (every mode)
 * and what sac-eval runs on a saved policy, so the two give the same numbers.
 *
 * Seeding: the episodes run on one fresh environment made with (seed, SAC_STREAM_EVAL);
 * episode k starts from that stream's k-th reset. So N episodes with seed S are the first
 * N of any longer evaluation with seed S, and the same weights evaluated twice with the
 * same seed give the same returns, bit for bit. Deterministic episodes act with tanh(mu);
 * stochastic ones sample the squashed Gaussian with noise from (seed, the stream
 * SAC_STREAM_EVAL_NOISE), so they too are reproducible.
 *
 * Not thread-safe per call (one environment per call); calls on different threads are
 * independent. */
#ifndef SAC_LEARNER_EVALUATE_H
#define SAC_LEARNER_EVALUATE_H
#include <stdint.h>

#include "common/env.h"
#include "common/mlp.h"

/* the exploration noise of stochastic evaluation episodes (streams 1 and 2 are the
 * learner's and the evaluation environment's, common/rng.h) */
#define SAC_STREAM_EVAL_NOISE 3ull

typedef struct {
  int episodes;
  /* over the episodes' returns; std is the population standard deviation (divides by
   * the number of episodes), as numpy.std and SB3's evaluate_policy report it */
  double mean, std, min, max;
} sac_eval_stats_t;

/* Called after each reset (step 0, done 0) and after each step (done 1 on the episode's
 * last step). A non-zero return stops the evaluation with that code. */
typedef int (*sac_eval_step_fn)(void *user, sac_env_t *env, int episode, int step, int done);

typedef struct {
  int stochastic;           /* sample actions instead of the deterministic tanh(mu) */
  double *returns;          /* (episodes) each episode's return, or NULL */
  int *lengths;             /* (episodes) each episode's steps, or NULL */
  sac_eval_step_fn on_step; /* e.g. a video recorder (NULL: none) */
  void *user;
} sac_eval_opts_t;

/* Runs `episodes` episodes of the policy `actor` (an MLP of layout ad whose output is
 * (mu, log_std), clamped to [log_std_min, log_std_max]) on a fresh environment `env_name`
 * and fills *out. opts may be NULL (deterministic, nothing recorded). 0, or a negative
 * code: the environment's (SAC_ENOTFOUND, SAC_EPLUGIN, a failed step), SAC_ENOMEM,
 * SAC_EINVAL (the policy's sizes do not fit the environment), or on_step's. */
int sac_evaluate_policy(const char *env_name, uint64_t seed, const sac_mlp_desc_t *ad, const float *actor,
                        float log_std_min, float log_std_max, int episodes, const sac_eval_opts_t *opts,
                        sac_eval_stats_t *out);

/* The mean, population std, min and max of n returns into *out (n >= 1). */
void sac_eval_summarize(const double *returns, int n, sac_eval_stats_t *out);

#endif
