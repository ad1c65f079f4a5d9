/* The cuda backend: every op of backend.h on one NVIDIA GPU, with the semantics of the
 * cpu backend (backend_cpu.c is the readable reference of the same math). It is not a
 * general tensor library: it knows exactly the ops SAC needs.
 *
 * - Linear layers are cuBLASLt matmuls with the bias and ReLU fused into the epilogue.
 *   Row-major (rows, cols) data is column-major (cols, rows), so every product is issued
 *   transposed (Y^T = W^T X^T). The K members of an ensemble (the twin critics) are one
 *   strided-batched matmul per layer; a shared input is broadcast with batch stride 0.
 *   The activation backward and the bias gradient are one fused kernel (a fixed-order
 *   column sum), then one batched matmul each for dW and dX. cuBLASLt's backward
 *   epilogues (DRELU, BGRAD) would fuse the activation backward into the previous
 *   layer's dX product, but the interface hands each layer its own activation backward,
 *   so they do not fit without breaking an op's meaning.
 * - Precision (option "precision"): fp32, tf32, bf16 or fp16. Tensors, master weights,
 *   Adam state and all elementwise math stay fp32; bf16/fp16 select cuBLASLt's
 *   CUBLAS_COMPUTE_32F_FAST_16BF / _16F, which round the GEMM operands to bf16 / fp16
 *   (or, where cuBLAS judges it faster, TF32, which is more precise) on the tensor
 *   cores and accumulate in fp32. fp16 adds dynamic loss scaling: the loss ops multiply
 *   their gradients by the scale, Adam divides it out and skips its step when any
 *   gradient is inf/NaN or any backward GEMM operand was outside the fp16 range (checked
 *   here, so it does not depend on how cuBLAS converts such values), and update_end
 *   halves the scale after a skip or doubles it after growth_interval good updates
 *   (PyTorch's GradScaler rules). Forward activations are not range-checked.
 * - Reductions (bias gradients, losses) use fixed-order trees, no float atomics, so a
 *   run is reproducible. Integer atomics only count finished blocks.
 * - Everything that changes between updates (log alpha, Adam steps, the loss scale, the
 *   noise stream offset) lives in device memory, so an update can be captured once as a
 *   CUDA graph and replayed (graph_begin / graph_end / graph_launch).
 * - Every CUDA and cuBLASLt call is checked; a failure is logged with the statement, file
 *   and line, latched, and returned by the next sync / upload / download. Ops allocate
 *   nothing (cuBLASLt gets a fixed workspace); alloc refuses to run during a capture. */
#include <assert.h>
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "common/error.h"
#include "common/log.h"
#include "learner/backend.h"
}
#include "common/philox.h"

/* ------------------------------------------------------------------------------------ */
/* configuration                                                                          */

enum { PREC_FP32 = 0, PREC_TF32 = 1, PREC_BF16 = 2, PREC_FP16 = 3 };
static const char *const k_prec_names[] = {"fp32", "tf32", "bf16", "fp16"};

#define WORKSPACE_BYTES ((size_t)32 << 20) /* cuBLASLt's recommendation for Hopper */
#define MAX_PLANS 1024
#define NFLAG 256     /* blocks of the inf/NaN check (and of fp16 Adam) */
#define STAGE_MAX 128 /* parts per staged commit: 6 per batch, SAC_MAX_UPDATES_PER_LAUNCH batches */
#define THREADS 256
#define SCALE_MIN (1.0f / 65536.0f)
#define SCALE_MAX 4294967296.0f

/* The fp16 loss scaler, in device memory. */
typedef struct {
  float scale;
  int good;      /* updates without inf/NaN since the scale last changed */
  int found_inf; /* some Adam step of the current update was skipped */
  int growth_interval;
  unsigned long long skipped; /* updates with a skipped step, all time */
} scaler_t;

/* Call sites (issue 33). A kernel whose last block (of the grid, or of a column tile)
 * finishes the work of the others counts its finished blocks in counters that belong to
 * its call site alone, and keeps its partial sums in scratch of its own: two call sites
 * never share either, so kernels on parallel graph branches cannot disturb each other.
 * A site is the op kind and the buffer the op writes (q of a q_head, dX of a backward,
 * p of an Adam step): the same call in every update finds the same site. The last
 * block puts its counter back to 0; every eager update (update_begin) and every graph
 * launch also zeroes all counters first, so a launch that stopped half way cannot leave
 * a later one miscounting. */
#define CTR_POOL 16384                   /* completion counters, all sites */
#define SCRATCH_FLOATS ((size_t)4 << 20) /* partial sums, all sites (16 MiB) */
#define MAX_SITES 512
enum { SITE_ADAM = 1, SITE_OUT1_HEAD, SITE_OUT1_BWD, SITE_COLSUM, SITE_POLICY_BWD };

typedef struct {
  int kind;
  const void *key;
  int sub;
  unsigned int *ctr;
  int n_ctr;
  float *scr;
  size_t n_scr;
} site_t;

/* Device-resident scalars, one allocation. */
typedef struct {
  unsigned long long delta[SAC_BACKEND_MAX_GRAPHS]; /* noise stream offset of each graph */
  int overflow; /* fp16: a backward GEMM operand since the last Adam step is out of fp16 range */
  scaler_t scaler;
  unsigned int ctr[CTR_POOL]; /* the call sites' completion counters (site_t) */
} dev_state_t;

/* A cached cuBLASLt matmul: descriptors and the heuristic's algorithm for one shape. */
typedef struct {
  int64_t ta, tb, m, n, k, lda, ldb, ldd, sa, sb, sd, batch, epi, beta, prec, sbias;
  int64_t al_a, al_b, al_d, al_bias;
} plan_key_t;

typedef struct {
  plan_key_t key;
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t la, lb, ld;
  cublasLtMatmulAlgo_t algo;
  cublasComputeType_t ct;
  int ok;         /* 0: no algorithm for this shape (callers fall back) */
  int epi_failed; /* the fused epilogue was refused at run time: use the bias kernel */
} plan_t;

typedef struct {
  float *host; /* pinned */
  float *dev;
  size_t cap, used; /* floats */
  int n, open;
  float *dst[STAGE_MAX];
  size_t off[STAGE_MAX], len[STAGE_MAX];
  int in_place[STAGE_MAX]; /* handed out by stage_at (written by the caller) */
  int copied;              /* a part of this commit went through stage (a memcpy here) */
  cudaEvent_t h2d_done, consumed;
} stage_slot_t;

typedef struct {
  void *p;
  size_t bytes;
} alloc_rec_t;

typedef struct {
  int device;
  cudaStream_t stream, copy;
  cublasLtHandle_t lt;
  void *ws;
  dev_state_t *ds;
  plan_t *plans;
  int n_plans;
  int prec;
  int graphs_on;
  float init_scale;
  int growth_interval;
  /* graphs */
  int capturing; /* graph id being recorded, or -1 */
  int err_at_begin;
  cudaGraphExec_t exec[SAC_BACKEND_MAX_GRAPHS];
  uint64_t cap_stream[SAC_BACKEND_MAX_GRAPHS], graph_steps[SAC_BACKEND_MAX_GRAPHS];
  unsigned long long host_delta[SAC_BACKEND_MAX_GRAPHS];
  int delta_known[SAC_BACKEND_MAX_GRAPHS];
  /* staging */
  stage_slot_t slot[2];
  int cur;
  /* fetch: small results read back one update late (pinned; events per slot) */
  float *fetch_host[SAC_BACKEND_FETCH_SLOTS];
  size_t fetch_cap[SAC_BACKEND_FETCH_SLOTS];
  cudaEvent_t fetch_done[SAC_BACKEND_FETCH_SLOTS];
  /* call sites (site_t): their counters in ds->ctr, their scratch in `scratch` */
  site_t sites[MAX_SITES];
  int n_sites, ctr_used, sites_wrapped;
  size_t scr_used;
  float *scratch;
  int sms; /* multiprocessors of the device */
  /* timing (timing_begin / _mark / _end) */
  cudaEvent_t *marks;
  int timing, n_marks;
  int *hold_host, *hold_dev; /* mapped pinned: [0] go, [1] the hold gave up */
  /* staged batches and the host copies they took (get_metric "staged_batches", "host_copies") */
  uint64_t batches, host_copies;
  /* accounting */
  alloc_rec_t *allocs;
  size_t n_allocs, cap_allocs;
  size_t bytes, peak;
  uint64_t alloc_calls, graph_launches, degraded;
  uint64_t launches; /* kernels and cuBLASLt matmuls enqueued eagerly or recorded */
  uint64_t blocking; /* waits for the stream: download, sync, pinned upload, scaler reads */
  /* eager matmul calls that ran without their fused bias epilogue, by why: bias
   * under-aligned, no algorithm with the epilogue at the precision's compute type,
   * the fused matmul refused at run time (graph replays do not count) */
  uint64_t epi_fb_align, epi_fb_heuristic, epi_fb_launch;
  int err; /* first failure (SAC_EBACKEND / SAC_ENOMEM), latched */
  int warned_plans;
} cu_t;

/* Every op starts here: the backend's device is made current on the calling thread
 * (cudaSetDevice is per thread, and a learner may call from more than one: the service
 * loop, the metrics tick, a checkpoint); cudaGetDevice is a host-side query. */
static cu_t *IM(sac_backend_t *be) {
  cu_t *im = (cu_t *)be->impl;
  int d = -1;
  if (cudaGetDevice(&d) != cudaSuccess || d != im->device) {
    (void)cudaGetLastError();
    if (cudaSetDevice(im->device) != cudaSuccess) {
      SAC_ERROR("cuda", "cudaSetDevice(%d) failed on this thread", im->device);
      (void)cudaGetLastError();
      if (!im->err)
        im->err = SAC_EBACKEND;
    }
  }
  return im;
}

/* ------------------------------------------------------------------------------------ */
/* checked calls                                                                          */

static int ck_cuda(cu_t *im, int latch, cudaError_t e, const char *stmt, const char *file, int line) {
  if (e == cudaSuccess)
    return 0;
  SAC_ERROR("cuda", "%s failed: %s (%s) at %s:%d", stmt, cudaGetErrorName(e), cudaGetErrorString(e), file, line);
  if (im && latch && !im->err)
    im->err = SAC_EBACKEND;
  return SAC_EBACKEND;
}

static const char *lt_status_name(cublasStatus_t s) {
  switch (s) {
  case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
  case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
  case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
  case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
  case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
  case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
  case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
  case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
  case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
  default: return "cublas status";
  }
}

static int ck_lt(cu_t *im, int latch, cublasStatus_t s, const char *stmt, const char *file, int line) {
  if (s == CUBLAS_STATUS_SUCCESS)
    return 0;
  SAC_ERROR("cuda", "%s failed: %s (%d) at %s:%d", stmt, lt_status_name(s), (int)s, file, line);
  if (im && latch && !im->err)
    im->err = SAC_EBACKEND;
  return SAC_EBACKEND;
}

/* CK / CKL latch the failure (the backend is then broken until destroyed); CKN / CKLN
 * only log and return it (setup paths that report through their return value). */
#define CK(im, call) ck_cuda((im), 1, (call), #call, __FILE__, __LINE__)
#define CKN(im, call) ck_cuda((im), 0, (call), #call, __FILE__, __LINE__)
#define CKL(im, call) ck_lt((im), 1, (call), #call, __FILE__, __LINE__)
#define CKLN(im, call) ck_lt((im), 0, (call), #call, __FILE__, __LINE__)
/* after every kernel launch: a bad configuration shows here, a fault at the next sync */
/* every kernel launch goes through LAUNCHED: it also counts them (kernel_launches) */
#define LAUNCHED(im, name)                                                                                   \
  ((im)->launches++, ck_cuda((im), 1, cudaGetLastError(), "launch of " name, __FILE__, __LINE__))

static unsigned grid_for(size_t n, unsigned cap) {
  size_t g = (n + THREADS - 1) / THREADS;
  if (g < 1)
    g = 1;
  return (unsigned)(g < cap ? g : cap);
}

/* ------------------------------------------------------------------------------------ */
/* kernels                                                                                */

/* y = act(y + b) over (rows, cols) with leading dimension ldy; b has cols entries */
__global__ void k_bias_act(float *Y, int ldy, const float *b, int rows, int cols, int act) {
  size_t total = (size_t)rows * cols;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
    int r = (int)(i / cols), c = (int)(i % cols);
    float *y = Y + (size_t)r * ldy + c;
    float v = *y + b[c];
    if (act == SAC_ACT_RELU)
      v = v > 0.0f ? v : 0.0f;
    else if (act == SAC_ACT_TANH)
      v = tanhf(v);
    *y = v;
  }
}

/* The one-wide output layer of a K-member ensemble (the twin critics' last layer), not
 * shared, no activation: Y[b, k] = X[b, k n : (k+1) n] . W_k + bias[k]. One warp per
 * (b, k), a fixed-order warp sum: one launch where a matmul of one output column and a
 * separate bias kernel (member 1's bias is 4 bytes after member 0's, too little aligned
 * for the fused epilogue) took two. fp32 arithmetic whatever the precision. */
__global__ void k_out1_fwd(float *Y, int ldy, const float *X, int ldx, const float *W, const float *bias, int B,
                           int K, int n) {
  size_t warp = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> 5;
  int lane = threadIdx.x & 31;
  if (warp >= (size_t)B * K)
    return; /* whole warps */
  int b = (int)(warp / K), k = (int)(warp % K);
  const float *x = X + (size_t)b * ldx + (size_t)k * n, *w = W + (size_t)k * n;
  float acc = 0.0f;
  for (int j = lane; j < n; j += 32)
    acc += x[j] * w[j];
  for (int o = 16; o > 0; o >>= 1)
    acc += __shfl_down_sync(0xffffffffu, acc, o);
  if (lane == 0)
    Y[(size_t)b * ldy + k] = acc + (bias ? bias[k] : 0.0f);
}

/* Backward of k_out1_fwd in one launch, for what took three (bias-sum kernel, dW and dX
 * matmuls), with no thread or block walking every row. Grid (tiles of 32 columns, chunks
 * of rpc rows), block (32, 8). Column c < K n is input column c = k n + j: for the chunk's
 * rows (8 row lanes) the threads write dX[b, c] = dY[b, k] W[c] (with linear_bwd_act, the
 * layer below's activation backward applied: X is that layer's output) and sum dW[c] =
 * sum_b X[b, c] dY[b, k] and the layer below's bias gradient dbb[c] = sum_b dX[b, c];
 * columns K n + k sum db[k] = sum_b dY[b, k]. Sums in a fixed order: rows ascending in
 * each lane, the 8 lanes in order, then the chunks in order by the last block of the tile
 * to finish (its own counter ctr[tile]; partials in part, 2 (K n + K) floats a chunk).
 * With one chunk the blocks write the sums themselves. dW, db, dX, dbb may each be NULL;
 * ovf (fp16) flags a written dX the layer below's fp16 matmuls could not take. */
typedef struct {
  const float *dY, *X, *W;
  float *dW, *db, *dX, *dbb;
  int *ovf;
  int ldy, ldx, lddx, B, K, n, below_act, rpc;
  float *part;
  unsigned int *ctr;
} out1_bwd_t;

__device__ __forceinline__ void d_out1_bwd_store(const out1_bwd_t &a, int c, float s1, float s2) {
  const int cols = a.K * a.n;
  if (c < cols) {
    if (a.dW)
      a.dW[c] = s1;
    if (a.dbb)
      a.dbb[c] = s2;
  } else if (c < cols + a.K && a.db) {
    a.db[c - cols] = s1;
  }
}

