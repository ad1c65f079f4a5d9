/* The operations HTTP server (see http.h) on libuv. Everything after sac_http_start has
 * bound the socket runs on the server's own thread: accept, read into the connection's
 * fixed request buffer until the blank line that ends the headers, answer with one
 * write, half-close, discard whatever the client still sends until it closes (so the
 * kernel does not reset the connection under an unread response), close. A timer per
 * connection bounds the request (header_timeout_ms from accept), then the rest of the
 * exchange (timeout_ms from the request). When every slot is taken, the connection that
 * has been reading its request longest is closed to make room: slow clients cannot
 * starve a health check (issue 14, defect 13). sac_http_stop wakes the loop with a uv_async_t,
 * which closes every handle; the loop then runs out of handles and the thread ends. */
#include "common/http.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <uv.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"

struct sac_http {
  sac_http_config_t cfg;
  sac_metrics_t *metrics;
  uv_loop_t loop;
  uv_tcp_t server;
  uv_async_t wake;
  uv_thread_t thread;
  int port;
  int n_conns; /* loop thread only */
  /* connections still reading their request, oldest first: the ones evicted when the
   * server is full (loop thread only) */
  struct conn *reading_head, *reading_tail;
  /* counters, written by the loop thread, read at scrape time */
  atomic_uint_fast64_t evicted, rejected, header_timeouts;

  _Atomic(struct route *) route; /* sac_http_add_route: set once, read by the loop thread */
  /* the /healthz check (cfg.health, or sac_http_set_health later), called under health_mu:
   * it may be replaced while the server runs */
  pthread_mutex_t health_mu;
  _Atomic uint64_t beat_ns; /* sac_http_beat: the owner's main loop last turned (0: never) */
};

struct route {
  char path[64];
  sac_http_render_fn render;
  void *user;
};

typedef enum { C_READING, C_WRITING, C_DRAINING } conn_state_t;

typedef struct conn {
  sac_http_t *h;
  struct conn *prev, *next; /* in h's reading list while state is C_READING */
  int listed;
  uv_tcp_t tcp;
  uv_timer_t timer;
  uv_write_t wr;
  uv_shutdown_t sd;
  conn_state_t state;
  int open_handles; /* freed when both tcp and timer are closed */
  int closing;
  int counted; /* in h->n_conns */
  size_t len;
  char *req; /* max_request_bytes + 1 */
  char *resp;
  char drain[512];
} conn_t;

void sac_http_config_default(sac_http_config_t *c) {
  memset(c, 0, sizeof *c);
  snprintf(c->addr, sizeof c->addr, "0.0.0.0");
  c->port = 0;
  c->max_request_bytes = 8192;
  /* 256 slots of 8 KiB: more than the 200 slow connections of the issue 14 attack, and a
   * quarter at most of the process's descriptors, which its ZeroMQ sockets need too */
  struct rlimit nofile;
  c->max_connections = 256;
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY && nofile.rlim_cur / 4 < 256)
    c->max_connections = nofile.rlim_cur / 4 > 16 ? (int)(nofile.rlim_cur / 4) : 16;
  c->timeout_ms = 10000;
  c->header_timeout_ms = 2000;
  c->live_silence_s = 120.0;
}

/* ---- connections ------------------------------------------------------------------- */

/* The reading list: a connection joins it when accepted and leaves it when it has sent
 * its request or closes. Its head is the connection that has been reading longest. */
static void unlist(conn_t *c) {
  if (!c->listed)
    return;
  sac_http_t *h = c->h;
  if (c->prev)
    c->prev->next = c->next;
  else
    h->reading_head = c->next;
  if (c->next)
    c->next->prev = c->prev;
  else
    h->reading_tail = c->prev;
  c->prev = c->next = NULL;
  c->listed = 0;
}

static void enlist(conn_t *c) {
  sac_http_t *h = c->h;
  c->prev = h->reading_tail;
  c->next = NULL;
  if (h->reading_tail)
    h->reading_tail->next = c;
  else
    h->reading_head = c;
  h->reading_tail = c;
  c->listed = 1;
}

static void on_conn_closed(uv_handle_t *hd) {
  conn_t *c = hd->data;
  if (--c->open_handles > 0)
    return;
  free(c->req);
  free(c->resp);
  free(c);
}

static void conn_close(conn_t *c) {
  if (c->closing)
    return;
  c->closing = 1;
  unlist(c);
  if (c->counted) { /* its slot is free now: an eviction makes room at once */
    c->counted = 0;
    c->h->n_conns--;
  }
  uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
  uv_close((uv_handle_t *)&c->timer, on_conn_closed);
}

