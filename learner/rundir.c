/* Run directory files (see rundir.h). Every file goes to "<name>.tmp" first, then
 * rename(2): readers and a crash never see half a file. */
#include "learner/rundir.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/error.h"
#include "common/log.h"
#include "learner/curve.h"

static int mkdirs(const char *path) {
  char tmp[1024];
  snprintf(tmp, sizeof tmp, "%s", path);
  for (char *p = tmp + 1; *p; p++)
    if (*p == '/') {
      *p = '\0';
      if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
        return SAC_EIO;
      *p = '/';
    }
  return mkdir(tmp, 0755) != 0 && errno != EEXIST ? SAC_EIO : 0;
}

/* fopen of path.tmp; commit renames it over path. The quiet forms leave logging to the
 * caller (periodic files: counted and rate limited there), with errno kept. */
static FILE *open_tmp_q(const char *path, char *tmp, size_t cap, int quiet) {
  snprintf(tmp, cap, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f && !quiet)
    SAC_ERROR("rundir", "cannot write %s: %s", tmp, strerror(errno));
  return f;
}
static FILE *open_tmp(const char *path, char *tmp, size_t cap) { return open_tmp_q(path, tmp, cap, 0); }
static int commit_q(FILE *f, const char *tmp, const char *path, int quiet) {
  int bad = ferror(f);
  if (fclose(f) != 0 || bad || rename(tmp, path) != 0) {
    int err = errno;
    if (!quiet)
      SAC_ERROR("rundir", "cannot write %s: %s", path, strerror(err));
    remove(tmp);
    errno = err;
    return SAC_EIO;
  }
  return 0;
}
static int commit(FILE *f, const char *tmp, const char *path) { return commit_q(f, tmp, path, 0); }

const char *sac_rundir_file_name(sac_rundir_file_t k) {
  static const char *const names[SAC_RUNDIR_FILES] = {"tensorboard", "metrics_csv", "curve_svg"};
  return k < SAC_RUNDIR_FILES ? names[k] : "?";
}

/* Counts a failed periodic write and logs it: the first at once, then at most one line per
 * WRITE_ERROR_LOG_S per file (a full disk fails every period). errno says why. */
#define WRITE_ERROR_LOG_S 60.0
static void write_failed(sac_rundir_t *rd, sac_rundir_file_t k, const char *path) {
  const char *why = strerror(errno);
  unsigned long long n = ++rd->write_errors[k];
  switch (k) { /* one call site, so one rate limiter, per file */
  case SAC_RUNDIR_FILE_TENSORBOARD:
    SAC_ERROR_EVERY(WRITE_ERROR_LOG_S, "rundir", "cannot write %s: %s (%llu failed writes; training goes on)",
                    path, why, n);
    break;
  case SAC_RUNDIR_FILE_METRICS_CSV:
    SAC_ERROR_EVERY(WRITE_ERROR_LOG_S, "rundir", "cannot write %s: %s (%llu failed writes; training goes on)",
                    path, why, n);
    break;
  default:
    SAC_ERROR_EVERY(WRITE_ERROR_LOG_S, "rundir", "cannot write %s: %s (%llu failed writes; training goes on)",
                    path, why, n);
    break;
  }
}
static void tb_write(sac_rundir_t *rd, int64_t step, size_t n, const char *const *tags, const float *v) {
  if (sac_tb_scalars(rd->tb, step, n, tags, v) != 0)
    write_failed(rd, SAC_RUNDIR_FILE_TENSORBOARD, sac_tb_path(rd->tb));
}

/* A directory of its own for a run named by the clock: base/nm, or base/nm-2, -3, ... when
 * another run started in the same second (two learners of a seed sweep launched together
 * shared one directory, and the second stopped on the first's shard locks). 0 or SAC_EIO
 * (logged). */
