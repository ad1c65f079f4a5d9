/* sac-eval: runs episodes with a saved policy and reports their returns (mean, standard
 * deviation, min, max and each episode's), optionally recording them as videos. It is the
 * evaluation the learner runs (learner/evaluate.h), on policy.bin:
 *
 *   sac-eval RUN_DIR | POLICY.bin [--env ID] [--episodes N] [--stochastic] [--seed S]
 *            [--record DIR] [--json]
 *
 * Given a run directory (or a policy.bin inside one), the environment, the seed and the
 * number of episodes default to the run's own (config.txt), so `sac-eval RUN_DIR`
 * reproduces the learner's final evaluation bit for bit; a policy.bin elsewhere brings the
 * environment ID it records. Exit codes: 0 evaluated, 1
 * runtime failure (environment, recording), 2 bad arguments or files. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/config.h"
#include "common/env.h"
#include "common/error.h"
#include "common/log.h"
#include "common/mlp.h"
#include "learner/evaluate.h"
#include "learner/record.h"
#include "learner/rundir.h"

typedef struct {
  char policy[1024];
  char env[512], env_module[256];
  int episodes;
  int64_t seed;
  int stochastic, json;
  char record[1024];
  char log_level[16];
} eval_cfg_t;

#define OPT(k, t, f, d, lo, hi, h)                                                                           \
  { k, t, offsetof(eval_cfg_t, f), 0, d, lo, hi, h }
#define STR(k, f, d, h)                                                                                      \
  { k, SAC_CFG_STRING, offsetof(eval_cfg_t, f), sizeof(((eval_cfg_t *)0)->f), d, 1, 0, h }
static const sac_cfg_opt_t k_opts[] = {
    STR("policy", policy, "",
        "a run directory, or a policy.bin (also the first argument: sac-eval RUN_DIR|POLICY.bin)"),
    STR("env", env, "",
        "environment ID (default: the run's, from its config.txt; else the one policy.bin records)"),
    STR("env_module", env_module, "",
        "with --env gym:ID: the Python module that registers ID, imported first"),
    OPT("episodes", SAC_CFG_INT, episodes, "0", 0, 1000000,
        "episodes to run (0: the run's eval_episodes, or 10 without a run directory)"),
    OPT("seed", SAC_CFG_INT64, seed, "-1", -1, 9.2e18,
        "seed of the evaluation episodes (-1: the run's seed, or 1): episode k starts from the k-th reset of "
        "(seed, the evaluation stream), as the learner's evaluations do"),
    OPT("stochastic", SAC_CFG_BOOL, stochastic, "false", 1, 0,
        "sample actions from the policy instead of its deterministic mean (tanh(mu))"),
    STR("record", record, "",
        "write one MP4 video per episode into this directory (needs ffmpeg; gym:ID environments, the "
        "built-in "
        "and MuJoCo ones through their Gymnasium models; docs/EVALUATE.md)"),
    OPT("json", SAC_CFG_BOOL, json, "false", 1, 0, "print the result as one JSON object"),
    STR("log_level", log_level, "warn", "error, warn, info or debug"),
};
#define N_OPTS (sizeof k_opts / sizeof k_opts[0])

/* What the target names: the policy file and, where there is one, the run's config.txt. */
typedef struct {
  char policy[1100], config[1100];
} target_t;

static int resolve_target(const char *t, target_t *out) {
  struct stat sb;
  out->config[0] = '\0';
  if (stat(t, &sb) != 0) {
    SAC_ERROR("eval", "%s: no such run directory or policy file", t);
    return 2;
  }
  char dir[1024];
  const int is_dir = S_ISDIR(sb.st_mode);
  if (is_dir) {
    snprintf(dir, sizeof dir, "%s", t);
    snprintf(out->policy, sizeof out->policy, "%s/policy.bin", t);
  } else {
    snprintf(out->policy, sizeof out->policy, "%s", t);
    const char *slash = strrchr(t, '/');
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - t) : 1, slash ? t : ".");
  }
  snprintf(out->config, sizeof out->config, "%s/config.txt", dir);
  if (stat(out->config, &sb) != 0)
    out->config[0] = '\0';
  if (is_dir && stat(out->policy, &sb) != 0) {
    SAC_ERROR("eval", "%s has no policy.bin: the run has not finished (a run writes it at its end)", t);
    return 2;
  }
  return 0;
}

/* The defaults a run directory gives: env (else the one policy.bin records), seed,
 * episodes. 0 or 2. */
static int apply_run_defaults(eval_cfg_t *c, const target_t *t, const sac_policy_env_t *pe) {
  char v[512];
  if (!c->env[0] && t->config[0] && sac_rundir_config_get(t->config, "env", c->env, sizeof c->env) == 0) {
    if (!c->env_module[0])
      sac_rundir_config_get(t->config, "env_module", c->env_module, sizeof c->env_module);
  } else if (!c->env[0] && pe->env[0]) {
    snprintf(c->env, sizeof c->env, "%s", pe->env);
  } else if (!c->env[0]) {
    SAC_ERROR("eval", "%s records no environment and is not in a run directory: give --env ID", t->policy);
    return 2;
  }
  if (c->seed < 0)
    c->seed = t->config[0] && sac_rundir_config_get(t->config, "seed", v, sizeof v) == 0 ? atoll(v) : 1;
  if (c->episodes == 0)
    c->episodes =
        t->config[0] && sac_rundir_config_get(t->config, "eval_episodes", v, sizeof v) == 0 && atoi(v) > 0
            ? atoi(v)
            : 10;
  return sac_env_apply_module(c->env, sizeof c->env, c->env_module) ? 2 : 0;
}

