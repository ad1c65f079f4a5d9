/* Policy export: the generated C source, compiled by the system compiler into a small
 * program, reproduces the learner's deterministic actions (fp32: to float rounding;
 * int8: within the error the exporter reports), and a bad prefix is refused. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/rng.h"
#include "learner/export.h"
#include "learner/sac.h"

static const char *k_main =
    "#include <stdio.h>\n#include \"pol.h\"\nint main(void) {\n  float o[POL_OBS_DIM], a[POL_ACT_DIM];\n"
    "  for (;;) {\n    for (int i = 0; i < POL_OBS_DIM; i++) if (scanf(\"%f\", &o[i]) != 1) return 0;\n"
    "    pol_act(o, a);\n    for (int i = 0; i < POL_ACT_DIM; i++) printf(\"%.9g \", a[i]);\n    "
    "printf(\"\\n\");\n  }\n}\n";

static void check(int int8) {
  sac_backend_t *be;
  sac_t *s;
  cr_assert_eq(sac_backend_new("cpu", 1, &be), 0);
  sac_hparams_t hp;
  sac_hparams_default(&hp, 5, 2);
  hp.hidden = 32;
  hp.seed = 9;
  cr_assert_eq(sac_new(&hp, be, &s), 0);
  const sac_mlp_desc_t *d = sac_actor_desc(s);
  float *p = malloc(sizeof(float) * sac_actor_param_count(s));
  cr_assert_eq(sac_get_actor(s, p), 0);
  char dir[] = "/tmp/sac-export-XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  sac_export_report_t rep;
  cr_assert_eq(sac_export_c(dir, "pol", d, p, int8, 2.0, &rep), 0);
  cr_expect_eq(rep.samples, 1000);
  cr_expect(rep.max_abs_error > 0 && rep.max_abs_error < 0.05, "int8 max error %g", rep.max_abs_error);
  char cmd[512], path[256];
  snprintf(path, sizeof path, "%s/main.c", dir);
  FILE *f = fopen(path, "w");
  fputs(k_main, f);
  fclose(f);
  snprintf(cmd, sizeof cmd, "cc -std=c99 -O2 -o %s/prog %s/main.c %s/pol.c -lm", dir, dir, dir);
  cr_assert_eq(system(cmd), 0, "the exported source compiles on its own: %s", cmd);
  /* 50 random observations through both */
  sac_rng_t rng;
  sac_rng_init(&rng, 4, 4);
  float obs[50][5], want[50][2], scratch[2 * 2 + 2 * 32 + 16];
  snprintf(path, sizeof path, "%s/obs.txt", dir);
  f = fopen(path, "w");
  sac_policy_cfg_t pc = {-5, 2};
  for (int k = 0; k < 50; k++) {
    for (int i = 0; i < 5; i++)
      fprintf(f, "%.9g ", (double)(obs[k][i] = (float)sac_rng_uniform_range(&rng, -2, 2)));
    fprintf(f, "\n");
    sac_policy_act(d, p, &pc, obs[k], 1, 1, NULL, want[k], scratch);
  }
  fclose(f);
  snprintf(cmd, sizeof cmd, "%s/prog < %s/obs.txt", dir, dir);
  FILE *out = popen(cmd, "r");
  cr_assert_not_null(out);
  double worst = 0;
  for (int k = 0; k < 50; k++)
    for (int i = 0; i < 2; i++) {
      float got;
      cr_assert_eq(fscanf(out, "%f", &got), 1);
      double e = fabs((double)got - want[k][i]);
      worst = e > worst ? e : worst;
    }
  pclose(out);
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

Test(export, fp32_source_reproduces_learner_actions) { check(0); }
Test(export, int8_source_within_reported_error) { check(1); }

Test(export, refuses_a_prefix_that_is_not_an_identifier) {
  sac_mlp_desc_t d;
  sac_mlp_desc_init(&d, 2, 4, 1, 2, SAC_ACT_RELU, 1);
  float p[64] = {0};
  sac_export_report_t rep;
  cr_expect_eq(sac_export_c("/tmp", "bad-name", &d, p, 0, 1.0, &rep), SAC_EINVAL);
  cr_expect_eq(sac_export_c("/tmp", "9x", &d, p, 0, 1.0, &rep), SAC_EINVAL);
}
