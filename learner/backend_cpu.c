/* The cpu backend: the layers' products by its own GEMM where the CPU has AVX-512 or AVX2
 * (gemm_own.h: the bias and activation fused into the forward's), else by OpenBLAS sgemm,
 * and plain loops for everything else.
 * It is the readable reference the cuda backend is checked against, so the math here is
 * written for clarity first; the GEMMs carry almost all of the time.
 * "Backend memory" is 64-byte aligned host memory.
 *
 * Threads (issue 17): SAC's GEMMs are small (256 x 256 x 256 and below), where OpenBLAS's
 * own threading spends much of its time waking and joining threads once per GEMM. So with
 * T > 1 threads the backend runs OpenBLAS single-threaded and splits each op itself over
 * a pool of T - 1 workers plus the caller, once per op rather than once per GEMM: the twin
 * critics' members go to different threads (independent GEMMs in parallel), one-member
 * layers split their rows (forward, input gradient) or their output columns (weight
 * gradient, with the activation backward and the bias gradient of those columns), and the
 * Adam and Polyak passes, the noise and the policy head split their range. Workers
 * spin for the next op for up to a millisecond, then sleep. Every element is computed by
 * exactly one thread in a fixed order, so results are deterministic for a fixed thread
 * count (and equal the one-thread results up to the GEMM kernel's blocking). */
#include <assert.h>
#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/error.h"
#include "common/philox.h"
#include "common/vmath.h"
#include "learner/backend.h"
#include "learner/gemm_own.h"

/* ---- the thread pool: fork-join, one job at a time ------------------------------------
 * A job has n parts, part p computing the same elements whoever runs it. The caller runs
 * part 0, worker w first tries part w, and each part is claimed once per job (a CAS on its
 * slot from the previous job's number to this one's). A caller done with part 0 claims what
 * no worker has started, so it never waits for a worker the kernel has not scheduled: on a
 * machine with more runnable threads than cores (other processes, a parallel test run), a
 * spinning wait for a preempted worker costs whole time slices. When the caller keeps
 * finding its workers' parts unclaimed, it runs the next jobs alone and lets them sleep. */

#define CPU_MAX_THREADS 64
/* How long a worker spins for the next op before it sleeps (sooner if it loses its core
 * while spinning), and how long the caller spins for the workers' claimed parts before it
 * yields its core. Spinning is timed, not counted:
 * a PAUSE lasts from a few to over a hundred cycles depending on the CPU, and on a VM a
 * sleeping thread's wake-up (a futex and an idle vCPU woken by the host) took 40-120 us on
 * average where an op takes 20-200 us. With 2000 PAUSEs (under 50 us on the development VM)
 * the worker slept between most ops, and a cheetah update ran at 0.36-0.45 of the sgemm
 * ceiling; spinning for 1 ms it ran at 0.65-0.69 (issue 17). Between updates a learner that
 * waits longer for data lets its workers sleep after 1 ms. */
#define CPU_SPIN_NS 1000000u
#define CPU_WAIT_SPIN_NS 100000u
/* Of CPU_WINDOW jobs, more than CPU_MISSES in which the caller had to run a worker's part
 * itself (the worker was not running) make the next jobs run on the caller alone, with the
 * workers asleep; then the pool tries again. The first such stretch is CPU_SERIAL_MIN jobs
 * (about an update), each one that follows the next window's misses twice the last, up to
 * CPU_SERIAL_MAX; a window without them starts over at CPU_SERIAL_MIN. So a worker that lost
 * its core once (a host's hiccup, a page fault) costs an update at one thread's speed, not
 * sixteen, while a machine whose cores stay taken (a parallel test run, a learner beside its
 * actors) still runs almost all jobs serially after a few windows. */
#define CPU_WINDOW 64
#define CPU_MISSES 16
#define CPU_SERIAL_MIN 64
#define CPU_SERIAL_MAX 1024

typedef void (*cpu_job_fn)(void *arg, int part, int nparts);

typedef struct cpu_pool {
  int n; /* threads, the caller included */
  pthread_t tid[CPU_MAX_THREADS];
  pthread_mutex_t mu;
  pthread_cond_t cv;
  _Atomic unsigned gen;                    /* the current job's number (written by the caller) */
  _Atomic unsigned claim[CPU_MAX_THREADS]; /* per part: the number of the job that claimed it */
  _Atomic int done;                        /* parts of the current job finished by workers */
  _Atomic int sleepers;                    /* workers waiting on cv */
  _Atomic int stop;
  cpu_job_fn fn;
  void *arg;
  int window, missed, serial_left;                  /* the caller's record of jobs its workers missed */
  int serial_next;                                  /* the next serial stretch's length */
  _Atomic uint64_t jobs, serial_jobs, missed_parts; /* counts, for tests */
  _Atomic uint64_t sleeps; /* workers' waits that ended in a sleep (a wake-up to follow) */
} cpu_pool_t;

typedef struct {
  cpu_pool_t *pool;
  int part;
} cpu_worker_t;

static inline void cpu_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

static uint64_t cpu_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A spin's state: started at `start` (0: not yet), clock last read at `last`. */
typedef struct {
  uint64_t start, last;
  unsigned calls;
} cpu_spin_t;

/* Over this long between two clock readings of a spin (normally a few microseconds apart),
 * the thread lost its core while spinning: something else wants the core, and spinning on
 * takes it from that work. */
#define CPU_PREEMPTED_NS 50000u

/* Spins while it is called within `ns` of its first call and the thread keeps its core;
 * the clock is read once every 64 calls. */
static int cpu_spin(cpu_spin_t *sp, uint64_t ns) {
  if ((++sp->calls & 63u) == 1u) {
    uint64_t now = cpu_now_ns();
    if (sp->start == 0)
      sp->start = now;
    else if (now - sp->start >= ns || now - sp->last >= CPU_PREEMPTED_NS)
      return 0;
    sp->last = now;
  }
  cpu_pause();
  return 1;
}

/* Part `part` of job g, if nobody has claimed it yet. */
static int cpu_claim(cpu_pool_t *pool, int part, unsigned g) {
  unsigned expect = g - 1;
  return atomic_compare_exchange_strong(&pool->claim[part], &expect, g);
}

/* Waits for a job after `seen`: spins, then sleeps. Returns its number, or `seen` on stop. */
static unsigned cpu_wait_job(cpu_pool_t *pool, unsigned seen) {
  unsigned g;
  cpu_spin_t sp = {0, 0, 0};
  while ((g = atomic_load(&pool->gen)) == seen && !atomic_load(&pool->stop)) {
    if (cpu_spin(&sp, CPU_SPIN_NS))
      continue;
    atomic_fetch_add_explicit(&pool->sleeps, 1, memory_order_relaxed);
    pthread_mutex_lock(&pool->mu);
    atomic_fetch_add(&pool->sleepers, 1);
    while (atomic_load(&pool->gen) == seen && !atomic_load(&pool->stop))
      pthread_cond_wait(&pool->cv, &pool->mu);
    atomic_fetch_sub(&pool->sleepers, 1);
    pthread_mutex_unlock(&pool->mu);
    sp = (cpu_spin_t){0, 0, 0};
  }
  return atomic_load(&pool->stop) ? seen : g;
}

static void *cpu_worker_main(void *p) {
  cpu_worker_t *w = p;
  cpu_pool_t *pool = w->pool;
  unsigned seen = 0;
  for (;;) {
    unsigned g = cpu_wait_job(pool, seen);
    if (g == seen)
      break;
    seen = g;
    /* its own part first (the same member or rows every time: warm caches), then any
     * other still unclaimed */
    for (int k = 0; k < pool->n - 1; k++) {
      int part = 1 + (w->part - 1 + k) % (pool->n - 1);
      if (!cpu_claim(pool, part, g))
        continue;
      pool->fn(pool->arg, part, pool->n);
      atomic_fetch_add_explicit(&pool->done, 1, memory_order_release);
    }
  }
  free(w);
  return NULL;
}

/* Runs fn(arg, part, n) for every part in [0, n): part 0 on the caller, the others on
 * whichever thread claims them first. */
static void cpu_run(cpu_pool_t *pool, cpu_job_fn fn, void *arg) {
  if (!pool || pool->n < 2) {
    fn(arg, 0, 1);
    return;
  }
  const int n = pool->n;
  atomic_fetch_add_explicit(&pool->jobs, 1, memory_order_relaxed);
  if (pool->serial_left > 0) {
    pool->serial_left--;
    atomic_fetch_add_explicit(&pool->serial_jobs, 1, memory_order_relaxed);
    for (int part = 0; part < n; part++)
      fn(arg, part, n);
    return;
  }
  /* step 1: publish the job and wake sleeping workers */
  const unsigned g = atomic_load_explicit(&pool->gen, memory_order_relaxed) + 1;
  pool->fn = fn;
  pool->arg = arg;
  atomic_store_explicit(&pool->done, 0, memory_order_relaxed);
  atomic_store(&pool->gen, g);
  if (atomic_load(&pool->sleepers) > 0) {
    pthread_mutex_lock(&pool->mu);
    pthread_cond_broadcast(&pool->cv);
    pthread_mutex_unlock(&pool->mu);
  }
  /* step 2: part 0, then whatever no worker has started */
  fn(arg, 0, n);
  int taken = 0;
  for (int part = 1; part < n; part++)
    if (cpu_claim(pool, part, g)) {
      fn(arg, part, n);
      taken++;
    }
  /* step 3: wait for the parts workers claimed (a preempted one gets the core after a
   * short spin) */
  cpu_spin_t sp = {0, 0, 0};
  while (atomic_load_explicit(&pool->done, memory_order_acquire) < n - 1 - taken)
    if (!cpu_spin(&sp, CPU_WAIT_SPIN_NS))
      sched_yield();
  /* step 4: workers that keep missing their parts are not getting cores: go serial a while */
  if (taken) {
    pool->missed++;
    atomic_fetch_add_explicit(&pool->missed_parts, (uint64_t)taken, memory_order_relaxed);
  }
  if (++pool->window == CPU_WINDOW) {
    if (pool->missed > CPU_MISSES) {
      pool->serial_left = pool->serial_next;
      if (pool->serial_next < CPU_SERIAL_MAX)
        pool->serial_next *= 2;
    } else {
      pool->serial_next = CPU_SERIAL_MIN;
    }
    pool->window = pool->missed = 0;
  }
}

