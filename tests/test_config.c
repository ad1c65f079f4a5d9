/* Tests for common/config: the precedence of defaults < file < environment < command line,
 * every error a user can make in each source (and that the error names the key and the
 * source), the --help / --version actions, the boolean forms, the file syntax, and that
 * sac_config_dump writes what loads back to the same values.
 *
 * Criterion runs each test in its own process, but the suite still clears every SAC_*
 * variable first (one stray SAC_* in the caller's environment would be an "unknown key")
 * and removes its temporary files afterwards. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/config.h"
#include "common/error.h"

extern char **environ;

typedef struct {
  int batch;
  int64_t capacity;
  double lr;
  int verbose;
  char name[16];
  int log_every;
  double alpha;
  int no_default;
} cfg_t;

static const sac_cfg_opt_t k_opts[] = {
    {"batch_size", SAC_CFG_INT, offsetof(cfg_t, batch), 0, "256", 1, 65536, "minibatch size"},
    {"replay.capacity", SAC_CFG_INT64, offsetof(cfg_t, capacity), 0, "1000000", 1, 1e12, "replay slots"},
    {"lr", SAC_CFG_DOUBLE, offsetof(cfg_t, lr), 0, "3e-4", 0, 1, "learning rate"},
    {"verbose", SAC_CFG_BOOL, offsetof(cfg_t, verbose), 0, "false", SAC_CFG_UNBOUNDED, "chatty logs"},
    {"name", SAC_CFG_STRING, offsetof(cfg_t, name), sizeof(((cfg_t *)0)->name), "pendulum", SAC_CFG_UNBOUNDED,
     "run name"},
    {"log-every", SAC_CFG_INT, offsetof(cfg_t, log_every), 0, "10", SAC_CFG_UNBOUNDED, "log period"},
    {"learner.alpha", SAC_CFG_DOUBLE, offsetof(cfg_t, alpha), 0, "0.2", SAC_CFG_UNBOUNDED, "entropy weight"},
    {"no_default", SAC_CFG_INT, offsetof(cfg_t, no_default), 0, NULL, SAC_CFG_UNBOUNDED, "starts at zero"},
};
#define N_OPTS (sizeof k_opts / sizeof k_opts[0])

/* ---- fixtures: environment and temp files -------------------------------------------- */

#define MAX_TMP 32
static char g_tmp[MAX_TMP][32];
static int g_ntmp;

static void clear_sac_env(void) {
  /* unsetenv changes environ, so restart the scan after each removal. */
  for (int again = 1; again;) {
    again = 0;
    for (char **e = environ; *e; e++) {
      if (strncmp(*e, "SAC_", 4) == 0) {
        char name[256];
        size_t len = strcspn(*e, "=");
        cr_assert_lt(len, sizeof name);
        memcpy(name, *e, len);
        name[len] = '\0';
        unsetenv(name);
        again = 1;
        break;
      }
    }
  }
}

static void setup(void) {
  clear_sac_env();
  g_ntmp = 0;
}

static void teardown(void) {
  for (int i = 0; i < g_ntmp; i++)
    unlink(g_tmp[i]);
  clear_sac_env();
}

TestSuite(config, .init = setup, .fini = teardown);

/* Writes content to a new /tmp file (removed by teardown); returns its path. */
static const char *tmp_file(const char *content) {
  cr_assert_lt(g_ntmp, MAX_TMP);
  char *path = g_tmp[g_ntmp];
  strcpy(path, "/tmp/sac_cfg_XXXXXX");
  int fd = mkstemp(path);
  cr_assert_geq(fd, 0, "mkstemp");
  g_ntmp++;
  size_t n = strlen(content);
  cr_assert_eq(write(fd, content, n), (ssize_t)n);
  close(fd);
  return path;
}

/* Reads a whole file into a malloc'd string. */
static char *slurp_fd(int fd) {
  size_t cap = 4096, n = 0;
  char *s = malloc(cap);
  cr_assert_not_null(s);
  lseek(fd, 0, SEEK_SET);
  for (;;) {
    if (n + 1024 > cap) {
      cap *= 2;
      s = realloc(s, cap);
      cr_assert_not_null(s);
    }
    ssize_t r = read(fd, s + n, cap - n - 1);
    if (r <= 0)
      break;
    n += (size_t)r;
  }
  s[n] = '\0';
  return s;
}

/* Captures what is written to fd (1 or 2) between begin and end. */
typedef struct {
  int target, saved, fd;
  char path[32];
} capture_t;

static void cap_begin(capture_t *c, int target) {
  fflush(NULL);
  strcpy(c->path, "/tmp/sac_cap_XXXXXX");
  c->fd = mkstemp(c->path);
  cr_assert_geq(c->fd, 0);
  c->target = target;
  c->saved = dup(target);
  cr_assert_geq(c->saved, 0);
  cr_assert_geq(dup2(c->fd, target), 0);
}

static char *cap_end(capture_t *c) {
  fflush(NULL);
  dup2(c->saved, c->target);
  close(c->saved);
  char *s = slurp_fd(c->fd);
  close(c->fd);
  unlink(c->path);
  return s;
}

/* Runs sac_config_load on {"prog", args..., NULL}; the log goes to *err if err != NULL. */
static int load_v(cfg_t *c, int *action, char **err, const char *const *args) {
  char *argv[32];
  int argc = 0;
  argv[argc++] = "prog";
  for (; *args; args++) {
    cr_assert_lt(argc, 31);
    argv[argc++] = (char *)*args;
  }
  argv[argc] = NULL;
  int dummy;
  capture_t cap;
  if (err)
    cap_begin(&cap, STDERR_FILENO);
  int rc = sac_config_load(k_opts, N_OPTS, c, argc, argv, "test program", action ? action : &dummy);
  if (err)
    *err = cap_end(&cap);
  return rc;
}

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})
#define NOARGS ((const char *const[]){NULL})

/* Loads args expecting SAC_ECONFIG, and checks that the log names every given string. */
static void expect_error(const char *const *args, const char *const *must_mention) {
  cfg_t c;
  char *err = NULL;
  int rc = load_v(&c, NULL, &err, args);
  cr_assert_eq(rc, SAC_ECONFIG, "expected SAC_ECONFIG, got %d; log:\n%s", rc, err);
  for (; must_mention && *must_mention; must_mention++)
    cr_assert_not_null(strstr(err, *must_mention), "log does not mention '%s':\n%s", *must_mention, err);
  free(err);
}

static void expect_ok(cfg_t *c, const char *const *args) {
  char *err = NULL;
  int action = -1;
  int rc = load_v(c, &action, &err, args);
  cr_assert_eq(rc, 0, "load failed (%d); log:\n%s", rc, err);
  cr_assert_eq(action, SAC_CFG_RUN);
  free(err);
}

/* ---- precedence ---------------------------------------------------------------------- */

Test(config, defaults_only) {
  cfg_t c;
  memset(&c, 0x5a, sizeof c);
  expect_ok(&c, NOARGS);
  cr_assert_eq(c.batch, 256);
  cr_assert_eq(c.capacity, 1000000);
  cr_assert_eq(c.lr, 3e-4);
  cr_assert_eq(c.verbose, 0);
  cr_assert_str_eq(c.name, "pendulum");
  cr_assert_eq(c.log_every, 10);
  cr_assert_eq(c.alpha, 0.2);
  cr_assert_eq(c.no_default, 0, "an option without default must be zeroed, not left as garbage");
}

Test(config, file_over_defaults) {
  const char *p = tmp_file("batch_size = 64\nname = cheetah\n");
  cfg_t c;
  expect_ok(&c, ARGS("--config", p));
  cr_assert_eq(c.batch, 64);
  cr_assert_str_eq(c.name, "cheetah");
  cr_assert_eq(c.lr, 3e-4);
}

