/* Tests of common/metrics and common/http: the exact text rendering of counters, gauges
 * and histograms (HELP/TYPE lines, cumulative buckets, +Inf, _sum/_count), label and
 * HELP escaping, name checks, read series, collectors and forget, process metrics,
 * concurrent updates; the HTTP server on port 0 answering /metrics, /healthz, 404, 405,
 * HEAD, bad and oversized requests, random bytes, slow clients, too many connections,
 * and stopping with connections open; and `promtool check metrics` over the series the
 * three binaries export (skipped, saying so, where promtool is not installed:
 * scripts/install-deps.sh installs it). */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "actor/actor_metrics.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/http.h"
#include "common/metrics.h"
#include "common/rng.h"
#include "learner/service_metrics.h"
#include "replay/server_metrics.h"

static char *render(sac_metrics_t *r) {
  char *text = NULL;
  size_t len = 0;
  cr_assert_eq(sac_metrics_render(r, &text, &len), 0);
  cr_assert_eq(strlen(text), len);
  return text;
}

/* ---- rendering ------------------------------------------------------------------------ */

Test(metrics, renders_the_exposition_format_exactly) {
  sac_metrics_t *r = sac_metrics_new();
  cr_assert_not_null(r);
  sac_metric_t *c = sac_metrics_counter(r, "jobs_total", "Jobs done.", NULL, NULL);
  sac_metric_t *g =
      sac_metrics_gauge(r, "temp_celsius", "Temperature.", (const char *const[]){"room", "a", NULL}, NULL);
  sac_metric_t *g2 =
      sac_metrics_gauge(r, "temp_celsius", "ignored", (const char *const[]){"room", "b", NULL}, NULL);
  const double bounds[] = {0.1, 1};
  sac_metric_t *h = sac_metrics_histogram(r, "lat_seconds", "Latency.", NULL, bounds, 2, NULL);
  cr_assert(c && g && g2 && h);
  sac_metric_add(c, 3);
  sac_metric_inc(c);
  sac_metric_set(g, -1.5);
  sac_metric_set(g2, 1e21);
  /* 0.0625 <= 0.1; 1 is in le="1" (upper bounds are inclusive); 0.5 too; 4 only in +Inf */
  sac_metric_observe(h, 0.0625);
  sac_metric_observe(h, 1.0);
  sac_metric_observe(h, 0.5);
  sac_metric_observe(h, 4.0);
  sac_metric_observe(h, NAN); /* ignored */
  char *text = render(r);
  const char *want = "# HELP jobs_total Jobs done.\n"
                     "# TYPE jobs_total counter\n"
                     "jobs_total 4\n"
                     "# HELP temp_celsius Temperature.\n"
                     "# TYPE temp_celsius gauge\n"
                     "temp_celsius{room=\"a\"} -1.5\n"
                     "temp_celsius{room=\"b\"} 1e+21\n"
                     "# HELP lat_seconds Latency.\n"
                     "# TYPE lat_seconds histogram\n"
                     "lat_seconds_bucket{le=\"0.1\"} 1\n"
                     "lat_seconds_bucket{le=\"1\"} 3\n"
                     "lat_seconds_bucket{le=\"+Inf\"} 4\n"
                     "lat_seconds_sum 5.5625\n"
                     "lat_seconds_count 4\n";
  cr_expect_str_eq(text, want);
  cr_expect_eq(sac_metric_value(h), 4.0);
  cr_expect_eq(sac_metric_value(c), 4.0);
  free(text);
  sac_metrics_destroy(&r);
  cr_expect_null(r);
  sac_metrics_destroy(&r); /* idempotent */
}

Test(metrics, histogram_buckets_are_cumulative_with_labels) {
  sac_metrics_t *r = sac_metrics_new();
  size_t nb;
  const double *b = sac_metrics_latency_buckets(&nb);
  cr_assert_gt(nb, 10);
  for (size_t i = 1; i < nb; i++)
    cr_assert_gt(b[i], b[i - 1]);
  sac_metric_t *h = sac_metrics_histogram(r, "op_duration_seconds", "Op time.",
                                          (const char *const[]){"op", "x", NULL}, b, nb, NULL);
  cr_assert_not_null(h);
  /* one observation per bucket boundary, one above the last */
  for (size_t i = 0; i < nb; i++)
    sac_metric_observe(h, b[i]);
  sac_metric_observe(h, 1e9);
  char *text = render(r);
  for (size_t i = 0; i < nb; i++) {
    char le[64], line[160];
    snprintf(le, sizeof le, "%.17g", b[i]);
    double back = strtod(le, NULL);
    cr_assert_eq(back, b[i]);
    /* find the bucket line for bound i and check its cumulative count */
    const char *p = text;
    int found = 0;
    for (;;) {
      p = strstr(p, "op_duration_seconds_bucket{op=\"x\",le=\"");
      if (!p)
        break;
      double bound = strtod(p + strlen("op_duration_seconds_bucket{op=\"x\",le=\""), NULL);
      if (bound == b[i]) {
        const char *sp = strchr(p, ' ');
        snprintf(line, sizeof line, "%.*s", (int)(strchr(p, '\n') - p), p);
        cr_expect_eq(strtod(sp + 1, NULL), (double)(i + 1), "%s", line);
        found = 1;
        break;
      }
      p++;
    }
    cr_expect(found, "no bucket line for %g", b[i]);
  }
  cr_expect(strstr(text, "op_duration_seconds_bucket{op=\"x\",le=\"+Inf\"} ") != NULL);
  char want[64];
  snprintf(want, sizeof want, "op_duration_seconds_count{op=\"x\"} %zu\n", nb + 1);
  cr_expect(strstr(text, want) != NULL, "%s", text);
  free(text);
  sac_metrics_destroy(&r);
}

