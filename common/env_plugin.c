/* The plugin loader: turns "PATH[:ARGS]" (the part of "plugin:PATH[:ARGS]" after the
 * prefix) into an environment by dlopen'ing PATH and binding the five symbols of the ABI
 * in env_plugin.h. It refuses, with SAC_EPLUGIN and a log line naming the path and the
 * cause (dlerror(), the missing symbol, the ABI version, the bad spec field), anything it
 * cannot use. It also refuses non-finite observations and rewards from the plugin, so a
 * broken plugin cannot poison the replay buffer. The time limit is applied by env.c from
 * spec.max_episode_steps. PATH cannot contain ':'. */
#include <dlfcn.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/env_internal.h"
#include "common/env_plugin.h"
#include "common/error.h"
#include "common/findfile.h"
#include "common/log.h"

_Static_assert(SAC_ENV_PLUGIN_MAX_OBS == SAC_ENV_MAX_OBS, "plugin ABI and env.h disagree on obs_dim limit");
_Static_assert(SAC_ENV_PLUGIN_MAX_ACT == SAC_ENV_MAX_ACT, "plugin ABI and env.h disagree on act_dim limit");
_Static_assert(SAC_ENV_PLUGIN_NAME_LEN <= sizeof(((sac_env_spec_t *)0)->name), "name does not fit");

typedef struct {
  void *dl;     /* dlopen handle */
  void *handle; /* the plugin's instance */
  sac_env_plugin_destroy_fn destroy;
  sac_env_plugin_reset_fn reset;
  sac_env_plugin_step_fn step;
  /* optional extensions (NULL: not exported) */
  sac_env_plugin_render_fn render;
  sac_env_plugin_get_state_fn get_state;
  sac_env_plugin_set_state_fn set_state;
  int obs_dim;
  char path[]; /* for log lines */
} plugin_t;

/* Looks up one symbol; logs its name, the path and dlerror() when it is missing. */
static void *lookup(void *dl, const char *path, const char *symbol) {
  dlerror();
  void *p = dlsym(dl, symbol);
  if (!p) {
    const char *err = dlerror();
    SAC_ERROR("env", "plugin %s: missing symbol %s (%s)", path, symbol, err ? err : "resolves to NULL");
  }
  return p;
}

/* Returns a description of the first problem in spec, or NULL if it is usable. */
static const char *check_spec(const sac_env_plugin_spec_t *spec, int *index) {
  *index = -1;
  if (memchr(spec->name, '\0', sizeof spec->name) == NULL)
    return "name is not NUL-terminated";
  if (spec->obs_dim < 1 || spec->obs_dim > SAC_ENV_PLUGIN_MAX_OBS)
    return "obs_dim out of [1, SAC_ENV_PLUGIN_MAX_OBS]";
  if (spec->act_dim < 1 || spec->act_dim > SAC_ENV_PLUGIN_MAX_ACT)
    return "act_dim out of [1, SAC_ENV_PLUGIN_MAX_ACT]";
  for (int i = 0; i < spec->act_dim; i++) {
    *index = i;
    if (!isfinite(spec->act_low[i]) || !isfinite(spec->act_high[i]))
      return "non-finite action bound";
    if (!(spec->act_low[i] < spec->act_high[i]))
      return "act_low >= act_high";
  }
  *index = -1;
  if (spec->max_episode_steps < 0)
    return "max_episode_steps < 0";
  return NULL;
}

/* ---- finding a shipped plugin by file name ---- */

#ifndef SAC_PLUGIN_REL_DIR
#define SAC_PLUGIN_REL_DIR "../lib/sacfleet" /* from the binary's folder */
#endif
#ifndef SAC_PLUGIN_INSTALL_DIR
#define SAC_PLUGIN_INSTALL_DIR "/usr/local/lib/sacfleet"
#endif
#ifndef SAC_PLUGIN_BUILD_DIRS
#define SAC_PLUGIN_BUILD_DIRS "" /* ':'-separated */
#endif

#ifdef SAC_MUJOCO_BUILT
static int g_mujoco_built = 1;
#else
static int g_mujoco_built = 0;
#endif
static int g_only_plugin_path;

void sac__env_plugin_test_search(int only_plugin_path, int mujoco_built) {
  g_only_plugin_path = only_plugin_path;
  g_mujoco_built = mujoco_built;
}

