/* Single-process SAC training (see train_local.h): act, store, sample, update, report,
 * evaluate, checkpoint, one named step each. The buffer here is a plain ring of full
 * transitions; the replay service (replay/) is the real one. Everything is allocated
 * before the loop.
 *
 * replay-local.snap (a common/snapshot.h file of kind REPLAY), little-endian:
 *   "SACLRPL\0" | u32 version (1) | i32 obs_dim, act_dim | u32 0 | i64 env_steps | i64 rows
 *   | u32 resumes | u32 0 | f64 recent_return | rng (u32 key[2], u64 counter, u32 buf[4],
 *   i32 nbuf, i32 has_spare, f32 spare, f32 0) | then f32 arrays of the rows, oldest
 *   first: obs (rows x obs_dim) | next_obs (rows x obs_dim) | action (rows x act_dim)
 *   | reward (rows) | terminated (rows).
 * It is written beside checkpoint.bin, before it, at every checkpoint. */
#include "learner/train_local.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/env.h"
#include "common/error.h"
#include "common/log.h"
#include "common/rng.h"
#include "common/snapshot.h"
#include "learner/checkpoint.h"
#include "learner/train_series.h"

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

/* ---- the replay ring ---- */

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

static void ring_add(ring_t *r, const float *o, const float *a, float rew, float terminated,
                     const float *no) {
  int64_t i = r->head;
  memcpy(r->obs + i * r->O, o, sizeof(float) * r->O);
  memcpy(r->nobs + i * r->O, no, sizeof(float) * r->O);
  memcpy(r->act + i * r->A, a, sizeof(float) * r->A);
  r->rew[i] = rew;
  r->term[i] = terminated; /* truncation is not termination: it bootstraps */
  r->head = (r->head + 1) % r->cap;
  if (r->size < r->cap)
    r->size++;
}

/* The physical index of the k-th oldest row. */
static int64_t ring_at(const ring_t *r, int64_t k) { return (r->head - r->size + k + r->cap) % r->cap; }

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

/* ---- the run ---- */

typedef struct {
  const sac_train_cfg_t *cfg;
  sac_train_eval_cb cb;
  void *user;
  sac_train_result_t *res;
  /* owned */
  sac_env_t *env;
  sac_backend_t *be;
  sac_t *sac;
  ring_t ring;
  float *actor, *stage, *scratch;
  /* fixed by set-up */
  sac_hparams_t hp;
  const sac_env_spec_t *sp;
  sac_policy_cfg_t pc;
  sac_train_series_t ts;
  char ckpt_path[1100], replay_path[1100];
  int counted; /* the backend keeps launch/sync counts */
  /* the loop */
  sac_rng_t rng; /* actions and batches: one stream, so a seed fixes the run */
  float obs[SAC_ENV_MAX_OBS];
  double ep_ret, recent_ret, t0, upd_time, last_log_t;
  int64_t t, last_log_updates, last_log_steps, next_ckpt, start_updates;
  uint32_t resumes; /* how often this run was resumed: picks the environment's reset stream */
  int lag_slot;     /* the fetch slot of the actor copy in flight (-1: none) */
  int evaluated;    /* the policy as of step t was evaluated */
  sac_stats_t st;
  sac_backend_counts_t c0;
} local_t;

