/* Regression tests for the shard side of issue 14: what a hostile or broken peer, or a
 * bad path or option, did to a replay shard, and what it must do instead.
 *  - unread replies: a DEALER that asks for large samples and never reads them keeps
 *    the shard's RSS within its stated bound, and the memory goes back after it leaves
 *    (defect 2); peers beyond max_sample_peers are refused with a reason;
 *  - sequence fields: acked_through >= seq, a window jump past max_seq_jump and a session
 *    far in the future are refused, later batches are stored, counters never go down
 *    (defects 3 and 14);
 *  - snapshots: another shard's snapshot, a directory, a FIFO, an unwritable folder are
 *    refused at start with a reason and exit code, never renamed; /healthz turns 503
 *    while snapshots fail; stale temporaries of dead processes are removed (6, 7, 10);
 *  - values beyond max_abs_value are refused (8); oversized replies, frame-count errors
 *    and rejected sample-endpoint messages are refused at start or answered (9);
 *  - every failing exit says why; bad ports and min_size > capacity are refused (12, 15);
 *  - idle actors are forgotten when max_actors is full, and the log rate limiter (14).
 * Each "bounded" check has a negative control showing the check can fail. Processes
 * are the ones this test starts, signalled by PID; every wait is bounded. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "common/net.h"
#include "common/snapshot.h"
#include "common/wire.h"
#include "replay/client.h"
#include "replay/shard.h"
#include "tests/replay_testgen.h"
#include "tests/wait_progress.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

#define MAX_PROCS 8
static pid_t g_pids[MAX_PROCS];
static char g_dir[256];

static void setup(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/sac-replay-hostile-%ld-XXXXXX", (long)getpid());
  cr_assert_not_null(mkdtemp(g_dir));
  memset(g_pids, 0, sizeof g_pids);
}

/* The exit code of pid (128 + signal when killed), -1 when it is not our child, or -2 when
 * it has made no progress (tests/wait_progress.h: CPU time) for stall_s seconds. */
static int reap(pid_t pid, double stall_s) {
  wp_t w;
  wp_start(&w, wp_token(pid, NULL));
  for (;;) {
    int status = 0;
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (r < 0)
      return -1;
    if (wp_stalled(&w, wp_token(pid, NULL), stall_s))
      return -2;
    sac_sleep_ns(10000000);
  }
}

static void forget(pid_t pid) {
  for (int i = 0; i < MAX_PROCS; i++)
    if (g_pids[i] == pid)
      g_pids[i] = 0;
}

static void teardown(void) {
  for (int i = 0; i < MAX_PROCS; i++) {
    if (g_pids[i] <= 0)
      continue;
    kill(g_pids[i], SIGTERM);
    if (reap(g_pids[i], 5.0) == -2) {
      kill(g_pids[i], SIGKILL);
      reap(g_pids[i], 5.0);
    }
    g_pids[i] = 0;
  }
  char cmd[700];
  snprintf(cmd, sizeof cmd, "chmod -R u+rwx '%s' 2>/dev/null; rm -rf '%s'", g_dir, g_dir);
  int rc = system(cmd);
  (void)rc;
}

TestSuite(replay_hostile, .init = setup, .fini = teardown, .timeout = 120);

/* ------------------------------------------------------------------ processes */

typedef struct {
  pid_t pid;
  char ins[300], smp[300];
  int metrics_port;
  char ready[400], log[400];
} shard_t;

static pid_t fork_replay(shard_t *s, const char *name, const char *const *extra) {
  snprintf(s->ready, sizeof s->ready, "%s/%s.ready", g_dir, name);
  snprintf(s->log, sizeof s->log, "%s/%s.log", g_dir, name);
  unlink(s->ready);
  char ready_arg[450];
  snprintf(ready_arg, sizeof ready_arg, "--ready_file=%s", s->ready);
  const char *argv[48];
  int n = 0;
  argv[n++] = SAC_BUILD_DIR "/replay/sac-replay";
  argv[n++] = ready_arg;
  int durable = 0; /* a shard without a snapshot path must say it keeps nothing */
  for (int i = 0; extra[i]; i++)
    durable |= !strncmp(extra[i], "--snapshot_path=", 16) || !strncmp(extra[i], "--durability=", 13);
  if (!durable)
    argv[n++] = "--durability=none";
  for (int i = 0; extra[i] && n < 46; i++)
    argv[n++] = extra[i];
  argv[n] = NULL;
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    int fd = open(s->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    execv(argv[0], (char *const *)argv);
    _exit(127);
  }
  s->pid = pid;
  for (int i = 0; i < MAX_PROCS; i++)
    if (g_pids[i] == 0) {
      g_pids[i] = pid;
      break;
    }
  return pid;
}

/* 1 once the ready file names both endpoints, 0 if the process exited first; the test
 * fails once the shard has used no CPU and logged nothing for stall_s seconds. */
static int wait_ready(shard_t *s, double stall_s) {
  wp_t w;
  wp_start(&w, wp_token(s->pid, s->log));
  for (;;) {
    FILE *f = fopen(s->ready, "r");
    if (f) {
      char line[300];
      s->ins[0] = s->smp[0] = 0;
      s->metrics_port = -1;
      while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        if (!strncmp(line, "insert=", 7))
          snprintf(s->ins, sizeof s->ins, "%s", line + 7);
        if (!strncmp(line, "sample=", 7))
          snprintf(s->smp, sizeof s->smp, "%s", line + 7);
        if (!strncmp(line, "metrics_port=", 13))
          s->metrics_port = atoi(line + 13);
      }
      fclose(f);
      if (s->ins[0] && s->smp[0])
        return 1;
    }
    int status;
    if (waitpid(s->pid, &status, WNOHANG) == s->pid) {
      forget(s->pid);
      s->pid = -(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
      return 0;
    }
    cr_assert(!wp_stalled(&w, wp_token(s->pid, s->log), stall_s),
              "sac-replay not ready and no progress for %.0f s (see %s)", stall_s, s->log);
    sac_sleep_ns(20000000);
  }
}

