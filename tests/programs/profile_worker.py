"""A process of a multi-process job that takes a jax.profiler trace of a psum
over every process's devices (its first call compiles it: partition,
rewrite), a barrier, and a second psum; the last process reaches the
barrier and the second psum SECONDS late.

usage: profile_worker.py OUT_DIR SECONDS
Writes its trace under OUT_DIR/process-<index>/ and prints RESULT lines.
"""
import json
import os
import sys
import time

import jax
import numpy as np
from jax._src import distributed as jax_distributed

out_dir, seconds = sys.argv[1], float(sys.argv[2])
r = jax.process_index()
n = jax.process_count()
local = jax.local_device_count()


def event(name, **fields):
  print("RESULT " + json.dumps({"event": name, "time": time.time(), **fields}), flush=True)


def psum_step(v):
  return jax.lax.psum(v, "i")


psum = jax.pmap(psum_step, axis_name="i")
x = np.full((local, 1000), r + 1, np.float32)
total = float(local * sum(range(1, n + 1)))
client = jax_distributed.global_state.client
# jax's own name for the program, the reference for its span's name.
program = psum.lower(x).as_text().split("module @", 1)[1].split()[0]

with jax.profiler.trace(os.path.join(out_dir, f"process-{r}")):
  first = float(np.asarray(psum(x))[0, 0])  # call #0: compile, connect
  if r == n - 1:
    time.sleep(seconds)
  client.wait_at_barrier("profiled", 60000)
  if r == n - 1:
    time.sleep(seconds)
  second = float(np.asarray(psum(x))[0, 0])
  # A run's span ends at the engine's completion event, which may come just
  # after its outputs are ready; one that ends after the trace is not in it.
  time.sleep(0.5)
event("done", values=[first, second], expected=total, program=program, local=local)