/* The environment, the backend and the learner on it, and the buffers. */
static int open_run(local_t *L) {
  const sac_train_cfg_t *cfg = L->cfg;
  int rc = sac_env_new(cfg->env, cfg->seed, SAC_STREAM_ENV(0, L->resumes), &L->env);
  if (rc)
    return rc;
  L->sp = sac_env_spec(L->env);
  L->hp = cfg->hp;
  L->hp.obs_dim = L->sp->obs_dim;
  L->hp.act_dim = L->sp->act_dim;
  L->hp.seed = cfg->seed;
  L->pc = (sac_policy_cfg_t){L->hp.log_std_min, L->hp.log_std_max};
  if ((rc = sac_backend_new_on(cfg->backend, cfg->threads, cfg->device, 0, &L->be)) != 0 ||
      (rc = sac_backend_configure(L->be, cfg->precision, cfg->graphs)) != 0 ||
      (rc = sac_new(&L->hp, L->be, &L->sac)) != 0)
    return rc;
  const int O = L->hp.obs_dim, A = L->hp.act_dim, B = L->hp.batch;
  int64_t cap = cfg->buffer_capacity < cfg->total_steps ? cfg->buffer_capacity : cfg->total_steps;
  if ((rc = ring_init(&L->ring, cap > 0 ? cap : 1, O, A)) != 0)
    return rc;
  L->actor = malloc(sizeof(float) * sac_actor_param_count(L->sac));
  L->stage = malloc(sizeof(float) * (size_t)B * (2 * O + A + 2));
  L->scratch = malloc(sizeof(float) * (size_t)(2 * A + 2 * sac_mlp_max_width(sac_actor_desc(L->sac))));
  if (!L->actor || !L->stage || !L->scratch)
    return SAC_ENOMEM;
  sac_rng_init(&L->rng, cfg->seed, SAC_STREAM_ACTOR(0));
  L->recent_ret = NAN;
  L->lag_slot = -1;
  if (cfg->rundir) {
    snprintf(L->ckpt_path, sizeof L->ckpt_path, "%s/checkpoint.bin", cfg->rundir->path);
    snprintf(L->replay_path, sizeof L->replay_path, "%s/replay-local.snap", cfg->rundir->path);
  }
  return 0;
}

/* ---- replay-local.snap ---- */

typedef struct {
  char magic[8];
  uint32_t version;
  int32_t obs_dim, act_dim;
  uint32_t zero0;
  int64_t env_steps, rows;
  uint32_t resumes, zero;
  double recent_return;
  uint32_t key[2];
  uint64_t counter;
  uint32_t buf[4];
  int32_t nbuf, has_spare;
  float spare, pad;
} replay_head_t;

static int save_replay(const local_t *L) {
  const ring_t *r = &L->ring;
  replay_head_t h = {.version = 1,
                     .obs_dim = r->O,
                     .act_dim = r->A,
                     .env_steps = L->t,
                     .rows = r->size,
                     .resumes = L->resumes,
                     .recent_return = L->recent_ret,
                     .counter = L->rng.counter,
                     .nbuf = L->rng.nbuf,
                     .has_spare = L->rng.has_spare,
                     .spare = L->rng.spare};
  memcpy(h.magic, "SACLRPL", 8);
  memcpy(h.key, L->rng.key, sizeof h.key);
  memcpy(h.buf, L->rng.buf, sizeof h.buf);
  sac_snap_writer_t w;
  int rc = sac_snap_writer_open(&w, L->replay_path, SAC_SNAP_KIND_REPLAY);
  if (rc == 0)
    rc = sac_snap_write(&w, &h, sizeof h);
  /* each array oldest row first: the ring's two spans, [head - size, cap) then [0, head) */
  float *const arrays[] = {r->obs, r->nobs, r->act, r->rew, r->term};
  const int width[] = {r->O, r->O, r->A, 1, 1};
  const int64_t first = ring_at(r, 0), n1 = r->size < r->cap - first ? r->size : r->cap - first;
  for (int k = 0; rc == 0 && k < 5; k++) {
    const size_t row = sizeof(float) * (size_t)width[k];
    rc = sac_snap_write(&w, arrays[k] + first * width[k], row * (size_t)n1);
    if (rc == 0 && r->size > n1)
      rc = sac_snap_write(&w, arrays[k], row * (size_t)(r->size - n1));
  }
  if (rc == 0)
    return sac_snap_writer_commit(&w);
  sac_snap_writer_abort(&w);
  return rc;
}

/* The ring, the acting stream and the recent return as the checkpoint left them; the
 * newest rows where the ring is now smaller (a resume with a lower --capacity). */