Test(config, full_chain) {
  /* Each source sets a key that every earlier source also set, so each assertion below
   * fails if one precedence step is reversed. */
  const char *p = tmp_file("batch_size = 1\nlr = 0.1\nname = file\nlog-every = 7\n");
  setenv("SAC_CONFIG", p, 1);
  setenv("SAC_BATCH_SIZE", "2", 1);
  setenv("SAC_LR", "0.2", 1);
  setenv("SAC_LOG_EVERY", "8", 1);
  cfg_t c;
  expect_ok(&c, ARGS("--batch_size=3"));
  cr_assert_eq(c.batch, 3, "command line beats environment");
  cr_assert_eq(c.lr, 0.2, "environment beats file");
  cr_assert_eq(c.log_every, 8, "SAC_LOG_EVERY maps to log-every ('-' as '_')");
  cr_assert_str_eq(c.name, "file", "file beats default");
  cr_assert_eq(c.capacity, 1000000, "default stays when no source sets it");
}

Test(config, config_flag_beats_sac_config) {
  const char *a = tmp_file("batch_size = 11\n");
  const char *b = tmp_file("batch_size = 22\nlr = 0.5\n");
  setenv("SAC_CONFIG", a, 1);
  cfg_t c;
  expect_ok(&c, ARGS("--config", b));
  cr_assert_eq(c.batch, 22, "--config replaces SAC_CONFIG, it is not read in addition");
  cr_assert_eq(c.lr, 0.5);
}

Test(config, sac_config_env_alone) {
  const char *a = tmp_file("batch_size = 11\n");
  setenv("SAC_CONFIG", a, 1);
  cfg_t c;
  expect_ok(&c, NOARGS);
  cr_assert_eq(c.batch, 11);
}

Test(config, env_names_and_dots) {
  setenv("SAC_REPLAY_CAPACITY", "123456789012", 1);
  setenv("SAC_LEARNER_ALPHA", "0.05", 1);
  cfg_t c;
  expect_ok(&c, NOARGS);
  cr_assert_eq(c.capacity, 123456789012LL);
  cr_assert_eq(c.alpha, 0.05);
}

Test(config, argv_forms_and_last_wins) {
  cfg_t c;
  expect_ok(&c, ARGS("--batch_size", "17", "--lr=0.25", "--replay.capacity", "9", "--batch_size=18", "--name",
                     "-x-"));
  cr_assert_eq(c.batch, 18, "a later command-line setting wins");
  cr_assert_eq(c.lr, 0.25);
  cr_assert_eq(c.capacity, 9);
  cr_assert_str_eq(c.name, "-x-", "a value may start with a single '-'");
  expect_ok(&c, ARGS("--lr", "-0") /* negative-looking number is a value, not an option */);
  cr_assert_eq(c.lr, 0.0);
  expect_ok(&c, ARGS("--batch_size=5", "--"));
  cr_assert_eq(c.batch, 5, "a trailing '--' is fine");
}

Test(config, range_bounds_inclusive) {
  cfg_t c;
  expect_ok(&c, ARGS("--batch_size=1", "--lr=1"));
  cr_assert_eq(c.batch, 1);
  cr_assert_eq(c.lr, 1.0);
  expect_ok(&c, ARGS("--batch_size=65536", "--lr=0", "--log-every=-5"));
  cr_assert_eq(c.batch, 65536);
  cr_assert_eq(c.log_every, -5, "min > max means unbounded");
}

/* ---- booleans ------------------------------------------------------------------------ */

Test(config, bool_forms) {
  cfg_t c;
  expect_ok(&c, ARGS("--verbose"));
  cr_assert_eq(c.verbose, 1, "bare --key is true");
  expect_ok(&c, ARGS("--verbose", "--no-verbose"));
  cr_assert_eq(c.verbose, 0, "--no-key is false");
  expect_ok(&c, ARGS("--verbose=false"));
  cr_assert_eq(c.verbose, 0);
  expect_ok(&c, ARGS("--verbose", "yes"));
  cr_assert_eq(c.verbose, 1);
  expect_ok(&c, ARGS("--verbose", "off"));
  cr_assert_eq(c.verbose, 0, "a boolean word after a bare flag is its value");
  expect_ok(&c, ARGS("--verbose", "--batch_size", "5"));
  cr_assert_eq(c.verbose, 1);
  cr_assert_eq(c.batch, 5);
  expect_ok(&c, ARGS("--verbose=TRUE"));
  cr_assert_eq(c.verbose, 1, "boolean words are case-insensitive");
  expect_ok(&c, ARGS("--verbose=0"));
  cr_assert_eq(c.verbose, 0);

  setenv("SAC_VERBOSE", "on", 1);
  expect_ok(&c, NOARGS);
  cr_assert_eq(c.verbose, 1);
  expect_ok(&c, ARGS("--no-verbose"));
  cr_assert_eq(c.verbose, 0, "--no-key on the command line beats the environment");
  unsetenv("SAC_VERBOSE");

  const char *p = tmp_file("verbose = 1\n");
  expect_ok(&c, ARGS("--config", p));
  cr_assert_eq(c.verbose, 1);
}

Test(config, bool_errors) {
  expect_error(ARGS("--verbose=maybe"), ARGS("verbose", "maybe"));
  expect_error(ARGS("--no-verbose=1"), ARGS("no-verbose"));
  expect_error(ARGS("--no-batch_size"), ARGS("no-batch_size"));
  expect_error(ARGS("--verbose", "maybe"), ARGS("positional", "maybe"));
}

/* ---- the file syntax ----------------------------------------------------------------- */

Test(config, file_sections_comments_quotes) {
  const char *p = tmp_file("# a comment\n"
                           "\n"
                           "   batch_size   =   99   \n"
                           "name = abc   # trailing comment\n"
                           "learner.alpha = 0.125\r\n"
                           "[replay]\n"
                           "capacity = 777 # slots\n"
                           "  [ learner ]  # a section with blanks\n"
                           "alpha = 0.5\n");
  cfg_t c;
  expect_ok(&c, ARGS("--config", p));
  cr_assert_eq(c.batch, 99);
  cr_assert_str_eq(c.name, "abc");
  cr_assert_eq(c.capacity, 777, "[replay] + capacity is replay.capacity");
  cr_assert_eq(c.alpha, 0.5, "the later section entry wins over the dotted key");
}

Test(config, file_quotes) {
  cfg_t c;
  const char *p = tmp_file("name = \"  a # b \"  # comment\n");
  expect_ok(&c, ARGS("--config", p));
  cr_assert_str_eq(c.name, "  a # b ", "quotes keep blanks and '#'");
  p = tmp_file("name = \"q\\\"x\\\\y\"\n");
  expect_ok(&c, ARGS("--config", p));
  cr_assert_str_eq(c.name, "q\"x\\y");
  p = tmp_file("name = \"\"\n");
  expect_ok(&c, ARGS("--config", p));
  cr_assert_str_eq(c.name, "");
  p = tmp_file("batch_size = \"42\"\n");
  expect_ok(&c, ARGS("--config", p));
  cr_assert_eq(c.batch, 42, "numbers may be quoted too");
  p = tmp_file("name = tcp://h:1#x\n");
  expect_ok(&c, ARGS("--config", p));
  cr_assert_str_eq(c.name, "tcp://h:1#x", "'#' not after a blank is part of the value");
}

Test(config, file_errors) {
  const char *p;
  p = tmp_file("batch_size = 4\n\nbogus_key = 1\n");
  expect_error(ARGS("--config", p), ARGS("bogus_key", p, ":3"));
  p = tmp_file("[replay]\nsize = 3\n");
  expect_error(ARGS("--config", p), ARGS("replay.size", ":2"));
  p = tmp_file("just some words\n");
  expect_error(ARGS("--config", p), ARGS(":1", "key = value"));
  p = tmp_file("= 5\n");
  expect_error(ARGS("--config", p), ARGS(":1", "missing key"));
  p = tmp_file("[replay\ncapacity = 1\n");
  expect_error(ARGS("--config", p), ARGS(":1", "section"));
  p = tmp_file("[]\n");
  expect_error(ARGS("--config", p), ARGS(":1", "section"));
  p = tmp_file("name = \"abc\n");
  expect_error(ARGS("--config", p), ARGS(":1", "closing quote"));
  p = tmp_file("name = \"abc\" def\n");
  expect_error(ARGS("--config", p), ARGS(":1", "after closing quote"));
  p = tmp_file("name = \"a\\qb\"\n");
  expect_error(ARGS("--config", p), ARGS(":1", "escape"));
  p = tmp_file("batch_size = 12x\n");
  expect_error(ARGS("--config", p), ARGS(":1", "batch_size", "12x"));
  expect_error(ARGS("--config", "/nonexistent/sac.conf"), ARGS("/nonexistent/sac.conf"));
  expect_error(ARGS("--config"), ARGS("missing value", "config"));
  expect_error(ARGS("--config="), ARGS("config"));
  setenv("SAC_CONFIG", "/nonexistent/env.conf", 1);
  expect_error(NOARGS, ARGS("/nonexistent/env.conf"));
}

