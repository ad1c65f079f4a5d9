/* Weight broadcast latency: the learner's publisher and an actor's subscriber in two
 * threads over TCP loopback, the actor polling between "steps" as sac-actor does. For
 * each version the subscriber applies, latency = applied time - publish time (one
 * monotonic clock). Reports p50/p99/max over the versions applied, for the cheetah
 * actor (17 -> 256 -> 256 -> 12, 73,484 parameters) unless told otherwise. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/config.h"
#include "common/log.h"
#include "common/rng.h"
#include "common/weights.h"

typedef struct {
  int publishes, interval_us, obs, act, hidden, depth, port;
} cfg_t;

#define O_(k, f, d, lo, hi, h)                                                                               \
  { k, SAC_CFG_INT, offsetof(cfg_t, f), 0, d, lo, hi, h }
static const sac_cfg_opt_t k_opts[] = {
    O_("publishes", publishes, "2000", 1, 1e7, "versions published"),
    O_("interval_us", interval_us, "2000", 0, 1e7, "time between publishes (us)"),
    O_("obs", obs, "17", 1, 1e6, "observation dim"),
    O_("act", act, "6", 1, 1e6, "action dim"),
    O_("hidden", hidden, "256", 1, 1e6, "hidden width"),
    O_("depth", depth, "2", 1, 15, "hidden layers"),
    O_("port", port, "0", 0, 65535, "loopback port (0: pick a free one)"),
};

static cfg_t g_cfg;
static char g_ep[256];
static uint64_t *g_pub_ns;
static atomic_int g_done;
static double *g_lat;
static int g_n_lat;

static void *sub_thread(void *arg) {
  sac_weights_sub_t *s = arg;
  uint64_t last = 0, t_end = UINT64_MAX;
  for (;;) {
    if (atomic_load(&g_done) && t_end == UINT64_MAX)
      t_end = sac_clock_ns() + 200000000ull; /* 200 ms for the last versions in flight */
    if (sac_clock_ns() >= t_end)
      break;
    int r = sac_weights_wait(s, 1);
    if (r == 1) {
      uint64_t now = sac_clock_ns(), v = sac_weights_version(s);
      if (v > last && v <= (uint64_t)g_cfg.publishes && g_pub_ns[v]) {
        g_lat[g_n_lat++] = (double)(now - g_pub_ns[v]) * 1e-6;
        last = v;
      }
    }
  }
  return NULL;
}

static int cmpd(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  int action;
  if (sac_config_load(k_opts, sizeof k_opts / sizeof k_opts[0], &g_cfg, argc, argv,
                      "sac-bench-weights: weight broadcast latency, publish to applied, over TCP loopback",
                      &action))
    return 2;
  if (action == SAC_CFG_EXIT_OK)
    return 0;
  sac_mlp_desc_t d;
  sac_mlp_desc_init(&d, g_cfg.obs, g_cfg.hidden, g_cfg.depth, 2 * g_cfg.act, SAC_ACT_RELU, 1);
  size_t n = sac_mlp_param_count(&d);
  float *p = malloc(n * sizeof(float));
  sac_rng_t rng;
  sac_rng_init(&rng, 1, 1);
  sac_mlp_init_params(&d, p, &rng);
  g_pub_ns = calloc((size_t)g_cfg.publishes + 1, sizeof(uint64_t));
  g_lat = calloc((size_t)g_cfg.publishes + 1, sizeof(double));
  sac_net_ctx_t *ctx = sac_net_ctx_new(1);
  char want[64];
  snprintf(want, sizeof want, g_cfg.port ? "tcp://127.0.0.1:%d" : "tcp://127.0.0.1:*", g_cfg.port);
  sac_weights_pub_t *pub = sac_weights_pub_new(ctx, want, &d, g_ep, sizeof g_ep);
  if (!pub)
    return 1;
  /* a separate context for the subscriber, as in a separate process */
  sac_net_ctx_t *ctx2 = sac_net_ctx_new(1);
  sac_weights_sub_t *sub = sac_weights_sub_new(ctx2, g_ep, g_cfg.obs, g_cfg.act);
  if (!sub)
    return 1;
  /* wait (bounded) for the subscription to reach the publisher */
  for (int i = 0; i < 500 && sac_weights_wait(sub, 10) != 1; i++)
    sac_weights_publish(pub, 0, p);
  pthread_t th;
  pthread_create(&th, NULL, sub_thread, sub);
  for (int v = 1; v <= g_cfg.publishes; v++) {
    p[0] = (float)v;
    g_pub_ns[v] = sac_clock_ns();
    sac_weights_publish(pub, (uint64_t)v, p);
    sac_sleep_ns((uint64_t)g_cfg.interval_us * 1000ull);
  }
  atomic_store(&g_done, 1);
  pthread_join(th, NULL);
  qsort(g_lat, (size_t)g_n_lat, sizeof(double), cmpd);
  if (g_n_lat == 0) {
    fprintf(stderr, "no version applied\n");
    return 1;
  }
  printf("weights: %zu parameters (%zu bytes), %d published every %d us over %s, %d applied\n", n,
         n * sizeof(float), g_cfg.publishes, g_cfg.interval_us, g_ep, g_n_lat);
  printf("| publish -> applied | ms |\n| --- | --- |\n");
  printf("| p50 | %.3f |\n| p99 | %.3f |\n| max | %.3f |\n", g_lat[g_n_lat / 2],
         g_lat[(int)floor(0.99 * (g_n_lat - 1))], g_lat[g_n_lat - 1]);
  sac_weights_sub_destroy(&sub);
  sac_weights_pub_destroy(&pub);
  sac_net_ctx_destroy(&ctx2);
  sac_net_ctx_destroy(&ctx);
  free(p), free(g_pub_ns), free(g_lat);
  return 0;
}
