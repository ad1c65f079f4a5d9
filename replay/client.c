/* The replay client (see client.h): per-shard insert windows with acks and resends,
 * prefetching samplers, and priority updates routed by the shard id in each index. */
#include "replay/client.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "common/rng.h"
#include "common/wire_view.h"

#define MAX_WINDOW 64u
/* sample request ids remembered per connection: a reply must answer one of them */
#define MAX_PEND 64u
/* a rejection kind logs once at once, then at most one summary line per this interval */
#define REJECT_LOG_NS 10000000000ull
/* a wait (an unreachable shard, acknowledgements that stopped) is logged once it has
 * lasted WAIT_WARN_NS, then again every WAIT_REPEAT_NS while it lasts */
#define WAIT_WARN_NS 5000000000ull
#define WAIT_REPEAT_NS 30000000000ull
enum { WAIT_NONE = 0, WAIT_UNREACHABLE, WAIT_NO_ACKS };

typedef struct {
  unsigned char *buf;
  size_t cap, len;
  uint64_t seq;
  uint32_t rows; /* the batch's transitions, for the ledger (on_acked) */
  uint64_t sent_ns, first_sent_ns;
  uint32_t resends;       /* timed resends of this batch so far: the next waits 2^resends longer */
  uint64_t not_before_ns; /* answered "not durable": resent at this time (0: none pending) */
  int acked, unsent;
} wslot_t;

typedef struct {
  char ep[256]; /* the sample (or insert) endpoint, for log lines */
  void *ins, *smp, *info;
  sac_net_monitor_t *ins_mon, *smp_mon;
  int ins_connected_once, smp_connected_once;
  /* Waits made visible (watch_waits): whether each socket is connected now (inproc is
   * always), since when it is not, and the wait being logged (WAIT_*, with when it
   * began and when it is said again). last_ack_ns: the last ack of any kind (insert);
   * last_batch_ns and last_error: the last batch and the last error reply (sample). */
  int ins_up, smp_up;
  uint64_t ins_down_ns, smp_down_ns, last_ack_ns, last_batch_ns;
  char last_error[128];
  int ins_wait, smp_wait;
  uint64_t ins_wait_ns, smp_wait_ns, ins_warn_next_ns, smp_warn_next_ns;
  wslot_t win[MAX_WINDOW];
  uint64_t lo, next_seq; /* unacked seqs are [lo, next_seq) */
  uint32_t credit;
  uint32_t inflight;
  uint64_t last_request_ns, last_reply_ns;
  uint64_t f32_replies;      /* f32 replies to fp16 requests (a shard that predates fp16) */
  uint64_t backoff_until_ns; /* after an error reply: no new request before this */
  /* ids of the sample requests sent and not yet answered, oldest first (a request
   * reissued after a timeout stays here: its late answer is still a valid batch) */
  uint64_t pend[MAX_PEND];
  uint32_t npend;
  /* ShardInfo without waiting (sac_replay_client_info_cached) */
  sac_wire_shard_info_t info_last;
  int info_valid;
  uint64_t info_sent_ns;
  /* priority update scratch */
  uint64_t *pidx;
  float *pval;
  size_t pcap, pn;
} conn_t;

/* A reply of several batches (batches_per_request > 1), returned one batch per sample:
 * on the direct path the received message itself, read in place (each batch copied into
 * the caller's stage and checked as it is copied); on the decoded path its rows copied out
 * of the decoder, whose memory the next decode or info request reuses. */
typedef struct {
  uint32_t next, count; /* the next batch to return and the reply's batches (count 0: none held) */
  size_t conn;
  int direct;
  sac_net_msg_t msg;         /* direct: the message, closed when the last batch is returned */
  sac_wire_sample_view_t v;  /* direct: the whole reply */
  sac_wire_sample_batch_t b; /* decoded: the header, its arrays pointing at the copies below */
  float *obs, *act, *next_obs, *rew, *term, *w;
  uint64_t *idx;
  size_t cap_rows;
} held_t;

struct sac_replay_client {
  sac_replay_client_config_t cfg;
  sac_net_ctx_t *ctx;
  conn_t *conns;
  size_t n;
  size_t rr_insert, rr_sample;
  int16_t shard_map[SAC_WIRE_MAX_SHARDS]; /* shard id -> connection, -1 unknown */
  sac_wire_decoder_t *dec;
  sac_wire_limits_t lim;
  sac_wire_limits_t slim; /* sample replies: any dims (compared after decoding), batch_size rows at most */
  char fatal[512];        /* why sample returned SAC_ECONFIG */
  uint64_t reject_log_ns[SAC_REPLAY_REJECT_KINDS], reject_unlogged[SAC_REPLAY_REJECT_KINDS];
  uint64_t refusal_log_ns;
  unsigned char *rbuf;
  size_t rcap;
  unsigned char *sbuf;
  size_t scap;
  uint64_t request_id;
  uint64_t *sidx; /* (batch_size) the indices of the last batch sampled into a stage */
  /* sac_replay_client_sample's batch (batch_size rows of the configured dims, one block):
   * a reply in the common encoding is read into it as sample_into reads into a stage, one
   * checked copy from the message (decoding with protobuf, then checking every value in a
   * second pass, then copying a multi-batch reply out of the decoder took about 2/3 of the
   * learner's CPU per update on this path) */
  float *own;
  /* fp16 replies converted to f32 (sample_precision fp16), f16_rows rows of the dims */
  float *f32_obs, *f32_act, *f32_next;
  size_t f16_cap_obs, f16_cap_act; /* floats */
  held_t held;                     /* the batches of the last multi-batch reply not yet returned */
  sac_replay_client_stats_t st;
};

void sac_replay_client_config_default(sac_replay_client_config_t *c) {
  memset(c, 0, sizeof *c);
  c->window = 16;
  c->resend_ms = 2000;
  c->prefetch = 2;
  c->batch_size = 256;
  c->beta = 0.4f;
  c->sample_timeout_ms = 1000;
  c->max_msg_bytes = 4u << 20;
}

/* Room for fp16 replies converted to f32: at start-up when the dims are known, else
 * once on the first such reply. */
static int grow_f32(sac_replay_client_t *c, size_t obs_floats, size_t act_floats) {
  if (obs_floats > c->f16_cap_obs) {
    float *o = realloc(c->f32_obs, obs_floats * sizeof *o);
    if (!o)
      return SAC_ENOMEM;
    c->f32_obs = o;
    float *n = realloc(c->f32_next, obs_floats * sizeof *n);
    if (!n)
      return SAC_ENOMEM;
    c->f32_next = n;
    c->f16_cap_obs = obs_floats;
  }
  if (act_floats > c->f16_cap_act) {
    float *a = realloc(c->f32_act, act_floats * sizeof *a);
    if (!a)
      return SAC_ENOMEM;
    c->f32_act = a;
    c->f16_cap_act = act_floats;
  }
  return 0;
}

/* A DEALER to ep; with mon, its connection events are watched from before it connects
 * (a monitor attached after zmq_connect can miss the CONNECTED event of a fast
 * connection, and the shard would then read as unreachable while it answers). */
static void *make_socket_watched(sac_replay_client_t *c, const char *ep, sac_net_monitor_t **mon) {
  sac_net_opts_t o;
  sac_net_opts_default(&o);
  o.max_msg_bytes = (int64_t)c->cfg.max_msg_bytes * 2;
  o.sndhwm = 1000;
  o.rcvhwm = 1000;
  o.reconnect_ivl_ms = 50;
  o.reconnect_ivl_max_ms = 1000;
  o.heartbeat_ivl_ms = 1000;
  o.heartbeat_timeout_ms = 3000;
  void *s = sac_net_socket(c->ctx, SAC_NET_DEALER, &o);
  if (s && mon && !(*mon = sac_net_monitor_new(c->ctx, s)))
    sac_net_close(&s);
  if (s && sac_net_connect(s, ep) != 0)
    sac_net_close(&s);
  return s;
}

static void *make_socket(sac_replay_client_t *c, const char *ep) { return make_socket_watched(c, ep, NULL); }

