/* Tests of replay/sampler: the sum tree's prefix search (against a brute force on a tree
 * of several levels), sampling frequencies against the exact proportional probabilities
 * (prioritised; chi-square with a stated false-alarm rate and a planted-bias control)
 * and against uniformity (uniform) with a fixed seed, the importance weights, and
 * priority updates with the generation check. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/net.h"
#include "common/rng.h"
#include "common/vmath.h"
#include "replay/client.h"
#include "replay/sampler.h"
#include "replay/server.h"
#include "replay/shard.h"
#include "replay/storage.h"
#include "tests/replay_testgen.h"

Test(replay_sampler, sumtree_find_matches_prefix_sums) {
  sac_replay_sumtree_t t;
  cr_assert_eq(sac_replay_sumtree_init(&t, 37), 0);
  double w[37], total = 0;
  for (int i = 0; i < 37; i++) {
    w[i] = (i % 5 == 0) ? 0.0 : (double)(i % 7 + 1) * 0.5;
    sac_replay_sumtree_set(&t, (uint64_t)i, (float)w[i]);
    total += w[i];
  }
  cr_assert_float_eq(t.total, total, 1e-9);
  double acc = 0;
  for (int i = 0; i < 37; i++) {
    if (w[i] == 0.0)
      continue;
    cr_assert_eq(sac_replay_sumtree_find(&t, acc), (uint64_t)i, "start of leaf %d", i);
    cr_assert_eq(sac_replay_sumtree_find(&t, acc + w[i] * 0.999), (uint64_t)i, "end of leaf %d", i);
    acc += w[i];
  }
  sac_replay_sumtree_rebuild(&t);
  cr_assert_float_eq(t.total, total, 1e-9);
  /* the searches side by side find what one at a time finds, in any group size */
  double u[37 * 3];
  uint64_t got[37 * 3];
  for (int i = 0; i < 37 * 3; i++)
    u[i] = total * (double)((i * 53) % 111) / 111.0;
  for (size_t n = 1; n <= 37 * 3; n += 7) {
    sac_replay_sumtree_find_n(&t, u, n, got);
    for (size_t i = 0; i < n; i++)
      cr_assert_eq(got[i], sac_replay_sumtree_find(&t, u[i]), "n %zu, search %zu", n, i);
  }
  sac_replay_sumtree_close(&t);
}

/* The wide sum tree against a brute-force prefix search: 5,000 leaves (3 node levels),
 * a seventh of them zero, then 12,000 changes (set and set_n, past the tree's rebuild
 * every n changes, so that both the running sums changed in place and rebuilt ones are
 * searched). A search may differ from the brute force only within 1e-9 of the total of
 * a boundary between leaves (rounding), and never lands on a zero leaf. */
Test(replay_sampler, wide_sumtree_matches_brute_force) {
  enum { N = 5000 };
  sac_replay_sumtree_t t;
  cr_assert_eq(sac_replay_sumtree_init(&t, N), 0);
  cr_assert_geq(t.levels, 3u);
  sac_rng_t rng;
  sac_rng_init(&rng, 77, 0);
  for (uint64_t i = 0; i < N; i++)
    sac_replay_sumtree_set(&t, i, i % 7 == 3 ? 0.0f : (float)(0.01 + 5.0 * sac_rng_uniform(&rng)));
  uint64_t idx[64];
  float val[64];
  for (int round = 0; round < 12000 / 64; round++) {
    for (int k = 0; k < 64; k++) {
      idx[k] = sac_rng_below32(&rng, N);
      val[k] = idx[k] % 7 == 3 ? 0.0f : (float)(0.01 + 50.0 * sac_rng_uniform(&rng));
    }
    if (round % 2)
      sac_replay_sumtree_set_n(&t, idx, val, 64);
    else
      for (int k = 0; k < 64; k++)
        sac_replay_sumtree_set(&t, idx[k], val[k]);
  }
  static double prefix[N + 1];
  for (int i = 0; i < N; i++)
    prefix[i + 1] = prefix[i] + (double)t.leaf[i];
  cr_assert_float_eq(t.total, prefix[N], 1e-9 * prefix[N]);
  double u[256];
  uint64_t got[256];
  int near_edge = 0;
  for (int round = 0; round < 80; round++) {
    for (int k = 0; k < 256; k++)
      u[k] = sac_rng_uniform(&rng) * t.total;
    sac_replay_sumtree_find_n(&t, u, 256, got);
    for (int k = 0; k < 256; k++) {
      cr_assert_eq(got[k], sac_replay_sumtree_find(&t, u[k]), "find_n and find differ");
      cr_assert_gt(t.leaf[got[k]], 0.0f, "a search landed on a zero leaf");
      int lo = 0, hi = N; /* brute force: the last i with prefix[i] <= u */
      while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (prefix[mid] <= u[k])
          lo = mid;
        else
          hi = mid;
      }
      if ((uint64_t)lo != got[k]) {
        const double edge = fmin(fabs(u[k] - prefix[got[k]]), fabs(u[k] - prefix[got[k] + 1]));
        cr_assert_lt(edge, 1e-9 * t.total, "u %.17g: leaf %llu, brute force %d", u[k],
                     (unsigned long long)got[k], lo);
        near_edge++;
      }
    }
  }
  cr_assert_lt(near_edge, 5, "%d searches off at a boundary", near_edge);
  sac_replay_sumtree_close(&t);
}

