/* The shard write-ahead log (replay/wal.h) and what it promises (docs/REPLAY.md): records
 * round-trip; a torn tail at any byte of the last record and a corrupt record in the
 * middle stop the replay there; batches a shard acknowledged survive the shard's process
 * dying without a snapshot, each stored once (and, as the negative control, the same run
 * with durability snapshot loses them and the check says so); acknowledgements are not
 * sent before the fsync that covers them; replaying a log whose records a snapshot
 * already holds stores nothing twice; the provenance index survives snapshot and log. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/durable.h"
#include "common/error.h"
#include "common/net.h"
#include "common/snapshot.h"
#include "replay/client.h"
#include "replay/inspect.h"
#include "replay/server.h"
#include "replay/wal.h"
#include "tests/replay_testgen.h"

static char g_dir[256];
#define SYNC_RECORD (SAC_REPLAY_WAL_RECORD_HEAD + 16) /* a SYNC record's bytes (replay/wal.h) */

static void setup(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/sac-wal-test-%ld-XXXXXX", (long)getpid());
  cr_assert_not_null(mkdtemp(g_dir));
}

static void teardown(void) {
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  if (system(cmd) != 0)
    fprintf(stderr, "could not remove %s\n", g_dir);
}

TestSuite(replay_wal, .init = setup, .fini = teardown, .timeout = 120);

static long file_size(const char *p) {
  struct stat sb;
  return stat(p, &sb) == 0 ? (long)sb.st_size : -1;
}

static void copy_prefix(const char *from, const char *to, long n) {
  FILE *f = fopen(from, "rb"), *t = fopen(to, "wb");
  cr_assert(f && t);
  for (long i = 0; i < n; i++) {
    int ch = fgetc(f);
    if (ch == EOF)
      break;
    fputc(ch, t);
  }
  fclose(f);
  fclose(t);
}

/* ------------------------------------------------------------------ the log file */

typedef struct {
  int n;
  sac_replay_wal_rec_t rec[64];
  unsigned char payload[64][64];
  size_t len[64];
} seen_t;

static int collect(void *user, const sac_replay_wal_rec_t *rec, const unsigned char *payload, size_t len) {
  seen_t *s = user;
  if (rec->kind == SAC_REPLAY_WAL_END)
    return 0;
  cr_assert_lt(s->n, 64);
  s->rec[s->n] = *rec;
  memcpy(s->payload[s->n], payload, len < 64 ? len : 64);
  s->len[s->n] = len;
  s->n++;
  return 0;
}

/* Writes n records (payload of record i: 10 + i bytes of value i) and returns the file
 * offset where each record starts in starts[0..n]. */
static void write_records(const char *path, int n, long *starts) {
  sac_replay_wal_t *w = NULL;
  unlink(path);
  cr_assert_eq(sac_replay_wal_open(path, 3, 1u << 16, 4096, 0, NULL, NULL, &w, NULL), 0);
  for (int i = 0; i < n; i++) {
    starts[i] = (long)sac_replay_wal_bytes(w);
    unsigned char p[64];
    memset(p, i, sizeof p);
    sac_replay_wal_rec_t r = {
        .actor = 100u + (uint32_t)i, .rows = 7u + (uint32_t)i, .session = 5000u + i, .seq = 1u + (uint64_t)i};
    cr_assert_eq(sac_replay_wal_append(w, &r, p, 10u + (size_t)i), 0);
  }
  starts[n] = (long)sac_replay_wal_bytes(w);
  cr_assert_eq(sac_replay_wal_sync(w), 0);
  sac_replay_wal_close(&w);
  cr_assert_eq(file_size(path), starts[n]);
}

/* The log's checksum is CRC-32C whichever implementation computes it (the SSE4.2
 * instruction or the table): the standard check value, and a bitwise reference over
 * every length and alignment up to 64 bytes, also chained. */
Test(replay_wal, crc32c_matches_the_reference) {
  cr_assert_eq(sac_crc32c(0, "123456789", 9), 0xE3069283u);
  unsigned char buf[80];
  for (int i = 0; i < 80; i++)
    buf[i] = (unsigned char)(i * 37 + 11);
  for (size_t off = 0; off < 8; off++)
    for (size_t len = 0; len <= 64; len++) {
      uint32_t c = 0xFFFFFFFFu;
      for (size_t i = 0; i < len; i++) {
        c ^= buf[off + i];
        for (int k = 0; k < 8; k++)
          c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      }
      cr_assert_eq(sac_crc32c(0, buf + off, len), ~c, "off %zu len %zu", off, len);
      cr_assert_eq(sac_crc32c(sac_crc32c(0, buf + off, len / 2), buf + off + len / 2, len - len / 2), ~c);
    }
}

Test(replay_wal, record_round_trip) {
  char path[400];
  snprintf(path, sizeof path, "%s/a.wal", g_dir);
  long starts[6];
  write_records(path, 5, starts);
  seen_t s = {0};
  sac_replay_wal_scan_t sc;
  cr_assert_eq(sac_replay_wal_scan(path, 4096, collect, &s, &sc), 0);
  cr_assert_eq(s.n, 5);
  cr_assert_eq(sc.records, 5);
  cr_assert_eq(sc.dropped_bytes, 0);
  for (int i = 0; i < 5; i++) {
    cr_assert_eq(s.rec[i].actor, 100u + (uint32_t)i);
    cr_assert_eq(s.rec[i].rows, 7u + (uint32_t)i);
    cr_assert_eq(s.rec[i].session, 5000u + (uint64_t)i);
    cr_assert_eq(s.rec[i].seq, 1u + (uint64_t)i);
    cr_assert_eq(s.len[i], 10u + (size_t)i);
    for (size_t j = 0; j < s.len[i]; j++)
      cr_assert_eq(s.payload[i][j], (unsigned char)i);
  }
  /* records longer than the expected largest are still read */
  seen_t s1 = {0};
  cr_assert_eq(sac_replay_wal_scan(path, 4, collect, &s1, &sc), 0);
  cr_assert_eq(s1.n, 5);
  cr_assert_eq(sc.dropped_bytes, 0);
  /* reopening appends after the last record */
  sac_replay_wal_t *w = NULL;
  seen_t s2 = {0};
  cr_assert_eq(sac_replay_wal_open(path, 3, 1u << 16, 4096, 0, collect, &s2, &w, &sc), 0);
  cr_assert_eq(s2.n, 5);
  sac_replay_wal_rec_t r = {.actor = 9, .rows = 1, .session = 1, .seq = 99};
  cr_assert_eq(sac_replay_wal_append(w, &r, "xyz", 3), 0);
  sac_replay_wal_close(&w);
  seen_t s3 = {0};
  cr_assert_eq(sac_replay_wal_scan(path, 4096, collect, &s3, &sc), 0);
  cr_assert_eq(s3.n, 6);
  cr_assert_eq(s3.rec[5].seq, 99);
  /* not a log: refused clearly */
  FILE *f = fopen(path, "r+b");
  fputc('X', f);
  fclose(f);
  cr_assert_eq(sac_replay_wal_scan(path, 4096, collect, &s3, &sc), SAC_EPROTO);
}

Test(replay_wal, torn_tail_at_every_byte_of_the_last_record) {
  char path[400], cut[400];
  snprintf(path, sizeof path, "%s/b.wal", g_dir);
  snprintf(cut, sizeof cut, "%s/cut.wal", g_dir);
  long starts[4];
  write_records(path, 3, starts);
  for (long end = starts[2]; end < starts[3]; end++) {
    copy_prefix(path, cut, end);
    seen_t s = {0};
    sac_replay_wal_t *w = NULL;
    sac_replay_wal_scan_t sc;
    cr_assert_eq(sac_replay_wal_open(cut, 3, 1u << 16, 4096, 0, collect, &s, &w, &sc), 0, "cut at %ld", end);
    cr_assert_eq(s.n, 2, "cut at %ld: %d records applied", end, s.n);
    cr_assert_eq(sc.dropped_bytes, (uint64_t)(end - starts[2]), "cut at %ld", end);
    /* cut at the torn record, then the SYNC record saying the replayed ones are synced */
    cr_assert_eq(file_size(cut), starts[2] + SYNC_RECORD, "the torn tail is truncated");
    /* and the log goes on from there */
    sac_replay_wal_rec_t r = {.actor = 1, .rows = 1, .session = 1, .seq = 42};
    cr_assert_eq(sac_replay_wal_append(w, &r, "abcd", 4), 0);
    sac_replay_wal_close(&w);
    seen_t s2 = {0};
    cr_assert_eq(sac_replay_wal_scan(cut, 4096, collect, &s2, &sc), 0);
    cr_assert_eq(s2.n, 3);
    cr_assert_eq(s2.rec[2].seq, 42);
    cr_assert_eq(sc.dropped_bytes, 0);
  }
}

Test(replay_wal, corrupt_record_in_the_middle_stops_there) {
  char path[400];
  snprintf(path, sizeof path, "%s/c.wal", g_dir);
  long starts[6];
  write_records(path, 5, starts);
  /* one flipped bit in the payload of record 2, then in its head */
  for (int where = 0; where < 2; where++) {
    write_records(path, 5, starts);
    long at = where == 0 ? starts[2] + SAC_REPLAY_WAL_RECORD_HEAD + 3 : starts[2] + 20;
    int fd = open(path, O_RDWR);
    unsigned char ch;
    cr_assert_eq(pread(fd, &ch, 1, at), 1);
    ch ^= 0x10;
    cr_assert_eq(pwrite(fd, &ch, 1, at), 1);
    close(fd);
    seen_t s = {0};
    sac_replay_wal_scan_t sc;
    cr_assert_eq(sac_replay_wal_scan(path, 4096, collect, &s, &sc), 0);
    cr_assert_eq(s.n, 2, "records after the corrupt one are not applied");
    cr_assert_eq(sc.dropped_bytes, (uint64_t)(starts[5] - starts[2]));
    cr_assert_str_eq(sc.why, "record checksum mismatch");
  }
}

/* ------------------------------------------------------------------ a shard with its log */

#define OBS 5
#define ACT 2
#define SESSION 4242u
#define ACTOR 7u

static sac_replay_server_config_t server_cfg(sac_replay_durability_t d, int sync_ms, const char *tag) {
  sac_replay_server_config_t c;
  sac_replay_server_config_default(&c);
  c.shard.capacity = 1u << 16;
  c.shard.obs_dim = OBS;
  c.shard.act_dim = ACT;
  c.shard.max_batch_rows = 512;
  c.shard.min_size = 1;
  snprintf(c.insert_endpoint, sizeof c.insert_endpoint, "inproc://wal-%s-ins", tag);
  snprintf(c.sample_endpoint, sizeof c.sample_endpoint, "inproc://wal-%s-smp", tag);
  snprintf(c.snapshot_path, sizeof c.snapshot_path, "%s/shard.snap", g_dir);
  c.snapshot_interval_s = 0;
  c.durability = d;
  c.wal_sync_ms = sync_ms;
  return c;
}

typedef struct {
  uint32_t actor;
  int batches;
  int sleep_ms_after;
} step_t;

static sac_replay_client_t *client_as(sac_net_ctx_t *ctx, const char *ep, uint32_t actor) {
  static const char *ins[1];
  ins[0] = ep;
  sac_replay_client_config_t c;
  sac_replay_client_config_default(&c);
  c.n_shards = 1;
  c.insert_endpoints = ins;
  c.ctx = ctx;
  c.actor_id = actor;
  c.session = SESSION;
  c.window = 8;
  return sac_replay_client_new(&c);
}

/* A child process serves a shard configured as c and runs the steps: each actor inserts
 * its batches (seq 1..) and waits for every ack, then the child sleeps. Then it lingers
 * linger_ms (an idle shard writes its closing SYNC record) and dies without a snapshot
 * (_exit, like kill -9 after the acks). */
