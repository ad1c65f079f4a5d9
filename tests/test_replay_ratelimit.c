/* Tests of replay/ratelimit: the minimum size, the samples-per-insert ratio kept within
 * the error buffer, the automatic widening of a too narrow buffer, and, against a live
 * in-process server over inproc://, that the side running ahead waits with a timeout:
 * a sample request below min_size is answered with a timeout error, and inserts beyond
 * the ratio are parked (backpressure) until samples catch up. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/net.h"
#include "replay/client.h"
#include "replay/ratelimit.h"
#include "replay/server.h"
#include "tests/replay_inproc.h"
#include "tests/replay_testgen.h"

Test(replay_ratelimit, min_size_gates_sampling) {
  sac_replay_limiter_t l;
  sac_replay_limiter_init(&l, 0.0, 100, 0.0, 64, 256);
  cr_assert(sac_replay_limiter_can_insert(&l, 64));
  cr_assert_not(sac_replay_limiter_can_sample(&l, 99, 1));
  cr_assert(sac_replay_limiter_can_sample(&l, 100, 256));
  for (int i = 0; i < 1000; i++)
    sac_replay_limiter_sampled(&l, 256); /* spi 0: no ratio, sampling never blocks */
  cr_assert(sac_replay_limiter_can_sample(&l, 100, 256));
  cr_assert(sac_replay_limiter_can_insert(&l, 64));
}

Test(replay_ratelimit, ratio_is_kept_within_the_error_buffer) {
  /* 4 samples per insert, min size 100, buffer 50: diff in [350, 450] up to one batch */
  sac_replay_limiter_t l;
  sac_replay_limiter_init(&l, 4.0, 100, 50.0, 8, 16);
  cr_assert_float_eq(l.min_diff, 350.0, 1e-9);
  cr_assert_float_eq(l.max_diff, 450.0, 1e-9);
  uint64_t size = 0;
  /* an eager inserter and an eager sampler, alternating attempts */
  uint64_t ins_blocked = 0, smp_blocked = 0;
  for (int step = 0; step < 20000; step++) {
    if (sac_replay_limiter_can_insert(&l, 8)) {
      sac_replay_limiter_inserted(&l, 8);
      size += 8;
    } else {
      ins_blocked++;
    }
    if (sac_replay_limiter_can_sample(&l, size, 16))
      sac_replay_limiter_sampled(&l, 16);
    else
      smp_blocked++;
    if (l.sampled)
      cr_assert_geq(l.diff, l.min_diff - 16, "sampler overdrew: diff %.0f at step %d", l.diff, step);
    cr_assert_leq(l.diff, l.max_diff + 4 * 8, "inserter ran ahead");
  }
  double ratio = (double)l.sampled / (double)(l.inserted - 100);
  cr_log_info("samples per insert %.3f, insert blocked %llu, sample blocked %llu", ratio,
              (unsigned long long)ins_blocked, (unsigned long long)smp_blocked);
  cr_assert_float_eq(ratio, 4.0, 0.05, "long-run ratio %.3f", ratio);
  cr_assert_gt(ins_blocked, 0, "the inserter was held back");
}

Test(replay_ratelimit, narrow_error_buffer_is_widened) {
  sac_replay_limiter_t l;
  sac_replay_limiter_init(&l, 256.0, 1000, 1.0, 64, 256);
  cr_assert_geq(l.error_buffer, 257.0);
  sac_replay_limiter_init(&l, 256.0, 1000, 0.0, 64, 256);
  cr_assert_float_eq(l.error_buffer, 0.1 * 256 * 1000, 1e-6, "default: 10%% of spi x min_size");
}

Test(replay_ratelimit, sample_below_min_size_times_out) {
  sac_net_ctx_t *ctx = sac_net_ctx_new(1);
  inproc_shard_t sh;
  inproc_shard_init(&sh, "rl1");
  sh.c.shard.min_size = 1000;
  sac_replay_server_t *srv = sac_replay_server_new(&sh.c, ctx, NULL);
  cr_assert_not_null(srv);
  cr_assert_eq(sac_replay_server_start(srv), 0);
  sac_replay_client_config_t cc;
  inproc_client_init(&sh, ctx, &cc);
  cc.batch_size = 32;
  cc.sample_timeout_ms = 200;
  sac_replay_client_t *cl = sac_replay_client_new(&cc);
  cr_assert_not_null(cl);
  sac_replay_batch_t b;
  uint64_t t0 = sac_clock_ns();
  cr_assert_eq(sac_replay_client_sample(cl, 700, &b), SAC_ETIMEOUT, "nothing to sample below min_size");
  double waited = (double)(sac_clock_ns() - t0) * 1e-9;
  cr_assert_lt(waited, 2.0);
  sac_replay_client_stats_t cs;
  sac_replay_client_stats(cl, &cs);
  cr_assert_geq(cs.sample_errors, 1, "the shard answered with a rate-limiter timeout");
  sac_replay_stats_t st;
  sac_replay_server_stats(srv, &st);
  cr_assert_geq(st.sample_timeouts_total, 1);
  cr_assert_geq(st.sample_waits_total, 1);
  cr_assert_not(st.shard.can_sample);
  /* after min_size transitions, sampling works */
  tg_t g;
  tg_init(&g, 1, 8, 4, 1, 50, 32);
  for (int i = 0; i < 5; i++)
    cr_assert_eq(sac_replay_client_insert(cl, 0, tg_next(&g), 2000), 0);
  cr_assert_eq(sac_replay_client_flush(cl, 5000), 0);
  cr_assert_eq(sac_replay_client_sample(cl, 3000, &b), 0);
  cr_assert_eq(b.n, 32);
  sac_replay_client_destroy(&cl);
  sac_replay_server_destroy(&srv);
  sac_net_ctx_destroy(&ctx);
  tg_free(&g);
}

