/* The Gymnasium bridge: a sacfleet environment plugin (common/env_plugin.h) that embeds
 * CPython and runs any Gymnasium environment by id, so an environment a user already has in
 * Python trains unchanged:  "plugin:PATH/libsac_env_gym.so:Pendulum-v1".
 *
 * ARGS: ENV_ID[,max_steps=N][,render=1]. The time limit defaults to the id's registered
 * max_episode_steps (0: none); sacfleet's loader enforces it and reports truncation, so
 * the Python env's own truncated flag is not passed on (the ABI has none). render=1 makes
 * the environment with render_mode="rgb_array" for the ABI's optional
 * sac_env_plugin_render (sac-eval --record); on a machine without a display MuJoCo then
 * renders through EGL and pygame (classic control) without a video device (MUJOCO_GL=egl,
 * SDL_VIDEODRIVER=dummy, unless set). The optional sac_env_plugin_set_state
 * puts the environment in a given physical state (MuJoCo models: qpos then qvel;
 * classic-control models: their `state`), so a built-in C environment or the MuJoCo
 * plugin can be drawn by its Gymnasium model.
 *
 * Only continuous Box observation and action spaces with a floating dtype, finite action
 * bounds and sizes within the ABI limits are accepted; anything else fails create() with
 * the reason. Every Python exception (unknown id, missing gymnasium, a failing step) is
 * caught: create() returns it in err, reset()/step() print it to stderr and return -1
 * (the loader reports SAC_EPLUGIN). Nothing here calls exit() or Py_FatalError.
 *
 * The interpreter: the one this library was built against (SAC_GYM_PYTHON, found by
 * envs/gym_bridge/CMakeLists.txt as the `python3` on PATH whose gymnasium imports; a
 * pyenv build must be a shared-library build). It is started once per process, with its
 * signal handlers off (SIGINT stays with sac-actor), and never finalised; libpython is
 * promoted to RTLD_GLOBAL so extension modules (numpy) resolve its symbols although the
 * loader opens plugins RTLD_LOCAL, and this library pins itself (RTLD_NODELETE) so a
 * dlclose cannot unmap code the interpreter was set up from. Handles may be used from
 * different threads: every call takes the GIL. The C side allocates nothing per step;
 * the Python side does, as any Python env does. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/env_plugin.h"

#ifndef SAC_GYM_PYTHON
#define SAC_GYM_PYTHON "python3"
#endif
#ifndef SAC_GYM_LIBPYTHON
#define SAC_GYM_LIBPYTHON ""
#endif

/* The Python half: checks spaces, converts arrays, keeps errors readable. */
static const char k_helpers[] =
    "import math\n"
    "import numpy as _np\n"
    "import gymnasium as _gym\n"
    "def _box_ok(sp):\n"
    "    return isinstance(sp, _gym.spaces.Box) and _np.issubdtype(sp.dtype, _np.floating)\n"
    "def make(env_id, render):\n"
    "    if render:\n"
    "        import os\n"
    "        if not os.environ.get('DISPLAY') and not os.environ.get('WAYLAND_DISPLAY'):\n"
    "            os.environ.setdefault('MUJOCO_GL', 'egl')\n"
    "            os.environ.setdefault('SDL_VIDEODRIVER', 'dummy')\n"
    "        env = _gym.make(env_id, render_mode='rgb_array')\n"
    "    else:\n"
    "        env = _gym.make(env_id)\n"
    "    o, a = env.observation_space, env.action_space\n"
    "    if not _box_ok(a):\n"
    "        env.close()\n"
    "        raise TypeError('%s: action space %r is not supported (only continuous Box spaces with a "
    "floating dtype are)'"
    " % (env_id, a))\n"
    "    if not _box_ok(o):\n"
    "        env.close()\n"
    "        raise TypeError('%s: observation space %r is not supported (only continuous Box spaces with a "
    "floating dtype are)'"
    " % (env_id, o))\n"
    "    low = _np.asarray(a.low, dtype=_np.float64).ravel()\n"
    "    high = _np.asarray(a.high, dtype=_np.float64).ravel()\n"
    "    if not (_np.all(_np.isfinite(low)) and _np.all(_np.isfinite(high)) and _np.all(low < high)):\n"
    "        env.close()\n"
    "        raise ValueError('%s: action bounds must be finite with low < high, got %r..%r' % (env_id, low, "
    "high))\n"
    "    steps = env.spec.max_episode_steps if env.spec is not None and env.spec.max_episode_steps else 0\n"
    "    return (env, int(_np.prod(o.shape)), int(low.size), tuple(float(x) for x in low),\n"
    "            tuple(float(x) for x in high), int(steps))\n"
    "def _obs(env, o):\n"
    "    o = _np.asarray(o, dtype=_np.float32).ravel()\n"
    "    if not _np.all(_np.isfinite(o)):\n"
    "        raise ValueError('%s returned a non-finite observation %r' % (env.spec.id if env.spec else env, "
    "o))\n"
    "    return o.tobytes()\n"
    "def reset(env, seed):\n"
    "    o, _ = env.reset(seed=seed)\n"
    "    return _obs(env, o)\n"
    "def step(env, shape, action_bytes):\n"
    "    a = _np.frombuffer(action_bytes, dtype=_np.float32).reshape(shape).astype(env.action_space.dtype)\n"
    "    o, r, term, trunc, _ = env.step(a)\n"
    "    r = float(r)\n"
    "    if not math.isfinite(r):\n"
    "        raise ValueError('%s returned a non-finite reward %r' % (env.spec.id if env.spec else env, r))\n"
    "    return _obs(env, o), r, bool(term)\n"
    "def render(env):\n"
    "    f = env.render()\n"
    "    if f is None:\n"
    "        raise RuntimeError('render() returned no frame')\n"
    "    f = _np.ascontiguousarray(_np.asarray(f, dtype=_np.uint8))\n"
    "    if f.ndim != 3 or f.shape[2] != 3:\n"
    "        raise ValueError('render() returned a frame of shape %r, not height x width x 3' % (f.shape,))\n"
    "    fps = (env.metadata or {}).get('render_fps') or 0\n"
    "    return f.tobytes(), int(f.shape[0]), int(f.shape[1]), int(fps)\n"
    "def set_state(env, state_bytes):\n"
    "    s = _np.frombuffer(state_bytes, dtype=_np.float64)\n"
    "    u = env.unwrapped\n"
    "    if hasattr(u, 'set_state') and hasattr(u, 'model'):\n"
    "        nq, nv = u.model.nq, u.model.nv\n"
    "        if s.size != nq + nv:\n"
    "            raise ValueError('a state of %d numbers, the model has nq %d + nv %d' % (s.size, nq, nv))\n"
    "        u.set_state(s[:nq].copy(), s[nq:].copy())\n"
    "    elif getattr(u, 'state', None) is not None:\n"
    "        cur = _np.asarray(u.state)\n"
    "        if s.size != cur.size:\n"
    "            raise ValueError('a state of %d numbers, the environment has %d' % (s.size, cur.size))\n"
    "        u.state = s.astype(cur.dtype).reshape(cur.shape)\n"
    "    else:\n"
    "        raise TypeError('no settable state (neither a MuJoCo model nor a state attribute)')\n"
    "    o = u._get_obs() if hasattr(u, '_get_obs') else u.state\n"
    "    return _obs(env, o)\n";

