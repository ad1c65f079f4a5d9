/* sac-bench-service: the feed a GPU learner meets. How many updates per second the
 * learner's service can feed when the update itself costs nothing (the null backend,
 * learner/backend_null.c), so that what is measured is everything around it: sampling
 * from the shards, taking the replies in, staging the batch, priority updates, weight
 * broadcasts, and the inserts and durable log that keep the replay moving.
 *
 * Each row runs S shard servers in this process (replay/server.h, each on its own thread:
 * over inproc:// as in the embedded default, or over loopback TCP on 127.0.0.1 ports the
 * shards choose), uniform or prioritised, `cheetah` sizes (obs 17, act 6) at batch 256
 * (--batch), in one of two settings (--settings):
 *
 *   realistic, the headline: what a GPU learner meets in a HalfCheetah run.
 *   - --filled transitions (default 1,000,000) per learner, spread evenly over the shards
 *     (about 101 MB: every sampled row is a cache miss), in rings that are full and keep
 *     overwriting their oldest rows;
 *   - the shards' rate limiter at the learner's replay ratio (--samples_per_insert, default
 *     the batch: one update per environment step) with the error buffer the learner's own
 *     shards get (learner/service.c). Its min_size is the filled rows, so that the limiter
 *     starts where a long run has it, at the centre of its window;
 *   - inserts keeping pace: --inserters threads (default one per shard, each on its own
 *     shard) streaming 64-row batches of synthetic transitions (tests/replay_testgen.h) as
 *     fast as the limiter lets them, so inserts run at updates x batch / samples_per_insert
 *     rows/s ("pace" in the table: 1.00 when they kept up). They stand in for actors:
 *     HalfCheetah actors take 40-70 us of CPU per step (--env prints it), so at 20,000
 *     updates/s real ones would need more cores than a 2-core machine has beside the learner
 *     and the shards;
 *   - the shards' default durability (--durability wal: every stored batch appended to a
 *     write-ahead log and acknowledged only once an fsync covers it, group commits every
 *     2 ms, snapshots every 60 s), the files in a fresh directory under --dir (default
 *     $TMPDIR, else /var/tmp), removed after each row. The header names that directory's
 *     filesystem and warns when it is tmpfs or ramfs, where an fsync costs nothing;
 *   - the intake of the CUDA backend (--intake, below).
 *   easy, a labelled row: 32,768 rows per shard (L3-resident), limiter off, no inserts,
 *   durability none, direct intake: the ceiling of the service's code, not a rate a run
 *   reaches.
 *
 * Intake (--intake, realistic rows): direct, each reply copied once, straight from the
 * message into the batch the update reads and checked as it is copied (sac_batch_slots,
 * sac_replay_client_sample_into): the path of a backend with stage_at (cpu, null, and cuda,
 * whose batch is its pinned staging buffer: BENCH_CUDA_INTAKE below), the default; decode,
 * each reply decoded into the replay client's memory and checked there, then staged
 * (sac_load_batch: copied into the backend's staging buffer), the fallback of a backend
 * without stage_at.
 *
 * The learner loop is the service's per-update path (learner/service.c): sample from the
 * prefetching replay client, stage, update, send the priorities (prioritised: collected
 * and sent every --priorities_every updates), and, once at least --publish_every updates and
 * --publish_interval_ms have passed since the last broadcast (the learner's two bounds and
 * defaults), copy the actor's weights out, check them and publish them on an inproc:// XPUB
 * port (no subscriber: the send cost only).
 *
 * Figures: updates/s, the median over --runs runs (each the median of --windows windows of
 * --seconds after a warm-up; the runs go over every row in turn, so that a change in the
 * machine's load falls on all rows alike), with the runs' lowest and highest; the CPU time per
 * update of the whole process (learner, shards, inserters, ZeroMQ's I/O thread; what the rate
 * scales with on more cores) and of the learner's thread, by stage (sample, stage, update,
 * priorities, publish); and two yardsticks measured in the same run: memcpy bandwidth over
 * 64 MiB, and a plain random gather of the same rows (a batch of rows, each its observation,
 * next observation, action and reward, picked uniformly from arrays of the row count filled,
 * in the shards' layout), in us per batch. The gather is measured again before each round
 * of runs (a virtual machine's speed swings by up to 1.5x within minutes), and printed
 * beside each run's figure: "x gather" is the median over the runs of each run's process
 * CPU per update over the gather measured just before it, and the gather column the
 * median of those gathers.
 * One "RESULT" line per row is for scripts (tests/test_bench_service.sh): it names the row's
 * whole configuration beside updates_per_s. The process exits 1 when a row produced no
 * positive finite figure.
 *
 * Usage: sac-bench-service [--runs N (default 3)] [--seconds S (default 1)]
 *   [--windows W (default 3)] [--settings realistic,easy] [--configs tcp:2,inproc:2
 *   (transport:shards, each 1..8)] [--samplers uniform,prioritized] [--batch B (default 256)]
 *   realistic rows: [--filled ROWS (default 1000000, over the shards)]
 *   [--samples_per_insert X (default: the batch; 0: limiter off)]
 *   [--inserters N (default: one per shard; 0: none)] [--insert_rate ROWS_PER_S (each
 *    inserter; default 0: as fast as the limiter lets them)] [--durability wal|snapshot|none]
 *   [--dir PATH] [--intake direct|decode (default: the CUDA backend's, direct)]
 *   the learner's loop: [--prefetch K (requests in flight per shard; default as the learner:
 *    for replies of at most 256 KB, 4 with several batches a reply and 8 with one)]
 *   [--publish_every K (default 10)] [--publish_interval_ms MS (default 50; 0: by count only)]
 *   [--batches_per_request K (default as the learner: 4 where a reply of four takes at most
 *    256 KB, else 1)] [--priorities_every K (default as the learner: 4, fewer where 4 batches
 *    pass 1024 rows)] [--sample_precision fp32|fp16 (obs/action/next_obs in sample replies)]
 *   extras: [--env ENV_ID: an actor core's CPU per step on ENV_ID, e.g. HalfCheetah-v5]
 *   [--learner ENV_ID: also sac_learner_run itself, embedded, on the null backend, with the
 *    seconds per update of each of its named stages] */
