/* Gymnasium's Pendulum-v1 (gymnasium/envs/classic_control/pendulum.py), reproduced
 * operation by operation so trajectories match Gymnasium's to float32 observation
 * rounding. Only the dynamics: the 200-step time limit is the wrapper's (env.c).
 *
 * Gymnasium keeps (theta, thetadot) as float64 and returns float32 observations; so does
 * this file. The action arrives as float32 and NumPy (2.x, weak Python scalars) keeps
 * the terms that involve only it in float32: u**2, 0.001 * u**2 and 3.0 * u are rounded
 * to float32 before they meet the float64 terms. The float arithmetic below does the
 * same; the casts force float rounding even where FLT_EVAL_METHOD != 0. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/env_internal.h"
#include "common/error.h"

#define PI 3.141592653589793 /* np.pi */
#define MAX_SPEED 8.0
#define MAX_TORQUE 2.0f
#define DT 0.05
#define G 10.0
#define M 1.0
#define L 1.0

typedef struct {
  double th, thdot;
} pendulum_t;

/* NumPy's float64 remainder (npy_divmod): the result takes the sign of the divisor. */
static double np_remainder(double a, double b) {
  double mod = fmod(a, b);
  if (mod != 0.0) {
    if ((b < 0) != (mod < 0))
      mod += b;
  } else {
    mod = copysign(0.0, b);
  }
  return mod;
}

static double angle_normalize(double x) { return np_remainder(x + PI, 2 * PI) - PI; }

static void get_obs(const pendulum_t *p, float *obs) {
  obs[0] = (float)cos(p->th);
  obs[1] = (float)sin(p->th);
  obs[2] = (float)p->thdot;
}

static int pendulum_create(const char *args, sac_env_spec_t *spec, void **impl) {
  pendulum_t *p = calloc(1, sizeof *p);
  if (!p)
    return SAC_ENOMEM;
  snprintf(spec->name, sizeof spec->name, "Pendulum-v1");
  spec->obs_dim = 3;
  spec->act_dim = 1;
  spec->act_low[0] = -MAX_TORQUE;
  spec->act_high[0] = MAX_TORQUE;
  spec->max_episode_steps = 200;
  *impl = p;
  return 0;
}

static void pendulum_destroy(void *impl) { free(impl); }

static int pendulum_reset(void *impl, sac_rng_t *rng, float *obs) {
  pendulum_t *p = impl;
  /* np_random.uniform(low=-[pi, 1], high=[pi, 1]): theta first, then thetadot. */
  p->th = sac_rng_uniform_range(rng, -PI, PI);
  p->thdot = sac_rng_uniform_range(rng, -1.0, 1.0);
  get_obs(p, obs);
  return 0;
}

static int pendulum_step(void *impl, const float *action, float *obs, float *reward, int *terminated) {
  pendulum_t *p = impl;
  float u = action[0];
  u = u < -MAX_TORQUE ? -MAX_TORQUE : (u > MAX_TORQUE ? MAX_TORQUE : u); /* np.clip, float32 */

  double an = angle_normalize(p->th);
  float u_cost = (float)(0.001f * (float)(u * u)); /* float32 in NumPy */
  double costs = an * an + 0.1 * (p->thdot * p->thdot) + (double)u_cost;

  float u_torque = (float)(3.0f * u); /* 3.0 / (m * l**2) * u, float32 in NumPy */
  double newthdot = p->thdot + (3 * G / (2 * L) * sin(p->th) + (double)u_torque) * DT;
  newthdot = newthdot < -MAX_SPEED ? -MAX_SPEED : (newthdot > MAX_SPEED ? MAX_SPEED : newthdot);
  double newth = p->th + newthdot * DT;

  p->th = newth;
  p->thdot = newthdot;
  get_obs(p, obs);
  *reward = (float)-costs;
  *terminated = 0;
  return 0;
}

static void pendulum_set_state(void *impl, const double *state, float *obs) {
  pendulum_t *p = impl;
  p->th = state[0];
  p->thdot = state[1];
  get_obs(p, obs);
}

static void pendulum_get_state(const void *impl, double *state) {
  const pendulum_t *p = impl;
  state[0] = p->th;
  state[1] = p->thdot;
}

const sac__env_ops_t sac__env_pendulum_ops = {
    .create = pendulum_create,
    .destroy = pendulum_destroy,
    .reset = pendulum_reset,
    .step = pendulum_step,
    .state_dim = 2,
    .set_state = pendulum_set_state,
    .get_state = pendulum_get_state,
};
