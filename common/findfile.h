/* Finding a file the project ships (an environment plugin, a per-environment preset) the
 * same way from an installed tree, a moved install, a build tree and a user's override:
 * the folders of an environment variable first, then folders relative to the running
 * binary, the configured install folder, and the build or source tree. It opens nothing;
 * a file counts as found when it is readable. */
#ifndef SAC_COMMON_FINDFILE_H
#define SAC_COMMON_FINDFILE_H
#include <stddef.h>

typedef struct {
  const char *env_var;     /* name of a variable of ':'-separated folders searched first, or NULL */
  int next_to_binary;      /* search the running binary's own folder */
  const char *rel_dir;     /* a folder relative to the binary's ("../lib/sacfleet"), or NULL */
  const char *install_dir; /* the configured install folder, or NULL */
  const char *build_dirs;  /* ':'-separated folders of the build or source tree, or NULL */
  int only_env;            /* tests: the variable's folders alone */
} sac_find_t;

/* Looks for file in the folders of where, in the order above. 0 with the path in out; else
 * SAC_ENOTFOUND (nothing logged). seen receives the folders looked in, ", "-separated
 * (truncated to seen_cap), for the caller's message. */
int sac_find_file(const sac_find_t *where, const char *file, char *out, size_t cap, char *seen,
                  size_t seen_cap);

/* Edit distance between a[0, n) and b[0, m) counting a swap of two neighbours as one edit
 * (optimal string alignment), capped at 9: what "did you mean" suggestions rank by. flags:
 * SAC_DIST_FOLD_CASE ignores ASCII case, SAC_DIST_DASH ('-' is '_'). Strings longer than
 * 63 are 9 from everything. */
enum { SAC_DIST_FOLD_CASE = 1, SAC_DIST_DASH = 2 };
int sac_edit_distance(const char *a, size_t n, const char *b, size_t m, unsigned flags);

#endif
