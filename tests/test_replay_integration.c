/* Integration tests with real sac-replay processes on 127.0.0.1 (ports picked by the
 * shards, read back from their ready files): two actors insert into two shards and a
 * learner samples from both; a shard is killed with SIGKILL after a snapshot and
 * restarted, and every acknowledged-and-snapshotted transition is still there (and the
 * actor's batches sent while it was down are delivered once, not twice); bad input of
 * every kind against a live shard is rejected and counted while the shard keeps
 * serving with its data intact. Only processes this test started are signalled, by
 * PID; every wait is bounded. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/net.h"
#include "common/rng.h"
#include "common/wire.h"
#include "proto/sac.pb-c.h"
#include "replay/client.h"
#include "tests/replay_testgen.h"
#include "tests/wait_progress.h"

#define MAX_PROCS 8
static pid_t g_pids[MAX_PROCS];
static char g_dir[256];

static void setup(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/sac-replay-it-%ld-XXXXXX", (long)getpid());
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
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  int rc = system(cmd);
  (void)rc;
}

typedef struct {
  pid_t pid;
  char ins[300], smp[300];
  char ready[400];
} shard_t;

/* Starts sac-replay with the given extra "--key=value" arguments (NULL-terminated). */
static void spawn(shard_t *s, const char *name, const char *const *extra) {
  snprintf(s->ready, sizeof s->ready, "%s/%s.ready", g_dir, name);
  unlink(s->ready);
  char log[400], ready_arg[450];
  snprintf(log, sizeof log, "%s/%s.log", g_dir, name);
  snprintf(ready_arg, sizeof ready_arg, "--ready_file=%s", s->ready);
  const char *argv[40];
  int n = 0;
  argv[n++] = SAC_BUILD_DIR "/replay/sac-replay";
  argv[n++] = ready_arg;
  int durable = 0; /* a shard without a snapshot path must say it keeps nothing */
  for (int i = 0; extra[i]; i++)
    durable |= !strncmp(extra[i], "--snapshot_path=", 16) || !strncmp(extra[i], "--durability=", 13);
  if (!durable)
    argv[n++] = "--durability=none";
  for (int i = 0; extra[i] && n < 38; i++)
    argv[n++] = extra[i];
  argv[n] = NULL;
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
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
  /* wait for the ready file, by progress: fails once the shard has used no CPU and
   * logged nothing for 15 s (tests/wait_progress.h) */
  wp_t w;
  wp_start(&w, wp_token(pid, log));
  for (;;) {
    FILE *f = fopen(s->ready, "r");
    if (f) {
      char line[300];
      s->ins[0] = s->smp[0] = 0;
      while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        if (!strncmp(line, "insert=", 7))
          snprintf(s->ins, sizeof s->ins, "%s", line + 7);
        if (!strncmp(line, "sample=", 7))
          snprintf(s->smp, sizeof s->smp, "%s", line + 7);
      }
      fclose(f);
      if (s->ins[0] && s->smp[0])
        return;
    }
    int status;
    cr_assert_eq(waitpid(pid, &status, WNOHANG), 0, "sac-replay %s exited early (see %s)", name, log);
    cr_assert(!wp_stalled(&w, wp_token(pid, log), 15.0),
              "sac-replay %s not ready and no progress for 15 s (see %s)", name, log);
    sac_sleep_ns(20000000);
  }
}

static int alive(pid_t pid) {
  int status;
  return waitpid(pid, &status, WNOHANG) == 0;
}

