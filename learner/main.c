/* sac-learner: the learner binary. By default it runs the learner service
 * (service.h): with --shards it samples from remote replay shards and publishes weights
 * on --weights for remote actors; without --shards it hosts the shards and actors itself
 * over inproc:// (the embedded default). --mode local runs the single-process trainer
 * (train_local.c) instead, the reference loop the service is measured against.
 * SIGINT/SIGTERM end the run early: a line says at once what happens, the run stops within
 * seconds (no final evaluation; a checkpoint saved) and the resume command is printed; a
 * second signal exits at once (common/sigstop.h). A run stopped before its first update
 * leaves no run directory. Exit codes: 0 trained (or stopped by SIGTERM), 130 stopped by
 * SIGINT, 1 runtime failure, 2 bad configuration. */
#include <math.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/auth.h"
#include "common/config.h"
#include "common/env.h"
#include "common/error.h"
#include "common/http.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/sigstop.h"
#include "common/preset.h"
#include "common/wire.h"
#include "learner/backend.h"
#include "learner/checkpoint.h"
#include "learner/service.h"
#include "learner/train_local.h"

typedef struct {
  sac_train_cfg_t t;
  char mode[16];
  char shards[4096];
  char weights[256];
  int embedded_shards, actors, envs_per_actor, publish_every, max_nonfinite_updates, log_interval_s,
      loss_guard;
  int publish_interval_ms, batches_per_request;
  char sampler[32], weights_precision[8], sample_precision[8];
  int64_t eval_every;
  double per_alpha, per_beta;
  double lr, lr_actor, lr_critic, lr_alpha, gamma, tau, init_alpha, target_entropy, log_std_min, log_std_max;
  int hidden, depth, batch, policy_delay, autotune_alpha, log_json;
  char log_level[16];
  char run_dir[512], run_name[256], resume[512];
  int64_t checkpoint_every;
  char metrics_addr[64];
  int metrics_port;
  char curve_key[1024], curve_server_key[1024], curve_allow[1024];
  int dp_rank, dp_size, dp_timeout_ms, dp_connect_timeout_ms; /* data-parallel (learner/dp.h) */
  char dp_coord[256], dp_collective[16];
  char durability[16]; /* embedded shards (replay/server.h) */
  int wal_sync_ms;
  char device[16];
  char env_module[256];
  char preset[1024];
} learner_cfg_t;

#define OPT(k, t, f, d, lo, hi, h)                                                                           \
  { k, t, offsetof(learner_cfg_t, f), 0, d, lo, hi, h }
#define STR(k, f, d, h)                                                                                      \
  { k, SAC_CFG_STRING, offsetof(learner_cfg_t, f), sizeof(((learner_cfg_t *)0)->f), d, 1, 0, h }
