/* Data-parallel learners (see dp.h): bootstrap and configuration agreement, rank 0's
 * state to everyone, the gradient hook, the per-iteration agreement and the identity
 * check. The control channel is always the zmq collective on the coordinator endpoint;
 * the gradients go over it too (zmq) or over NCCL (nccl). */
#include "learner/dp.h"

#include <assert.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "common/rng.h"

#define DP_PROTOCOL 1
#define HINT "; exiting (restart all ranks; they resume from rank 0's checkpoint)"

struct sac_dp {
  sac_coll_t *ctl;  /* zmq, on the coordinator: handshake, state, rounds, checks */
  sac_coll_t *grad; /* the gradient collective: ctl itself (zmq) or nccl */
  sac_backend_t *be;
  int rank, size;
  int failed;
  char config[16384]; /* this rank's canonical configuration */
  /* zmq with a device backend: the gradients (and the overflow slot) pass through
   * these host buffers */
  float *stage[3];
  size_t stage_n[3];
  /* a backend that can skip a step on overflow (fp16): 1 float of backend memory that
   * carries this rank's overflow flag through the all-reduce (backend.h) */
  float *ovf_slot;
  sac_dp_stats_t st;
};

void sac_dp_cfg_default(sac_dp_cfg_t *c) {
  memset(c, 0, sizeof *c);
  c->size = 1;
  strcpy(c->coord, "tcp://127.0.0.1:9300");
  strcpy(c->collective, "auto");
  c->timeout_ms = 30000;
  c->connect_timeout_ms = 120000;
}

int sac_dp_describe(char *buf, size_t cap, const char *key, const char *fmt, ...) {
  size_t used = strlen(buf);
  int n = snprintf(buf + used, cap - used, "%s = ", key);
  if (n < 0 || (size_t)n >= cap - used) {
    buf[used] = '\0';
    return SAC_ETOOBIG;
  }
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(buf + used + n, cap - used - (size_t)n, fmt, ap);
  va_end(ap);
  if (m < 0 || (size_t)(n + m + 1) >= cap - used) {
    buf[used] = '\0';
    return SAC_ETOOBIG;
  }
  strcat(buf + used, "\n");
  return 0;
}

/* The value of key in a canonical configuration, copied into out[cap]; 0 if absent. */
static int lookup(const char *conf, const char *key, size_t key_len, char *out, size_t cap) {
  for (const char *line = conf; *line;) {
    const char *end = strchr(line, '\n');
    size_t len = end ? (size_t)(end - line) : strlen(line);
    if (len > key_len + 3 && memcmp(line, key, key_len) == 0 && memcmp(line + key_len, " = ", 3) == 0) {
      size_t vl = len - key_len - 3;
      if (vl >= cap)
        vl = cap - 1;
      memcpy(out, line + key_len + 3, vl);
      out[vl] = '\0';
      return 1;
    }
    line += len + (end ? 1 : 0);
  }
  return 0;
}

int sac_dp_compare(const char *rank0, const char *other, int rank, char *why, size_t cap) {
  char a[512], b[512], key[128];
  /* every field of rank 0's, then any that only the other rank has */
  const char *confs[2] = {rank0, other};
  for (int pass = 0; pass < 2; pass++) {
    for (const char *line = confs[pass]; *line;) {
      const char *end = strchr(line, '\n');
      size_t len = end ? (size_t)(end - line) : strlen(line);
      const char *eq = memchr(line, '=', len);
      if (eq && eq > line + 1) {
        size_t kl = (size_t)(eq - line) - 1;
        if (kl >= sizeof key)
          kl = sizeof key - 1;
        memcpy(key, line, kl);
        key[kl] = '\0';
        int ha = lookup(rank0, key, kl, a, sizeof a), hb = lookup(other, key, kl, b, sizeof b);
        if (!ha || !hb || strcmp(a, b) != 0) {
          if (!hb)
            snprintf(why, cap,
                     "configuration differs: %s is %s on rank 0 but not set on rank %d (another version?)",
                     key, a, rank);
          else if (!ha)
            snprintf(why, cap,
                     "configuration differs: %s is %s on rank %d but not set on rank 0 (another version?)",
                     key, b, rank);
          else
            snprintf(why, cap, "configuration differs: %s is %s on rank %d but %s on rank 0", key, b, rank,
                     a);
          return SAC_ECONFIG;
        }
      }
      line += len + (end ? 1 : 0);
    }
  }
  return 0;
}

