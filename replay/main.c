/* sac-replay: one replay shard as a process. A thin main around replay/server.h: reads
 * the configuration (defaults < config file < SAC_* environment < command line, with
 * --help and --version), serves until SIGINT or SIGTERM, writes a final snapshot and
 * exits 0. SIGUSR1 asks for a snapshot now. `--print_provenance PATH` prints the
 * provenance index of the snapshot at PATH and its write-ahead log (PATH.wal, or
 * --wal_path) and exits; a running shard serves the same on /provenance of its metrics
 * port (docs/REPLAY.md).
 *
 * Exit codes: 0 stopped cleanly by SIGTERM (or --help/--version), 130 stopped cleanly
 * by SIGINT (Ctrl-C; a second one exits at once, common/sigstop.h), 2 configuration
 * error, 3 unusable snapshot (refused), 4 cannot bind, 1 anything else (e.g. the final
 * snapshot failed). */
#include <malloc.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "common/auth.h"
#include "common/config.h"
#include "common/error.h"
#include "common/http.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/net.h"
#include "common/sigstop.h"
#include "replay/inspect.h"
#include "replay/server.h"
#include "replay/server_metrics.h"
#include "replay/sizes.h"

typedef struct {
  int shard_id;
  char insert_endpoint[256];
  char sample_endpoint[256];
  int64_t capacity;
  int obs_dim, act_dim;
  char env[512];
  int fp16_obs, fp16_actions;
  char sampler[32];
  double alpha, priority_eps;
  int64_t min_size;
  double samples_per_insert, error_buffer;
  int max_batch_rows, max_sample_batch, max_actors, max_streams;
  int64_t seed;
  int64_t max_msg_bytes;
  int insert_credit, max_pending_samples, max_sample_timeout_ms, max_env_id;
  int max_held_batches;
  int64_t max_held_bytes;
  int limiter_idle_ms;
  int log_interval_s;
  char snapshot_path[1024];
  double snapshot_interval_s;
  int start_empty_on_bad_snapshot;
  char ready_file[1024];
  char metrics_addr[64];
  int metrics_port;
  char curve_key[1024], curve_allow[1024];
  double max_abs_value;
  int64_t max_reply_queue_bytes;
  int max_sample_peers;
  int64_t max_seq_jump;
  double max_session_ahead_s, actor_idle_s;
  int adopt_snapshot;
  char durability[16];
  int wal_sync_ms;
  char wal_path[1024];
  int wal_truncate_corrupt;
  int64_t wal_max_mb;
  char print_provenance[1024];
} opts_t;

