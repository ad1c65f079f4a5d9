/* Exports an actor's statistics (sac_actor_stats_t, actor/actor.h) as metrics series
 * (common/metrics.h) labelled actor="<id>": `sac-actor` registers its one actor, the
 * learner's embedded default each of its in-process actors on its own endpoint. Every
 * series reads the actor's atomics at scrape time, so the actor loop does no extra
 * bookkeeping. docs/METRICS.md lists the series.
 *
 * Policy staleness: an actor knows the version of the weights it acts with, not the
 * learner's current version, so it exports the former (sac_actor_policy_version); where
 * the learner's version is known (the embedded default) sac_actor_policy_staleness is
 * added, and across processes it is sac_learner_policy_version minus
 * sac_actor_policy_version in PromQL.
 *
 * Header-only (static functions) so that both sac-actor and the learner service can use
 * it without another library target. */
#ifndef SAC_ACTOR_ACTOR_METRICS_H
#define SAC_ACTOR_ACTOR_METRICS_H
#include <math.h>
#include <stdio.h>

#include "actor/actor.h"
#include "common/error.h"
#include "common/metrics.h"

/* NaN until the first episode has ended (the stats hold 0 then). */
static inline double sac_actor_metrics__mean_return(const void *arg) {
  const sac_actor_stats_t *st = arg;
  return atomic_load(&((sac_actor_stats_t *)st)->episodes)
             ? atomic_load(&((sac_actor_stats_t *)st)->mean_return)
             : NAN;
}

static inline double sac_actor_metrics__last_return(const void *arg) {
  const sac_actor_stats_t *st = arg;
  return atomic_load(&((sac_actor_stats_t *)st)->episodes)
             ? atomic_load(&((sac_actor_stats_t *)st)->last_return)
             : NAN;
}

static inline double sac_actor_metrics__last_length(const void *arg) {
  const sac_actor_stats_t *st = arg;
  return atomic_load(&((sac_actor_stats_t *)st)->episodes)
             ? atomic_load(&((sac_actor_stats_t *)st)->last_length)
             : NAN;
}

static inline double sac_actor_metrics__running(const void *arg) {
  return (double)atomic_load(&((sac_actor_stats_t *)arg)->running);
}

/* Registers actor `actor_id`'s series over *st (borrowed: it must stay valid until owner
 * is forgotten or the registry destroyed). 0, SAC_EINVAL (r or st NULL) or SAC_ENOMEM
 * (some series may be registered: forget owner to drop them). */
