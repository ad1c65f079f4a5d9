/* Tests of common/wire: every message type round-trips through encode and decode, and
 * every kind of bad input is rejected with the right code and reason (oversized,
 * random bytes, truncated protobuf, wrong version, no body, unexpected type, wrong
 * dimensions, lengths that do not match dimensions, NaN/Inf, zero or too many rows,
 * bad flags, env ids out of range, inconsistent episode ends and tails, bad sample
 * requests, priorities and weights) without crashing. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/rng.h"
#include "common/wire.h"
#include "proto/sac.pb-c.h"
#include "tests/replay_testgen.h"

static sac_wire_decoder_t *g_dec;
static unsigned char g_buf[1 << 20];

static void setup(void) { g_dec = sac_wire_decoder_new(1 << 20); }
static void teardown(void) { sac_wire_decoder_destroy(&g_dec); }

static size_t enc(const sac_wire_msg_t *m) {
  size_t len = 0;
  cr_assert_eq(sac_wire_encode(m, g_buf, sizeof g_buf, &len), 0);
  cr_assert_eq(len, sac_wire_encoded_size(m));
  return len;
}

static int dec(size_t len, const sac_wire_limits_t *lim, sac_wire_msg_t *out, sac_wire_reason_t *why) {
  return sac_wire_decode(g_dec, g_buf, len, lim, out, why);
}

/* Expects decode of g_buf[0..len) to fail with code and reason. */
static void expect_reject(size_t len, const sac_wire_limits_t *lim, int code, sac_wire_reason_t reason,
                          const char *what) {
  sac_wire_msg_t m;
  sac_wire_reason_t why = SAC_WIRE_R_NONE;
  int rc = dec(len, lim, &m, &why);
  cr_assert_eq(rc, code, "%s: got %s (%s), expected %s", what, sac_strerror(rc), sac_wire_reason_name(why),
               sac_strerror(code));
  cr_assert_eq(why, reason, "%s: reason %s, expected %s", what, sac_wire_reason_name(why),
               sac_wire_reason_name(reason));
}

static const sac_wire_limits_t k_lim = {
    .max_msg_bytes = 1 << 20, .obs_dim = 5, .act_dim = 2, .max_rows = 512};

/* ------------------------------------------------------------------ round trips */

TestSuite(wire, .init = setup, .fini = teardown);

Test(wire, transitions_round_trip) {
  tg_t g;
  tg_init(&g, 3, 4, 5, 2, 4, 6);
  sac_wire_msg_t m = {.type = SAC_WIRE_TRANSITIONS};
  m.u.transitions = *tg_next(&g);
  m.u.transitions.seq = 12;
  m.u.transitions.session = 0xabcdef;
  m.u.transitions.acked_through = 9;
  m.u.transitions.policy_version = 77;
  sac_wire_episode_t eps[2] = {{1, -12.5f, 4, 0}, {2, 3.0f, 5, 1}};
  m.u.transitions.n_episodes = 2;
  m.u.transitions.episodes = eps;
  size_t len = enc(&m);
  sac_wire_msg_t d;
  sac_wire_reason_t why;
  cr_assert_eq(dec(len, &k_lim, &d, &why), 0, "%s", sac_wire_reason_name(why));
  const sac_wire_transitions_t *a = &m.u.transitions, *b = &d.u.transitions;
  cr_assert_eq(d.type, SAC_WIRE_TRANSITIONS);
  cr_assert_eq(b->actor_id, 3);
  cr_assert_eq(b->seq, 12);
  cr_assert_eq(b->session, 0xabcdef);
  cr_assert_eq(b->acked_through, 9);
  cr_assert_eq(b->policy_version, 77);
  cr_assert_eq(b->n, a->n);
  cr_assert_eq(memcmp(b->obs, a->obs, a->n * 5 * 4), 0);
  cr_assert_eq(memcmp(b->action, a->action, a->n * 2 * 4), 0);
  cr_assert_eq(memcmp(b->env_ids, a->env_ids, a->n * 4), 0);
  cr_assert_eq(memcmp(b->terminated, a->terminated, a->n), 0);
  cr_assert_eq(memcmp(b->truncated, a->truncated, a->n), 0);
  cr_assert_eq(b->n_next, a->n_next);
  cr_assert_eq(b->n_tail, a->n_tail);
  cr_assert_eq(memcmp(b->next_obs, a->next_obs, a->n_next * 5 * 4), 0);
  cr_assert_eq(b->n_episodes, 2);
  cr_assert_eq(b->episodes[1].truncated, 1);
  cr_assert_eq(b->episodes[0].episode_return, -12.5f);
  tg_free(&g);
}

