/* Exports a replay shard server's counters (replay/server.h) as metrics series
 * (common/metrics.h), each labelled shard="<id>": `sac-replay` registers its one shard,
 * the learner's embedded default registers each of its in-process shards on its own
 * endpoint. One collector copies sac_replay_server_stats() once per scrape (it takes the
 * server's mutex briefly), so the server does no extra bookkeeping. docs/METRICS.md
 * lists the series.
 *
 * Header-only (static functions) so that both sac-replay and the learner service can
 * use it without another library target; it holds no state of its own. */
#ifndef SAC_REPLAY_SERVER_METRICS_H
#define SAC_REPLAY_SERVER_METRICS_H
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/metrics.h"
#include "common/wire.h"
#include "replay/server.h"

typedef struct {
  sac_replay_server_t *srv;
  double start_unix; /* snapshot age before the first snapshot: since this */
  sac_metric_t *size, *capacity, *inserted, *inserted_batches, *duplicates, *sampled, *sample_requests;
  sac_metric_t *f16_clamped;
  sac_metric_t *prio_updates, *prio_stale, *prio_foreign, *rejected[SAC_WIRE_R_COUNT], *messages;
  sac_metric_t *ins_waits, *ins_wait_s, *smp_waits, *smp_wait_s, *smp_timeouts, *smp_busy, *dropped, *info;
  sac_metric_t *pending, *parked, *actors, *transition_bytes, *slot_bytes, *spi, *can_insert, *can_sample;
  sac_metric_t *held, *held_bytes, *held_dups, *held_full;
  sac_metric_t *unencodable, *peers_refused, *actors_expired, *stale_tmp, *snap_failing;
  sac_metric_t *lost, *snapshots, *snap_failures, *snap_age, *snap_seconds, *snap_bytes, *restored;
  sac_metric_t *incarnation, *wal_records, *wal_syncs, *wal_sync_s, *wal_errors, *wal_bytes, *wal_waiting, *wal_replayed,
      *wal_dropped;
  sac_metric_t *not_durable, *wal_state, *durability[3];
} sac_replay_metrics__t;

