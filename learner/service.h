/* The learner service: samples batches through the prefetching replay client from S
 * shards, runs SAC updates on the selected backend, sends priority updates when the
 * replay is prioritised, publishes the actor's weights every K updates with a version,
 * evaluates the deterministic policy every M updates and logs progress. It stops when
 * the shards have stored total_steps transitions.
 *
 * The embedded default: with no shard endpoints configured, the service hosts S shards
 * (replay/server.h) and N actors (actor/actor.h) on threads of its own process, wired
 * over ZeroMQ inproc:// — the same code paths as across hosts over tcp://. */
#ifndef SAC_LEARNER_SERVICE_H
#define SAC_LEARNER_SERVICE_H
#include <stdatomic.h>
#include <stdint.h>

#include "common/http.h"
#include "common/metrics.h"
#include "common/net.h"
#include "learner/dp.h"
#include "learner/rundir.h"
#include "learner/sac.h"
#include "replay/server.h"

#define SAC_LEARNER_MAX_SHARDS 64

typedef struct {
  char env[256]; /* for dimensions and evaluation */
  char backend[16];
  char precision[8]; /* fp32 (any backend), tf32, bf16, fp16 (cuda) */
  int graphs;        /* cuda: capture the update as CUDA graphs */
  int threads;
  int device; /* cuda: GPU index, or SAC_DEVICE_AUTO: dp.rank % GPUs (backend.h) */
  uint64_t seed;
  sac_hparams_t hp;
  int64_t total_steps;     /* environment steps over all actors */
  int64_t learning_starts; /* replay size before sampling; random steps, split over actors */
  int updates_per_step;    /* update-to-data ratio, enforced by the shards' rate limiters */
  int publish_every;       /* K: updates between weight broadcasts (at least) */
  /* and at least this many ms between them (0: by count only): a broadcast goes out once
   * both have passed, so its rate is min(updates/s / K, 1000 / publish_interval_ms) */
  int publish_interval_ms;
  char weights_precision[8]; /* fp32, bf16 or fp16: the broadcast's dtype (actors act in fp32) */
  /* updates in a row refused for a non-finite loss before the learner stops with an
   * error (issue 14); each refused update is logged (rate-limited) and counted */
  int max_nonfinite_updates;
  /* 1 (default, not on data-parallel ranks): the optimizer steps of an update whose
   * losses are not finite are skipped on the backend (no wait; the verdict read one
   * update late); 0: the steps are applied, the update counted one update late */
  int loss_guard;
  int64_t eval_every; /* M: updates between evaluations (0: only at the end) */
  int eval_episodes;
  int log_interval_s;
  int quiet;
  int prioritized; /* prioritised replay (embedded shards; remote shards decide their own) */
  /* SAC_WIRE_F32 (0) or SAC_WIRE_F16: the dtype of obs/action/next_obs in sample replies
   * (replay/client.h: converted back to f32 on arrival) */
  unsigned sample_precision;
  /* batches of hp.batch rows asked of a shard in one request, each sampled on its own
   * (replay/client.h); 0: 4 where a reply of four takes at most 256 KB, else 1 */
  int batches_per_request;
  double per_alpha, per_beta;
  char weights_endpoint[256];
  size_t n_shards; /* 0: embedded */
  char shard_sample_endpoints[SAC_LEARNER_MAX_SHARDS][256];
  /* embedded */
  int embedded_shards, embedded_actors, envs_per_actor;
  int64_t buffer_capacity;  /* over all embedded shards */
  sac_rundir_t *rundir;     /* where evaluations, checkpoints and the final policy go (NULL: nowhere) */
  int64_t checkpoint_every; /* updates between checkpoints in the run directory (0: at the end only) */
  char resume[1024];        /* checkpoint to resume from ("": a new run) */
  sac_metrics_t *metrics;   /* series go here (learner/service_metrics.h; NULL: none) */
  /* CurveZMQ on the service's context (NULL: none; docs/RELIABILITY.md) */
  const sac_net_curve_t *curve;
  /* data-parallel (learner/dp.h; dp.size 1: off). Needs remote shards. Only rank 0
   * publishes weights, evaluates, and uses rundir (NULL on the other ranks). */
  sac_dp_cfg_t dp;
  /* embedded shards' durability (replay/server.h); wal keeps <rundir>/shard-<i>.snap.wal */
  sac_replay_durability_t durability;
  int wal_sync_ms;
  sac_http_t *http; /* the metrics endpoint: embedded shards add GET /provenance?shard=<i> (NULL: none) */
} sac_learner_cfg_t;

