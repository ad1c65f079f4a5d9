/* The learner service (see service.h). One loop on the caller's thread, a round of named
 * stages (run_round: sample, stage, update, priorities, publish, checkpoint, evaluate,
 * report, and the data-parallel round), each timed into the result's per-stage profile;
 * the run's state is one struct (run_t), set up and torn down in named steps. In the
 * embedded default the shards and actors run on threads of this process and talk to it
 * over inproc:// sockets of one shared context; nothing in the loop knows the
 * difference. */
#include "learner/service.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "actor/actor.h"
#include "common/clock.h"
#include "common/env.h"
#include "common/error.h"
#include "common/log.h"
#include "common/net.h"
#include "common/weights.h"
#include "learner/checkpoint.h"
#include "learner/service_metrics.h"
#include "learner/train_local.h"
#include "replay/client.h"
#include "replay/server.h"

void sac_learner_cfg_default(sac_learner_cfg_t *c) {
  memset(c, 0, sizeof *c);
  strcpy(c->env, "Pendulum-v1");
  strcpy(c->backend, "cpu");
  strcpy(c->precision, "fp32");
  c->graphs = 1;
  c->device = SAC_DEVICE_AUTO;
  c->seed = 1;
  sac_hparams_default(&c->hp, 1, 1);
  c->total_steps = 20000;
  c->learning_starts = 1000;
  c->updates_per_step = 1;
  c->publish_every = 10;
  c->publish_interval_ms = 50;
  strcpy(c->weights_precision, "fp32");
  c->loss_guard = 1;
  c->eval_every = 5000;
  c->eval_episodes = 10;
  c->log_interval_s = 5;
  c->per_alpha = 0.6;
  c->per_beta = 0.4;
  strcpy(c->weights_endpoint, "inproc://sacfleet-weights");
  c->embedded_shards = 2;
  c->embedded_actors = 2;
  c->envs_per_actor = 1;
  c->buffer_capacity = 1000000;
  c->max_nonfinite_updates = 100;
  c->durability = SAC_REPLAY_DURABILITY_WAL;
  c->wal_sync_ms = 2;
  sac_dp_cfg_default(&c->dp);
}

/* An endpoint the learner connects to: tcp://HOST:PORT with a port it can connect to (a
 * port over 65535 was silently taken modulo 65536 by the resolver, issue 14), or ipc:// /
 * inproc:// with a name. 0 or SAC_ECONFIG (logged). */
static int check_connect_endpoint(const char *ep) {
  const char *why = NULL;
  if (!strncmp(ep, "ipc://", 6) || !strncmp(ep, "inproc://", 9)) {
    if (!strchr(ep, '/')[2])
      why = "no path or name after the transport";
  } else if (!strncmp(ep, "tcp://", 6)) {
    const char *colon = strrchr(ep + 6, ':');
    if (!colon || colon == ep + 6) {
      why = "expected tcp://HOST:PORT";
    } else {
      char *end = NULL;
      errno = 0;
      long port = colon[1] >= '0' && colon[1] <= '9' ? strtol(colon + 1, &end, 10) : -1;
      if (port < 1 || port > 65535 || errno || !end || *end)
        why = "the port must be a number from 1 to 65535";
      else if (colon - (ep + 6) == 1 && ep[6] == '*')
        why = "\"*\" is for binding; give the shard's host name or address";
    }
  } else {
    why = "the transport must be tcp://, ipc:// or inproc://";
  }
  if (!why)
    return 0;
  SAC_ERROR("learner", "bad --shards endpoint \"%s\": %s", ep, why);
  return SAC_ECONFIG;
}

int sac_learner_set_shards(sac_learner_cfg_t *c, const char *list) {
  int rc = sac_net_split_endpoints(list, "shard endpoint list", c->shard_sample_endpoints,
                                   SAC_LEARNER_MAX_SHARDS, &c->n_shards);
  for (size_t i = 0; rc == 0 && i < c->n_shards; i++)
    rc = check_connect_endpoint(c->shard_sample_endpoints[i]);
  if (rc)
    c->n_shards = 0;
  return rc;
}

/* The largest insert batch an embedded shard takes (the shard's default max_batch_rows):
 * a shard holds at least 4 of them. */
#define EMBEDDED_MAX_BATCH_ROWS 4096u

int sac_learner_check_cfg(const sac_learner_cfg_t *c, char *why, size_t cap) {
  char line[512];
  if (!why)
    why = line, cap = sizeof line;
  why[0] = '\0';
  if (c->n_shards) /* remote shards: their own configuration is theirs to check */
    return 0;
  const int S = c->embedded_shards > 0 ? c->embedded_shards : 1;
  int64_t per = c->buffer_capacity / S;
  int64_t need = 4 * (int64_t)EMBEDDED_MAX_BATCH_ROWS;
  if (c->hp.batch > need)
    need = c->hp.batch;
  if (per < need) {
    snprintf(why, cap,
             "--capacity %lld is too small for %d embedded shard(s): each shard holds capacity / "
             "embedded_shards = %lld transitions and needs at least %lld (4 x the %u-row batches the actors "
             "insert, and --batch_size %d): use --capacity %lld or more, or fewer --embedded_shards",
             (long long)c->buffer_capacity, S, (long long)per, (long long)need, EMBEDDED_MAX_BATCH_ROWS,
             c->hp.batch, (long long)need * S);
    SAC_ERROR("learner", "%s", why);
    return SAC_ECONFIG;
  }
  if (per >= (int64_t)UINT32_MAX) {
    snprintf(why, cap,
             "--capacity %lld gives each of the %d embedded shard(s) %lld transitions, over the 2^32 - 1 "
             "one shard holds: lower it or use more --embedded_shards",
             (long long)c->buffer_capacity, S, (long long)per);
    SAC_ERROR("learner", "%s", why);
    return SAC_ECONFIG;
  }
  if (c->learning_starts / S > per) {
    snprintf(why, cap,
             "--learning_starts %lld is more than the embedded shards can hold (--capacity %lld): no "
             "shard would ever serve a batch; lower --learning_starts or raise --capacity",
             (long long)c->learning_starts, (long long)c->buffer_capacity);
    SAC_ERROR("learner", "%s", why);
    return SAC_ECONFIG;
  }
  return 0;
}

/* Bytes of a SampleBatch of B rows of these sizes once encoded, plus room for the
 * envelope's variable fields; what the learner's replay client must accept and what an
 * embedded shard must be allowed to send. */
static size_t sample_reply_bytes(int B, int O, int A) {
  static const float f;
  static const uint64_t u;
  sac_wire_msg_t m = {.type = SAC_WIRE_SAMPLE_BATCH};
  m.u.sample_batch = (sac_wire_sample_batch_t){.request_id = UINT64_MAX,
                                               .n = (uint32_t)B,
                                               .obs_dim = (uint32_t)O,
                                               .act_dim = (uint32_t)A,
                                               .shard_id = SAC_WIRE_MAX_SHARDS - 1,
                                               .obs = &f, /* only the sizes are read */
                                               .action = &f,
                                               .reward = &f,
                                               .terminated = &f,
                                               .next_obs = &f,
                                               .indices = &u,
                                               .weights = &f,
                                               .error = ""};
  return sac_wire_encoded_size(&m) + 1024;
}

/* The replay client and embedded shards take messages up to this (and ZeroMQ twice it) */
#define MAX_SAMPLE_REPLY_BYTES ((size_t)1 << 30)
/* Sample replies up to this size are asked for SMALL_REPLY_PREFETCH at a time per shard,
 * and batches go four to a reply where four fit in it. */
#define SMALL_REPLY_BYTES ((size_t)256 << 10)
#define SMALL_REPLY_PREFETCH 8u
#define SMALL_REPLY_BATCHES 4u

/* Batches per sample request: the configured number, or SMALL_REPLY_BATCHES where that
 * many replies of `reply` bytes take at most SMALL_REPLY_BYTES, else 1. Four batches a
 * reply took the CPU per update of sac-bench-service over loopback TCP (2 shards,
 * uniform, cheetah sizes) from 138 to 71 us: most of a reply's cost over TCP is per
 * message, not per byte (docs/SCALING.md). */
static uint32_t batches_per_request(const sac_learner_cfg_t *c, size_t reply) {
  if (c->batches_per_request > 0)
    return (uint32_t)c->batches_per_request;
  return reply * SMALL_REPLY_BATCHES <= SMALL_REPLY_BYTES ? SMALL_REPLY_BATCHES : 1u;
}

/* How long an embedded actor may drain when the run ends (its last batch sent, its
 * acknowledgements awaited): the drains run in parallel, so a stop (Ctrl-C) takes about
 * this long whatever the number of actors. What is left is counted (the shards hold it
 * back once the learner no longer samples, and they stop with the run). */
#define EMBEDDED_DRAIN_MS 1000

/* The in-process shards and actors of the embedded default. */
typedef struct {
  size_t n_shards, n_actors;
  sac_replay_server_t *shards[SAC_LEARNER_MAX_SHARDS];
  sac_actor_t **actors;
} embedded_t;

/* GET /provenance?shard=<i> on the learner's metrics port: the provenance of embedded
 * shard i (docs/REPLAY.md), rendered by that shard's thread. The route outlives a run's
 * shards, so it reaches them through this registry, emptied before they go. */
static pthread_mutex_t g_prov_mu = PTHREAD_MUTEX_INITIALIZER;
static embedded_t *g_prov_em;

static int render_provenance(void *user, const char *query, size_t qlen, char **text, size_t *len) {
  (void)user;
  unsigned long shard = 0;
  if (qlen > 6 && strncmp(query, "shard=", 6) == 0)
    shard = strtoul(query + 6, NULL, 10);
  pthread_mutex_lock(&g_prov_mu);
  int rc = SAC_ESTATE;
  if (g_prov_em && shard < g_prov_em->n_shards)
    rc = sac_replay_server_provenance(g_prov_em->shards[shard], 5000, text, len);
  pthread_mutex_unlock(&g_prov_mu);
  return rc;
}

/* Tells every embedded actor to stop (each then drains on its own thread, all at once,
 * each within EMBEDDED_DRAIN_MS); embedded_stop joins them. */
static void embedded_request_stop(embedded_t *em) {
  for (size_t i = 0; em->actors && i < em->n_actors; i++)
    sac_actor_request_stop(em->actors[i]);
}

static void embedded_stop(embedded_t *em) {
  pthread_mutex_lock(&g_prov_mu);
  if (g_prov_em == em)
    g_prov_em = NULL;
  pthread_mutex_unlock(&g_prov_mu);
  embedded_request_stop(em); /* all at once: the drains run in parallel */
  for (size_t i = 0; em->actors && i < em->n_actors; i++)
    sac_actor_stop(&em->actors[i]);
  free(em->actors);
  em->actors = NULL;
  for (size_t i = 0; i < em->n_shards; i++)
    sac_replay_server_destroy(&em->shards[i]);
}

