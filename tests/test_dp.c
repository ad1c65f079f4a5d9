/* Data-parallel learners (learner/dp.h) and the zmq collective (learner/collective.h),
 * with 2 or 3 ranks as threads of this process on tcp://127.0.0.1 (a free port each):
 * the bootstrap and its refusals (a configuration mismatch names the field and both
 * values on both sides; a duplicate rank and a rank >= size are refused); the all-reduce
 * is the mean summed in rank order and bit-identical on every rank; broadcast from any
 * root; two SAC learners (cpu backend, small networks) on different batches stay
 * bit-identical in their whole state over 50 updates and differ from a single learner;
 * rank 0's state makes a fresh rank equal; a peer that stops answering makes the others'
 * call fail within the timeout, and an abort makes them fail at once.
 *
 * Assertions run on the main thread: the rank threads only record what they saw. Exact
 * comparisons (memcmp) are the point: the ranks must agree bit for bit. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/rng.h"
#include "learner/collective.h"
#include "learner/dp.h"
#include "learner/sac.h"

#define MAXR 4
#define CONNECT_MS 10000

/* A TCP port on 127.0.0.1 that was free a moment ago. */
static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  cr_assert(fd >= 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
  socklen_t len = sizeof a;
  cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
  close(fd);
  return ntohs(a.sin_port);
}

static void endpoint(char *out, size_t cap) { snprintf(out, cap, "tcp://127.0.0.1:%d", free_port()); }

static void run_threads(int n, void *(*fn)(void *), void *args, size_t arg_size) {
  pthread_t th[MAXR];
  for (int i = 0; i < n; i++)
    cr_assert_eq(pthread_create(&th[i], NULL, fn, (char *)args + (size_t)i * arg_size), 0);
  for (int i = 0; i < n; i++)
    pthread_join(th[i], NULL);
}

/* ---------------------------------------------------------------- the zmq collective */

typedef struct {
  char ep[64];
  int rank, size, timeout_ms;
  int rc_new, rc_op, rc_op2;
  double op2_s;
  float buf[1000], seg2[7];
  char why[512];
  int mode; /* test-specific */
} zarg_t;

static sac_coll_t *znew(zarg_t *a) {
  sac_coll_zmq_cfg_t cfg = {.endpoint = a->ep,
                            .rank = a->rank,
                            .size = a->size,
                            .timeout_ms = a->timeout_ms ? a->timeout_ms : 5000,
                            .connect_timeout_ms = CONNECT_MS};
  sac_coll_t *c = NULL;
  a->rc_new = sac_coll_zmq_new(&cfg, &c, a->why, sizeof a->why);
  return c;
}

/* Fills rank r's inputs: values of different magnitudes, so the order of the sum shows. */
static void fill(zarg_t *a) {
  sac_rng_t rng;
  sac_rng_init(&rng, 77, (uint64_t)a->rank);
  for (int i = 0; i < 1000; i++)
    a->buf[i] = (float)(sac_rng_uniform_range(&rng, -1, 1) * pow(10.0, (i % 9) - 4));
  for (int i = 0; i < 7; i++)
    a->seg2[i] = (float)(a->rank * 10 + i);
}

static void *allreduce_thread(void *p) {
  zarg_t *a = p;
  fill(a);
  sac_coll_t *c = znew(a);
  if (!c)
    return NULL;
  float *segs[2] = {a->buf, a->seg2};
  size_t ns[2] = {1000, 7};
  a->rc_op = sac_coll_allreduce_mean_v(c, segs, ns, 2);
  /* a broadcast from the last rank (relayed by rank 0 when it is not 0), then a barrier */
  float b[3] = {(float)a->rank, (float)a->rank, (float)a->rank};
  a->rc_op2 = sac_coll_broadcast(c, b, sizeof b, a->size - 1);
  if (a->rc_op2 == 0 && (b[0] != (float)(a->size - 1) || b[2] != (float)(a->size - 1)))
    a->rc_op2 = -1000;
  if (a->rc_op2 == 0)
    a->rc_op2 = sac_coll_barrier(c);
  sac_coll_destroy(&c);
  return NULL;
}

