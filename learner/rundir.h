/* The run directory a training run leaves behind, the same in every mode (--mode local,
 * the embedded default, a learner with --shards): the resolved configuration (config.txt,
 * loadable with --config; `--resume DIR` reads it), a metrics CSV with one row per
 * evaluation (metrics.csv), the final policy (policy.bin, see sac_policy_save), the
 * learner's checkpoint (checkpoint.bin, learner/checkpoint.h), a learning-curve picture
 * (curve.svg, learner/curve.h) a person can open, and a TensorBoard event file
 * (events.out.tfevents.*, learner/tbevents.h) with the evaluation points and the
 * training scalars under the environment step. Files other than the event file
 * (appended, flushed per event) are written whole to a temporary name and renamed, so a
 * reader never sees half a file. */
#ifndef SAC_LEARNER_RUNDIR_H
#define SAC_LEARNER_RUNDIR_H
#include <stddef.h>
#include <stdint.h>

#include "common/config.h"
#include "common/env.h"
#include "common/mlp.h"
#include "learner/evaluate.h"
#include "learner/sac.h"
#include "learner/tbevents.h"

#define SAC_RUNDIR_MAX_POINTS 4096

/* The files a run rewrites or appends to every period, for the write-error counts. */
typedef enum {
  SAC_RUNDIR_FILE_TENSORBOARD = 0,
  SAC_RUNDIR_FILE_METRICS_CSV,
  SAC_RUNDIR_FILE_CURVE_SVG,
  SAC_RUNDIR_FILES
} sac_rundir_file_t;

/* One evaluation of the run, as a metrics.csv row holds it. */
typedef struct {
  double wall_s;
  int64_t steps, updates;
  sac_eval_stats_t eval; /* over the evaluation's episodes */
  double train_return;   /* mean return of recent training episodes (NaN: none finished yet) */
  int64_t episodes;      /* training episodes finished so far (-1: not known) */
  sac_stats_t st;        /* the last update's statistics */
} sac_rundir_point_t;

typedef struct {
  char path[1024];
  size_t n;
  sac_rundir_point_t pt[SAC_RUNDIR_MAX_POINTS];
  char title[256];
  sac_tb_t *tb;    /* NULL when the event file could not be made (logged; the run goes on) */
  int64_t tb_step; /* the last step written: periodic scalars wait for a new one */
  /* failed periodic writes by file (a full disk, a removed file): each is logged (rate
   * limited) and counted here, and training goes on; the learner exports them as
   * sac_learner_rundir_write_errors_total{file=...} */
  uint64_t write_errors[SAC_RUNDIR_FILES];
  int created; /* sac_rundir_open made the directory (it did not exist): sac_rundir_discard may remove it */
} sac_rundir_t;

/* What the learner reports to TensorBoard between evaluations. NaN: not known, left out. */
typedef struct {
  double episode_return; /* mean return of the embedded actors' recent episodes */
  double updates_per_s, env_steps_per_s;
  double replay_size; /* transitions held by the shards */
  sac_stats_t st;
  int have_stats; /* st is from at least one update */
} sac_rundir_train_t;

/* Creates base/NAME (base created if missing; NAME from the time and env when name is
 * NULL or empty) and writes config.txt from the option table. 0, SAC_EIO (logged). */
int sac_rundir_open(sac_rundir_t *rd, const char *base, const char *name, const char *env,
                    const sac_cfg_opt_t *opts, size_t n_opts, const void *cfg);
/* Removes the directory sac_rundir_open made, with every file in it, for a run that never
 * made an update (interrupted or failed at start): no run directory is left for a run that
 * did not start. Closes the event file. 0; SAC_ESTATE (the directory existed before this
 * run, or was reopened: left alone); SAC_EIO. */
int sac_rundir_discard(sac_rundir_t *rd);
/* Continues an existing run directory: reads its metrics.csv so the curve goes on,
 * keeping the rows up to `upto_steps` environment steps (where the resumed checkpoint
 * stands: rows a run wrote after its last checkpoint are written again as it goes on;
 * INT64_MAX keeps all). 0, SAC_ENOTFOUND (no such directory), SAC_EIO. */
int sac_rundir_reopen(sac_rundir_t *rd, const char *path, const char *env, int64_t upto_steps);
/* The best mean evaluation return of the points held (NaN: none). */
double sac_rundir_best(const sac_rundir_t *rd);
/* Appends an evaluation point and rewrites metrics.csv and curve.svg; adds eval/return
 * (with eval/return_std, _min, _max) and, once there were updates (p->updates > 0), the
 * train/ scalars of p->st to the event file at step p->steps (the same numbers as the
 * metrics.csv row). 0 or SAC_EIO (a write failed: counted in write_errors and logged,
 * rate limited; the point stays in memory for the next rewrite). */
