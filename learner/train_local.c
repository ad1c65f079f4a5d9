/* Single-process SAC training (see train_local.h): act, store, sample, update, evaluate.
 * The buffer here is a plain ring of full transitions; the replay service (replay/) is
 * the real one. Everything is allocated before the loop. */
#include "learner/train_local.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/env.h"
#include "common/error.h"
#include "common/log.h"
#include "common/rng.h"

void sac_train_cfg_default(sac_train_cfg_t *cfg) {
  memset(cfg, 0, sizeof *cfg);
  strcpy(cfg->env, "Pendulum-v1");
  strcpy(cfg->backend, "cpu");
  strcpy(cfg->precision, "fp32");
  cfg->graphs = 1;
  cfg->device = SAC_DEVICE_AUTO;
  cfg->total_steps = 20000;
  cfg->learning_starts = 1000;
  cfg->updates_per_step = 1;
  cfg->buffer_capacity = 1000000;
  cfg->eval_interval = 5000;
  cfg->eval_episodes = 10;
  cfg->log_interval = 1000;
  cfg->seed = 1;
  cfg->actor_lag = 1;
  sac_hparams_default(&cfg->hp, 1, 1);
}

/* policy action in [-1, 1] -> environment units */
static void scale_action(const sac_env_spec_t *sp, const float *a, float *env_a) {
  for (int i = 0; i < sp->act_dim; i++)
    env_a[i] = sp->act_low[i] + 0.5f * (a[i] + 1.0f) * (sp->act_high[i] - sp->act_low[i]);
}

int sac_evaluate(const char *env_name, uint64_t seed, const sac_mlp_desc_t *ad, const float *actor,
                 const sac_hparams_t *hp, int episodes, double *mean_return) {
  sac_env_t *env = NULL;
  int rc = sac_env_new(env_name, seed, SAC_STREAM_EVAL, &env);
  if (rc)
    return rc;
  const sac_env_spec_t *sp = sac_env_spec(env);
  float obs[SAC_ENV_MAX_OBS], a[SAC_ENV_MAX_ACT], ea[SAC_ENV_MAX_ACT];
  int maxw = sac_mlp_max_width(ad);
  float *scratch = malloc(sizeof(float) * (size_t)(2 * sp->act_dim + 2 * maxw));
  if (!scratch) {
    sac_env_destroy(&env);
    return SAC_ENOMEM;
  }
  sac_policy_cfg_t pc = {hp->log_std_min, hp->log_std_max};
  double total = 0.0;
  for (int ep = 0; ep < episodes && rc == 0; ep++) {
    rc = sac_env_reset(env, obs);
    int term = 0, trunc = 0;
    while (rc == 0 && !term && !trunc) {
      float r;
      sac_policy_act(ad, actor, &pc, obs, 1, 1, NULL, a, scratch);
      scale_action(sp, a, ea);
      rc = sac_env_step(env, ea, obs, &r, &term, &trunc);
      total += r;
    }
  }
  free(scratch);
  sac_env_destroy(&env);
  if (rc == 0)
    *mean_return = total / episodes;
  return rc;
}

typedef struct {
  int64_t cap, size, head;
  int O, A;
  float *obs, *act, *rew, *term, *nobs;
} ring_t;

static int ring_init(ring_t *r, int64_t cap, int O, int A) {
  memset(r, 0, sizeof *r);
  r->cap = cap, r->O = O, r->A = A;
  r->obs = malloc(sizeof(float) * (size_t)cap * O);
  r->nobs = malloc(sizeof(float) * (size_t)cap * O);
  r->act = malloc(sizeof(float) * (size_t)cap * A);
  r->rew = malloc(sizeof(float) * (size_t)cap);
  r->term = malloc(sizeof(float) * (size_t)cap);
  return r->obs && r->nobs && r->act && r->rew && r->term ? 0 : SAC_ENOMEM;
}

static void ring_free(ring_t *r) { free(r->obs), free(r->nobs), free(r->act), free(r->rew), free(r->term); }

static void ring_add(ring_t *r, const float *o, const float *a, float rew, int terminated, const float *no) {
  int64_t i = r->head;
  memcpy(r->obs + i * r->O, o, sizeof(float) * r->O);
  memcpy(r->nobs + i * r->O, no, sizeof(float) * r->O);
  memcpy(r->act + i * r->A, a, sizeof(float) * r->A);
  r->rew[i] = rew;
  r->term[i] = terminated ? 1.0f : 0.0f; /* truncation is not termination: it bootstraps */
  r->head = (r->head + 1) % r->cap;
  if (r->size < r->cap)
    r->size++;
}

/* Uniform sample of B rows into host memory (the batch layout), then staged into the
 * batch the next update reads (on a GPU the copy overlaps the update enqueued before). */
