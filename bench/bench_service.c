/* sac-bench-service: the service ceiling. How many updates per second the learner's
 * service can feed when the update itself costs nothing (the null backend,
 * learner/backend_null.c), so what is measured is everything around it: sampling from the
 * shards, decoding the replies, staging the batch, priority updates and weight
 * broadcasts.
 *
 * Each configuration runs S shard servers in this process (replay/server.h, each on its
 * own thread: over inproc:// as in the embedded default, or over loopback TCP on
 * 127.0.0.1 ports the shards choose), uniform or prioritised, `cheetah` sizes (obs 17,
 * act 6) at batch 256 (--batch), and 0 or N actor threads that stream transitions into
 * them (64-row batches, as sac-actor sends them, paced at --actor_rate steps/s each; with
 * 0 actors the shards are pre-filled and then only sampled). The shards' rate limiter is
 * off: the learner samples as fast as it can. The learner loop is the service's per-update
 * path (learner/service.c): sample from the prefetching replay client straight into the
 * batch the update reads (sac_batch_slots, sac_replay_client_sample_into), commit it, update, send the
 * priorities (prioritised: collected and sent every --priorities_every updates), and, once at least
 * --publish_every updates and --publish_interval_ms have passed since the last broadcast (the learner's two
 * bounds and defaults), copy the actor's weights out, check them and publish them on an inproc:// XPUB port
 * (no subscriber: the send cost only).
 *
 * Figures: updates/s and sampled transitions/s, medians over --windows windows of
 * --seconds each after a warm-up; the bytes of sample replies taken in per second and
 * their ratio to the machine's memcpy bandwidth, measured in the same run (the
 * yardstick: a 64 MiB copy, median of 5); and where the loop's time goes, per stage,
 * summed over the windows: sample (waiting for and decoding a reply, in the client),
 * stage, update, priorities, publish (the table shows the sample stage's share of the
 * wall time, "wait", and the learner thread's CPU per update in each stage); and the CPU
 * time per update of the whole process
 * (learner, shards, actors, ZeroMQ's I/O thread) and of the learner's thread, which is
 * what the rate scales with on more cores (updates per core-second = 1 / that time). One "RESULT" line per
 * configuration is for scripts (tests/test_bench_service.sh); the process exits 1 when a configuration
 * produced no positive finite figure.
 *
 * Usage: sac-bench-service [--seconds S (default 1)] [--windows W (default 3)]
 *   [--configs inproc:2,tcp:1,tcp:2,tcp:4] [--samplers uniform,prioritized]
 *   [--actors 0,4,16] [--actor_rate STEPS_PER_S (default 1000)] [--batch B (default 256)]
 *   [--prefetch K (requests in flight per shard; default as the learner: for replies of at most
 *    256 KB, 4 with several batches a reply and 8 with one, else the client's 2)]
 *   [--publish_every K (default 10, the learner's)]
 *   [--publish_interval_ms MS (default 50, the learner's; 0: by count only)]
 *   [--batches_per_request K (batches in one sample reply; default as the learner: 4 where a
 *    reply of four takes at most 256 KB, else 1)]
 *   [--priorities_every K (prioritised: the |td| of K updates sent as one message per shard;
 *    default as the learner: 4, fewer where 4 batches pass 1024 rows)]
 *   [--intake direct|decode (direct, the learner's: each reply copied straight from the
 *    message into the batch the update reads, checked as it is copied; decode: decoded into
 *    the client's memory, checked, then staged, to compare the two in one build)]
 *   [--prefill ROWS (per shard before the learner starts, default 32768, at most 2^21; each shard's
 *    capacity is the larger of 65536 and twice that)]
 *   [--env ENV_ID: also an actor core's steps per CPU-second on ENV_ID, e.g. HalfCheetah-v5]
 *   [--learner ENV_ID: also sac_learner_run itself, embedded, on the null backend, with the
 *    seconds per update of each of its named stages]
 *   [--sample_precision fp32|fp16 (obs/action/next_obs in sample replies; default fp32)] */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/env.h"
#include "common/error.h"
#include "common/log.h"
#include "common/mlp.h"
#include "common/net.h"
#include "common/rng.h"
#include "common/weights.h"
#include "learner/backend.h"
#include "learner/sac.h"
#include "learner/service.h"
#include "replay/client.h"
#include "replay/server.h"
#include "tests/replay_testgen.h"

#define OBS 17
#define ACT 6
#define MAX_SHARDS 8
#define MAX_ACTORS 64
#define MAX_WINDOWS 32
#define ACTOR_ROWS 64

/* ---- options ---- */
typedef struct {
  double seconds;
  int windows, batch, prefetch, publish_every;
  int publish_interval_ms; /* --publish_interval_ms: the learner's time bound (0: by count only) */
  int batches_per_request; /* --batches_per_request: batches per sample reply (0: as the learner) */
  int prio_every;          /* --priorities_every (0: as the learner) */
  int decode; /* --intake decode: replies decoded, then staged (the path before direct staging) */
  int64_t prefill;
  double actor_rate;
  char configs[256], samplers[64], actors[64];
  char env[256];      /* "": no actor-core table */
  char learner[256];  /* "": no run of the learner service itself */
  uint32_t precision; /* --sample_precision: SAC_WIRE_F32 or SAC_WIRE_F16 */
} opts_t;

/* One configuration. */
typedef struct {
  int tcp, shards, prioritized, actors;
} conf_t;

