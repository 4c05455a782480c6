"""Prints (as JSON to argv[1], from process 0) jax's cost and memory analysis
of a few programs over a mesh of every device in the job: the same numbers
should come from myplugin in any layout of processes and from jax's CPU
backend in one process."""
import json
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

MEMORY_FIELDS = ("argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes", "temp_size_in_bytes")


def analyses(fn, *args, **jit_kwargs):
  compiled = jax.jit(fn, **jit_kwargs).lower(*args).compile()
  cost = compiled.cost_analysis()
  if isinstance(cost, list):  # older jax: one dict per module
    cost = cost[0]
  mem = compiled.memory_analysis()
  return {"cost": None if cost is None else {k: float(v) for k, v in cost.items()},
          "memory": None if mem is None else {f: int(getattr(mem, f)) for f in MEMORY_FIELDS}}


def main(path):
  n = jax.device_count()
  mesh = Mesh(np.array(jax.devices()), ("d",))
  rows = NamedSharding(mesh, P("d"))
  x = jax.make_array_from_callback((8 * n, 16), rows,
                                   lambda idx: np.arange(8 * n * 16, dtype=np.float32).reshape(8 * n, 16)[idx])
  w = jax.device_put(np.ones((16, 16), np.float32), NamedSharding(mesh, P()))
  out = {
      # elementwise, sharded: one device's share
      "scale": analyses(lambda a: a * 2 + 1, x),
      # a matmul on each shard, then a sum across devices (an all-reduce)
      "matmul_sum": analyses(lambda a, b: jnp.sum(jnp.tanh(a @ b)), x, w),
  }
  if jax.process_index() == 0:
    with open(path, "w") as f:
      json.dump(out, f, indent=1, sort_keys=True)
  print("analysis done", flush=True)


if __name__ == "__main__":
  main(sys.argv[1])
