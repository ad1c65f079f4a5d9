/* Tests of common/env*: the built-in environments against Gymnasium reference trajectories
 * (the CSV files in tests/data, written by tests/data/gen_gym_refs.py) and against single steps
 * computed by hand from the equations in REFERENCE.md; the wrapper's time limit
 * (truncation separate from termination); action clipping; the reset distribution and its
 * random stream; name dispatch; the plugin loader with the example plugin and with broken
 * plugins (tests/plugin_broken.c); and that reset/step allocate nothing.
 *
 * Allocations are counted by wrapping malloc/calloc/realloc/free at link time
 * (-Wl,--wrap, see tests/CMakeLists.txt): that catches calls from sac_common (linked
 * statically) and from this file, not from inside plugins. */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/env.h"
#include "common/env_internal.h"
#include "common/error.h"
#include "common/rng.h"

#define PI 3.141592653589793

/* ---- allocation counting ---------------------------------------------------------- */

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
void __real_free(void *p);

static volatile int g_counting; /* volatile: the compiler assumes malloc reads no globals */
static volatile long g_allocs;

void *__wrap_malloc(size_t n) {
  if (g_counting)
    g_allocs++;
  return __real_malloc(n);
}
void *__wrap_calloc(size_t n, size_t size) {
  if (g_counting)
    g_allocs++;
  return __real_calloc(n, size);
}
void *__wrap_realloc(void *p, size_t n) {
  if (g_counting)
    g_allocs++;
  return __real_realloc(p, n);
}
void __wrap_free(void *p) {
  if (g_counting && p)
    g_allocs++;
  __real_free(p);
}

/* ---- stderr capture (log lines are one write(2) each on fd 2) --------------------- */

typedef struct {
  int saved, fd;
} capture_t;

static void capture_begin(capture_t *c) {
  char path[] = "/tmp/sac_test_env_XXXXXX";
  c->fd = mkstemp(path);
  cr_assert(c->fd >= 0);
  unlink(path);
  fflush(stderr);
  c->saved = dup(2);
  cr_assert(c->saved >= 0);
  cr_assert(dup2(c->fd, 2) == 2);
}

/* Restores stderr and returns what was written (static buffer, NUL-terminated). */
static const char *capture_end(capture_t *c) {
  static char buf[8192];
  fflush(stderr);
  dup2(c->saved, 2);
  close(c->saved);
  lseek(c->fd, 0, SEEK_SET);
  ssize_t n = read(c->fd, buf, sizeof buf - 1);
  close(c->fd);
  buf[n > 0 ? n : 0] = '\0';
  return buf;
}

/* sac_env_new with stderr captured into *log. */
static int new_captured(const char *name, sac_env_t **env, const char **log) {
  capture_t c;
  capture_begin(&c);
  int rc = sac_env_new(name, 1, 1, env);
  *log = capture_end(&c);
  return rc;
}

/* ---- reference trajectories --------------------------------------------------------- */

typedef struct {
  char env[64];
  double state0[2];
  int n_obs;
  float obs0[8];
  int n;          /* rows */
  int *step;      /* (n) */
  float *action;  /* (n) */
  float *obs;     /* (n, n_obs) */
  double *reward; /* (n) */
  int *terminated, *truncated;
} traj_t;

static int parse_doubles(const char *s, double *out, int max) {
  int k = 0;
  char *end;
  while (k < max) {
    out[k] = strtod(s, &end);
    if (end == s)
      break;
    k++;
    if (*end != ',')
      break;
    s = end + 1;
  }
  return k;
}

static void traj_load(const char *file, traj_t *t) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", SAC_TEST_DATA, file);
  FILE *fp = fopen(path, "r");
  cr_assert_not_null(fp, "cannot open %s", path);
  memset(t, 0, sizeof *t);
  int cap = 1024;
  t->step = malloc(sizeof(int) * (size_t)cap);
  t->action = malloc(sizeof(float) * (size_t)cap);
  t->obs = malloc(sizeof(float) * 8 * (size_t)cap);
  t->reward = malloc(sizeof(double) * (size_t)cap);
  t->terminated = malloc(sizeof(int) * (size_t)cap);
  t->truncated = malloc(sizeof(int) * (size_t)cap);
  char line[1024];
  double v[16];
  int header_seen = 0;
  while (fgets(line, sizeof line, fp)) {
    if (strncmp(line, "#env,", 5) == 0) {
      snprintf(t->env, sizeof t->env, "%.*s", (int)strcspn(line + 5, "\r\n"), line + 5);
    } else if (strncmp(line, "#state0,", 8) == 0) {
      cr_assert_eq(parse_doubles(line + 8, t->state0, 2), 2);
    } else if (strncmp(line, "#obs0,", 6) == 0) {
      t->n_obs = parse_doubles(line + 6, v, 8);
      for (int i = 0; i < t->n_obs; i++)
        t->obs0[i] = (float)v[i];
    } else if (line[0] == '#') {
      continue;
    } else if (!header_seen) {
      header_seen = 1; /* step,action,obs...,reward,terminated,truncated */
    } else {
      int k = parse_doubles(line, v, 16);
      cr_assert_eq(k, 2 + t->n_obs + 3, "%s: bad row %d", file, t->n + 1);
      cr_assert_lt(t->n, cap);
      int i = t->n++;
      t->step[i] = (int)v[0];
      t->action[i] = (float)v[1]; /* written with 9 digits: the float32 exactly */
      for (int j = 0; j < t->n_obs; j++)
        t->obs[i * t->n_obs + j] = (float)v[2 + j];
      t->reward[i] = v[2 + t->n_obs];
      t->terminated[i] = (int)v[3 + t->n_obs];
      t->truncated[i] = (int)v[4 + t->n_obs];
    }
  }
  fclose(fp);
  cr_assert(t->env[0] && t->n_obs > 0 && t->n > 0, "%s: incomplete file", file);
}

