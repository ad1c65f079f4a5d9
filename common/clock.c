/* Monotonic and wall clocks (see clock.h). */
#include "common/clock.h"

#include <errno.h>
#include <time.h>

uint64_t sac_clock_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

double sac_clock_s(void) { return (double)sac_clock_ns() * 1e-9; }

uint64_t sac_wallclock_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void sac_sleep_ns(uint64_t ns) {
  struct timespec req = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
  struct timespec rem;
  while (nanosleep(&req, &rem) != 0 && errno == EINTR)
    req = rem;
}
