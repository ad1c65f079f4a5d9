/* abuse_client: the adversarial client of tests/abuse/abuse_suite.sh (issue 14). Each
 * subcommand is one attack on a live sacfleet process over loopback, bounded in
 * connections, messages and seconds, printing one summary line. It speaks the attacks
 * byte for byte (raw TCP, hand-made ZMTP, hand-encoded wire messages) so that none of
 * sacfleet's own client-side limits soften them. It checks nothing itself except where
 * the attack's outcome is its output (healthz: the answer and its latency; bigsub:
 * whether the publisher disconnected); the suite judges the targets' health.
 *
 * What it sent: garbage, slowloris and unread end their summary line with key=value
 * figures the suite asserts on (tests/abuse/abuse_suite.sh, sent_figure): bytes= the bytes
 * the kernel accepted on connected sockets (a send() to a peer that never accepted the
 * connection fails, so these reached the target's socket), conns= how many connections
 * took at least one byte, reconnects=; for unread, requests= the sample requests handed
 * to ZeroMQ and queued= those still unsent at the end (ZeroMQ's own queue towards the
 * shard, read with ZMQ_EVENTS: 0 when every request left the client).
 *
 * What it sent: garbage, slowloris and unread end their summary line with key=value
 * figures the suite asserts on (tests/abuse/abuse_suite.sh, sent_figure): bytes= the bytes
 * the kernel accepted on connected sockets (a send() to a peer that never accepted the
 * connection fails, so these reached the target's socket), conns= how many connections
 * took at least one byte, reconnects=; for unread, requests= the sample requests handed
 * to ZeroMQ and queued= those still unsent at the end (ZeroMQ's own queue towards the
 * shard, read with ZMQ_EVENTS: 0 when every request left the client).
 *
 *   garbage PORT CONNS SECONDS          raw connections sending random bytes (reconnecting);
 *                                       prints "first bytes taken" once the first arrive
 *   slowloris PORT CONNS SECONDS        HTTP connections sending one request byte per second
 *   healthz PORT TIMEOUT_MS             GET /healthz: exit 0 when 200 came within TIMEOUT_MS
 *   bigsub PORT BYTES COUNT             ZMTP 3 SUBs each sending one BYTES-long subscription
 *   topics PORT COUNT SECONDS           a ZMTP 3 SUB sending COUNT distinct 63-byte topics,
 *                                       connecting again whenever the publisher closes it
 *   unread ENDPOINT CONNS REQS ROWS SECONDS
 *                                       DEALERs sending sample requests, never reading
 *   insert ENDPOINT OBS ACT ACTOR MODE COUNT
 *                                       transition batches: MODE huge (rewards 3e38),
 *                                       acked (acked_through 2^64-1), session (2^64-1)
 *   steal PORT SECONDS                  tries to listen on 127.0.0.1:PORT every 100 us and,
 *                                       once it has it, holds it: a port taken by another
 *                                       process while its owner binds it again
 * Exit status: 0 done, 1 the attack's outcome was a failure (healthz), 2 usage. */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/net.h"
#include "common/rng.h"
#include "common/wire.h"
#include "replay_testgen.h"

#define MAX_CONNS 1024

static double now_s(void) { return (double)sac_clock_ns() * 1e-9; }

/* A non-blocking TCP connection to 127.0.0.1:port, -1 when none could be made. */
static int tcp_open(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  if (fd < 0)
    return -1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0 && errno != EINPROGRESS) {
    close(fd);
    return -1;
  }
  return fd;
}

