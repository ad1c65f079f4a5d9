/* The learning-curve SVG (see curve.h). The layout is fixed: a plot area with a margin
 * for tick labels on the left and below, the title above and the legend under the x
 * axis's name. Every number is written with a fixed precision, so the same points give
 * the same bytes. */
#include "learner/curve.h"

#include <math.h>
#include <string.h>

#include "common/error.h"

/* Heckbert's "nice numbers": 1, 2, 2.5 or 5 times a power of ten near x (rounded, or the
 * next one up). */
static double nice_num(double x, int round_it) {
  const double e = floor(log10(x)), p = pow(10.0, e), f = x / p;
  double nf;
  if (round_it)
    nf = f < 1.5 ? 1 : f < 2.25 ? 2 : f < 3.5 ? 2.5 : f < 7.5 ? 5 : 10;
  else
    nf = f <= 1 ? 1 : f <= 2 ? 2 : f <= 2.5 ? 2.5 : f <= 5 ? 5 : 10;
  return nf * p;
}

void sac_curve_ticks(double lo, double hi, int max_ticks, double *first, double *step, int *n) {
  if (!(hi > lo)) { /* one value (or none): a unit range around it */
    const double c = isfinite(lo) ? lo : 0.0, h = fabs(c) > 1 ? 0.5 * pow(10.0, floor(log10(fabs(c)))) : 1;
    lo = c - h, hi = c + h;
  }
  if (max_ticks < 2)
    max_ticks = 2;
  /* the smallest nice step that covers [lo, hi] in at most max_ticks ticks */
  double d = nice_num((hi - lo) / (max_ticks - 1), 0);
  for (int tries = 0; tries < 8; tries++) {
    const double a = floor(lo / d) * d, b = ceil(hi / d) * d;
    const int k = (int)llround((b - a) / d) + 1;
    if (k <= max_ticks) {
      *first = a, *step = d, *n = k;
      return;
    }
    d = nice_num(d * 1.01, 0); /* the next nice step up */
  }
  *first = lo, *step = hi - lo, *n = 2;
}

void sac_curve_label(double v, double step, int si, char *buf, size_t cap) {
  if (fabs(v) < 1e-9 * step)
    v = 0.0; /* no "-0" */
  const char *suffix = "";
  if (v == 0.0) { /* "0", not "0k" or "0.0M" */
    snprintf(buf, cap, "0");
    return;
  }
  if (si && step >= 1e5) {
    v /= 1e6, step /= 1e6, suffix = "M";
  } else if (si && step >= 1e3) {
    v /= 1e3, step /= 1e3, suffix = "k";
  }
  int dec = 0; /* enough decimals for the step: 2.5 needs one, 0.25 two */
  while (dec < 9 && fabs(step * pow(10.0, dec) - llround(step * pow(10.0, dec))) > 1e-6)
    dec++;
  snprintf(buf, cap, "%.*f%s", dec, v, suffix);
}

static void put_escaped(FILE *f, const char *s) {
  for (; *s; s++) {
    switch (*s) {
    case '&':
      fputs("&amp;", f);
      break;
    case '<':
      fputs("&lt;", f);
      break;
    case '>':
      fputs("&gt;", f);
      break;
    case '"':
      fputs("&quot;", f);
      break;
    default:
      fputc(*s, f);
    }
  }
}

typedef struct {
  double W, H, L, R, T, B;   /* size and margins */
  double x0, dx, y0, dy;     /* ticks */
  int nx, ny;                /* tick counts */
  double xlo, xhi, ylo, yhi; /* the axes' ranges: the ticks' ends */
} frame_t;

static double px(const frame_t *g, double x) {
  return g->L + (x - g->xlo) / (g->xhi - g->xlo) * (g->W - g->L - g->R);
}
static double py(const frame_t *g, double y) {
  return g->T + (g->yhi - y) / (g->yhi - g->ylo) * (g->H - g->T - g->B);
}