static void steps_then_die(const sac_replay_server_config_t *c, const step_t *steps, int n_steps,
                           int linger_ms) {
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    sac_net_ctx_t *ctx = sac_net_ctx_new(1);
    sac_replay_server_t *s = sac_replay_server_new(c, ctx, NULL);
    if (!s || sac_replay_server_start(s) != 0)
      _exit(3);
    for (int i = 0; i < n_steps; i++) {
      sac_replay_client_t *cl = client_as(ctx, sac_replay_server_insert_endpoint(s), steps[i].actor);
      tg_t g;
      tg_init(&g, steps[i].actor, 8, OBS, ACT, 30, 4);
      for (int b = 0; b < steps[i].batches; b++)
        if (sac_replay_client_insert(cl, 0, tg_next(&g), 10000) != 0)
          _exit(4);
      if (sac_replay_client_flush(cl, 20000) != 0)
        _exit(5);
      tg_free(&g);
      sac_replay_client_destroy(&cl);
      sac_sleep_ns((uint64_t)steps[i].sleep_ms_after * 1000000ull);
    }
    sac_sleep_ns((uint64_t)linger_ms * 1000000ull);
    _exit(0);
  }
  int status = 0;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
}

/* How often (actor, SESSION, seq) is in a provenance text. */
static int prov_count(const char *text, uint32_t actor, uint64_t seq) {
  int n = 0;
  for (const char *p = strchr(text, '\n'); p && p[1]; p = strchr(p + 1, '\n')) {
    unsigned a = 0, rows = 0;
    unsigned long long session = 0, q = 0;
    if (sscanf(p + 1, "%u %llu %llu %u", &a, &session, &q, &rows) == 4 && a == actor && session == SESSION &&
        q == seq)
      n++;
  }
  return n;
}

/* A shard started on c's files: its provenance while it serves (asked from this thread,
 * the route /provenance uses), and its counters once stopped. */
static char *provenance_of(const sac_replay_server_config_t *c, sac_replay_stats_t *st) {
  sac_net_ctx_t *ctx = sac_net_ctx_new(1);
  sac_replay_server_t *s = sac_replay_server_new(c, ctx, NULL);
  cr_assert_not_null(s);
  cr_assert_eq(sac_replay_server_start(s), 0);
  char *text = NULL;
  size_t len = 0;
  cr_assert_eq(sac_replay_server_provenance(s, 5000, &text, &len), 0);
  sac_replay_server_stop(s);
  sac_replay_server_join(s);
  sac_replay_server_stats(s, st);
  sac_replay_server_destroy(&s);
  sac_net_ctx_destroy(&ctx);
  return text;
}

static sac_replay_client_t *client_for(sac_net_ctx_t *ctx, const char *ep) {
  return client_as(ctx, ep, ACTOR);
}

/* Inserts n batches (rows_per_env 4 of 8 envs: 32 rows each) and waits for every ack. */
static void insert_acked(sac_replay_client_t *cl, int n) {
  tg_t g;
  tg_init(&g, ACTOR, 8, OBS, ACT, 30, 4);
  for (int b = 0; b < n; b++)
    cr_assert_eq(sac_replay_client_insert(cl, 0, tg_next(&g), 10000), 0);
  cr_assert_eq(sac_replay_client_flush(cl, 20000), 0);
  tg_free(&g);
}

typedef struct {
  int acked, found_once, missing, found_twice, other;
} ledger_t;

/* The ledger check of issue 15 in miniature: batches (ACTOR, SESSION, seq 1..n) were
 * acknowledged; how often does each appear in the provenance text? */
static ledger_t check_ledger(const char *text, int n) {
  ledger_t l = {.acked = n};
  int *count = calloc((size_t)n + 1, sizeof *count);
  cr_assert_eq(strncmp(text, "# sacfleet provenance v1 shard=", 31), 0, "header: %.60s", text);
  const char *p = strchr(text, '\n');
  cr_assert_not_null(p);
  for (p++; *p; p = strchr(p, '\n') + 1) {
    unsigned actor = 0, rows = 0;
    unsigned long long session = 0, seq = 0;
    cr_assert_eq(sscanf(p, "%u %llu %llu %u", &actor, &session, &seq, &rows), 4, "line: %.60s", p);
    if (actor == ACTOR && session == SESSION && seq >= 1 && seq <= (unsigned long long)n && rows == 32)
      count[seq]++;
    else
      l.other++;
  }
  for (int i = 1; i <= n; i++) {
    l.found_once += count[i] == 1;
    l.missing += count[i] == 0;
    l.found_twice += count[i] >= 2;
  }
  free(count);
  return l;
}

/* A child process serves a shard, inserts n batches, waits for their acks and then
 * dies without a snapshot (_exit: no final snapshot, nothing flushed). */
static void acked_then_die(sac_replay_durability_t d, int n) {
  sac_replay_server_config_t c = server_cfg(d, 2, "child");
  const step_t steps[] = {{ACTOR, n, 0}};
  steps_then_die(&c, steps, 1, 0);
}

/* The same, killed with SIGKILL while it goes on inserting after the n acknowledged
 * batches (the kill can land in the middle of a log append). */
static void acked_then_killed_mid_stream(int n) {
  int fds[2];
  cr_assert_eq(pipe(fds), 0);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    sac_net_ctx_t *ctx = sac_net_ctx_new(1);
    sac_replay_server_config_t c = server_cfg(SAC_REPLAY_DURABILITY_WAL, 2, "child");
    sac_replay_server_t *s = sac_replay_server_new(&c, ctx, NULL);
    if (!s || sac_replay_server_start(s) != 0)
      _exit(3);
    sac_replay_client_t *cl = client_for(ctx, sac_replay_server_insert_endpoint(s));
    tg_t g;
    tg_init(&g, ACTOR, 8, OBS, ACT, 30, 4);
    for (int b = 0; b < n; b++)
      if (sac_replay_client_insert(cl, 0, tg_next(&g), 10000) != 0)
        _exit(4);
    if (sac_replay_client_flush(cl, 20000) != 0 || write(fds[1], "A", 1) != 1)
      _exit(5);
    for (int b = 0; b < 100000; b++) /* until killed */
      sac_replay_client_insert(cl, 0, tg_next(&g), 1000);
    _exit(6);
  }
  close(fds[1]);
  char ch = 0;
  cr_assert_eq(read(fds[0], &ch, 1), 1, "the child acknowledged its batches");
  close(fds[0]);
  sac_sleep_ns(30000000); /* into the stream that follows */
  cr_assert_eq(kill(pid, SIGKILL), 0);
  int status = 0;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "child status %d", status);
}

static char *provenance_after_restart(sac_replay_durability_t d, sac_replay_stats_t *st) {
  sac_replay_server_config_t c = server_cfg(d, 2, "parent");
  return provenance_of(&c, st);
}

Test(replay_wal, acked_batches_survive_the_process_dying_each_stored_once) {
  const int n = 40;
  acked_then_die(SAC_REPLAY_DURABILITY_WAL, n);
  char snap[400], wal[400];
  snprintf(snap, sizeof snap, "%s/shard.snap", g_dir);
  snprintf(wal, sizeof wal, "%s/shard.snap.wal", g_dir);
  cr_assert_eq(access(snap, F_OK), -1, "the child wrote no snapshot");
  cr_assert_gt(file_size(wal), SAC_REPLAY_WAL_HEADER_BYTES);
  /* offline, as sac-replay --print_provenance reads the files */
  sac_replay_server_config_t c = server_cfg(SAC_REPLAY_DURABILITY_WAL, 2, "x");
  char *off = NULL;
  size_t off_len = 0;
  cr_assert_eq(sac_replay_provenance_from_files(&c, snap, wal, &off, &off_len), 0);
  ledger_t lo = check_ledger(off, n);
  cr_assert_eq(lo.found_once, n, "offline: %d of %d found once", lo.found_once, n);
  cr_assert_eq(strncmp(off, "# sacfleet provenance v1 shard=0 incarnation=0\n", 47), 0);
  /* a restarted shard on the same paths */
  sac_replay_stats_t st;
  char *text = provenance_after_restart(SAC_REPLAY_DURABILITY_WAL, &st);
  ledger_t l = check_ledger(text, n);
  cr_assert_eq(l.missing, 0, "missing %d of %d acknowledged batches", l.missing, n);
  cr_assert_eq(l.found_twice, 0);
  cr_assert_eq(l.other, 0);
  cr_assert_eq(l.found_once, n);
  cr_assert_eq(st.wal_replayed_records, (uint64_t)n);
  cr_assert_eq(st.shard.inserted_rows_total, (uint64_t)n * 32u);
  cr_assert_gt(st.incarnation, 0);
  cr_assert_str_eq(strchr(text, '\n'), strchr(off, '\n'), "live and offline provenance agree");
  free(text);
  free(off);
}

Test(replay_wal, acked_batches_survive_sigkill_mid_stream_each_stored_once) {
  const int n = 40;
  acked_then_killed_mid_stream(n);
  sac_replay_stats_t st;
  char *text = provenance_after_restart(SAC_REPLAY_DURABILITY_WAL, &st);
  ledger_t l = check_ledger(text, n);
  cr_assert_eq(l.missing, 0, "missing %d of %d acknowledged batches", l.missing, n);
  cr_assert_eq(l.found_twice, 0);
  cr_assert_eq(l.found_once, n);
  /* what came after the acknowledged ones: each stored once too (seqs n+1, n+2, ...) */
  cr_assert_eq(st.wal_replayed_records, (uint64_t)n + (uint64_t)l.other);
  ledger_t all = check_ledger(text, n + l.other);
  cr_assert_eq(all.found_once, n + l.other, "the batches after the acks are a gapless run, each once");
  cr_log_info(
      "SIGKILL mid-stream: %d acknowledged found once, %d later batches logged, %llu torn bytes dropped",
      l.found_once, l.other, (unsigned long long)st.wal_dropped_bytes);
  free(text);
}

/* Negative control: the same with durability snapshot loses the acked batches, and the
 * check above reports them missing. */
Test(replay_wal, negative_control_snapshot_durability_loses_acked_batches) {
  const int n = 40;
  acked_then_die(SAC_REPLAY_DURABILITY_SNAPSHOT, n);
  sac_replay_stats_t st;
  char *text = provenance_after_restart(SAC_REPLAY_DURABILITY_SNAPSHOT, &st);
  ledger_t l = check_ledger(text, n);
  cr_assert_eq(l.missing, n, "the check must see the %d lost batches (saw %d)", n, l.missing);
  cr_assert_eq(l.found_once, 0);
  cr_assert_eq(st.shard.inserted_rows_total, 0);
  free(text);
}

/* A crash after a snapshot's rename and before the log was emptied: the log's records
 * are all in the snapshot too, and replaying them stores nothing twice. */
Test(replay_wal, log_replayed_over_a_snapshot_holding_it_stores_nothing_twice) {
  const int n = 30;
  char wal[400], keep[400];
  snprintf(wal, sizeof wal, "%s/shard.snap.wal", g_dir);
  snprintf(keep, sizeof keep, "%s/kept.wal", g_dir);
  sac_net_ctx_t *ctx = sac_net_ctx_new(1);
  sac_replay_server_config_t c = server_cfg(SAC_REPLAY_DURABILITY_WAL, 2, "rot");
  sac_replay_server_t *s = sac_replay_server_new(&c, ctx, NULL);
  cr_assert_eq(sac_replay_server_start(s), 0);
  sac_replay_client_t *cl = client_for(ctx, sac_replay_server_insert_endpoint(s));
  insert_acked(cl, n);
  copy_prefix(wal, keep, file_size(wal)); /* the log as it was before the final snapshot */
  sac_replay_client_destroy(&cl);
  sac_replay_server_destroy(&s); /* final snapshot, log emptied */
  cr_assert_eq(file_size(wal), SAC_REPLAY_WAL_HEADER_BYTES, "the snapshot emptied the log");
  cr_assert_eq(rename(keep, wal), 0); /* as if the crash came before the truncation */
  sac_replay_stats_t st;
  char *text = provenance_after_restart(SAC_REPLAY_DURABILITY_WAL, &st);
  ledger_t l = check_ledger(text, n);
  cr_assert_eq(l.found_once, n);
  cr_assert_eq(l.found_twice, 0);
  cr_assert_eq(st.wal_replayed_records, (uint64_t)n);
  cr_assert_eq(st.shard.inserted_rows_total, (uint64_t)n * 32u, "stored once: %llu rows",
               (unsigned long long)st.shard.inserted_rows_total);
  cr_assert_eq(st.shard.size, st.restored_transitions);
  free(text);
  sac_net_ctx_destroy(&ctx);
}

/* ------------------------------------------------------------------ group commit */

static _Atomic uint64_t g_syncs, g_sync_done_ns;
static uint64_t g_sync_sleep_ns = 200000000; /* a 200 ms disk */

