/* Tests for the small common modules: error messages (error.h), log lines (log.h), random
 * numbers (rng.h, philox.h), clocks (clock.h), MLP inference (mlp.h) and the stop on a
 * signal (sigstop.h: the exit code waits for the stop line). Config has its own
 * file (test_config.c).
 *
 * Statistical tests use fixed seeds, so they are deterministic; each tolerance is still
 * set at about 5 standard errors of the statistic, so a correct generator would pass for
 * (almost) any seed and a biased one fails. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "common/mlp.h"
#include "common/philox.h"
#include "common/rng.h"

/* ---- error.h ------------------------------------------------------------------------- */

Test(error, every_code_has_a_distinct_message) {
#define CODE(name, val, msg) SAC_E##name,
  const int codes[] = {SAC_ERRNO_MAP(CODE)};
#undef CODE
  const size_t n = sizeof codes / sizeof codes[0];
  cr_assert_geq(n, 19);
  for (size_t i = 0; i < n; i++) {
    cr_assert_lt(codes[i], 0, "error codes are negative");
    const char *m = sac_strerror(codes[i]);
    cr_assert_not_null(m);
    cr_assert_gt(strlen(m), 0);
    cr_assert_str_neq(m, "unknown error", "code %d has no message", codes[i]);
    cr_assert_str_neq(m, sac_strerror(0));
    for (size_t j = 0; j < i; j++) {
      cr_assert_neq(codes[i], codes[j], "duplicate code value");
      cr_assert_str_neq(m, sac_strerror(codes[j]), "codes %d and %d share a message", codes[i], codes[j]);
    }
  }
  cr_assert_str_eq(sac_strerror(SAC_ECONFIG), "configuration error");
}

Test(error, success_and_unknown_codes) {
  cr_assert_not_null(sac_strerror(0));
  cr_assert_str_eq(sac_strerror(SAC_OK), "success");
  const int unknown[] = {1, 42, -20, -1000, INT32_MIN, INT32_MAX};
  for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++)
    cr_assert_str_eq(sac_strerror(unknown[i]), "unknown error", "code %d", unknown[i]);
}

/* ---- log.h --------------------------------------------------------------------------- */

/* Captures everything written to stderr (log.c uses write(2), so dup2 catches it). */
typedef struct {
  int saved, fd;
  char path[32];
} capture_t;

static void cap_begin(capture_t *c) {
  fflush(stderr);
  strcpy(c->path, "/tmp/sac_log_XXXXXX");
  c->fd = mkstemp(c->path);
  cr_assert_geq(c->fd, 0);
  c->saved = dup(STDERR_FILENO);
  cr_assert_geq(c->saved, 0);
  cr_assert_geq(dup2(c->fd, STDERR_FILENO), 0);
}

static char *cap_end(capture_t *c) {
  fflush(stderr);
  dup2(c->saved, STDERR_FILENO);
  close(c->saved);
  off_t size = lseek(c->fd, 0, SEEK_END);
  cr_assert_geq(size, 0);
  char *s = malloc((size_t)size + 1);
  cr_assert_not_null(s);
  ssize_t r = pread(c->fd, s, (size_t)size, 0);
  cr_assert_eq(r, size);
  s[size] = '\0';
  close(c->fd);
  unlink(c->path);
  return s;
}

Test(log, parse_level) {
  const char *names[] = {"error", "warn", "info", "debug"};
  const char *upper[] = {"ERROR", "Warn", "INFO", "DeBuG"};
  for (int i = 0; i < 4; i++) {
    sac_log_level_t l = (sac_log_level_t)-1;
    cr_assert_eq(sac_log_parse_level(names[i], &l), 0);
    cr_assert_eq((int)l, i);
    cr_assert_eq(sac_log_parse_level(upper[i], &l), 0, "level names are case-insensitive");
    cr_assert_eq((int)l, i);
  }
  sac_log_level_t l = SAC_LOG_WARN;
  cr_assert_eq(sac_log_parse_level("verbose", &l), SAC_EINVAL);
  cr_assert_eq(sac_log_parse_level("", &l), SAC_EINVAL);
  cr_assert_eq(sac_log_parse_level("errors", &l), SAC_EINVAL);
  cr_assert_eq(l, SAC_LOG_WARN, "a failed parse leaves the output alone");
}

Test(log, level_from_environment) {
  /* Each Criterion test is a fresh process, so the level has not been read yet. */
  setenv("SAC_LOG_LEVEL", "debug", 1);
  cr_assert_eq(sac_log_get_level(), SAC_LOG_DEBUG);
  sac_log_set_level(SAC_LOG_ERROR);
  cr_assert_eq(sac_log_get_level(), SAC_LOG_ERROR, "set_level overrides the environment");
  unsetenv("SAC_LOG_LEVEL");
}

Test(log, level_filters_and_text_format) {
  sac_log_set_json(0);
  sac_log_set_level(SAC_LOG_WARN);
  capture_t c;
  cap_begin(&c);
  SAC_INFO("mod", "hidden %d", 1);
  SAC_DEBUG("mod", "hidden %d", 2);
  SAC_WARN("replay", "shown %d", 3);
  char *out = cap_end(&c);
  cr_assert_null(strstr(out, "hidden"), "below-level lines are dropped:\n%s", out);
  /* "2026-12-02T09:30:00.123Z WARN  replay: shown 3\n" */
  int y, mo, d, h, mi, s, ms;
  char rest[128];
  cr_assert_eq(sscanf(out, "%4d-%2d-%2dT%2d:%2d:%2d.%3dZ %127[^\n]", &y, &mo, &d, &h, &mi, &s, &ms, rest), 8,
               "bad text line: %s", out);
  cr_assert_geq(y, 2020);
  cr_assert_str_eq(rest, "WARN  replay: shown 3");
  cr_assert_eq(strchr(out, '\n') - out + 1, (long)strlen(out), "exactly one line");
  free(out);
}