#define O(f) offsetof(opts_t, f)
static const sac_cfg_opt_t k_opts[] = {
    {"shard_id", SAC_CFG_INT, O(shard_id), 0, "0", 0, 4095, "this shard's id (in every sample index)"},
    {"insert_endpoint", SAC_CFG_STRING, O(insert_endpoint), 256, "tcp://*:5560", SAC_CFG_UNBOUNDED,
     "ZeroMQ endpoint for inserts from actors (tcp://host:* picks a free port)"},
    {"sample_endpoint", SAC_CFG_STRING, O(sample_endpoint), 256, "tcp://*:5561", SAC_CFG_UNBOUNDED,
     "ZeroMQ endpoint for sample requests and priority updates from learners"},
    {"capacity", SAC_CFG_INT64, O(capacity), 0, "1000000", 1024, 4294967294.0, "transitions the ring holds"},
    {"env", SAC_CFG_STRING, O(env), 512, "", SAC_CFG_UNBOUNDED,
     "environment ID whose sizes the shard takes (as sac-actor --env); empty: --obs_dim/--act_dim, or the "
     "first "
     "actor's batch"},
    {"obs_dim", SAC_CFG_INT, O(obs_dim), 0, "0", 0, 65536,
     "observation size (0: from --env, else from the first actor's batch; later batches of other sizes are "
     "refused)"},
    {"act_dim", SAC_CFG_INT, O(act_dim), 0, "0", 0, 65536, "action size (0: as obs_dim)"},
    {"fp16_obs", SAC_CFG_BOOL, O(fp16_obs), 0, "0", SAC_CFG_UNBOUNDED, "store observations as float16"},
    {"fp16_actions", SAC_CFG_BOOL, O(fp16_actions), 0, "0", SAC_CFG_UNBOUNDED, "store actions as float16"},
    {"sampler", SAC_CFG_STRING, O(sampler), 32, "uniform", SAC_CFG_UNBOUNDED, "uniform | prioritized"},
    {"priority_alpha", SAC_CFG_DOUBLE, O(alpha), 0, "0.6", 0, 10, "prioritized: priority exponent"},
    {"priority_eps", SAC_CFG_DOUBLE, O(priority_eps), 0, "1e-6", 0, 1e6, "prioritized: added to priorities"},
    {"min_size", SAC_CFG_INT64, O(min_size), 0, "500", 1, 4294967294.0,
     "transitions before sampling starts (500: the embedded default's shards, its learning_starts 1000 over "
     "2 shards)"},
    {"samples_per_insert", SAC_CFG_DOUBLE, O(samples_per_insert), 0, "0", 0, 1e9,
     "sampled transitions allowed per inserted one (0: no ratio limit); batch x updates per step"},
    {"error_buffer", SAC_CFG_DOUBLE, O(error_buffer), 0, "0", 0, 1e18,
     "rate limiter slack in sampled transitions (0: automatic)"},
    {"max_batch_rows", SAC_CFG_INT, O(max_batch_rows), 0, "4096", 1, 1 << 24, "rows per inserted batch"},
    {"max_sample_batch", SAC_CFG_INT, O(max_sample_batch), 0, "4096", 1, 1 << 20, "rows per sample request"},
    {"max_actors", SAC_CFG_INT, O(max_actors), 0, "4096", 1, 1 << 24, "actors tracked for deduplication"},
    {"max_streams", SAC_CFG_INT, O(max_streams), 0, "65536", 1, 1 << 28, "(actor, env) streams remembered"},
    {"seed", SAC_CFG_INT64, O(seed), 0, "1", SAC_CFG_UNBOUNDED, "sampling seed"},
    {"max_msg_bytes", SAC_CFG_INT64, O(max_msg_bytes), 0, "4194304", 4096, 1073741824.0,
     "largest message accepted (ZMQ_MAXMSGSIZE is twice this)"},
    {"inflight_batches", SAC_CFG_INT, O(insert_credit), 0, "16", 1, 64,
     "batches of one actor stored and not yet acknowledged, at most (the credit each ack carries)"},
    {"max_held_batches", SAC_CFG_INT, O(max_held_batches), 0, "4096", 1, 1 << 20,
     "insert batches held while the rate limiter holds inserts back (more: answered busy, resent later)"},
    {"max_held_bytes", SAC_CFG_INT64, O(max_held_bytes), 0, "67108864", 4096, 68719476736.0,
     "bytes of held insert batches (at least max_msg_bytes; touched only while inserts are held)"},
    {"limiter_idle_ms", SAC_CFG_INT, O(limiter_idle_ms), 0, "0", 0, 86400000,
     "no sample request this long after one (the learner has ended): the rate limiter stops holding inserts "
     "back, so held batches are stored and acknowledged and stopping actors can drain, until the next "
     "request (0: never, the default: a learner away keeps the ratio and the shard's memory flat)"},
    {"log_interval_s", SAC_CFG_INT, O(log_interval_s), 0, "10", 0, 86400,
     "seconds between progress lines (stored, sampled, actors, write-ahead log, what the shard waits for; "
     "0: none)"},
    {"max_pending_samples", SAC_CFG_INT, O(max_pending_samples), 0, "1024", 1, 1 << 20,
     "sample requests the rate limiter may hold"},
    {"max_sample_timeout_ms", SAC_CFG_INT, O(max_sample_timeout_ms), 0, "10000", 0, 600000,
     "longest a sample request may wait"},
    {"max_env_id", SAC_CFG_INT, O(max_env_id), 0, "1048576", 1, 2147483647.0, "env ids must be below this"},
    {"snapshot_path", SAC_CFG_STRING, O(snapshot_path), 1024, "", SAC_CFG_UNBOUNDED,
     "snapshot file (empty: no snapshots); restored at start"},
    {"snapshot_interval_s", SAC_CFG_DOUBLE, O(snapshot_interval_s), 0, "60", 0, 1e9,
     "seconds between snapshots (0: only at shutdown)"},
    {"adopt_snapshot", SAC_CFG_BOOL, O(adopt_snapshot), 0, "0", SAC_CFG_UNBOUNDED,
     "load a snapshot written by another shard_id (else refused: exit code 3)"},
    {"max_abs_value", SAC_CFG_DOUBLE, O(max_abs_value), 0, "1e6", 0, 3e38,
     "inserted observations, actions and rewards must be within +-this (0: any finite value)"},
    {"max_reply_queue_bytes", SAC_CFG_INT64, O(max_reply_queue_bytes), 0, "16777216", 1, 1073741824.0,
     "bytes of sample replies queued for one connection that does not read (beyond: dropped, counted)"},
    {"max_sample_peers", SAC_CFG_INT, O(max_sample_peers), 0, "16", 1, 4096,
     "connections served samples at once (one silent for 10 s gives its place to a new one)"},
    {"max_seq_jump", SAC_CFG_INT64, O(max_seq_jump), 0, "1048576", 0, 9.2e18,
     "largest move of an actor's dedup window by acked_through in one batch (0: any)"},
    {"max_session_ahead_s", SAC_CFG_DOUBLE, O(max_session_ahead_s), 0, "3600", 0, 1e9,
     "refuse batches whose session starts this far ahead of this host's clock (0: no check)"},
    {"actor_idle_s", SAC_CFG_DOUBLE, O(actor_idle_s), 0, "600", 0, 1e9,
     "an actor silent this long is forgotten when max_actors are tracked and a new one arrives (0: never)"},
    {"start_empty_on_bad_snapshot", SAC_CFG_BOOL, O(start_empty_on_bad_snapshot), 0, "0", SAC_CFG_UNBOUNDED,
     "move an unusable snapshot aside and start empty instead of refusing to start"},
    {"durability", SAC_CFG_STRING, O(durability), 16, "wal", SAC_CFG_UNBOUNDED,
     "wal (acknowledged batches survive kill -9 and a power cut: logged and fsynced before the ack; needs "
     "snapshot_path, refuses to start without one) | "
     "snapshot (only what the last snapshot holds; needs snapshot_path too) | none (memory only; snapshot_path "
     "ignored)"},
    {"wal_sync_ms", SAC_CFG_INT, O(wal_sync_ms), 0, "2", -1, 60000,
     "group commit: the longest an ack waits for the fsync covering its batch (0: fsync each batch; -1: no "
     "fsync, survives a process kill but not a power cut)"},
    {"wal_path", SAC_CFG_STRING, O(wal_path), 1024, "", SAC_CFG_UNBOUNDED,
     "write-ahead log file (empty: <snapshot_path>.wal)"},
    {"wal_truncate_corrupt", SAC_CFG_BOOL, O(wal_truncate_corrupt), 0, "0", SAC_CFG_UNBOUNDED,
     "a log whose acknowledged records are damaged (a sync record after the damage proves it): copy it aside "
     "and cut it there instead of refusing to start (the batches after the damage are lost)"},
    {"wal_max_mb", SAC_CFG_INT64, O(wal_max_mb), 0, "1024", 0, 1e9,
     "take a snapshot (which empties the log) when the log grows past this many MiB (0: never)"},
    {"print_provenance", SAC_CFG_STRING, O(print_provenance), 1024, "", SAC_CFG_UNBOUNDED,
     "print the provenance of the snapshot at this path and its log, then exit (no shard is started)"},
    {"ready_file", SAC_CFG_STRING, O(ready_file), 1024, "", SAC_CFG_UNBOUNDED,
     "write the bound endpoints and pid here once serving (for scripts and tests)"},
    {"metrics_addr", SAC_CFG_STRING, O(metrics_addr), 64, "0.0.0.0", SAC_CFG_UNBOUNDED,
     "address the /metrics and /healthz endpoint binds (numeric)"},
    {"metrics_port", SAC_CFG_INT, O(metrics_port), 0, "5581", -1, 65535,
     "port of the /metrics and /healthz endpoint (0: a free port, logged; -1: no endpoint)"},
    {"curve_key", SAC_CFG_STRING, O(curve_key), 1024, "", SAC_CFG_UNBOUNDED,
     "CurveZMQ: this shard's key pair, a NAME.key file from sac-keygen (empty: no CURVE; "
     "docs/RELIABILITY.md)"},
    {"curve_allow", SAC_CFG_STRING, O(curve_allow), 1024, "", SAC_CFG_UNBOUNDED,
     "CurveZMQ: file of the client public keys (actors, learners) allowed to connect; required with "
     "curve_key"},
};
#undef O

