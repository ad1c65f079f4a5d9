/* An example sacfleet environment plugin (see docs/ENV_PLUGIN.md and common/env_plugin.h):
 * PointMass-v0, a 2-D point mass that must reach a goal inside the square [-1, 1]^2.
 *
 *   state:   position p, velocity v, goal g (all 2-D)
 *   action:  force a in [-1, 1]^2 (clipped here)
 *   dynamics (dt = 0.05, unit mass, linear drag 0.5):
 *            v' = clip(v + (a - 0.5 v) dt, -2, 2),  p' = clip(p + v' dt, -1, 1)
 *            (hitting a wall zeroes that velocity component)
 *   obs:     [p, v, g - p]                                            (6 floats)
 *   reward:  -|g - p'| - 0.01 |a|^2, plus 10 on reaching the goal
 *   terminated when |g - p'| < radius; truncated by sacfleet at max_steps
 *   reset:   p, g ~ U([-0.9, 0.9]^2) at least 0.5 apart, v = 0
 *
 * ARGS (after the path in "plugin:PATH.so:ARGS"): comma-separated key=value pairs,
 * max_steps=N (default 200) and radius=R (default 0.05), e.g. "max_steps=100,radius=0.1".
 *
 * Build: cc -shared -fPIC -fvisibility=hidden -O2 point_mass.c -o libsac_env_example.so -lm
 * It keeps no global state, allocates only in create, and does not depend on sacfleet
 * beyond the one header. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/env_plugin.h"

#define DT 0.05
#define DRAG 0.5
#define MAX_SPEED 2.0
#define GOAL_BONUS 10.0

typedef struct {
  double p[2], v[2], g[2];
  double radius;
  uint64_t rng; /* splitmix64 state, seeded at each reset */
} point_mass_t;

static uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Uniform in [lo, hi). */
static double uniform(uint64_t *s, double lo, double hi) {
  return lo + (hi - lo) * (double)(splitmix64(s) >> 11) * (1.0 / 9007199254740992.0);
}

static double clip(double x, double lo, double hi) { return x < lo ? lo : (x > hi ? hi : x); }

static double goal_distance(const point_mass_t *e) { return hypot(e->g[0] - e->p[0], e->g[1] - e->p[1]); }

static void get_obs(const point_mass_t *e, float *obs) {
  for (int i = 0; i < 2; i++) {
    obs[i] = (float)e->p[i];
    obs[2 + i] = (float)e->v[i];
    obs[4 + i] = (float)(e->g[i] - e->p[i]);
  }
}

/* Parses "key=value,key=value"; returns 0, or -1 with a reason in err. */
static int parse_args(const char *args, int *max_steps, double *radius, char *err, size_t err_len) {
  const char *s = args;
  while (*s) {
    const char *end = strchr(s, ',');
    size_t len = end ? (size_t)(end - s) : strlen(s);
    char item[64];
    if (len >= sizeof item) {
      snprintf(err, err_len, "argument too long: '%.*s'", (int)len, s);
      return -1;
    }
    memcpy(item, s, len);
    item[len] = '\0';
    char *eq = strchr(item, '=');
    char *rest = NULL;
    if (!eq) {
      snprintf(err, err_len, "expected key=value, got '%s'", item);
      return -1;
    }
    *eq = '\0';
    const char *value = eq + 1;
    if (strcmp(item, "max_steps") == 0) {
      long n = strtol(value, &rest, 10);
      if (rest == value || *rest || n < 0 || n > 1000000) {
        snprintf(err, err_len, "max_steps must be an integer in [0, 1000000], got '%s'", value);
        return -1;
      }
      *max_steps = (int)n;
    } else if (strcmp(item, "radius") == 0) {
      double r = strtod(value, &rest);
      if (rest == value || *rest || !(r > 0.0 && r < 10.0)) {
        snprintf(err, err_len, "radius must be a number in (0, 10), got '%s'", value);
        return -1;
      }
      *radius = r;
    } else {
      snprintf(err, err_len, "unknown argument '%s' (known: max_steps, radius)", item);
      return -1;
    }
    s = end ? end + 1 : s + len;
  }
  return 0;
}

SAC_ENV_PLUGIN_EXPORT int sac_env_plugin_abi_version(void) { return SAC_ENV_PLUGIN_ABI_VERSION; }

SAC_ENV_PLUGIN_EXPORT void *sac_env_plugin_create(const char *args, sac_env_plugin_spec_t *spec, char *err,
                                                  size_t err_len) {
  int max_steps = 200;
  double radius = 0.05;
  if (parse_args(args, &max_steps, &radius, err, err_len) != 0)
    return NULL;
  point_mass_t *e = calloc(1, sizeof *e);
  if (!e) {
    snprintf(err, err_len, "out of memory");
    return NULL;
  }
  e->radius = radius;
  snprintf(spec->name, sizeof spec->name, "PointMass-v0");
  spec->obs_dim = 6;
  spec->act_dim = 2;
  for (int i = 0; i < 2; i++) {
    spec->act_low[i] = -1.0f;
    spec->act_high[i] = 1.0f;
  }
  spec->max_episode_steps = max_steps;
  return e;
}

SAC_ENV_PLUGIN_EXPORT void sac_env_plugin_destroy(void *handle) { free(handle); }

SAC_ENV_PLUGIN_EXPORT int sac_env_plugin_reset(void *handle, uint64_t seed, float *obs) {
  point_mass_t *e = handle;
  e->rng = seed;
  do {
    for (int i = 0; i < 2; i++) {
      e->p[i] = uniform(&e->rng, -0.9, 0.9);
      e->g[i] = uniform(&e->rng, -0.9, 0.9);
      e->v[i] = 0.0;
    }
  } while (goal_distance(e) < 0.5);
  get_obs(e, obs);
  return 0;
}

SAC_ENV_PLUGIN_EXPORT int sac_env_plugin_step(void *handle, const float *action, float *obs, float *reward,
                                              int *terminated) {
  point_mass_t *e = handle;
  double a[2], effort = 0.0;
  for (int i = 0; i < 2; i++) {
    a[i] = clip(action[i], -1.0, 1.0);
    effort += a[i] * a[i];
    e->v[i] = clip(e->v[i] + (a[i] - DRAG * e->v[i]) * DT, -MAX_SPEED, MAX_SPEED);
    e->p[i] += e->v[i] * DT;
    if (e->p[i] < -1.0 || e->p[i] > 1.0) {
      e->p[i] = clip(e->p[i], -1.0, 1.0);
      e->v[i] = 0.0;
    }
  }
  double dist = goal_distance(e);
  int reached = dist < e->radius;
  get_obs(e, obs);
  *reward = (float)(-dist - 0.01 * effort + (reached ? GOAL_BONUS : 0.0));
  *terminated = reached;
  return 0;
}