Test(config, file_reports_every_bad_line) {
  const char *p = tmp_file("first_bad = 1\nbatch_size = 2\nsecond_bad = 3\n");
  cfg_t c;
  char *err = NULL;
  cr_assert_eq(load_v(&c, NULL, &err, ARGS("--config", p)), SAC_ECONFIG);
  cr_assert_not_null(strstr(err, "first_bad"));
  cr_assert_not_null(strstr(err, "second_bad"), "reading goes on after an error:\n%s", err);
  free(err);
}

/* ---- errors in the environment and on the command line -------------------------------- */

Test(config, env_unknown_and_bad) {
  setenv("SAC_BOGUS_KEY", "1", 1);
  expect_error(NOARGS, ARGS("SAC_BOGUS_KEY"));
  unsetenv("SAC_BOGUS_KEY");
  setenv("SAC_BATCH_SIZE", "many", 1);
  expect_error(NOARGS, ARGS("SAC_BATCH_SIZE", "batch_size", "many"));
  setenv("SAC_BATCH_SIZE", "0", 1);
  expect_error(NOARGS, ARGS("SAC_BATCH_SIZE", "out of range"));
  setenv("SAC_BATCH_SIZE", "", 1);
  expect_error(NOARGS, ARGS("SAC_BATCH_SIZE"));
  unsetenv("SAC_BATCH_SIZE");
  /* The environment is checked even when the command line sets the same key: a typo'd
   * container variable must not hide behind a flag. */
  setenv("SAC_BATCHSIZE", "3", 1);
  expect_error(ARGS("--batch_size=3"), ARGS("SAC_BATCHSIZE"));
}

Test(config, env_allow_list) {
  setenv("SAC_LOG_LEVEL", "info", 1);
  setenv("SAC_LOG_JSON", "0", 1);
  setenv("SAC_CONFIG", "", 1);  /* empty: no file */
  setenv("SACX_OTHER", "1", 1); /* not under SAC_ */
  cfg_t c;
  expect_ok(&c, NOARGS);
  cr_assert_eq(c.batch, 256);
  unsetenv("SACX_OTHER");
}

/* The variables read outside the option table (environment lookup, MuJoCo models) are not
 * options but are accepted; a near miss of one of them is still an error naming it. */
Test(config, env_non_option_variables) {
  setenv("SAC_MUJOCO_ASSETS", "/tmp/assets", 1);
  setenv("SAC_PLUGIN_PATH", "/tmp/a:/tmp/b", 1);
  setenv("SAC_FUZZ_SEED_DIR", "/tmp/seeds", 1);
  cfg_t c;
  expect_ok(&c, NOARGS);
  setenv("SAC_PLUGINS_PATH", "/tmp/a", 1);
  expect_error(NOARGS, ARGS("SAC_PLUGINS_PATH", "unknown key"));
  unsetenv("SAC_PLUGINS_PATH");
  setenv("SAC_MUJOCO_ASSET", "/tmp/assets", 1);
  expect_error(NOARGS, ARGS("SAC_MUJOCO_ASSET", "unknown key"));
}

Test(config, argv_unknown_key) {
  expect_error(ARGS("--bogus=1"), ARGS("bogus", "command line"));
  expect_error(ARGS("--bogus", "1"), ARGS("bogus", "command line"));
  expect_error(ARGS("--Batch_size=1"), ARGS("Batch_size"));
  expect_error(ARGS("--replay_capacity=1"), ARGS("replay_capacity"));
}

Test(config, bad_numbers) {
  expect_error(ARGS("--batch_size=12abc"), ARGS("batch_size", "12abc"));
  expect_error(ARGS("--batch_size="), ARGS("batch_size"));
  expect_error(ARGS("--batch_size= 5"), ARGS("batch_size"));
  expect_error(ARGS("--batch_size=5 "), ARGS("batch_size"));
  expect_error(ARGS("--batch_size=1.5"), ARGS("batch_size", "1.5"));
  expect_error(ARGS("--batch_size=99999999999"), ARGS("batch_size", "overflow"));
  expect_error(ARGS("--replay.capacity=99999999999999999999"), ARGS("replay.capacity", "overflow"));
  expect_error(ARGS("--lr=abc"), ARGS("lr", "abc"));
  expect_error(ARGS("--lr=0.1x"), ARGS("lr"));
  expect_error(ARGS("--lr=nan"), ARGS("lr", "finite"));
  expect_error(ARGS("--learner.alpha=inf"), ARGS("learner.alpha", "finite"));
  expect_error(ARGS("--learner.alpha=1e999"), ARGS("learner.alpha", "finite"));
}

Test(config, out_of_range) {
  expect_error(ARGS("--batch_size=0"), ARGS("batch_size", "out of range"));
  expect_error(ARGS("--batch_size=65537"), ARGS("batch_size", "out of range"));
  expect_error(ARGS("--batch_size=-1"), ARGS("batch_size", "out of range"));
  expect_error(ARGS("--lr=1.0000001"), ARGS("lr", "out of range"));
  expect_error(ARGS("--lr=-1e-9"), ARGS("lr", "out of range"));
  expect_error(ARGS("--replay.capacity=0"), ARGS("replay.capacity", "out of range"));
}

Test(config, string_too_long) {
  cfg_t c;
  expect_ok(&c, ARGS("--name=123456789012345")); /* 15 characters + NUL fill char[16] */
  cr_assert_str_eq(c.name, "123456789012345");
  expect_error(ARGS("--name=1234567890123456"), ARGS("name", "too long"));
  /* A failed set leaves the field as it was (no silent truncation). */
  strcpy(c.name, "keep");
  int rc = sac_config_set(k_opts, N_OPTS, &c, "name", "this string is far too long", "test");
  cr_assert_eq(rc, SAC_ECONFIG);
  cr_assert_str_eq(c.name, "keep");
}

Test(config, missing_value) {
  expect_error(ARGS("--batch_size"), ARGS("missing value", "batch_size"));
  expect_error(ARGS("--batch_size", "--lr=0.1"), ARGS("missing value", "batch_size"));
  expect_error(ARGS("--name"), ARGS("missing value", "name"));
}

Test(config, positional_argument) {
  expect_error(ARGS("extra"), ARGS("positional", "extra"));
  expect_error(ARGS("--batch_size=3", "-v"), ARGS("positional", "-v"));
  expect_error(ARGS("--", "--batch_size=3"), ARGS("positional", "--batch_size=3"));
  expect_error(ARGS("--verbose", "file.txt"), ARGS("positional", "file.txt"));
}

Test(config, all_errors_reported_across_sources) {
  const char *p = tmp_file("in_file = 1\n");
  setenv("SAC_IN_ENV", "1", 1);
  expect_error(ARGS("--config", p, "--in_argv=1"), ARGS("in_file", "SAC_IN_ENV", "in_argv"));
}

/* ---- sac_config_set ------------------------------------------------------------------ */

Test(config, set_directly) {
  cfg_t c;
  expect_ok(&c, NOARGS);
  cr_assert_eq(sac_config_set(k_opts, N_OPTS, &c, "lr", "0.5", "unit test"), 0);
  cr_assert_eq(c.lr, 0.5);
  cr_assert_eq(sac_config_set(k_opts, N_OPTS, &c, "batch_size", "7", NULL), 0);
  cr_assert_eq(c.batch, 7);
  capture_t cap;
  cap_begin(&cap, STDERR_FILENO);
  int rc = sac_config_set(k_opts, N_OPTS, &c, "nope", "1", "my-source");
  int rc2 = sac_config_set(k_opts, N_OPTS, &c, "batch_size", "70000", "my-source");
  char *err = cap_end(&cap);
  cr_assert_eq(rc, SAC_ECONFIG);
  cr_assert_eq(rc2, SAC_ECONFIG);
  cr_assert_eq(c.batch, 7, "a failed set leaves the field unchanged");
  cr_assert_not_null(strstr(err, "nope"));
  cr_assert_not_null(strstr(err, "my-source"));
  free(err);
}