sac_replay_client_t *sac_replay_client_new(const sac_replay_client_config_t *cfg) {
  if (cfg->n_shards == 0 || cfg->n_shards > SAC_WIRE_MAX_SHARDS ||
      (!cfg->insert_endpoints && !cfg->sample_endpoints) || cfg->window == 0 || cfg->window > MAX_WINDOW ||
      (cfg->sample_endpoints && cfg->batch_size == 0) || cfg->max_msg_bytes < 4096 ||
      cfg->batches_per_request > 64 ||
      (uint64_t)cfg->batch_size * (cfg->batches_per_request ? cfg->batches_per_request : 1) > (1u << 20) ||
      (cfg->sample_precision != SAC_WIRE_F32 && cfg->sample_precision != SAC_WIRE_F16)) {
    SAC_ERROR("replay-client",
              "invalid client configuration (shards 1..%u, window 1..%u, batch_size > 0, batches_per_request "
              "0..64, sample_precision f32 or fp16)",
              SAC_WIRE_MAX_SHARDS, MAX_WINDOW);
    return NULL;
  }
  sac_replay_client_t *c = calloc(1, sizeof *c);
  if (!c)
    return NULL;
  c->cfg = *cfg;
  c->cfg.insert_endpoints = NULL; /* not kept: the caller's strings */
  c->cfg.sample_endpoints = NULL;
  if (!c->cfg.prefetch)
    c->cfg.prefetch = 1;
  if (!c->cfg.batches_per_request)
    c->cfg.batches_per_request = 1;
  if (!c->cfg.resend_ms)
    c->cfg.resend_ms = 2000;
  if (!c->cfg.session) {
    /* Increasing across restarts: the start time in microseconds in the high bits (a
     * restarted client always starts later), 12 random bits below it against two
     * clients started in the same microsecond. A shard refuses batches of a session
     * older than the newest it has seen for this actor id (replay/shard.c). */
    uint64_t noise = sac_splitmix64(sac_wallclock_ns() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)c);
    c->cfg.session = ((sac_wallclock_ns() / 1000u) << 12) | (noise & 0xfffu) | 1u;
  }
  memset(c->shard_map, 0xff, sizeof c->shard_map);
  c->n = cfg->n_shards;
  c->conns = calloc(c->n, sizeof *c->conns);
  c->rcap = cfg->max_msg_bytes + 1;
  c->rbuf = malloc(c->rcap);
  c->scap = 65536;
  c->sbuf = malloc(c->scap);
  c->dec = sac_wire_decoder_new(cfg->max_msg_bytes);
  if (cfg->sample_endpoints && !(c->sidx = malloc((size_t)cfg->batch_size * sizeof *c->sidx)))
    goto fail;
  if (cfg->sample_endpoints && cfg->obs_dim && cfg->act_dim &&
      !(c->own = malloc((size_t)cfg->batch_size * (2 * cfg->obs_dim + cfg->act_dim + 3) * sizeof(float))))
    goto fail;
  c->ctx = cfg->ctx ? sac_net_ctx_ref(cfg->ctx) : sac_net_ctx_new(1);
  if (!c->conns || !c->rbuf || !c->sbuf || !c->dec || !c->ctx)
    goto fail;
  const size_t reply_rows = (size_t)cfg->batch_size * c->cfg.batches_per_request;
  if (cfg->sample_precision == SAC_WIRE_F16 &&
      grow_f32(c, reply_rows * cfg->obs_dim, reply_rows * cfg->act_dim) != 0)
    goto fail;
  c->lim = (sac_wire_limits_t){.max_msg_bytes = cfg->max_msg_bytes,
                               .obs_dim = cfg->obs_dim,
                               .act_dim = cfg->act_dim,
                               .max_rows = 1u << 20};
  c->slim = c->lim;
  c->slim.obs_dim = c->slim.act_dim = 0; /* a shard of other sizes is told apart from garbage */
  c->slim.max_rows = reply_rows ? (uint32_t)reply_rows : 1;
  if (c->cfg.prefetch > MAX_PEND / 2)
    c->cfg.prefetch = MAX_PEND / 2;
  for (size_t i = 0; i < c->n; i++) {
    conn_t *k = &c->conns[i];
    snprintf(k->ep, sizeof k->ep, "%s",
             cfg->sample_endpoints ? cfg->sample_endpoints[i] : cfg->insert_endpoints[i]);
    k->lo = k->next_seq = 1;
    /* inproc:// peers are in this process and bound before anyone connects; ZeroMQ has
     * no connect events for them */
    k->ins_up = k->smp_up = strncmp(k->ep, "inproc://", 9) == 0;
    k->ins_down_ns = k->smp_down_ns = k->last_ack_ns = k->last_batch_ns = sac_clock_ns();
    /* one batch in flight until the shard's first ack says how many it takes (its
     * credit): 64 actors starting with full windows queued ~130,000 transitions ahead
     * of the rate limiter */
    k->credit = 1;
    if (cfg->insert_endpoints) {
      k->ins = make_socket_watched(c, cfg->insert_endpoints[i], &k->ins_mon);
      if (!k->ins || !k->ins_mon)
        goto fail;
    }
    if (cfg->sample_endpoints) {
      k->smp = make_socket_watched(c, cfg->sample_endpoints[i], &k->smp_mon);
      if (!k->smp || !k->smp_mon)
        goto fail;
      k->info = make_socket(c, cfg->sample_endpoints[i]);
    } else {
      k->info = make_socket(c, cfg->insert_endpoints[i]);
    }
    if (!k->info)
      goto fail;
  }
  return c;
fail:
  SAC_ERROR("replay-client", "cannot create the replay client");
  sac_replay_client_destroy(&c);
  return NULL;
}

void sac_replay_client_destroy(sac_replay_client_t **cp) {
  if (!cp || !*cp)
    return;
  sac_replay_client_t *c = *cp;
  for (size_t i = 0; c->conns && i < c->n; i++) {
    conn_t *k = &c->conns[i];
    sac_net_monitor_destroy(&k->ins_mon);
    sac_net_monitor_destroy(&k->smp_mon);
    sac_net_close(&k->ins);
    sac_net_close(&k->smp);
    sac_net_close(&k->info);
    for (uint32_t j = 0; j < MAX_WINDOW; j++)
      free(k->win[j].buf);
    free(k->pidx);
    free(k->pval);
  }
  free(c->conns);
  free(c->f32_obs);
  free(c->f32_act);
  free(c->f32_next);
  if (c->held.count && c->held.direct)
    sac_net_msg_close(&c->held.msg);
  free(c->held.obs), free(c->held.act), free(c->held.next_obs), free(c->held.rew), free(c->held.term);
  free(c->held.w), free(c->held.idx);
  free(c->rbuf);
  free(c->sbuf);
  free(c->sidx);
  free(c->own);
  sac_wire_decoder_destroy(&c->dec);
  sac_net_ctx_destroy(&c->ctx);
  free(c);
  *cp = NULL;
}

void sac_replay_client_stats(const sac_replay_client_t *c, sac_replay_client_stats_t *out) { *out = c->st; }

/* ------------------------------------------------------------------ insert window */

static uint32_t window_of(const sac_replay_client_t *c, const conn_t *k) {
  uint32_t w = k->credit < c->cfg.window ? k->credit : c->cfg.window;
  return w ? w : 1;
}

static void send_slot(sac_replay_client_t *c, conn_t *k, wslot_t *s) {
  int rc = sac_net_send(k->ins, s->buf, s->len, SAC_NET_DONTWAIT);
  s->sent_ns = sac_clock_ns();
  s->unsent = rc != 0;
  (void)c;
}

static void advance_lo(conn_t *k) {
  while (k->lo < k->next_seq && k->win[k->lo % MAX_WINDOW].acked)
    k->lo++;
}

static void mark_acked(sac_replay_client_t *c, wslot_t *s, uint32_t shard_id) {
  s->acked = 1;
  c->st.batches_acked++;
  if (c->cfg.on_ack)
    c->cfg.on_ack(c->cfg.on_ack_arg, (double)(sac_clock_ns() - s->first_sent_ns) * 1e-9);
  if (c->cfg.on_acked) {
    sac_replay_acked_t b = {shard_id, c->cfg.actor_id, s->rows, c->cfg.session, s->seq};
    c->cfg.on_acked(c->cfg.on_acked_arg, &b);
  }
}

/* "not durable": the shard could not make the batch durable (its disk is full, its log
 * failed). Nothing of it is stored: the batch stays in the window and is resent once
 * the shard's retry_after_ms has passed; the window keeps the actor from sending more
 * meanwhile. Logged once per shard and then every 10 s while it lasts. */
