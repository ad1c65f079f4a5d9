/* Small ZeroMQ helpers, so that zmq.h stays out of the public headers of replay/,
 * learner/ and actor/: a reference-counted context that several components can share
 * (the embedded default runs shards, actors and the learner in one process over
 * inproc://, which needs one context), socket creation with the options every
 * sacfleet socket sets (ZMQ_MAXMSGSIZE, linger, reconnect interval, high-water marks,
 * CurveZMQ when the context has it), checked send/recv/poll wrappers, and a
 * connect/disconnect monitor. Sockets are plain
 * `void *` handles. Every ZeroMQ call goes through SAC_ZCHK, which logs the failed
 * statement with file and line (except the expected EAGAIN/EINTR) and maps errno to a
 * SAC_E* code. This is not a message codec (see wire.h) and it has no event loop.
 *
 * Thread-safety is ZeroMQ's: a context is thread-safe, a socket belongs to one thread
 * at a time (hand-over needs a memory barrier, e.g. pthread_create). */
#ifndef SAC_COMMON_NET_H
#define SAC_COMMON_NET_H
#include <stddef.h>
#include <stdint.h>

typedef struct sac_net_ctx sac_net_ctx_t;

/* A new context with io_threads I/O threads (<= 0: 1). NULL on failure (logged). */
sac_net_ctx_t *sac_net_ctx_new(int io_threads);
/* Takes one more reference; returns c. Thread-safe. */
sac_net_ctx_t *sac_net_ctx_ref(sac_net_ctx_t *c);
/* Drops one reference and nulls *c; the last one terminates the context (which waits
 * for every socket of it to be closed). Idempotent on NULL. */
void sac_net_ctx_destroy(sac_net_ctx_t **c);
/* The raw zmq context (void *), for code that must call zmq directly. */
void *sac_net_ctx_raw(sac_net_ctx_t *c);

/* CurveZMQ security of a context (docs/RELIABILITY.md, "Authentication and encryption";
 * common/auth.h reads the keys). Once set, every socket made from the context with
 * sac_net_socket carries this process's key pair, and its role follows what it does:
 * sac_net_bind makes it a CURVE server, sac_net_connect a CURVE client of server_key.
 * inproc:// endpoints are left alone (libzmq runs no security handshake on inproc), so
 * the learner's embedded shards and actors are unaffected. A socket either binds or
 * connects, never both. With allow set, a ZAP handler thread (common/auth.h) admits only
 * the listed client keys; without it, any client that completes the handshake. */
typedef struct sac_auth_allow sac_auth_allow_t;
typedef struct {
  char public_key[41], secret_key[41]; /* this process's key pair, Z85 ("": CURVE off) */
  char server_key[41];                 /* public key of the servers it connects to, Z85 ("": none) */
  sac_auth_allow_t *allow;             /* client keys its binding sockets accept (NULL: any) */
} sac_net_curve_t;
/* Sets CURVE on c, before any socket of c is made; copies curve (allow included) and
 * starts the ZAP handler when allow is set. An empty public_key is a no-op. 0,
 * SAC_ESTATE (already set), SAC_EUNSUPPORTED (libzmq without CURVE), SAC_EINVAL (a key
 * that is not 40 Z85 characters), SAC_ENET (the ZAP handler did not start); logged. */
int sac_net_ctx_set_curve(sac_net_ctx_t *c, const sac_net_curve_t *curve);
/* 1 when CURVE is set on c. */
int sac_net_ctx_curve(const sac_net_ctx_t *c);
/* The ZAP handler's counts on c (0 without one). */
void sac_net_ctx_auth_counts(const sac_net_ctx_t *c, uint64_t *accepted, uint64_t *denied);
/* Frees curve->allow and wipes the keys; idempotent. */
void sac_net_curve_clear(sac_net_curve_t *curve);