__global__ void k_out1_bwd(out1_bwd_t a) {
  __shared__ float red[2][8][33];
  __shared__ int s_last;
  const int tx = threadIdx.x, ty = threadIdx.y, cols = a.K * a.n, ext = cols + a.K;
  const int c = blockIdx.x * 32 + tx, r0 = blockIdx.y * a.rpc, r1 = min(a.B, r0 + a.rpc);
  const float *__restrict__ dY = a.dY;
  const float *__restrict__ X = a.X;
  float *__restrict__ dX = a.dX;
  float s1 = 0.0f, s2 = 0.0f;
  int bad = 0;
  if (c < cols) {
    const int k = c / a.n;
    const float w = a.W[c];
    for (int b = r0 + ty; b < r1; b += 8) {
      const float g = dY[(size_t)b * a.ldy + k], x = X[(size_t)b * a.ldx + c];
      s1 += x * g;
      if (dX) {
        float d = g * w;
        if (a.below_act == SAC_ACT_RELU)
          d = x > 0.0f ? d : 0.0f;
        else if (a.below_act == SAC_ACT_TANH)
          d *= 1.0f - x * x;
        s2 += d;
        bad |= !(fabsf(d) <= 65504.0f);
        dX[(size_t)b * a.lddx + c] = d;
      }
    }
  } else if (c < ext) {
    for (int b = r0 + ty; b < r1; b += 8)
      s1 += dY[(size_t)b * a.ldy + (c - cols)];
  }
  if (a.ovf && bad)
    *a.ovf = 1; /* every writer stores the same value */
  red[0][ty][tx] = s1, red[1][ty][tx] = s2;
  __syncthreads();
  if (ty == 0) {
    s1 = s2 = 0.0f;
    for (int y = 0; y < 8; y++)
      s1 += red[0][y][tx], s2 += red[1][y][tx];
  }
  if (gridDim.y == 1) {
    if (ty == 0)
      d_out1_bwd_store(a, c, s1, s2);
    return;
  }
  if (ty == 0 && c < ext) {
    float *part = a.part + (size_t)blockIdx.y * 2 * ext;
    part[c] = s1, part[ext + c] = s2;
  }
  /* this chunk's partials out to every block, then: is it the tile's last block? */
  __threadfence();
  __syncthreads();
  if (tx == 0 && ty == 0)
    s_last = atomicAdd(&a.ctr[blockIdx.x], 1u) == gridDim.y - 1;
  __syncthreads();
  if (!s_last)
    return;
  __threadfence();
  if (ty == 0 && c < ext) {
    s1 = s2 = 0.0f;
#pragma unroll 8
    for (unsigned ch = 0; ch < gridDim.y; ch++) {
      const float *part = a.part + (size_t)ch * 2 * ext;
      s1 += __ldcg(part + c), s2 += __ldcg(part + ext + c);
    }
    d_out1_bwd_store(a, c, s1, s2);
  }
  if (tx == 0 && ty == 0)
    a.ctr[blockIdx.x] = 0; /* for the next launch (the stream orders it before that one) */
}

/* d = d * act'(y) in place over (rows, cols); db = column sums when non-NULL. Grid (tiles
 * of 32 columns, chunks of rpc rows), block (32, 8): each thread masks its column for the
 * chunk's rows of its row lane; the column sums in a fixed order as k_out1_bwd's (rows
 * ascending per lane, the 8 lanes, then the chunks by the tile's last block: counters
 * ctr[tile], partials in part, cols floats a chunk). fp16 (ovf non-NULL): flags a
 * gradient that the next GEMMs could not take as an fp16 operand (|d| > 65504 or not
 * finite), whatever cuBLAS would make of it. */
typedef struct {
  float *dY;
  const float *Y;
  float *db, *part;
  int *ovf;
  unsigned int *ctr;
  int ldy, rows, cols, act, rpc;
} colsum_t;

__global__ void k_act_bwd_colsum(colsum_t a) {
  __shared__ float red[8][33];
  __shared__ int s_last;
  const int tx = threadIdx.x, ty = threadIdx.y, c = blockIdx.x * 32 + tx;
  const int r0 = blockIdx.y * a.rpc, r1 = min(a.rows, r0 + a.rpc);
  float *__restrict__ dY = a.dY;
  const float *__restrict__ Y = a.Y;
  float acc = 0.0f;
  int bad = 0;
  if (c < a.cols) {
    for (int r = r0 + ty; r < r1; r += 8) {
      const size_t i = (size_t)r * a.ldy + c;
      float d = dY[i];
      if (a.act == SAC_ACT_RELU) {
        d = Y[i] > 0.0f ? d : 0.0f;
        dY[i] = d;
      } else if (a.act == SAC_ACT_TANH) {
        const float y = Y[i];
        d *= 1.0f - y * y;
        dY[i] = d;
      }
      acc += d;
      bad |= !(fabsf(d) <= 65504.0f);
    }
  }
  if (a.ovf && bad)
    *a.ovf = 1; /* every writer stores the same value */
  if (!a.db)
    return; /* uniform across the grid */
  red[ty][tx] = acc;
  __syncthreads();
  if (ty == 0) {
    acc = 0.0f;
    for (int y = 0; y < 8; y++)
      acc += red[y][tx];
  }
  if (gridDim.y == 1) {
    if (ty == 0 && c < a.cols)
      a.db[c] = acc;
    return;
  }
  if (ty == 0 && c < a.cols)
    a.part[(size_t)blockIdx.y * a.cols + c] = acc;
  __threadfence();
  __syncthreads();
  if (tx == 0 && ty == 0)
    s_last = atomicAdd(&a.ctr[blockIdx.x], 1u) == gridDim.y - 1;
  __syncthreads();
  if (!s_last)
    return;
  __threadfence();
  if (ty == 0 && c < a.cols) {
    acc = 0.0f;
#pragma unroll 8
    for (unsigned ch = 0; ch < gridDim.y; ch++)
      acc += __ldcg(a.part + (size_t)ch * a.cols + c);
    a.db[c] = acc;
  }
  if (tx == 0 && ty == 0)
    a.ctr[blockIdx.x] = 0;
}

/* Input gradient of a shared-input ensemble layer, summed over the members:
 * dX[b, i] = sum_k sum_j dY[b, k n_out + j] W_k[i, j] (W already offset to the segment's
 * first row). One warp per output, a fixed shuffle tree: deterministic. */
__global__ void k_dx_shared(float *dX, int ldx, const float *dY, int ldy, const float *W, int n_out, size_t wsz, int K,
                            int B, int n) {
  size_t warp = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32;
  int lane = threadIdx.x & 31;
  if (warp >= (size_t)B * n)
    return;
  int b = (int)(warp / n), i = (int)(warp % n);
  float acc = 0.0f;
  for (int k = 0; k < K; k++) {
    const float *dy = dY + (size_t)b * ldy + (size_t)k * n_out;
    const float *w = W + k * wsz + (size_t)i * n_out;
    for (int j = lane; j < n_out; j += 32)
      acc += dy[j] * w[j];
  }
  for (int off = 16; off > 0; off >>= 1)
    acc += __shfl_down_sync(0xffffffffu, acc, off);
  if (lane == 0)
    dX[(size_t)b * ldx + i] = acc;
}

/* The input gradient of a shared-input layer whose dW and db are not wanted (the critics'
 * first layer in the actor step's input-gradient pass), with the activation backward that
 * k_act_bwd_colsum would run first: block b owns row b, masks the row of dY in place
 * (dY = dY * act'(Y)), waits, then its warps compute that row's dX of each wanted segment
 * as k_dx_shared does (the same per-warp order: the same bits). ovf (fp16) flags a masked
 * gradient out of fp16 range, as k_act_bwd_colsum. */
typedef struct {
  float *dX[2];
  int ldx[2], n[2], row[2]; /* row: the segment's first row of each member's W */
  float *dY;
  const float *Y, *W;
  int ldy, n_out, K, act, n_seg;
  size_t wsz;
  int *ovf;
} dx_act_t;

__global__ void k_dx_shared_act(dx_act_t a) {
  const int b = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  float *dy = a.dY + (size_t)b * a.ldy;
  const float *y = a.Y + (size_t)b * a.ldy;
  int bad = 0;
  for (int c = threadIdx.x; c < a.K * a.n_out; c += blockDim.x) {
    float d = dy[c];
    if (a.act == SAC_ACT_RELU)
      d = y[c] > 0.0f ? d : 0.0f;
    else if (a.act == SAC_ACT_TANH)
      d *= 1.0f - y[c] * y[c];
    dy[c] = d;
    bad |= !(fabsf(d) <= 65504.0f);
  }
  if (a.ovf && bad)
    *a.ovf = 1;
  __syncthreads(); /* the masked row visible to the block */
  for (int s = 0; s < a.n_seg; s++) {
    if (!a.dX[s])
      continue;
    for (int i = warp; i < a.n[s]; i += nwarps) {
      float acc = 0.0f;
      for (int k = 0; k < a.K; k++) {
        const float *dyk = dy + (size_t)k * a.n_out;
        const float *w = a.W + k * a.wsz + (size_t)(a.row[s] + i) * a.n_out;
        for (int j = lane; j < a.n_out; j += 32)
          acc += dyk[j] * w[j];
      }
      for (int off = 16; off > 0; off >>= 1)
        acc += __shfl_down_sync(0xffffffffu, acc, off);
      if (lane == 0)
        a.dX[s][(size_t)b * a.ldx[s] + i] = acc;
    }
  }
}

/* n normals: element i is normal (i % 2) of Philox block (i / 2, stream, tag), where
 * stream is the given one plus the graph's offset when recorded into a graph. */
__global__ void k_normal(float *out, size_t n, uint32_t k0, uint32_t k1, unsigned long long stream,
                         const unsigned long long *delta, uint32_t tag) {
  size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  size_t i = 2 * j;
  if (i >= n)
    return;
  uint64_t s = stream + (delta ? *delta : 0ull);
  uint32_t key[2] = {k0, k1};
  float z0, z1;
  sac_philox_normal2(key, (uint32_t)j, s, tag, &z0, &z1);
  out[i] = z0;
  if (i + 1 < n)
    out[i + 1] = z1;
}

/* normal2: blockIdx.y = 0 writes out[0, n) with tag0, 1 writes out[n, 2n) with tag1 */
__global__ void k_normal2(float *out, size_t n, uint32_t k0, uint32_t k1, unsigned long long stream,
                          const unsigned long long *delta, uint32_t tag0, uint32_t tag1) {
  size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  size_t i = 2 * j;
  if (i >= n)
    return;
  float *o = out + (blockIdx.y ? n : 0);
  uint64_t s = stream + (delta ? *delta : 0ull);
  uint32_t key[2] = {k0, k1};
  float z0, z1;
  sac_philox_normal2(key, (uint32_t)j, s, blockIdx.y ? tag1 : tag0, &z0, &z1);
  o[i] = z0;
  if (i + 1 < n)
    o[i + 1] = z1;
}

#define HALF_LOG_2PI 0.91893853320467274178f
#define LOG2F_ 0.69314718055994530942f

__device__ __forceinline__ float d_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }
__device__ __forceinline__ float d_clamp(float x, float lo, float hi) { return x < lo ? lo : (x > hi ? hi : x); }

/* one thread per row, the action dimensions in order (as the cpu sums them) */
__global__ void k_head_fwd(int B, int A, float lsmin, float lsmax, const float *P, const float *eps, float *a, int lda,
                           float *logp) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= B)
    return;
  const float *mu = P + (size_t)r * 2 * A, *ls_raw = mu + A;
  const float *e = eps + (size_t)r * A;
  float lp = 0.0f;
  for (int i = 0; i < A; i++) {
    float ls = d_clamp(ls_raw[i], lsmin, lsmax);
    float u = mu[i] + expf(ls) * e[i];
    a[(size_t)r * lda + i] = tanhf(u);
    lp += -0.5f * e[i] * e[i] - ls - HALF_LOG_2PI - 2.0f * (LOG2F_ - u - d_softplus(-2.0f * u));
  }
  logp[r] = lp;
}

__global__ void k_head_bwd(int B, int A, float lsmin, float lsmax, const float *P, const float *eps, const float *a,
                           int lda, const float *da, int ldda, const float *dlogp, float *dP) {
  int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= B * A)
    return;
  int r = idx / A, i = idx % A;
  float raw = P[(size_t)r * 2 * A + A + i];
  float e = eps[(size_t)r * A + i];
  float ai = a[(size_t)r * lda + i];
  float g = da ? da[(size_t)r * ldda + i] : 0.0f;
  float du = g * (1.0f - ai * ai) + dlogp[r] * 2.0f * ai;
  dP[(size_t)r * 2 * A + i] = du;
  int inside = raw > lsmin && raw < lsmax;
  float ls = d_clamp(raw, lsmin, lsmax);
  dP[(size_t)r * 2 * A + A + i] = inside ? du * expf(ls) * e - dlogp[r] : 0.0f;
}

__global__ void k_critic_target(int B, float gamma, const float *log_alpha, const float *r, const float *term,
                                const float *qt, const float *logp_next, float *y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= B)
    return;
  const float alpha = expf(*log_alpha);
  float qmin = fminf(qt[2 * i], qt[2 * i + 1]);
  y[i] = r[i] + gamma * (1.0f - term[i]) * (qmin - alpha * logp_next[i]);
}

/* fixed-order block sum of two doubles (blockDim.x a power of two, at most THREADS) */
__device__ void block_sum2(double *a, double *b) {
  __shared__ double sa[THREADS], sb[THREADS];
  int t = threadIdx.x;
  sa[t] = *a;
  sb[t] = *b;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (t < s) {
      sa[t] += sa[t + s];
      sb[t] += sb[t + s];
    }
    __syncthreads();
  }
  *a = sa[0];
  *b = sb[0];
}

/* Loss kernels run as one block (the batch is small); gradients are
 * multiplied by the loss scale in fp16 mode (sc non-NULL). */
__device__ void d_critic_loss(int B, const float *q, const float *y, const float *w, float *dq, float *td,
                              float *stats, const scaler_t *sc) {
  const float S = sc ? sc->scale : 1.0f;
  const float invB = 1.0f / (float)B;
  double loss = 0.0, qsum = 0.0;
  for (int i = threadIdx.x; i < B; i += blockDim.x) {
    float wi = w ? w[i] : 1.0f;
    float d1 = q[2 * i] - y[i], d2 = q[2 * i + 1] - y[i];
    loss += 0.5 * wi * ((double)d1 * d1 + (double)d2 * d2);
    dq[2 * i] = wi * d1 * invB * S;
    dq[2 * i + 1] = wi * d2 * invB * S;
    td[i] = fabsf(fminf(q[2 * i], q[2 * i + 1]) - y[i]);
    qsum += q[2 * i];
  }
  block_sum2(&loss, &qsum);
  if (threadIdx.x == 0) {
    stats[0] = (float)(loss / B);
    stats[1] = (float)(qsum / B);
  }
}

__global__ void k_critic_loss(int B, const float *q, const float *y, const float *w, float *dq, float *td, float *stats,
                              const scaler_t *sc) {
  d_critic_loss(B, q, y, w, dq, td, stats, sc);
}

__device__ void d_actor_loss(int B, const float *log_alpha, const float *q, const float *logp, float *dq, float *dlogp,
                             float *stats, const scaler_t *sc) {
  const float S = sc ? sc->scale : 1.0f;
  const float alpha = expf(*log_alpha), invB = 1.0f / (float)B;
  double loss = 0.0, ent = 0.0;
  for (int i = threadIdx.x; i < B; i += blockDim.x) {
    int first = q[2 * i] <= q[2 * i + 1];
    float qmin = first ? q[2 * i] : q[2 * i + 1];
    loss += (double)alpha * logp[i] - qmin;
    ent -= logp[i];
    dq[2 * i] = first ? -invB * S : 0.0f;
    dq[2 * i + 1] = first ? 0.0f : -invB * S;
    dlogp[i] = alpha * invB * S;
  }
  block_sum2(&loss, &ent);
  if (threadIdx.x == 0) {
    stats[0] = (float)(loss / B);
    stats[1] = (float)(ent / B);
  }
}

__global__ void k_actor_loss(int B, const float *log_alpha, const float *q, const float *logp, float *dq, float *dlogp,
                             float *stats, const scaler_t *sc) {
  d_actor_loss(B, log_alpha, q, logp, dq, dlogp, stats, sc);
}

__device__ void d_alpha_loss(int B, float target_entropy, const float *log_alpha, const float *logp, float *grad,
                             float *stats, const scaler_t *sc) {
  double s = 0.0, unused = 0.0;
  for (int i = threadIdx.x; i < B; i += blockDim.x)
    s += (double)logp[i] + target_entropy;
  block_sum2(&s, &unused);
  if (threadIdx.x == 0) {
    float mean = (float)(s / B);
    grad[0] = -mean * (sc ? sc->scale : 1.0f);
    stats[0] = -*log_alpha * mean;
  }
}

__global__ void k_alpha_loss(int B, float target_entropy, const float *log_alpha, const float *logp, float *grad,
                             float *stats, const scaler_t *sc) {
  d_alpha_loss(B, target_entropy, log_alpha, logp, grad, stats, sc);
}

/* The two in one launch (issue 16); the barrier keeps the second block_sum2 from
 * overwriting the shared sums while a thread still reads the first's result. */
__global__ void k_actor_alpha_loss(int B, float target_entropy, const float *log_alpha, const float *q,
                                   const float *logp, float *dq, float *dlogp, float *stats_pi, float *grad_alpha,
                                   float *stats_alpha, const scaler_t *sc) {
  d_actor_loss(B, log_alpha, q, logp, dq, dlogp, stats_pi, sc);
  __syncthreads();
  d_alpha_loss(B, target_entropy, log_alpha, logp, grad_alpha, stats_alpha, sc);
}

/* The critics' one-wide last layer and a head op on its q in one launch (q_head): one
 * warp per q[b, k], computed as k_out1_fwd does (the same per-warp order, so the same
 * bits), four warps a block (HEAD_THREADS): B K / 4 blocks, 128 at batch 256; the last
 * block to finish (the call site's own counter, with fences either side) then runs the
 * head op on all of q, its HEAD_THREADS threads each over B / HEAD_THREADS rows with a
 * fixed-order tree for the sums (the target row by row). fp32 arithmetic in every
 * precision, as k_out1_fwd; in fp16 the loss gradients carry the loss scale (sc). */
