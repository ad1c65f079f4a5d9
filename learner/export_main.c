/* sac-export: turns a run's policy.bin into something that runs without sacfleet: a
 * dependency-free C source and header for embedding (fp32, or --int8 with the action error
 * reported), or an ONNX model (--format onnx) for onnxruntime and the other ONNX readers.
 * Both give actions in the environment's own bounds, recorded in policy.bin (or, for a
 * file that records none, those of --env). Exit codes: 0 written, 1 failure, 2 bad
 * arguments. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/config.h"
#include "common/env.h"
#include "common/error.h"
#include "common/log.h"
#include "learner/export.h"
#include "learner/rundir.h"

typedef struct {
  char policy[1024], out[1024], prefix[64], format[16], env[256];
  int int8;
  double obs_scale;
} export_cfg_t;

#define S_(k, f, d, h)                                                                                       \
  { k, SAC_CFG_STRING, offsetof(export_cfg_t, f), sizeof(((export_cfg_t *)0)->f), d, 1, 0, h }
static const sac_cfg_opt_t k_opts[] = {
    S_("policy", policy, "", "the policy: a run directory or its policy.bin"),
    S_("format", format, "c", "c (PREFIX.c and PREFIX.h) | onnx (PREFIX.onnx)"),
    S_("out", out, ".", "directory the files are written to"),
    S_("prefix", prefix, "policy", "file name and C name prefix: the C function is PREFIX_act"),
    S_("env", env, "",
       "environment whose action bounds apply when the policy file records none (an older policy.bin); "
       "must match the one recorded otherwise"),
    {"int8", SAC_CFG_BOOL, offsetof(export_cfg_t, int8), 0, "false", 1, 0,
     "format c: int8 weights (per-unit scales)"},
    {"obs_scale", SAC_CFG_DOUBLE, offsetof(export_cfg_t, obs_scale), 0, "1.0", 1e-9, 1e9,
     "random observations for the int8 error report are uniform in [-obs_scale, obs_scale]"},
};

/* The bounds the actions are scaled to: the file's, or --env's for a file without them. */
static int resolve_env(const export_cfg_t *c, sac_policy_env_t *pe) {
  if (pe->act_dim) {
    if (c->env[0] && strcmp(c->env, pe->env) != 0) {
      fprintf(stderr, "sac-export: %s was trained on %s, not --env %s\n", c->policy, pe->env, c->env);
      return 2;
    }
    return 0;
  }
  if (!c->env[0]) {
    fprintf(
        stderr,
        "sac-export: %s records no environment (an older policy file): give --env ID for its action bounds\n",
        c->policy);
    return 2;
  }
  sac_env_t *e;
  if (sac_env_new(c->env, 1, 0, &e) != 0) {
    fprintf(stderr, "sac-export: cannot create --env %s for its action bounds\n", c->env);
    return 1;
  }
  sac_policy_env_from_spec(pe, c->env, sac_env_spec(e));
  sac_env_destroy(&e);
  return 0;
}

int main(int argc, char **argv) {
  export_cfg_t c;
  int action;
  if (sac_config_load(k_opts, sizeof k_opts / sizeof k_opts[0], &c, argc, argv,
                      "sac-export: a trained policy as C source or an ONNX model", &action))
    return 2;
  if (action == SAC_CFG_EXIT_OK)
    return 0;
  int onnx = strcmp(c.format, "onnx") == 0;
  if (!onnx && strcmp(c.format, "c") != 0) {
    fprintf(stderr, "sac-export: --format is c or onnx, not %s\n", c.format);
    return 2;
  }
  if (onnx && c.int8) {
    fprintf(stderr, "sac-export: --int8 is for --format c (the ONNX model keeps fp32 weights)\n");
    return 2;
  }
  if (!c.policy[0]) {
    fprintf(stderr, "sac-export: --policy FILE is required (a run directory or its policy.bin)\n");
    return 2;
  }
  struct stat st;
  if (stat(c.policy, &st) == 0 && S_ISDIR(st.st_mode)) /* a run directory: its policy.bin */
    strncat(c.policy, "/policy.bin", sizeof c.policy - strlen(c.policy) - 1);
  sac_mlp_desc_t d;
  sac_policy_env_t pe;
  float *params, lo, hi;
  if (sac_policy_load_env(c.policy, &d, &params, &lo, &hi, &pe) != 0)
    return 1;
  int rc = resolve_env(&c, &pe);
  if (rc) {
    free(params);
    return rc;
  }
  sac_export_report_t rep;
  char path[1200];
  if (onnx) {
    snprintf(path, sizeof path, "%s/%s.onnx", c.out, c.prefix);
    rc = sac_export_onnx(path, &d, params, &pe);
  } else {
    rc = sac_export_c(c.out, c.prefix, &d, params, &pe, c.int8, c.obs_scale, &rep);
  }
  free(params);
  if (rc) {
    fprintf(stderr, "sac-export: %s\n", sac_strerror(rc));
    return rc == SAC_EINVAL ? 2 : 1;
  }
  if (onnx) {
    printf("wrote %s (env %s, obs %d, act %d; input \"obs\", output \"action\", batch dimension free)\n",
           path, pe.env, d.sizes[0], pe.act_dim);
    return 0;
  }
  printf("wrote %s/%s.c and %s/%s.h (%s weights; env %s, obs %d, act %d)\n", c.out, c.prefix, c.out, c.prefix,
         c.int8 ? "int8" : "fp32", pe.env, d.sizes[0], pe.act_dim);
  printf("int8 quantisation, action error against fp32 over %d random observations: max %.5f, mean %.6f\n",
         rep.samples, rep.max_abs_error, rep.mean_abs_error);
  return 0;
}
