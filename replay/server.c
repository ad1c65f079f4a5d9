/* The replay shard server loop (see server.h). One thread owns the shard and both
 * sockets; the only shared state is the stop/snapshot flags and the published stats. */
#include "replay/server.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/durable.h"
#include "common/error.h"
#include "common/log.h"
#include "common/snapshot.h"
#include "common/wire_view.h"
#include "replay/wal.h"

#define ID_MAX 256
/* A sample peer silent this long may give its place to a new one. Longer than the
 * ZMTP heartbeat timeout below (2 + 6 s): by then a peer that does not read has been
 * disconnected by ZeroMQ (its queued replies freed), and one that reads has drained. */
#define PEER_IDLE_NS 10000000000ull

typedef struct {
  unsigned char id[ID_MAX];
  size_t id_len;
  uint64_t seen_ns;
} peer_t;

typedef struct {
  unsigned char id[ID_MAX];
  size_t id_len;
  uint64_t request_id;
  uint32_t batch;
  uint32_t batches; /* batches of `batch` rows in the reply (1 or more) */
  float beta;
  uint32_t precision; /* SAC_WIRE_F32 or SAC_WIRE_F16 (obs/action/next_obs in the reply) */
  uint64_t deadline_ns, enqueued_ns;
} pending_t;

/* An acknowledgement waiting for the fsync that covers its batch. */
typedef struct {
  unsigned char id[ID_MAX];
  size_t id_len;
  uint32_t actor;
  uint64_t seq;
  uint64_t need; /* sent once an fsync covered this many appended records */
  sac_replay_insert_result_t r;
} wal_ack_t;

#define WAL_MAX_WAITING 4096 /* acks held at once; a full queue forces the fsync */
#define WAL_OK 0
#define WAL_WRITES_FAIL 1
#define WAL_FSYNC_FAILED 2
/* Idle this long after an fsync completed, the shard writes (and syncs) a SYNC record
 * saying so: until then, damage to that last group would read as a power-cut tail
 * (replay/wal.h). */
#define CLOSE_NS 20000000ull
/* Appends that failed are tried again after this, doubling to WAL_RETRY_MAX_NS. */
#define WAL_RETRY_MIN_NS 100000000ull
#define WAL_RETRY_MAX_NS 2000000000ull
/* A failed automatic snapshot is tried again after 1 s, doubling to a minute. */
#define SNAP_RETRY_MIN_NS 1000000000ull
#define SNAP_RETRY_MAX_NS 60000000000ull

typedef struct {
  unsigned char id[ID_MAX];
  size_t id_len;
  size_t off, len, span; /* span: bytes this entry takes in held_buf (with a wrap gap) */
  uint32_t actor;
  uint64_t session, seq;
  uint64_t since_ns;
} held_t;

struct sac_replay_server {
  sac_replay_server_config_t cfg;
  sac_net_ctx_t *ctx;
  void *ins, *smp;
  char ins_ep[256], smp_ep[256];
  sac_replay_shard_t *shard;
  sac_wire_decoder_t *ins_dec, *smp_dec;
  sac_wire_limits_t ins_lim, smp_lim;
  unsigned char *ins_buf, *smp_buf, *out_buf;
  size_t buf_cap, out_cap;
  /* Held inserts (rate limited), in arrival order: validated raw messages in a byte
   * ring (held_buf), one held_t each in a ring of max_held_batches. */
  held_t *held;
  uint32_t held_head, held_count;
  unsigned char *held_buf;
  size_t held_cap, held_rd, held_wr, held_used; /* bytes; held_used counts wrap gaps */
  double batch_rows_avg;                        /* moving average of stored batch sizes */
  /* queued sample requests */
  pending_t *pend;
  uint32_t pend_head, pend_count;
  uint64_t next_request_log_ns;
  /* sample peers being served (max_sample_peers): bounds the replies queued in total */
  peer_t *peers;
  uint32_t n_peers;
  /* the last sample request's arrival (0: none yet); limiter_idle: none came for
   * limiter_idle_ms since, and the rate limiter does not hold inserts back */
  uint64_t last_sample_ns;
  int limiter_idle;
  /* write-ahead log (NULL: durability is not wal): acks wait in wacks for the fsync */
  sac_replay_wal_t *wal;
  wal_ack_t *wacks; /* FIFO [wack_head, wack_head + n_wacks) */
  uint32_t wack_head, n_wacks;
  uint64_t wal_oldest_ns;           /* append time of the oldest record no fsync was asked for; 0: none */
  uint64_t wal_appended, wal_asked; /* records appended; records an fsync was asked to cover */
  uint64_t wal_synced;              /* records covered by a finished fsync (as last seen) */
  /* What the log's SYNC records say (replay/wal.h), in bytes of the log: data_end is the
   * end of the last batch or forget record appended; synced_data the data end a
   * completed fsync covered; claimed what the last SYNC record appended claims. */
  uint64_t wal_data_end, wal_synced_data, wal_claimed;
  uint64_t wal_synced_ns; /* when synced_data last grew (a closing SYNC record is due CLOSE_NS later) */
  /* WAL_OK, WAL_WRITES_FAIL (appends fail: a full disk; inserts are answered "not
   * durable" and retried from wal_retry_ns on) or WAL_FSYNC_FAILED (fail-stop for
   * inserts until a restart); why: the error, for /healthz and the replies */
  int wal_state;
  char wal_why[200];
  uint64_t wal_retry_ns, wal_retry_step_ns;
  uint32_t *forget; /* actors forgotten whose FORGET record is not in the log yet */
  uint32_t n_forget, forget_cap;
  uint64_t snap_retry_ns, snap_backoff_ns; /* automatic snapshots after a failed one: not before */
  uint64_t wal_alloc_before;               /* ring slots the snapshot restored, before the log's replay */
  int lock_fd;                             /* the exclusive lock on <snapshot_path>.lock (-1: none held) */
  int wal_lock_fd;                         /* the flock on the log file itself (-1: none held) */
  /* The fsync thread: syncs up to sync_target, publishes sync_done; under sync_mu. It
   * lets the server go on reading and appending while an fsync runs (pipelined group
   * commit). */
  pthread_t sync_thread;
  int sync_inited, sync_running, sync_quit, sync_err, sync_errno;
  uint64_t sync_target, sync_done, sync_count;
  double sync_seconds; /* time spent in fsyncs of the log (sync_count of them) */
  uint64_t sync_target_data, sync_done_data; /* the data end of sync_target / sync_done */
  pthread_mutex_t sync_mu;
  pthread_cond_t sync_cv;
  /* provenance requests from other threads (sac_replay_server_provenance), under mu */
  atomic_int prov_req;
  int serving;
  uint64_t prov_asked, prov_served;
  char *prov_text;
  size_t prov_len;
  pthread_cond_t prov_cv;
  /* episodes that ended in the batches this process stored (ShardInfo: the learner's
   * count of the actors' episodes in remote mode), and their returns' sum */
  uint64_t episodes_total;
  double episode_return_sum;
  /* what the start restored, for its one line (restore_summary) */
  int snapshot_found;
  uint64_t snapshot_rows, wal_rows_replayed;
  char tail_why[128]; /* why the log's tail was cut off, if it was */
  /* the periodic progress line (log_interval_s) */
  uint64_t next_progress_ns, prog_ns, prog_inserted, prog_sampled;
  /* control */
  atomic_int stop, snap_req, running;
  sac_http_t *beat; /* sac_replay_server_set_beat: told each time the loop turns (/livez) */
  pthread_t thread;
  int thread_rc;
  /* stats: private while serving, published under the mutex */
  sac_replay_stats_t st;
  sac_replay_stats_t pub;
  pthread_mutex_t mu;
};

void sac_replay_server_config_default(sac_replay_server_config_t *c) {
  memset(c, 0, sizeof *c);
  sac_replay_shard_config_default(&c->shard);
  snprintf(c->insert_endpoint, sizeof c->insert_endpoint, "tcp://*:5560");
  snprintf(c->sample_endpoint, sizeof c->sample_endpoint, "tcp://*:5561");
  c->max_msg_bytes = 4u << 20;
  c->insert_credit = 16;
  c->max_pending_samples = 1024;
  c->max_sample_timeout_ms = 10000;
  c->max_env_id = 1u << 20;
  c->snapshot_interval_s = 60.0;
  c->max_held_batches = 4096;
  c->max_held_bytes = 64u << 20;
  c->limiter_idle_ms = 0;
  c->max_abs_value = 1e6;
  c->max_reply_queue_bytes = 16u << 20;
  c->max_sample_peers = 16;
  c->durability = SAC_REPLAY_DURABILITY_WAL;
  c->wal_sync_ms = 2;
  c->wal_max_bytes = 1ull << 30;
}

int sac_replay_durability_parse(const char *str, sac_replay_durability_t *out) {
  if (!strcmp(str, "wal"))
    *out = SAC_REPLAY_DURABILITY_WAL;
  else if (!strcmp(str, "snapshot"))
    *out = SAC_REPLAY_DURABILITY_SNAPSHOT;
  else if (!strcmp(str, "none"))
    *out = SAC_REPLAY_DURABILITY_NONE;
  else
    return SAC_EINVAL;
  return 0;
}

const char *sac_replay_durability_name(sac_replay_durability_t d) {
  return d == SAC_REPLAY_DURABILITY_WAL ? "wal" : d == SAC_REPLAY_DURABILITY_SNAPSHOT ? "snapshot" : "none";
}

size_t sac_replay_server_largest_reply(const sac_replay_server_config_t *cfg) {
  static const uint64_t dummy[1];
  sac_wire_msg_t m = {.type = SAC_WIRE_SAMPLE_BATCH};
  /* sizes only: the encoder's size pass reads lengths, never the (dummy) data */
  m.u.sample_batch = (sac_wire_sample_batch_t){.request_id = UINT64_MAX,
                                               .n = cfg->shard.max_sample_batch,
                                               .obs_dim = cfg->shard.obs_dim,
                                               .act_dim = cfg->shard.act_dim,
                                               .shard_id = SAC_WIRE_MAX_SHARDS - 1,
                                               .obs = (const float *)dummy,
                                               .action = (const float *)dummy,
                                               .reward = (const float *)dummy,
                                               .terminated = (const float *)dummy,
                                               .next_obs = (const float *)dummy,
                                               .indices = dummy,
                                               .weights = (const float *)dummy,
                                               .error = ""};
  return sac_wire_encoded_size(&m);
}

int sac_replay_server_healthy(sac_replay_server_t *s, char *why, size_t cap) {
  sac_replay_stats_t st;
  sac_replay_server_stats(s, &st);
  if (st.wal_state == WAL_FSYNC_FAILED) {
    snprintf(
        why, cap,
        "inserts refused: %s; no insert is acknowledged before the shard is restarted (samples are served)",
        st.wal_why);
    return 0;
  }
  if (st.wal_state == WAL_WRITES_FAIL) {
    snprintf(why, cap,
             "inserts refused: %s; they are answered not durable until the disk takes writes again (samples "
             "are served)",
             st.wal_why);
    return 0;
  }
  if (st.snapshot_failing) {
    snprintf(why, cap, "snapshots to %s are failing (%llu failures so far; see the log)",
             s->cfg.snapshot_path, (unsigned long long)st.snapshot_failures_total);
    return 0;
  }
  snprintf(why, cap, "ok");
  return 1;
}

void sac_replay_server_set_beat(sac_replay_server_t *s, sac_http_t *http) { s->beat = http; }

const char *sac_replay_server_insert_endpoint(const sac_replay_server_t *s) { return s->ins_ep; }
const char *sac_replay_server_sample_endpoint(const sac_replay_server_t *s) { return s->smp_ep; }

/* ------------------------------------------------------------------ snapshot at start */

static int durability_setup(sac_replay_server_t *s);
static void sync_thread_stop(sac_replay_server_t *s);

static int restore_wal(sac_replay_server_t *s);
static int restore_snapshot(sac_replay_server_t *s, const char *path);
static int lock_files(sac_replay_server_t *s, const char *path);
static int lock_wal(sac_replay_server_t *s);
static int sync_restored(const char *path);

/* One line for what the start restored, and from where: the snapshot's transitions and
 * the log's batches (and rows) replayed on top of it, with a torn tail cut off; or that
 * there was nothing to restore. */
static void restore_summary(sac_replay_server_t *s, const char *path) {
  char snap[1200], wal[1600] = "";
  if (s->snapshot_found)
    snprintf(snap, sizeof snap, "%llu transitions from the snapshot %s", (unsigned long long)s->snapshot_rows,
             path);
  else
    snprintf(snap, sizeof snap, "no snapshot yet at %s", path);
  if (s->wal) {
    int n = snprintf(wal, sizeof wal, "%llu batches (%llu rows) from the write-ahead log %s",
                     (unsigned long long)s->st.wal_replayed_records, (unsigned long long)s->wal_rows_replayed,
                     s->cfg.wal_path);
    if (s->st.wal_dropped_bytes && n > 0 && (size_t)n < sizeof wal)
      snprintf(wal + n, sizeof wal - (size_t)n, " (its torn tail of %llu bytes cut off: %s)",
               (unsigned long long)s->st.wal_dropped_bytes, s->tail_why);
  }
  if (!s->snapshot_found && (!s->wal || (s->st.wal_replayed_records == 0 && s->st.wal_dropped_bytes == 0)))
    SAC_INFO("replay", "starting empty: %s%s%s", snap, s->wal ? ", nothing in the write-ahead log " : "",
             s->wal ? s->cfg.wal_path : "");
  else if (!s->snapshot_found)
    SAC_INFO("replay", "restored %s; %s", wal, snap);
  else if (s->wal)
    SAC_INFO("replay", "restored %s and %s", snap, wal);
  else
    SAC_INFO("replay", "restored %s", snap);
}

