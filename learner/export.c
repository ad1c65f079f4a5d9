/* The policy exports (see export.h). The generated C code is plain C99 with <math.h> only;
 * its int8 path mirrors exactly the arithmetic of int8_forward() below, which is what the
 * error report measures. The ONNX model is built as protobuf-c messages on the stack and
 * the heap, packed once, and written whole. Both scale actions with the formula of the
 * actors and the evaluation (actor/actor.c, learner/train_local.c): low + 0.5 * (a + 1) *
 * (high - low), so they agree with sacfleet to the rounding of tanh. */
#include "learner/export.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/le.h"
#include "common/log.h"
#include "common/rng.h"
#include "onnx.pb-c.h"

#ifndef SAC_VERSION
#define SAC_VERSION "unknown"
#endif

static float scale_one(const sac_policy_env_t *env, int i, float a) {
  return env->act_low[i] + 0.5f * (a + 1.0f) * (env->act_high[i] - env->act_low[i]);
}

void sac_export_act(const sac_mlp_desc_t *d, const float *params, const sac_policy_env_t *env,
                    const float *obs, float *action, float *scratch) {
  assert(env->act_dim * 2 == d->sizes[d->n_layers]);
  sac_policy_cfg_t pc = {-5, 2}; /* unused by the deterministic action */
  sac_policy_act(d, params, &pc, obs, 1, 1, NULL, action, scratch);
  for (int i = 0; i < env->act_dim; i++)
    action[i] = scale_one(env, i, action[i]);
}

/* A policy both exports can write: one MLP whose output is (mu, log_std) for env's actions. */
static int check_policy(const sac_mlp_desc_t *d, const sac_policy_env_t *env) {
  if (d->ensemble != 1 || d->sizes[d->n_layers] != 2 * env->act_dim || env->act_dim < 1 ||
      (d->hidden_act != SAC_ACT_RELU && d->hidden_act != SAC_ACT_TANH && d->hidden_act != SAC_ACT_NONE)) {
    SAC_ERROR("export",
              "the policy's output (%d) is not the mean and log-std of the environment's %d actions",
              d->sizes[d->n_layers], env->act_dim);
    return SAC_EINVAL;
  }
  return 0;
}

static float hidden_act(sac_act_t a, float v) {
  return a == SAC_ACT_RELU ? (v < 0.0f ? 0.0f : v) : a == SAC_ACT_TANH ? tanhf(v) : v;
}

/* ---- the C source ---- */

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
                         const sac_policy_env_t *env, const float *obs, float *a, float *buf0, float *buf1) {
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
      out[j] = l < d->n_layers - 1 ? hidden_act(d->hidden_act, acc) : acc;
    }
    in = out;
  }
  for (int i = 0; i < env->act_dim; i++)
    a[i] = scale_one(env, i, tanhf(in[i]));
}

static int check_prefix(const char *prefix) {
  int ok = *prefix && (isalpha((unsigned char)prefix[0]) || prefix[0] == '_') && strlen(prefix) < 64;
  for (const char *p = prefix; ok && *p; p++)
    ok = isalnum((unsigned char)*p) || *p == '_';
  if (!ok) {
    SAC_ERROR("export",
              "prefix \"%s\" is not a C identifier (a letter or '_' first, then letters, digits, '_')",
              prefix);
    return SAC_EINVAL;
  }
  return 0;
}

/* The int8 forward's action error against fp32 on random observations. */
static int measure_int8_error(const sac_mlp_desc_t *d, int8_t *const *q, float *const *sc,
                              const float *params, const sac_policy_env_t *env, double obs_scale,
                              sac_export_report_t *report) {
  const int O = d->sizes[0], A = env->act_dim, maxw = sac_mlp_max_width(d);
  float *obs = malloc(sizeof(float) * O), *a32 = malloc(sizeof(float) * A), *a8 = malloc(sizeof(float) * A);
  float *scratch = malloc(sizeof(float) * (2 * A + 2 * maxw)), *b = malloc(sizeof(float) * 2 * maxw);
  int rc = obs && a32 && a8 && scratch && b ? 0 : SAC_ENOMEM;
  sac_rng_t rng;
  sac_rng_init(&rng, 2024, 7);
  report->samples = 1000;
  double sum = 0;
  for (int s = 0; rc == 0 && s < report->samples; s++) {
    for (int i = 0; i < O; i++)
      obs[i] = (float)sac_rng_uniform_range(&rng, -obs_scale, obs_scale);
    sac_export_act(d, params, env, obs, a32, scratch);
    int8_forward(d, q, sc, params, env, obs, a8, b, b + maxw);
    for (int i = 0; i < A; i++) {
      double e = fabs((double)a32[i] - a8[i]);
      sum += e;
      if (e > report->max_abs_error)
        report->max_abs_error = e;
    }
  }
  report->mean_abs_error = sum / ((double)report->samples * A);
  free(obs), free(a32), free(a8), free(scratch), free(b);
  return rc;
}