/* A resumed run's shard takes the replay its snapshot holds. Sized to the run, it may be
 * smaller than the snapshot's (a shorter budget, a smaller --capacity) or larger: a larger
 * shard takes a ring that never wrapped, but one that wrapped (the actors' batches go
 * round-robin by batch, not by row, so a shard can get more than its share) only at its
 * own capacity. Any other trouble with the file is the shard's to report when it loads it. */
static void fit_to_snapshot(sac_replay_shard_config_t *sh, const char *path) {
  uint64_t cap = 0;
  int wrapped = 0;
  if (sac_replay_shard_resume_capacity(path, sh->capacity, &cap, &wrapped) != 0 || cap == sh->capacity)
    return;
  if (wrapped)
    SAC_INFO("learner",
             "shard %u: the replay in %s filled its %llu slots and wrapped; the shard keeps that capacity "
             "(sized to this run it would have %llu)",
             sh->shard_id, path, (unsigned long long)cap, (unsigned long long)sh->capacity);
  sh->capacity = cap;
  if (sh->max_batch_rows > sh->capacity / 4)
    sh->max_batch_rows = (uint32_t)(sh->capacity / 4);
  if (sh->min_size > sh->capacity)
    sh->min_size = sh->capacity;
}

/* Embedded shard i's configuration, sized to the run. 0, or SAC_ECONFIG when the run
 * directory's path leaves no room for the shard's snapshot path (logged). */
static int embedded_shard_config(const sac_learner_cfg_t *c, const sac_env_spec_t *sp,
                                 const sac_actor_cfg_t *acp, int i, sac_replay_server_config_t *scp) {
  const int S = c->embedded_shards, N = c->embedded_actors;
  sac_replay_server_config_t sc;
  sac_replay_server_config_default(&sc);
  sc.shard.shard_id = (uint32_t)i;
  /* Sized to the run (issue 17): never more slots than the run can fill. The shards
   * share total_steps transitions; the actors' batches go round-robin over them, so a
   * shard may get up to one batch per actor more than its share, and each batch may
   * take one extra slot per environment (the obs-only tail of each environment's run
   * of rows, replay/shard.h). Unused slots cost no memory (calloc'ed pages stay
   * untouched), but the budget is also what a resumed run's larger replay may grow
   * from (replay/shard.c). A batch may not exceed a quarter of a shard. */
  uint64_t E = (uint64_t)c->envs_per_actor, rows = (uint64_t)acp->send_rows + 2 * E;
  uint64_t share = (uint64_t)(c->total_steps / S + (i < c->total_steps % S)) + (uint64_t)N * rows;
  uint64_t need = share + (share * E + (uint64_t)acp->send_rows - 1) / (uint64_t)acp->send_rows;
  uint64_t cap = (uint64_t)(c->buffer_capacity / S > 1 ? c->buffer_capacity / S : 1);
  cap = cap < need ? cap : need;
  sc.shard.capacity = cap > 4 * rows ? cap : 4 * rows;
  if (sc.shard.max_batch_rows > sc.shard.capacity / 4)
    sc.shard.max_batch_rows = (uint32_t)(sc.shard.capacity / 4);
  sc.shard.obs_dim = (uint32_t)sp->obs_dim;
  sc.shard.act_dim = (uint32_t)sp->act_dim;
  sc.shard.sampler = c->prioritized ? SAC_REPLAY_PRIORITIZED : SAC_REPLAY_UNIFORM;
  sc.shard.alpha = c->per_alpha;
  /* the learner asks for batches of hp.batch rows: no larger sample has to fit a message */
  size_t reply = sample_reply_bytes(c->hp.batch, sp->obs_dim, sp->act_dim);
  const uint32_t per_request = batches_per_request(c, reply);
  sc.shard.max_sample_batch = (uint32_t)c->hp.batch * per_request;
  uint64_t min_size = (uint64_t)(c->learning_starts / S);
  sc.shard.min_size = min_size > (uint64_t)c->hp.batch ? min_size : (uint64_t)c->hp.batch;
  /* a run shorter than learning_starts sizes its shards below it: it never updates, and
   * its shards must still start (a shard refuses min_size > capacity) */
  if (sc.shard.min_size > sc.shard.capacity)
    sc.shard.min_size = sc.shard.capacity;
  /* every update samples one batch from one shard: per shard, B * UTD samples per insert */
  sc.shard.samples_per_insert = (double)c->hp.batch * c->updates_per_step;
  sc.shard.seed = c->seed * 1000 + (uint64_t)i;
  /* a shard must serve batch_size rows in one message (issue 14: a batch over the
   * defaults was refused by every shard, or never sent, and the learner waited forever) */
  if (sc.shard.max_sample_batch < (uint32_t)c->hp.batch)
    sc.shard.max_sample_batch = (uint32_t)c->hp.batch;
  reply *= per_request;
  if (sc.max_msg_bytes < reply)
    sc.max_msg_bytes = reply;
  if (sc.max_held_bytes < sc.max_msg_bytes)
    sc.max_held_bytes = sc.max_msg_bytes;
  sc.durability = c->durability;
  if (!c->rundir && sc.durability != SAC_REPLAY_DURABILITY_NONE) {
    /* no run directory (only a library caller: sac-learner always has one where it
     * embeds shards): no place for the shards' files. A durable mode is never dropped
     * to none behind the caller's back. */
    SAC_ERROR("learner",
              "embedded shards with durability %s need a run directory for their snapshots and logs; give "
              "one, or choose durability none (memory only) explicitly",
              sac_replay_durability_name(sc.durability));
    return SAC_ECONFIG;
  }
  sc.wal_sync_ms = c->wal_sync_ms;
  snprintf(sc.insert_endpoint, sizeof sc.insert_endpoint, "inproc://sacfleet-shard-%d-insert", i);
  snprintf(sc.sample_endpoint, sizeof sc.sample_endpoint, "inproc://sacfleet-shard-%d-sample", i);
  if (c->rundir) { /* the replay is part of the run: a resumed run restores it */
    int len =
        snprintf(sc.snapshot_path, sizeof sc.snapshot_path, "%.1000s/shard-%d.snap", c->rundir->path, i);
    if (len < 0 || (size_t)len >= sizeof sc.snapshot_path) {
      SAC_ERROR("learner", "run directory path too long for shard snapshots: %s", c->rundir->path);
      return SAC_ECONFIG;
    }
    fit_to_snapshot(&sc.shard, sc.snapshot_path);
  }
  *scp = sc;
  return 0;
}

static int embedded_start(const sac_learner_cfg_t *c, const sac_env_spec_t *sp, sac_net_ctx_t *ctx,
                          embedded_t *em, char (*sample_eps)[256], int64_t steps_done) {
  memset(em, 0, sizeof *em);
  const int S = c->embedded_shards, N = c->embedded_actors;
  if (S < 1 || S > SAC_LEARNER_MAX_SHARDS || N < 1) {
    SAC_ERROR("learner", "embedded: need 1..%d shards and at least one actor", SAC_LEARNER_MAX_SHARDS);
    return SAC_ECONFIG;
  }
  sac_actor_cfg_t ac;
  sac_actor_cfg_default(&ac);
  for (int i = 0; i < S; i++) {
    sac_replay_server_config_t sc;
    if (embedded_shard_config(c, sp, &ac, i, &sc) != 0) {
      embedded_stop(em);
      return SAC_ECONFIG;
    }
    int err = 0;
    em->shards[i] = sac_replay_server_new(&sc, ctx, &err);
    if (!em->shards[i] || sac_replay_server_start(em->shards[i]) != 0) {
      embedded_stop(em);
      return err ? err : SAC_ENOMEM;
    }
    em->n_shards++;
    snprintf(sample_eps[i], 256, "%s", sac_replay_server_sample_endpoint(em->shards[i]));
    snprintf(ac.shard_endpoints[i], sizeof ac.shard_endpoints[i], "%s",
             sac_replay_server_insert_endpoint(em->shards[i]));
  }
  ac.n_shards = (size_t)S;
  snprintf(ac.env, sizeof ac.env, "%s", c->env);
  snprintf(ac.weights_endpoint, sizeof ac.weights_endpoint, "%s", c->weights_endpoint);
  ac.ctx = ctx;
  ac.seed = c->seed;
  ac.num_envs = c->envs_per_actor;
  ac.learning_starts = steps_done > 0 ? 0 : c->learning_starts / N;
  int64_t left = c->total_steps - steps_done;
  ac.max_steps = left > 0 ? (left + N - 1) / N : 1; /* the step budget, split exactly */
  ac.log_std_min = c->hp.log_std_min;
  ac.log_std_max = c->hp.log_std_max;
  ac.log_interval_s = 0;
  ac.quiet_drain = 1; /* the run is over when they stop, and the shards stop with it */
  ac.drain_timeout_ms = EMBEDDED_DRAIN_MS;
  em->actors = calloc((size_t)N, sizeof *em->actors);
  if (!em->actors) {
    embedded_stop(em);
    return SAC_ENOMEM;
  }
  for (int i = 0; i < N; i++) {
    ac.actor_id = (uint32_t)i;
    int rc = sac_actor_start(&ac, &em->actors[i]);
    if (rc) {
      embedded_stop(em);
      return rc;
    }
    em->n_actors++;
  }
  SAC_INFO("learner", "embedded: %d shard(s), %d actor(s) x %d env(s) over inproc://", S, N,
           c->envs_per_actor);
  pthread_mutex_lock(&g_prov_mu);
  g_prov_em = em;
  pthread_mutex_unlock(&g_prov_mu);
  if (c->http && sac_http_add_route(c->http, "/provenance", render_provenance, NULL) == SAC_ENOMEM)
    SAC_WARN("learner", "no /provenance route (out of memory)");
  return 0;
}

/* What the learner keeps of each shard's ShardInfo (asked for every INFO_REFRESH_MS,
 * never waited for: a stopped or unreachable shard must not slow the update loop; its last
 * figures count until it answers again): the newest reply, the episodes and returns of
 * its earlier incarnations (a restarted shard counts its episodes from 0 again), and its
 * inserted total when the current wait for batches began. */
#define INFO_REFRESH_MS 20
typedef struct {
  int have;
  sac_wire_shard_info_t info;
  uint64_t ep_base;
  double ret_base;
  uint64_t inserted_at_wait;
} shard_view_t;

/* The run's progress from the shards: environment steps stored (the sum of their
 * inserted totals, never going down; the last figure until every shard has answered),
 * and the episodes that ended in the batches they stored, with the sum of their returns
 * (each batch is stored by one shard once: no episode counted twice). */
typedef struct {
  int64_t steps;
  uint64_t episodes;
  double return_sum;
} shard_totals_t;

