"""Python host callbacks (jax.debug.print, jax.debug.callback, pure_callback,
io_callback) on myplugin, against jax's CPU backend running the same
program in the same process (both with 8 devices): the same results and the
same printed text."""
from __future__ import annotations

import functools
import gc
import threading

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax.experimental import io_callback
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from reference import assert_same

shard_map = getattr(jax, "shard_map", None)
if shard_map is None:
  from jax.experimental.shard_map import shard_map

PLATFORMS = ("myplugin", "cpu")


def run_both(program, capsys, *, sort_lines=False):
  """program(devices) on each platform (its first device the default), its
  results as numpy and what it printed; asserts that both agree."""
  out = {}
  for platform in PLATFORMS:
    devices = jax.devices(platform)
    with jax.default_device(devices[0]):
      result = jax.tree.map(np.asarray, program(devices))
    jax.effects_barrier()
    text = capsys.readouterr().out
    lines = text.splitlines()
    out[platform] = (result, sorted(lines) if sort_lines else lines)
  (ours, our_lines), (ref, ref_lines) = out["myplugin"], out["cpu"]
  assert_same(ours, ref)
  assert our_lines == ref_lines
  assert ref_lines or ref is not None
  return ours, our_lines


def test_debug_print_formats_like_cpu(capsys):
  def program(devices):
    @jax.jit
    def f(x, n):
      jax.debug.print("x={x} sum={s:.3f} n={} first={x[0]}", n, x=x, s=x.sum())
      jax.debug.print("bool={} bf16={} i8={}", x > 1, x.astype(jnp.bfloat16), n.astype(jnp.int8))
      jax.debug.print("empty={} scalar={}", jnp.zeros((0, 3)), jnp.float32(2.5), ordered=True)
      return x * 2
    return f(np.arange(4, dtype=np.float32), np.int32(7))
  # Unordered prints without data dependencies may run in either order.
  _, lines = run_both(program, capsys, sort_lines=True)
  assert "x=[0. 1. 2. 3.] sum=6.000 n=7 first=0.0" in lines
  assert len(lines) == 3


@pytest.mark.parametrize("ordered", [False, True])
def test_debug_print_eager_and_in_jit(capsys, ordered):
  def program(devices):
    x = jnp.arange(3.0)
    jax.debug.print("eager {}", x, ordered=ordered)
    jax.jit(lambda v: jax.debug.print("jit {} {}", v, v + 1, ordered=ordered))(x)
    return x
  _, lines = run_both(program, capsys)
  assert lines == ["eager [0. 1. 2.]", "jit [0. 1. 2.] [1. 2. 3.]"]


def test_debug_callback_receives_values(capsys):
  def program(devices):
    seen = []
    f = jax.jit(lambda x: jax.debug.callback(lambda a, b: seen.append((np.asarray(a).tolist(), int(b))), x,
                                             x.shape[0]) or x + 1)
    out = f(jnp.arange(5, dtype=jnp.int32))
    jax.effects_barrier()
    print(seen)
    return out
  _, lines = run_both(program, capsys)
  assert lines == ["[([0, 1, 2, 3, 4], 5)]"]


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16, np.complex64, np.int8, np.uint8, np.int16,
                                   np.uint32, np.int32, np.bool_])
@pytest.mark.parametrize("shape", [(), (0,), (3, 4)])
def test_pure_callback_dtypes_and_shapes(capsys, dtype, shape):
  def program(devices):
    x = (np.arange(int(np.prod(shape))).reshape(shape) % 3).astype(dtype)

    def host(a):
      a = np.asarray(a)
      assert a.dtype == np.dtype(dtype) and a.shape == shape
      return a, (a == a.astype(dtype)).astype(np.bool_), np.float32(a.size)

    types = (jax.ShapeDtypeStruct(shape, dtype), jax.ShapeDtypeStruct(shape, np.bool_),
             jax.ShapeDtypeStruct((), np.float32))
    return jax.jit(lambda v: jax.pure_callback(host, types, v))(x)
  ours, _ = run_both(program, capsys)
  assert ours[0].dtype == np.dtype(dtype)


