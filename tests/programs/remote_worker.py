"""A process of a multi-process job (at least 3 processes) that runs
programs whose devices belong to other processes only: process 1's devices
alone, processes 1 and 2 together (a collective between them while the
others take no part), one device of the last process; then one program over
every device, which every process must still complete. Each prints one
RESULT line with what it holds of every result (shards by device id)."""
import json

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P, SingleDeviceSharding

r, n = jax.process_index(), jax.process_count()
d = jax.local_device_count()


def devices_of(*processes):
  return [dev for dev in jax.devices() if dev.process_index in processes]


def held(a):
  """What this process holds of `a`: its local shards, and what jax says."""
  return {"shape": list(a.shape), "fully_addressable": a.is_fully_addressable,
          "devices": sorted(dev.id for dev in a.sharding.device_set),
          "shards": {str(s.device.id): {"index": [[sl.start, sl.stop] for sl in s.index],
                                        "data": np.asarray(s.data).tolist()} for s in a.addressable_shards}}


out = {"event": "done", "process": r}
x = np.arange(4.0 * d * 2).reshape(2 * d, 4)

# Process 1's devices alone.
one = Mesh(np.array(devices_of(1)), ("x",))
a = jax.device_put(x, NamedSharding(one, P("x")))
out["one_put"] = held(a)
out["one_affine"] = held(jax.jit(lambda v: v * 2 + 1)(a))
out["one_colsum"] = held(jax.jit(lambda v: v.sum(0))(a))  # an all-reduce among process 1's devices
a.delete()
try:
  jax.jit(lambda v: v + 1)(a)
  out["one_deleted"] = "no error"
except Exception as e:  # noqa: BLE001: the test reads the message
  out["one_deleted"] = f"{type(e).__name__}: {e}"

# Processes 1 and 2 together: an all-reduce between them, a permutation.
pair = Mesh(np.array(devices_of(1, 2)), ("x",))
b = jax.device_put(x, NamedSharding(pair, P("x")))
out["pair_total"] = held(jax.jit(lambda v: jnp.sum(v * v))(b))
out["pair_rolled"] = held(jax.jit(lambda v: jnp.roll(v, 1, axis=0), out_shardings=NamedSharding(pair, P("x")))(b))

# One device of the last process.
last = jax.devices()[-1]
c = jax.device_put(x, SingleDeviceSharding(last))
out["single"] = held(jax.jit(lambda v: v - 3)(c))

# Every device: nobody was left waiting in a device group it does not belong to.
every = Mesh(np.array(jax.devices()), ("x",))
e = jax.device_put(np.arange(8.0 * d * n), NamedSharding(every, P("x")))
out["every_sum"] = held(jax.jit(lambda v: jnp.sum(v))(e))
print("RESULT " + json.dumps(out), flush=True)
