#!/usr/bin/env python3
"""The exported ONNX model, the NumPy reader of policy.bin and the Python example against
sacfleet's own inference (issue 37).

For three policy shapes (Pendulum-v1: 3/1, bounds +-2; HalfCheetah-v5: 17/6, +-1; an
11/3 policy with asymmetric non-unit bounds and a gym:MODULE:ID,ARGS name), written as
policy.bin by tests/export_ref.c with random weights:
  - `sac-export --format onnx` writes a model that onnx's checker accepts (full check,
    shape inference included), with input "obs" and output "action" whose batch
    dimension is free, and the env ID, sizes, bounds and sacfleet version in its metadata;
  - onnxruntime's actions on 256 random observations (and on a batch of one) equal
    sacfleet's own (export_ref act: sac_export_act, the actors' formula) within 1e-5:
    the same float math in another order, about 1e-7 apart;
  - examples/python/policy_numpy.py reads the same file and gives the same actions
    within 1e-5, and the same env ID and bounds.
Then examples/python/onnx_gym.py plays a Gymnasium Pendulum-v1 episode and a
HalfCheetah-v5 one (the environment named in the model), and its OnnxPolicy, played from three set initial states, gets sacfleet's own return
from the same states (export_ref pendulum: the built-in Pendulum-v1) within 1e-4
relative: Gymnasium steps in float64 and sacfleet in float32 observations, so the two
trajectories drift by rounding only.
A format-1 policy.bin (no env section) is exported with --env's bounds and refused
without it; an --env other than the recorded one is refused.
Negative controls: a policy with one weight moved by 0.05 must fail the action
comparison, and the NumPy reader must refuse a truncated file.

Usage: test_export_onnx.py SAC_EXPORT EXPORT_REF. Exit 0 pass, 1 fail, 77 skip (a Python
package missing: scripts/test.sh installs onnxruntime, onnx and gymnasium).
"""
import math
import os
import subprocess
import sys
import tempfile

try:
    import gymnasium as gym
    import numpy as np
    import onnx
    import onnxruntime as ort
except ImportError as e:
    print(f"SKIP: {e.name} is not installed (scripts/test.sh pip-installs onnxruntime, onnx, gymnasium)")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples", "python"))
import onnx_gym  # noqa: E402
import policy_numpy  # noqa: E402

TOL = 1e-5
SHAPES = [  # name, obs, hidden, depth, act, env, low, high
    ("pendulum", 3, 256, 2, 1, "Pendulum-v1", [-2.0], [2.0]),
    ("cheetah", 17, 256, 2, 6, "HalfCheetah-v5", [-1.0] * 6, [1.0] * 6),
    ("nonunit", 11, 64, 3, 3, "gym:mypkg:Arm-v0,max_steps=50", [-0.4, 0.0, -10.0], [3.0, 1.0, -2.0]),
]
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def run(*args, cwd=None):
    r = subprocess.run(args, capture_output=True, text=True, timeout=120, cwd=cwd)
    if r.returncode != 0:
        sys.exit(f"FAIL: {' '.join(args)} exited {r.returncode}: {r.stdout}{r.stderr}")
    return r.stdout


def csv(v):
    return ",".join(repr(float(x)) for x in v)


def sacfleet_actions(ref, policy, obs, d):
    obs.astype("<f4").tofile(f"{d}/obs.f32")
    run(ref, "act", policy, f"{d}/obs.f32", f"{d}/act.f32")
    return np.fromfile(f"{d}/act.f32", "<f4").reshape(len(obs), -1)