static void read_shards(sac_replay_client_t *client, size_t n_shards, shard_view_t *v, shard_totals_t *t) {
  int64_t sum = 0;
  int all = 1;
  t->episodes = 0;
  t->return_sum = 0;
  for (size_t i = 0; i < n_shards; i++) {
    sac_wire_shard_info_t info;
    if (sac_replay_client_info_cached(client, i, INFO_REFRESH_MS, &info, NULL) == 0) {
      if (v[i].have && info.incarnation != v[i].info.incarnation) { /* restarted: its counts start over */
        v[i].ep_base += v[i].info.episodes_total;
        v[i].ret_base += v[i].info.episode_return_sum;
        SAC_INFO("learner", "shard %u restarted: it holds %llu transitions (%llu stored in all; %llu before)",
                 info.shard_id, (unsigned long long)info.size, (unsigned long long)info.inserted_total,
                 (unsigned long long)v[i].info.inserted_total);
      }
      v[i].info = info;
      v[i].have = 1;
    }
    all &= v[i].have;
    sum += (int64_t)v[i].info.inserted_total;
    t->episodes += v[i].ep_base + v[i].info.episodes_total;
    t->return_sum += v[i].ret_base + v[i].info.episode_return_sum;
  }
  if (all && sum > t->steps)
    t->steps = sum;
}

/* Transitions held by the shards: the sum of their sizes from the newest ShardInfo each
 * has sent (as stored_steps, never waited for); NaN until every shard has answered. */
static double replay_size(sac_replay_client_t *client, size_t n_shards) {
  double sum = 0;
  for (size_t i = 0; i < n_shards; i++) {
    sac_wire_shard_info_t info;
    if (sac_replay_client_info_cached(client, i, INFO_REFRESH_MS, &info, NULL) != 0)
      return NAN;
    sum += (double)info.size;
  }
  return sum;
}

/* Mean recent episode return over the embedded actors; NaN when there are none (remote
 * actors report their own). */
static double actors_mean_return(const embedded_t *em) {
  double ret = NAN;
  for (size_t i = 0; i < em->n_actors; i++)
    ret = isnan(ret) ? atomic_load(&sac_actor_stats(em->actors[i])->mean_return)
                     : ret + atomic_load(&sac_actor_stats(em->actors[i])->mean_return);
  return em->n_actors ? ret / (double)em->n_actors : ret;
}

/* The TensorBoard scalars between evaluations (learner/rundir.h), every TB_PERIOD_S. */
#define TB_PERIOD_S 2.0
typedef struct {
  double t;
  int64_t steps, updates;
} tb_mark_t;
static void report_tensorboard(const sac_learner_cfg_t *cfg, sac_t *sac, double episode_return,
                               sac_replay_client_t *client, size_t n_shards, int64_t steps, int64_t updates,
                               tb_mark_t *last) {
  double now = sac_clock_s(), dt = now - last->t;
  sac_rundir_train_t t = {.episode_return = episode_return,
                          .updates_per_s = (double)(updates - last->updates) / dt,
                          .env_steps_per_s = (double)(steps - last->steps) / dt,
                          .replay_size = replay_size(client, n_shards),
                          .have_stats = updates > 0};
  if (t.have_stats)
    sac_stats(sac, &t.st);
  sac_rundir_add_train(cfg->rundir, steps, &t);
  *last = (tb_mark_t){now, steps, updates};
}

/* Evaluates the current policy (copied into `actor`), keeps the final and best return
 * and adds the point (with the training return and episodes so far) to the run
 * directory. 0 or a negative code. */
static int evaluate_point(const sac_learner_cfg_t *cfg, sac_t *sac, const sac_hparams_t *hp, float *actor,
                          double wall_s, int64_t steps, double train_return, int64_t episodes,
                          sac_learner_result_t *res, sac_stats_t *st, double *ret) {
  sac_eval_stats_t ev;
  int rc = sac_get_actor(sac, actor);
  if (rc == 0)
    rc = sac_evaluate_policy(cfg->env, cfg->seed, sac_actor_desc(sac), actor, hp->log_std_min,
                             hp->log_std_max, cfg->eval_episodes, NULL, &ev);
  if (rc)
    return rc;
  *ret = ev.mean;
  res->final_eval_return = *ret;
  if (*ret > res->best_eval_return)
    res->best_eval_return = *ret;
  if (res->updates > 0)
    sac_stats(sac, st);
  sac_rundir_point_t p = {wall_s, steps, res->updates, ev, train_return, episodes, *st};
  if (cfg->rundir)
    sac_rundir_add_eval(cfg->rundir, &p);
  return 0;
}

/* ---- data-parallel learners (learner/dp.h, docs/LEARNER.md) ---- */

/* The fields every rank must agree on, as dp.h's canonical "key = value" lines. */
static int dp_canon(const sac_learner_cfg_t *c, const sac_hparams_t *hp, char *b, size_t cap) {
  int rc = 0;
  b[0] = '\0';
#define F(key, fmt, val) rc = rc ? rc : sac_dp_describe(b, cap, key, fmt, val)
  F("env", "%s", c->env);
  F("backend", "%s", c->backend);
  F("precision", "%s", c->precision);
  F("obs_dim", "%d", hp->obs_dim);
  F("act_dim", "%d", hp->act_dim);
  F("hidden", "%d", hp->hidden);
  F("depth", "%d", hp->depth);
  F("batch_size", "%d", hp->batch);
  F("gamma", "%.9g", hp->gamma);
  F("tau", "%.9g", hp->tau);
  F("lr_actor", "%.9g", hp->lr_actor);
  F("lr_critic", "%.9g", hp->lr_critic);
  F("lr_alpha", "%.9g", hp->lr_alpha);
  F("init_alpha", "%.9g", hp->init_alpha);
  F("autotune_alpha", "%d", hp->autotune_alpha);
  F("target_entropy", "%.9g", hp->target_entropy);
  F("log_std_min", "%.9g", hp->log_std_min);
  F("log_std_max", "%.9g", hp->log_std_max);
  F("policy_delay", "%d", hp->policy_delay);
  F("recompute", "%d", hp->recompute);
  F("seed", "%llu", (unsigned long long)c->seed);
  F("updates_per_step", "%d", c->updates_per_step);
  F("total_steps", "%lld", (long long)c->total_steps);
  F("prioritized", "%d", c->prioritized);
  F("per_beta", "%.9g", c->per_beta);
  F("checkpoint_every", "%lld", (long long)c->checkpoint_every);
#undef F
  return rc;
}

/* Joins the other ranks, agrees on the configuration, takes rank 0's state (and run
 * counters: rank 0 may have resumed from its checkpoint) and sets the gradient hook. */
static int dp_start(const sac_learner_cfg_t *cfg, sac_net_ctx_t *ctx, const sac_hparams_t *hp,
                    sac_backend_t *be, sac_t *sac, sac_ckpt_counters_t *ck, sac_dp_t **dp) {
  if (cfg->n_shards == 0) {
    SAC_ERROR("learner",
              "data-parallel learners (dp_size %d) need remote replay shards (--shards): the embedded "
              "default hosts its own",
              cfg->dp.size);
    return SAC_ECONFIG;
  }
  char *conf = malloc(8192), why[1024];
  if (!conf)
    return SAC_ENOMEM;
  int rc = dp_canon(cfg, hp, conf, 8192);
  sac_dp_cfg_t dc = cfg->dp;
  dc.ctx = ctx;
  if (rc == 0)
    rc = sac_dp_new(&dc, conf, be, dp, why, sizeof why);
  free(conf);
  if (rc == 0 && (rc = sac_dp_sync_state(*dp, sac, ck, sizeof *ck)) == 0)
    rc = sac_dp_attach(*dp, sac);
  return rc;
}

/* 1 when every one of the n weights is finite: the learner never publishes others. */
static int all_finite(const float *w, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!isfinite(w[i]))
      return 0;
  return 1;
}

/* Brings the weights port's counters to the publisher's (the registry may outlive it). */
static void weights_port_metrics(sac_service_metrics_t *sm, const sac_weights_pub_t *pub) {
  if (!sm->r || !pub)
    return;
  uint64_t ign = sac_weights_pub_ignored_subscriptions(pub), ren = sac_weights_pub_renewals(pub);
  uint64_t sent = sac_weights_pub_sent(pub);
  sac_metric_add(sm->weights_ignored, (double)(ign - sm->weights_ignored_seen));
  sac_metric_add(sm->weights_renewals, (double)(ren - sm->weights_renewals_seen));
  sac_metric_add(sm->weights_sent, (double)(sent - sm->weights_sent_seen));
  sm->weights_ignored_seen = ign;
  sm->weights_renewals_seen = ren;
  sm->weights_sent_seen = sent;
}

/* Sends `actor` as `version` (when there is a publisher) and brings the port's counters
 * up to date. An error means the port is gone (a failed renewal, common/weights.c):
 * actors would go on with stale weights for good, so the caller stops instead. */
static int publish(sac_weights_pub_t *pub, const float *actor, uint64_t version, sac_service_metrics_t *sm) {
  int rc = pub ? sac_weights_publish(pub, version, actor) : 0;
  if (rc) {
    SAC_ERROR("learner", "cannot publish the weights of update %llu: %s", (unsigned long long)version,
              sac_strerror(rc));
    return rc;
  }
  weights_port_metrics(sm, pub);
  return 0;
}

/* Copies the actor's weights into `actor` and publishes them as `version`, unless one is
 * not finite: then nothing is sent, the broadcast is counted as withheld and the learner
 * must stop (SAC_ENONFINITE, logged). */
static int publish_checked(sac_weights_pub_t *pub, sac_t *sac, float *actor, uint64_t version,
                           sac_service_metrics_t *sm) {
  int rc = sac_get_actor(sac, actor);
  if (rc)
    return rc;
  if (!all_finite(actor, sac_actor_param_count(sac))) {
    if (sm->r)
      sac_metric_inc(sm->unpublished);
    SAC_ERROR("learner", "the actor's weights are not finite at update %llu: not publishing them",
              (unsigned long long)version);
    return SAC_ENONFINITE;
  }
  return publish(pub, actor, version, sm);
}

/* Non-finite losses (issue 14): each refused update is counted; the first is logged at
 * once, later ones in one line every 10 s; max in a row stop the learner. */
typedef struct {
  int64_t total, in_a_row, unlogged;
  double last_log;
} nonfinite_t;

