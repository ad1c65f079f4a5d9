/* The learner's side of the sample protocol against a hostile or broken shard (issue 14,
 * defects 4, 8, 15 and 16). A fake shard (a ROUTER socket driven by the test) answers
 * the replay client's sample requests with whatever a test wants: a reply is returned to
 * the learner only when it is exactly what was asked (batch_size rows, the learner's
 * sizes, the request id of a request in flight on that connection); anything else is
 * refused and counted by kind. A shard of another environment, or one that refuses the
 * batch size, stops the client with SAC_ECONFIG and a line naming the shard.
 *
 * The service-level tests run sac_learner_run against a fake shard on 127.0.0.1 served
 * by a thread: one answering every request with 1 row (the learner ran 5,130 updates on
 * bytes past such replies before the fix; now it must do none and send no priority
 * update), one answering with rewards of 3e38 (every update refused for its non-finite
 * loss, the learner stops with an error after --max_nonfinite_updates in a row, and
 * publishes no weights but the initial ones), and one of another observation size
 * (stops with SAC_ECONFIG). Plus --shards endpoints with impossible ports. */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/metrics.h"
#include "common/net.h"
#include "common/wire.h"
#include "learner/service.h"
#include "replay/client.h"

#define OBS 3
#define ACT 1
#define BATCH 8

/* ------------------------------------------------------------------ the fake shard */

typedef enum {
  ANSWER_GOOD,      /* exactly what was asked */
  ANSWER_ONE_ROW,   /* 1 row whatever was asked */
  ANSWER_WRONG_ID,  /* a good batch with a request id never sent */
  ANSWER_DIMS,      /* a good batch of obs_dim OBS + 2 */
  ANSWER_DIMS_ERR,  /* an error reply ("replay is empty") carrying obs_dim OBS + 2 */
  ANSWER_NAN,       /* NaN in obs */
  ANSWER_GARBAGE,   /* random bytes */
  ANSWER_TOO_BIG,   /* "batch_size over this shard's max_sample_batch" */
  ANSWER_HUGE,      /* a good batch with rewards of 3e38 */
  ANSWER_TWICE,     /* a good batch, then the same reply again */
  ANSWER_REFUSAL,   /* an error reply with request id 0, then a good batch */
  ANSWER_MULTI,     /* the request's batches of batch_size rows in one reply, batch j's obs[0] = j */
  ANSWER_MULTI_NAN, /* as ANSWER_MULTI with a NaN in the third batch */
  ANSWER_MULTI_BAD, /* 2 x batch_size rows that say 4 batches */
} answer_t;

typedef struct {
  sac_net_ctx_t *ctx;
  void *router;
  char ep[256];
  answer_t mode;
  uint32_t shard_id;
  unsigned char buf[1 << 20];
  unsigned char out[1 << 20];
  sac_wire_decoder_t *dec;
  /* what it sent and saw: indices (shard_id, generation 1, slot) with slots 0, 1, 2 ... */
  uint32_t next_slot;
  atomic_uint_fast64_t requests, priority_updates, foreign_priority_indices;
  atomic_uint_fast64_t priority_rows, priority_max_rows; /* rows in all, most in one message */
  uint64_t inserted;                                     /* ShardInfo.inserted_total */
  atomic_int stop;
} fake_t;

static void fake_open(fake_t *f, sac_net_ctx_t *ctx, const char *bind) {
  memset(f, 0, sizeof *f);
  f->ctx = ctx;
  sac_net_opts_t o;
  sac_net_opts_default(&o);
  f->router = sac_net_socket(ctx, SAC_NET_ROUTER, &o);
  cr_assert_not_null(f->router);
  cr_assert_eq(sac_net_bind(f->router, bind, f->ep, sizeof f->ep), 0);
  f->dec = sac_wire_decoder_new(1 << 20);
  f->shard_id = 3;
}

static void fake_close(fake_t *f) {
  sac_net_close(&f->router);
  sac_wire_decoder_destroy(&f->dec);
}

static void send_routed(fake_t *f, const unsigned char *id, size_t id_len, const sac_wire_msg_t *m) {
  size_t len = 0;
  cr_assert_eq(sac_wire_encode(m, f->out, sizeof f->out, &len), 0);
  sac_net_send(f->router, id, id_len, SAC_NET_SNDMORE);
  sac_net_send(f->router, f->out, len, 0);
}

/* A SampleBatch of n rows (obs size od) for request rid; with batches > 1, that many
 * batches of n / batches rows, batch j's first obs value j (and the third's NaN with
 * nan3). */
static void send_batches(fake_t *f, const unsigned char *id, size_t id_len, uint64_t rid, uint32_t n,
                         uint32_t od, float reward, float obs0, uint32_t batches, int nan3) {
  static float obs[4096 * 8], nobs[4096 * 8], act[4096], rew[4096], term[4096], w[4096];
  static uint64_t idx[4096];
  cr_assert_leq(n, 4096);
  for (uint32_t i = 0; i < n * od; i++)
    obs[i] = nobs[i] = 0.25f;
  obs[0] = obs0;
  for (uint32_t j = 1; batches > 1 && j < batches; j++)
    obs[(size_t)j * (n / batches) * od] = (float)j;
  if (nan3)
    obs[(size_t)2 * (n / batches) * od + 1] = NAN;
  for (uint32_t i = 0; i < n; i++) {
    act[i] = 0.5f, rew[i] = reward, term[i] = 0.0f, w[i] = 1.0f;
    idx[i] = SAC_WIRE_INDEX(f->shard_id, 1, f->next_slot++);
  }
  sac_wire_msg_t m = {.type = SAC_WIRE_SAMPLE_BATCH};
  m.u.sample_batch = (sac_wire_sample_batch_t){.request_id = rid,
                                               .n = n,
                                               .obs_dim = od,
                                               .act_dim = ACT,
                                               .shard_id = f->shard_id,
                                               .obs = obs,
                                               .action = act,
                                               .reward = rew,
                                               .terminated = term,
                                               .next_obs = nobs,
                                               .indices = idx,
                                               .weights = w,
                                               .error = "",
                                               .batches = batches > 1 ? batches : 0};
  send_routed(f, id, id_len, &m);
}