static int load_replay(local_t *L, int64_t ckpt_steps) {
  sac_snap_reader_t rd;
  int rc = sac_snap_reader_open(&rd, L->replay_path, SAC_SNAP_KIND_REPLAY);
  if (rc == SAC_ENOTFOUND) {
    SAC_WARN("train", "%s: no replay to resume with (a run of another mode?): the buffer starts empty",
             L->replay_path);
    return 0;
  }
  if (rc)
    return rc;
  replay_head_t h;
  ring_t *r = &L->ring;
  if ((rc = sac_snap_read(&rd, &h, sizeof h)) == 0 &&
      (memcmp(h.magic, "SACLRPL", 8) != 0 || h.version != 1 || h.obs_dim != r->O || h.act_dim != r->A ||
       h.rows < 0)) {
    SAC_ERROR("train", "%s: not a version-1 local replay of obs %d / act %d", L->replay_path, r->O, r->A);
    rc = SAC_EVERSION;
  }
  const int O = r->O, A = r->A;
  float *buf = rc == 0 ? malloc(sizeof(float) * (size_t)h.rows * (size_t)(2 * O + A + 2)) : NULL;
  if (rc == 0 && h.rows > 0 && !buf)
    rc = SAC_ENOMEM;
  if (rc == 0 && h.rows > 0)
    rc = sac_snap_read(&rd, buf, sizeof(float) * (size_t)h.rows * (size_t)(2 * O + A + 2));
  const float *obs = buf, *nobs = obs + h.rows * O, *act = nobs + h.rows * O, *rew = act + h.rows * A,
              *term = rew + h.rows;
  for (int64_t k = 0; rc == 0 && k < h.rows; k++) /* oldest first: a smaller ring keeps the newest */
    ring_add(r, obs + k * O, act + k * A, rew[k], term[k], nobs + k * O);
  free(buf);
  sac_snap_reader_close(&rd);
  if (rc)
    return rc;
  memcpy(L->rng.key, h.key, sizeof h.key);
  memcpy(L->rng.buf, h.buf, sizeof h.buf);
  L->rng.counter = h.counter, L->rng.nbuf = h.nbuf, L->rng.has_spare = h.has_spare, L->rng.spare = h.spare;
  L->recent_ret = h.recent_return;
  L->resumes = h.resumes + 1;
  if (h.env_steps != ckpt_steps)
    SAC_WARN("train", "%s holds the replay of step %lld, the checkpoint is of step %lld", L->replay_path,
             (long long)h.env_steps, (long long)ckpt_steps);
  SAC_INFO("train", "replay restored: %lld transitions from %s", (long long)r->size, L->replay_path);
  return 0;
}

/* A resumed run: the learner from its checkpoint, the replay beside it, the counters. */
static int resume(local_t *L) {
  const sac_train_cfg_t *cfg = L->cfg;
  sac_ckpt_counters_t ck;
  int rc = sac_checkpoint_load(L->sac, cfg->resume, &ck);
  if (rc) {
    SAC_ERROR("train", "cannot resume from %s: %s", cfg->resume, sac_strerror(rc));
    return rc;
  }
  if (L->replay_path[0] && (rc = load_replay(L, (int64_t)ck.env_steps)) != 0)
    return rc;
  sac_train_result_t *res = L->res;
  L->t = (int64_t)ck.env_steps;
  res->steps = L->t;
  res->updates = L->start_updates = (int64_t)ck.updates;
  res->episodes = (int64_t)ck.episodes;
  res->best_eval_return =
      isnan(ck.best_eval_return) && cfg->rundir ? sac_rundir_best(cfg->rundir) : ck.best_eval_return;
  if (isnan(res->best_eval_return))
    res->best_eval_return = -INFINITY;
  L->t0 -= ck.wall_seconds;
  SAC_INFO("train", "resumed from %s: %llu updates, %llu environment steps, %llu episodes", cfg->resume,
           (unsigned long long)ck.updates, (unsigned long long)ck.env_steps, (unsigned long long)ck.episodes);
  /* the environment's reset stream of this part (load_replay counted the resume) */
  sac_env_destroy(&L->env);
  if ((rc = sac_env_new(cfg->env, cfg->seed, SAC_STREAM_ENV(0, L->resumes), &L->env)) != 0)
    return rc;
  L->sp = sac_env_spec(L->env); /* the old one went with its environment */
  return 0;
}

/* ---- the stages of one step ---- */

