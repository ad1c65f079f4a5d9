/* The zmq collective (see collective.h): a star around rank 0 over one ROUTER (rank 0,
 * bound) and one DEALER per other rank (connected). It is the simplest design that is
 * deterministic: rank 0 sums every contribution in rank order and everyone receives the
 * same bytes. Its traffic is 2 (L - 1) buffers per all-reduce through rank 0, which is
 * fine for SAC's few hundred kilobytes of gradients on a few learners, and not meant for
 * more.
 *
 * A message is 2 frames (a ROUTER adds the peer's identity in front):
 *   header (24 bytes, little-endian): u32 magic "SDP1" | u16 type | u16 rank | u32 seq
 *                                     | u32 root | u64 payload bytes
 *   payload (may be empty)
 * Types: HELLO (rank -> 0, payload: the caller's hello), WELCOME and REFUSE (0 -> rank,
 * REFUSE's payload: the reason), REDUCE (rank -> 0: its floats), RESULT (0 -> rank: the
 * mean), BCAST (root -> 0 -> ranks), ABORT (either way, payload: the reason). seq counts
 * operations (the handshake is 0), so a message of another operation is a protocol error.
 * Junk (a bad header, an unknown identity) is logged and dropped. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/le.h"
#include "common/log.h"
#include "common/net.h"
#include "learner/collective.h"

#define MAGIC 0x31504453u /* "SDP1" */
#define HDR 24
#define MAX_HELLO 65536
#define IDENT_MAX 256

enum { M_HELLO = 1, M_WELCOME, M_REFUSE, M_REDUCE, M_RESULT, M_BCAST, M_ABORT };

typedef struct {
  sac_net_ctx_t *ctx;
  void *sock;
  int rank, size, timeout_ms;
  uint32_t seq;
  int failed;
  char hint[256];
  size_t max_bytes;
  /* rank 0: the identity of each rank's connection */
  unsigned char ident[SAC_COLL_MAX_RANKS][IDENT_MAX];
  size_t ident_len[SAC_COLL_MAX_RANKS];
  int joined[SAC_COLL_MAX_RANKS];
  int got[SAC_COLL_MAX_RANKS];
  /* rank 0: (size - 1) contributions; everyone: the packed segments. Grown when an
   * operation is larger than every one before it; otherwise nothing is allocated. */
  float *scratch, *pack;
  size_t scratch_cap, pack_cap; /* floats */
  char text[MAX_HELLO];         /* hello and reason payloads */
} zc_t;

typedef struct {
  int type, rank;
  uint32_t seq, root;
  uint64_t len;
  int from; /* rank 0: the sender's rank by its identity, -1 when unknown */
  unsigned char ident[IDENT_MAX];
  size_t ident_len;
} msg_t;

/* Latches the failure and logs it (with the hint once operations began). Returns code. */
static int fail(zc_t *z, int code, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  z->failed = 1;
  /* the hint is for a run that broke, not for a start that was refused (seq 0) */
  SAC_ERROR("dp", "data-parallel: %s%s", msg, z->seq ? z->hint : "");
  return code;
}

/* Rank 0 could not hand rank `r` its part of an operation: with ROUTER_MANDATORY that means
 * rank r's connection is gone (it died between sending its share and receiving the result). */
static int lost(zc_t *z, int rc, int r, const char *what) {
  if (rc == SAC_ENET)
    return fail(z, rc, "rank %d is gone: its connection closed before the %s could be sent to it", r, what);
  return fail(z, rc, "cannot send the %s to rank %d: %s", what, r, sac_strerror(rc));
}

