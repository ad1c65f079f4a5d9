/* The actor loop (see actor.h): weights in, actions out, environments stepped, rows
 * batched, batches sent. A batch's rows are in time order per environment, as the wire
 * format wants: next_obs is carried only where an episode ended (the final observation,
 * which a reset would otherwise lose) and, for each environment whose last row did not
 * end, once as its tail; the shard rebuilds every other next_obs from the next row.
 * The loop (run_loop) is one environment step in named stages, each timed into the
 * stats: take weights, act, step, send, report; the run's state is one struct
 * (actor_run_t), set up and torn down in named steps. */
#include "actor/actor.h"

#include "actor/ledger.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
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
  c->drain_timeout_ms = 5000;
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
  atomic_store(&st->not_durable_replies, cs.not_durable_replies);
  atomic_store(&st->waits_unreachable, cs.waits_logged[1]);
  atomic_store(&st->waits_no_acks, cs.waits_logged[2]);
  atomic_store(&st->unacked_batches, sac_replay_client_unacked(client));
}

static void scale_action(const sac_env_spec_t *sp, const float *a, float *env_a) {
  for (int i = 0; i < sp->act_dim; i++)
    env_a[i] = sp->act_low[i] + 0.5f * (a[i] + 1.0f) * (sp->act_high[i] - sp->act_low[i]);
}

const char *sac_actor_stage_name(sac_actor_stage_t s) {
  static const char *const names[] = {"act", "step", "send", "weights", "report"};
  _Static_assert(sizeof names / sizeof names[0] == SAC_ACTOR_STAGES, "stage names");
  return (unsigned)s < SAC_ACTOR_STAGES ? names[s] : "unknown";
}

/* Everything one actor run holds: what it owns (released by close_run), what set-up
 * fixed, and where the loop stands. */
typedef struct {
  const sac_actor_cfg_t *cfg;
  atomic_int *stop;
  sac_actor_stats_t *st;
  int E, O, A;
  const sac_env_spec_t *sp;
  /* owned */
  sac_env_t **envs; /* (E) */
  sac_weights_sub_t *wsub;
  sac_replay_client_t *client;
  ledger_arg_t la;
  builder_t b;
  float *obs;     /* obs: (E, O) the current observations */
  float *a;       /* a: (E, A) this step's actions in [-1, 1] */
  float *scratch; /* inference scratch, grown with the policy's shape */
  float *ep_ret;  /* ep_ret: (E) */
  int *ep_len;    /* ep_len: (E) */
  size_t scratch_cap;
  /* the loop */
  double ret_hist[20];
  int n_hist;
  int joined_trained; /* joined a run in progress: no random warm-up */
  int learned;        /* this step's actions came from the policy */
  sac_rng_t rng;
  sac_policy_cfg_t pc;
  int64_t steps;
  double t_log;
  uint64_t lap, stage_ns[SAC_ACTOR_STAGES];
  /* waits for weights made visible: when the last weights came (or the run started),
   * and when a missing-weights WARN is due next (0: none said yet) */
  double t_weights, weights_warn_next;
  double t_stall; /* when watch_stall looked last */
  int run_over;   /* the learner said its run is over (sac_weights_run): stop stepping */
  /* the run's step budget (sac_weights_run): this actor steps while steps + E <= cap
   * (-1: no budget said); its share of what the run has left at the learner's last count */
  int64_t cap;
  uint64_t run_total, run_done;
  int64_t acked_before[2]; /* its steps acknowledged when the previous weights came, and the ones before */
} actor_run_t;

/* What a stage returns besides 0 and a negative SAC_E* code: stopping with the batch
 * unsent. */
enum { STOPPED_UNSENT = 1 };

/* Adds the time since the last lap to stage s (one clock read per stage). */
static void lap(actor_run_t *r, sac_actor_stage_t s) {
  uint64_t now = sac_clock_ns();
  r->stage_ns[s] += now - r->lap;
  r->lap = now;
}

static int stopping(const actor_run_t *r) { return r->stop && atomic_load(r->stop); }

static void watch_weights(actor_run_t *r, int got, int waiting);
static void take_budget(actor_run_t *r);
static void report(actor_run_t *r);

/* ---- set-up ---- */