#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/vfs.h>
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
#include "replay/ratelimit.h"
#include "replay/server.h"
#include "tests/replay_testgen.h"

#define OBS 17
#define ACT 6
#define MAX_SHARDS 8
#define MAX_INSERTERS 64
#define MAX_WINDOWS 32
#define MAX_RUNS 15
#define MAX_ROWS 32
#define INSERT_ROWS 64
#define EASY_ROWS_PER_SHARD 32768
/* The intake the CUDA backend takes by default: direct, since it has stage_at
 * (learner/backend_cuda.cu: replies copied straight into its pinned staging buffer). */
#define BENCH_CUDA_INTAKE_DECODE 0

/* ---- options ---- */
typedef struct {
  int runs, windows, batch, prefetch, publish_every;
  double seconds;
  int publish_interval_ms; /* --publish_interval_ms: the learner's time bound (0: by count only) */
  int batches_per_request; /* --batches_per_request: batches per sample reply (0: as the learner) */
  int prio_every;          /* --priorities_every (0: as the learner) */
  int decode;              /* --intake decode (realistic rows) */
  int64_t filled;          /* --filled: realistic rows' transitions over the shards */
  double spi;              /* --samples_per_insert (< 0: the batch) */
  int inserters;           /* --inserters (< 0: one per shard) */
  double insert_rate;      /* --insert_rate per inserter (<= 0: as the limiter lets them) */
  sac_replay_durability_t durability;
  char dir[512];
  char settings[64], configs[256], samplers[64];
  char env[256];      /* "": no actor-core figure */
  char learner[256];  /* "": no run of the learner service itself */
  uint32_t precision; /* --sample_precision: SAC_WIRE_F32 or SAC_WIRE_F16 */
} opts_t;

/* One row of the table: its whole configuration. */
typedef struct {
  int easy; /* the easy setting (else realistic) */
  int tcp, shards, prioritized;
  int64_t rows_per_shard; /* filled before the learner starts */
  double spi;             /* samples per insert; 0: limiter off */
  int inserters;
  double insert_rate; /* rows/s per inserter; <= 0: keeping pace (held by the limiter) */
  sac_replay_durability_t durability;
  int decode;
} conf_t;

static int64_t conf_filled(const conf_t *c) { return c->rows_per_shard * c->shards; }
static const char *conf_setting(const conf_t *c) { return c->easy ? "easy" : "realistic"; }
static const char *conf_transport(const conf_t *c) { return c->tcp ? "tcp" : "inproc"; }
static const char *conf_sampler(const conf_t *c) { return c->prioritized ? "prioritized" : "uniform"; }
static const char *conf_intake(const conf_t *c) { return c->decode ? "decode" : "direct"; }

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

/* CPU seconds of the whole process (every thread: learner, shards, inserters, ZeroMQ's
 * I/O thread) and of the calling thread. On a machine shared with other work the
 * wall-clock rate moves with the load; the CPU time per update moves much less, and it is
 * what the figure scales with: N cores give at most N / (CPU seconds per update) updates/s. */
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

/* ---- the yardsticks ---- */

/* memcpy GB/s over 64 MiB, median of 5. */
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

/* A plain random gather of the rows a sample reads, in us per batch of `batch` (median of
 * 5 repetitions of 1000 batches): arrays of `rows` rows in the shards' layout (observation
 * rows, action rows, rewards, the next observation's row), and per picked row a copy of its
 * observation, next observation, action and reward into a batch, with no asking ahead: the
 * memory work of a sample and nothing else. The arrays are made and filled once
 * (gather_open) and measured before each round of runs (gather_us). */
typedef struct {
  size_t n;
  int batch;
  float *obs, *act, *rew, *out;
  uint32_t *next, *pick;
  sac_rng_t rng;
} gather_t;

static void gather_close(gather_t *g) {
  free(g->obs), free(g->act), free(g->rew), free(g->out), free(g->next), free(g->pick);
  memset(g, 0, sizeof *g);
}

/* 0, or -1 when out of memory (then g holds nothing and gather_us is NAN) */
static int gather_open(gather_t *g, int64_t rows, int batch) {
  const size_t n = (size_t)rows;
  *g = (gather_t){.n = n, .batch = batch};
  g->obs = malloc(n * OBS * sizeof(float)), g->act = malloc(n * ACT * sizeof(float));
  g->rew = malloc(n * sizeof(float)), g->out = malloc((size_t)batch * (2 * OBS + ACT + 1) * sizeof(float));
  g->next = malloc(n * sizeof(uint32_t)), g->pick = malloc((size_t)batch * sizeof(uint32_t));
  if (!g->obs || !g->act || !g->rew || !g->out || !g->next || !g->pick) {
    gather_close(g);
    return -1;
  }
  for (size_t i = 0; i < n * OBS; i++)
    g->obs[i] = (float)(i % 977);
  for (size_t i = 0; i < n * ACT; i++)
    g->act[i] = (float)(i % 883);
  for (size_t i = 0; i < n; i++)
    g->rew[i] = (float)i, g->next[i] = (uint32_t)((i + 1) % n);
  sac_rng_init(&g->rng, 11, 0);
  return 0;
}