static sac_replay_server_t *volatile g_srv;
static volatile sig_atomic_t g_stop_sizing; /* SIGINT/SIGTERM while waiting for sizes */

static atomic_int g_stopping;

/* The first SIGINT/SIGTERM (on common/sigstop's thread): says what happens now, and
 * stops the wait for sizes or the server. */
static void on_stop(int sig, void *ud) {
  const char *snap = ud;
  SAC_INFO("replay", "%s: stopping: %s, then exit (a second Ctrl-C exits at once)", sac_sigstop_name(sig),
           snap[0] ? "final snapshot" : "no snapshot to write");
  g_stop_sizing = 1;
  if (g_srv)
    sac_replay_server_stop(g_srv);
}

static void on_snapshot(int sig) {
  (void)sig;
  if (g_srv)
    sac_replay_server_request_snapshot(g_srv);
}

/* Exit code 3 (unusable stored state) rather than 2 when the refused start found a
 * snapshot or a write-ahead log. */
static int stored_files_exist(const sac_replay_server_config_t *c) {
  if (!c->snapshot_path[0] || c->durability == SAC_REPLAY_DURABILITY_NONE)
    return 0;
  char wal[1100];
  snprintf(wal, sizeof wal, "%s%s", c->wal_path[0] ? c->wal_path : c->snapshot_path,
           c->wal_path[0] ? "" : ".wal");
  return access(c->snapshot_path, F_OK) == 0 ||
         (c->durability == SAC_REPLAY_DURABILITY_WAL && access(wal, F_OK) == 0);
}