static void send_batch(fake_t *f, const unsigned char *id, size_t id_len, uint64_t rid, uint32_t n,
                       uint32_t od, float reward, float obs0) {
  send_batches(f, id, id_len, rid, n, od, reward, obs0, 0, 0);
}

static void send_error(fake_t *f, const unsigned char *id, size_t id_len, uint64_t rid, uint32_t od,
                       const char *error) {
  sac_wire_msg_t m = {.type = SAC_WIRE_SAMPLE_BATCH};
  m.u.sample_batch = (sac_wire_sample_batch_t){
      .request_id = rid, .obs_dim = od, .act_dim = ACT, .shard_id = f->shard_id, .error = error};
  send_routed(f, id, id_len, &m);
}

/* Serves what has arrived, for up to wait_ms: 1 if it answered something. */
static int fake_serve(fake_t *f, long wait_ms) {
  sac_net_pollitem_t it = {f->router, SAC_NET_POLLIN, 0};
  if (sac_net_poll(&it, 1, wait_ms) <= 0)
    return 0;
  int served = 0;
  for (;;) {
    unsigned char id[256];
    size_t id_len = 0, len = 0;
    int more = 0;
    if (sac_net_recv(f->router, id, sizeof id, SAC_NET_DONTWAIT, &id_len, &more) != 0)
      return served;
    if (!more || sac_net_recv(f->router, f->buf, sizeof f->buf, 0, &len, &more) != 0)
      continue;
    sac_wire_msg_t m;
    sac_wire_reason_t why;
    if (sac_wire_decode(f->dec, f->buf, len, NULL, &m, &why) != 0)
      continue;
    if (m.type == SAC_WIRE_INFO_REQUEST) {
      sac_wire_msg_t r = {.type = SAC_WIRE_SHARD_INFO};
      r.u.shard_info = (sac_wire_shard_info_t){.shard_id = f->shard_id,
                                               .size = 1000,
                                               .capacity = 100000,
                                               .inserted_total = f->inserted,
                                               .obs_dim = f->mode == ANSWER_DIMS ? OBS + 2 : OBS,
                                               .act_dim = ACT,
                                               .can_sample = 1};
      send_routed(f, id, id_len, &r);
      continue;
    }
    if (m.type == SAC_WIRE_PRIORITY_UPDATE) {
      atomic_fetch_add(&f->priority_updates, 1);
      atomic_fetch_add(&f->priority_rows, m.u.priority_update.n);
      if (m.u.priority_update.n > atomic_load(&f->priority_max_rows))
        atomic_store(&f->priority_max_rows, m.u.priority_update.n);
      for (uint32_t i = 0; i < m.u.priority_update.n; i++) {
        uint64_t x = m.u.priority_update.indices[i];
        if (SAC_WIRE_INDEX_SHARD(x) != f->shard_id || SAC_WIRE_INDEX_GEN(x) != 1 ||
            SAC_WIRE_INDEX_SLOT(x) >= f->next_slot)
          atomic_fetch_add(&f->foreign_priority_indices, 1);
      }
      continue;
    }
    if (m.type != SAC_WIRE_SAMPLE_REQUEST)
      continue;
    atomic_fetch_add(&f->requests, 1);
    uint64_t rid = m.u.sample_request.request_id;
    uint32_t want = m.u.sample_request.batch_size, nb = m.u.sample_request.batches;
    served = 1;
    switch (f->mode) {
    case ANSWER_GOOD:
      send_batch(f, id, id_len, rid, want, OBS, -1.0f, 0.25f);
      break;
    case ANSWER_ONE_ROW:
      send_batch(f, id, id_len, rid, 1, OBS, -1.0f, 0.25f);
      break;
    case ANSWER_WRONG_ID:
      send_batch(f, id, id_len, rid + 1000000, want, OBS, -1.0f, 0.25f);
      break;
    case ANSWER_DIMS:
      send_batch(f, id, id_len, rid, want, OBS + 2, -1.0f, 0.25f);
      break;
    case ANSWER_DIMS_ERR:
      send_error(f, id, id_len, rid, OBS + 2, "replay is empty");
      break;
    case ANSWER_NAN:
      send_batch(f, id, id_len, rid, want, OBS, -1.0f, NAN);
      break;
    case ANSWER_GARBAGE: {
      unsigned char junk[64];
      for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (unsigned char)(i * 37 + 11);
      sac_net_send(f->router, id, id_len, SAC_NET_SNDMORE);
      sac_net_send(f->router, junk, sizeof junk, 0);
      break;
    }
    case ANSWER_TOO_BIG:
      send_error(f, id, id_len, rid, OBS, "batch_size over this shard's max_sample_batch");
      break;
    case ANSWER_HUGE:
      send_batch(f, id, id_len, rid, want, OBS, 3e38f, 0.25f);
      break;
    case ANSWER_TWICE:
      send_batch(f, id, id_len, rid, want, OBS, -1.0f, 0.25f);
      send_batch(f, id, id_len, rid, want, OBS, -1.0f, 0.25f);
      break;
    case ANSWER_REFUSAL:
      send_error(f, id, id_len, 0, OBS, "not a decodable protobuf Envelope (random or truncated bytes)");
      send_batch(f, id, id_len, rid, want, OBS, -1.0f, 0.25f);
      break;
    case ANSWER_MULTI:
    case ANSWER_MULTI_NAN:
      send_batches(f, id, id_len, rid, want * (nb > 1 ? nb : 1), OBS, -1.0f, 0.0f, nb,
                   f->mode == ANSWER_MULTI_NAN);
      break;
    case ANSWER_MULTI_BAD:
      send_batches(f, id, id_len, rid, want * 2, OBS, -1.0f, 0.0f, 4, 0);
      break;
    }
  }
}

