"""Host callbacks in programs over a global 8-device mesh: per-device prints
and callbacks around collectives (shard_map), and a jit whose callback sees
the whole array. Writes what this process printed and its shards of the
results to OUT (with {rank} replaced by the process index), so a test can
compare each process with the single-process run on jax's CPU backend."""
import contextlib
import io
import json
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

shard_map = getattr(jax, "shard_map", None)
if shard_map is None:
  from jax.experimental.shard_map import shard_map

out_path = sys.argv[1]
mesh = Mesh(np.array(jax.devices()), ("i",))
n = len(jax.devices())
x = jax.make_array_from_callback((2 * n,), NamedSharding(mesh, P("i")),
                                 lambda index: np.arange(2 * n, dtype=np.float32)[index])
received = []
ordered = []


def body(v):
  i = jax.lax.axis_index("i")
  jax.debug.print("device {i}: v={v}", i=i, v=v)
  jax.debug.callback(lambda d, a: received.append([int(d), np.asarray(a).tolist()]), i, v)
  # Ordered: a token threads through the program (and the multi-process rewrite).
  from jax.experimental import io_callback
  k = io_callback(lambda d: (ordered.append(int(d)), np.int32(1))[1], jax.ShapeDtypeStruct((), jnp.int32), i,
                  ordered=True)
  v = v * k.astype(v.dtype)
  y = jax.pure_callback(lambda a: np.asarray(a) ** 2 + 1, jax.ShapeDtypeStruct(v.shape, v.dtype), v)
  s = jax.lax.psum(y, "i")
  jax.debug.print("device {i}: psum={s}", i=i, s=s)
  return y * s


def whole(v):
  jax.debug.print("total {}", v.sum())
  r = jax.pure_callback(lambda a: np.asarray(a)[::-1].copy(), jax.ShapeDtypeStruct(v.shape, v.dtype), v)
  return r * 2 + v


buf = io.StringIO()
with contextlib.redirect_stdout(buf):
  per_device = jax.jit(shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P("i")))
  results = {"per_device": [per_device(x) for _ in range(2)][-1],
             "whole": jax.jit(whole, out_shardings=NamedSharding(mesh, P("i")))(x)}
  # pmap over this process's devices, with the axis spanning every process.
  local = jax.local_device_count()
  first = jax.process_index() * local
  results["pmap"] = jax.pmap(lambda d: jax.lax.psum(
      jax.pure_callback(lambda a: np.asarray(a) * 2, jax.ShapeDtypeStruct(d.shape, d.dtype), d)
      + (jax.debug.print("device {i}: pmap", i=d.astype(jnp.int32)) or 0), "p"), axis_name="p")(
          np.arange(first, first + local, dtype=np.float32))
  jax.effects_barrier()

shards = {name: {str(s.device.id): np.asarray(s.data).tolist() for s in a.addressable_shards}
          for name, a in results.items()}
with open(out_path.format(rank=jax.process_index()), "w") as f:
  json.dump({"lines": buf.getvalue().splitlines(), "received": sorted(received), "ordered": sorted(ordered), "shards": shards,
             "platform": jax.devices()[0].platform, "processes": jax.process_count()}, f)