static void check_allreduce(int L) {
  zarg_t a[MAXR], in[MAXR];
  memset(a, 0, sizeof a);
  char ep[64];
  endpoint(ep, sizeof ep);
  for (int r = 0; r < L; r++) {
    snprintf(a[r].ep, sizeof a[r].ep, "%s", ep);
    a[r].rank = r, a[r].size = L;
    in[r] = a[r];
    fill(&in[r]);
  }
  run_threads(L, allreduce_thread, a, sizeof a[0]);
  for (int r = 0; r < L; r++) {
    cr_assert_eq(a[r].rc_new, 0, "rank %d: bootstrap %s", r, sac_strerror(a[r].rc_new));
    cr_assert_eq(a[r].rc_op, 0, "rank %d: all-reduce %s", r, sac_strerror(a[r].rc_op));
    cr_assert_eq(a[r].rc_op2, 0, "rank %d: broadcast/barrier %d", r, a[r].rc_op2);
  }
  /* the mean, summed in rank order: the exact float operations rank 0 does */
  for (int i = 0; i < 1000; i++) {
    float s = in[0].buf[i];
    for (int r = 1; r < L; r++)
      s += in[r].buf[i];
    s /= (float)L;
    cr_assert(memcmp(&s, &a[0].buf[i], sizeof s) == 0, "element %d: %.9g, want %.9g", i, (double)a[0].buf[i],
              (double)s);
  }
  for (int i = 0; i < 7; i++) {
    float s = 0;
    for (int r = 0; r < L; r++)
      s += (float)(r * 10 + i);
    cr_assert_float_eq(a[0].seg2[i], s / (float)L, 1e-6f);
  }
  for (int r = 1; r < L; r++) {
    cr_assert(memcmp(a[r].buf, a[0].buf, sizeof a[0].buf) == 0, "rank %d differs from rank 0", r);
    cr_assert(memcmp(a[r].seg2, a[0].seg2, sizeof a[0].seg2) == 0, "rank %d differs from rank 0", r);
  }
}

Test(dp, allreduce_is_the_rank_ordered_mean_and_bit_identical_2_ranks) { check_allreduce(2); }
Test(dp, allreduce_is_the_rank_ordered_mean_and_bit_identical_3_ranks) { check_allreduce(3); }

/* mode 0: rank size-1 stops answering after one all-reduce (a dead peer);
 * mode 1: rank 0 stops answering (rank 1 must notice);
 * mode 2: rank 1 aborts instead of answering (rank 0 must fail at once);
 * mode 3: rank 1 sends its share of the second all-reduce and is gone before rank 0 reads it
 *         (rank 0 must fail at once, naming rank 1, when it sends the result). */
static void *dead_thread(void *p) {
  zarg_t *a = p;
  sac_coll_t *c = znew(a);
  if (!c)
    return NULL;
  a->rc_op = sac_coll_allreduce_mean(c, a->buf, 10);
  int quits = (a->mode == 0 && a->rank == a->size - 1) || (a->mode == 1 && a->rank == 0);
  if (a->mode == 2 && a->rank == 1) {
    sac_coll_abort(c, "rank 1 gave up");
  } else if (!quits) {
    if (a->mode == 3 && a->rank == 0) /* rank 1 sends its share, gives up and leaves meanwhile */
      sac_sleep_ns((uint64_t)(a->timeout_ms + 1500) * 1000000ull);
    double t0 = sac_clock_s();
    a->rc_op2 = sac_coll_allreduce_mean(c, a->buf, 10);
    a->op2_s = sac_clock_s() - t0;
    /* after a failure the collective refuses to go on */
    if (a->rc_op2 != 0 && sac_coll_allreduce_mean(c, a->buf, 10) != SAC_ESTATE)
      a->rc_op2 = -1000;
  } else {
    sac_sleep_ns((uint64_t)(a->timeout_ms + 1500) * 1000000ull); /* alive, silent */
  }
  sac_coll_destroy(&c);
  return NULL;
}

static void run_dead(int mode, int L, zarg_t *a) {
  memset(a, 0, sizeof(zarg_t) * MAXR);
  char ep[64];
  endpoint(ep, sizeof ep);
  for (int r = 0; r < L; r++) {
    snprintf(a[r].ep, sizeof a[r].ep, "%s", ep);
    a[r].rank = r, a[r].size = L, a[r].timeout_ms = 1000, a[r].mode = mode;
  }
  run_threads(L, dead_thread, a, sizeof a[0]);
  for (int r = 0; r < L; r++) {
    cr_assert_eq(a[r].rc_new, 0);
    cr_assert_eq(a[r].rc_op, 0);
  }
}

Test(dp, a_dead_peer_fails_the_others_within_the_timeout) {
  zarg_t a[MAXR];
  run_dead(0, 3, a); /* rank 2 goes silent: rank 0 and rank 1 (waiting on rank 0) fail */
  for (int r = 0; r < 2; r++) {
    cr_assert_eq(a[r].rc_op2, SAC_ETIMEOUT, "rank %d: %s", r, sac_strerror(a[r].rc_op2));
    cr_assert(a[r].op2_s >= 0.95 && a[r].op2_s < 4.0, "rank %d failed after %.3f s, timeout 1 s", r,
              a[r].op2_s);
  }
  run_dead(1, 2, a); /* rank 0 goes silent */
  cr_assert_eq(a[1].rc_op2, SAC_ETIMEOUT);
  cr_assert(a[1].op2_s >= 0.95 && a[1].op2_s < 4.0, "rank 1 failed after %.3f s, timeout 1 s", a[1].op2_s);
}

