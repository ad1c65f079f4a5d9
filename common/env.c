/* The environment wrapper (see env.h): picks the implementation by name, owns the reset
 * random stream, counts steps and applies the time limit the way Gymnasium's TimeLimit
 * wrapper does (truncated = elapsed >= max_episode_steps, reported separately from the
 * environment's own termination; both can be 1 on the same step). The dynamics live in
 * env_pendulum.c, env_mountaincar.c and env_plugin.c behind sac__env_ops_t. */
#include "common/env.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/env_internal.h"
#include "common/error.h"
#include "common/log.h"

#define PLUGIN_PREFIX "plugin:"

struct sac_env {
  const sac__env_ops_t *ops;
  void *impl;
  sac_env_spec_t spec;
  sac_rng_t rng; /* reset distribution; (seed, stream) from sac_env_new */
  int elapsed;
  int started; /* a reset succeeded since creation */
};

int sac_env_new(const char *name, uint64_t seed, uint64_t stream, sac_env_t **out) {
  assert(name && out);
  *out = NULL;
  const sac__env_ops_t *ops;
  const char *args = NULL;
  if (strcmp(name, "Pendulum-v1") == 0) {
    ops = &sac__env_pendulum_ops;
  } else if (strcmp(name, "MountainCarContinuous-v0") == 0) {
    ops = &sac__env_mountaincar_ops;
  } else if (strncmp(name, PLUGIN_PREFIX, strlen(PLUGIN_PREFIX)) == 0) {
    ops = &sac__env_plugin_ops;
    args = name + strlen(PLUGIN_PREFIX);
  } else {
    SAC_ERROR(
        "env",
        "unknown environment '%s' (known: Pendulum-v1, MountainCarContinuous-v0, plugin:PATH.so[:ARGS])",
        name);
    return SAC_ENOTFOUND;
  }

  sac_env_t *env = calloc(1, sizeof *env);
  if (!env)
    return SAC_ENOMEM;
  env->ops = ops;
  int rc = ops->create(args, &env->spec, &env->impl);
  if (rc < 0) {
    free(env);
    return rc;
  }
  sac_rng_init(&env->rng, seed, stream);
  *out = env;
  return 0;
}

void sac_env_destroy(sac_env_t **env) {
  if (!env || !*env)
    return;
  (*env)->ops->destroy((*env)->impl);
  free(*env);
  *env = NULL;
}

const sac_env_spec_t *sac_env_spec(const sac_env_t *env) {
  assert(env);
  return &env->spec;
}

int sac_env_reset(sac_env_t *env, float *obs) {
  assert(env && obs);
  int rc = env->ops->reset(env->impl, &env->rng, obs);
  if (rc < 0)
    return rc;
  env->elapsed = 0;
  env->started = 1;
  return 0;
}

int sac_env_step(sac_env_t *env, const float *action, float *obs, float *reward, int *terminated,
                 int *truncated) {
  assert(env && action && obs && reward && terminated && truncated);
  if (!env->started)
    return SAC_ESTATE;
  /* A NaN would silently poison the state for the rest of the episode (clipping passes it
   * through), so it is refused here and the state is left as it was. */
  for (int i = 0; i < env->spec.act_dim; i++)
    if (!isfinite(action[i]))
      return SAC_ENONFINITE;
  float r = 0.0f;
  int term = 0;
  int rc = env->ops->step(env->impl, action, obs, &r, &term);
  if (rc < 0)
    return rc;
  env->elapsed++;
  *reward = r;
  *terminated = term != 0;
  *truncated = env->spec.max_episode_steps > 0 && env->elapsed >= env->spec.max_episode_steps;
  return 0;
}

int sac_env_elapsed(const sac_env_t *env) {
  assert(env);
  return env->elapsed;
}

int sac_env_set_state(sac_env_t *env, const double *state, int n, float *obs) {
  assert(env && state && obs);
  if (!env->ops->set_state)
    return SAC_EUNSUPPORTED;
  if (!env->started)
    return SAC_ESTATE;
  if (n != env->ops->state_dim)
    return SAC_EINVAL;
  for (int i = 0; i < n; i++)
    if (!isfinite(state[i]))
      return SAC_EINVAL;
  env->ops->set_state(env->impl, state, obs);
  return 0;
}

int sac_env_get_state(const sac_env_t *env, double *state, int n) {
  assert(env && state);
  if (!env->ops->get_state)
    return SAC_EUNSUPPORTED;
  if (!env->started)
    return SAC_ESTATE;
  if (n != env->ops->state_dim)
    return SAC_EINVAL;
  env->ops->get_state(env->impl, state);
  return 0;
}
