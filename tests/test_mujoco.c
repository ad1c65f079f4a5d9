/* Tests of envs/mujoco (libsac_env_mujoco.so): HalfCheetah, Hopper, Walker2d and Ant, -v4
 * and -v5, and Humanoid-v5, against Gymnasium's trajectories (tests/data/mujoco_*.csv, written by
 * tests/data/gen_mujoco_refs.py with gymnasium[mujoco]), step by step from the same
 * qpos/qvel with the same actions; then through the sacfleet loader by plain ID
 * (sac_env_new("Hopper-v5")): the spec, the 1000-step truncation, reset determinism, the
 * reset noise range, and that step and reset allocate nothing (malloc counted inside
 * libmujoco too, see below); the plugin:PATH:ID form; and model files found through the
 * python3 on PATH by a plugin built without an assets folder.
 *
 * Tolerance, and why: the C plugin runs Debian's libmujoco 2.2.2, the references were made
 * with the MuJoCo Python package (4.0.0 when they were generated). Measured: without new
 * ground contacts the two agree to float32 rounding (max |d| about 7e-7 over 40 steps of
 * HalfCheetah, all of Walker2d's); once a foot makes a new contact the contact solutions of
 * the two versions differ and the trajectories drift apart (Hopper from step 8-10, Ant from
 * step 2-4, by 1e-2..1e0 within a few steps). So each observation entry and the reward must
 * agree within ABS_TOL + REL_TOL * |reference|, and termination exactly, for the first
 * tight_steps steps of each environment (below); later steps are printed, not asserted.
 * One more version difference: libmujoco 2.2.2 normalises the free joint's quaternion in
 * qpos in place during mj_forward, MuJoCo 3+/4 does not, so Ant's initial observation
 * (entries 1..4, the torso quaternion after reset noise) is compared after normalising.
 *
 * A plain C program (not Criterion) so it can exit 77, which ctest reports as skipped, when
 * the plugin cannot load the model files or the reference data are missing. */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/env.h"
#include "common/env_plugin.h"
#include "common/error.h"

/* Allocation counting: this executable defines malloc and friends, which interposes them
 * for every library it loads (libmujoco included), on glibc and without sanitizers. */
#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__) && !defined(__has_feature)
#define SAC_COUNT_ALLOCS 1
void *__libc_malloc(size_t n);
void *__libc_calloc(size_t n, size_t size);
void *__libc_realloc(void *p, size_t n);
void __libc_free(void *p);
static volatile int g_counting;
static volatile long g_allocs;
void *malloc(size_t n) {
  g_allocs += g_counting;
  return __libc_malloc(n);
}
void *calloc(size_t n, size_t size) {
  g_allocs += g_counting;
  return __libc_calloc(n, size);
}
void *realloc(void *p, size_t n) {
  g_allocs += g_counting;
  return __libc_realloc(p, n);
}
void free(void *p) {
  if (p)
    g_allocs += g_counting;
  __libc_free(p);
}
#endif

#define ABS_TOL 1e-3
#define REL_TOL 1e-3
#define MAX_STEPS 64
#define MAX_DIM 384 /* Humanoid-v5 observes 348 numbers */

typedef int (*set_state_fn)(void *, const double *, int, const double *, int, float *);

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

typedef struct {
  char env[64];
  double qpos0[MAX_DIM], qvel0[MAX_DIM];
  int nq, nv;
  double obs0[MAX_DIM];
  int n_obs0;
  int steps, act_dim, obs_dim;
  double act[MAX_STEPS][MAX_DIM], obs[MAX_STEPS][MAX_DIM], reward[MAX_STEPS];
  int terminated[MAX_STEPS];
} traj_t;

/* Parses comma-separated numbers after the first field; returns the count. */
static int parse_list(const char *line, double *out, int cap) {
  const char *s = strchr(line, ',');
  int n = 0;
  while (s && n < cap) {
    char *end = NULL;
    out[n++] = strtod(s + 1, &end);
    s = strchr(end, ',');
  }
  return n;
}