Test(dp, a_rank_gone_after_its_share_fails_rank_0_when_it_answers) {
  zarg_t a[MAXR];
  run_dead(3, 2, a);
  cr_assert_eq(a[1].rc_op2, SAC_ETIMEOUT, "rank 1: %s", sac_strerror(a[1].rc_op2));
  fprintf(stderr, "rank 0 after rank 1 left: %s in %.3f s\n", sac_strerror(a[0].rc_op2), a[0].op2_s);
  cr_assert_eq(a[0].rc_op2, SAC_ENET, "rank 0: %s", sac_strerror(a[0].rc_op2));
  cr_assert(a[0].op2_s < 0.9, "rank 0 took %.3f s to find rank 1 gone (timeout 1 s)", a[0].op2_s);
}

Test(dp, an_abort_fails_the_peer_at_once) {
  zarg_t a[MAXR];
  run_dead(2, 2, a);
  cr_assert_eq(a[0].rc_op2, SAC_ENET, "rank 0: %s", sac_strerror(a[0].rc_op2));
  cr_assert(a[0].op2_s < 0.9, "rank 0 took %.3f s to learn of the abort (timeout 1 s)", a[0].op2_s);
}

/* A run of `size` ranks and an intruder claiming a rank: refused during the handshake
 * (a rank taken, a rank >= size) or once the run is under way; the run goes on. The
 * ranks keep doing barriers for a second, so rank 0 reads what arrives meanwhile. */
static void *claim_thread(void *p) {
  zarg_t *a = p;
  sac_sleep_ns((uint64_t)a->mode * 1000000ull); /* mode: the delay before joining, ms */
  sac_coll_t *c = znew(a);
  for (int i = 0; c && i < 40 && a->rc_op == 0 && !a->timeout_ms; i++) {
    a->rc_op = sac_coll_barrier(c);
    sac_sleep_ns(25000000ull);
  }
  sac_coll_destroy(&c);
  return NULL;
}

static void check_intruder(int size, int intruder_rank, int intruder_ms, int last_ms, const char *expect) {
  zarg_t a[MAXR];
  memset(a, 0, sizeof a);
  char ep[64];
  endpoint(ep, sizeof ep);
  for (int i = 0; i <= size; i++) {
    snprintf(a[i].ep, sizeof a[i].ep, "%s", ep);
    a[i].rank = i, a[i].size = size;
  }
  a[size - 1].mode = last_ms;
  a[size].rank = intruder_rank, a[size].mode = intruder_ms;
  a[size].timeout_ms = 1; /* marks the intruder: it does no barriers */
  if (intruder_rank >= size)
    a[size].size = 8; /* it believes in a larger run */
  run_threads(size + 1, claim_thread, a, sizeof a[0]);
  for (int i = 0; i < size; i++) {
    cr_assert_eq(a[i].rc_new, 0, "rank %d: %s", i, sac_strerror(a[i].rc_new));
    cr_assert_eq(a[i].rc_op, 0, "rank %d: %s", i, sac_strerror(a[i].rc_op));
  }
  cr_assert_eq(a[size].rc_new, SAC_ECONFIG, "intruder: %s", sac_strerror(a[size].rc_new));
  cr_assert(strstr(a[size].why, expect), "the refusal says \"%s\", expected \"%s\"", a[size].why, expect);
}

Test(dp, a_duplicate_rank_is_refused) { check_intruder(3, 1, 300, 700, "already taken"); }
Test(dp, a_rank_not_below_size_is_refused) { check_intruder(2, 5, 0, 400, "not in [1, 2)"); }
Test(dp, a_rank_arriving_mid_run_is_refused) { check_intruder(2, 1, 400, 0, "under way"); }

/* ---------------------------------------------------------------- dp: bootstrap, SAC */

typedef struct {
  char ep[64];
  int rank, size;
  const char *config;
  int rc_new, rc;
  char why[1024];
  int mode;
  /* SAC */
  int updates;
  size_t n;
  float *params, *target, *m, *v, steps[3];
  uint32_t key[2];
  uint64_t step;
  int64_t extra[2];
  int decisions[3], same[2];
  double scale; /* mode 2: the emulated loss scale at the end */
  uint64_t skipped;
  int host_path; /* 1: the backend claims a device stream (gradients through the host); 2: also no fetch */
  int64_t update_waits; /* blocking syncs during the updates */
} darg_t;