/* 1 when the peer has closed fd (or it failed); reads and drops what it sent. */
static int peer_closed(int fd) {
  struct pollfd p = {fd, POLLIN, 0};
  if (poll(&p, 1, 0) <= 0)
    return 0;
  if (p.revents & (POLLERR | POLLHUP))
    return 1;
  char buf[4096];
  ssize_t k = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
  return k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

/* ---- raw TCP attacks ------------------------------------------------------------------ */

static int cmd_garbage(int port, int conns, double seconds) {
  static int fds[MAX_CONNS];
  sac_rng_t rng;
  sac_rng_init(&rng, (uint64_t)getpid(), 1);
  for (int i = 0; i < conns; i++)
    fds[i] = tcp_open(port);
  static int took[MAX_CONNS]; /* this connection (since its last reconnect) took bytes */
  unsigned char junk[4096];
  unsigned long long sent = 0, reconnects = 0, took_conns = 0;
  double end = now_s() + seconds;
  while (now_s() < end) {
    for (size_t k = 0; k < sizeof junk; k++)
      junk[k] = (unsigned char)sac_rng_u32(&rng);
    for (int i = 0; i < conns; i++) {
      ssize_t k = fds[i] >= 0 ? send(fds[i], junk, sizeof junk, MSG_NOSIGNAL | MSG_DONTWAIT) : -1;
      if (k > 0) {
        if (sent == 0) { /* the first bytes in: a line the suite can wait for */
          printf("garbage: port %d: first bytes taken\n", port);
          fflush(stdout);
        }
        sent += (unsigned long long)k;
        if (!took[i])
          took[i] = 1, took_conns++;
      } else if (fds[i] < 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOTCONN) ||
                 peer_closed(fds[i])) {
        if (fds[i] >= 0)
          close(fds[i]);
        fds[i] = tcp_open(port);
        took[i] = 0;
        reconnects++;
      }
    }
    sac_sleep_ns(1000000); /* ~1 ms a round: bounded load, still thousands of KiB/s */
  }
  for (int i = 0; i < conns; i++)
    if (fds[i] >= 0)
      close(fds[i]);
  printf("garbage: port %d, %d connections, %llu bytes sent, %llu reconnects: bytes=%llu conns=%llu "
         "reconnects=%llu\n",
         port, conns, sent, reconnects, sent, took_conns, reconnects);
  return 0;
}

static int cmd_slowloris(int port, int conns, double seconds) {
  static int fds[MAX_CONNS];
  static size_t pos[MAX_CONNS];
  static const char req[] = "GET /metrics HTTP/1.1\r\nHost: x\r\nX-a: b\r\nX-a: b\r\nX-a: b\r\nX-a: b\r\n";
  for (int i = 0; i < conns; i++)
    fds[i] = tcp_open(port), pos[i] = 0;
  unsigned long long bytes = 0, reconnects = 0, took_conns = 0;
  double end = now_s() + seconds;
  while (now_s() < end) {
    for (int i = 0; i < conns; i++) {
      if (fds[i] < 0 || peer_closed(fds[i]) ||
          send(fds[i], &req[pos[i] % (sizeof req - 1)], 1, MSG_NOSIGNAL | MSG_DONTWAIT) != 1) {
        if (fds[i] >= 0)
          close(fds[i]);
        fds[i] = tcp_open(port); /* an attacker comes back at once */
        pos[i] = 0;
        reconnects++;
        continue;
      }
      if (pos[i] == 0)
        took_conns++; /* a connection's first byte: it was accepted */
      pos[i]++;
      bytes++;
    }
    sac_sleep_ns(1000000000ull);
  }
  for (int i = 0; i < conns; i++)
    if (fds[i] >= 0)
      close(fds[i]);
  printf("slowloris: port %d, %d connections, %llu bytes, %llu reconnects: bytes=%llu conns=%llu "
         "reconnects=%llu\n",
         port, conns, bytes, reconnects, bytes, took_conns, reconnects);
  return 0;
}

