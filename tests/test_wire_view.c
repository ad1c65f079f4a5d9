/* Tests of common/wire_view: a SampleBatch read in place and copied once into the
 * learner's stage, checked as it is copied, gives the verdict and reason sac_wire_decode
 * gives the same bytes (the direct reader is a shortcut, never a second set of rules):
 * on valid batches (the copy equals the batch), on each kind of bad value, on replies the
 * reader hands back to the decoder (error replies, repeated fields, other bodies), and on
 * thousands of randomly spoilt encodings. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/rng.h"
#include "common/wire.h"
#include "common/wire_view.h"
#include "proto/sac.pb-c.h"

enum { N = 64, O = 17, A = 6, SHARD = 5 };

static sac_wire_decoder_t *g_dec;
static unsigned char g_buf[1 << 18], g_two[1 << 19];
static float s_obs[N * O], s_next[N * O], s_act[N * A], s_rew[N], s_term[N], s_w[N];
static uint64_t s_idx[N];
/* the stage the rows are copied into */
static float d_obs[N * O], d_next[N * O], d_act[N * A], d_rew[N], d_term[N], d_w[N];
static uint64_t d_idx[N];
static const sac_wire_sample_dst_t k_dst = {d_obs, d_next, d_act, d_rew, d_term, d_w, d_idx};
static int g_last_rc; /* the code of the last reply agree() saw the direct path take */
static const sac_wire_limits_t k_lim = {.max_msg_bytes = 1 << 18, .obs_dim = O, .act_dim = A, .max_rows = N};

static void setup(void) { g_dec = sac_wire_decoder_new(1 << 19); }
static void teardown(void) { sac_wire_decoder_destroy(&g_dec); }
TestSuite(wire_view, .init = setup, .fini = teardown);

static void fill(uint64_t seed) {
  sac_rng_t g;
  sac_rng_init(&g, seed, 0);
  for (int i = 0; i < N * O; i++)
    s_obs[i] = (float)sac_rng_uniform_range(&g, -10, 10),
    s_next[i] = (float)sac_rng_uniform_range(&g, -10, 10);
  for (int i = 0; i < N * A; i++)
    s_act[i] = (float)sac_rng_uniform_range(&g, -1, 1);
  for (int i = 0; i < N; i++) {
    s_rew[i] = (float)sac_rng_uniform_range(&g, -5, 5);
    s_term[i] = (float)(sac_rng_u32(&g) % 7 == 0);
    s_w[i] = (float)sac_rng_uniform_range(&g, 0.1, 1);
    s_idx[i] = SAC_WIRE_INDEX(SHARD, sac_rng_u32(&g), sac_rng_u32(&g));
  }
}

static size_t encode(void) {
  sac_wire_msg_t m = {.type = SAC_WIRE_SAMPLE_BATCH};
  m.u.sample_batch = (sac_wire_sample_batch_t){.request_id = 77,
                                               .n = N,
                                               .obs_dim = O,
                                               .act_dim = A,
                                               .shard_id = SHARD,
                                               .obs = s_obs,
                                               .action = s_act,
                                               .reward = s_rew,
                                               .terminated = s_term,
                                               .next_obs = s_next,
                                               .indices = s_idx,
                                               .weights = s_w,
                                               .error = ""};
  size_t len = 0;
  cr_assert_eq(sac_wire_encode(&m, g_buf, sizeof g_buf, &len), 0);
  return len;
}

/* The direct path on buf: 1 (handed back: SAC_EAGAIN), or the copy's code, with *why. */
static int direct(const void *buf, size_t len, const sac_wire_limits_t *lim, sac_wire_sample_view_t *v,
                  sac_wire_reason_t *why) {
  *why = SAC_WIRE_R_NONE;
  if (sac_wire_sample_view(buf, len, lim, v) != 0)
    return 1;
  return sac_wire_sample_copy(v, lim, &k_dst, why);
}

/* The direct path and the decoder agree on buf: same code and reason where the direct
 * path takes it, and then the same rows. Returns 1 when the direct path took it. */
