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

int sac_backend_configure(sac_backend_t *be, const char *precision, int graphs) {
  const char *p = precision && precision[0] ? precision : "fp32";
  if (!be->ops->set_option) {
    if (strcmp(p, "fp32") != 0) {
      SAC_ERROR("backend", "precision \"%s\" needs --backend cuda (the %s backend computes in fp32 only)", p,
                be->ops->name ? be->ops->name : "selected");
      return SAC_ECONFIG;
    }
    return 0;
  }
  int rc = be->ops->set_option(be, "precision", p);
  if (rc == 0)
    rc = be->ops->set_option(be, "graphs", graphs ? "1" : "0");
  if (rc)
    SAC_ERROR("backend", "cannot set precision \"%s\" / graphs %d: %s", p, graphs, sac_strerror(rc));
  return rc == SAC_EINVAL ? SAC_ECONFIG : rc;
}

void sac_backend_destroy(sac_backend_t **be) {
  if (!*be)
    return;
  (*be)->ops->destroy(*be);
  *be = NULL;
}