static void on_timeout(uv_timer_t *t) {
  conn_t *c = t->data;
  if (c->state == C_READING)
    atomic_fetch_add(&c->h->header_timeouts, 1);
  conn_close(c);
}

static void on_drain_alloc(uv_handle_t *hd, size_t suggested, uv_buf_t *buf) {
  (void)suggested;
  conn_t *c = hd->data;
  *buf = uv_buf_init(c->drain, sizeof c->drain);
}

/* After the response: ignore what the client sends until it closes (or the deadline). */
static void on_drain_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  (void)buf;
  if (nread < 0)
    conn_close(s->data);
}

static void on_shutdown(uv_shutdown_t *req, int status) {
  conn_t *c = req->data;
  if (status < 0 || c->closing) {
    conn_close(c);
    return;
  }
  c->state = C_DRAINING;
  if (uv_read_start((uv_stream_t *)&c->tcp, on_drain_alloc, on_drain_read) != 0)
    conn_close(c);
}

static void on_written(uv_write_t *req, int status) {
  conn_t *c = req->data;
  if (status < 0 || c->closing) {
    conn_close(c);
    return;
  }
  c->sd.data = c;
  if (uv_shutdown(&c->sd, (uv_stream_t *)&c->tcp, on_shutdown) != 0)
    conn_close(c);
}

/* Sends one whole response and closes afterwards. body may be NULL when len is 0. */
static void respond(conn_t *c, int code, const char *reason, const char *ctype, const char *extra,
                    const char *body, size_t len, int head_only) {
  uv_read_stop((uv_stream_t *)&c->tcp);
  unlist(c);
  /* the request is in: the rest of the exchange gets the whole-connection deadline */
  uv_timer_stop(&c->timer);
  if (uv_timer_start(&c->timer, on_timeout, (uint64_t)c->h->cfg.timeout_ms, 0) != 0) {
    conn_close(c);
    return;
  }
  char hdr[512];
  int n = snprintf(hdr, sizeof hdr,
                   "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%sConnection: close\r\n\r\n",
                   code, reason, ctype, len, extra ? extra : "");
  if (n < 0 || (size_t)n >= sizeof hdr) {
    conn_close(c);
    return;
  }
  size_t total = (size_t)n + (head_only ? 0 : len);
  c->resp = malloc(total);
  if (!c->resp) {
    conn_close(c);
    return;
  }
  memcpy(c->resp, hdr, (size_t)n);
  if (!head_only && len)
    memcpy(c->resp + n, body, len);
  c->state = C_WRITING;
  c->wr.data = c;
  uv_buf_t b = uv_buf_init(c->resp, (unsigned int)total);
  if (uv_write(&c->wr, (uv_stream_t *)&c->tcp, &b, 1, on_written) != 0)
    conn_close(c);
}

static void respond_text(conn_t *c, int code, const char *reason, const char *text, const char *extra,
                         int head_only) {
  respond(c, code, reason, "text/plain; charset=utf-8", extra, text, strlen(text), head_only);
}

static int is_tchar(char ch) { return ch >= 'A' && ch <= 'Z'; }

