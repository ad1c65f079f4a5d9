/* The environment interface used by actors and the single-process trainer. An
 * environment is a built-in (Pendulum-v1, MountainCarContinuous-v0) or a user plugin
 * loaded with dlopen (see env_plugin.h for the C ABI a plugin implements). This wrapper
 * owns the time limit: sac_env_step() reports termination (from the environment) and
 * truncation (from the time limit) separately, as Gymnasium's TimeLimit does.
 *
 * Actions are given in the environment's own units (the actor scales the policy's
 * [-1, 1] output to [act_low, act_high]); the environment clips as Gymnasium's does.
 * reset/step allocate nothing. An env is used by one thread at a time. */
#ifndef SAC_COMMON_ENV_H
#define SAC_COMMON_ENV_H
#include <stddef.h>
#include <stdint.h>

#include "common/rng.h"

#define SAC_ENV_MAX_OBS 1024
#define SAC_ENV_MAX_ACT 64

typedef struct {
  char name[64];
  int obs_dim;
  int act_dim;
  float act_low[SAC_ENV_MAX_ACT];
  float act_high[SAC_ENV_MAX_ACT];
  int max_episode_steps; /* 0: no time limit */
} sac_env_spec_t;

typedef struct sac_env sac_env_t;

/* Creates an environment by name: an ID of a shipped environment as Gymnasium spells it
 * ("Pendulum-v1", "MountainCarContinuous-v0", "Hopper-v5", ...; see sac_env_known_ids),
 * where plugin-served IDs may carry ",ARGS" for the plugin ("Ant-v4,max_steps=500"), or
 * "plugin:PATH.so" with an optional ":ARGS" suffix passed to the plugin. Its reset
 * distribution draws from the stream (seed, stream). On error returns SAC_ENOTFOUND
 * (unknown name; the log line lists the known IDs), SAC_EPLUGIN (plugin not found, failed
 * to load, misses a symbol, wrong ABI; the log line says which), or SAC_ENOMEM; *out is
 * then NULL. */
int sac_env_new(const char *name, uint64_t seed, uint64_t stream, sac_env_t **out);
/* What sac_env_new would create for name: the built-in's ID, or "plugin:PATH:ARGS" with
 * the plugin file found as sac__env_plugin_find does (SAC_PLUGIN_PATH, next to the running
 * binary, the install prefix, the build tree). 0, SAC_ENOTFOUND (unknown ID), SAC_EPLUGIN
 * (its plugin file is nowhere; logged with the places looked at), SAC_EINVAL (too long). */
int sac_env_resolve(const char *name, char *out, size_t cap);
/* The shipped IDs, comma-separated, into buf (truncated to cap). */
void sac_env_known_ids(char *buf, size_t cap);
/* The shipped ID closest to name (its case ignored, a few letters off: "pendulum-v1" ->
 * "Pendulum-v1", "HalfCheetah" -> "HalfCheetah-v4"), or "" in out when none is close. */
void sac_env_suggest(const char *name, char *out, size_t cap);
/* Logs "unknown environment" for name, with the closest ID and the known ones. */
void sac_env_log_unknown(const char *name);
/* What the programs run before anything starts: whether name can be made (as
 * sac_env_resolve, without loading the plugin). 0; SAC_ENOTFOUND (logged with the closest
 * ID); SAC_EPLUGIN (its plugin is not there: logged with the cause and the fix). */
int sac_env_check(const char *name);
/* --env_module: where env is "gym:ID[,ARGS]" and module is not empty, rewrites env (of cap
 * bytes) in place to "gym:MODULE:ID[,ARGS]", Gymnasium's spelling for "import MODULE, then
 * make ID" (a user's package that registers its environments on import). 0, or SAC_ECONFIG
 * (logged) when module is given with an env that is not gym:, or the result is too long. */
int sac_env_apply_module(char *env, size_t cap, const char *module);
/* Destroys and NULLs *env; idempotent. */
void sac_env_destroy(sac_env_t **env);
const sac_env_spec_t *sac_env_spec(const sac_env_t *env);
/* Starts an episode; writes obs (obs_dim). Returns 0 or a negative code (plugin error). */
int sac_env_reset(sac_env_t *env, float *obs);
/* One step. Writes obs (the next observation), reward, terminated and truncated (0/1).
 * After terminated or truncated the caller resets. Returns 0 or a negative code. */
int sac_env_step(sac_env_t *env, const float *action, float *obs, float *reward, int *terminated,
                 int *truncated);
/* Steps taken in the current episode. */
int sac_env_elapsed(const sac_env_t *env);

/* Test hooks for the built-in environments, the equivalent of Gymnasium's
 * `env.unwrapped.state = ...`: the state is {theta, thetadot} for Pendulum-v1 and
 * {position, velocity} for MountainCarContinuous-v0 (n = 2). set_state replaces the state
 * of the current episode (call sac_env_reset first; the elapsed count is kept) and writes
 * the matching observation to obs. Both return SAC_EUNSUPPORTED for plugins, SAC_EINVAL
 * for a wrong n or a non-finite state, SAC_ESTATE before the first reset. */
int sac_env_set_state(sac_env_t *env, const double *state, int n, float *obs);
int sac_env_get_state(const sac_env_t *env, double *state, int n);
/* How many doubles the state of set_state/get_state has: 2 for the built-ins, what a
 * plugin's optional sac_env_plugin_get_state says (MuJoCo: nq + nv); SAC_EUNSUPPORTED for
 * a plugin without it. Plugins that export sac_env_plugin_get_state/_set_state (the
 * MuJoCo environments, the Gymnasium bridge for set_state) work with the two calls above
 * with that n: a renderer mirrors an environment it cannot draw this way. */
int sac_env_state_size(sac_env_t *env);
/* The current frame, for recording: width x height RGB24 pixels (rows top to bottom) into
 * rgb (cap bytes), and the frame rate the environment is meant to be watched at in *fps
 * (0: unknown). 0; SAC_ETOOBIG when cap is too small (*width and *height are set);
 * SAC_ESTATE before the first reset; SAC_EUNSUPPORTED where the environment cannot render
 * (the built-ins, a plugin without sac_env_plugin_render, a gym: environment made without
 * render=1). */
int sac_env_render(sac_env_t *env, unsigned char *rgb, size_t cap, int *width, int *height, int *fps);

#endif