static int ring_sample(ring_t *r, sac_rng_t *rng, sac_t *sac, int B, float *stage) {
  const int O = r->O, A = r->A;
  float *so = stage, *sa = so + (size_t)B * O, *sr = sa + (size_t)B * A, *st = sr + B, *sn = st + B;
  for (int b = 0; b < B; b++) {
    int64_t i = (int64_t)sac_rng_below(rng, (uint64_t)r->size);
    memcpy(so + (size_t)b * O, r->obs + i * O, sizeof(float) * O);
    memcpy(sn + (size_t)b * O, r->nobs + i * O, sizeof(float) * O);
    memcpy(sa + (size_t)b * A, r->act + i * A, sizeof(float) * A);
    sr[b] = r->rew[i];
    st[b] = r->term[i];
  }
  sac_host_batch_t hb = {so, sn, sa, sr, st, NULL};
  return sac_load_batch(sac, &hb, 1);
}

/* One step's updates (updates_per_step of them, each on a freshly sampled batch), then
 * the acting copy of the actor: with actor_lag, a copy of the actor is enqueued now and
 * the one enqueued after the previous step's updates is collected (a copy made while
 * this step's updates ran), so the acting policy is one step late and nothing waits for
 * the updates just enqueued; without, a download (a blocking sync). 0 or an error. */
static int update_step(const sac_train_cfg_t *cfg, sac_t *sac, ring_t *ring, sac_rng_t *rng, float *stage,
                       float *actor, int *lag_slot, int64_t *updates) {
  const int B = sac_hparams(sac)->batch;
  int rc;
  for (int u = 0; u < cfg->updates_per_step; u++) {
    if ((rc = ring_sample(ring, rng, sac, B, stage)) != 0 || (rc = sac_update(sac)) != 0)
      return rc;
    (*updates)++;
  }
  if (!cfg->actor_lag)
    return sac_get_actor(sac, actor);
  int slot = *lag_slot < 0 ? 0 : *lag_slot ^ 1;
  if ((rc = sac_actor_fetch(sac, slot)) != 0)
    return rc;
  if (*lag_slot >= 0 && (rc = sac_actor_collect(sac, *lag_slot, actor)) != 0)
    return rc;
  *lag_slot = slot;
  return 0;
}