static void cpu_pool_destroy(cpu_pool_t *pool) {
  if (!pool)
    return;
  pthread_mutex_lock(&pool->mu);
  atomic_store(&pool->stop, 1);
  pthread_cond_broadcast(&pool->cv);
  pthread_mutex_unlock(&pool->mu);
  for (int i = 1; i < pool->n; i++)
    pthread_join(pool->tid[i], NULL);
  pthread_mutex_destroy(&pool->mu);
  pthread_cond_destroy(&pool->cv);
  free(pool);
}

/* n threads in all (n - 1 workers); NULL where n < 2 or on failure (then ops run serially). */
static cpu_pool_t *cpu_pool_new(int n) {
  if (n < 2)
    return NULL;
  if (n > CPU_MAX_THREADS)
    n = CPU_MAX_THREADS;
  cpu_pool_t *pool = calloc(1, sizeof *pool);
  if (!pool)
    return NULL;
  pthread_mutex_init(&pool->mu, NULL);
  pthread_cond_init(&pool->cv, NULL);
  pool->serial_next = CPU_SERIAL_MIN;
  pool->n = 1;
  for (int i = 1; i < n; i++) {
    cpu_worker_t *w = malloc(sizeof *w);
    if (!w)
      break;
    w->pool = pool, w->part = i;
    if (pthread_create(&pool->tid[i], NULL, cpu_worker_main, w) != 0) {
      free(w);
      break;
    }
    pool->n = i + 1;
  }
  if (pool->n < 2) {
    cpu_pool_destroy(pool);
    return NULL;
  }
  return pool;
}

typedef struct {
  int threads;
  cpu_pool_t *pool; /* NULL with one thread */
  float *join;      /* a shared layer's two input segments side by side (join_n floats) */
  size_t join_n;
  float *partial; /* shares summed after a split job: bwd_batch_job, member_shares (partial_n) */
  size_t partial_n;
  uint64_t batch_splits;  /* "batch_split_bwds": backward ops run by rows of the batch */
  uint64_t member_splits; /* "member_split_bwds": shared inputs' gradients made by members */
  /* fetch slots (backend.h): a copy now, read later; the ops already ran */
  float *fetch_host[SAC_BACKEND_FETCH_SLOTS];
  size_t fetch_cap[SAC_BACKEND_FETCH_SLOTS];
  /* The counts the cuda backend keeps (backend.h, "blocking_syncs", "kernel_launches"):
   * every op here adds the launches the cuda backend's op makes in fp32 (one per kernel,
   * one per matmul call), so a CPU run counts what a GPU run of the same calls launches
   * (tests/test_backend_cuda.c checks the two agree op by op on a device). */
  uint64_t blocking, launches;
  int staged;        /* parts staged since the last stage_commit (the cuda backend's scatter) */
  int staged_copied; /* of them, parts given to stage (copied here) rather than written in place */
  uint64_t batches, host_copies; /* "staged_batches", "host_copies" (backend.h) */
  /* timing (timing_begin / _mark / _end): the clock at each mark, ns */
  uint64_t *marks;
  int timing, n_marks;
} cpu_impl_t;

static cpu_impl_t *impl_of(sac_backend_t *be) { return (cpu_impl_t *)be->impl; }

static cpu_pool_t *pool_of(sac_backend_t *be) { return ((cpu_impl_t *)be->impl)->pool; }

/* [lo, hi) of part p of n over `total` items, in chunks of `align` items where possible */
static void split_range(size_t total, int p, int n, size_t align, size_t *lo, size_t *hi) {
  size_t chunks = (total + align - 1) / align;
  size_t c0 = chunks * (size_t)p / (size_t)n, c1 = chunks * (size_t)(p + 1) / (size_t)n;
  *lo = c0 * align < total ? c0 * align : total;
  *hi = c1 * align < total ? c1 * align : total;
}

int sac_backend_host_alloc(sac_backend_t *be, size_t n, float **out) {
  (void)be;
  /* 256 bytes, as cudaMalloc: sac.c's blocks inside a buffer are 256-byte aligned
   * relative to its start (issue 16), and this makes them so in memory too */
  size_t bytes = ((n ? n : 1) * sizeof(float) + 255) & ~(size_t)255;
  float *p = aligned_alloc(256, bytes);
  if (!p)
    return SAC_ENOMEM;
  memset(p, 0, bytes);
  *out = p;
  return 0;
}

void sac_backend_host_free(sac_backend_t *be, float *p) {
  (void)be;
  free(p);
}

static int cpu_copy(sac_backend_t *be, float *dst, const float *src, size_t n) {
  (void)be;
  memmove(dst, src, n * sizeof(float));
  return 0;
}

/* download and sync: where the cuda backend waits for its stream (counted alike) */
static int cpu_download(sac_backend_t *be, float *dst, const float *src, size_t n) {
  impl_of(be)->blocking++;
  return cpu_copy(be, dst, src, n);
}

static int cpu_sync(sac_backend_t *be) {
  impl_of(be)->blocking++;
  return 0;
}

static int cpu_stage(sac_backend_t *be, float *dst, const float *src, size_t n) {
  impl_of(be)->staged++;
  impl_of(be)->staged_copied++;
  return cpu_copy(be, dst, src, n);
}

/* In place: backend memory is host memory, so the batch is written where the ops read it
 * (counted as a staged part, as cpu_stage's). */
static float *cpu_stage_at(sac_backend_t *be, float *dst, size_t n) {
  (void)n;
  impl_of(be)->staged++;
  return dst;
}

/* Timing: the ops are done when they return, so a mark is the clock now. */
static int cpu_timing_begin(sac_backend_t *be, int hold) {
  (void)hold;
  cpu_impl_t *im = impl_of(be);
  if (!im->marks && !(im->marks = calloc(SAC_BACKEND_MAX_MARKS, sizeof *im->marks)))
    return SAC_ENOMEM;
  im->timing = 1, im->n_marks = 0;
  return 0;
}

static int cpu_timing_mark(sac_backend_t *be, int i) {
  cpu_impl_t *im = impl_of(be);
  if (!im->timing)
    return SAC_ESTATE;
  if (i < 0 || i >= SAC_BACKEND_MAX_MARKS)
    return SAC_EINVAL;
  im->marks[i] = cpu_now_ns();
  if (i >= im->n_marks)
    im->n_marks = i + 1;
  return 0;
}

static int cpu_timing_end(sac_backend_t *be, int n, double *seconds) {
  cpu_impl_t *im = impl_of(be);
  if (!im->timing)
    return SAC_ESTATE;
  im->timing = 0;
  if (n < 0 || n > im->n_marks)
    return SAC_EINVAL;
  for (int i = 0; i < n; i++)
    seconds[i] = (double)(int64_t)(im->marks[i] - im->marks[0]) * 1e-9;
  return 0;
}

/* Fetch: the ops ran already, so the copy is made now into the slot and handed out at
 * fetch_wait, as the cuda backend's pinned slots do one update later. */
static int cpu_fetch(sac_backend_t *be, int slot, const float *src, size_t n) {
  cpu_impl_t *im = impl_of(be);
  if (slot < 0 || slot >= SAC_BACKEND_FETCH_SLOTS)
    return SAC_EINVAL;
  if (n > im->fetch_cap[slot]) { /* first use only */
    float *p = realloc(im->fetch_host[slot], n * sizeof(float));
    if (!p)
      return SAC_ENOMEM;
    im->fetch_host[slot] = p, im->fetch_cap[slot] = n;
  }
  memcpy(im->fetch_host[slot], src, n * sizeof(float));
  return 0;
}

static int cpu_fetch_wait(sac_backend_t *be, int slot, float *dst, size_t n) {
  cpu_impl_t *im = impl_of(be);
  if (slot < 0 || slot >= SAC_BACKEND_FETCH_SLOTS || n > im->fetch_cap[slot])
    return SAC_EINVAL;
  memcpy(dst, im->fetch_host[slot], n * sizeof(float));
  return 0;
}

/* The cuda backend's launches for a linear layer (backend_cuda.cu, cu_linear_fwd and
 * cu_linear_bwd in fp32): the critics' one-wide last layer one kernel each way; else one
 * matmul per input segment (shared) or one (per-member columns), a separate bias kernel
 * where the bias is under 16-byte aligned; backward: the activation-backward/bias-sum
 * kernel where there is an activation or a bias gradient, the weight-gradient matmuls,
 * and the input gradient (a kernel per shared segment, a matmul otherwise); a shared layer's
 * input gradient without dW and db is one kernel with its activation backward. */
static int bias_unaligned(const float *b, int n_out, int K) {
  uintptr_t a = (uintptr_t)b;
  if (K > 1)
    a |= (uintptr_t)((size_t)n_out * sizeof(float));
  return (a % 16) != 0;
}

/* the twin critics' last layer: one kernel each way on cuda (k_out1_fwd, k_out1_bwd) */
static int is_out1(const sac_linear_t *L) { return !L->shared && L->n_out == 1 && L->act == SAC_ACT_NONE; }

/* input segments a shared layer's matmuls read: adjacent segments are one operand */
static uint64_t operands(const sac_linear_t *L) {
  return L->shared && !sac_segs_adjacent(L) ? (uint64_t)L->n_seg : 1;
}

static uint64_t linear_fwd_launches(const sac_linear_t *L) {
  if (is_out1(L))
    return 1;
  uint64_t n = operands(L);
  return n +
         (L->b && (L->act == SAC_ACT_RELU || L->act == SAC_ACT_NONE) && bias_unaligned(L->b, L->n_out, L->K)
              ? 1
              : 0);
}

