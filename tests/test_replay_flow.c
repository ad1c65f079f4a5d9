/* Flow-control tests of one replay shard server (in process, on tcp://127.0.0.1 ports it
 * picks), driven by raw DEALER sockets so each test controls sessions, sequence numbers
 * and resends exactly:
 *  - batches of a superseded client session (an actor restarted with the same id: the
 *    old process's queued messages and resends still arrive) are refused and never
 *    stored a second time;
 *  - while the rate limiter holds inserts back the server keeps reading its insert
 *    endpoint: it holds the batches in arrival order, drops resends of held batches,
 *    answers "busy" beyond its bounds, and stores and acknowledges the held ones in order
 *    as samples make room, each exactly once;
 *  - credit shares the rate limiter's room out among the actors.
 * Every wait is bounded. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/net.h"
#include "common/wire.h"
#include "replay/server.h"
#include "replay/shard.h"
#include "tests/replay_testgen.h"

/* ------------------------------------------------------------------ shard level */

static sac_replay_shard_config_t shard_config(void) {
  sac_replay_shard_config_t c;
  sac_replay_shard_config_default(&c);
  c.capacity = 4096;
  c.obs_dim = 5;
  c.act_dim = 2;
  c.min_size = 1;
  c.max_batch_rows = 256;
  c.max_sample_batch = 256;
  return c;
}

static int insert(sac_replay_shard_t *sh, tg_t *g, uint64_t session, uint64_t seq,
                  sac_replay_insert_result_t *r) {
  sac_wire_transitions_t v = *tg_next(g);
  v.session = session;
  v.seq = seq;
  return sac_replay_shard_insert(sh, &v, r);
}

Test(replay_flow, superseded_session_is_refused_not_stored_twice) {
  sac_replay_shard_config_t c = shard_config();
  int err = 0;
  sac_replay_shard_t *sh = sac_replay_shard_new(&c, &err);
  cr_assert_not_null(sh);
  tg_t old_g, new_g;
  tg_init(&old_g, 3, 2, 5, 2, 40, 5); /* actor 3, 10 rows per batch */
  tg_init(&new_g, 3, 2, 5, 2, 40, 5);
  sac_replay_insert_result_t r;
  for (uint64_t q = 1; q <= 3; q++)
    cr_assert_eq(insert(sh, &old_g, 1000, q, &r), 0);
  /* the actor restarts: a newer session starts over at seq 1 */
  cr_assert_eq(insert(sh, &new_g, 2000, 1, &r), 0);
  cr_assert_eq(r.kind, SAC_REPLAY_SEQ_NEW);
  cr_assert_eq(r.stored, 10);
  /* the old process's queued batch 4 and its resend of batch 2 arrive afterwards */
  cr_assert_eq(insert(sh, &old_g, 1000, 4, &r), SAC_EINVAL);
  cr_assert_eq(r.kind, SAC_REPLAY_SEQ_REJECT);
  cr_assert_eq(r.reason, SAC_WIRE_R_SESSION, "reason %s", sac_wire_reason_name(r.reason));
  cr_assert_eq(insert(sh, &old_g, 1000, 2, &r), SAC_EINVAL);
  cr_assert_eq(r.reason, SAC_WIRE_R_SESSION);
  /* the new session goes on, its window untouched by the old one's acked_through */
  cr_assert_eq(insert(sh, &new_g, 2000, 2, &r), 0);
  cr_assert_eq(r.acked_seq, 2);
  cr_assert_eq(insert(sh, &new_g, 2000, 2, &r), 0);
  cr_assert_eq(r.kind, SAC_REPLAY_SEQ_DUPLICATE);
  sac_replay_shard_stats_t st;
  sac_replay_shard_stats(sh, &st);
  cr_assert_eq(st.inserted_rows_total, 50, "stored %llu rows, want 3 + 2 batches of 10",
               (unsigned long long)st.inserted_rows_total);
  cr_assert_eq(st.acked_batches_lost_total, 0, "an older session must not count as acknowledged loss");
  tg_free(&old_g);
  tg_free(&new_g);
  sac_replay_shard_destroy(&sh);
}

