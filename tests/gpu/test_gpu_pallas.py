"""Pallas kernels compiled for the GPU (not interpret mode) on myplugin's
CUDA engine, against jax's own CUDA backend on the same machine and numpy:
Triton, and Mosaic GPU where jax's CUDA backend runs it (Hopper and newer).
A kernel that jax's backend cannot run is not asked of myplugin; one that it
runs must run on myplugin too, with the same numbers. The dry run
(tests/test_pallas.py) runs the same program and checks in interpret mode on
the CPU engine against jax's CPU backend."""
import json

import numpy as np

from proc import child_env, run_python

PROGRAM = r"""
import json, sys
import jax, jax.numpy as jnp, numpy as np
from jax.experimental import pallas as pl

interpret = sys.argv[1:] == ["interpret"]  # the dry run's: no GPU
x = np.linspace(-3, 3, 16 * 256, dtype=np.float32).reshape(16, 256)
y = np.cos(x).astype(np.float32)
out = {"platform": jax.devices()[0].platform}

def kernel(x_ref, y_ref, o_ref):
  o_ref[...] = x_ref[...] * y_ref[...] + jnp.sin(x_ref[...])

def run(name, **params):
  try:
    f = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, jnp.float32), interpret=interpret, **params)
    out[name] = np.asarray(jax.jit(f)(x, y)).tolist()
  except Exception as e:  # recorded: jax's own backend decides what must work
    out[name + "_error"] = f"{type(e).__name__}: {str(e)[:500]}"

block = pl.BlockSpec((8, 256), lambda i: (i, 0))
run("triton", grid=(2,), in_specs=[block, block], out_specs=block)
try:
  from jax.experimental.pallas import mosaic_gpu as plgpu
except ImportError as e:
  out["mosaic_gpu_error"] = f"ImportError: {e}"
else:
  if not interpret:  # Mosaic GPU's interpreter is another program
    run("mosaic_gpu", compiler_params=plgpu.CompilerParams())  # jax 0.11's way
    try:  # jax 0.12's: plgpu.kernel (an mpmd_map), the whole arrays in shared memory
      f = plgpu.kernel(kernel, out_type=jax.ShapeDtypeStruct(x.shape, jnp.float32))
      out["mosaic_gpu_kernel"] = np.asarray(jax.jit(f)(x, y)).tolist()
    except Exception as e:
      out["mosaic_gpu_kernel_error"] = f"{type(e).__name__}: {str(e)[:500]}"
print(json.dumps(out))
"""


def run_program(platform, *args, **env):
  r = run_python(["-c", PROGRAM, *args], child_env(JAX_PLATFORMS=platform, **env), timeout=300)
  assert r.returncode == 0, r.output
  return json.loads(r.stdout.strip().splitlines()[-1])


def check(theirs: dict, ours: dict) -> None:
  """jax's backend's kernels against numpy, myplugin's against jax's."""
  assert ours["platform"] == "myplugin", ours
  assert "triton" in theirs, theirs  # jax's CUDA backend runs Triton kernels on every GPU it supports
  x = np.linspace(-3, 3, 16 * 256, dtype=np.float32).reshape(16, 256)
  want = x * np.cos(x) + np.sin(x)
  for backend in ("triton", "mosaic_gpu", "mosaic_gpu_kernel"):
    if backend not in theirs:
      continue
    assert backend in ours, (backend, ours.get(backend + "_error"))
    np.testing.assert_allclose(np.asarray(theirs[backend]), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(ours[backend]), np.asarray(theirs[backend]), rtol=1e-6, atol=1e-6)


def test_pallas_kernels_run_on_myplugin_as_on_jax_cuda():
  theirs = run_program("cuda")
  ours = run_program("myplugin", MYPLUGIN_ENGINE="cuda")
  print("not run by jax's CUDA backend:", {k: v for k, v in theirs.items() if k.endswith("_error")})
  check(theirs, ours)
