/* ZeroMQ helpers (see net.h). All zmq calls of sacfleet's own code outside this file
 * go through these wrappers or through SAC_ZCHK. */
#include "common/net.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "common/auth.h"
#include "common/error.h"
#include "common/log.h"

struct sac_net_ctx {
  void *zctx;
  atomic_int refs;
  /* CURVE (sac_net_ctx_set_curve): set before the context's first socket, read after */
  int curve;
  char public_key[41], secret_key[41], server_key[41];
  sac_auth_t *auth; /* the ZAP handler, stopped before the context terminates */
};

int sac_net_err(int e) {
  switch (e) {
  case EAGAIN:
    return SAC_EAGAIN;
  case EINTR:
    return SAC_EINTR;
  case ETERM:
    return SAC_ESTATE;
  case EMSGSIZE:
    return SAC_ETOOBIG;
  case ENOMEM:
    return SAC_ENOMEM;
  case EINVAL:
    return SAC_EINVAL;
  default:
    return SAC_ENET;
  }
}

int sac_net__check(int rc, const char *stmt, const char *file, int line) {
  if (rc >= 0)
    return rc;
  int e = zmq_errno();
  if (e != EAGAIN && e != EINTR)
    SAC_ERROR("net", "%s failed at %s:%d: %s", stmt, file, line, zmq_strerror(e));
  return sac_net_err(e);
}

sac_net_ctx_t *sac_net_ctx_new(int io_threads) {
  sac_net_ctx_t *c = calloc(1, sizeof *c);
  if (!c)
    return NULL;
  c->zctx = zmq_ctx_new();
  if (!c->zctx) {
    SAC_ERROR("net", "zmq_ctx_new failed: %s", zmq_strerror(zmq_errno()));
    free(c);
    return NULL;
  }
  if (SAC_ZCHK(zmq_ctx_set(c->zctx, ZMQ_IO_THREADS, io_threads > 0 ? io_threads : 1)) < 0 ||
      SAC_ZCHK(zmq_ctx_set(c->zctx, ZMQ_BLOCKY, 0)) < 0) {
    zmq_ctx_term(c->zctx);
    free(c);
    return NULL;
  }
  atomic_init(&c->refs, 1);
  return c;
}

sac_net_ctx_t *sac_net_ctx_ref(sac_net_ctx_t *c) {
  atomic_fetch_add(&c->refs, 1);
  return c;
}

void sac_net_ctx_destroy(sac_net_ctx_t **cp) {
  if (!cp || !*cp)
    return;
  sac_net_ctx_t *c = *cp;
  *cp = NULL;
  if (atomic_fetch_sub(&c->refs, 1) != 1)
    return;
  sac_auth_stop(&c->auth); /* its socket would keep zmq_ctx_term waiting */
  while (zmq_ctx_term(c->zctx) != 0 && zmq_errno() == EINTR)
    ;
  memset(c->secret_key, 0, sizeof c->secret_key);
  free(c);
}

void *sac_net_ctx_raw(sac_net_ctx_t *c) { return c->zctx; }

static int z85_key_ok(const char *k) {
  uint8_t bin[32];
  return strlen(k) == 40 && zmq_z85_decode(bin, k) != NULL;
}

int sac_net_ctx_set_curve(sac_net_ctx_t *c, const sac_net_curve_t *curve) {
  if (!curve || !curve->public_key[0])
    return 0;
  if (c->curve) {
    SAC_ERROR("net", "CURVE is already set on this context");
    return SAC_ESTATE;
  }
  if (!zmq_has("curve")) {
    SAC_ERROR("net", "this libzmq was built without CURVE support");
    return SAC_EUNSUPPORTED;
  }
  if (!z85_key_ok(curve->public_key) || !z85_key_ok(curve->secret_key) ||
      (curve->server_key[0] && !z85_key_ok(curve->server_key))) {
    SAC_ERROR("net", "CURVE keys must be 40 Z85 characters");
    return SAC_EINVAL;
  }
  if (curve->allow && !(c->auth = sac_auth_start(c->zctx, curve->allow)))
    return SAC_ENET;
  memcpy(c->public_key, curve->public_key, sizeof c->public_key);
  memcpy(c->secret_key, curve->secret_key, sizeof c->secret_key);
  memcpy(c->server_key, curve->server_key, sizeof c->server_key);
  c->curve = 1;
  SAC_INFO("net", "CURVE on: public key %.8s..., %s, %s", c->public_key,
           c->server_key[0] ? "server key set" : "no server key (cannot connect over tcp)",
           curve->allow ? "binding sockets admit the allow-list's keys" : "no allow-list");
  return 0;
}