static uint64_t linear_bwd_launches(const sac_linear_t *L, const float *dW, const float *db,
                                    float *const dX[2]) {
  if (is_out1(L))
    return dW || db || (dX && dX[0]) ? 1 : 0;
  if (L->shared && !dW && !db && L->act != SAC_ACT_NONE)
    return 1; /* the input gradient with the activation backward (k_dx_shared_act), or that alone */
  uint64_t n = L->act != SAC_ACT_NONE || db ? 1 : 0;
  if (dW)
    n += operands(L);
  if (dX && L->shared) {
    for (int s = 0; s < L->n_seg; s++)
      n += dX[s] ? 1 : 0;
  } else if (dX && dX[0]) {
    n += 1;
  }
  return n;
}

static void cpu_destroy(sac_backend_t *be) {
  for (int i = 0; i < SAC_BACKEND_FETCH_SLOTS; i++)
    free(impl_of(be)->fetch_host[i]);
  free(impl_of(be)->marks);
  cpu_pool_destroy(pool_of(be));
  free(((cpu_impl_t *)be->impl)->join);
  free(((cpu_impl_t *)be->impl)->partial);
  free(be->impl);
  free(be);
}

/* The elementwise passes are memory-bound loops over (B, width); restrict lets the
 * compiler vectorise them, and target_clones picks AVX2 code where the CPU has it
 * without making the binary require it. */
#define SAC_VEC __attribute__((target_clones("avx2", "default")))

/* y = act(y + b) row by row over (B, width) */
SAC_VEC static void bias_act(float *restrict Y, int ldy, const float *restrict b, int B, int width,
                             sac_act_t act) {
  for (int r = 0; r < B; r++) {
    float *restrict y = Y + (size_t)r * ldy;
    if (act == SAC_ACT_RELU) {
      for (int j = 0; j < width; j++) {
        float v = y[j] + b[j];
        y[j] = v > 0.0f ? v : 0.0f;
      }
    } else if (act == SAC_ACT_TANH) {
      for (int j = 0; j < width; j++)
        y[j] = tanhf(y[j] + b[j]);
    } else {
      for (int j = 0; j < width; j++)
        y[j] += b[j];
    }
  }
}

/* d = d * act'(y) in place; db = column sums of the result when db is non-NULL */
SAC_VEC static void act_bwd_colsum(float *restrict dY, const float *restrict Y, int ldy, int B, int width,
                                   sac_act_t act, float *restrict db) {
  if (db)
    memset(db, 0, sizeof(float) * (size_t)width);
  for (int r = 0; r < B; r++) {
    float *restrict d = dY + (size_t)r * ldy;
    const float *restrict y = Y + (size_t)r * ldy;
    if (act == SAC_ACT_RELU)
      for (int j = 0; j < width; j++)
        d[j] = y[j] > 0.0f ? d[j] : 0.0f;
    else if (act == SAC_ACT_TANH)
      for (int j = 0; j < width; j++)
        d[j] *= 1.0f - y[j] * y[j];
    if (db)
      for (int j = 0; j < width; j++)
        db[j] += d[j];
  }
}

/* d += s over n floats */
SAC_VEC static void add_to(float *restrict d, const float *restrict s, size_t n) {
  for (size_t i = 0; i < n; i++)
    d[i] += s[i];
}

/* OpenBLAS's AVX-512 builds multiply a product of at most 100^3 multiply-adds with their
 * "small matrix" kernels (no packing, no separate beta pass); above that the general path
 * runs, which on the layers that read the observation (a side of 17-23) reached 65-85
 * GFLOP/s where the same product in two halves reached 98-108 (one thread, the cheetah
 * shapes, warm buffers: the critics' first layer 35 -> 29 us, its weight gradient 44 -> 28
 * us). So a product with a side of at most 64 and over 100^3 multiply-adds is cut along its
 * longer output side into equal pieces of 16-multiples under that size (issue 17). Wider
 * products (the hidden layers) are left whole: cut to that size they slow down. */
#define GEMM_SMALL_MACS 1000000.0
#define GEMM_SMALL_SIDE 64

/* Pieces of `len` units (rows or columns) of `macs_per_unit` multiply-adds each: the fewest
 * equal 16-multiples under GEMM_SMALL_MACS. 0 (do not cut) where one piece would be the
 * whole, or where even 16 units are over the size (a long inner side: 16 x 32 x 4096). */
static int gemm_pieces(int len, double macs_per_unit, int *chunk) {
  if (16.0 * macs_per_unit > GEMM_SMALL_MACS)
    return 0;
  for (int pieces = (int)ceil(macs_per_unit * len / GEMM_SMALL_MACS);; pieces++) {
    const int c = ((len + pieces - 1) / pieces + 15) & ~15; /* >= 16, so the loop ends there */
    if ((double)c * macs_per_unit <= GEMM_SMALL_MACS) {
      *chunk = c;
      return c < len;
    }
  }
}

/* Row-major C = op(A) op(B) + beta C with alpha 1, cut as above. */
static void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, const float *A, int lda,
                 const float *B, int ldb, float beta, float *C, int ldc) {
  if (n == 1) { /* one column: a matrix-vector product (the critics' one-wide last layer) */
    const int am = ta == CblasNoTrans ? m : k, an = ta == CblasNoTrans ? k : m;
    cblas_sgemv(CblasRowMajor, ta, am, an, 1.0f, A, lda, B, tb == CblasNoTrans ? ldb : 1, beta, C, ldc);
    return;
  }
  const int side = m < n ? (m < k ? m : k) : (n < k ? n : k);
  int chunk;
  if (side <= GEMM_SMALL_SIDE && (double)m * n * k > GEMM_SMALL_MACS) {
    if (m >= n && gemm_pieces(m, (double)n * k, &chunk)) {
      for (int r0 = 0; r0 < m; r0 += chunk) {
        const int rows = m - r0 < chunk ? m - r0 : chunk;
        const float *Ar = ta == CblasNoTrans ? A + (size_t)r0 * lda : A + r0;
        cblas_sgemm(CblasRowMajor, ta, tb, rows, n, k, 1.0f, Ar, lda, B, ldb, beta, C + (size_t)r0 * ldc,
                    ldc);
      }
      return;
    }
    if (m < n && gemm_pieces(n, (double)m * k, &chunk)) {
      for (int c0 = 0; c0 < n; c0 += chunk) {
        const int cols = n - c0 < chunk ? n - c0 : chunk;
        const float *Bc = tb == CblasNoTrans ? B + c0 : B + (size_t)c0 * ldb;
        cblas_sgemm(CblasRowMajor, ta, tb, m, cols, k, 1.0f, A, lda, Bc, ldb, beta, C + c0, ldc);
      }
      return;
    }
  }
  cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, A, lda, B, ldb, beta, C, ldc);
}

/* C (+)= op(A) op(B): the own GEMM where it takes the product, else OpenBLAS. */
static void mul(int ta, int tb, int m, int n, int k, const float *A, int lda, const float *B, int ldb,
                int add, float *C, int ldc) {
  if (!sac_gemm_own(ta, tb, m, n, k, A, lda, B, ldb, add, C, ldc, NULL, SAC_ACT_NONE))
    gemm(ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, A, lda, B, ldb,
         add ? 1.0f : 0.0f, C, ldc);
}

/* Where member k's block starts in a K-member operand of `width` columns per member and
 * member stride ms (sac_seg_t: 0, side by side). */
static size_t member_at(int k, int width, size_t ms) { return (size_t)k * (ms ? ms : (size_t)width); }

/* Input segment s of layer L as member k reads it: its width and its first row (its
 * gradient dX lies the same way). */
static int seg_width(const sac_linear_t *L, int s) { return L->shared ? L->seg[s].n : L->n_in; }
static size_t in_at(const sac_linear_t *L, int k) {
  return L->shared ? 0 : member_at(k, L->n_in, L->seg[0].ms);
}
static const float *seg_input(const sac_linear_t *L, int s, int k) { return L->seg[s].p + in_at(L, k); }

/* Member k's first output column (Y, dY). */
static size_t out_at(const sac_linear_t *L, int k) { return member_at(k, L->n_out, L->out_ms); }

/* One unit of a layer's forward: member k, rows [r0, r1): Y_k = act(X_k W_k + b_k). The own
 * GEMM (gemm_own.h) applies the bias and activation to each tile of Y as it stores it;
 * where OpenBLAS multiplies a segment instead, they are applied in a pass of their own
 * while that block of Y is still in cache. */
static void fwd_block(const sac_linear_t *L, float *Y, int ldy, int k, int r0, int r1) {
  const size_t wsz = (size_t)L->n_in * L->n_out;
  const float *Wk = L->W + k * wsz;
  const float *bk = L->b + (size_t)k * L->n_out;
  float *Yk = Y + (size_t)r0 * ldy + out_at(L, k);
  const int rows = r1 - r0;
  if (rows <= 0)
    return;
  const int n_seg = L->shared ? L->n_seg : 1;
  int fused = 1; /* every segment so far by the own GEMM: the last one adds b and act */
  int row = 0;
  for (int s = 0; s < n_seg; s++) {
    const int n = seg_width(L, s), ld = L->seg[s].ld;
    const float *X = seg_input(L, s, k) + (size_t)r0 * ld;
    const int last = s == n_seg - 1;
    const float *W = Wk + (size_t)row * L->n_out;
    if (!sac_gemm_own(0, 0, rows, L->n_out, n, X, ld, W, L->n_out, s > 0, Yk, ldy, last && fused ? bk : NULL,
                      last && fused ? L->act : SAC_ACT_NONE)) {
      gemm(CblasNoTrans, CblasNoTrans, rows, L->n_out, n, X, ld, W, L->n_out, s == 0 ? 0.0f : 1.0f, Yk, ldy);
      fused = 0;
    }
    row += n;
  }
  if (!fused)
    bias_act(Yk, ldy, bk, rows, L->n_out, L->act);
}

typedef struct {
  const sac_linear_t *L;
  float *Y;
  int ldy;
} fwd_job_t;

