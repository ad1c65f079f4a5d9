/* Several learners in lock-step (data-parallel SAC, DESIGN.md §5; docs/LEARNER.md,
 * "Several learners (data-parallel)"). L ranks each sample their own batches, average
 * their gradients after each gradient computation and before its Adam step (the
 * sac_update gradient hook), and so apply identical Adam steps to identical weights:
 * the effective batch is L x batch_size. This module is the glue around the collectives
 * (collective.h):
 *
 *  - bootstrap: rank 0 binds the coordinator endpoint, the others connect (a zmq
 *    collective, which stays as the control channel); every rank's canonical
 *    configuration (the fields that must agree) is compared with rank 0's and a mismatch
 *    is refused on both sides naming the field and both values; the gradient collective
 *    is then made (zmq: the control channel itself; nccl: rank 0's unique id is sent
 *    over the control channel);
 *  - state: rank 0's learner state (after it loaded its checkpoint) is broadcast, so all
 *    ranks start identical; each rank > 0 then draws its policy noise from its own key;
 *  - per loop iteration an agreement round (update, skip, stop) so that every rank runs
 *    the same sequence of collective operations even when one of them is waiting for a
 *    batch or wants to stop;
 *  - failures: every operation has a timeout; the first failure is logged with what to
 *    do, and the peers are told, so they stop too instead of hanging.
 * It is not a scheduler: starting the L processes (and restarting them all after a
 * failure) is the operator's or the orchestrator's job. */
#ifndef SAC_LEARNER_DP_H
#define SAC_LEARNER_DP_H
#include <stddef.h>
#include <stdint.h>

#include "common/net.h"
#include "learner/backend.h"
#include "learner/collective.h"
#include "learner/sac.h"

typedef struct {
  int rank, size;         /* size 1: data-parallel off */
  char coord[256];        /* tcp://HOST:PORT: rank 0 binds it, the others connect to it */
  char collective[16];    /* auto (nccl on the cuda backend where built, else zmq), zmq, nccl */
  int timeout_ms;         /* every collective operation */
  int connect_timeout_ms; /* the bootstrap: rank 0 waits this long for every rank, and they for it */
  sac_net_ctx_t *ctx;     /* the coordinator channel's context (CURVE settings apply), or NULL: its own */
} sac_dp_cfg_t;

/* size 1, coordinator tcp://127.0.0.1:9300, auto, 30000 ms, 120000 ms. Cannot fail. */
void sac_dp_cfg_default(sac_dp_cfg_t *c);

typedef struct sac_dp sac_dp_t;

/* Joins the ranks (see above). config: the canonical configuration, "key = value" lines
 * of the fields that must agree (sac_dp_describe builds it); be: the backend the
 * gradients live in. Returns 0; SAC_ECONFIG (bad options, or refused: the reason, naming
 * the field and both values for a mismatch, is in why[cap] and in the log);
 * SAC_ETIMEOUT (not every rank came); SAC_ENET; SAC_ENODEV / SAC_EUNSUPPORTED (nccl
 * without a GPU / without NCCL in the build); SAC_ENOMEM. why may be NULL. */
int sac_dp_new(const sac_dp_cfg_t *cfg, const char *config, sac_backend_t *be, sac_dp_t **out, char *why,
               size_t cap);
/* Closes the collectives (after sac_dp_abort when it failed); idempotent, nulls *dp. */
void sac_dp_destroy(sac_dp_t **dp);
int sac_dp_rank(const sac_dp_t *dp);
int sac_dp_size(const sac_dp_t *dp);
const char *sac_dp_collective(const sac_dp_t *dp); /* "zmq" or "nccl" */

/* Makes every rank's learner state rank 0's: parameters, target critics, Adam moments
 * and step counters, log alpha, the update step, and extra_bytes of the caller's (e.g.
 * the run's counters; rank 0's are sent, the others' overwritten). Then each rank > 0
 * takes its own noise key (sac_dp_rank_key). Every rank calls it once, rank 0 after it
 * loaded its checkpoint. Allocates (setup time). 0 or a collective's error. */
int sac_dp_sync_state(sac_dp_t *dp, sac_t *sac, void *extra, size_t extra_bytes);

/* Sets sac's gradient hook: every later sac_update averages the critics' gradients, and
 * the actor's and log alpha's, over the ranks before their Adam steps. With the zmq
 * collective and a device backend the gradients are staged through host buffers
 * (allocated here). 0 or SAC_ENOMEM. */
int sac_dp_attach(sac_dp_t *dp, sac_t *sac);

enum { SAC_DP_UPDATE = 0, SAC_DP_SKIP = 1, SAC_DP_STOP = 2 };
/* The agreement of one loop iteration, called by every rank once per iteration:
 * *decision is SAC_DP_STOP when any rank wants to stop, else SAC_DP_UPDATE when every
 * rank has a batch, else SAC_DP_SKIP (a rank that has one drops it). 0 or a
 * collective's error (logged, peers told). */
int sac_dp_round(sac_dp_t *dp, int have_batch, int want_stop, int *decision);

/* Every rank hashes its whole learner state (the sac_get_buffer buffers); *same is 1 on
 * every rank when all hashes are equal. 0 or an error. */
int sac_dp_check_identical(sac_dp_t *dp, sac_t *sac, int *same);

/* After a failure elsewhere (the caller's): tells the peers, so they fail at once. */
void sac_dp_abort(sac_dp_t *dp, const char *why);

typedef struct {
  double allreduce_s; /* host time in the gradient all-reduces (the stream synced first) */
  int64_t allreduces;
  double round_s; /* host time in the agreement rounds */
  int64_t rounds;
} sac_dp_stats_t;
void sac_dp_stats(const sac_dp_t *dp, sac_dp_stats_t *out);

/* Rank r's noise key: rank 0's for r = 0, a different Philox key for every other r. */
void sac_dp_rank_key(const uint32_t key0[2], int rank, uint32_t out[2]);

/* Appends "key = value\n" (value printed with fmt) to the canonical configuration in
 * buf[cap] (NUL-terminated). Values that must compare equal must be printed exactly:
 * floats as "%.9g". Returns 0, SAC_ETOOBIG when it does not fit. */
int sac_dp_describe(char *buf, size_t cap, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Compares rank `rank`'s canonical configuration with rank 0's: 0 when they agree, else
 * SAC_ECONFIG with why[cap] naming the first field that differs and both values. */
int sac_dp_compare(const char *rank0, const char *other, int rank, char *why, size_t cap);

#endif