static void spawn(shard_t *s, const char *name, const char *const *extra) {
  fork_replay(s, name, extra);
  cr_assert(wait_ready(s, 20.0), "sac-replay %s exited early with %d (see %s)", name, -s->pid, s->log);
}

/* Runs sac-replay expecting it to exit: its exit code (-2: no progress for stall_s
 * seconds, killed) and its output in out. */
static int run_to_exit(const char *name, const char *const *extra, double stall_s, char *out, size_t cap) {
  shard_t s;
  fork_replay(&s, name, extra);
  int rc = reap(s.pid, stall_s);
  if (rc == -2) {
    kill(s.pid, SIGKILL);
    reap(s.pid, 5.0);
  }
  forget(s.pid);
  out[0] = 0;
  FILE *f = fopen(s.log, "r");
  if (f) {
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = 0;
    fclose(f);
  }
  return rc;
}

static long rss_kb(pid_t pid) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%ld/status", (long)pid);
  FILE *f = fopen(path, "r");
  if (!f)
    return -1;
  long kb = -1;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, "VmRSS:", 6))
      kb = atol(line + 6);
  fclose(f);
  return kb;
}

/* GET path on 127.0.0.1:port: the HTTP status (0: no answer) and the body in out. */
static int http_get(int port, const char *path, char *out, size_t cap) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    return 0;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  struct timeval tv = {5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
    close(fd);
    return 0;
  }
  char req[256];
  int n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path);
  if (write(fd, req, (size_t)n) != n) {
    close(fd);
    return 0;
  }
  size_t got = 0;
  ssize_t r;
  while (got + 1 < cap && (r = read(fd, out + got, cap - 1 - got)) > 0)
    got += (size_t)r;
  out[got] = 0;
  close(fd);
  int code = 0;
  if (sscanf(out, "HTTP/1.1 %d", &code) != 1)
    return 0;
  return code;
}

/* The value of a metrics series (first line starting with `series`), or -1. */
static double metric(int port, const char *series) {
  static char buf[1 << 18];
  if (http_get(port, "/metrics", buf, sizeof buf) != 200)
    return -1;
  size_t sl = strlen(series);
  for (char *p = buf; (p = strstr(p, series)) != NULL; p++)
    if ((p == buf || p[-1] == '\n') && p[sl] == ' ')
      return atof(p + sl + 1);
  return -1;
}

/* The series' value once it reaches want (the server publishes its counters every few
 * ms), or its last value after 5 s. */
static double metric_wait(int port, const char *series, double want) {
  uint64_t end = sac_clock_ns() + 5000000000ull;
  double v = metric(port, series);
  while (v != want && sac_clock_ns() < end) {
    sac_sleep_ns(20000000);
    v = metric(port, series);
  }
  return v;
}

static sac_replay_client_t *client(const char *ins, const char *smp, uint32_t actor, uint32_t batch) {
  sac_replay_client_config_t c;
  sac_replay_client_config_default(&c);
  const char *ie[1] = {ins}, *se[1] = {smp};
  c.n_shards = 1;
  c.insert_endpoints = ins ? ie : NULL;
  c.sample_endpoints = smp ? se : NULL;
  c.actor_id = actor;
  c.batch_size = batch;
  c.obs_dim = 5;
  c.act_dim = 2;
  c.resend_ms = 500;
  c.max_msg_bytes = 1 << 20;
  sac_replay_client_t *cl = sac_replay_client_new(&c);
  cr_assert_not_null(cl);
  return cl;
}

static void fill(const shard_t *s, uint32_t actor, int batches) {
  sac_replay_client_t *a = client(s->ins, NULL, actor, 64);
  tg_t g;
  tg_init(&g, actor, 4, 5, 2, 20, 16);
  for (int b = 0; b < batches; b++)
    cr_assert_eq(sac_replay_client_insert(a, 0, tg_next(&g), 5000), 0);
  cr_assert_eq(sac_replay_client_flush(a, 10000), 0);
  sac_replay_client_destroy(&a);
  tg_free(&g);
}

static size_t enc(const sac_wire_msg_t *m, unsigned char *buf, size_t cap) {
  size_t len = 0;
  cr_assert_eq(sac_wire_encode(m, buf, cap, &len), 0);
  return len;
}

/* Waits (bounded) for one reply on a DEALER and decodes it; 0 when none came. */
static int recv_msg(void *sock, sac_wire_decoder_t *dec, sac_wire_msg_t *m, int timeout_ms) {
  static unsigned char buf[1 << 20];
  sac_net_pollitem_t it = {sock, SAC_NET_POLLIN, 0};
  if (sac_net_poll(&it, 1, timeout_ms) <= 0)
    return 0;
  size_t len = 0;
  if (sac_net_recv(sock, buf, sizeof buf, SAC_NET_DONTWAIT, &len, NULL) != 0)
    return 0;
  sac_wire_reason_t why;
  cr_assert_eq(sac_wire_decode(dec, buf, len, NULL, m, &why), 0, "undecodable reply: %s",
               sac_wire_reason_name(why));
  return 1;
}

/* ------------------------------------------------------------------ defect 2 */

static const char *const k_small[] = {"--insert_endpoint=tcp://127.0.0.1:*",
                                      "--sample_endpoint=tcp://127.0.0.1:*",
                                      "--capacity=20000",
                                      "--obs_dim=5",
                                      "--act_dim=2",
                                      "--min_size=10",
                                      "--max_msg_bytes=1048576",
                                      "--metrics_port=0",
                                      "--metrics_addr=127.0.0.1",
                                      NULL};

