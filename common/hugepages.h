/* Transparent huge pages for the large arrays read at random: a replay shard's rows and
 * its sum tree. A sample touches a few hundred rows scattered over tens of megabytes, and
 * with 4 KiB pages nearly every row is also a TLB miss (a page walk, which in a virtual
 * machine costs two walks); 2 MiB pages cover such an array with a few dozen entries.
 *
 * The advice is asked for (madvise MADV_HUGEPAGE, which the kernel's default "madvise"
 * setting honours) only for arrays of at least SAC_HUGEPAGES_MIN bytes, and only for the
 * whole 2 MiB pages inside them. Pages still back memory when first written, a huge page
 * at a time: an array filled slowly holds at most one partly used huge page more than it
 * would otherwise. Where the kernel has no huge pages the advice is refused and nothing
 * changes. */
#ifndef SAC_COMMON_HUGEPAGES_H
#define SAC_COMMON_HUGEPAGES_H
#include <stddef.h>

#define SAC_HUGEPAGES_MIN ((size_t)4 << 20)

/* Asks for huge pages over [p, p + bytes) when bytes >= SAC_HUGEPAGES_MIN. Returns 1 when
 * the kernel took the advice, 0 otherwise (too small, or refused). */
int sac_hugepages_advise(void *p, size_t bytes);

#endif