int sac_net_ctx_curve(const sac_net_ctx_t *c) { return c->curve; }

void sac_net_ctx_auth_counts(const sac_net_ctx_t *c, uint64_t *accepted, uint64_t *denied) {
  *accepted = *denied = 0;
  if (c->auth)
    sac_auth_counts(c->auth, accepted, denied);
}

void sac_net_curve_clear(sac_net_curve_t *curve) {
  if (!curve)
    return;
  sac_auth_allow_destroy(&curve->allow);
  memset(curve, 0, sizeof *curve);
}

void sac_net_opts_default(sac_net_opts_t *o) {
  memset(o, 0, sizeof *o);
  o->linger_ms = 0;
  o->reconnect_ivl_ms = 100;
  o->reconnect_ivl_max_ms = 2000;
  o->zmtp3_only = 1;
  o->handshake_ivl_ms = 5000;
}

static int setopt_int(void *s, int opt, int v, const char *name) {
  if (zmq_setsockopt(s, opt, &v, sizeof v) != 0) {
    SAC_ERROR("net", "zmq_setsockopt(%s=%d) failed: %s", name, v, zmq_strerror(zmq_errno()));
    return SAC_ENET;
  }
  return 0;
}

void *sac_net_socket(sac_net_ctx_t *c, sac_net_type_t type, const sac_net_opts_t *o) {
  sac_net_opts_t def;
  if (!o) {
    sac_net_opts_default(&def);
    o = &def;
  }
  void *s = zmq_socket(c->zctx, (int)type);
  if (!s) {
    SAC_ERROR("net", "zmq_socket(%d) failed: %s", (int)type, zmq_strerror(zmq_errno()));
    return NULL;
  }
  int64_t maxmsg = o->max_msg_bytes > 0 ? o->max_msg_bytes : -1;
  int rc = 0;
  if (zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg) != 0) {
    SAC_ERROR("net", "zmq_setsockopt(ZMQ_MAXMSGSIZE) failed: %s", zmq_strerror(zmq_errno()));
    rc = SAC_ENET;
  }
  rc = rc ? rc : setopt_int(s, ZMQ_LINGER, o->linger_ms, "ZMQ_LINGER");
  rc = rc ? rc : setopt_int(s, ZMQ_RECONNECT_IVL, o->reconnect_ivl_ms, "ZMQ_RECONNECT_IVL");
  rc = rc ? rc : setopt_int(s, ZMQ_RECONNECT_IVL_MAX, o->reconnect_ivl_max_ms, "ZMQ_RECONNECT_IVL_MAX");
  if (!rc && o->sndhwm > 0)
    rc = setopt_int(s, ZMQ_SNDHWM, o->sndhwm, "ZMQ_SNDHWM");
  if (!rc && o->rcvhwm > 0)
    rc = setopt_int(s, ZMQ_RCVHWM, o->rcvhwm, "ZMQ_RCVHWM");
  if (!rc && o->router_mandatory && type == SAC_NET_ROUTER)
    rc = setopt_int(s, ZMQ_ROUTER_MANDATORY, 1, "ZMQ_ROUTER_MANDATORY");
  if (!rc && o->immediate)
    rc = setopt_int(s, ZMQ_IMMEDIATE, 1, "ZMQ_IMMEDIATE");
  if (!rc && o->conflate)
    rc = setopt_int(s, ZMQ_CONFLATE, 1, "ZMQ_CONFLATE");
  if (!rc && o->zmtp3_only && SAC_ZCHK(zmq_setsockopt(s, ZMQ_ZAP_DOMAIN, "sacfleet", 8)) < 0)
    rc = SAC_ENET;
  if (!rc && o->handshake_ivl_ms > 0)
    rc = setopt_int(s, ZMQ_HANDSHAKE_IVL, o->handshake_ivl_ms, "ZMQ_HANDSHAKE_IVL");
  if (!rc && o->heartbeat_ivl_ms > 0) {
    rc = setopt_int(s, ZMQ_HEARTBEAT_IVL, o->heartbeat_ivl_ms, "ZMQ_HEARTBEAT_IVL");
    if (!rc && o->heartbeat_timeout_ms > 0)
      rc = setopt_int(s, ZMQ_HEARTBEAT_TIMEOUT, o->heartbeat_timeout_ms, "ZMQ_HEARTBEAT_TIMEOUT");
  }
  /* CURVE: the key pair now (client role by default); bind makes it a server */
  if (!rc && c->curve &&
      (SAC_ZCHK(zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, c->public_key, 40)) < 0 ||
       SAC_ZCHK(zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, c->secret_key, 40)) < 0 ||
       (c->server_key[0] && SAC_ZCHK(zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, c->server_key, 40)) < 0)))
    rc = SAC_ENET;
  if (rc) {
    zmq_close(s);
    return NULL;
  }
  return s;
}