/* The environments, their spec and the loop's buffers. */
static int open_envs(actor_run_t *r) {
  const int E = r->E;
  int rc = 0;
  for (int e = 0; e < E && rc == 0; e++)
    rc = sac_env_new(r->cfg->env, r->cfg->seed, SAC_STREAM_ENV(r->cfg->actor_id, (uint64_t)e), &r->envs[e]);
  if (rc)
    return rc;
  r->sp = sac_env_spec(r->envs[0]);
  r->O = r->sp->obs_dim, r->A = r->sp->act_dim;
  r->obs = malloc(sizeof(float) * (size_t)E * r->O);
  r->a = malloc(sizeof(float) * (size_t)E * r->A);
  r->ep_ret = calloc((size_t)E, sizeof(float));
  r->ep_len = calloc((size_t)E, sizeof(int));
  if (!r->obs || !r->a || !r->ep_ret || !r->ep_len || builder_init(&r->b, r->cfg->send_rows, E, r->O, r->A))
    return SAC_ENOMEM;
  return 0;
}

/* The weights subscription, the ledger and the replay client; then the first
 * observations. */
static int open_network(actor_run_t *r) {
  const sac_actor_cfg_t *cfg = r->cfg;
  int rc;
  r->wsub = sac_weights_sub_new(cfg->ctx, cfg->weights_endpoint, r->O, r->A);
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
  cc.on_ack_arg = r->st;
  if (cfg->ledger_path[0]) {
    if ((rc = sac_ledger_open(cfg->ledger_path, cfg->actor_id, &r->la.ledger)) != 0)
      return rc;
    cc.on_acked = on_acked;
    cc.on_acked_arg = &r->la;
  }
  r->client = r->wsub ? sac_replay_client_new(&cc) : NULL;
  if (!r->wsub || !r->client)
    return SAC_ENET;
  rc = 0;
  for (int e = 0; e < r->E && rc == 0; e++)
    rc = sac_env_reset(r->envs[e], r->obs + (size_t)e * r->O);
  return rc;
}

/* Waits (bounded, stoppable) for the first weights. If they are already trained
 * (version > 0: this actor joins, or rejoins after a restart, a run in progress), it
 * skips the random warm-up: a restarted actor would otherwise queue learning_starts
 * steps of random actions, and the same ones as its previous life (its streams are a
 * function of seed and actor id), ahead of everyone's data. Its action noise then also
 * comes from a stream keyed by that version, so it does not repeat them either. */
static int wait_first_weights(actor_run_t *r) {
  const sac_actor_cfg_t *cfg = r->cfg;
  uint64_t first_version = 0;
  r->t_log = r->t_weights = sac_clock_s();
  for (uint64_t t_w = sac_clock_ns(); !stopping(r);) {
    int w = take_weights(r->wsub, r->E, r->A, &r->scratch, &r->scratch_cap, r->st);
    if (w < 0)
      return w;
    if (w == 1 || sac_clock_ns() - t_w >= (uint64_t)cfg->weights_wait_ms * 1000000ull)
      break;
    watch_weights(r, 0, 1); /* a long --weights_wait_ms is a wait like the others */
    report(r);
    sac_sleep_ns(5000000ull);
  }
  r->cap = -1;
  if (sac_weights_params(r->wsub)) {
    watch_weights(r, 1, 0);
    take_budget(r);
  }
  if (sac_weights_params(r->wsub) && (first_version = sac_weights_version(r->wsub)) > 0) {
    r->joined_trained = 1;
    SAC_INFO("actor", "actor %u: joined a run in progress (policy v%llu): acting on it from the first step",
             cfg->actor_id, (unsigned long long)first_version);
  }
  sac_rng_init(&r->rng,
               r->joined_trained ? sac_splitmix64(cfg->seed ^ sac_splitmix64(first_version)) : cfg->seed,
               SAC_STREAM_ACTOR(cfg->actor_id));
  r->pc = (sac_policy_cfg_t){cfg->log_std_min, cfg->log_std_max};
  r->t_log = sac_clock_s();
  if (!sac_weights_params(r->wsub))
    r->t_weights = r->t_log; /* the wait for weights runs from the first step */
  SAC_INFO("actor", "actor %u: %d x %s, %zu shard(s), weights from %s", cfg->actor_id, r->E, cfg->env,
           cfg->n_shards, cfg->weights_endpoint);
  return 0;
}

/* ---- the stages of one step ---- */

