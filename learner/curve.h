/* curve.svg, the learning curve of a run directory (learner/rundir.h): a dependency-free
 * SVG a browser opens. Against environment steps it draws the mean evaluation return as a
 * line with two bands over the evaluation's episodes (mean +- one standard deviation, and
 * min to max), the training episode return (the recent mean the learner reports) as a
 * dashed line, and a legend; the axes carry "nice" ticks (1, 2, 2.5 or 5 times a power of
 * ten, covering the data: 0, 5k, 10k, 15k, 20k; -1500, -1000, -500, 0), so numbers like
 * -1349 ... -99 never appear as labels. Not a plotting library: one figure, one layout. */
#ifndef SAC_LEARNER_CURVE_H
#define SAC_LEARNER_CURVE_H
#include <stddef.h>
#include <stdio.h>

#include "learner/rundir.h"

/* Ticks for an axis over [lo, hi] with at most max_ticks (>= 2) of them: *first, *step
 * and *n such that ticks first + k * step (k < n) cover [lo, hi] (first <= lo, the last
 * >= hi), with step 1, 2, 2.5 or 5 times a power of ten. lo == hi gets a range around it.
 * Cannot fail. */
void sac_curve_ticks(double lo, double hi, int max_ticks, double *first, double *step, int *n);
/* The label of tick value v on an axis of the given step into buf: as many decimals as
 * the step needs ("-1500", "0.25"); with si, steps of 1000 and more in thousands ("15k")
 * and of 100000 and more in millions ("0.5M", "2.5M"). */
void sac_curve_label(double v, double step, int si, char *buf, size_t cap);
/* Writes the SVG of the points (in step order) to f; title is escaped for XML. 0, or
 * SAC_EIO when f reports a write error. */
int sac_curve_svg(FILE *f, const char *title, const sac_rundir_point_t *p, size_t n);

#endif
