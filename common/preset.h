/* Per-environment presets: the hyper-parameters a task is known to learn with, shipped as
 * config files (presets/<ID>.conf, one per supported task) and applied by sac-learner
 * between the defaults and every other source: defaults < preset < --config < SAC_* <
 * command line. This module finds a task's file and applies it; it does not know any
 * option (the file is read with sac_config_apply_preset). */
#ifndef SAC_COMMON_PRESET_H
#define SAC_COMMON_PRESET_H
#include <stddef.h>

#include "common/config.h"

/* The task an --env value names, for its preset: "HalfCheetah-v5,max_steps=500" ->
 * "HalfCheetah-v5", "gym:Hopper-v5" -> "Hopper-v5", "plugin:/p/libsac_env_mujoco.so:Ant-v4"
 * -> "Ant-v4", "plugin:/p/my.so" -> "" (no task). Never fails; out is NUL-terminated. */
void sac_preset_task(const char *env, char *out, size_t cap);

/* Finds presets/<task>.conf: in each folder of SAC_PRESET_PATH (':'-separated), then
 * share/sacfleet/presets relative to the binary (a moved install), the configured install
 * folder, and the source tree's presets/. 0 with the path in out, or SAC_ENOTFOUND
 * (nothing logged: a task without a preset is not an error). */
int sac_preset_find(const char *task, char *out, size_t cap);

/* Applies the preset that choice names to the options whose sources[] entry is still
 * SAC_CFG_SRC_DEFAULT: choice "auto" is the task's own file (none: nothing happens), "none"
 * nothing, anything else a file path. chosen receives the file applied, or "none". Logs the
 * file and the options it set. from_file: choice itself came from a config file (a run's
 * config.txt): a file gone since is then a warning, not an error. 0 or SAC_ECONFIG. */
int sac_preset_apply(const sac_cfg_opt_t *opts, size_t n_opts, void *target, const char *choice,
                     const char *env, const char *section, unsigned char *sources, int from_file,
                     char *chosen, size_t cap);

#endif