/* --print_provenance: the snapshot's index plus its log's records, on stdout. */
static int print_provenance(const sac_replay_server_config_t *c, const char *snapshot) {
  char wal[1100];
  snprintf(wal, sizeof wal, "%s%s", c->wal_path[0] ? c->wal_path : snapshot, c->wal_path[0] ? "" : ".wal");
  char *text = NULL;
  size_t len = 0;
  int rc = sac_replay_provenance_from_files(c, snapshot, wal, &text, &len);
  if (rc)
    return 1;
  int ok = fwrite(text, 1, len, stdout) == len && fflush(stdout) == 0;
  free(text);
  return ok ? 0 : 1;
}

/* GET /provenance on the metrics port: rendered by the serving thread. */
static int render_provenance(void *user, const char *query, size_t qlen, char **text, size_t *len) {
  (void)query;
  (void)qlen;
  return sac_replay_server_provenance(user, 5000, text, len);
}

static int write_ready(const char *path, const sac_replay_server_t *s, const sac_http_t *http) {
  char tmp[1100];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f)
    return SAC_EIO;
  fprintf(f, "insert=%s\nsample=%s\npid=%ld\n", sac_replay_server_insert_endpoint(s),
          sac_replay_server_sample_endpoint(s), (long)getpid());
  if (http)
    fprintf(f, "metrics_port=%d\n", sac_http_port(http));
  if (fclose(f) != 0 || rename(tmp, path) != 0)
    return SAC_EIO;
  return 0;
}

