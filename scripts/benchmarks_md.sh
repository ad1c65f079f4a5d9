#!/usr/bin/env bash
# Writes docs/BENCHMARKS.md from the benches' own output: runs each bench below from BUILD,
# and puts down the command, the machine (CPU model, cores, load average before the run)
# and what the bench printed, unedited. Rerun it to refresh the page; nothing in the page is
# typed by hand. With ONLY, only the sections whose title contains it are run again; the
# others are kept from OUT as they are (each section names its own machine).
# usage: scripts/benchmarks_md.sh [BUILD (default build)] [OUT (default docs/BENCHMARKS.md)] [ONLY]
set -euo pipefail
BUILD=${1:-build}
OUT=${2:-docs/BENCHMARKS.md}
ONLY=${3:-}
BENCHES=(
  "replay service: ingest, sampling, durability|bench/sac-bench-replay --seconds 1 --reps 3"
  "the feed a GPU learner meets (null backend, no math)|bench/sac-bench-service --runs 3 --seconds 1 --windows 3"
  "CPU learner: updates/s against the sgemm ceiling and the fastest installed peer (cheetah preset)|bench/sac-bench-learner"
)
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)
machine="$(nproc) cores, ${cpu:-unknown CPU}, $(awk '{print int($2 / 1048576 + 0.5)}' <(grep MemTotal /proc/meminfo)) GiB"
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
{
  printf '# Benchmarks\n\n'
  printf '<!-- Written by scripts/benchmarks_md.sh from the benches'"'"' output: do not edit; rerun it. -->\n\n'
  printf 'Current figures of the project'"'"'s benches, each with the command that printed it (run from\n'
  printf 'the build directory) and the machine it ran on. A loaded machine (the load average is given)\n'
  printf 'moves wall-clock rates a lot; the benches report ratios against a yardstick of the same run\n'
  printf 'where they can. What each bench measures: [REPLAY.md](REPLAY.md), [LEARNER.md](LEARNER.md),\n'
  printf '[SCALING.md](SCALING.md). Regenerate: `scripts/benchmarks_md.sh build`.\n\n'
  for b in "${BENCHES[@]}"; do
    title=${b%%|*} cmd=${b#*|}
    if [[ -n $ONLY && $title != *"$ONLY"* ]]; then
      # kept: from its heading to the next one, as OUT has it
      kept=$(awk -v h="## $title" '$0 == h { on = 1 } on && /^## / && $0 != h { exit } on { print }' "$OUT")
      if [[ -z $kept ]]; then
        echo "benchmarks_md: $OUT has no section '$title' to keep; run without ONLY" >&2
        exit 1
      fi
      printf '%s\n\n' "$kept"
      continue
    fi
    load=$(cut -d' ' -f1-3 /proc/loadavg)
    printf '## %s\n\n' "$title"
    printf 'Command: `%s`  \nMachine: %s; load average %s before the run.\n\n' "./$cmd" "$machine" "$load"
    # shellcheck disable=SC2086
    if (cd "$BUILD" && ./$cmd) >"$tmp" 2>&1; then
      printf '```\n'
      cat "$tmp"
      printf '```\n\n'
    else
      printf 'The bench failed (exit %s); its last lines:\n\n```\n%s\n```\n\n' "$?" "$(tail -n 5 "$tmp")"
    fi
  done
} >"$OUT.tmp"
mv "$OUT.tmp" "$OUT"
echo "wrote $OUT"