Test(replay_ratelimit, inserts_wait_for_samples_backpressure) {
  sac_net_ctx_t *ctx = sac_net_ctx_new(1);
  inproc_shard_t sh;
  inproc_shard_init(&sh, "rl2");
  sh.c.shard.min_size = 64;
  sh.c.shard.samples_per_insert = 1.0; /* one sampled transition per inserted one */
  sh.c.shard.error_buffer = 64;
  sh.c.insert_credit = 4;
  sac_replay_server_t *srv = sac_replay_server_new(&sh.c, ctx, NULL);
  cr_assert_not_null(srv);
  cr_assert_eq(sac_replay_server_start(srv), 0);
  sac_replay_client_config_t cc;
  inproc_client_init(&sh, ctx, &cc);
  cc.sample_endpoints = NULL; /* the actor inserts only */
  cc.window = 4;
  sac_replay_client_t *actor = sac_replay_client_new(&cc);
  cc.insert_endpoints = NULL;
  cc.sample_endpoints = sh.smp;
  cc.batch_size = 32;
  cc.prefetch = 1;
  sac_replay_client_t *learner = sac_replay_client_new(&cc);
  tg_t g;
  tg_init(&g, 1, 4, 4, 1, 40, 8); /* 32 rows per batch */
  /* with no sampling, inserts stop after diff reaches spi * min_size + buffer = 128:
   * then the shard parks a batch and the actor's window fills: insert times out */
  int sent = 0, timed_out = 0;
  for (int i = 0; i < 40 && !timed_out; i++) {
    int rc = sac_replay_client_insert(actor, 0, tg_next(&g), 300);
    if (rc == SAC_ETIMEOUT)
      timed_out = 1;
    else {
      cr_assert_eq(rc, 0);
      sent++;
    }
  }
  cr_assert(timed_out, "the actor was held back after %d batches", sent);
  cr_assert_leq(sent, 4 + 8, "at most the window beyond the limit");
  sac_replay_stats_t st;
  sac_replay_server_stats(srv, &st);
  cr_assert_eq(st.insert_parked, 1);
  cr_assert_geq(st.insert_waits_total, 1);
  cr_assert_not(st.shard.can_insert);
  cr_assert_leq(st.shard.size, 128 + 32);
  /* sampling lets inserts through again */
  sac_replay_batch_t b;
  /* spi 1: every batch sampled lets one more batch of 32 in */
  for (int k = 0; k < 4; k++) {
    int src = sac_replay_client_sample(learner, 3000, &b);
    if (src) {
      sac_replay_client_stats_t ls;
      sac_replay_client_stats(learner, &ls);
      sac_replay_server_stats(srv, &st);
      cr_log_error("sample %d: %s; client sent %llu requests, %llu errors, %llu rejected; server size %llu "
                   "diff %.0f pending %u timeouts %llu can_sample %d",
                   k, sac_strerror(src), (unsigned long long)ls.sample_requests_sent,
                   (unsigned long long)ls.sample_errors, (unsigned long long)ls.rejected_replies,
                   (unsigned long long)st.shard.size, st.shard.limiter_diff, st.pending_samples,
                   (unsigned long long)st.sample_timeouts_total, st.shard.can_sample);
    }
    cr_assert_eq(src, 0);
    sac_replay_client_poll(actor, 1);
  }
  cr_assert_eq(sac_replay_client_flush(actor, 5000), 0, "parked batches were stored once sampling caught up");
  sac_replay_server_stats(srv, &st);
  cr_assert_gt(st.insert_wait_seconds_total, 0.0);
  cr_log_info("limiter diff %.0f in [%.0f, %.0f], size %llu", st.shard.limiter_diff,
              st.shard.limiter_min_diff, st.shard.limiter_max_diff, (unsigned long long)st.shard.size);
  sac_replay_client_destroy(&actor);
  sac_replay_client_destroy(&learner);
  sac_replay_server_destroy(&srv);
  sac_net_ctx_destroy(&ctx);
  tg_free(&g);
}