static int cmd_healthz(int port, int timeout_ms) {
  double t0 = now_s(), end = t0 + timeout_ms * 1e-3;
  int fd = tcp_open(port);
  if (fd < 0) {
    printf("healthz: port %d: cannot connect\n", port);
    return 1;
  }
  static const char req[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
  size_t sent = 0;
  char resp[1024];
  size_t got = 0;
  while (now_s() < end) {
    struct pollfd p = {fd, (short)(POLLIN | (sent < sizeof req - 1 ? POLLOUT : 0)), 0};
    if (poll(&p, 1, 10) <= 0)
      continue;
    if ((p.revents & POLLOUT) && sent < sizeof req - 1) {
      ssize_t k = send(fd, req + sent, sizeof req - 1 - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (k > 0)
        sent += (size_t)k;
    }
    if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t k = recv(fd, resp + got, sizeof resp - 1 - got, MSG_DONTWAIT);
      if (k <= 0)
        break;
      got += (size_t)k;
      resp[got] = '\0';
      if (strstr(resp, "\r\n\r\n"))
        break;
    }
  }
  close(fd);
  resp[got] = '\0';
  double ms = (now_s() - t0) * 1e3;
  int ok = strncmp(resp, "HTTP/1.1 200", 12) == 0 && ms <= timeout_ms;
  printf("healthz: port %d: %s in %.0f ms\n", port, ok ? "200" : (got ? "bad answer" : "no answer"), ms);
  return ok ? 0 : 1;
}

/* ---- ZMTP by hand ----------------------------------------------------------------- */

static int send_all_blocking(int fd, const void *buf, size_t len, double end) {
  const char *p = buf;
  while (len > 0 && now_s() < end) {
    struct pollfd pf = {fd, POLLOUT, 0};
    if (poll(&pf, 1, 10) <= 0)
      continue;
    ssize_t k = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      continue;
    if (k <= 0)
      return -1;
    p += k;
    len -= (size_t)k;
  }
  return len == 0 ? 0 : -1;
}

/* Reads until n bytes came or the peer closed or the deadline; returns bytes read. */
static size_t recv_upto(int fd, size_t n, double end, int *closed) {
  size_t got = 0;
  char buf[4096];
  *closed = 0;
  while (got < n && now_s() < end) {
    struct pollfd pf = {fd, POLLIN, 0};
    if (poll(&pf, 1, 10) <= 0)
      continue;
    size_t want = n - got < sizeof buf ? n - got : sizeof buf;
    ssize_t k = recv(fd, buf, want, MSG_DONTWAIT);
    if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
      *closed = 1;
      break;
    }
    if (k > 0)
      got += (size_t)k;
  }
  return got;
}

static int cmd_bigsub(int port, size_t bytes, int count) {
  int disconnected = 0, handshakes = 0;
  char *topic = malloc(bytes + 10);
  if (!topic)
    return 2;
  for (int c = 0; c < count; c++) {
    double end = now_s() + 10;
    int fd = tcp_open(port), closed = 0;
    if (fd < 0)
      continue;
    unsigned char g[64] = {0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0x7f, 3, 0, 'N', 'U', 'L', 'L'};
    static const unsigned char ready[] = {0x04, 25,  5,   'R', 'E', 'A', 'D', 'Y', 11,
                                          'S',  'o', 'c', 'k', 'e', 't', '-', 'T', 'y',
                                          'p',  'e', 0,   0,   0,   3,   'S', 'U', 'B'};
    send_all_blocking(fd, g, sizeof g, end);
    send_all_blocking(fd, ready, sizeof ready, end);
    /* the publisher's greeting and READY first: libzmq refuses a message before them */
    if (recv_upto(fd, 64 + 27, end, &closed) == 64 + 27)
      handshakes++;
    uint64_t size = bytes + 1;
    topic[0] = 0x02;
    for (int i = 0; i < 8; i++)
      topic[1 + i] = (char)(unsigned char)(size >> (56 - 8 * i));
    topic[9] = 1;
    memset(topic + 10, 'x', bytes);
    send_all_blocking(fd, topic, bytes + 10, end);
    /* disconnected within 5 s? (what it sends meanwhile, weights, is read and dropped) */
    double end2 = now_s() + 5;
    while (!closed && now_s() < end2)
      recv_upto(fd, 1u << 20, now_s() + 0.1, &closed);
    disconnected += closed;
    close(fd);
  }
  free(topic);
  printf("bigsub: port %d, %d subscriptions of %zu bytes, %d handshakes, %d disconnected by the publisher\n",
         port, count, bytes, handshakes, disconnected);
  return 0;
}

