/* fp16 sample replies (--sample_precision fp16): the wire carries obs/action/next_obs as
 * IEEE binary16 while rewards, flags, weights and indices stay as they are; a shard
 * converts as it samples (storage stays fp32) and never sends Inf for a value beyond
 * fp16's range (it sends +-65504 and counts it); a peer that predates the field sees an
 * error, not garbage; the array conversions are bit-identical to the scalar ones. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/net.h"
#include "common/rng.h"
#include "common/wire.h"
#include "proto/sac.pb-c.h"
#include "replay/client.h"
#include "replay/server.h"
#include "replay/shard.h"
#include "tests/replay_testgen.h"

#define OD 5
#define AD 2
#define N 3

static unsigned char g_buf[1 << 16];

static size_t enc(const sac_wire_msg_t *m) {
  size_t len = 0;
  cr_assert_eq(sac_wire_encode(m, g_buf, sizeof g_buf, &len), 0);
  return len;
}

/* A batch of N rows; f16 buffers filled from the f32 ones when precision is fp16. */
typedef struct {
  float obs[N * OD], next[N * OD], act[N * AD], rew[N], term[N], w[N];
  uint16_t obs16[N * OD], next16[N * OD], act16[N * AD];
  uint64_t idx[N];
} rows_t;

static sac_wire_msg_t batch(rows_t *r, uint32_t precision) {
  for (int i = 0; i < N * OD; i++)
    r->obs[i] = 0.37f * (float)i - 2.0f, r->next[i] = -0.11f * (float)i;
  for (int i = 0; i < N * AD; i++)
    r->act[i] = (float)i / 7.0f - 1.0f;
  for (int i = 0; i < N; i++)
    r->rew[i] = 1.0f / 3.0f + (float)i, r->term[i] = (float)(i == 1), r->w[i] = 1.0f,
    r->idx[i] = SAC_WIRE_INDEX(2, i, 10 + i);
  sac_wire_f32_to_f16_n(r->obs, N * OD, r->obs16);
  sac_wire_f32_to_f16_n(r->next, N * OD, r->next16);
  sac_wire_f32_to_f16_n(r->act, N * AD, r->act16);
  sac_wire_msg_t m = {.type = SAC_WIRE_SAMPLE_BATCH};
  m.u.sample_batch = (sac_wire_sample_batch_t){.request_id = 9,
                                               .n = N,
                                               .obs_dim = OD,
                                               .act_dim = AD,
                                               .shard_id = 2,
                                               .reward = r->rew,
                                               .terminated = r->term,
                                               .indices = r->idx,
                                               .weights = r->w,
                                               .error = "",
                                               .precision = precision};
  sac_wire_sample_batch_t *b = &m.u.sample_batch;
  if (precision == SAC_WIRE_F16)
    b->obs16 = r->obs16, b->next_obs16 = r->next16, b->action16 = r->act16;
  else
    b->obs = r->obs, b->next_obs = r->next, b->action = r->act;
  return m;
}