/* The weights waited for, made visible: a WARN once the actor has gone WEIGHTS_WARN_S
 * without weights where it needs them (past its random warm-up, or ever, once the
 * learner published: then it has gone silent), repeated every WEIGHTS_REPEAT_S, and a line
 * when they come again. */
#define WEIGHTS_WARN_S 5.0
#define WEIGHTS_REPEAT_S 30.0
static void watch_weights(actor_run_t *r, int got, int waiting) {
  const sac_actor_cfg_t *cfg = r->cfg;
  double now = sac_clock_s();
  if (got) {
    if (r->weights_warn_next > 0)
      SAC_INFO("actor", "actor %u: weights v%llu from %s after %.0f s without", cfg->actor_id,
               (unsigned long long)sac_weights_version(r->wsub), cfg->weights_endpoint, now - r->t_weights);
    r->t_weights = now;
    r->weights_warn_next = 0;
    return;
  }
  if (r->run_over) /* no weights come after a run: not a wait to warn about */
    return;
  int have = sac_weights_params(r->wsub) != NULL;
  int need = waiting || have || r->steps >= cfg->learning_starts;
  double due = r->weights_warn_next > 0 ? r->weights_warn_next : r->t_weights + WEIGHTS_WARN_S;
  if (!need || now < due)
    return;
  if (r->weights_warn_next == 0) /* its first line: one wait counted */
    atomic_fetch_add(&r->st->waits_weights, 1);
  r->weights_warn_next = now + WEIGHTS_REPEAT_S;
  if (have)
    SAC_WARN(
        "actor",
        "actor %u: no weights from %s for %.0f s (the learner sends them at least once a second): acting "
        "on v%llu; is the learner still running?",
        cfg->actor_id, cfg->weights_endpoint, now - r->t_weights,
        (unsigned long long)sac_weights_version(r->wsub));
  else
    SAC_WARN(
        "actor",
        "actor %u: no weights yet from %s after %.0f s: acting at random; is the learner running, and is "
        "the actor's --weights its weights endpoint?",
        cfg->actor_id, cfg->weights_endpoint, now - r->t_weights);
}

/* The run's step budget from the newest weights (the learner's count of the steps the
 * shards hold, and of the actors they know): this actor's cap is what the shards had of
 * it when the previous weights came (acknowledged then, so in the learner's count, which
 * is taken later) plus its share of what the run has left, rounded up. Summed over the
 * actors that is at most the total: the run ends at its total_steps, give or take N - 1
 * for the rounding, and a share left unused (an actor that stopped) is handed out again by
 * the next broadcasts. A learner that says nothing sets no cap; one that says the run is
 * over stops the actor's steps until a learner runs again (a resumed run). */
static void take_budget(actor_run_t *r) {
  uint32_t actors = 0;
  int over = sac_weights_run(r->wsub, &r->run_total, &r->run_done, &actors);
  if (over != r->run_over) {
    r->run_over = over;
    if (over)
      SAC_INFO("actor",
               "actor %u: the learner's run is over (%llu of %llu steps): stopped stepping after %lld steps; "
               "waiting for a new run (SIGTERM or Ctrl-C stops the actor)",
               r->cfg->actor_id, (unsigned long long)r->run_done, (unsigned long long)r->run_total,
               (long long)r->steps);
    else
      SAC_INFO("actor", "actor %u: the learner runs again (%llu of %llu steps): stepping again",
               r->cfg->actor_id, (unsigned long long)r->run_done, (unsigned long long)r->run_total);
  }
  int64_t acked = r->steps - (int64_t)sac_replay_client_unacked_rows(r->client) - r->b.n;
  /* what the learner's count surely holds of this actor: what was acknowledged two
   * broadcasts back (the count is the shards' last report to the learner, which can be
   * older than the previous broadcast on a loaded machine; a share too small only waits
   * for the next broadcast, which hands the rest out) */
  int64_t had = r->acked_before[1];
  r->acked_before[1] = r->acked_before[0];
  r->acked_before[0] = acked;
  if (!r->run_total) {
    r->cap = -1;
    return;
  }
  int64_t left = (int64_t)r->run_total - (int64_t)r->run_done, n = actors ? (int64_t)actors : 1;
  r->cap = had + (left > 0 ? (left + n - 1) / n : 0);
}

