/* A minimal HTTP/1.1 server for operations endpoints: GET (or HEAD) /metrics renders a
 * metrics registry (common/metrics.h), /healthz answers "ok" (or the owner's check: is
 * the process ready, or waiting on something) and /livez whether the owner's main loop
 * still turns (a restart helps only when it does not); any other path is a
 * 404, any other method a 405, anything unparsable a 400, an oversized request a 431.
 * One request per connection (the response says Connection: close). It runs a libuv
 * loop on a thread of its own, so a slow scrape never stalls the caller's work.
 *
 * It is not a general web server: no keep-alive, no request bodies, no TLS, no
 * chunked encoding. It is built to survive what a network does to it: requests are
 * read into a fixed buffer, a request must be complete within header_timeout_ms of the
 * accept and the whole exchange within timeout_ms of the request (slow or silent clients
 * are dropped when a deadline passes), a new connection over the limit evicts the one
 * that has been sending its request longest (or, when every slot is answering, is
 * accepted and closed at once), and any error closes the connection and nothing else.
 * So a slowloris attack cannot starve /healthz. Counters of evictions, rejections and
 * header timeouts go to the metrics registry (sac_http_*_total).
 *
 * Thread-safety: sac_http_start and sac_http_stop from one owner thread; sac_http_port
 * from any thread. The registry is borrowed and must outlive the server. */
#ifndef SAC_COMMON_HTTP_H
#define SAC_COMMON_HTTP_H
#include <stddef.h>
#include <stdint.h>

#include "common/metrics.h"

typedef struct {
  char addr[64];            /* numeric IPv4 or IPv6 address to bind, e.g. "0.0.0.0", "127.0.0.1", "::" */
  int port;                 /* 0: a free port (see sac_http_port) */
  size_t max_request_bytes; /* request line and headers; default 8192 */
  int max_connections;      /* open at once; default 256 (a quarter of RLIMIT_NOFILE when lower) */
  int timeout_ms;           /* deadline of the response and drain, from the request; default 10000 */
  int header_timeout_ms;    /* the request must be complete this long after accept; default 2000 */
  /* /healthz: NULL answers 200 "ok"; else 200 "ok" when health(health_ud, why, cap)
   * returns 1, 503 with the text it wrote in why when it returns 0. Called on the
   * server's thread, so it must be thread-safe. */
  int (*health)(void *ud, char *why, size_t cap);
  void *health_ud;
  /* /livez: 200 "ok" while the process's main loop turns (sac_http_beat), 503 once its
   * last beat is older than live_silence_s (default 120); 200 before the first beat. */
  double live_silence_s;
} sac_http_config_t;

/* Defaults: 0.0.0.0, port 0, 8 KiB requests, 256 connections (fewer when the process
 * may open fewer than 1024 descriptors), 2 s to send the request, 10 s for the rest. */
void sac_http_config_default(sac_http_config_t *c);

typedef struct sac_http sac_http_t;

/* Binds, listens and starts the server's thread; returns once it is accepting. 0;
 * SAC_ECONFIG (address not numeric, bad limits: logged), SAC_ENET (cannot bind or
 * listen, e.g. the port is taken: logged), SAC_ENOMEM. *out is NULL on failure. */
int sac_http_start(const sac_http_config_t *cfg, sac_metrics_t *metrics, sac_http_t **out);
/* The port bound (the free port chosen when the config said 0). */
int sac_http_port(const sac_http_t *h);
/* One extra GET route (e.g. the replay shard's /provenance): render is called on the
 * server's thread with the query string after '?' (possibly empty) and returns 0 with a
 * malloc'd text/plain body in *text (*len bytes), or nonzero for a 503. Set once, after
 * start; a second call is refused (SAC_ESTATE). 0 or SAC_ENOMEM / SAC_ESTATE. */
typedef int (*sac_http_render_fn)(void *user, const char *query, size_t query_len, char **text, size_t *len);
int sac_http_add_route(sac_http_t *h, const char *path, sac_http_render_fn render, void *user);
/* Replaces the /healthz check (sac_http_config_t.health; NULL: "ok") while the server
 * runs, e.g. a training run's for as long as it lasts. When it returns, the old check is
 * no longer running and will not be called again. Thread-safe. */
void sac_http_set_health(sac_http_t *h, int (*health)(void *ud, char *why, size_t cap), void *ud);
/* The main loop turned (for /livez): a clock read and an atomic store, so a loop may
 * call it on every turn. NULL h: nothing. Thread-safe. */
void sac_http_beat(sac_http_t *h);
/* /livez's answer at now_ns for a loop last beaten at beat_ns (0: never): 1, or 0 with
 * the reason in why ("not live: ..."). */
int sac_http_live(uint64_t beat_ns, uint64_t now_ns, double silence_s, char *why, size_t cap);
/* Stops accepting, closes every connection, joins the thread and frees. Idempotent,
 * nulls *h. Cannot fail. */
void sac_http_stop(sac_http_t **h);

/* Helper for the binaries: starts the server unless port < 0 (disabled) and logs where
 * it serves ("<component>: metrics on http://ADDR:PORT/metrics"). A failure to start is
 * logged and returns NULL: metrics are not worth stopping a training run for. */
sac_http_t *sac_http_serve_metrics(const char *component, const char *addr, int port, sac_metrics_t *metrics);
/* The same with a /healthz check (sac_http_config_t.health). */
sac_http_t *sac_http_serve_metrics_health(const char *component, const char *addr, int port,
                                          sac_metrics_t *metrics, int (*health)(void *, char *, size_t),
                                          void *health_ud);

#endif
