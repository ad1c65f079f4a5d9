/* The environment wrapper (see env.h): picks the implementation by name, owns the reset
 * random stream, counts steps and applies the time limit the way Gymnasium's TimeLimit
 * wrapper does (truncated = elapsed >= max_episode_steps, reported separately from the
 * environment's own termination; both can be 1 on the same step). The dynamics live in
 * env_pendulum.c, env_mountaincar.c and env_plugin.c behind sac__env_ops_t. */
#include "common/env.h"

#include <assert.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/env_internal.h"
#include "common/error.h"
#include "common/findfile.h"
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

/* The environments the project ships, by the ID users write (Gymnasium's). A row with a
 * plugin file name is served by that plugin, looked up by sac__env_plugin_find (SAC_PLUGIN_PATH,
 * next to the binary, the install prefix); the ID and any ",ARGS" after it go to the plugin. */
typedef struct {
  const char *id;
  const sac__env_ops_t *ops; /* built-in, or NULL: served by plugin */
  const char *plugin;        /* plugin file name */
} known_env_t;

#define MUJOCO_SO "libsac_env_mujoco.so"
/* "gym:ID[,ARGS]": any Gymnasium ID (a user's "module:ID" too) through the Gymnasium bridge */
#define GYM_PREFIX "gym:"
#define GYM_SO "libsac_env_gym.so"
static const known_env_t k_known[] = {
    {"Pendulum-v1", &sac__env_pendulum_ops, NULL},
    {"MountainCarContinuous-v0", &sac__env_mountaincar_ops, NULL},
    {"HalfCheetah-v4", NULL, MUJOCO_SO},
    {"Hopper-v4", NULL, MUJOCO_SO},
    {"Walker2d-v4", NULL, MUJOCO_SO},
    {"Ant-v4", NULL, MUJOCO_SO},
    {"HalfCheetah-v5", NULL, MUJOCO_SO},
    {"Hopper-v5", NULL, MUJOCO_SO},
    {"Walker2d-v5", NULL, MUJOCO_SO},
    {"Ant-v5", NULL, MUJOCO_SO},
    {"Humanoid-v5", NULL, MUJOCO_SO},
};

void sac_env_known_ids(char *buf, size_t cap) {
  assert(buf && cap > 0);
  size_t n = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < sizeof k_known / sizeof k_known[0] && n < cap; i++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%s", i ? ", " : "", k_known[i].id);
}

void sac_env_suggest(const char *name, char *out, size_t cap) {
  assert(name && out && cap > 0);
  out[0] = '\0';
  size_t n = strcspn(name, ",");
  const char *best = NULL;
  int best_d = 4; /* "pendulum-v1" is 1 away once case is ignored; "HalfCheetah" is 3 from "-v5" */
  for (size_t i = 0; i < sizeof k_known / sizeof k_known[0]; i++) {
    int d = sac_edit_distance(name, n, k_known[i].id, strlen(k_known[i].id), SAC_DIST_FOLD_CASE);
    /* same letters in another case: the right one whatever the distance */
    if (strlen(k_known[i].id) == n && strncasecmp(name, k_known[i].id, n) == 0)
      d = 0;
    if (d <= best_d && d < 4) { /* a tie goes to the later row: v5 before v4 */
      best = k_known[i].id;
      best_d = d;
    }
  }
  if (best)
    snprintf(out, cap, "%s", best);
}

int sac_env_apply_module(char *env, size_t cap, const char *module) {
  assert(env && module);
  if (!module[0])
    return 0;
  size_t p = strlen(GYM_PREFIX);
  if (strncmp(env, GYM_PREFIX, p) != 0) {
    SAC_ERROR("env", "--env_module %s needs --env gym:ID (the module registers Gymnasium IDs), not '%s'",
              module, env);
    return SAC_ECONFIG;
  }
  size_t m = strlen(module);
  if (strncmp(env + p, module, m) == 0 && env[p + m] == ':')
    return 0; /* already applied (a resumed run's saved config holds both) */
  char id[1024];
  if (snprintf(id, sizeof id, "%s", env + p) >= (int)sizeof id ||
      snprintf(env, cap, GYM_PREFIX "%s:%s", module, id) >= (int)cap) {
    SAC_ERROR("env", "--env gym:%s with --env_module %s is too long", id, module);
    return SAC_ECONFIG;
  }
  return 0;
}

