"""A process of a multi-process job that runs programs on its own devices
and combines results across processes with jax_plugin.collectives."""
import json

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from jax_plugin import collectives

r, n = jax.process_index(), jax.process_count()
local = jax.local_devices()
out = {"event": "done", "process": r, "local_ids": [d.id for d in local],
       "device_processes": [d.process_index for d in jax.devices()]}

x = jnp.arange(8.0) + r
out["default_device"] = [d.id for d in x.devices()]
out["jit"] = np.asarray(jax.jit(lambda v: v * 2 + 1)(x)).tolist()

mesh = Mesh(np.array(local), ("d",))
y = jax.device_put(np.arange(16.0) * (r + 1), NamedSharding(mesh, P("d")))
s = jax.jit(lambda v: jnp.sum(v ** 2))(y)
out["mesh_devices"] = sorted(d.id for d in y.devices())
out["mesh_sum"] = float(s)
# One value per process, over the first device of each.
firsts = [p * len(local) for p in range(n)]
out["all_processes_sum"] = float(collectives.all_reduce(np.asarray(s), device_group=firsts))

# A program over every process's devices, beside the local ones.
gmesh = Mesh(np.array(jax.devices()), ("g",))
g = jax.jit(lambda v: v + 1, out_shardings=NamedSharding(gmesh, P("g")))(np.arange(float(len(jax.devices()))))
out["spanning"] = {str(s.device.id): np.asarray(s.data).tolist() for s in g.addressable_shards}
print("RESULT " + json.dumps(out), flush=True)