static void slow_sync(void *arg) {
  (void)arg;
  sac_sleep_ns(g_sync_sleep_ns);
  atomic_fetch_add(&g_syncs, 1);
  atomic_store(&g_sync_done_ns, sac_clock_ns());
}

static double ack_after_one_batch(int sync_ms, const char *tag) {
  atomic_store(&g_syncs, 0);
  atomic_store(&g_sync_done_ns, 0);
  sac_replay_wal_sync_hook = slow_sync;
  sac_net_ctx_t *ctx = sac_net_ctx_new(1);
  sac_replay_server_config_t c = server_cfg(SAC_REPLAY_DURABILITY_WAL, sync_ms, tag);
  /* a fresh shard each time: restored from the previous call's snapshot, the batch would
   * be a duplicate, acknowledged at once */
  snprintf(c.snapshot_path, sizeof c.snapshot_path, "%s/%s.snap", g_dir, tag);
  sac_replay_server_t *s = sac_replay_server_new(&c, ctx, NULL);
  cr_assert_eq(sac_replay_server_start(s), 0);
  sac_replay_client_t *cl = client_for(ctx, sac_replay_server_insert_endpoint(s));
  tg_t g;
  tg_init(&g, ACTOR, 8, OBS, ACT, 30, 4);
  uint64_t t0 = sac_clock_ns();
  cr_assert_eq(sac_replay_client_insert(cl, 0, tg_next(&g), 10000), 0);
  cr_assert_eq(sac_replay_client_flush(cl, 20000), 0);
  uint64_t t1 = sac_clock_ns();
  sac_replay_stats_t st;
  sac_replay_server_stats(s, &st);
  cr_assert_eq(st.shard.duplicate_batches_total, 0, "a new batch, not a duplicate");
  if (sync_ms >= 0) {
    uint64_t done = atomic_load(&g_sync_done_ns);
    cr_assert_gt(done, 0, "an fsync ran before the ack arrived");
    cr_assert_geq(t1, done, "the ack arrived after the fsync covering it");
  } else {
    cr_assert_eq(atomic_load(&g_syncs), 0, "no fsync with wal_sync_ms -1");
  }
  tg_free(&g);
  sac_replay_client_destroy(&cl);
  sac_replay_server_stop(s);
  sac_replay_server_join(s);
  sac_replay_wal_sync_hook = NULL;
  sac_replay_server_destroy(&s);
  sac_net_ctx_destroy(&ctx);
  return (double)(t1 - t0) * 1e-9;
}

Test(replay_wal, acks_wait_for_the_fsync_that_covers_them) {
  double with_fsync = ack_after_one_batch(2, "gc1");
  cr_assert_geq(with_fsync, 0.2, "ack after %.3f s: before the 200 ms fsync finished", with_fsync);
  double each = ack_after_one_batch(0, "gc0"); /* wal_sync_ms 0: an fsync per batch */
  cr_assert_geq(each, 0.2, "ack after %.3f s: before the 200 ms fsync finished", each);
  /* control: without fsync the same ack comes without any fsync (checked inside; no
   * timing bound, which a busy machine could break) */
  double without = ack_after_one_batch(-1, "gc2");
  cr_log_info("ack after %.3f s with fsync each batch, %.3f s with group commit, %.3f s without fsync", each,
              with_fsync, without);
}

Test(replay_wal, group_commit_covers_many_batches_with_one_fsync) {
  /* a 20 ms disk: batches that arrive during an fsync share the next one */
  g_sync_sleep_ns = 20000000;
  sac_replay_wal_sync_hook = slow_sync;
  sac_net_ctx_t *ctx = sac_net_ctx_new(1);
  sac_replay_server_config_t c = server_cfg(SAC_REPLAY_DURABILITY_WAL, 20, "gc3");
  sac_replay_server_t *s = sac_replay_server_new(&c, ctx, NULL);
  cr_assert_eq(sac_replay_server_start(s), 0);
  sac_replay_client_t *cl = client_for(ctx, sac_replay_server_insert_endpoint(s));
  insert_acked(cl, 64);
  sac_replay_server_stop(s);
  sac_replay_server_join(s);
  sac_replay_stats_t st;
  sac_replay_server_stats(s, &st);
  sac_replay_wal_sync_hook = NULL;
  cr_assert_eq(st.wal_records_total, 64);
  /* a window of 8 batches: in steady state 1 and 7 batches share alternate fsyncs (the
   * 7 arrived during the fsync of the 1); an fsync per batch would make 64 */
  cr_assert_leq(st.wal_syncs_total, 32, "%llu fsyncs for 64 batches", (unsigned long long)st.wal_syncs_total);
  cr_assert_geq(st.wal_syncs_total, 8, "8 batches in flight at most: at least 8 fsyncs");
  /* the time in fsyncs (sac_replay_wal_sync_seconds_total): each one took the disk's 20 ms
   * at least; a count of calls or of batches would be off by a factor of 50 */
  cr_assert_geq(st.wal_sync_seconds_total, 0.02 * (double)st.wal_syncs_total,
                "%.3f s in %llu fsyncs of 20 ms", st.wal_sync_seconds_total,
                (unsigned long long)st.wal_syncs_total);
  cr_assert_lt(st.wal_sync_seconds_total, 60.0, "%.3f s in fsyncs", st.wal_sync_seconds_total);
  sac_replay_client_destroy(&cl);
  sac_replay_server_destroy(&s);
  sac_net_ctx_destroy(&ctx);
}

/* ------------------------------------------------------------------ the provenance index */

static sac_replay_shard_t *small_shard(void) {
  sac_replay_shard_config_t c;
  sac_replay_shard_config_default(&c);
  c.capacity = 2048;
  c.obs_dim = OBS;
  c.act_dim = ACT;
  c.max_batch_rows = 512;
  c.min_size = 1;
  sac_replay_shard_t *sh = sac_replay_shard_new(&c, NULL);
  cr_assert_not_null(sh);
  return sh;
}

static void insert_n(sac_replay_shard_t *sh, int n) {
  tg_t g;
  tg_init(&g, ACTOR, 8, OBS, ACT, 30, 4);
  for (int b = 1; b <= n; b++) {
    sac_wire_transitions_t v = *tg_next(&g);
    v.actor_id = ACTOR;
    v.session = SESSION;
    v.seq = (uint64_t)b;
    sac_replay_insert_result_t r;
    cr_assert_eq(sac_replay_shard_insert(sh, &v, &r), 0);
    cr_assert_eq(r.kind, SAC_REPLAY_SEQ_NEW);
  }
  tg_free(&g);
}

/* Entries go once the ring overwrote all their slots: the index keeps the newest
 * batches, contiguous, and about as many as the ring holds. */
Test(replay_wal, provenance_drops_batches_the_ring_overwrote) {
  sac_replay_shard_t *sh = small_shard();
  insert_n(sh, 300); /* 9,600 rows through 2,048 slots */
  const sac_replay_prov_t *p = sac_replay_shard_provenance(sh);
  cr_assert_gt(p->count, 2048 / 40, "%llu entries", (unsigned long long)p->count);
  cr_assert_leq(p->count, 2048 / 32 + 1, "%llu entries", (unsigned long long)p->count);
  for (uint64_t i = 0; i < p->count; i++) {
    const sac_replay_prov_entry_t *e = sac_replay_prov_at(p, i);
    cr_assert_eq(e->seq, 300 - p->count + 1 + i, "the newest batches, in order");
    cr_assert_eq(e->rows, 32);
  }
  /* and the oldest kept entry still has a slot in the ring */
  cr_assert_gt(sac_replay_prov_at(p, 0)->end + 2048, 300ull * 32 - 1);
  sac_replay_shard_destroy(&sh);
}

/* A snapshot carries the index; one of payload version 1 (before the index existed)
 * still loads, with an empty index. */
Test(replay_wal, provenance_survives_a_snapshot_and_version_1_still_loads) {
  sac_replay_shard_t *a = small_shard();
  insert_n(a, 20);
  char path[400], old[400];
  snprintf(path, sizeof path, "%s/p.snap", g_dir);
  snprintf(old, sizeof old, "%s/v1.snap", g_dir);
  cr_assert_eq(sac_replay_shard_save(a, path, NULL), 0);
  sac_replay_shard_t *b = small_shard();
  cr_assert_eq(sac_replay_shard_load(b, path), 0);
  char *ta = NULL, *tb = NULL;
  size_t la = 0, lb = 0;
  cr_assert_eq(sac_replay_prov_format(sac_replay_shard_provenance(a), 0, 1, &ta, &la), 0);
  cr_assert_eq(sac_replay_prov_format(sac_replay_shard_provenance(b), 0, 1, &tb, &lb), 0);
  cr_assert_str_eq(ta, tb);
  cr_assert_eq(sac_replay_shard_provenance(b)->count, 20);
  /* the same payload as version 1: meta[0] = 1 and no provenance section */
  sac_snap_reader_t r;
  cr_assert_eq(sac_snap_reader_open(&r, path, SAC_SNAP_KIND_REPLAY), 0);
  size_t n = (size_t)r.payload_bytes, prov = 20 * sizeof(sac_replay_prov_entry_t);
  unsigned char *buf = malloc(n);
  cr_assert_eq(sac_snap_read(&r, buf, n), 0);
  sac_snap_reader_close(&r);
  uint64_t one = 1, zero = 0;
  memcpy(buf, &one, 8);
  memcpy(buf + 27 * 8, &zero, 8); /* the provenance count's slot was 0 in version 1 */
  sac_snap_writer_t w;
  cr_assert_eq(sac_snap_writer_open(&w, old, SAC_SNAP_KIND_REPLAY), 0);
  cr_assert_eq(sac_snap_write(&w, buf, n - prov), 0);
  cr_assert_eq(sac_snap_writer_commit(&w), 0);
  sac_replay_shard_t *c = small_shard();
  cr_assert_eq(sac_replay_shard_load(c, old), 0);
  cr_assert_eq(sac_replay_shard_provenance(c)->count, 0);
  sac_replay_shard_stats_t sa, sc;
  sac_replay_shard_stats(a, &sa);
  sac_replay_shard_stats(c, &sc);
  cr_assert_eq(sa.size, sc.size);
  /* version 3 is refused clearly */
  uint64_t three = 3;
  memcpy(buf, &three, 8);
  cr_assert_eq(sac_snap_writer_open(&w, old, SAC_SNAP_KIND_REPLAY), 0);
  cr_assert_eq(sac_snap_write(&w, buf, n), 0);
  cr_assert_eq(sac_snap_writer_commit(&w), 0);
  cr_assert_eq(sac_replay_shard_load(c, old), SAC_EVERSION);
  free(buf);
  free(ta);
  free(tb);
  sac_replay_shard_destroy(&a);
  sac_replay_shard_destroy(&b);
  sac_replay_shard_destroy(&c);
}

/* ------------------------------------------------------------------ issue: power-cut holes */

/* The fault hook (common/durable.h): records every durable-file operation, and fails the
 * ones whose op and path suffix match g_fail_op / g_fail_suffix with g_fail_errno. */
static char g_ops[256][96];
static int g_n_ops;
static const char *g_fail_op, *g_fail_suffix;
static int g_fail_errno;

static int record_op(const char *op, const char *path) {
  const char *base = strrchr(path, '/');
  if (g_n_ops < 256)
    snprintf(g_ops[g_n_ops++], sizeof g_ops[0], "%s %s", op, base ? base + 1 : path);
  size_t lp = strlen(path), ls = g_fail_suffix ? strlen(g_fail_suffix) : 0;
  if (g_fail_op && !strcmp(op, g_fail_op) && lp >= ls && !strcmp(path + lp - ls, g_fail_suffix))
    return g_fail_errno;
  return 0;
}

static void hook_on(const char *fail_op, const char *fail_suffix, int err) {
  g_n_ops = 0;
  g_fail_op = fail_op;
  g_fail_suffix = fail_suffix;
  g_fail_errno = err;
  sac_durable_fault_hook = record_op;
}

static int op_index(const char *op_and_base, int from) {
  for (int i = from; i < g_n_ops; i++)
    if (!strcmp(g_ops[i], op_and_base))
      return i;
  return -1;
}

/* A restarted shard serves on top of what it replayed, which may so far exist only in
 * the page cache of the process that died (kill -9 leaves it there; a power cut then
 * loses it): the log and the snapshot are synced before the first ack. */
