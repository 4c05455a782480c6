"""jax.device_put of an array onto another process's devices (jax's
cross-host transfer), unchanged, in a job of 2 processes with 2 devices
each: single-device and named shardings, committed and uncommitted, every
direction, both directions at once, a large array (several pieces),
several dtypes. Each result is
compared with numpy on the process that receives it; one RESULT line per
process.
"""
import json

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P, SingleDeviceSharding

me = jax.process_index()
n_local = jax.local_device_count()
results = {}


def check(name, x, z, dst_pid):
  if me == dst_pid:
    ok = len(z.addressable_shards) > 0 and all(
        np.array_equal(np.asarray(s.data), np.asarray(x)[s.index]) for s in z.addressable_shards)
  else:
    ok = len(z.addressable_shards) == 0
  results[name] = bool(ok)


def single(src_pid, dst_pid, x, name):
  y = jax.device_put(x, SingleDeviceSharding(jax.local_devices(process_index=src_pid)[0]))
  z = jax.device_put(y, SingleDeviceSharding(jax.local_devices(process_index=dst_pid)[0]))
  check(name, x, z, dst_pid)


def named(src_pid, dst_pid, x, spec, name):
  def sharding(pid):
    return NamedSharding(jax.make_mesh((n_local,), ("x",), devices=jax.local_devices(process_index=pid)), spec)
  y = jax.device_put(x, sharding(src_pid))
  z = jax.device_put(y, sharding(dst_pid))
  check(name, x, z, dst_pid)


x = np.arange(64).reshape(8, 8)
single(0, 1, x, "single_numpy")
single(0, 1, jnp.arange(64).reshape(8, 8), "single_uncommitted")
single(1, 0, x * 3, "single_back")
named(0, 1, x, P("x"), "named")
named(1, 0, jnp.arange(64.0).reshape(8, 8), P("x"), "named_back")
named(0, 1, x, P(), "named_replicated")
big = np.random.default_rng(0).normal(size=(10, 1 << 20)).astype(np.float32)  # 40 MiB: several pieces
single(0, 1, big, "large")
for dtype in (np.float16, ml_dtypes.bfloat16, np.bool_, np.int8, np.complex64, np.uint64):
  single(0, 1, (np.arange(24).reshape(2, 3, 4) % 5).astype(dtype), f"dtype_{np.dtype(dtype).name}")
# Both directions at once: each process sends 40 MiB to the other before
# either waits (sends must not block each other).
a = np.random.default_rng(1).normal(size=(10, 1 << 20)).astype(np.float32)
b = a[::-1] * 2
on = [SingleDeviceSharding(jax.local_devices(process_index=p)[0]) for p in (0, 1)]
ya, yb = jax.device_put(a, on[0]), jax.device_put(b, on[1])
za, zb = jax.device_put(ya, on[1]), jax.device_put(yb, on[0])
check("crossing_a", a, za, 1)
ok_a = results.pop("crossing_a")
check("crossing", b, zb, 0)
results["crossing"] = results["crossing"] and ok_a
single(0, 1, np.zeros((0, 3), np.float32), "empty")
single(0, 1, np.float32(7.5), "scalar")
print("RESULT " + json.dumps({"rank": me, **results}), flush=True)