/* Rank 0's check of a rank's hello (its canonical configuration). */
static int check_hello(void *user, int rank, const void *hello, size_t len, char *why, size_t cap) {
  sac_dp_t *dp = user;
  char *other = malloc(len + 1);
  if (!other) {
    snprintf(why, cap, "rank 0 is out of memory");
    return SAC_ENOMEM;
  }
  memcpy(other, hello, len);
  other[len] = '\0';
  int rc = sac_dp_compare(dp->config, other, rank, why, cap);
  free(other);
  return rc;
}

void sac_dp_rank_key(const uint32_t key0[2], int rank, uint32_t out[2]) {
  if (rank == 0) {
    out[0] = key0[0], out[1] = key0[1];
    return;
  }
  sac_rng_key((uint64_t)key0[1] << 32 | key0[0], (3ull << 40) | (uint64_t)rank, out);
}

/* The first failure: the peers are told (they fail at once), later calls fail. */
static int dp_fail(sac_dp_t *dp, int rc, const char *why) {
  if (!dp->failed) {
    dp->failed = 1;
    sac_coll_abort(dp->ctl, why);
    if (dp->grad != dp->ctl)
      sac_coll_abort(dp->grad, why);
  }
  return rc;
}

void sac_dp_abort(sac_dp_t *dp, const char *why) {
  if (dp)
    dp_fail(dp, 0, why);
}

/* nccl: rank 0's unique id to everyone over the control channel, then every rank joins;
 * a rank that cannot join is known to all by the check that follows. */
static int make_nccl(sac_dp_t *dp, const sac_dp_cfg_t *cfg) {
  struct {
    int32_t status;
    unsigned char id[SAC_COLL_NCCL_ID_BYTES];
  } msg;
  memset(&msg, 0, sizeof msg);
  if (dp->rank == 0)
    msg.status = sac_coll_nccl_unique_id(msg.id);
  int rc = sac_coll_broadcast(dp->ctl, &msg, sizeof msg, 0);
  if (rc)
    return rc;
  if (msg.status) {
    SAC_ERROR("dp", "data-parallel: rank 0 could not create the NCCL unique id: %s",
              sac_strerror(msg.status));
    return msg.status;
  }
  void *stream = dp->be->ops->native_stream ? dp->be->ops->native_stream(dp->be) : NULL;
  int mine = stream ? sac_coll_nccl_new(msg.id, dp->rank, dp->size, stream, cfg->timeout_ms, HINT, &dp->grad)
                    : SAC_ECONFIG;
  if (!stream)
    SAC_ERROR("dp", "data-parallel: the nccl collective needs the cuda backend (this rank runs %s)",
              dp->be->ops->name);
  float ok = mine == 0 ? 1.0f : 0.0f;
  if ((rc = sac_coll_allreduce_mean(dp->ctl, &ok, 1)) != 0)
    return rc;
  if (ok != 1.0f) {
    SAC_ERROR("dp", "data-parallel: not every rank could join the NCCL communicator%s", HINT);
    return mine ? mine : SAC_EBACKEND;
  }
  return 0;
}