/* Reads one reference file; returns 0, or -1 if it is missing or malformed. */
static int read_traj(const char *path, traj_t *t) {
  FILE *f = fopen(path, "r");
  if (!f)
    return -1;
  memset(t, 0, sizeof *t);
  static char line[32768]; /* a Humanoid row is about 6 KB */
  int ncols = 0;
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\r\n")] = '\0';
    if (strncmp(line, "#env,", 5) == 0) {
      snprintf(t->env, sizeof t->env, "%.63s", line + 5);
    } else if (strncmp(line, "#qpos0,", 7) == 0) {
      t->nq = parse_list(line, t->qpos0, MAX_DIM);
    } else if (strncmp(line, "#qvel0,", 7) == 0) {
      t->nv = parse_list(line, t->qvel0, MAX_DIM);
    } else if (strncmp(line, "#obs0,", 6) == 0) {
      t->n_obs0 = parse_list(line, t->obs0, MAX_DIM);
    } else if (strncmp(line, "step,", 5) == 0) {
      for (const char *s = line; (s = strstr(s, ",a")) != NULL; s++)
        t->act_dim++;
      for (const char *s = line; (s = strstr(s, ",o")) != NULL; s++)
        t->obs_dim++;
      ncols = t->act_dim + t->obs_dim + 2;
    } else if (line[0] != '#' && ncols > 0 && t->steps < MAX_STEPS) {
      double v[2 * MAX_DIM + 2];
      if (parse_list(line, v, 2 * MAX_DIM + 2) != ncols) {
        fclose(f);
        return -1;
      }
      int k = t->steps++;
      memcpy(t->act[k], v, sizeof(double) * (size_t)t->act_dim);
      memcpy(t->obs[k], v + t->act_dim, sizeof(double) * (size_t)t->obs_dim);
      t->reward[k] = v[t->act_dim + t->obs_dim];
      t->terminated[k] = v[t->act_dim + t->obs_dim + 1] != 0.0;
    }
  }
  fclose(f);
  return (t->env[0] && t->nq && t->nv && t->steps && t->n_obs0 == t->obs_dim) ? 0 : -1;
}

typedef struct {
  sac_env_plugin_abi_version_fn abi;
  sac_env_plugin_create_fn create;
  sac_env_plugin_destroy_fn destroy;
  sac_env_plugin_reset_fn reset;
  sac_env_plugin_step_fn step;
  set_state_fn set_state;
} plugin_t;

/* Normalised error of a against the reference r: |a - r| / (ABS_TOL + REL_TOL |r|); <= 1 passes. */
static double nerr(double a, double r) { return fabs(a - r) / (ABS_TOL + REL_TOL * fabs(r)); }

/* Steps asserted within the tight tolerance, per environment (see the top comment); v5
 * shares v4's models and dynamics except Walker2d-v5's feet and Ant-v5's contact terms. */
static int tight_steps(const char *env) {
  if (strncmp(env, "Hopper-", 7) == 0)
    return 7;
  if (strncmp(env, "Ant-", 4) == 0)
    return 1;
  if (strncmp(env, "Humanoid-", 9) == 0)
    return 3;
  return MAX_STEPS; /* HalfCheetah, Walker2d: the whole reference */
}

