"""The examples run as the README and docs/getting-started.md say, and the
training example trains the same on myplugin as on jax's CPU backend.

Every example runs with jax's DeprecationWarnings turned into errors: a
user who runs one must never see a deprecation of jax's."""
import os
import re

import numpy as np
import pytest

from proc import child_env, run_python

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")
# For the examples' processes and the processes a launcher starts for them.
NO_DEPRECATIONS = "error::DeprecationWarning"


def run_example(name, *args, **env):
  r = run_python(["-W", NO_DEPRECATIONS, os.path.join(EXAMPLES, name), *args], child_env(**env), timeout=240)
  assert r.returncode == 0, r.output
  assert "DeprecationWarning" not in r.output, r.output
  return r.stdout


def launch_example(name, n, devices_per_process):
  """Runs an example under the launcher, each process with jax's deprecations as errors."""
  import sys
  r = run_python(["-m", "jax_plugin.launcher", "-n", str(n), "--devices-per-process", str(devices_per_process), "--",
                  sys.executable, "-W", NO_DEPRECATIONS, os.path.join(EXAMPLES, name)], child_env(), timeout=240)
  assert r.returncode == 0, r.output
  assert "DeprecationWarning" not in r.output, r.output
  return r


def test_demo_sharded_computation():
  out = run_example("sharded_computation.py", JAX_PLATFORMS="myplugin", MYPLUGIN_NUM_DEVICES="8")
  assert "backend: myplugin devices: 8" in out
  assert "shardings match: True" in out
  assert "psum over shards: 496" in out
  assert "[48. 52. 56. 60. 64. 68. 72. 76.]" in out


def test_pmap_psum_example():
  out = run_example("pmap_psum.py", JAX_PLATFORMS="myplugin", MYPLUGIN_NUM_DEVICES="8")
  assert "global devices: 8 local devices: 8 process 0 of 1" in out
  assert "[8. 8. 8. 8. 8. 8. 8. 8.]" in out


def test_shard_map_collectives_example_matches_cpu(tmp_path):
  """In one process (test_multiprocess_programs.py runs it across processes)."""
  got = {}
  for platform, env in {"myplugin": {"MYPLUGIN_NUM_DEVICES": "8"}, "cpu": {"JAX_NUM_CPU_DEVICES": "8"}}.items():
    path = tmp_path / f"{platform}.npz"
    run_example("shard_map_collectives.py", "--save", str(path), JAX_PLATFORMS=platform, **env)
    got[platform] = dict(np.load(path))
  assert got["myplugin"].keys() == got["cpu"].keys() and len(got["cpu"]) > 8
  for key, want in got["cpu"].items():
    np.testing.assert_allclose(got["myplugin"][key], want, rtol=1e-6, err_msg=key)


def test_pmap_psum_example_across_four_processes():
  r = launch_example("pmap_psum.py", 4, 2)
  for rank in range(4):
    assert f"[{rank}] global devices: 8 local devices: 2 process {rank} of 4" in r.stdout
    assert f"[{rank}] [8. 8.]" in r.stdout


def test_train_mlp_matches_cpu():
  losses = {}
  for platform, env in {"myplugin": {"MYPLUGIN_NUM_DEVICES": "8"}, "cpu": {"JAX_NUM_CPU_DEVICES": "8"}}.items():
    out = run_example("train_mlp.py", JAX_PLATFORMS=platform, **env)
    losses[platform] = np.array([float(v) for v in re.findall(r"loss ([0-9.]+)", out)])
  assert len(losses["myplugin"]) == 20
  np.testing.assert_allclose(losses["myplugin"], losses["cpu"], rtol=1e-4)
  assert losses["myplugin"][-1] < losses["myplugin"][0]


def test_data_parallel_across_processes_matches_one_process():
  """Two processes averaging gradients equal one process on the whole batch."""
  multi = launch_example("data_parallel_collectives.py", 2, 2)
  single = launch_example("data_parallel_collectives.py", 1, 2)
  losses = {}
  for name, r in (("multi", multi), ("single", single)):
    losses[name] = [float(v) for v in re.findall(r"\[0\] step +\d+ +loss ([0-9.]+)", r.stdout)]
  assert len(losses["multi"]) == 5
  # The same gradient, summed in another order: equal to float rounding.
  np.testing.assert_allclose(losses["multi"], losses["single"], rtol=1e-5)
  assert losses["multi"][-1] < losses["multi"][0]
  # Rank 1 saw the same losses as rank 0.
  assert re.findall(r"\[1\] step +\d+ +loss ([0-9.]+)", multi.stdout) == \
      re.findall(r"\[0\] step +\d+ +loss ([0-9.]+)", multi.stdout)


def test_pipeline_parallel_across_two_processes_matches_one_process_on_cpu():
  """Two stages on two processes, activations and gradients moved with
  jax.device_put each step: the losses of the same model trained in one
  process on jax's CPU backend."""
  r = launch_example("pipeline_parallel.py", 2, 1)
  two = np.array([float(v) for v in re.findall(r"\[1\] step \d+ loss ([0-9.]+)", r.stdout)])
  out = run_example("pipeline_parallel.py", JAX_PLATFORMS="cpu")
  one = np.array([float(v) for v in re.findall(r"step \d+ loss ([0-9.]+)", out)])
  assert len(two) == len(one) == 10, (r.stdout, out)
  np.testing.assert_allclose(two, one, rtol=1e-5)
  assert two[-1] < two[0]