#define HEAD_THREADS 128
typedef struct {
  int then, B, K, n, ldx;
  const float *X, *W, *bias;
  float *q;
  unsigned int *done; /* blocks finished (the call site's counter; 0 between launches) */
  float gamma, target_entropy;
  const float *log_alpha, *r, *term, *logp, *w;
  float *y, *dq, *dlogp, *td, *stats, *grad_alpha, *stats_alpha;
  const scaler_t *sc;
} out1_head_t;

__global__ void k_out1_head(out1_head_t a) {
  __shared__ int s_last;
  const int lane = threadIdx.x & 31, nwarps = blockDim.x >> 5;
  for (int pair = blockIdx.x * nwarps + (threadIdx.x >> 5); pair < a.B * a.K; pair += gridDim.x * nwarps) {
    const int b = pair / a.K, k = pair % a.K;
    const float *x = a.X + (size_t)b * a.ldx + (size_t)k * a.n, *w = a.W + (size_t)k * a.n;
    float acc = 0.0f;
    for (int j = lane; j < a.n; j += 32)
      acc += x[j] * w[j];
    for (int o = 16; o > 0; o >>= 1)
      acc += __shfl_down_sync(0xffffffffu, acc, o);
    if (lane == 0)
      a.q[(size_t)b * a.K + k] = acc + (a.bias ? a.bias[k] : 0.0f);
  }
  /* this block's q out to every block, then: is it the last block to finish? */
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0)
    s_last = atomicAdd(a.done, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!s_last)
    return;
  __threadfence(); /* every block's q visible to this one */
  if (threadIdx.x == 0)
    *a.done = 0; /* for the next launch (the stream orders it before that one) */
  if (a.then == SAC_Q_TARGET) {
    const float alpha = expf(*a.log_alpha);
    for (int i = threadIdx.x; i < a.B; i += blockDim.x) {
      float qmin = fminf(a.q[2 * i], a.q[2 * i + 1]);
      a.y[i] = a.r[i] + a.gamma * (1.0f - a.term[i]) * (qmin - alpha * a.logp[i]);
    }
  } else if (a.then == SAC_Q_CRITIC_LOSS) {
    d_critic_loss(a.B, a.q, a.y, a.w, a.dq, a.td, a.stats, a.sc);
  } else {
    d_actor_loss(a.B, a.log_alpha, a.q, a.logp, a.dq, a.dlogp, a.stats, a.sc);
    __syncthreads();
    d_alpha_loss(a.B, a.target_entropy, a.log_alpha, a.logp, a.grad_alpha, a.stats_alpha, a.sc);
  }
}

/* The policy's output (policy_fwd) in one launch: one warp per row r of the 2B, four
 * warps a block. The actor's last layer P[r, j] = X[r] . W[:, j] + bias[j] (fp32 in every
 * precision): each lane sums its strided share of X[r] for 16 outputs at a time, then a
 * fixed shuffle tree per output (the order of a lane-strided dot product per output);
 * then lane c < A runs the head for action dimension c: its normal (element i of a half
 * is normal i % 2 of Philox block i / 2 under the half's tag, as k_normal2), the
 * squashed action and its log-probability term, the terms summed into logp[r] by lane 0
 * in dimension order, as k_head_fwd sums them. The copies run grid-stride over every
 * thread afterwards. */
typedef struct {
  int rows, A, H, ldx, lda, n_copy;
  const float *X, *W, *bias;
  float *P, *eps, *a, *logp;
  float lsmin, lsmax;
  uint32_t k0, k1, tag0, tag1;
  unsigned long long stream;
  const unsigned long long *delta;
  sac_copy_t copy[SAC_MAX_COPIES];
} policy_fwd_t;
#define POLICY_FWD_THREADS 128

/* P[r, :] of the last layer, written by lane 0 (the warp's writes then visible to it) */
__device__ void d_policy_layer_row(const policy_fwd_t &p, int r, int lane) {
  const int n2 = 2 * p.A;
  const float *x = p.X + (size_t)r * p.ldx;
  for (int j0 = 0; j0 < n2; j0 += 16) {
    float acc[16];
#pragma unroll
    for (int q = 0; q < 16; q++)
      acc[q] = 0.0f;
    const int nj = n2 - j0 < 16 ? n2 - j0 : 16;
    for (int i = lane; i < p.H; i += 32) {
      const float xi = x[i];
      const float *w = p.W + (size_t)i * n2 + j0;
#pragma unroll
      for (int q = 0; q < 16; q++)
        if (q < nj)
          acc[q] += xi * w[q];
    }
#pragma unroll
    for (int q = 0; q < 16; q++) {
      float v = acc[q];
      for (int o = 16; o > 0; o >>= 1)
        v += __shfl_down_sync(0xffffffffu, v, o);
      if (lane == 0 && q < nj)
        p.P[(size_t)r * n2 + j0 + q] = v + (p.bias ? p.bias[j0 + q] : 0.0f);
    }
  }
  __syncwarp(); /* lane 0's P visible to the warp */
}

/* the head of row r, lane c over dimensions c, c + 32, ...; logp[r] by lane 0 */
__device__ void d_policy_head_row(const policy_fwd_t &p, int r, int lane) {
  const int A = p.A, half = p.rows / 2;
  const float *mu = p.P + (size_t)r * 2 * A, *ls_raw = mu + A;
  const uint32_t key[2] = {p.k0, p.k1}, tag = r < half ? p.tag0 : p.tag1;
  const uint64_t s = p.stream + (p.delta ? *p.delta : 0ull);
  const size_t first = (size_t)(r < half ? r : r - half) * A; /* the row's first element in its half */
  float lp = 0.0f;
  for (int c0 = 0; c0 < A; c0 += 32) {
    const int c = c0 + lane;
    float term = 0.0f;
    if (c < A) {
      const size_t i = first + c;
      float z0, z1;
      sac_philox_normal2(key, (uint32_t)(i / 2), s, tag, &z0, &z1);
      const float e = (i & 1) ? z1 : z0;
      p.eps[(size_t)r * A + c] = e;
      const float ls = d_clamp(ls_raw[c], p.lsmin, p.lsmax);
      const float u = mu[c] + expf(ls) * e;
      p.a[(size_t)r * p.lda + c] = tanhf(u);
      term = -0.5f * e * e - ls - HALF_LOG_2PI - 2.0f * (LOG2F_ - u - d_softplus(-2.0f * u));
    }
    for (int l = 0; l < 32 && c0 + l < A; l++) { /* in dimension order, as k_head_fwd */
      const float t = __shfl_sync(0xffffffffu, term, l);
      if (lane == 0)
        lp += t;
    }
  }
  if (lane == 0)
    p.logp[r] = lp;
}

__global__ void k_policy_fwd(policy_fwd_t p) {
  const size_t tid = blockIdx.x * (size_t)blockDim.x + threadIdx.x, nth = (size_t)gridDim.x * blockDim.x;
  const size_t warp = tid >> 5;
  const int lane = threadIdx.x & 31;
  if (warp < (size_t)p.rows) { /* whole warps */
    d_policy_layer_row(p, (int)warp, lane);
    d_policy_head_row(p, (int)warp, lane);
  }
  for (int c = 0; c < p.n_copy; c++) {
    const sac_copy_t &cp = p.copy[c];
    const size_t n = (size_t)cp.rows * cp.cols;
    for (size_t i = tid; i < n; i += nth) {
      const size_t r = i / cp.cols, col = i % cp.cols;
      cp.dst[r * cp.ldd + col] = cp.src[r * cp.lds + col];
    }
  }
}

/* The policy's backward through its output (policy_bwd) in one launch. Grid (tiles of 32
 * hidden columns i of the last layer's input, chunks of PB_ROWS rows), block (32, 8):
 * each block computes its chunk's head gradient dP (as k_head_bwd) into shared memory
 * (the tile-0 blocks also write it out and sum its columns for db); then for its columns
 * the chunk's share of dW[i, j] = sum_b X[b, i] dP[b, j] (thread (x, y) owns the j = y
 * mod 8), dX[b, i] = sum_j dP[b, j] W[i, j] with the layer below's activation backward
 * applied, and that layer's bias sum. The last block of each tile to finish (its own
 * counter) adds the chunks' partials in chunk order. Every sum in a fixed order (rows
 * ascending, j ascending, the 8 row lanes in order, the chunks in order). fp32 in every
 * precision; ovf (fp16) flags a dX the layer below's fp16 matmuls could not take. Shared
 * memory: PB_ROWS 2A floats. */
#define PB_ROWS 16
typedef struct {
  int B, A, H, ldx, lda, ldda, below_act;
  float lsmin, lsmax;
  const float *P, *eps, *a, *da, *dlogp, *X, *W;
  float *dP, *dW, *db, *dX, *dbb;
  int *ovf;
  float *part;       /* per chunk: dW (H 2A), dbb (H), db (2A) */
  unsigned int *ctr; /* per tile */
} policy_bwd_t;

__device__ void d_policy_bwd_chunk(const policy_bwd_t &p, float *dPs, int r0, int nr) {
  const int A = p.A, n2 = 2 * A, t = threadIdx.y * 32 + threadIdx.x;
  for (int k = t; k < nr * A; k += 256) {
    const int rr = k / A, c = k % A;
    const size_t b = (size_t)r0 + rr;
    float raw = p.P[b * n2 + A + c], e = p.eps[b * A + c], ai = p.a[b * p.lda + c];
    float g = p.da ? p.da[b * p.ldda + c] : 0.0f;
    float du = g * (1.0f - ai * ai) + p.dlogp[b] * 2.0f * ai;
    int inside = raw > p.lsmin && raw < p.lsmax;
    float ls = d_clamp(raw, p.lsmin, p.lsmax);
    dPs[rr * n2 + c] = du;
    dPs[rr * n2 + A + c] = inside ? du * expf(ls) * e - p.dlogp[b] : 0.0f;
  }
}

__global__ void k_policy_bwd(policy_bwd_t p) {
  extern __shared__ float dPs[];
  __shared__ float red[8][33];
  __shared__ int s_last;
  const int n2 = 2 * p.A, tx = threadIdx.x, ty = threadIdx.y, t = ty * 32 + tx;
  const int i = blockIdx.x * 32 + tx, r0 = blockIdx.y * PB_ROWS;
  const int nr = p.B - r0 < PB_ROWS ? p.B - r0 : PB_ROWS, one = gridDim.y == 1;
  const size_t per = (size_t)p.H * n2 + p.H + n2;
  float *part = p.part + (size_t)blockIdx.y * per;
  d_policy_bwd_chunk(p, dPs, r0, nr);
  __syncthreads();
  if (blockIdx.x == 0) {
    for (int k = t; k < nr * n2; k += 256)
      p.dP[(size_t)r0 * n2 + k] = dPs[k];
    for (int j = t; j < n2; j += 256) {
      float acc = 0.0f;
      for (int rr = 0; rr < nr; rr++)
        acc += dPs[rr * n2 + j];
      if (!one)
        part[(size_t)p.H * n2 + p.H + j] = acc;
      else if (p.db)
        p.db[j] = acc;
    }
  }
  float bsum = 0.0f;
  int bad = 0;
  if (i < p.H) {
    for (int j = ty; j < n2; j += 8) {
      float acc = 0.0f;
      for (int rr = 0; rr < nr; rr++)
        acc += p.X[(size_t)(r0 + rr) * p.ldx + i] * dPs[rr * n2 + j];
      if (!one)
        part[(size_t)i * n2 + j] = acc;
      else if (p.dW)
        p.dW[(size_t)i * n2 + j] = acc;
    }
    for (int rr = ty; rr < nr; rr += 8) {
      const size_t b = (size_t)r0 + rr;
      float d = 0.0f;
      for (int j = 0; j < n2; j++)
        d += dPs[rr * n2 + j] * p.W[(size_t)i * n2 + j];
      const float x = p.X[b * p.ldx + i];
      if (p.below_act == SAC_ACT_RELU)
        d = x > 0.0f ? d : 0.0f;
      else if (p.below_act == SAC_ACT_TANH)
        d *= 1.0f - x * x;
      p.dX[b * p.ldx + i] = d;
      bsum += d;
      bad |= !(fabsf(d) <= 65504.0f);
    }
  }
  if (p.ovf && bad)
    *p.ovf = 1;
  red[ty][tx] = bsum;
  __syncthreads();
  if (ty == 0 && i < p.H) {
    float sum = 0.0f;
    for (int y = 0; y < 8; y++)
      sum += red[y][tx];
    if (!one)
      part[(size_t)p.H * n2 + i] = sum;
    else if (p.dbb)
      p.dbb[i] = sum;
  }
  if (one)
    return;
  __threadfence();
  __syncthreads();
  if (t == 0)
    s_last = atomicAdd(&p.ctr[blockIdx.x], 1u) == gridDim.y - 1;
  __syncthreads();
  if (!s_last)
    return;
  __threadfence();
  /* this tile's columns, the chunks in order */
  const int i0 = blockIdx.x * 32, ncol = p.H - i0 < 32 ? p.H - i0 : 32;
  for (int k = t; k < ncol * n2; k += 256) {
    const size_t o = (size_t)i0 * n2 + k;
    float acc = 0.0f;
#pragma unroll 8
    for (unsigned ch = 0; ch < gridDim.y; ch++)
      acc += __ldcg(p.part + ch * per + o);
    if (p.dW)
      p.dW[o] = acc;
  }
  for (int k = t; k < ncol; k += 256) {
    const size_t o = (size_t)p.H * n2 + i0 + k;
    float acc = 0.0f;
#pragma unroll 8
    for (unsigned ch = 0; ch < gridDim.y; ch++)
      acc += __ldcg(p.part + ch * per + o);
    if (p.dbb)
      p.dbb[i0 + k] = acc;
  }
  if (blockIdx.x == 0)
    for (int j = t; j < n2; j += 256) {
      const size_t o = (size_t)p.H * n2 + p.H + j;
      float acc = 0.0f;
      for (unsigned ch = 0; ch < gridDim.y; ch++)
        acc += __ldcg(p.part + ch * per + o);
      if (p.db)
        p.db[j] = acc;
    }
  if (t == 0)
    p.ctr[blockIdx.x] = 0;
}

/* flags[block] = some g in this block's share is inf or NaN */
__global__ void k_nonfinite(const float *g, size_t n, int *flags) {
  int bad = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    bad |= !isfinite(g[i]);
  bad = __syncthreads_or(bad);
  if (threadIdx.x == 0)
    flags[blockIdx.x] = bad;
}

/* The loss guard's verdict (adam_polyak): guard[i] NaN or Inf for a bit i of mask. */
__device__ int d_guard_tripped(const float *guard, unsigned mask) {
  if (!guard)
    return 0;
  int bad = 0;
  for (unsigned i = 0; i < 32u; i++)
    if (mask >> i & 1u)
      bad |= !isfinite(guard[i]);
  return bad;
}

/* One bias-corrected Adam step (PyTorch's formula, as cpu_adam) with the step counter
 * read and advanced on the device: every block computes with *t + 1 and the last block
 * to finish stores it. In fp16 mode (flags, ovf, sc) gradients are unscaled and the
 * whole step is skipped, t included, when the check kernel found inf/NaN or a backward
 * operand overflowed fp16; the last block clears the overflow flag for the next step. */
__global__ void k_adam(float *p, const float *g, float *m, float *v, size_t n, float lr, float b1, float b2, float eps,
                       float *t, unsigned int *done, const int *flags, int nflags, int *ovf, scaler_t *sc,
                       const float *guard, unsigned guard_mask) {
  __shared__ float s_step, s_sqrt_bc2, s_inv;
  __shared__ int s_skip, s_guard;
  if (threadIdx.x == 0) {
    int skip = 0;
    if (flags)
      for (int i = 0; i < nflags; i++)
        skip |= flags[i];
    if (ovf)
      skip |= *ovf;
    s_guard = d_guard_tripped(guard, guard_mask);
    skip |= s_guard;
    float tt = *t + 1.0f;
    float bc1 = 1.0f - powf(b1, tt), bc2 = 1.0f - powf(b2, tt);
    s_step = lr / bc1;
    s_sqrt_bc2 = sqrtf(bc2);
    s_inv = sc ? 1.0f / sc->scale : 1.0f;
    s_skip = skip;
  }
  __syncthreads();
  if (!s_skip) {
    const float step = s_step, sqrt_bc2 = s_sqrt_bc2, inv = s_inv;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
      float gi = g[i] * inv;
      float mi = b1 * m[i] + (1.0f - b1) * gi;
      float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
      m[i] = mi;
      v[i] = vi;
      p[i] -= step * mi / (sqrtf(vi) / sqrt_bc2 + eps);
    }
  }
  if (threadIdx.x == 0) {
    __threadfence();
    unsigned int prev = atomicAdd(done, 1u);
    if (prev == gridDim.x - 1) {
      if (!s_skip)
        *t = *t + 1.0f;
      else if (sc && !s_guard) /* a guarded loss is not the scale's fault */
        sc->found_inf = 1;
      if (ovf)
        *ovf = 0;
      *done = 0;
    }
  }
}