static int make_fresh(sac_rundir_t *rd, const char *base, const char *nm) {
  if (mkdirs(base) != 0) {
    SAC_ERROR("rundir", "cannot create run directory %s: %s", base, strerror(errno));
    return SAC_EIO;
  }
  for (int k = 1; k <= 1000; k++) {
    if (k == 1)
      snprintf(rd->path, sizeof rd->path, "%s/%s", base, nm);
    else
      snprintf(rd->path, sizeof rd->path, "%s/%s-%d", base, nm, k);
    if (mkdir(rd->path, 0755) == 0) {
      rd->created = 1;
      return 0;
    }
    if (errno != EEXIST)
      break;
  }
  SAC_ERROR("rundir", "cannot create a run directory %s[-N] in %s: %s", nm, base, strerror(errno));
  return SAC_EIO;
}

int sac_rundir_open(sac_rundir_t *rd, const char *base, const char *name, const char *env,
                    const sac_cfg_opt_t *opts, size_t n_opts, const void *cfg) {
  memset(rd, 0, sizeof *rd);
  char nm[256];
  if (name && *name) {
    snprintf(nm, sizeof nm, "%s", name);
  } else {
    time_t t = time(NULL);
    struct tm tm;
    localtime_r(&t, &tm);
    char when[32];
    strftime(when, sizeof when, "%Y%m%d-%H%M%S", &tm);
    /* the env name, made safe for a path */
    char e[64];
    size_t j = 0;
    for (const char *p = env; *p && j < sizeof e - 1; p++)
      e[j++] =
          (char)((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-'
                     ? *p
                     : '_');
    e[j] = '\0';
    snprintf(nm, sizeof nm, "%s-%s", when, e);
  }
  snprintf(rd->title, sizeof rd->title, "%s", env);
  if (name && *name) { /* the user's name: an existing directory is theirs to reuse */
    snprintf(rd->path, sizeof rd->path, "%s/%s", base, nm);
    struct stat sb;
    rd->created = stat(rd->path, &sb) != 0;
    if (mkdirs(rd->path) != 0) {
      SAC_ERROR("rundir", "cannot create run directory %s: %s", rd->path, strerror(errno));
      return SAC_EIO;
    }
  } else if (make_fresh(rd, base, nm) != 0) {
    return SAC_EIO;
  }
  rd->tb_step = -1;
  if (sac_tb_open(rd->path, &rd->tb) != 0)
    SAC_WARN("rundir", "no TensorBoard event file in %s; training goes on", rd->path);
  char path[1100], tmp[1110];
  snprintf(path, sizeof path, "%s/config.txt", rd->path);
  FILE *f = open_tmp(path, tmp, sizeof tmp);
  if (!f)
    return SAC_EIO;
  fprintf(f, "# resolved configuration of this run; rerun with --config %s, continue with --resume %s\n",
          path, rd->path);
  if (sac_config_dump(opts, n_opts, cfg, f) != 0) {
    fclose(f);
    remove(tmp);
    return SAC_EIO;
  }
  return commit(f, tmp, path);
}

/* One metrics.csv row into p: the ten columns every version has, then the evaluation's
 * spread and the training return and episodes where the row has them. 1 when parsed. */
static int parse_row(const char *line, sac_rundir_point_t *p) {
  long long st, up, eps = -1;
  sac_stats_t *x = &p->st;
  int used = 0;
  memset(p, 0, sizeof *p);
  if (sscanf(line, "%lf,%lld,%lld,%lf,%f,%f,%f,%f,%f,%f%n", &p->wall_s, &st, &up, &p->eval.mean,
             &x->critic_loss, &x->actor_loss, &x->alpha_loss, &x->alpha, &x->entropy, &x->mean_q,
             &used) != 10)
    return 0;
  p->steps = st, p->updates = up;
  p->eval.std = 0, p->eval.min = p->eval.max = p->eval.mean, p->eval.episodes = 0;
  p->train_return = NAN;
  char tr[32] = "";
  if (sscanf(line + used, ",%lf,%lf,%lf,%d,%31[^,],%lld", &p->eval.std, &p->eval.min, &p->eval.max,
             &p->eval.episodes, tr, &eps) == 6)
    p->train_return = strtod(tr, NULL); /* "nan" where no episode had finished */
  p->episodes = eps;
  return 1;
}

int sac_rundir_reopen(sac_rundir_t *rd, const char *path, const char *env, int64_t upto_steps) {
  memset(rd, 0, sizeof *rd);
  snprintf(rd->path, sizeof rd->path, "%s", path);
  snprintf(rd->title, sizeof rd->title, "%s", env);
  struct stat sb;
  if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
    SAC_ERROR("rundir", "no run directory %s to resume", path);
    return SAC_ENOTFOUND;
  }
  rd->tb_step = -1;
  if (sac_tb_open(rd->path, &rd->tb) != 0) /* a new event file; TensorBoard reads them all */
    SAC_WARN("rundir", "no TensorBoard event file in %s; training goes on", rd->path);
  char csv[1100];
  snprintf(csv, sizeof csv, "%s/metrics.csv", path);
  FILE *f = fopen(csv, "r");
  if (!f)
    return 0; /* no evaluation yet */
  char line[1024];
  size_t dropped = 0;
  while (fgets(line, sizeof line, f) && rd->n < SAC_RUNDIR_MAX_POINTS) {
    sac_rundir_point_t p;
    if (!parse_row(line, &p))
      continue;
    if (p.steps > upto_steps)
      dropped++;
    else
      rd->pt[rd->n++] = p;
  }
  fclose(f);
  if (dropped)
    SAC_INFO("rundir",
             "%s: %zu evaluation row(s) after the checkpoint's %lld steps are dropped (the run redoes them)",
             csv, dropped, (long long)upto_steps);
  return 0;
}

