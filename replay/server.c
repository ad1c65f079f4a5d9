/* The replay shard server loop (see server.h). One thread owns the shard and both
 * sockets; the only shared state is the stop/snapshot flags and the published stats. */
#include "replay/server.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "common/snapshot.h"

#define ID_MAX 256
/* A sample peer silent this long may give its place to a new one. Longer than the
 * ZMTP heartbeat timeout below (2 + 6 s): by then a peer that does not read has been
 * disconnected by ZeroMQ (its queued replies freed), and one that reads has drained. */
#define PEER_IDLE_NS 10000000000ull

typedef struct {
  unsigned char id[ID_MAX];
  size_t id_len;
  uint64_t seen_ns;
} peer_t;

typedef struct {
  unsigned char id[ID_MAX];
  size_t id_len;
  uint64_t request_id;
  uint32_t batch;
  float beta;
  uint64_t deadline_ns, enqueued_ns;
} pending_t;

typedef struct {
  unsigned char id[ID_MAX];
  size_t id_len;
  size_t off, len, span; /* span: bytes this entry takes in held_buf (with a wrap gap) */
  uint32_t actor;
  uint64_t session, seq;
  uint64_t since_ns;
} held_t;

struct sac_replay_server {
  sac_replay_server_config_t cfg;
  sac_net_ctx_t *ctx;
  void *ins, *smp;
  char ins_ep[256], smp_ep[256];
  sac_replay_shard_t *shard;
  sac_wire_decoder_t *ins_dec, *smp_dec;
  sac_wire_limits_t ins_lim, smp_lim;
  unsigned char *ins_buf, *smp_buf, *out_buf;
  size_t buf_cap, out_cap;
  /* Held inserts (rate limited), in arrival order: validated raw messages in a byte
   * ring (held_buf), one held_t each in a ring of max_held_batches. */
  held_t *held;
  uint32_t held_head, held_count;
  unsigned char *held_buf;
  size_t held_cap, held_rd, held_wr, held_used; /* bytes; held_used counts wrap gaps */
  double batch_rows_avg;                        /* moving average of stored batch sizes */
  /* queued sample requests */
  pending_t *pend;
  uint32_t pend_head, pend_count;
  uint64_t next_request_log_ns;
  /* sample peers being served (max_sample_peers): bounds the replies queued in total */
  peer_t *peers;
  uint32_t n_peers;
  /* control */
  atomic_int stop, snap_req, running;
  pthread_t thread;
  int thread_rc;
  /* stats: private while serving, published under the mutex */
  sac_replay_stats_t st;
  sac_replay_stats_t pub;
  pthread_mutex_t mu;
};

void sac_replay_server_config_default(sac_replay_server_config_t *c) {
  memset(c, 0, sizeof *c);
  sac_replay_shard_config_default(&c->shard);
  snprintf(c->insert_endpoint, sizeof c->insert_endpoint, "tcp://*:5560");
  snprintf(c->sample_endpoint, sizeof c->sample_endpoint, "tcp://*:5561");
  c->max_msg_bytes = 4u << 20;
  c->insert_credit = 16;
  c->max_pending_samples = 1024;
  c->max_sample_timeout_ms = 10000;
  c->max_env_id = 1u << 20;
  c->snapshot_interval_s = 60.0;
  c->max_held_batches = 4096;
  c->max_held_bytes = 64u << 20;
  c->max_abs_value = 1e6;
  c->max_reply_queue_bytes = 16u << 20;
  c->max_sample_peers = 16;
}

size_t sac_replay_server_largest_reply(const sac_replay_server_config_t *cfg) {
  static const uint64_t dummy[1];
  sac_wire_msg_t m = {.type = SAC_WIRE_SAMPLE_BATCH};
  /* sizes only: the encoder's size pass reads lengths, never the (dummy) data */
  m.u.sample_batch = (sac_wire_sample_batch_t){.request_id = UINT64_MAX,
                                               .n = cfg->shard.max_sample_batch,
                                               .obs_dim = cfg->shard.obs_dim,
                                               .act_dim = cfg->shard.act_dim,
                                               .shard_id = SAC_WIRE_MAX_SHARDS - 1,
                                               .obs = (const float *)dummy,
                                               .action = (const float *)dummy,
                                               .reward = (const float *)dummy,
                                               .terminated = (const float *)dummy,
                                               .next_obs = (const float *)dummy,
                                               .indices = dummy,
                                               .weights = (const float *)dummy,
                                               .error = ""};
  return sac_wire_encoded_size(&m);
}

int sac_replay_server_healthy(sac_replay_server_t *s, char *why, size_t cap) {
  sac_replay_stats_t st;
  sac_replay_server_stats(s, &st);
  if (st.snapshot_failing) {
    snprintf(why, cap, "snapshots to %s are failing (%llu failures so far; see the log)",
             s->cfg.snapshot_path, (unsigned long long)st.snapshot_failures_total);
    return 0;
  }
  snprintf(why, cap, "ok");
  return 1;
}

const char *sac_replay_server_insert_endpoint(const sac_replay_server_t *s) { return s->ins_ep; }
const char *sac_replay_server_sample_endpoint(const sac_replay_server_t *s) { return s->smp_ep; }

/* ------------------------------------------------------------------ snapshot at start */

