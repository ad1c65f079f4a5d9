/* The provenance index (see provenance.h): a growable ring of fixed-size entries. */
#include "replay/provenance.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

int sac_replay_prov_init(sac_replay_prov_t *p, uint64_t initial_cap) {
  memset(p, 0, sizeof *p);
  uint64_t cap = 16;
  while (cap < initial_cap)
    cap <<= 1;
  p->e = malloc(cap * sizeof *p->e);
  if (!p->e)
    return SAC_ENOMEM;
  p->cap = cap;
  return 0;
}

void sac_replay_prov_close(sac_replay_prov_t *p) {
  free(p->e);
  memset(p, 0, sizeof *p);
}

void sac_replay_prov_reset(sac_replay_prov_t *p) {
  p->head = 0;
  p->count = 0;
}

/* Doubles the ring, unrolling it so the oldest entry is at 0. */
static int grow(sac_replay_prov_t *p) {
  uint64_t cap = p->cap ? p->cap * 2 : 16;
  sac_replay_prov_entry_t *e = malloc(cap * sizeof *e);
  if (!e)
    return SAC_ENOMEM;
  for (uint64_t i = 0; i < p->count; i++)
    e[i] = *sac_replay_prov_at(p, i);
  free(p->e);
  p->e = e;
  p->cap = cap;
  p->head = 0;
  return 0;
}

int sac_replay_prov_add(sac_replay_prov_t *p, uint32_t actor, uint64_t session, uint64_t seq, uint32_t rows,
                        uint64_t end) {
  if (p->count == p->cap && grow(p) != 0) {
    p->dropped_nomem++;
    return SAC_ENOMEM;
  }
  p->e[(p->head + p->count) & (p->cap - 1)] =
      (sac_replay_prov_entry_t){.actor = actor, .rows = rows, .session = session, .seq = seq, .end = end};
  p->count++;
  return 0;
}

void sac_replay_prov_trim(sac_replay_prov_t *p, uint64_t alloc_count, uint64_t capacity) {
  if (alloc_count <= capacity)
    return;
  uint64_t oldest_live = alloc_count - capacity; /* serials below were overwritten */
  while (p->count && p->e[p->head].end <= oldest_live) {
    p->head = (p->head + 1) & (p->cap - 1);
    p->count--;
  }
}

int sac_replay_prov_format(const sac_replay_prov_t *p, uint32_t shard_id, uint64_t incarnation, char **text,
                           size_t *len) {
  /* a line is at most 10 + 20 + 20 + 10 digits and 4 separators */
  size_t cap = 128 + (size_t)p->count * 64, n = 0;
  char *b = malloc(cap);
  if (!b)
    return SAC_ENOMEM;
  n += (size_t)snprintf(b, cap, "# sacfleet provenance v1 shard=%" PRIu32 " incarnation=%" PRIu64 "\n",
                        shard_id, incarnation);
  for (uint64_t i = 0; i < p->count; i++) {
    const sac_replay_prov_entry_t *e = sac_replay_prov_at(p, i);
    n += (size_t)snprintf(b + n, cap - n, "%" PRIu32 " %" PRIu64 " %" PRIu64 " %" PRIu32 "\n", e->actor,
                          e->session, e->seq, e->rows);
  }
  *text = b;
  *len = n;
  return 0;
}