static int restore(sac_replay_server_t *s) {
  const char *path = s->cfg.snapshot_path;
  if (!path[0])
    return 0;
  /* the locks first: nothing of the shard's files is removed, moved or opened for writing
   * before this process owns all of them */
  int rc = lock_files(s, path);
  if (rc)
    return rc;
  /* a path that can never hold a snapshot, or a folder that takes no files, fails the
   * start rather than every snapshot (and the stop) later */
  rc = sac_snap_prepare(path, &s->st.stale_temporaries_removed);
  if (rc) {
    SAC_ERROR("replay", "refusing to start: snapshots cannot be written to %s (%s)", path, sac_strerror(rc));
    return SAC_ECONFIG;
  }
  rc = restore_snapshot(s, path);
  if (rc == 0)
    rc = restore_wal(s);
  if (rc == 0)
    restore_summary(s, path);
  return rc;
}

/* path as the kernel resolves it (symlinks followed), or, for a file not there yet, its
 * resolved folder and its name: two names of one snapshot lead to one lock file. */
static void canonical_path(const char *path, char *out, size_t cap) {
  char *r = realpath(path, NULL);
  if (!r) {
    char d[1024], b[1024];
    snprintf(d, sizeof d, "%s", path);
    snprintf(b, sizeof b, "%s", path);
    char *rd = realpath(dirname(d), NULL);
    if (rd && snprintf(out, cap, "%s/%s", rd, basename(b)) < (int)cap) {
      free(rd);
      return;
    }
    free(rd);
    snprintf(out, cap, "%s", path);
    return;
  }
  snprintf(out, cap, "%s", r);
  free(r);
}

/* One shard process per file: a second one (a supervisor restarting while the old
 * process lives, two containers on one volume, two shards given one --wal_path) would
 * delete the first's snapshot in progress or interleave its records with the first's.
 * Two locks, held until the server is destroyed (the kernel drops them when the process
 * dies): <snapshot>.lock beside the snapshot's resolved path (its temporaries and moved-
 * aside copies are named after it), and an flock on the log file itself, so that no two
 * shards write one log whatever paths they were given (a symlink, a hard link, another
 * snapshot_path with the same wal_path). */
static int lock_files(sac_replay_server_t *s, const char *path) {
  char canon[1024], lock[1100], holder[32];
  canonical_path(path, canon, sizeof canon);
  snprintf(lock, sizeof lock, "%s.lock", canon);
  int fd = -1, rc = sac_durable_lock(lock, &fd, holder, sizeof holder);
  if (rc == SAC_EAGAIN) {
    SAC_ERROR("replay",
              "refusing to start: %s is locked by process %s, another shard using the snapshot %s; stop it "
              "first",
              lock, holder[0] ? holder : "(pid unknown)", path);
    return SAC_ECONFIG;
  }
  if (rc) {
    const int e = errno;
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", canon);
    char *slash = strrchr(dir, '/');
    if (slash)
      *(slash == dir ? slash + 1 : slash) = '\0';
    else
      snprintf(dir, sizeof dir, ".");
    SAC_ERROR("replay", "refusing to start: cannot create files in %s, the folder of snapshot %s (its lock %s): %s",
              dir, path, lock, strerror(e));
    return SAC_ECONFIG;
  }
  s->lock_fd = fd;
  return s->cfg.wal_path[0] ? lock_wal(s) : 0;
}

/* The flock on the log file itself (created empty when missing: sac_replay_wal_open
 * writes its header). */
static int lock_wal(sac_replay_server_t *s) {
  char holder[32];
  int fd = -1, rc = sac_durable_lock_file(s->cfg.wal_path, 1, &fd, holder, sizeof holder);
  if (rc == SAC_EAGAIN) {
    SAC_ERROR("replay",
              "refusing to start: the write-ahead log %s is locked by process %s, another shard writing it "
              "(whatever snapshot path it was given); give each shard its own wal_path",
              s->cfg.wal_path, holder[0] ? holder : "(pid unknown)");
    return SAC_ECONFIG;
  }
  if (rc) {
    SAC_ERROR("replay", "refusing to start: cannot open and lock the write-ahead log %s: %s", s->cfg.wal_path,
              strerror(errno));
    return SAC_ECONFIG;
  }
  if (s->wal_lock_fd >= 0)
    close(s->wal_lock_fd);
  s->wal_lock_fd = fd;
  return 0;
}

/* The loaded snapshot may exist only in the page cache (its writer died before the
 * directory fsync, or the kernel has not written it back): it is made durable before
 * anything is acknowledged on top of it. */
static int sync_restored(const char *path) {
  int fd = sac_durable_fault("open", path) ? -1 : open(path, O_RDONLY | O_CLOEXEC);
  int rc = fd < 0 || sac_durable_fault("fsync", path) || fsync(fd) != 0 ? SAC_EIO : 0;
  if (fd >= 0)
    close(fd);
  if (!rc)
    rc = sac_durable_sync_dir(path);
  if (rc)
    SAC_ERROR("replay", "refusing to start: cannot sync the restored snapshot %s: %s", path, strerror(errno));
  return rc;
}

static int restore_snapshot(sac_replay_server_t *s, const char *path) {
  int rc = sac_replay_shard_load(s->shard, path);
  if (rc == 0) {
    sac_replay_shard_stats_t ss;
    sac_replay_shard_stats(s->shard, &ss);
    s->st.restored_transitions = ss.size;
    s->st.snapshot_inserted_total = ss.inserted_rows_total;
    s->snapshot_found = 1;
    s->snapshot_rows = ss.size;
    return sync_restored(path) ? SAC_ECONFIG : 0;
  }
  if (rc == SAC_ENOTFOUND)
    return 0; /* said in restore_summary's line, with what the log held */
  if (rc == SAC_EINVAL || rc == SAC_ESTATE) {
    /* not a regular file, or another shard's good snapshot: nothing to move aside (a
     * directory or another shard's data must not be renamed), whatever the flags say */
    SAC_ERROR("replay", "refusing to start: %s cannot be this shard's snapshot (%s)", path,
              rc == SAC_EINVAL ? "not a regular file"
                               : "it belongs to another shard; adopt_snapshot=1 takes it");
    return SAC_ECONFIG;
  }
  if (!s->cfg.start_empty_on_bad_snapshot) {
    SAC_ERROR("replay",
              "refusing to start: the snapshot %s cannot be used (%s). Fix or remove it, or start with "
              "start_empty_on_bad_snapshot=1 to move it aside and start empty",
              path, sac_strerror(rc));
    return SAC_ECONFIG;
  }
  char aside[1200];
  snprintf(aside, sizeof aside, "%s.bad-%lld", path, (long long)time(NULL));
  if (sac_durable_rename(path, aside) != 0) {
    SAC_ERROR("replay", "refusing to start: could not move the unusable snapshot %s aside to %s: %s", path,
              aside, strerror(errno));
    return SAC_ECONFIG;
  }
  SAC_WARN("replay", "snapshot %s unusable (%s): moved to %s, starting empty as asked", path,
           sac_strerror(rc), aside);
  return 0;
}

/* ------------------------------------------------------------------ create / destroy */

/* 1 when a tcp:// endpoint ends in ":*" or ":<1..65535>" (ZeroMQ would bind a random
 * port for 99999); other transports are ZeroMQ's to check. */
static int endpoint_port_ok(const char *ep) {
  if (strncmp(ep, "tcp://", 6) != 0)
    return 1;
  const char *c = strrchr(ep + 6, ':');
  if (!c || !c[1])
    return 0;
  if (strcmp(c + 1, "*") == 0)
    return 1;
  char *end = NULL;
  long p = strtol(c + 1, &end, 10);
  return *end == '\0' && c[1] >= '0' && c[1] <= '9' && p >= 1 && p <= 65535;
}

/* Logs the first broken constraint (only that one) and returns SAC_ECONFIG, or 0. */
static int check_config(const sac_replay_server_config_t *cfg) {
  const char *bad = NULL;
  if (!endpoint_port_ok(cfg->insert_endpoint) || !endpoint_port_ok(cfg->sample_endpoint)) {
    SAC_ERROR("replay",
              "invalid server configuration: insert_endpoint \"%s\" / sample_endpoint \"%s\": a tcp:// "
              "endpoint needs a port 1..65535 or * (a free port)",
              cfg->insert_endpoint, cfg->sample_endpoint);
    return SAC_ECONFIG;
  }
  if (cfg->insert_credit == 0 || cfg->insert_credit > 64)
    bad = "insert_credit must be 1..64";
  else if (cfg->max_pending_samples == 0)
    bad = "max_pending_samples must be > 0";
  else if (cfg->max_msg_bytes < 4096 || cfg->max_msg_bytes > (1u << 30))
    bad = "max_msg_bytes must be 4 KiB..1 GiB";
  else if (cfg->max_held_batches == 0)
    bad = "max_held_batches must be > 0";
  else if (cfg->max_held_bytes < cfg->max_msg_bytes)
    bad = "max_held_bytes must be >= max_msg_bytes";
  else if (!(cfg->max_abs_value >= 0.0 && cfg->max_abs_value <= 3e38))
    bad = "max_abs_value must be 0 (finite only) or up to 3e38";
  else if (cfg->max_sample_peers == 0)
    bad = "max_sample_peers must be > 0";
  if (bad) {
    SAC_ERROR("replay", "invalid server configuration: %s", bad);
    return SAC_ECONFIG;
  }
  size_t largest = sac_replay_server_largest_reply(cfg);
  if (largest == 0 || largest > cfg->max_msg_bytes) {
    SAC_ERROR("replay",
              "invalid server configuration: a sample of max_sample_batch=%u rows (obs %u, act %u) takes %zu "
              "bytes, more than max_msg_bytes=%zu; raise max_msg_bytes or lower max_sample_batch",
              cfg->shard.max_sample_batch, cfg->shard.obs_dim, cfg->shard.act_dim, largest,
              cfg->max_msg_bytes);
    return SAC_ECONFIG;
  }
  return 0;
}