/* The handshake of cmd_bigsub as a separate step: 1 when the publisher answered it. */
static int zmtp_sub_hello(int fd, double end) {
  unsigned char g[64] = {0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0x7f, 3, 0, 'N', 'U', 'L', 'L'};
  static const unsigned char ready[] = {0x04, 25,  5,   'R', 'E', 'A', 'D', 'Y', 11, 'S', 'o', 'c', 'k', 'e',
                                        't',  '-', 'T', 'y', 'p', 'e', 0,   0,   0,  3,   'S', 'U', 'B'};
  int closed;
  return send_all_blocking(fd, g, sizeof g, end) == 0 &&
         send_all_blocking(fd, ready, sizeof ready, end) == 0 &&
         recv_upto(fd, 64 + 27, end, &closed) == 64 + 27;
}

/* Many small topics (issue 14.5): each fits under the publisher's 64-byte message cap,
 * and each differs from the others in its first bytes, so that every one is a new branch
 * of libzmq's subscription trie. */
static int cmd_topics(int port, int count, double seconds) {
  double end = now_s() + seconds;
  int sent = 0, conns = 0, closed_by_pub = 0;
  while (sent < count && now_s() < end && conns < MAX_CONNS) {
    int fd = tcp_open(port);
    conns++;
    if (fd < 0 || !zmtp_sub_hello(fd, now_s() + 5)) {
      if (fd >= 0)
        close(fd);
      usleep(50000); /* the publisher may be binding again */
      continue;
    }
    int closed = 0;
    while (sent < count && now_s() < end && !closed) {
      unsigned char m[2 + 64] = {0x00, 64, 1};
      uint32_t h = (uint32_t)sent * 2654435761u;
      snprintf((char *)m + 3, 9, "%08x", h);
      memset(m + 11, 'a' + (int)(h % 26), sizeof m - 11);
      if (send_all_blocking(fd, m, sizeof m, end) != 0)
        break;
      sent++;
      if (sent % 256 == 0) /* weights it sends meanwhile are read and dropped */
        recv_upto(fd, 1u << 20, now_s() + 0.001, &closed);
    }
    /* the last topics are still on their way: stay until they are read or 3 s pass */
    double end2 = now_s() + 3;
    while (!closed && now_s() < end2)
      recv_upto(fd, 1u << 20, now_s() + 0.1, &closed);
    closed_by_pub += closed;
    close(fd);
  }
  printf(
      "topics: port %d, %d of %d topics of 63 bytes sent over %d connections, %d closed by the publisher\n",
      port, sent, count, conns, closed_by_pub);
  return 0;
}

/* A port taken by someone else (issue 14.5): the weights publisher renews its socket past
 * its topic budget, and another process may take the port in the moment between. Tries to
 * bind the port (SO_REUSEADDR, not SO_REUSEPORT: it cannot share a live listener) every
 * 100 us, then listens without ever accepting, until SECONDS have passed in all. */
static int cmd_steal(int port, double seconds) {
  double start = now_s(), end = start + seconds, got_at = -1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int fd = -1;
  while (fd < 0 && now_s() < end) {
    int one = 1;
    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd >= 0 && (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
                    bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 4) != 0)) {
      close(fd);
      fd = -1;
      usleep(100);
    }
  }
  if (fd >= 0) {
    got_at = now_s() - start;
    printf("steal: port %d taken after %.3f s\n", port, got_at);
    fflush(stdout);
    while (now_s() < end)
      usleep(10000);
    close(fd);
  }
  printf("steal: port %d %s\n", port, got_at >= 0 ? "held, then released" : "never free");
  return 0;
}

/* ---- wire messages ---------------------------------------------------------------- */