static inline void sac_replay_metrics__collect(void *user) {
  sac_replay_metrics__t *m = user;
  sac_replay_stats_t s;
  sac_replay_server_stats(m->srv, &s);
  const sac_replay_shard_stats_t *h = &s.shard;
  sac_metric_set(m->size, (double)h->size);
  sac_metric_set(m->capacity, (double)h->capacity);
  sac_metric_set(m->inserted, (double)h->inserted_rows_total);
  sac_metric_set(m->inserted_batches, (double)h->inserted_batches_total);
  sac_metric_set(m->duplicates, (double)h->duplicate_batches_total);
  sac_metric_set(m->sampled, (double)h->sampled_rows_total);
  sac_metric_set(m->sample_requests, (double)h->sample_batches_total);
  sac_metric_set(m->f16_clamped, (double)h->sample_f16_clamped_total);
  sac_metric_set(m->prio_updates, (double)h->priority_updates_total);
  sac_metric_set(m->prio_stale, (double)h->priority_stale_total);
  sac_metric_set(m->prio_foreign, (double)h->priority_foreign_total);
  for (int r = 1; r < SAC_WIRE_R_COUNT; r++)
    sac_metric_set(m->rejected[r], (double)s.rejected_total[r]);
  sac_metric_set(m->messages, (double)s.messages_total);
  sac_metric_set(m->ins_waits, (double)s.insert_waits_total);
  sac_metric_set(m->ins_wait_s, s.insert_wait_seconds_total);
  sac_metric_set(m->smp_waits, (double)s.sample_waits_total);
  sac_metric_set(m->smp_wait_s, s.sample_wait_seconds_total);
  sac_metric_set(m->smp_timeouts, (double)s.sample_timeouts_total);
  sac_metric_set(m->smp_busy, (double)s.sample_busy_total);
  sac_metric_set(m->dropped, (double)s.replies_dropped_total);
  sac_metric_set(m->info, (double)s.info_requests_total);
  sac_metric_set(m->pending, (double)s.pending_samples);
  sac_metric_set(m->parked, (double)s.insert_parked);
  sac_metric_set(m->held, (double)s.insert_held_batches);
  sac_metric_set(m->held_bytes, (double)s.insert_held_bytes);
  sac_metric_set(m->held_dups, (double)s.held_duplicates_total);
  sac_metric_set(m->held_full, (double)s.held_full_total);
  sac_metric_set(m->actors, (double)h->actors);
  sac_metric_set(m->unencodable, (double)s.replies_unencodable_total);
  sac_metric_set(m->peers_refused, (double)s.sample_peers_refused_total);
  sac_metric_set(m->actors_expired, (double)h->actors_expired_total);
  if (m->stale_tmp)
    sac_metric_set(m->stale_tmp, (double)s.stale_temporaries_removed);
  if (m->snap_failing)
    sac_metric_set(m->snap_failing, (double)s.snapshot_failing);
  sac_metric_set(m->transition_bytes, h->bytes_per_transition);
  sac_metric_set(m->slot_bytes, h->bytes_per_slot);
  sac_metric_set(m->spi, h->limiter_spi);
  sac_metric_set(m->can_insert, (double)h->can_insert);
  sac_metric_set(m->can_sample, (double)h->can_sample);
  sac_metric_set(m->lost, (double)h->acked_batches_lost_total);
  sac_metric_set(m->snapshots, (double)s.snapshots_total);
  sac_metric_set(m->snap_failures, (double)s.snapshot_failures_total);
  double now = (double)sac_wallclock_ns() * 1e-9;
  double last = s.last_snapshot_unix_ns ? (double)s.last_snapshot_unix_ns * 1e-9 : m->start_unix;
  sac_metric_set(m->snap_age, now > last ? now - last : 0.0);
  sac_metric_set(m->snap_seconds, s.last_snapshot_seconds);
  sac_metric_set(m->snap_bytes, (double)s.last_snapshot_bytes);
  sac_metric_set(m->restored, (double)s.restored_transitions);
  sac_metric_set(m->incarnation, (double)s.incarnation);
  sac_metric_set(m->wal_records, (double)s.wal_records_total);
  sac_metric_set(m->wal_syncs, (double)s.wal_syncs_total);
  sac_metric_set(m->wal_sync_s, s.wal_sync_seconds_total);
  sac_metric_set(m->wal_errors, (double)s.wal_errors_total);
  sac_metric_set(m->wal_bytes, (double)s.wal_bytes);
  sac_metric_set(m->wal_waiting, (double)s.wal_acks_waiting);
  sac_metric_set(m->wal_replayed, (double)s.wal_replayed_records);
  sac_metric_set(m->wal_dropped, (double)s.wal_dropped_bytes);
  sac_metric_set(m->not_durable, (double)s.inserts_not_durable_total);
  sac_metric_set(m->wal_state, (double)s.wal_state);
  for (int d = 0; d < 3; d++)
    sac_metric_set(m->durability[d], (double)(s.durability == (sac_replay_durability_t)d));
}

/* Registers shard `shard_id`'s series on r, owned by owner (sac_metrics_forget(owner)
 * before destroying srv when r outlives it). snapshots: whether the server writes
 * snapshots (the snapshot series are left out when it does not). 0, SAC_EINVAL (r or
 * srv NULL) or SAC_ENOMEM (some series may be registered: forget owner to drop them). */