/* act: uniform random actions for the first learning_starts steps, then the policy's. */
static void act(local_t *L, float *a) {
  if (L->t <= L->cfg->learning_starts) {
    for (int i = 0; i < L->hp.act_dim; i++)
      a[i] = (float)sac_rng_uniform_range(&L->rng, -1.0, 1.0);
  } else {
    sac_policy_act(sac_actor_desc(L->sac), L->actor, &L->pc, L->obs, 1, 0, &L->rng, a, L->scratch);
  }
}

/* step and store: the transition into the ring (next_obs is the true next state even at
 * a time limit), and a new episode after the last one ended. */
static int step_env(local_t *L, const float *a) {
  float ea[SAC_ENV_MAX_ACT], nobs[SAC_ENV_MAX_OBS], r;
  int term, trunc, rc;
  scale_action(L->sp, a, ea);
  if ((rc = sac_env_step(L->env, ea, nobs, &r, &term, &trunc)) != 0)
    return rc;
  ring_add(&L->ring, L->obs, a, r, term ? 1.0f : 0.0f, nobs);
  L->ep_ret += r;
  if (!term && !trunc) {
    memcpy(L->obs, nobs, sizeof(float) * L->hp.obs_dim);
    return 0;
  }
  L->recent_ret = isnan(L->recent_ret) ? L->ep_ret : 0.9 * L->recent_ret + 0.1 * L->ep_ret;
  L->res->episodes++;
  L->ep_ret = 0.0;
  return sac_env_reset(L->env, L->obs);
}

/* update: one step's updates (updates_per_step of them, each on a freshly sampled batch),
 * then the acting copy of the actor: with actor_lag, a copy of the actor is enqueued now
 * and the one enqueued after the previous step's updates is collected (a copy made while
 * this step's updates ran), so the acting policy is one step late and nothing waits for
 * the updates just enqueued; without, a download (a blocking sync). 0 or an error. */
static int update(local_t *L) {
  const int B = L->hp.batch;
  int rc;
  for (int u = 0; u < L->cfg->updates_per_step; u++) {
    double u0 = sac_clock_s();
    if ((rc = ring_sample(&L->ring, &L->rng, L->sac, B, L->stage)) != 0 || (rc = sac_update(L->sac)) != 0)
      return rc;
    L->res->updates++;
    sac_metric_inc(L->ts.updates);
    sac_metric_set(L->ts.version, (double)L->res->updates); /* the policy acted with: the current one */
    sac_metric_observe(L->ts.update_s, sac_clock_s() - u0);
  }
  if (!L->cfg->actor_lag)
    return sac_get_actor(L->sac, L->actor);
  int slot = L->lag_slot < 0 ? 0 : L->lag_slot ^ 1;
  if ((rc = sac_actor_fetch(L->sac, slot)) != 0)
    return rc;
  if (L->lag_slot >= 0 && (rc = sac_actor_collect(L->sac, L->lag_slot, L->actor)) != 0)
    return rc;
  L->lag_slot = slot;
  return 0;
}

/* report: the progress line (unless quiet), the training scalars to TensorBoard and
 * the statistics to /metrics. */
static void report(local_t *L, int log) {
  const sac_train_cfg_t *cfg = L->cfg;
  const sac_train_result_t *res = L->res;
  double now = sac_clock_s();
  double ups = (double)(res->updates - L->last_log_updates) / (now - L->last_log_t);
  if (res->updates > 0)
    sac_train_series_stats(&L->ts, &L->st);
  if (cfg->rundir) {
    sac_rundir_train_t tr = {.episode_return = L->recent_ret,
                             .updates_per_s = ups,
                             .env_steps_per_s = (double)(L->t - L->last_log_steps) / (now - L->last_log_t),
                             .replay_size = (double)L->ring.size,
                             .st = L->st,
                             .have_stats = res->updates > 0};
    sac_rundir_add_train(cfg->rundir, L->t, &tr);
    sac_train_series_rundir(&L->ts, cfg->rundir);
  }
  if (log) {
    double eta = (now - L->t0) / (double)L->t * (double)(cfg->total_steps - L->t);
    SAC_INFO("train",
             "step %lld/%lld  updates %lld (%.0f/s)  return %.1f  alpha %.4f  q_loss %.4f  pi_loss %.4f  "
             "entropy %.3f  eta %.0fs",
             (long long)L->t, (long long)cfg->total_steps, (long long)res->updates, ups, L->recent_ret,
             L->st.alpha, L->st.critic_loss, L->st.actor_loss, L->st.entropy, eta);
  }
  L->last_log_updates = res->updates;
  L->last_log_steps = L->t;
  L->last_log_t = now;
}

