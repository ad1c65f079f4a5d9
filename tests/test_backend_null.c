/* The null backend (--backend null, learner/backend_null.c): the measuring tool behind
 * sac-bench-service. It must keep the interface of the real backends so that a learner
 * on it moves exactly what a real one moves:
 *   - the interface checks: zeroed aligned memory, uploads and downloads round-trip,
 *     staging copies each batch to its destination and reads every byte (a checksum that
 *     changes with the batch's content: the negative control stages a batch that differs
 *     in one float and sees a different checksum);
 *   - a SAC update on it (cheetah sizes, batch 256) returns B TD errors that are finite,
 *     positive and follow the rewards (|r| + 1e-3), finite losses, and the actor's
 *     weights at their real size, equal to the cpu backend's initial weights for the
 *     same seed and unchanged by updates;
 *   - a learner run with it completes, in the embedded default and against a shard over
 *     loopback TCP with prioritised replay (the shard applies the priorities it sends). */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/rng.h"
#include "learner/backend.h"
#include "learner/sac.h"
#include "learner/service.h"
#include "replay/client.h"
#include "replay/server.h"
#include "replay_testgen.h"

static double metric(sac_backend_t *be, const char *key) {
  double v = -1;
  cr_assert_eq(be->ops->get_metric(be, key, &v), 0, "metric %s", key);
  return v;
}

Test(backend_null, memory_upload_download_and_name) {
  sac_backend_t *be = NULL;
  cr_assert_eq(sac_backend_new("null", 0, &be), 0);
  cr_assert_str_eq(be->ops->name, "null");
  float *p;
  cr_assert_eq(be->ops->alloc(be, 1000, &p), 0);
  cr_assert_eq((uintptr_t)p % 256, 0);
  for (int i = 0; i < 1000; i++)
    cr_assert_eq(p[i], 0.0f);
  float src[1000], back[1000];
  for (int i = 0; i < 1000; i++)
    src[i] = (float)i * 0.5f - 3.0f;
  cr_assert_eq(be->ops->upload(be, p, src, 1000), 0);
  cr_assert_eq(be->ops->download(be, back, p, 1000), 0);
  cr_assert_eq(memcmp(src, back, sizeof src), 0);
  cr_assert_eq(metric(be, "uploaded_bytes"), 4000.0);
  cr_assert_eq(be->ops->sync(be), 0);
  double unknown;
  cr_assert_eq(be->ops->get_metric(be, "no_such_metric", &unknown), SAC_ENOTFOUND);
  /* fp32 only, like the cpu backend */
  cr_assert_eq(sac_backend_configure(be, "fp32", 1), 0);
  cr_assert_eq(sac_backend_configure(be, "bf16", 1), SAC_ECONFIG);
  be->ops->free(be, p);
  sac_backend_destroy(&be);
  cr_assert_null(be);
}

/* Stages a batch of n floats from src and returns the checksum after it. */
static double stage_one(sac_backend_t *be, float *dst, const float *src, size_t n) {
  cr_assert_eq(be->ops->stage(be, dst, src, n), 0);
  cr_assert_eq(be->ops->stage_commit(be), 0);
  return metric(be, "checksum");
}

Test(backend_null, staging_copies_and_reads_every_byte) {
  sac_backend_t *a = NULL, *b = NULL;
  cr_assert_eq(sac_backend_new("null", 0, &a), 0);
  cr_assert_eq(sac_backend_new("null", 0, &b), 0);
  enum { N = 4099 };
  float *src = malloc(N * sizeof *src), *da, *db;
  cr_assert_eq(a->ops->alloc(a, N, &da), 0);
  cr_assert_eq(b->ops->alloc(b, N, &db), 0);
  for (int i = 0; i < N; i++)
    src[i] = sinf((float)i);
  double ca = stage_one(a, da, src, N);
  cr_assert_eq(memcmp(da, src, N * sizeof *src), 0, "staging copies to the destination");
  cr_assert_eq(metric(a, "staged_bytes"), 4.0 * N);
  cr_assert_eq(metric(a, "staged_batches"), 1.0);
  /* negative control: the same batch with its last float changed gives another checksum,
   * so the backend read that far (a copy it skipped would not) */
  const float last = src[N - 1];
  src[N - 1] = last + 1.0f;
  double cb = stage_one(b, db, src, N);
  cr_assert_neq(ca, cb, "a checksum that does not see the last float");
  src[N - 1] = last;
  cr_assert_eq(stage_one(b, db, src, N) - cb, ca, "checksums add up batch by batch");
  a->ops->free(a, da);
  b->ops->free(b, db);
  free(src);
  sac_backend_destroy(&a);
  sac_backend_destroy(&b);
}

