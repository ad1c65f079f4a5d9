/* Huge pages for large random-access arrays (see hugepages.h). */
#include "common/hugepages.h"

#include <stdint.h>
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