static void not_durable(sac_replay_client_t *c, conn_t *k, const sac_wire_ack_t *a) {
  c->st.not_durable_replies++;
  uint32_t retry = a->retry_after_ms ? a->retry_after_ms : 1000u;
  if (a->seq >= k->lo && a->seq < k->next_seq && !k->win[a->seq % MAX_WINDOW].acked)
    k->win[a->seq % MAX_WINDOW].not_before_ns = sac_clock_ns() + (uint64_t)retry * 1000000ull;
  SAC_WARN_EVERY(
      10.0, "replay-client",
      "shard %u at %s cannot make data durable (%s): batch %llu kept with %llu unacknowledged, resent "
      "in %u ms (%llu such replies so far)",
      a->shard_id, k->ep, a->error, (unsigned long long)a->seq, (unsigned long long)(k->next_seq - k->lo),
      retry, (unsigned long long)c->st.not_durable_replies);
}

static void handle_ack(sac_replay_client_t *c, conn_t *k, const sac_wire_ack_t *a) {
  k->last_ack_ns = sac_clock_ns();
  if (a->credit)
    k->credit = a->credit;
  if (a->status == SAC_WIRE_ACK_NOT_DURABLE || !strcmp(a->error, SAC_WIRE_NOT_DURABLE_ERROR)) {
    not_durable(c, k, a);
  } else if (a->error[0]) {
    if (a->seq >= k->lo && a->seq < k->next_seq) {
      wslot_t *s = &k->win[a->seq % MAX_WINDOW];
      if (!strcmp(a->error, sac_wire_reason_str(SAC_WIRE_R_WINDOW))) {
        /* the shard lost our window (restart): the timed resend sends it again, with an
         * acked_through that moves the shard's window */
      } else if (!strcmp(a->error, sac_wire_reason_str(SAC_WIRE_R_BUSY))) {
        /* not stored, not held: the timed resend sends it again */
        c->st.busy_replies++;
      } else if (!strcmp(a->error, sac_wire_reason_str(SAC_WIRE_R_SESSION))) {
        if (!c->st.superseded_batches)
          SAC_ERROR("replay-client",
                    "shard %u refuses our batches: a client with the same actor id %u started after this "
                    "one (two actors with one --actor_id?); dropping them",
                    a->shard_id, c->cfg.actor_id);
        c->st.superseded_batches++;
        c->st.insert_errors++;
        s->acked = 1;
      } else {
        SAC_WARN("replay-client", "shard %u rejected batch %llu: %s; dropping it", a->shard_id,
                 (unsigned long long)a->seq, a->error);
        c->st.insert_errors++;
        s->acked = 1;
      }
    } else {
      c->st.insert_errors++;
    }
  } else if (a->seq >= k->lo && a->seq < k->next_seq && !k->win[a->seq % MAX_WINDOW].acked) {
    mark_acked(c, &k->win[a->seq % MAX_WINDOW], a->shard_id);
    if (a->duplicate)
      c->st.duplicates_acked++;
  }
  /* cumulative: everything up to acked_seq is stored */
  for (uint64_t q = k->lo; q <= a->acked_seq && q < k->next_seq; q++) {
    wslot_t *s = &k->win[q % MAX_WINDOW];
    if (!s->acked)
      mark_acked(c, s, a->shard_id);
  }
  advance_lo(k);
}

static void resend_all(sac_replay_client_t *c, conn_t *k) {
  for (uint64_t q = k->lo; q < k->next_seq; q++) {
    wslot_t *s = &k->win[q % MAX_WINDOW];
    if (!s->acked) {
      send_slot(c, k, s);
      c->st.batches_resent++;
    }
  }
}

/* ------------------------------------------------------------------ waits made visible */

/* A socket's connection state from its monitor's events (the last one wins). */
static void track_up(int ev, int *up, uint64_t *down_ns, uint64_t now) {
  if ((ev & SAC_NET_EV_DISCONNECTED) && !(ev & SAC_NET_EV_CONNECTED) && *up) {
    *up = 0;
    *down_ns = now;
  } else if (ev & SAC_NET_EV_CONNECTED) {
    *up = 1;
  }
}

static uint32_t conn_unacked(const conn_t *k) {
  uint32_t n = 0;
  for (uint64_t q = k->lo; q < k->next_seq; q++)
    n += !k->win[q % MAX_WINDOW].acked;
  return n;
}

/* Who is waiting, for the log lines: "actor N" (inserting), "" (the learner, sampling). */
static const char *who(const sac_replay_client_t *c, int inserting, char *buf, size_t cap) {
  if (inserting)
    snprintf(buf, cap, "actor %u", c->cfg.actor_id);
  else
    buf[0] = '\0'; /* the learner's lines say "learner:" already */
  return buf;
}

/* Enters, repeats or ends a logged wait: `kind` is the wait going on now (WAIT_NONE:
 * none), since `since`. A wait is said once it has lasted `delay` (WAIT_WARN_NS; 0 for a
 * connection lost), again every WAIT_REPEAT_NS, and its end is said when it had been. Returns 1 when a WARN
 * is due now (the caller writes it), and counts it. */
static int wait_step(sac_replay_client_t *c, int *cur, uint64_t *began, uint64_t *next, int kind,
                     uint64_t since, uint64_t delay, uint64_t now, const conn_t *k, int inserting) {
  char w[32];
  if (kind != *cur) {
    if (*cur != WAIT_NONE && *next > *began + WAIT_WARN_NS) /* it had been logged: its end too */
      SAC_INFO(inserting ? "actor" : "learner", "%s%sshard %s %s after %.0f s",
               who(c, inserting, w, sizeof w), inserting ? ": " : "", k->ep,
               *cur == WAIT_UNREACHABLE ? "reachable again" : "acknowledges again",
               (double)(now - *began) * 1e-9);
    *cur = kind;
    *began = since;
    *next = since + delay;
  }
  if (kind == WAIT_NONE || now < *next)
    return 0;
  if (*next <= *began + WAIT_WARN_NS) /* its first line: one wait counted */
    c->st.waits_logged[kind]++;
  *next = now + WAIT_REPEAT_NS;
  return 1;
}

/* Insert side: a shard unreachable while batches wait for it, or one that is connected
 * and acknowledges nothing (it holds the batches back). */
static void watch_inserts(sac_replay_client_t *c, conn_t *k, uint64_t now) {
  if (!strncmp(k->ep, "inproc://", 9))
    return; /* an embedded actor: its learner, in the same process, says what the run waits for */
  uint32_t unacked = conn_unacked(k);
  uint64_t oldest = now;
  for (uint64_t q = k->lo; q < k->next_seq; q++)
    if (!k->win[q % MAX_WINDOW].acked && k->win[q % MAX_WINDOW].first_sent_ns < oldest)
      oldest = k->win[q % MAX_WINDOW].first_sent_ns;
  uint64_t acked_or_sent = k->last_ack_ns > oldest ? k->last_ack_ns : oldest;
  int kind = !k->ins_up ? WAIT_UNREACHABLE : unacked ? WAIT_NO_ACKS : WAIT_NONE;
  /* no acks: the wait runs from the later of the last ack and the oldest batch's send */
  uint64_t since = kind == WAIT_UNREACHABLE ? k->ins_down_ns : acked_or_sent;
  if (kind == WAIT_NO_ACKS && now - since < WAIT_WARN_NS)
    kind = WAIT_NONE; /* acks come: not a wait (or the end of one) */
  /* a shard lost (it was connected) is said at once; one not reached yet after a while */
  uint64_t delay = kind == WAIT_UNREACHABLE && k->ins_connected_once ? 0 : WAIT_WARN_NS;
  if (!wait_step(c, &k->ins_wait, &k->ins_wait_ns, &k->ins_warn_next_ns, kind, since, delay, now, k, 1))
    return;
  double s = (double)(now - k->ins_wait_ns) * 1e-9;
  if (kind == WAIT_UNREACHABLE && k->ins_connected_once && s < 1.0)
    SAC_WARN(
        "actor",
        "actor %u: lost the connection to shard %s (%u batch(es) unacknowledged): reconnecting; they are "
        "sent again once it is back",
        c->cfg.actor_id, k->ep, unacked);
  else if (kind == WAIT_UNREACHABLE)
    SAC_WARN("actor",
             "actor %u: cannot reach shard %s for %.0f s (%u batch(es) wait for it): is sac-replay running "
             "there, and does the actor's --shards list its insert endpoint? Retrying",
             c->cfg.actor_id, k->ep, s, unacked);
  else
    SAC_WARN("actor",
             "actor %u: shard %s is connected but acknowledged nothing for %.0f s (%u batch(es) wait): it "
             "holds inserts back while its rate limiter waits for the learner to sample (is the learner "
             "running, with this shard in its --shards?), or its disk is slow",
             c->cfg.actor_id, k->ep, s, unacked);
}

