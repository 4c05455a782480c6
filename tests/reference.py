"""Runs one function on myplugin and on jax's CPU backend, for comparison."""
from __future__ import annotations

import jax
import numpy as np


def devices(platform: str):
  return jax.devices(platform)


def run_on(platform: str, fn, *args, jit: bool = True):
  """fn(*args) with the arguments committed to the first device of `platform`."""
  device = jax.devices(platform)[0]
  args = jax.device_put(args, device)
  f = jax.jit(fn) if jit else fn
  with jax.default_device(device):
    out = f(*args)
  leaves = jax.tree.leaves(out)
  for leaf in leaves:
    if isinstance(leaf, jax.Array):
      assert {d.platform for d in leaf.devices()} == {platform}, (platform, leaf.devices())
  return jax.tree.map(np.asarray, out)


def assert_same(a, b, rtol: float = 1e-6, atol: float = 1e-6):
  """Integers and booleans exactly; floats within tolerance (two XLA builds may round differently)."""
  la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
  assert len(la) == len(lb)
  for x, y in zip(la, lb):
    x, y = np.asarray(x), np.asarray(y)
    assert x.dtype == y.dtype, (x.dtype, y.dtype)
    assert x.shape == y.shape, (x.shape, y.shape)
    if np.issubdtype(x.dtype, np.inexact) or x.dtype.name in ("bfloat16", "float8_e4m3fn"):
      np.testing.assert_allclose(x.astype(np.float64) if x.dtype.name == "bfloat16" else x,
                                 y.astype(np.float64) if y.dtype.name == "bfloat16" else y, rtol=rtol, atol=atol)
    else:
      np.testing.assert_array_equal(x, y)


def compare(fn, *args, rtol: float = 1e-6, atol: float = 1e-6, jit: bool = True):
  ours = run_on("myplugin", fn, *args, jit=jit)
  ref = run_on("cpu", fn, *args, jit=jit)
  assert_same(ours, ref, rtol=rtol, atol=atol)
  return ours
