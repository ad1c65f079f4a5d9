/* Option tables turned into a configured struct (see config.h). This file knows the four
 * sources and their precedence, the config-file syntax and the text forms of values; it
 * does not know any binary's options, and it keeps no state between calls.
 *
 * Every source is read in full even after an error, so one run reports every bad key
 * and value rather than the first one only (a config file: up to its first 10 errors);
 * the result is SAC_ECONFIG if any was bad. */
#include "common/config.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/findfile.h"
#include "common/log.h"

#ifndef SAC_VERSION
#define SAC_VERSION "unknown"
#endif

/* POSIX declares it but no header has to; reading it is the only way to find SAC_*
 * variables that match no option. */
extern char **environ;

_Static_assert(sizeof(long long) == sizeof(int64_t), "INT64 options are parsed with strtoll");

/* SAC_* variables that are read by something other than an option table, with the line
 * --help prints for each. Anything else under SAC_ that matches no option is a typo we want
 * reported, not silently ignored. A module that reads a new SAC_* variable adds its row. */
typedef struct {
  const char *name;
  const char *help;
  const char *programs; /* space-separated programs whose --help lists it; NULL: every program */
} env_var_t;
#define ENV_PROGRAMS_ENVS "sac-learner sac-actor sac-replay sac-bench-learner"
static const env_var_t k_env_other[] = {
    {"SAC_CONFIG", "config file read before the environment and the command line (--config wins)", NULL},
    {"SAC_LOG_LEVEL", "error|warn|info|debug, before --log_level is parsed", NULL},
    {"SAC_LOG_JSON", "1: log lines as JSON objects, from the first line on", NULL},
    {"SAC_PLUGIN_PATH",
     "':'-separated folders searched first for the environment plugins sacfleet ships (then next to the "
     "binary, the install prefix, the build tree)",
     ENV_PROGRAMS_ENVS},
    {"SAC_MUJOCO_ASSETS",
     "folder of Gymnasium's MuJoCo model XMLs (default: the one the build found, else the one of the "
     "Gymnasium that the python3 on PATH imports)",
     ENV_PROGRAMS_ENVS},
    {"SAC_CUDA_MODULE",
     "path of libsacfleet-cuda.so, the cuda backend's module, where it is not next to the binary or in "
     "<prefix>/lib/sacfleet",
     "sac-learner sac-bench-learner sac-bench-dp"},
    {"SAC_FUZZ_SEED_DIR", "fuzz targets only: folder of seed inputs (scripts/fuzz.sh)", "fuzz"},
    {"SAC_PRESET_PATH",
     "':'-separated folders searched first for the per-environment presets (then <prefix>/share/sacfleet/"
     "presets relative to the binary, the install prefix, the source tree's presets/)",
     "sac-learner sac-actor sac-replay"},
    /* read by the launchers in deploy/ (docker compose, Slurm), never by a binary: accepted so that
     * a shell that exported them for a launcher can still run the binaries (deploy/README.md) */
    {"SAC_IMAGE", "docker compose: the image of the shards and actors", "launcher"},
    {"SAC_LEARNER_IMAGE", "docker compose: the learner's image", "launcher"},
    {"SAC_BASE_IMAGE", "docker compose: the Debian 12 image the images are built on", "launcher"},
    {"SAC_PROMETHEUS_IMAGE", "docker compose: the Prometheus image", "launcher"},
    {"SAC_PROMETHEUS_PORT", "docker compose: Prometheus' port on the host", "launcher"},
    {"SAC_LEARNER_PLACEMENT", "docker stack: the learner's placement constraint", "launcher"},
    {"SAC_REPLAY0_PLACEMENT", "docker stack: shard 0's placement constraint", "launcher"},
    {"SAC_REPLAY1_PLACEMENT", "docker stack: shard 1's placement constraint", "launcher"},
    {"SAC_ACTORS", "docker compose and Slurm: how many sac-actor processes the run has", "launcher"},
    {"SAC_CUDA_ARCHITECTURES", "deploy/Dockerfile.cuda: the build argument naming the GPU architectures",
     "launcher"},
};

/* Prefixes of variables that only the launchers in deploy/ read (the Slurm script's knobs). */
static const char *const k_env_launcher_prefixes[] = {"SAC_SLURM_"};

/* Names renamed so that one concept has one name (with its unit) in every program. An old
 * name still works for one release, with a one-line warning: on the command line, in a config
 * file and as SAC_<OLD>. A row applies to a table that has its new key and not its old one,
 * so sac-learner's `log_interval` (steps in local mode, seconds in service mode) sets both
 * of its successors. A row with if_true/if_false renames a boolean into a choice; a row with
 * `requires` applies only to a table that also has that key (the program the old name was
 * an option of: the learner has embedded_shards, a shard has shard_id, an actor actor_id).
 * A row with env_only is a variable name the launchers in deploy/ used (docker compose's
 * SAC_REPLAY_CAPACITY): it works as SAC_<OLD> only. */
typedef struct {
  const char *old_key, *new_key;
  const char *if_true, *if_false;
  const char *requires;
  int env_only;
} alias_t;
#define LEARNER_KEY "embedded_shards"
#define SHARD_KEY "shard_id"
#define ACTOR_KEY "actor_id"
static const alias_t k_aliases[] = {
    {"buffer_capacity", "capacity", NULL, NULL, LEARNER_KEY, 0},
    {"prioritized", "sampler", "prioritized", "uniform", LEARNER_KEY, 0},
    {"per_alpha", "priority_alpha", NULL, NULL, LEARNER_KEY, 0},
    {"per_beta", "priority_beta", NULL, NULL, LEARNER_KEY, 0},
    {"alpha", "priority_alpha", NULL, NULL, SHARD_KEY, 0},
    {"eval_every", "eval_every_updates", NULL, NULL, NULL, 0},
    {"eval_interval", "eval_every_steps", NULL, NULL, NULL, 0},
    {"log_interval", "log_every_steps", NULL, NULL, NULL, 0},
    {"log_interval", "log_interval_s", NULL, NULL, NULL, 0},
    {"actors", "embedded_actors", NULL, NULL, NULL, 0},
    /* one name per concept across the programs */
    {"num_envs", "envs_per_actor", NULL, NULL, ACTOR_KEY, 0},
    {"window", "inflight_batches", NULL, NULL, ACTOR_KEY, 0},
    {"insert_credit", "inflight_batches", NULL, NULL, SHARD_KEY, 0},
    /* docker compose's own variable names (deploy/docker-compose.yml) */
    {"replay_capacity", "capacity", NULL, NULL, NULL, 1},
    {"learner_threads", "threads", NULL, NULL, LEARNER_KEY, 1},
    {"learner_log_interval_s", "log_interval_s", NULL, NULL, LEARNER_KEY, 1},
    {"actor_learning_starts", "learning_starts", NULL, NULL, ACTOR_KEY, 1},
};
#define N_ALIASES (sizeof k_aliases / sizeof k_aliases[0])

#define ENV_NAME_MAX 256

/* ---- the option table ---------------------------------------------------------------- */