Test(replay_flow, credit_shares_the_limiter_room_among_actors) {
  sac_replay_shard_config_t c = shard_config();
  c.min_size = 60;
  c.samples_per_insert = 1.0;
  c.error_buffer = 30.0; /* room for 90 transitions before inserts are held */
  int err = 0;
  sac_replay_shard_t *sh = sac_replay_shard_new(&c, &err);
  cr_assert_not_null(sh);
  tg_t ga, gb;
  tg_init(&ga, 1, 2, 5, 2, 40, 5); /* 10 rows per batch */
  tg_init(&gb, 2, 2, 5, 2, 40, 5);
  sac_replay_insert_result_t r;
  cr_assert_eq(insert(sh, &ga, 9, 1, &r), 0);
  /* room 80 rows = 8 batches, nothing granted to anyone else */
  cr_assert_eq(sac_replay_shard_credit(sh, 1, 10.0, 16, 0), 8);
  cr_assert_eq(insert(sh, &gb, 9, 1, &r), 0);
  /* room 70 = 7 batches, 8 of them promised to actor 1: actor 2 gets the minimum */
  cr_assert_eq(sac_replay_shard_credit(sh, 2, 10.0, 16, 0), 1);
  /* actor 1 again: room 70 = 7 batches less actor 2's 1 */
  cr_assert_eq(sac_replay_shard_credit(sh, 1, 10.0, 16, 0), 6);
  /* capped by max_credit, and 1 while holding */
  cr_assert_eq(sac_replay_shard_credit(sh, 1, 1.0, 16, 0), 16);
  cr_assert_eq(sac_replay_shard_credit(sh, 1, 10.0, 16, 1), 1);
  tg_free(&ga);
  tg_free(&gb);
  sac_replay_shard_destroy(&sh);
  /* no ratio: max_credit */
  c = shard_config();
  sh = sac_replay_shard_new(&c, &err);
  tg_init(&ga, 1, 2, 5, 2, 40, 5);
  cr_assert_eq(insert(sh, &ga, 9, 1, &r), 0);
  cr_assert_eq(sac_replay_shard_credit(sh, 1, 10.0, 16, 0), 16);
  tg_free(&ga);
  sac_replay_shard_destroy(&sh);
}

/* ------------------------------------------------------------------ server level */

typedef struct {
  sac_net_ctx_t *ctx;
  sac_replay_server_t *srv;
  void *ins, *smp;
  sac_wire_decoder_t *dec;
  unsigned char buf[1 << 16];
} rig_t;

static void rig_start(rig_t *k, uint32_t max_held) {
  memset(k, 0, sizeof *k);
  sac_replay_server_config_t c;
  sac_replay_server_config_default(&c);
  c.durability = SAC_REPLAY_DURABILITY_NONE; /* memory only: not what this test is about */
  c.shard = shard_config();
  /* spi 1, min_size 60, error buffer 30: inserts run ahead by at most 90 transitions,
   * so 9 batches of 10 are stored, then the limiter holds inserts until samples come */
  c.shard.min_size = 60;
  c.shard.samples_per_insert = 1.0;
  c.shard.error_buffer = 30.0;
  c.shard.max_batch_rows = 16;
  c.shard.max_sample_batch = 16;
  c.max_held_batches = max_held;
  snprintf(c.insert_endpoint, sizeof c.insert_endpoint, "tcp://127.0.0.1:*");
  snprintf(c.sample_endpoint, sizeof c.sample_endpoint, "tcp://127.0.0.1:*");
  c.snapshot_interval_s = 0;
  k->ctx = sac_net_ctx_new(1);
  int err = 0;
  k->srv = sac_replay_server_new(&c, k->ctx, &err);
  cr_assert_not_null(k->srv, "server: %s", sac_strerror(err));
  cr_assert_eq(sac_replay_server_start(k->srv), 0);
  k->ins = sac_net_socket(k->ctx, SAC_NET_DEALER, NULL);
  k->smp = sac_net_socket(k->ctx, SAC_NET_DEALER, NULL);
  cr_assert_eq(sac_net_connect(k->ins, sac_replay_server_insert_endpoint(k->srv)), 0);
  cr_assert_eq(sac_net_connect(k->smp, sac_replay_server_sample_endpoint(k->srv)), 0);
  k->dec = sac_wire_decoder_new(0);
}

static void rig_stop(rig_t *k) {
  sac_net_close(&k->ins);
  sac_net_close(&k->smp);
  sac_replay_server_stop(k->srv);
  cr_assert_eq(sac_replay_server_join(k->srv), 0);
  sac_replay_server_destroy(&k->srv);
  sac_wire_decoder_destroy(&k->dec);
  sac_net_ctx_destroy(&k->ctx);
}

/* Encoded batches 1..n of one actor and session, kept for resends (the generator
 * reuses its buffers). */
typedef struct {
  unsigned char bytes[16][2048];
  size_t len[16];
} batches_t;

