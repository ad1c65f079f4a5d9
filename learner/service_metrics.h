/* The learner service's metrics (docs/METRICS.md): what service.c calls to feed the
 * registry in sac_learner_cfg_t.metrics. With no registry every call does nothing.
 *
 *  - per update: the update counter and the update-duration histogram (atomics, no
 *    allocation); per sample: the sample-wait histogram and the stored env steps;
 *  - about once a second, on the learner's thread (the backend belongs to it): the
 *    last update's statistics (sac_stats: losses, alpha, entropy, mean Q) and, where the
 *    backend has them (get_metric, the cuda backend), loss scale, skipped steps and
 *    device memory;
 *  - GPU utilisation (and device memory) from NVML, read at scrape time, when the
 *    backend is cuda and libnvidia-ml.so.1 can be loaded (dlopen: no build dependency;
 *    without it those series are absent);
 *  - in the embedded default: the in-process shards' and actors' series
 *    (replay/server_metrics.h, actor/actor_metrics.h) with shard / actor labels, and
 *    each actor's policy staleness against the learner's version.
 * sac_service_metrics_close forgets what points into the run's objects, before they go.
 *
 * Header-only (static functions), included by service.c alone, to keep the service's
 * own file small. */
#ifndef SAC_LEARNER_SERVICE_METRICS_H
#define SAC_LEARNER_SERVICE_METRICS_H
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actor/actor.h"
#include "actor/actor_metrics.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/metrics.h"
#include "learner/backend.h"
#include "learner/cuda_module.h"
#include "learner/sac.h"
#include "learner/service.h"
#include "learner/train_series.h"
#include "replay/client.h"
#include "replay/server.h"
#include "replay/server_metrics.h"

typedef struct {
  sac_metrics_t *r;
  sac_metric_t *updates, *update_s, *sample_wait_s, *env_steps, *target_steps, *version;
  sac_metric_t *critic_loss, *actor_loss, *alpha_loss, *alpha, *entropy, *mean_q, *eval_return;
  sac_metric_t *loss_scale, *skipped, *gpu_used, *gpu_total, *backend_bytes;
  /* the backend's counts per update between ticks (sac_backend_counts), the ticks' own
   * readings left out: blocking syncs and launches (kernels + matmul calls) */
  sac_metric_t *blocking_per_update, *launches_per_update;
  sac_backend_counts_t counts_seen;
  double updates_seen;
  /* hostile input (issue 14): sample replies refused by kind, updates refused for a
   * non-finite loss, weight broadcasts withheld for non-finite weights */
  sac_metric_t *rejected[SAC_REPLAY_REJECT_KINDS], *nonfinite, *unpublished, *shard_errors, *shard_refusals;
  sac_metric_t *sample_replies, *single_batch_replies;
  /* the weights port (issue 14.5): non-empty topics subscribed, socket renewals */
  sac_metric_t *weights_ignored, *weights_renewals, *weights_sent;
  uint64_t weights_ignored_seen, weights_renewals_seen, weights_sent_seen;
  /* failed writes of the run directory's periodic files, mirrored from rd->write_errors */
  sac_metric_t *rundir_errors[SAC_RUNDIR_FILES];
  uint64_t rundir_errors_seen[SAC_RUNDIR_FILES];
  const sac_rundir_t *rd;
  double next_reject_mirror;
  sac_backend_t *be;
  double next_tick;
  int shard_snapshots; /* embedded shards write snapshots (into the run directory) */
  /* waits for batches (service.c's wait_*): WARNs by reason, and the current wait */
  sac_metric_t *waits[SAC_LEARNER_WAIT_KINDS], *wait_s;
  /* the loop's per-stage seconds, mirrored from the result twice a second */
  sac_metric_t *stage_s[SAC_LEARNER_STAGES];
  double stage_seen[SAC_LEARNER_STAGES], next_stage_mirror;
} sac_service_metrics_t;