sac_replay_server_t *sac_replay_server_new(const sac_replay_server_config_t *cfg, sac_net_ctx_t *ctx,
                                           int *err) {
  int dummy;
  if (!err)
    err = &dummy;
  *err = SAC_ECONFIG;
  if (check_config(cfg) != 0)
    return NULL;
  sac_replay_server_t *s = calloc(1, sizeof *s);
  if (!s) {
    *err = SAC_ENOMEM;
    return NULL;
  }
  s->cfg = *cfg;
  s->lock_fd = -1;
  s->wal_lock_fd = -1;
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->prov_cv, NULL);
  if (durability_setup(s) != 0)
    goto fail;
  int rc = 0;
  s->shard = sac_replay_shard_new(&cfg->shard, &rc);
  if (!s->shard) {
    *err = rc == SAC_ENOMEM ? SAC_ENOMEM : SAC_ECONFIG;
    goto fail;
  }
  s->buf_cap = cfg->max_msg_bytes + 1; /* one more byte tells an oversized message */
  s->out_cap = cfg->max_msg_bytes;
  s->ins_buf = malloc(s->buf_cap);
  s->smp_buf = malloc(s->buf_cap);
  s->out_buf = malloc(s->out_cap);
  s->pend = calloc(cfg->max_pending_samples, sizeof *s->pend);
  s->peers = calloc(cfg->max_sample_peers, sizeof *s->peers);
  /* virtual until used: the pages of held_buf are touched only while inserts are held
   * (MAP_NORESERVE: the whole documented range maps, also where malloc refused 64 GiB) */
  s->held_cap = cfg->max_held_bytes;
  s->held = calloc(cfg->max_held_batches, sizeof *s->held);
  s->held_buf =
      mmap(NULL, s->held_cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (s->held_buf == MAP_FAILED)
    s->held_buf = NULL;
  s->ins_dec = sac_wire_decoder_new(cfg->max_msg_bytes);
  s->smp_dec = sac_wire_decoder_new(cfg->max_msg_bytes);
  if (!s->ins_buf || !s->smp_buf || !s->out_buf || !s->pend || !s->ins_dec || !s->smp_dec || !s->held ||
      !s->held_buf || !s->peers) {
    SAC_ERROR("replay",
              "out of memory allocating the server's buffers (max_msg_bytes %zu, max_held_bytes %zu, "
              "max_held_batches %u, max_pending_samples %u)",
              cfg->max_msg_bytes, cfg->max_held_bytes, cfg->max_held_batches, cfg->max_pending_samples);
    *err = SAC_ENOMEM;
    goto fail;
  }
  s->ins_lim = (sac_wire_limits_t){
      .max_msg_bytes = cfg->max_msg_bytes,
      .obs_dim = cfg->shard.obs_dim,
      .act_dim = cfg->shard.act_dim,
      .max_rows = cfg->shard.max_batch_rows,
      .max_env_id = cfg->max_env_id,
      .accept_mask = SAC_WIRE_ACCEPT(SAC_WIRE_TRANSITIONS) | SAC_WIRE_ACCEPT(SAC_WIRE_HELLO) |
                     SAC_WIRE_ACCEPT(SAC_WIRE_HEARTBEAT) | SAC_WIRE_ACCEPT(SAC_WIRE_INFO_REQUEST),
      .max_abs_value = (float)cfg->max_abs_value};
  s->smp_lim = (sac_wire_limits_t){
      .max_msg_bytes = cfg->max_msg_bytes,
      .obs_dim = cfg->shard.obs_dim,
      .act_dim = cfg->shard.act_dim,
      .max_rows = 1u << 20,
      .max_env_id = cfg->max_env_id,
      .accept_mask = SAC_WIRE_ACCEPT(SAC_WIRE_SAMPLE_REQUEST) | SAC_WIRE_ACCEPT(SAC_WIRE_PRIORITY_UPDATE) |
                     SAC_WIRE_ACCEPT(SAC_WIRE_HELLO) | SAC_WIRE_ACCEPT(SAC_WIRE_HEARTBEAT) |
                     SAC_WIRE_ACCEPT(SAC_WIRE_INFO_REQUEST)};
  rc = restore(s);
  if (rc) {
    *err = rc;
    goto fail;
  }
  s->ctx = ctx ? sac_net_ctx_ref(ctx) : sac_net_ctx_new(1);
  if (!s->ctx) {
    *err = SAC_ENET;
    goto fail;
  }
  sac_net_opts_t o;
  sac_net_opts_default(&o);
  /* Messages between max_msg_bytes and twice that reach the server and are counted as
   * too_big; beyond that ZeroMQ drops the connection before anything is allocated. */
  o.max_msg_bytes = (int64_t)cfg->max_msg_bytes * 2;
  o.router_mandatory = 1;
  o.rcvhwm = 256;
  o.sndhwm = 4096;
  o.heartbeat_ivl_ms = 2000;
  o.heartbeat_timeout_ms = 6000;
  s->ins = sac_net_socket(s->ctx, SAC_NET_ROUTER, &o);
  /* ZMQ_SNDHWM counts messages: sized from the largest reply, it bounds the bytes queued
   * for a connection that does not read (sends beyond it fail at once and are counted) */
  size_t largest = sac_replay_server_largest_reply(cfg);
  size_t hwm = cfg->max_reply_queue_bytes / largest;
  o.sndhwm = hwm < 1 ? 1 : hwm > 4096 ? 4096 : (int)hwm;
  s->smp = sac_net_socket(s->ctx, SAC_NET_ROUTER, &o);
  *err = SAC_ENET;
  if (!s->ins || !s->smp)
    goto fail;
  if (sac_net_bind(s->ins, cfg->insert_endpoint, s->ins_ep, sizeof s->ins_ep) != 0 ||
      sac_net_bind(s->smp, cfg->sample_endpoint, s->smp_ep, sizeof s->smp_ep) != 0)
    goto fail;
  sac_replay_shard_stats(s->shard, &s->st.shard);
  s->pub = s->st;
  SAC_INFO(
      "replay",
      "shard %u serving inserts on %s and samples on %s (capacity %llu, obs %u, act %u, %s%s, durability %s, "
      "incarnation %llu)",
      cfg->shard.shard_id, s->ins_ep, s->smp_ep, (unsigned long long)cfg->shard.capacity, cfg->shard.obs_dim,
      cfg->shard.act_dim, cfg->shard.sampler == SAC_REPLAY_PRIORITIZED ? "prioritized" : "uniform",
      cfg->shard.obs_f16 ? ", fp16 obs" : "",
      s->wal                    ? "wal"
      : s->cfg.snapshot_path[0] ? "snapshot"
                                : "none",
      (unsigned long long)s->st.incarnation);
  *err = 0;
  return s;
fail:
  sac_replay_server_destroy(&s);
  return NULL;
}

void sac_replay_server_destroy(sac_replay_server_t **sp) {
  if (!sp || !*sp)
    return;
  sac_replay_server_t *s = *sp;
  if (atomic_load(&s->running)) {
    sac_replay_server_stop(s);
    sac_replay_server_join(s);
  }
  sac_net_close(&s->ins);
  sac_net_close(&s->smp);
  sac_net_ctx_destroy(&s->ctx);
  sac_replay_shard_destroy(&s->shard);
  sac_wire_decoder_destroy(&s->ins_dec);
  sac_wire_decoder_destroy(&s->smp_dec);
  free(s->ins_buf);
  free(s->smp_buf);
  free(s->out_buf);
  free(s->pend);
  free(s->peers);
  free(s->held);
  if (s->held_buf)
    munmap(s->held_buf, s->held_cap);
  sync_thread_stop(s);
  sac_replay_wal_close(&s->wal);
  if (s->lock_fd >= 0)
    close(s->lock_fd);
  if (s->wal_lock_fd >= 0)
    close(s->wal_lock_fd);
  free(s->wacks);
  free(s->forget);
  free(s->prov_text);
  pthread_cond_destroy(&s->prov_cv);
  pthread_mutex_destroy(&s->mu);
  free(s);
  *sp = NULL;
}

/* ------------------------------------------------------------------ replies */

/* Starts a reply: the routing frame. Fails (counted) when the peer is gone or its
 * queue is full (it does not read): nothing more is sent to it then. */
static int reply_begin(sac_replay_server_t *s, void *sock, const unsigned char *id, size_t id_len) {
  if (sac_net_send(sock, id, id_len, SAC_NET_SNDMORE | SAC_NET_DONTWAIT) != 0) {
    s->st.replies_dropped_total++;
    return -1;
  }
  return 0;
}

/* Ends a reply begun with reply_begin: the message. One that does not fit
 * max_msg_bytes (or cannot be encoded) is answered with an error of its type instead,
 * counted and logged (rate-limited): the peer always gets an answer. */
static void reply_end(sac_replay_server_t *s, void *sock, const sac_wire_msg_t *m) {
  size_t len = 0;
  int rc = sac_wire_encode(m, s->out_buf, s->out_cap, &len);
  if (rc) {
    s->st.replies_unencodable_total++;
    SAC_ERROR_EVERY(10.0, "replay", "cannot encode a reply of type %d (%s): answering with an error",
                    (int)m->type, sac_strerror(rc));
    sac_wire_msg_t e = *m;
    const char *why = "reply larger than max_msg_bytes: ask for fewer rows";
    if (e.type == SAC_WIRE_SAMPLE_BATCH)
      e.u.sample_batch = (sac_wire_sample_batch_t){.request_id = m->u.sample_batch.request_id,
                                                   .obs_dim = m->u.sample_batch.obs_dim,
                                                   .act_dim = m->u.sample_batch.act_dim,
                                                   .shard_id = m->u.sample_batch.shard_id,
                                                   .error = why};
    else if (e.type == SAC_WIRE_ACK)
      e.u.ack.error = why;
    if (sac_wire_encode(&e, s->out_buf, s->out_cap, &len) != 0)
      len = 0; /* cannot happen for these small messages; an empty frame ends the reply */
  }
  if (sac_net_send(sock, s->out_buf, len, SAC_NET_DONTWAIT) != 0)
    s->st.replies_dropped_total++;
}

static void reply(sac_replay_server_t *s, void *sock, const unsigned char *id, size_t id_len,
                  const sac_wire_msg_t *m) {
  if (reply_begin(s, sock, id, id_len) == 0)
    reply_end(s, sock, m);
}

/* actor: whose batch this answers (the credit is granted to it); UINT32_MAX when the
 * message did not decode (credit 1, not recorded). */
/* The acked_seq an error reply (reject, busy, a failed insert) may carry: the client
 * takes every seq up to it as stored, so it must be durable. While any appended record
 * waits for its fsync the shard cannot tell this actor's durable mark from its stored
 * one: the reply claims nothing (0); the held acks carry the marks once synced. */
static uint64_t durable_acked(const sac_replay_server_t *s, const sac_replay_insert_result_t *r) {
  if (!r)
    return 0;
  if (s->wal && s->cfg.wal_sync_ms >= 0 &&
      (s->n_wacks || s->wal_synced < s->wal_appended || s->wal_state == WAL_FSYNC_FAILED))
    return 0;
  return r->acked_seq;
}

static void send_ack(sac_replay_server_t *s, const unsigned char *id, size_t id_len, uint32_t actor,
                     uint64_t seq, const sac_replay_insert_result_t *r, const char *error) {
  sac_wire_msg_t m = {.type = SAC_WIRE_ACK};
  m.u.ack = (sac_wire_ack_t){.acked_seq = error ? durable_acked(s, r)
                                          : r   ? r->acked_seq
                                                : 0,
                             .seq = seq,
                             .credit = actor != UINT32_MAX
                                           ? sac_replay_shard_credit(s->shard, actor, s->batch_rows_avg,
                                                                     s->cfg.insert_credit, s->held_count > 0)
                                           : 1u,
                             .stored = r ? r->stored : 0,
                             .shard_id = s->cfg.shard.shard_id,
                             .duplicate = r && r->kind == SAC_REPLAY_SEQ_DUPLICATE,
                             .error = error ? error : ""};
  reply(s, s->ins, id, id_len, &m);
}

static void send_info(sac_replay_server_t *s, void *sock, const unsigned char *id, size_t id_len) {
  sac_replay_shard_stats_t ss;
  sac_replay_shard_stats(s->shard, &ss);
  uint64_t rejected = 0;
  for (int i = 1; i < SAC_WIRE_R_COUNT; i++)
    rejected += s->st.rejected_total[i];
  sac_wire_msg_t m = {.type = SAC_WIRE_SHARD_INFO};
  m.u.shard_info = (sac_wire_shard_info_t){.shard_id = s->cfg.shard.shard_id,
                                           .size = ss.size,
                                           .capacity = ss.capacity,
                                           .inserted_total = ss.inserted_rows_total,
                                           .sampled_total = ss.sampled_rows_total,
                                           .obs_dim = s->cfg.shard.obs_dim,
                                           .act_dim = s->cfg.shard.act_dim,
                                           .can_sample = ss.can_sample,
                                           .snapshot_inserted_total = s->st.snapshot_inserted_total,
                                           .snapshots_total = s->st.snapshots_total,
                                           .bytes_per_transition = ss.bytes_per_transition,
                                           .rejected_total = rejected,
                                           .duplicates_total = ss.duplicate_batches_total,
                                           .episodes_total = s->episodes_total,
                                           .episode_return_sum = s->episode_return_sum,
                                           .incarnation = s->st.incarnation,
                                           .min_size = ss.limiter_min_size,
                                           .actors = sac_replay_shard_active_actors(s->shard, 10.0)};
  s->st.info_requests_total++;
  reply(s, sock, id, id_len, &m);
}

static void count_reject(sac_replay_server_t *s, sac_wire_reason_t why, const char *where,
                         const unsigned char *id, size_t id_len) {
  if ((unsigned)why >= SAC_WIRE_R_COUNT || why == SAC_WIRE_R_NONE)
    why = SAC_WIRE_R_MALFORMED;
  uint64_t n = ++s->st.rejected_total[why];
  if (n <= 10 || n % 1000 == 0) {
    char peer[2 * 8 + 1] = {0};
    for (size_t i = 0; i < id_len && i < 8; i++)
      snprintf(peer + 2 * i, 3, "%02x", id[i]);
    SAC_WARN("replay", "rejected a message on the %s endpoint from peer %s: %s (%s, %llu so far)", where,
             peer, sac_wire_reason_str(why), sac_wire_reason_name(why), (unsigned long long)n);
  }
}

/* ------------------------------------------------------------------ receiving */

/* Receives [identity][payload] from a ROUTER. Returns 1 with a message, 0 when there is
 * none, -1 when a malformed multipart was consumed (counted; the caller answers it:
 * the routing id is known). */
static int recv_routed(sac_replay_server_t *s, void *sock, unsigned char *id, size_t *id_len,
                       unsigned char *buf, size_t *len, const char *where) {
  int more = 0;
  int rc = sac_net_recv(sock, id, ID_MAX, SAC_NET_DONTWAIT, id_len, &more);
  if (rc != 0)
    return 0;
  s->st.messages_total++;
  if (*id_len > ID_MAX)
    *id_len = ID_MAX;
  if (!more) {
    count_reject(s, SAC_WIRE_R_FRAMES, where, id, *id_len);
    return -1;
  }
  rc = sac_net_recv(sock, buf, s->buf_cap, 0, len, &more);
  if (rc != 0) {
    count_reject(s, SAC_WIRE_R_FRAMES, where, id, *id_len);
    return -1;
  }
  if (more) {
    sac_net_drain_frames(sock);
    count_reject(s, SAC_WIRE_R_FRAMES, where, id, *id_len);
    return -1;
  }
  return 1;
}

static int wal_log(sac_replay_server_t *s, const sac_wire_transitions_t *t, const unsigned char *msg,
                   size_t len);
static void wal_commit(sac_replay_server_t *s, int now_anyway);
static void wal_note_forget(sac_replay_server_t *s, const sac_replay_insert_result_t *r);
static void send_not_durable(sac_replay_server_t *s, const unsigned char *id, size_t id_len, uint32_t actor,
                             uint64_t seq);