/* ------------------------------------------------------------------ client level */

typedef struct {
  sac_net_ctx_t *ctx;
  fake_t *f;
  sac_replay_client_t *c;
} rig_t;

static void rig_open_k(rig_t *r, answer_t mode, const char *name, uint32_t batches_per_request) {
  r->ctx = sac_net_ctx_new(1);
  r->f = malloc(sizeof *r->f);
  cr_assert(r->ctx && r->f);
  char ep[128];
  snprintf(ep, sizeof ep, "inproc://fake-shard-%s", name);
  fake_open(r->f, r->ctx, ep);
  r->f->mode = mode;
  sac_replay_client_config_t cc;
  sac_replay_client_config_default(&cc);
  const char *eps[1] = {r->f->ep};
  cc.n_shards = 1;
  cc.sample_endpoints = eps;
  cc.ctx = r->ctx;
  cc.batch_size = BATCH;
  cc.batches_per_request = batches_per_request;
  cc.prefetch = 1;
  cc.obs_dim = OBS;
  cc.act_dim = ACT;
  r->c = sac_replay_client_new(&cc);
  cr_assert_not_null(r->c);
}

static void rig_open(rig_t *r, answer_t mode, const char *name) { rig_open_k(r, mode, name, 1); }

static void rig_close(rig_t *r) {
  sac_replay_client_destroy(&r->c);
  fake_close(r->f);
  free(r->f);
  sac_net_ctx_destroy(&r->ctx);
}

/* One round: the client asks, the fake answers, the client reads (up to 300 ms). */
static int round_trip(rig_t *r, sac_replay_batch_t *b) {
  int rc = sac_replay_client_sample(r->c, 0, b);
  if (rc != SAC_ETIMEOUT)
    return rc;
  cr_assert(fake_serve(r->f, 1000), "the client sent no request");
  return sac_replay_client_sample(r->c, 300, b);
}

static sac_replay_client_stats_t stats_of(rig_t *r) {
  sac_replay_client_stats_t s;
  sac_replay_client_stats(r->c, &s);
  return s;
}

/* the control: a good shard's batch comes through */
Test(replies, exact_reply_accepted) {
  rig_t r;
  rig_open(&r, ANSWER_GOOD, "good");
  sac_replay_batch_t b;
  cr_assert_eq(round_trip(&r, &b), 0);
  cr_expect_eq(b.n, BATCH);
  cr_expect_eq(b.obs_dim, OBS);
  cr_expect_eq(stats_of(&r).rejected_replies, 0);
  rig_close(&r);
}

/* defect 4: 1 row where BATCH were asked for is refused and counted, then a good reply
 * from the same shard still comes through */
Test(replies, one_row_refused) {
  rig_t r;
  rig_open(&r, ANSWER_ONE_ROW, "one");
  sac_replay_batch_t b;
  for (int i = 0; i < 3; i++)
    cr_assert_eq(round_trip(&r, &b), SAC_ETIMEOUT, "a 1-row reply was returned as a batch");
  sac_replay_client_stats_t s = stats_of(&r);
  cr_expect_eq(s.rejected_by[SAC_WIRE_R_ROWS], 3);
  cr_expect_eq(s.samples_received, 0);
  r.f->mode = ANSWER_GOOD;
  cr_assert_eq(round_trip(&r, &b), 0);
  cr_expect_eq(b.n, BATCH);
  rig_close(&r);
}

Test(replies, unknown_request_id_refused) {
  rig_t r;
  rig_open(&r, ANSWER_WRONG_ID, "id");
  sac_replay_batch_t b;
  cr_assert_eq(round_trip(&r, &b), SAC_ETIMEOUT);
  cr_expect_eq(stats_of(&r).rejected_by[SAC_REPLAY_REJECT_REQUEST_ID], 1);
  cr_expect_str_eq(sac_replay_client_reject_name(SAC_REPLAY_REJECT_REQUEST_ID), "request_id");
  rig_close(&r);
}

/* the same reply twice: the second answers no request in flight */
Test(replies, duplicate_reply_refused) {
  rig_t r;
  rig_open(&r, ANSWER_TWICE, "twice");
  sac_replay_batch_t b;
  cr_assert_eq(round_trip(&r, &b), 0);
  cr_assert_eq(sac_replay_client_sample(r.c, 300, &b), SAC_ETIMEOUT);
  cr_expect_eq(stats_of(&r).rejected_by[SAC_REPLAY_REJECT_REQUEST_ID], 1);
  rig_close(&r);
}

/* a shard's refusal of something it could not read a request id from (request id 0) is
 * counted as such, not as a refused reply, and leaves the request in flight answered by
 * the batch that follows */
Test(replies, shard_refusal_counted_apart) {
  rig_t r;
  rig_open(&r, ANSWER_REFUSAL, "refusal");
  sac_replay_batch_t b;
  cr_assert_eq(round_trip(&r, &b), 0);
  cr_expect_eq(b.n, BATCH);
  sac_replay_client_stats_t s = stats_of(&r);
  cr_expect_eq(s.shard_refusals, 1);
  cr_expect_eq(s.rejected_replies, 0);
  rig_close(&r);
}