/* Registers the learner's own series (owned by the registry: they stay after the run). */
static inline void sac_service_metrics_init(sac_service_metrics_t *m, sac_metrics_t *r,
                                            const sac_learner_cfg_t *cfg) {
  memset(m, 0, sizeof *m);
  m->r = r;
  m->shard_snapshots = cfg->rundir != NULL;
  if (!r)
    return;
  size_t nb;
  const double *b = sac_metrics_latency_buckets(&nb);
  sac_train_series_t ts; /* the series every mode exports (learner/train_series.h) */
  sac_train_series_register(r, cfg->total_steps, cfg->rundir != NULL, &ts);
  m->updates = ts.updates, m->update_s = ts.update_s, m->env_steps = ts.env_steps;
  m->target_steps = ts.target_steps, m->version = ts.version, m->critic_loss = ts.critic_loss;
  m->actor_loss = ts.actor_loss, m->alpha_loss = ts.alpha_loss, m->alpha = ts.alpha, m->entropy = ts.entropy;
  m->mean_q = ts.mean_q, m->eval_return = ts.eval_return;
  memcpy(m->rundir_errors, ts.rundir_errors, sizeof m->rundir_errors);
  m->sample_wait_s =
      sac_metrics_histogram(r, "sac_learner_sample_wait_seconds",
                            "Time waiting for a sampled batch from the replay shards.", NULL, b, nb, NULL);
  for (int k = 1; k < SAC_LEARNER_WAIT_KINDS; k++)
    m->waits[k] = sac_metrics_counter(
        r, "sac_learner_waits_total",
        "Waits of 5 s or more for a sampled batch (each counted once, when first logged: a WARN when nothing "
        "moves, else an INFO), by what the learner waited for.",
        (const char *[]){"reason", sac_learner_wait_name((sac_learner_wait_t)k), NULL}, NULL);
  m->wait_s =
      sac_metrics_gauge(r, "sac_learner_wait_seconds",
                        "Seconds since the learner's last sampled batch while it waits for one (0 while "
                        "it samples); /healthz says why.",
                        NULL, NULL);
  for (int k = 0; k < SAC_REPLAY_REJECT_KINDS; k++)
    m->rejected[k] = sac_metrics_counter(
        r, "sac_learner_sample_replies_rejected_total",
        "Sample replies from the shards refused by the learner (none of their rows is used), by reason.",
        (const char *[]){"reason", sac_replay_client_reject_name(k), NULL}, NULL);
  m->shard_errors = sac_metrics_counter(
      r, "sac_learner_sample_error_replies_total",
      "Error replies from the shards to sample requests (rate limiter timeout, empty, busy): no batch.", NULL,
      NULL);
  m->shard_refusals = sac_metrics_counter(
      r, "sac_learner_shard_refusals_total",
      "Error replies without a request id: a shard refused a message of the learner outright.", NULL, NULL);
  m->sample_replies = sac_metrics_counter(
      r, "sac_learner_sample_replies_total",
      "Sample replies taken from the shards, each carrying --batches_per_request batches (or one).", NULL,
      NULL);
  m->single_batch_replies = sac_metrics_counter(
      r, "sac_learner_sample_single_batch_replies_total",
      "One-batch replies to requests for several: shards that predate --batches_per_request.", NULL, NULL);
  m->nonfinite = sac_metrics_counter(r, "sac_learner_nonfinite_updates_total",
                                     "Updates refused because a loss was NaN or Inf (the step not applied).",
                                     NULL, NULL);
  m->unpublished = sac_metrics_counter(
      r, "sac_learner_weights_withheld_total",
      "Weight broadcasts withheld because the actor's weights were not finite.", NULL, NULL);
  m->weights_ignored = sac_metrics_counter(r, "sac_learner_weights_ignored_subscriptions_total",
                                           "Subscriptions to a non-empty topic on the weights port (never "
                                           "served: actors subscribe to the empty one).",
                                           NULL, NULL);
  m->weights_renewals = sac_metrics_counter(
      r, "sac_learner_weights_socket_renewals_total",
      "Times the weights port was closed and bound again because it held too many distinct topics.", NULL,
      NULL);
  m->weights_sent = sac_metrics_counter(r, "sac_learner_weights_broadcasts_total",
                                        "Weight broadcasts sent (at most one per publish_every updates and "
                                        "publish_interval_ms, plus keep-alive "
                                        "resends while no batch comes).",
                                        NULL, NULL);
  m->rd = cfg->rundir;
  for (int k = 0; k < SAC_LEARNER_STAGES; k++)
    m->stage_s[k] = sac_metrics_counter(
        r, "sac_learner_stage_seconds_total",
        "Host seconds the learner's loop spent in each stage (sample, stage, update, priorities, publish, "
        "evaluate, checkpoint, report, dp_round).",
        (const char *[]){"stage", sac_learner_stage_name((sac_learner_stage_t)k), NULL}, NULL);
}

