"""The main demo: the "sharded computation" examples (jit, sharding
constraints, shard_map) on an 8-device mesh. An ordinary JAX program:

  JAX_PLATFORMS=myplugin MYPLUGIN_NUM_DEVICES=8 python examples/sharded_computation.py
"""
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import mesh_utils
from jax.sharding import NamedSharding, PartitionSpec as P

print("backend:", jax.default_backend(), "devices:", jax.device_count())
print(jax.devices())

arr = jnp.arange(32.0).reshape(4, 8)
mesh = jax.sharding.Mesh(mesh_utils.create_device_mesh((2, 4)), ("x", "y"))
arr_sharded = jax.device_put(arr, NamedSharding(mesh, P("x", "y")))
jax.debug.visualize_array_sharding(arr_sharded)


@jax.jit
def f_elementwise(x):
  return 2 * jnp.sin(x) + 1


result = f_elementwise(arr_sharded)
print("shardings match:", result.sharding == arr_sharded.sharding)

result = jax.jit(lambda x: x.sum(axis=0))(arr_sharded)
jax.debug.visualize_array_sharding(result)
print(result)

mesh = jax.sharding.Mesh(jax.devices(), "x")
x = jnp.arange(32)
total = jax.shard_map(lambda s: jax.lax.psum(s.sum(), "x"), mesh=mesh, in_specs=P("x"), out_specs=P())(x)
print("psum over shards:", total)

rng = np.random.default_rng(0)
x, weights, bias = rng.normal(size=(32,)), rng.normal(size=(32, 4)), rng.normal(size=(4,))


@jax.jit
@partial(jax.shard_map, mesh=mesh, in_specs=(P("x"), P("x", None), P(None)), out_specs=P(None))
def layer_sharded(x, weights, bias):
  return jax.nn.sigmoid(jax.lax.psum(x @ weights, "x") + bias)


print("layer:", layer_sharded(x, weights, bias))
