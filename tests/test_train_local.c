/* --mode local's steady state (learner/train_local.c): counted on the cpu backend, an
 * environment step with its update waits for the backend not once with the acting actor
 * one step late (actor_lag 1, the default), and once per step with actor_lag 0 (the
 * negative control: the count does see a wait). Launches per update: sac_update's plus
 * the batch staging's scatter. A short run (seconds). And the replay a checkpoint keeps is
 * in order (below). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/snapshot.h"

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

/* With a run directory: the replay written beside the checkpoint (replay-local.snap) holds
 * the ring's rows oldest first, also when the ring has wrapped (capacity 250 of 400 steps:
 * the rows of steps 151..400). Pendulum never terminates and truncates at 200 steps, so
 * each row's next_obs is the next row's obs but across the one episode boundary inside
 * (step 200). Control: rows taken one apart more find no such chain. */
Test(train_local, replay_beside_the_checkpoint_is_in_order_after_the_ring_wraps, .timeout = 300) {
  char base[] = "/tmp/sac-train-local-XXXXXX";
  cr_assert_not_null(mkdtemp(base));
  static sac_rundir_t rd;
  int no_options = 0;
  cr_assert_eq(sac_rundir_open(&rd, base, "r", "Pendulum-v1", NULL, 0, &no_options), 0);
  sac_train_cfg_t c;
  sac_train_cfg_default(&c);
  c.seed = 4, c.threads = 1, c.total_steps = 400, c.learning_starts = 300, c.buffer_capacity = 250;
  c.eval_interval = 0, c.eval_episodes = 1, c.log_interval = 0, c.quiet = 1, c.rundir = &rd;
  c.hp.hidden = 16, c.hp.batch = 32;
  sac_train_result_t r;
  cr_assert_eq(sac_train_local(&c, NULL, NULL, &r), 0);
  sac_rundir_close(&rd);
  char path[256];
  snprintf(path, sizeof path, "%s/r/replay-local.snap", base);
  sac_snap_reader_t sr;
  cr_assert_eq(sac_snap_reader_open(&sr, path, SAC_SNAP_KIND_REPLAY), 0);
  size_t n = (size_t)sr.payload_bytes, rows = 250, arrays = sizeof(float) * rows * (2 * 3 + 1 + 2);
  unsigned char *buf = malloc(n);
  cr_assert_eq(sac_snap_read(&sr, buf, n), 0);
  sac_snap_reader_close(&sr);
  cr_assert_gt(n, arrays);
  const float *obs = (const float *)(buf + n - arrays), *nobs = obs + rows * 3;
  int breaks = 0, control = 0;
  for (size_t k = 0; k + 2 < rows; k++) {
    breaks += memcmp(nobs + k * 3, obs + (k + 1) * 3, 3 * sizeof(float)) != 0;
    control += memcmp(nobs + k * 3, obs + (k + 2) * 3, 3 * sizeof(float)) != 0;
  }
  cr_expect_eq(breaks, 1, "%d breaks in the chain of next_obs -> obs (1: the episode boundary)", breaks);
  cr_expect_gt(control, 200, "control: rows two apart chain %d times", (int)(rows - 2) - control);
  free(buf);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", base);
  cr_expect_eq(system(cmd), 0);
}