@pytest.mark.parametrize("dtype", [ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.int2, ml_dtypes.uint2,
                                   ml_dtypes.float4_e2m1fn])
@pytest.mark.parametrize("shape", [(), (7,), (3, 5)])
def test_sub_byte_operands_and_results(capsys, dtype, shape):
  """The engine packs sub-byte elements several to a byte; the callback sees
  and returns them one per element, as on jax's CPU backend (odd counts
  leave part of the last byte unused). Each element's value is printed
  from inside the callback, and a result computed there comes back."""
  def program(devices):
    count = int(np.prod(shape))
    values = np.array([0, 1, 2, 3, 1, 0, 2, 3, 3, 1, 0, 2, 1, 3, 2][:count], np.float32) - (
        2.0 if np.dtype(dtype).kind in "if" else 0.0)
    x = values.reshape(shape).astype(dtype)

    def host(a):
      a = np.asarray(a)
      assert a.dtype == np.dtype(dtype) and a.shape == shape
      print("callback saw", a.astype(np.float32).reshape(-1).tolist())
      return a, np.flip(a).copy()

    types = (jax.ShapeDtypeStruct(shape, dtype), jax.ShapeDtypeStruct(shape, dtype))
    return jax.jit(lambda v: jax.pure_callback(host, types, v))(x)
  ours, lines = run_both(program, capsys)
  assert ours[0].dtype == np.dtype(dtype) and len(lines) == 1


def test_pure_callback_pytrees_and_several_outputs(capsys):
  def program(devices):
    def host(tree):
      return {"sum": np.float32(tree["a"].sum() + tree["b"][0].sum()), "pair": (tree["b"][1] * 2, tree["a"][::-1])}

    x = {"a": np.arange(4, dtype=np.float32), "b": (np.ones((2, 2), np.int32), np.arange(3, dtype=np.int32))}
    types = {"sum": jax.ShapeDtypeStruct((), np.float32),
             "pair": (jax.ShapeDtypeStruct((3,), np.int32), jax.ShapeDtypeStruct((4,), np.float32))}
    return jax.jit(lambda t: jax.pure_callback(host, types, t))(x)
  ours, _ = run_both(program, capsys)
  np.testing.assert_array_equal(ours["pair"][1], [3, 2, 1, 0])


@pytest.mark.parametrize("vmap_method", ["sequential", "expand_dims", "broadcast_all"])
def test_pure_callback_vmap_methods(capsys, vmap_method):
  def program(devices):
    calls = []

    def host(a, b):
      calls.append((a.shape, b.shape))
      return np.asarray(a) * np.asarray(b) + 1

    def f(a, b):
      return jax.pure_callback(host, jax.ShapeDtypeStruct(jnp.broadcast_shapes(a.shape, b.shape), a.dtype), a, b,
                               vmap_method=vmap_method)
    out = jax.jit(jax.vmap(f, in_axes=(0, None)))(np.arange(6.0, dtype=np.float32).reshape(3, 2),
                                                   np.float32(2.0) * np.ones(2, np.float32))
    print(calls)
    return out
  run_both(program, capsys)


@pytest.mark.parametrize("ordered", [False, True])
def test_io_callback(capsys, ordered):
  def program(devices):
    log = []

    def host(a):
      log.append(np.asarray(a).tolist())
      return np.asarray(a).sum(keepdims=True)

    f = jax.jit(lambda x: io_callback(host, jax.ShapeDtypeStruct((1,), jnp.float32), x, ordered=ordered) * 3)
    out = [f(jnp.arange(3.0) + i) for i in range(3)]
    jax.effects_barrier()
    print(log if ordered else sorted(log))
    return out
  run_both(program, capsys)


