/* libFuzzer target for the learner's sample-reply path (replay/client.c:
 * sac_replay_client_sample = receive, decode, and check a SampleBatch against the request
 * in flight: rows, sizes, request id, shard id; issue 14). A fake shard (a ROUTER socket
 * on inproc://) answers the client's real sample request with each input, exactly as a
 * shard's reply reaches a learner. Properties beyond "no crash, no leak, no UB":
 *   - a batch returned is exactly what was asked: BATCH rows, obs OBS, act ACT, every
 *     value finite and every index of the answering shard (all of it is read, so ASan
 *     sees any view shorter than n rows);
 *   - SAC_ECONFIG only for a reply of other sizes or a "max_sample_batch" refusal;
 *   - every reply is accounted for: returned, refused (counted by kind) or a counted
 *     shard error; nothing else.
 * Input: byte 0 selects the form. Even: the rest is sent as raw reply bytes. Odd: the
 * rest describes a SampleBatch that the harness encodes with the real request id or
 * another one (so the checks after decoding are reached): byte 1 flags (bit 0 another
 * request id, bit 1 a row count from byte 2 instead of BATCH, bit 2 obs size from byte 3,
 * bit 3 act size from byte 4, bit 4 an error reply, bit 5 its text names
 * max_sample_batch, bit 6 shard id from byte 5, bit 7 indices of another shard), byte 7
 * the reply's batches field (% 4; without it PER_REQUEST, and the rows default to BATCH
 * times that), then float payload bytes, cycled. The client asks for PER_REQUEST batches a
 * request and keeps PREFETCH requests in flight; an input answers the oldest (or, with
 * another id, none), and every batch of it is taken before the next input, through
 * sac_replay_client_sample_into (the direct path, the message held) when byte 0's bit 1 is
 * set, else sac_replay_client_sample (decoded, the rows copied out). Seeds
 * (SAC_FUZZ_SEED_DIR): a good reply, one batch (a shard without batches), 1 row, other
 * sizes, an error reply, a wrong request id. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/log.h"
#include "common/net.h"
#include "common/wire.h"
#include "replay/client.h"

#define OBS 3
#define ACT 1
#define BATCH 4
#define MAXR 64  /* rows a structured reply may have */
#define MAXD 255 /* obs / act size a structured reply may have */

static sac_net_ctx_t *g_ctx;
static void *g_router;
static sac_replay_client_t *g_client;
static unsigned char g_id[256], g_buf[1 << 16], g_out[1 << 20];
static size_t g_id_len;
/* routing ids of clients replaced after a fatal reply: requests they left queued at the
 * ROUTER are not answered (a reply to a closed peer is dropped) */
static unsigned char g_old[8][256];
static size_t g_old_len[8];
static int g_nold;
static unsigned g_fatal; /* SAC_ECONFIG returns so far */
/* the client's requests in flight, oldest first: it keeps PREFETCH of them, so an input
 * rarely waits out the 10 ms pause the client takes after a refused reply */
#define PREFETCH 8
#define PER_REQUEST 2
static uint64_t g_rids[64];
static int g_nrids;

static void client_new(void) {
  if (g_client && g_id_len) {
    memcpy(g_old[g_nold % 8], g_id, g_id_len);
    g_old_len[g_nold % 8] = g_id_len;
    g_nold++;
  }
  g_id_len = 0;
  sac_replay_client_destroy(&g_client);
  sac_replay_client_config_t cc;
  sac_replay_client_config_default(&cc);
  const char *eps[1] = {"inproc://fuzz-sample-reply"};
  cc.n_shards = 1;
  cc.sample_endpoints = eps;
  cc.ctx = g_ctx;
  cc.batch_size = BATCH;
  cc.prefetch = PREFETCH;
  cc.batches_per_request = PER_REQUEST;
  cc.obs_dim = OBS;
  cc.act_dim = ACT;
  cc.sample_timeout_ms = 100000; /* no reissue of a request during a run */
  g_client = sac_replay_client_new(&cc);
  if (!g_client)
    abort();
  g_nrids = 0;
}