/* Scans one JSON string starting at *p (at the opening quote); decodes into out (may be
 * NULL). Returns 0 on a well-formed string: no raw control characters, only the escapes
 * JSON allows. */
static int json_string(const char **p, char *out, size_t cap) {
  const char *s = *p;
  size_t n = 0;
  if (*s++ != '"')
    return -1;
  for (;;) {
    unsigned char c = (unsigned char)*s++;
    if (c == '\0' || c < 0x20)
      return -1;
    if (c == '"')
      break;
    if (c == '\\') {
      c = (unsigned char)*s++;
      switch (c) {
      case '"':
      case '\\':
      case '/':
        break;
      case 'b':
        c = '\b';
        break;
      case 'f':
        c = '\f';
        break;
      case 'n':
        c = '\n';
        break;
      case 'r':
        c = '\r';
        break;
      case 't':
        c = '\t';
        break;
      case 'u': {
        unsigned v;
        char hex[5] = {0};
        memcpy(hex, s, 4);
        if (strspn(hex, "0123456789abcdefABCDEF") != 4 || sscanf(hex, "%x", &v) != 1)
          return -1;
        s += 4;
        c = v < 0x80 ? (unsigned char)v : '?';
        break;
      }
      default:
        return -1;
      }
    }
    if (out && n + 1 < cap)
      out[n++] = (char)c;
  }
  if (out)
    out[n] = '\0';
  *p = s;
  return 0;
}

/* Checks that line is one flat JSON object of string values ending in "}\n", and
 * decodes the value of `field` into out. */
static int json_line(const char *line, const char *field, char *out, size_t cap) {
  const char *p = line;
  int found = 0;
  if (*p++ != '{')
    return -1;
  for (;;) {
    char key[64];
    if (json_string(&p, key, sizeof key) != 0 || *p++ != ':')
      return -1;
    int mine = strcmp(key, field) == 0;
    if (json_string(&p, mine ? out : NULL, cap) != 0)
      return -1;
    found |= mine;
    if (*p == ',') {
      p++;
      continue;
    }
    if (*p++ != '}')
      return -1;
    break;
  }
  return (strcmp(p, "\n") == 0 && found) ? 0 : -1;
}

Test(log, json_mode_escapes) {
  sac_log_set_level(SAC_LOG_INFO);
  sac_log_set_json(1);
  const char *msg = "say \"hi\"\nback\\slash\ttab \x01 ctl / end";
  capture_t c;
  cap_begin(&c);
  SAC_ERROR("mo\"d", "%s", msg);
  char *out = cap_end(&c);
  sac_log_set_json(0);
  char got[256], mod[64], level[16], ts[64];
  cr_assert_eq(json_line(out, "msg", got, sizeof got), 0, "not a JSON line: %s", out);
  cr_assert_str_eq(got, msg, "msg decodes back to the original text");
  cr_assert_eq(json_line(out, "module", mod, sizeof mod), 0);
  cr_assert_str_eq(mod, "mo\"d");
  cr_assert_eq(json_line(out, "level", level, sizeof level), 0);
  cr_assert_str_eq(level, "ERROR");
  cr_assert_eq(json_line(out, "ts", ts, sizeof ts), 0);
  cr_assert_eq(strlen(ts), 24, "ts is ISO 8601 with milliseconds: %s", ts);
  cr_assert_not_null(strstr(out, "\\\"hi\\\""), "quotes are escaped: %s", out);
  cr_assert_eq(strchr(out, '\n') - out + 1, (long)strlen(out), "the newline in msg is escaped");
  free(out);
}

/* Logs one line in JSON mode and returns it (malloc'd). */
static char *json_log_line(const char *module, const char *msg) {
  sac_log_set_level(SAC_LOG_INFO);
  sac_log_set_json(1);
  capture_t c;
  cap_begin(&c);
  SAC_INFO(module, "%s", msg);
  char *out = cap_end(&c);
  sac_log_set_json(0);
  return out;
}

Test(log, json_long_msg_stays_valid) {
  /* A message that escapes to more than the line buffer is cut, but the line must still
   * be one complete JSON object, or a log shipper drops it. */
  char *big = malloc(3000);
  cr_assert_not_null(big);
  memset(big, '\n', 2999); /* each escapes to 6 bytes */
  big[2999] = '\0';
  char *out = json_log_line("x", big);
  static char dec[8192];
  cr_assert_eq(json_line(out, "msg", dec, sizeof dec), 0, "long msg broke the JSON line (%zu bytes)",
               strlen(out));
  cr_assert_lt(strlen(out), 4096);
  cr_assert_gt(strlen(dec), 100, "a cut message keeps its start");
  free(out);
  free(big);
}

Test(log, json_long_module_stays_valid) {
  /* The cut must also leave room for the fields after the module (this once wrote past
   * the line buffer). */
  char *mod = malloc(6000);
  cr_assert_not_null(mod);
  memset(mod, 'm', 5999);
  mod[5999] = '\0';
  char *out = json_log_line(mod, "short");
  static char dec[8192];
  cr_assert_eq(json_line(out, "level", dec, sizeof dec), 0, "long module broke the JSON line");
  cr_assert_str_eq(dec, "INFO");
  cr_assert_lt(strlen(out), 4096);
  free(out);
  free(mod);
}

