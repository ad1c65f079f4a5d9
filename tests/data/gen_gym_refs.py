#!/usr/bin/env python3
"""Generates the Gymnasium reference trajectories that tests/test_env.c replays.

Gymnasium is the definition of Pendulum-v1 and MountainCarContinuous-v0; sacfleet's
built-ins (common/env_pendulum.c, common/env_mountaincar.c) must reproduce it. Each
trajectory starts from a fixed state (set through env.unwrapped.state after a reset, as the
C test does with sac_env_set_state), applies a fixed float32 action sequence (some actions
outside the bounds, to test clipping) through gym.make's wrappers (so truncation comes from
TimeLimit), and ends at the first terminated or truncated step.

File format (CSV, one file per trajectory):
    #env,<gymnasium id>
    #generator,gymnasium <version>,numpy <version>
    #state0,<s0>,<s1>          initial state, float64, exact (repr)
    #obs0,<o0>,...             observation of the initial state, float32 (%.9g, exact)
    step,action,obs0,...,reward,terminated,truncated
    1,<action>,<obs...>,<reward>,<0/1>,<0/1>
    ...
Actions and observations are float32 written with 9 significant digits (round-trips
exactly); rewards are float64 written with 17.

Usage: pip install gymnasium && python3 tests/data/gen_gym_refs.py   (writes next to itself)
"""
import math
import os
import sys

import gymnasium as gym
import numpy as np

OUT = os.path.dirname(os.path.abspath(__file__))


def f9(x):
    return "%.9g" % float(x)


def f17(x):
    return "%.17g" % float(x)


def initial_obs(env_id, unwrapped):
    if env_id == "Pendulum-v1":
        return unwrapped._get_obs()
    return np.array(unwrapped.state, dtype=np.float32)


def run(env_id, state0, policy):
    """Runs one episode from state0; policy(t, obs) gives the action for step t (0-based).
    Returns (obs0, rows); rows are (action, obs, reward, terminated, truncated)."""
    env = gym.make(env_id)
    env.reset(seed=0)
    env.unwrapped.state = np.array(state0, dtype=np.float64)
    obs = initial_obs(env_id, env.unwrapped)
    obs0 = obs
    rows = []
    t = 0
    while True:
        action = np.array([policy(t, obs)], dtype=np.float32)
        obs, reward, terminated, truncated, _ = env.step(action)
        obs = np.asarray(obs, dtype=np.float32)
        rows.append((action[0], obs, float(reward), bool(terminated), bool(truncated)))
        t += 1
        if terminated or truncated:
            break
    env.close()
    return obs0, rows


def save(name, env_id, state0, obs0, rows):
    path = os.path.join(OUT, name + ".csv")
    n_obs = len(obs0)
    with open(path, "w") as fp:
        fp.write("#env,%s\n" % env_id)
        fp.write("#generator,gymnasium %s,numpy %s\n" % (gym.__version__, np.__version__))
        fp.write("#state0,%s\n" % ",".join(repr(float(s)) for s in state0))
        fp.write("#obs0,%s\n" % ",".join(f9(o) for o in obs0))
        names = ",".join("obs%d" % i for i in range(n_obs))
        fp.write("step,action,%s,reward,terminated,truncated\n" % names)
        for i, (a, obs, r, term, trunc) in enumerate(rows):
            fp.write("%d,%s,%s,%s,%d,%d\n" % (i + 1, f9(a), ",".join(f9(o) for o in obs), f17(r), term, trunc))
    last = rows[-1]
    print("%-28s %4d steps  terminated=%d truncated=%d" % (name, len(rows), last[3], last[4]))
    return rows


def bang_bang(amplitude, start=0):
    """Pushes along the velocity (obs[1]) with +-amplitude from step `start`, 0 before."""
    return lambda t, obs: 0.0 if t < start else (amplitude if obs[1] >= 0 else -amplitude)


def main():
    pend = "Pendulum-v1"
    mc = "MountainCarContinuous-v0"

    # Pendulum-v1: 200 steps each, never terminates, truncated at exactly 200.
    rng = np.random.default_rng(1)
    random_actions = rng.uniform(-4.0, 4.0, size=200)
    cases = [
        ("pendulum_sine", pend, (3.0, 0.0), lambda t, o: 2.5 * math.sin(0.1 * t)),
        ("pendulum_random", pend, (-0.7, 0.9), lambda t, o: random_actions[t]),
        # Large |theta| exercises angle_normalize; near-max speed exercises the speed clip.
        ("pendulum_fast_pos", pend, (20.0, 7.9), lambda t, o: 3.0),
        ("pendulum_fast_neg", pend, (-13.0, -7.95), lambda t, o: -2.0 if t % 40 < 20 else 1.5),
    ]
    for name, env_id, s0, pol in cases:
        obs0, rows = run(env_id, s0, pol)
        assert len(rows) == 200 and rows[-1][4] and not any(r[3] for r in rows), name
        assert not any(r[4] for r in rows[:-1]), name
        save(name, env_id, s0, obs0, rows)

    # MountainCarContinuous-v0.
    rng = np.random.default_rng(2)
    random_actions = rng.uniform(-1.5, 1.5, size=999)
    # Bang-bang along the velocity reaches the goal (terminated); amplitude 2.5 is clipped
    # to 1 in the dynamics but costs 0.1 * 2.5**2 in the reward.
    obs0, rows = run(mc, (-0.5, 0.0), bang_bang(1.0))
    assert rows[-1][3] and not rows[-1][4] and rows[-1][2] > 90, "bang-bang should reach the goal"
    save("mountaincar_goal", mc, (-0.5, 0.0), obs0, rows)
    obs0, rows = run(mc, (-0.45, 0.0), bang_bang(2.5))
    assert rows[-1][3] and not rows[-1][4]
    save("mountaincar_goal_clip", mc, (-0.45, 0.0), obs0, rows)
    # Random actions in [-1.5, 1.5] never get there: truncated at exactly 999.
    obs0, rows = run(mc, (-0.55, 0.0), lambda t, o: random_actions[t])
    assert len(rows) == 999 and rows[-1][4] and not any(r[3] for r in rows)
    save("mountaincar_random", mc, (-0.55, 0.0), obs0, rows)
    # Starts moving left near the wall: hits x = -1.2 (velocity zeroed), then truncated.
    obs0, rows = run(mc, (-1.1, -0.05), lambda t, o: -0.3)
    assert len(rows) == 999 and rows[-1][4]
    assert any(r[1][0] == np.float32(-1.2) and r[1][1] == 0 for r in rows), "should hit the left wall"
    save("mountaincar_wall", mc, (-1.1, -0.05), obs0, rows)
    # Idle, then bang-bang with amplitude 0.5, the start searched so that the goal is
    # reached on step 999 exactly: Gymnasium reports terminated and truncated together.
    for start in range(700, 990):
        obs0, rows = run(mc, (-0.5, 0.0), bang_bang(0.5, start))
        if len(rows) == 999 and rows[-1][3] and rows[-1][4]:
            save("mountaincar_both", mc, (-0.5, 0.0), obs0, rows)
            break
    else:
        sys.exit("no start step makes the goal coincide with the time limit")


if __name__ == "__main__":
    main()