static const sac_cfg_opt_t k_opts[] = {
    STR("mode", mode, "service",
        "service (distributed; embedded when --shards is empty) or local (one process, one loop)"),
    STR("shards", shards, "",
        "comma-separated sample endpoints of remote replay shards (empty: embedded default)"),
    STR("weights", weights, "",
        "endpoint to publish actor weights on (empty: inproc when embedded, "
        "tcp://*:5570 otherwise)"),
    OPT("embedded_shards", SAC_CFG_INT, embedded_shards, "2", 1, 64,
        "replay shards hosted in the embedded default"),
    OPT("embedded_actors", SAC_CFG_INT, actors, "2", 1, 4096, "actor threads in the embedded default"),
    OPT("envs_per_actor", SAC_CFG_INT, envs_per_actor, "1", 1, 4096, "environments per embedded actor"),
    OPT("publish_every", SAC_CFG_INT, publish_every, "10", 1, 1000000,
        "at least this many updates between weight broadcasts"),
    OPT("publish_interval_ms", SAC_CFG_INT, publish_interval_ms, "50", 0, 3600000,
        "and at least this many milliseconds between them (0: by count only): broadcasts per second stay "
        "under 1000 / publish_interval_ms whatever the update rate"),
    STR("weights_precision", weights_precision, "fp32",
        "dtype of the weight broadcasts: fp32, bf16 or fp16 (half the bytes; actors convert back to fp32)"),
    OPT("max_nonfinite_updates", SAC_CFG_INT, max_nonfinite_updates, "100", 1, 1000000,
        "service: updates in a row refused for a NaN/Inf loss before the learner stops with an error (each "
        "is "
        "skipped, logged and counted in sac_learner_nonfinite_updates_total)"),
    OPT("loss_guard", SAC_CFG_BOOL, loss_guard, "true", 1, 0,
        "service: skip the optimizer steps of an update whose losses are NaN or Inf (decided on the backend, "
        "no wait; reported one update late; not on data-parallel ranks); false: the steps are applied and "
        "the update only counted"),
    OPT("eval_every_updates", SAC_CFG_INT64, eval_every, "2000", 0, 1e15,
        "service: updates between evaluations (0: only at the end)"),
    STR("sampler", sampler, "uniform", "embedded shards: uniform | prioritized"),
    OPT("batches_per_request", SAC_CFG_INT, batches_per_request, "0", 0, 16,
        "service: batches of --batch_size rows asked of a shard in one request, each sampled on its own "
        "(fewer messages per update; 0: 4 where a reply of four takes at most 256 KB, else 1)"),
    STR("sample_precision", sample_precision, "fp32",
        "service: dtype of observations and actions in sample replies, fp32 or fp16 (half the bytes; "
        "converted back to fp32 on arrival; values beyond +-65504 arrive as +-65504, counted in "
        "sac_replay_sample_f16_clamped_total)"),
    OPT("priority_alpha", SAC_CFG_DOUBLE, per_alpha, "0.6", 0, 10, "prioritized: priority exponent"),
    OPT("priority_beta", SAC_CFG_DOUBLE, per_beta, "0.4", 0, 1, "prioritized: importance-sampling exponent"),
    STR("env", t.env, "Pendulum-v1",
        "environment ID: Pendulum-v1, MountainCarContinuous-v0, HalfCheetah/Hopper/Walker2d/Ant-v4 or -v5, "
        "Humanoid-v5 (MuJoCo); gym:ID for any other Gymnasium ID (the Gymnasium bridge); "
        "plugin:PATH.so[:ARGS] "
        "for your own plugin"),
    STR("env_module", env_module, "",
        "with --env gym:ID: the Python module that registers ID, imported first (your own package)"),
    STR("preset", preset, "auto",
        "hyper-parameters for the task: auto (the environment's own presets/<ID>.conf, where there is one), "
        "none, or a file; applied under --config, SAC_* and flags (presets/README.md)"),
    STR("backend", t.backend, "cpu",
        "compute backend: cpu or cuda; null is a measuring tool that does no math (it reads each batch, "
        "returns priorities and keeps the initial weights: the service's ceiling, docs/LEARNER.md)"),
    STR("precision", t.precision, "fp32",
        "compute precision: fp32; with --backend cuda also tf32, bf16, fp16 (fp32 master weights, fp16 "
        "with dynamic loss scaling)"),
    OPT("graphs", SAC_CFG_BOOL, t.graphs, "true", 1, 0,
        "cuda: capture each update as CUDA graphs after warm-up"),
    STR("device", device, "auto",
        "cuda: GPU index, or auto: GPU dp_rank % (GPUs on this host), i.e. GPU 0 without data-parallel "
        "(docs/CUDA.md)"),
    OPT("threads", SAC_CFG_INT, t.threads, "0", 0, 1024,
        "cpu backend threads, busy while training (0 = all cores; embedded: the cores the actors leave)"),
    OPT("total_steps", SAC_CFG_INT64, t.total_steps, "20000", 1, 1e15, "environment steps to train for"),
    OPT("learning_starts", SAC_CFG_INT64, t.learning_starts, "1000", 0, 1e15,
        "uniform random actions and no updates before this many steps"),
    OPT("updates_per_step", SAC_CFG_INT, t.updates_per_step, "1", 1, 1000, "updates per environment step"),
    OPT("actor_lag", SAC_CFG_INT, t.actor_lag, "1", 0, 1,
        "local: 1 = act with the actor as of one step's updates earlier (no wait for the device per step); "
        "0 = wait for each step's updates"),
    STR("durability", durability, "wal",
        "embedded shards: wal (acknowledged transitions survive a crash: logged next to their "
        "snapshots in the run directory) | snapshot | none"),
    OPT("wal_sync_ms", SAC_CFG_INT, wal_sync_ms, "2", -1, 60000,
        "embedded shards: group commit window of the write-ahead log (0: fsync each batch; -1: no fsync)"),
    OPT("capacity", SAC_CFG_INT64, t.buffer_capacity, "1000000", 1, 1e12,
        "replay capacity in transitions (embedded default: split over the embedded shards)"),
    OPT("eval_every_steps", SAC_CFG_INT64, t.eval_interval, "5000", 0, 1e15,
        "local: environment steps between evaluations (0: only at the end)"),
    OPT("eval_episodes", SAC_CFG_INT, t.eval_episodes, "10", 1, 100000, "episodes per evaluation"),
    OPT("log_every_steps", SAC_CFG_INT64, t.log_interval, "1000", 0, 1e15,
        "local: environment steps between progress lines (0: none)"),
    OPT("log_interval_s", SAC_CFG_INT, log_interval_s, "10", 0, 86400,
        "service: seconds between progress lines (0: none)"),
    OPT("seed", SAC_CFG_INT64, t.seed, "1", 0, 9.2e18, "random seed (networks, noise, environments)"),
    OPT("quiet", SAC_CFG_BOOL, t.quiet, "false", 1, 0, "no progress lines"),
    OPT("hidden", SAC_CFG_INT, hidden, "256", 1, 65536, "hidden layer width (actor and critics)"),
    OPT("depth", SAC_CFG_INT, depth, "2", 1, 15, "hidden layers"),
    OPT("batch_size", SAC_CFG_INT, batch, "256", 1, 1 << 20,
        "batch size; refused at start when batch_size x hidden > 536870911 (the backends' int indexing), "
        "when "
        "the learner's buffers exceed this host's memory (cpu backend), when one sample would exceed 1 GiB, "
        "or "
        "(embedded default) when it exceeds buffer_capacity / embedded_shards"),
    OPT("lr", SAC_CFG_DOUBLE, lr, "3e-4", 0, 1, "learning rate of actor, critics and alpha"),
    OPT("lr_actor", SAC_CFG_DOUBLE, lr_actor, "-1", -1, 1, "actor learning rate (-1: lr)"),
    OPT("lr_critic", SAC_CFG_DOUBLE, lr_critic, "-1", -1, 1, "critic learning rate (-1: lr)"),
    OPT("lr_alpha", SAC_CFG_DOUBLE, lr_alpha, "-1", -1, 1, "temperature learning rate (-1: lr)"),
    OPT("gamma", SAC_CFG_DOUBLE, gamma, "0.99", 0, 1, "discount"),
    OPT("tau", SAC_CFG_DOUBLE, tau, "0.005", 1e-9, 1, "Polyak coefficient"),
    OPT("init_alpha", SAC_CFG_DOUBLE, init_alpha, "1.0", 1e-12, 1e6, "initial temperature"),
    OPT("autotune_alpha", SAC_CFG_BOOL, autotune_alpha, "true", 1, 0, "learn the temperature"),
    OPT("target_entropy", SAC_CFG_DOUBLE, target_entropy, "0", -1e6, 1e6,
        "target entropy (0: -|A|, the usual choice)"),
    OPT("log_std_min", SAC_CFG_DOUBLE, log_std_min, "-5", -100, 100, "policy log std lower clamp"),
    OPT("log_std_max", SAC_CFG_DOUBLE, log_std_max, "2", -100, 100, "policy log std upper clamp"),
    OPT("policy_delay", SAC_CFG_INT, policy_delay, "1", 1, 1000, "critic updates per actor/alpha update"),
    STR("run_dir", run_dir, "runs", "where run directories are created (config, metrics CSV, curve, policy)"),
    STR("run_name", run_name, "", "this run's directory name (empty: time and environment)"),
    OPT("checkpoint_every", SAC_CFG_INT64, checkpoint_every, "5000", 0, 1e15,
        "updates between checkpoints in the run directory (0: at the end only)"),
    STR("resume", resume, "",
        "a run directory to continue, with its own config.txt (options given beside it override it and are "
        "recorded there); a finished run says so and exits 0"),
    STR("log_level", log_level, "info", "error, warn, info or debug"),
    OPT("log_json", SAC_CFG_BOOL, log_json, "false", 1, 0, "log lines as JSON objects"),
    STR("metrics_addr", metrics_addr, "",
        "address the /metrics and /healthz endpoint binds (numeric; empty: 127.0.0.1 in the embedded default "
        "and --mode local, 0.0.0.0 with --shards)"),
    OPT("metrics_port", SAC_CFG_INT, metrics_port, "5580", -1, 65535,
        "port of the /metrics and /healthz endpoint (0: a free port, logged; -1: no endpoint)"),
    STR("curve_key", curve_key, "",
        "CurveZMQ: the learner's key pair, a NAME.key file from sac-keygen (empty: no CURVE; "
        "docs/RELIABILITY.md)"),
    STR("curve_server_key", curve_server_key, "",
        "CurveZMQ: the replay shards' public key, a NAME.pub file; required with curve_key and --shards"),
    STR("curve_allow", curve_allow, "",
        "CurveZMQ: file of the actors' public keys allowed to receive weights; required with curve_key "
        "when the weights endpoint is not inproc"),
    OPT("dp_size", SAC_CFG_INT, dp_size, "1", 1, 256,
        "data-parallel: learners in lock-step, averaging gradients (1: off; needs --shards; "
        "docs/LEARNER.md)"),
    OPT("dp_rank", SAC_CFG_INT, dp_rank, "0", 0, 255,
        "data-parallel: this learner's rank in [0, dp_size); rank 0 publishes weights, evaluates, "
        "checkpoints"),
    STR("dp_coord", dp_coord, "tcp://127.0.0.1:9300",
        "data-parallel: coordinator endpoint; rank 0 binds it (e.g. tcp://*:9300), the others connect to it"),
    STR("dp_collective", dp_collective, "auto",
        "data-parallel: gradient all-reduce: zmq (CPU, TCP), nccl (cuda backend), auto (nccl on cuda where "
        "built)"),
    OPT("dp_timeout_ms", SAC_CFG_INT, dp_timeout_ms, "30000", 100, 3600000,
        "data-parallel: a rank that does not answer a collective within this is taken as dead (all ranks "
        "exit)"),
    OPT("dp_connect_timeout_ms", SAC_CFG_INT, dp_connect_timeout_ms, "120000", 100, 86400000,
        "data-parallel: how long rank 0 waits at start for every rank (and the ranks for rank 0)"),
};