int sac_train_local(const sac_train_cfg_t *cfg, sac_train_eval_cb cb, void *user, sac_train_result_t *res) {
  memset(res, 0, sizeof *res);
  res->steady_blocking_syncs = res->steady_launches = -1;
  res->final_eval_return = res->best_eval_return = -INFINITY;
  sac_env_t *env = NULL;
  sac_backend_t *be = NULL;
  sac_t *sac = NULL;
  ring_t ring = {0};
  float *actor = NULL, *stage = NULL, *scratch = NULL;
  int rc = sac_env_new(cfg->env, cfg->seed, SAC_STREAM_ENV(0, 0), &env);
  if (rc)
    goto out;
  const sac_env_spec_t *sp = sac_env_spec(env);
  sac_hparams_t hp = cfg->hp;
  hp.obs_dim = sp->obs_dim;
  hp.act_dim = sp->act_dim;
  hp.seed = cfg->seed;
  if ((rc = sac_backend_new_on(cfg->backend, cfg->threads, cfg->device, 0, &be)) != 0 ||
      (rc = sac_backend_configure(be, cfg->precision, cfg->graphs)) != 0)
    goto out;
  if ((rc = sac_new(&hp, be, &sac)) != 0)
    goto out;
  const int O = hp.obs_dim, A = hp.act_dim, B = hp.batch;
  const sac_mlp_desc_t *ad = sac_actor_desc(sac);
  int64_t cap = cfg->buffer_capacity < cfg->total_steps ? cfg->buffer_capacity : cfg->total_steps;
  if ((rc = ring_init(&ring, cap > 0 ? cap : 1, O, A)) != 0)
    goto out;
  actor = malloc(sizeof(float) * sac_actor_param_count(sac));
  stage = malloc(sizeof(float) * (size_t)B * (2 * O + A + 2));
  scratch = malloc(sizeof(float) * (size_t)(2 * A + 2 * sac_mlp_max_width(ad)));
  if (!actor || !stage || !scratch) {
    rc = SAC_ENOMEM;
    goto out;
  }
  if ((rc = sac_get_actor(sac, actor)) != 0)
    goto out;

  sac_rng_t rng;
  sac_rng_init(&rng, cfg->seed, SAC_STREAM_ACTOR(0));
  sac_policy_cfg_t pc = {hp.log_std_min, hp.log_std_max};
  float obs[SAC_ENV_MAX_OBS], nobs[SAC_ENV_MAX_OBS], a[SAC_ENV_MAX_ACT], ea[SAC_ENV_MAX_ACT];
  if ((rc = sac_env_reset(env, obs)) != 0)
    goto out;
  double ep_ret = 0.0, recent_ret = NAN, t0 = sac_clock_s(), upd_time = 0.0;
  int64_t last_log_updates = 0;
  double last_log_t = t0;
  sac_stats_t st = {0};
  int lag_slot = -1; /* the fetch slot of the actor copy in flight (-1: none) */
  sac_backend_counts_t c0, c1;
  const int counted = sac_backend_counts(be, &c0) == 0;
  if (counted)
    res->steady_blocking_syncs = res->steady_launches = 0;
  for (int64_t t = 1; t <= cfg->total_steps; t++) {
    if (t <= cfg->learning_starts) {
      for (int i = 0; i < A; i++)
        a[i] = (float)sac_rng_uniform_range(&rng, -1.0, 1.0);
    } else {
      sac_policy_act(ad, actor, &pc, obs, 1, 0, &rng, a, scratch);
    }
    scale_action(sp, a, ea);
    float r;
    int term, trunc;
    if ((rc = sac_env_step(env, ea, nobs, &r, &term, &trunc)) != 0)
      goto out;
    ring_add(&ring, obs, a, r, term, nobs); /* nobs is the true next state even at a time limit */
    ep_ret += r;
    if (term || trunc) {
      recent_ret = isnan(recent_ret) ? ep_ret : 0.9 * recent_ret + 0.1 * ep_ret;
      res->episodes++;
      ep_ret = 0.0;
      if ((rc = sac_env_reset(env, obs)) != 0)
        goto out;
    } else {
      memcpy(obs, nobs, sizeof(float) * O);
    }
    int do_eval = (cfg->eval_interval > 0 && t % cfg->eval_interval == 0) || t == cfg->total_steps;
    int do_log = cfg->log_interval > 0 && t % cfg->log_interval == 0 && !cfg->quiet;
    if (t > cfg->learning_starts && ring.size >= B) {
      double u0 = sac_clock_s();
      int64_t n0 = res->updates;
      if (counted)
        sac_backend_counts(be, &c0);
      if ((rc = update_step(cfg, sac, &ring, &rng, stage, actor, &lag_slot, &res->updates)) != 0)
        goto out;
      if (counted && !do_eval && !do_log && sac_backend_counts(be, &c1) == 0) {
        res->steady_updates += res->updates - n0;
        res->steady_blocking_syncs += c1.blocking_syncs - c0.blocking_syncs;
        res->steady_launches += c1.launches - c0.launches;
      }
      upd_time += sac_clock_s() - u0;
    }
    if ((do_eval || do_log) && res->updates > 0 && (rc = sac_stats(sac, &st)) != 0) /* not per update */
      goto out;
    if (do_log) {
      double now = sac_clock_s();
      double ups = (double)(res->updates - last_log_updates) / (now - last_log_t);
      double eta = (now - t0) / (double)t * (double)(cfg->total_steps - t);
      SAC_INFO("train",
               "step %lld/%lld  updates %lld (%.0f/s)  return %.1f  alpha %.4f  q_loss %.4f  pi_loss %.4f  "
               "entropy %.3f  eta %.0fs",
               (long long)t, (long long)cfg->total_steps, (long long)res->updates, ups, recent_ret, st.alpha,
               st.critic_loss, st.actor_loss, st.entropy, eta);
      last_log_updates = res->updates;
      last_log_t = now;
    }
    if (do_eval) {
      double ret;
      /* the evaluation sees the policy as it stands (a wait, once per evaluation) */
      if (res->updates > 0 && cfg->actor_lag && (rc = sac_get_actor(sac, actor)) != 0)
        goto out;
      if ((rc = sac_evaluate(cfg->env, cfg->seed, ad, actor, &hp, cfg->eval_episodes, &ret)) != 0)
        goto out;
      res->final_eval_return = ret;
      if (ret > res->best_eval_return)
        res->best_eval_return = ret;
      if (!cfg->quiet)
        SAC_INFO("train", "eval at step %lld: mean return %.1f over %d episodes", (long long)t, ret,
                 cfg->eval_episodes);
      if (cb)
        cb(user, t, ret, &st);
    }
    res->steps = t;
  }
  res->wall_seconds = sac_clock_s() - t0;
  res->updates_per_second = upd_time > 0 ? (double)res->updates / upd_time : 0.0;
out:
  if (rc)
    SAC_ERROR("train", "training stopped: %s", sac_strerror(rc));
  free(actor), free(stage), free(scratch);
  ring_free(&ring);
  sac_destroy(&sac);
  sac_backend_destroy(&be);
  sac_env_destroy(&env);
  return rc;
}