/* The returns' range over everything drawn (bands and both lines). */
static void y_range(const sac_rundir_point_t *p, size_t n, double *lo, double *hi) {
  *lo = INFINITY, *hi = -INFINITY;
  for (size_t i = 0; i < n; i++) {
    const sac_eval_stats_t *e = &p[i].eval;
    const double v[] = {e->min, e->max, e->mean, p[i].train_return};
    for (size_t k = 0; k < sizeof v / sizeof v[0]; k++)
      if (isfinite(v[k])) {
        *lo = v[k] < *lo ? v[k] : *lo;
        *hi = v[k] > *hi ? v[k] : *hi;
      }
  }
  if (!isfinite(*lo))
    *lo = -1, *hi = 0;
}

static void layout(frame_t *g, const sac_rundir_point_t *p, size_t n) {
  *g = (frame_t){.W = 760, .H = 460, .L = 72, .R = 24, .T = 40, .B = 96};
  double xmax = 1, lo, hi;
  for (size_t i = 0; i < n; i++)
    xmax = (double)p[i].steps > xmax ? (double)p[i].steps : xmax;
  sac_curve_ticks(0, xmax, 7, &g->x0, &g->dx, &g->nx);
  y_range(p, n, &lo, &hi);
  sac_curve_ticks(lo, hi, 7, &g->y0, &g->dy, &g->ny);
  g->xlo = g->x0, g->xhi = g->x0 + g->dx * (g->nx - 1);
  g->ylo = g->y0, g->yhi = g->y0 + g->dy * (g->ny - 1);
}

static void draw_axes(FILE *f, const frame_t *g, const char *title) {
  char lab[64];
  fprintf(f, "<text x=\"%.0f\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">", g->W / 2);
  put_escaped(f, title);
  fprintf(f, ": evaluation return</text>\n");
  for (int k = 0; k < g->ny; k++) {
    const double v = g->y0 + k * g->dy, y = py(g, v);
    sac_curve_label(v, g->dy, 0, lab, sizeof lab);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", g->L, y,
            g->W - g->R, y);
    fprintf(f, "<text class=\"ytick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", g->L - 6, y + 4,
            lab);
  }
  for (int k = 0; k < g->nx; k++) {
    const double v = g->x0 + k * g->dx, x = px(g, v);
    sac_curve_label(v, g->dx, 1, lab, sizeof lab);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", x, g->T, x,
            g->H - g->B);
    fprintf(f, "<text class=\"xtick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n", x,
            g->H - g->B + 18, lab);
  }
  fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#444\"/>\n",
          g->L, g->T, g->W - g->L - g->R, g->H - g->T - g->B);
  fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">environment steps</text>\n",
          (g->L + g->W - g->R) / 2, g->H - g->B + 38);
  fprintf(
      f, "<text x=\"18\" y=\"%.0f\" text-anchor=\"middle\" transform=\"rotate(-90 18 %.0f)\">return</text>\n",
      (g->T + g->H - g->B) / 2, (g->T + g->H - g->B) / 2);
}

/* A band between lo(i) and hi(i): the upper edge left to right, the lower one back. The
 * std band stays inside min..max (with few episodes mean +- std can pass them). */
static void draw_band(FILE *f, const frame_t *g, const sac_rundir_point_t *p, size_t n, int std,
                      const char *cls, double opacity) {
  fprintf(f, "<polygon class=\"%s\" fill=\"#1f77b4\" fill-opacity=\"%.2f\" stroke=\"none\" points=\"", cls,
          opacity);
  for (size_t i = 0; i < n; i++) {
    const sac_eval_stats_t *e = &p[i].eval;
    fprintf(f, "%.1f,%.1f ", px(g, (double)p[i].steps), py(g, std ? fmin(e->mean + e->std, e->max) : e->max));
  }
  for (size_t i = n; i-- > 0;) {
    const sac_eval_stats_t *e = &p[i].eval;
    fprintf(f, "%.1f,%.1f ", px(g, (double)p[i].steps), py(g, std ? fmax(e->mean - e->std, e->min) : e->min));
  }
  fprintf(f, "\"/>\n");
}