/* ---- --help and --version ------------------------------------------------------------ */

Test(config, help) {
  cfg_t c;
  int action = -1;
  capture_t cap;
  cap_begin(&cap, STDOUT_FILENO);
  char *argv[] = {"/usr/local/bin/sac-test", "--batch_size=3", "--help", NULL};
  int rc = sac_config_load(k_opts, N_OPTS, &c, 3, argv, "A test program.", &action);
  char *out = cap_end(&cap);
  cr_assert_eq(rc, 0);
  cr_assert_eq(action, SAC_CFG_EXIT_OK);
  const char *must[] = {"Usage: sac-test",
                        "A test program.",
                        "--config",
                        "batch_size",
                        "int",
                        "256",
                        "minibatch size",
                        "SAC_BATCH_SIZE",
                        "replay.capacity",
                        "int64",
                        "SAC_REPLAY_CAPACITY",
                        "1000000",
                        "lr",
                        "float",
                        "3e-4",
                        "learning rate",
                        "verbose",
                        "bool",
                        "--no-KEY",
                        "SAC_VERBOSE",
                        "name",
                        "string",
                        "pendulum",
                        "SAC_NAME",
                        "15 characters",
                        "log-every",
                        "SAC_LOG_EVERY",
                        "learner.alpha",
                        "SAC_LEARNER_ALPHA",
                        "entropy weight",
                        "no_default",
                        "SAC_NO_DEFAULT",
                        "[1, 65536]",
                        "Other environment variables",
                        "SAC_CONFIG",
                        "SAC_LOG_LEVEL",
                        "SAC_LOG_JSON",
                        "SAC_LOG_JSON"};
  for (size_t i = 0; i < sizeof must / sizeof must[0]; i++)
    cr_assert_not_null(strstr(out, must[i]), "--help lacks '%s':\n%s", must[i], out);
  /* variables of other programs (the fuzz targets, the learner's CUDA module) are not listed */
  cr_assert_null(strstr(out, "SAC_FUZZ_SEED_DIR"), "%s", out);
  cr_assert_null(strstr(out, "SAC_CUDA_MODULE"), "%s", out);
  free(out);
}

Test(config, help_wins_over_broken_sources) {
  setenv("SAC_BOGUS", "1", 1);
  setenv("SAC_CONFIG", "/nonexistent/x.conf", 1);
  cfg_t c;
  int action = -1;
  capture_t cap;
  cap_begin(&cap, STDOUT_FILENO);
  char *err = NULL;
  int rc = load_v(&c, &action, &err, ARGS("--unknown", "--help"));
  char *out = cap_end(&cap);
  cr_assert_eq(rc, 0, "log:\n%s", err);
  cr_assert_eq(action, SAC_CFG_EXIT_OK);
  cr_assert_not_null(strstr(out, "Usage:"));
  cr_assert_eq(err[0], '\0', "--help reads no other source, so logs nothing:\n%s", err);
  free(out);
  free(err);
}

Test(config, version) {
  cfg_t c;
  int action = -1;
  capture_t cap;
  cap_begin(&cap, STDOUT_FILENO);
  char *argv[] = {"./build/sac-learner", "--version", NULL};
  int rc = sac_config_load(k_opts, N_OPTS, &c, 2, argv, NULL, &action);
  char *out = cap_end(&cap);
  cr_assert_eq(rc, 0);
  cr_assert_eq(action, SAC_CFG_EXIT_OK);
  cr_assert_str_eq(out, "sac-learner " SAC_VERSION "\n");
  free(out);
}

Test(config, no_argv) {
  cfg_t c;
  int action = -1;
  cr_assert_eq(sac_config_load(k_opts, N_OPTS, &c, 0, NULL, NULL, &action), 0);
  cr_assert_eq(action, SAC_CFG_RUN);
  cr_assert_eq(c.batch, 256);
}

/* ---- dump ---------------------------------------------------------------------------- */

typedef struct {
  int i;
  int64_t big;
  double d, tiny, neg;
  int b;
  char s[64], empty[4];
} dump_t;

static const sac_cfg_opt_t k_dump_opts[] = {
    {"i", SAC_CFG_INT, offsetof(dump_t, i), 0, "0", SAC_CFG_UNBOUNDED, ""},
    {"sec.big", SAC_CFG_INT64, offsetof(dump_t, big), 0, "0", SAC_CFG_UNBOUNDED, ""},
    {"d", SAC_CFG_DOUBLE, offsetof(dump_t, d), 0, "0", SAC_CFG_UNBOUNDED, ""},
    {"tiny", SAC_CFG_DOUBLE, offsetof(dump_t, tiny), 0, "0", SAC_CFG_UNBOUNDED, ""},
    {"neg", SAC_CFG_DOUBLE, offsetof(dump_t, neg), 0, "0", SAC_CFG_UNBOUNDED, ""},
    {"b", SAC_CFG_BOOL, offsetof(dump_t, b), 0, "false", SAC_CFG_UNBOUNDED, ""},
    {"s", SAC_CFG_STRING, offsetof(dump_t, s), sizeof(((dump_t *)0)->s), "", SAC_CFG_UNBOUNDED, ""},
    {"e-mpty", SAC_CFG_STRING, offsetof(dump_t, empty), sizeof(((dump_t *)0)->empty), "x", SAC_CFG_UNBOUNDED,
     ""},
};
#define N_DUMP (sizeof k_dump_opts / sizeof k_dump_opts[0])

Test(config, dump_round_trip) {
  dump_t a, b;
  memset(&a, 0, sizeof a);
  memset(&b, 0, sizeof b);
  a.i = -2147483647 - 1;
  a.big = INT64_MAX;
  a.d = 0.1 + 0.2;                  /* not exactly representable in few digits */
  a.tiny = 4.9406564584124654e-324; /* the smallest denormal */
  a.neg = -1.0 / 3.0;
  a.b = 1;
  strcpy(a.s, " lead # \"quoted\" back\\slash\ttab\nnewline trail ");
  a.empty[0] = '\0';

  char path[] = "/tmp/sac_dump_XXXXXX";
  int fd = mkstemp(path);
  cr_assert_geq(fd, 0);
  FILE *f = fdopen(fd, "w");
  cr_assert_not_null(f);
  cr_assert_eq(sac_config_dump(k_dump_opts, N_DUMP, &a, f), 0);
  fclose(f);

  char *argv[] = {"prog", "--config", path, NULL};
  int action = -1;
  int rc = sac_config_load(k_dump_opts, N_DUMP, &b, 3, argv, NULL, &action);
  FILE *rf = fopen(path, "r");
  cr_assert_not_null(rf);
  char *text = slurp_fd(fileno(rf));
  fclose(rf);
  unlink(path);
  cr_assert_eq(rc, 0, "dump did not load back:\n%s", text);
  cr_assert_eq(b.i, a.i);
  cr_assert_eq(b.big, a.big);
  cr_assert_eq(b.d, a.d, "doubles must round-trip bit for bit");
  cr_assert_eq(b.tiny, a.tiny);
  cr_assert_eq(b.neg, a.neg);
  cr_assert_eq(b.b, a.b);
  cr_assert_str_eq(b.s, a.s);
  cr_assert_str_eq(b.empty, "");
  cr_assert_not_null(strstr(text, "i = -2147483648\n"), "format is 'key = value':\n%s", text);
  cr_assert_not_null(strstr(text, "sec.big = 9223372036854775807\n"));
  cr_assert_not_null(strstr(text, "b = true\n"));
  free(text);
}