Test(replies, nonfinite_and_garbage_counted) {
  rig_t r;
  rig_open(&r, ANSWER_NAN, "nan");
  sac_replay_batch_t b;
  cr_assert_eq(round_trip(&r, &b), SAC_ETIMEOUT);
  cr_expect_eq(stats_of(&r).rejected_by[SAC_WIRE_R_NONFINITE], 1);
  sac_sleep_ns(20000000ull); /* past the 10 ms backoff after a refused reply */
  r.f->mode = ANSWER_GARBAGE;
  cr_assert_eq(round_trip(&r, &b), SAC_ETIMEOUT);
  sac_replay_client_stats_t s = stats_of(&r);
  cr_expect_eq(s.rejected_by[SAC_WIRE_R_MALFORMED], 1);
  cr_expect_eq(s.rejected_replies, 2);
  rig_close(&r);
}

/* ---- the direct path: replies copied straight into the learner's stage ---- */

static float g_st_obs[BATCH * OBS], g_st_next[BATCH * OBS], g_st_act[BATCH * ACT], g_st_rew[BATCH],
    g_st_term[BATCH], g_st_w[BATCH];
static const sac_replay_stage_t k_stage = {g_st_obs, g_st_next, g_st_act, g_st_rew, g_st_term, g_st_w};

/* round_trip, sampling into k_stage */
static int round_trip_into(rig_t *r, sac_replay_batch_t *b) {
  int rc = sac_replay_client_sample_into(r->c, 0, &k_stage, b);
  if (rc != SAC_ETIMEOUT)
    return rc;
  cr_assert(fake_serve(r->f, 1000), "the client sent no request");
  return sac_replay_client_sample_into(r->c, 300, &k_stage, b);
}

/* A good reply lands in the stage whole, read from the message directly (no decode) */
Test(replies, direct_reply_lands_in_the_stage) {
  rig_t r;
  rig_open(&r, ANSWER_GOOD, "direct-good");
  memset(g_st_obs, 0, sizeof g_st_obs);
  sac_replay_batch_t b;
  cr_assert_eq(round_trip_into(&r, &b), 0);
  cr_assert(b.n == BATCH && b.obs == g_st_obs && b.next_obs == g_st_next && b.weights == g_st_w,
            "the batch is the stage's");
  for (int i = 0; i < BATCH * OBS; i++)
    cr_assert(g_st_obs[i] == 0.25f && g_st_next[i] == 0.25f, "obs[%d] %g", i, g_st_obs[i]);
  for (int i = 0; i < BATCH; i++)
    cr_assert(g_st_act[i] == 0.5f && g_st_rew[i] == -1.0f && g_st_term[i] == 0.0f && g_st_w[i] == 1.0f);
  cr_assert_eq(SAC_WIRE_INDEX_SLOT(b.indices[BATCH - 1]), BATCH - 1);
  sac_replay_client_stats_t s = stats_of(&r);
  cr_expect_eq(s.samples_direct, 1, "read in place, not decoded");
  cr_expect_eq(s.samples_received, 1);
  rig_close(&r);
}

/* A spoilt reply refused on the direct path leaves no batch: refused and counted as the
 * decoding path counts it, nothing returned, and the next good reply overwrites every
 * value it wrote (obs[0] was NaN in the spoilt one) */
Test(replies, direct_bad_reply_leaves_no_batch) {
  rig_t r;
  rig_open(&r, ANSWER_NAN, "direct-nan");
  sac_replay_batch_t b;
  cr_assert_eq(round_trip_into(&r, &b), SAC_ETIMEOUT, "a NaN reply was returned as a batch");
  sac_replay_client_stats_t s = stats_of(&r);
  cr_expect_eq(s.rejected_by[SAC_WIRE_R_NONFINITE], 1);
  cr_expect_eq(s.samples_received, 0);
  sac_sleep_ns(20000000ull); /* past the 10 ms backoff after a refused reply */
  r.f->mode = ANSWER_GOOD;
  cr_assert_eq(round_trip_into(&r, &b), 0);
  cr_assert(g_st_obs[0] == 0.25f, "the good batch replaced the spoilt one's values: obs[0] %g", g_st_obs[0]);
  rig_close(&r);
}

/* Every kind of reply the decoding path refuses, the direct path refuses alike (same
 * counters, same result), and a shard of other sizes stops it alike */
Test(replies, direct_path_refuses_as_the_decoding_path) {
  const answer_t modes[] = {ANSWER_ONE_ROW, ANSWER_WRONG_ID, ANSWER_NAN,      ANSWER_GARBAGE, ANSWER_TWICE,
                            ANSWER_REFUSAL, ANSWER_DIMS,     ANSWER_DIMS_ERR, ANSWER_TOO_BIG};
  for (size_t k = 0; k < sizeof modes / sizeof modes[0]; k++) {
    sac_replay_client_stats_t st[2];
    int rc[2][2];
    for (int into = 0; into < 2; into++) {
      rig_t r;
      char name[64];
      snprintf(name, sizeof name, "direct-diff-%zu-%d", k, into);
      rig_open(&r, modes[k], name);
      sac_replay_batch_t b;
      rc[into][0] = into ? round_trip_into(&r, &b) : round_trip(&r, &b);
      rc[into][1] = into ? sac_replay_client_sample_into(r.c, 300, &k_stage, &b)
                         : sac_replay_client_sample(r.c, 300, &b);
      st[into] = stats_of(&r);
      rig_close(&r);
    }
    cr_assert(rc[0][0] == rc[1][0] && rc[0][1] == rc[1][1], "mode %zu: %s/%s decoding, %s/%s direct", k,
              sac_strerror(rc[0][0]), sac_strerror(rc[0][1]), sac_strerror(rc[1][0]), sac_strerror(rc[1][1]));
    cr_assert_eq(memcmp(st[0].rejected_by, st[1].rejected_by, sizeof st[0].rejected_by), 0, "mode %zu", k);
    cr_assert_eq(st[0].samples_received, st[1].samples_received, "mode %zu", k);
    cr_assert_eq(st[0].shard_refusals, st[1].shard_refusals, "mode %zu", k);
    cr_assert_eq(st[0].sample_errors, st[1].sample_errors, "mode %zu", k);
  }
}

