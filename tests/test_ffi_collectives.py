"""The collectives' XLA FFI handlers inside compiled programs: 8 devices of
one process, each on its own engine thread, meeting in the local
rendezvous. The reference is jax's own collectives on the same devices."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, PartitionSpec as P

try:
  from jax import shard_map as _shard_map

  def shard_map(f, mesh, in_specs, out_specs):
    return _shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs)
except ImportError:  # older jax
  from jax.experimental.shard_map import shard_map

N = 8
MESH = Mesh(np.array(jax.devices("myplugin")[:N]), ("x",))
ALL = np.arange(N, dtype=np.int64)


# Every collective names the jitted function it belongs to (for the flight
# recorder); partition-id and replica-id record nothing and take no name.
FUNCTION = "jit_hand_written"


def ffi(name, shape_dtype, x, **attrs):
  if name != "myplugin_partition_id":
    attrs.setdefault("function", FUNCTION)
  return jax.ffi.ffi_call(name, shape_dtype)(x, **attrs)


def run(f, x):
  return np.asarray(jax.jit(shard_map(f, MESH, P("x"), P("x")))(x))


X = jnp.arange(N * 16, dtype=jnp.float32) - 40.0


@pytest.mark.parametrize("reduction,ref", [("sum", jax.lax.psum), ("max", jax.lax.pmax), ("min", jax.lax.pmin)])
def test_all_reduce(reduction, ref):
  ours = run(lambda v: ffi("myplugin_all_reduce", jax.ShapeDtypeStruct(v.shape, v.dtype), v, reduction=reduction,
                           replica_groups=ALL, group_size=np.int64(N)), X)
  np.testing.assert_array_equal(ours, run(lambda v: ref(v, "x"), X))


def test_all_reduce_in_two_groups():
  groups = np.array([0, 2, 4, 6, 1, 3, 5, 7], np.int64)  # even and odd devices
  ours = run(lambda v: ffi("myplugin_all_reduce", jax.ShapeDtypeStruct(v.shape, v.dtype), v, reduction="sum",
                           replica_groups=groups, group_size=np.int64(4)), X)
  blocks = np.asarray(X).reshape(N, -1)
  want = np.concatenate([blocks[d % 2::2].sum(axis=0) for d in range(N)])
  np.testing.assert_array_equal(ours, want)


def test_all_gather():
  ours = run(lambda v: ffi("myplugin_all_gather", jax.ShapeDtypeStruct((N * v.shape[0],), v.dtype), v,
                           replica_groups=ALL, group_size=np.int64(N)), X)
  np.testing.assert_array_equal(ours, run(lambda v: jax.lax.all_gather(v, "x", tiled=True), X))


def test_reduce_scatter():
  ours = run(lambda v: ffi("myplugin_reduce_scatter", jax.ShapeDtypeStruct((v.shape[0] // N,), v.dtype), v,
                           reduction="sum", replica_groups=ALL, group_size=np.int64(N)), X)
  np.testing.assert_array_equal(ours, run(lambda v: jax.lax.psum_scatter(v, "x", tiled=True), X))


def test_all_to_all():
  ours = run(lambda v: ffi("myplugin_all_to_all", jax.ShapeDtypeStruct(v.shape, v.dtype), v,
                           replica_groups=ALL, group_size=np.int64(N)), X)
  np.testing.assert_array_equal(ours, run(lambda v: jax.lax.all_to_all(v, "x", 0, 0, tiled=True), X))


def test_collective_permute():
  perm = [(i, (i + 3) % N) for i in range(N)]
  flat = np.array(perm, np.int64).reshape(-1)
  ours = run(lambda v: ffi("myplugin_collective_permute", jax.ShapeDtypeStruct(v.shape, v.dtype), v,
                           device_group=ALL, pairs=flat), X)
  np.testing.assert_array_equal(ours, run(lambda v: jax.lax.ppermute(v, "x", perm), X))


def test_partition_id():
  ids = np.arange(N, dtype=np.int64) * 10
  ours = run(lambda v: jnp.broadcast_to(ffi("myplugin_partition_id", jax.ShapeDtypeStruct((), jnp.uint32), v,
                                            ids=ids), v.shape).astype(jnp.float32), X)
  np.testing.assert_array_equal(ours.reshape(N, -1)[:, 0], ids.astype(np.float32))


def test_bad_attributes_are_a_clear_error():
  with pytest.raises(Exception, match="myplugin: .*do not split into groups of 3"):
    run(lambda v: ffi("myplugin_all_reduce", jax.ShapeDtypeStruct(v.shape, v.dtype), v, reduction="sum",
                      replica_groups=ALL, group_size=np.int64(3)), X)


def test_a_collective_without_its_function_name_is_refused():
  """The handlers bind an exact attribute list: a program that predates the
  `function` attribute fails with XLA's error, never runs half-described."""
  call = jax.ffi.ffi_call("myplugin_all_reduce", jax.ShapeDtypeStruct((16,), jnp.float32))
  with pytest.raises(Exception, match="[Ww]rong number of attributes"):
    run(lambda v: call(v, reduction="sum", replica_groups=ALL, group_size=np.int64(N)), X)


def test_many_calls_back_to_back():
  """Devices race ahead into the next call while others still leave the last one."""
  def ours(v):
    for _ in range(64):  # unrolled: 64 custom calls in a row
      v = ffi("myplugin_all_reduce", jax.ShapeDtypeStruct(v.shape, v.dtype), v, reduction="max",
              replica_groups=ALL, group_size=np.int64(N)) + 1.0
    return v

  def ref(v):
    for _ in range(64):
      v = jax.lax.pmax(v, "x") + 1.0
    return v

  np.testing.assert_array_equal(run(ours, X), run(ref, X))