Test(config, dump_of_loaded_config_round_trips) {
  cfg_t a, b;
  expect_ok(&a, ARGS("--batch_size=3", "--lr=0.001", "--verbose", "--name=x y", "--learner.alpha=0.3"));
  char path[] = "/tmp/sac_dump_XXXXXX";
  int fd = mkstemp(path);
  cr_assert_geq(fd, 0);
  FILE *f = fdopen(fd, "w");
  cr_assert_eq(sac_config_dump(k_opts, N_OPTS, &a, f), 0);
  fclose(f);
  char *err = NULL;
  int rc = load_v(&b, NULL, &err, ARGS("--config", path));
  unlink(path);
  cr_assert_eq(rc, 0, "%s", err);
  free(err);
  cr_assert_eq(b.batch, 3);
  cr_assert_eq(b.lr, 0.001);
  cr_assert_eq(b.verbose, 1);
  cr_assert_str_eq(b.name, "x y");
  cr_assert_eq(b.alpha, 0.3);
  cr_assert_eq(b.capacity, a.capacity);
}

Test(config, dump_write_error) {
  FILE *f = fopen("/dev/full", "w");
  if (!f)
    cr_skip_test("no /dev/full");
  cfg_t c;
  expect_ok(&c, NOARGS);
  cr_assert_eq(sac_config_dump(k_opts, N_OPTS, &c, f), SAC_EIO);
  fclose(f);
}

/* ---- hostile config sources (issue 14, defect 11) ------------------------------------ */

/* Loads --config path, expecting SAC_ECONFIG with the log naming want; returns the log. */
static char *expect_file_refused(const char *path, const char *want) {
  cfg_t c;
  char *err = NULL;
  int rc = load_v(&c, NULL, &err, ARGS("--config", path));
  cr_assert_eq(rc, SAC_ECONFIG, "--config %s: expected SAC_ECONFIG, got %d; log:\n%s", path, rc, err);
  cr_assert_not_null(strstr(err, want), "--config %s: log does not say '%s':\n%s", path, want, err);
  return err;
}

/* Endless devices are refused at once instead of being read until memory runs out
 * (/dev/zero) or printing an error per line for ever (/dev/urandom). The timeout is
 * what fails on code that reads them. */
Test(config, endless_devices_refused, .timeout = 20) {
  free(expect_file_refused("/dev/zero", "not a regular file"));
  free(expect_file_refused("/dev/urandom", "not a regular file"));
}

/* A FIFO nobody writes to would block open() and read() for ever. */
Test(config, fifo_refused_without_hanging, .timeout = 20) {
  char path[64];
  snprintf(path, sizeof path, "/tmp/sac_cfg_fifo_%d", (int)getpid());
  unlink(path);
  cr_assert_eq(mkfifo(path, 0600), 0, "mkfifo: %s", strerror(errno));
  char *err = expect_file_refused(path, "not a regular file");
  unlink(path);
  free(err);
}

/* A regular file over the cap is refused whole, without being read (a sparse 2 MiB file
 * would be 2 MiB of NUL bytes); one just under the cap loads. */
Test(config, size_cap) {
  const char *big = tmp_file("");
  cr_assert_eq(truncate(big, 2 << 20), 0);
  free(expect_file_refused(big, "too big"));

  /* the negative control: 1 MiB minus a little of comments, then a key, is a config */
  const char *ok = tmp_file("");
  FILE *f = fopen(ok, "w");
  cr_assert_not_null(f);
  char row[1024];
  memset(row, 'x', sizeof row - 2);
  row[0] = '#';
  row[sizeof row - 2] = '\n';
  row[sizeof row - 1] = '\0';
  for (int i = 0; i < 1000; i++)
    fputs(row, f);
  fputs("batch_size = 77\n", f);
  fclose(f);
  cfg_t c;
  expect_ok(&c, ARGS("--config", ok));
  cr_assert_eq(c.batch, 77, "a file under the cap is read to its end");
}

/* A file of garbage stops after the first few errors, with a line saying so. */
Test(config, error_cap) {
  const char *p = tmp_file("");
  FILE *f = fopen(p, "w");
  cr_assert_not_null(f);
  for (int i = 0; i < 5000; i++)
    fprintf(f, "garbage line %d\n", i);
  fclose(f);
  char *err = expect_file_refused(p, "too many errors");
  int lines = 0;
  for (const char *q = err; (q = strstr(q, "expected 'key = value'")); q++)
    lines++;
  cr_assert(lines >= 1 && lines <= 10, "%d error lines for 5000 bad lines (at most 10 expected)", lines);
  cr_assert_null(strstr(err, ":11:"), "line 11 is not reported:\n%.2000s", err);
  free(err);

  /* a short bad file still reports every bad line and no "too many" */
  p = tmp_file("a = 1\nb = 2\nbatch_size = 3\n");
  err = expect_file_refused(p, "'b'");
  cr_assert_null(strstr(err, "too many errors"), "%s", err);
  free(err);
}

/* An allocation failure while reading is an error, never an end of file: on the old code
 * the file below loaded as "batch_size = 3" alone, its long comment line lost to a failed
 * getline() that read as end of file (read whole, it says batch_size 4). The
 * address-space limit makes the 1 MiB read buffer fail; it applies only to this test's
 * own process. */
Test(config, allocation_failure_is_not_eof) {
#if defined(__SANITIZE_ADDRESS__)
  cr_skip_test("an address-space limit breaks AddressSanitizer");
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
  cr_skip_test("an address-space limit breaks AddressSanitizer");
#endif
#endif
  const char *p = tmp_file("");
  FILE *f = fopen(p, "w");
  cr_assert_not_null(f);
  /* a valid config when read whole: batch_size 4 */
  fputs("batch_size = 3\n# ", f);
  for (int i = 0; i < (900 << 10); i++)
    fputc('y', f);
  fputs("\nbatch_size = 4\n", f);
  fclose(f);
  /* the capture's temp file and the log need a little; 1 MiB of buffer must not fit */
  FILE *statm = fopen("/proc/self/statm", "r");
  if (!statm)
    cr_skip_test("no /proc/self/statm");
  unsigned long pages = 0;
  cr_assert_eq(fscanf(statm, "%lu", &pages), 1);
  fclose(statm);
  struct rlimit rl = {.rlim_cur = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + (256u << 10),
                      .rlim_max = RLIM_INFINITY};
  cr_assert_eq(setrlimit(RLIMIT_AS, &rl), 0);
  cfg_t c;
  char *err = NULL;
  int rc = load_v(&c, NULL, &err, ARGS("--config", p));
  rl.rlim_cur = RLIM_INFINITY;
  setrlimit(RLIMIT_AS, &rl);
  cr_assert_eq(rc, SAC_ECONFIG, "a failed allocation must fail the load (rc %d, batch_size %d); log:\n%.500s",
               rc, c.batch, err ? err : "");
  cr_assert_not_null(strstr(err, "out of memory"), "the load failed for another reason:\n%.500s", err);
  free(err);
}

/* ---- old names (the alias table of config.c) ------------------------------------------ */

/* A table with the new names of renamed options, as the programs have them. */
typedef struct {
  int64_t capacity, log_steps;
  char sampler[32];
  double priority_alpha;
  int log_s, quiet, embedded_shards;
} renamed_t;

static const sac_cfg_opt_t k_renamed[] = {
    {"capacity", SAC_CFG_INT64, offsetof(renamed_t, capacity), 0, "1000", 1, 1e12, "transitions"},
    {"sampler", SAC_CFG_STRING, offsetof(renamed_t, sampler), 32, "uniform", SAC_CFG_UNBOUNDED, "sampler"},
    {"priority_alpha", SAC_CFG_DOUBLE, offsetof(renamed_t, priority_alpha), 0, "0.6", 0, 10, "exponent"},
    {"log_every_steps", SAC_CFG_INT64, offsetof(renamed_t, log_steps), 0, "1000", 0, 1e15, "steps"},
    {"log_interval_s", SAC_CFG_INT, offsetof(renamed_t, log_s), 0, "10", 0, 86400, "seconds"},
    {"quiet", SAC_CFG_BOOL, offsetof(renamed_t, quiet), 0, "false", SAC_CFG_UNBOUNDED, "no progress"},
    /* the learner's: the learner's old names (buffer_capacity ...) apply only with it */
    {"embedded_shards", SAC_CFG_INT, offsetof(renamed_t, embedded_shards), 0, "2", 1, 64, "shards"},
};
#define N_RENAMED (sizeof k_renamed / sizeof k_renamed[0])

