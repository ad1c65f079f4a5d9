/* Tests of replay snapshots: a saved shard restores to identical contents and state; a
 * missing, truncated, corrupt, foreign-config or internally inconsistent snapshot is
 * refused and never loaded as garbage; the server refuses to start on a bad snapshot
 * unless asked to start empty, and then moves the bad file aside. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/snapshot.h"
#include "replay/server.h"
#include "replay/shard.h"
#include "tests/replay_testgen.h"

static char g_dir[256];

static void setup(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/sac-snap-test-%ld-XXXXXX", (long)getpid());
  cr_assert_not_null(mkdtemp(g_dir));
}

static void teardown(void) {
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  int rc = system(cmd);
  (void)rc;
}

static sac_replay_shard_config_t config(sac_replay_sampler_kind_t kind) {
  sac_replay_shard_config_t c;
  sac_replay_shard_config_default(&c);
  c.capacity = 2048;
  c.obs_dim = 5;
  c.act_dim = 2;
  c.sampler = kind;
  c.min_size = 1;
  c.max_batch_rows = 256;
  c.max_sample_batch = 256;
  c.seed = 99;
  return c;
}

static void fill(sac_replay_shard_t *sh, int batches) {
  tg_t g;
  tg_init(&g, 4, 6, 5, 2, 11, 10);
  for (int b = 1; b <= batches; b++) {
    sac_wire_transitions_t v = *tg_next(&g);
    v.seq = (uint64_t)b;
    v.session = 77;
    sac_replay_insert_result_t r;
    cr_assert_eq(sac_replay_shard_insert(sh, &v, &r), 0);
  }
  tg_free(&g);
}

static long file_size(const char *p) {
  struct stat sb;
  return stat(p, &sb) == 0 ? (long)sb.st_size : -1;
}

Test(replay_snapshot, round_trip_restores_everything, .init = setup, .fini = teardown) {
  sac_replay_shard_config_t c = config(SAC_REPLAY_PRIORITIZED);
  sac_replay_shard_t *a = sac_replay_shard_new(&c, NULL);
  fill(a, 50); /* 3000 rows into 2048 slots: wrapped */
  sac_replay_sample_t s;
  cr_assert_eq(sac_replay_shard_sample(a, 64, 0.4f, &s), 0);
  float p[64];
  for (int i = 0; i < 64; i++)
    p[i] = (float)(i % 9) + 0.5f;
  uint32_t ok;
  sac_replay_shard_update_priorities(a, 64, s.indices, p, &ok, NULL, NULL);
  char path[400];
  snprintf(path, sizeof path, "%s/shard.snap", g_dir);
  uint64_t bytes = 0;
  cr_assert_eq(sac_replay_shard_save(a, path, &bytes), 0);
  cr_assert_gt(bytes, 0);
  cr_assert_eq(file_size(path), (long)bytes + 64 + 16);
  sac_replay_shard_t *b = sac_replay_shard_new(&c, NULL);
  cr_assert_eq(sac_replay_shard_load(b, path), 0);
  sac_replay_shard_stats_t sa, sb;
  sac_replay_shard_stats(a, &sa);
  sac_replay_shard_stats(b, &sb);
  cr_assert_eq(sa.size, sb.size);
  cr_assert_eq(sa.inserted_rows_total, sb.inserted_rows_total);
  cr_assert_eq(sa.priority_updates_total, sb.priority_updates_total);
  cr_assert_float_eq(sa.limiter_diff, sb.limiter_diff, 1e-9);
  /* the slots' generations survived (the ring has wrapped): the indices sampled before
   * the save still name their transitions, and no update to them is stale */
  uint32_t ok_b, stale_b;
  sac_replay_shard_update_priorities(b, 64, s.indices, p, &ok_b, &stale_b, NULL);
  cr_assert_eq(stale_b, 0, "%u of the 64 indices sampled before the save are stale after the load", stale_b);
  cr_assert_eq(ok_b, ok);
  /* same seed state is not saved, but contents are: both shards sample identical rows
   * for identical slot choices, so compare the distributions via a fresh pair */
  sac_replay_shard_t *a2 = sac_replay_shard_new(&c, NULL);
  cr_assert_eq(sac_replay_shard_load(a2, path), 0);
  sac_replay_sample_t s1, s2;
  cr_assert_eq(sac_replay_shard_sample(a2, 256, 0.4f, &s1), 0);
  float obs1[256 * 5];
  uint64_t idx1[256];
  memcpy(obs1, s1.obs, sizeof obs1);
  memcpy(idx1, s1.indices, sizeof idx1);
  cr_assert_eq(sac_replay_shard_sample(b, 256, 0.4f, &s2), 0);
  cr_assert_eq(memcmp(obs1, s2.obs, sizeof obs1), 0, "restored shards sample the same transitions");
  cr_assert_eq(memcmp(idx1, s2.indices, sizeof idx1), 0);
  /* dedup state survived: batch 50 of session 77 is a duplicate */
  tg_t g;
  tg_init(&g, 4, 6, 5, 2, 11, 10);
  sac_wire_transitions_t v = *tg_next(&g);
  v.seq = 50;
  v.session = 77;
  sac_replay_insert_result_t r;
  cr_assert_eq(sac_replay_shard_insert(b, &v, &r), 0);
  cr_assert_eq(r.kind, SAC_REPLAY_SEQ_DUPLICATE);
  cr_assert_eq(r.acked_seq, 50);
  tg_free(&g);
  sac_replay_shard_destroy(&a);
  sac_replay_shard_destroy(&a2);
  sac_replay_shard_destroy(&b);
}

