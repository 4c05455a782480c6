"""Programs for the persistent compilation cache tests, on every device of
the job: python cache_program.py CACHE_DIR OUT.npz [jax.distributed]
(OUT may hold {rank}).

With CACHE_DIR "-" the cache is off (the reference run on jax's CPU
backend). Saves each result's addressable shards (NAME.shard.INDEX, INDEX
the global device id's position in the mesh) and jax's own cache events.
"""
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

try:
  from jax import shard_map  # jax >= 0.7
except ImportError:  # pragma: no cover
  from jax.experimental.shard_map import shard_map

cache_dir, out = sys.argv[1], sys.argv[2]
if sys.argv[3:] == ["jax.distributed"]:
  # Then jax knows the process ids, and only process 0 writes entries.
  jax.distributed.initialize()
if cache_dir != "-":
  jax.config.update("jax_compilation_cache_dir", cache_dir)
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
  jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)

from jax._src import monitoring  # noqa: E402

events: list[str] = []
monitoring.register_event_listener(lambda name, **kw: events.append(name))

devices = jax.devices()
mesh = Mesh(np.array(devices), ("d",))
n = len(devices)
sharded = NamedSharding(mesh, P("d"))
host = np.arange(n * 4 * 3, dtype=np.float32).reshape(n * 4, 3) / 7.0
x = jax.make_array_from_callback(host.shape, sharded, lambda idx: host[idx])


@jax.jit
def by_position(x):
  """Depends on partition-id (axis_index), a psum and a ppermute."""
  def body(b):
    i = lax.axis_index("d")
    shifted = lax.ppermute(b, "d", [(j, (j + 1) % n) for j in range(n)])
    return b * (i + 1).astype(b.dtype) + lax.psum(b.sum(), "d") + shifted * 0.5
  return shard_map(body, mesh=mesh, in_specs=P("d"), out_specs=P("d"))(x)


@jax.jit
def train_step(w, x):
  """A data-parallel gradient step: jit over the global mesh (all-reduce)."""
  def loss(w):
    return jnp.mean(jnp.tanh(x @ w) ** 2)
  return w - 0.1 * jax.grad(loss)(w)


# The same, on a mesh whose order interleaves the processes: each process's
# devices sit at other positions than on the first mesh, so a cached local
# program that baked in one process's positions would give wrong numbers.
perm = sorted(range(n), key=lambda i: (i % jax.local_device_count(), i // jax.local_device_count()))
mesh2 = Mesh(np.array(devices)[perm], ("d",))
x2 = jax.make_array_from_callback(host.shape, NamedSharding(mesh2, P("d")), lambda idx: host[idx])


@jax.jit
def by_position_interleaved(x):
  def body(b):
    return b * (lax.axis_index("d") + 1).astype(b.dtype) - lax.pmax(b, "d")
  return shard_map(body, mesh=mesh2, in_specs=P("d"), out_specs=P("d"))(x)


# A program on the first two devices: in a job of 2 processes x 2 devices,
# process 0's alone, which process 1 compiles (or loads) with no local part.
mesh0 = Mesh(np.array(devices[:2]), ("d",))
x0 = jax.make_array_from_callback((8, 3), NamedSharding(mesh0, P("d")), lambda idx: host[:8][idx], dtype=host.dtype)


@jax.jit
def on_two_devices(x):
  def body(b):
    return b * (lax.axis_index("d") + 2).astype(b.dtype) + lax.psum(b, "d")
  return shard_map(body, mesh=mesh0, in_specs=P("d"), out_specs=P("d"))(x)


w = jax.device_put(np.linspace(-1, 1, 3 * 5, dtype=np.float32).reshape(3, 5), NamedSharding(mesh, P()))
results = {"by_position": by_position(x), "train_step": train_step(w, x),
           "by_position_interleaved": by_position_interleaved(x2), "on_two_devices": on_two_devices(x0)}
# A program of this process's first device alone.
local = jax.jit(lambda v: jnp.cumsum(v * 3.0) - v.mean())(jax.device_put(host[:, 0], jax.local_devices()[0]))

rank = jax.process_index()
saved = {"local": np.asarray(local)}
for name, arr in results.items():
  m = {"by_position_interleaved": mesh2, "on_two_devices": mesh0}.get(name, mesh)
  position = {d.id: i for i, d in enumerate(m.devices.flat)}
  for s in arr.addressable_shards:
    saved[f"{name}.shard.{position[s.device.id]}"] = np.asarray(s.data)
saved["events"] = np.array(events, dtype=object) if events else np.array([], dtype=object)
# jax counts a request per compile that may use the cache, and a hit per
# load ("cache_misses" counts writes: only process 0's under jax.distributed).
requests = events.count("/jax/compilation_cache/compile_requests_use_cache")
saved["hits"] = np.int64(events.count("/jax/compilation_cache/cache_hits"))
saved["misses"] = np.int64(requests - saved["hits"])
saved["writes"] = np.int64(events.count("/jax/compilation_cache/cache_misses"))
# jax writes entries only where its own process id is 0.
from jax._src import distributed  # noqa: E402
saved["jax_process_id"] = np.int64(getattr(distributed.global_state, "process_id", 0) or 0)
# After a load as after a compile, jax's questions about the whole program
# (its optimized module, its shardings) are answered for all n devices.
whole = train_step.lower(w, x).compile()
saved["whole_program"] = np.bool_(f"num_partitions={n}" in whole.as_text() and
                                  whole.output_shardings == NamedSharding(mesh, P()) and
                                  whole.input_shardings[0][1] == sharded)
np.savez(out.format(rank=rank), **{k: v for k, v in saved.items() if k != "events"})
print(f"rank {rank}: hits {saved['hits']} misses {saved['misses']}", flush=True)
