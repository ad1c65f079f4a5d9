/* The collective interface's calls (see collective.h), and the nccl entry points of a
 * build without NCCL, which say so. */
#include "learner/collective.h"

#include <assert.h>

#include "common/error.h"
#include "common/log.h"

int sac_coll_allreduce_mean(sac_coll_t *c, float *buf, size_t n) {
  assert(c);
  return c->ops->allreduce_mean(c, &buf, &n, 1);
}

int sac_coll_allreduce_mean_v(sac_coll_t *c, float *const *bufs, const size_t *ns, int k) {
  assert(c && k >= 0);
  return c->ops->allreduce_mean(c, bufs, ns, k);
}

int sac_coll_broadcast(sac_coll_t *c, void *buf, size_t bytes, int root) {
  assert(c && root >= 0 && root < c->size);
  return c->ops->broadcast(c, buf, bytes, root);
}

int sac_coll_barrier(sac_coll_t *c) {
  assert(c);
  return c->ops->barrier(c);
}

void sac_coll_abort(sac_coll_t *c, const char *why) {
  if (c)
    c->ops->abort(c, why);
}

void sac_coll_destroy(sac_coll_t **c) {
  if (!c || !*c)
    return;
  (*c)->ops->destroy(*c);
  *c = NULL;
}

int sac_coll_rank(const sac_coll_t *c) { return c->rank; }
int sac_coll_size(const sac_coll_t *c) { return c->size; }

#ifndef SAC_HAVE_NCCL
int sac_coll_nccl_unique_id(unsigned char id[SAC_COLL_NCCL_ID_BYTES]) {
  (void)id;
  SAC_ERROR(
      "dp",
      "data-parallel: the nccl collective is not built in (it needs a CUDA build where nccl.h is found at "
      "configure time); use dp_collective zmq");
  return SAC_EUNSUPPORTED;
}

int sac_coll_nccl_new(const unsigned char id[SAC_COLL_NCCL_ID_BYTES], int rank, int size, void *stream,
                      int timeout_ms, const char *hint, sac_coll_t **out) {
  (void)id, (void)rank, (void)size, (void)stream, (void)timeout_ms, (void)hint;
  *out = NULL;
  return sac_coll_nccl_unique_id(NULL);
}
#endif
