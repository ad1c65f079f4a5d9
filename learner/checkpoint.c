/* Checkpoint payload (inside a common/snapshot.h file of kind CHECKPOINT), little-endian:
 *   "SACCKPT\0" | u32 version (1) | i32 obs_dim, act_dim, hidden, depth, batch
 *   | u64 n_params | u64 n_critic | u64 step | u64 updates, env_steps, policy_version
 *   | f64 wall_seconds | u32 noise_key[2]
 *   | f32 params[n_params] | f32 target[n_critic] | f32 adam_m[n_params]
 *   | f32 adam_v[n_params] | f32 adam_steps[3]
 * version 2 adds, after adam_steps: u32 has_scaler | f32 loss_scale | i32 scale_good
 * | u32 0 (the fp16 loss scaler; has_scaler 0 where the backend has none). Version 1
 * files still load (no scaler state: a fp16 run then starts from the initial scale). */
#include "learner/checkpoint.h"

#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/log.h"
#include "common/snapshot.h"

#define CKPT_VERSION 2u

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
  if (rc == 0)
    rc = sac_snap_writer_commit(&w);
  else
    sac_snap_writer_abort(&w);
  free(buf);
  if (rc)
    SAC_ERROR("checkpoint", "cannot write checkpoint %s: %s", path, sac_strerror(rc));
  return rc;
}

int sac_checkpoint_load(sac_t *s, const char *path, sac_ckpt_counters_t *c) {
  sac_snap_reader_t r;
  int rc = sac_snap_reader_open(&r, path, SAC_SNAP_KIND_CHECKPOINT);
  if (rc)
    return rc;
  ckpt_head_t h;
  const sac_hparams_t *hp = sac_hparams(s);
  float *bufs[5] = {0};
  if ((rc = sac_snap_read(&r, &h, sizeof h)) != 0)
    goto out;
  if (memcmp(h.magic, "SACCKPT", 8) != 0 || h.version < 1 || h.version > CKPT_VERSION) {
    SAC_ERROR("checkpoint", "%s: not a version-1..%u learner checkpoint", path, CKPT_VERSION);
    rc = SAC_EVERSION;
    goto out;
  }
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
    c->updates = h.updates, c->env_steps = h.env_steps, c->policy_version = h.policy_version;
    c->wall_seconds = h.wall_seconds;
  }
out:
  for (int i = 0; i < 5; i++)
    free(bufs[i]);
  sac_snap_reader_close(&r);
  return rc;
}
