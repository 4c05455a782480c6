"""The CUDA engine under myplugin, on every local GPU: devices, the seed
examples, jit numerics against numpy."""
import json
import os
import sys

import numpy as np
import pytest

from conftest import gpu_count
from proc import child_env, run_python

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAMS = os.path.join(os.path.dirname(HERE), "programs")


def run(code_or_args, **env):
  args = ["-c", code_or_args] if isinstance(code_or_args, str) else code_or_args
  r = run_python(args, child_env(JAX_PLATFORMS="myplugin", MYPLUGIN_ENGINE="cuda", **env), timeout=600)
  assert r.returncode == 0, r.output
  return r


def test_devices_are_the_gpus():
  r = run("import jax, json; d = jax.devices(); "
          "print(json.dumps([d.platform for d in d] + [d.device_kind for d in d]))")
  names = json.loads(r.stdout.strip().splitlines()[-1])
  n = gpu_count()
  assert names[:n] == ["myplugin"] * n
  assert all("cpu" not in kind.lower() for kind in names[n:]), names  # the GPU's name, from the engine


def test_jit_on_each_gpu_matches_numpy():
  r = run("import jax, jax.numpy as jnp, numpy as np, json\n"
          "x = np.arange(4096, dtype=np.float32).reshape(64, 64) / 4096\n"
          "out = []\n"
          "for d in jax.local_devices():\n"
          "  y = jax.jit(lambda a: jnp.tanh(a @ a.T).sum(0))(jax.device_put(x, d))\n"
          "  out.append(np.asarray(y).tolist())\n"
          "print(json.dumps(out))")
  x = np.arange(4096, dtype=np.float32).reshape(64, 64) / 4096
  want = np.tanh(x @ x.T).sum(0)
  got = json.loads(r.stdout.strip().splitlines()[-1])
  assert len(got) == gpu_count()
  for g in got:
    np.testing.assert_allclose(g, want, rtol=2e-3)  # TF32 matmuls on recent GPUs


def test_seed_pmap_on_all_gpus(tmp_path):
  out = str(tmp_path / "pmap.{rank}.npz")
  run([os.path.join(PROGRAMS, "seed_pmap.py"), out])
  got = np.load(out.format(rank=0))
  n = gpu_count()
  np.testing.assert_array_equal(got["psum"], np.full(n, float(n), np.float32))


@pytest.mark.skipif(gpu_count() < 2, reason="needs 2 GPUs")
def test_shard_map_collectives_on_all_gpus(tmp_path):
  example = os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples", "shard_map_collectives.py")
  n = gpu_count() - gpu_count() % 2
  ref = tmp_path / "ref.npz"
  r = run_python([example, "--save", str(ref)], child_env(JAX_PLATFORMS="cpu", JAX_NUM_CPU_DEVICES=str(n)),
                 timeout=300)
  assert r.returncode == 0, r.output
  out = tmp_path / "gpu.npz"
  run([example, "--save", str(out)], MYPLUGIN_VISIBLE_DEVICES=",".join(str(i) for i in range(n)))
  want, got = np.load(ref), np.load(out)
  for key in want.files:
    np.testing.assert_allclose(got[key], want[key], rtol=1e-5, err_msg=key)