/* Replays one reference file; returns 0, or 77 when the model cannot be loaded. */
static int replay(const plugin_t *p, const char *file) {
  static traj_t t; /* large: keep off the stack */
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", SAC_TEST_DATA, file);
  if (read_traj(path, &t) != 0) {
    printf("SKIP %s: reference data missing or malformed (run tests/data/gen_mujoco_refs.py)\n", file);
    return 77;
  }
  sac_env_plugin_spec_t spec;
  memset(&spec, 0, sizeof spec);
  char err[1024] = "";
  void *h = p->create(t.env, &spec, err, sizeof err);
  if (!h) {
    printf("SKIP %s: %s\n", file, err);
    return 77;
  }
  CHECK(spec.obs_dim == t.obs_dim && spec.act_dim == t.act_dim, "%s: dims %d/%d vs %d/%d", file, spec.obs_dim,
        spec.act_dim, t.obs_dim, t.act_dim);
  CHECK(spec.max_episode_steps == 1000, "%s: max_episode_steps %d", file, spec.max_episode_steps);
  float obs[SAC_ENV_PLUGIN_MAX_OBS], act[SAC_ENV_PLUGIN_MAX_ACT], reward = 0.0f;
  float scratch[SAC_ENV_PLUGIN_MAX_OBS];
  CHECK(p->reset(h, 1, scratch) == 0, "%s: reset", file);
  CHECK(p->set_state(h, t.qpos0, t.nq, t.qvel0, t.nv, obs) == 0, "%s: set_state nq=%d nv=%d", file, t.nq,
        t.nv);
  if (strncmp(t.env, "Ant-", 4) == 0 ||
      strncmp(t.env, "Humanoid-", 9) == 0) { /* normalise the torso quaternion */
    double n = 0.0;
    for (int i = 1; i <= 4; i++)
      n += t.obs0[i] * t.obs0[i];
    for (int i = 1; i <= 4; i++)
      t.obs0[i] /= sqrt(n);
  }
  double e0 = 0.0;
  for (int i = 0; i < t.obs_dim; i++)
    e0 = fmax(e0, nerr(obs[i], t.obs0[i]));
  CHECK(e0 <= 1.0, "%s: initial observation differs (normalised error %.3g)", file, e0);
  double max_abs_obs = 0.0, max_abs_rew = 0.0, max_n_match = 0.0, max_abs_all = 0.0;
  int first_bad = -1, tight = tight_steps(t.env) < t.steps ? tight_steps(t.env) : t.steps, c_term = 0;
  for (int k = 0; k < t.steps; k++) {
    for (int i = 0; i < t.act_dim; i++)
      act[i] = (float)t.act[k][i];
    int term = -1;
    CHECK(p->step(h, act, obs, &reward, &term) == 0, "%s: step %d", file, k + 1);
    double n = nerr(reward, t.reward[k]), a = fabs(reward - t.reward[k]);
    max_abs_all = fmax(max_abs_all, a);
    for (int i = 0; i < t.obs_dim; i++) {
      n = fmax(n, nerr(obs[i], t.obs[k][i]));
      max_abs_all = fmax(max_abs_all, fabs(obs[i] - t.obs[k][i]));
    }
    if (n > 1.0 && first_bad < 0)
      first_bad = k + 1;
    if (term && !c_term)
      c_term = k + 1;
    if (k < tight) {
      max_n_match = fmax(max_n_match, n);
      max_abs_rew = fmax(max_abs_rew, a);
      for (int i = 0; i < t.obs_dim; i++)
        max_abs_obs = fmax(max_abs_obs, fabs(obs[i] - t.obs[k][i]));
      CHECK(n <= 1.0, "%s: step %d differs (normalised error %.3g)", file, k + 1, n);
      CHECK(term == t.terminated[k], "%s: step %d terminated %d, Gymnasium %d", file, k + 1, term,
            t.terminated[k]);
    }
  }
  printf("%-24s %-14s %2d steps: asserted %2d: max |d obs| %.2e, max |d reward| %.2e (normalised %.3f); "
         "all steps max |d| %.2e, first step over tolerance: %d; terminated at %d (Gymnasium %d)\n",
         file, t.env, t.steps, tight, max_abs_obs, max_abs_rew, max_n_match, max_abs_all, first_bad, c_term,
         t.terminated[t.steps - 1] ? t.steps : 0);
  p->destroy(h);
  return 0;
}

/* Through the sacfleet loader, by ID as users write it (the plugin is found next to this
 * binary): spec, truncation at 1000 (not termination), reset determinism and the reset
 * noise range of the qvel part of the observation (nv entries from qv0). */