/* A batch of priority updates (sac_replay_priority_set_n: changes merged per node on their
 * way up) leaves the tree as the same updates applied one at a time in order: 700 updates
 * (past one chunk of 256) in sorted runs (a stratified sample's order: many in one leaf
 * group and one node), a slot updated twice in one batch (the later value stays), stale
 * generations, and a slot with no transition. Two trees over one storage, one updated
 * leaf by leaf (sac_replay_sumtree_set), the other by batches: the same leaves bit for bit,
 * the same applied counts, running sums within rounding of a rebuild, and the same picks. */
Test(replay_sampler, batched_priority_updates_equal_one_at_a_time) {
  enum { N = 6000, U = 700 };
  sac_replay_storage_t st;
  sac_replay_storage_config_t c = {4 * (uint64_t)N, 4, 1, 0, 0, (uint32_t)N, 16};
  cr_assert_eq(sac_replay_storage_init(&st, &c), 0);
  tg_t g;
  tg_init(&g, 1, 1, 4, 1, 1000000, (uint32_t)N); /* one env, no episode end: slots 0..N-1 */
  uint32_t stored = 0;
  cr_assert_eq(sac_replay_storage_insert(&st, 1, tg_next(&g), &stored), 0);
  tg_free(&g);
  sac_replay_sumtree_t one, batch;
  cr_assert_eq(sac_replay_sumtree_init(&one, 4 * (uint64_t)N), 0);
  cr_assert_eq(sac_replay_sumtree_init(&batch, 4 * (uint64_t)N), 0);
  for (uint64_t i = 0; i < N; i++) {
    sac_replay_sumtree_set(&one, i, 1.0f);
    sac_replay_sumtree_set(&batch, i, 1.0f);
  }
  sac_rng_t rng;
  sac_rng_init(&rng, 5, 0);
  static uint32_t slot[U], gen[U];
  static float p[U];
  for (int round = 0; round < 6; round++) {
    uint32_t at = sac_rng_below32(&rng, N / 2);
    for (int k = 0; k < U; k++) { /* rising runs of nearby slots, restarting now and then */
      if (k % 100 == 0)
        at = sac_rng_below32(&rng, N / 2);
      at += sac_rng_below32(&rng, 4);
      slot[k] = at < N + 8 ? at : N + 8; /* past N: slots without a transition */
      gen[k] = k % 37 == 5 ? 1 : 0;       /* stale */
      p[k] = (float)(5.0 * sac_rng_uniform(&rng));
    }
    slot[U - 1] = slot[U - 2]; /* one slot twice in a batch: the later value stays */
    gen[U - 1] = gen[U - 2] = 0;
    uint32_t applied_one = 0; /* the reference: the rule spelt out, then set leaf by leaf */
    for (int k = 0; k < U; k++)
      if (slot[k] < c.capacity && (*sac_replay_flags(&st, slot[k]) & SAC_SLOT_READY) &&
          sac_replay_storage_generation(&st, slot[k]) == gen[k]) {
        /* the power as the sampler takes it (common/vmath.h: an element's bits do not
         * depend on the array around it, test_vmath) */
        const float base = (float)((double)p[k] + 1e-6);
        float v;
        sac_vpowf(&base, 0.6f, &v, 1);
        sac_replay_sumtree_set(&one, slot[k], v);
        one.max_leaf = v > one.max_leaf ? v : one.max_leaf;
        applied_one++;
      }
    const uint32_t applied = sac_replay_priority_set_n(&st, &batch, U, slot, gen, p, 0.6, 1e-6);
    cr_assert_eq(applied, applied_one);
    cr_assert_lt(applied, (uint32_t)U, "the batch holds stale updates");
    cr_assert(memcmp(one.leaf, batch.leaf, 4 * (size_t)N * sizeof(float)) == 0, "round %d: leaves differ", round);
    cr_assert_float_eq(batch.total, one.total, 1e-9 * one.total);
    cr_assert_float_eq(batch.max_leaf, one.max_leaf, 0.0);
  }
  const double total = batch.total;
  sac_replay_sumtree_rebuild(&one);
  cr_assert_float_eq(total, one.total, 1e-9 * one.total, "running sums drifted from the leaves");
  for (int k = 0; k < 2000; k++) {
    const double u = (k + 0.5) / 2000.0 * one.total;
    const uint64_t a = sac_replay_sumtree_find(&one, u), b = sac_replay_sumtree_find(&batch, u);
    double prefix = 0.0; /* picks may differ only where u is within rounding of a leaf boundary */
    for (uint64_t i = 0; i <= (a < b ? a : b); i++)
      prefix += one.leaf[i];
    cr_assert(a == b || fabs(u - prefix) < 1e-9 * one.total, "u %.17g: %llu and %llu", u,
              (unsigned long long)a, (unsigned long long)b);
  }
  sac_replay_sumtree_close(&one);
  sac_replay_sumtree_close(&batch);
  sac_replay_storage_close(&st);
}

/* What the prioritised sampler trusts: a positive leaf only on a slot that holds a
 * transition (it picks by the leaf alone, without reading the slot's record). A ring of
 * 1,024 slots is overwritten many times by 8 environments with short episodes (episode-end
 * and pending observation slots, reused tails) while every batch's sampled rows get new
 * priorities, some of them stale; after every insert and every update, every slot with a
 * positive leaf is READY. Control: the same check on a leaf planted on an observation-only
 * slot fails. */