static void emit_floats(FILE *f, const char *qual, const char *name, const float *v, size_t n) {
  fprintf(f, "%sconst float %s[%zu] = {", qual, name, n);
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

/* s as the inside of a C string literal (an ID is printable ASCII or UTF-8). */
static void emit_c_string(FILE *f, const char *s) {
  for (; *s; s++)
    if (*s == '"' || *s == '\\')
      fprintf(f, "\\%c", *s);
    else if ((unsigned char)*s < 0x20 || (unsigned char)*s >= 0x7f)
      fprintf(f, "\\%03o", (unsigned char)*s);
    else
      fputc(*s, f);
}

static int write_c_header(const char *dir, const char *prefix, const sac_mlp_desc_t *d,
                          const sac_policy_env_t *env) {
  char path[1200], up[64];
  snprintf(path, sizeof path, "%s/%s.h", dir, prefix);
  FILE *h = fopen(path, "w");
  if (!h) {
    SAC_ERROR("export", "cannot write %s: %s", path, strerror(errno));
    return SAC_EIO;
  }
  size_t k = 0;
  for (; prefix[k] && k < sizeof up - 1; k++)
    up[k] = (char)toupper((unsigned char)prefix[k]);
  up[k] = '\0';
  const int A = env->act_dim;
  fprintf(h, "/* Generated by sac-export (sacfleet %s): a trained policy, deterministic actions. */\n",
          SAC_VERSION);
  fprintf(h, "#ifndef %s_H\n#define %s_H\n#define %s_OBS_DIM %d\n#define %s_ACT_DIM %d\n", up, up, up,
          d->sizes[0], up, A);
  fprintf(h, "/* the environment the policy was trained on (its --env) */\n#define %s_ENV_ID \"", up);
  emit_c_string(h, env->env);
  fprintf(h, "\"\n/* the action bounds: action[i] is in [%s_action_low[i], %s_action_high[i]] */\n", prefix,
          prefix);
  fprintf(h, "extern const float %s_action_low[%d], %s_action_high[%d];\n", prefix, A, prefix, A);
  fprintf(h,
          "/* action[%d] in the environment's units from obs[%d]. Thread-safe, allocates\n"
          " * nothing, cannot fail. */\nvoid %s_act(const float *obs, float *action);\n#endif\n",
          A, d->sizes[0], prefix);
  if (fclose(h) != 0) {
    SAC_ERROR("export", "cannot write %s: %s", path, strerror(errno));
    return SAC_EIO;
  }
  return 0;
}

/* The forward loop of layer l, reading `in`, writing h0 or h1. */
static void emit_layer(FILE *f, const sac_mlp_desc_t *d, int l, int int8) {
  int ni = d->sizes[l], no = d->sizes[l + 1], last = l == d->n_layers - 1;
  const char *out = l & 1 ? "h1" : "h0";
  if (last) /* only the mean is used: the log-std half of the output is not computed */
    no /= 2;
  fprintf(f, "  for (int j = 0; j < %d; j++) {\n    float acc = 0.0f;\n", no);
  fprintf(f, "    for (int i = 0; i < %d; i++)\n      acc += in[i] * %sW%d[i * %d + j];\n", ni,
          int8 ? "(float)" : "", l, d->sizes[l + 1]);
  if (int8)
    fprintf(f, "    acc = acc * S%d[j] + B%d[j];\n", l, l);
  else
    fprintf(f, "    acc += B%d[j];\n", l);
  if (last)
    fprintf(f, "    %s[j] = acc;\n  }\n", out);
  else if (d->hidden_act == SAC_ACT_RELU)
    fprintf(f, "    %s[j] = acc < 0.0f ? 0.0f : acc;\n  }\n  in = %s;\n", out, out);
  else if (d->hidden_act == SAC_ACT_TANH)
    fprintf(f, "    %s[j] = tanhf(acc);\n  }\n  in = %s;\n", out, out);
  else
    fprintf(f, "    %s[j] = acc;\n  }\n  in = %s;\n", out, out);
}

static int write_c_source(const char *dir, const char *prefix, const sac_mlp_desc_t *d, const float *params,
                          const sac_policy_env_t *env, int8_t *const *q, float *const *sc, int int8) {
  char path[1200];
  snprintf(path, sizeof path, "%s/%s.c", dir, prefix);
  FILE *f = fopen(path, "w");
  if (!f) {
    SAC_ERROR("export", "cannot write %s: %s", path, strerror(errno));
    return SAC_EIO;
  }
  const int L = d->n_layers, A = env->act_dim;
  static const char *const acts[] = {"identity", "ReLU", "tanh"};
  fprintf(f, "/* Generated by sac-export (sacfleet %s, %s weights) for ", SAC_VERSION,
          int8 ? "int8" : "fp32");
  for (const char *p = env->env; *p; p++) /* the ID in a comment: no comment end in it */
    fputc(*p == '*' || *p == '/' || (unsigned char)*p < 0x20 ? '_' : *p, f);
  fprintf(f, ": the policy network %d", d->sizes[0]);
  for (int l = 1; l <= L; l++)
    fprintf(f, " -> %d", d->sizes[l]);
  fprintf(f,
          ", %s, action = low + (tanh(mu) + 1) / 2 * (high - low).\n * Plain C99 and <math.h>. */\n"
          "#include <math.h>\n#include \"%s.h\"\n\n",
          acts[d->hidden_act], prefix);
  char nm[96];
  snprintf(nm, sizeof nm, "%s_action_low", prefix);
  emit_floats(f, "", nm, env->act_low, (size_t)A);
  snprintf(nm, sizeof nm, "%s_action_high", prefix);
  emit_floats(f, "", nm, env->act_high, (size_t)A);
  for (int l = 0; l < L; l++) {
    size_t n = (size_t)d->sizes[l] * d->sizes[l + 1];
    snprintf(nm, sizeof nm, "W%d", l);
    if (int8) {
      emit_int8(f, nm, q[l], n);
      snprintf(nm, sizeof nm, "S%d", l);
      emit_floats(f, "static ", nm, sc[l], (size_t)d->sizes[l + 1]);
    } else {
      emit_floats(f, "static ", nm, params + sac_mlp_weight_offset(d, l), n);
    }
    snprintf(nm, sizeof nm, "B%d", l);
    emit_floats(f, "static ", nm, params + sac_mlp_bias_offset(d, l), (size_t)d->sizes[l + 1]);
  }
  int maxw = sac_mlp_max_width(d);
  fprintf(
      f,
      "\nvoid %s_act(const float *obs, float *action) {\n  float h0[%d], h1[%d];\n  const float *in = obs;\n",
      prefix, maxw, maxw);
  for (int l = 0; l < L; l++)
    emit_layer(f, d, l, int8);
  fprintf(
      f,
      "  for (int i = 0; i < %d; i++)\n    action[i] = %s_action_low[i] + 0.5f * (tanhf(%s[i]) + 1.0f) *\n"
      "                                        (%s_action_high[i] - %s_action_low[i]);\n}\n",
      A, prefix, (L - 1) & 1 ? "h1" : "h0", prefix, prefix);
  if (fclose(f) != 0) {
    SAC_ERROR("export", "cannot write %s: %s", path, strerror(errno));
    return SAC_EIO;
  }
  return 0;
}

int sac_export_c(const char *dir, const char *prefix, const sac_mlp_desc_t *d, const float *params,
                 const sac_policy_env_t *env, int int8, double obs_scale, sac_export_report_t *report) {
  memset(report, 0, sizeof *report);
  int rc;
  if ((rc = check_prefix(prefix)) != 0 || (rc = check_policy(d, env)) != 0)
    return rc;
  const int L = d->n_layers;
  int8_t *q[SAC_MLP_MAX_LAYERS] = {0};
  float *sc[SAC_MLP_MAX_LAYERS] = {0};
  for (int l = 0; l < L && rc == 0; l++) {
    q[l] = malloc((size_t)d->sizes[l] * d->sizes[l + 1]);
    sc[l] = malloc(sizeof(float) * d->sizes[l + 1]);
    if (!q[l] || !sc[l])
      rc = SAC_ENOMEM;
    else
      quantise(params + sac_mlp_weight_offset(d, l), d->sizes[l], d->sizes[l + 1], q[l], sc[l]);
  }
  if (rc == 0)
    rc = measure_int8_error(d, q, sc, params, env, obs_scale, report);
  if (rc == 0)
    rc = write_c_header(dir, prefix, d, env);
  if (rc == 0)
    rc = write_c_source(dir, prefix, d, params, env, q, sc, int8);
  for (int l = 0; l < L; l++)
    free(q[l]), free(sc[l]);
  return rc;
}

/* ---- the ONNX model ---- */

#define ONNX_IR_VERSION 8 /* the IR of opset 17 */
#define ONNX_OPSET 17
#define MAX_NODES (2 * SAC_MLP_MAX_LAYERS + 4)
#define MAX_INITS (2 * SAC_MLP_MAX_LAYERS + 3)
#define MAX_META 12

/* Everything the model's messages point into, freed at once by model_free. */
typedef struct {
  Onnx__NodeProto nodes[MAX_NODES], *node_p[MAX_NODES];
  char node_io[MAX_NODES][4][32], *node_in[MAX_NODES][3], *node_out[MAX_NODES][1]; /* 3 inputs, 1 output */
  Onnx__TensorProto inits[MAX_INITS], *init_p[MAX_INITS];
  char init_name[MAX_INITS][32];
  int64_t init_dims[MAX_INITS][2];
  unsigned char *init_data[MAX_INITS]; /* little-endian float32, as raw_data wants */
  int n_nodes, n_inits;
  Onnx__StringStringEntryProto meta[MAX_META], *meta_p[MAX_META];
  char meta_val[MAX_META][4096];
  int n_meta;
} onnx_build_t;

/* A float initializer of rank 0 to 2 (dims[k] < 0: absent), data copied. */
static int add_init(onnx_build_t *b, const char *name, const float *v, int64_t d0, int64_t d1) {
  assert(b->n_inits < MAX_INITS);
  int k = b->n_inits++;
  size_t n = (size_t)(d0 < 0 ? 1 : d0) * (size_t)(d1 < 0 ? 1 : d1);
  Onnx__TensorProto *t = &b->inits[k];
  onnx__tensor_proto__init(t);
  snprintf(b->init_name[k], sizeof b->init_name[k], "%s", name);
  t->name = b->init_name[k];
  t->data_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
  b->init_dims[k][0] = d0, b->init_dims[k][1] = d1;
  t->n_dims = d0 < 0 ? 0 : d1 < 0 ? 1 : 2;
  t->dims = b->init_dims[k];
  if (!(b->init_data[k] = malloc(sizeof(float) * n)))
    return SAC_ENOMEM;
  for (size_t i = 0; i < n; i++) {
    uint32_t bits;
    memcpy(&bits, &v[i], 4);
    sac_le_put32(b->init_data[k] + 4 * i, bits);
  }
  t->raw_data.data = b->init_data[k];
  t->raw_data.len = sizeof(float) * n;
  b->init_p[k] = t;
  return 0;
}

/* A node op(in0[, in1[, in2]]) -> out. */
static void add_node(onnx_build_t *b, const char *op, const char *in0, const char *in1, const char *in2,
                     const char *out) {
  assert(b->n_nodes < MAX_NODES);
  int k = b->n_nodes++;
  Onnx__NodeProto *n = &b->nodes[k];
  onnx__node_proto__init(n);
  n->op_type = (char *)op;
  const char *ins[3] = {in0, in1, in2};
  for (int i = 0; i < 3 && ins[i]; i++) {
    snprintf(b->node_io[k][i], sizeof b->node_io[k][i], "%s", ins[i]);
    b->node_in[k][n->n_input++] = b->node_io[k][i];
  }
  n->input = b->node_in[k];
  snprintf(b->node_io[k][3], sizeof b->node_io[k][3], "%s", out);
  b->node_out[k][0] = b->node_io[k][3];
  n->n_output = 1;
  n->output = b->node_out[k];
  b->node_p[k] = n;
}

static void add_meta(onnx_build_t *b, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void add_meta(onnx_build_t *b, const char *key, const char *fmt, ...) {
  assert(b->n_meta < MAX_META);
  int k = b->n_meta++;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(b->meta_val[k], sizeof b->meta_val[k], fmt, ap);
  va_end(ap);
  onnx__string_string_entry_proto__init(&b->meta[k]);
  b->meta[k].key = (char *)key;
  b->meta[k].value = b->meta_val[k];
  b->meta_p[k] = &b->meta[k];
}

/* "v0,v1,..." of n floats, %.9g (a float read back exactly); cut short at cap. */
static void floats_csv(char *out, size_t cap, const float *v, int n) {
  size_t k = 0;
  out[0] = '\0';
  for (int i = 0; i < n && k < cap; i++) {
    int w = snprintf(out + k, cap - k, "%s%.9g", i ? "," : "", (double)v[i]);
    k += w > 0 ? (size_t)w : cap;
  }
}

/* The layers as Gemm (+ activation) nodes; the last keeps only the mean's columns. */
static int build_layers(onnx_build_t *b, const sac_mlp_desc_t *d, const float *params) {
  const int L = d->n_layers, A = d->sizes[L] / 2;
  static const char *const act_op[] = {NULL, "Relu", "Tanh"};
  char in[32] = "obs", w[32], bias[32], out[32];
  for (int l = 0; l < L; l++) {
    int ni = d->sizes[l], no = d->sizes[l + 1], rc;
    const float *W = params + sac_mlp_weight_offset(d, l), *B = params + sac_mlp_bias_offset(d, l);
    snprintf(w, sizeof w, "layer%d.weight", l);
    snprintf(bias, sizeof bias, "layer%d.bias", l);
    if (l < L - 1) {
      rc = add_init(b, w, W, ni, no);
    } else { /* the mean: the first A of each row's 2A columns */
      float *m = malloc(sizeof(float) * (size_t)ni * A);
      if (!m)
        return SAC_ENOMEM;
      for (int i = 0; i < ni; i++)
        memcpy(m + (size_t)i * A, W + (size_t)i * no, sizeof(float) * A);
      rc = add_init(b, w, m, ni, A);
      free(m);
      no = A;
    }
    if (rc || (rc = add_init(b, bias, B, no, -1)) != 0)
      return rc;
    if (l < L - 1)
      snprintf(out, sizeof out, "layer%d.linear", l);
    else
      snprintf(out, sizeof out, "mean");
    add_node(b, "Gemm", in, w, bias, out); /* y = x W + b: Gemm's defaults (alpha 1, beta 1, no transposes) */
    snprintf(in, sizeof in, "%s", out);
    if (l < L - 1 && act_op[d->hidden_act]) {
      snprintf(out, sizeof out, "layer%d.act", l);
      add_node(b, act_op[d->hidden_act], in, NULL, NULL, out);
      snprintf(in, sizeof in, "%s", out);
    }
  }
  return 0;
}

/* action = low + (tanh(mean) + 1) * ((high - low) / 2): the actors' formula, whose
 * halving is exact in float, so the products round as theirs do. */
static int build_head(onnx_build_t *b, const sac_policy_env_t *env) {
  const int A = env->act_dim;
  float one = 1.0f, half_range[SAC_ENV_MAX_ACT];
  for (int i = 0; i < A; i++)
    half_range[i] = 0.5f * (env->act_high[i] - env->act_low[i]);
  int rc;
  if ((rc = add_init(b, "one", &one, -1, -1)) != 0 ||
      (rc = add_init(b, "half_range", half_range, A, -1)) != 0 ||
      (rc = add_init(b, "action_low", env->act_low, A, -1)) != 0)
    return rc;
  add_node(b, "Tanh", "mean", NULL, NULL, "squashed");
  add_node(b, "Add", "squashed", "one", NULL, "shifted");
  add_node(b, "Mul", "shifted", "half_range", NULL, "scaled");
  add_node(b, "Add", "scaled", "action_low", NULL, "action");
  return 0;
}

static void build_meta(onnx_build_t *b, const sac_mlp_desc_t *d, const sac_policy_env_t *env) {
  static const char *const acts[] = {"identity", "relu", "tanh"};
  char sizes[256];
  size_t k = 0;
  for (int l = 0; l <= d->n_layers && k < sizeof sizes; l++) { /* 17 sizes of 7 digits at most: it fits */
    int w = snprintf(sizes + k, sizeof sizes - k, "%s%d", l ? "," : "", d->sizes[l]);
    k += w > 0 ? (size_t)w : sizeof sizes;
  }
  add_meta(b, "env_id", "%s", env->env);
  add_meta(b, "obs_dim", "%d", d->sizes[0]);
  add_meta(b, "act_dim", "%d", env->act_dim);
  char csv[sizeof b->meta_val[0]];
  floats_csv(csv, sizeof csv, env->act_low, env->act_dim);
  add_meta(b, "action_low", "%s", csv);
  floats_csv(csv, sizeof csv, env->act_high, env->act_dim);
  add_meta(b, "action_high", "%s", csv);
  add_meta(b, "layer_sizes", "%s", sizes);
  add_meta(b, "hidden_activation", "%s", acts[d->hidden_act]);
  add_meta(b, "sacfleet_version", "%s", SAC_VERSION);
  add_meta(b, "action", "deterministic: low + (tanh(mean) + 1) / 2 * (high - low)");
}

/* A graph input or output: float, (batch, n) with the batch dimension named, any size. */
typedef struct {
  Onnx__ValueInfoProto vi;
  Onnx__TypeProto type;
  Onnx__TypeProto__Tensor tensor;
  Onnx__TensorShapeProto shape;
  Onnx__TensorShapeProto__Dimension dims[2], *dim_p[2];
} onnx_io_t;

static void io_init(onnx_io_t *io, const char *name, const char *doc, int n) {
  onnx__value_info_proto__init(&io->vi);
  onnx__type_proto__init(&io->type);
  onnx__type_proto__tensor__init(&io->tensor);
  onnx__tensor_shape_proto__init(&io->shape);
  for (int i = 0; i < 2; i++) {
    onnx__tensor_shape_proto__dimension__init(&io->dims[i]);
    io->dim_p[i] = &io->dims[i];
  }
  io->dims[0].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
  io->dims[0].dim_param = "batch";
  io->dims[1].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
  io->dims[1].dim_value = n;
  io->shape.n_dim = 2;
  io->shape.dim = io->dim_p;
  io->tensor.elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
  io->tensor.shape = &io->shape;
  io->type.value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  io->type.tensor_type = &io->tensor;
  io->vi.name = (char *)name;
  io->vi.doc_string = (char *)doc;
  io->vi.type = &io->type;
}

static int write_whole(const char *path, const uint8_t *buf, size_t len) {
  char tmp[1200];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    SAC_ERROR("export", "cannot write %s: %s", tmp, strerror(errno));
    return SAC_EIO;
  }
  int bad = fwrite(buf, 1, len, f) != len;
  if (fclose(f) != 0 || bad || rename(tmp, path) != 0) {
    SAC_ERROR("export", "cannot write %s: %s", path, strerror(errno));
    remove(tmp);
    return SAC_EIO;
  }
  return 0;
}

static void model_free(onnx_build_t *b) {
  for (int k = 0; k < b->n_inits; k++)
    free(b->init_data[k]);
  free(b);
}

int sac_export_onnx(const char *path, const sac_mlp_desc_t *d, const float *params,
                    const sac_policy_env_t *env) {
  int rc = check_policy(d, env);
  if (rc)
    return rc;
  onnx_build_t *b = calloc(1, sizeof *b);
  if (!b)
    return SAC_ENOMEM;
  if ((rc = build_layers(b, d, params)) != 0 || (rc = build_head(b, env)) != 0) {
    model_free(b);
    return rc;
  }
  build_meta(b, d, env);
  onnx_io_t in, out;
  io_init(&in, "obs", "observations, one row per environment", d->sizes[0]);
  io_init(&out, "action", "deterministic actions in the environment's bounds", env->act_dim);
  Onnx__ValueInfoProto *in_p = &in.vi, *out_p = &out.vi;
  Onnx__GraphProto g;
  onnx__graph_proto__init(&g);
  g.name = "sacfleet_policy";
  g.n_node = (size_t)b->n_nodes, g.node = b->node_p;
  g.n_initializer = (size_t)b->n_inits, g.initializer = b->init_p;
  g.n_input = 1, g.input = &in_p;
  g.n_output = 1, g.output = &out_p;
  Onnx__OperatorSetIdProto opset;
  onnx__operator_set_id_proto__init(&opset);
  opset.domain = "";
  opset.version = ONNX_OPSET;
  Onnx__OperatorSetIdProto *opset_p = &opset;
  Onnx__ModelProto m;
  onnx__model_proto__init(&m);
  m.ir_version = ONNX_IR_VERSION;
  m.producer_name = "sacfleet";
  m.producer_version = SAC_VERSION;
  m.doc_string = "A Soft Actor-Critic policy trained by sacfleet: obs -> deterministic action.";
  m.graph = &g;
  m.n_opset_import = 1, m.opset_import = &opset_p;
  m.n_metadata_props = (size_t)b->n_meta, m.metadata_props = b->meta_p;
  size_t len = onnx__model_proto__get_packed_size(&m);
  uint8_t *buf = malloc(len ? len : 1);
  if (!buf) {
    model_free(b);
    return SAC_ENOMEM;
  }
  onnx__model_proto__pack(&m, buf);
  rc = write_whole(path, buf, len);
  free(buf);
  model_free(b);
  return rc;
}