static void loader_checks(const char *id, int obs_dim, int act_dim, int qv0, int nv, double noise) {
  sac_env_t *env = NULL, *env2 = NULL;
  int rc = sac_env_new(id, 7, 0, &env);
  CHECK(rc == 0, "%s: sac_env_new: %s", id, sac_strerror(rc));
  if (rc != 0)
    return;
  CHECK(sac_env_new(id, 7, 0, &env2) == 0, "%s: second env", id);
  const sac_env_spec_t *s = sac_env_spec(env);
  CHECK(s->obs_dim == obs_dim && s->act_dim == act_dim && s->max_episode_steps == 1000, "%s: spec %d %d %d",
        id, s->obs_dim, s->act_dim, s->max_episode_steps);
  CHECK(strcmp(s->name, id) == 0, "%s: spec name %s", id, s->name);
  float o1[SAC_ENV_MAX_OBS], o2[SAC_ENV_MAX_OBS], a[SAC_ENV_MAX_ACT] = {0}, r;
  CHECK(sac_env_reset(env, o1) == 0 && sac_env_reset(env2, o2) == 0, "%s: reset", id);
  CHECK(memcmp(o1, o2, sizeof(float) * (size_t)obs_dim) == 0, "%s: same seed, different reset", id);
  /* velocities are pure noise around 0 (uniform: |v| <= scale; normal: |v| < 6 scale) */
  for (int i = qv0; i < qv0 + nv; i++)
    CHECK(fabs(o1[i]) <= 6.0 * noise, "%s: reset qvel %g outside the noise range", id, o1[i]);
  int term = 0, trunc = 0, steps = 0;
#ifdef SAC_COUNT_ALLOCS
  g_allocs = 0;
  g_counting = 1;
#endif
  while (!term && !trunc && steps < 2000) {
    CHECK(sac_env_step(env, a, o1, &r, &term, &trunc) == 0, "%s: step", id);
    steps++;
  }
  CHECK(sac_env_reset(env, o2) == 0, "%s: reset", id);
#ifdef SAC_COUNT_ALLOCS
  g_counting = 0;
  CHECK(g_allocs == 0, "%s: %ld allocations in %d steps and a reset", id, g_allocs, steps);
#endif
  /* zero action: HalfCheetah never terminates and must be truncated at 1000 */
  if (strncmp(id, "HalfCheetah-", 12) == 0)
    CHECK(trunc && !term && steps == 1000, "%s: expected truncation at 1000, got term %d trunc %d after %d",
          id, term, trunc, steps);
  else
    CHECK(steps <= 1000 && (term || trunc), "%s: episode of %d steps", id, steps);
  printf("%-15s via loader: zero-action episode %d steps, %s\n", id, steps,
         term ? "terminated" : "truncated");
  sac_env_destroy(&env);
  sac_env_destroy(&env2);
  CHECK(env == NULL, "%s: destroy", id);
}

/* Ant-v5 against Ant-v4 from the same seed (same reset noise, same dynamics): the first 27
 * observations agree, the other 78 are the clipped contact forces, and the reward is v4's
 * less 5e-4 * their squares' sum (the world body's forces, not observed, are 0), while the
 * Ant is healthy. Gymnasium's trajectories part from libmujoco 2.2.2's at the first ground
 * contact, so this is how the contact terms are checked once the legs touch the ground. */