typedef enum {
  SAC_NET_PAIR = 0,
  SAC_NET_PUB = 1,
  SAC_NET_SUB = 2,
  SAC_NET_REQ = 3,
  SAC_NET_REP = 4,
  SAC_NET_DEALER = 5,
  SAC_NET_ROUTER = 6,
  SAC_NET_PULL = 7,
  SAC_NET_PUSH = 8,
  SAC_NET_XPUB = 9, /* a PUB whose subscriptions the application reads (common/weights.c) */
} sac_net_type_t;   /* the same numbers as ZMQ_PAIR... */

typedef struct {
  int64_t max_msg_bytes;    /* ZMQ_MAXMSGSIZE: a peer sending more is disconnected; <= 0: none */
  int linger_ms;            /* ZMQ_LINGER (default 0: never block close on unsent data) */
  int reconnect_ivl_ms;     /* ZMQ_RECONNECT_IVL (default 100) */
  int reconnect_ivl_max_ms; /* ZMQ_RECONNECT_IVL_MAX (default 2000) */
  int sndhwm, rcvhwm;       /* messages; 0: ZeroMQ's default (1000) */
  int router_mandatory;     /* ROUTER: fail (EHOSTUNREACH) instead of dropping unroutable */
  int immediate;            /* ZMQ_IMMEDIATE: queue only on completed connections */
  int conflate;             /* ZMQ_CONFLATE: keep only the last message (SUB) */
  int heartbeat_ivl_ms;     /* ZMTP heartbeats (0: off), detect dead peers */
  int heartbeat_timeout_ms;
  /* ZMTP 3 peers only (default 1): a connection whose greeting is not ZMTP 3 is closed
   * during the handshake. Without it libzmq reads any byte stream as ZMTP 1.0 frames,
   * so random bytes on a port become messages (on a PUB: subscriptions, each one growing
   * the subscription trie and later walked in the caller's thread). Done by giving the
   * socket a ZAP domain, which makes libzmq refuse unversioned peers; without a ZAP
   * handler in the context the NULL mechanism still admits every ZMTP 3 peer. */
  int zmtp3_only;
  int handshake_ivl_ms; /* ZMQ_HANDSHAKE_IVL: a peer that has not completed its handshake
                         * by then is dropped (0: libzmq's 30 s) */
} sac_net_opts_t;

/* The defaults described above. Cannot fail. */
void sac_net_opts_default(sac_net_opts_t *o);

/* A socket of type with options o (NULL: defaults). NULL on failure (logged). */
void *sac_net_socket(sac_net_ctx_t *c, sac_net_type_t type, const sac_net_opts_t *o);
/* Binds (as a CURVE server in a context with CURVE, unless inproc://); writes the
 * endpoint actually bound (ZMQ_LAST_ENDPOINT, e.g. the port chosen for
 * "tcp://127.0.0.1:*") into bound[cap] when bound is not NULL. 0 or SAC_ENET. */
int sac_net_bind(void *s, const char *endpoint, char *bound, size_t cap);
/* sac_net_bind without the error log, for a caller that retries and logs once: 0 or
 * SAC_ENET, with libzmq's reason in *why (may be NULL). */
int sac_net_try_bind(void *s, const char *endpoint, char *bound, size_t cap, const char **why);
/* Connects (asynchronous in ZeroMQ: success says nothing about the peer; a CURVE
 * handshake the server refuses is retried every reconnect interval and never delivers a
 * message). 0, SAC_ENET, or SAC_ECONFIG: a CURVE context without a server key asked to
 * connect to anything but inproc://. */
int sac_net_connect(void *s, const char *endpoint);
/* Closes the socket and nulls *s; idempotent. */
void sac_net_close(void **s);

#define SAC_NET_DONTWAIT 1
#define SAC_NET_SNDMORE 2

/* Sends one frame. 0, SAC_EAGAIN (would block, with DONTWAIT, or HWM reached),
 * SAC_ENET (e.g. unroutable ROUTER peer), SAC_ESTATE (context terminated). */
