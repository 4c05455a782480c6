"""Resharding one global 8-device array onto other meshes: shapes (8,),
(4,2), (2,4), (2,2,2), devices in other orders, to and from replicated. The
partitioner prints every replica-group form for these (explicit, iota with
a transpose, mesh axes with device ids, size-1 axes and sub-axes). It knows
nothing of myplugin: run it on jax's CPU backend with 8 devices for the
reference, and across processes on myplugin.

usage: python reshard_worker.py OUT.npz   ({rank} in OUT is the process index)
Saves, per case, every local shard and its index, and the full array and
the whole layout where this process holds every shard.
"""
import sys

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

devs = np.array(jax.devices())
assert devs.size == 8, devs
meshes = {
    "8": Mesh(devs, ("x",)),
    "8rev": Mesh(devs[::-1], ("x",)),
    "42": Mesh(devs.reshape(4, 2), ("x", "y")),
    "42T": Mesh(devs.reshape(2, 4).T, ("x", "y")),
    "24": Mesh(devs.reshape(2, 4), ("x", "y")),
    "222": Mesh(devs.reshape(2, 2, 2), ("x", "y", "z")),
}
CASES = [
    (("8", P("x")), ("42T", P("x", "y"))),
    (("8rev", P("x")), ("42", P("y", "x"))),
    (("222", P("z", ("y", "x"))), ("42T", P("x", "y"))),
    (("42", P("y", "x")), ("42T", P("x", "y"))),
    (("24", P("y", "x")), ("42T", P("y"))),
    (("8", P(None, "x")), ("8rev", P("x"))),
    (("42T", P("x", "y")), ("8", P())),
    (("8", P()), ("222", P(("x", "z"), "y"))),
    (("24", P("x", "y")), ("24", P("y", "x"))),
    (("8rev", P("x")), ("222", P("y"))),
    (("222", P(("x", "z"), "y")), ("8rev", P("x"))),
    (("222", P(("x", "y"), "z")), ("222", P("z", ("x", "y")))),
]

x = np.arange(64.0).reshape(8, 8) * 1.5 - 7
out = {}


def save(name, a):
  for s in a.addressable_shards:
    out[f"{name}.shard.{s.device.id}"] = np.asarray(s.data)
    out[f"{name}.index.{s.device.id}"] = np.array(repr(s.index))
  if a.is_fully_addressable:
    out[name] = np.asarray(a)
    layout = a.sharding.devices_indices_map(a.shape)
    out[f"{name}.layout"] = np.array(repr(sorted((d.id, repr(i)) for d, i in layout.items())))


for i, ((src_mesh, src_spec), (dst_mesh, dst_spec)) in enumerate(CASES):
  src = jax.device_put(x, NamedSharding(meshes[src_mesh], src_spec))
  dst = NamedSharding(meshes[dst_mesh], dst_spec)
  save(f"put{i}", jax.device_put(src, dst))
  if list(meshes[src_mesh].devices.flat) == list(meshes[dst_mesh].devices.flat):
    # The same move inside a computation (jit wants one device order).
    save(f"jit{i}", jax.jit(lambda v: v * 3 - 1, out_shardings=dst)(src))
np.savez(sys.argv[1].format(rank=jax.process_index()), **out)
print("resharded", len(CASES), "cases", flush=True)