static void args_with(const char **out, const char *const *extra) {
  int n = 0;
  for (int i = 0; k_small[i]; i++)
    out[n++] = k_small[i];
  for (int i = 0; extra && extra[i]; i++)
    out[n++] = extra[i];
  out[n] = NULL;
}

/* One DEALER asks for `requests` samples of 4096 rows (278 KB each) and reads none.
 * Returns the shard's RSS growth in MiB at its peak while the shard works through them
 * (waits on the shard's message counter, not the clock). */
static double unread_attack(shard_t *s, int requests, void **out_sock, sac_net_ctx_t *ctx) {
  sac_net_opts_t o;
  sac_net_opts_default(&o);
  o.rcvhwm = 1; /* its ZeroMQ reads as little as it can: the replies queue at the shard */
  void *d = sac_net_socket(ctx, SAC_NET_DEALER, &o);
  cr_assert_not_null(d);
  cr_assert_eq(sac_net_connect(d, s->smp), 0);
  double msgs0 = metric(s->metrics_port, "sac_replay_messages_total{shard=\"0\"}");
  cr_assert_geq(msgs0, 0);
  long base = rss_kb(s->pid), peak = base;
  unsigned char buf[128];
  for (int i = 0; i < requests; i++) {
    sac_wire_msg_t m = {.type = SAC_WIRE_SAMPLE_REQUEST};
    m.u.sample_request = (sac_wire_sample_request_t){(uint64_t)i + 1, 4096, 0.4f, 1000, SAC_WIRE_F32, 0};
    cr_assert_eq(sac_net_send(d, buf, enc(&m, buf, sizeof buf), 0), 0);
    if (i % 64 == 0) {
      long r = rss_kb(s->pid);
      peak = r > peak ? r : peak;
    }
  }
  /* until the shard has read every request: progress, or 20 s without any */
  double last = msgs0, seen = msgs0;
  uint64_t moved = sac_clock_ns();
  while (seen < msgs0 + requests) {
    cr_assert_lt(sac_clock_ns() - moved, 20000000000ull, "the shard stopped reading requests at %.0f of %d",
                 seen - msgs0, requests);
    sac_sleep_ns(50000000);
    long r = rss_kb(s->pid);
    peak = r > peak ? r : peak;
    seen = metric(s->metrics_port, "sac_replay_messages_total{shard=\"0\"}");
    if (seen > last) {
      last = seen;
      moved = sac_clock_ns();
    }
  }
  for (int i = 0; i < 10; i++) { /* the last replies settle */
    long r = rss_kb(s->pid);
    peak = r > peak ? r : peak;
    sac_sleep_ns(50000000);
  }
  *out_sock = d;
  return (double)(peak - base) / 1024.0;
}

Test(replay_hostile, unread_replies_keep_memory_bounded) {
  /* 4 MiB of replies per connection: 15 replies of 4096 rows (278 KB) */
  const char *extra[] = {"--max_sample_batch=4096", "--max_reply_queue_bytes=4194304", NULL};
  const char *args[24];
  args_with(args, extra);
  shard_t s;
  spawn(&s, "unread", args);
  fill(&s, 1, 20);
  long before = rss_kb(s.pid);
  sac_net_ctx_t *ctx = sac_net_ctx_new(1);
  void *d = NULL;
  const int requests = 1500; /* 417 MB of replies if they all queued */
  double grew = unread_attack(&s, requests, &d, ctx);
  double dropped = metric(s.metrics_port, "sac_replay_replies_dropped_total{shard=\"0\"}");
  /* stated bound: max_reply_queue_bytes (4 MiB) + one reply being written + allocator
   * slack; ASan's quarantine and shadow memory add to it */
  double bound = UNDER_ASAN ? 96.0 : 32.0;
  cr_log_info("RSS grew %.1f MiB under %d unread 4096-row requests (bound %.0f MiB); %.0f replies dropped",
              grew, requests, bound, dropped);
  cr_assert_lt(grew, bound, "shard RSS grew %.1f MiB with a peer not reading (bound %.0f MiB)", grew, bound);
  cr_assert_gt(dropped, requests / 2, "replies beyond the queue must be dropped and counted (%.0f)", dropped);
  /* the shard still serves a well-behaved learner */
  sac_replay_client_t *l = client(NULL, s.smp, 9, 32);
  sac_replay_batch_t b;
  cr_assert_eq(sac_replay_client_sample(l, 10000, &b), 0, "a reading learner is still served");
  cr_assert_eq(b.n, 32);
  sac_replay_client_destroy(&l);
  /* the attacker leaves: its queued replies are freed and the memory goes back */
  sac_net_close(&d);
  sac_net_ctx_destroy(&ctx);
  if (!UNDER_ASAN) {
    long after = rss_kb(s.pid);
    uint64_t end = sac_clock_ns() + 10000000000ull;
    while (after > before + 16 * 1024 && sac_clock_ns() < end) {
      sac_sleep_ns(100000000);
      after = rss_kb(s.pid);
    }
    cr_assert_leq(after, before + 16 * 1024, "RSS %ld KiB after the peer left, %ld KiB before it came", after,
                  before);
  }
}