/* Sends one message (to rank `to`'s identity on rank 0). 0 or a SAC_E* code. */
static int send_msg(zc_t *z, int to, int type, uint32_t root, const void *payload, size_t len, int flags) {
  unsigned char h[HDR];
  sac_le_put32(h, MAGIC);
  h[4] = (unsigned char)type, h[5] = 0;
  h[6] = (unsigned char)(z->rank & 0xff), h[7] = (unsigned char)(z->rank >> 8);
  sac_le_put32(h + 8, z->seq);
  sac_le_put32(h + 12, root);
  sac_le_put64(h + 16, (uint64_t)len);
  int rc = 0;
  if (z->rank == 0)
    rc = sac_net_send(z->sock, z->ident[to], z->ident_len[to], SAC_NET_SNDMORE | flags);
  if (rc == 0)
    rc = sac_net_send(z->sock, h, HDR, SAC_NET_SNDMORE | flags);
  if (rc == 0)
    rc = sac_net_send(z->sock, payload, len, flags);
  return rc;
}

/* Rank 0: a reply to an identity that is not (yet) a rank. */
static void send_to_ident(zc_t *z, const msg_t *m, int type, const char *text) {
  unsigned char h[HDR];
  size_t len = strlen(text);
  sac_le_put32(h, MAGIC);
  h[4] = (unsigned char)type, h[5] = 0, h[6] = 0, h[7] = 0;
  sac_le_put32(h + 8, z->seq);
  sac_le_put32(h + 12, 0);
  sac_le_put64(h + 16, (uint64_t)len);
  if (sac_net_send(z->sock, m->ident, m->ident_len, SAC_NET_SNDMORE | SAC_NET_DONTWAIT) == 0 &&
      sac_net_send(z->sock, h, HDR, SAC_NET_SNDMORE | SAC_NET_DONTWAIT) == 0)
    sac_net_send(z->sock, text, len, SAC_NET_DONTWAIT);
}

/* Waits until deadline for the next message and reads its header; its payload frame is
 * left to take_payload or drop_payload. 0, SAC_ETIMEOUT or a socket error. */
static int next_msg(zc_t *z, double deadline, msg_t *m) {
  for (;;) {
    double left = deadline - sac_clock_s();
    if (left <= 0)
      return SAC_ETIMEOUT;
    sac_net_pollitem_t it = {z->sock, SAC_NET_POLLIN, 0};
    int rc = sac_net_poll(&it, 1, (long)(left * 1000.0) + 1);
    if (rc == 0 || rc == SAC_EINTR) /* a signal: the caller sees its flag later */
      continue;
    if (rc < 0)
      return rc;
    size_t len;
    int more = 0;
    m->ident_len = 0;
    m->from = z->rank == 0 ? -1 : 0;
    if (z->rank == 0) {
      rc = sac_net_recv(z->sock, m->ident, sizeof m->ident, SAC_NET_DONTWAIT, &len, &more);
      if (rc == SAC_EAGAIN || rc == SAC_EINTR)
        continue;
      if (rc)
        return rc;
      if (!more || len > sizeof m->ident) {
        if (more)
          sac_net_drain_frames(z->sock);
        continue;
      }
      m->ident_len = len;
    }
    unsigned char h[HDR];
    do
      rc = sac_net_recv(z->sock, h, sizeof h, 0, &len, &more);
    while (rc == SAC_EINTR);
    if (rc)
      return rc;
    if (len != HDR || !more || sac_le_get32(h) != MAGIC || h[4] < M_HELLO || h[4] > M_ABORT) {
      if (more)
        sac_net_drain_frames(z->sock);
      SAC_WARN("dp", "data-parallel: dropped a message that is not ours (%zu-byte header)", len);
      continue;
    }
    m->type = h[4];
    m->rank = h[6] | h[7] << 8;
    m->seq = sac_le_get32(h + 8);
    m->root = sac_le_get32(h + 12);
    m->len = sac_le_get64(h + 16);
    if (z->rank == 0)
      for (int r = 1; r < z->size; r++)
        if (z->joined[r] && z->ident_len[r] == m->ident_len &&
            memcmp(z->ident[r], m->ident, m->ident_len) == 0)
          m->from = r;
    return 0;
  }
}

/* Reads the pending payload into dst[cap]; *len is its real size. 0, SAC_EPROTO (larger
 * than cap or more frames) or a socket error. */