#define N_OPTS (sizeof k_opts / sizeof k_opts[0])

/* ---- options the chosen mode has no use for, and values no program takes ---------------- */

/* Where each option's value came from (sac_config_load_ext), for check_options. */
static unsigned char g_src[N_OPTS];

/* An option and where its setting lives in a mode that does not use it. */
typedef struct {
  const char *key, *where;
} misplaced_t;

/* With --shards the shards and actors are other processes: what the learner hosted itself in
 * the embedded default is theirs to set. */
static const misplaced_t k_not_remote[] = {
    {"learning_starts",
     "with --shards, the shards' --min_size sets when sampling starts and each sac-actor's "
     "--learning_starts its random steps"},
    {"capacity", "with --shards, each sac-replay's --capacity sets its size"},
    {"updates_per_step",
     "with --shards, the shards' --samples_per_insert sets the replay ratio (batch_size x "
     "updates per step)"},
    {"embedded_shards", "with --shards, the shards are the sac-replay processes it names"},
    {"embedded_actors", "with --shards, the actors are sac-actor processes (compose and Slurm: SAC_ACTORS)"},
    {"envs_per_actor", "with --shards, each sac-actor's --envs_per_actor"},
    {"durability", "with --shards, each sac-replay's --durability"},
    {"wal_sync_ms", "with --shards, each sac-replay's --wal_sync_ms"},
    {"priority_alpha", "with --shards, each sac-replay's --priority_alpha"},
};
/* --mode local is one loop in one process: no shards, no actors, no sockets. */
static const misplaced_t k_not_local[] = {
    {"shards", "--mode local runs in one process (the service mode, the default, takes --shards)"},
    {"weights", "--mode local publishes no weights"},
    {"embedded_shards", "--mode local keeps one replay ring of --capacity"},
    {"embedded_actors", "--mode local steps one environment in its own loop"},
    {"envs_per_actor", "--mode local steps one environment in its own loop"},
    {"publish_every", "--mode local publishes no weights"},
    {"publish_interval_ms", "--mode local publishes no weights"},
    {"weights_precision", "--mode local publishes no weights"},
    {"max_nonfinite_updates", "the service mode's guard; --mode local stops at the first NaN/Inf loss"},
    {"loss_guard", "the service mode's guard; --mode local stops at the first NaN/Inf loss"},
    {"eval_every_updates", "--mode local evaluates every --eval_every_steps"},
    {"log_interval_s", "--mode local prints progress every --log_every_steps"},
    {"sampler", "--mode local samples uniformly from its own ring"},
    {"priority_alpha", "--mode local samples uniformly from its own ring"},
    {"priority_beta", "--mode local samples uniformly from its own ring"},
    {"batches_per_request", "--mode local asks no shard for batches"},
    {"sample_precision", "--mode local asks no shard for batches"},
    {"durability", "--mode local keeps its replay in memory"},
    {"wal_sync_ms", "--mode local keeps its replay in memory"},
    {"curve_key", "--mode local opens no ZeroMQ socket"},
    {"curve_server_key", "--mode local opens no ZeroMQ socket"},
    {"curve_allow", "--mode local opens no ZeroMQ socket"},
};
/* The service (embedded default or --shards) does not run the local loop. */
static const misplaced_t k_not_service[] = {
    {"actor_lag", "--mode local only: the service's actors act with the newest weights they received"},
    {"eval_every_steps", "the service evaluates every --eval_every_updates updates"},
    {"log_every_steps", "the service prints progress every --log_interval_s seconds"},
};
/* Data-parallel settings without data-parallel training. */
static const misplaced_t k_not_single[] = {
    {"dp_rank", "without --dp_size 2 or more there is one learner"},
    {"dp_coord", "without --dp_size 2 or more there is one learner"},
    {"dp_collective", "without --dp_size 2 or more there is one learner"},
    {"dp_timeout_ms", "without --dp_size 2 or more there is one learner"},
    {"dp_connect_timeout_ms", "without --dp_size 2 or more there is one learner"},
};
/* Settings of the cuda backend. */
static const misplaced_t k_not_cpu[] = {
    {"graphs", "CUDA graphs are the cuda backend's (--backend cuda)"},
    {"device", "the GPU is the cuda backend's (--backend cuda)"},
};