static int restore(sac_replay_server_t *s) {
  const char *path = s->cfg.snapshot_path;
  if (!path[0])
    return 0;
  /* a path that can never hold a snapshot, or a folder that takes no files, fails the
   * start rather than every snapshot (and the stop) later */
  int rc = sac_snap_prepare(path, &s->st.stale_temporaries_removed);
  if (rc) {
    SAC_ERROR("replay", "refusing to start: snapshots cannot be written to %s (%s)", path, sac_strerror(rc));
    return SAC_ECONFIG;
  }
  rc = sac_replay_shard_load(s->shard, path);
  if (rc == 0) {
    sac_replay_shard_stats_t ss;
    sac_replay_shard_stats(s->shard, &ss);
    s->st.restored_transitions = ss.size;
    s->st.snapshot_inserted_total = ss.inserted_rows_total;
    return 0;
  }
  if (rc == SAC_ENOTFOUND) {
    SAC_INFO("replay", "no snapshot at %s: starting empty", path);
    return 0;
  }
  if (rc == SAC_EINVAL || rc == SAC_ESTATE) {
    /* not a regular file, or another shard's good snapshot: nothing to move aside (a
     * directory or another shard's data must not be renamed), whatever the flags say */
    SAC_ERROR("replay", "refusing to start: %s cannot be this shard's snapshot (%s)", path,
              rc == SAC_EINVAL ? "not a regular file"
                               : "it belongs to another shard; adopt_snapshot=1 takes it");
    return SAC_ECONFIG;
  }
  if (!s->cfg.start_empty_on_bad_snapshot) {
    SAC_ERROR("replay",
              "refusing to start: the snapshot %s cannot be used (%s). Fix or remove it, or start with "
              "start_empty_on_bad_snapshot=1 to move it aside and start empty",
              path, sac_strerror(rc));
    return SAC_ECONFIG;
  }
  char aside[1200];
  snprintf(aside, sizeof aside, "%s.bad-%lld", path, (long long)time(NULL));
  if (rename(path, aside) != 0)
    SAC_WARN("replay", "could not move the unusable snapshot %s aside", path);
  SAC_WARN("replay", "snapshot %s unusable (%s): moved to %s, starting empty as asked", path,
           sac_strerror(rc), aside);
  return 0;
}

/* ------------------------------------------------------------------ create / destroy */

/* 1 when a tcp:// endpoint ends in ":*" or ":<1..65535>" (ZeroMQ would bind a random
 * port for 99999); other transports are ZeroMQ's to check. */
static int endpoint_port_ok(const char *ep) {
  if (strncmp(ep, "tcp://", 6) != 0)
    return 1;
  const char *c = strrchr(ep + 6, ':');
  if (!c || !c[1])
    return 0;
  if (strcmp(c + 1, "*") == 0)
    return 1;
  char *end = NULL;
  long p = strtol(c + 1, &end, 10);
  return *end == '\0' && c[1] >= '0' && c[1] <= '9' && p >= 1 && p <= 65535;
}

/* Logs the first broken constraint (only that one) and returns SAC_ECONFIG, or 0. */
static int check_config(const sac_replay_server_config_t *cfg) {
  const char *bad = NULL;
  if (!endpoint_port_ok(cfg->insert_endpoint) || !endpoint_port_ok(cfg->sample_endpoint)) {
    SAC_ERROR("replay",
              "invalid server configuration: insert_endpoint \"%s\" / sample_endpoint \"%s\": a tcp:// "
              "endpoint needs a port 1..65535 or * (a free port)",
              cfg->insert_endpoint, cfg->sample_endpoint);
    return SAC_ECONFIG;
  }
  if (cfg->insert_credit == 0 || cfg->insert_credit > 64)
    bad = "insert_credit must be 1..64";
  else if (cfg->max_pending_samples == 0)
    bad = "max_pending_samples must be > 0";
  else if (cfg->max_msg_bytes < 4096 || cfg->max_msg_bytes > (1u << 30))
    bad = "max_msg_bytes must be 4 KiB..1 GiB";
  else if (cfg->max_held_batches == 0)
    bad = "max_held_batches must be > 0";
  else if (cfg->max_held_bytes < cfg->max_msg_bytes)
    bad = "max_held_bytes must be >= max_msg_bytes";
  else if (!(cfg->max_abs_value >= 0.0 && cfg->max_abs_value <= 3e38))
    bad = "max_abs_value must be 0 (finite only) or up to 3e38";
  else if (cfg->max_sample_peers == 0)
    bad = "max_sample_peers must be > 0";
  if (bad) {
    SAC_ERROR("replay", "invalid server configuration: %s", bad);
    return SAC_ECONFIG;
  }
  size_t largest = sac_replay_server_largest_reply(cfg);
  if (largest == 0 || largest > cfg->max_msg_bytes) {
    SAC_ERROR("replay",
              "invalid server configuration: a sample of max_sample_batch=%u rows (obs %u, act %u) takes %zu "
              "bytes, more than max_msg_bytes=%zu; raise max_msg_bytes or lower max_sample_batch",
              cfg->shard.max_sample_batch, cfg->shard.obs_dim, cfg->shard.act_dim, largest,
              cfg->max_msg_bytes);
    return SAC_ECONFIG;
  }
  return 0;
}