/* The training return: a dashed line, broken where it is not known (NaN). */
static void draw_train(FILE *f, const frame_t *g, const sac_rundir_point_t *p, size_t n) {
  int open = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(p[i].train_return)) {
      if (open)
        fprintf(f, "\"/>\n");
      open = 0;
      continue;
    }
    if (!open)
      fprintf(f, "<polyline class=\"train\" fill=\"none\" stroke=\"#ff7f0e\" stroke-width=\"1.5\" "
                 "stroke-dasharray=\"6 3\" points=\"");
    open = 1;
    fprintf(f, "%.1f,%.1f ", px(g, (double)p[i].steps), py(g, p[i].train_return));
  }
  if (open)
    fprintf(f, "\"/>\n");
}

static void draw_mean(FILE *f, const frame_t *g, const sac_rundir_point_t *p, size_t n) {
  fprintf(f, "<polyline class=\"eval\" fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\" points=\"");
  for (size_t i = 0; i < n; i++)
    fprintf(f, "%.1f,%.1f ", px(g, (double)p[i].steps), py(g, p[i].eval.mean));
  fprintf(f, "\"/>\n");
  for (size_t i = 0; i < n; i++) {
    const sac_eval_stats_t *e = &p[i].eval;
    fprintf(
        f,
        "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"#1f77b4\"><title>%lld steps: mean %.1f, std %.1f, "
        "min %.1f, max %.1f over %d episodes</title></circle>\n",
        px(g, (double)p[i].steps), py(g, e->mean), (long long)p[i].steps, e->mean, e->std, e->min, e->max,
        e->episodes);
  }
}

static void draw_legend(FILE *f, const frame_t *g, const sac_rundir_point_t *p, size_t n) {
  const double y = g->H - 22, x = g->L;
  const int eps = n ? p[n - 1].eval.episodes : 0;
  fprintf(f, "<g class=\"legend\">\n");
  fprintf(f,
          "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"#1f77b4\" stroke-width=\"2\"/>\n",
          x, y, x + 24, y);
  fprintf(f, "<text x=\"%.0f\" y=\"%.0f\">evaluation mean (%d episodes)</text>\n", x + 30, y + 4, eps);
  fprintf(f,
          "<rect x=\"%.0f\" y=\"%.0f\" width=\"24\" height=\"10\" fill=\"#1f77b4\" fill-opacity=\"0.30\"/>\n",
          x + 230, y - 5);
  fprintf(f, "<text x=\"%.0f\" y=\"%.0f\">&#177;1 std</text>\n", x + 260, y + 4);
  fprintf(f,
          "<rect x=\"%.0f\" y=\"%.0f\" width=\"24\" height=\"10\" fill=\"#1f77b4\" fill-opacity=\"0.12\"/>\n",
          x + 320, y - 5);
  fprintf(f, "<text x=\"%.0f\" y=\"%.0f\">min&#8211;max</text>\n", x + 350, y + 4);
  fprintf(f,
          "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"#ff7f0e\" stroke-width=\"1.5\" "
          "stroke-dasharray=\"6 3\"/>\n",
          x + 430, y, x + 454, y);
  fprintf(f, "<text x=\"%.0f\" y=\"%.0f\">training episode return</text>\n", x + 460, y + 4);
  fprintf(f, "</g>\n");
}

int sac_curve_svg(FILE *f, const char *title, const sac_rundir_point_t *p, size_t n) {
  frame_t g;
  layout(&g, p, n);
  fprintf(
      f,
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" "
      "font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
      g.W, g.H);
  draw_axes(f, &g, title);
  if (n) {
    draw_band(f, &g, p, n, 0, "band-minmax", 0.12);
    draw_band(f, &g, p, n, 1, "band-std", 0.30);
    draw_train(f, &g, p, n);
    draw_mean(f, &g, p, n);
  }
  draw_legend(f, &g, p, n);
  fprintf(f, "</svg>\n");
  return ferror(f) ? SAC_EIO : 0;
}
