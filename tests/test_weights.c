/* Weights publish/subscribe over inproc: the subscriber takes the latest version, checks
 * the shape it runs, and drops (and counts) anything else. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "common/clock.h"
#include "common/net.h"
#include "common/rng.h"
#include "common/weights.h"

static int wait_new(sac_weights_sub_t *s) {
  for (int i = 0; i < 200; i++) { /* bounded: 2 s */
    int rc = sac_weights_wait(s, 10);
    if (rc != 0)
      return rc;
  }
  return 0;
}

Test(weights, publish_then_subscribe_latest_only) {
  sac_net_ctx_t *ctx = sac_net_ctx_new(1);
  cr_assert_not_null(ctx);
  sac_mlp_desc_t d;
  sac_mlp_desc_init(&d, 3, 16, 2, 2, SAC_ACT_RELU, 1);
  size_t n = sac_mlp_param_count(&d);
  float *p = malloc(n * sizeof(float));
  sac_rng_t rng;
  sac_rng_init(&rng, 1, 1);
  sac_mlp_init_params(&d, p, &rng);
  sac_weights_pub_t *pub = sac_weights_pub_new(ctx, "inproc://w-test", &d, NULL, 0);
  cr_assert_not_null(pub);
  sac_weights_sub_t *sub = sac_weights_sub_new(ctx, "inproc://w-test", 3, 1);
  cr_assert_not_null(sub);
  cr_expect_null(sac_weights_params(sub));
  /* a PUB drops messages until the subscription has propagated: publish until one lands */
  int got = 0;
  for (int i = 0; i < 200 && !got; i++) {
    cr_assert_eq(sac_weights_publish(pub, 7, p), 0);
    got = sac_weights_wait(sub, 10);
  }
  cr_assert_eq(got, 1);
  cr_expect_eq(sac_weights_version(sub), 7u);
  cr_expect_eq(memcmp(sac_weights_params(sub), p, n * sizeof(float)), 0);
  cr_expect_eq(sac_weights_desc(sub)->sizes[1], 16);
  /* three versions published back to back: conflate keeps the last */
  for (int v = 8; v <= 10; v++) {
    p[0] = (float)v;
    cr_assert_eq(sac_weights_publish(pub, (uint64_t)v, p), 0);
  }
  sac_sleep_ns(50 * 1000000ull);
  cr_assert_eq(wait_new(sub), 1);
  cr_expect_eq(sac_weights_version(sub), 10u);
  cr_expect_eq(sac_weights_params(sub)[0], 10.0f);
  cr_expect_eq(sac_weights_poll(sub), 0, "nothing newer");
  sac_weights_sub_destroy(&sub);
  sac_weights_pub_destroy(&pub);
  sac_net_ctx_destroy(&ctx);
  free(p);
}

Test(weights, wrong_shape_and_nonfinite_are_dropped_and_counted) {
  sac_net_ctx_t *ctx = sac_net_ctx_new(1);
  sac_mlp_desc_t d;
  sac_mlp_desc_init(&d, 4, 8, 1, 2, SAC_ACT_RELU, 1); /* obs 4: the subscriber expects 3 */
  size_t n = sac_mlp_param_count(&d);
  float *p = calloc(n, sizeof(float));
  sac_weights_pub_t *pub = sac_weights_pub_new(ctx, "inproc://w-bad", &d, NULL, 0);
  sac_weights_sub_t *sub = sac_weights_sub_new(ctx, "inproc://w-bad", 3, 1);
  cr_assert(pub && sub);
  for (int i = 0; i < 200 && sac_weights_rejected(sub) == 0; i++) {
    sac_weights_publish(pub, 1, p);
    cr_assert_eq(sac_weights_wait(sub, 10), 0, "a mismatched shape is never taken");
  }
  cr_expect_geq(sac_weights_rejected(sub), 1u);
  cr_expect_null(sac_weights_params(sub));
  sac_weights_pub_destroy(&pub);
  /* right shape but a NaN */
  sac_mlp_desc_init(&d, 3, 8, 1, 2, SAC_ACT_RELU, 1);
  n = sac_mlp_param_count(&d);
  p = realloc(p, n * sizeof(float));
  memset(p, 0, n * sizeof(float));
  p[5] = NAN;
  pub = sac_weights_pub_new(ctx, "inproc://w-bad2", &d, NULL, 0);
  sac_weights_sub_t *sub2 = sac_weights_sub_new(ctx, "inproc://w-bad2", 3, 1);
  for (int i = 0; i < 200 && sac_weights_rejected(sub2) == 0; i++) {
    sac_weights_publish(pub, 2, p);
    cr_assert_eq(sac_weights_wait(sub2, 10), 0);
  }
  cr_expect_geq(sac_weights_rejected(sub2), 1u);
  cr_expect_null(sac_weights_params(sub2));
  sac_weights_sub_destroy(&sub2);
  sac_weights_sub_destroy(&sub);
  sac_weights_pub_destroy(&pub);
  sac_net_ctx_destroy(&ctx);
  free(p);
}