Test(wire, other_messages_round_trip) {
  sac_wire_msg_t m, d;
  sac_wire_reason_t why;
  m = (sac_wire_msg_t){.type = SAC_WIRE_ACK};
  m.u.ack = (sac_wire_ack_t){
      .acked_seq = 5, .seq = 6, .credit = 3, .stored = 64, .shard_id = 2, .duplicate = 1, .error = "x"};
  cr_assert_eq(dec(enc(&m), NULL, &d, &why), 0);
  cr_assert_eq(d.u.ack.acked_seq, 5);
  cr_assert_eq(d.u.ack.seq, 6);
  cr_assert_eq(d.u.ack.credit, 3);
  cr_assert_eq(d.u.ack.duplicate, 1);
  cr_assert_str_eq(d.u.ack.error, "x");

  m = (sac_wire_msg_t){.type = SAC_WIRE_SAMPLE_REQUEST};
  m.u.sample_request = (sac_wire_sample_request_t){42, 256, 0.4f, 100, SAC_WIRE_F32, 0};
  cr_assert_eq(dec(enc(&m), NULL, &d, &why), 0);
  cr_assert_eq(d.u.sample_request.batch_size, 256);
  cr_assert_eq(d.u.sample_request.beta, 0.4f);

  float obs[2 * 5], act[2 * 2], rew[2] = {1, 2}, term[2] = {0, 1}, w[2] = {1, 0.5f};
  for (int i = 0; i < 10; i++)
    obs[i] = (float)i;
  for (int i = 0; i < 4; i++)
    act[i] = (float)-i;
  uint64_t idx[2] = {SAC_WIRE_INDEX(7, 3, 100), SAC_WIRE_INDEX(7, 0xFFFFF, 0xFFFFFFFFu)};
  m = (sac_wire_msg_t){.type = SAC_WIRE_SAMPLE_BATCH};
  m.u.sample_batch = (sac_wire_sample_batch_t){.request_id = 42,
                                               .n = 2,
                                               .obs_dim = 5,
                                               .act_dim = 2,
                                               .shard_id = 7,
                                               .obs = obs,
                                               .action = act,
                                               .reward = rew,
                                               .terminated = term,
                                               .next_obs = obs,
                                               .indices = idx,
                                               .weights = w,
                                               .error = ""};
  cr_assert_eq(dec(enc(&m), &k_lim, &d, &why), 0, "%s", sac_wire_reason_name(why));
  cr_assert_eq(d.u.sample_batch.indices[1], idx[1]);
  cr_assert_eq(SAC_WIRE_INDEX_SHARD(d.u.sample_batch.indices[1]), 7);
  cr_assert_eq(SAC_WIRE_INDEX_GEN(d.u.sample_batch.indices[1]), 0xFFFFF);
  cr_assert_eq(SAC_WIRE_INDEX_SLOT(d.u.sample_batch.indices[1]), 0xFFFFFFFFu);
  cr_assert_eq(d.u.sample_batch.next_obs[9], 9.0f);

  float pr[2] = {0.5f, 0};
  m = (sac_wire_msg_t){.type = SAC_WIRE_PRIORITY_UPDATE};
  m.u.priority_update = (sac_wire_priority_update_t){2, idx, pr};
  cr_assert_eq(dec(enc(&m), NULL, &d, &why), 0);
  cr_assert_eq(d.u.priority_update.priorities[0], 0.5f);

  sac_wire_layer_t layers[2] = {{3, 4, 1}, {4, 1, 0}};
  float wdata[3 * 4 + 4 + 4 * 1 + 1];
  for (size_t i = 0; i < sizeof wdata / 4; i++)
    wdata[i] = (float)i * 0.1f;
  m = (sac_wire_msg_t){.type = SAC_WIRE_WEIGHTS};
  m.u.weights = (sac_wire_weights_t){9, SAC_WIRE_F32, 2, layers, wdata, sizeof wdata, 0, 800, 640, 3, 1};
  cr_assert_eq(dec(enc(&m), NULL, &d, &why), 0, "%s", sac_wire_reason_name(why));
  /* the run's budget travels with the weights (remote actors stop at total_steps) */
  cr_assert(d.u.weights.run_total_steps == 800 && d.u.weights.run_steps == 640 && d.u.weights.run_actors == 3 &&
            d.u.weights.run_over == 1);
  cr_assert_eq(d.u.weights.n_layers, 2);
  cr_assert_eq(d.u.weights.layers[1].n_in, 4);
  cr_assert_eq(d.u.weights.data_len, sizeof wdata);

  m = (sac_wire_msg_t){.type = SAC_WIRE_HELLO};
  m.u.hello = (sac_wire_hello_t){"actor", 3, 1234, "0.1.0"};
  cr_assert_eq(dec(enc(&m), NULL, &d, &why), 0);
  cr_assert_str_eq(d.u.hello.role, "actor");

  m = (sac_wire_msg_t){.type = SAC_WIRE_HEARTBEAT, .u.heartbeat_time_ns = 99};
  cr_assert_eq(dec(enc(&m), NULL, &d, &why), 0);
  cr_assert_eq(d.u.heartbeat_time_ns, 99);

  m = (sac_wire_msg_t){.type = SAC_WIRE_SHARD_INFO};
  m.u.shard_info =
      (sac_wire_shard_info_t){.shard_id = 1, .size = 10, .capacity = 20, .bytes_per_transition = 101.5,
                              .episodes_total = 7, .episode_return_sum = -1234.5, .incarnation = 42,
                              .min_size = 300, .actors = 2};
  cr_assert_eq(dec(enc(&m), NULL, &d, &why), 0);
  cr_assert_eq(d.u.shard_info.bytes_per_transition, 101.5);
  /* the actors' episodes (remote mode's result line) and what a learner's wait is told by */
  cr_assert(d.u.shard_info.episodes_total == 7 && d.u.shard_info.episode_return_sum == -1234.5 &&
            d.u.shard_info.incarnation == 42 && d.u.shard_info.min_size == 300 && d.u.shard_info.actors == 2);
  m.u.shard_info.episode_return_sum = NAN; /* a sum that is not finite is refused */
  cr_assert_neq(dec(enc(&m), NULL, &d, &why), 0);

  m = (sac_wire_msg_t){.type = SAC_WIRE_LEARNER_INFO};
  m.u.learner_info = (sac_wire_learner_info_t){1, 2, 3, 4};
  cr_assert_eq(dec(enc(&m), NULL, &d, &why), 0);

  m = (sac_wire_msg_t){.type = SAC_WIRE_INFO_REQUEST};
  cr_assert_eq(dec(enc(&m), NULL, &d, &why), 0);
  cr_assert_eq(d.type, SAC_WIRE_INFO_REQUEST);

  /* a buffer too small is refused without writing */
  unsigned char small[4] = {1, 2, 3, 4};
  size_t len;
  m = (sac_wire_msg_t){.type = SAC_WIRE_HELLO};
  m.u.hello = (sac_wire_hello_t){"learner", 1, 1, "x"};
  cr_assert_eq(sac_wire_encode(&m, small, sizeof small, &len), SAC_ETOOBIG);
  cr_assert_eq(small[0], 1);
}

