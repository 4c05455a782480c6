"""The seed documents' single-process examples, run as unmodified programs
under JAX_PLATFORMS=myplugin and under jax's CPU backend with 8 devices."""
import os

import numpy as np
import pytest

from proc import child_env, run_python

HERE = os.path.dirname(__file__)


def run_both(program: str, tmp_path):
  outputs = {}
  for name, env in {
      "myplugin": child_env(JAX_PLATFORMS="myplugin", MYPLUGIN_NUM_DEVICES="8"),
      "cpu": child_env(JAX_PLATFORMS="cpu", JAX_NUM_CPU_DEVICES="8"),
  }.items():
    out = tmp_path / f"{name}.npz"
    r = run_python([os.path.join(HERE, "programs", program), str(out)], env, timeout=240)
    assert r.returncode == 0, r.output
    outputs[name] = (dict(np.load(out)), r.output)
  return outputs


def test_sharded_computation_seed(tmp_path):
  outputs = run_both("seed_sharded_computation.py", tmp_path)
  ours, ours_log = outputs["myplugin"]
  ref, _ = outputs["cpu"]
  assert sorted(ours) == sorted(ref)
  for key in ref:
    if key.endswith(".layout") or ref[key].dtype.kind in "iub":
      np.testing.assert_array_equal(ours[key], ref[key], err_msg=key)
    else:
      np.testing.assert_allclose(ours[key], ref[key], rtol=1e-6, atol=1e-6, err_msg=key)
  # Known values from the seed document itself.
  np.testing.assert_array_equal(ours["f_contract"], [48, 52, 56, 60, 64, 68, 72, 76])
  assert int(ours["shard_map_psum"]) == 496
  np.testing.assert_array_equal(ours["shard_map_sum"], [6, 22, 38, 54, 70, 86, 102, 118])
  np.testing.assert_array_equal(ours["local_shape"], [4])
  assert "shardings match: True" in ours_log
  # visualize_array_sharding drew our devices.
  assert "MYPLUGIN 0" in ours_log and "MYPLUGIN 7" in ours_log


def test_pmap_psum_seed(tmp_path):
  outputs = run_both("seed_pmap.py", tmp_path)
  ours, _ = outputs["myplugin"]
  ref, _ = outputs["cpu"]
  np.testing.assert_array_equal(ours["psum"], np.full(8, 8.0, np.float32))
  np.testing.assert_array_equal(ours["psum"], ref["psum"])
  # device_count, local_device_count, process_index, process_count
  np.testing.assert_array_equal(ours["counts"], [8, 8, 0, 1])
  np.testing.assert_array_equal(ours["counts"], ref["counts"])
  assert str(ours["platform"]) == "myplugin"
