"""One process of bench/collectives.py: timed all-reduces through
jax_plugin.collectives. Identity from the MYPLUGIN_* variables.

usage: python collectives_worker.py REPS BYTES...
prints (rank 0): RESULT <bytes> <best seconds per call> <median>
"""
import statistics
import sys
import time

import numpy as np

from jax_plugin import collectives, distributed

distributed.initialize()
reps = int(sys.argv[1])
for arg in sys.argv[2:]:
  nbytes = int(arg)
  x = np.ones(nbytes // 4, np.float32)
  # One result array for every call, as Gloo's own benchmark reuses its
  # buffer: a fresh one above 32 MB is new pages (page faults) each call.
  out = np.empty_like(x)
  collectives.all_reduce(x, out=out)  # warm-up (and the communicator, on the first size)
  times = []
  for _ in range(reps):
    collectives.barrier()
    t0 = time.perf_counter()
    collectives.all_reduce(x, out=out)
    times.append(time.perf_counter() - t0)
  if distributed.process_id() == 0:
    print(f"RESULT {nbytes} {min(times):.9f} {statistics.median(times):.9f}", flush=True)
distributed.shutdown()