Test(metrics, escapes_label_values_and_help) {
  sac_metrics_t *r = sac_metrics_new();
  sac_metric_t *g = sac_metrics_gauge(r, "x", "line one\nback\\slash \"quoted\"",
                                      (const char *const[]){"path", "C:\\dir\n\"q\"", "b", "", NULL}, NULL);
  cr_assert_not_null(g);
  sac_metric_set(g, 2);
  char *text = render(r);
  cr_expect_str_eq(text, "# HELP x line one\\nback\\\\slash \"quoted\"\n"
                         "# TYPE x gauge\n"
                         "x{path=\"C:\\\\dir\\n\\\"q\\\"\",b=\"\"} 2\n");
  free(text);
  sac_metrics_destroy(&r);
}

Test(metrics, special_values) {
  sac_metrics_t *r = sac_metrics_new();
  sac_metric_t *a = sac_metrics_gauge(r, "a", "", NULL, NULL), *b = sac_metrics_gauge(r, "b", "", NULL, NULL);
  sac_metric_t *c = sac_metrics_gauge(r, "c", "", NULL, NULL), *d = sac_metrics_gauge(r, "d", "", NULL, NULL);
  sac_metric_set(a, NAN);
  sac_metric_set(b, INFINITY);
  sac_metric_set(c, -INFINITY);
  sac_metric_set(d, 0.1);
  char *text = render(r);
  cr_expect(strstr(text, "\na NaN\n") && strstr(text, "\nb +Inf\n") && strstr(text, "\nc -Inf\n") &&
                strstr(text, "\nd 0.1\n"),
            "%s", text);
  free(text);
  sac_metrics_destroy(&r);
}

Test(metrics, checks_names_types_and_labels) {
  sac_metrics_t *r = sac_metrics_new();
  cr_expect_null(sac_metrics_counter(r, "jobs", "a counter without _total", NULL, NULL));
  cr_expect_null(sac_metrics_gauge(r, "9lives", "", NULL, NULL));
  cr_expect_null(sac_metrics_gauge(r, "with-dash", "", NULL, NULL));
  cr_expect_null(sac_metrics_gauge(r, "", "", NULL, NULL));
  cr_expect_not_null(sac_metrics_gauge(r, "ns:name_1", "", NULL, NULL));
  cr_expect_null(sac_metrics_gauge(r, "g", "", (const char *const[]){"bad-label", "v", NULL}, NULL));
  cr_expect_null(sac_metrics_gauge(r, "g", "", (const char *const[]){"__reserved", "v", NULL}, NULL));
  cr_expect_null(sac_metrics_gauge(r, "g", "", (const char *const[]){"k", NULL}, NULL)); /* no value */
  cr_expect_null(sac_metrics_gauge(
      r, "g", "", (const char *const[]){"a", "1", "b", "2", "c", "3", "d", "4", "e", "5", NULL}, NULL));
  const double bounds[] = {1, 2}, bad[] = {2, 1};
  cr_expect_null(sac_metrics_histogram(r, "h", "", (const char *const[]){"le", "1", NULL}, bounds, 2, NULL));
  cr_expect_null(sac_metrics_histogram(r, "h", "", NULL, bad, 2, NULL));
  cr_expect_null(sac_metrics_histogram(r, "h", "", NULL, bounds, 0, NULL));
  sac_metric_t *h = sac_metrics_histogram(r, "h", "", NULL, bounds, 2, NULL);
  cr_expect_not_null(h);
  cr_expect_eq(sac_metrics_histogram(r, "h", "", NULL, bounds, 2, NULL), h); /* the same series again */
  cr_expect_null(sac_metrics_histogram(r, "h", "", NULL, bounds, 1, NULL));  /* other buckets */
  sac_metric_t *c = sac_metrics_counter(r, "n_total", "", (const char *const[]){"k", "v", NULL}, NULL);
  cr_expect_eq(sac_metrics_counter(r, "n_total", "", (const char *const[]){"k", "v", NULL}, NULL), c);
  cr_expect_neq(sac_metrics_counter(r, "n_total", "", (const char *const[]){"k", "w", NULL}, NULL), c);
  cr_expect_null(sac_metrics_gauge(r, "n_total", "", NULL, NULL)); /* type clash */
  /* wrong-kind updates are ignored, NULL is accepted everywhere */
  sac_metric_add(c, -1);
  sac_metric_observe(c, 1);
  sac_metric_add(h, 1);
  sac_metric_set(h, 1);
  cr_expect_eq(sac_metric_value(c), 0);
  cr_expect_eq(sac_metric_value(h), 0);
  sac_metric_inc(NULL);
  sac_metric_set(NULL, 1);
  sac_metric_observe(NULL, 1);
  cr_expect_eq(sac_metric_value(NULL), 0);
  cr_expect_null(sac_metrics_gauge(NULL, "g", "", NULL, NULL));
  sac_metrics_destroy(&r);
}

static double read_twice(const void *arg) { return 2.0 * *(const double *)arg; }