Test(sample_f16, round_trip_halves_the_row_bytes_and_keeps_the_rest_exact) {
  sac_wire_decoder_t *d = sac_wire_decoder_new(1 << 16);
  rows_t r;
  sac_wire_msg_t m32 = batch(&r, SAC_WIRE_F32), m16 = batch(&r, SAC_WIRE_F16), o;
  size_t b32 = sac_wire_encoded_size(&m32), b16 = sac_wire_encoded_size(&m16);
  /* obs, next_obs, action: (2 * OD + AD) * N values, 2 bytes each fewer (the precision
   * field adds 2 bytes; a length prefix may shrink) */
  cr_assert(b32 - b16 >= (size_t)(2 * OD + AD) * N * 2 - 2, "fp32 %zu bytes, fp16 %zu", b32, b16);
  sac_wire_reason_t why;
  cr_assert_eq(sac_wire_decode(d, g_buf, enc(&m16), NULL, &o, &why), 0, "%s", sac_wire_reason_name(why));
  const sac_wire_sample_batch_t *b = &o.u.sample_batch;
  cr_assert_eq(b->precision, SAC_WIRE_F16);
  cr_assert(b->obs == NULL && b->action == NULL && b->next_obs == NULL, "one dtype per batch");
  cr_assert_eq(memcmp(b->obs16, r.obs16, sizeof r.obs16), 0);
  cr_assert_eq(memcmp(b->next_obs16, r.next16, sizeof r.next16), 0);
  cr_assert_eq(memcmp(b->action16, r.act16, sizeof r.act16), 0);
  cr_assert_eq(memcmp(b->reward, r.rew, sizeof r.rew), 0, "rewards stay fp32, bit for bit");
  cr_assert_eq(memcmp(b->indices, r.idx, sizeof r.idx), 0);
  cr_assert_eq(memcmp(b->terminated, r.term, sizeof r.term), 0);
  for (int i = 0; i < N * OD; i++) /* within fp16's half-ulp (2^-11 relative) */
    cr_assert(fabsf(sac_wire_f16_to_f32(b->obs16[i]) - r.obs[i]) <= fabsf(r.obs[i]) * 0x1p-11f, "obs %d", i);
  /* the fp32 batch decodes as before: precision 0, f32 views */
  cr_assert_eq(sac_wire_decode(d, g_buf, enc(&m32), NULL, &o, &why), 0);
  cr_assert(o.u.sample_batch.precision == SAC_WIRE_F32 && o.u.sample_batch.obs && !o.u.sample_batch.obs16);
  cr_assert_eq(memcmp(o.u.sample_batch.obs, r.obs, sizeof r.obs), 0);
  sac_wire_decoder_destroy(&d);
}

Test(sample_f16, request_carries_the_precision_and_an_unknown_one_is_refused) {
  sac_wire_decoder_t *d = sac_wire_decoder_new(1 << 16);
  sac_wire_msg_t m = {.type = SAC_WIRE_SAMPLE_REQUEST}, o;
  m.u.sample_request = (sac_wire_sample_request_t){5, 256, 0.4f, 100, SAC_WIRE_F16, 0};
  sac_wire_reason_t why;
  cr_assert_eq(sac_wire_decode(d, g_buf, enc(&m), NULL, &o, &why), 0);
  cr_assert_eq(o.u.sample_request.precision, SAC_WIRE_F16);
  /* a value this build does not know (a newer peer's dtype): a clear refusal */
  Sac__Envelope env = SAC__ENVELOPE__INIT;
  Sac__SampleRequest q = SAC__SAMPLE_REQUEST__INIT;
  q.request_id = 5, q.batch_size = 256, q.beta = 0.4f, q.precision = 7;
  env.protocol = SAC_PROTOCOL_VERSION, env.body_case = SAC__ENVELOPE__BODY_SAMPLE_REQUEST,
  env.sample_request = &q;
  size_t len = sac__envelope__pack(&env, g_buf);
  cr_assert_eq(sac_wire_decode(d, g_buf, len, NULL, &o, &why), SAC_EINVAL);
  cr_assert_eq(why, SAC_WIRE_R_VALUE);
  /* the encoder refuses to send one */
  rows_t r;
  sac_wire_msg_t b = batch(&r, SAC_WIRE_F16);
  b.u.sample_batch.precision = 7;
  size_t l2;
  cr_assert_eq(sac_wire_encode(&b, g_buf, sizeof g_buf, &l2), SAC_EINVAL);
  sac_wire_decoder_destroy(&d);
}

Test(sample_f16, a_nonfinite_half_is_refused) {
  sac_wire_decoder_t *d = sac_wire_decoder_new(1 << 16);
  rows_t r;
  sac_wire_msg_t m = batch(&r, SAC_WIRE_F16), o;
  sac_wire_reason_t why;
  cr_assert_eq(sac_wire_decode(d, g_buf, enc(&m), NULL, &o, &why), 0, "control: the clean batch decodes");
  r.act16[3] = 0x7c00u; /* +Inf */
  cr_assert_eq(sac_wire_decode(d, g_buf, enc(&m), NULL, &o, &why), SAC_ENONFINITE);
  cr_assert_eq(why, SAC_WIRE_R_NONFINITE);
  r.act16[3] = 0;
  r.next16[0] = 0x7e00u; /* NaN */
  cr_assert_eq(sac_wire_decode(d, g_buf, enc(&m), NULL, &o, &why), SAC_ENONFINITE);
  sac_wire_decoder_destroy(&d);
}

