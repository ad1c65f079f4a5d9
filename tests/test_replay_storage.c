/* Tests of replay/storage: next_obs rebuilt exactly from per-env streams (within a
 * batch, across batches through the reused tail slot, at terminations and time-limit
 * truncations), overwriting in place, float16 storage, bytes per transition, and huge
 * pages for the large arrays. */
#include <criterion/criterion.h>
#include <malloc.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "common/hugepages.h"
#include "common/rng.h"
#include "replay/sampler.h"
#include "replay/storage.h"
#include "tests/replay_testgen.h"

static void make(sac_replay_storage_t *st, uint64_t cap, uint32_t od, uint32_t ad, int f16) {
  sac_replay_storage_config_t c = {cap, od, ad, f16, f16, 256, 1024};
  cr_assert_eq(sac_replay_storage_init(st, &c), 0);
}

/* Checks every READY slot of st against the generator's encoding. Returns how many. */
static uint64_t check_all(const sac_replay_storage_t *st, const tg_t *g) {
  uint32_t od = st->cfg.obs_dim, ad = st->cfg.act_dim;
  float o[64], a[16], no[64], r, t;
  uint64_t ready = 0;
  for (uint32_t s = 0; s < sac_replay_storage_filled(st); s++) {
    if (!(*sac_replay_flags(st, s) & SAC_SLOT_READY))
      continue;
    ready++;
    sac_replay_storage_gather(st, &s, 1, o, a, &r, &t, no);
    const char *why;
    cr_assert(tg_check(od, ad, o, a, r, t, no, &why), "slot %u: %s (obs step %g next %g)", s, why, o[1],
              no[1]);
    uint32_t e = (uint32_t)o[0], step = (uint32_t)o[1], ep = (uint32_t)o[2];
    int ends = step + 1 == tg_ep_len(g, e, ep);
    cr_assert_eq(t, (ends && ep % 2 == 0) ? 1.0f : 0.0f, "terminated flag of env %u ep %u step %u", e, ep,
                 step);
    int trunc = (*sac_replay_flags(st, s) & SAC_SLOT_TRUNC) != 0;
    cr_assert_eq(trunc, ends && ep % 2 == 1, "truncated flag");
  }
  cr_assert_eq(ready, st->size);
  return ready;
}

Test(replay_storage, next_obs_within_and_across_batches) {
  sac_replay_storage_t st;
  make(&st, 100000, 8, 3, 0);
  tg_t g;
  tg_init(&g, 7, 4, 8, 3, 9, 5);
  uint64_t rows = 0;
  for (int b = 0; b < 40; b++) {
    uint32_t stored = 0;
    const sac_wire_transitions_t *t = tg_next(&g);
    cr_assert_eq(sac_replay_storage_insert(&st, 7, t, &stored), 0);
    cr_assert_eq(stored, t->n);
    rows += stored;
  }
  /* every transition is sampleable except none: all streams have their next obs */
  cr_assert_eq(st.size, rows);
  cr_assert_eq(check_all(&st, &g), rows);
  /* tails of open streams were reused by the next batch's first rows */
  cr_assert_gt(st.tails_reused, 0);
  /* slots = transitions + one final obs per episode end + the current open tails */
  uint64_t ends = 0;
  for (uint32_t s = 0; s < st.alloc_count; s++)
    ends += (*sac_replay_flags(&st, s) & (SAC_SLOT_TERM | SAC_SLOT_TRUNC)) != 0;
  cr_assert_leq(st.alloc_count, rows + ends + g.n_envs, "slots %llu rows %llu ends %llu",
                (unsigned long long)st.alloc_count, (unsigned long long)rows, (unsigned long long)ends);
  sac_replay_storage_close(&st);
  tg_free(&g);
}

