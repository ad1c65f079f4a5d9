"""A stand-in for shared/bench/gpu_peers.py in tests/test_bench_learner_peers.sh: prints
that script's output format (one "peer-result" or "peer-failed" line per mode asked for
with --modes) with figures from $FAKE_PEERS ("mode:updates_per_s[:finite]", comma-
separated; a mode not listed prints a "peer-failed" line), so that the benchmark's parsing
and its choice of the fastest peer are checked without torch or jax. It also checks that
it was given the arguments gpu_peers.py takes (exit 2 otherwise, as argparse would)."""
import argparse
import os

p = argparse.ArgumentParser()
for a in ("--obs", "--act", "--hidden", "--layers", "--batch", "--updates", "--runs", "--scan", "--capacity"):
    p.add_argument(a, type=int, required=True)
p.add_argument("--modes", required=True)
p.add_argument("--device", required=True)
A = p.parse_args()
table = {}
for item in filter(None, os.environ.get("FAKE_PEERS", "").split(",")):
    parts = item.split(":")
    table[parts[0]] = (float(parts[1]), parts[2] if len(parts) > 2 else "1")
for mode in A.modes.split(","):
    if mode in table:
        ups, finite = table[mode]
        print(f"peer-result mode={mode} precision=fp32 batch={A.batch} hidden={A.hidden}x{A.layers} "
              f"updates_per_s={ups:.1f} us_per_update={1e6 / ups:.1f} runs={ups:.0f} torch=fake finite={finite} "
              f"device={A.device}", flush=True)
    else:
        print(f"peer-failed mode={mode} reason=ModuleNotFoundError: No module named 'fake'", flush=True)