static void ant_v5_contact_checks(void) {
  sac_env_t *v4 = NULL, *v5 = NULL;
  if (sac_env_new("Ant-v4", 3, 0, &v4) != 0 || sac_env_new("Ant-v5", 3, 0, &v5) != 0) {
    CHECK(0, "Ant-v4/v5 envs");
    sac_env_destroy(&v4);
    sac_env_destroy(&v5);
    return;
  }
  float o4[SAC_ENV_MAX_OBS], o5[SAC_ENV_MAX_OBS], a[8], r4, r5;
  CHECK(sac_env_reset(v4, o4) == 0 && sac_env_reset(v5, o5) == 0, "Ant resets");
  int steps = 0, contact_steps = 0, t4 = 0, t5 = 0, tr = 0;
  double max_d = 0.0, max_cost = 0.0;
  uint64_t s = 12345;
  while (steps < 200 && !t4 && !t5) {
    for (int i = 0; i < 8; i++) { /* small deterministic actions: walking, not flipping */
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      a[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 0.6 - 0.3);
    }
    CHECK(sac_env_step(v4, a, o4, &r4, &t4, &tr) == 0 && sac_env_step(v5, a, o5, &r5, &t5, &tr) == 0,
          "steps");
    steps++;
    double cost = 0.0;
    int nz = 0;
    for (int i = 0; i < 27; i++)
      max_d = fmax(max_d, fabs(o4[i] - o5[i]));
    for (int i = 27; i < 105; i++) {
      CHECK(o5[i] >= -1.0f && o5[i] <= 1.0f, "Ant-v5 contact force %d = %g not clipped", i, o5[i]);
      cost += (double)o5[i] * o5[i];
      nz += o5[i] != 0.0f;
    }
    cost *= 5e-4;
    max_cost = fmax(max_cost, cost);
    contact_steps += nz > 0;
    if (!t5)
      CHECK(fabs((double)r4 - cost - r5) <= 1e-4 + 1e-5 * fabs(r4),
            "step %d: v4 reward %g - contact %g != v5 %g", steps, r4, cost, r5);
  }
  CHECK(max_d <= 1e-6, "Ant-v4/v5 first 27 observations differ by %g", max_d);
  CHECK(t4 == t5, "terminated v4 %d v5 %d", t4, t5);
  CHECK(contact_steps > steps / 4, "contact forces nonzero on only %d of %d steps", contact_steps, steps);
  printf(
      "Ant-v5 vs Ant-v4: %d steps, contact forces on %d, largest contact cost %.4f, obs[0:27] max |d| %.1e\n",
      steps, contact_steps, max_cost, max_d);
  sac_env_destroy(&v4);
  sac_env_destroy(&v5);
}

/* A plugin built without a configured assets folder (as on a machine where the build saw no
 * Gymnasium) finds the models by asking the python3 on PATH; with no python3 on PATH it
 * fails with a message that says what to do. Skipped (printed) where this python3 has no
 * Gymnasium. */
