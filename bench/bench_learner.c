/* Learner benchmark: SAC updates per second on a backend for the standard
 * configurations of BENCHMARKS.md, with ms/update, achieved GFLOP/s, where an update's
 * time goes, the cost of one million updates at a price per machine-hour, and the
 * PyTorch peer (shared/bench/torch_sac_update.py) measured in the same run, interleaved
 * run by run, reported as a ratio of medians. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "common/clock.h"
#include "common/config.h"
#include "common/error.h"
#include "common/log.h"
#include "common/rng.h"
#include "learner/op_count.h"
#include "learner/sac.h"

typedef struct {
  char config[32];
  char backend[16];
  int threads;
  int updates;
  int warmup;
  int runs;
  int peer;
  char peer_script[512];
  char peer_python[256];
  double price;
  int obs, act, hidden, depth, batch;
  char precision[8];
  int graphs, recompute, profile;
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
    O_("peer", SAC_CFG_BOOL, peer, "true", 1, 0, "also run the PyTorch peer, interleaved"),
    S_("peer_script", peer_script, SAC_SOURCE_DIR "/../shared/bench/torch_sac_update.py", "the peer script"),
    S_("peer_python", peer_python, "/usr/bin/python3", "interpreter with torch (Debian's python3-torch)"),
    O_("price", SAC_CFG_DOUBLE, price, "0.10", 0, 1e9, "machine price per hour (USD) for the cost line"),
    O_("obs", SAC_CFG_INT, obs, "0", 0, 1e6, "override obs dim (0 = from config)"),
    O_("act", SAC_CFG_INT, act, "0", 0, 1e6, "override action dim"),
    O_("hidden", SAC_CFG_INT, hidden, "0", 0, 1e6, "override hidden width"),
    O_("depth", SAC_CFG_INT, depth, "0", 0, 15, "override hidden layers"),
    O_("batch", SAC_CFG_INT, batch, "0", 0, 1e6, "override batch size"),
    S_("precision", precision, "fp32",
       "GEMM precision where the backend has a choice: fp32, tf32, bf16, fp16"),
    O_("graphs", SAC_CFG_BOOL, graphs, "true", 1, 0, "replay captured updates where the backend can (cuda)"),
    O_("recompute", SAC_CFG_BOOL, recompute, "false", 1, 0, "recompute activations in the backward"),
    O_("profile", SAC_CFG_BOOL, profile, "true", 1, 0,
       "time the phases of an update (synchronises between them, and runs eagerly)"),
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

/* ---- the machine's sgemm ceiling, measured beside every run (issue 17) -------------------
 * Two yardsticks on the benchmark's threads, each the best of a few repetitions:
 *  - big: one 2048^3 sgemm on T OpenBLAS threads (the textbook peak);
 *  - shapes: the update's dominant shape (batch x hidden x hidden), T independent
 *    single-threaded sgemms at once, one per thread: what this many cores do at the sizes
 *    an update multiplies when nothing else is in the way.
 * The ceiling is the larger of the two; the fraction reached is achieved / ceiling, per run,
 * so machine load (shared machines) hits numerator and denominator alike. */
#include <pthread.h>

