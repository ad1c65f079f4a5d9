/* See findfile.h. */
#include "common/findfile.h"

#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"

/* Tries dir/file; on success writes it to out and returns 1. Notes the folder in seen. */
static int try_dir(const char *dir, size_t dir_len, const char *file, char *out, size_t cap, char *seen,
                   size_t seen_cap) {
  if (dir_len == 0)
    return 0;
  char path[PATH_MAX];
  if (snprintf(path, sizeof path, "%.*s/%s", (int)dir_len, dir, file) >= (int)sizeof path)
    return 0;
  size_t n = strlen(seen);
  if (n < seen_cap)
    snprintf(seen + n, seen_cap - n, "%s%.*s", n ? ", " : "", (int)dir_len, dir);
  if (access(path, R_OK) != 0)
    return 0;
  return snprintf(out, cap, "%s", path) < (int)cap;
}

/* Tries every folder of a ':'-separated list (empty entries skipped). */
static int try_list(const char *list, const char *file, char *out, size_t cap, char *seen, size_t seen_cap) {
  for (const char *p = list; p && *p;) {
    size_t len = strcspn(p, ":");
    if (try_dir(p, len, file, out, cap, seen, seen_cap))
      return 1;
    p += len + (p[len] == ':');
  }
  return 0;
}

int sac_find_file(const sac_find_t *w, const char *file, char *out, size_t cap, char *seen, size_t seen_cap) {
  char none[1];
  if (!seen || !seen_cap) {
    seen = none;
    seen_cap = sizeof none;
  }
  seen[0] = '\0';
  if (w->env_var && try_list(getenv(w->env_var), file, out, cap, seen, seen_cap))
    return 0;
  if (w->only_env)
    return SAC_ENOTFOUND;
  /* next to the binary, then the installed layout relative to it (a moved prefix works) */
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash) {
      *slash = '\0';
      if (w->next_to_binary && try_dir(exe, strlen(exe), file, out, cap, seen, seen_cap))
        return 0;
      char rel[PATH_MAX], canon[PATH_MAX];
      if (w->rel_dir && snprintf(rel, sizeof rel, "%s/%s", exe, w->rel_dir) < (int)sizeof rel) {
        const char *d = realpath(rel, canon) ? canon : rel; /* messages without "bin/../" */
        if (try_dir(d, strlen(d), file, out, cap, seen, seen_cap))
          return 0;
      }
    }
  }
  if ((w->install_dir && try_dir(w->install_dir, strlen(w->install_dir), file, out, cap, seen, seen_cap)) ||
      try_list(w->build_dirs, file, out, cap, seen, seen_cap))
    return 0;
  return SAC_ENOTFOUND;
}

static int fold(char c, unsigned flags) {
  if ((flags & SAC_DIST_DASH) && c == '-')
    return '_';
  return (flags & SAC_DIST_FOLD_CASE) ? tolower((unsigned char)c) : (unsigned char)c;
}

int sac_edit_distance(const char *a, size_t n, const char *b, size_t m, unsigned flags) {
  if (n > 63 || m > 63)
    return 9;
  int d[64][64];
  for (size_t i = 0; i <= n; i++)
    d[i][0] = (int)i;
  for (size_t j = 0; j <= m; j++)
    d[0][j] = (int)j;
  for (size_t i = 1; i <= n; i++)
    for (size_t j = 1; j <= m; j++) {
      int x = fold(a[i - 1], flags), y = fold(b[j - 1], flags);
      int best = d[i - 1][j - 1] + (x != y);
      if (d[i - 1][j] + 1 < best)
        best = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < best)
        best = d[i][j - 1] + 1;
      if (i > 1 && j > 1 && x == fold(b[j - 2], flags) && fold(a[i - 2], flags) == y &&
          d[i - 2][j - 2] + 1 < best)
        best = d[i - 2][j - 2] + 1;
      d[i][j] = best;
    }
  return d[n][m] > 9 ? 9 : d[n][m];
}