static const char *src_name(int src, const char *key, char *buf, size_t cap) {
  switch (src) {
  case SAC_CFG_SRC_FILE:
    return "the config file";
  case SAC_CFG_SRC_ENV: {
    size_t n = (size_t)snprintf(buf, cap, "environment variable SAC_");
    for (const char *p = key; *p && n + 1 < cap; p++)
      buf[n++] = *p == '-' ? '_' : (char)(*p >= 'a' && *p <= 'z' ? *p - 'a' + 'A' : *p);
    buf[n] = '\0';
    return buf;
  }
  default:
    return "the command line";
  }
}

/* Refuses each option of list[0, n) that the user set on the command line. One from a config
 * file or the environment, where it differs from the default, is logged, not refused: one
 * file and one environment serve every program of a deployment (docker compose, Slurm),
 * and a run's config.txt, given back with --config to resume it, holds every option. Values
 * a preset or an old name with several meanings (log_interval) set are not the user's choice
 * of this option. Returns the number refused. */
static int refuse_unused(const learner_cfg_t *c, const misplaced_t *list, size_t n) {
  int refused = 0;
  for (size_t i = 0; i < n; i++) {
    size_t k = 0;
    while (k < N_OPTS && strcmp(k_opts[k].key, list[i].key) != 0)
      k++;
    int src = k < N_OPTS ? g_src[k] : SAC_CFG_SRC_DEFAULT;
    if (src & SAC_CFG_SRC_SHARED || src < SAC_CFG_SRC_FILE)
      continue;
    char buf[96];
    const char *from = src_name(src, list[i].key, buf, sizeof buf);
    if (src != SAC_CFG_SRC_CLI) {
      if (!sac_config_is_default(&k_opts[k], c))
        SAC_WARN("learner",
                 "%s: --%s is not used here (%s); a file or a variable shared with other programs is "
                 "not an error",
                 from, list[i].key, list[i].where);
      continue;
    }
    SAC_ERROR("learner", "%s: --%s has no effect here: %s", from, list[i].key, list[i].where);
    refused++;
  }
  return refused;
}

/* Whether value is one of the ", "-separated words of choices; logs the refusal. */
static int one_of(const char *key, const char *value, const char *choices) {
  size_t n = strlen(value);
  for (const char *p = choices; *p;) {
    size_t len = strcspn(p, ",");
    if (len == n && strncmp(p, value, n) == 0)
      return 1;
    p += len;
    p += strspn(p, ", ");
  }
  SAC_ERROR("learner", "%s \"%s\" is not one of %s", key, value, choices);
  return 0;
}

/* Everything about the options that can be refused before anything starts: values no
 * program takes, a run name that would leave --run_dir, and options the chosen mode has no
 * use for. 0, or the number of problems (each logged). */
