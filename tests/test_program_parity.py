"""Programs that run unmodified on jax's CPU backend give the same answers
on myplugin: cost and memory analysis, and every CPU FFI handler that
jaxlib ships (dce_sink, sparse, LAPACK, the perturbed tridiagonal solve).
The reference is jax's CPU backend in the same process, or numpy."""
from __future__ import annotations

import json
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from proc import child_env, run_python
from reference import compare

HERE = os.path.dirname(os.path.abspath(__file__))
ANALYSIS_PROGRAM = os.path.join(HERE, "programs", "analysis_program.py")
RNG = np.random.default_rng(7)
MEMORY_FIELDS = ("argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes", "temp_size_in_bytes")


def compiled_on(platform, fn, *args, **jit_kwargs):
  device = jax.devices(platform)[0]
  return jax.jit(fn, **jit_kwargs).lower(*jax.device_put(args, device)).compile()


def cost(platform, fn, *args):
  c = compiled_on(platform, fn, *args).cost_analysis()
  assert c is not None, f"{platform}: cost_analysis() is None"
  return c[0] if isinstance(c, list) else c


def memory(platform, fn, *args, **jit_kwargs):
  m = compiled_on(platform, fn, *args, **jit_kwargs).memory_analysis()
  assert m is not None, f"{platform}: memory_analysis() is None"
  return {f: getattr(m, f) for f in MEMORY_FIELDS}


A = RNG.normal(size=(64, 32)).astype(np.float32)
B = RNG.normal(size=(32, 48)).astype(np.float32)
S = RNG.normal(size=(16, 16)).astype(np.float32)
SPD = S @ S.T + 16 * np.eye(16, dtype=np.float32)

# Programs that both XLA builds (the engine's and jaxlib's) optimize to the
# same module: every property of the analysis is equal.
SAME_MODULE = {
    "elementwise": (lambda a: a * 2 + 1, (A,)),
    "matmul": (lambda a, b: a @ b, (A, B)),
    "reduce": (lambda a: jnp.sum(a, axis=0), (A,)),
    "transcendental": (lambda a: jnp.exp(a) + jnp.tanh(a), (A,)),
    "loop": (lambda a: jax.lax.fori_loop(0, 10, lambda i, v: v @ a, a), (S,)),
    "conv": (lambda a: jax.lax.conv(a[None, None], a[None, None, :3, :3], (1, 1), "SAME"), (S,)),
    "lapack_cholesky": (jnp.linalg.cholesky, (SPD,)),  # a custom call into jaxlib's handler
}


@pytest.mark.parametrize("name", sorted(SAME_MODULE))
def test_cost_analysis_equals_cpu_backend(name):
  fn, args = SAME_MODULE[name]
  ours, ref = cost("myplugin", fn, *args), cost("cpu", fn, *args)
  assert ours == ref
  assert ours["flops"] > 0


def test_cost_analysis_of_a_differently_fused_program():
  """The engine (XLA of jaxlib 0.11.2) fuses dot, sine and reduce into one
  kernel where jaxlib 0.10.2's XLA keeps three: flops and transcendentals
  agree, bytes accessed is the fused kernel's (its input and output)."""
  x = RNG.normal(size=(64, 64)).astype(np.float32)
  fn = lambda v: jnp.sin(v @ v.T).sum()
  ours, ref = cost("myplugin", fn, x), cost("cpu", fn, x)
  assert ours["flops"] == ref["flops"] == 2 * 64 * 64 * 64 + 64 * 64 - 1  # dot, then the sum's adds
  assert ours["transcendentals"] == ref["transcendentals"] == 64 * 64
  assert ours["bytes accessed"] <= ref["bytes accessed"]
  entry = compiled_on("myplugin", fn, x).as_text().split("ENTRY")[1]
  if entry.count(" fusion(") == 1:  # one kernel reads x once and writes the scalar
    assert ours["bytes accessed"] == x.nbytes + 4


def test_cost_analysis_is_stable_across_calls():
  c = compiled_on("myplugin", lambda a, b: a @ b, A, B)
  assert c.cost_analysis() == c.cost_analysis()