double sac_rundir_best(const sac_rundir_t *rd) {
  double best = NAN;
  for (size_t i = 0; i < rd->n; i++)
    if (isnan(best) || rd->pt[i].eval.mean > best)
      best = rd->pt[i].eval.mean;
  return best;
}

static int write_csv(sac_rundir_t *rd) {
  char path[1100], tmp[1110];
  snprintf(path, sizeof path, "%s/metrics.csv", rd->path);
  FILE *f = open_tmp_q(path, tmp, sizeof tmp, 1);
  if (!f) {
    write_failed(rd, SAC_RUNDIR_FILE_METRICS_CSV, path);
    return SAC_EIO;
  }
  fprintf(f,
          "wall_seconds,env_steps,updates,eval_return,critic_loss,actor_loss,alpha_loss,alpha,entropy,mean_q,"
          "eval_return_std,eval_return_min,eval_return_max,eval_episodes,train_return,episodes\n");
  for (size_t i = 0; i < rd->n; i++) {
    const sac_rundir_point_t *p = &rd->pt[i];
    fprintf(f, "%.3f,%lld,%lld,%.4f,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.4f,%.4f,%.4f,%d,%.4f,%lld\n", p->wall_s,
            (long long)p->steps, (long long)p->updates, p->eval.mean, p->st.critic_loss, p->st.actor_loss,
            p->st.alpha_loss, p->st.alpha, p->st.entropy, p->st.mean_q, p->eval.std, p->eval.min, p->eval.max,
            p->eval.episodes, p->train_return, (long long)p->episodes);
  }
  int rc = commit_q(f, tmp, path, 1);
  if (rc)
    write_failed(rd, SAC_RUNDIR_FILE_METRICS_CSV, path);
  return rc;
}

static int write_curve(sac_rundir_t *rd) {
  char path[1100], tmp[1110];
  snprintf(path, sizeof path, "%s/curve.svg", rd->path);
  FILE *f = open_tmp_q(path, tmp, sizeof tmp, 1);
  int rc = f ? sac_curve_svg(f, rd->title, rd->pt, rd->n) : SAC_EIO;
  if (f && rc)
    fclose(f), remove(tmp);
  else if (f)
    rc = commit_q(f, tmp, path, 1);
  if (rc)
    write_failed(rd, SAC_RUNDIR_FILE_CURVE_SVG, path);
  return rc;
}

