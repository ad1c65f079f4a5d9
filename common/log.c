/* Log lines (see log.h). Formatting happens in a stack buffer so a line is one write(2)
 * and lines from different threads never interleave. */
#include "common/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "common/error.h"

static atomic_int g_level = -1;
static atomic_int g_json = 0;

static const char *k_names[] = {"ERROR", "WARN", "INFO", "DEBUG"};

int sac_log_parse_level(const char *s, sac_log_level_t *out) {
  static const char *lower[] = {"error", "warn", "info", "debug"};
  for (int i = 0; i < 4; i++)
    if (strcasecmp(s, lower[i]) == 0) {
      *out = (sac_log_level_t)i;
      return 0;
    }
  return SAC_EINVAL;
}

void sac_log_set_level(sac_log_level_t level) { atomic_store(&g_level, (int)level); }

sac_log_level_t sac_log_get_level(void) {
  int l = atomic_load(&g_level);
  if (l < 0) {
    sac_log_level_t parsed = SAC_LOG_INFO;
    const char *env = getenv("SAC_LOG_LEVEL");
    if (env)
      sac_log_parse_level(env, &parsed);
    l = (int)parsed;
    atomic_store(&g_level, l);
  }
  return (sac_log_level_t)l;
}

void sac_log_set_json(int on) { atomic_store(&g_json, on ? 1 : 0); }
int sac_log_configure(const char *level, int json, const char *module) {
  sac_log_level_t lvl;
  if (sac_log_parse_level(level, &lvl)) {
    sac_log(SAC_LOG_ERROR, module, "log_level \"%s\" is not one of error, warn, info, debug", level);
    return SAC_ECONFIG;
  }
  sac_log_set_level(lvl);
  if (json)
    sac_log_set_json(1);
  return 0;
}

int sac_log_json_enabled(void) { return atomic_load(&g_json); }

/* SAC_LOG_JSON=1 (or true/yes/on) turns JSON mode on before any option is parsed. */
__attribute__((constructor)) static void log_env_init(void) {
  const char *j = getenv("SAC_LOG_JSON");
  if (j && (strcmp(j, "1") == 0 || strcasecmp(j, "true") == 0 || strcasecmp(j, "yes") == 0 ||
            strcasecmp(j, "on") == 0))
    atomic_store(&g_json, 1);
}

/* Appends s to buf as a JSON string body (escaped). Stops 24 bytes short of cap: one
 * escape (6) plus everything written after a field (`","msg":"`, `"}\n`, NUL: 13) always
 * fits, so a cut line is still one JSON object and n never passes cap. */
static size_t json_escape(char *buf, size_t cap, size_t n, const char *s) {
  for (; *s && n + 24 < cap; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') {
      buf[n++] = '\\';
      buf[n++] = (char)c;
    } else if (c < 0x20) {
      n += (size_t)snprintf(buf + n, cap - n, "\\u%04x", c);
    } else {
      buf[n++] = (char)c;
    }
  }
  return n;
}

void sac_log(sac_log_level_t level, const char *module, const char *fmt, ...) {
  if ((int)level > (int)sac_log_get_level())
    return;
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);

  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  char when[64];
  snprintf(when, sizeof when, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
           tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(ts.tv_nsec / 1000000));

  char line[4096];
  size_t n;
  if (atomic_load(&g_json)) {
    n = (size_t)snprintf(line, sizeof line, "{\"ts\":\"%s\",\"level\":\"%s\",\"module\":\"", when,
                         k_names[level]);
    n = json_escape(line, sizeof line, n, module ? module : "");
    n += (size_t)snprintf(line + n, sizeof line - n, "\",\"msg\":\"");
    n = json_escape(line, sizeof line, n, msg);
    n += (size_t)snprintf(line + n, sizeof line - n, "\"}\n");
  } else {
    n = (size_t)snprintf(line, sizeof line, "%s %-5s %s: %s\n", when, k_names[level], module ? module : "-",
                         msg);
  }
  if (n >= sizeof line) {
    n = sizeof line - 1;
    line[n - 1] = '\n';
  }
  ssize_t w = write(STDERR_FILENO, line, n);
  (void)w;
}

/* ------------------------------------------------------------------ rate-limited lines */

int sac_log_limited(sac_log_limit_t *l, double every_s, sac_log_level_t level, const char *module,
                    const char *fmt, ...) {
  if ((int)level > (int)sac_log_get_level())
    return 0;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  unsigned long long now = (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
  unsigned long long gap = every_s > 0.0 ? (unsigned long long)(every_s * 1e9) : 0ull;
  unsigned long long next = atomic_load(&l->next_ns);
  /* one thread wins the slot; the others count themselves as suppressed */
  if (now < next || !atomic_compare_exchange_strong(&l->next_ns, &next, now + gap)) {
    atomic_fetch_add(&l->suppressed, 1);
    return 0;
  }
  unsigned long long skipped = atomic_exchange(&l->suppressed, 0);
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (skipped)
    sac_log(level, module, "%s (%llu similar lines suppressed)", msg, skipped);
  else
    sac_log(level, module, "%s", msg);
  return 1;
}