static const char *k_conf = "env = Pendulum-v1\nbatch_size = 256\nlr_actor = 0.000300000014\n";

static void *bootstrap_thread(void *p) {
  darg_t *a = p;
  sac_dp_cfg_t cfg;
  sac_dp_cfg_default(&cfg);
  cfg.rank = a->rank, cfg.size = a->size, cfg.connect_timeout_ms = CONNECT_MS, cfg.timeout_ms = 5000;
  snprintf(cfg.coord, sizeof cfg.coord, "%s", a->ep);
  snprintf(cfg.collective, sizeof cfg.collective, "zmq");
  sac_backend_t *be = NULL;
  sac_backend_cpu_new(1, &be);
  sac_dp_t *dp = NULL;
  a->rc_new = sac_dp_new(&cfg, a->config, be, &dp, a->why, sizeof a->why);
  if (dp) {
    /* the agreement rounds: (update), (skip: rank 1 has no batch), (stop: rank 0 wants to) */
    int have[3] = {1, a->rank == 0, 1}, stop[3] = {0, 0, a->rank == 0};
    for (int i = 0; i < 3 && a->rc == 0; i++)
      a->rc = sac_dp_round(dp, have[i], stop[i], &a->decisions[i]);
  }
  sac_dp_destroy(&dp);
  sac_backend_destroy(&be);
  return NULL;
}

static void run_bootstrap(darg_t *a, const char *conf1) {
  memset(a, 0, sizeof(darg_t) * 2);
  char ep[64];
  endpoint(ep, sizeof ep);
  for (int r = 0; r < 2; r++) {
    snprintf(a[r].ep, sizeof a[r].ep, "%s", ep);
    a[r].rank = r, a[r].size = 2, a[r].config = r ? conf1 : k_conf;
  }
  run_threads(2, bootstrap_thread, a, sizeof a[0]);
}

Test(dp, bootstrap_agrees_and_rounds_decide_together) {
  darg_t a[2];
  run_bootstrap(a, k_conf);
  for (int r = 0; r < 2; r++) {
    cr_assert_eq(a[r].rc_new, 0, "rank %d: %s (%s)", r, sac_strerror(a[r].rc_new), a[r].why);
    cr_assert_eq(a[r].rc, 0);
    cr_assert_eq(a[r].decisions[0], SAC_DP_UPDATE);
    cr_assert_eq(a[r].decisions[1], SAC_DP_SKIP);
    cr_assert_eq(a[r].decisions[2], SAC_DP_STOP);
  }
}

Test(dp, a_configuration_mismatch_is_refused_on_both_sides_naming_the_field) {
  darg_t a[2];
  run_bootstrap(a, "env = Pendulum-v1\nbatch_size = 128\nlr_actor = 0.000300000014\n");
  for (int r = 0; r < 2; r++) {
    cr_assert_eq(a[r].rc_new, SAC_ECONFIG, "rank %d: %s", r, sac_strerror(a[r].rc_new));
    cr_assert(strstr(a[r].why, "batch_size is 128 on rank 1 but 256 on rank 0"), "rank %d says: %s", r,
              a[r].why);
  }
  /* a field only one side has is named too */
  char why[256];
  cr_assert_eq(sac_dp_compare("a = 1\nb = 2\n", "a = 1\n", 1, why, sizeof why), SAC_ECONFIG);
  cr_assert(strstr(why, "b is 2 on rank 0 but not set on rank 1"), "%s", why);
  cr_assert_eq(sac_dp_compare("a = 1\n", "a = 1\nc = 3\n", 1, why, sizeof why), SAC_ECONFIG);
  cr_assert(strstr(why, "c is 3 on rank 1 but not set on rank 0"), "%s", why);
  cr_assert_eq(sac_dp_compare("a = 1\nb = 2\n", "b = 2\na = 1\n", 1, why, sizeof why), 0);
}

/* A small SAC on the cpu backend (obs 3, act 2, 2 x 16, batch 8). */
static sac_t *small_sac(sac_backend_t **be, uint64_t seed) {
  cr_assert_eq(sac_backend_cpu_new(1, be), 0);
  sac_hparams_t hp;
  sac_hparams_default(&hp, 3, 2);
  hp.hidden = 16;
  hp.batch = 8;
  hp.lr_actor = hp.lr_critic = hp.lr_alpha = 1e-3f;
  hp.seed = seed;
  sac_t *s = NULL;
  cr_assert_eq(sac_new(&hp, *be, &s), 0);
  return s;
}