typedef struct {
  PyObject *env;       /* the gymnasium env (gym.make(...)) */
  PyObject *act_shape; /* action_space.shape */
  PyObject *fn_reset;  /* helpers.reset */
  PyObject *fn_step;   /* helpers.step */
  int obs_dim, act_dim;
  int render; /* made with render_mode="rgb_array" */
  char id[SAC_ENV_PLUGIN_NAME_LEN];
} gym_env_t;

static pthread_mutex_t g_init_lock = PTHREAD_MUTEX_INITIALIZER;
static PyObject *g_helpers; /* the helper module's dict, made once under the GIL */
static char g_init_err[1024];

/* Formats the pending Python exception as "Type: message" into buf and clears it. GIL held. */
static void exception_text(char *buf, size_t len) {
  PyObject *type = NULL, *value = NULL, *tb = NULL;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  const char *tname = type ? ((PyTypeObject *)type)->tp_name : "unknown error";
  PyObject *s = value ? PyObject_Str(value) : NULL;
  const char *msg = s ? PyUnicode_AsUTF8(s) : NULL;
  if (!msg)
    PyErr_Clear();
  snprintf(buf, len, "%s: %s", tname, msg ? msg : "(no message)");
  Py_XDECREF(s);
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
}

/* Starts the interpreter (once per process) and loads the helpers. Returns 0, or -1 with
 * the reason in err. Thread-safe. */