/* SAC_<KEY>: upper-cased, '.' and '-' as '_'. */
static void env_name(const char *key, char out[ENV_NAME_MAX]) {
  size_t n = (size_t)snprintf(out, ENV_NAME_MAX, "SAC_");
  for (const char *p = key; *p && n + 1 < ENV_NAME_MAX; p++)
    out[n++] = (*p == '.' || *p == '-') ? '_' : (char)toupper((unsigned char)*p);
  out[n] = '\0';
}

/* Tables are written by programmers, so a bad one is a bug and asserts. Keys are limited
 * to lower-case names so that the environment spelling of each key is unique. */
static void check_table(const sac_cfg_opt_t *opts, size_t n_opts) {
#ifndef NDEBUG
  for (size_t i = 0; i < n_opts; i++) {
    const sac_cfg_opt_t *o = &opts[i];
    assert(o->key && o->key[0] && strlen(o->key) < ENV_NAME_MAX - 8);
    for (const char *p = o->key; *p; p++)
      assert(islower((unsigned char)*p) || isdigit((unsigned char)*p) || *p == '_' || *p == '.' || *p == '-');
    assert(strcmp(o->key, "help") != 0 && strcmp(o->key, "version") != 0 && strcmp(o->key, "config") != 0);
    assert(o->type != SAC_CFG_STRING || o->size > 0);
    char ei[ENV_NAME_MAX], ej[ENV_NAME_MAX];
    env_name(o->key, ei);
    for (size_t j = 0; j < i; j++) {
      env_name(opts[j].key, ej);
      assert(strcmp(ei, ej) != 0 && "two keys share one environment variable");
    }
  }
#else
  (void)opts;
  (void)n_opts;
#endif
}

/* Whether a key as typed names the table's key k: '-' and '_' are the same letter, so
 * --total-steps (as CleanRL's users type it) is --total_steps. check_table makes sure no two
 * keys of a table differ only there (they would share an environment variable). */
static int key_eq(const char *k, const char *typed) {
  for (; *k && *typed; k++, typed++) {
    char a = *k == '-' ? '_' : *k, b = *typed == '-' ? '_' : *typed;
    if (a != b)
      return 0;
  }
  return *k == *typed;
}

static const sac_cfg_opt_t *find_opt(const sac_cfg_opt_t *opts, size_t n_opts, const char *key) {
  for (size_t i = 0; i < n_opts; i++)
    if (key_eq(opts[i].key, key))
      return &opts[i];
  return NULL;
}

/* The option an alias row sets in this table, or NULL where the row does not apply (from_env:
 * the name comes from the environment, where the launchers' old variable names apply too). */
static const sac_cfg_opt_t *alias_target(const sac_cfg_opt_t *opts, size_t n_opts, const alias_t *a,
                                         int from_env) {
  if ((a->env_only && !from_env) || find_opt(opts, n_opts, a->old_key) ||
      (a->requires && !find_opt(opts, n_opts, a->requires)))
    return NULL;
  return find_opt(opts, n_opts, a->new_key);
}

/* The table's own copy of the old name key (key may be a temporary buffer), or NULL. */
static const char *find_alias_key(const char *key) {
  for (size_t i = 0; i < N_ALIASES; i++)
    if (key_eq(k_aliases[i].old_key, key))
      return k_aliases[i].old_key;
  return NULL;
}

static int is_alias(const sac_cfg_opt_t *opts, size_t n_opts, const char *key, int from_env) {
  for (size_t i = 0; i < N_ALIASES; i++)
    if (key_eq(k_aliases[i].old_key, key) && alias_target(opts, n_opts, &k_aliases[i], from_env))
      return 1;
  return 0;
}

/* The option keys of sac-learner, sac-actor and sac-replay, and their old names: one config
 * file or one environment serves every program of a run, so a key that is another program's
 * option is skipped by this one (tests/test_config_aliases.sh checks this list against the
 * programs' --help). Anything that is no program's key stays an error. */
static const char *const k_program_keys[] = {
#include "common/config_keys.inc"
};

static int is_program_key(const char *key) {
  for (size_t i = 0; i < sizeof k_program_keys / sizeof k_program_keys[0]; i++)
    if (key_eq(k_program_keys[i], key))
      return 1;
  return find_alias_key(key) != NULL;
}

/* ---- "did you mean" ------------------------------------------------------------------- */

/* Keeps the closer of *best and cand: a typo within a third of the word, or the one name
 * that starts with what was typed (--total for --total_steps). */
static void consider(const char *typed, const char *cand, const char **best, int *best_d) {
  size_t n = strlen(typed);
  int d = sac_edit_distance(typed, n, cand, strlen(cand), SAC_DIST_DASH);
  int limit = n <= 4 ? 1 : n <= 9 ? 2 : 3;
  if (d > limit && n >= 3 && strncmp(cand, typed, n) == 0)
    d = limit; /* a prefix: as good as the worst typo */
  if (d <= limit && d < *best_d) {
    *best = cand;
    *best_d = d;
  }
}

/* Writes " (did you mean PREFIXkey?)" for the option or old name closest to typed into out,
 * or "" when nothing is close. prefix is "--" on the command line, "" elsewhere. */
static void did_you_mean(const sac_cfg_opt_t *opts, size_t n_opts, const char *typed, const char *prefix,
                         char *out, size_t cap) {
  const char *best = NULL;
  int best_d = 99;
  for (size_t i = 0; i < n_opts; i++)
    consider(typed, opts[i].key, &best, &best_d);
  for (size_t i = 0; i < N_ALIASES; i++) {
    const sac_cfg_opt_t *o = alias_target(opts, n_opts, &k_aliases[i], 0);
    if (o)
      consider(typed, o->key, &best, &best_d); /* suggest the new name, never the old one */
  }
  consider(typed, "config", &best, &best_d);
  consider(typed, "help", &best, &best_d);
  if (best)
    snprintf(out, cap, " (did you mean %s%s?)", prefix, best);
  else if (cap)
    out[0] = '\0';
}

static const char *type_name(sac_cfg_type_t t) {
  switch (t) {
  case SAC_CFG_INT:
    return "int";
  case SAC_CFG_INT64:
    return "int64";
  case SAC_CFG_DOUBLE:
    return "float";
  case SAC_CFG_BOOL:
    return "bool";
  case SAC_CFG_STRING:
    return "string";
  }
  return "?";
}

/* ---- where values came from ------------------------------------------------------- */

/* While sac_config_load_ext runs with sources: the table, the caller's array and the level of
 * the source being read. Every successful store marks its option (set_value). Nothing of it
 * outlives the call. */
static _Thread_local const sac_cfg_opt_t *t_track_opts;
static _Thread_local unsigned char *t_track_src;
static _Thread_local unsigned char t_track_level;
static _Thread_local int t_quiet; /* value_fits: try a value without logging */
/* sac_config_apply_preset: a value is stored only where the option still holds its default */
static _Thread_local int t_defaults_only;

static _Thread_local int t_track_shared; /* set_alias: an old name with several successors */

static void track_mark(const sac_cfg_opt_t *o) {
  if (t_track_src && o >= t_track_opts)
    t_track_src[o - t_track_opts] =
        (unsigned char)(t_track_level | (t_track_shared ? SAC_CFG_SRC_SHARED : 0));
}