Test(replay_wal, restart_syncs_the_replayed_log_and_snapshot_before_serving) {
  const int n = 20;
  acked_then_die(SAC_REPLAY_DURABILITY_WAL, n);
  hook_on(NULL, NULL, 0);
  sac_net_ctx_t *ctx = sac_net_ctx_new(1);
  sac_replay_server_config_t c = server_cfg(SAC_REPLAY_DURABILITY_WAL, 2, "rs1");
  sac_replay_server_t *s = sac_replay_server_new(&c, ctx, NULL);
  cr_assert_not_null(s);
  int synced_log = op_index("fsync shard.snap.wal", 0) >= 0 || op_index("fdatasync shard.snap.wal", 0) >= 0;
  cr_assert(synced_log, "the replayed log was not synced before serving (%d ops)", g_n_ops);
  cr_assert_eq(sac_replay_server_start(s), 0);
  sac_replay_server_destroy(&s); /* final snapshot */
  hook_on(NULL, NULL, 0);
  s = sac_replay_server_new(&c, ctx, NULL);
  cr_assert_not_null(s);
  sac_replay_stats_t st;
  sac_replay_server_stats(s, &st);
  cr_assert_eq(st.restored_transitions, (uint64_t)n * 32u);
  cr_assert_geq(op_index("fsync shard.snap", 0), 0, "the restored snapshot was not synced before serving");
  cr_assert_geq(op_index("dirsync shard.snap", 0), 0, "the restored snapshot's directory was not synced");
  sac_durable_fault_hook = NULL;
  sac_replay_server_destroy(&s);
  sac_net_ctx_destroy(&ctx);
}

/* A snapshot whose directory fsync fails may be undone by a power cut: it is a failed
 * snapshot, and the log it would make redundant stays. */
Test(replay_wal, snapshot_with_a_failed_directory_fsync_keeps_the_log) {
  const int n = 10;
  char wal[400];
  snprintf(wal, sizeof wal, "%s/shard.snap.wal", g_dir);
  sac_net_ctx_t *ctx = sac_net_ctx_new(1);
  sac_replay_server_config_t c = server_cfg(SAC_REPLAY_DURABILITY_WAL, 2, "dsf");
  sac_replay_server_t *s = sac_replay_server_new(&c, ctx, NULL);
  cr_assert_eq(sac_replay_server_start(s), 0);
  sac_replay_client_t *cl = client_for(ctx, sac_replay_server_insert_endpoint(s));
  insert_acked(cl, n);
  long logged = file_size(wal);
  cr_assert_gt(logged, 16);
  hook_on("dirsync", "/shard.snap", EIO); /* the snapshot's directory fsync, not the log's */
  sac_replay_client_destroy(&cl);
  sac_replay_server_stop(s);
  sac_replay_server_join(s); /* the final snapshot */
  sac_durable_fault_hook = NULL;
  sac_replay_stats_t st;
  sac_replay_server_stats(s, &st);
  cr_assert_geq(op_index("dirsync shard.snap", 0), 0, "the snapshot's directory fsync was asked for");
  cr_assert_eq(st.snapshots_total, 0, "a snapshot whose directory fsync failed counted as taken");
  cr_assert_gt(st.snapshot_failures_total, 0);
  /* (a SYNC record may follow what was logged: the stop syncs the log first) */
  cr_assert_geq(file_size(wal), logged, "the log was emptied behind a snapshot that is not durable");
  sac_replay_server_destroy(&s);
  /* and the restart finds every batch, once */
  char *text = provenance_after_restart(SAC_REPLAY_DURABILITY_WAL, &st);
  ledger_t l = check_ledger(text, n);
  cr_assert_eq(l.found_once, n);
  free(text);
  sac_net_ctx_destroy(&ctx);
}

/* A raw insert connection (no client library): what the shard answers, as sent. */
typedef struct {
  sac_net_ctx_t *ctx;
  void *ins;
  sac_wire_decoder_t *dec;
  unsigned char buf[1 << 16];
} raw_t;

static void raw_send(raw_t *k, uint64_t seq, uint64_t acked_through, tg_t *g) {
  sac_wire_msg_t m = {.type = SAC_WIRE_TRANSITIONS};
  m.u.transitions = *tg_next(g);
  m.u.transitions.actor_id = ACTOR;
  m.u.transitions.session = SESSION;
  m.u.transitions.seq = seq;
  m.u.transitions.acked_through = acked_through;
  size_t len = 0;
  cr_assert_eq(sac_wire_encode(&m, k->buf, sizeof k->buf, &len), 0);
  cr_assert_eq(sac_net_send(k->ins, k->buf, len, 0), 0);
}

static int raw_ack(raw_t *k, int timeout_ms, sac_wire_ack_t *a, char *err, size_t cap) {
  sac_net_pollitem_t it = {k->ins, SAC_NET_POLLIN, 0};
  if (sac_net_poll(&it, 1, timeout_ms) <= 0)
    return 0;
  size_t len = 0;
  cr_assert_eq(sac_net_recv(k->ins, k->buf, sizeof k->buf, 0, &len, NULL), 0);
  sac_wire_msg_t m;
  sac_wire_reason_t why;
  cr_assert_eq(sac_wire_decode(k->dec, k->buf, len, NULL, &m, &why), 0);
  cr_assert_eq(m.type, SAC_WIRE_ACK);
  *a = m.u.ack;
  snprintf(err, cap, "%s", a->error ? a->error : "");
  return 1;
}

/* The client takes every seq up to acked_seq as stored, whatever the reply says: an
 * error reply (here a reject) sent while a stored batch waits for its fsync must not
 * claim that batch. Every reply with acked_seq >= 1 must come after the fsync. */
Test(replay_wal, error_replies_carry_only_the_durable_watermark) {
  g_sync_sleep_ns = 300000000; /* a 300 ms disk */
  atomic_store(&g_syncs, 0);
  sac_replay_wal_sync_hook = slow_sync;
  sac_net_ctx_t *ctx = sac_net_ctx_new(1);
  sac_replay_server_config_t c = server_cfg(SAC_REPLAY_DURABILITY_WAL, 2, "dwm");
  sac_replay_server_t *s = sac_replay_server_new(&c, ctx, NULL);
  cr_assert_eq(sac_replay_server_start(s), 0);
  raw_t *k = calloc(1, sizeof *k);
  k->ins = sac_net_socket(ctx, SAC_NET_DEALER, NULL);
  cr_assert_eq(sac_net_connect(k->ins, sac_replay_server_insert_endpoint(s)), 0);
  k->dec = sac_wire_decoder_new(0);
  tg_t g;
  tg_init(&g, ACTOR, 8, OBS, ACT, 30, 4);
  raw_send(k, 1, 0, &g);   /* stored, its ack waits for the fsync */
  raw_send(k, 100, 0, &g); /* beyond the window: rejected at once */
  int got = 0, errors = 0;
  for (int i = 0; i < 2; i++) {
    sac_wire_ack_t a;
    char err[128];
    if (!raw_ack(k, 5000, &a, err, sizeof err))
      break;
    got++;
    errors += err[0] != '\0';
    uint64_t syncs = atomic_load(&g_syncs);
    cr_assert(a.acked_seq == 0 || syncs > 0,
              "a reply (seq %llu, error '%s') claimed acked_seq %llu before any fsync finished",
              (unsigned long long)a.seq, err, (unsigned long long)a.acked_seq);
  }
  cr_assert_eq(got, 2, "both batches answered");
  cr_assert_eq(errors, 1, "one of them rejected");
  sac_replay_wal_sync_hook = NULL;
  tg_free(&g);
  sac_net_close(&k->ins);
  sac_wire_decoder_destroy(&k->dec);
  free(k);
  sac_replay_server_destroy(&s);
  sac_net_ctx_destroy(&ctx);
}

static int record_start(void *user, const sac_replay_wal_rec_t *rec, const unsigned char *payload,
                        size_t len) {
  (void)payload, (void)len;
  uint64_t *starts = user;
  for (int i = 0; i < 64; i++)
    if (!starts[i]) {
      starts[i] = rec->offset;
      break;
    }
  return 0;
}

/* Valid records after a corrupt one were fsynced and acknowledged: the shard refuses to
 * start and says where, leaving the file as it is; wal_truncate_corrupt cuts it there
 * after keeping the whole file aside. A torn tail (nothing intact after it) is still
 * cut without asking. */
Test(replay_wal, corruption_in_the_middle_refuses_the_start_unless_asked) {
  const int n = 12;
  char wal[400];
  snprintf(wal, sizeof wal, "%s/shard.snap.wal", g_dir);
  acked_then_die(SAC_REPLAY_DURABILITY_WAL, n);
  long size = file_size(wal);
  /* flip a byte in the payload of the 4th record */
  uint64_t starts[64] = {0};
  sac_replay_wal_scan_t sc;
  cr_assert_eq(sac_replay_wal_scan(wal, 1 << 20, record_start, starts, &sc), 0);
  cr_assert_eq(sc.records, (uint64_t)n);
  long at = (long)starts[3] + 40;
  int fd = open(wal, O_RDWR);
  unsigned char ch;
  cr_assert_eq(pread(fd, &ch, 1, at), 1);
  ch ^= 0x40;
  cr_assert_eq(pwrite(fd, &ch, 1, at), 1);
  close(fd);
  sac_net_ctx_t *ctx = sac_net_ctx_new(1);
  sac_replay_server_config_t c = server_cfg(SAC_REPLAY_DURABILITY_WAL, 2, "mid");
  int err = 0;
  sac_replay_server_t *s = sac_replay_server_new(&c, ctx, &err);
  cr_assert_null(s, "a log corrupt in the middle was replayed up to the bad record and cut");
  cr_assert_eq(err, SAC_ECONFIG);
  cr_assert_eq(file_size(wal), size, "the refused log is left as it was");
  c.wal_truncate_corrupt = 1;
  s = sac_replay_server_new(&c, ctx, &err);
  cr_assert_not_null(s);
  sac_replay_stats_t st;
  sac_replay_server_stats(s, &st);
  cr_assert_eq(st.wal_replayed_records, 3);
  cr_assert_eq(file_size(wal), (long)starts[3] + SYNC_RECORD);
  sac_replay_server_destroy(&s);
  char cmd[600];
  snprintf(cmd, sizeof cmd,
           "n=0; for f in '%s'/shard.snap.wal.corrupt-*; do [ \"$(stat -c %%s \"$f\")\" = %ld ] && "
           "n=$((n+1)); done; [ $n = 1 ]",
           g_dir, size);
  cr_assert_eq(system(cmd), 0, "the whole damaged log was kept aside");
  sac_net_ctx_destroy(&ctx);
}

/* A record that no longer passes the shard's checks (here: restarted with another
 * obs_dim) refuses the start, naming the record, rather than being skipped. */
Test(replay_wal, a_record_failing_validation_refuses_the_start) {
  char wal[400];
  snprintf(wal, sizeof wal, "%s/shard.snap.wal", g_dir);
  acked_then_die(SAC_REPLAY_DURABILITY_WAL, 5);
  long size = file_size(wal);
  sac_net_ctx_t *ctx = sac_net_ctx_new(1);
  sac_replay_server_config_t c = server_cfg(SAC_REPLAY_DURABILITY_WAL, 2, "val");
  c.shard.obs_dim = OBS + 1;
  int err = 0;
  sac_replay_server_t *s = sac_replay_server_new(&c, ctx, &err);
  cr_assert_null(s, "records of another obs_dim were skipped and the shard started without them");
  cr_assert_eq(err, SAC_ECONFIG);
  cr_assert_eq(file_size(wal), size, "the log is left as it was");
  sac_net_ctx_destroy(&ctx);
}

/* durability wal without a place for the log: refused, never a silent "none". */
Test(replay_wal, wal_without_a_path_refuses_to_start) {
  sac_replay_server_config_t c = server_cfg(SAC_REPLAY_DURABILITY_WAL, 2, "nop");
  c.snapshot_path[0] = '\0';
  int err = 0;
  sac_replay_server_t *s = sac_replay_server_new(&c, NULL, &err);
  cr_assert_null(s, "durability wal without a path ran without keeping anything");
  cr_assert_eq(err, SAC_ECONFIG);
}

/* Two shards on one log would interleave their records: the second refuses, naming the
 * first's pid. */
