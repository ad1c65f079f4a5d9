#!/usr/bin/env python3
"""Reads a run directory's TensorBoard event files with TensorBoard's own reader and
compares them with its metrics.csv (tests/test_tensorboard.sh runs it).

Checks: TensorBoard's reader reads every record of each file (a CRC it rejects stops it);
every tag sacfleet writes is there; eval/return has one event per metrics.csv row,
at that row's env_steps, with its value; the train/ scalars written in the same event (rows
with updates > 0) equal the row's, and TensorBoard's scalars have them at that step; steps never go back per tag and stay within the run;
the periodic scalars (train/episode_return, perf/*, replay/size) are finite and sane.
Prints what it compared. Exit 0 when all hold, 1 otherwise.

usage: tb_check.py RUN_DIR [--metrics CSV]   (CSV: another metrics.csv, for the negative
control that a changed value is caught)
"""
import csv
import glob
import math
import os
import sys

from tensorboard.backend.event_processing import event_accumulator, event_file_loader
from tensorboard.compat.proto import event_pb2

TAGS = ["eval/return", "train/critic_loss", "train/actor_loss", "train/alpha", "train/entropy", "train/mean_q",
        "train/episode_return", "perf/updates_per_s", "perf/env_steps_per_s", "replay/size"]
CSV_COLS = {"train/critic_loss": "critic_loss", "train/actor_loss": "actor_loss", "train/alpha": "alpha",
            "train/entropy": "entropy", "train/mean_q": "mean_q"}


def close(a, b, rel, abs_):
    return abs(a - b) <= abs_ + rel * abs(b)


def main():
    run = sys.argv[1]
    metrics = sys.argv[sys.argv.index("--metrics") + 1] if "--metrics" in sys.argv else os.path.join(run, "metrics.csv")
    files = glob.glob(os.path.join(run, "events.out.tfevents.*"))
    if not files:
        print("FAIL: no events.out.tfevents.* in", run)
        return 1
    # TensorBoard's reader stops at a record whose CRC does not match: it must read every
    # record the TFRecord framing (u64 length, u32 crc, data, u32 crc) says is there
    for f in files:
        n_frames, data = 0, open(f, "rb").read()
        off = 0
        while off + 12 <= len(data):
            off += 12 + int.from_bytes(data[off:off + 8], "little") + 4
            n_frames += 1
        loaded = sum(1 for _ in event_file_loader.EventFileLoader(f).Load())
        if off != len(data) or loaded != n_frames:
            print("FAIL: %s: %d records framed (%d of %d bytes), TensorBoard read %d" %
                  (f, n_frames, off, len(data), loaded))
            return 1
    ea = event_accumulator.EventAccumulator(run, size_guidance={event_accumulator.SCALARS: 0})
    ea.Reload()
    tags = set(ea.Tags()["scalars"])
    bad = [t for t in TAGS if t not in tags]
    if bad:
        print("FAIL: tags missing:", bad, "present:", sorted(tags))
        return 1
    ev = {t: ea.Scalars(t) for t in TAGS}
    rows = list(csv.DictReader(open(metrics)))
    fails = 0
    max_step = max(int(r["env_steps"]) for r in rows)
    for t in TAGS:
        steps = [e.step for e in ev[t]]
        if steps != sorted(steps) or steps[0] < 0 or steps[-1] > max_step:
            print("FAIL: %s steps out of order or range: %s" % (t, steps[:20]))
            fails += 1
        if not all(math.isfinite(e.value) for e in ev[t]):
            print("FAIL: %s has a non-finite value" % t)
            fails += 1
    # the events that carry eval/return, in file order, each with the values written with it
    # (TensorBoard's raw reader; the accumulator keeps no grouping): one per metrics.csv row
    evals = []
    for f in sorted(files):
        for raw in event_file_loader.RawEventFileLoader(f).Load():
            e = event_pb2.Event.FromString(raw)
            vals = {v.tag: v.simple_value for v in e.summary.value}
            if "eval/return" in vals:
                evals.append((e.step, vals))
    if len(evals) != len(rows) or len(ev["eval/return"]) != len(rows):
        print("FAIL: %d eval/return events (%d in TensorBoard's accumulator), %d metrics.csv rows" %
              (len(evals), len(ev["eval/return"]), len(rows)))
        fails += 1
    compared = 0
    for r, (estep, vals) in zip(rows, evals):
        step, ret = int(r["env_steps"]), float(r["eval_return"])
        if estep != step or not close(vals["eval/return"], ret, 1e-6, 6e-5):  # the CSV has 4 decimals
            print("FAIL: eval/return at %d = %r, metrics.csv says %r at %d" % (estep, vals["eval/return"], ret, step))
            fails += 1
        compared += 1
        if int(r["updates"]) == 0:
            continue
        for tag, col in CSV_COLS.items():
            want = float(r[col])
            if tag not in vals or not close(vals[tag], want, 1e-5, 1e-30):  # %.6g in the CSV
                print("FAIL: %s at step %d: metrics.csv %r, event %r" % (tag, step, want, vals.get(tag)))
                fails += 1
            # and TensorBoard's accumulator shows that value at that step
            if not any(x.step == step and close(x.value, want, 1e-5, 1e-30) for x in ev[tag]):
                print("FAIL: %s at step %d not in TensorBoard's scalars" % (tag, step))
                fails += 1
            compared += 1
    for t in ("perf/updates_per_s", "perf/env_steps_per_s", "replay/size"):
        if not all(e.value >= 0 for e in ev[t]):
            print("FAIL: %s negative" % t)
            fails += 1
    if max(e.value for e in ev["replay/size"]) <= 0:
        print("FAIL: replay/size never above 0")
        fails += 1
    print("tb_check: %d file(s), %d tags, %d metrics.csv values compared; events per tag: %s" %
          (len(files), len(tags), compared, ", ".join("%s %d" % (t, len(ev[t])) for t in TAGS)))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