int sac_rundir_add_eval(sac_rundir_t *rd, const sac_rundir_point_t *p) {
  if (rd->n < SAC_RUNDIR_MAX_POINTS)
    rd->pt[rd->n++] = *p;
  if (rd->tb) {
    /* float32, as TensorBoard stores them; the CSV row has the same numbers */
    const sac_stats_t *st = &p->st;
    const char *tags[] = {"eval/return",     "eval/return_std",   "eval/return_min",
                          "eval/return_max", "train/critic_loss", "train/actor_loss",
                          "train/alpha",     "train/entropy",     "train/mean_q"};
    float v[] = {(float)p->eval.mean, (float)p->eval.std, (float)p->eval.min,
                 (float)p->eval.max,  st->critic_loss,    st->actor_loss,
                 st->alpha,           st->entropy,        st->mean_q};
    tb_write(rd, p->steps, p->updates > 0 ? 9 : 4, tags, v);
    rd->tb_step = p->steps > rd->tb_step ? p->steps : rd->tb_step;
  }
  int rc = write_csv(rd);
  if (rc == 0)
    rc = write_curve(rd);
  return rc;
}

void sac_rundir_add_train(sac_rundir_t *rd, int64_t steps, const sac_rundir_train_t *t) {
  /* one point per environment step: without new steps (actors held back, a slow machine)
   * there is nothing new to plot on that axis */
  if (!rd->tb || steps <= rd->tb_step)
    return;
  rd->tb_step = steps;
  const char *tags[9];
  float v[9];
  size_t n = 0;
#define ADD(tag, x)                                                                                          \
  do {                                                                                                       \
    if (!isnan((double)(x))) {                                                                               \
      tags[n] = tag;                                                                                         \
      v[n++] = (float)(x);                                                                                   \
    }                                                                                                        \
  } while (0)
  ADD("train/episode_return", t->episode_return);
  if (t->have_stats) {
    ADD("train/critic_loss", t->st.critic_loss);
    ADD("train/actor_loss", t->st.actor_loss);
    ADD("train/alpha", t->st.alpha);
    ADD("train/entropy", t->st.entropy);
    ADD("train/mean_q", t->st.mean_q);
  }
  ADD("perf/updates_per_s", t->updates_per_s);
  ADD("perf/env_steps_per_s", t->env_steps_per_s);
  ADD("replay/size", t->replay_size);
#undef ADD
  if (n)
    tb_write(rd, steps, n, tags, v);
}

void sac_rundir_close(sac_rundir_t *rd) { sac_tb_close(&rd->tb); }

void sac_policy_env_from_spec(sac_policy_env_t *e, const char *env_id, const sac_env_spec_t *sp) {
  memset(e, 0, sizeof *e);
  snprintf(e->env, sizeof e->env, "%s", env_id);
  e->act_dim = sp->act_dim;
  memcpy(e->act_low, sp->act_low, sizeof(float) * (size_t)sp->act_dim);
  memcpy(e->act_high, sp->act_high, sizeof(float) * (size_t)sp->act_dim);
}

/* Bounds a policy can be scaled to: finite, low < high, one pair per action. */
static int policy_env_valid(const sac_policy_env_t *e, int act_dim) {
  if (e->act_dim != act_dim || act_dim < 1 || act_dim > SAC_ENV_MAX_ACT ||
      memchr(e->env, '\0', sizeof e->env) == NULL)
    return 0;
  for (int i = 0; i < act_dim; i++)
    if (!isfinite(e->act_low[i]) || !isfinite(e->act_high[i]) || !(e->act_low[i] < e->act_high[i]))
      return 0;
  return 1;
}

