"""Each collective that the multi-process rewrite emits (all-reduce,
all-gather, reduce-scatter, all-to-all, collective-permute) through pmap,
and through jit with shardings alone those that XLA's partitioner picks
(all but reduce-scatter: it makes a sharded contraction an all-reduce and
a slice), over every device of every process. Knows nothing of
myplugin: run it in one process (JAX_PLATFORMS=cpu, JAX_NUM_CPU_DEVICES=N)
for the reference, or under myplugin-run. (shard_map: examples/shard_map_collectives.py.)

usage: python every_collective.py OUT.npz   ({rank} in OUT is the process index)

Saves NAME.DEVICE_ID: the block of each output that each of this process's
devices holds.
"""
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

n = jax.device_count()
local = jax.local_device_count()
first = jax.process_index() * local  # this process's first global position (devices in process order)
saved = {}


def keep(name, out):
  for s in out.addressable_shards:
    saved[f"{name}.{s.device.id}"] = np.asarray(s.data)


# pmap: one row per device, this process's rows only.
rows = (np.arange(n * 2 * n, dtype=np.float32).reshape(n, 2 * n) * 5 % 13) - 6
mine = rows[first:first + local]
pmap_ops = {
    "pmap_psum": lambda v: jax.lax.psum(v, "i"),
    "pmap_all_gather": lambda v: jax.lax.all_gather(v, "i"),
    "pmap_psum_scatter": lambda v: jax.lax.psum_scatter(v, "i", tiled=True),
    "pmap_all_to_all": lambda v: jax.lax.all_to_all(v.reshape(n, 2), "i", 0, 0, tiled=True),
    "pmap_ppermute": lambda v: jax.lax.ppermute(v, "i", [(j, (j + 1) % n) for j in range(n)]),
    # A pipeline shift: device 0 has no source and gets zeros (on a GPU, the
    # memory the engine gave the result holds anything until it is filled).
    "pmap_ppermute_shift": lambda v: jax.lax.ppermute(v, "i", [(j, j + 1) for j in range(n - 1)]),
}
for name, fn in pmap_ops.items():
  out = jax.pmap(fn, axis_name="i")(mine)
  for d, block in zip(jax.local_devices(), np.asarray(out)):
    saved[f"{name}.{d.id}"] = block

# jit with shardings only: the partitioner inserts the collective.
mesh = Mesh(np.array(jax.devices()), ("d",))
host = (np.arange(4 * n * 4 * n, dtype=np.float32).reshape(4 * n, 4 * n) * 7 % 17) / 4 - 2
by_rows = NamedSharding(mesh, P("d", None))
by_cols = NamedSharding(mesh, P(None, "d"))
whole = NamedSharding(mesh, P())
x = jax.make_array_from_callback(host.shape, by_rows, lambda i: host[i])
xc = jax.make_array_from_callback(host.shape, by_cols, lambda i: host[i])
keep("jit_all_reduce", jax.jit(lambda v: jnp.sum(v, axis=0), out_shardings=whole)(x))
keep("jit_all_gather", jax.jit(lambda v: v * 2, out_shardings=whole)(x))
# Contraction over the sharded dimension, result by rows (the partitioner
# makes an all-reduce and a slice of it; pmap's psum_scatter is the reduce-scatter).
keep("jit_contract_sharded", jax.jit(lambda a, b: a @ b.T, out_shardings=by_rows)(xc, xc))
keep("jit_all_to_all", jax.jit(lambda v: v + 1, out_shardings=by_cols)(x))
keep("jit_collective_permute", jax.jit(lambda v: jnp.roll(v, 1, axis=0), out_shardings=by_rows)(x))

np.savez(sys.argv[1].format(rank=jax.process_index()), **saved)
print(f"process {jax.process_index()} of {jax.process_count()}: {len(saved)} blocks on {jax.devices()[0].platform}")
