"""jax.experimental.custom_partitioning, jax.debug.inspect_array_sharding and
partitioned=True callbacks over several myplugin devices, against jax's CPU
backend running the same program: jax keeps their partitioning rules in
jaxlib's own XLA, which partitions such programs for myplugin
(docs/architecture.md, "Custom partitioning"). In one process (both
platforms, 8 devices each) and across 2 processes of 4 devices."""
from __future__ import annotations

import ast
import os
import re
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.custom_partitioning import custom_partitioning
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from proc import child_env, run_python
from reference import assert_same

PROGRAM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "programs", "custom_partitioning_program.py")
PLATFORMS = ("myplugin", "cpu")


def keep_last_dim(sharding, shape):
  """The documented example's rule: shard every dimension but the last."""
  rank = len(shape.shape)
  kept = min(len(sharding.spec), rank - 1)
  return NamedSharding(sharding.mesh, P(*sharding.spec[:kept], *([None] * (rank - kept))))


def make_op(body, calls=None):
  """A custom_partitioning op computing `body` on each shard with the
  documented rule; `calls` counts the partition rule's calls."""

  def partition(mesh, arg_shapes, result_shape):
    if calls is not None:
      calls.append(arg_shapes[0].sharding.spec)
    s = keep_last_dim(arg_shapes[0].sharding, arg_shapes[0])
    return mesh, body, s, (s,)

  def infer(mesh, arg_shapes, result_shape):
    return keep_last_dim(arg_shapes[0].sharding, arg_shapes[0])

  op = custom_partitioning(body)
  op.def_partition(infer_sharding_from_operands=infer, partition=partition, sharding_rule="...i -> ...i")
  return op


def complex_input():
  rng = np.random.default_rng(0)
  return (rng.normal(size=(64, 32)) + 1j * rng.normal(size=(64, 32))).astype(np.complex64)


def on_both(program):
  """program(devices) on each platform: {platform: its result as numpy}."""
  return {p: jax.tree.map(np.asarray, program(jax.devices(p))) for p in PLATFORMS}