/* The request line and headers are in c->req[0..len) (NUL-terminated, ends in a blank line). */
static void handle(conn_t *c) {
  const char *p = c->req, *end = c->req + c->len;
  const char *m0 = p;
  while (p < end && is_tchar(*p))
    p++;
  size_t mlen = (size_t)(p - m0);
  if (mlen == 0 || mlen > 16 || p >= end || *p != ' ') {
    respond_text(c, 400, "Bad Request", "bad request\n", NULL, 0);
    return;
  }
  const char *t0 = ++p;
  while (p < end && *p != ' ' && (unsigned char)*p > 0x20 && *p != 0x7f)
    p++;
  size_t tlen = (size_t)(p - t0);
  if (tlen == 0 || *t0 != '/' || p >= end || *p != ' ' || end - p < 10 || memcmp(p + 1, "HTTP/1.", 7) != 0 ||
      (p[8] != '0' && p[8] != '1') || (p[9] != '\r' && p[9] != '\n')) {
    respond_text(c, 400, "Bad Request", "bad request\n", NULL, 0);
    return;
  }
  size_t plen = 0;
  while (plen < tlen && t0[plen] != '?')
    plen++;
  int head = mlen == 4 && memcmp(m0, "HEAD", 4) == 0;
  int get = mlen == 3 && memcmp(m0, "GET", 3) == 0;
  int is_metrics = plen == 8 && memcmp(t0, "/metrics", 8) == 0;
  int is_health = plen == 8 && memcmp(t0, "/healthz", 8) == 0;
  int is_live = plen == 6 && memcmp(t0, "/livez", 6) == 0;
  struct route *rt = atomic_load(&c->h->route);
  if (rt && plen == strlen(rt->path) && memcmp(t0, rt->path, plen) == 0 && (get || head)) {
    char *text = NULL;
    size_t len = 0;
    const char *q = plen < tlen ? t0 + plen + 1 : t0 + tlen;
    if (rt->render(rt->user, q, (size_t)(t0 + tlen - q), &text, &len) != 0) {
      respond_text(c, 503, "Service Unavailable", "unavailable\n", NULL, head);
      return;
    }
    respond(c, 200, "OK", "text/plain; charset=utf-8", NULL, text, len, head);
    free(text);
    return;
  }
  if (!is_metrics && !is_health && !is_live) {
    respond_text(c, 404, "Not Found", "not found (try /metrics, /healthz or /livez)\n", NULL, head);
    return;
  }
  if (!get && !head) {
    respond_text(c, 405, "Method Not Allowed", "method not allowed\n", "Allow: GET, HEAD\r\n", 0);
    return;
  }
  if (is_live) {
    char why[256];
    if (!sac_http_live(atomic_load(&c->h->beat_ns), sac_clock_ns(), c->h->cfg.live_silence_s, why,
                       sizeof why - 2)) {
      strcat(why, "\n");
      respond_text(c, 503, "Service Unavailable", why, NULL, head);
      return;
    }
    respond_text(c, 200, "OK", "ok\n", NULL, head);
    return;
  }
  if (is_health) {
    char why[512] = "ok";
    pthread_mutex_lock(&c->h->health_mu);
    int ok = !c->h->cfg.health || c->h->cfg.health(c->h->cfg.health_ud, why, sizeof why - 2);
    pthread_mutex_unlock(&c->h->health_mu);
    if (!ok) {
      strcat(why, "\n");
      respond_text(c, 503, "Service Unavailable", why, NULL, head);
      return;
    }
    respond_text(c, 200, "OK", "ok\n", NULL, head);
    return;
  }
  char *text = NULL;
  size_t len = 0;
  if (!c->h->metrics || sac_metrics_render(c->h->metrics, &text, &len) != 0) {
    respond_text(c, 503, "Service Unavailable", "metrics unavailable\n", NULL, head);
    return;
  }
  respond(c, 200, "OK", SAC_METRICS_CONTENT_TYPE, NULL, text, len, head);
  free(text);
}

static void on_alloc(uv_handle_t *hd, size_t suggested, uv_buf_t *buf) {
  (void)suggested;
  conn_t *c = hd->data;
  size_t room = c->h->cfg.max_request_bytes - c->len;
  *buf = uv_buf_init(c->req + c->len, (unsigned int)room); /* room 0: read reports UV_ENOBUFS */
}

/* Index just past the blank line ending the headers ("\r\n\r\n" or "\n\n"), or 0. */
static size_t header_end(const char *s, size_t n, size_t from) {
  for (size_t i = from > 3 ? from - 3 : 0; i < n; i++) {
    if (s[i] != '\n')
      continue;
    if (i >= 1 && s[i - 1] == '\n')
      return i + 1;
    if (i >= 2 && s[i - 1] == '\r' && s[i - 2] == '\n')
      return i + 1;
  }
  return 0;
}

/* nread more bytes of the request arrived at c->req + c->len. */
static void took(conn_t *c, size_t nread) {
  size_t before = c->len;
  c->len += nread;
  c->req[c->len] = '\0';
  if (header_end(c->req, c->len, before) > 0)
    handle(c);
  else if (c->len >= c->h->cfg.max_request_bytes)
    respond_text(c, 431, "Request Header Fields Too Large", "request too large\n", NULL, 0);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  (void)buf;
  conn_t *c = s->data;
  if (c->state != C_READING)
    return;
  if (nread == UV_ENOBUFS) {
    respond_text(c, 431, "Request Header Fields Too Large", "request too large\n", NULL, 0);
    return;
  }
  if (nread < 0) { /* EOF before a whole request, or an error */
    conn_close(c);
    return;
  }
  took(c, (size_t)nread);
}

