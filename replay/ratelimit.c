/* Samples-per-insert rate limiter (see ratelimit.h). */
#include "replay/ratelimit.h"

#include "common/log.h"

void sac_replay_limiter_init(sac_replay_limiter_t *l, double spi, uint64_t min_size, double error_buffer,
                             uint32_t max_insert_rows, uint32_t max_sample_batch) {
  l->spi = spi > 0.0 ? spi : 0.0;
  l->min_size = min_size ? min_size : 1;
  l->diff = 0.0;
  l->inserted = l->sampled = 0;
  /* Both checks admit a whole batch when one unit of it fits (as Reverb does per item),
   * so the window must hold one insert's worth of samples plus one sample. */
  double need = l->spi + 1.0;
  if (l->spi > 0.0) {
    if (error_buffer <= 0.0) {
      error_buffer = 0.1 * l->spi * (double)l->min_size;
      double floor_eb = 2.0 * (l->spi + (double)max_sample_batch);
      if (error_buffer < floor_eb)
        error_buffer = floor_eb;
    } else if (error_buffer < need) {
      SAC_WARN("replay", "rate limiter error_buffer %.0f is narrower than samples_per_insert + 1; using %.0f",
               error_buffer, need);
      error_buffer = need;
    }
  }
  (void)max_insert_rows;
  l->error_buffer = error_buffer > 0.0 ? error_buffer : 0.0;
  double offset = l->spi * (double)l->min_size;
  l->min_diff = offset - l->error_buffer;
  l->max_diff = offset + l->error_buffer;
}

int sac_replay_limiter_can_insert(const sac_replay_limiter_t *l, uint32_t n) {
  if (l->spi <= 0.0)
    return 1;
  (void)n;
  return l->diff + l->spi <= l->max_diff;
}

int sac_replay_limiter_can_sample(const sac_replay_limiter_t *l, uint64_t size, uint32_t n) {
  if (size < l->min_size || size == 0)
    return 0;
  if (l->spi <= 0.0)
    return 1;
  (void)n;
  return l->diff - 1.0 >= l->min_diff;
}

uint64_t sac_replay_limiter_insert_room(const sac_replay_limiter_t *l) {
  if (l->spi <= 0.0)
    return UINT64_MAX;
  double room = (l->max_diff - l->diff) / l->spi;
  return room > 0.0 ? (uint64_t)room : 0;
}

void sac_replay_limiter_inserted(sac_replay_limiter_t *l, uint32_t n) {
  l->inserted += n;
  l->diff += l->spi * (double)n;
}

void sac_replay_limiter_sampled(sac_replay_limiter_t *l, uint32_t n) {
  l->sampled += n;
  l->diff -= (double)n;
}
