/* Learner benchmark: SAC updates per second on a backend for the standard
 * configurations of BENCHMARKS.md, with ms/update, achieved GFLOP/s, where an update's
 * time goes, the cost of one million updates at a price per machine-hour, and the peers
 * of bench/gpu_peers.py that are installed (PyTorch eager and torch.compile, JAX
 * jit and lax.scan; on cuda also PyTorch with a CUDA graph) measured in the same run,
 * interleaved run by run, with sacfleet's ratio to the fastest of them, by name. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cblas.h>

#include "common/clock.h"
#include "common/config.h"
#include "common/error.h"
#include "common/log.h"
#include "common/rng.h"
#include "learner/gemm_own.h"
#include "learner/op_count.h"
#include "learner/sac.h"

typedef struct {
  char config[32];
  char backend[16];
  int threads;
  int updates;
  int warmup;
  int runs;
  int slices, show_slices;
  int peer;
  char peer_script[512];
  char peer_python[256];
  char peer_modes[128];
  int peer_runs, peer_scan;
  double price;
  int obs, act, hidden, depth, batch;
  char precision[8];
  char gemm[16];
  int graphs, recompute, profile;
  int upl, direct, op_profile, op_profile_updates;
} bench_cfg_t;

#define O_(k, t, f, d, lo, hi, h)                                                                            \
  { k, t, offsetof(bench_cfg_t, f), 0, d, lo, hi, h }
#define S_(k, f, d, h)                                                                                       \
  { k, SAC_CFG_STRING, offsetof(bench_cfg_t, f), sizeof(((bench_cfg_t *)0)->f), d, SAC_CFG_UNBOUNDED, h }
static const sac_cfg_opt_t k_opts[] = {
    S_("preset", config, "cheetah", "standard configuration: cheetah, seed, pendulum, tiny (BENCHMARKS.md)"),
    S_("backend", backend, "cpu", "learner backend: cpu or cuda"),
    O_("threads", SAC_CFG_INT, threads, "2", 0, 256, "cpu threads for ours and the peer (0 = all cores)"),
    O_("updates", SAC_CFG_INT, updates, "300", 1, 1e9, "timed updates per run"),
    O_("warmup", SAC_CFG_INT, warmup, "20", 0, 1e9, "untimed updates before each run"),
    O_("runs", SAC_CFG_INT, runs, "5", 1, 1000, "runs; medians are reported"),
    O_("slices", SAC_CFG_INT, slices, "10", 1, 1000,
       "cpu: the ceiling is measured before each of this many slices of a run's updates"),
    O_("show_slices", SAC_CFG_BOOL, show_slices, "false", 1, 0, "cpu: print each slice's ceiling and ratio"),
    O_("peer", SAC_CFG_BOOL, peer, "true", 1, 0, "also run the installed peers of gpu_peers.py, interleaved"),
    S_("peer_script", peer_script, SAC_SOURCE_DIR "/bench/gpu_peers.py", "the peers' script"),
    S_("peer_python", peer_python, "",
       "interpreter with torch and/or jax+optax (bench/requirements-peers.txt); empty: the first of "
       "$SAC_PEER_PYTHON, $VIRTUAL_ENV/bin/python, python3, /usr/bin/python3 that has them"),
    S_("peer_modes", peer_modes, "",
       "peers to run; empty: torch-eager,torch-compile,jax-jit,jax-scan (cuda: and torch-graph), those "
       "installed"),
    O_("peer_runs", SAC_CFG_INT, peer_runs, "3", 1, 1000, "runs of ours followed by a run of the peers"),
    O_("peer_scan", SAC_CFG_INT, peer_scan, "50", 1, 100000, "updates per lax.scan call of jax-scan"),
    O_("price", SAC_CFG_DOUBLE, price, "0.10", 0, 1e9, "machine price per hour (USD) for the cost line"),
    O_("obs", SAC_CFG_INT, obs, "0", 0, 1e6, "override obs dim (0 = from config)"),
    O_("act", SAC_CFG_INT, act, "0", 0, 1e6, "override action dim"),
    O_("hidden", SAC_CFG_INT, hidden, "0", 0, 1e6, "override hidden width"),
    O_("depth", SAC_CFG_INT, depth, "0", 0, 15, "override hidden layers"),
    O_("batch", SAC_CFG_INT, batch, "0", 0, 1e6, "override batch size"),
    S_("precision", precision, "fp32",
       "GEMM precision where the backend has a choice: fp32, tf32, bf16, fp16"),
    S_("gemm", gemm, "auto",
       "cpu: the layers' products: auto (the own GEMM where the CPU has AVX-512 or AVX2, else OpenBLAS), "
       "avx2 "
       "(the own GEMM's AVX2 kernel even where the CPU has AVX-512) or openblas"),
    O_("graphs", SAC_CFG_BOOL, graphs, "true", 1, 0, "replay captured updates where the backend can (cuda)"),
    O_("recompute", SAC_CFG_BOOL, recompute, "false", 1, 0, "recompute activations in the backward"),
    O_("profile", SAC_CFG_BOOL, profile, "true", 1, 0,
       "time the phases of an update (synchronises between them, and runs eagerly)"),
    O_("updates_per_launch", SAC_CFG_INT, upl, "1", 1, SAC_MAX_UPDATES_PER_LAUNCH,
       "updates per launch: their batches staged by one commit, one graph for them "
       "(sac_set_updates_per_launch)"),
    O_("direct", SAC_CFG_BOOL, direct, "false", 1, 0,
       "write each sampled batch in place (the backend's stage_at, as the learner's replay client does) "
       "instead of decoding it into a buffer and staging that"),
    O_("op_profile", SAC_CFG_BOOL, op_profile, "false", 1, 0,
       "print the time per backend op (CUDA events on cuda, the host clock on cpu), and device and host "
       "microseconds per update"),
    O_("op_profile_updates", SAC_CFG_INT, op_profile_updates, "50", 1, 100000,
       "updates timed op by op, and launches timed whole, by --op_profile"),
};

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}
static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* multiply-adds of a forward pass through an MLP of K members per sample */
static double mlp_macs(const sac_mlp_desc_t *d) {
  double m = 0;
  for (int l = 0; l < d->n_layers; l++)
    m += (double)d->sizes[l] * d->sizes[l + 1];
  return m * d->ensemble;
}
/* FLOPs of one update, 2 per multiply-add: the forward passes, the weight gradients,
 * and the input gradients (none into the batch's own inputs). */
static double update_flops(const sac_t *s) {
  const sac_mlp_desc_t *ad = sac_actor_desc(s), *cd = sac_critic_desc(s);
  double a = mlp_macs(ad), c = mlp_macs(cd);
  double a_in = (double)ad->sizes[0] * ad->sizes[1] * ad->ensemble;
  double c_in = (double)cd->sizes[0] * cd->sizes[1] * cd->ensemble;
  double c_in_obs = (double)sac_hparams(s)->obs_dim * cd->sizes[1] * cd->ensemble;
  double macs = a + c;            /* target: pi(s'), target critics on (s', a') */
  macs += c + c + (c - c_in);     /* critic step: forward, weight grads, input grads above layer 1 */
  macs += a + c + (c - c_in_obs); /* actor step: pi(s), critics on (s, a~), input grads down to a~ */
  macs += a + (a - a_in);         /* policy weight grads, input grads above layer 1 */
  return 2.0 * macs * sac_hparams(s)->batch;
}

