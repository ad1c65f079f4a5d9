/* The nccl collective (see collective.h): NCCL on device memory, on the backend's CUDA
 * stream, for data-parallel learners on the cuda backend. Part of the CUDA module
 * (cuda_module.h), built where CMake found nccl.h (SAC_HAVE_NCCL); collective.c forwards
 * the sac_coll_nccl_* calls of the binaries to the module's copies.
 *
 * NCCL itself never times out: a rank that died leaves the others' kernels spinning. So
 * the communicator is non-blocking (config.blocking = 0), and every operation waits for
 * its own completion on the host: first for the non-blocking call to be issued
 * (ncclCommGetAsyncError leaves ncclInProgress), then for an event recorded after it on
 * the stream, polling ncclCommGetAsyncError as well, until timeout_ms have passed; then
 * the communicator is aborted (ncclCommAbort), which ends its kernels, and the operation
 * fails. Waiting per operation costs a host synchronisation per all-reduce, which also
 * keeps these updates out of CUDA graphs (see docs/LEARNER.md).
 *
 * The all-reduce is ncclAllReduce with ncclAvg: NCCL reduces each element once and
 * passes the result on, so every rank receives the same bits (scripts/gpu_check.sh checks
 * that the weights stay bit-identical). Not run in this repository's CI: no GPU there.
 *
 * libnccl.so.2 is loaded with dlopen on first use, not linked: it is 200 MB that every
 * binary linking sac_learner would otherwise need at load time, on machines that never
 * use it (the CUDA toolkit ships it; PyTorch's wheels too). The function pointers keep
 * NCCL's own prototypes (__typeof__), so calls are type-checked against nccl.h. */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nccl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "learner/collective.h"

_Static_assert(sizeof(ncclUniqueId) == SAC_COLL_NCCL_ID_BYTES, "ncclUniqueId is not 128 bytes");

#define NCCL_FNS(X)                                                                                          \
  X(ncclGetUniqueId)                                                                                         \
  X(ncclCommInitRankConfig)                                                                                  \
  X(ncclCommGetAsyncError)                                                                                   \
  X(ncclCommAbort)                                                                                           \
  X(ncclCommFinalize)                                                                                        \
  X(ncclCommDestroy)                                                                                         \
  X(ncclAllReduce)                                                                                           \
  X(ncclBroadcast)                                                                                           \
  X(ncclGroupStart)                                                                                          \
  X(ncclGroupEnd)                                                                                            \
  X(ncclGetErrorString)                                                                                      \
  X(ncclGetLastError)                                                                                        \
  X(ncclGetVersion)

static struct {
#define X(f) __typeof__(&f) f;
  NCCL_FNS(X)
#undef X
} N;
static int g_nccl_rc = SAC_EUNSUPPORTED;
static pthread_once_t g_nccl_once = PTHREAD_ONCE_INIT;

static void load_nccl_once(void) {
  void *h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    SAC_ERROR("dp", "data-parallel: cannot load NCCL: %s; install NCCL (libnccl2) or use dp_collective zmq",
              dlerror());
    return;
  }