/* ---- several batches a reply (batches_per_request) ---- */

/* One reply of 4 batches gives 4 samples in order, each of batch_size rows with its own
 * indices, on the decoding path and on the direct one (each batch copied into the stage
 * from the held message); the next reply is asked for once the first has arrived, and
 * its batches come after */
Test(replies, four_batches_a_reply_come_one_per_sample) {
  for (int into = 0; into < 2; into++) {
    rig_t r;
    rig_open_k(&r, ANSWER_MULTI, into ? "multi-direct" : "multi-decoded", 4);
    uint64_t last_slot = 0;
    for (int j = 0; j < 8; j++) {
      sac_replay_batch_t b;
      int rc = into ? round_trip_into(&r, &b) : round_trip(&r, &b);
      cr_assert_eq(rc, 0, "sample %d: %s", j, sac_strerror(rc));
      cr_assert_eq(b.n, BATCH);
      cr_assert_eq(b.obs[0], (float)(j % 4), "sample %d holds batch %g of its reply", j, (double)b.obs[0]);
      cr_assert(b.obs[1] == 0.25f && b.reward[BATCH - 1] == -1.0f);
      uint64_t first = SAC_WIRE_INDEX_SLOT(b.indices[0]);
      cr_assert(j == 0 || first == last_slot + 1, "sample %d starts at slot %llu after %llu", j,
                (unsigned long long)first, (unsigned long long)last_slot);
      last_slot = SAC_WIRE_INDEX_SLOT(b.indices[BATCH - 1]);
      cr_assert_eq(last_slot, first + BATCH - 1);
    }
    sac_replay_client_stats_t s = stats_of(&r);
    cr_expect_eq(s.samples_received, 8);
    cr_expect_eq(s.sample_replies, 2, "two replies of four");
    cr_expect_eq(atomic_load(&r.f->requests), 2, "one request per four batches");
    cr_expect_eq(s.samples_direct, into ? 8 : 0);
    cr_expect_eq(s.rejected_replies, 0);
    rig_close(&r);
  }
}

/* A shard that predates multi-batch replies answers a request for 4 with one batch: it
 * is returned as one, and counted */
Test(replies, one_batch_from_an_old_shard_is_taken_and_counted) {
  rig_t r;
  rig_open_k(&r, ANSWER_GOOD, "multi-old", 4);
  sac_replay_batch_t b;
  cr_assert_eq(round_trip(&r, &b), 0);
  cr_assert_eq(b.n, BATCH);
  cr_assert_eq(round_trip(&r, &b), 0, "and another from the next request");
  sac_replay_client_stats_t s = stats_of(&r);
  cr_expect_eq(s.sample_single_batch_replies, 2);
  cr_expect_eq(s.samples_received, 2);
  cr_expect_eq(s.rejected_replies, 0);
  rig_close(&r);
}

/* A bad value in the third batch of a reply, found as that batch is copied: the first two
 * were returned, the third is refused and counted, the fourth dropped with it; a reply
 * whose rows do not make the batches it claims is refused whole */
Test(replies, a_bad_batch_of_a_reply_is_refused_with_the_rest) {
  rig_t r;
  rig_open_k(&r, ANSWER_MULTI_NAN, "multi-nan", 4);
  sac_replay_batch_t b;
  cr_assert_eq(round_trip_into(&r, &b), 0);
  cr_assert_eq(b.obs[0], 0.0f);
  cr_assert_eq(sac_replay_client_sample_into(r.c, 0, &k_stage, &b), 0);
  cr_assert_eq(b.obs[0], 1.0f);
  cr_assert_eq(sac_replay_client_sample_into(r.c, 0, &k_stage, &b), SAC_ETIMEOUT,
               "the batch with a NaN was returned");
  sac_replay_client_stats_t s = stats_of(&r);
  cr_expect_eq(s.rejected_by[SAC_WIRE_R_NONFINITE], 1);
  cr_expect_eq(s.samples_received, 2);
  rig_close(&r);
  for (int into = 0; into < 2; into++) {
    rig_open_k(&r, ANSWER_MULTI_BAD, into ? "multi-bad-direct" : "multi-bad", 4);
    cr_assert_eq(into ? round_trip_into(&r, &b) : round_trip(&r, &b), SAC_ETIMEOUT);
    s = stats_of(&r);
    cr_expect_eq(s.rejected_by[SAC_WIRE_R_ROWS], 1, "2 x batch_size rows claiming 4 batches (%s)",
                 into ? "direct" : "decoded");
    cr_expect_eq(s.samples_received, 0);
    rig_close(&r);
  }
}

/* defect 16: a shard of another observation size stops the client, from a batch or from
 * an error reply alike, with a line naming the shard and both sizes */
Test(replies, other_dims_fatal) {
  answer_t modes[2] = {ANSWER_DIMS, ANSWER_DIMS_ERR};
  for (int i = 0; i < 2; i++) {
    rig_t r;
    rig_open(&r, modes[i], i ? "dims-err" : "dims");
    sac_replay_batch_t b;
    cr_assert_eq(round_trip(&r, &b), SAC_ECONFIG);
    const char *why = sac_replay_client_fatal(r.c);
    cr_expect(strstr(why, r.f->ep) && strstr(why, "size 5") && strstr(why, "size 3"), "%s", why);
    cr_expect_eq(stats_of(&r).rejected_by[SAC_WIRE_R_DIMS], 1);
    rig_close(&r);
  }
}

Test(replies, batch_over_shard_limit_fatal) {
  rig_t r;
  rig_open(&r, ANSWER_TOO_BIG, "toobig");
  sac_replay_batch_t b;
  cr_assert_eq(round_trip(&r, &b), SAC_ECONFIG);
  cr_expect(strstr(sac_replay_client_fatal(r.c), "max_sample_batch") != NULL);
  rig_close(&r);
}

