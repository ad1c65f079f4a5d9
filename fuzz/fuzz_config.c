/* libFuzzer target for the configuration parser (common/config.h): one input is a config
 * file, a command line and SAC_* environment variables at once, run through
 * sac_config_load against an option table with every option type, ranges, [section]
 * keys and a dashed key. Properties checked beyond "no crash, no leak, no UB":
 *   - a load that succeeds leaves every numeric option inside its range and every string
 *     NUL-terminated inside its field;
 *   - what succeeds round-trips: sac_config_dump of the result, loaded back as a config
 *     file with nothing else, gives the same values (doubles bit for bit).
 * Input layout: byte 0 = flags (bit 0: the first segment is a config file, given with
 * --config); the rest is split at NUL bytes into segments: the file (if flagged), then
 * command-line arguments, where a segment "SAC_NAME=value" is put into the environment
 * instead (SAC_CONFIG and SAC_LOG_* excepted: they are not the parser's). Run with
 * -close_fd_mask=3 (scripts/fuzz.sh does): every rejected input logs a line. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

#include "common/config.h"
#include "common/error.h"
#include "common/log.h"

typedef struct {
  int count;
  int64_t big;
  double ratio;
  int flag;
  char name[16];
  int capacity;
  double alpha;
  char endpoint[64];
  int level;
  double free_d;
} fz_cfg_t;

#define O(f) offsetof(fz_cfg_t, f)
static const sac_cfg_opt_t k_opts[] = {
    {"count", SAC_CFG_INT, O(count), 0, "3", 0, 100, "an int in [0, 100]"},
    {"big", SAC_CFG_INT64, O(big), 0, "-5", SAC_CFG_UNBOUNDED, "an unbounded int64"},
    {"ratio", SAC_CFG_DOUBLE, O(ratio), 0, "0.5", -1e3, 1e3, "a double in [-1000, 1000]"},
    {"flag", SAC_CFG_BOOL, O(flag), 0, "false", SAC_CFG_UNBOUNDED, "a boolean"},
    {"name", SAC_CFG_STRING, O(name), 16, "abc", SAC_CFG_UNBOUNDED, "a string of at most 15 characters"},
    {"replay.capacity", SAC_CFG_INT, O(capacity), 0, "1024", 1, 1 << 30, "a sectioned int"},
    {"replay.alpha", SAC_CFG_DOUBLE, O(alpha), 0, "0.6", 0, 10, "a sectioned double"},
    {"replay.endpoint", SAC_CFG_STRING, O(endpoint), 64, "tcp://*:5560", SAC_CFG_UNBOUNDED, "a sectioned string"},
    {"log-level", SAC_CFG_INT, O(level), 0, "2", -10, 10, "a dashed key"},
    {"free", SAC_CFG_DOUBLE, O(free_d), 0, "1e-300", SAC_CFG_UNBOUNDED, "an unbounded double"},
};
#undef O
#define N_OPTS (sizeof k_opts / sizeof k_opts[0])

static char g_file[256], g_dump[256];

static int write_file(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "wb");
  if (!f)
    return -1;
  size_t w = len ? fwrite(data, 1, len, f) : 0;
  return fclose(f) == 0 && w == len ? 0 : -1;
}

static void check_ranges(const fz_cfg_t *c) {
  for (size_t i = 0; i < N_OPTS; i++) {
    const sac_cfg_opt_t *o = &k_opts[i];
    const char *field = (const char *)c + o->offset;
    double v = 0;
    switch (o->type) {
    case SAC_CFG_INT:
      v = *(const int *)field;
      break;
    case SAC_CFG_INT64:
      v = (double)*(const int64_t *)field;
      break;
    case SAC_CFG_DOUBLE:
      v = *(const double *)field;
      if (!isfinite(v))
        abort(); /* the parser promises finite doubles */
      break;
    case SAC_CFG_BOOL:
      if (*(const int *)field != 0 && *(const int *)field != 1)
        abort();
      continue;
    case SAC_CFG_STRING:
      if (!memchr(field, '\0', o->size))
        abort();
      continue;
    }
    if (o->min <= o->max && (v < o->min || v > o->max))
      abort();
  }
}

static int same(const fz_cfg_t *a, const fz_cfg_t *b) {
  return a->count == b->count && a->big == b->big && memcmp(&a->ratio, &b->ratio, sizeof a->ratio) == 0 &&
         a->flag == b->flag && strcmp(a->name, b->name) == 0 && a->capacity == b->capacity &&
         memcmp(&a->alpha, &b->alpha, sizeof a->alpha) == 0 && strcmp(a->endpoint, b->endpoint) == 0 &&
         a->level == b->level && memcmp(&a->free_d, &b->free_d, sizeof a->free_d) == 0;
}