/* The socket carries CURVE keys (its context has CURVE) and endpoint is not inproc://. */
static int curve_applies(void *s, const char *endpoint) {
  int mech = 0;
  size_t len = sizeof mech;
  return strncmp(endpoint, "inproc://", 9) != 0 && zmq_getsockopt(s, ZMQ_MECHANISM, &mech, &len) == 0 &&
         mech == ZMQ_CURVE;
}

int sac_net_bind(void *s, const char *endpoint, char *bound, size_t cap) {
  const char *why = NULL;
  int rc = sac_net_try_bind(s, endpoint, bound, cap, &why);
  if (rc && why)
    SAC_ERROR("net", "cannot bind %s: %s", endpoint, why);
  return rc;
}

int sac_net_try_bind(void *s, const char *endpoint, char *bound, size_t cap, const char **why) {
  if (why)
    *why = NULL;
  if (curve_applies(s, endpoint) && setopt_int(s, ZMQ_CURVE_SERVER, 1, "ZMQ_CURVE_SERVER") != 0)
    return SAC_ENET;
  if (zmq_bind(s, endpoint) != 0) {
    if (why)
      *why = zmq_strerror(zmq_errno());
    return SAC_ENET;
  }
  if (bound && cap) {
    size_t len = cap;
    if (SAC_ZCHK(zmq_getsockopt(s, ZMQ_LAST_ENDPOINT, bound, &len)) < 0) {
      snprintf(bound, cap, "%s", endpoint);
    }
    bound[cap - 1] = '\0';
  }
  return 0;
}

int sac_net_connect(void *s, const char *endpoint) {
  if (curve_applies(s, endpoint)) {
    uint8_t key[32] = {0}, any = 0;
    size_t len = sizeof key;
    if (SAC_ZCHK(zmq_getsockopt(s, ZMQ_CURVE_SERVERKEY, key, &len)) < 0)
      return SAC_ENET;
    for (size_t i = 0; i < sizeof key; i++)
      any |= key[i];
    if (!any) {
      SAC_ERROR("net", "cannot connect to %s with CURVE: no server public key (curve_server_key)", endpoint);
      return SAC_ECONFIG;
    }
  }
  if (zmq_connect(s, endpoint) != 0) {
    SAC_ERROR("net", "cannot connect to %s: %s", endpoint, zmq_strerror(zmq_errno()));
    return SAC_ENET;
  }
  return 0;
}

void sac_net_close(void **s) {
  if (!s || !*s)
    return;
  SAC_ZCHK(zmq_close(*s));
  *s = NULL;
}

static int send_flags(int flags) {
  return ((flags & SAC_NET_DONTWAIT) ? ZMQ_DONTWAIT : 0) | ((flags & SAC_NET_SNDMORE) ? ZMQ_SNDMORE : 0);
}

