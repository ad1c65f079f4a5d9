#!/usr/bin/env bash
# Draws evaluation curves as a dependency-free SVG: one line per seed (from sac-learner
# logs, "eval at step S: mean return R" lines) and their mean, with axes and labels. The
# ticks are those of a run directory's curve.svg (learner/curve.c): 1, 2, 2.5 or 5 times a
# power of ten, covering the data.
#
# usage: bench/curve_svg.sh TITLE OUT.svg LOG...
#   e.g. bench/curve_svg.sh "HalfCheetah-v4" docs/img/halfcheetah.svg bench/out/mujoco_quality/HalfCheetah-v4_s*.log
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: $0 TITLE OUT.svg LOG..." >&2; exit 2; }
title=$1 out=$2
shift 2
for f in "$@"; do [ -r "$f" ] || { echo "cannot read $f" >&2; exit 2; }; done
# "seed_index step return" rows from every log
rows=$(i=0; for f in "$@"; do
  sed -nE "s/.*eval at step ([0-9]+): mean return (-?[0-9.]+).*/$i \1 \2/p" "$f"
  i=$((i + 1))
done)
[ -n "$rows" ] || { echo "no 'eval at step' lines in the logs" >&2; exit 1; }
names=$(for f in "$@"; do basename "$f" .log; done | tr '\n' ' ')
awk -v title="$title" -v names="$names" '
  function floor_(x) { return (x == int(x) || x >= 0) ? int(x) : int(x) - 1 }
  function nicenum(x,   e, p, f) { # the nice step at or above x
    e = floor_(log(x) / log(10)); p = 10 ^ e; f = x / p
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 2.5 ? 2.5 : f <= 5 ? 5 : 10) * p
  }
  function ticks(lo, hi, maxt,   d, a, b, k, tries) { # sets T0, TD, TN
    if (hi <= lo) { lo -= 0.5; hi += 0.5 }
    d = nicenum((hi - lo) / (maxt - 1))
    for (tries = 0; tries < 8; tries++) {
      a = floor_(lo / d) * d; b = -floor_(-hi / d) * d; k = int((b - a) / d + 0.5) + 1
      if (k <= maxt) break
      d = nicenum(d * 1.01)
    }
    T0 = a; TD = d; TN = k
  }
  function label(v, step, si,   dec, suffix) {
    if ((v < 0 ? -v : v) < 1e-9 * step) return "0"
    suffix = ""
    if (si && step >= 1e5) { v /= 1e6; step /= 1e6; suffix = "M" } else if (si && step >= 1e3) { v /= 1e3; step /= 1e3; suffix = "k" }
    for (dec = 0; dec < 9 && (step * 10 ^ dec - int(step * 10 ^ dec + 0.5))^2 > 1e-12; dec++) ;
    return sprintf("%." dec "f%s", v, suffix)
  }
  { s[NR] = $1; x[NR] = $2; y[NR] = $3; n = NR
    if ($1 + 1 > ns) ns = $1 + 1
    if (!(($2) in cnt)) steps[++nst] = $2
    cnt[$2]++; sum[$2] += $3
    if (n == 1 || $2 > xmax) xmax = $2
    if (n == 1 || $3 > ymax) ymax = $3
    if (n == 1 || $3 < ymin) ymin = $3 }
  END {
    split(names, nm, " ")
    W = 720; H = 420; L = 70; R = 170; T = 40; B = 50
    pw = W - L - R; ph = H - T - B
    ticks(ymin, ymax, 7); ymin = T0; ymax = T0 + TD * (TN - 1); y0 = T0; dy = TD; ny = TN
    ticks(0, xmax, 7); xmax = T0 + TD * (TN - 1); dx = TD; nx = TN
    printf "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" font-size=\"12\">\n", W, H
    printf "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
    printf "<text x=\"%d\" y=\"22\" font-size=\"15\">%s: deterministic evaluation return</text>\n", L, title
    # grid and ticks
    for (k = 0; k < ny; k++) {
      v = y0 + k * dy; py = T + ph - ph * (v - ymin) / (ymax - ymin)
      printf "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", L, py, L + pw, py
      printf "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", L - 6, py + 4, label(v, dy, 0)
    }
    for (k = 0; k < nx; k++) {
      vx = k * dx; px = L + pw * vx / xmax
      printf "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", px, T + ph + 18, label(vx, dx, 1)
    }
    printf "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#444\"/>\n", L, T, pw, ph
    printf "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">environment steps</text>\n", L + pw / 2, H - 10
    split("#4e79a7 #f28e2b #59a14f #e15759 #76b7b2 #edc948", col, " ")
    for (sd = 0; sd < ns; sd++) {
      pts = ""
      for (i = 1; i <= n; i++) if (s[i] == sd)
        pts = pts sprintf("%.1f,%.1f ", L + pw * x[i] / xmax, T + ph - ph * (y[i] - ymin) / (ymax - ymin))
      c = col[sd % 6 + 1]
      printf "<polyline points=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" opacity=\"0.8\"/>\n", pts, c
      printf "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2\"/>\n", L + pw + 12, T + 10 + 18 * sd, L + pw + 32, T + 10 + 18 * sd, c
      printf "<text x=\"%d\" y=\"%d\">%s</text>\n", L + pw + 38, T + 14 + 18 * sd, nm[sd + 1]
    }
    # mean over the seeds that reached each step
    for (a = 1; a <= nst; a++) for (b = a + 1; b <= nst; b++) if (steps[b] < steps[a]) { t = steps[a]; steps[a] = steps[b]; steps[b] = t }
    pts = ""
    for (a = 1; a <= nst; a++) {
      st = steps[a]
      pts = pts sprintf("%.1f,%.1f ", L + pw * st / xmax, T + ph - ph * (sum[st] / cnt[st] - ymin) / (ymax - ymin))
    }
    printf "<polyline points=\"%s\" fill=\"none\" stroke=\"black\" stroke-width=\"2.5\"/>\n", pts
    printf "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\" stroke-width=\"2.5\"/>\n", L + pw + 12, T + 10 + 18 * ns, L + pw + 32, T + 10 + 18 * ns
    printf "<text x=\"%d\" y=\"%d\">mean</text>\n", L + pw + 38, T + 14 + 18 * ns
    printf "</svg>\n"
  }' <<<"$rows" >"$out"
echo "wrote $out ($(wc -l <<<"$rows") points from $# log(s))"