static int take_payload(zc_t *z, void *dst, size_t cap, size_t *len) {
  int more = 0, rc;
  do
    rc = sac_net_recv(z->sock, dst, cap, 0, len, &more);
  while (rc == SAC_EINTR);
  if (rc)
    return rc;
  if (more) {
    sac_net_drain_frames(z->sock);
    return SAC_EPROTO;
  }
  return *len > cap ? SAC_EPROTO : 0;
}

static void drop_payload(zc_t *z) { sac_net_drain_frames(z->sock); }

/* An ABORT's reason as text (into z->text). */
static const char *abort_text(zc_t *z) {
  size_t len = 0;
  if (take_payload(z, z->text, sizeof z->text - 1, &len) != 0)
    len = 0;
  z->text[len < sizeof z->text ? len : sizeof z->text - 1] = '\0';
  return z->text;
}

/* Rank 0, during an operation: handles what is not the awaited message. Returns 0 when
 * the message was dealt with (keep waiting), or the failure. */
static int stray(zc_t *z, const msg_t *m, const char *op) {
  if (m->type == M_HELLO) { /* a rank restarted alone: the others are mid-run */
    drop_payload(z);
    SAC_WARN("dp", "data-parallel: refused a hello from rank %d: the run is under way", m->rank);
    send_to_ident(z, m, M_REFUSE, "the run is under way without this rank; restart all ranks together");
    return 0;
  }
  if (m->from < 0) {
    drop_payload(z);
    SAC_WARN("dp", "data-parallel: dropped a message from an unknown peer (type %d, rank %d)", m->type,
             m->rank);
    return 0;
  }
  if (m->type == M_ABORT)
    return fail(z, SAC_ENET, "rank %d aborted (%s) during %s", m->from, abort_text(z), op);
  drop_payload(z);
  return fail(z, SAC_EPROTO, "rank %d sent message type %d (operation %u) during %s (operation %u)", m->from,
              m->type, m->seq, op, z->seq);
}

static int grow(float **p, size_t *cap, size_t n) {
  if (n <= *cap)
    return 0;
  float *q = realloc(*p, n * sizeof(float));
  if (!q)
    return SAC_ENOMEM;
  *p = q;
  *cap = n;
  return 0;
}

static const char *op_name(int k) { return k == 0 ? "barrier" : "all-reduce"; }