def test_ordered_effects_keep_program_order(capsys):
  """Ordered io_callbacks and prints inside loops run in program order."""
  def program(devices):
    log = []

    def record(tag):
      def host(i):
        log.append((tag, int(i)))
        return np.int32(i)
      return lambda i: io_callback(host, jax.ShapeDtypeStruct((), jnp.int32), i, ordered=True)

    def body(i, acc):
      a = record("a")(i)
      jax.debug.print("step {}", i, ordered=True)
      b = record("b")(i * 10)
      return acc + a + b

    out = jax.jit(lambda n: jax.lax.fori_loop(0, n, body, jnp.int32(0)))(5)
    jax.effects_barrier()
    print(log)
    return out
  _, lines = run_both(program, capsys)
  assert lines[0] == "step 0" and lines[4] == "step 4"
  assert lines[-1] == str([(t, i * (10 if t == "b" else 1)) for i in range(5) for t in ("a", "b")])


def test_grad_vmap_and_control_flow(capsys):
  def program(devices):
    def loss(w):
      jax.debug.print("w={}", w)
      y = jnp.sin(w) * 3
      jax.debug.callback(lambda v: print("y", np.round(np.asarray(v), 4)), y)
      return jnp.sum(y ** 2)

    g = jax.jit(jax.grad(loss))(jnp.arange(3.0))

    def step(c, x):
      jax.debug.print("scan c={} x={}", c, x, ordered=True)
      return c + x, jax.pure_callback(lambda a: np.asarray(a) * 2, jax.ShapeDtypeStruct((), jnp.float32), x)
    s = jax.jit(lambda xs: jax.lax.scan(step, 0.0, xs))(jnp.arange(4.0))

    def cond_fn(c):
      return c < 3
    def body_fn(c):
      jax.debug.print("while {}", c, ordered=True)
      return c + 1
    w = jax.jit(lambda: jax.lax.while_loop(cond_fn, body_fn, 0))()

    c = jax.jit(lambda p, x: jax.lax.cond(p, lambda v: jax.pure_callback(
        lambda a: np.asarray(a) + 100, jax.ShapeDtypeStruct((2,), jnp.float32), v), lambda v: v - 1, x))
    c1, c2 = c(True, jnp.ones(2)), c(False, jnp.ones(2))
    v = jax.jit(jax.vmap(lambda x: jax.debug.print("vmap {}", x) or x * 2))(jnp.arange(3.0))
    return g, s, w, c1, c2, v
  _, lines = run_both(program, capsys, sort_lines=True)
  assert "while 2" in lines and "scan c=3.0 x=3.0" in lines


def test_exception_in_callback_reaches_caller(capsys):
  for platform in PLATFORMS:
    def host(a):
      raise ValueError(f"bad value {float(a)} from the callback")
    x = jax.device_put(np.float32(1.5), jax.devices(platform)[0])
    f = jax.jit(lambda v: jax.pure_callback(host, jax.ShapeDtypeStruct((), jnp.float32), v))
    with pytest.raises(Exception, match=r"ValueError: bad value 1.5 from the callback") as info:
      np.asarray(f(x))
    assert "ValueError" in str(info.value), platform
  # And the backend still works afterwards.
  x = jax.device_put(np.float32(2.0), jax.devices("myplugin")[0])
  assert float(jax.jit(lambda v: jax.pure_callback(lambda a: a * 2, jax.ShapeDtypeStruct((), jnp.float32), v))(x)) == 4


@pytest.mark.parametrize("bad,expected", [
    (lambda a: np.zeros(4, np.float32), r"Incorrect output shape for return value #0: Expected: \(3,\), Actual: \(4,\)"),
    (lambda a: np.zeros(3, np.int32), r"Incorrect output dtype for return value #0: Expected: float32, Actual: int32"),
])
def test_wrong_result_gives_jax_error(bad, expected):
  for platform in PLATFORMS:
    x = jax.device_put(np.zeros(3, np.float32), jax.devices(platform)[0])
    f = jax.jit(lambda v: jax.pure_callback(bad, jax.ShapeDtypeStruct((3,), jnp.float32), v))
    with pytest.raises(Exception, match=expected):
      np.asarray(f(x))