Test(log, text_long_line_is_one_line) {
  sac_log_set_json(0);
  sac_log_set_level(SAC_LOG_INFO);
  char *big = malloc(5000);
  cr_assert_not_null(big);
  memset(big, 'a', 4999);
  big[4999] = '\0';
  capture_t c;
  cap_begin(&c);
  SAC_INFO("x", "%s", big);
  char *out = cap_end(&c);
  size_t n = strlen(out);
  cr_assert_lt(n, 4096);
  cr_assert_eq(out[n - 1], '\n');
  cr_assert_eq(strchr(out, '\n'), out + n - 1);
  free(out);
  free(big);
}

/* ---- philox.h and rng.h -------------------------------------------------------------- */

Test(rng, philox_known_answers) {
  /* Random123's tests/kat_vectors, the three "philox4x32 10" lines:
   * CTR (4 words), KEY (2 words) -> expected output (4 words). */
  static const struct {
    uint32_t ctr[4], key[2], out[4];
  } kat[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (size_t t = 0; t < sizeof kat / sizeof kat[0]; t++) {
    uint32_t out[4];
    sac_philox4x32(kat[t].ctr, kat[t].key, out);
    for (int i = 0; i < 4; i++)
      cr_assert_eq(out[i], kat[t].out[i], "vector %zu word %d: %08x != %08x", t, i, out[i], kat[t].out[i]);
  }
}

Test(rng, unit_conversion_never_zero) {
  cr_assert_gt(sac_u32_to_unit(0), 0.0f);
  cr_assert_eq(sac_u32_to_unit(0xffffffffu), 1.0f);
  cr_assert_lt(sac_u32_to_unit(0x7fffffffu), 0.5f + 1e-6f);
}

Test(rng, same_seed_and_stream_reproduce) {
  sac_rng_t a, b;
  sac_rng_init(&a, 1234, SAC_STREAM_ACTOR(7));
  sac_rng_init(&b, 1234, SAC_STREAM_ACTOR(7));
  for (int i = 0; i < 1000; i++)
    cr_assert_eq(sac_rng_u32(&a), sac_rng_u32(&b));
  for (int i = 0; i < 1001; i++) /* odd count: the normal spare must be reproduced too */
    cr_assert_eq(sac_rng_normal(&a), sac_rng_normal(&b));
  /* Re-initialising restarts the sequence, including a pending normal spare. */
  sac_rng_init(&a, 99, 5);
  float first = sac_rng_normal(&a);
  sac_rng_init(&a, 99, 5);
  cr_assert_eq(sac_rng_normal(&a), first);
  uint32_t key[2];
  sac_rng_key(99, 5, key);
  cr_assert_eq(a.key[0], key[0]);
  cr_assert_eq(a.key[1], key[1]);
}

static int same_positions(uint64_t seed_a, uint64_t stream_a, uint64_t seed_b, uint64_t stream_b) {
  sac_rng_t a, b;
  sac_rng_init(&a, seed_a, stream_a);
  sac_rng_init(&b, seed_b, stream_b);
  int same = 0;
  for (int i = 0; i < 4096; i++)
    same += sac_rng_u32(&a) == sac_rng_u32(&b);
  return same;
}

Test(rng, streams_and_seeds_differ) {
  /* Independent 32-bit words agree with probability 2^-32 per position: 4096 positions
   * give ~1e-6 expected matches, so even 2 would mean correlated streams. */
  const uint64_t streams[] = {
      SAC_STREAM_LEARNER,   SAC_STREAM_EVAL,      SAC_STREAM_ACTOR(0),  SAC_STREAM_ACTOR(1),
      SAC_STREAM_ENV(0, 0), SAC_STREAM_ENV(0, 1), SAC_STREAM_ENV(1, 0), 0};
  const size_t n = sizeof streams / sizeof streams[0];
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < i; j++)
      cr_assert_lt(same_positions(7, streams[i], 7, streams[j]), 2, "streams %zu and %zu", i, j);
  cr_assert_lt(same_positions(1, 0, 2, 0), 2, "seeds 1 and 2");
  cr_assert_lt(same_positions(0, 1, 1, 0), 2, "(seed, stream) is not symmetric");
}

Test(rng, uniform_moments) {
  /* N = 1e6 uniforms: standard error of the mean sqrt(1/12/N) = 2.9e-4, of the variance
   * sqrt((1/80 - 1/144)/N) = 7.5e-5; tolerances are 5 standard errors. */
  sac_rng_t r;
  sac_rng_init(&r, 42, SAC_STREAM_LEARNER);
  const int N = 1000000;
  double sum = 0, sum2 = 0, lo = 1, hi = 0;
  for (int i = 0; i < N; i++) {
    double u = sac_rng_uniform(&r);
    cr_assert(u >= 0.0 && u < 1.0, "uniform out of [0, 1): %g", u);
    sum += u;
    sum2 += u * u;
    lo = fmin(lo, u);
    hi = fmax(hi, u);
  }
  double mean = sum / N, var = sum2 / N - mean * mean;
  cr_assert_lt(fabs(mean - 0.5), 1.5e-3, "mean %g", mean);
  cr_assert_lt(fabs(var - 1.0 / 12.0), 4e-4, "variance %g", var);
  cr_assert_lt(lo, 1e-4);
  cr_assert_gt(hi, 1 - 1e-4);
  for (int i = 0; i < 10000; i++) {
    double u = sac_rng_uniform_range(&r, -2.0, 3.0);
    cr_assert(u >= -2.0 && u < 3.0, "uniform_range out of [-2, 3): %g", u);
  }
}

