"""A jitted training step whose data are closure constants (jax puts them
in the program as HLO constants), over every device of the job, unchanged:
large constants must reach the engine whole.

usage: python closure_constants.py OUT.npz   ({rank} in OUT is the process index)
"""
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

mesh = jax.make_mesh((jax.device_count(),), ("d",))
rng = np.random.default_rng(0)
xs = rng.normal(size=(64, 32)).astype(np.float32)
ys = (xs @ rng.normal(size=(32,))).astype(np.float32)


@jax.jit
def step(w):
  loss, g = jax.value_and_grad(lambda w: jnp.mean((jnp.asarray(xs) @ w - jnp.asarray(ys)) ** 2))(w)
  return w - 0.01 * g, loss


w = jax.device_put(np.zeros(32, np.float32), NamedSharding(mesh, P()))
losses = []
for _ in range(5):
  w, loss = step(w)
  losses.append(float(loss))
np.savez(sys.argv[1].format(rank=jax.process_index()), w=np.asarray(w.addressable_data(0)), losses=np.array(losses),
         platform=np.array(jax.devices()[0].platform))