/* ---- NVML, loaded at run time --------------------------------------------------------- */

typedef struct {
  unsigned int gpu, memory;
} sac_nvml__util_t;
typedef struct {
  unsigned long long total, free, used;
} sac_nvml__mem_t;

typedef struct {
  void *lib, *dev;
  int (*util)(void *dev, sac_nvml__util_t *out);
  int (*mem)(void *dev, sac_nvml__mem_t *out);
  int (*shutdown)(void);
  sac_metric_t *util_ratio, *used, *total;
} sac_nvml__t;

static inline void sac_nvml__collect(void *user) {
  sac_nvml__t *n = user;
  sac_nvml__util_t u;
  sac_nvml__mem_t mem;
  if (n->util(n->dev, &u) == 0)
    sac_metric_set(n->util_ratio, u.gpu / 100.0);
  if (n->mem(n->dev, &mem) == 0) {
    sac_metric_set(n->used, (double)mem.used);
    sac_metric_set(n->total, (double)mem.total);
  }
}

static inline void sac_nvml__free(void *user) {
  sac_nvml__t *n = user;
  if (n->shutdown)
    n->shutdown();
  dlclose(n->lib);
  free(n);
}

/* GPU utilisation and memory of the cuda backend's device (device 0 of this process,
 * found in NVML by its PCI bus id) at scrape time. 1 when registered, 0 when NVML is
 * not there (the series are then absent), logged once either way. */
static inline int sac_service_metrics__nvml(sac_service_metrics_t *m) {
  char bus[32];
  const sac_cuda_module_t *cm;
  if (sac_cuda_module_get(&cm) != 0 || cm->pci_bus_id(0, bus, (int)sizeof bus) != 0) {
    SAC_INFO("learner", "metrics: no GPU utilisation (no PCI bus id for device 0)");
    return 0;
  }
  void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    SAC_INFO("learner", "metrics: no GPU utilisation (NVML not found: %s)", dlerror());
    return 0;
  }
  sac_nvml__t *n = calloc(1, sizeof *n);
  int (*init)(void) = (int (*)(void))dlsym(lib, "nvmlInit_v2");
  int (*by_bus)(const char *, void **) =
      (int (*)(const char *, void **))dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2");
  if (!n || !init || !by_bus || init() != 0) {
    SAC_INFO("learner", "metrics: no GPU utilisation (NVML unusable)");
    free(n);
    dlclose(lib);
    return 0;
  }
  n->lib = lib;
  n->shutdown = (int (*)(void))dlsym(lib, "nvmlShutdown");
  n->util = (int (*)(void *, sac_nvml__util_t *))dlsym(lib, "nvmlDeviceGetUtilizationRates");
  n->mem = (int (*)(void *, sac_nvml__mem_t *))dlsym(lib, "nvmlDeviceGetMemoryInfo");
  if (!n->util || !n->mem || by_bus(bus, &n->dev) != 0) {
    SAC_INFO("learner", "metrics: no GPU utilisation (NVML has no device %s)", bus);
    sac_nvml__free(n);
    return 0;
  }
  n->util_ratio = sac_metrics_gauge(m->r, "sac_learner_gpu_utilization_ratio",
                                    "GPU busy fraction over NVML's last sample period (0..1).", NULL, m);
  n->used = sac_metrics_gauge(m->r, "sac_learner_gpu_memory_used_bytes",
                              "Device memory in use on the learner's GPU (all processes).", NULL, m);
  n->total = sac_metrics_gauge(m->r, "sac_learner_gpu_memory_total_bytes",
                               "Device memory of the learner's GPU.", NULL, m);
  if (sac_metrics_collector(m->r, sac_nvml__collect, n, sac_nvml__free, m) != 0)
    return 0;
  SAC_INFO("learner", "metrics: GPU utilisation and memory from NVML (device %s)", bus);
  return 1;
}

