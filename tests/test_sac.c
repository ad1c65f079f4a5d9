/* The SAC losses as wholes: the gradients sac.c computes through the backend are
 * checked against central finite differences of a double-precision reference of each
 * loss (sac_ref.h) — critic loss over every critic parameter, actor loss over every
 * actor parameter, alpha loss over log alpha. Plus: determinism (same seed, identical
 * losses after 100 updates), the truncation bootstrap, Polyak after an update, and the
 * importance weights.
 *
 * Tolerance as in test_backend_cpu.c: |analytic - fd| <= 2e-4 + 1e-3 |fd|; the
 * networks are small (width 6) so float32 accumulation error stays ~1e-6. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/rng.h"
#include "learner/op_count.h"
#include "learner/sac.h"
#include "sac_ref.h"

#define CHECK_GRAD(an, fd, what, idx)                                                                        \
  cr_expect(fabs((double)(an) - (fd)) <= 2e-4 + 1e-3 * fabs(fd), "%s[%d]: analytic %.7g vs fd %.7g", what,   \
            (int)(idx), (double)(an), (double)(fd))

typedef struct {
  sac_backend_t *be;
  sac_t *sac;
  int B, O, A;
  size_t n, na, nc;
  float *params, *grads, *target;
  double *dparams, *dtarget;
  double *obs, *act, *rew, *term, *nobs, *w, *eps_next, *eps_pi;
  ref_sac_t R;
} fixture_t;

static void fill_batch(sac_t *s, sac_rng_t *rng, int B, int O, int A, int with_weights) {
  sac_batch_t *b = sac_batch(s);
  for (int i = 0; i < B * O; i++) {
    b->obs[i] = (float)sac_rng_uniform_range(rng, -1, 1);
    b->next_obs[i] = (float)sac_rng_uniform_range(rng, -1, 1);
  }
  for (int i = 0; i < B * A; i++)
    b->action[i] = (float)sac_rng_uniform_range(rng, -1, 1);
  for (int i = 0; i < B; i++) {
    b->reward[i] = (float)sac_rng_uniform_range(rng, -2, 1);
    b->terminated[i] = (i % 3 == 0) ? 1.0f : 0.0f;
    b->weights[i] = with_weights ? (float)sac_rng_uniform_range(rng, 0.2, 1.5) : 1.0f;
  }
}

static double *dcopy(const float *f, size_t n) {
  double *d = malloc(sizeof(double) * (n ? n : 1));
  for (size_t i = 0; i < n; i++)
    d[i] = f[i];
  return d;
}

/* A small SAC (obs 3, act 2, 2 x 6, batch 5) on the cpu backend with a random batch. */
static int g_threads = 1; /* cpu backend threads of the fixture and of run_updates */
static int g_batch = 16;  /* run_updates' batch */
static int g_hidden = 32; /* run_updates' hidden width */

static void fixture_init(fixture_t *f, int with_weights) {
  memset(f, 0, sizeof *f);
  f->B = 5, f->O = 3, f->A = 2;
  cr_assert_eq(sac_backend_new("cpu", g_threads, &f->be), 0);
  sac_hparams_t hp;
  sac_hparams_default(&hp, f->O, f->A);
  hp.hidden = 6;
  hp.batch = f->B;
  hp.init_alpha = 0.3f;
  hp.seed = 11;
  cr_assert_eq(sac_new(&hp, f->be, &f->sac), 0);
  f->n = sac_param_count(f->sac);
  f->na = sac_actor_param_count(f->sac);
  f->nc = sac_buffer_len(f->sac, SAC_BUF_TARGET);
  /* targets differ from the critics, so a mix-up of the two would show */
  f->target = malloc(sizeof(float) * f->nc);
  sac_get_buffer(f->sac, SAC_BUF_TARGET, f->target, f->nc);
  sac_rng_t rng;
  sac_rng_init(&rng, 5, 5);
  for (size_t i = 0; i < f->nc; i++)
    f->target[i] += (float)sac_rng_uniform_range(&rng, -0.1, 0.1);
  sac_set_buffer(f->sac, SAC_BUF_TARGET, f->target, f->nc);
  /* Every gradient first on another batch, so each gradient buffer (and the scratch
   * buffers under them: input gradients, head gradient) holds another batch's values
   * when the checked computation runs: an op that accumulates into its output instead of
   * overwriting it is then off by O(1) (issue 27; zeroed buffers hid two such bugs). */
  sac_rng_t other;
  sac_rng_init(&other, 6, 6);
  fill_batch(f->sac, &other, f->B, f->O, f->A, !with_weights);
  sac_forward_policy(f->sac);
  sac_compute_critic_grads(f->sac);
  sac_compute_actor_grads(f->sac);
  fill_batch(f->sac, &rng, f->B, f->O, f->A, with_weights);
  f->params = malloc(sizeof(float) * f->n);
  f->grads = malloc(sizeof(float) * f->n);
}

static void fixture_snapshot(fixture_t *f) {
  sac_batch_t *b = sac_batch(f->sac);
  const int B = f->B, O = f->O, A = f->A;
  sac_get_buffer(f->sac, SAC_BUF_PARAMS, f->params, f->n);
  sac_get_buffer(f->sac, SAC_BUF_GRADS, f->grads, f->n);
  f->dparams = dcopy(f->params, f->n);
  f->dtarget = dcopy(f->target, f->nc);
  f->obs = dcopy(b->obs, (size_t)B * O), f->nobs = dcopy(b->next_obs, (size_t)B * O);
  f->act = dcopy(b->action, (size_t)B * A), f->rew = dcopy(b->reward, B);
  f->term = dcopy(b->terminated, B), f->w = dcopy(b->weights, B);
  float *e = malloc(sizeof(float) * B * A);
  sac_get_noise(f->sac, 0, e);
  f->eps_next = dcopy(e, (size_t)B * A);
  sac_get_noise(f->sac, 1, e);
  f->eps_pi = dcopy(e, (size_t)B * A);
  free(e);
  const sac_hparams_t *hp = sac_hparams(f->sac);
  f->R = (ref_sac_t){.B = B,
                     .O = O,
                     .A = A,
                     .gamma = hp->gamma,
                     .lsmin = hp->log_std_min,
                     .lsmax = hp->log_std_max,
                     .target_entropy = hp->target_entropy,
                     .ad = sac_actor_desc(f->sac),
                     .cd = sac_critic_desc(f->sac),
                     .obs = f->obs,
                     .act = f->act,
                     .rew = f->rew,
                     .term = f->term,
                     .nobs = f->nobs,
                     .w = f->w,
                     .eps_next = f->eps_next,
                     .eps_pi = f->eps_pi};
}

static void fixture_fini(fixture_t *f) {
  sac_destroy(&f->sac);
  sac_backend_destroy(&f->be);
  free(f->params), free(f->grads), free(f->target), free(f->dparams), free(f->dtarget);
  free(f->obs), free(f->act), free(f->rew), free(f->term), free(f->nobs), free(f->w);
  free(f->eps_next), free(f->eps_pi);
}

static void check_critic_loss_gradient(int with_weights) {
  fixture_t f;
  fixture_init(&f, with_weights);
  sac_forward_policy(f.sac);
  sac_compute_critic_grads(f.sac);
  fixture_snapshot(&f);
  double *actor = f.dparams, *critic = f.dparams + f.na, la = f.dparams[f.n - 1];
  sac_stats_t st;
  sac_stats(f.sac, &st);
  double L = ref_critic_loss(&f.R, actor, critic, f.dtarget, la);
  cr_expect(fabs(st.critic_loss - L) < 1e-5 * (1 + fabs(L)), "critic loss %g vs reference %g", st.critic_loss,
            L);
  double fd;
  for (size_t i = 0; i < f.nc; i++) {
    REF_FD(1e-6, critic[i], ref_critic_loss(&f.R, actor, critic, f.dtarget, la), fd);
    CHECK_GRAD(f.grads[f.na + i], fd, "critic", i);
  }
  fixture_fini(&f);
}

Test(sac, critic_loss_gradient_matches_finite_differences) { check_critic_loss_gradient(0); }
Test(sac, weighted_critic_loss_gradient_matches_finite_differences) { check_critic_loss_gradient(1); }
/* the same with the ops split over two threads (the critics' members on different threads) */
Test(sac, critic_loss_gradient_matches_finite_differences_2_threads) {
  g_threads = 2;
  check_critic_loss_gradient(1);
}

Test(sac, actor_and_alpha_loss_gradients_match_finite_differences) {
  fixture_t f;
  fixture_init(&f, 0);
  sac_forward_policy(f.sac);
  sac_compute_actor_grads(f.sac);
  fixture_snapshot(&f);
  double *actor = f.dparams, *critic = f.dparams + f.na, la = f.dparams[f.n - 1];
  sac_stats_t st;
  sac_stats(f.sac, &st);
  double mean_logp;
  double L = ref_actor_loss(&f.R, actor, critic, la, &mean_logp);
  cr_expect(fabs(st.actor_loss - L) < 1e-5 * (1 + fabs(L)), "actor loss %g vs reference %g", st.actor_loss,
            L);
  cr_expect(fabs(st.entropy + mean_logp) < 1e-5 * (1 + fabs(mean_logp)));
  double fd;
  for (size_t i = 0; i < f.na; i++) {
    REF_FD(1e-6, actor[i], ref_actor_loss(&f.R, actor, critic, la, NULL), fd);
    CHECK_GRAD(f.grads[i], fd, "actor", i);
  }
  /* L_alpha = -log alpha (mean logp + target entropy), logp held fixed */
  double te = f.R.target_entropy;
  REF_FD(1e-6, la, -la * (mean_logp + te), fd);
  CHECK_GRAD(f.grads[f.n - 1], fd, "log_alpha", 0);
  fixture_fini(&f);
}