static void ack_stored(sac_replay_server_t *s, const unsigned char *id, size_t id_len, uint32_t actor,
                       uint64_t seq, const sac_replay_insert_result_t *r);

/* The episodes that ended in a stored batch, for ShardInfo: each batch is stored by
 * one shard once (duplicates are not stored), so the learner's sum over its shards counts
 * every actor's episode once. */
static void count_episodes(sac_replay_server_t *s, const sac_wire_transitions_t *t) {
  for (uint32_t i = 0; i < t->n_episodes; i++) {
    s->episodes_total++;
    if (isfinite(t->episodes[i].episode_return))
      s->episode_return_sum += t->episodes[i].episode_return;
  }
}

/* msg/len: the batch's wire message, which the write-ahead log records. */
static void store_and_ack(sac_replay_server_t *s, const unsigned char *id, size_t id_len,
                          const sac_wire_transitions_t *t, const unsigned char *msg, size_t len) {
  sac_replay_insert_result_t r;
  if (wal_log(s, t, msg, len) != 0) {
    send_not_durable(s, id, id_len, t->actor_id, t->seq); /* kept by the actor, resent later */
    return;
  }
  int rc = sac_replay_shard_insert(s->shard, t, &r);
  if (rc) {
    count_reject(s, r.reason, "insert", id, id_len);
    send_ack(s, id, id_len, t->actor_id, t->seq, &r, sac_wire_reason_str(r.reason));
    return;
  }
  s->batch_rows_avg = s->batch_rows_avg > 0.0 ? 0.9 * s->batch_rows_avg + 0.1 * t->n : (double)t->n;
  if (r.kind == SAC_REPLAY_SEQ_NEW)
    count_episodes(s, t);
  ack_stored(s, id, id_len, t->actor_id, t->seq, &r);
}

/* ------------------------------------------------------------------ held inserts */

/* Room for len bytes at the write end of the byte ring: its offset, or SIZE_MAX. The
 * ring is used FIFO, so an entry that does not fit before the end starts at 0 and the
 * tail gap is counted in its span. */
static size_t held_alloc(sac_replay_server_t *s, size_t len, size_t *span) {
  if (s->held_count == 0)
    s->held_rd = s->held_wr = s->held_used = 0;
  if (s->held_count >= s->cfg.max_held_batches || len > s->held_cap)
    return SIZE_MAX;
  if (s->held_wr >= s->held_rd && s->held_used < s->held_cap) { /* free: [wr, cap) and [0, rd) */
    if (s->held_cap - s->held_wr >= len) {
      *span = len;
      return s->held_wr;
    }
    if (s->held_rd >= len) {
      *span = (s->held_cap - s->held_wr) + len;
      return 0;
    }
    return SIZE_MAX;
  }
  if (s->held_used < s->held_cap && s->held_rd - s->held_wr >= len) { /* free: [wr, rd) */
    *span = len;
    return s->held_wr;
  }
  return SIZE_MAX;
}

/* The held entry of (actor, session, seq), or NULL. The queue is bounded (max_held_batches),
 * and this runs only while something is held. */
static held_t *held_find(sac_replay_server_t *s, const sac_wire_transitions_t *t) {
  for (uint32_t i = 0; i < s->held_count; i++) {
    held_t *h = &s->held[(s->held_head + i) % s->cfg.max_held_batches];
    if (h->actor == t->actor_id && h->session == t->session && h->seq == t->seq)
      return h;
  }
  return NULL;
}

/* Holds a validated insert (raw bytes) at the back of the queue. 0, or SAC_EAGAIN when
 * the queue is full. */
static int held_push(sac_replay_server_t *s, const unsigned char *id, size_t id_len, const unsigned char *msg,
                     size_t len, const sac_wire_transitions_t *t) {
  size_t span = 0, off = held_alloc(s, len, &span);
  if (off == SIZE_MAX)
    return SAC_EAGAIN;
  held_t *h = &s->held[(s->held_head + s->held_count) % s->cfg.max_held_batches];
  memcpy(h->id, id, id_len);
  h->id_len = id_len;
  h->off = off, h->len = len, h->span = span;
  h->actor = t->actor_id, h->session = t->session, h->seq = t->seq;
  h->since_ns = sac_clock_ns();
  memcpy(s->held_buf + off, msg, len);
  s->held_wr = off + len;
  s->held_used += span;
  s->held_count++;
  s->st.insert_waits_total++;
  return 0;
}

/* 1 when a batch of n may be stored now: the rate limiter admits it, or it is idle (no
 * learner samples: nothing to pace). Admitted batches count in the limiter either way,
 * so a learner that comes back finds the ratio owed and samples before more inserts. */
static int can_insert(const sac_replay_server_t *s, uint32_t n) {
  return s->limiter_idle || sac_replay_shard_can_insert(s->shard, n);
}

/* Follows the sample requests' arrivals: idle once none came for limiter_idle_ms after
 * the first (before any, the learner has not started yet and the limiter applies),
 * paced again at the next one. Each change is logged. */
static void limiter_idle_update(sac_replay_server_t *s, uint64_t now, int sample_request) {
  if (sample_request) {
    s->last_sample_ns = now;
    if (s->limiter_idle) {
      s->limiter_idle = 0;
      SAC_INFO("replay", "sample requests again: the rate limiter paces inserts again");
    }
    return;
  }
  if (s->limiter_idle || !s->last_sample_ns || !s->cfg.limiter_idle_ms ||
      now - s->last_sample_ns < (uint64_t)s->cfg.limiter_idle_ms * 1000000ull)
    return;
  s->limiter_idle = 1;
  SAC_INFO("replay",
           "no sample request for %u ms: the rate limiter no longer holds inserts back (%u batch(es) held "
           "are stored) until the next one (limiter_idle_ms)",
           s->cfg.limiter_idle_ms, s->held_count);
}

/* Stores held batches, oldest first, while the rate limiter lets them in. */
static void release_held(sac_replay_server_t *s) {
  while (s->held_count) {
    held_t *h = &s->held[s->held_head];
    sac_wire_msg_t m;
    sac_wire_reason_t why;
    /* validated when it arrived; decoding again is what a held batch costs */
    int rc = sac_wire_decode(s->ins_dec, s->held_buf + h->off, h->len, &s->ins_lim, &m, &why);
    if (rc == 0 && !can_insert(s, m.u.transitions.n))
      return;
    uint64_t now = sac_clock_ns();
    s->st.insert_wait_seconds_total += (double)(now - h->since_ns) * 1e-9;
    s->held_head = (s->held_head + 1) % s->cfg.max_held_batches;
    s->held_count--;
    s->held_used -= h->span;
    s->held_rd = h->off + h->len;
    if (rc == 0)
      store_and_ack(s, h->id, h->id_len, &m.u.transitions, s->held_buf + h->off, h->len);
    else
      count_reject(s, why, "insert", h->id, h->id_len); /* cannot happen: it decoded before */
  }
}

/* Handles one message from the insert endpoint. The endpoint is always read, also
 * while the rate limiter holds inserts back: a batch that cannot be stored yet is held
 * (bounded; a duplicate of a held batch is dropped), so ZeroMQ's queues never fill and
 * its connections never stall (a stalled connection cannot answer heartbeats, and
 * libzmq 4.3 asserts when such a connection fails). Returns 0. */
static int handle_insert(sac_replay_server_t *s) {
  unsigned char id[ID_MAX];
  size_t id_len = 0, len = 0;
  int got = recv_routed(s, s->ins, id, &id_len, s->ins_buf, &len, "insert");
  if (got < 0)
    send_ack(s, id, id_len, UINT32_MAX, 0, NULL, sac_wire_reason_str(SAC_WIRE_R_FRAMES));
  if (got <= 0)
    return got < 0 ? 0 : -1;
  sac_wire_msg_t m;
  sac_wire_reason_t why;
  if (len >= s->buf_cap) {
    count_reject(s, SAC_WIRE_R_TOO_BIG, "insert", id, id_len);
    send_ack(s, id, id_len, UINT32_MAX, 0, NULL, sac_wire_reason_str(SAC_WIRE_R_TOO_BIG));
    return 0;
  }
  int rc = sac_wire_decode(s->ins_dec, s->ins_buf, len, &s->ins_lim, &m, &why);
  if (rc) {
    count_reject(s, why, "insert", id, id_len);
    uint64_t seq = m.type == SAC_WIRE_TRANSITIONS ? m.u.transitions.seq : 0;
    send_ack(s, id, id_len, UINT32_MAX, seq, NULL, sac_wire_reason_str(why));
    return 0;
  }
  if (m.type == SAC_WIRE_INFO_REQUEST) {
    send_info(s, s->ins, id, id_len);
    return 0;
  }
  if (m.type != SAC_WIRE_TRANSITIONS)
    return 0; /* hello / heartbeat: nothing to answer */
  const sac_wire_transitions_t *t = &m.u.transitions;
  sac_replay_insert_result_t r;
  sac_replay_seq_t kind = sac_replay_shard_check(s->shard, t, &r);
  wal_note_forget(s, &r); /* an idle actor forgotten for this one: the log says so before the next record */
  if (kind == SAC_REPLAY_SEQ_DUPLICATE) {
    sac_replay_shard_insert(s->shard, t, &r);           /* counts the duplicate, stores nothing */
    ack_stored(s, id, id_len, t->actor_id, t->seq, &r); /* its original may still wait for an fsync */
    return 0;
  }
  if (kind == SAC_REPLAY_SEQ_REJECT) {
    count_reject(s, r.reason, "insert", id, id_len);
    send_ack(s, id, id_len, t->actor_id, t->seq, &r, sac_wire_reason_str(r.reason));
    return 0;
  }
  /* Batches are stored in arrival order (an actor's must be in seq order for its
   * next_obs streams), so while anything is held a new batch queues behind it. */
  if (s->held_count || !can_insert(s, t->n)) {
    held_t *h = s->held_count ? held_find(s, t) : NULL;
    if (h) { /* a resend of a held batch: answer on the newest connection */
      memcpy(h->id, id, id_len);
      h->id_len = id_len;
      s->st.held_duplicates_total++;
      return 0;
    }
    if (held_push(s, id, id_len, s->ins_buf, len, t) != 0) {
      s->st.held_full_total++;
      send_ack(s, id, id_len, t->actor_id, t->seq, &r, sac_wire_reason_str(SAC_WIRE_R_BUSY));
    }
    return 0;
  }
  store_and_ack(s, id, id_len, t, s->ins_buf, len);
  return 0;
}

static void send_sample_error(sac_replay_server_t *s, const unsigned char *id, size_t id_len, uint64_t rid,
                              const char *error) {
  sac_wire_msg_t m = {.type = SAC_WIRE_SAMPLE_BATCH};
  m.u.sample_batch = (sac_wire_sample_batch_t){.request_id = rid,
                                               .obs_dim = s->cfg.shard.obs_dim,
                                               .act_dim = s->cfg.shard.act_dim,
                                               .shard_id = s->cfg.shard.shard_id,
                                               .error = error};
  reply(s, s->smp, id, id_len, &m);
}

/* The "replay is empty" answer to request rid (the routing frame already sent). */
static void end_sample_empty(sac_replay_server_t *s, uint64_t rid) {
  sac_wire_msg_t e = {.type = SAC_WIRE_SAMPLE_BATCH};
  e.u.sample_batch = (sac_wire_sample_batch_t){.request_id = rid,
                                               .obs_dim = s->cfg.shard.obs_dim,
                                               .act_dim = s->cfg.shard.act_dim,
                                               .shard_id = s->cfg.shard.shard_id,
                                               .error = "replay is empty"};
  reply_end(s, s->smp, &e);
}

/* The reply built in place: the message allocated at its encoded size, its header
 * written, the rows of each of its `batches` batches of n (each sampled on its own, so
 * prioritised sampling stratifies and normalises every batch as a separate request)
 * gathered straight into its arrays, sent without a copy. 0 (answered one way or
 * another) or 1 (no room under max_msg_bytes, or no memory: not begun, nothing sampled;
 * the caller answers the ordinary way, which gives the reason). */
static int serve_sample_in_place(sac_replay_server_t *s, uint64_t rid, uint32_t n, uint32_t batches,
                                 float beta, uint32_t precision) {
  const sac_wire_sample_batch_t hdr = {.request_id = rid,
                                       .n = n * batches,
                                       .obs_dim = s->cfg.shard.obs_dim,
                                       .act_dim = s->cfg.shard.act_dim,
                                       .shard_id = s->cfg.shard.shard_id,
                                       .precision = precision,
                                       .batches = batches > 1 ? batches : 0};
  sac_wire_sample_layout_t l;
  if (sac_wire_sample_layout(&hdr, &l) != 0 || l.len > s->out_cap)
    return 1;
  sac_net_msg_t msg;
  void *data;
  if (sac_net_msg_init_size(&msg, l.len, &data) != 0)
    return 1;
  unsigned char *buf = data;
  const size_t es = precision == SAC_WIRE_F16 ? 2 : 4, ob = (size_t)n * hdr.obs_dim * es,
               ab = (size_t)n * hdr.act_dim * es;
  for (uint32_t j = 0; j < batches; j++) {
    const sac_replay_sample_dst_t dst = {buf + l.obs + j * ob,       buf + l.action + j * ab,
                                         buf + l.reward + j * 4 * n, buf + l.terminated + j * 4 * n,
                                         buf + l.next_obs + j * ob,  buf + l.indices + j * 8 * n,
                                         buf + l.weights + j * 4 * n};
    if (sac_replay_shard_sample_to(s->shard, n, beta, precision, &dst) != 0) {
      sac_net_msg_close(&msg);
      end_sample_empty(s, rid);
      return 0;
    }
  }
  sac_wire_sample_put_header(buf, &hdr, &l);
  if (sac_net_send_msg(s->smp, &msg, SAC_NET_DONTWAIT) != 0) {
    sac_net_msg_close(&msg);
    s->st.replies_dropped_total++;
  }
  return 0;
}

