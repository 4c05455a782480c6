"""An expert-parallel MoE layer over every device of every process
(bench/moe_layer.py: lax.ragged_all_to_all dispatches each token to its
expert and returns it), its result against the same layer in numpy.
Knows nothing of myplugin: run it under myplugin-run on GPUs (XLA's CPU
engine has no ragged all-to-all; jax's CPU backend refuses it too).

usage: python moe_ragged.py      prints MOE OK or MOE WRONG ..., one line a process
"""
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import moe_layer  # noqa: E402

n = jax.device_count()
tokens, d, f = 48, 32, 64
rng = np.random.default_rng(0)
x = rng.standard_normal((n * tokens, d)).astype(np.float32)
# Uneven routing: expert 0 gets most tokens, the last expert none.
route = np.minimum(rng.geometric(0.45, n * tokens) - 1, max(n - 2, 0)).astype(np.int32)
w1 = (rng.standard_normal((n, d, f)) / np.sqrt(d)).astype(np.float32)
w2 = (rng.standard_normal((n, f, d)) / np.sqrt(f)).astype(np.float32)

mesh = Mesh(np.array(jax.devices()), ("e",))
split = NamedSharding(mesh, P("e"))
args = [jax.make_array_from_callback(a.shape, split, lambda i, a=a: a[i]) for a in (x, route, w1, w2)]
out = moe_layer.layer(mesh, "e", capacity=n * tokens)(*args)
want = moe_layer.reference(x, route, w1, w2)
worst = 0.0
for s in out.addressable_shards:
  worst = max(worst, float(np.max(np.abs(np.asarray(s.data) - want[s.index]))))
counts = np.bincount(route, minlength=n)
print(f"MOE {'OK' if worst < 1e-3 else 'WRONG'} process {jax.process_index()} max error {worst:.2e} "
      f"tokens per expert {counts.tolist()}", flush=True)
