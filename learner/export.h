/* Policy export, to use a trained policy outside sacfleet: the actor's deterministic action
 * in the environment's own units (tanh(mu(obs)) scaled to the action bounds, as the actors
 * and the evaluation scale it) as
 *  - one dependency-free C source and header a user compiles into their own program, with
 *    the weights inside, in fp32 or int8 (symmetric, one scale per output unit, dequantised
 *    on the fly; the quantisation's action error against fp32 is measured on random
 *    observations and reported), or
 *  - an ONNX model (protobuf-c over proto/onnx.proto) that onnxruntime or any ONNX reader
 *    runs: input "obs" (batch x obs_dim), output "action" (batch x act_dim), the batch
 *    dimension free, the environment ID, sizes, bounds and sacfleet's version in its
 *    metadata.
 * It is not a training format: only the policy mean is kept (no log-std head, no critics).
 * The file formats are described in docs/EXPORT.md. */
#ifndef SAC_LEARNER_EXPORT_H
#define SAC_LEARNER_EXPORT_H
#include <stddef.h>

#include "common/mlp.h"
#include "learner/rundir.h"

typedef struct {
  double max_abs_error,
      mean_abs_error; /* int8 vs fp32 actions (environment units), over `samples` observations */
  int samples;
} sac_export_report_t;

/* The action sacfleet itself takes for one observation: tanh(mu(obs)) scaled to env's
 * bounds, the reference every export reproduces. scratch: 2 * act_dim + 2 * max_width
 * floats. Cannot fail; env->act_dim must be the policy's action size (asserted). */
void sac_export_act(const sac_mlp_desc_t *d, const float *params, const sac_policy_env_t *env,
                    const float *obs, float *action, float *scratch);

/* Writes DIR/PREFIX.h and DIR/PREFIX.c exposing `void PREFIX_act(const float *obs, float
 * *action)` (action in env's bounds), PREFIX_OBS_DIM, PREFIX_ACT_DIM, PREFIX_ENV_ID and the
 * bounds PREFIX_action_low / PREFIX_action_high. int8: quantised weights. obs_scale: the
 * range of the random observations used for the error report (uniform in [-obs_scale,
 * obs_scale]). 0, SAC_EINVAL (bad prefix, or a policy that is not a ReLU tanh-Gaussian
 * actor with env's action size: logged), SAC_ENOMEM, SAC_EIO (logged). */
int sac_export_c(const char *dir, const char *prefix, const sac_mlp_desc_t *d, const float *params,
                 const sac_policy_env_t *env, int int8, double obs_scale, sac_export_report_t *report);

/* Writes the ONNX model to path (through path.tmp and a rename: a reader never sees half a
 * file). Hidden activations ReLU, tanh or none; ops Gemm, Relu, Tanh, Add, Mul of opset
 * 17 (IR version 8). 0, SAC_EINVAL (a policy without env's action size: logged),
 * SAC_ENOMEM, SAC_EIO (logged). */
int sac_export_onnx(const char *path, const sac_mlp_desc_t *d, const float *params,
                    const sac_policy_env_t *env);

#endif