/* ---- values ------------------------------------------------------------------------- */

static int parse_bool(const char *s, int *out) {
  static const char *const yes[] = {"true", "1", "yes", "on"}, *const no[] = {"false", "0", "no", "off"};
  for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
    if (strcasecmp(s, yes[i]) == 0) {
      *out = 1;
      return 0;
    }
    if (strcasecmp(s, no[i]) == 0) {
      *out = 0;
      return 0;
    }
  }
  return SAC_EINVAL;
}

static int out_of_range(const sac_cfg_opt_t *o, double v) {
  return o->min <= o->max && (v < o->min || v > o->max);
}

/* An integer written as a decimal or in exponent form ("1e6", "6e5", "2.5e3") where that
 * is exactly an integer: what users of Python tools type for step counts. Values beyond 2^53
 * are refused (a double no longer holds every integer there), as is a fraction ("1.5").
 * 0 and *out, or -1. */
static int exact_integer(const char *s, long *out) {
  if (!strpbrk(s, ".eE") || strpbrk(s, "xXpPnN")) /* no hex floats, inf or nan */
    return -1;
  char *end;
  errno = 0;
  double d = strtod(s, &end);
  if (*end != '\0' || errno == ERANGE || !isfinite(d) || d != floor(d) || fabs(d) > 9007199254740992.0 ||
      d > (double)LONG_MAX || d < (double)LONG_MIN)
    return -1;
  *out = (long)d;
  errno = 0; /* the caller reads errno for the integer's overflow */
  return 0;
}

/* Parses value for o and stores it in target; target is untouched on error. strtol and
 * friends skip leading blanks, so a leading blank is refused here to make "the whole
 * text is the number" true at both ends. */
static int set_value(const sac_cfg_opt_t *o, void *target, const char *value, const char *source) {
  if (t_defaults_only && t_track_src && o >= t_track_opts &&
      (t_track_src[o - t_track_opts] & ~SAC_CFG_SRC_SHARED) != SAC_CFG_SRC_DEFAULT)
    return 0; /* a preset never overrides what a file, a variable or a flag set */
  char *field = (char *)target + o->offset;
  const char *why = NULL;
  char *end = NULL;
  int numeric = o->type == SAC_CFG_INT || o->type == SAC_CFG_INT64 || o->type == SAC_CFG_DOUBLE;
  if (numeric && (value[0] == '\0' || isspace((unsigned char)value[0]))) {
    why = "not a number";
    goto bad;
  }
  errno = 0;
  switch (o->type) {
  case SAC_CFG_INT: {
    long v = strtol(value, &end, 10);
    if (*end != '\0' && exact_integer(value, &v) != 0)
      why = "not an integer";
    else if (errno == ERANGE || v < INT_MIN || v > INT_MAX)
      why = "integer overflow";
    else if (out_of_range(o, (double)v))
      why = "out of range";
    else
      *(int *)field = (int)v;
    break;
  }
  case SAC_CFG_INT64: {
    long long v = strtoll(value, &end, 10);
    long lv;
    if (*end != '\0' && exact_integer(value, &lv) == 0)
      v = lv, end = (char *)"";
    if (*end != '\0')
      why = "not an integer";
    else if (errno == ERANGE) /* long long is int64_t on every platform we build for */
      why = "integer overflow";
    else if (out_of_range(o, (double)v))
      why = "out of range";
    else
      *(int64_t *)field = (int64_t)v;
    break;
  }
  case SAC_CFG_DOUBLE: {
    double v = strtod(value, &end);
    /* Underflow to a tiny or zero value is accepted (dump prints denormals exactly);
     * overflow, nan and inf are never a sensible setting. */
    if (*end != '\0')
      why = "not a number";
    else if ((errno == ERANGE && fabs(v) == HUGE_VAL) || !isfinite(v))
      why = "not a finite number";
    else if (out_of_range(o, v))
      why = "out of range";
    else
      *(double *)field = v;
    break;
  }
  case SAC_CFG_BOOL: {
    int v;
    if (parse_bool(value, &v) != 0)
      why = "not a boolean (true/false, 1/0, yes/no, on/off)";
    else
      *(int *)field = v;
    break;
  }
  case SAC_CFG_STRING: {
    size_t len = strlen(value);
    if (len + 1 > o->size)
      why = "too long";
    else
      memcpy(field, value, len + 1);
    break;
  }
  }
  if (!why) {
    track_mark(o);
    return 0;
  }
bad:
  if (t_quiet)
    return SAC_ECONFIG;
  if (strcmp(why, "out of range") == 0)
    SAC_ERROR("config", "%s: %s = '%s' is out of range [%g, %g]", source, o->key, value, o->min, o->max);
  else if (strcmp(why, "too long") == 0)
    SAC_ERROR("config", "%s: %s = '%s' is too long (at most %zu characters)", source, o->key, value,
              o->size - 1);
  else
    SAC_ERROR("config", "%s: %s = '%s': %s (%s expected)", source, o->key, value, why, type_name(o->type));
  return SAC_ECONFIG;
}

/* Whether value is valid for o, tested on o's own field and put back: nothing is logged,
 * tracked or changed. */
static int value_fits(const sac_cfg_opt_t *o, void *target, const char *value) {
  size_t n = o->type == SAC_CFG_STRING   ? o->size
             : o->type == SAC_CFG_INT64  ? sizeof(int64_t)
             : o->type == SAC_CFG_DOUBLE ? sizeof(double)
                                         : sizeof(int);
  char *field = (char *)target + o->offset, saved[4096];
  if (n > sizeof saved)
    return 1; /* a string that long: set_value says what is wrong with it */
  memcpy(saved, field, n);
  unsigned char *src = t_track_src;
  t_track_src = NULL;
  t_quiet = 1;
  int ok = set_value(o, target, value, "") == 0;
  t_quiet = 0;
  t_track_src = src;
  memcpy(field, saved, n);
  return ok;
}

int sac_config_is_default(const sac_cfg_opt_t *o, const void *target) {
  assert(o && target);
  const char *field = (const char *)target + o->offset;
  if (!o->def) /* no default: zero */
    return o->type == SAC_CFG_STRING   ? field[0] == '\0'
           : o->type == SAC_CFG_INT64  ? *(const int64_t *)field == 0
           : o->type == SAC_CFG_DOUBLE ? *(const double *)field == 0.0
                                       : *(const int *)field == 0;
  char scratch[4096];
  sac_cfg_opt_t t = *o;
  t.offset = 0;
  if (o->type == SAC_CFG_STRING && o->size > sizeof scratch)
    return 0;
  unsigned char *src = t_track_src;
  t_track_src = NULL;
  t_quiet = 1;
  int ok = set_value(&t, scratch, o->def, "") == 0;
  t_quiet = 0;
  t_track_src = src;
  if (!ok)
    return 0;
  switch (o->type) {
  case SAC_CFG_STRING:
    return strcmp(scratch, field) == 0;
  case SAC_CFG_INT64:
    return memcmp(scratch, field, sizeof(int64_t)) == 0;
  case SAC_CFG_DOUBLE:
    return memcmp(scratch, field, sizeof(double)) == 0;
  default:
    return memcmp(scratch, field, sizeof(int)) == 0;
  }
}