static int zc_allreduce(sac_coll_t *c, float *const *bufs, const size_t *ns, int k) {
  zc_t *z = c->impl;
  if (z->failed)
    return SAC_ESTATE;
  size_t total = 0;
  for (int i = 0; i < k; i++)
    total += ns[i];
  if (total * sizeof(float) > z->max_bytes)
    return fail(z, SAC_ETOOBIG, "%s of %zu floats is over the limit of %zu bytes", op_name(k), total,
                z->max_bytes);
  z->seq++;
  const double deadline = sac_clock_s() + z->timeout_ms / 1000.0;
  msg_t m;
  int rc;
  if (z->size == 1)
    return 0;
  if (z->rank == 0) {
    if (grow(&z->scratch, &z->scratch_cap, total * (size_t)(z->size - 1)) ||
        grow(&z->pack, &z->pack_cap, total))
      return fail(z, SAC_ENOMEM, "out of memory for a %s of %zu floats", op_name(k), total);
    memset(z->got, 0, sizeof z->got);
    for (int n_got = 0; n_got < z->size - 1;) {
      if ((rc = next_msg(z, deadline, &m)) != 0) {
        if (rc != SAC_ETIMEOUT)
          return fail(z, rc, "%s: %s", op_name(k), sac_strerror(rc));
        int r = 1;
        while (r < z->size && z->got[r])
          r++;
        return fail(z, SAC_ETIMEOUT, "rank %d did not answer %s within %d ms", r, op_name(k), z->timeout_ms);
      }
      if (m.type != M_REDUCE || m.from < 0 || m.seq != z->seq || z->got[m.from]) {
        if ((rc = stray(z, &m, op_name(k))) != 0)
          return rc;
        continue;
      }
      size_t len;
      float *dst = z->scratch + (size_t)(m.from - 1) * total;
      if ((rc = take_payload(z, dst, total * sizeof(float), &len)) != 0 || len != total * sizeof(float))
        return fail(z, SAC_EPROTO, "rank %d sent %zu bytes to a %s of %zu", m.from, len, op_name(k),
                    total * sizeof(float));
      z->got[m.from] = 1;
      n_got++;
    }
    /* the sum in rank order, then the mean: the same bits for everyone */
    const float div = (float)z->size;
    size_t off = 0;
    for (int i = 0; i < k; i++) {
      float *b = bufs[i];
      const size_t n = ns[i];
      for (int r = 1; r < z->size; r++) {
        const float *s = z->scratch + (size_t)(r - 1) * total + off;
        for (size_t j = 0; j < n; j++)
          b[j] += s[j];
      }
      for (size_t j = 0; j < n; j++)
        b[j] /= div;
      memcpy(z->pack + off, b, n * sizeof(float));
      off += n;
    }
    for (int r = 1; r < z->size; r++)
      if ((rc = send_msg(z, r, M_RESULT, 0, z->pack, total * sizeof(float), 0)) != 0)
        return lost(z, rc, r, k == 0 ? "barrier result" : "all-reduce result");
    return 0;
  }
  if (grow(&z->pack, &z->pack_cap, total))
    return fail(z, SAC_ENOMEM, "out of memory for a %s of %zu floats", op_name(k), total);
  size_t off = 0;
  for (int i = 0; i < k; i++) {
    memcpy(z->pack + off, bufs[i], ns[i] * sizeof(float));
    off += ns[i];
  }
  if ((rc = send_msg(z, 0, M_REDUCE, 0, z->pack, total * sizeof(float), 0)) != 0)
    return fail(z, rc, "cannot send to rank 0 (%s): %s", op_name(k), sac_strerror(rc));
  for (;;) {
    if ((rc = next_msg(z, deadline, &m)) != 0)
      return rc == SAC_ETIMEOUT
                 ? fail(z, rc, "rank 0 did not answer %s within %d ms", op_name(k), z->timeout_ms)
                 : fail(z, rc, "%s: %s", op_name(k), sac_strerror(rc));
    if (m.type == M_ABORT)
      return fail(z, SAC_ENET, "rank 0 aborted (%s) during %s", abort_text(z), op_name(k));
    if (m.type != M_RESULT || m.seq != z->seq) {
      drop_payload(z);
      return fail(z, SAC_EPROTO, "rank 0 sent message type %d (operation %u) during %s (operation %u)",
                  m.type, m.seq, op_name(k), z->seq);
    }
    size_t len;
    if ((rc = take_payload(z, z->pack, total * sizeof(float), &len)) != 0 || len != total * sizeof(float))
      return fail(z, SAC_EPROTO, "rank 0 sent %zu bytes as a %s result of %zu", len, op_name(k),
                  total * sizeof(float));
    break;
  }
  off = 0;
  for (int i = 0; i < k; i++) {
    memcpy(bufs[i], z->pack + off, ns[i] * sizeof(float));
    off += ns[i];
  }
  return 0;
}

static int zc_barrier(sac_coll_t *c) { return zc_allreduce(c, NULL, NULL, 0); }