@pytest.mark.parametrize("name", sorted(SAME_MODULE))
def test_memory_analysis_equals_cpu_backend(name):
  fn, args = SAME_MODULE[name]
  ours = memory("myplugin", fn, *args)
  assert ours == memory("cpu", fn, *args)
  assert ours["argument_size_in_bytes"] == sum(a.nbytes for a in args)


def test_memory_analysis_counts_donated_buffers_as_aliases():
  fn = lambda a: a * 3
  ours = memory("myplugin", fn, A, donate_argnums=0)
  assert ours == memory("cpu", fn, A, donate_argnums=0)
  assert ours["alias_size_in_bytes"] == A.nbytes


def test_analysis_on_a_mesh_of_eight_devices():
  """A sharded program is analysed per device, as jax's CPU backend does."""
  from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

  x = RNG.normal(size=(64, 16)).astype(np.float32)
  w = RNG.normal(size=(16, 16)).astype(np.float32)
  fn = lambda a, b: jnp.sum(jnp.tanh(a @ b))
  results = {}
  for platform in ("myplugin", "cpu"):
    mesh = Mesh(np.array(jax.devices(platform)), ("d",))
    xs = jax.device_put(x, NamedSharding(mesh, P("d")))
    ws = jax.device_put(w, NamedSharding(mesh, P()))
    compiled = jax.jit(fn).lower(xs, ws).compile()
    m = compiled.memory_analysis()
    results[platform] = (compiled.cost_analysis(), {f: getattr(m, f) for f in MEMORY_FIELDS})
  assert results["myplugin"] == results["cpu"]
  cost_, mem = results["myplugin"]
  assert mem["argument_size_in_bytes"] == x.nbytes // 8 + w.nbytes  # one device's shard
  assert cost_["flops"] >= 2 * 8 * 16 * 16


def test_analysis_of_pmap():
  results = {}
  for platform in ("myplugin", "cpu"):
    pmapped = jax.pmap(lambda v: jax.lax.psum(v * 2, "i"), axis_name="i", devices=jax.devices(platform)[:4])
    compiled = pmapped.lower(np.ones((4, 8), np.float32)).compile()
    m = compiled.memory_analysis()
    results[platform] = (compiled.cost_analysis(), {f: getattr(m, f) for f in MEMORY_FIELDS})
  assert results["myplugin"] == results["cpu"]
  assert results["myplugin"][1]["argument_size_in_bytes"] == 8 * 4  # one device's row


def test_analysis_of_a_program_across_processes(tmp_path):
  """Two processes of two devices: each answers for one device's part of
  the whole program, as jax's CPU backend does for the same 4-device mesh
  in one process."""
  ref_path, out_path = tmp_path / "cpu.json", tmp_path / "myplugin.json"
  r = run_python([ANALYSIS_PROGRAM, str(ref_path)], child_env(JAX_PLATFORMS="cpu", JAX_NUM_CPU_DEVICES="4"),
                 timeout=120)
  assert r.returncode == 0, r.output
  r = run_python(["-m", "jax_plugin.launcher", "-n", "2", "--devices-per-process", "2", "--", sys.executable,
                  ANALYSIS_PROGRAM, str(out_path)], child_env(), timeout=180)
  assert r.returncode == 0, r.output
  ref, ours = json.loads(ref_path.read_text()), json.loads(out_path.read_text())
  assert ref["matmul_sum"]["cost"] is not None
  assert ours == ref


# ---- jaxlib's CPU FFI handlers, registered by enumeration ----

def test_every_jaxlib_cpu_target_is_found():
  from jax._src.lib import _jax
  from jax_plugin import lowering

  found = set(lowering.jaxlib_cpu_targets())
  assert set(_jax.custom_call_targets("Host")) <= found
  # one of each family jax lowers to on CPU
  assert {"dce_sink", "cpu_csr_sparse_dense_ffi", "lapack_sgetrf_ffi", "tridiagonal_solve_perturbed_ffi"} <= found


def test_dce_sink():
  """lax.dce_sink(..., prevent_mlir_dce=True) lowers to the `dce_sink` custom call."""
  def f(v):
    jax.lax.dce_sink(v * 3, prevent_mlir_dce=True)
    return v + 1

  assert "dce_sink" in jax.jit(f).lower(A).as_text()
  out = compare(f, A)
  np.testing.assert_allclose(out, A + 1)