static int leaves_only_on_transitions(const sac_replay_storage_t *st, const sac_replay_sumtree_t *t) {
  for (uint64_t s = 0; s < sac_replay_storage_filled(st); s++)
    if (t->leaf[s] > 0.0f && !(*sac_replay_flags(st, s) & SAC_SLOT_READY))
      return 0;
  return 1;
}

Test(replay_sampler, positive_leaves_only_on_transitions) {
  sac_replay_storage_t st;
  sac_replay_storage_config_t c = {1024, 4, 1, 0, 0, 64, 16};
  cr_assert_eq(sac_replay_storage_init(&st, &c), 0);
  sac_replay_sumtree_t t;
  cr_assert_eq(sac_replay_sumtree_init(&t, 1024), 0);
  st.tree = &t;
  tg_t g;
  tg_init(&g, 1, 8, 4, 1, 12, 6); /* 8 envs, episodes of 6..12 steps, 6 rows per env a batch */
  sac_rng_t rng;
  sac_rng_init(&rng, 31, 0);
  uint32_t slots[64], gen[64];
  float w[64], p[64];
  for (int b = 0; b < 400; b++) {
    uint32_t stored = 0;
    cr_assert_eq(sac_replay_storage_insert(&st, 1, tg_next(&g), &stored), 0);
    cr_assert(leaves_only_on_transitions(&st, &t), "batch %d: a positive leaf on a slot with no transition", b);
    if (sac_replay_sample_prioritized(&st, &t, &rng, 64, 0.4f, slots, w) != 0)
      continue;
    for (int k = 0; k < 64; k++) {
      gen[k] = sac_replay_storage_generation(&st, slots[k]) - (k % 9 == 4); /* some stale */
      p[k] = (float)(3.0 * sac_rng_uniform(&rng));
    }
    sac_replay_priority_set_n(&st, &t, 64, slots, gen, p, 0.6, 1e-6);
    cr_assert(leaves_only_on_transitions(&st, &t), "batch %d: a priority update put a leaf on a slot with no transition", b);
  }
  uint64_t obs_only = SAC_SLOT_NONE;
  for (uint64_t s = 0; s < sac_replay_storage_filled(&st) && obs_only == SAC_SLOT_NONE; s++)
    if (!(*sac_replay_flags(&st, s) & SAC_SLOT_READY))
      obs_only = s;
  cr_assert_neq(obs_only, SAC_SLOT_NONE, "the ring holds observation-only slots");
  sac_replay_sumtree_set(&t, obs_only, 1.0f); /* control */
  cr_assert(!leaves_only_on_transitions(&st, &t), "the check missed a planted leaf");
  tg_free(&g);
  sac_replay_sumtree_close(&t);
  sac_replay_storage_close(&st);
}

/* One update per slot and asked generation (the slot's by definition, one older, one newer) through
 * sac_replay_priority_set_n; checks each is applied exactly when the generation is the
 * slot's and the slot holds a transition. Returns how many were applied. */
static uint64_t generation_sweep(sac_replay_storage_t *st, sac_replay_sumtree_t *t, uint32_t cap) {
  uint64_t got = 0;
  for (uint32_t s = 0; s < cap; s++)
    for (int d = -1; d <= 1; d++) {
      /* the definition (times the slot was handed out again), not the storage's shortcut */
      const uint32_t truth = (uint32_t)((st->alloc_count - 1 - s) / st->cfg.capacity);
      const uint32_t asked = truth + (uint32_t)d;
      cr_assert_eq(sac_replay_storage_generation(st, s), truth, "slot %u: generation", s);
      const float p = 0.5f;
      const int ready = (*sac_replay_flags(st, s) & SAC_SLOT_READY) != 0;
      const uint32_t applied = sac_replay_priority_set_n(st, t, 1, &s, &asked, &p, 0.6, 1e-6);
      cr_assert_eq(applied, (uint32_t)(d == 0 && ready), "slot %u (generation %u, cursor %llu): generation %u %s",
                   s, truth, (unsigned long long)st->cursor, asked, applied ? "applied" : "refused");
      got += applied;
    }
  return got;
}

/* Slot generations (sac_replay_storage_generation, worked out from the cursor and its laps
 * without a division) match their definition on a ring written over several times, at
 * every slot and on both sides of the cursor, and a batched priority update is applied
 * exactly when it names the slot's generation. Then again with every slot marked as a
 * transition, so that the newest slot (an observation waiting for its next step, just
 * below the cursor) is checked too. */
Test(replay_sampler, priority_updates_check_generations_across_wraps) {
  enum { C = 1024 };
  sac_replay_storage_t st;
  sac_replay_storage_config_t c = {C, 4, 1, 0, 0, 64, 16};
  cr_assert_eq(sac_replay_storage_init(&st, &c), 0);
  sac_replay_sumtree_t t;
  cr_assert_eq(sac_replay_sumtree_init(&t, C), 0);
  st.tree = &t;
  tg_t g;
  tg_init(&g, 1, 8, 4, 1, 12, 6);
  for (int b = 0; b < 97; b++) { /* about 4.5 times round the ring: the cursor mid-ring */
    uint32_t stored = 0;
    cr_assert_eq(sac_replay_storage_insert(&st, 1, tg_next(&g), &stored), 0);
  }
  cr_assert_gt(st.alloc_count, 3 * (uint64_t)C);
  cr_assert_neq(st.cursor, 0, "the cursor is mid-ring");
  cr_assert_gt(generation_sweep(&st, &t, C), C / 2, "most slots hold a transition");
  for (uint32_t s = 0; s < C; s++)
    *sac_replay_flags(&st, s) |= SAC_SLOT_READY;
  cr_assert_eq(generation_sweep(&st, &t, C), C);
  tg_free(&g);
  sac_replay_sumtree_close(&t);
  sac_replay_storage_close(&st);
}