/* Sample side: a shard unreachable (the batches' kinds of wait, min_size and the rate
 * limiter, are the learner's to tell from the shards' info). */
static void watch_samples(sac_replay_client_t *c, conn_t *k, uint64_t now) {
  if (!strncmp(k->ep, "inproc://", 9))
    return;
  int kind = k->smp_up ? WAIT_NONE : WAIT_UNREACHABLE;
  uint64_t delay = k->smp_connected_once ? 0 : WAIT_WARN_NS;
  if (!wait_step(c, &k->smp_wait, &k->smp_wait_ns, &k->smp_warn_next_ns, kind, k->smp_down_ns, delay, now, k,
                 0))
    return;
  if (k->smp_connected_once && now - k->smp_wait_ns < 1000000000ull) {
    SAC_WARN("learner", "lost the connection to shard %s: reconnecting (the other shards serve meanwhile)",
             k->ep);
    return;
  }
  SAC_WARN(
      "learner",
      "cannot reach shard %s for %.0f s: is sac-replay running there, and does the learner's --shards list "
      "its sample endpoint? Retrying",
      k->ep, (double)(now - k->smp_wait_ns) * 1e-9);
}

/* Acks, reconnect resends, timed resends and retries of unsent slots, for every shard. */
static void service_inserts(sac_replay_client_t *c) {
  uint64_t now = sac_clock_ns();
  for (size_t i = 0; i < c->n; i++) {
    conn_t *k = &c->conns[i];
    if (!k->ins)
      continue;
    int acks = 0;
    for (int guard = 0; guard < 4096; guard++) {
      size_t len = 0;
      if (sac_net_recv(k->ins, c->rbuf, c->rcap, SAC_NET_DONTWAIT, &len, NULL) != 0)
        break;
      sac_wire_msg_t m;
      sac_wire_reason_t why;
      if (len >= c->rcap || sac_wire_decode(c->dec, c->rbuf, len, &c->lim, &m, &why) != 0 ||
          m.type != SAC_WIRE_ACK) {
        c->st.rejected_replies++;
        continue;
      }
      handle_ack(c, k, &m.u.ack);
      acks++;
    }
    int ev = sac_net_monitor_poll(k->ins_mon);
    track_up(ev, &k->ins_up, &k->ins_down_ns, now);
    if (ev & SAC_NET_EV_CONNECTED) {
      if (k->ins_connected_once) {
        c->st.reconnects++;
        resend_all(c, k);
      }
      k->ins_connected_once = 1;
    }
    if (acks && !(ev & SAC_NET_EV_DISCONNECTED)) {
      /* an answer proves the connection, whatever the monitor reported (or missed): a
       * later loss is then told as one ("lost the connection", at once) */
      k->ins_up = 1;
      k->ins_connected_once = 1;
    }
    watch_inserts(c, k, now);
    for (uint64_t q = k->lo; q < k->next_seq; q++) {
      wslot_t *s = &k->win[q % MAX_WINDOW];
      if (s->acked)
        continue;
      if (s->not_before_ns) { /* answered "not durable": after the shard's retry time, not before */
        if (now < s->not_before_ns)
          continue;
        s->not_before_ns = 0;
        send_slot(c, k, s);
        c->st.batches_resent++;
      } else if (s->unsent) {
        send_slot(c, k, s);
      } else if (now - s->sent_ns >
                 ((uint64_t)c->cfg.resend_ms * 1000000ull << (s->resends < 5 ? s->resends : 5))) {
        /* Timed resends back off (resend_ms, 2x, 4x ... 32x): a shard that holds inserts
         * back (its rate limiter parked it) reads nothing, and a resend every resend_ms
         * would only pile duplicates up in its queues. A reconnect resends at once. */
        send_slot(c, k, s);
        s->resends++;
        c->st.batches_resent++;
      }
    }
  }
}

static int wait_sockets(sac_replay_client_t *c, int use_ins, long timeout_ms) {
  sac_net_pollitem_t items[16];
  int n = 0;
  for (size_t i = 0; i < c->n && n < 16; i++) {
    void *s = use_ins ? c->conns[i].ins : c->conns[i].smp;
    if (s)
      items[n++] = (sac_net_pollitem_t){s, SAC_NET_POLLIN, 0};
  }
  if (n == 0 || c->n > 16) {
    /* more shards than one poll covers: short sleeps instead */
    sac_sleep_ns((uint64_t)(timeout_ms < 1 ? 1 : (timeout_ms > 2 ? 2 : timeout_ms)) * 1000000ull);
    return 0;
  }
  return sac_net_poll(items, n, timeout_ms);
}

int sac_replay_client_poll(sac_replay_client_t *c, int timeout_ms) {
  service_inserts(c);
  if (timeout_ms > 0) {
    wait_sockets(c, 1, timeout_ms);
    service_inserts(c);
  }
  return 0;
}

uint32_t sac_replay_client_unacked(const sac_replay_client_t *c) {
  uint32_t n = 0;
  for (size_t i = 0; i < c->n; i++) {
    const conn_t *k = &c->conns[i];
    for (uint64_t q = k->lo; q < k->next_seq; q++)
      n += !k->win[q % MAX_WINDOW].acked;
  }
  return n;
}

uint64_t sac_replay_client_unacked_rows(const sac_replay_client_t *c) {
  uint64_t n = 0;
  for (size_t i = 0; i < c->n; i++) {
    const conn_t *k = &c->conns[i];
    for (uint64_t q = k->lo; q < k->next_seq; q++)
      n += k->win[q % MAX_WINDOW].acked ? 0 : k->win[q % MAX_WINDOW].rows;
  }
  return n;
}

int sac_replay_client_flush(sac_replay_client_t *c, int timeout_ms) {
  uint64_t deadline = sac_clock_ns() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000000ull;
  for (;;) {
    service_inserts(c);
    if (sac_replay_client_unacked(c) == 0)
      return 0;
    uint64_t now = sac_clock_ns();
    if (now >= deadline)
      return SAC_ETIMEOUT;
    long left = (long)((deadline - now) / 1000000ull);
    wait_sockets(c, 1, left > 50 ? 50 : (left < 1 ? 1 : left));
  }
}

int sac_replay_client_insert(sac_replay_client_t *c, int shard, const sac_wire_transitions_t *t,
                             int timeout_ms) {
  if (!c->conns[0].ins)
    return SAC_ESTATE;
  size_t i = shard >= 0 ? (size_t)shard : c->rr_insert++ % c->n;
  if (i >= c->n)
    return SAC_EINVAL;
  conn_t *k = &c->conns[i];
  sac_wire_msg_t m = {.type = SAC_WIRE_TRANSITIONS};
  m.u.transitions = *t;
  sac_wire_transitions_t *v = &m.u.transitions;
  v->actor_id = c->cfg.actor_id;
  v->session = c->cfg.session;
  v->seq = k->next_seq;
  sac_wire_reason_t why;
  int rc = sac_wire_validate(c->dec, &m, &c->lim, &why);
  if (rc) {
    SAC_WARN("replay-client", "not sending an invalid batch: %s", sac_wire_reason_str(why));
    return rc;
  }
  uint64_t deadline = sac_clock_ns() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000000ull;
  for (;;) {
    service_inserts(c);
    if (k->next_seq - k->lo < window_of(c, k))
      break;
    uint64_t now = sac_clock_ns();
    if (now >= deadline) {
      c->st.insert_timeouts++;
      return SAC_ETIMEOUT;
    }
    long left = (long)((deadline - now) / 1000000ull);
    wait_sockets(c, 1, left > 20 ? 20 : (left < 1 ? 1 : left));
  }
  v->acked_through = k->lo - 1;
  size_t need = sac_wire_encoded_size(&m);
  if (need == 0)
    return SAC_EINVAL;
  if (need > c->cfg.max_msg_bytes)
    return SAC_ETOOBIG;
  wslot_t *s = &k->win[k->next_seq % MAX_WINDOW];
  if (s->cap < need) {
    size_t cap = need + need / 4 + 256;
    unsigned char *nb = realloc(s->buf, cap);
    if (!nb)
      return SAC_ENOMEM;
    s->buf = nb;
    s->cap = cap;
  }
  rc = sac_wire_encode(&m, s->buf, s->cap, &s->len);
  if (rc)
    return rc;
  s->seq = k->next_seq;
  s->rows = v->n;
  s->acked = 0;
  s->resends = 0;
  k->next_seq++;
  send_slot(c, k, s);
  s->first_sent_ns = s->sent_ns;
  c->st.batches_sent++;
  return 0;
}

