/* The C export (see export.h). The generated code is plain C99 with <math.h> only; the
 * int8 path mirrors exactly the arithmetic of int8_forward() below, which is what the
 * error report measures. */
#include "learner/export.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/log.h"
#include "common/rng.h"

/* Per-output-unit symmetric scales: scale[j] = max_i |W_ij| / 127. */
static void quantise(const float *W, int n_in, int n_out, int8_t *q, float *scale) {
  for (int j = 0; j < n_out; j++) {
    float m = 0.0f;
    for (int i = 0; i < n_in; i++)
      m = fmaxf(m, fabsf(W[(size_t)i * n_out + j]));
    scale[j] = m > 0.0f ? m / 127.0f : 1.0f;
    for (int i = 0; i < n_in; i++)
      q[(size_t)i * n_out + j] = (int8_t)lrintf(W[(size_t)i * n_out + j] / scale[j]);
  }
}

/* Deterministic action with int8 weights, the same arithmetic as the generated code. */
static void int8_forward(const sac_mlp_desc_t *d, int8_t *const *q, float *const *scale, const float *params,
                         const float *obs, float *a, float *buf0, float *buf1) {
  const float *in = obs;
  float *bufs[2] = {buf0, buf1};
  for (int l = 0; l < d->n_layers; l++) {
    int ni = d->sizes[l], no = d->sizes[l + 1];
    const float *b = params + sac_mlp_bias_offset(d, l);
    float *out = bufs[l & 1];
    for (int j = 0; j < no; j++) {
      float acc = 0.0f;
      for (int i = 0; i < ni; i++)
        acc += in[i] * (float)q[l][(size_t)i * no + j];
      acc = acc * scale[l][j] + b[j];
      out[j] = (l < d->n_layers - 1 && acc < 0.0f) ? 0.0f : acc;
    }
    in = out;
  }
  int A = d->sizes[d->n_layers] / 2;
  for (int i = 0; i < A; i++)
    a[i] = tanhf(in[i]);
}

static void emit_floats(FILE *f, const char *name, const float *v, size_t n) {
  fprintf(f, "static const float %s[%zu] = {", name, n);
  for (size_t i = 0; i < n; i++)
    fprintf(f, "%s%.9g", i % 8 ? ", " : (i ? ",\n  " : "\n  "), (double)v[i]);
  fprintf(f, "};\n");
}

static void emit_int8(FILE *f, const char *name, const int8_t *v, size_t n) {
  fprintf(f, "static const signed char %s[%zu] = {", name, n);
  for (size_t i = 0; i < n; i++)
    fprintf(f, "%s%d", i % 16 ? ", " : (i ? ",\n  " : "\n  "), v[i]);
  fprintf(f, "};\n");
}