/* Reads what has already arrived on a just-accepted connection. A health probe sends its
 * request with the connect, so it is answered here, before later connections of the
 * same burst could evict it from the reading list. */
static void read_arrived(conn_t *c) {
  uv_os_fd_t fd;
  if (uv_fileno((const uv_handle_t *)&c->tcp, &fd) != 0)
    return;
  ssize_t k = recv(fd, c->req, c->h->cfg.max_request_bytes, MSG_DONTWAIT);
  if (k > 0)
    took(c, (size_t)k);
  /* nothing yet, EOF or an error: the read callback sees it */
}

static void on_reject_closed(uv_handle_t *hd) { free(hd); }

static void on_connection(uv_stream_t *server, int status) {
  sac_http_t *h = server->data;
  if (status < 0) {
    SAC_DEBUG("http", "accept failed: %s", uv_strerror(status));
    return;
  }
  if (h->n_conns >= h->cfg.max_connections && h->reading_head) {
    /* Full: the connection that has been reading its request longest makes room. A
     * health check sends its request at once, so slow or silent clients (slowloris)
     * are the ones evicted, never the probe that keeps a container alive. */
    atomic_fetch_add(&h->evicted, 1);
    conn_close(h->reading_head);
  }
  if (h->n_conns >= h->cfg.max_connections) {
    /* every slot is writing a response: accept and close at once (leaving it in the
     * backlog would stall the listener) */
    atomic_fetch_add(&h->rejected, 1);
    uv_tcp_t *t = malloc(sizeof *t);
    if (!t)
      return;
    if (uv_tcp_init(&h->loop, t) != 0) {
      free(t);
      return;
    }
    t->data = NULL;
    uv_accept(server, (uv_stream_t *)t);
    uv_close((uv_handle_t *)t, on_reject_closed);
    return;
  }
  conn_t *c = calloc(1, sizeof *c);
  char *req = malloc(h->cfg.max_request_bytes + 1);
  if (!c || !req || uv_tcp_init(&h->loop, &c->tcp) != 0) {
    free(c);
    free(req);
    return;
  }
  c->h = h;
  c->req = req;
  c->tcp.data = c;
  c->open_handles = 1;
  if (uv_timer_init(&h->loop, &c->timer) != 0) {
    c->closing = 1;
    uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
    return;
  }
  c->timer.data = c;
  c->open_handles = 2;
  c->counted = 1;
  h->n_conns++;
  enlist(c);
  uint64_t header_ms =
      (uint64_t)(h->cfg.header_timeout_ms < h->cfg.timeout_ms ? h->cfg.header_timeout_ms : h->cfg.timeout_ms);
  if (uv_accept(server, (uv_stream_t *)&c->tcp) != 0 ||
      uv_timer_start(&c->timer, on_timeout, header_ms, 0) != 0 ||
      uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0) {
    conn_close(c);
    return;
  }
  read_arrived(c);
}

/* ---- life cycle -------------------------------------------------------------------- */

/* Every handle of the loop is the listener, the wake-up, or a connection's tcp or timer
 * (a rejected connection is already closing). */
static void close_all(uv_handle_t *hd, void *arg) {
  sac_http_t *h = arg;
  if (uv_is_closing(hd))
    return;
  if (hd == (uv_handle_t *)&h->server || hd == (uv_handle_t *)&h->wake)
    uv_close(hd, NULL);
  else
    conn_close(hd->data);
}

static void on_wake(uv_async_t *a) {
  sac_http_t *h = a->data;
  uv_walk(&h->loop, close_all, h);
}

static void run(void *arg) {
  sac_http_t *h = arg;
  uv_run(&h->loop, UV_RUN_DEFAULT); /* returns when on_wake has closed every handle */
}

/* Seconds since the owner's main loop last beat, -1 before its first beat. */
static double quiet_s(uint64_t beat_ns, uint64_t now_ns) {
  return !beat_ns ? -1.0 : now_ns > beat_ns ? (double)(now_ns - beat_ns) * 1e-9 : 0.0;
}

static double read_silence(const void *arg) {
  return quiet_s(atomic_load_explicit(&((const sac_http_t *)arg)->beat_ns, memory_order_relaxed),
                 sac_clock_ns());
}

/* The server's own series. Missing series (a registry out of memory) only cost
 * visibility, so failures are left to the registry's log line. */