static int check_options(const learner_cfg_t *c) {
  int bad = 0;
  const int local = strcmp(c->mode, "local") == 0;
  bad += !one_of("mode", c->mode, "service, local");
  bad += !one_of("backend", c->t.backend, "cpu, cuda, null");
  bad += !one_of("sampler", c->sampler, "uniform, prioritized");
  bad += !one_of("sample_precision", c->sample_precision, "fp32, fp16");
  bad += !one_of("weights_precision", c->weights_precision, "fp32, bf16, fp16");
  bad += !one_of("durability", c->durability, "wal, snapshot, none");
  bad += !one_of("dp_collective", c->dp_collective, "auto, zmq, nccl");
  if (strchr(c->run_name, '/') || strcmp(c->run_name, ".") == 0 || strcmp(c->run_name, "..") == 0) {
    SAC_ERROR("learner",
              "--run_name %s: a run name is one folder name inside --run_dir (no '/', not '.' or '..'); "
              "to put runs elsewhere, set --run_dir",
              c->run_name);
    bad++;
  }
  if (local) {
    bad += refuse_unused(c, k_not_local, sizeof k_not_local / sizeof k_not_local[0]);
  } else {
    bad += refuse_unused(c, k_not_service, sizeof k_not_service / sizeof k_not_service[0]);
    if (c->shards[0])
      bad += refuse_unused(c, k_not_remote, sizeof k_not_remote / sizeof k_not_remote[0]);
  }
  if (c->dp_size <= 1)
    bad += refuse_unused(c, k_not_single, sizeof k_not_single / sizeof k_not_single[0]);
  if (strcmp(c->t.backend, "cuda") != 0)
    bad += refuse_unused(c, k_not_cpu, sizeof k_not_cpu / sizeof k_not_cpu[0]);
  return bad;
}

static atomic_int g_stop;

/* What a stop does, said at once by on_stop (on common/sigstop's thread). */
typedef struct {
  const char *run_dir; /* NULL: none (data-parallel follower) */
  int embedded_actors; /* 0: remote actors */
} stop_note_t;

static void on_stop(int sig, void *ud) {
  const stop_note_t *n = ud;
  char actors[160] = "";
  if (n->embedded_actors)
    snprintf(actors, sizeof actors,
             ", stopping the %d embedded actor(s) (their drains in parallel, 1 s at most)",
             n->embedded_actors);
  SAC_INFO("learner",
           "%s: stopping: finishing this update, saving a checkpoint%s%s%s (a second Ctrl-C exits at once)",
           sac_sigstop_name(sig), n->run_dir ? " in " : "", n->run_dir ? n->run_dir : "", actors);
}

/* The metrics endpoint (docs/METRICS.md): started in main, stopped at exit. */
static sac_metrics_t *g_metrics;
static sac_http_t *g_http;
static void metrics_stop(void) {
  sac_http_stop(&g_http);
  sac_metrics_destroy(&g_metrics);
}

/* The process's peak resident set (VmHWM of /proc/self/status) in MiB, for the result
 * line: the footprint a run needed (issue 17; tests/footprint/footprint.sh bounds it).
 * -1 where /proc is not mounted. */
static double peak_rss_mib(void) {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f)
    return -1;
  char line[256];
  double kib = -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "VmHWM: %lf kB", &kib) == 1)
      break;
  fclose(f);
  return kib < 0 ? -1 : kib / 1024.0;
}

static const char *g_argv0 = "sac-learner"; /* how the user started it: the resume line repeats it */

/* The run directory of every mode: a new one, or with --resume the run's own, its
 * metrics.csv kept up to the checkpoint. 0, or the exit code. */
static int open_rundir(const learner_cfg_t *c, sac_rundir_t *rd) {
  if (!c->resume[0])
    return sac_rundir_open(rd, c->run_dir, c->run_name, c->t.env, k_opts, sizeof k_opts / sizeof k_opts[0], c)
               ? 1
               : 0;
  char ck[1100];
  sac_ckpt_counters_t cnt = {0};
  snprintf(ck, sizeof ck, "%s/checkpoint.bin", c->resume);
  sac_checkpoint_peek(ck, &cnt, NULL);
  return sac_rundir_reopen(rd, c->resume, c->t.env, (int64_t)cnt.env_steps) ? 2 : 0;
}

/* --resume DIR, before anything starts: 1 when the run already reached total_steps (said
 * so on stdout), 2 when there is nothing to resume from, 0 to go on, with the
 * configuration the resumed run uses written back into DIR/config.txt. */
static int check_resume(const learner_cfg_t *c) {
  char ck[1100];
  sac_ckpt_counters_t cnt;
  snprintf(ck, sizeof ck, "%s/checkpoint.bin", c->resume);
  int rc = sac_checkpoint_peek(ck, &cnt, NULL);
  if (rc == SAC_ENOTFOUND)
    SAC_ERROR("learner",
              "--resume %s: no checkpoint.bin there: the run stopped before its first checkpoint (every "
              "--checkpoint_every updates, and at the end); start it again",
              c->resume);
  if (rc)
    return 2;
  if ((int64_t)cnt.env_steps >= c->t.total_steps) {
    printf(
        "run %s is finished: %llu of %lld environment steps, %llu updates, %llu episodes, best evaluation "
        "return %.1f; nothing to resume (to train it further: sac-learner --resume %s --total_steps N, N > "
        "%llu)\n",
        c->resume, (unsigned long long)cnt.env_steps, (long long)c->t.total_steps,
        (unsigned long long)cnt.updates, (unsigned long long)cnt.episodes, cnt.best_eval_return, c->resume,
        (unsigned long long)cnt.env_steps);
    return 1;
  }
  static learner_cfg_t saved; /* as a new run would load it: without --resume */
  saved = *c;
  saved.resume[0] = '\0';
  return sac_rundir_rewrite_config(c->resume, k_opts, sizeof k_opts / sizeof k_opts[0], &saved, NULL) ? 2 : 0;
}

