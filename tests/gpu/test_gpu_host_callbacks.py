"""Python host callbacks on the CUDA engine (operands and results copied
through the FFI stream), against numpy and the printed text jax's CPU
backend gives for the same program; and beside jax's own CUDA backend in
one process, where both register handlers in the same engine library."""
import json

import numpy as np

from proc import child_env, run_python

PROGRAM = r"""
import json, sys
import jax, jax.numpy as jnp, numpy as np
from jax.experimental import io_callback
platform = sys.argv[1]
device = jax.devices(platform)[0]
x = jax.device_put(np.arange(6, dtype=np.float32).reshape(2, 3), device)
log = []

@jax.jit
def f(v):
  jax.debug.print("v={} sum={:.1f}", v, v.sum())
  a, b = jax.pure_callback(lambda t: (np.sin(t), (t > 2).astype(np.int32)),
                           (jax.ShapeDtypeStruct((2, 3), jnp.float32), jax.ShapeDtypeStruct((2, 3), jnp.int32)), v)
  c = io_callback(lambda t: (log.append(float(t.sum())), t.astype(jnp.bfloat16))[1],
                  jax.ShapeDtypeStruct((2, 3), jnp.bfloat16), v * 2, ordered=True)
  return a + 1, b, c

out = [np.asarray(o).astype(np.float64).tolist() for o in f(x)]
jax.effects_barrier()
print("RESULT " + json.dumps({"out": out, "log": log}))
"""


def run(platform, **env):
  r = run_python(["-c", PROGRAM, platform], child_env(**env), timeout=600)
  assert r.returncode == 0, r.output
  # jax logs a plugin whose initialize() raised and goes on without the rest of it.
  assert "plugin configuration error" not in r.output.lower(), r.output
  lines = r.stdout.splitlines()
  result = json.loads(next(l for l in lines if l.startswith("RESULT "))[len("RESULT "):])
  return result, [l for l in lines if not l.startswith("RESULT ")]


def test_callbacks_on_the_cuda_engine_match_cpu():
  ours, our_lines = run("myplugin", JAX_PLATFORMS="myplugin,cpu", MYPLUGIN_ENGINE="cuda")
  ref, ref_lines = run("cpu", JAX_PLATFORMS="cpu")
  assert our_lines == ref_lines and ref_lines[-1].endswith("sum=15.0")
  x = np.arange(6, dtype=np.float32).reshape(2, 3)
  np.testing.assert_allclose(ours["out"][0], np.sin(x) + 1, rtol=1e-6)
  np.testing.assert_array_equal(ours["out"][1], (x > 2).astype(np.int32))
  np.testing.assert_array_equal(ours["out"][2], x * 2)
  assert ours["log"] == ref["log"] == [30.0]


def test_callbacks_on_myplugin_and_jax_cuda_in_one_process():
  ref, ref_lines = run("cpu", JAX_PLATFORMS="cpu")
  for platform in ("myplugin", "cuda"):
    got, lines = run(platform, JAX_PLATFORMS="myplugin,cuda,cpu", MYPLUGIN_ENGINE="cuda")
    assert lines == ref_lines, (platform, lines)
    assert got["log"] == ref["log"] and got["out"][1:] == ref["out"][1:], (platform, got)
    np.testing.assert_allclose(got["out"][0], ref["out"][0], rtol=1e-6)