static void traj_free(traj_t *t) {
  free(t->step);
  free(t->action);
  free(t->obs);
  free(t->reward);
  free(t->terminated);
  free(t->truncated);
}

/* Tolerance for observations and rewards: |got - want| <= TOL * max(1, |want|). Gymnasium
 * returns float32 observations of a float64 state (float64 for Pendulum; float32 for
 * MountainCar), and the reference CSV holds those float32 values exactly, so a faithful
 * implementation differs only by float32 rounding of the observation (<= 6e-8 relative)
 * plus last-bit libm differences amplified by the dynamics. 1e-5 leaves room for that and
 * still catches any modelling error (a wrong constant, order or clip shows at >= 1e-4). */
#define TOL 1e-5

static double rel_err(double got, double want) { return fabs(got - want) / fmax(1.0, fabs(want)); }

/* Replays one reference file step by step and logs the largest errors seen. */
static void replay(const char *file) {
  traj_t t;
  traj_load(file, &t);
  sac_env_t *env = NULL;
  cr_assert_eq(sac_env_new(t.env, 5, 5, &env), 0, "%s: cannot make %s", file, t.env);
  const sac_env_spec_t *spec = sac_env_spec(env);
  cr_assert_eq(spec->obs_dim, t.n_obs);
  float obs[SAC_ENV_MAX_OBS];
  cr_assert_eq(sac_env_reset(env, obs), 0);
  cr_assert_eq(sac_env_set_state(env, t.state0, 2, obs), 0);
  double worst_obs = 0.0, worst_reward = 0.0;
  int inexact = 0; /* observations not bit-identical to Gymnasium's */
  for (int j = 0; j < t.n_obs; j++) {
    double e = rel_err(obs[j], t.obs0[j]);
    worst_obs = fmax(worst_obs, e);
    cr_assert_leq(e, TOL, "%s: initial obs[%d] %.9g, want %.9g", file, j, obs[j], t.obs0[j]);
  }
  for (int i = 0; i < t.n; i++) {
    float reward;
    int term, trunc;
    cr_assert_eq(sac_env_step(env, &t.action[i], obs, &reward, &term, &trunc), 0);
    cr_assert_eq(sac_env_elapsed(env), t.step[i]);
    for (int j = 0; j < t.n_obs; j++) {
      float want = t.obs[i * t.n_obs + j];
      double e = rel_err(obs[j], want);
      worst_obs = fmax(worst_obs, e);
      inexact += obs[j] != want;
      cr_assert_leq(e, TOL, "%s step %d: obs[%d] %.9g, want %.9g", file, t.step[i], j, obs[j], want);
    }
    /* The reward is float32 here, float64 in Gymnasium. */
    double e = rel_err(reward, t.reward[i]);
    worst_reward = fmax(worst_reward, e);
    cr_assert_leq(e, TOL, "%s step %d: reward %.9g, want %.17g", file, t.step[i], reward, t.reward[i]);
    cr_assert_eq(term, t.terminated[i], "%s step %d: terminated %d, want %d", file, t.step[i], term,
                 t.terminated[i]);
    cr_assert_eq(trunc, t.truncated[i], "%s step %d: truncated %d, want %d", file, t.step[i], trunc,
                 t.truncated[i]);
  }
  /* Every reference ends on the step that terminated or truncated it. */
  cr_assert(t.terminated[t.n - 1] || t.truncated[t.n - 1]);
  cr_log_info("%s: %d steps, largest error obs %.3g reward %.3g, %d of %d obs not bit-identical", file, t.n,
              worst_obs, worst_reward, inexact, t.n * t.n_obs);
  sac_env_destroy(&env);
  traj_free(&t);
}

Test(env_reference, pendulum) {
  const char *files[] = {"pendulum_sine.csv", "pendulum_random.csv", "pendulum_fast_pos.csv",
                         "pendulum_fast_neg.csv"};
  for (size_t i = 0; i < sizeof files / sizeof *files; i++)
    replay(files[i]);
}

Test(env_reference, mountaincar) {
  const char *files[] = {"mountaincar_goal.csv", "mountaincar_goal_clip.csv", "mountaincar_random.csv",
                         "mountaincar_wall.csv", "mountaincar_both.csv"};
  for (size_t i = 0; i < sizeof files / sizeof *files; i++)
    replay(files[i]);
}

Test(env_reference, truncation_at_time_limit) {
  /* The references end exactly at the limits: 200 for Pendulum, 999 for MountainCar
   * (the goal file terminates earlier; mountaincar_both terminates AND truncates at 999). */
  traj_t t;
  traj_load("pendulum_sine.csv", &t);
  cr_assert_eq(t.n, 200);
  cr_assert(t.truncated[199] && !t.terminated[199]);
  traj_free(&t);
  traj_load("mountaincar_random.csv", &t);
  cr_assert_eq(t.n, 999);
  cr_assert(t.truncated[998] && !t.terminated[998]);
  traj_free(&t);
  traj_load("mountaincar_both.csv", &t);
  cr_assert_eq(t.n, 999);
  cr_assert(t.truncated[998] && t.terminated[998]);
  traj_free(&t);
}

/* ---- single steps computed by hand from REFERENCE.md -------------------------------- */

typedef struct {
  float obs[3];
  float reward;
  int terminated, truncated;
  double state[2];
} step_out_t;

static step_out_t step_from(const char *name, double s0, double s1, float action) {
  sac_env_t *env = NULL;
  cr_assert_eq(sac_env_new(name, 1, 1, &env), 0);
  float obs[3];
  cr_assert_eq(sac_env_reset(env, obs), 0);
  double s[2] = {s0, s1};
  cr_assert_eq(sac_env_set_state(env, s, 2, obs), 0);
  step_out_t out;
  cr_assert_eq(sac_env_step(env, &action, out.obs, &out.reward, &out.terminated, &out.truncated), 0);
  cr_assert_eq(sac_env_get_state(env, out.state, 2), 0);
  sac_env_destroy(&env);
  return out;
}