static int nonfinite_update(nonfinite_t *nf, const sac_learner_cfg_t *cfg, sac_service_metrics_t *sm,
                            int64_t updates, int applied) {
  nf->total++;
  nf->in_a_row++;
  if (sm->r)
    sac_metric_inc(sm->nonfinite);
  double now = sac_clock_s();
  if (nf->total == 1 || now - nf->last_log >= 10.0) {
    SAC_WARN(
        "learner",
        "non-finite loss after %lld updates: %s (%lld such updates in all, %lld in a row; the learner stops "
        "at %d in a row, --max_nonfinite_updates)",
        (long long)updates,
        applied ? "detected after the step (data-parallel or --loss_guard false)" : "step not applied",
        (long long)nf->total, (long long)nf->in_a_row, cfg->max_nonfinite_updates);
    nf->last_log = now;
    nf->unlogged = 0;
  } else {
    nf->unlogged++;
  }
  if (nf->in_a_row < cfg->max_nonfinite_updates)
    return 0;
  SAC_ERROR(
      "learner",
      "%lld updates in a row had a non-finite loss (--max_nonfinite_updates %d): the replay holds values the "
      "networks cannot learn from (check the shards' value range and the environment's rewards)",
      (long long)nf->in_a_row, cfg->max_nonfinite_updates);
  return SAC_ENONFINITE;
}

/* PER priorities one update late (docs/LEARNER.md): update N's |td| is fetched into slot
 * N & 1 and read once update N + 1 is enqueued, so the learner never waits for the update
 * it just enqueued (a GPU keeps one update queued ahead); and sent in batches: the |td|
 * of k updates (PRIO_SEND_UPDATES, fewer where their rows would pass PRIO_SEND_ROWS; at
 * least one) go to the shards as one message per shard, so the sends cost once in k
 * updates. A priority reaches its shard at most k + 1 updates after the update that
 * computed it (5 at batch 256); the flush at the end of the run sends the rest. */
#define PRIO_SEND_UPDATES 4u
#define PRIO_SEND_ROWS 1024u
typedef struct {
  uint64_t *idx[2];
  int pending[2];
  int cur;
  /* collected and not yet sent: n of cap rows (cap = B * k) */
  uint64_t *acc_idx;
  float *acc_prio;
  size_t n, cap;
} prio_lag_t;

/* The collected priorities to the shards. */
static void prio_send(prio_lag_t *p, sac_replay_client_t *client) {
  if (p->n)
    sac_replay_client_update_priorities(client, p->n, p->acc_idx, p->acc_prio);
  p->n = 0;
}

/* Slot o's |td| (update N's, with its indices) joins the collected ones; sent when full. */
static int prio_collect(prio_lag_t *p, sac_t *sac, sac_replay_client_t *client, size_t B, int o) {
  if (!p->acc_idx) { /* first use: k whole updates */
    size_t k = PRIO_SEND_ROWS / B > 1 ? PRIO_SEND_ROWS / B : 1;
    k = k < PRIO_SEND_UPDATES ? k : PRIO_SEND_UPDATES;
    p->cap = k * B;
    p->acc_idx = malloc(p->cap * sizeof *p->acc_idx);
    p->acc_prio = malloc(p->cap * sizeof *p->acc_prio);
    if (!p->acc_idx || !p->acc_prio)
      return SAC_ENOMEM;
  }
  int rc = sac_td_errors_collect(sac, o, p->acc_prio + p->n);
  if (rc)
    return rc;
  memcpy(p->acc_idx + p->n, p->idx[o], B * sizeof(uint64_t));
  p->n += B;
  p->pending[o] = 0;
  if (p->n + B > p->cap)
    prio_send(p, client);
  return 0;
}

static int prio_lag_push(prio_lag_t *p, sac_t *sac, sac_replay_client_t *client, size_t B,
                         const uint64_t *indices) {
  int rc, c = p->cur, o = c ^ 1;
  if (!p->idx[c] && !(p->idx[c] = malloc(B * sizeof(uint64_t))))
    return SAC_ENOMEM;
  if ((rc = sac_td_errors_fetch(sac, c)) != 0)
    return rc;
  memcpy(p->idx[c], indices, B * sizeof(uint64_t));
  p->pending[c] = 1;
  if (p->pending[o] && (rc = prio_collect(p, sac, client, B, o)) != 0)
    return rc;
  p->cur = o;
  return 0;
}

/* Sends what is still pending (the last update's, and those collected), oldest first. */
static int prio_lag_flush(prio_lag_t *p, sac_t *sac, sac_replay_client_t *client, size_t B) {
  for (int k = 0; k < 2; k++) {
    int i = p->cur ^ k ^ 1; /* the slot pushed first */
    int rc;
    if (p->pending[i] && (rc = prio_collect(p, sac, client, B, i)) != 0)
      return rc;
  }
  prio_send(p, client);
  return 0;
}

static int dp_follower(const sac_dp_t *dp) { return dp && sac_dp_rank(dp) > 0; }

/* Every rank's whole learner state equals rank 0's (logged by rank 0); SAC_ESTATE if not. */
static int dp_check(sac_dp_t *dp, sac_t *sac, int64_t updates) {
  int same = 0, rc = sac_dp_check_identical(dp, sac, &same);
  if (rc)
    return rc;
  if (!same) {
    SAC_ERROR("learner", "data-parallel: the learner state differs between ranks after %lld updates",
              (long long)updates);
    sac_dp_abort(dp, "the learner state differs between ranks");
    return SAC_ESTATE;
  }
  if (sac_dp_rank(dp) == 0)
    SAC_INFO("learner", "data-parallel: learner state bit-identical on all %d ranks after %lld updates",
             sac_dp_size(dp), (long long)updates);
  return 0;
}

/* ---- waits for batches, made visible ---- */

const char *sac_learner_wait_name(sac_learner_wait_t w) {
  static const char *const names[] = {"none", "shard_unreachable", "min_size", "rate_limiter", "no_reply"};
  _Static_assert(sizeof names / sizeof names[0] == SAC_LEARNER_WAIT_KINDS, "wait names");
  return (unsigned)w < SAC_LEARNER_WAIT_KINDS ? names[w] : "unknown";
}

/* A stretch of rounds without a batch: since when (0: the learner samples), what it
 * waits for as last told apart, whether it was logged, and when it is said next. A wait
 * is logged once it has lasted WAIT_LOG_S (a WARN when nothing moves: no shard
 * reachable, or no insert since it began; an INFO while the shards fill up), again every
 * WAIT_REPEAT_S while it lasts, and its end when it was logged. */
#define WAIT_LOG_S 5.0
#define WAIT_REPEAT_S 30.0
typedef struct {
  double t0, next_log;
  int logged, stalled;
  sac_learner_wait_t kind;
  char why[640];
} wait_t;

/* What /healthz answers while a run goes on (learner_health): not ready, with the reason,
 * while the learner is stalled (a WARN-level wait); the HTTP thread reads it. */
typedef struct {
  pthread_mutex_t mu;
  int inited, stalled;
  char why[640];
} health_t;

static int learner_health(void *ud, char *why, size_t cap) {
  health_t *h = ud;
  pthread_mutex_lock(&h->mu);
  int ok = !h->stalled;
  snprintf(why, cap, "%s", ok ? "ok" : h->why);
  pthread_mutex_unlock(&h->mu);
  return ok;
}

static void health_set(health_t *h, int stalled, const char *why) {
  if (!h->inited)
    return;
  pthread_mutex_lock(&h->mu);
  h->stalled = stalled;
  snprintf(h->why, sizeof h->why, "not ready: %.600s", why);
  pthread_mutex_unlock(&h->mu);
}

/* Tells what the learner waits for, from the replay client's view of each shard and the
 * shards' last ShardInfo, into why (the endpoint, the figures and the likely fix);
 * *stalled: nothing moves (no shard reachable, or no insert since the wait began). */
static sac_learner_wait_t classify_wait(sac_replay_client_t *client, size_t n, const shard_view_t *v,
                                        double waited, char *why, size_t cap, int *stalled) {
  size_t unreachable = 0, first_down = n, silent = n, below = n, limited = n;
  uint64_t moved = 0;
  for (size_t i = 0; i < n; i++) {
    sac_replay_shard_state_t ss;
    if (sac_replay_client_shard_state(client, i, &ss) == 0 && !ss.connected) {
      unreachable++;
      first_down = first_down == n ? i : first_down;
      continue;
    }
    if (!v[i].have) {
      silent = silent == n ? i : silent;
      continue;
    }
    moved += v[i].info.inserted_total - v[i].inserted_at_wait;
    if (v[i].info.size < v[i].info.min_size)
      below = below == n ? i : below;
    else if (!v[i].info.can_sample)
      limited = limited == n ? i : limited;
  }
  sac_replay_shard_state_t ss = {0};
  *stalled = 1;
  if (unreachable == n) {
    sac_replay_client_shard_state(client, first_down, &ss);
    snprintf(why, cap,
             "no shard reachable (%s%s for %.0f s): is sac-replay running there, and does --shards list the "
             "shards' sample endpoints?",
             ss.endpoint, n > 1 ? " and the others" : "", ss.down_s);
    return SAC_LEARNER_WAIT_UNREACHABLE;
  }
  if (silent < n && below == n && limited == n) {
    sac_replay_client_shard_state(client, silent, &ss);
    snprintf(
        why, cap,
        "shard %s is connected but has answered nothing for %.0f s: is it stopped, or overloaded (see its "
        "log)?",
        ss.endpoint, waited);
    return SAC_LEARNER_WAIT_NO_REPLY;
  }
  *stalled = moved == 0;
  const char *actors = moved ? ""
                             : ": no transition arrived since; are the actors running, with these shards' "
                               "insert endpoints in their --shards? (their logs say what they wait for)";
  if (below < n) {
    sac_replay_client_shard_state(client, below, &ss);
    snprintf(why, cap,
             "min_size: shard %s holds %llu of the %llu transitions it needs before serving samples "
             "(%llu inserted in %.0f s)%s",
             ss.endpoint, (unsigned long long)v[below].info.size, (unsigned long long)v[below].info.min_size,
             (unsigned long long)moved, waited, actors);
    return SAC_LEARNER_WAIT_MIN_SIZE;
  }
  size_t i = limited < n ? limited : 0;
  sac_replay_client_shard_state(client, i, &ss);
  snprintf(
      why, cap,
      "rate limiter: shard %s holds sampling back until more transitions arrive (its samples_per_insert; "
      "%llu inserted in %.0f s)%s",
      ss.endpoint, (unsigned long long)moved, waited,
      moved ? ": the actors insert more slowly than the learner samples" : actors);
  return SAC_LEARNER_WAIT_RATE_LIMIT;
}

/* ---- the run: its state, set-up steps, stages and tear-down ---- */

const char *sac_learner_stage_name(sac_learner_stage_t s) {
  static const char *const names[] = {"sample",   "stage",      "update", "priorities", "publish",
                                      "evaluate", "checkpoint", "report", "dp_round"};
  _Static_assert(sizeof names / sizeof names[0] == SAC_LEARNER_STAGES, "stage names");
  return (unsigned)s < SAC_LEARNER_STAGES ? names[s] : "unknown";
}

/* Everything one run holds: what it owns (released by run_close), what set-up fixed,
 * and where the loop stands. */
