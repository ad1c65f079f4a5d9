/* Evaluation episodes (see evaluate.h). Each episode's return is summed in double from
 * the environment's float rewards; the summary is computed from the per-episode sums, so
 * a caller that prints them and one that prints the summary agree. */
#include "learner/evaluate.h"

#include <math.h>
#include <stdlib.h>

#include "common/error.h"
#include "common/log.h"
#include "common/rng.h"

void sac_eval_summarize(const double *returns, int n, sac_eval_stats_t *out) {
  double sum = 0.0, lo = INFINITY, hi = -INFINITY;
  for (int i = 0; i < n; i++) {
    sum += returns[i];
    lo = returns[i] < lo ? returns[i] : lo;
    hi = returns[i] > hi ? returns[i] : hi;
  }
  const double mean = sum / n;
  double ss = 0.0;
  for (int i = 0; i < n; i++)
    ss += (returns[i] - mean) * (returns[i] - mean);
  *out = (sac_eval_stats_t){.episodes = n, .mean = mean, .std = sqrt(ss / n), .min = lo, .max = hi};
}

/* policy action in [-1, 1] -> environment units */
static void scale_action(const sac_env_spec_t *sp, const float *a, float *env_a) {
  for (int i = 0; i < sp->act_dim; i++)
    env_a[i] = sp->act_low[i] + 0.5f * (a[i] + 1.0f) * (sp->act_high[i] - sp->act_low[i]);
}

/* One episode from a reset to termination or the time limit: its return and steps. */
static int run_episode(sac_env_t *env, int episode, const sac_mlp_desc_t *ad, const float *actor,
                       const sac_policy_cfg_t *pc, sac_rng_t *noise, const sac_eval_opts_t *o, float *scratch,
                       double *ret, int *len) {
  const sac_env_spec_t *sp = sac_env_spec(env);
  float obs[SAC_ENV_MAX_OBS], a[SAC_ENV_MAX_ACT], ea[SAC_ENV_MAX_ACT];
  int rc = sac_env_reset(env, obs), term = 0, trunc = 0, t = 0;
  if (rc == 0 && o->on_step)
    rc = o->on_step(o->user, env, episode, 0, 0);
  *ret = 0.0;
  while (rc == 0 && !term && !trunc) {
    float r;
    sac_policy_act(ad, actor, pc, obs, 1, !o->stochastic, noise, a, scratch);
    scale_action(sp, a, ea);
    if ((rc = sac_env_step(env, ea, obs, &r, &term, &trunc)) != 0)
      break;
    *ret += r;
    t++;
    if (o->on_step)
      rc = o->on_step(o->user, env, episode, t, term || trunc);
  }
  *len = t;
  return rc;
}

int sac_evaluate_policy(const char *env_name, uint64_t seed, const sac_mlp_desc_t *ad, const float *actor,
                        float log_std_min, float log_std_max, int episodes, const sac_eval_opts_t *opts,
                        sac_eval_stats_t *out) {
  const sac_eval_opts_t none = {0};
  const sac_eval_opts_t *o = opts ? opts : &none;
  if (episodes < 1)
    return SAC_EINVAL;
  sac_env_t *env = NULL;
  int rc = sac_env_new(env_name, seed, SAC_STREAM_EVAL, &env);
  if (rc)
    return rc;
  const sac_env_spec_t *sp = sac_env_spec(env);
  if (ad->sizes[0] != sp->obs_dim || ad->sizes[ad->n_layers] != 2 * sp->act_dim) {
    SAC_ERROR("eval", "the policy maps %d observations to %d actions; %s has %d and %d", ad->sizes[0],
              ad->sizes[ad->n_layers] / 2, env_name, sp->obs_dim, sp->act_dim);
    sac_env_destroy(&env);
    return SAC_EINVAL;
  }
  float *scratch = malloc(sizeof(float) * (size_t)(2 * sp->act_dim + 2 * sac_mlp_max_width(ad)));
  double *rets = malloc(sizeof(double) * (size_t)episodes);
  if (!scratch || !rets) {
    free(scratch), free(rets);
    sac_env_destroy(&env);
    return SAC_ENOMEM;
  }
  sac_policy_cfg_t pc = {log_std_min, log_std_max};
  sac_rng_t noise;
  sac_rng_init(&noise, seed, SAC_STREAM_EVAL_NOISE);
  for (int ep = 0; ep < episodes && rc == 0; ep++) {
    int len = 0;
    rc = run_episode(env, ep, ad, actor, &pc, &noise, o, scratch, &rets[ep], &len);
    if (o->returns)
      o->returns[ep] = rets[ep];
    if (o->lengths)
      o->lengths[ep] = len;
  }
  if (rc == 0)
    sac_eval_summarize(rets, episodes, out);
  free(scratch), free(rets);
  sac_env_destroy(&env);
  return rc;
}
