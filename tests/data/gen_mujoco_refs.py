#!/usr/bin/env python3
"""Generates the Gymnasium MuJoCo reference trajectories that tests/test_mujoco.c replays.

Gymnasium's *-v4 and *-v5 classes (with the MuJoCo Python package that `pip install
"gymnasium[mujoco]"` brings) are the definition of HalfCheetah, Hopper, Walker2d and Ant
(-v4 and -v5); envs/mujoco/mujoco_envs.c (on Debian's libmujoco 2.2.2) must reproduce them.
Each trajectory starts from the state of a seeded Gymnasium reset (its qpos/qvel are
written exactly, so the C side sets the same state instead of drawing its own noise),
applies a fixed float32 action sequence (uniform in [-1.2, 1.2] for trajectory 0, so some
actions are outside the control range: MuJoCo clamps ctrl, the control cost uses the raw
action; uniform in [-0.4, 0.4] for trajectory 1) through
gym.make's wrappers, and ends at the first terminated step or after STEPS steps.

File format (CSV, one file per trajectory, mujoco_<env>_<n>.csv for v4 and
mujoco_<env>_v5_<n>.csv for v5):
    #env,<gymnasium id>
    #generator,gymnasium <version>,mujoco <version>,numpy <version>
    #qpos0,<q0>,...            float64, exact (repr)
    #qvel0,<v0>,...            float64, exact (repr)
    #obs0,<o0>,...             observation of the initial state (%.9g)
    step,a0..,obs0..,reward,terminated
Actions are float32 written with 9 significant digits (exact); observations and rewards are
float64 written with 9 significant digits (the C plugin returns float32).

Usage: pip install "gymnasium[mujoco]" && python3 tests/data/gen_mujoco_refs.py [ENV_ID...]
(writes next to itself; all environments when no ID is given)
"""
import os
import sys
import warnings

import gymnasium as gym
import mujoco
import numpy as np

OUT = os.path.dirname(os.path.abspath(__file__))
STEPS = 40
AMP = [1.2, 0.4]  # trajectory 0 leaves the control range, 1 stays gentle (longer episodes)
ENVS = ["HalfCheetah-v4", "Hopper-v4", "Walker2d-v4", "Ant-v4",
        "HalfCheetah-v5", "Hopper-v5", "Walker2d-v5", "Ant-v5", "Humanoid-v5"]


def g9(x):
    return "%.9g" % float(x)


def run(env_id, n):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = gym.make(env_id)
    obs, _ = env.reset(seed=100 + n)
    u = env.unwrapped
    qpos0, qvel0 = u.data.qpos.copy(), u.data.qvel.copy()
    rng = np.random.default_rng(1000 + n)
    rows = []
    for t in range(STEPS):
        action = rng.uniform(-AMP[n], AMP[n], size=env.action_space.shape).astype(np.float32)
        o, r, term, trunc, _ = env.step(action)
        rows.append((action, o, r, term))
        if term or trunc:
            break
    env.close()
    base, version = env_id.split("-")
    # v4 files keep their first names; v5 ones say their version
    name = "mujoco_%s%s_%d.csv" % (base.lower(), "" if version == "v4" else "_" + version, n)
    with open(os.path.join(OUT, name), "w") as f:
        f.write("#env,%s\n" % env_id)
        f.write("#generator,gymnasium %s,mujoco %s,numpy %s\n" % (gym.__version__, mujoco.__version__, np.__version__))
        f.write("#qpos0," + ",".join(repr(float(x)) for x in qpos0) + "\n")
        f.write("#qvel0," + ",".join(repr(float(x)) for x in qvel0) + "\n")
        f.write("#obs0," + ",".join(g9(x) for x in obs) + "\n")
        na, no = len(rows[0][0]), len(rows[0][1])
        f.write("step," + ",".join("a%d" % i for i in range(na)) + "," + ",".join("o%d" % i for i in range(no)) +
                ",reward,terminated\n")
        for t, (a, o, r, term) in enumerate(rows, 1):
            f.write("%d,%s,%s,%s,%d\n" % (t, ",".join(g9(x) for x in a), ",".join(g9(x) for x in o), g9(r), int(term)))
    print("%s: %d steps%s" % (name, len(rows), " (terminated)" if rows[-1][3] else ""))


def main():
    for env_id in sys.argv[1:] or ENVS:
        for n in range(2):
            run(env_id, n)


if __name__ == "__main__":
    main()