static void print_json_string(const char *s) {
  putchar('"');
  for (; *s; s++) {
    if (*s == '"' || *s == '\\')
      printf("\\%c", *s);
    else if ((unsigned char)*s < 0x20)
      printf("\\u%04x", *s);
    else
      putchar(*s);
  }
  putchar('"');
}

static void print_json(const eval_cfg_t *c, const target_t *t, const sac_eval_stats_t *st, const double *ret,
                       const int *len, const sac_recorder_t *rec) {
  printf("{\"policy\": ");
  print_json_string(t->policy);
  printf(", \"env\": ");
  print_json_string(c->env);
  printf(", \"seed\": %lld, \"stochastic\": %s, \"episodes\": %d, \"mean\": %.17g, \"std\": %.17g, \"min\": "
         "%.17g, \"max\": %.17g, \"returns\": [",
         (long long)c->seed, c->stochastic ? "true" : "false", st->episodes, st->mean, st->std, st->min,
         st->max);
  for (int i = 0; i < st->episodes; i++)
    printf("%s%.17g", i ? ", " : "", ret[i]);
  printf("], \"lengths\": [");
  for (int i = 0; i < st->episodes; i++)
    printf("%s%d", i ? ", " : "", len[i]);
  printf("], \"videos\": [");
  for (size_t i = 0; rec && i < sac_recorder_count(rec); i++) {
    int frames;
    const char *p = sac_recorder_path(rec, i, &frames);
    printf("%s{\"path\": ", i ? ", " : "");
    print_json_string(p);
    printf(", \"frames\": %d}", frames);
  }
  printf("]}\n");
}

static void print_text(const eval_cfg_t *c, const target_t *t, const sac_eval_stats_t *st, const double *ret,
                       const int *len, const sac_recorder_t *rec) {
  printf("sac-eval: %s on %s, %d %s episodes, seed %lld\n", t->policy, c->env, st->episodes,
         c->stochastic ? "stochastic" : "deterministic", (long long)c->seed);
  for (int i = 0; i < st->episodes; i++)
    printf("episode %d: return %.4f (%d steps)\n", i, ret[i], len[i]);
  printf("mean %.4f  std %.4f  min %.4f  max %.4f  over %d episodes\n", st->mean, st->std, st->min, st->max,
         st->episodes);
  for (size_t i = 0; rec && i < sac_recorder_count(rec); i++) {
    int frames;
    const char *p = sac_recorder_path(rec, i, &frames);
    printf("video: %s (%d frames)\n", p, frames);
  }
}

/* The first argument, when it is not an option, is the target (sac_config_load takes no
 * positional arguments). */
static int take_target(int *argc, char **argv, char *target, size_t cap) {
  if (*argc < 2 || argv[1][0] == '-')
    return 0;
  snprintf(target, cap, "%s", argv[1]);
  for (int i = 1; i < *argc; i++)
    argv[i] = argv[i + 1];
  (*argc)--;
  return 1;
}

int main(int argc, char **argv) {
  eval_cfg_t c;
  memset(&c, 0, sizeof c);
  char first[1024] = "";
  take_target(&argc, argv, first, sizeof first);
  int action;
  if (sac_config_load(
          k_opts, N_OPTS, &c, argc, argv,
          "sac-eval: runs episodes with a saved policy (a run directory or policy.bin) and prints "
          "their returns; --record writes videos",
          &action))
    return 2;
  if (action == SAC_CFG_EXIT_OK)
    return 0;
  if (sac_log_configure(c.log_level, 0, "eval"))
    return 2;
  if (first[0])
    snprintf(c.policy, sizeof c.policy, "%s", first);
  if (!c.policy[0]) {
    fprintf(stderr, "usage: sac-eval RUN_DIR|POLICY.bin [--env ID] [--episodes N] [--stochastic] [--seed S] "
                    "[--record DIR] [--json]   (--help for all)\n");
    return 2;
  }
  target_t t;
  int rc = resolve_target(c.policy, &t);
  if (rc)
    return rc;
  sac_mlp_desc_t d;
  sac_policy_env_t pe;
  float *params = NULL, lo, hi;
  if (sac_policy_load_env(t.policy, &d, &params, &lo, &hi, &pe) != 0)
    return 2;
  if ((rc = apply_run_defaults(&c, &t, &pe)) != 0) {
    free(params);
    return rc;
  }
  char eval_env[600];
  snprintf(eval_env, sizeof eval_env, "%s", c.env);
  sac_recorder_t *rec = NULL;
  if (c.record[0] && sac_recorder_new(c.record, c.env, eval_env, sizeof eval_env, &rec) != 0) {
    free(params);
    return 1;
  }
  double *ret = calloc((size_t)c.episodes, sizeof *ret);
  int *len = calloc((size_t)c.episodes, sizeof *len);
  sac_eval_stats_t st;
  sac_eval_opts_t o = {c.stochastic, ret, len, rec ? sac_recorder_on_step : NULL, rec};
  rc = ret && len ? sac_evaluate_policy(eval_env, (uint64_t)c.seed, &d, params, lo, hi, c.episodes, &o, &st)
                  : SAC_ENOMEM;
  if (rc == 0 && c.json)
    print_json(&c, &t, &st, ret, len, rec);
  else if (rc == 0)
    print_text(&c, &t, &st, ret, len, rec);
  else
    fprintf(stderr, "sac-eval: %s\n", sac_strerror(rc));
  sac_recorder_destroy(&rec);
  free(ret), free(len), free(params);
  return rc == 0 ? 0 : rc == SAC_EINVAL || rc == SAC_ENOTFOUND || rc == SAC_ECONFIG ? 2 : 1;
}