/* cheetah sizes at batch 256: a random batch with rewards in [-3, 3] */
enum { OBS = 17, ACT = 6, B = 256 };
typedef struct {
  float obs[B * OBS], next_obs[B * OBS], act[B * ACT], rew[B], term[B];
} host_batch_t;

static void random_batch(host_batch_t *h, uint64_t seed) {
  sac_rng_t rng;
  sac_rng_init(&rng, seed, 7);
  for (int i = 0; i < B * OBS; i++)
    h->obs[i] = (float)sac_rng_uniform(&rng) * 2 - 1, h->next_obs[i] = (float)sac_rng_uniform(&rng);
  for (int i = 0; i < B * ACT; i++)
    h->act[i] = (float)sac_rng_uniform(&rng) * 2 - 1;
  for (int i = 0; i < B; i++)
    h->rew[i] = (float)sac_rng_uniform(&rng) * 6 - 3, h->term[i] = (i % 17) == 0;
}

static void new_sac(const char *backend, sac_backend_t **be, sac_t **s) {
  sac_hparams_t hp;
  sac_hparams_default(&hp, OBS, ACT);
  hp.batch = B;
  hp.seed = 42;
  cr_assert_eq(sac_backend_new(backend, 1, be), 0);
  cr_assert_eq(sac_new(&hp, *be, s), 0);
}

Test(backend_null, sac_update_gives_real_sizes_and_finite_outputs, .timeout = 60) {
  sac_backend_t *nbe, *cbe;
  sac_t *ns, *cs;
  new_sac("null", &nbe, &ns);
  new_sac("cpu", &cbe, &cs);
  const size_t n_actor = sac_actor_param_count(ns);
  cr_assert_eq(n_actor, sac_actor_param_count(cs));
  cr_assert_gt(n_actor, 70000, "cheetah's actor is 73,484 parameters");
  float *w_null = malloc(n_actor * sizeof(float)), *w_cpu = malloc(n_actor * sizeof(float));
  cr_assert_eq(sac_get_actor(cs, w_cpu), 0);

  host_batch_t *h = malloc(sizeof *h);
  float td[B];
  for (int u = 0; u < 5; u++) {
    random_batch(h, 100 + (uint64_t)u);
    sac_host_batch_t hb = {h->obs, h->next_obs, h->act, h->rew, h->term, NULL};
    cr_assert_eq(sac_load_batch(ns, &hb, 1), 0);
    cr_assert_eq(sac_update(ns), 0);
    cr_assert_eq(sac_td_errors(ns, td), 0);
    for (int i = 0; i < B; i++) {
      cr_assert(isfinite(td[i]) && td[i] > 0, "td[%d] = %g", i, td[i]);
      cr_assert_float_eq(td[i], fabsf(h->rew[i]) + 1e-3f, 1e-6f, "td[%d] follows the reward", i);
    }
    sac_stats_t st;
    cr_assert_eq(sac_stats(ns, &st), 0);
    cr_assert(isfinite(st.critic_loss) && isfinite(st.actor_loss) && isfinite(st.alpha_loss) &&
              isfinite(st.alpha) && st.alpha > 0 && isfinite(st.entropy) && isfinite(st.mean_q));
    cr_assert_gt(st.critic_loss, 0, "the critic loss is the formula's (q = 0, y = r)");
  }
  cr_assert_eq(sac_step(ns), 5);
  /* the batch was staged, all of it: obs, next_obs, action, reward, terminated */
  cr_assert_eq(metric(nbe, "staged_batches"), 5.0);
  cr_assert_eq(metric(nbe, "staged_bytes"), 5.0 * 4 * B * (2 * OBS + ACT + 2));
  cr_assert_eq(metric(nbe, "critic_losses"), 5.0);
  /* the actor's weights: the real size, the initial ones (as the cpu backend's for the seed) */
  cr_assert_eq(sac_get_actor(ns, w_null), 0);
  for (size_t i = 0; i < n_actor; i++)
    cr_assert(isfinite(w_null[i]));
  cr_assert_eq(memcmp(w_null, w_cpu, n_actor * sizeof(float)), 0);
  float steps[3];
  cr_assert_eq(sac_get_buffer(ns, SAC_BUF_STEPS, steps, 3), 0);
  cr_assert_eq(steps[0], 5.0f, "the critic's Adam step counts");
  free(h), free(w_null), free(w_cpu);
  sac_destroy(&ns);
  sac_destroy(&cs);
  sac_backend_destroy(&nbe);
  sac_backend_destroy(&cbe);
}