sac_replay_server_t *sac_replay_server_new(const sac_replay_server_config_t *cfg, sac_net_ctx_t *ctx,
                                           int *err) {
  int dummy;
  if (!err)
    err = &dummy;
  *err = SAC_ECONFIG;
  if (check_config(cfg) != 0)
    return NULL;
  sac_replay_server_t *s = calloc(1, sizeof *s);
  if (!s) {
    *err = SAC_ENOMEM;
    return NULL;
  }
  s->cfg = *cfg;
  pthread_mutex_init(&s->mu, NULL);
  int rc = 0;
  s->shard = sac_replay_shard_new(&cfg->shard, &rc);
  if (!s->shard) {
    *err = rc == SAC_ENOMEM ? SAC_ENOMEM : SAC_ECONFIG;
    goto fail;
  }
  s->buf_cap = cfg->max_msg_bytes + 1; /* one more byte tells an oversized message */
  s->out_cap = cfg->max_msg_bytes;
  s->ins_buf = malloc(s->buf_cap);
  s->smp_buf = malloc(s->buf_cap);
  s->out_buf = malloc(s->out_cap);
  s->pend = calloc(cfg->max_pending_samples, sizeof *s->pend);
  s->peers = calloc(cfg->max_sample_peers, sizeof *s->peers);
  /* virtual until used: the pages of held_buf are touched only while inserts are held
   * (MAP_NORESERVE: the whole documented range maps, also where malloc refused 64 GiB) */
  s->held_cap = cfg->max_held_bytes;
  s->held = calloc(cfg->max_held_batches, sizeof *s->held);
  s->held_buf =
      mmap(NULL, s->held_cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (s->held_buf == MAP_FAILED)
    s->held_buf = NULL;
  s->ins_dec = sac_wire_decoder_new(cfg->max_msg_bytes);
  s->smp_dec = sac_wire_decoder_new(cfg->max_msg_bytes);
  if (!s->ins_buf || !s->smp_buf || !s->out_buf || !s->pend || !s->ins_dec || !s->smp_dec || !s->held ||
      !s->held_buf || !s->peers) {
    SAC_ERROR("replay",
              "out of memory allocating the server's buffers (max_msg_bytes %zu, max_held_bytes %zu, "
              "max_held_batches %u, max_pending_samples %u)",
              cfg->max_msg_bytes, cfg->max_held_bytes, cfg->max_held_batches, cfg->max_pending_samples);
    *err = SAC_ENOMEM;
    goto fail;
  }
  s->ins_lim = (sac_wire_limits_t){
      .max_msg_bytes = cfg->max_msg_bytes,
      .obs_dim = cfg->shard.obs_dim,
      .act_dim = cfg->shard.act_dim,
      .max_rows = cfg->shard.max_batch_rows,
      .max_env_id = cfg->max_env_id,
      .accept_mask = SAC_WIRE_ACCEPT(SAC_WIRE_TRANSITIONS) | SAC_WIRE_ACCEPT(SAC_WIRE_HELLO) |
                     SAC_WIRE_ACCEPT(SAC_WIRE_HEARTBEAT) | SAC_WIRE_ACCEPT(SAC_WIRE_INFO_REQUEST),
      .max_abs_value = (float)cfg->max_abs_value};
  s->smp_lim = (sac_wire_limits_t){
      .max_msg_bytes = cfg->max_msg_bytes,
      .obs_dim = cfg->shard.obs_dim,
      .act_dim = cfg->shard.act_dim,
      .max_rows = 1u << 20,
      .max_env_id = cfg->max_env_id,
      .accept_mask = SAC_WIRE_ACCEPT(SAC_WIRE_SAMPLE_REQUEST) | SAC_WIRE_ACCEPT(SAC_WIRE_PRIORITY_UPDATE) |
                     SAC_WIRE_ACCEPT(SAC_WIRE_HELLO) | SAC_WIRE_ACCEPT(SAC_WIRE_HEARTBEAT) |
                     SAC_WIRE_ACCEPT(SAC_WIRE_INFO_REQUEST)};
  rc = restore(s);
  if (rc) {
    *err = rc;
    goto fail;
  }
  s->ctx = ctx ? sac_net_ctx_ref(ctx) : sac_net_ctx_new(1);
  if (!s->ctx) {
    *err = SAC_ENET;
    goto fail;
  }
  sac_net_opts_t o;
  sac_net_opts_default(&o);
  /* Messages between max_msg_bytes and twice that reach the server and are counted as
   * too_big; beyond that ZeroMQ drops the connection before anything is allocated. */
  o.max_msg_bytes = (int64_t)cfg->max_msg_bytes * 2;
  o.router_mandatory = 1;
  o.rcvhwm = 256;
  o.sndhwm = 4096;
  o.heartbeat_ivl_ms = 2000;
  o.heartbeat_timeout_ms = 6000;
  s->ins = sac_net_socket(s->ctx, SAC_NET_ROUTER, &o);
  /* ZMQ_SNDHWM counts messages: sized from the largest reply, it bounds the bytes queued
   * for a connection that does not read (sends beyond it fail at once and are counted) */
  size_t largest = sac_replay_server_largest_reply(cfg);
  size_t hwm = cfg->max_reply_queue_bytes / largest;
  o.sndhwm = hwm < 1 ? 1 : hwm > 4096 ? 4096 : (int)hwm;
  s->smp = sac_net_socket(s->ctx, SAC_NET_ROUTER, &o);
  *err = SAC_ENET;
  if (!s->ins || !s->smp)
    goto fail;
  if (sac_net_bind(s->ins, cfg->insert_endpoint, s->ins_ep, sizeof s->ins_ep) != 0 ||
      sac_net_bind(s->smp, cfg->sample_endpoint, s->smp_ep, sizeof s->smp_ep) != 0)
    goto fail;
  sac_replay_shard_stats(s->shard, &s->st.shard);
  s->pub = s->st;
  SAC_INFO("replay", "shard %u serving inserts on %s and samples on %s (capacity %llu, obs %u, act %u, %s%s)",
           cfg->shard.shard_id, s->ins_ep, s->smp_ep, (unsigned long long)cfg->shard.capacity,
           cfg->shard.obs_dim, cfg->shard.act_dim,
           cfg->shard.sampler == SAC_REPLAY_PRIORITIZED ? "prioritized" : "uniform",
           cfg->shard.obs_f16 ? ", fp16 obs" : "");
  *err = 0;
  return s;
fail:
  sac_replay_server_destroy(&s);
  return NULL;
}

void sac_replay_server_destroy(sac_replay_server_t **sp) {
  if (!sp || !*sp)
    return;
  sac_replay_server_t *s = *sp;
  if (atomic_load(&s->running)) {
    sac_replay_server_stop(s);
    sac_replay_server_join(s);
  }
  sac_net_close(&s->ins);
  sac_net_close(&s->smp);
  sac_net_ctx_destroy(&s->ctx);
  sac_replay_shard_destroy(&s->shard);
  sac_wire_decoder_destroy(&s->ins_dec);
  sac_wire_decoder_destroy(&s->smp_dec);
  free(s->ins_buf);
  free(s->smp_buf);
  free(s->out_buf);
  free(s->pend);
  free(s->peers);
  free(s->held);
  if (s->held_buf)
    munmap(s->held_buf, s->held_cap);
  pthread_mutex_destroy(&s->mu);
  free(s);
  *sp = NULL;
}

/* ------------------------------------------------------------------ replies */

/* Starts a reply: the routing frame. Fails (counted) when the peer is gone or its
 * queue is full (it does not read): nothing more is sent to it then. */
static int reply_begin(sac_replay_server_t *s, void *sock, const unsigned char *id, size_t id_len) {
  if (sac_net_send(sock, id, id_len, SAC_NET_SNDMORE | SAC_NET_DONTWAIT) != 0) {
    s->st.replies_dropped_total++;
    return -1;
  }
  return 0;
}

/* Ends a reply begun with reply_begin: the message. One that does not fit
 * max_msg_bytes (or cannot be encoded) is answered with an error of its type instead,
 * counted and logged (rate-limited): the peer always gets an answer. */
static void reply_end(sac_replay_server_t *s, void *sock, const sac_wire_msg_t *m) {
  size_t len = 0;
  int rc = sac_wire_encode(m, s->out_buf, s->out_cap, &len);
  if (rc) {
    s->st.replies_unencodable_total++;
    SAC_ERROR_EVERY(10.0, "replay", "cannot encode a reply of type %d (%s): answering with an error",
                    (int)m->type, sac_strerror(rc));
    sac_wire_msg_t e = *m;
    const char *why = "reply larger than max_msg_bytes: ask for fewer rows";
    if (e.type == SAC_WIRE_SAMPLE_BATCH)
      e.u.sample_batch = (sac_wire_sample_batch_t){.request_id = m->u.sample_batch.request_id,
                                                   .obs_dim = m->u.sample_batch.obs_dim,
                                                   .act_dim = m->u.sample_batch.act_dim,
                                                   .shard_id = m->u.sample_batch.shard_id,
                                                   .error = why};
    else if (e.type == SAC_WIRE_ACK)
      e.u.ack.error = why;
    if (sac_wire_encode(&e, s->out_buf, s->out_cap, &len) != 0)
      len = 0; /* cannot happen for these small messages; an empty frame ends the reply */
  }
  if (sac_net_send(sock, s->out_buf, len, SAC_NET_DONTWAIT) != 0)
    s->st.replies_dropped_total++;
}

static void reply(sac_replay_server_t *s, void *sock, const unsigned char *id, size_t id_len,
                  const sac_wire_msg_t *m) {
  if (reply_begin(s, sock, id, id_len) == 0)
    reply_end(s, sock, m);
}

/* actor: whose batch this answers (the credit is granted to it); UINT32_MAX when the
 * message did not decode (credit 1, not recorded). */
static void send_ack(sac_replay_server_t *s, const unsigned char *id, size_t id_len, uint32_t actor,
                     uint64_t seq, const sac_replay_insert_result_t *r, const char *error) {
  sac_wire_msg_t m = {.type = SAC_WIRE_ACK};
  m.u.ack = (sac_wire_ack_t){.acked_seq = r ? r->acked_seq : 0,
                             .seq = seq,
                             .credit = actor != UINT32_MAX
                                           ? sac_replay_shard_credit(s->shard, actor, s->batch_rows_avg,
                                                                     s->cfg.insert_credit, s->held_count > 0)
                                           : 1u,
                             .stored = r ? r->stored : 0,
                             .shard_id = s->cfg.shard.shard_id,
                             .duplicate = r && r->kind == SAC_REPLAY_SEQ_DUPLICATE,
                             .error = error ? error : ""};
  reply(s, s->ins, id, id_len, &m);
}

static void send_info(sac_replay_server_t *s, void *sock, const unsigned char *id, size_t id_len) {
  sac_replay_shard_stats_t ss;
  sac_replay_shard_stats(s->shard, &ss);
  uint64_t rejected = 0;
  for (int i = 1; i < SAC_WIRE_R_COUNT; i++)
    rejected += s->st.rejected_total[i];
  sac_wire_msg_t m = {.type = SAC_WIRE_SHARD_INFO};
  m.u.shard_info = (sac_wire_shard_info_t){.shard_id = s->cfg.shard.shard_id,
                                           .size = ss.size,
                                           .capacity = ss.capacity,
                                           .inserted_total = ss.inserted_rows_total,
                                           .sampled_total = ss.sampled_rows_total,
                                           .obs_dim = s->cfg.shard.obs_dim,
                                           .act_dim = s->cfg.shard.act_dim,
                                           .can_sample = ss.can_sample,
                                           .snapshot_inserted_total = s->st.snapshot_inserted_total,
                                           .snapshots_total = s->st.snapshots_total,
                                           .bytes_per_transition = ss.bytes_per_transition,
                                           .rejected_total = rejected,
                                           .duplicates_total = ss.duplicate_batches_total};
  s->st.info_requests_total++;
  reply(s, sock, id, id_len, &m);
}

static void count_reject(sac_replay_server_t *s, sac_wire_reason_t why, const char *where,
                         const unsigned char *id, size_t id_len) {
  if ((unsigned)why >= SAC_WIRE_R_COUNT || why == SAC_WIRE_R_NONE)
    why = SAC_WIRE_R_MALFORMED;
  uint64_t n = ++s->st.rejected_total[why];
  if (n <= 10 || n % 1000 == 0) {
    char peer[2 * 8 + 1] = {0};
    for (size_t i = 0; i < id_len && i < 8; i++)
      snprintf(peer + 2 * i, 3, "%02x", id[i]);
    SAC_WARN("replay", "rejected a message on the %s endpoint from peer %s: %s (%s, %llu so far)", where,
             peer, sac_wire_reason_str(why), sac_wire_reason_name(why), (unsigned long long)n);
  }
}

/* ------------------------------------------------------------------ receiving */

/* Receives [identity][payload] from a ROUTER. Returns 1 with a message, 0 when there is
 * none, -1 when a malformed multipart was consumed (counted; the caller answers it:
 * the routing id is known). */
static int recv_routed(sac_replay_server_t *s, void *sock, unsigned char *id, size_t *id_len,
                       unsigned char *buf, size_t *len, const char *where) {
  int more = 0;
  int rc = sac_net_recv(sock, id, ID_MAX, SAC_NET_DONTWAIT, id_len, &more);
  if (rc != 0)
    return 0;
  s->st.messages_total++;
  if (*id_len > ID_MAX)
    *id_len = ID_MAX;
  if (!more) {
    count_reject(s, SAC_WIRE_R_FRAMES, where, id, *id_len);
    return -1;
  }
  rc = sac_net_recv(sock, buf, s->buf_cap, 0, len, &more);
  if (rc != 0) {
    count_reject(s, SAC_WIRE_R_FRAMES, where, id, *id_len);
    return -1;
  }
  if (more) {
    sac_net_drain_frames(sock);
    count_reject(s, SAC_WIRE_R_FRAMES, where, id, *id_len);
    return -1;
  }
  return 1;
}

static void store_and_ack(sac_replay_server_t *s, const unsigned char *id, size_t id_len,
                          const sac_wire_transitions_t *t) {
  sac_replay_insert_result_t r;
  int rc = sac_replay_shard_insert(s->shard, t, &r);
  if (rc) {
    count_reject(s, r.reason, "insert", id, id_len);
    send_ack(s, id, id_len, t->actor_id, t->seq, &r, sac_wire_reason_str(r.reason));
    return;
  }
  s->batch_rows_avg = s->batch_rows_avg > 0.0 ? 0.9 * s->batch_rows_avg + 0.1 * t->n : (double)t->n;
  send_ack(s, id, id_len, t->actor_id, t->seq, &r, NULL);
}

/* ------------------------------------------------------------------ held inserts */

/* Room for len bytes at the write end of the byte ring: its offset, or SIZE_MAX. The
 * ring is used FIFO, so an entry that does not fit before the end starts at 0 and the
 * tail gap is counted in its span. */
static size_t held_alloc(sac_replay_server_t *s, size_t len, size_t *span) {
  if (s->held_count == 0)
    s->held_rd = s->held_wr = s->held_used = 0;
  if (s->held_count >= s->cfg.max_held_batches || len > s->held_cap)
    return SIZE_MAX;
  if (s->held_wr >= s->held_rd && s->held_used < s->held_cap) { /* free: [wr, cap) and [0, rd) */
    if (s->held_cap - s->held_wr >= len) {
      *span = len;
      return s->held_wr;
    }
    if (s->held_rd >= len) {
      *span = (s->held_cap - s->held_wr) + len;
      return 0;
    }
    return SIZE_MAX;
  }
  if (s->held_used < s->held_cap && s->held_rd - s->held_wr >= len) { /* free: [wr, rd) */
    *span = len;
    return s->held_wr;
  }
  return SIZE_MAX;
}

/* The held entry of (actor, session, seq), or NULL. The queue is bounded (max_held_batches),
 * and this runs only while something is held. */
static held_t *held_find(sac_replay_server_t *s, const sac_wire_transitions_t *t) {
  for (uint32_t i = 0; i < s->held_count; i++) {
    held_t *h = &s->held[(s->held_head + i) % s->cfg.max_held_batches];
    if (h->actor == t->actor_id && h->session == t->session && h->seq == t->seq)
      return h;
  }
  return NULL;
}

/* Holds a validated insert (raw bytes) at the back of the queue. 0, or SAC_EAGAIN when
 * the queue is full. */
static int held_push(sac_replay_server_t *s, const unsigned char *id, size_t id_len, const unsigned char *msg,
                     size_t len, const sac_wire_transitions_t *t) {
  size_t span = 0, off = held_alloc(s, len, &span);
  if (off == SIZE_MAX)
    return SAC_EAGAIN;
  held_t *h = &s->held[(s->held_head + s->held_count) % s->cfg.max_held_batches];
  memcpy(h->id, id, id_len);
  h->id_len = id_len;
  h->off = off, h->len = len, h->span = span;
  h->actor = t->actor_id, h->session = t->session, h->seq = t->seq;
  h->since_ns = sac_clock_ns();
  memcpy(s->held_buf + off, msg, len);
  s->held_wr = off + len;
  s->held_used += span;
  s->held_count++;
  s->st.insert_waits_total++;
  return 0;
}

/* Stores held batches, oldest first, while the rate limiter lets them in. */
static void release_held(sac_replay_server_t *s) {
  while (s->held_count) {
    held_t *h = &s->held[s->held_head];
    sac_wire_msg_t m;
    sac_wire_reason_t why;
    /* validated when it arrived; decoding again is what a held batch costs */
    int rc = sac_wire_decode(s->ins_dec, s->held_buf + h->off, h->len, &s->ins_lim, &m, &why);
    if (rc == 0 && !sac_replay_shard_can_insert(s->shard, m.u.transitions.n))
      return;
    uint64_t now = sac_clock_ns();
    s->st.insert_wait_seconds_total += (double)(now - h->since_ns) * 1e-9;
    s->held_head = (s->held_head + 1) % s->cfg.max_held_batches;
    s->held_count--;
    s->held_used -= h->span;
    s->held_rd = h->off + h->len;
    if (rc == 0)
      store_and_ack(s, h->id, h->id_len, &m.u.transitions);
    else
      count_reject(s, why, "insert", h->id, h->id_len); /* cannot happen: it decoded before */
  }
}

/* Handles one message from the insert endpoint. The endpoint is always read, also
 * while the rate limiter holds inserts back: a batch that cannot be stored yet is held
 * (bounded; a duplicate of a held batch is dropped), so ZeroMQ's queues never fill and
 * its connections never stall (a stalled connection cannot answer heartbeats, and
 * libzmq 4.3 asserts when such a connection fails). Returns 0. */
static int handle_insert(sac_replay_server_t *s) {
  unsigned char id[ID_MAX];
  size_t id_len = 0, len = 0;
  int got = recv_routed(s, s->ins, id, &id_len, s->ins_buf, &len, "insert");
  if (got < 0)
    send_ack(s, id, id_len, UINT32_MAX, 0, NULL, sac_wire_reason_str(SAC_WIRE_R_FRAMES));
  if (got <= 0)
    return got < 0 ? 0 : -1;
  sac_wire_msg_t m;
  sac_wire_reason_t why;
  if (len >= s->buf_cap) {
    count_reject(s, SAC_WIRE_R_TOO_BIG, "insert", id, id_len);
    send_ack(s, id, id_len, UINT32_MAX, 0, NULL, sac_wire_reason_str(SAC_WIRE_R_TOO_BIG));
    return 0;
  }
  int rc = sac_wire_decode(s->ins_dec, s->ins_buf, len, &s->ins_lim, &m, &why);
  if (rc) {
    count_reject(s, why, "insert", id, id_len);
    uint64_t seq = m.type == SAC_WIRE_TRANSITIONS ? m.u.transitions.seq : 0;
    send_ack(s, id, id_len, UINT32_MAX, seq, NULL, sac_wire_reason_str(why));
    return 0;
  }
  if (m.type == SAC_WIRE_INFO_REQUEST) {
    send_info(s, s->ins, id, id_len);
    return 0;
  }
  if (m.type != SAC_WIRE_TRANSITIONS)
    return 0; /* hello / heartbeat: nothing to answer */
  const sac_wire_transitions_t *t = &m.u.transitions;
  sac_replay_insert_result_t r;
  sac_replay_seq_t kind = sac_replay_shard_check(s->shard, t, &r);
  if (kind == SAC_REPLAY_SEQ_DUPLICATE) {
    sac_replay_shard_insert(s->shard, t, &r); /* counts the duplicate, stores nothing */
    send_ack(s, id, id_len, t->actor_id, t->seq, &r, NULL);
    return 0;
  }
  if (kind == SAC_REPLAY_SEQ_REJECT) {
    count_reject(s, r.reason, "insert", id, id_len);
    send_ack(s, id, id_len, t->actor_id, t->seq, &r, sac_wire_reason_str(r.reason));
    return 0;
  }
  /* Batches are stored in arrival order (an actor's must be in seq order for its
   * next_obs streams), so while anything is held a new batch queues behind it. */
  if (s->held_count || !sac_replay_shard_can_insert(s->shard, t->n)) {
    held_t *h = s->held_count ? held_find(s, t) : NULL;
    if (h) { /* a resend of a held batch: answer on the newest connection */
      memcpy(h->id, id, id_len);
      h->id_len = id_len;
      s->st.held_duplicates_total++;
      return 0;
    }
    if (held_push(s, id, id_len, s->ins_buf, len, t) != 0) {
      s->st.held_full_total++;
      send_ack(s, id, id_len, t->actor_id, t->seq, &r, sac_wire_reason_str(SAC_WIRE_R_BUSY));
    }
    return 0;
  }
  store_and_ack(s, id, id_len, t);
  return 0;
}

static void send_sample_error(sac_replay_server_t *s, const unsigned char *id, size_t id_len, uint64_t rid,
                              const char *error) {
  sac_wire_msg_t m = {.type = SAC_WIRE_SAMPLE_BATCH};
  m.u.sample_batch = (sac_wire_sample_batch_t){.request_id = rid,
                                               .obs_dim = s->cfg.shard.obs_dim,
                                               .act_dim = s->cfg.shard.act_dim,
                                               .shard_id = s->cfg.shard.shard_id,
                                               .error = error};
  reply(s, s->smp, id, id_len, &m);
}

static void serve_sample(sac_replay_server_t *s, const unsigned char *id, size_t id_len, uint64_t rid,
                         uint32_t n, float beta) {
  /* the routing frame first: a peer whose queue is full (it does not read) gets
   * nothing sampled, encoded or queued */
  if (reply_begin(s, s->smp, id, id_len) != 0)
    return;
  sac_replay_sample_t b;
  int rc = sac_replay_shard_sample(s->shard, n, beta, &b);
  if (rc) {
    sac_wire_msg_t e = {.type = SAC_WIRE_SAMPLE_BATCH};
    e.u.sample_batch = (sac_wire_sample_batch_t){.request_id = rid,
                                                 .obs_dim = s->cfg.shard.obs_dim,
                                                 .act_dim = s->cfg.shard.act_dim,
                                                 .shard_id = s->cfg.shard.shard_id,
                                                 .error = "replay is empty"};
    reply_end(s, s->smp, &e);
    return;
  }
  sac_wire_msg_t m = {.type = SAC_WIRE_SAMPLE_BATCH};
  m.u.sample_batch = (sac_wire_sample_batch_t){.request_id = rid,
                                               .n = b.n,
                                               .obs_dim = b.obs_dim,
                                               .act_dim = b.act_dim,
                                               .shard_id = b.shard_id,
                                               .obs = b.obs,
                                               .action = b.action,
                                               .reward = b.reward,
                                               .terminated = b.terminated,
                                               .next_obs = b.next_obs,
                                               .indices = b.indices,
                                               .weights = b.weights,
                                               .error = ""};
  reply_end(s, s->smp, &m);
}

/* 1 when this peer may be served samples: it is one of the max_sample_peers being
 * served, or takes a free place or that of one silent for PEER_IDLE_NS. Bounds the
 * replies queued in total to max_sample_peers x max_reply_queue_bytes. */
static int peer_admit(sac_replay_server_t *s, const unsigned char *id, size_t id_len) {
  uint64_t now = sac_clock_ns();
  uint32_t idle = UINT32_MAX;
  for (uint32_t i = 0; i < s->n_peers; i++) {
    peer_t *p = &s->peers[i];
    if (p->id_len == id_len && memcmp(p->id, id, id_len) == 0) {
      p->seen_ns = now;
      return 1;
    }
    if (now - p->seen_ns >= PEER_IDLE_NS && (idle == UINT32_MAX || p->seen_ns < s->peers[idle].seen_ns))
      idle = i;
  }
  peer_t *p = NULL;
  if (s->n_peers < s->cfg.max_sample_peers)
    p = &s->peers[s->n_peers++];
  else if (idle != UINT32_MAX)
    p = &s->peers[idle];
  if (!p)
    return 0;
  memcpy(p->id, id, id_len);
  p->id_len = id_len;
  p->seen_ns = now;
  return 1;
}

static void serve_pending(sac_replay_server_t *s) {
  uint64_t now = 0;
  while (s->pend_count) {
    pending_t *p = &s->pend[s->pend_head];
    if (!sac_replay_shard_can_sample(s->shard, p->batch))
      break;
    if (!now)
      now = sac_clock_ns();
    s->st.sample_wait_seconds_total += (double)(now - p->enqueued_ns) * 1e-9;
    serve_sample(s, p->id, p->id_len, p->request_id, p->batch, p->beta);
    s->pend_head = (s->pend_head + 1) % s->cfg.max_pending_samples;
    s->pend_count--;
  }
}

static void expire_pending(sac_replay_server_t *s, uint64_t now) {
  /* Deadlines differ per request, so scan the (bounded) queue and compact it. */
  uint32_t cap = s->cfg.max_pending_samples, kept = 0;
  for (uint32_t i = 0; i < s->pend_count; i++) {
    pending_t *p = &s->pend[(s->pend_head + i) % cap];
    if (p->deadline_ns <= now) {
      s->st.sample_timeouts_total++;
      s->st.sample_wait_seconds_total += (double)(now - p->enqueued_ns) * 1e-9;
      send_sample_error(s, p->id, p->id_len, p->request_id,
                        "timed out waiting for the rate limiter (too few inserts or below min_size)");
      continue;
    }
    if (kept != i)
      s->pend[(s->pend_head + kept) % cap] = *p;
    kept++;
  }
  s->pend_count = kept;
}

static uint64_t nearest_deadline(const sac_replay_server_t *s) {
  uint64_t best = UINT64_MAX;
  for (uint32_t i = 0; i < s->pend_count; i++) {
    const pending_t *p = &s->pend[(s->pend_head + i) % s->cfg.max_pending_samples];
    if (p->deadline_ns < best)
      best = p->deadline_ns;
  }
  return best;
}

static void handle_sample(sac_replay_server_t *s) {
  unsigned char id[ID_MAX];
  size_t id_len = 0, len = 0;
  int got = recv_routed(s, s->smp, id, &id_len, s->smp_buf, &len, "sample");
  if (got < 0)
    send_sample_error(s, id, id_len, 0, sac_wire_reason_str(SAC_WIRE_R_FRAMES));
  if (got <= 0)
    return;
  sac_wire_msg_t m;
  sac_wire_reason_t why;
  if (len >= s->buf_cap) {
    count_reject(s, SAC_WIRE_R_TOO_BIG, "sample", id, id_len);
    send_sample_error(s, id, id_len, 0, sac_wire_reason_str(SAC_WIRE_R_TOO_BIG));
    return;
  }
  int rc = sac_wire_decode(s->smp_dec, s->smp_buf, len, &s->smp_lim, &m, &why);
  if (rc) {
    /* every rejected message is answered (request id 0 unless it was a sample request) */
    count_reject(s, why, "sample", id, id_len);
    send_sample_error(s, id, id_len, m.type == SAC_WIRE_SAMPLE_REQUEST ? m.u.sample_request.request_id : 0,
                      sac_wire_reason_str(why));
    return;
  }
  switch (m.type) {
  case SAC_WIRE_SAMPLE_REQUEST: {
    const sac_wire_sample_request_t *q = &m.u.sample_request;
    if (!peer_admit(s, id, id_len)) {
      s->st.sample_peers_refused_total++;
      SAC_WARN_EVERY(10.0, "replay", "sample request refused: max_sample_peers=%u peers are being served",
                     s->cfg.max_sample_peers);
      send_sample_error(s, id, id_len, q->request_id, "busy: too many sample peers (max_sample_peers)");
      return;
    }
    if (q->batch_size > s->cfg.shard.max_sample_batch) {
      count_reject(s, SAC_WIRE_R_ROWS, "sample", id, id_len);
      send_sample_error(s, id, id_len, q->request_id, "batch_size over this shard's max_sample_batch");
      return;
    }
    if (s->pend_count == 0 && sac_replay_shard_can_sample(s->shard, q->batch_size)) {
      serve_sample(s, id, id_len, q->request_id, q->batch_size, q->beta);
      return;
    }
    if (s->pend_count >= s->cfg.max_pending_samples) {
      s->st.sample_busy_total++;
      send_sample_error(s, id, id_len, q->request_id, "busy: too many sample requests waiting");
      return;
    }
    uint64_t now = sac_clock_ns();
    uint32_t tmo =
        q->timeout_ms < s->cfg.max_sample_timeout_ms ? q->timeout_ms : s->cfg.max_sample_timeout_ms;
    pending_t *p = &s->pend[(s->pend_head + s->pend_count) % s->cfg.max_pending_samples];
    memcpy(p->id, id, id_len);
    p->id_len = id_len;
    p->request_id = q->request_id;
    p->batch = q->batch_size;
    p->beta = q->beta;
    p->enqueued_ns = now;
    p->deadline_ns = now + (uint64_t)tmo * 1000000ull;
    s->pend_count++;
    s->st.sample_waits_total++;
    return;
  }
  case SAC_WIRE_PRIORITY_UPDATE: {
    uint32_t ok = 0, stale = 0, foreign = 0;
    const sac_wire_priority_update_t *u = &m.u.priority_update;
    sac_replay_shard_update_priorities(s->shard, u->n, u->indices, u->priorities, &ok, &stale, &foreign);
    if (foreign)
      count_reject(s, SAC_WIRE_R_INDEX, "sample", id, id_len);
    return;
  }
  case SAC_WIRE_INFO_REQUEST:
    send_info(s, s->smp, id, id_len);
    return;
  default:
    return;
  }
}

/* ------------------------------------------------------------------ loop */

static void snapshot(sac_replay_server_t *s, const char *why) {
  if (!s->cfg.snapshot_path[0])
    return;
  uint64_t t0 = sac_clock_ns();
  uint64_t bytes = 0;
  sac_replay_shard_stats_t ss;
  sac_replay_shard_stats(s->shard, &ss);
  int rc = sac_replay_shard_save(s->shard, s->cfg.snapshot_path, &bytes);
  double dt = (double)(sac_clock_ns() - t0) * 1e-9;
  if (rc) {
    s->st.snapshot_failures_total++;
    s->st.snapshot_failing = 1; /* /healthz says so until a snapshot succeeds */
    SAC_ERROR("replay", "%s snapshot to %s failed: %s", why, s->cfg.snapshot_path, sac_strerror(rc));
    return;
  }
  s->st.snapshot_failing = 0;
  s->st.snapshots_total++;
  s->st.snapshot_inserted_total = ss.inserted_rows_total;
  s->st.last_snapshot_unix_ns = sac_wallclock_ns();
  s->st.last_snapshot_seconds = dt;
  s->st.last_snapshot_bytes = bytes;
  SAC_INFO("replay", "%s snapshot: %llu transitions, %.1f MiB in %.3f s to %s", why,
           (unsigned long long)ss.size, (double)bytes / 1048576.0, dt, s->cfg.snapshot_path);
}

static void publish(sac_replay_server_t *s) {
  sac_replay_shard_stats(s->shard, &s->st.shard);
  s->st.pending_samples = s->pend_count;
  s->st.insert_parked = s->held_count > 0;
  s->st.insert_held_batches = s->held_count;
  s->st.insert_held_bytes = s->held_used;
  pthread_mutex_lock(&s->mu);
  s->pub = s->st;
  pthread_mutex_unlock(&s->mu);
}

void sac_replay_server_stats(sac_replay_server_t *s, sac_replay_stats_t *out) {
  pthread_mutex_lock(&s->mu);
  *out = s->pub;
  pthread_mutex_unlock(&s->mu);
}

int sac_replay_server_run(sac_replay_server_t *s) {
  const uint64_t interval =
      s->cfg.snapshot_interval_s > 0 ? (uint64_t)(s->cfg.snapshot_interval_s * 1e9) : UINT64_MAX;
  uint64_t next_snap = interval == UINT64_MAX ? UINT64_MAX : sac_clock_ns() + interval;
  uint64_t last_pub = 0;
  while (!atomic_load(&s->stop)) {
    uint64_t now = sac_clock_ns();
    uint64_t wake = now + 50000000ull; /* 50 ms: notice stop requests */
    if (next_snap < wake)
      wake = next_snap;
    uint64_t dl = nearest_deadline(s);
    if (dl < wake)
      wake = dl;
    long timeout_ms = wake > now ? (long)((wake - now + 999999) / 1000000) : 0;
    sac_net_pollitem_t items[2] = {{s->smp, SAC_NET_POLLIN, 0}, {s->ins, SAC_NET_POLLIN, 0}};
    int rc = sac_net_poll(items, 2, timeout_ms);
    if (rc < 0 && rc != SAC_EINTR) {
      SAC_ERROR("replay", "poll failed (%s); stopping", sac_strerror(rc));
      break;
    }
    /* Alternate bounded bursts so neither side starves the other. */
    for (int round = 0; round < 64; round++) {
      int progress = 0;
      for (int i = 0; i < 16; i++) {
        uint64_t before = s->st.messages_total;
        handle_sample(s);
        if (s->st.messages_total == before)
          break;
        progress = 1;
      }
      release_held(s);
      for (int i = 0; i < 16; i++) {
        uint64_t before = s->st.messages_total;
        handle_insert(s);
        if (s->st.messages_total == before)
          break;
        progress = 1;
      }
      serve_pending(s);
      release_held(s);
      if (!progress)
        break;
    }
    now = sac_clock_ns();
    if (s->pend_count)
      expire_pending(s, now);
    if (now >= next_snap || atomic_exchange(&s->snap_req, 0)) {
      snapshot(s, now >= next_snap ? "periodic" : "requested");
      next_snap = interval == UINT64_MAX ? UINT64_MAX : sac_clock_ns() + interval;
    }
    if (now - last_pub > 1000000ull) {
      publish(s);
      last_pub = now;
    }
  }
  /* Held batches were never acknowledged: the actors resend them. */
  int rc = 0;
  if (s->cfg.snapshot_path[0]) {
    uint64_t fails = s->st.snapshot_failures_total;
    snapshot(s, "final");
    if (s->st.snapshot_failures_total != fails)
      rc = SAC_EIO;
  }
  publish(s);
  return rc;
}

static void *thread_main(void *arg) {
  sac_replay_server_t *s = arg;
  s->thread_rc = sac_replay_server_run(s);
  return NULL;
}

int sac_replay_server_start(sac_replay_server_t *s) {
  if (atomic_exchange(&s->running, 1))
    return SAC_ESTATE;
  atomic_store(&s->stop, 0);
  if (pthread_create(&s->thread, NULL, thread_main, s) != 0) {
    atomic_store(&s->running, 0);
    return SAC_ENOMEM;
  }
  return 0;
}

void sac_replay_server_stop(sac_replay_server_t *s) { atomic_store(&s->stop, 1); }

void sac_replay_server_request_snapshot(sac_replay_server_t *s) { atomic_store(&s->snap_req, 1); }

int sac_replay_server_join(sac_replay_server_t *s) {
  if (!atomic_load(&s->running))
    return SAC_ESTATE;
  pthread_join(s->thread, NULL);
  atomic_store(&s->running, 0);
  return s->thread_rc;
}