__global__ void k_polyak(float *tgt, const float *src, size_t n, float keep, float tau, const float *guard,
                         unsigned guard_mask) {
  if (d_guard_tripped(guard, guard_mask))
    return;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    tgt[i] = keep * tgt[i] + tau * src[i];
}

/* Multi-tensor Adam + Polyak (adam_polyak): groups side by side in one grid-stride
 * index space, then the Polyak segment (pgroup < 0), or the Polyak done by the thread
 * that stepped the element (pgroup = the group whose p is Polyak's src). Each block reads
 * every group's step counter at its start; the last block to finish advances them, as
 * k_adam does. fp32 / tf32 / bf16 only (fp16 takes the unfused ops: its skip logic). */
typedef struct {
  float *p[SAC_ADAM_MAX_GROUPS], *m[SAC_ADAM_MAX_GROUPS], *v[SAC_ADAM_MAX_GROUPS], *t[SAC_ADAM_MAX_GROUPS];
  const float *g[SAC_ADAM_MAX_GROUPS];
  unsigned long long off[SAC_ADAM_MAX_GROUPS + 1];
  float lr[SAC_ADAM_MAX_GROUPS], b1[SAC_ADAM_MAX_GROUPS], b2[SAC_ADAM_MAX_GROUPS], eps[SAC_ADAM_MAX_GROUPS];
  int n;
  float *tgt;
  const float *src;
  unsigned long long pn;
  int pgroup;
  float keep, tau;
  const float *guard; /* the loss guard (NULL: none): skip everything when tripped */
  unsigned guard_mask;
} adam_multi_t;

__global__ void k_adam_polyak(adam_multi_t a, unsigned int *done) {
  __shared__ float s_step[SAC_ADAM_MAX_GROUPS], s_sqrt_bc2[SAC_ADAM_MAX_GROUPS];
  __shared__ int s_skip;
  if (threadIdx.x == 0)
    s_skip = d_guard_tripped(a.guard, a.guard_mask);
  if (threadIdx.x < (unsigned)a.n) {
    const int j = threadIdx.x;
    float tt = *a.t[j] + 1.0f;
    s_step[j] = a.lr[j] / (1.0f - powf(a.b1[j], tt));
    s_sqrt_bc2[j] = sqrtf(1.0f - powf(a.b2[j], tt));
  }
  __syncthreads();
  const unsigned long long total = s_skip ? 0ull : a.off[a.n] + (a.pgroup < 0 ? a.pn : 0ull);
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < total;
       i += (unsigned long long)gridDim.x * blockDim.x) {
    if (i >= a.off[a.n]) { /* the separate Polyak segment */
      unsigned long long k = i - a.off[a.n];
      a.tgt[k] = a.keep * a.tgt[k] + a.tau * a.src[k];
      continue;
    }
    int j = 0;
    while (i >= a.off[j + 1])
      j++;
    const unsigned long long k = i - a.off[j];
    const float b1 = a.b1[j], b2 = a.b2[j], gi = a.g[j][k];
    float mi = b1 * a.m[j][k] + (1.0f - b1) * gi;
    float vi = b2 * a.v[j][k] + (1.0f - b2) * gi * gi;
    a.m[j][k] = mi;
    a.v[j][k] = vi;
    float pi = a.p[j][k] - s_step[j] * mi / (sqrtf(vi) / s_sqrt_bc2[j] + a.eps[j]);
    a.p[j][k] = pi;
    if (j == a.pgroup && k < a.pn)
      a.tgt[k] = a.keep * a.tgt[k] + a.tau * pi;
  }
  if (threadIdx.x == 0) {
    __threadfence();
    unsigned int prev = atomicAdd(done, 1u);
    if (prev == gridDim.x - 1) {
      for (int j = 0; j < a.n && !s_skip; j++)
        *a.t[j] = *a.t[j] + 1.0f;
      *done = 0;
    }
  }
}

/* End of an fp16 update: back off after a skipped step, grow after a run of good ones. */
__global__ void k_scaler_update(scaler_t *sc) {
  if (sc->found_inf) {
    sc->scale = fminf(fmaxf(sc->scale * 0.5f, SCALE_MIN), SCALE_MAX);
    sc->good = 0;
    sc->skipped++;
    sc->found_inf = 0;
  } else if (++sc->good >= sc->growth_interval) {
    sc->scale = fminf(sc->scale * 2.0f, SCALE_MAX);
    sc->good = 0;
  }
}

__global__ void k_set_u64(unsigned long long *p, unsigned long long v) { *p = v; }

/* Data-parallel fp16: the overflow flag out to a float slot that is all-reduced with the
 * gradients, and back (nonzero after the reduction: some rank overflowed). */
__global__ void k_ovf_export(const int *ovf, float *dst) { *dst = *ovf ? 1.0f : 0.0f; }
__global__ void k_ovf_import(int *ovf, const float *src) { *ovf = *src != 0.0f; }
__global__ void k_add_u64(unsigned long long *p, unsigned long long v) { *p += v; }

/* Holds the stream until the host writes go[0] (timing_begin with hold): the ops enqueued
 * behind it then run back to back from the queue. Gives up after max_ns (go[1] = 1), so a
 * host that blocks on a full launch queue cannot hang the device. */
__global__ void k_hold(volatile int *go, unsigned long long max_ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  while (go[0] == 0) {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    if (t - t0 > max_ns) {
      go[1] = 1;
      return;
    }
    __nanosleep(1000);
  }
}

typedef struct {
  float *dst[STAGE_MAX];
  const float *src[STAGE_MAX];
  unsigned long long n[STAGE_MAX];
} scatter_t;

/* staged parts from the device staging buffer to their destinations; blockIdx.y = part */
__global__ void k_scatter(scatter_t s) {
  const int p = blockIdx.y;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < s.n[p]; i += (size_t)gridDim.x * blockDim.x)
    s.dst[p][i] = s.src[p][i];
}

/* ------------------------------------------------------------------------------------ */
/* cuBLASLt matmuls                                                                       */

/* A column-major product D (m, n) = op(A) op(B) [+ beta D] [+ bias, act], batch members
 * at element strides sa, sb, sd (sa or sb 0: broadcast). A is stored (m, k) when ta is N,
 * else (k, m); B is (k, n) when tb is N, else (n, k). */
typedef struct {
  cublasOperation_t ta, tb;
  int m, n, k;
  const float *A;
  int64_t lda, sa;
  const float *B;
  int64_t ldb, sb;
  float *D;
  int64_t ldd, sd;
  float beta; /* 0, or 1 to accumulate into D */
  int batch;
  sac_act_t act;   /* with bias: applied after it */
  const float *bias; /* NULL: none; else batch * m values at stride sbias == m */
} gemm_t;

enum { EPI_NONE = 0, EPI_BIAS = 1, EPI_RELU_BIAS = 2 };

static int64_t align_of(const void *p, int64_t stride_elems, int batch) {
  uintptr_t a = (uintptr_t)p;
  if (batch > 1)
    a |= (uintptr_t)(stride_elems * (int64_t)sizeof(float));
  int64_t al = 256;
  while (al > 4 && (a % (uintptr_t)al) != 0)
    al >>= 1;
  return al;
}

static void plan_release(plan_t *p) {
  if (p->op)
    cublasLtMatmulDescDestroy(p->op);
  if (p->la)
    cublasLtMatrixLayoutDestroy(p->la);
  if (p->lb)
    cublasLtMatrixLayoutDestroy(p->lb);
  if (p->ld)
    cublasLtMatrixLayoutDestroy(p->ld);
  p->op = NULL, p->la = p->lb = p->ld = NULL;
}

static cublasLtMatrixLayout_t make_layout(cu_t *im, uint64_t rows, uint64_t cols, int64_t ld, int batch,
                                          int64_t stride) {
  cublasLtMatrixLayout_t l = NULL;
  if (CKLN(im, cublasLtMatrixLayoutCreate(&l, CUDA_R_32F, rows, cols, ld)))
    return NULL;
  if (batch > 1) {
    int32_t bc = batch;
    if (CKLN(im, cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof bc)) ||
        CKLN(im, cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                  sizeof stride))) {
      cublasLtMatrixLayoutDestroy(l);
      return NULL;
    }
  }
  return l;
}

/* Descriptors and the best heuristic algorithm for key with compute type ct; 0 or -1. */
static int plan_build(cu_t *im, plan_t *p, const gemm_t *g, cublasComputeType_t ct) {
  const plan_key_t *k = &p->key;
  memset(&p->algo, 0, sizeof p->algo);
  p->ct = ct;
  if (CKLN(im, cublasLtMatmulDescCreate(&p->op, ct, CUDA_R_32F)))
    return -1;
  int32_t ta = (int32_t)g->ta, tb = (int32_t)g->tb;
  if (CKLN(im, cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta)) ||
      CKLN(im, cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb)))
    return -1;
  if (k->epi != EPI_NONE) {
    uint32_t epi = k->epi == EPI_RELU_BIAS ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
    const void *bias = g->bias;
    if (CKLN(im, cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi)) ||
        CKLN(im, cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias)))
      return -1;
    if (g->batch > 1) {
      int64_t sb = k->sbias;
      if (CKLN(im, cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &sb, sizeof sb)))
        return -1;
    }
  }
  uint64_t ar = g->ta == CUBLAS_OP_N ? g->m : g->k, ac = g->ta == CUBLAS_OP_N ? g->k : g->m;
  uint64_t br = g->tb == CUBLAS_OP_N ? g->k : g->n, bc = g->tb == CUBLAS_OP_N ? g->n : g->k;
  p->la = make_layout(im, ar, ac, g->lda, g->batch, g->sa);
  p->lb = make_layout(im, br, bc, g->ldb, g->batch, g->sb);
  p->ld = make_layout(im, g->m, g->n, g->ldd, g->batch, g->sd);
  if (!p->la || !p->lb || !p->ld)
    return -1;
  cublasLtMatmulPreference_t pref = NULL;
  if (CKLN(im, cublasLtMatmulPreferenceCreate(&pref)))
    return -1;
  uint64_t ws = WORKSPACE_BYTES;
  uint32_t al_a = (uint32_t)k->al_a, al_b = (uint32_t)k->al_b, al_d = (uint32_t)k->al_d;
  int rc = 0;
  if (CKLN(im, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws)) ||
      CKLN(im, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a,
                                                    sizeof al_a)) ||
      CKLN(im, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b,
                                                    sizeof al_b)) ||
      CKLN(im, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d,
                                                    sizeof al_d)) ||
      CKLN(im, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d,
                                                    sizeof al_d)))
    rc = -1;
  if (rc == 0) {
    cublasLtMatmulHeuristicResult_t res;
    int n_res = 0;
    memset(&res, 0, sizeof res);
    cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(im->lt, p->op, p->la, p->lb, p->ld, p->ld, pref, 1, &res, &n_res);
    if (st != CUBLAS_STATUS_SUCCESS || n_res < 1 || res.state != CUBLAS_STATUS_SUCCESS)
      rc = -1; /* no algorithm for this compute type: the caller tries the next */
    else
      p->algo = res.algo;
  }
  cublasLtMatmulPreferenceDestroy(pref);
  return rc;
}

/* The cached plan for g, built on first use (never during a capture in practice: the
 * warm-up updates run every shape eagerly first). NULL when no algorithm exists. A plan
 * with a fused epilogue is only ever built at the precision's own compute type: where
 * the heuristic refuses it, the caller drops the epilogue (matmul + bias kernel) rather
 * than lowering bf16/fp16 to TF32 or 32F for the sake of a fused bias. */
static plan_t *get_plan(cu_t *im, const gemm_t *g, int epi) {
  plan_key_t key;
  memset(&key, 0, sizeof key);
  key.ta = g->ta, key.tb = g->tb, key.m = g->m, key.n = g->n, key.k = g->k;
  key.lda = g->lda, key.ldb = g->ldb, key.ldd = g->ldd;
  key.batch = g->batch;
  if (g->batch > 1)
    key.sa = g->sa, key.sb = g->sb, key.sd = g->sd, key.sbias = epi ? g->m : 0;
  key.epi = epi, key.beta = g->beta != 0.0f, key.prec = im->prec;
  key.al_a = align_of(g->A, g->sa, g->batch);
  key.al_b = align_of(g->B, g->sb, g->batch);
  key.al_d = align_of(g->D, g->sd, g->batch);
  key.al_bias = epi ? align_of(g->bias, g->m, g->batch) : 0;
  for (int i = 0; i < im->n_plans; i++)
    if (memcmp(&im->plans[i].key, &key, sizeof key) == 0)
      return im->plans[i].ok ? &im->plans[i] : NULL;
  if (im->n_plans == MAX_PLANS) {
    if (!im->warned_plans++)
      SAC_ERROR("cuda", "matmul plan cache full (%d shapes)", MAX_PLANS);
    if (!im->err)
      im->err = SAC_ENOMEM;
    return NULL;
  }
  plan_t *p = &im->plans[im->n_plans++];
  memset(p, 0, sizeof *p);
  p->key = key;
  /* the compute types to try, most wanted first */
  static const cublasComputeType_t chains[4][3] = {
      {CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_32F},
      {CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_32F},
      {CUBLAS_COMPUTE_32F_FAST_16BF, CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_COMPUTE_32F},
      {CUBLAS_COMPUTE_32F_FAST_16F, CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_COMPUTE_32F}};
  for (int c = 0; c < 3; c++) {
    if (c > 0 && (epi != EPI_NONE || chains[im->prec][c] == chains[im->prec][c - 1]))
      break;
    if (plan_build(im, p, g, chains[im->prec][c]) == 0) {
      p->ok = 1;
      if (c > 0) {
        im->degraded++;
        SAC_WARN("cuda", "no %s matmul for m %d n %d k %d batch %d: using compute type %d", k_prec_names[im->prec],
                 g->m, g->n, g->k, g->batch, (int)p->ct);
      }
      break;
    }
    plan_release(p);
  }
  return p->ok ? p : NULL;
}

/* D = op(A) op(B) (+ beta D), then bias and activation: fused into the epilogue where
 * cuBLASLt has one and the bias is 16-byte aligned (under-aligned biases can fault in
 * fused kernels), else a separate elementwise pass. Batched products without an
 * algorithm fall back to one product per member. */
static void gemm(cu_t *im, const gemm_t *g) {
  int epi = EPI_NONE;
  if (g->bias && (g->act == SAC_ACT_RELU || g->act == SAC_ACT_NONE)) {
    if (align_of(g->bias, g->m, g->batch) >= 16)
      epi = g->act == SAC_ACT_RELU ? EPI_RELU_BIAS : EPI_BIAS;
    else
      im->epi_fb_align++;
  }
  plan_t *p = get_plan(im, g, epi);
  if (epi != EPI_NONE && (!p || p->epi_failed)) {
    /* no fused algorithm at this compute type (or refused at run time): the plain
     * matmul at the same compute type, then the bias/activation kernel */
    if (!p)
      im->epi_fb_heuristic++;
    else
      im->epi_fb_launch++;
    epi = EPI_NONE;
    p = get_plan(im, g, epi);
  }
  if (!p && g->batch > 1) {
    for (int b = 0; b < g->batch; b++) {
      gemm_t one = *g;
      one.batch = 1;
      one.A += b * g->sa, one.B += b * g->sb, one.D += b * g->sd;
      if (g->bias)
        one.bias += (size_t)b * g->m;
      gemm(im, &one);
    }
    return;
  }
  if (!p) {
    SAC_ERROR("cuda", "no matmul algorithm for m %d n %d k %d (ta %d tb %d lda %lld ldb %lld ldd %lld)", g->m, g->n,
              g->k, (int)g->ta, (int)g->tb, (long long)g->lda, (long long)g->ldb, (long long)g->ldd);
    if (!im->err)
      im->err = SAC_EBACKEND;
    return;
  }
  const float one = 1.0f, beta = g->beta;
  if (epi != EPI_NONE) {
    const void *bias = g->bias;
    CKL(im, cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  }
  cublasStatus_t st = cublasLtMatmul(im->lt, p->op, &one, g->A, p->la, g->B, p->lb, &beta, g->D, p->ld, g->D, p->ld,
                                     &p->algo, im->ws, WORKSPACE_BYTES, im->stream);
  im->launches++; /* one matmul call (cuBLASLt may run it as more than one kernel) */
  if (st != CUBLAS_STATUS_SUCCESS && epi != EPI_NONE && im->capturing < 0) {
    SAC_WARN("cuda", "fused bias epilogue refused (%s) for m %d n %d k %d: bias added separately",
             lt_status_name(st), g->m, g->n, g->k);
    p->epi_failed = 1;
    gemm(im, g); /* counted there, as every later call of this shape */
    return;
  }
  if (ck_lt(im, 1, st, "cublasLtMatmul", __FILE__, __LINE__))
    return;
  if (g->bias && epi == EPI_NONE) {
    /* the bias kernel relies on the members' outputs and biases being contiguous */
    int cols = g->batch > 1 ? g->batch * g->m : g->m;
    int rows = g->n;
    k_bias_act<<<grid_for((size_t)rows * cols, 4096), THREADS, 0, im->stream>>>(g->D, (int)g->ldd, g->bias, rows,
                                                                                cols, (int)g->act);
    LAUNCHED(im, "k_bias_act");
  }
}

/* ------------------------------------------------------------------------------------ */
/* ops: memory                                                                            */

static int record_alloc(cu_t *im, void *p, size_t bytes) {
  if (im->n_allocs == im->cap_allocs) {
    size_t cap = im->cap_allocs ? 2 * im->cap_allocs : 64;
    alloc_rec_t *a = (alloc_rec_t *)realloc(im->allocs, cap * sizeof *a);
    if (!a)
      return SAC_ENOMEM;
    im->allocs = a, im->cap_allocs = cap;
  }
  im->allocs[im->n_allocs].p = p;
  im->allocs[im->n_allocs].bytes = bytes;
  im->n_allocs++;
  im->bytes += bytes;
  if (im->bytes > im->peak)
    im->peak = im->bytes;
  im->alloc_calls++;
  return 0;
}

static size_t forget_alloc(cu_t *im, void *p) {
  for (size_t i = im->n_allocs; i-- > 0;)
    if (im->allocs[i].p == p) {
      size_t b = im->allocs[i].bytes;
      im->allocs[i] = im->allocs[--im->n_allocs];
      im->bytes -= b;
      return b;
    }
  return 0;
}

/* cudaMalloc with accounting; 0, SAC_ENOMEM or SAC_ESTATE (during a capture) */
static int dev_alloc(cu_t *im, size_t bytes, void **out) {
  *out = NULL;
  if (im->capturing >= 0) {
    SAC_ERROR("cuda", "allocation of %zu bytes during graph capture", bytes);
    return SAC_ESTATE;
  }
  void *p = NULL;
  cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    SAC_ERROR("cuda", "cudaMalloc(%zu) failed: %s", bytes, cudaGetErrorString(e));
    return SAC_ENOMEM;
  }
  if (record_alloc(im, p, bytes)) {
    cudaFree(p);
    return SAC_ENOMEM;
  }
  *out = p;
  return 0;
}