typedef struct {
  const sac_learner_cfg_t *cfg;
  atomic_int *stop;
  sac_learner_result_t *res;
  /* owned */
  sac_env_t *probe; /* for the dimensions */
  sac_net_ctx_t *ctx;
  sac_backend_t *be;
  sac_t *sac;
  sac_weights_pub_t *pub; /* NULL on data-parallel ranks other than 0 */
  sac_replay_client_t *client;
  sac_dp_t *dp; /* data-parallel (cfg->dp.size > 1) */
  embedded_t em;
  sac_service_metrics_t sm;
  float *actor;            /* actor: (P) the weights last copied out of the learner */
  uint64_t *dp_idx;        /* dp_idx: (B) the held batch's indices (data-parallel, prioritised) */
  char (*sample_eps)[256]; /* (n_shards) the sample endpoints */
  prio_lag_t lag;
  /* fixed by set-up */
  sac_hparams_t hp;
  size_t n_shards, reply_bytes;
  int guard;              /* a non-finite loss refuses the step (eager path, no gradient hook) */
  int direct;             /* the backend takes batches in place (sac_batch_slots) */
  int tty;                /* progress as one line redrawn in place */
  sac_ckpt_counters_t ck; /* where a resumed run starts */
  char bound[256], ckpt_path[1100];
  /* the loop */
  sac_replay_batch_t b; /* this round's sample */
  int dp_stopped;       /* the ranks agreed to stop */
  int dp_held;          /* the backend holds a batch that waits for the other ranks' */
  int tty_dirty;
  nonfinite_t nf;
  double t0, t_log, t_info, t_pub, u0, upd_time;
  int64_t steps, last_log_updates, start_updates, next_eval, next_ckpt;
  tb_mark_t tb_last;
  uint64_t version;
  sac_stats_t st;
  /* one update late (no wait for the update just enqueued): the statistics fetched so
   * far (their verdict where the loss guard is off), and a policy copied out for
   * publishing at the next round (pub_slot >= 0: as version pub_version) */
  int64_t stats_fetched;
  int pub_slot, pub_next_slot;
  uint64_t pub_version;
  /* the shards as last read (read_shards), the run's totals from them, and the actors'
   * episodes as of the last progress line (remote: the mean return since then) */
  shard_view_t views[SAC_LEARNER_MAX_SHARDS];
  shard_totals_t tot;
  uint64_t log_episodes;
  double log_return_sum, remote_return;
  wait_t wait;
  health_t health;
  uint32_t budget_actors; /* the actors the last budget broadcast counted */
} run_t;

/* What a stage returns besides 0 (go on) and a negative SAC_E* code. */
enum { NEXT_ROUND = 1, END_RUN = 2, NO_BATCH = 3 };

/* Runs one stage and adds its host time to the run's per-stage profile. */
static int timed(run_t *r, sac_learner_stage_t s, int (*stage)(run_t *)) {
  double t = sac_clock_s();
  int rc = stage(r);
  r->res->stage_seconds[s] += sac_clock_s() - t;
  return rc;
}

/* ---- set-up ---- */

/* The environment's dimensions, the hyperparameters and the options checked. */
static int open_run(run_t *r) {
  const sac_learner_cfg_t *cfg = r->cfg;
  int rc = sac_env_new(cfg->env, cfg->seed, SAC_STREAM_EVAL, &r->probe);
  if (rc)
    return rc;
  const sac_env_spec_t *sp = sac_env_spec(r->probe);
  r->hp = cfg->hp;
  r->hp.obs_dim = sp->obs_dim;
  r->hp.act_dim = sp->act_dim;
  r->hp.seed = cfg->seed;
  if ((rc = sac_learner_check_cfg(cfg, NULL, 0)) != 0)
    return rc;
  r->reply_bytes = sample_reply_bytes(r->hp.batch, r->hp.obs_dim, r->hp.act_dim);
  if (r->reply_bytes > MAX_SAMPLE_REPLY_BYTES) {
    SAC_ERROR(
        "learner",
        "a sample of --batch_size %d rows of %s (obs %d, act %d) is %.2f GiB, over the 1 GiB one message may "
        "hold: lower --batch_size",
        r->hp.batch, cfg->env, r->hp.obs_dim, r->hp.act_dim, (double)r->reply_bytes / 1073741824.0);
    return SAC_ECONFIG;
  }
  return 0;
}

/* The backend and the learner on it, resumed from a checkpoint when asked. */
static int open_learner(run_t *r) {
  const sac_learner_cfg_t *cfg = r->cfg;
  int threads = cfg->threads, rc;
  if (threads == 0 && cfg->n_shards == 0) {
    /* embedded: the actors need cores too; BLAS threads fighting them for a core cost
     * more than they give */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    threads = cores - cfg->embedded_actors > 1 ? (int)(cores - cfg->embedded_actors) : 1;
  }
  if ((rc = sac_backend_new_on(cfg->backend, threads, cfg->device, cfg->dp.rank, &r->be)) != 0 ||
      (rc = sac_backend_configure(r->be, cfg->precision, cfg->graphs)) != 0 ||
      (rc = sac_new(&r->hp, r->be, &r->sac)) != 0)
    return rc;
  /* the loss guard runs on the backend, inside the optimizer ops (graphs stay on); a
   * data-parallel rank has none (its ranks must step alike): a non-finite loss is then
   * found after the update, the steps applied. Either way the verdict is read one
   * update late, with the statistics. */
  r->guard = cfg->loss_guard && cfg->dp.size <= 1;
  r->pub_slot = -1;
  sac_batch_slots_t sl;
  r->direct = sac_batch_slots(r->sac, cfg->prioritized, &sl) == 0;
  sac_set_loss_guard(r->sac, r->guard);
  if (!cfg->resume[0])
    return 0;
  if ((rc = sac_checkpoint_load(r->sac, cfg->resume, &r->ck)) != 0) {
    SAC_ERROR("learner", "cannot resume from %s: %s", cfg->resume, sac_strerror(rc));
    return rc;
  }
  SAC_INFO("learner", "resumed from %s: %llu updates, %llu environment steps, policy version %llu",
           cfg->resume, (unsigned long long)r->ck.updates, (unsigned long long)r->ck.env_steps,
           (unsigned long long)r->ck.policy_version);
  return 0;
}

/* The buffers, the network context, the data-parallel group and the weights port. */
static int open_network(run_t *r) {
  const sac_learner_cfg_t *cfg = r->cfg;
  int rc;
  r->actor = malloc(sizeof(float) * sac_actor_param_count(r->sac));
  r->ctx = sac_net_ctx_new(1);
  if (!r->actor || !r->ctx)
    return SAC_ENOMEM;
  if ((rc = sac_net_ctx_set_curve(r->ctx, cfg->curve)) != 0) /* before any socket of ctx */
    return rc;
  /* data-parallel: every rank starts from rank 0's state (and its checkpoint's counters);
   * the coordinator channel uses ctx, so CURVE covers it too */
  if (cfg->dp.size > 1 && (rc = dp_start(cfg, r->ctx, &r->hp, r->be, r->sac, &r->ck, &r->dp)) != 0)
    return rc;
  if (dp_follower(r->dp)) { /* data-parallel: only rank 0 publishes */
    snprintf(r->bound, sizeof r->bound, "(none: data-parallel rank %d)", sac_dp_rank(r->dp));
    return 0;
  }
  r->pub =
      sac_weights_pub_new(r->ctx, cfg->weights_endpoint, sac_actor_desc(r->sac), r->bound, sizeof r->bound);
  if (!r->pub)
    return SAC_ENET;
  sac_wire_dtype_t dt;
  rc = sac_weights_dtype_parse(cfg->weights_precision, &dt);
  if (rc == 0)
    rc = sac_weights_pub_set_dtype(r->pub, dt);
  if (rc == SAC_EINVAL)
    SAC_ERROR("learner", "--weights_precision must be fp32, bf16 or fp16, not \"%s\"",
              cfg->weights_precision);
  return rc == SAC_EINVAL ? SAC_ECONFIG : rc;
}

/* The shards (started here in the embedded default) and the replay client on them. */
static int open_replay(run_t *r) {
  const sac_learner_cfg_t *cfg = r->cfg;
  int rc;
  r->n_shards = cfg->n_shards;
  if (r->n_shards == 0) {
    rc = embedded_start(cfg, sac_env_spec(r->probe), r->ctx, &r->em, r->sample_eps, (int64_t)r->ck.env_steps);
    if (rc)
      return rc;
    r->n_shards = r->em.n_shards;
  } else {
    for (size_t i = 0; i < r->n_shards; i++)
      snprintf(r->sample_eps[i], 256, "%s", cfg->shard_sample_endpoints[i]);
  }
  sac_service_metrics_attach(&r->sm, r->be, cfg->backend, r->em.shards, r->em.n_shards, r->em.actors,
                             r->em.n_actors);
  const char *eps[SAC_LEARNER_MAX_SHARDS];
  for (size_t i = 0; i < r->n_shards; i++)
    eps[i] = r->sample_eps[i];
  sac_replay_client_config_t cc;
  sac_replay_client_config_default(&cc);
  cc.n_shards = r->n_shards;
  cc.sample_endpoints = eps;
  cc.ctx = r->ctx;
  cc.batch_size = (uint32_t)r->hp.batch;
  cc.beta = (float)cfg->per_beta;
  cc.sample_precision = cfg->sample_precision;
  cc.obs_dim = (uint32_t)r->hp.obs_dim;
  cc.act_dim = (uint32_t)r->hp.act_dim;
  cc.batches_per_request = batches_per_request(cfg, r->reply_bytes);
  const size_t reply = r->reply_bytes * cc.batches_per_request;
  if (cc.max_msg_bytes < reply)
    cc.max_msg_bytes = reply;
  /* more requests in flight where replies are small: each reply then carries less of the
   * round trip's wake-ups (sac-bench-service over TCP: 20% less CPU per update at 8 than at
   * the client's 2, docs/SCALING.md); with several batches a reply, half as many (16
   * batches in flight per shard at four a reply); a shard queues at most 8 x 256 KB for us */
  if (reply <= SMALL_REPLY_BYTES)
    cc.prefetch = cc.batches_per_request > 1 ? SMALL_REPLY_PREFETCH / 2 : SMALL_REPLY_PREFETCH;
  if (!(r->client = sac_replay_client_new(&cc)))
    return SAC_ENET;
  if (cfg->http) { /* /healthz says why the learner waits, for as long as the run lasts */
    pthread_mutex_init(&r->health.mu, NULL);
    r->health.inited = 1;
    sac_http_set_health(cfg->http, learner_health, &r->health);
  }
  SAC_INFO("learner", "%s on %s: %zu shard(s), weights on %s, backend %s, batch %d, %dx%d", cfg->env,
           cfg->n_shards ? "remote shards" : "the embedded default", r->n_shards, r->bound, cfg->backend,
           r->hp.batch, r->hp.depth, r->hp.hidden);
  return 0;
}