/* Runs n updates on a stream of random batches; returns the losses of each. */
static void run_updates(uint64_t seed, int n, float *losses) {
  sac_backend_t *be;
  sac_t *s;
  cr_assert_eq(sac_backend_new("cpu", g_threads, &be), 0);
  sac_hparams_t hp;
  sac_hparams_default(&hp, 3, 1);
  hp.hidden = g_hidden;
  hp.batch = g_batch;
  hp.seed = seed;
  cr_assert_eq(sac_new(&hp, be, &s), 0);
  sac_rng_t rng;
  sac_rng_init(&rng, 77, 1);
  for (int i = 0; i < n; i++) {
    fill_batch(s, &rng, hp.batch, 3, 1, 0);
    sac_update(s);
    sac_stats_t st;
    sac_stats(s, &st);
    losses[3 * i] = st.critic_loss;
    losses[3 * i + 1] = st.actor_loss;
    losses[3 * i + 2] = st.alpha;
  }
  sac_destroy(&s);
  sac_backend_destroy(&be);
}

Test(sac, same_seed_gives_identical_losses_after_100_updates) {
  float a[300], b[300], c[300];
  run_updates(3, 100, a);
  run_updates(3, 100, b);
  run_updates(4, 100, c);
  cr_expect_eq(memcmp(a, b, sizeof a), 0, "same seed: bit-identical losses");
  cr_expect_neq(memcmp(a, c, sizeof a), 0, "another seed: other losses");
  for (int i = 0; i < 300; i++)
    cr_assert(isfinite(a[i]));
}

/* Whole updates with the ops split over 2 and 3 threads (issue 17): bit-identical for a
 * seed at a thread count, and within float rounding of one thread over 20 updates. */
Test(sac, split_updates_are_deterministic_and_match_one_thread) {
  float one[60], two[60], two_again[60], three[60];
  g_batch = 64, g_hidden = 128; /* hidden layers above the backend's split threshold */
  g_threads = 1, run_updates(5, 20, one);
  g_threads = 2, run_updates(5, 20, two), run_updates(5, 20, two_again);
  g_threads = 3, run_updates(5, 20, three);
  g_threads = 1, g_batch = 16, g_hidden = 32;
  cr_expect_eq(memcmp(two, two_again, sizeof two), 0, "2 threads: not deterministic");
  for (int i = 0; i < 60; i++) {
    cr_assert(isfinite(two[i]));
    cr_expect(fabsf(two[i] - one[i]) <= 1e-4f * (1.0f + fabsf(one[i])), "update %d: 2 threads %g, one %g",
              i / 3, two[i], one[i]);
    cr_expect(fabsf(three[i] - one[i]) <= 1e-4f * (1.0f + fabsf(one[i])), "update %d: 3 threads %g, one %g",
              i / 3, three[i], one[i]);
  }
}

Test(sac, truncation_bootstraps_termination_does_not) {
  /* The same batch with terminated = 0 (a time-limit truncation) and terminated = 1:
   * the critic loss must equal the reference with and without the bootstrap term. */
  fixture_t f;
  fixture_init(&f, 0);
  sac_batch_t *b = sac_batch(f.sac);
  for (int i = 0; i < f.B; i++)
    b->terminated[i] = 0.0f;
  sac_forward_policy(f.sac);
  sac_compute_critic_grads(f.sac);
  sac_stats_t st_trunc;
  sac_stats(f.sac, &st_trunc);
  fixture_snapshot(&f);
  double *actor = f.dparams, *critic = f.dparams + f.na, la = f.dparams[f.n - 1];
  double L_boot = ref_critic_loss(&f.R, actor, critic, f.dtarget, la);
  for (int i = 0; i < f.B; i++)
    b->terminated[i] = 1.0f, f.term[i] = 1.0;
  sac_compute_critic_grads(f.sac);
  sac_stats_t st_term;
  sac_stats(f.sac, &st_term);
  double L_end = ref_critic_loss(&f.R, actor, critic, f.dtarget, la);
  cr_expect(fabs(st_trunc.critic_loss - L_boot) < 1e-5 * (1 + fabs(L_boot)));
  cr_expect(fabs(st_term.critic_loss - L_end) < 1e-5 * (1 + fabs(L_end)));
  cr_expect(fabs(L_boot - L_end) > 1e-3, "the bootstrap term must matter (%g vs %g)", L_boot, L_end);
  fixture_fini(&f);
}

Test(sac, update_steps_adam_and_polyak) {
  fixture_t f;
  fixture_init(&f, 0);
  float *before = malloc(sizeof(float) * f.n), *after = malloc(sizeof(float) * f.n);
  float *tafter = malloc(sizeof(float) * f.nc), steps[3];
  sac_get_buffer(f.sac, SAC_BUF_PARAMS, before, f.n);
  sac_update(f.sac);
  sac_get_buffer(f.sac, SAC_BUF_PARAMS, after, f.n);
  sac_get_buffer(f.sac, SAC_BUF_TARGET, tafter, f.nc);
  sac_get_buffer(f.sac, SAC_BUF_STEPS, steps, 3);
  cr_expect_eq(steps[0], 1.0f);
  cr_expect_eq(steps[1], 1.0f);
  cr_expect_eq(steps[2], 1.0f);
  cr_expect_eq(sac_step(f.sac), 1u);
  /* Adam's first step moves a parameter by lr * g / (|g| + eps'): exactly lr where the
   * gradient is clearly non-zero, not at all where it is zero (dead ReLU units) */
  float *g = malloc(sizeof(float) * f.n);
  sac_get_buffer(f.sac, SAC_BUF_GRADS, g, f.n);
  int moved = 0;
  for (size_t i = 0; i < f.n; i++) {
    float d = before[i] - after[i];
    if (fabsf(g[i]) > 1e-5f) {
      cr_expect_float_eq(d, copysignf(3e-4f, g[i]), 3e-6f, "param %zu moved %g with grad %g", i, d, g[i]);
      moved++;
    } else if (g[i] == 0.0f) {
      cr_expect_eq(d, 0.0f);
    }
  }
  cr_expect(moved > (int)(f.n / 2), "%d of %zu parameters have gradients", moved, f.n);
  free(g);
  for (size_t i = 0; i < f.nc; i++)
    cr_expect_float_eq(tafter[i], 0.995f * f.target[i] + 0.005f * after[f.na + i], 1e-6);
  free(before), free(after), free(tafter);
  fixture_fini(&f);
}

Test(sac, rejects_bad_hyperparameters) {
  sac_backend_t *be;
  sac_t *s = NULL;
  cr_assert_eq(sac_backend_new("cpu", 1, &be), 0);
  sac_hparams_t hp;
  sac_hparams_default(&hp, 3, 1);
  hp.batch = 0;
  cr_expect_lt(sac_new(&hp, be, &s), 0);
  cr_expect_null(s);
  sac_hparams_default(&hp, 3, 1);
  hp.tau = 0;
  cr_expect_lt(sac_new(&hp, be, &s), 0);
  sac_backend_destroy(&be);
}

/* Issue 16, point 3: every block of the parameter, gradient and Adam buffers (actor,
 * critics, log alpha, and each layer's W and b) starts on a 256-byte boundary whatever
 * the action size; the padding stays zero through updates; the public (packed) layout
 * round-trips through sac_set_buffer / sac_get_buffer / sac_get_actor. */
static int aligned256(const float *base, size_t off) { return ((uintptr_t)(base + off) & 255u) == 0; }

