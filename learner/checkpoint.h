/* Learner checkpoints: every network (actor, critics, targets), the Adam state and step
 * counters, log alpha, the update counter (which also keys the update noise, so a
 * resumed run draws the same noise an uninterrupted one would) and the run's counters,
 * written atomically and checksummed (common/snapshot.h). Loading checks the shapes
 * against the learner it is loaded into and names the first field that differs. */
#ifndef SAC_LEARNER_CHECKPOINT_H
#define SAC_LEARNER_CHECKPOINT_H
#include <stdint.h>

#include "learner/sac.h"

typedef struct {
  uint64_t updates;        /* equals sac_step() at save time */
  uint64_t env_steps;      /* environment steps stored when saved */
  uint64_t policy_version; /* last version published */
  double wall_seconds;     /* training time so far */
  uint64_t episodes;       /* training episodes finished so far (0 from a version 1-2 file) */
  double best_eval_return; /* best evaluation return so far (NaN: none yet, or a version 1-2 file) */
} sac_ckpt_counters_t;

/* The shapes a checkpoint was saved with (sac_checkpoint_peek). */
typedef struct {
  uint32_t version;
  int obs_dim, act_dim, hidden, depth, batch;
} sac_ckpt_shape_t;

/* Writes path atomically. 0, SAC_EIO or SAC_ENOMEM (logged). */
int sac_checkpoint_save(sac_t *s, const char *path, const sac_ckpt_counters_t *c);
/* Restores s from path. 0; SAC_ENOTFOUND (no file); SAC_EVERSION, SAC_EIO,
 * SAC_ECHECKSUM (damaged file); SAC_ECONFIG (another shape: the field is named in the
 * log); SAC_ENOMEM. On error s is unchanged unless the error is SAC_EIO mid-read. */
int sac_checkpoint_load(sac_t *s, const char *path, sac_ckpt_counters_t *c);
/* Reads path's counters and shapes without a learner (a resume decides from them whether
 * there is anything left to train). shape may be NULL. 0; SAC_ENOTFOUND (no file, not
 * logged); SAC_EVERSION, SAC_EIO, SAC_ECHECKSUM (logged). */
int sac_checkpoint_peek(const char *path, sac_ckpt_counters_t *c, sac_ckpt_shape_t *shape);

#endif