/* Version 0, the initial policy, so actors know the shapes from the start; in a new run
 * with a run directory, the curve's first point: the untrained policy's return. */
static int publish_initial(run_t *r) {
  const sac_learner_cfg_t *cfg = r->cfg;
  int rc;
  if (r->pub) /* the budget from the start: actors that start first must not run past it */
    sac_weights_pub_set_run(r->pub, (uint64_t)cfg->total_steps, r->ck.env_steps, 0, 0);
  if ((rc = sac_get_actor(r->sac, r->actor)) != 0 ||
      (r->pub && (rc = sac_weights_publish(r->pub, 0, r->actor)) != 0))
    return rc;
  if (!cfg->rundir || cfg->resume[0])
    return 0;
  sac_eval_stats_t ev;
  if ((rc = sac_evaluate_policy(cfg->env, cfg->seed, sac_actor_desc(r->sac), r->actor, r->hp.log_std_min,
                                r->hp.log_std_max, cfg->eval_episodes, NULL, &ev)) != 0)
    return rc;
  sac_rundir_point_t p = {.eval = ev, .train_return = NAN, .st = {.alpha = r->hp.init_alpha}};
  sac_rundir_add_eval(cfg->rundir, &p);
  return 0;
}

/* The loop's clocks, counters and schedules, from where a resumed run left off. */
static void start_progress(run_t *r) {
  const sac_learner_cfg_t *cfg = r->cfg;
  r->t0 = sac_clock_s() - r->ck.wall_seconds;
  r->t_log = sac_clock_s();
  r->t_info = 0;
  r->t_pub = r->t_log;
  r->res->updates = (int64_t)r->ck.updates;
  r->steps = r->tot.steps = (int64_t)r->ck.env_steps;
  r->remote_return = NAN;
  r->last_log_updates = r->start_updates = r->res->updates;
  r->tb_last = (tb_mark_t){sac_clock_s(), r->steps, r->res->updates};
  r->version = r->ck.policy_version;
  if (cfg->resume[0]) /* the best so far: the checkpoint's, or (an older one) the run's metrics.csv */
    r->res->best_eval_return = !isnan(r->ck.best_eval_return) ? r->ck.best_eval_return
                               : cfg->rundir                  ? sac_rundir_best(cfg->rundir)
                                                              : NAN;
  if (isnan(r->res->best_eval_return))
    r->res->best_eval_return = -INFINITY;
  r->next_eval = cfg->eval_every > 0 ? (r->res->updates / cfg->eval_every + 1) * cfg->eval_every : INT64_MAX;
  r->next_ckpt = cfg->checkpoint_every > 0
                     ? (r->res->updates / cfg->checkpoint_every + 1) * cfg->checkpoint_every
                     : INT64_MAX;
  if (dp_follower(r->dp)) /* data-parallel: rank 0 evaluates */
    r->next_eval = INT64_MAX;
  /* on a terminal the progress is one line redrawn in place; elsewhere (files, pipes,
   * containers, JSON logs) it is an ordinary log line */
  r->tty = isatty(STDERR_FILENO) && !sac_log_json_enabled();
  if (cfg->rundir)
    snprintf(r->ckpt_path, sizeof r->ckpt_path, "%s/checkpoint.bin", cfg->rundir->path);
}

/* ---- the stages of one round ---- */

/* One batch from the shards: where the backend takes it in place (cpu, null), copied
 * from the reply straight into the batch the update reads, checked as it is copied, and
 * none after (r->direct: the stage stage only commits it); else decoded, for stage_batch
 * to stage. */
static int sample_batch(run_t *r) {
  sac_batch_slots_t sl;
  if (!r->direct || sac_batch_slots(r->sac, r->cfg->prioritized, &sl) != 0)
    return sac_replay_client_sample(r->client, 200, &r->b);
  sac_replay_stage_t st = {sl.obs, sl.next_obs, sl.action, sl.reward, sl.terminated, sl.weights};
  return sac_replay_client_sample_into(r->client, 200, &st, &r->b);
}

/* The run's step budget into the weight broadcasts (the actors' shares of what is left,
 * sac_weights_pub_set_run): sent with the next broadcast, and at once when the shards
 * know another number of actors (a new actor must not take everyone's share for long). */
static int tell_budget(run_t *r) {
  if (!r->pub)
    return 0;
  uint32_t actors = 0;
  for (size_t i = 0; i < r->n_shards; i++)
    if (r->views[i].have && r->views[i].info.actors > actors)
      actors = r->views[i].info.actors;
  sac_weights_pub_set_run(r->pub, (uint64_t)r->cfg->total_steps, (uint64_t)r->steps, actors, 0);
  if (actors == r->budget_actors)
    return 0;
  r->budget_actors = actors;
  int rc = publish(r->pub, r->actor, r->version, &r->sm);
  if (rc == 0)
    r->t_pub = sac_clock_s();
  return rc;
}

/* A round without a batch: the wait goes on. Told apart and, once it has lasted
 * WAIT_LOG_S, logged (WARN when stalled, INFO while the shards fill up), counted and
 * put on /healthz; said again every WAIT_REPEAT_S. */
static void wait_round(run_t *r) {
  wait_t *w = &r->wait;
  double now = sac_clock_s();
  if (w->t0 == 0) {
    w->t0 = now;
    w->next_log = now + WAIT_LOG_S;
    for (size_t i = 0; i < r->n_shards; i++)
      r->views[i].inserted_at_wait = r->views[i].info.inserted_total;
  }
  w->kind = classify_wait(r->client, r->n_shards, r->views, now - w->t0, w->why, sizeof w->why, &w->stalled);
  const int due = now >= w->next_log;
  sac_service_metrics_wait(&r->sm, w->kind, now - w->t0, due && !w->logged);
  if (due || w->logged) /* from its first line on, /healthz follows the wait as it changes */
    health_set(&r->health, w->stalled, w->why);
  if (!due)
    return;
  if (w->kind != SAC_LEARNER_WAIT_UNREACHABLE) /* the replay client says that one, per shard */
    sac_log(w->stalled ? SAC_LOG_WARN : SAC_LOG_INFO, "learner", "no batch for %.0f s (%lld/%lld steps): %s",
            now - w->t0, (long long)r->steps, (long long)r->cfg->total_steps, w->why);
  w->logged = 1;
  w->next_log = now + WAIT_REPEAT_S;
}

/* A batch came: the wait, if one was logged, is over (said), and /healthz is ok. */
static void wait_over(run_t *r) {
  wait_t *w = &r->wait;
  if (w->t0 == 0)
    return;
  if (w->logged) {
    SAC_INFO("learner", "sampling again after %.0f s without a batch (it waited for: %s)",
             sac_clock_s() - w->t0, sac_learner_wait_name(w->kind));
    health_set(&r->health, 0, "");
  }
  sac_service_metrics_wait(&r->sm, SAC_LEARNER_WAIT_NONE, 0, 0);
  w->t0 = 0;
  w->logged = 0;
  w->kind = SAC_LEARNER_WAIT_NONE;
}

/* sample: the run's progress (the shards' stored steps and the actors' episodes, every
 * 10 ms, carried by the weight broadcasts; END_RUN at total_steps), then one batch from
 * the shards, or NO_BATCH after 200 ms without one. A data-parallel rank that holds a
 * batch keeps it. */
static int sample(run_t *r) {
  sac_http_beat(r->cfg->http); /* /livez: the loop turns, batch or not */
  double now = sac_clock_s();
  if (now - r->t_info >= 0.01) {
    read_shards(r->client, r->n_shards, r->views, &r->tot);
    r->steps = r->tot.steps;
    r->t_info = now;
    if (r->steps >= r->cfg->total_steps)
      return END_RUN;
    int rc = tell_budget(r);
    if (rc)
      return rc;
  }
  r->b = (sac_replay_batch_t){0};
  double w0 = sac_clock_s();
  int rc = r->dp_held ? 0 : sample_batch(r);
  r->res->sample_wait_seconds += sac_clock_s() - w0;
  sac_service_metrics_sampled(&r->sm, sac_clock_s() - w0, r->steps);
  sac_service_metrics_rejections(&r->sm, r->client, 0);
  if (rc == SAC_ETIMEOUT) {
    wait_round(r);
    return NO_BATCH;
  }
  if (rc == 0)
    wait_over(r);
  return rc; /* SAC_ECONFIG: a shard of another environment, or one that refuses the batch size */
}

/* publish, while no batch comes: a publisher that keeps sending lets late subscribers
 * get the current policy. */
static int publish_keepalive(run_t *r) {
  if (!r->pub || sac_clock_s() - r->t_pub <= 1.0)
    return 0;
  int rc = publish(r->pub, r->actor, r->version, &r->sm);
  if (rc == 0)
    r->t_pub = sac_clock_s();
  return rc;
}

/* dp_round, while no batch comes: this rank has none; the others may stop. */
static int dp_round_idle(run_t *r) {
  int act, rc = sac_dp_round(r->dp, 0, 0, &act);
  if (rc)
    return rc;
  if ((r->dp_stopped = act == SAC_DP_STOP) != 0)
    return END_RUN;
  return 0;
}

/* stage: the batch into the backend (on a GPU this copy overlaps the update enqueued
 * last time round; where the backend takes batches in place, sample put it there and
 * this commits it). Starts the update's host time. */
static int stage_batch(run_t *r) {
  r->u0 = sac_clock_s();
  const sac_replay_batch_t *b = &r->b;
  const size_t B = (size_t)r->hp.batch, O = (size_t)r->hp.obs_dim, A = (size_t)r->hp.act_dim;
  if (r->dp_held)
    return 0;
  if (b->n != B || b->obs_dim != O || b->act_dim != A) { /* the client refuses these */
    SAC_ERROR("learner", "a sample of %u rows (obs %u, act %u) reached the update", b->n, b->obs_dim,
              b->act_dim);
    return SAC_EPROTO;
  }
  if (r->direct) /* already where the update reads it (sample_batch) */
    return sac_batch_commit(r->sac);
  sac_host_batch_t hb = {b->obs,    b->next_obs,   b->action,
                         b->reward, b->terminated, r->cfg->prioritized ? b->weights : NULL};
  return sac_load_batch(r->sac, &hb, 1);
}

/* dp_round: update only when every rank has a batch; until then hold it (NEXT_ROUND),
 * with its indices when the replay is prioritised. */
