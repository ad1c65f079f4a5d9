/* The samples-per-insert rate limiter of a shard, with Reverb's SampleToInsertRatio
 * semantics: with spi samples allowed per inserted transition, diff = spi * inserted -
 * sampled must stay within [spi * min_size - error_buffer, spi * min_size +
 * error_buffer]; sampling also needs at least min_size transitions stored. Both counts
 * are in transitions (a batch of 256 is 256 samples). spi <= 0 disables the ratio and
 * keeps only the minimum size.
 *
 * This is the decision and the bookkeeping only: the server makes the side that runs
 * ahead wait (an insert is parked, a sample request is queued) with a timeout. A whole
 * batch is admitted when one unit of it fits (Reverb decides per item), so diff may
 * leave the window by at most one batch; the error buffer is widened, with a log line,
 * when it is narrower than spi + 1, because then neither side could proceed. Not
 * thread-safe. */
#ifndef SAC_REPLAY_RATELIMIT_H
#define SAC_REPLAY_RATELIMIT_H
#include <stdint.h>

typedef struct {
  double spi;
  uint64_t min_size;
  double error_buffer;
  double min_diff, max_diff;
  double diff;
  uint64_t inserted, sampled;
} sac_replay_limiter_t;

/* error_buffer <= 0 picks max(2 * (spi + max_sample_batch), 10% of spi * min_size). */
void sac_replay_limiter_init(sac_replay_limiter_t *l, double spi, uint64_t min_size, double error_buffer,
                             uint32_t max_insert_rows, uint32_t max_sample_batch);
/* 1 when one more inserted transition keeps diff <= max_diff (the batch of n is then
 * admitted whole). */
int sac_replay_limiter_can_insert(const sac_replay_limiter_t *l, uint32_t n);
/* 1 when size >= min_size and one more sample keeps diff >= min_diff. */
int sac_replay_limiter_can_sample(const sac_replay_limiter_t *l, uint64_t size, uint32_t n);
/* Transitions that can be inserted before the limiter holds inserts back (the last
 * batch admitted may overshoot, see above); UINT64_MAX when the ratio is off. */
uint64_t sac_replay_limiter_insert_room(const sac_replay_limiter_t *l);
void sac_replay_limiter_inserted(sac_replay_limiter_t *l, uint32_t n);
void sac_replay_limiter_sampled(sac_replay_limiter_t *l, uint32_t n);

#endif