typedef struct {
  int calls;
  sac_metric_t *g;
  int *freed;
} coll_t;

static void collect(void *user) {
  coll_t *c = user;
  c->calls++;
  sac_metric_set(c->g, c->calls);
}

static void coll_free(void *user) { *((coll_t *)user)->freed = 1; }

Test(metrics, read_series_collectors_and_forget) {
  sac_metrics_t *r = sac_metrics_new();
  static atomic_uint_fast64_t ns;
  atomic_store(&ns, 2500000000u);
  double v = 21;
  int owner_a, owner_b, freed = 0;
  cr_assert_not_null(sac_metrics_counter_read(r, "wait_seconds_total", "Wait.", NULL,
                                              sac_metric_read_atomic_u64, &ns, 1e-9, &owner_a));
  cr_assert_not_null(sac_metrics_gauge_read(r, "answer", "Answer.", NULL, read_twice, &v, 1.0, &owner_b));
  coll_t c = {0, sac_metrics_gauge(r, "scrapes", "Scrapes.", NULL, &owner_a), &freed};
  cr_assert_eq(sac_metrics_collector(r, collect, &c, coll_free, &owner_a), 0);
  char *text = render(r);
  cr_expect(strstr(text, "\nwait_seconds_total 2.5\n") && strstr(text, "\nanswer 42\n") &&
                strstr(text, "\nscrapes 1\n"),
            "%s", text);
  free(text);
  atomic_store(&ns, 3000000000u);
  v = 0.5;
  text = render(r);
  cr_expect(strstr(text, "\nwait_seconds_total 3\n") && strstr(text, "\nanswer 1\n") &&
                strstr(text, "\nscrapes 2\n"),
            "%s", text);
  free(text);
  sac_metrics_forget(r, &owner_a);
  cr_expect_eq(freed, 1);
  text = render(r);
  cr_expect_null(strstr(text, "wait_seconds_total"), "%s", text);
  cr_expect_null(strstr(text, "scrapes"), "%s", text);
  cr_expect(strstr(text, "\nanswer 1\n") != NULL);
  cr_expect_eq(c.calls, 2);
  free(text);
  /* registering again after forget works */
  cr_expect_not_null(sac_metrics_gauge(r, "scrapes", "Scrapes.", NULL, &owner_a));
  sac_metrics_destroy(&r);
}

Test(metrics, process_metrics_are_plausible) {
  sac_metrics_t *r = sac_metrics_new();
  cr_assert_eq(sac_metrics_add_process(r), 0);
  volatile double x = 0;
  for (int i = 0; i < 20000000; i++) /* some CPU time to measure */
    x += i * 0.5;
  char *text = render(r);
  const char *names[] = {"process_cpu_seconds_total",
                         "process_resident_memory_bytes",
                         "process_start_time_seconds",
                         "process_virtual_memory_bytes",
                         "process_open_fds",
                         "process_max_fds",
                         "process_threads"};
  double val[7];
  for (int i = 0; i < 7; i++) {
    char key[80];
    snprintf(key, sizeof key, "\n%s ", names[i]);
    const char *p = strstr(text, key);
    cr_assert_not_null(p, "%s missing:\n%s", names[i], text);
    val[i] = strtod(p + strlen(key), NULL);
  }
  double now = (double)sac_wallclock_ns() * 1e-9;
  cr_expect_gt(val[0], 0.0, "cpu seconds");
  cr_expect_gt(val[1], 100000.0, "rss");
  cr_expect(val[2] > now - 3600 && val[2] <= now + 1, "start time %f vs now %f", val[2], now);
  cr_expect_geq(val[4], 3.0, "open fds");
  cr_expect_geq(val[6], 1.0, "threads");
  free(text);
  sac_metrics_destroy(&r);
}

typedef struct {
  sac_metric_t *c, *h;
} hammer_t;

static void *hammer(void *arg) {
  hammer_t *t = arg;
  for (int i = 0; i < 100000; i++) {
    sac_metric_inc(t->c);
    sac_metric_observe(t->h, (i % 4) * 0.5); /* 0, 0.5, 1, 1.5 */
  }
  return NULL;
}

Test(metrics, concurrent_updates_lose_nothing) {
  sac_metrics_t *r = sac_metrics_new();
  const double bounds[] = {0.25, 1.0};
  hammer_t t = {sac_metrics_counter(r, "hits_total", "", NULL, NULL),
                sac_metrics_histogram(r, "v", "", NULL, bounds, 2, NULL)};
  pthread_t th[4];
  for (int i = 0; i < 4; i++)
    cr_assert_eq(pthread_create(&th[i], NULL, hammer, &t), 0);
  for (int k = 0; k < 20; k++) { /* scrapes while it runs */
    char *text = render(r);
    free(text);
  }
  for (int i = 0; i < 4; i++)
    pthread_join(th[i], NULL);
  cr_expect_eq(sac_metric_value(t.c), 400000.0);
  char *text = render(r);
  cr_expect(strstr(text, "v_bucket{le=\"0.25\"} 100000\n") && strstr(text, "v_bucket{le=\"1\"} 300000\n") &&
                strstr(text, "v_bucket{le=\"+Inf\"} 400000\n") && strstr(text, "v_sum 300000\n"),
            "%s", text);
  free(text);
  sac_metrics_destroy(&r);
}

/* ---- HTTP ------------------------------------------------------------------------------ */