static void check_layout(int O, int A, int H) {
  sac_backend_t *be;
  sac_t *s;
  cr_assert_eq(sac_backend_new("cpu", 1, &be), 0);
  sac_hparams_t hp;
  sac_hparams_default(&hp, O, A);
  hp.hidden = H;
  hp.batch = 8;
  cr_assert_eq(sac_new(&hp, be, &s), 0);
  sac_layout_t L;
  sac_layout(s, &L);
  const float *bufs[] = {L.params, L.grads, L.adam_m, L.adam_v};
  for (int i = 0; i < 4; i++) {
    cr_assert(aligned256(bufs[i], 0) && aligned256(bufs[i], L.critic) && aligned256(bufs[i], L.log_alpha),
              "A=%d H=%d: buffer %d: a block is not 256-byte aligned", A, H, i);
    for (int l = 0; l < L.n_layers; l++)
      cr_assert(aligned256(bufs[i], L.actor_w[l]) && aligned256(bufs[i], L.actor_b[l]) &&
                    aligned256(bufs[i], L.critic_w[l]) && aligned256(bufs[i], L.critic_b[l]),
                "A=%d H=%d: layer %d of buffer %d is not 256-byte aligned", A, H, l, i);
  }
  for (int l = 0; l < L.n_layers; l++)
    cr_assert(aligned256(L.target, L.critic_w[l] - L.critic) &&
              aligned256(L.target, L.critic_b[l] - L.critic));
  /* packed round trip, and the packed values where the layout says (cpu: host memory) */
  size_t n = sac_param_count(s), na = sac_actor_param_count(s), nc = sac_buffer_len(s, SAC_BUF_TARGET);
  float *in = malloc(n * sizeof(float)), *out = malloc(n * sizeof(float));
  sac_rng_t rng;
  sac_rng_init(&rng, 5, 5);
  for (size_t i = 0; i < n; i++)
    in[i] = (float)sac_rng_uniform_range(&rng, -1, 1);
  cr_assert_eq(sac_set_buffer(s, SAC_BUF_PARAMS, in, n), 0);
  cr_assert_eq(sac_get_buffer(s, SAC_BUF_PARAMS, out, n), 0);
  cr_assert_eq(memcmp(in, out, n * sizeof(float)), 0, "A=%d: params do not round-trip", A);
  memset(out, 0, n * sizeof(float));
  cr_assert_eq(sac_get_actor(s, out), 0);
  cr_assert_eq(memcmp(in, out, na * sizeof(float)), 0, "A=%d: actor export differs from params", A);
  const sac_mlp_desc_t *cd = sac_critic_desc(s);
  for (int l = 0; l < L.n_layers; l++) {
    cr_assert_eq(L.params[L.critic_w[l]], in[na + sac_mlp_weight_offset(cd, l)]);
    cr_assert_eq(L.params[L.critic_b[l]], in[na + sac_mlp_bias_offset(cd, l)]);
  }
  cr_assert_eq(L.params[L.log_alpha], in[n - 1]);
  cr_assert_eq(sac_set_buffer(s, SAC_BUF_TARGET, in + 3, nc), 0);
  cr_assert_eq(sac_get_buffer(s, SAC_BUF_TARGET, out, nc), 0);
  cr_assert_eq(memcmp(in + 3, out, nc * sizeof(float)), 0, "A=%d: target does not round-trip", A);
  /* a partial write keeps the rest */
  cr_assert_eq(sac_set_buffer(s, SAC_BUF_PARAMS, out, 5), 0);
  cr_assert_eq(sac_get_buffer(s, SAC_BUF_PARAMS, out, n), 0);
  cr_assert_eq(memcmp(in + 5, out + 5, (n - 5) * sizeof(float)), 0);
  /* the padding is zero after updates (nothing leaks into it) */
  sac_set_buffer(s, SAC_BUF_PARAMS, in, n);
  for (int u = 0; u < 3; u++) {
    fill_batch(s, &rng, hp.batch, O, A, 0);
    sac_update(s);
  }
  cr_assert_eq(sac_get_buffer(s, SAC_BUF_PARAMS, out, n), 0);
  size_t nonzero_pad = 0, real = 0;
  char *is_real = calloc(L.total, 1);
  for (int l = 0; l < L.n_layers; l++) {
    const sac_mlp_desc_t *ad = sac_actor_desc(s);
    size_t nw = (size_t)ad->sizes[l] * ad->sizes[l + 1], nb = (size_t)ad->sizes[l + 1];
    memset(is_real + L.actor_w[l], 1, nw), memset(is_real + L.actor_b[l], 1, nb);
    nw = (size_t)2 * cd->sizes[l] * cd->sizes[l + 1], nb = (size_t)2 * cd->sizes[l + 1];
    memset(is_real + L.critic_w[l], 1, nw), memset(is_real + L.critic_b[l], 1, nb);
  }
  is_real[L.log_alpha] = 1;
  for (size_t i = 0; i < L.total; i++) {
    real += is_real[i];
    for (int b = 0; b < 4; b++)
      nonzero_pad += !is_real[i] && bufs[b][i] != 0.0f;
  }
  cr_assert_eq(real, n, "A=%d: the layout maps %zu floats, not %zu", A, real, n);
  cr_assert_eq(nonzero_pad, 0, "A=%d: %zu padding floats are not zero after updates", A, nonzero_pad);
  free(is_real), free(in), free(out);
  sac_destroy(&s);
  sac_backend_destroy(&be);
}

Test(sac, blocks_are_256_byte_aligned_for_odd_action_sizes) {
  const int acts[] = {1, 3, 6, 17};
  for (int i = 0; i < 4; i++) {
    check_layout(3, acts[i], 6);
    check_layout(17, acts[i], 256);
  }
}

/* Issue 16, point 1: the learner loads every batch through sac_load_batch staged
 * (stage / stage_commit); on the cpu backend that must give bit-identical results to
 * the old path of plain uploads. Negative control: one changed reward shows the
 * comparison sees a difference. */
static void run_loaded(int staged, int poke, float *params_out, float *td_out) {
  sac_backend_t *be;
  sac_t *s;
  cr_assert_eq(sac_backend_new("cpu", 1, &be), 0);
  sac_hparams_t hp;
  sac_hparams_default(&hp, 5, 3);
  hp.hidden = 16;
  hp.batch = 12;
  hp.policy_delay = 2;
  cr_assert_eq(sac_new(&hp, be, &s), 0);
  const int B = hp.batch, O = 5, A = 3;
  float obs[12 * 5], nobs[12 * 5], act[12 * 3], rew[12], term[12], w[12];
  sac_rng_t rng;
  sac_rng_init(&rng, 9, 9);
  for (int u = 0; u < 6; u++) {
    for (int i = 0; i < B * O; i++)
      obs[i] = (float)sac_rng_uniform_range(&rng, -1, 1), nobs[i] = (float)sac_rng_uniform_range(&rng, -1, 1);
    for (int i = 0; i < B * A; i++)
      act[i] = (float)sac_rng_uniform_range(&rng, -1, 1);
    for (int i = 0; i < B; i++)
      rew[i] = (float)sac_rng_uniform_range(&rng, -1, 1), term[i] = (float)(i % 5 == 0),
      w[i] = (float)sac_rng_uniform_range(&rng, 0.5, 1);
    if (poke && u == 3)
      rew[2] += 1e-3f;
    sac_host_batch_t hb = {obs, nobs, act, rew, term, u % 2 ? w : NULL};
    cr_assert_eq(sac_load_batch(s, &hb, staged), 0);
    memset(obs, 0x7f, sizeof obs); /* the host batch is reusable on return */
    cr_assert_eq(sac_update(s), 0);
    cr_assert_eq(sac_td_errors(s, td_out + (size_t)u * B), 0);
  }
  cr_assert_eq(sac_get_buffer(s, SAC_BUF_PARAMS, params_out, sac_param_count(s)), 0);
  sac_destroy(&s);
  sac_backend_destroy(&be);
}

Test(sac, staged_batches_match_uploaded_bit_for_bit) {
  enum { NP = 20000 };
  float *p[3], td[3][6 * 12];
  for (int i = 0; i < 3; i++)
    p[i] = calloc(NP, sizeof(float));
  run_loaded(0, 0, p[0], td[0]);
  run_loaded(1, 0, p[1], td[1]);
  run_loaded(1, 1, p[2], td[2]);
  sac_backend_t *be;
  sac_t *s;
  sac_hparams_t hp;
  sac_hparams_default(&hp, 5, 3);
  hp.hidden = 16;
  hp.batch = 12;
  cr_assert_eq(sac_backend_new("cpu", 1, &be), 0);
  cr_assert_eq(sac_new(&hp, be, &s), 0);
  size_t n = sac_param_count(s);
  cr_assert(n <= NP);
  sac_destroy(&s);
  sac_backend_destroy(&be);
  cr_assert_eq(memcmp(p[0], p[1], n * sizeof(float)), 0,
               "staged and uploaded batches give different weights");
  cr_assert_eq(memcmp(td[0], td[1], sizeof td[0]), 0,
               "staged and uploaded batches give different priorities");
  cr_assert_neq(memcmp(p[0], p[2], n * sizeof(float)), 0, "negative control: a changed reward went unseen");
  for (int i = 0; i < 3; i++)
    free(p[i]);
}

/* PER one update late: fetch after update N into slot N & 1, collect after update
 * N + 1; the values are update N's, exactly as sac_td_errors right after it. */
Test(sac, td_errors_fetched_one_update_late_are_that_updates) {
  sac_backend_t *be;
  sac_t *s;
  cr_assert_eq(sac_backend_new("cpu", 1, &be), 0);
  sac_hparams_t hp;
  sac_hparams_default(&hp, 4, 2);
  hp.hidden = 8;
  hp.batch = 10;
  cr_assert_eq(sac_new(&hp, be, &s), 0);
  sac_rng_t rng;
  sac_rng_init(&rng, 3, 3);
  float now[5][10], late[10];
  for (int u = 0; u < 5; u++) {
    fill_batch(s, &rng, hp.batch, 4, 2, 0);
    cr_assert_eq(sac_update(s), 0);
    cr_assert_eq(sac_td_errors(s, now[u]), 0);
    cr_assert_eq(sac_td_errors_fetch(s, u & 1), 0);
    if (u > 0) {
      cr_assert_eq(sac_td_errors_collect(s, (u - 1) & 1, late), 0);
      cr_assert_eq(memcmp(late, now[u - 1], sizeof late), 0, "update %d's priorities", u - 1);
      cr_assert_neq(memcmp(late, now[u], sizeof late), 0, "negative control: updates %d and %d agree", u - 1,
                    u);
    }
  }
  cr_assert_eq(sac_td_errors_fetch(s, 2), SAC_EINVAL);
  sac_destroy(&s);
  sac_backend_destroy(&be);
}