int sac_dp_new(const sac_dp_cfg_t *cfg, const char *config, sac_backend_t *be, sac_dp_t **out, char *why,
               size_t cap) {
  *out = NULL;
  if (why && cap)
    why[0] = '\0';
  const char *coll = cfg->collective;
  if (strcmp(coll, "auto") == 0) {
    coll = be->ops->native_stream && sac_coll_nccl_available() ? "nccl" : "zmq";
  }
  if (strcmp(coll, "zmq") != 0 && strcmp(coll, "nccl") != 0) {
    if (why)
      snprintf(why, cap, "dp_collective \"%s\" is not one of auto, zmq, nccl", cfg->collective);
    SAC_ERROR("dp", "data-parallel: dp_collective \"%s\" is not one of auto, zmq, nccl", cfg->collective);
    return SAC_ECONFIG;
  }
  sac_dp_t *dp = calloc(1, sizeof *dp);
  if (!dp)
    return SAC_ENOMEM;
  dp->be = be;
  dp->rank = cfg->rank;
  dp->size = cfg->size;
  int rc = SAC_ETOOBIG;
  if ((size_t)snprintf(dp->config, sizeof dp->config, "%s", config) >= sizeof dp->config ||
      sac_dp_describe(dp->config, sizeof dp->config, "dp_protocol", "%d", DP_PROTOCOL) ||
      sac_dp_describe(dp->config, sizeof dp->config, "sacfleet_version", "%s", SAC_VERSION) ||
      sac_dp_describe(dp->config, sizeof dp->config, "dp_size", "%d", cfg->size) ||
      sac_dp_describe(dp->config, sizeof dp->config, "dp_collective", "%s", coll)) {
    SAC_ERROR("dp", "data-parallel: the canonical configuration is over %zu bytes", sizeof dp->config);
    goto err;
  }
  sac_coll_zmq_cfg_t zc = {.endpoint = cfg->coord,
                           .rank = cfg->rank,
                           .size = cfg->size,
                           .timeout_ms = cfg->timeout_ms,
                           .connect_timeout_ms = cfg->connect_timeout_ms,
                           .hint = HINT,
                           .hello = dp->config,
                           .hello_len = strlen(dp->config),
                           .check = check_hello,
                           .user = dp,
                           .ctx = cfg->ctx};
  if ((rc = sac_coll_zmq_new(&zc, &dp->ctl, why, cap)) != 0)
    goto err;
  if (strcmp(coll, "nccl") == 0) {
    if ((rc = make_nccl(dp, cfg)) != 0) {
      dp_fail(dp, rc, "the NCCL communicator could not be made");
      goto err;
    }
  } else {
    dp->grad = dp->ctl;
  }
  SAC_INFO("dp",
           "data-parallel: rank %d of %d ready; gradients over %s, control over zmq on %s, timeout %d ms",
           dp->rank, dp->size, coll, cfg->coord, cfg->timeout_ms);
  *out = dp;
  return 0;
err:
  sac_dp_destroy(&dp);
  return rc;
}

void sac_dp_destroy(sac_dp_t **dpp) {
  sac_dp_t *dp = *dpp;
  if (!dp)
    return;
  if (dp->grad != dp->ctl)
    sac_coll_destroy(&dp->grad);
  sac_coll_destroy(&dp->ctl);
  free(dp->stage[0]);
  free(dp->stage[1]);
  free(dp->stage[2]);
  if (dp->ovf_slot)
    dp->be->ops->free(dp->be, dp->ovf_slot);
  free(dp);
  *dpp = NULL;
}

int sac_dp_rank(const sac_dp_t *dp) { return dp->rank; }
int sac_dp_size(const sac_dp_t *dp) { return dp->size; }
const char *sac_dp_collective(const sac_dp_t *dp) { return dp->grad->ops->name; }
void sac_dp_stats(const sac_dp_t *dp, sac_dp_stats_t *out) { *out = dp->st; }

static const int k_bufs[] = {SAC_BUF_PARAMS, SAC_BUF_TARGET, SAC_BUF_ADAM_M, SAC_BUF_ADAM_V, SAC_BUF_STEPS};
#define N_BUFS (sizeof k_bufs / sizeof k_bufs[0])