static void copy_prefix(const char *from, const char *to, long n) {
  FILE *f = fopen(from, "rb"), *t = fopen(to, "wb");
  cr_assert(f && t);
  for (long i = 0; i < n; i++) {
    int ch = fgetc(f);
    if (ch == EOF)
      break;
    fputc(ch, t);
  }
  fclose(f);
  fclose(t);
}

static void flip_byte(const char *path, long at) {
  int fd = open(path, O_RDWR);
  cr_assert_geq(fd, 0);
  unsigned char ch;
  cr_assert_eq(pread(fd, &ch, 1, at), 1);
  ch ^= 0x5a;
  cr_assert_eq(pwrite(fd, &ch, 1, at), 1);
  close(fd);
}

Test(replay_snapshot, bad_snapshots_are_refused, .init = setup, .fini = teardown) {
  sac_replay_shard_config_t c = config(SAC_REPLAY_UNIFORM);
  sac_replay_shard_t *a = sac_replay_shard_new(&c, NULL);
  fill(a, 20);
  char path[400], bad[400];
  snprintf(path, sizeof path, "%s/a.snap", g_dir);
  snprintf(bad, sizeof bad, "%s/bad.snap", g_dir);
  cr_assert_eq(sac_replay_shard_save(a, path, NULL), 0);
  long size = file_size(path);
  sac_replay_shard_t *b = sac_replay_shard_new(&c, NULL);
  fill(b, 3);
  sac_replay_shard_stats_t st;

  cr_assert_eq(sac_replay_shard_load(b, "/nonexistent/dir/x.snap"), SAC_ENOTFOUND);
  sac_replay_shard_stats(b, &st);
  cr_assert_eq(st.size, 180, "a missing snapshot leaves the shard as it was");

  /* truncated anywhere: header, payload, trailer */
  long cuts[] = {0, 10, 63, 64, 500, size / 2, size - 17, size - 1};
  for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
    copy_prefix(path, bad, cuts[i]);
    int rc = sac_replay_shard_load(b, bad);
    cr_assert(rc == SAC_EIO || rc == SAC_ECHECKSUM, "cut at %ld: %s", cuts[i], sac_strerror(rc));
    sac_replay_shard_stats(b, &st);
    cr_assert_eq(st.size, 180, "a refused file never touches the shard (cut at %ld)", cuts[i]);
  }
  /* one flipped byte anywhere: header, payload, trailer */
  long flips[] = {2, 9, 20, 100, size / 3, size - 20, size - 12, size - 3};
  for (size_t i = 0; i < sizeof flips / sizeof flips[0]; i++) {
    copy_prefix(path, bad, size);
    flip_byte(bad, flips[i]);
    int rc = sac_replay_shard_load(b, bad);
    cr_assert(rc == SAC_ECHECKSUM || rc == SAC_EIO || rc == SAC_EVERSION, "flip at %ld: %s", flips[i],
              sac_strerror(rc));
    sac_replay_shard_stats(b, &st);
    cr_assert_eq(st.size, 180, "flip at %ld", flips[i]);
  }
  /* a snapshot of a shard with other dimensions */
  sac_replay_shard_config_t c2 = c;
  c2.obs_dim = 6;
  sac_replay_shard_t *other = sac_replay_shard_new(&c2, NULL);
  cr_assert_eq(sac_replay_shard_load(other, path), SAC_ECONFIG);
  sac_replay_shard_destroy(&other);

  /* valid checksum, inconsistent content: a next pointer out of range. Payload layout:
   * meta 256 bytes, obs filled*20, act filled*8, reward filled*4, next filled*4. */
  copy_prefix(path, bad, size);
  long filled = 1200 + 20 * 6 * 0; /* 20 batches x 60 rows = 1200 transitions + final/tail obs */
  sac_replay_shard_stats_t sa;
  sac_replay_shard_stats(a, &sa);
  filled = (long)sa.filled;
  long next_at = 64 + 256 + filled * (20 + 8 + 4);
  int fd = open(bad, O_RDWR);
  uint32_t huge = 0x7fffffffu;
  for (long s = 0; s < 4; s++)
    cr_assert_eq(pwrite(fd, &huge, 4, next_at + 4 * s), 4);
  /* recompute the payload checksum so only the content check can catch it */
  long payload = size - 64 - 16;
  unsigned char *buf = malloc((size_t)payload);
  cr_assert_eq(pread(fd, buf, (size_t)payload, 64), payload);
  uint32_t crc = sac_crc32c(0, buf, (size_t)payload);
  cr_assert_eq(pwrite(fd, &crc, 4, 64 + payload), 4);
  free(buf);
  close(fd);
  int rc = sac_replay_shard_load(b, bad);
  cr_assert_eq(rc, SAC_EPROTO, "inconsistent content: %s", sac_strerror(rc));
  sac_replay_shard_stats(b, &st);
  cr_assert_eq(st.size, 0, "refused after the checksum: the shard is left empty, not half-loaded");

  /* the intact file still loads */
  cr_assert_eq(sac_replay_shard_load(b, path), 0);
  sac_replay_shard_stats(b, &st);
  cr_assert_eq(st.size, sa.size);
  sac_replay_shard_destroy(&a);
  sac_replay_shard_destroy(&b);
}

