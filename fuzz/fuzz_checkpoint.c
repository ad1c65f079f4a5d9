/* libFuzzer target for the learner checkpoint reader (learner/checkpoint.c over
 * common/snapshot.c), through files the fuzzer writes, as `sac-learner --resume` reads
 * them. Byte 0 of an input picks the mode: bit 0 clear, the rest is the whole file; bit 0
 * set, the rest is the payload, wrapped here in a valid checkpoint container (header and
 * trailer with correct checksums) so that the payload's own checks are reached. The
 * learner loaded into is a small cpu-backend SAC (obs 3, act 1, 1 x 8, batch 4).
 * Properties beyond "no crash, no leak, no UB": a load returns one of its documented
 * codes; a failed load other than SAC_EIO leaves every buffer of the learner as it was
 * (checkpoint.h: "On error s is unchanged unless the error is SAC_EIO mid-read"); after
 * a successful one the learner runs an update and hands out its policy. Seeds
 * (SAC_FUZZ_SEED_DIR): a real checkpoint, as a file and as a payload. */
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
#include "learner/backend.h"
#include "learner/checkpoint.h"
#include "learner/sac.h"

static char g_in[512];
static sac_backend_t *g_be;
static sac_t *g_sac;
static float *g_before[6], *g_after;
static size_t g_len[6];
static const int k_bufs[] = {SAC_BUF_PARAMS, SAC_BUF_TARGET, SAC_BUF_ADAM_M, SAC_BUF_ADAM_V, SAC_BUF_STEPS};
#define N_BUFS (sizeof k_bufs / sizeof k_bufs[0])

static sac_t *new_sac(void) {
  sac_hparams_t hp;
  sac_hparams_default(&hp, 3, 1);
  hp.hidden = 8;
  hp.depth = 1;
  hp.batch = 4;
  hp.seed = 5;
  sac_t *s = NULL;
  if (sac_new(&hp, g_be, &s) != 0)
    abort();
  return s;
}

static void snapshot_buffers(sac_t *s, float **out) {
  for (size_t i = 0; i < N_BUFS; i++)
    if (sac_get_buffer(s, k_bufs[i], out[i], g_len[i]) != 0)
      abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  sac_log_set_level(SAC_LOG_ERROR);
  const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  snprintf(g_in, sizeof g_in, "%s/sac-fuzz-checkpoint-%ld.in", tmp, (long)getpid());
  if (sac_backend_new("cpu", 1, &g_be) != 0)
    abort();
  g_sac = new_sac();
  size_t max = 0;
  for (size_t i = 0; i < N_BUFS; i++) {
    g_len[i] = sac_buffer_len(g_sac, k_bufs[i]);
    if (!(g_before[i] = malloc(g_len[i] * sizeof(float))))
      abort();
    max = g_len[i] > max ? g_len[i] : max;
  }
  if (!(g_after = malloc(max * sizeof(float))))
    abort();
  const char *dir = getenv("SAC_FUZZ_SEED_DIR");
  if (dir) {
    char path[1024];
    snprintf(path, sizeof path, "%s/.ckpt", dir);
    sac_ckpt_counters_t c = {123, 4567, 120, 8.5};
    sac_update(g_sac); /* Adam state and step counters that are not all zero */
    if (sac_checkpoint_save(g_sac, path, &c) == 0) {
      static uint8_t buf[1 << 20];
      FILE *f = fopen(path, "rb");
      size_t n = f ? fread(buf + 1, 1, sizeof buf - 1, f) : 0;
      if (f)
        fclose(f);
      remove(path);
      if (n > 80) {
        buf[0] = 0;
        snprintf(path, sizeof path, "%s/file", dir);
        write_file(path, buf, n + 1, NULL, 0, NULL, 0);
        buf[64] = 1;
        snprintf(path, sizeof path, "%s/payload", dir);
        write_file(path, buf + 64, n - 64 - 16 + 1, NULL, 0, NULL, 0);
      }
    }
    sac_destroy(&g_sac);
    g_sac = new_sac();
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  int wrapped = data[0] & 1;
  data++, size--;
  if ((wrapped ? write_wrapped(g_in, data, size, SAC_SNAP_KIND_CHECKPOINT)
               : write_file(g_in, data, size, NULL, 0, NULL, 0)) != 0)
    abort();
  snapshot_buffers(g_sac, g_before);
  sac_ckpt_counters_t c;
  memset(&c, 0, sizeof c);
  int rc = sac_checkpoint_load(g_sac, g_in, &c);
  if (rc != 0 && rc != SAC_EIO && rc != SAC_ECHECKSUM && rc != SAC_EVERSION && rc != SAC_ECONFIG &&
      rc != SAC_ENOMEM)
    abort();
  if (rc != 0 && rc != SAC_EIO) {
    for (size_t i = 0; i < N_BUFS; i++) {
      if (sac_get_buffer(g_sac, k_bufs[i], g_after, g_len[i]) != 0)
        abort();
      if (memcmp(g_before[i], g_after, g_len[i] * sizeof(float)) != 0)
        abort(); /* a refused checkpoint changed the learner */
    }
    return 0;
  }
  if (rc == 0) {
    /* the restored learner runs an update on a batch and hands out its policy */
    sac_batch_t *b = sac_batch(g_sac);
    const sac_hparams_t *hp = sac_hparams(g_sac);
    size_t B = (size_t)hp->batch;
    float obs[4 * 3] = {0.1f, 0.2f, 0.3f, -0.1f, 0.5f, 0.9f, 1, 0, -1, 0.3f, 0.3f, 0.3f};
    float act[4] = {0.5f, -0.5f, 0, 1}, rew[4] = {-1, -2, -3, -4}, term[4] = {0, 1, 0, 0},
          one[4] = {1, 1, 1, 1};
    const sac_backend_ops_t *ops = g_be->ops;
    if (ops->upload(g_be, b->obs, obs, B * 3) || ops->upload(g_be, b->next_obs, obs, B * 3) ||
        ops->upload(g_be, b->action, act, B) || ops->upload(g_be, b->reward, rew, B) ||
        ops->upload(g_be, b->terminated, term, B) || ops->upload(g_be, b->weights, one, B))
      abort();
    sac_update(g_sac);
    sac_stats_t st;
    if (sac_stats(g_sac, &st) != 0 || sac_get_actor(g_sac, g_after) != 0)
      abort();
  }
  /* the next input starts from a fresh learner state only when this one changed it */
  if (rc == 0 || rc == SAC_EIO) {
    sac_destroy(&g_sac);
    g_sac = new_sac();
  }
  return 0;
}