/* A batch that depends on (stream, update): each rank samples its own. */
static void batch_for(sac_t *s, uint64_t stream, int u) {
  sac_rng_t rng;
  sac_rng_init(&rng, 1000 + (uint64_t)u, stream);
  sac_batch_t *b = sac_batch(s);
  for (int i = 0; i < 8 * 3; i++) {
    b->obs[i] = (float)sac_rng_uniform_range(&rng, -1, 1);
    b->next_obs[i] = (float)sac_rng_uniform_range(&rng, -1, 1);
  }
  for (int i = 0; i < 8 * 2; i++)
    b->action[i] = (float)sac_rng_uniform_range(&rng, -1, 1);
  for (int i = 0; i < 8; i++) {
    b->reward[i] = (float)sac_rng_uniform_range(&rng, -2, 1);
    b->terminated[i] = i % 5 == 0 ? 1.0f : 0.0f;
  }
}

static void take_state(darg_t *a, sac_t *s) {
  a->n = sac_param_count(s);
  size_t nc = sac_buffer_len(s, SAC_BUF_TARGET);
  a->params = malloc(a->n * sizeof(float));
  a->m = malloc(a->n * sizeof(float));
  a->v = malloc(a->n * sizeof(float));
  a->target = malloc(nc * sizeof(float));
  sac_get_buffer(s, SAC_BUF_PARAMS, a->params, a->n);
  sac_get_buffer(s, SAC_BUF_ADAM_M, a->m, a->n);
  sac_get_buffer(s, SAC_BUF_ADAM_V, a->v, a->n);
  sac_get_buffer(s, SAC_BUF_TARGET, a->target, nc);
  sac_get_buffer(s, SAC_BUF_STEPS, a->steps, 3);
  sac_get_noise_key(s, a->key);
  a->step = sac_step(s);
}

static void free_state(darg_t *a) { free(a->params), free(a->m), free(a->v), free(a->target); }

/* mode 0: 50 lock-step updates on rank-specific batches, then the identity checks;
 * mode 1: rank 0 alone first does 10 updates (and rank 1 starts from another seed),
 *         then the state broadcast, then nothing else. */
/* A device stream to show: with one, the zmq collective takes the path a GPU rank takes
 * (its gradients copied to host memory through the backend's fetch slots and back). */
static void *fake_stream(sac_backend_t *be) { return be; }

static void *sac_thread(void *p) {
  darg_t *a = p;
  sac_backend_t *real = NULL, wrap, *be;
  sac_backend_ops_t ops;
  sac_t *s = small_sac(&real, a->mode == 1 && a->rank == 1 ? 99 : 7);
  be = real;
  if (a->host_path) {
    ops = *real->ops;
    ops.native_stream = fake_stream;
    if (a->host_path == 2) /* the control: no fetch slots, so downloads */
      ops.fetch = NULL, ops.fetch_wait = NULL;
    wrap = (sac_backend_t){&ops, real->impl};
    be = &wrap;
    cr_assert_eq(sac_swap_backend(s, be), 0);
  }
  if (a->mode == 1 && a->rank == 0)
    for (int u = 0; u < 10; u++) {
      batch_for(s, 50, u);
      sac_update(s);
    }
  sac_dp_cfg_t cfg;
  sac_dp_cfg_default(&cfg);
  cfg.rank = a->rank, cfg.size = a->size, cfg.connect_timeout_ms = CONNECT_MS, cfg.timeout_ms = 5000;
  snprintf(cfg.coord, sizeof cfg.coord, "%s", a->ep);
  snprintf(cfg.collective, sizeof cfg.collective, "zmq");
  sac_dp_t *dp = NULL;
  a->rc_new = sac_dp_new(&cfg, k_conf, be, &dp, a->why, sizeof a->why);
  if (dp) {
    a->extra[0] = a->rank == 0 ? 1234 : -1, a->extra[1] = a->rank == 0 ? 5678 : -1;
    a->rc = sac_dp_sync_state(dp, s, a->extra, sizeof a->extra);
    if (a->rc == 0)
      a->rc = sac_dp_attach(dp, s);
    sac_backend_counts_t c0, c1;
    cr_assert_eq(sac_backend_counts(be, &c0), 0);
    for (int u = 0; a->mode == 0 && u < a->updates && a->rc == 0; u++) {
      batch_for(s, (uint64_t)a->rank, u);
      a->rc = sac_update(s);
    }
    cr_assert_eq(sac_backend_counts(be, &c1), 0);
    a->update_waits = c1.blocking_syncs - c0.blocking_syncs;
    if (a->rc == 0)
      a->rc = sac_dp_check_identical(dp, s, &a->same[0]);
    if (a->rc == 0 && a->rank == 1) { /* one rank's state changes: the check must see it */
      float one = 0;
      sac_get_buffer(s, SAC_BUF_PARAMS, &one, 1);
      one = nextafterf(one, INFINITY);
      sac_set_buffer(s, SAC_BUF_PARAMS, &one, 1);
    }
    if (a->rc == 0)
      a->rc = sac_dp_check_identical(dp, s, &a->same[1]);
    if (a->rank == 1) { /* the state check above changed rank 1: undo it for the comparison */
      float one = 0;
      sac_get_buffer(s, SAC_BUF_PARAMS, &one, 1);
      one = nextafterf(one, -INFINITY);
      sac_set_buffer(s, SAC_BUF_PARAMS, &one, 1);
    }
  }
  take_state(a, s);
  sac_dp_destroy(&dp);
  sac_destroy(&s);
  sac_backend_destroy(&real);
  return NULL;
}

