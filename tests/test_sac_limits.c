/* Hostile sizes and values for the SAC core (issue 14, defects 1 and 8).
 *
 * Defect 1: sac_new sized its host init buffer by the parameter count and filled it with
 * batch_size floats, so any batch larger than the network overflowed the heap ("double
 * free or corruption" with --hidden 32 --batch_size 4096, a segfault with --hidden 16
 * --batch_size 3000 and with --batch_size 1048576). These tests build exactly those
 * shapes on the cpu backend (Pendulum's obs 3, act 1), check every importance weight
 * starts at 1 and run a couple of updates; they crash or fail on the old sac_new (and
 * ASan names the overflow in the sanitize stage). Sizes the backends cannot index are
 * refused before anything is allocated.
 *
 * Defect 8: with the loss guard on, an update whose critic loss is not finite (rewards of
 * 3e38) changes nothing (skipped on the backend, reported by its statistics; with the
 * unfused ops refused with SAC_ENONFINITE); the negative control without
 * the guard shows the same batch really does produce an infinite loss and moves the
 * parameters. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "common/rng.h"
#include "learner/sac.h"

static sac_hparams_t pendulum_hp(int hidden, int batch) {
  sac_hparams_t hp;
  sac_hparams_default(&hp, 3, 1);
  hp.hidden = hidden;
  hp.batch = batch;
  return hp;
}

static void fill(sac_t *s, int B, int O, int A, float reward) {
  sac_batch_t *b = sac_batch(s);
  sac_rng_t rng;
  sac_rng_init(&rng, 7, 1);
  for (size_t i = 0; i < (size_t)B * O; i++) {
    b->obs[i] = (float)sac_rng_uniform_range(&rng, -1, 1);
    b->next_obs[i] = (float)sac_rng_uniform_range(&rng, -1, 1);
  }
  for (size_t i = 0; i < (size_t)B * A; i++)
    b->action[i] = (float)sac_rng_uniform_range(&rng, -1, 1);
  for (int i = 0; i < B; i++) {
    b->reward[i] = reward;
    b->terminated[i] = 0.0f;
  }
}

/* sac_new at this shape, every weight 1, `updates` updates with finite losses. */
static void run_shape(int hidden, int batch, int updates) {
  sac_backend_t *be = NULL;
  sac_t *s = NULL;
  cr_assert_eq(sac_backend_new("cpu", 1, &be), 0);
  sac_hparams_t hp = pendulum_hp(hidden, batch);
  cr_assert_eq(sac_new(&hp, be, &s), 0, "sac_new hidden %d batch %d", hidden, batch);
  cr_assert_gt((size_t)batch, sac_param_count(s), "the shape must have more rows than parameters");
  const float *w = sac_batch(s)->weights; /* cpu backend memory is host memory */
  for (int i = 0; i < batch; i++)
    cr_assert_eq(w[i], 1.0f, "importance weight %d is %g, not 1", i, (double)w[i]);
  fill(s, batch, 3, 1, -1.0f);
  for (int u = 0; u < updates; u++)
    cr_assert_eq(sac_update(s), 0);
  sac_stats_t st;
  cr_assert_eq(sac_stats(s, &st), 0);
  cr_expect(isfinite(st.critic_loss) && isfinite(st.actor_loss), "losses %g %g", (double)st.critic_loss,
            (double)st.actor_loss);
  sac_destroy(&s);
  sac_backend_destroy(&be);
}

Test(sac_limits, hidden32_batch4096) { run_shape(32, 4096, 2); }
Test(sac_limits, hidden16_batch3000) { run_shape(16, 3000, 2); }
/* the documented maximum --batch_size, on a network small enough to stay cheap */
Test(sac_limits, batch_1048576, .timeout = 120) { run_shape(2, 1 << 20, 1); }

Test(sac_limits, unindexable_sizes_refused_before_allocating) {
  sac_hparams_t hp = pendulum_hp(65536, 1 << 20); /* both at their option maxima */
  char why[320] = "";
  cr_assert_eq(sac_hparams_check(&hp, why, sizeof why), SAC_EINVAL);
  cr_expect(strstr(why, "batch_size") && strstr(why, "hidden"), "reason: %s", why);
  sac_backend_t *be = NULL;
  sac_t *s = NULL;
  cr_assert_eq(sac_backend_new("cpu", 1, &be), 0);
  cr_assert_eq(sac_new(&hp, be, &s), SAC_EINVAL);
  cr_assert_null(s);
  /* the boundary: batch x hidden = SAC_MAX_OPERAND / 4 passes the check, one more row fails */
  hp = pendulum_hp(512, (SAC_MAX_OPERAND / 4) / 512);
  cr_expect_eq(sac_hparams_check(&hp, why, sizeof why), 0, "%s", why);
  hp.batch++;
  cr_expect_eq(sac_hparams_check(&hp, why, sizeof why), SAC_EINVAL);
  sac_backend_destroy(&be);
}

Test(sac_limits, larger_than_host_memory_refused) {
  sac_hparams_t hp = pendulum_hp(16384, 256);
  hp.depth = 14;
  size_t need = sac_state_bytes(&hp);
  cr_assert_gt(need, (size_t)100 << 30, "%zu bytes", need);
  double phys = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
  if ((double)need <= phys)
    cr_skip("this host has %.0f GiB: the state would fit", phys / 1073741824.0);
  sac_backend_t *be = NULL;
  sac_t *s = NULL;
  cr_assert_eq(sac_backend_new("cpu", 1, &be), 0);
  cr_assert_eq(sac_new(&hp, be, &s), SAC_ENOMEM);
  cr_assert_null(s);
  sac_backend_destroy(&be);
}