/* Sets every successor of the old name key (is_alias() is true) from value, after one
 * deprecation warning naming them. An old name with two successors in different units
 * (sac-learner's log_interval: steps or seconds) sets the ones the value is valid for and
 * says which it left alone; a value valid for none is an error. A renamed boolean takes
 * any boolean word. 0 or SAC_ECONFIG. */
static int set_alias(const sac_cfg_opt_t *opts, size_t n_opts, void *target, const char *key,
                     const char *value, const char *source, int from_env) {
  const alias_t *rows[4];
  const sac_cfg_opt_t *succ[4];
  const char *vals[4];
  int fits[4], n = 0, n_fit = 0;
  for (size_t i = 0; i < N_ALIASES && n < 4; i++) {
    const alias_t *a = &k_aliases[i];
    const sac_cfg_opt_t *o = key_eq(a->old_key, key) ? alias_target(opts, n_opts, a, from_env) : NULL;
    if (!o)
      continue;
    const char *v = value;
    if (a->if_true) {
      int b;
      if (parse_bool(value, &b) != 0) {
        SAC_WARN("config", "%s: '%s' is deprecated and goes in the next release; use '%s'", source, key,
                 o->key);
        SAC_ERROR("config", "%s: %s = '%s': not a boolean (true/false, 1/0, yes/no, on/off)", source, key,
                  value);
        return SAC_ECONFIG;
      }
      v = b ? a->if_true : a->if_false;
    }
    rows[n] = a;
    succ[n] = o;
    vals[n] = v;
    fits[n] = value_fits(o, target, v);
    n_fit += fits[n];
    n++;
  }
  (void)rows;
  char use[256] = "", left[256] = "";
  for (int i = 0; i < n; i++) {
    char *buf = fits[i] || n_fit == 0 ? use : left;
    size_t len = strlen(buf);
    snprintf(buf + len, sizeof use - len, "%s'%s'", len ? " and " : "", succ[i]->key);
  }
  if (n_fit == 0 || !left[0])
    SAC_WARN("config", "%s: '%s' is deprecated and goes in the next release; use %s", source, key, use);
  else
    SAC_WARN("config",
             "%s: '%s' is deprecated and goes in the next release; use %s (set from it; %s is left alone: "
             "'%s' is outside its range)",
             source, key, use, left, value);
  int rc = 0;
  t_track_shared = n > 1;
  for (int i = 0; i < n; i++)
    if ((fits[i] || n_fit == 0) && set_value(succ[i], target, vals[i], source) != 0)
      rc = SAC_ECONFIG;
  t_track_shared = 0;
  return rc;
}

/* The error for a key no option and no old name of this table matches: with the closest
 * name, or saying that it is another program's option. */
static void unknown_key(const sac_cfg_opt_t *opts, size_t n_opts, const char *source, const char *key,
                        const char *prefix, const char *shown) {
  char hint[160];
  did_you_mean(opts, n_opts, key, prefix, hint, sizeof hint);
  if (!hint[0] && is_program_key(key))
    snprintf(hint, sizeof hint,
             " (an option of another sacfleet program: in a shared config file it goes in that program's "
             "[learner], [actor] or [replay] section)");
  SAC_ERROR("config", "%s: unknown key '%s'%s%s%s%s", source, key, shown ? " (in '" : "", shown ? shown : "",
            shown ? "')" : "", hint);
}

int sac_config_set(const sac_cfg_opt_t *opts, size_t n_opts, void *target, const char *key, const char *value,
                   const char *source) {
  assert(opts && target && key && value);
  if (!source)
    source = "sac_config_set";
  const sac_cfg_opt_t *o = find_opt(opts, n_opts, key);
  if (o)
    return set_value(o, target, value, source);
  if (is_alias(opts, n_opts, key, 0))
    return set_alias(opts, n_opts, target, key, value, source, 0);
  unknown_key(opts, n_opts, source, key, "", NULL);
  return SAC_ECONFIG;
}

/* ---- sources ------------------------------------------------------------------------ */

static int apply_defaults(const sac_cfg_opt_t *opts, size_t n_opts, void *target) {
  int rc = 0;
  for (size_t i = 0; i < n_opts; i++) {
    const sac_cfg_opt_t *o = &opts[i];
    char *field = (char *)target + o->offset;
    if (!o->def) {
      /* No default: zero, so the struct never holds garbage. */
      switch (o->type) {
      case SAC_CFG_INT:
      case SAC_CFG_BOOL:
        *(int *)field = 0;
        break;
      case SAC_CFG_INT64:
        *(int64_t *)field = 0;
        break;
      case SAC_CFG_DOUBLE:
        *(double *)field = 0.0;
        break;
      case SAC_CFG_STRING:
        field[0] = '\0';
        break;
      }
    } else if (set_value(o, target, o->def, "default") != 0) {
      rc = SAC_ECONFIG;
    }
  }
  return rc;
}

static char *trim(char *s) {
  while (isspace((unsigned char)*s))
    s++;
  size_t n = strlen(s);
  while (n > 0 && isspace((unsigned char)s[n - 1]))
    s[--n] = '\0';
  return s;
}

/* Strips a trailing " # comment" from an unquoted value: '#' starts a comment only at the
 * start or after a blank, so "tcp://host:5555#frag" keeps its '#'. */
static void strip_comment(char *s) {
  for (char *p = s; *p; p++)
    if (*p == '#' && (p == s || isspace((unsigned char)p[-1]))) {
      *p = '\0';
      return;
    }
}

/* Decodes a double-quoted value in place (v points at the opening quote). Escapes: \" \\
 * \n \t, the ones sac_config_dump writes. After the closing quote only blanks or a
 * comment may follow. Returns NULL with *why set on malformed input. */
static char *unquote(char *v, const char **why) {
  char *r = v + 1, *w = v;
  for (;; r++) {
    if (*r == '\0') {
      *why = "missing closing quote";
      return NULL;
    }
    if (*r == '"')
      break;
    if (*r == '\\') {
      r++;
      switch (*r) {
      case '"':
      case '\\':
        *w++ = *r;
        break;
      case 'n':
        *w++ = '\n';
        break;
      case 't':
        *w++ = '\t';
        break;
      default:
        *why = "unknown escape in quoted value";
        return NULL;
      }
    } else {
      *w++ = *r;
    }
  }
  *w = '\0';
  for (r++; isspace((unsigned char)*r); r++)
    ;
  if (*r != '\0' && *r != '#') {
    *why = "text after closing quote";
    return NULL;
  }
  return v;
}

/* A config file is a few KiB of text. The byte cap keeps a wrong path (a disk image, a
 * log) from being read into memory, and the error cap keeps a binary file from printing
 * one error per line (issue 14, defect 11). */
#define CFG_MAX_FILE_BYTES (1u << 20)
#define CFG_MAX_FILE_ERRORS 10