static inline int sac_actor_metrics_register(sac_metrics_t *r, const sac_actor_stats_t *st, uint32_t actor_id,
                                             const void *owner) {
  if (!r || !st)
    return SAC_EINVAL;
  char id[16];
  snprintf(id, sizeof id, "%u", actor_id);
  const char *const L[] = {"actor", id, NULL};
  sac_actor_stats_t *s = (sac_actor_stats_t *)st; /* read only, through atomics */
  int ok = 1;
#define SAC__CU(field, name, help, scale)                                                                    \
  ok &= sac_metrics_counter_read(r, name, help, L, sac_metric_read_atomic_u64, &s->field, scale, owner) !=   \
        NULL
#define SAC__GF(fn, name, help) ok &= sac_metrics_gauge_read(r, name, help, L, fn, s, 1.0, owner) != NULL
  SAC__CU(env_steps, "sac_actor_env_steps_total", "Environment steps taken.", 1.0);
  SAC__CU(policy_steps, "sac_actor_policy_steps_total", "Environment steps taken with the learned policy.",
          1.0);
  SAC__CU(episodes, "sac_actor_episodes_total", "Episodes finished.", 1.0);
  SAC__GF(sac_actor_metrics__mean_return, "sac_actor_episode_return",
          "Mean return of the last 20 episodes (NaN before the first).");
  SAC__GF(sac_actor_metrics__last_return, "sac_actor_last_episode_return",
          "Return of the last finished episode.");
  SAC__GF(sac_actor_metrics__last_length, "sac_actor_last_episode_length",
          "Length of the last finished episode in steps.");
  ok &= sac_metrics_gauge_read(r, "sac_actor_policy_version",
                               "Version of the policy weights the actor acts with (0: none received yet).", L,
                               sac_metric_read_atomic_u64, &s->weights_version, 1.0, owner) != NULL;
  SAC__CU(weights_updates, "sac_actor_weights_updates_total", "Policy weight updates received.", 1.0);
  SAC__CU(weights_rejected, "sac_actor_weights_rejected_total",
          "Weight messages rejected (wrong shape, malformed).", 1.0);
  SAC__CU(batches_sent, "sac_actor_batches_sent_total", "Transition batches sent to the replay shards.", 1.0);
  SAC__CU(rows_sent, "sac_actor_transitions_sent_total", "Transitions sent to the replay shards.", 1.0);
  SAC__CU(insert_waits, "sac_actor_send_waits_total",
          "Times a send found the shard's window full and waited.", 1.0);
  SAC__CU(send_wait_ns, "sac_actor_send_wait_seconds_total",
          "Seconds spent sending batches, waits for window room (backpressure) included.", 1e-9);
  SAC__CU(not_durable_replies, "sac_actor_not_durable_replies_total",
          "Insert replies saying the shard could not make the batch durable (a full disk, a log error): kept "
          "and resent later.",
          1.0);
  SAC__CU(batches_resent, "sac_actor_batches_resent_total",
          "Batches sent again: unacknowledged past the resend timeout, or after a reconnect.", 1.0);
  ok &= sac_metrics_gauge_read(r, "sac_actor_unacked_batches",
                               "Batches sent to the shards and not acknowledged yet.", L,
                               sac_metric_read_atomic_u64, &s->unacked_batches, 1.0, owner) != NULL;
  SAC__CU(ledger_lines, "sac_actor_ledger_lines_total", "Acknowledged batches appended to the --ledger file.",
          1.0);
  SAC__CU(ledger_errors, "sac_actor_ledger_errors_total",
          "Acknowledged batches the --ledger file could not take (write failed).", 1.0);
  SAC__GF(sac_actor_metrics__running, "sac_actor_running", "1 while the actor's loop runs.");
  {
    static const char *const reasons[] = {"shard_unreachable", "shard_no_acks", "no_weights"};
    atomic_uint_fast64_t *const counts[] = {&s->waits_unreachable, &s->waits_no_acks, &s->waits_weights};
    for (int k = 0; k < 3; k++) {
      const char *const LW[] = {"actor", id, "reason", reasons[k], NULL};
      ok &=
          sac_metrics_counter_read(r, "sac_actor_waits_total",
                                   "Waits logged as a WARN (after 5 s, at once for a shard connection lost), "
                                   "each counted once, by what the actor waited for.",
                                   LW, sac_metric_read_atomic_u64, counts[k], 1.0, owner) != NULL;
    }
  }
  for (int k = 0; k < SAC_ACTOR_STAGES; k++) {
    const char *const LS[] = {"actor", id, "stage", sac_actor_stage_name((sac_actor_stage_t)k), NULL};
    ok &= sac_metrics_counter_read(r, "sac_actor_stage_seconds_total",
                                   "Seconds the actor's loop spent in each stage (act, step, send, weights, "
                                   "report).",
                                   LS, sac_metric_read_atomic_u64, &s->stage_ns[k], 1e-9, owner) != NULL;
  }
#undef SAC__CU
#undef SAC__GF
  return ok ? 0 : SAC_ENOMEM;
}

/* Adds the histogram sac_actor_insert_latency_seconds{actor} and has the actor behind
 * *st record into it. Only for an actor that stops before the registry is destroyed
 * (sac-actor: it runs on main's thread); the embedded default's actors do not record it.
 * 0 or SAC_ENOMEM. */
static inline int sac_actor_metrics_add_insert_latency(sac_metrics_t *r, sac_actor_stats_t *st,
                                                       uint32_t actor_id, const void *owner) {
  static const double k_lat[] = {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2,
                                 0.5,    1,     2,     5,     10,   30,   60,   120, 300};
  char id[16];
  snprintf(id, sizeof id, "%u", actor_id);
  const char *const L[] = {"actor", id, NULL};
  sac_metric_t *h = sac_metrics_histogram(r, "sac_actor_insert_latency_seconds",
                                          "Seconds from a batch's first send to its acknowledgement by the "
                                          "shard (stored), backpressure waits included.",
                                          L, k_lat, sizeof k_lat / sizeof k_lat[0], owner);
  atomic_store(&st->insert_latency, h);
  return h ? 0 : SAC_ENOMEM;
}

#endif