static void dev_free(cu_t *im, void *p) {
  if (!p)
    return;
  forget_alloc(im, p);
  CKN(im, cudaFree(p));
}

static int cu_alloc(sac_backend_t *be, size_t n, float **out) {
  cu_t *im = IM(be);
  size_t bytes = ((n ? n : 1) * sizeof(float) + 255) & ~(size_t)255;
  void *p;
  int rc = dev_alloc(im, bytes, &p);
  if (rc)
    return rc;
  if (CKN(im, cudaMemsetAsync(p, 0, bytes, im->stream)) || CKN(im, cudaStreamSynchronize(im->stream))) {
    dev_free(im, p);
    return SAC_EBACKEND;
  }
  *out = (float *)p;
  return 0;
}

static void cu_free(sac_backend_t *be, float *p) {
  cu_t *im = IM(be);
  if (im->capturing >= 0) {
    SAC_ERROR("cuda", "free during graph capture ignored");
    return;
  }
  dev_free(im, p);
}

static int cu_upload(sac_backend_t *be, float *dst, const float *src, size_t n) {
  cu_t *im = IM(be);
  if (im->capturing >= 0)
    return SAC_ESTATE;
  if (n == 0)
    return 0;
  /* pageable memory is staged before cudaMemcpyAsync returns; pinned memory is read
   * later, so then wait for the copy before the caller may reuse src */
  cudaPointerAttributes attr;
  int pinned = 0;
  if (cudaPointerGetAttributes(&attr, src) == cudaSuccess)
    pinned = attr.type == cudaMemoryTypeHost;
  else
    (void)cudaGetLastError();
  if (CK(im, cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyHostToDevice, im->stream)))
    return SAC_EBACKEND;
  if (pinned && (im->blocking++, CK(im, cudaStreamSynchronize(im->stream))))
    return SAC_EBACKEND;
  return im->err;
}

static int cu_download(sac_backend_t *be, float *dst, const float *src, size_t n) {
  cu_t *im = IM(be);
  if (im->capturing >= 0)
    return SAC_ESTATE;
  if (n && CK(im, cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToHost, im->stream)))
    return SAC_EBACKEND;
  im->blocking++;
  if (CK(im, cudaStreamSynchronize(im->stream)))
    return SAC_EBACKEND;
  return im->err;
}

static int cu_sync(sac_backend_t *be) {
  cu_t *im = IM(be);
  if (im->capturing >= 0)
    return SAC_ESTATE;
  im->blocking++;
  if (CK(im, cudaStreamSynchronize(im->stream)))
    return SAC_EBACKEND;
  return im->err;
}

/* ------------------------------------------------------------------------------------ */
/* call sites: completion counters and partial sums of their own (site_t)                  */

/* The site of (kind, key, sub) with at least n_ctr counters and n_scr floats of scratch:
 * found, or made on first use (host bookkeeping only: the pools are allocated with the
 * backend, so this never allocates and works during a capture). When the pools run out
 * (thousands of sites: many learners on one backend) they start again from the front
 * with a warning: sites may then share, which stays correct while their kernels run one
 * after another in the stream (each leaves its counters at 0), as every update does.
 * NULL only when one site needs more than a whole pool (the caller then needs none). */
static const site_t *site_get(cu_t *im, int kind, const void *key, int sub, int n_ctr, size_t n_scr) {
  for (int i = 0; i < im->n_sites; i++) {
    const site_t *t = &im->sites[i];
    if (t->kind == kind && t->key == key && t->sub == sub && t->n_ctr >= n_ctr && t->n_scr >= n_scr)
      return t;
  }
  if (n_ctr > CTR_POOL || n_scr > SCRATCH_FLOATS)
    return NULL;
  n_scr = (n_scr + 63) & ~(size_t)63; /* 256-byte aligned regions */
  if (im->n_sites == MAX_SITES || im->ctr_used + n_ctr > CTR_POOL || im->scr_used + n_scr > SCRATCH_FLOATS) {
    if (!im->sites_wrapped++)
      SAC_WARN("cuda", "%d call sites: their counters and scratch are reused from the start", im->n_sites);
    im->n_sites = 0, im->ctr_used = 0, im->scr_used = 0;
  }
  site_t *t = &im->sites[im->n_sites++];
  t->kind = kind, t->key = key, t->sub = sub;
  t->ctr = im->ds->ctr + im->ctr_used, t->n_ctr = n_ctr;
  t->scr = im->scratch + im->scr_used, t->n_scr = n_scr;
  im->ctr_used += n_ctr, im->scr_used += n_scr;
  return t;
}

/* Every counter back to 0, in order on the stream (a memset: no kernel, not counted). */
static int zero_counters(cu_t *im) {
  if (!im->ctr_used && !im->sites_wrapped)
    return 0;
  const size_t n = im->sites_wrapped ? CTR_POOL : (size_t)im->ctr_used;
  return CK(im, cudaMemsetAsync(im->ds->ctr, 0, n * sizeof(unsigned int), im->stream));
}

#define MAX_CHUNKS 65535 /* gridDim.y */

/* Rows per chunk of a column-tiled reduction over `rows` (k_out1_bwd, k_act_bwd_colsum):
 * 16 (two per row lane), more where the partials of all chunks would not fit the scratch
 * pool; and the site holding them (NULL: one chunk, no partials). A function of the shape
 * alone, so the sums' order, and their bits, are the same on every GPU. */
static const site_t *chunking(cu_t *im, int kind, const void *key, int rows, size_t floats_per_chunk,
                              int tiles, int *rpc, int *chunks) {
  int r = 16;
  while (((size_t)((rows + r - 1) / r) * floats_per_chunk > SCRATCH_FLOATS / 4 ||
          (rows + r - 1) / r > MAX_CHUNKS) &&
         r < rows)
    r *= 2;
  *rpc = r, *chunks = (rows + r - 1) / r;
  if (*chunks <= 1) {
    *rpc = rows > 0 ? rows : 1, *chunks = 1;
    return NULL;
  }
  const site_t *t = site_get(im, kind, key, 0, tiles, (size_t)*chunks * floats_per_chunk);
  if (!t)
    *rpc = rows, *chunks = 1;
  return t;
}

/* k_act_bwd_colsum over (rows, cols) at dY: the activation backward in place, db the
 * column sums (NULL: none), ovf the fp16 flag (NULL: none). */
static void act_bwd_colsum(cu_t *im, float *dY, const float *Y, int ldy, int rows, int cols, int act,
                           float *db, int *ovf) {
  colsum_t a;
  memset(&a, 0, sizeof a);
  a.dY = dY, a.Y = Y, a.db = db, a.ovf = ovf, a.ldy = ldy, a.rows = rows, a.cols = cols, a.act = act;
  const int tiles = (cols + 31) / 32;
  int chunks;
  const site_t *t = db ? chunking(im, SITE_COLSUM, dY, rows, (size_t)cols, tiles, &a.rpc, &chunks) : NULL;
  if (!db) { /* the mask alone: as many chunks as a reduction would have, no partials */
    for (a.rpc = 16; (rows + a.rpc - 1) / a.rpc > MAX_CHUNKS;)
      a.rpc *= 2;
    chunks = (rows + a.rpc - 1) / a.rpc;
  }
  if (t)
    a.part = t->scr, a.ctr = t->ctr;
  dim3 block(32, 8), grid((unsigned)tiles, (unsigned)(chunks > 0 ? chunks : 1));
  k_act_bwd_colsum<<<grid, block, 0, im->stream>>>(a);
  LAUNCHED(im, "k_act_bwd_colsum");
}

/* k_out1_bwd: the critics' one-wide last layer's backward (with the layer below's
 * activation backward where below_act >= 0), dbb that layer's bias gradient. */
static void out1_bwd(cu_t *im, const sac_linear_t *L, const float *dY, int ldy, float *dW, float *db,
                     float *dX, int lddx, int below_act, float *dbb, int *ovf) {
  out1_bwd_t a;
  memset(&a, 0, sizeof a);
  a.dY = dY, a.X = L->seg[0].p, a.W = L->W, a.dW = dW, a.db = db, a.dX = dX, a.dbb = dbb, a.ovf = ovf;
  a.ldy = ldy, a.ldx = L->seg[0].ld, a.lddx = dX ? lddx : 0, a.B = L->B, a.K = L->K, a.n = L->n_in;
  a.below_act = below_act;
  const int ext = L->K * L->n_in + L->K, tiles = (ext + 31) / 32;
  const void *key = dX ? (const void *)dX : dW ? (const void *)dW : (const void *)db;
  int chunks;
  const site_t *t = chunking(im, SITE_OUT1_BWD, key, L->B, 2 * (size_t)ext, tiles, &a.rpc, &chunks);
  if (t)
    a.part = t->scr, a.ctr = t->ctr;
  dim3 block(32, 8), grid((unsigned)tiles, (unsigned)chunks);
  k_out1_bwd<<<grid, block, 0, im->stream>>>(a);
  LAUNCHED(im, "k_out1_bwd");
}

/* ------------------------------------------------------------------------------------ */
/* ops: compute                                                                           */

/* The twin critics' last layer: one output column per member, read from its own block of
 * the input, no activation (k_out1_fwd / k_out1_bwd). */
static int is_out1(const sac_linear_t *L) { return !L->shared && L->n_out == 1 && L->act == SAC_ACT_NONE; }

/* The operands a shared layer's matmuls read (seg[0..n)): its segments, or the two as one
 * where they are adjacent in memory (sac_segs_adjacent: one matmul with k = n0 + n1). */
static int operands(const sac_linear_t *L, sac_seg_t seg[2]) {
  seg[0] = L->seg[0], seg[1] = L->seg[1];
  if (!sac_segs_adjacent(L))
    return L->n_seg;
  seg[0].n = L->seg[0].n + L->seg[1].n;
  return 1;
}

static void cu_linear_fwd(sac_backend_t *be, const sac_linear_t *L, float *Y, int ldy) {
  cu_t *im = IM(be);
  if (is_out1(L)) {
    size_t threads = (size_t)L->B * L->K * 32;
    k_out1_fwd<<<(unsigned)((threads + THREADS - 1) / THREADS), THREADS, 0, im->stream>>>(
        Y, ldy, L->seg[0].p, L->seg[0].ld, L->W, L->b, L->B, L->K, L->n_in);
    LAUNCHED(im, "k_out1_fwd");
    return;
  }
  const int64_t wsz = (int64_t)L->n_in * L->n_out;
  gemm_t g;
  memset(&g, 0, sizeof g);
  g.ta = CUBLAS_OP_N, g.tb = CUBLAS_OP_N;
  g.m = L->n_out, g.n = L->B;
  g.lda = L->n_out, g.sa = wsz;
  g.D = Y, g.ldd = ldy, g.sd = L->n_out;
  g.batch = L->K;
  if (L->shared) {
    /* Y_k^T = W_k[seg rows]^T X_seg^T summed over segments; X broadcast (stride 0) */
    sac_seg_t seg[2];
    int row = 0, n_seg = operands(L, seg);
    for (int s = 0; s < n_seg; s++) {
      g.k = seg[s].n;
      g.A = L->W + (size_t)row * L->n_out;
      g.B = seg[s].p, g.ldb = seg[s].ld, g.sb = 0;
      g.beta = s == 0 ? 0.0f : 1.0f;
      int last = s == n_seg - 1;
      g.bias = last ? L->b : NULL;
      g.act = last ? L->act : SAC_ACT_NONE;
      gemm(im, &g);
      row += seg[s].n;
    }
  } else {
    /* member k reads columns [k n_in, (k+1) n_in) of the one input segment */
    g.k = L->n_in;
    g.A = L->W;
    g.B = L->seg[0].p, g.ldb = L->seg[0].ld, g.sb = L->n_in;
    g.beta = 0.0f;
    g.bias = L->b, g.act = L->act;
    gemm(im, &g);
  }
}

static void cu_linear_bwd(sac_backend_t *be, const sac_linear_t *L, float *dY, const float *Y, int ldy, float *dW,
                          float *db, float *dX[2], const int ldx[2]) {
  cu_t *im = IM(be);
  const int K = L->K, width = K * L->n_out;
  const int64_t wsz = (int64_t)L->n_in * L->n_out;
  const int fp16 = im->prec == PREC_FP16;
  if (is_out1(L) && !fp16) { /* fp16 keeps the kernels that flag an fp16 overflow */
    float *dx = dX ? dX[0] : NULL;
    if (!dW && !db && !dx)
      return;
    out1_bwd(im, L, dY, ldy, dW, db, dx, dx ? ldx[0] : 0, -1, NULL, NULL);
    return;
  }
  if (L->shared && !dW && !db && L->act != SAC_ACT_NONE && dX && (dX[0] || (L->n_seg > 1 && dX[1]))) {
    dx_act_t a;
    memset(&a, 0, sizeof a);
    for (int s = 0, row = 0; s < L->n_seg; row += L->seg[s].n, s++)
      a.dX[s] = dX[s], a.ldx[s] = ldx[s], a.n[s] = L->seg[s].n, a.row[s] = row;
    a.dY = dY, a.Y = Y, a.W = L->W, a.ldy = ldy, a.n_out = L->n_out, a.K = K, a.act = (int)L->act;
    a.n_seg = L->n_seg, a.wsz = (size_t)wsz, a.ovf = fp16 ? &im->ds->overflow : NULL;
    k_dx_shared_act<<<(unsigned)L->B, THREADS, 0, im->stream>>>(a);
    LAUNCHED(im, "k_dx_shared_act");
    return;
  }
  if (L->act != SAC_ACT_NONE || db || fp16)
    act_bwd_colsum(im, dY, Y, ldy, L->B, width, (int)L->act, db, fp16 ? &im->ds->overflow : NULL);
  gemm_t g;
  memset(&g, 0, sizeof g);
  g.batch = K;
  if (dW) {
    /* dW_k^T (n_out, n) = dY_k^T (n_out, B) X_k (B, n) */
    g.ta = CUBLAS_OP_N, g.tb = CUBLAS_OP_T;
    g.m = L->n_out, g.k = L->B;
    g.A = dY, g.lda = ldy, g.sa = L->n_out;
    g.ldd = L->n_out, g.sd = wsz;
    if (L->shared) {
      sac_seg_t seg[2];
      int row = 0, n_seg = operands(L, seg);
      for (int s = 0; s < n_seg; s++) {
        g.n = seg[s].n;
        g.B = seg[s].p, g.ldb = seg[s].ld, g.sb = 0;
        g.D = dW + (size_t)row * L->n_out;
        gemm(im, &g);
        row += seg[s].n;
      }
    } else {
      g.n = L->n_in;
      g.B = L->seg[0].p, g.ldb = L->seg[0].ld, g.sb = L->n_in;
      g.D = dW;
      gemm(im, &g);
    }
  }
  if (!dX)
    return;
  if (L->shared) {
    int row = 0;
    for (int s = 0; s < L->n_seg; s++) {
      int n = L->seg[s].n;
      if (dX[s]) {
        size_t warps = (size_t)L->B * n;
        unsigned blocks = (unsigned)((warps * 32 + THREADS - 1) / THREADS);
        k_dx_shared<<<blocks, THREADS, 0, im->stream>>>(dX[s], ldx[s], dY, ldy, L->W + (size_t)row * L->n_out,
                                                        L->n_out, (size_t)wsz, K, L->B, n);
        LAUNCHED(im, "k_dx_shared");
      }
      row += n;
    }
  } else if (dX[0]) {
    /* dX_k^T (n_in, B) = W_k (n_in, n_out) dY_k^T (n_out, B); W_k stored as (n_out, n_in) */
    memset(&g, 0, sizeof g);
    g.batch = K;
    g.ta = CUBLAS_OP_T, g.tb = CUBLAS_OP_N;
    g.m = L->n_in, g.n = L->B, g.k = L->n_out;
    g.A = L->W, g.lda = L->n_out, g.sa = wsz;
    g.B = dY, g.ldb = ldy, g.sb = L->n_out;
    g.D = dX[0], g.ldd = ldx[0], g.sd = L->n_in;
    gemm(im, &g);
  }
}