/* Reads the regular file at path, at most CFG_MAX_FILE_BYTES, into a NUL-terminated
 * malloc'd *out of *len bytes. Only regular files: /dev/zero or /dev/urandom never end
 * and a FIFO may never start. A read or allocation error is an error, never an end of
 * file. 0 or SAC_ECONFIG (logged); *out is NULL on error. */
static int read_capped(const char *path, char **out, size_t *len) {
  *out = NULL;
  *len = 0;
  /* O_NONBLOCK: opening a FIFO without a writer must not hang; it is refused below */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    SAC_ERROR("config", "cannot open config file '%s': %s", path, strerror(errno));
    return SAC_ECONFIG;
  }
  struct stat st;
  const char *why = NULL;
  char *buf = NULL;
  size_t n = 0;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
    why = "not a regular file";
  else if (st.st_size > (off_t)CFG_MAX_FILE_BYTES)
    why = "too big";
  else if (!(buf = malloc(CFG_MAX_FILE_BYTES + 2)))
    why = "out of memory";
  /* one byte past the cap tells a file that grew after fstat */
  while (!why) {
    ssize_t r = read(fd, buf + n, CFG_MAX_FILE_BYTES + 1 - n);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0)
      why = strerror(errno);
    else if (r == 0)
      break;
    else if ((n += (size_t)r) > CFG_MAX_FILE_BYTES)
      why = "too big";
  }
  close(fd);
  if (why) {
    SAC_ERROR("config", "cannot read config file '%s': %s (a regular file of at most %u bytes is expected)",
              path, why, CFG_MAX_FILE_BYTES);
    free(buf);
    return SAC_ECONFIG;
  }
  buf[n] = '\0';
  *out = buf;
  *len = n;
  return 0;
}

/* The sections of a config file that belong to a program (sac-learner reads [learner], and
 * skips [actor] and [replay]); t_own_section is this program's, set by sac_config_load_ext. */
static const char *const k_program_sections[] = {"learner", "actor", "replay"};
static _Thread_local const char *t_own_section;

/* Whether the table has "name.key" options: then [name] prefixes its keys, as any other
 * section does (no program's table has such keys; a tool's may). */
static int has_section_keys(const sac_cfg_opt_t *opts, size_t n_opts, const char *name) {
  size_t n = strlen(name);
  for (size_t i = 0; i < n_opts; i++)
    if (strncmp(opts[i].key, name, n) == 0 && opts[i].key[n] == '.')
      return 1;
  return 0;
}

static int is_program_section(const char *name) {
  for (size_t i = 0; i < sizeof k_program_sections / sizeof k_program_sections[0]; i++)
    if (strcmp(k_program_sections[i], name) == 0)
      return 1;
  return 0;
}

/* Parses one "key = value" or "[section]" line (NUL-terminated, no newline) of a config
 * file. src names the line for error messages; *section is the current section (may be
 * replaced). Returns 0, SAC_ECONFIG (bad line, logged) or SAC_ENOMEM (logged). */
static int parse_line(const sac_cfg_opt_t *opts, size_t n_opts, void *target, char *line, const char *src,
                      char **section) {
  char *s = trim(line);
  if (*s == '\0' || *s == '#')
    return 0;
  if (*s == '[') {
    strip_comment(s);
    s = trim(s);
    size_t n = strlen(s);
    char *name = n >= 2 && s[n - 1] == ']' ? (s[n - 1] = '\0', trim(s + 1)) : NULL;
    if (!name || *name == '\0' || strpbrk(name, "[]= \t")) {
      SAC_ERROR("config", "%s: malformed section header", src);
      return SAC_ECONFIG;
    }
    char *copy = strdup(name);
    if (!copy) {
      SAC_ERROR("config", "%s: out of memory", src);
      return SAC_ENOMEM;
    }
    free(*section);
    *section = copy;
    return 0;
  }
  char *eq = strchr(s, '=');
  if (!eq) {
    SAC_ERROR("config", "%s: expected 'key = value', got '%.80s'", src, s);
    return SAC_ECONFIG;
  }
  *eq = '\0';
  char *k = trim(s), *v = trim(eq + 1);
  if (*k == '\0') {
    SAC_ERROR("config", "%s: missing key before '='", src);
    return SAC_ECONFIG;
  }
  if (*v == '"') {
    const char *why = NULL;
    if (!unquote(v, &why)) {
      SAC_ERROR("config", "%s: %.80s: %s", src, k, why);
      return SAC_ECONFIG;
    }
  } else {
    strip_comment(v);
    v = trim(v);
  }
  /* [learner], [actor], [replay]: this program's own keys, or another program's (skipped:
   * one file serves every program of a run) */
  if (*section && is_program_section(*section) && !has_section_keys(opts, n_opts, *section))
    return t_own_section && strcmp(*section, t_own_section) == 0
               ? sac_config_set(opts, n_opts, target, k, v, src) != 0 ? SAC_ECONFIG : 0
               : 0;
  /* "[replay]" + "capacity" names the option "replay.capacity" elsewhere. */
  size_t need = (*section ? strlen(*section) + 1 : 0) + strlen(k) + 1;
  char *key = malloc(need);
  if (!key) {
    SAC_ERROR("config", "%s: out of memory", src);
    return SAC_ENOMEM;
  }
  if (*section)
    snprintf(key, need, "%s.%s", *section, k);
  else
    snprintf(key, need, "%s", k);
  int rc = sac_config_set(opts, n_opts, target, key, v, src) != 0 ? SAC_ECONFIG : 0;
  free(key);
  return rc;
}

/* Reads one config file. Returns 0 or SAC_ECONFIG. Every bad line is logged, up to
 * CFG_MAX_FILE_ERRORS; then reading stops with "too many errors". */
static int load_file(const sac_cfg_opt_t *opts, size_t n_opts, void *target, const char *path) {
  char *text;
  size_t text_len;
  if (read_capped(path, &text, &text_len) != 0)
    return SAC_ECONFIG;
  char *section = NULL;
  int errors = 0, rc = 0;
  size_t lineno = 0;
  for (char *line = text; line < text + text_len && rc != SAC_ENOMEM;) {
    char *nl = memchr(line, '\n', (size_t)(text + text_len - line));
    char *end = nl ? nl : text + text_len;
    *end = '\0';
    lineno++;
    char src[512];
    snprintf(src, sizeof src, "%s:%zu", path, lineno);
    if (strlen(line) != (size_t)(end - line)) {
      SAC_ERROR("config", "%s: NUL byte in line", src);
      rc = SAC_ECONFIG;
    } else {
      rc = parse_line(opts, n_opts, target, line, src, &section);
    }
    if (rc != 0 && ++errors >= CFG_MAX_FILE_ERRORS && end < text + text_len) {
      SAC_ERROR("config", "%s: too many errors (%d), the rest of the file is not read", path, errors);
      break;
    }
    line = end + 1;
  }
  free(section);
  free(text);
  return errors ? SAC_ECONFIG : 0;
}