/* ---- embedded shards and actors ------------------------------------------------------- */

typedef struct {
  sac_metric_t *learner_version;
  size_t n;
  struct {
    const sac_actor_stats_t *st;
    sac_metric_t *staleness;
  } a[];
} sac_service_metrics__stale_t;

static inline void sac_service_metrics__stale(void *user) {
  sac_service_metrics__stale_t *s = user;
  double v = sac_metric_value(s->learner_version);
  for (size_t i = 0; i < s->n; i++) {
    uint64_t av = atomic_load(&((sac_actor_stats_t *)s->a[i].st)->weights_version);
    sac_metric_set(s->a[i].staleness, v - (double)av);
  }
}

/* Once the backend exists and (embedded) the shards and actors run. Failures only cost
 * series (logged). */
static inline void sac_service_metrics_attach(sac_service_metrics_t *m, sac_backend_t *be,
                                              const char *backend, sac_replay_server_t *const *shards,
                                              size_t n_shards, sac_actor_t *const *actors, size_t n_actors) {
  if (!m->r)
    return;
  m->be = be;
  int nvml = strcmp(backend, "cuda") == 0 && sac_service_metrics__nvml(m);
  double v;
  if (be->ops->get_metric) {
    if (be->ops->get_metric(be, "loss_scale", &v) == 0)
      m->loss_scale = sac_metrics_gauge(m->r, "sac_learner_loss_scale",
                                        "fp16 loss scale of the cuda backend (1 without fp16).", NULL, m);
    if (be->ops->get_metric(be, "skipped_steps", &v) == 0)
      m->skipped =
          sac_metrics_counter(m->r, "sac_learner_skipped_steps_total",
                              "Updates whose optimizer steps were skipped (inf/NaN under fp16).", NULL, m);
    if (be->ops->get_metric(be, "device_bytes", &v) == 0)
      m->backend_bytes = sac_metrics_gauge(m->r, "sac_learner_backend_device_bytes",
                                           "Device memory allocated by the learner's backend.", NULL, m);
    if (sac_backend_counts(be, &m->counts_seen) == 0) {
      m->blocking_per_update = sac_metrics_gauge(m->r, "sac_learner_blocking_syncs_per_update",
                                                 "Blocking backend syncs (waits for the device) per update "
                                                 "since the last reading, this reading's own "
                                                 "left out; 0 in the steady state.",
                                                 NULL, NULL); /* plain figures: kept after the run */
      m->launches_per_update = sac_metrics_gauge(
          m->r, "sac_learner_launches_per_update",
          "Kernel launches and matmul calls per update since the last reading, as enqueued or recorded (the "
          "cpu "
          "backend counts what the cuda backend would launch; a CUDA graph replay adds none).",
          NULL, NULL);
      m->updates_seen = sac_metric_value(m->updates);
    }
    if (!nvml && be->ops->get_metric(be, "device_used_bytes", &v) == 0) {
      m->gpu_used = sac_metrics_gauge(m->r, "sac_learner_gpu_memory_used_bytes",
                                      "Device memory in use on the learner's GPU (all processes).", NULL, m);
      m->gpu_total = sac_metrics_gauge(m->r, "sac_learner_gpu_memory_total_bytes",
                                       "Device memory of the learner's GPU.", NULL, m);
    }
  }
  int rc = 0;
  for (size_t i = 0; i < n_shards && rc == 0; i++)
    rc = sac_replay_metrics_register(m->r, shards[i], (uint32_t)i, m->shard_snapshots, m);
  for (size_t i = 0; i < n_actors && rc == 0; i++)
    rc = sac_actor_metrics_register(m->r, sac_actor_stats(actors[i]), (uint32_t)i, m);
  if (rc == 0 && n_actors) {
    sac_service_metrics__stale_t *s = calloc(1, sizeof *s + n_actors * sizeof s->a[0]);
    if (!s) {
      rc = SAC_ENOMEM;
    } else {
      s->learner_version = m->version;
      s->n = n_actors;
      for (size_t i = 0; i < n_actors; i++) {
        char id[24];
        snprintf(id, sizeof id, "%zu", i);
        s->a[i].st = sac_actor_stats(actors[i]);
        s->a[i].staleness = sac_metrics_gauge(
            m->r, "sac_actor_policy_staleness",
            "Learner's policy version minus the version the actor acts with (versions count updates).",
            (const char *const[]){"actor", id, NULL}, m);
      }
      rc = sac_metrics_collector(m->r, sac_service_metrics__stale, s, free, m);
    }
  }
  if (rc)
    SAC_WARN("learner", "metrics: embedded shard/actor series incomplete (%s)", sac_strerror(rc));
}