int sac_rundir_discard(sac_rundir_t *rd) {
  sac_tb_close(&rd->tb);
  if (!rd->created || !rd->path[0])
    return SAC_ESTATE;
  DIR *d = opendir(rd->path);
  if (!d)
    return SAC_EIO;
  struct dirent *e;
  char p[1400];
  while ((e = readdir(d)) != NULL) /* a directory this run made: every file in it is the run's */
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
      snprintf(p, sizeof p, "%s/%s", rd->path, e->d_name);
      unlink(p);
    }
  closedir(d);
  return rmdir(rd->path) == 0 ? 0 : SAC_EIO;
}

int sac_policy_save(const char *path, const sac_mlp_desc_t *d, const float *params, float log_std_min,
                    float log_std_max, const sac_policy_env_t *env) {
  int A = d->sizes[d->n_layers] / 2;
  if (env && (d->sizes[d->n_layers] % 2 || !policy_env_valid(env, A))) {
    SAC_ERROR(
        "rundir",
        "%s: not written: the environment's bounds (%d pairs) must be finite, each low below its high, one "
        "pair for each of the policy's %d actions",
        path, env->act_dim, A);
    return SAC_EINVAL;
  }
  char tmp[1200];
  FILE *f = open_tmp(path, tmp, sizeof tmp);
  if (!f)
    return SAC_EIO;
  uint32_t nl = (uint32_t)d->n_layers, act = (uint32_t)d->hidden_act;
  fwrite(env ? "SACPOL02" : "SACPOL01", 1, 8, f);
  fwrite(&nl, 4, 1, f);
  for (int l = 0; l <= d->n_layers; l++) {
    uint32_t s = (uint32_t)d->sizes[l];
    fwrite(&s, 4, 1, f);
  }
  fwrite(&act, 4, 1, f);
  fwrite(&log_std_min, 4, 1, f);
  fwrite(&log_std_max, 4, 1, f);
  if (env) { /* format 2: what the actions mean */
    uint32_t len = (uint32_t)strlen(env->env);
    fwrite(&len, 4, 1, f);
    fwrite(env->env, 1, len, f);
    fwrite(env->act_low, sizeof(float), (size_t)A, f);
    fwrite(env->act_high, sizeof(float), (size_t)A, f);
  }
  fwrite(params, sizeof(float), sac_mlp_param_count(d), f);
  return commit(f, tmp, path);
}

/* Format 2's environment section, after the header: ID and bounds, checked. */
static int read_policy_env(FILE *f, const sac_mlp_desc_t *d, sac_policy_env_t *env) {
  uint32_t len;
  int A = d->sizes[d->n_layers] / 2;
  if (d->sizes[d->n_layers] % 2 || A > SAC_ENV_MAX_ACT || fread(&len, 4, 1, f) != 1 ||
      len >= sizeof env->env || fread(env->env, 1, len, f) != len)
    return SAC_EPROTO;
  env->env[len] = '\0';
  for (uint32_t i = 0; i < len; i++)
    if ((unsigned char)env->env[i] < 0x20 || env->env[i] == 0x7f) /* an ID is printable text */
      return SAC_EPROTO;
  env->act_dim = A;
  if (fread(env->act_low, sizeof(float), (size_t)A, f) != (size_t)A ||
      fread(env->act_high, sizeof(float), (size_t)A, f) != (size_t)A || !policy_env_valid(env, A))
    return SAC_EPROTO;
  return 0;
}

int sac_policy_load(const char *path, sac_mlp_desc_t *d, float **params, float *log_std_min,
                    float *log_std_max) {
  sac_policy_env_t env;
  return sac_policy_load_env(path, d, params, log_std_min, log_std_max, &env);
}