static int env_allowed(const char *name, size_t len) {
  for (size_t i = 0; i < sizeof k_env_other / sizeof k_env_other[0]; i++)
    if (strlen(k_env_other[i].name) == len && strncmp(k_env_other[i].name, name, len) == 0)
      return 1;
  for (size_t i = 0; i < sizeof k_env_launcher_prefixes / sizeof k_env_launcher_prefixes[0]; i++)
    if (strncmp(name, k_env_launcher_prefixes[i], strlen(k_env_launcher_prefixes[i])) == 0)
      return 1;
  return 0;
}

/* Whether the variable name[0, len) is SAC_<KEY>. */
static int env_is_key(const char *name, size_t len, const char *key) {
  char e[ENV_NAME_MAX];
  env_name(key, e);
  return strlen(e) == len && strncmp(e, name, len) == 0;
}

/* Applies SAC_<KEY> for every option (in table order, so the result does not depend on
 * the order of environ), then looks at every other SAC_* variable: a launcher's own or
 * another program's option is skipped (one environment serves every program of a run),
 * anything else is an error with the closest variable name. */
static int load_env(const sac_cfg_opt_t *opts, size_t n_opts, void *target) {
  int rc = 0;
  char name[ENV_NAME_MAX], src[ENV_NAME_MAX + 32];
  /* old names first, so that the new name wins where both are set */
  for (size_t i = 0; i < N_ALIASES; i++) {
    const char *old = k_aliases[i].old_key;
    int seen = 0;
    for (size_t j = 0; j < i && !seen; j++)
      seen = strcmp(k_aliases[j].old_key, old) == 0;
    env_name(old, name);
    const char *v = getenv(name);
    if (seen || !v || !is_alias(opts, n_opts, old, 1))
      continue;
    snprintf(src, sizeof src, "environment variable %s", name);
    if (set_alias(opts, n_opts, target, old, v, src, 1) != 0)
      rc = SAC_ECONFIG;
  }
  for (size_t i = 0; i < n_opts; i++) {
    env_name(opts[i].key, name);
    const char *v = getenv(name);
    if (!v)
      continue;
    snprintf(src, sizeof src, "environment variable %s", name);
    if (set_value(&opts[i], target, v, src) != 0)
      rc = SAC_ECONFIG;
  }
  for (char **e = environ; e && *e; e++) {
    if (strncmp(*e, "SAC_", 4) != 0)
      continue;
    const char *eq = strchr(*e, '=');
    size_t len = eq ? (size_t)(eq - *e) : strlen(*e);
    if (env_allowed(*e, len))
      continue;
    int known = 0;
    for (size_t i = 0; i < n_opts && !known; i++)
      known = env_is_key(*e, len, opts[i].key);
    for (size_t i = 0; i < N_ALIASES && !known; i++)
      known = env_is_key(*e, len, k_aliases[i].old_key) && is_alias(opts, n_opts, k_aliases[i].old_key, 1);
    if (known)
      continue;
    /* the variable as a key: SAC_MIN_SIZE -> min_size */
    char key[ENV_NAME_MAX];
    size_t k = 0;
    for (size_t i = 4; i < len && k + 1 < sizeof key; i++)
      key[k++] = (char)tolower((unsigned char)(*e)[i]);
    key[k] = '\0';
    if (is_program_key(key)) {
      SAC_DEBUG("config", "environment variable %.*s: another sacfleet program's option, not read here",
                (int)len, *e);
      continue;
    }
    char hint[ENV_NAME_MAX + 32] = "";
    did_you_mean(opts, n_opts, key, "", hint, sizeof hint);
    if (hint[0]) { /* " (did you mean key?)" -> " (did you mean SAC_KEY?)" */
      const char *best = hint + strlen(" (did you mean ");
      env_name(best, name);
      name[strcspn(name, "?")] = '\0';
      snprintf(hint, sizeof hint, " (did you mean %.*s?)", ENV_NAME_MAX - 1, name);
    }
    SAC_ERROR("config",
              "environment variable %.*s: unknown key (no option of any sacfleet program maps to it)%s",
              (int)len, *e, hint);
    rc = SAC_ECONFIG;
  }
  return rc;
}

/* ---- the command line --------------------------------------------------------------- */

typedef struct {
  const sac_cfg_opt_t *opt; /* NULL for an old name */
  const char *alias;        /* the old name (k_aliases), or NULL */
  const char *value;
  int argi;
} cli_set_t;

/* Whether the old name key takes a boolean on the command line (bare --key, --no-key). */
static int alias_is_bool(const sac_cfg_opt_t *opts, size_t n_opts, const char *key) {
  for (size_t i = 0; i < N_ALIASES; i++) {
    const sac_cfg_opt_t *o =
        key_eq(k_aliases[i].old_key, key) ? alias_target(opts, n_opts, &k_aliases[i], 0) : NULL;
    if (o && (k_aliases[i].if_true || o->type == SAC_CFG_BOOL))
      return 1;
  }
  return 0;
}

/* A separate "--key value" never takes a value that starts with "--": that is the next
 * option, and taking it would turn a forgotten value into a silently wrong setting. */
static int is_option(const char *a) { return a[0] == '-' && a[1] == '-'; }

/* Splits argv into settings (in order) and the config path. Returns the number of errors
 * (each logged). */
static int parse_argv(const sac_cfg_opt_t *opts, size_t n_opts, int argc, char **argv, cli_set_t *sets,
                      int *n_sets, const char **config_path) {
  int errors = 0, only_positional = 0;
  char key[ENV_NAME_MAX];
  *n_sets = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!only_positional && a[0] == '-' && a[1] && a[1] != '-') {
      SAC_ERROR(
          "config",
          "command line argument %d: unexpected positional argument '%s' (options are written --KEY, two "
          "dashes; -h is --help)",
          i, a);
      errors++;
      continue;
    }
    if (only_positional || !is_option(a)) {
      SAC_ERROR("config", "command line argument %d: unexpected positional argument '%s'", i, a);
      errors++;
      continue;
    }
    if (strcmp(a, "--") == 0) {
      only_positional = 1;
      continue;
    }
    const char *name = a + 2, *eq = strchr(name, '='), *value = eq ? eq + 1 : NULL;
    size_t klen = eq ? (size_t)(eq - name) : strlen(name);
    if (klen >= sizeof key) {
      SAC_ERROR("config", "command line argument %d: unknown key '%.*s'", i, (int)klen, name);
      errors++;
      continue;
    }
    memcpy(key, name, klen);
    key[klen] = '\0';
    const sac_cfg_opt_t *o = find_opt(opts, n_opts, key);
    int is_config = key_eq("config", key);
    if (!o && !is_config && (strncmp(key, "no-", 3) == 0 || strncmp(key, "no_", 3) == 0)) {
      const sac_cfg_opt_t *b = find_opt(opts, n_opts, key + 3);
      int old_bool = !b && alias_is_bool(opts, n_opts, key + 3);
      if ((b && b->type == SAC_CFG_BOOL) || old_bool) {
        if (value) {
          SAC_ERROR("config", "command line argument %d: --%s takes no value", i, key);
          errors++;
        } else {
          const char *old = old_bool ? find_alias_key(key + 3) : NULL;
          sets[(*n_sets)++] = (cli_set_t){old ? NULL : b, old, "false", i};
        }
        continue;
      }
    }
    const char *alias = !o && !is_config && is_alias(opts, n_opts, key, 0) ? find_alias_key(key) : NULL;
    if (!o && !is_config && !alias) {
      char src[48];
      snprintf(src, sizeof src, "command line argument %d", i);
      unknown_key(opts, n_opts, src, key, "--", a);
      errors++;
      /* "--typo VALUE": VALUE is the unknown option's, not a positional argument to report too */
      if (!value && i + 1 < argc && !is_option(argv[i + 1]))
        i++;
      continue;
    }
    if (!value) {
      int bool_word;
      if ((o && o->type == SAC_CFG_BOOL) || (alias && alias_is_bool(opts, n_opts, alias))) {
        /* Bare --flag is true; a following boolean word is its value, anything else is
         * left to be read as the next argument. */
        if (i + 1 < argc && parse_bool(argv[i + 1], &bool_word) == 0)
          value = argv[++i];
        else
          value = "true";
      } else if (i + 1 < argc && !is_option(argv[i + 1])) {
        value = argv[++i];
      } else {
        SAC_ERROR("config", "command line argument %d: missing value for --%s", i, key);
        errors++;
        continue;
      }
    }
    if (is_config) {
      if (value[0] == '\0') {
        SAC_ERROR("config", "command line argument %d: empty --config path", i);
        errors++;
      } else {
        *config_path = value;
      }
    } else {
      sets[(*n_sets)++] = (cli_set_t){o, alias, value, i};
    }
  }
  return errors;
}