/* Issue 16, point 6: a whole run with the fused ops (the optimizer tails, adam_polyak;
 * the critics' last layer with its head op, q_head; the noise; the actor and alpha
 * losses; issue 25: the policy's output, policy_fwd, and the critics' joined input; the
 * last layers' backward with the layer below's activation, linear_bwd_act and policy_bwd)
 * equals the unfused ops bit for bit (policy_delay 2: both phases), at depth 2 and at
 * depth 3 with recomputation (the fused backward's layer below recomputed first). */
/* The small networks of the bit-for-bit comparisons: policy delay 2, so both phases run. */
static sac_hparams_t small_hp(int O, int A, int hidden, int batch, int depth, int recompute) {
  sac_hparams_t hp;
  sac_hparams_default(&hp, O, A);
  hp.hidden = hidden;
  hp.batch = batch;
  hp.policy_delay = 2;
  hp.depth = depth;
  hp.recompute = recompute;
  return hp;
}

/* Seven updates of s on batches drawn from seed (4, 4), then its parameters, step counters
 * and target critics, one after another in a malloc'd array of *n floats. */
static float *seven_updates(sac_t *s, const sac_hparams_t *hp, int with_weights, size_t *n) {
  sac_rng_t rng;
  sac_rng_init(&rng, 4, 4);
  for (int u = 0; u < 7; u++) {
    fill_batch(s, &rng, hp->batch, hp->obs_dim, hp->act_dim, with_weights);
    cr_assert_eq(sac_update(s), 0);
  }
  const size_t np = sac_param_count(s), nt = sac_buffer_len(s, SAC_BUF_TARGET);
  float *p = malloc((np + 3 + nt) * sizeof(float));
  cr_assert_eq(sac_get_buffer(s, SAC_BUF_PARAMS, p, np), 0);
  cr_assert_eq(sac_get_buffer(s, SAC_BUF_STEPS, p + np, 3), 0);
  cr_assert_eq(sac_get_buffer(s, SAC_BUF_TARGET, p + np + 3, nt), 0);
  *n = np + 3 + nt;
  return p;
}

static void fused_equals_unfused(int depth, int recompute) {
  float *p[2];
  size_t n = 0;
  for (int f = 0; f < 2; f++) {
    sac_backend_t *be;
    sac_t *s;
    cr_assert_eq(sac_backend_new("cpu", 1, &be), 0);
    const sac_hparams_t hp = small_hp(3, 1, 16, 8, depth, recompute);
    cr_assert_eq(sac_new(&hp, be, &s), 0);
    sac_set_unfused(s, f == 0);
    p[f] = seven_updates(s, &hp, 0, &n);
    sac_destroy(&s);
    sac_backend_destroy(&be);
  }
  cr_assert_eq(memcmp(p[0], p[1], n * sizeof(float)), 0,
               "depth %d recompute %d: fused and unfused ops differ", depth, recompute);
  free(p[0]), free(p[1]);
}

Test(sac, fused_optimizer_tails_match_unfused_bit_for_bit) { fused_equals_unfused(2, 0); }
Test(sac, fused_ops_match_unfused_bit_for_bit_depth_3_recompute) { fused_equals_unfused(3, 1); }

/* Hidden activations laid out as the cpu backend asks (act_ld: a row of a multiple of 64
 * floats padded by 16; act_members_apart: each critic's block on pages of its own) give
 * the same updates, bit for bit, as rows at their width with the members side by side:
 * the layers and their gradients read and write them at that leading dimension and
 * member stride everywhere. The layout in use is seen through a wrapper of the cpu
 * backend's ops that records the widest leading dimension and member stride linear_fwd
 * was given (hidden 64: one member's (B, 64) rows at 80, members apart), and one whose
 * act_ld and act_members_apart are NULL (the critics' (B, 128) rows at their width). */
static int g_fwd_ldy;
static size_t g_fwd_ms;
static const sac_backend_ops_t *g_cpu_ops;
static void fwd_recording_ld(sac_backend_t *be, const sac_linear_t *L, float *Y, int ldy) {
  if (ldy > g_fwd_ldy)
    g_fwd_ldy = ldy;
  if (L->out_ms > g_fwd_ms)
    g_fwd_ms = L->out_ms;
  g_cpu_ops->linear_fwd(be, L, Y, ldy);
}

static void padded_equals_unpadded(int depth, int recompute, int threads) {
  float *p[2];
  size_t n = 0;
  int widest[2];
  size_t ms[2];
  for (int f = 0; f < 2; f++) {
    sac_backend_t *cpu;
    cr_assert_eq(sac_backend_new("cpu", threads, &cpu), 0);
    g_cpu_ops = cpu->ops;
    sac_backend_ops_t ops = *cpu->ops;
    ops.linear_fwd = fwd_recording_ld;
    if (f == 1)
      ops.act_ld = NULL, ops.act_members_apart = NULL;
    sac_backend_t be = {&ops, cpu->impl};
    sac_t *s;
    const sac_hparams_t hp = small_hp(3, 2, 64, 32, depth, recompute);
    cr_assert_eq(sac_new(&hp, &be, &s), 0);
    g_fwd_ldy = 0, g_fwd_ms = 0;
    p[f] = seven_updates(s, &hp, 1, &n);
    widest[f] = g_fwd_ldy, ms[f] = g_fwd_ms;
    sac_destroy(&s);
    sac_backend_destroy(&cpu);
  }
  cr_expect_eq(widest[0], 64 + 16, "padded, members apart: the widest leading dimension was %d", widest[0]);
  cr_expect(ms[0] >= (size_t)32 * (64 + 16) && ms[0] % 1024 == 0, "members apart: member stride %zu", ms[0]);
  cr_expect_eq(widest[1], 2 * 64, "at the width: the widest leading dimension was %d", widest[1]);
  cr_expect_eq(ms[1], 0, "side by side: member stride %zu", ms[1]);
  cr_assert_eq(memcmp(p[0], p[1], n * sizeof(float)), 0,
               "depth %d recompute %d threads %d: padded and unpadded activations give different updates",
               depth, recompute, threads);
  free(p[0]), free(p[1]);
}

Test(sac, padded_activations_match_unpadded_bit_for_bit) { padded_equals_unpadded(2, 0, 1); }
Test(sac, padded_activations_match_unpadded_depth_3_recompute_2_threads) { padded_equals_unpadded(3, 1, 2); }

/* sac-bench-learner's op count (learner/op_count.c): the fusions save ten ops in an
 * update that steps the actor (4 optimizer ops -> 2, the two noise draws, the actor's
 * last layer and the head -> 1, the critics' last layer with the critic target, with the
 * critic loss, and with the actor and alpha losses: 2 -> 1, 2 -> 1, 3 -> 1, the head's
 * backward with the actor's last layer's 2 -> 1) and six in a critic-only update
 * (2 -> 1, the policy's output 4 -> 1, target and critic loss 2 -> 1 each); the proxy is
 * taken out again (the updates after it run on the backend). The fused backward of a last
 * layer with the layer below's activation (linear_bwd_act) replaces one op by one. */
Test(sac, op_count_sees_the_fused_tails) {
  sac_backend_t *be;
  sac_t *s;
  cr_assert_eq(sac_backend_new("cpu", 1, &be), 0);
  sac_hparams_t hp;
  sac_hparams_default(&hp, 3, 1);
  hp.hidden = 8;
  hp.batch = 4;
  hp.policy_delay = 2;
  cr_assert_eq(sac_new(&hp, be, &s), 0);
  int64_t f[2], u[2];
  cr_assert_eq(sac_count_update_ops(s, be, 0, f), 0);
  cr_assert_eq(sac_count_update_ops(s, be, 1, u), 0);
  cr_assert_eq(u[0] - f[0], 10, "actor step: %lld fused vs %lld unfused", (long long)f[0], (long long)u[0]);
  cr_assert_eq(u[1] - f[1], 6, "critic only: %lld fused vs %lld unfused", (long long)f[1], (long long)u[1]);
  cr_assert(f[0] > f[1], "a critic-only update has fewer ops");
  sac_backend_t other = {be->ops, NULL};
  cr_assert_eq(sac_swap_backend(s, &other), SAC_EINVAL);
  cr_assert_eq(sac_update(s), 0);
  sac_destroy(&s);
  sac_backend_destroy(&be);
}

/* Issue 27, point 8: whole updates at the sizes the learner trains with, op by op against
 * the double-precision reference (sac_ref.h's analytic backward), over several updates, so
 * a gradient buffer that keeps something of the previous update (an op that accumulates
 * where it should overwrite) shows from the second update on. Before each update the
 * float state is read; after it, each op's result is checked against the reference
 * computed from the float state it started from:
 *   the critic gradient (from the pre-update parameters and targets),
 *   the critics' Adam step (from the pre-update moments and the float gradient),
 *   the actor gradient and log alpha's (from the stepped critics, as the update does),
 *   the actor's and log alpha's Adam steps, and the Polyak average of the targets.
 * Tolerances: a gradient block (one layer's W or b of one network, all members) within
 * GRAD_TOL of its largest element. Float32 sums of 256-1024 terms under a float forward
 * give under 2e-6 (the worst seen here, 1 and 2 threads); but where a pre-activation lies
 * within float rounding of 0 (or q1 within rounding of q2) float and double can take the
 * two sides of the ReLU (or of the min) for that one row, which moves every element the
 * row feeds by up to that row's share: 2.4e-3 of the block's largest was seen at batch
 * 1024 on other noise. GRAD_TOL is 4x that, and a buffer that keeps a previous update's
 * values is off by O(1) of the block, far over it. An Adam step's parameter within
 * ADAM_TOL x lr (float rounding of the step is ~1e-7 of it, plus the parameter's own
 * rounding), its moments within 1e-5 relative; the targets within 1e-6 of their largest. */
