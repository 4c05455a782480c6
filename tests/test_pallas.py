"""Pallas on myplugin's CPU engine, against jax's CPU backend in the same
process: interpret mode runs and gives its numbers; compiled mode is refused
with jax's own CPU error, not "MLIR translation rule ... not found for
platform myplugin". (Compiled Pallas for GPUs: tests/test_gpu_compile.py,
tests/gpu/test_gpu_pallas.py.)"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl


def _add_one(x_ref, o_ref):
  o_ref[...] = x_ref[...] * 2.0 + 1.0


def _call(interpret: bool):
  return pl.pallas_call(_add_one, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32), interpret=interpret)


def _on(platform):
  return jax.devices(platform)[0]


def test_interpret_mode_runs_as_on_jax_cpu():
  x = np.arange(8 * 128, dtype=np.float32).reshape(8, 128) / 7.0
  ours = jax.jit(_call(True))(jax.device_put(x, _on("myplugin")))
  theirs = jax.jit(_call(True))(jax.device_put(x, _on("cpu")))
  assert list(ours.devices())[0].platform == "myplugin"
  np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))
  np.testing.assert_array_equal(np.asarray(ours), x * 2.0 + 1.0)


def _compiled_error(platform) -> str:
  x = jax.device_put(np.zeros((8, 128), np.float32), _on(platform))
  with pytest.raises(Exception) as e:
    jax.jit(_call(False)).lower(x).compile()
  return str(e.value)


def test_compiled_mode_is_refused_with_jax_cpus_error():
  ours, theirs = _compiled_error("myplugin"), _compiled_error("cpu")
  assert "Only interpret mode is supported on CPU backend" in theirs
  assert "Only interpret mode is supported on CPU backend" in ours, ours
  assert "not found for platform" not in ours


def test_gpu_kit_pallas_program_dry_run():
  # tests/gpu/test_gpu_pallas.py's program and checks, in interpret mode on
  # the CPU engine against jax's CPU backend (its GPU run compiles the
  # kernels for the CUDA engine and jax's CUDA backend).
  import os
  import sys
  sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu"))
  import test_gpu_pallas as kit
  theirs = kit.run_program("cpu", "interpret")
  ours = kit.run_program("myplugin", "interpret", MYPLUGIN_NUM_DEVICES="1")
  theirs["platform"] = "cpu"
  kit.check(theirs, ours)
  bad = dict(ours, triton=[[v + 1e-3 for v in row] for row in ours["triton"]])
  with pytest.raises(AssertionError):
    kit.check(theirs, bad)