/* ------------------------------------------------------------------ learner level */

static void *fake_thread(void *arg) {
  fake_t *f = arg;
  while (!atomic_load(&f->stop)) {
    fake_serve(f, 20);
    f->inserted = 1000; /* steps never reach total_steps: the learner runs until told */
  }
  return NULL;
}

typedef struct {
  sac_learner_cfg_t cfg;
  sac_learner_result_t res;
  atomic_int stop, done;
  int rc;
} run_t;

static void *learner_thread(void *arg) {
  run_t *r = arg;
  r->rc = sac_learner_run(&r->cfg, &r->stop, &r->res);
  atomic_store(&r->done, 1);
  return NULL;
}

/* Runs the learner against a fake shard in `mode` for up to run_s seconds (or until it
 * stops by itself); returns the run with its rc. */
static int g_publish_interval_ms = -1; /* >= 0: the runs' publish_interval_ms (else the default) */
static int g_loss_guard = 1;           /* run_learner's cfg.loss_guard */
static int64_t g_eval_every = 0;       /* run_learner's cfg.eval_every */

static run_t *run_learner(fake_t *f, answer_t mode, double run_s, int prioritized, sac_metrics_t *reg) {
  sac_net_ctx_t *ctx = sac_net_ctx_new(1);
  fake_open(f, ctx, "tcp://127.0.0.1:*");
  f->mode = mode;
  f->shard_id = 0;
  pthread_t ft, lt;
  cr_assert_eq(pthread_create(&ft, NULL, fake_thread, f), 0);
  run_t *r = calloc(1, sizeof *r);
  sac_learner_cfg_default(&r->cfg);
  r->cfg.hp.hidden = 16;
  r->cfg.hp.batch = BATCH;
  r->cfg.total_steps = 1000000;
  r->cfg.eval_episodes = 1;
  r->cfg.eval_every = g_eval_every;
  r->cfg.log_interval_s = 0;
  r->cfg.quiet = 1;
  r->cfg.threads = 1;
  r->cfg.prioritized = prioritized;
  r->cfg.max_nonfinite_updates = 20;
  r->cfg.loss_guard = g_loss_guard;
  r->cfg.metrics = reg;
  if (g_publish_interval_ms >= 0)
    r->cfg.publish_interval_ms = g_publish_interval_ms;
  snprintf(r->cfg.weights_endpoint, sizeof r->cfg.weights_endpoint, "inproc://weights");
  cr_assert_eq(sac_learner_set_shards(&r->cfg, f->ep), 0);
  cr_assert_eq(pthread_create(&lt, NULL, learner_thread, r), 0);
  /* the learner stops by itself in some tests: wait for that, or stop it at run_s */
  double t0 = sac_clock_s();
  while (sac_clock_s() - t0 < run_s && !atomic_load(&r->done))
    sac_sleep_ns(50000000ull);
  atomic_store(&r->stop, 1);
  pthread_join(lt, NULL);
  atomic_store(&f->stop, 1);
  pthread_join(ft, NULL);
  fake_close(f);
  sac_net_ctx_destroy(&ctx);
  return r;
}

static double metric_of(sac_metrics_t *reg, const char *needle) {
  char *text = NULL;
  size_t len = 0;
  cr_assert_eq(sac_metrics_render(reg, &text, &len), 0);
  const char *p = strstr(text, needle);
  double v = p ? strtod(p + strlen(needle), NULL) : -1.0;
  if (!p)
    cr_log_error("%s not in:\n%s", needle, text);
  free(text);
  return v;
}

/* defect 4: a shard answering every request with 1 row gets no update done on it and no
 * priority update for indices it never sent */
Test(learner, one_row_shard_gets_no_update, .timeout = 120) {
  fake_t *f = malloc(sizeof *f);
  sac_metrics_t *reg = sac_metrics_new();
  run_t *r = run_learner(f, ANSWER_ONE_ROW, 3.0, 1, reg);
  cr_assert_eq(r->rc, 0, "rc %d", r->rc);
  cr_assert_gt(atomic_load(&f->requests), 2, "the learner should keep asking");
  cr_expect_eq(r->res.updates, 0, "%lld updates on 1-row replies", (long long)r->res.updates);
  cr_expect_eq(atomic_load(&f->priority_updates), 0);
  double refused = metric_of(reg, "sac_learner_sample_replies_rejected_total{reason=\"rows\"} ");
  cr_expect_geq(refused, 2.0, "rows rejections counted: %g", refused);
  free(r);
  free(f);
  sac_metrics_destroy(&reg);
}

/* the control for the test above: a good shard gets updates, and every priority update
 * names indices it sent */
Test(learner, good_shard_gets_updates, .timeout = 120) {
  fake_t *f = malloc(sizeof *f);
  run_t *r = run_learner(f, ANSWER_GOOD, 3.0, 1, NULL);
  cr_assert_eq(r->rc, 0, "rc %d", r->rc);
  cr_expect_gt(r->res.updates, 0);
  cr_expect_gt(atomic_load(&f->priority_updates), 0);
  cr_expect_eq(atomic_load(&f->foreign_priority_indices), 0);
  free(r);
  free(f);
}

/* Priorities go back in batches of 4 updates (learner/service.c, docs/LEARNER.md): one
 * message per 4 updates with 4 x BATCH rows, none lost (all but the last few updates',
 * which the flush at the end sends, reached the shard) and none later than 5 updates */