Test(replay_wal, a_second_shard_on_the_same_files_refuses) {
  sac_net_ctx_t *ctx = sac_net_ctx_new(1);
  sac_replay_server_config_t c = server_cfg(SAC_REPLAY_DURABILITY_WAL, 2, "lk1");
  sac_replay_server_t *a = sac_replay_server_new(&c, ctx, NULL);
  cr_assert_not_null(a);
  sac_replay_server_config_t c2 = server_cfg(SAC_REPLAY_DURABILITY_WAL, 2, "lk2");
  int err = 0;
  sac_replay_server_t *b = sac_replay_server_new(&c2, ctx, &err);
  cr_assert_null(b, "a second shard opened the same log and snapshot");
  cr_assert_eq(err, SAC_ECONFIG);
  char lock[400], text[64] = {0};
  snprintf(lock, sizeof lock, "%s/shard.snap.lock", g_dir);
  FILE *f = fopen(lock, "r");
  cr_assert_not_null(f);
  cr_assert_not_null(fgets(text, sizeof text, f));
  fclose(f);
  cr_assert_eq(atol(text), (long)getpid(), "the lock file names its holder: %s", text);
  sac_replay_server_destroy(&a);
  b = sac_replay_server_new(&c2, ctx, &err); /* released with the first */
  cr_assert_not_null(b);
  sac_replay_server_destroy(&b);
  sac_net_ctx_destroy(&ctx);
}

/* Another shard's log, or a log under durability snapshot/none, is refused as another
 * shard's snapshot is. */
Test(replay_wal, a_log_of_another_shard_or_mode_is_refused) {
  char wal[400];
  snprintf(wal, sizeof wal, "%s/shard.snap.wal", g_dir);
  acked_then_die(SAC_REPLAY_DURABILITY_WAL, 5); /* shard 0's log */
  long size = file_size(wal);
  sac_net_ctx_t *ctx = sac_net_ctx_new(1);
  int err = 0;
  sac_replay_server_config_t c = server_cfg(SAC_REPLAY_DURABILITY_WAL, 2, "oth");
  c.shard.shard_id = 1;
  sac_replay_server_t *s = sac_replay_server_new(&c, ctx, &err);
  cr_assert_null(s, "shard 1 replayed shard 0's log");
  cr_assert_eq(err, SAC_ECONFIG);
  for (int d = 0; d < 2; d++) {
    c = server_cfg(d ? SAC_REPLAY_DURABILITY_NONE : SAC_REPLAY_DURABILITY_SNAPSHOT, 2, "mode");
    s = sac_replay_server_new(&c, ctx, &err);
    cr_assert_null(s, "durability %s started over a log of acknowledged batches", d ? "none" : "snapshot");
  }
  cr_assert_eq(file_size(wal), size);
  c = server_cfg(SAC_REPLAY_DURABILITY_WAL, 2, "own");
  s = sac_replay_server_new(&c, ctx, &err);
  cr_assert_not_null(s, "its own shard replays it");
  sac_replay_server_destroy(&s);
  sac_net_ctx_destroy(&ctx);
}

/* A new log's name is made durable (its directory fsynced) before anything is
 * acknowledged: otherwise a power cut before the first snapshot (which syncs the same
 * directory) takes the whole log, fsynced records and all. */
Test(replay_wal, a_new_log_is_followed_by_a_directory_fsync) {
  sac_replay_server_config_t c = server_cfg(SAC_REPLAY_DURABILITY_WAL, 2, "newlog");
  hook_on(NULL, NULL, 0);
  sac_replay_server_t *s = sac_replay_server_new(&c, NULL, NULL);
  sac_durable_fault_hook = NULL;
  cr_assert_not_null(s);
  int opened = op_index("open shard.snap.wal", 0);
  cr_assert_geq(opened, 0, "the log was not created through the durable open");
  cr_assert_geq(op_index("dirsync shard.snap.wal", opened), 0, "no directory fsync after creating the log");
  sac_replay_server_destroy(&s);
}

/* A file moved aside is followed by a directory fsync: otherwise a power cut can bring
 * the bad file back under the name the shard starts from. */
Test(replay_wal, a_file_moved_aside_is_followed_by_a_directory_fsync) {
  char snap[400];
  snprintf(snap, sizeof snap, "%s/shard.snap", g_dir);
  FILE *f = fopen(snap, "wb");
  fputs("not a snapshot at all, and long enough to be looked at as one", f);
  fclose(f);
  sac_net_ctx_t *ctx = sac_net_ctx_new(1);
  sac_replay_server_config_t c = server_cfg(SAC_REPLAY_DURABILITY_WAL, 2, "asd");
  c.start_empty_on_bad_snapshot = 1;
  hook_on(NULL, NULL, 0);
  sac_replay_server_t *s = sac_replay_server_new(&c, ctx, NULL);
  sac_durable_fault_hook = NULL;
  cr_assert_not_null(s);
  int ren = -1;
  for (int i = 0; i < g_n_ops && ren < 0; i++)
    if (!strncmp(g_ops[i], "rename shard.snap.bad-", 22))
      ren = i;
  cr_assert_geq(ren, 0, "the bad snapshot was moved aside through the durable rename");
  int ds = -1;
  for (int i = ren + 1; i < g_n_ops && ds < 0; i++)
    if (!strncmp(g_ops[i], "dirsync shard.snap.bad-", 23))
      ds = i;
  cr_assert_geq(ds, 0, "no directory fsync after moving the snapshot aside");
  sac_replay_server_destroy(&s);
  sac_net_ctx_destroy(&ctx);
}

/* ------------------------------------------------------------------ injected I/O errors */

/* Sends seq from..to one at a time on a raw connection, waiting up to wait_ms for each
 * ack; marks acked[seq] for every seq an ack (or an ack's cumulative acked_seq) covers. */
static void send_and_collect(raw_t *k, tg_t *g, uint64_t from, uint64_t to, int wait_ms, int *acked) {
  for (uint64_t q = from; q <= to; q++) {
    uint64_t through = 0;
    for (uint64_t p = 1; p < q; p++)
      if (acked[p] && p == through + 1)
        through = p;
    raw_send(k, q, through, g);
    sac_wire_ack_t a;
    char err[128];
    if (raw_ack(k, wait_ms, &a, err, sizeof err)) {
      if (!err[0] && a.seq >= 1 && a.seq < 64)
        acked[a.seq] = 1;
      for (uint64_t p = 1; p <= a.acked_seq && p < 64; p++)
        acked[p] = 1;
    }
  }
}

static int g_io_trial;

/* One fault: the shard takes batches 1..5 (acknowledged), then op on the file ending in
 * suffix fails with err while batches 6..10 arrive (and, for the snapshot, a snapshot is
 * asked for). Then the fault is removed and the shard restarted: every acknowledged batch
 * is there, once. Returns how many of 6..10 were acknowledged under the fault. */
static int io_fault_trial(const char *op, const char *suffix, int err, sac_replay_stats_t *during) {
  char tag[32];
  snprintf(tag, sizeof tag, "io%d", g_io_trial++);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -f '%s'/shard.snap*", g_dir);
  cr_assert_eq(system(cmd), 0);
  sac_net_ctx_t *ctx = sac_net_ctx_new(1);
  sac_replay_server_config_t c = server_cfg(SAC_REPLAY_DURABILITY_WAL, 2, tag);
  sac_replay_server_t *s = sac_replay_server_new(&c, ctx, NULL);
  cr_assert_not_null(s);
  cr_assert_eq(sac_replay_server_start(s), 0);
  raw_t *k = calloc(1, sizeof *k);
  k->ins = sac_net_socket(ctx, SAC_NET_DEALER, NULL);
  cr_assert_eq(sac_net_connect(k->ins, sac_replay_server_insert_endpoint(s)), 0);
  k->dec = sac_wire_decoder_new(0);
  tg_t g;
  tg_init(&g, ACTOR, 8, OBS, ACT, 30, 4);
  int acked[64] = {0};
  send_and_collect(k, &g, 1, 5, 5000, acked);
  for (int q = 1; q <= 5; q++)
    cr_assert(acked[q], "%s %s: batch %d acknowledged before the fault", op, suffix, q);
  hook_on(op, suffix, err);
  if (strstr(suffix, ".snap") && !strstr(suffix, ".wal"))
    sac_replay_server_request_snapshot(s);
  send_and_collect(k, &g, 6, 10, 700, acked);
  if (strstr(suffix, ".snap") && !strstr(suffix, ".wal"))
    sac_replay_server_request_snapshot(s);
  sac_replay_server_stats(s, during);
  sac_replay_server_stop(s);
  sac_replay_server_join(s);
  sac_replay_server_stats(s, during);
  sac_durable_fault_hook = NULL;
  tg_free(&g);
  sac_net_close(&k->ins);
  sac_wire_decoder_destroy(&k->dec);
  free(k);
  sac_replay_server_destroy(&s);
  int late = 0;
  for (int q = 6; q <= 10; q++)
    late += acked[q];
  /* restarted without the fault: every acknowledged batch, once */
  sac_replay_stats_t st;
  char *text = provenance_after_restart(SAC_REPLAY_DURABILITY_WAL, &st);
  int *count = calloc(64, sizeof *count);
  const char *p = strchr(text, '\n');
  for (p++; *p; p = strchr(p, '\n') + 1) {
    unsigned actor = 0, rows = 0;
    unsigned long long session = 0, seq = 0;
    cr_assert_eq(sscanf(p, "%u %llu %llu %u", &actor, &session, &seq, &rows), 4);
    if (seq < 64)
      count[seq]++;
  }
  for (int q = 1; q <= 10; q++) {
    cr_assert_leq(count[q], 1, "%s %s (%s): batch %d stored twice", op, suffix, strerror(err), q);
    cr_assert(!acked[q] || count[q] == 1, "%s %s (%s): acknowledged batch %d missing after the restart", op,
              suffix, strerror(err), q);
  }
  free(count);
  free(text);
  sac_net_ctx_destroy(&ctx);
  return late;
}

/* EIO and ENOSPC on the log's write and fdatasync: the shard acknowledges none of the
 * batches it could not make durable (it answers them "not durable"), counts the error,
 * and the restarted shard has every acknowledged batch. */
Test(replay_wal, io_errors_on_the_log_ack_nothing_undurable) {
  const char *ops[] = {"write", "fdatasync"};
  const int errs[] = {EIO, ENOSPC};
  for (int o = 0; o < 2; o++)
    for (int e = 0; e < 2; e++) {
      sac_replay_stats_t st;
      int late = io_fault_trial(ops[o], "/shard.snap.wal", errs[e], &st);
      cr_assert_eq(late, 0, "%s of the log failing with %s: %d batches acknowledged after it", ops[o],
                   strerror(errs[e]), late);
      cr_assert_geq(st.wal_errors_total, 1, "%s (%s): not counted", ops[o], strerror(errs[e]));
    }
}

/* The log cannot be opened: the shard refuses to start (and starts once it can). */
Test(replay_wal, io_error_opening_the_log_refuses_the_start) {
  const int errs[] = {EIO, ENOSPC};
  for (int e = 0; e < 2; e++) {
    sac_replay_server_config_t c = server_cfg(SAC_REPLAY_DURABILITY_WAL, 2, "ioo");
    hook_on("open", "/shard.snap.wal", errs[e]);
    int err = 0;
    sac_replay_server_t *s = sac_replay_server_new(&c, NULL, &err);
    sac_durable_fault_hook = NULL;
    cr_assert_null(s, "started on a log it could not open (%s)", strerror(errs[e]));
    cr_assert_eq(err, SAC_ECONFIG);
    s = sac_replay_server_new(&c, NULL, &err);
    cr_assert_not_null(s);
    sac_replay_server_destroy(&s);
  }
}

/* EIO and ENOSPC on the snapshot's open, write, fsync and rename: the snapshot fails and
 * is counted, the log keeps every batch (its acks stay truthful: a batch is acknowledged
 * only once the log's fsync covered it), and the restarted shard has every acknowledged
 * batch. */
Test(replay_wal, io_errors_on_the_snapshot_keep_the_log) {
  const char *ops[] = {"open", "write", "fsync", "rename"};
  const int errs[] = {EIO, ENOSPC};
  for (int o = 0; o < 4; o++)
    for (int e = 0; e < 2; e++) {
      sac_replay_stats_t st;
      io_fault_trial(ops[o], "/shard.snap", errs[e], &st);
      cr_assert_geq(st.snapshot_failures_total, 1,
                    "%s of the snapshot failing with %s: no failed snapshot counted", ops[o],
                    strerror(errs[e]));
      cr_assert_eq(st.snapshots_total, 0, "%s (%s): a snapshot counted as taken", ops[o], strerror(errs[e]));
    }
}