/* weights: the newest, between steps; with them the run's budget. */
static int take_new_weights(actor_run_t *r) {
  int rc = take_weights(r->wsub, r->E, r->A, &r->scratch, &r->scratch_cap, r->st);
  if (rc < 0)
    return rc;
  watch_weights(r, rc == 1, 0);
  if (rc == 1)
    take_budget(r);
  return 0;
}

/* act: the policy's actions once past the warm-up and given weights, else uniform
 * random ones; a batch's first row fixes its policy version. */
static void act(actor_run_t *r) {
  const float *params = sac_weights_params(r->wsub);
  r->learned = (r->steps >= r->cfg->learning_starts || r->joined_trained) && params;
  if (r->learned) {
    sac_policy_act(sac_weights_desc(r->wsub), params, &r->pc, r->obs, r->E, 0, &r->rng, r->a, r->scratch);
    atomic_fetch_add(&r->st->policy_steps, (uint64_t)r->E);
  } else {
    for (int i = 0; i < r->E * r->A; i++)
      r->a[i] = (float)sac_rng_uniform_range(&r->rng, -1.0, 1.0);
  }
  if (r->b.n == 0) {
    r->b.version = r->learned ? sac_weights_version(r->wsub) : 0;
    r->b.t_first = sac_clock_ns();
  }
}

/* An episode of environment e ended with row `row`: its final observation, its end in
 * the batch and the return statistics; then the environment is reset. */
static int end_episode(actor_run_t *r, int e, int row, const float *nobs, int term, int trunc) {
  builder_t *b = &r->b;
  sac_actor_stats_t *st = r->st;
  const int O = r->O;
  b->next_rows[b->n_next] = (uint32_t)row;
  memcpy(b->next_obs + (size_t)b->n_next * O, nobs, sizeof(float) * O);
  b->n_next++;
  b->eps[b->n_eps++] =
      (sac_wire_episode_t){(uint32_t)e, r->ep_ret[e], (uint32_t)r->ep_len[e], trunc && !term};
  r->ret_hist[r->n_hist % 20] = r->ep_ret[e];
  r->n_hist++;
  double m = 0;
  int k = r->n_hist < 20 ? r->n_hist : 20;
  for (int i = 0; i < k; i++)
    m += r->ret_hist[i];
  atomic_store(&st->last_return, (double)r->ep_ret[e]);
  atomic_store(&st->last_length, (double)r->ep_len[e]);
  atomic_store(&st->mean_return, m / k);
  atomic_fetch_add(&st->episodes, 1);
  r->ep_ret[e] = 0.0f;
  r->ep_len[e] = 0;
  return sac_env_reset(r->envs[e], r->obs + (size_t)e * O);
}

/* step: every environment one step on its action, each transition a row of the batch. */
static int step_envs(actor_run_t *r) {
  builder_t *b = &r->b;
  const int O = r->O, A = r->A;
  int rc;
  for (int e = 0; e < r->E; e++) {
    float ea[SAC_ENV_MAX_ACT], nobs[SAC_ENV_MAX_OBS], rew;
    int term, trunc;
    scale_action(r->sp, r->a + (size_t)e * A, ea);
    if ((rc = sac_env_step(r->envs[e], ea, nobs, &rew, &term, &trunc)) != 0)
      return rc;
    int row = b->n++;
    b->env_ids[row] = (uint32_t)e;
    memcpy(b->obs + (size_t)row * O, r->obs + (size_t)e * O, sizeof(float) * O);
    memcpy(b->act + (size_t)row * A, r->a + (size_t)e * A, sizeof(float) * A);
    b->rew[row] = rew;
    b->term[row] = (uint8_t)term;
    b->trunc[row] = (uint8_t)(trunc && !term);
    b->last_row[e] = row;
    r->ep_ret[e] += rew;
    r->ep_len[e]++;
    if (term || trunc) {
      if ((rc = end_episode(r, e, row, nobs, term, trunc)) != 0)
        return rc;
    } else {
      memcpy(r->obs + (size_t)e * O, nobs, sizeof(float) * O);
    }
  }
  r->steps += r->E;
  atomic_fetch_add(&r->st->env_steps, (uint64_t)r->E);
  return 0;
}

/* Sends the batch, waiting for room in the window (backpressure); new weights are taken
 * while waiting (the batch keeps the version it was made with). The wait ends when told
 * to stop or, while draining (until_ns > 0), at until_ns: then STOPPED_UNSENT. */