int sac_policy_load_env(const char *path, sac_mlp_desc_t *d, float **params, float *log_std_min,
                        float *log_std_max, sac_policy_env_t *env) {
  *params = NULL;
  memset(env, 0, sizeof *env);
  FILE *f = fopen(path, "rb");
  if (!f) {
    SAC_ERROR("rundir", "cannot read %s: %s", path, strerror(errno));
    return SAC_EIO;
  }
  char magic[8];
  uint32_t nl, act, s;
  int rc = SAC_EPROTO, format = 0;
  memset(d, 0, sizeof *d);
  if (fread(magic, 1, 8, f) != 8)
    goto out;
  if (memcmp(magic, "SACPOL01", 8) == 0)
    format = 1;
  else if (memcmp(magic, "SACPOL02", 8) == 0)
    format = 2;
  if (!format || fread(&nl, 4, 1, f) != 1 || nl < 1 || nl > SAC_MLP_MAX_LAYERS)
    goto out;
  d->n_layers = (int)nl;
  d->ensemble = 1;
  for (uint32_t l = 0; l <= nl; l++) {
    if (fread(&s, 4, 1, f) != 1 || s < 1 || s > (1u << 20))
      goto out;
    d->sizes[l] = (int)s;
  }
  if (fread(&act, 4, 1, f) != 1 || act > 2 || fread(log_std_min, 4, 1, f) != 1 ||
      fread(log_std_max, 4, 1, f) != 1)
    goto out;
  d->hidden_act = (sac_act_t)act;
  if (format == 2 && read_policy_env(f, d, env) != 0)
    goto out;
  size_t n = sac_mlp_param_count(d);
  /* the header's shapes must match the file's size before anything is allocated for them */
  long here = ftell(f);
  if (here < 0 || fseek(f, 0, SEEK_END) != 0 || ftell(f) - here != (long)(n * sizeof(float)) ||
      fseek(f, here, SEEK_SET) != 0)
    goto out;
  *params = malloc(n * sizeof(float));
  if (!*params) {
    rc = SAC_ENOMEM;
    goto out;
  }
  if (fread(*params, sizeof(float), n, f) != n || fgetc(f) != EOF) {
    free(*params);
    *params = NULL;
    goto out;
  }
  rc = 0;
out:
  if (rc == SAC_EPROTO) {
    SAC_ERROR("rundir", "%s is not a sacfleet policy file (or is truncated)", path);
    memset(env, 0, sizeof *env);
  }
  fclose(f);
  return rc;
}

/* ---- config.txt ---- */

char **sac_rundir_argv;

int sac_rundir_resume_argv(int *argcp, char ***argvp) {
  const int argc = *argcp;
  char **argv = *argvp;
  const char *dir = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--") == 0)
      break;
    if (strcmp(argv[i], "--config") == 0 || strncmp(argv[i], "--config=", 9) == 0)
      return 0; /* the user's own file: it is read instead */
    if (strcmp(argv[i], "--resume") == 0 && i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0)
      dir = argv[i + 1];
    else if (strncmp(argv[i], "--resume=", 9) == 0)
      dir = argv[i] + 9;
  }
  if (!dir || !dir[0])
    return 0;
  static char path[1100]; /* lives as long as the argv that points at it */
  snprintf(path, sizeof path, "%s/config.txt", dir);
  struct stat sb;
  if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
    SAC_ERROR("rundir", "--resume %s: no run directory %s to resume", dir, dir);
    return SAC_ECONFIG;
  }
  if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    SAC_ERROR(
        "rundir",
        "--resume %s: not a run directory: no config.txt (a run directory holds config.txt, metrics.csv, "
        "checkpoint.bin, ...: the folder a run printed in its 'results in' line)",
        dir);
    return SAC_ECONFIG;
  }
  char **v = malloc(sizeof *v * (size_t)(argc + 3));
  if (!v)
    return SAC_ECONFIG;
  v[0] = argv[0];
  v[1] = "--config";
  v[2] = path;
  for (int i = 1; i < argc; i++)
    v[i + 2] = argv[i];
  v[argc + 2] = NULL;
  *argvp = v;
  *argcp = argc + 2;
  sac_rundir_argv = v; /* the process's argv from here on: held, not a leak */
  SAC_INFO("rundir",
           "resuming with the run's own configuration %s (options given beside --resume override it)", path);
  return 0;
}

