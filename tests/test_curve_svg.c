/* curve.svg (learner/curve.c, written by learner/rundir.c): the axes' ticks are "nice"
 * (1, 2, 2.5 or 5 times a power of ten, covering the data, at most the asked number), the
 * labels are short and exact ("5k", "-1500", "0.25"), and the picture holds what
 * docs/LEARNER.md promises: the evaluation mean, its +-std and min-max bands over the
 * evaluation's episodes (the std band inside min-max), the training return (broken where
 * unknown), a legend, and an escaped title. The run directory's metrics.csv keeps the
 * spread and reads back (the columns a resumed run continues from). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "learner/curve.h"
#include "learner/rundir.h"

/* step is 1, 2, 2.5 or 5 times a power of ten */
static int nice_step(double step) {
  double p = pow(10.0, floor(log10(step))), f = step / p;
  return fabs(f - 1) < 1e-9 || fabs(f - 2) < 1e-9 || fabs(f - 2.5) < 1e-9 || fabs(f - 5) < 1e-9;
}

static void check_ticks(double lo, double hi, int max_ticks) {
  double first, step;
  int n;
  sac_curve_ticks(lo, hi, max_ticks, &first, &step, &n);
  cr_assert(nice_step(step), "[%g, %g]: step %g is not nice", lo, hi, step);
  cr_assert_leq(n, max_ticks, "[%g, %g]: %d ticks, at most %d", lo, hi, n, max_ticks);
  cr_assert_geq(n, 2);
  cr_assert_leq(first, lo + 1e-9 * fabs(lo), "[%g, %g]: first tick %g above the data", lo, hi, first);
  cr_assert_geq(first + step * (n - 1), hi - 1e-9 * fabs(hi), "[%g, %g]: last tick below the data", lo, hi);
  double k = first / step;
  cr_assert(fabs(k - round(k)) < 1e-6, "[%g, %g]: tick %g is not a multiple of the step %g", lo, hi, first,
            step);
  /* not wasteful: the ticks span at most 2.5 times the data and two steps */
  if (hi > lo)
    cr_assert_lt(step * (n - 1), 2.5 * (hi - lo) + 2 * step, "[%g, %g]: %d ticks of %g", lo, hi, n, step);
}

Test(curve, ticks_are_nice_and_cover_the_data) {
  /* the ranges that gave -1349 ... -99 and 0 ... 20000 / 5 labels before */
  const double r[][2] = {{-1349.2, -99.7}, {0, 20000}, {0, 1e6},    {-1.7, 0.3},  {0.001, 0.0042},
                         {-5e5, 5029},     {3, 3},     {1e-3, 1e9}, {-200, -150}, {0, 7}};
  for (size_t i = 0; i < sizeof r / sizeof r[0]; i++)
    for (int m = 4; m <= 9; m++)
      check_ticks(r[i][0], r[i][1], m);
  double first, step;
  int n;
  sac_curve_ticks(0, 20000, 7, &first, &step, &n);
  cr_expect(first == 0 && step == 5000 && n == 5, "0..20000: %g + k x %g, %d ticks", first, step, n);
  sac_curve_ticks(-1349.2, -99.7, 7, &first, &step, &n);
  cr_expect(first == -1500 && step == 250 && n == 7, "-1349..-99: %g + k x %g, %d ticks", first, step, n);
}

Test(curve, labels_are_exact_and_short) {
  char b[32];
  const struct {
    double v, step;
    int si;
    const char *want;
  } c[] = {{-1500, 500, 0, "-1500"},  {15000, 5000, 1, "15k"}, {2.5e6, 5e5, 1, "2.5M"},
           {12500, 2500, 1, "12.5k"}, {0.25, 0.25, 0, "0.25"}, {-0.0, 0.5, 0, "0"},
           {0, 5000, 1, "0"},         {-1e-15, 1, 0, "0"},     {500, 500, 1, "500"}};
  for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
    sac_curve_label(c[i].v, c[i].step, c[i].si, b, sizeof b);
    cr_expect_str_eq(b, c[i].want, "label of %g (step %g)", c[i].v, c[i].step);
  }
}

static char *svg_of(const char *title, const sac_rundir_point_t *p, size_t n) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  cr_assert_not_null(f);
  cr_assert_eq(sac_curve_svg(f, title, p, n), 0);
  fclose(f);
  return buf;
}

static int count(const char *s, const char *what) {
  int n = 0;
  for (const char *p = s; (p = strstr(p, what)) != NULL; p++)
    n++;
  return n;
}

/* The y coordinates of a polygon's or polyline's points, in order. */
static int points_y(const char *svg, const char *cls, double *y, int cap) {
  char key[64];
  snprintf(key, sizeof key, "class=\"%s\"", cls);
  const char *p = strstr(svg, key);
  cr_assert_not_null(p, "no %s in the SVG", cls);
  p = strstr(p, "points=\"");
  cr_assert_not_null(p);
  p += 8;
  int n = 0;
  double x;
  int used;
  while (n < cap && sscanf(p, "%lf,%lf %n", &x, &y[n], &used) == 2)
    n++, p += used;
  return n;
}

static sac_rundir_point_t point(int64_t steps, double mean, double std, double lo, double hi, double train) {
  sac_rundir_point_t p = {.steps = steps, .eval = {10, mean, std, lo, hi}, .train_return = train};
  return p;
}