static int agree(const void *buf, size_t len, const sac_wire_limits_t *lim, const char *what) {
  sac_wire_sample_view_t v;
  sac_wire_reason_t dwhy, why = SAC_WIRE_R_NONE;
  int drc = direct(buf, len, lim, &v, &dwhy);
  sac_wire_msg_t m;
  int rc = sac_wire_decode(g_dec, buf, len, lim, &m, &why);
  if (drc == 1)
    return 0;
  g_last_rc = drc;
  cr_assert_eq(drc, rc, "%s: direct %s (%s), decode %s (%s)", what, sac_strerror(drc),
               sac_wire_reason_name(dwhy), sac_strerror(rc), sac_wire_reason_name(why));
  cr_assert_eq(dwhy, why, "%s: direct reason %s, decode %s", what, sac_wire_reason_name(dwhy),
               sac_wire_reason_name(why));
  if (rc == 0) {
    const sac_wire_sample_batch_t *b = &m.u.sample_batch;
    cr_assert_eq(m.type, SAC_WIRE_SAMPLE_BATCH, "%s", what);
    cr_assert(v.n == b->n && v.obs_dim == b->obs_dim && v.act_dim == b->act_dim &&
                  v.shard_id == b->shard_id && v.request_id == b->request_id,
              "%s: header", what);
    const size_t n = b->n;
    cr_assert_eq(memcmp(d_obs, b->obs, n * b->obs_dim * 4), 0, "%s: obs", what);
    cr_assert_eq(memcmp(d_next, b->next_obs, n * b->obs_dim * 4), 0, "%s: next_obs", what);
    cr_assert_eq(memcmp(d_act, b->action, n * b->act_dim * 4), 0, "%s: action", what);
    cr_assert_eq(memcmp(d_rew, b->reward, n * 4), 0, "%s: reward", what);
    cr_assert_eq(memcmp(d_term, b->terminated, n * 4), 0, "%s: terminated", what);
    cr_assert_eq(memcmp(d_w, b->weights, n * 4), 0, "%s: weights", what);
    cr_assert_eq(memcmp(d_idx, b->indices, n * 8), 0, "%s: indices", what);
  }
  return 1;
}

Test(wire_view, a_valid_batch_is_copied_whole) {
  fill(1);
  size_t len = encode();
  memset(d_obs, 0xff, sizeof d_obs);
  sac_wire_sample_view_t v;
  sac_wire_reason_t why;
  cr_assert_eq(direct(g_buf, len, &k_lim, &v, &why), 0, "the common encoding takes the direct path");
  cr_assert_eq(memcmp(d_obs, s_obs, sizeof s_obs), 0);
  cr_assert_eq(memcmp(d_next, s_next, sizeof s_next), 0);
  cr_assert_eq(memcmp(d_act, s_act, sizeof s_act), 0);
  cr_assert_eq(memcmp(d_idx, s_idx, sizeof s_idx), 0);
  cr_assert_eq(v.request_id, 77);
  cr_assert_eq(agree(g_buf, len, &k_lim, "valid"), 1);
  /* unaligned in the message: the same rows from an odd address */
  memmove(g_two + 1, g_buf, len);
  cr_assert_eq(agree(g_two + 1, len, &k_lim, "valid, unaligned"), 1);
  /* a NULL array (uniform replay's weights) is checked and not stored */
  sac_wire_sample_dst_t no_w = k_dst;
  no_w.weights = NULL;
  memset(d_w, 0, sizeof d_w);
  cr_assert_eq(sac_wire_sample_copy(&v, &k_lim, &no_w, &why), 0);
  cr_assert_eq(d_w[0], 0.0f, "weights not stored");
  s_w[3] = NAN;
  len = encode();
  cr_assert_eq(sac_wire_sample_view(g_buf, len, &k_lim, &v), 0);
  cr_assert_eq(sac_wire_sample_copy(&v, &k_lim, &no_w, &why), SAC_ENONFINITE,
               "weights not stored, still checked");
}

/* Each bad value, where decode rejects it: the direct path rejects it with the same code
 * and reason, wherever in the batch it is. */