static int cmd_unread(const char *endpoint, int conns, int reqs, int rows, double seconds) {
  sac_net_ctx_t *ctx = sac_net_ctx_new(1);
  static void *socks[MAX_CONNS];
  static sac_net_monitor_t *mons[MAX_CONNS];
  static int connected[MAX_CONNS];
  if (!ctx)
    return 2;
  sac_net_opts_t o;
  sac_net_opts_default(&o);
  o.sndhwm = reqs + 16; /* everything is queued towards the shard; nothing is read back */
  o.rcvhwm = 1;
  unsigned char buf[256];
  long long sent = 0;
  for (int c = 0; c < conns; c++) {
    socks[c] = sac_net_socket(ctx, SAC_NET_DEALER, &o);
    mons[c] = socks[c] ? sac_net_monitor_new(ctx, socks[c]) : NULL; /* did it connect? */
    if (!socks[c] || !mons[c] || sac_net_connect(socks[c], endpoint) != 0)
      return 2;
    for (int r = 0; r < reqs; r++) {
      sac_wire_msg_t m = {.type = SAC_WIRE_SAMPLE_REQUEST};
      m.u.sample_request = (sac_wire_sample_request_t){(uint64_t)(c * reqs + r + 1), (uint32_t)rows, 0.4f, 0, SAC_WIRE_F32, 0};
      size_t len;
      if (sac_wire_encode(&m, buf, sizeof buf, &len) == 0 &&
          sac_net_send(socks[c], buf, len, SAC_NET_DONTWAIT) == 0)
        sent++;
    }
  }
  /* hold the connections open, reading nothing; meanwhile, which of them connected */
  int n_connected = 0;
  for (double end = now_s() + seconds; now_s() < end;) {
    for (int c = 0; c < conns; c++)
      if (!connected[c] && (sac_net_monitor_poll(mons[c]) & SAC_NET_EV_CONNECTED))
        connected[c] = 1, n_connected++;
    sac_sleep_ns(100000000ull);
  }
  for (int c = 0; c < conns; c++) {
    sac_net_monitor_destroy(&mons[c]);
    sac_net_close(&socks[c]);
  }
  sac_net_ctx_destroy(&ctx);
  printf("unread: %s, %d connections, %lld sample requests of %d rows sent, no reply read: requests=%lld "
         "conns=%d\n",
         endpoint, conns, sent, rows, sent, n_connected);
  return 0;
}

static int cmd_insert(const char *endpoint, int obs, int act, int actor, const char *mode, int count) {
  int huge = strcmp(mode, "huge") == 0, acked = strcmp(mode, "acked") == 0,
      session = strcmp(mode, "session") == 0;
  if (!huge && !acked && !session)
    return 2;
  sac_net_ctx_t *ctx = sac_net_ctx_new(1);
  sac_net_opts_t o;
  sac_net_opts_default(&o);
  void *s = ctx ? sac_net_socket(ctx, SAC_NET_DEALER, &o) : NULL;
  if (!s || sac_net_connect(s, endpoint) != 0)
    return 2;
  tg_t g;
  tg_init(&g, (uint32_t)actor, 1, (uint32_t)obs, (uint32_t)act, 50, 16);
  size_t cap = 1u << 20;
  unsigned char *buf = malloc(cap), *rbuf = malloc(cap);
  int replies = 0;
  sac_rng_t rng;
  sac_rng_init(&rng, (uint64_t)getpid(), 2);
  uint64_t sess = session ? UINT64_MAX : ((uint64_t)sac_rng_u32(&rng) << 32 | sac_rng_u32(&rng));
  for (int i = 0; i < count; i++) {
    sac_wire_msg_t m = {.type = SAC_WIRE_TRANSITIONS};
    m.u.transitions = *tg_next(&g);
    m.u.transitions.seq = (uint64_t)i + 1;
    m.u.transitions.session = sess;
    m.u.transitions.acked_through = acked ? UINT64_MAX : 0;
    if (huge)
      for (uint32_t r = 0; r < m.u.transitions.n; r++)
        g.rew[r] = 3e38f;
    size_t len;
    if (sac_wire_encode(&m, buf, cap, &len) != 0 || sac_net_send(s, buf, len, 0) != 0)
      break;
    sac_net_pollitem_t it = {s, SAC_NET_POLLIN, 0};
    if (sac_net_poll(&it, 1, 500) > 0) { /* an ack or a refusal; either is a reply */
      size_t n;
      int more;
      while (sac_net_recv(s, rbuf, cap, SAC_NET_DONTWAIT, &n, &more) == 0)
        replies++;
    }
  }
  tg_free(&g);
  free(buf);
  free(rbuf);
  sac_net_close(&s);
  sac_net_ctx_destroy(&ctx);
  printf("insert: %s, actor %d, mode %s, %d batches, %d replies\n", endpoint, actor, mode, count, replies);
  return 0;
}