/* Hand values are exact in float64; observations are float32 and the float32 action terms
 * of NumPy add ~1e-7 relative, hence 1e-6. */
#define HAND_TOL 1e-6

static void expect_pendulum(step_out_t o, double th, double thdot, double reward) {
  cr_expect_float_eq(o.state[0], th, HAND_TOL, "theta %.12g want %.12g", o.state[0], th);
  cr_expect_float_eq(o.state[1], thdot, HAND_TOL, "thetadot %.12g want %.12g", o.state[1], thdot);
  cr_expect_float_eq(o.obs[0], cos(th), HAND_TOL);
  cr_expect_float_eq(o.obs[1], sin(th), HAND_TOL);
  cr_expect_float_eq(o.obs[2], thdot, HAND_TOL);
  cr_expect_float_eq(o.reward, reward, HAND_TOL * fmax(1.0, fabs(reward)), "reward %.9g want %.9g", o.reward,
                     reward);
  cr_expect_eq(o.terminated, 0);
}

Test(env_hand, pendulum_steps) {
  /* thdot' = thdot + (15 sin th + 3u) 0.05, clipped to +-8; th' = th + thdot' 0.05;
   * reward = -(norm(th)^2 + 0.1 thdot^2 + 0.001 u^2) with th, thdot before the step. */
  expect_pendulum(step_from("Pendulum-v1", 0.0, 0.0, 1.0f), 0.0075, 0.15, -0.001);
  /* u = 5 is clipped to 2 in the dynamics and in the cost. */
  expect_pendulum(step_from("Pendulum-v1", PI / 2, 1.0, 5.0f), PI / 2 + 0.1025, 2.05,
                  -(PI * PI / 4 + 0.1 + 0.004));
  /* Speed clip: 7.9 + 21 * 0.05 = 8.95 -> 8; and -8 the other way. */
  expect_pendulum(step_from("Pendulum-v1", PI / 2, 7.9, 2.0f), PI / 2 + 0.4, 8.0,
                  -(PI * PI / 4 + 0.1 * 7.9 * 7.9 + 0.004));
  expect_pendulum(step_from("Pendulum-v1", -PI / 2, -7.9, -3.0f), -PI / 2 - 0.4, -8.0,
                  -(PI * PI / 4 + 0.1 * 7.9 * 7.9 + 0.004));
  /* angle_normalize: 4 -> 4 - 2pi and -7 -> -7 + 2pi in the cost; the state is not wrapped. */
  double thdot = 15 * sin(4.0) * 0.05;
  expect_pendulum(step_from("Pendulum-v1", 4.0, 0.0, 0.0f), 4.0 + thdot * 0.05, thdot,
                  -((4.0 - 2 * PI) * (4.0 - 2 * PI)));
  thdot = 0.5 + 15 * sin(-7.0) * 0.05;
  expect_pendulum(step_from("Pendulum-v1", -7.0, 0.5, 0.0f), -7.0 + thdot * 0.05, thdot,
                  -((2 * PI - 7.0) * (2 * PI - 7.0) + 0.025));
}

static void expect_mountaincar(step_out_t o, double x, double v, double reward, int terminated) {
  cr_expect_float_eq(o.obs[0], x, HAND_TOL, "x %.9g want %.9g", o.obs[0], x);
  cr_expect_float_eq(o.obs[1], v, HAND_TOL, "v %.9g want %.9g", o.obs[1], v);
  cr_expect_float_eq(o.reward, reward, HAND_TOL * fmax(1.0, fabs(reward)), "reward %.9g want %.9g", o.reward,
                     reward);
  cr_expect_eq(o.terminated, terminated);
  cr_expect_eq(o.truncated, 0);
}

Test(env_hand, mountaincar_steps) {
  /* v' = clip(v + clip(a) 0.0015 - 0.0025 cos 3x, +-0.07); x' = clip(x + v', -1.2, 0.6);
   * v' = 0 at the left wall; reward = -0.1 a^2 (+100 at the goal) with a unclipped. */
  double v = 0.0015 - 0.0025 * cos(-1.5);
  expect_mountaincar(step_from("MountainCarContinuous-v0", -0.5, 0.0, 1.0f), -0.5 + v, v, -0.1, 0);
  expect_mountaincar(step_from("MountainCarContinuous-v0", -0.5, 0.0, 2.0f), -0.5 + v, v, -0.4, 0);
  v = -0.0015 - 0.0025 * cos(-1.5);
  expect_mountaincar(step_from("MountainCarContinuous-v0", -0.5, 0.0, -3.0f), -0.5 + v, v, -0.9, 0);
  /* Left wall: x + v' < -1.2 -> x = -1.2, v = 0. */
  expect_mountaincar(step_from("MountainCarContinuous-v0", -1.19, -0.05, -1.0f), -1.2, 0.0, -0.1, 0);
  /* Goal: x' >= 0.45 with v' >= 0 terminates with +100. */
  v = 0.02 - 0.0025 * cos(1.32);
  expect_mountaincar(step_from("MountainCarContinuous-v0", 0.44, 0.02, 0.0f), 0.44 + v, v, 100.0, 1);
  /* Past the goal position but moving left: not terminated. */
  v = -0.001 - 0.0025 * cos(1.41);
  expect_mountaincar(step_from("MountainCarContinuous-v0", 0.47, -0.001, 0.0f), 0.47 + v, v, 0.0, 0);
  /* Speed clip: gravity helps on the left slope, 0.0699 + 0.0015 + 0.0018 -> 0.07, and
   * -0.0699 - 0.0015 - 0.0016 -> -0.07 on the right of the valley. */
  expect_mountaincar(step_from("MountainCarContinuous-v0", -0.8, 0.0699, 1.0f), -0.73, 0.07, -0.1, 0);
  expect_mountaincar(step_from("MountainCarContinuous-v0", -0.3, -0.0699, -1.0f), -0.37, -0.07, -0.1, 0);
  /* The right wall at 0.6 is past the goal: clipped and terminated. */
  expect_mountaincar(step_from("MountainCarContinuous-v0", 0.59, 0.06, 1.0f), 0.6,
                     0.06 + 0.0015 - 0.0025 * cos(1.77), 99.9, 1);
}