/* Loads k_renamed from {"sac-learner", args...}; the log goes to *err. */
static int load_renamed(renamed_t *r, char **err, const char *const *args) {
  char *argv[32];
  int argc = 0, action;
  argv[argc++] = "sac-learner";
  for (; *args; args++)
    argv[argc++] = (char *)*args;
  argv[argc] = NULL;
  capture_t cap;
  cap_begin(&cap, STDERR_FILENO);
  int rc = sac_config_load(k_renamed, N_RENAMED, r, argc, argv, "renamed", &action);
  *err = cap_end(&cap);
  return rc;
}

static int count(const char *s, const char *what) {
  int n = 0;
  for (; (s = strstr(s, what)) != NULL; s++)
    n++;
  return n;
}

/* Old names work on the command line, with one warning line each that names the new one;
 * the new names work without a warning (the negative control of the warning check). */
Test(config, old_names_on_the_command_line) {
  renamed_t r;
  char *err;
  cr_assert_eq(
      load_renamed(&r, &err,
                   ARGS("--buffer_capacity=5000", "--prioritized", "--per_alpha", "0.9", "--log_interval=7")),
      0, "%s", err);
  cr_assert_eq(r.capacity, 5000);
  cr_assert_str_eq(r.sampler, "prioritized");
  cr_assert_float_eq(r.priority_alpha, 0.9, 1e-12);
  cr_assert_eq(r.log_steps, 7, "log_interval sets both of its successors");
  cr_assert_eq(r.log_s, 7);
  cr_assert_not_null(strstr(err, "'buffer_capacity' is deprecated"), "%s", err);
  cr_assert_not_null(strstr(err, "use 'capacity'"), "%s", err);
  cr_assert_not_null(strstr(err, "use 'sampler'"), "%s", err);
  cr_assert_not_null(strstr(err, "use 'priority_alpha'"), "%s", err);
  cr_assert_not_null(
      strstr(err, "'log_interval' is deprecated and goes in the next release; use 'log_every_steps' "
                  "and 'log_interval_s'"),
      "one warning names both successors:\n%s", err);
  cr_assert_eq(count(err, "deprecated"), 4, "one line per old name:\n%s", err);
  free(err);

  cr_assert_eq(load_renamed(&r, &err, ARGS("--no-prioritized")), 0, "%s", err);
  cr_assert_str_eq(r.sampler, "uniform");
  free(err);
  cr_assert_eq(load_renamed(&r, &err, ARGS("--prioritized=maybe")), SAC_ECONFIG);
  cr_assert_not_null(strstr(err, "not a boolean"), "%s", err);
  free(err);

  cr_assert_eq(load_renamed(&r, &err, ARGS("--capacity=6000", "--sampler=prioritized", "--log_interval_s=3")),
               0);
  cr_assert_eq(r.capacity, 6000);
  cr_assert_eq(r.log_s, 3);
  cr_assert_eq(r.log_steps, 1000);
  cr_assert_null(strstr(err, "deprecated"), "new names warn nothing:\n%s", err);
  free(err);
}

/* In a config file and as SAC_<OLD>; the new variable wins over the old one. */
Test(config, old_names_in_file_and_environment) {
  renamed_t r;
  char *err;
  const char *path = tmp_file("buffer_capacity = 4096\nprioritized = yes\n");
  cr_assert_eq(load_renamed(&r, &err, ARGS("--config", path)), 0, "%s", err);
  cr_assert_eq(r.capacity, 4096);
  cr_assert_str_eq(r.sampler, "prioritized");
  cr_assert_eq(count(err, "deprecated"), 2, "%s", err);
  free(err);

  setenv("SAC_PER_ALPHA", "0.3", 1);
  cr_assert_eq(load_renamed(&r, &err, NOARGS), 0, "%s", err);
  cr_assert_float_eq(r.priority_alpha, 0.3, 1e-12);
  cr_assert_not_null(strstr(err, "environment variable SAC_PER_ALPHA: 'per_alpha' is deprecated"), "%s", err);
  free(err);
  setenv("SAC_PRIORITY_ALPHA", "0.4", 1);
  cr_assert_eq(load_renamed(&r, &err, NOARGS), 0, "%s", err);
  cr_assert_float_eq(r.priority_alpha, 0.4, 1e-12, "the new name wins");
  free(err);
}

/* An old name is only accepted by a program that has its successor: the test table of the
 * other tests has none, so on the command line it is the unknown key it always was. In the
 * environment it is another program's variable (the learner's), which this one leaves alone:
 * not applied, and not an error; a near miss of it is still an error (the control). */
Test(config, old_name_without_successor_is_unknown) {
  expect_error(ARGS("--buffer_capacity=10"), ARGS("unknown key 'buffer_capacity'"));
  setenv("SAC_PER_ALPHA", "0.3", 1);
  cfg_t c;
  expect_ok(&c, NOARGS);
  cr_assert_float_eq(c.alpha, 0.2, 1e-12, "another program's old name sets nothing here");
  unsetenv("SAC_PER_ALPHA");
  setenv("SAC_PER_ALPHAS", "0.3", 1);
  expect_error(NOARGS, ARGS("SAC_PER_ALPHAS", "unknown key"));
}

/* --help lists the old names; each program lists only the variables it reads. */
Test(config, help_lists_old_names_and_own_variables) {
  renamed_t r;
  int action;
  capture_t cap;
  cap_begin(&cap, STDOUT_FILENO);
  char *argv[] = {"/usr/bin/sac-export", "--help", NULL};
  cr_assert_eq(sac_config_load(k_renamed, N_RENAMED, &r, 2, argv, "x", &action), 0);
  char *out = cap_end(&cap);
  cr_assert_not_null(strstr(out, "--buffer_capacity -> --capacity"), "%s", out);
  cr_assert_not_null(strstr(out, "SAC_LOG_LEVEL"), "%s", out);
  cr_assert_null(strstr(out, "SAC_FUZZ_SEED_DIR"), "%s", out);
  cr_assert_null(strstr(out, "SAC_CUDA_MODULE"), "%s", out);
  cr_assert_null(strstr(out, "SAC_PLUGIN_PATH"), "sac-export loads no environment:\n%s", out);
  free(out);
  cap_begin(&cap, STDOUT_FILENO);
  char *argv2[] = {"sac-learner", "--help-markdown", NULL};
  cr_assert_eq(sac_config_load(k_renamed, N_RENAMED, &r, 2, argv2, "x", &action), 0);
  out = cap_end(&cap);
  cr_assert_not_null(strstr(out, "## sac-learner"), "%s", out);
  cr_assert_not_null(strstr(out, "| `--capacity` | int64 | `1000` | `SAC_CAPACITY` |"), "%s", out);
  cr_assert_not_null(strstr(out, "`SAC_CUDA_MODULE`"), "%s", out);
  cr_assert_not_null(strstr(out, "`SAC_PLUGIN_PATH`"), "%s", out);
  cr_assert_null(strstr(out, "SAC_FUZZ_SEED_DIR"), "%s", out);
  cr_assert_not_null(strstr(out, "| `--buffer_capacity`, `SAC_BUFFER_CAPACITY` | `--capacity` |"), "%s", out);
  free(out);
}

/* ---- the command line people type (issue 36) ----------------------------------------- */

/* '-' and '_' are one letter in a key, in every source; -h is --help. */
Test(config, dashes_and_underscores) {
  cfg_t c;
  expect_ok(&c, ARGS("--batch-size", "7", "--log_every=3", "--no_verbose"));
  cr_assert_eq(c.batch, 7);
  cr_assert_eq(c.log_every, 3, "the table's own 'log-every' typed with '_'");
  cr_assert_eq(c.verbose, 0);
  const char *p = tmp_file("batch-size = 9\n");
  expect_ok(&c, ARGS("--config", p));
  cr_assert_eq(c.batch, 9);
  /* the control: case is not folded, and a different word stays unknown */
  expect_error(ARGS("--Batch-size=1"), ARGS("unknown key 'Batch-size'"));
  int action = -1;
  capture_t cap;
  cap_begin(&cap, STDOUT_FILENO);
  cr_assert_eq(load_v(&c, &action, NULL, ARGS("-h")), 0);
  char *out = cap_end(&cap);
  cr_assert_eq(action, SAC_CFG_EXIT_OK);
  cr_assert_not_null(strstr(out, "--batch_size=int"), "-h prints the usage:\n%s", out);
  free(out);
  expect_error(ARGS("-v"), ARGS("positional", "two dashes"));
}