/* ---- learner runs ---- */

static void small_learner(sac_learner_cfg_t *c) {
  sac_learner_cfg_default(c);
  snprintf(c->backend, sizeof c->backend, "null");
  c->hp.hidden = 32;
  c->hp.batch = 64;
  c->eval_episodes = 1;
  c->eval_every = 0;
  c->log_interval_s = 0;
  c->quiet = 1;
  c->threads = 1;
}

Test(backend_null, embedded_learner_run_completes, .timeout = 120) {
  sac_learner_cfg_t c;
  small_learner(&c);
  c.total_steps = 3000;
  c.learning_starts = 500;
  c.embedded_shards = 1;
  c.embedded_actors = 1;
  c.buffer_capacity = 20000;
  c.durability = SAC_REPLAY_DURABILITY_NONE;
  snprintf(c.weights_endpoint, sizeof c.weights_endpoint, "inproc://null-embedded-weights");
  atomic_int stop = 0;
  sac_learner_result_t res;
  cr_assert_eq(sac_learner_run(&c, &stop, &res), 0);
  cr_assert_geq(res.env_steps, 3000);
  cr_assert_gt(res.updates, 100, "updates %lld", (long long)res.updates);
  cr_assert(isfinite(res.final_eval_return));
  cr_assert_gt(res.updates_per_second, 0);
}

/* Embedded shards without a run directory have no place for their files: a durable
 * mode (the default) is refused, never dropped to memory-only behind the caller's back;
 * durability none, asked for, runs (embedded_learner_run_completes). */
Test(backend_null, embedded_shards_without_a_run_directory_are_never_silently_memory_only, .timeout = 120) {
  sac_learner_cfg_t c;
  small_learner(&c);
  c.total_steps = 600;
  c.learning_starts = 300;
  c.embedded_shards = 1;
  c.embedded_actors = 1;
  c.buffer_capacity = 20000;
  cr_assert_eq(c.durability, SAC_REPLAY_DURABILITY_WAL, "the default");
  snprintf(c.weights_endpoint, sizeof c.weights_endpoint, "inproc://null-norundir-weights");
  atomic_int stop = 0;
  sac_learner_result_t res;
  cr_assert_eq(sac_learner_run(&c, &stop, &res), SAC_ECONFIG,
               "embedded shards with durability wal and no run directory ran (memory only)");
}

/* Pendulum's sizes, for the shard the TCP run samples */
enum { P_OBS = 3, P_ACT = 1 };

typedef struct {
  sac_replay_server_t *srv;
  const char *ins;
  int64_t total;
  atomic_int failed;
} feeder_t;

static uint64_t sampled_batches(sac_replay_server_t *srv) {
  sac_replay_stats_t st;
  sac_replay_server_stats(srv, &st);
  return st.shard.sample_batches_total;
}

