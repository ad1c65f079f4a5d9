/* Synthetic transition streams for the replay tests and benchmark: E environments of
 * one actor step in lock-step, rows interleaved env by env, with episodes that end by
 * termination or by truncation. Every observation encodes where it came from, so a
 * test can check any sampled transition without knowing which one it is:
 *   obs[0] = env id, obs[1] = step within the episode, obs[2] = episode number,
 *   obs[3] = actor id, obs[j >= 4] = step * 0.25 + j
 *   action[j] = step * 0.01 + j * 0.001, reward = step + 0.5
 * A transition (s, a, r, s') is consistent when s'[0..3] = s[0], s[1] + 1, s[2], s[3].
 * Episode k of env e lasts ep_len - (k * 7 + e) % (ep_len / 2 + 1) steps and ends by termination
 * when k is even, by truncation when k is odd. Header-only; allocates in init only. */
#ifndef SAC_TESTS_REPLAY_TESTGEN_H
#define SAC_TESTS_REPLAY_TESTGEN_H
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/wire.h"

typedef struct {
  uint32_t actor, n_envs, obs_dim, act_dim, ep_len, rows_per_env;
  uint32_t *step, *episode; /* per env */
  uint64_t *uid;            /* per env: transitions emitted */
  /* batch buffers */
  uint32_t *env_ids, *next_rows, *tail_envs;
  float *obs, *act, *rew, *next_obs, *tail_obs;
  uint8_t *term, *trunc;
  sac_wire_transitions_t view;
} tg_t;

static inline void tg_obs(const tg_t *g, uint32_t e, uint32_t step, uint32_t ep, float *o) {
  o[0] = (float)e;
  if (g->obs_dim > 1)
    o[1] = (float)step;
  if (g->obs_dim > 2)
    o[2] = (float)ep;
  if (g->obs_dim > 3)
    o[3] = (float)g->actor;
  for (uint32_t j = 4; j < g->obs_dim; j++)
    o[j] = (float)step * 0.25f + (float)j;
}

static inline uint32_t tg_ep_len(const tg_t *g, uint32_t e, uint32_t k) {
  return g->ep_len - (k * 7 + e) % (g->ep_len / 2 + 1);
}

static inline void tg_init(tg_t *g, uint32_t actor, uint32_t n_envs, uint32_t obs_dim, uint32_t act_dim,
                           uint32_t ep_len, uint32_t rows_per_env) {
  memset(g, 0, sizeof *g);
  g->actor = actor;
  g->n_envs = n_envs;
  g->obs_dim = obs_dim;
  g->act_dim = act_dim;
  g->ep_len = ep_len;
  g->rows_per_env = rows_per_env;
  size_t n = (size_t)n_envs * rows_per_env;
  g->step = calloc(n_envs, sizeof *g->step);
  g->episode = calloc(n_envs, sizeof *g->episode);
  g->uid = calloc(n_envs, sizeof *g->uid);
  g->env_ids = calloc(n, 4);
  g->next_rows = calloc(n, 4);
  g->tail_envs = calloc(n_envs, 4);
  g->obs = calloc(n * obs_dim, 4);
  g->act = calloc(n * act_dim, 4);
  g->rew = calloc(n, 4);
  g->next_obs = calloc(n * obs_dim, 4);
  g->tail_obs = calloc((size_t)n_envs * obs_dim, 4);
  g->term = calloc(n, 1);
  g->trunc = calloc(n, 1);
}

static inline void tg_free(tg_t *g) {
  free(g->step);
  free(g->episode);
  free(g->uid);
  free(g->env_ids);
  free(g->next_rows);
  free(g->tail_envs);
  free(g->obs);
  free(g->act);
  free(g->rew);
  free(g->next_obs);
  free(g->tail_obs);
  free(g->term);
  free(g->trunc);
}

/* Fills the next batch (rows_per_env steps of every env) and returns its view. */
static inline const sac_wire_transitions_t *tg_next(tg_t *g) {
  uint32_t n = 0, k = 0;
  for (uint32_t r = 0; r < g->rows_per_env; r++) {
    for (uint32_t e = 0; e < g->n_envs; e++, n++) {
      uint32_t step = g->step[e], ep = g->episode[e];
      g->env_ids[n] = e;
      tg_obs(g, e, step, ep, g->obs + (size_t)n * g->obs_dim);
      for (uint32_t j = 0; j < g->act_dim; j++)
        g->act[(size_t)n * g->act_dim + j] = (float)step * 0.01f + (float)j * 0.001f;
      g->rew[n] = (float)step + 0.5f;
      int end = step + 1 >= tg_ep_len(g, e, ep);
      g->term[n] = (uint8_t)(end && ep % 2 == 0);
      g->trunc[n] = (uint8_t)(end && ep % 2 == 1);
      if (end) {
        g->next_rows[k] = n;
        tg_obs(g, e, step + 1, ep, g->next_obs + (size_t)k * g->obs_dim);
        k++;
        g->step[e] = 0;
        g->episode[e]++;
      } else {
        g->step[e] = step + 1;
      }
      g->uid[e]++;
    }
  }
  uint32_t m = 0;
  for (uint32_t e = 0; e < g->n_envs; e++) {
    /* the last row of env e in this batch is row n - n_envs + e */
    uint32_t last = n - g->n_envs + e;
    if (g->term[last] | g->trunc[last])
      continue;
    g->tail_envs[m] = e;
    tg_obs(g, e, g->step[e], g->episode[e], g->tail_obs + (size_t)m * g->obs_dim);
    m++;
  }
  sac_wire_transitions_t *v = &g->view;
  memset(v, 0, sizeof *v);
  v->actor_id = g->actor;
  v->seq = 1;
  v->n = n;
  v->obs_dim = g->obs_dim;
  v->act_dim = g->act_dim;
  v->env_ids = g->env_ids;
  v->obs = g->obs;
  v->action = g->act;
  v->reward = g->rew;
  v->terminated = g->term;
  v->truncated = g->trunc;
  v->n_next = k;
  v->next_obs_rows = k ? g->next_rows : NULL;
  v->next_obs = k ? g->next_obs : NULL;
  v->n_tail = m;
  v->tail_env_ids = m ? g->tail_envs : NULL;
  v->tail_obs = m ? g->tail_obs : NULL;
  return v;
}

/* 1 when the transition is consistent with the generator's encoding (see top); *why
 * names the first thing that is not. truncated rows must not be terminal. */
static inline int tg_check(uint32_t obs_dim, uint32_t act_dim, const float *o, const float *a, float r,
                           float term, const float *no, const char **why) {
  *why = "";
  float step = o[1];
  if (no[0] != o[0] || no[2] != o[2] || (obs_dim > 3 && no[3] != o[3])) {
    *why = "next_obs from another env or episode";
    return 0;
  }
  if (no[1] != step + 1.0f) {
    *why = "next_obs is not the next step";
    return 0;
  }
  if (r != step + 0.5f) {
    *why = "reward";
    return 0;
  }
  for (uint32_t j = 0; j < act_dim; j++)
    if (a[j] < step * 0.01f + (float)j * 0.001f - 1e-3f || a[j] > step * 0.01f + (float)j * 0.001f + 1e-3f) {
      *why = "action";
      return 0;
    }
  for (uint32_t j = 4; j < obs_dim; j++)
    if (o[j] != step * 0.25f + (float)j || no[j] != (step + 1.0f) * 0.25f + (float)j) {
      *why = "obs payload";
      return 0;
    }
  (void)term;
  return 1;
}

#endif