static int zc_broadcast(sac_coll_t *c, void *buf, size_t bytes, int root) {
  zc_t *z = c->impl;
  if (z->failed)
    return SAC_ESTATE;
  if (bytes > z->max_bytes)
    return fail(z, SAC_ETOOBIG, "broadcast of %zu bytes is over the limit of %zu bytes", bytes, z->max_bytes);
  z->seq++;
  if (z->size == 1)
    return 0;
  const double deadline = sac_clock_s() + z->timeout_ms / 1000.0;
  msg_t m;
  int rc;
  if (z->rank == root) { /* no acknowledgement: the next operation waits for everyone */
    for (int r = root == 0 ? 1 : 0; r < (root == 0 ? z->size : 1); r++)
      if ((rc = send_msg(z, r, M_BCAST, (uint32_t)root, buf, bytes, 0)) != 0)
        return lost(z, rc, r, "broadcast");
    return 0;
  }
  /* everyone else receives it from rank 0 (which receives it from the root) */
  const int from = z->rank == 0 ? root : 0;
  for (;;) {
    if ((rc = next_msg(z, deadline, &m)) != 0)
      return rc == SAC_ETIMEOUT
                 ? fail(z, rc, "rank %d did not answer broadcast within %d ms", from, z->timeout_ms)
                 : fail(z, rc, "broadcast: %s", sac_strerror(rc));
    if (z->rank == 0 && (m.type != M_BCAST || m.from != root || m.seq != z->seq)) {
      if ((rc = stray(z, &m, "broadcast")) != 0)
        return rc;
      continue;
    }
    if (z->rank != 0 && m.type == M_ABORT)
      return fail(z, SAC_ENET, "rank 0 aborted (%s) during broadcast", abort_text(z));
    if (z->rank != 0 && (m.type != M_BCAST || m.seq != z->seq)) {
      drop_payload(z);
      return fail(z, SAC_EPROTO, "rank 0 sent message type %d (operation %u) during broadcast (operation %u)",
                  m.type, m.seq, z->seq);
    }
    size_t len;
    if ((rc = take_payload(z, buf, bytes, &len)) != 0 || len != bytes)
      return fail(z, SAC_EPROTO, "rank %d broadcast %zu bytes, not %zu", from, len, bytes);
    break;
  }
  if (z->rank == 0)
    for (int r = 1; r < z->size; r++)
      if (r != root && (rc = send_msg(z, r, M_BCAST, (uint32_t)root, buf, bytes, 0)) != 0)
        return lost(z, rc, r, "broadcast");
  return 0;
}

static void zc_abort(sac_coll_t *c, const char *why) {
  zc_t *z = c->impl;
  if (z->failed == 2)
    return;
  z->failed = 2;
  const char *text = why ? why : "aborted";
  size_t len = strlen(text);
  if (z->rank == 0) {
    for (int r = 1; r < z->size; r++)
      if (z->joined[r])
        send_msg(z, r, M_ABORT, 0, text, len, SAC_NET_DONTWAIT);
  } else {
    send_msg(z, 0, M_ABORT, 0, text, len, SAC_NET_DONTWAIT);
  }
}

static void zc_destroy(sac_coll_t *c) {
  zc_t *z = c->impl;
  if (z) {
    sac_net_close(&z->sock);
    sac_net_ctx_destroy(&z->ctx);
    free(z->scratch);
    free(z->pack);
    free(z);
  }
  free(c);
}

static const sac_coll_ops_t k_zmq_ops = {
    .name = "zmq",
    .allreduce_mean = zc_allreduce,
    .broadcast = zc_broadcast,
    .barrier = zc_barrier,
    .abort = zc_abort,
    .destroy = zc_destroy,
};

static void set_why(char *why, size_t cap, const char *text) {
  if (why && cap)
    snprintf(why, cap, "%s", text);
}