Test(replay_storage, truncation_bootstraps_from_final_obs) {
  sac_replay_storage_t st;
  make(&st, 4096, 4, 1, 0);
  /* one env: rows step 0,1,2 where row 1 is truncated (final obs step 2 of episode 0),
   * row 2 is the first step of episode 1 */
  uint32_t env[3] = {0, 0, 0};
  float obs[12] = {0, 0, 0, 0, /**/ 0, 1, 0, 0, /**/ 0, 0, 1, 0};
  float act[3] = {0, 0.01f, 0};
  float rew[3] = {0.5f, 1.5f, 0.5f};
  uint8_t term[3] = {0, 0, 0}, trunc[3] = {0, 1, 0};
  uint32_t next_rows[1] = {1};
  float next_obs[4] = {0, 2, 0, 0};
  uint32_t tail_env[1] = {0};
  float tail_obs[4] = {0, 1, 1, 0};
  sac_wire_transitions_t t = {.actor_id = 1,
                              .seq = 1,
                              .n = 3,
                              .obs_dim = 4,
                              .act_dim = 1,
                              .env_ids = env,
                              .obs = obs,
                              .action = act,
                              .reward = rew,
                              .terminated = term,
                              .truncated = trunc,
                              .n_next = 1,
                              .next_obs_rows = next_rows,
                              .next_obs = next_obs,
                              .n_tail = 1,
                              .tail_env_ids = tail_env,
                              .tail_obs = tail_obs};
  uint32_t stored;
  cr_assert_eq(sac_replay_storage_insert(&st, 1, &t, &stored), 0);
  cr_assert_eq(st.size, 3);
  float o[4], a[1], no[4], r, te;
  for (uint32_t s = 0; s < st.alloc_count; s++) {
    if (!(*sac_replay_flags(&st, s) & SAC_SLOT_READY))
      continue;
    sac_replay_storage_gather(&st, &s, 1, o, a, &r, &te, no);
    cr_assert_eq(te, 0.0f, "truncation is not termination");
    cr_assert_eq(no[1], o[1] + 1.0f, "next_obs of step %g is step %g", o[1], no[1]);
    cr_assert_eq(no[2], o[2], "next_obs crossed into the next episode");
  }
  /* the same with termination: terminal flag set, next_obs still the final obs */
  sac_replay_storage_reset(&st);
  trunc[1] = 0;
  term[1] = 1;
  cr_assert_eq(sac_replay_storage_insert(&st, 1, &t, &stored), 0);
  int seen_term = 0;
  for (uint32_t s = 0; s < st.alloc_count; s++) {
    if (!(*sac_replay_flags(&st, s) & SAC_SLOT_READY))
      continue;
    sac_replay_storage_gather(&st, &s, 1, o, a, &r, &te, no);
    if (o[1] == 1.0f && o[2] == 0.0f) {
      cr_assert_eq(te, 1.0f);
      cr_assert_eq(no[1], 2.0f);
      seen_term = 1;
    } else {
      cr_assert_eq(te, 0.0f);
    }
  }
  cr_assert(seen_term);
  sac_replay_storage_close(&st);
}

Test(replay_storage, tail_mismatch_takes_a_new_slot) {
  sac_replay_storage_t st;
  make(&st, 4096, 2, 1, 0);
  uint32_t env[1] = {5};
  float obs[2] = {1, 1}, act[1] = {0}, rew[1] = {0}, tail[2] = {2, 2};
  uint8_t z[1] = {0};
  uint32_t tail_env[1] = {5};
  sac_wire_transitions_t t = {.actor_id = 3,
                              .seq = 1,
                              .n = 1,
                              .obs_dim = 2,
                              .act_dim = 1,
                              .env_ids = env,
                              .obs = obs,
                              .action = act,
                              .reward = rew,
                              .terminated = z,
                              .truncated = z,
                              .n_tail = 1,
                              .tail_env_ids = tail_env,
                              .tail_obs = tail};
  uint32_t stored;
  cr_assert_eq(sac_replay_storage_insert(&st, 3, &t, &stored), 0);
  cr_assert_eq(st.alloc_count, 2);
  /* next batch starts from a different obs (the actor reset the env): no reuse, and
   * the first transition still points at the old tail */
  float obs2[2] = {9, 9}, tail2[2] = {10, 10};
  t.obs = obs2;
  t.tail_obs = tail2;
  cr_assert_eq(sac_replay_storage_insert(&st, 3, &t, &stored), 0);
  cr_assert_eq(st.alloc_count, 4);
  cr_assert_eq(st.tails_reused, 0);
  cr_assert_eq(*sac_replay_next(&st, 0), 1);
  /* a third batch that continues from tail2 reuses its slot */
  float obs3[2] = {10, 10}, tail3[2] = {11, 11};
  t.obs = obs3;
  t.tail_obs = tail3;
  cr_assert_eq(sac_replay_storage_insert(&st, 3, &t, &stored), 0);
  cr_assert_eq(st.tails_reused, 1);
  cr_assert_eq(st.alloc_count, 5);
  /* another actor with the same env id does not take actor 3's tail */
  t.obs = tail3;
  cr_assert_eq(sac_replay_storage_insert(&st, 4, &t, &stored), 0);
  cr_assert_eq(st.tails_reused, 1);
  sac_replay_storage_close(&st);
}

