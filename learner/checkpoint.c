/* Checkpoint payload (inside a common/snapshot.h file of kind CHECKPOINT), little-endian:
 *   "SACCKPT\0" | u32 version (1) | i32 obs_dim, act_dim, hidden, depth, batch
 *   | u64 n_params | u64 n_critic | u64 step | u64 updates, env_steps, policy_version
 *   | f64 wall_seconds | u32 noise_key[2]
 *   | f32 params[n_params] | f32 target[n_critic] | f32 adam_m[n_params]
 *   | f32 adam_v[n_params] | f32 adam_steps[3]
 * version 2 adds, after adam_steps: u32 has_scaler | f32 loss_scale | i32 scale_good
 * | u32 0 (the fp16 loss scaler; has_scaler 0 where the backend has none). Version 3
 * adds, after that: u64 episodes | f64 best_eval_return (NaN: no evaluation yet), the
 * run's counters a resumed run carries on from. Version 1 and 2 files still load (no
 * scaler state: a fp16 run then starts from the initial scale; episodes 0 and best NaN:
 * the caller takes the best from the run's metrics.csv). A newer version is refused with
 * a message naming both versions. */
#include "learner/checkpoint.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/log.h"
#include "common/snapshot.h"

#define CKPT_VERSION 3u

typedef struct {
  char magic[8];
  uint32_t version;
  int32_t obs_dim, act_dim, hidden, depth, batch;
  uint64_t n_params, n_critic, step, updates, env_steps, policy_version;
  double wall_seconds;
  uint32_t noise_key[2];
} ckpt_head_t;

typedef struct {
  uint32_t has_scaler;
  float scale;
  int32_t good;
  uint32_t zero;
} ckpt_scaler_t;

typedef struct {
  uint64_t episodes;
  double best_eval_return;
} ckpt_run_t;

static const int k_bufs[] = {SAC_BUF_PARAMS, SAC_BUF_TARGET, SAC_BUF_ADAM_M, SAC_BUF_ADAM_V, SAC_BUF_STEPS};

int sac_checkpoint_save(sac_t *s, const char *path, const sac_ckpt_counters_t *c) {
  const sac_hparams_t *hp = sac_hparams(s);
  ckpt_head_t h;
  memset(&h, 0, sizeof h);
  memcpy(h.magic, "SACCKPT", 8);
  h.version = CKPT_VERSION;
  h.obs_dim = hp->obs_dim, h.act_dim = hp->act_dim, h.hidden = hp->hidden, h.depth = hp->depth,
  h.batch = hp->batch;
  h.n_params = sac_param_count(s);
  h.n_critic = sac_buffer_len(s, SAC_BUF_TARGET);
  h.step = sac_step(s);
  h.updates = c->updates, h.env_steps = c->env_steps, h.policy_version = c->policy_version;
  h.wall_seconds = c->wall_seconds;
  sac_get_noise_key(s, h.noise_key);
  float *buf = malloc(sizeof(float) * h.n_params);
  if (!buf)
    return SAC_ENOMEM;
  sac_snap_writer_t w;
  int rc = sac_snap_writer_open(&w, path, SAC_SNAP_KIND_CHECKPOINT);
  if (rc == 0)
    rc = sac_snap_write(&w, &h, sizeof h);
  for (size_t i = 0; rc == 0 && i < sizeof k_bufs / sizeof k_bufs[0]; i++) {
    size_t n = sac_buffer_len(s, k_bufs[i]);
    rc = sac_get_buffer(s, k_bufs[i], buf, n);
    if (rc == 0)
      rc = sac_snap_write(&w, buf, n * sizeof(float));
  }
  ckpt_scaler_t sc;
  memset(&sc, 0, sizeof sc);
  sac_scaler_state_t st;
  if (sac_get_scaler(s, &st) == 0)
    sc.has_scaler = 1, sc.scale = st.scale, sc.good = st.good;
  if (rc == 0)
    rc = sac_snap_write(&w, &sc, sizeof sc);
  ckpt_run_t run = {c->episodes, c->best_eval_return};
  if (rc == 0)
    rc = sac_snap_write(&w, &run, sizeof run);
  if (rc == 0)
    rc = sac_snap_writer_commit(&w);
  else
    sac_snap_writer_abort(&w);
  free(buf);
  if (rc)
    SAC_ERROR("checkpoint", "cannot write checkpoint %s: %s", path, sac_strerror(rc));
  return rc;
}

/* Opens path and reads its header: 0, or an error (logged, but for SAC_ENOTFOUND) with
 * the reader closed. */
static int open_head(const char *path, sac_snap_reader_t *r, ckpt_head_t *h) {
  int rc = sac_snap_reader_open(r, path, SAC_SNAP_KIND_CHECKPOINT);
  if (rc)
    return rc;
  if ((rc = sac_snap_read(r, h, sizeof *h)) != 0) {
    SAC_ERROR("checkpoint", "%s: truncated header", path);
  } else if (memcmp(h->magic, "SACCKPT", 8) != 0) {
    SAC_ERROR("checkpoint", "%s: not a learner checkpoint", path);
    rc = SAC_EVERSION;
  } else if (h->version < 1 || h->version > CKPT_VERSION) {
    SAC_ERROR("checkpoint",
              "%s: checkpoint format version %u, this learner reads versions 1 to %u: resume it with the "
              "sacfleet release that wrote it, or a newer one",
              path, h->version, CKPT_VERSION);
    rc = SAC_EVERSION;
  }
  if (rc)
    sac_snap_reader_close(r);
  return rc;
}