/* Checks that this process's sgemm kernel computes right before timing anything: a
 * 256^3 product against a double-precision reference (max relative error, normalised
 * by the row's magnitude). Returns the error. */
static double sgemm_check(void) {
  enum { N = 256 };
  float *a = malloc(sizeof(float) * N * N), *b = malloc(sizeof(float) * N * N),
        *c = malloc(sizeof(float) * N * N);
  sac_rng_t rng;
  sac_rng_init(&rng, 9, 9);
  for (int i = 0; i < N * N; i++)
    a[i] = sac_rng_normal(&rng), b[i] = sac_rng_normal(&rng);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1.0f, a, N, b, N, 0.0f, c, N);
  double worst = 0;
  for (int i = 0; i < N; i += 7)
    for (int j = 0; j < N; j += 5) {
      double ref = 0, mag = 0;
      for (int k = 0; k < N; k++)
        ref += (double)a[i * N + k] * b[k * N + j], mag += fabs((double)a[i * N + k] * b[k * N + j]);
      double e = fabs(c[i * N + j] - ref) / mag;
      if (e > worst)
        worst = e;
    }
  free(a), free(b), free(c);
  return worst;
}

/* ---- the machine's sgemm ceiling, measured beside every slice of a run (issue 17) --------
 * Two yardsticks on the benchmark's threads:
 *  - big: one 2048^3 sgemm on T threads (the textbook peak), split by rows;
 *  - shapes: the update's dominant shape (batch x hidden x hidden), T independent
 *    single-threaded sgemms at once, one per thread: what this many cores do at the sizes
 *    an update multiplies when nothing else is in the way.
 * The ceiling is the larger of the two. A VM's two vCPUs change speed from one second to the
 * next (the same sgemm measured 90-200 GFLOP/s within a minute on the development VM, as
 * when the host puts both on one physical core), so the ceiling is measured right before
 * each slice of a run's updates, and the fraction reached is the median of the per-slice
 * ratios achieved / ceiling: numerator and denominator are taken on the same cores within a
 * few hundred milliseconds of each other. */
#include <pthread.h>

typedef struct {
  int m, n, k, reps;
  float *a, *b, *c; /* row-major, leading dimensions k, n, n */
  pthread_barrier_t *start;
} sg_job_t;

static void *sg_thread(void *p) {
  sg_job_t *j = p;
  pthread_barrier_wait(j->start);
  for (int r = 0; r < j->reps; r++)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, j->m, j->n, j->k, 1.0f, j->a, j->k, j->b, j->n,
                0.0f, j->c, j->n);
  return NULL;
}

/* Runs the T jobs at once on T threads (the caller one of them); returns the seconds. */
static double sg_run(sg_job_t *j, int T) {
  pthread_t tid[64];
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, (unsigned)T);
  for (int t = 0; t < T; t++)
    j[t].start = &start;
  double t0 = sac_clock_s();
  for (int t = 1; t < T; t++)
    pthread_create(&tid[t], NULL, sg_thread, &j[t]);
  sg_thread(&j[0]);
  for (int t = 1; t < T; t++)
    pthread_join(tid[t], NULL);
  double dt = sac_clock_s() - t0;
  pthread_barrier_destroy(&start);
  return dt;
}