/* ------------------------------------------------------------------ sampling */

static void request(sac_replay_client_t *c, conn_t *k) {
  sac_wire_msg_t m = {.type = SAC_WIRE_SAMPLE_REQUEST};
  const uint32_t nb = c->cfg.batches_per_request;
  m.u.sample_request = (sac_wire_sample_request_t){.request_id = ++c->request_id,
                                                   .batch_size = c->cfg.batch_size,
                                                   .beta = c->cfg.beta,
                                                   .timeout_ms = c->cfg.sample_timeout_ms,
                                                   .precision = c->cfg.sample_precision,
                                                   .batches = nb > 1 ? nb : 0};
  unsigned char buf[64];
  size_t len = 0;
  if (sac_wire_encode(&m, buf, sizeof buf, &len) != 0)
    return;
  if (sac_net_send(k->smp, buf, len, SAC_NET_DONTWAIT) == 0) {
    k->inflight++;
    k->last_request_ns = sac_clock_ns();
    c->st.sample_requests_sent++;
    if (k->npend == MAX_PEND) { /* the oldest was long lost: forget it */
      memmove(k->pend, k->pend + 1, (MAX_PEND - 1) * sizeof k->pend[0]);
      k->npend--;
    }
    k->pend[k->npend++] = m.u.sample_request.request_id;
  }
}

/* Removes id from the connection's requests in flight; 0, or -1 when it is not there. */
static int answered(conn_t *k, uint64_t id) {
  for (uint32_t j = 0; j < k->npend; j++)
    if (k->pend[j] == id) {
      memmove(k->pend + j, k->pend + j + 1, (k->npend - j - 1) * sizeof k->pend[0]);
      k->npend--;
      return 0;
    }
  return -1;
}

const char *sac_replay_client_reject_name(int kind) {
  if (kind >= 0 && kind < (int)SAC_WIRE_R_COUNT)
    return sac_wire_reason_name((sac_wire_reason_t)kind);
  if (kind == SAC_REPLAY_REJECT_REQUEST_ID)
    return "request_id";
  if (kind == SAC_REPLAY_REJECT_SHARD_ID)
    return "shard_id";
  return "unknown";
}

const char *sac_replay_client_fatal(const sac_replay_client_t *c) { return c->fatal; }

/* Counts a refused sample reply and logs it: the first of each kind at once, later ones
 * as one summary line per kind every REJECT_LOG_NS (a hostile or broken shard must not
 * flood the log). */
static void refuse(sac_replay_client_t *c, const conn_t *k, int kind, const char *detail) {
  c->st.rejected_replies++;
  c->st.rejected_by[kind]++;
  uint64_t now = sac_clock_ns();
  if (c->st.rejected_by[kind] == 1 || now - c->reject_log_ns[kind] >= REJECT_LOG_NS) {
    if (c->st.rejected_by[kind] == 1)
      SAC_WARN("replay-client", "refused a sample reply from %s (%s): %s; counted as reason \"%s\"", k->ep,
               sac_replay_client_reject_name(kind), detail, sac_replay_client_reject_name(kind));
    else
      SAC_WARN("replay-client",
               "refused %llu more sample replies (%s) since the last line, %llu in all; latest from %s: %s",
               (unsigned long long)c->reject_unlogged[kind] + 1, sac_replay_client_reject_name(kind),
               (unsigned long long)c->st.rejected_by[kind], k->ep, detail);
    c->reject_log_ns[kind] = now;
    c->reject_unlogged[kind] = 0;
  } else {
    c->reject_unlogged[kind]++;
  }
}

/* A shard that can never serve this client: SAC_ECONFIG with the reason logged. */
static int fatal(sac_replay_client_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fatal(sac_replay_client_t *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->fatal, sizeof c->fatal, fmt, ap);
  va_end(ap);
  SAC_ERROR("replay-client", "%s", c->fatal);
  return SAC_ECONFIG;
}

/* An accepted reply's obs/action/next_obs as f32: fp16 ones converted into the client's
 * buffers (the views of *b then point there); an f32 reply to an fp16 request (a shard
 * that predates the option) counted and logged once per shard. */
static int rows_to_f32(sac_replay_client_t *c, conn_t *k, sac_wire_sample_batch_t *b) {
  size_t no = (size_t)b->n * b->obs_dim, na = (size_t)b->n * b->act_dim;
  if (b->precision != SAC_WIRE_F16) {
    if (c->cfg.sample_precision != SAC_WIRE_F16)
      return 0;
    c->st.sample_precision_fallbacks++;
    if (k->f32_replies++ == 0)
      SAC_WARN("replay-client",
               "shard %u at %s answers fp16 sample requests in f32 (it predates --sample_precision): its "
               "replies take twice the bytes; upgrade the shard",
               b->shard_id, k->ep);
    return 0;
  }
  if (grow_f32(c, no, na) != 0)
    return SAC_ENOMEM;
  sac_wire_f16_to_f32_n(b->obs16, no, c->f32_obs);
  sac_wire_f16_to_f32_n(b->next_obs16, no, c->f32_next);
  sac_wire_f16_to_f32_n(b->action16, na, c->f32_act);
  b->obs = c->f32_obs;
  b->next_obs = c->f32_next;
  b->action = c->f32_act;
  c->st.samples_f16++;
  return 0;
}

/* Checks a decoded sample reply from connection i against what was asked. 0: a batch to
 * return; 1: refused or an error reply (counted); SAC_ECONFIG: the shard can never serve. */
