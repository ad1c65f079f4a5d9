/* sacfleet's own side of the export tests (tests/test_export_onnx.py): writes policy files
 * of given shapes and bounds, and answers with sacfleet's own deterministic actions and
 * Pendulum returns, for the ONNX model, the NumPy reader and the Python example to be
 * compared with.
 *
 *   export_ref make OUT.bin OBS HIDDEN DEPTH ACT ENV LOWS HIGHS SEED [PERTURB]
 *       random weights (PyTorch's default initialisation, times 2 so that actions reach
 *       the tanh's curved part), format 2 with ENV and the bounds (comma-separated);
 *       PERTURB adds that much to the last layer's first weight (a negative control)
 *   export_ref act POLICY.bin OBS.f32 OUT.f32
 *       raw float32 observations (rows of obs_dim) -> raw float32 actions (rows of act_dim)
 *   export_ref pendulum POLICY.bin THETA THETADOT
 *       one deterministic Pendulum-v1 episode from that state, the return on stdout
 * Exit 0, or 1 with the reason on stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/env.h"
#include "common/error.h"
#include "common/rng.h"
#include "learner/export.h"
#include "learner/rundir.h"

static int parse_floats(const char *s, float *v, int n) {
  char *end;
  for (int i = 0; i < n; i++) {
    v[i] = strtof(s, &end);
    if (end == s || (i < n - 1 && *end != ','))
      return -1;
    s = end + 1;
  }
  return *end == '\0' ? 0 : -1;
}

static int make(int argc, char **argv) {
  if (argc < 11)
    return fprintf(stderr, "make OUT OBS HIDDEN DEPTH ACT ENV LOWS HIGHS SEED [PERTURB]\n"), 1;
  int obs = atoi(argv[3]), hidden = atoi(argv[4]), depth = atoi(argv[5]), act = atoi(argv[6]);
  sac_mlp_desc_t d;
  sac_policy_env_t e = {.act_dim = act};
  if (act < 1 || act > SAC_ENV_MAX_ACT ||
      sac_mlp_desc_init(&d, obs, hidden, depth, 2 * act, SAC_ACT_RELU, 1) ||
      parse_floats(argv[8], e.act_low, act) || parse_floats(argv[9], e.act_high, act))
    return fprintf(stderr, "make: bad sizes or bounds\n"), 1;
  snprintf(e.env, sizeof e.env, "%s", argv[7]);
  size_t n = sac_mlp_param_count(&d);
  float *p = malloc(n * sizeof(float));
  sac_rng_t rng;
  sac_rng_init(&rng, strtoull(argv[10], NULL, 10), 3);
  sac_mlp_init_params(&d, p, &rng);
  for (size_t i = 0; i < n; i++)
    p[i] *= 2.0f;
  if (argc > 11)
    p[sac_mlp_weight_offset(&d, d.n_layers - 1)] += strtof(argv[11], NULL);
  int rc = sac_policy_save(argv[2], &d, p, -5.0f, 2.0f, &e);
  free(p);
  return rc ? 1 : 0;
}

/* A format-2 policy file: 0, or 1 with the reason on stderr. */
static int load(const char *path, sac_mlp_desc_t *d, float **p, sac_policy_env_t *e) {
  float lo, hi;
  if (sac_policy_load_env(path, d, p, &lo, &hi, e) || !e->act_dim)
    return fprintf(stderr, "%s: no format-2 policy\n", path), 1;
  return 0;
}

static int act(int argc, char **argv) {
  if (argc < 5)
    return fprintf(stderr, "act POLICY OBS.f32 OUT.f32\n"), 1;
  sac_mlp_desc_t d;
  sac_policy_env_t e;
  float *p;
  if (load(argv[2], &d, &p, &e))
    return 1;
  FILE *in = fopen(argv[3], "rb"), *out = fopen(argv[4], "wb");
  if (!in || !out)
    return fprintf(stderr, "act: cannot open the files\n"), 1;
  int O = d.sizes[0];
  float *o = malloc(sizeof(float) * O), a[SAC_ENV_MAX_ACT];
  float *scratch = malloc(sizeof(float) * (2 * e.act_dim + 2 * sac_mlp_max_width(&d)));
  while (fread(o, sizeof(float), (size_t)O, in) == (size_t)O) {
    sac_export_act(&d, p, &e, o, a, scratch);
    fwrite(a, sizeof(float), (size_t)e.act_dim, out);
  }
  int bad = ferror(in) || fclose(out) != 0;
  fclose(in);
  free(o), free(scratch), free(p);
  return bad;
}

static int pendulum(int argc, char **argv) {
  if (argc < 5)
    return fprintf(stderr, "pendulum POLICY THETA THETADOT\n"), 1;
  sac_mlp_desc_t d;
  sac_policy_env_t e;
  float *p;
  sac_env_t *env;
  if (load(argv[2], &d, &p, &e) || sac_env_new("Pendulum-v1", 1, 0, &env))
    return fprintf(stderr, "pendulum: cannot load the policy or make the environment\n"), 1;
  double state[2] = {strtod(argv[3], NULL), strtod(argv[4], NULL)}, ret = 0;
  float obs[3], a[1], scratch[2 + 2 * 1024], r;
  int term = 0, trunc = 0;
  if (d.sizes[0] != 3 || e.act_dim != 1 || sac_mlp_max_width(&d) > 1024 || sac_env_reset(env, obs) ||
      sac_env_set_state(env, state, 2, obs))
    return fprintf(stderr, "pendulum: not a Pendulum policy, or the state was refused\n"), 1;
  while (!term && !trunc) {
    sac_export_act(&d, p, &e, obs, a, scratch);
    if (sac_env_step(env, a, obs, &r, &term, &trunc))
      return 1;
    ret += r;
  }
  printf("%.9g\n", ret);
  sac_env_destroy(&env);
  free(p);
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "make") == 0)
    return make(argc, argv);
  if (argc > 1 && strcmp(argv[1], "act") == 0)
    return act(argc, argv);
  if (argc > 1 && strcmp(argv[1], "pendulum") == 0)
    return pendulum(argc, argv);
  fprintf(stderr, "usage: export_ref make|act|pendulum ...\n");
  return 1;
}