Test(replay_storage, overwrite_in_place_keeps_every_live_transition_valid) {
  sac_replay_storage_t st;
  make(&st, 1024, 6, 2, 0);
  tg_t g;
  tg_init(&g, 2, 8, 6, 2, 13, 16);
  for (int b = 0; b < 300; b++) {
    uint32_t stored;
    cr_assert_eq(sac_replay_storage_insert(&st, 2, tg_next(&g), &stored), 0);
    cr_assert_leq(st.size, 1024);
    if (b % 50 == 49)
      check_all(&st, &g);
  }
  cr_assert_gt(st.alloc_count, 10 * 1024, "the ring wrapped many times");
  cr_assert_gt(st.size, 1024 * 3 / 4, "most slots hold transitions");
  check_all(&st, &g);
  /* generations count reallocations */
  uint32_t s = (uint32_t)((st.cursor + 1) % 1024);
  cr_assert_eq(sac_replay_storage_generation(&st, s), (uint32_t)((st.alloc_count - 1 - s) / 1024));
  sac_replay_storage_close(&st);
  tg_free(&g);
}

Test(replay_storage, fp16_storage_and_bytes_per_transition) {
  sac_replay_storage_t a, h;
  make(&a, 65536, 17, 6, 0);
  make(&h, 65536, 17, 6, 1);
  tg_t g1, g2;
  tg_init(&g1, 1, 16, 17, 6, 200, 16);
  tg_init(&g2, 1, 16, 17, 6, 200, 16);
  for (int b = 0; b < 100; b++) {
    uint32_t s1, s2;
    cr_assert_eq(sac_replay_storage_insert(&a, 1, tg_next(&g1), &s1), 0);
    cr_assert_eq(sac_replay_storage_insert(&h, 1, tg_next(&g2), &s2), 0);
  }
  check_all(&h, &g2); /* the encoding's values are exact or within 1e-3 in fp16 */
  double bpt32 = sac_replay_storage_bytes_per_transition(&a, 0);
  double bpt16 = sac_replay_storage_bytes_per_transition(&h, 0);
  double info = (17 + 6 + 1 + 2) * 4.0; /* obs + act + reward + 2 flags, as BENCHMARKS.md counts */
  cr_log_info("bytes/transition fp32 %.1f (%.3f x), fp16 %.1f (%.3f x)", bpt32, bpt32 / info, bpt16,
              bpt16 / info);
  cr_assert_leq(bpt32, 1.1 * info, "fp32 %.1f bytes per transition over 1.1 x %.0f", bpt32, info);
  cr_assert_leq(bpt16, 0.6 * info, "fp16 %.1f bytes per transition is not about half of %.0f", bpt16, info);
  cr_assert_eq(sac_wire_f16_to_f32(sac_wire_f32_to_f16(1.5f, 1)), 1.5f);
  cr_assert_eq(sac_wire_f16_to_f32(sac_wire_f32_to_f16(1e9f, 1)), 65504.0f, "saturates");
  cr_assert(isinf(sac_wire_f16_to_f32(sac_wire_f32_to_f16(1e9f, 0))));
  cr_assert_eq(sac_wire_f16_to_f32(sac_wire_f32_to_f16(-2.0f, 0)), -2.0f);
  cr_assert_float_eq(sac_wire_f16_to_f32(sac_wire_f32_to_f16(1e-6f, 0)), 1e-6f, 1e-7f, "subnormal");
  /* round to nearest even: 1 + 2^-11 is halfway between 1 and 1 + 2^-10 */
  cr_assert_eq(sac_wire_f32_to_f16(1.0f + 1.0f / 2048.0f, 0), 0x3c00);
  sac_replay_storage_close(&a);
  sac_replay_storage_close(&h);
  tg_free(&g1);
  tg_free(&g2);
}