static int connect_local(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  cr_assert_geq(fd, 0);
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0, "connect: %s", strerror(errno));
  return fd;
}

/* Reads until EOF or timeout_ms; returns bytes read, -1 on timeout, -2 on reset. */
static long read_all(int fd, char *out, size_t cap, int timeout_ms) {
  size_t n = 0;
  uint64_t end = sac_clock_ns() + (uint64_t)timeout_ms * 1000000ull;
  for (;;) {
    uint64_t now = sac_clock_ns();
    if (now >= end)
      return -1;
    struct pollfd p = {fd, POLLIN, 0};
    int rc = poll(&p, 1, (int)((end - now) / 1000000ull) + 1);
    if (rc < 0 && errno == EINTR)
      continue;
    if (rc <= 0)
      return -1;
    char tmp[4096];
    ssize_t k = recv(fd, tmp, sizeof tmp, 0);
    if (k == 0)
      break;
    if (k < 0)
      return errno == ECONNRESET ? (n ? (long)n : -2) : -2;
    size_t take = n + (size_t)k < cap - 1 ? (size_t)k : cap - 1 - n;
    memcpy(out + n, tmp, take);
    n += take;
  }
  out[n] = '\0';
  return (long)n;
}

/* One request (raw bytes) and the whole response. */
static long exchange(int port, const char *req, size_t len, char *out, size_t cap) {
  int fd = connect_local(port);
  size_t off = 0;
  while (off < len) {
    ssize_t k = send(fd, req + off, len - off, MSG_NOSIGNAL);
    if (k <= 0)
      break; /* the server may close early (431): read what it said */
    off += (size_t)k;
  }
  shutdown(fd, SHUT_WR);
  long n = read_all(fd, out, cap, 5000);
  close(fd);
  return n;
}

static int status_of(const char *resp) {
  int code = 0;
  if (sscanf(resp, "HTTP/1.1 %d", &code) != 1)
    return -1;
  return code;
}

static const char *body_of(const char *resp) {
  const char *p = strstr(resp, "\r\n\r\n");
  return p ? p + 4 : NULL;
}

static sac_metrics_t *g_reg;
static sac_http_t *g_http;
static char g_resp[1 << 20];

static void start_server(int max_conns, int timeout_ms) {
  g_reg = sac_metrics_new();
  cr_assert_not_null(g_reg);
  sac_metric_t *c = sac_metrics_counter(g_reg, "requests_total", "Requests.", NULL, NULL);
  sac_metric_add(c, 7);
  sac_http_config_t cfg;
  sac_http_config_default(&cfg);
  snprintf(cfg.addr, sizeof cfg.addr, "127.0.0.1");
  cfg.port = 0;
  cfg.max_connections = max_conns;
  cfg.timeout_ms = timeout_ms;
  cfg.max_request_bytes = 1024;
  cr_assert_eq(sac_http_start(&cfg, g_reg, &g_http), 0);
  cr_assert_gt(sac_http_port(g_http), 0);
}

static void stop_server(void) {
  sac_http_stop(&g_http);
  cr_expect_null(g_http);
  sac_http_stop(&g_http); /* idempotent */
  sac_metrics_destroy(&g_reg);
}

#define REQ(s) s, sizeof(s) - 1

Test(http, serves_metrics_healthz_and_errors, .timeout = 60) {
  start_server(64, 5000);
  int port = sac_http_port(g_http);
  cr_assert_gt(
      exchange(port, REQ("GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n"), g_resp, sizeof g_resp),
      0);
  cr_expect_eq(status_of(g_resp), 200, "%s", g_resp);
  cr_expect(strstr(g_resp, "\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n") != NULL, "%s",
            g_resp);
  cr_expect(strstr(g_resp, "\r\nConnection: close\r\n") != NULL);
  char *text = render(g_reg);
  cr_expect_str_eq(body_of(g_resp), text);
  char cl[64];
  snprintf(cl, sizeof cl, "\r\nContent-Length: %zu\r\n", strlen(text));
  cr_expect(strstr(g_resp, cl) != NULL, "%s", g_resp);
  free(text);

  exchange(port, REQ("GET /metrics?x=1 HTTP/1.0\n\n"), g_resp, sizeof g_resp); /* bare LF, query string */
  cr_expect_eq(status_of(g_resp), 200, "%s", g_resp);
  exchange(port, REQ("GET /healthz HTTP/1.1\r\n\r\n"), g_resp, sizeof g_resp);
  cr_expect_eq(status_of(g_resp), 200);
  cr_expect_str_eq(body_of(g_resp), "ok\n");
  exchange(port, REQ("HEAD /metrics HTTP/1.1\r\n\r\n"), g_resp, sizeof g_resp);
  cr_expect_eq(status_of(g_resp), 200);
  cr_expect_str_eq(body_of(g_resp), "", "HEAD has no body");
  exchange(port, REQ("GET /nope HTTP/1.1\r\n\r\n"), g_resp, sizeof g_resp);
  cr_expect_eq(status_of(g_resp), 404);
  exchange(port, REQ("GET / HTTP/1.1\r\n\r\n"), g_resp, sizeof g_resp);
  cr_expect_eq(status_of(g_resp), 404);
  exchange(port, REQ("GET /metricsX HTTP/1.1\r\n\r\n"), g_resp, sizeof g_resp);
  cr_expect_eq(status_of(g_resp), 404);
  exchange(port, REQ("POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n"), g_resp, sizeof g_resp);
  cr_expect_eq(status_of(g_resp), 405);
  cr_expect(strstr(g_resp, "\r\nAllow: GET, HEAD\r\n") != NULL);

  const char *bad[] = {"garbage\r\n\r\n",
                       "\r\n\r\n",
                       "GET metrics HTTP/1.1\r\n\r\n",
                       "GET /metrics HTTP/2.0\r\n\r\n",
                       "GET /metrics\r\n\r\n",
                       "GET  /metrics HTTP/1.1\r\n\r\n",
                       "get /metrics HTTP/1.1\r\n\r\n",
                       "GET /met\x01rics HTTP/1.1\r\n\r\n",
                       "GETTTTTTTTTTTTTTTTTTTTTTT /metrics HTTP/1.1\r\n\r\n"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    cr_assert_gt(exchange(port, bad[i], strlen(bad[i]), g_resp, sizeof g_resp), 0, "request %zu", i);
    cr_expect_eq(status_of(g_resp), 400, "request %zu: %s", i, g_resp);
  }
  /* NUL bytes in the request line */
  static const char nul[] = "GET /me\0trics HTTP/1.1\r\n\r\n";
  exchange(port, nul, sizeof nul - 1, g_resp, sizeof g_resp);
  cr_expect_eq(status_of(g_resp), 400);
  /* headers longer than the limit (1024 here), with and without an end */
  static char big[4096];
  memset(big, 'A', sizeof big);
  memcpy(big, "GET /metrics HTTP/1.1\r\nX: ", 26);
  long n = exchange(port, big, sizeof big, g_resp, sizeof g_resp);
  cr_expect(n > 0 && status_of(g_resp) == 431, "oversized: %ld %s", n, n > 0 ? g_resp : "");
  /* the server still serves */
  exchange(port, REQ("GET /healthz HTTP/1.1\r\n\r\n"), g_resp, sizeof g_resp);
  cr_expect_eq(status_of(g_resp), 200);
  stop_server();
}

