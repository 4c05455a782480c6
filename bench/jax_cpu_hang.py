"""The comparison run of docs/debugging.md ("The same fault elsewhere"): jax's own CPU backend,
two processes, a pmap psum, process 1 asleep before the second psum. What
does process 0 show while it waits? (Observed: nothing, until killed.)

usage (a hard deadline kills both; our backend is not involved):
  for p in 0 1; do JAX_PLATFORMS=cpu timeout -s KILL 90 python bench/jax_cpu_hang.py $p 23456 & done; wait
"""
import sys
import time

import jax
import numpy as np

pid, port = int(sys.argv[1]), sys.argv[2]
jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(f"127.0.0.1:{port}", 2, pid)
f = jax.pmap(lambda v: jax.lax.psum(v, "i"), axis_name="i")
x = np.ones((jax.local_device_count(), 4), np.float32)
print(pid, "warm", float(f(x)[0, 0]), flush=True)
if pid == 1:
  time.sleep(3600)
t = time.time()
print(pid, "waiting", flush=True)
print(pid, "done", float(f(x)[0, 0]), time.time() - t, flush=True)