Test(rng, normal_moments) {
  /* N = 1e6 normals: standard errors 1e-3 (mean), sqrt(2/N) = 1.4e-3 (variance) and
   * sqrt((105 - 9)/N) = 9.8e-3 (fourth moment, 3 for a normal); tolerances ~5 of them.
   * The fourth moment catches a wrong Box-Muller radius that mean and variance miss. */
  sac_rng_t r;
  sac_rng_init(&r, 2024, SAC_STREAM_EVAL);
  const int N = 1000000;
  double s1 = 0, s2 = 0, s4 = 0;
  for (int i = 0; i < N; i++) {
    double z = sac_rng_normal(&r);
    cr_assert(isfinite(z));
    s1 += z;
    s2 += z * z;
    s4 += z * z * z * z;
  }
  double mean = s1 / N, var = s2 / N - mean * mean, m4 = s4 / N;
  cr_assert_lt(fabs(mean), 5e-3, "mean %g", mean);
  cr_assert_lt(fabs(var - 1.0), 7e-3, "variance %g", var);
  cr_assert_lt(fabs(m4 - 3.0), 0.05, "fourth moment %g", m4);
}

Test(rng, philox_normal2_moments) {
  /* The backends' noise: 2e5 pairs = 4e5 normals; standard errors 1.6e-3 (mean) and
   * 2.2e-3 (variance); tolerances ~5 of them. Also pure: same inputs, same outputs. */
  uint32_t key[2];
  sac_rng_key(3, SAC_STREAM_LEARNER, key);
  const int N = 200000;
  double s1 = 0, s2 = 0, cross = 0;
  for (int i = 0; i < N; i++) {
    float z0, z1;
    sac_philox_normal2(key, (uint32_t)i, 17, 4, &z0, &z1);
    cr_assert(isfinite(z0) && isfinite(z1));
    s1 += z0 + z1;
    s2 += (double)z0 * z0 + (double)z1 * z1;
    cross += (double)z0 * z1;
  }
  double mean = s1 / (2.0 * N), var = s2 / (2.0 * N) - mean * mean;
  cr_assert_lt(fabs(mean), 8e-3, "mean %g", mean);
  cr_assert_lt(fabs(var - 1.0), 1.1e-2, "variance %g", var);
  cr_assert_lt(fabs(cross / N), 1.1e-2, "z0 and z1 correlated: %g", cross / N);
  float a0, a1, b0, b1, c0, c1;
  sac_philox_normal2(key, 5, 17, 4, &a0, &a1);
  sac_philox_normal2(key, 5, 17, 4, &b0, &b1);
  sac_philox_normal2(key, 5, 17, 5, &c0, &c1);
  cr_assert(a0 == b0 && a1 == b1);
  cr_assert(a0 != c0, "the tag selects a different block");
}

Test(rng, below_is_unbiased) {
  /* Chi-square over 10 bins with 1e5 draws: 9 degrees of freedom, the 0.1% critical value
   * is 27.88; a fixed seed makes the outcome deterministic. */
  sac_rng_t r;
  sac_rng_init(&r, 5, 6);
  const int N = 100000, K = 10;
  int count[10] = {0};
  for (int i = 0; i < N; i++) {
    uint64_t v = sac_rng_below(&r, K);
    cr_assert_lt(v, (uint64_t)K);
    count[v]++;
  }
  double chi2 = 0, e = (double)N / K;
  for (int k = 0; k < K; k++)
    chi2 += (count[k] - e) * (count[k] - e) / e;
  cr_assert_lt(chi2, 27.88, "chi-square %g over 9 dof", chi2);

  /* Modulo bias is largest for n near 2^64: with n = 3 * 2^62, x % n would put 1/2 of the
   * mass below 2^62 instead of 1/3. 1e5 draws: standard error 1.5e-3, tolerance 0.01. */
  const uint64_t n = 3ull << 62;
  int low = 0;
  for (int i = 0; i < N; i++) {
    uint64_t v = sac_rng_below(&r, n);
    cr_assert_lt(v, n);
    low += v < (1ull << 62);
  }
  cr_assert_lt(fabs((double)low / N - 1.0 / 3.0), 0.01, "fraction below 2^62: %g", (double)low / N);

  for (int i = 0; i < 100; i++)
    cr_assert_eq(sac_rng_below(&r, 1), 0);
  uint64_t maxv = 0;
  for (int i = 0; i < 1000; i++) {
    uint64_t v = sac_rng_below(&r, UINT64_MAX);
    cr_assert_lt(v, UINT64_MAX);
    maxv = v > maxv ? v : maxv;
  }
  cr_assert_gt(maxv, UINT64_MAX / 2);
}