/* sac_main_loop_silence_seconds as g_reg renders it */
static double silence(void) {
  char *text = render(g_reg);
  const char *at = strstr(text, "\nsac_main_loop_silence_seconds ");
  double v = NAN;
  if (at)
    v = strtod(at + strlen("\nsac_main_loop_silence_seconds "), NULL);
  free(text);
  return v;
}

/* /livez follows the owner's beats: 200 before the first (the loop has not started), 200
 * while they come, 503 with the reason once none came for live_silence_s (the check
 * catching a loop that stopped on purpose), 200 again at the next beat; the gauge
 * sac_main_loop_silence_seconds says -1, then the seconds since the last beat. */
Test(http, livez_follows_the_main_loops_beat, .timeout = 60) {
  g_reg = sac_metrics_new();
  cr_assert_not_null(g_reg);
  sac_http_config_t cfg;
  sac_http_config_default(&cfg);
  cr_expect_eq(cfg.live_silence_s, 120.0, "the default silence limit");
  snprintf(cfg.addr, sizeof cfg.addr, "127.0.0.1");
  cfg.live_silence_s = 0.3;
  cr_assert_eq(sac_http_start(&cfg, g_reg, &g_http), 0);
  int port = sac_http_port(g_http);
  exchange(port, REQ("GET /livez HTTP/1.1\r\n\r\n"), g_resp, sizeof g_resp);
  cr_expect_eq(status_of(g_resp), 200, "before the first beat: %s", g_resp);
  cr_expect_str_eq(body_of(g_resp), "ok\n");
  cr_expect_float_eq(silence(), -1.0, 1e-9, "the gauge before the first beat");
  sac_http_beat(g_http);
  exchange(port, REQ("GET /livez HTTP/1.1\r\n\r\n"), g_resp, sizeof g_resp);
  cr_expect_eq(status_of(g_resp), 200, "just beaten: %s", g_resp);
  const double just = silence();
  cr_expect(just >= 0.0 && just < 0.3, "the gauge just after a beat: %g", just);
  sac_sleep_ns(600000000ull); /* twice the limit without a beat */
  cr_expect(silence() >= 0.6, "the gauge after 0.6 s without a beat: %g", silence());
  exchange(port, REQ("GET /livez HTTP/1.1\r\n\r\n"), g_resp, sizeof g_resp);
  cr_expect_eq(status_of(g_resp), 503, "a loop silent for twice the limit: %s", g_resp);
  cr_expect(strstr(body_of(g_resp), "not live: the main loop has not turned for") != NULL, "%s", g_resp);
  exchange(port, REQ("HEAD /livez HTTP/1.1\r\n\r\n"), g_resp, sizeof g_resp);
  cr_expect_eq(status_of(g_resp), 503, "HEAD too: %s", g_resp);
  exchange(port, REQ("GET /healthz HTTP/1.1\r\n\r\n"), g_resp, sizeof g_resp);
  cr_expect_eq(status_of(g_resp), 200, "/healthz does not look at the beat: %s", g_resp);
  sac_http_beat(g_http);
  exchange(port, REQ("GET /livez HTTP/1.1\r\n\r\n"), g_resp, sizeof g_resp);
  cr_expect_eq(status_of(g_resp), 200, "beaten again: %s", g_resp);
  exchange(port, REQ("POST /livez HTTP/1.1\r\nContent-Length: 0\r\n\r\n"), g_resp, sizeof g_resp);
  cr_expect_eq(status_of(g_resp), 405);
  sac_http_beat(NULL); /* no endpoint: nothing */
  stop_server();
  /* the decision itself, at the edges (seconds as nanoseconds) */
  char why[128];
  cr_expect_eq(sac_http_live(0, 5000000000000ull, 1.0, why, sizeof why), 1, "never beaten");
  cr_expect_eq(sac_http_live(1000000000ull, 2000000000ull, 1.0, why, sizeof why), 1,
               "silent exactly the limit");
  cr_expect_eq(sac_http_live(1000000000ull, 2000000001ull, 1.0, why, sizeof why), 0, "a nanosecond over");
  cr_expect_str_eq(why, "not live: the main loop has not turned for 1 s (limit 1 s)");
  cr_expect_eq(sac_http_live(3000000000ull, 2000000000ull, 1.0, why, sizeof why), 1, "a beat after now");
  cfg.live_silence_s = 0.0;
  sac_metrics_t *r = sac_metrics_new();
  sac_http_t *none = NULL;
  cr_expect_eq(sac_http_start(&cfg, r, &none), SAC_ECONFIG, "a zero silence limit is refused");
  cr_expect_null(none);
  sac_metrics_destroy(&r);
}