static const char *prog_name(int argc, char **argv) {
  if (argc < 1 || !argv[0] || !argv[0][0])
    return "sac";
  const char *slash = strrchr(argv[0], '/');
  return slash ? slash + 1 : argv[0];
}

/* Whether prog's --help lists the variable v. */
static int env_listed(const env_var_t *v, const char *prog) {
  if (!v->programs)
    return 1;
  size_t n = strlen(prog);
  for (const char *p = v->programs; (p = strstr(p, prog)) != NULL; p += n)
    if ((p == v->programs || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0'))
      return 1;
  return 0;
}

static void print_usage(const sac_cfg_opt_t *opts, size_t n_opts, const char *prog, const char *summary) {
  char env[ENV_NAME_MAX];
  printf("Usage: %s [--config FILE] [--KEY=VALUE | --KEY VALUE]...\n", prog);
  if (summary && summary[0])
    printf("%s\n", summary);
  printf("\nSources, later ones win: defaults < the environment's preset (sac-learner: --preset)\n"
         "  < config file (--config FILE, or SAC_CONFIG) < environment SAC_<KEY> ('.' and '-' as '_')\n"
         "  < command line (--KEY VALUE, --KEY=VALUE; --key-name is --key_name; -h is --help).\n"
         "Config file: 'key = value' lines, '#' comments, optional \"quotes\"; [learner], [actor] and\n"
         "  [replay] sections hold one program's keys (the others skip them), so one file serves a run.\n"
         "Another program's SAC_<KEY> is not read here; a SAC_* variable of no program is an error.\n"
         "Integers also as 1e6. Booleans: --KEY, --no-KEY, true/false, 1/0, yes/no, on/off.\n"
         "\nOptions:\n");
  for (size_t i = 0; i < n_opts; i++) {
    const sac_cfg_opt_t *o = &opts[i];
    env_name(o->key, env);
    printf("  --%s=%s", o->key, type_name(o->type));
    if (o->def)
      printf("  (default: %s%s%s)", o->type == SAC_CFG_STRING ? "\"" : "", o->def,
             o->type == SAC_CFG_STRING ? "\"" : "");
    printf("  [env %s]\n", env);
    if (o->help && o->help[0])
      printf("      %s\n", o->help);
    if (o->min <= o->max && o->type != SAC_CFG_BOOL && o->type != SAC_CFG_STRING)
      printf("      range: [%g, %g]\n", o->min, o->max);
    if (o->type == SAC_CFG_STRING)
      printf("      at most %zu characters\n", o->size - 1);
  }
  printf("  --config FILE\n      read options from FILE (overrides SAC_CONFIG)\n"
         "  --help\n      print this text and exit\n"
         "  --help-markdown\n      print this text as the program's section of docs/CONFIG.md and exit\n"
         "  --version\n      print the version and exit\n"
         "\nOther environment variables (any other SAC_* that matches no option is an error):\n");
  for (size_t i = 0; i < sizeof k_env_other / sizeof k_env_other[0]; i++)
    if (env_listed(&k_env_other[i], prog))
      printf("  %s\n      %s\n", k_env_other[i].name, k_env_other[i].help);
  int any = 0;
  for (size_t i = 0; i < N_ALIASES; i++) {
    const sac_cfg_opt_t *o = alias_target(opts, n_opts, &k_aliases[i], 1);
    if (!o)
      continue;
    if (!any++)
      printf("\nOld names, accepted until the next release with a warning:\n");
    if (k_aliases[i].env_only) {
      env_name(k_aliases[i].old_key, env);
      printf("  %s -> ", env);
      env_name(o->key, env);
      printf("%s (environment only: docker compose's old name)\n", env);
    } else {
      printf("  --%s -> --%s\n", k_aliases[i].old_key, o->key);
    }
  }
}

/* Markdown cells: '|' would end the cell and a newline the row. */
static void md_cell(const char *s) {
  for (; s && *s; s++) {
    if (*s == '|')
      fputs("\\|", stdout);
    else if (*s == '\n')
      fputc(' ', stdout);
    else
      fputc(*s, stdout);
  }
}

/* --help-markdown: the same facts as --help, as the section of docs/CONFIG.md for prog
 * (cmake/config_md.sh puts the sections together). */
static void print_markdown(const sac_cfg_opt_t *opts, size_t n_opts, const char *prog, const char *summary) {
  char env[ENV_NAME_MAX];
  printf("## %s\n\n", prog);
  if (summary && summary[0]) {
    md_cell(summary);
    printf("\n\n");
  }
  printf("| option | type | default | variable | meaning |\n| --- | --- | --- | --- | --- |\n");
  for (size_t i = 0; i < n_opts; i++) {
    const sac_cfg_opt_t *o = &opts[i];
    env_name(o->key, env);
    printf("| `--%s` | %s | ", o->key, type_name(o->type));
    if (o->def && o->def[0]) {
      printf("`");
      md_cell(o->def);
      printf("`");
    }
    printf(" | `%s` | ", env);
    md_cell(o->help);
    if (o->min <= o->max && o->type != SAC_CFG_BOOL && o->type != SAC_CFG_STRING)
      printf(" (range [%g, %g])", o->min, o->max);
    printf(" |\n");
  }
  printf("\nOther environment variables:\n\n| variable | meaning |\n| --- | --- |\n");
  for (size_t i = 0; i < sizeof k_env_other / sizeof k_env_other[0]; i++) {
    if (!env_listed(&k_env_other[i], prog))
      continue;
    printf("| `%s` | ", k_env_other[i].name);
    md_cell(k_env_other[i].help);
    printf(" |\n");
  }
  int any = 0;
  for (size_t i = 0; i < N_ALIASES; i++) {
    const sac_cfg_opt_t *o = alias_target(opts, n_opts, &k_aliases[i], 1);
    if (!o)
      continue;
    if (!any++)
      printf("\nOld names, accepted until the next release with a warning:\n\n| old name | use |\n| --- | "
             "--- |\n");
    env_name(k_aliases[i].old_key, env);
    if (k_aliases[i].env_only) {
      printf("| `%s` (docker compose's) | ", env);
      env_name(o->key, env);
      printf("`%s` |\n", env);
    } else
      printf("| `--%s`, `%s` | `--%s` |\n", k_aliases[i].old_key, env, o->key);
  }
  printf("\n");
}

/* This program's section of a shared config file: "sac-learner" reads [learner]. */
static const char *own_section(const char *prog) {
  const char *p = strncmp(prog, "sac-", 4) == 0 ? prog + 4 : prog;
  for (size_t i = 0; i < sizeof k_program_sections / sizeof k_program_sections[0]; i++)
    if (strcmp(k_program_sections[i], p) == 0)
      return k_program_sections[i];
  return NULL;
}

static void track_begin(const sac_cfg_opt_t *opts, unsigned char *sources, int level) {
  t_track_opts = opts;
  t_track_src = sources;
  t_track_level = (unsigned char)level;
}

int sac_config_load_ext(const sac_cfg_opt_t *opts, size_t n_opts, void *target, int argc, char **argv,
                        const char *summary, int *action, unsigned char *sources) {
  assert(opts || n_opts == 0);
  assert(target && action && argc >= 0 && (argc == 0 || argv));
  check_table(opts, n_opts);
  *action = SAC_CFG_RUN;

  /* --help and --version win over everything else, even a broken config, so that a
   * user can always ask what the options are. */
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--") == 0)
      break;
    if (strcmp(argv[i], "--help-markdown") == 0) {
      print_markdown(opts, n_opts, prog_name(argc, argv), summary);
      fflush(stdout);
      *action = SAC_CFG_EXIT_OK;
      return 0;
    }
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      print_usage(opts, n_opts, prog_name(argc, argv), summary);
      fflush(stdout);
      *action = SAC_CFG_EXIT_OK;
      return 0;
    }
    if (strcmp(argv[i], "--version") == 0) {
      printf("%s %s\n", prog_name(argc, argv), SAC_VERSION);
      fflush(stdout);
      *action = SAC_CFG_EXIT_OK;
      return 0;
    }
  }

  cli_set_t *sets = NULL;
  if (argc > 1) {
    sets = malloc(sizeof *sets * (size_t)argc);
    if (!sets) {
      SAC_ERROR("config", "out of memory");
      return SAC_ECONFIG;
    }
  }
  if (sources)
    memset(sources, SAC_CFG_SRC_DEFAULT, n_opts);
  t_own_section = own_section(prog_name(argc, argv));
  int n_sets = 0, rc = 0;
  const char *config_path = NULL;
  if (parse_argv(opts, n_opts, argc, argv, sets, &n_sets, &config_path) != 0)
    rc = SAC_ECONFIG;
  if (apply_defaults(opts, n_opts, target) != 0)
    rc = SAC_ECONFIG;
  if (!config_path) {
    const char *e = getenv("SAC_CONFIG");
    if (e && e[0])
      config_path = e;
  }
  track_begin(opts, sources, SAC_CFG_SRC_FILE);
  if (config_path && load_file(opts, n_opts, target, config_path) != 0)
    rc = SAC_ECONFIG;
  track_begin(opts, sources, SAC_CFG_SRC_ENV);
  if (load_env(opts, n_opts, target) != 0)
    rc = SAC_ECONFIG;
  track_begin(opts, sources, SAC_CFG_SRC_CLI);
  for (int i = 0; i < n_sets; i++) {
    char src[64];
    snprintf(src, sizeof src, "command line argument %d", sets[i].argi);
    int r = sets[i].alias ? set_alias(opts, n_opts, target, sets[i].alias, sets[i].value, src, 0)
                          : set_value(sets[i].opt, target, sets[i].value, src);
    if (r != 0)
      rc = SAC_ECONFIG;
  }
  track_begin(NULL, NULL, 0);
  t_own_section = NULL;
  free(sets);
  return rc;
}

