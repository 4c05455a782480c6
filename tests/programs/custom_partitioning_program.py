"""jax's documented custom_partitioning example (an FFT whose partition rule
keeps the last dimension whole: jax/_src/custom_partitioning.py's
docstring), with jax.debug.inspect_array_sharding and a partitioned=True callback, over every device of the
job. It knows nothing of myplugin: the test runs it on myplugin (one process
or several) and on jax's CPU backend with 8 devices, and compares what it
saves. Each process saves the shards it holds.

usage: python custom_partitioning_program.py OUT.npz   ({rank} in OUT is the process index)
"""
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental.custom_partitioning import custom_partitioning
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P


def supported_sharding(sharding, shape):
  rank = len(shape.shape)
  max_shared_dims = min(len(sharding.spec), rank - 1)
  names = tuple(sharding.spec[:max_shared_dims]) + tuple(None for _ in range(rank - max_shared_dims))
  return NamedSharding(sharding.mesh, P(*names))


def partition(mesh, arg_shapes, result_shape):
  arg_shardings = jax.tree.map(lambda x: x.sharding, arg_shapes)
  return (mesh, jnp.fft.fft, supported_sharding(arg_shardings[0], arg_shapes[0]),
          (supported_sharding(arg_shardings[0], arg_shapes[0]),))


def infer_sharding_from_operands(mesh, arg_shapes, result_shape):
  arg_shardings = jax.tree.map(lambda x: x.sharding, arg_shapes)
  return supported_sharding(arg_shardings[0], arg_shapes[0])


@custom_partitioning
def my_fft(x):
  return jnp.fft.fft(x)


my_fft.def_partition(infer_sharding_from_operands=infer_sharding_from_operands, partition=partition,
                     sharding_rule="...i -> ...i")

results = {}
inspected = []


def save(name, array):
  for s in array.addressable_shards:
    results[f"{name}.shard.{s.device.id}"] = np.asarray(s.data)
    results[f"{name}.index.{s.device.id}"] = np.array(repr(s.index))
  results[name + ".spec"] = np.array(str(array.sharding.spec))


assert jax.device_count() == 8, jax.devices()
rng = np.random.default_rng(0)
x = (rng.normal(size=(64, 32)) + 1j * rng.normal(size=(64, 32))).astype(np.complex64)

# The docstring's case: rows sharded, the FFT's dimension whole.
mesh = Mesh(np.array(jax.devices()).reshape(8), ("x",))
rows = jax.device_put(x, NamedSharding(mesh, P("x", None)))
save("fft_rows", jax.jit(my_fft)(rows))


# Both dimensions sharded: the rule asks for the last one whole, so the
# partitioner gathers it around the call; inspect_array_sharding reports
# what the partitioner chose.
mesh2 = Mesh(np.array(jax.devices()).reshape(2, 4), ("a", "b"))
both = jax.device_put(x, NamedSharding(mesh2, P("a", "b")))


@jax.jit
def fft_then_scale(v):
  jax.debug.inspect_array_sharding(v, callback=lambda s: inspected.append(str(s.spec)))
  y = my_fft(v)
  jax.debug.inspect_array_sharding(y, callback=lambda s: inspected.append(str(s.spec)))
  return y * 2


save("fft_both", fft_then_scale(both))
results["inspected"] = np.array(repr(inspected))

# A partitioned=True callback: each device calls back with its own shard
# (each process with its devices' shards).
shards = []
jax.jit(lambda v: jax.debug.callback(lambda a: shards.append((a.shape, round(float(np.abs(a).sum()), 2))), my_fft(v),
                                     partitioned=True))(rows)
jax.effects_barrier()
results["callback_shards"] = np.array(repr(sorted(shards)))
np.savez(sys.argv[1].format(rank=jax.process_index()), platform=np.array(jax.devices()[0].platform), **results)
print("inspected:", inspected)