int sac__env_plugin_find(const char *file, char *out, size_t cap) {
  char seen[4096];
  const sac_find_t where = {"SAC_PLUGIN_PATH",     1,
                            SAC_PLUGIN_REL_DIR,    SAC_PLUGIN_INSTALL_DIR,
                            SAC_PLUGIN_BUILD_DIRS, g_only_plugin_path};
  if (sac_find_file(&where, file, out, cap, seen, sizeof seen) == 0)
    return 0;
  if (!g_mujoco_built && strcmp(file, "libsac_env_mujoco.so") == 0) {
    /* the usual cause: the build found no libmujoco (CMake's status line said so) */
    SAC_ERROR(
        "env",
        "the MuJoCo environments are not in this build: CMake did not find libmujoco when it configured, so "
        "%s was not built. Install Debian's libmujoco-dev (sudo apt-get install libmujoco-dev, or "
        "scripts/install-deps.sh --all) and pip install \"gymnasium[mujoco]\" for the models, then build "
        "again: cmake -S . -B build && cmake --build build (docs/ENVIRONMENTS.md)",
        file);
    return SAC_EPLUGIN;
  }
  SAC_ERROR("env", "plugin %s not found (looked in: %s); set SAC_PLUGIN_PATH to the folder that holds it%s",
            file, seen,
            strcmp(file, "libsac_env_gym.so") == 0
                ? " (the Gymnasium bridge is built where CMake finds a Python 3 with its embedding library: "
                  "python3-dev, then build again; docs/ENVIRONMENTS.md)"
                : "");
  return SAC_EPLUGIN;
}

static int all_finite(const float *x, int n) {
  for (int i = 0; i < n; i++)
    if (!isfinite(x[i]))
      return 0;
  return 1;
}

static int plugin_create(const char *name, sac_env_spec_t *spec, void **impl) {
  const char *colon = strchr(name, ':');
  size_t path_len = colon ? (size_t)(colon - name) : strlen(name);
  const char *args = colon ? colon + 1 : "";
  if (path_len == 0) {
    SAC_ERROR("env", "plugin: empty library path in 'plugin:%s' (expected plugin:PATH.so[:ARGS])", name);
    return SAC_EPLUGIN;
  }
  plugin_t *p = calloc(1, sizeof *p + path_len + 1);
  if (!p)
    return SAC_ENOMEM;
  memcpy(p->path, name, path_len);
  p->path[path_len] = '\0';

  int rc = SAC_EPLUGIN;
  p->dl = dlopen(p->path, RTLD_NOW | RTLD_LOCAL);
  if (!p->dl) {
    const char *err = dlerror();
    SAC_ERROR("env", "plugin %s: cannot load: %s", p->path, err ? err : "dlopen failed");
    goto err;
  }

  /* Every symbol is looked up (and each missing one logged) before giving up. */
  void *sym_abi = lookup(p->dl, p->path, "sac_env_plugin_abi_version");
  void *sym_create = lookup(p->dl, p->path, "sac_env_plugin_create");
  void *sym_destroy = lookup(p->dl, p->path, "sac_env_plugin_destroy");
  void *sym_reset = lookup(p->dl, p->path, "sac_env_plugin_reset");
  void *sym_step = lookup(p->dl, p->path, "sac_env_plugin_step");
  if (!sym_abi || !sym_create || !sym_destroy || !sym_reset || !sym_step)
    goto err;
  /* POSIX guarantees a data pointer from dlsym converts to a function pointer. */
  sac_env_plugin_abi_version_fn abi_version = (sac_env_plugin_abi_version_fn)sym_abi;
  sac_env_plugin_create_fn create = (sac_env_plugin_create_fn)sym_create;
  p->destroy = (sac_env_plugin_destroy_fn)sym_destroy;
  p->reset = (sac_env_plugin_reset_fn)sym_reset;
  p->step = (sac_env_plugin_step_fn)sym_step;
  p->render = (sac_env_plugin_render_fn)dlsym(p->dl, "sac_env_plugin_render");
  p->get_state = (sac_env_plugin_get_state_fn)dlsym(p->dl, "sac_env_plugin_get_state");
  p->set_state = (sac_env_plugin_set_state_fn)dlsym(p->dl, "sac_env_plugin_set_state");

  int version = abi_version();
  if (version != SAC_ENV_PLUGIN_ABI_VERSION) {
    SAC_ERROR("env",
              "plugin %s: ABI version %d, but this sacfleet loads version %d (rebuild it against this "
              "env_plugin.h)",
              p->path, version, SAC_ENV_PLUGIN_ABI_VERSION);
    goto err;
  }

  sac_env_plugin_spec_t pspec;
  memset(&pspec, 0, sizeof pspec);
  char why[256] = "";
  p->handle = create(args, &pspec, why, sizeof why);
  if (!p->handle) {
    why[sizeof why - 1] = '\0';
    SAC_ERROR("env", "plugin %s: sac_env_plugin_create(\"%s\") failed: %s", p->path, args,
              why[0] ? why : "no reason given");
    goto err;
  }
  int index;
  const char *bad = check_spec(&pspec, &index);
  if (bad) {
    if (index >= 0)
      SAC_ERROR("env", "plugin %s: invalid spec: %s (action %d)", p->path, bad, index);
    else
      SAC_ERROR("env", "plugin %s: invalid spec: %s", p->path, bad);
    goto err;
  }

  memcpy(spec->name, pspec.name, sizeof pspec.name);
  if (spec->name[0] == '\0') {
    const char *base = strrchr(p->path, '/');
    snprintf(spec->name, sizeof spec->name, "%s", base ? base + 1 : p->path);
  }
  spec->obs_dim = pspec.obs_dim;
  spec->act_dim = pspec.act_dim;
  memcpy(spec->act_low, pspec.act_low, sizeof(float) * (size_t)pspec.act_dim);
  memcpy(spec->act_high, pspec.act_high, sizeof(float) * (size_t)pspec.act_dim);
  spec->max_episode_steps = pspec.max_episode_steps;
  p->obs_dim = pspec.obs_dim;
  SAC_DEBUG("env", "plugin %s: loaded '%s' (obs %d, act %d, time limit %d)", p->path, spec->name,
            spec->obs_dim, spec->act_dim, spec->max_episode_steps);
  *impl = p;
  return 0;

err:
  if (p->handle)
    p->destroy(p->handle);
  if (p->dl)
    dlclose(p->dl);
  free(p);
  return rc;
}