/* Upper quantile of the chi-square distribution with df degrees of freedom at a
 * false-alarm rate whose standard normal quantile is z (Wilson and Hilferty 1931:
 * (X/df)^(1/3) is nearly normal; relative error under 1e-3 for df > 100). */
static double chi2_quantile(double df, double z) {
  const double a = 2.0 / (9.0 * df), c = 1.0 - a + z * sqrt(a);
  return df * c * c * c;
}

/* Draws `draws` rows with sac_replay_sample_prioritized (batches of 1000, beta 0) from a
 * storage of n transitions whose leaves are `tree_leaf`, and returns Pearson's chi-square
 * of the counts against the exact probabilities p_i / sum p of `want` (zero bins must
 * get no draw: *zero_hits counts those that did), with its degrees of freedom. */
static double prioritized_chi2(const float *tree_leaf, const float *want, int n, int draws, int *df,
                               int *zero_hits) {
  sac_replay_storage_t st;
  sac_replay_storage_config_t c = {4 * (uint64_t)n, 4, 1, 0, 0, (uint32_t)n, 16}; /* capacity >= 4 x rows */
  cr_assert_eq(sac_replay_storage_init(&st, &c), 0);
  sac_replay_sumtree_t t;
  cr_assert_eq(sac_replay_sumtree_init(&t, 4 * (uint64_t)n), 0);
  st.tree = &t;
  tg_t g;
  tg_init(&g, 1, 1, 4, 1, 1000000, (uint32_t)n); /* one env, no episode end: slots 0..n-1 */
  uint32_t stored = 0;
  cr_assert_eq(sac_replay_storage_insert(&st, 1, tg_next(&g), &stored), 0);
  cr_assert_eq(stored, (uint32_t)n);
  tg_free(&g);
  for (int i = 0; i < n; i++)
    sac_replay_sumtree_set(&t, (uint64_t)i, tree_leaf[i]);
  sac_replay_sumtree_set(&t, (uint64_t)n, 0.0f); /* the stream's pending observation slot */
  double *count = calloc((size_t)n, sizeof *count), sum = 0.0;
  uint32_t slots[1000];
  float w[1000];
  sac_rng_t rng;
  sac_rng_init(&rng, 2024, 0);
  for (int d = 0; d < draws / 1000; d++) {
    cr_assert_eq(sac_replay_sample_prioritized(&st, &t, &rng, 1000, 0.0f, slots, w), 0);
    for (int k = 0; k < 1000; k++) {
      cr_assert_lt(slots[k], (uint32_t)n);
      count[slots[k]] += 1;
    }
  }
  for (int i = 0; i < n; i++)
    sum += want[i];
  double x2 = 0.0;
  *df = -1, *zero_hits = 0;
  for (int i = 0; i < n; i++) {
    if (want[i] == 0.0f) {
      *zero_hits += count[i] > 0;
      continue;
    }
    const double e = (double)draws * want[i] / sum;
    x2 += (count[i] - e) * (count[i] - e) / e;
    ++*df;
  }
  free(count);
  sac_replay_sumtree_close(&t);
  sac_replay_storage_close(&st);
  return x2;
}

/* The prioritised sampler's distribution against the exact proportional probabilities:
 * 3,000 transitions (in a tree of 12,000 leaves: 4 node levels) with priorities spread over two decades
 * and every eleventh zero, 2,000,000 rows drawn. Pearson's chi-square is compared with
 * the chi-square quantile at a false-alarm rate of 1e-6 (z = 4.753); for independent
 * draws that is the rate at which a correct sampler fails, and stratified draws vary
 * less, so less. The seed is fixed: the outcome is the same on every run. Zero
 * priorities must never be drawn. Negative control: the same draws from a tree with a
 * planted bias (the last leaf of every 16-leaf group, the group scan's edge, weighs 1.25x
 * what the expected probabilities say) must fail the same test. */
Test(replay_sampler, prioritized_matches_exact_probabilities, .timeout = 60) {
  enum { N = 3000, DRAWS = 2000000 };
  static float p[N], biased[N];
  for (int i = 0; i < N; i++) {
    p[i] = i % 11 == 5 ? 0.0f : (float)(0.2 + (double)((i * 7919) % 97) * 0.21);
    biased[i] = i % SAC_SUMTREE_GROUP == SAC_SUMTREE_GROUP - 1 ? 1.25f * p[i] : p[i];
  }
  int df = 0, zero_hits = 0;
  const double x2 = prioritized_chi2(p, p, N, DRAWS, &df, &zero_hits);
  const double crit = chi2_quantile(df, 4.753);
  cr_log_info("prioritized vs exact: chi2 %.1f, df %d, critical %.1f (false alarm 1e-6)", x2, df, crit);
  cr_assert_eq(zero_hits, 0, "%d zero-priority transitions were drawn", zero_hits);
  cr_assert_lt(x2, crit, "chi-square %.1f over %.1f (df %d)", x2, crit, df);
  const double x2b = prioritized_chi2(biased, p, N, DRAWS, &df, &zero_hits);
  cr_log_info("planted bias: chi2 %.1f, critical %.1f", x2b, crit);
  cr_assert_gt(x2b, crit, "the test missed a 1.25x bias on one leaf in 16 (chi2 %.1f)", x2b);
}

