/* Backend ops per SAC update, counted through a forwarding proxy (op_count.c). */
#ifndef SAC_LEARNER_OP_COUNT_H
#define SAC_LEARNER_OP_COUNT_H
#include <stdint.h>

#include "learner/sac.h"

/* Runs updates of s eagerly through a counting proxy of `real` (the backend s was made
 * with) and writes the compute ops of one update that steps the actor (counts[0]) and of
 * one critic-only update (counts[1]; = counts[0] when policy_delay is 1). unfused 1:
 * count the unfused ops (sac_set_unfused). The updates train s (benchmark warm-up).
 * 0 or an update's error. */
int sac_count_update_ops(sac_t *s, sac_backend_t *real, int unfused, int64_t counts[2]);

#endif