/* After each sample call (timeouts included): the wait, and the stored env steps. */
static inline void sac_service_metrics_sampled(sac_service_metrics_t *m, double wait_s, int64_t steps) {
  if (!m->r)
    return;
  sac_metric_observe(m->sample_wait_s, wait_s);
  sac_metric_set(m->env_steps, (double)steps);
}

/* A wait for batches, as it stands: counted when its WARN is written (warned), the
 * gauge set to how long it has lasted (0: the learner samples). */
static inline void sac_service_metrics_wait(sac_service_metrics_t *m, sac_learner_wait_t kind, double seconds,
                                            int warned) {
  if (!m->r)
    return;
  if (warned && kind > 0 && kind < SAC_LEARNER_WAIT_KINDS)
    sac_metric_inc(m->waits[kind]);
  sac_metric_set(m->wait_s, seconds);
}

/* The learner's readings of its backend, about once a second (sync + small downloads). */
/* Adds the run directory's new write errors to the counters (same thread as the writes). */
static inline void sac_service_metrics__rundir(sac_service_metrics_t *m) {
  for (int k = 0; m->rd && k < SAC_RUNDIR_FILES; k++)
    if (m->rd->write_errors[k] > m->rundir_errors_seen[k]) {
      sac_metric_add(m->rundir_errors[k], (double)(m->rd->write_errors[k] - m->rundir_errors_seen[k]));
      m->rundir_errors_seen[k] = m->rd->write_errors[k];
    }
}

/* Per update since the last reading: the counts now against the ones kept last time. */
static inline void sac_service_metrics__counts(sac_service_metrics_t *m, int keep) {
  sac_backend_counts_t c;
  if (!m->be || !m->blocking_per_update || sac_backend_counts(m->be, &c) != 0)
    return;
  double u = sac_metric_value(m->updates), du = u - m->updates_seen;
  if (!keep && du > 0) {
    sac_metric_set(m->blocking_per_update, (double)(c.blocking_syncs - m->counts_seen.blocking_syncs) / du);
    sac_metric_set(m->launches_per_update, (double)(c.launches - m->counts_seen.launches) / du);
  }
  m->counts_seen = c, m->updates_seen = u;
}

