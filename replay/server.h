/* The replay shard server: one shard (shard.h) behind two ZeroMQ ROUTER endpoints, one
 * for inserts from actors and one for sample requests, priority updates and info
 * requests from learners. It runs on one thread, given endpoint strings and optionally
 * a shared network context, so the learner can embed S shards in its own process over
 * inproc:// and `sac-replay` is a thin main around the same code over tcp://.
 *
 * Flow control: each stored batch is acknowledged (InsertAck: the batch's seq, the
 * actor's cumulative acked_seq, and credit = how many batches the actor may keep
 * unacknowledged). When the rate limiter holds inserts back the server holds the
 * batches (validated raw bytes, in arrival order, bounded by max_held_batches and
 * max_held_bytes; a resend of a held batch is dropped), acknowledges nothing and grants
 * credit 1 until it can store again, so the actors' windows fill and they wait; memory
 * stays bounded by the actors' windows. It never stops reading its endpoints (a ZeroMQ
 * connection whose queue is full cannot answer heartbeats). Held batches beyond the
 * bounds are answered "busy" and resent by the client later. When no sample request has
 * come for limiter_idle_ms since the last one (the learner has gone), the limiter stops
 * holding inserts back, so that held batches are stored and acknowledged and stopping
 * actors can drain; the next sample request restores it. Sample requests the limiter holds back are
 * queued (bounded) until they can be served or their timeout passes (then answered with an error).
 *
 * Every message is decoded and validated by common/wire.h; a rejected one is logged
 * (rate-limited per reason), counted per reason and answered with an error, and the
 * server goes on serving everyone else. Snapshots are taken every snapshot_interval_s
 * and when the server stops; at start the last snapshot is restored, and an unusable
 * one stops the start with a clear error unless start_empty_on_bad_snapshot is set
 * (then it is moved aside to <path>.bad-<time> and the shard starts empty).
 *
 * Durability (docs/REPLAY.md, docs/RELIABILITY.md): with SAC_REPLAY_DURABILITY_WAL (the default) every stored
 * batch is appended to a write-ahead log (replay/wal.h) before it is acknowledged, and
 * its acknowledgement is held until an fsync covers it (group commit, the fsyncs on a
 * thread of their own: one is asked for once wal_sync_ms has passed since the oldest
 * batch not yet covered, or earlier when no further batch is waiting to be read;
 * wal_sync_ms 0 asks after each batch, -1 never syncs:
 * acknowledged then means "in the kernel", which survives a kill -9 of the shard but not
 * a power cut). Each snapshot empties the log; at start the snapshot is restored and
 * the log replayed on top. The log needs snapshots to be rotated, so it is kept only
 * when snapshot_path is set (WAL and SNAPSHOT without one refuse to start). SNAPSHOT
 * keeps only the periodic snapshots (acknowledged batches since the last one are lost
 * with the process); NONE keeps nothing.
 *
 * When the log cannot be written (a full disk, a write error) inserts are answered
 * "not durable" (InsertAck status NOT_DURABLE: the actor keeps the batch and resends it
 * later) while the shard serves samples and retries the log, resuming by itself; after a
 * failed fsync it acknowledges nothing more until restarted (fail-stop for inserts).
 *
 * Thread-safety: sac_replay_server_stop, sac_replay_server_stats and
 * sac_replay_server_provenance may be called from any thread (stop also from a signal
 * handler); everything else from the owner. */
#ifndef SAC_REPLAY_SERVER_H
#define SAC_REPLAY_SERVER_H
#include <stddef.h>
#include <stdint.h>

#include "common/http.h"
#include "common/net.h"
#include "common/wire.h"
#include "replay/shard.h"

typedef enum {
  SAC_REPLAY_DURABILITY_WAL = 0,      /* log + snapshots: an acknowledged batch survives kill -9 */
  SAC_REPLAY_DURABILITY_SNAPSHOT = 1, /* snapshots only */
  SAC_REPLAY_DURABILITY_NONE = 2,     /* memory only: no log, no snapshots (snapshot_path ignored) */
} sac_replay_durability_t;

/* "wal" | "snapshot" | "none" -> *out; 0 or SAC_EINVAL. */
int sac_replay_durability_parse(const char *s, sac_replay_durability_t *out);
const char *sac_replay_durability_name(sac_replay_durability_t d);

