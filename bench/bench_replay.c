/* sac-bench-replay: load generator for one replay shard over loopback TCP. It starts a
 * real sac-replay process on 127.0.0.1 (ports chosen by the shard), then measures, each
 * phase bounded in time and count and repeated --reps times (the median is printed):
 *   ingest transitions/s, obs 17 act 6, batches of 64 and of 256 (acked rows / second);
 *   sampling transitions/s at batch 256 with 4 requests in flight, and the latency of one
 *   request at batch 256 (one in flight) as p50 / p99 / max;
 *   bytes per transition in fp32 and fp16 storage (in-process rings of the same streams).
 * The yardstick, measured in the same run, is the same shard code in this process
 * without the network (insert and sample transitions/s), so the table shows what the
 * transport costs. Stops the shard with SIGTERM (its own child) at the end.
 *
 * The durability table (issue 15) starts a fresh shard per mode with a snapshot path in
 * a temporary directory (--tmp, default /tmp): durability none, wal with the default
 * group commit (wal_sync_ms 2: acks after the fsync that covers them) and wal with
 * wal_sync_ms -1 (written, never fsynced), and measures for each the ingest
 * transitions/s at batch 256 (one actor, 32 batches in flight) and the ack latency of
 * those batches (first send to ack, as the client sees it: under full load, so it
 * includes the queue of 32 batches) as p50 / p99, medians over the reps.
 *
 * Usage: sac-bench-replay [--seconds S (per phase, default 2)] [--reps R (default 3)]
 *                         [--replay PATH (default: the build tree's sac-replay)]
 *                         [--durability_only] [--tmp DIR (default /tmp)] */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "replay/client.h"
#include "replay/shard.h"
#include "replay/storage.h"
#include "tests/replay_testgen.h"

#ifndef SAC_BUILD_DIR
#define SAC_BUILD_DIR "."
#endif

#define OBS 17
#define ACT 6

static double g_seconds = 2.0;
static int g_reps = 3;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

typedef struct {
  pid_t pid;
  char ins[400], smp[400];
} shard_proc_t;

/* durability: NULL for the first table's shard (no snapshots, as before), else the
 * --durability value; sync_ms its wal_sync_ms. */