Test(replay_hostile, unread_replies_negative_control) {
  /* The same attack with a reply queue as large as the old one (4096 replies): the RSS
   * check above must see it. Fewer requests keep the control cheap. */
  const char *extra[] = {"--max_sample_batch=4096", "--max_reply_queue_bytes=1073741824", NULL};
  const char *args[24];
  args_with(args, extra);
  shard_t s;
  spawn(&s, "unread-ctl", args);
  fill(&s, 1, 20);
  sac_net_ctx_t *ctx = sac_net_ctx_new(1);
  void *d = NULL;
  double grew = unread_attack(&s, 400, &d, ctx);
  cr_log_info("control: RSS grew %.1f MiB with an unbounded reply queue", grew);
  cr_assert_gt(grew, 48.0, "an unbounded queue must show (grew only %.1f MiB)", grew);
  sac_net_close(&d);
  sac_net_ctx_destroy(&ctx);
}

Test(replay_hostile, sample_peers_beyond_the_limit_are_refused) {
  const char *extra[] = {"--max_sample_peers=2", NULL};
  const char *args[24];
  args_with(args, extra);
  shard_t s;
  spawn(&s, "peers", args);
  fill(&s, 1, 5);
  sac_net_ctx_t *ctx = sac_net_ctx_new(1);
  sac_wire_decoder_t *dec = sac_wire_decoder_new(1 << 20);
  void *d[3];
  unsigned char buf[128];
  for (int i = 0; i < 3; i++) {
    d[i] = sac_net_socket(ctx, SAC_NET_DEALER, NULL);
    cr_assert_eq(sac_net_connect(d[i], s.smp), 0);
    sac_wire_msg_t m = {.type = SAC_WIRE_SAMPLE_REQUEST};
    m.u.sample_request = (sac_wire_sample_request_t){(uint64_t)i + 1, 8, 0.4f, 1000, SAC_WIRE_F32, 0};
    cr_assert_eq(sac_net_send(d[i], buf, enc(&m, buf, sizeof buf), 0), 0);
    sac_wire_msg_t r;
    cr_assert(recv_msg(d[i], dec, &r, 5000), "peer %d got no answer", i);
    cr_assert_eq(r.type, SAC_WIRE_SAMPLE_BATCH);
    if (i < 2)
      cr_assert_eq(r.u.sample_batch.n, 8, "peer %d: %s", i, r.u.sample_batch.error);
    else
      cr_assert(r.u.sample_batch.n == 0 && strstr(r.u.sample_batch.error, "max_sample_peers"),
                "the third peer is refused with the reason, got n=%u '%s'", r.u.sample_batch.n,
                r.u.sample_batch.error);
  }
  cr_assert_eq(metric_wait(s.metrics_port, "sac_replay_sample_peers_refused_total{shard=\"0\"}", 1.0), 1.0);
  for (int i = 0; i < 3; i++)
    sac_net_close(&d[i]);
  sac_wire_decoder_destroy(&dec);
  sac_net_ctx_destroy(&ctx);
}

/* ------------------------------------------------------------------ defects 3 and 14: sequence fields */

static sac_replay_shard_config_t shard_config(void) {
  sac_replay_shard_config_t c;
  sac_replay_shard_config_default(&c);
  c.capacity = 4096;
  c.obs_dim = 5;
  c.act_dim = 2;
  c.min_size = 1;
  c.max_batch_rows = 256;
  c.max_sample_batch = 256;
  return c;
}

static int insert(sac_replay_shard_t *sh, tg_t *g, uint64_t session, uint64_t seq, uint64_t acked,
                  sac_replay_insert_result_t *r) {
  sac_wire_transitions_t v = *tg_next(g);
  v.session = session;
  v.seq = seq;
  v.acked_through = acked;
  return sac_replay_shard_insert(sh, &v, r);
}

static uint64_t session_now(void) { return ((sac_wallclock_ns() / 1000u) << 12) | 1u; }

Test(replay_hostile, acked_through_is_checked_against_seq_and_the_window) {
  /* the wire refuses acked_through >= seq (the batch: acked_through = 2^64-1) */
  tg_t g;
  tg_init(&g, 7, 2, 5, 2, 20, 4);
  sac_wire_msg_t m = {.type = SAC_WIRE_TRANSITIONS}, d;
  m.u.transitions = *tg_next(&g);
  m.u.transitions.seq = 1;
  m.u.transitions.acked_through = UINT64_MAX;
  static unsigned char buf[1 << 16];
  size_t len = enc(&m, buf, sizeof buf);
  sac_wire_decoder_t *dec = sac_wire_decoder_new(1 << 20);
  sac_wire_reason_t why;
  cr_assert_neq(sac_wire_decode(dec, buf, len, NULL, &d, &why), 0);
  cr_assert_eq(why, SAC_WIRE_R_SEQUENCE, "reason %s", sac_wire_reason_name(why));
  sac_wire_decoder_destroy(&dec);

  /* the shard: a same-session jump past max_seq_jump is refused and later batches are
   * stored; acked_batches_lost_total never goes down */
  sac_replay_shard_config_t c = shard_config();
  c.max_seq_jump = 1000;
  sac_replay_shard_t *sh = sac_replay_shard_new(&c, NULL);
  sac_replay_insert_result_t r;
  uint64_t ses = session_now();
  cr_assert_eq(insert(sh, &g, ses, 1, 0, &r), 0);
  cr_assert_eq(insert(sh, &g, ses, UINT64_MAX, UINT64_MAX - 1, &r), SAC_EINVAL);
  cr_assert_eq(r.reason, SAC_WIRE_R_SEQUENCE, "reason %s", sac_wire_reason_name(r.reason));
  cr_assert_eq(insert(sh, &g, ses, 2, 1, &r), 0);
  cr_assert_eq(r.kind, SAC_REPLAY_SEQ_NEW, "a later batch is stored, not taken for a duplicate");
  cr_assert_eq(r.acked_seq, 2);
  /* a jump within max_seq_jump is the restart case: moves the window, counts the lost */
  cr_assert_eq(insert(sh, &g, ses, 503, 502, &r), 0);
  cr_assert_eq(r.kind, SAC_REPLAY_SEQ_NEW);
  sac_replay_shard_stats_t st;
  sac_replay_shard_stats(sh, &st);
  cr_assert_eq(st.acked_batches_lost_total, 500);
  sac_replay_shard_destroy(&sh);

  /* negative control: without the bound the same batch locks the actor out (every later
   * batch is a "duplicate", nothing stored) - the check above is what prevents it */
  c.max_seq_jump = 0;
  sh = sac_replay_shard_new(&c, NULL);
  cr_assert_eq(insert(sh, &g, ses, 1, 0, &r), 0);
  cr_assert_eq(insert(sh, &g, ses, UINT64_MAX, UINT64_MAX - 1, &r), 0);
  cr_assert_eq(insert(sh, &g, ses, 2, 1, &r), 0);
  cr_assert_eq(r.kind, SAC_REPLAY_SEQ_DUPLICATE);
  sac_replay_shard_stats(sh, &st);
  uint64_t lost = st.acked_batches_lost_total;
  cr_assert_gt(lost, 1ull << 60);
  /* a second huge jump (another actor) saturates instead of wrapping */
  tg_t g2;
  tg_init(&g2, 8, 2, 5, 2, 20, 4);
  cr_assert_eq(insert(sh, &g2, ses, UINT64_MAX, UINT64_MAX - 1, &r), 0);
  sac_replay_shard_stats(sh, &st);
  cr_assert_geq(st.acked_batches_lost_total, lost, "acked_batches_lost_total went down: %llu after %llu",
                (unsigned long long)st.acked_batches_lost_total, (unsigned long long)lost);
  sac_replay_shard_destroy(&sh);
  tg_free(&g);
  tg_free(&g2);
}