def test_tridiagonal_solve_perturbed():
  n = 6
  dl = np.concatenate([[0.0], RNG.normal(size=n - 1)]).astype(np.float32)
  du = np.concatenate([RNG.normal(size=n - 1), [0.0]]).astype(np.float32)
  d = (4 + RNG.random(n)).astype(np.float32)
  b = RNG.normal(size=(n, 2)).astype(np.float32)
  fn = lambda dl, d, du, b: jax.lax.linalg.tridiagonal_solve(dl, d, du, b, perturb_singular=True)
  with jax.default_device(jax.devices("myplugin")[0]):
    assert "tridiagonal_solve_perturbed_ffi" in jax.jit(fn).lower(dl, d, du, b).as_text()
  out = compare(fn, dl, d, du, b, rtol=1e-5, atol=1e-5)
  dense = np.diag(d) + np.diag(dl[1:], -1) + np.diag(du[:-1], 1)
  np.testing.assert_allclose(out, np.linalg.solve(dense, b), rtol=1e-4, atol=1e-5)


SPARSE_CHILD = r"""
import sys
import jax, jax.numpy as jnp, numpy as np
if sys.argv[1] == "late":
  jax.devices()  # the backends start before jax.experimental.sparse registers its "cpu" rules
from jax.experimental import sparse
x = np.random.default_rng(3).normal(size=(12, 9)).astype(np.float32)
x[x < 0.3] = 0
v = np.random.default_rng(4).normal(size=(9, 5)).astype(np.float32)
f = jax.jit(lambda m, v: m @ v)
out = {}
for p in ("myplugin", "cpu"):
  with jax.default_device(jax.devices(p)[0]):
    m = sparse.BCSR.fromdense(jnp.asarray(x))
    assert "cpu_csr_sparse_dense_ffi" in f.lower(m, v).as_text(), p
    out[p] = np.asarray(f(m, v))
np.testing.assert_allclose(out["myplugin"], out["cpu"], rtol=1e-6, atol=1e-6)
np.testing.assert_allclose(out["myplugin"], x @ v, rtol=1e-5, atol=1e-5)
print("sparse ok")
"""


@pytest.mark.parametrize("when", ["early", "late"])
def test_cpu_sparse_kernel(when):
  """BCSR products run jaxlib's CPU sparse kernel on myplugin, whether
  jax.experimental.sparse was imported before the backends started or after."""
  r = run_python(["-c", SPARSE_CHILD, when], child_env(JAX_PLATFORMS="myplugin,cpu"), timeout=120)
  assert r.returncode == 0 and "sparse ok" in r.stdout, r.output


USER_TARGET_CHILD = r"""
import os
import jax, numpy as np
from jax._src.lib import _jax
sink = _jax.custom_call_targets("Host")["dce_sink"]  # a typed FFI handler of jaxlib: any buffer in, nothing out
jax.ffi.register_ffi_target("early_sink", sink, platform="cpu", api_version=1)  # before any backend exists

def program(target):
  def f(v):
    jax.ffi.ffi_call(target, (), has_side_effect=True)(v)
    return v + 1
  return jax.jit(f)

x = np.arange(4, dtype=np.float32)
assert jax.devices()[0].platform == "myplugin"
jax.ffi.register_ffi_target("late_sink", sink, platform="cpu", api_version=1)  # after myplugin started
for target in ("early_sink", "late_sink"):
  f = program(target)
  assert target in f.lower(x).as_text()
  np.testing.assert_array_equal(f(x), x + 1)
  if "cpu" in os.environ["JAX_PLATFORMS"]:  # jax's CPU backend runs the same program
    with jax.default_device(jax.devices("cpu")[0]):
      np.testing.assert_array_equal(f(x), x + 1)
print("user targets ok")
"""


@pytest.mark.parametrize("platforms", ["myplugin", "myplugin,cpu"])
def test_programs_own_cpu_ffi_targets(platforms):
  """A program's own jax.ffi.register_ffi_target(..., platform="cpu"), made
  before or after the backends start, runs on myplugin too. With myplugin
  alone, jax holds "cpu" registrations back (it has no CPU backend to give
  them to): they are found there."""
  r = run_python(["-c", USER_TARGET_CHILD], child_env(JAX_PLATFORMS=platforms), timeout=120)
  assert r.returncode == 0 and "user targets ok" in r.stdout, r.output
