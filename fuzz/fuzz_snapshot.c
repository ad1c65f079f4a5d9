/* libFuzzer target for the replay snapshot reader: common/snapshot.c (container: magic,
 * header checksum, declared length, trailer, payload checksum) and replay/shard.c's
 * sac_replay_shard_load (payload: metadata, ring, priorities, dedup table, streams, and
 * the content checks behind them), through files the fuzzer writes, as sac-replay reads
 * them at start. Byte 0 of an input picks the mode:
 *   bit 0 clear: the rest is the whole file (container and payload fuzzed together);
 *   bit 0 set:   the rest is the payload, wrapped here in a valid header and trailer with
 *                correct checksums, so that the payload's own checks are reached;
 *   bit 1:       load into a prioritised shard instead of a uniform one.
 * Properties beyond "no crash, no leak, no UB": a load returns one of its documented
 * codes; a loaded shard has size <= capacity, samples finite values from itself only,
 * accepts a new batch, and saving it and loading that file into a fresh shard gives
 * the same counters (the round trip of a restart). Seeds (SAC_FUZZ_SEED_DIR): real
 * snapshots of both samplers, as whole files and as payloads. Files live in
 * $TMPDIR (use a tmpfs: the round trip's writer fsyncs). */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "common/log.h"
#include "common/snapshot.h"
#include "fuzz/fuzz_snapfile.h"
#include "replay/shard.h"

static char g_in[512], g_out[512];

static void shard_cfg(sac_replay_shard_config_t *c, int prioritized) {
  sac_replay_shard_config_default(c);
  c->shard_id = 3;
  c->capacity = 1024;
  c->obs_dim = 3;
  c->act_dim = 1;
  c->sampler = prioritized ? SAC_REPLAY_PRIORITIZED : SAC_REPLAY_UNIFORM;
  c->min_size = 1;
  c->max_batch_rows = 256;
  c->max_sample_batch = 64;
  c->max_actors = 16;
  c->max_streams = 64;
}