Test(replay_hostile, a_session_from_the_future_does_not_lock_an_actor_out) {
  sac_replay_shard_config_t c = shard_config();
  sac_replay_shard_t *sh = sac_replay_shard_new(&c, NULL);
  tg_t g;
  tg_init(&g, 3, 2, 5, 2, 20, 4);
  sac_replay_insert_result_t r;
  cr_assert_eq(insert(sh, &g, UINT64_MAX, 1, 0, &r), SAC_EINVAL);
  cr_assert_eq(r.reason, SAC_WIRE_R_SEQUENCE, "reason %s", sac_wire_reason_name(r.reason));
  cr_assert_eq(insert(sh, &g, session_now(), 1, 0, &r), 0);
  cr_assert_eq(r.kind, SAC_REPLAY_SEQ_NEW, "the real actor's batch is stored");
  sac_replay_shard_destroy(&sh);
  /* negative control: without the check the real actor is refused as superseded */
  c.max_session_ahead_s = 0;
  sh = sac_replay_shard_new(&c, NULL);
  cr_assert_eq(insert(sh, &g, UINT64_MAX, 1, 0, &r), 0);
  cr_assert_eq(insert(sh, &g, session_now(), 1, 0, &r), SAC_EINVAL);
  cr_assert_eq(r.reason, SAC_WIRE_R_SESSION);
  sac_replay_shard_destroy(&sh);
  tg_free(&g);
}

Test(replay_hostile, idle_actors_are_forgotten_when_the_table_is_full) {
  sac_replay_shard_config_t c = shard_config();
  c.max_actors = 2;
  c.actor_idle_s = 0.3;
  sac_replay_shard_t *sh = sac_replay_shard_new(&c, NULL);
  tg_t g[3];
  sac_replay_insert_result_t r;
  for (int a = 0; a < 3; a++)
    tg_init(&g[a], (uint32_t)a + 1, 2, 5, 2, 20, 4);
  cr_assert_eq(insert(sh, &g[0], 5, 1, 0, &r), 0);
  cr_assert_eq(insert(sh, &g[1], 5, 1, 0, &r), 0);
  cr_assert_eq(insert(sh, &g[2], 5, 1, 0, &r), SAC_EINVAL);
  cr_assert_eq(r.reason, SAC_WIRE_R_ACTORS, "the true reason, got %s", sac_wire_reason_name(r.reason));
  sac_sleep_ns(200000000);
  cr_assert_eq(insert(sh, &g[1], 5, 2, 1, &r), 0); /* actor 2 stays active */
  sac_sleep_ns(200000000);                         /* actor 1: silent 0.4 s > 0.3 s */
  cr_assert_eq(insert(sh, &g[2], 5, 1, 0, &r), 0, "a new actor takes an idle one's place");
  cr_assert_eq(r.kind, SAC_REPLAY_SEQ_NEW);
  sac_replay_shard_stats_t st;
  sac_replay_shard_stats(sh, &st);
  cr_assert_eq(st.actors_expired_total, 1);
  cr_assert_eq(st.actors, 2);
  /* actor 2 kept its window (its resend is a duplicate), actor 1 is the one forgotten */
  cr_assert_eq(insert(sh, &g[1], 5, 2, 1, &r), 0);
  cr_assert_eq(r.kind, SAC_REPLAY_SEQ_DUPLICATE);
  cr_assert_eq(insert(sh, &g[0], 5, 2, 1, &r), SAC_EINVAL, "actor 1 was forgotten; the table is full again");
  cr_assert_eq(r.reason, SAC_WIRE_R_ACTORS);
  sac_replay_shard_destroy(&sh);
  for (int a = 0; a < 3; a++)
    tg_free(&g[a]);
}