static void run_sac_path(darg_t *a, int mode, int updates, int host_path) {
  memset(a, 0, sizeof(darg_t) * 2);
  a[0].host_path = a[1].host_path = host_path;
  char ep[64];
  endpoint(ep, sizeof ep);
  for (int r = 0; r < 2; r++) {
    snprintf(a[r].ep, sizeof a[r].ep, "%s", ep);
    a[r].rank = r, a[r].size = 2, a[r].mode = mode, a[r].updates = updates;
  }
  for (int r = 0; r < 2; r++)
    a[r].host_path = host_path;
  run_threads(2, sac_thread, a, sizeof a[0]);
  for (int r = 0; r < 2; r++) {
    cr_assert_eq(a[r].rc_new, 0, "rank %d: %s (%s)", r, sac_strerror(a[r].rc_new), a[r].why);
    cr_assert_eq(a[r].rc, 0, "rank %d: %s", r, sac_strerror(a[r].rc));
    cr_assert_eq(a[r].same[0], 1, "rank %d: the identity check found a difference", r);
    cr_assert_eq(a[r].same[1], 0, "rank %d: the identity check missed a one-ulp difference", r);
  }
}

static void run_sac(darg_t *a, int mode, int updates) { run_sac_path(a, mode, updates, 0); }

static void expect_same_state(const darg_t *x, const darg_t *y) {
  cr_assert_eq(x->n, y->n);
  cr_assert(memcmp(x->params, y->params, x->n * sizeof(float)) == 0, "parameters differ");
  cr_assert(memcmp(x->m, y->m, x->n * sizeof(float)) == 0, "Adam first moments differ");
  cr_assert(memcmp(x->v, y->v, x->n * sizeof(float)) == 0, "Adam second moments differ");
  cr_assert(memcmp(x->steps, y->steps, sizeof x->steps) == 0, "Adam step counters differ");
  cr_assert_eq(x->step, y->step);
}

Test(dp, two_learners_stay_bit_identical_over_50_updates_and_differ_from_one) {
  darg_t a[2];
  run_sac(a, 0, 50);
  expect_same_state(&a[0], &a[1]);
  /* the targets too (critics' layout) */
  sac_backend_t *be = NULL;
  sac_t *one = small_sac(&be, 7);
  size_t ntgt = sac_buffer_len(one, SAC_BUF_TARGET);
  cr_assert(memcmp(a[0].target, a[1].target, ntgt * sizeof(float)) == 0, "target critics differ");
  cr_assert_eq(a[0].step, 50);
  /* the ranks drew different policy noise */
  cr_assert(a[0].key[0] != a[1].key[0] || a[0].key[1] != a[1].key[1]);
  /* a single learner on rank 0's batches ends elsewhere: the gradients were averaged */
  for (int u = 0; u < 50; u++) {
    batch_for(one, 0, u);
    sac_update(one);
  }
  float *p1 = malloc(a[0].n * sizeof(float));
  sac_get_buffer(one, SAC_BUF_PARAMS, p1, a[0].n);
  size_t differ = 0;
  for (size_t i = 0; i < a[0].n; i++)
    differ += p1[i] != a[0].params[i];
  cr_assert(differ > a[0].n / 2, "only %zu of %zu parameters differ from a single learner's", differ, a[0].n);
  /* and it moved: the data-parallel learners did learn something */
  sac_t *fresh = NULL;
  sac_backend_t *be2 = NULL;
  fresh = small_sac(&be2, 7);
  sac_get_buffer(fresh, SAC_BUF_PARAMS, p1, a[0].n);
  differ = 0;
  for (size_t i = 0; i < a[0].n; i++)
    differ += p1[i] != a[0].params[i];
  cr_assert(differ > a[0].n / 2, "the data-parallel learners barely moved (%zu changed)", differ);
  free(p1);
  sac_destroy(&fresh), sac_backend_destroy(&be2);
  sac_destroy(&one), sac_backend_destroy(&be);
  for (int r = 0; r < 2; r++)
    free_state(&a[r]);
}