/* ------------------------------------------------------------------ one owner per file */

/* Two shards given different snapshot paths and one log (the same --wal_path, a symlink
 * to it, a hard link to it) would append over each other's records: the second refuses,
 * and leaves the log as the first wrote it. */
Test(replay_wal, two_shards_never_write_one_log_whatever_the_paths) {
  char shared[400], sym[400], hard[400];
  snprintf(shared, sizeof shared, "%s/shared.wal", g_dir);
  snprintf(sym, sizeof sym, "%s/sym.wal", g_dir);
  snprintf(hard, sizeof hard, "%s/hard.wal", g_dir);
  sac_net_ctx_t *ctx = sac_net_ctx_new(1);
  sac_replay_server_config_t a = server_cfg(SAC_REPLAY_DURABILITY_WAL, 2, "own-a");
  snprintf(a.snapshot_path, sizeof a.snapshot_path, "%s/a.snap", g_dir);
  snprintf(a.wal_path, sizeof a.wal_path, "%s", shared);
  sac_replay_server_t *sa = sac_replay_server_new(&a, ctx, NULL);
  cr_assert_not_null(sa);
  cr_assert_eq(sac_replay_server_start(sa), 0);
  sac_replay_client_t *cl = client_for(ctx, sac_replay_server_insert_endpoint(sa));
  insert_acked(cl, 5);
  sac_sleep_ns(200000000); /* the SYNC record an idle shard writes after its last fsync */
  long size = file_size(shared);
  cr_assert_gt(size, 16);
  cr_assert_eq(symlink(shared, sym), 0);
  cr_assert_eq(link(shared, hard), 0);
  const char *paths[] = {shared, sym, hard};
  for (int i = 0; i < 3; i++) {
    sac_replay_server_config_t b = server_cfg(SAC_REPLAY_DURABILITY_WAL, 2, "own-b");
    snprintf(b.snapshot_path, sizeof b.snapshot_path, "%s/b%d.snap", g_dir, i);
    snprintf(b.wal_path, sizeof b.wal_path, "%s", paths[i]);
    int err = 0;
    sac_replay_server_t *sb = sac_replay_server_new(&b, ctx, &err);
    cr_assert_null(sb, "a second shard opened the log %s another shard writes", paths[i]);
    cr_assert_eq(err, SAC_ECONFIG);
    cr_assert_eq(file_size(shared), size, "the refused shard changed the log (%s)", paths[i]);
  }
  sac_replay_client_destroy(&cl);
  sac_replay_server_destroy(&sa);
  /* released with the first: the same second shard starts */
  sac_replay_server_config_t b = server_cfg(SAC_REPLAY_DURABILITY_WAL, 2, "own-b");
  snprintf(b.snapshot_path, sizeof b.snapshot_path, "%s/b0.snap", g_dir);
  snprintf(b.wal_path, sizeof b.wal_path, "%s", shared);
  sac_replay_server_t *sb = sac_replay_server_new(&b, ctx, NULL);
  cr_assert_not_null(sb);
  sac_replay_server_destroy(&sb);
  sac_net_ctx_destroy(&ctx);
}

/* Holds an flock on path through an open file description of its own, as another
 * process would (flock conflicts between descriptions, also within one process). */
static int hold_flock(const char *path) {
  int fd = open(path, O_RDWR | O_CREAT, 0644);
  cr_assert_geq(fd, 0);
  cr_assert_eq(flock(fd, LOCK_EX | LOCK_NB), 0);
  return fd;
}

/* Shards in containers share a volume and are each pid 1: a live shard's snapshot in
 * progress is "<snap>.tmp.1", and so would be the one of a shard that died. The shard
 * about to be refused (the snapshot's lock is held) deletes nothing: the lock comes
 * first. Here the live one is this process's pid, held by an flock like a live
 * writer's. */
Test(replay_wal, the_lock_comes_before_anything_is_deleted) {
  char snap[400], lock[420], tmp[420];
  snprintf(snap, sizeof snap, "%s/shard.snap", g_dir);
  snprintf(lock, sizeof lock, "%s.lock", snap);
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", snap, (long)getpid());
  int lk = hold_flock(lock), tf = hold_flock(tmp);
  cr_assert_eq(write(tf, "half a snapshot", 15), 15);
  sac_replay_server_config_t c = server_cfg(SAC_REPLAY_DURABILITY_WAL, 2, "first");
  int err = 0;
  sac_replay_server_t *s = sac_replay_server_new(&c, NULL, &err);
  cr_assert_null(s, "started while another shard holds the snapshot's lock");
  cr_assert_eq(err, SAC_ECONFIG);
  cr_assert_eq(access(tmp, F_OK), 0, "the refused shard deleted the live shard's snapshot in progress");
  close(tf);
  close(lk);
}

/* Stale temporaries are told by their lock, not their pid: one a live writer holds is
 * kept even when it carries this process's pid (another PID namespace); one nobody holds
 * goes, also when its pid is this process's. A name with another live process's pid is
 * kept (an older writer that took no lock). */
Test(replay_wal, stale_temporaries_are_told_by_their_lock_not_their_pid) {
  char snap[400], held[450], dead_same_pid[450], dead_new[450];
  snprintf(snap, sizeof snap, "%s/t.snap", g_dir);
  snprintf(held, sizeof held, "%s.tmp.%ld", snap, (long)getpid());
  snprintf(dead_same_pid, sizeof dead_same_pid, "%s.tmp.%ld-0000000100000002", snap, (long)getpid());
  snprintf(dead_new, sizeof dead_new, "%s.tmp.999999999-00000001", snap);
  int hf = hold_flock(held);
  const char *dead[] = {dead_same_pid, dead_new};
  for (int i = 0; i < 2; i++)
    close(open(dead[i], O_WRONLY | O_CREAT, 0644));
  uint64_t removed = 0;
  cr_assert_eq(sac_snap_prepare(snap, &removed), 0);
  cr_assert_eq(access(held, F_OK), 0, "a temporary a live writer holds was removed (judged by pid)");
  cr_assert_neq(access(dead_same_pid, F_OK), 0, "an unheld temporary with this pid was kept");
  cr_assert_neq(access(dead_new, F_OK), 0, "an unheld temporary was kept");
  cr_assert_eq(removed, 2);
  close(hf);
  unlink(held);
  /* a writer holds its own temporary while it writes */
  sac_snap_writer_t w;
  cr_assert_eq(sac_snap_writer_open(&w, snap, SAC_SNAP_KIND_REPLAY), 0);
  cr_assert(sac_durable_file_locked(w.tmp), "the writer does not hold its temporary");
  cr_assert_eq(sac_snap_prepare(snap, &removed), 0);
  cr_assert_eq(removed, 0);
  cr_assert_eq(access(w.tmp, F_OK), 0);
  cr_assert_eq(sac_snap_write(&w, "x", 1), 0);
  cr_assert_eq(sac_snap_writer_commit(&w), 0);
}

/* ------------------------------------------------------------------ replay never drops acknowledged data */

/* 47 batches acknowledged by a shard of capacity 65536, restarted with capacity 1024:
 * replaying the log into that ring would evict most of them. Refused, naming the
 * capacity needed, as a snapshot of another capacity is; with it, all 47 are there. */
Test(replay_wal, a_log_replays_only_into_a_ring_that_holds_it) {
  const int n = 47;
  char wal[400];
  snprintf(wal, sizeof wal, "%s/shard.snap.wal", g_dir);
  sac_replay_server_config_t c = server_cfg(SAC_REPLAY_DURABILITY_WAL, 2, "cap");
  const step_t steps[] = {{ACTOR, n, 0}};
  steps_then_die(&c, steps, 1, 0);
  long size = file_size(wal);
  c.shard.capacity = 1024;
  c.shard.max_batch_rows = 64;
  int err = 0;
  sac_replay_server_t *s = sac_replay_server_new(&c, NULL, &err);
  if (s) { /* what it would have served: count what the smaller ring kept */
    char *text = NULL;
    size_t len = 0;
    cr_assert_eq(sac_replay_server_provenance_local(s, &text, &len), 0);
    int found = 0;
    for (int q = 1; q <= n; q++)
      found += prov_count(text, ACTOR, (uint64_t)q) == 1;
    free(text);
    sac_replay_server_destroy(&s);
    cr_assert_fail(
        "restarted with capacity 1024: %d of %d acknowledged batches found, the rest evicted silently", found,
        n);
  }
  cr_assert_eq(err, SAC_ECONFIG);
  cr_assert_eq(file_size(wal), size, "the refused start changed the log");
  c.shard.capacity = 2048; /* the log names what it needs (about 1,550 slots) */
  sac_replay_stats_t st;
  char *text = provenance_of(&c, &st);
  for (int q = 1; q <= n; q++)
    cr_assert_eq(prov_count(text, ACTOR, (uint64_t)q), 1, "batch %d", q);
  free(text);
}

/* The actor table was full (max_actors 2) and an idle actor was forgotten to make room
 * for a third: the restart with the same settings replays that too, and every
 * acknowledged batch of the three actors is there once. */
Test(replay_wal, a_log_written_under_an_expiry_replays_with_its_own_settings) {
  sac_replay_server_config_t c = server_cfg(SAC_REPLAY_DURABILITY_WAL, 2, "exp");
  c.shard.max_actors = 2;
  c.shard.actor_idle_s = 0.3;
  const step_t steps[] = {{1, 3, 0}, {2, 3, 400}, {3, 3, 0}};
  steps_then_die(&c, steps, 3, 0);
  sac_net_ctx_t *ctx = sac_net_ctx_new(1);
  int err = 0;
  sac_replay_server_t *s = sac_replay_server_new(&c, ctx, &err);
  cr_assert_not_null(s, "a log written under an actor expiry does not replay with its own settings (%s)",
                     sac_strerror(err));
  sac_replay_stats_t st;
  cr_assert_eq(sac_replay_server_start(s), 0);
  char *text = NULL;
  size_t len = 0;
  cr_assert_eq(sac_replay_server_provenance(s, 5000, &text, &len), 0);
  sac_replay_server_stop(s);
  sac_replay_server_join(s);
  sac_replay_server_stats(s, &st);
  for (uint32_t a = 1; a <= 3; a++)
    for (int q = 1; q <= 3; q++)
      cr_assert_eq(prov_count(text, a, (uint64_t)q), 1, "actor %u batch %d", a, q);
  cr_assert_eq(st.shard.actors, 2, "the actor table as it was: actors 2 and 3");
  cr_assert_geq(st.shard.actors_expired_total, 1);
  free(text);
  sac_replay_server_destroy(&s);
  sac_net_ctx_destroy(&ctx);
}

static void append_bytes(const char *path, const void *data, size_t len) {
  int fd = open(path, O_WRONLY | O_APPEND);
  cr_assert_geq(fd, 0);
  cr_assert_eq(write(fd, data, len), (ssize_t)len);
  close(fd);
}

static void flip_byte(const char *path, long at) {
  int fd = open(path, O_RDWR);
  unsigned char ch;
  cr_assert_eq(pread(fd, &ch, 1, at), 1);
  ch ^= 0x40;
  cr_assert_eq(pwrite(fd, &ch, 1, at), 1);
  close(fd);
}

/* After the acknowledged batches, a hole of zeros (pages never written back) and then an
 * intact record (here a copy of the first: written, but no completed fsync covered it):
 * what a power cut leaves. The shard starts, drops that tail, says so, and has every
 * acknowledged batch once. */
