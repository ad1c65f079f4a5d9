/* Backend selection by name (see backend.h). The cuda backend lives in the CUDA module
 * (cuda_module.h), opened here on first use. */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/log.h"
#include "learner/backend.h"
#include "learner/cuda_module.h"

int sac_backend_cuda_new(int device, sac_backend_t **out) {
  *out = NULL;
  const sac_cuda_module_t *m;
  if (sac_cuda_module_get(&m) != 0) {
    SAC_ERROR("backend",
              "backend \"cuda\" is not available: the CUDA module (%s) is not installed or not "
              "loadable (see the line above); --backend cpu needs no module",
              SAC_CUDA_MODULE_FILE);
    return SAC_EUNSUPPORTED;
  }
  int n = 0;
  char why[256];
  if (m->device_count(&n, why, sizeof why) != 0 || device < 0 || device >= n) {
    SAC_ERROR("backend", "backend \"cuda\": the CUDA module %s is loaded, but there is no usable GPU %d (%s)",
              sac_cuda_module_path(), device, n ? "fewer devices" : why);
    return SAC_ENODEV;
  }
  return m->backend_new(device, out);
}

int sac_device_parse(const char *s, int *out) {
  if (!s || !s[0] || strcmp(s, "auto") == 0) {
    *out = SAC_DEVICE_AUTO;
    return 0;
  }
  char *end = NULL;
  long v = strtol(s, &end, 10);
  if (s[0] < '0' || s[0] > '9' || *end || v < 0 || v > 1023) {
    SAC_ERROR("backend", "--device \"%s\" is neither auto nor a GPU index in [0, 1023]", s);
    return SAC_ECONFIG;
  }
  *out = (int)v;
  return 0;
}

int sac_device_for_rank(int device, int dp_rank, int device_count) {
  if (device >= 0)
    return device;
  if (device_count <= 0 || dp_rank < 0)
    return 0;
  return dp_rank % device_count;
}

int sac_backend_new_on(const char *name, int threads, int device, int dp_rank, sac_backend_t **out) {
  *out = NULL;
  if (strcmp(name, "cpu") == 0)
    return sac_backend_cpu_new(threads, out);
  if (strcmp(name, "null") == 0) /* a measuring tool: no math (backend_null.c) */
    return sac_backend_null_new(out);
  if (strcmp(name, "cuda") == 0) {
    int n = 0;
    const sac_cuda_module_t *m;
    if (device == SAC_DEVICE_AUTO && sac_cuda_module_get(&m) == 0) {
      char why[256];
      if (m->device_count(&n, why, sizeof why) != 0)
        n = 0; /* sac_backend_cuda_new says why */
    }
    int d = sac_device_for_rank(device, dp_rank, n);
    if (device == SAC_DEVICE_AUTO && n > 0)
      SAC_INFO("backend", "cuda: data-parallel rank %d opens GPU %d of %d (--device auto)", dp_rank, d, n);
    return sac_backend_cuda_new(d, out);
  }
  SAC_ERROR("backend", "unknown backend \"%s\" (known: cpu, cuda, null)", name);
  return SAC_ENOTFOUND;
}

int sac_backend_new(const char *name, int threads, sac_backend_t **out) {
  return sac_backend_new_on(name, threads, SAC_DEVICE_AUTO, 0, out);
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

int sac_backend_counts(sac_backend_t *be, sac_backend_counts_t *out) {
  double b, l;
  if (!be->ops->get_metric || be->ops->get_metric(be, "blocking_syncs", &b) != 0 ||
      be->ops->get_metric(be, "kernel_launches", &l) != 0)
    return SAC_ENOTFOUND;
  out->blocking_syncs = (int64_t)b;
  out->launches = (int64_t)l;
  return 0;
}

void sac_backend_destroy(sac_backend_t **be) {
  if (!*be)
    return;
  (*be)->ops->destroy(*be);
  *be = NULL;
}