/* ------------------------------------------------------------------ raw bad input */

Test(wire, oversized_random_truncated_and_versions) {
  /* a valid message, then the same bytes against a smaller limit */
  tg_t g;
  tg_init(&g, 1, 4, 5, 2, 4, 6);
  sac_wire_msg_t m = {.type = SAC_WIRE_TRANSITIONS};
  m.u.transitions = *tg_next(&g);
  size_t len = enc(&m);
  sac_wire_limits_t small = k_lim;
  small.max_msg_bytes = len - 1;
  expect_reject(len, &small, SAC_ETOOBIG, SAC_WIRE_R_TOO_BIG, "one byte over the maximum");
  /* every truncation of a valid message is rejected, never accepted as something else */
  for (size_t cut = 1; cut < len; cut += (cut < 64 ? 1 : 37)) {
    sac_wire_msg_t d;
    sac_wire_reason_t why;
    int rc = dec(cut, &k_lim, &d, &why);
    cr_assert_neq(rc, 0, "truncated to %zu bytes of %zu was accepted", cut, len);
    cr_assert_neq(why, SAC_WIRE_R_NONE);
  }
  /* random bytes: never a crash, almost always a rejection, never an unvalidated batch */
  sac_rng_t rng;
  sac_rng_init(&rng, 7, 1);
  int rejected = 0;
  for (int i = 0; i < 20000; i++) {
    size_t n = (size_t)sac_rng_below(&rng, 300);
    for (size_t j = 0; j < n; j++)
      g_buf[j] = (unsigned char)sac_rng_u32(&rng);
    sac_wire_msg_t d;
    sac_wire_reason_t why;
    if (dec(n, &k_lim, &d, &why) != 0)
      rejected++;
    else
      cr_assert_neq(d.type, SAC_WIRE_TRANSITIONS, "random bytes decoded as a valid batch");
  }
  cr_assert_gt(rejected, 19000);
  /* wrong protocol version, and an envelope without a body */
  Sac__Envelope env = SAC__ENVELOPE__INIT;
  Sac__Heartbeat hb = SAC__HEARTBEAT__INIT;
  env.protocol = SAC_PROTOCOL_VERSION + 1;
  env.body_case = SAC__ENVELOPE__BODY_HEARTBEAT;
  env.heartbeat = &hb;
  len = sac__envelope__pack(&env, g_buf);
  expect_reject(len, NULL, SAC_EVERSION, SAC_WIRE_R_VERSION, "protocol + 1");
  env.protocol = 0;
  len = sac__envelope__pack(&env, g_buf);
  expect_reject(len, NULL, SAC_EVERSION, SAC_WIRE_R_VERSION, "protocol 0 (field missing)");
  env.protocol = SAC_PROTOCOL_VERSION;
  env.body_case = SAC__ENVELOPE__BODY__NOT_SET;
  len = sac__envelope__pack(&env, g_buf);
  expect_reject(len, NULL, SAC_EPROTO, SAC_WIRE_R_NO_BODY, "no body");
  expect_reject(0, NULL, SAC_EVERSION, SAC_WIRE_R_VERSION, "empty message");
  /* a type this endpoint does not take */
  env.body_case = SAC__ENVELOPE__BODY_HEARTBEAT;
  len = sac__envelope__pack(&env, g_buf);
  sac_wire_limits_t only = {.accept_mask = SAC_WIRE_ACCEPT(SAC_WIRE_TRANSITIONS)};
  expect_reject(len, &only, SAC_EPROTO, SAC_WIRE_R_UNEXPECTED, "heartbeat on an insert-only endpoint");
  tg_free(&g);
}

