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
 * changes.
 *
 * Advice only helps pages not yet touched: a page already backed at 4 KiB stays so. An
 * array calloc'ed from memory the process freed earlier (malloc's heap holds such memory
 * and hands it out again, zeroing it first) is all touched before the advice can be
 * given. In sac-bench-service's later runs, one of the two shards' rows came back that
 * way, without one huge page, and a prioritised update took 95-117 us of the process's CPU
 * where it took 73-84 with both shards on huge pages. So sac_hugepages_calloc gives arrays of
 * SAC_HUGEPAGES_MIN bytes or more a mapping of their own, aligned to 2 MiB and advised
 * before any page is touched. */
#ifndef SAC_COMMON_HUGEPAGES_H
#define SAC_COMMON_HUGEPAGES_H
#include <stddef.h>

#define SAC_HUGEPAGES_MIN ((size_t)4 << 20)

/* Asks for huge pages over [p, p + bytes) when bytes >= SAC_HUGEPAGES_MIN. Returns 1 when
 * the kernel took the advice, 0 otherwise (too small, or refused). */
int sac_hugepages_advise(void *p, size_t bytes);

/* Zeroed memory of `bytes`, 64-byte aligned, for a large array read at random. Under
 * SAC_HUGEPAGES_MIN bytes it comes from calloc; from there up it is a fresh anonymous
 * mapping of its own (no page touched), aligned to 2 MiB and advised as above. *raw gets
 * what to hand to sac_hugepages_free with the same `bytes`. NULL when out of memory. */
void *sac_hugepages_calloc(size_t bytes, void **raw);
void sac_hugepages_free(void *raw, size_t bytes);

/* The kernel's setting for transparent huge pages (/sys/kernel/mm/transparent_hugepage/
 * enabled, the bracketed word): with "never" the advice above changes nothing, and a
 * shard says so when it starts (replay/shard.c). UNKNOWN: no such file (a kernel without
 * them, or not Linux) or a line not understood. */
typedef enum { SAC_THP_UNKNOWN = 0, SAC_THP_ALWAYS, SAC_THP_MADVISE, SAC_THP_NEVER } sac_thp_mode_t;
#define SAC_THP_ENABLED_PATH "/sys/kernel/mm/transparent_hugepage/enabled"
sac_thp_mode_t sac_hugepages_mode(const char *path);
/* The mode named in brackets in one line of that file ("always [madvise] never"). */
sac_thp_mode_t sac_hugepages_parse_mode(const char *line);
const char *sac_hugepages_mode_name(sac_thp_mode_t m);

#endif
