/* The actor loop (see actor.h): weights in, actions out, environments stepped, rows
 * batched, batches sent. A batch's rows are in time order per environment, as the wire
 * format wants: next_obs is carried only where an episode ended (the final observation,
 * which a reset would otherwise lose) and, for each environment whose last row did not
 * end, once as its tail; the shard rebuilds every other next_obs from the next row. */
#include "actor/actor.h"

#include "actor/ledger.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/env.h"
#include "common/error.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/mlp.h"
#include "common/rng.h"
#include "common/weights.h"
#include "common/wire.h"
#include "replay/client.h"

void sac_actor_cfg_default(sac_actor_cfg_t *c) {
  memset(c, 0, sizeof *c);
  c->num_envs = 1;
  strcpy(c->env, "Pendulum-v1");
  c->seed = 1;
  c->learning_starts = 1000;
  c->send_rows = 64;
  c->send_ms = 20;
  c->window = 16;
  c->log_std_min = -5.0f;
  c->log_std_max = 2.0f;
  strcpy(c->weights_endpoint, "tcp://127.0.0.1:5570");
  c->log_interval_s = 10;
  c->weights_wait_ms = 2000;
}

int sac_actor_set_shards(sac_actor_cfg_t *c, const char *list) {
  return sac_net_split_endpoints(list, "shard endpoint list", c->shard_endpoints, SAC_ACTOR_MAX_SHARDS,
                                 &c->n_shards);
}

/* Rows of one transition batch being assembled. */
typedef struct {
  int cap, n, n_next, n_eps, O, A, E;
  uint32_t *env_ids, *next_rows, *tail_ids;
  float *obs, *act, *rew, *next_obs, *tail_obs;
  uint8_t *term, *trunc;
  sac_wire_episode_t *eps;
  int *last_row;    /* per env: its last row in the batch, -1 none */
  uint64_t version; /* policy version of the batch's first row */
  uint64_t t_first; /* clock of the first row */
} builder_t;

static int builder_init(builder_t *b, int rows, int E, int O, int A) {
  memset(b, 0, sizeof *b);
  b->cap = ((rows + E - 1) / E) * E;
  b->E = E, b->O = O, b->A = A;
  b->env_ids = malloc(sizeof(uint32_t) * b->cap);
  b->next_rows = malloc(sizeof(uint32_t) * b->cap);
  b->tail_ids = malloc(sizeof(uint32_t) * E);
  b->obs = malloc(sizeof(float) * (size_t)b->cap * O);
  b->act = malloc(sizeof(float) * (size_t)b->cap * A);
  b->rew = malloc(sizeof(float) * b->cap);
  b->next_obs = malloc(sizeof(float) * (size_t)b->cap * O);
  b->tail_obs = malloc(sizeof(float) * (size_t)E * O);
  b->term = malloc(b->cap);
  b->trunc = malloc(b->cap);
  b->eps = malloc(sizeof(sac_wire_episode_t) * b->cap);
  b->last_row = malloc(sizeof(int) * E);
  if (!b->env_ids || !b->next_rows || !b->tail_ids || !b->obs || !b->act || !b->rew || !b->next_obs ||
      !b->tail_obs || !b->term || !b->trunc || !b->eps || !b->last_row)
    return SAC_ENOMEM;
  for (int e = 0; e < E; e++)
    b->last_row[e] = -1;
  return 0;
}

static void builder_free(builder_t *b) {
  free(b->env_ids), free(b->next_rows), free(b->tail_ids), free(b->obs), free(b->act), free(b->rew);
  free(b->next_obs), free(b->tail_obs), free(b->term), free(b->trunc), free(b->eps), free(b->last_row);
}

static void builder_reset(builder_t *b) {
  b->n = b->n_next = b->n_eps = 0;
  for (int e = 0; e < b->E; e++)
    b->last_row[e] = -1;
}

/* The wire view of the batch; tails are the current observations of the envs whose
 * last row did not end an episode. */
