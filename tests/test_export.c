/* Policy export and the policy file: the generated C source, compiled by the system
 * compiler into a small program, reproduces sacfleet's deterministic actions in the
 * environment's bounds (fp32: to float rounding; int8: within the error the exporter
 * reports) and carries the environment ID; a bad prefix and a policy of another action
 * size are refused; policy.bin format 2 keeps the env ID and bounds, format 1 still loads,
 * and damaged files are refused. The ONNX model is checked against onnxruntime in
 * tests/test_export_onnx.py. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "common/rng.h"
#include "learner/export.h"
#include "learner/rundir.h"
#include "learner/sac.h"

static const char *k_main =
    "#include <stdio.h>\n#include \"pol.h\"\nint main(void) {\n  float o[POL_OBS_DIM], a[POL_ACT_DIM];\n"
    "  printf(\"%s\\n\", POL_ENV_ID);\n"
    "  for (;;) {\n    for (int i = 0; i < POL_OBS_DIM; i++) if (scanf(\"%f\", &o[i]) != 1) return 0;\n"
    "    pol_act(o, a);\n    for (int i = 0; i < POL_ACT_DIM; i++) printf(\"%.9g \", a[i]);\n    "
    "printf(\"\\n\");\n  }\n}\n";

/* an ID with characters a C string literal must escape, and asymmetric non-unit bounds */
static const char *k_env = "gym:pkg:Arm-v0,label=\"a\\b\"";

static void test_env(sac_policy_env_t *e) {
  memset(e, 0, sizeof *e);
  snprintf(e->env, sizeof e->env, "%s", k_env);
  e->act_dim = 2;
  e->act_low[0] = -0.5f, e->act_high[0] = 2.0f;
  e->act_low[1] = -3.0f, e->act_high[1] = 1.0f;
}

static sac_t *make_policy(sac_backend_t **be, float **p) {
  sac_t *s;
  cr_assert_eq(sac_backend_new("cpu", 1, be), 0);
  sac_hparams_t hp;
  sac_hparams_default(&hp, 5, 2);
  hp.hidden = 32;
  hp.seed = 9;
  cr_assert_eq(sac_new(&hp, *be, &s), 0);
  *p = malloc(sizeof(float) * sac_actor_param_count(s));
  cr_assert_eq(sac_get_actor(s, *p), 0);
  return s;
}

static void check(int int8) {
  sac_backend_t *be;
  float *p;
  sac_t *s = make_policy(&be, &p);
  const sac_mlp_desc_t *d = sac_actor_desc(s);
  sac_policy_env_t env;
  test_env(&env);
  char dir[] = "/tmp/sac-export-XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  sac_export_report_t rep;
  cr_assert_eq(sac_export_c(dir, "pol", d, p, &env, int8, 2.0, &rep), 0);
  cr_expect_eq(rep.samples, 1000);
  /* the error is in environment units: up to a 4-wide range here */
  cr_expect(rep.max_abs_error > 0 && rep.max_abs_error < 0.2, "int8 max error %g", rep.max_abs_error);
  char cmd[512], path[256];
  snprintf(path, sizeof path, "%s/main.c", dir);
  FILE *f = fopen(path, "w");
  fputs(k_main, f);
  fclose(f);
  snprintf(cmd, sizeof cmd, "cc -std=c99 -Wall -Werror -O2 -o %s/prog %s/main.c %s/pol.c -lm", dir, dir, dir);
  cr_assert_eq(system(cmd), 0, "the exported source compiles on its own: %s", cmd);
  /* 50 random observations through both */
  sac_rng_t rng;
  sac_rng_init(&rng, 4, 4);
  float obs[50][5], want[50][2], scratch[2 * 2 + 2 * 32 + 16];
  snprintf(path, sizeof path, "%s/obs.txt", dir);
  f = fopen(path, "w");
  for (int k = 0; k < 50; k++) {
    for (int i = 0; i < 5; i++)
      fprintf(f, "%.9g ", (double)(obs[k][i] = (float)sac_rng_uniform_range(&rng, -2, 2)));
    fprintf(f, "\n");
    sac_export_act(d, p, &env, obs[k], want[k], scratch);
  }
  fclose(f);
  snprintf(cmd, sizeof cmd, "%s/prog < %s/obs.txt", dir, dir);
  FILE *out = popen(cmd, "r");
  cr_assert_not_null(out);
  char id[300] = "";
  cr_assert_not_null(fgets(id, sizeof id, out));
  id[strcspn(id, "\n")] = '\0';
  cr_expect_str_eq(id, k_env, "the environment ID survives the C string literal");
  double worst = 0;
  float lo[2] = {INFINITY, INFINITY}, hi[2] = {-INFINITY, -INFINITY};
  for (int k = 0; k < 50; k++)
    for (int i = 0; i < 2; i++) {
      float got;
      cr_assert_eq(fscanf(out, "%f", &got), 1);
      double e = fabs((double)got - want[k][i]);
      worst = e > worst ? e : worst;
      lo[i] = fminf(lo[i], got), hi[i] = fmaxf(hi[i], got);
    }
  pclose(out);
  for (int i = 0; i < 2; i++)
    cr_expect(lo[i] >= env.act_low[i] && hi[i] <= env.act_high[i], "action %d spans [%g, %g] of [%g, %g]", i,
              lo[i], hi[i], env.act_low[i], env.act_high[i]);
  /* the scaling matters here: tanh(mu) alone, in [-1, 1], is far from these actions */
  double moved = 0;
  for (int k = 0; k < 50; k++) {
    float raw[2];
    sac_policy_cfg_t pc = {-5, 2};
    sac_policy_act(d, p, &pc, obs[k], 1, 1, NULL, raw, scratch);
    for (int i = 0; i < 2; i++)
      moved = fmax(moved, fabs((double)raw[i] - want[k][i]));
  }
  cr_expect(moved > 0.1, "scaled and unscaled actions differ by %g", moved);
  if (int8) /* the exporter's own report bounds the compiled program's error (same arithmetic) */
    cr_expect(worst <= rep.max_abs_error + 1e-6, "int8 error %g above the reported %g", worst,
              rep.max_abs_error);
  else /* fp32: the same math in another summation order, ~1e-6 */
    cr_expect(worst < 1e-5, "fp32 export differs by %g", worst);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  cr_expect_eq(system(cmd), 0);
  free(p);
  sac_destroy(&s);
  sac_backend_destroy(&be);
}

