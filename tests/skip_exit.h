/* The skip helper for Criterion test binaries whose cases may all skip (the GPU tests on a
 * machine without a GPU): Criterion exits 0 when every case skipped, so CTest would say
 * Passed for a binary that ran nothing. Included once, in the test file (it defines main),
 * it makes such a binary exit 77 when it ran at least one case, none failed, and every case
 * it ran skipped (left-out cases not counted); tests/CMakeLists.txt declares SKIP_RETURN_CODE 77 for every
 * Criterion binary, so the CTest summary then says Skipped (and scripts/test.sh checks the skip against
 * tests/allowed_skips.txt).
 *
 * sac_test_gpu_present(): the fake "device present" switch. SAC_TEST_GPU_PRESENT=1 in the
 * environment says "this machine has a GPU", so a GPU test must not skip at all, not even
 * on "no device"; tests/gpu_skip_rules.sh uses it to show that a missing or broken CUDA
 * module fails the GPU tests on a machine that has a GPU, and scripts/gpu_check.sh can set
 * it on the GPU machine so that a skip there is a failure. */
#ifndef SAC_TESTS_SKIP_EXIT_H
#define SAC_TESTS_SKIP_EXIT_H

#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static size_t g_sac_skip_ran, g_sac_skip_skipped, g_sac_skip_bad;

/* Counts the cases that ran, skipped, failed. Criterion 2.4 reports a case left out by
 * --filter as skipped with the message "Test is disabled": not counted. */
ReportHook(POST_TEST)(struct criterion_test_stats *stats) {
  if (stats->test_status == CR_STATUS_SKIPPED) {
    if (stats->message && strcmp(stats->message, "Test is disabled") == 0)
      return; /* left out by --filter or .disabled: not a case that ran */
    g_sac_skip_skipped++;
  } else if (stats->test_status == CR_STATUS_FAILED || stats->crashed || stats->timed_out) {
    g_sac_skip_bad++;
  }
  g_sac_skip_ran++;
}

static inline bool sac_test_gpu_present(void) {
  const char *v = getenv("SAC_TEST_GPU_PRESENT");
  return v && strcmp(v, "1") == 0;
}

int main(int argc, char *argv[]) {
  struct criterion_test_set *tests = criterion_initialize();
  int result = 0;
  if (criterion_handle_args(argc, argv, true))
    result = !criterion_run_all_tests(tests);
  criterion_finalize(tests);
  if (result == 0 && g_sac_skip_bad == 0 && g_sac_skip_ran > 0 && g_sac_skip_skipped == g_sac_skip_ran)
    return 77;
  return result;
}

#endif