/* 1e6 where it is exactly an integer; a fraction or beyond 2^53 is not. */
Test(config, integers_in_exponent_form) {
  cfg_t c;
  expect_ok(&c, ARGS("--batch_size", "1e3", "--replay.capacity=6e5"));
  cr_assert_eq(c.batch, 1000);
  cr_assert_eq(c.capacity, 600000);
  expect_ok(&c, ARGS("--batch_size", "2.5e3", "--replay.capacity=1E6"));
  cr_assert_eq(c.batch, 2500);
  cr_assert_eq(c.capacity, 1000000);
  setenv("SAC_BATCH_SIZE", "2e2", 1);
  expect_ok(&c, NOARGS);
  cr_assert_eq(c.batch, 200);
  unsetenv("SAC_BATCH_SIZE");
  expect_error(ARGS("--batch_size=1.5"), ARGS("batch_size", "not an integer"));
  expect_error(ARGS("--batch_size=1e-3"), ARGS("batch_size", "not an integer"));
  expect_error(ARGS("--batch_size=1e6"), ARGS("batch_size", "out of range"));
  expect_error(ARGS("--batch_size=1e10"), ARGS("batch_size", "overflow"));
  expect_error(ARGS("--replay.capacity=1e17"), ARGS("replay.capacity", "not an integer"));
  expect_error(ARGS("--batch_size=0x10"), ARGS("batch_size", "not an integer"));
  expect_error(ARGS("--batch_size=inf"), ARGS("batch_size", "not an integer"));
}

/* A typo names the closest option, in every source; the typo's value is not reported as a
 * positional argument too. Something close to nothing gets no suggestion (the control). */
Test(config, did_you_mean) {
  cfg_t c;
  char *err = NULL;
  cr_assert_eq(load_v(&c, NULL, &err, ARGS("--batch_sise", "3")), SAC_ECONFIG);
  cr_assert_not_null(strstr(err, "unknown key 'batch_sise'"), "%s", err);
  cr_assert_not_null(strstr(err, "did you mean --batch_size?"), "%s", err);
  cr_assert_null(strstr(err, "positional"), "the typo's value is its own, not a positional argument:\n%s",
                 err);
  free(err);
  expect_error(ARGS("--verbos"), ARGS("did you mean --verbose?"));
  expect_error(ARGS("--batch=3"), ARGS("did you mean --batch_size?"));
  const char *p = tmp_file("lrr = 0.1\n");
  expect_error(ARGS("--config", p), ARGS("unknown key 'lrr'", "did you mean lr?"));
  setenv("SAC_BATCH_SIZ", "3", 1);
  expect_error(NOARGS, ARGS("SAC_BATCH_SIZ", "did you mean SAC_BATCH_SIZE?"));
  unsetenv("SAC_BATCH_SIZ");
  cr_assert_eq(load_v(&c, NULL, &err, ARGS("--zzzzzzzz=1")), SAC_ECONFIG);
  cr_assert_null(strstr(err, "did you mean"), "nothing is close to zzzzzzzz:\n%s", err);
  free(err);
}

/* A table like a program's: no dotted keys, loaded as sac-learner or sac-replay. */
typedef struct {
  int64_t capacity;
  double lr;
  int batch, shards;
} prog_t;
static const sac_cfg_opt_t k_prog[] = {
    {"capacity", SAC_CFG_INT64, offsetof(prog_t, capacity), 0, "1000", 1, 1e12, "transitions"},
    {"lr", SAC_CFG_DOUBLE, offsetof(prog_t, lr), 0, "3e-4", 0, 1, "learning rate"},
    {"batch_size", SAC_CFG_INT, offsetof(prog_t, batch), 0, "256", 1, 65536, "batch"},
    {"embedded_shards", SAC_CFG_INT, offsetof(prog_t, shards), 0, "2", 1, 64, "the learner's key"},
};
#define N_PROG (sizeof k_prog / sizeof k_prog[0])

static int load_prog(const char *prog, prog_t *p, unsigned char *src, char **err, const char *const *args) {
  char *argv[32];
  int argc = 0, action;
  argv[argc++] = (char *)prog;
  for (; *args; args++)
    argv[argc++] = (char *)*args;
  argv[argc] = NULL;
  capture_t cap;
  cap_begin(&cap, STDERR_FILENO);
  int rc = sac_config_load_ext(k_prog, N_PROG, p, argc, argv, "prog", &action, src);
  *err = cap_end(&cap);
  return rc;
}

/* One file for every program: [learner] is sac-learner's, [replay] sac-replay's; each skips
 * the others' sections. A top-level key of another program is an error that says where it
 * goes; so is a typo inside the program's own section (the controls). */
Test(config, one_file_for_every_program) {
  const char *f = tmp_file("capacity = 5000\n"
                           "[learner]\nlr = 1e-3\nbatch_size = 64\n"
                           "[replay]\nmin_size = 500\nlr = 0.5\nnot_a_key_anywhere = 1\n"
                           "[actor]\nenvs_per_actor = 4\n");
  prog_t p;
  char *err;
  cr_assert_eq(load_prog("/usr/bin/sac-learner", &p, NULL, &err, ARGS("--config", f)), 0, "%s", err);
  cr_assert_eq(p.capacity, 5000);
  cr_assert_float_eq(p.lr, 1e-3, 1e-15, "[learner] is the learner's");
  cr_assert_eq(p.batch, 64);
  free(err);
  cr_assert_eq(load_prog("sac-replay", &p, NULL, &err, ARGS("--config", f)), SAC_ECONFIG);
  cr_assert_not_null(strstr(err, "unknown key 'not_a_key_anywhere'"), "[replay] is read by sac-replay:\n%s",
                     err);
  free(err);
  const char *g = tmp_file("[learner]\nbatch_sise = 3\n");
  cr_assert_eq(load_prog("sac-learner", &p, NULL, &err, ARGS("--config", g)), SAC_ECONFIG);
  cr_assert_not_null(strstr(err, "did you mean batch_size?"), "%s", err);
  free(err);
  const char *h = tmp_file("min_size = 3\n");
  cr_assert_eq(load_prog("sac-learner", &p, NULL, &err, ARGS("--config", h)), SAC_ECONFIG);
  cr_assert_not_null(strstr(err, "another sacfleet program"), "%s", err);
  free(err);
}

/* One environment for every program: another program's SAC_<KEY> (SAC_MIN_SIZE is the
 * shards') and the launchers' own variables are left alone; a variable of no program is
 * still an error (the control). */
Test(config, one_environment_for_every_program) {
  prog_t p;
  char *err;
  setenv("SAC_MIN_SIZE", "500", 1);
  setenv("SAC_ENVS_PER_ACTOR", "4", 1);
  setenv("SAC_IMAGE", "sacfleet:latest", 1);
  setenv("SAC_SLURM_ACTORS", "8", 1);
  setenv("SAC_ACTORS", "4", 1);
  setenv("SAC_LR", "1e-3", 1);
  cr_assert_eq(load_prog("sac-replay", &p, NULL, &err, NOARGS), 0, "%s", err);
  cr_assert_float_eq(p.lr, 1e-3, 1e-15);
  free(err);
  setenv("SAC_MIN_SIZ", "500", 1);
  cr_assert_eq(load_prog("sac-replay", &p, NULL, &err, NOARGS), SAC_ECONFIG);
  cr_assert_not_null(strstr(err, "SAC_MIN_SIZ: unknown key"), "%s", err);
  free(err);
}

/* sac_config_load_ext says where each value came from; a preset fills only what no other
 * source set: defaults < preset < file < environment < command line. */
