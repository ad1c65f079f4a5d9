/* libFuzzer target for the policy file reader (learner/rundir.c: sac_policy_load, the
 * reader of a run's policy.bin that `sac-export` uses), through files the fuzzer writes.
 * Properties beyond "no crash, no leak, no UB": a load returns one of its documented
 * codes (0, SAC_EIO, SAC_EPROTO, SAC_ENOMEM) and hands out params only on success; a
 * loaded policy has a valid layer chain and the parameter count its file held (format 2:
 * with bounds low < high, one pair per action), and the
 * fp32 inference runs on it within its buffers. Seeds (SAC_FUZZ_SEED_DIR): policy files
 * written by sac_policy_save. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "common/log.h"
#include "common/mlp.h"
#include "learner/rundir.h"

static char g_in[512];

static void seed(const char *dir, const char *name, int in, int hidden, int depth, int out, int with_env) {
  sac_mlp_desc_t d;
  if (sac_mlp_desc_init(&d, in, hidden, depth, out, SAC_ACT_RELU, 1) != 0)
    return;
  size_t n = sac_mlp_param_count(&d);
  float *p = calloc(n, sizeof(float));
  if (!p)
    return;
  for (size_t i = 0; i < n; i++)
    p[i] = 0.01f * (float)(i % 13);
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  sac_policy_env_t env = {.act_dim = out / 2};
  snprintf(env.env, sizeof env.env, "Pendulum-v1");
  for (int i = 0; i < env.act_dim; i++)
    env.act_low[i] = -2.0f, env.act_high[i] = 2.0f;
  sac_policy_save(path, &d, p, -5.0f, 2.0f, with_env ? &env : NULL);
  free(p);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  sac_log_set_level(SAC_LOG_ERROR);
  const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  snprintf(g_in, sizeof g_in, "%s/sac-fuzz-policy-%ld.bin", tmp, (long)getpid());
  const char *dir = getenv("SAC_FUZZ_SEED_DIR");
  if (dir) {
    seed(dir, "pendulum_small", 3, 8, 2, 2, 0);
    seed(dir, "linear", 5, 1, 0, 4, 0);
    seed(dir, "pendulum_env", 3, 8, 2, 2, 1); /* format 2 */
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  FILE *f = fopen(g_in, "wb");
  if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0)
    abort();
  sac_mlp_desc_t d;
  float *params = (float *)&d; /* must be replaced */
  float lo = 0, hi = 0;
  sac_policy_env_t env;
  int rc = sac_policy_load_env(g_in, &d, &params, &lo, &hi, &env);
  if (rc != 0) {
    if ((rc != SAC_EIO && rc != SAC_EPROTO && rc != SAC_ENOMEM) || params != NULL)
      abort();
    return 0;
  }
  if (!params || d.n_layers < 1 || d.n_layers > SAC_MLP_MAX_LAYERS || d.ensemble != 1)
    abort();
  for (int l = 0; l <= d.n_layers; l++)
    if (d.sizes[l] < 1)
      abort();
  size_t n = sac_mlp_param_count(&d);
  /* the file held exactly the header (format 2: and the env ID and bounds) and n floats */
  size_t header = 8 + 4 + 4 * (size_t)(d.n_layers + 1) + 12;
  if (env.act_dim) {
    if (env.act_dim * 2 != d.sizes[d.n_layers])
      abort();
    for (int i = 0; i < env.act_dim; i++)
      if (!(env.act_low[i] < env.act_high[i]))
        abort();
    header += 4 + strlen(env.env) + 8 * (size_t)env.act_dim;
  }
  if (header + n * sizeof(float) != size)
    abort();
  if (n <= (1u << 16)) { /* fp32 inference over one row, as sac-export's check does */
    int w = sac_mlp_max_width(&d);
    float *x = calloc((size_t)d.sizes[0], sizeof(float));
    float *y = malloc((size_t)d.sizes[d.n_layers] * sizeof(float));
    float *scratch = malloc(2 * (size_t)w * sizeof(float));
    if (!x || !y || !scratch)
      abort();
    sac_mlp_forward(&d, params, x, 1, d.sizes[0], y, d.sizes[d.n_layers], scratch);
    free(x), free(y), free(scratch);
  }
  free(params);
  return 0;
}