/* A GPU rank with the zmq collective sends its gradients through host memory: copied
 * into the backend's fetch slots and waited for by event, not by a stream sync per
 * segment. The same run through that path ends bit-identical to the direct one, and
 * neither makes a blocking sync during the updates (the former path downloaded each
 * segment: two to three stream syncs per phase). */
Test(dp, gradients_through_the_host_path_equal_the_direct_path_without_stream_syncs) {
  darg_t d[2], h[2];
  run_sac_path(d, 0, 20, 0);
  run_sac_path(h, 0, 20, 1);
  expect_same_state(&d[0], &h[0]);
  expect_same_state(&h[0], &h[1]);
  for (int r = 0; r < 2; r++) {
    cr_expect_eq(d[r].update_waits, 0, "direct path: %lld blocking syncs", (long long)d[r].update_waits);
    cr_expect_eq(h[r].update_waits, 0, "host path: %lld blocking syncs", (long long)h[r].update_waits);
    free_state(&d[r]), free_state(&h[r]);
  }
  /* control: the same path without fetch slots downloads every segment (a stream sync each) */
  run_sac_path(h, 0, 20, 2);
  for (int r = 0; r < 2; r++) {
    cr_expect_geq(h[r].update_waits, 40, "control: %lld blocking syncs by downloads",
                  (long long)h[r].update_waits);
    free_state(&h[r]);
  }
}

Test(dp, rank_0s_state_makes_a_fresh_rank_equal) {
  darg_t a[2];
  run_sac(a, 1, 0);
  expect_same_state(&a[0], &a[1]);
  cr_assert_eq(a[1].step, 10, "rank 1 did not take rank 0's update step");
  cr_assert_eq(a[1].extra[0], 1234);
  cr_assert_eq(a[1].extra[1], 5678);
  /* rank 1's noise key is its own, derived from rank 0's */
  uint32_t k1[2];
  sac_dp_rank_key(a[0].key, 1, k1);
  cr_assert(a[1].key[0] == k1[0] && a[1].key[1] == k1[1]);
  for (int r = 0; r < 2; r++)
    free_state(&a[r]);
}

/* ------------------------------------------- dp: fp16 overflow decided by all ranks */

/* The cpu backend with the fp16 loss scaler's step-skipping rules of the cuda backend
 * (backend_cuda.cu: k_adam skips its step when the overflow flag is set and clears the
 * flag; update_end halves the scale after a skip), so that data-parallel fp16 is tested
 * through the real collective on CPU. Each rank is a thread: the state is thread-local.
 * An overflow is injected on one rank only, as the cuda backend's backward pass sets the
 * flag when a gradient leaves the fp16 range. share = 0 leaves out overflow_export and
 * overflow_import: a backend whose flag the ranks do not share (the negative control). */
static __thread struct {
  const sac_backend_ops_t *cpu;
  int ovf, found;
  double scale, good;
  uint64_t skipped;
} emu;
static void emu_adam(sac_backend_t *be, float *p, const float *g, float *m, float *v, size_t n,
                     const sac_adam_hp_t *hp, float *t) {
  if (emu.ovf)
    emu.found = 1; /* the whole step skipped, t included */
  else
    emu.cpu->adam(be, p, g, m, v, n, hp, t);
  emu.ovf = 0;
}
static void emu_update_end(sac_backend_t *be) {
  (void)be;
  if (emu.found)
    emu.scale *= 0.5, emu.good = 0, emu.skipped++, emu.found = 0;
  else
    emu.good++;
}
static void emu_export(sac_backend_t *be, float *dst) { (void)be, *dst = emu.ovf ? 1.0f : 0.0f; }
static void emu_import(sac_backend_t *be, const float *src) { (void)be, emu.ovf = *src != 0.0f; }
static int emu_get(sac_backend_t *be, const char *key, double *out) {
  (void)be;
  if (!strcmp(key, "loss_scale"))
    return *out = emu.scale, 0;
  if (!strcmp(key, "loss_scale_good"))
    return *out = emu.good, 0;
  return SAC_ENOTFOUND;
}
static int emu_set(sac_backend_t *be, const char *key, const char *value) {
  (void)be;
  if (!strcmp(key, "loss_scale"))
    return emu.scale = atof(value), emu.good = 0, 0;
  if (!strcmp(key, "loss_scale_good"))
    return emu.good = atof(value), 0;
  return SAC_ENOTFOUND;
}

