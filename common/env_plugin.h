/* The C ABI of a sacfleet environment plugin: a shared library, loaded with dlopen by
 * sac_env_new("plugin:/path/to/libfoo.so[:ARGS]"), that exports the five functions
 * declared below. This header is self-contained (it includes only the C standard
 * library) so a plugin can be built outside the sacfleet tree by copying it; it is the
 * whole contract. docs/ENV_PLUGIN.md explains it with a worked example
 * (examples/env_plugin/point_mass.c).
 *
 * Lifecycle, as the loader drives it:
 *   1. sac_env_plugin_abi_version() must return SAC_ENV_PLUGIN_ABI_VERSION, the version
 *      the plugin was compiled against; a mismatch refuses the plugin.
 *   2. sac_env_plugin_create(args, spec, err, err_len) makes one environment instance
 *      and fills *spec (zeroed by the loader). args is the text after the second ':' of
 *      the name, or "" (never NULL). On failure it returns NULL and may write a
 *      NUL-terminated reason into err (err_len bytes).
 *   3. sac_env_plugin_reset(handle, seed, obs) starts an episode from a state drawn with
 *      the given 64-bit seed (the loader draws one per reset from the environment's
 *      sacfleet random stream, so a run is reproducible); writes spec->obs_dim floats.
 *   4. sac_env_plugin_step(handle, action, obs, reward, terminated) advances one step
 *      with act_dim floats in [act_low, act_high] (the caller scales to the bounds but
 *      does not clip: clip if the task needs it), writes the next observation, the
 *      reward, and *terminated = 1 when the episode reached a terminal state (goal,
 *      failure), else 0. Do NOT report time limits here: the loader truncates at
 *      spec->max_episode_steps and reports truncation separately.
 *   5. sac_env_plugin_destroy(handle) frees the instance.
 * reset/step return 0 on success and any non-zero value on failure (the loader reports
 * SAC_EPLUGIN); they should not allocate, and must write only finite numbers.
 *
 * Threads: one handle is used by one thread at a time, but different handles of the same
 * library may be used from different threads at once, so keep no mutable global state
 * (or guard it). A library is dlopen'ed once per environment instance.
 *
 * Optional extensions: a plugin may also export the three functions declared after the
 * five (rendering, and its physical state for a renderer that mirrors it, as sac-eval
 * --record does). The loader looks them up with dlsym and does without them, so they
 * need no new ABI version; a plugin without them cannot be recorded.
 *
 * Versioning: any change to a signature or to sac_env_plugin_spec_t increments
 * SAC_ENV_PLUGIN_ABI_VERSION; the loader accepts exactly its own version. */
#ifndef SAC_ENV_PLUGIN_H
#define SAC_ENV_PLUGIN_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SAC_ENV_PLUGIN_ABI_VERSION 1
#define SAC_ENV_PLUGIN_MAX_OBS 1024 /* obs_dim limit */
#define SAC_ENV_PLUGIN_MAX_ACT 64   /* act_dim limit */
#define SAC_ENV_PLUGIN_NAME_LEN 64  /* name buffer, including the NUL */

/* Makes a function visible from a library built with -fvisibility=hidden. */
#if defined(_WIN32)
#define SAC_ENV_PLUGIN_EXPORT __declspec(dllexport)
#else
#define SAC_ENV_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif

/* What create() reports about the environment. All fields are required. */
typedef struct {
  char name[SAC_ENV_PLUGIN_NAME_LEN];    /* e.g. "PointMass-v0"; NUL-terminated */
  int obs_dim;                           /* 1..SAC_ENV_PLUGIN_MAX_OBS */
  int act_dim;                           /* 1..SAC_ENV_PLUGIN_MAX_ACT */
  float act_low[SAC_ENV_PLUGIN_MAX_ACT]; /* finite, act_low[i] < act_high[i] */
  float act_high[SAC_ENV_PLUGIN_MAX_ACT];
  int max_episode_steps; /* time limit the loader enforces; 0: none */
} sac_env_plugin_spec_t;

/* The five exported symbols, with their exact names. */
SAC_ENV_PLUGIN_EXPORT int sac_env_plugin_abi_version(void);
SAC_ENV_PLUGIN_EXPORT void *sac_env_plugin_create(const char *args, sac_env_plugin_spec_t *spec, char *err,
                                                  size_t err_len);
SAC_ENV_PLUGIN_EXPORT void sac_env_plugin_destroy(void *handle);
SAC_ENV_PLUGIN_EXPORT int sac_env_plugin_reset(void *handle, uint64_t seed, float *obs);
SAC_ENV_PLUGIN_EXPORT int sac_env_plugin_step(void *handle, const float *action, float *obs, float *reward,
                                              int *terminated);

/* Optional. The current frame as width x height RGB24 pixels, rows top to bottom, into rgb
 * (cap bytes); *fps is the rate the environment is meant to be watched at (0: unknown).
 * Returns 0; 1 when cap is too small (width and height are set: call again with
 * width * height * 3 bytes); any other value when it cannot render. */
SAC_ENV_PLUGIN_EXPORT int sac_env_plugin_render(void *handle, unsigned char *rgb, size_t cap, int *width,
                                                int *height, int *fps);
/* Optional. The physical state (MuJoCo: qpos then qvel) into state (cap doubles). Returns
 * the number of doubles of the state (nothing is written when it exceeds cap), or < 0. */
SAC_ENV_PLUGIN_EXPORT int sac_env_plugin_get_state(void *handle, double *state, int cap);
/* Optional. Sets the physical state (n doubles, as get_state writes them) and writes the
 * observation it gives. 0, or non-zero for a state of the wrong size. */
SAC_ENV_PLUGIN_EXPORT int sac_env_plugin_set_state(void *handle, const double *state, int n, float *obs);

/* Pointer types of the same functions, for the loader. */
typedef int (*sac_env_plugin_abi_version_fn)(void);
typedef void *(*sac_env_plugin_create_fn)(const char *args, sac_env_plugin_spec_t *spec, char *err,
                                          size_t err_len);
typedef void (*sac_env_plugin_destroy_fn)(void *handle);
typedef int (*sac_env_plugin_reset_fn)(void *handle, uint64_t seed, float *obs);
typedef int (*sac_env_plugin_step_fn)(void *handle, const float *action, float *obs, float *reward,
                                      int *terminated);
typedef int (*sac_env_plugin_render_fn)(void *handle, unsigned char *rgb, size_t cap, int *width, int *height,
                                        int *fps);
typedef int (*sac_env_plugin_get_state_fn)(void *handle, double *state, int cap);
typedef int (*sac_env_plugin_set_state_fn)(void *handle, const double *state, int n, float *obs);

#ifdef __cplusplus
}
#endif
#endif