Test(wire_view, each_bad_value_as_decode) {
  sac_wire_limits_t ranged = k_lim;
  ranged.max_abs_value = 9.5f;
  struct {
    float *where;
    size_t count;
    float value;
    const char *what;
  } bad[] = {{s_obs, N * O, NAN, "NaN obs"},
             {s_next, N * O, INFINITY, "Inf next_obs"},
             {s_act, N * A, -INFINITY, "-Inf action"},
             {s_rew, N, NAN, "NaN reward"},
             {s_w, N, INFINITY, "Inf weight"},
             {s_w, N, -0.5f, "negative weight"},
             {s_term, N, 0.5f, "terminated 0.5"},
             {s_term, N, NAN, "NaN terminated"},
             {s_obs, N * O, 1e6f, "obs over the range"}};
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++)
    for (int pos = 0; pos < 3; pos++) {
      fill(10 + k);
      size_t at = pos == 0 ? 0 : pos == 1 ? bad[k].count / 2 : bad[k].count - 1;
      bad[k].where[at] = bad[k].value;
      size_t len = encode();
      sac_wire_msg_t m;
      int rc = sac_wire_decode(g_dec, g_buf, len, &ranged, &m, NULL);
      cr_assert_neq(rc, 0, "%s: decode rejects it (control)", bad[k].what);
      cr_assert_eq(agree(g_buf, len, &ranged, bad[k].what), 1, "%s: taken by the direct path", bad[k].what);
    }
  /* an index of another shard, two bad things in one reply (decode's order decides) */
  fill(30);
  s_idx[N - 1] = SAC_WIRE_INDEX(SHARD + 1, 0, 0);
  cr_assert_eq(agree(g_buf, encode(), &k_lim, "index of another shard"), 1);
  s_term[N - 2] = 2.0f;
  cr_assert_eq(agree(g_buf, encode(), &k_lim, "bad flag before a bad index"), 1);
  s_obs[N * O - 1] = NAN;
  cr_assert_eq(agree(g_buf, encode(), &k_lim, "NaN besides bad rows"), 1);
}

/* What the reader hands back to the decoder rather than guess. */
Test(wire_view, other_replies_go_to_the_decoder) {
  sac_wire_sample_view_t v;
  fill(2);
  size_t len = encode();
  /* the same envelope twice: protobuf merges repeated fields; decode does, the reader does not */
  memcpy(g_two, g_buf, len);
  memcpy(g_two + len, g_buf, len);
  cr_assert_eq(sac_wire_sample_view(g_two, 2 * len, &k_lim, &v), SAC_EAGAIN, "a repeated field");
  /* an error reply */
  sac_wire_msg_t m = {.type = SAC_WIRE_SAMPLE_BATCH};
  m.u.sample_batch =
      (sac_wire_sample_batch_t){.request_id = 3, .shard_id = 1, .error = "rate limiter timeout"};
  size_t elen = 0;
  cr_assert_eq(sac_wire_encode(&m, g_buf, sizeof g_buf, &elen), 0);
  cr_assert_eq(sac_wire_sample_view(g_buf, elen, &k_lim, &v), SAC_EAGAIN, "an error reply");
  /* another body */
  m = (sac_wire_msg_t){.type = SAC_WIRE_HEARTBEAT};
  cr_assert_eq(sac_wire_encode(&m, g_buf, sizeof g_buf, &elen), 0);
  cr_assert_eq(sac_wire_sample_view(g_buf, elen, &k_lim, &v), SAC_EAGAIN, "a heartbeat");
  /* other sizes than the limits allow, more rows, a truncated reply, too long a one */
  fill(2);
  len = encode();
  sac_wire_limits_t other = k_lim;
  other.obs_dim = O + 1;
  cr_assert_eq(sac_wire_sample_view(g_buf, len, &other, &v), SAC_EAGAIN, "other obs_dim");
  other = k_lim;
  other.max_rows = N - 1;
  cr_assert_eq(sac_wire_sample_view(g_buf, len, &other, &v), SAC_EAGAIN, "over max_rows");
  cr_assert_eq(sac_wire_sample_view(g_buf, len - 1, &k_lim, &v), SAC_EAGAIN, "truncated");
  other = k_lim;
  other.max_msg_bytes = len - 1;
  cr_assert_eq(sac_wire_sample_view(g_buf, len, &other, &v), SAC_EAGAIN, "over max_msg_bytes");
  cr_assert_eq(sac_wire_sample_view(g_buf, len, &k_lim, &v), 0, "control: the whole reply is taken");
}

/* A reply that says its rows are fp16 (precision 1) is the decoder's to convert or refuse,
 * even with the f32 lengths (which the decoder refuses): never read as f32 rows */