static int dp_round(run_t *r) {
  const size_t B = (size_t)r->hp.batch;
  const int per = r->cfg->prioritized;
  if (!r->dp_held && per && (r->dp_idx || (r->dp_idx = malloc(B * sizeof *r->dp_idx))))
    memcpy(r->dp_idx, r->b.indices, B * sizeof *r->dp_idx);
  if (per && !r->dp_idx)
    return SAC_ENOMEM;
  int act, rc = sac_dp_round(r->dp, 1, 0, &act);
  if (rc)
    return rc;
  if ((r->dp_stopped = act == SAC_DP_STOP) != 0)
    return END_RUN;
  if ((r->dp_held = act == SAC_DP_SKIP) != 0)
    return NEXT_ROUND;
  return 0;
}

/* The verdict on update `index`'s losses, one update late: counted and logged when not
 * finite (with the guard its steps were skipped on the backend; without it they were
 * applied on every rank alike, so the run goes on). */
static int late_verdict(run_t *r, const sac_stats_t *st, int64_t index) {
  if (sac_stats_finite(st)) {
    r->nf.in_a_row = 0;
    return 0;
  }
  return nonfinite_update(&r->nf, r->cfg, &r->sm, index, !r->guard);
}

/* Every update: its statistics are fetched (a copy enqueued after it) and
 * the previous update's, fetched a round ago, are read: a wait for that copy only, not
 * for the update just enqueued. */
static int stats_lag_push(run_t *r) {
  int slot = (int)(r->stats_fetched & 1), rc = sac_stats_fetch(r->sac, slot);
  if (rc)
    return rc;
  if (r->stats_fetched++ == 0)
    return 0;
  sac_stats_t st;
  if ((rc = sac_stats_collect(r->sac, slot ^ 1, &st)) != 0)
    return rc;
  return late_verdict(r, &st, r->res->updates - 1);
}

/* update: one SAC step. A non-finite loss is found one update late (stats_lag_push):
 * with the guard the backend skipped the step's optimizer ops; without it
 * (data-parallel, --loss_guard false) the steps were applied on every rank alike, so the
 * run goes on. Counted and logged; the learner stops after max_nonfinite_updates in a
 * row. A SAC_ENONFINITE from sac_update itself (the unfused ops' host-side guard, not
 * used here) refuses the round: no priorities, nothing to publish. */
static int update(run_t *r) {
  int rc = sac_update(r->sac);
  if (rc == 0) {
    if ((rc = stats_lag_push(r)) != 0)
      return rc;
  } else if (rc == SAC_ENONFINITE) {
    if ((rc = nonfinite_update(&r->nf, r->cfg, &r->sm, r->res->updates, 0)) != 0)
      return rc;
    return NEXT_ROUND;
  } else {
    return rc;
  }
  r->res->updates++;
  return 0;
}

/* After the loop: the last update's verdict. */
static int stats_lag_flush(run_t *r) {
  if (r->stats_fetched == 0)
    return 0;
  sac_stats_t st;
  int rc = sac_stats_collect(r->sac, (int)((r->stats_fetched - 1) & 1), &st);
  r->stats_fetched = 0;
  return rc ? rc : late_verdict(r, &st, r->res->updates - 1);
}

/* priorities: the previous update's |td| to the shards (prioritised replay). */
static int send_priorities(run_t *r) {
  if (!r->cfg->prioritized)
    return 0;
  return prio_lag_push(&r->lag, r->sac, r->client, (size_t)r->hp.batch, r->dp_idx ? r->dp_idx : r->b.indices);
}

/* publish: the actor's weights as version = updates, once publish_every updates and
 * publish_interval_ms have passed since the last broadcast (at most
 * min(updates/s / publish_every, 1000 / publish_interval_ms) broadcasts a second, so the
 * bytes sent to the actors do not grow with the update rate), one round late: at the
 * update that makes the version the actor is copied out (a copy enqueued after it), and
 * the next round, with one more update enqueued, that copy is read (a wait for the copy
 * alone) and broadcast, unless a weight is not finite (publish_checked's rule). */
static int publish_round(run_t *r) {
  if (!r->pub)
    return 0;
  int rc = 0;
  if (r->pub_slot >= 0) {
    if ((rc = sac_actor_collect(r->sac, r->pub_slot, r->actor)) != 0)
      return rc;
    r->pub_slot = -1;
    if (!all_finite(r->actor, sac_actor_param_count(r->sac))) {
      if (r->sm.r)
        sac_metric_inc(r->sm.unpublished);
      SAC_ERROR("learner", "the actor's weights are not finite at update %llu: not publishing them",
                (unsigned long long)r->pub_version);
      return SAC_ENONFINITE;
    }
    r->version = r->pub_version;
    if ((rc = publish(r->pub, r->actor, r->version, &r->sm)) != 0)
      return rc;
    r->t_pub = sac_clock_s();
  }
  const sac_learner_cfg_t *cfg = r->cfg;
  if (r->res->updates - (int64_t)r->version < cfg->publish_every)
    return 0;
  if (cfg->publish_interval_ms > 0 && sac_clock_s() - r->t_pub < 1e-3 * cfg->publish_interval_ms)
    return 0;
  r->pub_version = (uint64_t)r->res->updates;
  r->pub_slot = r->pub_next_slot;
  r->pub_next_slot ^= 1;
  return sac_actor_fetch(r->sac, r->pub_slot);
}

/* report (per update): the update's host time, from staging to publishing. */
static int count_update(run_t *r) {
  r->upd_time += sac_clock_s() - r->u0;
  sac_service_metrics_updated(&r->sm, r->sac, sac_clock_s() - r->u0, r->res, r->version);
  return 0;
}

/* Training episodes so far: with embedded actors, a resumed run's earlier ones and the
 * actors' own; with remote actors, the shards' count (as the steps are the shards'). */
static int64_t run_episodes(const run_t *r) {
  if (!r->em.n_actors)
    return (int64_t)r->tot.episodes;
  int64_t n = (int64_t)r->ck.episodes;
  for (size_t i = 0; i < r->em.n_actors; i++)
    n += (int64_t)atomic_load(&sac_actor_stats(r->em.actors[i])->episodes);
  return n;
}

/* The counters a checkpoint keeps. */
static sac_ckpt_counters_t run_counters(const run_t *r, uint64_t version, double wall_s) {
  const double best = r->res->best_eval_return;
  return (sac_ckpt_counters_t){(uint64_t)r->res->updates, (uint64_t)r->steps,         version, wall_s,
                               (uint64_t)run_episodes(r), isfinite(best) ? best : NAN};
}

/* checkpoint: every checkpoint_every updates into the run directory (a failed one is
 * logged; training goes on); data-parallel ranks compare their state at the same
 * points. */
static int checkpoint(run_t *r) {
  const sac_learner_cfg_t *cfg = r->cfg;
  const int64_t n = r->res->updates;
  if (r->ckpt_path[0] && n >= r->next_ckpt) {
    r->next_ckpt += cfg->checkpoint_every;
    sac_ckpt_counters_t c = run_counters(r, r->version, sac_clock_s() - r->t0);
    sac_checkpoint_save(r->sac, r->ckpt_path, &c);
  }
  if (r->dp && cfg->checkpoint_every > 0 && n % cfg->checkpoint_every == 0)
    return dp_check(r->dp, r->sac, n);
  return 0;
}

/* evaluate: the deterministic policy every eval_every updates. */
static int evaluate(run_t *r) {
  const sac_learner_cfg_t *cfg = r->cfg;
  if (r->res->updates < r->next_eval)
    return 0;
  r->next_eval += cfg->eval_every;
  double ret;
  int rc = evaluate_point(cfg, r->sac, &r->hp, r->actor, sac_clock_s() - r->t0, r->steps,
                          actors_mean_return(&r->em), run_episodes(r), r->res, &r->st, &ret);
  if (rc)
    return rc;
  if (r->tty_dirty) {
    fprintf(stderr, "\r\033[K");
    r->tty_dirty = 0;
  }
  if (!cfg->quiet)
    SAC_INFO("learner", "eval at update %lld (%lld steps): mean return %.1f over %d episodes",
             (long long)r->res->updates, (long long)r->steps, ret, cfg->eval_episodes);
  return 0;
}

/* The actors' recent mean episode return: the embedded actors' own (each over its last
 * 20 episodes); with remote actors, over the episodes the shards stored since the last
 * call (kept when none ended since). NaN before the first episode. */
static double recent_return(run_t *r) {
  if (r->em.n_actors)
    return actors_mean_return(&r->em);
  if (r->tot.episodes > r->log_episodes) {
    r->remote_return = (r->tot.return_sum - r->log_return_sum) / (double)(r->tot.episodes - r->log_episodes);
    r->log_episodes = r->tot.episodes;
    r->log_return_sum = r->tot.return_sum;
  }
  return r->remote_return;
}

/* The progress line, every log_interval_s (also while the learner waits: it says for
 * what): on a terminal redrawn in place. */
static void log_progress(run_t *r) {
  const sac_learner_cfg_t *cfg = r->cfg;
  double t = sac_clock_s();
  sac_stats(r->sac, &r->st);
  double ups = (double)(r->res->updates - r->last_log_updates) / (t - r->t_log);
  double sps = (double)r->steps / (t - r->t0);
  double eta = sps > 0 ? (double)(cfg->total_steps - r->steps) / sps : 0;
  double ret = recent_return(r);
  char line[1024], wait[720] = "";
  if (r->wait.t0 > 0 && t - r->wait.t0 >= 1.0)
    snprintf(wait, sizeof wait, "  waiting %.0f s: %s", t - r->wait.t0,
             r->wait.kind ? r->wait.why : "no batch yet");
  snprintf(
      line, sizeof line,
      "steps %lld/%lld  updates %lld (%.0f/s)  episodes %lld  actor return %.1f  alpha %.4f  q_loss %.4f  "
      "pi_loss %.4f  entropy %.3f  version %llu  eta %.0fs%s",
      (long long)r->steps, (long long)cfg->total_steps, (long long)r->res->updates, ups,
      (long long)run_episodes(r), ret, r->st.alpha, r->st.critic_loss, r->st.actor_loss, r->st.entropy,
      (unsigned long long)r->version, eta, wait);
  if (r->tty) { /* a status line redrawn in place; log lines go above it */
    fprintf(stderr, "\r\033[K%s", line);
    fflush(stderr);
    r->tty_dirty = 1;
  } else {
    SAC_INFO("learner", "%s", line);
  }
  r->t_log = t;
  r->last_log_updates = r->res->updates;
}

/* report: TensorBoard scalars and the progress line. */
static int report(run_t *r) {
  const sac_learner_cfg_t *cfg = r->cfg;
  if (cfg->rundir && sac_clock_s() - r->tb_last.t >= TB_PERIOD_S)
    report_tensorboard(cfg, r->sac, recent_return(r), r->client, r->n_shards, r->steps, r->res->updates,
                       &r->tb_last);
  if (!cfg->quiet && cfg->log_interval_s > 0 && sac_clock_s() - r->t_log >= cfg->log_interval_s)
    log_progress(r);
  return 0;
}

/* ---- the loop ---- */