/* Inserts 1024 rows, waits until the learner has sampled 50 batches (30 s at most), then
 * inserts up to `total` so the learner stops. */
static void *feeder_main(void *arg) {
  feeder_t *f = arg;
  sac_replay_client_config_t cc;
  sac_replay_client_config_default(&cc);
  cc.n_shards = 1;
  cc.insert_endpoints = (const char *const[]){f->ins};
  cc.actor_id = 3;
  sac_replay_client_t *cl = sac_replay_client_new(&cc);
  tg_t g;
  tg_init(&g, 3, 4, P_OBS, P_ACT, 50, 64); /* 256 rows per batch */
  int64_t rows = 0;
  for (int phase = 0; phase < 2 && cl; phase++) {
    const int64_t upto = phase == 0 ? 1024 : f->total;
    while (rows < upto) {
      int rc = sac_replay_client_insert(cl, 0, tg_next(&g), 5000);
      if (rc) {
        atomic_store(&f->failed, rc);
        break;
      }
      rows += 256;
    }
    sac_replay_client_flush(cl, 10000);
    const double t0 = sac_clock_s();
    while (phase == 0 && sampled_batches(f->srv) < 50 && sac_clock_s() - t0 < 30)
      sac_sleep_ns(10000000ull);
  }
  if (!cl)
    atomic_store(&f->failed, SAC_ENET);
  sac_replay_client_destroy(&cl);
  tg_free(&g);
  return NULL;
}

Test(backend_null, tcp_learner_run_sends_priorities, .timeout = 120) {
  sac_replay_server_config_t sc;
  sac_replay_server_config_default(&sc);
  sc.shard.capacity = 1 << 15;
  sc.shard.obs_dim = P_OBS;
  sc.shard.act_dim = P_ACT;
  sc.shard.min_size = 256;
  sc.shard.sampler = SAC_REPLAY_PRIORITIZED;
  sc.durability = SAC_REPLAY_DURABILITY_NONE;
  sc.snapshot_interval_s = 0;
  snprintf(sc.insert_endpoint, sizeof sc.insert_endpoint, "tcp://127.0.0.1:*");
  snprintf(sc.sample_endpoint, sizeof sc.sample_endpoint, "tcp://127.0.0.1:*");
  int err = 0;
  sac_replay_server_t *srv = sac_replay_server_new(&sc, NULL, &err);
  cr_assert_not_null(srv, "shard: %s", sac_strerror(err));
  cr_assert_eq(sac_replay_server_start(srv), 0);

  feeder_t f = {srv, sac_replay_server_insert_endpoint(srv), 1024 + 4096, 0};
  pthread_t ft;
  cr_assert_eq(pthread_create(&ft, NULL, feeder_main, &f), 0);
  sac_learner_cfg_t c;
  small_learner(&c);
  c.total_steps = f.total;
  c.prioritized = 1;
  snprintf(c.weights_endpoint, sizeof c.weights_endpoint, "inproc://null-tcp-weights");
  cr_assert_eq(sac_learner_set_shards(&c, sac_replay_server_sample_endpoint(srv)), 0);
  atomic_int stop = 0;
  sac_learner_result_t res;
  int rc = sac_learner_run(&c, &stop, &res);
  pthread_join(ft, NULL);
  sac_replay_stats_t st;
  sac_replay_server_stats(srv, &st);
  sac_replay_server_destroy(&srv);
  cr_assert_eq(atomic_load(&f.failed), 0, "feeder: %s", sac_strerror(atomic_load(&f.failed)));
  cr_assert_eq(rc, 0, "learner: %s", sac_strerror(rc));
  cr_assert_geq(res.updates, 50);
  /* every update's priorities reached the shard and were applied there (stale only if
   * overwritten: the capacity holds every row) */
  cr_assert_gt(st.shard.priority_updates_total, 0);
  cr_assert_eq(st.shard.priority_stale_total, 0);
}