Test(wire_view, fp16_replies_go_to_the_decoder) {
  fill(3);
  Sac__SampleBatch b = SAC__SAMPLE_BATCH__INIT;
  b.request_id = 5, b.n = N, b.obs_dim = O, b.act_dim = A, b.shard_id = SHARD;
  b.obs = (ProtobufCBinaryData){sizeof s_obs, (uint8_t *)s_obs};
  b.next_obs = (ProtobufCBinaryData){sizeof s_next, (uint8_t *)s_next};
  b.action = (ProtobufCBinaryData){sizeof s_act, (uint8_t *)s_act};
  b.reward = (ProtobufCBinaryData){sizeof s_rew, (uint8_t *)s_rew};
  b.terminated = (ProtobufCBinaryData){sizeof s_term, (uint8_t *)s_term};
  b.weights = (ProtobufCBinaryData){sizeof s_w, (uint8_t *)s_w};
  b.indices = (ProtobufCBinaryData){sizeof s_idx, (uint8_t *)s_idx};
  Sac__Envelope env = SAC__ENVELOPE__INIT;
  env.protocol = SAC_PROTOCOL_VERSION;
  env.body_case = SAC__ENVELOPE__BODY_SAMPLE_BATCH;
  env.sample_batch = &b;
  sac_wire_sample_view_t v;
  size_t len = sac__envelope__pack(&env, g_buf);
  cr_assert_eq(sac_wire_sample_view(g_buf, len, &k_lim, &v), 0, "control: precision 0 is read in place");
  b.precision = 1;
  len = sac__envelope__pack(&env, g_buf);
  cr_assert_eq(sac_wire_sample_view(g_buf, len, &k_lim, &v), SAC_EAGAIN, "precision 1 goes to the decoder");
  sac_wire_msg_t m;
  cr_assert_neq(sac_wire_decode(g_dec, g_buf, len, &k_lim, &m, NULL), 0, "which refuses f32 lengths");
}

/* Random spoilage: byte flips, truncations and insertions anywhere in a reply. Wherever
 * the direct path takes the bytes, it says what decode says; it takes the unspoilt ones
 * and a good share of the spoilt ones (the values' bytes). */
Test(wire_view, random_spoilage_agrees_with_decode) {
  sac_rng_t g;
  sac_rng_init(&g, 42, 0);
  int taken = 0, rejected = 0;
  for (int it = 0; it < 3000; it++) {
    fill(100 + (uint64_t)(it % 7));
    size_t len = encode();
    int kind = (int)(sac_rng_u32(&g) % 4);
    if (kind == 0) { /* a few random bytes */
      for (int f = 1 + (int)(sac_rng_u32(&g) % 3); f > 0; f--)
        g_buf[sac_rng_u32(&g) % len] = (unsigned char)sac_rng_u32(&g);
    } else if (kind == 1) { /* truncated */
      len = sac_rng_u32(&g) % len;
    } else if (kind == 2) { /* a float's exponent all ones: NaN or Inf somewhere */
      size_t at = 16 + sac_rng_u32(&g) % (len - 20);
      g_buf[at] |= 0x80, g_buf[at + 1] = 0x7f | (g_buf[at + 1] & 0x80);
    } else { /* a byte in the header (the first 24 bytes) */
      g_buf[sac_rng_u32(&g) % 24] ^= (unsigned char)(1u << (sac_rng_u32(&g) % 8));
    }
    if (agree(g_buf, len, &k_lim, "spoilt")) {
      taken++;
      rejected += g_last_rc != 0;
    }
  }
  cr_assert_gt(taken, 1000, "the direct path took %d of 3000 spoilt replies", taken);
  cr_assert_gt(rejected, 150, "and rejected %d of them, as decode did", rejected);
  cr_assert_gt(taken - rejected, 300, "and accepted %d, as decode did", taken - rejected);
}

/* The writer: a header laid out and written by sac_wire_sample_layout and
 * sac_wire_sample_put_header, with the arrays copied in at its offsets, is byte for byte
 * what sac_wire_encode makes of the same batch, for headers whose varints take 1 to 10
 * bytes (request ids, shard ids), zero fields left out, both precisions, one batch or four, and row counts
 * and sizes whose lengths cross varint widths. */