int sac_dp_sync_state(sac_dp_t *dp, sac_t *sac, void *extra, size_t extra_bytes) {
  if (dp->failed)
    return SAC_ESTATE;
  size_t floats = 0;
  for (size_t i = 0; i < N_BUFS; i++)
    floats += sac_buffer_len(sac, k_bufs[i]);
  /* [buffers (floats)][u64 step][u32 key[2]][scaler: i32 has, f32 scale, i32 good, 0][extra] */
  size_t bytes = floats * sizeof(float) + 32 + extra_bytes;
  unsigned char *blob = malloc(bytes);
  if (!blob)
    return dp_fail(dp, SAC_ENOMEM, "out of memory");
  int rc = 0;
  float *f = (float *)blob;
  uint64_t step = sac_step(sac);
  uint32_t key[2];
  sac_get_noise_key(sac, key);
  if (dp->rank == 0) {
    for (size_t i = 0, off = 0; rc == 0 && i < N_BUFS; off += sac_buffer_len(sac, k_bufs[i]), i++)
      rc = sac_get_buffer(sac, k_bufs[i], f + off, sac_buffer_len(sac, k_bufs[i]));
    memcpy(blob + floats * sizeof(float), &step, 8);
    memcpy(blob + floats * sizeof(float) + 8, key, 8);
    int32_t sc[4] = {0, 0, 0, 0};
    sac_scaler_state_t st;
    if (sac_get_scaler(sac, &st) == 0) {
      sc[0] = 1, sc[2] = st.good;
      memcpy(&sc[1], &st.scale, 4);
    }
    memcpy(blob + floats * sizeof(float) + 16, sc, 16);
    if (extra_bytes)
      memcpy(blob + floats * sizeof(float) + 32, extra, extra_bytes);
  }
  /* a rank 0 that cannot read its state still takes part, then everyone fails */
  float ok = rc == 0 ? 1.0f : 0.0f;
  int crc = sac_coll_allreduce_mean(dp->ctl, &ok, 1);
  if (crc == 0 && ok == 1.0f)
    crc = sac_coll_broadcast(dp->ctl, blob, bytes, 0);
  if (crc == 0 && ok != 1.0f)
    crc = rc ? rc : SAC_EBACKEND;
  if (crc == 0 && dp->rank != 0) {
    for (size_t i = 0, off = 0; crc == 0 && i < N_BUFS; off += sac_buffer_len(sac, k_bufs[i]), i++)
      crc = sac_set_buffer(sac, k_bufs[i], f + off, sac_buffer_len(sac, k_bufs[i]));
    memcpy(&step, blob + floats * sizeof(float), 8);
    memcpy(key, blob + floats * sizeof(float) + 8, 8);
    int32_t sc[4];
    memcpy(sc, blob + floats * sizeof(float) + 16, 16);
    if (sc[0]) { /* rank 0's loss scale: the ranks' scales then move together */
      sac_scaler_state_t st = {0, sc[2]};
      memcpy(&st.scale, &sc[1], 4);
      int src = sac_set_scaler(sac, &st);
      if (src && src != SAC_ENOTFOUND)
        crc = src;
    }
    if (extra_bytes)
      memcpy(extra, blob + floats * sizeof(float) + 32, extra_bytes);
    sac_set_step(sac, step);
  }
  free(blob);
  if (crc)
    return dp_fail(dp, crc, "rank 0's state could not be handed out");
  uint32_t mine[2];
  sac_dp_rank_key(key, dp->rank, mine);
  sac_set_noise_key(sac, mine);
  SAC_INFO("dp", "data-parallel: rank %d starts from rank 0's state at update %llu (%zu floats)", dp->rank,
           (unsigned long long)step, floats);
  return 0;
}

/* The gradient hook (sac.h): the mean over ranks, in place. With a backend that skips
 * steps on overflow, the overflow flag travels as one more segment: its mean is nonzero
 * when any rank overflowed, and every rank then skips this phase's step (and halves its
 * scale) together. */
/* The segments into host memory for the zmq collective: one copy per segment into the
 * backend's fetch slots (in order on its stream), then a wait on each copy's event: the
 * first waits for the gradient, the others are done by then. Without fetch, downloads
 * (a stream sync each). 0 or a backend error. */
static int stage_segments(sac_dp_t *dp, float *const *segs, const size_t *ns, int k) {
  const sac_backend_ops_t *ops = dp->be->ops;
  int rc = 0;
  if (!ops->fetch || !ops->fetch_wait) {
    for (int i = 0; i < k && rc == 0; i++)
      rc = ops->download(dp->be, dp->stage[i], segs[i], ns[i]);
    return rc;
  }
  for (int i = 0; i < k && rc == 0; i++)
    rc = ops->fetch(dp->be, SAC_BACKEND_SLOT_DP + i, segs[i], ns[i]);
  for (int i = 0; i < k && rc == 0; i++)
    rc = ops->fetch_wait(dp->be, SAC_BACKEND_SLOT_DP + i, dp->stage[i], ns[i]);
  return rc;
}

static int grad_hook(void *user, int phase, float *const *segs_in, const size_t *ns_in, int k) {
  (void)phase;
  sac_dp_t *dp = user;
  if (dp->failed)
    return SAC_ESTATE;
  const sac_backend_ops_t *ops = dp->be->ops;
  float *segs[3];
  size_t ns[3];
  assert(k >= 1 && k <= 2);
  for (int i = 0; i < k; i++)
    segs[i] = segs_in[i], ns[i] = ns_in[i];
  if (dp->ovf_slot) {
    ops->overflow_export(dp->be, dp->ovf_slot);
    segs[k] = dp->ovf_slot, ns[k] = 1, k++;
  }
  int rc = 0;
  double t0;
  if (dp->grad->device_memory || !dp->stage[0]) {
    /* the collective reads backend memory itself, in order on the backend's stream (nccl
     * enqueues there and waits on an event with a deadline): no stream sync first, so
     * the time below includes the gradient compute still in flight */
    t0 = sac_clock_s();
    rc = sac_coll_allreduce_mean_v(dp->grad, segs, ns, k);
  } else { /* zmq with a device backend: through the host */
    rc = stage_segments(dp, segs, ns, k);
    if (rc)
      return dp_fail(dp, rc, "the backend failed");
    t0 = sac_clock_s();
    rc = sac_coll_allreduce_mean_v(dp->grad, dp->stage, ns, k);
    for (int i = 0; i < k && rc == 0; i++)
      rc = ops->upload(dp->be, segs[i], dp->stage[i], ns[i]);
  }
  dp->st.allreduce_s += sac_clock_s() - t0;
  dp->st.allreduces++;
  if (rc == 0 && dp->ovf_slot)
    ops->overflow_import(dp->be, dp->ovf_slot);
  return rc ? dp_fail(dp, rc, "a gradient all-reduce failed") : 0;
}