static void cu_normal(sac_backend_t *be, float *out, size_t n, const uint32_t key[2], uint64_t stream, uint32_t tag) {
  cu_t *im = IM(be);
  if (n == 0)
    return;
  size_t pairs = (n + 1) / 2;
  const unsigned long long *delta = im->capturing >= 0 ? &im->ds->delta[im->capturing] : NULL;
  k_normal<<<(unsigned)((pairs + THREADS - 1) / THREADS), THREADS, 0, im->stream>>>(out, n, key[0], key[1],
                                                                                   (unsigned long long)stream, delta,
                                                                                   tag);
  LAUNCHED(im, "k_normal");
}

static void cu_normal2(sac_backend_t *be, float *out, size_t n, const uint32_t key[2], uint64_t stream,
                       uint32_t tag0, uint32_t tag1) {
  cu_t *im = IM(be);
  if (n == 0)
    return;
  size_t pairs = (n + 1) / 2;
  const unsigned long long *delta = im->capturing >= 0 ? &im->ds->delta[im->capturing] : NULL;
  dim3 grid((unsigned)((pairs + THREADS - 1) / THREADS), 2);
  k_normal2<<<grid, THREADS, 0, im->stream>>>(out, n, key[0], key[1], (unsigned long long)stream, delta, tag0, tag1);
  LAUNCHED(im, "k_normal2");
}

static const scaler_t *loss_scaler(cu_t *im) { return im->prec == PREC_FP16 ? &im->ds->scaler : NULL; }

static void cu_head_fwd(sac_backend_t *be, const sac_head_hp_t *h, const float *P, const float *eps, float *a, int lda,
                        float *logp) {
  cu_t *im = IM(be);
  k_head_fwd<<<(unsigned)((h->B + THREADS - 1) / THREADS), THREADS, 0, im->stream>>>(
      h->B, h->A, h->log_std_min, h->log_std_max, P, eps, a, lda, logp);
  LAUNCHED(im, "k_head_fwd");
}

static void cu_head_bwd(sac_backend_t *be, const sac_head_hp_t *h, const float *P, const float *eps, const float *a,
                        int lda, const float *da, int ldda, const float *dlogp, float *dP) {
  cu_t *im = IM(be);
  size_t n = (size_t)h->B * h->A;
  k_head_bwd<<<(unsigned)((n + THREADS - 1) / THREADS), THREADS, 0, im->stream>>>(
      h->B, h->A, h->log_std_min, h->log_std_max, P, eps, a, lda, da, ldda, dlogp, dP);
  LAUNCHED(im, "k_head_bwd");
}

static void cu_critic_target(sac_backend_t *be, const sac_head_hp_t *h, const float *r, const float *term,
                             const float *qt, const float *logp_next, float *y) {
  cu_t *im = IM(be);
  k_critic_target<<<(unsigned)((h->B + THREADS - 1) / THREADS), THREADS, 0, im->stream>>>(
      h->B, h->gamma, h->log_alpha, r, term, qt, logp_next, y);
  LAUNCHED(im, "k_critic_target");
}

static void cu_critic_loss(sac_backend_t *be, const sac_head_hp_t *h, const float *q, const float *y, const float *w,
                           float *dq, float *td, float *stats) {
  cu_t *im = IM(be);
  k_critic_loss<<<1, THREADS, 0, im->stream>>>(h->B, q, y, w, dq, td, stats, loss_scaler(im));
  LAUNCHED(im, "k_critic_loss");
}

static void cu_actor_loss(sac_backend_t *be, const sac_head_hp_t *h, const float *q, const float *logp, float *dq,
                          float *dlogp, float *stats) {
  cu_t *im = IM(be);
  k_actor_loss<<<1, THREADS, 0, im->stream>>>(h->B, h->log_alpha, q, logp, dq, dlogp, stats, loss_scaler(im));
  LAUNCHED(im, "k_actor_loss");
}

static void cu_alpha_loss(sac_backend_t *be, const sac_head_hp_t *h, const float *logp, float *grad, float *stats) {
  cu_t *im = IM(be);
  k_alpha_loss<<<1, THREADS, 0, im->stream>>>(h->B, h->target_entropy, h->log_alpha, logp, grad, stats,
                                              loss_scaler(im));
  LAUNCHED(im, "k_alpha_loss");
}

/* cu_adam with the loss guard of adam_polyak (NULL: none) */
static void cu_adam_guarded(sac_backend_t *be, float *p, const float *g, float *m, float *v, size_t n,
                            const sac_adam_hp_t *hp, float *t, const float *guard, unsigned guard_mask) {
  cu_t *im = IM(be);
  unsigned blocks = grid_for(n, NFLAG);
  const int *flags = NULL;
  int *ovf = NULL;
  scaler_t *sc = NULL;
  /* the call site's counter, and its inf/NaN flags (ints in its scratch) */
  const site_t *site = site_get(im, SITE_ADAM, p, 0, 1, NFLAG);
  if (im->prec == PREC_FP16) {
    /* the same grid checks first, so a skipped step touches nothing */
    k_nonfinite<<<blocks, THREADS, 0, im->stream>>>(g, n, (int *)site->scr);
    LAUNCHED(im, "k_nonfinite");
    flags = (const int *)site->scr;
    ovf = &im->ds->overflow;
    sc = &im->ds->scaler;
  }
  k_adam<<<blocks, THREADS, 0, im->stream>>>(p, g, m, v, n, hp->lr, hp->beta1, hp->beta2, hp->eps, t,
                                             site->ctr, flags, (int)blocks, ovf, sc, guard, guard_mask);
  LAUNCHED(im, "k_adam");
}

static void cu_adam(sac_backend_t *be, float *p, const float *g, float *m, float *v, size_t n,
                    const sac_adam_hp_t *hp, float *t) {
  cu_adam_guarded(be, p, g, m, v, n, hp, t, NULL, 0u);
}

static void cu_polyak_guarded(sac_backend_t *be, float *tgt, const float *src, size_t n, float tau,
                              const float *guard, unsigned guard_mask) {
  cu_t *im = IM(be);
  k_polyak<<<grid_for(n, 1024), THREADS, 0, im->stream>>>(tgt, src, n, 1.0f - tau, tau, guard, guard_mask);
  LAUNCHED(im, "k_polyak");
}

static void cu_polyak(sac_backend_t *be, float *tgt, const float *src, size_t n, float tau) {
  cu_polyak_guarded(be, tgt, src, n, tau, NULL, 0u);
}

static void cu_actor_alpha_loss(sac_backend_t *be, const sac_head_hp_t *h, const float *q, const float *logp,
                                float *dq, float *dlogp, float *stats_pi, float *grad_alpha, float *stats_alpha) {
  cu_t *im = IM(be);
  k_actor_alpha_loss<<<1, THREADS, 0, im->stream>>>(h->B, h->target_entropy, h->log_alpha, q, logp, dq, dlogp,
                                                    stats_pi, grad_alpha, stats_alpha, loss_scaler(im));
  LAUNCHED(im, "k_actor_alpha_loss");
}

static void cu_adam_polyak(sac_backend_t *be, const sac_adam_group_t *g, int n_groups, float *tgt, const float *src,
                           size_t n_polyak, float tau, const float *guard, unsigned guard_mask) {
  cu_t *im = IM(be);
  if (im->prec == PREC_FP16 || n_groups < 1 || n_groups > SAC_ADAM_MAX_GROUPS) {
    /* each op reads the guard itself: the statistics are not written by any of them */
    for (int i = 0; i < n_groups; i++)
      cu_adam_guarded(be, g[i].p, g[i].g, g[i].m, g[i].v, g[i].n, &g[i].hp, g[i].t, guard, guard_mask);
    if (n_polyak)
      cu_polyak_guarded(be, tgt, src, n_polyak, tau, guard, guard_mask);
    return;
  }
  adam_multi_t a;
  memset(&a, 0, sizeof a);
  a.n = n_groups;
  for (int j = 0; j < n_groups; j++) {
    a.p[j] = g[j].p, a.g[j] = g[j].g, a.m[j] = g[j].m, a.v[j] = g[j].v, a.t[j] = g[j].t;
    a.lr[j] = g[j].hp.lr, a.b1[j] = g[j].hp.beta1, a.b2[j] = g[j].hp.beta2, a.eps[j] = g[j].hp.eps;
    a.off[j + 1] = a.off[j] + g[j].n;
  }
  a.tgt = tgt, a.src = src, a.pn = n_polyak, a.keep = 1.0f - tau, a.tau = tau, a.pgroup = -1;
  a.guard = guard, a.guard_mask = guard_mask;
  for (int j = 0; j < n_groups && n_polyak; j++)
    if (src == g[j].p && n_polyak == g[j].n)
      a.pgroup = j;
  size_t total = a.off[n_groups] + (a.pgroup < 0 ? n_polyak : 0);
  const site_t *site = site_get(im, SITE_ADAM, g[0].p, n_groups, 1, 0);
  k_adam_polyak<<<grid_for(total, NFLAG), THREADS, 0, im->stream>>>(a, site->ctr);
  LAUNCHED(im, "k_adam_polyak");
}

static void cu_q_head(sac_backend_t *be, const sac_linear_t *L, float *q, const sac_head_hp_t *h,
                      const sac_q_head_t *a) {
  cu_t *im = IM(be);
  if (!is_out1(L) || L->K != 2) { /* the two ops */
    cu_linear_fwd(be, L, q, 2);
    if (a->then == SAC_Q_TARGET)
      cu_critic_target(be, h, a->r, a->term, q, a->logp, a->y);
    else if (a->then == SAC_Q_CRITIC_LOSS)
      cu_critic_loss(be, h, q, a->y, a->w, a->dq, a->td, a->stats);
    else
      cu_actor_alpha_loss(be, h, q, a->logp, a->dq, a->dlogp, a->stats, a->grad_alpha, a->stats_alpha);
    return;
  }
  out1_head_t k;
  memset(&k, 0, sizeof k);
  k.then = a->then, k.B = L->B, k.K = L->K, k.n = L->n_in, k.ldx = L->seg[0].ld;
  k.X = L->seg[0].p, k.W = L->W, k.bias = L->b, k.q = q;
  k.gamma = h->gamma, k.target_entropy = h->target_entropy, k.log_alpha = h->log_alpha;
  k.r = a->r, k.term = a->term, k.logp = a->logp, k.w = a->w;
  k.y = a->y, k.dq = a->dq, k.dlogp = a->dlogp, k.td = a->td, k.stats = a->stats;
  k.grad_alpha = a->grad_alpha, k.stats_alpha = a->stats_alpha;
  k.sc = loss_scaler(im);
  k.done = site_get(im, SITE_OUT1_HEAD, q, a->then, 1, 0)->ctr;
  const unsigned pairs = (unsigned)(L->B * L->K), warps = HEAD_THREADS / 32;
  k_out1_head<<<(pairs + warps - 1) / warps, HEAD_THREADS, 0, im->stream>>>(k);
  LAUNCHED(im, "k_out1_head");
}

static void cu_policy_fwd(sac_backend_t *be, const sac_linear_t *L, float *P, const sac_head_hp_t *h,
                          const sac_policy_fwd_t *a) {
  cu_t *im = IM(be);
  assert(!L->shared && L->K == 1 && L->act == SAC_ACT_NONE && L->n_out == 2 * h->A && L->B == h->B &&
         h->B % 2 == 0 && a->n_copy >= 0 && a->n_copy <= SAC_MAX_COPIES);
  policy_fwd_t k;
  memset(&k, 0, sizeof k);
  k.rows = h->B, k.A = h->A, k.H = L->n_in, k.ldx = L->seg[0].ld, k.lda = a->lda, k.n_copy = a->n_copy;
  k.X = L->seg[0].p, k.W = L->W, k.bias = L->b;
  k.P = P, k.eps = a->eps, k.a = a->a, k.logp = a->logp;
  k.lsmin = h->log_std_min, k.lsmax = h->log_std_max;
  k.k0 = a->key[0], k.k1 = a->key[1], k.tag0 = a->tag0, k.tag1 = a->tag1;
  k.stream = (unsigned long long)a->stream;
  k.delta = im->capturing >= 0 ? &im->ds->delta[im->capturing] : NULL;
  for (int c = 0; c < a->n_copy; c++)
    k.copy[c] = a->copy[c];
  size_t threads = (size_t)h->B * 32;
  k_policy_fwd<<<(unsigned)((threads + POLICY_FWD_THREADS - 1) / POLICY_FWD_THREADS), POLICY_FWD_THREADS, 0,
                 im->stream>>>(k);
  LAUNCHED(im, "k_policy_fwd");
}

/* linear_bwd_act: the critics' one-wide last layer as k_out1_bwd with the layer below
 * (fp16 too: it flags a dX out of fp16 range itself, and nothing of this layer is an fp16
 * operand), else the layer's backward and then the layer below's activation backward as
 * that layer's own linear_bwd would run it. */
static void cu_linear_bwd_act(sac_backend_t *be, const sac_linear_t *L, float *dY, const float *Y, int ldy,
                              float *dW, float *db, float *dX, int ldx, const sac_below_t *below) {
  cu_t *im = IM(be);
  assert(!L->shared && L->n_seg == 1 && dX && ldx == L->seg[0].ld);
  if (is_out1(L)) {
    out1_bwd(im, L, dY, ldy, dW, db, dX, ldx, (int)below->act, below->db,
             im->prec == PREC_FP16 ? &im->ds->overflow : NULL);
    return;
  }
  float *dxs[2] = {dX, NULL};
  const int lds[2] = {ldx, 0};
  cu_linear_bwd(be, L, dY, Y, ldy, dW, db, dxs, lds);
  sac_linear_t lb;
  memset(&lb, 0, sizeof lb);
  lb.B = L->B, lb.n_in = L->n_in, lb.n_out = L->n_in, lb.K = L->K, lb.n_seg = 1, lb.act = below->act;
  lb.seg[0] = L->seg[0];
  cu_linear_bwd(be, &lb, dX, L->seg[0].p, ldx, NULL, below->db, NULL, NULL);
}

static void cu_policy_bwd(sac_backend_t *be, const sac_head_hp_t *h, const float *P, const float *eps,
                          const float *a, int lda, const float *da, int ldda, const float *dlogp, float *dP,
                          const sac_linear_t *L, float *dW, float *db, float *dX, int ldx,
                          const sac_below_t *below) {
  cu_t *im = IM(be);
  assert(!L->shared && L->K == 1 && L->act == SAC_ACT_NONE && L->n_out == 2 * h->A && L->B == h->B && dX &&
         ldx == L->seg[0].ld);
  if (h->A > SAC_POLICY_BWD_MAX_ACT) { /* its shared memory would not fit */
    cu_head_bwd(be, h, P, eps, a, lda, da, ldda, dlogp, dP);
    cu_linear_bwd_act(be, L, dP, P, 2 * h->A, dW, db, dX, ldx, below);
    return;
  }
  policy_bwd_t k;
  memset(&k, 0, sizeof k);
  k.B = h->B, k.A = h->A, k.H = L->n_in, k.ldx = ldx, k.lda = lda, k.ldda = ldda,
  k.below_act = (int)below->act;
  k.lsmin = h->log_std_min, k.lsmax = h->log_std_max;
  k.P = P, k.eps = eps, k.a = a, k.da = da, k.dlogp = dlogp, k.X = L->seg[0].p, k.W = L->W;
  k.dP = dP, k.dW = dW, k.db = db, k.dX = dX, k.dbb = below->db;
  k.ovf = im->prec == PREC_FP16 ? &im->ds->overflow : NULL;
  const int tiles = (L->n_in + 31) / 32, n2 = 2 * h->A;
  int chunks = (h->B + PB_ROWS - 1) / PB_ROWS;
  const size_t per = (size_t)L->n_in * n2 + L->n_in + n2;
  const site_t *t = chunks > 1 && chunks <= MAX_CHUNKS
                        ? site_get(im, SITE_POLICY_BWD, dX, 0, tiles, (size_t)chunks * per)
                        : NULL;
  if (!t && chunks > 1) { /* partials past the pool (or the grid): the ops it stands for */
    cu_head_bwd(be, h, P, eps, a, lda, da, ldda, dlogp, dP);
    cu_linear_bwd_act(be, L, dP, P, n2, dW, db, dX, ldx, below);
    return;
  }
  if (t)
    k.part = t->scr, k.ctr = t->ctr;
  size_t smem = sizeof(float) * (size_t)PB_ROWS * n2;
  dim3 block(32, 8), grid((unsigned)tiles, (unsigned)chunks);
  k_policy_bwd<<<grid, block, smem, im->stream>>>(k);
  LAUNCHED(im, "k_policy_bwd");
}

