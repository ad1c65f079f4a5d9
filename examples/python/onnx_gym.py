#!/usr/bin/env python3
"""Plays Gymnasium episodes with a sacfleet policy exported to ONNX
(`sac-export --policy RUN_DIR --format onnx`), through onnxruntime: no sacfleet needed.

    python3 onnx_gym.py policy.onnx [--env ID] [--episodes N] [--seed S]

The environment is the one recorded in the model (its metadata's env_id) unless --env
names another; the model's actions are already in the environment's bounds. Prints each
episode's return and the mean. Needs numpy, onnxruntime and gymnasium (with mujoco for
the MuJoCo tasks).
"""
import argparse
import sys

import gymnasium as gym
import numpy as np
import onnxruntime as ort


class OnnxPolicy:
    """The exported policy: call it with observations (batch x obs_dim, or one), get
    deterministic actions (batch x act_dim) in the environment's units."""

    def __init__(self, path):
        self.session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        meta = self.session.get_modelmeta().custom_metadata_map
        self.env_id = meta["env_id"]
        self.obs_dim = int(meta["obs_dim"])
        self.low = np.array(meta["action_low"].split(","), dtype=np.float32)
        self.high = np.array(meta["action_high"].split(","), dtype=np.float32)

    def __call__(self, obs):
        obs = np.asarray(obs, dtype=np.float32).reshape(-1, self.obs_dim)
        return self.session.run(["action"], {"obs": obs})[0]


def gymnasium_id(env_id):
    """sacfleet's --env spelling to Gymnasium's: "gym:[MODULE:]ID[,ARGS]" -> ID (MODULE
    imported, so that it registers ID); a built-in or MuJoCo ID is Gymnasium's own."""
    if env_id.startswith("plugin:"):
        raise SystemExit(f"{env_id} is a C plugin, not a Gymnasium environment: give --env ID")
    if env_id.startswith("gym:"):
        env_id = env_id[4:].split(",")[0]
        if ":" in env_id:
            module, env_id = env_id.rsplit(":", 1)
            __import__(module)
    return env_id


def play(policy, env, obs):
    """Steps env from observation obs with the policy until the episode ends: (return, steps)."""
    total, steps = 0.0, 0
    while True:
        obs, reward, terminated, truncated, _ = env.step(policy(obs)[0])
        total += float(reward)
        steps += 1
        if terminated or truncated:
            return total, steps


def run_episode(policy, env, seed):
    obs, _ = env.reset(seed=seed)
    return play(policy, env, obs)


def main():
    p = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    p.add_argument("model")
    p.add_argument("--env", help="Gymnasium ID (default: the model's env_id)")
    p.add_argument("--episodes", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    policy = OnnxPolicy(a.model)
    env_id = a.env or gymnasium_id(policy.env_id)
    env = gym.make(env_id)
    returns = []
    for k in range(a.episodes):
        ret, steps = run_episode(policy, env, a.seed + k)
        returns.append(ret)
        print(f"episode {k}: return {ret:.2f} over {steps} steps")
    print(f"{env_id}: mean return {np.mean(returns):.2f} over {len(returns)} episode(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
