/* The MLP description and an fp32 inference forward shared by actors and the learner.
 *
 * Parameters live in one flat float buffer. An ensemble of K identical MLPs (K = 1 for
 * the policy, K = 2 for the twin critics) stores, layer by layer: the K weight matrices
 * W[k] (n_in x n_out, row-major, so y = x W + b) one after another, then the K bias
 * vectors b[k] (n_out). With K = 1 this is the layout of the Weights message.
 *
 * Activations of an ensemble are (batch x K*n) row-major: member k owns columns
 * [k*n, (k+1)*n). */
#ifndef SAC_COMMON_MLP_H
#define SAC_COMMON_MLP_H
#include <stddef.h>

#include "common/rng.h"

#define SAC_MLP_MAX_LAYERS 16

typedef enum { SAC_ACT_NONE = 0, SAC_ACT_RELU = 1, SAC_ACT_TANH = 2 } sac_act_t;

typedef struct {
  int n_layers;                      /* number of linear layers (hidden layers + 1) */
  int sizes[SAC_MLP_MAX_LAYERS + 1]; /* sizes[0] = input, sizes[n_layers] = output */
  sac_act_t hidden_act;              /* after every layer but the last */
  int ensemble;                      /* K >= 1 */
} sac_mlp_desc_t;

/* Fills desc for in -> hidden x depth -> out, activation act, ensemble K.
 * Returns SAC_EINVAL for sizes < 1 or depth out of range. */
int sac_mlp_desc_init(sac_mlp_desc_t *desc, int in, int hidden, int depth, int out, sac_act_t act,
                      int ensemble);
size_t sac_mlp_param_count(const sac_mlp_desc_t *desc);
/* Offsets (in floats) of layer l's first weight matrix and first bias vector. */
size_t sac_mlp_weight_offset(const sac_mlp_desc_t *desc, int l);
size_t sac_mlp_bias_offset(const sac_mlp_desc_t *desc, int l);
/* Widest layer (max of sizes[]). */
int sac_mlp_max_width(const sac_mlp_desc_t *desc);
/* PyTorch's nn.Linear default: W, b ~ U(-1/sqrt(n_in), 1/sqrt(n_in)). */
void sac_mlp_init_params(const sac_mlp_desc_t *desc, float *params, sac_rng_t *rng);

/* Forward of member 0 of an ensemble (or of a K = 1 MLP) for `batch` rows: x (batch x
 * sizes[0], leading dimension ldx) -> y (batch x sizes[n], leading dimension ldy).
 * scratch holds 2 * batch * max_width floats. No allocation; cannot fail. */
void sac_mlp_forward(const sac_mlp_desc_t *desc, const float *params, const float *x, int batch, int ldx,
                     float *y, int ldy, float *scratch);

/* The tanh-squashed Gaussian policy on top of an MLP whose output is (mu, log_std)
 * (2 * act_dim). Writes actions in [-1, 1] (batch x act_dim). deterministic: tanh(mu);
 * otherwise tanh(mu + exp(clamp(log_std)) * eps) with eps from rng. */
typedef struct {
  float log_std_min, log_std_max;
} sac_policy_cfg_t;
void sac_policy_act(const sac_mlp_desc_t *desc, const float *params, const sac_policy_cfg_t *pcfg,
                    const float *obs, int batch, int deterministic, sac_rng_t *rng, float *action,
                    float *scratch);

#endif
