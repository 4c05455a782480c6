"""A rank of a job whose hosts share a poor link (tests/test_cluster_degraded_network.py):
the data of every kind of traffic crosses it, and each result is checked
against numpy on the process that holds it. Joins from the MYPLUGIN_*
variables; 2 processes with 2 devices each.

- a jitted sum over all 4 devices of a 16 MiB array (Gloo between the hosts), 3 times;
- shard_map's all_gather, psum_scatter, all_to_all and ppermute of 4 MiB blocks;
- jax.device_put of 24 MiB onto the other process's device, both ways at once;
- multihost_utils: a value from process 0 to all, and a sync of all.

Prints one RESULT line: {"rank", "checks": {name: bool}, "seconds": {name: s}}.
"""
import json
import time

from jax_plugin import distributed

distributed.initialize()

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding, PartitionSpec as P, SingleDeviceSharding

me = jax.process_index()
n = jax.device_count()
mesh = jax.make_mesh((n,), ("d",))
rows = NamedSharding(mesh, P("d"))
checks, seconds = {}, {}


def timed(name, fn):
  t = time.monotonic()
  ok = bool(fn())
  seconds[name] = round(time.monotonic() - t, 3)
  checks[name] = ok


def local_blocks_equal(out, want):
  return all(np.array_equal(np.asarray(s.data), want[s.index]) for s in out.addressable_shards)


def global_array(x):
  return jax.make_array_from_callback(x.shape, rows, lambda i: x[i])


# A sum over all devices: each device's 4 Mi floats, summed (the result is replicated).
rng = np.random.default_rng(7)
blocks = rng.integers(-1000, 1000, size=(n, 1 << 22)).astype(np.float32)  # 16 MiB a device
total = jax.jit(lambda x: jnp.sum(x, axis=0), out_shardings=NamedSharding(mesh, P()))
summed = blocks.sum(axis=0)  # integers in float32: exact in any order
for i in range(3):
  timed(f"sum_{i}", lambda: local_blocks_equal(total(global_array(blocks)), summed))

# shard_map collectives of 4 MiB blocks.
x = rng.integers(-1000, 1000, size=(n * n, 1 << 18)).astype(np.float32)  # 4 MiB a device


def collective(name, fn, want):
  f = jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=P("d"), out_specs=P("d")))
  timed(name, lambda: local_blocks_equal(f(global_array(x)), want))


collective("all_gather", lambda b: jax.lax.all_gather(b, "d", tiled=True), np.tile(x, (n, 1)))
collective("psum_scatter", lambda b: jax.lax.psum_scatter(b, "d", tiled=True), x.reshape(n, n, -1).sum(axis=0))
collective("all_to_all", lambda b: jax.lax.all_to_all(b, "d", 0, 0, tiled=True),
           x.reshape(n, n, -1).transpose(1, 0, 2).reshape(n * n, -1))
collective("ppermute", lambda b: jax.lax.ppermute(b, "d", [(i, (i + 1) % n) for i in range(n)]),
           np.roll(x.reshape(n, n, -1), 1, axis=0).reshape(n * n, -1))

# device_put onto the other process, both ways at once.
a = rng.normal(size=(6, 1 << 20)).astype(np.float32)  # 24 MiB
b = a[::-1] * 2
on = [SingleDeviceSharding(jax.local_devices(process_index=p)[0]) for p in (0, 1)]


def crossing():
  ya, yb = jax.device_put(a, on[0]), jax.device_put(b, on[1])
  za, zb = jax.device_put(ya, on[1]), jax.device_put(yb, on[0])
  got, want = (za, a) if me == 1 else (zb, b)
  return np.array_equal(np.asarray(got.addressable_shards[0].data), want)


timed("device_put_both_ways", crossing)

# multihost_utils: through the coordination service and a collective.
timed("broadcast_one_to_all",
      lambda: np.array_equal(multihost_utils.broadcast_one_to_all(np.arange(1 << 16) * (me + 1)), np.arange(1 << 16)))
timed("sync_global_devices", lambda: multihost_utils.sync_global_devices("degraded") is None)

print("RESULT " + json.dumps({"rank": me, "checks": checks, "seconds": seconds}), flush=True)
