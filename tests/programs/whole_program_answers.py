"""What jax reads back from a compiled multi-device program whose output
shardings it leaves to the partitioner: the shardings, the partition count
in its optimized module, and the results. Run on myplugin across processes
and on jax's CPU backend in one process; saves rank-wise npz files."""
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

out = sys.argv[1]
n = jax.device_count()
mesh = Mesh(np.array(jax.devices()).reshape(2, n // 2), ("a", "b"))
rows = NamedSharding(mesh, P("a", "b"))
x = jax.make_array_from_callback((8, 16), rows, lambda i: np.arange(128, dtype=np.float32).reshape(8, 16)[i])

programs = {
    "elementwise": lambda v: jnp.tanh(v) * 2,              # keeps the input's sharding
    "column_sums": lambda v: v.sum(axis=0),                # partly reduced
    "total_and_max": lambda v: (v.sum(), v.max(axis=1)),   # a tuple: one replicated, one sharded
    "transposed": lambda v: v.T @ v,                       # a contraction over the sharded axis
}
saved = {}
for name, fn in programs.items():
  compiled = jax.jit(fn).lower(x).compile()
  text = compiled.as_text()
  saved[f"{name}.partitions"] = np.bool_(f"num_partitions={n}" in text)
  saved[f"{name}.no_mark"] = np.bool_("myplugin_shadow_stop" not in text)
  saved[f"{name}.out_specs"] = np.array(repr([tuple(s.spec) for s in jax.tree.leaves(compiled.output_shardings)]))
  saved[f"{name}.in_specs"] = np.array(repr([tuple(s.spec) for s in jax.tree.leaves(compiled.input_shardings)]))
  for i, leaf in enumerate(jax.tree.leaves(compiled(x))):
    for shard in leaf.addressable_shards:
      saved[f"{name}.{i}.shard.{shard.device.id}"] = np.asarray(shard.data)
np.savez(out.format(rank=jax.process_index()), **saved)