Test(replay_wal, zeros_then_an_unacknowledged_record_is_a_power_cut_tail) {
  const int n = 12;
  char wal[400];
  snprintf(wal, sizeof wal, "%s/shard.snap.wal", g_dir);
  sac_replay_server_config_t c = server_cfg(SAC_REPLAY_DURABILITY_WAL, 2, "zt");
  const step_t steps[] = {{ACTOR, n, 0}};
  steps_then_die(&c, steps, 1, 0);
  uint64_t starts[64] = {0};
  sac_replay_wal_scan_t sc;
  cr_assert_eq(sac_replay_wal_scan(wal, 1 << 20, record_start, starts, &sc), 0);
  long first = (long)starts[0], second = (long)starts[1], size = file_size(wal);
  unsigned char *rec = malloc((size_t)(second - first)), zeros[4096] = {0};
  int fd = open(wal, O_RDONLY);
  cr_assert_eq(pread(fd, rec, (size_t)(second - first), first), second - first);
  close(fd);
  append_bytes(wal, zeros, sizeof zeros);
  append_bytes(wal, rec, (size_t)(second - first));
  free(rec);
  sac_replay_stats_t st;
  char *text = provenance_of(&c, &st);
  for (int q = 1; q <= n; q++)
    cr_assert_eq(prov_count(text, ACTOR, (uint64_t)q), 1, "batch %d", q);
  cr_assert_eq(st.wal_dropped_bytes, (uint64_t)(sizeof zeros + (size_t)(second - first)),
               "dropped %llu bytes, not the tail after byte %ld", (unsigned long long)st.wal_dropped_bytes,
               size);
  free(text);
}

/* Bit rot in the last acknowledged record, with nothing but the shard's closing SYNC
 * record after it: a completed fsync covered it, so this is corruption, not a torn
 * tail. Refused (the file left as it is), where cutting it would drop an acknowledged
 * batch silently. */
Test(replay_wal, a_corrupt_last_acknowledged_record_refuses_the_start) {
  const int n = 6;
  char wal[400];
  snprintf(wal, sizeof wal, "%s/shard.snap.wal", g_dir);
  sac_replay_server_config_t c = server_cfg(SAC_REPLAY_DURABILITY_WAL, 2, "rot");
  const step_t steps[] = {{ACTOR, n, 0}};
  steps_then_die(&c, steps, 1, 200); /* idle after the last ack: the closing SYNC record */
  uint64_t starts[64] = {0};
  sac_replay_wal_scan_t sc;
  cr_assert_eq(sac_replay_wal_scan(wal, 1 << 20, record_start, starts, &sc), 0);
  cr_assert_eq(sc.records, (uint64_t)n);
  flip_byte(wal, (long)starts[n - 1] + 40);
  long size = file_size(wal);
  int err = 0;
  sac_replay_server_t *s = sac_replay_server_new(&c, NULL, &err);
  if (s) {
    char *text = NULL;
    size_t len = 0;
    cr_assert_eq(sac_replay_server_provenance_local(s, &text, &len), 0);
    int last = prov_count(text, ACTOR, (uint64_t)n);
    free(text);
    sac_replay_server_destroy(&s);
    cr_assert_fail("a corrupt last acknowledged record was cut as a torn tail (batch %d found %d times)", n,
                   last);
  }
  cr_assert_eq(err, SAC_ECONFIG);
  cr_assert_eq(file_size(wal), size, "the refused log is left as it was");
}

/* ------------------------------------------------------------------ the torn-tail rule on crafted logs */

/* A log with records R0..R(n-1) of payload sizes len[i] (a payload of value i), with
 * SYNC records inserted after record sync_after[k] claiming claim_upto[k] (an index:
 * the end of that record). Returns each record's offset in at[] (at[n] = end). */
static void craft_log(const char *path, int n, const size_t *len, int n_sync, const int *sync_after,
                      const int *claim_upto, long *at) {
  unlink(path);
  sac_replay_wal_t *w = NULL;
  cr_assert_eq(sac_replay_wal_open(path, 3, 1u << 16, 1u << 20, 0, NULL, NULL, &w, NULL), 0);
  long ends[64];
  for (int i = 0; i < n; i++) {
    at[i] = (long)sac_replay_wal_bytes(w);
    unsigned char *p = malloc(len[i]);
    memset(p, i + 1, len[i]);
    sac_replay_wal_rec_t r = {.actor = 100u + (uint32_t)i, .rows = 1, .session = 1, .seq = 1u + (uint64_t)i};
    cr_assert_eq(sac_replay_wal_append(w, &r, p, len[i]), 0);
    free(p);
    ends[i] = (long)sac_replay_wal_bytes(w);
    for (int k = 0; k < n_sync; k++)
      if (sync_after[k] == i)
        cr_assert_eq(
            sac_replay_wal_append_sync(w, (uint64_t)(claim_upto[k] < 0 ? SAC_REPLAY_WAL_HEADER_BYTES
                                                                       : (unsigned long)ends[claim_upto[k]])),
            0);
  }
  at[n] = (long)sac_replay_wal_bytes(w);
  cr_assert_eq(sac_replay_wal_sync(w), 0);
  sac_replay_wal_close(&w);
}

static int open_crafted(const char *path, seen_t *s, sac_replay_wal_scan_t *sc) {
  sac_replay_wal_t *w = NULL;
  memset(s, 0, sizeof *s);
  int rc = sac_replay_wal_open(path, 3, 1u << 16, 1u << 20, 0, collect, s, &w, sc);
  sac_replay_wal_close(&w);
  return rc;
}

/* The rule of replay/wal.h, case by case. Group commits: R0 R1 | SYNC(claims nothing) |
 * R2 R3 | SYNC(claims R1) | R4 | SYNC(claims R3): R0..R3 were covered by completed fsyncs
 * (acknowledged), R4 was not. */
Test(replay_wal, the_torn_tail_rule_on_crafted_logs) {
  char path[400];
  snprintf(path, sizeof path, "%s/rule.wal", g_dir);
  const size_t len[5] = {40, 50, 60, 70, 80};
  const int after[3] = {1, 3, 4}, upto[3] = {-1, 1, 3};
  long at[6];
  seen_t s;
  sac_replay_wal_scan_t sc;
  /* 1. damage in R4 (not acknowledged: no SYNC after it claims it): a power-cut tail */
  craft_log(path, 5, len, 3, after, upto, at);
  flip_byte(path, at[4] + 40);
  cr_assert_eq(open_crafted(path, &s, &sc), 0, "damage no completed fsync covered refused the start");
  cr_assert_eq(s.n, 4);
  cr_assert_eq(sc.corrupt, 0);
  cr_assert_str_eq(sc.why, "record checksum mismatch");
  /* 2. damage in R2 (acknowledged: the SYNC after R4 claims up to R3): corruption */
  craft_log(path, 5, len, 3, after, upto, at);
  flip_byte(path, at[2] + 40);
  long size = file_size(path);
  cr_assert_eq(open_crafted(path, &s, &sc), SAC_ECHECKSUM, "damage to acknowledged records was cut");
  cr_assert_eq(file_size(path), size, "the refused log is left as it is");
  /* 3. zeros over R2..R4 (pages never written back), the last SYNC intact: it claims R3,
   * so R2 and R3 were acknowledged: corruption */
  craft_log(path, 5, len, 3, after, upto, at);
  {
    int fd = open(path, O_RDWR);
    unsigned char z[512] = {0};
    cr_assert_eq(pwrite(fd, z, (size_t)(at[4] + 80 + 32 - at[2]), at[2]), at[4] + 112 - at[2]);
    close(fd);
  }
  cr_assert_eq(open_crafted(path, &s, &sc), SAC_ECHECKSUM);
  /* 4. zeros over R4 only, then an intact record never acknowledged (a copy of R0): a
   * power-cut tail, reported as zeros */
  craft_log(path, 5, len, 3, after, upto, at);
  {
    unsigned char *r0 = malloc((size_t)(at[1] - at[0]));
    int fd = open(path, O_RDWR);
    cr_assert_eq(pread(fd, r0, (size_t)(at[1] - at[0]), at[0]), at[1] - at[0]);
    cr_assert_eq(ftruncate(fd, at[4]), 0);
    unsigned char z[200] = {0};
    cr_assert_eq(pwrite(fd, z, sizeof z, at[4]), (ssize_t)sizeof z);
    cr_assert_eq(pwrite(fd, r0, (size_t)(at[1] - at[0]), at[4] + (long)sizeof z), at[1] - at[0]);
    close(fd);
    free(r0);
  }
  cr_assert_eq(open_crafted(path, &s, &sc), 0,
               "zeros then an unacknowledged intact record refused the start");
  cr_assert_eq(s.n, 4);
  cr_assert_str_eq(sc.why, "zero-filled record head");
  cr_assert(strstr(sc.detail, "zeros"), "%s", sc.detail);
  /* 5. a torn last record (the file ends inside it): reported as torn, cut */
  craft_log(path, 5, len, 2, after, upto, at);
  cr_assert_eq(truncate(path, at[4] + 50), 0);
  cr_assert_eq(open_crafted(path, &s, &sc), 0);
  cr_assert_eq(s.n, 4);
  cr_assert_str_eq(sc.why, "torn record payload");
  cr_assert(strstr(sc.detail, "into a record of 112 bytes"), "%s", sc.detail);
}

/* A corrupt record larger than any fixed search window (here 70 MiB, within what
 * max_msg_bytes allows) with an acknowledged record after it: refused, not cut. */
Test(replay_wal, corruption_before_acknowledged_records_is_found_past_any_window) {
  char path[400];
  snprintf(path, sizeof path, "%s/big.wal", g_dir);
  const size_t len[3] = {40, 70u << 20, 40};
  const int after[1] = {2}, upto[1] = {2};
  long at[4];
  craft_log(path, 3, len, 1, after, upto, at);
  flip_byte(path, at[1] + 1000);
  seen_t s;
  sac_replay_wal_scan_t sc;
  cr_assert_eq(open_crafted(path, &s, &sc), SAC_ECHECKSUM, "a corrupt 70 MiB record was cut as a torn tail");
  cr_assert_eq(sc.claim_after, (uint64_t)(at[3] - SYNC_RECORD), "the claim of the SYNC record after R2");
  unlink(path);
}

/* ------------------------------------------------------------------ a full disk, a failed fsync */

/* One raw connection to a server's insert endpoint and one to its sample endpoint. */
typedef struct {
  raw_t k;
  void *smp;
  tg_t g;
} rig_t;

static void rig_open(rig_t *r, sac_net_ctx_t *ctx, sac_replay_server_t *s) {
  memset(r, 0, sizeof *r);
  r->k.ins = sac_net_socket(ctx, SAC_NET_DEALER, NULL);
  cr_assert_eq(sac_net_connect(r->k.ins, sac_replay_server_insert_endpoint(s)), 0);
  r->smp = sac_net_socket(ctx, SAC_NET_DEALER, NULL);
  cr_assert_eq(sac_net_connect(r->smp, sac_replay_server_sample_endpoint(s)), 0);
  r->k.dec = sac_wire_decoder_new(0);
  tg_init(&r->g, ACTOR, 8, OBS, ACT, 30, 4);
}

static void rig_close(rig_t *r) {
  tg_free(&r->g);
  sac_net_close(&r->k.ins);
  sac_net_close(&r->smp);
  sac_wire_decoder_destroy(&r->k.dec);
}

/* Sends batch seq (acked_through: every seq below it) and returns its answer in *a
 * (the error text in err); 0 when none came within 5 s. */
static int rig_insert(rig_t *r, uint64_t seq, sac_wire_ack_t *a, char *err, size_t cap) {
  raw_send(&r->k, seq, seq - 1, &r->g);
  return raw_ack(&r->k, 5000, a, err, cap);
}

/* The server publishes its stats from its loop (at most every 50 ms when idle): waits up
 * to 5 s for wal_state to read want. */
static void wait_published(sac_replay_server_t *s, sac_replay_stats_t *st, int want) {
  uint64_t end = sac_clock_ns() + 5000000000ull;
  do {
    sac_replay_server_stats(s, st);
    if (st->wal_state == want)
      return;
    sac_sleep_ns(10000000);
  } while (sac_clock_ns() < end);
}

/* A sample of 16 rows: how many came back (0 with an error or no answer). */
static uint32_t rig_sample(rig_t *r) {
  sac_wire_msg_t m = {.type = SAC_WIRE_SAMPLE_REQUEST};
  m.u.sample_request = (sac_wire_sample_request_t){.request_id = 9, .batch_size = 16, .timeout_ms = 1000};
  size_t len = 0;
  cr_assert_eq(sac_wire_encode(&m, r->k.buf, sizeof r->k.buf, &len), 0);
  cr_assert_eq(sac_net_send(r->smp, r->k.buf, len, 0), 0);
  sac_net_pollitem_t it = {r->smp, SAC_NET_POLLIN, 0};
  if (sac_net_poll(&it, 1, 5000) <= 0)
    return 0;
  cr_assert_eq(sac_net_recv(r->smp, r->k.buf, sizeof r->k.buf, 0, &len, NULL), 0);
  sac_wire_msg_t b;
  sac_wire_reason_t why;
  cr_assert_eq(sac_wire_decode(r->k.dec, r->k.buf, len, NULL, &b, &why), 0);
  cr_assert_eq(b.type, SAC_WIRE_SAMPLE_BATCH);
  return b.u.sample_batch.error[0] ? 0 : b.u.sample_batch.n;
}