typedef struct {
  sac_replay_shard_config_t shard;
  char insert_endpoint[256];      /* e.g. tcp port 5560 on all interfaces, "inproc://replay-0-insert" */
  char sample_endpoint[256];      /* e.g. tcp port 5561 on all interfaces */
  size_t max_msg_bytes;           /* also ZMQ_MAXMSGSIZE (twice this: see REPLAY.md) */
  uint32_t insert_credit;         /* batches each actor may keep unacknowledged (<= 64) */
  uint32_t max_pending_samples;   /* sample requests queued by the rate limiter */
  uint32_t max_sample_timeout_ms; /* caps the timeout a request asks for */
  uint32_t max_env_id;
  char snapshot_path[1024];   /* "" : no snapshots */
  double snapshot_interval_s; /* <= 0: only when stopping */
  int start_empty_on_bad_snapshot;
  uint32_t max_held_batches; /* inserts held while the rate limiter holds them back */
  size_t max_held_bytes;     /* and their bytes (>= max_msg_bytes); beyond: answered "busy" */
  uint32_t limiter_idle_ms;  /* no sample request this long, after one: the rate limiter stops
                                holding inserts back until the next one (0: never, default) */
  double log_interval_s;     /* a progress line (stored, sampled, actors, WAL) this often; 0: none */
  /* Hostile or broken peers (docs/REPLAY.md "Memory bounds"): */
  double max_abs_value;         /* |obs|, |action|, |reward| of inserted transitions (0: finite only) */
  size_t max_reply_queue_bytes; /* sample replies queued for one connection (ZMQ_SNDHWM sized from
                                   the largest reply; beyond: dropped and counted) */
  uint32_t max_sample_peers;    /* connections served samples at once (an idle one is replaced) */

  sac_replay_durability_t durability; /* default WAL */
  int wal_sync_ms;                    /* group commit window (ms); 0: fsync each batch; -1: no fsync */
  char wal_path[1024];                /* "": <snapshot_path>.wal */
  int wal_truncate_corrupt; /* a log corrupt in the middle: keep it aside and cut it (0: refuse to start) */
  uint64_t wal_max_bytes;   /* a snapshot is taken when the log grows past this; 0: never */
} sac_replay_server_config_t;

/* Defaults: shard defaults, tcp ports 5560 and 5561 on all interfaces, 4 MiB messages, credit 16,
 * 1024 pending samples, 10 s maximum sample timeout, env ids < 2^20, no snapshots,
 * interval 60 s, max_abs_value 1e6, 16 MiB of replies per connection, 16 sample peers,
 * durability wal (needs a snapshot path), wal_sync_ms 2, log path <snapshot_path>.wal,
 * a snapshot every 1 GiB of log. */
void sac_replay_server_config_default(sac_replay_server_config_t *c);

/* Counters and gauges for metrics (issue 5 exports them). */
typedef struct {
  sac_replay_shard_stats_t shard;
  uint64_t rejected_total[SAC_WIRE_R_COUNT]; /* per sac_wire_reason_t */
  uint64_t messages_total;
  uint64_t insert_waits_total; /* batches the rate limiter held back */
  double insert_wait_seconds_total;
  uint64_t sample_waits_total; /* requests the rate limiter queued */
  double sample_wait_seconds_total;
  uint64_t sample_timeouts_total; /* queued requests answered with a timeout */
  uint64_t sample_busy_total;     /* requests refused because the queue was full */
  uint64_t replies_dropped_total; /* acks/batches to peers that are gone or full */
  uint64_t info_requests_total;
  uint32_t pending_samples;
  int insert_parked;              /* 1 while inserts are held */
  uint32_t insert_held_batches;   /* held now */
  size_t insert_held_bytes;       /* bytes of held_buf in use now */
  uint64_t held_duplicates_total; /* resends of a held batch, dropped */
  uint64_t held_full_total;       /* inserts answered "busy": the held queue was full */
  uint64_t snapshots_total, snapshot_failures_total;
  uint64_t snapshot_inserted_total; /* inserted_rows_total covered by the last snapshot */
  uint64_t last_snapshot_unix_ns;   /* 0: none yet (age = now - this) */
  double last_snapshot_seconds;     /* how long writing it took */
  uint64_t last_snapshot_bytes;
  uint64_t restored_transitions;       /* restored from a snapshot (and the log) at start */
  uint64_t replies_unencodable_total;  /* replies over max_msg_bytes: an error was sent instead */
  uint64_t sample_peers_refused_total; /* sample requests refused: max_sample_peers busy */
  uint64_t stale_temporaries_removed;  /* <snapshot>.tmp.<pid> files of dead processes removed at start */
  int snapshot_failing;                /* the last snapshot attempt failed (health) */

  /* write-ahead log */
  uint64_t incarnation;       /* this server object's start time in µs since the epoch, unique per process */
  int wal_enabled;            /* durability wal with a log file */
  uint64_t wal_records_total; /* batches appended */
  uint64_t wal_syncs_total;   /* fsyncs (group commits) */
  double wal_sync_seconds_total; /* time spent in them */
  uint64_t wal_errors_total;  /* failed appends or syncs */
  uint64_t wal_bytes;         /* size of the log now */
  uint64_t wal_replayed_records; /* records applied from the log at start */
  uint64_t wal_dropped_bytes;    /* torn or corrupt tail dropped at start */
  uint32_t wal_acks_waiting;     /* acknowledgements held for the next fsync now */

  /* durability (docs/RELIABILITY.md) */
  sac_replay_durability_t durability; /* the mode in effect */
  int wal_state;                      /* 0 ok; 1 appends fail (a full disk): inserts answered "not durable",
                                         retried; 2 an fsync failed: no insert acknowledged before a restart */
  char wal_why[200];                  /* what failed, while wal_state != 0 */
  uint64_t inserts_not_durable_total; /* inserts answered "not durable" (status NOT_DURABLE) */
} sac_replay_stats_t;