Test(export, fp32_source_reproduces_sacfleet_actions_in_bounds) { check(0); }
Test(export, int8_source_within_reported_error) { check(1); }

Test(export, refuses_a_prefix_that_is_not_an_identifier) {
  sac_mlp_desc_t d;
  sac_mlp_desc_init(&d, 2, 4, 1, 2, SAC_ACT_RELU, 1);
  float p[64] = {0};
  sac_export_report_t rep;
  sac_policy_env_t env = {.env = "Pendulum-v1", .act_dim = 1, .act_low = {-2}, .act_high = {2}};
  cr_expect_eq(sac_export_c("/tmp", "bad-name", &d, p, &env, 0, 1.0, &rep), SAC_EINVAL);
  cr_expect_eq(sac_export_c("/tmp", "9x", &d, p, &env, 0, 1.0, &rep), SAC_EINVAL);
}

Test(export, refuses_bounds_of_another_action_size) {
  sac_mlp_desc_t d;
  sac_mlp_desc_init(&d, 2, 4, 1, 2, SAC_ACT_RELU, 1); /* one action */
  float p[64] = {0};
  sac_export_report_t rep;
  sac_policy_env_t env;
  test_env(&env); /* two */
  cr_expect_eq(sac_export_c("/tmp", "pol", &d, p, &env, 0, 1.0, &rep), SAC_EINVAL);
  cr_expect_eq(sac_export_onnx("/tmp/sac-export-refused.onnx", &d, p, &env), SAC_EINVAL);
  cr_expect_neq(access("/tmp/sac-export-refused.onnx", F_OK), 0, "nothing written");
}

/* ---- policy.bin ---- */

static char g_dir[64];
static void dir_init(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/sac-policy-XXXXXX");
  cr_assert_not_null(mkdtemp(g_dir));
}
static void dir_fini(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
  cr_expect_eq(system(cmd), 0);
}

static void small_policy(sac_mlp_desc_t *d, float *p) {
  sac_mlp_desc_init(d, 5, 8, 2, 4, SAC_ACT_RELU, 1);
  for (size_t i = 0; i < sac_mlp_param_count(d); i++)
    p[i] = 0.01f * (float)i;
}

/* The small policy saved to g_dir/policy.bin (path), with test_env's ID and bounds in env
 * unless format 1 is asked for. */
static void save_small(sac_mlp_desc_t *d, float *p, sac_policy_env_t *env, int format_1, char *path,
                       size_t cap) {
  small_policy(d, p);
  test_env(env);
  snprintf(path, cap, "%s/policy.bin", g_dir);
  cr_assert_eq(sac_policy_save(path, d, p, -5, 2, format_1 ? NULL : env), 0);
}