/* Mixed peers. A learner that predates fp16 never asks for it, but were an fp16 reply to
 * reach it, its decoder (which knows no precision field) would see obs bytes of half the
 * declared length: a LENGTH refusal, never fp16 bits read as floats. A new learner whose
 * request reaches an old shard gets an f32 reply (precision 0), which it takes as f32. */
Test(sample_f16, an_old_peer_gets_an_error_not_garbage) {
  sac_wire_decoder_t *d = sac_wire_decoder_new(1 << 16);
  rows_t r;
  sac_wire_msg_t m = batch(&r, SAC_WIRE_F16), o;
  size_t len = enc(&m);
  /* the old learner's view: the same message without the field it does not know */
  Sac__Envelope *env = sac__envelope__unpack(NULL, len, g_buf);
  cr_assert_not_null(env);
  cr_assert_eq(env->sample_batch->precision, 1u);
  env->sample_batch->precision = 0;
  size_t old_len = sac__envelope__pack(env, g_buf);
  sac__envelope__free_unpacked(env, NULL);
  sac_wire_reason_t why;
  cr_assert_eq(sac_wire_decode(d, g_buf, old_len, NULL, &o, &why), SAC_EINVAL);
  cr_assert_eq(why, SAC_WIRE_R_LENGTH, "got %s", sac_wire_reason_name(why));
  /* an old shard's reply to an fp16 request: f32, decoded as f32 */
  m = batch(&r, SAC_WIRE_F32);
  cr_assert_eq(sac_wire_decode(d, g_buf, enc(&m), NULL, &o, &why), 0);
  cr_assert(o.u.sample_batch.precision == SAC_WIRE_F32 && o.u.sample_batch.obs[4] == r.obs[4]);
  sac_wire_decoder_destroy(&d);
}

Test(sample_f16, array_conversions_match_the_scalar_ones_and_clamp_out_of_range) {
  enum { M = 1000 };
  static float in[M], back[M], back1[M];
  static uint16_t h[M], h1[M];
  sac_rng_t rng;
  sac_rng_init(&rng, 3, 0);
  size_t expect_clamped = 0;
  for (int i = 0; i < M; i++) {
    float u = (float)sac_rng_u32(&rng) / 4294967296.0f;
    /* magnitudes from fp16's subnormals (2^-24) to beyond its range (2^20) */
    in[i] = (u - 0.5f) * exp2f((float)(i % 45) - 24.0f);
    if (i % 97 == 0)
      in[i] = i % 2 ? 65504.0f : -65519.0f; /* the largest finite; and one that rounds to Inf */
    expect_clamped += fabsf(in[i]) > 65504.0f;
  }
  cr_assert(expect_clamped > 0);
  /* odd length: the tail after the last full vector is converted too */
  size_t clamped = sac_wire_f32_to_f16_n(in, M - 3, h);
  size_t want = 0;
  for (int i = 0; i < M - 3; i++) {
    float x = fabsf(in[i]) > 65504.0f ? copysignf(65504.0f, in[i]) : in[i];
    want += fabsf(in[i]) > 65504.0f;
    h1[i] = sac_wire_f32_to_f16(x, 0);
    cr_assert_eq(h[i], h1[i], "value %d (%g): 0x%04x, scalar 0x%04x", i, (double)in[i], h[i], h1[i]);
    cr_assert((h[i] & 0x7c00u) != 0x7c00u, "value %d (%g) became Inf", i, (double)in[i]);
  }
  cr_assert_eq(clamped, want);
  sac_wire_f16_to_f32_n(h, M - 3, back);
  for (int i = 0; i < M - 3; i++) {
    back1[i] = sac_wire_f16_to_f32(h[i]);
    cr_assert_eq(memcmp(&back[i], &back1[i], 4), 0, "value %d", i);
  }
  /* negative control: without saturation the scalar conversion does make Inf */
  cr_assert_eq(sac_wire_f32_to_f16(1e6f, 0), 0x7c00u);
}

/* Two shards fed the same rows with the same seed sample the same slots: the fp16 reply
 * is the fp32 one converted, with an out-of-range observation sent as 65504 and counted. */
