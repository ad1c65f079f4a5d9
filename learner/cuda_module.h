/* The CUDA module: the cuda backend (backend_cuda.cu) and the nccl collective
 * (collective_nccl.c) built as a loadable module, libsacfleet-cuda.so, that the learner
 * opens with dlopen the first time something asks for CUDA (--backend cuda, dp_collective
 * nccl). So no shipped binary links cudart, cuBLASLt or NCCL: one sac-learner serves CPU
 * and GPU hosts, a CPU run maps no CUDA pages, and the CUDA image is the CPU binaries plus
 * this one file (tests/test_no_cuda_link.sh checks the binaries' NEEDED entries).
 *
 * Where the module is looked for, first match wins:
 *   1. $SAC_CUDA_MODULE, a path to the file; when set, nothing else is tried (a wrong
 *      path is an error, not a silent fallback to another copy);
 *   2. next to the running binary (/proc/self/exe's folder);
 *   3. <binary's folder>/../<CMAKE_INSTALL_LIBDIR>/sacfleet and <binary's folder>/../lib/sacfleet
 *      (an installed prefix moved as a whole; also the build tree, where the module is
 *      written to build/lib/sacfleet and binaries sit one folder below build/);
 *   4. the configured install prefix's <libdir>/sacfleet (SAC_CUDA_MODULE_DIR).
 *
 * The interface is one exported symbol, sac_cuda_module_open (SAC_CUDA_MODULE_ENTRY),
 * which takes the host's services (logging) and returns a table of entry points. The
 * table carries its ABI number and the sizes of the structs both sides share; a module
 * from another build of the structs is refused with a message rather than called. Bump
 * SAC_CUDA_MODULE_ABI whenever sac_cuda_module_t, sac_cuda_host_t, backend.h or the nccl
 * entry points of collective.h change. */
#ifndef SAC_LEARNER_CUDA_MODULE_H
#define SAC_LEARNER_CUDA_MODULE_H
#include <stddef.h>

#include "common/log.h"
#include "learner/backend.h"
#include "learner/collective.h"

/* 3: backend.h gained q_head, policy_fwd, linear_bwd_act, policy_bwd (issue 25)
 * 4: backend.h gained act_ld
 * 5: backend.h gained act_members_apart, sac_seg_t's ms and sac_linear_t's out_ms */
#define SAC_CUDA_MODULE_ABI 5
#define SAC_CUDA_MODULE_FILE "libsacfleet-cuda.so"
#define SAC_CUDA_MODULE_ENTRY "sac_cuda_module_open"

/* What the host gives the module: the module's log lines go through the host's logger,
 * so they follow the binary's --log_level and --log_json. */
typedef struct {
  int abi;
  void (*log)(sac_log_level_t level, const char *module, const char *fmt, ...)
      __attribute__((format(printf, 3, 4)));
  sac_log_level_t (*log_level)(void);
} sac_cuda_host_t;

typedef struct {
  int abi;                                 /* SAC_CUDA_MODULE_ABI of the module's build */
  size_t ops_size, linear_size, coll_size; /* sizeof sac_backend_ops_t, sac_linear_t, sac_coll_t */
  const char *version;                     /* SAC_VERSION of the module's build */
  /* CUDA devices visible: 0 and *n >= 1, or SAC_ENODEV with why (cudaGetDeviceCount's
   * error, or "0 devices") in why[cap]. Any error from the runtime counts as no GPU. */
  int (*device_count)(int *n, char *why, size_t cap);
  /* The cuda backend on a device (backend.h); SAC_ENODEV, SAC_EBACKEND, SAC_ENOMEM. */
  int (*backend_new)(int device, sac_backend_t **out);
  /* The nccl collective (collective.h); NULL where the module was built without nccl.h. */
  int (*nccl_unique_id)(unsigned char id[SAC_COLL_NCCL_ID_BYTES]);
  int (*nccl_new)(const unsigned char id[SAC_COLL_NCCL_ID_BYTES], int rank, int size, void *stream,
                  int timeout_ms, const char *hint, sac_coll_t **out);
  /* The PCI bus id of a device (for NVML metrics); 0 or SAC_ENODEV. */
  int (*pci_bus_id)(int device, char *bus, int len);
} sac_cuda_module_t;

typedef const sac_cuda_module_t *(*sac_cuda_module_open_fn)(const sac_cuda_host_t *host);

/* Host side (learner/cuda_module.c). Loads the module once per process (later calls
 * return the first call's result) and hands its table to *out. Returns 0 or
 * SAC_EUNSUPPORTED: not found (every place tried is logged), not loadable (dlerror: a
 * missing CUDA library, for instance), or from another build (ABI). Thread-safe. */
int sac_cuda_module_get(const sac_cuda_module_t **out);
/* The file the module was loaded from, or "" before a successful sac_cuda_module_get. */
const char *sac_cuda_module_path(void);

#endif