static void seed(const char *dir, const char *name, const char *data, size_t len) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  write_file(path, data, len);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  sac_log_set_level(SAC_LOG_ERROR);
  /* the loader refuses SAC_* variables that are not options: only the inputs' own count
   * (the seed directory is read first, below) */
  const char *seed_dir = getenv("SAC_FUZZ_SEED_DIR");
  static char dir_copy[1024];
  if (seed_dir)
    snprintf(dir_copy, sizeof dir_copy, "%s", seed_dir);
  for (int again = 1; again;) {
    again = 0;
    for (char **e = environ; e && *e; e++)
      if (strncmp(*e, "SAC_", 4) == 0) {
        char name[256];
        size_t n = strcspn(*e, "=");
        snprintf(name, sizeof name, "%.*s", (int)(n < 255 ? n : 255), *e);
        unsetenv(name);
        again = 1;
        break;
      }
  }
  snprintf(g_file, sizeof g_file, "%s/sac-fuzz-config-%ld.conf", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
           (long)getpid());
  snprintf(g_dump, sizeof g_dump, "%s.dump", g_file);
  const char *dir = seed_dir ? dir_copy : NULL;
  if (dir) {
    static const char s1[] = "\x01"
                             "count = 7\nbig = -9223372036854775808\nratio = 1e2 # comment\nflag = yes\n"
                             "name = \"a \\\"q\\\" \\n\"\n[replay]\ncapacity = 4096\nalpha=0.25\n"
                             "endpoint = tcp://host:5555#frag\n\0--log-level=-3\0--no-flag\0--count\0009";
    seed(dir, "file_and_args", s1, sizeof s1 - 1);
    static const char s2[] = "\x00--ratio=3.5\0--flag\0false\0--name\0xyz\0SAC_BIG=42\0SAC_REPLAY_ALPHA=1.5";
    seed(dir, "args_and_env", s2, sizeof s2 - 1);
    static const char s3[] = "\x01[replay\ncount\n= 1\nname = \"open\nfree = nan\nratio = 1e999\n";
    seed(dir, "bad_file", s3, sizeof s3 - 1);
    static const char s4[] = "\x00--\0positional\0--unknown=1\0--config\0";
    seed(dir, "bad_args", s4, sizeof s4 - 1);
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  int use_file = data[0] & 1;
  data++, size--;
  /* segments at NUL bytes; the input is copied so that every segment is a C string */
  char *buf = malloc(size + 1);
  if (!buf)
    return 0;
  memcpy(buf, data, size);
  buf[size] = '\0';
  enum { MAX_ARGS = 64, MAX_ENV = 8 };
  char *argv[MAX_ARGS + 3];
  char *envs[MAX_ENV];
  int argc = 0, n_env = 0;
  char cfg_arg[300];
  argv[argc++] = "fuzz_config";
  size_t pos = 0;
  if (use_file) {
    size_t flen = strlen(buf);
    if (write_file(g_file, buf, flen) != 0)
      abort();
    snprintf(cfg_arg, sizeof cfg_arg, "--config=%s", g_file);
    argv[argc++] = cfg_arg;
    pos = flen + 1;
  }
  while (pos <= size && argc < MAX_ARGS) {
    char *seg = buf + pos;
    size_t len = strlen(seg);
    pos += len + 1;
    char *eq = strchr(seg, '=');
    if (strncmp(seg, "SAC_", 4) == 0 && eq && eq > seg + 4) {
      *eq = '\0';
      if (n_env < MAX_ENV && strcmp(seg, "SAC_CONFIG") != 0 && strncmp(seg, "SAC_LOG_", 8) != 0 &&
          setenv(seg, eq + 1, 1) == 0)
        envs[n_env++] = seg;
      continue;
    }
    if (strncmp(seg, "--config", 8) == 0)
      continue; /* only the file of this input, never another path */
    argv[argc++] = seg;
  }
  argv[argc] = NULL;

  fz_cfg_t c;
  memset(&c, 0xa5, sizeof c); /* the loader must set every field itself */
  int action = -1;
  int rc = sac_config_load(k_opts, N_OPTS, &c, argc, argv, "fuzz_config: the config parser under a fuzzer", &action);
  for (int i = 0; i < n_env; i++)
    unsetenv(envs[i]);
  if (rc == 0 && action == SAC_CFG_RUN) {
    check_ranges(&c);
    /* round trip through the dump */
    FILE *f = fopen(g_dump, "w");
    if (!f || sac_config_dump(k_opts, N_OPTS, &c, f) != 0)
      abort();
    fclose(f);
    fz_cfg_t c2;
    memset(&c2, 0x5a, sizeof c2);
    char arg[300];
    snprintf(arg, sizeof arg, "--config=%s", g_dump);
    char *argv2[] = {"fuzz_config", arg, NULL};
    int action2 = -1;
    if (sac_config_load(k_opts, N_OPTS, &c2, 2, argv2, NULL, &action2) != 0 || action2 != SAC_CFG_RUN)
      abort(); /* a dump of a valid configuration must load */
    if (!same(&c, &c2))
      abort(); /* and give the same values back */
  } else if (rc != 0 && rc != SAC_ECONFIG) {
    abort(); /* the only failure the loader has */
  }
  free(buf);
  return 0;
}