static void runtime_assets_checks(void) {
  void *so = dlopen(SAC_ENV_MUJOCO_NOASSETS_SO, RTLD_NOW | RTLD_LOCAL);
  CHECK(so != NULL, "cannot load %s", SAC_ENV_MUJOCO_NOASSETS_SO);
  if (!so)
    return;
  sac_env_plugin_create_fn create;
  sac_env_plugin_destroy_fn destroy;
  *(void **)&create = dlsym(so, "sac_env_plugin_create");
  *(void **)&destroy = dlsym(so, "sac_env_plugin_destroy");
  char *assets = getenv("SAC_MUJOCO_ASSETS") ? strdup(getenv("SAC_MUJOCO_ASSETS")) : NULL;
  char *path = strdup(getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin");
  unsetenv("SAC_MUJOCO_ASSETS");
  sac_env_plugin_spec_t spec;
  char err[1024] = "";
  /* negative control first (a found folder is kept for the process) */
  setenv("PATH", "/nonexistent", 1);
  memset(&spec, 0, sizeof spec);
  void *h = create("Hopper-v5", &spec, err, sizeof err);
  CHECK(h == NULL && strstr(err, "no model file") && strstr(err, "SAC_MUJOCO_ASSETS"),
        "no python3: expected 'no model file', got '%s'", err);
  setenv("PATH", path, 1);
  int have_gym = system("python3 -c 'import gymnasium' >/dev/null 2>&1") == 0;
  memset(&spec, 0, sizeof spec);
  err[0] = '\0';
  h = create("Hopper-v5", &spec, err, sizeof err);
  if (have_gym) {
    CHECK(h != NULL && spec.obs_dim == 11, "models from the python3 on PATH: '%s'", err);
    printf("runtime assets: Hopper-v5 loaded with the models of the python3 on PATH\n");
  } else {
    printf("runtime assets: SKIPPED the positive case (python3 on PATH has no gymnasium)\n");
  }
  if (h)
    destroy(h);
  if (assets)
    setenv("SAC_MUJOCO_ASSETS", assets, 1);
  free(assets);
  free(path);
  dlclose(so);
}

int main(void) {
  void *so = dlopen(SAC_ENV_MUJOCO_SO, RTLD_NOW | RTLD_LOCAL);
  if (!so) {
    printf("SKIP: cannot load %s: %s\n", SAC_ENV_MUJOCO_SO, dlerror());
    return 77;
  }
  plugin_t p;
  *(void **)&p.abi = dlsym(so, "sac_env_plugin_abi_version");
  *(void **)&p.create = dlsym(so, "sac_env_plugin_create");
  *(void **)&p.destroy = dlsym(so, "sac_env_plugin_destroy");
  *(void **)&p.reset = dlsym(so, "sac_env_plugin_reset");
  *(void **)&p.step = dlsym(so, "sac_env_plugin_step");
  *(void **)&p.set_state = dlsym(so, "sac_env_mujoco_set_state");
  if (!p.abi || !p.create || !p.destroy || !p.reset || !p.step || !p.set_state) {
    printf("FAIL: %s misses a symbol\n", SAC_ENV_MUJOCO_SO);
    return 1;
  }
  CHECK(p.abi() == SAC_ENV_PLUGIN_ABI_VERSION, "abi version");

  /* a bad id and a bad model path are errors with a reason, not crashes */
  sac_env_plugin_spec_t spec;
  char err[1024] = "";
  memset(&spec, 0, sizeof spec);
  CHECK(p.create("Humanoid-v9", &spec, err, sizeof err) == NULL && strstr(err, "unknown"), "bad id: '%s'",
        err);
  err[0] = '\0';
  CHECK(p.create("Hopper-v4,model=/nonexistent/hopper.xml", &spec, err, sizeof err) == NULL &&
            strstr(err, "cannot load"),
        "bad model: '%s'", err);

  static const char *files[] = {"mujoco_halfcheetah_0.csv",
                                "mujoco_halfcheetah_1.csv",
                                "mujoco_hopper_0.csv",
                                "mujoco_hopper_1.csv",
                                "mujoco_walker2d_0.csv",
                                "mujoco_walker2d_1.csv",
                                "mujoco_ant_0.csv",
                                "mujoco_ant_1.csv",
                                "mujoco_halfcheetah_v5_0.csv",
                                "mujoco_halfcheetah_v5_1.csv",
                                "mujoco_hopper_v5_0.csv",
                                "mujoco_hopper_v5_1.csv",
                                "mujoco_walker2d_v5_0.csv",
                                "mujoco_walker2d_v5_1.csv",
                                "mujoco_ant_v5_0.csv",
                                "mujoco_ant_v5_1.csv",
                                "mujoco_humanoid_v5_0.csv",
                                "mujoco_humanoid_v5_1.csv"};
  int skipped = 0;
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
    if (replay(&p, files[i]) == 77)
      skipped++;
  if (skipped == (int)(sizeof files / sizeof files[0])) {
    printf("SKIP: no reference could be replayed (models or data missing)\n");
    dlclose(so);
    return 77;
  }
  loader_checks("HalfCheetah-v4", 17, 6, 8, 9, 0.1);
  loader_checks("Hopper-v4", 11, 3, 5, 6, 5e-3);
  loader_checks("Walker2d-v4", 17, 6, 8, 9, 5e-3);
  loader_checks("Ant-v4", 27, 8, 13, 14, 0.1);
  loader_checks("HalfCheetah-v5", 17, 6, 8, 9, 0.1);
  loader_checks("Hopper-v5", 11, 3, 5, 6, 5e-3);
  loader_checks("Walker2d-v5", 17, 6, 8, 9, 5e-3);
  loader_checks("Ant-v5", 105, 8, 13, 14, 0.1);
  loader_checks("Humanoid-v5", 348, 17, 22, 23, 1e-2);
  /* the explicit plugin:PATH:ID form, for users' own plugins, still works */
  sac_env_t *env = NULL;
  CHECK(sac_env_new("plugin:" SAC_ENV_MUJOCO_SO ":Hopper-v4,max_steps=5", 1, 0, &env) == 0 &&
            sac_env_spec(env)->max_episode_steps == 5,
        "plugin:PATH:ID form");
  sac_env_destroy(&env);
  ant_v5_contact_checks();
  runtime_assets_checks();
  dlclose(so);
  printf("%s (%d failures)\n", g_failures ? "FAIL" : "PASS", g_failures);
  return g_failures ? 1 : 0;
}