/* Rank 0's side of the handshake. */
static int handshake_root(zc_t *z, const sac_coll_zmq_cfg_t *cfg, char *why, size_t cap) {
  const double deadline = sac_clock_s() + cfg->connect_timeout_ms / 1000.0;
  char reason[1024];
  int n_joined = 0;
  msg_t m;
  while (n_joined < z->size - 1) {
    int rc = next_msg(z, deadline, &m);
    if (rc == SAC_ETIMEOUT) {
      char missing[256] = "";
      size_t used = 0;
      for (int r = 1; r < z->size && used + 8 < sizeof missing; r++)
        if (!z->joined[r])
          used += (size_t)snprintf(missing + used, sizeof missing - used, "%s%d", used ? ", " : "", r);
      snprintf(reason, sizeof reason, "rank(s) %s did not connect to %s within %d ms", missing, cfg->endpoint,
               cfg->connect_timeout_ms);
      set_why(why, cap, reason);
      for (int r = 1; r < z->size; r++)
        if (z->joined[r])
          send_msg(z, r, M_REFUSE, 0, reason, strlen(reason), SAC_NET_DONTWAIT);
      return fail(z, SAC_ETIMEOUT, "%s", reason);
    }
    if (rc)
      return fail(z, rc, "handshake: %s", sac_strerror(rc));
    if (m.type != M_HELLO) {
      drop_payload(z);
      SAC_WARN("dp", "data-parallel: dropped a message of type %d from rank %d before the run began", m.type,
               m.rank);
      continue;
    }
    size_t len = 0;
    if (take_payload(z, z->text, sizeof z->text, &len) != 0) {
      send_to_ident(z, &m, M_REFUSE, "hello too large");
      continue;
    }
    const int r = m.rank;
    if (r <= 0 || r >= z->size) {
      snprintf(reason, sizeof reason, "rank %d is not in [1, %d) (dp_rank must be below dp_size %d%s)", r,
               z->size, z->size, r == 0 ? "; rank 0 is this process" : "");
      SAC_ERROR("dp", "data-parallel: refused a learner: %s", reason);
      send_to_ident(z, &m, M_REFUSE, reason);
      continue;
    }
    if (z->joined[r]) {
      snprintf(reason, sizeof reason, "rank %d is already taken by another learner", r);
      SAC_ERROR("dp", "data-parallel: refused a second learner claiming rank %d: %s", r, reason);
      send_to_ident(z, &m, M_REFUSE, reason);
      continue;
    }
    reason[0] = '\0';
    if (cfg->check && cfg->check(cfg->user, r, z->text, len, reason, sizeof reason) != 0) {
      if (!reason[0])
        snprintf(reason, sizeof reason, "rank %d refused", r);
      set_why(why, cap, reason);
      send_to_ident(z, &m, M_REFUSE, reason);
      char others[1100];
      snprintf(others, sizeof others, "rank 0 refused rank %d: %s", r, reason);
      for (int q = 1; q < z->size; q++)
        if (z->joined[q])
          send_msg(z, q, M_REFUSE, 0, others, strlen(others), SAC_NET_DONTWAIT);
      return fail(z, SAC_ECONFIG, "refused rank %d: %s", r, reason);
    }
    memcpy(z->ident[r], m.ident, m.ident_len);
    z->ident_len[r] = m.ident_len;
    z->joined[r] = 1;
    n_joined++;
    SAC_INFO("dp", "data-parallel: rank %d joined (%d of %d)", r, n_joined + 1, z->size);
  }
  for (int r = 1; r < z->size; r++) {
    int rc = send_msg(z, r, M_WELCOME, 0, "", 0, 0);
    if (rc)
      return fail(z, rc, "cannot welcome rank %d: %s", r, sac_strerror(rc));
  }
  return 0;
}

/* A rank's side of the handshake. */
static int handshake_rank(zc_t *z, const sac_coll_zmq_cfg_t *cfg, char *why, size_t cap) {
  int rc = send_msg(z, 0, M_HELLO, 0, cfg->hello ? cfg->hello : "", cfg->hello ? cfg->hello_len : 0, 0);
  if (rc)
    return fail(z, rc, "cannot send hello to %s: %s", cfg->endpoint, sac_strerror(rc));
  const double deadline = sac_clock_s() + cfg->connect_timeout_ms / 1000.0;
  msg_t m;
  for (;;) {
    rc = next_msg(z, deadline, &m);
    if (rc == SAC_ETIMEOUT) {
      char reason[512];
      snprintf(
          reason, sizeof reason,
          "rank 0 at %s did not welcome rank %d within %d ms (is it running, and are all %d ranks started?)",
          cfg->endpoint, z->rank, cfg->connect_timeout_ms, z->size);
      set_why(why, cap, reason);
      return fail(z, rc, "%s", reason);
    }
    if (rc)
      return fail(z, rc, "handshake: %s", sac_strerror(rc));
    if (m.type == M_WELCOME) {
      drop_payload(z);
      return 0;
    }
    if (m.type == M_REFUSE || m.type == M_ABORT) {
      const char *text = abort_text(z);
      set_why(why, cap, text);
      return fail(z, SAC_ECONFIG, "rank 0 refused rank %d: %s", z->rank, text);
    }
    drop_payload(z);
  }
}