static int run_local(learner_cfg_t *c);

static int run_service(const learner_cfg_t *c) {
  sac_learner_cfg_t lc;
  sac_learner_cfg_default(&lc);
  snprintf(lc.env, sizeof lc.env, "%s", c->t.env);
  snprintf(lc.backend, sizeof lc.backend, "%s", c->t.backend);
  snprintf(lc.precision, sizeof lc.precision, "%s", c->t.precision);
  lc.graphs = c->t.graphs;
  lc.threads = c->t.threads;
  lc.device = c->t.device;
  lc.seed = c->t.seed;
  lc.hp = c->t.hp;
  lc.total_steps = c->t.total_steps;
  lc.learning_starts = c->t.learning_starts;
  lc.updates_per_step = c->t.updates_per_step;
  lc.buffer_capacity = c->t.buffer_capacity;
  lc.eval_episodes = c->t.eval_episodes;
  lc.eval_every = c->eval_every;
  lc.publish_every = c->publish_every;
  lc.publish_interval_ms = c->publish_interval_ms;
  snprintf(lc.weights_precision, sizeof lc.weights_precision, "%s", c->weights_precision);
  lc.max_nonfinite_updates = c->max_nonfinite_updates;
  lc.loss_guard = c->loss_guard;
  lc.log_interval_s = c->log_interval_s;
  lc.quiet = c->t.quiet;
  if (strcmp(c->sampler, "uniform") != 0 && strcmp(c->sampler, "prioritized") != 0) {
    SAC_ERROR("learner", "sampler must be uniform or prioritized, not '%s'", c->sampler);
    return 2;
  }
  lc.prioritized = strcmp(c->sampler, "prioritized") == 0;
  if (strcmp(c->sample_precision, "fp32") != 0 && strcmp(c->sample_precision, "fp16") != 0) {
    SAC_ERROR("learner", "sample_precision must be fp32 or fp16, not '%s'", c->sample_precision);
    return 2;
  }
  lc.sample_precision = strcmp(c->sample_precision, "fp16") == 0 ? SAC_WIRE_F16 : SAC_WIRE_F32;
  lc.batches_per_request = c->batches_per_request;
  lc.per_alpha = c->per_alpha;
  lc.per_beta = c->per_beta;
  lc.embedded_shards = c->embedded_shards;
  if (sac_replay_durability_parse(c->durability, &lc.durability) != 0) {
    SAC_ERROR("learner", "durability must be wal, snapshot or none, not '%s'", c->durability);
    return 2;
  }
  lc.wal_sync_ms = c->wal_sync_ms;
  lc.embedded_actors = c->actors;
  lc.envs_per_actor = c->envs_per_actor;
  if (c->shards[0] && sac_learner_set_shards(&lc, c->shards))
    return 2;
  if (sac_learner_check_cfg(&lc, NULL, 0) != 0) /* before anything starts (issue 14) */
    return 2;
  const char *w = c->weights[0] ? c->weights : (lc.n_shards ? "tcp://*:5570" : "inproc://sacfleet-weights");
  /* CurveZMQ (docs/RELIABILITY.md): the weights PUB binds, the shard DEALERs connect;
   * the embedded default's inproc sockets need none */
  static sac_net_curve_t curve;
  unsigned roles =
      (strncmp(w, "inproc://", 9) != 0 ? SAC_AUTH_BINDS : 0) | (lc.n_shards ? SAC_AUTH_CONNECTS : 0);
  if (sac_auth_configure(c->curve_key, c->curve_server_key, c->curve_allow, roles, &curve) != 0)
    return 2;
  lc.curve = &curve;
  static sac_rundir_t rd; /* large: keep it off the stack */
  /* data-parallel: rank 0 owns the run directory (and the checkpoint every rank resumes from) */
  const int dp_follower = c->dp_size > 1 && c->dp_rank > 0;
  if (dp_follower) {
    if (c->resume[0])
      SAC_INFO("learner", "data-parallel rank %d: --resume is rank 0's; this rank takes rank 0's state",
               c->dp_rank);
  } else {
    int orc = open_rundir(c, &rd);
    if (orc)
      return orc;
    if (c->resume[0])
      snprintf(lc.resume, sizeof lc.resume, "%s/checkpoint.bin", c->resume);
  }
  lc.rundir = dp_follower ? NULL : &rd;
  lc.metrics = g_metrics;
  lc.http = g_http;
  lc.checkpoint_every = c->checkpoint_every;
  lc.dp.rank = c->dp_rank;
  lc.dp.size = c->dp_size;
  snprintf(lc.dp.coord, sizeof lc.dp.coord, "%s", c->dp_coord);
  snprintf(lc.dp.collective, sizeof lc.dp.collective, "%s", c->dp_collective);
  lc.dp.timeout_ms = c->dp_timeout_ms;
  lc.dp.connect_timeout_ms = c->dp_connect_timeout_ms;
  snprintf(lc.weights_endpoint, sizeof lc.weights_endpoint, "%s", w);
  static stop_note_t note;
  note = (stop_note_t){dp_follower ? NULL : rd.path, lc.n_shards ? 0 : lc.embedded_actors};
  sac_sigstop_install("sac-learner", &g_stop, on_stop, &note);
  SAC_INFO("learner", "training on %s for %lld steps (backend %s, seed %llu)", lc.env,
           (long long)lc.total_steps, lc.backend, (unsigned long long)lc.seed);
  sac_learner_result_t res;
  int rc = sac_learner_run(&lc, &g_stop, &res);
  sac_net_curve_clear(&curve);
  const int have_tb = rd.tb != NULL;
  /* a run that made no update (stopped or failed before it began) leaves no directory */
  const int kept = dp_follower || c->resume[0] || res.updates > 0 || (rc == 0 && !res.interrupted) ||
                   sac_rundir_discard(&rd) != 0;
  if (!kept)
    SAC_INFO("learner", "no update was made: removed the run directory %s", rd.path);
  sac_rundir_close(&rd);
  if (rc) {
    fprintf(stderr, "sac-learner: %s\n", sac_strerror(rc));
    return rc == SAC_ECONFIG || rc == SAC_ENOTFOUND || rc == SAC_EINVAL || rc == SAC_EPLUGIN ? 2 : 1;
  }
  if (dp_follower) { /* no evaluation and no run directory here: rank 0 has them */
    printf("result: data-parallel rank %d of %d: env %s  steps %lld  updates %lld  wall %.1f s  %.0f "
           "updates/s  peak RSS %.1f MiB\n",
           c->dp_rank, c->dp_size, lc.env, (long long)res.env_steps, (long long)res.updates, res.wall_seconds,
           res.updates_per_second, peak_rss_mib());
    return 0;
  }
  printf(
      "result: env %s  steps %lld  updates %lld  episodes %lld  final eval return %.1f (best %.1f) over %d "
      "episodes  wall %.1f s  %.0f updates/s  %.0f steps/s  policy version %llu  peak RSS %.1f MiB\n",
      lc.env, (long long)res.env_steps, (long long)res.updates, (long long)res.episodes,
      res.final_eval_return, res.best_eval_return, lc.eval_episodes, res.wall_seconds, res.updates_per_second,
      res.env_steps_per_second, (unsigned long long)res.policy_version, peak_rss_mib());
  if (!kept) {
    printf("interrupted before the first update (%lld of %lld steps): nothing to resume; start it again\n",
           (long long)res.env_steps, (long long)lc.total_steps);
    return sac_sigstop_exit_code(0);
  }
  printf("results in %s: config.txt, metrics.csv, curve.svg, policy.bin, checkpoint.bin\n", rd.path);
  if (have_tb)
    printf("TensorBoard: tensorboard --logdir %s\n", rd.path);
  if (res.interrupted) {
    printf("interrupted at %lld of %lld steps (%lld updates); resume with: %s --resume %s\n",
           (long long)res.env_steps, (long long)lc.total_steps, (long long)res.updates, g_argv0, rd.path);
    return sac_sigstop_exit_code(0);
  }
  return 0;
}