#define GRAD_TOL 1e-2
#define ADAM_TOL 1e-3
static double *dvec(size_t n) { return malloc(sizeof(double) * (n ? n : 1)); }

/* One network's gradient, block by block; returns the worst relative error seen. */
static double expect_grad_blocks(const sac_mlp_desc_t *d, const float *got, const double *ref,
                                 const char *net, int u, int threads) {
  double worst = 0;
  for (int l = 0; l < d->n_layers; l++)
    for (int wb = 0; wb < 2; wb++) {
      size_t off = wb ? sac_mlp_bias_offset(d, l) : sac_mlp_weight_offset(d, l);
      size_t len = (size_t)d->ensemble * d->sizes[l + 1] * (wb ? 1 : (size_t)d->sizes[l]);
      double big = 0, err = 0;
      size_t at = 0;
      for (size_t i = off; i < off + len; i++) {
        big = fmax(big, fabs(ref[i]));
        if (!(fabs(got[i] - ref[i]) <= err)) /* NaN counts */
          err = isnan(got[i]) ? INFINITY : fabs(got[i] - ref[i]), at = i - off;
      }
      double rel = err / fmax(big, 1e-30);
      worst = fmax(worst, rel);
      cr_expect(
          rel <= GRAD_TOL,
          "update %d, %d threads: %s layer %d %s gradient off by %.3g of its largest (element %zu: %.9g, "
          "double %.9g)",
          u, threads, net, l, wb ? "bias" : "weight", rel, at, (double)got[off + at], ref[off + at]);
    }
  return worst;
}

/* Adam (PyTorch's formula, as backend.h) in double on n parameters from the float state
 * before, with the float gradient g, against the float state after. */
static double expect_adam(const float *p0, const float *m0, const float *v0, const float *g, size_t n,
                          float lr, float t, const float *p1, const float *m1, const float *v1,
                          const char *what, int u, int threads) {
  const double b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
  const double bc1 = 1 - pow(b1, t), bc2 = 1 - pow(b2, t);
  double worst = 0;
  for (size_t i = 0; i < n; i++) {
    double m = b1 * m0[i] + (1 - b1) * g[i], v = b2 * v0[i] + (1 - b2) * (double)g[i] * g[i];
    double p = p0[i] - lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps);
    /* the moments against the size of their two terms (m cancels where g turns) */
    double ep = fabs(p1[i] - p) / lr,
           em = fabs(m1[i] - m) / (b1 * fabs(m0[i]) + (1 - b1) * fabs(g[i]) + 1e-30),
           ev = fabs(v1[i] - v) / (fabs(v) + 1e-30);
    worst = fmax(worst, ep);
    if (!(ep <= ADAM_TOL) || !(em <= 1e-5 || fabs(m1[i] - m) < 1e-30) ||
        !(ev <= 1e-5 || fabs(v1[i] - v) < 1e-30)) {
      cr_expect(
          0,
          "update %d, %d threads: %s Adam, parameter %zu: %.9g (double %.9g), m %.9g (%.9g), v %.9g (%.9g)",
          u, threads, what, i, (double)p1[i], p, (double)m1[i], m, (double)v1[i], v);
      return INFINITY;
    }
  }
  return worst;
}

/* The float state of a sac_t, packed. */
typedef struct {
  float *p, *m, *v, *tgt, *g, steps[3];
} state_t;

static void state_alloc(state_t *st, size_t n, size_t nc) {
  st->p = malloc(n * 4), st->m = malloc(n * 4), st->v = malloc(n * 4), st->g = malloc(n * 4);
  st->tgt = malloc(nc * 4);
}
static void state_read(sac_t *s, state_t *st) {
  size_t n = sac_param_count(s), nc = sac_buffer_len(s, SAC_BUF_TARGET);
  cr_assert_eq(sac_get_buffer(s, SAC_BUF_PARAMS, st->p, n), 0);
  cr_assert_eq(sac_get_buffer(s, SAC_BUF_ADAM_M, st->m, n), 0);
  cr_assert_eq(sac_get_buffer(s, SAC_BUF_ADAM_V, st->v, n), 0);
  cr_assert_eq(sac_get_buffer(s, SAC_BUF_GRADS, st->g, n), 0);
  cr_assert_eq(sac_get_buffer(s, SAC_BUF_TARGET, st->tgt, nc), 0);
  cr_assert_eq(sac_get_buffer(s, SAC_BUF_STEPS, st->steps, 3), 0);
}
static void state_free(state_t *st) { free(st->p), free(st->m), free(st->v), free(st->g), free(st->tgt); }

/* The reference's inputs for the update just run: its batch and its noise (the noise
 * buffers hold the last update's draws). */
static void ref_inputs(sac_t *s, fixture_t *f) {
  free(f->obs), free(f->nobs), free(f->act), free(f->rew), free(f->term), free(f->w);
  free(f->eps_next), free(f->eps_pi);
  f->obs = NULL, f->nobs = NULL, f->act = NULL, f->rew = NULL, f->term = NULL, f->w = NULL;
  f->eps_next = NULL, f->eps_pi = NULL;
  const int B = f->B, O = f->O, A = f->A;
  sac_batch_t *b = sac_batch(s);
  f->obs = dcopy(b->obs, (size_t)B * O), f->nobs = dcopy(b->next_obs, (size_t)B * O);
  f->act = dcopy(b->action, (size_t)B * A), f->rew = dcopy(b->reward, B);
  f->term = dcopy(b->terminated, B), f->w = dcopy(b->weights, B);
  float *e = malloc(sizeof(float) * B * A);
  cr_assert_eq(sac_get_noise(s, 0, e), 0);
  f->eps_next = dcopy(e, (size_t)B * A);
  cr_assert_eq(sac_get_noise(s, 1, e), 0);
  f->eps_pi = dcopy(e, (size_t)B * A);
  free(e);
  const sac_hparams_t *hp = sac_hparams(s);
  f->R = (ref_sac_t){.B = B,
                     .O = O,
                     .A = A,
                     .gamma = hp->gamma,
                     .lsmin = hp->log_std_min,
                     .lsmax = hp->log_std_max,
                     .target_entropy = hp->target_entropy,
                     .ad = sac_actor_desc(s),
                     .cd = sac_critic_desc(s),
                     .obs = f->obs,
                     .act = f->act,
                     .rew = f->rew,
                     .term = f->term,
                     .nobs = f->nobs,
                     .w = f->w,
                     .eps_next = f->eps_next,
                     .eps_pi = f->eps_pi};
}

/* The checks of one update (state a before, b after) against the reference. */
static void check_one_update(sac_t *s, fixture_t *f, const state_t *a, const state_t *b, int u, int threads,
                             double worst[4]) {
  const sac_hparams_t *hp = sac_hparams(s);
  const size_t n = sac_param_count(s), na = sac_actor_param_count(s), nc = n - na - 1;
  double *pa = dcopy(a->p, n), *pb = dcopy(b->p, n), *ta = dcopy(a->tgt, nc);
  double *gc = dvec(nc), *ga = dvec(na), gla;
  /* the critic step */
  ref_critic_grad(&f->R, pa, pa + na, ta, pa[n - 1], gc);
  worst[0] = fmax(worst[0], expect_grad_blocks(sac_critic_desc(s), b->g + na, gc, "critic", u, threads));
  worst[1] =
      fmax(worst[1], expect_adam(a->p + na, a->m + na, a->v + na, b->g + na, nc, hp->lr_critic,
                                 a->steps[0] + 1, b->p + na, b->m + na, b->v + na, "critic", u, threads));
  /* the actor and alpha steps, from the stepped critics */
  ref_actor_grad(&f->R, pa, pb + na, pa[n - 1], ga, &gla);
  worst[0] = fmax(worst[0], expect_grad_blocks(sac_actor_desc(s), b->g, ga, "actor", u, threads));
  cr_expect(fabs(b->g[n - 1] - gla) <= GRAD_TOL * (1 + fabs(gla)),
            "update %d, %d threads: log alpha gradient %.9g, double %.9g", u, threads, (double)b->g[n - 1],
            gla);
  worst[1] = fmax(worst[1], expect_adam(a->p, a->m, a->v, b->g, na, hp->lr_actor, a->steps[1] + 1, b->p, b->m,
                                        b->v, "actor", u, threads));
  worst[1] = fmax(worst[1], expect_adam(a->p + n - 1, a->m + n - 1, a->v + n - 1, b->g + n - 1, 1,
                                        hp->lr_alpha, a->steps[2] + 1, b->p + n - 1, b->m + n - 1,
                                        b->v + n - 1, "log alpha", u, threads));
  /* Polyak, from the stepped critics */
  double big = 0, err = 0;
  for (size_t i = 0; i < nc; i++) {
    double t = (1 - (double)hp->tau) * a->tgt[i] + (double)hp->tau * b->p[na + i];
    big = fmax(big, fabs(t)), err = fmax(err, fabs(b->tgt[i] - t));
  }
  worst[2] = fmax(worst[2], err / big);
  cr_expect(err <= 1e-6 * big, "update %d, %d threads: targets off by %.3g of their largest", u, threads,
            err / big);
  free(pa), free(pb), free(ta), free(gc), free(ga);
}

