/* MLP layout and fp32 inference (see mlp.h). This is the actors' hot path: batched, no
 * allocation, plain loops the compiler vectorises over the output dimension. The
 * learner's backends do the same math with BLAS or cuBLASLt. */
#include "common/mlp.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#include "common/error.h"

int sac_mlp_desc_init(sac_mlp_desc_t *desc, int in, int hidden, int depth, int out, sac_act_t act,
                      int ensemble) {
  if (in < 1 || hidden < 1 || out < 1 || depth < 0 || depth + 1 > SAC_MLP_MAX_LAYERS || ensemble < 1)
    return SAC_EINVAL;
  memset(desc, 0, sizeof *desc);
  desc->n_layers = depth + 1;
  desc->sizes[0] = in;
  for (int l = 1; l <= depth; l++)
    desc->sizes[l] = hidden;
  desc->sizes[depth + 1] = out;
  desc->hidden_act = act;
  desc->ensemble = ensemble;
  return 0;
}

static size_t layer_params(const sac_mlp_desc_t *d, int l) {
  return (size_t)d->ensemble * ((size_t)d->sizes[l] * (size_t)d->sizes[l + 1] + (size_t)d->sizes[l + 1]);
}

size_t sac_mlp_param_count(const sac_mlp_desc_t *desc) {
  size_t n = 0;
  for (int l = 0; l < desc->n_layers; l++)
    n += layer_params(desc, l);
  return n;
}

size_t sac_mlp_weight_offset(const sac_mlp_desc_t *desc, int l) {
  size_t n = 0;
  for (int i = 0; i < l; i++)
    n += layer_params(desc, i);
  return n;
}

size_t sac_mlp_bias_offset(const sac_mlp_desc_t *desc, int l) {
  return sac_mlp_weight_offset(desc, l) +
         (size_t)desc->ensemble * (size_t)desc->sizes[l] * (size_t)desc->sizes[l + 1];
}

int sac_mlp_max_width(const sac_mlp_desc_t *desc) {
  int m = 0;
  for (int l = 0; l <= desc->n_layers; l++)
    if (desc->sizes[l] > m)
      m = desc->sizes[l];
  return m;
}

void sac_mlp_init_params(const sac_mlp_desc_t *desc, float *params, sac_rng_t *rng) {
  for (int l = 0; l < desc->n_layers; l++) {
    size_t w = sac_mlp_weight_offset(desc, l), b = sac_mlp_bias_offset(desc, l);
    size_t nw = (size_t)desc->ensemble * desc->sizes[l] * desc->sizes[l + 1];
    size_t nb = (size_t)desc->ensemble * desc->sizes[l + 1];
    double bound = 1.0 / sqrt((double)desc->sizes[l]);
    for (size_t i = 0; i < nw; i++)
      params[w + i] = (float)sac_rng_uniform_range(rng, -bound, bound);
    for (size_t i = 0; i < nb; i++)
      params[b + i] = (float)sac_rng_uniform_range(rng, -bound, bound);
  }
}

static float activate(sac_act_t a, float v) {
  switch (a) {
  case SAC_ACT_RELU:
    return v > 0.0f ? v : 0.0f;
  case SAC_ACT_TANH:
    return tanhf(v);
  default:
    return v;
  }
}

void sac_mlp_forward(const sac_mlp_desc_t *desc, const float *params, const float *x, int batch, int ldx,
                     float *y, int ldy, float *scratch) {
  int maxw = sac_mlp_max_width(desc);
  float *buf[2] = {scratch, scratch + (size_t)batch * maxw};
  const float *in = x;
  int ld_in = ldx;
  for (int l = 0; l < desc->n_layers; l++) {
    int n_in = desc->sizes[l], n_out = desc->sizes[l + 1];
    const float *W = params + sac_mlp_weight_offset(desc, l);
    const float *b = params + sac_mlp_bias_offset(desc, l);
    int last = l == desc->n_layers - 1;
    float *out = last ? y : buf[l & 1];
    int ld_out = last ? ldy : n_out;
    sac_act_t act = last ? SAC_ACT_NONE : desc->hidden_act;
    for (int r = 0; r < batch; r++) {
      float *o = out + (size_t)r * ld_out;
      const float *xi = in + (size_t)r * ld_in;
      memcpy(o, b, sizeof(float) * (size_t)n_out);
      for (int i = 0; i < n_in; i++) {
        float xv = xi[i];
        const float *wr = W + (size_t)i * n_out;
        for (int j = 0; j < n_out; j++)
          o[j] += xv * wr[j];
      }
      for (int j = 0; j < n_out; j++)
        o[j] = activate(act, o[j]);
    }
    in = out;
    ld_in = n_out;
  }
}

void sac_policy_act(const sac_mlp_desc_t *desc, const float *params, const sac_policy_cfg_t *pcfg,
                    const float *obs, int batch, int deterministic, sac_rng_t *rng, float *action,
                    float *scratch) {
  int two_a = desc->sizes[desc->n_layers];
  int A = two_a / 2;
  assert(two_a == 2 * A);
  float *head = scratch;
  float *work = scratch + (size_t)batch * two_a;
  sac_mlp_forward(desc, params, obs, batch, desc->sizes[0], head, two_a, work);
  for (int r = 0; r < batch; r++) {
    const float *h = head + (size_t)r * two_a;
    for (int i = 0; i < A; i++) {
      float u = h[i];
      if (!deterministic) {
        float ls = fminf(fmaxf(h[A + i], pcfg->log_std_min), pcfg->log_std_max);
        u += expf(ls) * sac_rng_normal(rng);
      }
      action[(size_t)r * A + i] = tanhf(u);
    }
  }
}