/* A shard with `n` transitions (one env, no episode ends for n steps). */
static sac_replay_shard_t *filled_shard(sac_replay_sampler_kind_t kind, uint32_t n, uint64_t cap) {
  sac_replay_shard_config_t c;
  sac_replay_shard_config_default(&c);
  c.capacity = cap;
  c.obs_dim = 4;
  c.act_dim = 1;
  c.sampler = kind;
  c.alpha = 1.0;
  c.priority_eps = 0.0;
  c.min_size = 1;
  c.max_batch_rows = 256;
  c.max_sample_batch = 1024;
  c.seed = 12345;
  sac_replay_shard_t *sh = sac_replay_shard_new(&c, NULL);
  cr_assert_not_null(sh);
  tg_t g;
  tg_init(&g, 1, 1, 4, 1, 1000000, n); /* one env, episodes far longer than n */
  const sac_wire_transitions_t *t = tg_next(&g);
  sac_wire_transitions_t v = *t;
  v.seq = 1;
  sac_replay_insert_result_t r;
  cr_assert_eq(sac_replay_shard_insert(sh, &v, &r), 0);
  cr_assert_eq(r.stored, n);
  tg_free(&g);
  return sh;
}

/* Pearson chi-square of counts against expected frequencies. */
static double chi2(const double *count, const double *expect, int k) {
  double x = 0;
  for (int i = 0; i < k; i++)
    x += (count[i] - expect[i]) * (count[i] - expect[i]) / expect[i];
  return x;
}

Test(replay_sampler, prioritized_frequencies_match_priorities) {
  enum { N = 100, DRAWS = 200 * 1024, B = 1024 };
  sac_replay_shard_t *sh = filled_shard(SAC_REPLAY_PRIORITIZED, N, 4096);
  /* priority of the transition at step i is i + 1 (alpha 1, eps 0) */
  sac_replay_sample_t s;
  cr_assert_eq(sac_replay_shard_sample(sh, N, 0.0f, &s), 0);
  uint64_t idx_by_step[N];
  int seen[N] = {0};
  /* learn every transition's index from samples (all start at equal priority) */
  for (int round = 0; round < 200; round++) {
    cr_assert_eq(sac_replay_shard_sample(sh, N, 0.0f, &s), 0);
    for (uint32_t i = 0; i < s.n; i++) {
      int step = (int)s.obs[i * 4 + 1];
      idx_by_step[step] = s.indices[i];
      seen[step] = 1;
    }
  }
  for (int i = 0; i < N; i++)
    cr_assert(seen[i], "step %d never sampled at equal priority", i);
  float prio[N];
  for (int i = 0; i < N; i++)
    prio[i] = (float)(i + 1);
  uint32_t ok, stale, foreign;
  sac_replay_shard_update_priorities(sh, N, idx_by_step, prio, &ok, &stale, &foreign);
  cr_assert_eq(ok, N);
  double count[N] = {0}, expect[N];
  for (int d = 0; d < DRAWS / B; d++) {
    cr_assert_eq(sac_replay_shard_sample(sh, B, 0.5f, &s), 0);
    float wmax = 0;
    for (uint32_t i = 0; i < s.n; i++) {
      int step = (int)s.obs[i * 4 + 1];
      count[step] += 1;
      /* w = (N P)^-beta / max: for P proportional to step + 1, w * sqrt(step + 1) is
       * the same for every row of the batch */
      if (s.weights[i] > wmax)
        wmax = s.weights[i];
    }
    cr_assert_float_eq(wmax, 1.0f, 1e-6, "weights are normalised by the batch maximum");
    float ref = s.weights[0] * sqrtf(s.obs[1] + 1.0f);
    for (uint32_t i = 0; i < s.n; i++)
      cr_assert_float_eq(s.weights[i] * sqrtf(s.obs[i * 4 + 1] + 1.0f), ref, 1e-4f * ref,
                         "importance weight of row %u", i);
  }
  double sum = N * (N + 1) / 2.0;
  double tv = 0;
  for (int i = 0; i < N; i++) {
    expect[i] = DRAWS * (i + 1) / sum;
    tv += fabs(count[i] / DRAWS - (i + 1) / sum);
  }
  double x2 = chi2(count, expect, N);
  /* Tolerance: with 99 degrees of freedom the chi-square statistic has mean 99 and
   * standard deviation 14 for independent draws (stratified draws give less); 170 is
   * five standard deviations. The seed is fixed, so this is deterministic. Total
   * variation distance must be under 2%. */
  cr_log_info("prioritized: chi2 %.1f (df 99), total variation %.4f", x2, tv / 2);
  cr_assert_lt(x2, 170.0, "chi-square %.1f", x2);
  cr_assert_lt(tv / 2, 0.02, "total variation %.4f", tv / 2);
  sac_replay_shard_destroy(&sh);
}

