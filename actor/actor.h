/* The actor: E environments stepped together, batched inference through the local
 * policy copy (common/mlp.h), exploration by sampling the tanh-Gaussian policy, uniform
 * random actions for the first learning_starts steps (and until the first weights
 * arrive; skipped when the first weights are already trained, version > 0: an actor
 * joining or rejoining a run in progress), transitions sent in batches bounded by rows and age to the replay
 * shards through the replay client (acks, bounded window, resend), each batch tagged with the policy version
 * that produced it. Weights arrive on a conflating SUB socket and are taken between steps. When the shards
 * push back (full window), the actor waits: that is the backpressure that keeps memory bounded.
 *
 * sac_actor_run runs on the caller's thread until *stop, max_steps, or a fatal error;
 * sac_actor_start runs it on a thread. Statistics are atomics, readable from any
 * thread. The loop allocates nothing after start-up. */
#ifndef SAC_ACTOR_ACTOR_H
#define SAC_ACTOR_ACTOR_H
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "common/http.h"
#include "common/net.h"

#define SAC_ACTOR_MAX_SHARDS 64

typedef struct {
  uint32_t actor_id;
  int num_envs;
  char env[256];
  uint64_t seed;
  int64_t learning_starts; /* this actor's environment steps of uniform random actions */
  int64_t max_steps;       /* this actor's environment steps; 0: until stopped */
  int send_rows;           /* rows per transition batch */
  int send_ms;             /* a partial batch is sent when its first row is this old */
  int window;              /* unacknowledged batches per shard */
  float log_std_min, log_std_max;
  char weights_endpoint[256];
  size_t n_shards;
  char shard_endpoints[SAC_ACTOR_MAX_SHARDS][256]; /* insert endpoints */
  sac_net_ctx_t *ctx;                              /* shared context (inproc), or NULL */
  sac_http_t *http;       /* the metrics endpoint; /livez is told as the loop turns (or NULL) */
  int log_interval_s;     /* progress lines (0: none) */
  int weights_wait_ms;    /* at start, wait up to this long for the first weights (0: none) */
  char ledger_path[1024]; /* append each acknowledged batch here (actor/ledger.h); "": none */
  int drain_timeout_ms;   /* at the end (stop or max_steps): the longest wait to send the last
                             batch and for the acknowledgements of everything sent */
  /* 1: what is left unsent or unacknowledged after the drain is logged at INFO, not WARN
   * (still counted): the embedded default, whose run is over and whose shards stop with
   * it (their rate limiter holds the last inserts once the learner no longer samples) */
  int quiet_drain;
} sac_actor_cfg_t;

void sac_actor_cfg_default(sac_actor_cfg_t *c);
/* Parses a comma-separated endpoint list into c->shard_endpoints. 0 or SAC_ECONFIG. */
int sac_actor_set_shards(sac_actor_cfg_t *c, const char *list);

/* The stages of the actor's loop, each timed (sac_actor_stats_t.stage_ns, and
 * sac_actor_stage_seconds_total{actor,stage} on /metrics). */
typedef enum {
  SAC_ACTOR_STAGE_ACT,     /* the policy's (or random) actions */
  SAC_ACTOR_STAGE_STEP,    /* the environments stepped, rows into the batch */
  SAC_ACTOR_STAGE_SEND,    /* the batch sent (backpressure waits included), acks polled */
  SAC_ACTOR_STAGE_WEIGHTS, /* new weights taken between steps */
  SAC_ACTOR_STAGE_REPORT,  /* statistics and progress lines */
  SAC_ACTOR_STAGES
} sac_actor_stage_t;

/* "act", "step", "send", "weights", "report" (the metrics' stage label); "unknown" out
 * of range. */
const char *sac_actor_stage_name(sac_actor_stage_t s);

typedef struct {
  atomic_uint_fast64_t env_steps, episodes, batches_sent, rows_sent, insert_waits, send_wait_ns;
  atomic_uint_fast64_t weights_version, weights_updates, weights_rejected;
  atomic_uint_fast64_t policy_steps; /* steps taken with the learned policy */
  /* from the replay client, refreshed every step: batches resent (timed or after a
   * reconnect) and batches sent but not acknowledged yet, over all shards */
  atomic_uint_fast64_t batches_resent, unacked_batches;
  atomic_uint_fast64_t not_durable_replies; /* "not durable" answers: the shard could not keep a batch */
  atomic_uint_fast64_t ledger_lines, ledger_errors; /* --ledger appends and failed appends */
  /* waits logged as WARN lines (each first after 5 s, then every 30 s while it lasts):
   * a shard unreachable, a shard acknowledging nothing, no weights */
  atomic_uint_fast64_t waits_unreachable, waits_no_acks, waits_weights;
  /* a shard the actor has been stalled on for 5 s or more (its /healthz says so):
   * SAC_ACTOR_STALL_* (0: none), the shard's index in cfg.shard_endpoints, for how long */
  atomic_int stalled, stall_shard;
  _Atomic double stall_seconds;
  /* at the end: batches still unacknowledged after the drain, and rows never sent */
  atomic_uint_fast64_t unacked_at_exit, rows_unsent_at_exit;
  atomic_uint_fast64_t stage_ns[SAC_ACTOR_STAGES]; /* nanoseconds in each stage, updated every step */
  _Atomic double last_return, mean_return;         /* mean over the last 20 episodes */
  _Atomic double last_length;
  /* histogram of send -> ack seconds (common/metrics.h), set by whoever exports the
   * stats (actor_metrics.h); NULL: not recorded */
  _Atomic(struct sac_metric *) insert_latency;
  atomic_int running;
} sac_actor_stats_t;

enum { SAC_ACTOR_STALL_NONE = 0, SAC_ACTOR_STALL_UNREACHABLE = 1, SAC_ACTOR_STALL_NO_ACKS = 2 };

/* Runs the actor until *stop becomes non-zero (may be NULL), max_steps, or an error.
 * Returns 0, or a negative code (environment, network, memory), logged. */
int sac_actor_run(const sac_actor_cfg_t *cfg, atomic_int *stop, sac_actor_stats_t *stats);

typedef struct sac_actor sac_actor_t;
/* Copies cfg and starts sac_actor_run on a thread. 0 or SAC_ENOMEM. */
int sac_actor_start(const sac_actor_cfg_t *cfg, sac_actor_t **out);
const sac_actor_stats_t *sac_actor_stats(const sac_actor_t *a);
/* Asks the actor to stop (it drains on its own thread) without waiting: to stop several
 * at once, ask each, then sac_actor_stop each. NULL: nothing. */
void sac_actor_request_stop(sac_actor_t *a);
/* Stops, joins and frees; returns what the run returned. Idempotent, nulls *a. */
int sac_actor_stop(sac_actor_t **a);

#endif