Test(replay_hostile, log_rate_limit_keyed_by_call_site) {
  char path[400];
  snprintf(path, sizeof path, "%s/log.txt", g_dir);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  cr_assert_geq(fd, 0);
  int saved = dup(2);
  dup2(fd, 2);
  sac_log_limit_t lim = {0};
  int written = 0;
  for (int i = 0; i < 1000; i++)
    written += sac_log_limited(&lim, 0.2, SAC_LOG_WARN, "test", "line %d", i);
  sac_sleep_ns(250000000);
  written += sac_log_limited(&lim, 0.2, SAC_LOG_WARN, "test", "line after");
  for (int i = 0; i < 100; i++)
    SAC_WARN_EVERY(60.0, "test", "macro line %d", i); /* one call site: one line */
  dup2(saved, 2);
  close(saved);
  close(fd);
  cr_assert_eq(written, 2, "first line and one after the interval, got %d", written);
  char text[4096] = {0};
  FILE *f = fopen(path, "r");
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = 0;
  cr_assert(strstr(text, "line 0"), "%s", text);
  cr_assert(strstr(text, "line after (999 similar lines suppressed)"), "%s", text);
  cr_assert(strstr(text, "macro line 0"), "%s", text);
  cr_assert_null(strstr(text, "macro line 1"), "%s", text);
}

/* ------------------------------------------------------------------ defect 6 */

static void write_snapshot(const char *path, uint32_t shard_id) {
  sac_replay_shard_config_t c = shard_config();
  c.capacity = 20000;
  c.min_size = 10;
  c.shard_id = shard_id;
  sac_replay_shard_t *sh = sac_replay_shard_new(&c, NULL);
  tg_t g;
  tg_init(&g, 1, 4, 5, 2, 20, 16);
  sac_replay_insert_result_t r;
  for (uint64_t q = 1; q <= 5; q++)
    cr_assert_eq(insert(sh, &g, 5, q, q - 1, &r), 0);
  cr_assert_eq(sac_replay_shard_save(sh, path, NULL), 0);
  sac_replay_shard_destroy(&sh);
  tg_free(&g);
}

Test(replay_hostile, another_shards_snapshot_is_refused) {
  char snap[400], arg[450];
  snprintf(snap, sizeof snap, "%s/shard.snap", g_dir);
  snprintf(arg, sizeof arg, "--snapshot_path=%s", snap);
  write_snapshot(snap, 1);
  /* in process */
  sac_replay_shard_config_t c = shard_config();
  c.capacity = 20000;
  c.min_size = 10;
  c.shard_id = 2;
  sac_replay_shard_t *sh = sac_replay_shard_new(&c, NULL);
  cr_assert_eq(sac_replay_shard_load(sh, snap), SAC_ESTATE);
  sac_replay_shard_stats_t st;
  sac_replay_shard_stats(sh, &st);
  cr_assert_eq(st.size, 0, "nothing of shard 1 is served as shard 2");
  sac_replay_shard_destroy(&sh);
  /* as a process: exit code 3 with the reason, also with start_empty_on_bad_snapshot */
  const char *extra[] = {"--shard_id=2", arg, "--start_empty_on_bad_snapshot=1", NULL};
  const char *args[24];
  args_with(args, extra);
  static char out[1 << 16];
  int rc = run_to_exit("foreign", args, 20.0, out, sizeof out);
  cr_assert_eq(rc, 3, "exit code %d: %s", rc, out);
  cr_assert(strstr(out, "belongs to shard 1"), "%s", out);
  cr_assert_eq(access(snap, F_OK), 0, "the other shard's snapshot is left where it is");
  /* adopt_snapshot=1 takes it over */
  const char *adopt[] = {"--shard_id=2", arg, "--adopt_snapshot=1", NULL};
  args_with(args, adopt);
  shard_t s;
  spawn(&s, "adopt", args);
  cr_assert_gt(metric(s.metrics_port, "sac_replay_size{shard=\"2\"}"), 0.0);
}

/* ------------------------------------------------------------------ defects 7 and 10 */

Test(replay_hostile, snapshot_paths_must_be_regular_files) {
  static char out[1 << 16];
  char path[400], arg[450];
  const char *args[24];
  /* a directory: refused with what it is, never renamed (also with the flag) */
  snprintf(path, sizeof path, "%s/adir", g_dir);
  cr_assert_eq(mkdir(path, 0755), 0);
  snprintf(arg, sizeof arg, "--snapshot_path=%s", path);
  const char *dir_args[] = {arg, "--start_empty_on_bad_snapshot=1", NULL};
  args_with(args, dir_args);
  int rc = run_to_exit("dir", args, 20.0, out, sizeof out);
  cr_assert(rc == 2 || rc == 3, "exit code %d: %s", rc, out);
  cr_assert(strstr(out, "is a directory, not a regular file"), "%s", out);
  struct stat sb;
  cr_assert(stat(path, &sb) == 0 && S_ISDIR(sb.st_mode), "the directory is still there");
  /* a FIFO: refused at once, no hang */
  snprintf(path, sizeof path, "%s/afifo", g_dir);
  cr_assert_eq(mkfifo(path, 0644), 0);
  snprintf(arg, sizeof arg, "--snapshot_path=%s", path);
  const char *fifo_args[] = {arg, NULL};
  args_with(args, fifo_args);
  /* a hang (an open() for writing that waits for a reader) uses no CPU: run_to_exit's
   * reap gives -2 after 10 s without progress */
  rc = run_to_exit("fifo", args, 10.0, out, sizeof out);
  cr_assert(rc == 2 || rc == 3, "exit code %d (-2: hung, no progress for 10 s): %s", rc, out);
  cr_assert(strstr(out, "is a FIFO, not a regular file"), "%s", out);
  cr_assert(stat(path, &sb) == 0 && S_ISFIFO(sb.st_mode), "the FIFO is still there");
  /* a folder that takes no files (here: below a regular file) fails the start */
  snprintf(path, sizeof path, "%s/plainfile", g_dir);
  FILE *f = fopen(path, "w");
  fclose(f);
  snprintf(arg, sizeof arg, "--snapshot_path=%s/plainfile/shard.snap", g_dir);
  const char *ro_args[] = {arg, NULL};
  args_with(args, ro_args);
  rc = run_to_exit("nofolder", args, 20.0, out, sizeof out);
  cr_assert_eq(rc, 2, "exit code %d: %s", rc, out);
  cr_assert(strstr(out, "cannot create files in"), "%s", out);
}