Test(replay_sampler, uniform_frequencies_are_flat) {
  enum { N = 100, DRAWS = 200 * 1024, B = 1024 };
  sac_replay_shard_t *sh = filled_shard(SAC_REPLAY_UNIFORM, N, 4096);
  double count[N] = {0}, expect[N];
  sac_replay_sample_t s;
  for (int d = 0; d < DRAWS / B; d++) {
    cr_assert_eq(sac_replay_shard_sample(sh, B, 0.4f, &s), 0);
    for (uint32_t i = 0; i < s.n; i++) {
      count[(int)s.obs[i * 4 + 1]] += 1;
      cr_assert_eq(s.weights[i], 1.0f);
    }
  }
  for (int i = 0; i < N; i++)
    expect[i] = (double)DRAWS / N;
  double x2 = chi2(count, expect, N);
  cr_log_info("uniform: chi2 %.1f (df 99)", x2);
  cr_assert_lt(x2, 170.0, "chi-square %.1f (tolerance as in the prioritised test)", x2);
  sac_replay_shard_destroy(&sh);
}

Test(replay_sampler, uniform_skips_observation_only_slots) {
  /* 4 envs with very short episodes: a third of the slots hold final observations */
  sac_replay_shard_config_t c;
  sac_replay_shard_config_default(&c);
  c.capacity = 4096;
  c.obs_dim = 4;
  c.act_dim = 1;
  c.min_size = 1;
  c.max_batch_rows = 256;
  c.max_sample_batch = 512;
  sac_replay_shard_t *sh = sac_replay_shard_new(&c, NULL);
  tg_t g;
  tg_init(&g, 9, 4, 4, 1, 2, 8);
  for (int b = 1; b <= 20; b++) {
    sac_wire_transitions_t v = *tg_next(&g);
    v.seq = (uint64_t)b;
    sac_replay_insert_result_t r;
    cr_assert_eq(sac_replay_shard_insert(sh, &v, &r), 0);
  }
  sac_replay_sample_t s;
  for (int k = 0; k < 20; k++) {
    cr_assert_eq(sac_replay_shard_sample(sh, 512, 0.0f, &s), 0);
    for (uint32_t i = 0; i < s.n; i++) {
      const char *why;
      cr_assert(
          tg_check(4, 1, s.obs + i * 4, s.action + i, s.reward[i], s.terminated[i], s.next_obs + i * 4, &why),
          "%s", why);
    }
  }
  sac_replay_shard_destroy(&sh);
  tg_free(&g);
}

Test(replay_sampler, priority_update_to_overwritten_slot_is_ignored) {
  sac_replay_shard_t *sh = filled_shard(SAC_REPLAY_PRIORITIZED, 64, 1024);
  sac_replay_sample_t s;
  cr_assert_eq(sac_replay_shard_sample(sh, 1, 0.0f, &s), 0);
  uint64_t idx = s.indices[0];
  cr_assert_eq(SAC_WIRE_INDEX_SHARD(idx), 0);
  cr_assert_eq(SAC_WIRE_INDEX_GEN(idx), 0);
  /* same slot, older generation: stale */
  uint64_t older = SAC_WIRE_INDEX(0, 1, SAC_WIRE_INDEX_SLOT(idx));
  float p = 5.0f;
  uint32_t ok, stale, foreign;
  sac_replay_shard_update_priorities(sh, 1, &older, &p, &ok, &stale, &foreign);
  cr_assert_eq(ok, 0);
  cr_assert_eq(stale, 1);
  /* another shard's index, and a slot out of range: foreign */
  uint64_t other = SAC_WIRE_INDEX(3, 0, SAC_WIRE_INDEX_SLOT(idx));
  uint64_t far = SAC_WIRE_INDEX(0, 0, 999999);
  sac_replay_shard_update_priorities(sh, 1, &other, &p, &ok, &stale, &foreign);
  cr_assert_eq(foreign, 1);
  sac_replay_shard_update_priorities(sh, 1, &far, &p, &ok, &stale, &foreign);
  cr_assert_eq(foreign, 1);
  /* current generation: applied */
  sac_replay_shard_update_priorities(sh, 1, &idx, &p, &ok, &stale, &foreign);
  cr_assert_eq(ok, 1);
  /* overwrite everything (capacity 1024): the old index is now stale */
  tg_t g;
  tg_init(&g, 2, 1, 4, 1, 1000000, 200);
  for (int b = 1; b <= 8; b++) {
    sac_wire_transitions_t v = *tg_next(&g);
    v.seq = (uint64_t)b;
    sac_replay_insert_result_t r;
    cr_assert_eq(sac_replay_shard_insert(sh, &v, &r), 0);
  }
  sac_replay_shard_update_priorities(sh, 1, &idx, &p, &ok, &stale, &foreign);
  cr_assert_eq(ok, 0);
  cr_assert_eq(stale, 1);
  sac_replay_shard_stats_t st;
  sac_replay_shard_stats(sh, &st);
  cr_assert_eq(st.priority_stale_total, 2);
  cr_assert_eq(st.priority_foreign_total, 2);
  sac_replay_shard_destroy(&sh);
  tg_free(&g);
}

/* A sample written in place (sac_replay_shard_sample_to, the shard server's reply built
 * in the message) holds exactly the rows, indices and weights of the ordinary sample
 * (sac_replay_shard_sample_as) from a twin shard in the same state, written at odd
 * offsets (a message's payloads are not aligned): uniform and prioritised, f32 and fp16,
 * from a buffer small enough for the caches and one past the size where the gather asks
 * for rows ahead (8 MB of observation rows). */