static int start_shard(const char *bin, const char *dir, shard_proc_t *s, const char *durability,
                       int sync_ms) {
  char ready[600], ready_arg[700], log[600];
  snprintf(ready, sizeof ready, "%s/bench.ready", dir);
  snprintf(ready_arg, sizeof ready_arg, "--ready_file=%s", ready);
  snprintf(log, sizeof log, "%s/bench-replay.log", dir);
  unlink(ready);
  pid_t pid = fork();
  if (pid < 0)
    return SAC_EIO;
  if (pid == 0) {
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    char dur[64], sync[64], snap[700];
    snprintf(dur, sizeof dur, "--durability=%s", durability ? durability : "none");
    snprintf(sync, sizeof sync, "--wal_sync_ms=%d", sync_ms);
    snprintf(snap, sizeof snap, "--snapshot_path=%s/bench.snap", dir);
    execl(bin, bin, ready_arg, "--insert_endpoint=tcp://127.0.0.1:*", "--sample_endpoint=tcp://127.0.0.1:*",
          "--capacity=2000000", "--obs_dim=17", "--act_dim=6", "--min_size=1000", "--samples_per_insert=0",
          "--snapshot_interval_s=0", "--max_msg_bytes=4194304", "--inflight_batches=32", "--metrics_port=-1",
          dur, sync, durability ? snap : "--snapshot_path=", (char *)NULL);
    _exit(127);
  }
  s->pid = pid;
  uint64_t end = sac_clock_ns() + 15000000000ull;
  while (sac_clock_ns() < end) {
    FILE *f = fopen(ready, "r");
    if (f) {
      char line[400];
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
        return 0;
    }
    int status;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      fprintf(stderr, "sac-replay exited early; see %s\n", log);
      return SAC_EIO;
    }
    sac_sleep_ns(20000000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  return SAC_ETIMEOUT;
}

static void stop_shard(shard_proc_t *s) {
  kill(s->pid, SIGTERM);
  uint64_t end = sac_clock_ns() + 10000000000ull;
  while (sac_clock_ns() < end) {
    if (waitpid(s->pid, NULL, WNOHANG) == s->pid)
      return;
    sac_sleep_ns(10000000);
  }
  kill(s->pid, SIGKILL);
  waitpid(s->pid, NULL, 0);
}

/* Acked transitions per second for batches of rows (16 envs x rows/16 steps). */
static double ingest(sac_replay_client_t *c, tg_t *g, uint64_t max_rows) {
  uint64_t rows = 0, t0 = sac_clock_ns(), limit = (uint64_t)(g_seconds * 1e9);
  while (rows < max_rows && sac_clock_ns() - t0 < limit) {
    const sac_wire_transitions_t *t = tg_next(g);
    int rc = sac_replay_client_insert(c, 0, t, 5000);
    if (rc) {
      fprintf(stderr, "insert failed: %s\n", sac_strerror(rc));
      return 0;
    }
    rows += t->n;
  }
  if (sac_replay_client_flush(c, 10000) != 0) {
    fprintf(stderr, "flush timed out\n");
    return 0;
  }
  return (double)rows / ((double)(sac_clock_ns() - t0) * 1e-9);
}

static double sample_rate(sac_replay_client_t *c, uint64_t max_batches) {
  sac_replay_batch_t b;
  uint64_t rows = 0, n = 0, t0 = sac_clock_ns(), limit = (uint64_t)(g_seconds * 1e9);
  while (n < max_batches && sac_clock_ns() - t0 < limit) {
    if (sac_replay_client_sample(c, 5000, &b) != 0)
      return 0;
    rows += b.n;
    n++;
  }
  return (double)rows / ((double)(sac_clock_ns() - t0) * 1e-9);
}

static void sample_latency(sac_replay_client_t *c, double *p50, double *p99, double *pmax) {
  enum { MAXN = 20000 };
  static double lat[MAXN];
  sac_replay_batch_t b;
  int n = 0;
  for (int w = 0; w < 50; w++)
    sac_replay_client_sample(c, 5000, &b); /* warm up */
  uint64_t t0 = sac_clock_ns(), limit = (uint64_t)(g_seconds * 1e9);
  while (n < MAXN && sac_clock_ns() - t0 < limit) {
    uint64_t a = sac_clock_ns();
    if (sac_replay_client_sample(c, 5000, &b) != 0)
      break;
    lat[n++] = (double)(sac_clock_ns() - a) * 1e-6;
  }
  if (n == 0) {
    *p50 = *p99 = *pmax = 0;
    return;
  }
  qsort(lat, (size_t)n, sizeof lat[0], cmp_double);
  *p50 = lat[n / 2];
  *p99 = lat[(int)((double)n * 0.99)];
  *pmax = lat[n - 1];
}

/* Ack latencies (ms) recorded by the client's on_ack callback during one ingest phase. */
enum { MAX_ACKS = 200000 };
static double g_acks[MAX_ACKS];
static int g_n_acks;

static void on_ack(void *arg, double seconds) {
  (void)arg;
  if (g_n_acks < MAX_ACKS)
    g_acks[g_n_acks++] = seconds * 1e3;
}

typedef struct {
  const char *name, *durability;
  int sync_ms;
  double rate[15], p50[15], p99[15];
} dmode_t;

/* One mode of the durability table: a fresh shard, reps x (ingest at batch 256). */
static int durability_mode(const char *bin, const char *dir, dmode_t *m) {
  shard_proc_t s;
  if (start_shard(bin, dir, &s, m->durability, m->sync_ms) != 0)
    return SAC_EIO;
  const char *ins[1] = {s.ins};
  sac_replay_client_config_t cc;
  sac_replay_client_config_default(&cc);
  cc.n_shards = 1;
  cc.insert_endpoints = ins;
  cc.actor_id = 1;
  cc.window = 32;
  cc.on_ack = on_ack;
  sac_replay_client_t *actor = sac_replay_client_new(&cc);
  if (!actor) {
    stop_shard(&s);
    return SAC_ENOMEM;
  }
  tg_t g;
  tg_init(&g, 1, 16, OBS, ACT, 1000, 16);
  for (int r = 0; r < g_reps; r++) {
    g_n_acks = 0;
    m->rate[r] = ingest(actor, &g, 6000000);
    qsort(g_acks, (size_t)g_n_acks, sizeof g_acks[0], cmp_double);
    m->p50[r] = g_n_acks ? g_acks[g_n_acks / 2] : 0;
    m->p99[r] = g_n_acks ? g_acks[(int)((double)g_n_acks * 0.99)] : 0;
    fprintf(stderr,
            "durability %s: rep %d: ingest256 %.0f transitions/s, ack p50 %.3f ms p99 %.3f ms (%d acks)\n",
            m->name, r + 1, m->rate[r], m->p50[r], m->p99[r], g_n_acks);
  }
  sac_replay_client_destroy(&actor);
  tg_free(&g);
  stop_shard(&s);
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -f '%s'/bench.snap*", dir);
  int rc = system(cmd);
  (void)rc;
  return 0;
}

static int durability_table(const char *bin, const char *dir) {
  dmode_t modes[3] = {{.name = "none", .durability = "none", .sync_ms = 2},
                      {.name = "wal, fsync (wal_sync_ms 2)", .durability = "wal", .sync_ms = 2},
                      {.name = "wal, no fsync (wal_sync_ms -1)", .durability = "wal", .sync_ms = -1}};
  for (int i = 0; i < 3; i++)
    if (durability_mode(bin, dir, &modes[i]) != 0)
      return 1;
  char host[256] = "?";
  gethostname(host, sizeof host);
  printf(
      "sac-bench-replay durability: one sac-replay shard over loopback TCP, one actor with 32 batches in "
      "flight, batch 256, obs %d act %d, %.1f s per phase, median of %d (host %s, %ld CPUs, files in %s)\n",
      OBS, ACT, g_seconds, g_reps, host, sysconf(_SC_NPROCESSORS_ONLN), dir);
  printf("| durability | ingest, batch 256 | ack latency p50 | ack latency p99 | target |\n"
         "| --- | --- | --- | --- | --- |\n");
  for (int i = 0; i < 3; i++)
    printf("| %s | %.0f transitions/s | %.2f ms | %.2f ms | %s |\n", modes[i].name,
           median(modes[i].rate, g_reps), median(modes[i].p50, g_reps), median(modes[i].p99, g_reps),
           i == 1 ? ">= 1,000,000/s, p99 < 20 ms" : "");
  return 0;
}

/* Yardstick: the same shard code in-process (no network, no codec). */
static void in_process(double *ins_rate, double *smp_rate) {
  sac_replay_shard_config_t c;
  sac_replay_shard_config_default(&c);
  c.capacity = 2000000;
  c.min_size = 1;
  sac_replay_shard_t *sh = sac_replay_shard_new(&c, NULL);
  tg_t g;
  tg_init(&g, 1, 16, OBS, ACT, 1000, 16);
  uint64_t rows = 0, seq = 0, t0 = sac_clock_ns(), limit = (uint64_t)(g_seconds * 1e9);
  while (sac_clock_ns() - t0 < limit && rows < 4000000) {
    sac_wire_transitions_t v = *tg_next(&g);
    v.seq = ++seq;
    sac_replay_insert_result_t r;
    sac_replay_shard_insert(sh, &v, &r);
    rows += v.n;
  }
  *ins_rate = (double)rows / ((double)(sac_clock_ns() - t0) * 1e-9);
  sac_replay_sample_t s;
  rows = 0;
  t0 = sac_clock_ns();
  while (sac_clock_ns() - t0 < limit && rows < 40000000) {
    sac_replay_shard_sample(sh, 256, 0.4f, &s);
    rows += 256;
  }
  *smp_rate = (double)rows / ((double)(sac_clock_ns() - t0) * 1e-9);
  sac_replay_shard_destroy(&sh);
  tg_free(&g);
}

static double bytes_per_transition(int obs_f16, int act_f16) {
  sac_replay_storage_t st;
  sac_replay_storage_config_t c = {1000000, OBS, ACT, obs_f16, act_f16, 4096, 65536};
  if (sac_replay_storage_init(&st, &c) != 0)
    return 0;
  tg_t g;
  tg_init(&g, 1, 16, OBS, ACT, 1000, 64); /* HalfCheetah-like: 1000-step episodes */
  for (int b = 0; b < 1200; b++) {
    uint32_t stored;
    sac_replay_storage_insert(&st, 1, tg_next(&g), &stored);
  }
  double v = sac_replay_storage_bytes_per_transition(&st, 0);
  sac_replay_storage_close(&st);
  tg_free(&g);
  return v;
}

int main(int argc, char **argv) {
  const char *bin = SAC_BUILD_DIR "/replay/sac-replay";
  const char *tmp = "/tmp";
  int durability_only = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
      g_seconds = atof(argv[++i]);
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
      g_reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--replay") && i + 1 < argc)
      bin = argv[++i];
    else if (!strcmp(argv[i], "--tmp") && i + 1 < argc)
      tmp = argv[++i];
    else if (!strcmp(argv[i], "--durability_only"))
      durability_only = 1;
    else {
      printf("usage: %s [--seconds S] [--reps R] [--replay PATH] [--durability_only] [--tmp DIR]\n", argv[0]);
      return strcmp(argv[i], "--help") ? 2 : 0;
    }
  }
  if (g_seconds <= 0 || g_seconds > 60 || g_reps < 1 || g_reps > 15) {
    fprintf(stderr, "--seconds must be in (0, 60] and --reps in [1, 15]\n");
    return 2;
  }
  sac_log_set_level(SAC_LOG_WARN);
  char dir[600];
  snprintf(dir, sizeof dir, "%s/sac-bench-replay-XXXXXX", tmp);
  if (!mkdtemp(dir))
    return 1;
  if (durability_only) {
    int rc = durability_table(bin, dir);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
      fprintf(stderr, "could not remove %s\n", dir);
    return rc;
  }
  shard_proc_t s;
  if (start_shard(bin, dir, &s, NULL, 0) != 0)
    return 1;
  const char *ins[1] = {s.ins}, *smp[1] = {s.smp};
  sac_replay_client_config_t cc;
  sac_replay_client_config_default(&cc);
  cc.n_shards = 1;
  cc.insert_endpoints = ins;
  cc.actor_id = 1;
  cc.window = 32;
  cc.obs_dim = OBS;
  cc.act_dim = ACT;
  sac_replay_client_t *actor = sac_replay_client_new(&cc);
  cc.insert_endpoints = NULL;
  cc.sample_endpoints = smp;
  cc.batch_size = 256;
  cc.prefetch = 1;
  sac_replay_client_t *lat_client = sac_replay_client_new(&cc);
  cc.prefetch = 4;
  sac_replay_client_t *learner = sac_replay_client_new(&cc);
  if (!actor || !learner || !lat_client)
    return 1;

  double r64[15], r256[15], srate[15], p50[15], p99[15], pmax[15], yi[15], ys[15];
  tg_t g64, g256;
  tg_init(&g64, 1, 16, OBS, ACT, 1000, 4);   /* 16 envs x 4 steps = 64 rows */
  tg_init(&g256, 1, 16, OBS, ACT, 1000, 16); /* 16 envs x 16 steps = 256 rows */
  g256.actor = 1;
  for (int r = 0; r < g_reps; r++) {
    r64[r] = ingest(actor, &g64, 6000000);
    r256[r] = ingest(actor, &g256, 6000000);
    srate[r] = sample_rate(learner, 100000);
    sample_latency(lat_client, &p50[r], &p99[r], &pmax[r]);
    in_process(&yi[r], &ys[r]);
    fprintf(stderr,
            "rep %d: ingest64 %.0f ingest256 %.0f sample %.0f p50 %.3f p99 %.3f max %.3f ms | in-process "
            "insert %.0f sample %.0f\n",
            r + 1, r64[r], r256[r], srate[r], p50[r], p99[r], pmax[r], yi[r], ys[r]);
  }
  sac_wire_shard_info_t info;
  int have_info = sac_replay_client_info(learner, 0, 3000, &info) == 0;
  double b32 = bytes_per_transition(0, 0), b16o = bytes_per_transition(1, 0),
         b16 = bytes_per_transition(1, 1);
  double base = (OBS + ACT + 1 + 2) * 4.0;
  char host[256] = "?";
  gethostname(host, sizeof host);
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  printf("sac-bench-replay: one sac-replay shard over loopback TCP, obs %d act %d, %.1f s per phase, median "
         "of %d "
         "(host %s, %ld CPUs)\n",
         OBS, ACT, g_seconds, g_reps, host, ncpu);
  printf("| measure | result | target |\n| --- | --- | --- |\n");
  printf("| ingest, batch 64 | %.0f transitions/s | >= 1,000,000 |\n", median(r64, g_reps));
  printf("| ingest, batch 256 | %.0f transitions/s | >= 1,000,000 |\n", median(r256, g_reps));
  printf("| sampling, batch 256, 4 in flight | %.0f transitions/s | >= 1,000,000 |\n", median(srate, g_reps));
  printf("| sample request latency, batch 256, 1 in flight | p50 %.3f ms, p99 %.3f ms, max %.3f ms | p99 < 1 "
         "ms |\n",
         median(p50, g_reps), median(p99, g_reps), median(pmax, g_reps));
  printf("| yardstick: same shard in-process, insert (batch 256) | %.0f transitions/s | |\n",
         median(yi, g_reps));
  printf("| yardstick: same shard in-process, sample (batch 256) | %.0f transitions/s | |\n",
         median(ys, g_reps));
  printf("| bytes/transition fp32 | %.1f (%.3f x %.0f) | <= 1.1 x |\n", b32, b32 / base, base);
  printf("| bytes/transition fp16 obs | %.1f (%.3f x %.0f) | |\n", b16o, b16o / base, base);
  printf("| bytes/transition fp16 obs + actions | %.1f (%.3f x %.0f) | about 0.5 x |\n", b16, b16 / base,
         base);
  if (have_info)
    printf(
        "shard after the run: %llu transitions stored, %llu inserted, %llu sampled, %.1f bytes/transition\n",
        (unsigned long long)info.size, (unsigned long long)info.inserted_total,
        (unsigned long long)info.sampled_total, info.bytes_per_transition);
  sac_replay_client_destroy(&actor);
  sac_replay_client_destroy(&learner);
  sac_replay_client_destroy(&lat_client);
  stop_shard(&s);
  int rc = durability_table(bin, dir);
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0)
    fprintf(stderr, "could not remove %s\n", dir);
  tg_free(&g64);
  tg_free(&g256);
  return rc;
}
