#!/usr/bin/env python3
"""Generates the Gymnasium MuJoCo reference episodes that tests/test_mujoco.c checks step by step.

Gymnasium's *-v4 and *-v5 classes (with the MuJoCo Python package that `pip install
"gymnasium[mujoco]"` brings) are the definition of HalfCheetah, Hopper, Walker2d, Ant (-v4 and
-v5) and Humanoid-v5; envs/mujoco/mujoco_envs.c must reproduce them. Each episode starts from a
seeded Gymnasium reset and applies a fixed float32 action sequence (uniform in [-1.2, 1.2] for
episode 0, so some actions are outside the control range: MuJoCo clamps ctrl, the control
cost uses the raw action; uniform in [-0.4, 0.4] for episode 1) through gym.make's wrappers
until Gymnasium says terminated or truncated (the 1000-step time limit). Random actions end
Hopper's and Walker2d's episodes on the body angle, so each also has an episode 2 with a
constant action that ends it on the height instead (CONSTANT below).

Every step is recorded so that the C side can redo exactly that step: before it, the physics
state a MuJoCo step depends on for these models (qpos, qvel and qacc_warmstart, the solver's
warm start) is rounded to float32, written, and put back into Gymnasium with its own
env.unwrapped.set_state (which runs mj_forward) and the warm start; then env.step(action).
So the recorded state is exactly the state Gymnasium stepped from, and the test's
sac_env_mujoco_set_state + sac_env_mujoco_set_warmstart reproduce it bit for bit. (The
rounding perturbs the episode by float32 rounding per step; every recorded step is still one
Gymnasium step from the recorded state.)

File format (mujoco_<env>_<n>.bin for v4, mujoco_<env>_v5_<n>.bin for v5), little-endian:
    text header lines, the last one "end":
        sacfleet-mujoco-ref 1
        env <gymnasium id>
        generator gymnasium <version> mujoco <version> numpy <version>
        dims <nq> <nv> <nu> <obs_dim> <steps>
        end
    then <steps> records of
        float32 qpos[nq], qvel[nv], qacc_warmstart[nv], action[nu], obs_after[obs_dim]
        float64 reward, forward, ctrl_cost, contact_cost, healthy, terminated, truncated
The reward terms are Gymnasium's info entries as positive numbers: forward = reward_forward
(v4 HalfCheetah: reward_run), ctrl_cost = -reward_ctrl, contact_cost = -reward_contact,
healthy = reward_survive; NaN where Gymnasium's info does not report the term (Hopper-v4 and
Walker2d-v4 report none; HalfCheetah no healthy or contact term).

Usage: pip install "gymnasium[mujoco]" && python3 tests/data/gen_mujoco_refs.py [ENV_ID...]
(writes next to itself; all environments when no ID is given)
"""
import os
import struct
import sys
import warnings

import gymnasium as gym
import mujoco
import numpy as np

OUT = os.path.dirname(os.path.abspath(__file__))
AMP = [1.2, 0.4]  # episode 0 leaves the control range, 1 stays gentle (longer episodes)
# episode 2: a constant action whose episode ends on the healthy height, not the angle
# (Hopper: z <= 0.7 at step 129; Walker2d-v5: z <= 0.8 at step 106)
CONSTANT = {"Hopper": [0.0, 0.0, 0.5], "Walker2d": [0.0] * 6}
ENVS = ["HalfCheetah-v4", "Hopper-v4", "Walker2d-v4", "Ant-v4",
        "HalfCheetah-v5", "Hopper-v5", "Walker2d-v5", "Ant-v5", "Humanoid-v5"]


def term(info, key, sign=1.0):
    return sign * float(info[key]) if key in info else float("nan")


def run(env_id, n):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = gym.make(env_id)
    env.reset(seed=100 + n % 2)
    u = env.unwrapped
    rng = np.random.default_rng(1000 + n)
    records = []
    while True:
        qpos = u.data.qpos.astype(np.float32)
        qvel = u.data.qvel.astype(np.float32)
        warm = u.data.qacc_warmstart.astype(np.float32)
        u.set_state(qpos.astype(np.float64), qvel.astype(np.float64))
        u.data.qacc_warmstart[:] = warm.astype(np.float64)
        if n < len(AMP):
            action = rng.uniform(-AMP[n], AMP[n], size=env.action_space.shape).astype(np.float32)
        else:
            action = np.array(CONSTANT[env_id.split("-")[0]], dtype=np.float32)
        obs, r, terminated, truncated, info = env.step(action)
        fwd = term(info, "reward_forward") if "reward_forward" in info else term(info, "reward_run")
        tail = [r, fwd, term(info, "reward_ctrl", -1.0), term(info, "reward_contact", -1.0),
                term(info, "reward_survive"), float(terminated), float(truncated)]
        records.append(np.concatenate([qpos, qvel, warm, action, obs.astype(np.float32)]).astype("<f4").tobytes() +
                       struct.pack("<7d", *tail))
        if terminated or truncated:
            break
    env.close()
    base, version = env_id.split("-")
    name = "mujoco_%s%s_%d.bin" % (base.lower(), "" if version == "v4" else "_" + version, n)
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(("sacfleet-mujoco-ref 1\nenv %s\ngenerator gymnasium %s mujoco %s numpy %s\ndims %d %d %d %d %d\nend\n" %
                 (env_id, gym.__version__, mujoco.__version__, np.__version__, u.model.nq, u.model.nv, u.model.nu,
                  obs.shape[0], len(records))).encode())
        f.write(b"".join(records))
    print("%s: %d steps, %s" % (name, len(records), "terminated" if terminated else "truncated"))


def main():
    for env_id in sys.argv[1:] or ENVS:
        for n in range(3 if env_id.split("-")[0] in CONSTANT else 2):
            run(env_id, n)


if __name__ == "__main__":
    main()
