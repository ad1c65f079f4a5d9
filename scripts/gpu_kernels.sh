#!/usr/bin/env bash
# Where a cuda update's time goes, kernel by kernel (GPU machine, after gpu_check.sh or on
# its own): Nsight Compute's duration of every launch of a few eager updates of
# sac-bench-learner (cheetah, batch 256 and 1024, bf16, fused), summed per kernel name.
#
#   scripts/gpu_kernels.sh [OUTDIR]   uses build-gpu-bundle/ (scripts/gpu_check.sh --bundle),
#                                     or the binaries in $GPU_KERNELS_BIN (with the library
#                                     path already set: scripts/gpu_check.sh runs it so)
#
# Prints, per batch size, a table: kernel, launches, total us, us per launch, share.
# Needs ncu on the PATH (or in /usr/local/cuda/bin); optional: the per-op table of
# sac-bench-learner --op_profile (CUDA events, no ncu) is the check's own, and nothing in
# scripts/gpu_check.sh's verdict reads this one. Exit status 0 when both profiles ran.
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 2
out=${1:-${OUT:-/tmp}}
mkdir -p "$out" || exit 2
export PATH="$PATH:/usr/local/cuda/bin"
command -v ncu >/dev/null || { echo "gpu_kernels: no ncu"; exit 2; }
b=$(mktemp -d) || exit 2
if [ -n "${GPU_KERNELS_BIN:-}" ]; then
  bin=$GPU_KERNELS_BIN
else
  tar -C "$b" -xzf build-gpu-bundle/bundle.tar.gz || exit 2
  bin=$b/bin
  export LD_LIBRARY_PATH="$b/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
st=0
for batch in 256 1024; do
  csv="$out/kernels_b$batch.csv"
  # 30 warmup updates of 27 launches; profile the launches of updates 20..21 (54)
  # the card's own clocks and caches as a run sees them (ncu would otherwise lock the clocks
  # to base and flush the caches before every kernel)
  timeout 240 ncu --cache-control none --clock-control none --metrics gpu__time_duration.sum \
    --launch-skip 540 --launch-count 54 --csv --print-units base \
    "$bin/sac-bench-learner" --backend cuda --peer false --preset cheetah --batch "$batch" --precision bf16 \
    --graphs false --profile false --runs 1 --warmup 30 --updates 60 >"$csv" 2>"$out/ncu_b$batch.err" || st=1
  echo "== cheetah, batch $batch, bf16, eager: kernel time of two updates (ncu gpu__time_duration)"
  python3 - "$csv" <<'P' || st=1
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 5]
if not rows:
    print("no ncu rows"); sys.exit(1)
h = rows[0]
ki, vi = h.index("Kernel Name"), h.index("Metric Value")
tot = collections.defaultdict(float); cnt = collections.Counter()
for r in rows[1:]:
    try: v = float(r[vi].replace(",", ""))
    except ValueError: continue
    k = r[ki][:70]; tot[k] += v / 1e3; cnt[k] += 1
s = sum(tot.values())
print("| kernel | launches | total us | us/launch | share |")
print("| --- | --- | --- | --- | --- |")
for k, v in sorted(tot.items(), key=lambda kv: -kv[1]):
    print(f"| {k} | {cnt[k]} | {v:.1f} | {v/cnt[k]:.2f} | {100*v/s:.0f}% |")
print(f"| all | {sum(cnt.values())} | {s:.1f} | | per update {s/2:.1f} us |")
P
done
rm -rf "$b"
exit $st