/* A batch of 3 rows from 2 envs (env 1 terminated, env 0 open with a tail). */
static void batch(sac_wire_transitions_t *t, uint64_t actor, uint64_t seq) {
  static const uint32_t env[3] = {0, 1, 0}, rows[1] = {1}, tail_env[1] = {0};
  static const float obs[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, act[3] = {0.1f, 0.2f, 0.3f}, rew[3] = {1, 2, 3};
  static const float next[3] = {0, 0, 1}, tail[3] = {9, 9, 9};
  static const uint8_t term[3] = {0, 1, 0}, trunc[3] = {0, 0, 0};
  *t = (sac_wire_transitions_t){.actor_id = actor,
                                .seq = seq,
                                .session = 77,
                                .n = 3,
                                .obs_dim = 3,
                                .act_dim = 1,
                                .env_ids = env,
                                .obs = obs,
                                .action = act,
                                .reward = rew,
                                .terminated = term,
                                .truncated = trunc,
                                .n_next = 1,
                                .next_obs_rows = rows,
                                .next_obs = next,
                                .n_tail = 1,
                                .tail_env_ids = tail_env,
                                .tail_obs = tail};
}

static void seed_from_shard(const char *dir, int prioritized) {
  sac_replay_shard_config_t c;
  shard_cfg(&c, prioritized);
  sac_replay_shard_t *sh = sac_replay_shard_new(&c, NULL);
  if (!sh)
    return;
  for (uint64_t s = 1; s <= 20; s++) {
    sac_wire_transitions_t t;
    sac_replay_insert_result_t res;
    batch(&t, s % 3, s / 3 + 1);
    sac_replay_shard_insert(sh, &t, &res);
  }
  sac_replay_sample_t smp;
  if (sac_replay_shard_sample(sh, 16, 0.4f, &smp) == 0 && prioritized) {
    float pr[64];
    for (uint32_t i = 0; i < smp.n; i++)
      pr[i] = 0.5f + (float)i;
    uint32_t a, b, f;
    sac_replay_shard_update_priorities(sh, smp.n, smp.indices, pr, &a, &b, &f);
  }
  char path[1024];
  snprintf(path, sizeof path, "%s/.snap-%d", dir, prioritized);
  uint64_t bytes = 0;
  if (sac_replay_shard_save(sh, path, &bytes) == 0) {
    FILE *f = fopen(path, "rb");
    static uint8_t buf[1 << 20];
    size_t n = f ? fread(buf + 1, 1, sizeof buf - 1, f) : 0;
    if (f)
      fclose(f);
    remove(path);
    if (n > 80) {
      char name[1024];
      buf[0] = (uint8_t)(prioritized ? 2 : 0); /* whole file */
      snprintf(name, sizeof name, "%s/file_%s", dir, prioritized ? "prioritized" : "uniform");
      write_file(name, buf, n + 1, NULL, 0, NULL, 0);
      buf[64] = (uint8_t)(prioritized ? 3 : 1); /* the payload alone */
      snprintf(name, sizeof name, "%s/payload_%s", dir, prioritized ? "prioritized" : "uniform");
      write_file(name, buf + 64, n - 64 - 16 + 1, NULL, 0, NULL, 0);
    }
  }
  sac_replay_shard_destroy(&sh);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  sac_log_set_level(SAC_LOG_ERROR);
  const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  snprintf(g_in, sizeof g_in, "%s/sac-fuzz-snapshot-%ld.in", tmp, (long)getpid());
  snprintf(g_out, sizeof g_out, "%s/sac-fuzz-snapshot-%ld.out", tmp, (long)getpid());
  const char *dir = getenv("SAC_FUZZ_SEED_DIR");
  if (dir) {
    seed_from_shard(dir, 0);
    seed_from_shard(dir, 1);
  }
  return 0;
}

static void same_counters(const sac_replay_shard_stats_t *a, const sac_replay_shard_stats_t *b) {
  if (a->size != b->size || a->filled != b->filled || a->inserted_rows_total != b->inserted_rows_total ||
      a->inserted_batches_total != b->inserted_batches_total ||
      a->sampled_rows_total != b->sampled_rows_total || a->actors != b->actors ||
      a->obs_only_slots != b->obs_only_slots)
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  int wrapped = data[0] & 1, prioritized = (data[0] >> 1) & 1, adopt = (data[0] >> 2) & 1;
  data++, size--;
  if ((wrapped ? write_wrapped(g_in, data, size, SAC_SNAP_KIND_REPLAY)
               : write_file(g_in, data, size, NULL, 0, NULL, 0)) != 0)
    abort();
  sac_replay_shard_config_t c;
  shard_cfg(&c, prioritized);
  c.adopt_snapshot = adopt; /* half the inputs reach the content checks whatever shard id they name */
  sac_replay_shard_t *sh = sac_replay_shard_new(&c, NULL);
  if (!sh)
    abort();
  int rc = sac_replay_shard_load(sh, g_in);
  if (rc != 0 && rc != SAC_EIO && rc != SAC_ECHECKSUM && rc != SAC_EVERSION && rc != SAC_EPROTO &&
      rc != SAC_ECONFIG && rc != SAC_ESTATE)
    abort(); /* SAC_ENOTFOUND cannot be: the file exists; SAC_ESTATE: another shard id's */
  sac_replay_shard_stats_t st;
  sac_replay_shard_stats(sh, &st);
  if (st.size > st.capacity || st.filled > st.capacity)
    abort();
  if (rc == 0) {
    sac_replay_sample_t smp;
    int s = sac_replay_shard_sample(sh, 32, 0.4f, &smp);
    if (s == 0) {
      for (uint32_t i = 0; i < smp.n; i++) {
        if (SAC_WIRE_INDEX_SHARD(smp.indices[i]) != c.shard_id || !isfinite(smp.reward[i]) ||
            !isfinite(smp.weights[i]) || (smp.terminated[i] != 0.0f && smp.terminated[i] != 1.0f))
          abort();
        for (uint32_t k = 0; k < 3; k++)
          if (!isfinite(smp.obs[i * 3 + k]) || !isfinite(smp.next_obs[i * 3 + k]))
            abort();
        if (!isfinite(smp.action[i]))
          abort();
      }
      if (prioritized) {
        float pr[32];
        for (uint32_t i = 0; i < smp.n; i++)
          pr[i] = (float)i;
        uint32_t a, b, f;
        sac_replay_shard_update_priorities(sh, smp.n, smp.indices, pr, &a, &b, &f);
      }
    } else if (s != SAC_EAGAIN || st.size != 0) {
      abort(); /* a shard holding transitions can sample them */
    }
    sac_wire_transitions_t t;
    sac_replay_insert_result_t res;
    batch(&t, 4095, 1);
    t.session = 0xfeedULL;
    if (sac_replay_shard_insert(sh, &t, &res) != 0)
      abort(); /* a restored shard takes new data */
    /* the round trip of a restart */
    uint64_t bytes;
    if (sac_replay_shard_save(sh, g_out, &bytes) != 0)
      abort();
    sac_replay_shard_t *sh2 = sac_replay_shard_new(&c, NULL);
    if (!sh2 || sac_replay_shard_load(sh2, g_out) != 0)
      abort();
    sac_replay_shard_stats_t s1, s2;
    sac_replay_shard_stats(sh, &s1);
    sac_replay_shard_stats(sh2, &s2);
    same_counters(&s1, &s2);
    sac_replay_shard_destroy(&sh2);
  }
  sac_replay_shard_destroy(&sh);
  return 0;
}
