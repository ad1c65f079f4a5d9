/* Policy export for embedding: the trained actor as one dependency-free C source and
 * header (deterministic action = tanh(mu(obs)), in [-1, 1]) that a user compiles into
 * their own program, with the weights inside, in fp32 or int8 (symmetric, one scale per
 * output unit, dequantised on the fly). The quantisation's action error against fp32 is
 * measured on random observations and reported. */
#ifndef SAC_LEARNER_EXPORT_H
#define SAC_LEARNER_EXPORT_H
#include <stddef.h>

#include "common/mlp.h"

typedef struct {
  double max_abs_error, mean_abs_error; /* int8 vs fp32 actions, over `samples` observations */
  int samples;
} sac_export_report_t;

/* Writes DIR/PREFIX.h and DIR/PREFIX.c exposing `void PREFIX_act(const float *obs,
 * float *action)` and PREFIX_OBS_DIM / PREFIX_ACT_DIM. int8: quantised weights. obs_scale:
 * the range of the random observations used for the error report (uniform in
 * [-obs_scale, obs_scale]). 0, SAC_EINVAL (bad prefix), SAC_EIO (logged). */
int sac_export_c(const char *dir, const char *prefix, const sac_mlp_desc_t *d, const float *params, int int8,
                 double obs_scale, sac_export_report_t *report);

#endif