/* The counters of h, and of the version-3 trailer when there is one. */
static void counters_of(const ckpt_head_t *h, const ckpt_run_t *run, sac_ckpt_counters_t *c) {
  c->updates = h->updates, c->env_steps = h->env_steps, c->policy_version = h->policy_version;
  c->wall_seconds = h->wall_seconds;
  c->episodes = h->version >= 3 ? run->episodes : 0;
  c->best_eval_return = h->version >= 3 ? run->best_eval_return : NAN;
}

/* The bytes between the header and the scaler/run trailers. */
static size_t body_bytes(const ckpt_head_t *h) {
  return sizeof(float) * (size_t)(3 * h->n_params + h->n_critic + 3);
}

int sac_checkpoint_peek(const char *path, sac_ckpt_counters_t *c, sac_ckpt_shape_t *shape) {
  sac_snap_reader_t r;
  ckpt_head_t h;
  int rc = open_head(path, &r, &h);
  if (rc)
    return rc;
  ckpt_run_t run = {0, NAN};
  if (h.version >= 3) { /* skip the tensors and the scaler: only the counters are wanted */
    char skip[4096];
    size_t left = body_bytes(&h) + sizeof(ckpt_scaler_t);
    while (rc == 0 && left > 0) {
      size_t n = left < sizeof skip ? left : sizeof skip;
      rc = sac_snap_read(&r, skip, n);
      left -= n;
    }
    if (rc == 0)
      rc = sac_snap_read(&r, &run, sizeof run);
  }
  sac_snap_reader_close(&r);
  if (rc) {
    SAC_ERROR("checkpoint", "%s: truncated", path);
    return rc;
  }
  counters_of(&h, &run, c);
  if (shape)
    *shape = (sac_ckpt_shape_t){h.version, h.obs_dim, h.act_dim, h.hidden, h.depth, h.batch};
  return 0;
}

int sac_checkpoint_load(sac_t *s, const char *path, sac_ckpt_counters_t *c) {
  sac_snap_reader_t r;
  ckpt_head_t h;
  int rc = open_head(path, &r, &h);
  if (rc)
    return rc;
  const sac_hparams_t *hp = sac_hparams(s);
  float *bufs[5] = {0};
  struct {
    const char *name;
    long long have, want;
  } fields[] = {{"obs_dim", h.obs_dim, hp->obs_dim},
                {"act_dim", h.act_dim, hp->act_dim},
                {"hidden", h.hidden, hp->hidden},
                {"depth", h.depth, hp->depth},
                {"batch_size", h.batch, hp->batch},
                {"parameter count", (long long)h.n_params, (long long)sac_param_count(s)}};
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
    if (fields[i].have != fields[i].want) {
      SAC_ERROR("checkpoint", "%s: %s is %lld in the checkpoint but %lld in this configuration", path,
                fields[i].name, fields[i].have, fields[i].want);
      rc = SAC_ECONFIG;
      goto out;
    }
  /* read everything before touching s, so a bad file leaves it as it was */
  for (size_t i = 0; rc == 0 && i < 5; i++) {
    size_t n = sac_buffer_len(s, k_bufs[i]);
    if (!(bufs[i] = malloc(n * sizeof(float))))
      rc = SAC_ENOMEM;
    else
      rc = sac_snap_read(&r, bufs[i], n * sizeof(float));
  }
  ckpt_scaler_t sc;
  memset(&sc, 0, sizeof sc);
  if (rc == 0 && h.version >= 2)
    rc = sac_snap_read(&r, &sc, sizeof sc);
  ckpt_run_t run = {0, NAN};
  if (rc == 0 && h.version >= 3)
    rc = sac_snap_read(&r, &run, sizeof run);
  for (size_t i = 0; rc == 0 && i < 5; i++)
    rc = sac_set_buffer(s, k_bufs[i], bufs[i], sac_buffer_len(s, k_bufs[i]));
  if (rc == 0 && sc.has_scaler) {
    sac_scaler_state_t st = {sc.scale, sc.good};
    int src = sac_set_scaler(s, &st);
    if (src == SAC_ENOTFOUND)
      SAC_INFO("checkpoint", "%s: loss scale %g not restored: this backend/precision has no loss scaler",
               path, (double)sc.scale);
    else if (src)
      SAC_WARN("checkpoint", "%s: loss scale %g not restored: %s", path, (double)sc.scale, sac_strerror(src));
    else
      SAC_INFO("checkpoint", "%s: loss scale %g, %d good updates restored", path, (double)sc.scale,
               (int)sc.good);
  }
  if (rc == 0) {
    sac_set_step(s, h.step);
    sac_set_noise_key(s, h.noise_key);
    counters_of(&h, &run, c);
  }
out:
  for (int i = 0; i < 5; i++)
    free(bufs[i]);
  sac_snap_reader_close(&r);
  return rc;
}
