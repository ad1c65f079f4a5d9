#!/usr/bin/env python3
"""Reads a sacfleet policy file (a run directory's policy.bin; format in docs/EXPORT.md)
with NumPy alone and computes the policy's deterministic actions, as sacfleet does:
action = low + (tanh(mean(obs)) + 1) / 2 * (high - low).

    python3 policy_numpy.py runs/NAME/policy.bin [OBS ...]

prints what the file records and the action for OBS (zeros when none is given).
As a module: policy = load("policy.bin"); actions = act(policy, obs_batch).
"""
import struct
import sys

import numpy as np

ACTIVATIONS = {0: lambda x: x, 1: lambda x: np.maximum(x, np.float32(0)), 2: np.tanh}


def load(path):
    """The policy as a dict: env (ID, "" when not recorded), layers [(W, b)], sizes,
    activation, low and high (None in a format-1 file: then the actions are in [-1, 1]).
    Raises ValueError for anything that is not a whole policy file."""
    with open(path, "rb") as f:
        data = f.read()
    magic = data[:8]
    if magic not in (b"SACPOL01", b"SACPOL02"):
        raise ValueError(f"{path}: not a sacfleet policy file")
    try:
        (n_layers,) = struct.unpack_from("<I", data, 8)
        sizes = struct.unpack_from(f"<{n_layers + 1}I", data, 12)
        off = 12 + 4 * (n_layers + 1)
        activation, log_std_min, log_std_max = struct.unpack_from("<Iff", data, off)
        off += 12
        env, low, high, n_act = "", None, None, sizes[-1] // 2
        if magic == b"SACPOL02":  # the environment's ID and action bounds
            (env_len,) = struct.unpack_from("<I", data, off)
            env = data[off + 4:off + 4 + env_len].decode("utf-8")
            off += 4 + env_len
            low = np.frombuffer(data, "<f4", n_act, off)
            high = np.frombuffer(data, "<f4", n_act, off + 4 * n_act)
            off += 8 * n_act
    except (struct.error, ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: truncated or corrupt header ({e})") from None
    params = np.frombuffer(data, "<f4", offset=off) if off <= len(data) else np.empty(0, "<f4")
    layers, k = [], 0
    for n_in, n_out in zip(sizes[:-1], sizes[1:]):  # W (n_in x n_out, y = x W + b), then b
        w = params[k:k + n_in * n_out].reshape(n_in, n_out) if k + n_in * n_out <= len(params) else None
        k += n_in * n_out
        b = params[k:k + n_out]
        k += n_out
        layers.append((w, b))
    if k != len(params) or activation not in ACTIVATIONS:
        raise ValueError(f"{path}: {len(params)} parameters where the header says {k}")
    return {"env": env, "sizes": sizes, "activation": activation, "layers": layers, "low": low,
            "high": high, "log_std": (log_std_min, log_std_max)}


def act(policy, obs):
    """Deterministic actions for obs (batch x obs_dim, or one observation), in the
    environment's bounds where the file records them, else in [-1, 1]."""
    h = np.atleast_2d(np.asarray(obs, dtype=np.float32))
    layers = policy["layers"]
    for i, (w, b) in enumerate(layers):
        h = h @ w + b
        if i < len(layers) - 1:
            h = ACTIVATIONS[policy["activation"]](h)
    a = np.tanh(h[:, :policy["sizes"][-1] // 2])  # the mean half of (mean, log_std)
    if policy["low"] is None:
        return a
    return policy["low"] + np.float32(0.5) * (a + np.float32(1)) * (policy["high"] - policy["low"])


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[3].strip(), file=sys.stderr)
        return 2
    policy = load(argv[1])
    obs = np.array([float(x) for x in argv[2:]] or [0.0] * policy["sizes"][0], dtype=np.float32)
    print(f"env {policy['env'] or '(not recorded)'}  layers {'-'.join(map(str, policy['sizes']))}"
          f"  bounds {policy['low']} .. {policy['high']}")
    print("action", act(policy, obs)[0])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