Test(config, sources_and_presets) {
  prog_t p;
  unsigned char src[N_PROG];
  char *err;
  const char *f = tmp_file("capacity = 7000\n");
  setenv("SAC_EMBEDDED_SHARDS", "3", 1);
  cr_assert_eq(load_prog("sac-learner", &p, src, &err, ARGS("--config", f, "--batch_size", "32")), 0, "%s",
               err);
  free(err);
  cr_assert_eq(src[0], SAC_CFG_SRC_FILE);
  cr_assert_eq(src[1], SAC_CFG_SRC_DEFAULT);
  cr_assert_eq(src[2], SAC_CFG_SRC_CLI);
  cr_assert_eq(src[3], SAC_CFG_SRC_ENV);
  const char *preset = tmp_file("[learner]\nlr = 1e-3\nbatch_size = 512\ncapacity = 1\nembedded_shards = 9\n"
                                "[replay]\nmin_size = 5\n");
  capture_t cap;
  cap_begin(&cap, STDERR_FILENO);
  int rc = sac_config_apply_preset(k_prog, N_PROG, &p, preset, "learner", src);
  err = cap_end(&cap);
  cr_assert_eq(rc, 0, "%s", err);
  free(err);
  cr_assert_float_eq(p.lr, 1e-3, 1e-15, "the preset fills a default");
  cr_assert_eq(src[1], SAC_CFG_SRC_PRESET);
  cr_assert_eq(p.batch, 32, "a flag wins over the preset");
  cr_assert_eq(p.capacity, 7000, "a config file wins over the preset");
  cr_assert_eq(p.shards, 3, "a variable wins over the preset");
  cr_assert_eq(src[2], SAC_CFG_SRC_CLI);
  const char *bad = tmp_file("[learner]\nlr = 2\n");
  cr_assert_eq(load_prog("sac-learner", &p, src, &err, NOARGS), 0);
  free(err);
  cap_begin(&cap, STDERR_FILENO);
  rc = sac_config_apply_preset(k_prog, N_PROG, &p, bad, "learner", src);
  err = cap_end(&cap);
  cr_assert_eq(rc, SAC_ECONFIG, "a bad preset value is an error, naming the file:\n%s", err);
  cr_assert_not_null(strstr(err, bad), "%s", err);
  free(err);
}

/* The renamed options of this release, on tables like the programs': each old name sets its
 * successor with one warning; docker compose's variable names work as variables only. */
typedef struct {
  int64_t actor_id, learning_starts, capacity;
  int envs, inflight, shard_id, embedded_shards, threads, log_s;
  int64_t log_steps;
} renamed2_t;
static const sac_cfg_opt_t k_actor_like[] = {
    {"actor_id", SAC_CFG_INT64, offsetof(renamed2_t, actor_id), 0, "0", 0, 4095, "id"},
    {"envs_per_actor", SAC_CFG_INT, offsetof(renamed2_t, envs), 0, "1", 1, 4096, "envs"},
    {"inflight_batches", SAC_CFG_INT, offsetof(renamed2_t, inflight), 0, "16", 1, 64, "window"},
    {"learning_starts", SAC_CFG_INT64, offsetof(renamed2_t, learning_starts), 0, "1000", 0, 1e15, "random"},
};
static const sac_cfg_opt_t k_shard_like[] = {
    {"shard_id", SAC_CFG_INT, offsetof(renamed2_t, shard_id), 0, "0", 0, 4095, "id"},
    {"inflight_batches", SAC_CFG_INT, offsetof(renamed2_t, inflight), 0, "16", 1, 64, "credit"},
    {"capacity", SAC_CFG_INT64, offsetof(renamed2_t, capacity), 0, "1000000", 1024, 4294967294.0, "ring"},
};
static const sac_cfg_opt_t k_learner_like[] = {
    {"embedded_shards", SAC_CFG_INT, offsetof(renamed2_t, embedded_shards), 0, "2", 1, 64, "shards"},
    {"threads", SAC_CFG_INT, offsetof(renamed2_t, threads), 0, "0", 0, 1024, "threads"},
    {"log_interval_s", SAC_CFG_INT, offsetof(renamed2_t, log_s), 0, "10", 0, 86400, "seconds"},
    {"log_every_steps", SAC_CFG_INT64, offsetof(renamed2_t, log_steps), 0, "1000", 0, 1e15, "steps"},
};

static int load_table(const sac_cfg_opt_t *t, size_t n, renamed2_t *r, char **err, const char *const *args) {
  char *argv[16];
  int argc = 0, action;
  argv[argc++] = "prog";
  for (; *args; args++)
    argv[argc++] = (char *)*args;
  argv[argc] = NULL;
  memset(r, 0, sizeof *r);
  capture_t cap;
  cap_begin(&cap, STDERR_FILENO);
  int rc = sac_config_load(t, n, r, argc, argv, "x", &action);
  *err = cap_end(&cap);
  return rc;
}
#define LOAD(t, r, err, args) load_table(t, sizeof t / sizeof t[0], r, err, args)

Test(config, one_name_per_concept_old_names) {
  renamed2_t r;
  char *err;
  cr_assert_eq(LOAD(k_actor_like, &r, &err, ARGS("--num_envs", "4", "--window=8")), 0, "%s", err);
  cr_assert_eq(r.envs, 4);
  cr_assert_eq(r.inflight, 8);
  cr_assert_not_null(
      strstr(err, "'num_envs' is deprecated and goes in the next release; use 'envs_per_actor'"), "%s", err);
  cr_assert_not_null(strstr(err, "use 'inflight_batches'"), "%s", err);
  cr_assert_eq(count(err, "deprecated"), 2, "%s", err);
  free(err);
  cr_assert_eq(LOAD(k_shard_like, &r, &err, ARGS("--insert_credit", "5")), 0, "%s", err);
  cr_assert_eq(r.inflight, 5);
  cr_assert_eq(count(err, "deprecated"), 1, "%s", err);
  free(err);
  /* compose's names: variables only */
  setenv("SAC_REPLAY_CAPACITY", "4096", 1);
  cr_assert_eq(LOAD(k_shard_like, &r, &err, NOARGS), 0, "%s", err);
  cr_assert_eq(r.capacity, 4096);
  cr_assert_not_null(strstr(err, "SAC_REPLAY_CAPACITY: 'replay_capacity' is deprecated"), "%s", err);
  free(err);
  unsetenv("SAC_REPLAY_CAPACITY");
  cr_assert_eq(LOAD(k_shard_like, &r, &err, ARGS("--replay_capacity=4096")), SAC_ECONFIG,
               "compose's variable name is no option:\n%s", err);
  free(err);
  setenv("SAC_LEARNER_THREADS", "3", 1);
  setenv("SAC_LEARNER_LOG_INTERVAL_S", "7", 1);
  cr_assert_eq(LOAD(k_learner_like, &r, &err, NOARGS), 0, "%s", err);
  cr_assert_eq(r.threads, 3);
  cr_assert_eq(r.log_s, 7);
  cr_assert_eq(count(err, "deprecated"), 2, "%s", err);
  free(err);
  cr_assert_eq(LOAD(k_actor_like, &r, &err, NOARGS), 0, "the learner's variables are not the actor's:\n%s",
               err);
  cr_assert_eq(count(err, "deprecated"), 0, "%s", err);
  free(err);
  unsetenv("SAC_LEARNER_THREADS");
  unsetenv("SAC_LEARNER_LOG_INTERVAL_S");
  setenv("SAC_ACTOR_LEARNING_STARTS", "500", 1);
  cr_assert_eq(LOAD(k_actor_like, &r, &err, NOARGS), 0, "%s", err);
  cr_assert_eq(r.learning_starts, 500);
  free(err);
  unsetenv("SAC_ACTOR_LEARNING_STARTS");
}

/* sac-learner's log_interval meant steps (--mode local) or seconds: a value beyond the
 * seconds' range sets the steps and says so, in one warning, instead of failing. A value
 * valid for neither is an error (the control). */
Test(config, log_interval_beyond_one_unit) {
  renamed2_t r;
  char *err;
  cr_assert_eq(LOAD(k_learner_like, &r, &err, ARGS("--log_interval", "100000")), 0, "%s", err);
  cr_assert_eq(r.log_steps, 100000);
  cr_assert_eq(r.log_s, 10, "the seconds are left alone");
  cr_assert_eq(count(err, "deprecated"), 1, "%s", err);
  cr_assert_not_null(strstr(err, "'log_interval_s' is left alone"), "%s", err);
  cr_assert_null(strstr(err, "ERROR"), "%s", err);
  free(err);
  cr_assert_eq(LOAD(k_learner_like, &r, &err, ARGS("--log_interval", "-3")), SAC_ECONFIG);
  free(err);
}
