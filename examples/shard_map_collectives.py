"""Collectives inside shard_map on a mesh of every process's devices: psum,
pmean, pmax, pmin, all_gather, psum_scatter, ppermute, all_to_all and
axis_index, over a 1-D mesh and over either axis of a 2-D one.

  myplugin-run -n 2 --devices-per-process 4 -- python examples/shard_map_collectives.py
  JAX_PLATFORMS=myplugin MYPLUGIN_NUM_DEVICES=8 python examples/shard_map_collectives.py

With --save OUT, each process saves the blocks it holds ({rank} in OUT is
the process index).
"""
import argparse
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P


def line_collectives(n: int) -> dict:
  """Each collective over the axis "i" of a 1-D mesh of n devices."""
  return {
      "psum": lambda v: jax.lax.psum(v, "i"),
      "pmean": lambda v: jax.lax.pmean(v, "i"),
      "pmax": lambda v: jax.lax.pmax(v, "i"),
      "pmin": lambda v: jax.lax.pmin(v, "i"),
      "all_gather": lambda v: jax.lax.all_gather(v, "i", tiled=True),
      "psum_scatter": lambda v: jax.lax.psum_scatter(v, "i", scatter_dimension=1, tiled=True),
      "ppermute": lambda v: jax.lax.ppermute(v, "i", [(j, (j + 1) % n) for j in range(n)]),
      "all_to_all": lambda v: jax.lax.all_to_all(v, "i", split_axis=1, concat_axis=1, tiled=True),
      "axis_index": lambda v: v * 0 + jax.lax.axis_index("i"),
  }


# Over either axis of a 2 x n/2 mesh ("a", "b").
GRID_COLLECTIVES = {
    "grid_psum_a": lambda v: jax.lax.psum(v, "a"),  # across processes when each holds a row of the mesh
    "grid_psum_b": lambda v: jax.lax.psum(v, "b"),
    "grid_all_gather_a": lambda v: jax.lax.all_gather(v, "a", axis=1, tiled=True),
    "grid_ppermute_a": lambda v: jax.lax.ppermute(v, "a", [(0, 1), (1, 0)]),
}


def looped(line: Mesh):
  """A step of a loop that communicates, with its result reduced again outside."""
  n = line.devices.size

  @jax.jit
  @partial(jax.shard_map, mesh=line, in_specs=P("i"), out_specs=P())
  def fn(v):
    v = jax.lax.fori_loop(0, 3, lambda k, acc: 0.5 * acc + jax.lax.psum(acc, "i") / n + k, v)
    return jax.lax.pmax(v.sum(), "i")
  return fn


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--save")
  args = parser.parse_args()

  n = jax.device_count()
  line = Mesh(np.array(jax.devices()), ("i",))
  grid = Mesh(np.array(jax.devices()).reshape(2, n // 2), ("a", "b"))
  host = (np.arange(n * n, dtype=np.float32).reshape(n, n) * 7 % 11) - 5  # a mix of signs
  x = jax.make_array_from_callback(host.shape, NamedSharding(line, P("i")), lambda idx: host[idx])
  xg = jax.make_array_from_callback(host.shape, NamedSharding(grid, P("a", "b")), lambda idx: host[idx])

  results = {}
  for name, fn in line_collectives(n).items():
    out = jax.jit(jax.shard_map(fn, mesh=line, in_specs=P("i"), out_specs=P("i")))(x)
    for s in out.addressable_shards:
      results[f"{name}.{s.device.id}"] = np.asarray(s.data)
  for name, fn in GRID_COLLECTIVES.items():
    out = jax.jit(jax.shard_map(fn, mesh=grid, in_specs=P("a", "b"), out_specs=P("a", "b")))(xg)
    for s in out.addressable_shards:
      results[f"{name}.{s.device.id}"] = np.asarray(s.data)
  results["loop"] = np.asarray(looped(line)(x))

  first = jax.local_devices()[0].id
  print(f"process {jax.process_index()}: psum on device {first}:", results[f"psum.{first}"].ravel()[:4],
        "axis_index:", results[f"axis_index.{first}"].ravel()[:1], "loop:", results["loop"])
  if args.save:
    np.savez(args.save.format(rank=jax.process_index()), **results)


# Importable without devices: ci/gpu_compile_matrix.sh compiles these programs for GPUs.
if __name__ == "__main__":
  main()