static void serve_sample(sac_replay_server_t *s, const unsigned char *id, size_t id_len, uint64_t rid,
                         uint32_t n, uint32_t batches, float beta, uint32_t precision) {
  /* the routing frame first: a peer whose queue is full (it does not read) gets
   * nothing sampled, encoded or queued */
  if (reply_begin(s, s->smp, id, id_len) != 0)
    return;
  if (serve_sample_in_place(s, rid, n, batches, beta, precision) == 0)
    return;
  if (batches > 1) { /* the ordinary path encodes one batch: this is a reply too large */
    s->st.replies_unencodable_total++;
    sac_wire_msg_t e = {.type = SAC_WIRE_SAMPLE_BATCH};
    e.u.sample_batch =
        (sac_wire_sample_batch_t){.request_id = rid,
                                  .obs_dim = s->cfg.shard.obs_dim,
                                  .act_dim = s->cfg.shard.act_dim,
                                  .shard_id = s->cfg.shard.shard_id,
                                  .error = "reply larger than max_msg_bytes: ask for fewer rows"};
    reply_end(s, s->smp, &e);
    return;
  }
  sac_replay_sample_t b;
  if (sac_replay_shard_sample_as(s->shard, n, beta, precision, &b) != 0) {
    end_sample_empty(s, rid);
    return;
  }
  sac_wire_msg_t m = {.type = SAC_WIRE_SAMPLE_BATCH};
  m.u.sample_batch = (sac_wire_sample_batch_t){.request_id = rid,
                                               .n = b.n,
                                               .obs_dim = b.obs_dim,
                                               .act_dim = b.act_dim,
                                               .shard_id = b.shard_id,
                                               .obs = b.obs,
                                               .action = b.action,
                                               .reward = b.reward,
                                               .terminated = b.terminated,
                                               .next_obs = b.next_obs,
                                               .indices = b.indices,
                                               .weights = b.weights,
                                               .error = "",
                                               .precision = b.precision,
                                               .obs16 = b.obs16,
                                               .action16 = b.action16,
                                               .next_obs16 = b.next_obs16};
  reply_end(s, s->smp, &m);
}

/* 1 when this peer may be served samples: it is one of the max_sample_peers being
 * served, or takes a free place or that of one silent for PEER_IDLE_NS. Bounds the
 * replies queued in total to max_sample_peers x max_reply_queue_bytes. */
static int peer_admit(sac_replay_server_t *s, const unsigned char *id, size_t id_len) {
  uint64_t now = sac_clock_ns();
  uint32_t idle = UINT32_MAX;
  for (uint32_t i = 0; i < s->n_peers; i++) {
    peer_t *p = &s->peers[i];
    if (p->id_len == id_len && memcmp(p->id, id, id_len) == 0) {
      p->seen_ns = now;
      return 1;
    }
    if (now - p->seen_ns >= PEER_IDLE_NS && (idle == UINT32_MAX || p->seen_ns < s->peers[idle].seen_ns))
      idle = i;
  }
  peer_t *p = NULL;
  if (s->n_peers < s->cfg.max_sample_peers)
    p = &s->peers[s->n_peers++];
  else if (idle != UINT32_MAX)
    p = &s->peers[idle];
  if (!p)
    return 0;
  memcpy(p->id, id, id_len);
  p->id_len = id_len;
  p->seen_ns = now;
  return 1;
}

static void serve_pending(sac_replay_server_t *s) {
  uint64_t now = 0;
  while (s->pend_count) {
    pending_t *p = &s->pend[s->pend_head];
    if (!sac_replay_shard_can_sample(s->shard, p->batch * p->batches))
      break;
    if (!now)
      now = sac_clock_ns();
    s->st.sample_wait_seconds_total += (double)(now - p->enqueued_ns) * 1e-9;
    serve_sample(s, p->id, p->id_len, p->request_id, p->batch, p->batches, p->beta, p->precision);
    s->pend_head = (s->pend_head + 1) % s->cfg.max_pending_samples;
    s->pend_count--;
  }
}

static void expire_pending(sac_replay_server_t *s, uint64_t now) {
  /* Deadlines differ per request, so scan the (bounded) queue and compact it. */
  uint32_t cap = s->cfg.max_pending_samples, kept = 0;
  for (uint32_t i = 0; i < s->pend_count; i++) {
    pending_t *p = &s->pend[(s->pend_head + i) % cap];
    if (p->deadline_ns <= now) {
      s->st.sample_timeouts_total++;
      s->st.sample_wait_seconds_total += (double)(now - p->enqueued_ns) * 1e-9;
      send_sample_error(s, p->id, p->id_len, p->request_id,
                        "timed out waiting for the rate limiter (too few inserts or below min_size)");
      continue;
    }
    if (kept != i)
      s->pend[(s->pend_head + kept) % cap] = *p;
    kept++;
  }
  s->pend_count = kept;
}

static uint64_t nearest_deadline(const sac_replay_server_t *s) {
  uint64_t best = UINT64_MAX;
  for (uint32_t i = 0; i < s->pend_count; i++) {
    const pending_t *p = &s->pend[(s->pend_head + i) % s->cfg.max_pending_samples];
    if (p->deadline_ns < best)
      best = p->deadline_ns;
  }
  return best;
}

static void handle_sample(sac_replay_server_t *s) {
  unsigned char id[ID_MAX];
  size_t id_len = 0, len = 0;
  int got = recv_routed(s, s->smp, id, &id_len, s->smp_buf, &len, "sample");
  if (got < 0)
    send_sample_error(s, id, id_len, 0, sac_wire_reason_str(SAC_WIRE_R_FRAMES));
  if (got <= 0)
    return;
  sac_wire_msg_t m;
  sac_wire_reason_t why;
  if (len >= s->buf_cap) {
    count_reject(s, SAC_WIRE_R_TOO_BIG, "sample", id, id_len);
    send_sample_error(s, id, id_len, 0, sac_wire_reason_str(SAC_WIRE_R_TOO_BIG));
    return;
  }
  int rc = sac_wire_decode(s->smp_dec, s->smp_buf, len, &s->smp_lim, &m, &why);
  if (rc) {
    /* every rejected message is answered (request id 0 unless it was a sample request) */
    count_reject(s, why, "sample", id, id_len);
    send_sample_error(s, id, id_len, m.type == SAC_WIRE_SAMPLE_REQUEST ? m.u.sample_request.request_id : 0,
                      sac_wire_reason_str(why));
    return;
  }
  switch (m.type) {
  case SAC_WIRE_SAMPLE_REQUEST: {
    const sac_wire_sample_request_t *q = &m.u.sample_request;
    limiter_idle_update(s, sac_clock_ns(), 1);
    if (!peer_admit(s, id, id_len)) {
      s->st.sample_peers_refused_total++;
      SAC_WARN_EVERY(10.0, "replay", "sample request refused: max_sample_peers=%u peers are being served",
                     s->cfg.max_sample_peers);
      send_sample_error(s, id, id_len, q->request_id, "busy: too many sample peers (max_sample_peers)");
      return;
    }
    const uint32_t batches = q->batches > 1 ? q->batches : 1;
    if ((uint64_t)q->batch_size * batches > s->cfg.shard.max_sample_batch) {
      count_reject(s, SAC_WIRE_R_ROWS, "sample", id, id_len);
      send_sample_error(s, id, id_len, q->request_id,
                        batches > 1 ? "batch_size x batches over this shard's max_sample_batch"
                                    : "batch_size over this shard's max_sample_batch");
      return;
    }
    if (s->pend_count == 0 && sac_replay_shard_can_sample(s->shard, q->batch_size * batches)) {
      serve_sample(s, id, id_len, q->request_id, q->batch_size, batches, q->beta, q->precision);
      return;
    }
    if (s->pend_count >= s->cfg.max_pending_samples) {
      s->st.sample_busy_total++;
      send_sample_error(s, id, id_len, q->request_id, "busy: too many sample requests waiting");
      return;
    }
    uint64_t now = sac_clock_ns();
    uint32_t tmo =
        q->timeout_ms < s->cfg.max_sample_timeout_ms ? q->timeout_ms : s->cfg.max_sample_timeout_ms;
    pending_t *p = &s->pend[(s->pend_head + s->pend_count) % s->cfg.max_pending_samples];
    memcpy(p->id, id, id_len);
    p->id_len = id_len;
    p->request_id = q->request_id;
    p->batch = q->batch_size;
    p->batches = batches;
    p->beta = q->beta;
    p->precision = q->precision;
    p->enqueued_ns = now;
    p->deadline_ns = now + (uint64_t)tmo * 1000000ull;
    s->pend_count++;
    s->st.sample_waits_total++;
    return;
  }
  case SAC_WIRE_PRIORITY_UPDATE: {
    uint32_t ok = 0, stale = 0, foreign = 0;
    const sac_wire_priority_update_t *u = &m.u.priority_update;
    sac_replay_shard_update_priorities(s->shard, u->n, u->indices, u->priorities, &ok, &stale, &foreign);
    if (foreign)
      count_reject(s, SAC_WIRE_R_INDEX, "sample", id, id_len);
    return;
  }
  case SAC_WIRE_INFO_REQUEST:
    send_info(s, s->smp, id, id_len);
    return;
  default:
    return;
  }
}

/* ------------------------------------------------------------------ write-ahead log */

/* A start time in µs since the epoch, unique within the process (two servers created in
 * the same µs get consecutive values); fits a double exactly for the metrics gauge. */
static uint64_t new_incarnation(void) {
  static _Atomic uint64_t last;
  uint64_t t = sac_wallclock_ns() / 1000u, prev = atomic_load(&last);
  for (;;) {
    uint64_t v = t > prev ? t : prev + 1;
    if (atomic_compare_exchange_weak(&last, &prev, v))
      return v;
  }
}

/* durability snapshot or none over a log that holds records: starting would ignore
 * acknowledged batches (and a later wal start would replay stale ones). Refused like
 * another shard's snapshot. */
static int refuse_foreign_log(const sac_replay_server_config_t *c) {
  char wal[1100];
  if (!c->wal_path[0] && !c->snapshot_path[0])
    return 0;
  snprintf(wal, sizeof wal, "%s%s", c->wal_path[0] ? c->wal_path : c->snapshot_path,
           c->wal_path[0] ? "" : ".wal");
  struct stat sb;
  if (stat(wal, &sb) != 0 || sb.st_size <= (off_t)SAC_REPLAY_WAL_HEADER_BYTES)
    return 0;
  SAC_ERROR(
      "replay",
      "refusing to start with durability %s: the write-ahead log %s holds %lld bytes of records a shard "
      "with durability wal acknowledged. Start with durability wal to replay them, or move the log aside",
      sac_replay_durability_name(c->durability), wal, (long long)sb.st_size);
  return SAC_ECONFIG;
}

/* Decides the durability in effect, before anything is restored: NONE forgets the
 * snapshot path; WAL derives the log path and allocates the queue of held acks. */
static int durability_setup(sac_replay_server_t *s) {
  s->st.incarnation = new_incarnation();
  sac_replay_server_config_t *c = &s->cfg;
  s->st.durability = c->durability;
  if (c->durability != SAC_REPLAY_DURABILITY_WAL && refuse_foreign_log(c) != 0)
    return SAC_ECONFIG;
  if (c->durability == SAC_REPLAY_DURABILITY_NONE) {
    c->snapshot_path[0] = '\0';
    c->wal_path[0] = '\0';
    return 0;
  }
  if (c->durability != SAC_REPLAY_DURABILITY_WAL) {
    if (!c->snapshot_path[0]) {
      /* a mode that promises to keep something needs a place to keep it */
      SAC_ERROR("replay",
                "refusing to start: durability snapshot needs a place for its snapshots: give snapshot_path, "
                "or choose durability none (memory only: nothing survives a restart) explicitly");
      return SAC_ECONFIG;
    }
    c->wal_path[0] = '\0';
    return 0;
  }
  if (c->wal_sync_ms < -1 || c->wal_sync_ms > 60000) {
    SAC_ERROR("replay", "wal_sync_ms must be -1 (no fsync), 0 (each batch) or up to 60000, not %d",
              c->wal_sync_ms);
    return SAC_ECONFIG;
  }
  if (!c->snapshot_path[0]) {
    /* the log is emptied by snapshots; without them it would only grow. Running as
     * durability none here would acknowledge at once what no file holds. */
    SAC_ERROR(
        "replay",
        "refusing to start: durability wal (the default) needs a place for its files: give snapshot_path "
        "(the log goes to <snapshot_path>.wal), or choose durability none (memory only: nothing survives "
        "a restart) explicitly");
    return SAC_ECONFIG;
  }
  if (!c->wal_path[0] &&
      snprintf(c->wal_path, sizeof c->wal_path, "%s.wal", c->snapshot_path) >= (int)sizeof c->wal_path) {
    SAC_ERROR("replay", "snapshot path too long to derive the log path from: %s", c->snapshot_path);
    return SAC_ECONFIG;
  }
  s->wacks = malloc(WAL_MAX_WAITING * sizeof *s->wacks);
  if (!s->wacks)
    return SAC_ENOMEM;
  pthread_mutex_init(&s->sync_mu, NULL);
  pthread_cond_init(&s->sync_cv, NULL);
  s->sync_inited = 1;
  return 0;
}