/* ---- defect 8: the loss guard ---- */

static void snapshot(sac_t *s, float *out) {
  size_t n = sac_param_count(s);
  cr_assert_eq(sac_get_buffer(s, SAC_BUF_PARAMS, out, n), 0);
  cr_assert_eq(sac_get_buffer(s, SAC_BUF_TARGET, out + n, sac_buffer_len(s, SAC_BUF_TARGET)), 0);
}

Test(sac_limits, loss_guard_refuses_a_nonfinite_update) {
  sac_backend_t *be = NULL;
  sac_t *s = NULL;
  cr_assert_eq(sac_backend_new("cpu", 1, &be), 0);
  sac_hparams_t hp = pendulum_hp(16, 32);
  cr_assert_eq(sac_new(&hp, be, &s), 0);
  size_t n = sac_param_count(s) + sac_buffer_len(s, SAC_BUF_TARGET);
  float *before = malloc(n * sizeof(float)), *after = malloc(n * sizeof(float));
  cr_assert(before && after);

  /* negative control: without the guard, rewards of 3e38 give an infinite critic loss
   * and the step is applied */
  fill(s, 32, 3, 1, 3e38f);
  snapshot(s, before);
  cr_assert_eq(sac_update(s), 0);
  sac_stats_t st;
  cr_assert_eq(sac_stats(s, &st), 0);
  cr_assert(!isfinite(st.critic_loss), "control: critic loss %g should not be finite",
            (double)st.critic_loss);
  snapshot(s, after);
  cr_assert(memcmp(before, after, n * sizeof(float)) != 0, "control: the step should have moved something");
  sac_destroy(&s);

  /* with the guard (on the backend, in the fused optimizer ops): nothing applied — the
   * parameters, target networks, Adam moments and step counters unchanged — and the
   * verdict reported with the update's statistics (read one update late by the service) */
  cr_assert_eq(sac_new(&hp, be, &s), 0);
  sac_set_loss_guard(s, 1);
  fill(s, 32, 3, 1, 3e38f);
  snapshot(s, before);
  float steps0[3], steps1[3];
  cr_assert_eq(sac_get_buffer(s, SAC_BUF_STEPS, steps0, 3), 0);
  for (int i = 0; i < 3; i++) {
    cr_assert_eq(sac_update(s), 0);
    cr_assert_eq(sac_stats(s, &st), 0);
    cr_assert(!sac_stats_finite(&st), "the skipped update's statistics must say why");
  }
  snapshot(s, after);
  cr_assert(memcmp(before, after, n * sizeof(float)) == 0, "a refused update changed the parameters");
  cr_assert_eq(sac_get_buffer(s, SAC_BUF_STEPS, steps1, 3), 0);
  cr_assert(memcmp(steps0, steps1, sizeof steps0) == 0, "a refused update advanced an Adam step counter");
  size_t np = sac_param_count(s);
  float *mv = calloc(np, sizeof(float));
  cr_assert(mv);
  for (int b = 0; b < 2; b++) { /* the Adam moments never moved from zero */
    cr_assert_eq(sac_get_buffer(s, b ? SAC_BUF_ADAM_V : SAC_BUF_ADAM_M, mv, np), 0);
    for (size_t i = 0; i < np; i++)
      cr_assert_eq(mv[i], 0.0f, "a refused update moved Adam's %s", b ? "v" : "m");
  }
  free(mv);
  cr_assert_eq(sac_step(s), 3); /* updates enqueued */
  /* an ordinary batch then trains as usual */
  fill(s, 32, 3, 1, -1.0f);
  cr_assert_eq(sac_update(s), 0);
  cr_assert_eq(sac_step(s), 4);
  cr_assert_eq(sac_stats(s, &st), 0);
  cr_assert(isfinite(st.critic_loss));
  cr_assert_eq(sac_get_buffer(s, SAC_BUF_STEPS, steps1, 3), 0);
  cr_assert(steps1[0] == steps0[0] + 1.0f && steps1[1] == steps0[1] + 1.0f,
            "the good update's steps applied");
  snapshot(s, after);
  cr_assert(memcmp(before, after, n * sizeof(float)) != 0, "the good update should move the parameters");
  sac_destroy(&s);

  /* the unfused ops keep the host-side check: SAC_ENONFINITE, the step counter unchanged */
  cr_assert_eq(sac_new(&hp, be, &s), 0);
  sac_set_loss_guard(s, 1);
  sac_set_unfused(s, 1);
  fill(s, 32, 3, 1, 3e38f);
  snapshot(s, before);
  for (int i = 0; i < 3; i++)
    cr_assert_eq(sac_update(s), SAC_ENONFINITE);
  snapshot(s, after);
  cr_assert(memcmp(before, after, n * sizeof(float)) == 0, "a refused update changed the parameters");
  cr_assert_eq(sac_step(s), 0);
  free(before);
  free(after);
  sac_destroy(&s);
  sac_backend_destroy(&be);
}
