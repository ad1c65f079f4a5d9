/* Checkpoints: a run interrupted by save/load continues bit for bit as the uninterrupted
 * run does (cpu backend, fixed seed, the same data); damaged or mismatched files are
 * refused with the right error; the run's counters (episodes, best return) carry, an older
 * format version loads and a newer one is refused; the policy file round-trips. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "common/rng.h"
#include "common/snapshot.h"
#include "learner/checkpoint.h"
#include "learner/rundir.h"

static sac_backend_t *be;
static char dir[64];

static void setup(void) {
  cr_assert_eq(sac_backend_new("cpu", 1, &be), 0);
  snprintf(dir, sizeof dir, "/tmp/sac-ckpt-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
}
static void teardown(void) {
  sac_backend_destroy(&be);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  cr_expect_eq(system(cmd), 0);
}
TestSuite(checkpoint, .init = setup, .fini = teardown);

static sac_t *make(uint64_t seed, int hidden) {
  sac_hparams_t hp;
  sac_hparams_default(&hp, 3, 2);
  hp.hidden = hidden;
  hp.batch = 16;
  hp.seed = seed;
  sac_t *s;
  cr_assert_eq(sac_new(&hp, be, &s), 0);
  return s;
}

/* The batch of update i: a pure function of i (the "data the actors produced"). */
static void batch_for(sac_t *s, uint64_t i) {
  sac_rng_t r;
  sac_rng_init(&r, 99, i);
  sac_batch_t *b = sac_batch(s);
  for (int k = 0; k < 16 * 3; k++)
    b->obs[k] = (float)sac_rng_normal(&r), b->next_obs[k] = (float)sac_rng_normal(&r);
  for (int k = 0; k < 16 * 2; k++)
    b->action[k] = (float)sac_rng_uniform_range(&r, -1, 1);
  for (int k = 0; k < 16; k++)
    b->reward[k] = (float)sac_rng_normal(&r), b->terminated[k] = (float)(k % 5 == 0);
}

static void run(sac_t *s, uint64_t from, uint64_t to) {
  for (uint64_t i = from; i < to; i++) {
    batch_for(s, i);
    sac_update(s);
  }
}

Test(checkpoint, resumed_run_matches_uninterrupted_run) {
  sac_t *a = make(5, 24), *b = make(5, 24), *c = make(77, 24); /* c starts from other weights */
  run(a, 0, 60);
  run(b, 0, 30);
  char path[128];
  snprintf(path, sizeof path, "%s/ckpt.bin", dir);
  sac_ckpt_counters_t saved = {.updates = 30, .env_steps = 1234, .policy_version = 30, .wall_seconds = 2.5};
  cr_assert_eq(sac_checkpoint_save(b, path, &saved), 0);
  sac_ckpt_counters_t got;
  cr_assert_eq(sac_checkpoint_load(c, path, &got), 0);
  cr_expect_eq(got.updates, 30u);
  cr_expect_eq(got.env_steps, 1234u);
  cr_expect_eq(got.policy_version, 30u);
  cr_expect_eq(got.wall_seconds, 2.5);
  cr_expect_eq(sac_step(c), 30u);
  run(c, 30, 60);
  size_t n = sac_param_count(a), nt = sac_buffer_len(a, SAC_BUF_TARGET);
  float *pa = malloc(n * sizeof(float)), *pc = malloc(n * sizeof(float));
  int bufs[] = {SAC_BUF_PARAMS, SAC_BUF_ADAM_M, SAC_BUF_ADAM_V};
  for (int i = 0; i < 3; i++) {
    sac_get_buffer(a, bufs[i], pa, n);
    sac_get_buffer(c, bufs[i], pc, n);
    cr_expect_eq(memcmp(pa, pc, n * sizeof(float)), 0, "buffer %d differs after resume", bufs[i]);
  }
  sac_get_buffer(a, SAC_BUF_TARGET, pa, nt);
  sac_get_buffer(c, SAC_BUF_TARGET, pc, nt);
  cr_expect_eq(memcmp(pa, pc, nt * sizeof(float)), 0, "targets differ after resume");
  free(pa), free(pc);
  sac_destroy(&a), sac_destroy(&b), sac_destroy(&c);
}