/* A well-formed raw TransitionBatch with n rows of env 0..n-1, no episode ends, one
 * tail per env, whose fields a test then breaks. Arrays are static. */
static float r_obs[8 * 5], r_act[8 * 2], r_rew[8], r_next[8 * 5], r_tail[8 * 5];
static uint32_t r_env[8], r_rows[8], r_tenv[8];
static uint8_t r_term[8], r_trunc[8];

static void raw_batch(Sac__TransitionBatch *t, uint32_t n) {
  sac__transition_batch__init(t);
  for (uint32_t i = 0; i < 8; i++) {
    r_env[i] = i;
    r_tenv[i] = i;
    r_rows[i] = i;
    r_term[i] = r_trunc[i] = 0;
    r_rew[i] = 1.0f;
  }
  for (int i = 0; i < 40; i++)
    r_obs[i] = r_next[i] = r_tail[i] = 0.5f;
  for (int i = 0; i < 16; i++)
    r_act[i] = 0.1f;
  t->actor_id = 1;
  t->seq = 1;
  t->n = n;
  t->obs_dim = 5;
  t->act_dim = 2;
  t->env_ids = (ProtobufCBinaryData){n * 4, (uint8_t *)r_env};
  t->obs = (ProtobufCBinaryData){n * 20, (uint8_t *)r_obs};
  t->action = (ProtobufCBinaryData){n * 8, (uint8_t *)r_act};
  t->reward = (ProtobufCBinaryData){n * 4, (uint8_t *)r_rew};
  t->terminated = (ProtobufCBinaryData){n, r_term};
  t->truncated = (ProtobufCBinaryData){n, r_trunc};
  t->tail_env_ids = (ProtobufCBinaryData){n * 4, (uint8_t *)r_tenv};
  t->tail_obs = (ProtobufCBinaryData){n * 20, (uint8_t *)r_tail};
}