/* A round without a batch: keep the weights flowing, and (data-parallel) tell the
 * other ranks. */
static int idle_round(run_t *r) {
  int rc = timed(r, SAC_LEARNER_STAGE_PUBLISH, publish_keepalive);
  if (rc == 0 && r->dp)
    rc = timed(r, SAC_LEARNER_STAGE_DP_ROUND, dp_round_idle);
  if (rc == 0) /* the progress line keeps coming while the learner waits */
    rc = timed(r, SAC_LEARNER_STAGE_REPORT, report);
  return rc ? rc : NEXT_ROUND;
}

/* One round: 0, NEXT_ROUND (cut short), END_RUN or a negative code. */
static int run_round(run_t *r) {
  int rc = timed(r, SAC_LEARNER_STAGE_SAMPLE, sample);
  if (rc == NO_BATCH)
    return idle_round(r);
  if (rc || (rc = timed(r, SAC_LEARNER_STAGE_STAGE, stage_batch)) != 0)
    return rc;
  if (r->dp && (rc = timed(r, SAC_LEARNER_STAGE_DP_ROUND, dp_round)) != 0)
    return rc;
  if ((rc = timed(r, SAC_LEARNER_STAGE_UPDATE, update)) != 0 ||
      (rc = timed(r, SAC_LEARNER_STAGE_PRIORITIES, send_priorities)) != 0 ||
      (rc = timed(r, SAC_LEARNER_STAGE_PUBLISH, publish_round)) != 0 ||
      (rc = timed(r, SAC_LEARNER_STAGE_REPORT, count_update)) != 0 ||
      (rc = timed(r, SAC_LEARNER_STAGE_CHECKPOINT, checkpoint)) != 0 ||
      (rc = timed(r, SAC_LEARNER_STAGE_EVALUATE, evaluate)) != 0)
    return rc;
  return timed(r, SAC_LEARNER_STAGE_REPORT, report);
}

/* The run is over (total_steps stored): the actors are told at once, in a broadcast of
 * the weights last published (and in every later one), so that remote actors stop
 * stepping now rather than when they are killed. */
static void announce_run_over(run_t *r) {
  if (!r->pub)
    return;
  sac_weights_pub_set_run(r->pub, (uint64_t)r->cfg->total_steps, (uint64_t)r->steps, r->budget_actors, 1);
  if (publish(r->pub, r->actor, r->version, &r->sm) == 0)
    r->t_pub = sac_clock_s();
}

/* Rounds until total_steps were stored, *stop, the data-parallel ranks stop, or an error.
 * Stopped by *stop before total_steps: the run is interrupted (no final evaluation). Either
 * way the embedded actors are told to stop at once, so that their drains overlap the
 * final stages. */
static int run_loop(run_t *r) {
  int rc = 0;
  while (!(r->stop && atomic_load(r->stop))) {
    rc = run_round(r);
    sac_service_metrics_stages(&r->sm, r->res, 0); /* the profile on /metrics, twice a second */
    if (rc < 0 || rc == END_RUN)
      break;
  }
  if (rc == END_RUN && r->steps >= r->cfg->total_steps)
    announce_run_over(r);
  r->res->interrupted = rc >= 0 && rc != END_RUN && r->steps < r->cfg->total_steps;
  embedded_request_stop(&r->em);
  return rc < 0 ? rc : 0;
}

/* ---- tear-down ---- */

/* data-parallel: the other ranks stop too (unless they said so), then a last check and
 * the all-reduce's share of the update time. */
static int dp_finish(run_t *r) {
  int act, rc;
  if ((!r->dp_stopped && (rc = sac_dp_round(r->dp, 0, 1, &act)) != 0) ||
      (rc = dp_check(r->dp, r->sac, r->res->updates)) != 0)
    return rc;
  sac_dp_stats_t ds;
  sac_dp_stats(r->dp, &ds);
  int64_t n = r->res->updates - r->start_updates;
  SAC_INFO(
      "learner",
      "data-parallel: rank %d of %d did %lld updates; gradient all-reduce (%s) %.3f ms per update (%.1f%% "
      "of update time), agreement rounds %.3f ms per update",
      sac_dp_rank(r->dp), sac_dp_size(r->dp), (long long)n, sac_dp_collective(r->dp),
      n > 0 ? 1e3 * ds.allreduce_s / (double)n : 0.0,
      r->upd_time > 0 ? 100.0 * ds.allreduce_s / r->upd_time : 0.0,
      n > 0 ? 1e3 * ds.round_s / (double)n : 0.0);
  return 0;
}

/* The last update's priorities. */
static int flush_priorities(run_t *r) {
  return r->cfg->prioritized ? prio_lag_flush(&r->lag, r->sac, r->client, (size_t)r->hp.batch) : 0;
}

/* The run's figures in the result. */
static void sum_up(run_t *r) {
  sac_learner_result_t *res = r->res;
  if (r->tty_dirty)
    fprintf(stderr, "\n");
  res->wall_seconds = sac_clock_s() - r->t0;
  res->env_steps = r->steps;
  res->policy_version = r->version;
  res->updates_per_second = r->upd_time > 0 ? (double)(res->updates - r->start_updates) / r->upd_time : 0;
  res->env_steps_per_second = (double)r->steps / res->wall_seconds;
  res->episodes = run_episodes(r);
  res->start_updates = r->start_updates;
}

/* evaluate, at the end: the final policy (rank 0). */
static int evaluate_final(run_t *r) {
  double ret;
  if (dp_follower(r->dp))
    return 0;
  if (r->res->interrupted) { /* Ctrl-C: the stop must be quick; the last evaluation stands */
    char last[48] = "none yet";
    if (isfinite(r->res->final_eval_return))
      snprintf(last, sizeof last, "%.1f", r->res->final_eval_return);
    SAC_INFO("learner",
             "interrupted at %lld of %lld steps after %lld updates: no final evaluation (the last: %s)",
             (long long)r->steps, (long long)r->cfg->total_steps, (long long)r->res->updates, last);
    return 0;
  }
  return evaluate_point(r->cfg, r->sac, &r->hp, r->actor, r->res->wall_seconds, r->steps,
                        actors_mean_return(&r->em), r->res->episodes, r->res, &r->st, &ret);
}

/* publish, at the end: the final policy as version = updates. */
static int publish_final(run_t *r) {
  if (!r->pub)
    return 0;
  int rc = publish_checked(r->pub, r->sac, r->actor, (uint64_t)r->res->updates, &r->sm);
  if (rc == 0) /* the result line's policy version is the one the actors got last */
    r->res->policy_version = r->version = (uint64_t)r->res->updates;
  return rc;
}

/* checkpoint, at the end: the checkpoint and the final policy into the run directory. */
static int save_final(run_t *r) {
  const sac_learner_cfg_t *cfg = r->cfg;
  if (!cfg->rundir)
    return 0;
  int rc = 0;
  char path[1100];
  sac_ckpt_counters_t c = run_counters(r, (uint64_t)r->res->updates, r->res->wall_seconds);
  if (sac_checkpoint_save(r->sac, r->ckpt_path, &c) != 0)
    rc = SAC_EIO;
  snprintf(path, sizeof path, "%s/policy.bin", cfg->rundir->path);
  sac_policy_env_t pe; /* the env ID and action bounds, for sac-export and sac-eval */
  sac_policy_env_from_spec(&pe, cfg->env, sac_env_spec(r->probe));
  sac_policy_save(path, sac_actor_desc(r->sac), r->actor, r->hp.log_std_min, r->hp.log_std_max, &pe);
  return rc;
}

/* After the loop: the pending priorities, the ranks' farewell, the figures, the final
 * evaluation, broadcast and files. */
static int finish(run_t *r) {
  int rc;
  if ((rc = timed(r, SAC_LEARNER_STAGE_UPDATE, stats_lag_flush)) != 0 ||
      (rc = timed(r, SAC_LEARNER_STAGE_PRIORITIES, flush_priorities)) != 0)
    return rc;
  if (r->dp && (rc = timed(r, SAC_LEARNER_STAGE_DP_ROUND, dp_finish)) != 0)
    return rc;
  sum_up(r);
  if ((rc = timed(r, SAC_LEARNER_STAGE_EVALUATE, evaluate_final)) != 0 ||
      (rc = timed(r, SAC_LEARNER_STAGE_PUBLISH, publish_final)) != 0)
    return rc;
  return timed(r, SAC_LEARNER_STAGE_CHECKPOINT, save_final);
}

/* Releases everything the run holds, in the reverse order of set-up (also after a
 * failed one); a failed run first tells the other data-parallel ranks. */
static void close_run(run_t *r, int rc) {
  if (r->health.inited) {
    sac_http_set_health(r->cfg->http, NULL, NULL);
    pthread_mutex_destroy(&r->health.mu);
  }
  sac_service_metrics_rejections(&r->sm, r->client, 1);
  sac_service_metrics_stages(&r->sm, r->res, 1);
  if (rc)
    SAC_ERROR("learner", "stopped: %s", sac_strerror(rc));
  if (rc && r->dp) /* data-parallel: the other ranks stop now rather than at their timeout */
    sac_dp_abort(r->dp, sac_strerror(rc));
  sac_dp_destroy(&r->dp);
  sac_service_metrics_close(&r->sm, r->res);
  embedded_stop(&r->em);
  sac_replay_client_destroy(&r->client);
  sac_weights_pub_destroy(&r->pub);
  sac_net_ctx_destroy(&r->ctx);
  sac_destroy(&r->sac);
  sac_backend_destroy(&r->be);
  sac_env_destroy(&r->probe);
  free(r->actor), free(r->sample_eps), free(r->dp_idx), free(r->lag.idx[0]), free(r->lag.idx[1]),
      free(r->lag.acc_idx), free(r->lag.acc_prio);
}

int sac_learner_run(const sac_learner_cfg_t *cfg, atomic_int *stop, sac_learner_result_t *res) {
  memset(res, 0, sizeof *res);
  res->final_eval_return = res->best_eval_return = -INFINITY;
  run_t *r = calloc(1, sizeof *r);
  if (!r)
    return SAC_ENOMEM;
  r->cfg = cfg, r->stop = stop, r->res = res;
  sac_service_metrics_init(&r->sm, cfg->metrics, cfg);
  if (!(r->sample_eps = calloc(SAC_LEARNER_MAX_SHARDS, 256))) {
    free(r);
    return SAC_ENOMEM;
  }
  int rc = open_run(r);
  if (rc == 0)
    rc = open_learner(r);
  if (rc == 0)
    rc = open_network(r);
  if (rc == 0)
    rc = open_replay(r);
  if (rc == 0)
    rc = publish_initial(r);
  if (rc == 0) {
    start_progress(r);
    rc = run_loop(r);
  }
  if (rc == 0)
    rc = finish(r);
  close_run(r, rc);
  free(r);
  return rc;
}