typedef struct {
  int m, n, k, reps;
  float *a, *b, *c;
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

static float *sg_buf(size_t n) {
  float *p = malloc(n * sizeof(float));
  for (size_t i = 0; p && i < n; i++)
    p[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
  return p;
}

/* GFLOP/s of T threads each running `reps` single-threaded (m, n, k) sgemms at once. */
static double sg_parallel(int T, int m, int n, int k, int reps) {
  sg_job_t j[64];
  pthread_t tid[64];
  pthread_barrier_t start;
  T = T < 1 ? 1 : (T > 64 ? 64 : T);
  pthread_barrier_init(&start, NULL, (unsigned)T);
  for (int t = 0; t < T; t++)
    j[t] = (sg_job_t){m,     n, k, reps, sg_buf((size_t)m * k), sg_buf((size_t)k * n), sg_buf((size_t)m * n),
                      &start};
  double t0 = sac_clock_s();
  for (int t = 1; t < T; t++)
    pthread_create(&tid[t], NULL, sg_thread, &j[t]);
  sg_thread(&j[0]);
  for (int t = 1; t < T; t++)
    pthread_join(tid[t], NULL);
  double dt = sac_clock_s() - t0;
  for (int t = 0; t < T; t++)
    free(j[t].a), free(j[t].b), free(j[t].c);
  pthread_barrier_destroy(&start);
  return 2.0 * m * n * k * reps * T / dt * 1e-9;
}

typedef struct {
  double big, shapes;
} ceiling_t;

static ceiling_t measure_ceiling(int T, int B, int H) {
  ceiling_t c = {0, 0};
  enum { N = 2048 };
  float *a = sg_buf((size_t)N * N), *b = sg_buf((size_t)N * N), *cc = sg_buf((size_t)N * N);
  openblas_set_num_threads(T); /* the backend runs OpenBLAS single-threaded; the yardstick does not */
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1.0f, a, N, b, N, 0.0f, cc, N);
  for (int r = 0; r < 2; r++) {
    double t0 = sac_clock_s();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1.0f, a, N, b, N, 0.0f, cc, N);
    double g = 2.0 * N * N * N / (sac_clock_s() - t0) * 1e-9;
    c.big = g > c.big ? g : c.big;
  }
  openblas_set_num_threads(1);
  free(a), free(b), free(cc);
  int reps = (int)(2e9 / (2.0 * B * H * H)) + 1; /* about 2 GFLOP per thread */
  for (int r = 0; r < 2; r++) {
    double g = sg_parallel(T, B, H, H, reps);
    c.shapes = g > c.shapes ? g : c.shapes;
  }
  return c;
}

typedef struct {
  double ups, sample_s, target_s, critic_s, actor_s, opt_s, total_s;
  ceiling_t ceil;
} run_t;

/* One timed run: warmup, then `updates` updates each on a freshly sampled batch from a
 * 100k-row random buffer (as the peer does). */
static int run_ours(const bench_cfg_t *c, sac_backend_t *be, const sac_hparams_t *hp, run_t *out,
                    double *flops) {
  sac_t *s;
  int rc = sac_new(hp, be, &s);
  if (rc)
    return rc;
  const int O = hp->obs_dim, A = hp->act_dim, B = hp->batch, N = 100000;
  float *buf = malloc(sizeof(float) * (size_t)N * (2 * O + A + 2));
  float *stage = malloc(sizeof(float) * (size_t)B * (2 * O + A + 2));
  if (!buf || !stage) {
    free(buf), free(stage), sac_destroy(&s);
    return SAC_ENOMEM;
  }
  sac_rng_t rng;
  sac_rng_init(&rng, 1, 123);
  const int row = 2 * O + A + 2;
  for (size_t i = 0; i < (size_t)N * row; i++)
    buf[i] = sac_rng_normal(&rng);
  for (int i = 0; i < N; i++)
    buf[(size_t)i * row + 2 * O + A + 1] = 0.0f; /* terminated */
  sac_batch_t *b = sac_batch(s);
  sac_profile_t prof = {0};
  /* staged (pinned, double-buffered, overlapping) where the backend offers it */
  const int staged = be->ops->stage != NULL;
  double t_sample = 0, t0 = 0;
  for (int it = 0; it < c->warmup + c->updates; it++) {
    if (it == c->warmup) {
      be->ops->sync(be);
      if (c->profile)
        sac_set_profile(s, &prof);
      t0 = sac_clock_s();
    }
    double ts = sac_clock_s();
    float *so = stage, *sa = so + (size_t)B * O, *sn = sa + (size_t)B * A, *sr = sn + (size_t)B * O,
          *st = sr + B;
    for (int k = 0; k < B; k++) {
      const float *r = buf + (size_t)sac_rng_below(&rng, N) * row;
      memcpy(so + (size_t)k * O, r, sizeof(float) * O);
      memcpy(sn + (size_t)k * O, r + O, sizeof(float) * O);
      memcpy(sa + (size_t)k * A, r + 2 * O, sizeof(float) * A);
      sr[k] = r[2 * O + A];
      st[k] = r[2 * O + A + 1];
    }
    int (*put)(sac_backend_t *, float *, const float *, size_t) = staged ? be->ops->stage : be->ops->upload;
    put(be, b->obs, so, (size_t)B * O);
    put(be, b->action, sa, (size_t)B * A);
    put(be, b->next_obs, sn, (size_t)B * O);
    put(be, b->reward, sr, B);
    put(be, b->terminated, st, B);
    if (staged)
      be->ops->stage_commit(be);
    if (it >= c->warmup)
      t_sample += sac_clock_s() - ts;
    sac_update(s);
  }
  be->ops->sync(be);
  double total = sac_clock_s() - t0;
  *flops = update_flops(s);
  out->total_s = total;
  out->ups = c->updates / total;
  out->sample_s = t_sample / c->updates;
  out->target_s = prof.target / c->updates;
  out->critic_s = prof.critic / c->updates;
  out->actor_s = prof.actor / c->updates;
  out->opt_s = prof.optimizer / c->updates;
  free(buf), free(stage);
  sac_destroy(&s);
  return 0;
}