Test(env_hand, state_precision_as_gymnasium) {
  /* MountainCar stores its state as float32 after each step (np.array(..., dtype=float32));
   * reset and set_state leave float64. A float64-only implementation drifts from
   * Gymnasium by up to ~2e-6 over 999 steps: within TOL, so this is checked directly. */
  sac_env_t *env = NULL;
  cr_assert_eq(sac_env_new("MountainCarContinuous-v0", 1, 1, &env), 0);
  float obs[3], r, a = 0.3f;
  int term, trunc;
  double s[2] = {-0.5123456789, 0.0012345678901}, got[2];
  cr_assert_eq(sac_env_reset(env, obs), 0);
  cr_assert_eq(sac_env_set_state(env, s, 2, obs), 0);
  cr_assert_eq(sac_env_get_state(env, got, 2), 0);
  cr_assert(got[0] == s[0] && got[1] == s[1]);
  for (int t = 0; t < 3; t++) {
    cr_assert_eq(sac_env_step(env, &a, obs, &r, &term, &trunc), 0);
    cr_assert_eq(sac_env_get_state(env, got, 2), 0);
    cr_assert(got[0] == (double)(float)got[0] && got[1] == (double)(float)got[1]);
    cr_assert(obs[0] == (float)got[0] && obs[1] == (float)got[1]);
  }
  sac_env_destroy(&env);
  /* Pendulum keeps float64. */
  cr_assert_eq(sac_env_new("Pendulum-v1", 1, 1, &env), 0);
  s[0] = 0.3;
  s[1] = 0.1;
  cr_assert_eq(sac_env_reset(env, obs), 0);
  cr_assert_eq(sac_env_set_state(env, s, 2, obs), 0);
  cr_assert_eq(sac_env_step(env, &a, obs, &r, &term, &trunc), 0);
  cr_assert_eq(sac_env_get_state(env, got, 2), 0);
  cr_assert(got[0] != (double)(float)got[0] && got[1] != (double)(float)got[1]);
  sac_env_destroy(&env);
}

/* ---- time limit, termination, clipping, misuse -------------------------------------- */

Test(env_wrapper, pendulum_truncates_at_200_never_terminates) {
  sac_env_t *env = NULL;
  cr_assert_eq(sac_env_new("Pendulum-v1", 3, 3, &env), 0);
  cr_assert_eq(sac_env_spec(env)->max_episode_steps, 200);
  float obs[3], r, a = 0.5f;
  int term, trunc;
  for (int episode = 0; episode < 2; episode++) {
    cr_assert_eq(sac_env_reset(env, obs), 0);
    cr_assert_eq(sac_env_elapsed(env), 0);
    for (int t = 1; t <= 200; t++) {
      cr_assert_eq(sac_env_step(env, &a, obs, &r, &term, &trunc), 0);
      cr_assert_eq(sac_env_elapsed(env), t);
      cr_assert_eq(term, 0);
      cr_assert_eq(trunc, t == 200, "step %d: truncated %d", t, trunc);
    }
  }
  sac_env_destroy(&env);
  cr_assert_null(env);
  sac_env_destroy(&env); /* idempotent */
}

Test(env_wrapper, mountaincar_truncates_at_999_terminates_at_goal) {
  sac_env_t *env = NULL;
  cr_assert_eq(sac_env_new("MountainCarContinuous-v0", 3, 3, &env), 0);
  cr_assert_eq(sac_env_spec(env)->max_episode_steps, 999);
  float obs[2], r, a = 0.0f;
  int term, trunc;
  cr_assert_eq(sac_env_reset(env, obs), 0);
  for (int t = 1; t <= 999; t++) {
    cr_assert_eq(sac_env_step(env, &a, obs, &r, &term, &trunc), 0);
    cr_assert_eq(term, 0); /* idle in the valley */
    cr_assert_eq(trunc, t == 999, "step %d", t);
  }
  /* Termination without truncation early in an episode. */
  cr_assert_eq(sac_env_reset(env, obs), 0);
  double s[2] = {0.44, 0.02};
  cr_assert_eq(sac_env_set_state(env, s, 2, obs), 0);
  cr_assert_eq(sac_env_step(env, &a, obs, &r, &term, &trunc), 0);
  cr_assert(term && !trunc);
  cr_assert_eq(sac_env_elapsed(env), 1);
  /* Both on the same step: the goal reached on step 999. */
  cr_assert_eq(sac_env_reset(env, obs), 0);
  for (int t = 1; t <= 998; t++)
    cr_assert_eq(sac_env_step(env, &a, obs, &r, &term, &trunc), 0);
  cr_assert(!term && !trunc);
  cr_assert_eq(sac_env_set_state(env, s, 2, obs), 0);
  cr_assert_eq(sac_env_step(env, &a, obs, &r, &term, &trunc), 0);
  cr_assert(term && trunc);
  sac_env_destroy(&env);
}

