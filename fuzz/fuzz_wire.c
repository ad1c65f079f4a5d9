/* libFuzzer target for the wire decoder: any bytes go through sac_wire_decode with the
 * limits a shard's insert and sample endpoints use; whatever decodes must re-encode and
 * decode again to the same type (so a view handed out is always self-consistent), and
 * a decoded transition batch must pass sac_wire_validate. Built with clang's
 * -fsanitize=fuzzer,address,undefined by replay/CMakeLists.txt when SAC_FUZZ=ON; run for
 * a bounded time by scripts/fuzz.sh. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/wire.h"

#include <stdio.h>

static sac_wire_decoder_t *g_dec, *g_dec2;
static unsigned char *g_out;
#define MAX_MSG (1u << 16)

/* Writes one seed: the limits selector byte, then an encoded message. */
static void seed(const char *dir, const char *name, uint8_t sel, const sac_wire_msg_t *m) {
  static unsigned char buf[1 << 16];
  size_t len = 0;
  buf[0] = sel;
  if (sac_wire_encode(m, buf + 1, sizeof buf - 1, &len) != 0)
    return;
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f)
    return;
  fwrite(buf, 1, len + 1, f);
  fclose(f);
}

/* With SAC_FUZZ_SEED_DIR set, writes valid messages of every type there as a corpus. */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  const char *dir = getenv("SAC_FUZZ_SEED_DIR");
  if (!dir)
    return 0;
  /* 3 rows of 2 envs, obs 3, act 1: row 1 (env 1) terminated, env 0 open with a tail */
  static const uint32_t env[3] = {0, 1, 0}, rows[1] = {1}, tail_env[1] = {0};
  static const float obs[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, act[3] = {0.1f, 0.2f, 0.3f}, rew[3] = {1, 2, 3};
  static const float next[3] = {0, 0, 1}, tail[3] = {9, 9, 9};
  static const uint8_t term[3] = {0, 1, 0}, trunc[3] = {0, 0, 0};
  static const sac_wire_episode_t eps[1] = {{1, 5.0f, 7, 0}};
  sac_wire_msg_t m = {.type = SAC_WIRE_TRANSITIONS};
  m.u.transitions = (sac_wire_transitions_t){.actor_id = 1, .seq = 1, .session = 2, .n = 3, .obs_dim = 3, .act_dim = 1,
                                             .env_ids = env, .obs = obs, .action = act, .reward = rew,
                                             .terminated = term, .truncated = trunc, .n_next = 1,
                                             .next_obs_rows = rows, .next_obs = next, .n_tail = 1,
                                             .tail_env_ids = tail_env, .tail_obs = tail, .n_episodes = 1,
                                             .episodes = eps};
  seed(dir, "transitions", 1, &m);
  m = (sac_wire_msg_t){.type = SAC_WIRE_SAMPLE_REQUEST};
  m.u.sample_request = (sac_wire_sample_request_t){7, 256, 0.4f, 100, SAC_WIRE_F32, 0};
  seed(dir, "sample_request", 2, &m);
  static const uint64_t idx[2] = {SAC_WIRE_INDEX(0, 1, 2), SAC_WIRE_INDEX(0, 0, 3)};
  static const float pr[2] = {0.5f, 2.0f}, one[2] = {1, 1}, zero[2] = {0, 0};
  m = (sac_wire_msg_t){.type = SAC_WIRE_PRIORITY_UPDATE};
  m.u.priority_update = (sac_wire_priority_update_t){2, idx, pr};
  seed(dir, "priority_update", 2, &m);
  static const float sobs[6] = {1, 2, 3, 4, 5, 6}, sact[2] = {0, 1};
  m = (sac_wire_msg_t){.type = SAC_WIRE_SAMPLE_BATCH};
  m.u.sample_batch = (sac_wire_sample_batch_t){.request_id = 7, .n = 2, .obs_dim = 3, .act_dim = 1, .obs = sobs,
                                               .action = sact, .reward = one, .terminated = zero,
                                               .next_obs = sobs, .indices = idx, .weights = one, .error = ""};
  seed(dir, "sample_batch", 1, &m);
  static const sac_wire_layer_t layers[2] = {{2, 2, 1}, {2, 1, 2}};
  static const float w[2 * 2 + 2 + 2 + 1] = {0};
  m = (sac_wire_msg_t){.type = SAC_WIRE_WEIGHTS};
  m.u.weights = (sac_wire_weights_t){3, SAC_WIRE_F32, 2, layers, w, sizeof w, 0, 0, 0, 0, 0};
  seed(dir, "weights", 0, &m);
  m = (sac_wire_msg_t){.type = SAC_WIRE_ACK};
  m.u.ack = (sac_wire_ack_t){.acked_seq = 3, .seq = 3, .credit = 16, .stored = 64, .error = ""};
  seed(dir, "ack", 0, &m);
  m = (sac_wire_msg_t){.type = SAC_WIRE_HELLO};
  m.u.hello = (sac_wire_hello_t){"actor", 1, 2, "0.1.0"};
  seed(dir, "hello", 0, &m);
  m = (sac_wire_msg_t){.type = SAC_WIRE_SHARD_INFO};
  m.u.shard_info = (sac_wire_shard_info_t){.shard_id = 1, .size = 5, .capacity = 10, .bytes_per_transition = 100};
  seed(dir, "shard_info", 0, &m);
  m = (sac_wire_msg_t){.type = SAC_WIRE_LEARNER_INFO};
  m.u.learner_info = (sac_wire_learner_info_t){0, 1, 2, 3};
  seed(dir, "learner_info", 0, &m);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!g_dec) {
    sac_log_set_level(SAC_LOG_ERROR);
    g_dec = sac_wire_decoder_new(MAX_MSG);
    g_dec2 = sac_wire_decoder_new(MAX_MSG);
    g_out = malloc(MAX_MSG * 2);
    if (!g_dec || !g_dec2 || !g_out)
      abort();
  }
  /* the first byte picks the receiver's limits, the rest is the message */
  const sac_wire_limits_t limits[3] = {
      {.max_msg_bytes = MAX_MSG}, /* anything */
      {.max_msg_bytes = MAX_MSG, .obs_dim = 3, .act_dim = 1, .max_rows = 64, .max_env_id = 16},
      {.max_msg_bytes = 4096, .obs_dim = 17, .act_dim = 6, .max_rows = 256,
       .accept_mask = SAC_WIRE_ACCEPT(SAC_WIRE_SAMPLE_REQUEST) | SAC_WIRE_ACCEPT(SAC_WIRE_PRIORITY_UPDATE)},
  };
  const sac_wire_limits_t *lim = &limits[0];
  if (size > 0) {
    lim = &limits[data[0] % 3];
    data++;
    size--;
  }
  sac_wire_msg_t m;
  sac_wire_reason_t why = SAC_WIRE_R_NONE;
  int rc = sac_wire_decode(g_dec, data, size, lim, &m, &why);
  if (rc != 0) {
    if (why == SAC_WIRE_R_NONE || why >= SAC_WIRE_R_COUNT)
      abort(); /* every rejection names its reason */
    return 0;
  }
  if (m.type == SAC_WIRE_TRANSITIONS && sac_wire_validate(g_dec, &m, lim, &why) != 0)
    abort();
  size_t len = 0;
  if (sac_wire_encode(&m, g_out, MAX_MSG * 2, &len) != 0)
    abort();
  sac_wire_msg_t m2;
  if (sac_wire_decode(g_dec2, g_out, len, NULL, &m2, &why) != 0 || m2.type != m.type)
    abort();
  return 0;
}