static void write_and_compare(uint64_t rid, uint32_t n, uint32_t od, uint32_t ad, uint32_t shard,
                              uint32_t prec, uint32_t batches) {
  static unsigned char arr[4][1 << 20], enc[1 << 22], put[1 << 22];
  sac_rng_t g;
  sac_rng_init(&g, rid ^ n ^ od, shard);
  for (int k = 0; k < 4; k++)
    for (size_t i = 0; i < sizeof arr[k]; i++)
      arr[k][i] = (unsigned char)sac_rng_u32(&g);
  const void *obs = arr[0], *act = arr[1], *next = arr[2];
  sac_wire_msg_t m = {.type = SAC_WIRE_SAMPLE_BATCH};
  m.u.sample_batch = (sac_wire_sample_batch_t){.request_id = rid,
                                               .n = n,
                                               .obs_dim = od,
                                               .act_dim = ad,
                                               .shard_id = shard,
                                               .obs = prec ? NULL : obs,
                                               .action = prec ? NULL : act,
                                               .next_obs = prec ? NULL : next,
                                               .obs16 = prec ? obs : NULL,
                                               .action16 = prec ? act : NULL,
                                               .next_obs16 = prec ? next : NULL,
                                               .reward = (const float *)(const void *)arr[3],
                                               .terminated = (const float *)(const void *)(arr[3] + 4 * n),
                                               .weights = (const float *)(const void *)(arr[3] + 8 * n),
                                               .indices = (const uint64_t *)(const void *)(arr[3] + 12 * n),
                                               .error = "",
                                               .precision = prec,
                                               .batches = batches};
  size_t len = 0;
  cr_assert_eq(sac_wire_encode(&m, enc, sizeof enc, &len), 0);
  sac_wire_sample_layout_t l;
  cr_assert_eq(sac_wire_sample_layout(&m.u.sample_batch, &l), 0);
  cr_assert_eq(l.len, len, "layout %zu bytes, encode %zu (rid %llu n %u dims %u %u shard %u prec %u)", l.len,
               len, (unsigned long long)rid, n, od, ad, shard, prec);
  memset(put, 0xa5, l.len);
  sac_wire_sample_put_header(put, &m.u.sample_batch, &l);
  const size_t es = prec ? 2 : 4;
  memcpy(put + l.obs, obs, (size_t)n * od * es);
  memcpy(put + l.action, act, (size_t)n * ad * es);
  memcpy(put + l.next_obs, next, (size_t)n * od * es);
  memcpy(put + l.reward, arr[3], 4 * (size_t)n);
  memcpy(put + l.terminated, arr[3] + 4 * n, 4 * (size_t)n);
  memcpy(put + l.weights, arr[3] + 8 * n, 4 * (size_t)n);
  memcpy(put + l.indices, arr[3] + 12 * n, 8 * (size_t)n);
  cr_assert(memcmp(put, enc, len) == 0, "bytes differ (rid %llu n %u dims %u %u shard %u prec %u)",
            (unsigned long long)rid, n, od, ad, shard, prec);
}

Test(wire_view, written_in_place_equals_encoded) {
  const uint64_t rids[] = {0, 1, 127, 128, 1ull << 35, UINT64_MAX};
  const uint32_t rows[] = {1, 2, 16, 256, 4096};
  const uint32_t dims[][2] = {{1, 1}, {3, 1}, {17, 6}, {376, 17}};
  for (size_t a = 0; a < sizeof rids / sizeof rids[0]; a++)
    for (size_t b = 0; b < sizeof rows / sizeof rows[0]; b++)
      for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++)
        for (uint32_t prec = 0; prec <= 1; prec++)
          for (uint32_t shard = 0; shard < 300; shard += 299) {
            if ((size_t)rows[b] * dims[d][0] * 4 > (1 << 20) / 2)
              continue;
            write_and_compare(rids[a], rows[b], dims[d][0], dims[d][1], shard, prec, 0);
            if (rows[b] % 4 == 0)
              write_and_compare(rids[a], rows[b], dims[d][0], dims[d][1], shard, prec, 4);
          }
  sac_wire_sample_layout_t l;
  sac_wire_sample_batch_t bad = {.n = 0, .obs_dim = 17, .act_dim = 6};
  cr_assert_eq(sac_wire_sample_layout(&bad, &l), SAC_EINVAL, "no rows: the error reply, not this encoding");
  bad = (sac_wire_sample_batch_t){.n = 4, .obs_dim = 17, .act_dim = 6, .precision = 2};
  cr_assert_eq(sac_wire_sample_layout(&bad, &l), SAC_EINVAL, "no such precision");
}