Test(http, survives_random_bytes, .timeout = 120) {
  start_server(64, 2000);
  int port = sac_http_port(g_http);
  sac_rng_t rng;
  sac_rng_init(&rng, 5, 0);
  static char junk[3000];
  for (int it = 0; it < 200; it++) {
    size_t len = 1 + (size_t)(sac_rng_uniform(&rng) * (sizeof junk - 1));
    for (size_t i = 0; i < len; i++)
      junk[i] = (char)(int)(sac_rng_uniform(&rng) * 256);
    if (it % 2) /* half of them end the headers, so they are parsed */
      memcpy(junk + (len > 4 ? len - 4 : 0), "\r\n\r\n", len > 4 ? 4 : len);
    long n = exchange(port, junk, len, g_resp, sizeof g_resp);
    if (n > 0) {
      int code = status_of(g_resp);
      cr_expect(code == 400 || code == 404 || code == 405 || code == 431, "iteration %d: %d", it, code);
    }
  }
  exchange(port, REQ("GET /metrics HTTP/1.1\r\n\r\n"), g_resp, sizeof g_resp);
  cr_expect_eq(status_of(g_resp), 200);
  stop_server();
}

Test(http, drops_slow_clients_and_connections_over_the_limit, .timeout = 60) {
  start_server(4, 300);
  int port = sac_http_port(g_http);
  /* a client that sends half a request and goes quiet is closed at the deadline */
  int slow = connect_local(port);
  cr_assert_eq(send(slow, "GET /metr", 9, MSG_NOSIGNAL), 9);
  uint64_t t0 = sac_clock_ns();
  long n = read_all(slow, g_resp, sizeof g_resp, 5000);
  double waited = (double)(sac_clock_ns() - t0) * 1e-9;
  cr_expect(n == 0 || n == -2, "slow client not closed (%ld)", n);
  cr_expect(waited > 0.2 && waited < 3.0, "closed after %.3f s (deadline 0.3 s)", waited);
  close(slow);
  stop_server();
  /* 4 idle connections fill a server with long deadlines; a 5th makes the oldest idle
   * one close at once, long before any deadline, and is itself served */
  start_server(4, 5000);
  port = sac_http_port(g_http);
  int idle[4];
  for (int i = 0; i < 4; i++) {
    idle[i] = connect_local(port);
    sac_sleep_ns(50000000); /* the server accepts them in this order */
  }
  int extra = connect_local(port);
  t0 = sac_clock_ns();
  n = read_all(idle[0], g_resp, sizeof g_resp, 1500);
  cr_expect(n == 0 || n == -2, "the oldest idle connection was not evicted (%ld)", n);
  cr_expect_lt((double)(sac_clock_ns() - t0) * 1e-9, 1.0, "evicted at once, not at a deadline");
  cr_assert_eq(send(extra, REQ("GET /healthz HTTP/1.1\r\n\r\n"), MSG_NOSIGNAL), 25);
  shutdown(extra, SHUT_WR);
  n = read_all(extra, g_resp, sizeof g_resp, 1000);
  cr_expect(n > 0 && status_of(g_resp) == 200, "the newcomer is served (%ld)", n);
  close(extra);
  for (int i = 0; i < 4; i++)
    close(idle[i]);
  /* once the server has seen them go (bounded wait), it serves again */
  int code = -1;
  for (int tries = 0; tries < 60 && code != 200; tries++) {
    sac_sleep_ns(50000000);
    if (exchange(port, REQ("GET /healthz HTTP/1.1\r\n\r\n"), g_resp, sizeof g_resp) > 0)
      code = status_of(g_resp);
  }
  cr_expect_eq(code, 200, "serves again once they are gone");
  /* many clients that connect and vanish */
  for (int i = 0; i < 200; i++)
    close(connect_local(port));
  code = -1;
  for (int tries = 0; tries < 60 && code != 200; tries++) {
    sac_sleep_ns(50000000);
    if (exchange(port, REQ("GET /healthz HTTP/1.1\r\n\r\n"), g_resp, sizeof g_resp) > 0)
      code = status_of(g_resp);
  }
  cr_expect_eq(code, 200, "serves after a flood of connections that vanished");
  stop_server();
}