/* Reads the client's requests that have arrived (waiting up to wait_ms for one). */
static void take_requests(long wait_ms) {
  sac_net_pollitem_t it = {g_router, SAC_NET_POLLIN, 0};
  if (sac_net_poll(&it, 1, wait_ms) <= 0)
    return;
  for (;;) {
    unsigned char id[256];
    size_t id_len = 0, len = 0;
    int more = 0;
    if (sac_net_recv(g_router, id, sizeof id, SAC_NET_DONTWAIT, &id_len, &more) != 0 || !more)
      return;
    if (sac_net_recv(g_router, g_buf, sizeof g_buf, 0, &len, &more) != 0)
      return;
    static sac_wire_decoder_t *dec;
    if (!dec && !(dec = sac_wire_decoder_new(1 << 16)))
      abort();
    sac_wire_msg_t m;
    sac_wire_reason_t why;
    int stale = 0;
    for (int j = 0; j < 8 && j < g_nold; j++)
      stale |= g_old_len[j] == id_len && !memcmp(g_old[j], id, id_len);
    if (!stale && sac_wire_decode(dec, g_buf, len, NULL, &m, &why) == 0 &&
        m.type == SAC_WIRE_SAMPLE_REQUEST) {
      if (m.u.sample_request.batch_size != BATCH || m.u.sample_request.batches != PER_REQUEST)
        abort();
      memcpy(g_id, id, id_len);
      g_id_len = id_len;
      if (g_nrids == 64)
        abort(); /* more than the client ever has in flight */
      g_rids[g_nrids++] = m.u.sample_request.request_id;
    }
  }
}

static void write_seed(const char *dir, const char *name, const uint8_t *b, size_t n) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (f) {
    fwrite(b, 1, n, f);
    fclose(f);
  }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  sac_log_set_level(SAC_LOG_ERROR); /* refusals log warnings by design: keep the run quiet */
  const char *dir = getenv("SAC_FUZZ_SEED_DIR");
  if (dir) {
    uint8_t s[64];
    for (size_t i = 0; i < sizeof s; i++)
      s[i] = (uint8_t)(0x3e + i % 3); /* small positive floats */
    s[0] = 1;
    s[1] = 0, s[8] = PER_REQUEST;
    write_seed(dir, "good", s, sizeof s);
    s[0] = 3;
    write_seed(dir, "good_direct", s, sizeof s);
    s[0] = 1;
    s[8] = 0;
    write_seed(dir, "one_batch", s, sizeof s);
    s[1] = 2, s[2] = 1;
    write_seed(dir, "one_row", s, sizeof s);
    s[1] = 4, s[3] = 5;
    write_seed(dir, "other_obs", s, sizeof s);
    s[1] = 16;
    write_seed(dir, "error_reply", s, sizeof s);
    s[1] = 1;
    write_seed(dir, "other_request", s, sizeof s);
    s[1] = 48;
    write_seed(dir, "max_sample_batch", s, sizeof s);
  }
  return 0;
}

static void setup(void) {
  g_ctx = sac_net_ctx_new(1);
  sac_net_opts_t o;
  sac_net_opts_default(&o);
  g_router = g_ctx ? sac_net_socket(g_ctx, SAC_NET_ROUTER, &o) : NULL;
  if (!g_router || sac_net_bind(g_router, "inproc://fuzz-sample-reply", NULL, 0) != 0)
    abort();
  client_new();
}

/* Encodes the structured form of an input into g_out; its length, or 0. Sets *dims_bad
 * and *limit_err for what the client must find fatal. */