int sac_coll_zmq_new(const sac_coll_zmq_cfg_t *cfg, sac_coll_t **out, char *why, size_t why_cap) {
  *out = NULL;
  set_why(why, why_cap, "");
  if (cfg->size < 1 || cfg->size > SAC_COLL_MAX_RANKS || cfg->rank < 0 || cfg->rank >= cfg->size ||
      cfg->hello_len > MAX_HELLO || !cfg->endpoint) {
    char reason[256];
    snprintf(reason, sizeof reason, "rank %d of %d is not a valid data-parallel rank (size 1..%d)", cfg->rank,
             cfg->size, SAC_COLL_MAX_RANKS);
    set_why(why, why_cap, reason);
    SAC_ERROR("dp", "data-parallel: %s", reason);
    return SAC_ECONFIG;
  }
  sac_coll_t *c = calloc(1, sizeof *c);
  zc_t *z = calloc(1, sizeof *z);
  if (!c || !z) {
    free(c), free(z);
    return SAC_ENOMEM;
  }
  c->ops = &k_zmq_ops;
  c->impl = z;
  c->rank = z->rank = cfg->rank;
  c->size = z->size = cfg->size;
  c->timeout_ms = z->timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : 30000;
  z->max_bytes = cfg->max_bytes ? cfg->max_bytes : (size_t)1 << 30;
  snprintf(z->hint, sizeof z->hint, "%s", cfg->hint ? cfg->hint : "");
  int rc = SAC_ENOMEM;
  z->ctx = cfg->ctx ? sac_net_ctx_ref(cfg->ctx) : sac_net_ctx_new(1);
  if (!z->ctx)
    goto err;
  if (cfg->size == 1)
    goto done; /* nobody to talk to */
  sac_net_opts_t o;
  sac_net_opts_default(&o);
  o.max_msg_bytes = (int64_t)(z->max_bytes + HDR);
  o.linger_ms = 500; /* an ABORT sent just before close still goes out */
  o.router_mandatory = cfg->rank == 0;
  o.sndhwm = o.rcvhwm = 4 * SAC_COLL_MAX_RANKS;
  rc = SAC_ENET;
  if (!(z->sock = sac_net_socket(z->ctx, cfg->rank == 0 ? SAC_NET_ROUTER : SAC_NET_DEALER, &o)))
    goto err;
  if (cfg->rank == 0) {
    char bound[256];
    if ((rc = sac_net_bind(z->sock, cfg->endpoint, bound, sizeof bound)) != 0) {
      char reason[512];
      snprintf(reason, sizeof reason, "rank 0 cannot bind the coordinator endpoint %s", cfg->endpoint);
      set_why(why, why_cap, reason);
      SAC_ERROR("dp", "data-parallel: %s", reason);
      goto err;
    }
    SAC_INFO("dp", "data-parallel: rank 0 of %d on %s, waiting up to %d ms for the other ranks", cfg->size,
             bound, cfg->connect_timeout_ms);
    rc = handshake_root(z, cfg, why, why_cap);
  } else {
    if ((rc = sac_net_connect(z->sock, cfg->endpoint)) != 0)
      goto err;
    SAC_INFO("dp", "data-parallel: rank %d of %d, connecting to rank 0 at %s", cfg->rank, cfg->size,
             cfg->endpoint);
    rc = handshake_rank(z, cfg, why, why_cap);
  }
  if (rc)
    goto err;
done:
  *out = c;
  return 0;
err:
  zc_destroy(c);
  return rc;
}