def check_model(path, name, obs_dim, act_dim, env, low, high):
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)  # raises on an invalid model
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    i, o = sess.get_inputs(), sess.get_outputs()
    check(len(i) == 1 and i[0].name == "obs" and isinstance(i[0].shape[0], str) and i[0].shape[1] == obs_dim,
          f"{name}: input obs (batch, {obs_dim}) with a free batch dimension: {i[0].name} {i[0].shape}")
    check(len(o) == 1 and o[0].name == "action" and isinstance(o[0].shape[0], str) and o[0].shape[1] == act_dim,
          f"{name}: output action (batch, {act_dim}): {o[0].name} {o[0].shape}")
    meta = sess.get_modelmeta().custom_metadata_map
    check(meta.get("env_id") == env and meta.get("obs_dim") == str(obs_dim) and meta.get("act_dim") == str(act_dim),
          f"{name}: metadata env_id {meta.get('env_id')!r}, obs_dim, act_dim")
    check(np.array_equal(np.array(meta["action_low"].split(","), np.float32), np.float32(low)) and
          np.array_equal(np.array(meta["action_high"].split(","), np.float32), np.float32(high)),
          f"{name}: metadata bounds {meta['action_low']} .. {meta['action_high']}")
    check(bool(meta.get("sacfleet_version")) and sess.get_modelmeta().producer_name == "sacfleet",
          f"{name}: sacfleet_version {meta.get('sacfleet_version')!r} and producer")
    return sess


def max_error(sess, ref, policy, d, obs):
    want = sacfleet_actions(ref, policy, obs, d)
    got = sess.run(["action"], {"obs": obs})[0]
    one = sess.run(["action"], {"obs": obs[:1]})[0]  # the batch dimension really is free
    return max(float(np.max(np.abs(got - want))), float(np.max(np.abs(one - want[:1])))), want


def main():
    export, ref = sys.argv[1], sys.argv[2]
    rng = np.random.default_rng(37)
    with tempfile.TemporaryDirectory(prefix="sac-export-onnx-") as d:
        for k, (name, obs_dim, hidden, depth, act_dim, env, low, high) in enumerate(SHAPES):
            pol = f"{d}/{name}.bin"
            run(ref, "make", pol, str(obs_dim), str(hidden), str(depth), str(act_dim), env, csv(low), csv(high),
                str(k + 1))
            run(export, f"--policy={pol}", "--format=onnx", f"--out={d}", f"--prefix={name}")
            sess = check_model(f"{d}/{name}.onnx", name, obs_dim, act_dim, env, low, high)
            obs = rng.uniform(-3, 3, (256, obs_dim)).astype(np.float32)
            err, want = max_error(sess, ref, pol, d, obs)
            check(err <= TOL, f"{name}: onnxruntime vs sacfleet, max |diff| {err:.2e} <= {TOL}")
            spread = float(np.min(np.max(want, 0) - np.min(want, 0)) / np.min(np.float32(high) - np.float32(low)))
            check(spread > 0.2, f"{name}: the actions span {spread:.2f} of the bounds (the comparison means something)")
            p = policy_numpy.load(pol)
            np_err = float(np.max(np.abs(policy_numpy.act(p, obs) - want)))
            check(p["env"] == env and np.array_equal(p["low"], np.float32(low)) and
                  np.array_equal(p["high"], np.float32(high)), f"{name}: the NumPy reader's env and bounds")
            check(np_err <= TOL, f"{name}: NumPy reader vs sacfleet, max |diff| {np_err:.2e} <= {TOL}")
            if name == "cheetah":  # negative control: a moved weight must show
                bad = f"{d}/moved.bin"
                run(ref, "make", bad, str(obs_dim), str(hidden), str(depth), str(act_dim), env, csv(low), csv(high),
                    str(k + 1), "0.05")
                run(export, f"--policy={bad}", "--format=onnx", f"--out={d}", "--prefix=moved")
                moved = ort.InferenceSession(f"{d}/moved.onnx", providers=["CPUExecutionProvider"])
                err, _ = max_error(moved, ref, pol, d, obs)
                check(err > TOL, f"control: a weight moved by 0.05 differs by {err:.2e} > {TOL}")
        with open(f"{d}/pendulum.bin", "rb") as f, open(f"{d}/cut.bin", "wb") as g:
            g.write(f.read()[:-4])
        try:
            policy_numpy.load(f"{d}/cut.bin")
            check(False, "control: the NumPy reader refuses a truncated file")
        except ValueError as e:
            check(True, f"control: the NumPy reader refuses a truncated file ({e})")
        check_format_1(d, export)
        check_example(d, ref)
    print(f"{'FAIL' if failures else 'PASS'}: {len(failures)} failed check(s)")
    return 1 if failures else 0