Test(replay_hostile, healthz_reflects_failing_snapshots) {
  char dir[400], moved[400], arg[450];
  snprintf(dir, sizeof dir, "%s/snaps", g_dir);
  snprintf(moved, sizeof moved, "%s/snaps-away", g_dir);
  cr_assert_eq(mkdir(dir, 0755), 0);
  snprintf(arg, sizeof arg, "--snapshot_path=%s/shard.snap", dir);
  const char *extra[] = {arg, "--snapshot_interval_s=0.2", NULL};
  const char *args[24];
  args_with(args, extra);
  shard_t s;
  spawn(&s, "health", args);
  static char body[4096];
  cr_assert_eq(http_get(s.metrics_port, "/healthz", body, sizeof body), 200);
  /* the folder goes away (a regular file in its place): every snapshot fails */
  cr_assert_eq(rename(dir, moved), 0);
  FILE *f = fopen(dir, "w");
  fclose(f);
  int code = 200;
  uint64_t end = sac_clock_ns() + 10000000000ull;
  while ((code = http_get(s.metrics_port, "/healthz", body, sizeof body)) == 200 && sac_clock_ns() < end)
    sac_sleep_ns(100000000);
  cr_assert_eq(code, 503, "/healthz answered %d while snapshots fail", code);
  cr_assert(strstr(body, "snapshots to"), "%s", body);
  /* the folder comes back: healthy again */
  cr_assert_eq(unlink(dir), 0);
  cr_assert_eq(rename(moved, dir), 0);
  end = sac_clock_ns() + 10000000000ull;
  while ((code = http_get(s.metrics_port, "/healthz", body, sizeof body)) != 200 && sac_clock_ns() < end)
    sac_sleep_ns(100000000);
  cr_assert_eq(code, 200, "/healthz answered %d after snapshots work again", code);
}

Test(replay_hostile, stale_snapshot_temporaries_are_removed) {
  char snap[400], dead[450], live[450], other[450];
  snprintf(snap, sizeof snap, "%s/shard.snap", g_dir);
  pid_t child = fork();
  if (child == 0)
    _exit(0);
  cr_assert_eq(reap(child, 5.0), 0); /* a pid that is not alive any more */
  snprintf(dead, sizeof dead, "%s.tmp.%ld", snap, (long)child);
  snprintf(live, sizeof live, "%s.tmp.%ld", snap, (long)getppid()); /* alive: another writer */
  snprintf(other, sizeof other, "%s/other.snap.tmp.%ld", g_dir, (long)child);
  const char *files[] = {dead, live, other};
  for (int i = 0; i < 3; i++) {
    FILE *f = fopen(files[i], "w");
    cr_assert_not_null(f);
    fputs("partial snapshot", f);
    fclose(f);
  }
  uint64_t removed = 0;
  cr_assert_eq(sac_snap_prepare(snap, &removed), 0);
  cr_assert_eq(removed, 1);
  cr_assert_neq(access(dead, F_OK), 0, "the dead process's temporary is removed");
  cr_assert_eq(access(live, F_OK), 0, "a live process's temporary is kept");
  cr_assert_eq(access(other, F_OK), 0, "another snapshot path's temporary is kept");
}

/* ------------------------------------------------------------------ defects 8 and 9 */

Test(replay_hostile, huge_finite_values_are_refused) {
  shard_t s;
  const char *args[24];
  args_with(args, NULL);
  spawn(&s, "range", args);
  sac_net_ctx_t *ctx = sac_net_ctx_new(1);
  sac_wire_decoder_t *dec = sac_wire_decoder_new(1 << 20);
  void *d = sac_net_socket(ctx, SAC_NET_DEALER, NULL);
  cr_assert_eq(sac_net_connect(d, s.ins), 0);
  tg_t g;
  tg_init(&g, 4, 2, 5, 2, 20, 4);
  sac_wire_msg_t m = {.type = SAC_WIRE_TRANSITIONS}, r;
  m.u.transitions = *tg_next(&g);
  m.u.transitions.session = session_now();
  g.rew[0] = 3e38f;
  static unsigned char buf[1 << 16];
  cr_assert_eq(sac_net_send(d, buf, enc(&m, buf, sizeof buf), 0), 0);
  cr_assert(recv_msg(d, dec, &r, 5000));
  cr_assert_eq(r.type, SAC_WIRE_ACK);
  cr_assert_eq(r.u.ack.stored, 0);
  cr_assert(strstr(r.u.ack.error, "range"), "refused with the reason, got '%s'", r.u.ack.error);
  cr_assert_eq(
      metric_wait(s.metrics_port, "sac_replay_rejected_messages_total{shard=\"0\",reason=\"range\"}", 1.0),
      1.0);
  /* the same batch with a sane reward is stored */
  g.rew[0] = 1.0f;
  cr_assert_eq(sac_net_send(d, buf, enc(&m, buf, sizeof buf), 0), 0);
  cr_assert(recv_msg(d, dec, &r, 5000));
  cr_assert_eq(r.u.ack.error[0], 0, "%s", r.u.ack.error);
  cr_assert_gt(r.u.ack.stored, 0);
  sac_net_close(&d);
  sac_wire_decoder_destroy(&dec);
  sac_net_ctx_destroy(&ctx);
  /* negative control at the wire level: max_abs_value 0 checks finiteness only */
  g.rew[0] = 3e38f;
  sac_wire_decoder_t *d2 = sac_wire_decoder_new(1 << 20);
  sac_wire_limits_t on = {.max_abs_value = 1e6f}, off = {0};
  sac_wire_reason_t why;
  cr_assert_eq(sac_wire_validate(d2, &m, &on, &why), SAC_EINVAL);
  cr_assert_eq(why, SAC_WIRE_R_RANGE);
  cr_assert_eq(sac_wire_validate(d2, &m, &off, &why), 0);
  sac_wire_decoder_destroy(&d2);
  tg_free(&g);
}