/* Units are (member, row chunk): with K >= parts whole members, else each member's rows
 * in parts / K chunks of 16 rows' granularity; one member's in 2 parts chunks. Part p takes
 * units p, p + parts, ...: of one member's rows, chunk p of each half. The policy runs
 * forward on [s; s'] (2B rows) and backward on s, its B rows split in parts chunks
 * (bwd_batch_job): so each core's backward rows are ones it made, in its cache. */
static void fwd_job(void *arg, int part, int parts) {
  const fwd_job_t *j = arg;
  const sac_linear_t *L = j->L;
  int R = L->K >= parts ? 1 : L->K == 1 ? 2 * parts : parts / L->K;
  for (int u = part; u < L->K * R; u += parts) {
    size_t r0, r1;
    split_range((size_t)L->B, u % R, R, 16, &r0, &r1);
    fwd_block(L, j->Y, j->ldy, u / R, (int)r0, (int)r1);
  }
}

/* Below this many multiply-adds (about a microsecond of sgemm) a layer runs on the caller
 * alone. A spinning worker picks an op up within a microsecond, so layers down to this
 * size gain from the split: the critics' 256 -> 1 outputs and the policy's 256 -> 2A
 * output, which ran on the caller alone while the worker waited, took 0.68 -> 0.70 of the
 * ceiling at the median of the bench's slices (issue 17). */
#define CPU_PAR_MIN_MACS (1u << 16)

static cpu_pool_t *layer_pool(sac_backend_t *be, const sac_linear_t *L) {
  size_t n_in = L->shared ? (size_t)L->seg[0].n + (L->n_seg > 1 ? (size_t)L->seg[1].n : 0) : (size_t)L->n_in;
  return (size_t)L->B * n_in * (size_t)L->n_out * (size_t)L->K >= CPU_PAR_MIN_MACS ? pool_of(be) : NULL;
}

/* The critics' first layer reads [obs | action] as two segments: as such it is two GEMMs
 * per member, one with k = A (6 for cheetah), each a pass over the member's (B, n_out)
 * output, and it ran at a third of the hidden layers' GFLOP/s. As one (B, n_in) block it
 * is one GEMM with k = n_in (issue 17): segments already side by side in memory
 * (sac_segs_adjacent: sac.c's joined critic input) are read in place, others are copied
 * into one block first (B * n_in floats: microseconds): one GEMM on the same values either
 * way. Returns L itself where there is nothing to join or the
 * block cannot be had (then the two-GEMM path runs: slower, the same result). */
static const sac_linear_t *joined(sac_backend_t *be, const sac_linear_t *L, sac_linear_t *tmp) {
  if (!L->shared || L->n_seg < 2)
    return L;
  cpu_impl_t *impl = be->impl;
  const int n0 = L->seg[0].n, n1 = L->seg[1].n, n = n0 + n1;
  if (sac_segs_adjacent(L)) {
    *tmp = *L;
    tmp->n_seg = 1;
    tmp->seg[0] = (sac_seg_t){L->seg[0].p, L->seg[0].ld, n, 0};
    tmp->seg[1] = (sac_seg_t){NULL, 0, 0, 0};
    return tmp;
  }
  const size_t need = (size_t)L->B * (size_t)n;
  if (need > impl->join_n) {
    float *p = realloc(impl->join, need * sizeof(float));
    if (!p)
      return L;
    impl->join = p, impl->join_n = need;
  }
  for (int r = 0; r < L->B; r++) {
    float *dst = impl->join + (size_t)r * n;
    memcpy(dst, L->seg[0].p + (size_t)r * L->seg[0].ld, sizeof(float) * (size_t)n0);
    memcpy(dst + n0, L->seg[1].p + (size_t)r * L->seg[1].ld, sizeof(float) * (size_t)n1);
  }
  *tmp = *L;
  tmp->n_seg = 1;
  tmp->seg[0] = (sac_seg_t){impl->join, n, n, 0};
  tmp->seg[1] = (sac_seg_t){NULL, 0, 0, 0};
  return tmp;
}

static void cpu_linear_fwd(sac_backend_t *be, const sac_linear_t *L, float *Y, int ldy) {
  impl_of(be)->launches += linear_fwd_launches(L);
  sac_linear_t tmp;
  L = joined(be, L, &tmp);
  fwd_job_t j = {L, Y, ldy};
  cpu_run(layer_pool(be, L), fwd_job, &j);
}

typedef struct {
  const sac_linear_t *L;  /* as the input gradient reads it (its segments) */
  const sac_linear_t *Lw; /* as the weight gradient reads it (joined: one input block) */
  float *dY, *dW, *db;
  const float *Y;
  int ldy;
  float **dX;
  const int *ldx;
  int act_in_rows; /* 1: the rows job makes L's activation backward on its rows of dY first (no
                    * cols job: neither dW nor db is asked for) */
  sac_act_t below; /* the rows job's last step: dX = dX * below'(X) on its rows (linear_bwd_act) */
  float *partial;  /* bwd_batch_job: part p > 0's weight and bias gradients, at (p - 1) * (n_in *
                    * n_out + n_out) */
  int n_shares;    /* of them: the parts but the first */
  float *below_db; /* the rows job's, by members: member k's column sums of dX at k * n_in */
  float *shares;   /* a shared input's gradient by members: member k > 0's, (B, n) per segment with
                    * a gradient, at (k - 1) * B * (n_0 + n_1), summed by sum_member_shares */
} bwd_job_t;

/* The activation backward, the bias gradient and the weight gradient of columns [c0, c1) of
 * member k over rows [lo, hi) of the batch (dW_k[:, c] = X_k[lo:hi]^T dY_k[lo:hi, c]), into
 * dWk and dbk (each at column c0; NULL: not asked for). */
static void bwd_wgrad(const bwd_job_t *j, int k, int c0, int c1, size_t lo, size_t hi, float *dWk,
                      float *dbk) {
  const sac_linear_t *L = j->Lw;
  const int w = c1 - c0, rows = (int)(hi - lo);
  if (w <= 0)
    return;
  const size_t col = out_at(L, k) + (size_t)c0, at = lo * (size_t)j->ldy + col;
  float *dY = j->dY + at;
  const float *Y = j->Y + at;
  const int n_seg = L->shared ? L->n_seg : 1;
  /* the activation backward and db: made by the first segment's product on its way where
   * the own GEMM takes it, else in a pass of their own before any product */
  int s = 0;
  if (dWk && sac_gemm_own_wgrad(seg_width(L, 0), w, rows, seg_input(L, 0, k) + lo * (size_t)L->seg[0].ld,
                                L->seg[0].ld, dY, Y, j->ldy, L->act, dbk, dWk, L->n_out))
    s = 1;
  else
    act_bwd_colsum(dY, Y, j->ldy, rows, w, L->act, dbk);
  if (!dWk)
    return;
  for (int row = s ? seg_width(L, 0) : 0; s < n_seg; row += seg_width(L, s), s++)
    mul(1, 0, seg_width(L, s), w, rows, seg_input(L, s, k) + lo * (size_t)L->seg[s].ld, L->seg[s].ld, dY,
        j->ldy, 0, dWk + (size_t)row * L->n_out, L->n_out);
}

/* Phase 1, by output columns: bwd_wgrad of columns [c0, c1) of member k, every row. */
static void bwd_cols(const bwd_job_t *j, int k, int c0, int c1) {
  const sac_linear_t *L = j->Lw;
  const size_t wsz = (size_t)L->n_in * L->n_out;
  bwd_wgrad(j, k, c0, c1, 0, (size_t)L->B, j->dW ? j->dW + k * wsz + c0 : NULL,
            j->db ? j->db + (size_t)k * L->n_out + (size_t)c0 : NULL);
}

static void bwd_cols_job(void *arg, int part, int parts) {
  const bwd_job_t *j = arg;
  const sac_linear_t *L = j->Lw;
  int R = L->K >= parts ? 1 : parts / L->K;
  for (int u = part; u < L->K * R; u += parts) {
    size_t c0, c1;
    /* 16-column chunks, unless that leaves a part nothing (the policy's 2A outputs) */
    split_range((size_t)L->n_out, u % R, R, L->n_out >= 16 * R ? 16 : 1, &c0, &c1);
    bwd_cols(j, u / R, (int)c0, (int)c1);
  }
}

/* A one-wide output's input gradient, an outer product, in one pass with the layer below's
 * activation backward and column sums: d[r][c] = dy[r * ldy] w[c] below'(x[r][c]) over
 * (rows, width), db (non-NULL) the column sums in row order. The same values as the product
 * and the passes after it (one rounding: the product). */
SAC_VEC static void out1_bwd(const float *restrict dy, int ldy, const float *restrict w,
                             const float *restrict x, int ldx, float *restrict d, int ldd, int rows,
                             int width, sac_act_t below, float *restrict db) {
  if (db)
    memset(db, 0, sizeof(float) * (size_t)width);
  for (int r = 0; r < rows; r++) {
    const float g = dy[(size_t)r * ldy];
    const float *restrict xr = x + (size_t)r * ldx;
    float *restrict dr = d + (size_t)r * ldd;
    for (int c = 0; c < width; c++)
      dr[c] = g * w[c];
    if (below == SAC_ACT_RELU) /* a loop of its own: fused into the product's, it does not vectorise */
      for (int c = 0; c < width; c++)
        dr[c] = xr[c] > 0.0f ? dr[c] : 0.0f;
    else if (below == SAC_ACT_TANH)
      for (int c = 0; c < width; c++)
        dr[c] *= 1.0f - xr[c] * xr[c];
    if (db)
      for (int c = 0; c < width; c++)
        db[c] += dr[c];
  }
}

/* Member k's (k > 0) share of segment s's input gradient, (B, n_s) */
static float *share_at(const bwd_job_t *j, int k, int s) {
  const sac_linear_t *L = j->L;
  const size_t per = (size_t)L->B * (size_t)(L->seg[0].n + (L->n_seg > 1 ? L->seg[1].n : 0));
  return j->shares + (size_t)(k - 1) * per + (s ? (size_t)L->B * (size_t)L->seg[0].n : 0);
}

