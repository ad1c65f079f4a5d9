/* The collective interface's calls (see collective.h), and the nccl entry points, which
 * forward to the CUDA module. */
#include "learner/collective.h"

#include <assert.h>

#include "common/error.h"
#include "common/log.h"
#include "learner/cuda_module.h"

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

/* The nccl collective lives in the CUDA module (cuda_module.h); these forward to it. */
static const sac_cuda_module_t *nccl_module(void) {
  const sac_cuda_module_t *m;
  if (sac_cuda_module_get(&m) != 0) {
    SAC_ERROR("dp",
              "data-parallel: the nccl collective needs the CUDA module (%s, see the line above); use "
              "dp_collective zmq",
              SAC_CUDA_MODULE_FILE);
    return NULL;
  }
  if (!m->nccl_new || !m->nccl_unique_id) {
    SAC_ERROR("dp", "data-parallel: the CUDA module %s was built without nccl.h; use dp_collective zmq",
              sac_cuda_module_path());
    return NULL;
  }
  return m;
}

int sac_coll_nccl_available(void) {
  const sac_cuda_module_t *m;
  return sac_cuda_module_get(&m) == 0 && m->nccl_new != NULL;
}

int sac_coll_nccl_unique_id(unsigned char id[SAC_COLL_NCCL_ID_BYTES]) {
  const sac_cuda_module_t *m = nccl_module();
  return m ? m->nccl_unique_id(id) : SAC_EUNSUPPORTED;
}

int sac_coll_nccl_new(const unsigned char id[SAC_COLL_NCCL_ID_BYTES], int rank, int size, void *stream,
                      int timeout_ms, const char *hint, sac_coll_t **out) {
  *out = NULL;
  const sac_cuda_module_t *m = nccl_module();
  return m ? m->nccl_new(id, rank, size, stream, timeout_ms, hint, out) : SAC_EUNSUPPORTED;
}