typedef struct sac_replay_server sac_replay_server_t;

/* Creates the shard, restores its snapshot and binds both endpoints. ctx may be NULL
 * (the server makes its own) or shared (the server takes a reference). NULL on failure,
 * logged, with *err (when not NULL): SAC_ECONFIG (bad config or unusable snapshot),
 * SAC_ENET (cannot bind), SAC_ENOMEM. */
sac_replay_server_t *sac_replay_server_new(const sac_replay_server_config_t *cfg, sac_net_ctx_t *ctx,
                                           int *err);
/* Bytes of the largest sample reply cfg can produce (max_sample_batch rows); a config
 * whose largest reply does not fit max_msg_bytes is refused by sac_replay_server_new. */
size_t sac_replay_server_largest_reply(const sac_replay_server_config_t *cfg);
/* 1 when the server is healthy; else 0 with the reason in why (e.g. snapshots failing).
 * Any thread (reads the published stats). */
int sac_replay_server_healthy(sac_replay_server_t *s, char *why, size_t cap);
/* Endpoints actually bound (with the port chosen for "tcp://host:*"). */
const char *sac_replay_server_insert_endpoint(const sac_replay_server_t *s);
const char *sac_replay_server_sample_endpoint(const sac_replay_server_t *s);

/* The metrics endpoint whose /livez the serving loop beats on every turn (common/http.h;
 * NULL: none). Before sac_replay_server_run or _start. */
void sac_replay_server_set_beat(sac_replay_server_t *s, sac_http_t *http);
/* Serves on the calling thread until sac_replay_server_stop; then writes the final
 * snapshot. 0, or SAC_EIO when that final snapshot failed. */
int sac_replay_server_run(sac_replay_server_t *s);
/* Serves on a new thread. 0 or SAC_ESTATE (already running) / SAC_ENOMEM. */
int sac_replay_server_start(sac_replay_server_t *s);
/* Asks the server to stop (async-signal-safe; returns at once). */
void sac_replay_server_stop(sac_replay_server_t *s);
/* Asks for a snapshot at the next loop iteration (async-signal-safe). */
void sac_replay_server_request_snapshot(sac_replay_server_t *s);
/* Waits for the thread of sac_replay_server_start; returns what run returned. */
int sac_replay_server_join(sac_replay_server_t *s);
/* Stops, joins and frees (closing its sockets); idempotent, nulls *s. */
void sac_replay_server_destroy(sac_replay_server_t **s);

/* A copy of the counters as of the server's last loop iteration. */
void sac_replay_server_stats(sac_replay_server_t *s, sac_replay_stats_t *out);

/* The shard's provenance in the fixed text form of replay/provenance.h (with this
 * server's incarnation), rendered by the serving thread at its next loop iteration:
 * *text is a new buffer (free() it). 0; SAC_ESTATE (not serving); SAC_ETIMEOUT (no
 * answer within timeout_ms); SAC_ENOMEM. Any thread. */
int sac_replay_server_provenance(sac_replay_server_t *s, int timeout_ms, char **text, size_t *len);
/* Not serving: the same, rendered on the calling thread (the owner's). */
int sac_replay_server_provenance_local(sac_replay_server_t *s, char **text, size_t *len);

#endif
