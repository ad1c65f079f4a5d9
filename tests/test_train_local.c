/* --mode local's steady state (learner/train_local.c): counted on the cpu backend, an
 * environment step with its update waits for the backend not once with the acting actor
 * one step late (actor_lag 1, the default), and once per step with actor_lag 0 (the
 * negative control: the count does see a wait). Launches per update: sac_update's plus
 * the batch staging's scatter. A short run (seconds). */
#include <criterion/criterion.h>
#include <math.h>

#include "learner/train_local.h"

static sac_train_result_t run(int lag) {
  sac_train_cfg_t c;
  sac_train_cfg_default(&c);
  c.seed = 3;
  c.threads = 1;
  c.total_steps = 420;
  c.learning_starts = 300;
  c.eval_interval = 0;
  c.eval_episodes = 1;
  c.log_interval = 50;
  c.quiet = 0;
  c.actor_lag = lag;
  sac_train_result_t r;
  cr_assert_eq(sac_train_local(&c, NULL, NULL, &r), 0);
  cr_assert_eq(r.updates, 120);
  return r;
}

Test(train_local, steady_state_has_no_blocking_sync_per_update, .timeout = 300) {
  sac_train_result_t r = run(1);
  cr_assert_gt(r.steady_updates, 100, "steady updates %lld", (long long)r.steady_updates);
  cr_assert_eq(r.steady_blocking_syncs, 0, "%lld blocking syncs over %lld steady updates",
               (long long)r.steady_blocking_syncs, (long long)r.steady_updates);
  cr_assert_eq(r.steady_launches, 28 * r.steady_updates, "%lld launches over %lld updates",
               (long long)r.steady_launches, (long long)r.steady_updates);
  cr_assert(isfinite(r.final_eval_return));
  sac_train_result_t c = run(0);
  cr_assert_eq(c.steady_blocking_syncs, c.steady_updates,
               "control: actor_lag 0 downloads the actor after every step (%lld syncs, %lld updates)",
               (long long)c.steady_blocking_syncs, (long long)c.steady_updates);
}
