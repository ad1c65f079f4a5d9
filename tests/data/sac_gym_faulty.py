"""Gymnasium environments that fail on purpose, for tests/test_gym_bridge.c: imported by the
bridge through the id syntax "sac_gym_faulty:SacFaulty-v0" (the test puts tests/data on
PYTHONPATH). SacFaulty-v0 raises in step 3; SacNaN-v0 returns a NaN observation in step 2."""
import gymnasium as gym
import numpy as np


class _Faulty(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
    nan_at = None
    raise_at = None

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, dtype=np.float32), {}

    def step(self, action):
        self.t += 1
        if self.t == self.raise_at:
            raise RuntimeError("sac_gym_faulty: deliberate failure at step %d" % self.t)
        obs = np.full(2, np.nan if self.t == self.nan_at else 0.5, dtype=np.float32)
        return obs, 1.0, False, False, {}


class FaultyStep(_Faulty):
    raise_at = 3


class NaNObs(_Faulty):
    nan_at = 2


gym.register("SacFaulty-v0", entry_point=FaultyStep, max_episode_steps=100)
gym.register("SacNaN-v0", entry_point=NaNObs, max_episode_steps=100)
