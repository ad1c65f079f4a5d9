/* The prioritised sampler's sum tree (replay/sampler.h) on its own: nanoseconds a search
 * for a batch's stratified points searched side by side (sac_replay_sumtree_find_n, as a
 * prioritised sample makes them), one at a time (sac_replay_sumtree_find), and a batch
 * of priority updates (sac_replay_sumtree_set_n), on a tree of --leaves leaves with
 * random priorities. The yardstick, from the same run: the lines a search reads (one a
 * node level, one of leaves), read at random from a buffer of the tree's size with no
 * load waiting on another, the memory's own time for them. Each figure is the median
 * over --rounds rounds of --calls calls. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/config.h"
#include "replay/sampler.h"

typedef struct {
  int leaves, batch, rounds, calls;
} cfg_t;

#define O_(k, f, d, lo, hi, h)                                                                               \
  { k, SAC_CFG_INT, offsetof(cfg_t, f), 0, d, lo, hi, h }
static const sac_cfg_opt_t k_opts[] = {
    O_("leaves", leaves, "1000064", 16, 1e9, "leaves of the tree (the realistic benchmark's rows)"),
    O_("batch", batch, "256", 1, 65536, "points a call (a sample's rows)"),
    O_("rounds", rounds, "9", 1, 1000, "rounds; medians are reported"),
    O_("calls", calls, "2000", 1, 1e7, "calls a round"),
};

static uint64_t mix(uint64_t *s) { /* splitmix64 */
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static double unit(uint64_t *s) { return (double)(mix(s) >> 11) * (1.0 / 9007199254740992.0); }

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}
static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* A batch's points as a prioritised sample draws them: one in each of n equal strata. */
static void strata(const sac_replay_sumtree_t *t, uint64_t *s, int n, double *u) {
  const double seg = t->total / n;
  for (int k = 0; k < n; k++)
    u[k] = ((double)k + unit(s)) * seg;
}

typedef struct {
  double batched, single, set, lines; /* ns a search, a search, an update, a search's lines */
} round_t;

static round_t one_round(sac_replay_sumtree_t *t, const cfg_t *c, uint64_t *s, const uint64_t *lines,
                         size_t n_lines, volatile uint64_t *sink) {
  const int n = c->batch;
  double *u = malloc(sizeof(double) * (size_t)n);
  uint64_t *out = malloc(sizeof(uint64_t) * (size_t)n);
  float *v = malloc(sizeof(float) * (size_t)n);
  round_t r = {0, 0, 0, 0};
  for (int i = 0; i < c->calls; i++) {
    strata(t, s, n, u);
    uint64_t t0 = sac_clock_ns();
    sac_replay_sumtree_find_n(t, u, (size_t)n, out);
    r.batched += (double)(sac_clock_ns() - t0);
    *sink += out[n / 2];
    strata(t, s, n, u);
    t0 = sac_clock_ns();
    for (int k = 0; k < n; k++)
      out[k] = sac_replay_sumtree_find(t, u[k]);
    r.single += (double)(sac_clock_ns() - t0);
    *sink += out[n / 2];
    for (int k = 0; k < n; k++) /* new priorities for the rows just found, in their order */
      v[k] = (float)(0.01 + unit(s));
    t0 = sac_clock_ns();
    sac_replay_sumtree_set_n(t, out, v, (size_t)n);
    r.set += (double)(sac_clock_ns() - t0);
    /* the yardstick: as many random lines as the searches read, independent of one another */
    const size_t per = (size_t)t->levels + 1, want = per * (size_t)n;
    uint64_t acc = 0, off[64];
    t0 = sac_clock_ns();
    for (size_t k = 0; k < want;) {
      size_t m = want - k < 64 ? want - k : 64;
      for (size_t q = 0; q < m; q++)
        off[q] = (mix(s) % n_lines) * 8;
      for (size_t q = 0; q < m; q++)
        acc += lines[off[q]];
      k += m;
    }
    r.lines += (double)(sac_clock_ns() - t0);
    *sink += acc;
  }
  const double per_search = 1.0 / ((double)c->calls * n);
  r.batched *= per_search, r.single *= per_search, r.set *= per_search, r.lines *= per_search;
  free(u), free(out), free(v);
  return r;
}

int main(int argc, char **argv) {
  cfg_t c;
  int action;
  if (sac_config_load(k_opts, sizeof k_opts / sizeof k_opts[0], &c, argc, argv,
                      "sac-bench-sumtree: the prioritised sampler's sum tree, ns a search and an update",
                      &action))
    return 2;
  if (action == SAC_CFG_EXIT_OK)
    return 0;
  sac_replay_sumtree_t t;
  if (sac_replay_sumtree_init(&t, (uint64_t)c.leaves) != 0) {
    fprintf(stderr, "sac-bench-sumtree: no memory for a tree of %d leaves\n", c.leaves);
    return 1;
  }
  uint64_t s = 12345;
  for (uint64_t i = 0; i < t.n; i++)
    t.leaf[i] = (float)(0.01 + unit(&s));
  sac_replay_sumtree_rebuild(&t);
  /* the yardstick's buffer: the tree's bytes, touched once so every page is backed */
  const size_t n_lines = (t.leaf_bytes + t.node_bytes) / 64;
  uint64_t *lines = malloc(n_lines * 64);
  if (!lines) {
    fprintf(stderr, "sac-bench-sumtree: no memory for the yardstick's %zu lines\n", n_lines);
    return 1;
  }
  for (size_t i = 0; i < n_lines * 8; i++)
    lines[i] = i;
  volatile uint64_t sink = 0;
  double *b = malloc(sizeof(double) * (size_t)c.rounds * 4), *one = b + c.rounds, *set = one + c.rounds,
         *yard = set + c.rounds;
  for (int r = 0; r < c.rounds; r++) {
    round_t x = one_round(&t, &c, &s, lines, n_lines, &sink);
    b[r] = x.batched, one[r] = x.single, set[r] = x.set, yard[r] = x.lines;
  }
  const double mb = median(b, c.rounds), mo = median(one, c.rounds), ms = median(set, c.rounds),
               my = median(yard, c.rounds);
  printf(
      "sac-bench-sumtree: %d leaves (%.1f MB, %u node levels), %d points a call, median of %d rounds of %d "
      "calls\n\n",
      c.leaves, (double)(t.leaf_bytes + t.node_bytes) / 1e6, t.levels, c.batch, c.rounds, c.calls);
  printf("| measure | ns | x yardstick |\n| --- | --- | --- |\n");
  printf("| a search, the batch side by side (find_n) | %.1f | %.2f |\n", mb, mb / my);
  printf("| a search, one at a time (find) | %.1f | %.2f |\n", mo, mo / my);
  printf("| a priority update, the batch's rows (set_n) | %.1f | %.2f |\n", ms, ms / my);
  printf("| yardstick: a search's %u lines read at random, independent | %.1f | 1.00 |\n", t.levels + 1, my);
  printf("RESULT leaves=%d batch=%d levels=%u find_n_ns=%.2f find_ns=%.2f set_n_ns=%.2f lines_ns=%.2f "
         "find_n_per_lines=%.3f\n",
         c.leaves, c.batch, t.levels, mb, mo, ms, my, mb / my);
  free(b), free(lines);
  sac_replay_sumtree_close(&t);
  return 0;
}