static void check_whole_updates_h(int O, int A, int H, int B, int threads, int n_updates) {
  fixture_t f;
  memset(&f, 0, sizeof f);
  f.B = B, f.O = O, f.A = A;
  cr_assert_eq(sac_backend_new("cpu", threads, &f.be), 0);
  sac_hparams_t hp;
  sac_hparams_default(&hp, O, A); /* depth 2 */
  hp.hidden = H;
  hp.batch = B;
  hp.seed = 21;
  cr_assert_eq(sac_new(&hp, f.be, &f.sac), 0);
  const size_t n = sac_param_count(f.sac), nc = sac_buffer_len(f.sac, SAC_BUF_TARGET);
  state_t st[2];
  state_alloc(&st[0], n, nc), state_alloc(&st[1], n, nc);
  sac_rng_t rng;
  sac_rng_init(&rng, 31, 7);
  double worst[4] = {0, 0, 0, 0};
  for (int u = 0; u < n_updates; u++) {
    fill_batch(f.sac, &rng, B, O, A, 1);
    state_read(f.sac, &st[0]);
    cr_assert_eq(sac_update(f.sac), 0);
    state_read(f.sac, &st[1]);
    ref_inputs(f.sac, &f);
    check_one_update(f.sac, &f, &st[0], &st[1], u, threads, worst);
  }
  cr_log_info(
      "obs %d act %d hidden %d batch %d, %d threads, %d updates: worst gradient block error %.3g of its "
      "largest, Adam step %.3g of lr, targets %.3g",
      O, A, H, B, threads, n_updates, worst[0], worst[1], worst[2]);
  state_free(&st[0]), state_free(&st[1]);
  f.params = NULL, f.grads = NULL, f.target = NULL;
  fixture_fini(&f);
}

static void check_whole_updates(int O, int A, int B, int threads, int n_updates) {
  check_whole_updates_h(O, A, 256, B, threads, n_updates);
}

/* cheetah: obs 17, act 6, 2 x 256, batch 256 */
Test(sac, whole_updates_at_cheetah_sizes_match_double_1_thread, .timeout = 120) {
  check_whole_updates(17, 6, 256, 1, 3);
}
Test(sac, whole_updates_at_cheetah_sizes_match_double_2_threads, .timeout = 120) {
  check_whole_updates(17, 6, 256, 2, 3);
}
/* Batch 1024: the policy's output layer's weight gradient (256 x 6 per thread over 1024
 * rows) is over the backend's small-GEMM size (1e6 multiply-adds) with a side under 64, so
 * it is cut into row pieces of a transposed A (backend_cpu.c, gemm). */
Test(sac, whole_updates_with_transposed_row_pieces_match_double, .timeout = 180) {
  check_whole_updates(17, 6, 1024, 2, 3);
}

/* The statistics and the actor one update late (issue: no blocking sync per update):
 * fetched after update N, collected after update N + 1, they are update N's exactly as
 * sac_stats and sac_get_actor give right after it, and neither fetch nor collect is a
 * blocking sync (the backend's count stays put), while sac_stats is one (control). */
Test(sac, stats_and_actor_fetched_one_update_late_are_that_updates) {
  sac_backend_t *be;
  sac_t *s;
  cr_assert_eq(sac_backend_new("cpu", 1, &be), 0);
  sac_hparams_t hp;
  sac_hparams_default(&hp, 4, 2);
  hp.hidden = 8;
  hp.batch = 10;
  cr_assert_eq(sac_new(&hp, be, &s), 0);
  const size_t na = sac_actor_param_count(s);
  float *an[5], *al = malloc(na * sizeof(float));
  sac_stats_t sn[5], sl;
  sac_rng_t rng;
  sac_rng_init(&rng, 3, 3);
  for (int u = 0; u < 5; u++) {
    an[u] = malloc(na * sizeof(float));
    fill_batch(s, &rng, hp.batch, 4, 2, 0);
    cr_assert_eq(sac_update(s), 0);
    cr_assert_eq(sac_stats(s, &sn[u]), 0);
    cr_assert_eq(sac_get_actor(s, an[u]), 0);
    sac_backend_counts_t c0, c1;
    cr_assert_eq(sac_backend_counts(be, &c0), 0);
    cr_assert_eq(sac_stats_fetch(s, u & 1), 0);
    cr_assert_eq(sac_actor_fetch(s, u & 1), 0);
    if (u > 0) {
      cr_assert_eq(sac_stats_collect(s, (u - 1) & 1, &sl), 0);
      cr_assert_eq(sac_actor_collect(s, (u - 1) & 1, al), 0);
      cr_assert_eq(memcmp(&sl, &sn[u - 1], sizeof sl), 0, "update %d's statistics", u - 1);
      cr_assert(sac_stats_finite(&sl));
      cr_assert_eq(memcmp(al, an[u - 1], na * sizeof(float)), 0, "update %d's actor", u - 1);
      cr_assert_neq(memcmp(&sl, &sn[u], sizeof sl), 0, "negative control: updates %d and %d agree", u - 1, u);
      cr_assert_neq(memcmp(al, an[u], na * sizeof(float)), 0, "negative control: actors %d and %d agree",
                    u - 1, u);
    }
    cr_assert_eq(sac_backend_counts(be, &c1), 0);
    cr_assert_eq(c1.blocking_syncs, c0.blocking_syncs, "fetch/collect waited like a download");
    cr_assert_eq(sac_stats(s, &sl), 0);
    cr_assert_eq(sac_backend_counts(be, &c0), 0);
    cr_assert_eq(c0.blocking_syncs, c1.blocking_syncs + 1, "control: sac_stats is a blocking download");
  }
  sac_stats_t bad = sn[0];
  bad.actor_loss = NAN;
  cr_assert(!sac_stats_finite(&bad), "a NaN actor loss passed as finite");
  cr_assert_eq(sac_stats_fetch(s, 2), SAC_EINVAL);
  cr_assert_eq(sac_actor_fetch(s, -1), SAC_EINVAL);
  for (int u = 0; u < 5; u++)
    free(an[u]);
  free(al);
  sac_destroy(&s);
  sac_backend_destroy(&be);
}

/* Launches and blocking syncs per update, counted on the cpu backend (which counts what
 * the cuda backend's ops launch in fp32; tests/test_backend_cuda.c checks the two agree
 * on a device): the default network (2 x 256, batch 256) on Pendulum's and HalfCheetah's
 * sizes. An update itself never waits (graphs or not: the count is of the calls sac.c
 * makes), the loss guard on or off (its verdict is taken inside the fused optimizer ops);
 * the unfused ops' host-side guard checks are two waits (control). Issue 25: at most 30
 * launches per update; the figures are docs/CUDA.md's. */
static void launches_and_syncs(int O, int A) {
  sac_backend_t *be;
  sac_t *s;
  cr_assert_eq(sac_backend_new("cpu", 1, &be), 0);
  sac_hparams_t hp;
  sac_hparams_default(&hp, O, A);
  cr_assert_eq(sac_new(&hp, be, &s), 0);
  sac_rng_t rng;
  sac_rng_init(&rng, 5, 3);
  sac_backend_counts_t c[5];
  fill_batch(s, &rng, hp.batch, O, A, 0);
  cr_assert_eq(sac_update(s), 0); /* warm-up */
  cr_assert_eq(sac_backend_counts(be, &c[0]), 0);
  cr_assert_eq(sac_update(s), 0);
  cr_assert_eq(sac_backend_counts(be, &c[1]), 0);
  sac_set_loss_guard(s, 1);
  cr_assert_eq(sac_update(s), 0);
  cr_assert_eq(sac_backend_counts(be, &c[2]), 0);
  sac_set_loss_guard(s, 0);
  sac_set_unfused(s, 1);
  cr_assert_eq(sac_update(s), 0);
  cr_assert_eq(sac_backend_counts(be, &c[3]), 0);
  sac_set_loss_guard(s, 1); /* the control: the unfused ops' guard checks on the host */
  cr_assert_eq(sac_update(s), 0);
  cr_assert_eq(sac_backend_counts(be, &c[4]), 0);
  int64_t launches = c[1].launches - c[0].launches;
  cr_assert_eq(c[1].blocking_syncs - c[0].blocking_syncs, 0, "an update waited for the backend");
  cr_assert_eq(c[2].blocking_syncs - c[1].blocking_syncs, 0,
               "an update with the loss guard on waited for the backend");
  cr_assert_eq(c[4].blocking_syncs - c[3].blocking_syncs, 2,
               "control: the unfused ops' two host-side guard checks not counted");
  cr_assert_leq(launches, 30, "obs %d act %d: %lld launches per update, issue 25's bound is 30", O, A,
                (long long)launches);
  cr_assert_eq(launches, 27, "obs %d act %d: launches per update %lld (docs/CUDA.md says 27)", O, A,
               (long long)launches);
  cr_assert_eq(c[2].launches - c[1].launches, 27);
  cr_assert_eq(c[3].launches - c[2].launches, 46,
               "obs %d act %d: unfused launches %lld (docs/CUDA.md says 46)", O, A,
               (long long)(c[3].launches - c[2].launches));
  sac_destroy(&s);
  sac_backend_destroy(&be);
}

Test(sac, launches_and_blocking_syncs_per_update_default_network) {
  launches_and_syncs(3, 1);
  launches_and_syncs(17, 6);
}