static int python_init(char *err, size_t err_len) {
  pthread_mutex_lock(&g_init_lock);
  int rc = 0;
  if (g_helpers)
    goto out;
  if (g_init_err[0]) { /* a failed start is not retried: report the same reason */
    rc = -1;
    goto out;
  }
  /* keep this library mapped, and make libpython's symbols global for extension modules */
  Dl_info self;
  if (dladdr((void *)python_init, &self) && self.dli_fname)
    dlopen(self.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
  if (SAC_GYM_LIBPYTHON[0] && !dlopen(SAC_GYM_LIBPYTHON, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD))
    dlopen(SAC_GYM_LIBPYTHON, RTLD_NOW | RTLD_GLOBAL);
  PyGILState_STATE gil = PyGILState_UNLOCKED;
  int started_here = 0;
  if (!Py_IsInitialized()) {
    PyConfig config;
    PyConfig_InitPythonConfig(&config);
    config.install_signal_handlers = 0;
    config.parse_argv = 0;
    PyStatus st = PyConfig_SetBytesString(&config, &config.program_name, SAC_GYM_PYTHON);
    if (!PyStatus_Exception(st))
      st = Py_InitializeFromConfig(&config);
    PyConfig_Clear(&config);
    if (PyStatus_Exception(st)) {
      snprintf(g_init_err, sizeof g_init_err, "cannot start the Python interpreter (%s): %s", SAC_GYM_PYTHON,
               st.err_msg ? st.err_msg : "unknown error");
      rc = -1;
      goto out;
    }
    started_here = 1;
  } else {
    gil = PyGILState_Ensure();
  }
  PyObject *mod = PyModule_New("_sac_gym_bridge");
  PyObject *dict = mod ? PyModule_GetDict(mod) : NULL;
  if (dict && PyDict_SetItemString(dict, "__builtins__", PyEval_GetBuiltins()) == 0) {
    PyObject *r = PyRun_String(k_helpers, Py_file_input, dict, dict);
    if (r) {
      Py_DECREF(r);
      g_helpers = dict;
      Py_INCREF(g_helpers);
    }
  }
  if (!g_helpers) {
    char text[768];
    exception_text(text, sizeof text);
    snprintf(g_init_err, sizeof g_init_err, "gymnasium is not usable in the embedded Python (%s): %s",
             SAC_GYM_PYTHON, text);
    rc = -1;
  }
  Py_XDECREF(mod);
  if (started_here)
    PyEval_SaveThread(); /* release the GIL: every call below takes it with PyGILState_Ensure */
  else
    PyGILState_Release(gil);
out:
  if (rc != 0)
    snprintf(err, err_len, "%s", g_init_err);
  pthread_mutex_unlock(&g_init_lock);
  return rc;
}

/* Parses "ENV_ID[,max_steps=N][,render=1]". Returns 0, or -1 with a reason in err. */
static int parse_args(const char *args, char *id, size_t id_len, int *max_steps, int *render, char *err,
                      size_t err_len) {
  size_t n = strcspn(args, ",");
  if (n == 0 || n >= id_len) {
    snprintf(err, err_len, "expected a Gymnasium id as ARGS (e.g. 'Pendulum-v1'), got '%s'", args);
    return -1;
  }
  memcpy(id, args, n);
  id[n] = '\0';
  *max_steps = -1;
  *render = 0;
  const char *s = args + n;
  while (*s == ',') {
    s++;
    size_t len = strcspn(s, ",");
    char buf[32], *rest = NULL;
    if (len == 8 && (strncmp(s, "render=1", 8) == 0 || strncmp(s, "render=0", 8) == 0)) {
      *render = s[7] == '1';
      s += len;
      continue;
    }
    if (strncmp(s, "max_steps=", 10) != 0 || len - 10 >= sizeof buf) {
      snprintf(err, err_len, "unknown argument '%.*s' (known: max_steps=N, render=1)", (int)len, s);
      return -1;
    }
    snprintf(buf, sizeof buf, "%.*s", (int)(len - 10), s + 10);
    long v = strtol(buf, &rest, 10);
    if (rest == buf || *rest || v < 0 || v > 100000000) {
      snprintf(err, err_len, "max_steps must be an integer in [0, 100000000], got '%s'", buf);
      return -1;
    }
    *max_steps = (int)v;
    s += len;
  }
  return 0;
}

SAC_ENV_PLUGIN_EXPORT int sac_env_plugin_abi_version(void) { return SAC_ENV_PLUGIN_ABI_VERSION; }

SAC_ENV_PLUGIN_EXPORT void sac_env_plugin_destroy(void *handle) {
  gym_env_t *e = handle;
  if (!e)
    return;
  PyGILState_STATE gil = PyGILState_Ensure();
  if (e->env) {
    PyObject *r = PyObject_CallMethod(e->env, "close", NULL);
    if (!r)
      PyErr_Clear();
    Py_XDECREF(r);
  }
  Py_XDECREF(e->env);
  Py_XDECREF(e->act_shape);
  Py_XDECREF(e->fn_reset);
  Py_XDECREF(e->fn_step);
  PyGILState_Release(gil);
  PyMem_RawFree(e);
}

/* A rendering environment's first frame starts SDL (pygame draws the classic-control
 * models), which loads libdbus, finds no session bus on a server and unloads it, with what
 * dbus allocated still held: a leak of dbus's, but one a leak checker can no longer name
 * once the library is gone (it sees an "unknown module"). Loaded here first and pinned
 * (RTLD_NODELETE), where the system has it, it stays mapped with its globals, so what dbus
 * holds stays reachable, as in any process that keeps libdbus. */
static void pin_dbus(void) {
  static int pinned;
  if (!pinned)
    pinned = dlopen("libdbus-1.so.3", RTLD_NOW | RTLD_NODELETE) != NULL ? 1 : -1;
}

SAC_ENV_PLUGIN_EXPORT void *sac_env_plugin_create(const char *args, sac_env_plugin_spec_t *spec, char *err,
                                                  size_t err_len) {
  char id[SAC_ENV_PLUGIN_NAME_LEN];
  int max_steps, render;
  if (parse_args(args, id, sizeof id, &max_steps, &render, err, err_len) != 0)
    return NULL;
  if (python_init(err, err_len) != 0)
    return NULL;
  if (render)
    pin_dbus();
  PyGILState_STATE gil = PyGILState_Ensure();
  gym_env_t *e = PyMem_RawCalloc(1, sizeof *e);
  PyObject *made = NULL;
  if (!e) {
    snprintf(err, err_len, "out of memory");
    goto fail;
  }
  snprintf(e->id, sizeof e->id, "%s", id);
  e->render = render;
  PyObject *make = PyDict_GetItemString(g_helpers, "make"); /* borrowed */
  e->fn_reset = PyDict_GetItemString(g_helpers, "reset");
  e->fn_step = PyDict_GetItemString(g_helpers, "step");
  Py_XINCREF(e->fn_reset);
  Py_XINCREF(e->fn_step);
  made = make ? PyObject_CallFunction(make, "si", id, render) : NULL;
  if (!made) {
    char text[768];
    exception_text(text, sizeof text);
    snprintf(err, err_len, "gym.make('%s') failed: %s", id, text);
    goto fail;
  }
  PyObject *low = NULL, *high = NULL;
  int steps = 0;
  if (!PyArg_ParseTuple(made, "OiiOOi", &e->env, &e->obs_dim, &e->act_dim, &low, &high, &steps)) {
    char text[768];
    exception_text(text, sizeof text);
    snprintf(err, err_len, "%s: unexpected result from the bridge's make(): %s", id, text);
    e->env = NULL;
    goto fail;
  }
  Py_INCREF(e->env);
  if (e->obs_dim < 1 || e->obs_dim > SAC_ENV_PLUGIN_MAX_OBS || e->act_dim < 1 ||
      e->act_dim > SAC_ENV_PLUGIN_MAX_ACT) {
    snprintf(err, err_len,
             "%s: observation size %d / action size %d outside the plugin limits (1..%d / 1..%d)", id,
             e->obs_dim, e->act_dim, SAC_ENV_PLUGIN_MAX_OBS, SAC_ENV_PLUGIN_MAX_ACT);
    goto fail;
  }
  PyObject *space = PyObject_GetAttrString(e->env, "action_space");
  e->act_shape = space ? PyObject_GetAttrString(space, "shape") : NULL;
  Py_XDECREF(space);
  if (!e->act_shape) {
    char text[768];
    exception_text(text, sizeof text);
    snprintf(err, err_len, "%s: %s", id, text);
    goto fail;
  }
  snprintf(spec->name, sizeof spec->name, "%s", id);
  spec->obs_dim = e->obs_dim;
  spec->act_dim = e->act_dim;
  for (int i = 0; i < e->act_dim; i++) {
    spec->act_low[i] = (float)PyFloat_AsDouble(PyTuple_GET_ITEM(low, i));
    spec->act_high[i] = (float)PyFloat_AsDouble(PyTuple_GET_ITEM(high, i));
  }
  spec->max_episode_steps = max_steps >= 0 ? max_steps : steps;
  Py_DECREF(made);
  PyGILState_Release(gil);
  return e;
fail:
  Py_XDECREF(made);
  PyGILState_Release(gil);
  sac_env_plugin_destroy(e);
  return NULL;
}

/* Copies the observation bytes returned by the helpers. GIL held. Returns 0 or -1. */
static int copy_obs(const gym_env_t *e, PyObject *bytes, float *obs) {
  char *buf = NULL;
  Py_ssize_t len = 0;
  if (PyBytes_AsStringAndSize(bytes, &buf, &len) != 0)
    return -1;
  if (len != (Py_ssize_t)(sizeof(float) * (size_t)e->obs_dim)) {
    fprintf(stderr, "gym bridge: %s: observation of %zd bytes, expected %d floats\n", e->id, (ssize_t)len,
            e->obs_dim);
    return -1;
  }
  memcpy(obs, buf, (size_t)len);
  return 0;
}

static void report(const gym_env_t *e, const char *what) {
  char text[1024];
  exception_text(text, sizeof text);
  fprintf(stderr, "gym bridge: %s: %s raised %s\n", e->id, what, text);
}

SAC_ENV_PLUGIN_EXPORT int sac_env_plugin_reset(void *handle, uint64_t seed, float *obs) {
  gym_env_t *e = handle;
  PyGILState_STATE gil = PyGILState_Ensure();
  int rc = -1;
  PyObject *r = PyObject_CallFunction(e->fn_reset, "OK", e->env, (unsigned long long)seed);
  if (!r)
    report(e, "reset");
  else if (copy_obs(e, r, obs) == 0)
    rc = 0;
  else if (PyErr_Occurred())
    report(e, "reset");
  Py_XDECREF(r);
  PyGILState_Release(gil);
  return rc;
}

SAC_ENV_PLUGIN_EXPORT int sac_env_plugin_step(void *handle, const float *action, float *obs, float *reward,
                                              int *terminated) {
  gym_env_t *e = handle;
  PyGILState_STATE gil = PyGILState_Ensure();
  int rc = -1;
  PyObject *o = NULL;
  double r = 0.0;
  int term = 0;
  PyObject *res = PyObject_CallFunction(e->fn_step, "OOy#", e->env, e->act_shape, (const char *)action,
                                        (Py_ssize_t)(sizeof(float) * (size_t)e->act_dim));
  if (!res) {
    report(e, "step");
  } else if (!PyArg_ParseTuple(res, "Odp", &o, &r, &term)) {
    report(e, "step");
  } else if (copy_obs(e, o, obs) != 0) {
    if (PyErr_Occurred())
      report(e, "step");
  } else {
    *reward = (float)r;
    *terminated = term;
    rc = 0;
  }
  Py_XDECREF(res);
  PyGILState_Release(gil);
  return rc;
}

/* The optional extensions (common/env_plugin.h): a frame of an environment made with
 * render=1, and its physical state set from outside (a mirror of another environment). */
SAC_ENV_PLUGIN_EXPORT int sac_env_plugin_render(void *handle, unsigned char *rgb, size_t cap, int *width,
                                                int *height, int *fps) {
  gym_env_t *e = handle;
  if (!e->render) {
    fprintf(stderr, "gym bridge: %s: made without render=1: no frames\n", e->id);
    return -1;
  }
  PyGILState_STATE gil = PyGILState_Ensure();
  int rc = -1, h = 0, w = 0, f = 0;
  PyObject *fn = PyDict_GetItemString(g_helpers, "render"); /* borrowed */
  PyObject *res = fn ? PyObject_CallFunction(fn, "O", e->env) : NULL;
  PyObject *bytes = NULL;
  if (!res || !PyArg_ParseTuple(res, "Siii", &bytes, &h, &w, &f)) {
    report(e, "render");
  } else {
    *width = w, *height = h, *fps = f;
    const size_t need = (size_t)w * (size_t)h * 3;
    if ((size_t)PyBytes_GET_SIZE(bytes) != need) {
      fprintf(stderr, "gym bridge: %s: a frame of %zd bytes for %d x %d\n", e->id,
              (ssize_t)PyBytes_GET_SIZE(bytes), w, h);
    } else if (need > cap) {
      rc = 1;
    } else {
      memcpy(rgb, PyBytes_AS_STRING(bytes), need);
      rc = 0;
    }
  }
  Py_XDECREF(res);
  PyGILState_Release(gil);
  return rc;
}

SAC_ENV_PLUGIN_EXPORT int sac_env_plugin_set_state(void *handle, const double *state, int n, float *obs) {
  gym_env_t *e = handle;
  PyGILState_STATE gil = PyGILState_Ensure();
  int rc = -1;
  PyObject *fn = PyDict_GetItemString(g_helpers, "set_state"); /* borrowed */
  PyObject *r = fn ? PyObject_CallFunction(fn, "Oy#", e->env, (const char *)state,
                                           (Py_ssize_t)(sizeof(double) * (size_t)n))
                   : NULL;
  if (!r)
    report(e, "set_state");
  else if (copy_obs(e, r, obs) == 0)
    rc = 0;
  else if (PyErr_Occurred())
    report(e, "set_state");
  Py_XDECREF(r);
  PyGILState_Release(gil);
  return rc;
}