Test(rng, below32_is_unbiased) {
  /* As below_is_unbiased, for the 32-bit draw. The rejection step is what tells it from a
   * plain (x * n) >> 32: for n = 3 * 2^30 that shift maps two of every four x to the
   * multiples of 3 (v = floor(3x / 4)), half the mass instead of a third (1e5 draws:
   * standard error 1.5e-3, tolerance 0.01), so a rejection step that stopped working
   * fails here. */
  sac_rng_t r;
  sac_rng_init(&r, 7, 8);
  const int N = 100000, K = 10;
  int count[10] = {0};
  for (int i = 0; i < N; i++) {
    uint32_t v = sac_rng_below32(&r, K);
    cr_assert_lt(v, (uint32_t)K);
    count[v]++;
  }
  double chi2 = 0, e = (double)N / K;
  for (int k = 0; k < K; k++)
    chi2 += (count[k] - e) * (count[k] - e) / e;
  cr_assert_lt(chi2, 27.88, "chi-square %g over 9 dof", chi2);
  const uint32_t n = 3u << 30;
  int low = 0;
  for (int i = 0; i < N; i++) {
    uint32_t v = sac_rng_below32(&r, n);
    cr_assert_lt(v, n);
    low += v % 3 == 0;
  }
  cr_assert_lt(fabs((double)low / N - 1.0 / 3.0), 0.01, "fraction of multiples of 3: %g", (double)low / N);
  for (int i = 0; i < 100; i++)
    cr_assert_eq(sac_rng_below32(&r, 1), 0);
  uint32_t maxv = 0;
  for (int i = 0; i < 1000; i++) {
    uint32_t v = sac_rng_below32(&r, UINT32_MAX);
    cr_assert_lt(v, UINT32_MAX);
    maxv = v > maxv ? v : maxv;
  }
  cr_assert_gt(maxv, UINT32_MAX / 2);
}

/* ---- clock.h ------------------------------------------------------------------------- */

Test(clock, monotonic_and_sleep) {
  uint64_t prev = sac_clock_ns();
  for (int i = 0; i < 100000; i++) {
    uint64_t t = sac_clock_ns();
    cr_assert_geq(t, prev, "monotonic clock went backwards");
    prev = t;
  }
  const uint64_t want = 20 * 1000 * 1000; /* 20 ms */
  uint64_t t0 = sac_clock_ns();
  sac_sleep_ns(want);
  uint64_t t1 = sac_clock_ns();
  cr_assert_geq(t1 - t0, want, "slept %llu ns of %llu", (unsigned long long)(t1 - t0),
                (unsigned long long)want);
  /* sac_clock_s is the same clock in seconds: between two reads of sac_clock_ns, however
   * long the process was descheduled between them (no time bound: a busy machine cannot
   * fail it), give or take 1 us of double rounding */
  uint64_t n0 = sac_clock_ns();
  double s = sac_clock_s();
  uint64_t n1 = sac_clock_ns();
  cr_assert(s >= (double)n0 * 1e-9 - 1e-6 && s <= (double)n1 * 1e-9 + 1e-6,
            "sac_clock_s %.9f is not between the sac_clock_ns reads around it (%.9f, %.9f)", s,
            (double)n0 * 1e-9, (double)n1 * 1e-9);
  sac_sleep_ns(0);
  cr_assert_gt(sac_wallclock_ns(), 1577836800ull * 1000000000ull, "wall clock before 2020");
}

/* ---- mlp.h --------------------------------------------------------------------------- */

Test(mlp, desc_validation) {
  sac_mlp_desc_t d;
  cr_assert_eq(sac_mlp_desc_init(&d, 0, 8, 2, 1, SAC_ACT_RELU, 1), SAC_EINVAL);
  cr_assert_eq(sac_mlp_desc_init(&d, 3, 0, 2, 1, SAC_ACT_RELU, 1), SAC_EINVAL);
  cr_assert_eq(sac_mlp_desc_init(&d, 3, 8, 2, 0, SAC_ACT_RELU, 1), SAC_EINVAL);
  cr_assert_eq(sac_mlp_desc_init(&d, 3, 8, -1, 1, SAC_ACT_RELU, 1), SAC_EINVAL);
  cr_assert_eq(sac_mlp_desc_init(&d, 3, 8, SAC_MLP_MAX_LAYERS, 1, SAC_ACT_RELU, 1), SAC_EINVAL);
  cr_assert_eq(sac_mlp_desc_init(&d, 3, 8, 2, 1, SAC_ACT_RELU, 0), SAC_EINVAL);
  cr_assert_eq(sac_mlp_desc_init(&d, 3, 8, SAC_MLP_MAX_LAYERS - 1, 1, SAC_ACT_RELU, 1), 0);
  cr_assert_eq(d.n_layers, SAC_MLP_MAX_LAYERS);
  cr_assert_eq(sac_mlp_desc_init(&d, 3, 8, 0, 2, SAC_ACT_NONE, 1), 0, "depth 0 is one linear layer");
  cr_assert_eq(d.n_layers, 1);
  cr_assert_eq(sac_mlp_param_count(&d), 3 * 2 + 2);
}