def test_callback_that_calls_jax(capsys):
  """The callback runs jax itself (on the host's CPU device and on myplugin)
  while the engine waits for it: no deadlock on the GIL."""
  def program(devices):
    def host(a):
      inner = jax.jit(lambda v: jnp.cumsum(v) * 2)(a)  # jax puts the operands on its CPU device
      mine = jax.jit(lambda v: v + 1)(jax.device_put(np.asarray(a), devices[1]))
      return np.asarray(inner) + np.asarray(mine)
    return jax.jit(lambda v: jax.pure_callback(host, jax.ShapeDtypeStruct((4,), jnp.float32), v))(
        jnp.arange(4.0))
  run_both(program, capsys)


def _mesh(devices):
  return Mesh(np.array(devices), ("i",))


def test_shard_map_callbacks_on_8_devices_with_collectives(capsys):
  """Every device calls back at once (each with its own shard), around a psum."""
  def program(devices):
    mesh = _mesh(devices)

    def body(x):
      i = jax.lax.axis_index("i")
      jax.debug.print("device {i}: x={x}", i=i, x=x)
      y = jax.pure_callback(lambda a: np.asarray(a) ** 2, jax.ShapeDtypeStruct(x.shape, x.dtype), x)
      s = jax.lax.psum(y, "i")
      jax.debug.print("device {i}: psum={s}", i=i, s=s)
      return y + s
    f = jax.jit(shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P("i")))
    x = jax.device_put(np.arange(16, dtype=np.float32), NamedSharding(mesh, P("i")))
    return [f(x) for _ in range(3)]
  _, lines = run_both(program, capsys, sort_lines=True)
  assert len(lines) == 3 * 16


def test_8_devices_call_back_into_jax_at_once(capsys):
  """Every device's callback runs a jitted program on device 0 of the same
  backend while the engine waits for all of them: no deadlock."""
  def program(devices):
    mesh = _mesh(devices)
    inner = jax.jit(lambda v: v * 10 + 1)

    def host(a):
      return np.asarray(inner(jax.device_put(np.asarray(a), devices[0])))
    f = jax.jit(shard_map(lambda v: jax.pure_callback(host, jax.ShapeDtypeStruct(v.shape, v.dtype), v), mesh=mesh,
                          in_specs=P("i"), out_specs=P("i")))
    return f(jax.device_put(np.arange(16, dtype=np.float32), NamedSharding(mesh, P("i"))))
  ours, _ = run_both(program, capsys)
  np.testing.assert_array_equal(ours, np.arange(16) * 10 + 1)


def test_jit_over_8_devices_calls_back_once(capsys):
  def program(devices):
    mesh = _mesh(devices)
    x = jax.device_put(np.arange(16, dtype=np.float32), NamedSharding(mesh, P("i")))

    def f(v):
      jax.debug.print("total {}", v.sum())
      r = jax.pure_callback(lambda a: np.asarray(a)[::-1].copy(), jax.ShapeDtypeStruct(v.shape, v.dtype), v)
      return r * 2 + v
    return jax.jit(f, out_shardings=NamedSharding(mesh, P("i")))(x)
  _, lines = run_both(program, capsys)
  assert lines == ["total 120.0"]


def test_pmap_on_8_devices(capsys):
  def program(devices):
    f = jax.pmap(lambda x: jax.debug.print("pmap {}", x) or jax.lax.psum(
        jax.pure_callback(lambda a: np.asarray(a) + 0.5, jax.ShapeDtypeStruct(x.shape, x.dtype), x), "d"),
                 axis_name="d", devices=devices)
    return f(np.arange(8, dtype=np.float32))
  _, lines = run_both(program, capsys, sort_lines=True)
  assert len(lines) == 8


