/* MuJoCo locomotion environments as a sacfleet environment plugin (common/env_plugin.h):
 * HalfCheetah, Hopper, Walker2d and Ant, -v4 and -v5, and Humanoid-v5, with Gymnasium's definitions
 * (gymnasium/envs/mujoco/<name>_v4.py and _v5.py, default constructor arguments): the same observation
 * layout, reward terms, healthy ranges and termination, frame skip, reset noise and a
 * 1000-step time limit (enforced by the sacfleet loader, reported as truncation).
 *
 * It is not a renderer and not a copy of the models: the XML is read at create time from
 * a path, in this order: the model=PATH argument; $SAC_MUJOCO_ASSETS/<file>.xml; the
 * Gymnasium assets folder found when this library was configured (SAC_MUJOCO_ASSETS_DIR);
 * the assets folder of the Gymnasium that the python3 on PATH imports, asked at run time
 * (so a build made before Gymnasium was installed, or an installed package, still works).
 *
 * ARGS (after the library path in "plugin:PATH/libsac_env_mujoco.so:ARGS"):
 *   ENV_ID[,model=PATH.xml][,max_steps=N][,WEIGHT=X...]   e.g. "Hopper-v4" or "Ant-v4,max_steps=500"
 * where WEIGHT is one of Gymnasium's own constructor arguments for the reward, with its
 * default unless given: forward_reward_weight (1; Humanoid 1.25), ctrl_cost_weight (the
 * task's), contact_cost_weight (Ant-v5 5e-4, Humanoid-v5 5e-7; others have no contact
 * term) and healthy_reward (1; Humanoid 5; HalfCheetah has none).
 *
 * Stepping allocates nothing: mj_step works in the mjData arena made at create time.
 * Each handle owns its mjModel and mjData and there is no mutable global state besides
 * the lock around model loading, so handles may be created and stepped from different
 * threads. Gymnasium calls mj_rnePostConstraint after stepping; that only fills
 * cacc/cfrc_int/cfrc_ext, which none of these tasks but Ant-v5 and Humanoid-v5 reads (Ant-v4 with its
 * default use_contact_forces=False) and mj_step recomputes, so only those two call it. The action
 * is given to MuJoCo as is (MuJoCo clamps ctrl to ctrlrange) and the control cost uses it
 * unclipped, as Gymnasium does. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mujoco/mujoco.h>

#include "common/env_plugin.h"

#ifndef SAC_MUJOCO_ASSETS_DIR
#define SAC_MUJOCO_ASSETS_DIR ""
#endif

typedef enum { TASK_HALF_CHEETAH, TASK_HOPPER, TASK_WALKER2D, TASK_ANT, TASK_HUMANOID } task_kind_t;

typedef struct {
  const char *id;
  const char *xml; /* file name in Gymnasium's assets folder */
  task_kind_t kind;
  int frame_skip;
  int obs_dim;
  int nq, nv, nu; /* expected model sizes, checked at load */
  double ctrl_cost_weight;
  double reset_noise_scale;
  int normal_qvel_noise; /* qvel noise: scale * N(0, 1) (1) or U(-scale, scale) (0) */
  int v5;                /* v5 rules: healthy reward only while healthy; Ant: contact forces */
} task_t;

static const task_t k_tasks[] = {
    {"HalfCheetah-v4", "half_cheetah.xml", TASK_HALF_CHEETAH, 5, 17, 9, 9, 6, 0.1, 0.1, 1, 0},
    {"Hopper-v4", "hopper.xml", TASK_HOPPER, 4, 11, 6, 6, 3, 1e-3, 5e-3, 0, 0},
    {"Walker2d-v4", "walker2d.xml", TASK_WALKER2D, 4, 17, 9, 9, 6, 1e-3, 5e-3, 0, 0},
    {"Ant-v4", "ant.xml", TASK_ANT, 5, 27, 15, 14, 8, 0.5, 0.1, 1, 0},
    /* gymnasium/envs/mujoco/<name>_v5.py with default arguments; docs/ENVIRONMENTS.md lists
     * what changed from v4. Ant-v5 observes the clipped external contact forces of its 13
     * bodies (cfrc_ext[1:], 78 numbers) after qpos[2:] and qvel; Walker2d-v5 has its own
     * model file (both feet with friction 0.9). */
    {"HalfCheetah-v5", "half_cheetah.xml", TASK_HALF_CHEETAH, 5, 17, 9, 9, 6, 0.1, 0.1, 1, 1},
    {"Hopper-v5", "hopper.xml", TASK_HOPPER, 4, 11, 6, 6, 3, 1e-3, 5e-3, 0, 1},
    {"Walker2d-v5", "walker2d_v5.xml", TASK_WALKER2D, 4, 17, 9, 9, 6, 1e-3, 5e-3, 0, 1},
    {"Ant-v5", "ant.xml", TASK_ANT, 5, 105, 15, 14, 8, 0.5, 0.1, 1, 1},
    /* Humanoid-v5 observes qpos[2:], qvel and, for the 13 bodies after the world, cinert,
     * cvel and cfrc_ext, with qfrc_actuator[6:] between them: 22+23+130+78+17+78 */
    {"Humanoid-v5", "humanoid.xml", TASK_HUMANOID, 5, 348, 24, 23, 17, 0.1, 1e-2, 0, 1},
};