int main(int argc, char **argv) {
  learner_cfg_t c;
  memset(&c, 0, sizeof c);
  if (argc > 0 && argv[0][0])
    g_argv0 = argv[0];
  sac_train_cfg_default(&c.t);
  int action;
  if (sac_rundir_resume_argv(&argc, &argv) != 0) /* --resume DIR alone: DIR/config.txt first */
    return 2;
  if (sac_config_load_ext(k_opts, N_OPTS, &c, argc, argv,
                          "sac-learner: trains a Soft Actor-Critic agent and reports its evaluation return",
                          &action, g_src))
    return 2;
  if (action == SAC_CFG_EXIT_OK)
    return 0;
  if (sac_log_configure(c.log_level, c.log_json, "learner"))
    return 2;
  if (sac_env_apply_module(c.t.env, sizeof c.t.env, c.env_module))
    return 2;
  if (sac_env_check(c.t.env) != 0) /* a typo or a plugin this build lacks: said before anything starts */
    return 2;
  {
    size_t k = 0;
    while (strcmp(k_opts[k].key, "preset") != 0)
      k++;
    char chosen[sizeof c.preset];
    if (sac_preset_apply(k_opts, N_OPTS, &c, c.preset, c.t.env, "learner", g_src,
                         (g_src[k] & ~SAC_CFG_SRC_SHARED) == SAC_CFG_SRC_FILE, chosen, sizeof chosen) != 0)
      return 2;
    snprintf(c.preset, sizeof c.preset, "%s", chosen); /* the run's config.txt records the file */
  }
  if (check_options(&c) != 0)
    return 2;
  /* metrics on loopback unless the learner is part of a cluster (--shards) or told otherwise */
  if (!c.metrics_addr[0])
    snprintf(c.metrics_addr, sizeof c.metrics_addr, "%s",
             strcmp(c.mode, "service") == 0 && c.shards[0] ? "0.0.0.0" : "127.0.0.1");
  if (c.metrics_port >= 0 && (g_metrics = sac_metrics_new()) != NULL) {
    if (sac_metrics_add_process(g_metrics) != 0 ||
        sac_metrics_add_build_info(g_metrics, "sac-learner", SAC_VERSION) != 0 ||
        sac_auth_metrics_register(g_metrics) != 0)
      SAC_WARN("learner", "some metrics series are missing (out of memory)");
    g_http = sac_http_serve_metrics("learner", c.metrics_addr, c.metrics_port, g_metrics);
    atexit(metrics_stop);
  }
  if (sac_device_parse(c.device, &c.t.device) != 0)
    return 2;
  sac_hparams_t *hp = &c.t.hp;
  hp->hidden = c.hidden;
  hp->depth = c.depth;
  hp->batch = c.batch;
  hp->lr_actor = (float)(c.lr_actor >= 0 ? c.lr_actor : c.lr);
  hp->lr_critic = (float)(c.lr_critic >= 0 ? c.lr_critic : c.lr);
  hp->lr_alpha = (float)(c.lr_alpha >= 0 ? c.lr_alpha : c.lr);
  hp->gamma = (float)c.gamma;
  hp->tau = (float)c.tau;
  hp->init_alpha = (float)c.init_alpha;
  hp->autotune_alpha = c.autotune_alpha;
  hp->target_entropy = c.target_entropy == 0.0 ? NAN : (float)c.target_entropy;
  hp->log_std_min = (float)c.log_std_min;
  hp->log_std_max = (float)c.log_std_max;
  hp->policy_delay = c.policy_delay;
  { /* sizes the backends cannot index, refused before the environment is even made (its
     * observation and action sizes are checked again at start) */
    sac_hparams_t probe = *hp;
    probe.obs_dim = probe.act_dim = 1;
    char why[320];
    if (sac_hparams_check(&probe, why, sizeof why) != 0) {
      SAC_ERROR("learner", "%s", why);
      return 2;
    }
  }
  if (c.dp_size > 1 && (c.dp_rank >= c.dp_size || strcmp(c.mode, "service") != 0 || !c.shards[0])) {
    SAC_ERROR("learner",
              "data-parallel: dp_rank (%d) must be below dp_size (%d), with --mode service and --shards",
              c.dp_rank, c.dp_size);
    return 2;
  }
  if (strcmp(c.mode, "service") != 0 && strcmp(c.mode, "local") != 0) {
    SAC_ERROR("learner", "mode \"%s\" is not one of service, local", c.mode);
    return 2;
  }
  if (c.resume[0] && !(c.dp_size > 1 && c.dp_rank > 0)) {
    int rc = check_resume(&c);
    if (rc)
      return rc == 1 ? 0 : rc;
  }
  if (strcmp(c.mode, "service") == 0)
    return run_service(&c);
  return run_local(&c);
}

