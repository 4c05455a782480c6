"""A rank of a fault-injection job: joins from the MYPLUGIN_* variables,
checks that its collectives are right, then all-reduces in a loop (each
step checked against the known sum) until the job fails. Prints RESULT
lines: `ready` after the first checked steps, `error` with the exception
that ended the loop.

usage: python fault_worker.py [STEPS]   (with STEPS: stop after them, shut down, print `done`)
"""
import json
import os
import sys
import time

import numpy as np

from jax_plugin import collectives as C
from jax_plugin import distributed


def result(**kv):
  print("RESULT " + json.dumps(kv), flush=True)


distributed.initialize(heartbeat_timeout_seconds=float(os.environ["TEST_HEARTBEAT_TIMEOUT"]))
rank, n = distributed.process_id(), distributed.num_processes()
addresses = [p["address"] for p in distributed.global_topology()]
step = 0
steps = int(sys.argv[1]) if len(sys.argv) > 1 else None
try:
  while steps is None or step < steps:
    x = np.full(1000, rank + 1 + step, np.float32)
    got = C.all_reduce([x])[0]
    want = sum(r + 1 + step for r in range(n))
    if not np.array_equal(got, np.full(1000, want, np.float32)):
      result(event="wrong", step=step, got=float(got[0]), want=want)
      sys.exit(5)
    step += 1
    if step == 20:
      result(event="ready", addresses=addresses)
    time.sleep(0.005)
except Exception as e:
  result(event="error", step=step, error=str(e), t=time.monotonic())
  raise
result(event="done", steps=step, addresses=addresses)
distributed.shutdown()