int sac_env_resolve(const char *name, char *out, size_t cap) {
  assert(name && out && cap > 0);
  out[0] = '\0';
  if (strncmp(name, PLUGIN_PREFIX, strlen(PLUGIN_PREFIX)) == 0)
    return snprintf(out, cap, "%s", name) < (int)cap ? 0 : SAC_EINVAL;
  if (strncmp(name, GYM_PREFIX, strlen(GYM_PREFIX)) == 0) {
    if (!name[strlen(GYM_PREFIX)])
      return SAC_ENOTFOUND;
    char path[1024];
    int rc = sac__env_plugin_find(GYM_SO, path, sizeof path);
    if (rc < 0)
      return rc;
    return snprintf(out, cap, PLUGIN_PREFIX "%s:%s", path, name + strlen(GYM_PREFIX)) < (int)cap ? 0
                                                                                                 : SAC_EINVAL;
  }
  size_t id_len = strcspn(name, ",");
  for (size_t i = 0; i < sizeof k_known / sizeof k_known[0]; i++) {
    const known_env_t *k = &k_known[i];
    if (strlen(k->id) != id_len || strncmp(name, k->id, id_len) != 0)
      continue;
    if (k->ops) /* built-ins take no arguments */
      return name[id_len] ? SAC_ENOTFOUND : (snprintf(out, cap, "%s", k->id) < (int)cap ? 0 : SAC_EINVAL);
    char path[1024];
    int rc = sac__env_plugin_find(k->plugin, path, sizeof path);
    if (rc < 0)
      return rc;
    return snprintf(out, cap, PLUGIN_PREFIX "%s:%s", path, name) < (int)cap ? 0 : SAC_EINVAL;
  }
  return SAC_ENOTFOUND;
}

void sac_env_log_unknown(const char *name) {
  char known[512], near[64], hint[128] = "";
  sac_env_known_ids(known, sizeof known);
  sac_env_suggest(name, near, sizeof near);
  if (near[0])
    snprintf(hint, sizeof hint, "did you mean %s%s? ", near,
             name[strcspn(name, ",")] ? " (with your ,ARGS)" : "");
  SAC_ERROR("env",
            "unknown environment '%s' (%sknown: %s; gym:ID for any other Gymnasium ID through the Gymnasium "
            "bridge; plugin:PATH.so[:ARGS] for your own plugin)",
            name, hint, known);
}

int sac_env_check(const char *name) {
  assert(name);
  char resolved[2048];
  int rc = sac_env_resolve(name, resolved, sizeof resolved);
  if (rc == SAC_ENOTFOUND || rc == SAC_EINVAL) {
    sac_env_log_unknown(name);
    return SAC_ENOTFOUND;
  }
  return rc; /* SAC_EPLUGIN: sac__env_plugin_find said why */
}

int sac_env_new(const char *name, uint64_t seed, uint64_t stream, sac_env_t **out) {
  assert(name && out);
  *out = NULL;
  const sac__env_ops_t *ops = NULL;
  const char *args = NULL;
  char resolved[2048];
  int rc = sac_env_resolve(name, resolved, sizeof resolved);
  if (rc == SAC_EPLUGIN)
    return rc; /* the plugin file was not found; sac__env_plugin_find said where it looked */
  if (rc < 0) {
    sac_env_log_unknown(name);
    return SAC_ENOTFOUND;
  }
  if (strncmp(resolved, PLUGIN_PREFIX, strlen(PLUGIN_PREFIX)) == 0) {
    ops = &sac__env_plugin_ops;
    args = resolved + strlen(PLUGIN_PREFIX);
  } else {
    for (size_t i = 0; i < sizeof k_known / sizeof k_known[0] && !ops; i++)
      if (strcmp(resolved, k_known[i].id) == 0)
        ops = k_known[i].ops;
  }
  assert(ops);

  sac_env_t *env = calloc(1, sizeof *env);
  if (!env)
    return SAC_ENOMEM;
  env->ops = ops;
  rc = ops->create(args, &env->spec, &env->impl);
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

int sac_env_state_size(sac_env_t *env) {
  assert(env);
  if (env->ops->set_state)
    return env->ops->state_dim;
  return env->ops->state_size ? env->ops->state_size(env->impl) : SAC_EUNSUPPORTED;
}

int sac_env_set_state(sac_env_t *env, const double *state, int n, float *obs) {
  assert(env && state && obs);
  if (!env->ops->set_state && !env->ops->plugin_set_state)
    return SAC_EUNSUPPORTED;
  if (!env->started)
    return SAC_ESTATE;
  if (env->ops->set_state && n != env->ops->state_dim) /* before reading n values of state */
    return SAC_EINVAL;
  for (int i = 0; i < n; i++)
    if (!isfinite(state[i]))
      return SAC_EINVAL;
  if (!env->ops->set_state) /* a plugin checks the size itself (its state may not be readable) */
    return env->ops->plugin_set_state(env->impl, state, n, obs);
  env->ops->set_state(env->impl, state, obs);
  return 0;
}

int sac_env_get_state(const sac_env_t *env, double *state, int n) {
  assert(env && state);
  if (!env->ops->get_state && !env->ops->plugin_get_state)
    return SAC_EUNSUPPORTED;
  if (!env->started)
    return SAC_ESTATE;
  if (!env->ops->get_state) {
    int size = env->ops->state_size(env->impl);
    return size < 0 ? size : n != size ? SAC_EINVAL : env->ops->plugin_get_state(env->impl, state, n);
  }
  if (n != env->ops->state_dim)
    return SAC_EINVAL;
  env->ops->get_state(env->impl, state);
  return 0;
}

int sac_env_render(sac_env_t *env, unsigned char *rgb, size_t cap, int *width, int *height, int *fps) {
  assert(env && width && height && fps);
  if (!env->ops->render)
    return SAC_EUNSUPPORTED;
  if (!env->started)
    return SAC_ESTATE;
  *fps = 0;
  return env->ops->render(env->impl, rgb, cap, width, height, fps);
}