static sac_replay_client_t *client(size_t n, const char *const *ins, const char *const *smp, uint32_t actor,
                                   uint32_t batch) {
  sac_replay_client_config_t c;
  sac_replay_client_config_default(&c);
  c.n_shards = n;
  c.insert_endpoints = ins;
  c.sample_endpoints = smp;
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

static void check_batch(const sac_replay_batch_t *b) {
  for (uint32_t i = 0; i < b->n; i++) {
    const char *why;
    cr_assert(tg_check(5, 2, b->obs + i * 5, b->action + i * 2, b->reward[i], b->terminated[i],
                       b->next_obs + i * 5, &why),
              "sampled row %u of shard %u: %s", i, b->shard_id, why);
  }
}

TestSuite(replay_integration, .init = setup, .fini = teardown, .timeout = 100);

Test(replay_integration, two_actors_two_shards_one_learner) {
  shard_t sh[2];
  const char *a0[] = {"--shard_id=0",
                      "--insert_endpoint=tcp://127.0.0.1:*",
                      "--sample_endpoint=tcp://127.0.0.1:*",
                      "--capacity=20000",
                      "--obs_dim=5",
                      "--act_dim=2",
                      "--min_size=100",
                      "--sampler=prioritized",
                      "--max_msg_bytes=1048576",
                      NULL};
  const char *a1[] = {"--shard_id=1",
                      "--insert_endpoint=tcp://127.0.0.1:*",
                      "--sample_endpoint=tcp://127.0.0.1:*",
                      "--capacity=20000",
                      "--obs_dim=5",
                      "--act_dim=2",
                      "--min_size=100",
                      "--sampler=prioritized",
                      "--max_msg_bytes=1048576",
                      NULL};
  spawn(&sh[0], "s0", a0);
  spawn(&sh[1], "s1", a1);
  const char *ins[2] = {sh[0].ins, sh[1].ins}, *smp[2] = {sh[0].smp, sh[1].smp};
  sac_replay_client_t *act[2] = {client(2, ins, NULL, 1, 0), client(2, ins, NULL, 2, 0)};
  tg_t g[2];
  tg_init(&g[0], 1, 4, 5, 2, 30, 8);
  tg_init(&g[1], 2, 4, 5, 2, 30, 8);
  for (int b = 0; b < 40; b++)
    for (int a = 0; a < 2; a++) {
      /* batches alternate shards, so each shard sees every other piece of a stream:
       * a batch's tails are never reused there, and next_obs stays exact */
      cr_assert_eq(sac_replay_client_insert(act[a], b % 2, tg_next(&g[a]), 5000), 0);
    }
  for (int a = 0; a < 2; a++)
    cr_assert_eq(sac_replay_client_flush(act[a], 10000), 0);
  sac_replay_client_t *learner = client(2, NULL, smp, 0, 128);
  int seen_shard[2] = {0}, seen_actor[3] = {0};
  for (int k = 0; k < 60; k++) {
    sac_replay_batch_t b;
    cr_assert_eq(sac_replay_client_sample(learner, 5000, &b), 0, "batch %d", k);
    cr_assert_eq(b.n, 128);
    cr_assert_lt(b.shard_id, 2);
    seen_shard[b.shard_id] = 1;
    for (uint32_t i = 0; i < b.n; i++) {
      int actor = (int)b.obs[i * 5 + 3];
      cr_assert(actor == 1 || actor == 2);
      seen_actor[actor] = 1;
    }
    check_batch(&b);
    float pr[128];
    for (int i = 0; i < 128; i++)
      pr[i] = (float)(i % 10) + 0.1f;
    cr_assert_eq(sac_replay_client_update_priorities(learner, b.n, b.indices, pr), 0);
  }
  cr_assert(seen_shard[0] && seen_shard[1], "the learner read from both shards");
  cr_assert(seen_actor[1] && seen_actor[2], "both actors' data came back");
  for (int s = 0; s < 2; s++) {
    sac_wire_shard_info_t info;
    cr_assert_eq(sac_replay_client_info(learner, (size_t)s, 5000, &info), 0);
    cr_assert_eq(info.shard_id, (uint32_t)s);
    cr_assert_eq(info.inserted_total, 2 * 20 * 32, "shard %d stored every acked row once", s);
    cr_assert_eq(info.rejected_total, 0);
  }
  sac_replay_client_stats_t ls;
  sac_replay_client_stats(learner, &ls);
  cr_assert_eq(ls.priority_updates_dropped, 0);
  cr_assert_eq(ls.priority_updates_sent, 60 * 128);
  for (int a = 0; a < 2; a++) {
    sac_replay_client_destroy(&act[a]);
    tg_free(&g[a]);
  }
  sac_replay_client_destroy(&learner);
  for (int s = 0; s < 2; s++) {
    kill(sh[s].pid, SIGTERM);
    cr_assert_eq(reap(sh[s].pid, 10.0), 0, "graceful SIGTERM exits 0");
    forget(sh[s].pid);
  }
}

/* Key of a generated transition: (actor, env, episode, step). */
static uint32_t key_of(const float *o) {
  return ((uint32_t)o[0] * 1000u + (uint32_t)o[2]) * 100u + (uint32_t)o[1];
}

Test(replay_integration, kill9_after_snapshot_then_restart) {
  char snap[400], snap_arg[450];
  snprintf(snap, sizeof snap, "%s/shard.snap", g_dir);
  snprintf(snap_arg, sizeof snap_arg, "--snapshot_path=%s", snap);
  const char *args[] = {"--insert_endpoint=tcp://127.0.0.1:*",
                        "--sample_endpoint=tcp://127.0.0.1:*",
                        "--capacity=50000",
                        "--obs_dim=5",
                        "--act_dim=2",
                        "--min_size=10",
                        "--snapshot_interval_s=0",
                        snap_arg,
                        NULL};
  shard_t s;
  spawn(&s, "k9", args);
  const char *ins[1] = {s.ins}, *smp[1] = {s.smp};
  sac_replay_client_t *actor = client(1, ins, NULL, 1, 0);
  tg_t g;
  tg_init(&g, 1, 4, 5, 2, 40, 8);
  for (int b = 0; b < 30; b++)
    cr_assert_eq(sac_replay_client_insert(actor, 0, tg_next(&g), 5000), 0);
  cr_assert_eq(sac_replay_client_flush(actor, 10000), 0);
  /* snapshot now (SIGUSR1) and wait until it covers every acknowledged row */
  cr_assert_eq(kill(s.pid, SIGUSR1), 0);
  sac_wire_shard_info_t info;
  wp_t w;
  wp_start(&w, wp_token(s.pid, NULL));
  for (;;) {
    cr_assert_eq(sac_replay_client_info(actor, 0, 3000, &info), 0);
    if (info.snapshot_inserted_total >= 960)
      break;
    cr_assert(!wp_stalled(&w, wp_token(s.pid, NULL), 10.0),
              "no snapshot, and the shard used no CPU for 10 s");
    sac_sleep_ns(50000000);
  }
  cr_assert_eq(info.snapshot_inserted_total, 960);
  cr_assert_eq(kill(s.pid, SIGKILL), 0);
  cr_assert_eq(reap(s.pid, 10.0), 128 + SIGKILL);
  forget(s.pid);
  /* while the shard is down the actor goes on: these batches wait in its window */
  for (int b = 0; b < 5; b++)
    cr_assert_eq(sac_replay_client_insert(actor, 0, tg_next(&g), 5000), 0);
  cr_assert_eq(sac_replay_client_flush(actor, 300), SAC_ETIMEOUT, "nobody acked them yet");
  /* restart on the same ports with the same snapshot */
  char ins_arg[340], smp_arg[340];
  snprintf(ins_arg, sizeof ins_arg, "--insert_endpoint=%s", s.ins);
  snprintf(smp_arg, sizeof smp_arg, "--sample_endpoint=%s", s.smp);
  const char *args2[] = {ins_arg,       smp_arg,         "--capacity=50000",        "--obs_dim=5",
                         "--act_dim=2", "--min_size=10", "--snapshot_interval_s=0", snap_arg,
                         NULL};
  shard_t s2;
  spawn(&s2, "k9b", args2);
  cr_assert_eq(sac_replay_client_flush(actor, 15000), 0, "the window was resent after the reconnect");
  sac_replay_client_t *learner = client(1, NULL, smp, 0, 256);
  cr_assert_eq(sac_replay_client_info(learner, 0, 5000, &info), 0);
  cr_assert_eq(info.size, 960 + 160, "snapshotted rows plus the resent ones, each exactly once");
  /* every snapshotted transition is there: sample until all 960 + 160 keys are seen */
  static unsigned char seen[4 * 1000 * 100];
  memset(seen, 0, sizeof seen);
  uint32_t distinct = 0;
  for (int k = 0; k < 200 && distinct < 1120; k++) {
    sac_replay_batch_t b;
    cr_assert_eq(sac_replay_client_sample(learner, 5000, &b), 0);
    check_batch(&b);
    for (uint32_t i = 0; i < b.n; i++) {
      uint32_t key = key_of(b.obs + i * 5);
      cr_assert_lt(key, sizeof seen);
      if (!seen[key]) {
        seen[key] = 1;
        distinct++;
      }
    }
  }
  cr_assert_eq(distinct, 1120, "every stored transition was sampled at least once");
  sac_replay_client_destroy(&actor);
  sac_replay_client_destroy(&learner);
  kill(s2.pid, SIGTERM);
  cr_assert_eq(reap(s2.pid, 10.0), 0);
  forget(s2.pid);
  tg_free(&g);
}

static void send_raw(void *sock, const void *buf, size_t len) {
  cr_assert_eq(sac_net_send(sock, buf, len, 0), 0);
}

Test(replay_integration, bad_input_against_a_live_shard) {
  const char *args[] = {"--insert_endpoint=tcp://127.0.0.1:*",
                        "--sample_endpoint=tcp://127.0.0.1:*",
                        "--capacity=20000",
                        "--obs_dim=5",
                        "--act_dim=2",
                        "--min_size=10",
                        "--max_msg_bytes=65536",
                        "--max_sample_batch=512", /* its largest reply must fit 64 KiB */
                        "--sampler=prioritized",
                        NULL};
  shard_t s;
  spawn(&s, "bad", args);
  const char *ins[1] = {s.ins}, *smp[1] = {s.smp};
  sac_replay_client_t *actor = client(1, ins, smp, 1, 64);
  tg_t g;
  tg_init(&g, 1, 4, 5, 2, 20, 8);
  for (int b = 0; b < 10; b++)
    cr_assert_eq(sac_replay_client_insert(actor, 0, tg_next(&g), 5000), 0);
  cr_assert_eq(sac_replay_client_flush(actor, 10000), 0);

  sac_net_ctx_t *ctx = sac_net_ctx_new(1);
  void *raw = sac_net_socket(ctx, SAC_NET_DEALER, NULL);
  void *raw_s = sac_net_socket(ctx, SAC_NET_DEALER, NULL);
  cr_assert_eq(sac_net_connect(raw, s.ins), 0);
  cr_assert_eq(sac_net_connect(raw_s, s.smp), 0);
  static unsigned char buf[300000];
  int sent_bad = 0;
  /* random bytes */
  sac_rng_t rng;
  sac_rng_init(&rng, 3, 3);
  for (int i = 0; i < 20; i++) {
    size_t n = 1 + (size_t)sac_rng_below(&rng, 500);
    for (size_t j = 0; j < n; j++)
      buf[j] = (unsigned char)sac_rng_u32(&rng);
    send_raw(raw, buf, n);
    sent_bad++;
  }
  /* truncated valid batch, wrong dims, NaN, length mismatch, wrong version */
  tg_t bad;
  tg_init(&bad, 9, 2, 5, 2, 20, 4);
  sac_wire_msg_t m = {.type = SAC_WIRE_TRANSITIONS};
  m.u.transitions = *tg_next(&bad);
  size_t len = 0;
  cr_assert_eq(sac_wire_encode(&m, buf, sizeof buf, &len), 0);
  send_raw(raw, buf, len / 2);
  sent_bad++;
  tg_t bad6;
  tg_init(&bad6, 9, 2, 6, 2, 20, 4);
  m.u.transitions = *tg_next(&bad6);
  cr_assert_eq(sac_wire_encode(&m, buf, sizeof buf, &len), 0);
  send_raw(raw, buf, len);
  sent_bad++;
  m.u.transitions = *tg_next(&bad);
  bad.obs[3] = NAN;
  cr_assert_eq(sac_wire_encode(&m, buf, sizeof buf, &len), 0);
  send_raw(raw, buf, len);
  sent_bad++;
  bad.obs[3] = 0;
  bad.rew[0] = -INFINITY;
  cr_assert_eq(sac_wire_encode(&m, buf, sizeof buf, &len), 0);
  send_raw(raw, buf, len);
  sent_bad++;
  bad.rew[0] = 0;
  {
    Sac__TransitionBatch t = SAC__TRANSITION_BATCH__INIT;
    uint32_t env[2] = {0, 1};
    float obs[10] = {0}, act[4] = {0}, rew[2] = {0};
    uint8_t z[2] = {0};
    t.seq = 1;
    t.n = 2;
    t.obs_dim = 5;
    t.act_dim = 2;
    t.env_ids = (ProtobufCBinaryData){8, (uint8_t *)env};
    t.obs = (ProtobufCBinaryData){36, (uint8_t *)obs}; /* 9 floats for 2 x 5 */
    t.action = (ProtobufCBinaryData){16, (uint8_t *)act};
    t.reward = (ProtobufCBinaryData){8, (uint8_t *)rew};
    t.terminated = (ProtobufCBinaryData){2, z};
    t.truncated = (ProtobufCBinaryData){2, z};
    Sac__Envelope env_msg = SAC__ENVELOPE__INIT;
    env_msg.protocol = SAC_PROTOCOL_VERSION;
    env_msg.body_case = SAC__ENVELOPE__BODY_TRANSITIONS;
    env_msg.transitions = &t;
    send_raw(raw, buf, sac__envelope__pack(&env_msg, buf));
    sent_bad++;
    env_msg.protocol = 99;
    t.obs.len = 40;
    send_raw(raw, buf, sac__envelope__pack(&env_msg, buf));
    sent_bad++;
  }
  /* oversized but under ZMQ_MAXMSGSIZE: received, counted as too_big */
  memset(buf, 0x11, 70000);
  send_raw(raw, buf, 70000);
  sent_bad++;
  /* two frames where one is expected */
  cr_assert_eq(sac_net_send(raw, buf, 10, SAC_NET_SNDMORE), 0);
  send_raw(raw, buf, 10);
  sent_bad++;
  /* on the sample endpoint: bad requests and priorities */
  m = (sac_wire_msg_t){.type = SAC_WIRE_SAMPLE_REQUEST};
  m.u.sample_request = (sac_wire_sample_request_t){1, 0, 0.4f, 10, SAC_WIRE_F32, 0};
  cr_assert_eq(sac_wire_encode(&m, buf, sizeof buf, &len), 0);
  send_raw(raw_s, buf, len);
  sent_bad++;
  m.u.sample_request = (sac_wire_sample_request_t){1, 16, NAN, 10, SAC_WIRE_F32, 0};
  cr_assert_eq(sac_wire_encode(&m, buf, sizeof buf, &len), 0);
  send_raw(raw_s, buf, len);
  sent_bad++;
  {
    Sac__PriorityUpdate pu = SAC__PRIORITY_UPDATE__INIT;
    uint64_t idx[1] = {0};
    float pr[1] = {NAN};
    pu.n = 1;
    pu.indices = (ProtobufCBinaryData){8, (uint8_t *)idx};
    pu.priorities = (ProtobufCBinaryData){4, (uint8_t *)pr};
    Sac__Envelope e = SAC__ENVELOPE__INIT;
    e.protocol = SAC_PROTOCOL_VERSION;
    e.body_case = SAC__ENVELOPE__BODY_PRIORITY_UPDATE;
    e.priority_update = &pu;
    send_raw(raw_s, buf, sac__envelope__pack(&e, buf));
    sent_bad++;
    /* a transition batch on the sample endpoint is the wrong type there */
    m = (sac_wire_msg_t){.type = SAC_WIRE_TRANSITIONS};
    m.u.transitions = *tg_next(&bad);
    cr_assert_eq(sac_wire_encode(&m, buf, sizeof buf, &len), 0);
    send_raw(raw_s, buf, len);
    sent_bad++;
  }
  /* over ZMQ_MAXMSGSIZE (2 x 65536): ZeroMQ drops that connection, nothing else */
  void *huge = sac_net_socket(ctx, SAC_NET_DEALER, NULL);
  cr_assert_eq(sac_net_connect(huge, s.ins), 0);
  memset(buf, 0x22, 200000);
  send_raw(huge, buf, 200000);

  /* the shard counts every rejection and keeps serving the good actor */
  sac_wire_shard_info_t info;
  uint64_t end = sac_clock_ns() + 10000000000ull;
  for (;;) {
    cr_assert_eq(sac_replay_client_info(actor, 0, 3000, &info), 0);
    if (info.rejected_total >= (uint64_t)sent_bad)
      break;
    cr_assert_lt(sac_clock_ns(), end, "only %llu of %d bad messages counted",
                 (unsigned long long)info.rejected_total, sent_bad);
    sac_sleep_ns(50000000);
  }
  cr_assert_eq(info.rejected_total, (uint64_t)sent_bad, "each bad message counted once");
  cr_assert_eq(info.inserted_total, 10 * 32, "no bad message stored anything");
  for (int b = 0; b < 10; b++)
    cr_assert_eq(sac_replay_client_insert(actor, 0, tg_next(&g), 5000), 0);
  cr_assert_eq(sac_replay_client_flush(actor, 10000), 0);
  for (int k = 0; k < 20; k++) {
    sac_replay_batch_t b;
    cr_assert_eq(sac_replay_client_sample(actor, 5000, &b), 0);
    check_batch(&b);
  }
  cr_assert_eq(sac_replay_client_info(actor, 0, 3000, &info), 0);
  cr_assert_eq(info.inserted_total, 20 * 32);
  cr_assert_eq(info.size, 20 * 32);
  cr_assert(alive(s.pid), "the shard is still running");
  sac_net_close(&raw);
  sac_net_close(&raw_s);
  sac_net_close(&huge);
  sac_net_ctx_destroy(&ctx);
  sac_replay_client_destroy(&actor);
  kill(s.pid, SIGTERM);
  cr_assert_eq(reap(s.pid, 10.0), 0);
  forget(s.pid);
  tg_free(&g);
  tg_free(&bad);
  tg_free(&bad6);
}