/* The peer in a child process; returns its updates/s or NAN. */
static double run_peer(const bench_cfg_t *c, const sac_hparams_t *hp) {
  char cmd[1400];
  snprintf(cmd, sizeof cmd, "env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE %s %s %d %d %d %d %d %d %d 2>&1",
           c->peer_python, c->peer_script, hp->obs_dim, hp->act_dim, hp->hidden, hp->depth, hp->batch,
           c->updates, c->threads > 0 ? c->threads : 2);
  FILE *p = popen(cmd, "r");
  if (!p)
    return NAN;
  char line[512];
  double ups = NAN;
  while (fgets(line, sizeof line, p)) {
    double v;
    if (sscanf(line, "%lf updates/s", &v) == 1)
      ups = v;
  }
  int st = pclose(p);
  if (st != 0) {
    SAC_WARN("bench", "peer exited with status %d (%s)", st, cmd);
    return NAN;
  }
  return ups;
}

/* Kernels per update (issue 16): the backend ops of one update counted through a proxy
 * (learner/op_count.h), fused and unfused, and on cuda the backend's own launch count
 * (kernels + cuBLASLt matmuls) over the same eager updates. */
static void print_op_counts(const bench_cfg_t *c, sac_backend_t *be, const sac_hparams_t *hp) {
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
    return;
  }
  printf("| backend ops per update (actor step / critic only), fused | %lld / %lld |\n", (long long)fused[0],
         (long long)fused[1]);
  printf("| backend ops per update (actor step / critic only), unfused | %lld / %lld |\n",
         (long long)unfused[0], (long long)unfused[1]);
  /* with policy_delay 1 each count is exactly one update */
  if (has_k && hp->policy_delay == 1)
    printf("| cuda launches per update (kernels + matmuls, eager), fused / unfused | %.0f / %.0f |\n",
           k1 - k0, k2 - k1);
  printf("ops-result preset=%s backend=%s precision=%s ops_fused=%lld ops_fused_critic_only=%lld "
         "ops_unfused=%lld ops_unfused_critic_only=%lld\n",
         c->config, c->backend, c->precision, (long long)fused[0], (long long)fused[1], (long long)unfused[0],
         (long long)unfused[1]);
  sac_destroy(&s);
}

