#!/usr/bin/env bash
# Draws evaluation curves as a dependency-free SVG: one line per seed (from sac-learner
# logs, "eval at step S: mean return R" lines) and their mean, with axes and labels.
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
    if (ymin > 0) ymin = 0
    span = ymax - ymin; if (span <= 0) span = 1
    ymax += 0.05 * span; ymin -= 0.05 * span
    printf "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" font-size=\"12\">\n", W, H
    printf "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
    printf "<text x=\"%d\" y=\"22\" font-size=\"15\">%s: deterministic evaluation return</text>\n", L, title
    # grid and ticks
    for (k = 0; k <= 5; k++) {
      v = ymin + (ymax - ymin) * k / 5; py = T + ph - ph * k / 5
      printf "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", L, py, L + pw, py
      printf "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%.0f</text>\n", L - 6, py + 4, v
      vx = xmax * k / 5; px = L + pw * k / 5
      printf "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%dk</text>\n", px, T + ph + 18, vx / 1000
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
