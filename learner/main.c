/* sac-learner: the learner binary. For now it runs the single-process trainer
 * (train_local.c) on a built-in or plugin environment and prints the evaluation
 * return; exit codes: 0 trained, 1 runtime failure, 2 bad configuration. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "common/config.h"
#include "common/error.h"
#include "common/log.h"
#include "learner/train_local.h"

typedef struct {
  sac_train_cfg_t t;
  double lr, lr_actor, lr_critic, lr_alpha, gamma, tau, init_alpha, target_entropy, log_std_min, log_std_max;
  int hidden, depth, batch, policy_delay, autotune_alpha, log_json;
  char log_level[16];
} learner_cfg_t;

#define OPT(k, t, f, d, lo, hi, h) {k, t, offsetof(learner_cfg_t, f), 0, d, lo, hi, h}
#define STR(k, f, d, h) {k, SAC_CFG_STRING, offsetof(learner_cfg_t, f), sizeof(((learner_cfg_t *)0)->f), d, 1, 0, h}
static const sac_cfg_opt_t k_opts[] = {
    STR("env", t.env, "Pendulum-v1", "environment: Pendulum-v1, MountainCarContinuous-v0, plugin:PATH.so[:ARGS]"),
    STR("backend", t.backend, "cpu", "compute backend: cpu or cuda"),
    OPT("threads", SAC_CFG_INT, t.threads, "0", 0, 1024, "cpu backend threads (0 = all cores)"),
    OPT("total_steps", SAC_CFG_INT64, t.total_steps, "20000", 1, 1e15, "environment steps to train for"),
    OPT("learning_starts", SAC_CFG_INT64, t.learning_starts, "1000", 0, 1e15,
        "uniform random actions and no updates before this many steps"),
    OPT("updates_per_step", SAC_CFG_INT, t.updates_per_step, "1", 1, 1000, "updates per environment step"),
    OPT("buffer_capacity", SAC_CFG_INT64, t.buffer_capacity, "1000000", 1, 1e12, "replay capacity (transitions)"),
    OPT("eval_interval", SAC_CFG_INT64, t.eval_interval, "5000", 0, 1e15,
        "environment steps between deterministic evaluations (0: only at the end)"),
    OPT("eval_episodes", SAC_CFG_INT, t.eval_episodes, "10", 1, 100000, "episodes per evaluation"),
    OPT("log_interval", SAC_CFG_INT64, t.log_interval, "1000", 0, 1e15, "environment steps between progress lines"),
    OPT("seed", SAC_CFG_INT64, t.seed, "1", 0, 9.2e18, "random seed (networks, noise, environments)"),
    OPT("quiet", SAC_CFG_BOOL, t.quiet, "false", 1, 0, "no progress lines"),
    OPT("hidden", SAC_CFG_INT, hidden, "256", 1, 65536, "hidden layer width (actor and critics)"),
    OPT("depth", SAC_CFG_INT, depth, "2", 1, 15, "hidden layers"),
    OPT("batch_size", SAC_CFG_INT, batch, "256", 1, 1 << 20, "batch size"),
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
    STR("log_level", log_level, "info", "error, warn, info or debug"),
    OPT("log_json", SAC_CFG_BOOL, log_json, "false", 1, 0, "log lines as JSON objects"),
};

int main(int argc, char **argv) {
  learner_cfg_t c;
  memset(&c, 0, sizeof c);
  sac_train_cfg_default(&c.t);
  int action;
  if (sac_config_load(k_opts, sizeof k_opts / sizeof k_opts[0], &c, argc, argv,
                      "sac-learner: trains a Soft Actor-Critic agent and reports its evaluation return", &action))
    return 2;
  if (action == SAC_CFG_EXIT_OK)
    return 0;
  sac_log_level_t lvl;
  if (sac_log_parse_level(c.log_level, &lvl)) {
    SAC_ERROR("learner", "log_level \"%s\" is not one of error, warn, info, debug", c.log_level);
    return 2;
  }
  sac_log_set_level(lvl);
  if (c.log_json)
    sac_log_set_json(1);
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
  if (c.t.learning_starts >= c.t.total_steps)
    SAC_WARN("learner", "learning_starts (%lld) >= total_steps (%lld): no update will run",
             (long long)c.t.learning_starts, (long long)c.t.total_steps);

  SAC_INFO("learner", "training on %s for %lld steps (backend %s, seed %llu)", c.t.env,
           (long long)c.t.total_steps, c.t.backend, (unsigned long long)c.t.seed);
  sac_train_result_t res;
  int rc = sac_train_local(&c.t, NULL, NULL, &res);
  if (rc) {
    fprintf(stderr, "sac-learner: %s\n", sac_strerror(rc));
    return rc == SAC_ENOTFOUND || rc == SAC_EINVAL || rc == SAC_EPLUGIN ? 2 : 1;
  }
  printf("result: env %s  steps %lld  updates %lld  episodes %lld  final eval return %.1f (best %.1f) over %d "
         "episodes  wall %.1f s  %.0f updates/s\n",
         c.t.env, (long long)res.steps, (long long)res.updates, (long long)res.episodes, res.final_eval_return,
         res.best_eval_return, c.t.eval_episodes, res.wall_seconds, res.updates_per_second);
  return 0;
}
