/* Tests of envs/gym_bridge (libsac_env_gym.so): Gymnasium's Pendulum-v1 run through the
 * embedded interpreter and the sacfleet loader, compared step by step with the built-in
 * Pendulum-v1 set to the same state (tolerance 1e-5: both are float32 views of float32
 * dynamics, Gymnasium's in numpy and the built-in's in C); the spec (bounds, time limit);
 * a Discrete action space (CartPole-v1) and a missing id refused with clear errors, and
 * a bad argument; a Python exception and a NaN observation in step (tests/data/
 * sac_gym_faulty.py) reported as SAC_EPLUGIN; HalfCheetah-v4's spec where gymnasium[mujoco] is installed. A
 * plain C program so it can exit 77 (ctest: skipped) with a message where the embedded interpreter has no
 * gymnasium module; a plugin that does not load or an interpreter that does not start is a failure. */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/env.h"
#include "common/env_plugin.h"
#include "common/error.h"

static int g_failures;

#define CHECK(cond, ...)                                                                                     \
  do {                                                                                                       \
    if (!(cond)) {                                                                                           \
      g_failures++;                                                                                          \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                                   \
      fprintf(stderr, __VA_ARGS__);                                                                          \
      fputc('\n', stderr);                                                                                   \
    }                                                                                                        \
  } while (0)

/* Steps a bridged env until a step fails; returns the failing step (1-based) and the
 * loader's code in *rc, or 0 if none failed within 10 steps. */
static int first_failing_step(const char *id, int *rc) {
  char name[1024];
  snprintf(name, sizeof name, "plugin:%s:%s", SAC_ENV_GYM_SO, id);
  sac_env_t *env = NULL;
  *rc = sac_env_new(name, 1, 0, &env);
  if (*rc != 0)
    return -1;
  float obs[SAC_ENV_MAX_OBS], a = 0.0f, r;
  int term, trunc, failed = 0;
  *rc = sac_env_reset(env, obs);
  for (int k = 1; *rc == 0 && k <= 10 && !failed; k++) {
    *rc = sac_env_step(env, &a, obs, &r, &term, &trunc);
    if (*rc != 0)
      failed = k;
  }
  sac_env_destroy(&env);
  return failed;
}

