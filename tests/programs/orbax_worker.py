"""Saves or restores a sharded train state with orbax-checkpoint, unchanged:
no initialize call (myplugin-run, or one process).

  orbax_worker.py save|restore DIR

The state's values are known (aranges), so every process checks each of its
shards of the restored state against numpy.
"""
import sys

import jax
import numpy as np
import orbax.checkpoint as ocp
from jax.sharding import NamedSharding, PartitionSpec as P

mode, directory = sys.argv[1], sys.argv[2]
mesh = jax.make_mesh((jax.device_count(),), ("d",))
expected = {"params": {"w": np.arange(64, dtype=np.float32).reshape(16, 4) / 7,
                       "b": np.arange(16, dtype=np.int32) - 5},
            "opt": {"mu": np.linspace(-1, 1, 32, dtype=np.float32).reshape(16, 2)},
            "step": np.array(3, np.int32)}
specs = {"params": {"w": P("d"), "b": P("d")}, "opt": {"mu": P(None, None)}, "step": P()}
shardings = jax.tree.map(lambda s: NamedSharding(mesh, s), specs, is_leaf=lambda x: isinstance(x, P))

checkpointer = ocp.StandardCheckpointer()
if mode == "save":
  state = jax.tree.map(lambda x, s: jax.make_array_from_callback(x.shape, s, lambda i: x[i]), expected, shardings)
  checkpointer.save(directory, state)
  checkpointer.wait_until_finished()
else:
  target = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), expected, shardings)
  restored = checkpointer.restore(directory, target)
  checked = 0
  for got, want, sharding in zip(jax.tree.leaves(restored), jax.tree.leaves(expected), jax.tree.leaves(shardings)):
    assert got.sharding == sharding, (got.sharding, sharding)
    assert got.dtype == want.dtype and got.shape == want.shape
    for shard in got.addressable_shards:
      np.testing.assert_array_equal(np.asarray(shard.data), want[shard.index])
      checked += 1
  print(f"RESTORED process {jax.process_index()} of {jax.process_count()}, devices {jax.device_count()}, "
        f"{checked} shards equal", flush=True)
checkpointer.close()
print(f"DONE {mode} {jax.devices()[0].platform}", flush=True)
