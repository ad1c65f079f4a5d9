/* Per-environment presets (see preset.h): finding presets/<task>.conf and applying it under
 * every source the user controls. The files are plain config files with a [learner] section;
 * which values they hold, and the runs that showed them, are in presets/README.md. */
#include "common/preset.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "common/findfile.h"
#include "common/log.h"

#ifndef SAC_PRESET_REL_DIR
#define SAC_PRESET_REL_DIR "../share/sacfleet/presets" /* from the binary's folder */
#endif
#ifndef SAC_PRESET_INSTALL_DIR
#define SAC_PRESET_INSTALL_DIR "/usr/local/share/sacfleet/presets"
#endif
#ifndef SAC_PRESET_SOURCE_DIR
#define SAC_PRESET_SOURCE_DIR ""
#endif

void sac_preset_task(const char *env, char *out, size_t cap) {
  if (!cap)
    return;
  out[0] = '\0';
  const char *id = env;
  if (strncmp(env, "gym:", 4) == 0) {
    id = env + 4;
    const char *colon = strchr(id, ':'); /* gym:module:ID (--env_module) */
    if (colon)
      id = colon + 1;
  } else if (strncmp(env, "plugin:", 7) == 0) {
    const char *so = strstr(env, ".so:"); /* plugin:PATH.so:ID[,ARGS] */
    if (!so)
      return;
    id = so + 4;
  }
  size_t n = strcspn(id, ",");
  if (n + 1 > cap || n == 0 || memchr(id, '/', n))
    return;
  memcpy(out, id, n);
  out[n] = '\0';
}

int sac_preset_find(const char *task, char *out, size_t cap) {
  if (!task[0])
    return SAC_ENOTFOUND;
  char file[300];
  if (snprintf(file, sizeof file, "%s.conf", task) >= (int)sizeof file)
    return SAC_ENOTFOUND;
  const sac_find_t where = {"SAC_PRESET_PATH",     0, SAC_PRESET_REL_DIR, SAC_PRESET_INSTALL_DIR,
                            SAC_PRESET_SOURCE_DIR, 0};
  return sac_find_file(&where, file, out, cap, NULL, 0) == 0 ? 0 : SAC_ENOTFOUND;
}

int sac_preset_apply(const sac_cfg_opt_t *opts, size_t n_opts, void *target, const char *choice,
                     const char *env, const char *section, unsigned char *sources, int from_file,
                     char *chosen, size_t cap) {
  snprintf(chosen, cap, "none");
  if (strcmp(choice, "none") == 0)
    return 0;
  char path[PATH_MAX];
  if (strcmp(choice, "auto") == 0) {
    char task[256];
    sac_preset_task(env, task, sizeof task);
    if (sac_preset_find(task, path, sizeof path) != 0) {
      SAC_INFO("config", "no preset for %s: the defaults apply (presets/README.md lists the presets)",
               task[0] ? task : env);
      return 0;
    }
  } else {
    if (snprintf(path, sizeof path, "%s", choice) >= (int)sizeof path || access(path, R_OK) != 0) {
      if (from_file) { /* a run's saved config names the preset it was made with */
        SAC_WARN("config",
                 "the preset %s named in the config file is not there any more; the config file's "
                 "values stand",
                 choice);
        snprintf(chosen, cap, "%s", choice);
        return 0;
      }
      SAC_ERROR("config", "--preset %s: no such file (auto: the environment's own preset; none: no preset)",
                choice);
      return SAC_ECONFIG;
    }
  }
  if (sac_config_apply_preset(opts, n_opts, target, path, section, sources) != 0) {
    SAC_ERROR("config", "the preset %s cannot be applied (see above)", path);
    return SAC_ECONFIG;
  }
  char set[512] = "";
  size_t len = 0;
  for (size_t i = 0; i < n_opts && len < sizeof set; i++)
    if ((sources[i] & ~SAC_CFG_SRC_SHARED) == SAC_CFG_SRC_PRESET)
      len += (size_t)snprintf(set + len, sizeof set - len, "%s%s", len ? ", " : "", opts[i].key);
  SAC_INFO("config",
           "preset %s: sets %s (a --config file, SAC_* or a flag overrides each; --preset none: no preset)",
           path, set[0] ? set : "nothing the other sources left at its default");
  snprintf(chosen, cap, "%s", path);
  return 0;
}
