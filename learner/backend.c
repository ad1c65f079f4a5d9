/* Backend selection by name (see backend.h). */
#include <string.h>

#include "common/error.h"
#include "common/log.h"
#include "learner/backend.h"

int sac_backend_new(const char *name, int threads, sac_backend_t **out) {
  *out = NULL;
  if (strcmp(name, "cpu") == 0)
    return sac_backend_cpu_new(threads, out);
  if (strcmp(name, "cuda") == 0) {
#ifdef SAC_HAVE_CUDA
    return sac_backend_cuda_new(0, out);
#else
    SAC_ERROR("backend",
              "backend \"cuda\" is not built in (configure with -DSAC_WITH_CUDA=ON where nvcc exists)");
    return SAC_EUNSUPPORTED;
#endif
  }
  SAC_ERROR("backend", "unknown backend \"%s\" (known: cpu, cuda)", name);
  return SAC_ENOTFOUND;
}

void sac_backend_destroy(sac_backend_t **be) {
  if (!*be)
    return;
  (*be)->ops->destroy(*be);
  *be = NULL;
}
