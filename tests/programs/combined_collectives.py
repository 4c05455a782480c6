"""Independent collectives of one kind in one jitted shard_map: two
all-gathers (f32 along axis 1, s32 along axis 0), two reduce-scatters and
three psums (f32, s32, f32): what the multi-process rewrite makes one call
per bucket. Saves every output's shards of this process to OUT (`{rank}`
is replaced by the process index)."""
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

out = sys.argv[1]
n = jax.device_count()
mesh = Mesh(np.array(jax.devices()), ("i",))


def body(a, b, c, d):
  return (jax.lax.all_gather(a, "i", axis=1, tiled=True), jax.lax.all_gather(b, "i", tiled=True),
          jax.lax.psum_scatter(c, "i", tiled=True), jax.lax.psum_scatter(d * 2, "i", tiled=True),
          jax.lax.psum(a, "i"), jax.lax.psum(b, "i"), jax.lax.psum(d, "i"))


f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P(None, "i"), P("i"), P("i"), P("i")),
                          out_specs=(P(), P(), P("i"), P("i"), P(None, "i"), P("i"), P("i")), check_vma=False))
arrays = [np.arange(3 * 2 * n, dtype=np.float32).reshape(3, 2 * n) / 7, np.arange(3 * n, dtype=np.int32) * 5,
          np.arange(4 * n * n, dtype=np.float32).reshape(4 * n * n) / 3,
          np.linspace(-1, 1, 2 * n * n, dtype=np.float32)]
specs = [P(None, "i"), P("i"), P("i"), P("i")]
args = [jax.make_array_from_callback(v.shape, NamedSharding(mesh, s), lambda i, v=v: v[i])
        for v, s in zip(arrays, specs)]
saved = {}
for k, leaf in enumerate(f(*args)):
  for shard in leaf.addressable_shards:
    saved[f"{k}.shard.{shard.device.id}"] = np.asarray(shard.data)
np.savez(out.format(rank=jax.process_index()), **saved)
