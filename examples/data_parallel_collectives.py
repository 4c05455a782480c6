"""Data-parallel training across processes, today's way: each process runs
the jitted gradient on its own devices (its shard of the batch, sharded
again over its local devices), and the processes average the gradients
with jax_plugin.collectives. (One jitted program over every process's
devices needs the multi-process compile, the next stage.)

  myplugin-run -n 2 --devices-per-process 2 -- python examples/data_parallel_collectives.py
"""
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from jax_plugin import collectives

rank, n_proc = jax.process_index(), jax.process_count()
local = jax.local_devices()
mesh = Mesh(np.array(local), ("batch",))

rng = np.random.default_rng(0)  # the same data and start everywhere
x_all = rng.normal(size=(256, 16)).astype(np.float32)
y_all = (x_all @ rng.normal(size=(16, 1)) > 0).astype(np.float32)
params = {"w": rng.normal(size=(16, 1)).astype(np.float32) * 0.1, "b": np.zeros(1, np.float32)}

# This process's shard of the batch, spread over its own devices.
shard = slice(rank * len(x_all) // n_proc, (rank + 1) * len(x_all) // n_proc)
x, y = jax.device_put((x_all[shard], y_all[shard]), NamedSharding(mesh, P("batch")))


def loss_fn(p, x, y):
  logits = x @ p["w"] + p["b"]
  return jnp.mean(jnp.logaddexp(0.0, logits) - y * logits)


grad_fn = jax.jit(jax.value_and_grad(loss_fn))
firsts = [p * len(local) for p in range(n_proc)]  # one rank per process
for step in range(20):
  loss, grads = grad_fn(jax.device_put(params, NamedSharding(mesh, P())), x, y)
  # Average over processes: every process ends with the same update.
  grads = {k: collectives.all_reduce(np.asarray(g), device_group=firsts) / n_proc for k, g in grads.items()}
  loss = float(collectives.all_reduce(np.asarray(loss), device_group=firsts)) / n_proc
  params = {k: params[k] - 0.5 * grads[k] for k in params}
  if step % 5 == 0 or step == 19:
    print(f"step {step:2d}  loss {loss:.6f}")