Test(replay_storage, bad_config_and_bad_batches_are_refused) {
  sac_replay_storage_t st;
  sac_replay_storage_config_t c = {100, 4, 1, 0, 0, 256, 16};
  cr_assert_eq(sac_replay_storage_init(&st, &c), SAC_EINVAL, "capacity below 4 x max_rows");
  make(&st, 4096, 4, 1, 0);
  tg_t g;
  tg_init(&g, 1, 2, 3, 1, 5, 2);
  uint32_t stored = 9;
  cr_assert_eq(sac_replay_storage_insert(&st, 1, tg_next(&g), &stored), SAC_EINVAL,
               "obs dim 3 into a dim 4 ring");
  cr_assert_eq(stored, 0);
  cr_assert_eq(st.alloc_count, 0);
  sac_replay_storage_close(&st);
  sac_replay_storage_close(&st); /* idempotent */
  tg_free(&g);
}

/* ------------------------------------------------------------------ no allocation */

/* This binary is linked with --wrap=malloc,calloc,realloc (tests/CMakeLists.txt): the
 * wrappers count calls made by this thread while counting is on. */
#include "replay/shard.h"
void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
void *__real_realloc(void *p, size_t n);
static _Thread_local int g_counting;
static _Thread_local long g_allocs;
void *__wrap_malloc(size_t n) {
  g_allocs += g_counting;
  return __real_malloc(n);
}
void *__wrap_calloc(size_t n, size_t m) {
  g_allocs += g_counting;
  return __real_calloc(n, m);
}
void *__wrap_realloc(void *p, size_t n) {
  g_allocs += g_counting;
  return __real_realloc(p, n);
}

Test(replay_storage, hot_paths_do_not_allocate) {
  sac_replay_shard_config_t c;
  sac_replay_shard_config_default(&c);
  c.capacity = 8192;
  c.obs_dim = 17;
  c.act_dim = 6;
  c.sampler = SAC_REPLAY_PRIORITIZED;
  c.min_size = 1;
  c.max_batch_rows = 1024;
  c.max_sample_batch = 256;
  sac_replay_shard_t *sh = sac_replay_shard_new(&c, NULL);
  sac_wire_decoder_t *dec = sac_wire_decoder_new(1 << 20);
  unsigned char *buf = malloc(1 << 20);
  tg_t g;
  tg_init(&g, 1, 16, 17, 6, 50, 16);
  sac_wire_limits_t lim = {.max_msg_bytes = 1 << 20, .obs_dim = 17, .act_dim = 6, .max_rows = 1024};
  g_counting = 1;
  for (int b = 1; b <= 200; b++) {
    /* the server's path: encode (actor side), decode + validate, dedup + store, sample,
     * encode the sample batch, decode it (learner side), priority update */
    sac_wire_msg_t m = {.type = SAC_WIRE_TRANSITIONS}, d;
    m.u.transitions = *tg_next(&g);
    m.u.transitions.seq = (uint64_t)b;
    size_t len;
    cr_assert_eq(sac_wire_encode(&m, buf, 1 << 20, &len), 0);
    cr_assert_eq(sac_wire_decode(dec, buf, len, &lim, &d, NULL), 0);
    sac_replay_insert_result_t r;
    cr_assert_eq(sac_replay_shard_insert(sh, &d.u.transitions, &r), 0);
    sac_replay_sample_t s;
    cr_assert_eq(sac_replay_shard_sample(sh, 256, 0.4f, &s), 0);
    sac_wire_msg_t o = {.type = SAC_WIRE_SAMPLE_BATCH};
    o.u.sample_batch = (sac_wire_sample_batch_t){.n = s.n,
                                                 .obs_dim = 17,
                                                 .act_dim = 6,
                                                 .obs = s.obs,
                                                 .action = s.action,
                                                 .reward = s.reward,
                                                 .terminated = s.terminated,
                                                 .next_obs = s.next_obs,
                                                 .indices = s.indices,
                                                 .weights = s.weights,
                                                 .error = ""};
    cr_assert_eq(sac_wire_encode(&o, buf, 1 << 20, &len), 0);
    cr_assert_eq(sac_wire_decode(dec, buf, len, &lim, &d, NULL), 0);
    sac_replay_shard_update_priorities(sh, s.n, d.u.sample_batch.indices, d.u.sample_batch.weights, NULL,
                                       NULL, NULL);
  }
  g_counting = 0;
  cr_assert_eq(g_allocs, 0, "%ld allocations on the insert/sample path", g_allocs);
  free(buf);
  sac_wire_decoder_destroy(&dec);
  sac_replay_shard_destroy(&sh);
  tg_free(&g);
}

