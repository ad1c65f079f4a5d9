/* sac-export: turns a run's policy.bin into a dependency-free C source and header for
 * embedding (fp32, or --int8 with the action error reported). Exit codes: 0 written,
 * 1 failure, 2 bad arguments. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "common/error.h"
#include "learner/export.h"
#include "learner/rundir.h"

typedef struct {
  char policy[1024], out[1024], prefix[64];
  int int8;
  double obs_scale;
} export_cfg_t;

#define S_(k, f, d, h)                                                                                       \
  { k, SAC_CFG_STRING, offsetof(export_cfg_t, f), sizeof(((export_cfg_t *)0)->f), d, 1, 0, h }
static const sac_cfg_opt_t k_opts[] = {
    S_("policy", policy, "", "the policy file (a run directory's policy.bin)"),
    S_("out", out, ".", "directory for PREFIX.c and PREFIX.h"),
    S_("prefix", prefix, "policy", "C name prefix: the function is PREFIX_act"),
    {"int8", SAC_CFG_BOOL, offsetof(export_cfg_t, int8), 0, "false", 1, 0, "int8 weights (per-unit scales)"},
    {"obs_scale", SAC_CFG_DOUBLE, offsetof(export_cfg_t, obs_scale), 0, "1.0", 1e-9, 1e9,
     "random observations for the int8 error report are uniform in [-obs_scale, obs_scale]"},
};

int main(int argc, char **argv) {
  export_cfg_t c;
  int action;
  if (sac_config_load(k_opts, sizeof k_opts / sizeof k_opts[0], &c, argc, argv,
                      "sac-export: a trained policy as C source for embedding", &action))
    return 2;
  if (action == SAC_CFG_EXIT_OK)
    return 0;
  if (!c.policy[0]) {
    fprintf(stderr, "sac-export: --policy FILE is required (a run directory's policy.bin)\n");
    return 2;
  }
  sac_mlp_desc_t d;
  float *params, lo, hi;
  int rc = sac_policy_load(c.policy, &d, &params, &lo, &hi);
  if (rc)
    return 1;
  sac_export_report_t rep;
  rc = sac_export_c(c.out, c.prefix, &d, params, c.int8, c.obs_scale, &rep);
  free(params);
  if (rc) {
    fprintf(stderr, "sac-export: %s\n", sac_strerror(rc));
    return rc == SAC_EINVAL ? 2 : 1;
  }
  printf("wrote %s/%s.c and %s/%s.h (%s weights)\n", c.out, c.prefix, c.out, c.prefix,
         c.int8 ? "int8" : "fp32");
  printf("int8 quantisation, action error against fp32 over %d random observations: max %.5f, mean %.6f\n",
         rep.samples, rep.max_abs_error, rep.mean_abs_error);
  return 0;
}
