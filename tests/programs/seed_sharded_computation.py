"""The examples of the seed document "sharded computation" (jit, sharding
constraints, shard_map), verbatim in substance. It knows nothing of
myplugin: the test runs it under JAX_PLATFORMS=myplugin and under jax's CPU
backend with 8 host devices, and compares what it saves. In a job of
several processes (8 devices in all), each saves the shards it holds.

usage: python seed_sharded_computation.py OUT.npz   ({rank} in OUT is the process index)
"""
import sys
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import mesh_utils
from jax.experimental.shard_map import shard_map
from jax.sharding import NamedSharding, PartitionSpec as P

results = {}


def save(name, array, show=False):
  if getattr(array, "is_fully_addressable", True):
    results[name] = np.asarray(array)
  else:  # other processes hold the rest
    for s in array.addressable_shards:
      results[f"{name}.shard.{s.device.id}"] = np.asarray(s.data)
      results[f"{name}.index.{s.device.id}"] = np.array(repr(s.index))
  # Where each shard lives, as (device id, index) pairs: must agree too.
  if hasattr(array, "addressable_shards"):
    layout = sorted((s.device.id, str(s.index)) for s in array.addressable_shards)
    results[name + ".layout"] = np.array(repr(layout))
  if show:
    jax.debug.visualize_array_sharding(array)


assert jax.device_count() == 8, jax.devices()
print(jax.devices())

arr = jnp.arange(32.0).reshape(4, 8)
save("arr", arr, show=True)

devices = mesh_utils.create_device_mesh((2, 4))
mesh = jax.sharding.Mesh(devices, ("x", "y"))
sharding = jax.sharding.NamedSharding(mesh, P("x", "y"))
print(sharding)
arr_sharded = jax.device_put(arr, sharding)
print(arr_sharded)
save("arr_sharded", arr_sharded, show=True)


@jax.jit
def f_elementwise(x):
  return 2 * jnp.sin(x) + 1


result = f_elementwise(arr_sharded)
print("shardings match:", result.sharding == arr_sharded.sharding)
assert result.sharding == arr_sharded.sharding
save("f_elementwise", result)


@jax.jit
def f_contract(x):
  return x.sum(axis=0)


result = f_contract(arr_sharded)
save("f_contract", result, show=True)
print(result)


@jax.jit
def f_contract_2(x):
  out = x.sum(axis=0)
  # The seed passes a bare 8; this jax's create_device_mesh takes a shape tuple.
  devices = mesh_utils.create_device_mesh((8,))
  mesh = jax.sharding.Mesh(devices, "x")
  sharding = jax.sharding.NamedSharding(mesh, P("x"))
  return jax.lax.with_sharding_constraint(out, sharding)


result = f_contract_2(arr_sharded)
save("f_contract_2", result, show=True)
print(result)

mesh = jax.sharding.Mesh(jax.devices(), "x")
f_elementwise_sharded = shard_map(f_elementwise, mesh=mesh, in_specs=P("x"), out_specs=P("x"))
arr = jnp.arange(32)
save("shard_map_elementwise", f_elementwise_sharded(arr))

x = jnp.arange(32)
print(f"global shape: {x.shape=}")
local_shapes = []


def f(x):
  local_shapes.append(x.shape)
  print(f"device local shape: {x.shape=}")
  return x * 2


y = shard_map(f, mesh=mesh, in_specs=P("x"), out_specs=P("x"))(x)
save("shard_map_local", y)
results["local_shape"] = np.array(local_shapes[0])


def f(x):
  return jnp.sum(x, keepdims=True)


save("shard_map_sum", shard_map(f, mesh=mesh, in_specs=P("x"), out_specs=P("x"))(x))


def f(x):
  sum_in_shard = x.sum()
  return jax.lax.psum(sum_in_shard, "x")


save("shard_map_psum", shard_map(f, mesh=mesh, in_specs=P("x"), out_specs=P())(x))


@jax.jit
def layer(x, weights, bias):
  return jax.nn.sigmoid(x @ weights + bias)


rng = np.random.default_rng(0)
# float32 from the start (jax would convert them anyway): in a job of several
# processes, jax.device_put checks that every process passes the same value
# by comparing the float32 copies it gathered with the float64 original.
x = rng.normal(size=(32,)).astype(np.float32)
weights = rng.normal(size=(32, 4)).astype(np.float32)
bias = rng.normal(size=(4,)).astype(np.float32)
save("layer", layer(x, weights, bias))

sharding = jax.sharding.NamedSharding(mesh, P("x"))
x_sharded = jax.device_put(x, sharding)
weights_sharded = jax.device_put(weights, sharding)
save("layer_sharded_inputs", layer(x_sharded, weights_sharded, bias))


@jax.jit
def layer_auto(x, weights, bias):
  x = jax.lax.with_sharding_constraint(x, sharding)
  weights = jax.lax.with_sharding_constraint(weights, sharding)
  return layer(x, weights, bias)


save("layer_auto", layer_auto(x, weights, bias))


@jax.jit
@partial(shard_map, mesh=mesh, in_specs=(P("x"), P("x", None), P(None)), out_specs=P(None))
def layer_sharded(x, weights, bias):
  return jax.nn.sigmoid(jax.lax.psum(x @ weights, "x") + bias)


save("layer_shard_map", layer_sharded(x, weights, bias))
print(results.get("layer_shard_map", "layer_shard_map: sharded over processes"))

np.savez(sys.argv[1].format(rank=jax.process_index()), **results)
print("saved", len(results), "results")