static double gather_us(gather_t *g) {
  if (!g->obs)
    return NAN;
  const int batch = g->batch;
  double r[5], sink = 0;
  for (int k = 0; k < 5; k++) {
    const int reps = 1000;
    double t0 = sac_clock_s();
    for (int rep = 0; rep < reps; rep++) {
      for (int i = 0; i < batch; i++)
        g->pick[i] = sac_rng_below32(&g->rng, (uint32_t)g->n);
      float *o = g->out, *no = o + (size_t)batch * OBS, *a = no + (size_t)batch * OBS,
            *rw = a + (size_t)batch * ACT;
      for (int i = 0; i < batch; i++) {
        const uint32_t s = g->pick[i];
        memcpy(o + (size_t)i * OBS, g->obs + (size_t)s * OBS, OBS * sizeof(float));
        memcpy(no + (size_t)i * OBS, g->obs + (size_t)g->next[s] * OBS, OBS * sizeof(float));
        memcpy(a + (size_t)i * ACT, g->act + (size_t)s * ACT, ACT * sizeof(float));
        rw[i] = g->rew[s];
      }
      sink += g->out[rep % batch];
    }
    r[k] = 1e6 * (sac_clock_s() - t0) / reps;
  }
  volatile double keep = sink;
  (void)keep;
  return median(r, 5);
}

/* ---- where the shards keep their files ---- */

/* The name of the filesystem under path ("?" when unknown), and whether an fsync there
 * reaches a device: tmpfs and ramfs keep everything in memory. */
static const char *fs_name(const char *path, int *in_memory) {
  struct statfs sf;
  *in_memory = 0;
  if (statfs(path, &sf) != 0)
    return "?";
  switch ((unsigned long)sf.f_type) {
  case 0xEF53UL:
    return "ext4";
  case 0x58465342UL:
    return "xfs";
  case 0x9123683EUL:
    return "btrfs";
  case 0x794C7630UL:
    return "overlayfs";
  case 0x01021994UL:
    *in_memory = 1;
    return "tmpfs";
  case 0x858458F6UL:
    *in_memory = 1;
    return "ramfs";
  default:
    return "other";
  }
}

/* Removes the plain files in dir (a shard's snapshot, log and lock); the directory stays. */
static void dir_empty(const char *dir) {
  DIR *d = opendir(dir);
  if (!d)
    return;
  char p[1100];
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
      continue;
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    unlink(p);
  }
  closedir(d);
}

/* ---- the shards ---- */
typedef struct {
  sac_net_ctx_t *ctx;
  sac_replay_server_t *srv[MAX_SHARDS];
  const char *ins[MAX_SHARDS], *smp[MAX_SHARDS];
  int n;
} shards_t;

/* Batches a sample reply carries, as the learner asks for them (learner/service.c): four
 * where four take at most 256 KB, else one. */
static uint32_t batches_per_request(const opts_t *o) {
  size_t reply = (size_t)o->batch * ((2 * OBS + ACT + 3) * 4 + 8) + 4096; /* fp32: the larger */
  return o->batches_per_request > 0       ? (uint32_t)o->batches_per_request
         : reply * 4 <= (size_t)256 << 10 ? 4u
                                          : 1u;
}

/* The error buffer the learner's own shards get (learner/service.c): the limiter's
 * automatic one for min_size = learning_starts / shards. */
static double learner_error_buffer(const conf_t *c, int batch, uint32_t max_sample_batch) {
  sac_learner_cfg_t lc;
  sac_learner_cfg_default(&lc);
  uint64_t min_size = (uint64_t)(lc.learning_starts / c->shards);
  if (min_size < (uint64_t)batch)
    min_size = (uint64_t)batch;
  sac_replay_limiter_t l;
  sac_replay_limiter_init(&l, c->spi, min_size, 0.0, INSERT_ROWS, max_sample_batch);
  return l.error_buffer;
}