Test(replay_snapshot, server_refuses_bad_snapshot_unless_told, .init = setup, .fini = teardown) {
  char path[400];
  snprintf(path, sizeof path, "%s/srv.snap", g_dir);
  FILE *f = fopen(path, "wb");
  fputs("this is not a snapshot, just bytes that happen to be here", f);
  fclose(f);
  sac_replay_server_config_t c;
  sac_replay_server_config_default(&c);
  c.shard = config(SAC_REPLAY_UNIFORM);
  snprintf(c.insert_endpoint, sizeof c.insert_endpoint, "inproc://snap-ins");
  snprintf(c.sample_endpoint, sizeof c.sample_endpoint, "inproc://snap-smp");
  snprintf(c.snapshot_path, sizeof c.snapshot_path, "%s", path);
  int err = 0;
  sac_replay_server_t *s = sac_replay_server_new(&c, NULL, &err);
  cr_assert_null(s);
  cr_assert_eq(err, SAC_ECONFIG);
  cr_assert_geq(file_size(path), 1, "the bad file is left for the operator");
  c.start_empty_on_bad_snapshot = 1;
  s = sac_replay_server_new(&c, NULL, &err);
  cr_assert_not_null(s, "starts empty when asked");
  cr_assert_eq(file_size(path), -1, "the bad snapshot was moved aside");
  sac_replay_stats_t st;
  sac_replay_server_stats(s, &st);
  cr_assert_eq(st.shard.size, 0);
  /* stopping writes a good snapshot that the next start restores */
  cr_assert_eq(sac_replay_server_start(s), 0);
  sac_replay_server_stop(s);
  cr_assert_eq(sac_replay_server_join(s), 0);
  sac_replay_server_destroy(&s);
  cr_assert_gt(file_size(path), 64);
  c.start_empty_on_bad_snapshot = 0;
  s = sac_replay_server_new(&c, NULL, &err);
  cr_assert_not_null(s);
  sac_replay_server_destroy(&s);
}

Test(replay_snapshot, periodic_snapshots_are_taken, .init = setup, .fini = teardown) {
  char path[400];
  snprintf(path, sizeof path, "%s/periodic.snap", g_dir);
  sac_replay_server_config_t c;
  sac_replay_server_config_default(&c);
  c.shard = config(SAC_REPLAY_UNIFORM);
  snprintf(c.insert_endpoint, sizeof c.insert_endpoint, "inproc://periodic-ins");
  snprintf(c.sample_endpoint, sizeof c.sample_endpoint, "inproc://periodic-smp");
  snprintf(c.snapshot_path, sizeof c.snapshot_path, "%s", path);
  c.snapshot_interval_s = 0.1;
  sac_replay_server_t *s = sac_replay_server_new(&c, NULL, NULL);
  cr_assert_not_null(s);
  cr_assert_eq(sac_replay_server_start(s), 0);
  sac_replay_stats_t st;
  for (int i = 0; i < 200; i++) { /* at most 4 s */
    sac_replay_server_stats(s, &st);
    if (st.snapshots_total >= 3)
      break;
    usleep(20000);
  }
  cr_assert_geq(st.snapshots_total, 3, "three periodic snapshots in 4 s at a 0.1 s interval");
  cr_assert_eq(st.snapshot_failures_total, 0);
  cr_assert_gt(st.last_snapshot_unix_ns, 0);
  cr_assert_gt(file_size(path), 64);
  sac_replay_server_stop(s);
  cr_assert_eq(sac_replay_server_join(s), 0);
  sac_replay_server_destroy(&s);
}