static void builder_view(builder_t *b, const float *cur_obs, sac_wire_transitions_t *t) {
  uint32_t n_tail = 0;
  for (int e = 0; e < b->E; e++) {
    int r = b->last_row[e];
    if (r >= 0 && !b->term[r] && !b->trunc[r]) {
      b->tail_ids[n_tail] = (uint32_t)e;
      memcpy(b->tail_obs + (size_t)n_tail * b->O, cur_obs + (size_t)e * b->O, sizeof(float) * b->O);
      n_tail++;
    }
  }
  memset(t, 0, sizeof *t);
  t->policy_version = b->version;
  t->n = (uint32_t)b->n;
  t->obs_dim = (uint32_t)b->O;
  t->act_dim = (uint32_t)b->A;
  t->env_ids = b->env_ids;
  t->obs = b->obs;
  t->action = b->act;
  t->reward = b->rew;
  t->terminated = b->term;
  t->truncated = b->trunc;
  t->n_next = (uint32_t)b->n_next;
  t->next_obs_rows = b->next_rows;
  t->next_obs = b->next_obs;
  t->n_tail = n_tail;
  t->tail_env_ids = b->tail_ids;
  t->tail_obs = b->tail_obs;
  t->n_episodes = (uint32_t)b->n_eps;
  t->episodes = b->eps;
}

/* Takes the newest weights if any arrived (1), growing the inference scratch when the
 * policy's shape grows. 0: nothing new; SAC_ENOMEM. Called between steps and while the
 * actor waits for room in its send window, so that it acts on new weights at once. */
static int take_weights(sac_weights_sub_t *wsub, int E, int A, float **scratch, size_t *scratch_cap,
                        sac_actor_stats_t *st) {
  int w = sac_weights_poll(wsub);
  atomic_store(&st->weights_rejected, sac_weights_rejected(wsub));
  if (w != 1)
    return 0;
  const sac_mlp_desc_t *d = sac_weights_desc(wsub);
  size_t need = (size_t)E * (2 * A + 2 * sac_mlp_max_width(d));
  if (need > *scratch_cap) { /* only when the policy's shape grows */
    float *s2 = realloc(*scratch, need * sizeof(float));
    if (!s2)
      return SAC_ENOMEM;
    *scratch = s2, *scratch_cap = need;
  }
  atomic_store(&st->weights_version, sac_weights_version(wsub));
  atomic_fetch_add(&st->weights_updates, 1);
  return 1;
}

static void on_ack(void *arg, double seconds) {
  sac_actor_stats_t *st = arg;
  sac_metric_observe(atomic_load(&st->insert_latency), seconds);
}

/* The client's acknowledgement of one stored batch goes to the ledger (when kept). */
typedef struct {
  sac_ledger_t *ledger;
  sac_actor_stats_t *st;
} ledger_arg_t;

static void on_acked(void *arg, const sac_replay_acked_t *b) {
  ledger_arg_t *la = arg;
  if (sac_ledger_append(la->ledger, b) == 0)
    atomic_fetch_add(&la->st->ledger_lines, 1);
  else
    atomic_fetch_add(&la->st->ledger_errors, 1);
}

/* The client's counters an operator (and the fault suite) watches for a cut network. */
static void client_stats_to(sac_replay_client_t *client, sac_actor_stats_t *st) {
  sac_replay_client_stats_t cs;
  sac_replay_client_stats(client, &cs);
  atomic_store(&st->batches_resent, cs.batches_resent);
  atomic_store(&st->unacked_batches, sac_replay_client_unacked(client));
}

static void scale_action(const sac_env_spec_t *sp, const float *a, float *env_a) {
  for (int i = 0; i < sp->act_dim; i++)
    env_a[i] = sp->act_low[i] + 0.5f * (a[i] + 1.0f) * (sp->act_high[i] - sp->act_low[i]);
}