static int send_batch(actor_run_t *r, uint64_t until_ns) {
  sac_actor_stats_t *st = r->st;
  sac_wire_transitions_t t;
  builder_view(&r->b, r->obs, &t);
  uint64_t w0 = sac_clock_ns();
  int rc;
  for (;;) {
    int wait_ms = 100;
    if (until_ns) {
      uint64_t now = sac_clock_ns();
      wait_ms = now >= until_ns ? 0 : (int)((until_ns - now) / 1000000ull);
      wait_ms = wait_ms > 100 ? 100 : wait_ms;
    }
    rc = sac_replay_client_insert(r->client, -1, &t, wait_ms);
    client_stats_to(r->client, st); /* a cut network shows here: resends, unacked */
    /* counted as it accrues, so an actor held back for minutes shows it */
    uint64_t w1 = sac_clock_ns();
    atomic_fetch_add(&st->send_wait_ns, w1 - w0);
    w0 = w1;
    if (rc != SAC_ETIMEOUT || (until_ns ? sac_clock_ns() >= until_ns : stopping(r)))
      break;
    atomic_fetch_add(&st->insert_waits, 1);
    int w = take_new_weights(r);
    if (w < 0)
      return w;
    report(r); /* the progress line keeps coming while the actor waits, saying for what */
  }
  if (rc == SAC_ETIMEOUT)
    return STOPPED_UNSENT;
  if (rc) {
    SAC_ERROR("actor", "actor %u: batch of %d rows not sent: %s", r->cfg->actor_id, r->b.n, sac_strerror(rc));
    return rc;
  }
  atomic_fetch_add(&st->batches_sent, 1);
  atomic_fetch_add(&st->rows_sent, (uint64_t)r->b.n);
  builder_reset(&r->b);
  return 0;
}

/* send: the batch once full, after send_ms, or at the last step; then the acks. */
static int send_if_due(actor_run_t *r) {
  const sac_actor_cfg_t *cfg = r->cfg;
  int last = cfg->max_steps > 0 && r->steps >= cfg->max_steps;
  if (r->b.n + r->E > r->b.cap || last ||
      sac_clock_ns() - r->b.t_first >= (uint64_t)cfg->send_ms * 1000000ull) {
    int rc = send_batch(r, 0);
    if (rc)
      return rc;
  }
  sac_replay_client_poll(r->client, 0);
  client_stats_to(r->client, r->st);
  return 0;
}

/* What the actor waits for now, for its progress line ("" when nothing): a shard it
 * cannot reach, a shard that holds its batches back (the rate limiter), no weights. */
static const char *waiting_for(const actor_run_t *r, char *buf, size_t cap) {
  const sac_actor_cfg_t *cfg = r->cfg;
  buf[0] = '\0';
  if (r->run_over) {
    snprintf(buf, cap, "  waiting: the learner's run is over (%llu of %llu steps): waiting for a new run",
             (unsigned long long)r->run_done, (unsigned long long)r->run_total);
    return buf;
  }
  for (size_t i = 0; i < cfg->n_shards; i++) {
    sac_replay_shard_state_t ss;
    if (sac_replay_client_shard_state(r->client, i, &ss) != 0)
      continue;
    if (!ss.connected) {
      snprintf(buf, cap, "  waiting: shard %s unreachable for %.0f s", ss.endpoint, ss.down_s);
      return buf;
    }
    if (ss.unacked && ss.ack_wait_s >= 2.0) {
      snprintf(buf, cap, "  waiting: shard %s holds %u batch(es) back for %.0f s (its rate limiter)",
               ss.endpoint, ss.unacked, ss.ack_wait_s);
      return buf;
    }
  }
  if (r->cap >= 0 && r->steps + r->E > r->cap)
    snprintf(buf, cap,
             "  waiting: its share of the run's %llu steps is stepped (%llu stored at the learner's "
             "last count): waiting for the learner's next count",
             (unsigned long long)r->run_total, (unsigned long long)r->run_done);
  else if (!sac_weights_params(r->wsub) && r->steps >= cfg->learning_starts)
    snprintf(buf, cap, "  waiting: no weights yet from %s (acting at random)", cfg->weights_endpoint);
  else if (sac_clock_s() - r->t_weights >= WEIGHTS_WARN_S && sac_weights_params(r->wsub))
    snprintf(buf, cap, "  waiting: no weights from %s for %.0f s", cfg->weights_endpoint,
             sac_clock_s() - r->t_weights);
  return buf;
}

