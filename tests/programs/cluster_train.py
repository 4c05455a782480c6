"""A small data-parallel training job as a cluster user writes it: it joins
the job with jax_plugin.distributed.initialize() (argv[1] == "plugin") or
with jax.distributed.initialize() alone ("jax"), or with no call at all
("none": it joins when its backend starts), and says nothing about
where it runs: the launcher's environment (Open MPI, Slurm, Kubernetes)
tells it. Rank 0 writes the results.

usage: python cluster_train.py plugin|jax|none OUT.json
"""
import json
import sys
import time

started = time.time()

if sys.argv[1] == "plugin":
  from jax_plugin import distributed
  distributed.initialize()
  topology = [p["address"] for p in distributed.global_topology()]
elif sys.argv[1] == "jax":
  import jax
  jax.distributed.initialize()
  topology = None
else:
  topology = None

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

n = jax.device_count()
mesh = jax.sharding.Mesh(np.array(jax.devices()), ("d",))
rows = NamedSharding(mesh, P("d"))
rng = np.random.default_rng(0)
X = rng.normal(size=(8 * n, 3)).astype(np.float32)
y = X @ np.array([1.0, -2.0, 0.5], np.float32) + 0.25
Xs = jax.make_array_from_callback(X.shape, rows, lambda i: X[i])
ys = jax.make_array_from_callback(y.shape, rows, lambda i: y[i])


@jax.jit
def step(w, b, X, y):
  def loss(w, b):
    return jnp.mean((X @ w + b - y) ** 2)
  gw, gb = jax.grad(loss, argnums=(0, 1))(w, b)
  return w - 0.1 * gw, b - 0.1 * gb


w, b = jnp.zeros(3), jnp.zeros(())
for _ in range(5):
  w, b = step(w, b, Xs, ys)
if jax.process_index() == 0:
  with open(sys.argv[2], "w") as f:
    json.dump({"w": np.asarray(w).tolist(), "b": float(b), "process_count": jax.process_count(),
               "device_count": n, "platform": jax.devices()[0].platform, "addresses": topology,
               "started": started, "finished": time.time()}, f)
