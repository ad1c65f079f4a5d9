/* Private to common/env*.c: the operations table behind sac_env_t. env.c is the wrapper
 * (name dispatch, time limit, elapsed steps, argument checks); each environment kind
 * (env_pendulum.c, env_mountaincar.c, env_plugin.c) supplies one table. Not a public
 * interface: user environments use the plugin ABI in env_plugin.h instead. */
#ifndef SAC_COMMON_ENV_INTERNAL_H
#define SAC_COMMON_ENV_INTERNAL_H
#include "common/env.h"
#include "common/rng.h"

typedef struct {
  /* Makes an instance for args (NULL for built-ins; "PATH[:ARGS]" for plugins) and fills
   * spec (zeroed by the caller). Returns 0 or a negative SAC_E* code, having logged why;
   * *impl is then untouched. */
  int (*create)(const char *args, sac_env_spec_t *spec, void **impl);
  void (*destroy)(void *impl);
  /* Draws the initial state from rng and writes obs. 0 or a negative code. */
  int (*reset)(void *impl, sac_rng_t *rng, float *obs);
  /* Advances one step (action already checked finite); writes obs, reward, terminated. */
  int (*step)(void *impl, const float *action, float *obs, float *reward, int *terminated);
  /* Test hooks for built-ins, NULL where unsupported (plugins): the state is state_dim
   * doubles (length and finiteness checked by the caller). */
  int state_dim;
  void (*set_state)(void *impl, const double *state, float *obs);
  void (*get_state)(const void *impl, double *state);
  /* Plugins' optional extensions (env_plugin.h): each returns SAC_EUNSUPPORTED where the
   * plugin does not export it. state_size: doubles in the state; plugin_get_state and
   * plugin_set_state take exactly that many (checked by the caller); render as
   * sac_env_render. */
  int (*state_size)(void *impl);
  int (*plugin_get_state)(void *impl, double *state, int n);
  int (*plugin_set_state)(void *impl, const double *state, int n, float *obs);
  int (*render)(void *impl, unsigned char *rgb, size_t cap, int *width, int *height, int *fps);
} sac__env_ops_t;

extern const sac__env_ops_t sac__env_pendulum_ops;
extern const sac__env_ops_t sac__env_mountaincar_ops;
extern const sac__env_ops_t sac__env_plugin_ops;

/* Finds a plugin file shipped with sacfleet (e.g. "libsac_env_mujoco.so") in, in order:
 * each folder of $SAC_PLUGIN_PATH (':'-separated), the folder of the running binary, that
 * folder's ../LIBDIR/sacfleet (an installed layout, wherever the prefix was moved), the
 * configured install folder, and the build tree's plugin folders. Writes the path to out.
 * 0, or SAC_EPLUGIN with a log line listing every folder looked at. */
int sac__env_plugin_find(const char *file, char *out, size_t cap);
/* Tests only: search SAC_PLUGIN_PATH alone (not the binary's folders, the install prefix or
 * the build tree), and take the MuJoCo plugin as built or not, whatever this build did; so
 * the message of a build without libmujoco can be checked on one that has it. */
void sac__env_plugin_test_search(int only_plugin_path, int mujoco_built);

#endif