static void register_metrics(sac_http_t *h) {
  if (!h->metrics)
    return;
  sac_metrics_gauge_read(h->metrics, "sac_main_loop_silence_seconds",
                         "seconds since the process's main loop last turned (what /livez looks at; -1 before "
                         "its first turn)",
                         NULL, read_silence, h, 1.0, h);
  sac_metrics_counter_read(
      h->metrics, "sac_http_connections_evicted_total",
      "connections still sending their request closed to make room for a new one (server full)", NULL,
      sac_metric_read_atomic_u64, &h->evicted, 1.0, h);
  sac_metrics_counter_read(h->metrics, "sac_http_connections_rejected_total",
                           "connections closed at accept: every slot was busy answering", NULL,
                           sac_metric_read_atomic_u64, &h->rejected, 1.0, h);
  sac_metrics_counter_read(
      h->metrics, "sac_http_header_timeouts_total",
      "connections closed because their request was not complete within header_timeout_ms", NULL,
      sac_metric_read_atomic_u64, &h->header_timeouts, 1.0, h);
}

/* Closes what start set up, for a failed start (the thread never ran). */
static void teardown(sac_http_t *h, int server_open, int wake_open) {
  if (server_open)
    uv_close((uv_handle_t *)&h->server, NULL);
  if (wake_open)
    uv_close((uv_handle_t *)&h->wake, NULL);
  uv_run(&h->loop, UV_RUN_DEFAULT);
  uv_loop_close(&h->loop);
  free(h);
}

int sac_http_start(const sac_http_config_t *cfg, sac_metrics_t *metrics, sac_http_t **out) {
  *out = NULL;
  if (cfg->port < 0 || cfg->port > 65535 || cfg->max_request_bytes < 64 ||
      cfg->max_request_bytes > (1u << 24) || cfg->max_connections < 1 || cfg->timeout_ms < 1 ||
      cfg->header_timeout_ms < 1 || !(cfg->live_silence_s > 0.0)) {
    SAC_ERROR("http",
              "bad server settings (port %d, %zu request bytes, %d connections, %d ms, %d ms for headers, "
              "%g s of silence for /livez)",
              cfg->port, cfg->max_request_bytes, cfg->max_connections, cfg->timeout_ms,
              cfg->header_timeout_ms, cfg->live_silence_s);
    return SAC_ECONFIG;
  }
  struct sockaddr_storage sa;
  int rc = strchr(cfg->addr, ':') ? uv_ip6_addr(cfg->addr, cfg->port, (struct sockaddr_in6 *)&sa)
                                  : uv_ip4_addr(cfg->addr, cfg->port, (struct sockaddr_in *)&sa);
  if (rc != 0) {
    SAC_ERROR("http", "bind address \"%s\" is not a numeric IPv4 or IPv6 address", cfg->addr);
    return SAC_ECONFIG;
  }
  sac_http_t *h = calloc(1, sizeof *h);
  if (!h)
    return SAC_ENOMEM;
  h->cfg = *cfg;
  h->metrics = metrics;
  pthread_mutex_init(&h->health_mu, NULL);
  atomic_init(&h->evicted, 0);
  atomic_init(&h->rejected, 0);
  atomic_init(&h->header_timeouts, 0);
  atomic_init(&h->beat_ns, 0);
  if ((rc = uv_loop_init(&h->loop)) != 0) {
    SAC_ERROR("http", "uv_loop_init: %s", uv_strerror(rc));
    free(h);
    return SAC_ENOMEM;
  }
  if ((rc = uv_tcp_init(&h->loop, &h->server)) != 0) {
    SAC_ERROR("http", "uv_tcp_init: %s", uv_strerror(rc));
    teardown(h, 0, 0);
    return SAC_ENET;
  }
  h->server.data = h;
  if ((rc = uv_tcp_bind(&h->server, (const struct sockaddr *)&sa, 0)) != 0 ||
      (rc = uv_listen((uv_stream_t *)&h->server, 128, on_connection)) != 0) {
    SAC_ERROR("http", "cannot listen on %s port %d: %s", cfg->addr, cfg->port, uv_strerror(rc));
    teardown(h, 1, 0);
    return SAC_ENET;
  }
  struct sockaddr_storage bound;
  int blen = (int)sizeof bound;
  if ((rc = uv_tcp_getsockname(&h->server, (struct sockaddr *)&bound, &blen)) != 0) {
    SAC_ERROR("http", "uv_tcp_getsockname: %s", uv_strerror(rc));
    teardown(h, 1, 0);
    return SAC_ENET;
  }
  h->port = bound.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&bound)->sin6_port)
                                        : ntohs(((struct sockaddr_in *)&bound)->sin_port);
  if ((rc = uv_async_init(&h->loop, &h->wake, on_wake)) != 0) {
    SAC_ERROR("http", "uv_async_init: %s", uv_strerror(rc));
    teardown(h, 1, 0);
    return SAC_ENOMEM;
  }
  h->wake.data = h;
  /* The thread starts with every signal blocked: signal handlers run on the caller's
   * threads, and a write to a closed peer fails with EPIPE instead of killing us. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  rc = uv_thread_create(&h->thread, run, h);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0) {
    SAC_ERROR("http", "cannot start the server thread: %s", uv_strerror(rc));
    teardown(h, 1, 1);
    return SAC_ENOMEM;
  }
  register_metrics(h);
  *out = h;
  return 0;
}

int sac_http_port(const sac_http_t *h) { return h->port; }

void sac_http_stop(sac_http_t **hp) {
  sac_http_t *h = *hp;
  if (!h)
    return;
  uv_async_send(&h->wake);
  uv_thread_join(&h->thread);
  if (h->metrics)
    sac_metrics_forget(h->metrics, h);
  int rc = uv_loop_close(&h->loop);
  if (rc != 0)
    SAC_WARN("http", "uv_loop_close: %s", uv_strerror(rc));
  free(atomic_load(&h->route));
  pthread_mutex_destroy(&h->health_mu);
  free(h);
  *hp = NULL;
}

void sac_http_set_health(sac_http_t *h, int (*health)(void *ud, char *why, size_t cap), void *ud) {
  pthread_mutex_lock(&h->health_mu);
  h->cfg.health = health;
  h->cfg.health_ud = ud;
  pthread_mutex_unlock(&h->health_mu);
}

void sac_http_beat(sac_http_t *h) {
  if (h)
    atomic_store_explicit(&h->beat_ns, sac_clock_ns(), memory_order_relaxed);
}

int sac_http_live(uint64_t beat_ns, uint64_t now_ns, double silence_s, char *why, size_t cap) {
  const double quiet = quiet_s(beat_ns, now_ns); /* -1 before the first beat: live */
  if (quiet <= silence_s) {
    snprintf(why, cap, "ok");
    return 1;
  }
  snprintf(why, cap, "not live: the main loop has not turned for %.0f s (limit %.0f s)", quiet, silence_s);
  return 0;
}