static void in_place_equals_scratch(sac_replay_sampler_kind_t kind, uint32_t rows, uint32_t precision) {
  const uint32_t O = 17, A = 6, n = 256, es = precision == SAC_WIRE_F16 ? 2 : 4;
  sac_replay_shard_config_t c;
  sac_replay_shard_config_default(&c);
  c.capacity = 2ull * rows, c.obs_dim = O, c.act_dim = A, c.sampler = kind, c.min_size = 1,
  c.max_batch_rows = 4096, c.seed = 99;
  sac_replay_shard_t *a = sac_replay_shard_new(&c, NULL), *b = sac_replay_shard_new(&c, NULL);
  cr_assert(a && b);
  tg_t g;
  tg_init(&g, 1, 16, O, A, 500, 256);
  uint64_t stored = 0;
  for (uint64_t k = 1; stored < rows; k++) {
    sac_wire_transitions_t v = *tg_next(&g);
    v.seq = k;
    sac_replay_insert_result_t r;
    cr_assert_eq(sac_replay_shard_insert(a, &v, &r), 0);
    cr_assert_eq(sac_replay_shard_insert(b, &v, &r), 0);
    stored += r.stored;
  }
  tg_free(&g);
  const size_t ob = (size_t)n * O * es, ab = (size_t)n * A * es;
  unsigned char *buf = malloc(2 * ob + ab + (size_t)n * 20 + 64);
  cr_assert_not_null(buf);
  unsigned char *p = buf + 3; /* odd: every array unaligned */
  sac_replay_sample_dst_t d = {.obs = p};
  d.action = d.obs + ob, d.reward = d.action + ab, d.terminated = d.reward + 4 * n;
  d.next_obs = d.terminated + 4 * n, d.indices = d.next_obs + ob, d.weights = d.indices + 8 * n;
  for (int rep = 0; rep < 5; rep++) {
    sac_replay_sample_t s;
    cr_assert_eq(sac_replay_shard_sample_as(a, n, 0.4f, precision, &s), 0);
    memset(buf, 0x5a, 2 * ob + ab + (size_t)n * 20 + 64);
    cr_assert_eq(sac_replay_shard_sample_to(b, n, 0.4f, precision, &d), 0);
    const void *so = precision ? (const void *)s.obs16 : (const void *)s.obs;
    const void *sa = precision ? (const void *)s.action16 : (const void *)s.action;
    const void *sn = precision ? (const void *)s.next_obs16 : (const void *)s.next_obs;
    cr_assert(memcmp(d.obs, so, ob) == 0 && memcmp(d.next_obs, sn, ob) == 0 && memcmp(d.action, sa, ab) == 0,
              "rows differ (rep %d)", rep);
    cr_assert(memcmp(d.reward, s.reward, 4 * n) == 0 && memcmp(d.terminated, s.terminated, 4 * n) == 0);
    cr_assert(memcmp(d.indices, s.indices, 8 * n) == 0 && memcmp(d.weights, s.weights, 4 * n) == 0);
  }
  sac_replay_sample_dst_t none = d;
  cr_assert_eq(sac_replay_shard_sample_to(b, 0, 0.4f, precision, &none), SAC_EINVAL);
  cr_assert_eq(sac_replay_shard_sample_to(b, n, 0.4f, 7, &none), SAC_EINVAL);
  free(buf);
  sac_replay_shard_destroy(&a);
  sac_replay_shard_destroy(&b);
}

Test(replay_sampler, sample_written_in_place_equals_the_scratch_sample) {
  for (uint32_t prec = SAC_WIRE_F32; prec <= SAC_WIRE_F16; prec++) {
    in_place_equals_scratch(SAC_REPLAY_UNIFORM, 20000, prec);
    in_place_equals_scratch(SAC_REPLAY_PRIORITIZED, 20000, prec);
    in_place_equals_scratch(SAC_REPLAY_UNIFORM, 140000, prec); /* 9.5 MB of obs rows */
  }
}

/* ---- several batches in one reply, through a shard server and the learner's client ---- */

static sac_replay_client_t *sampling_client(sac_net_ctx_t *ctx, const char *ep, uint32_t per_request,
                                            uint32_t precision) {
  sac_replay_client_config_t cc;
  sac_replay_client_config_default(&cc);
  const char *eps[1] = {ep};
  cc.n_shards = 1, cc.sample_endpoints = eps, cc.ctx = ctx, cc.batch_size = 64, cc.obs_dim = 17,
  cc.act_dim = 6;
  cc.batches_per_request = per_request, cc.sample_precision = precision;
  return sac_replay_client_new(&cc);
}

/* A prioritised shard asked for 4 batches in one request samples each batch on its own:
 * every batch's importance weights are normalised by its own largest (one weight of
 * each batch is exactly 1), where one sample of 256 rows cut in four would leave three
 * quarters without their own maximum; every row is a stored transition; fp32 and
 * fp16 replies (the direct and the decoding paths) alike. */