/* A resumed run may grow its replay (learner/service.c sizes it to the run's steps): a
 * snapshot whose ring never wrapped loads into a larger shard with every transition; one
 * that wrapped is still refused (its slot order would not survive), as is a smaller shard. */
Test(replay_snapshot, unwrapped_snapshot_loads_into_a_larger_shard, .init = setup, .fini = teardown) {
  sac_replay_sampler_kind_t kinds[] = {SAC_REPLAY_UNIFORM, SAC_REPLAY_PRIORITIZED};
  for (int k = 0; k < 2; k++) {
    sac_replay_shard_config_t c = config(kinds[k]);
    sac_replay_shard_t *a = sac_replay_shard_new(&c, NULL);
    fill(a, 20); /* 1200 rows into 2048 slots: not wrapped */
    char path[400], wrapped[400];
    snprintf(path, sizeof path, "%s/small%d.snap", g_dir, k);
    snprintf(wrapped, sizeof wrapped, "%s/wrapped%d.snap", g_dir, k);
    cr_assert_eq(sac_replay_shard_save(a, path, NULL), 0);
    fill(a, 50); /* now wrapped */
    cr_assert_eq(sac_replay_shard_save(a, wrapped, NULL), 0);
    sac_replay_shard_config_t big = c;
    big.capacity = 4 * c.capacity;
    sac_replay_shard_t *b = sac_replay_shard_new(&big, NULL);
    cr_assert_eq(sac_replay_shard_load(b, path), 0, "an unwrapped snapshot loads into a larger shard");
    sac_replay_shard_stats_t sa, sb;
    sac_replay_shard_t *a1 = sac_replay_shard_new(&c, NULL);
    cr_assert_eq(sac_replay_shard_load(a1, path), 0);
    sac_replay_shard_stats(a1, &sa);
    sac_replay_shard_stats(b, &sb);
    cr_assert_eq(sb.size, sa.size);
    cr_assert_eq(sb.inserted_rows_total, sa.inserted_rows_total);
    sac_replay_sample_t s;
    cr_assert_eq(sac_replay_shard_sample(b, 256, 0.4f, &s), 0, "the grown shard samples");
    fill(b, 40); /* and keeps inserting past the old capacity */
    sac_replay_shard_stats(b, &sb);
    cr_assert_gt(sb.size, sa.size);
    cr_assert_eq(sac_replay_shard_load(b, wrapped), SAC_ECONFIG,
                 "a wrapped snapshot needs the same capacity");
    /* what a resumed embedded run sizes its shard to (learner/service.c): the larger of
     * the run's size and an unwrapped snapshot's, a wrapped snapshot's own capacity */
    uint64_t cap = 0;
    int wr = -1;
    cr_assert_eq(sac_replay_shard_resume_capacity(path, big.capacity, &cap, &wr), 0);
    cr_assert(cap == big.capacity && wr == 0, "grows: %llu %d", (unsigned long long)cap, wr);
    cr_assert_eq(sac_replay_shard_resume_capacity(path, c.capacity / 2, &cap, &wr), 0);
    cr_assert(cap == c.capacity && wr == 0, "never below the snapshot: %llu %d", (unsigned long long)cap, wr);
    cr_assert_eq(sac_replay_shard_resume_capacity(wrapped, big.capacity, &cap, &wr), 0);
    cr_assert(cap == c.capacity && wr == 1, "a wrapped ring keeps its capacity: %llu %d",
              (unsigned long long)cap, wr);
    sac_replay_shard_config_t same = big;
    same.capacity = cap;
    sac_replay_shard_t *e = sac_replay_shard_new(&same, NULL);
    cr_assert_eq(sac_replay_shard_load(e, wrapped), 0, "the capacity it gives takes the wrapped snapshot");
    sac_replay_shard_destroy(&e);
    char none[400];
    snprintf(none, sizeof none, "%s/none%d.snap", g_dir, k);
    cr_assert_eq(sac_replay_shard_resume_capacity(none, big.capacity, &cap, &wr), SAC_ENOTFOUND);
    sac_replay_shard_config_t small = c;
    small.capacity = c.capacity / 2;
    sac_replay_shard_t *d = sac_replay_shard_new(&small, NULL);
    cr_assert_eq(sac_replay_shard_load(d, path), SAC_ECONFIG, "a smaller shard is refused");
    sac_replay_shard_destroy(&a);
    sac_replay_shard_destroy(&a1);
    sac_replay_shard_destroy(&b);
    sac_replay_shard_destroy(&d);
  }
}