Test(mlp, ensemble_layout) {
  /* K = 2, 3 -> 4 -> 4 -> 1: per layer K weight matrices then K bias vectors. */
  sac_mlp_desc_t d;
  cr_assert_eq(sac_mlp_desc_init(&d, 3, 4, 2, 1, SAC_ACT_RELU, 2), 0);
  cr_assert_eq(d.n_layers, 3);
  cr_assert_eq(sac_mlp_param_count(&d), 2 * (12 + 4) + 2 * (16 + 4) + 2 * (4 + 1));
  cr_assert_eq(sac_mlp_weight_offset(&d, 0), 0);
  cr_assert_eq(sac_mlp_bias_offset(&d, 0), 24);
  cr_assert_eq(sac_mlp_weight_offset(&d, 1), 32);
  cr_assert_eq(sac_mlp_bias_offset(&d, 1), 64);
  cr_assert_eq(sac_mlp_weight_offset(&d, 2), 72);
  cr_assert_eq(sac_mlp_bias_offset(&d, 2), 80);
  cr_assert_eq(sac_mlp_bias_offset(&d, 2) + 2 * 1, sac_mlp_param_count(&d), "the last bias ends the buffer");
  cr_assert_eq(sac_mlp_max_width(&d), 4);

  /* The policy of a Pendulum-sized SAC: 3 -> 256 -> 256 -> 2. */
  cr_assert_eq(sac_mlp_desc_init(&d, 3, 256, 2, 2, SAC_ACT_RELU, 1), 0);
  cr_assert_eq(sac_mlp_param_count(&d), (3 * 256 + 256) + (256 * 256 + 256) + (256 * 2 + 2));
  cr_assert_eq(sac_mlp_max_width(&d), 256);
}

/* Double-precision forward of member `k` of the ensemble, written from the layout in
 * mlp.h rather than from mlp.c. */
static void ref_forward(const sac_mlp_desc_t *d, const float *p, int k, const float *x, int batch, int ldx,
                        double *y) {
  double a[64], b[64];
  for (int r = 0; r < batch; r++) {
    for (int i = 0; i < d->sizes[0]; i++)
      a[i] = x[(size_t)r * ldx + i];
    for (int l = 0; l < d->n_layers; l++) {
      int ni = d->sizes[l], no = d->sizes[l + 1];
      const float *W = p + sac_mlp_weight_offset(d, l) + (size_t)k * ni * no;
      const float *bias = p + sac_mlp_bias_offset(d, l) + (size_t)k * no;
      for (int j = 0; j < no; j++) {
        double s = bias[j];
        for (int i = 0; i < ni; i++)
          s += a[i] * (double)W[(size_t)i * no + j];
        if (l < d->n_layers - 1)
          s = d->hidden_act == SAC_ACT_RELU ? (s > 0 ? s : 0) : d->hidden_act == SAC_ACT_TANH ? tanh(s) : s;
        b[j] = s;
      }
      memcpy(a, b, sizeof(double) * (size_t)no);
    }
    for (int j = 0; j < d->sizes[d->n_layers]; j++)
      y[(size_t)r * d->sizes[d->n_layers] + j] = a[j];
  }
}

Test(mlp, forward_matches_double_reference) {
  /* Tolerance: each output is a chain of three fp32 dot products of at most 32 terms. The
   * rounding error of one is about sqrt(32) * 2^-24 ~ 3e-7 relative to the sum of |terms|,
   * and three layers compound to ~1e-6, so 1e-5 relative (per tensor, as ggml's backend
   * tests measure it) leaves a 10x margin; a wrong offset, a transposed W or a missing
   * bias gives O(1) errors. */
  const sac_act_t acts[] = {SAC_ACT_RELU, SAC_ACT_TANH, SAC_ACT_NONE};
  const int ensembles[] = {1, 2};
  enum { IN = 5, HID = 32, OUT = 3, B = 9, LDX = 8, LDY = 6 };
  for (size_t ai = 0; ai < 3; ai++)
    for (size_t ei = 0; ei < 2; ei++) {
      sac_mlp_desc_t d;
      cr_assert_eq(sac_mlp_desc_init(&d, IN, HID, 2, OUT, acts[ai], ensembles[ei]), 0);
      size_t np = sac_mlp_param_count(&d);
      float *p = malloc(np * sizeof *p);
      float *scratch = malloc(2 * B * (size_t)sac_mlp_max_width(&d) * sizeof *scratch);
      cr_assert(p && scratch);
      sac_rng_t r;
      sac_rng_init(&r, 11 + ai, ei);
      sac_mlp_init_params(&d, p, &r);
      float x[B * LDX], y[B * LDY];
      for (int i = 0; i < B * LDX; i++)
        x[i] = (float)sac_rng_uniform_range(&r, -2, 2);
      for (int i = 0; i < B * LDY; i++)
        y[i] = -777.0f;
      double ref[B * OUT];
      sac_mlp_forward(&d, p, x, B, LDX, y, LDY, scratch);
      ref_forward(&d, p, 0, x, B, LDX, ref);
      double num = 0, den = 0;
      for (int rr = 0; rr < B; rr++) {
        for (int j = 0; j < OUT; j++) {
          double e = y[rr * LDY + j] - ref[rr * OUT + j];
          num += e * e;
          den += ref[rr * OUT + j] * ref[rr * OUT + j];
        }
        for (int j = OUT; j < LDY; j++)
          cr_assert_eq(y[rr * LDY + j], -777.0f, "forward wrote past the row's outputs");
      }
      cr_assert_gt(den, 0);
      double rel = sqrt(num / den);
      cr_assert_lt(rel, 1e-5, "act %d K %d: relative error %g", (int)acts[ai], ensembles[ei], rel);
      if (ensembles[ei] == 2) {
        /* Member 1 has other weights, so a forward that read it would be caught above. */
        double ref1[B * OUT];
        ref_forward(&d, p, 1, x, B, LDX, ref1);
        double diff = 0;
        for (int i = 0; i < B * OUT; i++)
          diff += fabs(ref1[i] - ref[i]);
        cr_assert_gt(diff, 1e-3);
      }
      free(p);
      free(scratch);
    }
}