static void *fp16_thread(void *p) {
  darg_t *a = p;
  sac_backend_t *be = NULL;
  sac_t *s = small_sac(&be, 7);
  sac_backend_ops_t ops = *be->ops;
  emu.cpu = be->ops;
  ops.adam = emu_adam, ops.update_end = emu_update_end, ops.get_metric = emu_get, ops.set_option = emu_set;
  if (a->mode == 2)
    ops.overflow_export = emu_export, ops.overflow_import = emu_import;
  be->ops = &ops;
  emu.scale = a->rank == 0 ? 65536.0 : 4.0; /* rank 0's scale must reach every rank */
  sac_dp_cfg_t cfg;
  sac_dp_cfg_default(&cfg);
  cfg.rank = a->rank, cfg.size = a->size, cfg.connect_timeout_ms = CONNECT_MS, cfg.timeout_ms = 5000;
  snprintf(cfg.coord, sizeof cfg.coord, "%s", a->ep);
  snprintf(cfg.collective, sizeof cfg.collective, "zmq");
  sac_dp_t *dp = NULL;
  a->rc_new = sac_dp_new(&cfg, k_conf, be, &dp, a->why, sizeof a->why);
  if (dp) {
    a->rc = sac_dp_sync_state(dp, s, a->extra, sizeof a->extra);
    if (a->rc == 0)
      a->rc = sac_dp_attach(dp, s);
    for (int u = 0; u < a->updates && a->rc == 0; u++) {
      batch_for(s, (uint64_t)a->rank, u);
      if (a->rank == 1 && (u == 5 || u == 11))
        emu.ovf = 1; /* rank 1's backward pass overflowed fp16, rank 0's did not */
      a->rc = sac_update(s);
    }
  }
  take_state(a, s);
  a->scale = emu.scale, a->skipped = emu.skipped;
  sac_dp_destroy(&dp);
  be->ops = emu.cpu;
  sac_destroy(&s);
  sac_backend_destroy(&be);
  return NULL;
}

static void run_fp16(darg_t *a, int mode, int updates) {
  memset(a, 0, sizeof(darg_t) * 2);
  char ep[64];
  endpoint(ep, sizeof ep);
  for (int r = 0; r < 2; r++) {
    snprintf(a[r].ep, sizeof a[r].ep, "%s", ep);
    a[r].rank = r, a[r].size = 2, a[r].mode = mode, a[r].updates = updates;
  }
  run_threads(2, fp16_thread, a, sizeof a[0]);
  for (int r = 0; r < 2; r++) {
    cr_assert_eq(a[r].rc_new, 0, "rank %d: %s (%s)", r, sac_strerror(a[r].rc_new), a[r].why);
    cr_assert_eq(a[r].rc, 0, "rank %d: %s", r, sac_strerror(a[r].rc));
  }
}

Test(dp, fp16_overflow_on_one_rank_skips_the_step_on_every_rank) {
  darg_t a[2];
  run_fp16(a, 2, 20);
  /* two injected overflows (each in the critic phase): every rank skipped both critic
   * steps and halved its scale twice, from rank 0's 65536 */
  for (int r = 0; r < 2; r++) {
    cr_expect_eq(a[r].skipped, 2, "rank %d skipped %llu updates", r, (unsigned long long)a[r].skipped);
    cr_expect_eq(a[r].scale, 16384.0, "rank %d's loss scale is %g", r, a[r].scale);
    cr_expect_eq(a[r].steps[0], 18.0f, "rank %d's critic Adam step counter is %g", r, (double)a[r].steps[0]);
  }
  expect_same_state(&a[0], &a[1]);
  for (int r = 0; r < 2; r++)
    free_state(&a[r]);
}

/* The negative control: the same run with a flag the ranks do not share parts them, and
 * the comparison above sees it. */
Test(dp, fp16_overflow_not_shared_parts_the_ranks_negative_control) {
  darg_t a[2];
  run_fp16(a, 3, 20);
  cr_expect_eq(a[0].skipped, 0);
  cr_expect_eq(a[1].skipped, 2);
  cr_expect_neq(a[0].scale, a[1].scale);
  cr_expect(memcmp(a[0].params, a[1].params, a[0].n * sizeof(float)) != 0,
            "the ranks stayed identical although only one skipped its steps");
  cr_expect(a[0].steps[0] != a[1].steps[0]);
  for (int r = 0; r < 2; r++)
    free_state(&a[r]);
}