static void make_batches(batches_t *b, uint32_t actor, uint64_t session, int n) {
  tg_t g;
  tg_init(&g, actor, 2, 5, 2, 40, 5); /* 10 rows per batch */
  for (int q = 1; q <= n; q++) {
    sac_wire_msg_t m = {.type = SAC_WIRE_TRANSITIONS};
    m.u.transitions = *tg_next(&g);
    m.u.transitions.session = session;
    m.u.transitions.seq = (uint64_t)q;
    cr_assert_eq(sac_wire_encode(&m, b->bytes[q], sizeof b->bytes[q], &b->len[q]), 0);
  }
  tg_free(&g);
}

static void send_batch(rig_t *k, const batches_t *b, int q) {
  cr_assert_eq(sac_net_send(k->ins, b->bytes[q], b->len[q], 0), 0);
}

/* The next ack within timeout_ms, or 0 when none came. */
static int recv_ack(rig_t *k, int timeout_ms, sac_wire_ack_t *a, char *err, size_t cap) {
  sac_net_pollitem_t it = {k->ins, SAC_NET_POLLIN, 0};
  if (sac_net_poll(&it, 1, timeout_ms) <= 0)
    return 0;
  size_t len = 0;
  cr_assert_eq(sac_net_recv(k->ins, k->buf, sizeof k->buf, 0, &len, NULL), 0);
  sac_wire_msg_t m;
  sac_wire_reason_t why;
  cr_assert_eq(sac_wire_decode(k->dec, k->buf, len, NULL, &m, &why), 0);
  cr_assert_eq(m.type, SAC_WIRE_ACK);
  *a = m.u.ack;
  snprintf(err, cap, "%s", a->error ? a->error : "");
  return 1;
}

static void sample(rig_t *k, uint64_t id, uint32_t n) {
  sac_wire_msg_t m = {.type = SAC_WIRE_SAMPLE_REQUEST};
  m.u.sample_request = (sac_wire_sample_request_t){id, n, 0.4f, 2000, SAC_WIRE_F32, 0};
  size_t len = 0;
  cr_assert_eq(sac_wire_encode(&m, k->buf, sizeof k->buf, &len), 0);
  cr_assert_eq(sac_net_send(k->smp, k->buf, len, 0), 0);
  sac_net_pollitem_t it = {k->smp, SAC_NET_POLLIN, 0};
  cr_assert_gt(sac_net_poll(&it, 1, 3000), 0, "no sample batch within 3 s");
  cr_assert_eq(sac_net_recv(k->smp, k->buf, sizeof k->buf, 0, &len, NULL), 0);
  sac_wire_msg_t r;
  cr_assert_eq(sac_wire_decode(k->dec, k->buf, len, NULL, &r, NULL), 0);
  cr_assert_eq(r.type, SAC_WIRE_SAMPLE_BATCH);
  cr_assert_eq(r.u.sample_batch.n, n, "sample error: %s", r.u.sample_batch.error);
}

static sac_replay_stats_t stats_when(rig_t *k, int (*ok)(const sac_replay_stats_t *), const char *what) {
  sac_replay_stats_t st;
  uint64_t end = sac_clock_ns() + 3000000000ull;
  for (;;) {
    sac_replay_server_stats(k->srv, &st);
    if (ok(&st))
      return st;
    cr_assert_lt(sac_clock_ns(), end, "timed out waiting for: %s", what);
    sac_sleep_ns(5000000);
  }
}

static int six_held(const sac_replay_stats_t *s) { return s->insert_held_batches == 6; }
static int dups_seen(const sac_replay_stats_t *s) { return s->held_duplicates_total == 3; }
static int rows_150(const sac_replay_stats_t *s) { return s->shard.inserted_rows_total >= 150; }