static void cu_overflow_export(sac_backend_t *be, float *dst) {
  cu_t *im = IM(be);
  k_ovf_export<<<1, 1, 0, im->stream>>>(&im->ds->overflow, dst);
  LAUNCHED(im, "k_ovf_export");
}

static void cu_overflow_import(sac_backend_t *be, const float *src) {
  cu_t *im = IM(be);
  k_ovf_import<<<1, 1, 0, im->stream>>>(&im->ds->overflow, src);
  LAUNCHED(im, "k_ovf_import");
}

static void cu_update_end(sac_backend_t *be) {
  cu_t *im = IM(be);
  if (im->prec != PREC_FP16)
    return;
  k_scaler_update<<<1, 1, 0, im->stream>>>(&im->ds->scaler);
  LAUNCHED(im, "k_scaler_update");
}

/* Eager updates zero the counters first; a graph's are zeroed before every launch
 * (cu_graph_launch), outside the graph. */
static void cu_update_begin(sac_backend_t *be) {
  cu_t *im = IM(be);
  if (im->capturing < 0)
    zero_counters(im);
}

/* ------------------------------------------------------------------------------------ */
/* timing: CUDA events, the stream optionally held                                        */

static int cu_timing_begin(sac_backend_t *be, int hold) {
  cu_t *im = IM(be);
  if (im->capturing >= 0)
    return SAC_ESTATE;
  if (im->err)
    return im->err;
  if (!im->marks) { /* the first profile: SAC_BACKEND_MAX_MARKS events, kept until destroy */
    im->marks = (cudaEvent_t *)calloc(SAC_BACKEND_MAX_MARKS, sizeof(cudaEvent_t));
    if (!im->marks)
      return SAC_ENOMEM;
    for (int i = 0; i < SAC_BACKEND_MAX_MARKS; i++)
      if (CKN(im, cudaEventCreate(&im->marks[i])))
        return SAC_EBACKEND;
  }
  if (hold && !im->hold_host) {
    if (CKN(im, cudaHostAlloc((void **)&im->hold_host, 2 * sizeof(int), cudaHostAllocMapped)) ||
        CKN(im, cudaHostGetDevicePointer((void **)&im->hold_dev, im->hold_host, 0))) {
      im->hold_host = NULL;
      return SAC_EBACKEND;
    }
  }
  im->n_marks = 0;
  im->timing = hold ? 2 : 1;
  if (hold) {
    ((volatile int *)im->hold_host)[0] = 0;
    ((volatile int *)im->hold_host)[1] = 0;
    k_hold<<<1, 1, 0, im->stream>>>(im->hold_dev, 1000000000ull); /* a second at most */
    if (CK(im, cudaGetLastError()))                               /* not counted: not an op's launch */
      return SAC_EBACKEND;
  }
  return 0;
}

static int cu_timing_mark(sac_backend_t *be, int i) {
  cu_t *im = IM(be);
  if (!im->timing || im->capturing >= 0)
    return SAC_ESTATE;
  if (i < 0 || i >= SAC_BACKEND_MAX_MARKS)
    return SAC_EINVAL;
  if (CK(im, cudaEventRecord(im->marks[i], im->stream)))
    return SAC_EBACKEND;
  if (i >= im->n_marks)
    im->n_marks = i + 1;
  return 0;
}

static int cu_timing_end(sac_backend_t *be, int n, double *seconds) {
  cu_t *im = IM(be);
  if (!im->timing)
    return SAC_ESTATE;
  const int held = im->timing == 2;
  im->timing = 0;
  if (held) {
    __atomic_store_n(&im->hold_host[0], 1, __ATOMIC_SEQ_CST); /* the stream goes on */
  }
  if (CK(im, cudaStreamSynchronize(im->stream)))
    return SAC_EBACKEND;
  if (held && ((volatile int *)im->hold_host)[1])
    return SAC_ETIMEOUT;
  if (n < 0 || n > im->n_marks)
    return SAC_EINVAL;
  for (int i = 0; i < n; i++) {
    float ms = 0.0f;
    if (CK(im, cudaEventElapsedTime(&ms, im->marks[0], im->marks[i])))
      return SAC_EBACKEND;
    seconds[i] = (double)ms * 1e-3;
  }
  return im->err;
}

/* ------------------------------------------------------------------------------------ */
/* graphs                                                                                 */

static void drop_graphs(cu_t *im) {
  for (int i = 0; i < SAC_BACKEND_MAX_GRAPHS; i++)
    if (im->exec[i]) {
      CKN(im, cudaGraphExecDestroy(im->exec[i]));
      im->exec[i] = NULL;
      im->delta_known[i] = 0;
    }
}

static int cu_graph_begin(sac_backend_t *be, int id, uint64_t stream) {
  cu_t *im = IM(be);
  if (!im->graphs_on)
    return SAC_EUNSUPPORTED;
  if (id < 0 || id >= SAC_BACKEND_MAX_GRAPHS)
    return SAC_EINVAL;
  if (im->capturing >= 0)
    return SAC_ESTATE;
  if (im->err)
    return im->err;
  (void)cudaGetLastError();
  if (CKN(im, cudaStreamBeginCapture(im->stream, cudaStreamCaptureModeThreadLocal)))
    return SAC_EBACKEND;
  im->capturing = id;
  im->cap_stream[id] = stream;
  return 0;
}

static int cu_graph_end(sac_backend_t *be, int id, uint64_t steps) {
  cu_t *im = IM(be);
  if (im->capturing != id)
    return SAC_ESTATE;
  /* the graph's last node advances its noise offset by the steps it recorded, so
   * consecutive launches need no host write before the next one */
  k_add_u64<<<1, 1, 0, im->stream>>>(&im->ds->delta[id], (unsigned long long)steps);
  LAUNCHED(im, "k_add_u64");
  im->graph_steps[id] = steps;
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  int failed = CKN(im, cudaStreamEndCapture(im->stream, &graph)) != 0 || !graph || im->err != 0;
  im->capturing = -1;
  if (!failed)
    failed = CKN(im, cudaGraphInstantiate(&exec, graph, 0)) != 0;
  if (graph)
    CKN(im, cudaGraphDestroy(graph));
  if (failed) {
    /* nothing ran: the failure belongs to the capture, not the device; graphs stay off
     * so that every later update does not record and fail again */
    SAC_WARN("cuda", "graph capture %d failed: graphs switched off, updates run eagerly", id);
    if (exec)
      cudaGraphExecDestroy(exec);
    im->err = 0;
    im->graphs_on = 0;
    drop_graphs(im);
    (void)cudaGetLastError();
    return SAC_EBACKEND;
  }
  if (im->exec[id])
    CKN(im, cudaGraphExecDestroy(im->exec[id]));
  im->exec[id] = exec;
  im->delta_known[id] = 0;
  return 0;
}

static int cu_graph_launch(sac_backend_t *be, int id, uint64_t stream) {
  cu_t *im = IM(be);
  if (!im->graphs_on)
    return SAC_EUNSUPPORTED;
  if (id < 0 || id >= SAC_BACKEND_MAX_GRAPHS || !im->exec[id] || im->capturing >= 0)
    return SAC_ESTATE;
  if (im->err)
    return im->err;
  unsigned long long delta = (unsigned long long)(stream - im->cap_stream[id]);
  if (!im->delta_known[id] || im->host_delta[id] != delta) {
    k_set_u64<<<1, 1, 0, im->stream>>>(&im->ds->delta[id], delta);
    if (LAUNCHED(im, "k_set_u64"))
      return SAC_EBACKEND;
  }
  /* every call site's counter from 0, whatever an earlier launch left */
  if (zero_counters(im) || CK(im, cudaGraphLaunch(im->exec[id], im->stream)))
    return SAC_EBACKEND;
  im->host_delta[id] = delta + im->graph_steps[id];
  im->delta_known[id] = 1;
  im->graph_launches++;
  return 0;
}

/* ------------------------------------------------------------------------------------ */
/* batch staging                                                                          */

/* Grows a slot to hold `need` floats, keeping what it holds; its last commit must be
 * consumed first. Warm-up only: a steady batch size never grows it again. */
static int slot_grow(cu_t *im, stage_slot_t *s, size_t need) {
  size_t cap = s->cap ? s->cap : 4096;
  while (cap < need)
    cap *= 2;
  if (CK(im, cudaEventSynchronize(s->consumed)))
    return SAC_EBACKEND;
  float *host = NULL;
  void *dev = NULL;
  if (cudaMallocHost((void **)&host, cap * sizeof(float)) != cudaSuccess) {
    (void)cudaGetLastError();
    SAC_ERROR("cuda", "cudaMallocHost(%zu) failed", cap * sizeof(float));
    return SAC_ENOMEM;
  }
  int rc = dev_alloc(im, cap * sizeof(float), &dev);
  if (rc) {
    cudaFreeHost(host);
    return rc;
  }
  im->alloc_calls++;
  if (s->used)
    memcpy(host, s->host, s->used * sizeof(float));
  if (s->host)
    CKN(im, cudaFreeHost(s->host));
  dev_free(im, s->dev);
  s->host = host, s->dev = (float *)dev, s->cap = cap;
  return 0;
}

/* The current slot, opened for a new commit if it is not (its pinned buffer is free once
 * its last host->device copy is done). 0 or SAC_EBACKEND. */
static int slot_open(cu_t *im, stage_slot_t **out) {
  stage_slot_t *s = &im->slot[im->cur];
  if (!s->open) {
    if (CK(im, cudaEventSynchronize(s->h2d_done)))
      return SAC_EBACKEND;
    s->used = 0, s->n = 0, s->open = 1, s->copied = 0;
  }
  *out = s;
  return 0;
}

/* A new part of n floats for dst in slot s: its index, or a negative code. */
static int slot_part(cu_t *im, stage_slot_t *s, float *dst, size_t n, int in_place) {
  if (s->n == STAGE_MAX) {
    SAC_ERROR("cuda", "more than %d staged parts in one commit", STAGE_MAX);
    return SAC_EINVAL;
  }
  size_t off = s->used, padded = (n + 63) & ~(size_t)63; /* parts stay 256-byte aligned */
  if (off + padded > s->cap) {
    int rc = slot_grow(im, s, off + padded);
    if (rc)
      return rc;
  }
  s->dst[s->n] = dst, s->off[s->n] = off, s->len[s->n] = n, s->in_place[s->n] = in_place;
  s->used = off + padded;
  return s->n++;
}

static int cu_stage(sac_backend_t *be, float *dst, const float *src, size_t n) {
  cu_t *im = IM(be);
  if (im->capturing >= 0)
    return SAC_ESTATE;
  stage_slot_t *s;
  int rc = slot_open(im, &s);
  if (rc)
    return rc;
  int i = slot_part(im, s, dst, n, 0);
  if (i < 0)
    return i;
  memcpy(s->host + s->off[i], src, n * sizeof(float));
  s->copied = 1;
  return 0;
}

/* In place (issue 34): the pinned memory of dst's part in the current slot, which the
 * commit copies to the device with the rest of the slot (one copy). Asked again for the
 * same dst before the commit, the same part. A part that makes the slot grow moves the
 * slot (slot_grow copies what it holds), so pointers handed out before it go stale:
 * callers reserve first (cu_stage_reserve, sac_batch_slots_at). NULL on failure (logged). */
/* Room in the current slot for a commit of `parts` parts of n floats in all. */
static int cu_stage_reserve(sac_backend_t *be, size_t n, int parts) {
  cu_t *im = IM(be);
  if (im->capturing >= 0)
    return SAC_ESTATE;
  stage_slot_t *s;
  int rc = slot_open(im, &s);
  if (rc)
    return rc;
  const size_t need = n + (size_t)(parts > 0 ? parts : 0) * 64; /* each part padded to 64 floats */
  return need > s->cap ? slot_grow(im, s, need) : 0;
}

static float *cu_stage_at(sac_backend_t *be, float *dst, size_t n) {
  cu_t *im = IM(be);
  if (im->capturing >= 0)
    return NULL;
  stage_slot_t *s;
  if (slot_open(im, &s))
    return NULL;
  for (int i = 0; i < s->n; i++)
    if (s->dst[i] == dst && s->in_place[i] && s->len[i] == n)
      return s->host + s->off[i];
  int i = slot_part(im, s, dst, n, 1);
  return i < 0 ? NULL : s->host + s->off[i];
}

static int cu_stage_commit(sac_backend_t *be) {
  cu_t *im = IM(be);
  if (im->capturing >= 0)
    return SAC_ESTATE;
  stage_slot_t *s = &im->slot[im->cur];
  if (!s->open || s->n == 0) {
    s->open = 0;
    return 0;
  }
  /* copy stream: after the compute stream consumed this slot's previous batch */
  if (CK(im, cudaStreamWaitEvent(im->copy, s->consumed, 0)) ||
      CK(im, cudaMemcpyAsync(s->dev, s->host, s->used * sizeof(float), cudaMemcpyHostToDevice, im->copy)) ||
      CK(im, cudaEventRecord(s->h2d_done, im->copy)) || CK(im, cudaStreamWaitEvent(im->stream, s->h2d_done, 0)))
    return SAC_EBACKEND;
  scatter_t sc;
  memset(&sc, 0, sizeof sc);
  size_t maxn = 0;
  for (int i = 0; i < s->n; i++) {
    sc.dst[i] = s->dst[i], sc.src[i] = s->dev + s->off[i], sc.n[i] = s->len[i];
    if (s->len[i] > maxn)
      maxn = s->len[i];
  }
  dim3 grid(grid_for(maxn, 64), (unsigned)s->n);
  k_scatter<<<grid, THREADS, 0, im->stream>>>(sc);
  if (LAUNCHED(im, "k_scatter") || CK(im, cudaEventRecord(s->consumed, im->stream)))
    return SAC_EBACKEND;
  im->batches++;
  im->host_copies += s->copied ? 2 : 1;
  s->open = 0;
  im->cur ^= 1;
  return 0;
}

/* Fetch: a device->host copy into pinned slot memory, in order on the compute stream,
 * with an event to wait on, so the learner reads update N's priorities while update
 * N + 1 runs (a plain download would wait for N + 1 too). */
static int cu_fetch(sac_backend_t *be, int slot, const float *src, size_t n) {
  cu_t *im = IM(be);
  if (im->capturing >= 0)
    return SAC_ESTATE;
  if (slot < 0 || slot >= SAC_BACKEND_FETCH_SLOTS)
    return SAC_EINVAL;
  if (!im->fetch_done[slot] && CK(im, cudaEventCreateWithFlags(&im->fetch_done[slot], cudaEventDisableTiming)))
    return SAC_EBACKEND;
  if (n > im->fetch_cap[slot]) { /* first use only: a steady batch size never grows it */
    if (CK(im, cudaEventSynchronize(im->fetch_done[slot])))
      return SAC_EBACKEND;
    if (im->fetch_host[slot])
      CKN(im, cudaFreeHost(im->fetch_host[slot]));
    im->fetch_host[slot] = NULL, im->fetch_cap[slot] = 0;
    if (cudaMallocHost((void **)&im->fetch_host[slot], n * sizeof(float)) != cudaSuccess) {
      (void)cudaGetLastError();
      im->fetch_host[slot] = NULL;
      SAC_ERROR("cuda", "cudaMallocHost(%zu) failed", n * sizeof(float));
      return SAC_ENOMEM;
    }
    im->fetch_cap[slot] = n;
  }
  if ((n && CK(im, cudaMemcpyAsync(im->fetch_host[slot], src, n * sizeof(float), cudaMemcpyDeviceToHost,
                                   im->stream))) ||
      CK(im, cudaEventRecord(im->fetch_done[slot], im->stream)))
    return SAC_EBACKEND;
  return 0;
}