/* Slowloris (issue 14, defect 13): 200 connections that each send one byte of a request
 * every 200 ms, reconnecting whenever the server closes one, on a server with the 2 s
 * header deadline and 64 connections (the old default), so that the attackers outnumber
 * the slots. /healthz must keep answering within 1 s all along; the old server held its
 * 64 slots for the attackers and closed every probe at once. Bounded: 20 rounds of
 * 200 ms. */
Test(http, slowloris_keeps_healthz_answering, .timeout = 60) {
  g_reg = sac_metrics_new();
  cr_assert_not_null(g_reg);
  sac_http_config_t cfg;
  sac_http_config_default(&cfg);
  snprintf(cfg.addr, sizeof cfg.addr, "127.0.0.1");
  cfg.max_connections =
      64; /* fewer slots than attackers: the eviction path (the default, 256, holds them all) */
  cr_assert_eq(sac_http_start(&cfg, g_reg, &g_http), 0);
  int port = sac_http_port(g_http);
  enum { N_SLOW = 200, ROUNDS = 20 };
  static const char req[] = "GET /healthz HTTP/1.1\r\nX-Slow: ";
  int fds[N_SLOW];
  size_t sent[N_SLOW];
  for (int i = 0; i < N_SLOW; i++)
    fds[i] = connect_local(port), sent[i] = 0;
  int probes = 0, answered = 0, reconnects = 0;
  double worst = 0;
  for (int round = 0; round < ROUNDS; round++) {
    for (int i = 0; i < N_SLOW; i++) {
      struct pollfd p = {fds[i], POLLIN, 0};
      if (poll(&p, 1, 0) > 0 || send(fds[i], &req[sent[i] % (sizeof req - 1)], 1, MSG_NOSIGNAL) != 1) {
        close(fds[i]); /* closed by the server: come back, as an attacker does */
        fds[i] = connect_local(port);
        sent[i] = 0;
        reconnects++;
        continue;
      }
      sent[i]++;
    }
    uint64_t t0 = sac_clock_ns();
    long n = exchange(port, REQ("GET /healthz HTTP/1.1\r\n\r\n"), g_resp, sizeof g_resp);
    double took = (double)(sac_clock_ns() - t0) * 1e-9;
    probes++;
    if (n > 0 && status_of(g_resp) == 200 && took < 1.0)
      answered++;
    worst = took > worst ? took : worst;
    sac_sleep_ns(200000000);
  }
  char *text = render(g_reg);
  cr_expect(strstr(text, "sac_http_connections_evicted_total ") != NULL, "%s", text);
  cr_expect_null(strstr(text, "sac_http_connections_evicted_total 0\n"), "evictions are counted");
  free(text);
  for (int i = 0; i < N_SLOW; i++)
    close(fds[i]);
  stop_server();
  cr_expect_eq(answered, probes,
               "/healthz answered within 1 s %d times of %d (slowest %.3f s, %d reconnects)", answered,
               probes, worst, reconnects);
}

Test(http, stops_with_connections_open, .timeout = 30) {
  start_server(64, 60000);
  int port = sac_http_port(g_http);
  int fds[8];
  for (int i = 0; i < 8; i++) {
    fds[i] = connect_local(port);
    if (i % 2)
      send(fds[i], "GET /", 5, MSG_NOSIGNAL);
  }
  sac_sleep_ns(50000000);
  uint64_t t0 = sac_clock_ns();
  stop_server(); /* joins: must not wait for the 60 s deadline */
  cr_expect_lt((double)(sac_clock_ns() - t0) * 1e-9, 2.0);
  for (int i = 0; i < 8; i++) {
    long n = read_all(fds[i], g_resp, sizeof g_resp, 2000);
    cr_expect(n == 0 || n == -2, "connection %d still open after stop", i);
    close(fds[i]);
  }
}

Test(http, bind_errors) {
  sac_metrics_t *r = sac_metrics_new();
  sac_http_config_t cfg;
  sac_http_config_default(&cfg);
  snprintf(cfg.addr, sizeof cfg.addr, "127.0.0.1");
  sac_http_t *a = NULL, *b = NULL;
  cr_assert_eq(sac_http_start(&cfg, r, &a), 0);
  cfg.port = sac_http_port(a);
  cr_expect_eq(sac_http_start(&cfg, r, &b), SAC_ENET, "port taken");
  cr_expect_null(b);
  cfg.port = 0;
  snprintf(cfg.addr, sizeof cfg.addr, "localhost");
  cr_expect_eq(sac_http_start(&cfg, r, &b), SAC_ECONFIG, "not numeric");
  snprintf(cfg.addr, sizeof cfg.addr, "127.0.0.1");
  cfg.port = 70000;
  cr_expect_eq(sac_http_start(&cfg, r, &b), SAC_ECONFIG);
  cr_expect_null(sac_http_serve_metrics("test", "127.0.0.1", -1, r), "disabled");
  sac_http_t *c = sac_http_serve_metrics("test", "::1", 0, r);
  if (c) { /* IPv6 loopback where the system has it */
    cr_expect_gt(sac_http_port(c), 0);
    sac_http_stop(&c);
  }
  sac_http_stop(&a);
  sac_metrics_destroy(&r);
}

/* ---- promtool over the real series -------------------------------------------------- */