static size_t structured(const uint8_t *d, size_t n, int *dims_bad, int *limit_err) {
  static float obs[MAXR * MAXD], nobs[MAXR * MAXD], act[MAXR * MAXD], rew[MAXR], term[MAXR], w[MAXR];
  static uint64_t idx[MAXR];
  uint8_t fl = n > 0 ? d[0] : 0;
  uint32_t batches = n > 7 ? d[7] % 4u : PER_REQUEST;
  uint32_t rows = (fl & 2) && n > 1 ? d[1] % (MAXR + 1) : BATCH * (batches > 1 ? batches : 1);
  uint32_t od = (fl & 4) && n > 2 ? d[2] : OBS, ad = (fl & 8) && n > 3 ? d[3] : ACT;
  uint32_t shard = (fl & 64) && n > 4 ? d[4] * 17u : 5u;
  const uint8_t *p = n > 5 ? d + 5 : d;
  size_t pn = n > 5 ? n - 5 : n;
  size_t k = 0;
  float *arrays[3] = {obs, nobs, act};
  for (int a = 0; a < 3; a++)
    for (size_t i = 0; i < (size_t)MAXR * MAXD; i++, k += 4) {
      uint8_t b[4] = {0, 0, 0, 0x3f};
      for (int j = 0; j < 4 && pn; j++)
        b[j] = p[(k + (size_t)j) % pn];
      memcpy(&arrays[a][i], b, 4);
    }
  for (uint32_t i = 0; i < MAXR; i++) {
    rew[i] = obs[i], term[i] = (float)(i & 1), w[i] = 1.0f;
    idx[i] = SAC_WIRE_INDEX((fl & 128) ? shard + 1 : shard, 1, i);
  }
  int err = (fl & 16) != 0;
  *dims_bad = (od && od != OBS) || (ad && ad != ACT);
  *limit_err = err && (fl & 32);
  sac_wire_msg_t m = {.type = SAC_WIRE_SAMPLE_BATCH};
  m.u.sample_batch = (sac_wire_sample_batch_t){
      .request_id = (fl & 1) ? g_rids[g_nrids - 1] + 1 + (n > 6 ? d[6] : 0) : g_rids[0],
      .n = err ? 0 : rows,
      .obs_dim = od,
      .act_dim = ad,
      .shard_id = shard,
      .obs = obs,
      .action = act,
      .reward = rew,
      .terminated = term,
      .next_obs = nobs,
      .indices = idx,
      .weights = w,
      .error = !err        ? ""
               : (fl & 32) ? "batch_size over this shard's max_sample_batch"
                           : "replay is empty",
      .batches = batches};
  if (od > MAXD || ad > MAXD)
    return 0;
  size_t len = 0;
  if (sac_wire_encode(&m, g_out, sizeof g_out, &len) != 0)
    return 0;
  return len;
}

static uint64_t accounted(const sac_replay_client_stats_t *s) {
  return s->sample_replies + s->sample_errors + s->rejected_replies;
}

/* A batch returned must be exactly what was asked. */
static void check_batch(const sac_replay_batch_t *b, int dims_bad) {
  if (b->n != BATCH || b->obs_dim != OBS || b->act_dim != ACT || dims_bad)
    abort();
  for (size_t i = 0; i < (size_t)BATCH * OBS; i++)
    if (!isfinite(b->obs[i]) || !isfinite(b->next_obs[i]))
      abort();
  for (size_t i = 0; i < (size_t)BATCH * ACT; i++)
    if (!isfinite(b->action[i]))
      abort();
  for (size_t i = 0; i < BATCH; i++)
    if (!isfinite(b->reward[i]) || !(b->terminated[i] == 0.0f || b->terminated[i] == 1.0f) ||
        !(b->weights[i] >= 0.0f) || SAC_WIRE_INDEX_SHARD(b->indices[i]) != b->shard_id)
      abort();
}

/* the stage of the direct path */
static float g_st[6][BATCH * OBS];
static const sac_replay_stage_t k_stage = {g_st[0], g_st[1], g_st[2], g_st[3], g_st[4], g_st[5]};

