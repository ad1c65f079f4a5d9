/* A shard's provenance index: for every batch it stores, which actor sent it, in which
 * session, with which seq, and how many rows it had, in storage order. A checker (the
 * fault suite's ledger) matches the actors' lists of acknowledged batches against it to
 * prove that no acknowledged batch is missing and none is stored twice; a shard's
 * counters cannot show either.
 *
 * Each entry also keeps the allocation serial just past the batch's last slot, so an
 * entry is dropped once the ring has overwritten all of its slots: the index then holds
 * about capacity / rows-per-batch entries (32 bytes each) and never more than the ring
 * can hold batches. The index is part of the shard's snapshot and is rebuilt from the
 * write-ahead log by replaying it (replay/wal.h), so it survives both.
 *
 * The printed form is fixed (the ledger checker parses it):
 *   # sacfleet provenance v1 shard=<shard_id> incarnation=<u64>
 *   <actor_id> <session> <seq> <rows>          one line per stored batch, oldest first
 * all decimal, single spaces. The incarnation changes on every start of the shard's
 * process (replay/server.h); printed from files it is 0.
 *
 * Not thread-safe (the shard's thread owns it). Allocates when it grows (doubling), so
 * steady-state inserts allocate nothing. */
#ifndef SAC_REPLAY_PROVENANCE_H
#define SAC_REPLAY_PROVENANCE_H
#include <stddef.h>
#include <stdint.h>

typedef struct {
  uint32_t actor, rows;
  uint64_t session, seq;
  uint64_t end; /* allocation serial just past the batch's slots */
} sac_replay_prov_entry_t;

typedef struct {
  sac_replay_prov_entry_t *e; /* ring of cap entries (a power of two) */
  uint64_t head, count, cap;
  uint64_t dropped_nomem; /* entries not recorded: growing failed */
} sac_replay_prov_t;

/* 0 or SAC_ENOMEM; initial_cap is rounded up to a power of two (at least 16). */
int sac_replay_prov_init(sac_replay_prov_t *p, uint64_t initial_cap);
/* Idempotent on a zeroed or closed index. */
void sac_replay_prov_close(sac_replay_prov_t *p);
void sac_replay_prov_reset(sac_replay_prov_t *p);

/* Records a stored batch (entries must come in storage order: end never decreases). 0 or
 * SAC_ENOMEM (counted in dropped_nomem; the index stays valid). */
int sac_replay_prov_add(sac_replay_prov_t *p, uint32_t actor, uint64_t session, uint64_t seq, uint32_t rows,
                        uint64_t end);
/* Drops the oldest entries whose slots have all been overwritten: a ring of capacity
 * slots that has allocated alloc_count slots keeps serials >= alloc_count - capacity. */
void sac_replay_prov_trim(sac_replay_prov_t *p, uint64_t alloc_count, uint64_t capacity);

/* Entry i, oldest first (i < count). */
static inline const sac_replay_prov_entry_t *sac_replay_prov_at(const sac_replay_prov_t *p, uint64_t i) {
  return &p->e[(p->head + i) & (p->cap - 1)];
}

/* Renders the fixed text form into a new buffer (*text, NUL-terminated, *len bytes
 * without the NUL; free() it). 0 or SAC_ENOMEM. */
int sac_replay_prov_format(const sac_replay_prov_t *p, uint32_t shard_id, uint64_t incarnation, char **text,
                           size_t *len);

#endif