Test(replay_sampler, a_reply_of_four_batches_samples_each_on_its_own, .timeout = 60) {
  sac_net_ctx_t *ctx = sac_net_ctx_new(1);
  sac_replay_server_config_t sc;
  sac_replay_server_config_default(&sc);
  sc.shard.capacity = 1 << 16, sc.shard.obs_dim = 17, sc.shard.act_dim = 6, sc.shard.min_size = 64;
  sc.shard.sampler = SAC_REPLAY_PRIORITIZED, sc.shard.shard_id = 3;
  sc.durability = SAC_REPLAY_DURABILITY_NONE, sc.snapshot_interval_s = 0;
  snprintf(sc.insert_endpoint, sizeof sc.insert_endpoint, "inproc://multi-insert");
  snprintf(sc.sample_endpoint, sizeof sc.sample_endpoint, "inproc://multi-sample");
  sac_replay_server_t *srv = sac_replay_server_new(&sc, ctx, NULL);
  cr_assert_not_null(srv);
  cr_assert_eq(sac_replay_server_start(srv), 0);
  sac_replay_client_config_t ic;
  sac_replay_client_config_default(&ic);
  const char *ieps[1] = {"inproc://multi-insert"};
  ic.n_shards = 1, ic.insert_endpoints = ieps, ic.ctx = ctx, ic.actor_id = 1;
  sac_replay_client_t *ins = sac_replay_client_new(&ic);
  cr_assert_not_null(ins);
  tg_t g;
  tg_init(&g, 1, 4, 17, 6, 100, 16);
  for (int k = 0; k < 20; k++)
    cr_assert_eq(sac_replay_client_insert(ins, 0, tg_next(&g), 5000), 0);
  cr_assert_eq(sac_replay_client_flush(ins, 10000), 0);
  sac_replay_stats_t st;
  /* priorities: 1 in the first eighth of the slots, 5 elsewhere, so a quarter of one
   * stratified 256-row sample (rows in slot order) past the first holds no priority-1 row:
   * normalised over the whole 256, its largest weight would be 5^(-0.6 x 0.4) = 0.68 (priority
   * exponent 0.6, beta 0.4) */
  sac_replay_client_t *one = sampling_client(ctx, "inproc://multi-sample", 1, SAC_WIRE_F32);
  cr_assert_not_null(one);
  static uint64_t seen[200][64]; /* 12,800 rows over 1,280 slots: every slot seen */
  uint64_t sent = 0, top = 0;
  for (int k = 0; k < 200; k++) {
    sac_replay_batch_t b;
    cr_assert_eq(sac_replay_client_sample(one, 5000, &b), 0);
    memcpy(seen[k], b.indices, sizeof seen[k]);
    for (uint32_t i = 0; i < b.n; i++)
      top = SAC_WIRE_INDEX_SLOT(b.indices[i]) > top ? SAC_WIRE_INDEX_SLOT(b.indices[i]) : top;
  }
  for (int k = 0; k < 200; k++) {
    float p[64];
    for (int i = 0; i < 64; i++)
      p[i] = SAC_WIRE_INDEX_SLOT(seen[k][i]) < top / 8 ? 1.0f : 5.0f;
    cr_assert_eq(sac_replay_client_update_priorities(one, 64, seen[k], p), 0);
    sent += 64;
  }
  for (uint64_t end = sac_clock_ns() + 10000000000ull;; sac_sleep_ns(2000000)) {
    sac_replay_server_stats(srv, &st);
    if (st.shard.priority_updates_total + st.shard.priority_stale_total >= sent)
      break;
    cr_assert_lt(sac_clock_ns(), end, "priorities not applied in 10 s");
  }
  for (uint32_t prec = SAC_WIRE_F32; prec <= SAC_WIRE_F16; prec++) {
    sac_replay_client_t *four = sampling_client(ctx, "inproc://multi-sample", 4, prec);
    cr_assert_not_null(four);
    for (int k = 0; k < 12; k++) {
      static float stage[6][64 * 17];
      static const sac_replay_stage_t to = {stage[0], stage[1], stage[2], stage[3], stage[4], stage[5]};
      sac_replay_batch_t b;
      cr_assert_eq(prec == SAC_WIRE_F32 ? sac_replay_client_sample_into(four, 5000, &to, &b)
                                        : sac_replay_client_sample(four, 5000, &b),
                   0);
      cr_assert_eq(b.n, 64);
      float wmax = 0;
      for (uint32_t i = 0; i < b.n; i++) {
        cr_assert_eq(SAC_WIRE_INDEX_SHARD(b.indices[i]), 3);
        const char *why;
        cr_assert(prec != SAC_WIRE_F32 || tg_check(17, 6, b.obs + i * 17, b.action + i * 6, b.reward[i],
                                                   b.terminated[i], b.next_obs + i * 17, &why),
                  "batch %d row %u is not a stored transition: %s", k, i, why);
        wmax = b.weights[i] > wmax ? b.weights[i] : wmax;
      }
      /* float(w) / w of the largest: 1 to float rounding */
      cr_assert(fabsf(wmax - 1.0f) < 1e-6f, "batch %d (precision %u): largest weight %g, not its own maximum",
                k, prec, (double)wmax);
    }
    sac_replay_client_stats_t cs;
    sac_replay_client_stats(four, &cs);
    cr_assert_eq(cs.samples_received, 12);
    cr_assert_eq(cs.sample_replies, 3, "three replies of four batches");
    cr_assert_eq(cs.sample_single_batch_replies, 0);
    sac_replay_client_destroy(&four);
  }
  sac_replay_client_destroy(&one);
  sac_replay_client_destroy(&ins);
  sac_replay_server_destroy(&srv);
  sac_net_ctx_destroy(&ctx);
  tg_free(&g);
}
