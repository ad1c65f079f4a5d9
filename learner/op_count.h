/* Backend ops per SAC update, counted (and, where the backend can time them, timed)
 * through a forwarding proxy (op_count.c). */
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

/* Time per op (issue 33): `updates` eager updates of s through a proxy of `real` that
 * puts every compute op between two timing marks of the backend (backend.h,
 * timing_begin with the stream held on cuda: CUDA events, device time; the host clock on
 * cpu). Rows are ops by name and shape ("linear_fwd 256->256 x2 B256", "q_head ...
 * (critic loss)"), in the order first called; seconds and calls summed over the
 * updates; update_seconds sums each update's first-to-last mark (the ops plus what runs
 * between them); ops counts the calls of all rows. The updates train s. 0,
 * SAC_EUNSUPPORTED (the backend has no timing ops), SAC_ETOOBIG (an update of more than
 * SAC_BACKEND_MAX_MARKS / 2 - 1 ops), SAC_ETIMEOUT (the held stream gave up: the
 * figures would include host time) or an update's or the backend's error. */
#define SAC_OP_PROFILE_ROWS 96
#define SAC_OP_NAME_MAX 64
typedef struct {
  char name[SAC_OP_NAME_MAX];
  double calls;   /* over all updates */
  double seconds; /* over all updates */
} sac_op_row_t;
typedef struct {
  sac_op_row_t row[SAC_OP_PROFILE_ROWS];
  int n_rows;
  int updates;
  int64_t ops;
  double update_seconds;
} sac_op_profile_t;
int sac_profile_update_ops(sac_t *s, sac_backend_t *real, int updates, sac_op_profile_t *out);

#endif