/* Phase 2: the input gradient of members [k0, k1) on rows [lo, hi), summed over members
 * in order where they share an input; before a member's product, where act_in_rows, the
 * layer's activation backward on its rows of dY, and after it the layer below's on its
 * rows of dX: each while the rows are in this core's cache, in the job that reads or
 * writes them anyway. */
static void bwd_rows(const bwd_job_t *j, int k0, int k1, size_t lo, size_t hi) {
  const sac_linear_t *L = j->L;
  const int rows = (int)(hi - lo);
  if (rows <= 0)
    return;
  const size_t wsz = (size_t)L->n_in * L->n_out;
  for (int k = k0; k < k1; k++) {
    float *dYk = j->dY + lo * (size_t)j->ldy + out_at(L, k);
    if (is_out1(L) && j->dX[0]) { /* one pass, the layer below's steps included */
      out1_bwd(dYk, j->ldy, L->W + (size_t)k * L->n_in, L->seg[0].p + lo * (size_t)L->seg[0].ld + in_at(L, k),
               L->seg[0].ld, j->dX[0] + lo * (size_t)j->ldx[0] + in_at(L, k), j->ldx[0], rows, L->n_in,
               j->below, j->below_db ? j->below_db + (size_t)k * L->n_in : NULL);
      continue;
    }
    if (j->act_in_rows)
      act_bwd_colsum(dYk, j->Y + lo * (size_t)j->ldy + out_at(L, k), j->ldy, rows, L->n_out, L->act, NULL);
    const float *Wk = L->W + k * wsz;
    const int n_seg = L->shared ? L->n_seg : 1;
    int row = 0;
    for (int s = 0; s < n_seg; s++) {
      const int n = seg_width(L, s);
      const float *Ws = Wk + (size_t)row * L->n_out;
      row += n;
      if (!j->dX[s])
        continue;
      /* members add into one shared input's gradient (or, by members, member k > 0 writes
       * its share); each has its own block otherwise */
      if (j->shares && k > 0)
        mul(0, 1, rows, n, L->n_out, dYk, j->ldy, Ws, L->n_out, 0, share_at(j, k, s) + lo * (size_t)n, n);
      else
        mul(0, 1, rows, n, L->n_out, dYk, j->ldy, Ws, L->n_out, L->shared && k > 0,
            j->dX[s] + lo * (size_t)j->ldx[s] + in_at(L, k), j->ldx[s]);
    }
    if (j->below != SAC_ACT_NONE) /* not shared: one segment, the layer below's output */
      act_bwd_colsum(j->dX[0] + lo * (size_t)j->ldx[0] + in_at(L, k),
                     L->seg[0].p + lo * (size_t)L->seg[0].ld + in_at(L, k), j->ldx[0], rows, L->n_in,
                     j->below, NULL);
  }
}

/* With K >= parts members that do not share an input, or whose shares of a shared one are
 * summed after (shares), by members (part p takes members p, p + parts, ...: the ones its
 * thread made in the forward, still in its cache); else by rows, every member. */
static void bwd_rows_job(void *arg, int part, int parts) {
  const bwd_job_t *j = arg;
  const sac_linear_t *L = j->L;
  if ((!L->shared || j->shares) && L->K >= parts) {
    for (int k = part; k < L->K; k += parts)
      bwd_rows(j, k, k + 1, 0, (size_t)L->B);
    return;
  }
  size_t lo, hi;
  split_range((size_t)L->B, part, parts, 16, &lo, &hi);
  bwd_rows(j, 0, L->K, lo, hi);
}

/* One member (K = 1) by rows of the batch, in one job: part p's rows' share of the weight
 * and bias gradients (part 0's into dW and db, the others' into their blocks of `partial`,
 * summed by sum_partials_job), then the input gradient of the same rows, from the dY that
 * the first step left with the activation backward applied, in this core's cache. Its rows
 * of X and dY are the ones this core made (the forward and the layer above's input
 * gradient split by rows too); split by columns, each core read every row, half of them
 * from the other core's cache, and packed all of X. */
static void bwd_batch_job(void *arg, int part, int parts) {
  const bwd_job_t *j = arg;
  const sac_linear_t *L = j->Lw;
  const size_t wsz = (size_t)L->n_in * L->n_out;
  float *dW = j->dW, *db = j->db;
  if (part > 0) {
    dW = j->partial + (size_t)(part - 1) * (wsz + (size_t)L->n_out);
    db = j->db ? dW + wsz : NULL;
    dW = j->dW ? dW : NULL;
  }
  size_t lo, hi;
  split_range((size_t)L->B, part, parts, 16, &lo, &hi);
  if (hi > lo)
    bwd_wgrad(j, 0, 0, L->n_out, lo, hi, dW, db);
  else { /* no rows here: a zero share */
    if (dW)
      memset(dW, 0, sizeof(float) * wsz);
    if (db)
      memset(db, 0, sizeof(float) * (size_t)L->n_out);
  }
  if (j->dX[0] || (j->L->shared && j->L->n_seg > 1 && j->dX[1]))
    bwd_rows(j, 0, 1, lo, hi);
}

/* dW += the n_shares other parts' shares, in part order, split by elements; db on part 0
 * (alone, where there is no dW: the caller runs it as one part, no job for n_out sums). */
static void sum_partials_job(void *arg, int part, int parts) {
  const bwd_job_t *j = arg;
  const size_t n_out = (size_t)j->Lw->n_out, wsz = (size_t)j->Lw->n_in * n_out, stride = wsz + n_out;
  size_t lo, hi;
  split_range(wsz, part, parts, 16, &lo, &hi);
  for (int p = 1; p <= j->n_shares && j->dW; p++)
    add_to(j->dW + lo, j->partial + (size_t)(p - 1) * stride + lo, hi - lo);
  for (int p = 1; p <= j->n_shares && j->db && part == 0; p++)
    add_to(j->db, j->partial + (size_t)(p - 1) * stride + wsz, n_out);
}

/* The block of shares summed after a split job (impl->partial), at least n floats, or NULL
 * where it cannot be had. */
static float *partial_block(sac_backend_t *be, size_t n) {
  cpu_impl_t *impl = be->impl;
  if (n > impl->partial_n) {
    float *p = aligned_alloc(64, (n * sizeof(float) + 63) & ~(size_t)63);
    if (!p)
      return NULL;
    free(impl->partial);
    impl->partial = p, impl->partial_n = n;
  }
  return impl->partial;
}

/* The partial gradients' block for a one-member layer's backward by rows of the batch
 * (bwd_batch_job), or NULL where it does not apply: more members (split by members or
 * columns), one thread, or no memory (then the column split runs: the same sums in
 * another order). */
static float *batch_partials(sac_backend_t *be, const sac_linear_t *L, cpu_pool_t *pool, const float *dW,
                             const float *db) {
  if (L->K != 1 || !pool || pool->n < 2 || (!dW && !db))
    return NULL;
  float *p = partial_block(be, (size_t)(pool->n - 1) * ((size_t)L->n_in * L->n_out + (size_t)L->n_out));
  if (p)
    impl_of(be)->batch_splits++;
  return p;
}

/* The block for the members' shares of a shared input's gradient (bwd_job_t.shares), or
 * NULL where the rows job splits by rows: fewer members than parts, one thread, or no
 * memory (the same sums either way). By members, each core reads only the activations
 * and gradients it made (the critics' first layer in the actor step: split by rows, each
 * core read half its rows of both members from the other core's cache). */
static float *member_shares(sac_backend_t *be, const sac_linear_t *L, cpu_pool_t *pool) {
  if (!L->shared || !pool || pool->n < 2 || L->K < pool->n)
    return NULL;
  float *p = partial_block(be, (size_t)(L->K - 1) * (size_t)L->B *
                                   (size_t)(L->seg[0].n + (L->n_seg > 1 ? L->seg[1].n : 0)));
  if (p)
    impl_of(be)->member_splits++;
  return p;
}

/* dX_s += member k's share, k = 1, 2, ... in order: the sums the rows split makes. */
static void sum_member_shares(const bwd_job_t *j) {
  const sac_linear_t *L = j->L;
  for (int k = 1; k < L->K; k++)
    for (int s = 0; s < L->n_seg; s++) {
      if (!j->dX[s])
        continue;
      const int n = L->seg[s].n;
      const float *sh = share_at(j, k, s);
      for (int r = 0; r < L->B; r++)
        add_to(j->dX[s] + (size_t)r * j->ldx[s], sh + (size_t)r * n, (size_t)n);
    }
}

/* linear_bwd, then (below not NONE) the layer below's activation backward on dX, in the
 * rows job. Where only the input gradient is asked for, the layer's own activation
 * backward moves into the rows job too, and there is no cols job. A one-member layer runs
 * by rows of the batch (bwd_batch_job, then the shares summed). Returns 1 where the rows
 * job also made below_db (non-NULL), the layer below's bias gradient: a one-wide output
 * whose rows job runs by members; else 0, and the caller makes it. */
static int linear_bwd_below(sac_backend_t *be, const sac_linear_t *L, float *dY, const float *Y, int ldy,
                            float *dW, float *db, float *dX[2], const int ldx[2], sac_act_t below,
                            float *below_db) {
  float *nodx[2] = {NULL, NULL};
  const int noldx[2] = {0, 0};
  sac_linear_t tmp;
  cpu_pool_t *pool = layer_pool(be, L);
  /* the weight gradient from the joined input (one GEMM); the input gradient per segment,
   * into the caller's separate buffers */
  bwd_job_t j = {.L = L,
                 .Lw = dW ? joined(be, L, &tmp) : L,
                 .dY = dY,
                 .dW = dW,
                 .db = db,
                 .Y = Y,
                 .ldy = ldy,
                 .dX = dX ? dX : nodx,
                 .ldx = dX ? ldx : noldx,
                 .below = below};
  const int rows_job = j.dX[0] || (L->shared && L->n_seg > 1 && j.dX[1]);
  j.act_in_rows = rows_job && !dW && !db && L->act != SAC_ACT_NONE;
  if ((j.partial = batch_partials(be, L, pool, dW, db)) != NULL) {
    j.n_shares = pool->n - 1;
    cpu_run(pool, bwd_batch_job, &j);
    if (dW)
      cpu_run(pool, sum_partials_job, &j);
    else
      sum_partials_job(&j, 0, 1);
    return 0;
  }
  if (is_out1(L) && j.dX[0] && L->K >= (pool ? pool->n : 1))
    j.below_db = below_db;
  if (dW || db || (L->act != SAC_ACT_NONE && !rows_job))
    cpu_run(pool, bwd_cols_job, &j);
  if (rows_job && (j.shares = member_shares(be, L, pool)) != NULL) {
    cpu_run(pool, bwd_rows_job, &j);
    sum_member_shares(&j);
  } else if (rows_job) {
    cpu_run(pool, bwd_rows_job, &j);
  }
  return j.below_db != NULL;
}