def test_partitioned_callbacks(capsys):
  """partitioned=True: on one device, inside shard_map, and in a jit
  partitioned over several devices (each device calls back with its own
  shard: jaxlib's XLA partitions that program) like jax's CPU backend."""
  def program(devices):
    jax.jit(lambda v: jax.debug.callback(lambda a: print("one", a), v, partitioned=True))(jnp.arange(2.0))
    mesh = _mesh(devices)
    x = jax.device_put(np.arange(8, dtype=np.float32), NamedSharding(mesh, P("i")))
    jax.jit(shard_map(lambda v: jax.debug.print("shard {}", v, partitioned=True) or v, mesh=mesh,
                      in_specs=P("i"), out_specs=P("i")))(x)
    y = jax.device_put(np.arange(16, dtype=np.float32).reshape(8, 2), NamedSharding(mesh, P("i")))
    jax.block_until_ready(jax.jit(lambda v: jax.debug.print("part {}", v * 2, partitioned=True) or v + 1)(y))
    return jax.jit(lambda v: jax.debug.callback(lambda a: print(f"cb {a.shape} {a.sum()}"), v, partitioned=True) or
                   v.sum())(y)
  _, lines = run_both(program, capsys, sort_lines=True)
  assert sum(line.startswith("part [[") for line in lines) == 8  # one shard of one row per device
  assert sum(line.startswith("cb (1, 2)") for line in lines) == 8


def test_checkify_runtime_errors_like_cpu():
  """With xla_runtime_errors, checkify.check lowers to a callback that raises."""
  from jax._src import config
  from jax.experimental import checkify
  errors = []
  for platform in PLATFORMS:
    x = jax.device_put(np.float32(-1.0), jax.devices(platform)[0])
    with config.xla_runtime_errors(True):
      f = jax.jit(lambda v: checkify.check(v > 0, "needs positive, got {}", v) or v)
      with pytest.raises(Exception, match="needs positive, got -1.0") as info:
        f(x).block_until_ready()
    errors.append(info.type)
  assert errors[0] == errors[1]


def test_callable_lives_with_the_executable():
  from jax_plugin import callbacks
  jax.clear_caches()
  gc.collect()
  before = callbacks.live_callbacks()
  x = jax.device_put(np.arange(4, dtype=np.float32), jax.devices("myplugin")[0])
  compiled = jax.jit(lambda v: jax.pure_callback(np.cos, jax.ShapeDtypeStruct((4,), jnp.float32), v)).lower(
      x).compile()
  jax.clear_caches()
  gc.collect()
  assert callbacks.live_callbacks() == before + 1  # held by the executable alone
  np.testing.assert_allclose(np.asarray(compiled(x)), np.cos(np.arange(4, dtype=np.float32)), rtol=1e-6)
  del compiled
  gc.collect()
  assert callbacks.live_callbacks() == before


def test_programs_with_callbacks_declare_them_to_jax():
  """jax writes no persistent-cache entry for a program with host callbacks:
  ours are in the list jax checks, so no other process can load an id that
  means nothing there."""
  from jax_plugin import callbacks
  x = jax.device_put(np.float32(1.0), jax.devices("myplugin")[0])
  lowered = jax.jit(lambda v: jax.debug.print("{}", v) or v).lower(x)
  args = getattr(getattr(lowered, "_lowering", None), "compile_args", None)
  if args is None:
    pytest.fail("this jax keeps no compile_args on its lowering; check how it decides on caching")
  assert any(isinstance(h, callbacks.HostCallback) for h in args["host_callbacks"])
  assert "callback_id" in lowered.as_text()


def test_many_threads_call_back_at_once(capsys):
  """Python threads dispatching programs with callbacks while the engine's
  threads call back: every result arrives."""
  x = jax.device_put(np.arange(4, dtype=np.float32), jax.devices("myplugin")[0])
  f = jax.jit(lambda v: jax.pure_callback(lambda a: np.asarray(a) + 1, jax.ShapeDtypeStruct((4,), jnp.float32), v))
  results = [None] * 8

  def work(k):
    results[k] = [float(np.asarray(f(x + k)).sum()) for _ in range(5)]
  threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
  for t in threads:
    t.start()
  for t in threads:
    t.join(timeout=60)
  assert all(not t.is_alive() for t in threads)
  assert results == [[float(np.sum(np.arange(4) + k + 1))] * 5 for k in range(8)]


