"""One process of a bench/compilation_cache.py run: compiles the training
step of bench/multiprocess_worker.py (an MLP 256-512-1, batch 4096, data
parallel over every device of the job) with jax's persistent compilation
cache in CACHE_DIR, and runs it once. Process 0 prints

  RESULT compile SECONDS HITS MISSES

usage: python compilation_cache_worker.py CACHE_DIR
"""
import sys
import time

import jax

jax.config.update("jax_compilation_cache_dir", sys.argv[1])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax._src import monitoring  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

events = []
monitoring.register_event_listener(lambda name, **kw: events.append(name))

mesh = Mesh(np.array(jax.devices()), ("d",))
rng = np.random.default_rng(0)
xb = rng.normal(size=(4096, 256)).astype(np.float32)
yb = np.sin(xb[:, :1]).astype(np.float32)
params = {"w1": (rng.normal(size=(256, 512)) / 16).astype(np.float32), "b1": np.zeros(512, np.float32),
          "w2": (rng.normal(size=(512, 1)) / 22).astype(np.float32), "b2": np.zeros(1, np.float32)}
params = jax.device_put(params, NamedSharding(mesh, P()))
batch = NamedSharding(mesh, P("d"))
xs = jax.make_array_from_callback(xb.shape, batch, lambda i: xb[i])
ys = jax.make_array_from_callback(yb.shape, batch, lambda i: yb[i])


def loss_fn(p, x, y):
  h = jax.nn.gelu(x @ p["w1"] + p["b1"])
  return jnp.mean((h @ p["w2"] + p["b2"] - y) ** 2)


def step(p, x, y):
  loss, grads = jax.value_and_grad(loss_fn)(p, x, y)
  return jax.tree.map(lambda a, g: a - 0.01 * g, p, grads), loss


lowered = jax.jit(step).lower(params, xs, ys)
before = len(events)
t0 = time.perf_counter()
compiled = lowered.compile()
compile_s = time.perf_counter() - t0
seen = events[before:]
jax.block_until_ready(compiled(params, xs, ys))
if jax.process_index() == 0:
  hits = seen.count("/jax/compilation_cache/cache_hits")
  misses = seen.count("/jax/compilation_cache/compile_requests_use_cache") - hits
  print(f"RESULT compile {compile_s} {hits} {misses}", flush=True)