static float *sg_buf(size_t n) {
  float *p = malloc(n * sizeof(float));
  for (size_t i = 0; p && i < n; i++)
    p[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
  return p;
}

enum { BIG_N = 2048, MAX_T = 64 };

/* The probes' operands, made once: filling 48 MiB takes longer than the sgemm. */
typedef struct {
  int T, B, H;
  float *a, *b, *c;  /* BIG_N^2 each */
  sg_job_t j[MAX_T]; /* the shapes' operands, one set per thread */
} probe_t;

static int probe_init(probe_t *p, int T, int B, int H) {
  memset(p, 0, sizeof *p);
  p->T = T < 1 ? 1 : (T > MAX_T ? MAX_T : T), p->B = B, p->H = H;
  const size_t n = (size_t)BIG_N * BIG_N;
  p->a = sg_buf(n), p->b = sg_buf(n), p->c = sg_buf(n);
  int ok = p->a && p->b && p->c;
  for (int t = 0; t < p->T; t++) {
    p->j[t] =
        (sg_job_t){B, H, H, 0, sg_buf((size_t)B * H), sg_buf((size_t)H * H), sg_buf((size_t)B * H), NULL};
    ok = ok && p->j[t].a && p->j[t].b && p->j[t].c;
  }
  return ok ? 0 : SAC_ENOMEM;
}

static void probe_free(probe_t *p) {
  free(p->a), free(p->b), free(p->c);
  for (int t = 0; t < p->T; t++)
    free(p->j[t].a), free(p->j[t].b), free(p->j[t].c);
}

/* GFLOP/s of T threads each running `reps` single-threaded (B, H, H) sgemms at once. */
static double sg_shapes(probe_t *p, int reps) {
  for (int t = 0; t < p->T; t++)
    p->j[t].reps = reps;
  double dt = sg_run(p->j, p->T);
  return 2.0 * p->B * p->H * p->H * reps * p->T / dt * 1e-9;
}

/* GFLOP/s of one BIG_N^3 sgemm split by rows over T single-threaded sgemms at once, as
 * OpenBLAS's own threads would split it. Not OpenBLAS's threads themselves: they spin for
 * a while after each call, on the cores the next slice of updates needs. */
static double sg_big(probe_t *p) {
  sg_job_t j[MAX_T];
  for (int t = 0; t < p->T; t++) {
    int r0 = BIG_N * t / p->T, r1 = BIG_N * (t + 1) / p->T;
    j[t] = (sg_job_t){r1 - r0, BIG_N, BIG_N, 1, p->a + (size_t)r0 * BIG_N, p->b, p->c + (size_t)r0 * BIG_N,
                      NULL};
  }
  double dt = sg_run(j, p->T);
  return 2.0 * BIG_N * BIG_N * BIG_N / dt * 1e-9;
}

typedef struct {
  double big, shapes;
} ceiling_t;

/* One measurement of both yardsticks: a 2048^3 sgemm on T threads (about 17 GFLOP), and T
 * shapes sgemms of about 1 GFLOP per thread at once. */
static ceiling_t measure_ceiling(probe_t *p) {
  ceiling_t c;
  c.big = sg_big(p);
  c.shapes = sg_shapes(p, (int)(1e9 / (2.0 * p->B * p->H * p->H)) + 1);
  return c;
}

static double ceiling_of(ceiling_t c) { return c.big > c.shapes ? c.big : c.shapes; }

typedef struct {
  double ups, sample_s, target_s, critic_s, actor_s, opt_s, total_s;
  double big, shapes, frac; /* cpu: medians over the run's slices */
  /* per timed update: the backend's blocking syncs and launches (sac_backend_counts; NAN
   * where it keeps none), and the last update's losses */
  double blocking_per_update, launches_per_update;
  double host_copies_per_batch; /* timed loop: host copies / staged batches (NAN: not counted) */
  sac_stats_t last;
} run_t;

typedef struct {
  float *buf, *stage;
  const float **rows; /* the batch's rows, drawn before they are read */
  int O, A, B, N, row;
  sac_rng_t rng;
} sampler_t;

/* A 100k-row random buffer to sample batches from (as the peer does). */
static int sampler_init(sampler_t *sm, const sac_hparams_t *hp) {
  sm->O = hp->obs_dim, sm->A = hp->act_dim, sm->B = hp->batch, sm->N = 100000;
  sm->row = 2 * sm->O + sm->A + 2;
  sm->buf = malloc(sizeof(float) * (size_t)sm->N * sm->row);
  sm->stage = malloc(sizeof(float) * (size_t)sm->B * sm->row * SAC_MAX_UPDATES_PER_LAUNCH);
  sm->rows = malloc(sizeof(*sm->rows) * (size_t)sm->B);
  if (!sm->buf || !sm->stage || !sm->rows) {
    free(sm->buf), free(sm->stage), free(sm->rows);
    return SAC_ENOMEM;
  }
  sac_rng_init(&sm->rng, 1, 123);
  for (size_t i = 0; i < (size_t)sm->N * sm->row; i++)
    sm->buf[i] = sac_rng_normal(&sm->rng);
  for (int i = 0; i < sm->N; i++)
    sm->buf[(size_t)i * sm->row + 2 * sm->O + sm->A + 1] = 0.0f; /* terminated */
  return 0;
}

/* Rows asked for ahead of the one being copied */
#define GATHER_AHEAD 8

/* Asks for the cache lines of batch row k (none past the batch). */
static void prefetch_row(const sampler_t *sm, int k) {
  if (k >= sm->B)
    return;
  for (int off = 0; off < sm->row; off += 16)
    __builtin_prefetch(sm->rows[k] + off);
  __builtin_prefetch(sm->rows[k] + sm->row - 1);
}

/* A fresh uniformly sampled batch, split into its fields: the B rows drawn first, then
 * copied with the lines of the rows GATHER_AHEAD on already asked for, as the replay
 * shard's sampler does (replay/sampler.c); copied as drawn, each row's lines came in
 * one after another (58 us a batch of 256 cheetah rows on a 2-core VM). */
static void gather_rows(sampler_t *sm, float *obs, float *act, float *next_obs, float *rew, float *term) {
  const int O = sm->O, A = sm->A, B = sm->B;
  for (int k = 0; k < B; k++)
    sm->rows[k] = sm->buf + (size_t)sac_rng_below(&sm->rng, sm->N) * sm->row;
  for (int k = 0; k < GATHER_AHEAD; k++)
    prefetch_row(sm, k);
  for (int k = 0; k < B; k++) {
    prefetch_row(sm, k + GATHER_AHEAD);
    const float *r = sm->rows[k];
    memcpy(obs + (size_t)k * O, r, sizeof(float) * O);
    memcpy(next_obs + (size_t)k * O, r + O, sizeof(float) * O);
    memcpy(act + (size_t)k * A, r + 2 * O, sizeof(float) * A);
    rew[k] = r[2 * O + A];
    term[k] = r[2 * O + A + 1];
  }
}

/* A fresh uniformly sampled batch into the learner's batch buffers, staged (pinned,
 * double-buffered, overlapping) where the backend offers it. */
static void sample_batch(sampler_t *sm, sac_backend_t *be, sac_batch_t *b) {
  const int O = sm->O, A = sm->A, B = sm->B;
  float *so = sm->stage, *sa = so + (size_t)B * O, *sn = sa + (size_t)B * A, *sr = sn + (size_t)B * O,
        *st = sr + B;
  gather_rows(sm, so, sa, sn, sr, st);
  const int staged = be->ops->stage != NULL;
  int (*put)(sac_backend_t *, float *, const float *, size_t) = staged ? be->ops->stage : be->ops->upload;
  put(be, b->obs, so, (size_t)B * O);
  put(be, b->action, sa, (size_t)B * A);
  put(be, b->next_obs, sn, (size_t)B * O);
  put(be, b->reward, sr, B);
  put(be, b->terminated, st, B);
  if (staged)
    be->ops->stage_commit(be);
}

/* Batch j of the next launch written in place (sac_batch_slots_at: the backend's own
 * memory, pinned on cuda), row by row from the buffer, as the replay client copies its
 * reply rows. 0 or the slots' error. */
static int sample_in_place(sampler_t *sm, sac_t *s, int j) {
  sac_batch_slots_t sl;
  int rc = sac_batch_slots_at(s, j, 0, &sl);
  if (rc)
    return rc;
  gather_rows(sm, sl.obs, sl.action, sl.next_obs, sl.reward, sl.terminated);
  return 0;
}

/* The batches of one launch (sac_updates_per_launch of them): written in place (--direct),
 * or decoded into host buffers and staged by one sac_load_batches; one commit either way.
 * With one update per launch and no --direct, sample_batch as always. Returns the updates
 * the launch will make. */
static int sample_launch(const bench_cfg_t *c, sampler_t *sm, sac_backend_t *be, sac_t *s) {
  const int K = sac_updates_per_launch(s);
  if (K == 1 && !c->direct) {
    sample_batch(sm, be, sac_batch(s));
    return 1;
  }
  if (c->direct) {
    for (int j = 0; j < K; j++)
      if (sample_in_place(sm, s, j) != 0)
        return 0;
    return sac_batch_commit(s) == 0 ? K : 0;
  }
  const size_t B = (size_t)sm->B, O = (size_t)sm->O, A = (size_t)sm->A, per = B * (2 * O + A + 2);
  sac_host_batch_t hb[SAC_MAX_UPDATES_PER_LAUNCH];
  for (int j = 0; j < K; j++) {
    float *so = sm->stage + (size_t)j * per, *sa = so + B * O, *sn = sa + B * A, *sr = sn + B * O,
          *st = sr + B;
    for (size_t k = 0; k < B; k++) {
      const float *r = sm->buf + (size_t)sac_rng_below(&sm->rng, sm->N) * sm->row;
      memcpy(so + k * O, r, sizeof(float) * O);
      memcpy(sn + k * O, r + O, sizeof(float) * O);
      memcpy(sa + k * A, r + 2 * O, sizeof(float) * A);
      sr[k] = r[2 * O + A];
      st[k] = r[2 * O + A + 1];
    }
    hb[j] = (sac_host_batch_t){so, sn, sa, sr, st, NULL};
  }
  return sac_load_batches(s, hb, K) == 0 ? K : 0;
}

/* The backend's count of key, or NAN */
static double be_metric(sac_backend_t *be, const char *key) {
  double v;
  return be->ops->get_metric && be->ops->get_metric(be, key, &v) == 0 ? v : NAN;
}

/* Updates re-run after each ceiling probe, untimed: the probe's 48 MiB evicted the
 * learner's parameters and activations from the caches, which a training run keeps warm. */
#define REWARM_UPDATES 2

/* One timed run: warmup, then `updates` updates each on a freshly sampled batch, in
 * `slices` slices; with a probe (cpu), the ceiling is measured before each slice and the
 * run's fraction is the median of the slices' achieved / ceiling. */
static int run_ours(const bench_cfg_t *c, sac_backend_t *be, const sac_hparams_t *hp, probe_t *probe,
                    run_t *out, double *flops) {
  sac_t *s;
  int rc = sac_new(hp, be, &s);
  if (rc)
    return rc;
  sampler_t sm;
  if ((rc = sac_set_updates_per_launch(s, c->upl)) != 0 || (rc = sampler_init(&sm, hp)) != 0) {
    sac_destroy(&s);
    return rc;
  }
  *flops = update_flops(s);
  sac_batch_t *b = sac_batch(s);
  sac_profile_t prof = {0};
  const int slices = probe && c->slices < c->updates ? c->slices : 1;
  double big[1000], shp[1000], frac[1000];
  double t_sample = 0, total = 0;
  int64_t n_blocking = 0, n_launches = 0;
  int counted = 1;
  int64_t done = 0;
  double copies0 = NAN, batches0 = NAN;
  (void)b;
  for (int it = 0; it < c->warmup;) {
    int k = sample_launch(c, &sm, be, s);
    if (k == 0 || (rc = sac_update_launch(s)) != 0)
      return k == 0 ? SAC_EBACKEND : rc;
    it += k;
  }
  for (int sl = 0; sl < slices; sl++) {
    /* step 1: the ceiling, then the caches warm again */
    if (probe) {
      ceiling_t ce = measure_ceiling(probe);
      big[sl] = ce.big, shp[sl] = ce.shapes;
      sac_set_profile(s, NULL);
      for (int w = 0; w < REWARM_UPDATES;) {
        int k = sample_launch(c, &sm, be, s);
        if (k == 0 || sac_update_launch(s) != 0)
          return SAC_EBACKEND;
        w += k;
      }
    }
    if (c->profile)
      sac_set_profile(s, &prof);
    /* step 2: the slice's timed updates */
    const int n = c->updates * (sl + 1) / slices - c->updates * sl / slices;
    be->ops->sync(be);
    sac_backend_counts_t k0, k1;
    counted = counted && sac_backend_counts(be, &k0) == 0;
    if (sl == 0)
      copies0 = be_metric(be, "host_copies"), batches0 = be_metric(be, "staged_batches");
    double t0 = sac_clock_s();
    for (int it = 0; it < n;) {
      double ts = sac_clock_s();
      int k = sample_launch(c, &sm, be, s);
      t_sample += sac_clock_s() - ts;
      if (k == 0 || (rc = sac_update_launch(s)) != 0)
        return k == 0 ? SAC_EBACKEND : rc;
      it += k, done += k;
    }
    if (counted && sac_backend_counts(be, &k1) == 0)
      n_blocking += k1.blocking_syncs - k0.blocking_syncs, n_launches += k1.launches - k0.launches;
    be->ops->sync(be);
    double dt = sac_clock_s() - t0;
    total += dt;
    if (probe)
      frac[sl] = *flops * n / dt * 1e-9 / ceiling_of((ceiling_t){big[sl], shp[sl]});
    if (probe && c->show_slices)
      printf("    slice %d: ceiling %.1f (2048^3) %.1f (shapes), achieved %.1f GFLOP/s, %.3f\n", sl + 1,
             big[sl], shp[sl], *flops * n / dt * 1e-9, frac[sl]);
  }
  out->total_s = total;
  out->ups = (double)done / total;
  out->sample_s = t_sample / (double)done;
  out->target_s = prof.target / (double)done;
  out->critic_s = prof.critic / (double)done;
  out->actor_s = prof.actor / (double)done;
  out->opt_s = prof.optimizer / (double)done;
  out->host_copies_per_batch =
      (be_metric(be, "host_copies") - copies0) / (be_metric(be, "staged_batches") - batches0);
  if (probe)
    out->big = median(big, slices), out->shapes = median(shp, slices), out->frac = median(frac, slices);
  out->blocking_per_update = counted ? (double)n_blocking / (double)done : NAN;
  out->launches_per_update = counted ? (double)n_launches / (double)done : NAN;
  sac_set_profile(s, NULL);
  if ((rc = sac_stats(s, &out->last)) != 0) {
    sac_destroy(&s);
    return rc;
  }
  free(sm.buf), free(sm.stage), free(sm.rows);
  sac_destroy(&s);
  return 0;
}

/* ---- the peers: gpu_peers.py's ways of writing the same update, those installed ----
 * One run of the peers follows each of the first --peer_runs runs of ours (interleaved, so
 * that a change in the machine's speed falls on both), each run one child process of
 * gpu_peers.py with every mode installed; the figure of a peer is the median of its runs,
 * and sacfleet is quoted against the fastest one by name. A peer that failed, printed a
 * malformed line or ended with non-finite weights (finite=0) is listed and not quoted. */
#define MAX_PEERS 8
typedef struct {
  char python[256];  /* the interpreter; "" when none has a peer installed */
  char modes[128];   /* comma-separated */
  char versions[96]; /* "torch 2.x, jax 0.x" */
  int n;
  char name[MAX_PEERS][24];
  double ups[MAX_PEERS][64];
  int runs[MAX_PEERS];
  char failed[MAX_PEERS][160]; /* the last failure's reason, "" if none */
} peers_t;

/* What of torch, jax and optax `python` can import, as "torch=2.15.0 jax=0.10.2 optax=...";
 * "" when it cannot run or has none. */
static void peer_packages(const char *python, char *out, size_t cap) {
  char cmd[600];
  out[0] = '\0';
  snprintf(cmd, sizeof cmd,
           "'%s' -c 'import importlib.util as u, importlib.metadata as m\n"
           "print(\" \".join(p + \"=\" + m.version(p) for p in (\"torch\", \"jax\", \"optax\") if "
           "u.find_spec(p)))' "
           "2>/dev/null",
           python);
  FILE *f = popen(cmd, "r");
  if (!f)
    return;
  if (!fgets(out, (int)cap, f))
    out[0] = '\0';
  pclose(f);
  out[strcspn(out, "\n")] = '\0';
}

/* The modes to run among `want` (comma-separated) given what is installed. */
static void peer_select(const char *want, const char *pkgs, char *out, size_t cap) {
  char buf[128];
  snprintf(buf, sizeof buf, "%s", want);
  out[0] = '\0';
  const int torch = strstr(pkgs, "torch=") != NULL, jax = strstr(pkgs, "jax=") && strstr(pkgs, "optax=");
  for (char *save = NULL, *m = strtok_r(buf, ",", &save); m; m = strtok_r(NULL, ",", &save))
    if ((!strncmp(m, "torch", 5) && torch) || (!strncmp(m, "jax", 3) && jax))
      snprintf(out + strlen(out), cap - strlen(out), "%s%s", out[0] ? "," : "", m);
}

/* Picks the interpreter and the modes: --peer_python as given (every requested mode is run;
 * a missing package shows as a failed peer), else the first candidate with any peer
 * installed. Prints one line either way. */
static void peers_find(const bench_cfg_t *c, peers_t *P) {
  memset(P, 0, sizeof *P);
  const char *want = c->peer_modes[0] ? c->peer_modes
                     : strcmp(c->backend, "cuda") == 0
                         ? "torch-eager,torch-graph,torch-compile,jax-jit,jax-scan"
                         : "torch-eager,torch-compile,jax-jit,jax-scan";
  if (access(c->peer_script, R_OK) != 0) {
    printf("peers: none: the peers' script %s is not there (--peer_script)\n", c->peer_script);
    return;
  }
  char pkgs[256] = "";
  if (c->peer_python[0]) {
    snprintf(P->python, sizeof P->python, "%s", c->peer_python);
    snprintf(P->modes, sizeof P->modes, "%s", want);
    peer_packages(P->python, pkgs, sizeof pkgs);
  } else {
    char venv[300] = "";
    const char *e = getenv("VIRTUAL_ENV"), *sp = getenv("SAC_PEER_PYTHON");
    if (e && e[0])
      snprintf(venv, sizeof venv, "%s/bin/python", e);
    const char *cand[] = {sp && sp[0] ? sp : "", venv, "python3", "/usr/bin/python3"};
    for (size_t i = 0; i < sizeof cand / sizeof cand[0] && !P->python[0]; i++) {
      if (!cand[i][0])
        continue;
      peer_packages(cand[i], pkgs, sizeof pkgs);
      peer_select(want, pkgs, P->modes, sizeof P->modes);
      if (P->modes[0])
        snprintf(P->python, sizeof P->python, "%s", cand[i]);
    }
    if (!P->python[0]) {
      printf(
          "peers: none installed: no interpreter among $SAC_PEER_PYTHON, $VIRTUAL_ENV/bin/python, python3 "
          "and "
          "/usr/bin/python3 has torch or jax+optax; install bench/requirements-peers.txt in a venv and pass "
          "--peer_python V/bin/python\n");
      return;
    }
  }
  snprintf(P->versions, sizeof P->versions, "%s", pkgs[0] ? pkgs : "no torch or jax found");
  printf("peers: %s under %s (%s)\n", P->modes, P->python, P->versions);
}

static int peer_slot(peers_t *P, const char *name) {
  for (int i = 0; i < P->n; i++)
    if (!strcmp(P->name[i], name))
      return i;
  if (P->n == MAX_PEERS)
    return -1;
  snprintf(P->name[P->n], sizeof P->name[0], "%s", name);
  return P->n++;
}

/* One line of gpu_peers.py's output into P: "peer-result mode=M ... updates_per_s=V ...
 * finite=F ..." or "peer-failed mode=M reason=R". Other lines are ignored. */
static void peer_line(peers_t *P, const char *line) {
  char mode[24] = "";
  const char *m = strstr(line, " mode=");
  if (!m || sscanf(m, " mode=%23s", mode) != 1)
    return;
  const int i = peer_slot(P, mode);
  if (i < 0)
    return;
  if (!strncmp(line, "peer-failed ", 12)) {
    const char *r = strstr(line, " reason=");
    snprintf(P->failed[i], sizeof P->failed[i], "%s", r ? r + 8 : "no reason given");
    P->failed[i][strcspn(P->failed[i], "\n")] = '\0';
    return;
  }
  if (strncmp(line, "peer-result ", 12))
    return;
  const char *u = strstr(line, " updates_per_s="), *f = strstr(line, " finite=");
  double v;
  if (!u || sscanf(u, " updates_per_s=%lf", &v) != 1 || !(isfinite(v) && v > 0)) {
    snprintf(P->failed[i], sizeof P->failed[i], "no positive updates_per_s in its line");
    return;
  }
  if (f && !strncmp(f, " finite=0", 9)) {
    snprintf(P->failed[i], sizeof P->failed[i], "its weights ended non-finite (finite=0)");
    return;
  }
  if (P->runs[i] < 64)
    P->ups[i][P->runs[i]++] = v;
}

/* One run of the peers (a child process); prints their figures on the run's line. */
static void peers_run(const bench_cfg_t *c, const sac_hparams_t *hp, peers_t *P) {
  if (!P->python[0])
    return;
  char cmd[1600];
  const int T = c->threads > 0 ? c->threads : 2;
  snprintf(cmd, sizeof cmd,
           "env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS=%d '%s' '%s' --device %s --modes %s "
           "--obs %d --act %d --hidden %d --layers %d --batch %d --updates %d --runs 1 --scan %d --capacity "
           "100000 "
           "2>/dev/null",
           T, P->python, c->peer_script, strcmp(c->backend, "cuda") == 0 ? "cuda" : "cpu", P->modes,
           hp->obs_dim, hp->act_dim, hp->hidden, hp->depth, hp->batch, c->updates, c->peer_scan);
  FILE *f = popen(cmd, "r");
  if (!f)
    return;
  char line[1024];
  while (fgets(line, sizeof line, f)) {
    peer_line(P, line);
    const char *m = strstr(line, " mode="), *u = strstr(line, " updates_per_s=");
    char mode[24] = "";
    if (strncmp(line, "peer-", 5) || !m || sscanf(m, " mode=%23s", mode) != 1)
      continue;
    double v = NAN;
    if (!strncmp(line, "peer-result", 11) && u)
      sscanf(u, " updates_per_s=%lf", &v);
    if (isnan(v))
      printf("   %s failed", mode);
    else
      printf("   %s %.1f", mode, v);
  }
  int st = pclose(f);
  if (st != 0)
    printf("   (peers' script exited with status %d)", st);
}

/* The peers' table lines and, for scripts, "peer-best mode=M updates_per_s=V
 * sacfleet_updates_per_s=S ratio=R" (or "peer-best mode=none"). */
static void peers_report(peers_t *P, double ours) {
  if (!P->python[0])
    return;
  int best = -1;
  double best_ups = 0;
  for (int i = 0; i < P->n; i++) {
    if (P->runs[i] == 0) {
      printf("| peer %s | failed: %s |\n", P->name[i], P->failed[i][0] ? P->failed[i] : "no result line");
      continue;
    }
    const double m = median(P->ups[i], P->runs[i]);
    printf("| peer %s updates/s (median of %d run%s) | %.1f |\n", P->name[i], P->runs[i],
           P->runs[i] > 1 ? "s" : "", m);
    if (P->failed[i][0])
      printf("| peer %s, a failed run | %s |\n", P->name[i], P->failed[i]);
    if (m > best_ups)
      best = i, best_ups = m;
  }
  if (best < 0) {
    printf("| fastest peer | none: no peer produced a figure |\n");
    printf("peer-best mode=none sacfleet_updates_per_s=%.1f\n", ours);
    return;
  }
  printf("| fastest peer | %s (%s, %s) |\n", P->name[best], P->python, P->versions);
  printf("| ratio sacfleet / fastest peer (%s) | %.2fx |\n", P->name[best], ours / best_ups);
  printf("peer-best mode=%s updates_per_s=%.1f sacfleet_updates_per_s=%.1f ratio=%.3f\n", P->name[best],
         best_ups, ours, ours / best_ups);
}

/* Kernels per update (issue 16): the backend ops of one update counted through a proxy
 * (learner/op_count.h), fused and unfused, and on cuda the backend's own launch count
 * (kernels + cuBLASLt matmuls) over the same eager updates. */
static double print_op_counts(const bench_cfg_t *c, sac_backend_t *be, const sac_hparams_t *hp) {
  sac_t *s = NULL;
  int64_t fused[2] = {0, 0}, unfused[2] = {0, 0};
  double k0 = NAN, k1 = NAN, k2 = NAN;
  int has_k = be->ops->get_metric && be->ops->get_metric(be, "kernel_launches", &k0) == 0;
  if (sac_new(hp, be, &s) != 0 || sac_count_update_ops(s, be, 0, fused) != 0 ||
      (has_k && be->ops->get_metric(be, "kernel_launches", &k1) != 0) ||
      sac_count_update_ops(s, be, 1, unfused) != 0 ||
      (has_k && be->ops->get_metric(be, "kernel_launches", &k2) != 0)) {
    fprintf(stderr, "counting the ops of an update failed\n");
    sac_destroy(&s);
    return NAN;
  }
  printf("| backend ops per update (actor step / critic only), fused | %lld / %lld |\n", (long long)fused[0],
         (long long)fused[1]);
  printf("| backend ops per update (actor step / critic only), unfused | %lld / %lld |\n",
         (long long)unfused[0], (long long)unfused[1]);
  /* with policy_delay 1 each count is exactly one update */
  if (has_k && hp->policy_delay == 1)
    printf("| %s launches per update (kernels + matmuls, eager), fused / unfused | %.0f / %.0f |\n",
           be->ops->name, k1 - k0, k2 - k1);
  printf("ops-result preset=%s backend=%s precision=%s ops_fused=%lld ops_fused_critic_only=%lld "
         "ops_unfused=%lld ops_unfused_critic_only=%lld\n",
         c->config, c->backend, c->precision, (long long)fused[0], (long long)fused[1], (long long)unfused[0],
         (long long)unfused[1]);
  sac_destroy(&s);
  return has_k && hp->policy_delay == 1 ? k1 - k0 : NAN;
}

/* ---- time per op and per update (issue 33) ------------------------------------------ */

/* The time per backend op of an eager update (sac_profile_update_ops: CUDA events with
 * the stream held, so device time; the host clock on cpu), as a table: op, calls per
 * update, microseconds per call and per update, share of the update. The update's own
 * time (first to last mark) is the sum of the rows plus what runs between the ops. One
 * "op-profile-row" line per row and an "op-profile-result" line for scripts. 0 or an
 * error (printed). */
static int print_op_profile(const bench_cfg_t *c, sac_backend_t *be, const sac_hparams_t *hp) {
  sac_t *s = NULL;
  sampler_t sm;
  static sac_op_profile_t pr;
  int rc = sac_new(hp, be, &s);
  if (rc == 0 && (rc = sampler_init(&sm, hp)) != 0)
    sac_destroy(&s);
  if (rc) {
    fprintf(stderr, "op profile: %s\n", sac_strerror(rc));
    return rc;
  }
  for (int u = 0; u < 3 && rc == 0; u++) { /* plans, kernel loading */
    sample_batch(&sm, be, sac_batch(s));
    rc = sac_update(s);
  }
  memset(&pr, 0, sizeof pr);
  for (int u = 0; u < c->op_profile_updates && rc == 0; u++) { /* a fresh batch for each, untimed */
    sac_op_profile_t one;
    sample_batch(&sm, be, sac_batch(s));
    if ((rc = sac_profile_update_ops(s, be, 1, &one)) != 0)
      break;
    for (int r = 0; r < one.n_rows; r++) {
      int k = 0;
      while (k < pr.n_rows && strcmp(pr.row[k].name, one.row[r].name) != 0)
        k++;
      if (k == pr.n_rows && pr.n_rows < SAC_OP_PROFILE_ROWS)
        snprintf(pr.row[pr.n_rows++].name, SAC_OP_NAME_MAX, "%s", one.row[r].name);
      if (k < pr.n_rows)
        pr.row[k].calls += one.row[r].calls, pr.row[k].seconds += one.row[r].seconds;
    }
    pr.updates += one.updates, pr.ops += one.ops, pr.update_seconds += one.update_seconds;
  }
  free(sm.buf), free(sm.stage), free(sm.rows);
  sac_destroy(&s);
  if (rc) {
    fprintf(stderr, "op profile: %s\n", sac_strerror(rc));
    return rc;
  }
  const double n = pr.updates, upd_us = pr.update_seconds / n * 1e6;
  double sum_us = 0;
  printf("\n| op (%s, %s, eager, %d updates; %s) | calls per update | us per call | us per update | share "
         "of the update |\n| --- | --- | --- | --- | --- |\n",
         be->ops->name, c->precision, pr.updates,
         be->ops->graph_launch ? "device time: CUDA events, stream held" : "host clock");
  for (int r = 0; r < pr.n_rows; r++) {
    const sac_op_row_t *w = &pr.row[r];
    const double per_update = w->seconds / n * 1e6;
    sum_us += per_update;
    printf("| %s | %.2f | %.2f | %.2f | %.1f%% |\n", w->name, w->calls / n, w->seconds / w->calls * 1e6,
           per_update, 100.0 * per_update / upd_us);
    printf("op-profile-row name=\"%s\" calls=%.3f us_per_call=%.3f us_per_update=%.3f share=%.4f\n", w->name,
           w->calls / n, w->seconds / w->calls * 1e6, per_update, per_update / upd_us);
  }
  printf("| between the ops (host work, marks) | | | %.2f | %.1f%% |\n", upd_us - sum_us,
         100.0 * (upd_us - sum_us) / upd_us);
  printf("| the update, first mark to last | %.2f | | %.2f | 100%% |\n", (double)pr.ops / n, upd_us);
  printf("op-profile-result preset=%s backend=%s precision=%s batch=%d rows=%d ops_per_update=%.2f "
         "update_us=%.3f sum_us=%.3f\n",
         c->config, c->backend, c->precision, hp->batch, pr.n_rows, (double)pr.ops / n, upd_us, sum_us);
  return 0;
}

static int cmp_dbl(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Device and host microseconds per update, apart, with the op profile off and graphs as
 * configured: device, the backend's timing marks around each launch (events around the
 * graph launch on cuda; each launch after the device is idle), host, the clock around
 * the call that enqueues a launch (the device idle first, so no queue is full); per
 * update (a launch is sac_updates_per_launch of them); medians. One "update-time-result"
 * line. 0 or an error (printed). */
static int print_update_times(const bench_cfg_t *c, sac_backend_t *be, const sac_hparams_t *hp) {
  const sac_backend_ops_t *ops = be->ops;
  const int N =
      c->op_profile_updates < SAC_BACKEND_MAX_MARKS / 2 ? c->op_profile_updates : SAC_BACKEND_MAX_MARKS / 2;
  sac_t *s = NULL;
  sampler_t sm;
  int rc = sac_new(hp, be, &s);
  if (rc == 0 && (rc = sac_set_updates_per_launch(s, c->upl)) == 0 && (rc = sampler_init(&sm, hp)) != 0)
    rc = SAC_ENOMEM;
  if (rc) {
    sac_destroy(&s);
    fprintf(stderr, "update times: %s\n", sac_strerror(rc));
    return rc;
  }
  const int K = sac_updates_per_launch(s);
  static double sec[SAC_BACKEND_MAX_MARKS];
  double *dev = calloc((size_t)N, sizeof(double)), *host = calloc((size_t)N, sizeof(double));
  for (int u = 0; u < 4 && rc == 0; u++) /* eager warm-up, then the graphs are captured */
    rc = sample_launch(c, &sm, be, s) ? sac_update_launch(s) : SAC_EBACKEND;
  for (int i = 0; i < N && rc == 0; i++) { /* host: the enqueue of one launch */
    if (!sample_launch(c, &sm, be, s) || (rc = ops->sync(be)) != 0)
      break;
    double t0 = sac_clock_s();
    rc = sac_update_launch(s);
    host[i] = (sac_clock_s() - t0) / K;
  }
  int timed = ops->timing_begin && ops->timing_mark && ops->timing_end;
  if (rc == 0 && timed && (rc = ops->timing_begin(be, 0)) == 0) {
    for (int i = 0; i < N && rc == 0; i++) {
      if (!sample_launch(c, &sm, be, s) || (rc = ops->sync(be)) != 0)
        break;
      ops->timing_mark(be, 2 * i);
      rc = sac_update_launch(s);
      ops->timing_mark(be, 2 * i + 1);
    }
    int rc2 = ops->timing_end(be, 2 * N, sec);
    rc = rc ? rc : rc2;
    for (int i = 0; i < N && rc == 0; i++)
      dev[i] = (sec[2 * i + 1] - sec[2 * i]) / K;
  }
  free(sm.buf), free(sm.stage), free(sm.rows);
  sac_destroy(&s);
  if (rc) {
    free(dev), free(host);
    fprintf(stderr, "update times: %s\n", sac_strerror(rc));
    return rc;
  }
  qsort(host, (size_t)N, sizeof(double), cmp_dbl);
  qsort(dev, (size_t)N, sizeof(double), cmp_dbl);
  const double h = host[N / 2] * 1e6, d = timed ? dev[N / 2] * 1e6 : NAN;
  printf("\n| per update (median of %d launches of %d, %s, op profile off) | us |\n| --- | --- |\n", N, K,
         c->graphs && ops->graph_launch ? "graphs" : "eager");
  printf("| device: marks around each launch (%s) | %.2f |\n",
         ops->graph_launch ? "CUDA events around the graph launch" : "host clock", d);
  printf("| host: the call that enqueues the launch | %.2f |\n", h);
  printf(
      "update-time-result preset=%s backend=%s precision=%s graphs=%d upl=%d device_us=%.3f host_us=%.3f\n",
      c->config, c->backend, c->precision, c->graphs && ops->graph_launch ? 1 : 0, K, d, h);
  free(dev), free(host);
  return 0;
}

/* --gemm: auto, avx2 or openblas (0), else an error on stderr (2). */
static int set_gemm(const char *g) {
  if (strcmp(g, "auto") != 0 && strcmp(g, "avx2") != 0 && strcmp(g, "openblas") != 0) {
    fprintf(stderr, "--gemm %s: not auto, avx2 or openblas\n", g);
    return 2;
  }
  sac_gemm_own_set_enabled(strcmp(g, "openblas") != 0);
  if (strcmp(g, "avx2") == 0 && sac_gemm_own_cap_bits(256) != 256) {
    fprintf(stderr, "--gemm avx2: this CPU has no AVX2 with FMA\n");
    return 2;
  }
  return 0;
}

int main(int argc, char **argv) {
  bench_cfg_t c;
  int action;
  if (sac_config_load(k_opts, sizeof k_opts / sizeof k_opts[0], &c, argc, argv,
                      "sac-bench-learner: SAC updates/s on a backend against the fastest installed peer",
                      &action) != 0)
    return 2;
  if (action == SAC_CFG_EXIT_OK)
    return 0;
  sac_hparams_t hp;
  struct {
    const char *name;
    int obs, act, hidden, depth, batch;
  } std[] = {{"cheetah", 17, 6, 256, 2, 256},
             {"seed", 17, 6, 256, 3, 256},
             {"pendulum", 3, 1, 256, 2, 256},
             {"tiny", 3, 1, 64, 3, 100}};
  int found = -1;
  for (int i = 0; i < 4; i++)
    if (strcmp(c.config, std[i].name) == 0)
      found = i;
  if (found < 0) {
    fprintf(stderr, "unknown preset \"%s\" (cheetah, seed, pendulum, tiny)\n", c.config);
    return 2;
  }
  sac_hparams_default(&hp, c.obs ? c.obs : std[found].obs, c.act ? c.act : std[found].act);
  hp.hidden = c.hidden ? c.hidden : std[found].hidden;
  hp.depth = c.depth ? c.depth : std[found].depth;
  hp.batch = c.batch ? c.batch : std[found].batch;
  hp.recompute = c.recompute;
  sac_backend_t *be;
  int rc = sac_backend_new(c.backend, c.threads, &be);
  if (rc) {
    fprintf(stderr, "backend %s: %s\n", c.backend, sac_strerror(rc));
    return 1;
  }
  if (be->ops->set_option) {
    if ((rc = be->ops->set_option(be, "precision", c.precision)) != 0 ||
        (rc = be->ops->set_option(be, "graphs", c.graphs ? "1" : "0")) != 0) {
      fprintf(stderr, "backend %s: precision %s: %s\n", c.backend, c.precision, sac_strerror(rc));
      return 2;
    }
  } else if (strcmp(c.precision, "fp32") != 0) {
    fprintf(stderr, "backend %s computes in fp32 only\n", c.backend);
    return 2;
  }
  if (set_gemm(c.gemm) != 0)
    return 2;
  if (strcmp(c.backend, "cpu") == 0) {
    if (sac_gemm_own_enabled() && sac_gemm_own_bits() > 0)
      printf("layer products: own GEMM (%s); OpenBLAS under 8 rows or 4 columns, and weight gradients "
             "under 32 columns\n",
             sac_gemm_own_bits() == 512 ? "AVX-512" : "AVX2");
    else
      printf("layer products: OpenBLAS\n");
  }
  double err = sgemm_check();
  printf("OpenBLAS kernel %s: sgemm 256^3 max relative error %.2e against double (%s)\n",
         openblas_get_corename(), err, err < 1e-5 ? "ok" : "WRONG");
  if (!(err < 1e-5)) {
    fprintf(stderr, "sgemm computes wrong results with this kernel; not benchmarking\n");
    return 1;
  }
  run_t *runs = calloc((size_t)c.runs, sizeof *runs);
  double *ups = calloc((size_t)c.runs, sizeof(double));
  double flops = 0;
  peers_t *peers = calloc(1, sizeof *peers);
  if (!runs || !ups || !peers)
    return 1;
  if (c.peer)
    peers_find(&c, peers);
  printf("preset %s: obs %d act %d hidden %dx%d batch %d, backend %s (%s%s%s), threads %d, %d runs of %d "
         "updates\n",
         c.config, hp.obs_dim, hp.act_dim, hp.hidden, hp.depth, hp.batch, c.backend, c.precision,
         c.graphs && be->ops->graph_launch && !c.profile ? ", graphs" : "", c.recompute ? ", recompute" : "",
         c.threads, c.runs, c.updates);
  const int cpu = strcmp(c.backend, "cpu") == 0;
  const int T = c.threads > 0 ? c.threads : openblas_get_num_procs();
  double *frac = calloc((size_t)c.runs, sizeof(double)), *big = calloc((size_t)c.runs, sizeof(double)),
         *shp = calloc((size_t)c.runs, sizeof(double));
  probe_t *probe = NULL;
  if (cpu && ((probe = malloc(sizeof *probe)) == NULL || probe_init(probe, T, hp.batch, hp.hidden) != 0)) {
    fprintf(stderr, "cannot allocate the ceiling probe's operands\n");
    return 1;
  }
  const int slices = c.slices < c.updates ? c.slices : 1;
  for (int r = 0; r < c.runs; r++) {
    if ((rc = run_ours(&c, be, &hp, probe, &runs[r], &flops)) != 0) {
      fprintf(stderr, "run failed: %s\n", sac_strerror(rc));
      return 1;
    }
    ups[r] = runs[r].ups;
    printf("  run %d: sacfleet %.1f updates/s", r + 1, runs[r].ups);
    if (cpu) {
      big[r] = runs[r].big, shp[r] = runs[r].shapes, frac[r] = runs[r].frac;
      printf("   ceiling (median of %d slices): sgemm 2048^3 %.1f, %dx%dx%d x%d threads %.1f GFLOP/s; "
             "reached %.2f",
             slices, big[r], hp.batch, hp.hidden, hp.hidden, T, shp[r], frac[r]);
    }
    if (c.peer && r < c.peer_runs)
      peers_run(&c, &hp, peers);
    printf("\n");
    fflush(stdout);
  }
  double parts[5][64];
  for (int r = 0; r < c.runs && r < 64; r++) {
    parts[0][r] = runs[r].sample_s, parts[1][r] = runs[r].target_s, parts[2][r] = runs[r].critic_s;
    parts[3][r] = runs[r].actor_s, parts[4][r] = runs[r].opt_s;
  }
  int nr = c.runs < 64 ? c.runs : 64;
  double m_ups = median(ups, c.runs);
  double ms = 1000.0 / m_ups;
  double gflops = flops * m_ups * 1e-9;
  double hours = 1e6 / m_ups / 3600.0;
  printf("\n| metric | value |\n| --- | --- |\n");
  printf("| sacfleet updates/s (median of %d) | %.1f |\n", c.runs, m_ups);
  printf("| ms/update | %.3f |\n", ms);
  printf("| GFLOP/update | %.3f |\n", flops * 1e-9);
  printf("| achieved GFLOP/s | %.1f |\n", gflops);
  peers_report(peers, m_ups);
  if (cpu) {
    double mb = median(big, c.runs), ms2 = median(shp, c.runs), mf = median(frac, c.runs);
    double ceil = mb > ms2 ? mb : ms2;
    printf("| sgemm 2048^3 on %d threads, GFLOP/s (median) | %.1f |\n", T, mb);
    printf("| sgemm %dx%dx%d, %d at once single-threaded, GFLOP/s (median) | %.1f |\n", hp.batch, hp.hidden,
           hp.hidden, T, ms2);
    printf("| ceiling: updates/s at the larger of the two | %.1f |\n", ceil / (flops * 1e-9));
    printf("| fraction of the ceiling reached (median over runs of each run's median slice ratio) | %.2f |\n",
           mf);
    printf("ceiling-result preset=%s threads=%d sgemm2048_gflops=%.1f sgemm_shapes_gflops=%.1f "
           "achieved_gflops=%.1f fraction=%.3f\n",
           c.config, T, mb, ms2, gflops, mf);
  }
  printf("| time for 1M updates | %.2f h |\n", hours);
  printf("| cost of 1M updates at $%.2f/h | $%.3f |\n", c.price, hours * c.price);
  double kernels = print_op_counts(&c, be, &hp);
  if (c.op_profile && (print_op_profile(&c, be, &hp) != 0 || print_update_times(&c, be, &hp) != 0))
    return 1;
  /* the timed loop's own counts (with graphs, a replay launches nothing of its own), and
   * the last run's losses: gpu_check.sh refuses a line with non-finite ones */
  const run_t *last = &runs[c.runs - 1];
  printf("| blocking syncs per update (timed loop, last run) | %.2f |\n", last->blocking_per_update);
  printf("| launches per update (timed loop) | %.2f |\n", last->launches_per_update);
  printf("| host copies per batch (%s, timed loop) | %.2f |\n",
         c.direct ? "written in place: the backend's stage_at" : "decoded, then staged",
         last->host_copies_per_batch);
  /* what the backend reports (device memory, graph replays, loss scale), and one line
   * for scripts to collect */
  double peak = NAN, launches = NAN, scale = NAN, skipped = NAN, degraded = NAN;
  if (be->ops->get_metric) {
    static const char *const keys[] = {"device_peak_bytes",  "device_used_bytes", "graph_launches",
                                       "loss_scale",         "skipped_steps",     "degraded_gemms",
                                       "epilogue_fallbacks", "pool_jobs",         "pool_serial_jobs",
                                       "pool_missed_parts",  "pool_sleeps"};
    double *dst[sizeof keys / sizeof keys[0]] = {&peak, NULL, &launches, &scale, &skipped, &degraded};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
      double v;
      if (be->ops->get_metric(be, keys[i], &v) == 0) {
        printf("| backend %s | %.6g |\n", keys[i], v);
        if (dst[i])
          *dst[i] = v;
      }
    }
  }
  printf(
      "bench-result preset=%s backend=%s precision=%s graphs=%d recompute=%d batch=%d hidden=%d depth=%d "
      "updates_per_s=%.1f ms_per_update=%.4f peak_device_mib=%.1f graph_launches=%.0f loss_scale=%g "
      "skipped=%.0f degraded_gemms=%.0f kernels=%.0f blocking_per_update=%.3f critic_loss=%g actor_loss=%g "
      "alpha_loss=%g upl=%d direct=%d host_copies_per_batch=%.2f\n",
      c.config, c.backend, c.precision, c.graphs && be->ops->graph_launch && !c.profile, c.recompute,
      hp.batch, hp.hidden, hp.depth, m_ups, ms, peak / 1048576.0, launches, scale, skipped, degraded, kernels,
      last->blocking_per_update, last->last.critic_loss, last->last.actor_loss, last->last.alpha_loss, c.upl,
      c.direct, last->host_copies_per_batch);
  if (!c.profile) {
    free(runs), free(ups), free(peers), free(frac), free(big), free(shp);
    if (probe)
      probe_free(probe);
    free(probe);
    sac_backend_destroy(&be);
    return 0;
  }
  const char *names[5] = {"sampling + transfer", "target (pi(s'), target critics)", "critic fwd/bwd",
                          "actor fwd/bwd (through critics), alpha", "Adam + Polyak"};
  double sum = 0, med[5];
  for (int i = 0; i < 5; i++)
    sum += (med[i] = median(parts[i], nr));
  printf("\n| where an update's time goes | ms | share |\n| --- | --- | --- |\n");
  for (int i = 0; i < 5; i++)
    printf("| %s | %.3f | %.0f%% |\n", names[i], med[i] * 1e3, 100.0 * med[i] * m_ups);
  printf("| other (loop, profiling syncs) | %.3f | %.0f%% |\n", (1.0 / m_ups - sum) * 1e3,
         100.0 * (1.0 / m_ups - sum) * m_ups);
  free(runs), free(ups), free(peers), free(frac), free(big), free(shp);
  if (probe)
    probe_free(probe);
  free(probe);
  sac_backend_destroy(&be);
  return 0;
}
