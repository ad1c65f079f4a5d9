/* Deliberately broken environment plugins for tests/test_env.c: the same minimal 1-D
 * environment built several times, each with one defect picked by a compile definition:
 *   BROKEN_MISSING_SYMBOL  does not export sac_env_plugin_step
 *   BROKEN_BAD_ABI         reports ABI version 999
 *   BROKEN_BAD_SPEC        reports act_low >= act_high
 *   BROKEN_CREATE_FAILS    create returns NULL with a reason
 *   BROKEN_NAN_STEP        step writes a NaN observation on its second step
 * Not an example to follow: examples/env_plugin/point_mass.c is. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/env_plugin.h"

typedef struct {
  float x;
  int steps;
} broken_t;

SAC_ENV_PLUGIN_EXPORT int sac_env_plugin_abi_version(void) {
#ifdef BROKEN_BAD_ABI
  return 999;
#else
  return SAC_ENV_PLUGIN_ABI_VERSION;
#endif
}

SAC_ENV_PLUGIN_EXPORT void *sac_env_plugin_create(const char *args, sac_env_plugin_spec_t *spec, char *err,
                                                  size_t err_len) {
#ifdef BROKEN_CREATE_FAILS
  snprintf(err, err_len, "refusing on purpose (args '%s')", args);
  return NULL;
#endif
  broken_t *b = calloc(1, sizeof *b);
  if (!b)
    return NULL;
  snprintf(spec->name, sizeof spec->name, "Broken-v0");
  spec->obs_dim = 1;
  spec->act_dim = 1;
  spec->act_low[0] = -1.0f;
  spec->act_high[0] = 1.0f;
#ifdef BROKEN_BAD_SPEC
  spec->act_high[0] = -1.0f;
#endif
  spec->max_episode_steps = 10;
  return b;
}

SAC_ENV_PLUGIN_EXPORT void sac_env_plugin_destroy(void *handle) { free(handle); }

SAC_ENV_PLUGIN_EXPORT int sac_env_plugin_reset(void *handle, uint64_t seed, float *obs) {
  broken_t *b = handle;
  b->x = (float)(seed % 100) / 100.0f;
  b->steps = 0;
  obs[0] = b->x;
  return 0;
}

#ifndef BROKEN_MISSING_SYMBOL
SAC_ENV_PLUGIN_EXPORT int sac_env_plugin_step(void *handle, const float *action, float *obs, float *reward,
                                              int *terminated) {
  broken_t *b = handle;
  b->x += action[0];
  b->steps++;
  obs[0] = b->x;
#ifdef BROKEN_NAN_STEP
  if (b->steps >= 2)
    obs[0] = NAN;
#endif
  *reward = 0.0f;
  *terminated = 0;
  return 0;
}
#endif