/* evaluate: the deterministic policy as it stands (a wait, once per evaluation), into
 * the result, the run directory and /metrics. */
static int evaluate(local_t *L) {
  const sac_train_cfg_t *cfg = L->cfg;
  sac_train_result_t *res = L->res;
  int rc;
  if (res->updates > 0 && (rc = sac_get_actor(L->sac, L->actor)) != 0)
    return rc;
  sac_eval_stats_t ev;
  if ((rc = sac_evaluate_policy(cfg->env, cfg->seed, sac_actor_desc(L->sac), L->actor, L->hp.log_std_min,
                                L->hp.log_std_max, cfg->eval_episodes, NULL, &ev)) != 0)
    return rc;
  L->evaluated = 1;
  res->final_eval = ev;
  res->final_eval_return = ev.mean;
  if (ev.mean > res->best_eval_return)
    res->best_eval_return = ev.mean;
  sac_metric_set(L->ts.eval_return, ev.mean);
  if (!cfg->quiet)
    SAC_INFO("train", "eval at step %lld: mean return %.1f over %d episodes", (long long)L->t, ev.mean,
             cfg->eval_episodes);
  if (cfg->rundir) {
    sac_rundir_point_t p = {.wall_s = sac_clock_s() - L->t0,
                            .steps = L->t,
                            .updates = res->updates,
                            .eval = ev,
                            .train_return = L->recent_ret,
                            .episodes = res->episodes,
                            .st = L->st};
    sac_rundir_add_eval(cfg->rundir, &p);
    sac_train_series_rundir(&L->ts, cfg->rundir);
  }
  if (L->cb)
    L->cb(L->user, L->t, ev.mean, &L->st);
  return 0;
}

/* checkpoint: the learner and its replay into the run directory (a failed one is logged;
 * training goes on). */
static void checkpoint(local_t *L) {
  const sac_train_result_t *res = L->res;
  sac_ckpt_counters_t c = {(uint64_t)res->updates, (uint64_t)L->t,          (uint64_t)res->updates,
                           sac_clock_s() - L->t0,  (uint64_t)res->episodes, res->best_eval_return};
  if (!isfinite(c.best_eval_return))
    c.best_eval_return = NAN;
  if (save_replay(L) != 0)
    SAC_ERROR("train", "cannot write %s: the checkpoint is not written either", L->replay_path);
  else
    sac_checkpoint_save(L->sac, L->ckpt_path, &c);
}

/* One environment step and what falls due on it. */
static int run_step(local_t *L) {
  const sac_train_cfg_t *cfg = L->cfg;
  sac_train_result_t *res = L->res;
  float a[SAC_ENV_MAX_ACT];
  int rc;
  L->t++;
  L->evaluated = 0;
  act(L, a);
  if ((rc = step_env(L, a)) != 0)
    return rc;
  sac_metric_set(L->ts.env_steps, (double)L->t);
  const int do_eval = (cfg->eval_interval > 0 && L->t % cfg->eval_interval == 0) || L->t == cfg->total_steps;
  const int do_report = cfg->log_interval > 0 && L->t % cfg->log_interval == 0;
  int do_ckpt = 0;
  if (L->t > cfg->learning_starts && L->ring.size >= L->hp.batch) {
    double u0 = sac_clock_s();
    int64_t n0 = res->updates;
    if (L->counted)
      sac_backend_counts(L->be, &L->c0);
    if ((rc = update(L)) != 0)
      return rc;
    do_ckpt = L->ckpt_path[0] && res->updates >= L->next_ckpt;
    sac_backend_counts_t c1;
    if (L->counted && !do_eval && !do_report && !do_ckpt && sac_backend_counts(L->be, &c1) == 0) {
      res->steady_updates += res->updates - n0;
      res->steady_blocking_syncs += c1.blocking_syncs - L->c0.blocking_syncs;
      res->steady_launches += c1.launches - L->c0.launches;
    }
    L->upd_time += sac_clock_s() - u0;
  }
  if ((do_eval || do_report) && res->updates > 0 &&
      (rc = sac_stats(L->sac, &L->st)) != 0) /* not per update */
    return rc;
  if (do_report)
    report(L, !cfg->quiet);
  if (do_eval && (rc = evaluate(L)) != 0)
    return rc;
  if (do_ckpt) {
    L->next_ckpt += cfg->checkpoint_every;
    checkpoint(L);
  }
  res->steps = L->t;
  return 0;
}

