/* sac-actor: runs one actor (actor.h) against a learner's weights endpoint and the
 * replay shards' insert endpoints. SIGINT/SIGTERM stop it after the current step; then it
 * drains: the last batch sent and the acknowledgements awaited, up to --drain_timeout_ms; a second
 * signal exits at once (common/sigstop.h). It also stops when the learner says its run is over.
 * Exit codes: 0 stopped cleanly (SIGTERM, max_steps, the run over), 130 stopped by SIGINT,
 * 1 runtime failure, 2 bad config. */
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "actor/actor.h"
#include "actor/actor_metrics.h"
#include "common/auth.h"
#include "common/config.h"
#include "common/env.h"
#include "common/error.h"
#include "common/http.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/net.h"
#include "common/sigstop.h"

typedef struct {
  sac_actor_cfg_t a;
  int64_t actor_id;
  char shards[4096];
  char log_level[16];
  int log_json;
  char metrics_addr[64];
  int metrics_port;
  char curve_key[1024], curve_server_key[1024];
  char env_module[256];
} actor_main_cfg_t;

#define OPT(k, t, f, d, lo, hi, h)                                                                           \
  { k, t, offsetof(actor_main_cfg_t, f), 0, d, lo, hi, h }
#define STR(k, f, d, h)                                                                                      \
  { k, SAC_CFG_STRING, offsetof(actor_main_cfg_t, f), sizeof(((actor_main_cfg_t *)0)->f), d, 1, 0, h }
static const sac_cfg_opt_t k_opts[] = {
    OPT("actor_id", SAC_CFG_INT64, actor_id, "0", 0, 4095,
        "this actor's id (unique per run; seeds its streams)"),
    STR("env", a.env, "Pendulum-v1",
        "environment ID: Pendulum-v1, MountainCarContinuous-v0, HalfCheetah/Hopper/Walker2d/Ant-v4 or -v5, "
        "Humanoid-v5 (MuJoCo); gym:ID for any other Gymnasium ID (the Gymnasium bridge); "
        "plugin:PATH.so[:ARGS] "
        "for your own plugin"),
    STR("env_module", env_module, "",
        "with --env gym:ID: the Python module that registers ID, imported first (your own package)"),
    OPT("envs_per_actor", SAC_CFG_INT, a.num_envs, "1", 1, 4096,
        "environments this actor steps together (batched inference)"),
    OPT("seed", SAC_CFG_INT64, a.seed, "1", 0, 9.2e18, "run seed (the same on every process of a run)"),
    OPT("learning_starts", SAC_CFG_INT64, a.learning_starts, "500", 0, 1e15,
        "this actor's steps of uniform random actions, skipped when the first weights are already trained "
        "(500: an embedded default actor's, the learner's learning_starts 1000 over 2 actors)"),
    OPT("weights_wait_ms", SAC_CFG_INT, a.weights_wait_ms, "2000", 0, 600000,
        "at start, wait up to this long for the learner's weights before the first step"),
    OPT("max_steps", SAC_CFG_INT64, a.max_steps, "0", 0, 1e15,
        "stop after this many steps (0: run until stopped)"),
    OPT("send_rows", SAC_CFG_INT, a.send_rows, "64", 1, 65536, "rows per transition batch"),
    OPT("send_ms", SAC_CFG_INT, a.send_ms, "20", 1, 60000, "send a partial batch when it is this old (ms)"),
    OPT("inflight_batches", SAC_CFG_INT, a.window, "16", 1, 64,
        "batches sent to a shard and not yet acknowledged, at most (the shard's --inflight_batches caps it)"),
    STR("weights", a.weights_endpoint, "tcp://127.0.0.1:5570", "the learner's weights endpoint (PUB)"),
    STR("shards", shards, "tcp://127.0.0.1:5560", "comma-separated insert endpoints of the replay shards"),
    OPT("drain_timeout_ms", SAC_CFG_INT, a.drain_timeout_ms, "5000", 0, 600000,
        "at the end (SIGTERM, SIGINT or max_steps): the longest wait to send the last batch and for the "
        "acknowledgements of what was sent (ends early once all are acknowledged); what is still "
        "unacknowledged after it is logged"),
    STR("ledger", a.ledger_path, "",
        "append every batch a shard acknowledged to this file, one line each (actor/ledger.h; read by "
        "scripts/ledger_check.sh); empty: none"),
    OPT("log_interval_s", SAC_CFG_INT, a.log_interval_s, "10", 0, 86400, "seconds between progress lines"),
    STR("log_level", log_level, "info", "error, warn, info or debug"),
    OPT("log_json", SAC_CFG_BOOL, log_json, "false", 1, 0, "log lines as JSON objects"),
    STR("metrics_addr", metrics_addr, "0.0.0.0",
        "address the /metrics and /healthz endpoint binds (numeric)"),
    OPT("metrics_port", SAC_CFG_INT, metrics_port, "5582", -1, 65535,
        "port of the /metrics and /healthz endpoint (0: a free port, logged; -1: no endpoint)"),
    STR("curve_key", curve_key, "",
        "CurveZMQ: this actor's key pair, a NAME.key file from sac-keygen (empty: no CURVE; "
        "docs/RELIABILITY.md)"),
    STR("curve_server_key", curve_server_key, "",
        "CurveZMQ: the servers' (learner's and shards') public key, a NAME.pub file; required with "
        "curve_key"),
};

static atomic_int g_stop;