def test_cuda_handler_loads_only_a_cuda_runtime():
  """The CUDA engine's handler (never run here: no GPU) refuses what is not a
  CUDA runtime, naming it."""
  from jax_plugin import _myplugin
  if _myplugin.cuda_host_callback_target.__doc__ is None:
    pytest.fail("binding missing")
  try:
    r = _myplugin.cuda_host_callback_target("/nonexistent/libcudart.so.12")
  except RuntimeError as e:
    assert "cannot load the CUDA runtime (/nonexistent/libcudart.so.12)" in str(e)
  else:
    assert r is None  # built without the CUDA headers
    return
  with pytest.raises(RuntimeError, match="has no cudaMemcpyAsync: not a CUDA runtime"):
    _myplugin.cuda_host_callback_target("libc.so.6")
  # The runtime of the test extra's nvidia-cuda-runtime-cu12 loads without a GPU.
  from jax_plugin import engine_selection
  cudart = engine_selection.package_file("nvidia.cuda_runtime", "lib/libcudart.so.12")
  if cudart is None:
    pytest.fail("nvidia-cuda-runtime-cu12 (the test extra) is not installed")
  assert type(_myplugin.cuda_host_callback_target(cudart)).__name__ == "PyCapsule"


def test_callbacks_under_jax_platforms_myplugin_alone():
  """jax's callback code puts operands on jax's CPU device, so under
  JAX_PLATFORMS=myplugin alone the plugin keeps jax's cpu backend behind
  its own: debug.print, pure_callback and io_callback work, in jit and
  eagerly, and myplugin stays the default backend. Compared with the same
  program under JAX_PLATFORMS=cpu."""
  from proc import child_env, run_python
  code = ("import jax, jax.numpy as jnp, numpy as np\n"
          "from jax.experimental import io_callback\n"
          "@jax.jit\n"
          "def f(v):\n"
          "  jax.debug.print('v {} sum {s}', v, s=v.sum())\n"
          "  y = jax.pure_callback(lambda a: np.cos(a), jax.ShapeDtypeStruct(v.shape, v.dtype), v)\n"
          "  io_callback(lambda a: print('io', a), None, y, ordered=True)\n"
          "  return 2 * y\n"
          "print('out', np.asarray(f(jnp.arange(3.0))).round(5).tolist())\n"
          "jax.debug.print('eager {}', jnp.ones(2)); jax.effects_barrier()\n"
          "print('default', jax.default_backend(), jax.devices()[0].platform)\n")
  outs = {}
  for platforms in ("myplugin", "cpu"):
    r = run_python(["-c", code], child_env(JAX_PLATFORMS=platforms), timeout=120)
    assert r.returncode == 0, r.output
    outs[platforms] = r.stdout.splitlines()
  assert outs["myplugin"][-1] == "default myplugin myplugin"
  assert outs["cpu"][-1] == "default cpu cpu"
  assert outs["myplugin"][:-1] == outs["cpu"][:-1] and len(outs["cpu"]) == 5, outs