/* A cpu backend that also keeps an fp16 loss scaler's state behind get_metric and
 * set_option, with the cuda backend's keys and meanings (loss_scale resets the growth
 * counter), so the checkpoint's scaler section round-trips without a GPU. */
static struct { double scale, good; } fake_sc;
static int fake_get(sac_backend_t *b, const char *key, double *out) {
  (void)b;
  if (!strcmp(key, "loss_scale"))
    return *out = fake_sc.scale, 0;
  if (!strcmp(key, "loss_scale_good"))
    return *out = fake_sc.good, 0;
  return SAC_ENOTFOUND;
}
static int fake_set(sac_backend_t *b, const char *key, const char *value) {
  (void)b;
  if (!strcmp(key, "loss_scale"))
    return fake_sc.scale = atof(value), fake_sc.good = 0, 0;
  if (!strcmp(key, "loss_scale_good"))
    return fake_sc.good = atof(value), 0;
  return SAC_ENOTFOUND;
}

Test(checkpoint, fp16_loss_scaler_state_round_trips) {
  sac_backend_ops_t ops = *be->ops;
  ops.get_metric = fake_get, ops.set_option = fake_set;
  const sac_backend_ops_t *orig = be->ops;
  be->ops = &ops;
  sac_t *s = make(5, 16);
  char path[128];
  snprintf(path, sizeof path, "%s/ckpt.bin", dir);
  fake_sc.scale = 1024.0, fake_sc.good = 37; /* a run that halved its scale six times */
  sac_ckpt_counters_t cnt = {.updates = 7}, got;
  cr_assert_eq(sac_checkpoint_save(s, path, &cnt), 0);
  fake_sc.scale = 65536.0, fake_sc.good = 0; /* what a fresh fp16 backend starts from */
  cr_assert_eq(sac_checkpoint_load(s, path, &got), 0);
  cr_expect_eq(fake_sc.scale, 1024.0, "loss scale restored: %g", fake_sc.scale);
  cr_expect_eq(fake_sc.good, 37.0, "growth counter restored: %g", fake_sc.good);
  sac_destroy(&s);
  /* the same file loads into a learner without a loss scaler (cpu, or cuda in fp32) */
  be->ops = orig;
  sac_t *plain = make(5, 16);
  cr_expect_eq(sac_checkpoint_load(plain, path, &got), 0);
  cr_expect_eq(got.updates, 7u);
  sac_destroy(&plain);
}

Test(checkpoint, damaged_missing_and_mismatched_files_are_refused) {
  sac_t *s = make(1, 24), *other = make(1, 32);
  char path[128];
  snprintf(path, sizeof path, "%s/ckpt.bin", dir);
  sac_ckpt_counters_t cnt = {0}, got;
  cr_expect_eq(sac_checkpoint_load(s, path, &got), SAC_ENOTFOUND);
  cr_assert_eq(sac_checkpoint_save(s, path, &cnt), 0);
  cr_expect_eq(sac_checkpoint_load(other, path, &got), SAC_ECONFIG, "hidden 24 vs 32 is named and refused");
  /* flip one byte in the middle of the payload */
  FILE *f = fopen(path, "r+b");
  cr_assert_not_null(f);
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, len / 2, SEEK_SET);
  int ch = fgetc(f);
  fseek(f, len / 2, SEEK_SET);
  fputc(ch ^ 0x40, f);
  fclose(f);
  cr_expect_eq(sac_checkpoint_load(s, path, &got), SAC_ECHECKSUM);
  /* truncated */
  cr_assert_eq(sac_checkpoint_save(s, path, &cnt), 0);
  cr_assert_eq(truncate(path, len / 3), 0);
  int rc = sac_checkpoint_load(s, path, &got);
  cr_expect(rc == SAC_EIO || rc == SAC_ECHECKSUM, "truncated file refused (%d)", rc);
  sac_destroy(&s), sac_destroy(&other);
}

