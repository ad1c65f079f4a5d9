/* The wire codec's observable behaviour as text, for scripts/local_identity.sh: the
 * script builds this file against two trees' common/wire.h and libsac_common and
 * compares what each prints. Seeded pseudo-random messages of every type (sizes,
 * counts, NaN and out-of-range values, bad flags, missing arrays) are encoded, decoded
 * under a few limits, and then decoded again after byte flips, truncations and random
 * bytes; each line is a result code, a reason and the FNV-1a hash of the bytes (or of
 * the decoded view encoded again, which covers every field of the view). Not a test of
 * its own: two builds that print the same lines encode and decode alike.
 *
 * usage: wire_probe [MESSAGES] (default 3000) */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/wire.h"

static uint64_t g_rng = 0x5eed5eed12345678ull;

static uint64_t next(void) { /* splitmix64 */
  uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static uint32_t below(uint32_t n) { return n ? (uint32_t)(next() % n) : 0; }

static float value(void) { /* mostly ordinary values; now and then NaN, Inf or huge */
  uint32_t k = below(400);
  if (k == 0)
    return NAN;
  if (k == 1)
    return INFINITY;
  if (k == 2)
    return 1e30f;
  return (float)((double)below(20001) / 1000.0 - 10.0);
}

static uint64_t fnv(const void *p, size_t n) {
  const unsigned char *b = p;
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++)
    h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

/* Backing arrays for one random message (views point here). */
#define MAXN 64
#define MAXD 17
static float f_obs[MAXN * MAXD], f_next[MAXN * MAXD], f_tail[MAXN * MAXD], f_act[MAXN * MAXD], f_rew[MAXN],
    f_term[MAXN], f_w[MAXN], f_data[4096];
static uint32_t u_env[MAXN], u_rows[MAXN], u_tail[MAXN];
static uint8_t b_term[MAXN], b_trunc[MAXN];
static uint64_t u_idx[MAXN];
static sac_wire_episode_t eps[MAXN];
static sac_wire_layer_t layers[8];

static void fill(float *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    p[i] = value();
}

static void random_transitions(sac_wire_transitions_t *t) {
  uint32_t n = 1 + below(MAXN - 1), od = 1 + below(MAXD - 1), ad = 1 + below(6);
  *t = (sac_wire_transitions_t){.actor_id = below(4),
                                .seq = below(5),
                                .session = next(),
                                .acked_through = below(4),
                                .policy_version = below(100),
                                .n = n,
                                .obs_dim = od,
                                .act_dim = ad};
  uint32_t n_env = 1 + below(4), k = 0;
  for (uint32_t i = 0; i < n; i++) {
    u_env[i] = below(n_env + (below(50) == 0));
    b_term[i] = below(10) == 0 ? (uint8_t)(1 + (below(30) == 0)) : 0;
    b_trunc[i] = below(15) == 0;
    if ((b_term[i] | b_trunc[i]) && below(20))
      u_rows[k++] = i;
  }
  fill(f_obs, (size_t)n * od), fill(f_act, (size_t)n * ad), fill(f_rew, n), fill(f_next, (size_t)k * od);
  t->env_ids = u_env, t->obs = f_obs, t->action = f_act, t->reward = f_rew;
  t->terminated = b_term, t->truncated = b_trunc;
  t->n_next = k, t->next_obs_rows = k ? u_rows : NULL, t->next_obs = k ? f_next : NULL;
  t->n_tail = below(n_env + 1);
  for (uint32_t j = 0; j < t->n_tail; j++)
    u_tail[j] = below(n_env);
  fill(f_tail, (size_t)t->n_tail * od);
  t->tail_env_ids = t->n_tail ? u_tail : NULL, t->tail_obs = t->n_tail ? f_tail : NULL;
  t->n_episodes = below(3);
  for (uint32_t e = 0; e < t->n_episodes; e++)
    eps[e] = (sac_wire_episode_t){below(n_env), value(), below(1000), (int)below(2)};
  t->episodes = t->n_episodes ? eps : NULL;
  if (below(40) == 0) /* a count without its array */
    t->obs = NULL;
}

static void random_sample_batch(sac_wire_sample_batch_t *b) {
  uint32_t n = below(MAXN), od = 1 + below(MAXD - 1), ad = 1 + below(6), shard = below(3);
  *b = (sac_wire_sample_batch_t){
      .request_id = next(), .n = n, .obs_dim = od, .act_dim = ad, .shard_id = shard};
  fill(f_obs, (size_t)n * od), fill(f_next, (size_t)n * od), fill(f_act, (size_t)n * ad), fill(f_rew, n);
  for (uint32_t i = 0; i < n; i++) {
    f_term[i] = (float)below(2) + (below(60) == 0 ? 0.5f : 0.0f);
    f_w[i] = below(80) == 0 ? -1.0f : (float)below(1000) / 1000.0f;
    u_idx[i] = ((uint64_t)(below(60) == 0 ? shard + 1 : shard) << 48) | below(100000);
  }
  b->obs = f_obs, b->next_obs = f_next, b->action = f_act, b->reward = f_rew;
  b->terminated = f_term, b->indices = u_idx, b->weights = f_w;
  b->error = n == 0 && below(2) ? "rate limited" : "";
}

static void random_weights(sac_wire_weights_t *w) {
  uint32_t L = 1 + below(4), dims[9], elems = 0;
  for (uint32_t i = 0; i <= L; i++)
    dims[i] = 1 + below(12);
  for (uint32_t i = 0; i < L; i++) {
    layers[i] = (sac_wire_layer_t){dims[i], below(30) == 0 ? dims[i + 1] + 1 : dims[i + 1], below(4)};
    elems += dims[i] * dims[i + 1] + dims[i + 1];
  }
  *w = (sac_wire_weights_t){.version = next() % 1000,
                            .dtype = (sac_wire_dtype_t)below(4),
                            .n_layers = L,
                            .layers = layers,
                            .scale = below(10) ? 0.5f : 0.0f};
  fill(f_data, elems);
  size_t es = w->dtype == SAC_WIRE_F32 ? 4 : w->dtype == SAC_WIRE_I8 ? 1 : 2;
  w->data = f_data;
  w->data_len = (size_t)elems * es + (below(30) == 0);
}

static void random_msg(sac_wire_msg_t *m) {
  memset(m, 0, sizeof *m);
  m->type = (sac_wire_type_t)(10 + below(11));
  switch (m->type) {
  case SAC_WIRE_TRANSITIONS:
    random_transitions(&m->u.transitions);
    break;
  case SAC_WIRE_ACK:
    m->u.ack = (sac_wire_ack_t){
        next(), next(), below(64), below(64), below(3), (int)below(2), below(2) ? "" : "full"};
    break;
  case SAC_WIRE_SAMPLE_REQUEST:
    m->u.sample_request =
        (sac_wire_sample_request_t){next(), below(300), below(20) ? 0.4f : 2.0f, below(1000)};
    break;
  case SAC_WIRE_SAMPLE_BATCH:
    random_sample_batch(&m->u.sample_batch);
    break;
  case SAC_WIRE_PRIORITY_UPDATE:
    m->u.priority_update.n = below(MAXN);
    for (uint32_t i = 0; i < MAXN; i++)
      u_idx[i] = next(), f_w[i] = below(50) ? (float)below(100) : -1.0f;
    m->u.priority_update.indices = u_idx, m->u.priority_update.priorities = f_w;
    break;
  case SAC_WIRE_WEIGHTS:
    random_weights(&m->u.weights);
    break;
  case SAC_WIRE_HELLO:
    m->u.hello = (sac_wire_hello_t){below(4) ? "actor" : "someone", below(9), next(), "1.0"};
    break;
  case SAC_WIRE_HEARTBEAT:
    m->u.heartbeat_time_ns = next();
    break;
  case SAC_WIRE_SHARD_INFO:
    m->u.shard_info = (sac_wire_shard_info_t){below(3),         below(1000), below(1000),   next(), next(),
                                              below(20),        below(6),    (int)below(2), next(), next(),
                                              168.0 * below(2), next(),      next()};
    break;
  case SAC_WIRE_LEARNER_INFO:
    m->u.learner_info = (sac_wire_learner_info_t){below(3), below(3), next(), next()};
    break;
  default:
    break;
  }
}

static unsigned char enc[1 << 20], mut[1 << 20], re[1 << 20];

/* Decodes buf under limits variant v and prints the result. */
static void decode_line(sac_wire_decoder_t *d, const void *buf, size_t len, int v, const char *what) {
  sac_wire_limits_t lim = {0};
  if (v == 1)
    lim = (sac_wire_limits_t){.max_rows = 32, .max_env_id = 3, .max_layers = 3, .max_abs_value = 9.5f};
  if (v == 2)
    lim = (sac_wire_limits_t){.obs_dim = 5,
                              .act_dim = 2,
                              .max_layer_dim = 8,
                              .max_msg_bytes = 2000,
                              .accept_mask = SAC_WIRE_ACCEPT(SAC_WIRE_TRANSITIONS) |
                                             SAC_WIRE_ACCEPT(SAC_WIRE_SAMPLE_BATCH) |
                                             SAC_WIRE_ACCEPT(SAC_WIRE_WEIGHTS)};
  sac_wire_msg_t out;
  sac_wire_reason_t why = SAC_WIRE_R_NONE;
  int rc = sac_wire_decode(d, buf, len, &lim, &out, &why);
  size_t rlen = 0;
  int rrc = rc == 0 ? sac_wire_encode(&out, re, sizeof re, &rlen) : 1;
  printf("%s v%d rc %d reason %s type %d re %d %zu %016llx\n", what, v, rc, sac_wire_reason_name(why),
         (int)out.type, rrc, rlen, (unsigned long long)(rrc == 0 ? fnv(re, rlen) : 0));
}

int main(int argc, char **argv) {
  long count = argc > 1 ? atol(argv[1]) : 3000;
  sac_wire_decoder_t *d = sac_wire_decoder_new(1 << 20);
  if (!d)
    return 1;
  for (long i = 0; i < count; i++) {
    sac_wire_msg_t m;
    random_msg(&m);
    size_t len = 0, sz = sac_wire_encoded_size(&m);
    int rc = sac_wire_encode(&m, enc, sizeof enc, &len);
    printf("msg %ld type %d size %zu encode %d %zu %016llx\n", i, (int)m.type, sz, rc, len,
           (unsigned long long)(rc == 0 ? fnv(enc, len) : 0));
    if (rc)
      continue;
    for (int v = 0; v < 3; v++)
      decode_line(d, enc, len, v, "decode");
    for (int k = 0; k < 6; k++) { /* byte flips, a truncation, random bytes */
      size_t mlen = len;
      memcpy(mut, enc, len);
      if (k < 4 && len)
        mut[below((uint32_t)len)] ^= (unsigned char)(1u << below(8));
      else if (k == 4)
        mlen = below((uint32_t)len + 1);
      else
        for (size_t j = 0; j < mlen; j++)
          mut[j] = (unsigned char)next();
      decode_line(d, mut, mlen, (int)below(3), "mutant");
    }
  }
  sac_wire_decoder_destroy(&d);
  return 0;
}
