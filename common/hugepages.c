/* Huge pages for large random-access arrays (see hugepages.h). */
#include "common/hugepages.h"

#include <stdint.h>
#include <stdlib.h>
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
