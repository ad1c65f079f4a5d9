/* The CUDA module's side of cuda_module.h: the one exported symbol (sac_cuda_module_open)
 * and the table it returns, plus the few host services the module's code calls by name
 * (sac_log, sac_log_get_level), forwarded to the host's logger. Built only into
 * libsacfleet-cuda.so, with hidden visibility for everything else, so the module's copies
 * of these names never clash with the binary's. */
#include <cuda_runtime_api.h>
#include <stdarg.h>
#include <stdio.h>

#include "common/error.h"
#include "learner/cuda_module.h"

#define SAC_EXPORT __attribute__((visibility("default")))

static const sac_cuda_host_t *g_host;

void sac_log(sac_log_level_t level, const char *module, const char *fmt, ...) {
  if (!g_host || (int)level > (int)g_host->log_level())
    return;
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  g_host->log(level, module, "%s", msg);
}

sac_log_level_t sac_log_get_level(void) { return g_host ? g_host->log_level() : SAC_LOG_ERROR; }

static int device_count(int *n, char *why, size_t cap) {
  *n = 0;
  cudaError_t e = cudaGetDeviceCount(n);
  if (e != cudaSuccess || *n <= 0) {
    snprintf(why, cap, "%s", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    (void)cudaGetLastError();
    *n = 0;
    return SAC_ENODEV;
  }
  return 0;
}

static int pci_bus_id(int device, char *bus, int len) {
  if (cudaDeviceGetPCIBusId(bus, len, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return SAC_ENODEV;
  }
  return 0;
}

int sac_backend_cuda_new(int device, sac_backend_t **out); /* backend_cuda.cu */

static const sac_cuda_module_t k_module = {
    .abi = SAC_CUDA_MODULE_ABI,
    .ops_size = sizeof(sac_backend_ops_t),
    .linear_size = sizeof(sac_linear_t),
    .coll_size = sizeof(sac_coll_t),
    .version = SAC_VERSION,
    .device_count = device_count,
    .backend_new = sac_backend_cuda_new,
#ifdef SAC_HAVE_NCCL
    .nccl_unique_id = sac_coll_nccl_unique_id,
    .nccl_new = sac_coll_nccl_new,
#endif
    .pci_bus_id = pci_bus_id,
};

SAC_EXPORT const sac_cuda_module_t *sac_cuda_module_open(const sac_cuda_host_t *host) {
  if (!host || host->abi != SAC_CUDA_MODULE_ABI)
    return NULL;
  g_host = host;
  return &k_module;
}