Test(checkpoint, policy_file_round_trips_and_rejects_garbage) {
  sac_t *s = make(3, 24);
  size_t n = sac_actor_param_count(s);
  float *p = malloc(n * sizeof(float));
  cr_assert_eq(sac_get_actor(s, p), 0);
  char path[128];
  snprintf(path, sizeof path, "%s/policy.bin", dir);
  cr_assert_eq(sac_policy_save(path, sac_actor_desc(s), p, -5, 2, NULL), 0);
  sac_mlp_desc_t d;
  float *q, lo, hi;
  cr_assert_eq(sac_policy_load(path, &d, &q, &lo, &hi), 0);
  cr_expect_eq(d.n_layers, sac_actor_desc(s)->n_layers);
  cr_expect_eq(d.sizes[0], 3);
  cr_expect_eq(d.sizes[d.n_layers], 4);
  cr_expect_eq(lo, -5.0f);
  cr_expect_eq(hi, 2.0f);
  cr_expect_eq(memcmp(p, q, n * sizeof(float)), 0);
  free(q);
  cr_assert_eq(truncate(path, 40), 0);
  cr_expect_eq(sac_policy_load(path, &d, &q, &lo, &hi), SAC_EPROTO);
  cr_expect_null(q);
  free(p);
  sac_destroy(&s);
}

/* Rewrites the checkpoint at path as format `version`, without its last `drop` payload
 * bytes (an older version is a shorter file: version 2 has no run counters at the end). */
static void rewrite_as(const char *path, uint32_t version, size_t drop) {
  sac_snap_reader_t r;
  cr_assert_eq(sac_snap_reader_open(&r, path, SAC_SNAP_KIND_CHECKPOINT), 0);
  size_t n = (size_t)r.payload_bytes;
  unsigned char *buf = malloc(n);
  cr_assert_eq(sac_snap_read(&r, buf, n), 0);
  sac_snap_reader_close(&r);
  memcpy(buf + 8, &version, sizeof version); /* after the magic "SACCKPT\0" */
  sac_snap_writer_t w;
  cr_assert_eq(sac_snap_writer_open(&w, path, SAC_SNAP_KIND_CHECKPOINT), 0);
  cr_assert_eq(sac_snap_write(&w, buf, n - drop), 0);
  cr_assert_eq(sac_snap_writer_commit(&w), 0);
  free(buf);
}

Test(checkpoint, run_counters_carry_and_older_versions_load_newer_are_refused) {
  sac_t *s = make(2, 16);
  run(s, 0, 3);
  char path[128];
  snprintf(path, sizeof path, "%s/ckpt.bin", dir);
  sac_ckpt_counters_t cnt = {.updates = 3,
                             .env_steps = 900,
                             .policy_version = 3,
                             .wall_seconds = 1.5,
                             .episodes = 12,
                             .best_eval_return = -150.5},
                      got, peeked;
  sac_ckpt_shape_t shape;
  cr_assert_eq(sac_checkpoint_save(s, path, &cnt), 0);
  cr_assert_eq(sac_checkpoint_peek(path, &peeked, &shape), 0);
  cr_expect(shape.version == 3 && shape.obs_dim == 3 && shape.act_dim == 2 && shape.hidden == 16,
            "shape: version %u, obs %d, act %d, hidden %d", shape.version, shape.obs_dim, shape.act_dim,
            shape.hidden);
  cr_expect(peeked.episodes == 12 && peeked.best_eval_return == -150.5 && peeked.env_steps == 900,
            "peek: %llu episodes, best %g, %llu steps", (unsigned long long)peeked.episodes,
            peeked.best_eval_return, (unsigned long long)peeked.env_steps);
  cr_assert_eq(sac_checkpoint_load(s, path, &got), 0);
  cr_expect(got.episodes == 12 && got.best_eval_return == -150.5, "episodes and best carried");
  /* version 2 (no run counters): loads, with episodes 0 and the best unknown (NaN) */
  rewrite_as(path, 2, 16);
  cr_assert_eq(sac_checkpoint_load(s, path, &got), 0, "a version-2 checkpoint loads");
  cr_expect(got.episodes == 0 && isnan(got.best_eval_return) && got.updates == 3 && got.env_steps == 900);
  cr_assert_eq(sac_checkpoint_peek(path, &peeked, &shape), 0);
  cr_expect(shape.version == 2 && isnan(peeked.best_eval_return) && peeked.env_steps == 900);
  /* a newer version than this build reads is refused, by load and peek */
  rewrite_as(path, 4, 0);
  cr_expect_eq(sac_checkpoint_load(s, path, &got), SAC_EVERSION);
  cr_expect_eq(sac_checkpoint_peek(path, &peeked, NULL), SAC_EVERSION);
  sac_destroy(&s);
}