/* Applies one logged record at start. A batch that no longer passes the shard's checks
 * (the shard was restarted with other dims or limits) refuses the start, naming the
 * record and the reason: skipping it would drop a batch that was acknowledged. A batch
 * of a session the shard has since seen replaced is what a crash between a snapshot and
 * the log's truncation leaves: already superseded, skipped like a duplicate. A FORGET
 * record forgets the actor as the running shard did, so the actor table (and room for
 * new actors under max_actors) is rebuilt as it was. */
static int check_replay_capacity(sac_replay_server_t *s, uint64_t capacity_written);

static int wal_apply(void *user, const sac_replay_wal_rec_t *rec, const unsigned char *payload, size_t len) {
  sac_replay_server_t *s = user;
  if (rec->kind == SAC_REPLAY_WAL_FORGET) {
    sac_replay_shard_forget_actor(s->shard,
                                  rec->actor); /* not tracked (a snapshot after it): nothing to do */
    return 0;
  }
  if (rec->kind == SAC_REPLAY_WAL_END) /* replayed, the file not yet changed */
    return check_replay_capacity(s, rec->session);
  sac_wire_msg_t m;
  sac_wire_reason_t why = SAC_WIRE_R_MALFORMED;
  sac_replay_insert_result_t r = {0};
  int rc = sac_wire_decode(s->ins_dec, payload, len, &s->ins_lim, &m, &why);
  if (rc == 0 && m.type != SAC_WIRE_TRANSITIONS)
    rc = SAC_EPROTO;
  if (rc == 0 && sac_replay_shard_insert(s->shard, &m.u.transitions, &r) != 0 &&
      r.reason != SAC_WIRE_R_SESSION) {
    why = r.reason;
    rc = SAC_EINVAL;
  }
  if (rc == 0) {
    s->wal_rows_replayed += r.stored;
    return 0;
  }
  count_reject(s, why, "log", NULL, 0);
  SAC_ERROR(
      "replay",
      "refusing to start: the record at byte %llu of the write-ahead log %s (actor %u, session %llu, seq "
      "%llu, %u rows) fails validation: %s (%s). %s",
      (unsigned long long)rec->offset, s->cfg.wal_path, rec->actor, (unsigned long long)rec->session,
      (unsigned long long)rec->seq, rec->rows, sac_wire_reason_str(why), sac_wire_reason_name(why),
      why == SAC_WIRE_R_ACTORS
          ? "More actors than max_actors: restart with a larger max_actors (the log was written by a "
            "shard that tracked more)"
          : "Restart with the settings it was written under (obs/act dims, max_msg_bytes, "
            "max_batch_rows, max_env_id, max_abs_value), or move the log aside to drop its batches");
  return SAC_EINVAL;
}

/* The fsync thread (see the struct): one fdatasync per round covers every record
 * appended before the round started. A failed one ends the thread: nothing is synced
 * again before a restart (see wal_fsync_failed). */
static void *sync_main(void *arg) {
  sac_replay_server_t *s = arg;
  pthread_mutex_lock(&s->sync_mu);
  for (;;) {
    while (!s->sync_quit && s->sync_target <= s->sync_done && !s->sync_err)
      pthread_cond_wait(&s->sync_cv, &s->sync_mu);
    if (s->sync_err || s->sync_target <= s->sync_done)
      break; /* quit with nothing left, or a failed fsync */
    uint64_t target = s->sync_target, data = s->sync_target_data;
    pthread_mutex_unlock(&s->sync_mu);
    const uint64_t t0 = sac_clock_ns();
    int rc = sac_replay_wal_sync(s->wal);
    int e = errno;
    const uint64_t t1 = sac_clock_ns();
    pthread_mutex_lock(&s->sync_mu);
    s->sync_seconds += (double)(t1 - t0) * 1e-9;
    if (rc) {
      s->sync_err = 1;
      s->sync_errno = e;
    } else {
      s->sync_done = target;
      s->sync_done_data = data;
    }
    s->sync_count++;
    pthread_cond_broadcast(&s->sync_cv);
  }
  pthread_mutex_unlock(&s->sync_mu);
  return NULL;
}

static void sync_thread_stop(sac_replay_server_t *s) {
  if (s->sync_running) {
    pthread_mutex_lock(&s->sync_mu);
    s->sync_quit = 1;
    pthread_cond_broadcast(&s->sync_cv);
    pthread_mutex_unlock(&s->sync_mu);
    pthread_join(s->sync_thread, NULL);
    s->sync_running = 0;
  }
  if (s->sync_inited) {
    pthread_cond_destroy(&s->sync_cv);
    pthread_mutex_destroy(&s->sync_mu);
    s->sync_inited = 0;
  }
}

/* Replayed into a smaller ring than the log was written for, the ring would evict
 * batches the writer's ring still held, acknowledged ones among them: refused, naming
 * the capacity needed, as a snapshot of another capacity is. capacity_written: the
 * largest capacity the log names (0: a version 1 log, which does not say: then the
 * snapshot's, when one was restored, else any eviction during the replay counts). */
static int check_replay_capacity(sac_replay_server_t *s, uint64_t capacity_written) {
  uint64_t alloc_before = s->wal_alloc_before;
  sac_replay_shard_stats_t ss;
  sac_replay_shard_stats(s->shard, &ss);
  uint64_t cap = ss.capacity, alloc = ss.allocated_total;
  if (!capacity_written)
    capacity_written = s->st.restored_transitions || alloc_before ? cap : UINT64_MAX;
  if (alloc <= cap || cap >= capacity_written)
    return 0;
  uint64_t need = capacity_written < alloc ? capacity_written : alloc;
  SAC_ERROR(
      "replay",
      "refusing to start: the write-ahead log %s holds batches for %llu ring slots, written by a shard with "
      "capacity %s%llu; this shard's capacity %llu would evict acknowledged batches while replaying it. "
      "Restart with capacity >= %llu",
      s->cfg.wal_path, (unsigned long long)(alloc - alloc_before),
      capacity_written == UINT64_MAX ? "(not recorded: a version 1 log) " : "",
      (unsigned long long)(capacity_written == UINT64_MAX ? 0 : capacity_written), (unsigned long long)cap,
      (unsigned long long)need);
  return SAC_ECONFIG;
}

static int restore_wal(sac_replay_server_t *s) {
  if (!s->wacks)
    return 0;
  sac_replay_wal_scan_t scan;
  unsigned flags = (s->cfg.wal_truncate_corrupt ? SAC_REPLAY_WAL_TRUNCATE_CORRUPT : 0u) |
                   (s->cfg.shard.adopt_snapshot ? SAC_REPLAY_WAL_ADOPT : 0u);
  sac_replay_shard_stats_t before;
  sac_replay_shard_stats(s->shard, &before);
  s->wal_alloc_before = before.allocated_total;
  int rc = sac_replay_wal_open(s->cfg.wal_path, s->cfg.shard.shard_id, s->cfg.shard.capacity,
                               s->cfg.max_msg_bytes, flags, wal_apply, s, &s->wal, &scan);
  if (rc == SAC_EPROTO && s->cfg.start_empty_on_bad_snapshot) {
    char aside[1200];
    snprintf(aside, sizeof aside, "%s.bad-%lld", s->cfg.wal_path, (long long)time(NULL));
    if (sac_durable_rename(s->cfg.wal_path, aside) != 0) {
      SAC_ERROR("replay", "refusing to start: could not move the unusable log %s aside to %s: %s",
                s->cfg.wal_path, aside, strerror(errno));
      return SAC_ECONFIG;
    }
    SAC_WARN("replay", "log %s unusable: moved to %s as asked", s->cfg.wal_path, aside);
    if (lock_wal(s) != 0) /* the lock held is on the file moved aside */
      return SAC_ECONFIG;
    rc = sac_replay_wal_open(s->cfg.wal_path, s->cfg.shard.shard_id, s->cfg.shard.capacity,
                             s->cfg.max_msg_bytes, flags, wal_apply, s, &s->wal, &scan);
  }
  if (rc) {
    SAC_ERROR("replay", "refusing to start: the write-ahead log %s cannot be used (%s)", s->cfg.wal_path,
              sac_strerror(rc));
    return rc == SAC_ENOMEM ? rc : SAC_ECONFIG;
  }
  sac_replay_shard_stats_t ss;
  sac_replay_shard_stats(s->shard, &ss);
  s->st.restored_transitions = ss.size;
  s->st.wal_enabled = 1;
  s->st.wal_replayed_records = scan.records;
  s->st.wal_dropped_bytes = scan.dropped_bytes;
  snprintf(s->tail_why, sizeof s->tail_why, "%s", scan.why ? scan.why : "");
  s->st.wal_bytes = sac_replay_wal_bytes(s->wal);
  /* open synced what it replayed and (unless the disk is full) said so in a SYNC record */
  s->wal_data_end = s->wal_synced_data = sac_replay_wal_bytes(s->wal);
  s->wal_claimed = scan.claimed;
  if (s->cfg.wal_sync_ms >= 0) {
    if (pthread_create(&s->sync_thread, NULL, sync_main, s) != 0)
      return SAC_ENOMEM;
    s->sync_running = 1;
  }
  return 0;
}

/* The error reply for a batch the shard cannot make durable now: nothing of it is
 * stored; the actor keeps it and resends after retry_after_ms. Counted. */
static void send_not_durable(sac_replay_server_t *s, const unsigned char *id, size_t id_len, uint32_t actor,
                             uint64_t seq) {
  uint64_t now = sac_clock_ns();
  uint32_t retry_ms = s->wal_state == WAL_FSYNC_FAILED ? 5000u
                      : s->wal_retry_ns > now          ? (uint32_t)((s->wal_retry_ns - now) / 1000000u) + 1u
                                                       : 100u;
  s->st.inserts_not_durable_total++;
  sac_wire_msg_t m = {.type = SAC_WIRE_ACK};
  m.u.ack = (sac_wire_ack_t){
      .acked_seq = 0, /* claims nothing: see durable_acked */
      .seq = seq,
      .credit = actor != UINT32_MAX
                    ? sac_replay_shard_credit(s->shard, actor, s->batch_rows_avg, s->cfg.insert_credit, 1)
                    : 1u,
      .shard_id = s->cfg.shard.shard_id,
      .error = SAC_WIRE_NOT_DURABLE_ERROR,
      .status = SAC_WIRE_ACK_NOT_DURABLE,
      .retry_after_ms = retry_ms};
  reply(s, s->ins, id, id_len, &m);
}

/* An fsync of the log failed. Linux may have dropped the dirty pages it could not write
 * and will report that once: a later fsync can succeed over records that are not on
 * disk. So nothing is acknowledged again before a restart from what is on disk (fail-
 * stop for inserts, as PostgreSQL chose): the acks waiting for that fsync are answered
 * "not durable", every later insert too; the shard keeps serving samples, and /healthz
 * says why. */
static void wal_fsync_failed(sac_replay_server_t *s, int err) {
  s->st.wal_errors_total++;
  if (s->wal_state != WAL_FSYNC_FAILED) {
    snprintf(s->wal_why, sizeof s->wal_why, "an fsync of %.110s failed (%.60s)", s->cfg.wal_path,
             strerror(err));
    SAC_ERROR(
        "replay",
        "write-ahead log: %s; what it held may not be on disk. No insert is acknowledged any more: restart "
        "the shard (it recovers from what is on disk; the actors resend what was not acknowledged). "
        "Samples are still served",
        s->wal_why);
  }
  s->wal_state = WAL_FSYNC_FAILED;
  while (s->n_wacks) {
    const wal_ack_t *a = &s->wacks[s->wack_head++];
    s->n_wacks--;
    send_not_durable(s, a->id, a->id_len, a->actor, a->seq);
  }
  s->wack_head = 0;
  s->wal_oldest_ns = 0;
}

/* An append failed (a full disk, a write error): inserts are answered "not durable"
 * and the append is tried again from wal_retry_ns on (backing off), so the shard resumes
 * by itself once the disk takes writes again. Records appended before are untouched. */