static int check_reply(sac_replay_client_t *c, size_t i, const sac_wire_sample_batch_t *b) {
  conn_t *k = &c->conns[i];
  char d[384];
  /* sizes first: a shard of another environment says so even in its error replies */
  if ((c->cfg.obs_dim && b->obs_dim && b->obs_dim != c->cfg.obs_dim) ||
      (c->cfg.act_dim && b->act_dim && b->act_dim != c->cfg.act_dim)) {
    refuse(c, k, SAC_WIRE_R_DIMS, "observation or action size differs");
    return fatal(c,
                 "shard %u at %s stores observations of size %u and actions of size %u, but this learner's "
                 "environment has observations of size %u and actions of size %u: point --shards at shards "
                 "started for this environment (sac-replay --obs_dim %u --act_dim %u)",
                 b->shard_id, k->ep, b->obs_dim, b->act_dim, c->cfg.obs_dim, c->cfg.act_dim, c->cfg.obs_dim,
                 c->cfg.act_dim);
  }
  if (b->n == 0 && b->request_id == 0) {
    /* a shard's answer to something of ours it refused outright (a message it could not
     * decode carries no request id): not an answer to a sample request */
    c->st.shard_refusals++;
    uint64_t now = sac_clock_ns();
    if (c->st.shard_refusals == 1 || now - c->refusal_log_ns >= REJECT_LOG_NS) {
      SAC_WARN("replay-client", "shard %u at %s refused a message of this client: %s (%llu such replies)",
               b->shard_id, k->ep, b->error, (unsigned long long)c->st.shard_refusals);
      c->refusal_log_ns = now;
    }
    return 1;
  }
  if (answered(k, b->request_id) != 0) {
    snprintf(d, sizeof d, "request id %llu is not one this connection has in flight",
             (unsigned long long)b->request_id);
    refuse(c, k, SAC_REPLAY_REJECT_REQUEST_ID, d);
    return 1;
  }
  if (k->inflight)
    k->inflight--;
  if (b->n == 0) {
    if (strstr(b->error, "max_sample_batch"))
      return fatal(c,
                   "shard %u at %s refuses %u batch(es) of %u rows in one request (\"%s\"): raise its "
                   "--max_sample_batch or lower the learner's --batch_size or --batches_per_request",
                   b->shard_id, k->ep, c->cfg.batches_per_request, c->cfg.batch_size, b->error);
    if (strstr(b->error, "max_msg_bytes"))
      return fatal(c,
                   "shard %u at %s cannot send %u batch(es) of %u rows in one message (\"%s\"): raise its "
                   "--max_msg_bytes or lower the learner's --batches_per_request",
                   b->shard_id, k->ep, c->cfg.batches_per_request, c->cfg.batch_size, b->error);
    /* the shard could not serve (rate limiter timeout, empty, busy): ask again after a
     * short pause rather than in a tight loop */
    c->st.sample_errors++;
    snprintf(k->last_error, sizeof k->last_error, "%s", b->error);
    k->backoff_until_ns = k->last_reply_ns + 10000000ull;
    return 1;
  }
  const uint32_t want = c->cfg.batches_per_request, got = b->batches > 1 ? b->batches : 1;
  if ((uint64_t)b->n != (uint64_t)c->cfg.batch_size * got || (got != want && got != 1)) {
    snprintf(d, sizeof d, "%u rows in %u batch(es) where %u batch(es) of %u rows were asked for", b->n, got,
             want, c->cfg.batch_size);
    refuse(c, k, SAC_WIRE_R_ROWS, d);
    return 1;
  }
  if (got != want) { /* a shard that predates multi-batch replies: one batch, as asked of it */
    if (c->st.sample_single_batch_replies++ == 0)
      SAC_WARN("replay-client",
               "shard %u at %s answers requests for %u batches with one (it predates --batches_per_request): "
               "more messages per batch; upgrade the shard",
               b->shard_id, k->ep, want);
  }
  if (c->shard_map[b->shard_id] >= 0 && (size_t)c->shard_map[b->shard_id] != i) {
    snprintf(d, sizeof d, "shard id %u, which %.255s already has (two shards with one --shard_id?)",
             b->shard_id, c->conns[c->shard_map[b->shard_id]].ep);
    refuse(c, k, SAC_REPLAY_REJECT_SHARD_ID, d);
    return 1;
  }
  k->last_batch_ns = k->last_reply_ns;
  k->last_error[0] = '\0';
  return 0;
}

static void top_up(sac_replay_client_t *c, uint64_t now) {
  /* a request unanswered this long was lost (shard died or restarted) */
  uint64_t lost_after = ((uint64_t)c->cfg.sample_timeout_ms + 2000ull) * 1000000ull;
  for (size_t i = 0; i < c->n; i++) {
    conn_t *k = &c->conns[i];
    int ev = sac_net_monitor_poll(k->smp_mon);
    track_up(ev, &k->smp_up, &k->smp_down_ns, now);
    watch_samples(c, k, now);
    if (ev & SAC_NET_EV_CONNECTED) {
      if (k->smp_connected_once && k->inflight) {
        c->st.sample_requests_reissued += k->inflight;
        k->inflight = 0;
      }
      k->smp_connected_once = 1;
    }
    uint64_t last = k->last_reply_ns > k->last_request_ns ? k->last_reply_ns : k->last_request_ns;
    if (k->inflight && now - last > lost_after) {
      c->st.sample_requests_reissued += k->inflight;
      k->inflight = 0;
    }
    while (k->inflight < c->cfg.prefetch && now >= k->backoff_until_ns) {
      uint32_t before = k->inflight;
      request(c, k);
      if (k->inflight == before)
        break;
    }
  }
}

/* A reply refused before it could be read as a batch for us: counted, logged, and most
 * likely the answer to one of ours, spoilt: ask again after a short pause. */
static void spoilt_reply(sac_replay_client_t *c, conn_t *k, sac_wire_reason_t why, size_t len) {
  char d[160];
  snprintf(d, sizeof d, "%s (%zu bytes)", sac_wire_reason_str(why), len);
  refuse(c, k, why, d);
  if (k->inflight)
    k->inflight--;
  k->backoff_until_ns = k->last_reply_ns + 10000000ull;
}

/* The direct path (dst): a reply in the common encoding of exactly the batch asked for is
 * copied from the message into dst, checked as it is copied (common/wire_view.h). 0 (a
 * batch in dst, its header in *b), 1 (refused: counted) or SAC_EAGAIN (another kind of
 * reply: decode it). */
/* Batch j of the reply viewed in v (batch_size rows), as a view of its own. */
static sac_wire_sample_view_t view_slice(const sac_wire_sample_view_t *v, uint32_t rows, uint32_t j) {
  sac_wire_sample_view_t s = *v;
  const size_t r = (size_t)rows * j;
  s.n = rows, s.batches = 0;
  s.obs += r * v->obs_dim * 4, s.next_obs += r * v->obs_dim * 4, s.action += r * v->act_dim * 4;
  s.reward += r * 4, s.terminated += r * 4, s.weights += r * 4, s.indices += r * 8;
  return s;
}

static int copy_reply(sac_replay_client_t *c, conn_t *k, const void *data, size_t len,
                      const sac_wire_sample_dst_t *dst, sac_wire_sample_batch_t *b,
                      sac_wire_sample_view_t *whole) {
  sac_wire_sample_view_t v;
  const uint32_t want = c->cfg.batches_per_request;
  if (len >= c->rcap || sac_wire_sample_view(data, len, &c->slim, &v) != 0 || v.obs_dim != c->cfg.obs_dim ||
      v.act_dim != c->cfg.act_dim)
    return SAC_EAGAIN; /* other sizes: decoded, and check_reply says what is wrong */
  const uint32_t got = v.batches > 1 ? v.batches : 1;
  if ((got != want && got != 1) || (uint64_t)v.n != (uint64_t)c->cfg.batch_size * got)
    return SAC_EAGAIN;
  sac_wire_reason_t why;
  const sac_wire_sample_view_t first = view_slice(&v, c->cfg.batch_size, 0);
  if (sac_wire_sample_copy(&first, &c->slim, dst, &why) != 0) {
    spoilt_reply(c, k, why, len);
    return 1;
  }
  *whole = v;
  *b = (sac_wire_sample_batch_t){.request_id = v.request_id,
                                 .n = v.n,
                                 .batches = v.batches,
                                 .obs_dim = v.obs_dim,
                                 .act_dim = v.act_dim,
                                 .shard_id = v.shard_id,
                                 .obs = dst->obs,
                                 .action = dst->action,
                                 .reward = dst->reward,
                                 .terminated = dst->terminated,
                                 .next_obs = dst->next_obs,
                                 .indices = dst->indices,
                                 .weights = dst->weights,
                                 .error = ""};
  return 0;
}

/* The ordinary path: the reply decoded into the decoder's memory. 0 (a message in *m),
 * 1 (refused: counted). */
static int decode_reply(sac_replay_client_t *c, conn_t *k, const void *data, size_t len, sac_wire_msg_t *m) {
  sac_wire_reason_t why = SAC_WIRE_R_TOO_BIG;
  if (len >= c->rcap || sac_wire_decode(c->dec, data, len, &c->slim, m, &why) != 0) {
    spoilt_reply(c, k, why, len);
    return 1;
  }
  if (m->type != SAC_WIRE_SAMPLE_BATCH) {
    refuse(c, k, SAC_WIRE_R_UNEXPECTED, "a message other than a SampleBatch");
    return 1;
  }
  return 0;
}

/* A decoded batch into dst (the direct path's fallback for replies of another encoding). */
static void copy_decoded(const sac_wire_sample_batch_t *b, const sac_wire_sample_dst_t *dst) {
  const size_t n = b->n, no = n * b->obs_dim * sizeof(float), na = n * b->act_dim * sizeof(float);
  float *const d[] = {dst->obs, dst->next_obs, dst->action, dst->reward, dst->terminated, dst->weights};
  const float *const s[] = {b->obs, b->next_obs, b->action, b->reward, b->terminated, b->weights};
  const size_t bytes[] = {no, no, na, n * sizeof(float), n * sizeof(float), n * sizeof(float)};
  for (int i = 0; i < 6; i++)
    if (d[i])
      memcpy(d[i], s[i], bytes[i]);
  memcpy(dst->indices, b->indices, n * sizeof(uint64_t));
}