/* After the loop (at total_steps, or stopped): a last evaluation unless this step had
 * one, then the checkpoint and policy.bin. */
static int finish(local_t *L) {
  const sac_train_cfg_t *cfg = L->cfg;
  sac_train_result_t *res = L->res;
  int rc;
  res->interrupted = L->t < cfg->total_steps;
  if (!L->evaluated) {
    if (res->updates > 0 && (rc = sac_stats(L->sac, &L->st)) != 0)
      return rc;
    if ((rc = evaluate(L)) != 0)
      return rc;
  }
  res->wall_seconds = sac_clock_s() - L->t0;
  res->updates_per_second = L->upd_time > 0 ? (double)(res->updates - L->start_updates) / L->upd_time : 0.0;
  if (!cfg->rundir)
    return 0;
  checkpoint(L);
  char path[1100];
  snprintf(path, sizeof path, "%s/policy.bin", cfg->rundir->path);
  sac_policy_env_t pe; /* the env ID and action bounds, for sac-export and sac-eval */
  sac_policy_env_from_spec(&pe, cfg->env, L->sp);
  return sac_policy_save(path, sac_actor_desc(L->sac), L->actor, L->hp.log_std_min, L->hp.log_std_max, &pe);
}

static void close_run(local_t *L) {
  free(L->actor), free(L->stage), free(L->scratch);
  ring_free(&L->ring);
  sac_destroy(&L->sac);
  sac_backend_destroy(&L->be);
  sac_env_destroy(&L->env);
}

int sac_train_local(const sac_train_cfg_t *cfg, sac_train_eval_cb cb, void *user, sac_train_result_t *res) {
  memset(res, 0, sizeof *res);
  res->steady_blocking_syncs = res->steady_launches = -1;
  res->final_eval_return = res->best_eval_return = -INFINITY;
  local_t *L = calloc(1, sizeof *L);
  if (!L)
    return SAC_ENOMEM;
  L->cfg = cfg, L->cb = cb, L->user = user, L->res = res;
  L->t0 = sac_clock_s();
  int rc = open_run(L);
  if (rc == 0 && cfg->resume[0])
    rc = resume(L);
  if (rc == 0)
    rc = sac_get_actor(L->sac, L->actor);
  if (rc == 0)
    rc = sac_env_reset(L->env, L->obs);
  if (rc == 0) {
    sac_train_series_register(cfg->metrics, cfg->total_steps, cfg->rundir != NULL, &L->ts);
    sac_metric_set(L->ts.env_steps, (double)L->t);
    sac_metric_add(L->ts.updates, (double)res->updates);
    L->last_log_t = sac_clock_s();
    L->last_log_updates = res->updates;
    L->last_log_steps = L->t;
    L->next_ckpt = cfg->checkpoint_every > 0
                       ? (res->updates / cfg->checkpoint_every + 1) * cfg->checkpoint_every
                       : INT64_MAX;
    L->counted = sac_backend_counts(L->be, &L->c0) == 0;
    if (L->counted)
      res->steady_blocking_syncs = res->steady_launches = 0;
    /* a new run's curve starts at the untrained policy's return, as the service's does */
    L->st.alpha = L->hp.init_alpha;
    if (cfg->rundir && !cfg->resume[0])
      rc = evaluate(L);
  }
  while (rc == 0 && L->t < cfg->total_steps && !(cfg->stop && atomic_load(cfg->stop))) {
    sac_http_beat(cfg->http);
    rc = run_step(L);
  }
  if (rc == 0)
    rc = finish(L);
  if (rc)
    SAC_ERROR("train", "training stopped: %s", sac_strerror(rc));
  close_run(L);
  free(L);
  return rc;
}
