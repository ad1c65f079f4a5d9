/* libFuzzer target for the weights subscriber's receive-and-check path
 * (common/weights.c: sac_weights_poll = decode, shape check against the actor's policy,
 * finiteness, buffer swap). Each input goes over a real ZeroMQ PUB -> SUB pair on
 * inproc:// into a subscriber expecting the Pendulum policy (obs 3, act 1), exactly as an
 * actor receives it. Properties beyond "no crash, no leak, no UB":
 *   - every message is accounted for: received once, and either taken or rejected;
 *   - a rejected message leaves the weights in use untouched;
 *   - taken weights describe the policy the subscriber runs (input obs_dim, output
 *     2 * act_dim, ReLU hidden layers) and the actor's inference (sac_policy_act, with
 *     scratch sized as actor.c sizes it) runs on them within its buffers.
 * Input: byte 0 selects the framing (bit 0: send a second frame too, which must be
 * refused) and how the weights are applied (bit 1: over 4 environments at once, the
 * batched inference of an actor with --envs_per_actor 4, scratch sized as actor.c's
 * take_weights sizes it for them); the rest is the message. Seeds (SAC_FUZZ_SEED_DIR): valid weights of the
 * right shape and of wrong shapes, encoded by the wire encoder. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "common/log.h"
#include "common/mlp.h"
#include "common/net.h"
#include "common/rng.h"
#include "common/weights.h"
#include "common/wire.h"

#define OBS 3
#define ACT 1

static sac_net_ctx_t *g_ctx;
static void *g_pub;
static sac_weights_sub_t *g_sub;
static float *g_scratch;
static size_t g_scratch_cap;

static void seed_weights(const char *dir, const char *name, uint8_t sel, const int *sizes, int n_layers,
                         float fill) {
  sac_wire_layer_t layers[16];
  size_t n = 0;
  for (int l = 0; l < n_layers; l++) {
    layers[l] = (sac_wire_layer_t){(uint32_t)sizes[l], (uint32_t)sizes[l + 1], l + 1 < n_layers ? 1u : 0u};
    n += (size_t)sizes[l] * (size_t)sizes[l + 1] + (size_t)sizes[l + 1];
  }
  float *w = malloc(n * sizeof(float));
  unsigned char *buf = malloc(n * 4 + 4096);
  if (!w || !buf)
    goto out;
  for (size_t i = 0; i < n; i++)
    w[i] = fill * (float)((i % 7) - 3);
  sac_wire_msg_t m = {.type = SAC_WIRE_WEIGHTS};
  m.u.weights = (sac_wire_weights_t){.version = 42,
                                     .dtype = SAC_WIRE_F32,
                                     .n_layers = (uint32_t)n_layers,
                                     .layers = layers,
                                     .data = w,
                                     .data_len = n * sizeof(float)};
  size_t len = 0;
  buf[0] = sel;
  if (sac_wire_encode(&m, buf + 1, n * 4 + 4095, &len) == 0) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (f) {
      fwrite(buf, 1, len + 1, f);
      fclose(f);
    }
  }
out:
  free(w);
  free(buf);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  sac_log_set_level(SAC_LOG_ERROR);
  const char *dir = getenv("SAC_FUZZ_SEED_DIR");
  if (dir) {
    static const int ok[] = {OBS, 8, 8, 2 * ACT}, one[] = {OBS, 2 * ACT}, bad_in[] = {4, 8, 2 * ACT},
                     bad_out[] = {OBS, 8, 3}, chain[] = {OBS, 5, 2 * ACT};
    seed_weights(dir, "ok", 0, ok, 3, 0.1f);
    seed_weights(dir, "ok_linear", 0, one, 1, 0.5f);
    seed_weights(dir, "two_frames", 1, ok, 3, 0.1f);
    seed_weights(dir, "bad_input", 0, bad_in, 2, 0.1f);
    seed_weights(dir, "bad_output", 0, bad_out, 2, 0.1f);
    seed_weights(dir, "big_values", 0, chain, 2, 1e30f);
  }
  return 0;
}

static void setup(void) {
  g_ctx = sac_net_ctx_new(1);
  sac_net_opts_t o;
  sac_net_opts_default(&o);
  o.sndhwm = 1000;
  g_pub = g_ctx ? sac_net_socket(g_ctx, SAC_NET_PUB, &o) : NULL;
  if (!g_pub || sac_net_bind(g_pub, "inproc://fuzz-weights", NULL, 0) != 0)
    abort();
  g_sub = sac_weights_sub_new(g_ctx, "inproc://fuzz-weights", OBS, ACT);
  if (!g_sub)
    abort();
  /* the subscription reaches the publisher asynchronously: publish a probe until one
   * arrives (an empty message: received and rejected) */
  for (int i = 0; i < 2000 && sac_weights_received(g_sub) == 0; i++) {
    sac_net_send(g_pub, "", 0, SAC_NET_DONTWAIT);
    sac_weights_wait(g_sub, 5);
  }
  if (sac_weights_received(g_sub) == 0)
    abort();
  /* drain what is left of the probes */
  for (int i = 0; i < 100; i++)
    sac_weights_wait(g_sub, 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!g_sub)
    setup();
  int two = size > 0 && (data[0] & 1);
  const int E = size > 0 && (data[0] & 2) ? 4 : 1;
  if (size > 0)
    data++, size--;
  uint64_t recv0 = sac_weights_received(g_sub), rej0 = sac_weights_rejected(g_sub);
  uint64_t ver0 = sac_weights_version(g_sub);
  const float *params0 = sac_weights_params(g_sub);
  if (sac_net_send(g_pub, data, size, two ? SAC_NET_SNDMORE : 0) != 0 ||
      (two && sac_net_send(g_pub, "x", 1, 0) != 0))
    abort();
  int r = 0;
  for (int i = 0; i < 500 && sac_weights_received(g_sub) == recv0; i++)
    r = sac_weights_wait(g_sub, 10);
  if (sac_weights_received(g_sub) != recv0 + 1)
    abort(); /* lost, or counted twice (a conflating SUB over inproc never drops here) */
  uint64_t rejected = sac_weights_rejected(g_sub) - rej0;
  if (r < 0 || r + (int)rejected != 1)
    abort(); /* taken or rejected, exactly one of them */
  if (two && r == 1)
    abort(); /* two frames are never weights */
  if (r == 0) {
    /* a rejection leaves the weights in use untouched */
    if (sac_weights_params(g_sub) != params0 || sac_weights_version(g_sub) != ver0)
      abort();
    return 0;
  }
  const sac_mlp_desc_t *d = sac_weights_desc(g_sub);
  const float *p = sac_weights_params(g_sub);
  if (!d || !p || d->n_layers < 1 || d->n_layers > SAC_MLP_MAX_LAYERS || d->sizes[0] != OBS ||
      d->sizes[d->n_layers] != 2 * ACT || d->hidden_act != SAC_ACT_RELU)
    abort();
  /* the actor's inference on them: scratch as actor.c sizes it, for E environments */
  size_t need = (size_t)E * (size_t)(2 * ACT + 2 * sac_mlp_max_width(d));
  if (need > g_scratch_cap) {
    free(g_scratch);
    g_scratch = malloc(need * sizeof(float));
    g_scratch_cap = g_scratch ? need : 0;
    if (!g_scratch)
      abort();
  }
  static const float obs[4 * OBS] = {0.5f, -0.5f, 1.0f, 0.0f,   0.25f, -1.0f,
                                     1.0f, 1.0f,  1.0f, -0.75f, 0.1f,  0.2f};
  float act[4 * ACT];
  sac_rng_t rng;
  sac_rng_init(&rng, 1, 2);
  sac_policy_cfg_t pc = {-5.0f, 2.0f};
  sac_policy_act(d, p, &pc, obs, E, 0, &rng, act, g_scratch);
  /* (Finite but huge weights can overflow to NaN actions: finiteness of the weights is
   * all the subscriber promises, so that is reported by the test suite, not asserted.) */
  volatile float sink = act[0];
  (void)sink;
  return 0;
}