/* A send's result (rc from zmq_send or zmq_msg_send, errno still its own) as our code. */
static int send_result(int rc) {
  if (rc >= 0)
    return 0;
  int e = zmq_errno();
  /* unroutable ROUTER peers and full queues are normal events for a server */
  if (e != EAGAIN && e != EHOSTUNREACH)
    SAC_ZCHK(rc);
  return e == EHOSTUNREACH ? SAC_ENET : sac_net_err(e);
}

int sac_net_send(void *s, const void *buf, size_t len, int flags) {
  const int zf = send_flags(flags);
  int rc;
  do {
    rc = zmq_send(s, buf, len, zf);
  } while (rc < 0 && zmq_errno() == EINTR);
  return send_result(rc);
}

int sac_net_recv(void *s, void *buf, size_t cap, int flags, size_t *len, int *more) {
  int zf = (flags & SAC_NET_DONTWAIT) ? ZMQ_DONTWAIT : 0;
  int rc = zmq_recv(s, buf, cap, zf);
  if (rc < 0)
    return SAC_ZCHK(rc);
  if (len)
    *len = (size_t)rc;
  if (more) {
    int m = 0;
    size_t ml = sizeof m;
    if (SAC_ZCHK(zmq_getsockopt(s, ZMQ_RCVMORE, &m, &ml)) < 0)
      m = 0;
    *more = m;
  }
  return 0;
}

_Static_assert(sizeof(sac_net_msg_t) == sizeof(zmq_msg_t), "sac_net_msg_t must hold a zmq_msg_t");
_Static_assert(_Alignof(sac_net_msg_t) >= _Alignof(zmq_msg_t), "sac_net_msg_t must align a zmq_msg_t");

int sac_net_recv_msg(void *s, sac_net_msg_t *m, int flags, const void **data, size_t *len) {
  zmq_msg_t *msg = (zmq_msg_t *)(void *)m->opaque;
  zmq_msg_init(msg);
  int rc = zmq_msg_recv(msg, s, (flags & SAC_NET_DONTWAIT) ? ZMQ_DONTWAIT : 0);
  if (rc < 0) {
    int e = SAC_ZCHK(rc);
    zmq_msg_close(msg);
    return e;
  }
  *data = zmq_msg_data(msg);
  *len = zmq_msg_size(msg);
  return 0;
}

void sac_net_msg_close(sac_net_msg_t *m) { zmq_msg_close((zmq_msg_t *)(void *)m->opaque); }

void sac_net_msg_move(sac_net_msg_t *dst, sac_net_msg_t *src) {
  zmq_msg_t *d = (zmq_msg_t *)(void *)dst->opaque;
  zmq_msg_init(d);
  zmq_msg_move(d, (zmq_msg_t *)(void *)src->opaque);
}

int sac_net_msg_init_size(sac_net_msg_t *m, size_t len, void **data) {
  zmq_msg_t *msg = (zmq_msg_t *)(void *)m->opaque;
  if (zmq_msg_init_size(msg, len) != 0)
    return SAC_ENOMEM;
  *data = zmq_msg_data(msg);
  return 0;
}

int sac_net_send_msg(void *s, sac_net_msg_t *m, int flags) {
  zmq_msg_t *msg = (zmq_msg_t *)(void *)m->opaque;
  const int zf = send_flags(flags);
  int rc;
  do {
    rc = zmq_msg_send(msg, s, zf);
  } while (rc < 0 && zmq_errno() == EINTR);
  return send_result(rc);
}

int sac_net_drain_frames(void *s) {
  int n = 0;
  for (;;) {
    int m = 0;
    size_t ml = sizeof m;
    if (zmq_getsockopt(s, ZMQ_RCVMORE, &m, &ml) != 0 || !m)
      return n;
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    int rc = zmq_msg_recv(&msg, s, ZMQ_DONTWAIT);
    zmq_msg_close(&msg);
    if (rc < 0)
      return n;
    n++;
  }
}

