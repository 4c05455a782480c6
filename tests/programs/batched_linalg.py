"""jax's batched linear algebra on arrays sharded along their batch (jax
registers its LAPACK calls as batch partitionable: one call per shard).
Knows nothing of myplugin: run it with JAX_PLATFORMS=cpu for the reference.

usage: python batched_linalg.py OUT.npz [--distributed]   ({rank} in OUT is the process index;
--distributed: one process of a job, under a launcher; jax's CPU backend then meets
its processes through Gloo)

Saves each op's result, whole, and for each op `<op>.gathers` (whether the
compiled program gathers) and `<op>.batches` (the batch sizes of the
LAPACK calls the compiled program makes).
"""
import os
import re
import sys

import jax

if "--distributed" in sys.argv:
  if os.environ.get("JAX_PLATFORMS") == "cpu":
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
  jax.distributed.initialize()

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.experimental import multihost_utils as mu  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

n = jax.device_count()
mesh = jax.make_mesh((n,), ("b",))
rng = np.random.default_rng(0)
a = rng.standard_normal((n, 8, 8)).astype(np.float32)
spd = a @ a.transpose(0, 2, 1) + 8 * np.eye(8, dtype=np.float32)
b = rng.standard_normal((n, 8, 3)).astype(np.float32)


def place(x):
  return jax.make_array_from_callback(x.shape, NamedSharding(mesh, P("b")), lambda idx: x[idx])


OPS = {
    "cholesky": (jnp.linalg.cholesky, (spd,)),
    "lu": (lambda x: jax.lax.linalg.lu(x)[0], (a,)),
    "qr": (lambda x: jnp.linalg.qr(x)[1], (a,)),
    "eigh": (lambda x: jnp.linalg.eigh(x)[0], (spd,)),
    "svd": (lambda x: jnp.linalg.svd(x, compute_uv=False), (a,)),
    "triangular_solve": (lambda l, y: jax.lax.linalg.triangular_solve(l, y, left_side=True, lower=True),
                         (np.tril(spd), b)),
}
saved = {}
for name, (fn, args) in OPS.items():
  f = jax.jit(fn)
  placed = [place(x) for x in args]
  text = f.lower(*placed).compile().as_text()
  saved[f"{name}.gathers"] = np.array("all-gather" in text)
  # The leading (batch) dimension of each LAPACK call's first operand.
  calls = [re.search(r"operand_layout_constraints=\{\w+\[(\d+),", l) for l in text.splitlines()
           if 'custom_call_target="lapack' in l]
  saved[f"{name}.batches"] = np.array([int(c.group(1)) for c in calls if c] or [-1])
  out = f(*placed)
  saved[name] = np.asarray(mu.process_allgather(out, tiled=True) if not out.is_fully_addressable else out)
np.savez(sys.argv[1].format(rank=jax.process_index()), **saved)
print(f"process {jax.process_index()}: {len(OPS)} ops", flush=True)