/* /healthz: not ready while the actor is stalled on a shard (actor.h, stalled), saying
 * which and why. */
typedef struct {
  const sac_actor_cfg_t *cfg;
  const sac_actor_stats_t *st;
} health_arg_t;
static int health(void *ud, char *why, size_t cap) {
  const health_arg_t *h = ud;
  sac_actor_stats_t *st = (sac_actor_stats_t *)h->st; /* read only, through atomics */
  int kind = atomic_load(&st->stalled), i = atomic_load(&st->stall_shard);
  if (kind == SAC_ACTOR_STALL_NONE || i < 0 || (size_t)i >= h->cfg->n_shards) {
    snprintf(why, cap, "ok");
    return 1;
  }
  snprintf(why, cap, "not ready: shard %s %s for %.0f s", h->cfg->shard_endpoints[i],
           kind == SAC_ACTOR_STALL_UNREACHABLE ? "unreachable"
                                               : "acknowledges nothing (it holds the batches back)",
           atomic_load(&st->stall_seconds));
  return 0;
}

/* The first SIGINT/SIGTERM, on common/sigstop's thread: what the actor does now. */
static void on_stop(int sig, void *ud) {
  const sac_actor_cfg_t *a = ud;
  SAC_INFO("actor",
           "actor %u: %s: stopping after this step: sending the last batch and waiting up to %d ms for the "
           "shards' acknowledgements (--drain_timeout_ms; a second Ctrl-C exits at once)",
           a->actor_id, sac_sigstop_name(sig), a->drain_timeout_ms);
}

int main(int argc, char **argv) {
  actor_main_cfg_t c;
  memset(&c, 0, sizeof c);
  sac_actor_cfg_default(&c.a);
  int action;
  if (sac_config_load(k_opts, sizeof k_opts / sizeof k_opts[0], &c, argc, argv,
                      "sac-actor: runs environments with the latest policy and streams transitions to replay",
                      &action))
    return 2;
  if (action == SAC_CFG_EXIT_OK)
    return 0;
  if (sac_log_configure(c.log_level, c.log_json, "actor"))
    return 2;
  if (sac_env_apply_module(c.a.env, sizeof c.a.env, c.env_module))
    return 2;
  if (sac_env_check(c.a.env) != 0) /* a typo or a plugin this build lacks: said before anything starts */
    return 2;
  c.a.actor_id = (uint32_t)c.actor_id;
  if (sac_actor_set_shards(&c.a, c.shards))
    return 2;
  /* the weights subscriber needs a context (it does not make its own): one for the process,
   * with CurveZMQ on it when configured (docs/RELIABILITY.md) */
  sac_net_curve_t curve;
  if (sac_auth_configure(c.curve_key, c.curve_server_key, "", SAC_AUTH_CONNECTS, &curve))
    return 2;
  sac_net_ctx_t *ctx = sac_net_ctx_new(1);
  int err = ctx ? sac_net_ctx_set_curve(ctx, &curve) : SAC_ENOMEM;
  sac_net_curve_clear(&curve);
  if (err) {
    /* set_curve logs its own failures; a context that could not be made says nothing */
    if (!ctx)
      SAC_ERROR("actor", "cannot create the ZeroMQ context: %s", sac_strerror(err));
    sac_net_ctx_destroy(&ctx);
    return 1;
  }
  c.a.ctx = ctx;
  sac_sigstop_install("sac-actor", &g_stop, on_stop, &c.a);
  sac_actor_stats_t st;
  memset(&st, 0, sizeof st);
  /* the metrics endpoint (docs/METRICS.md), stopped before st goes */
  sac_metrics_t *metrics = NULL;
  sac_http_t *http = NULL;
  if (c.metrics_port >= 0 && (metrics = sac_metrics_new()) != NULL) {
    if (sac_metrics_add_process(metrics) != 0 ||
        sac_metrics_add_build_info(metrics, "sac-actor", SAC_VERSION) != 0 ||
        sac_actor_metrics_register(metrics, &st, c.a.actor_id, NULL) != 0 ||
        sac_actor_metrics_add_insert_latency(metrics, &st, c.a.actor_id, NULL) != 0)
      SAC_WARN("actor", "some metrics series are missing (out of memory)");
    static health_arg_t ha;
    ha = (health_arg_t){&c.a, &st};
    http = sac_http_serve_metrics_health("actor", c.metrics_addr, c.metrics_port, metrics, health, &ha);
    c.a.http = http;
  }
  int rc = sac_actor_run(&c.a, &g_stop, &st);
  sac_http_stop(&http);
  sac_metrics_destroy(&metrics);
  sac_net_ctx_destroy(&ctx);
  SAC_INFO("actor",
           "actor %u done: %llu steps, %llu episodes, mean return %.1f, %llu batches sent, %llu without "
           "acknowledgement, %llu rows unsent",
           c.a.actor_id, (unsigned long long)atomic_load(&st.env_steps),
           (unsigned long long)atomic_load(&st.episodes), atomic_load(&st.mean_return),
           (unsigned long long)atomic_load(&st.batches_sent),
           (unsigned long long)atomic_load(&st.unacked_at_exit),
           (unsigned long long)atomic_load(&st.rows_unsent_at_exit));
  if (rc == SAC_ECONFIG || rc == SAC_ENOTFOUND || rc == SAC_EPLUGIN)
    return 2;
  return rc ? 1 : sac_sigstop_exit_code(0);
}
