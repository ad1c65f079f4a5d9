/* Learning, verified: the single-process trainer takes Pendulum-v1 from random to a
 * mean deterministic evaluation return >= -200 over 10 episodes within 20,000
 * environment steps (default SAC, lr 1e-3). One seed here (label slow, about 1-3
 * minutes on 2 cores); bench/pendulum_seeds.sh runs all five. */
#include <criterion/criterion.h>

#include "learner/train_local.h"

Test(learning, pendulum_reaches_minus_200_within_20k_steps, .timeout = 900) {
  sac_train_cfg_t c;
  sac_train_cfg_default(&c);
  c.seed = 1;
  c.total_steps = 20000;
  c.eval_interval = 5000;
  c.hp.lr_actor = c.hp.lr_critic = c.hp.lr_alpha = 1e-3f;
  sac_train_result_t r;
  cr_assert_eq(sac_train_local(&c, NULL, NULL, &r), 0);
  cr_expect_eq(r.steps, 20000);
  cr_expect_eq(r.updates, 20000 - c.learning_starts);
  cr_expect_geq(r.final_eval_return, -200.0, "final evaluation return %.1f", r.final_eval_return);
}