/* Batch j of a decoded (f32) reply of batches of `rows` rows, its arrays into b's. */
static sac_wire_sample_batch_t batch_slice(const sac_wire_sample_batch_t *b, uint32_t rows, uint32_t j) {
  sac_wire_sample_batch_t s = *b;
  const size_t r = (size_t)rows * j;
  s.n = rows, s.batches = 0;
  s.obs += r * b->obs_dim, s.next_obs += r * b->obs_dim, s.action += r * b->act_dim;
  s.reward += r, s.terminated += r, s.weights += r, s.indices += r;
  return s;
}

/* The rows of a decoded multi-batch reply (f32 by now) copied out of the decoder's memory,
 * which the next decode or info request reuses, into the held arrays; b's arrays then
 * point there. 0 or SAC_ENOMEM. */
static int hold_decoded(sac_replay_client_t *c, sac_wire_sample_batch_t *b) {
  held_t *h = &c->held;
  const size_t n = b->n, no = n * b->obs_dim, na = n * b->act_dim;
  if (n > h->cap_rows || !h->obs) {
    float **f[] = {&h->obs, &h->next_obs, &h->act, &h->rew, &h->term, &h->w};
    const size_t len[] = {no, no, na, n, n, n};
    for (int i = 0; i < 6; i++) {
      float *p = realloc(*f[i], len[i] * sizeof(float));
      if (!p)
        return SAC_ENOMEM;
      *f[i] = p;
    }
    uint64_t *x = realloc(h->idx, n * sizeof *x);
    if (!x)
      return SAC_ENOMEM;
    h->idx = x;
    h->cap_rows = n; /* the dims are the client's own: a reply of others was refused */
  }
  const sac_wire_sample_dst_t to = {h->obs, h->next_obs, h->act, h->rew, h->term, h->w, h->idx};
  copy_decoded(b, &to);
  b->obs = h->obs, b->next_obs = h->next_obs, b->action = h->act;
  b->reward = h->rew, b->terminated = h->term, b->weights = h->w, b->indices = h->idx;
  return 0;
}

static void release_held(sac_replay_client_t *c) {
  if (c->held.count && c->held.direct)
    sac_net_msg_close(&c->held.msg);
  c->held.count = c->held.next = 0;
}

/* What sample returns for batch b: dst's arrays (the direct path) or b's. */
static void batch_out(sac_replay_client_t *c, size_t i, const sac_wire_sample_batch_t *b,
                      const sac_wire_sample_dst_t *dst, sac_replay_batch_t *out) {
  *out = (sac_replay_batch_t){.n = c->cfg.batch_size,
                              .obs_dim = b->obs_dim,
                              .act_dim = b->act_dim,
                              .shard_id = b->shard_id,
                              .obs = dst ? dst->obs : b->obs,
                              .action = dst ? dst->action : b->action,
                              .reward = dst ? dst->reward : b->reward,
                              .terminated = dst ? dst->terminated : b->terminated,
                              .next_obs = dst ? dst->next_obs : b->next_obs,
                              .weights = dst ? dst->weights : b->weights,
                              .indices = dst ? dst->indices : b->indices};
  c->rr_sample = i + 1;
  c->st.samples_received++;
}

/* The next batch of the held reply: 0 (in *out), or 1 (it failed its checks as it was
 * copied: refused and counted, and the rest of the reply dropped). */
static int take_held(sac_replay_client_t *c, const sac_wire_sample_dst_t *dst, int own,
                     sac_replay_batch_t *out) {
  held_t *h = &c->held;
  const uint32_t j = h->next++;
  conn_t *k = &c->conns[h->conn];
  sac_wire_sample_batch_t one;
  if (h->direct) {
    const sac_wire_sample_view_t v = view_slice(&h->v, c->cfg.batch_size, j);
    sac_wire_reason_t why;
    if (!dst || sac_wire_sample_copy(&v, &c->slim, dst, &why) != 0) {
      if (dst) {
        char d[160];
        snprintf(d, sizeof d, "%s (batch %u of %u of a reply)", sac_wire_reason_str(why), j + 1, h->count);
        refuse(c, k, why, d);
      }
      release_held(c);
      return 1;
    }
    one = (sac_wire_sample_batch_t){
        .n = v.n, .obs_dim = v.obs_dim, .act_dim = v.act_dim, .shard_id = v.shard_id};
    c->st.samples_direct += !own;
  } else {
    one = batch_slice(&h->b, c->cfg.batch_size, j);
    if (dst)
      copy_decoded(&one, dst);
  }
  batch_out(c, h->conn, &one, dst, out);
  if (h->next >= h->count)
    release_held(c);
  return 0;
}

/* Connection i's next reply, if one has come: 0 (a batch for us, in *out; with several in
 * the reply, the rest held for the next samples), 1 (none, or refused), or SAC_ECONFIG
 * (the shard can never serve us). */
static int take_reply(sac_replay_client_t *c, size_t i, const sac_wire_sample_dst_t *dst, int own,
                      sac_replay_batch_t *out) {
  conn_t *k = &c->conns[i];
  /* read straight from ZeroMQ's message: decoded into the decoder's own memory, or (dst)
   * its first batch copied once into dst */
  size_t len = 0;
  const void *data = NULL;
  sac_net_msg_t msg;
  if (sac_net_recv_msg(k->smp, &msg, SAC_NET_DONTWAIT, &data, &len) != 0)
    return 1;
  k->last_reply_ns = sac_clock_ns();
  k->smp_up = 1; /* an answer proves the connection, whatever the monitor reported (or missed) */
  sac_wire_msg_t m;
  sac_wire_sample_batch_t *b = &m.u.sample_batch;
  sac_wire_sample_view_t whole;
  int rc = dst ? copy_reply(c, k, data, len, dst, b, &whole) : SAC_EAGAIN;
  const int decoded = rc == SAC_EAGAIN;
  if (decoded)
    rc = decode_reply(c, k, data, len, &m);
  if (rc == 0)
    rc = check_reply(c, i, b);
  const uint32_t nb = rc == 0 && b->batches > 1 ? b->batches : 1;
  if (rc == 0 &&
      rows_to_f32(c, k, b) != 0) /* fp16 rows (decoded only) to f32; an f32 answer to fp16 counted */
    rc = SAC_ENOMEM;
  if (rc == 0 && decoded && nb > 1 && hold_decoded(c, b) != 0)
    rc = SAC_ENOMEM;
  if (rc != 0 || decoded || nb == 1)
    sac_net_msg_close(&msg);
  if (rc)
    return rc;
  if (nb > 1) {
    c->held = (held_t){.next = 1,
                       .count = nb,
                       .conn = i,
                       .direct = !decoded,
                       .v = whole,
                       .b = *b,
                       .obs = c->held.obs,
                       .act = c->held.act,
                       .next_obs = c->held.next_obs,
                       .rew = c->held.rew,
                       .term = c->held.term,
                       .w = c->held.w,
                       .idx = c->held.idx,
                       .cap_rows = c->held.cap_rows};
    if (!decoded)
      sac_net_msg_move(&c->held.msg, &msg);
  }
  sac_wire_sample_batch_t first = decoded ? batch_slice(b, c->cfg.batch_size, 0) : *b;
  if (dst && decoded)
    copy_decoded(&first, dst);
  request(c, k); /* keep `prefetch` requests in flight */
  c->shard_map[b->shard_id] = (int16_t)i;
  batch_out(c, i, &first, dst, out);
  c->st.sample_replies++;
  if (dst && !own)
    c->st.samples_direct += !decoded;
  return 0;
}

/* dst: where a reply in the common encoding is copied (the caller's stage, or with own the
 * client's own batch); NULL: decoded. samples_direct counts the copies into a stage. */
static int sample(sac_replay_client_t *c, int timeout_ms, const sac_wire_sample_dst_t *dst, int own,
                  sac_replay_batch_t *out) {
  if (!c->conns[0].smp)
    return SAC_ESTATE;
  if (c->held.count && take_held(c, dst, own, out) == 0)
    return 0;
  uint64_t deadline = sac_clock_ns() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000000ull;
  for (;;) {
    uint64_t now = sac_clock_ns();
    top_up(c, now);
    for (size_t j = 0; j < c->n; j++) {
      int rc = take_reply(c, (c->rr_sample + j) % c->n, dst, own, out);
      if (rc <= 0)
        return rc;
    }
    now = sac_clock_ns();
    if (now >= deadline)
      return SAC_ETIMEOUT;
    long left = (long)((deadline - now) / 1000000ull);
    wait_sockets(c, 0, left > 100 ? 100 : (left < 1 ? 1 : left));
  }
}