/* Kilobytes of AnonHugePages in the mapping of this process that holds p (-1: none found). */
static long huge_kb_at(const void *p) {
  FILE *f = fopen("/proc/self/smaps", "r");
  if (!f)
    return -1;
  char line[512];
  long kb = -1;
  int inside = 0;
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) { /* a mapping's first line */
      inside = (uintptr_t)p >= lo && (uintptr_t)p < hi;
      continue;
    }
    if (inside && sscanf(line, "AnonHugePages: %ld kB", &kb) == 1)
      break;
  }
  fclose(f);
  return inside ? kb : -1;
}

/* A shard's large arrays ask for huge pages (common/hugepages.h) and get them where the
 * kernel gives them on request: a storage of 600,000 slots (obs 17: a 40 MB array), 12 MB
 * of rows written, and the observations' mapping then holds huge pages. Control: the same
 * rows in an array that did not ask hold none (where the kernel gives them only on
 * request). Arrays under SAC_HUGEPAGES_MIN do not ask. */
Test(replay_storage, large_arrays_ask_for_huge_pages) {
  const sac_thp_mode_t mode = sac_hugepages_mode(SAC_THP_ENABLED_PATH);
  if (mode != SAC_THP_MADVISE && mode != SAC_THP_ALWAYS)
    cr_skip_test("transparent huge pages are off or absent here (%s)", sac_hugepages_mode_name(mode));
  char small[64];
  cr_assert_eq(sac_hugepages_advise(small, sizeof small), 0, "a small array asked");
  sac_replay_storage_t st;
  make(&st, 600000, 17, 6, 0);
  const size_t bytes = (size_t)12 << 20;
  memset(st.recs, 1, bytes); /* rows as inserts write them */
  const long advised = huge_kb_at(st.recs + (4 << 20)); /* inside the whole huge pages asked for */
  if (advised < 0)
    cr_skip_test("no /proc/self/smaps entry for the array (not a mapping of its own here)");
  cr_assert_gt(advised, 0, "the records' array holds no huge pages after %zu MB written", bytes >> 20);
  if (mode == SAC_THP_MADVISE) {
    uint8_t *plain = calloc(600000, 68);
    cr_assert_not_null(plain);
    memset(plain, 1, bytes);
    cr_assert_eq(huge_kb_at(plain + (4 << 20)), 0, "an array that did not ask holds huge pages: the check proves nothing");
    free(plain);
  }
  sac_replay_storage_close(&st);
}

/* The arrays get huge pages even where malloc's heap holds memory freed earlier: in a
 * process whose heap had a shard's rows before (a benchmark's second run), calloc hands
 * that memory out again and zeroes it, every page touched before the advice, and a
 * shard's rows held no huge page (common/hugepages.h). Here the heap is made to hold 96 MB
 * freed, then a storage of 62 MB is opened: its rows must hold huge pages. Control: the
 * old way, calloc then advise, on the same heap holds none, so the check can fail. */