/* The stages of the learner's loop, each timed (sac_learner_result_t.stage_seconds,
 * and sac_learner_stage_seconds_total{stage} on /metrics). */
typedef enum {
  SAC_LEARNER_STAGE_SAMPLE,     /* waiting for and taking a sampled batch (and the run's progress) */
  SAC_LEARNER_STAGE_STAGE,      /* the batch into the backend */
  SAC_LEARNER_STAGE_UPDATE,     /* the SAC update (and its loss check) */
  SAC_LEARNER_STAGE_PRIORITIES, /* |td| fetched and sent to the shards (prioritised replay) */
  SAC_LEARNER_STAGE_PUBLISH,    /* the actor's weights copied out and broadcast */
  SAC_LEARNER_STAGE_EVALUATE,   /* deterministic evaluations */
  SAC_LEARNER_STAGE_CHECKPOINT, /* checkpoints (and data-parallel state checks) */
  SAC_LEARNER_STAGE_REPORT,     /* metrics, TensorBoard scalars, progress lines */
  SAC_LEARNER_STAGE_DP_ROUND,   /* data-parallel agreement rounds */
  SAC_LEARNER_STAGES
} sac_learner_stage_t;

/* What a learner without batches waits for (its WARN lines, /healthz, and the reason label
 * of sac_learner_waits_total). */
typedef enum {
  SAC_LEARNER_WAIT_NONE = 0,
  SAC_LEARNER_WAIT_UNREACHABLE, /* no shard reachable */
  SAC_LEARNER_WAIT_MIN_SIZE,    /* the shards hold less than their min_size */
  SAC_LEARNER_WAIT_RATE_LIMIT,  /* the shards' rate limiter waits for inserts */
  SAC_LEARNER_WAIT_NO_REPLY,    /* connected shards that answer nothing */
  SAC_LEARNER_WAIT_KINDS
} sac_learner_wait_t;
/* "none", "shard_unreachable", "min_size", "rate_limiter", "no_reply". */
const char *sac_learner_wait_name(sac_learner_wait_t w);

/* "sample", "stage", ... "dp_round" (the metrics' stage label); "unknown" out of range. */
const char *sac_learner_stage_name(sac_learner_stage_t s);

typedef struct {
  double final_eval_return, best_eval_return;
  int64_t env_steps, updates, episodes;
  uint64_t policy_version;
  double wall_seconds, updates_per_second, env_steps_per_second;
  double sample_wait_seconds;
  /* host seconds spent in each stage over the run (set-up excluded, the final
   * evaluation, broadcast and checkpoint included) */
  double stage_seconds[SAC_LEARNER_STAGES];
  /* the run was stopped (*stop) before total_steps: no final evaluation was made
   * (final_eval_return is the last evaluation's, -inf if none) */
  int interrupted;
  int64_t start_updates; /* updates the run started from (a resumed run's checkpoint) */
} sac_learner_result_t;

void sac_learner_cfg_default(sac_learner_cfg_t *c);
/* Parses a comma-separated list of sample endpoints: each tcp://HOST:PORT (PORT a number
 * in 1..65535), ipc://PATH or inproc://NAME. 0 or SAC_ECONFIG (logged, naming the item). */
int sac_learner_set_shards(sac_learner_cfg_t *c, const char *list);
/* Checks the options that can never work together, before anything starts: in the
 * embedded default, a replay capacity per shard below what one shard needs (4 x its
 * 4096-row insert batches, and batch_size) or below learning_starts per shard. 0 or
 * SAC_ECONFIG with a line naming the learner options to change (logged, and copied into
 * why when not NULL). */
int sac_learner_check_cfg(const sac_learner_cfg_t *c, char *why, size_t cap);
/* Runs until total_steps were stored or *stop. 0 or a negative code (logged): SAC_ECONFIG
 * for a configuration that cannot work (sac_learner_check_cfg, a shard of another
 * environment, a batch no shard serves), SAC_ENONFINITE after max_nonfinite_updates
 * refused updates in a row or when the actor's weights are not finite. */
int sac_learner_run(const sac_learner_cfg_t *cfg, atomic_int *stop, sac_learner_result_t *res);

#endif