Test(replay_hostile, oversized_replies_and_frame_errors) {
  static char out[1 << 16];
  /* a configuration whose largest sample does not fit max_msg_bytes is refused at start */
  const char *big[] = {"--insert_endpoint=tcp://127.0.0.1:*",
                       "--sample_endpoint=tcp://127.0.0.1:*",
                       "--obs_dim=4096",
                       "--act_dim=6",
                       "--max_sample_batch=128",
                       "--metrics_port=-1",
                       NULL};
  int rc = run_to_exit("toobig", big, 20.0, out, sizeof out);
  cr_assert_eq(rc, 2, "exit code %d: %s", rc, out);
  cr_assert(strstr(out, "more than max_msg_bytes=4194304"), "%s", out);
  /* frame-count errors and rejected messages on the sample endpoint are answered */
  shard_t s;
  const char *args[24];
  args_with(args, NULL);
  spawn(&s, "frames", args);
  sac_net_ctx_t *ctx = sac_net_ctx_new(1);
  sac_wire_decoder_t *dec = sac_wire_decoder_new(1 << 20);
  void *d = sac_net_socket(ctx, SAC_NET_DEALER, NULL);
  cr_assert_eq(sac_net_connect(d, s.smp), 0);
  cr_assert_eq(sac_net_send(d, "a", 1, SAC_NET_SNDMORE), 0);
  cr_assert_eq(sac_net_send(d, "b", 1, 0), 0);
  sac_wire_msg_t r;
  cr_assert(recv_msg(d, dec, &r, 5000), "a two-frame message is answered");
  cr_assert_eq(r.type, SAC_WIRE_SAMPLE_BATCH);
  cr_assert(strstr(r.u.sample_batch.error, "frames"), "%s", r.u.sample_batch.error);
  float prio[1] = {NAN};
  uint64_t idx[1] = {0};
  sac_wire_msg_t m = {.type = SAC_WIRE_PRIORITY_UPDATE};
  m.u.priority_update = (sac_wire_priority_update_t){.n = 1, .indices = idx, .priorities = prio};
  unsigned char buf[256];
  cr_assert_eq(sac_net_send(d, buf, enc(&m, buf, sizeof buf), 0), 0);
  cr_assert(recv_msg(d, dec, &r, 5000), "a rejected priority update is answered");
  cr_assert(strstr(r.u.sample_batch.error, "NaN"), "%s", r.u.sample_batch.error);
  cr_assert_eq(
      metric_wait(s.metrics_port, "sac_replay_rejected_messages_total{shard=\"0\",reason=\"frames\"}", 1.0),
      1.0);
  sac_net_close(&d);
  sac_wire_decoder_destroy(&dec);
  sac_net_ctx_destroy(&ctx);
}

/* ------------------------------------------------------------------ defects 12 and 15 */

Test(replay_hostile, every_failing_exit_says_why) {
  static char out[1 << 16];
  /* inside the documented range: now it starts (the held-batch buffer is reserved, not
   * allocated); before, it exited 1 without a word */
  const char *held[] = {"--insert_endpoint=tcp://127.0.0.1:*",
                        "--sample_endpoint=tcp://127.0.0.1:*",
                        "--obs_dim=5",
                        "--act_dim=2",
                        "--max_held_bytes=68719476736",
                        "--metrics_port=-1",
                        NULL};
  shard_t s;
  fork_replay(&s, "held", held);
  if (!wait_ready(&s, 20.0)) { /* only where the kernel refuses even a reservation (overcommit 2) */
    FILE *f = fopen(s.log, "r");
    size_t n = f ? fread(out, 1, sizeof out - 1, f) : 0;
    out[n] = 0;
    if (f)
      fclose(f);
    cr_assert(strstr(out, "exiting with code"), "exit code %d with max_held_bytes 64 GiB and no reason: %s",
              -s.pid, out);
  }
  struct {
    const char *arg, *expect, *not_expect;
  } cases[] = {
      {"--insert_endpoint=tcp://127.0.0.1:99999", "a tcp:// endpoint needs a port 1..65535", NULL},
      {"--min_size=30000", "min_size 30000 is above capacity 20000", NULL},
      {"--max_held_bytes=8192", "max_held_bytes must be >= max_msg_bytes", "insert_credit"},
      {"--sampler=bogus", "exiting with code 2", NULL},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *extra[] = {cases[i].arg, NULL};
    const char *args[24];
    args_with(args, extra);
    int rc = run_to_exit("bad", args, 20.0, out, sizeof out);
    cr_assert_eq(rc, 2, "%s: exit code %d: %s", cases[i].arg, rc, out);
    cr_assert(strstr(out, cases[i].expect), "%s: %s", cases[i].arg, out);
    cr_assert(strstr(out, "exiting with code 2"), "%s: the last line says why: %s", cases[i].arg, out);
    if (cases[i].not_expect)
      cr_assert_null(strstr(out, cases[i].not_expect), "%s names only the broken constraint: %s",
                     cases[i].arg, out);
  }
}