static inline void sac_service_metrics__tick(sac_service_metrics_t *m, sac_t *sac) {
  sac_service_metrics__counts(m, 0);
  sac_service_metrics__rundir(m);
  sac_stats_t st;
  if (sac_stats(sac, &st) == 0) {
    sac_metric_set(m->critic_loss, st.critic_loss);
    sac_metric_set(m->actor_loss, st.actor_loss);
    sac_metric_set(m->alpha_loss, st.alpha_loss);
    sac_metric_set(m->alpha, st.alpha);
    sac_metric_set(m->entropy, st.entropy);
    sac_metric_set(m->mean_q, st.mean_q);
  }
  sac_backend_t *be = m->be;
  double v;
  if (!be || !be->ops->get_metric)
    return;
  if (m->loss_scale && be->ops->get_metric(be, "loss_scale", &v) == 0)
    sac_metric_set(m->loss_scale, v);
  if (m->skipped && be->ops->get_metric(be, "skipped_steps", &v) == 0)
    sac_metric_set(m->skipped, v);
  if (m->backend_bytes && be->ops->get_metric(be, "device_bytes", &v) == 0)
    sac_metric_set(m->backend_bytes, v);
  if (m->gpu_used && be->ops->get_metric(be, "device_used_bytes", &v) == 0)
    sac_metric_set(m->gpu_used, v);
  if (m->gpu_total && be->ops->get_metric(be, "device_total_bytes", &v) == 0)
    sac_metric_set(m->gpu_total, v);
}

/* The replay client's refused replies, mirrored into their counters (at most twice a
 * second, and with force at the end). */
static inline void sac_service_metrics_rejections(sac_service_metrics_t *m, const sac_replay_client_t *client,
                                                  int force) {
  if (!m->r || !client)
    return;
  double now = sac_clock_s();
  if (!force && now < m->next_reject_mirror)
    return;
  m->next_reject_mirror = now + 0.5;
  sac_replay_client_stats_t cs;
  sac_replay_client_stats(client, &cs);
  for (int k = 0; k < SAC_REPLAY_REJECT_KINDS; k++)
    if (cs.rejected_by[k])
      sac_metric_set(m->rejected[k], (double)cs.rejected_by[k]);
  sac_metric_set(m->shard_errors, (double)cs.sample_errors);
  sac_metric_set(m->shard_refusals, (double)cs.shard_refusals);
  sac_metric_set(m->sample_replies, (double)cs.sample_replies);
  sac_metric_set(m->single_batch_replies, (double)cs.sample_single_batch_replies);
}

/* The result's per-stage seconds added to their counters (at most twice a second, and
 * with force at the end); the counters add up over the runs of one registry. */
static inline void sac_service_metrics_stages(sac_service_metrics_t *m, const sac_learner_result_t *res,
                                              int force) {
  if (!m->r)
    return;
  double now = sac_clock_s();
  if (!force && now < m->next_stage_mirror)
    return;
  m->next_stage_mirror = now + 0.5;
  for (int k = 0; k < SAC_LEARNER_STAGES; k++) {
    double d = res->stage_seconds[k] - m->stage_seen[k];
    if (d > 0)
      sac_metric_add(m->stage_s[k], d);
    m->stage_seen[k] = res->stage_seconds[k];
  }
}

/* After each update: dt is its host time. */
static inline void sac_service_metrics_updated(sac_service_metrics_t *m, sac_t *sac, double dt,
                                               const sac_learner_result_t *res, uint64_t version) {
  if (!m->r)
    return;
  sac_metric_inc(m->updates);
  sac_metric_observe(m->update_s, dt);
  sac_metric_set(m->version, (double)version);
  double now = sac_clock_s();
  if (now < m->next_tick)
    return;
  m->next_tick = now + 1.0;
  sac_service_metrics__tick(m, sac);
  sac_service_metrics__counts(m, 1); /* the tick's own readings are not the updates' */
  if (isfinite(res->final_eval_return))
    sac_metric_set(m->eval_return, res->final_eval_return);
}

/* At the end of the run (also on failure), before the shards, actors and backend go:
 * the final figures, then the series that point into them are forgotten. */
static inline void sac_service_metrics_close(sac_service_metrics_t *m, const sac_learner_result_t *res) {
  if (!m->r)
    return;
  if (isfinite(res->final_eval_return))
    sac_metric_set(m->eval_return, res->final_eval_return);
  if (res->policy_version)
    sac_metric_set(m->version, (double)res->policy_version);
  sac_service_metrics__rundir(m); /* the final evaluation's writes */
  sac_metrics_forget(m->r, m);
  m->r = NULL;
}

#endif