int sac_net_poll(sac_net_pollitem_t *items, int n, long timeout_ms) {
  zmq_pollitem_t z[16];
  if (n < 0 || n > 16)
    return SAC_EINVAL;
  for (int i = 0; i < n; i++) {
    z[i].socket = items[i].socket;
    z[i].fd = 0;
    z[i].events = (short)(((items[i].events & SAC_NET_POLLIN) ? ZMQ_POLLIN : 0) |
                          ((items[i].events & SAC_NET_POLLOUT) ? ZMQ_POLLOUT : 0));
    z[i].revents = 0;
  }
  int rc = zmq_poll(z, n, timeout_ms);
  if (rc < 0)
    return SAC_ZCHK(rc);
  for (int i = 0; i < n; i++)
    items[i].revents = (short)(((z[i].revents & ZMQ_POLLIN) ? SAC_NET_POLLIN : 0) |
                               ((z[i].revents & ZMQ_POLLOUT) ? SAC_NET_POLLOUT : 0));
  return rc;
}

struct sac_net_monitor {
  void *watched;
  void *pair;
};

sac_net_monitor_t *sac_net_monitor_new(sac_net_ctx_t *c, void *socket) {
  static atomic_uint counter;
  sac_net_monitor_t *m = calloc(1, sizeof *m);
  if (!m)
    return NULL;
  char ep[96];
  snprintf(ep, sizeof ep, "inproc://sac-net-monitor-%p-%u", (void *)m, atomic_fetch_add(&counter, 1));
  if (SAC_ZCHK(zmq_socket_monitor(socket, ep, ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED)) < 0) {
    free(m);
    return NULL;
  }
  m->watched = socket;
  m->pair = zmq_socket(c->zctx, ZMQ_PAIR);
  int zero = 0;
  if (!m->pair || SAC_ZCHK(zmq_setsockopt(m->pair, ZMQ_LINGER, &zero, sizeof zero)) < 0 ||
      SAC_ZCHK(zmq_connect(m->pair, ep)) < 0) {
    if (m->pair)
      zmq_close(m->pair);
    zmq_socket_monitor(socket, NULL, 0);
    free(m);
    return NULL;
  }
  return m;
}

int sac_net_monitor_poll(sac_net_monitor_t *m) {
  int mask = 0;
  for (int guard = 0; guard < 1024; guard++) {
    unsigned char ev[6];
    int rc = zmq_recv(m->pair, ev, sizeof ev, ZMQ_DONTWAIT);
    if (rc < 0)
      break;
    uint16_t id;
    memcpy(&id, ev, 2);
    if (id == ZMQ_EVENT_CONNECTED)
      mask |= SAC_NET_EV_CONNECTED;
    if (id == ZMQ_EVENT_DISCONNECTED)
      mask |= SAC_NET_EV_DISCONNECTED;
    sac_net_drain_frames(m->pair);
  }
  return mask;
}

void sac_net_monitor_destroy(sac_net_monitor_t **mp) {
  if (!mp || !*mp)
    return;
  sac_net_monitor_t *m = *mp;
  zmq_socket_monitor(m->watched, NULL, 0);
  zmq_close(m->pair);
  free(m);
  *mp = NULL;
}

int sac_net_split_endpoints(const char *list, const char *list_name, char (*out)[256], size_t max,
                            size_t *n) {
  *n = 0;
  const char *p = list;
  for (;;) {
    while (*p == ' ' || *p == '\t')
      p++;
    const char *end = p;
    while (*end && *end != ',')
      end++;
    const char *last = end;
    while (last > p && (last[-1] == ' ' || last[-1] == '\t'))
      last--;
    size_t len = (size_t)(last - p);
    if (len == 0 || len >= 256 || *n >= max) {
      SAC_ERROR("net", "bad %s \"%s\": comma-separated endpoints, each under 256 characters, at most %zu",
                list_name, list, max);
      *n = 0;
      return SAC_ECONFIG;
    }
    memcpy(out[*n], p, len);
    out[*n][len] = '\0';
    (*n)++;
    if (!*end)
      return 0;
    p = end + 1;
  }
}
