/* libFuzzer target for the request parser of the operations HTTP server (common/http.c,
 * the /metrics and /healthz endpoint every binary serves): each input is sent as a
 * request, over a real TCP connection to 127.0.0.1, to a server started once with a
 * small registry (process metrics and a labelled counter) and a 2 KiB request limit.
 * Properties beyond "no crash, no leak, no UB" (the server's thread runs instrumented in
 * this process):
 *   - a request whose headers end (a blank line) within the limit gets exactly one
 *     well-formed answer: "HTTP/1.1 NNN " with NNN one of 200, 400, 404, 405, 431, 503,
 *     Content-Length equal to the body's length (a HEAD answer has no body), and the
 *     connection then closes;
 *   - anything that fills the limit without a blank line is answered 431, never served;
 *   - every answer arrives before the client's 5 s bound (no hang).
 * Connections are closed with a reset, so that tens of thousands of them a minute leave
 * no TIME_WAIT behind; an unfinished request shorter than the limit is just reset.
 * Traffic stays on 127.0.0.1. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "common/http.h"
#include "common/log.h"
#include "common/metrics.h"

#define MAX_REQ 2048

static sac_metrics_t *g_reg;
static sac_http_t *g_http;
static int g_port;
static char g_resp[1 << 20];

static void seed(const char *dir, const char *name, const char *req) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (f) {
    fwrite(req, 1, strlen(req), f);
    fclose(f);
  }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  sac_log_set_level(SAC_LOG_ERROR);
  signal(SIGPIPE, SIG_IGN);
  const char *dir = getenv("SAC_FUZZ_SEED_DIR");
  if (dir) {
    seed(dir, "get_metrics", "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    seed(dir, "head_health", "HEAD /healthz?x=1 HTTP/1.0\n\n");
    seed(dir, "post", "POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc");
    seed(dir, "not_found", "GET /nothing HTTP/1.1\r\n\r\n");
    seed(dir, "garbage", "G\x01T / HTTP/9\r\n\r\n");
  }
  return 0;
}

static void setup(void) {
  g_reg = sac_metrics_new();
  if (!g_reg || sac_metrics_add_process(g_reg) != 0)
    abort();
  static const char *const labels[] = {"reason", "a \"quoted\"\\ value\n", NULL};
  sac_metric_t *m = sac_metrics_counter(g_reg, "fuzz_requests_total", "requests \"seen\"\n", labels, NULL);
  (void)m;
  sac_http_config_t c;
  sac_http_config_default(&c);
  snprintf(c.addr, sizeof c.addr, "127.0.0.1");
  c.max_request_bytes = MAX_REQ;
  c.timeout_ms = 4000;
  if (sac_http_start(&c, g_reg, &g_http) != 0)
    abort();
  g_port = sac_http_port(g_http);
}

/* Connects to the server, retrying a moment when the host is out of ephemeral ports
 * (EADDRNOTAVAIL: tens of thousands of connections a minute). */
static int connect_server(void) {
  for (int tries = 0; tries < 500; tries++) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
      abort();
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)g_port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0)
      return fd;
    int e = errno;
    close(fd);
    if (e != EADDRNOTAVAIL && e != EAGAIN && e != EINTR) {
      fprintf(stderr, "fuzz_http: connect: %s\n", strerror(e));
      abort(); /* the server stopped accepting */
    }
    usleep(10000);
  }
  fprintf(stderr, "fuzz_http: no local port for 5 s\n");
  abort();
}

/* Closes with a reset: no TIME_WAIT left behind on either side. */
static void close_reset(int fd) {
  struct linger lg = {1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  close(fd);
}

/* Sends req. When an answer is due, reads it until the server half-closes (it answers
 * once, then closes its side) and returns its length (-1: reset before any answer);
 * otherwise resets the connection and returns 0. */
static long exchange(const uint8_t *req, size_t len, int answer_due) {
  int fd = connect_server();
  size_t off = 0;
  while (off < len) {
    ssize_t w = send(fd, req + off, len - off, MSG_NOSIGNAL);
    if (w <= 0)
      break; /* the server answered early (431) and closed: fine */
    off += (size_t)w;
  }
  if (!answer_due) {
    close_reset(fd);
    return 0;
  }
  long got = 0;
  for (;;) {
    ssize_t r = recv(fd, g_resp + got, sizeof g_resp - 1 - (size_t)got, 0);
    if (r == 0)
      break;
    if (r < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        fprintf(stderr, "fuzz_http: no answer and no close within 5 s\n");
        abort(); /* a hang */
      }
      if (got == 0) {
        close_reset(fd);
        return -1;
      }
      break; /* reset after the answer */
    }
    got += r;
    if ((size_t)got >= sizeof g_resp - 1)
      abort(); /* far bigger than any answer */
  }
  g_resp[got] = '\0';
  close_reset(fd);
  return got;
}

static const char *find_blank(const uint8_t *s, size_t n) {
  for (size_t i = 1; i < n; i++) {
    if (s[i] != '\n')
      continue;
    if (s[i - 1] == '\n' || (i >= 2 && s[i - 1] == '\r' && s[i - 2] == '\n'))
      return (const char *)s + i;
  }
  return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!g_http)
    setup();
  if (size > 64 * 1024)
    return 0;
  const char *end = find_blank(data, size);
  int complete = end && (size_t)(end - (const char *)data) + 1 <= MAX_REQ;
  /* an answer is due for a whole request, and (431) for anything that fills the buffer;
   * a shorter, unfinished request is left unanswered and reset */
  int answer_due = complete || size >= MAX_REQ;
  long n = exchange(data, size, answer_due);
  if (!answer_due)
    return 0;
  /* The server keeps at most max_connections (256 by default) and makes room by closing
   * the connection that has been reading longest, or closes a new one at once when every
   * slot is answering (documented); the resets of earlier inputs may not have reached it
   * yet. So "no answer" is only a finding when it persists for half a second. */
  for (int tries = 0; n <= 0 && tries < 50; tries++) {
    usleep(10000);
    n = exchange(data, size, answer_due);
  }
  if (n <= 0)
    abort(); /* a whole request, or one that fills the limit, got no answer */
  int code = 0;
  if (sscanf(g_resp, "HTTP/1.1 %3d ", &code) != 1)
    abort();
  if (code != 200 && code != 400 && code != 404 && code != 405 && code != 431 && code != 503)
    abort();
  if (!complete && code != 431)
    abort(); /* served something it had not read whole */
  const char *body = strstr(g_resp, "\r\n\r\n");
  const char *cl = strstr(g_resp, "Content-Length: ");
  if (!body || !cl || cl > body)
    abort();
  long want = strtol(cl + 16, NULL, 10);
  long have = n - (long)(body + 4 - g_resp);
  int head = size >= 5 && memcmp(data, "HEAD ", 5) == 0 && code != 400 && code != 431 && code != 405;
  if (head ? have != 0 : have != want)
    abort();
  return 0;
}