/* Where the loop's time went, seconds. */
enum { ST_SAMPLE, ST_STAGE, ST_UPDATE, ST_PRIO, ST_PUBLISH, ST_COUNT };
static const char *const k_stage_names[ST_COUNT] = {"sample", "stage", "update", "priorities", "publish"};

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* CPU seconds of the whole process (every thread: learner, shards, actors, ZeroMQ's I/O
 * thread) and of the calling thread. On a machine shared with other work the wall-clock
 * rate moves with the load; the CPU time per update moves much less, and it is what the
 * figure scales with: N cores give at most N / (CPU seconds per update) updates/s. */
static double process_cpu_s(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
         1e-6 * (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

static double thread_cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- the yardstick: memcpy GB/s over 64 MiB, median of 5 ---- */
static double memcpy_gbs(void) {
  const size_t n = (size_t)64 << 20;
  char *a = malloc(n), *b = malloc(n);
  if (!a || !b) {
    free(a), free(b);
    return NAN;
  }
  memset(a, 1, n);
  memset(b, 2, n);
  double r[5];
  for (int i = 0; i < 5; i++) {
    double t0 = sac_clock_s();
    memcpy(i % 2 ? a : b, i % 2 ? b : a, n);
    r[i] = (double)n / (sac_clock_s() - t0) / 1e9;
  }
  volatile char sink = a[n / 2] + b[n / 3];
  (void)sink;
  free(a), free(b);
  return median(r, 5);
}

/* ---- the shards ---- */
typedef struct {
  sac_net_ctx_t *ctx;
  sac_replay_server_t *srv[MAX_SHARDS];
  const char *ins[MAX_SHARDS], *smp[MAX_SHARDS];
  int n;
} shards_t;

static int shards_start(shards_t *s, const conf_t *c, int batch, int64_t prefill, int id) {
  memset(s, 0, sizeof *s);
  s->n = c->shards;
  if (!(s->ctx = sac_net_ctx_new(1)))
    return SAC_ENOMEM;
  for (int i = 0; i < s->n; i++) {
    sac_replay_server_config_t sc;
    sac_replay_server_config_default(&sc);
    sc.shard.shard_id = (uint32_t)i;
    sc.shard.capacity = prefill * 2 > (1 << 16) ? (uint64_t)prefill * 2 : 1 << 16;
    sc.shard.obs_dim = OBS;
    sc.shard.act_dim = ACT;
    sc.shard.min_size = (uint64_t)batch;
    sc.shard.max_sample_batch = (uint32_t)(batch > 4096 ? batch : 4096);
    sc.shard.sampler = c->prioritized ? SAC_REPLAY_PRIORITIZED : SAC_REPLAY_UNIFORM;
    sc.durability = SAC_REPLAY_DURABILITY_NONE;
    sc.snapshot_interval_s = 0;
    if (c->tcp) {
      snprintf(sc.insert_endpoint, sizeof sc.insert_endpoint, "tcp://127.0.0.1:*");
      snprintf(sc.sample_endpoint, sizeof sc.sample_endpoint, "tcp://127.0.0.1:*");
    } else {
      snprintf(sc.insert_endpoint, sizeof sc.insert_endpoint, "inproc://bench-service-%d-%d-insert", id, i);
      snprintf(sc.sample_endpoint, sizeof sc.sample_endpoint, "inproc://bench-service-%d-%d-sample", id, i);
    }
    int err = 0;
    if (!(s->srv[i] = sac_replay_server_new(&sc, s->ctx, &err)))
      return err ? err : SAC_ENET;
    if ((err = sac_replay_server_start(s->srv[i])) != 0)
      return err;
    s->ins[i] = sac_replay_server_insert_endpoint(s->srv[i]);
    s->smp[i] = sac_replay_server_sample_endpoint(s->srv[i]);
  }
  return 0;
}

static void shards_stop(shards_t *s) {
  for (int i = 0; i < s->n; i++)
    sac_replay_server_destroy(&s->srv[i]);
  sac_net_ctx_destroy(&s->ctx);
}

/* ---- actors: insert clients streaming 64-row batches at a paced rate ---- */
typedef struct {
  const shards_t *sh;
  uint32_t id;
  double rate;  /* steps/s; <= 0: as fast as the shards take them */
  int64_t rows; /* > 0: insert this many, then return (the pre-fill) */
  atomic_int *stop;
  atomic_llong sent;
  int rc;
  pthread_t tid;
} actor_t;

static void *actor_main(void *arg) {
  actor_t *a = arg;
  sac_replay_client_config_t cc;
  sac_replay_client_config_default(&cc);
  cc.n_shards = (size_t)a->sh->n;
  cc.insert_endpoints = a->sh->ins;
  cc.ctx = a->sh->ctx;
  cc.actor_id = a->id;
  sac_replay_client_t *cl = sac_replay_client_new(&cc);
  if (!cl) {
    a->rc = SAC_ENET;
    return NULL;
  }
  tg_t g;
  tg_init(&g, a->id, 1, OBS, ACT, 100, ACTOR_ROWS);
  const double t0 = sac_clock_s();
  int64_t sent = 0;
  while (!atomic_load(a->stop) && (a->rows <= 0 || sent < a->rows)) {
    if (a->rate > 0) { /* paced: never ahead of rate x elapsed */
      double ahead = (double)sent / a->rate - (sac_clock_s() - t0);
      if (ahead > 0) {
        sac_replay_client_poll(cl, 0);
        sac_sleep_ns((uint64_t)(ahead * 1e9) + 1000u);
        continue;
      }
    }
    int rc = sac_replay_client_insert(cl, -1, tg_next(&g), 100);
    if (rc == SAC_ETIMEOUT)
      continue;
    if (rc) {
      a->rc = rc;
      break;
    }
    sent += ACTOR_ROWS;
    atomic_store(&a->sent, sent);
  }
  if (a->rows > 0 && a->rc == 0)
    a->rc = sac_replay_client_flush(cl, 30000);
  sac_replay_client_destroy(&cl);
  tg_free(&g);
  return NULL;
}

/* Fills every shard with `rows` transitions (one insert client per shard, round-robin
 * over the shards from one thread is slower), waits for the acks. */
static int prefill(const shards_t *sh, int64_t rows_per_shard) {
  atomic_int stop = 0;
  actor_t a = {.sh = sh, .id = 1000, .rate = 0, .rows = rows_per_shard * sh->n, .stop = &stop};
  actor_main(&a);
  return a.rc;
}

/* ---- the learner's per-update path ---- */
typedef struct {
  sac_backend_t *be;
  sac_t *sac;
  sac_replay_client_t *client;
  sac_weights_pub_t *pub;
  float *actor, *prio;
  uint64_t *prev_idx; /* (B * prio_every) the indices of the updates whose |td| is in prio */
  int64_t prio_n, prio_every;
  int prioritized, publish_every, direct;
  double publish_interval_s, last_publish_s;
  int64_t updates, steps, last_publish;
  double stage_s[ST_COUNT];
  /* the learner thread's CPU per stage: read on one update in CPU_EVERY for the stages
   * every update has (a thread CPU clock read is a system call, too dear for each stage of
   * each update), on every publish for the publish */
  double cpu_s[ST_COUNT];
  int64_t cpu_sampled;
} learner_t;
/* prime, so that the updates read are every phase of --publish_every and
 * --priorities_every alike (16 read only the updates where no priorities were sent) */
#define CPU_EVERY 17

static int learner_open(learner_t *L, const shards_t *sh, const conf_t *c, const opts_t *o, int id) {
  memset(L, 0, sizeof *L);
  L->prioritized = c->prioritized;
  L->publish_every = o->publish_every;
  L->publish_interval_s = o->publish_interval_ms * 1e-3;
  L->direct = !o->decode;
  sac_hparams_t hp;
  sac_hparams_default(&hp, OBS, ACT);
  hp.batch = o->batch;
  int rc;
  if ((rc = sac_backend_new("null", 1, &L->be)) != 0 || (rc = sac_new(&hp, L->be, &L->sac)) != 0)
    return rc;
  L->actor = malloc(sizeof(float) * sac_actor_param_count(L->sac));
  /* priorities sent every prio_every updates, as the service sends them (4 updates, at most
   * 1024 rows) */
  L->prio_every = o->prio_every > 0 ? o->prio_every
                                    : (1024 / o->batch > 4   ? 4
                                       : 1024 / o->batch > 1 ? 1024 / o->batch
                                                             : 1);
  L->prio = malloc(sizeof(float) * (size_t)o->batch * (size_t)L->prio_every);
  L->prev_idx = malloc(sizeof(uint64_t) * (size_t)o->batch * (size_t)L->prio_every);
  if (!L->actor || !L->prio || !L->prev_idx)
    return SAC_ENOMEM;
  char ep[128], bound[256];
  snprintf(ep, sizeof ep, "inproc://bench-service-weights-%d", id);
  if (!(L->pub = sac_weights_pub_new(sh->ctx, ep, sac_actor_desc(L->sac), bound, sizeof bound)))
    return SAC_ENET;
  sac_replay_client_config_t cc;
  sac_replay_client_config_default(&cc);
  cc.n_shards = (size_t)sh->n;
  cc.sample_endpoints = sh->smp;
  cc.ctx = sh->ctx;
  cc.batch_size = (uint32_t)o->batch;
  cc.obs_dim = OBS;
  cc.act_dim = ACT;
  cc.sample_precision = o->precision;
  size_t reply = (size_t)o->batch * ((2 * OBS + ACT + 3) * 4 + 8) + 4096; /* fp32: the larger */
  /* as learner/service.c: four batches a reply where four take at most 256 KB, and then
   * 4 requests in flight (8 with one batch a reply) */
  cc.batches_per_request = o->batches_per_request > 0       ? (uint32_t)o->batches_per_request
                           : reply * 4 <= (size_t)256 << 10 ? 4u
                                                            : 1u;
  reply *= cc.batches_per_request;
  if (o->prefetch > 0)
    cc.prefetch = (uint32_t)o->prefetch;
  else if (reply <= (size_t)256 << 10)
    cc.prefetch = cc.batches_per_request > 1 ? 4 : 8;
  if (cc.max_msg_bytes < reply)
    cc.max_msg_bytes = reply;
  return (L->client = sac_replay_client_new(&cc)) ? 0 : SAC_ENET;
}

static void learner_close(learner_t *L) {
  sac_replay_client_destroy(&L->client);
  sac_weights_pub_destroy(&L->pub);
  sac_destroy(&L->sac);
  sac_backend_destroy(&L->be);
  free(L->actor), free(L->prio), free(L->prev_idx);
}

static int all_finite(const float *w, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!isfinite(w[i]))
      return 0;
  return 1;
}

/* One update as the service does it; the seconds of each stage go to L->stage_s.
 * SAC_ETIMEOUT when no batch came in time (not counted as an update). */
static int learner_step(learner_t *L) {
  const int cpu = L->steps++ % CPU_EVERY == 0;
  double t0 = sac_clock_s(), t1, c[ST_COUNT] = {0};
  if (cpu)
    c[0] = thread_cpu_s();
  sac_replay_batch_t b;
  sac_batch_slots_t sl;
  int rc = L->direct ? sac_batch_slots(L->sac, L->prioritized, &sl) : 0;
  if (rc)
    return rc;
  if (L->direct) { /* as the service: the reply copied straight into the batch, checked */
    sac_replay_stage_t st = {sl.obs, sl.next_obs, sl.action, sl.reward, sl.terminated, sl.weights};
    rc = sac_replay_client_sample_into(L->client, 200, &st, &b);
  } else {
    rc = sac_replay_client_sample(L->client, 200, &b);
  }
  t1 = sac_clock_s();
  L->stage_s[ST_SAMPLE] += t1 - t0;
  if (rc)
    return rc;
  if (cpu)
    c[1] = thread_cpu_s();
  sac_host_batch_t hb = {b.obs,    b.next_obs,   b.action,
                         b.reward, b.terminated, L->prioritized ? b.weights : NULL};
  if ((rc = L->direct ? sac_batch_commit(L->sac) : sac_load_batch(L->sac, &hb, 1)) != 0)
    return rc;
  t0 = sac_clock_s();
  L->stage_s[ST_STAGE] += t0 - t1;
  if (cpu)
    c[2] = thread_cpu_s();
  if ((rc = sac_update(L->sac)) != 0)
    return rc;
  t1 = sac_clock_s();
  L->stage_s[ST_UPDATE] += t1 - t0;
  if (cpu)
    c[3] = thread_cpu_s();
  L->updates++;
  if (L->prioritized) { /* as the service: |td| collected, sent every prio_every updates */
    if ((rc = sac_td_errors(L->sac, L->prio + L->prio_n)) != 0)
      return rc;
    memcpy(L->prev_idx + L->prio_n, b.indices, sizeof(uint64_t) * b.n);
    if ((L->prio_n += b.n) >= L->prio_every * b.n) {
      sac_replay_client_update_priorities(L->client, (size_t)L->prio_n, L->prev_idx, L->prio);
      L->prio_n = 0;
    }
    t0 = sac_clock_s();
    L->stage_s[ST_PRIO] += t0 - t1;
    t1 = t0;
  }
  if (cpu) {
    c[4] = thread_cpu_s();
    for (int k = 0; k < ST_PUBLISH; k++)
      L->cpu_s[k] += c[k + 1] - c[k];
    L->cpu_sampled++;
  }
  if (L->updates - L->last_publish >= L->publish_every && t1 - L->last_publish_s >= L->publish_interval_s) {
    const double p0 = thread_cpu_s();
    L->last_publish = L->updates, L->last_publish_s = t1;
    if ((rc = sac_get_actor(L->sac, L->actor)) != 0)
      return rc;
    if (!all_finite(L->actor, sac_actor_param_count(L->sac)))
      return SAC_ENONFINITE;
    if ((rc = sac_weights_publish(L->pub, (uint64_t)L->updates, L->actor)) != 0)
      return rc;
    L->stage_s[ST_PUBLISH] += sac_clock_s() - t1;
    L->cpu_s[ST_PUBLISH] += thread_cpu_s() - p0;
  }
  return 0;
}

/* Runs the loop for `seconds`; returns updates done, or a negative code. */
static int64_t learner_for(learner_t *L, double seconds) {
  const int64_t u0 = L->updates;
  const double t0 = sac_clock_s();
  int timeouts = 0;
  while (sac_clock_s() - t0 < seconds) {
    int rc = learner_step(L);
    if (rc == SAC_ETIMEOUT && ++timeouts < 25) /* 5 s without a batch: give up */
      continue;
    if (rc)
      return rc;
    timeouts = 0;
  }
  return L->updates - u0;
}

/* ---- one configuration ---- */
typedef struct {
  double ups, tps, ups_lo, ups_hi;
  double stage_s[ST_COUNT], loop_s;
  double actor_rows_s;
  double cpu_us, learner_cpu_us; /* CPU per update: the process, the learner's thread */
  double stage_cpu_us[ST_COUNT]; /* the learner thread's CPU per update, by stage */
} result_t;

static int run_conf(const conf_t *c, const opts_t *o, int id, result_t *r) {
  memset(r, 0, sizeof *r);
  shards_t sh;
  learner_t L;
  actor_t *actors = calloc(MAX_ACTORS, sizeof *actors);
  atomic_int stop = 0;
  int n_started = 0, rc;
  memset(&L, 0, sizeof L);
  if (!actors)
    return SAC_ENOMEM;
  if ((rc = shards_start(&sh, c, o->batch, o->prefill, id)) != 0)
    goto out;
  /* pre-fill so that every shard can serve at once, with or without actors */
  if ((rc = prefill(&sh, o->prefill)) != 0)
    goto out;
  for (int i = 0; i < c->actors; i++, n_started++) {
    actors[i] = (actor_t){.sh = &sh, .id = (uint32_t)i, .rate = o->actor_rate, .rows = 0, .stop = &stop};
    if (pthread_create(&actors[i].tid, NULL, actor_main, &actors[i]) != 0) {
      rc = SAC_ENOMEM;
      goto out;
    }
  }
  if ((rc = learner_open(&L, &sh, c, o, id)) != 0)
    goto out;
  int64_t w;
  if ((w = learner_for(&L, o->seconds < 0.5 ? o->seconds : 0.5)) < 0) { /* warm-up */
    rc = (int)w;
    goto out;
  }
  memset(L.stage_s, 0, sizeof L.stage_s);
  memset(L.cpu_s, 0, sizeof L.cpu_s);
  L.cpu_sampled = 0;
  double ups[MAX_WINDOWS];
  long long sent0 = 0;
  for (int i = 0; i < c->actors; i++)
    sent0 += atomic_load(&actors[i].sent);
  const double t0 = sac_clock_s(), c0 = process_cpu_s(), l0 = thread_cpu_s();
  const int64_t u0 = L.updates;
  for (int k = 0; k < o->windows; k++) {
    double ws = sac_clock_s();
    if ((w = learner_for(&L, o->seconds)) < 0) {
      rc = (int)w;
      goto out;
    }
    ups[k] = (double)w / (sac_clock_s() - ws);
  }
  r->loop_s = sac_clock_s() - t0;
  const double n_upd = (double)(L.updates - u0);
  r->cpu_us = n_upd > 0 ? 1e6 * (process_cpu_s() - c0) / n_upd : NAN;
  r->learner_cpu_us = n_upd > 0 ? 1e6 * (thread_cpu_s() - l0) / n_upd : NAN;
  long long sent1 = 0;
  for (int i = 0; i < c->actors; i++)
    sent1 += atomic_load(&actors[i].sent);
  r->actor_rows_s = (double)(sent1 - sent0) / r->loop_s;
  memcpy(r->stage_s, L.stage_s, sizeof r->stage_s);
  for (int k = 0; k < ST_PUBLISH; k++)
    r->stage_cpu_us[k] = L.cpu_sampled ? 1e6 * L.cpu_s[k] / (double)L.cpu_sampled : NAN;
  r->stage_cpu_us[ST_PUBLISH] = n_upd > 0 ? 1e6 * L.cpu_s[ST_PUBLISH] / n_upd : NAN;
  r->ups_lo = r->ups_hi = ups[0];
  for (int k = 1; k < o->windows; k++)
    r->ups_lo = fmin(r->ups_lo, ups[k]), r->ups_hi = fmax(r->ups_hi, ups[k]);
  r->ups = median(ups, o->windows);
  r->tps = r->ups * o->batch;
out:
  atomic_store(&stop, 1);
  for (int i = 0; i < n_started; i++) {
    pthread_join(actors[i].tid, NULL);
    if (actors[i].rc && !rc)
      rc = actors[i].rc;
  }
  learner_close(&L);
  shards_stop(&sh);
  free(actors);
  return rc;
}

/* ---- an actor's core: environment steps per CPU-second ----
 * One thread steps one environment with actions from a 2 x 256 tanh-Gaussian actor of the
 * learner's shape (random initial weights; sac_policy_act, as sac-actor acts), so the figure
 * is the environment's physics plus the policy's forward pass per step; and the same with
 * uniform random actions (the physics alone). Thread CPU time, median of the windows.
 * Sending (64-row batches) and loading weights are left out: they depend on the shards
 * and the publish rate (docs/SCALING.md measures them with the whole cluster). */
typedef struct {
  double policy_us, physics_us; /* CPU per step */
} env_result_t;

static int env_steps_for(sac_env_t *env, const sac_mlp_desc_t *d, const float *params, double seconds,
                         int policy, float *scratch, sac_rng_t *rng, double *us_per_step) {
  const sac_env_spec_t *sp = sac_env_spec(env);
  float obs[SAC_ENV_MAX_OBS], a[SAC_ENV_MAX_ACT], ea[SAC_ENV_MAX_ACT], r;
  const sac_policy_cfg_t pc = {-20.0f, 2.0f};
  int term = 0, trunc = 0, rc;
  if ((rc = sac_env_reset(env, obs)) != 0)
    return rc;
  const double t0 = sac_clock_s(), c0 = thread_cpu_s();
  int64_t n = 0;
  while (sac_clock_s() - t0 < seconds) {
    if (policy)
      sac_policy_act(d, params, &pc, obs, 1, 0, rng, a, scratch);
    else
      for (int i = 0; i < sp->act_dim; i++)
        a[i] = (float)sac_rng_uniform_range(rng, -1.0, 1.0);
    for (int i = 0; i < sp->act_dim; i++) /* [-1, 1] to the environment's bounds */
      ea[i] = sp->act_low[i] + 0.5f * (a[i] + 1.0f) * (sp->act_high[i] - sp->act_low[i]);
    if ((rc = sac_env_step(env, ea, obs, &r, &term, &trunc)) != 0)
      return rc;
    if ((term || trunc) && (rc = sac_env_reset(env, obs)) != 0)
      return rc;
    n++;
  }
  *us_per_step = n > 0 ? 1e6 * (thread_cpu_s() - c0) / (double)n : NAN;
  return 0;
}

static int env_core(const opts_t *o, env_result_t *out) {
  sac_env_t *env = NULL;
  int rc = sac_env_new(o->env, 1, 0, &env);
  if (rc)
    return rc;
  const sac_env_spec_t *sp = sac_env_spec(env);
  sac_mlp_desc_t d;
  sac_mlp_desc_init(&d, sp->obs_dim, 256, 2, 2 * sp->act_dim, SAC_ACT_RELU, 1);
  float *params = malloc(sizeof(float) * sac_mlp_param_count(&d));
  float *scratch = malloc(sizeof(float) * (2 * (size_t)sac_mlp_max_width(&d) + 4 * (size_t)sp->act_dim));
  sac_rng_t rng;
  sac_rng_init(&rng, 7, 0);
  if (!params || !scratch) {
    rc = SAC_ENOMEM;
    goto out;
  }
  sac_mlp_init_params(&d, params, &rng);
  double pol[MAX_WINDOWS], phy[MAX_WINDOWS];
  for (int k = 0; k < o->windows && rc == 0; k++) {
    rc = env_steps_for(env, &d, params, o->seconds, 1, scratch, &rng, &pol[k]);
    if (rc == 0)
      rc = env_steps_for(env, &d, params, o->seconds, 0, scratch, &rng, &phy[k]);
  }
  if (rc == 0) {
    out->policy_us = median(pol, o->windows);
    out->physics_us = median(phy, o->windows);
  }
out:
  free(params), free(scratch);
  sac_env_destroy(&env);
  return rc;
}

/* ---- the learner service itself: sac_learner_run on the null backend ----
 * The embedded default as `sac-learner --backend null --env ENV` runs it (2 shards, 2
 * actors, one update per environment step, durability none), stopped after the warm-up
 * and the windows; prints its updates/s and the seconds per update of each of its named
 * stages (sac_learner_result_t.stage_seconds). Unlike the tables above, the actors' step
 * rate holds it here (the shards' rate limiter), as in a real run. */
typedef struct {
  sac_learner_cfg_t cfg;
  sac_learner_result_t res;
  atomic_int stop;
  int rc;
} learner_run_t;

static void *learner_run_main(void *arg) {
  learner_run_t *r = arg;
  r->rc = sac_learner_run(&r->cfg, &r->stop, &r->res);
  return NULL;
}

static int learner_service(const opts_t *o) {
  learner_run_t *r = calloc(1, sizeof *r);
  if (!r)
    return SAC_ENOMEM;
  sac_learner_cfg_default(&r->cfg);
  snprintf(r->cfg.env, sizeof r->cfg.env, "%s", o->learner);
  snprintf(r->cfg.backend, sizeof r->cfg.backend, "null");
  snprintf(r->cfg.weights_endpoint, sizeof r->cfg.weights_endpoint, "inproc://bench-service-learner-weights");
  r->cfg.hp.batch = o->batch;
  r->cfg.total_steps = INT64_MAX / 4;
  r->cfg.eval_every = 0;
  r->cfg.eval_episodes = 1;
  r->cfg.log_interval_s = 0;
  r->cfg.quiet = 1;
  r->cfg.durability = SAC_REPLAY_DURABILITY_NONE;
  pthread_t t;
  if (pthread_create(&t, NULL, learner_run_main, r) != 0) {
    free(r);
    return SAC_ENOMEM;
  }
  sac_sleep_ns((uint64_t)((0.5 + o->seconds * o->windows) * 1e9));
  atomic_store(&r->stop, 1);
  pthread_join(t, NULL);
  int rc = r->rc;
  const double n = (double)r->res.updates;
  if (rc == 0 && n > 0) {
    printf("learner service (sac_learner_run, embedded default, --backend null, %s): %lld updates in %.1f s, "
           "%.0f updates/s, %.0f env steps/s; us per update by stage:",
           o->learner, (long long)r->res.updates, r->res.wall_seconds, n / r->res.wall_seconds,
           r->res.env_steps_per_second);
    for (int k = 0; k < SAC_LEARNER_STAGES; k++)
      printf(" %s %.1f", sac_learner_stage_name((sac_learner_stage_t)k), 1e6 * r->res.stage_seconds[k] / n);
    printf("\nRESULT learner_service env=%s updates_per_s=%.1f", o->learner, n / r->res.wall_seconds);
    for (int k = 0; k < SAC_LEARNER_STAGES; k++)
      printf(" %s_us=%.2f", sac_learner_stage_name((sac_learner_stage_t)k),
             1e6 * r->res.stage_seconds[k] / n);
    printf("\n");
  } else if (rc == 0) {
    rc = SAC_ETIMEOUT; /* no update at all */
  }
  free(r);
  return rc;
}

/* ---- options and the table ---- */
static int parse_confs(const char *s, conf_t *out, int cap) {
  int n = 0;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", s);
  for (char *save = NULL, *t = strtok_r(buf, ",", &save); t && n < cap; t = strtok_r(NULL, ",", &save)) {
    int shards = 0;
    if (sscanf(t, "inproc:%d", &shards) == 1)
      out[n] = (conf_t){.tcp = 0, .shards = shards};
    else if (sscanf(t, "tcp:%d", &shards) == 1)
      out[n] = (conf_t){.tcp = 1, .shards = shards};
    else
      return -1;
    if (shards < 1 || shards > MAX_SHARDS)
      return -1;
    n++;
  }
  return n;
}

static int parse_ints(const char *s, int *out, int cap, int max) {
  int n = 0;
  char buf[64];
  snprintf(buf, sizeof buf, "%s", s);
  for (char *save = NULL, *t = strtok_r(buf, ",", &save); t && n < cap; t = strtok_r(NULL, ",", &save)) {
    char *end;
    long v = strtol(t, &end, 10);
    if (*end || v < 0 || v > max)
      return -1;
    out[n++] = (int)v;
  }
  return n;
}

static int parse_samplers(const char *s, int *out) {
  int n = 0;
  char buf[64];
  snprintf(buf, sizeof buf, "%s", s);
  for (char *save = NULL, *t = strtok_r(buf, ",", &save); t && n < 2; t = strtok_r(NULL, ",", &save)) {
    if (!strcmp(t, "uniform"))
      out[n++] = 0;
    else if (!strcmp(t, "prioritized"))
      out[n++] = 1;
    else
      return -1;
  }
  return n;
}

/* Bytes of one encoded sample reply of `batch` rows in this precision (what the shard
 * sends and the client decodes), or 0 when out of memory. */
static size_t reply_size(int batch, uint32_t precision) {
  size_t n = (size_t)batch;
  void *z = calloc(n * (2 * OBS + ACT + 8), 4); /* zeros: only the lengths matter */
  if (!z)
    return 0;
  sac_wire_msg_t m = {.type = SAC_WIRE_SAMPLE_BATCH};
  m.u.sample_batch = (sac_wire_sample_batch_t){.request_id = 1u << 20,
                                               .n = (uint32_t)n,
                                               .obs_dim = OBS,
                                               .act_dim = ACT,
                                               .reward = z,
                                               .terminated = z,
                                               .indices = z,
                                               .weights = z,
                                               .error = "",
                                               .precision = precision};
  if (precision == SAC_WIRE_F16)
    m.u.sample_batch.obs16 = z, m.u.sample_batch.action16 = z, m.u.sample_batch.next_obs16 = z;
  else
    m.u.sample_batch.obs = z, m.u.sample_batch.action = z, m.u.sample_batch.next_obs = z;
  size_t b = sac_wire_encoded_size(&m);
  free(z);
  return b;
}

static void usage(void) {
  fprintf(stderr,
          "usage: sac-bench-service [--seconds S] [--windows W] [--configs inproc:2,tcp:1,tcp:2,tcp:4]\n"
          "  [--samplers uniform,prioritized] [--actors 0,4,16] [--actor_rate STEPS_PER_S]\n"
          "  [--batch B] [--prefetch K] [--publish_every K] [--publish_interval_ms MS]\n"
          "  [--prefill ROWS_PER_SHARD] [--batches_per_request K] [--env ENV_ID]\n"
          "  [--learner ENV_ID] [--sample_precision fp32|fp16] [--intake direct|decode] [--priorities_every "
          "K]\n");
}

static int parse_opts(int argc, char **argv, opts_t *o) {
  *o = (opts_t){.seconds = 1.0,
                .windows = 3,
                .batch = 256,
                .prefetch = 0,
                .publish_every = 10,
                .publish_interval_ms = 50,
                .actor_rate = 1000.0,
                .prefill = 32768};
  snprintf(o->configs, sizeof o->configs, "inproc:2,tcp:1,tcp:2,tcp:4");
  snprintf(o->samplers, sizeof o->samplers, "uniform,prioritized");
  snprintf(o->actors, sizeof o->actors, "0,4,16");
  for (int i = 1; i < argc; i++) {
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) {
      usage();
      return -1;
    }
    if (!strcmp(argv[i], "--seconds"))
      o->seconds = atof(v);
    else if (!strcmp(argv[i], "--windows"))
      o->windows = atoi(v);
    else if (!strcmp(argv[i], "--batch"))
      o->batch = atoi(v);
    else if (!strcmp(argv[i], "--prefetch"))
      o->prefetch = atoi(v);
    else if (!strcmp(argv[i], "--publish_every"))
      o->publish_every = atoi(v);
    else if (!strcmp(argv[i], "--batches_per_request"))
      o->batches_per_request = atoi(v);
    else if (!strcmp(argv[i], "--publish_interval_ms"))
      o->publish_interval_ms = atoi(v);
    else if (!strcmp(argv[i], "--priorities_every"))
      o->prio_every = atoi(v);
    else if (!strcmp(argv[i], "--intake") && (!strcmp(v, "direct") || !strcmp(v, "decode")))
      o->decode = !strcmp(v, "decode");
    else if (!strcmp(argv[i], "--prefill"))
      o->prefill = atoll(v);
    else if (!strcmp(argv[i], "--actor_rate"))
      o->actor_rate = atof(v);
    else if (!strcmp(argv[i], "--configs"))
      snprintf(o->configs, sizeof o->configs, "%s", v);
    else if (!strcmp(argv[i], "--learner"))
      snprintf(o->learner, sizeof o->learner, "%s", v);
    else if (!strcmp(argv[i], "--env"))
      snprintf(o->env, sizeof o->env, "%s", v);
    else if (!strcmp(argv[i], "--samplers"))
      snprintf(o->samplers, sizeof o->samplers, "%s", v);
    else if (!strcmp(argv[i], "--actors"))
      snprintf(o->actors, sizeof o->actors, "%s", v);
    else if (!strcmp(argv[i], "--sample_precision") && (!strcmp(v, "fp32") || !strcmp(v, "fp16")))
      o->precision = !strcmp(v, "fp16") ? SAC_WIRE_F16 : SAC_WIRE_F32;
    else {
      usage();
      return -1;
    }
    i++;
  }
  if (!(o->seconds > 0 && o->seconds <= 60) || o->windows < 1 || o->windows > MAX_WINDOWS || o->batch < 1 ||
      o->batch > 65536 || o->prefetch < 0 || o->prefetch > 64 || o->publish_every < 1 ||
      o->publish_interval_ms < 0 || o->batches_per_request < 0 || o->batches_per_request > 16 ||
      o->publish_interval_ms > 60000 || o->prio_every < 0 || o->prio_every > 64 || o->prefill < o->batch ||
      o->prefill > (1 << 21)) {
    usage();
    return -1;
  }
  return 0;
}

