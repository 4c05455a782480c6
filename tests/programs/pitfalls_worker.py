"""A process of a multi-process job that falls into one of the pitfalls of
the seed documents; every process must end with an error naming the cause.

usage: pitfalls_worker.py MODE
  shapes      the processes pass different shapes to the same pmap
  last_batch  process 1 leaves the loop two steps early
  programs    the processes run different programs
"""
import json
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from error_fields import error_fields

mode = sys.argv[1]
r = jax.process_index()
local = jax.local_device_count()
psum = jax.pmap(lambda v: jax.lax.psum(v, "i"), axis_name="i")
print("RESULT " + json.dumps({"event": "started", "time": time.time()}), flush=True)
try:
  if mode == "shapes":
    psum(np.ones((local, 4 + 4 * r), np.float32)).block_until_ready()
  elif mode == "last_batch":
    for step in range(5 if r == 0 else 3):
      psum(np.full((local, 1000), step, np.float32)).block_until_ready()
  elif mode == "programs":
    if r == 0:
      psum(np.ones((local, 8), np.float32)).block_until_ready()
    else:
      jax.pmap(lambda v: jax.lax.all_gather(v, "i"), axis_name="i")(np.ones((local, 8), np.int32)).block_until_ready()
  print("RESULT " + json.dumps({"event": "finished"}), flush=True)
except Exception as e:
  print("RESULT " + json.dumps({"event": "error", "time": time.time(), **error_fields(e)}), flush=True)
  raise