Test(env_wrapper, action_clipping) {
  /* Pendulum: torque beyond +-2 acts (and costs) as +-2. */
  step_out_t in = step_from("Pendulum-v1", 1.0, 0.5, 2.0f), out = step_from("Pendulum-v1", 1.0, 0.5, 1e30f);
  cr_assert(memcmp(in.obs, out.obs, sizeof in.obs) == 0 && in.reward == out.reward);
  in = step_from("Pendulum-v1", 1.0, 0.5, -2.0f), out = step_from("Pendulum-v1", 1.0, 0.5, -7.0f);
  cr_assert(memcmp(in.obs, out.obs, 3 * sizeof(float)) == 0 && in.reward == out.reward);
  /* MountainCar: force clipped to +-1, but the reward charges the action as given. */
  in = step_from("MountainCarContinuous-v0", -0.5, 0.01, 1.0f);
  out = step_from("MountainCarContinuous-v0", -0.5, 0.01, 7.0f);
  cr_assert(memcmp(in.obs, out.obs, 2 * sizeof(float)) == 0);
  cr_assert_float_eq(in.reward, -0.1, 1e-7);
  cr_assert_float_eq(out.reward, -4.9, 1e-6);
  in = step_from("MountainCarContinuous-v0", -0.5, 0.01, -1.0f);
  out = step_from("MountainCarContinuous-v0", -0.5, 0.01, -3.0f);
  cr_assert(memcmp(in.obs, out.obs, 2 * sizeof(float)) == 0);
  cr_assert_float_eq(out.reward, -0.9, 1e-6);
}

Test(env_wrapper, misuse_is_refused) {
  sac_env_t *env = NULL;
  cr_assert_eq(sac_env_new("Pendulum-v1", 1, 1, &env), 0);
  float obs[3], r, a = 0.0f;
  int term, trunc;
  double s[2] = {0.0, 0.0};
  cr_assert_eq(sac_env_step(env, &a, obs, &r, &term, &trunc), SAC_ESTATE);
  cr_assert_eq(sac_env_set_state(env, s, 2, obs), SAC_ESTATE);
  cr_assert_eq(sac_env_reset(env, obs), 0);
  cr_assert_eq(sac_env_set_state(env, s, 3, obs), SAC_EINVAL);
  s[0] = NAN;
  cr_assert_eq(sac_env_set_state(env, s, 2, obs), SAC_EINVAL);
  /* A NaN action is refused and changes nothing. */
  double before[2], after[2];
  cr_assert_eq(sac_env_get_state(env, before, 2), 0);
  a = NAN;
  cr_assert_eq(sac_env_step(env, &a, obs, &r, &term, &trunc), SAC_ENONFINITE);
  a = INFINITY;
  cr_assert_eq(sac_env_step(env, &a, obs, &r, &term, &trunc), SAC_ENONFINITE);
  cr_assert_eq(sac_env_get_state(env, after, 2), 0);
  cr_assert(before[0] == after[0] && before[1] == after[1]);
  cr_assert_eq(sac_env_elapsed(env), 0);
  sac_env_destroy(&env);
}

Test(env_wrapper, unknown_names) {
  const char *names[] = {"Pendulum-v0", "pendulum-v1", "", "CartPole-v1", "MountainCarContinuous", "plugin"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    sac_env_t *env = (sac_env_t *)1;
    const char *log;
    cr_expect_eq(new_captured(names[i], &env, &log), SAC_ENOTFOUND, "'%s'", names[i]);
    cr_expect_null(env);
    cr_expect_not_null(strstr(log, "unknown environment"), "log: %s", log);
  }
}

/* ---- environment IDs as users write them ---------------------------------------------- */

Test(env_ids, unknown_id_lists_every_known_one) {
  sac_env_t *env = (sac_env_t *)1;
  const char *log;
  cr_assert_eq(new_captured("Hopper-v9", &env, &log), SAC_ENOTFOUND);
  cr_assert_null(env);
  const char *ids[] = {
      "Pendulum-v1", "MountainCarContinuous-v0", "HalfCheetah-v4", "Hopper-v4",   "Walker2d-v4",
      "Ant-v4",      "HalfCheetah-v5",           "Hopper-v5",      "Walker2d-v5", "Ant-v5",
      "Humanoid-v5"};
  for (size_t i = 0; i < sizeof ids / sizeof *ids; i++)
    cr_expect_not_null(strstr(log, ids[i]), "'%s' missing from: %s", ids[i], log);
  /* built-ins take no ",ARGS"; only plugin-served IDs pass them on */
  cr_assert_eq(new_captured("Pendulum-v1,max_steps=3", &env, &log), SAC_ENOTFOUND);
  char out[2048];
  cr_assert_eq(sac_env_resolve("MountainCarContinuous-v0", out, sizeof out), 0);
  cr_assert_str_eq(out, "MountainCarContinuous-v0");
}

/* An ID served by a plugin is looked up by file name in SAC_PLUGIN_PATH first: a folder
 * there holding "libsac_env_mujoco.so" (here the example plugin under that name) is the one
 * loaded, and it gets the ID with its arguments. */
Test(env_ids, plugin_is_found_in_SAC_PLUGIN_PATH) {
  char dir[] = "/tmp/sac_test_plugin_path_XXXXXX", link[256], path[512], out[2048];
  cr_assert_not_null(mkdtemp(dir));
  snprintf(link, sizeof link, "%s/libsac_env_mujoco.so", dir);
  cr_assert_eq(symlink(SAC_ENV_EXAMPLE_SO, link), 0);
  snprintf(path, sizeof path, "/nonexistent::%s", dir); /* empty and missing entries are skipped */
  setenv("SAC_PLUGIN_PATH", path, 1);
  cr_assert_eq(sac_env_resolve("Hopper-v5,max_steps=9", out, sizeof out), 0);
  char want[1024];
  snprintf(want, sizeof want, "plugin:%s:Hopper-v5,max_steps=9", link);
  cr_expect_str_eq(out, want);
  sac_env_t *env = NULL;
  const char *log;
  /* the example plugin refuses the MuJoCo arguments: proof that it is the one loaded */
  cr_expect_eq(new_captured("Hopper-v5", &env, &log), SAC_EPLUGIN);
  cr_expect_not_null(strstr(log, link), "log: %s", log);
  /* negative control: without the variable the folder is not searched */
  unsetenv("SAC_PLUGIN_PATH");
  int rc = sac_env_resolve("Hopper-v5", out, sizeof out);
  cr_expect(rc == SAC_EPLUGIN || (rc == 0 && strstr(out, dir) == NULL), "rc %d out %s", rc, out);
  unlink(link);
  rmdir(dir);
}