static void cpu_linear_bwd(sac_backend_t *be, const sac_linear_t *L, float *dY, const float *Y, int ldy,
                           float *dW, float *db, float *dX[2], const int ldx[2]) {
  impl_of(be)->launches += linear_bwd_launches(L, dW, db, dX);
  linear_bwd_below(be, L, dY, Y, ldy, dW, db, dX, ldx, SAC_ACT_NONE, NULL);
}

typedef struct {
  float *out;
  size_t n;
  const uint32_t *key;
  uint64_t stream;
  uint32_t tag;
} normal_job_t;

/* Pairs a chunk of the noise makes at once: their uniforms, then the logarithms, sines
 * and cosines of the whole chunk (vmath.h: eight at a time where the CPU allows). */
#define NOISE_CHUNK 128

/* Pairs [lo, hi) of the counter-based stream (sac_philox_normal2's Box-Muller, its
 * functions taken a chunk at a time): any split gives the same numbers. */
static void normal_job(void *arg, int part, int parts) {
  const normal_job_t *j = arg;
  size_t lo, hi;
  split_range((j->n + 1) / 2, part, parts, 32, &lo, &hi);
  for (size_t p0 = lo; p0 < hi; p0 += NOISE_CHUNK) {
    const size_t m = hi - p0 < NOISE_CHUNK ? hi - p0 : NOISE_CHUNK;
    float u1[NOISE_CHUNK], t[NOISE_CHUNK], r[NOISE_CHUNK], c[NOISE_CHUNK], sn[NOISE_CHUNK];
    for (size_t q = 0; q < m; q++)
      sac_philox_box_muller_in(j->key, (uint32_t)(p0 + q), j->stream, j->tag, &u1[q], &t[q]);
    sac_vlogf(u1, r, m);
    for (size_t q = 0; q < m; q++)
      r[q] = sqrtf(-2.0f * r[q]);
    sac_vcosf(t, c, m);
    sac_vsinf(t, sn, m);
    for (size_t q = 0; q < m; q++) {
      const size_t p = p0 + q;
      j->out[2 * p] = r[q] * c[q];
      if (2 * p + 1 < j->n)
        j->out[2 * p + 1] = r[q] * sn[q];
    }
  }
}

/* Below this many elements of a row-wise pass (noise, the policy head) it runs on the
 * caller alone. */
#define CPU_PAR_MIN_ELEMS 1024u

static void cpu_normal(sac_backend_t *be, float *out, size_t n, const uint32_t key[2], uint64_t stream,
                       uint32_t tag) {
  impl_of(be)->launches++;
  normal_job_t j = {out, n, key, stream, tag};
  cpu_run(n >= CPU_PAR_MIN_ELEMS ? pool_of(be) : NULL, normal_job, &j);
}

#define HALF_LOG_2PI 0.91893853320467274178f
#define LOG2F_ 0.69314718055994530942f

static inline float clampf(float x, float lo, float hi) { return x < lo ? lo : (x > hi ? hi : x); }

typedef struct {
  const sac_head_hp_t *h;
  const float *P, *eps, *a, *da, *dlogp;
  float *a_out, *logp, *dP;
  int lda, ldda;
} head_job_t;

/* Elements of the head a chunk takes at once (vmath.h's functions run over a chunk). */
#define HEAD_CHUNK 256

/* The next element's row r and action i (element r A + i) */
static inline void head_step(size_t A, size_t *r, size_t *i) {
  if (++*i == A) {
    *i = 0;
    ++*r;
  }
}

/* Rows [lo, hi) of the head, in chunks of elements (row r's action i is element r A + i):
 * log std clamped and exponentiated, u = mu + std eps, a = tanh u, and log pi summed over
 * a row's actions in order, with the tanh correction 2 (log 2 - u - softplus(-2u)). */
static void head_fwd_job(void *arg, int part, int parts) {
  const head_job_t *j = arg;
  const sac_head_hp_t *h = j->h;
  const size_t A = (size_t)h->A;
  size_t lo, hi;
  split_range((size_t)h->B, part, parts, 16, &lo, &hi);
  float lp = 0.0f;
  for (size_t k0 = lo * A, end = hi * A; k0 < end; k0 += HEAD_CHUNK) {
    const size_t n = end - k0 < HEAD_CHUNK ? end - k0 : HEAD_CHUNK, r0 = k0 / A, i0 = k0 % A;
    const float *e = j->eps + k0;
    float ls[HEAD_CHUNK], sd[HEAD_CHUNK], u[HEAD_CHUNK], x[HEAD_CHUNK], sp[HEAD_CHUNK];
    for (size_t k = 0, r = r0, i = i0; k < n; k++, head_step(A, &r, &i))
      ls[k] = clampf(j->P[r * 2 * A + A + i], h->log_std_min, h->log_std_max);
    sac_vexpf(ls, sd, n);
    for (size_t k = 0, r = r0, i = i0; k < n; k++, head_step(A, &r, &i)) {
      u[k] = j->P[r * 2 * A + i] + sd[k] * e[k];
      x[k] = -2.0f * u[k];
    }
    sac_vtanhf(u, sd, n);
    sac_vexpf(x, sp, n);
    sac_vlog1pf(sp, sp, n);
    for (size_t k = 0, r = r0, i = i0; k < n; k++, head_step(A, &r, &i)) {
      j->a_out[r * j->lda + i] = sd[k];
      const float softplus = x[k] > 20.0f ? x[k] : sp[k];
      lp += -0.5f * e[k] * e[k] - ls[k] - HALF_LOG_2PI - 2.0f * (LOG2F_ - u[k] - softplus);
      if (i + 1 == A) {
        j->logp[r] = lp;
        lp = 0.0f;
      }
    }
  }
}

static void cpu_head_fwd(sac_backend_t *be, const sac_head_hp_t *h, const float *P, const float *eps,
                         float *a, int lda, float *logp) {
  impl_of(be)->launches++;
  head_job_t j = {.h = h, .P = P, .eps = eps, .a_out = a, .lda = lda, .logp = logp};
  cpu_run((size_t)h->B * h->A >= CPU_PAR_MIN_ELEMS ? pool_of(be) : NULL, head_fwd_job, &j);
}

static void head_bwd_job(void *arg, int part, int parts) {
  const head_job_t *j = arg;
  const sac_head_hp_t *h = j->h;
  const int A = h->A;
  size_t lo, hi;
  split_range((size_t)h->B, part, parts, 16, &lo, &hi);
  for (size_t r = lo; r < hi; r++) {
    const float *ls_raw = j->P + r * 2 * A + A;
    const float *e = j->eps + r * A;
    float *dmu = j->dP + r * 2 * A, *dls = dmu + A;
    for (int i = 0; i < A; i++) {
      float ai = j->a[r * j->lda + i];
      float g = j->da ? j->da[r * j->ldda + i] : 0.0f;
      /* d logp / du = 2 tanh(u) (from the stable tanh correction) */
      float du = g * (1.0f - ai * ai) + j->dlogp[r] * 2.0f * ai;
      dmu[i] = du;
      float raw = ls_raw[i];
      int inside = raw > h->log_std_min && raw < h->log_std_max;
      float ls = clampf(raw, h->log_std_min, h->log_std_max);
      dls[i] = inside ? du * expf(ls) * e[i] - j->dlogp[r] : 0.0f;
    }
  }
}

static void cpu_head_bwd(sac_backend_t *be, const sac_head_hp_t *h, const float *P, const float *eps,
                         const float *a, int lda, const float *da, int ldda, const float *dlogp, float *dP) {
  impl_of(be)->launches++;
  head_job_t j = {
      .h = h, .P = P, .eps = eps, .a = a, .lda = lda, .da = da, .ldda = ldda, .dlogp = dlogp, .dP = dP};
  cpu_run((size_t)h->B * h->A >= CPU_PAR_MIN_ELEMS ? pool_of(be) : NULL, head_bwd_job, &j);
}

static void cpu_critic_target(sac_backend_t *be, const sac_head_hp_t *h, const float *r, const float *term,
                              const float *qt, const float *logp_next, float *y) {
  impl_of(be)->launches++;
  const float alpha = expf(*h->log_alpha);
  for (int i = 0; i < h->B; i++) {
    float qmin = fminf(qt[2 * i], qt[2 * i + 1]);
    y[i] = r[i] + h->gamma * (1.0f - term[i]) * (qmin - alpha * logp_next[i]);
  }
}

static void cpu_critic_loss(sac_backend_t *be, const sac_head_hp_t *h, const float *q, const float *y,
                            const float *w, float *dq, float *td, float *stats) {
  impl_of(be)->launches++;
  const float invB = 1.0f / (float)h->B;
  double loss = 0.0, qsum = 0.0;
  for (int i = 0; i < h->B; i++) {
    float wi = w ? w[i] : 1.0f;
    float d1 = q[2 * i] - y[i], d2 = q[2 * i + 1] - y[i];
    loss += 0.5 * wi * ((double)d1 * d1 + (double)d2 * d2);
    dq[2 * i] = wi * d1 * invB;
    dq[2 * i + 1] = wi * d2 * invB;
    td[i] = fabsf(fminf(q[2 * i], q[2 * i + 1]) - y[i]);
    qsum += q[2 * i];
  }
  stats[0] = (float)(loss / h->B);
  stats[1] = (float)(qsum / h->B);
}