int main(int argc, char **argv) {
  opts_t o;
  if (parse_opts(argc, argv, &o) != 0)
    return 2;
  conf_t confs[16];
  int samplers[2], actor_counts[8];
  int nc = parse_confs(o.configs, confs, 16), ns = parse_samplers(o.samplers, samplers),
      na = parse_ints(o.actors, actor_counts, 8, MAX_ACTORS);
  if (nc < 1 || ns < 1 || na < 1) {
    usage();
    return 2;
  }
  sac_log_set_level(SAC_LOG_WARN);
  const double reply_bytes = (double)reply_size(o.batch, o.precision);
  const double gbs = memcpy_gbs();
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  printf("sac-bench-service: null learner, cheetah sizes (obs %d, act %d), batch %d, %d window(s) of %.2f s, "
         "publish after %d updates and %d ms, actors at %.0f steps/s each, %ld core(s), intake %s\n",
         OBS, ACT, o.batch, o.windows, o.seconds, o.publish_every, o.publish_interval_ms, o.actor_rate, cores,
         o.decode ? "decode" : "direct");
  printf("yardstick: memcpy %.2f GB/s (64 MiB, median of 5); a sample reply is %.0f bytes (obs/action %s)\n",
         gbs, reply_bytes, o.precision == SAC_WIRE_F16 ? "fp16" : "fp32");
  printf("%-9s %6s %-11s %6s %10s %12s %9s %9s %8s %8s %9s  %s\n", "transport", "shards", "sampler", "actors",
         "updates/s", "transitions/s", "MB/s in", "x memcpy", "cpu us/u", "lrn us/u", "u/core-s",
         "wait | learner CPU us/update: sample stage update priorities publish");
  int failed = 0, id = 0;
  if (o.learner[0]) {
    int rc = learner_service(&o);
    if (rc) {
      printf("learner service on %s: failed: %s%s\n", o.learner, sac_strerror(rc),
             rc == SAC_ETIMEOUT ? " (no update in the run: the actors had not stored learning_starts "
                                  "steps yet; give it more --seconds or --windows)"
                                : "");
      failed = 1;
    }
  }
  if (o.env[0]) {
    env_result_t er;
    int rc = env_core(&o, &er);
    if (rc) {
      printf("actor core on %s: failed: %s\n", o.env, sac_strerror(rc));
      failed = 1;
    } else {
      printf("actor core on %s: %.1f us CPU per step with a 2 x 256 policy (%.0f steps per core-second), "
             "%.1f us with random actions (%.0f)\n",
             o.env, er.policy_us, 1e6 / er.policy_us, er.physics_us, 1e6 / er.physics_us);
      printf("RESULT actor_core env=%s policy_us_per_step=%.2f physics_us_per_step=%.2f\n", o.env,
             er.policy_us, er.physics_us);
    }
  }
  for (int i = 0; i < nc; i++)
    for (int s = 0; s < ns; s++)
      for (int a = 0; a < na; a++) {
        conf_t c = confs[i];
        c.prioritized = samplers[s];
        c.actors = actor_counts[a];
        result_t r;
        int rc = run_conf(&c, &o, id++, &r);
        const char *tr = c.tcp ? "tcp" : "inproc", *sm = c.prioritized ? "prioritized" : "uniform";
        if (rc) {
          printf("%-9s %6d %-11s %6d   failed: %s\n", tr, c.shards, sm, c.actors, sac_strerror(rc));
          failed = 1;
          continue;
        }
        double in_mbs = r.ups * reply_bytes / 1e6;
        char prof[160];
        int off = snprintf(prof, sizeof prof, " %4.0f%% |", 100.0 * r.stage_s[ST_SAMPLE] / r.loop_s);
        for (int k = 0; k < ST_COUNT; k++)
          off += snprintf(prof + off, sizeof prof - (size_t)off, " %5.1f", r.stage_cpu_us[k]);
        printf("%-9s %6d %-11s %6d %10.0f %12.0f %9.1f %9.4f %8.1f %8.1f %9.0f %s\n", tr, c.shards, sm,
               c.actors, r.ups, r.tps, in_mbs, in_mbs / 1e3 / gbs, r.cpu_us, r.learner_cpu_us, 1e6 / r.cpu_us,
               prof);
        printf("RESULT transport=%s shards=%d sampler=%s actors=%d updates_per_s=%.1f updates_per_s_min=%.1f "
               "updates_per_s_max=%.1f transitions_per_s=%.0f actor_rows_per_s=%.0f memcpy_gbs=%.3f "
               "cpu_us_per_update=%.2f "
               "learner_cpu_us_per_update=%.2f",
               tr, c.shards, sm, c.actors, r.ups, r.ups_lo, r.ups_hi, r.tps, r.actor_rows_s, gbs, r.cpu_us,
               r.learner_cpu_us);
        for (int k = 0; k < ST_COUNT; k++)
          printf(" %s_us=%.2f", k_stage_names[k], r.ups > 0 ? 1e6 * r.stage_s[k] / (r.ups * r.loop_s) : 0.0);
        for (int k = 0; k < ST_COUNT; k++)
          printf(" %s_cpu_us=%.2f", k_stage_names[k], r.stage_cpu_us[k]);
        printf("\n");
        fflush(stdout);
        if (!(isfinite(r.ups) && r.ups > 0))
          failed = 1;
      }
  return failed;
}