static int cu_fetch_wait(sac_backend_t *be, int slot, float *dst, size_t n) {
  cu_t *im = IM(be);
  if (slot < 0 || slot >= SAC_BACKEND_FETCH_SLOTS || n > im->fetch_cap[slot] || !im->fetch_done[slot])
    return SAC_EINVAL;
  if (CK(im, cudaEventSynchronize(im->fetch_done[slot])))
    return SAC_EBACKEND;
  memcpy(dst, im->fetch_host[slot], n * sizeof(float));
  return im->err;
}

/* ------------------------------------------------------------------------------------ */
/* options and metrics                                                                    */

static int read_scaler(cu_t *im, scaler_t *out) {
  im->blocking++;
  if (CK(im, cudaMemcpyAsync(out, &im->ds->scaler, sizeof *out, cudaMemcpyDeviceToHost, im->stream)) ||
      CK(im, cudaStreamSynchronize(im->stream)))
    return SAC_EBACKEND;
  return 0;
}

static int write_scaler(cu_t *im, const scaler_t *in) {
  im->blocking++;
  if (CK(im, cudaMemcpyAsync(&im->ds->scaler, in, sizeof *in, cudaMemcpyHostToDevice, im->stream)) ||
      CK(im, cudaStreamSynchronize(im->stream)))
    return SAC_EBACKEND;
  return 0;
}

static int parse_bool(const char *v, int *out) {
  if (!strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "on") || !strcmp(v, "yes"))
    return *out = 1, 0;
  if (!strcmp(v, "0") || !strcmp(v, "false") || !strcmp(v, "off") || !strcmp(v, "no"))
    return *out = 0, 0;
  return SAC_EINVAL;
}

static int cu_set_option(sac_backend_t *be, const char *key, const char *value) {
  cu_t *im = IM(be);
  if (im->capturing >= 0)
    return SAC_ESTATE;
  if (!strcmp(key, "precision")) {
    for (int p = 0; p < 4; p++)
      if (!strcmp(value, k_prec_names[p])) {
        if (p != im->prec) {
          drop_graphs(im); /* recorded with the old compute types */
          im->prec = p;
          scaler_t sc = {im->init_scale, 0, 0, im->growth_interval, 0};
          return write_scaler(im, &sc);
        }
        return 0;
      }
    SAC_ERROR("cuda", "precision \"%s\" is not one of fp32, tf32, bf16, fp16", value);
    return SAC_EINVAL;
  }
  if (!strcmp(key, "graphs")) {
    int on;
    if (parse_bool(value, &on))
      return SAC_EINVAL;
    if (!on)
      drop_graphs(im);
    im->graphs_on = on;
    return 0;
  }
  if (!strcmp(key, "loss_scale")) {
    char *end;
    float v = strtof(value, &end);
    if (*end || !(v > 0.0f))
      return SAC_EINVAL;
    scaler_t sc;
    int rc = read_scaler(im, &sc);
    if (rc)
      return rc;
    sc.scale = v, sc.good = 0;
    im->init_scale = isfinite(v) ? v : im->init_scale;
    return write_scaler(im, &sc);
  }
  if (!strcmp(key, "loss_scale_growth_interval")) {
    char *end;
    long v = strtol(value, &end, 10);
    if (*end || v < 1 || v > 1000000000L)
      return SAC_EINVAL;
    scaler_t sc;
    int rc = read_scaler(im, &sc);
    if (rc)
      return rc;
    sc.growth_interval = (int)v, sc.good = 0;
    im->growth_interval = (int)v;
    return write_scaler(im, &sc);
  }
  if (!strcmp(key, "poison_counters")) { /* tests: every call site's counter set to v */
    char *end;
    long v = strtol(value, &end, 10);
    if (*end || v < 0 || v > 1000000L)
      return SAC_EINVAL;
    static unsigned int h[CTR_POOL];
    for (int i = 0; i < CTR_POOL; i++)
      h[i] = (unsigned int)v;
    im->blocking++;
    if (CK(im, cudaMemcpyAsync(im->ds->ctr, h, sizeof h, cudaMemcpyHostToDevice, im->stream)) ||
        CK(im, cudaStreamSynchronize(im->stream)))
      return SAC_EBACKEND;
    return 0;
  }
  if (!strcmp(key, "loss_scale_good")) { /* the growth counter, restored from a checkpoint */
    char *end;
    long v = strtol(value, &end, 10);
    if (im->prec != PREC_FP16)
      return SAC_ENOTFOUND;
    if (*end || v < 0 || v > 1000000000L)
      return SAC_EINVAL;
    scaler_t sc;
    int rc = read_scaler(im, &sc);
    if (rc)
      return rc;
    sc.good = (int)v;
    return write_scaler(im, &sc);
  }
  return SAC_ENOTFOUND;
}

static int cu_get_metric(sac_backend_t *be, const char *key, double *out) {
  cu_t *im = IM(be);
  if (!strcmp(key, "device_bytes"))
    return *out = (double)im->bytes, 0;
  if (!strcmp(key, "device_peak_bytes"))
    return *out = (double)im->peak, 0;
  if (!strcmp(key, "alloc_calls"))
    return *out = (double)im->alloc_calls, 0;
  if (!strcmp(key, "graph_launches"))
    return *out = (double)im->graph_launches, 0;
  if (!strcmp(key, "kernel_launches"))
    return *out = (double)im->launches, 0;
  if (!strcmp(key, "blocking_syncs"))
    return *out = (double)im->blocking, 0;
  if (!strcmp(key, "degraded_gemms"))
    return *out = (double)im->degraded, 0;
  if (!strcmp(key, "epilogue_fallbacks"))
    return *out = (double)(im->epi_fb_align + im->epi_fb_heuristic + im->epi_fb_launch), 0;
  if (!strcmp(key, "epilogue_fallbacks_alignment"))
    return *out = (double)im->epi_fb_align, 0;
  if (!strcmp(key, "epilogue_fallbacks_heuristic"))
    return *out = (double)im->epi_fb_heuristic, 0;
  if (!strcmp(key, "epilogue_fallbacks_launch"))
    return *out = (double)im->epi_fb_launch, 0;
  if (!strcmp(key, "matmul_plans"))
    return *out = (double)im->n_plans, 0;
  if (!strcmp(key, "staged_batches"))
    return *out = (double)im->batches, 0;
  if (!strcmp(key, "host_copies"))
    return *out = (double)im->host_copies, 0;
  if (!strcmp(key, "call_sites"))
    return *out = (double)im->n_sites, 0;
  if (!strcmp(key, "precision"))
    return *out = (double)im->prec, 0;
  if (!strcmp(key, "device_used_bytes") || !strcmp(key, "device_total_bytes")) {
    size_t free_b = 0, total_b = 0;
    if (CKN(im, cudaMemGetInfo(&free_b, &total_b)))
      return SAC_EBACKEND;
    *out = (double)(key[7] == 'u' ? total_b - free_b : total_b);
    return 0;
  }
  if (!strcmp(key, "loss_scale") || !strcmp(key, "skipped_steps") || !strcmp(key, "loss_scale_good")) {
    if (im->capturing >= 0)
      return SAC_ESTATE;
    if (!strcmp(key, "loss_scale_good") && im->prec != PREC_FP16)
      return SAC_ENOTFOUND; /* no scaler state to keep outside fp16 */
    if (im->prec != PREC_FP16) { /* nothing is scaled or skipped: no need to wait for the device */
      *out = !strcmp(key, "loss_scale") ? 1.0 : 0.0;
      return 0;
    }
    scaler_t sc;
    int rc = read_scaler(im, &sc);
    if (rc)
      return rc;
    if (!strcmp(key, "loss_scale"))
      *out = im->prec == PREC_FP16 ? sc.scale : 1.0;
    else if (!strcmp(key, "loss_scale_good"))
      *out = (double)sc.good;
    else
      *out = (double)sc.skipped;
    return 0;
  }
  return SAC_ENOTFOUND;
}

/* ------------------------------------------------------------------------------------ */
/* life cycle                                                                             */

static void cu_destroy(sac_backend_t *be) {
  cu_t *im = IM(be);
  if (im) {
    if (im->capturing >= 0) {
      cudaGraph_t g = NULL;
      cudaStreamEndCapture(im->stream, &g);
      if (g)
        cudaGraphDestroy(g);
    }
    if (im->stream)
      CKN(im, cudaStreamSynchronize(im->stream));
    if (im->copy)
      CKN(im, cudaStreamSynchronize(im->copy));
    drop_graphs(im);
    for (int i = 0; i < im->n_plans; i++)
      plan_release(&im->plans[i]);
    free(im->plans);
    for (int i = 0; i < SAC_BACKEND_FETCH_SLOTS; i++) {
      if (im->fetch_host[i])
        CKN(im, cudaFreeHost(im->fetch_host[i]));
      if (im->fetch_done[i])
        CKN(im, cudaEventDestroy(im->fetch_done[i]));
    }
    if (im->marks) {
      for (int i = 0; i < SAC_BACKEND_MAX_MARKS; i++)
        if (im->marks[i])
          CKN(im, cudaEventDestroy(im->marks[i]));
      free(im->marks);
    }
    if (im->hold_host)
      CKN(im, cudaFreeHost(im->hold_host));
    for (int i = 0; i < 2; i++) {
      stage_slot_t *s = &im->slot[i];
      if (s->host)
        CKN(im, cudaFreeHost(s->host));
      if (s->h2d_done)
        CKN(im, cudaEventDestroy(s->h2d_done));
      if (s->consumed)
        CKN(im, cudaEventDestroy(s->consumed));
    }
    /* what the caller did not free (and the workspace, state, staging buffers) */
    for (size_t i = 0; i < im->n_allocs; i++)
      CKN(im, cudaFree(im->allocs[i].p));
    free(im->allocs);
    if (im->lt)
      CKLN(im, cublasLtDestroy(im->lt));
    if (im->copy)
      CKN(im, cudaStreamDestroy(im->copy));
    if (im->stream)
      CKN(im, cudaStreamDestroy(im->stream));
    free(im);
  }
  free(be);
}

static void *cu_native_stream(sac_backend_t *be) { return (void *)((cu_t *)be->impl)->stream; }

static const sac_backend_ops_t k_cuda_ops = {
    .name = "cuda",
    .alloc = cu_alloc,
    .free = cu_free,
    .upload = cu_upload,
    .download = cu_download,
    .sync = cu_sync,
    .destroy = cu_destroy,
    .linear_fwd = cu_linear_fwd,
    .linear_bwd = cu_linear_bwd,
    .normal = cu_normal,
    .head_fwd = cu_head_fwd,
    .head_bwd = cu_head_bwd,
    .critic_target = cu_critic_target,
    .critic_loss = cu_critic_loss,
    .actor_loss = cu_actor_loss,
    .alpha_loss = cu_alpha_loss,
    .adam = cu_adam,
    .polyak = cu_polyak,
    .update_end = cu_update_end,
    .graph_begin = cu_graph_begin,
    .graph_end = cu_graph_end,
    .graph_launch = cu_graph_launch,
    .stage = cu_stage,
    .stage_commit = cu_stage_commit,
    .stage_at = cu_stage_at,
    .stage_reserve = cu_stage_reserve,
    .set_option = cu_set_option,
    .get_metric = cu_get_metric,
    .overflow_export = cu_overflow_export,
    .overflow_import = cu_overflow_import,
    .native_stream = cu_native_stream,
    .fetch = cu_fetch,
    .fetch_wait = cu_fetch_wait,
    .normal2 = cu_normal2,
    .actor_alpha_loss = cu_actor_alpha_loss,
    .adam_polyak = cu_adam_polyak,
    .q_head = cu_q_head,
    .policy_fwd = cu_policy_fwd,
    .linear_bwd_act = cu_linear_bwd_act,
    .policy_bwd = cu_policy_bwd,
    .update_begin = cu_update_begin,
    .timing_begin = cu_timing_begin,
    .timing_mark = cu_timing_mark,
    .timing_end = cu_timing_end,
    .act_ld = NULL, /* activations at their width: cuBLASLt's layouts and the kernels as they were checked */
    .act_members_apart = NULL, /* each member's columns side by side in a row, as the kernels index them */
};

/* Loads every kernel now: with lazy module loading a first launch would load it, and a
 * first launch may happen while a graph is being captured (the graph's last node). */
static int preload_kernels(cu_t *im) {
  const void *fns[] = {(const void *)k_bias_act,
                       (const void *)k_act_bwd_colsum,
                       (const void *)k_dx_shared,
                       (const void *)k_normal,
                       (const void *)k_head_fwd,
                       (const void *)k_head_bwd,
                       (const void *)k_critic_target,
                       (const void *)k_critic_loss,
                       (const void *)k_actor_loss,
                       (const void *)k_alpha_loss,
                       (const void *)k_nonfinite,
                       (const void *)k_adam,
                       (const void *)k_polyak,
                       (const void *)k_scaler_update,
                       (const void *)k_set_u64,
                       (const void *)k_add_u64,
                       (const void *)k_scatter,
                       (const void *)k_ovf_export,
                       (const void *)k_ovf_import,
                       (const void *)k_adam_polyak,
                       (const void *)k_actor_alpha_loss,
                       (const void *)k_normal2,
                       (const void *)k_out1_fwd,
                       (const void *)k_out1_bwd,
                       (const void *)k_out1_head,
                       (const void *)k_policy_fwd,
                       (const void *)k_policy_bwd,
                       (const void *)k_dx_shared_act,
                       (const void *)k_hold};
  for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) {
    cudaFuncAttributes attr;
    if (CKN(im, cudaFuncGetAttributes(&attr, fns[i])))
      return SAC_EBACKEND;
  }
  return 0;
}

/* Creates the backend on `device`. Returns 0, SAC_ENODEV (no driver or no such device:
 * any error from the runtime counts as "no GPU"), SAC_ENOMEM or SAC_EBACKEND. */
extern "C" int sac_backend_cuda_new(int device, sac_backend_t **out) {
  *out = NULL;
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count <= device || device < 0) {
    SAC_INFO("cuda", "no usable CUDA device %d (%s)", device,
             e != cudaSuccess ? cudaGetErrorString(e) : "fewer devices");
    (void)cudaGetLastError();
    return SAC_ENODEV;
  }
  sac_backend_t *be = (sac_backend_t *)calloc(1, sizeof *be);
  cu_t *im = (cu_t *)calloc(1, sizeof *im);
  if (!be || !im) {
    free(be), free(im);
    return SAC_ENOMEM;
  }
  be->ops = &k_cuda_ops;
  be->impl = im;
  im->device = device;
  im->capturing = -1;
  im->graphs_on = 1;
  im->prec = PREC_FP32;
  im->init_scale = 65536.0f;
  im->growth_interval = 2000;
  int rc = SAC_EBACKEND;
  cudaDeviceProp prop;
  int rt = 0, drv = 0;
  if (CKN(im, cudaSetDevice(device)) || CKN(im, cudaGetDeviceProperties(&prop, device)))
    goto err;
  cudaRuntimeGetVersion(&rt);
  cudaDriverGetVersion(&drv);
  SAC_INFO("cuda", "device %d: %s, sm_%d%d, %d SMs, %.1f GiB; runtime %d, driver %d, cuBLASLt %zu", device,
           prop.name, prop.major, prop.minor, prop.multiProcessorCount, prop.totalGlobalMem / 1073741824.0,
           rt, drv, cublasLtGetVersion());
  if (CKN(im, cudaStreamCreateWithFlags(&im->stream, cudaStreamNonBlocking)) ||
      CKN(im, cudaStreamCreateWithFlags(&im->copy, cudaStreamNonBlocking)) ||
      CKLN(im, cublasLtCreate(&im->lt)) || preload_kernels(im))
    goto err;
  im->plans = (plan_t *)calloc(MAX_PLANS, sizeof(plan_t));
  if (!im->plans) {
    rc = SAC_ENOMEM;
    goto err;
  }
  im->sms = prop.multiProcessorCount;
  if ((rc = dev_alloc(im, WORKSPACE_BYTES, &im->ws)) != 0 ||
      (rc = dev_alloc(im, sizeof(dev_state_t), (void **)&im->ds)) != 0 ||
      (rc = dev_alloc(im, SCRATCH_FLOATS * sizeof(float), (void **)&im->scratch)) != 0)
    goto err;
  rc = SAC_EBACKEND;
  for (int i = 0; i < 2; i++)
    if (CKN(im, cudaEventCreateWithFlags(&im->slot[i].h2d_done, cudaEventDisableTiming)) ||
        CKN(im, cudaEventCreateWithFlags(&im->slot[i].consumed, cudaEventDisableTiming)))
      goto err;
  {
    dev_state_t st;
    memset(&st, 0, sizeof st);
    st.scaler.scale = im->init_scale;
    st.scaler.growth_interval = im->growth_interval;
    if (CKN(im, cudaMemcpy(im->ds, &st, sizeof st, cudaMemcpyHostToDevice)))
      goto err;
  }
  *out = be;
  return 0;
err:
  cu_destroy(be);
  return rc;
}
