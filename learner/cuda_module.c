/* Finds and opens the CUDA module (see cuda_module.h) for the binary that asks for CUDA.
 * Linked into every learner binary; it needs only libdl, so a CPU host never loads a
 * CUDA library unless --backend cuda or the nccl collective is asked for. */
#include "learner/cuda_module.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "common/log.h"

#ifndef SAC_CUDA_MODULE_DIR
#define SAC_CUDA_MODULE_DIR "/usr/local/lib/sacfleet"
#endif
#ifndef SAC_INSTALL_LIBDIR
#define SAC_INSTALL_LIBDIR "lib"
#endif

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static const sac_cuda_module_t *g_mod;
static char g_path[PATH_MAX];

static const sac_cuda_host_t k_host = {
    .abi = SAC_CUDA_MODULE_ABI,
    .log = sac_log,
    .log_level = sac_log_get_level,
};

/* The folder of the running binary, or "" where /proc is not mounted. */
static void exe_dir(char *out, size_t cap) {
  out[0] = '\0';
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0)
    return;
  exe[n] = '\0';
  char *slash = strrchr(exe, '/');
  if (slash)
    *slash = '\0';
  snprintf(out, cap, "%s", exe);
}

/* Opens one candidate and checks its table; 0, or SAC_ENOTFOUND (no such file: try the
 * next) or SAC_EUNSUPPORTED (the file is there but unusable: logged, stop looking). */
static int try_open(const char *path) {
  if (access(path, F_OK) != 0)
    return SAC_ENOTFOUND;
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    SAC_ERROR("cuda",
              "CUDA module %s found but cannot be loaded: %s (are the CUDA runtime and cuBLAS installed?)",
              path, dlerror());
    return SAC_EUNSUPPORTED;
  }
  sac_cuda_module_open_fn open_fn = (sac_cuda_module_open_fn)(uintptr_t)dlsym(h, SAC_CUDA_MODULE_ENTRY);
  const sac_cuda_module_t *m = open_fn ? open_fn(&k_host) : NULL;
  if (!m || m->abi != SAC_CUDA_MODULE_ABI || m->ops_size != sizeof(sac_backend_ops_t) ||
      m->linear_size != sizeof(sac_linear_t) || m->coll_size != sizeof(sac_coll_t)) {
    SAC_ERROR("cuda",
              "CUDA module %s is from another build (ABI %d, this binary %d, version %s, this binary %s): "
              "install the module built with this binary",
              path, m ? m->abi : -1, SAC_CUDA_MODULE_ABI, m && m->version ? m->version : "?", SAC_VERSION);
    dlclose(h);
    return SAC_EUNSUPPORTED;
  }
  g_mod = m;
  if (!realpath(path, g_path))
    snprintf(g_path, sizeof g_path, "%s", path);
  SAC_INFO("cuda", "CUDA module %s loaded", g_path);
  return 0;
}

static void load_once(void) {
  const char *env = getenv("SAC_CUDA_MODULE");
  if (env && env[0]) {
    if (try_open(env) == SAC_ENOTFOUND)
      SAC_ERROR("cuda", "the CUDA module is not at SAC_CUDA_MODULE=%s (no such file)", env);
    return;
  }
  char dir[PATH_MAX], cand[4][PATH_MAX + 64];
  exe_dir(dir, sizeof dir);
  int n = 0;
  if (dir[0]) {
    snprintf(cand[n++], sizeof cand[0], "%s/%s", dir, SAC_CUDA_MODULE_FILE);
    snprintf(cand[n++], sizeof cand[0], "%s/../%s/sacfleet/%s", dir, SAC_INSTALL_LIBDIR,
             SAC_CUDA_MODULE_FILE);
    if (strcmp(SAC_INSTALL_LIBDIR, "lib") != 0)
      snprintf(cand[n++], sizeof cand[0], "%s/../lib/sacfleet/%s", dir, SAC_CUDA_MODULE_FILE);
  }
  snprintf(cand[n++], sizeof cand[0], "%s/%s", SAC_CUDA_MODULE_DIR, SAC_CUDA_MODULE_FILE);
  for (int i = 0; i < n; i++) {
    int rc = try_open(cand[i]);
    if (rc != SAC_ENOTFOUND)
      return;
  }
  char tried[4 * (PATH_MAX + 64) + 16];
  size_t off = 0;
  for (int i = 0; i < n && off < sizeof tried; i++)
    off += (size_t)snprintf(tried + off, sizeof tried - off, "%s%s", i ? ", " : "", cand[i]);
  SAC_ERROR(
      "cuda",
      "the CUDA module %s is not installed (looked for %s): the cuda backend needs it; install the CUDA "
      "image or build with nvcc, or set SAC_CUDA_MODULE to its path",
      SAC_CUDA_MODULE_FILE, tried);
}

int sac_cuda_module_get(const sac_cuda_module_t **out) {
  pthread_once(&g_once, load_once);
  *out = g_mod;
  return g_mod ? 0 : SAC_EUNSUPPORTED;
}

const char *sac_cuda_module_path(void) { return g_mod ? g_path : ""; }