Test(mlp, init_is_pytorch_default) {
  /* nn.Linear: W and b ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = the layer's input
   * size. Layers here have fan_in 4, 64, 64 (bounds 0.5, 0.125, 0.125), so using fan_out
   * (64, 64, 2) would be caught. Mean |w| of U(-b, b) is b/2; with >= 128 samples its
   * standard error is <= 0.026 b, tolerance 0.1 b. */
  sac_mlp_desc_t d;
  cr_assert_eq(sac_mlp_desc_init(&d, 4, 64, 2, 2, SAC_ACT_RELU, 2), 0);
  size_t np = sac_mlp_param_count(&d);
  float *p = malloc(np * sizeof *p);
  cr_assert_not_null(p);
  for (size_t i = 0; i < np; i++)
    p[i] = NAN;
  sac_rng_t r;
  sac_rng_init(&r, 1, 1);
  sac_mlp_init_params(&d, p, &r);
  for (int l = 0; l < d.n_layers; l++) {
    double bound = 1.0 / sqrt((double)d.sizes[l]);
    size_t w = sac_mlp_weight_offset(&d, l), b = sac_mlp_bias_offset(&d, l);
    size_t nw = 2 * (size_t)d.sizes[l] * d.sizes[l + 1], nb = 2 * (size_t)d.sizes[l + 1];
    double sum_abs = 0, max_abs = 0;
    for (size_t i = 0; i < nw + nb; i++) {
      float v = p[w + i]; /* biases follow the weights */
      cr_assert(isfinite(v), "layer %d param %zu not written", l, i);
      cr_assert_leq(fabs(v), bound, "layer %d: |%g| > %g", l, v, bound);
      sum_abs += fabs(v);
      max_abs = fmax(max_abs, fabs(v));
    }
    cr_assert_eq(w + nw, b);
    cr_assert_gt(max_abs, 0.9 * bound, "layer %d does not fill its range", l);
    cr_assert_lt(fabs(sum_abs / (double)(nw + nb) / bound - 0.5), 0.1, "layer %d", l);
  }
  free(p);
}

/* A policy net whose last layer is zero except its bias, so (mu, log_std) are exactly the
 * bias and the action distribution is known. */
static void constant_head(const sac_mlp_desc_t *d, float *p, const float *bias) {
  int l = d->n_layers - 1, no = d->sizes[l + 1];
  memset(p + sac_mlp_weight_offset(d, l), 0, sizeof(float) * (size_t)d->sizes[l] * no);
  memcpy(p + sac_mlp_bias_offset(d, l), bias, sizeof(float) * (size_t)no);
}

Test(mlp, policy_deterministic_is_tanh_mu) {
  enum { A = 2, B = 6 };
  sac_mlp_desc_t d;
  cr_assert_eq(sac_mlp_desc_init(&d, 3, 16, 2, 2 * A, SAC_ACT_RELU, 1), 0);
  float *p = malloc(sac_mlp_param_count(&d) * sizeof *p);
  /* sac_policy_act needs batch * 2A for the head plus the forward's 2 * batch * width. */
  size_t ns = (size_t)B * 2 * A + 2 * (size_t)B * sac_mlp_max_width(&d);
  float *scratch = malloc(ns * sizeof *scratch), *scratch2 = malloc(ns * sizeof *scratch2);
  cr_assert(p && scratch && scratch2);
  sac_rng_t r;
  sac_rng_init(&r, 8, 8);
  sac_mlp_init_params(&d, p, &r);
  float obs[B * 3], head[B * 2 * A], act[B * A];
  for (int i = 0; i < B * 3; i++)
    obs[i] = (float)sac_rng_uniform_range(&r, -3, 3);
  sac_mlp_forward(&d, p, obs, B, 3, head, 2 * A, scratch2);
  sac_policy_cfg_t pc = {-20.0f, 2.0f};
  sac_rng_t before = r;
  sac_policy_act(&d, p, &pc, obs, B, 1, &r, act, scratch);
  for (int b = 0; b < B; b++)
    for (int i = 0; i < A; i++)
      cr_assert_float_eq(act[b * A + i], tanhf(head[b * 2 * A + i]), 1e-7, "row %d dim %d", b, i);
  cr_assert(before.counter == r.counter && before.nbuf == r.nbuf && before.has_spare == r.has_spare,
            "deterministic actions draw no noise");
  free(p);
  free(scratch);
  free(scratch2);
}

