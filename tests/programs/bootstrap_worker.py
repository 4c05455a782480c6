"""Joins a job one way or another, then reports what jax sees and runs a
pmap and a jit over every process's devices.

usage: python bootstrap_worker.py MODE [coordinator num_processes process_id]
  ours   jax_plugin.distributed.initialize() with no arguments (env detection)
  jax    jax.distributed.initialize(), with the arguments if given
  none   no initialize call at all: the plugin joins from MYPLUGIN_* variables
"""
import json
import sys

import jax

mode = sys.argv[1]
if mode == "ours":
  from jax_plugin import distributed
  distributed.initialize()
elif mode == "jax":
  if len(sys.argv) > 2:
    jax.distributed.initialize(coordinator_address=sys.argv[2], num_processes=int(sys.argv[3]),
                               process_id=int(sys.argv[4]))
  else:
    jax.distributed.initialize()

devices = jax.devices()
from jax_plugin import distributed  # noqa: E402

me = jax.process_index()
distributed.key_value_set(f"hello/{me}", str(me))
distributed.barrier("said-hello", timeout=60)
peers = sorted(int(v) for _, v in distributed.key_value_list("hello/"))
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

psum = jax.pmap(lambda v: jax.lax.psum(v, "i"), axis_name="i")(np.ones(jax.local_device_count(), np.float32))
mesh = Mesh(np.array(devices), ("d",))
n = len(devices)
x = jax.make_array_from_callback((n,), NamedSharding(mesh, P("d")), lambda i: np.arange(n, dtype=np.float32)[i])
total = jax.jit(lambda v: (v * 2).sum())(x)

print("RESULT " + json.dumps({
    "psum": np.asarray(psum).tolist(),
    "jit_sum": float(total),
    "event": "joined",
    "process_index": me,
    "process_count": jax.process_count(),
    "device_count": jax.device_count(),
    "local_device_count": jax.local_device_count(),
    "device_processes": [d.process_index for d in devices],
    "local_ids": [d.id for d in jax.local_devices()],
    "platform": devices[0].platform,
    "peers": peers,
}), flush=True)