static inline int sac_replay_metrics_register(sac_metrics_t *r, sac_replay_server_t *srv, uint32_t shard_id,
                                              int snapshots, const void *owner) {
  if (!r || !srv)
    return SAC_EINVAL;
  sac_replay_metrics__t *m = calloc(1, sizeof *m);
  if (!m)
    return SAC_ENOMEM;
  m->srv = srv;
  m->start_unix = (double)sac_wallclock_ns() * 1e-9;
  char id[16];
  snprintf(id, sizeof id, "%u", shard_id);
  const char *const L[] = {"shard", id, NULL};
  int ok = 1;
#define SAC__C(field, name, help) ok &= (m->field = sac_metrics_counter(r, name, help, L, owner)) != NULL
#define SAC__G(field, name, help) ok &= (m->field = sac_metrics_gauge(r, name, help, L, owner)) != NULL
  SAC__G(size, "sac_replay_size", "Transitions stored in the shard.");
  SAC__G(capacity, "sac_replay_capacity", "Transitions the shard's ring holds.");
  SAC__C(inserted, "sac_replay_inserted_transitions_total", "Transitions inserted (duplicates not counted).");
  SAC__C(inserted_batches, "sac_replay_inserted_batches_total", "Transition batches inserted.");
  SAC__C(duplicates, "sac_replay_duplicate_batches_total",
         "Resent batches dropped as duplicates (and acked).");
  SAC__C(sampled, "sac_replay_sampled_transitions_total", "Transitions sampled by learners.");
  SAC__C(sample_requests, "sac_replay_sample_batches_total", "Sample batches served to learners.");
  SAC__C(f16_clamped, "sac_replay_sample_f16_clamped_total",
         "Values sent as +-65504 in fp16 sample replies for being beyond fp16's range.");
  SAC__C(prio_updates, "sac_replay_priority_updates_total", "Priority updates applied.");
  for (int i = 1; i < SAC_WIRE_R_COUNT; i++) {
    const char *const LR[] = {"shard", id, "reason", sac_wire_reason_name((sac_wire_reason_t)i), NULL};
    ok &= (m->rejected[i] = sac_metrics_counter(r, "sac_replay_rejected_messages_total",
                                                "Messages rejected by validation, by reason.", LR, owner)) !=
          NULL;
  }
  {
    const char *const LS[] = {"shard", id, "reason", "stale", NULL};
    const char *const LF[] = {"shard", id, "reason", "foreign", NULL};
    const char *h = "Priority updates skipped: stale (slot overwritten) or foreign (another shard's index).";
    ok &= (m->prio_stale =
               sac_metrics_counter(r, "sac_replay_priority_updates_skipped_total", h, LS, owner)) != NULL;
    ok &= (m->prio_foreign =
               sac_metrics_counter(r, "sac_replay_priority_updates_skipped_total", h, LF, owner)) != NULL;
  }
  SAC__C(messages, "sac_replay_messages_total", "Messages received on both endpoints.");
  {
    const char *const LI[] = {"shard", id, "op", "insert", NULL};
    const char *const LP[] = {"shard", id, "op", "sample", NULL};
    const char *hw =
        "Times the rate limiter held an insert batch (op=insert) or a sample request (op=sample) back.";
    const char *hs =
        "Seconds inserts (op=insert) or sample requests (op=sample) spent held back by the rate limiter.";
    ok &=
        (m->ins_waits = sac_metrics_counter(r, "sac_replay_rate_limiter_waits_total", hw, LI, owner)) != NULL;
    ok &=
        (m->smp_waits = sac_metrics_counter(r, "sac_replay_rate_limiter_waits_total", hw, LP, owner)) != NULL;
    ok &= (m->ins_wait_s =
               sac_metrics_counter(r, "sac_replay_rate_limiter_wait_seconds_total", hs, LI, owner)) != NULL;
    ok &= (m->smp_wait_s =
               sac_metrics_counter(r, "sac_replay_rate_limiter_wait_seconds_total", hs, LP, owner)) != NULL;
  }
  SAC__C(smp_timeouts, "sac_replay_sample_timeouts_total", "Queued sample requests answered with a timeout.");
  SAC__C(smp_busy, "sac_replay_sample_busy_total",
         "Sample requests refused because the wait queue was full.");
  SAC__C(dropped, "sac_replay_replies_dropped_total", "Replies to peers that were gone or not reading.");
  SAC__C(info, "sac_replay_info_requests_total", "ShardInfo requests answered.");
  SAC__G(pending, "sac_replay_pending_samples", "Sample requests queued by the rate limiter now.");
  SAC__G(parked, "sac_replay_insert_parked", "1 while insert batches are held by the rate limiter.");
  SAC__G(held, "sac_replay_insert_held_batches", "Insert batches held by the rate limiter now.");
  SAC__G(held_bytes, "sac_replay_insert_held_bytes", "Bytes of insert batches held by the rate limiter now.");
  SAC__C(held_dups, "sac_replay_insert_held_duplicates_total",
         "Resends of a held insert batch, dropped (the held one is answered).");
  SAC__C(held_full, "sac_replay_insert_busy_total",
         "Insert batches answered busy: the queue of held batches was full (the client resends).");
  SAC__G(actors, "sac_replay_actors", "Actors tracked for deduplication.");
  SAC__C(unencodable, "sac_replay_replies_unencodable_total",
         "Replies that could not be encoded within max_msg_bytes; an error reply was sent instead.");
  SAC__C(peers_refused, "sac_replay_sample_peers_refused_total",
         "Sample requests refused because max_sample_peers other connections were being served.");
  SAC__C(actors_expired, "sac_replay_actors_expired_total",
         "Idle actors forgotten (silent for actor_idle_s) to make room for a new actor.");
  SAC__G(transition_bytes, "sac_replay_transition_size_bytes", "Storage bytes per stored transition.");
  SAC__G(slot_bytes, "sac_replay_slot_size_bytes", "Storage bytes per ring slot.");
  SAC__G(spi, "sac_replay_rate_limiter_samples_per_insert",
         "Sampled transitions allowed per inserted one (0: no limit).");
  SAC__G(can_insert, "sac_replay_rate_limiter_can_insert",
         "1 when the rate limiter lets inserts through now.");
  SAC__G(can_sample, "sac_replay_rate_limiter_can_sample",
         "1 when the rate limiter lets samples through now.");
  SAC__C(lost, "sac_replay_acked_batches_lost_total",
         "Acked batches lost by a restart from an older snapshot.");
  SAC__G(restored, "sac_replay_restored_transitions", "Transitions restored from a snapshot at start.");
  SAC__G(incarnation, "sac_replay_incarnation",
         "This shard's start time in microseconds since the epoch: changes on every start (also the "
         "incarnation in /provenance).");
  SAC__C(wal_records, "sac_replay_wal_records_total", "Batches appended to the write-ahead log.");
  SAC__C(wal_syncs, "sac_replay_wal_syncs_total", "fsyncs of the write-ahead log (group commits).");
  SAC__C(wal_sync_s, "sac_replay_wal_sync_seconds_total",
         "Seconds spent in fsyncs of the write-ahead log (divided by sac_replay_wal_syncs_total: the mean fsync).");
  SAC__C(wal_errors, "sac_replay_wal_errors_total", "Failed appends or fsyncs of the write-ahead log.");
  SAC__G(wal_bytes, "sac_replay_wal_size_bytes", "Size of the write-ahead log now.");
  SAC__G(wal_waiting, "sac_replay_wal_acks_waiting", "Acknowledgements held for the next fsync now.");
  SAC__G(wal_replayed, "sac_replay_wal_replayed_records", "Log records applied at start.");
  SAC__G(wal_dropped, "sac_replay_wal_dropped_bytes", "Torn or corrupt log bytes dropped at start.");
  SAC__C(not_durable, "sac_replay_inserts_not_durable_total",
         "Inserts answered \"not durable\": the log could not be written or an fsync failed (kept by the "
         "actor).");
  SAC__G(
      wal_state, "sac_replay_wal_state",
      "0 ok; 1 appends to the log fail (a full disk): inserts refused, retried; 2 an fsync failed: inserts "
      "refused until a restart.");
  for (int d = 0; d < 3; d++) {
    const char *const LD[] = {"shard", id, "mode", sac_replay_durability_name((sac_replay_durability_t)d),
                              NULL};
    ok &= (m->durability[d] = sac_metrics_gauge(
               r, "sac_replay_durability",
               "1 for the durability mode the shard runs in (wal, snapshot, none).", LD, owner)) != NULL;
  }
  if (snapshots) {
    SAC__C(snapshots, "sac_replay_snapshots_total", "Snapshots written.");
    SAC__C(snap_failures, "sac_replay_snapshot_failures_total", "Snapshots that failed.");
    SAC__G(snap_failing, "sac_replay_snapshot_failing",
           "1 while the last snapshot attempt failed (then /healthz answers 503).");
    SAC__C(stale_tmp, "sac_replay_snapshot_stale_temporaries_removed_total",
           "Temporary snapshot files of dead processes removed at start.");
    SAC__G(snap_age, "sac_replay_snapshot_age_seconds",
           "Seconds since the last snapshot was written (since the server started when none yet).");
    SAC__G(snap_seconds, "sac_replay_last_snapshot_duration_seconds",
           "How long writing the last snapshot took.");
    SAC__G(snap_bytes, "sac_replay_last_snapshot_size_bytes", "Payload size of the last snapshot.");
  }
#undef SAC__C
#undef SAC__G
  int rc = sac_metrics_collector(r, sac_replay_metrics__collect, m, free, owner);
  if (rc)
    return rc;
  return ok ? 0 : SAC_ENOMEM;
}

#endif