int main(void) {
  /* tests/data/sac_gym_faulty.py registers envs that raise / return NaN on purpose */
  const char *pp = getenv("PYTHONPATH");
  char path[4096];
  snprintf(path, sizeof path, "%s%s%s", SAC_TEST_DATA, pp && *pp ? ":" : "", pp && *pp ? pp : "");
  setenv("PYTHONPATH", path, 1);
  setenv("PYTHONDONTWRITEBYTECODE", "1", 1); /* no __pycache__ in the source tree */
  void *so = dlopen(SAC_ENV_GYM_SO, RTLD_NOW | RTLD_LOCAL);
  if (!so) { /* built in this tree: not loading is a defect, not a missing dependency */
    printf("FAIL: cannot load %s: %s\n", SAC_ENV_GYM_SO, dlerror());
    return 1;
  }
  sac_env_plugin_create_fn create;
  sac_env_plugin_destroy_fn destroy;
  *(void **)&create = dlsym(so, "sac_env_plugin_create");
  *(void **)&destroy = dlsym(so, "sac_env_plugin_destroy");
  if (!create || !destroy) {
    printf("FAIL: %s misses a symbol\n", SAC_ENV_GYM_SO);
    return 1;
  }
  sac_env_plugin_spec_t spec;
  char err[1024] = "";
  memset(&spec, 0, sizeof spec);
  void *h = create("Pendulum-v1", &spec, err, sizeof err);
  if (!h) { /* a skip only where gymnasium (or numpy) is not installed; any other failure is one */
    if (strstr(err, "No module named 'gymnasium'") || strstr(err, "No module named 'numpy'")) {
      printf("SKIP: the embedded Python has no Gymnasium: %s\n", err);
      return 77;
    }
    printf("FAIL: the bridge cannot create Pendulum-v1: %s\n", err);
    return 1;
  }
  CHECK(spec.obs_dim == 3 && spec.act_dim == 1 && spec.act_low[0] == -2.0f && spec.act_high[0] == 2.0f &&
            spec.max_episode_steps == 200 && strcmp(spec.name, "Pendulum-v1") == 0,
        "Pendulum spec: %s %d %d [%g, %g] %d", spec.name, spec.obs_dim, spec.act_dim, spec.act_low[0],
        spec.act_high[0], spec.max_episode_steps);
  destroy(h);

  /* refused with the reason: a Discrete action space, an unknown id, a bad argument */
  err[0] = '\0';
  CHECK(create("CartPole-v1", &spec, err, sizeof err) == NULL && strstr(err, "Discrete") &&
            strstr(err, "Box"),
        "CartPole-v1: '%s'", err);
  printf("CartPole-v1 refused: %s\n", err);
  err[0] = '\0';
  CHECK(create("NoSuchEnv-v0", &spec, err, sizeof err) == NULL && strstr(err, "NoSuchEnv"),
        "missing id: '%s'", err);
  printf("NoSuchEnv-v0 refused: %s\n", err);
  err[0] = '\0';
  CHECK(create("Pendulum-v1,frobnicate=1", &spec, err, sizeof err) == NULL && strstr(err, "unknown argument"),
        "bad argument: '%s'", err);
  /* a MuJoCo env through the bridge where gymnasium[mujoco] is installed */
  err[0] = '\0';
  h = create("HalfCheetah-v4", &spec, err, sizeof err);
  if (h) {
    CHECK(spec.obs_dim == 17 && spec.act_dim == 6 && spec.max_episode_steps == 1000,
          "HalfCheetah-v4 spec %d %d %d", spec.obs_dim, spec.act_dim, spec.max_episode_steps);
    destroy(h);
  } else {
    printf("note: HalfCheetah-v4 not checked through the bridge (gymnasium[mujoco] missing?): %s\n", err);
  }
  sac_env_t *bad = NULL;
  char name[1024];
  snprintf(name, sizeof name, "plugin:%s:CartPole-v1", SAC_ENV_GYM_SO);
  CHECK(sac_env_new(name, 1, 0, &bad) == SAC_EPLUGIN && bad == NULL, "CartPole-v1 through the loader");

  /* Pendulum-v1 through the loader, against the built-in from the same state */
  snprintf(name, sizeof name, "plugin:%s:Pendulum-v1,max_steps=50", SAC_ENV_GYM_SO);
  sac_env_t *g = NULL, *c = NULL;
  int rc = sac_env_new(name, 3, 0, &g);
  CHECK(rc == 0, "sac_env_new(%s): %s", name, sac_strerror(rc));
  CHECK(sac_env_new("Pendulum-v1", 3, 0, &c) == 0, "built-in Pendulum-v1");
  if (g && c) {
    CHECK(sac_env_spec(g)->max_episode_steps == 50, "max_steps=50 not applied");
    float og[SAC_ENV_MAX_OBS], oc[SAC_ENV_MAX_OBS], rg = 0, rcw = 0;
    CHECK(sac_env_reset(g, og) == 0 && sac_env_reset(c, oc) == 0, "reset");
    double state[2] = {atan2(og[1], og[0]), og[2]};
    CHECK(sac_env_set_state(c, state, 2, oc) == 0, "set_state");
    double max_d = 0.0;
    int tg = 0, trg = 0, tc = 0, trc = 0, steps = 0;
    while (!trg) {
      float a = (float)(2.5 * sin(0.3 * steps)); /* leaves [-2, 2]: both clip */
      CHECK(sac_env_step(g, &a, og, &rg, &tg, &trg) == 0 && sac_env_step(c, &a, oc, &rcw, &tc, &trc) == 0,
            "step");
      steps++;
      for (int i = 0; i < 3; i++)
        max_d = fmax(max_d, fabs(og[i] - oc[i]));
      max_d = fmax(max_d, fabs(rg - rcw) / (1.0 + fabs(rcw)));
      CHECK(tg == tc && !trc, "step %d: flags %d/%d vs %d/%d", steps, tg, trg, tc, trc); /* built-in: 200 */
      if (steps > 60)
        break;
    }
    CHECK(steps == 50 && trg && !tg, "episode ended after %d steps (truncated %d)", steps, trg);
    CHECK(max_d < 1e-5, "bridge vs built-in: max difference %.3g", max_d);
    printf("Pendulum-v1 via the bridge vs the built-in: %d steps, max |d| %.3g (tolerance 1e-5)\n", steps,
           max_d);
  }
  sac_env_destroy(&g);
  sac_env_destroy(&c);

  /* exceptions and non-finite numbers in step become SAC_EPLUGIN, and the process lives on */
  int frc = 0, k = first_failing_step("sac_gym_faulty:SacFaulty-v0", &frc);
  CHECK(k == 3 && frc == SAC_EPLUGIN, "SacFaulty-v0: failing step %d, code %d", k, frc);
  k = first_failing_step("sac_gym_faulty:SacNaN-v0", &frc);
  CHECK(k == 2 && frc == SAC_EPLUGIN, "SacNaN-v0: failing step %d, code %d", k, frc);
  printf("%s (%d failures)\n", g_failures ? "FAIL" : "PASS", g_failures);
  return g_failures ? 1 : 0;
}
