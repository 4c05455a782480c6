"""Libraries on myplugin, unchanged, in jobs started by myplugin-run with no
initialize call: orbax-checkpoint (save and restore of a sharded train
state, into a fresh job and into one 8-device process, checked shard by
shard against the known values) and a flax.nnx + optax data-parallel
training run (losses against jax's CPU backend on as many devices).
multihost_utils is covered on every start path by
test_jax_distributed_client. Needs the `clients` extra: pip install '.[test,clients]'."""
import importlib.util
import json
import os
import sys

import numpy as np
import pytest

from job import HERE
from proc import child_env, run_python

def _require(*modules):
  missing = [m for m in modules if importlib.util.find_spec(m) is None]
  assert not missing, f"{missing} not installed: pip install '.[test,clients]'"


def _launch(n, per_process, program, *args):
  r = run_python(["-m", "jax_plugin.launcher", "-n", str(n), "--devices-per-process", str(per_process), "--",
                  sys.executable, os.path.join(HERE, "programs", program), *args], child_env(), timeout=300)
  assert r.returncode == 0, r.output
  return r


@pytest.mark.parametrize("n,per_process", [(2, 2), (4, 1)], ids=["2x2", "4x1"])
def test_orbax_save_and_restore(tmp_path, n, per_process):
  _require("orbax")
  directory = str(tmp_path / "ckpt")
  r = _launch(n, per_process, "orbax_worker.py", "save", directory)
  assert all(f"[{k}] DONE save myplugin" in r.stdout for k in range(n)), r.output
  # A fresh job of the same shape: each process checks its own shards.
  r = _launch(n, per_process, "orbax_worker.py", "restore", directory)
  for k in range(n):
    assert f"[{k}] RESTORED process {k} of {n}, devices {n * per_process}," in r.stdout, r.output
  # One process with 8 devices: a different sharding of the same state.
  single = run_python([os.path.join(HERE, "programs", "orbax_worker.py"), "restore", directory],
                      child_env(JAX_PLATFORMS="myplugin", MYPLUGIN_NUM_DEVICES="8"), timeout=300)
  assert single.returncode == 0, single.output
  assert "RESTORED process 0 of 1, devices 8, 32 shards equal" in single.stdout, single.output


def _losses(output: str) -> dict:
  line = next(l for l in output.splitlines() if "RESULT " in l)
  return json.loads(line.split("RESULT ", 1)[1])


# The clients extra has no flax for jax 0.11 (see pyproject.toml); CI runs
# Python 3.11 with jax 0.10.2, where this runs.
def test_nnx_optax_data_parallel_losses_match_cpu():
  _require("flax", "optax")
  ours = _losses(_launch(2, 2, "nnx_train_worker.py").stdout)
  ref = run_python([os.path.join(HERE, "programs", "nnx_train_worker.py")],
                   child_env(JAX_PLATFORMS="cpu", JAX_NUM_CPU_DEVICES="4"), timeout=300)
  assert ref.returncode == 0, ref.output
  cpu = _losses(ref.stdout)
  assert (ours["platform"], ours["devices"]) == ("myplugin", 4) and (cpu["platform"], cpu["devices"]) == ("cpu", 4)
  # The gradient all-reduce adds the four partial sums in another order
  # than XLA's in-process one: equal to float32 rounding, not bit for bit.
  np.testing.assert_allclose(ours["losses"], cpu["losses"], rtol=2e-6, atol=0)
  assert ours["losses"][-1] < ours["losses"][0]