/* A critic-only update (policy_delay 2, odd steps): the policy's output, the target, the
 * critics' forward and backward and the fused critic Adam + Polyak: 15 launches fused, 25
 * unfused (docs/CUDA.md). */
Test(sac, launches_per_critic_only_update) {
  sac_backend_t *be;
  sac_t *s;
  cr_assert_eq(sac_backend_new("cpu", 1, &be), 0);
  sac_hparams_t hp;
  sac_hparams_default(&hp, 17, 6);
  hp.policy_delay = 2;
  cr_assert_eq(sac_new(&hp, be, &s), 0);
  sac_rng_t rng;
  sac_rng_init(&rng, 5, 3);
  fill_batch(s, &rng, hp.batch, 17, 6, 0);
  int64_t n[2];
  for (int unfused = 0; unfused < 2; unfused++) {
    sac_set_unfused(s, unfused);
    sac_backend_counts_t c0, c1;
    cr_assert_eq(sac_update(s), 0); /* an actor step (even) */
    cr_assert_eq(sac_step(s) % 2, 1u);
    cr_assert_eq(sac_backend_counts(be, &c0), 0);
    cr_assert_eq(sac_update(s), 0);
    cr_assert_eq(sac_backend_counts(be, &c1), 0);
    n[unfused] = c1.launches - c0.launches;
  }
  cr_assert_eq(n[0], 15, "fused: %lld launches", (long long)n[0]);
  cr_assert_eq(n[1], 25, "unfused: %lld launches", (long long)n[1]);
  sac_destroy(&s);
  sac_backend_destroy(&be);
}

/* ---- issue 33 ------------------------------------------------------------------------ */

/* Point 1: the time per op. Through sac_profile_update_ops every compute op of an update
 * shows up, as many calls as sac_count_update_ops counts (actor step and critic only,
 * policy_delay 2), under its name and shape, the fused ops by name; the rows' time is
 * the update's minus what runs between the ops: it never exceeds the update (the marks
 * are charged to the right calls) and is most of it (every op was timed). */
static double profile_row_calls(const sac_op_profile_t *pr, const char *name) {
  double n = 0;
  for (int r = 0; r < pr->n_rows; r++)
    if (strcmp(pr->row[r].name, name) == 0)
      n += pr->row[r].calls;
  return n;
}

Test(sac, op_profile_rows_sum_to_the_update_and_name_every_op) {
  sac_backend_t *be;
  sac_t *s;
  cr_assert_eq(sac_backend_new("cpu", 1, &be), 0);
  sac_hparams_t hp;
  sac_hparams_default(&hp, 17, 6);
  hp.hidden = 64, hp.batch = 64, hp.policy_delay = 2;
  cr_assert_eq(sac_new(&hp, be, &s), 0);
  sac_rng_t rng;
  sac_rng_init(&rng, 33, 1);
  fill_batch(s, &rng, hp.batch, 17, 6, 0);
  int64_t counts[2];
  cr_assert_eq(sac_count_update_ops(s, be, 0, counts), 0); /* ends on an actor step: the next is too */
  cr_assert_eq(sac_step(s) % 2, 0u);
  static sac_op_profile_t pr;
  cr_assert_eq(sac_profile_update_ops(s, be, 4, &pr), 0); /* two actor steps, two critic-only */
  cr_assert_eq(pr.updates, 4);
  cr_assert_eq(pr.ops, 2 * counts[0] + 2 * counts[1], "%lld ops timed, %lld counted", (long long)pr.ops,
               (long long)(2 * counts[0] + 2 * counts[1]));
  double calls = 0, sum = 0;
  for (int r = 0; r < pr.n_rows; r++) {
    calls += pr.row[r].calls, sum += pr.row[r].seconds;
    cr_expect_gt(pr.row[r].seconds, 0.0, "row %s has no time", pr.row[r].name);
  }
  cr_assert_eq(calls, (double)pr.ops, "rows hold %g calls of %lld", calls, (long long)pr.ops);
  static const struct {
    const char *name;
    double calls; /* over the 4 updates */
  } want[] = {{"policy_fwd 64->12 B128", 4},
              {"q_head 64->1 x2 B64 (target)", 4},
              {"q_head 64->1 x2 B64 (critic loss)", 4},
              {"q_head 64->1 x2 B64 (actor and alpha losses)", 2},
              {"linear_bwd_act 64->1 x2 B64", 4},
              {"linear_bwd_act 64->1 x2 B64 (dX only)", 2},
              {"policy_bwd 64->12 B64", 2},
              {"adam_polyak (critics, Polyak)", 2},
              {"adam_polyak (critics)", 2},
              {"adam_polyak (actor, alpha, Polyak)", 2},
              {"linear_fwd 64->64 x2 B64", 10},
              {"linear_fwd 17->64 B128", 4}};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
    cr_expect_eq(profile_row_calls(&pr, want[i].name), want[i].calls, "%s: %g calls, %g expected",
                 want[i].name, profile_row_calls(&pr, want[i].name), want[i].calls);
  cr_log_info("op profile: %d rows, %lld ops, ops %.1f us of the update's %.1f us", pr.n_rows,
              (long long)pr.ops, sum * 1e6, pr.update_seconds * 1e6);
  cr_expect_leq(sum, pr.update_seconds, "the rows (%g s) exceed the update (%g s)", sum, pr.update_seconds);
  cr_expect_geq(sum, 0.5 * pr.update_seconds, "the rows (%g s) are under half the update (%g s)", sum,
                pr.update_seconds);
  /* the unfused ops: their own rows, as many calls as counted */
  int64_t uc[2];
  cr_assert_eq(sac_count_update_ops(s, be, 1, uc), 0);
  sac_set_unfused(s, 1);
  cr_assert_eq(sac_profile_update_ops(s, be, 2, &pr), 0);
  cr_expect_eq(pr.ops, uc[0] + uc[1]);
  cr_expect_eq(profile_row_calls(&pr, "policy_fwd 64->12 B128"), 0.0, "unfused: no fused policy output");
  cr_expect_eq(profile_row_calls(&pr, "head_fwd"), 2.0);
  sac_destroy(&s);
  sac_backend_destroy(&be);
}

/* Host batches for the update-per-launch tests: n batches of (B, O, A); importance
 * weights in none (weights 0), all (1) or every other one (2). */
typedef struct {
  float *obs, *nobs, *act, *rew, *term, *w;
  sac_host_batch_t hb;
} hbatch_t;

static void hbatches_make(hbatch_t *h, int n, int B, int O, int A, uint64_t seed, int weights) {
  sac_rng_t rng;
  sac_rng_init(&rng, seed, 4);
  for (int j = 0; j < n; j++) {
    hbatch_t *b = &h[j];
    b->obs = malloc(sizeof(float) * B * O), b->nobs = malloc(sizeof(float) * B * O);
    b->act = malloc(sizeof(float) * B * A);
    b->rew = malloc(sizeof(float) * B), b->term = malloc(sizeof(float) * B), b->w = malloc(sizeof(float) * B);
    for (int i = 0; i < B * O; i++)
      b->obs[i] = (float)sac_rng_uniform_range(&rng, -1, 1),
      b->nobs[i] = (float)sac_rng_uniform_range(&rng, -1, 1);
    for (int i = 0; i < B * A; i++)
      b->act[i] = (float)sac_rng_uniform_range(&rng, -1, 1);
    for (int i = 0; i < B; i++)
      b->rew[i] = (float)sac_rng_uniform_range(&rng, -2, 1), b->term[i] = (float)(i % 4 == 1),
      b->w[i] = (float)sac_rng_uniform_range(&rng, 0.3, 1.2);
    const int w = weights == 1 || (weights == 2 && j % 2);
    b->hb = (sac_host_batch_t){b->obs, b->nobs, b->act, b->rew, b->term, w ? b->w : NULL};
  }
}

static void hbatches_free(hbatch_t *h, int n) {
  for (int j = 0; j < n; j++)
    free(h[j].obs), free(h[j].nobs), free(h[j].act), free(h[j].rew), free(h[j].term), free(h[j].w);
}

/* Writes host batch b into slots (the in-place path, as the replay client does). */
static void write_slots(const sac_batch_slots_t *sl, const sac_host_batch_t *b, int B, int O, int A) {
  memcpy(sl->obs, b->obs, sizeof(float) * B * O);
  memcpy(sl->next_obs, b->next_obs, sizeof(float) * B * O);
  memcpy(sl->action, b->action, sizeof(float) * B * A);
  memcpy(sl->reward, b->reward, sizeof(float) * B);
  memcpy(sl->terminated, b->terminated, sizeof(float) * B);
  if (b->weights)
    memcpy(sl->weights, b->weights, sizeof(float) * B);
}

/* Every state buffer of a learner (parameters, targets, Adam moments, step counters). */
static float *state_of(sac_t *s, size_t *n_out) {
  static const int which[] = {SAC_BUF_PARAMS, SAC_BUF_TARGET, SAC_BUF_ADAM_M, SAC_BUF_ADAM_V, SAC_BUF_STEPS};
  size_t n = 0;
  for (size_t k = 0; k < 5; k++)
    n += sac_buffer_len(s, which[k]);
  float *x = malloc(sizeof(float) * n), *p = x;
  for (size_t k = 0; k < 5; k++) {
    cr_assert_eq(sac_get_buffer(s, which[k], p, sac_buffer_len(s, which[k])), 0);
    p += sac_buffer_len(s, which[k]);
  }
  *n_out = n;
  return x;
}