Test(mlp, policy_stochastic) {
  enum { A = 3, B = 20000 };
  sac_mlp_desc_t d;
  cr_assert_eq(sac_mlp_desc_init(&d, 2, 8, 1, 2 * A, SAC_ACT_TANH, 1), 0);
  float *p = malloc(sac_mlp_param_count(&d) * sizeof *p);
  size_t ns = (size_t)B * 2 * A + 2 * (size_t)B * sac_mlp_max_width(&d);
  float *scratch = malloc(ns * sizeof *scratch);
  float *obs = malloc((size_t)B * 2 * sizeof *obs), *act = malloc((size_t)B * A * sizeof *act);
  float *act2 = malloc((size_t)B * A * sizeof *act2);
  cr_assert(p && scratch && obs && act && act2);
  sac_rng_t r;
  sac_rng_init(&r, 21, 0);
  sac_mlp_init_params(&d, p, &r);
  for (int i = 0; i < B * 2; i++)
    obs[i] = (float)sac_rng_uniform_range(&r, -1, 1);
  /* mu = (0.3, -0.2, 0.1); log_std = (log 0.5, 3 -> clamped to max 0, -20 -> clamped to
   * min -5): std (0.5, 1, e^-5). */
  const float bias[2 * A] = {0.3f, -0.2f, 0.1f, logf(0.5f), 3.0f, -20.0f};
  constant_head(&d, p, bias);
  sac_policy_cfg_t pc = {-5.0f, 0.0f};
  sac_rng_t r1, r2;
  sac_rng_init(&r1, 77, SAC_STREAM_ACTOR(3));
  sac_rng_init(&r2, 77, SAC_STREAM_ACTOR(3));
  sac_policy_act(&d, p, &pc, obs, B, 0, &r1, act, scratch);
  sac_policy_act(&d, p, &pc, obs, B, 0, &r2, act2, scratch);
  cr_assert(memcmp(act, act2, sizeof(float) * (size_t)B * A) == 0, "same rng state, same actions");
  /* atanh(action) ~ N(mu, std^2). With B = 2e4 the standard error of the mean is
   * std / 141 and of the standard deviation std / 200; tolerances are 5 of those. */
  const double mu[A] = {0.3, -0.2, 0.1}, sd[A] = {0.5, 1.0, exp(-5.0)};
  for (int i = 0; i < A; i++) {
    double s1 = 0, s2 = 0;
    for (int b = 0; b < B; b++) {
      float a = act[(size_t)b * A + i];
      cr_assert(a >= -1.0f && a <= 1.0f, "action %g outside [-1, 1]", a);
      double u = atanh((double)a);
      s1 += u;
      s2 += u * u;
    }
    double m = s1 / B, s = sqrt(s2 / B - m * m);
    cr_assert_lt(fabs(m - mu[i]), 5 * sd[i] / sqrt((double)B) + 1e-6, "dim %d mean %g", i, m);
    cr_assert_lt(fabs(s / sd[i] - 1), 5 / sqrt(2.0 * B) + 1e-3, "dim %d std %g (want %g)", i, s, sd[i]);
  }
  /* A huge mean saturates: still inside [-1, 1], never NaN. */
  const float big[2 * A] = {50.0f, -50.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  constant_head(&d, p, big);
  sac_policy_act(&d, p, &pc, obs, 100, 0, &r1, act, scratch);
  for (int b = 0; b < 100; b++) {
    cr_assert(act[b * A] >= 0.999f && act[b * A] <= 1.0f);
    cr_assert(act[b * A + 1] <= -0.999f && act[b * A + 1] >= -1.0f);
  }
  free(p);
  free(scratch);
  free(obs);
  free(act);
  free(act2);
}

/* ---- endpoint lists (common/net.h) ---- */
#include "common/net.h"

Test(net, split_endpoints_trims_and_refuses_bad_lists) {
  char out[3][256];
  size_t n;
  cr_assert_eq(sac_net_split_endpoints(" tcp://a:1 ,tcp://b:2", "list", out, 3, &n), 0);
  cr_expect_eq(n, 2u);
  cr_expect_str_eq(out[0], "tcp://a:1");
  cr_expect_str_eq(out[1], "tcp://b:2");
  cr_expect_eq(sac_net_split_endpoints("tcp://a:1,,tcp://b:2", "list", out, 3, &n), SAC_ECONFIG);
  cr_expect_eq(sac_net_split_endpoints("", "list", out, 3, &n), SAC_ECONFIG);
  cr_expect_eq(sac_net_split_endpoints("a,b,c,d", "list", out, 3, &n), SAC_ECONFIG, "more than max");
  char longest[300];
  memset(longest, 'x', 299);
  longest[299] = '\0';
  cr_expect_eq(sac_net_split_endpoints(longest, "list", out, 3, &n), SAC_ECONFIG);
  cr_expect_eq(n, 0u);
}

/* ---- sigstop: the stop line is written before the program ends ---------------------------- */

#include <signal.h>
#include <stdatomic.h>
#include <time.h>

#include "common/sigstop.h"

static atomic_int g_test_stop, g_test_said;

/* A slow on_stop: the line takes 300 ms to be written. */
static void slow_on_stop(int sig, void *ud) {
  (void)ud;
  const struct timespec d = {0, 300 * 1000 * 1000};
  nanosleep(&d, NULL);
  atomic_store(&g_test_said, sig);
}

/* A program whose loop stops at once on SIGINT returns sac_sigstop_exit_code from main:
 * that must come back only after on_stop has returned (else the process ends first and
 * the line that says what the program does is never written), with 130. */
Test(sigstop, the_exit_code_waits_for_the_stop_line) {
  cr_assert_eq(sac_sigstop_install("test", &g_test_stop, slow_on_stop, NULL), 0);
  cr_assert_eq(raise(SIGINT), 0);
  cr_assert_eq(atomic_load(&g_test_stop), 1, "the first SIGINT did not set the flag");
  cr_assert_eq(atomic_load(&g_test_said), 0, "on_stop ran in the handler, not on its thread");
  cr_assert_eq(sac_sigstop_exit_code(0), 130);
  cr_assert_eq(atomic_load(&g_test_said), SIGINT, "the exit code came back before on_stop had returned");
  cr_assert_eq(sac_sigstop_exit_code(0), 130, "a second call");
}

Test(sigstop, no_signal_no_wait) {
  cr_assert_eq(sac_sigstop_install("test", &g_test_stop, slow_on_stop, NULL), 0);
  const double t0 = sac_clock_s();
  cr_assert_eq(sac_sigstop_exit_code(7), 7);
  cr_assert_lt(sac_clock_s() - t0, 1.0, "waited with no signal (a wait would take 2 s)");
}