int sac_http_add_route(sac_http_t *h, const char *path, sac_http_render_fn render, void *user) {
  struct route *r = calloc(1, sizeof *r);
  if (!r)
    return SAC_ENOMEM;
  snprintf(r->path, sizeof r->path, "%s", path);
  r->render = render;
  r->user = user;
  struct route *none = NULL;
  if (!atomic_compare_exchange_strong(&h->route, &none, r)) {
    free(r);
    return SAC_ESTATE;
  }
  return 0;
}

sac_http_t *sac_http_serve_metrics(const char *component, const char *addr, int port,
                                   sac_metrics_t *metrics) {
  return sac_http_serve_metrics_health(component, addr, port, metrics, NULL, NULL);
}

sac_http_t *sac_http_serve_metrics_health(const char *component, const char *addr, int port,
                                          sac_metrics_t *metrics, int (*health)(void *, char *, size_t),
                                          void *health_ud) {
  if (port < 0) {
    SAC_INFO(component, "metrics endpoint disabled (metrics_port < 0)");
    return NULL;
  }
  sac_http_config_t c;
  sac_http_config_default(&c);
  if (snprintf(c.addr, sizeof c.addr, "%s", addr) >= (int)sizeof c.addr) {
    SAC_ERROR(component, "metrics_addr \"%s\" is too long; no metrics endpoint", addr);
    return NULL;
  }
  c.port = port;
  c.health = health;
  c.health_ud = health_ud;
  sac_http_t *h = NULL;
  int rc = sac_http_start(&c, metrics, &h);
  if (rc != 0) {
    SAC_ERROR(component,
              "no metrics endpoint: cannot serve on %s port %d (%s); if another process has the port: "
              "--metrics_port 0 picks a free one (logged), --metrics_port -1 turns the endpoint off",
              addr, port, sac_strerror(rc));
    return NULL;
  }
  SAC_INFO(component, "metrics on http://%s%s%s:%d/metrics", strchr(addr, ':') ? "[" : "", addr,
           strchr(addr, ':') ? "]" : "", sac_http_port(h));
  return h;
}