int sac_actor_run(const sac_actor_cfg_t *cfg, atomic_int *stop, sac_actor_stats_t *st) {
  const int E = cfg->num_envs;
  int rc = 0;
  sac_env_t **envs = calloc((size_t)(E > 0 ? E : 1), sizeof *envs);
  sac_weights_sub_t *wsub = NULL;
  sac_replay_client_t *client = NULL;
  ledger_arg_t la = {NULL, st};
  builder_t b = {0};
  float *obs = NULL, *a = NULL, *scratch = NULL, *ep_ret = NULL;
  int *ep_len = NULL;
  size_t scratch_cap = 0;
  double ret_hist[20];
  int n_hist = 0;
  if (E < 1 || cfg->n_shards < 1 || cfg->send_rows < 1 || !envs) {
    SAC_ERROR("actor", "actor %u: need num_envs >= 1, send_rows >= 1 and at least one shard", cfg->actor_id);
    free(envs);
    return SAC_ECONFIG;
  }
  atomic_store(&st->running, 1);
  for (int e = 0; e < E && rc == 0; e++)
    rc = sac_env_new(cfg->env, cfg->seed, SAC_STREAM_ENV(cfg->actor_id, (uint64_t)e), &envs[e]);
  if (rc)
    goto out;
  const sac_env_spec_t *sp = sac_env_spec(envs[0]);
  const int O = sp->obs_dim, A = sp->act_dim;
  obs = malloc(sizeof(float) * (size_t)E * O);
  a = malloc(sizeof(float) * (size_t)E * A);
  ep_ret = calloc((size_t)E, sizeof(float));
  ep_len = calloc((size_t)E, sizeof(int));
  if (!obs || !a || !ep_ret || !ep_len || builder_init(&b, cfg->send_rows, E, O, A)) {
    rc = SAC_ENOMEM;
    goto out;
  }
  wsub = sac_weights_sub_new(cfg->ctx, cfg->weights_endpoint, O, A);
  const char *eps[SAC_ACTOR_MAX_SHARDS];
  for (size_t i = 0; i < cfg->n_shards; i++)
    eps[i] = cfg->shard_endpoints[i];
  sac_replay_client_config_t cc;
  sac_replay_client_config_default(&cc);
  cc.n_shards = cfg->n_shards;
  cc.insert_endpoints = eps;
  cc.ctx = cfg->ctx;
  cc.actor_id = cfg->actor_id;
  cc.window = (uint32_t)cfg->window;
  cc.on_ack = on_ack;
  cc.on_ack_arg = st;
  if (cfg->ledger_path[0]) {
    if ((rc = sac_ledger_open(cfg->ledger_path, cfg->actor_id, &la.ledger)) != 0)
      goto out;
    cc.on_acked = on_acked;
    cc.on_acked_arg = &la;
  }
  client = wsub ? sac_replay_client_new(&cc) : NULL;
  if (!wsub || !client) {
    rc = SAC_ENET;
    goto out;
  }
  for (int e = 0; e < E && rc == 0; e++)
    rc = sac_env_reset(envs[e], obs + (size_t)e * O);
  if (rc)
    goto out;

  /* Wait (bounded, stoppable) for the first weights. If they are already trained
   * (version > 0: this actor joins, or rejoins after a restart, a run in progress), it
   * skips the random warm-up: a restarted actor would otherwise queue learning_starts
   * steps of random actions, and the same ones as its previous life (its streams are a
   * function of seed and actor id), ahead of everyone's data. Its action noise then
   * also comes from a stream keyed by that version, so it does not repeat them either. */
  uint64_t first_version = 0;
  int joined_trained = 0;
  for (uint64_t t_w = sac_clock_ns(); !(stop && atomic_load(stop));) {
    int w = take_weights(wsub, E, A, &scratch, &scratch_cap, st);
    if (w < 0) {
      rc = w;
      goto out;
    }
    if (w == 1 || sac_clock_ns() - t_w >= (uint64_t)cfg->weights_wait_ms * 1000000ull)
      break;
    sac_sleep_ns(5000000ull);
  }
  if (sac_weights_params(wsub) && (first_version = sac_weights_version(wsub)) > 0) {
    joined_trained = 1;
    SAC_INFO("actor", "actor %u: joined a run in progress (policy v%llu): acting on it from the first step",
             cfg->actor_id, (unsigned long long)first_version);
  }
  sac_rng_t rng;
  sac_rng_init(&rng, joined_trained ? sac_splitmix64(cfg->seed ^ sac_splitmix64(first_version)) : cfg->seed,
               SAC_STREAM_ACTOR(cfg->actor_id));
  sac_policy_cfg_t pc = {cfg->log_std_min, cfg->log_std_max};
  int64_t steps = 0;
  double t_log = sac_clock_s();
  SAC_INFO("actor", "actor %u: %d x %s, %zu shard(s), weights from %s", cfg->actor_id, E, cfg->env,
           cfg->n_shards, cfg->weights_endpoint);
  while (!(stop && atomic_load(stop)) && (cfg->max_steps <= 0 || steps < cfg->max_steps)) {
    /* newest weights, between steps */
    if ((rc = take_weights(wsub, E, A, &scratch, &scratch_cap, st)) < 0)
      goto out;
    rc = 0;
    const float *params = sac_weights_params(wsub);
    int learned = (steps >= cfg->learning_starts || joined_trained) && params;
    if (learned) {
      sac_policy_act(sac_weights_desc(wsub), params, &pc, obs, E, 0, &rng, a, scratch);
      atomic_fetch_add(&st->policy_steps, (uint64_t)E);
    } else {
      for (int i = 0; i < E * A; i++)
        a[i] = (float)sac_rng_uniform_range(&rng, -1.0, 1.0);
    }
    if (b.n == 0) {
      b.version = learned ? sac_weights_version(wsub) : 0;
      b.t_first = sac_clock_ns();
    }
    for (int e = 0; e < E; e++) {
      float ea[SAC_ENV_MAX_ACT], nobs[SAC_ENV_MAX_OBS], r;
      int term, trunc;
      scale_action(sp, a + (size_t)e * A, ea);
      if ((rc = sac_env_step(envs[e], ea, nobs, &r, &term, &trunc)) != 0)
        goto out;
      int row = b.n++;
      b.env_ids[row] = (uint32_t)e;
      memcpy(b.obs + (size_t)row * O, obs + (size_t)e * O, sizeof(float) * O);
      memcpy(b.act + (size_t)row * A, a + (size_t)e * A, sizeof(float) * A);
      b.rew[row] = r;
      b.term[row] = (uint8_t)term;
      b.trunc[row] = (uint8_t)(trunc && !term);
      b.last_row[e] = row;
      ep_ret[e] += r;
      ep_len[e]++;
      if (term || trunc) {
        b.next_rows[b.n_next] = (uint32_t)row;
        memcpy(b.next_obs + (size_t)b.n_next * O, nobs, sizeof(float) * O);
        b.n_next++;
        b.eps[b.n_eps++] = (sac_wire_episode_t){(uint32_t)e, ep_ret[e], (uint32_t)ep_len[e], trunc && !term};
        ret_hist[n_hist % 20] = ep_ret[e];
        n_hist++;
        double m = 0;
        int k = n_hist < 20 ? n_hist : 20;
        for (int i = 0; i < k; i++)
          m += ret_hist[i];
        atomic_store(&st->last_return, (double)ep_ret[e]);
        atomic_store(&st->last_length, (double)ep_len[e]);
        atomic_store(&st->mean_return, m / k);
        atomic_fetch_add(&st->episodes, 1);
        ep_ret[e] = 0.0f;
        ep_len[e] = 0;
        if ((rc = sac_env_reset(envs[e], obs + (size_t)e * O)) != 0)
          goto out;
      } else {
        memcpy(obs + (size_t)e * O, nobs, sizeof(float) * O);
      }
    }
    steps += E;
    atomic_fetch_add(&st->env_steps, (uint64_t)E);
    int last = cfg->max_steps > 0 && steps >= cfg->max_steps;
    if (b.n + E > b.cap || last || sac_clock_ns() - b.t_first >= (uint64_t)cfg->send_ms * 1000000ull) {
      sac_wire_transitions_t t;
      builder_view(&b, obs, &t);
      uint64_t w0 = sac_clock_ns();
      for (;;) { /* backpressure: wait for room, but stay stoppable */
        rc = sac_replay_client_insert(client, -1, &t, 100);
        client_stats_to(client, st); /* a cut network shows here: resends, unacked */
        /* counted as it accrues, so an actor held back for minutes shows it */
        uint64_t w1 = sac_clock_ns();
        atomic_fetch_add(&st->send_wait_ns, w1 - w0);
        w0 = w1;
        if (rc != SAC_ETIMEOUT || (stop && atomic_load(stop)))
          break;
        atomic_fetch_add(&st->insert_waits, 1);
        /* new weights are taken while waiting; the batch keeps the version it was made with */
        int w = take_weights(wsub, E, A, &scratch, &scratch_cap, st);
        if (w < 0) {
          rc = w;
          goto out;
        }
      }
      if (rc == SAC_ETIMEOUT) { /* stopping with the batch unsent */
        rc = 0;
        break;
      }
      if (rc) {
        SAC_ERROR("actor", "actor %u: batch of %d rows not sent: %s", cfg->actor_id, b.n, sac_strerror(rc));
        goto out;
      }
      atomic_fetch_add(&st->batches_sent, 1);
      atomic_fetch_add(&st->rows_sent, (uint64_t)b.n);
      builder_reset(&b);
    }
    sac_replay_client_poll(client, 0);
    client_stats_to(client, st);
    if (cfg->log_interval_s > 0 && sac_clock_s() - t_log >= cfg->log_interval_s) {
      t_log = sac_clock_s();
      SAC_INFO("actor", "actor %u: steps %lld  episodes %llu  mean return %.1f  weights v%llu  unacked %u",
               cfg->actor_id, (long long)steps, (unsigned long long)atomic_load(&st->episodes),
               atomic_load(&st->mean_return), (unsigned long long)atomic_load(&st->weights_version),
               sac_replay_client_unacked(client));
    }
  }
  /* Keep what was sent: wait (bounded) for the acks. When told to stop, the shards may
   * be stopping too (or parked by a rate limiter whose learner has gone), so the wait
   * is short; after max_steps the shards are expected to be serving. */
  if (rc == 0 && sac_replay_client_flush(client, stop && atomic_load(stop) ? 200 : 5000) != 0)
    SAC_WARN("actor", "actor %u: %u batch(es) unacknowledged at exit", cfg->actor_id,
             sac_replay_client_unacked(client));
  if (client)
    client_stats_to(client, st);
out:
  if (rc)
    SAC_ERROR("actor", "actor %u stopped: %s", cfg->actor_id, sac_strerror(rc));
  sac_replay_client_destroy(&client);
  sac_ledger_close(&la.ledger);
  sac_weights_sub_destroy(&wsub);
  for (int e = 0; e < E; e++)
    sac_env_destroy(&envs[e]);
  free(envs), free(obs), free(a), free(scratch), free(ep_ret), free(ep_len);
  builder_free(&b);
  atomic_store(&st->running, 0);
  return rc;
}

struct sac_actor {
  sac_actor_cfg_t cfg;
  sac_actor_stats_t stats;
  atomic_int stop;
  pthread_t thread;
  int rc;
};

static void *actor_thread(void *arg) {
  sac_actor_t *a = arg;
  a->rc = sac_actor_run(&a->cfg, &a->stop, &a->stats);
  return NULL;
}

int sac_actor_start(const sac_actor_cfg_t *cfg, sac_actor_t **out) {
  *out = NULL;
  sac_actor_t *a = calloc(1, sizeof *a);
  if (!a)
    return SAC_ENOMEM;
  a->cfg = *cfg;
  atomic_store(&a->stats.running, 1);
  if (pthread_create(&a->thread, NULL, actor_thread, a) != 0) {
    free(a);
    return SAC_ENOMEM;
  }
  *out = a;
  return 0;
}

const sac_actor_stats_t *sac_actor_stats(const sac_actor_t *a) { return &a->stats; }

int sac_actor_stop(sac_actor_t **ap) {
  sac_actor_t *a = *ap;
  if (!a)
    return 0;
  atomic_store(&a->stop, 1);
  pthread_join(a->thread, NULL);
  int rc = a->rc;
  free(a);
  *ap = NULL;
  return rc;
}
