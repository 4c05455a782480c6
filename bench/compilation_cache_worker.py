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

import numpy as np  # noqa: E402
from jax._src import monitoring  # noqa: E402
from jax.sharding import Mesh  # noqa: E402

import training_step  # noqa: E402  (bench/, the script's own folder)

events = []
monitoring.register_event_listener(lambda name, **kw: events.append(name))

mesh = Mesh(np.array(jax.devices()), ("d",))
# The data-parallel training step (bench/training_step.py).
params, xs, ys = training_step.inputs(mesh)
step = training_step.step

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