static sac_t *small_sac(sac_backend_t *be, int B, int delay) {
  sac_hparams_t hp;
  sac_hparams_default(&hp, 5, 3);
  hp.hidden = 16, hp.batch = B, hp.policy_delay = delay, hp.seed = 7;
  sac_t *s;
  cr_assert_eq(sac_new(&hp, be, &s), 0);
  return s;
}

/* Point 3: K updates per launch on the cpu backend give the bits of K single updates on
 * the same batches, in order: every state buffer, the step count and each batch's TD
 * errors, for K = 1, 4 and 7 at an odd batch (37), policy_delay 1 (uniform: no weights)
 * and 2 (prioritised: weights with every batch); launches take
 * their batches staged (sac_load_batches) or written in place (sac_batch_slots_at), one
 * commit each. Negative control: two batches of a launch swapped give other bits. */
static void k_launches(int K, int delay, int in_place, int swap, float **state, size_t *n, float *td) {
  enum { B = 37, O = 5, A = 3, LAUNCHES = 3 };
  sac_backend_t *be;
  cr_assert_eq(sac_backend_new("cpu", 1, &be), 0);
  sac_t *s = small_sac(be, B, delay);
  cr_assert_eq(sac_set_updates_per_launch(s, K), 0);
  cr_assert_eq(sac_updates_per_launch(s), K);
  hbatch_t h[LAUNCHES * 7];
  hbatches_make(h, LAUNCHES * K, B, O, A, 101, delay == 2); /* with weights: every batch has its own */
  for (int l = 0; l < LAUNCHES; l++) {
    sac_host_batch_t hb[7];
    for (int j = 0; j < K; j++)
      hb[j] = h[l * K + j].hb;
    if (swap && l == 1) {
      sac_host_batch_t t = hb[0];
      hb[0] = hb[K - 1], hb[K - 1] = t;
    }
    if (in_place && l != 1) { /* the middle launch staged, to mix the two */
      for (int j = 0; j < K; j++) {
        sac_batch_slots_t sl;
        cr_assert_eq(sac_batch_slots_at(s, j, hb[j].weights != NULL, &sl), 0);
        write_slots(&sl, &hb[j], B, O, A);
      }
      cr_assert_eq(sac_batch_commit(s), 0);
    } else {
      cr_assert_eq(sac_load_batches(s, hb, K), 0);
    }
    cr_assert_eq(sac_update_launch(s), 0);
    cr_assert_eq(sac_td_errors(s, td + (size_t)l * K * B), 0);
  }
  cr_assert_eq(sac_step(s), (uint64_t)(LAUNCHES * K));
  *state = state_of(s, n);
  hbatches_free(h, LAUNCHES * K);
  sac_destroy(&s);
  sac_backend_destroy(&be);
}

/* the reference: the same batches one update at a time (sac_load_batch, sac_update) */
static void single_updates(int n_updates, int delay, float **state, size_t *n, float *td) {
  enum { B = 37, O = 5, A = 3 };
  sac_backend_t *be;
  cr_assert_eq(sac_backend_new("cpu", 1, &be), 0);
  sac_t *s = small_sac(be, B, delay);
  hbatch_t h[21];
  hbatches_make(h, n_updates, B, O, A, 101, delay == 2);
  for (int u = 0; u < n_updates; u++) {
    cr_assert_eq(sac_load_batch(s, &h[u].hb, 1), 0);
    cr_assert_eq(sac_update(s), 0);
    cr_assert_eq(sac_td_errors(s, td + (size_t)u * B), 0);
  }
  *state = state_of(s, n);
  hbatches_free(h, n_updates);
  sac_destroy(&s);
  sac_backend_destroy(&be);
}

Test(sac, k_updates_per_launch_equal_single_updates_bit_for_bit) {
  static const int ks[] = {1, 4, 7};
  static float td_k[21 * 37], td_1[21 * 37];
  for (int delay = 1; delay <= 2; delay++)
    for (size_t i = 0; i < 3; i++) {
      const int K = ks[i];
      float *sk, *s1;
      size_t nk, n1;
      single_updates(3 * K, delay, &s1, &n1, td_1);
      for (int in_place = 0; in_place < 2; in_place++) {
        k_launches(K, delay, in_place, 0, &sk, &nk, td_k);
        cr_assert_eq(nk, n1);
        cr_expect_eq(memcmp(sk, s1, n1 * sizeof(float)), 0, "K %d, policy_delay %d, %s: state differs", K,
                     delay, in_place ? "in place" : "staged");
        cr_expect_eq(memcmp(td_k, td_1, sizeof(float) * 3 * K * 37), 0,
                     "K %d, policy_delay %d: TD errors differ", K, delay);
        free(sk);
      }
      if (K > 1) { /* negative control: the launch's batches out of order */
        k_launches(K, delay, 0, 1, &sk, &nk, td_k);
        cr_expect_neq(memcmp(sk, s1, n1 * sizeof(float)), 0, "K %d: swapped batches went unseen", K);
        free(sk);
      }
      free(s1);
    }
  /* bounds */
  sac_backend_t *be;
  cr_assert_eq(sac_backend_new("cpu", 1, &be), 0);
  sac_t *s = small_sac(be, 5, 1);
  cr_expect_eq(sac_set_updates_per_launch(s, 0), SAC_EINVAL);
  cr_expect_eq(sac_set_updates_per_launch(s, SAC_MAX_UPDATES_PER_LAUNCH + 1), SAC_EINVAL);
  cr_assert_eq(sac_set_updates_per_launch(s, 3), 0);
  sac_batch_slots_t sl;
  cr_expect_eq(sac_batch_slots_at(s, 3, 0, &sl), SAC_EINVAL);
  cr_assert_eq(sac_set_updates_per_launch(s, 1), 0); /* and back */
  cr_expect_eq(sac_batch_slots_at(s, 1, 0, &sl), SAC_EINVAL);
  sac_destroy(&s);
  sac_backend_destroy(&be);
}

/* Point 4 (issue 34's direct intake), through the interface the cuda backend now has too:
 * a batch written in place (sac_batch_slots, as the replay client does) is one host copy
 * per batch, a batch decoded into a buffer and staged (sac_load_batch) two; the two paths
 * give the same bits (state and TD errors) over updates with and without weights. */
static void intake_run(int in_place, float **state, size_t *n, float *td, double *copies_per_batch) {
  enum { B = 37, O = 5, A = 3, N = 6 };
  sac_backend_t *be;
  cr_assert_eq(sac_backend_new("cpu", 1, &be), 0);
  sac_t *s = small_sac(be, B, 1);
  hbatch_t h[N];
  hbatches_make(h, N, B, O, A, 202, 2);
  double c0, b0, c1, b1;
  cr_assert_eq(be->ops->get_metric(be, "host_copies", &c0), 0);
  cr_assert_eq(be->ops->get_metric(be, "staged_batches", &b0), 0);
  for (int u = 0; u < N; u++) {
    if (in_place) {
      sac_batch_slots_t sl;
      cr_assert_eq(sac_batch_slots(s, h[u].hb.weights != NULL, &sl), 0);
      write_slots(&sl, &h[u].hb, B, O, A);
      cr_assert_eq(sac_batch_commit(s), 0);
    } else {
      cr_assert_eq(sac_load_batch(s, &h[u].hb, 1), 0);
    }
    cr_assert_eq(sac_update(s), 0);
    cr_assert_eq(sac_td_errors(s, td + (size_t)u * B), 0);
  }
  cr_assert_eq(be->ops->get_metric(be, "host_copies", &c1), 0);
  cr_assert_eq(be->ops->get_metric(be, "staged_batches", &b1), 0);
  cr_assert_eq(b1 - b0, (double)N, "one commit per batch");
  *copies_per_batch = (c1 - c0) / (b1 - b0);
  *state = state_of(s, n);
  hbatches_free(h, N);
  sac_destroy(&s);
  sac_backend_destroy(&be);
}

Test(sac, in_place_batches_are_one_copy_and_the_bits_of_staged_ones) {
  float *sa, *sb, td_a[6 * 37], td_b[6 * 37];
  size_t na, nb;
  double ca, cb;
  intake_run(1, &sa, &na, td_a, &ca);
  intake_run(0, &sb, &nb, td_b, &cb);
  cr_assert_eq(na, nb);
  cr_expect_eq(ca, 1.0, "in place: %g host copies per batch", ca);
  cr_expect_eq(cb, 2.0, "decoded and staged: %g host copies per batch", cb);
  cr_expect_eq(memcmp(sa, sb, na * sizeof(float)), 0, "in place and staged batches give different state");
  cr_expect_eq(memcmp(td_a, td_b, sizeof td_a), 0, "in place and staged batches give different TD errors");
  free(sa), free(sb);
}

/* Point 2's odd shapes on the cpu backend, whole updates op by op against the double
 * reference (as the cheetah-size tests above): batch 1, 37 and 1000 at hidden 6, and
 * batch 37 at hidden 512; the GPU tests compare the cuda backend with the cpu one at the
 * same shapes (test_backend_cuda: odd_shapes_*). */
Test(sac, whole_updates_at_odd_batches_and_widths_match_double, .timeout = 120) {
  check_whole_updates_h(17, 6, 6, 1, 1, 3);
  check_whole_updates_h(17, 6, 6, 37, 1, 3);
  check_whole_updates_h(3, 1, 6, 1000, 1, 2);
  check_whole_updates_h(17, 6, 512, 37, 1, 1);
}