int sac_replay_client_sample(sac_replay_client_t *c, int timeout_ms, sac_replay_batch_t *out) {
  if (!c->own)
    return sample(c, timeout_ms, NULL, 0, out);
  const size_t B = c->cfg.batch_size, O = c->cfg.obs_dim, A = c->cfg.act_dim;
  float *p = c->own;
  const sac_wire_sample_dst_t dst = {
      p,      p + B * O, p + 2 * B * O, p + B * (2 * O + A), p + B * (2 * O + A + 1), p + B * (2 * O + A + 2),
      c->sidx};
  return sample(c, timeout_ms, &dst, 1, out);
}

int sac_replay_client_sample_into(sac_replay_client_t *c, int timeout_ms, const sac_replay_stage_t *stage,
                                  sac_replay_batch_t *out) {
  if (!stage->obs || !stage->next_obs || !stage->action || !stage->reward || !stage->terminated ||
      !c->cfg.obs_dim || !c->cfg.act_dim || !c->sidx)
    return SAC_EINVAL;
  sac_wire_sample_dst_t dst = {stage->obs,        stage->next_obs, stage->action, stage->reward,
                               stage->terminated, stage->weights,  c->sidx};
  return sample(c, timeout_ms, &dst, 0, out);
}

static int grow_updates(conn_t *k, size_t need) {
  if (k->pcap >= need)
    return 0;
  size_t cap = need < 1024 ? 1024 : need;
  uint64_t *ni = realloc(k->pidx, cap * sizeof *ni);
  if (!ni)
    return SAC_ENOMEM;
  k->pidx = ni;
  float *nv = realloc(k->pval, cap * sizeof *nv);
  if (!nv)
    return SAC_ENOMEM;
  k->pval = nv;
  k->pcap = cap;
  return 0;
}

int sac_replay_client_update_priorities(sac_replay_client_t *c, size_t n, const uint64_t *indices,
                                        const float *priorities) {
  for (size_t i = 0; i < n; i++)
    if (!isfinite(priorities[i]) || priorities[i] < 0.0f)
      return SAC_EINVAL;
  for (size_t i = 0; i < c->n; i++) {
    c->conns[i].pn = 0;
    if (grow_updates(&c->conns[i], n) != 0)
      return SAC_ENOMEM;
  }
  for (size_t i = 0; i < n; i++) {
    int16_t to = c->shard_map[SAC_WIRE_INDEX_SHARD(indices[i])];
    if (to < 0) {
      c->st.priority_updates_dropped++;
      continue;
    }
    conn_t *k = &c->conns[to];
    k->pidx[k->pn] = indices[i];
    k->pval[k->pn] = priorities[i];
    k->pn++;
  }
  int rc = 0;
  for (size_t i = 0; i < c->n; i++) {
    conn_t *k = &c->conns[i];
    if (!k->pn || !k->smp)
      continue;
    sac_wire_msg_t m = {.type = SAC_WIRE_PRIORITY_UPDATE};
    m.u.priority_update = (sac_wire_priority_update_t){(uint32_t)k->pn, k->pidx, k->pval};
    size_t need = sac_wire_encoded_size(&m);
    if (need > c->scap) {
      unsigned char *nb = realloc(c->sbuf, need);
      if (!nb)
        return SAC_ENOMEM;
      c->sbuf = nb;
      c->scap = need;
    }
    size_t len = 0;
    if (sac_wire_encode(&m, c->sbuf, c->scap, &len) != 0 ||
        sac_net_send(k->smp, c->sbuf, len, SAC_NET_DONTWAIT) != 0) {
      c->st.priority_updates_dropped += k->pn;
      rc = SAC_EAGAIN;
      continue;
    }
    c->st.priority_updates_sent += k->pn;
  }
  return rc;
}

int sac_replay_client_info_cached(sac_replay_client_t *c, size_t shard, int refresh_ms,
                                  sac_wire_shard_info_t *out, uint64_t *age_ns) {
  if (shard >= c->n)
    return SAC_EINVAL;
  conn_t *k = &c->conns[shard];
  uint64_t now = sac_clock_ns();
  size_t rlen = 0;
  while (sac_net_recv(k->info, c->rbuf, c->rcap, SAC_NET_DONTWAIT, &rlen, NULL) == 0) {
    sac_wire_msg_t r;
    if (rlen < c->rcap && sac_wire_decode(c->dec, c->rbuf, rlen, NULL, &r, NULL) == 0 &&
        r.type == SAC_WIRE_SHARD_INFO) {
      k->info_last = r.u.shard_info;
      k->info_valid = 1;
      k->info_last.shard_id = r.u.shard_info.shard_id;
      k->last_reply_ns = now;
    }
  }
  if (now - k->info_sent_ns >= (uint64_t)refresh_ms * 1000000ull) {
    sac_wire_msg_t m = {.type = SAC_WIRE_INFO_REQUEST};
    unsigned char buf[32];
    size_t len = 0;
    if (sac_wire_encode(&m, buf, sizeof buf, &len) == 0 &&
        sac_net_send(k->info, buf, len, SAC_NET_DONTWAIT) == 0)
      k->info_sent_ns = now;
  }
  if (!k->info_valid)
    return SAC_EAGAIN;
  *out = k->info_last;
  if (age_ns)
    *age_ns = now - k->last_reply_ns;
  return 0;
}

int sac_replay_client_info(sac_replay_client_t *c, size_t shard, int timeout_ms, sac_wire_shard_info_t *out) {
  if (shard >= c->n)
    return SAC_EINVAL;
  conn_t *k = &c->conns[shard];
  sac_wire_msg_t m = {.type = SAC_WIRE_INFO_REQUEST};
  unsigned char buf[32];
  size_t len = 0;
  if (sac_wire_encode(&m, buf, sizeof buf, &len) != 0)
    return SAC_EINVAL;
  uint64_t deadline = sac_clock_ns() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000000ull;
  uint64_t resend_at = 0;
  for (;;) {
    uint64_t now = sac_clock_ns();
    if (now >= resend_at) {
      sac_net_send(k->info, buf, len, SAC_NET_DONTWAIT);
      resend_at = now + 500000000ull;
    }
    size_t rlen = 0;
    while (sac_net_recv(k->info, c->rbuf, c->rcap, SAC_NET_DONTWAIT, &rlen, NULL) == 0) {
      sac_wire_msg_t r;
      if (rlen < c->rcap && sac_wire_decode(c->dec, c->rbuf, rlen, NULL, &r, NULL) == 0 &&
          r.type == SAC_WIRE_SHARD_INFO) {
        *out = r.u.shard_info;
        return 0;
      }
    }
    if (now >= deadline)
      return SAC_ETIMEOUT;
    sac_net_pollitem_t it = {k->info, SAC_NET_POLLIN, 0};
    long left = (long)((deadline - now) / 1000000ull);
    sac_net_poll(&it, 1, left > 100 ? 100 : (left < 1 ? 1 : left));
  }
}

int sac_replay_client_shard_state(const sac_replay_client_t *c, size_t shard, sac_replay_shard_state_t *out) {
  if (shard >= c->n)
    return SAC_EINVAL;
  const conn_t *k = &c->conns[shard];
  const int inserting = k->ins != NULL;
  uint64_t now = sac_clock_ns();
  memset(out, 0, sizeof *out);
  out->endpoint = k->ep;
  out->connected = inserting ? k->ins_up : k->smp_up;
  uint64_t down = inserting ? k->ins_down_ns : k->smp_down_ns;
  out->down_s = out->connected ? 0.0 : (double)(now - down) * 1e-9;
  out->unacked = conn_unacked(k);
  out->ack_wait_s = out->unacked ? (double)(now - (k->last_ack_ns > k->win[k->lo % MAX_WINDOW].first_sent_ns
                                                       ? k->last_ack_ns
                                                       : k->win[k->lo % MAX_WINDOW].first_sent_ns)) *
                                       1e-9
                                 : 0.0;
  out->batch_wait_s = (double)(now - k->last_batch_ns) * 1e-9;
  out->last_error = k->last_error;
  return 0;
}