static int shards_start(shards_t *s, const conf_t *c, const opts_t *o, const char *dir, int id) {
  memset(s, 0, sizeof *s);
  s->n = c->shards;
  if (!(s->ctx = sac_net_ctx_new(1)))
    return SAC_ENOMEM;
  const uint32_t max_sample = (uint32_t)o->batch * batches_per_request(o);
  for (int i = 0; i < s->n; i++) {
    sac_replay_server_config_t sc;
    sac_replay_server_config_default(&sc);
    sc.shard.shard_id = (uint32_t)i;
    sc.shard.obs_dim = OBS;
    sc.shard.act_dim = ACT;
    sc.shard.max_sample_batch = max_sample;
    sc.shard.sampler = c->prioritized ? SAC_REPLAY_PRIORITIZED : SAC_REPLAY_UNIFORM;
    if (c->spi > 0) {
      /* full and overwriting: room for the filled rows and their observation-only slots
       * (one per episode end, ~1.5% with the generator's episodes) and no more */
      sc.shard.capacity = (uint64_t)c->rows_per_shard + (uint64_t)c->rows_per_shard / 32 + 4 * INSERT_ROWS;
      sc.shard.samples_per_insert = c->spi;
      sc.shard.min_size = (uint64_t)c->rows_per_shard;
      sc.shard.error_buffer = learner_error_buffer(c, o->batch, max_sample);
    } else {
      sc.shard.capacity = (uint64_t)(c->rows_per_shard * 2 > (1 << 16) ? c->rows_per_shard * 2 : 1 << 16);
      sc.shard.min_size = (uint64_t)o->batch;
    }
    if (sc.shard.max_batch_rows > sc.shard.capacity / 4) /* a small --filled */
      sc.shard.max_batch_rows = (uint32_t)(sc.shard.capacity / 4);
    sc.durability = c->durability;
    if (c->durability != SAC_REPLAY_DURABILITY_NONE)
      snprintf(sc.snapshot_path, sizeof sc.snapshot_path, "%.1000s/shard-%d.snap", dir, i);
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

/* ---- inserters: insert clients streaming 64-row batches ---- */
typedef struct {
  const shards_t *sh;
  uint32_t id;
  int shard;    /* the shard it inserts into; < 0: round-robin over all */
  double rate;  /* rows/s; <= 0: as fast as the shards take them (the limiter paces them) */
  int64_t rows; /* > 0: insert this many, then return (the fill) */
  atomic_int *stop;
  atomic_llong sent;
  int rc;
  pthread_t tid;
} inserter_t;

static void *inserter_main(void *arg) {
  inserter_t *a = arg;
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
  tg_init(&g, a->id, 1, OBS, ACT, 100, INSERT_ROWS);
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
    int rc = sac_replay_client_insert(cl, a->shard, tg_next(&g), 100);
    if (rc == SAC_ETIMEOUT)
      continue;
    if (rc) {
      a->rc = rc;
      break;
    }
    sent += INSERT_ROWS;
    atomic_store(&a->sent, sent);
  }
  if (a->rows > 0 && a->rc == 0)
    a->rc = sac_replay_client_flush(cl, 60000);
  sac_replay_client_destroy(&cl);
  tg_free(&g);
  return NULL;
}

/* Fills every shard with rows_per_shard transitions (a multiple of INSERT_ROWS: with the
 * limiter on, exactly its min_size), one insert client per shard on threads of their own,
 * and waits for the acks (durable ones: the log's fsyncs). */
static int fill(const shards_t *sh, int64_t rows_per_shard) {
  atomic_int stop = 0;
  inserter_t a[MAX_SHARDS];
  int rc = 0, started = 0;
  for (int i = 0; i < sh->n; i++, started++) {
    a[i] =
        (inserter_t){.sh = sh, .id = 1000u + (uint32_t)i, .shard = i, .rows = rows_per_shard, .stop = &stop};
    if (pthread_create(&a[i].tid, NULL, inserter_main, &a[i]) != 0) {
      rc = SAC_ENOMEM;
      atomic_store(&stop, 1);
      break;
    }
  }
  for (int i = 0; i < started; i++) {
    pthread_join(a[i].tid, NULL);
    if (a[i].rc && !rc)
      rc = a[i].rc;
  }
  return rc;
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
  L->direct = !c->decode;
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
  cc.batches_per_request = batches_per_request(o);
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

/* ---- one row ---- */
typedef struct {
  double ups, tps, ups_lo, ups_hi; /* median of the windows, their lowest and highest */
  double stage_s[ST_COUNT], loop_s;
  double inserted_rows_s;        /* rows the inserters had acknowledged per second */
  double cpu_us, learner_cpu_us; /* CPU per update: the process, the learner's thread */
  double stage_cpu_us[ST_COUNT]; /* the learner thread's CPU per update, by stage */
  double fill_s;                 /* seconds the fill took (acknowledged, so durable) */
  double gather_us;              /* the plain gather's us per batch, measured just before the run */
  double cpu_per_gather;         /* cpu_us / gather_us (over runs: the median of the runs' ratios) */
} result_t;

static int start_inserters(const conf_t *c, const shards_t *sh, atomic_int *stop, inserter_t *ins,
                           int *started) {
  for (int i = 0; i < c->inserters; i++, (*started)++) {
    ins[i] = (inserter_t){
        .sh = sh, .id = (uint32_t)i, .shard = i % c->shards, .rate = c->insert_rate, .rows = 0, .stop = stop};
    if (pthread_create(&ins[i].tid, NULL, inserter_main, &ins[i]) != 0)
      return SAC_ENOMEM;
  }
  return 0;
}

static long long inserted_rows(const inserter_t *ins, int n) {
  long long s = 0;
  for (int i = 0; i < n; i++)
    s += atomic_load(&ins[i].sent);
  return s;
}

/* The windows after the warm-up: updates/s of each, CPU and stage times over all. */
static int measure(learner_t *L, const conf_t *c, const opts_t *o, const inserter_t *ins, result_t *r) {
  int64_t w;
  if ((w = learner_for(L, o->seconds < 0.5 ? o->seconds : 0.5)) < 0) /* warm-up */
    return (int)w;
  memset(L->stage_s, 0, sizeof L->stage_s);
  memset(L->cpu_s, 0, sizeof L->cpu_s);
  L->cpu_sampled = 0;
  double ups[MAX_WINDOWS];
  const long long sent0 = inserted_rows(ins, c->inserters);
  const double t0 = sac_clock_s(), c0 = process_cpu_s(), l0 = thread_cpu_s();
  const int64_t u0 = L->updates;
  for (int k = 0; k < o->windows; k++) {
    double ws = sac_clock_s();
    if ((w = learner_for(L, o->seconds)) < 0)
      return (int)w;
    ups[k] = (double)w / (sac_clock_s() - ws);
  }
  r->loop_s = sac_clock_s() - t0;
  const double n_upd = (double)(L->updates - u0);
  r->cpu_us = n_upd > 0 ? 1e6 * (process_cpu_s() - c0) / n_upd : NAN;
  r->learner_cpu_us = n_upd > 0 ? 1e6 * (thread_cpu_s() - l0) / n_upd : NAN;
  r->inserted_rows_s = (double)(inserted_rows(ins, c->inserters) - sent0) / r->loop_s;
  memcpy(r->stage_s, L->stage_s, sizeof r->stage_s);
  for (int k = 0; k < ST_PUBLISH; k++)
    r->stage_cpu_us[k] = L->cpu_sampled ? 1e6 * L->cpu_s[k] / (double)L->cpu_sampled : NAN;
  r->stage_cpu_us[ST_PUBLISH] = n_upd > 0 ? 1e6 * L->cpu_s[ST_PUBLISH] / n_upd : NAN;
  r->ups_lo = r->ups_hi = ups[0];
  for (int k = 1; k < o->windows; k++)
    r->ups_lo = fmin(r->ups_lo, ups[k]), r->ups_hi = fmax(r->ups_hi, ups[k]);
  r->ups = median(ups, o->windows);
  r->tps = r->ups * o->batch;
  return 0;
}

/* One row: shards started (their files in dir), filled, inserters and the learner
 * started, measured, everything stopped and the files removed. */
static int run_conf(const conf_t *c, const opts_t *o, const char *dir, int id, result_t *r) {
  memset(r, 0, sizeof *r);
  shards_t sh;
  learner_t L;
  inserter_t *ins = calloc(MAX_INSERTERS, sizeof *ins);
  atomic_int stop = 0;
  int n_started = 0, rc;
  memset(&L, 0, sizeof L);
  if (!ins)
    return SAC_ENOMEM;
  if ((rc = shards_start(&sh, c, o, dir, id)) != 0)
    goto out;
  const double f0 = sac_clock_s();
  if ((rc = fill(&sh, c->rows_per_shard)) != 0)
    goto out;
  r->fill_s = sac_clock_s() - f0;
  if ((rc = start_inserters(c, &sh, &stop, ins, &n_started)) != 0 ||
      (rc = learner_open(&L, &sh, c, o, id)) != 0)
    goto out;
  rc = measure(&L, c, o, ins, r);
out:
  atomic_store(&stop, 1);
  for (int i = 0; i < n_started; i++) {
    pthread_join(ins[i].tid, NULL);
    if (ins[i].rc && !rc)
      rc = ins[i].rc;
  }
  learner_close(&L);
  shards_stop(&sh);
  if (dir)
    dir_empty(dir);
  free(ins);
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
    printf("\nRESULT learner_service env=%s transport=inproc shards=%d sampler=uniform durability=none "
           "updates_per_s=%.1f",
           o->learner, r->cfg.embedded_shards, n / r->res.wall_seconds);
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

/* "tcp:2,inproc:2" -> transports and shard counts in out (tcp, shards only). */
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

/* A comma-separated list of words from names[0..k) -> their positions in out. */
static int parse_words(const char *s, const char *const *names, int k, int *out, int cap) {
  int n = 0;
  char buf[64];
  snprintf(buf, sizeof buf, "%s", s);
  for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    int j = 0;
    while (j < k && strcmp(t, names[j]))
      j++;
    if (j == k || n == cap)
      return -1;
    out[n++] = j;
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
          "usage: sac-bench-service [--runs N] [--seconds S] [--windows W] [--settings realistic,easy]\n"
          "  [--configs tcp:2,inproc:2] [--samplers uniform,prioritized] [--batch B]\n"
          "  realistic rows: [--filled ROWS] [--samples_per_insert X] [--inserters N] [--insert_rate "
          "ROWS_PER_S]\n"
          "  [--durability wal|snapshot|none] [--dir PATH] [--intake decode|direct]\n"
          "  the learner's loop: [--prefetch K] [--publish_every K] [--publish_interval_ms MS]\n"
          "  [--batches_per_request K] [--priorities_every K] [--sample_precision fp32|fp16]\n"
          "  extras: [--env ENV_ID] [--learner ENV_ID]\n");
}

static int parse_opts(int argc, char **argv, opts_t *o) {
  *o = (opts_t){.runs = 3,
                .seconds = 1.0,
                .windows = 3,
                .batch = 256,
                .publish_every = 10,
                .publish_interval_ms = 50,
                .decode = BENCH_CUDA_INTAKE_DECODE,
                .filled = 1000000,
                .spi = -1.0,
                .inserters = -1,
                .durability = SAC_REPLAY_DURABILITY_WAL};
  const char *tmp = getenv("TMPDIR");
  snprintf(o->dir, sizeof o->dir, "%s", tmp && tmp[0] ? tmp : "/var/tmp");
  snprintf(o->settings, sizeof o->settings, "realistic,easy");
  snprintf(o->configs, sizeof o->configs, "tcp:2,inproc:2");
  snprintf(o->samplers, sizeof o->samplers, "uniform,prioritized");
  for (int i = 1; i < argc; i++) {
    const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) {
      usage();
      return -1;
    }
    if (!strcmp(k, "--runs"))
      o->runs = atoi(v);
    else if (!strcmp(k, "--seconds"))
      o->seconds = atof(v);
    else if (!strcmp(k, "--windows"))
      o->windows = atoi(v);
    else if (!strcmp(k, "--batch"))
      o->batch = atoi(v);
    else if (!strcmp(k, "--prefetch"))
      o->prefetch = atoi(v);
    else if (!strcmp(k, "--publish_every"))
      o->publish_every = atoi(v);
    else if (!strcmp(k, "--batches_per_request"))
      o->batches_per_request = atoi(v);
    else if (!strcmp(k, "--publish_interval_ms"))
      o->publish_interval_ms = atoi(v);
    else if (!strcmp(k, "--priorities_every"))
      o->prio_every = atoi(v);
    else if (!strcmp(k, "--intake") && (!strcmp(v, "direct") || !strcmp(v, "decode")))
      o->decode = !strcmp(v, "decode");
    else if (!strcmp(k, "--filled"))
      o->filled = atoll(v);
    else if (!strcmp(k, "--samples_per_insert"))
      o->spi = atof(v);
    else if (!strcmp(k, "--inserters"))
      o->inserters = atoi(v);
    else if (!strcmp(k, "--insert_rate"))
      o->insert_rate = atof(v);
    else if (!strcmp(k, "--durability") && sac_replay_durability_parse(v, &o->durability) == 0)
      ;
    else if (!strcmp(k, "--dir"))
      snprintf(o->dir, sizeof o->dir, "%s", v);
    else if (!strcmp(k, "--settings"))
      snprintf(o->settings, sizeof o->settings, "%s", v);
    else if (!strcmp(k, "--configs"))
      snprintf(o->configs, sizeof o->configs, "%s", v);
    else if (!strcmp(k, "--samplers"))
      snprintf(o->samplers, sizeof o->samplers, "%s", v);
    else if (!strcmp(k, "--learner"))
      snprintf(o->learner, sizeof o->learner, "%s", v);
    else if (!strcmp(k, "--env"))
      snprintf(o->env, sizeof o->env, "%s", v);
    else if (!strcmp(k, "--sample_precision") && (!strcmp(v, "fp32") || !strcmp(v, "fp16")))
      o->precision = !strcmp(v, "fp16") ? SAC_WIRE_F16 : SAC_WIRE_F32;
    else {
      usage();
      return -1;
    }
    i++;
  }
  if (o->spi < 0)
    o->spi = o->batch; /* the learner's: batch x one update per environment step */
  if (o->runs < 1 || o->runs > MAX_RUNS || !(o->seconds > 0 && o->seconds <= 60) || o->windows < 1 ||
      o->windows > MAX_WINDOWS || o->batch < 1 || o->batch > 65536 || o->prefetch < 0 || o->prefetch > 64 ||
      o->publish_every < 1 || o->publish_interval_ms < 0 || o->batches_per_request < 0 ||
      o->batches_per_request > 16 || o->publish_interval_ms > 60000 || o->prio_every < 0 ||
      o->prio_every > 64 || o->filled < 2 * (int64_t)o->batch || o->filled > ((int64_t)1 << 24) ||
      !(o->spi >= 0 && o->spi <= 1e6) || o->inserters > MAX_INSERTERS || !(o->insert_rate >= 0)) {
    usage();
    return -1;
  }
  return 0;
}

/* The rows, in table order: each setting, then transport and shards, then sampler. */
static int make_rows(const opts_t *o, conf_t *rows, int cap) {
  static const char *const settings[] = {"realistic", "easy"}, *const samplers[] = {"uniform", "prioritized"};
  conf_t tr[16];
  int set[2], smp[2];
  int nt = parse_confs(o->configs, tr, 16), nset = parse_words(o->settings, settings, 2, set, 2),
      ns = parse_words(o->samplers, samplers, 2, smp, 2), n = 0;
  if (nt < 1 || nset < 1 || ns < 1)
    return -1;
  for (int a = 0; a < nset; a++)
    for (int t = 0; t < nt; t++)
      for (int s = 0; s < ns && n < cap; s++) {
        conf_t c = tr[t];
        c.prioritized = smp[s];
        c.easy = set[a];
        if (c.easy) {
          c.rows_per_shard = EASY_ROWS_PER_SHARD;
          c.durability = SAC_REPLAY_DURABILITY_NONE;
        } else {
          /* the filled rows spread evenly, in whole insert batches */
          c.rows_per_shard = (o->filled / c.shards + INSERT_ROWS / 2) / INSERT_ROWS * INSERT_ROWS;
          if (c.rows_per_shard < INSERT_ROWS)
            c.rows_per_shard = INSERT_ROWS;
          c.spi = o->spi;
          c.inserters = o->inserters < 0 ? c.shards : o->inserters;
          c.insert_rate = o->insert_rate;
          c.durability = o->durability;
          c.decode = o->decode;
        }
        rows[n++] = c;
      }
  return n;
}

/* The medians over the runs of one row (r[0..n) its runs' results). */
static void over_runs(result_t *r, int n, result_t *out) {
  double v[MAX_RUNS];
  *out = r[0];
#define MED(field)                                                                                           \
  do {                                                                                                       \
    for (int i_ = 0; i_ < n; i_++)                                                                           \
      v[i_] = r[i_].field;                                                                                   \
    out->field = median(v, n);                                                                               \
  } while (0)
  MED(ups);
  MED(tps);
  MED(inserted_rows_s);
  MED(cpu_us);
  MED(learner_cpu_us);
  MED(fill_s);
  MED(gather_us);
  MED(cpu_per_gather);
  for (int k = 0; k < ST_COUNT; k++) {
    MED(stage_cpu_us[k]);
    for (int i = 0; i < n; i++) /* the share of wall time, then back to seconds of one loop */
      v[i] = r[i].stage_s[k] / r[i].loop_s;
    out->stage_s[k] = median(v, n);
  }
#undef MED
  out->loop_s = 1.0;
  if (n > 1) { /* the range over the runs; with one run, over its windows */
    out->ups_lo = out->ups_hi = r[0].ups;
    for (int i = 1; i < n; i++)
      out->ups_lo = fmin(out->ups_lo, r[i].ups), out->ups_hi = fmax(out->ups_hi, r[i].ups);
  }
}

static void print_header(const opts_t *o, const conf_t *rows, int nrows, const char *dir, double gbs,
                         double gather_real, double gather_easy, int64_t filled_real) {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  const uint32_t bpr = batches_per_request(o);
  int has_real = 0, has_easy = 0, max_shards = 1;
  for (int i = 0; i < nrows; i++) {
    has_real |= !rows[i].easy, has_easy |= rows[i].easy;
    if (!rows[i].easy && rows[i].shards > max_shards)
      max_shards = rows[i].shards;
  }
  printf(
      "sac-bench-service: null learner, cheetah sizes (obs %d, act %d), batch %d, median of %d run(s) of %d "
      "window(s) of %.2f s, %ld core(s); the learner's loop: %u batch(es) a reply, broadcasts after %d "
      "updates "
      "and %d ms\n",
      OBS, ACT, o->batch, o->runs, o->windows, o->seconds, cores, bpr, o->publish_every,
      o->publish_interval_ms);
  if (has_real) {
    int in_mem = 0;
    const char *fs = dir ? fs_name(dir, &in_mem) : "";
    conf_t c = {.shards = max_shards, .spi = o->spi};
    printf("realistic: %lld transitions filled over the shards; rate limiter ", (long long)o->filled);
    if (o->spi > 0)
      printf("at %.0f samples per insert (error buffer %.0f per shard, the learner's)", o->spi,
             learner_error_buffer(&c, o->batch, (uint32_t)o->batch * bpr));
    else
      printf("off");
    if (o->inserters == 0)
      printf("; no inserts");
    else
      printf("; %s inserter thread(s) %s (synthetic transitions standing in for actors: HalfCheetah-v5 takes "
             "40-70 us of CPU per step, so real actors would need 0.8-1.4 cores per 20,000 updates/s at one "
             "update "
             "per step, more than this machine has beside the learner and the shards)",
             o->inserters < 0 ? "one per shard," : "",
             o->insert_rate > 0 ? "at --insert_rate" : "keeping pace");
    printf("; durability %s", sac_replay_durability_name(o->durability));
    if (dir)
      printf(" (%s, files in %s on %s)",
             o->durability == SAC_REPLAY_DURABILITY_WAL ? "write-ahead log, fsync'd group commits every 2 ms"
                                                        : "snapshots",
             dir, fs);
    printf("; intake %s (%s)\n", o->decode ? "decode" : "direct",
           o->decode ? "the fallback of a backend without stage_at: each reply decoded into the client, then staged"
                     : "one copy from the message into the batch the update reads: backends with stage_at, cuda's "
                       "pinned staging buffer included");
    if (dir && in_mem)
      printf(
          "WARNING: %s is %s: an fsync there reaches no disk, so the durable log costs less than on a real "
          "shard; pass --dir on a disk\n",
          dir, fs);
  }
  if (has_easy)
    printf("easy (labelled, not the headline): %d rows per shard (L3-resident), limiter off, no inserts, "
           "durability "
           "none, intake direct\n",
           EASY_ROWS_PER_SHARD);
  printf("yardsticks, this run: memcpy %.2f GB/s (64 MiB, median of 5); plain random gather of %d rows "
         "(obs, next obs, action, reward):",
         gbs, o->batch);
  if (has_real)
    printf(" %.2f us from %lld rows", gather_real, (long long)filled_real);
  if (has_easy)
    printf("%s %.2f us from %d rows", has_real ? "," : "", gather_easy, 2 * EASY_ROWS_PER_SHARD);
  printf(" (median of 5 x 1000 batches; the gather again before each later round of runs)\n");
}

static void print_row(const conf_t *c, const result_t *r, const opts_t *o) {
  char pace[32] = "-";
  if (c->spi > 0 && c->inserters > 0 && r->ups > 0)
    snprintf(pace, sizeof pace, "%.2f", r->inserted_rows_s * c->spi / (r->ups * o->batch));
  printf("| %s | %s | %d | %s | %.0f | %.0f-%.0f | %.1f | %.1f | %.2f | %.0f%% | %s | %.1f / %.1f / %.1f / "
         "%.1f / %.1f |\n",
         conf_setting(c), conf_transport(c), c->shards, conf_sampler(c), r->ups, r->ups_lo, r->ups_hi,
         r->cpu_us, r->gather_us, r->cpu_per_gather, 100.0 * r->stage_s[ST_SAMPLE], pace, r->stage_cpu_us[0],
         r->stage_cpu_us[1], r->stage_cpu_us[2], r->stage_cpu_us[3], r->stage_cpu_us[4]);
}

static void print_result(const conf_t *c, const result_t *r, const opts_t *o, double gbs) {
  char rate[32];
  if (c->insert_rate > 0)
    snprintf(rate, sizeof rate, "%.0f", c->insert_rate);
  else
    snprintf(rate, sizeof rate, c->inserters > 0 ? "keep_pace" : "none");
  printf(
      "RESULT setting=%s transport=%s shards=%d sampler=%s filled=%lld samples_per_insert=%.0f inserters=%d "
      "insert_rate=%s intake=%s durability=%s batch=%d runs=%d updates_per_s=%.1f updates_per_s_min=%.1f "
      "updates_per_s_max=%.1f transitions_per_s=%.0f inserted_rows_per_s=%.0f memcpy_gbs=%.3f "
      "gather_us_per_batch=%.3f cpu_us_per_update=%.2f learner_cpu_us_per_update=%.2f cpu_per_gather=%.3f "
      "fill_s=%.2f",
      conf_setting(c), conf_transport(c), c->shards, conf_sampler(c), (long long)conf_filled(c), c->spi,
      c->inserters, rate, conf_intake(c), sac_replay_durability_name(c->durability), o->batch, o->runs,
      r->ups, r->ups_lo, r->ups_hi, r->tps, r->inserted_rows_s, gbs, r->gather_us, r->cpu_us,
      r->learner_cpu_us, r->cpu_per_gather, r->fill_s);
  for (int k = 0; k < ST_COUNT; k++)
    printf(" %s_wall_share=%.3f", k_stage_names[k], r->stage_s[k]);
  for (int k = 0; k < ST_COUNT; k++)
    printf(" %s_cpu_us=%.2f", k_stage_names[k], r->stage_cpu_us[k]);
  printf("\n");
}

/* The extras: the learner service itself and an actor core (0, or 1 when one failed). */
static int run_extras(const opts_t *o) {
  int failed = 0;
  if (o->learner[0]) {
    int rc = learner_service(o);
    if (rc) {
      printf("learner service on %s: failed: %s%s\n", o->learner, sac_strerror(rc),
             rc == SAC_ETIMEOUT ? " (no update in the run: the actors had not stored learning_starts "
                                  "steps yet; give it more --seconds or --windows)"
                                : "");
      failed = 1;
    }
  }
  if (o->env[0]) {
    env_result_t er;
    int rc = env_core(o, &er);
    if (rc) {
      printf("actor core on %s: failed: %s\n", o->env, sac_strerror(rc));
      failed = 1;
    } else {
      printf("actor core on %s: %.1f us CPU per step with a 2 x 256 policy (%.0f steps per core-second), "
             "%.1f us with random actions (%.0f)\n",
             o->env, er.policy_us, 1e6 / er.policy_us, er.physics_us, 1e6 / er.physics_us);
      printf("RESULT actor_core env=%s policy_us_per_step=%.2f physics_us_per_step=%.2f\n", o->env,
             er.policy_us, er.physics_us);
    }
  }
  return failed;
}

int main(int argc, char **argv) {
  opts_t o;
  if (parse_opts(argc, argv, &o) != 0)
    return 2;
  conf_t rows[MAX_ROWS];
  const int nrows = make_rows(&o, rows, MAX_ROWS);
  if (nrows < 1) {
    usage();
    return 2;
  }
  sac_log_set_level(SAC_LOG_WARN);
  int need_dir = 0, has_real = 0, has_easy = 0;
  int64_t filled_real = 0;
  for (int i = 0; i < nrows; i++) {
    need_dir |= rows[i].durability != SAC_REPLAY_DURABILITY_NONE;
    has_easy |= rows[i].easy;
    if (!rows[i].easy)
      has_real = 1, filled_real = conf_filled(&rows[i]);
  }
  char dir[600] = "";
  if (need_dir) {
    snprintf(dir, sizeof dir, "%.500s/sac-bench-service-XXXXXX", o.dir);
    if (!mkdtemp(dir)) {
      fprintf(stderr, "sac-bench-service: cannot make a directory for the shards' files under %s (--dir)\n",
              o.dir);
      return 2;
    }
  }
  const double gbs = memcpy_gbs();
  gather_t gath_real = {0}, gath_easy = {0};
  if (has_real)
    gather_open(&gath_real, filled_real, o.batch);
  if (has_easy)
    gather_open(&gath_easy, 2 * EASY_ROWS_PER_SHARD, o.batch);
  const double g_real = gather_us(&gath_real), g_easy = gather_us(&gath_easy);
  print_header(&o, rows, nrows, need_dir ? dir : NULL, gbs, g_real, g_easy, filled_real);
  printf("sample reply: %zu bytes a batch (obs/action %s)\n", reply_size(o.batch, o.precision),
         o.precision == SAC_WIRE_F16 ? "fp16" : "fp32");
  fflush(stdout);
  int failed = run_extras(&o);
  result_t(*res)[MAX_RUNS] = calloc(MAX_ROWS, sizeof *res);
  int ok[MAX_ROWS] = {0};
  if (!res)
    return 1;
  for (int run = 0; run < o.runs; run++) {
    /* the yardsticks again, as the machine is now (the first round uses the header's) */
    const double gr = run == 0 ? g_real : gather_us(&gath_real),
                 ge = run == 0 ? g_easy : gather_us(&gath_easy);
    for (int i = 0; i < nrows; i++) {
      const conf_t *c = &rows[i];
      result_t *r = &res[i][run];
      int rc = run_conf(c, &o, need_dir ? dir : NULL, run * MAX_ROWS + i, r);
      r->gather_us = c->easy ? ge : gr;
      r->cpu_per_gather = r->cpu_us / r->gather_us;
      fprintf(stderr, "run %d/%d: %s %s:%d %s: ", run + 1, o.runs, conf_setting(c), conf_transport(c),
              c->shards, conf_sampler(c));
      if (rc) {
        fprintf(stderr, "failed: %s\n", sac_strerror(rc));
        failed = 1;
      } else {
        fprintf(stderr, "%.0f updates/s, %.1f us CPU per update (plain gather %.2f us, x %.2f)\n", r->ups,
                r->cpu_us, r->gather_us, r->cpu_per_gather);
        ok[i]++;
      }
    }
  }
  printf(
      "\n| setting | transport | shards | sampler | updates/s | runs' range | process CPU us/update | gather "
      "us/batch | x gather | wait | insert pace | learner CPU us/update: sample / stage / update / "
      "priorities / "
      "publish |\n");
  printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  result_t agg[MAX_ROWS];
  for (int i = 0; i < nrows; i++) {
    if (ok[i] != o.runs) {
      printf("| %s | %s | %d | %s | failed in %d of %d run(s) | | | | | | | |\n", conf_setting(&rows[i]),
             conf_transport(&rows[i]), rows[i].shards, conf_sampler(&rows[i]), o.runs - ok[i], o.runs);
      continue;
    }
    over_runs(res[i], o.runs, &agg[i]);
    print_row(&rows[i], &agg[i], &o);
    if (!(isfinite(agg[i].ups) && agg[i].ups > 0))
      failed = 1;
  }
  printf("\n");
  for (int i = 0; i < nrows; i++)
    if (ok[i] == o.runs)
      print_result(&rows[i], &agg[i], &o, gbs);
  if (need_dir) {
    dir_empty(dir);
    rmdir(dir);
  }
  gather_close(&gath_real);
  gather_close(&gath_easy);
  free(res);
  return failed;
}