int sac_export_c(const char *dir, const char *prefix, const sac_mlp_desc_t *d, const float *params, int int8,
                 double obs_scale, sac_export_report_t *report) {
  memset(report, 0, sizeof *report);
  if (!*prefix || !(isalpha((unsigned char)prefix[0]) || prefix[0] == '_')) {
    SAC_ERROR("export", "prefix \"%s\" is not a C identifier (a letter or '_' first)", prefix);
    return SAC_EINVAL;
  }
  for (const char *p = prefix; *p; p++)
    if (!isalnum((unsigned char)*p) && *p != '_') {
      SAC_ERROR("export", "prefix \"%s\" is not a C identifier", prefix);
      return SAC_EINVAL;
    }
  if (d->ensemble != 1 || d->hidden_act != SAC_ACT_RELU || d->sizes[d->n_layers] % 2)
    return SAC_EINVAL;
  const int L = d->n_layers, O = d->sizes[0], A = d->sizes[L] / 2;
  int8_t *q[SAC_MLP_MAX_LAYERS] = {0};
  float *sc[SAC_MLP_MAX_LAYERS] = {0};
  int rc = 0, maxw = sac_mlp_max_width(d);
  float *b0 = malloc(sizeof(float) * maxw * 4), *b1 = b0 ? b0 + maxw : NULL;
  if (!b0)
    return SAC_ENOMEM;
  for (int l = 0; l < L; l++) {
    size_t n = (size_t)d->sizes[l] * d->sizes[l + 1];
    q[l] = malloc(n);
    sc[l] = malloc(sizeof(float) * d->sizes[l + 1]);
    if (!q[l] || !sc[l]) {
      rc = SAC_ENOMEM;
      goto out;
    }
    quantise(params + sac_mlp_weight_offset(d, l), d->sizes[l], d->sizes[l + 1], q[l], sc[l]);
  }
  /* the quantisation's action error on random observations */
  {
    sac_rng_t rng;
    sac_rng_init(&rng, 2024, 7);
    float *obs = malloc(sizeof(float) * O), *a32 = malloc(sizeof(float) * A), *a8 = malloc(sizeof(float) * A);
    float *scratch = malloc(sizeof(float) * (2 * A + 2 * maxw));
    sac_policy_cfg_t pc = {-5, 2}; /* unused by the deterministic action */
    report->samples = 1000;
    double sum = 0;
    for (int s = 0; obs && a32 && a8 && scratch && s < report->samples; s++) {
      for (int i = 0; i < O; i++)
        obs[i] = (float)sac_rng_uniform_range(&rng, -obs_scale, obs_scale);
      sac_policy_act(d, params, &pc, obs, 1, 1, NULL, a32, scratch);
      int8_forward(d, q, sc, params, obs, a8, b0, b1);
      for (int i = 0; i < A; i++) {
        double e = fabs((double)a32[i] - a8[i]);
        sum += e;
        if (e > report->max_abs_error)
          report->max_abs_error = e;
      }
    }
    report->mean_abs_error = sum / ((double)report->samples * A);
    free(obs), free(a32), free(a8), free(scratch);
  }
  char path[1200];
  snprintf(path, sizeof path, "%s/%s.h", dir, prefix);
  FILE *h = fopen(path, "w");
  if (!h) {
    SAC_ERROR("export", "cannot write %s: %s", path, strerror(errno));
    rc = SAC_EIO;
    goto out;
  }
  char up[128];
  size_t k = 0;
  for (; prefix[k] && k < sizeof up - 1; k++)
    up[k] = (char)toupper((unsigned char)prefix[k]);
  up[k] = '\0';
  fprintf(h, "/* Generated by sac-export: a trained sacfleet policy, deterministic actions. */\n");
  fprintf(h, "#ifndef %s_H\n#define %s_H\n#define %s_OBS_DIM %d\n#define %s_ACT_DIM %d\n", up, up, up, O, up,
          A);
  fprintf(h,
          "/* action[%d] in [-1, 1] (scale to your actuator's range) from obs[%d]. Thread-safe,\n"
          " * allocates nothing, cannot fail. */\nvoid %s_act(const float *obs, float *action);\n#endif\n",
          A, O, prefix);
  if (fclose(h) != 0) {
    rc = SAC_EIO;
    goto out;
  }
  snprintf(path, sizeof path, "%s/%s.c", dir, prefix);
  FILE *f = fopen(path, "w");
  if (!f) {
    SAC_ERROR("export", "cannot write %s: %s", path, strerror(errno));
    rc = SAC_EIO;
    goto out;
  }
  fprintf(f, "/* Generated by sac-export (%s weights): the policy network %d", int8 ? "int8" : "fp32", O);
  for (int l = 1; l <= L; l++)
    fprintf(f, " -> %d", d->sizes[l]);
  fprintf(f,
          ", ReLU, action = tanh(mu). Plain C99 and <math.h>. */\n#include <math.h>\n#include \"%s.h\"\n\n",
          prefix);
  for (int l = 0; l < L; l++) {
    char nm[32];
    size_t n = (size_t)d->sizes[l] * d->sizes[l + 1];
    snprintf(nm, sizeof nm, "W%d", l);
    if (int8) {
      emit_int8(f, nm, q[l], n);
      snprintf(nm, sizeof nm, "S%d", l);
      emit_floats(f, nm, sc[l], (size_t)d->sizes[l + 1]);
    } else {
      emit_floats(f, nm, params + sac_mlp_weight_offset(d, l), n);
    }
    snprintf(nm, sizeof nm, "B%d", l);
    emit_floats(f, nm, params + sac_mlp_bias_offset(d, l), (size_t)d->sizes[l + 1]);
  }
  fprintf(
      f,
      "\nvoid %s_act(const float *obs, float *action) {\n  float h0[%d], h1[%d];\n  const float *in = obs;\n",
      prefix, maxw, maxw);
  for (int l = 0; l < L; l++) {
    int ni = d->sizes[l], no = d->sizes[l + 1];
    const char *out = l & 1 ? "h1" : "h0";
    fprintf(f, "  for (int j = 0; j < %d; j++) {\n    float acc = 0.0f;\n", no);
    fprintf(f, "    for (int i = 0; i < %d; i++)\n      acc += in[i] * %sW%d[i * %d + j];\n", ni,
            int8 ? "(float)" : "", l, no);
    if (int8)
      fprintf(f, "    acc = acc * S%d[j] + B%d[j];\n", l, l);
    else
      fprintf(f, "    acc += B%d[j];\n", l);
    if (l < L - 1)
      fprintf(f, "    %s[j] = acc < 0.0f ? 0.0f : acc;\n  }\n  in = %s;\n", out, out);
    else
      fprintf(f, "    %s[j] = acc;\n  }\n", out);
  }
  fprintf(f, "  for (int i = 0; i < %d; i++)\n    action[i] = tanhf(%s[i]);\n}\n", A,
          (L - 1) & 1 ? "h1" : "h0");
  if (fclose(f) != 0)
    rc = SAC_EIO;
out:
  for (int l = 0; l < L; l++)
    free(q[l]), free(sc[l]);
  free(b0);
  return rc;
}