Test(learner, priorities_go_back_four_updates_at_a_time, .timeout = 120) {
  fake_t *f = malloc(sizeof *f);
  run_t *r = run_learner(f, ANSWER_GOOD, 3.0, 1, NULL);
  cr_assert_eq(r->rc, 0, "rc %d", r->rc);
  const uint64_t u = (uint64_t)r->res.updates, rows = atomic_load(&f->priority_rows);
  const uint64_t msgs = atomic_load(&f->priority_updates);
  cr_log_info("%llu updates, %llu priority messages, %llu rows", (unsigned long long)u,
              (unsigned long long)msgs, (unsigned long long)rows);
  cr_assert_gt(u, 40, "updates %llu", (unsigned long long)u);
  cr_expect_eq(atomic_load(&f->priority_max_rows), 4 * BATCH, "4 updates' rows in one message");
  cr_expect_leq(msgs, u / 4 + 2, "one message per 4 updates (%llu for %llu)", (unsigned long long)msgs,
                (unsigned long long)u);
  cr_expect_leq(rows, u * BATCH, "no update's priorities twice");
  cr_expect_geq(rows, (u - 5) * BATCH, "every update's priorities but the last 5 reached the shard");
  cr_expect_eq(atomic_load(&f->foreign_priority_indices), 0);
  free(r);
  free(f);
}

/* The loop's per-stage profile (sac_learner_result_t.stage_seconds): every stage a run
 * of updates, priorities and broadcasts goes through has time, a stage it never enters
 * (dp_round without data-parallel ranks) has none, the stages of the loop account for
 * its wall time, and /metrics carries the same seconds under
 * sac_learner_stage_seconds_total{stage}. */
Test(learner, stage_profile_adds_up, .timeout = 120) {
  fake_t *f = malloc(sizeof *f);
  sac_metrics_t *reg = sac_metrics_new();
  run_t *r = run_learner(f, ANSWER_GOOD, 3.0, 1, reg);
  cr_assert_eq(r->rc, 0, "rc %d", r->rc);
  cr_assert_gt(r->res.updates, 20, "%lld updates", (long long)r->res.updates);
  const double *s = r->res.stage_seconds;
  const sac_learner_stage_t used[] = {SAC_LEARNER_STAGE_SAMPLE,  SAC_LEARNER_STAGE_STAGE,
                                      SAC_LEARNER_STAGE_UPDATE,  SAC_LEARNER_STAGE_PRIORITIES,
                                      SAC_LEARNER_STAGE_PUBLISH, SAC_LEARNER_STAGE_EVALUATE,
                                      SAC_LEARNER_STAGE_REPORT};
  for (size_t i = 0; i < sizeof used / sizeof used[0]; i++)
    cr_expect_gt(s[used[i]], 0.0, "stage %s: %g s", sac_learner_stage_name(used[i]), s[used[i]]);
  cr_expect_eq(s[SAC_LEARNER_STAGE_DP_ROUND], 0.0, "dp_round without data-parallel ranks: %g s",
               s[SAC_LEARNER_STAGE_DP_ROUND]);
  /* the final evaluation comes after the wall clock stops; everything else is inside it,
   * and the loop spends its time in its stages */
  double in_loop = 0;
  for (int k = 0; k < SAC_LEARNER_STAGES; k++)
    in_loop += k == SAC_LEARNER_STAGE_EVALUATE ? 0 : s[k];
  cr_expect_leq(in_loop, r->res.wall_seconds + 0.05, "stages %g s > wall %g s", in_loop, r->res.wall_seconds);
  cr_expect_geq(in_loop, 0.8 * r->res.wall_seconds, "stages %g s of wall %g s", in_loop, r->res.wall_seconds);
  for (int k = 0; k < SAC_LEARNER_STAGES; k++) {
    char needle[128];
    snprintf(needle, sizeof needle, "sac_learner_stage_seconds_total{stage=\"%s\"} ",
             sac_learner_stage_name((sac_learner_stage_t)k));
    double v = metric_of(reg, needle);
    cr_expect(fabs(v - s[k]) <= 1e-6 * (1.0 + s[k]), "%s: /metrics %g, result %g", needle, v, s[k]);
  }
  cr_expect_str_eq(sac_learner_stage_name(SAC_LEARNER_STAGES), "unknown");
  free(r);
  free(f);
  sac_metrics_destroy(&reg);
}

/* Broadcasts over a run of publish_interval_ms = ms against the good shard: its
 * updates, broadcasts (sac_learner_weights_broadcasts_total) and wall seconds. */
static void broadcasts_of(int ms, int64_t *updates, double *sent, double *wall) {
  fake_t *f = malloc(sizeof *f);
  sac_metrics_t *reg = sac_metrics_new();
  g_publish_interval_ms = ms;
  run_t *r = run_learner(f, ANSWER_GOOD, 3.0, 0, reg);
  g_publish_interval_ms = -1;
  cr_assert_eq(r->rc, 0, "rc %d", r->rc);
  *updates = r->res.updates;
  *sent = metric_of(reg, "\nsac_learner_weights_broadcasts_total ");
  *wall = r->res.wall_seconds;
  free(r);
  free(f);
  sac_metrics_destroy(&reg);
}

/* --publish_interval_ms bounds the broadcasts by time, whatever the update rate: at
 * 200 ms, a 3 s run at thousands of updates per second (hidden 16) sends at most one
 * broadcast per 200 ms (+ version 0 and the final one). The control, by count only
 * (publish_interval_ms 0), sends one per publish_every (10) updates: the same bound
 * fails there. */
Test(learner, publish_interval_bounds_broadcasts, .timeout = 120) {
  int64_t u;
  double sent, wall;
  broadcasts_of(200, &u, &sent, &wall);
  double bound = wall / 0.2 + 3;
  cr_expect_leq(sent, bound, "%g broadcasts in %.2f s at 200 ms", sent, wall);
  cr_expect_gt(u, 20 * (int64_t)sent, "the interval should bind: %lld updates, %g broadcasts", (long long)u,
               sent);
  broadcasts_of(0, &u, &sent, &wall);
  cr_expect_geq(sent, (double)(u / 10), "by count: %g broadcasts for %lld updates", sent, (long long)u);
  cr_expect_gt(sent, wall / 0.2 + 3, "the control should break the time bound: %g broadcasts in %.2f s", sent,
               wall);
}

