/* Huge pages for large random-access arrays (see hugepages.h). */
#include "common/hugepages.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define HUGE_PAGE ((uintptr_t)2 << 20)

int sac_hugepages_advise(void *p, size_t bytes) {
#if defined(MADV_HUGEPAGE)
  if (!p || bytes < SAC_HUGEPAGES_MIN)
    return 0;
  const uintptr_t start = ((uintptr_t)p + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1),
                  end = ((uintptr_t)p + bytes) & ~(HUGE_PAGE - 1);
  return end > start && madvise((void *)start, end - start, MADV_HUGEPAGE) == 0;
#else
  (void)p;
  (void)bytes;
  return 0;
#endif
}

#define LINE ((uintptr_t)64)
#define PAGE ((size_t)4096)

static size_t page_round(size_t bytes) { return (bytes + PAGE - 1) & ~(PAGE - 1); }

void *sac_hugepages_calloc(size_t bytes, void **raw) {
  *raw = NULL;
  if (bytes < SAC_HUGEPAGES_MIN) {
    unsigned char *p = calloc(bytes + LINE, 1);
    *raw = p;
    return p ? p + (LINE - (uintptr_t)p % LINE) % LINE : NULL;
  }
  /* map 2 MiB more than needed, then give back the parts before the first 2 MiB boundary
   * and after the array: what stays starts on a huge page */
  const size_t len = page_round(bytes), span = len + HUGE_PAGE;
  unsigned char *m = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED)
    return NULL;
  unsigned char *p = (unsigned char *)(((uintptr_t)m + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1));
  const size_t head = (size_t)(p - m), tail = span - head - len;
  if (head)
    munmap(m, head);
  if (tail)
    munmap(p + len, tail);
  sac_hugepages_advise(p, bytes);
  *raw = p;
  return p;
}

void sac_hugepages_free(void *raw, size_t bytes) {
  if (!raw)
    return;
  if (bytes < SAC_HUGEPAGES_MIN)
    free(raw);
  else
    munmap(raw, page_round(bytes));
}

sac_thp_mode_t sac_hugepages_parse_mode(const char *line) {
  const char *b = line ? strchr(line, '[') : NULL;
  const char *e = b ? strchr(b, ']') : NULL;
  if (!e)
    return SAC_THP_UNKNOWN;
  const size_t n = (size_t)(e - b - 1);
  static const struct {
    const char *name;
    sac_thp_mode_t mode;
  } k_modes[] = {{"always", SAC_THP_ALWAYS}, {"madvise", SAC_THP_MADVISE}, {"never", SAC_THP_NEVER}};
  for (size_t i = 0; i < sizeof k_modes / sizeof *k_modes; i++)
    if (strlen(k_modes[i].name) == n && strncmp(b + 1, k_modes[i].name, n) == 0)
      return k_modes[i].mode;
  return SAC_THP_UNKNOWN;
}

sac_thp_mode_t sac_hugepages_mode(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f)
    return SAC_THP_UNKNOWN;
  char line[256];
  const sac_thp_mode_t m = fgets(line, sizeof line, f) ? sac_hugepages_parse_mode(line) : SAC_THP_UNKNOWN;
  fclose(f);
  return m;
}

const char *sac_hugepages_mode_name(sac_thp_mode_t m) {
  switch (m) {
  case SAC_THP_ALWAYS:
    return "always";
  case SAC_THP_MADVISE:
    return "madvise";
  case SAC_THP_NEVER:
    return "never";
  default:
    return "unknown";
  }
}
