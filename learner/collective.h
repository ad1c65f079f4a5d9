/* Collectives for data-parallel learners (learner/dp.h): a struct of function pointers,
 * as backend.h, with two implementations picked at run time:
 *
 *  - "zmq" (collective_zmq.c): CPU, over ZeroMQ TCP. A star around rank 0, which binds
 *    the endpoint; every other rank connects to it. An all-reduce sends each rank's
 *    buffer to rank 0, which sums in rank order (0, 1, ..., L-1), divides by L and sends
 *    the same bytes back to everyone, so every rank ends with bit-identical results.
 *    Its constructor also runs the bootstrap handshake (hello, checked by rank 0).
 *  - "nccl" (collective_nccl.c, in the CUDA module where nccl.h was found): ncclAllReduce with
 *    ncclAvg on device memory, on the backend's stream, over a non-blocking
 *    communicator that is aborted when an operation overruns its timeout.
 *
 * Not a general communication library: only what lock-step SAC learners need. Every
 * operation is matched across ranks by order (all ranks call the same operations in the
 * same order) and returns 0 or a negative SAC_E* code instead of hanging: each has a
 * timeout (timeout_ms), after which it fails with SAC_ETIMEOUT and a log line naming the
 * rank that did not answer. After a failure the collective is unusable (every call fails
 * with SAC_ESTATE); abort tells the peers, so they fail at once instead of at their own
 * timeout. One collective is used by one thread. */
#ifndef SAC_LEARNER_COLLECTIVE_H
#define SAC_LEARNER_COLLECTIVE_H
#include <stddef.h>

#include "common/net.h"

typedef struct sac_coll sac_coll_t;

typedef struct sac_coll_ops {
  const char *name;
  /* In place: bufs[i] (ns[i] floats, i < k) becomes the mean over ranks of everyone's
   * bufs[i], the k segments as one operation (k = 0 is a barrier). */
  int (*allreduce_mean)(sac_coll_t *c, float *const *bufs, const size_t *ns, int k);
  /* buf (bytes) of rank root is copied to every rank's buf. */
  int (*broadcast)(sac_coll_t *c, void *buf, size_t bytes, int root);
  int (*barrier)(sac_coll_t *c);
  /* Marks the collective failed and tells the peers (best effort, never blocks long):
   * their current or next operation fails with why. Idempotent. */
  void (*abort)(sac_coll_t *c, const char *why);
  void (*destroy)(sac_coll_t *c);
} sac_coll_ops_t;

struct sac_coll {
  const sac_coll_ops_t *ops;
  void *impl;
  int rank, size;
  int device_memory; /* 1: buffers are device memory (nccl); 0: host memory (zmq) */
  int timeout_ms;
};

/* The operations (assert on misuse: NULL collective, root out of range). */
int sac_coll_allreduce_mean(sac_coll_t *c, float *buf, size_t n);
int sac_coll_allreduce_mean_v(sac_coll_t *c, float *const *bufs, const size_t *ns, int k);
int sac_coll_broadcast(sac_coll_t *c, void *buf, size_t bytes, int root);
int sac_coll_barrier(sac_coll_t *c);
void sac_coll_abort(sac_coll_t *c, const char *why);
/* Closes without telling anyone (call abort first after a failure); idempotent, nulls *c. */
void sac_coll_destroy(sac_coll_t **c);
int sac_coll_rank(const sac_coll_t *c);
int sac_coll_size(const sac_coll_t *c);

/* ---- zmq ---- */
#define SAC_COLL_MAX_RANKS 256

typedef struct {
  sac_net_ctx_t *ctx;     /* shared context (a reference is taken), or NULL for its own */
  const char *endpoint;   /* rank 0 binds it (tcp://HOST:PORT), the others connect to it */
  int rank, size;         /* 0 <= rank < size <= SAC_COLL_MAX_RANKS */
  int timeout_ms;         /* every operation */
  int connect_timeout_ms; /* the handshake: how long to wait for every rank / for rank 0 */
  size_t max_bytes;       /* the largest payload accepted (ZMQ_MAXMSGSIZE); 0: 1 GiB */
  /* appended to every failure's log line, e.g. what the operator should do about it */
  const char *hint;
  /* Ranks > 0 send hello (hello_len bytes) with their rank; rank 0 passes it to check
   * (NULL: accept), which returns 0 or a negative code and then writes the reason into
   * why[cap] (sent to that rank, which fails with it; rank 0 fails too). */
  const void *hello;
  size_t hello_len;
  int (*check)(void *user, int rank, const void *hello, size_t len, char *why, size_t cap);
  void *user;
} sac_coll_zmq_cfg_t;

/* Binds (rank 0) or connects, then the handshake: every rank > 0 sends its hello; rank
 * 0 waits until each rank in [1, size) said hello once and passed check, then welcomes
 * all. Refused: a rank >= size, a second process claiming a rank already taken (it is
 * refused, the run goes on), a hello check fails (that rank and rank 0 both fail).
 * Returns 0, SAC_ECONFIG (refused: the reason in why[why_cap] and in the log),
 * SAC_ETIMEOUT (not every rank came within connect_timeout_ms), SAC_ENET (cannot bind),
 * SAC_ENOMEM. why may be NULL. */
int sac_coll_zmq_new(const sac_coll_zmq_cfg_t *cfg, sac_coll_t **out, char *why, size_t why_cap);

/* ---- nccl ---- */
#define SAC_COLL_NCCL_ID_BYTES 128 /* sizeof(ncclUniqueId) */

/* Rank 0 makes the communicator's unique id (handed to the other ranks by the caller).
 * 0, SAC_ENODEV (no GPU), SAC_EUNSUPPORTED (not built with NCCL), SAC_EBACKEND. */
int sac_coll_nccl_unique_id(unsigned char id[SAC_COLL_NCCL_ID_BYTES]);
/* Joins the communicator of id as rank of size on the current CUDA device; operations
 * run on stream (a cudaStream_t: the backend's, see backend.h native_stream). Waits at
 * most timeout_ms for the others to join. 0, SAC_ENODEV, SAC_EUNSUPPORTED, SAC_ETIMEOUT,
 * SAC_EBACKEND (logged with NCCL's message). */
int sac_coll_nccl_new(const unsigned char id[SAC_COLL_NCCL_ID_BYTES], int rank, int size, void *stream,
                      int timeout_ms, const char *hint, sac_coll_t **out);
/* 1 where the CUDA module is loadable and has the nccl collective (loads it), else 0. */
int sac_coll_nccl_available(void);

#endif