static void cpu_actor_loss(sac_backend_t *be, const sac_head_hp_t *h, const float *q, const float *logp,
                           float *dq, float *dlogp, float *stats) {
  impl_of(be)->launches++;
  const float alpha = expf(*h->log_alpha), invB = 1.0f / (float)h->B;
  double loss = 0.0, ent = 0.0;
  for (int i = 0; i < h->B; i++) {
    int first = q[2 * i] <= q[2 * i + 1];
    float qmin = first ? q[2 * i] : q[2 * i + 1];
    loss += (double)alpha * logp[i] - qmin;
    ent -= logp[i];
    dq[2 * i] = first ? -invB : 0.0f;
    dq[2 * i + 1] = first ? 0.0f : -invB;
    dlogp[i] = alpha * invB;
  }
  stats[0] = (float)(loss / h->B);
  stats[1] = (float)(ent / h->B);
}

static void cpu_alpha_loss(sac_backend_t *be, const sac_head_hp_t *h, const float *logp, float *grad,
                           float *stats) {
  impl_of(be)->launches++;
  double s = 0.0;
  for (int i = 0; i < h->B; i++)
    s += (double)logp[i] + h->target_entropy;
  float mean = (float)(s / h->B);
  grad[0] = -mean;
  stats[0] = -*h->log_alpha * mean;
}

SAC_VEC static void adam_loop(float *restrict p, const float *restrict g, float *restrict m,
                              float *restrict v, size_t n, float b1, float b2, float step, float sqrt_bc2,
                              float eps) {
  for (size_t i = 0; i < n; i++) {
    float mi = b1 * m[i] + (1.0f - b1) * g[i];
    float vi = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
    m[i] = mi;
    v[i] = vi;
    p[i] -= step * mi / (sqrtf(vi) / sqrt_bc2 + eps);
  }
}

typedef struct {
  float *p, *m, *v;
  const float *g;
  size_t n;
  float b1, b2, step, sqrt_bc2, eps;
} adam_job_t;

/* below this many parameters a pass is not worth splitting */
#define CPU_PAR_MIN_N (1u << 13)

/* The first moment of a parameter whose gradient stays 0 (a weight into or out of a unit
 * that no longer fires) decays by beta1 each step down through float's subnormal range,
 * below 1.2e-38, where each multiply-add on it takes a microcode assist: in the cheetah
 * bench about a thousand of the critics' moments were there at a time, and their Adam
 * step took 97-109 us where it took 50 with them flushed (2-core AVX-512 VM). So the loop
 * runs with subnormals flushed to zero (x86's FTZ and DAZ, the thread's mode restored
 * after): such a moment becomes 0 some 150 steps early, and its parameter's step, about
 * 1e-38 of lr, is 0 (test_backend_cpu's adam_flushes_subnormal_moments_to_zero). */
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define MXCSR_FTZ_DAZ 0x8040u
static unsigned flush_subnormals_begin(void) {
  const unsigned was = _mm_getcsr();
  _mm_setcsr(was | MXCSR_FTZ_DAZ);
  return was;
}
static void flush_subnormals_end(unsigned was) { _mm_setcsr(was); }
#else
static unsigned flush_subnormals_begin(void) { return 0; }
static void flush_subnormals_end(unsigned was) { (void)was; }
#endif

static void adam_job(void *arg, int part, int parts) {
  const adam_job_t *a = arg;
  size_t lo, hi;
  split_range(a->n, part, parts, 64, &lo, &hi);
  if (hi <= lo)
    return;
  const unsigned mode = flush_subnormals_begin();
  adam_loop(a->p + lo, a->g + lo, a->m + lo, a->v + lo, hi - lo, a->b1, a->b2, a->step, a->sqrt_bc2, a->eps);
  flush_subnormals_end(mode);
}

static void cpu_adam(sac_backend_t *be, float *p, const float *g, float *m, float *v, size_t n,
                     const sac_adam_hp_t *hp, float *t) {
  impl_of(be)->launches++;
  *t += 1.0f;
  const float b1 = hp->beta1, b2 = hp->beta2;
  const float bc1 = 1.0f - powf(b1, *t), bc2 = 1.0f - powf(b2, *t);
  adam_job_t a = {p, m, v, g, n, b1, b2, hp->lr / bc1, sqrtf(bc2), hp->eps};
  cpu_run(n >= CPU_PAR_MIN_N ? pool_of(be) : NULL, adam_job, &a);
}

SAC_VEC static void polyak_loop(float *restrict tgt, const float *restrict src, size_t n, float tau) {
  const float keep = 1.0f - tau;
  for (size_t i = 0; i < n; i++)
    tgt[i] = keep * tgt[i] + tau * src[i];
}

typedef struct {
  float *tgt;
  const float *src;
  size_t n;
  float tau;
} polyak_job_t;

static void polyak_job(void *arg, int part, int parts) {
  const polyak_job_t *a = arg;
  size_t lo, hi;
  split_range(a->n, part, parts, 64, &lo, &hi);
  if (hi > lo)
    polyak_loop(a->tgt + lo, a->src + lo, hi - lo, a->tau);
}

static void cpu_polyak(sac_backend_t *be, float *tgt, const float *src, size_t n, float tau) {
  impl_of(be)->launches++;
  polyak_job_t a = {tgt, src, n, tau};
  cpu_run(n >= CPU_PAR_MIN_N ? pool_of(be) : NULL, polyak_job, &a);
}

/* Staging is a plain copy here (the ops run synchronously, so there is nothing to
 * overlap), but it is the path the learner service and --mode local take on every
 * backend: every CPU test runs it. */
static int cpu_stage_commit(sac_backend_t *be) {
  cpu_impl_t *im = impl_of(be);
  if (im->staged) { /* the cuda backend's scatter of the staged parts */
    im->launches++;
    im->batches++;
    im->host_copies += im->staged_copied ? 2 : 1;
  }
  im->staged = im->staged_copied = 0;
  return 0;
}

/* The loss guard's verdict (adam_polyak): 1 when guard[i] is NaN or Inf for a bit i of mask. */
static int guard_tripped(const float *guard, unsigned mask) {
  if (!guard)
    return 0;
  for (unsigned i = 0; i < 32; i++)
    if ((mask >> i & 1u) && !isfinite(guard[i]))
      return 1;
  return 0;
}

/* The fused Adam + Polyak tail: here simply the unfused ops in their order (a CPU has no
 * launch to save); it exists so sac.c runs the fused path on every backend and the cuda
 * kernel has a reference to be tested against. The guard is read when the op runs (here:
 * now, in order with the ops before it), as the cuda kernel reads it. */
static void cpu_adam_polyak(sac_backend_t *be, const sac_adam_group_t *g, int n_groups, float *tgt,
                            const float *src, size_t n_polyak, float tau, const float *guard,
                            unsigned guard_mask) {
  /* through the table: a wrapper of these ops (test_dp.c's fp16 emulation) stays in force;
   * counted as the one launch it is on the cuda backend */
  const uint64_t l0 = impl_of(be)->launches;
  if (guard_tripped(guard, guard_mask)) {
    impl_of(be)->launches = l0 + 1;
    return;
  }
  for (int i = 0; i < n_groups; i++)
    be->ops->adam(be, g[i].p, g[i].g, g[i].m, g[i].v, g[i].n, &g[i].hp, g[i].t);
  if (n_polyak)
    be->ops->polyak(be, tgt, src, n_polyak, tau);
  impl_of(be)->launches = l0 + 1;
}

/* The fused noise of both halves: the two ops, through the table. */
static void cpu_normal2(sac_backend_t *be, float *out, size_t n, const uint32_t key[2], uint64_t stream,
                        uint32_t tag0, uint32_t tag1) {
  const uint64_t l0 = impl_of(be)->launches;
  be->ops->normal(be, out, n, key, stream, tag0);
  be->ops->normal(be, out + n, n, key, stream, tag1);
  impl_of(be)->launches = l0 + 1;
}

/* The fused actor + alpha loss: the two ops in order, through the table (as above). */
static void cpu_actor_alpha_loss(sac_backend_t *be, const sac_head_hp_t *h, const float *q, const float *logp,
                                 float *dq, float *dlogp, float *stats_pi, float *grad_alpha,
                                 float *stats_alpha) {
  const uint64_t l0 = impl_of(be)->launches;
  be->ops->actor_loss(be, h, q, logp, dq, dlogp, stats_pi);
  be->ops->alpha_loss(be, h, logp, grad_alpha, stats_alpha);
  impl_of(be)->launches = l0 + 1;
}

/* The fused critic output: the critics' last layer, then the op q->then names, through
 * the table (as above); one launch on the cuda backend (k_out1_head). */
static void cpu_q_head(sac_backend_t *be, const sac_linear_t *L, float *q, const sac_head_hp_t *h,
                       const sac_q_head_t *a) {
  const uint64_t l0 = impl_of(be)->launches;
  be->ops->linear_fwd(be, L, q, 2);
  switch (a->then) {
  case SAC_Q_TARGET:
    be->ops->critic_target(be, h, a->r, a->term, q, a->logp, a->y);
    break;
  case SAC_Q_CRITIC_LOSS:
    be->ops->critic_loss(be, h, q, a->y, a->w, a->dq, a->td, a->stats);
    break;
  default:
    be->ops->actor_alpha_loss(be, h, q, a->logp, a->dq, a->dlogp, a->stats, a->grad_alpha, a->stats_alpha);
    break;
  }
  impl_of(be)->launches = l0 + 1;
}

/* Row copies (sac_copy_t) */
static void copy_rows(const sac_copy_t *c) {
  for (int r = 0; r < c->rows; r++)
    memcpy(c->dst + (size_t)r * c->ldd, c->src + (size_t)r * c->lds, sizeof(float) * (size_t)c->cols);
}

