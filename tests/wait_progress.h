/* Waits by progress for the C tests that drive child processes (test_replay_integration,
 * test_replay_hostile): a wait fails when the watched process has made no progress for its
 * stated time, not at a fixed instant, so a busy machine slows such a test down without
 * failing it. Progress is a token that rises while the process works: its CPU time
 * (utime + stime from /proc/PID/stat) and, where it has one, the size of its log. A
 * process blocked for good (a hang: an open() that never returns, a deadlock) uses no CPU
 * and writes nothing, so it is caught after the stated time. */
#ifndef SAC_TESTS_WAIT_PROGRESS_H
#define SAC_TESTS_WAIT_PROGRESS_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "common/clock.h"

/* The CPU time of process pid in clock ticks (utime + stime), 0 when it cannot be read. */
static inline unsigned long long wp_cpu_ticks(pid_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f)
    return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char *p = strrchr(buf, ')'); /* after "pid (comm)": comm may hold spaces */
  unsigned long long ut = 0, st = 0;
  if (!p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
    return 0;
  return ut + st;
}

/* The size of a file, 0 when it is not there. */
static inline unsigned long long wp_file_size(const char *path) {
  struct stat sb;
  return path && stat(path, &sb) == 0 ? (unsigned long long)sb.st_size : 0;
}

/* Progress of one process: its CPU time plus the size of its log (NULL: none). */
static inline unsigned long long wp_token(pid_t pid, const char *log) {
  return wp_cpu_ticks(pid) + wp_file_size(log);
}

typedef struct {
  unsigned long long token;
  uint64_t moved_ns;
} wp_t;

static inline void wp_start(wp_t *w, unsigned long long token) {
  w->token = token;
  w->moved_ns = sac_clock_ns();
}

/* 1 when token has not changed for stall_s seconds since the last change (or wp_start). */
static inline int wp_stalled(wp_t *w, unsigned long long token, double stall_s) {
  uint64_t now = sac_clock_ns();
  if (token != w->token) {
    w->token = token;
    w->moved_ns = now;
    return 0;
  }
  return now - w->moved_ns > (uint64_t)(stall_s * 1e9);
}

#endif