/* Every series family the three binaries export (NVML and cuda-only ones aside): the
 * learner's, an (unstarted) replay server's with snapshots, an actor's, process. */
static sac_metrics_t *all_series(sac_replay_server_t **srv, sac_backend_t **be, sac_actor_stats_t *st,
                                 sac_service_metrics_t *sm) {
  sac_metrics_t *r = sac_metrics_new();
  cr_assert_eq(sac_metrics_add_process(r), 0);
  cr_assert_eq(sac_metrics_add_build_info(r, "test_metrics", SAC_VERSION), 0);
  sac_replay_server_config_t c;
  sac_replay_server_config_default(&c);
  c.shard.capacity = 65536;
  c.shard.obs_dim = 3;
  c.shard.act_dim = 1;
  snprintf(c.insert_endpoint, sizeof c.insert_endpoint, "inproc://test-metrics-insert");
  snprintf(c.sample_endpoint, sizeof c.sample_endpoint, "inproc://test-metrics-sample");
  snprintf(c.snapshot_path, sizeof c.snapshot_path, "/tmp/test-metrics-%ld.snap", (long)getpid());
  int err = 0;
  *srv = sac_replay_server_new(&c, NULL, &err);
  cr_assert_not_null(*srv, "replay server: %s", sac_strerror(err));
  cr_assert_eq(sac_replay_metrics_register(r, *srv, 3, 1, *srv), 0);
  memset(st, 0, sizeof *st);
  atomic_store(&st->env_steps, 1234);
  atomic_store(&st->episodes, 2);
  atomic_store(&st->mean_return, -150.25);
  atomic_store(&st->send_wait_ns, 1500000000u);
  cr_assert_eq(sac_actor_metrics_register(r, st, 7, st), 0);
  sac_learner_cfg_t lc;
  sac_learner_cfg_default(&lc);
  sac_service_metrics_init(sm, r, &lc);
  cr_assert_eq(sac_backend_new("cpu", 1, be), 0);
  sac_service_metrics_attach(sm, *be, "cpu", NULL, 0, NULL, 0);
  sac_service_metrics_sampled(sm, 0.003, 5000);
  return r;
}

Test(metrics, exported_series_pass_promtool, .timeout = 60) {
  sac_replay_server_t *srv = NULL;
  sac_backend_t *be = NULL;
  static sac_actor_stats_t st;
  sac_service_metrics_t sm;
  sac_metrics_t *r = all_series(&srv, &be, &st, &sm);
  char *text = render(r);
  /* the key series are there, with their labels */
  const char *keys[] = {"sac_learner_updates_total 0\n",
                        "sac_learner_sample_wait_seconds_bucket{le=\"0.005\"} 1\n",
                        "sac_learner_env_steps_total 5000\n",
                        "sac_learner_alpha NaN\n",
                        "sac_replay_size{shard=\"3\"} 0\n",
                        "sac_replay_capacity{shard=\"3\"} 65536\n",
                        "sac_replay_rejected_messages_total{shard=\"3\",reason=\"too_big\"} 0\n",
                        "sac_replay_rate_limiter_waits_total{shard=\"3\",op=\"insert\"} 0\n",
                        "sac_replay_snapshot_age_seconds{shard=\"3\"} ",
                        "sac_replay_transition_size_bytes{shard=\"3\"} ",
                        "sac_actor_env_steps_total{actor=\"7\"} 1234\n",
                        "sac_actor_episode_return{actor=\"7\"} -150.25\n",
                        "sac_actor_send_wait_seconds_total{actor=\"7\"} 1.5\n",
                        "sac_actor_policy_version{actor=\"7\"} 0\n",
                        "process_resident_memory_bytes ",
                        "sac_build_info{binary=\"test_metrics\",version=\"" SAC_VERSION "\"} 1\n"};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
    cr_expect(strstr(text, keys[i]) != NULL, "missing \"%s\"", keys[i]);
  char path[128];
  snprintf(path, sizeof path, "/tmp/test-metrics-%ld.prom", (long)getpid());
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f);
  fputs(text, f);
  fclose(f);
  free(text);
  sac_service_metrics_close(&sm, &(sac_learner_result_t){.final_eval_return = NAN});
  sac_metrics_forget(r, srv);
  sac_metrics_destroy(&r);
  sac_replay_server_destroy(&srv);
  sac_backend_destroy(&be);
  char snap[128];
  snprintf(snap, sizeof snap, "/tmp/test-metrics-%ld.snap", (long)getpid());
  unlink(snap);
  if (system("command -v promtool >/dev/null 2>&1") != 0) {
    unlink(path);
    cr_skip_test("promtool not installed (Debian package prometheus; scripts/install-deps.sh installs it): "
                 "promtool check skipped");
  }
  char cmd[512], out[8192] = "";
  snprintf(cmd, sizeof cmd, "promtool check metrics < %s 2>&1", path);
  FILE *p = popen(cmd, "r");
  cr_assert_not_null(p);
  size_t n = fread(out, 1, sizeof out - 1, p);
  out[n] = '\0';
  int rc = pclose(p);
  unlink(path);
  cr_log_info("promtool check metrics: exit %d, output: \"%s\"", rc, out);
  cr_expect_eq(rc, 0, "promtool check metrics failed:\n%s", out);
  cr_expect_eq(n, 0, "promtool has lint complaints:\n%s", out);
}