/* --mode local: the single-process trainer (train_local.h), with the same run directory. */
static int run_local(learner_cfg_t *c) {
  if (c->curve_key[0] || c->curve_server_key[0] || c->curve_allow[0])
    SAC_WARN("learner", "the curve_* options are not used by --mode local (it opens no ZeroMQ socket)");
  {
    int64_t cap = c->t.buffer_capacity < c->t.total_steps ? c->t.buffer_capacity : c->t.total_steps;
    if ((int64_t)c->batch > cap) { /* the local trainer updates once its ring holds a batch */
      SAC_ERROR(
          "learner",
          "--batch_size %d is more than the local replay ever holds (min(--capacity, --total_steps) "
          "= %lld): no update would run",
          c->batch, (long long)cap);
      return 2;
    }
  }
  if (c->t.learning_starts >= c->t.total_steps)
    SAC_WARN("learner", "learning_starts (%lld) >= total_steps (%lld): no update will run",
             (long long)c->t.learning_starts, (long long)c->t.total_steps);

  static sac_rundir_t rd; /* large: keep it off the stack */
  int rc = open_rundir(c, &rd);
  if (rc)
    return rc;
  c->t.rundir = &rd;
  c->t.metrics = g_metrics;
  c->t.checkpoint_every = c->checkpoint_every;
  if (c->resume[0])
    snprintf(c->t.resume, sizeof c->t.resume, "%s/checkpoint.bin", c->resume);
  c->t.stop = &g_stop;
  c->t.http = g_http;
  static stop_note_t note;
  note = (stop_note_t){rd.path, 0};
  sac_sigstop_install("sac-learner", &g_stop, on_stop, &note);
  SAC_INFO("learner", "training on %s for %lld steps (backend %s, seed %llu)", c->t.env,
           (long long)c->t.total_steps, c->t.backend, (unsigned long long)c->t.seed);
  sac_train_result_t res;
  rc = sac_train_local(&c->t, NULL, NULL, &res);
  const int have_tb = rd.tb != NULL;
  sac_rundir_close(&rd);
  if (rc) {
    fprintf(stderr, "sac-learner: %s\n", sac_strerror(rc));
    return rc == SAC_ECONFIG || rc == SAC_ENOTFOUND || rc == SAC_EINVAL || rc == SAC_EPLUGIN ? 2 : 1;
  }
  printf(
      "result: env %s  steps %lld  updates %lld  episodes %lld  final eval return %.1f (best %.1f) over %d "
      "episodes  wall %.1f s  %.0f updates/s  peak RSS %.1f MiB\n",
      c->t.env, (long long)res.steps, (long long)res.updates, (long long)res.episodes, res.final_eval_return,
      res.best_eval_return, c->t.eval_episodes, res.wall_seconds, res.updates_per_second, peak_rss_mib());
  printf("results in %s: config.txt, metrics.csv, curve.svg, policy.bin, checkpoint.bin\n", rd.path);
  if (have_tb)
    printf("TensorBoard: tensorboard --logdir %s\n", rd.path);
  if (res.interrupted) {
    printf("interrupted at %lld of %lld steps (%lld updates); resume with: %s --resume %s\n",
           (long long)res.steps, (long long)c->t.total_steps, (long long)res.updates, g_argv0, rd.path);
    return sac_sigstop_exit_code(0);
  }
  return 0;
}