/* /healthz: 503 while snapshots fail (sac_replay_server_healthy) */
static int health(void *ud, char *why, size_t cap) { return sac_replay_server_healthy(ud, why, cap); }

/* The shard's sizes from --obs_dim/--act_dim or --env (see replay/sizes.h). Returns 1 when
 * c holds them, 0 when they are to come from the first batch, -1 on a bad combination
 * (logged with its fix). */
static int size_from_options(const opts_t *o, sac_replay_server_config_t *c) {
  if ((o->obs_dim == 0) != (o->act_dim == 0)) {
    SAC_ERROR("replay",
              "give both --obs_dim and --act_dim, or neither (then --env ID or the first actor's batch "
              "sizes the shard)");
    return -1;
  }
  uint32_t obs = (uint32_t)o->obs_dim, act = (uint32_t)o->act_dim;
  if (o->env[0]) {
    uint32_t eo, ea;
    if (sac_replay_sizes_from_env(o->env, &eo, &ea) != 0)
      return -1;
    if (obs && (obs != eo || act != ea)) {
      SAC_ERROR("replay", "--obs_dim %u --act_dim %u contradict --env %s (%u, %u): give one of them", obs,
                act, o->env, eo, ea);
      return -1;
    }
    obs = eo;
    act = ea;
  }
  const char *from = o->env[0] ? " from --env " : "";
  if (!obs && o->snapshot_path[0] && access(o->snapshot_path, F_OK) == 0 &&
      strcmp(o->durability, "none") != 0) { /* a restart: the snapshot it restores knows */
    sac_replay_shard_config_t sc = c->shard;
    int rc = sac_replay_shard_snapshot_config(o->snapshot_path, &sc);
    if (rc) {
      SAC_ERROR("replay",
                "cannot read the sizes of the snapshot %s (%s): give --env ID or --obs_dim and --act_dim",
                o->snapshot_path, sac_strerror(rc));
      return -1;
    }
    obs = sc.obs_dim;
    act = sc.act_dim;
    from = " from the snapshot ";
  }
  c->shard.obs_dim = obs;
  c->shard.act_dim = act;
  if (obs)
    SAC_INFO("replay", "sizes: obs_dim %u, act_dim %u%s%s", obs, act, from,
             o->env[0] ? o->env : (from[0] ? o->snapshot_path : ""));
  return obs ? 1 : 0;
}

/* Waits for the first actor's batch on the insert endpoint and sizes c from it. On a
 * context of its own, made with the same CurveZMQ settings: destroying it closes the
 * listening socket before the shard binds the same endpoint (a socket closed in a live
 * context is closed later, by its I/O thread). 0, SAC_EINTR (stopped), or an error. */
static int size_from_first_batch(sac_replay_server_config_t *c, const sac_net_curve_t *curve) {
  sac_net_ctx_t *ctx = sac_net_ctx_new(1);
  int err = ctx ? sac_net_ctx_set_curve(ctx, curve) : SAC_ENOMEM;
  if (!err)
    err = sac_replay_sizes_from_first_batch(ctx, c->insert_endpoint, c->max_msg_bytes, &g_stop_sizing,
                                            c->insert_endpoint, sizeof c->insert_endpoint, &c->shard.obs_dim,
                                            &c->shard.act_dim);
  sac_net_ctx_destroy(&ctx);
  return err;
}

/* Every failing exit says why, last, whatever was logged before it. */
static int exit_why(int code, const char *what, int err) {
  SAC_ERROR("replay", "exiting with code %d: %s (%s)", code, what, sac_strerror(err));
  return code;
}

