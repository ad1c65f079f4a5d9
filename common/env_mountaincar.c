/* Gymnasium's MountainCarContinuous-v0 (gymnasium/envs/classic_control/
 * continuous_mountain_car.py), reproduced operation by operation. Only the dynamics: the
 * 999-step time limit is the wrapper's (env.c).
 *
 * Unlike Pendulum, Gymnasium stores this state as float32 (`self.state = np.array(...,
 * dtype=np.float32)` at the end of step), while reset() leaves a float64 state. NumPy 2
 * then computes each step in the type of its operands: with a float32 state (or action)
 * the arithmetic and the comparisons are float32, Python-float constants being rounded
 * to float32 first (weak scalars); with the float64 state of the first step they are
 * float64; clipping replaces a value with a Python float (float64). This file tracks
 * those types so its trajectories match Gymnasium's bit for bit on the same libm. The
 * state is kept as double, holding float32 values after a step. Casts force float
 * rounding even where FLT_EVAL_METHOD != 0. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/env_internal.h"
#include "common/error.h"

#define MIN_ACTION -1.0
#define MAX_ACTION 1.0
#define MIN_POSITION -1.2
#define MAX_POSITION 0.6
#define MAX_SPEED 0.07
#define GOAL_POSITION 0.45
#define POWER 0.0015

typedef struct {
  double pos, vel;
  int f32; /* 1: the state is float32 (after a step); 0: float64 (after reset/set_state) */
} mountaincar_t;

static float f(double x) { return (float)x; }

/* x > c, x < c, x == c, x >= c for a NumPy scalar x compared with a Python float c: in
 * float32 when x is float32. */
static int gt(double x, int x32, double c) { return x32 ? f(x) > f(c) : x > c; }
static int lt(double x, int x32, double c) { return x32 ? f(x) < f(c) : x < c; }
static int eq(double x, int x32, double c) { return x32 ? f(x) == f(c) : x == c; }
static int ge(double x, int x32, double c) { return x32 ? f(x) >= f(c) : x >= c; }

static void get_obs(const mountaincar_t *s, float *obs) {
  obs[0] = f(s->pos);
  obs[1] = f(s->vel);
}

static int mountaincar_create(const char *args, sac_env_spec_t *spec, void **impl) {
  mountaincar_t *s = calloc(1, sizeof *s);
  if (!s)
    return SAC_ENOMEM;
  snprintf(spec->name, sizeof spec->name, "MountainCarContinuous-v0");
  spec->obs_dim = 2;
  spec->act_dim = 1;
  spec->act_low[0] = (float)MIN_ACTION;
  spec->act_high[0] = (float)MAX_ACTION;
  spec->max_episode_steps = 999;
  *impl = s;
  return 0;
}

static void mountaincar_destroy(void *impl) { free(impl); }

static int mountaincar_reset(void *impl, sac_rng_t *rng, float *obs) {
  mountaincar_t *s = impl;
  s->pos = sac_rng_uniform_range(rng, -0.6, -0.4);
  s->vel = 0.0;
  s->f32 = 0;
  get_obs(s, obs);
  return 0;
}

static int mountaincar_step(void *impl, const float *action, float *obs, float *reward, int *terminated) {
  mountaincar_t *s = impl;
  double pos = s->pos, vel = s->vel;
  int pos32 = s->f32, vel32 = s->f32; /* NumPy type of each: float32 or float64 */
  float a = action[0];

  /* force = min(max(action[0], -1.0), 1.0): the float32 action, or a Python float bound. */
  double push;
  int push32 = 0;
  if (a < (float)MIN_ACTION) {
    push = MIN_ACTION * POWER;
  } else if (a > (float)MAX_ACTION) {
    push = MAX_ACTION * POWER;
  } else {
    push = f(a * f(POWER));
    push32 = 1;
  }
  /* velocity += force * power - 0.0025 * math.cos(3 * position) */
  double x3 = pos32 ? (double)f(3.0f * f(pos)) : 3.0 * pos;
  double gravity = 0.0025 * cos(x3);
  double dv = push32 ? (double)f(f(push) - f(gravity)) : push - gravity;
  vel = vel32 ? (double)f(f(vel) + f(dv)) : vel + dv;
  if (gt(vel, vel32, MAX_SPEED)) {
    vel = MAX_SPEED;
    vel32 = 0;
  }
  if (lt(vel, vel32, -MAX_SPEED)) {
    vel = -MAX_SPEED;
    vel32 = 0;
  }
  /* position += velocity */
  pos = pos32 ? (double)f(f(pos) + f(vel)) : pos + vel;
  if (gt(pos, pos32, MAX_POSITION)) {
    pos = MAX_POSITION;
    pos32 = 0;
  }
  if (lt(pos, pos32, MIN_POSITION)) {
    pos = MIN_POSITION;
    pos32 = 0;
  }
  if (eq(pos, pos32, MIN_POSITION) && vel < 0)
    vel = 0.0;

  int done = ge(pos, pos32, GOAL_POSITION) && vel >= 0.0;
  /* reward = 100 on reaching the goal, minus 0.1 * action**2 for the action as given
   * (math.pow in float64; a float32 squared is exact in float64). */
  double r = (done ? 100.0 : 0.0) - ((double)a * (double)a) * 0.1;

  s->pos = f(pos);
  s->vel = f(vel);
  s->f32 = 1;
  get_obs(s, obs);
  *reward = f(r);
  *terminated = done;
  return 0;
}

static void mountaincar_set_state(void *impl, const double *state, float *obs) {
  mountaincar_t *s = impl;
  s->pos = state[0];
  s->vel = state[1];
  s->f32 = 0; /* as `env.unwrapped.state = np.array([x, v])`, a float64 array */
  get_obs(s, obs);
}

static void mountaincar_get_state(const void *impl, double *state) {
  const mountaincar_t *s = impl;
  state[0] = s->pos;
  state[1] = s->vel;
}

const sac__env_ops_t sac__env_mountaincar_ops = {
    .create = mountaincar_create,
    .destroy = mountaincar_destroy,
    .reset = mountaincar_reset,
    .step = mountaincar_step,
    .state_dim = 2,
    .set_state = mountaincar_set_state,
    .get_state = mountaincar_get_state,
};