Test(sample_f16, the_shard_converts_as_it_samples_and_clamps_with_a_count) {
  sac_replay_shard_config_t c;
  sac_replay_shard_config_default(&c);
  c.capacity = 65536, c.min_size = 1, c.obs_dim = 17, c.act_dim = 6;
  sac_replay_shard_t *a = sac_replay_shard_new(&c, NULL), *b = sac_replay_shard_new(&c, NULL);
  cr_assert(a && b);
  tg_t g;
  tg_init(&g, 1, 4, 17, 6, 50, 16);
  for (int k = 1; k <= 40; k++) {
    sac_wire_transitions_t v = *tg_next(&g);
    v.seq = (uint64_t)k;
    if (k == 3)
      ((float *)(uintptr_t)v.obs)[0] = 1e6f; /* beyond fp16's range: storage keeps it */
    sac_replay_insert_result_t r;
    cr_assert_eq(sac_replay_shard_insert(a, &v, &r), 0);
    cr_assert_eq(sac_replay_shard_insert(b, &v, &r), 0);
  }
  uint64_t seen_big = 0;
  for (int rep = 0; rep < 20; rep++) {
    sac_replay_sample_t s32, s16;
    cr_assert_eq(sac_replay_shard_sample_as(a, 256, 0.4f, SAC_WIRE_F32, &s32), 0);
    cr_assert_eq(sac_replay_shard_sample_as(b, 256, 0.4f, SAC_WIRE_F16, &s16), 0);
    cr_assert(s16.precision == SAC_WIRE_F16 && s16.obs16 && !s16.obs);
    cr_assert_eq(memcmp(s32.indices, s16.indices, 256 * 8), 0, "same slots");
    cr_assert_eq(memcmp(s32.reward, s16.reward, 256 * 4), 0, "rewards exact");
    for (int i = 0; i < 256 * 17; i++) {
      float x = s32.obs[i], y = sac_wire_f16_to_f32(s16.obs16[i]);
      seen_big += x > 65504.0f;
      cr_assert(fabsf(x) > 65504.0f ? y == copysignf(65504.0f, x)
                                    : y == sac_wire_f16_to_f32(sac_wire_f32_to_f16(x, 0)),
                "obs %d: %g sent as %g", i, (double)x, (double)y);
    }
    for (int i = 0; i < 256 * 17; i++) {
      float x = s32.next_obs[i];
      seen_big += x > 65504.0f;
      cr_assert_eq(sac_wire_f16_to_f32(s16.next_obs16[i]),
                   fabsf(x) > 65504.0f ? copysignf(65504.0f, x)
                                       : sac_wire_f16_to_f32(sac_wire_f32_to_f16(x, 0)));
    }
    for (int i = 0; i < 256 * 6; i++)
      cr_assert_eq(s16.action16[i], sac_wire_f32_to_f16(s32.action[i], 0));
  }
  sac_replay_shard_stats_t st;
  sac_replay_shard_stats(b, &st);
  cr_assert(seen_big > 0, "control: the big value was sampled as fp32");
  cr_assert_eq(st.sample_f16_clamped_total, seen_big, "every clamped value counted");
  sac_replay_shard_stats(a, &st);
  cr_assert_eq(st.sample_f16_clamped_total, 0, "fp32 samples clamp nothing");
  sac_replay_sample_t s;
  cr_assert_eq(sac_replay_shard_sample_as(a, 8, 0.4f, 5, &s), SAC_EINVAL, "unknown precision");
  sac_replay_shard_destroy(&a);
  sac_replay_shard_destroy(&b);
  tg_free(&g);
}

/* End to end over a shard server and the learner's client (inproc): rows sampled with
 * sample_precision fp16 arrive as f32 equal to the fp32 client's rows of the same slots
 * rounded through fp16, rewards exactly; and the client counts them as fp16 replies. */
static sac_replay_client_t *sampler(const char *ep, uint32_t precision, sac_net_ctx_t *ctx) {
  sac_replay_client_config_t cc;
  sac_replay_client_config_default(&cc);
  const char *eps[1] = {ep};
  cc.n_shards = 1, cc.sample_endpoints = eps, cc.ctx = ctx, cc.batch_size = 64, cc.obs_dim = 17,
  cc.act_dim = 6;
  cc.sample_precision = precision;
  return sac_replay_client_new(&cc);
}