static void wal_write_failed(sac_replay_server_t *s, int err) {
  s->st.wal_errors_total++;
  uint64_t now = sac_clock_ns();
  s->wal_retry_step_ns = s->wal_retry_step_ns ? s->wal_retry_step_ns * 2 : WAL_RETRY_MIN_NS;
  if (s->wal_retry_step_ns > WAL_RETRY_MAX_NS)
    s->wal_retry_step_ns = WAL_RETRY_MAX_NS;
  s->wal_retry_ns = now + s->wal_retry_step_ns;
  if (s->wal_state == WAL_OK) {
    snprintf(s->wal_why, sizeof s->wal_why, "appends to %.110s fail (%.60s)", s->cfg.wal_path, strerror(err));
    SAC_ERROR("replay",
              "write-ahead log: %s: inserts are answered \"not durable\" (the actors keep and resend them) "
              "until it takes writes again; samples are still served",
              s->wal_why);
    s->wal_state = WAL_WRITES_FAIL;
  }
}

/* Appends the records owed before the next batch: FORGET records of actors the shard
 * forgot (in order). 0, or SAC_EIO (errno set). */
static int wal_flush_forgets(sac_replay_server_t *s) {
  uint32_t done = 0;
  int rc = 0;
  while (done < s->n_forget && (rc = sac_replay_wal_append_forget(s->wal, s->forget[done])) == 0) {
    done++;
    s->wal_appended++;
    s->wal_data_end = sac_replay_wal_bytes(s->wal);
  }
  if (done) {
    memmove(s->forget, s->forget + done, (s->n_forget - done) * sizeof *s->forget);
    s->n_forget -= done;
  }
  return rc;
}

/* Remembers that the shard forgot actor (for the log's FORGET record). */
static void wal_note_forget(sac_replay_server_t *s, const sac_replay_insert_result_t *r) {
  if (!s->wal || !r->expired)
    return;
  if (s->n_forget == s->forget_cap) {
    uint32_t cap = s->forget_cap ? 2 * s->forget_cap : 16;
    uint32_t *p = realloc(s->forget, cap * sizeof *p);
    if (!p) {
      /* cannot remember it: the log would not replay; stop trusting it like a failed fsync */
      wal_fsync_failed(s, ENOMEM);
      return;
    }
    s->forget = p;
    s->forget_cap = cap;
  }
  s->forget[s->n_forget++] = r->expired_actor;
}

/* Appends a batch the shard is about to store (not a duplicate or a rejected one).
 * 0, or SAC_EIO (the caller answers "not durable" and stores nothing). */
static int wal_log(sac_replay_server_t *s, const sac_wire_transitions_t *t, const unsigned char *msg,
                   size_t len) {
  if (!s->wal)
    return 0;
  if (s->wal_state == WAL_FSYNC_FAILED ||
      (s->wal_state == WAL_WRITES_FAIL && sac_clock_ns() < s->wal_retry_ns))
    return SAC_EIO;
  sac_replay_insert_result_t r;
  if (sac_replay_shard_check(s->shard, t, &r) != SAC_REPLAY_SEQ_NEW)
    return 0;
  wal_note_forget(s, &r);
  sac_replay_wal_rec_t rec = {t->actor_id, t->n, t->session, t->seq, 0, SAC_REPLAY_WAL_BATCH};
  if (wal_flush_forgets(s) != 0 || sac_replay_wal_append(s->wal, &rec, msg, len) != 0) {
    wal_write_failed(s, errno);
    return SAC_EIO;
  }
  if (s->wal_state == WAL_WRITES_FAIL) {
    SAC_INFO("replay", "write-ahead log %s takes writes again: inserts are acknowledged again",
             s->cfg.wal_path);
    s->wal_state = WAL_OK;
    s->wal_why[0] = '\0';
  }
  s->wal_retry_step_ns = 0;
  s->st.wal_records_total++;
  s->wal_appended++;
  s->wal_data_end = sac_replay_wal_bytes(s->wal);
  if (!s->wal_oldest_ns)
    s->wal_oldest_ns = sac_clock_ns();
  return 0;
}

/* Acknowledges a stored (or duplicate) batch: at once when nothing appended is waiting
 * for an fsync, else after the fsync that covers every record appended so far. A
 * duplicate waits too: its original may be one of the records not yet synced. After a
 * failed fsync nothing is acknowledged: "not durable". */
static void ack_stored(sac_replay_server_t *s, const unsigned char *id, size_t id_len, uint32_t actor,
                       uint64_t seq, const sac_replay_insert_result_t *r) {
  if (s->wal && s->wal_state == WAL_FSYNC_FAILED) {
    send_not_durable(s, id, id_len, actor, seq);
    return;
  }
  if (!s->wal || s->cfg.wal_sync_ms < 0 || (!s->n_wacks && s->wal_synced >= s->wal_appended)) {
    send_ack(s, id, id_len, actor, seq, r, NULL);
    return;
  }
  if (s->wack_head + s->n_wacks == WAL_MAX_WAITING) {
    if (s->wack_head == 0)
      wal_commit(s, 2); /* the queue is full: wait for the fsync */
    else
      memmove(s->wacks, s->wacks + s->wack_head, s->n_wacks * sizeof *s->wacks);
    s->wack_head = 0;
  }
  if (s->wal_state == WAL_FSYNC_FAILED) {
    send_not_durable(s, id, id_len, actor, seq);
    return;
  }
  wal_ack_t *a = &s->wacks[s->wack_head + s->n_wacks++];
  memcpy(a->id, id, id_len);
  a->id_len = id_len;
  a->actor = actor;
  a->seq = seq;
  a->need = s->wal_appended;
  a->r = *r;
  if (s->cfg.wal_sync_ms == 0)
    wal_commit(s, 1);
}

/* Sends the held acks an fsync has covered (oldest first: their need never decreases). */
static void wal_release(sac_replay_server_t *s) {
  pthread_mutex_lock(&s->sync_mu);
  uint64_t done = s->sync_done, done_data = s->sync_done_data, count = s->sync_count;
  const double seconds = s->sync_seconds;
  int err = s->sync_err, e = s->sync_errno;
  pthread_mutex_unlock(&s->sync_mu);
  s->st.wal_syncs_total = count;
  s->st.wal_sync_seconds_total = seconds;
  if (err) {
    wal_fsync_failed(s, e);
    return;
  }
  s->wal_synced = done;
  if (done_data > s->wal_synced_data) {
    s->wal_synced_data = done_data;
    s->wal_synced_ns = sac_clock_ns();
  }
  while (s->n_wacks && s->wacks[s->wack_head].need <= done) {
    const wal_ack_t *a = &s->wacks[s->wack_head++];
    s->n_wacks--;
    send_ack(s, a->id, a->id_len, a->actor, a->seq, &a->r, NULL);
  }
  if (!s->n_wacks)
    s->wack_head = 0;
}

/* Before an fsync is asked for: the SYNC record saying what the last completed one
 * covered, when that grew since the last such record. Not data: when it cannot be
 * written the next fsync is asked for all the same (the record follows later). */
static void wal_mark(sac_replay_server_t *s) {
  if (s->wal_synced_data <= s->wal_claimed)
    return;
  if (sac_replay_wal_append_sync(s->wal, s->wal_synced_data) == 0) {
    s->wal_claimed = s->wal_synced_data;
    s->wal_appended++;
  } else {
    s->wal_synced_ns = sac_clock_ns() + WAL_RETRY_MAX_NS; /* not again before a while */
  }
}

/* Idle, with no fsync running: nothing is waiting to be read, so the server thread may
 * as well block in the fsync itself, which spares the hand-over to the fsync thread (on
 * a busy machine, waiting for that thread to be scheduled cost more than the fsync).
 * Returns 1 when it synced (or failed: then inserts stop), 0 when an fsync is running
 * (the caller hands over). */
static int wal_sync_inline(sac_replay_server_t *s) {
  pthread_mutex_lock(&s->sync_mu);
  int running = s->sync_target > s->sync_done;
  pthread_mutex_unlock(&s->sync_mu);
  if (running)
    return 0;
  wal_mark(s);
  uint64_t upto = s->wal_appended, data = s->wal_data_end;
  const uint64_t t0 = sac_clock_ns();
  int rc = sac_replay_wal_sync(s->wal);
  int e = errno;
  const uint64_t t1 = sac_clock_ns();
  pthread_mutex_lock(&s->sync_mu);
  s->sync_seconds += (double)(t1 - t0) * 1e-9;
  if (rc) {
    s->sync_err = 1;
    s->sync_errno = e;
  } else {
    s->sync_done = upto; /* target stays <= done: the fsync thread stays idle */
    s->sync_target = upto;
    s->sync_done_data = s->sync_target_data = data;
  }
  s->sync_count++;
  pthread_mutex_unlock(&s->sync_mu);
  s->wal_asked = upto;
  s->wal_oldest_ns = 0;
  wal_release(s);
  return 1;
}

/* When the closing SYNC record is due: CLOSE_NS after an fsync completed that no SYNC
 * record has claimed yet (UINT64_MAX: none owed, or the log takes no writes now). */
static uint64_t wal_close_at(const sac_replay_server_t *s) {
  if (!s->wal || s->wal_state != WAL_OK || s->cfg.wal_sync_ms < 0 || s->wal_synced_data <= s->wal_claimed)
    return UINT64_MAX;
  return s->wal_synced_ns + CLOSE_NS;
}

/* Group commit. Asks the fsync thread to cover every record appended so far when how is
 * nonzero (idle: no later batch would join the group; 2: and waits for it: snapshots,
 * stopping, a full queue) or when the oldest record not yet asked for has waited
 * wal_sync_ms; an fsync asked for while one runs starts when it ends and covers
 * everything appended meanwhile. Then sends the acks that finished fsyncs covered. Idle
 * CLOSE_NS after an fsync, it writes and syncs the SYNC record that says so. */
static void wal_commit(sac_replay_server_t *s, int how) {
  if (!s->wal || s->wal_state == WAL_FSYNC_FAILED)
    return;
  if (s->cfg.wal_sync_ms < 0) {
    s->wal_oldest_ns = 0;
    return;
  }
  if (how == 1 && s->wal_appended == s->wal_asked && sac_clock_ns() >= wal_close_at(s)) {
    wal_mark(s); /* the closing record: synced inline below (a failed append is tried later) */
    if (s->wal_appended > s->wal_asked && wal_sync_inline(s))
      return;
  }
  if (how == 1 && s->wal_appended > s->wal_asked && wal_sync_inline(s))
    return;
  if (s->wal_appended > s->wal_asked &&
      (how || sac_clock_ns() >= s->wal_oldest_ns + (uint64_t)s->cfg.wal_sync_ms * 1000000ull)) {
    wal_mark(s);
    pthread_mutex_lock(&s->sync_mu);
    s->sync_target = s->wal_appended;
    s->sync_target_data = s->wal_data_end;
    pthread_cond_broadcast(&s->sync_cv);
    pthread_mutex_unlock(&s->sync_mu);
    s->wal_asked = s->wal_appended;
    s->wal_oldest_ns = 0;
  }
  if (how == 2) {
    pthread_mutex_lock(&s->sync_mu);
    while (s->sync_done < s->wal_asked && !s->sync_err)
      pthread_cond_wait(&s->sync_cv, &s->sync_mu);
    pthread_mutex_unlock(&s->sync_mu);
  }
  if (s->n_wacks || how == 2 || s->wal_synced < s->wal_asked)
    wal_release(s);
}

/* After a snapshot was written and made durable: its records are redundant, the log
 * starts over (and with it what the SYNC records count in). A crash before this point
 * replays records the snapshot holds, which the shard drops as duplicates. After a
 * failed fsync the log is left as it is (the restart replays it over the snapshot). */
static void wal_rotate(sac_replay_server_t *s) {
  if (!s->wal || s->wal_state == WAL_FSYNC_FAILED)
    return;
  if (sac_replay_wal_reset(s->wal) != 0) {
    wal_fsync_failed(s, errno);
    return;
  }
  uint64_t h = sac_replay_wal_bytes(s->wal);
  pthread_mutex_lock(&s->sync_mu);
  s->sync_done_data = s->sync_target_data = h;
  pthread_mutex_unlock(&s->sync_mu);
  s->wal_data_end = s->wal_synced_data = s->wal_claimed = h;
  s->n_forget = 0; /* the snapshot holds the actor table as it is */
}

/* ------------------------------------------------------------------ provenance */

static void serving_set(sac_replay_server_t *s, int on) {
  pthread_mutex_lock(&s->mu);
  s->serving = on;
  pthread_cond_broadcast(&s->prov_cv);
  pthread_mutex_unlock(&s->mu);
}

int sac_replay_server_provenance_local(sac_replay_server_t *s, char **text, size_t *len) {
  return sac_replay_prov_format(sac_replay_shard_provenance(s->shard), s->cfg.shard.shard_id,
                                s->st.incarnation, text, len);
}

/* On the serving thread: renders the index for the requests asked so far. */
static void serve_provenance(sac_replay_server_t *s) {
  pthread_mutex_lock(&s->mu);
  uint64_t asked = s->prov_asked;
  pthread_mutex_unlock(&s->mu);
  char *text = NULL;
  size_t len = 0;
  int rc = sac_replay_server_provenance_local(s, &text, &len);
  pthread_mutex_lock(&s->mu);
  free(s->prov_text);
  s->prov_text = rc ? NULL : text;
  s->prov_len = len;
  s->prov_served = asked;
  pthread_cond_broadcast(&s->prov_cv);
  pthread_mutex_unlock(&s->mu);
}