def test_multi_process_each_process_runs_its_devices_callbacks(tmp_path):
  """2 processes x 4 devices: each process prints and receives the callbacks
  of its own devices (and process 0 the whole-array callback, which runs on
  device 0), as jax's CPU backend does in one process with 8 devices; the
  results equal that run's."""
  import json
  import os
  import sys
  from proc import child_env, run_python
  program = os.path.join(os.path.dirname(__file__), "programs", "host_callbacks_program.py")
  ref_out = str(tmp_path / "ref.{rank}.json")
  r = run_python([program, ref_out], child_env(JAX_PLATFORMS="cpu", JAX_NUM_CPU_DEVICES="8"), timeout=120)
  assert r.returncode == 0, r.output
  ref = json.load(open(ref_out.format(rank=0)))
  # The same program on myplugin's 8 devices in one process.
  one_out = str(tmp_path / "one.{rank}.json")
  r = run_python([program, one_out], child_env(JAX_PLATFORMS="myplugin,cpu", MYPLUGIN_NUM_DEVICES="8"), timeout=120)
  assert r.returncode == 0, r.output
  one = json.load(open(one_out.format(rank=0)))
  assert one["platform"] == "myplugin" and sorted(one["lines"]) == sorted(ref["lines"])
  assert (one["received"], one["ordered"], one["shards"]) == (ref["received"], ref["ordered"], ref["shards"])
  out = str(tmp_path / "mp.{rank}.json")
  # jax's pure_callback puts its operands on jax's CPU device: list "cpu" too.
  r = run_python(["-m", "jax_plugin.launcher", "-n", "2", "--devices-per-process", "4", "--timeout", "150", "--",
                  sys.executable, program, out], child_env(JAX_PLATFORMS="myplugin,cpu"), timeout=180)
  assert r.returncode == 0, r.output
  seen_lines = []
  for rank in range(2):
    got = json.load(open(out.format(rank=rank)))
    assert got["platform"] == "myplugin" and got["processes"] == 2
    local = range(rank * 4, rank * 4 + 4)
    want = [l for l in ref["lines"] if l.startswith("device ") and int(l.split()[1].rstrip(":")) in local]
    if rank == 0:
      want += [l for l in ref["lines"] if l.startswith("total ")]
    assert sorted(got["lines"]) == sorted(want), rank
    assert got["received"] == [e for e in ref["received"] if e[0] in local]
    assert got["ordered"] == [d for d in ref["ordered"] if d in local] and len(got["ordered"]) == 8
    for name, shards in got["shards"].items():
      assert sorted(shards) == [str(d) for d in local]
      for device, values in shards.items():
        np.testing.assert_allclose(values, ref["shards"][name][device], rtol=1e-6)
    seen_lines += got["lines"]
  assert sorted(seen_lines) == sorted(ref["lines"])


def test_engine_without_the_handler_refuses_at_lowering(monkeypatch):
  """If the engine refused our handler, callbacks fail at lowering with the
  reason (the rest of the backend keeps working), never at run time."""
  from jax_plugin import callbacks
  monkeypatch.setattr(callbacks, "_unavailable", "registering the handler failed: test")
  x = jax.device_put(np.float32(1.0), jax.devices("myplugin")[0])
  with pytest.raises(NotImplementedError, match="cannot run Python host callbacks on this engine: registering"):
    jax.jit(lambda v: jax.debug.print("never {}", v) or v * 3)(x)
  assert float(jax.jit(lambda v: v * 3)(x)) == 3.0
  y = jax.device_put(np.float32(1.0), jax.devices("cpu")[0])
  np.testing.assert_allclose(
      np.asarray(jax.jit(lambda v: jax.pure_callback(np.sin, jax.ShapeDtypeStruct((), jnp.float32), v))(y)),
      np.sin(np.float32(1.0)), rtol=1e-6)


def test_an_unknown_callback_id_is_an_error():
  """Ids carry a per-process prefix: an id from elsewhere (or of a freed
  callback) is refused by name, never run as some other callback."""
  from jax_plugin import callbacks
  x = jax.device_put(np.float32(1.0), jax.devices("myplugin")[0])
  lowered = jax.jit(lambda v: jax.pure_callback(np.cos, jax.ShapeDtypeStruct((), jnp.float32), v)).lower(x)
  ids = [h.id for h in lowered._lowering.compile_args["host_callbacks"]]
  assert ids and all(i >> 32 for i in ids)  # the prefix
  with pytest.raises(RuntimeError, match="host callback #0x1 does not exist in this process"):
    callbacks._dispatch(1, ())