/* A typo'd ID names the closest shipped one (its case ignored; the newest version on a tie);
 * an ID close to none gets no suggestion (the control). */
Test(env_ids, env_id_suggestions) {
  const char *cases[][2] = {{"pendulum-v1", "Pendulum-v1"},
                            {"Pendulum-v0", "Pendulum-v1"},
                            {"PENDULUM-V1", "Pendulum-v1"},
                            {"halfcheetah-v5", "HalfCheetah-v5"},
                            {"HalfCheetah", "HalfCheetah-v5"},
                            {"Walker2D-v4", "Walker2d-v4"},
                            {"CartPole-v1", ""},
                            {"Hopper-v5,max_steps=9", "Hopper-v5"}};
  char out[64];
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    sac_env_suggest(cases[i][0], out, sizeof out);
    cr_expect_str_eq(out, cases[i][1], "'%s'", cases[i][0]);
  }
  capture_t c;
  capture_begin(&c);
  int rc = sac_env_check("pendulum-v1");
  const char *log = capture_end(&c);
  cr_expect_eq(rc, SAC_ENOTFOUND);
  cr_expect_not_null(strstr(log, "unknown environment 'pendulum-v1' (did you mean Pendulum-v1?"), "log: %s",
                     log);
}

/* A MuJoCo ID where the plugin was never built names the cause (no libmujoco at configure
 * time) and the fix; where it was built but is not found, the folders looked in (the
 * control). */
Test(env_ids, mujoco_missing_says_how_to_build) {
  char dir[] = "/tmp/sac_test_no_plugin_XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  setenv("SAC_PLUGIN_PATH", dir, 1);
  sac__env_plugin_test_search(1, 0);
  capture_t c;
  capture_begin(&c);
  int rc = sac_env_check("HalfCheetah-v5");
  const char *log = capture_end(&c);
  cr_expect_eq(rc, SAC_EPLUGIN);
  cr_expect_not_null(strstr(log, "the MuJoCo environments are not in this build"), "log: %s", log);
  cr_expect_not_null(strstr(log, "libmujoco-dev"), "log: %s", log);
  cr_expect_not_null(strstr(log, "cmake --build build"), "log: %s", log);
  sac__env_plugin_test_search(1, 1);
  capture_begin(&c);
  rc = sac_env_check("HalfCheetah-v5");
  log = capture_end(&c);
  cr_expect_eq(rc, SAC_EPLUGIN);
  cr_expect_null(strstr(log, "libmujoco-dev"), "log: %s", log);
  cr_expect_not_null(strstr(log, "not found (looked in"), "log: %s", log);
  sac__env_plugin_test_search(0, 1);
  unsetenv("SAC_PLUGIN_PATH");
  rmdir(dir);
}

/* ---- reset distribution and random streams ------------------------------------------ */

Test(env_reset, pendulum_distribution) {
  sac_env_t *env = NULL;
  cr_assert_eq(sac_env_new("Pendulum-v1", 11, SAC_STREAM_ENV(0, 0), &env), 0);
  float obs[3];
  double s[2], lo[2] = {1e9, 1e9}, hi[2] = {-1e9, -1e9}, sum[2] = {0, 0};
  const int n = 20000;
  for (int i = 0; i < n; i++) {
    cr_assert_eq(sac_env_reset(env, obs), 0);
    cr_assert_eq(sac_env_get_state(env, s, 2), 0);
    cr_assert(s[0] >= -PI && s[0] <= PI, "theta %g", s[0]);
    cr_assert(s[1] >= -1.0 && s[1] <= 1.0, "thetadot %g", s[1]);
    cr_assert(obs[0] == (float)cos(s[0]) && obs[1] == (float)sin(s[0]) && obs[2] == (float)s[1]);
    for (int j = 0; j < 2; j++) {
      lo[j] = fmin(lo[j], s[j]);
      hi[j] = fmax(hi[j], s[j]);
      sum[j] += s[j];
    }
  }
  /* Covers the whole box (the gap to an edge is ~ width / n) and is centred:
   * the means have standard errors 1.81/sqrt(n) = 0.013 and 0.58/sqrt(n) = 0.004. */
  cr_assert(lo[0] < -PI + 0.01 && hi[0] > PI - 0.01, "theta range [%g, %g]", lo[0], hi[0]);
  cr_assert(lo[1] < -0.99 && hi[1] > 0.99, "thetadot range [%g, %g]", lo[1], hi[1]);
  cr_assert(fabs(sum[0] / n) < 0.06 && fabs(sum[1] / n) < 0.02);
  sac_env_destroy(&env);
}

Test(env_reset, mountaincar_distribution) {
  sac_env_t *env = NULL;
  cr_assert_eq(sac_env_new("MountainCarContinuous-v0", 11, SAC_STREAM_ENV(0, 0), &env), 0);
  float obs[2];
  double lo = 1e9, hi = -1e9, sum = 0;
  const int n = 20000;
  for (int i = 0; i < n; i++) {
    cr_assert_eq(sac_env_reset(env, obs), 0);
    cr_assert(obs[0] >= -0.6f && obs[0] <= -0.4f, "x %g", obs[0]);
    cr_assert(obs[1] == 0.0f);
    lo = fmin(lo, obs[0]);
    hi = fmax(hi, obs[0]);
    sum += obs[0];
  }
  cr_assert(lo < -0.599 && hi > -0.401, "x range [%g, %g]", lo, hi);
  cr_assert(fabs(sum / n + 0.5) < 0.003); /* standard error 0.058/sqrt(n) = 0.0004 */
  sac_env_destroy(&env);
}