Test(sample_f16, the_learner_client_converts_fp16_replies_back_to_f32) {
  sac_net_ctx_t *ctx = sac_net_ctx_new(1);
  sac_replay_server_config_t sc;
  sac_replay_server_config_default(&sc);
  sc.shard.capacity = 1 << 16, sc.shard.obs_dim = 17, sc.shard.act_dim = 6, sc.shard.min_size = 64;
  sc.durability = SAC_REPLAY_DURABILITY_NONE, sc.snapshot_interval_s = 0;
  snprintf(sc.insert_endpoint, sizeof sc.insert_endpoint, "inproc://f16-insert");
  snprintf(sc.sample_endpoint, sizeof sc.sample_endpoint, "inproc://f16-sample");
  int err = 0;
  sac_replay_server_t *srv = sac_replay_server_new(&sc, ctx, &err);
  cr_assert_not_null(srv);
  cr_assert_eq(sac_replay_server_start(srv), 0);
  sac_replay_client_config_t ic;
  sac_replay_client_config_default(&ic);
  const char *ieps[1] = {"inproc://f16-insert"};
  ic.n_shards = 1, ic.insert_endpoints = ieps, ic.ctx = ctx, ic.actor_id = 1;
  sac_replay_client_t *ins = sac_replay_client_new(&ic);
  cr_assert_not_null(ins);
  tg_t g;
  tg_init(&g, 1, 2, 17, 6, 50, 8);
  for (int k = 0; k < 12; k++) /* ~96 rows: a 64-row batch sees most slots again and again */
    cr_assert_eq(sac_replay_client_insert(ins, 0, tg_next(&g), 5000), 0);
  cr_assert_eq(sac_replay_client_flush(ins, 10000), 0);
  sac_replay_client_t *c32 = sampler("inproc://f16-sample", SAC_WIRE_F32, ctx),
                      *c16 = sampler("inproc://f16-sample", SAC_WIRE_F16, ctx);
  cr_assert(c32 && c16);
  enum { SLOTS = 4096 };
  static float obs[SLOTS][17], act[SLOTS][6], rew[SLOTS];
  static int have[SLOTS];
  for (int k = 0; k < 20; k++) { /* what each slot holds, from fp32 replies */
    sac_replay_batch_t b;
    cr_assert_eq(sac_replay_client_sample(c32, 5000, &b), 0);
    for (uint32_t i = 0; i < b.n; i++) {
      uint32_t s = SAC_WIRE_INDEX_SLOT(b.indices[i]);
      cr_assert_lt(s, SLOTS);
      memcpy(obs[s], b.obs + i * 17, sizeof obs[s]), memcpy(act[s], b.action + i * 6, sizeof act[s]);
      rew[s] = b.reward[i], have[s] = 1;
    }
  }
  int compared = 0;
  for (int k = 0; k < 20; k++) {
    sac_replay_batch_t b;
    cr_assert_eq(sac_replay_client_sample(c16, 5000, &b), 0);
    for (uint32_t i = 0; i < b.n; i++) {
      uint32_t s = SAC_WIRE_INDEX_SLOT(b.indices[i]);
      if (!have[s])
        continue;
      compared++;
      cr_assert_eq(b.reward[i], rew[s]);
      for (int j = 0; j < 17; j++)
        cr_assert_eq(b.obs[i * 17 + j], sac_wire_f16_to_f32(sac_wire_f32_to_f16(obs[s][j], 0)),
                     "slot %u obs %d", s, j);
      for (int j = 0; j < 6; j++)
        cr_assert_eq(b.action[i * 6 + j], sac_wire_f16_to_f32(sac_wire_f32_to_f16(act[s][j], 0)));
    }
  }
  cr_assert_gt(compared, 500, "only %d rows compared", compared);
  sac_replay_client_stats_t st;
  sac_replay_client_stats(c16, &st);
  cr_assert_eq(st.samples_f16, st.samples_received);
  cr_assert_eq(st.sample_precision_fallbacks, 0);
  sac_replay_client_stats(c32, &st);
  cr_assert_eq(st.samples_f16, 0, "control: fp32 replies are not counted as fp16");
  sac_replay_client_destroy(&c32);
  sac_replay_client_destroy(&c16);
  sac_replay_client_destroy(&ins);
  sac_replay_server_destroy(&srv);
  sac_net_ctx_destroy(&ctx);
  tg_free(&g);
}
