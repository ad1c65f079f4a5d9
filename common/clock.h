/* Monotonic time for timeouts, rates and benchmarks (CLOCK_MONOTONIC), and wall time for
 * log lines. These functions cannot fail. */
#ifndef SAC_COMMON_CLOCK_H
#define SAC_COMMON_CLOCK_H
#include <stdint.h>

uint64_t sac_clock_ns(void);     /* monotonic nanoseconds since an arbitrary origin */
double sac_clock_s(void);        /* the same, in seconds */
uint64_t sac_wallclock_ns(void); /* CLOCK_REALTIME nanoseconds since the epoch */
void sac_sleep_ns(uint64_t ns);  /* sleeps at least ns (restarts after signals) */

#endif