Test(env_reset, draws_from_the_given_stream) {
  /* Pendulum's reset is theta = U(-pi, pi), then thetadot = U(-1, 1), from (seed, stream). */
  uint64_t seed = 1234, stream = SAC_STREAM_ENV(7, 3);
  sac_env_t *env = NULL;
  cr_assert_eq(sac_env_new("Pendulum-v1", seed, stream, &env), 0);
  sac_rng_t rng;
  sac_rng_init(&rng, seed, stream);
  for (int i = 0; i < 10; i++) {
    float obs[3];
    double s[2];
    cr_assert_eq(sac_env_reset(env, obs), 0);
    cr_assert_eq(sac_env_get_state(env, s, 2), 0);
    double th = sac_rng_uniform_range(&rng, -PI, PI);
    double thdot = sac_rng_uniform_range(&rng, -1.0, 1.0);
    cr_assert(s[0] == th && s[1] == thdot, "reset %d", i);
  }
  sac_env_destroy(&env);
}

/* First k reset observations of env `name` made with (seed, stream). */
static void reset_sequence(const char *name, uint64_t seed, uint64_t stream, int k, float *out, int *dim) {
  sac_env_t *env = NULL;
  cr_assert_eq(sac_env_new(name, seed, stream, &env), 0);
  *dim = sac_env_spec(env)->obs_dim;
  for (int i = 0; i < k; i++)
    cr_assert_eq(sac_env_reset(env, out + i * *dim), 0);
  sac_env_destroy(&env);
}

static void check_determinism(const char *name) {
  enum { K = 5 };
  static float a[K * 8], b[K * 8], c[K * 8], d[K * 8];
  int dim;
  reset_sequence(name, 42, SAC_STREAM_ENV(3, 1), K, a, &dim);
  reset_sequence(name, 42, SAC_STREAM_ENV(3, 1), K, b, &dim);
  reset_sequence(name, 42, SAC_STREAM_ENV(3, 2), K, c, &dim);
  reset_sequence(name, 43, SAC_STREAM_ENV(3, 1), K, d, &dim);
  size_t bytes = sizeof(float) * (size_t)(K * dim);
  cr_assert(memcmp(a, b, bytes) == 0, "%s: same seed and stream must give the same resets", name);
  cr_assert(memcmp(a, c, bytes) != 0, "%s: another stream must give other resets", name);
  cr_assert(memcmp(a, d, bytes) != 0, "%s: another seed must give other resets", name);
  /* Consecutive resets differ too. */
  cr_assert(memcmp(a, a + dim, sizeof(float) * (size_t)dim) != 0);
}

Test(env_reset, determinism_by_seed_and_stream) {
  check_determinism("Pendulum-v1");
  check_determinism("MountainCarContinuous-v0");
  check_determinism("plugin:" SAC_ENV_EXAMPLE_SO);
}

/* ---- allocation ---------------------------------------------------------------------- */

static long count_allocs(const char *name) {
  sac_env_t *env = NULL;
  cr_assert_eq(sac_env_new(name, 1, 2, &env), 0);
  const sac_env_spec_t *spec = sac_env_spec(env);
  float obs[SAC_ENV_MAX_OBS], act[SAC_ENV_MAX_ACT], r;
  int term, trunc;
  g_allocs = 0;
  g_counting = 1;
  for (int episode = 0; episode < 3; episode++) {
    sac_env_reset(env, obs);
    for (int t = 0; t < 300; t++) {
      for (int i = 0; i < spec->act_dim; i++)
        act[i] = (float)sin(0.1 * t + i) * 1.5f * spec->act_high[i];
      sac_env_step(env, act, obs, &r, &term, &trunc);
      if (term || trunc)
        break;
    }
  }
  g_counting = 0;
  sac_env_destroy(&env);
  return g_allocs;
}

Test(env_alloc, reset_and_step_allocate_nothing) {
  /* The counter works: an allocation inside the window is seen. */
  g_allocs = 0;
  g_counting = 1;
  void *volatile p = malloc(16); /* volatile: the pair must not be optimised away */
  free(p);
  g_counting = 0;
  cr_assert_eq(g_allocs, 2);
  cr_assert_eq(count_allocs("Pendulum-v1"), 0);
  cr_assert_eq(count_allocs("MountainCarContinuous-v0"), 0);
  cr_assert_eq(count_allocs("plugin:" SAC_ENV_EXAMPLE_SO), 0);
}

/* ---- plugins ------------------------------------------------------------------------- */

Test(env_plugin, example_loads_and_steps) {
  sac_env_t *env = NULL;
  cr_assert_eq(sac_env_new("plugin:" SAC_ENV_EXAMPLE_SO, 9, 9, &env), 0);
  const sac_env_spec_t *spec = sac_env_spec(env);
  cr_assert_str_eq(spec->name, "PointMass-v0");
  cr_assert_eq(spec->obs_dim, 6);
  cr_assert_eq(spec->act_dim, 2);
  cr_assert(spec->act_low[0] == -1.0f && spec->act_high[1] == 1.0f);
  cr_assert_eq(spec->max_episode_steps, 200);
  float obs[6], obs2[6], r;
  int term, trunc;
  cr_assert_eq(sac_env_reset(env, obs), 0);
  /* Pushing towards the goal (obs[4..5] = g - p) moves the mass and earns more than idling. */
  float act[2] = {obs[4] > 0 ? 1.0f : -1.0f, obs[5] > 0 ? 1.0f : -1.0f};
  cr_assert_eq(sac_env_step(env, act, obs2, &r, &term, &trunc), 0);
  cr_assert(obs2[0] != obs[0] && obs2[1] != obs[1]);
  cr_assert(r < 0 && !term && !trunc);
  cr_assert_eq(sac_env_elapsed(env), 1);
  cr_assert_eq(sac_env_set_state(env, (double[]){0, 0}, 2, obs), SAC_EUNSUPPORTED);
  sac_env_destroy(&env);
}