Test(replay_storage, large_arrays_get_huge_pages_after_the_heap_held_others) {
  const sac_thp_mode_t mode = sac_hugepages_mode(SAC_THP_ENABLED_PATH);
  if (mode != SAC_THP_MADVISE && mode != SAC_THP_ALWAYS)
    cr_skip_test("transparent huge pages are off or absent here (%s)", sac_hugepages_mode_name(mode));
  /* all of malloc's memory from the heap, and kept there when freed */
  if (!mallopt(M_MMAP_MAX, 0) || !mallopt(M_TRIM_THRESHOLD, 1 << 30))
    cr_skip_test("this malloc has no M_MMAP_MAX or M_TRIM_THRESHOLD (a sanitizer's allocator)");
  const size_t bytes = (size_t)12 << 20, cap = 600000, rec = 104; /* obs 17, act 6: 62 MB */
  unsigned char *old = malloc((size_t)96 << 20);
  cr_assert_not_null(old);
  memset(old, 1, (size_t)96 << 20);
  free(old);
  if (mode == SAC_THP_MADVISE) {
    unsigned char *plain = calloc(cap, rec); /* from the freed 96 MB, zeroed by calloc */
    cr_assert_not_null(plain);
    sac_hugepages_advise(plain, cap * rec);
    memset(plain, 1, bytes);
    const long kb = huge_kb_at(plain + (4 << 20));
    free(plain);
    cr_assert_eq(kb, 0, "calloc'ed from the heap, then advised, holds %ld kB of huge pages: the check proves nothing",
                 kb);
  }
  sac_replay_storage_t st;
  make(&st, cap, 17, 6, 0);
  cr_assert_eq(st.rec, rec);
  memset(st.recs, 1, bytes);
  const long kb = huge_kb_at(st.recs);
  cr_assert_gt(kb, 0, "a storage opened over a heap holding freed memory: no huge pages after %zu MB written (%ld)",
               bytes >> 20, kb);
  cr_assert_eq((uintptr_t)st.recs % ((uintptr_t)2 << 20), 0, "the rows do not start on a 2 MiB boundary");
  sac_replay_storage_close(&st);
}

/* sac_hugepages_calloc: zeroed and 64-byte aligned at either size, small arrays from
 * calloc, large ones a mapping of their own starting on a 2 MiB boundary; freed by size. */
Test(replay_storage, hugepages_calloc_zeroes_and_aligns) {
  const size_t sizes[] = {1, 100, SAC_HUGEPAGES_MIN - 1, SAC_HUGEPAGES_MIN, SAC_HUGEPAGES_MIN + 4097};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    void *raw = NULL;
    unsigned char *p = sac_hugepages_calloc(sizes[i], &raw);
    cr_assert_not_null(p, "%zu bytes", sizes[i]);
    cr_assert_not_null(raw);
    cr_assert_eq((uintptr_t)p % 64, 0, "%zu bytes at %p", sizes[i], (void *)p);
    if (sizes[i] >= SAC_HUGEPAGES_MIN)
      cr_assert_eq((uintptr_t)p % ((uintptr_t)2 << 20), 0, "%zu bytes at %p", sizes[i], (void *)p);
    for (size_t b = 0; b < sizes[i]; b += 4093)
      cr_assert_eq(p[b], 0, "byte %zu of %zu", b, sizes[i]);
    cr_assert_eq(p[sizes[i] - 1], 0);
    memset(p, 0xab, sizes[i]); /* all of it writable */
    sac_hugepages_free(raw, sizes[i]);
  }
  sac_hugepages_free(NULL, SAC_HUGEPAGES_MIN); /* as free(NULL) */
}

/* The kernel's huge-page setting as a shard reads it to say, at start, that huge pages are
 * off (replay/shard.c): the bracketed word of the file's line, anything else unknown. */
Test(replay_storage, huge_page_setting_is_read_from_its_bracket) {
  cr_assert_eq(sac_hugepages_parse_mode("always [madvise] never\n"), SAC_THP_MADVISE);
  cr_assert_eq(sac_hugepages_parse_mode("[always] madvise never\n"), SAC_THP_ALWAYS);
  cr_assert_eq(sac_hugepages_parse_mode("always madvise [never]\n"), SAC_THP_NEVER);
  cr_assert_eq(sac_hugepages_parse_mode("always madvise never\n"), SAC_THP_UNKNOWN, "no bracket");
  cr_assert_eq(sac_hugepages_parse_mode("always [madvise never\n"), SAC_THP_UNKNOWN, "no closing bracket");
  cr_assert_eq(sac_hugepages_parse_mode("[nevermore] always"), SAC_THP_UNKNOWN, "a longer word");
  cr_assert_eq(sac_hugepages_parse_mode("[neve] always"), SAC_THP_UNKNOWN, "a shorter word");
  cr_assert_eq(sac_hugepages_parse_mode(""), SAC_THP_UNKNOWN);
  cr_assert_eq(sac_hugepages_parse_mode(NULL), SAC_THP_UNKNOWN);
  cr_assert_str_eq(sac_hugepages_mode_name(SAC_THP_NEVER), "never");
  char path[] = "/tmp/test_thp_XXXXXX"; /* mkstemp's template: it replaces the Xs */
  const int fd = mkstemp(path);
  cr_assert_geq(fd, 0);
  FILE *f = fdopen(fd, "w");
  cr_assert_not_null(f);
  fputs("always madvise [never]\n", f);
  fclose(f);
  cr_assert_eq(sac_hugepages_mode(path), SAC_THP_NEVER, "from a file");
  unlink(path);
  cr_assert_eq(sac_hugepages_mode(path), SAC_THP_UNKNOWN, "no such file");
}