Test(policy_file, format_2_keeps_env_and_bounds, .init = dir_init, .fini = dir_fini) {
  sac_mlp_desc_t d, got;
  float p[256], *q, lo, hi;
  sac_policy_env_t env, back;
  char path[128];
  save_small(&d, p, &env, 0, path, sizeof path);
  cr_assert_eq(sac_policy_load_env(path, &got, &q, &lo, &hi, &back), 0);
  cr_expect_str_eq(back.env, k_env);
  cr_expect_eq(back.act_dim, 2);
  cr_expect(memcmp(back.act_low, env.act_low, 2 * sizeof(float)) == 0 &&
            memcmp(back.act_high, env.act_high, 2 * sizeof(float)) == 0);
  cr_expect_eq(memcmp(p, q, sac_mlp_param_count(&d) * sizeof(float)), 0);
  cr_expect(lo == -5.0f && hi == 2.0f);
  free(q);
  /* the plain reader takes it too */
  cr_assert_eq(sac_policy_load(path, &got, &q, &lo, &hi), 0);
  free(q);
}

Test(policy_file, format_1_loads_without_env, .init = dir_init, .fini = dir_fini) {
  sac_mlp_desc_t d, got;
  float p[256], *q, lo, hi;
  sac_policy_env_t env, back;
  char path[128];
  save_small(&d, p, &env, 1, path, sizeof path);
  FILE *f = fopen(path, "rb");
  char magic[9] = "";
  cr_assert_eq(fread(magic, 1, 8, f), 8);
  fclose(f);
  cr_expect_str_eq(magic, "SACPOL01");
  cr_assert_eq(sac_policy_load_env(path, &got, &q, &lo, &hi, &back), 0);
  cr_expect_eq(back.act_dim, 0);
  cr_expect_str_eq(back.env, "");
  free(q);
}

/* Writes a format-2 file, changes the byte at `at` (from the end when negative) to v or
 * cuts the file there (v < 0), and loads it. */
static int load_damaged(long at, int v) {
  sac_mlp_desc_t d, got;
  float p[256], *q = (float *)&d, lo, hi;
  sac_policy_env_t env, back;
  char path[128];
  save_small(&d, p, &env, 0, path, sizeof path);
  FILE *f = fopen(path, "r+b");
  fseek(f, 0, SEEK_END);
  long len = ftell(f), pos = at < 0 ? len + at : at;
  if (v < 0) {
    fclose(f);
    cr_assert_eq(truncate(path, pos), 0);
  } else {
    fseek(f, pos, SEEK_SET);
    fputc(v, f);
    fclose(f);
  }
  int rc = sac_policy_load_env(path, &got, &q, &lo, &hi, &back);
  if (rc == 0)
    free(q);
  else
    cr_expect_null(q, "no parameters handed out on a refusal");
  return rc;
}

/* the header of the test policy: 8 magic + 4 n_layers + 4 sizes * 4 + 12, then env_len */
#define ENV_LEN_AT 40
#define ENV_AT 44

Test(policy_file, damaged_format_2_refused, .init = dir_init, .fini = dir_fini) {
  cr_expect_eq(load_damaged(-4, -1), SAC_EPROTO, "a cut-off file");
  cr_expect_eq(load_damaged(ENV_AT + 2, -1), SAC_EPROTO, "cut inside the env ID");
  cr_expect_eq(load_damaged(ENV_LEN_AT, 200), SAC_EPROTO, "an env length past the ID");
  cr_expect_eq(load_damaged(ENV_LEN_AT + 3, 1), SAC_EPROTO, "an env length past any ID");
  cr_expect_eq(load_damaged(ENV_AT + 1, '\n'), SAC_EPROTO, "a control character in the ID");
  size_t bounds = ENV_AT + strlen(k_env);
  cr_expect_eq(load_damaged((long)bounds + 3, 0x7f), SAC_EPROTO, "a low bound above its high one");
  cr_expect_eq(load_damaged((long)bounds + 8 + 3, 0xff), SAC_EPROTO, "a high bound below its low one");
  /* control: the same edit outside the checked fields loads (a parameter byte) */
  cr_expect_eq(load_damaged(-2, 0x3f), 0, "a changed weight is still a policy file");
}

Test(policy_file, save_refuses_bounds_that_do_not_fit, .init = dir_init, .fini = dir_fini) {
  sac_mlp_desc_t d;
  float p[256];
  small_policy(&d, p); /* two actions */
  sac_policy_env_t env;
  test_env(&env);
  char path[128];
  snprintf(path, sizeof path, "%s/policy.bin", g_dir);
  env.act_dim = 1;
  cr_expect_eq(sac_policy_save(path, &d, p, -5, 2, &env), SAC_EINVAL);
  env.act_dim = 2;
  env.act_high[1] = env.act_low[1];
  cr_expect_eq(sac_policy_save(path, &d, p, -5, 2, &env), SAC_EINVAL);
  env.act_high[1] = NAN;
  cr_expect_eq(sac_policy_save(path, &d, p, -5, 2, &env), SAC_EINVAL);
  cr_expect_neq(access(path, F_OK), 0, "nothing written");
}
