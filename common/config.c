/* Option tables turned into a configured struct (see config.h). This file knows the four
 * sources and their precedence, the config-file syntax and the text forms of values; it
 * does not know any binary's options, and it keeps no state between calls.
 *
 * Every source is read in full even after an error, so one run reports every bad key
 * and value rather than the first one only; the result is SAC_ECONFIG if any was bad. */
#include "common/config.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/error.h"
#include "common/log.h"

#ifndef SAC_VERSION
#define SAC_VERSION "unknown"
#endif

/* POSIX declares it but no header has to; reading it is the only way to find SAC_*
 * variables that match no option. */
extern char **environ;

_Static_assert(sizeof(long long) == sizeof(int64_t), "INT64 options are parsed with strtoll");

/* SAC_* variables that are read by something other than an option table. Anything else
 * under SAC_ that matches no option is a typo we want reported, not silently ignored. */
static const char *const k_env_allow[] = {"SAC_CONFIG", "SAC_LOG_LEVEL", "SAC_LOG_JSON", "SAC_CUDA_MODULE"};

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

static const sac_cfg_opt_t *find_opt(const sac_cfg_opt_t *opts, size_t n_opts, const char *key) {
  for (size_t i = 0; i < n_opts; i++)
    if (strcmp(opts[i].key, key) == 0)
      return &opts[i];
  return NULL;
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

/* Parses value for o and stores it in target; target is untouched on error. strtol and
 * friends skip leading blanks, so a leading blank is refused here to make "the whole
 * text is the number" true at both ends. */
static int set_value(const sac_cfg_opt_t *o, void *target, const char *value, const char *source) {
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
    if (*end != '\0')
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
  if (!why)
    return 0;
bad:
  if (strcmp(why, "out of range") == 0)
    SAC_ERROR("config", "%s: %s = '%s' is out of range [%g, %g]", source, o->key, value, o->min, o->max);
  else if (strcmp(why, "too long") == 0)
    SAC_ERROR("config", "%s: %s = '%s' is too long (at most %zu characters)", source, o->key, value,
              o->size - 1);
  else
    SAC_ERROR("config", "%s: %s = '%s': %s (%s expected)", source, o->key, value, why, type_name(o->type));
  return SAC_ECONFIG;
}

int sac_config_set(const sac_cfg_opt_t *opts, size_t n_opts, void *target, const char *key, const char *value,
                   const char *source) {
  assert(opts && target && key && value);
  if (!source)
    source = "sac_config_set";
  const sac_cfg_opt_t *o = find_opt(opts, n_opts, key);
  if (!o) {
    SAC_ERROR("config", "%s: unknown key '%s'", source, key);
    return SAC_ECONFIG;
  }
  return set_value(o, target, value, source);
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

/* Reads one config file. Returns 0 or SAC_ECONFIG (every bad line is logged). */
static int load_file(const sac_cfg_opt_t *opts, size_t n_opts, void *target, const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) {
    SAC_ERROR("config", "cannot open config file '%s': %s", path, strerror(errno));
    return SAC_ECONFIG;
  }
  int rc = 0;
  char *line = NULL, *section = NULL, *key = NULL;
  size_t line_cap = 0, key_cap = 0;
  size_t lineno = 0;
  ssize_t len;
  while ((len = getline(&line, &line_cap, f)) >= 0) {
    lineno++;
    char src[512];
    snprintf(src, sizeof src, "%s:%zu", path, lineno);
    if (strlen(line) != (size_t)len) {
      SAC_ERROR("config", "%s: NUL byte in line", src);
      rc = SAC_ECONFIG;
      continue;
    }
    char *s = trim(line);
    if (*s == '\0' || *s == '#')
      continue;
    if (*s == '[') {
      strip_comment(s);
      s = trim(s);
      size_t n = strlen(s);
      char *name = n >= 2 && s[n - 1] == ']' ? (s[n - 1] = '\0', trim(s + 1)) : NULL;
      if (!name || *name == '\0' || strpbrk(name, "[]= \t")) {
        SAC_ERROR("config", "%s: malformed section header", src);
        rc = SAC_ECONFIG;
        continue;
      }
      free(section);
      section = strdup(name);
      if (!section) {
        rc = SAC_ECONFIG;
        SAC_ERROR("config", "%s: out of memory", src);
        break;
      }
      continue;
    }
    char *eq = strchr(s, '=');
    if (!eq) {
      SAC_ERROR("config", "%s: expected 'key = value', got '%s'", src, s);
      rc = SAC_ECONFIG;
      continue;
    }
    *eq = '\0';
    char *k = trim(s), *v = trim(eq + 1);
    if (*k == '\0') {
      SAC_ERROR("config", "%s: missing key before '='", src);
      rc = SAC_ECONFIG;
      continue;
    }
    if (*v == '"') {
      const char *why = NULL;
      if (!unquote(v, &why)) {
        SAC_ERROR("config", "%s: %s: %s", src, k, why);
        rc = SAC_ECONFIG;
        continue;
      }
    } else {
      strip_comment(v);
      v = trim(v);
    }
    /* "[replay]" + "capacity" names the option "replay.capacity". */
    size_t need = (section ? strlen(section) + 1 : 0) + strlen(k) + 1;
    if (need > key_cap) {
      char *nk = realloc(key, need);
      if (!nk) {
        rc = SAC_ECONFIG;
        SAC_ERROR("config", "%s: out of memory", src);
        break;
      }
      key = nk;
      key_cap = need;
    }
    if (section)
      snprintf(key, key_cap, "%s.%s", section, k);
    else
      snprintf(key, key_cap, "%s", k);
    if (sac_config_set(opts, n_opts, target, key, v, src) != 0)
      rc = SAC_ECONFIG;
  }
  if (ferror(f)) {
    SAC_ERROR("config", "error reading config file '%s': %s", path, strerror(errno));
    rc = SAC_ECONFIG;
  }
  free(line);
  free(section);
  free(key);
  fclose(f);
  return rc;
}

static int env_allowed(const char *name, size_t len) {
  for (size_t i = 0; i < sizeof k_env_allow / sizeof k_env_allow[0]; i++)
    if (strlen(k_env_allow[i]) == len && strncmp(k_env_allow[i], name, len) == 0)
      return 1;
  return 0;
}

/* Applies SAC_<KEY> for every option (in table order, so the result does not depend on
 * the order of environ), then rejects every other SAC_* variable not on the allow-list. */
static int load_env(const sac_cfg_opt_t *opts, size_t n_opts, void *target) {
  int rc = 0;
  char name[ENV_NAME_MAX], src[ENV_NAME_MAX + 32];
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
    for (size_t i = 0; i < n_opts && !known; i++) {
      env_name(opts[i].key, name);
      known = strlen(name) == len && strncmp(name, *e, len) == 0;
    }
    if (!known) {
      SAC_ERROR("config", "environment variable %.*s: unknown key (no option maps to it)", (int)len, *e);
      rc = SAC_ECONFIG;
    }
  }
  return rc;
}