static int sample_one(int into, int timeout_ms, sac_replay_batch_t *b) {
  return into ? sac_replay_client_sample_into(g_client, timeout_ms, &k_stage, b)
              : sac_replay_client_sample(g_client, timeout_ms, b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!g_router)
    setup();
  if (size < 1)
    return 0;
  /* the client's request: sent by a sample call once a reply was handled (after a
   * refusal or an error reply, when its 10 ms pause is over) */
  sac_replay_batch_t b;
  int rc;
  take_requests(0);
  for (int i = 0; i < 500 && !g_nrids; i++) {
    if ((rc = sac_replay_client_sample(g_client, 2, &b)) != SAC_ETIMEOUT)
      abort(); /* nothing was sent to it */
    take_requests(0);
  }
  if (!g_nrids)
    abort();
  int dims_bad = 0, limit_err = 0;
  const int into = (data[0] & 2) != 0;
  const uint8_t *body = g_out;
  size_t len;
  if (data[0] & 1) {
    len = structured(data + 1, size - 1, &dims_bad, &limit_err);
    if (!len)
      return 0;
  } else {
    body = data + 1;
    len = size - 1;
  }
  sac_replay_client_stats_t s0, s1;
  sac_replay_client_stats(g_client, &s0);
  if (sac_net_send(g_router, g_id, g_id_len, SAC_NET_SNDMORE) != 0 ||
      sac_net_send(g_router, body, len, 0) != 0)
    abort();
  /* wait for the reply to be handled: returned, refused, counted, or fatal */
  for (int i = 0; i < 200; i++) {
    rc = sample_one(into, i < 3 ? 0 : 1, &b);
    sac_replay_client_stats(g_client, &s1);
    if (rc != SAC_ETIMEOUT || accounted(&s1) != accounted(&s0))
      break;
  }
  if (rc == SAC_ETIMEOUT && accounted(&s1) != accounted(&s0) + 1)
    abort(); /* lost, or counted twice */
  if (rc == SAC_ECONFIG) {
    if (!dims_bad && !limit_err)
      abort();
    /* a learner stops here; the client itself stays usable (checked by going on with it,
     * and every 64th time with a fresh one). A size mismatch is refused before the
     * request id is looked at, so that request stays in flight; a max_sample_batch
     * refusal answered it. */
    if (!dims_bad && g_nrids > 0) {
      memmove(g_rids, g_rids + 1, (size_t)(g_nrids - 1) * sizeof g_rids[0]);
      g_nrids--;
    }
    if (++g_fatal % 64 == 0)
      client_new();
    return 0;
  }
  if (rc == 0) {
    check_batch(&b, dims_bad);
    /* the rest of the reply's batches, held by the client: each exact, at most PER_REQUEST
     * in all, and no reply beyond this one (none was sent) */
    int taken = 1;
    while ((rc = sample_one(into, 0, &b)) == 0) {
      check_batch(&b, dims_bad);
      if (++taken > PER_REQUEST)
        abort();
    }
    if (rc != SAC_ETIMEOUT)
      abort();
    sac_replay_client_stats(g_client, &s1);
    if (s1.sample_replies != s0.sample_replies + 1)
      abort();
  } else if (rc != SAC_ETIMEOUT) {
    abort();
  }
  /* a reply that answered no request (refused as request_id) leaves ours in flight;
   * any other took the oldest (a spoilt one counts as its answer: the client asks again) */
  sac_replay_client_stats(g_client, &s1);
  if (s1.rejected_by[SAC_REPLAY_REJECT_REQUEST_ID] == s0.rejected_by[SAC_REPLAY_REJECT_REQUEST_ID]) {
    memmove(g_rids, g_rids + 1, (size_t)(g_nrids - 1) * sizeof g_rids[0]);
    g_nrids--;
  }
  return 0;
}