int main(int argc, char **argv) {
  opts_t o;
  memset(&o, 0, sizeof o);
  int action = SAC_CFG_RUN;
  if (sac_config_load(
          k_opts, sizeof k_opts / sizeof k_opts[0], &o, argc, argv,
          "sac-replay: one replay shard (storage, samplers, rate limiter, snapshots) serving actors and "
          "learners over ZeroMQ.",
          &action) != 0)
    return 2;
  if (action == SAC_CFG_EXIT_OK)
    return 0;
  sac_replay_server_config_t c;
  sac_replay_server_config_default(&c);
  c.shard.shard_id = (uint32_t)o.shard_id;
  c.shard.capacity = (uint64_t)o.capacity;
  int sizes = size_from_options(&o, &c);
  if (sizes < 0)
    return exit_why(2, "the shard's sizes cannot be set", SAC_ECONFIG);
  c.shard.obs_f16 = o.fp16_obs;
  c.shard.act_f16 = o.fp16_actions;
  if (!strcasecmp(o.sampler, "uniform")) {
    c.shard.sampler = SAC_REPLAY_UNIFORM;
  } else if (!strcasecmp(o.sampler, "prioritized") || !strcasecmp(o.sampler, "prioritised")) {
    c.shard.sampler = SAC_REPLAY_PRIORITIZED;
  } else {
    SAC_ERROR("replay", "sampler must be uniform or prioritized, not '%s'", o.sampler);
    return exit_why(2, "bad sampler option", SAC_ECONFIG);
  }
  c.shard.alpha = o.alpha;
  c.shard.priority_eps = o.priority_eps;
  c.shard.min_size = (uint64_t)o.min_size;
  c.shard.samples_per_insert = o.samples_per_insert;
  c.shard.error_buffer = o.error_buffer;
  c.shard.max_batch_rows = (uint32_t)o.max_batch_rows;
  c.shard.max_sample_batch = (uint32_t)o.max_sample_batch;
  c.shard.max_actors = (uint32_t)o.max_actors;
  c.shard.max_streams = (uint32_t)o.max_streams;
  c.shard.seed = (uint64_t)o.seed;
  snprintf(c.insert_endpoint, sizeof c.insert_endpoint, "%s", o.insert_endpoint);
  snprintf(c.sample_endpoint, sizeof c.sample_endpoint, "%s", o.sample_endpoint);
  c.max_msg_bytes = (size_t)o.max_msg_bytes;
  c.insert_credit = (uint32_t)o.insert_credit;
  c.max_pending_samples = (uint32_t)o.max_pending_samples;
  c.max_held_batches = (uint32_t)o.max_held_batches;
  c.max_held_bytes = (size_t)o.max_held_bytes;
  c.limiter_idle_ms = (uint32_t)o.limiter_idle_ms;
  c.log_interval_s = o.log_interval_s;
  c.max_sample_timeout_ms = (uint32_t)o.max_sample_timeout_ms;
  c.max_env_id = (uint32_t)o.max_env_id;
  snprintf(c.snapshot_path, sizeof c.snapshot_path, "%s", o.snapshot_path);
  c.snapshot_interval_s = o.snapshot_interval_s;
  c.start_empty_on_bad_snapshot = o.start_empty_on_bad_snapshot;
  c.shard.adopt_snapshot = o.adopt_snapshot;
  c.shard.max_seq_jump = (uint64_t)o.max_seq_jump;
  c.shard.max_session_ahead_s = o.max_session_ahead_s;
  c.shard.actor_idle_s = o.actor_idle_s;
  c.max_abs_value = o.max_abs_value;
  c.max_reply_queue_bytes = (size_t)o.max_reply_queue_bytes;
  c.max_sample_peers = (uint32_t)o.max_sample_peers;
  /* Large messages (sample replies, batches) are mmap'd and given back to the system
   * when freed: with glibc's adaptive threshold they came from the heap after the
   * first free, and a burst of queued replies stayed in the process for good. */
  mallopt(M_MMAP_THRESHOLD, 256 * 1024);
  if (sac_replay_durability_parse(o.durability, &c.durability) != 0) {
    SAC_ERROR("replay", "durability must be wal, snapshot or none, not '%s'", o.durability);
    return 2;
  }
  c.wal_sync_ms = o.wal_sync_ms;
  snprintf(c.wal_path, sizeof c.wal_path, "%s", o.wal_path);
  c.wal_truncate_corrupt = o.wal_truncate_corrupt;
  c.wal_max_bytes = (uint64_t)o.wal_max_mb << 20;
  if (o.print_provenance[0])
    return print_provenance(&c, o.print_provenance);

  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sigemptyset(&sa.sa_mask);
  sa.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &sa, NULL);

  /* CurveZMQ (docs/RELIABILITY.md): on the context both endpoints are made in */
  sac_sigstop_install("sac-replay", &g_stopping, on_stop, c.snapshot_path);
  sac_net_curve_t curve;
  int err = sac_auth_configure(o.curve_key, "", o.curve_allow, SAC_AUTH_BINDS, &curve);
  if (err)
    return exit_why(2, "the CurveZMQ options (curve_key, curve_allow) cannot be used", err);
  sac_net_ctx_t *ctx = sac_net_ctx_new(1);
  err = ctx ? sac_net_ctx_set_curve(ctx, &curve) : SAC_ENOMEM;
  if (!err && sizes == 0) /* none given: the first actor's batch says */
    err = size_from_first_batch(&c, &curve);
  sac_net_curve_clear(&curve);
  if (err) {
    sac_net_ctx_destroy(&ctx);
    if (err == SAC_EINTR) /* stopped while waiting for the first batch */
      return sac_sigstop_exit_code(0);
    if (err == SAC_ENET)
      return exit_why(4, "cannot bind the insert endpoint", err);
    return exit_why(1, sizes ? "cannot create the ZeroMQ context" : "cannot wait for the first batch", err);
  }
  sac_replay_server_t *srv = sac_replay_server_new(&c, ctx, &err);
  sac_net_ctx_destroy(&ctx); /* the server holds its own reference */
  if (!srv) {
    if (err == SAC_ECONFIG)
      return exit_why(stored_files_exist(&c) ? 3 : 2,
                      "the configuration, the snapshot or the log was refused", err);
    return exit_why(err == SAC_ENET ? 4 : 1,
                    err == SAC_ENET ? "cannot bind an endpoint" : "cannot start the shard", err);
  }
  g_srv = srv;
  if (sac_sigstop_signal()) /* stopped while it started */
    sac_replay_server_stop(srv);
  sa.sa_handler = on_snapshot;
  sigaction(SIGUSR1, &sa, NULL);
  /* the metrics endpoint (docs/METRICS.md), stopped before the server goes */
  sac_metrics_t *metrics = NULL;
  sac_http_t *http = NULL;
  if (o.metrics_port >= 0 && (metrics = sac_metrics_new()) != NULL) {
    if (sac_metrics_add_process(metrics) != 0 ||
        sac_metrics_add_build_info(metrics, "sac-replay", SAC_VERSION) != 0 ||
        sac_replay_metrics_register(metrics, srv, c.shard.shard_id,
                                    c.snapshot_path[0] != 0 && c.durability != SAC_REPLAY_DURABILITY_NONE,
                                    NULL) != 0 ||
        sac_auth_metrics_register(metrics) != 0)
      SAC_WARN("replay", "some metrics series are missing (out of memory)");
    http = sac_http_serve_metrics_health("replay", o.metrics_addr, o.metrics_port, metrics, health, srv);
    if (http && sac_http_add_route(http, "/provenance", render_provenance, srv) != 0)
      SAC_WARN("replay", "no /provenance route (out of memory)");
    sac_replay_server_set_beat(srv, http);
  }
  if (o.ready_file[0] && write_ready(o.ready_file, srv, http) != 0)
    SAC_WARN("replay", "cannot write the ready file %s", o.ready_file);
  int rc = sac_replay_server_run(srv);
  g_srv = NULL;
  sac_http_stop(&http);
  sac_metrics_destroy(&metrics);
  sac_replay_server_destroy(&srv);
  if (rc)
    return exit_why(1, "the final snapshot failed, or the write-ahead log failed an fsync", rc);
  SAC_INFO("replay", "stopped");
  return sac_sigstop_exit_code(0);
}