int sac_net_send(void *s, const void *buf, size_t len, int flags);
/* Receives one frame into buf[cap]. *len is the frame's real size, which may exceed
 * cap (then buf holds the first cap bytes). *more tells whether frames follow.
 * 0, SAC_EAGAIN, SAC_EINTR, SAC_ESTATE, SAC_ENET. */
int sac_net_recv(void *s, void *buf, size_t cap, int flags, size_t *len, int *more);
/* A frame received without copying it out of ZeroMQ (sac_net_recv_msg): its bytes stay
 * ZeroMQ's until sac_net_msg_close. Opaque; the size and alignment of a zmq_msg_t. */
typedef struct {
  _Alignas(8) unsigned char opaque[64];
} sac_net_msg_t;
/* Receives one frame into m and points *data at its *len bytes (valid until
 * sac_net_msg_close(m), which the caller must call after a 0 return; nothing to close on
 * an error). Over inproc:// the sender's buffer itself, over tcp:// ZeroMQ's: the copy
 * sac_net_recv makes into the caller's buffer is saved. 0 or as sac_net_recv. */
int sac_net_recv_msg(void *s, sac_net_msg_t *m, int flags, const void **data, size_t *len);
void sac_net_msg_close(sac_net_msg_t *m);
/* Moves a received frame from src to dst (src is left empty: close it or not). */
void sac_net_msg_move(sac_net_msg_t *dst, sac_net_msg_t *src);
/* A frame of len bytes to be filled in place and sent with sac_net_send_msg (a reply
 * built where ZeroMQ will send it from, instead of built in a buffer and copied): *data
 * points at its bytes. 0 or SAC_ENOMEM; after 0 the caller must send or close m. */
int sac_net_msg_init_size(sac_net_msg_t *m, size_t len, void **data);
/* Sends m as sac_net_send sends a buffer (same flags and codes). On 0 ZeroMQ owns the
 * bytes and m is empty; on an error m is unchanged: close it. */
int sac_net_send_msg(void *s, sac_net_msg_t *m, int flags);
/* Receives and drops the remaining frames of the current message; returns how many. */
int sac_net_drain_frames(void *s);

#define SAC_NET_POLLIN 1
#define SAC_NET_POLLOUT 2
typedef struct {
  void *socket;
  short events;
  short revents;
} sac_net_pollitem_t;
/* Waits up to timeout_ms (-1: forever) for events. Returns the number of ready items,
 * 0 on timeout, SAC_EINTR, or SAC_ENET/SAC_ESTATE. */
int sac_net_poll(sac_net_pollitem_t *items, int n, long timeout_ms);

/* Connect/disconnect monitor of one socket. */
typedef struct sac_net_monitor sac_net_monitor_t;
#define SAC_NET_EV_CONNECTED 1
#define SAC_NET_EV_DISCONNECTED 2
/* NULL on failure (logged). The monitor must be destroyed before its socket is closed. */
sac_net_monitor_t *sac_net_monitor_new(sac_net_ctx_t *c, void *socket);
/* Drains pending events without blocking; returns a mask of SAC_NET_EV_* seen. */
int sac_net_monitor_poll(sac_net_monitor_t *m);
void sac_net_monitor_destroy(sac_net_monitor_t **m);

/* Splits a comma-separated endpoint list ("tcp://a:1, tcp://b:2") into out[0..*n),
 * trimming blanks. 0, or SAC_ECONFIG (empty list, an empty item, an item of 256 or more
 * characters, more than max items) with a log line naming what (list_name). */
int sac_net_split_endpoints(const char *list, const char *list_name, char (*out)[256], size_t max, size_t *n);

/* errno from a failed zmq call -> SAC_E* code. */
int sac_net_err(int zmq_errno);
/* Checking helper behind SAC_ZCHK: rc >= 0 is returned unchanged; rc < 0 is logged with
 * the statement text, file and line (unless errno is EAGAIN or EINTR) and mapped. */
int sac_net__check(int rc, const char *stmt, const char *file, int line);
#define SAC_ZCHK(stmt) sac_net__check((stmt), #stmt, __FILE__, __LINE__)

#endif