Test(replay_flow, held_inserts_are_read_deduplicated_and_stored_in_order, .timeout = 30) {
  rig_t k;
  rig_start(&k, 64);
  static batches_t b;
  make_batches(&b, 7, 42, 15);
  for (int q = 1; q <= 15; q++)
    send_batch(&k, &b, q);
  /* 9 stored and acknowledged at once; 6 held, unacknowledged */
  sac_wire_ack_t a;
  char err[128];
  uint64_t acked = 0;
  for (int i = 0; i < 9; i++) {
    cr_assert(recv_ack(&k, 3000, &a, err, sizeof err), "ack %d missing", i + 1);
    cr_assert_str_empty(err);
    cr_assert_eq(a.seq, (uint64_t)i + 1);
    /* credit shares the limiter's room out: (90 - 10 stored rows per batch) / 10 rows */
    uint32_t want = i + 1 < 9 ? (uint32_t)(9 - (i + 1)) : 1u;
    cr_assert_eq(a.credit, want < 1 ? 1u : want, "ack %d: credit %u, want %u", i + 1, a.credit, want);
    acked = a.acked_seq;
  }
  cr_assert_eq(acked, 9);
  sac_replay_stats_t st = stats_when(&k, six_held, "6 batches held");
  cr_assert_eq(st.insert_parked, 1);
  cr_assert(!recv_ack(&k, 300, &a, err, sizeof err), "a held batch was acknowledged (seq %llu)",
            (unsigned long long)a.seq);
  /* resends of held batches 10..12 (what a client's timed resend does) are read and dropped */
  for (int q = 10; q <= 12; q++)
    send_batch(&k, &b, q);
  st = stats_when(&k, dups_seen, "3 resends of held batches dropped");
  cr_assert_eq(st.insert_held_batches, 6);
  /* samples make room: the held batches are stored in order, each acknowledged once */
  for (int i = 0; i < 6; i++)
    sample(&k, (uint64_t)i + 1, 10);
  for (int q = 10; q <= 15; q++) {
    cr_assert(recv_ack(&k, 3000, &a, err, sizeof err), "ack of held batch %d missing", q);
    cr_assert_str_empty(err);
    cr_assert_eq(a.seq, (uint64_t)q, "held batches out of order: got %llu, want %d",
                 (unsigned long long)a.seq, q);
    cr_assert_eq(a.acked_seq, (uint64_t)q);
    cr_assert_eq(a.duplicate, 0);
  }
  cr_assert(!recv_ack(&k, 300, &a, err, sizeof err), "an extra ack (seq %llu): stored twice?",
            (unsigned long long)a.seq);
  st = stats_when(&k, rows_150, "150 rows stored");
  cr_assert_eq(st.insert_held_batches, 0);
  cr_assert_eq(st.shard.inserted_rows_total, 150, "stored %llu rows, want 15 batches x 10",
               (unsigned long long)st.shard.inserted_rows_total);
  cr_assert_eq(st.shard.duplicate_batches_total, 0);
  cr_assert_eq(st.insert_waits_total, 6);
  rig_stop(&k);
}

static int two_held(const sac_replay_stats_t *s) { return s->insert_held_batches == 2; }
static int rows_120(const sac_replay_stats_t *s) { return s->shard.inserted_rows_total >= 120; }

Test(replay_flow, beyond_the_held_bound_inserts_are_answered_busy, .timeout = 30) {
  rig_t k;
  rig_start(&k, 2);
  static batches_t b;
  make_batches(&b, 8, 5, 12);
  for (int q = 1; q <= 12; q++)
    send_batch(&k, &b, q);
  sac_wire_ack_t a;
  char err[128];
  int ok = 0, busy = 0;
  uint64_t busy_seq = 0;
  while (recv_ack(&k, 500, &a, err, sizeof err)) {
    if (!err[0]) {
      ok++;
    } else {
      cr_assert_str_eq(err, sac_wire_reason_str(SAC_WIRE_R_BUSY));
      if (!busy)
        busy_seq = a.seq;
      busy++;
    }
  }
  cr_assert_eq(ok, 9, "stored at once: %d", ok);
  cr_assert_eq(busy, 1, "answered busy: %d (batches 10, 11 held, 12 busy)", busy);
  cr_assert_eq(busy_seq, 12);
  sac_replay_stats_t st = stats_when(&k, two_held, "2 batches held");
  cr_assert_eq(st.held_full_total, 1);
  /* the server is still reading: samples make room, the held two are stored, and the
   * busy batch's resend (what the client's timed resend does) is stored after them */
  for (int i = 0; i < 3; i++)
    sample(&k, (uint64_t)i + 1, 10);
  for (int q = 10; q <= 11; q++) {
    cr_assert(recv_ack(&k, 3000, &a, err, sizeof err), "ack of held batch %d missing", q);
    cr_assert_str_empty(err);
    cr_assert_eq(a.seq, (uint64_t)q);
  }
  send_batch(&k, &b, 12);
  cr_assert(recv_ack(&k, 3000, &a, err, sizeof err), "ack of the resent busy batch missing");
  cr_assert_str_empty(err);
  cr_assert_eq(a.seq, 12);
  cr_assert_eq(a.acked_seq, 12);
  sac_replay_stats_t end = stats_when(&k, rows_120, "120 rows stored");
  cr_assert_eq(end.shard.inserted_rows_total, 120);
  cr_assert_eq(end.insert_held_batches, 0);
  rig_stop(&k);
}