/* The log's disk is full (ENOSPC on its writes): the insert is answered "not durable"
 * (status NOT_DURABLE, nothing claimed), counted, /healthz says why, samples are still
 * served; when the disk takes writes again the shard resumes by itself, and a restart
 * finds every acknowledged batch once. */
Test(replay_wal, a_full_disk_is_answered_and_the_shard_resumes_by_itself) {
  sac_net_ctx_t *ctx = sac_net_ctx_new(1);
  sac_replay_server_config_t c = server_cfg(SAC_REPLAY_DURABILITY_WAL, 2, "full");
  sac_replay_server_t *s = sac_replay_server_new(&c, ctx, NULL);
  cr_assert_not_null(s);
  cr_assert_eq(sac_replay_server_start(s), 0);
  static rig_t r;
  rig_open(&r, ctx, s);
  sac_wire_ack_t a;
  char err[160], why[400];
  for (uint64_t q = 1; q <= 3; q++) {
    cr_assert(rig_insert(&r, q, &a, err, sizeof err), "no answer to batch %llu", (unsigned long long)q);
    cr_assert_str_eq(err, "", "batch %llu: %s", (unsigned long long)q, err);
  }
  hook_on("write", "/shard.snap.wal", ENOSPC);
  cr_assert(rig_insert(&r, 4, &a, err, sizeof err), "a full disk: the insert got no answer (silence)");
  cr_assert_eq(a.status, SAC_WIRE_ACK_NOT_DURABLE, "answered '%s', status %u", err, a.status);
  cr_assert_eq(a.acked_seq, 0, "a not-durable answer claims nothing");
  cr_assert_gt(a.retry_after_ms, 0);
  cr_assert_eq(a.stored, 0);
  sac_replay_stats_t st;
  wait_published(s, &st, 1);
  cr_assert_eq(st.wal_state, 1);
  cr_assert_geq(st.inserts_not_durable_total, 1);
  cr_assert_eq(sac_replay_server_healthy(s, why, sizeof why), 0, "healthy on a full disk");
  cr_assert(strstr(why, "inserts refused") && strstr(why, "No space left"), "/healthz says: %s", why);
  cr_assert_eq(rig_sample(&r), 16, "samples are not served while the disk is full");
  /* still full: still refused */
  sac_sleep_ns((uint64_t)a.retry_after_ms * 1000000ull);
  cr_assert(rig_insert(&r, 4, &a, err, sizeof err));
  cr_assert_eq(a.status, SAC_WIRE_ACK_NOT_DURABLE);
  /* room again: the same batch is acknowledged after the retry time, without a restart */
  sac_durable_fault_hook = NULL;
  uint64_t end = sac_clock_ns() + 10000000000ull;
  do {
    sac_sleep_ns((uint64_t)(a.retry_after_ms ? a.retry_after_ms : 100) * 1000000ull);
    cr_assert(rig_insert(&r, 4, &a, err, sizeof err));
  } while (a.status == SAC_WIRE_ACK_NOT_DURABLE && sac_clock_ns() < end);
  cr_assert_str_eq(err, "", "not resumed: %s", err);
  cr_assert_eq(a.acked_seq, 4);
  wait_published(s, &st, 0);
  cr_assert_eq(sac_replay_server_healthy(s, why, sizeof why), 1, "still unhealthy: %s", why);
  rig_close(&r);
  sac_replay_server_stop(s);
  sac_replay_server_join(s);
  sac_replay_server_destroy(&s);
  sac_replay_stats_t st2;
  char *text = provenance_of(&c, &st2);
  for (int q = 1; q <= 4; q++)
    cr_assert_eq(prov_count(text, ACTOR, (uint64_t)q), 1, "batch %d", q);
  free(text);
  sac_net_ctx_destroy(&ctx);
}

/* An fsync of the log fails (EIO). The kernel may have dropped those pages and a later
 * fsync can succeed over them (PostgreSQL's "fsyncgate"): the shard acknowledges nothing
 * more, not even after the fault is gone, not a duplicate of a batch it stored; it keeps
 * serving samples and /healthz says to restart it. The restart has every acknowledged
 * batch once and acknowledges again. */
Test(replay_wal, after_a_failed_fsync_nothing_is_acknowledged_until_a_restart) {
  sac_net_ctx_t *ctx = sac_net_ctx_new(1);
  sac_replay_server_config_t c = server_cfg(SAC_REPLAY_DURABILITY_WAL, 2, "fsf");
  sac_replay_server_t *s = sac_replay_server_new(&c, ctx, NULL);
  cr_assert_not_null(s);
  cr_assert_eq(sac_replay_server_start(s), 0);
  static rig_t r;
  rig_open(&r, ctx, s);
  sac_wire_ack_t a;
  char err[160], why[400];
  for (uint64_t q = 1; q <= 3; q++) {
    cr_assert(rig_insert(&r, q, &a, err, sizeof err));
    cr_assert_str_eq(err, "");
  }
  hook_on("fdatasync", "/shard.snap.wal", EIO);
  cr_assert(rig_insert(&r, 4, &a, err, sizeof err), "a failed fsync: the insert got no answer");
  cr_assert_eq(a.status, SAC_WIRE_ACK_NOT_DURABLE, "answered '%s'", err);
  sac_durable_fault_hook = NULL; /* the next fsync would succeed */
  for (int round = 0; round < 2; round++) {
    sac_sleep_ns(200000000);
    cr_assert(rig_insert(&r, 4, &a, err, sizeof err)); /* a duplicate of a batch it stored */
    cr_assert_eq(a.status, SAC_WIRE_ACK_NOT_DURABLE, "acknowledged after a failed fsync: '%s'", err);
    cr_assert(rig_insert(&r, 5, &a, err, sizeof err)); /* a new one */
    cr_assert_eq(a.status, SAC_WIRE_ACK_NOT_DURABLE, "acknowledged after a failed fsync: '%s'", err);
    cr_assert_eq(a.acked_seq, 0);
  }
  sac_replay_stats_t st;
  wait_published(s, &st, 2);
  cr_assert_eq(st.wal_state, 2);
  cr_assert_eq(sac_replay_server_healthy(s, why, sizeof why), 0);
  cr_assert(strstr(why, "restarted"), "/healthz says: %s", why);
  cr_assert_eq(rig_sample(&r), 16, "samples are not served after a failed fsync");
  rig_close(&r);
  sac_replay_server_stop(s);
  cr_assert_eq(sac_replay_server_join(s), SAC_EIO, "the run ends in an error after a failed fsync");
  sac_replay_server_destroy(&s);
  s = sac_replay_server_new(&c, ctx, NULL);
  cr_assert_not_null(s);
  cr_assert_eq(sac_replay_server_start(s), 0);
  rig_open(&r, ctx, s);
  cr_assert(rig_insert(&r, 5, &a, err, sizeof err));
  cr_assert_str_eq(err, "", "the restarted shard does not acknowledge: %s", err);
  rig_close(&r);
  char *text = NULL;
  size_t len = 0;
  cr_assert_eq(sac_replay_server_provenance(s, 5000, &text, &len), 0);
  for (int q = 1; q <= 3; q++)
    cr_assert_eq(prov_count(text, ACTOR, (uint64_t)q), 1, "batch %d", q);
  free(text);
  sac_replay_server_destroy(&s);
  sac_net_ctx_destroy(&ctx);
}

static _Atomic int g_slow_writes; /* log appends still to slow down */

static int slow_first_write(const char *op, const char *path) {
  size_t n = strlen(path);
  if (!strcmp(op, "write") && n > 4 && !strcmp(path + n - 4, ".wal") &&
      atomic_fetch_sub(&g_slow_writes, 1) > 0)
    sac_sleep_ns(200000000);
  return 0;
}

/* A resent duplicate arrives while its original waits for its fsync (a 300 ms disk):
 * its acknowledgement waits for that fsync too. */
Test(replay_wal, a_duplicate_is_not_acknowledged_before_its_original_is_durable) {
  g_sync_sleep_ns = 300000000;
  atomic_store(&g_syncs, 0);
  sac_replay_wal_sync_hook = slow_sync;
  sac_net_ctx_t *ctx = sac_net_ctx_new(1);
  sac_replay_server_config_t c = server_cfg(SAC_REPLAY_DURABILITY_WAL, 2, "dup");
  sac_replay_server_t *s = sac_replay_server_new(&c, ctx, NULL);
  cr_assert_eq(sac_replay_server_start(s), 0);
  static rig_t r;
  rig_open(&r, ctx, s);
  /* the original's log append takes 200 ms (the fault hook sleeps in it), and the resend
   * arrives meanwhile: the shard reads it right after the original, before it asks for the
   * fsync that covers the original */
  atomic_store(&g_slow_writes, 1);
  sac_durable_fault_hook = slow_first_write;
  raw_send(&r.k, 1, 0, &r.g);
  sac_sleep_ns(50000000);
  raw_send(&r.k, 1, 0, &r.g);
  int dups = 0;
  for (int i = 0; i < 2; i++) {
    sac_wire_ack_t a;
    char err[160];
    cr_assert(raw_ack(&r.k, 5000, &a, err, sizeof err), "answer %d missing", i);
    cr_assert_str_eq(err, "");
    dups += a.duplicate;
    cr_assert_gt(atomic_load(&g_syncs), 0, "an ack (duplicate %d) came before its original's fsync finished",
                 a.duplicate);
  }
  cr_assert_eq(dups, 1, "the resend was not taken for a duplicate");
  sac_durable_fault_hook = NULL;
  sac_replay_wal_sync_hook = NULL;
  rig_close(&r);
  sac_replay_server_destroy(&s);
  sac_net_ctx_destroy(&ctx);
}

/* Snapshots keep failing while the log is past wal_max_mb (every loop would ask for
 * one): they back off (1 s, then doubling), not a full snapshot 20 times a second. */
Test(replay_wal, failing_snapshots_back_off) {
  sac_net_ctx_t *ctx = sac_net_ctx_new(1);
  sac_replay_server_config_t c = server_cfg(SAC_REPLAY_DURABILITY_WAL, 2, "storm");
  c.wal_max_bytes = 1; /* always "full" once it holds a record */
  sac_replay_server_t *s = sac_replay_server_new(&c, ctx, NULL);
  cr_assert_eq(sac_replay_server_start(s), 0);
  static rig_t r;
  rig_open(&r, ctx, s);
  hook_on("rename", "/shard.snap", EIO);
  sac_wire_ack_t a;
  char err[160];
  cr_assert(rig_insert(&r, 1, &a, err, sizeof err));
  sac_sleep_ns(2500000000ull);
  sac_replay_stats_t st;
  sac_replay_server_stats(s, &st);
  sac_durable_fault_hook = NULL;
  cr_assert_geq(st.snapshot_failures_total, 2, "the log past wal_max_mb asked for no snapshot");
  cr_assert_leq(st.snapshot_failures_total, 4, "%llu failed snapshots in 2.5 s: a retry storm",
                (unsigned long long)st.snapshot_failures_total);
  rig_close(&r);
  sac_replay_server_destroy(&s);
  sac_net_ctx_destroy(&ctx);
}

/* ------------------------------------------------------------------ durability is explicit */

/* durability snapshot without a place for its snapshots: refused, never a silent "none". */
Test(replay_wal, snapshot_durability_without_a_path_refuses_to_start) {
  sac_replay_server_config_t c = server_cfg(SAC_REPLAY_DURABILITY_SNAPSHOT, 2, "nosnap");
  c.snapshot_path[0] = '\0';
  int err = 0;
  sac_replay_server_t *s = sac_replay_server_new(&c, NULL, &err);
  if (s)
    sac_replay_server_destroy(&s);
  cr_assert_null(s, "durability snapshot without a path started and keeps nothing");
  cr_assert_eq(err, SAC_ECONFIG);
}