int sac_rundir_add_eval(sac_rundir_t *rd, const sac_rundir_point_t *p);
/* Adds the training scalars of t at environment step `steps` to the event file (tags in
 * docs/METRICS.md: train/episode_return, train/critic_loss, train/actor_loss, train/alpha,
 * train/entropy, train/mean_q, perf/updates_per_s, perf/env_steps_per_s, replay/size). A
 * failed write is counted in write_errors and logged, rate limited. */
void sac_rundir_add_train(sac_rundir_t *rd, int64_t steps, const sac_rundir_train_t *t);
/* The file label of k: "tensorboard", "metrics_csv", "curve_svg". */
const char *sac_rundir_file_name(sac_rundir_file_t k);
/* Closes the event file. */
void sac_rundir_close(sac_rundir_t *rd);
/* What a policy file records about the environment it was trained on (format 2): the ID
 * as --env takes it and the action bounds the policy's [-1, 1] outputs are scaled to
 * (low + (a + 1) / 2 * (high - low), as the actors and the evaluation do). */
typedef struct {
  char env[256]; /* "" when not recorded (a format-1 file) */
  int act_dim;   /* 0 when not recorded; else the policy's action size */
  float act_low[SAC_ENV_MAX_ACT], act_high[SAC_ENV_MAX_ACT];
} sac_policy_env_t;

/* Fills e from an environment's spec and the ID it was created with. */
void sac_policy_env_from_spec(sac_policy_env_t *e, const char *env_id, const sac_env_spec_t *sp);

/* policy.bin (docs/EXPORT.md), little endian: magic "SACPOL02", u32 n_layers, u32
 * sizes[n_layers + 1], u32 activation, f32 log_std_min, f32 log_std_max, u32 env_len,
 * env_len bytes of the environment ID, f32 act_low[A], f32 act_high[A] (A = sizes[n_layers]
 * / 2), then the parameters (common/mlp.h layout). env NULL writes format 1 ("SACPOL01":
 * no env_len, ID or bounds), for tests. 0, SAC_EINVAL (env that does not fit the policy:
 * logged), SAC_EIO. */
int sac_policy_save(const char *path, const sac_mlp_desc_t *d, const float *params, float log_std_min,
                    float log_std_max, const sac_policy_env_t *env);
/* Loads policy.bin (format 1 or 2); *params is malloc'ed (caller frees). 0, SAC_EIO,
 * SAC_EPROTO (not a policy file, truncated, or bounds that are not finite low < high),
 * SAC_ENOMEM. */
int sac_policy_load(const char *path, sac_mlp_desc_t *d, float **params, float *log_std_min,
                    float *log_std_max);
/* The same, with what the file records about its environment into *env (zeroed for a
 * format-1 file: env "" and act_dim 0). */
int sac_policy_load_env(const char *path, sac_mlp_desc_t *d, float **params, float *log_std_min,
                        float *log_std_max, sac_policy_env_t *env);

/* ---- config.txt: --resume DIR alone, and what a resume changed ---- */

/* The argv sac_rundir_resume_argv built (NULL: none), kept for the process's life. */
extern char **sac_rundir_argv;
/* `--resume DIR` with no --config: replaces *argv (and *argc) with a copy that has
 * `--config DIR/config.txt` first, so the run's own configuration is read and every other
 * option given overrides it (config file < SAC_* < command line); otherwise leaves them.
 * The copy is malloc'ed and lives until exit. 0, or SAC_ECONFIG (logged: DIR has no
 * config.txt). */
int sac_rundir_resume_argv(int *argc, char ***argv);
/* Rewrites DIR/config.txt with the configuration a resumed run uses (resume = "": the
 * file still loads as --config of a new run), and logs each key whose value differs from
 * the file's (an override given beside --resume), listing them in a comment line of the
 * new file. *changed (may be NULL) gets their count. 0 or SAC_EIO (logged). */
int sac_rundir_rewrite_config(const char *dir, const sac_cfg_opt_t *opts, size_t n_opts, const void *cfg,
                              int *changed);
/* The value of key in a config file written by sac_config_dump (quotes and escapes
 * undone) into out. 0, SAC_ENOTFOUND (no such key or no file), SAC_EINVAL (too long). */
int sac_rundir_config_get(const char *config_path, const char *key, char *out, size_t cap);

#endif