int sac_config_load(const sac_cfg_opt_t *opts, size_t n_opts, void *target, int argc, char **argv,
                    const char *summary, int *action) {
  return sac_config_load_ext(opts, n_opts, target, argc, argv, summary, action, NULL);
}

int sac_config_apply_preset(const sac_cfg_opt_t *opts, size_t n_opts, void *target, const char *path,
                            const char *section, unsigned char *sources) {
  assert(opts && target && path && sources);
  t_own_section = section;
  track_begin(opts, sources, SAC_CFG_SRC_PRESET);
  t_defaults_only = 1;
  int rc = load_file(opts, n_opts, target, path);
  t_defaults_only = 0;
  track_begin(NULL, NULL, 0);
  t_own_section = NULL;
  return rc;
}

/* ---- dump --------------------------------------------------------------------------- */

static int dump_string(FILE *f, const char *s) {
  if (fputc('"', f) == EOF)
    return -1;
  for (; *s; s++) {
    int r;
    switch (*s) {
    case '"':
      r = fputs("\\\"", f);
      break;
    case '\\':
      r = fputs("\\\\", f);
      break;
    case '\n':
      r = fputs("\\n", f);
      break;
    case '\t':
      r = fputs("\\t", f);
      break;
    default:
      r = fputc(*s, f);
    }
    if (r == EOF)
      return -1;
  }
  return fputc('"', f) == EOF ? -1 : 0;
}

int sac_config_dump(const sac_cfg_opt_t *opts, size_t n_opts, const void *target, FILE *f) {
  assert((opts || n_opts == 0) && target && f);
  for (size_t i = 0; i < n_opts; i++) {
    const sac_cfg_opt_t *o = &opts[i];
    const char *field = (const char *)target + o->offset;
    int r = fprintf(f, "%s = ", o->key);
    if (r < 0)
      return SAC_EIO;
    switch (o->type) {
    case SAC_CFG_INT:
      r = fprintf(f, "%d", *(const int *)field);
      break;
    case SAC_CFG_INT64:
      r = fprintf(f, "%" PRId64, *(const int64_t *)field);
      break;
    case SAC_CFG_DOUBLE:
      /* 17 significant digits read back to the same double. */
      r = fprintf(f, "%.17g", *(const double *)field);
      break;
    case SAC_CFG_BOOL:
      r = fputs(*(const int *)field ? "true" : "false", f);
      break;
    case SAC_CFG_STRING: {
      /* set_value always stores the NUL; a string without one was written by a buggy caller. */
      assert(memchr(field, '\0', o->size) != NULL);
      r = dump_string(f, field);
      break;
    }
    }
    if (r < 0 || fputc('\n', f) == EOF)
      return SAC_EIO;
  }
  return fflush(f) == 0 && !ferror(f) ? 0 : SAC_EIO;
}