/* The fused policy output: the noise, the actor's last layer and the head, through the
 * table (as above), then the copies; one launch on the cuda backend (k_policy_fwd). */
static void cpu_policy_fwd(sac_backend_t *be, const sac_linear_t *L, float *P, const sac_head_hp_t *h,
                           const sac_policy_fwd_t *a) {
  assert(!L->shared && L->K == 1 && L->act == SAC_ACT_NONE && L->n_out == 2 * h->A && L->B == h->B &&
         h->B % 2 == 0 && a->n_copy >= 0 && a->n_copy <= SAC_MAX_COPIES);
  const uint64_t l0 = impl_of(be)->launches;
  be->ops->normal2(be, a->eps, (size_t)(h->B / 2) * (size_t)h->A, a->key, a->stream, a->tag0, a->tag1);
  be->ops->linear_fwd(be, L, P, 2 * h->A);
  be->ops->head_fwd(be, h, P, a->eps, a->a, a->lda, a->logp);
  for (int i = 0; i < a->n_copy; i++)
    copy_rows(&a->copy[i]);
  impl_of(be)->launches = l0 + 1;
}

/* linear_bwd of L with the one input gradient dX and the layer below's activation
 * backward on dX in its rows job, then, where asked for, the layer below's bias
 * gradient: the cols job of a stand-in for that layer with only its bias gradient and no
 * activation (the column sums of dX). */
static void bwd_then_below(sac_backend_t *be, const sac_linear_t *L, float *dY, const float *Y, int ldy,
                           float *dW, float *db, float *dX, int ldx, const sac_below_t *below) {
  assert(!L->shared && L->n_seg == 1 && dX && ldx == L->seg[0].ld);
  float *dxs[2] = {dX, NULL};
  const int lds[2] = {ldx, 0};
  if (linear_bwd_below(be, L, dY, Y, ldy, dW, db, dxs, lds, below->act, below->db) || !below->db)
    return;
  sac_linear_t lb = {.B = L->B,
                     .n_in = L->n_in,
                     .n_out = L->n_in,
                     .K = L->K,
                     .n_seg = 1,
                     .act = SAC_ACT_NONE,
                     .out_ms = L->seg[0].ms};
  lb.seg[0] = L->seg[0];
  linear_bwd_below(be, &lb, dX, L->seg[0].p, ldx, NULL, below->db, NULL, NULL, SAC_ACT_NONE, NULL);
}

/* What the cuda backend's linear_bwd_act launches: one kernel for the critics' one-wide
 * last layer (k_out1_bwd), else linear_bwd's launches and the activation/bias kernel. */
static uint64_t linear_bwd_act_launches(const sac_linear_t *L, const float *dW, const float *db, float *dX,
                                        const sac_below_t *below) {
  if (is_out1(L))
    return 1;
  float *dxs[2] = {dX, NULL};
  return linear_bwd_launches(L, dW, db, dxs) + (below->act != SAC_ACT_NONE || below->db ? 1 : 0);
}

static void cpu_linear_bwd_act(sac_backend_t *be, const sac_linear_t *L, float *dY, const float *Y, int ldy,
                               float *dW, float *db, float *dX, int ldx, const sac_below_t *below) {
  const uint64_t l0 = impl_of(be)->launches;
  bwd_then_below(be, L, dY, Y, ldy, dW, db, dX, ldx, below);
  impl_of(be)->launches = l0 + linear_bwd_act_launches(L, dW, db, dX, below);
}

/* The fused policy backward: head_bwd, then the last layer's backward and the layer
 * below's activation backward, through the table; one launch on the cuda backend
 * (k_policy_bwd) up to SAC_POLICY_BWD_MAX_ACT, else its ops. */
static void cpu_policy_bwd(sac_backend_t *be, const sac_head_hp_t *h, const float *P, const float *eps,
                           const float *a, int lda, const float *da, int ldda, const float *dlogp, float *dP,
                           const sac_linear_t *L, float *dW, float *db, float *dX, int ldx,
                           const sac_below_t *below) {
  assert(!L->shared && L->K == 1 && L->act == SAC_ACT_NONE && L->n_out == 2 * h->A && L->B == h->B);
  const uint64_t l0 = impl_of(be)->launches;
  be->ops->head_bwd(be, h, P, eps, a, lda, da, ldda, dlogp, dP);
  bwd_then_below(be, L, dP, P, 2 * h->A, dW, db, dX, ldx, below);
  impl_of(be)->launches =
      l0 + (h->A <= SAC_POLICY_BWD_MAX_ACT ? 1 : 1 + linear_bwd_act_launches(L, dW, db, dX, below));
}

/* A row of a multiple of 64 floats (256 bytes) is padded by one cache line: the own GEMM
 * reads up to 12 rows of an operand side by side, and at a stride of 1 or 2 KiB they map
 * to 4 or 2 of the L1's 64 sets. One thread, 256 x 256 x 256, ld 256 -> 272: the weight
 * gradient 380 -> 364 us; ld 512 -> 528: the forward 375 -> 362 us, the weight gradient
 * 389 -> 366 us (the same sums: the results do not change). */
static int cpu_act_ld(sac_backend_t *be, int width) {
  (void)be;
  return width % 64 == 0 ? width + 16 : width;
}

/* The twin critics' members go to different threads (fwd_job, bwd_cols_job), each
 * writing its member's block of a hidden activation; with the members side by side in
 * each row, the two threads wrote the two halves of every page and the next op read its
 * half at a third of the speed (two threads, each a 256 x 256 x 256 forward into its
 * member's columns of (256, 528) rows, then a sgemv over them: 11-12 us where it took
 * 4 us with each member's rows in a block of its own, on the 2-core AVX-512 VM). */
static int cpu_act_members_apart(sac_backend_t *be) {
  (void)be;
  return 1;
}

/* The pool's counts: jobs split, jobs run on the caller alone because the workers were
 * not getting cores, and parts the caller ran for a worker that had not started them. */
static int cpu_get_metric(sac_backend_t *be, const char *key, double *out) {
  if (strcmp(key, "blocking_syncs") == 0)
    return *out = (double)impl_of(be)->blocking, 0;
  if (strcmp(key, "kernel_launches") == 0)
    return *out = (double)impl_of(be)->launches, 0;
  if (strcmp(key, "staged_batches") == 0)
    return *out = (double)impl_of(be)->batches, 0;
  if (strcmp(key, "host_copies") == 0)
    return *out = (double)impl_of(be)->host_copies, 0;
  if (strcmp(key, "batch_split_bwds") == 0)
    return *out = (double)impl_of(be)->batch_splits, 0;
  if (strcmp(key, "member_split_bwds") == 0)
    return *out = (double)impl_of(be)->member_splits, 0;
  cpu_pool_t *pool = pool_of(be);
  _Atomic uint64_t *c = NULL;
  if (strcmp(key, "pool_jobs") == 0)
    c = pool ? &pool->jobs : NULL;
  else if (strcmp(key, "pool_serial_jobs") == 0)
    c = pool ? &pool->serial_jobs : NULL;
  else if (strcmp(key, "pool_missed_parts") == 0)
    c = pool ? &pool->missed_parts : NULL;
  else if (strcmp(key, "pool_sleeps") == 0)
    c = pool ? &pool->sleeps : NULL;
  else
    return SAC_ENOTFOUND;
  *out = c ? (double)atomic_load(c) : 0.0;
  return 0;
}

static const sac_backend_ops_t k_cpu_ops = {
    .name = "cpu",
    .alloc = sac_backend_host_alloc,
    .free = sac_backend_host_free,
    .upload = cpu_copy,
    .download = cpu_download,
    .sync = cpu_sync,
    .destroy = cpu_destroy,
    .linear_fwd = cpu_linear_fwd,
    .linear_bwd = cpu_linear_bwd,
    .normal = cpu_normal,
    .head_fwd = cpu_head_fwd,
    .head_bwd = cpu_head_bwd,
    .critic_target = cpu_critic_target,
    .critic_loss = cpu_critic_loss,
    .actor_loss = cpu_actor_loss,
    .alpha_loss = cpu_alpha_loss,
    .adam = cpu_adam,
    .polyak = cpu_polyak,
    .stage = cpu_stage,
    .stage_commit = cpu_stage_commit,
    .stage_at = cpu_stage_at,
    .normal2 = cpu_normal2,
    .actor_alpha_loss = cpu_actor_alpha_loss,
    .adam_polyak = cpu_adam_polyak,
    .q_head = cpu_q_head,
    .policy_fwd = cpu_policy_fwd,
    .linear_bwd_act = cpu_linear_bwd_act,
    .policy_bwd = cpu_policy_bwd,
    .get_metric = cpu_get_metric,
    .fetch = cpu_fetch,
    .fetch_wait = cpu_fetch_wait,
    .timing_begin = cpu_timing_begin,
    .timing_mark = cpu_timing_mark,
    .timing_end = cpu_timing_end,
    .act_ld = cpu_act_ld,
    .act_members_apart = cpu_act_members_apart,
};

static pthread_once_t g_default_once = PTHREAD_ONCE_INIT;
static int default_threads;
static void read_default_threads(void) { default_threads = openblas_get_num_threads(); }

int sac_backend_cpu_new(int threads, sac_backend_t **out) {
  *out = NULL;
  sac_backend_t *be = calloc(1, sizeof *be);
  cpu_impl_t *impl = calloc(1, sizeof *impl);
  if (!be || !impl) {
    free(be);
    free(impl);
    return SAC_ENOMEM;
  }
  /* 0: OpenBLAS's own default (all cores, or OPENBLAS_NUM_THREADS), read once, before
   * any backend set OpenBLAS to one thread */
  pthread_once(&g_default_once, read_default_threads);
  if (threads <= 0)
    threads = default_threads > 0 ? default_threads : 1;
  impl->threads = threads;
  /* the pool splits each op; OpenBLAS runs single-threaded inside each part */
  impl->pool = cpu_pool_new(threads);
  openblas_set_num_threads(1);
  be->ops = &k_cpu_ops;
  be->impl = impl;
  *out = be;
  return 0;
}