int main(int argc, char **argv) {
  bench_cfg_t c;
  int action;
  if (sac_config_load(k_opts, sizeof k_opts / sizeof k_opts[0], &c, argc, argv,
                      "sac-bench-learner: SAC updates/s on a backend against the PyTorch peer", &action) != 0)
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
  double err = sgemm_check();
  printf("OpenBLAS kernel %s: sgemm 256^3 max relative error %.2e against double (%s)\n",
         openblas_get_corename(), err, err < 1e-5 ? "ok" : "WRONG");
  if (!(err < 1e-5)) {
    fprintf(stderr, "sgemm computes wrong results with this kernel; not benchmarking\n");
    return 1;
  }
  run_t *runs = calloc((size_t)c.runs, sizeof *runs);
  double *ups = calloc((size_t)c.runs, sizeof(double)), *peer = calloc((size_t)c.runs, sizeof(double));
  double flops = 0;
  int npeer = 0;
  printf("preset %s: obs %d act %d hidden %dx%d batch %d, backend %s (%s%s%s), threads %d, %d runs of %d "
         "updates\n",
         c.config, hp.obs_dim, hp.act_dim, hp.hidden, hp.depth, hp.batch, c.backend, c.precision,
         c.graphs && be->ops->graph_launch && !c.profile ? ", graphs" : "", c.recompute ? ", recompute" : "",
         c.threads, c.runs, c.updates);
  const int cpu = strcmp(c.backend, "cpu") == 0;
  const int T = c.threads > 0 ? c.threads : openblas_get_num_procs();
  double *frac = calloc((size_t)c.runs, sizeof(double)), *big = calloc((size_t)c.runs, sizeof(double)),
         *shp = calloc((size_t)c.runs, sizeof(double));
  for (int r = 0; r < c.runs; r++) {
    if (cpu)
      runs[r].ceil = measure_ceiling(T, hp.batch, hp.hidden);
    if ((rc = run_ours(&c, be, &hp, &runs[r], &flops)) != 0) {
      fprintf(stderr, "run failed: %s\n", sac_strerror(rc));
      return 1;
    }
    ups[r] = runs[r].ups;
    printf("  run %d: sacfleet %.1f updates/s", r + 1, runs[r].ups);
    if (cpu) {
      double ceil = runs[r].ceil.big > runs[r].ceil.shapes ? runs[r].ceil.big : runs[r].ceil.shapes;
      big[r] = runs[r].ceil.big, shp[r] = runs[r].ceil.shapes;
      frac[r] = flops * runs[r].ups * 1e-9 / ceil;
      printf("   ceiling: sgemm 2048^3 %.1f, %dx%dx%d x%d threads %.1f GFLOP/s; reached %.2f", big[r],
             hp.batch, hp.hidden, hp.hidden, T, shp[r], frac[r]);
    }
    if (c.peer) {
      double p = run_peer(&c, &hp);
      if (!isnan(p))
        peer[npeer++] = p;
      printf("   peer %.1f updates/s", p);
    }
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
  if (npeer > 0) {
    double m_peer = median(peer, npeer);
    printf("| PyTorch peer updates/s (median of %d) | %.1f |\n", npeer, m_peer);
    printf("| ratio sacfleet / peer | %.2fx |\n", m_ups / m_peer);
  }
  if (cpu) {
    double mb = median(big, c.runs), ms2 = median(shp, c.runs), mf = median(frac, c.runs);
    double ceil = mb > ms2 ? mb : ms2;
    printf("| sgemm 2048^3 on %d threads, GFLOP/s (median) | %.1f |\n", T, mb);
    printf("| sgemm %dx%dx%d, %d at once single-threaded, GFLOP/s (median) | %.1f |\n", hp.batch, hp.hidden,
           hp.hidden, T, ms2);
    printf("| ceiling: updates/s at the larger of the two | %.1f |\n", ceil / (flops * 1e-9));
    printf("| fraction of the ceiling reached (median of per-run ratios) | %.2f |\n", mf);
    printf("ceiling-result preset=%s threads=%d sgemm2048_gflops=%.1f sgemm_shapes_gflops=%.1f "
           "achieved_gflops=%.1f fraction=%.3f\n",
           c.config, T, mb, ms2, gflops, mf);
  }
  printf("| time for 1M updates | %.2f h |\n", hours);
  printf("| cost of 1M updates at $%.2f/h | $%.3f |\n", c.price, hours * c.price);
  print_op_counts(&c, be, &hp);
  /* what the backend reports (device memory, graph replays, loss scale), and one line
   * for scripts to collect */
  double peak = NAN, launches = NAN, scale = NAN, skipped = NAN;
  if (be->ops->get_metric) {
    static const char *const keys[] = {"device_peak_bytes", "device_used_bytes", "graph_launches",
                                       "loss_scale",        "skipped_steps",     "degraded_gemms",
                                       "epilogue_fallbacks"};
    double *dst[] = {&peak, NULL, &launches, &scale, &skipped, NULL, NULL};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
      double v;
      if (be->ops->get_metric(be, keys[i], &v) == 0) {
        printf("| backend %s | %.6g |\n", keys[i], v);
        if (dst[i])
          *dst[i] = v;
      }
    }
  }
  printf("bench-result preset=%s backend=%s precision=%s graphs=%d recompute=%d batch=%d hidden=%d depth=%d "
         "updates_per_s=%.1f ms_per_update=%.4f peak_device_mib=%.1f graph_launches=%.0f loss_scale=%g "
         "skipped=%.0f\n",
         c.config, c.backend, c.precision, c.graphs && be->ops->graph_launch && !c.profile, c.recompute,
         hp.batch, hp.hidden, hp.depth, m_ups, ms, peak / 1048576.0, launches, scale, skipped);
  if (!c.profile) {
    free(runs), free(ups), free(peer), free(frac), free(big), free(shp);
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
  free(runs), free(ups), free(peer), free(frac), free(big), free(shp);
  sac_backend_destroy(&be);
  return 0;
}