static int usage(void) {
  fprintf(stderr,
          "usage: abuse_client garbage PORT CONNS SECONDS | slowloris PORT CONNS SECONDS |\n"
          "       healthz PORT TIMEOUT_MS | bigsub PORT BYTES COUNT | topics PORT COUNT SECONDS |\n"
          "       unread ENDPOINT CONNS REQS ROWS SECONDS | insert ENDPOINT OBS ACT ACTOR MODE COUNT |\n"
          "       steal PORT SECONDS\n");
  return 2;
}

int main(int argc, char **argv) {
  signal(SIGPIPE, SIG_IGN);
  if (argc < 2)
    return usage();
  const char *c = argv[1];
  /* every bound is checked here, so that no caller can make an attack unbounded */
  if (strcmp(c, "garbage") == 0 && argc == 5 && atoi(argv[3]) > 0 && atoi(argv[3]) <= MAX_CONNS &&
      atof(argv[4]) > 0 && atof(argv[4]) <= 120)
    return cmd_garbage(atoi(argv[2]), atoi(argv[3]), atof(argv[4]));
  if (strcmp(c, "slowloris") == 0 && argc == 5 && atoi(argv[3]) > 0 && atoi(argv[3]) <= MAX_CONNS &&
      atof(argv[4]) > 0 && atof(argv[4]) <= 120)
    return cmd_slowloris(atoi(argv[2]), atoi(argv[3]), atof(argv[4]));
  if (strcmp(c, "healthz") == 0 && argc == 4 && atoi(argv[3]) > 0 && atoi(argv[3]) <= 60000)
    return cmd_healthz(atoi(argv[2]), atoi(argv[3]));
  if (strcmp(c, "bigsub") == 0 && argc == 5 && atol(argv[3]) > 0 && atol(argv[3]) <= (64l << 20) &&
      atoi(argv[4]) > 0 && atoi(argv[4]) <= 100)
    return cmd_bigsub(atoi(argv[2]), (size_t)atol(argv[3]), atoi(argv[4]));
  if (strcmp(c, "topics") == 0 && argc == 5 && atoi(argv[3]) > 0 && atoi(argv[3]) <= 1000000 &&
      atof(argv[4]) > 0 && atof(argv[4]) <= 120)
    return cmd_topics(atoi(argv[2]), atoi(argv[3]), atof(argv[4]));
  if (strcmp(c, "unread") == 0 && argc == 7 && atoi(argv[3]) > 0 && atoi(argv[3]) <= 64 &&
      atoi(argv[4]) > 0 && atoi(argv[4]) <= 100000 && atoi(argv[5]) > 0 && atof(argv[6]) >= 0 &&
      atof(argv[6]) <= 120)
    return cmd_unread(argv[2], atoi(argv[3]), atoi(argv[4]), atoi(argv[5]), atof(argv[6]));
  if (strcmp(c, "insert") == 0 && argc == 8 && atoi(argv[3]) > 0 && atoi(argv[4]) > 0 && atoi(argv[7]) > 0 &&
      atoi(argv[7]) <= 10000)
    return cmd_insert(argv[2], atoi(argv[3]), atoi(argv[4]), atoi(argv[5]), argv[6], atoi(argv[7]));
  if (strcmp(c, "steal") == 0 && argc == 4 && atoi(argv[2]) > 0 && atoi(argv[2]) < 65536 &&
      atof(argv[3]) > 0 && atof(argv[3]) <= 120)
    return cmd_steal(atoi(argv[2]), atof(argv[3]));
  return usage();
}