/* A stalled shard for /healthz (sac_actor_stats_t.stalled): one unreachable, or connected
 * and acknowledging nothing, for STALL_S or more; looked at twice a second. */
#define STALL_S 5.0
static void watch_stall(actor_run_t *r) {
  double now = sac_clock_s();
  if (now - r->t_stall < 0.5)
    return;
  r->t_stall = now;
  sac_http_beat(r->cfg->http); /* /livez: twice a second, not every step */
  int kind = 0, shard = -1;
  double secs = 0;
  for (size_t i = 0; i < r->cfg->n_shards && !kind; i++) {
    sac_replay_shard_state_t ss;
    if (sac_replay_client_shard_state(r->client, i, &ss) != 0)
      continue;
    if (!ss.connected && ss.down_s >= STALL_S)
      kind = SAC_ACTOR_STALL_UNREACHABLE, shard = (int)i, secs = ss.down_s;
    else if (ss.connected && ss.unacked && ss.ack_wait_s >= STALL_S && !r->run_over)
      kind = SAC_ACTOR_STALL_NO_ACKS, shard = (int)i, secs = ss.ack_wait_s;
  }
  atomic_store(&r->st->stall_shard, shard);
  atomic_store(&r->st->stall_seconds, secs);
  atomic_store(&r->st->stalled, kind);
}

/* report: the stage profile into the stats, a stalled shard for /healthz, and a progress
 * line every log_interval_s (also while the actor waits: it says for what). */
static void report(actor_run_t *r) {
  const sac_actor_cfg_t *cfg = r->cfg;
  for (int s = 0; s < SAC_ACTOR_STAGES; s++)
    atomic_store_explicit(&r->st->stage_ns[s], r->stage_ns[s], memory_order_relaxed);
  watch_stall(r);
  if (cfg->log_interval_s <= 0 || sac_clock_s() - r->t_log < cfg->log_interval_s)
    return;
  r->t_log = sac_clock_s();
  char wait[512];
  SAC_INFO("actor", "actor %u: steps %lld  episodes %llu  mean return %.1f  weights v%llu  unacked %u%s",
           cfg->actor_id, (long long)r->steps, (unsigned long long)atomic_load(&r->st->episodes),
           atomic_load(&r->st->mean_return), (unsigned long long)atomic_load(&r->st->weights_version),
           sac_replay_client_unacked(r->client), waiting_for(r, wait, sizeof wait));
}

/* At its share of the run's steps, or the run over: the batch so far sent (the learner
 * counts stored steps), then a wait for the next broadcast (a new share, a new run), the
 * acks and the progress line going on. 0 (go on), STOPPED_UNSENT or a negative code. */
static int wait_budget(actor_run_t *r) {
  if (r->b.n > 0) {
    int rc = send_batch(r, 0);
    if (rc)
      return rc;
  }
  while (!stopping(r) && (r->run_over || (r->cap >= 0 && r->steps + r->E > r->cap))) {
    sac_replay_client_poll(r->client, 5);
    client_stats_to(r->client, r->st);
    int rc = take_new_weights(r);
    if (rc)
      return rc;
    report(r);
  }
  return 0;
}

/* ---- the loop ---- */

/* Steps until *stop, max_steps or an error: 0 (also when stopped with a batch unsent)
 * or a negative code. */
static int run_loop(actor_run_t *r) {
  const sac_actor_cfg_t *cfg = r->cfg;
  int rc = 0;
  r->lap = sac_clock_ns();
  while (!stopping(r) && (cfg->max_steps <= 0 || r->steps < cfg->max_steps)) {
    if ((rc = take_new_weights(r)) != 0)
      return rc;
    lap(r, SAC_ACTOR_STAGE_WEIGHTS);
    if (r->run_over || (r->cap >= 0 && r->steps + r->E > r->cap)) { /* its share of the run is stepped */
      rc = wait_budget(r);
      lap(r, SAC_ACTOR_STAGE_SEND);
      if (rc == STOPPED_UNSENT)
        return 0;
      if (rc)
        return rc;
      continue;
    }
    act(r);
    lap(r, SAC_ACTOR_STAGE_ACT);
    if ((rc = step_envs(r)) != 0)
      return rc;
    lap(r, SAC_ACTOR_STAGE_STEP);
    rc = send_if_due(r);
    lap(r, SAC_ACTOR_STAGE_SEND);
    if (rc == STOPPED_UNSENT)
      return 0;
    if (rc)
      return rc;
    report(r);
    lap(r, SAC_ACTOR_STAGE_REPORT);
  }
  return 0;
}