/* The XML parser of libmujoco 2.2 is not documented as thread-safe; actors may create
 * environments from several threads at once, so loads are serialised. */
static pthread_mutex_t g_load_lock = PTHREAD_MUTEX_INITIALIZER;

/* The reward's weights (Gymnasium's constructor arguments of the same names). */
typedef struct {
  double forward, ctrl, contact, healthy;
} weights_t;

typedef struct {
  const task_t *task;
  weights_t w;
  double terms[4]; /* the last step's forward reward, ctrl cost, contact cost, healthy reward */
  mjModel *m;
  mjData *d;
  int torso; /* body id of "torso" (Ant's reward reads its xpos) */
  double dt; /* timestep * frame_skip */
  uint64_t rng;
} mj_env_t;

static uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Uniform in [0, 1). */
static double uniform01(uint64_t *s) { return (double)(splitmix64(s) >> 11) * (1.0 / 9007199254740992.0); }

/* Standard normal (Box-Muller; one draw per call keeps the stream simple). */
static double normal(uint64_t *s) {
  double u1 = 1.0 - uniform01(s); /* (0, 1] */
  double u2 = uniform01(s);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static double clip(double x, double lo, double hi) { return x < lo ? lo : (x > hi ? hi : x); }

static void get_obs(const mj_env_t *e, float *obs) {
  const mjModel *m = e->m;
  const mjData *d = e->d;
  int skip = e->task->kind == TASK_ANT || e->task->kind == TASK_HUMANOID ? 2 : 1; /* x (and y) excluded */
  int clip_qvel = e->task->kind == TASK_HOPPER || e->task->kind == TASK_WALKER2D;
  int k = 0;
  for (int i = skip; i < m->nq; i++)
    obs[k++] = (float)d->qpos[i];
  for (int i = 0; i < m->nv; i++)
    obs[k++] = (float)(clip_qvel ? clip(d->qvel[i], -10.0, 10.0) : d->qvel[i]);
  if (e->task->kind == TASK_ANT && e->task->v5) /* contact forces of every body but the world */
    for (int i = 6; i < 6 * m->nbody; i++)
      obs[k++] = (float)clip(d->cfrc_ext[i], -1.0, 1.0);
  if (e->task->kind == TASK_HUMANOID) { /* every body but the world, unclipped */
    for (int i = 10; i < 10 * m->nbody; i++)
      obs[k++] = (float)d->cinert[i];
    for (int i = 6; i < 6 * m->nbody; i++)
      obs[k++] = (float)d->cvel[i];
    for (int i = 6; i < m->nv; i++)
      obs[k++] = (float)d->qfrc_actuator[i];
    for (int i = 6; i < 6 * m->nbody; i++)
      obs[k++] = (float)d->cfrc_ext[i];
  }
}

/* x of the centre of mass (Humanoid's forward reward): sum(mass * xipos) / sum(mass). */
static double mass_center_x(const mj_env_t *e) {
  double num = 0.0, den = 0.0;
  for (int b = 0; b < e->m->nbody; b++) {
    num += e->m->body_mass[b] * e->d->xipos[3 * b];
    den += e->m->body_mass[b];
  }
  return num / den;
}

/* Humanoid-v5's contact cost: weight (5e-7) * sum of the squared contact forces, at most 10. */
static double humanoid_contact_cost(const mj_env_t *e) {
  double c = 0.0;
  for (int i = 0; i < 6 * e->m->nbody; i++)
    c += e->d->cfrc_ext[i] * e->d->cfrc_ext[i];
  return fmin(e->w.contact * c, 10.0);
}

/* Ant-v5's contact cost: weight (5e-4) * sum of the squared clipped contact forces (world included). */
static double contact_cost(const mj_env_t *e) {
  double c = 0.0;
  for (int i = 0; i < 6 * e->m->nbody; i++) {
    double f = clip(e->d->cfrc_ext[i], -1.0, 1.0);
    c += f * f;
  }
  return e->w.contact * c;
}

static int is_healthy(const mj_env_t *e) {
  const mjModel *m = e->m;
  const mjData *d = e->d;
  switch (e->task->kind) {
  case TASK_HALF_CHEETAH:
    return 1;
  case TASK_HOPPER: {
    /* state_vector()[2:] in (-100, 100), z > 0.7, angle in (-0.2, 0.2) */
    for (int i = 2; i < m->nq; i++)
      if (!(d->qpos[i] > -100.0 && d->qpos[i] < 100.0))
        return 0;
    for (int i = 0; i < m->nv; i++)
      if (!(d->qvel[i] > -100.0 && d->qvel[i] < 100.0))
        return 0;
    return d->qpos[1] > 0.7 && d->qpos[2] > -0.2 && d->qpos[2] < 0.2;
  }
  case TASK_WALKER2D:
    return d->qpos[1] > 0.8 && d->qpos[1] < 2.0 && d->qpos[2] > -1.0 && d->qpos[2] < 1.0;
  case TASK_ANT:
    for (int i = 0; i < m->nq; i++)
      if (!isfinite(d->qpos[i]))
        return 0;
    for (int i = 0; i < m->nv; i++)
      if (!isfinite(d->qvel[i]))
        return 0;
    return d->qpos[2] >= 0.2 && d->qpos[2] <= 1.0;
  case TASK_HUMANOID:
    return d->qpos[2] > 1.0 && d->qpos[2] < 2.0;
  }
  return 1;
}

static int readable(const char *dir, const char *xml, char *out, size_t cap) {
  if (!dir || !*dir)
    return 0;
  char path[4096];
  if (snprintf(path, sizeof path, "%s/%s", dir, xml) >= (int)sizeof path || access(path, R_OK) != 0)
    return 0;
  return snprintf(out, cap, "%s", path) < (int)cap;
}

/* Gymnasium's assets folder as the python3 on PATH sees it, asked once per process (about a
 * second) and kept once found; "" when there is no python3 or no Gymnasium (asked again on
 * the next create: a failed create ends the run anyway). Guarded by g_load_lock. */
static char g_py_assets[4096];
static const char *python_assets_locked(void) {
  if (g_py_assets[0])
    return g_py_assets;
  FILE *p = popen("python3 -c 'import os, gymnasium; print(os.path.join(os.path.dirname(gymnasium.__file__), "
                  "\"envs\", \"mujoco\", \"assets\"))' 2>/dev/null",
                  "r");
  if (!p)
    return g_py_assets;
  if (!fgets(g_py_assets, sizeof g_py_assets, p))
    g_py_assets[0] = '\0';
  g_py_assets[strcspn(g_py_assets, "\r\n")] = '\0';
  if (pclose(p) != 0)
    g_py_assets[0] = '\0';
  return g_py_assets;
}

/* The model file for xml: $SAC_MUJOCO_ASSETS, the folder configured at build time, or the
 * installed Gymnasium's (asked at run time: the build may not have seen one). 0 or -1. */
static int find_model(const char *xml, char *out, size_t cap) {
  if (readable(getenv("SAC_MUJOCO_ASSETS"), xml, out, cap) || readable(SAC_MUJOCO_ASSETS_DIR, xml, out, cap))
    return 0;
  pthread_mutex_lock(&g_load_lock);
  int ok = readable(python_assets_locked(), xml, out, cap);
  pthread_mutex_unlock(&g_load_lock);
  return ok ? 0 : -1;
}

/* Gymnasium's default reward weights for task. */
static weights_t default_weights(const task_t *t) {
  weights_t w = {1.0, t->ctrl_cost_weight, 0.0, 1.0};
  if (t->kind == TASK_HUMANOID)
    w = (weights_t){1.25, t->ctrl_cost_weight, 5e-7, 5.0};
  else if (t->kind == TASK_ANT && t->v5)
    w.contact = 5e-4;
  return w;
}

/* Parses one "NAME=X" reward weight into w; 1 if s names one (0 or -1 in *rc), 0 if not. */
static int parse_weight(const char *s, size_t len, weights_t *w, int *rc, char *err, size_t err_len) {
  static const char *names[] = {
      "forward_reward_weight=", "ctrl_cost_weight=", "contact_cost_weight=", "healthy_reward="};
  double *dst[] = {&w->forward, &w->ctrl, &w->contact, &w->healthy};
  for (int i = 0; i < 4; i++) {
    size_t n = strlen(names[i]);
    if (len < n || strncmp(s, names[i], n) != 0)
      continue;
    char buf[64], *rest = NULL;
    snprintf(buf, sizeof buf, "%.*s", (int)(len - n), s + n);
    double v = strtod(buf, &rest);
    *rc = 0;
    if (rest == buf || *rest || !isfinite(v)) {
      snprintf(err, err_len, "%.*s must be a finite number, got '%s'", (int)n - 1, names[i], buf);
      *rc = -1;
    }
    *dst[i] = v;
    return 1;
  }
  return 0;
}

/* Parses "ENV_ID[,model=PATH][,max_steps=N][,WEIGHT=X...]"; returns 0, or -1 with a reason in err. */
static int parse_args(const char *args, const task_t **task, char *model, size_t model_len, int *max_steps,
                      weights_t *w, char *err, size_t err_len) {
  size_t id_len = strcspn(args, ",");
  *task = NULL;
  for (size_t i = 0; i < sizeof k_tasks / sizeof k_tasks[0]; i++)
    if (strlen(k_tasks[i].id) == id_len && strncmp(args, k_tasks[i].id, id_len) == 0)
      *task = &k_tasks[i];
  if (!*task) {
    snprintf(err, err_len,
             "unknown MuJoCo environment '%.*s' (known: HalfCheetah-v4, Hopper-v4, Walker2d-v4, Ant-v4, "
             "HalfCheetah-v5, Hopper-v5, Walker2d-v5, Ant-v5, Humanoid-v5)",
             (int)id_len, args);
    return -1;
  }
  *w = default_weights(*task);
  const char *s = args + id_len;
  while (*s == ',') {
    s++;
    size_t len = strcspn(s, ",");
    int wrc = 0;
    if (parse_weight(s, len, w, &wrc, err, err_len)) {
      if (wrc != 0)
        return -1;
    } else if (strncmp(s, "model=", 6) == 0 && len > 6) {
      if (len - 6 >= model_len) {
        snprintf(err, err_len, "model path too long");
        return -1;
      }
      memcpy(model, s + 6, len - 6);
      model[len - 6] = '\0';
    } else if (strncmp(s, "max_steps=", 10) == 0) {
      char buf[32], *rest = NULL;
      snprintf(buf, sizeof buf, "%.*s", (int)(len - 10), s + 10);
      long n = strtol(buf, &rest, 10);
      if (rest == buf || *rest || n < 0 || n > 100000000) {
        snprintf(err, err_len, "max_steps must be an integer in [0, 100000000], got '%s'", buf);
        return -1;
      }
      *max_steps = (int)n;
    } else {
      snprintf(err, err_len,
               "unknown argument '%.*s' (known: model=PATH, max_steps=N, forward_reward_weight=X, "
               "ctrl_cost_weight=X, contact_cost_weight=X, healthy_reward=X)",
               (int)len, s);
      return -1;
    }
    s += len;
  }
  return 0;
}

SAC_ENV_PLUGIN_EXPORT int sac_env_plugin_abi_version(void) { return SAC_ENV_PLUGIN_ABI_VERSION; }

SAC_ENV_PLUGIN_EXPORT void sac_env_plugin_destroy(void *handle) {
  mj_env_t *e = handle;
  if (!e)
    return;
  if (e->d)
    mj_deleteData(e->d);
  if (e->m)
    mj_deleteModel(e->m);
  free(e);
}

SAC_ENV_PLUGIN_EXPORT void *sac_env_plugin_create(const char *args, sac_env_plugin_spec_t *spec, char *err,
                                                  size_t err_len) {
  const task_t *task = NULL;
  char model[4096] = "";
  int max_steps = 1000;
  weights_t w;
  if (parse_args(args, &task, model, sizeof model, &max_steps, &w, err, err_len) != 0)
    return NULL;
  if (!model[0] && find_model(task->xml, model, sizeof model) != 0) {
    snprintf(err, err_len,
             "%s: no model file %s: pass model=PATH/%s, set SAC_MUJOCO_ASSETS to Gymnasium's "
             "envs/mujoco/assets folder, or install Gymnasium for the python3 on PATH "
             "(pip install \"gymnasium[mujoco]\")",
             task->id, task->xml, task->xml);
    return NULL;
  }
  mj_env_t *e = calloc(1, sizeof *e);
  if (!e) {
    snprintf(err, err_len, "out of memory");
    return NULL;
  }
  e->task = task;
  e->w = w;
  char load_err[512] = "";
  pthread_mutex_lock(&g_load_lock);
  e->m = mj_loadXML(model, NULL, load_err, sizeof load_err);
  pthread_mutex_unlock(&g_load_lock);
  if (!e->m) {
    snprintf(err, err_len, "%s: cannot load model '%s': %s", task->id, model, load_err);
    goto err;
  }
  if (e->m->nq != task->nq || e->m->nv != task->nv || e->m->nu != task->nu ||
      (task->kind == TASK_ANT && task->v5 && 6 * (e->m->nbody - 1) != task->obs_dim - 27) ||
      (task->kind == TASK_HUMANOID &&
       22 * (e->m->nbody - 1) + task->nq + task->nv - 2 + task->nv - 6 != task->obs_dim)) {
    snprintf(err, err_len, "%s: model '%s' has nq=%d nv=%d nu=%d, expected %d %d %d", task->id, model,
             (int)e->m->nq, (int)e->m->nv, (int)e->m->nu, task->nq, task->nv, task->nu);
    goto err;
  }
  e->d = mj_makeData(e->m);
  if (!e->d) {
    snprintf(err, err_len, "%s: mj_makeData failed", task->id);
    goto err;
  }
  e->torso = mj_name2id(e->m, mjOBJ_BODY, "torso");
  if (task->kind == TASK_ANT && e->torso < 0) {
    snprintf(err, err_len, "%s: model '%s' has no body 'torso'", task->id, model);
    goto err;
  }
  e->dt = e->m->opt.timestep * task->frame_skip;
  snprintf(spec->name, sizeof spec->name, "%s", task->id);
  spec->obs_dim = task->obs_dim;
  spec->act_dim = task->nu;
  for (int i = 0; i < task->nu; i++) {
    spec->act_low[i] = (float)e->m->actuator_ctrlrange[2 * i];
    spec->act_high[i] = (float)e->m->actuator_ctrlrange[2 * i + 1];
    if (!(spec->act_low[i] < spec->act_high[i])) {
      snprintf(err, err_len, "%s: actuator %d has no control range", task->id, i);
      goto err;
    }
  }
  spec->max_episode_steps = max_steps;
  return e;
err:
  sac_env_plugin_destroy(e);
  return NULL;
}

SAC_ENV_PLUGIN_EXPORT int sac_env_plugin_reset(void *handle, uint64_t seed, float *obs) {
  mj_env_t *e = handle;
  const mjModel *m = e->m;
  mjData *d = e->d;
  double s = e->task->reset_noise_scale;
  e->rng = seed;
  mj_resetData(m, d);
  for (int i = 0; i < m->nq; i++)
    d->qpos[i] = m->qpos0[i] + (-s + 2.0 * s * uniform01(&e->rng));
  for (int i = 0; i < m->nv; i++)
    d->qvel[i] = e->task->normal_qvel_noise ? s * normal(&e->rng) : -s + 2.0 * s * uniform01(&e->rng);
  mj_forward(m, d);
  get_obs(e, obs);
  return 0;
}

SAC_ENV_PLUGIN_EXPORT int sac_env_plugin_step(void *handle, const float *action, float *obs, float *reward,
                                              int *terminated) {
  mj_env_t *e = handle;
  const mjModel *m = e->m;
  mjData *d = e->d;
  const task_t *t = e->task;
  double ctrl_cost = 0.0;
  for (int i = 0; i < m->nu; i++) {
    d->ctrl[i] = action[i];
    ctrl_cost += (double)action[i] * action[i];
  }
  ctrl_cost *= e->w.ctrl;
  int ant = t->kind == TASK_ANT, humanoid = t->kind == TASK_HUMANOID;
  double x_before = ant ? d->xpos[3 * e->torso] : (humanoid ? mass_center_x(e) : d->qpos[0]);
  for (int k = 0; k < t->frame_skip; k++)
    mj_step(m, d);
  if ((ant && t->v5) || humanoid) /* cfrc_ext, which Ant-v5 and Humanoid observe and pay for */
    mj_rnePostConstraint(m, d);
  double x_after = ant ? d->xpos[3 * e->torso] : (humanoid ? mass_center_x(e) : d->qpos[0]);
  double forward = e->w.forward * (x_after - x_before) / e->dt;
  int healthy = is_healthy(e);
  /* healthy_reward (Humanoid: 5): v4's terminate_when_unhealthy makes it paid on every
   * step, even the terminating one; v5 pays it only while healthy */
  double healthy_reward = 0.0;
  if (t->kind != TASK_HALF_CHEETAH)
    healthy_reward = t->v5 && !healthy ? 0.0 : e->w.healthy;
  double contact = (ant && t->v5) ? contact_cost(e) : (humanoid ? humanoid_contact_cost(e) : 0.0);
  double r = forward - ctrl_cost + healthy_reward - contact;
  e->terms[0] = forward;
  e->terms[1] = ctrl_cost;
  e->terms[2] = contact;
  e->terms[3] = healthy_reward;
  *terminated = !healthy;
  get_obs(e, obs);
  /* A diverged simulation must not feed NaN into the replay buffer: end the episode. */
  int finite = isfinite(r);
  for (int i = 0; i < t->obs_dim; i++)
    if (!isfinite(obs[i])) {
      obs[i] = 0.0f;
      finite = 0;
    }
  if (!finite) {
    r = 0.0;
    *terminated = 1;
  }
  *reward = (float)r;
  return 0;
}

/* Test hook (tests/test_mujoco.c), the equivalent of Gymnasium's env.unwrapped.set_state:
 * sets qpos (nq) and qvel (nv), runs mj_forward and writes the observation. Returns 0, or
 * -1 when nq or nv do not match the model. */
SAC_ENV_PLUGIN_EXPORT int sac_env_mujoco_set_state(void *handle, const double *qpos, int nq,
                                                   const double *qvel, int nv, float *obs) {
  mj_env_t *e = handle;
  if (nq != e->m->nq || nv != e->m->nv)
    return -1;
  memcpy(e->d->qpos, qpos, sizeof(double) * (size_t)nq);
  memcpy(e->d->qvel, qvel, sizeof(double) * (size_t)nv);
  mj_forward(e->m, e->d);
  get_obs(e, obs);
  return 0;
}

/* Test hook: the solver's warm start (qacc_warmstart, nv numbers), the rest of the physics
 * state one mj_step of these models depends on besides qpos and qvel (Gymnasium's recorded
 * episodes carry it). Call after sac_env_mujoco_set_state. Returns 0, or -1 when nv does not
 * match the model. */
SAC_ENV_PLUGIN_EXPORT int sac_env_mujoco_set_warmstart(void *handle, const double *qacc_warmstart, int nv) {
  mj_env_t *e = handle;
  if (nv != e->m->nv)
    return -1;
  memcpy(e->d->qacc_warmstart, qacc_warmstart, sizeof(double) * (size_t)nv);
  return 0;
}

/* Test hook: the last step's reward terms, as Gymnasium's info reports them but positive:
 * terms[0] forward reward, [1] control cost, [2] contact cost (0 where the task has none),
 * [3] healthy reward (0 for HalfCheetah). The step's reward is [0] - [1] - [2] + [3]. */
SAC_ENV_PLUGIN_EXPORT void sac_env_mujoco_reward_terms(void *handle, double terms[4]) {
  const mj_env_t *e = handle;
  memcpy(terms, e->terms, sizeof e->terms);
}

/* The optional state extension of the plugin ABI (common/env_plugin.h): qpos then qvel,
 * the state Gymnasium's env.unwrapped.set_state takes, so a Gymnasium model of the same
 * task can be put in it and rendered (sac-eval --record). */
SAC_ENV_PLUGIN_EXPORT int sac_env_plugin_get_state(void *handle, double *state, int cap) {
  const mj_env_t *e = handle;
  const int nq = e->m->nq, nv = e->m->nv;
  if (nq + nv <= cap) {
    memcpy(state, e->d->qpos, sizeof(double) * (size_t)nq);
    memcpy(state + nq, e->d->qvel, sizeof(double) * (size_t)nv);
  }
  return nq + nv;
}

SAC_ENV_PLUGIN_EXPORT int sac_env_plugin_set_state(void *handle, const double *state, int n, float *obs) {
  mj_env_t *e = handle;
  return n == e->m->nq + e->m->nv
             ? sac_env_mujoco_set_state(handle, state, e->m->nq, state + e->m->nq, e->m->nv, obs)
             : -1;
}