/* defect 8: every update on rewards of 3e38 has a non-finite loss: skipped on the backend
 * (the loss guard), counted one update late, and after max_nonfinite_updates in a row the
 * learner stops with SAC_ENONFINITE: the 20th verdict (update 19's) is read when update
 * 20 is enqueued, so 20 updates were made, none applied */
Test(learner, huge_rewards_stop_the_learner, .timeout = 120) {
  fake_t *f = malloc(sizeof *f);
  sac_metrics_t *reg = sac_metrics_new();
  run_t *r = run_learner(f, ANSWER_HUGE, 30.0, 0, reg);
  cr_expect_eq(r->rc, SAC_ENONFINITE, "rc %d", r->rc);
  cr_expect_eq(r->res.updates, 20, "updates %lld", (long long)r->res.updates);
  cr_expect_eq(metric_of(reg, "\nsac_learner_nonfinite_updates_total "), 20.0);
  free(r);
  free(f);
  sac_metrics_destroy(&reg);
}

/* defect 16: a shard of another observation size stops the learner with SAC_ECONFIG */
Test(learner, other_dims_stop_the_learner, .timeout = 120) {
  fake_t *f = malloc(sizeof *f);
  run_t *r = run_learner(f, ANSWER_DIMS_ERR, 30.0, 0, NULL);
  cr_expect_eq(r->rc, SAC_ECONFIG, "rc %d", r->rc);
  free(r);
  free(f);
}

/* defect 15: ports a learner cannot connect to are refused when the list is read */
Test(learner, impossible_shard_ports_refused) {
  sac_learner_cfg_t c;
  sac_learner_cfg_default(&c);
  const char *bad[] = {"tcp://127.0.0.1:99999", "tcp://127.0.0.1:0",      "tcp://127.0.0.1:abc",
                       "tcp://127.0.0.1:",      "tcp://127.0.0.1",        "tcp://*:5561",
                       "udp://127.0.0.1:5561",  "tcp://a:1,tcp://b:70000"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    cr_expect_eq(sac_learner_set_shards(&c, bad[i]), SAC_ECONFIG, "%s accepted", bad[i]);
    cr_expect_eq(c.n_shards, 0);
  }
  cr_expect_eq(sac_learner_set_shards(&c, "tcp://replay0:5561, tcp://127.0.0.1:65535,ipc:///tmp/x"), 0);
  cr_expect_eq(c.n_shards, 3);
}

/* defect 15: a replay capacity the embedded shards cannot work with is refused naming
 * learner options only */
Test(learner, small_buffer_capacity_names_learner_options) {
  sac_learner_cfg_t c;
  sac_learner_cfg_default(&c);
  char why[512];
  c.buffer_capacity = 100;
  cr_expect_eq(sac_learner_check_cfg(&c, why, sizeof why), SAC_ECONFIG);
  cr_expect(strstr(why, "--capacity ") && strstr(why, "--embedded_shards") && !strstr(why, "max_batch_rows"),
            "%s", why);
  c.buffer_capacity = 1000000;
  c.hp.batch = 1 << 20;
  cr_expect_eq(sac_learner_check_cfg(&c, why, sizeof why), SAC_ECONFIG);
  cr_expect(strstr(why, "--batch_size 1048576") != NULL, "%s", why);
  c.hp.batch = 256;
  cr_expect_eq(sac_learner_check_cfg(&c, why, sizeof why), 0);
  c.learning_starts = 2000000;
  cr_expect_eq(sac_learner_check_cfg(&c, why, sizeof why), SAC_ECONFIG);
  cr_expect(strstr(why, "--learning_starts") != NULL, "%s", why);
  c.n_shards = 1; /* remote shards check their own capacity */
  cr_expect_eq(sac_learner_check_cfg(&c, why, sizeof why), 0);
}

/* The service loop's waits for the backend per update, from /metrics (the readings'
 * own left out): with the loss guard off or on, none — the guard's verdict is taken on
 * the backend inside the optimizer ops, and the statistics, the priorities and the
 * published policy are all read one update late. The control (run 2): an evaluation
 * after every update downloads the actor each time, and the count does see that wait. */
Test(learner, service_updates_never_wait_for_the_backend_guard_on_or_off, .timeout = 120) {
  for (int run = 0; run < 3; run++) {
    fake_t *f = malloc(sizeof *f);
    sac_metrics_t *reg = sac_metrics_new();
    const int guard = run > 0;
    g_loss_guard = guard;
    g_eval_every = run == 2 ? 1 : 0;
    run_t *r = run_learner(f, ANSWER_GOOD, 3.5, 1, reg);
    g_loss_guard = 1;
    g_eval_every = 0;
    cr_assert_eq(r->rc, 0, "rc %d", r->rc);
    cr_expect_gt(r->res.updates, 20, "updates %lld", (long long)r->res.updates);
    double waits = metric_of(reg, "\nsac_learner_blocking_syncs_per_update ");
    double launches = metric_of(reg, "\nsac_learner_launches_per_update ");
    cr_log_info("loss guard %d, eval_every %d: %lld updates, %g blocking syncs and %g launches per update",
                guard, run == 2, (long long)r->res.updates, waits, launches);
    if (run < 2)
      cr_expect_eq(waits, 0.0, "loss guard %d: %g blocking syncs per update", guard, waits);
    else
      cr_expect_geq(waits, 1.0, "control: an evaluation per update should wait (%g per update)", waits);
    cr_expect_gt(launches, 20.0);
    cr_expect_gt(f->priority_updates, 10, "priorities went back (%d)", (int)f->priority_updates);
    free(r);
    free(f);
    sac_metrics_destroy(&reg);
  }
}