static size_t pack_batch(Sac__TransitionBatch *t) {
  Sac__Envelope env = SAC__ENVELOPE__INIT;
  env.protocol = SAC_PROTOCOL_VERSION;
  env.body_case = SAC__ENVELOPE__BODY_TRANSITIONS;
  env.transitions = t;
  return sac__envelope__pack(&env, g_buf);
}

Test(wire, transition_batch_bad_fields) {
  Sac__TransitionBatch t;
  sac_wire_msg_t d;
  sac_wire_reason_t why;
  raw_batch(&t, 4);
  cr_assert_eq(dec(pack_batch(&t), &k_lim, &d, &why), 0, "the base case is valid: %s",
               sac_wire_reason_name(why));

  raw_batch(&t, 4);
  t.obs_dim = 6;
  expect_reject(pack_batch(&t), &k_lim, SAC_EINVAL, SAC_WIRE_R_DIMS, "obs_dim differs from the shard's");
  raw_batch(&t, 4);
  t.act_dim = 0;
  expect_reject(pack_batch(&t), &k_lim, SAC_EINVAL, SAC_WIRE_R_DIMS, "act_dim 0");
  raw_batch(&t, 4);
  t.obs.len -= 4;
  expect_reject(pack_batch(&t), &k_lim, SAC_EINVAL, SAC_WIRE_R_LENGTH, "obs one float short");
  raw_batch(&t, 4);
  t.action.len += 1;
  expect_reject(pack_batch(&t), &k_lim, SAC_EINVAL, SAC_WIRE_R_LENGTH, "action one byte long");
  raw_batch(&t, 4);
  t.n = 5;
  expect_reject(pack_batch(&t), &k_lim, SAC_EINVAL, SAC_WIRE_R_LENGTH, "n says 5, arrays hold 4");
  raw_batch(&t, 4);
  t.reward.len = 0;
  t.reward.data = NULL;
  expect_reject(pack_batch(&t), &k_lim, SAC_EINVAL, SAC_WIRE_R_LENGTH, "reward missing");
  raw_batch(&t, 4);
  t.terminated.len = 3;
  expect_reject(pack_batch(&t), &k_lim, SAC_EINVAL, SAC_WIRE_R_LENGTH, "terminated short");
  raw_batch(&t, 4);
  t.next_obs_rows.len = 3;
  t.next_obs_rows.data = (uint8_t *)r_rows;
  expect_reject(pack_batch(&t), &k_lim, SAC_EINVAL, SAC_WIRE_R_LENGTH, "next_obs_rows not a multiple of 4");
  raw_batch(&t, 0);
  expect_reject(pack_batch(&t), &k_lim, SAC_EINVAL, SAC_WIRE_R_ROWS, "zero rows");
  raw_batch(&t, 4);
  sac_wire_limits_t l3 = k_lim;
  l3.max_rows = 3;
  expect_reject(pack_batch(&t), &l3, SAC_EINVAL, SAC_WIRE_R_ROWS, "more rows than allowed");
  raw_batch(&t, 4);
  t.seq = 0;
  expect_reject(pack_batch(&t), &k_lim, SAC_EINVAL, SAC_WIRE_R_WINDOW, "seq 0");

  float bad[] = {NAN, INFINITY, -INFINITY};
  for (int k = 0; k < 3; k++) {
    raw_batch(&t, 4);
    r_obs[7] = bad[k];
    expect_reject(pack_batch(&t), &k_lim, SAC_ENONFINITE, SAC_WIRE_R_NONFINITE, "non-finite obs");
    raw_batch(&t, 4);
    r_act[3] = bad[k];
    expect_reject(pack_batch(&t), &k_lim, SAC_ENONFINITE, SAC_WIRE_R_NONFINITE, "non-finite action");
    raw_batch(&t, 4);
    r_rew[2] = bad[k];
    expect_reject(pack_batch(&t), &k_lim, SAC_ENONFINITE, SAC_WIRE_R_NONFINITE, "non-finite reward");
    raw_batch(&t, 4);
    r_tail[19] = bad[k];
    expect_reject(pack_batch(&t), &k_lim, SAC_ENONFINITE, SAC_WIRE_R_NONFINITE, "non-finite tail obs");
  }
  raw_batch(&t, 4);
  r_trunc[1] = 2;
  expect_reject(pack_batch(&t), &k_lim, SAC_EINVAL, SAC_WIRE_R_FLAG, "truncated = 2");
  raw_batch(&t, 4);
  r_env[2] = 1u << 20;
  r_tenv[2] = 1u << 20;
  expect_reject(pack_batch(&t), &k_lim, SAC_EINVAL, SAC_WIRE_R_ENV_ID, "env id out of range");

  /* episode ends: row 1 terminated but not listed; listed but not ended; unsorted */
  raw_batch(&t, 4);
  r_term[1] = 1;
  t.tail_env_ids.len = 12;
  t.tail_obs.len = 60;
  r_tenv[1] = 3;
  expect_reject(pack_batch(&t), &k_lim, SAC_EINVAL, SAC_WIRE_R_EPISODE_ENDS, "ended row without next_obs");
  raw_batch(&t, 4);
  t.next_obs_rows = (ProtobufCBinaryData){4, (uint8_t *)&r_rows[2]};
  t.next_obs = (ProtobufCBinaryData){20, (uint8_t *)r_next};
  expect_reject(pack_batch(&t), &k_lim, SAC_EINVAL, SAC_WIRE_R_EPISODE_ENDS,
                "next_obs for a row that did not end");
  raw_batch(&t, 4);
  r_term[1] = r_trunc[2] = 1;
  uint32_t unsorted[2] = {2, 1};
  t.next_obs_rows = (ProtobufCBinaryData){8, (uint8_t *)unsorted};
  t.next_obs = (ProtobufCBinaryData){40, (uint8_t *)r_next};
  uint32_t tails2[2] = {0, 3};
  t.tail_env_ids = (ProtobufCBinaryData){8, (uint8_t *)tails2};
  t.tail_obs = (ProtobufCBinaryData){40, (uint8_t *)r_tail};
  expect_reject(pack_batch(&t), &k_lim, SAC_EINVAL, SAC_WIRE_R_EPISODE_ENDS, "next_obs rows out of order");
  unsorted[0] = 1;
  unsorted[1] = 2;
  cr_assert_eq(dec(pack_batch(&t), &k_lim, &d, &why), 0, "sorted, it is valid: %s",
               sac_wire_reason_name(why));
  raw_batch(&t, 4);
  t.next_obs_rows = (ProtobufCBinaryData){4, (uint8_t *)&r_rows[0]};
  r_term[0] = 1;
  t.next_obs = (ProtobufCBinaryData){24, (uint8_t *)r_next};
  expect_reject(pack_batch(&t), &k_lim, SAC_EINVAL, SAC_WIRE_R_LENGTH, "next_obs length not k x obs_dim");

  /* tails: missing for an open env, duplicated, for an env not in the batch */
  raw_batch(&t, 4);
  t.tail_env_ids.len = 12;
  t.tail_obs.len = 60;
  expect_reject(pack_batch(&t), &k_lim, SAC_EINVAL, SAC_WIRE_R_TAIL, "a tail missing");
  raw_batch(&t, 4);
  r_tenv[3] = 2;
  expect_reject(pack_batch(&t), &k_lim, SAC_EINVAL, SAC_WIRE_R_TAIL, "a tail twice");
  raw_batch(&t, 4);
  r_tenv[3] = 6;
  expect_reject(pack_batch(&t), &k_lim, SAC_EINVAL, SAC_WIRE_R_TAIL, "a tail for an env not in the batch");
  raw_batch(&t, 4);
  t.tail_obs.len = 76;
  expect_reject(pack_batch(&t), &k_lim, SAC_EINVAL, SAC_WIRE_R_LENGTH, "tail_obs length");

  /* episode statistics: non-finite return */
  raw_batch(&t, 4);
  Sac__EpisodeEnd ep = SAC__EPISODE_END__INIT, *eps[1] = {&ep};
  ep.episode_return = NAN;
  t.n_episodes = 1;
  t.episodes = eps;
  expect_reject(pack_batch(&t), &k_lim, SAC_ENONFINITE, SAC_WIRE_R_NONFINITE, "NaN episode return");
}