static void plugin_destroy(void *impl) {
  plugin_t *p = impl;
  p->destroy(p->handle);
  dlclose(p->dl);
  free(p);
}

static int plugin_reset(void *impl, sac_rng_t *rng, float *obs) {
  plugin_t *p = impl;
  uint64_t seed = sac_rng_u64(rng);
  int rc = p->reset(p->handle, seed, obs);
  if (rc != 0) {
    SAC_ERROR("env", "plugin %s: sac_env_plugin_reset failed (%d)", p->path, rc);
    return SAC_EPLUGIN;
  }
  if (!all_finite(obs, p->obs_dim)) {
    SAC_ERROR("env", "plugin %s: reset returned a non-finite observation", p->path);
    return SAC_ENONFINITE;
  }
  return 0;
}

static int plugin_step(void *impl, const float *action, float *obs, float *reward, int *terminated) {
  plugin_t *p = impl;
  int rc = p->step(p->handle, action, obs, reward, terminated);
  if (rc != 0) {
    SAC_ERROR("env", "plugin %s: sac_env_plugin_step failed (%d)", p->path, rc);
    return SAC_EPLUGIN;
  }
  if (!all_finite(obs, p->obs_dim) || !isfinite(*reward)) {
    SAC_ERROR("env", "plugin %s: step returned a non-finite observation or reward", p->path);
    return SAC_ENONFINITE;
  }
  return 0;
}

/* ---- the optional extensions ---- */

static int plugin_state_size(void *impl) {
  plugin_t *p = impl;
  double probe;
  int n = p->get_state ? p->get_state(p->handle, &probe, 0) : -1;
  return n > 0 ? n : SAC_EUNSUPPORTED;
}

static int plugin_get_state(void *impl, double *state, int n) {
  plugin_t *p = impl;
  if (!p->get_state)
    return SAC_EUNSUPPORTED;
  return p->get_state(p->handle, state, n) == n ? 0 : SAC_EPLUGIN;
}

static int plugin_set_state(void *impl, const double *state, int n, float *obs) {
  plugin_t *p = impl;
  if (!p->set_state)
    return SAC_EUNSUPPORTED;
  if (p->set_state(p->handle, state, n, obs) != 0) {
    SAC_ERROR("env", "plugin %s: sac_env_plugin_set_state of %d numbers failed", p->path, n);
    return SAC_EPLUGIN;
  }
  return 0;
}

static int plugin_render(void *impl, unsigned char *rgb, size_t cap, int *width, int *height, int *fps) {
  plugin_t *p = impl;
  if (!p->render)
    return SAC_EUNSUPPORTED;
  int rc = p->render(p->handle, rgb, cap, width, height, fps);
  if (rc == 1)
    return SAC_ETOOBIG;
  return rc == 0 ? 0 : SAC_EUNSUPPORTED;
}

const sac__env_ops_t sac__env_plugin_ops = {
    .create = plugin_create,
    .destroy = plugin_destroy,
    .reset = plugin_reset,
    .step = plugin_step,
    .state_dim = 0,
    .set_state = NULL,
    .get_state = NULL,
    .state_size = plugin_state_size,
    .plugin_get_state = plugin_get_state,
    .plugin_set_state = plugin_set_state,
    .render = plugin_render,
};