def check_format_1(d, export):
    """A format-1 policy.bin (no env section) takes its bounds from --env, and only then."""
    data = open(f"{d}/pendulum.bin", "rb").read()
    n = int.from_bytes(data[8:12], "little")
    head = 12 + 4 * (n + 1) + 12
    env_len = int.from_bytes(data[head:head + 4], "little")
    with open(f"{d}/old.bin", "wb") as f:  # the same policy without its env section
        f.write(b"SACPOL01" + data[8:head] + data[head + 4 + env_len + 8:])
    r = subprocess.run([export, f"--policy={d}/old.bin", "--format=onnx", f"--out={d}", "--prefix=old"],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 2 and "give --env" in r.stderr, f"format 1 without --env refused: exit {r.returncode}")
    run(export, f"--policy={d}/old.bin", "--format=onnx", f"--out={d}", "--prefix=old", "--env=Pendulum-v1")
    meta = ort.InferenceSession(f"{d}/old.onnx", providers=["CPUExecutionProvider"]).get_modelmeta()
    m = meta.custom_metadata_map
    check(m["env_id"] == "Pendulum-v1" and m["action_low"] == "-2" and m["action_high"] == "2",
          f"format 1 with --env Pendulum-v1: bounds {m['action_low']} .. {m['action_high']}")
    r = subprocess.run([export, f"--policy={d}/pendulum.bin", "--format=onnx", f"--out={d}", "--env=HalfCheetah-v5"],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 2 and "was trained on Pendulum-v1" in r.stderr, "an --env other than the recorded one refused")


def check_example(d, ref):
    """The example as a user runs it, then its policy from set states against sacfleet's."""
    model, pol = f"{d}/pendulum.onnx", f"{d}/pendulum.bin"
    example = os.path.join(HERE, "..", "examples", "python", "onnx_gym.py")
    out = run(sys.executable, example, model, "--seed", "5", cwd=d)  # MuJoCo may leave a log file in its cwd
    last = out.strip().splitlines()[-1]
    ret = float(last.split("mean return ")[1].split()[0]) if "mean return " in last else math.nan
    check(last.startswith("Pendulum-v1:") and -3300 < ret <= 0, f"onnx_gym.py plays Pendulum-v1: {last!r}")
    out = run(sys.executable, example, f"{d}/cheetah.onnx", cwd=d)
    check("over 1000 steps" in out and "HalfCheetah-v5: mean return" in out,
          f"onnx_gym.py plays a MuJoCo task from the model's env_id: {out.strip().splitlines()[-1]!r}")
    policy = onnx_gym.OnnxPolicy(model)
    env = gym.make(onnx_gym.gymnasium_id(policy.env_id))
    for theta, thetadot in [(3.0, 0.5), (-1.2, -0.8), (0.3, 0.0)]:
        env.reset(seed=0)
        env.unwrapped.state = np.array([theta, thetadot])
        got, steps = onnx_gym.play(policy, env, env.unwrapped._get_obs())
        want = float(run(ref, "pendulum", pol, repr(theta), repr(thetadot)))
        check(steps == 200 and abs(got - want) <= 1e-4 * abs(want),
              f"Pendulum from ({theta}, {thetadot}): Gymnasium with the ONNX model {got:.4f}, sacfleet {want:.4f}")


if __name__ == "__main__":
    sys.exit(main())