@pytest.mark.parametrize("path", ["env", "update", "launcher", "initialize"])
def test_callbacks_leave_jax_config_as_the_user_set_it(path):
  """Keeping jax's CPU backend for callbacks changes no jax configuration
  value (programs and libraries save and restore it; jax's own test harness
  fails a test that changes one), on every way the backend starts: the
  JAX_PLATFORMS variable, jax.config.update before first use, myplugin-run,
  and jax.distributed.initialize under it."""
  import json
  import os
  import sys
  from proc import child_env, run_python
  program = os.path.join(os.path.dirname(__file__), "programs", "config_untouched.py")
  if path in ("env", "update"):
    env = child_env(JAX_PLATFORMS="myplugin") if path == "env" else {
        k: v for k, v in child_env().items() if k != "JAX_PLATFORMS"}
    argv = [program, path]
  else:
    env = child_env(JAX_PLATFORMS="myplugin")
    argv = ["-m", "jax_plugin.launcher", "-n", "2", "--", sys.executable, program,
            "initialize" if path == "initialize" else "env"]
  r = run_python(argv, env, timeout=180)
  assert r.returncode == 0, r.output
  results = [json.loads(l.split("RESULT ", 1)[1]) for l in r.stdout.splitlines() if "RESULT " in l]
  assert len(results) == (1 if path in ("env", "update") else 2), r.output
  for got in results:
    assert got["changed"] == {}, got
    assert got["default"] == "myplugin", got
    np.testing.assert_allclose(got["out"], 2 * np.cos(np.arange(3.0)), rtol=1e-5)
  assert r.stdout.count("sum 3.0") == len(results), r.output


# -- jax.experimental.buffer_callback ------------------------------------
# jax builds it only for its cpu, cuda and rocm backends; myplugin lowers it
# to a handler of its own (jax_plugin/buffer_callbacks.py) that hands the
# callback the operands and results in place.


@pytest.mark.parametrize("dtype", [np.float32, np.int8, ml_dtypes.bfloat16, np.complex64, np.bool_])
def test_buffer_callback_writes_its_results_in_place(dtype, capsys):
  from jax.experimental import buffer_callback

  def program(devices):
    seen = []

    def add_one(ctx, out, x):
      assert ctx.stage == buffer_callback.ExecutionStage.EXECUTE
      assert not x.writeable and out.writeable and x.shape == out.shape == (3, 4) and x.dtype == dtype
      with pytest.raises(jax.errors.JaxRuntimeError, match="GPU context is not available"):
        ctx.stream
      a = np.asarray(x)
      # numpy's DLPack has no bfloat16 (jax's own test skips it there too)
      seen.append(dtype == ml_dtypes.bfloat16 or np.from_dlpack(x).tobytes() == a.tobytes())
      np.asarray(out)[...] = a if dtype == np.bool_ else a + np.ones((), dtype)

    data = (np.arange(12).reshape(3, 4) % 5).astype(dtype)
    f = buffer_callback.buffer_callback(add_one, jax.ShapeDtypeStruct(data.shape, data.dtype))
    result = jax.jit(lambda v: f(v * np.ones((), dtype)))(data)
    assert seen == [True]
    return result

  run_both(program, capsys)


def test_buffer_callback_aliases_vmap_and_side_effects(capsys):
  from jax.experimental import buffer_callback

  def program(devices):
    pointers = []

    def same(ctx, out, x):
      pointers.append((np.asarray(x).ctypes.data, np.asarray(out).ctypes.data))

    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    aliased = buffer_callback.buffer_callback(same, jax.ShapeDtypeStruct.like(data), input_output_aliases={0: 0})
    jax.block_until_ready(aliased(data))
    assert len(pointers) == 1 and pointers[0][0] == pointers[0][1]

    def add(ctx, out, x, y):
      np.asarray(out)[...] = np.asarray(x) + np.asarray(y)

    summed = buffer_callback.buffer_callback(add, jax.ShapeDtypeStruct((4,), np.float32), vmap_method="sequential")
    calls = []
    effect = buffer_callback.buffer_callback(lambda *_: calls.append(1), jax.ShapeDtypeStruct((), np.float32),
                                             has_side_effect=True)
    jax.block_until_ready(effect())
    assert calls == [1]
    return jax.vmap(summed)(data, data * 2)

  run_both(program, capsys)