int sac_replay_server_provenance(sac_replay_server_t *s, int timeout_ms, char **text, size_t *len) {
  struct timespec dl;
  clock_gettime(CLOCK_REALTIME, &dl);
  dl.tv_sec += timeout_ms / 1000;
  dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
  if (dl.tv_nsec >= 1000000000L) {
    dl.tv_sec++;
    dl.tv_nsec -= 1000000000L;
  }
  int rc = 0;
  pthread_mutex_lock(&s->mu);
  uint64_t ticket = ++s->prov_asked;
  atomic_store(&s->prov_req, 1);
  while (s->serving && s->prov_served < ticket && rc == 0)
    rc = pthread_cond_timedwait(&s->prov_cv, &s->mu, &dl);
  if (s->prov_served >= ticket) {
    rc = SAC_ENOMEM;
    *text = s->prov_text ? malloc(s->prov_len + 1) : NULL;
    if (*text) {
      memcpy(*text, s->prov_text, s->prov_len + 1);
      *len = s->prov_len;
      rc = 0;
    }
  } else {
    rc = s->serving ? SAC_ETIMEOUT : SAC_ESTATE;
  }
  pthread_mutex_unlock(&s->mu);
  return rc;
}

/* ------------------------------------------------------------------ loop */

static void snapshot(sac_replay_server_t *s, const char *why) {
  if (!s->cfg.snapshot_path[0])
    return;
  wal_commit(s, 2); /* the log and the acks are settled before the snapshot supersedes them */
  uint64_t t0 = sac_clock_ns();
  uint64_t bytes = 0;
  sac_replay_shard_stats_t ss;
  sac_replay_shard_stats(s->shard, &ss);
  int rc = sac_replay_shard_save(s->shard, s->cfg.snapshot_path, &bytes);
  double dt = (double)(sac_clock_ns() - t0) * 1e-9;
  if (rc) {
    s->st.snapshot_failures_total++;
    s->st.snapshot_failing = 1; /* /healthz says so until a snapshot succeeds */
    /* the automatic ones (periodic, the log past wal_max_mb) back off: a full disk is
     * not helped by a full snapshot written 20 times a second */
    s->snap_backoff_ns = s->snap_backoff_ns ? 2 * s->snap_backoff_ns : SNAP_RETRY_MIN_NS;
    if (s->snap_backoff_ns > SNAP_RETRY_MAX_NS)
      s->snap_backoff_ns = SNAP_RETRY_MAX_NS;
    s->snap_retry_ns = sac_clock_ns() + s->snap_backoff_ns;
    SAC_ERROR("replay", "%s snapshot to %s failed: %s; the next automatic one in %.0f s", why,
              s->cfg.snapshot_path, sac_strerror(rc), (double)s->snap_backoff_ns * 1e-9);
    return;
  }
  s->st.snapshot_failing = 0;
  s->snap_backoff_ns = 0;
  s->snap_retry_ns = 0;
  s->st.snapshots_total++;
  s->st.snapshot_inserted_total = ss.inserted_rows_total;
  s->st.last_snapshot_unix_ns = sac_wallclock_ns();
  s->st.last_snapshot_seconds = dt;
  s->st.last_snapshot_bytes = bytes;
  wal_rotate(s);
  SAC_INFO("replay", "%s snapshot: %llu transitions, %.1f MiB in %.3f s to %s", why,
           (unsigned long long)ss.size, (double)bytes / 1048576.0, dt, s->cfg.snapshot_path);
}

static void publish(sac_replay_server_t *s) {
  sac_replay_shard_stats(s->shard, &s->st.shard);
  s->st.pending_samples = s->pend_count;
  s->st.insert_parked = s->held_count > 0;
  s->st.insert_held_batches = s->held_count;
  s->st.insert_held_bytes = s->held_used;
  s->st.wal_bytes = s->wal ? sac_replay_wal_bytes(s->wal) : 0;
  s->st.wal_acks_waiting = s->n_wacks;
  s->st.wal_state = s->wal_state;
  snprintf(s->st.wal_why, sizeof s->st.wal_why, "%s", s->wal_why);
  pthread_mutex_lock(&s->mu);
  s->pub = s->st;
  pthread_mutex_unlock(&s->mu);
}

/* What the shard waits for now, if anything, for its progress line. */
static const char *progress_state(const sac_replay_server_t *s, const sac_replay_shard_stats_t *ss,
                                  uint64_t inserted, char *buf, size_t cap) {
  if (ss->size < ss->limiter_min_size)
    snprintf(buf, cap,
             "waiting for inserts: %llu of the %llu transitions (min_size) it holds before serving "
             "samples%s",
             (unsigned long long)ss->size, (unsigned long long)ss->limiter_min_size,
             inserted ? "" : "; none arrived since the last line (are the actors' --shards pointing here?)");
  else if (s->held_count)
    snprintf(buf, cap,
             "holding %u insert batch(es) back: the rate limiter waits for the learner to sample "
             "(samples_per_insert %.0f)",
             s->held_count, ss->limiter_spi);
  else if (s->pend_count)
    snprintf(buf, cap, "%u sample request(s) waiting for inserts (rate limiter, samples_per_insert %.0f)",
             s->pend_count, ss->limiter_spi);
  else if (!s->last_sample_ns)
    snprintf(buf, cap, "no sample request yet (is the learner's --shards pointing at %s?)", s->smp_ep);
  else
    snprintf(buf, cap, "serving");
  return buf;
}

/* The progress line, every log_interval_s: stored and sampled (with their rates), the
 * actors it knows, the write-ahead log, and what it waits for. */
static void log_progress(sac_replay_server_t *s, uint64_t now) {
  sac_replay_shard_stats_t ss;
  sac_replay_shard_stats(s->shard, &ss);
  double dt = s->prog_ns && now > s->prog_ns ? (double)(now - s->prog_ns) * 1e-9 : 0;
  uint64_t ins = ss.inserted_rows_total - s->prog_inserted, smp = ss.sampled_rows_total - s->prog_sampled;
  char wal[160], state[320];
  if (s->wal)
    snprintf(wal, sizeof wal, "wal %.1f MiB, %llu rows since the last snapshot%s",
             (double)sac_replay_wal_bytes(s->wal) / 1048576.0,
             (unsigned long long)(ss.inserted_rows_total - s->st.snapshot_inserted_total),
             s->wal_state == WAL_FSYNC_FAILED ? ", FSYNC FAILED (not acknowledging)"
             : s->wal_state == WAL_WRITES_FAIL ? ", WRITES FAIL (answering not durable)"
                                                : "");
  else
    snprintf(wal, sizeof wal, "durability %s", s->cfg.snapshot_path[0] ? "snapshot" : "none");
  SAC_INFO("replay",
           "shard %u: stored %llu (%.0f/s), holds %llu of %llu, sampled %llu rows (%.0f/s), actors %llu, "
           "episodes %llu, %s; %s",
           s->cfg.shard.shard_id, (unsigned long long)ss.inserted_rows_total, dt > 0 ? (double)ins / dt : 0.0,
           (unsigned long long)ss.size, (unsigned long long)ss.capacity,
           (unsigned long long)ss.sampled_rows_total, dt > 0 ? (double)smp / dt : 0.0,
           (unsigned long long)ss.actors, (unsigned long long)s->episodes_total, wal,
           progress_state(s, &ss, ins, state, sizeof state));
  s->prog_ns = now;
  s->prog_inserted = ss.inserted_rows_total;
  s->prog_sampled = ss.sampled_rows_total;
  s->next_progress_ns = now + (uint64_t)(s->cfg.log_interval_s * 1e9);
}

void sac_replay_server_stats(sac_replay_server_t *s, sac_replay_stats_t *out) {
  pthread_mutex_lock(&s->mu);
  *out = s->pub;
  pthread_mutex_unlock(&s->mu);
}

int sac_replay_server_run(sac_replay_server_t *s) {
  const uint64_t interval =
      s->cfg.snapshot_interval_s > 0 ? (uint64_t)(s->cfg.snapshot_interval_s * 1e9) : UINT64_MAX;
  uint64_t next_snap = interval == UINT64_MAX ? UINT64_MAX : sac_clock_ns() + interval;
  uint64_t last_pub = 0, pub_messages = 0; /* messages_total at the last publish */
  serving_set(s, 1);
  if (s->cfg.log_interval_s > 0) { /* the first line's rates count from here */
    sac_replay_shard_stats_t ss;
    sac_replay_shard_stats(s->shard, &ss);
    s->prog_ns = sac_clock_ns();
    s->prog_inserted = ss.inserted_rows_total;
    s->prog_sampled = ss.sampled_rows_total;
    s->next_progress_ns = s->prog_ns + (uint64_t)(s->cfg.log_interval_s * 1e9);
  }
  while (!atomic_load(&s->stop)) {
    sac_http_beat(s->beat);
    uint64_t now = sac_clock_ns();
    uint64_t wake = now + 50000000ull; /* 50 ms: notice stop requests */
    if (next_snap < wake)
      wake = next_snap;
    if (s->n_wacks && now + 1000000ull < wake)
      wake = now + 1000000ull;           /* acks wait for the fsync thread: look again in 1 ms */
    uint64_t close_at = wal_close_at(s); /* the closing SYNC record */
    if (close_at < wake)
      wake = close_at > now ? close_at : now;
    uint64_t dl = nearest_deadline(s);
    if (dl < wake)
      wake = dl;
    /* what the last messages changed is published within about 1 ms, also when no
     * message follows them (the last batch of a run, then silence) */
    if (s->st.messages_total != pub_messages && now + 1000000ull < wake)
      wake = now + 1000000ull;
    long timeout_ms = wake > now ? (long)((wake - now + 999999) / 1000000) : 0;
    sac_net_pollitem_t items[2] = {{s->smp, SAC_NET_POLLIN, 0}, {s->ins, SAC_NET_POLLIN, 0}};
    int rc = sac_net_poll(items, 2, timeout_ms);
    if (rc < 0 && rc != SAC_EINTR) {
      SAC_ERROR("replay", "poll failed (%s); stopping", sac_strerror(rc));
      break;
    }
    limiter_idle_update(s, sac_clock_ns(), 0);
    /* Alternate bounded bursts so neither side starves the other. */
    for (int round = 0; round < 64; round++) {
      int progress = 0;
      for (int i = 0; i < 16; i++) {
        uint64_t before = s->st.messages_total;
        handle_sample(s);
        if (s->st.messages_total == before)
          break;
        progress = 1;
      }
      release_held(s);
      for (int i = 0; i < 16; i++) {
        uint64_t before = s->st.messages_total;
        handle_insert(s);
        if (s->st.messages_total == before)
          break;
        progress = 1;
      }
      serve_pending(s);
      release_held(s);
      wal_commit(s, !progress); /* idle: no later batch would join this group */
      if (!progress)
        break;
    }
    if (atomic_exchange(&s->prov_req, 0))
      serve_provenance(s);
    /* the log past wal_max_mb: a snapshot empties it */
    int log_full = s->wal && s->cfg.wal_max_bytes && sac_replay_wal_bytes(s->wal) > s->cfg.wal_max_bytes;
    now = sac_clock_ns();
    if (s->pend_count)
      expire_pending(s, now);
    int asked = atomic_exchange(&s->snap_req, 0),
        due = (now >= next_snap || log_full) && now >= s->snap_retry_ns;
    if (asked || due) {
      snapshot(s, asked ? "requested" : now >= next_snap ? "periodic" : "log full");
      next_snap = interval == UINT64_MAX ? UINT64_MAX : sac_clock_ns() + interval;
    }
    if (now - last_pub > 1000000ull) {
      publish(s);
      last_pub = now, pub_messages = s->st.messages_total;
    }
    if (s->cfg.log_interval_s > 0 && now >= s->next_progress_ns)
      log_progress(s, now);
  }
  /* Held batches were never acknowledged: the actors resend them. */
  int rc = 0;
  wal_commit(s, 2);
  if (s->cfg.snapshot_path[0]) {
    uint64_t fails = s->st.snapshot_failures_total;
    snapshot(s, "final");
    if (s->st.snapshot_failures_total != fails)
      rc = SAC_EIO;
  }
  publish(s);
  serving_set(s, 0);
  return rc ? rc : s->wal_state == WAL_FSYNC_FAILED ? SAC_EIO : 0;
}

static void *thread_main(void *arg) {
  sac_replay_server_t *s = arg;
  s->thread_rc = sac_replay_server_run(s);
  return NULL;
}

int sac_replay_server_start(sac_replay_server_t *s) {
  if (atomic_exchange(&s->running, 1))
    return SAC_ESTATE;
  atomic_store(&s->stop, 0);
  serving_set(s, 1); /* provenance requests made from now on wait for the thread */
  if (pthread_create(&s->thread, NULL, thread_main, s) != 0) {
    serving_set(s, 0);
    atomic_store(&s->running, 0);
    return SAC_ENOMEM;
  }
  return 0;
}

void sac_replay_server_stop(sac_replay_server_t *s) { atomic_store(&s->stop, 1); }

void sac_replay_server_request_snapshot(sac_replay_server_t *s) { atomic_store(&s->snap_req, 1); }

int sac_replay_server_join(sac_replay_server_t *s) {
  if (!atomic_load(&s->running))
    return SAC_ESTATE;
  pthread_join(s->thread, NULL);
  atomic_store(&s->running, 0);
  return s->thread_rc;
}