int sac_dp_attach(sac_dp_t *dp, sac_t *sac) {
  const sac_backend_ops_t *ops = dp->be->ops;
  if (ops->overflow_export && ops->overflow_import && !dp->ovf_slot) {
    int rc = ops->alloc(dp->be, 1, &dp->ovf_slot);
    if (rc)
      return rc;
  }
  if (!dp->grad->device_memory && ops->native_stream) {
    /* the largest segments of each phase: all parameters is enough for both */
    size_t n = sac_grad_capacity(sac); /* the hook's segments are padded (sac.h) */
    for (int i = 0; i < 3; i++) {
      size_t ni = i < 2 ? n : 1;
      if (!(dp->stage[i] = malloc(ni * sizeof(float))))
        return SAC_ENOMEM;
      dp->stage_n[i] = ni;
    }
  }
  sac_set_grad_hook(sac, grad_hook, dp);
  return 0;
}

int sac_dp_round(sac_dp_t *dp, int have_batch, int want_stop, int *decision) {
  if (dp->failed)
    return SAC_ESTATE;
  float v[2] = {have_batch ? 1.0f : 0.0f, want_stop ? 1.0f : 0.0f};
  double t0 = sac_clock_s();
  int rc = sac_coll_allreduce_mean(dp->ctl, v, 2);
  dp->st.round_s += sac_clock_s() - t0;
  dp->st.rounds++;
  if (rc)
    return dp_fail(dp, rc, "an agreement round failed");
  /* means of 0/1 values: exactly 1 only when every rank said 1 */
  *decision = v[1] > 0.0f ? SAC_DP_STOP : v[0] == 1.0f ? SAC_DP_UPDATE : SAC_DP_SKIP;
  return 0;
}

/* FNV-1a, 64 bits, over bytes. */
static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++)
    h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

int sac_dp_check_identical(sac_dp_t *dp, sac_t *sac, int *same) {
  *same = 0;
  if (dp->failed)
    return SAC_ESTATE;
  size_t n = sac_param_count(sac);
  float *buf = malloc(n * sizeof(float));
  float *all = calloc((size_t)dp->size * 4, sizeof(float));
  int rc = buf && all ? 0 : SAC_ENOMEM;
  uint64_t h = 0xcbf29ce484222325ull;
  uint64_t step = sac_step(sac);
  h = fnv(h, &step, sizeof step);
  for (size_t i = 0; rc == 0 && i < N_BUFS; i++) {
    size_t len = sac_buffer_len(sac, k_bufs[i]);
    if ((rc = sac_get_buffer(sac, k_bufs[i], buf, len)) == 0)
      h = fnv(h, buf, len * sizeof(float));
  }
  if (rc) {
    free(buf), free(all);
    return dp_fail(dp, rc, "cannot read the learner state");
  }
  /* an all-gather of 16-bit pieces through the mean: slot r holds rank r's hash */
  for (int j = 0; j < 4; j++)
    all[dp->rank * 4 + j] = (float)((h >> (16 * j)) & 0xffff);
  rc = sac_coll_allreduce_mean(dp->ctl, all, (size_t)dp->size * 4);
  if (rc == 0) {
    uint64_t first = 0;
    *same = 1;
    for (int r = 0; r < dp->size; r++) {
      uint64_t hr = 0;
      for (int j = 0; j < 4; j++)
        hr |= (uint64_t)(int64_t)(all[r * 4 + j] * (float)dp->size + 0.5f) << (16 * j);
      if (r == 0)
        first = hr;
      else if (hr != first)
        *same = 0;
    }
  }
  free(buf), free(all);
  return rc ? dp_fail(dp, rc, "the identity check failed") : 0;
}
