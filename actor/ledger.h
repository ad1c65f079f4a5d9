/* An actor's ledger: the list of its batches that a shard acknowledged as stored, one
 * line each, appended as the acknowledgements arrive. After a run (or a fault) the ledger
 * checker (scripts/ledger_check.sh) matches every actor's ledger against every shard's
 * provenance index (replay/provenance.h): an acknowledged batch that no shard holds is
 * lost, one held twice was stored twice. A shard's counters cannot show either; only the
 * sender knows what it was promised.
 *
 * Format (fixed; the checker parses it), all decimal, single spaces:
 *   # sacfleet ledger v1 actor=<actor_id> pid=<pid>     at each open (a restart appends)
 *   <actor_id> <shard_id> <session> <seq> <rows>        one line per acknowledged batch
 * Each line goes to the file with one write(2) on an O_APPEND descriptor, so a kill -9 of
 * the actor keeps every line written before it (the page cache has it; a power cut may
 * not: the ledger is not fsynced, it is a test instrument, not a database).
 *
 * Not thread-safe: one actor's client thread appends. */
#ifndef SAC_ACTOR_LEDGER_H
#define SAC_ACTOR_LEDGER_H
#include <stdint.h>

#include "replay/client.h"

typedef struct sac_ledger sac_ledger_t;

/* Opens (creating, appending) PATH and writes the header line. 0, SAC_EIO (logged) or
 * SAC_ENOMEM. */
int sac_ledger_open(const char *path, uint32_t actor_id, sac_ledger_t **out);
/* Appends one acknowledged batch. 0 or SAC_EIO (counted in sac_ledger_errors; the first
 * failure is logged). */
int sac_ledger_append(sac_ledger_t *l, const sac_replay_acked_t *b);
uint64_t sac_ledger_lines(const sac_ledger_t *l);
uint64_t sac_ledger_errors(const sac_ledger_t *l);
/* Closes and frees; idempotent, nulls *l. */
void sac_ledger_close(sac_ledger_t **l);

#endif