/* ---- the command line --------------------------------------------------------------- */

typedef struct {
  const sac_cfg_opt_t *opt;
  const char *value;
  int argi;
} cli_set_t;

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
    int is_config = strcmp(key, "config") == 0;
    if (!o && !is_config && strncmp(key, "no-", 3) == 0) {
      const sac_cfg_opt_t *b = find_opt(opts, n_opts, key + 3);
      if (b && b->type == SAC_CFG_BOOL) {
        if (value) {
          SAC_ERROR("config", "command line argument %d: --%s takes no value", i, key);
          errors++;
        } else {
          sets[(*n_sets)++] = (cli_set_t){b, "false", i};
        }
        continue;
      }
    }
    if (!o && !is_config) {
      SAC_ERROR("config", "command line argument %d: unknown key '%s' (in '%s')", i, key, a);
      errors++;
      continue;
    }
    if (!value) {
      int bool_word;
      if (o && o->type == SAC_CFG_BOOL) {
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
      sets[(*n_sets)++] = (cli_set_t){o, value, i};
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

static void print_usage(const sac_cfg_opt_t *opts, size_t n_opts, const char *prog, const char *summary) {
  char env[ENV_NAME_MAX];
  printf("Usage: %s [--config FILE] [--KEY=VALUE | --KEY VALUE]...\n", prog);
  if (summary && summary[0])
    printf("%s\n", summary);
  printf("\nSources, later ones win: defaults < config file (--config FILE, or SAC_CONFIG)\n"
         "  < environment SAC_<KEY> ('.' and '-' as '_') < command line.\n"
         "Config file: 'key = value' lines, '#' comments, optional \"quotes\", [section] headers\n"
         "  that prefix keys as section.key. Booleans: --KEY, --no-KEY, true/false, 1/0, yes/no, on/off.\n"
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
         "  --version\n      print the version and exit\n"
         "\nOther environment variables: SAC_LOG_LEVEL (error|warn|info|debug), SAC_LOG_JSON,\n"
         "  SAC_CUDA_MODULE (path of libsacfleet-cuda.so, the cuda backend's module, where it is\n"
         "  not next to the binary or in <prefix>/lib/sacfleet).\n");
}

int sac_config_load(const sac_cfg_opt_t *opts, size_t n_opts, void *target, int argc, char **argv,
                    const char *summary, int *action) {
  assert(opts || n_opts == 0);
  assert(target && action && argc >= 0 && (argc == 0 || argv));
  check_table(opts, n_opts);
  *action = SAC_CFG_RUN;

  /* --help and --version win over everything else, even a broken config, so that a
   * user can always ask what the options are. */
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--") == 0)
      break;
    if (strcmp(argv[i], "--help") == 0) {
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
  if (config_path && load_file(opts, n_opts, target, config_path) != 0)
    rc = SAC_ECONFIG;
  if (load_env(opts, n_opts, target) != 0)
    rc = SAC_ECONFIG;
  for (int i = 0; i < n_sets; i++) {
    char src[64];
    snprintf(src, sizeof src, "command line argument %d", sets[i].argi);
    if (set_value(sets[i].opt, target, sets[i].value, src) != 0)
      rc = SAC_ECONFIG;
  }
  free(sets);
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