/* ---- tear-down ---- */

/* The drain, once the loop ended (told to stop, or max_steps): no more steps; the batch
 * being built is sent, then the wait for the acknowledgements of everything sent, both
 * within one bound (drain_timeout_ms) that ends early when nothing is left
 * unacknowledged. What is still unacknowledged after it (a shard down, stalled, or
 * holding inserts back) is logged and counted: its fate is unknown (stored and the
 * acknowledgement lost, or never stored), and the next session does not resend it. */
static void drain(actor_run_t *r) {
  const sac_actor_cfg_t *cfg = r->cfg;
  int ms = cfg->drain_timeout_ms > 0 ? cfg->drain_timeout_ms : 0;
  uint64_t until = sac_clock_ns() + (uint64_t)ms * 1000000ull + 1;
  if (r->b.n > 0) {
    int n = r->b.n;
    int rc = send_batch(r, until);
    if (rc) {
      atomic_store(&r->st->rows_unsent_at_exit, (uint64_t)n);
      sac_log(cfg->quiet_drain ? SAC_LOG_INFO : SAC_LOG_WARN, "actor",
              "actor %u: last batch of %d rows not sent at exit (%s)", cfg->actor_id, n,
              rc == STOPPED_UNSENT ? "no room in the window within the drain" : sac_strerror(rc));
    }
  }
  uint64_t now = sac_clock_ns();
  int left = now >= until ? 0 : (int)((until - now) / 1000000ull);
  if (sac_replay_client_flush(r->client, left) != 0) {
    uint32_t n = sac_replay_client_unacked(r->client);
    atomic_store(&r->st->unacked_at_exit, n);
    sac_log(cfg->quiet_drain ? SAC_LOG_INFO : SAC_LOG_WARN, "actor",
            "actor %u: %u batch(es) unacknowledged at exit", cfg->actor_id, n);
  }
  client_stats_to(r->client, r->st);
}

static void close_run(actor_run_t *r, int rc) {
  if (rc)
    SAC_ERROR("actor", "actor %u stopped: %s", r->cfg->actor_id, sac_strerror(rc));
  for (int s = 0; s < SAC_ACTOR_STAGES; s++)
    atomic_store(&r->st->stage_ns[s], r->stage_ns[s]);
  sac_replay_client_destroy(&r->client);
  sac_ledger_close(&r->la.ledger);
  sac_weights_sub_destroy(&r->wsub);
  for (int e = 0; e < r->E; e++)
    sac_env_destroy(&r->envs[e]);
  free(r->envs), free(r->obs), free(r->a), free(r->scratch), free(r->ep_ret), free(r->ep_len);
  builder_free(&r->b);
  atomic_store(&r->st->running, 0);
}

int sac_actor_run(const sac_actor_cfg_t *cfg, atomic_int *stop, sac_actor_stats_t *st) {
  const int E = cfg->num_envs;
  actor_run_t r = {.cfg = cfg, .stop = stop, .st = st, .E = E, .la = {NULL, st}};
  r.envs = calloc((size_t)(E > 0 ? E : 1), sizeof *r.envs);
  if (E < 1 || cfg->n_shards < 1 || cfg->send_rows < 1 || !r.envs) {
    SAC_ERROR("actor", "actor %u: need num_envs >= 1, send_rows >= 1 and at least one shard", cfg->actor_id);
    free(r.envs);
    return SAC_ECONFIG;
  }
  atomic_store(&st->running, 1);
  int rc = open_envs(&r);
  if (rc == 0)
    rc = open_network(&r);
  if (rc == 0)
    rc = wait_first_weights(&r);
  if (rc == 0 && (rc = run_loop(&r)) == 0)
    drain(&r);
  close_run(&r, rc);
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

void sac_actor_request_stop(sac_actor_t *a) {
  if (a)
    atomic_store(&a->stop, 1);
}

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
