"""The generator of collective programs (programs/collective_forms.py) on
myplugin and on jax's CPU backend in the same process shape (2 processes
of 2 devices; jax's CPU backend then meets its processes through Gloo):
every collective in every type the collectives carry, over 1-D to 3-D
meshes with all or some axes manual, gradients, a nested shard_map and a
pipeline loop. The same cases are refused, each by the same step, and every
result is bit-equal, except where the order of a float sum decides its
last bits: f32 sums within 1e-6, f16 sums the f32 sum rounded once
(jax's own f16 sum rounds at each step of its transport's order, which
differs between its process shapes). On 4 processes of 1 device,
myplugin's results are bit-equal to its own on 2 x 2."""
from __future__ import annotations

import os

import ml_dtypes
import numpy as np
import pytest

from test_multiprocess_programs import PROGRAMS, launch, load

PROGRAM = os.path.join(PROGRAMS, "collective_forms.py")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  d = tmp_path_factory.mktemp("forms")
  launch(2, 2, PROGRAM, str(d / "cpu.{rank}.npz"), timeout=600, JAX_PLATFORMS="cpu", JAX_NUM_CPU_DEVICES="2")
  launch(2, 2, PROGRAM, str(d / "mp22.{rank}.npz"), timeout=600)
  launch(4, 1, PROGRAM, str(d / "mp41.{rank}.npz"), timeout=600)
  return {name: load(d / f"{name}.0.npz") for name in ("cpu", "mp22", "mp41")}


def _values(raw: np.ndarray, dtype: str) -> np.ndarray:
  t = getattr(ml_dtypes, dtype) if dtype == "bfloat16" or dtype.startswith("float8") else np.dtype(dtype)
  return raw.view(t)


def test_the_same_cases_are_refused_by_the_same_step(runs):
  cpu = [r for r in runs["cpu"]["refused"] if r]
  ours = [r for r in runs["mp22"]["refused"] if r]
  assert [r.split(":")[0] for r in ours] == [r.split(":")[0] for r in cpu], (ours, cpu)
  # jax's own refusals (its shard_map's, its partitioner's), never the rewrite's.
  assert not [r for r in ours if "rewriting the partitioned program" in r], ours


def test_every_result_equals_jax_cpu_in_the_same_shape(runs):
  cpu, ours = runs["cpu"], runs["mp22"]
  results = [k for k in cpu if k != "refused" and not k.endswith(".dtype") and not k.startswith("expected/")]
  assert len(results) > 150, results
  summed = 0
  for key in results:
    dtype = str(cpu[key + ".dtype"])
    assert str(ours[key + ".dtype"]) == dtype, key
    a, b = cpu[key], ours[key]
    assert a.shape == b.shape, key
    is_sum = "/psum" in key or key.startswith(("grad/", "nested", "pipeline"))
    if is_sum and dtype == "float32":
      np.testing.assert_allclose(_values(b, dtype), _values(a, dtype), rtol=1e-6, atol=1e-6, err_msg=key)
    elif is_sum and dtype == "float16":
      summed += 1
      # jax rounds at each step; ours once: at most one f16 step apart.
      np.testing.assert_allclose(_values(b, dtype).astype(np.float32), _values(a, dtype).astype(np.float32),
                                 rtol=2e-3, atol=2e-3, err_msg=key)
    else:
      np.testing.assert_array_equal(b, a, err_msg=f"{key} ({dtype}): not bit-equal to jax's CPU backend")
  assert summed == 2  # psum and psum_scatter


def test_narrow_float_sums_round_once(runs):
  """f16 sums are numpy's f32 sum rounded once; so are bf16 sums (bit-equal
  to jax's above) where jax's CPU backend aborts: over some axes of a mesh."""
  ours = runs["mp22"]
  np.testing.assert_array_equal(ours["types/psum/float16.0"], ours["expected/types/psum/float16"])
  np.testing.assert_array_equal(ours["partial_bf16_psum.0"], ours["expected/partial_bf16_psum"])
  # A bf16 gradient through a partly manual pmean (jax 0.12's CPU backend
  # aborts on it): the f32 program's gradient, at bf16's precision.
  grad = ours["grad/pmean/bf16.0"].view(ml_dtypes.bfloat16).astype(np.float32)
  np.testing.assert_allclose(grad, ours["expected/grad/pmean/bf16"], rtol=2e-2)


def test_results_do_not_depend_on_the_process_shape(runs):
  a, b = runs["mp22"], runs["mp41"]
  keys = [k for k in a if k != "refused"]
  assert sorted(keys) == sorted(k for k in b if k != "refused")
  for key in keys:
    if key.endswith(".dtype") or "float32" in key or \
        key.startswith(("grad/", "nested", "pipeline", "expected/grad")):
      continue  # f32 sums: the order of the terms differs between shapes
    np.testing.assert_array_equal(b[key], a[key], err_msg=key)