/* Bytes passed out by sac_replay_storage_write_fields, appended to a buffer. */
typedef struct {
  uint8_t *buf;
  size_t len, cap, pos;
} sink_t;

static int sink_put(void *ctx, void *data, size_t len) {
  sink_t *k = ctx;
  cr_assert_leq(k->len + len, k->cap);
  memcpy(k->buf + k->len, data, len);
  k->len += len;
  return 0;
}

static int sink_get(void *ctx, void *data, size_t len) {
  sink_t *k = ctx;
  if (k->pos + len > k->len)
    return -1;
  memcpy(data, k->buf + k->pos, len);
  k->pos += len;
  return 0;
}

/* The snapshot's layout of the storage (replay/shard.c's header): each field's rows one
 * after another in slot order: observations, actions, rewards, next slots, flags, as they
 * were when each field had an array of its own, whatever the records look like in memory.
 * Read back into another storage, every record is the same; a stream that ends early is
 * an error. fp16 observations as well (rows of 34 bytes, the action at an aligned offset). */
Test(replay_storage, snapshot_fields_are_each_fields_rows_in_slot_order) {
  for (int f16 = 0; f16 <= 1; f16++) {
    sac_replay_storage_t a, b;
    make(&a, 3000, 17, 6, f16);
    make(&b, 3000, 17, 6, f16);
    tg_t g;
    tg_init(&g, 1, 16, 17, 6, 40, 16);
    for (int n = 0; n < 30; n++) { /* 7,680 rows: the ring wraps */
      uint32_t stored;
      cr_assert_eq(sac_replay_storage_insert(&a, 1, tg_next(&g), &stored), 0);
    }
    tg_free(&g);
    const uint64_t filled = sac_replay_storage_filled(&a);
    sink_t k = {0};
    k.cap = (size_t)filled * (a.obs_row + a.act_row + 9);
    k.buf = malloc(k.cap);
    cr_assert_eq(sac_replay_storage_write_fields(&a, filled, sink_put, &k), 0);
    cr_assert_eq(k.len, k.cap, "the fields' bytes");
    const uint8_t *p = k.buf;
    for (uint64_t s = 0; s < filled; s++, p += a.obs_row)
      cr_assert(memcmp(p, sac_replay_obs(&a, s), a.obs_row) == 0, "f16 %d: observation of slot %llu", f16,
                (unsigned long long)s);
    for (uint64_t s = 0; s < filled; s++, p += a.act_row)
      cr_assert(memcmp(p, sac_replay_act(&a, s), a.act_row) == 0, "action of slot %llu", (unsigned long long)s);
    for (uint64_t s = 0; s < filled; s++, p += 4)
      cr_assert(memcmp(p, sac_replay_reward(&a, s), 4) == 0, "reward of slot %llu", (unsigned long long)s);
    for (uint64_t s = 0; s < filled; s++, p += 4)
      cr_assert(memcmp(p, sac_replay_next(&a, s), 4) == 0, "next of slot %llu", (unsigned long long)s);
    for (uint64_t s = 0; s < filled; s++, p++)
      cr_assert_eq(*p, *sac_replay_flags(&a, s), "flags of slot %llu", (unsigned long long)s);
    cr_assert_eq(sac_replay_storage_read_fields(&b, filled, sink_get, &k), 0);
    for (uint64_t s = 0; s < filled; s++)
      cr_assert(memcmp(sac_replay_rec(&b, s), sac_replay_rec(&a, s), a.rec) == 0, "record %llu read back",
                (unsigned long long)s);
    k.pos = 0;
    k.len -= 1; /* one byte short */
    cr_assert_neq(sac_replay_storage_read_fields(&b, filled, sink_get, &k), 0, "a short stream was taken");
    free(k.buf);
    sac_replay_storage_close(&a);
    sac_replay_storage_close(&b);
  }
}