#define X(f)                                                                                                 \
  if (!(N.f = (__typeof__(&f))dlsym(h, #f))) {                                                               \
    SAC_ERROR("dp", "data-parallel: libnccl.so.2 has no %s (NCCL 2.14 or newer is needed)", #f);             \
    return;                                                                                                  \
  }
  NCCL_FNS(X)
#undef X
  g_nccl_rc = 0;
}

/* 0 once libnccl.so.2 is loaded, SAC_EUNSUPPORTED (logged) where it cannot be. */
static int load_nccl(void) {
  pthread_once(&g_nccl_once, load_nccl_once);
  return g_nccl_rc;
}

typedef struct {
  ncclComm_t comm;
  cudaStream_t stream;
  cudaEvent_t done;
  float *one; /* (1) device scratch for the barrier */
  int timeout_ms;
  int failed;
  char hint[256];
} nc_t;

static int nc_fail(nc_t *z, int code, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  z->failed = 1;
  SAC_ERROR("dp", "data-parallel (nccl): %s%s", msg, z->hint);
  return code;
}

/* Checks an NCCL call: ncclSuccess and ncclInProgress (non-blocking) pass; anything else
 * is logged with the statement, file and line, and NCCL's own last message. */
static int nccl_check(nc_t *z, ncclResult_t r, const char *stmt, const char *file, int line) {
  if (r == ncclSuccess || r == ncclInProgress)
    return 0;
  SAC_ERROR("dp", "%s failed at %s:%d: %s (%s)", stmt, file, line, N.ncclGetErrorString(r),
            z && z->comm ? N.ncclGetLastError(z->comm) : N.ncclGetLastError(NULL));
  return SAC_EBACKEND;
}
#define NCK(z, stmt) nccl_check((z), (stmt), #stmt, __FILE__, __LINE__)

static int cuda_check(cudaError_t e, const char *stmt, const char *file, int line) {
  if (e == cudaSuccess)
    return 0;
  SAC_ERROR("dp", "%s failed at %s:%d: %s", stmt, file, line, cudaGetErrorString(e));
  return SAC_EBACKEND;
}
#define CUK(stmt) cuda_check((stmt), #stmt, __FILE__, __LINE__)

static void abort_comm(nc_t *z) {
  if (z->comm) {
    NCK(z, N.ncclCommAbort(z->comm)); /* logged; the communicator is gone either way */
    z->comm = NULL;
  }
}

/* Waits for the communicator's last non-blocking call to be issued. */
static int wait_issued(nc_t *z, double deadline, const char *op) {
  for (;;) {
    ncclResult_t st = ncclSuccess;
    if (NCK(z, N.ncclCommGetAsyncError(z->comm, &st)))
      return nc_fail(z, SAC_EBACKEND, "%s: cannot query the communicator", op);
    if (st == ncclSuccess)
      return 0;
    if (st != ncclInProgress) {
      const char *why = N.ncclGetErrorString(st);
      abort_comm(z);
      return nc_fail(z, SAC_EBACKEND, "%s failed: %s", op, why);
    }
    if (sac_clock_s() > deadline) {
      abort_comm(z);
      return nc_fail(z, SAC_ETIMEOUT, "a rank did not answer %s within %d ms", op, z->timeout_ms);
    }
    sac_sleep_ns(20000);
  }
}

/* Waits for everything enqueued on the stream so far (the collective last). */
static int wait_done(nc_t *z, double deadline, const char *op) {
  if (CUK(cudaEventRecord(z->done, z->stream)))
    return nc_fail(z, SAC_EBACKEND, "%s: cannot record an event", op);
  for (;;) {
    cudaError_t e = cudaEventQuery(z->done);
    if (e == cudaSuccess)
      return 0;
    if (e != cudaErrorNotReady) {
      abort_comm(z);
      return nc_fail(z, SAC_EBACKEND, "%s: %s", op, cudaGetErrorString(e));
    }
    ncclResult_t st = ncclSuccess;
    if (NCK(z, N.ncclCommGetAsyncError(z->comm, &st)))
      st = ncclInternalError;
    if (st != ncclSuccess && st != ncclInProgress) {
      const char *why = N.ncclGetErrorString(st);
      abort_comm(z);
      return nc_fail(z, SAC_EBACKEND, "%s failed: %s", op, why);
    }
    if (sac_clock_s() > deadline) {
      abort_comm(z);
      return nc_fail(z, SAC_ETIMEOUT, "a rank did not answer %s within %d ms", op, z->timeout_ms);
    }
    sac_sleep_ns(10000);
  }
}

static int nc_allreduce(sac_coll_t *c, float *const *bufs, const size_t *ns, int k) {
  nc_t *z = c->impl;
  if (z->failed || !z->comm)
    return SAC_ESTATE;
  const char *op = k ? "all-reduce" : "barrier";
  const double deadline = sac_clock_s() + z->timeout_ms / 1000.0;
  float *one = z->one;
  size_t n1 = 1;
  if (k == 0) { /* a barrier: an all-reduce of one float */
    bufs = &one;
    ns = &n1;
    k = 1;
  }
  if (NCK(z, N.ncclGroupStart()))
    return nc_fail(z, SAC_EBACKEND, "%s: ncclGroupStart", op);
  int rc = 0;
  for (int i = 0; i < k && !rc; i++)
    rc = NCK(z, N.ncclAllReduce(bufs[i], bufs[i], ns[i], ncclFloat, ncclAvg, z->comm, z->stream));
  if (NCK(z, N.ncclGroupEnd()) || rc) {
    abort_comm(z);
    return nc_fail(z, SAC_EBACKEND, "%s could not be enqueued", op);
  }
  if ((rc = wait_issued(z, deadline, op)) != 0)
    return rc;
  return wait_done(z, deadline, op);
}

static int nc_barrier(sac_coll_t *c) { return nc_allreduce(c, NULL, NULL, 0); }

static int nc_broadcast(sac_coll_t *c, void *buf, size_t bytes, int root) {
  nc_t *z = c->impl;
  if (z->failed || !z->comm)
    return SAC_ESTATE;
  const double deadline = sac_clock_s() + z->timeout_ms / 1000.0;
  if (NCK(z, N.ncclBroadcast(buf, buf, bytes, ncclUint8, root, z->comm, z->stream))) {
    abort_comm(z);
    return nc_fail(z, SAC_EBACKEND, "broadcast could not be enqueued");
  }
  int rc = wait_issued(z, deadline, "broadcast");
  return rc ? rc : wait_done(z, deadline, "broadcast");
}

static void nc_abort(sac_coll_t *c, const char *why) {
  nc_t *z = c->impl;
  (void)why; /* NCCL carries no message: the zmq control channel tells the peers why */
  z->failed = 1;
  abort_comm(z);
}

static void nc_destroy(sac_coll_t *c) {
  nc_t *z = c->impl;
  if (z) {
    if (z->comm && !z->failed) {
      const double deadline = sac_clock_s() + z->timeout_ms / 1000.0;
      if (NCK(z, N.ncclCommFinalize(z->comm)) == 0 && wait_issued(z, deadline, "finalize") == 0 && z->comm)
        NCK(z, N.ncclCommDestroy(z->comm)), z->comm = NULL;
    }
    abort_comm(z);
    if (z->done)
      CUK(cudaEventDestroy(z->done));
    if (z->one)
      CUK(cudaFree(z->one));
    free(z);
  }
  free(c);
}

static const sac_coll_ops_t k_nccl_ops = {
    .name = "nccl",
    .allreduce_mean = nc_allreduce,
    .broadcast = nc_broadcast,
    .barrier = nc_barrier,
    .abort = nc_abort,
    .destroy = nc_destroy,
};

/* SAC_ENODEV with a clear line where the machine has no GPU. */
static int need_gpu(void) {
  int rc = load_nccl();
  if (rc)
    return rc;
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    SAC_ERROR("dp",
              "data-parallel: the nccl collective needs a GPU and there is none (%s); use dp_collective zmq",
              e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    (void)cudaGetLastError();
    return SAC_ENODEV;
  }
  return 0;
}

int sac_coll_nccl_unique_id(unsigned char id[SAC_COLL_NCCL_ID_BYTES]) {
  int rc = need_gpu();
  if (rc)
    return rc;
  ncclUniqueId uid;
  if (NCK(NULL, N.ncclGetUniqueId(&uid)))
    return SAC_EBACKEND;
  memcpy(id, &uid, sizeof uid);
  return 0;
}

int sac_coll_nccl_new(const unsigned char id[SAC_COLL_NCCL_ID_BYTES], int rank, int size, void *stream,
                      int timeout_ms, const char *hint, sac_coll_t **out) {
  *out = NULL;
  int rc = need_gpu();
  if (rc)
    return rc;
  sac_coll_t *c = calloc(1, sizeof *c);
  nc_t *z = calloc(1, sizeof *z);
  if (!c || !z) {
    free(c), free(z);
    return SAC_ENOMEM;
  }
  c->ops = &k_nccl_ops;
  c->impl = z;
  c->rank = rank;
  c->size = size;
  c->device_memory = 1;
  c->timeout_ms = z->timeout_ms = timeout_ms > 0 ? timeout_ms : 30000;
  z->stream = (cudaStream_t)stream;
  snprintf(z->hint, sizeof z->hint, "%s", hint ? hint : "");
  rc = SAC_EBACKEND;
  if (CUK(cudaEventCreateWithFlags(&z->done, cudaEventDisableTiming)) ||
      CUK(cudaMalloc((void **)&z->one, sizeof(float))) || CUK(cudaMemset(z->one, 0, sizeof(float))))
    goto err;
  ncclUniqueId uid;
  memcpy(&uid, id, sizeof uid);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  if (NCK(z, N.ncclCommInitRankConfig(&z->comm, size, uid, rank, &config)))
    goto err;
  if ((rc = wait_issued(z, sac_clock_s() + c->timeout_ms / 1000.0, "joining the communicator")) != 0)
    goto err;
  int ver = 0;
  NCK(z, N.ncclGetVersion(&ver));
  SAC_INFO("dp", "data-parallel: nccl %d communicator, rank %d of %d", ver, rank, size);
  *out = c;
  return 0;
err:
  if (rc == 0)
    rc = SAC_EBACKEND;
  z->failed = 1;
  nc_destroy(c);
  return rc;
}