/* The "key = value" lines of a file (or of a dump) held in memory. */
static char *slurp(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f)
    return NULL;
  char *buf = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&buf, &len);
  int c;
  while (m && (c = fgetc(f)) != EOF)
    fputc(c, m);
  fclose(f);
  if (m)
    fclose(m);
  return buf;
}

/* The line of key in text ("key = ..."), its length in *len; NULL when absent. */
static const char *find_key(const char *text, const char *key, size_t *len) {
  const size_t k = strlen(key);
  for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
    if (strncmp(l, key, k) == 0 && strncmp(l + k, " = ", 3) == 0) {
      *len = strcspn(l, "\n");
      return l;
    }
  }
  return NULL;
}

int sac_rundir_rewrite_config(const char *dir, const sac_cfg_opt_t *opts, size_t n_opts, const void *cfg,
                              int *changed) {
  char path[1100], tmp[1110];
  snprintf(path, sizeof path, "%s/config.txt", dir);
  char *old = slurp(path), *now = NULL, *notes = NULL;
  size_t now_len = 0, notes_len = 0;
  FILE *m = open_memstream(&now, &now_len), *nm = open_memstream(&notes, &notes_len);
  int rc = m && nm ? sac_config_dump(opts, n_opts, cfg, m) : SAC_ENOMEM, n = 0;
  if (m)
    fclose(m);
  /* every key whose line differs from the file's: an override given beside --resume */
  for (size_t i = 0; rc == 0 && i < n_opts; i++) {
    size_t ln = 0, lo = 0;
    const char *a = find_key(now, opts[i].key, &ln), *b = old ? find_key(old, opts[i].key, &lo) : NULL;
    if (!a || (b && ln == lo && memcmp(a, b, ln) == 0))
      continue;
    n++;
    SAC_INFO("rundir", "resume: %.*s (the run had %.*s)", (int)ln, a,
             b ? (int)(lo - (strlen(opts[i].key) + 3)) : 3, b ? b + strlen(opts[i].key) + 3 : "n/a");
    fprintf(nm, "%s%.*s", n > 1 ? "; " : "", (int)ln, a);
  }
  if (nm)
    fclose(nm);
  FILE *f = rc == 0 ? open_tmp(path, tmp, sizeof tmp) : NULL;
  if (f) {
    fprintf(f, "# resolved configuration of this run; rerun with --config %s, continue with --resume %s\n",
            path, dir);
    if (n)
      fprintf(f, "# resumed with: %s\n", notes);
    fputs(now, f);
    rc = commit(f, tmp, path);
  } else if (rc == 0) {
    rc = SAC_EIO;
  }
  free(old), free(now), free(notes);
  if (changed)
    *changed = n;
  return rc;
}

int sac_rundir_config_get(const char *config_path, const char *key, char *out, size_t cap) {
  char *text = slurp(config_path);
  size_t len = 0;
  const char *l = text ? find_key(text, key, &len) : NULL;
  if (!l) {
    free(text);
    return SAC_ENOTFOUND;
  }
  const char *v = l + strlen(key) + 3, *end = l + len;
  size_t j = 0;
  int rc = 0;
  if (*v == '"') { /* sac_config_dump's quoting: \" \\ \n \t */
    for (v++; v < end && *v != '"' && rc == 0; v++) {
      char c = *v;
      if (c == '\\' && v + 1 < end)
        c = *++v == 'n' ? '\n' : *v == 't' ? '\t' : *v;
      if (j + 1 >= cap)
        rc = SAC_EINVAL;
      else
        out[j++] = c;
    }
  } else {
    j = (size_t)(end - v);
    if (j >= cap)
      rc = SAC_EINVAL;
    else
      memcpy(out, v, j);
  }
  if (rc == 0)
    out[j] = '\0';
  free(text);
  return rc;
}