def test_documented_fft_example_matches_cpu():
  calls = []
  fft = make_op(lambda v: jnp.fft.fft(v), calls)

  def program(devices):
    mesh = Mesh(np.array(devices).reshape(8), ("x",))
    x = jax.device_put(complex_input(), NamedSharding(mesh, P("x", None)))
    y = jax.jit(fft)(x)
    assert y.sharding.spec == P("x", None)
    return y

  out = on_both(program)
  assert_same(out["myplugin"], out["cpu"], rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(out["myplugin"], np.fft.fft(complex_input()), rtol=1e-4, atol=1e-4)
  assert calls == [P("x", None), P("x", None)]  # the rule ran once per platform


def test_each_device_runs_its_shard_through_the_rule():
  """The rule's per-shard body is what runs (a body that differs from the
  op's own function shows it), in a compiled program with no custom call
  left, each device holding an eighth of the rows."""
  op = make_op(lambda v: v * 10)  # the op's global meaning differs on purpose

  def program(devices):
    mesh = Mesh(np.array(devices).reshape(8), ("x",))
    x = jax.device_put(np.arange(64 * 4, dtype=np.float32).reshape(64, 4), NamedSharding(mesh, P("x", None)))
    f = jax.jit(op)
    text = f.lower(x).compile().as_text()
    assert "CustomSPMDPartitioning" not in text
    assert re.search(r"f32\[8,4\]", text), text[:2000]
    return f(x)

  out = on_both(program)
  assert_same(out["myplugin"], out["cpu"])
  np.testing.assert_array_equal(out["myplugin"], np.arange(64 * 4, dtype=np.float32).reshape(64, 4) * 10)


def test_rule_that_reshards_and_inspect_array_sharding_match_cpu():
  """Both dimensions sharded: the rule wants the last one whole, so the
  partitioner gathers it around the call (collectives in the partitioned
  program); inspect_array_sharding reports the partitioner's choice."""
  fft = make_op(lambda v: jnp.fft.fft(v))
  seen = {}

  def program(devices):
    platform = devices[0].platform
    seen[platform] = []
    mesh = Mesh(np.array(devices).reshape(2, 4), ("a", "b"))
    x = jax.device_put(complex_input(), NamedSharding(mesh, P("a", "b")))

    @jax.jit
    def f(v):
      jax.debug.inspect_array_sharding(v, callback=lambda s: seen[platform].append(s.spec))
      w = fft(v) + 1
      jax.debug.inspect_array_sharding(w, callback=lambda s: seen[platform].append(s.spec))
      return jnp.sum(w, axis=0)

    return f(x)

  out = on_both(program)
  assert_same(out["myplugin"], out["cpu"], rtol=1e-4, atol=1e-4)
  assert seen["myplugin"] == seen["cpu"]
  assert len(seen["cpu"]) == 2


def test_rule_error_reaches_the_user():
  """A partition rule that raises: its message, not a hang or NOT_FOUND."""

  def partition(mesh, arg_shapes, result_shape):
    raise ValueError("this rule refuses every sharding")

  def infer(mesh, arg_shapes, result_shape):
    return arg_shapes[0].sharding

  op = custom_partitioning(lambda v: v + 1)
  op.def_partition(infer_sharding_from_operands=infer, partition=partition, sharding_rule="i j -> i j")
  for platform in PLATFORMS:
    mesh = Mesh(np.array(jax.devices(platform)).reshape(8), ("x",))
    x = jax.device_put(np.zeros((16, 4), np.float32), NamedSharding(mesh, P("x", None)))
    with pytest.raises(Exception, match="this rule refuses every sharding"):
      jax.jit(op)(x)


# --- across processes -------------------------------------------------------

def run_program(out, **env):
  r = run_python([PROGRAM, out], child_env(**env), timeout=300)
  assert r.returncode == 0, r.output
  return r


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
  out = str(tmp_path_factory.mktemp("cpu") / "cpu.{rank}.npz")
  run_program(out, JAX_PLATFORMS="cpu", JAX_NUM_CPU_DEVICES="8")
  return dict(np.load(out.format(rank=0)))


def assert_shards_match(got, want, devices, callbacks=True):
  for name in ("fft_rows", "fft_both"):
    assert str(got[name + ".spec"]) == str(want[name + ".spec"])
    for d in devices:
      assert str(got[f"{name}.index.{d}"]) == str(want[f"{name}.index.{d}"])
      np.testing.assert_allclose(got[f"{name}.shard.{d}"], want[f"{name}.shard.{d}"], rtol=1e-5, atol=1e-5)
  assert ast.literal_eval(str(got["inspected"])) == ast.literal_eval(str(want["inspected"]))
  assert str(got["platform"]) == "myplugin"
  if callbacks:
    assert ast.literal_eval(str(got["callback_shards"])) == ast.literal_eval(str(want["callback_shards"]))
    assert len(ast.literal_eval(str(want["callback_shards"]))) == 8


def test_program_in_a_fresh_process_matches_cpu(tmp_path, reference):
  out = str(tmp_path / "ours.{rank}.npz")
  run_program(out, JAX_PLATFORMS="myplugin", MYPLUGIN_NUM_DEVICES="8")
  assert_shards_match(dict(np.load(out.format(rank=0))), reference, range(8))


def test_program_across_two_processes_matches_cpu(tmp_path, reference):
  out = str(tmp_path / "ours.{rank}.npz")
  r = run_python(["-m", "jax_plugin.launcher", "-n", "2", "--devices-per-process", "4", "--", sys.executable,
                  PROGRAM, out], child_env(), timeout=300)
  assert r.returncode == 0, r.output
  shards = []
  for rank in range(2):
    got = dict(np.load(out.format(rank=rank)))
    assert_shards_match(got, reference, range(4 * rank, 4 * rank + 4), callbacks=False)
    shards += ast.literal_eval(str(got["callback_shards"]))
  # Each process called back with its own devices' shards: together, jax's CPU backend's.
  assert sorted(shards) == ast.literal_eval(str(reference["callback_shards"]))