Test(curve, draws_mean_bands_training_return_and_legend) {
  sac_rundir_point_t p[] = {
      point(0, -1300, 200, -1600, -900, NAN), point(5000, -900, 150, -1100, -700, -1000),
      point(10000, -400, 300, -900, -150, NAN), point(15000, -200, 20, -230, -160, -300),
      point(20000, -160, 50, -170, -100, -250)};
  const size_t n = sizeof p / sizeof p[0];
  char *svg = svg_of("Pendulum-v1 <&>", p, n);
  cr_expect(strstr(svg, "Pendulum-v1 &lt;&amp;&gt;: evaluation return") != NULL, "title not escaped");
  cr_expect_eq(count(svg, "<circle"), (int)n, "one marker per evaluation");
  double mm[32], sd[32], mean[32], tr[32];
  cr_assert_eq(points_y(svg, "band-minmax", mm, 32), (int)(2 * n), "min-max band: upper and lower edge");
  cr_assert_eq(points_y(svg, "band-std", sd, 32), (int)(2 * n));
  cr_assert_eq(points_y(svg, "eval", mean, 32), (int)n);
  for (size_t i = 0; i < n; i++) {
    const size_t lo = 2 * n - 1 - i; /* the lower edge runs back */
    /* SVG y grows downwards: max above (smaller y) mean above min */
    cr_expect(mm[i] <= sd[i] + 1e-9 && sd[i] <= mean[i] + 1e-9 && mean[i] <= sd[lo] + 1e-9 &&
                  sd[lo] <= mm[lo] + 1e-9,
              "point %zu: max %.1f, mean+std %.1f, mean %.1f, mean-std %.1f, min %.1f (y)", i, mm[i], sd[i],
              mean[i], sd[lo], mm[lo]);
  }
  /* point 2's std (300) reaches past its max (-150): the band stops at max */
  cr_expect_float_eq(sd[2], mm[2], 1e-9, "the std band left min..max");
  /* the training return: NaN at 0 and 10000, so two pieces: [5000] and [15000, 20000] */
  cr_expect_eq(count(svg, "class=\"train\""), 2, "the training line is not broken where unknown");
  cr_expect_eq(points_y(svg, "train", tr, 32), 1);
  cr_expect(strstr(svg, "training episode return") && strstr(svg, "min&#8211;max") &&
                strstr(svg, "&#177;1 std") && strstr(svg, "evaluation mean (10 episodes)"),
            "legend incomplete");
  /* the ticks: 0, 5k ... 20k, and on y nice steps from below -1600 (the lowest min) to
   * above -100 (the highest max) */
  cr_expect(strstr(svg, "class=\"xtick\" x=\"72.0\" y=\"382.0\" text-anchor=\"middle\">0</text>") &&
                strstr(svg, ">5k</text>") && strstr(svg, ">20k</text>"),
            "x ticks");
  double y[16];
  int ny = 0;
  for (const char *q = svg; ny < 16 && (q = strstr(q, "class=\"ytick\"")) != NULL; q++)
    cr_assert_eq(sscanf(strchr(q, '>') + 1, "%lf", &y[ny++]), 1);
  cr_assert_geq(ny, 3);
  cr_expect(y[0] <= -1600 && y[ny - 1] >= -100, "y ticks %g .. %g do not cover -1600 .. -100", y[0],
            y[ny - 1]);
  cr_expect(nice_step(y[1] - y[0]), "y step %g", y[1] - y[0]);
  free(svg);
}

Test(curve, an_empty_run_still_draws_axes) {
  char *svg = svg_of("x", NULL, 0);
  cr_expect(strstr(svg, "</svg>") && !strstr(svg, "<circle") && !strstr(svg, "band-minmax"));
  free(svg);
}

Test(curve, run_directory_keeps_the_spread_and_reads_it_back) {
  char base[] = "/tmp/sac-curve-svg-XXXXXX";
  cr_assert_not_null(mkdtemp(base));
  static sac_rundir_t rd, back;
  int no_options = 0;
  cr_assert_eq(sac_rundir_open(&rd, base, "r", "Pendulum-v1", NULL, 0, &no_options), 0);
  sac_rundir_point_t a = point(0, -1300, 200, -1600, -900, NAN),
                     b = point(1000, -900.25, 150.5, -1100, -700, -1000);
  a.episodes = 0, b.episodes = 5, b.updates = 700;
  cr_assert_eq(sac_rundir_add_eval(&rd, &a), 0);
  cr_assert_eq(sac_rundir_add_eval(&rd, &b), 0);
  sac_rundir_close(&rd);
  char path[256];
  snprintf(path, sizeof path, "%s/r", base);
  cr_assert_eq(sac_rundir_reopen(&back, path, "Pendulum-v1", INT64_MAX), 0);
  cr_assert_eq(back.n, 2);
  cr_expect_float_eq(back.pt[1].eval.std, 150.5, 1e-9);
  cr_expect_float_eq(back.pt[1].eval.min, -1100, 1e-9);
  cr_expect_float_eq(back.pt[1].train_return, -1000, 1e-9);
  cr_expect_eq(back.pt[1].episodes, 5);
  cr_expect(isnan(back.pt[0].train_return));
  cr_expect_float_eq(sac_rundir_best(&back), -900.25, 1e-9);
  sac_rundir_close(&back);
  /* a resume from step 500 drops the row of step 1000 (the run writes it again) */
  cr_assert_eq(sac_rundir_reopen(&back, path, "Pendulum-v1", 500), 0);
  cr_expect_eq(back.n, 1);
  sac_rundir_close(&back);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", base);
  cr_expect_eq(system(cmd), 0);
}
