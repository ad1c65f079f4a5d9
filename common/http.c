/* The operations HTTP server (see http.h) on libuv. Everything after sac_http_start has
 * bound the socket runs on the server's own thread: accept, read into the connection's
 * fixed request buffer until the blank line that ends the headers, answer with one
 * write, half-close, discard whatever the client still sends until it closes (so the
 * kernel does not reset the connection under an unread response), close. A timer per
 * connection bounds the whole exchange. sac_http_stop wakes the loop with a uv_async_t,
 * which closes every handle; the loop then runs out of handles and the thread ends. */
#include "common/http.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

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
};

typedef enum { C_READING, C_WRITING, C_DRAINING } conn_state_t;

typedef struct {
  sac_http_t *h;
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
  c->max_connections = 64;
  c->timeout_ms = 10000;
}

/* ---- connections ------------------------------------------------------------------- */

static void on_conn_closed(uv_handle_t *hd) {
  conn_t *c = hd->data;
  if (--c->open_handles > 0)
    return;
  if (c->counted)
    c->h->n_conns--;
  free(c->req);
  free(c->resp);
  free(c);
}

static void conn_close(conn_t *c) {
  if (c->closing)
    return;
  c->closing = 1;
  uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
  uv_close((uv_handle_t *)&c->timer, on_conn_closed);
}

static void on_timeout(uv_timer_t *t) { conn_close(t->data); }

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
  if (!is_metrics && !is_health) {
    respond_text(c, 404, "Not Found", "not found (try /metrics or /healthz)\n", NULL, head);
    return;
  }
  if (!get && !head) {
    respond_text(c, 405, "Method Not Allowed", "method not allowed\n", "Allow: GET, HEAD\r\n", 0);
    return;
  }
  if (is_health) {
    char why[512] = "ok";
    if (c->h->cfg.health && !c->h->cfg.health(c->h->cfg.health_ud, why, sizeof why - 2)) {
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
  size_t before = c->len;
  c->len += (size_t)nread;
  c->req[c->len] = '\0';
  if (header_end(c->req, c->len, before) > 0)
    handle(c);
  else if (c->len >= c->h->cfg.max_request_bytes)
    respond_text(c, 431, "Request Header Fields Too Large", "request too large\n", NULL, 0);
}

static void on_reject_closed(uv_handle_t *hd) { free(hd); }

static void on_connection(uv_stream_t *server, int status) {
  sac_http_t *h = server->data;
  if (status < 0) {
    SAC_DEBUG("http", "accept failed: %s", uv_strerror(status));
    return;
  }
  if (h->n_conns >= h->cfg.max_connections) {
    /* accept and close at once: leaving it in the backlog would stall the listener */
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
  if (uv_accept(server, (uv_stream_t *)&c->tcp) != 0 ||
      uv_timer_start(&c->timer, on_timeout, (uint64_t)h->cfg.timeout_ms, 0) != 0 ||
      uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0)
    conn_close(c);
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
      cfg->max_request_bytes > (1u << 24) || cfg->max_connections < 1 || cfg->timeout_ms < 1) {
    SAC_ERROR("http", "bad server settings (port %d, %zu request bytes, %d connections, %d ms)", cfg->port,
              cfg->max_request_bytes, cfg->max_connections, cfg->timeout_ms);
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
  int rc = uv_loop_close(&h->loop);
  if (rc != 0)
    SAC_WARN("http", "uv_loop_close: %s", uv_strerror(rc));
  free(h);
  *hp = NULL;
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
    SAC_ERROR(component, "no metrics endpoint: cannot serve on %s port %d (%s)", addr, port,
              sac_strerror(rc));
    return NULL;
  }
  SAC_INFO(component, "metrics on http://%s%s%s:%d/metrics", strchr(addr, ':') ? "[" : "", addr,
           strchr(addr, ':') ? "]" : "", sac_http_port(h));
  return h;
}