Test(wire, requests_priorities_weights_bad_fields) {
  sac_wire_msg_t m;
  m = (sac_wire_msg_t){.type = SAC_WIRE_SAMPLE_REQUEST};
  m.u.sample_request = (sac_wire_sample_request_t){1, 0, 0.4f, 10, SAC_WIRE_F32, 0};
  expect_reject(enc(&m), &k_lim, SAC_EINVAL, SAC_WIRE_R_ROWS, "batch 0");
  m.u.sample_request.batch_size = 513;
  expect_reject(enc(&m), &k_lim, SAC_EINVAL, SAC_WIRE_R_ROWS, "batch over max_rows");
  m.u.sample_request.batch_size = 256;
  m.u.sample_request.beta = NAN;
  expect_reject(enc(&m), &k_lim, SAC_ENONFINITE, SAC_WIRE_R_NONFINITE, "beta NaN");
  m.u.sample_request.beta = 1.5f;
  expect_reject(enc(&m), &k_lim, SAC_EINVAL, SAC_WIRE_R_VALUE, "beta > 1");

  uint64_t idx[2] = {1, 2};
  float pr[2] = {1.0f, -1.0f};
  m = (sac_wire_msg_t){.type = SAC_WIRE_PRIORITY_UPDATE};
  m.u.priority_update = (sac_wire_priority_update_t){2, idx, pr};
  expect_reject(enc(&m), &k_lim, SAC_EINVAL, SAC_WIRE_R_VALUE, "negative priority");
  pr[1] = INFINITY;
  expect_reject(enc(&m), &k_lim, SAC_ENONFINITE, SAC_WIRE_R_NONFINITE, "infinite priority");
  Sac__PriorityUpdate pu = SAC__PRIORITY_UPDATE__INIT;
  pu.n = 2;
  pu.indices = (ProtobufCBinaryData){12, (uint8_t *)idx};
  pu.priorities = (ProtobufCBinaryData){8, (uint8_t *)pr};
  Sac__Envelope env = SAC__ENVELOPE__INIT;
  env.protocol = SAC_PROTOCOL_VERSION;
  env.body_case = SAC__ENVELOPE__BODY_PRIORITY_UPDATE;
  env.priority_update = &pu;
  expect_reject(sac__envelope__pack(&env, g_buf), &k_lim, SAC_EINVAL, SAC_WIRE_R_LENGTH, "indices 1.5 x n");

  sac_wire_layer_t layers[2] = {{3, 4, 1}, {5, 1, 0}};
  float wd[64] = {0};
  m = (sac_wire_msg_t){.type = SAC_WIRE_WEIGHTS};
  m.u.weights = (sac_wire_weights_t){1, SAC_WIRE_F32, 2, layers, wd, (12 + 4 + 5 + 1) * 4, 0, 0, 0, 0, 0};
  expect_reject(enc(&m), NULL, SAC_EINVAL, SAC_WIRE_R_DIMS, "layer shapes do not chain");
  layers[1].n_in = 4;
  m.u.weights.data_len = (12 + 4 + 4 + 1) * 4 + 4;
  expect_reject(enc(&m), NULL, SAC_EINVAL, SAC_WIRE_R_LENGTH, "data longer than the layers");
  m.u.weights.data_len = (12 + 4 + 4 + 1) * 4;
  wd[5] = NAN;
  expect_reject(enc(&m), NULL, SAC_ENONFINITE, SAC_WIRE_R_NONFINITE, "NaN weight");
  wd[5] = 0;
  layers[0].activation = 7;
  expect_reject(enc(&m), NULL, SAC_EINVAL, SAC_WIRE_R_VALUE, "unknown activation");
  layers[0].activation = 1;
  m.u.weights.dtype = SAC_WIRE_I8;
  m.u.weights.data_len = 21;
  m.u.weights.scale = 0;
  expect_reject(enc(&m), NULL, SAC_EINVAL, SAC_WIRE_R_VALUE, "int8 without a scale");

  /* a sample batch whose indices name another shard, and one with a bad terminal */
  float obs[5] = {0}, act[2] = {0}, one[1] = {1}, half[1] = {0.5f};
  uint64_t ix[1] = {SAC_WIRE_INDEX(3, 0, 0)};
  m = (sac_wire_msg_t){.type = SAC_WIRE_SAMPLE_BATCH};
  m.u.sample_batch = (sac_wire_sample_batch_t){.n = 1,
                                               .obs_dim = 5,
                                               .act_dim = 2,
                                               .shard_id = 2,
                                               .obs = obs,
                                               .action = act,
                                               .reward = one,
                                               .terminated = one,
                                               .next_obs = obs,
                                               .indices = ix,
                                               .weights = one,
                                               .error = ""};
  expect_reject(enc(&m), &k_lim, SAC_EINVAL, SAC_WIRE_R_INDEX, "index of another shard");
  m.u.sample_batch.shard_id = 3;
  m.u.sample_batch.terminated = half;
  expect_reject(enc(&m), &k_lim, SAC_EINVAL, SAC_WIRE_R_FLAG, "terminated 0.5");

  m = (sac_wire_msg_t){.type = SAC_WIRE_HELLO};
  m.u.hello = (sac_wire_hello_t){"intruder", 1, 1, ""};
  expect_reject(enc(&m), NULL, SAC_EINVAL, SAC_WIRE_R_VALUE, "unknown role");
  m = (sac_wire_msg_t){.type = SAC_WIRE_LEARNER_INFO};
  m.u.learner_info = (sac_wire_learner_info_t){2, 2, 0, 0};
  expect_reject(enc(&m), NULL, SAC_EINVAL, SAC_WIRE_R_VALUE, "rank >= world");
}

Test(wire, validate_checks_views_before_sending) {
  tg_t g;
  tg_init(&g, 1, 2, 5, 2, 4, 3);
  sac_wire_msg_t m = {.type = SAC_WIRE_TRANSITIONS};
  m.u.transitions = *tg_next(&g);
  sac_wire_reason_t why;
  cr_assert_eq(sac_wire_validate(g_dec, &m, &k_lim, &why), 0);
  g.obs[3] = NAN;
  cr_assert_eq(sac_wire_validate(g_dec, &m, &k_lim, &why), SAC_ENONFINITE);
  cr_assert_eq(why, SAC_WIRE_R_NONFINITE);
  cr_assert_str_eq(sac_wire_reason_name(SAC_WIRE_R_TOO_BIG), "too_big");
  cr_assert_str_neq(sac_wire_reason_str(SAC_WIRE_R_TAIL), "unknown reason");
  tg_free(&g);
}