Test(env_plugin, time_limit_comes_from_the_spec) {
  sac_env_t *env = NULL;
  cr_assert_eq(sac_env_new("plugin:" SAC_ENV_EXAMPLE_SO ":max_steps=7", 9, 9, &env), 0);
  cr_assert_eq(sac_env_spec(env)->max_episode_steps, 7);
  float obs[6], r, act[2] = {0, 0};
  int term, trunc;
  for (int episode = 0; episode < 2; episode++) {
    cr_assert_eq(sac_env_reset(env, obs), 0);
    for (int t = 1; t <= 7; t++) {
      cr_assert_eq(sac_env_step(env, act, obs, &r, &term, &trunc), 0);
      cr_assert_eq(term, 0);
      cr_assert_eq(trunc, t == 7, "step %d", t);
    }
  }
  sac_env_destroy(&env);
  /* Termination comes from the plugin: with a huge goal radius the first step reaches it. */
  cr_assert_eq(sac_env_new("plugin:" SAC_ENV_EXAMPLE_SO ":radius=5,max_steps=7", 9, 9, &env), 0);
  cr_assert_eq(sac_env_reset(env, obs), 0);
  cr_assert_eq(sac_env_step(env, act, obs, &r, &term, &trunc), 0);
  cr_assert(term && !trunc);
  cr_assert_gt(r, 5.0f);
  sac_env_destroy(&env);
}

Test(env_plugin, bad_args_are_reported) {
  sac_env_t *env = NULL;
  const char *log;
  cr_assert_eq(new_captured("plugin:" SAC_ENV_EXAMPLE_SO ":speed=3", &env, &log), SAC_EPLUGIN);
  cr_assert_null(env);
  cr_assert_not_null(strstr(log, "unknown argument 'speed'"), "log: %s", log);
  cr_assert_not_null(strstr(log, SAC_ENV_EXAMPLE_SO), "log: %s", log);
}

Test(env_plugin, missing_symbol_is_named) {
  sac_env_t *env = (sac_env_t *)1;
  const char *log;
  cr_assert_eq(new_captured("plugin:" SAC_PLUGIN_MISSING_SYMBOL_SO, &env, &log), SAC_EPLUGIN);
  cr_assert_null(env);
  cr_assert_not_null(strstr(log, "missing symbol sac_env_plugin_step"), "log: %s", log);
  cr_assert_not_null(strstr(log, SAC_PLUGIN_MISSING_SYMBOL_SO), "log: %s", log);
  cr_assert_null(strstr(log, "sac_env_plugin_reset"), "only the missing symbol is named: %s", log);
}

Test(env_plugin, nonexistent_path) {
  sac_env_t *env = (sac_env_t *)1;
  const char *log;
  cr_assert_eq(new_captured("plugin:/nonexistent/libnothing.so:x=1", &env, &log), SAC_EPLUGIN);
  cr_assert_null(env);
  cr_assert_not_null(strstr(log, "/nonexistent/libnothing.so: cannot load"), "log: %s", log);
  cr_assert_not_null(strstr(log, "No such file"), "dlerror() is in the log: %s", log);
  cr_assert_eq(new_captured("plugin:", &env, &log), SAC_EPLUGIN);
  cr_assert_not_null(strstr(log, "empty library path"), "log: %s", log);
  cr_assert_eq(new_captured("plugin::args", &env, &log), SAC_EPLUGIN);
  /* A file that exists but is not a shared library. */
  cr_assert_eq(new_captured("plugin:" SAC_TEST_DATA "/pendulum_sine.csv", &env, &log), SAC_EPLUGIN);
  cr_assert_not_null(strstr(log, "cannot load"), "log: %s", log);
}

Test(env_plugin, wrong_abi_version) {
  sac_env_t *env = NULL;
  const char *log;
  cr_assert_eq(new_captured("plugin:" SAC_PLUGIN_BAD_ABI_SO, &env, &log), SAC_EPLUGIN);
  cr_assert_null(env);
  cr_assert_not_null(strstr(log, "ABI version 999"), "log: %s", log);
}

Test(env_plugin, invalid_spec) {
  sac_env_t *env = NULL;
  const char *log;
  cr_assert_eq(new_captured("plugin:" SAC_PLUGIN_BAD_SPEC_SO, &env, &log), SAC_EPLUGIN);
  cr_assert_null(env);
  cr_assert_not_null(strstr(log, "invalid spec: act_low >= act_high (action 0)"), "log: %s", log);
}

Test(env_plugin, create_failure_reason) {
  sac_env_t *env = NULL;
  const char *log;
  cr_assert_eq(new_captured("plugin:" SAC_PLUGIN_CREATE_FAILS_SO ":a=b", &env, &log), SAC_EPLUGIN);
  cr_assert_null(env);
  cr_assert_not_null(strstr(log, "refusing on purpose (args 'a=b')"), "log: %s", log);
}

Test(env_plugin, non_finite_output_is_refused) {
  sac_env_t *env = NULL;
  cr_assert_eq(sac_env_new("plugin:" SAC_PLUGIN_NAN_STEP_SO, 1, 1, &env), 0);
  float obs[1], r, a = 0.1f;
  int term, trunc;
  cr_assert_eq(sac_env_reset(env, obs), 0);
  cr_assert_eq(sac_env_step(env, &a, obs, &r, &term, &trunc), 0);
  capture_t c;
  capture_begin(&c);
  int rc = sac_env_step(env, &a, obs, &r, &term, &trunc);
  const char *log = capture_end(&c);
  cr_assert_eq(rc, SAC_ENONFINITE);
  cr_assert_not_null(strstr(log, "non-finite"), "log: %s", log);
  cr_assert_eq(sac_env_elapsed(env), 1);
  sac_env_destroy(&env);
}
